# SPDX-License-Identifier: Apache-2.0
"""The directory calls of ABI 1.1: an entry's whole life (reserve, save_reserved,
lookup, load_pinned, release), dedup, abort, unpin, remove, list, eviction, a
full region, stale tokens, and a token reserved by another connector."""

import numpy as np
import pytest
from conftest import pattern, poll_until

import ecc
from ecc import EntryState

BS = 1024


def publish(c, key, data):
    r = c.reserve(key, data.nbytes)
    assert r.state == EntryState.RESERVED, r
    c.save_reserved(r.token, data)
    c.flush()
    (done,) = poll_until(c, 1)
    assert done.ok and done.key == key
    return r


def read(c, key, tid=1):
    (e,) = c.lookup(key)
    assert e.state == EntryState.READY, f"{key} is {e.state.name}"
    dst = np.zeros(e.nbytes, np.uint8)
    c.load_pinned(tid, e.token, dst)
    (done,) = poll_until(c, 1)
    assert done.ok and done.transfer_id == tid and done.nbytes == e.nbytes
    return dst


def test_an_entry_lives_reserved_ready_pinned_and_released(open_connector):
    c = open_connector(directory=True, blocks=64)
    data = pattern(5 * BS + 100, seed=1)
    r = c.reserve("img-1", data.nbytes)
    assert (r.state, r.nbytes, r.n_blocks, len(r.extents)) == \
        (EntryState.RESERVED, data.nbytes, 6, 1)
    assert r.token != 0 and r.block_ids == list(range(r.extents[0][0], r.extents[0][0] + 6))
    assert c.lookup("img-1")[0].state == EntryState.ABSENT, "visible before it was saved"
    assert c.reserve("img-1", data.nbytes).state == EntryState.WRITING
    c.save_reserved(r, data)  # an Entry stands for its token
    c.flush()
    (s,) = poll_until(c, 1)
    assert (s.direction, s.key, s.nbytes, s.ok) == ("save", "img-1", data.nbytes, True)
    (f,) = c.lookup(["img-1"])
    assert f.state == EntryState.READY and f.extents == r.extents and f.token != 0
    assert c.stats().directory.pins_live == 1
    dst = np.zeros(data.nbytes, np.uint8)
    c.load_pinned(42, f.token, dst)
    (ld,) = poll_until(c, 1)
    assert (ld.transfer_id, ld.nbytes, ld.ok) == (42, data.nbytes, True)
    assert np.array_equal(dst, data)
    assert c.stats().directory.pins_live == 0, "the polled load did not release its pin"
    with pytest.raises(ecc.EccError) as stale:
        c.unpin(f.token)
    assert stale.value.code == ecc.ECC_ERR_CLOSED
    assert c.reserve("img-1", data.nbytes).state == EntryState.READY  # dedup
    d = c.stats().directory
    assert (d.entries, d.blocks_used, d.blocks_free) == (1, 6, 58)
    assert (d.reservations, d.dedup_hits, d.lookups, d.hits, d.misses, d.pins) == \
        (1, 2, 2, 1, 1, 1)


def test_lookup_answers_each_key_of_one_call(open_connector):
    c = open_connector(directory=True)
    publish(c, "a", pattern(BS, 1))
    publish(c, "c", pattern(2 * BS, 2))
    found = c.lookup(["a", "b", b"c"], ranks=1)
    assert [e.state for e in found] == [EntryState.READY, EntryState.ABSENT, EntryState.READY]
    assert found[1].token == 0 and found[1].extents == () and found[1].nbytes == 0
    for e in (found[0], found[2]):
        c.unpin(e.token)
    assert c.lookup([]) == []


def test_abort_frees_the_reservation(open_connector):
    c = open_connector(directory=True, blocks=64)
    r = c.reserve("k", 10 * BS)
    assert c.stats().directory.blocks_free == 54
    c.abort_reserved(r.token)
    d = c.stats().directory
    assert (d.entries, d.blocks_free) == (0, 64)
    assert c.list() == []
    with pytest.raises(ecc.EccError) as again:
        c.abort_reserved(r.token)
    assert again.value.code == ecc.ECC_ERR_CLOSED
    with pytest.raises(ecc.EccError) as save:
        c.save_reserved(r.token, pattern(10 * BS, 1))
    assert save.value.code == ecc.ECC_ERR_CLOSED and c.pending == 0


def test_a_pin_for_two_ranks_needs_two_releases(open_connector):
    c = open_connector(directory=True)
    data = pattern(BS, 3)
    publish(c, "k", data)
    (e,) = c.lookup("k", ranks=2)
    c.unpin(e.token)
    with pytest.raises(ecc.Busy, match="remove"):
        c.remove("k")
    dst = np.zeros(BS, np.uint8)
    c.load_pinned(1, e.token, dst)
    poll_until(c, 1)
    assert np.array_equal(dst, data) and c.stats().directory.pins_live == 0
    c.remove("k")
    assert c.lookup("k")[0].state == EntryState.ABSENT
    with pytest.raises(ecc.EccError) as absent:
        c.remove("k")
    assert absent.value.code == ecc.ECC_ERR_RANGE


def test_list_reports_every_live_entry(open_connector):
    c = open_connector(directory=True, blocks=1024, **{"directory.max_entries": "400"})
    for i in range(300):  # more than one page of the listing
        publish(c, f"ready-{i}", pattern(BS * (1 + i % 2), i))
    c.reserve("reserved", 3 * BS)
    (pinned,) = c.lookup("ready-7")
    listed = {e.key: e for e in c.list()}
    assert len(listed) == 301
    assert listed["reserved"].state == EntryState.RESERVED and listed["reserved"].n_blocks == 3
    assert listed["ready-7"].pins == 1 and listed["ready-8"].pins == 0
    assert (listed["ready-9"].state, listed["ready-9"].nbytes, listed["ready-9"].n_blocks,
            listed["ready-9"].n_extents) == (EntryState.READY, 2 * BS, 2, 1)
    assert listed["ready-0"].age_ns > 0
    c.unpin(pinned.token)


def test_room_is_made_by_evicting_and_refused_when_all_is_pinned(open_connector):
    c = open_connector(directory=True, blocks=64)
    for i in range(4):
        publish(c, f"k{i}", pattern(16 * BS, i))
    publish(c, "new", pattern(16 * BS, 9))
    d = c.stats().directory
    assert d.evictions >= 1 and d.entries == 4
    pins = [e.token for e in c.lookup([e.key for e in c.list()])]
    with pytest.raises(ecc.Busy):
        c.reserve("no-room", 16 * BS)
    assert c.stats().directory.full == 1
    for p in pins:
        c.unpin(p)


def test_save_reserved_needs_the_reserved_size(open_connector):
    c = open_connector(directory=True)
    r = c.reserve("k", 2 * BS)
    with pytest.raises(ecc.EccError) as wrong:
        c.save_reserved(r.token, pattern(2 * BS - 1, 1))
    assert wrong.value.code == ecc.ECC_ERR_RANGE and c.pending == 0
    c.save_reserved(r.token, pattern(2 * BS, 1))
    c.flush()
    assert poll_until(c, 1)[0].ok


def test_load_pinned_needs_room_for_the_entry(open_connector):
    c = open_connector(directory=True)
    publish(c, "k", pattern(2 * BS, 1))
    (e,) = c.lookup("k")
    with pytest.raises(ecc.EccError) as small:
        c.load_pinned(1, e.token, np.zeros(2 * BS - 1, np.uint8))
    assert small.value.code == ecc.ECC_ERR_RANGE and c.pending == 0
    c.unpin(e.token)


def test_a_token_reserved_by_another_connector(open_connector):
    scheduler = open_connector(directory=True, role="producer", name="shared")
    worker = open_connector(directory=True, role="producer", name="shared")
    data = pattern(3 * BS, 4)
    r = scheduler.reserve("handed-over", data.nbytes)
    worker.save_reserved(r.token, data)
    worker.flush()
    (done,) = poll_until(worker, 1)
    assert done.key == "handed-over" and done.ok and worker.pending == 0
    consumer = open_connector(directory=True, role="consumer", name="shared")
    assert np.array_equal(read(consumer, "handed-over"), data)


def test_block_ids_on_a_directory_region_must_be_reserved(open_connector):
    c = open_connector(directory=True)
    with pytest.raises(ecc.EccError) as free_block:
        c.save("k", pattern(BS, 1), [0])
    assert free_block.value.code == ecc.ECC_ERR_RANGE and c.pending == 0
