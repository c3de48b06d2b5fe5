# SPDX-License-Identifier: Apache-2.0
"""The adapters on their own: stream objects to cudaStream_t values, foreign array
interfaces and DLPack to addresses (checked against numpy's own), and the kinds
of memory each engine reaches.

Library types are stood in for by classes whose __module__ names the library,
which is how the adapters recognise them."""

import ctypes
import sys

import numpy as np
import pytest

import ecc
from ecc import _blocks, _buffers, _streams


def make(module, name, **attrs):
    return type(name, (), dict(attrs, __module__=module))()


class ProtocolMethod:
    def __cuda_stream__(self):
        return (0, 0x1234)


class ProtocolAttribute:
    __cuda_stream__ = (0, 0x99)


@pytest.mark.parametrize("stream, value", [
    (None, None), (0, None), (2, 2), (0xDEADBEEF, 0xDEADBEEF),
    (ProtocolMethod(), 0x1234), (ProtocolAttribute(), 0x99),
    (make("torch.cuda.streams", "Stream", cuda_stream=55), 55),
    (make("cupy.cuda.stream", "Stream", ptr=77), 77),
])
def test_streams_become_handles(stream, value):
    assert _streams.stream_value(stream, "cuda", "flush") == value


@pytest.mark.parametrize("stream, error, match", [
    (True, TypeError, "not bool"),
    ("0", TypeError, "not str"),
    (make("torch.cuda.streams", "Event"), TypeError, "not Event"),
    (-1, ecc.EccError, "stream handle -1"),
    (2**64, ecc.EccError, "stream handle"),
    (make("x", "Odd", __cuda_stream__=lambda self: 5), ecc.EccError, "not a .version, handle."),
])
def test_bad_streams_are_refused(stream, error, match):
    with pytest.raises(error, match=match):
        _streams.stream_value(stream, "cuda", "flush")


def test_the_default_stream_without_torch_is_null(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert _streams.stream_value(None, "cuda", "flush") is None
    assert _streams.stream_value(None, "host", "flush") is None


def test_an_array_interface_gives_numpy_s_address():
    a = np.arange(64, dtype=np.float32)
    holder = make("foreign", "Array", __array_interface__=a.__array_interface__)
    mem = _buffers.memory_of(holder, "src", writable=True)
    assert (mem.address, mem.nbytes, mem.kind) == (a.ctypes.data, a.nbytes, "host")


def test_strided_and_masked_interfaces_are_refused():
    a = np.zeros((4, 4), np.float32)[:, ::2]
    strided = make("foreign", "Array", __array_interface__=a.__array_interface__)
    with pytest.raises(ecc.EccError, match=r"src is not C-contiguous .shape \(4, 2\)"):
        _buffers.memory_of(strided, "src", writable=False)
    masked = dict(np.zeros(4).__array_interface__, mask=np.ones(4))
    with pytest.raises(ecc.EccError, match="masked"):
        _buffers.memory_of(make("foreign", "Array", __array_interface__=masked), "src", False)


def test_extent_one_axes_do_not_spoil_contiguity():
    a = np.zeros((3, 1, 5), np.int16)
    iface = dict(a.__array_interface__, strides=(10, 12345, 2))
    mem = _buffers.memory_of(make("foreign", "Array", __array_interface__=iface), "src", False)
    assert mem.nbytes == a.nbytes


class DLPackOnly:
    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_gives_numpy_s_address_and_keeps_the_capsule():
    a = np.arange(100, dtype=np.int64)[10:90]
    mem = _buffers.memory_of(DLPackOnly(a), "src", writable=True)
    assert (mem.address, mem.nbytes, mem.kind) == (a.ctypes.data, a.nbytes, "host")
    assert any(type(o).__name__ == "PyCapsule" for o in mem.owners)


def test_strided_dlpack_is_refused():
    with pytest.raises(ecc.EccError, match="not C-contiguous"):
        _buffers.memory_of(DLPackOnly(np.arange(20)[::2]), "src", writable=False)


def test_dlpack_of_an_unknown_device_is_refused():
    odd = make("x", "Odd", __dlpack__=lambda self: None, __dlpack_device__=lambda self: (10, 0))
    with pytest.raises(ecc.EccError, match="ROCm memory"):
        _buffers.memory_of(odd, "src", writable=False)


class Fake:
    __slots__ = ("kind", "device")

    def __init__(self, kind, device=None):
        self.kind, self.device = kind, device


@pytest.mark.parametrize("engine, kind, device, ok", [
    ("host", "host", None, True), ("host", "pinned", None, True),
    ("host", "managed", None, True), ("host", "cuda", 0, False),
    ("cuda", "cuda", 0, True), ("cuda", "pinned", None, True),
    ("cuda", "managed", None, True), ("cuda", "host", None, False),
    ("cuda", "cuda", 1, False), ("cuda", "cuda", None, True),
])
def test_each_engine_reaches_its_kinds_of_memory(engine, kind, device, ok):
    check = lambda: _buffers.check_reachable(Fake(kind, device), engine, 0, "src")  # noqa: E731
    if ok:
        check()
    else:
        with pytest.raises(ecc.EccError, match="cannot reach|copies on device 0"):
            check()


def _read_blocks(blocks):
    return list((ctypes.c_uint32 * blocks.count).from_address(blocks.address))


def test_a_large_numpy_array_of_ids_is_converted_in_one_step():
    ids = np.arange(1_000_000, dtype=np.int64)[::-1]
    blocks = _blocks.blocks_of(ids, "load 1")
    assert blocks.count == 1_000_000 and blocks.owner.dtype == np.uint32
    got = (ctypes.c_uint32 * 4).from_address(blocks.address)
    assert list(got) == [999_999, 999_998, 999_997, 999_996]


def test_a_uint32_numpy_array_is_used_in_place():
    ids = np.array([5, 6, 7], np.uint32)
    assert _blocks.blocks_of(ids, "save").address == ids.ctypes.data


def test_sequences_keep_their_values():
    assert _read_blocks(_blocks.blocks_of((4, 0, 2**32 - 1), "save")) == [4, 0, 2**32 - 1]
    assert _read_blocks(_blocks.blocks_of(range(3, 6), "save")) == [3, 4, 5]
