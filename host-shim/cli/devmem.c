/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devmem.c - buffers for the demo in GPU or host memory. The CUDA runtime is
 * found with dlopen so that eccctl needs neither CUDA headers to build nor a
 * GPU to run; only the few entry points the demo uses are declared here.
 */
#include "host-shim/cli/devmem.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Values of the runtime's cudaMemcpyKind and cudaSuccess (stable ABI). */
#define CUDA_SUCCESS 0
#define CUDA_MEMCPY_HOST_TO_DEVICE 1
#define CUDA_MEMCPY_DEVICE_TO_HOST 2

static const char *const cudart_names[] = {
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so.11.0",
    "libcudart.so",
};

static int resolve(struct devmem *dm, void **slot, const char *sym, char *err, size_t err_cap)
{
  *slot = dlsym(dm->lib, sym);
  if (*slot == NULL) {
    snprintf(err, err_cap, "the CUDA runtime lacks %s", sym);
    return -1;
  }
  return 0;
}

/* Resolve each entry point through a void* slot: ISO C has no conversion
 * from object to function pointers, but POSIX guarantees dlsym's result
 * has the function's representation. */
static int load_cudart(struct devmem *dm, char *err, size_t err_cap)
{
  const char *last = "not found";
  for (size_t i = 0; i < sizeof(cudart_names) / sizeof(cudart_names[0]); i++) {
    dm->lib = dlopen(cudart_names[i], RTLD_NOW | RTLD_LOCAL);
    if (dm->lib != NULL)
      break;
    last = dlerror();
  }
  if (dm->lib == NULL) {
    snprintf(err, err_cap,
             "the connector uses the CUDA engine but no CUDA "
             "runtime (libcudart.so.13/.12/.11.0/.so) could be loaded: %s",
             last);
    return -1;
  }
  void *p[5];
  if (resolve(dm, &p[0], "cudaMalloc", err, err_cap) ||
      resolve(dm, &p[1], "cudaFree", err, err_cap) ||
      resolve(dm, &p[2], "cudaMemcpy", err, err_cap) ||
      resolve(dm, &p[3], "cudaDeviceSynchronize", err, err_cap) ||
      resolve(dm, &p[4], "cudaGetErrorString", err, err_cap)) {
    dlclose(dm->lib);
    dm->lib = NULL;
    return -1;
  }
  memcpy(&dm->malloc_fn, &p[0], sizeof(p[0]));
  memcpy(&dm->free_fn, &p[1], sizeof(p[1]));
  memcpy(&dm->memcpy_fn, &p[2], sizeof(p[2]));
  memcpy(&dm->sync_fn, &p[3], sizeof(p[3]));
  memcpy(&dm->error_string_fn, &p[4], sizeof(p[4]));
  return 0;
}

int devmem_init(struct devmem *dm, int on_gpu, char *err, size_t err_cap)
{
  memset(dm, 0, sizeof(*dm));
  dm->on_gpu = on_gpu ? 1 : 0;
  if (!dm->on_gpu)
    return 0;
  return load_cudart(dm, err, err_cap);
}

void devmem_fini(struct devmem *dm)
{
  if (dm->lib != NULL)
    dlclose(dm->lib);
  memset(dm, 0, sizeof(*dm));
}

static int cuda_failed(struct devmem *dm, int code, const char *what, char *err, size_t err_cap)
{
  snprintf(err, err_cap, "%s failed: CUDA error %d (%s)", what, code,
           dm->error_string_fn ? dm->error_string_fn(code) : "?");
  return -1;
}

void *devmem_alloc(struct devmem *dm, size_t n, char *err, size_t err_cap)
{
  if (!dm->on_gpu) {
    void *p = malloc(n);
    if (p == NULL)
      snprintf(err, err_cap, "out of host memory allocating %zu bytes", n);
    return p;
  }
  void *p = NULL;
  int rc = dm->malloc_fn(&p, n);
  if (rc != CUDA_SUCCESS) {
    cuda_failed(dm, rc, "cudaMalloc", err, err_cap);
    return NULL;
  }
  return p;
}

void devmem_free(struct devmem *dm, void *p)
{
  if (p == NULL)
    return;
  if (!dm->on_gpu)
    free(p);
  else
    (void)dm->free_fn(p); /* nothing useful to do about a failed free at exit */
}

/* One copy in direction `kind` (a CUDA_MEMCPY_* value); a plain memcpy
 * when the entries live in host memory. */
static int copy(struct devmem *dm, void *dst, const void *src, size_t n, int kind, const char *what,
                char *err, size_t err_cap)
{
  if (!dm->on_gpu) {
    memcpy(dst, src, n);
    return 0;
  }
  int rc = dm->memcpy_fn(dst, src, n, kind);
  return rc == CUDA_SUCCESS ? 0 : cuda_failed(dm, rc, what, err, err_cap);
}

int devmem_upload(struct devmem *dm, void *dst, const void *src, size_t n, char *err,
                  size_t err_cap)
{
  return copy(dm, dst, src, n, CUDA_MEMCPY_HOST_TO_DEVICE, "cudaMemcpy to the GPU", err, err_cap);
}

int devmem_download(struct devmem *dm, void *dst, const void *src, size_t n, char *err,
                    size_t err_cap)
{
  return copy(dm, dst, src, n, CUDA_MEMCPY_DEVICE_TO_HOST, "cudaMemcpy from the GPU", err, err_cap);
}

int devmem_sync(struct devmem *dm, char *err, size_t err_cap)
{
  if (!dm->on_gpu)
    return 0;
  int rc = dm->sync_fn();
  return rc == CUDA_SUCCESS ? 0 : cuda_failed(dm, rc, "cudaDeviceSynchronize", err, err_cap);
}
