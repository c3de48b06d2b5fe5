# SPDX-License-Identifier: Apache-2.0
"""The serving layer in the shape of an engine that asks about an item by its
content hash first and names the request later, and whose workers hand over
one encoder output at a time (vLLM's EC connector calls). Duck-typed: a
request has request_id, mm_features[i].identifier and
get_num_encoder_embeds(i); nothing of the engine is imported."""

from .plan import Decision, StepMeta


class SchedulerSteps:
    """The scheduler's calls, each mapped onto a SchedulerSide. producer: this
    instance encodes and saves misses; consumer: it loads hits."""

    def __init__(self, sched, producer=True, consumer=True):
        self.sched, self.producer, self.consumer = sched, producer, consumer

    def ensure_cache_available(self, request):
        """False (defer the request this step) while another process writes one
        of its items, up to the deferral deadline; what it finds ready is
        pinned for the step."""
        if not self.consumer:
            return True
        for feature in request.mm_features:
            if self.sched.look(feature.identifier).decision is Decision.DEFER:
                return False
        return True

    def has_cache_item(self, identifier):
        """True when the item is in the region and now pinned for every rank."""
        return self.consumer and self.sched.look(identifier).decision is Decision.HIT

    def update_state_after_alloc(self, request, index):
        """The item is scheduled: a hit becomes every rank's load; a miss a
        producer encodes is reserved for rank 0 to save (when it can be)."""
        feature = request.mm_features[index]
        rows = request.get_num_encoder_embeds(index) if self.producer else None
        return self.sched.allocated(request.request_id, index, feature.identifier, rows)

    def build_connector_meta(self):
        return self.sched.build_step()

    def update_connector_output(self, reports):
        self.sched.update(reports)

    def request_finished(self, request):
        """Finished, aborted (or preempted, where the engine says so)."""
        self.sched.finished(request.request_id)

    def has_pending_push_work(self):
        """Saves sent to the workers and not yet reported."""
        return self.sched.pending()[1] > 0


class WorkerSteps:
    """A worker rank's calls, each mapped onto a WorkerSide: loads before the
    encoder runs, the encoder's outputs kept as they come, saved in one batch
    when the step ends."""

    def __init__(self, worker, namespace):
        self.worker, self.namespace = worker, namespace
        self._meta, self._outputs = StepMeta(-1), {}

    def bind(self, meta):
        self._meta, self._outputs = meta, {}

    def _identifier(self, key):
        return key[len(self.namespace.prefix):]

    def start_load_caches(self, encoder_cache, device=None, stream=None):
        """Loads the step's hits into encoder_cache[identifier], ordered on
        `stream` (the current one by default)."""
        got = self.worker.start_loads(self._meta, device=device, stream=stream)
        for order in self._meta.loads:
            dst = got.get((order.request_id, order.index))
            if dst is not None:
                encoder_cache[self._identifier(order.key)] = dst

    def save_caches(self, encoder_cache, mm_hash):
        """Keeps encoder_cache[mm_hash] for the saving rank when the scheduler
        reserved it this step; other outputs are not the cache's."""
        if not self.worker.saves:
            return
        for order in self._meta.saves:
            if self._identifier(order.key) == mm_hash:
                self._outputs[(order.request_id, order.index)] = encoder_cache[mm_hash]

    def get_finished(self, stream=None):
        """Saves what the step kept (one batch, flushed after the encoder's work
        on `stream`); an order whose output never came is reported failed."""
        if self.worker.saves and self._meta.saves:
            self.worker.save(self._meta, self._outputs, stream=stream)
        self._outputs = {}
        return None, None

    def build_connector_worker_meta(self):
        """This rank's WorkerReport, polled now."""
        return self.worker.report()

    def clear(self):
        self._meta, self._outputs = StepMeta(-1), {}
