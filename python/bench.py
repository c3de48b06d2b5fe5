#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A consumer's load step on the GPU: images of 880 rows x 1536 bf16 (3 KiB rows)
in scattered and contiguous layouts, loaded by ecc and by the PyTorch a user would
write instead; GB/s and ratios in one run, every byte checked, the table last.

    ECC_HOST_LIBRARY=build/lib/libecc-host.so python3 python/bench.py [--images N]

The PyTorch idioms read a pinned host tensor that holds the same bytes at the same
rows as the region's blocks: `dst.copy_(pinned[idx], non_blocking=True)` per image
(idx the image's block ids), and one `copy_` per run of consecutive blocks. Two
references close the table: the engine's own time for ecc's copy, and that time
plus what any method pays around a copy (an empty kernel launched and waited for).
By default each method runs its steps after another's; --interleave has them take
turns, so each finds the CPU caches as the method before left them."""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))
import ecc  # noqa: E402

ROWS, HIDDEN = 880, 1536
ROW_BYTES = HIDDEN * 2


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=32, help="images per load step (32)")
    p.add_argument("--reps", type=int, default=20, help="timed steps per method (20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (2)")
    p.add_argument("--interleave", action="store_true",
                   help="the methods take turns step by step (default: one after another)")
    p.add_argument("--region-mib", type=int, default=1024, help="region size in MiB (1024)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def layouts(num_blocks, images, seed):
    """Block ids of each image: back to back, or anywhere in the region."""
    contiguous = np.arange(images * ROWS, dtype=np.int64).reshape(images, ROWS)
    rng = np.random.default_rng(seed)
    scattered = rng.permutation(num_blocks)[:images * ROWS].reshape(images, ROWS)
    return {"scattered": scattered, "contiguous": contiguous}


def runs_of(ids):
    """(first row, first block, length) of each run of consecutive block ids."""
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate(([0], breaks))
    lengths = np.diff(np.concatenate((starts, [len(ids)])))
    return [(int(s), int(ids[s]), int(n)) for s, n in zip(starts, lengths)]


def open_connector(region_dir, region_mib):
    overrides = {
        "region.dir": region_dir, "region.name": f"bench{os.getpid()}",
        "region.size": f"{region_mib}MiB", "region.hidden_size": str(HIDDEN),
        "region.dtype": "bfloat16", "engine.type": "cuda", "pinning.enabled": "on",
        "directory.enabled": "false", "connector.role": "both",
    }
    return ecc.Connector(ROOT / "conf" / "default.ini", overrides)


def wait_for(c, n):
    got = []
    while len(got) < n:
        done = c.poll()
        bad = [d for d in done if not d.ok]
        if bad:
            raise SystemExit(f"bench: a copy failed: {bad[0]}")
        got += done
    return got


def store(c, pinned, images, ids):
    """The images into the region at `ids` (by ecc) and into the pinned tensor's
    same rows (by torch), so that every method reads the same bytes."""
    c.save_many([(f"img{i}", images[i], ids[i].astype(np.uint32)) for i in range(len(ids))])
    c.flush()
    wait_for(c, len(ids))
    pinned[torch.from_numpy(ids.reshape(-1))] = images.reshape(-1, HIDDEN).cpu()


class Methods:
    """Each method loads the whole step into dsts; none of them synchronises."""

    def __init__(self, c, pinned, ids, dsts):
        self.c, self.pinned, self.dsts = c, pinned, dsts
        self.block_ids = [row.astype(np.uint32) for row in ids]
        self.idx = [torch.from_numpy(row) for row in ids]
        self.runs = [runs_of(row) for row in ids]
        self.tid = 0
        self.engine_ns = []  # what the engine measured of each ecc step: the copy alone
        self.returned = 0.0  # when the last ecc call returned (perf_counter)
        self.call_s = []  # of each ecc step: from the call to its return (Python and C)

    def ecc_load(self):
        first, self.tid = self.tid, self.tid + len(self.dsts)
        self.c.load_many([(first + i, b, d) for i, (b, d) in
                          enumerate(zip(self.block_ids, self.dsts))])
        self.returned = time.perf_counter()

    def index_and_copy(self):
        for idx, dst in zip(self.idx, self.dsts):
            dst.copy_(self.pinned[idx], non_blocking=True)

    def copy_per_run(self):
        for runs, dst in zip(self.runs, self.dsts):
            for row, block, n in runs:
                dst[row:row + n].copy_(self.pinned[block:block + n], non_blocking=True)


METHODS = (("ecc load_many", "ecc_load"),
           ("dst.copy_(pinned[idx]) per image", "index_and_copy"),
           ("copy_ per contiguous run", "copy_per_run"))


def step(methods, name, images, c):
    """Seconds of one step, from the call to the data being usable on the GPU;
    then every byte is checked (the destinations were poisoned first)."""
    for d in methods.dsts:
        d.view(torch.int16).fill_(-1)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    getattr(methods, name)()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if name == "ecc_load":
        methods.engine_ns.append(wait_for(c, len(methods.dsts))[0].elapsed_ns)
        methods.call_s.append(methods.returned - t0)
    for i, d in enumerate(methods.dsts):
        if not torch.equal(d.view(torch.int16), images[i].view(torch.int16)):
            raise SystemExit(f"bench: {name}: image {i} differs from what was saved")
    return seconds


def floor_s(reps):
    """What any method pays around its copy: an empty kernel launched and waited
    for, the way step() waits (median seconds)."""
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda._sleep(0)
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def timed(args, methods, images, c):
    """Seconds of each step of each method after the warm-up: one method's steps
    after another's (each finds the caches as its own last step left them), or
    with --interleave the methods taking turns within each round (each finds
    them as the method before left them: the PyTorch gathers run through 86 MB
    on the CPU), so that a shared host's drift reaches all of them alike."""
    rounds = range(args.warmup + args.reps)
    if args.interleave:
        schedule = [(rnd, name) for rnd in rounds for _, name in METHODS]
    else:
        schedule = [(rnd, name) for _, name in METHODS for rnd in rounds]
    times = {name: [] for _, name in METHODS}
    for rnd, name in schedule:
        seconds = step(methods, name, images, c)
        if rnd >= args.warmup:
            times[name].append(seconds)
    return times


def measure(args, c, pinned, images, layout, ids):
    """Every method's median over --reps steps."""
    store(c, pinned, images, ids)
    dsts = [torch.empty(ROWS, HIDDEN, dtype=torch.bfloat16, device="cuda")
            for _ in range(args.images)]
    methods = Methods(c, pinned, ids, dsts)
    step_bytes = args.images * ROWS * ROW_BYTES
    times = timed(args, methods, images, c)
    rows = []
    for label, name in METHODS:
        seconds = statistics.median(times[name])
        rows.append((layout, label, step_bytes / seconds / 1e9))
        print(f"{layout:10s}  {label:34s}  {rows[-1][2]:7.2f} GB/s  "
              f"(min {step_bytes / min(times[name]) / 1e9:.2f})", flush=True)
    copy_ns = statistics.median(methods.engine_ns[args.warmup:])
    call_us = statistics.median(methods.call_s[args.warmup:]) * 1e6
    floor_us = floor_s(args.reps) * 1e6
    print(f"{layout:10s}  {'(ecc: the copy alone, engine time)':34s}  "
          f"{step_bytes / copy_ns:7.2f} GB/s", flush=True)
    print(f"{layout:10s}  {'(ecc: load_many returned after)':34s}  {call_us:7.1f} us "
          f"({call_us / args.images:.2f} us per image)", flush=True)
    print(f"{layout:10s}  {'(any method: launch and wait)':34s}  {floor_us:7.1f} us",
          flush=True)
    rows.append((layout, "(engine time, the copy alone)", step_bytes / copy_ns))
    rows.append((layout, "(engine time + launch and wait)",
                 step_bytes / (copy_ns + floor_us * 1e3)))
    return rows


def main():
    args = parse()
    if not torch.cuda.is_available():
        raise SystemExit("bench: no CUDA GPU is visible to PyTorch")
    torch.zeros(1, device="cuda")  # torch's context is the one the engine finds current
    region_dir = tempfile.mkdtemp(prefix="ecc-bench-", dir="/dev/shm")
    os.chmod(region_dir, 0o700)
    try:
        with open_connector(region_dir, args.region_mib) as c:
            info = c.describe()
            print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, "
                  f"ecc {ecc.library_version()} ({ecc.library_path()})")
            print(f"engine: {info.engine_detail}; region {info.num_blocks} blocks of "
                  f"{info.block_size} B, pinned={info.pinned}")
            order = "taking turns" if args.interleave else "one method after another"
            print(f"step: {args.images} images x {ROWS} rows x {ROW_BYTES} B = "
                  f"{args.images * ROWS * ROW_BYTES / 1e6:.1f} MB; median of {args.reps}, "
                  f"{order}")
            table = run_all(args, c, info.num_blocks)
    finally:
        shutil.rmtree(region_dir, ignore_errors=True)
    print_table(table)


def run_all(args, c, num_blocks):
    g = torch.Generator(device="cuda").manual_seed(args.seed)
    images = torch.randn(args.images, ROWS, HIDDEN, dtype=torch.bfloat16, device="cuda",
                         generator=g)
    pinned = torch.empty(num_blocks, HIDDEN, dtype=torch.bfloat16, pin_memory=True)
    table = []
    for layout, ids in layouts(num_blocks, args.images, args.seed).items():
        table += measure(args, c, pinned, images, layout, ids)
    return table


def print_table(table):
    ours = {layout: gbs for layout, label, gbs in table if label == METHODS[0][0]}
    print("\n| layout | method | GB/s | ecc / method |")
    print("|---|---|---|---|")
    for layout, label, gbs in table:
        print(f"| {layout} | {label} | {gbs:.2f} | {ours[layout] / gbs:.2f}x |")


if __name__ == "__main__":
    main()
