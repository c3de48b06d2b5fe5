/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transfer.c - the connector's pool of transfers: a finished transfer keeps
 * its descriptor, record and key storage for a later batch, so that steps
 * of a steady size allocate nothing in the connector.
 */
#include <stdlib.h>

#include "core/internal.h"

struct transfer *transfer_get(struct conn *c)
{
  conn_lock(c, &c->done_lock);
  struct transfer *t = c->free_list;
  if (t != NULL)
    c->free_list = t->next;
  conn_unlock(c, &c->done_lock);
  if (t == NULL) {
    t = calloc(1, sizeof(*t));
    if (t == NULL)
      return NULL;
    desc_init(&t->view.desc, c->engine.ops->desc_alloc, c->engine.ops->desc_free, c->engine.impl);
  }
  t->next = NULL;
  t->n_done = 0;
  t->keys_len = 0;
  t->next_report = 0;
  t->has_tokens = false;
  t->settles_reservations = false;
  t->n_claims = 0;
  t->view.held = false;
  t->view.hold = NULL;
  t->finished = 0;
  t->status = ECC_OK;
  t->elapsed_ns = 0;
  desc_clear(&t->view.desc);
  return t;
}

void transfer_put(struct conn *c, struct transfer *t)
{
  conn_lock(c, &c->done_lock);
  transfer_put_locked(c, t);
  conn_unlock(c, &c->done_lock);
}

void transfer_free(struct transfer *t)
{
  desc_free(&t->view.desc);
  free(t->done);
  free(t->keys);
  free(t->tokens);
  free(t->claims);
  free(t);
}
