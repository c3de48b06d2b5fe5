/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda_engine.h - pieces of the CUDA engine shared between its C files and
 * the copy kernels: the engine state, the pinning and batched-copy helpers,
 * and the C entry points of the kernels.
 */
#ifndef ECC_CUDA_ENGINE_H
#define ECC_CUDA_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ecc_log;
struct region;

/* ---- copy kernels (copy_kernels.cu) ---- */

/* Threads per CTA of the copy kernel: 16 warps, each moving 8 x 16 bytes per
 * lane per round trip, keep up to 64 KiB of reads in flight per SM. */
#define ECC_COPY_THREADS 512u
#define ECC_COPY_WARPS_PER_CTA (ECC_COPY_THREADS / 32u)

/* Copy n tasks (src[i] -> dst[i], len[i] bytes), one warp per task, on
 * `ctas` CTAs of `stream`. The arrays must be readable by the device (mapped
 * pinned memory). `to_host` adds a system-scope fence after the writes.
 * Returns the launch's cudaError_t. */
int ecc_copy_launch(const uint64_t *src, const uint64_t *dst, const uint64_t *len, uint32_t n,
                    unsigned ctas, int to_host, cudaStream_t stream);

/* cudaSuccess when the copy kernel has code for the current device. */
int ecc_copy_kernel_check(void);

/* ---- driver functions found at run time (driver.c) ---- */

/* The driver's `name` as of ABI `version`, or NULL (no sticky error left):
 * the static runtime does not link the driver, and a driver older than the
 * toolkit may lack a function. */
void *cuda_driver_fn(const char *name, unsigned version);

/* ---- batched copy call resolved from the driver (dma.c) ---- */

struct dma_api {
  void *batch;        /* cuMemcpyBatchAsync, or NULL when the driver lacks it */
  int batch_abi;      /* 13000: no failIdx argument; 12080: with failIdx */
  void *error_string; /* cuGetErrorString, for the text of a failed batch */
};

/* Look up cuMemcpyBatchAsync in the driver; leaves batch NULL if absent. */
void dma_resolve(struct dma_api *api);

/* Enqueue count copies on `stream`: one batched call when available (and
 * the stream is not the legacy default stream), else one async copy per
 * descriptor. `to_host`: device->host, whose source must be read in stream
 * order; host->device sources may be read out of order. Returns the first
 * failure as a cudaError_t (or CUresult cast), 0 on success, and in
 * *err_text a static description. */
int dma_copy(const struct dma_api *api, const uint64_t *src, const uint64_t *dst,
             const uint64_t *len, size_t count, int to_host, cudaStream_t stream,
             const char **err_text);

/* ---- pinning of the region mapping (pin.c) ---- */

struct pin_chunk {
  void *base;
  size_t bytes;
};

struct pin_state {
  struct pin_chunk *chunks; /* registered ranges, in address order */
  size_t n_chunks;
  uint64_t bytes;      /* bytes registered */
  uint64_t ns;         /* time spent registering */
  bool device_view_ok; /* kernels may use the host addresses as they are */
};

/* Register the region's blocks with the driver (the engine's device must be
 * current). Returns 0, or -1 with a reason in why (nothing left registered,
 * sticky error cleared). */
int pin_region(struct region *r, struct pin_state *out, struct ecc_log *log, char *why,
               size_t why_cap);
/* Unregister everything pin_region registered; errors are logged. */
void unpin_region(struct pin_state *p, struct ecc_log *log);

#ifdef __cplusplus
}
#endif

#endif /* ECC_CUDA_ENGINE_H */
