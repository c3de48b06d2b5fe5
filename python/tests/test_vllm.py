# SPDX-License-Identifier: Apache-2.0
"""ecc.vllm: without vLLM its import fails naming vLLM; with a stand-in of the
vLLM interfaces it uses (the published ECConnectorBase of 0.29-0.33, written
out below from its signatures), importing loads neither the C library nor
CUDA, and a scheduler connector and two worker connectors (TP=2) run steps
through the serving layer. With a real vLLM, the class is vLLM's subclass
and vLLM's factory finds it by module path (skipped, saying so, elsewhere)."""

import importlib.util
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import serving_worker
from conftest import PYTHON_DIR, region_overrides

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
HIDDEN = 8

# The parts of vLLM ecc.vllm imports, as their signatures are published.
STUB = {
    "vllm/__init__.py": "",
    "vllm/distributed/__init__.py": "",
    "vllm/distributed/parallel_state.py": """
        TP_RANK = 0
        def get_tensor_model_parallel_rank():
            return TP_RANK
        def get_tensor_model_parallel_world_size():
            return 2
    """,
    "vllm/distributed/ec_transfer/__init__.py": "",
    "vllm/distributed/ec_transfer/ec_connector/__init__.py": "",
    "vllm/distributed/ec_transfer/ec_connector/base.py": """
        import enum
        from abc import ABC
        class ECConnectorRole(enum.Enum):
            SCHEDULER = 0
            WORKER = 1
        class ECConnectorMetadata(ABC):
            pass
        class ECConnectorWorkerMetadata(ABC):
            def aggregate(self, other):
                raise NotImplementedError
        class ECConnectorBase(ABC):
            def __init__(self, vllm_config, role):
                self._connector_metadata = None
                self._vllm_config, self._role = vllm_config, role
                t = vllm_config.ec_transfer_config
                self._is_producer = t.ec_role in ("ec_producer", "ec_both")
                self._is_consumer = t.ec_role in ("ec_consumer", "ec_both")
            @property
            def is_producer(self):
                return self._is_producer
            @property
            def is_consumer(self):
                return self._is_consumer
            def bind_connector_metadata(self, connector_metadata):
                self._connector_metadata = connector_metadata
            def clear_connector_metadata(self):
                self._connector_metadata = None
            def _get_connector_metadata(self):
                assert self._connector_metadata is not None
                return self._connector_metadata
    """,
    "vllm/distributed/ec_transfer/ec_connector/metrics.py": """
        from dataclasses import dataclass, field
        @dataclass
        class ECConnectorStats:
            data: dict = field(default_factory=dict)
        class ECConnectorPromMetrics:
            def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
                self._counter_cls = metric_types["Counter"]
                self.per_engine_labelvalues = per_engine_labelvalues
    """,
}


@pytest.fixture
def stub(tmp_path, monkeypatch):
    for rel, text in STUB.items():
        path = tmp_path / "stub" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    root = str(tmp_path / "stub")
    monkeypatch.syspath_prepend(root)
    for name in [m for m in sys.modules if m == "vllm" or m.startswith(("vllm.", "ecc.vllm"))]:
        monkeypatch.delitem(sys.modules, name)
    return root


def run_python(code, path=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYTHON_DIR), *path]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is importable here")
def test_without_vllm_the_import_fails_naming_vllm():
    r = run_python("import ecc.vllm")
    assert r.returncode != 0
    assert "ImportError: ecc.vllm is the connector for vLLM and needs vLLM" in r.stderr
    assert "use ecc.serving" in r.stderr


def test_importing_it_loads_neither_the_library_nor_cuda(stub):
    r = run_python("""
        import sys
        import ecc, ecc.vllm, ecc._lib
        maps = open("/proc/self/maps").read()
        print(ecc._lib._loaded is None, "libecc-host" in maps, "libcuda" in maps,
              "torch" in sys.modules, ecc.vllm.ECCConnector.__mro__[1].__module__)
    """, [stub])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False", "False", "False",
                                "vllm.distributed.ec_transfer.ec_connector.base"]


class Counter:
    """prometheus_client's Counter as far as build_prom_metrics uses it."""

    made = {}

    def __init__(self, name, documentation, labelnames):
        self.values = {}
        Counter.made[name] = self

    def labels(self, *values):
        counter = self

        class Child:
            def inc(self, n):
                counter.values[values] = counter.values.get(values, 0) + n
        return Child()


def vllm_config(ini, overrides, role):
    extra = {"config": str(ini), "overrides": overrides, "defer_timeout_s": 1.0}
    return SimpleNamespace(
        ec_transfer_config=SimpleNamespace(ec_role=role, ec_connector_extra_config=extra),
        model_config=SimpleNamespace(model="Qwen/Qwen2.5-VL-7B-Instruct", dtype="float16",
                                     revision=None, mm_processor_kwargs={"max_pixels": 1 << 20},
                                     get_hidden_size=lambda: HIDDEN),
        parallel_config=SimpleNamespace(tensor_parallel_size=2))


def request(rid, identifier, rows):
    feature = SimpleNamespace(identifier=identifier,
                              mm_position=SimpleNamespace(get_num_embeds=lambda: rows))
    return SimpleNamespace(request_id=rid, mm_features=[feature],
                           get_num_encoder_embeds=lambda i: rows)


def test_each_call_maps_onto_the_serving_layer(stub, ini, region_dir):
    import ecc.vllm as ev
    from vllm.distributed import parallel_state
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
    o = region_overrides(region_dir, name="vllmconn", blocks=128, directory=True)
    cfg = vllm_config(ini, o, "ec_both")
    sched = ev.ECCConnector(cfg, ECConnectorRole.SCHEDULER)
    workers = []
    for rank in (0, 1):
        parallel_state.TP_RANK = rank
        workers.append(ev.ECCConnector(cfg, ECConnectorRole.WORKER))

    def step(req, encode):
        assert sched.ensure_cache_available(req, 0)
        hit = sched.has_cache_item(req.mm_features[0].identifier)
        sched.update_state_after_alloc(req, 0)
        meta = sched.build_connector_meta(scheduler_output=None)
        merged, caches = ev.ECCWorkerMetadata(), []
        for w in workers:
            cache = {}
            w.bind_connector_metadata(meta)
            w.start_load_caches(cache)
            if encode:
                h = req.mm_features[0].identifier
                cache[h] = serving_worker.encode(h, 64, HIDDEN)
                w.save_caches(encoder_cache=cache, mm_hash=h)
            assert w.get_finished(set()) == (None, None)
            report = serving_worker.collect(w._worker_steps.worker, len(meta.step.loads),
                                            len(meta.step.saves) if w is workers[0] else 0)
            merged = merged.aggregate(ev.ECCWorkerMetadata([report]))
            w.clear_connector_metadata()
            caches.append(cache)
        sched.update_connector_output(SimpleNamespace(ec_connector_worker_meta=merged))
        return hit, meta, caches

    hit, meta, _ = step(request("r1", "img-1", 64), encode=True)
    assert not hit and len(meta.step.saves) == 1 and not sched.has_pending_push_work()
    hit, meta, caches = step(request("r2", "img-1", 64), encode=False)
    assert hit and len(meta.step.loads) == 1
    for cache in caches:
        assert (cache["img-1"] == serving_worker.encode("img-1", 64, HIDDEN)).all()
    finished = sched.request_finished(request("r2", "img-1", 64))
    assert finished[0] is False and finished[1]["ecc_keys"][0].endswith("/img-1")

    stats = sched.get_ec_connector_stats()
    assert stats.data["hits"] == 1 and stats.data["saves"] == 1 and stats.data["saved"] == 1
    assert stats.data["loads_done"] == 1 and not sched.get_ec_connector_stats().reduce()["hits"]
    total = ev.ECCConnector.build_ec_connector_stats({"hits": 2}).aggregate(stats)
    assert total.reduce()["hits"] == 3
    prom = ev.ECCConnector.build_prom_metrics(cfg, {"Counter": Counter}, ["engine"], {0: ["0"]})
    prom.observe(stats.data, 0)
    assert Counter.made["vllm:ecc_hits"].values == {("0",): 1}
    for c in [sched] + workers:
        c.shutdown()


def test_unknown_extra_config_keys_are_refused_by_name(stub, ini, region_dir):
    import ecc.vllm as ev
    from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorRole
    cfg = vllm_config(ini, {}, "ec_consumer")
    cfg.ec_transfer_config.ec_connector_extra_config["pin_ttl"] = 3
    with pytest.raises(ValueError, match=r"unknown ec_connector_extra_config keys \['pin_ttl'\]"):
        ev.ECCConnector(cfg, ECConnectorRole.SCHEDULER)


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed here (it cannot be, in CI)")
def test_with_vllm_the_factory_finds_the_connector_by_module_path():
    r = run_python("""
        from vllm.distributed.ec_transfer.ec_connector.base import ECConnectorBase
        from vllm.distributed.ec_transfer.ec_connector.factory import ECConnectorFactory
        from types import SimpleNamespace
        import ecc.vllm
        cfg = SimpleNamespace(ec_connector="ECCConnector", ec_connector_module_path="ecc.vllm")
        cls = ECConnectorFactory.get_connector_class(cfg)
        print(cls is ecc.vllm.ECCConnector and issubclass(cls, ECConnectorBase))
    """)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr
