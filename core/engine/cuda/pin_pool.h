/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin_pool.h - the CUDA engine's pinned host buffers, kept for reuse (freeing
 * pinned memory can synchronise the device) and freed with the pool; the
 * allocator is injected, cudaHostAlloc in the engine: no CUDA here.
 */
#ifndef ECC_PIN_POOL_H
#define ECC_PIN_POOL_H

#include <pthread.h>
#include <stddef.h>

/* Bytes kept before each buffer for its size and free-list link, a multiple
 * of 64 so that what the caller gets stays as aligned as the allocation. */
#define PIN_POOL_HDR 64u

struct pin_hdr;

struct pin_pool {
  pthread_mutex_t lock;                    /* spares */
  struct pin_hdr *spares;                  /* released buffers */
  void *(*alloc)(void *ctx, size_t bytes); /* NULL when it fails */
  void (*release)(void *ctx, void *mem);   /* what alloc returned */
  void *ctx;
};

/* Returns 0, or -1 when the lock cannot be made. */
int pin_pool_init(struct pin_pool *p, void *(*alloc)(void *ctx, size_t bytes),
                  void (*release)(void *ctx, void *mem), void *ctx);

/* A buffer of at least `bytes`: the smallest spare that fits, else a new
 * allocation of bytes + PIN_POOL_HDR. NULL when the allocator fails or the
 * size does not fit in a size_t; the pool is unchanged then. Thread-safe. */
void *pin_pool_get(struct pin_pool *p, size_t bytes);

/* Give a buffer from pin_pool_get back for reuse; NULL is ignored. */
void pin_pool_put(struct pin_pool *p, void *buf);

/* Free every spare through the allocator's release. Every buffer must have
 * been put back. */
void pin_pool_destroy(struct pin_pool *p);

#endif /* ECC_PIN_POOL_H */
