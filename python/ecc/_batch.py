# SPDX-License-Identifier: Apache-2.0
"""The fast path of load_many and load_pinned_many: a step whose every entry is of
the common kinds (an int id or token, a 1-D uint32 numpy array of block ids, a
dense torch CUDA tensor or a C-contiguous numpy array for the destination) is
checked with a few attribute reads per entry and packed in bulk: one
concatenation of all the block ids, one array of the C records.

Anything else, in any entry, answers None, and the caller takes the per-entry
path, which accepts every kind and words every refusal. So this file never
refuses anything itself: it only recognises what it can pack."""

import sys
from array import array

_QWORD = next(code for code in "QL" if array(code).itemsize == 8)
_U32_BYTES = 4


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


def _torch_cuda(device, strided):
    """The reader of dense CUDA tensors on `device` (None: any): (address, bytes),
    else None. Its reads are the cheapest of torch's that answer what
    _buffers._from_torch checks."""

    def read(t):
        if not t.is_cuda or (device is not None and t.get_device() != device):
            return None
        if t.layout is not strided or not t.is_contiguous() or t.is_conj() or t.is_neg():
            return None
        address, nbytes = t.data_ptr(), t.nbytes
        return (address, nbytes) if address and nbytes else None

    return read


def _numpy_host(a):
    """(address, bytes) of a writable C-contiguous array with bytes, else None;
    numpy leaves `strides` out of the interface exactly when the array is
    C-contiguous."""
    iface = a.__array_interface__
    address, readonly = iface["data"]
    if readonly or iface["strides"] is not None or not address or not a.nbytes:
        return None
    return address, a.nbytes


def _reader(engine, device, kinds):
    """(the destination type the fast path takes for this engine, its reader),
    or (None, None): torch CUDA tensors for the CUDA engine, numpy arrays for the
    host engine; any other pairing is the per-entry path's to judge."""
    ndarray, _, tensor, strided = kinds
    if engine == "cuda" and tensor is not None:
        return tensor, _torch_cuda(device, strided)
    if engine == "host":
        return ndarray, _numpy_host
    return None, None


def _words(values):
    """The records as 64-bit words; None where an id or token is not in
    0..2**64-1 (checked here, by the array, rather than once per entry)."""
    try:
        return array(_QWORD, values)
    except OverflowError:
        return None


def _is_step(entries):
    return type(entries) is list or type(entries) is tuple


def load_records(entries, engine, device):
    """For load_many: (records, blocks, owners) or None. records is an array of
    ecc_load_entry_v1_t as 64-bit words (n_blocks is a uint32 padded to 8 bytes,
    so it is a word too), blocks the concatenated ids the records point into
    (to be kept until the C call returns), owners [(transfer_id, (dst,))]."""
    kinds = _kinds()
    if kinds is None or not _is_step(entries) or not entries:
        return None
    ndarray, u32 = kinds[0], kinds[1]
    want, read = _reader(engine, device, kinds)
    ids, words, owners, at = [], [], [], 0
    for e in entries:
        if (type(e) is not tuple and type(e) is not list) or len(e) != 3:
            return None
        tid, block_ids, dst = e
        if type(tid) is not int or type(block_ids) is not ndarray or block_ids.dtype is not u32 \
                or block_ids.ndim != 1 or type(dst) is not want:
            return None
        n = block_ids.size
        found = read(dst)
        if not n or found is None:
            return None
        ids.append(block_ids)
        words += (tid, at, n, found[0], found[1])  # block_ids: an offset until the base is known
        owners.append((tid, (dst,)))
        at += n * _U32_BYTES
    blocks = sys.modules["numpy"].concatenate(ids)
    base = blocks.__array_interface__["data"][0]
    words[1::5] = [base + offset for offset in words[1::5]]
    records = _words(words)
    return None if records is None else (records, blocks, owners)


def pinned_records(entries, engine, device):
    """For load_pinned_many: (records, owners) or None, records an array of
    ecc_load_pinned_v1_t as 64-bit words. Tokens must be ints: an Entry (typed
    or not) takes the per-entry path, which knows what each means."""
    kinds = _kinds()
    if kinds is None or not _is_step(entries) or not entries:
        return None
    want, read = _reader(engine, device, kinds)
    words, owners = [], []
    for e in entries:
        if (type(e) is not tuple and type(e) is not list) or len(e) != 3:
            return None
        tid, token, dst = e
        if type(tid) is not int or type(token) is not int or type(dst) is not want:
            return None
        found = read(dst)
        if found is None:
            return None
        words += (tid, token, found[0], found[1])
        owners.append((tid, (dst,)))
    records = _words(words)
    return None if records is None else (records, owners)
