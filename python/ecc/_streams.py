# SPDX-License-Identifier: Apache-2.0
"""The compute stream of flush and load as the C call takes it (a cudaStream_t
value): from None, an int, a torch or CuPy stream or any object with
__cuda_stream__; and the default, torch's current stream under the CUDA engine."""

import sys

from ._buffers import module_of
from .errors import invalid

U64_MAX = (1 << 64) - 1


def _protocol_handle(stream, what):
    proto = stream.__cuda_stream__
    value = proto() if callable(proto) else proto
    if not (isinstance(value, tuple) and len(value) == 2):
        raise invalid(f"{what}: {type(stream).__name__}.__cuda_stream__ gave {value!r}, "
                      "not a (version, handle) pair")
    return value[1]


def _handle(stream, what):
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return _protocol_handle(stream, what)
    kind = module_of(stream)
    if kind == "torch" and hasattr(stream, "cuda_stream"):
        return stream.cuda_stream
    if kind == "cupy" and hasattr(stream, "ptr"):
        return stream.ptr
    raise TypeError(f"{what}: stream must be None, an int (cudaStream_t), a torch or CuPy stream "
                    f"or an object with __cuda_stream__, not {type(stream).__name__}")


def _torch_current():
    """torch's current stream where torch has initialised CUDA; else None, since
    then no torch work can be queued that the copy would have to follow.

    Read through the two calls torch's own compiler uses for it where they exist:
    the public current_stream() builds a Stream object, which costs more (4 us on
    the H200's host) than the rest of a 32-entry step's Python per entry."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    device = getattr(torch._C, "_cuda_getDevice", None)
    if raw is not None and device is not None:
        return raw(device())
    return torch.cuda.current_stream().cuda_stream


def stream_value(stream, engine, what):
    """The cudaStream_t value for a C call (None for NULL)."""
    if stream is None:
        return _torch_current() if engine == "cuda" else None
    handle = _handle(stream, what)
    if not isinstance(handle, int) or isinstance(handle, bool) or not 0 <= handle <= U64_MAX:
        raise invalid(f"{what}: stream handle {handle!r} is not a cudaStream_t value")
    return handle or None
