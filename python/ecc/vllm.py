# SPDX-License-Identifier: Apache-2.0
"""ecc.vllm: ECCConnector, vLLM's encoder-cache connector over ecc.serving.

    --ec-transfer-config '{"ec_connector": "ECCConnector",
                           "ec_connector_module_path": "ecc.vllm",
                           "ec_role": "ec_both",
                           "ec_connector_extra_config": {"config": "/etc/ecc/serving.ini"}}'

Written against vLLM's ECConnectorBase as of its 0.29-0.33 releases
(vllm/distributed/ec_transfer/ec_connector/base.py: ensure_cache_available,
has_pending_push_work, worker metadata and connector stats); the hooks an
older release lacks are simply never called. Every method maps onto
ecc.serving (SchedulerSteps, WorkerSteps): the behaviour lives and is tested
there. Importing this module loads neither CUDA nor libecc-host.so; making a
connector does."""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List

try:
    from vllm.distributed.ec_transfer.ec_connector.base import (ECConnectorBase,
                                                                ECConnectorMetadata,
                                                                ECConnectorRole)
except ImportError as e:  # pragma: no cover - exercised where vLLM is absent
    raise ImportError(
        "ecc.vllm is the connector for vLLM and needs vLLM (0.29 or later, for "
        "vllm.distributed.ec_transfer.ec_connector.base.ECConnectorBase), which is not "
        f"importable here ({e}); install vLLM, or use ecc.serving, which needs no engine") from e

try:
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorWorkerMetadata
except ImportError:  # a release without worker -> scheduler metadata
    ECConnectorWorkerMetadata = object
try:
    from vllm.distributed.ec_transfer.ec_connector.metrics import (ECConnectorPromMetrics,
                                                                   ECConnectorStats)
except ImportError:  # a release without connector stats
    ECConnectorPromMetrics, ECConnectorStats = None, None

from .serving import Namespace, SchedulerSide, StepMeta, WorkerSide
from .serving.scheduler import ServingStats
from .serving.steps import SchedulerSteps, WorkerSteps

# ec_connector_extra_config keys and their defaults (docs/vllm.md).
EXTRA_DEFAULTS = {
    "config": None,          # the INI file every process of the deployment opens
    "overrides": {},         # "section.key": "value" pairs on top of it
    "hidden_size": None,     # the encoder output's row width; default: the model's hidden size
    "processor": None,       # settings the embeddings depend on; default: mm_processor_kwargs
    "defer_timeout_s": 5.0,  # how long a request waits behind another process's write
    "pin_ttl_s": 120.0,      # a load no rank reported is released after this
    "save_timeout_s": 120.0,  # a save no rank reported is given up after this
}

# Prometheus counters: vllm:ecc_<name>_total, one per ServingStats field.
METRICS = tuple(f for f in ServingStats.__dataclass_fields__)


@dataclass
class ECCMetadata(ECConnectorMetadata):
    """The scheduler side's orders for one step (ecc.serving.StepMeta)."""

    step: StepMeta = field(default_factory=lambda: StepMeta(-1))


@dataclass
class ECCWorkerMetadata(ECConnectorWorkerMetadata):
    """The ranks' WorkerReports of one step, merged across ranks."""

    reports: List[Any] = field(default_factory=list)

    def aggregate(self, other):
        return ECCWorkerMetadata(self.reports + list(getattr(other, "reports", [])))


def _settings(extra):
    unknown = sorted(set(extra) - set(EXTRA_DEFAULTS))
    if unknown:
        raise ValueError(f"ecc.vllm: unknown ec_connector_extra_config keys {unknown}; known: "
                         f"{sorted(EXTRA_DEFAULTS)}")
    s = dict(EXTRA_DEFAULTS, **extra)
    if not s["config"]:
        raise ValueError('ecc.vllm: ec_connector_extra_config needs "config": the path of the '
                         'INI file (e.g. conf/serving.ini) every process of the deployment opens')
    return s


def _namespace(vllm_config, s):
    mc = vllm_config.model_config
    dtype = str(mc.dtype).replace("torch.", "")
    hidden = s["hidden_size"] or mc.get_hidden_size()
    processor = s["processor"] if s["processor"] is not None else \
        (getattr(mc, "mm_processor_kwargs", None) or {})
    return Namespace(mc.model, int(hidden), dtype=dtype, revision=mc.revision or "main",
                     processor=processor)


def _ranks(vllm_config):
    p = vllm_config.parallel_config
    return p.tensor_parallel_size * getattr(p, "prefill_context_parallel_size", 1)


def _worker_rank():
    """(rank in the group the scheduler pins for, whether it saves): rank 0
    of TP and of PCP saves, every rank loads."""
    from vllm.distributed import parallel_state as ps
    tp, tp_size = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    try:
        pcp = ps.get_pcp_group().rank_in_group
    except (AttributeError, AssertionError):  # a release or a run without PCP
        pcp = 0
    return pcp * tp_size + tp, tp == 0 and pcp == 0


def _device(conn):
    """Where the hits are loaded: this rank's current GPU under the CUDA
    engine; host memory (numpy) under the host engine."""
    if conn.describe().engine != "cuda":
        return None
    import torch
    return f"cuda:{torch.cuda.current_device()}"


class ECCConnector(ECConnectorBase):
    """Roles: ec_producer saves misses, ec_consumer loads hits, ec_both does
    both. TP x PCP ranks each load every hit; rank 0 saves."""

    def __init__(self, vllm_config, role):
        super().__init__(vllm_config=vllm_config, role=role)
        import ecc
        s = _settings(dict(vllm_config.ec_transfer_config.ec_connector_extra_config or {}))
        self._ns = _namespace(vllm_config, s)
        self._conn = ecc.Connector(s["config"], s["overrides"])
        self._sched = self._sched_steps = self._worker_steps = None
        self._last = ServingStats()
        if role == ECConnectorRole.SCHEDULER:
            self._sched = SchedulerSide(self._conn, self._ns, ranks=_ranks(vllm_config),
                                        defer_timeout=s["defer_timeout_s"],
                                        pin_ttl=s["pin_ttl_s"], save_timeout=s["save_timeout_s"])
            self._sched_steps = SchedulerSteps(self._sched, producer=self.is_producer,
                                               consumer=self.is_consumer)
        else:
            rank, saves = _worker_rank()
            worker = WorkerSide(self._conn, rank=rank, saves=saves and self.is_producer)
            self._worker_steps = WorkerSteps(worker, self._ns)

    # ---- scheduler side ----

    def ensure_cache_available(self, request, num_computed_tokens, *args, **kwargs):
        return self._sched_steps.ensure_cache_available(request)

    def has_cache_item(self, identifier):
        return self._sched_steps.has_cache_item(identifier)

    def update_state_after_alloc(self, request, index):
        self._sched_steps.update_state_after_alloc(request, index)

    def build_connector_meta(self, scheduler_output):
        return ECCMetadata(self._sched_steps.build_connector_meta())

    def update_connector_output(self, connector_output):
        meta = getattr(connector_output, "ec_connector_worker_meta", None)
        if meta is not None:
            self._sched_steps.update_connector_output(meta.reports)

    def request_finished(self, request):
        """Gives back what the request held; the keys of its items go to a
        proxy, which hands them to a consumer on another host (libecc-ucx.so)."""
        self._sched_steps.request_finished(request)
        keys = [self._ns.key(f.identifier) for f in request.mm_features]
        return False, ({"ecc_keys": keys} if keys and self.is_producer else None)

    def has_pending_push_work(self):
        return self._sched_steps.has_pending_push_work()

    # ---- worker side ----

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        self._worker_steps.bind(connector_metadata.step)

    def start_load_caches(self, encoder_cache, **kwargs):
        self._worker_steps.start_load_caches(encoder_cache, device=_device(self._conn))

    def save_caches(self, encoder_cache, mm_hash, **kwargs):
        if self.is_producer:
            self._worker_steps.save_caches(encoder_cache, mm_hash)

    def get_finished(self, finished_req_ids):
        return self._worker_steps.get_finished()

    def build_connector_worker_meta(self):
        return ECCWorkerMetadata([self._worker_steps.build_connector_worker_meta()])

    def clear_connector_metadata(self):
        super().clear_connector_metadata()
        self._worker_steps.clear()

    def shutdown(self):
        if self._sched is not None:
            self._sched.close()
        self._conn.close()

    # ---- stats ----

    def get_ec_connector_stats(self):
        """The scheduler side's counters since the last call."""
        if self._sched is None or ECConnectorStats is None:
            return None
        now = self._sched.stats
        delta = {k: getattr(now, k) - getattr(self._last, k) for k in METRICS}
        self._last = ServingStats(**asdict(now))
        return ECCStats(data=delta)

    @classmethod
    def build_ec_connector_stats(cls, data=None):
        return None if ECConnectorStats is None else ECCStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        if ECConnectorPromMetrics is None:
            return None
        return ECCPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)


if ECConnectorStats is not None:

    @dataclass
    class ECCStats(ECConnectorStats):
        """ServingStats deltas, summed across engines and intervals."""

        def reset(self):
            self.data = {}

        def aggregate(self, other):
            for k, v in other.data.items():
                self.data[k] = self.data.get(k, 0) + v
            return self

        def reduce(self) -> Dict[str, Any]:
            return dict(self.data)

        def is_empty(self):
            return not any(self.data.values())

    class ECCPromMetrics(ECConnectorPromMetrics):
        """One counter per ServingStats field: vllm:ecc_<field>_total."""

        def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
            super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
            self._counters = {}
            for name in METRICS:
                counter = self._counter_cls(name=f"vllm:ecc_{name}",
                                            documentation=f"ecc.serving: {name}",
                                            labelnames=labelnames)
                self._counters[name] = {i: counter.labels(*v)
                                        for i, v in per_engine_labelvalues.items()}

        def observe(self, transfer_stats_data, engine_idx=0):
            for name, value in transfer_stats_data.items():
                if name in self._counters and value:
                    self._counters[name][engine_idx].inc(value)
