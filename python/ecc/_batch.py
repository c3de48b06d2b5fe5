# SPDX-License-Identifier: Apache-2.0
"""The fast path of load_many and load_pinned_many: a step whose every entry is of
the common kinds (an int id or token, a 1-D uint32 numpy array of block ids, a
dense torch CUDA tensor or a C-contiguous numpy array for the destination) is
checked and packed column by column: each check is one pass of map() over the
step's ids, block arrays or destinations, run by the interpreter's C loop rather
than by Python statements per entry; the block ids are concatenated once, and
the records are one array of words.

Anything else, in any entry, answers None, and the caller takes the per-entry
path, which accepts every kind and words every refusal. So this file never
refuses anything itself: it only recognises what it can pack."""

import sys
from array import array
from itertools import accumulate, chain
from operator import attrgetter

_QWORD = next(code for code in "QL" if array(code).itemsize == 8)
_U32_BYTES = 4
_DTYPE, _NDIM, _SIZE = attrgetter("dtype"), attrgetter("ndim"), attrgetter("size")
_IS_CUDA, _LAYOUT, _NBYTES = attrgetter("is_cuda"), attrgetter("layout"), attrgetter("nbytes")


def _kinds():
    """(numpy.ndarray, numpy's uint32 dtype, torch.Tensor, torch.strided) of the
    libraries already imported (None for one that is not): what an entry's
    parts are compared with by identity, which costs nothing."""
    np, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    if np is None:
        return None
    tensor = torch.Tensor if torch is not None else None
    strided = torch.strided if torch is not None else None
    return np.ndarray, np.dtype(np.uint32), tensor, strided


def _only(values, kind):
    """Whether every value's type is exactly `kind` (subclasses take the
    per-entry path: they may change what the reads below answer)."""
    return set(map(type, values)) == {kind}


def _torch_cuda(dsts, device, kinds):
    """(addresses, bytes) of dense CUDA tensors on `device` (None: any), else
    None: what _buffers._from_torch checks, by the cheapest of torch's reads,
    in the order that keeps each one defined (a sparse tensor has no
    contiguity to ask)."""
    tensor, strided = kinds[2], kinds[3]
    if not _only(dsts, tensor) or not all(map(_IS_CUDA, dsts)):
        return None
    if set(map(_LAYOUT, dsts)) != {strided}:
        return None
    if device is not None and set(map(tensor.get_device, dsts)) != {device}:
        return None
    if not all(map(tensor.is_contiguous, dsts)) or any(map(tensor.is_conj, dsts)) or \
            any(map(tensor.is_neg, dsts)):
        return None
    return list(map(tensor.data_ptr, dsts)), list(map(_NBYTES, dsts))


def _numpy_address(a):
    """The address of a writable C-contiguous array, else 0; numpy leaves
    `strides` out of the interface exactly when the array is C-contiguous."""
    iface = a.__array_interface__
    address, readonly = iface["data"]
    return 0 if readonly or iface["strides"] is not None else address


def _numpy_host(dsts, kinds):
    if not _only(dsts, kinds[0]):
        return None
    return list(map(_numpy_address, dsts)), list(map(_NBYTES, dsts))


def _destinations(dsts, engine, device, kinds):
    """(addresses, bytes) of destinations the fast path takes for this engine
    (torch CUDA tensors for the CUDA engine, numpy arrays for the host
    engine; any other pairing is the per-entry path's to judge), none empty."""
    if engine == "cuda" and kinds[2] is not None:
        found = _torch_cuda(dsts, device, kinds)
    elif engine == "host":
        found = _numpy_host(dsts, kinds)
    else:
        return None
    if found is None or 0 in found[0] or 0 in found[1]:
        return None
    return found


def _columns(entries):
    """The step's three columns, if it is a non-empty list or tuple of 3-tuples
    or 3-lists."""
    if (type(entries) is not list and type(entries) is not tuple) or not entries:
        return None
    if not set(map(type, entries)) <= {tuple, list} or set(map(len, entries)) != {3}:
        return None
    return tuple(zip(*entries))


def _words(columns):
    """The records as 64-bit words, the columns interleaved; None where a value
    is not in 0..2**64-1 (checked here, by the array, not once per entry)."""
    try:
        return array(_QWORD, chain.from_iterable(zip(*columns)))
    except OverflowError:
        return None


def load_records(entries, engine, device):
    """For load_many: (records, blocks, transfer_ids, dsts) or None. records is
    an array of ecc_load_entry_v1_t as 64-bit words (n_blocks is a uint32 padded
    to 8 bytes, so it is a word too), blocks the concatenated ids the records
    point into (to be kept until the C call returns); each dst is what keeps its
    load's destination alive."""
    kinds = _kinds()
    columns = _columns(entries) if kinds is not None else None
    if columns is None:
        return None
    tids, ids, dsts = columns
    if not _only(tids, int) or not _only(ids, kinds[0]) or set(map(_DTYPE, ids)) != {kinds[1]} \
            or set(map(_NDIM, ids)) != {1}:
        return None
    sizes = list(map(_SIZE, ids))
    found = _destinations(dsts, engine, device, kinds) if 0 not in sizes else None
    if found is None:
        return None
    blocks = sys.modules["numpy"].concatenate(ids)
    base = blocks.__array_interface__["data"][0]
    starts = [base + _U32_BYTES * at for at in accumulate(sizes[:-1], initial=0)]
    words = _words((tids, starts, sizes, found[0], found[1]))
    if words is None:
        return None
    return words, blocks, tids, dsts


def pinned_records(entries, engine, device):
    """For load_pinned_many: (records, transfer_ids, dsts) or None, records an
    array of ecc_load_pinned_v1_t as 64-bit words. Tokens must be ints: an Entry
    (typed or not) takes the per-entry path, which knows what each means."""
    kinds = _kinds()
    columns = _columns(entries) if kinds is not None else None
    if columns is None:
        return None
    tids, tokens, dsts = columns
    if not _only(tids, int) or not _only(tokens, int):
        return None
    found = _destinations(dsts, engine, device, kinds)
    if found is None:
        return None
    words = _words((tids, tokens, found[0], found[1]))
    if words is None:
        return None
    return words, tids, dsts
