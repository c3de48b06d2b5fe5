#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Encode-then-prefill: one encoder (producer) process and two prefill-side
(consumer) processes on one machine, requests routed round-robin, images
repeating with Zipf popularity over a universe several times the cache, for
(a) no cache, (b) a private GPU LRU in each prefill process of half the bytes
each, (c) ecc through ecc.serving (one shared region of all the bytes). One
table: encoder-stage requests/s, time until the prefill process holds the
embeddings (p50/p99, hits' p50 against that image's encode time), hit rate,
encoder GPU-seconds; and a bitwise check of ecc's loads against fresh encodes.

    ECC_HOST_LIBRARY=build/lib/libecc-host.so python3 bench/serving/encode_prefill.py

--encoder qwen2.5-vl-7b: Qwen2.5-VL-7B's vision tower from transformers, its
configuration, random weights made on the GPU (bfloat16, no download);
--encoder tiny: numpy rows and a sleep per token (no GPU: a dry run)."""

import argparse
import collections
import hashlib
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

# Patch grids (height x width in 14-pixel patches) of the image sizes, and
# the tokens each yields after the 2x2 merge: 448x448, 504x896, 728x1288
# (a 1280x720 frame), 1036x1036.
SIZES = ((32, 32), (36, 64), (52, 92), (74, 74))
TOKENS = tuple(h * w // 4 for h, w in SIZES)
QWEN = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
            out_hidden_size=3584, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
            window_size=112, fullatt_block_indexes=[7, 15, 23, 31], in_channels=3,
            hidden_act="silu")


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoder", choices=("qwen2.5-vl-7b", "tiny"), default="qwen2.5-vl-7b")
    p.add_argument("--requests", type=int, default=600, help="requests per run (600)")
    p.add_argument("--universe", type=int, default=400, help="distinct images (400)")
    p.add_argument("--cache-images", type=int, default=100,
                   help="cache bytes as this many images of the mean size (100)")
    p.add_argument("--alphas", default="0.8,1.0", help="Zipf exponents (0.8,1.0)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--verify", type=int, default=8, help="hits of (c) checked bitwise (8)")
    return p.parse_args()


# ---- the encoders ----

class Tiny:
    """Rows made from the image id, and a sleep of 20 us per token."""

    hidden, dtype = 64, "float16"

    def __init__(self, device=None):
        pass

    def encode(self, image, size):
        time.sleep(TOKENS[size] * 20e-6)
        rng = np.random.default_rng(image * 7919 + size)
        return rng.standard_normal((TOKENS[size], self.hidden)).astype(np.float16)

    def sync(self):
        pass

    def empty(self, rows):
        return np.empty((rows, self.hidden), dtype=np.float16)

    @staticmethod
    def digest(t):
        return hashlib.sha256(np.ascontiguousarray(t).tobytes()).hexdigest()


class QwenTower:
    """Qwen2.5-VL-7B's vision tower, random weights; pixels from the image id."""

    hidden, dtype = QWEN["out_hidden_size"], "bfloat16"

    def __init__(self, device):
        import torch
        from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import \
            Qwen2_5_VLVisionConfig
        self.torch, self.device = torch, device
        cfg = Qwen2_5_VLVisionConfig(**QWEN)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        with torch.device(device):
            self.model = m.Qwen2_5_VisionTransformerPretrainedModel._from_config(
                cfg, dtype=torch.bfloat16).eval()

    def encode(self, image, size):
        torch = self.torch
        h, w = SIZES[size]
        g = torch.Generator(device=self.device).manual_seed(image * 7919 + size)
        pixels = torch.randn((h * w, 3 * 2 * 14 * 14), generator=g, device=self.device,
                             dtype=torch.bfloat16)
        grid = torch.tensor([[1, h, w]], device=self.device)
        with torch.inference_mode():
            out = self.model(pixels, grid_thw=grid)
        if not isinstance(out, torch.Tensor):  # newer releases wrap it
            out = out.pooler_output if getattr(out, "pooler_output", None) is not None \
                else out.last_hidden_state
        assert out.shape == (TOKENS[size], self.hidden), out.shape
        return out.contiguous()

    def sync(self):
        self.torch.cuda.synchronize()

    def empty(self, rows):
        return self.torch.empty((rows, self.hidden), dtype=self.torch.bfloat16,
                                device=self.device)

    @staticmethod
    def digest(t):
        import torch
        return hashlib.sha256(t.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()


def make_encoder(name):
    return Tiny() if name == "tiny" else QwenTower("cuda:0")


def connector(cfg):
    import ecc
    return ecc.Connector(cfg["ini"], cfg["overrides"])


def wait_completions(c, n, timeout=60.0):
    done, deadline = [], time.monotonic() + timeout
    while len(done) < n:
        done += c.poll()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(done)} of {n} completions after {timeout} s")
    bad = [x for x in done if not x.ok]
    if bad:
        raise RuntimeError(f"failed copies: {bad}")
    return done


# ---- the encoder process ----

def encoder_main(cfg, requests, replies):
    """Serves ("encode", consumer, image, size, meta or None) in arrival order:
    with a StepMeta, saves through ecc.serving's worker side (mode c); without,
    ships the rows through the region under a one-off key (modes a, b)."""
    from ecc.serving import WorkerSide
    enc = make_encoder(cfg["encoder"])
    c = connector(cfg)
    worker = WorkerSide(c, rank=0)
    busy, shipped, per_size = 0.0, 0, collections.defaultdict(list)
    replies[0].put(("ready",))
    while True:
        msg = requests.get()
        if msg[0] == "stop":
            medians = {s: statistics.median(v) for s, v in per_size.items()}
            replies[0].put(("busy", busy, medians))
            break
        _, who, image, size, meta = msg
        enc.sync()
        t0 = time.perf_counter()
        out = enc.encode(image, size)
        enc.sync()
        dt = time.perf_counter() - t0
        if msg[0] == "digest":  # checking is not serving
            replies[who].put(("digest", enc.digest(out)))
            continue
        busy += dt
        per_size[size].append(dt)
        if meta is not None:
            o = meta.saves[0]
            worker.save(meta, {(o.request_id, o.index): out})
            replies[who].put(("saved", report_of(worker, 1)))
            continue
        shipped += 1
        key = f"xfer-{who}-{shipped}"
        token = c.reserve(key, like=out).token
        c.save_reserved(token, out)
        c.flush()
        wait_completions(c, 1)
        replies[who].put(("shipped", key))
    c.close()


def report_of(worker, saves):
    from ecc.serving import WorkerReport
    saved, failures = [], []
    deadline = time.monotonic() + 60
    while len(saved) + len(failures) < saves and time.monotonic() < deadline:
        r = worker.report()
        saved += r.saved
        failures += r.failures
    return WorkerReport(0, tuple(saved), (), tuple(failures))


# ---- the prefill (consumer) processes ----

class Prefill:
    def __init__(self, cfg, who, requests, replies):
        from ecc.serving import Namespace, SchedulerSide, WorkerSide
        self.cfg, self.who, self.requests, self.replies = cfg, who, requests, replies
        self.enc = Tiny() if cfg["encoder"] == "tiny" else None
        self.c = connector(cfg)
        ns = Namespace(cfg["encoder"], cfg["hidden"], dtype=cfg["dtype"])
        self.sched = SchedulerSide(self.c, ns, ranks=1, defer_timeout=30.0)
        self.worker = WorkerSide(self.c, rank=0, saves=False)
        self.lru, self.lru_bytes = collections.OrderedDict(), 0
        self.device = None if cfg["encoder"] == "tiny" else "cuda:0"
        self.kept = []  # (image, size, digest) of hits, for the bitwise check

    def ask(self, kind, image, size, meta=None):
        self.requests.put((kind, self.who, image, size, meta))
        return self.replies.get()

    def ship(self, image, size):
        """Modes a and b: the encoder encodes and ships it through the region."""
        import ecc
        _, key = self.ask("encode", image, size)
        entry = self.c.lookup([key], ranks=1)[0]
        dst = ecc.empty_like_entry(entry, device=self.device)
        self.c.load_pinned(1, entry, dst)
        wait_completions(self.c, 1)
        self.c.remove(key)
        return dst

    def private(self, image, size):
        """Mode b: the prefill process's own LRU of GPU tensors."""
        if (image, size) in self.lru:
            self.lru.move_to_end((image, size))
            return True
        t = self.ship(image, size)
        nbytes = t.nbytes if hasattr(t, "nbytes") else t.numel() * t.element_size()
        self.lru[(image, size)] = (t, nbytes)
        self.lru_bytes += nbytes
        while self.lru_bytes > self.cfg["cache_bytes"] // 2:
            _, (_, n) = self.lru.popitem(last=False)
            self.lru_bytes -= n
        return False

    def shared(self, image, size, rid):
        """Mode c: ecc.serving: hit and load, or reserve and have it saved, or
        wait behind the other process's write."""
        from ecc.serving import Decision, Item
        item = Item(rid, 0, f"{image}-{size}", TOKENS[size])
        hit = True
        for _ in range(4):
            answer = self.sched.query(item)
            self.sched.allocated(rid, 0)
            meta = self.sched.build_step()
            if answer.decision is Decision.HIT:
                got = self.worker.start_loads(meta, device=self.device)
                report = self.collect(1)
                self.sched.update([report])
                if len(self.kept) < self.cfg["verify"]:
                    self.kept.append((image, size, self.digest(got[(rid, 0)])))
                return hit
            hit = False
            if answer.decision is Decision.SAVE:
                _, report = self.ask("encode", image, size, meta)
                self.sched.update([report])
            elif answer.decision is Decision.DEFER:
                self.c.wait_ready(answer.key, ranks=0, timeout=30.0)
            else:
                self.ship(image, size)  # encoded here without saving
                return False
        raise RuntimeError(f"{item}: no hit after saving it")

    def collect(self, loads):
        from ecc.serving import WorkerReport
        loaded, failures = [], []
        deadline = time.monotonic() + 60
        while len(loaded) + len(failures) < loads and time.monotonic() < deadline:
            r = self.worker.report()
            loaded += r.loaded
            failures += r.failures
        if failures or len(loaded) < loads:
            raise RuntimeError(f"loads failed: {failures}")
        return WorkerReport(0, (), tuple(loaded), ())

    def digest(self, t):
        return (Tiny if self.enc else QwenTower).digest(t)

    def sync(self):
        if self.device:
            import torch
            torch.cuda.synchronize()


def prefill_main(cfg, who, trace, requests, replies, results):
    p = Prefill(cfg, who, requests, replies)
    times, hits = [], []
    results.put(("ready", who))
    for n, (image, size) in enumerate(trace):
        t0 = time.perf_counter()
        if cfg["mode"] == "none":
            p.ship(image, size)
            hit = False
        elif cfg["mode"] == "private":
            hit = p.private(image, size)
        else:
            hit = p.shared(image, size, f"p{who}-{n}")
        p.sync()
        times.append(time.perf_counter() - t0)
        hits.append((hit, size))
    digests = [(img, size, d, p.ask("digest", img, size)[1]) for img, size, d in p.kept]
    results.put(("done", who, times, hits, digests))
    p.c.close()


# ---- one run ----

def zipf_trace(n, universe, alpha, rng):
    weights = 1.0 / np.arange(1, universe + 1) ** alpha
    images = rng.choice(universe, size=n, p=weights / weights.sum())
    # An image's size is drawn once, independent of its popularity rank.
    sizes = np.random.default_rng(12345).integers(0, len(SIZES), size=universe)
    return [(int(i), int(sizes[i])) for i in images]


def run(args, mode, alpha, hidden, dtype, region_dir):
    row_bytes = hidden * 2
    mean_tokens = statistics.mean(TOKENS)
    cache_bytes = int(args.cache_images * mean_tokens * row_bytes)
    overrides = {"region.dir": str(region_dir), "region.require_tmpfs": "false",
                 "region.name": f"ep-{mode}-{int(alpha * 10)}-{os.getpid()}",
                 "region.block_size": str(row_bytes), "region.size": str(cache_bytes),
                 "directory.enabled": "true", "connector.role": "both",
                 "engine.type": "host" if args.encoder == "tiny" else "cuda"}
    ini = region_dir / "ep.ini"
    ini.write_text("[plugin]\nname = shm\nlog_level = error\n")
    ini.chmod(0o600)
    cfg = dict(ini=str(ini), overrides=overrides, encoder=args.encoder, mode=mode,
               hidden=hidden, dtype=dtype, cache_bytes=cache_bytes, verify=args.verify)
    trace = zipf_trace(args.requests, args.universe, alpha, np.random.default_rng(args.seed))
    ctx = mp.get_context("spawn")
    requests, results = ctx.Queue(), ctx.Queue()
    replies = [ctx.Queue(), ctx.Queue()]
    holder = connector(dict(cfg, overrides=dict(overrides, **{"engine.type": "host"})))
    enc = ctx.Process(target=encoder_main, args=(cfg, requests, replies))
    enc.start()
    assert replies[0].get(timeout=600)[0] == "ready"
    procs = [ctx.Process(target=prefill_main, args=(cfg, who, trace[who::2], requests,
                                                    replies[who], results))
             for who in (0, 1)]
    for p in procs:
        p.start()
    for _ in procs:
        assert results.get(timeout=600)[0] == "ready"
    t0 = time.perf_counter()
    done = [results.get(timeout=3600) for _ in procs]
    wall = time.perf_counter() - t0
    requests.put(("stop",))
    _, busy, encode_s = replies[0].get(timeout=600)
    for p in procs + [enc]:
        p.join(60)
    holder.close()
    times = [t for d in done for t in d[2]]
    hits = [h for d in done for h in d[3]]
    digests = [x for d in done for x in d[4]]
    return dict(mode=mode, alpha=alpha, wall=wall, busy=busy, times=times, hits=hits,
                digests=digests, encode_s=encode_s)


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else float("nan")


def main():
    args = parse()
    hidden, dtype = (Tiny.hidden, Tiny.dtype) if args.encoder == "tiny" else \
        (QwenTower.hidden, QwenTower.dtype)
    rows, encode_s = [], {}
    with tempfile.TemporaryDirectory(prefix="ecc-ep-") as d:
        region_dir = Path(d)
        region_dir.chmod(0o700)
        for alpha in (float(a) for a in args.alphas.split(",")):
            for mode in ("none", "private", "ecc"):
                r = run(args, mode, alpha, hidden, dtype, region_dir)
                rows.append(r)
                if mode == "none":  # every request encoded: the encode time per size
                    for s, t in r["encode_s"].items():
                        encode_s[(alpha, s)] = t
                print(f"done: {mode} alpha={alpha} in {r['wall']:.1f} s", file=sys.stderr)
    print(f"encode-then-prefill: {time.strftime('%Y-%m-%d')}, encoder {args.encoder} "
          f"({hidden} x {dtype} rows), {args.requests} requests over {args.universe} images "
          f"(4 sizes, {min(TOKENS)}-{max(TOKENS)} tokens), cache {args.cache_images} mean "
          f"images, 1 encoder + 2 prefill processes, round-robin")
    print(f"{'alpha':>5} {'mode':>8} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'hit p50/enc':>11} {'hit rate':>8} {'enc GPU-s':>9} {'saved':>6}")
    base = {}
    for r in rows:
        n = len(r["times"])
        hit_times = [(t, s) for t, (h, s) in zip(r["times"], r["hits"]) if h]
        rate = len(hit_times) / n
        if r["mode"] == "none":
            base[r["alpha"]] = r["busy"]
        saved = 1 - r["busy"] / base[r["alpha"]]
        ratios = [t / encode_s[(r["alpha"], s)] for t, s in hit_times]
        ratio = f"{100 * statistics.median(ratios):.2f}%" if ratios else "-"
        print(f"{r['alpha']:>5} {r['mode']:>8} {n / r['wall']:>7.1f} "
              f"{1e3 * pct(r['times'], 0.5):>8.2f} {1e3 * pct(r['times'], 0.99):>8.2f} "
              f"{ratio:>11} {100 * rate:>7.1f}% {r['busy']:>9.2f} {100 * saved:>5.1f}%")
    checked = [x for r in rows for x in r["digests"]]
    same = sum(1 for _, _, a, b in checked if a == b)
    print(f"bitwise: {same} of {len(checked)} embeddings loaded through ecc equal a fresh "
          f"encode of the same image")
    return 0 if same == len(checked) else 1


if __name__ == "__main__":
    sys.exit(main())
