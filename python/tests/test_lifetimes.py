# SPDX-License-Identifier: Apache-2.0
"""Buffers stay alive while a copy may touch them: a source dropped right after
flush, a destination dropped right after load, are held until poll reports them
and released then (or at close); repeated keys and ids release in order."""

import gc
import weakref

import ecc
import numpy as np
import pytest
from conftest import pattern, poll_until

BS = 1024
MIB = 1 << 20


def test_a_source_dropped_after_flush_arrives_intact(open_connector):
    # 16 MiB sources are mmap'd by malloc: without the reference the copy would
    # read unmapped or reused memory (a crash, or the 0xAA of the new arrays).
    c = open_connector(block_size=64 * 1024, blocks=512)
    src = pattern(16 * MIB, seed=5)
    expected = src.copy()
    watch = weakref.ref(src)
    c.save("big", src, list(range(256)))
    c.flush()
    del src
    gc.collect()
    reuse = [np.full(16 * MIB, 0xAA, np.uint8) for _ in range(4)]
    assert watch() is not None, "the source was freed before its completion was polled"
    (done,) = poll_until(c, 1)
    assert done.ok and done.nbytes == 16 * MIB
    gc.collect()
    assert watch() is None, "poll did not release the source"
    dst = np.zeros(16 * MIB, np.uint8)
    c.load(1, list(range(256)), dst)
    poll_until(c, 1)
    assert np.array_equal(dst, expected)
    del reuse


def test_a_destination_is_held_until_its_load_is_polled(open_connector):
    c = open_connector()
    c.save("k", pattern(BS, 1), [0])
    c.flush()
    poll_until(c, 1)
    dst = np.zeros(BS, np.uint8)
    watch = weakref.ref(dst)
    c.load(9, [0], dst)
    del dst
    gc.collect()
    assert watch() is not None and c.pending == 1
    poll_until(c, 1)
    gc.collect()
    assert watch() is None and c.pending == 0


def test_the_same_key_twice_releases_its_sources_in_order(open_connector):
    c = open_connector()
    first, second = pattern(BS, 1), pattern(BS, 2)
    w1, w2 = weakref.ref(first), weakref.ref(second)
    c.save("k", first, [0])
    c.flush()
    c.save("k", second, [1])
    c.flush()
    del first, second
    got = []
    while not got:
        got = c.poll(max_items=1)
    gc.collect()
    assert w1() is None and w2() is not None, "the second source went with the first completion"
    poll_until(c, 1)
    gc.collect()
    assert w2() is None


def test_the_same_transfer_id_twice_releases_in_order(open_connector):
    c = open_connector()
    a, b = np.zeros(BS, np.uint8), np.zeros(BS, np.uint8)
    wa, wb = weakref.ref(a), weakref.ref(b)
    c.load(7, [0], a)
    c.load(7, [1], b)
    del a, b
    got = []
    while not got:
        got = c.poll(max_items=1)
    gc.collect()
    assert wa() is None and wb() is not None
    poll_until(c, 1)
    gc.collect()
    assert wb() is None


def bulk_ids(*ids):
    """Block ids as the bulk path takes them (load_many's fast path)."""
    return np.array(ids, np.uint32)


def test_a_step_of_one_id_twice_releases_in_order(open_connector):
    c = open_connector()
    a, b, c3 = (np.zeros(BS, np.uint8) for _ in range(3))
    wa, wb, wc = weakref.ref(a), weakref.ref(b), weakref.ref(c3)
    c.load(7, [2], a)  # in flight before the step: the step's 7s queue behind it
    c.load_many([(7, bulk_ids(0), b), (8, bulk_ids(1), c3)])
    nines = [np.zeros(BS, np.uint8) for _ in range(2)]
    c.load_many([(9, bulk_ids(0), nines[0]), (9, bulk_ids(1), nines[1])])  # one id twice
    del nines
    del a, b, c3
    assert c.pending == 5
    got = []
    while len(got) < 5:
        got += c.poll(max_items=1)
        gc.collect()
        sevens = [d for d in got if d.transfer_id == 7]
        assert (wa() is None) == (len(sevens) >= 1) and (wb() is None) == (len(sevens) == 2)
        assert (wc() is None) == any(d.transfer_id == 8 for d in got)
    assert c.pending == 0


def test_a_refused_bulk_step_keeps_nothing_and_frees_nothing_in_flight(open_connector):
    c = open_connector(blocks=16)
    before = np.zeros(BS, np.uint8)
    watch = weakref.ref(before)
    c.load(3, [0], before)
    refused = [(3, bulk_ids(1), np.zeros(BS, np.uint8)), (4, bulk_ids(99), np.zeros(BS, np.uint8))]
    with pytest.raises(ecc.EccError, match="block id 99"):
        c.load_many(refused)
    del before
    gc.collect()
    assert c.pending == 1 and watch() is not None
    (done,) = poll_until(c, 1)
    assert done.transfer_id == 3
    gc.collect()
    assert watch() is None and c.pending == 0


def test_close_releases_what_was_never_polled(open_connector):
    c = open_connector()
    queued, flushed, loading = pattern(BS, 1), pattern(BS, 2), np.zeros(BS, np.uint8)
    watches = [weakref.ref(x) for x in (queued, flushed, loading)]
    c.save("f", flushed, [0])
    c.flush()
    c.save("q", queued, [1])
    c.load(1, [2], loading)
    del queued, flushed, loading
    gc.collect()
    assert all(w() is not None for w in watches) and c.pending == 3
    c.close()
    gc.collect()
    assert all(w() is None for w in watches) and c.pending == 0


def test_a_rank_that_does_not_save_keeps_nothing(open_connector):
    c = open_connector(**{"connector.tp_rank": "1"})
    assert not c.describe().save_rank
    c.save("k", pattern(BS, 1), [0])
    c.flush()
    assert c.pending == 0
    assert c.poll() == [] and c.stats().saves_skipped == 1


def test_a_forgotten_connector_is_closed_by_the_collector(ini, region_dir):
    import ecc
    from conftest import region_overrides
    c = ecc.Connector(ini, region_overrides(region_dir, name="forgotten"))
    region = region_dir / "ecc-forgotten.region"
    src = pattern(BS, 1)
    watch = weakref.ref(src)
    c.save("k", src, [0])
    c.flush()
    del c, src
    gc.collect()
    assert watch() is None and not region.exists(), "the connector was not shut down"


def test_close_waits_for_the_transfers_in_flight(open_connector):
    kw = dict(name="closing", block_size=64 * 1024, blocks=512)
    saver, reader = open_connector(**kw), open_connector(**kw)  # reader keeps the region
    src = pattern(16 * MIB, seed=6)
    expected = src.copy()
    saver.save("big", src, range(256))
    saver.flush()
    del src
    saver.close()  # the source goes only once the copy is over
    dst = np.zeros(16 * MIB, np.uint8)
    reader.load(1, range(256), dst)
    poll_until(reader, 1)
    assert np.array_equal(dst, expected)
