# SPDX-License-Identifier: Apache-2.0
"""The bulk path of load_many and load_pinned_many (_batch.py): the records it
packs say what the per-entry path would have said, it takes only the kinds it
knows, and any other entry sends the whole call to the per-entry path, whose
refusals are unchanged."""

import ctypes

import numpy as np
import pytest
from conftest import pattern, poll_until

from ecc import _abi, _batch

U64_MAX = (1 << 64) - 1


def step(n=4, blocks=3, block_size=64):
    rng = np.random.default_rng(n)
    ids = [rng.permutation(256)[:blocks].astype(np.uint32) for _ in range(n)]
    dsts = [np.zeros(blocks * block_size - 5 * i, np.uint8) for i in range(n)]
    return [(1000 + i, ids[i], dsts[i]) for i in range(n)]


def test_the_records_say_what_each_entry_says():
    entries = step()
    words, blocks, tids, owners = _batch.load_records(entries, "host", None)
    records = (_abi.LoadEntry * len(entries)).from_buffer(words)
    for rec, (tid, ids, dst) in zip(records, entries):
        assert rec.transfer_id == tid
        assert rec.n_blocks == ids.size
        assert ctypes.string_at(rec.block_ids, ids.nbytes) == ids.tobytes()
        assert rec.dst == dst.ctypes.data and rec.dst_capacity == dst.nbytes
    assert list(tids) == [e[0] for e in entries]
    assert all(own is e[2] for own, e in zip(owners, entries))
    assert blocks.size == sum(e[1].size for e in entries)


def test_pinned_records_say_what_each_entry_says():
    dsts = [np.zeros(100 + i, np.uint8) for i in range(3)]
    entries = [(7 + i, 50 + i, dsts[i]) for i in range(3)]
    words, tids, owners = _batch.pinned_records(entries, "host", None)
    records = (_abi.LoadPinned * 3).from_buffer(words)
    for rec, (tid, token, dst) in zip(records, entries):
        assert (rec.transfer_id, rec.token) == (tid, token)
        assert (rec.dst, rec.dst_capacity) == (dst.ctypes.data, dst.nbytes)
    assert list(tids) == [7, 8, 9] and all(o is d for o, d in zip(owners, dsts))


def odd_entries():
    """Steps that are each fine but for one entry the bulk path does not take."""
    base = step(3)
    tid, ids, dst = base[1]
    return {
        "a bool id": (True, ids, dst),
        "a negative id": (-1, ids, dst),
        "an id past 64 bits": (U64_MAX + 1, ids, dst),
        "ids as a list": (tid, ids.tolist(), dst),
        "int64 ids": (tid, ids.astype(np.int64), dst),
        "2-D ids": (tid, ids.reshape(1, -1), dst),
        "no ids": (tid, np.zeros(0, np.uint32), dst),
        "a strided dst": (tid, ids, np.zeros(2 * dst.size, np.uint8)[::2]),
        "a read-only dst": (tid, ids, np.frombuffer(bytes(dst.size), np.uint8)),
        "an empty dst": (tid, ids, np.zeros(0, np.uint8)),
        "a bytearray dst": (tid, ids, bytearray(dst.size)),
        "a 2-tuple": (tid, ids),
    }


@pytest.mark.parametrize("case", list(odd_entries()))
def test_one_odd_entry_sends_the_whole_step_elsewhere(case):
    entries = step(3)
    entries[1] = odd_entries()[case]
    assert _batch.load_records(entries, "host", None) is None


def test_steps_it_does_not_take():
    entries = step(2)
    assert _batch.load_records([], "host", None) is None
    assert _batch.load_records(iter(entries), "host", None) is None
    assert _batch.load_records(entries, None, None) is None  # a plugin without describe
    assert _batch.load_records(entries, "cuda", 0) is None  # numpy memory: the CUDA engine's refusal
    assert _batch.pinned_records([(1, True, entries[0][2])], "host", None) is None


def test_a_step_of_the_common_kinds_round_trips_through_the_bulk_path(open_connector, monkeypatch):
    c = open_connector(block_size=64, blocks=256)
    taken = []
    real = _batch.load_records
    monkeypatch.setattr(_batch, "load_records", lambda *a: taken.append(real(*a)) or taken[-1])
    srcs = [pattern(150, seed) for seed in range(4)]
    ids = [np.arange(8 * i, 8 * i + 3, dtype=np.uint32)[::-1].copy() for i in range(4)]
    c.save_many([(f"k{i}", srcs[i], ids[i]) for i in range(4)])
    c.flush()
    poll_until(c, 4)
    dsts = [np.zeros(150, np.uint8) for _ in range(4)]
    c.load_many([(i, ids[i], dsts[i]) for i in range(4)])
    assert taken and taken[-1] is not None
    assert sorted(d.transfer_id for d in poll_until(c, 4)) == [0, 1, 2, 3]
    for src, dst in zip(srcs, dsts):
        assert np.array_equal(src, dst)
    assert c.pending == 0


def test_a_mixed_step_loads_every_entry_through_the_per_entry_path(open_connector):
    c = open_connector(block_size=64, blocks=256)
    src = pattern(128, 3)
    c.save("k", src, [5, 9])
    c.flush()
    poll_until(c, 1)
    dsts = [np.zeros(128, np.uint8), bytearray(128)]
    c.load_many([(1, np.array([5, 9], np.uint32), dsts[0]), (2, [5, 9], dsts[1])])
    poll_until(c, 2)
    assert np.array_equal(dsts[0], src) and bytes(dsts[1]) == src.tobytes()


@pytest.mark.parametrize("bad, error, words", [
    ((True, None, None), TypeError, "load: transfer_id must be an int, not bool"),
    ((U64_MAX + 1, None, None), Exception, "load: transfer_id is"),
    ((1, np.array([1, 300], np.uint32), None), Exception, "out of range"),
])
def test_refusals_keep_their_words(open_connector, bad, error, words):
    c = open_connector(block_size=64, blocks=256)
    tid, ids, dst = bad
    ids = np.array([1, 2], np.uint32) if ids is None else ids
    entries = [(0, np.array([3], np.uint32), np.zeros(64, np.uint8)),
               (tid, ids, np.zeros(128, np.uint8))]
    with pytest.raises(error, match=words):
        c.load_many(entries)
    assert c.pending == 0
