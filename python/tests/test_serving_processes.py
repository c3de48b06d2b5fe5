# SPDX-License-Identifier: Apache-2.0
"""ecc.serving in real processes: this process is the scheduler (no GPU), two
spawned processes are the worker ranks of one TP=2 engine, all on one region
(host engine). Steps of repeating images, a worker SIGKILLed mid-save, and
through all of it: every loaded byte equals a fresh encode, and every pin ends
released exactly once per rank."""

import multiprocessing
import os

import pytest
import serving_worker
from conftest import region_overrides

import ecc
from ecc import EntryState
from ecc.serving import Decision, Item, Namespace, SchedulerSide

HIDDEN = 16  # float16: 32 bytes a row
NS_ARGS = dict(model="org/vision-tower", hidden=HIDDEN, dtype="float16", revision="r2")


class Engine:
    """A scheduler side in this process and `ranks` spawned worker ranks."""

    def __init__(self, ini, overrides, ranks=2, **sched_args):
        self.ini, self.overrides = ini, overrides
        self.conn = ecc.Connector(ini, overrides)
        self.sched = SchedulerSide(self.conn, Namespace(**NS_ARGS), ranks=ranks, **sched_args)
        self.ctx = multiprocessing.get_context("spawn")
        self.workers = [self._start(rank) for rank in range(ranks)]

    def _start(self, rank):
        mine, theirs = self.ctx.Pipe()
        p = self.ctx.Process(target=serving_worker.serve,
                             args=(theirs, self.ini, self.overrides, rank, NS_ARGS))
        p.start()
        assert mine.poll(30), f"worker {rank} did not start"
        assert mine.recv()[0] == "ready"
        return p, mine

    def step(self, items, how=None, ranks=None):
        """Query and schedule every item, run the step on the workers (all, or
        those in `ranks`), and take their reports. Returns (answers,
        meta, differed keys)."""
        answers = {(i.request_id, i.index): self.sched.query(i) for i in items}
        for i in items:
            if answers[(i.request_id, i.index)].decision in (Decision.HIT, Decision.SAVE):
                self.sched.allocated(i.request_id, i.index)
        meta = self.sched.build_step()
        chosen = range(len(self.workers)) if ranks is None else ranks
        for rank in chosen:
            self.workers[rank][1].send(("step", meta, how))
        reports, differed = [], []
        for rank in chosen:
            p, conn = self.workers[rank]
            if not conn.poll(30):
                pytest.fail(f"worker {rank} sent no report")
            try:
                _, report, bad = conn.recv()
            except EOFError:
                continue  # it died
            reports.append(report)
            differed += bad
        self.sched.update(reports)
        return answers, meta, differed

    def close(self):
        for p, conn in self.workers:
            if p.is_alive():
                conn.send(("exit",))
            p.join(30)
        self.sched.close()
        self.conn.close()


@pytest.fixture
def engine(ini, region_dir):
    made = []

    def make(**kw):
        o = region_overrides(region_dir, name=f"servp{os.getpid()}-{len(made)}", blocks=512,
                             directory=True)
        e = Engine(str(ini), o, **kw)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def items_of(step, hashes, rows=64):
    return [Item(f"s{step}-r{i}", 0, h, rows) for i, h in enumerate(hashes)]


def test_two_ranks_share_the_entries_one_of_them_saved(engine):
    e = engine()
    answers, meta, bad = e.step(items_of(0, ["img-a", "img-b"]))
    assert {a.decision for a in answers.values()} == {Decision.SAVE} and len(meta.saves) == 2
    assert e.sched.stats.saved == 2
    trace = ["img-a", "img-b", "img-c", "img-a", "img-a", "img-d", "img-b", "img-c"]
    for step in range(1, 5):
        answers, meta, bad = e.step(items_of(step, trace[2 * step - 2:2 * step]))
        assert bad == []
    s = e.sched.stats
    assert (s.hits, s.saves, s.saved) == (6, 4, 4)  # c and d saved once each, then hit
    assert s.loads_done == 6 and s.load_failures == 0 and e.sched.pending() == (0, 0)
    listed = {x.key: x for x in e.conn.list()}
    assert len(listed) == 4 and all(x.state == EntryState.READY and x.pins == 0
                                    for x in listed.values())


def test_the_same_image_in_one_step_is_encoded_once_and_the_rest_deferred(engine):
    e = engine()
    answers, meta, _ = e.step(items_of(0, ["twin"] * 3))
    assert sorted(a.decision.value for a in answers.values()) == ["defer", "defer", "save"]
    answers, meta, bad = e.step([Item("s0-r1", 0, "twin", 64), Item("s0-r2", 0, "twin", 64)])
    assert [a.decision for a in answers.values()] == [Decision.HIT, Decision.HIT]
    assert bad == [] and e.sched.stats.loads_done == 2


def test_a_worker_killed_mid_save_leaves_nothing_stale_and_the_key_is_encoded_again(engine):
    now = [100.0]
    e = engine(save_timeout=60.0, clock=lambda: now[0])
    key = e.sched.namespace.key("img-k")
    answers, meta, _ = e.step(items_of(0, ["img-k"]), how="kill-mid-save")
    p0, _ = e.workers[0]
    p0.join(30)
    assert p0.exitcode == -9  # SIGKILL, its save queued
    assert e.sched.pending() == (0, 1)
    # Nobody may load it: it was never published.
    assert e.conn.peek([key])[0].state != EntryState.READY
    e.sched.build_step()
    assert e.sched.pending() == (0, 1)  # within save_timeout: still the worker's to report
    now[0] += 61.0
    e.sched.build_step()  # past save_timeout: the reservation is given up
    assert e.sched.stats.save_timeouts == 1 and e.sched.pending() == (0, 0)
    assert e.conn.peek([key])[0].state == EntryState.ABSENT
    e.workers[0] = e._start(0)  # the engine restarts the rank
    answers, meta, bad = e.step(items_of(1, ["img-k"]))
    assert [a.decision for a in answers.values()] == [Decision.SAVE]
    answers, meta, bad = e.step(items_of(2, ["img-k"]))
    assert [a.decision for a in answers.values()] == [Decision.HIT] and bad == []
