/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu_dst.h - device memory for ecc-ucx-bench's GPU columns: a destination
 * on the GPU, a plain host-to-device copy (what a host would write without
 * the plugin's CUDA path) and the bytes read back for checking. Without
 * CUDA in the build every call says there is no GPU.
 */
#ifndef ECC_UCX_BENCH_GPU_DST_H
#define ECC_UCX_BENCH_GPU_DST_H

#include <stddef.h>
#include <stdint.h>

/* n bytes of device memory, or NULL (no CUDA, no GPU, out of memory). */
void *gpu_dst_alloc(size_t n);
/* cudaMemcpy host -> device, waited for: 0 on success. */
int gpu_dst_upload(void *dev, const void *host, size_t n);
/* Copies n bytes back into host (waited for): 0 on success. */
int gpu_dst_read(const void *dev, void *host, size_t n);
void gpu_dst_free(void *dev);

#endif
