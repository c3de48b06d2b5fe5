/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin.c - registration of this process's mapping of the region with the GPU
 * driver (page-locked and mapped, so copy engines and kernels reach it), in
 * chunks, one process at a time, and its undoing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "core/engine/cuda/cuda_engine.h"
#include "core/region/region.h"

/* Recent drivers refuse one registration of 512 GiB or more; chunks stay
 * well under that. */
#define PIN_CHUNK_LIMIT (256ull << 30)

/* Byte of the region file whose open-file-description lock serialises
 * registration between processes: the driver has failed registrations of
 * one shared file made by several processes at once. OFD locks are
 * independent of the flock every process holds on the file, and go away
 * with the descriptor, so no lock file is left behind. */
#define PIN_LOCK_OFFSET 0

static int pin_lock(int fd, short type)
{
  struct flock fl;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = PIN_LOCK_OFFSET;
  fl.l_len = 1;
  while (fcntl(fd, F_OFD_SETLKW, &fl) != 0) {
    if (errno != EINTR)
      return -1;
  }
  return 0;
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Chunk length: a multiple of both the block size (a block never straddles
 * two registrations) and the page size (no page is registered twice), at
 * most PIN_CHUNK_LIMIT when such a multiple fits under it. Without such a
 * multiple, or when the blocks do not start on a page, one call it is. */
static uint64_t chunk_bytes(const uint8_t *base, uint64_t block_size, uint64_t total)
{
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t step = block_size / gcd64(block_size, page);
  if ((uintptr_t)base % page != 0 || step > PIN_CHUNK_LIMIT / page)
    return total;
  step *= page;
  uint64_t chunk = (PIN_CHUNK_LIMIT / step) * step;
  return chunk < total ? chunk : total;
}

void unpin_region(struct pin_state *p, struct ecc_log *log)
{
  for (size_t i = 0; i < p->n_chunks; i++) {
    cudaError_t rc = cudaHostUnregister(p->chunks[i].base);
    if (rc != cudaSuccess) {
      log_msg(log, ECC_LOG_WARN, "cuda: unregistering %zu bytes of the region failed: %s",
              p->chunks[i].bytes, cudaGetErrorString(rc));
      (void)cudaGetLastError();
    }
  }
  free(p->chunks);
  p->chunks = NULL;
  p->n_chunks = 0;
  p->bytes = 0;
}

/* Whether device code can use the host addresses of every chunk unchanged
 * (true with unified addressing on every current platform). */
static int check_device_view(struct pin_state *p)
{
  int dev = 0, same = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&same, cudaDevAttrCanUseHostPointerForRegisteredMem, dev) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (!same)
    return 0;
  for (size_t i = 0; i < p->n_chunks; i++) {
    void *dp = NULL;
    if (cudaHostGetDevicePointer(&dp, p->chunks[i].base, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    if (dp != p->chunks[i].base)
      return 0;
  }
  return 1;
}

static int register_chunks(struct region *r, struct pin_state *p, char *why, size_t why_cap)
{
  uint8_t *base = r->blocks;
  uint64_t total = r->block_size * r->num_blocks;
  uint64_t chunk = chunk_bytes(base, r->block_size, total);
  size_t n = (size_t)((total + chunk - 1) / chunk);
  p->chunks = calloc(n, sizeof(*p->chunks));
  if (p->chunks == NULL) {
    snprintf(why, why_cap, "out of memory");
    return -1;
  }
  for (uint64_t off = 0; off < total; off += chunk) {
    size_t len = (size_t)(total - off < chunk ? total - off : chunk);
    cudaError_t rc =
        cudaHostRegister(base + off, len, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (rc != cudaSuccess) {
      /* A failed registration leaves an error that the next unrelated
       * runtime call would otherwise report. */
      (void)cudaGetLastError();
      snprintf(why, why_cap, "cudaHostRegister of %zu bytes at offset %" PRIu64 " failed: %s", len,
               off, cudaGetErrorString(rc));
      return -1;
    }
    p->chunks[p->n_chunks].base = base + off;
    p->chunks[p->n_chunks].bytes = len;
    p->n_chunks++;
    p->bytes += len;
  }
  return 0;
}

int pin_region(struct region *r, struct pin_state *out, struct ecc_log *log, char *why,
               size_t why_cap)
{
  memset(out, 0, sizeof(*out));
  int locked = pin_lock(r->fd, F_WRLCK) == 0;
  if (!locked)
    log_msg(log, ECC_LOG_WARN, "cuda: cannot lock %s to serialise pinning (%s); pinning anyway",
            r->path, strerror(errno));
  uint64_t t0 = ecc_now_ns();
  int rc = register_chunks(r, out, why, why_cap);
  out->ns = ecc_now_ns() - t0;
  if (locked && pin_lock(r->fd, F_UNLCK) != 0)
    log_msg(log, ECC_LOG_WARN, "cuda: cannot unlock %s: %s", r->path, strerror(errno));
  if (rc != 0) {
    unpin_region(out, log);
    out->ns = 0;
    return -1;
  }
  out->device_view_ok = check_device_view(out);
  double gib = (double)out->bytes / (double)(1ull << 30);
  log_msg(log, ECC_LOG_INFO, "cuda: pinned %.3f GiB of %s in %.3f s (%.3f s/GiB, %zu chunk%s)", gib,
          r->path, (double)out->ns / 1e9, gib > 0 ? (double)out->ns / 1e9 / gib : 0.0,
          out->n_chunks, out->n_chunks == 1 ? "" : "s");
  return 0;
}
