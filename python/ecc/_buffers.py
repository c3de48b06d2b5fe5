# SPDX-License-Identifier: Apache-2.0
"""Save sources and load destinations as the C calls take them (address and size)
from torch, numpy, CuPy, __cuda_array_interface__, __array_interface__, DLPack
or buffers, checked for contiguity, size, writability and the kind of memory.

Nothing is copied, and torch or CuPy is never imported: an object is recognised
by the module of its type."""

import ctypes
import sys

from . import _dlpack
from .errors import invalid

HOST, PINNED, CUDA, MANAGED = "host", "pinned", "cuda", "managed"


class Memory:
    """Bytes the copy reads or writes, and the objects that keep them alive."""

    __slots__ = ("address", "nbytes", "kind", "device", "owners")

    def __init__(self, address, nbytes, kind, device, owners):
        self.address, self.nbytes, self.kind = address, nbytes, kind
        self.device, self.owners = device, owners


_MODULE_OF_TYPE = {}  # type -> its top-level module: asked once per type, not per call


def module_of(obj):
    """The top-level module of obj's type ("torch", "numpy", ...): how an object
    is recognised without importing its library."""
    t = type(obj)
    name = _MODULE_OF_TYPE.get(t)
    if name is None:
        name = _MODULE_OF_TYPE[t] = t.__module__.split(".", 1)[0]
    return name


def _c_contiguous(shape, strides, itemsize):
    """Whether byte strides describe a dense row-major array (extent-1 axes, whose
    stride never matters, are skipped)."""
    if strides is None:
        return True
    expected = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _count(shape):
    n = 1
    for extent in shape:
        n *= extent
    return n


def _from_torch(t, what):
    # Every attribute read here is a C call of torch's; the cheapest that answer.
    if t.layout is not sys.modules["torch"].strided:
        raise invalid(f"{what} is a {t.layout} tensor; only dense (strided) tensors can be copied")
    if not t.is_contiguous():
        raise invalid(f"{what} is not contiguous (shape {tuple(t.shape)}, stride {t.stride()}): "
                      "pass .contiguous()")
    if t.is_conj() or t.is_neg():
        raise invalid(f"{what} is a lazy conjugate or negative view: pass .resolve_conj() or "
                      ".resolve_neg()")
    if t.is_cuda:
        kind, index = CUDA, t.get_device()
    elif t.device.type == "cpu":
        kind, index = (PINNED if t.is_pinned() else HOST), None
    else:
        raise invalid(f"{what} is on device {t.device}; only CPU and CUDA tensors can be copied")
    return Memory(t.data_ptr(), t.numel() * t.element_size(), kind, index, (t,))


def _from_interface(obj, iface, kind, what, writable):
    if iface.get("mask") is not None:
        raise invalid(f"{what} is a masked array")
    address, readonly = iface["data"] if isinstance(iface["data"], tuple) else (None, None)
    if address is None:
        return None  # data given as a buffer object: the buffer protocol handles it
    shape = tuple(iface["shape"])
    itemsize = int(iface["typestr"][2:])
    if not _c_contiguous(shape, iface.get("strides"), itemsize):
        raise invalid(f"{what} is not C-contiguous (shape {shape}, strides {iface['strides']})")
    if writable and readonly:
        raise invalid(f"{what} is read-only")
    return Memory(address + iface.get("offset", 0), _count(shape) * itemsize, kind, None, (obj,))


def _from_numpy(a, what, writable):
    if not a.flags.c_contiguous:
        raise invalid(f"{what} is not C-contiguous (shape {a.shape}, strides {a.strides}): "
                      "pass numpy.ascontiguousarray(...)")
    if writable and not a.flags.writeable:
        raise invalid(f"{what} is read-only")
    return Memory(a.ctypes.data, a.nbytes, HOST, None, (a,))


_DLPACK_KINDS = {_dlpack.CPU: HOST, _dlpack.CUDA: CUDA, _dlpack.CUDA_HOST: PINNED,
                 _dlpack.CUDA_MANAGED: MANAGED}


def _from_dlpack(obj, what):
    device_type, _ = obj.__dlpack_device__()
    if device_type not in _DLPACK_KINDS:
        name = _dlpack.DEVICE_NAMES.get(device_type, f"device type {device_type}")
        raise invalid(f"{what} lives in {name} memory, which ecc cannot copy")
    capsule = obj.__dlpack__()
    try:
        d = _dlpack.describe(capsule)
    except ValueError as e:
        raise invalid(f"{what}: {e}") from None
    if d.bits % 8:
        raise invalid(f"{what} has {d.bits}-bit elements; only whole bytes can be copied")
    strides = None if d.strides is None else tuple(s * d.itemsize for s in d.strides)
    if not _c_contiguous(d.shape, strides, d.itemsize):
        raise invalid(f"{what} is not C-contiguous (shape {d.shape}, strides {d.strides})")
    device = d.device_id if device_type == _dlpack.CUDA else None
    return Memory(d.address, _count(d.shape) * d.itemsize, _DLPACK_KINDS[device_type], device,
                  (obj, capsule))


def _readonly_address(view, obj):
    """The address of a read-only buffer: bytes directly, others through numpy
    (ctypes can only wrap writable buffers)."""
    if isinstance(obj, bytes):
        return ctypes.cast(ctypes.c_char_p(obj), ctypes.c_void_p).value, obj
    try:
        import numpy
    except ImportError:
        return None, None
    arr = numpy.frombuffer(view, dtype=numpy.uint8)
    return arr.ctypes.data, arr


def _from_buffer(obj, what, writable):
    try:
        view = memoryview(obj)
    except TypeError:
        return None
    if not view.c_contiguous:
        raise invalid(f"{what} is not a C-contiguous buffer")
    if view.readonly:
        if writable:
            raise invalid(f"{what} is read-only")
        address, owner = _readonly_address(view, obj)
        if address is None:
            raise invalid(f"{what} is a read-only {type(obj).__name__}; without numpy only "
                          "bytes and writable buffers can be saved")
    else:
        owner = (ctypes.c_char * view.nbytes).from_buffer(view)
        address = ctypes.addressof(owner)
    return Memory(address, view.nbytes, HOST, None, (obj, owner))


def _dispatch(obj, what, writable):
    kind = module_of(obj)
    if kind == "torch" and hasattr(obj, "data_ptr"):
        return _from_torch(obj, what)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(obj, cai, CUDA, what, writable)
    if kind == "numpy" and type(obj) is sys.modules["numpy"].ndarray:
        return _from_numpy(obj, what, writable)
    ai = getattr(obj, "__array_interface__", None)
    if ai is not None:
        found = _from_interface(obj, ai, HOST, what, writable)
        if found is not None:
            return found
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, what)
    found = _from_buffer(obj, what, writable)
    if found is None:
        raise TypeError(f"{what}: a {type(obj).__module__}.{type(obj).__qualname__} is not a "
                        "tensor or array (torch, numpy, CuPy, __cuda_array_interface__, "
                        "__array_interface__, DLPack or a buffer)")
    return found


def memory_of(obj, what, writable):
    """The Memory of a save source (writable False) or load destination (True)."""
    mem = _dispatch(obj, what, writable)
    if mem.nbytes == 0:
        raise invalid(f"{what} has no bytes")
    if not mem.address:
        raise invalid(f"{what} has no data pointer")
    return mem


def _where(mem):
    if mem.kind == CUDA:
        return "CUDA device memory" + ("" if mem.device is None else f" (device {mem.device})")
    return {HOST: "pageable host memory", PINNED: "pinned host memory",
            MANAGED: "CUDA managed memory"}[mem.kind]


def check_reachable(mem, engine, device, what):
    """Refuse memory the connector's engine cannot reach: a copy from the wrong kind
    faults (the host engine would read a device address, the CUDA engine's kernel
    would read pageable memory), which the C library does not check."""
    if engine == "host" and mem.kind == CUDA:
        raise invalid(f"{what} is {_where(mem)}, which the host engine cannot reach: pass host "
                      "memory, or open the connector with engine.type = cuda")
    if engine == "cuda" and mem.kind == HOST:
        raise invalid(f"{what} is {_where(mem)}, which the CUDA engine cannot reach: pass a "
                      "CUDA tensor or pinned host memory (tensor.pin_memory())")
    if engine == "cuda" and mem.kind == CUDA and None not in (mem.device, device) \
            and mem.device != device:
        raise invalid(f"{what} is on CUDA device {mem.device}, but the connector copies on "
                      f"device {device} (engine.device)")
