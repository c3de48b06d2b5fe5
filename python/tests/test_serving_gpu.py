# SPDX-License-Identifier: Apache-2.0
"""ecc.serving's worker side on a GPU: two worker processes (TP=2) on one GPU
with the CUDA engine, torch bfloat16 encoder outputs made on the GPU, saved by
rank 0 and loaded by both into new tensors, on the default stream and on a
side stream of each rank; every loaded tensor equals a fresh encode.

Skips without a GPU, or fails instead with ECC_GPU_REQUIRED=1."""

import os

import pytest
import serving_worker
from conftest import region_overrides
from test_serving_processes import Engine

REQUIRED = os.environ.get("ECC_GPU_REQUIRED") == "1"


def unavailable(reason):
    if REQUIRED:
        pytest.fail(f"ECC_GPU_REQUIRED=1 but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    import torch
except ImportError:
    unavailable("PyTorch is not installed")
if not torch.cuda.is_available():
    unavailable("no CUDA GPU is visible to PyTorch")

HIDDEN, ROWS = 3584, 880  # Qwen2.5-VL-7B: a 1280x720 image, 7 KiB bf16 rows
NS_ARGS = dict(model="Qwen/Qwen2.5-VL-7B-Instruct", hidden=HIDDEN, dtype="bfloat16")


class GpuEngine(Engine):
    def __init__(self, ini, overrides, side_stream):
        self.side_stream = side_stream
        super().__init__(ini, overrides, ranks=2)

    def _start(self, rank):
        mine, theirs = self.ctx.Pipe()
        gpu = dict(self.overrides, **{"engine.type": "cuda"})
        p = self.ctx.Process(target=serving_worker.serve,
                             args=(theirs, self.ini, gpu, rank, NS_ARGS, "cuda:0",
                                   self.side_stream))
        p.start()
        assert mine.poll(120), f"worker {rank} did not start"
        assert mine.recv()[0] == "ready"
        return p, mine


@pytest.mark.parametrize("side_stream", [False, True], ids=["default-stream", "side-stream"])
def test_two_gpu_ranks_save_and_load_bf16_through_the_serving_layer(ini, region_dir,
                                                                    side_stream, monkeypatch):
    import test_serving_processes
    from ecc.serving import Decision, Item, Namespace, SchedulerSide
    monkeypatch.setattr(test_serving_processes, "NS_ARGS", NS_ARGS)
    o = region_overrides(region_dir, name=f"servgpu{os.getpid()}{int(side_stream)}",
                         block_size=HIDDEN * 2 * 16, blocks=64 * 8, directory=True)
    e = GpuEngine(str(ini), o, side_stream)
    try:
        assert isinstance(e.sched, SchedulerSide) and e.sched.namespace.dtype == "bfloat16"
        images = [f"gpu-img-{i}" for i in range(6)]
        answers, meta, bad = e.step([Item(f"a{i}", 0, h, ROWS) for i, h in enumerate(images)])
        assert {a.decision for a in answers.values()} == {Decision.SAVE}
        assert e.sched.stats.saved == 6 and e.sched.stats.save_failures == 0
        answers, meta, bad = e.step([Item(f"b{i}", 0, h, ROWS) for i, h in enumerate(images)])
        assert {a.decision for a in answers.values()} == {Decision.HIT}
        assert bad == [] and e.sched.stats.loads_done == 6 and e.sched.stats.load_failures == 0
        assert all(x.pins == 0 for x in e.conn.list())
        assert Namespace(**NS_ARGS).key("x") == e.sched.namespace.key("x")
    finally:
        e.close()
