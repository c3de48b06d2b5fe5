# SPDX-License-Identifier: Apache-2.0
"""The client with the CUDA engine, PyTorch and CuPy: round trips, the ordering of
producer and consumer kernels around flush and load on default and side streams,
a source dropped while the caching allocator hands out memory of its size.

Skips without a GPU, or fails instead with ECC_GPU_REQUIRED=1, which
python/gpu-check.sh sets."""

import contextlib
import os
import shutil
import tempfile

import pytest
from conftest import poll_until, region_overrides

import ecc

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

HIDDEN, ROWS = 1536, 880  # Qwen2-VL-2B: a 1280x720 image, 3 KiB bf16 rows
ROW_BYTES = HIDDEN * 2
BIG = 16384  # rows of the ordering tests: 48 MiB, about a millisecond to copy
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def shm_dir():
    """A private folder on the tmpfs, so that the region can be pinned."""
    d = tempfile.mkdtemp(prefix="ecc-gpu-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.chmod(d, 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def gpu(ini, shm_dir):
    """gpu(**overrides) -> a connector with the CUDA engine on a pinned region."""
    torch.zeros(1, device="cuda")  # torch's context is current when the engine starts
    opened = []

    def make(directory=False, blocks=96 * 1024, **extra):
        o = region_overrides(shm_dir, block_size=ROW_BYTES, blocks=blocks, directory=directory,
                             **{"engine.type": "cuda", "pinning.enabled": "on", **extra})
        try:
            c = ecc.Connector(ini, o)
        except ecc.EccError as e:
            if e.code == ecc.ECC_ERR_UNSUPPORTED:
                unavailable(f"the library has no usable CUDA engine: {e.message}")
            raise
        opened.append(c)
        assert c.describe().engine == "cuda" and c.describe().pinned
        return c

    yield make
    for c in opened:
        c.close()


@pytest.fixture(scope="module")
def spin():
    """spin(ms): a kernel on the current stream that keeps it busy about ms."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 20_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    per_ms = cycles / max(start.elapsed_time(end), 1e-3)
    return lambda ms: torch.cuda._sleep(int(per_ms * ms))


def randn(rows, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(rows, HIDDEN, dtype=torch.bfloat16, device="cuda", generator=g)


def scattered(rows, seed, blocks=96 * 1024):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(blocks, generator=g)[:rows].tolist()


def same_bits(a, b):
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


def save_all(c, key, src, ids, **kw):
    c.save(key, src, ids)
    c.flush(**kw)
    (done,) = poll_until(c, 1, TIMEOUT)
    assert done.ok and done.nbytes == src.nbytes  # torch tensors and CuPy arrays alike


def load_all(c, ids, dst, **kw):
    c.load(1, ids, dst, **kw)
    (done,) = poll_until(c, 1, TIMEOUT)
    assert done.ok


def test_bf16_tensors_round_trip_through_scattered_blocks(gpu):
    c = gpu()
    src, ids = randn(ROWS, 1), scattered(ROWS, 1)
    save_all(c, "img", src, ids)
    dst = torch.empty_like(src)
    load_all(c, ids, dst)
    torch.cuda.synchronize()
    assert same_bits(dst, src)


def test_bf16_tensors_round_trip_through_the_directory(gpu):
    c = gpu(directory=True)
    src = randn(ROWS, 2)
    r = c.reserve("img", src.numel() * 2)
    c.save_reserved(r, src)
    c.flush()
    assert poll_until(c, 1, TIMEOUT)[0].ok
    (e,) = c.lookup("img")
    dst = torch.empty_like(src)
    c.load_pinned(7, e, dst)
    assert poll_until(c, 1, TIMEOUT)[0].transfer_id == 7
    torch.cuda.synchronize()
    assert same_bits(dst, src)


def produce_then_consume(c, spin, kernels=contextlib.nullcontext, **stream):
    """Queue a slow producer (in the `kernels` context), save and flush at once;
    then queue earlier work on the destination, load, and a consumer kernel at
    once. Returns (expected, what the consumer kernel saw)."""
    ids = scattered(BIG, 3)
    with kernels():
        expected = randn(BIG, 3)
        src = torch.zeros_like(expected)
        spin(200)
        src.copy_(expected)  # still queued behind the spin when flush is called
    c.save("k", src, ids)
    c.flush(**stream)
    assert c.poll() == [], "the save finished before the producer kernel"
    assert poll_until(c, 1, TIMEOUT)[0].ok
    with kernels():
        dst = torch.zeros_like(expected)
        spin(100)
        dst.fill_(-7.0)  # earlier work on the destination, which the load must follow
    c.load(1, ids, dst, **stream)
    with kernels():
        seen = dst.clone()  # queued right after the load: must see its data
    poll_until(c, 1, TIMEOUT)
    return expected, seen


def test_the_default_stream_orders_producer_and_consumer(gpu, spin):
    c = gpu()
    expected, seen = produce_then_consume(c, spin)
    torch.cuda.synchronize()
    assert same_bits(seen, expected), "a kernel around the copies saw stale data"


def test_a_side_stream_that_is_current_orders_them(gpu, spin):
    c = gpu()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the default of flush and load is torch's current stream
        expected, seen = produce_then_consume(c, spin)
    side.synchronize()
    assert same_bits(seen, expected)


def test_a_side_stream_given_explicitly_orders_them(gpu, spin):
    c = gpu()
    side = torch.cuda.Stream()
    # The kernels run on side while the calls, made on the default stream, name it.
    expected, seen = produce_then_consume(c, spin, lambda: torch.cuda.stream(side), stream=side)
    side.synchronize()
    assert same_bits(seen, expected)


def test_a_source_dropped_after_flush_survives_the_caching_allocator(gpu, spin):
    c = gpu()
    expected, ids = randn(BIG, 4), scattered(BIG, 4)
    src = torch.empty_like(expected)
    old = src.data_ptr()
    spin(200)
    src.copy_(expected)
    c.save("k", src, ids)
    c.flush()
    del src  # the allocator would give this block to the next tensor of its size
    fresh = [torch.full_like(expected, 3.0) for _ in range(3)]
    assert all(t.data_ptr() != old for t in fresh), "the source's memory was handed out"
    assert poll_until(c, 1, TIMEOUT)[0].ok
    dst = torch.empty_like(expected)
    load_all(c, ids, dst)
    torch.cuda.synchronize()
    assert same_bits(dst, expected), "the saved bytes are not the original ones"
    del fresh


def test_pinned_host_tensors_round_trip_and_pageable_ones_are_refused(gpu):
    c = gpu()
    src = randn(ROWS, 5).cpu().pin_memory()
    ids = scattered(ROWS, 5)
    save_all(c, "host", src, ids)
    dst = torch.empty_like(src).pin_memory()
    load_all(c, ids, dst)
    torch.cuda.synchronize()
    assert same_bits(dst, src)
    with pytest.raises(ecc.EccError, match="pageable host memory"):
        c.save("pageable", torch.ones(ROWS, HIDDEN, dtype=torch.bfloat16), ids)
    assert c.pending == 0


def test_a_non_contiguous_tensor_is_refused(gpu):
    c = gpu()
    with pytest.raises(ecc.EccError, match=r"not contiguous .*pass \.contiguous\(\)"):
        c.save("t", randn(ROWS, 6).t(), scattered(ROWS, 6))


def cupy_or_skip():
    try:
        import cupy
    except ImportError:
        unavailable("CuPy is not installed")
    return cupy


def cupy_rows(cupy, rows, seed):
    return cupy.arange(rows * HIDDEN // 2, dtype=cupy.float32).reshape(rows, -1) * 0.5 + seed


def test_cupy_arrays_round_trip(gpu):
    cupy = cupy_or_skip()
    c = gpu()
    src = cupy_rows(cupy, ROWS, 7)
    ids = scattered(ROWS, 7)
    save_all(c, "cupy", src, ids, stream=cupy.cuda.get_current_stream())
    dst = cupy.empty_like(src)
    load_all(c, ids, dst, stream=cupy.cuda.get_current_stream())
    cupy.cuda.get_current_stream().synchronize()
    assert bool(cupy.array_equal(dst, src))


def test_a_cupy_stream_orders_the_copies(gpu):
    cupy = cupy_or_skip()
    c = gpu()
    base = cupy_rows(cupy, BIG, 8)
    cupy.cuda.get_current_stream().synchronize()
    ids = scattered(BIG, 8)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        src = base * 2 + 1  # queued on the stream, read by the save after it
    c.save("k", src, ids)
    c.flush(stream=stream)
    assert poll_until(c, 1, TIMEOUT)[0].ok
    with stream:
        dst = cupy.zeros_like(base)  # on the stream too, or the zeros could land after the load
    c.load(1, ids, dst, stream=stream)
    with stream:
        seen = dst.copy()  # queued right after the load
    poll_until(c, 1, TIMEOUT)
    stream.synchronize()
    assert bool(cupy.array_equal(seen, base * 2 + 1))


def test_a_step_of_cuda_tensors_takes_the_bulk_path_and_lands(gpu, monkeypatch):
    from ecc import _batch
    c = gpu()
    taken = []
    real = _batch.load_records
    monkeypatch.setattr(_batch, "load_records", lambda *a: taken.append(real(*a)) or taken[-1])
    srcs = [randn(ROWS, 20 + i) for i in range(4)]
    every = torch.tensor(scattered(4 * ROWS, 20)).numpy().astype("uint32")  # no block twice
    ids = [every[i * ROWS:(i + 1) * ROWS] for i in range(4)]
    c.save_many([(f"img{i}", srcs[i], ids[i]) for i in range(4)])
    c.flush()
    poll_until(c, 4, TIMEOUT)
    dsts = [torch.empty_like(s) for s in srcs]
    c.load_many([(i, ids[i], dsts[i]) for i in range(4)])
    assert taken[-1] is not None, "a step of uint32 ids and CUDA tensors took the per-entry path"
    assert all(d.ok for d in poll_until(c, 4, TIMEOUT))
    torch.cuda.synchronize()
    assert all(same_bits(d, s) for d, s in zip(dsts, srcs))
    # A view that is not dense, a tensor on the host, and a conjugate view go elsewhere.
    complex_view = torch.zeros(4, dtype=torch.complex64, device="cuda").conj()
    odd = [srcs[0][:, ::2], srcs[0].cpu(), complex_view]
    for dst in odd:
        assert real([(9, ids[0], dst)], "cuda", c._core.device) is None


def test_the_default_stream_is_torchs_current_one(gpu):
    from ecc._streams import stream_value
    gpu()
    assert stream_value(None, "cuda", "load") == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert stream_value(None, "cuda", "load") == side.cuda_stream
