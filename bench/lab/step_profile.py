#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a load_many step's host time goes, on the GPU: python/bench.py's step
(32 images x 880 rows x 3 KiB, scattered and contiguous) timed three ways in one
run: the whole call, the C call alone (records built once, ecc_load called
directly), and the client's Python alone (the C call answered at once); then
cProfile's top functions of the Python alone. Medians of --reps calls.

    ECC_HOST_LIBRARY=build/lib/libecc-host.so python3 bench/lab/step_profile.py"""

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import bench  # noqa: E402  (python/bench.py: its layouts and connector)
import ecc  # noqa: E402
from ecc import _abi  # noqa: E402


class Answered:
    """core.lib with ecc_load answering 0 at once: the Python alone."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        if name in ("ecc_load", "ecc_load_pinned"):
            return lambda *args: 0
        return getattr(self._lib, name)


def whole(c, entries, reps):
    out = []
    for _ in range(reps):
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
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        rc = core.lib.ecc_load(core.handle, arr, len(entries), stream)
        out.append(time.perf_counter() - t0)
        assert rc == 0, rc
        torch.cuda.synchronize()
        bench.wait_for(c, len(entries))
    return statistics.median(out) * 1e6


def python_alone(c, entries, reps, profile):
    core = c._core
    lib, core.lib = core.lib, Answered(core.lib)
    try:
        out = []
        for _ in range(reps):
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
    args = p.parse_args()
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
            images = torch.randn(32, bench.ROWS, bench.HIDDEN, dtype=torch.bfloat16, device="cuda")
            pinned = torch.empty(nb, bench.HIDDEN, dtype=torch.bfloat16, pin_memory=True)
            tid = 1 << 40
            for layout, ids in bench.layouts(nb, 32, 0).items():
                bench.store(c, pinned, images, ids)
                dsts = [torch.empty(bench.ROWS, bench.HIDDEN, dtype=torch.bfloat16, device="cuda")
                        for _ in range(32)]
                block_ids = [row.astype(np.uint32) for row in ids]
                entries = [(tid + i, b, d) for i, (b, d) in enumerate(zip(block_ids, dsts))]
                w = whole(c, entries, args.reps)
                ca = c_alone(c, entries, args.reps)
                pa, text = python_alone(c, entries, args.reps, layout == "scattered")
                rows.append((layout, w, ca, pa))
                if text:
                    print(text)
    finally:
        shutil.rmtree(region_dir, ignore_errors=True)
    print("| layout | load_many call, us | C call alone, us | Python alone, us |")
    print("|---|---|---|---|")
    for layout, w, ca, pa in rows:
        print(f"| {layout} | {w:.1f} | {ca:.1f} | {pa:.1f} |")


if __name__ == "__main__":
    main()
