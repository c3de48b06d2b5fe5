# SPDX-License-Identifier: Apache-2.0
"""Block ids as the C calls take them (a uint32_t array and its length), from a
sequence of ints, an array.array, an integer numpy array or a CPU torch tensor,
converted in C loops (numpy's or array's), never one Python step per id."""

import sys
from array import array

from ._buffers import module_of
from .errors import invalid

U32_MAX = 0xFFFFFFFF
_U32_CODE = next(code for code in "IL" if array(code).itemsize == 4)


class Blocks:
    """A uint32 array the C call reads: its address, its length, and the object
    that owns the memory (kept for the duration of the call)."""

    __slots__ = ("address", "count", "owner")

    def __init__(self, address, count, owner):
        self.address, self.count, self.owner = address, count, owner


def _from_numpy(ids, what):
    np = sys.modules["numpy"]
    if ids.dtype == np.uint32 and ids.ndim == 1 and ids.size and ids.flags.c_contiguous:
        return Blocks(ids.ctypes.data, ids.size, ids)  # already what the C call reads
    if ids.ndim != 1:
        raise invalid(f"{what}: block_ids must be one-dimensional, not of shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise invalid(f"{what}: block_ids must be integers, not of dtype {ids.dtype}")
    if ids.size == 0:
        raise invalid(f"{what}: block_ids is empty")
    if ids.dtype != np.uint32:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high > U32_MAX:
            bad = low if low < 0 else high
            index = int(np.argmax(ids == bad))
            raise invalid(f"{what}: block id {bad} (at index {index}) is not in 0..{U32_MAX}")
        ids = ids.astype(np.uint32)
    ids = np.ascontiguousarray(ids)
    return Blocks(ids.ctypes.data, int(ids.size), ids)


def _refusal(seq, what):
    """The error naming the first id array() refused; only ever run on the error
    path, where the cost of a Python loop does not matter."""
    try:
        items = list(seq)
    except TypeError:
        return invalid(f"{what}: block_ids must be a sequence of ints, not {type(seq).__name__}")
    for index, value in enumerate(items):
        try:
            array(_U32_CODE, [value])
        except (TypeError, OverflowError):
            return invalid(f"{what}: block id {value!r} (at index {index}) is not an int "
                           f"in 0..{U32_MAX}")
    return invalid(f"{what}: block_ids must be a sequence of ints")


def _from_sequence(seq, what):
    if isinstance(seq, (str, bytes)):
        raise invalid(f"{what}: block_ids must be a sequence of ints, not {type(seq).__name__}")
    if isinstance(seq, array) and seq.itemsize == 4 and seq.typecode in "IL":
        packed = seq
    else:
        try:
            packed = array(_U32_CODE, seq)
        except (TypeError, OverflowError):
            raise _refusal(seq, what) from None
    if len(packed) == 0:
        raise invalid(f"{what}: block_ids is empty")
    return Blocks(packed.buffer_info()[0], len(packed), packed)


def _from_torch(t, what):
    if t.dtype.is_floating_point or t.dtype.is_complex or str(t.dtype) == "torch.bool":
        raise invalid(f"{what}: block_ids must be integers, not of dtype {t.dtype}")
    if t.dim() != 1:
        raise invalid(f"{what}: block_ids must be one-dimensional, not of shape "
                      f"{tuple(t.shape)}")
    return _from_sequence(t.detach().cpu().tolist(), what)


def blocks_of(ids, what):
    """Blocks for `ids`; raises EccError(ECC_ERR_INVALID) naming `what` and the bad id."""
    kind = module_of(ids)
    if kind == "numpy" and hasattr(ids, "dtype") and hasattr(ids, "ndim"):
        if ids.ndim == 0:
            raise invalid(f"{what}: block_ids must be a sequence, not a scalar")
        return _from_numpy(ids, what)
    if kind == "torch" and hasattr(ids, "dtype") and hasattr(ids, "dim"):
        return _from_torch(ids, what)
    return _from_sequence(ids, what)
