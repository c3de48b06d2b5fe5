#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a load_many step's host time goes, on the GPU: python/bench.py's step
(--images of 880 rows x 3 KiB, 32 by default, scattered and contiguous) timed
three ways in one run: the whole call, the C call alone (records built once,
ecc_load called directly; also from the call to the data being usable, less the
engine's copy time: how late the copy starts, plus the synchronisation), and the
client's Python alone (the C call answered at once); then cProfile's top
functions of the Python alone, and what each torch read of the fast path costs.
Medians of --reps.

    ECC_HOST_LIBRARY=build/lib/libecc-host.so python3 bench/lab/step_profile.py"""

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
import timeit
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import bench  # noqa: E402  (python/bench.py: its layouts and connector)
from ecc import _abi  # noqa: E402


class Answered:
    """core.lib with ecc_load answering 0 at once: the Python alone."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name in ("ecc_load", "ecc_load_pinned"):
            return lambda *args: 0
        return getattr(self._lib, name)


JUNK = None


def cold():
    """With --cold, run 128 MiB through the CPU's caches before each timed call,
    as python/bench.py's PyTorch gathers do before the step that follows them."""
    if JUNK is not None:
        np.add(JUNK, 1, out=JUNK)


def whole(c, entries, reps):
    out = []
    for _ in range(reps):
        cold()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        c.load_many(entries)
        out.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        bench.wait_for(c, len(entries))
    return statistics.median(out) * 1e6


def c_alone(c, entries, reps):
    core = c._core
    arr = (_abi.LoadEntry * len(entries))()
    for rec, (tid, ids, dst) in zip(arr, entries):
        rec.transfer_id, rec.block_ids, rec.n_blocks = tid, ids.ctypes.data, ids.size
        rec.dst, rec.dst_capacity = dst.data_ptr(), dst.numel() * dst.element_size()
    stream = torch.cuda.current_stream().cuda_stream
    out, late = [], []
    for _ in range(reps):
        cold()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        rc = core.lib.ecc_load(core.handle, arr, len(entries), stream)
        out.append(time.perf_counter() - t0)
        assert rc == 0, rc
        torch.cuda.synchronize()
        usable = time.perf_counter() - t0
        late.append(usable - bench.wait_for(c, len(entries))[0].elapsed_ns / 1e9)
    return statistics.median(out) * 1e6, statistics.median(late) * 1e6


def python_alone(c, entries, reps, profile):
    core = c._core
    lib, core.lib = core.lib, Answered(core.lib)
    try:
        out = []
        for _ in range(reps):
            cold()
            t0 = time.perf_counter()
            c.load_many(entries)
            out.append(time.perf_counter() - t0)
        text = ""
        if profile:
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(reps):
                c.load_many(entries)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            text = s.getvalue()
    finally:
        core.lib = lib
        core.pending.clear()
    return statistics.median(out) * 1e6, text


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--cold", action="store_true", help="caches thrashed before each call")
    p.add_argument("--images", type=int, default=32, help="images per step (32)")
    args = p.parse_args()
    if args.cold:
        global JUNK
        JUNK = np.zeros(128 << 20, np.uint8)
    torch.zeros(1, device="cuda")
    import os
    import shutil
    import tempfile
    region_dir = tempfile.mkdtemp(prefix="ecc-prof-", dir="/dev/shm")
    os.chmod(region_dir, 0o700)
    rows = []
    try:
        with bench.open_connector(region_dir, 1024) as c:
            nb = c.describe().num_blocks
            images = torch.randn(args.images, bench.ROWS, bench.HIDDEN, dtype=torch.bfloat16,
                                 device="cuda")
            pinned = torch.empty(nb, bench.HIDDEN, dtype=torch.bfloat16, pin_memory=True)
            tid = 1 << 40
            for layout, ids in bench.layouts(nb, args.images, 0).items():
                bench.store(c, pinned, images, ids)
                dsts = [torch.empty(bench.ROWS, bench.HIDDEN, dtype=torch.bfloat16, device="cuda")
                        for _ in range(args.images)]
                block_ids = [row.astype(np.uint32) for row in ids]
                entries = [(tid + i, b, d) for i, (b, d) in enumerate(zip(block_ids, dsts))]
                w = whole(c, entries, args.reps)
                ca, late = c_alone(c, entries, args.reps)
                pa, text = python_alone(c, entries, args.reps, layout == "scattered")
                rows.append((layout, w, ca, late, pa))
                if layout == "scattered":
                    print(torch_reads(dsts[0]))
                    print(python_parts(c, entries, block_ids))
                if text:
                    print(text)
    finally:
        shutil.rmtree(region_dir, ignore_errors=True)
    print("| layout | load_many call, us | C call alone, us | C: call to data usable, less "
          "the copy, us | Python alone, us |")
    print("|---|---|---|---|---|")
    for layout, w, ca, late, pa in rows:
        print(f"| {layout} | {w:.1f} | {ca:.1f} | {late:.1f} | {pa:.1f} |")


def best_s(fn, n):
    """Seconds per call of fn, the best of three runs of n calls."""
    return min(timeit.timeit(fn, number=n) for _ in range(3)) / n


def python_parts(c, entries, block_ids, n=2000):
    """The bulk path's packing alone, and the concatenation inside it, in us."""
    from ecc import _batch
    core = c._core
    dsts = [e[2] for e in entries]
    parts = {"load_records": lambda: _batch.load_records(entries, core.engine, core.device),
             "its torch reads (_destinations)":
                 lambda: _batch._destinations(dsts, core.engine, core.device, _batch._kinds()),
             "np.concatenate of the ids": lambda: np.concatenate(block_ids),
             "the entries' list (the caller's)": lambda: [(i, e[1], e[2]) for i, e in
                                                         enumerate(entries)]}
    out = [f"{name} {best_s(fn, n) * 1e6:.1f}" for name, fn in parts.items()]
    return "Python parts, us: " + ", ".join(out)


def torch_reads(t, n=20000):
    """What each read of a CUDA tensor that the fast path makes costs, in ns."""
    reads = {"is_cuda": lambda: t.is_cuda, "get_device()": t.get_device,
             "layout": lambda: t.layout, "is_contiguous()": t.is_contiguous,
             "is_conj()": t.is_conj, "is_neg()": t.is_neg, "data_ptr()": t.data_ptr,
             "nbytes": lambda: t.nbytes, "nothing": lambda: None}
    out = [f"{name} {best_s(fn, n) * 1e9:.0f}" for name, fn in reads.items()]
    return "torch reads, ns (a lambda call included): " + ", ".join(out)


if __name__ == "__main__":
    main()
