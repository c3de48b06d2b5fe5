# SPDX-License-Identifier: Apache-2.0
"""The cache calls of ABI 1.2 from Python: typed entries saved and loaded back
as numpy arrays, loads of another type refused, peek that changes nothing,
wait_ready across a thread and across a process, residency events, the cost of
hits in the stats, and the 1.1 forms an older library or plugin falls back to."""

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import PYTHON_DIR, pattern, poll_until, region_overrides

import ecc
from ecc import EntryState

BS = 1024


def publish(c, key, data, **kw):
    """Reserve (with reserve's keywords), save and poll; the reservation."""
    sized = "like" not in kw and "shape" not in kw
    r = c.reserve(key, data.nbytes if sized else None, **kw)
    assert r.state == EntryState.RESERVED, r
    c.save_reserved(r, data)
    c.flush()
    (done,) = poll_until(c, 1)
    assert done.ok and done.nbytes == r.nbytes
    return r


def load(c, entry, dst, tid=1):
    c.load_pinned(tid, entry, dst)
    (done,) = poll_until(c, 1)
    assert done.ok and done.transfer_id == tid
    return dst


def until(cond, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout} s")
        time.sleep(0.001)


def test_a_typed_entry_round_trips_as_a_numpy_array(open_connector):
    c = open_connector(directory=True)
    out = pattern(40 * 64 * 2, seed=1).view(np.float16).reshape(40, 64)
    r = publish(c, "typed", out, like=out, cost_us=1500)
    assert (r.dtype, r.shape, r.cost_us, r.nbytes) == ("float16", (40, 64), 1500, out.nbytes)
    (e,) = c.lookup("typed")
    assert (e.state, e.dtype, e.shape, e.cost_us, e.hits, e.typed) == \
        (EntryState.READY, "float16", (40, 64), 1500, 1, True)
    dst = ecc.empty_like_entry(e)
    assert (dst.dtype, dst.shape) == (np.float16, (40, 64))
    assert np.array_equal(load(c, e, dst).view(np.uint8), out.view(np.uint8))
    (listed,) = c.list()
    assert (listed.key, listed.dtype, listed.shape, listed.cost_us, listed.hits) == \
        ("typed", "float16", (40, 64), 1500, 1)


def test_dtypes_are_taken_from_names_numpy_and_shapes(open_connector):
    c = open_connector(directory=True)
    ints = pattern(4 * 3 * 5 * 2 * 4, seed=2).view(np.int32).reshape(4, 3, 5, 2)
    publish(c, "int32", ints, dtype=np.int32, shape=ints.shape)
    flat = pattern(256 * 8, seed=3).view(np.float64)
    publish(c, "float64", flat, dtype=np.dtype("float64"))  # shape from nbytes: (256,)
    bf = pattern(2 * 96, seed=4)
    publish(c, "bf16", bf, dtype="bfloat16", shape=(2, 48))
    found = c.lookup(["int32", "float64", "bf16"])
    assert [(e.dtype, e.shape) for e in found] == \
        [("int32", (4, 3, 5, 2)), ("float64", (256,)), ("bfloat16", (2, 48))]
    assert np.array_equal(load(c, found[0], ecc.empty_like_entry(found[0]), 1), ints)
    assert np.array_equal(load(c, found[1], np.empty(256, np.float64), 2).view(np.uint8),
                          flat.view(np.uint8))
    # bfloat16 has no numpy dtype here: its raw bytes load through the token.
    assert np.array_equal(load(c, found[2].token, np.empty(bf.nbytes, np.uint8), 3), bf)


def test_a_load_of_another_type_is_refused_and_changes_nothing(open_connector):
    c = open_connector(directory=True)
    out = pattern(40 * 64 * 2, seed=5).view(np.float16).reshape(40, 64)
    publish(c, "f16", out, like=out)
    (e,) = c.lookup("f16")
    for dst, declared in ((np.empty((40, 32), np.float32), "float32[40, 32]"),
                          (np.empty((64, 40), np.float16), "float16[64, 40]"),
                          (bytearray(out.nbytes), f"uint8[{out.nbytes}]")):
        with pytest.raises(ecc.EccError) as wrong:
            c.load_pinned(7, e, dst)
        assert wrong.value.code == ecc.ECC_ERR_RANGE
        assert f"declared {declared} ({out.nbytes} bytes), but the entry is float16[40, 64]" \
            in wrong.value.message
        assert c.pending == 0 and c.poll() == []
    assert c.stats().directory.pins_live == 1, "a refused load released the pin"
    assert np.array_equal(load(c, e, np.empty((40, 64), np.float16)).view(np.uint8),
                          out.view(np.uint8))
    assert c.stats().directory.pins_live == 0


def test_a_batch_with_a_typed_entry_checks_every_record(open_connector):
    c = open_connector(directory=True)
    typed = pattern(8 * 32 * 4, seed=6).view(np.float32).reshape(8, 32)
    raw = pattern(3 * BS, seed=7)
    publish(c, "typed", typed, like=typed)
    publish(c, "raw", raw)
    t, u = c.lookup(["typed", "raw"])
    assert not u.typed and (u.dtype, u.shape) == (None, ())
    a, b = np.empty((8, 32), np.float32), np.empty(raw.nbytes + 100, np.uint8)
    c.load_pinned_many([(1, t, a), (2, u, b)])  # u given as an Entry: dst may be larger
    assert sorted(d.transfer_id for d in poll_until(c, 2)) == [1, 2]
    assert np.array_equal(a.view(np.uint8), typed.view(np.uint8))
    assert np.array_equal(b[:raw.nbytes], raw)


def test_refused_reservations_reserve_nothing(open_connector):
    c = open_connector(directory=True)
    with pytest.raises(ecc.EccError, match="holds 8 bytes, but nbytes is 9") as size:
        c.reserve("k", 9, dtype="float32", shape=(2,))
    assert size.value.code == ecc.ECC_ERR_INVALID
    with pytest.raises(ecc.EccError, match="dtype complex64 is none of the entry types"):
        c.reserve("k", 8, dtype="complex64")
    with pytest.raises(ecc.EccError, match="has 5 dimensions"):
        c.reserve("k", like=np.zeros((1, 1, 1, 1, 2), np.uint8))
    with pytest.raises(ecc.EccError, match="without a shape needs nbytes, a multiple of 4"):
        c.reserve("k", 6, dtype=np.float32)
    with pytest.raises(TypeError, match="a shape needs a dtype"):
        c.reserve("k", 8, shape=(8,))
    with pytest.raises(TypeError, match="give nbytes"):
        c.reserve("k")
    assert c.list() == [] and c.stats().directory.reservations == 0


def test_peek_reports_and_changes_nothing(open_connector):
    c = open_connector(directory=True)
    out = pattern(2 * 128 * 2, seed=8).view(np.float16).reshape(2, 128)
    publish(c, "ready", out, like=out, cost_us=700)
    (pin,) = c.lookup("ready")
    c.reserve("writing", 3 * BS, cost_us=9)
    before = c.stats()
    ready, writing, absent = c.peek(["ready", "writing", b"absent"])
    assert c.stats() == before, "peek moved a counter"
    assert (ready.state, ready.pins, ready.nbytes, ready.cost_us, ready.hits, ready.dtype,
            ready.shape) == (EntryState.READY, 1, out.nbytes, 700, 1, "float16", (2, 128))
    assert (writing.state, writing.nbytes, writing.cost_us, writing.pins) == \
        (EntryState.WRITING, 3 * BS, 9, 0)
    assert (absent.state, absent.nbytes, absent.dtype) == (EntryState.ABSENT, 0, None)
    assert c.peek([]) == [] and c.peek("ready")[0].pins == 1
    c.unpin(pin)
    assert c.peek("ready")[0].pins == 0


def test_hits_add_their_cost_to_the_encoder_time_saved(open_connector):
    c = open_connector(directory=True)
    publish(c, "costly", pattern(BS, 9), cost_us=1500)
    publish(c, "free", pattern(BS, 10))
    assert c.stats().cache.encoder_us_saved == 0
    for _ in range(2):
        for e in c.lookup(["costly", "free", "absent"]):
            if e.token:
                c.unpin(e)
    c.peek(["costly"])
    assert c.wait_ready("costly", ranks=0, timeout=0).state == EntryState.READY
    assert c.stats().cache.encoder_us_saved == 3 * 1500


def test_a_wait_sleeps_until_another_thread_publishes(open_connector):
    c = open_connector(directory=True)
    out = pattern(16 * 16 * 4, seed=11).view(np.float32).reshape(16, 16)
    r = c.reserve("k", like=out, cost_us=5)
    got = []
    waiter = threading.Thread(target=lambda: got.append(c.wait_ready("k", timeout=30)))
    waiter.start()
    until(lambda: c.stats().cache.waits == 1, "the waiter asleep")
    assert waiter.is_alive() and not got, "wait_ready returned before the publish"
    c.save_reserved(r, out)  # this thread runs Python while the other sleeps in C
    c.flush()
    poll_until(c, 1)
    waiter.join(30)
    (e,) = got
    assert (e.state, e.dtype, e.shape, e.cost_us) == (EntryState.READY, "float32", (16, 16), 5)
    assert c.stats().directory.pins_live == 1, "READY from wait_ready is pinned"
    assert np.array_equal(load(c, e, ecc.empty_like_entry(e)).view(np.uint8), out.view(np.uint8))
    s = c.stats().cache
    assert (s.waits, s.waits_ready, s.waits_absent, s.wait_timeouts) == (1, 1, 0, 0)


def test_an_abort_wakes_the_waiter_absent(open_connector):
    c = open_connector(directory=True)
    r = c.reserve("k", BS)
    got = []
    waiter = threading.Thread(target=lambda: got.append(c.wait_ready("k", timeout=30)))
    waiter.start()
    until(lambda: c.stats().cache.waits == 1, "the waiter asleep")
    c.abort_reserved(r)
    waiter.join(30)
    assert got[0].state == EntryState.ABSENT and got[0].token == 0
    assert c.reserve("k", BS).state == EntryState.RESERVED, "absent, but not reservable"


def test_a_timeout_pins_and_changes_nothing(open_connector):
    c = open_connector(directory=True)
    c.reserve("k", 2 * BS)
    t0 = time.monotonic()
    e = c.wait_ready("k", timeout=0.05)
    assert time.monotonic() - t0 >= 0.04
    assert (e.state, e.token, e.nbytes) == (EntryState.WRITING, 0, 2 * BS)
    d = c.stats().directory
    assert (d.pins_live, d.entries) == (0, 1)
    assert c.stats().cache.wait_timeouts == 1
    assert c.wait_ready("absent", timeout=0).state == EntryState.ABSENT
    for bad, text in ((-1, "not in 0..3600"), (3601, "not in 0..3600"),
                      (float("nan"), "not in 0..3600")):
        with pytest.raises(ecc.EccError, match=text):
            c.wait_ready("k", timeout=bad)
    with pytest.raises(TypeError):
        c.wait_ready("k", timeout="1")


def _child_publishes(ini_path, overrides, reserved, seed):
    """A process of its own: reserve, tell the parent, publish once it waits."""
    with ecc.Connector(ini_path, overrides) as c:
        data = pattern(5 * BS, seed)
        r = c.reserve("cross", data.nbytes, cost_us=42)
        reserved.set()
        until(lambda: c.stats().cache.waits >= 1, "the parent asleep")
        c.save_reserved(r, data)
        c.flush()
        poll_until(c, 1)


def test_a_wait_across_processes_wakes_when_the_child_publishes(ini, region_dir):
    o = region_overrides(region_dir, directory=True)
    with ecc.Connector(ini, o) as c:
        # A fresh interpreter, not a fork: a child forked from a process with
        # threads may not start the connector's own (ThreadSanitizer stops it).
        ctx = multiprocessing.get_context("spawn")
        reserved = ctx.Event()
        child = ctx.Process(target=_child_publishes, args=(ini, o, reserved, 12))
        child.start()
        assert reserved.wait(30), "the child never reserved"
        e = c.wait_ready("cross", timeout=30)
        child.join(30)
        assert child.exitcode == 0
        assert (e.state, e.nbytes, e.cost_us) == (EntryState.READY, 5 * BS, 42)
        assert np.array_equal(load(c, e, np.empty(5 * BS, np.uint8)), pattern(5 * BS, 12))
        assert c.stats().cache.waits_ready == 1


def test_events_follow_an_entry_stored_evicted_and_removed(open_connector):
    c = open_connector(directory=True, blocks=64)
    _, start, lost = c.events(max_items=0)
    assert lost == 0
    t0 = time.time_ns()
    key = b"\xffimg"  # not UTF-8: comes back as the same bytes, and works as given
    publish(c, key, pattern(16 * BS, 1), cost_us=77)
    for i in range(4):  # the fifth 16-block entry of 64 blocks evicts the oldest
        publish(c, f"k{i}", pattern(16 * BS, i))
    c.remove("k3")
    events, cursor, lost = c.events(start)
    assert lost == 0 and cursor == events[-1].seq + 1
    assert [(e.kind, e.key) for e in events] == \
        [("stored", key)] + \
        [("stored", "k0"), ("stored", "k1"), ("stored", "k2")] + \
        [("evicted", events[0].key), ("stored", "k3"), ("removed", "k3")]
    assert c.lookup(events[0].key)[0].state == EntryState.ABSENT  # the same key, evicted
    assert [e.seq for e in events] == list(range(start, start + 7))
    assert (events[0].nbytes, events[0].cost_us, events[4].cost_us) == (16 * BS, 77, 77)
    assert len({e.instance for e in events}) == 1 and events[0].instance != 0
    assert all(t0 - 10**9 <= e.time_ns <= time.time_ns() + 10**9 for e in events)
    assert c.events(cursor) == ([], cursor, 0)
    assert c.stats().cache.events >= 7


def test_a_reader_that_falls_behind_learns_how_many_it_lost(open_connector):
    c = open_connector(directory=True, **{"directory.event_slots": "16",
                                          "directory.max_entries": "128"})
    rounds, per_round = 21, 100  # 4,200 events: more than the ring holds, by default too
    for r in range(rounds):
        keys = [f"r{r}-{i}" for i in range(per_round)]
        held = [(c.reserve(k, BS), pattern(BS, i)) for i, k in enumerate(keys)]
        c.save_reserved_many(held)
        c.flush()
        poll_until(c, per_round)
        for k in keys:
            c.remove(k)
    total = 2 * rounds * per_round
    events, cursor, lost = c.events(1, max_items=total)
    assert lost > 0 and len(events) + lost == total and cursor == total + 1
    assert [e.seq for e in events] == list(range(1 + lost, total + 1))
    assert (events[-1].kind, events[-1].key) == ("removed", f"r{rounds - 1}-{per_round - 1}")
    assert c.events(cursor, max_items=5) == ([], cursor, 0)


class _Without:
    """The library as a plugin of ABI 1.1 answers it: every cache call
    ECC_ERR_UNSUPPORTED, with no message of its own."""

    CACHE = ("ecc_reserve_ex", "ecc_peek", "ecc_wait_ready", "ecc_lookup_ex", "ecc_load_typed",
             "ecc_list_ex", "ecc_events")

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name in self.CACHE:
            return lambda *args: int(ecc.ECC_ERR_UNSUPPORTED)
        return getattr(self._lib, name)


def test_an_older_plugin_keeps_the_11_calls_and_names_what_it_lacks(open_connector):
    c = open_connector(directory=True)
    c._core.lib = _Without(c._core.lib)
    publish(c, "k", pattern(BS, 1))
    (e,) = c.lookup("k")
    assert (e.state, e.dtype, e.cost_us) == (EntryState.READY, None, 0)
    c.unpin(e)
    assert [x.key for x in c.list()] == ["k"]
    for call in (lambda: c.peek("k"), lambda: c.wait_ready("k", timeout=0),
                 lambda: c.events(), lambda: c.reserve("j", 8, cost_us=1)):
        with pytest.raises(ecc.EccError, match="predates ABI 1.2") as old:
            call()
        assert old.value.code == ecc.ECC_ERR_UNSUPPORTED


def test_an_older_library_keeps_the_11_calls_and_names_its_version(open_connector, monkeypatch):
    c = open_connector(directory=True)
    monkeypatch.setattr(ecc._lib, "_present", frozenset())
    publish(c, "k", pattern(BS, 1))
    (e,) = c.lookup("k")
    assert e.state == EntryState.READY and e.dtype is None
    c.unpin(e)
    assert [x.key for x in c.list()] == ["k"]
    with pytest.raises(ecc.EccError, match=r"libecc-host .* has no ecc_peek \(ABI 1\.2"):
        c.peek("k")
    with pytest.raises(ecc.EccError, match="has no ecc_reserve_ex"):
        c.reserve("j", like=np.zeros(4, np.float32))
    assert c.stats().directory.reservations == 1


def test_the_package_imports_and_names_dtypes_without_numpy_or_torch():
    # A torch dtype as the client sees one: its type's module and name, and str().
    code = ("import sys, ecc\n"
            "from ecc import _types\n"
            "dtype = type('dtype', (), {'__module__': 'torch',\n"
            "                           '__str__': lambda self: 'torch.bfloat16'})\n"
            "assert _types.dtype_value('float8_e4m3fn', 'x') == 10\n"
            "assert _types.dtype_value(dtype(), 'x') == 3\n"
            "assert 'numpy' not in sys.modules and 'torch' not in sys.modules\n")
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_empty_like_entry_allocates_what_a_load_needs():
    typed = ecc.Entry(EntryState.READY, 1, 24, ((0, 1),), "int16", (3, 4))
    a = ecc.empty_like_entry(typed)
    assert (a.dtype, a.shape) == (np.int16, (3, 4))
    raw = ecc.Entry(EntryState.READY, 1, 24, ((0, 1),))
    assert ecc.empty_like_entry(raw).shape == (24,)
    with pytest.raises(ecc.EccError, match="ABSENT, with no bytes"):
        ecc.empty_like_entry(ecc.Entry(EntryState.ABSENT, 0, 0, ()))


def test_torch_tensors_give_and_take_the_type(open_connector):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    c = open_connector(directory=True)
    src = torch.randn(12, 64, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(3))
    r = publish(c, "bf16", src, like=src)
    assert (r.dtype, r.shape) == ("bfloat16", (12, 64))
    publish(c, "by-dtype", pattern(256, 1), dtype=torch.float16, shape=(2, 64))
    e, h = c.lookup(["bf16", "by-dtype"])
    assert (h.dtype, h.shape) == ("float16", (2, 64))
    c.unpin(h)
    with pytest.raises(ecc.EccError) as wrong:
        c.load_pinned(1, e, torch.empty(12, 32, dtype=torch.float32))
    assert wrong.value.code == ecc.ECC_ERR_RANGE and "float32[12, 32]" in wrong.value.message
    dst = ecc.empty_like_entry(e, device="cpu")
    assert (dst.dtype, tuple(dst.shape), dst.device.type) == (torch.bfloat16, (12, 64), "cpu")
    load(c, e, dst)
    assert torch.equal(dst.view(torch.int16), src.view(torch.int16))


def test_bytes_keys_round_trip_as_bytes(open_connector):
    """A key that is not UTF-8 comes back from poll, list and events as the
    bytes it was given; a UTF-8 one as str."""
    c = open_connector(directory=True, blocks=64)
    _, start, _ = c.events(max_items=0)
    keys = [b"\xfe\xffimg", "caf\u00e9"]
    for key in keys:
        r = c.reserve(key, 16 * BS)
        c.save_reserved(r, pattern(16 * BS, 3))
        c.flush()
        (done,) = poll_until(c, 1)
        assert done.ok and done.key == key
    assert sorted((e.key for e in c.list()), key=repr) == sorted(keys, key=repr)
    events, _, _ = c.events(start)
    assert [e.key for e in events] == keys
    assert [e.state for e in c.lookup([e.key for e in events])] == [EntryState.READY] * 2
