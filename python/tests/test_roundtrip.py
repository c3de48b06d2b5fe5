# SPDX-License-Identifier: Apache-2.0
"""Round trips through the host engine with every kind of buffer and of block-id
sequence; what poll reports (once each, FIFO, batch numbers, sizes); stats,
describe, the log callback and the shipped configuration."""

import array
import os

import numpy as np
import pytest
from conftest import REPO, pattern, poll_until, region_overrides

import ecc

BS = 1024


def test_scattered_blocks_round_trip_with_a_partial_last_block(open_connector):
    c = open_connector()
    src = pattern(2 * BS + 100, seed=1)
    c.save("img-1", src, [7, 2, 5])
    c.flush()
    (s,) = poll_until(c, 1)
    assert (s.direction, s.status, s.key, s.transfer_id, s.nbytes) == \
        ("save", ecc.ECC_OK, "img-1", 0, src.nbytes)
    assert s.ok and s.batch == 1 and s.elapsed_ns > 0
    dst = np.zeros(src.nbytes, np.uint8)
    c.load(41, [7, 2, 5], dst)
    (ld,) = poll_until(c, 1)
    assert (ld.direction, ld.status, ld.key, ld.transfer_id, ld.nbytes) == \
        ("load", ecc.ECC_OK, "", 41, src.nbytes)
    assert np.array_equal(dst, src)


def test_many_entries_go_in_one_batch_each_way(open_connector):
    c = open_connector()
    srcs = [pattern(BS * 3, seed=i) for i in range(4)]
    ids = [[i * 3, i * 3 + 1, i * 3 + 2] for i in range(4)]
    c.save_many([(f"k{i}", s, b) for i, (s, b) in enumerate(zip(srcs, ids))])
    c.flush()
    saves = poll_until(c, 4)
    assert [s.key for s in saves] == ["k0", "k1", "k2", "k3"], "not in FIFO order"
    assert {s.batch for s in saves} == {1}
    dsts = [np.zeros(BS * 3, np.uint8) for _ in range(4)]
    c.load_many([(100 + i, b, d) for i, (b, d) in enumerate(zip(reversed(ids), dsts))])
    loads = poll_until(c, 4)
    assert sorted(r.transfer_id for r in loads) == [100, 101, 102, 103]
    assert {r.batch for r in loads} == {1}
    for d, s in zip(dsts, reversed(srcs)):
        assert np.array_equal(d, s)
    assert c.poll() == [], "a completion was reported twice"


def test_batches_are_numbered_and_polled_in_order(open_connector):
    c = open_connector()
    for i in range(3):
        c.save(f"s{i}", pattern(BS, seed=i), [i])
        c.flush()
    done = poll_until(c, 3)
    assert [(d.key, d.batch) for d in done] == [("s0", 1), ("s1", 2), ("s2", 3)]


def test_poll_max_items_hands_out_the_rest_later(open_connector):
    c = open_connector()
    c.save_many([(f"k{i}", pattern(BS, seed=i), [i]) for i in range(3)])
    c.flush()
    got = []
    for _ in range(10000):
        one = c.poll(max_items=1)
        assert len(one) <= 1
        got += one
        if len(got) == 3:
            break
    assert [d.key for d in got] == ["k0", "k1", "k2"]


def test_a_load_moves_at_most_its_blocks_and_its_destination(open_connector):
    c = open_connector()
    src = pattern(2 * BS, seed=3)
    c.save("k", src, [10, 11])
    c.flush()
    poll_until(c, 1)
    big = np.full(3 * BS, 0xEE, np.uint8)
    c.load(1, [10, 11], big)
    small = np.zeros(BS + 10, np.uint8)
    c.load(2, [10, 11], small)
    done = {d.transfer_id: d for d in poll_until(c, 2)}
    assert done[1].nbytes == 2 * BS and done[2].nbytes == BS + 10
    assert np.array_equal(big[:2 * BS], src) and (big[2 * BS:] == 0xEE).all()
    assert np.array_equal(small, src[:BS + 10])


class Interface:
    """An object that offers only __array_interface__ (a foreign array type)."""

    def __init__(self, arr):
        self.arr = arr
        self.__array_interface__ = arr.__array_interface__


class DLPackOnly:
    """An object that offers only DLPack."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, stream=None):
        return self.arr.__dlpack__()

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


SOURCES = {
    "bytes": lambda a: a.tobytes(),
    "bytearray": lambda a: bytearray(a.tobytes()),
    "memoryview": lambda a: memoryview(bytearray(a.tobytes())),
    "readonly memoryview": lambda a: memoryview(bytearray(a.tobytes())).toreadonly(),
    "array.array": lambda a: array.array("B", a.tobytes()),
    "numpy float16 2-D": lambda a: a.view(np.float16).reshape(4, -1),
    "__array_interface__": Interface,
    "DLPack": DLPackOnly,
}
DESTINATIONS = {
    "bytearray": lambda n: bytearray(n),
    "numpy int32": lambda n: np.zeros(n // 4, np.int32),
    "__array_interface__": lambda n: Interface(np.zeros(n, np.uint8)),
    "DLPack": lambda n: DLPackOnly(np.zeros(n, np.uint8)),
}


def _bytes_of(obj):
    return bytes(memoryview(obj.arr if hasattr(obj, "arr") else obj).cast("B"))


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("destination", DESTINATIONS)
def test_every_kind_of_buffer_round_trips(open_connector, source, destination):
    c = open_connector()
    data = pattern(4 * BS, seed=7)
    c.save("k", SOURCES[source](data), [3, 1, 4, 0])
    c.flush()
    assert poll_until(c, 1)[0].nbytes == data.nbytes
    dst = DESTINATIONS[destination](data.nbytes)
    c.load(5, [3, 1, 4, 0], dst)
    assert poll_until(c, 1)[0].ok
    assert _bytes_of(dst) == data.tobytes()


BLOCK_IDS = {
    "list": lambda ids: list(ids),
    "tuple": lambda ids: tuple(ids),
    "range": lambda ids: range(ids[0], ids[0] + len(ids)),
    "array I": lambda ids: array.array("I", ids),
    "array q": lambda ids: array.array("q", ids),
    "numpy uint32": lambda ids: np.array(ids, np.uint32),
    "numpy int64": lambda ids: np.array(ids, np.int64),
    "numpy int16 strided": lambda ids: np.repeat(np.array(ids, np.int16), 2)[::2],
    "numpy uint32 strided": lambda ids: np.repeat(np.array(ids, np.uint32), 2)[1::2],
}


@pytest.mark.parametrize("kind", BLOCK_IDS)
def test_every_kind_of_block_ids_addresses_the_same_blocks(open_connector, kind):
    c = open_connector(blocks=512)
    ids = list(range(40, 240))
    data = pattern(len(ids) * BS, seed=9)
    c.save("k", data, BLOCK_IDS[kind](ids))
    c.flush()
    poll_until(c, 1)
    dst = np.zeros_like(data)
    c.load(1, ids, dst)  # the reference list
    poll_until(c, 1)
    assert np.array_equal(dst, data)


def test_stats_count_what_moved(open_connector):
    c = open_connector()
    c.save_many([("a", pattern(BS, 1), [0]), ("b", pattern(2 * BS, 2), [1, 2])])
    c.flush()
    poll_until(c, 2)
    c.load(1, [1, 2], np.zeros(2 * BS, np.uint8))
    poll_until(c, 1)
    s = c.stats()
    assert (s.save.transfers, s.save.entries, s.save.bytes) == (1, 2, 3 * BS)
    assert (s.load.transfers, s.load.entries, s.load.bytes) == (1, 1, 2 * BS)
    assert s.save.hist == (1,) + (0,) * (ecc.HIST_BUCKETS - 1)
    assert s.save.busy_ns > 0 and s.save.failed == 0
    assert s.directory == ecc.DirectoryStats(*([0] * 15))


def test_describe_reports_the_region_and_engine(open_connector, region_dir):
    c = open_connector(name="described", blocks=300, role="consumer")
    info = c.describe()
    assert info.region_path == str(region_dir / "ecc-described.region")
    assert (info.block_size, info.num_blocks, info.engine, info.role) == \
        (BS, 300, "host", "consumer")
    assert info.creator and not info.pinned and info.max_inflight == 64


def test_the_log_callback_receives_the_library_lines(ini, region_dir):
    lines = []
    o = region_overrides(region_dir, **{"plugin.log_level": "debug"})
    with ecc.Connector(ini, o, log=lambda level, msg: lines.append((level, msg))) as c:
        with pytest.raises(ecc.EccError):
            c.save("k", b"x" * 10, [10**6])
    assert any("loaded plugin 'shm'" in m and lv == ecc.LogLevel.INFO for lv, m in lines)
    assert any("block id 1000000" in m and lv == ecc.LogLevel.ERROR for lv, m in lines)


def test_the_shipped_configuration_opens_with_overrides(region_dir):
    o = {"region.dir": str(region_dir), "region.require_tmpfs": "false",
         "region.size": "3MiB", "region.name": f"shipped{os.getpid()}", "engine.type": "host"}
    with ecc.Connector(REPO / "conf" / "default.ini", o) as c:
        info = c.describe()
        assert info.block_size == 1536 * 2  # hidden_size x float16
        assert c.stats().directory.blocks_free == info.num_blocks  # [directory] enabled
    assert c.closed
