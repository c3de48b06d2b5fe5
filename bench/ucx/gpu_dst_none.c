/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_dst_none.c - gpu_dst.h in a build without CUDA: there is no GPU.
 */
#include "bench/ucx/gpu_dst.h"

void *gpu_dst_alloc(size_t n)
{
  (void)n;
  return NULL;
}

int gpu_dst_upload(void *dev, const void *host, size_t n)
{
  (void)dev;
  (void)host;
  (void)n;
  return -1;
}

int gpu_dst_read(const void *dev, void *host, size_t n)
{
  (void)dev;
  (void)host;
  (void)n;
  return -1;
}

void gpu_dst_free(void *dev)
{
  (void)dev;
}
