# SPDX-License-Identifier: Apache-2.0
"""PyTorch CPU tensors with the host engine: bf16 round trips, tensors as block
ids, the refusals of tensors that cannot be copied as they are, and the default
stream when torch has not started CUDA. Skips where PyTorch is not installed."""

import pytest
from conftest import poll_until

import ecc
from ecc import _streams

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

BS = 1024


def test_bf16_cpu_tensors_round_trip(open_connector):
    c = open_connector()
    g = torch.Generator().manual_seed(1)
    src = torch.randn(6, BS // 2, dtype=torch.bfloat16, generator=g)
    ids = torch.tensor([9, 4, 7, 1, 0, 3])
    c.save("t", src, ids)
    c.flush()
    assert poll_until(c, 1)[0].nbytes == src.numel() * 2
    dst = torch.zeros_like(src)
    c.load(1, ids.tolist(), dst)
    poll_until(c, 1)
    assert torch.equal(dst.view(torch.int16), src.view(torch.int16))


@pytest.mark.parametrize("make, match", [
    (lambda: torch.zeros(8, BS // 4).t(), r"not contiguous .*pass \.contiguous\(\)"),
    (lambda: torch.zeros(BS // 8, dtype=torch.complex64).conj(), "lazy conjugate"),
    (lambda: torch.zeros(BS // 4).to_sparse(), "only dense"),
])
def test_tensors_that_cannot_be_copied_as_they_are(open_connector, make, match):
    c = open_connector()
    with pytest.raises(ecc.EccError, match=match):
        c.save("t", make(), [0, 1])
    assert c.pending == 0


@pytest.mark.parametrize("ids, match", [
    (torch.tensor([0.0, 1.0]), "integers, not of dtype torch.float32"),
    (torch.tensor([True]), "integers, not of dtype torch.bool"),
    (torch.zeros(2, 2, dtype=torch.int64), r"one-dimensional, not of shape \(2, 2\)"),
    (torch.tensor([1, -3]), r"block id -3 \(at index 1\)"),
])
def test_bad_block_id_tensors(open_connector, ids, match):
    c = open_connector()
    with pytest.raises(ecc.EccError, match=match):
        c.save("t", torch.zeros(BS // 4), ids)


def test_pageable_tensors_are_host_memory_for_the_engines(open_connector):
    from ecc import _buffers
    mem = _buffers.memory_of(torch.ones(4), "src", writable=True)
    assert mem.kind == "host"
    with pytest.raises(ecc.EccError, match="pageable host memory, which the CUDA engine"):
        _buffers.check_reachable(mem, "cuda", 0, "src")


def test_without_cuda_started_the_default_stream_is_null():
    if torch.cuda.is_initialized():
        pytest.skip("this process has started CUDA")
    assert _streams.stream_value(None, "cuda", "flush") is None
