/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_kernels.cu - the test kernels declared in gpu_kernels.h.
 */
#include "tests/gpu/gpu_kernels.h"

static __device__ uint64_t global_ns(void)
{
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

static __global__ void spin_kernel(uint64_t ns)
{
  uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

static __global__ void fill_kernel(uint8_t *p, uint64_t n, uint64_t seed, uint64_t first)
{
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = tk_byte(seed, first + i);
}

static __global__ void check_kernel(const uint8_t *p, uint64_t n, uint64_t seed, uint64_t first,
                                    unsigned long long *count)
{
  uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  unsigned long long bad = 0;
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    bad += p[i] != tk_byte(seed, first + i);
  if (bad != 0)
    atomicAdd(count, bad);
}

static unsigned blocks_for(uint64_t n)
{
  uint64_t b = (n + 255) / 256;
  return b > 1024 ? 1024u : (unsigned)(b == 0 ? 1 : b);
}

extern "C" int tk_spin(uint64_t ns, cudaStream_t stream)
{
  spin_kernel<<<1, 1, 0, stream>>>(ns);
  return (int)cudaGetLastError();
}

extern "C" int tk_fill(void *dev, uint64_t n, uint64_t seed, uint64_t first, cudaStream_t stream)
{
  fill_kernel<<<blocks_for(n), 256, 0, stream>>>((uint8_t *)dev, n, seed, first);
  return (int)cudaGetLastError();
}

extern "C" int tk_count_mismatch(const void *dev, uint64_t n, uint64_t seed, uint64_t first,
                                 unsigned long long *dev_count, cudaStream_t stream)
{
  check_kernel<<<blocks_for(n), 256, 0, stream>>>((const uint8_t *)dev, n, seed, first, dev_count);
  return (int)cudaGetLastError();
}
