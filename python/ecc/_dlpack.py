# SPDX-License-Identifier: Apache-2.0
"""Reading a DLPack capsule ("dltensor", the unversioned protocol) without a
compiled extension: the DLTensor's address, shape, strides, element size and
device. The capsule is left unconsumed, so the producer's memory lives as long as it."""

import ctypes
from ctypes import POINTER, Structure, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint64

CPU, CUDA, CUDA_HOST, CUDA_MANAGED = 1, 2, 3, 13
DEVICE_NAMES = {CPU: "CPU", CUDA: "CUDA", CUDA_HOST: "CUDA pinned host", 4: "OpenCL",
                7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm", 11: "ROCm host",
                CUDA_MANAGED: "CUDA managed", 14: "oneAPI"}


class _Device(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class _DataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _Tensor(Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", c_int32),
        ("dtype", _DataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),  # NULL: compact row-major
        ("byte_offset", c_uint64),
    ]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, c_char_p]


class Described:
    """What a capsule's DLTensor says about its memory."""

    __slots__ = ("address", "shape", "strides", "itemsize", "device_type", "device_id", "bits")

    def __init__(self, address, shape, strides, itemsize, device_type, device_id, bits):
        self.address, self.shape, self.strides = address, shape, strides
        self.itemsize, self.device_type, self.device_id, self.bits = itemsize, device_type, \
            device_id, bits


def describe(capsule):
    """Described of an unconsumed "dltensor" capsule; ValueError when it is not one."""
    if not _is_valid(capsule, b"dltensor"):
        raise ValueError("__dlpack__() did not return an unconsumed 'dltensor' capsule")
    t = _Tensor.from_address(_get_pointer(capsule, b"dltensor"))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
    bits = t.dtype.bits * t.dtype.lanes
    address = (t.data or 0) + t.byte_offset
    return Described(address, shape, strides, bits // 8, t.device.device_type,
                     t.device.device_id, bits)
