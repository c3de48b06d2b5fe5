# SPDX-License-Identifier: Apache-2.0
"""The serving layer driven through the calls vLLM's scheduler and model runner
make of an EC connector, in their order, over several steps (read from vLLM
main of 2026-06 to 2026-09: the 0.29-0.33 releases). Each call is annotated
with the vLLM function it mirrors. One scheduler, two TP ranks (host engine)
sharing one region with a second, producing engine instance."""

from dataclasses import dataclass, field
from typing import List

import pytest
import serving_worker
from conftest import region_overrides

import ecc
from ecc import EntryState
from ecc.serving import Namespace, SchedulerSide, WorkerSide
from ecc.serving.steps import SchedulerSteps, WorkerSteps

HIDDEN = 8
NS = dict(model="Qwen/Qwen2.5-VL-7B-Instruct", hidden=HIDDEN, dtype="float16")


@dataclass
class Position:
    embeds: int

    def get_num_embeds(self):
        return self.embeds


@dataclass
class Feature:  # vllm/multimodal/inputs.py MultiModalFeatureSpec
    identifier: str
    mm_position: Position


@dataclass
class Request:  # vllm/v1/request.py Request
    request_id: str
    mm_features: List[Feature] = field(default_factory=list)

    def get_num_encoder_embeds(self, i):
        return self.mm_features[i].mm_position.get_num_embeds()


def request(rid, *images):
    return Request(rid, [Feature(h, Position(rows)) for h, rows in images])


class Engine:
    """One vLLM instance: its scheduler-side calls and TP=2 worker ranks."""

    def __init__(self, connect, producer=True, consumer=True):
        ns = Namespace(**NS)
        self.conn = connect()
        self.sched = SchedulerSide(self.conn, ns, ranks=2)
        self.calls = SchedulerSteps(self.sched, producer=producer, consumer=consumer)
        self.ranks = [WorkerSteps(WorkerSide(connect(), rank=r), ns) for r in range(2)]
        self.encoded = []  # identifiers the encoder ran for

    def schedule(self, waiting, budget=10):
        """vllm/v1/core/sched/scheduler.py Scheduler.schedule: returns the
        requests scheduled, their local encoder inputs, and the metadata."""
        scheduled, to_encode = [], {}
        for req in waiting:
            # Scheduler.schedule, waiting loop: ensure_cache_available gates it.
            if not self.calls.ensure_cache_available(req):
                continue
            # Scheduler._try_schedule_encoder_inputs: has_cache_item per item.
            local, external = [], []
            for i, f in enumerate(req.mm_features):
                (external if self.calls.has_cache_item(f.identifier) else local).append(i)
            if len(scheduled) >= budget:
                break  # allocate_slots failed: nothing allocated for it
            # after allocate_slots: encoder_cache_manager.allocate, then
            # update_state_after_alloc for local and external inputs alike.
            for i in local + external:
                self.calls.update_state_after_alloc(req, i)
            scheduled.append(req)
            to_encode[req.request_id] = local
        # Scheduler.schedule: build_connector_meta after the KV connector's.
        return scheduled, to_encode, self.calls.build_connector_meta()

    def execute(self, scheduled, to_encode, meta, ranks=(0, 1)):
        """vllm/v1/worker/gpu_model_runner.py GPUModelRunner.execute_model,
        _preprocess within ECConnectorModelRunnerMixin._get_ec_connector_output,
        on each rank. Returns each rank's encoder_cache and the reports."""
        caches, reports = [], []
        for r in ranks:
            w, cache = self.ranks[r], {}
            w.bind(meta)  # ECConnectorBase.bind_connector_metadata
            w.start_load_caches(cache)  # consumer: start_load_caches(encoder_cache)
            for req in scheduled:  # GPUModelRunner._execute_mm_encoder
                for i in to_encode[req.request_id]:
                    f = req.mm_features[i]
                    cache[f.identifier] = serving_worker.encode(f.identifier,
                                                                f.mm_position.embeds, HIDDEN)
                    if r == 0:
                        self.encoded.append(f.identifier)
                    w.save_caches(cache, f.identifier)  # maybe_save_ec_to_connector
            w.get_finished()  # the mixin's finally: get_finished(finished_req_ids)
            # build_connector_worker_meta (worker -> scheduler metadata), and
            # the host engine's completions are in by the next poll.
            reports.append(serving_worker.collect(w.worker, len(meta.loads),
                                                  len(meta.saves) if r == 0 else 0))
            w.clear()  # clear_connector_metadata
            caches.append(cache)
        # Scheduler.update_from_output: update_connector_output.
        self.calls.update_connector_output(reports)
        return caches


@pytest.fixture
def connect(ini, region_dir):
    opened = []
    o = region_overrides(region_dir, name="vllmseq", blocks=256, directory=True)

    def make():
        c = ecc.Connector(ini, o)
        opened.append(c)
        return c

    yield make
    for c in reversed(opened):
        c.close()


def pins(engine, identifier):
    key = engine.sched.namespace.key(identifier)
    return engine.conn.peek([key])[0]


def test_steps_of_hits_misses_deferrals_preemption_and_early_finish(connect):
    e = Engine(connect)
    other = Engine(connect)  # a second instance on the host, producing too

    # Step 1: two cold images; the second is asked for twice in one step by
    # two requests (vLLM's encoder cache manager shares it: asked once).
    r1, r2 = request("r1", ("img-a", 64)), request("r2", ("img-b", 128))
    scheduled, to_encode, meta = e.schedule([r1, r2])
    assert [o.key.split("/")[-1] for o in meta.saves] == ["img-a", "img-b"]
    caches = e.execute(scheduled, to_encode, meta)
    assert e.sched.stats.saved == 2 and e.sched.pending() == (0, 0)
    assert e.encoded == ["img-a", "img-b"]

    # Step 2: the other instance finds both: every rank loads, nothing encodes.
    r3 = request("r3", ("img-a", 64), ("img-b", 128))
    scheduled, to_encode, meta = other.schedule([r3])
    assert to_encode == {"r3": []} and len(meta.loads) == 2 and meta.saves == ()
    caches = other.execute(scheduled, to_encode, meta)
    for cache in caches:
        for h, rows in (("img-a", 64), ("img-b", 128)):
            assert (cache[h] == serving_worker.encode(h, rows, HIDDEN)).all()
    assert other.encoded == [] and pins(other, "img-a").pins == 0

    # Step 3: the other instance is writing img-c (reserved, encoder not yet
    # run): this instance defers r4 instead of encoding it a second time.
    r_other = request("o1", ("img-c", 64))
    o_sched, o_encode, o_meta = other.schedule([r_other])
    r4 = request("r4", ("img-c", 64))
    scheduled, to_encode, meta = e.schedule([r4])
    assert scheduled == [] and meta.loads == () and meta.saves == ()
    other.execute(o_sched, o_encode, o_meta)  # its step ends: img-c is published
    scheduled, to_encode, meta = e.schedule([r4])
    assert scheduled == [r4] and to_encode == {"r4": []} and len(meta.loads) == 1
    e.execute(scheduled, to_encode, meta)
    assert e.encoded == ["img-a", "img-b"] and e.sched.stats.deferrals == 1

    # Step 4: r5 asks for a hit but does not fit the step (allocate_slots
    # fails): its pin is given back when the step ends; preempted later
    # (Scheduler._preempt_request: no EC call), it is asked again and hits.
    r5 = request("r5", ("img-a", 64))
    scheduled, to_encode, meta = e.schedule([r5], budget=0)
    assert scheduled == [] and meta.loads == ()
    assert pins(e, "img-a").pins == 0 and e.sched.stats.unused_pins == 1
    scheduled, to_encode, meta = e.schedule([r5])
    assert len(meta.loads) == 1
    e.execute(scheduled, to_encode, meta)

    # Step 5: r6 finishes (aborted: Scheduler._free_request, request_finished)
    # after its metadata went out and before rank 1 loaded: rank 0 loads,
    # rank 1 still loads and releases its own rank; nothing leaks.
    r6 = request("r6", ("img-b", 128))
    scheduled, to_encode, meta = e.schedule([r6])
    e.execute(scheduled, to_encode, meta, ranks=(0,))
    e.calls.request_finished(r6)
    assert pins(e, "img-b").pins == 1 and e.sched.pending() == (1, 0)
    e.execute(scheduled, to_encode, meta, ranks=(1,))
    assert pins(e, "img-b").pins == 0 and e.sched.pending() == (0, 0)

    # Nothing pinned or reserved is left, and every entry is whole.
    for x in e.conn.list():
        assert x.state == EntryState.READY and x.pins == 0
    assert e.sched.stats.load_failures == 0 and other.sched.stats.load_failures == 0


def test_a_consumer_only_instance_never_reserves(connect):
    consumer = Engine(connect, producer=False)
    r = request("c1", ("img-z", 64))
    scheduled, to_encode, meta = consumer.schedule([r])
    assert to_encode == {"c1": [0]} and meta.saves == ()
    consumer.execute(scheduled, to_encode, meta)
    assert pins(consumer, "img-z").state == EntryState.ABSENT
