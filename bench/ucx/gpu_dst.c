/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_dst.c - gpu_dst.h over the CUDA runtime; built only where CUDA is
 * (gpu_dst_none.c otherwise).
 */
#include "bench/ucx/gpu_dst.h"

#include <cuda_runtime_api.h>

void *gpu_dst_alloc(size_t n)
{
  void *p = NULL;
  if (cudaMalloc(&p, n) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return p;
}

int gpu_dst_upload(void *dev, const void *host, size_t n)
{
  return cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}

int gpu_dst_read(const void *dev, void *host, size_t n)
{
  return cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

void gpu_dst_free(void *dev)
{
  (void)cudaFree(dev);
}
