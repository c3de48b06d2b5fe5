/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dma.c - the copy-engine method: one cuMemcpyBatchAsync per transfer,
 * found in the driver at run time so that a driver without it still loads
 * the plugin, with one cudaMemcpyAsync per descriptor as the fallback.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/engine/cuda/cuda_engine.h"

_Static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "CUdeviceptr is 64-bit");
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "size_t is 64-bit");

#if CUDA_VERSION >= 12080 && CUDART_VERSION >= 12050
#define HAVE_BATCH_TYPES 1
/* The two signatures the driver has exported: CUDA 13 dropped failIdx. The
 * headers of 13 map the plain name onto the newer one, so both are spelled
 * out here and picked by the version the driver answers for. */
typedef CUresult (*batch_v13_fn)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t n_attrs,
                                 CUstream stream);
typedef CUresult (*error_string_fn)(CUresult rc, const char **text);
typedef CUresult (*batch_v12_fn)(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attr_idxs, size_t n_attrs,
                                 size_t *fail_idx, CUstream stream);
#endif

void dma_resolve(struct dma_api *api)
{
  memset(api, 0, sizeof(*api));
#ifdef HAVE_BATCH_TYPES
  api->error_string = cuda_driver_fn("cuGetErrorString", 6000);
  api->batch = cuda_driver_fn("cuMemcpyBatchAsync", 13000);
  if (api->batch != NULL) {
    api->batch_abi = 13000;
    return;
  }
  api->batch = cuda_driver_fn("cuMemcpyBatchAsync", 12080);
  if (api->batch != NULL)
    api->batch_abi = 12080;
#endif
}

static int copy_each(const uint64_t *src, const uint64_t *dst, const uint64_t *len, size_t count,
                     cudaStream_t stream, const char **err_text)
{
  for (size_t i = 0; i < count; i++) {
    cudaError_t rc = cudaMemcpyAsync((void *)(uintptr_t)dst[i], (const void *)(uintptr_t)src[i],
                                     (size_t)len[i], cudaMemcpyDefault, stream);
    if (rc != cudaSuccess) {
      *err_text = cudaGetErrorString(rc);
      (void)cudaGetLastError();
      return (int)rc;
    }
  }
  return 0;
}

#ifdef HAVE_BATCH_TYPES
/* The copy engine starts on a batched call's copies only when the call
 * returns, and the call costs the host 0.6-0.7 us per descriptor on the
 * lent H200 (41 us for 64; bench/lab/dma_chunk_lab.cu). So a step goes in
 * growing calls: a first one of DMA_LEAD_BYTES, then each at least twice
 * as long as the one before and holding up to one descriptor per
 * DMA_UNIT_BYTES of it, which the engine moves in about the time the host
 * takes to enqueue that descriptor. Both ways at once, 64 MiB each: 3.6 ->
 * 9.5 GB/s with 4 KiB descriptors, 60 -> 74 with 64 KiB, 98 -> 100 with
 * 1 MiB, against one call per step. */
#define DMA_LEAD_BYTES (256ull << 10)
#define DMA_UNIT_BYTES (64ull << 10)

static uint64_t bytes_of(const uint64_t *len, size_t n)
{
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += len[i];
  return sum;
}

static size_t lead_count(const uint64_t *len, size_t count)
{
  uint64_t bytes = 0;
  size_t k = 0;
  while (k < count && bytes < DMA_LEAD_BYTES)
    bytes += len[k++];
  return k;
}

static int batch_call(const struct dma_api *api, const uint64_t *src, const uint64_t *dst,
                      const uint64_t *len, size_t count, int to_host, cudaStream_t stream,
                      const char **err_text)
{
  CUmemcpyAttributes attr;
  memset(&attr, 0, sizeof(attr));
  /* A save reads device memory the compute stream just wrote: stream order.
   * A load reads region blocks nothing in the stream writes: any order. */
  attr.srcAccessOrder =
      to_host ? CU_MEMCPY_SRC_ACCESS_ORDER_STREAM : CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  size_t attr_idx = 0;
  CUdeviceptr *d = (CUdeviceptr *)(uintptr_t)dst;
  CUdeviceptr *s = (CUdeviceptr *)(uintptr_t)src;
  size_t *n = (size_t *)(uintptr_t)len;
  CUresult rc;
  if (api->batch_abi == 13000) {
    batch_v13_fn fn = (batch_v13_fn)api->batch;
    rc = fn(d, s, n, count, &attr, &attr_idx, 1, (CUstream)stream);
  } else {
    batch_v12_fn fn = (batch_v12_fn)api->batch;
    size_t fail_idx = 0;
    rc = fn(d, s, n, count, &attr, &attr_idx, 1, &fail_idx, (CUstream)stream);
  }
  if (rc != CUDA_SUCCESS) {
    *err_text = "cuMemcpyBatchAsync failed";
    if (api->error_string != NULL)
      ((error_string_fn)api->error_string)(rc, err_text);
    return (int)rc;
  }
  return 0;
}

static int copy_batch(const struct dma_api *api, const uint64_t *src, const uint64_t *dst,
                      const uint64_t *len, size_t count, int to_host, cudaStream_t stream,
                      const char **err_text)
{
  size_t at = 0, k = lead_count(len, count);
  for (;;) {
    int rc = batch_call(api, src + at, dst + at, len + at, k, to_host, stream, err_text);
    uint64_t bytes = bytes_of(len + at, k);
    at += k;
    if (rc != 0 || at == count)
      return rc;
    size_t next = bytes / DMA_UNIT_BYTES > 2 * k ? (size_t)(bytes / DMA_UNIT_BYTES) : 2 * k;
    k = next < count - at ? next : count - at;
  }
}
#endif

int dma_copy(const struct dma_api *api, const uint64_t *src, const uint64_t *dst,
             const uint64_t *len, size_t count, int to_host, cudaStream_t stream,
             const char **err_text)
{
  *err_text = "";
  if (count == 0)
    return 0;
#ifdef HAVE_BATCH_TYPES
  /* The batched call refuses the legacy default stream. */
  if (api->batch != NULL && stream != NULL && stream != cudaStreamLegacy)
    return copy_batch(api, src, dst, len, count, to_host, stream, err_text);
#else
  (void)api;
  (void)to_host;
#endif
  return copy_each(src, dst, len, count, stream, err_text);
}
