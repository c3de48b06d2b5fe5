# SPDX-License-Identifier: Apache-2.0
"""ecc.serving in one process: a scheduler side and worker sides, each with its
own connector on one region with the host engine. Every rule of a step: hit,
miss then save then hit, deferral behind a writer then a hit, the deferral
deadline, a full region, what a step does not schedule, aborted requests,
lost workers, namespaces, and plain picklable per-step data."""

import pickle

import numpy as np
import pytest
import serving_worker
from conftest import poll_until, region_overrides

import ecc
from ecc import EntryState
from ecc.serving import (Decision, Item, Namespace, SchedulerSide, StepMeta, WorkerReport,
                         WorkerSide)

HIDDEN = 8  # float16: 16 bytes a row; 64 rows are one 1 KiB block


def encode(content_hash, rows):
    return serving_worker.encode(content_hash, rows, HIDDEN)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def region(ini, region_dir):
    opened = []

    def connect(blocks=64):
        o = region_overrides(region_dir, name=f"serving-{id(opened)}", blocks=blocks,
                             directory=True)
        c = ecc.Connector(ini, o)
        opened.append(c)
        return c

    yield connect
    for c in reversed(opened):
        c.close()


@pytest.fixture
def ns():
    return Namespace("org/vision-model", HIDDEN, dtype="float16", revision="r1")


def drain(worker, want_loads=0, want_saves=0):
    """Reports of a host-engine worker until the wanted completions are in."""
    return serving_worker.collect(worker, want_loads, want_saves)


def save_step(sched, worker, items):
    """One step in which every item is scheduled and rank 0 saves its SAVEs."""
    answers = [sched.query(i) for i in items]
    for i in items:
        sched.allocated(i.request_id, i.index)
    meta = sched.build_step()
    worker.save(meta, {(o.request_id, o.index): encode(o.key.split("/")[-1],
                                                       o.shape[0]) for o in meta.saves})
    sched.update([drain(worker, want_saves=len(meta.saves))])
    return answers, meta


def test_a_miss_is_reserved_saved_published_then_every_rank_loads_the_hit(region, ns):
    c0, c1 = region(), region()
    sched = SchedulerSide(region(), ns, ranks=2)
    w0, w1 = WorkerSide(c0, rank=0), WorkerSide(c1, rank=1)
    item = Item("req-1", 0, "cafe01", 64)
    answers, meta = save_step(sched, w0, [item])
    assert [a.decision for a in answers] == [Decision.SAVE]
    assert [o.key for o in meta.saves] == [ns.key("cafe01")] and meta.loads == ()
    assert sched.stats.saved == 1 and sched.pending() == (0, 0)

    again = Item("req-2", 0, "cafe01", 64)
    assert sched.query(again).decision is Decision.HIT
    assert sched.allocated("req-2", 0)
    meta = sched.build_step()
    assert len(meta.loads) == 1 and meta.saves == ()
    order = meta.loads[0]
    assert (order.dtype, order.shape) == ("float16", (64, HIDDEN))
    assert c0.peek([order.key])[0].pins == 1  # one pin of two ranks
    got0 = w0.start_loads(meta)
    sched.update([drain(w0, want_loads=1)])
    assert c0.peek([order.key])[0].pins == 1 and sched.pending() == (1, 0)
    got1 = w1.start_loads(meta)
    sched.update([drain(w1, want_loads=1)])
    for got in (got0, got1):
        assert np.array_equal(got[("req-2", 0)], encode("cafe01", 64))
    peeked = c0.peek([order.key])[0]
    assert peeked.state == EntryState.READY and peeked.pins == 0  # each rank released once
    assert sched.pending() == (0, 0) and sched.stats.loads_done == 1


def test_a_key_another_process_writes_is_deferred_then_hit(region, ns):
    writer, c0 = region(), region()
    sched = SchedulerSide(region(), ns, ranks=1)
    key = ns.key("beef02")
    token = writer.reserve(key, dtype="float16", shape=(64, HIDDEN)).token
    item = Item("req-1", 0, "beef02", 64)
    assert sched.query(item).decision is Decision.DEFER
    assert sched.query(item).reason == "writing"
    assert not sched.allocated("req-1", 0)
    assert sched.build_step().loads == ()
    writer.save_reserved(token, encode("beef02", 64))
    writer.flush()
    assert [x.ok for x in poll_until(writer, 1)] == [True]
    assert sched.query(item).decision is Decision.HIT
    assert sched.stats.deferrals == 1 and sched.stats.hits == 1


def test_a_deferral_past_its_deadline_is_encoded_here_and_nothing_is_taken(region, ns):
    writer = region()
    clock = Clock()
    sched = SchedulerSide(region(), ns, defer_timeout=2.0, clock=clock)
    writer.reserve(ns.key("dead03"), dtype="float16", shape=(64, HIDDEN))
    item = Item("req-1", 0, "dead03", 64)
    assert sched.query(item).decision is Decision.DEFER
    sched.build_step()
    clock.now += 1.0
    assert sched.query(item).decision is Decision.DEFER
    sched.build_step()
    clock.now += 1.5
    answer = sched.query(item)
    assert (answer.decision, answer.reason) == (Decision.LOCAL, "deadline")
    assert sched.stats.local_deadline == 1
    assert [e.pins for e in writer.list()] == [0]  # nothing pinned for it


def test_a_full_region_is_encoded_here_without_saving(region, ns):
    holder = region(blocks=4)
    sched = SchedulerSide(region(blocks=4), ns)
    pins = []
    for i in range(4):  # every block reserved by another process
        pins.append(holder.reserve(f"other-{i}", 1024))
    answer = sched.query(Item("req-1", 0, "full04", 64))
    assert (answer.decision, answer.reason) == (Decision.LOCAL, "full")
    assert sched.stats.local_full == 1
    assert sorted(e.key for e in holder.list()) == [f"other-{i}" for i in range(4)]


def test_what_a_step_does_not_schedule_is_given_back_at_its_end(region, ns):
    c = region()
    sched = SchedulerSide(region(), ns, ranks=2)
    w = WorkerSide(c)
    save_step(sched, w, [Item("warm", 0, "hot05", 64)])
    hit, miss = Item("req-1", 0, "hot05", 64), Item("req-1", 1, "cold06", 64)
    assert sched.query(hit).decision is Decision.HIT
    assert sched.query(miss).decision is Decision.SAVE
    assert c.peek([ns.key("hot05")])[0].pins == 1
    meta = sched.build_step()  # neither allocated: the request did not fit this step
    assert meta == StepMeta(1)
    assert c.peek([ns.key("hot05")])[0].pins == 0
    assert c.peek([ns.key("cold06")])[0].state == EntryState.ABSENT
    assert (sched.stats.unused_pins, sched.stats.unused_reservations) == (1, 1)


def test_an_aborted_request_gives_back_its_pins_and_reservations(region, ns):
    c = region()
    sched = SchedulerSide(region(), ns, ranks=3)
    w = WorkerSide(c)
    save_step(sched, w, [Item("warm", 0, "hot07", 64)])
    sched.query(Item("req-1", 0, "hot07", 64))
    sched.allocated("req-1", 0)
    sched.query(Item("req-1", 1, "cold08", 64))
    sched.allocated("req-1", 1)
    sched.query(Item("req-2", 0, "hot07", 64))
    assert c.peek([ns.key("hot07")])[0].pins == 2
    sched.finished("req-1")  # aborted after allocation, before the step's metadata
    assert c.peek([ns.key("hot07")])[0].pins == 1  # req-2's stays
    assert c.peek([ns.key("cold08")])[0].state == EntryState.ABSENT
    meta = sched.build_step()
    assert meta.loads == () and meta.saves == ()
    assert c.peek([ns.key("hot07")])[0].pins == 0


def test_a_rank_that_never_reports_has_its_pin_released_after_the_ttl(region, ns):
    c0 = region()
    clock = Clock()
    sched = SchedulerSide(region(), ns, ranks=2, pin_ttl=30.0, clock=clock)
    w0 = WorkerSide(c0, rank=0)
    save_step(sched, w0, [Item("warm", 0, "ttl09", 64)])
    sched.query(Item("req-1", 0, "ttl09", 64))
    sched.allocated("req-1", 0)
    meta = sched.build_step()
    w0.start_loads(meta)  # rank 1 was lost: it never loads
    sched.update([drain(w0, want_loads=1)])
    key = ns.key("ttl09")
    assert c0.peek([key])[0].pins == 1 and sched.pending() == (1, 0)
    clock.now += 31.0
    sched.build_step()
    assert c0.peek([key])[0].pins == 0
    assert sched.stats.ttl_releases == 1 and sched.pending() == (0, 0)


def test_a_refused_load_releases_that_rank_through_the_scheduler_once(region, ns):
    c0 = region()
    sched = SchedulerSide(region(), ns, ranks=1)
    w0 = WorkerSide(c0)
    save_step(sched, w0, [Item("warm", 0, "ref10", 64)])
    sched.query(Item("req-1", 0, "ref10", 64))
    sched.allocated("req-1", 0)
    meta = sched.build_step()
    wrong = np.zeros((64, HIDDEN), dtype=np.float32)  # not the entry's type
    assert w0.start_loads(meta, destinations={("req-1", 0): wrong}) == {}
    report = w0.report()
    assert [f.status for f in report.failures] == [int(ecc.ECC_ERR_RANGE)]
    assert "float32" in report.failures[0].message and not report.failures[0].released
    sched.update([report])
    assert c0.peek([ns.key("ref10")])[0].pins == 0
    assert sched.stats.load_failures == 1 and sched.pending() == (0, 0)


def test_a_save_of_the_wrong_type_is_reported_and_its_reservation_given_up(region, ns):
    c0 = region()
    sched = SchedulerSide(region(), ns)
    w0 = WorkerSide(c0)
    item = Item("req-1", 0, "typ11", 64)
    assert sched.query(item).decision is Decision.SAVE
    sched.allocated("req-1", 0)
    meta = sched.build_step()
    w0.save(meta, {("req-1", 0): np.zeros((64, HIDDEN), dtype=np.float32)})
    report = w0.report()
    assert len(report.failures) == 1 and "float32[64, 8]" in report.failures[0].message
    sched.update([report])
    assert c0.peek([ns.key("typ11")])[0].state == EntryState.ABSENT
    assert sched.stats.save_failures == 1
    assert sched.query(Item("req-2", 0, "typ11", 64)).decision is Decision.SAVE


def test_only_the_saving_rank_saves(region, ns):
    c1 = region()
    sched = SchedulerSide(region(), ns, ranks=2)
    sched.query(Item("req-1", 0, "rank12", 64))
    sched.allocated("req-1", 0)
    meta = sched.build_step()
    w1 = WorkerSide(c1, rank=1)
    w1.save(meta, {("req-1", 0): encode("rank12", 64)})
    assert w1.report() == WorkerReport(1)
    assert c1.peek([ns.key("rank12")])[0].state == EntryState.WRITING


def test_two_namespaces_never_read_each_others_entries(region):
    a = Namespace("org/model-a", HIDDEN, dtype="float16")
    b = Namespace("org/model-a", HIDDEN, dtype="float16", processor={"max_pixels": 1 << 20})
    assert a.key("h") != b.key("h") and a.prefix.startswith("model-a@")
    c = region()
    sa, sb = SchedulerSide(region(), a), SchedulerSide(region(), b)
    save_step(sa, WorkerSide(c), [Item("r", 0, "h", 64)])
    assert sb.query(Item("r", 0, "h", 64)).decision is Decision.SAVE
    assert sa.query(Item("r2", 0, "h", 64)).decision is Decision.HIT


def test_namespace_refuses_what_would_not_fit_or_mean_anything():
    ns = Namespace("org/m", 16)
    with pytest.raises(ecc.EccError, match="above the key limit of 127"):
        ns.key("x" * 120)
    with pytest.raises(ecc.EccError, match="hidden"):
        Namespace("org/m", 0)
    with pytest.raises(ecc.EccError, match="dtype 'half'"):
        Namespace("org/m", 16, dtype="half")


def test_per_step_data_pickles(region, ns):
    sched = SchedulerSide(region(), ns)
    sched.query(Item("req-1", 0, "pick13", 64))
    sched.allocated("req-1", 0)
    meta = sched.build_step()
    assert pickle.loads(pickle.dumps(meta)) == meta and len(meta.saves) == 1
    report = WorkerSide(region()).report()
    assert pickle.loads(pickle.dumps(report)) == report
