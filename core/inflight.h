/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inflight.h - the connector's in-flight queue: the transfers each
 * direction has handed to the engine, oldest first, what they count in
 * the statistics, and what polls learnt of the region. It owns its lock;
 * poll.c reports from it, the calls that submit (block_calls.c,
 * directory_calls.c) go through inflight.c.
 */
#ifndef ECC_CORE_INFLIGHT_H
#define ECC_CORE_INFLIGHT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/lock.h"
#include "core/transfer.h"
#include "ecc_plugin_v1.h"

/* Transfers in flight in one direction, oldest first. */
struct fifo {
  struct transfer *head, *tail;
  size_t count; /* transfers queued, finished or not */
};

static inline void fifo_push(struct fifo *f, struct transfer *t)
{
  t->next = NULL;
  if (f->tail != NULL)
    f->tail->next = t;
  else
    f->head = t;
  f->tail = t;
  f->count++;
}

static inline struct transfer *fifo_pop(struct fifo *f)
{
  struct transfer *t = f->head;
  f->head = t->next;
  if (f->head == NULL)
    f->tail = NULL;
  f->count--;
  return t;
}

struct inflight {
  struct ecc_mutex lock; /* every field below */
  struct fifo saves;
  struct fifo loads;
  ecc_stats_v1_t stats;
  bool region_dead; /* a poll found the region removed, replaced or truncated */
  bool dir_gone;    /* ... and its directory's pages cut off: nothing is settled there */
};

/* ECC_OK, or lock_mutex_init's failure (then nothing is made). */
int inflight_init(struct inflight *q, struct ecc_log *log);
void inflight_destroy(struct inflight *q);

static inline struct fifo *inflight_fifo(struct inflight *q, int direction)
{
  return direction == ECC_DIR_SAVE ? &q->saves : &q->loads;
}

static inline ecc_dir_stats_v1_t *inflight_counts(struct inflight *q, int direction)
{
  return direction == ECC_DIR_SAVE ? &q->stats.save : &q->stats.load;
}

/* The statistics' size bucket of a transfer of `bytes` (ECC_HIST_BOUNDS). */
unsigned inflight_hist_bucket(uint64_t bytes);

#endif /* ECC_CORE_INFLIGHT_H */
