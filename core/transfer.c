/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transfer.c - the connector's pool of transfers: a finished transfer keeps
 * its descriptor, record and key storage for a later batch, so that steps
 * of a steady size allocate nothing in the connector.
 */
#include "core/transfer.h"

#include <stdlib.h>

int transfer_pool_init(struct transfer_pool *p, struct ecc_log *log, void *(*alloc)(void *, size_t),
                       void (*release)(void *, void *), void *ctx)
{
  p->free = NULL;
  p->desc_alloc = alloc;
  p->desc_free = release;
  p->desc_ctx = ctx;
  return lock_mutex_init(&p->lock, log);
}

void transfer_pool_destroy(struct transfer_pool *p)
{
  while (p->free != NULL) {
    struct transfer *t = p->free;
    p->free = t->next;
    transfer_free(t);
  }
  lock_mutex_destroy(&p->lock);
}

static void clear(struct transfer *t)
{
  t->next = NULL;
  t->n_done = 0;
  t->keys_len = 0;
  t->next_report = 0;
  t->has_tokens = false;
  t->settles_reservations = false;
  t->n_claims = 0;
  t->n_holds = 0;
  t->view.held = false;
  t->view.feed = NULL;
  t->view.hold = NULL;
  t->finished = 0;
  t->status = ECC_OK;
  t->elapsed_ns = 0;
  desc_clear(&t->view.desc);
}

struct transfer *transfer_get(struct transfer_pool *p)
{
  lock_mutex_lock(&p->lock);
  struct transfer *t = p->free;
  if (t != NULL)
    p->free = t->next;
  lock_mutex_unlock(&p->lock);
  if (t == NULL) {
    t = calloc(1, sizeof(*t));
    if (t == NULL)
      return NULL;
    desc_init(&t->view.desc, p->desc_alloc, p->desc_free, p->desc_ctx);
  }
  clear(t);
  return t;
}

void transfer_put(struct transfer_pool *p, struct transfer *t)
{
  lock_mutex_lock(&p->lock);
  t->next = p->free;
  p->free = t;
  lock_mutex_unlock(&p->lock);
}

void transfer_free(struct transfer *t)
{
  desc_free(&t->view.desc);
  free(t->done);
  free(t->keys);
  free(t->tokens);
  free(t->claims);
  free(t->holds);
  free(t);
}
