# SPDX-License-Identifier: Apache-2.0
"""Every refusal: a clear error naming what was wrong, the right ECC_* code, and
nothing changed (no reference kept, nothing queued, no completion to come)."""

import numpy as np
import pytest
from conftest import PYTHON_DIR, pattern, poll_until, region_overrides, write_ini

import ecc

BS = 1024


def assert_untouched(c):
    """Nothing was queued or kept: a flush moves nothing and no completion comes."""
    assert c.pending == 0
    c.flush()
    assert c.poll() == []
    s = c.stats()
    assert s.save.entries == 0 and s.load.entries == 0


def refused(code, match, call, *args, **kw):
    with pytest.raises(ecc.EccError, match=match) as info:
        call(*args, **kw)
    assert info.value.code == code and info.value.code.name == code.name
    return info.value


def test_a_source_that_is_not_contiguous(open_connector):
    c = open_connector()
    src = pattern(4 * BS, 1)[::2]
    refused(ecc.ECC_ERR_INVALID, r"save 'k': src is not C-contiguous", c.save, "k", src, [0, 1])
    assert_untouched(c)


def test_a_source_larger_than_its_blocks(open_connector):
    c = open_connector()
    refused(ecc.ECC_ERR_RANGE, "save", c.save, "k", pattern(2 * BS + 1, 1), [0, 1])
    assert_untouched(c)


@pytest.mark.parametrize("src", [b"", bytearray(), np.zeros((0, 4), np.float32)])
def test_a_source_without_bytes(open_connector, src):
    c = open_connector()
    refused(ecc.ECC_ERR_INVALID, "src has no bytes", c.save, "k", src, [0])
    assert_untouched(c)


@pytest.mark.parametrize("make", [
    lambda: b"\1" * BS,
    lambda: np.frombuffer(b"\1" * BS, np.uint8),
    lambda: memoryview(bytearray(BS)).toreadonly(),
])
def test_a_read_only_destination(open_connector, make):
    c = open_connector()
    refused(ecc.ECC_ERR_INVALID, r"load 3: dst is read-only", c.load, 3, [0], make())
    assert_untouched(c)


@pytest.mark.parametrize("ids, match", [
    ([], "block_ids is empty"),
    ([1, -1], r"block id -1 \(at index 1\) is not an int in 0\.\.4294967295"),
    ([2**32], r"block id 4294967296 \(at index 0\)"),
    ([0, 1.5], r"block id 1.5 \(at index 1\)"),
    ("abc", "must be a sequence of ints, not str"),
    (7, "must be a sequence of ints, not int"),
    (np.array([], np.int64), "block_ids is empty"),
    (np.array([3, -2], np.int64), r"block id -2 \(at index 1\)"),
    (np.array([0.0, 1.0]), "must be integers, not of dtype float64"),
    (np.array([True]), "must be integers, not of dtype bool"),
    (np.zeros((2, 2), np.uint32), r"one-dimensional, not of shape \(2, 2\)"),
    (np.uint32(3), "not a scalar"),
])
def test_bad_block_ids(open_connector, ids, match):
    c = open_connector()
    refused(ecc.ECC_ERR_INVALID, match, c.save, "k", pattern(BS, 1), ids)
    refused(ecc.ECC_ERR_INVALID, match, c.load, 1, ids, np.zeros(BS, np.uint8))
    assert_untouched(c)


def test_a_block_past_the_region_is_named_by_the_library(open_connector):
    c = open_connector(blocks=64)
    e = refused(ecc.ECC_ERR_RANGE, "block id 64", c.save, "k", pattern(2 * BS, 1), [0, 64])
    assert "the region has 64 blocks" in e.message
    refused(ecc.ECC_ERR_RANGE, "block id 99", c.load, 1, [99], np.zeros(BS, np.uint8))
    assert_untouched(c)


def test_one_bad_entry_refuses_the_whole_batch(open_connector):
    c = open_connector()
    good = ("a", pattern(BS, 1), [0])
    refused(ecc.ECC_ERR_RANGE, "entry 1", c.save_many, [good, ("b", pattern(BS, 2), [10**6])])
    refused(ecc.ECC_ERR_INVALID, "src has no bytes", c.save_many, [good, ("b", b"", [1])])
    refused(ecc.ECC_ERR_RANGE, "block id", c.load_many,
            [(1, [0], bytearray(BS)), (2, [10**6], bytearray(BS))])
    assert_untouched(c)


@pytest.mark.parametrize("obj", [42, {"a": 1}, object(), "text"])
def test_an_object_that_is_no_buffer(open_connector, obj):
    c = open_connector()
    with pytest.raises(TypeError, match=f"save 'k': src: a .*{type(obj).__qualname__} is not"):
        c.save("k", obj, [0])
    assert_untouched(c)


@pytest.mark.parametrize("key, code, match", [
    ("a\0b", ecc.ECC_ERR_INVALID, "contains a NUL byte"),
    ("", ecc.ECC_ERR_INVALID, "empty key"),
    ("k" * 128, ecc.ECC_ERR_INVALID, "longer than 127 bytes"),
])
def test_bad_keys(open_connector, key, code, match):
    c = open_connector()
    refused(code, match, c.save, key, pattern(BS, 1), [0])
    assert_untouched(c)


def test_keys_and_ids_of_the_wrong_type(open_connector):
    c = open_connector()
    with pytest.raises(TypeError, match="a key must be str or bytes, not int"):
        c.save(5, pattern(BS, 1), [0])
    with pytest.raises(TypeError, match="transfer_id must be an int, not bool"):
        c.load(True, [0], bytearray(BS))
    refused(ecc.ECC_ERR_INVALID, r"transfer_id is -1, not in 0\.\.", c.load, -1, [0],
            bytearray(BS))
    refused(ecc.ECC_ERR_INVALID, "transfer_id is 18446744073709551616", c.load, 2**64, [0],
            bytearray(BS))
    with pytest.raises(TypeError, match=r"entry 0 is not a \(key, src, block_ids\) tuple"):
        c.save_many([("k", b"x")])
    with pytest.raises(TypeError, match="entries must be a sequence"):
        c.load_many(5)
    refused(ecc.ECC_ERR_INVALID, r"max_items is 0, not in 1\.\.", c.poll, max_items=0)
    assert_untouched(c)


def test_roles_are_enforced_by_the_library(open_connector):
    producer = open_connector(role="producer", name="roles")
    consumer = open_connector(role="consumer", name="roles")
    refused(ecc.ECC_ERR_ROLE, "consumer", consumer.save, "k", pattern(BS, 1), [0])
    refused(ecc.ECC_ERR_ROLE, "producer", producer.load, 1, [0], bytearray(BS))
    assert_untouched(producer)
    assert_untouched(consumer)


def test_the_host_engine_refuses_a_stream(open_connector):
    c = open_connector()
    c.save("k", pattern(BS, 1), [0])
    refused(ecc.ECC_ERR_INVALID, "takes no compute stream", c.flush, stream=1234)
    refused(ecc.ECC_ERR_INVALID, "takes no compute stream", c.load, 1, [0], bytearray(BS),
            stream=1234)
    c.flush()  # the queue was kept
    assert [d.key for d in poll_until(c, 1)] == ["k"]


class FakeDeviceArray:
    """Device memory as __cuda_array_interface__ describes it (never dereferenced)."""

    __cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": (BS,),
                                "typestr": "|u1", "strides": None, "version": 3}


def test_device_memory_is_refused_by_the_host_engine(open_connector):
    c = open_connector()
    refused(ecc.ECC_ERR_INVALID, "CUDA device memory, which the host engine cannot reach",
            c.save, "k", FakeDeviceArray(), [0])
    refused(ecc.ECC_ERR_INVALID, "host engine cannot reach", c.load, 1, [0], FakeDeviceArray())
    assert_untouched(c)


def test_back_pressure_is_busy_and_keeps_nothing(open_connector):
    c = open_connector(**{"connector.max_inflight": "1"})
    first = np.zeros(BS, np.uint8)
    c.load(1, [0], first)
    e = refused(ecc.ECC_ERR_BUSY, "", c.load, 2, [1], np.zeros(BS, np.uint8))
    assert isinstance(e, ecc.Busy) and isinstance(e, ecc.EccError)
    assert c.pending == 1, "the refused load kept its destination"
    assert [d.transfer_id for d in poll_until(c, 1)] == [1]
    c.load(2, [1], np.zeros(BS, np.uint8))
    assert [d.transfer_id for d in poll_until(c, 1)] == [2]


def test_a_busy_flush_keeps_its_queue_for_the_next(open_connector):
    c = open_connector(**{"connector.max_inflight": "1"})
    c.save("a", pattern(BS, 1), [0])
    c.flush()
    c.save("b", pattern(BS, 2), [1])
    with pytest.raises(ecc.Busy):
        c.flush()
    assert c.pending == 2
    assert [d.key for d in poll_until(c, 1)] == ["a"]
    c.flush()
    assert [d.key for d in poll_until(c, 1)] == ["b"]
    assert c.pending == 0


def test_an_unknown_key_in_the_overrides_is_named(ini, region_dir):
    o = region_overrides(region_dir, **{"region.colour": "blue"})
    e = refused(ecc.ECC_ERR_CONFIG, "region.colour", ecc.Connector, ini, o)
    assert "override" in e.message or "unknown" in e.message


def test_a_bad_value_is_named(ini, region_dir):
    refused(ecc.ECC_ERR_CONFIG, "region.size", ecc.Connector, ini,
            region_overrides(region_dir, **{"region.size": "lots"}))


def test_a_missing_ini_file_is_named(tmp_path):
    e = refused(ecc.ECC_ERR_CONFIG, "", ecc.Connector, tmp_path / "absent.ini")
    assert str(tmp_path / "absent.ini") in e.message


def test_an_ini_file_others_may_write_is_refused(tmp_path, region_dir):
    ini = write_ini(tmp_path / "open.ini")
    ini.chmod(0o666)
    e = refused(ecc.ECC_ERR_CONFIG, "", ecc.Connector, ini, region_overrides(region_dir))
    assert "writable" in e.message


def test_arguments_of_the_wrong_type_to_the_constructor(ini, region_dir):
    with pytest.raises(TypeError, match="overrides must be a dict"):
        ecc.Connector(ini, [("region.size", "1MiB")])
    with pytest.raises(TypeError, match="keys and values must be str"):
        ecc.Connector(ini, {"region.size": 1.5})
    with pytest.raises(TypeError, match="log must be a callable"):
        ecc.Connector(ini, region_overrides(region_dir), log="stderr")
    refused(ecc.ECC_ERR_INVALID, "NUL", ecc.Connector, ini, {"region.name": "a\0b"})


def test_the_directory_calls_need_a_directory(open_connector):
    c = open_connector(directory=False)
    refused(ecc.ECC_ERR_UNSUPPORTED, "", c.reserve, "k", BS)
    refused(ecc.ECC_ERR_UNSUPPORTED, "", c.lookup, ["k"])
    refused(ecc.ECC_ERR_UNSUPPORTED, "", c.list)


# Every method with arguments, good or bad: on a closed connector all of them
# raise ECC_ERR_CLOSED, as the C library judges the handle first.
CALLS = {
    "save": lambda c: c.save("k", b"x" * 10, [0]),
    "save bad": lambda c: c.save("k", object(), "ids"),
    "save_many": lambda c: c.save_many([("k", b"x", [0])]),
    "flush": lambda c: c.flush(),
    "flush bad stream": lambda c: c.flush(stream="x"),
    "load": lambda c: c.load(1, [0], bytearray(10)),
    "load_many": lambda c: c.load_many([]),
    "poll": lambda c: c.poll(),
    "poll bad": lambda c: c.poll(max_items=-5),
    "stats": lambda c: c.stats(),
    "describe": lambda c: c.describe(),
    "reserve": lambda c: c.reserve("k", 10),
    "save_reserved": lambda c: c.save_reserved(1, b"x"),
    "save_reserved_many": lambda c: c.save_reserved_many([(1, b"x")]),
    "abort_reserved": lambda c: c.abort_reserved(1),
    "lookup": lambda c: c.lookup(["k"]),
    "load_pinned": lambda c: c.load_pinned(1, 1, bytearray(10)),
    "load_pinned_many": lambda c: c.load_pinned_many([(1, 1, bytearray(10))]),
    "unpin": lambda c: c.unpin(1),
    "remove": lambda c: c.remove("k"),
    "list": lambda c: c.list(),
}


@pytest.mark.parametrize("call", CALLS)
def test_every_call_on_a_closed_connector_is_closed(open_connector, call):
    c = open_connector(directory=True)
    c.close()
    assert c.closed
    e = refused(ecc.ECC_ERR_CLOSED, "the connector is closed", CALLS[call], c)
    assert "closed" in str(e)
    c.close()  # idempotent


def test_a_caught_error_is_not_also_printed(tmp_path):
    """The default sink does not print what a call raises (it is said once)."""
    import subprocess
    import sys
    ini = write_ini(tmp_path / "once.ini")
    code = f"""
import sys
sys.path.insert(0, {str(PYTHON_DIR)!r})
import ecc
o = {{"region.dir": {str(tmp_path)!r}, "region.require_tmpfs": "false", "region.name": "once",
     "region.block_size": "1024", "region.size": "65536", "engine.type": "host",
     "directory.enabled": "true"}}
with ecc.Connector({str(ini)!r}, o) as c:
    try:
        c.unpin(0x1234)
    except ecc.EccError as e:
        print("caught", e.code.name)
"""
    tmp_path.chmod(0o700)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "caught ECC_ERR_CLOSED"
    assert r.stderr == ""
