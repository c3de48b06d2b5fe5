# SPDX-License-Identifier: Apache-2.0
"""A worker rank of the serving tests, run in its own process (spawned): it
takes StepMeta from a pipe, loads and saves through ecc.serving.WorkerSide on
the host engine with a stand-in encoder, checks every loaded byte against a
fresh encode, and sends back its WorkerReport and the keys that differed."""

import hashlib
import os
import signal
import time

import numpy as np

import ecc
from ecc.serving import Namespace, WorkerReport, WorkerSide


def encode(content_hash, rows, hidden):
    """The stand-in encoder: rows x hidden float16 determined by the content
    alone, the same in every process."""
    seed = int.from_bytes(hashlib.sha256(content_hash.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal((rows, hidden)).astype(np.float16)


def encode_torch(content_hash, rows, hidden, device):
    """The same content-determined rows as bfloat16 on a GPU, made there."""
    import torch
    seed = int.from_bytes(hashlib.sha256(content_hash.encode()).digest()[:8], "little")
    g = torch.Generator(device=device).manual_seed(seed & ((1 << 63) - 1))
    return torch.randn((rows, hidden), generator=g, device=device).to(torch.bfloat16)


class Torch:
    """How a GPU rank encodes, saves and loads: on `device`, on the current
    stream or on a side stream of its own."""

    def __init__(self, device, side_stream):
        import torch
        self.torch, self.device = torch, device
        self.stream = torch.cuda.Stream(device=device) if side_stream else None

    def context(self):
        import contextlib
        return self.torch.cuda.stream(self.stream) if self.stream else contextlib.nullcontext()

    def encode(self, content_hash, rows, hidden):
        with self.context():
            return encode_torch(content_hash, rows, hidden, self.device)

    def same(self, got, content_hash, rows, hidden):
        with self.context():
            want = encode_torch(content_hash, rows, hidden, self.device)
            return bool(self.torch.equal(got, want))


def collect(worker, loads, saves, timeout=10.0):
    """The worker's reports until `loads` loads and `saves` saves are settled."""
    saved, loaded, failures = [], [], []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = worker.report()
        saved += r.saved
        loaded += r.loaded
        failures += r.failures
        settled_saves = len(saved) + sum(f.what == "save" for f in failures)
        settled_loads = len(loaded) + sum(f.what == "load" for f in failures)
        if settled_saves >= saves and settled_loads >= loads:
            break
        time.sleep(0.0005)
    return WorkerReport(worker.rank, tuple(saved), tuple(loaded), tuple(failures))


def serve(conn, ini, overrides, rank, namespace_args, device=None, side_stream=False):
    """Steps until ("exit",). A step is ("step", meta, how): how "kill-mid-save"
    makes the saving rank queue its saves and die (SIGKILL) before they finish.
    With a device, the rank works in torch bfloat16 on that GPU (CUDA engine),
    on a side stream of its own when side_stream."""
    ns = Namespace(**namespace_args)
    gpu = Torch(device, side_stream) if device else None
    with ecc.Connector(ini, overrides) as c:
        worker = WorkerSide(c, rank=rank)
        conn.send(("ready", os.getpid()))
        while True:
            cmd = conn.recv()
            if cmd[0] == "exit":
                break
            _, meta, how = cmd
            conn.send(("report",) + step(c, ns, worker, gpu, meta, how))


def step(c, ns, worker, gpu, meta, how):
    stream = gpu.stream if gpu else None
    got = worker.start_loads(meta, device=gpu.device if gpu else None, stream=stream)
    made = gpu.encode if gpu else encode
    outputs = {(o.request_id, o.index): made(o.key[len(ns.prefix):], o.shape[0], ns.hidden)
               for o in meta.saves}
    if how == "kill-mid-save" and worker.saves and meta.saves:
        c.save_reserved_many([(o.token, outputs[(o.request_id, o.index)]) for o in meta.saves])
        os.kill(os.getpid(), signal.SIGKILL)
    worker.save(meta, outputs, stream=stream)
    report = collect(worker, len(meta.loads), len(meta.saves) if worker.saves else 0)
    differed = []
    for o in meta.loads:
        if o.transfer_id not in report.loaded:
            continue
        content, dst = o.key[len(ns.prefix):], got[(o.request_id, o.index)]
        same = gpu.same(dst, content, o.shape[0], ns.hidden) if gpu else \
            np.array_equal(dst, encode(content, o.shape[0], ns.hidden))
        if not same:
            differed.append(o.key)
    return report, differed
