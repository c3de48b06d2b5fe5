/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy_kernels.cu - the gather (region -> device) and scatter (device ->
 * region) kernel of the CUDA engine: one warp per copy task, reading the task
 * list in place from mapped pinned host memory.
 *
 * Reads of host memory cross the PCIe link with a round trip of a microsecond
 * or more, so the rate is set by how many bytes are in flight: each lane
 * issues UNROLL independent 16-byte loads before its first store (a warp
 * moves 4 KiB per round trip, a whole 3-4 KiB block at once), and every warp
 * of every CTA works on its own task. One CTA per task would leave most of
 * the link idle at 4 KiB blocks. bench/NOTES.md has the launch shapes tried.
 */
#include <stdint.h>

#include "core/engine/cuda/cuda_engine.h"

#define WARP 32u
#define FULL_MASK 0xffffffffu

/* Copies n units of T: lane-interleaved so a warp's accesses are contiguous,
 * all U loads of a round issued before the stores. */
template <typename T, int U>
__device__ __forceinline__ void copy_units(const T *__restrict__ s, T *__restrict__ d, uint64_t n,
                                           unsigned lane)
{
  for (uint64_t base = 0; base < n; base += (uint64_t)WARP * U) {
    T r[U];
#pragma unroll
    for (int k = 0; k < U; k++) {
      uint64_t i = base + (uint64_t)k * WARP + lane;
      if (i < n)
        r[k] = s[i];
    }
#pragma unroll
    for (int k = 0; k < U; k++) {
      uint64_t i = base + (uint64_t)k * WARP + lane;
      if (i < n)
        d[i] = r[k];
    }
  }
}

/* Copies len bytes with units of T once the destination is aligned to T;
 * the source has the same alignment (the caller picked T for that). Head and
 * tail bytes, fewer than sizeof(T) <= 16 of each, take one lane per byte. */
template <typename T, int U>
__device__ __forceinline__ void copy_aligned(const unsigned char *s, unsigned char *d, uint64_t len,
                                             unsigned lane)
{
  const uint64_t w = sizeof(T);
  uint64_t head = (w - ((uintptr_t)d & (w - 1))) & (w - 1);
  if (head > len)
    head = len;
  if (lane < head)
    d[lane] = s[lane];
  uint64_t units = (len - head) / w;
  copy_units<T, U>(reinterpret_cast<const T *>(s + head), reinterpret_cast<T *>(d + head), units,
                   lane);
  uint64_t done = head + units * w;
  if (lane < len - done)
    d[done + lane] = s[done + lane];
}

/* The widest access both addresses can share: 16 bytes when source and
 * destination agree modulo 16, narrower otherwise (down to single bytes).
 * Only the 16-byte path, the one that carries the traffic, keeps 8 loads in
 * flight per lane; the rare narrow ones keep 2, which holds the kernel's
 * registers (and so what it takes from the SMs it shares) down. */
__device__ __forceinline__ void copy_task(uint64_t src, uint64_t dst, uint64_t len, unsigned lane)
{
  const unsigned char *s = reinterpret_cast<const unsigned char *>(src);
  unsigned char *d = reinterpret_cast<unsigned char *>(dst);
  uint64_t skew = (src ^ dst) & 15u;
  if (skew == 0)
    copy_aligned<uint4, 8>(s, d, len, lane);
  else if ((skew & 7u) == 0)
    copy_aligned<uint2, 2>(s, d, len, lane);
  else if ((skew & 3u) == 0)
    copy_aligned<uint32_t, 2>(s, d, len, lane);
  else if ((skew & 1u) == 0)
    copy_aligned<uint16_t, 2>(s, d, len, lane);
  else
    copy_aligned<unsigned char, 2>(s, d, len, lane);
}

/* Warp w takes tasks w, w + W, w + 2W, ... (W warps in the grid). Its lanes
 * fetch 32 of those task records at once, so the latency of reading the list
 * from host memory is paid once per 32 tasks; shuffles hand them round. */
__global__ void __launch_bounds__(ECC_COPY_THREADS)
    ecc_copy_kernel(const uint64_t *__restrict__ src, const uint64_t *__restrict__ dst,
                    const uint64_t *__restrict__ len, uint32_t n, int to_host)
{
  const unsigned lane = threadIdx.x & (WARP - 1);
  const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
  const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) / WARP;

  for (uint64_t first = warp; first < n; first += warps * WARP) {
    uint64_t mine = first + lane * warps;
    uint64_t s = 0, d = 0, l = 0;
    if (mine < n) {
      s = src[mine];
      d = dst[mine];
      l = len[mine];
    }
    for (unsigned k = 0; k < WARP && first + k * warps < n; k++) {
      uint64_t ts = __shfl_sync(FULL_MASK, s, k);
      uint64_t td = __shfl_sync(FULL_MASK, d, k);
      uint64_t tl = __shfl_sync(FULL_MASK, l, k);
      copy_task(ts, td, tl, lane);
    }
  }
  /* Writes to host memory must be visible to other processes once the end
   * event has fired. */
  if (to_host)
    __threadfence_system();
}

extern "C" int ecc_copy_launch(const uint64_t *src, const uint64_t *dst, const uint64_t *len,
                               uint32_t n, unsigned ctas, int to_host, cudaStream_t stream)
{
  ecc_copy_kernel<<<ctas, ECC_COPY_THREADS, 0, stream>>>(src, dst, len, n, to_host);
  return (int)cudaGetLastError();
}

extern "C" int ecc_copy_kernel_check(void)
{
  cudaFuncAttributes attr;
  return (int)cudaFuncGetAttributes(&attr, ecc_copy_kernel);
}
