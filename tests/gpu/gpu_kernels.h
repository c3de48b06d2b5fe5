/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_kernels.h - kernels the GPU tests queue on their compute stream: a
 * spin that keeps the stream busy, a fill with a position-dependent pattern
 * and a check that counts bytes differing from it.
 */
#ifndef ECC_GPU_KERNELS_H
#define ECC_GPU_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Byte `i` of the pattern `seed`: the same on host and device, never zero,
 * different for every seed and position. */
#ifdef __CUDACC__
__host__ __device__
#endif
    static inline uint8_t
    tk_byte(uint64_t seed, uint64_t i)
{
  uint64_t x = (seed + 1) * 0x9E3779B97F4A7C15ull + (i >> 3);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return (uint8_t)((x >> ((i & 7) * 8)) | 1u);
}

/* Keep `stream` busy for about `ns` nanoseconds. Returns a cudaError_t. */
int tk_spin(uint64_t ns, cudaStream_t stream);
/* Write pattern `seed` (positions first..first+n) into device memory. */
int tk_fill(void *dev, uint64_t n, uint64_t seed, uint64_t first, cudaStream_t stream);
/* Add to *dev_count the bytes of dev[0..n) that differ from the pattern. */
int tk_count_mismatch(const void *dev, uint64_t n, uint64_t seed, uint64_t first,
                      unsigned long long *dev_count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
