/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devmem.h - memory for the demo's encoder outputs and load destinations:
 * GPU memory through a CUDA runtime found at run time when the connector
 * uses the CUDA engine, ordinary host memory otherwise.
 */
#ifndef ECC_CLI_DEVMEM_H
#define ECC_CLI_DEVMEM_H

#include <stddef.h>

struct devmem {
  int on_gpu; /* 1: buffers are cudaMalloc'd; 0: malloc'd */
  void *lib;  /* the dlopen'd CUDA runtime, or NULL */
  int (*malloc_fn)(void **ptr, size_t n);
  int (*free_fn)(void *ptr);
  int (*memcpy_fn)(void *dst, const void *src, size_t n, int kind);
  int (*sync_fn)(void);
  const char *(*error_string_fn)(int code);
};

/* Prepare host memory (on_gpu 0) or load the CUDA runtime (on_gpu 1). On
 * failure writes the reason to err and returns -1. */
int devmem_init(struct devmem *dm, int on_gpu, char *err, size_t err_cap);
void devmem_fini(struct devmem *dm);

/* Allocate n bytes where the engine reads and writes; NULL on failure. */
void *devmem_alloc(struct devmem *dm, size_t n, char *err, size_t err_cap);
void devmem_free(struct devmem *dm, void *p);

/* Copy between host memory and a devmem buffer; waits for the copy. */
int devmem_upload(struct devmem *dm, void *dst, const void *src, size_t n, char *err,
                  size_t err_cap);
int devmem_download(struct devmem *dm, void *dst, const void *src, size_t n, char *err,
                    size_t err_cap);

/* Wait for all device work (no-op for host memory). */
int devmem_sync(struct devmem *dm, char *err, size_t err_cap);

#endif /* ECC_CLI_DEVMEM_H */
