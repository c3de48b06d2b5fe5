/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h - struct conn and what core/'s own files (connector.c,
 * transfer.c, submit.c, poll.c, directory_calls.c) share. Nothing outside
 * core/ includes it: plugins know a connector only by core/conn.h.
 */
#ifndef ECC_CORE_INTERNAL_H
#define ECC_CORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/log.h"
#include "core/config/config.h"
#include "core/conn.h"
#include "core/directory/directory.h"
#include "core/engine/engine.h"
#include "core/region/region.h"
#include "core/transfer.h"
#include "ecc_plugin_v1.h"

/* A block a save names on a region with a directory: its id, where in the
 * call it is first named (the entries' blocks counted back to back), and
 * the reservation found holding it (dir_calls.c). */
struct named_block {
  uint32_t id;
  uint32_t holder;
  uint64_t at;
};

/* A reservation such a save writes, and where the call first names it. */
struct named_reservation {
  struct dir_ref ref;
  uint64_t at;
};

struct conn {
  struct plugin_config cfg;
  struct ecc_log log;
  struct region region;
  struct engine engine;
  struct dir dir; /* the region's directory, when has_dir */
  bool has_dir;   /* directory.enabled */
  bool save_rank; /* tp_rank == 0 && pcp_rank == 0 */

  pthread_mutex_t step_lock; /* save / flush / load state below */
  struct transfer *pending;  /* the save batch this step is filling */
  uint64_t save_batches;     /* batches submitted per direction */
  uint64_t load_batches;
  uint64_t *order;           /* load scratch: keys (load_plan.h), then as many for the sort */
  size_t order_cap;          /* keys it has room for */
  struct named_block *named; /* scratch of saves by block id on a region with */
  struct named_reservation *named_res; /* a directory, room for named_cap blocks and as */
  size_t named_cap;                    /* many reservations */

  pthread_mutex_t done_lock; /* FIFOs, free transfers, stats */
  struct fifo saves;
  struct fifo loads;
  struct transfer *free_list;
  ecc_stats_v1_t stats;
  bool region_dead; /* a poll found the region removed, replaced or truncated */
  bool dir_gone;    /* ... and its directory's pages cut off: nothing is settled there */
};

/* Every connector lock is taken through these, so that nothing is logged to
 * the host while one is held (see log_lock_taken). */
static inline int conn_lock_index(const struct conn *c, const pthread_mutex_t *m)
{
  return m == &c->step_lock ? 0 : 1;
}

static inline void conn_lock(struct conn *c, pthread_mutex_t *m)
{
  pthread_mutex_lock(m);
  log_lock_taken(&c->log, conn_lock_index(c, m));
}

static inline void conn_unlock(struct conn *c, pthread_mutex_t *m)
{
  log_lock_dropping(&c->log, conn_lock_index(c, m));
  pthread_mutex_unlock(m);
  log_lock_dropped(&c->log);
}

/* ---- transfer.c: transfers, pooled with their storage ---- */

/* A cleared transfer, from the pool or new; NULL when out of memory. */
struct transfer *transfer_get(struct conn *c);
void transfer_put(struct conn *c, struct transfer *t);
/* Everything a transfer owns, and the transfer. */
void transfer_free(struct transfer *t);

/* transfer_put with done_lock held. */
static inline void transfer_put_locked(struct conn *c, struct transfer *t)
{
  t->next = c->free_list;
  c->free_list = t;
}

/* ---- submit.c: what the directory's saves and loads share with the rest ---- */

/* A rank that is not the save rank counts n saves it did not make: ECC_OK. */
int conn_skip_saves(struct conn *c, size_t n);
/* ECC_OK when another transfer of `dir` may go in flight, else ECC_ERR_BUSY. */
int conn_check_room(struct conn *c, int dir);
/* Start the engine's copy of t (its direction set); on error nothing started. */
int conn_engine_submit(struct conn *c, struct transfer *t, void *stream);
/* A started load: the stream ordered after it, queued for poll (step_lock held). */
int conn_queue_load(struct conn *c, struct transfer *t, void *stream);

/* ---- dir_calls.c ---- */

/* A polled record's directory work: a saved reservation published (or
 * freed when its copy failed), a pinned load's rank released. Returns the
 * status to report: ECC_ERR_CLOSED instead of ECC_OK when the reservation
 * or pin was reclaimed while the copy ran. */
int conn_dir_settle(struct conn *c, int direction, uint64_t token, int status);
/* A load by block ids: ECC_OK when every block of entry idx lies in a
 * pinned entry, else ECC_ERR_RANGE naming the first that does not. */
int conn_dir_load_blocks(struct conn *c, size_t idx, const uint32_t *ids, uint32_t n);
/* Saves by block ids (n entries, `blocks` ids in all): every block must lie
 * in a live reservation of this process, and each reservation they lie in
 * is claimed for t's copy (appended to t->claims) unless t holds it
 * already. On an error nothing more is claimed (step_lock held). */
int conn_dir_claim_saves(struct conn *c, struct transfer *t, const ecc_save_entry_v1_t *e, size_t n,
                         uint64_t blocks);
/* Gives back t's claims from index `from` on. */
void conn_dir_unclaim(struct conn *c, struct transfer *t, size_t from);
/* The directory's counters; zeros without one. ECC_ERR_REGION when the
 * region's file was removed, replaced or truncated, or the directory's
 * error (its lock's timeout): nothing written but zeros. */
int conn_dir_stats(struct conn *c, ecc_directory_stats_v1_t *out);
/* Whether the directory's pages are still backed by the region's file (it
 * was not cut short below their end): the work nobody asked for now (what
 * poll and shutdown settle) touches them only then. One fstat. */
bool conn_dir_reachable(const struct conn *c);

/* ---- poll.c ---- */

/* The directory work of t's records poll never reported (see poll.c). */
void poll_settle_unreported(struct conn *c, struct transfer *t, int status);
/* Wait for every transfer in `f` and free it (shutdown; done_lock held). */
void poll_drain_all(struct conn *c, struct fifo *f);

#endif /* ECC_CORE_INTERNAL_H */
