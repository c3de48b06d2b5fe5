/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin_pool.c - the spare list of pin_pool.h: best fit under a lock, and the
 * allocation itself outside it, since pinning memory is slow.
 */
#include "core/engine/cuda/pin_pool.h"

#include <stdint.h>

/* Kept in front of each buffer (PIN_POOL_HDR bytes). */
struct pin_hdr {
  size_t bytes;
  struct pin_hdr *next; /* while spare */
};

_Static_assert(sizeof(struct pin_hdr) <= PIN_POOL_HDR, "the header fits its room");
_Static_assert(PIN_POOL_HDR % 64 == 0, "buffers keep the allocation's 64-byte alignment");

int pin_pool_init(struct pin_pool *p, void *(*alloc)(void *ctx, size_t bytes),
                  void (*release)(void *ctx, void *mem), void *ctx)
{
  p->spares = NULL;
  p->alloc = alloc;
  p->release = release;
  p->ctx = ctx;
  return pthread_mutex_init(&p->lock, NULL) == 0 ? 0 : -1;
}

/* Unlink and return the smallest spare of at least `bytes`, or NULL. */
static struct pin_hdr *take_spare(struct pin_pool *p, size_t bytes)
{
  pthread_mutex_lock(&p->lock);
  struct pin_hdr **best = NULL;
  for (struct pin_hdr **s = &p->spares; *s != NULL; s = &(*s)->next) {
    if ((*s)->bytes >= bytes && (best == NULL || (*s)->bytes < (*best)->bytes))
      best = s;
  }
  struct pin_hdr *h = NULL;
  if (best != NULL) {
    h = *best;
    *best = h->next;
  }
  pthread_mutex_unlock(&p->lock);
  return h;
}

void *pin_pool_get(struct pin_pool *p, size_t bytes)
{
  struct pin_hdr *h = take_spare(p, bytes);
  if (h != NULL)
    return (uint8_t *)h + PIN_POOL_HDR;
  if (bytes > SIZE_MAX - PIN_POOL_HDR)
    return NULL;
  h = p->alloc(p->ctx, bytes + PIN_POOL_HDR);
  if (h == NULL)
    return NULL;
  h->bytes = bytes;
  h->next = NULL;
  return (uint8_t *)h + PIN_POOL_HDR;
}

void pin_pool_put(struct pin_pool *p, void *buf)
{
  if (buf == NULL)
    return;
  struct pin_hdr *h = (struct pin_hdr *)(void *)((uint8_t *)buf - PIN_POOL_HDR);
  pthread_mutex_lock(&p->lock);
  h->next = p->spares;
  p->spares = h;
  pthread_mutex_unlock(&p->lock);
}

void pin_pool_destroy(struct pin_pool *p)
{
  while (p->spares != NULL) {
    struct pin_hdr *h = p->spares;
    p->spares = h->next;
    p->release(p->ctx, h);
  }
  pthread_mutex_destroy(&p->lock);
}
