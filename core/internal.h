/* SPDX-License-Identifier: Apache-2.0 */
/*
 * internal.h - struct conn and what core/'s own files (connector.c,
 * block_calls.c, block_claims.c, directory_calls.c, inflight.c, poll.c)
 * share. Nothing outside core/ includes it but the unit tests under
 * tests/core/: plugins know a connector only by core/conn.h.
 */
#ifndef ECC_CORE_INTERNAL_H
#define ECC_CORE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "common/lock.h"
#include "common/log.h"
#include "core/config/config.h"
#include "core/conn.h"
#include "core/directory/directory.h"
#include "core/engine/engine.h"
#include "core/inflight.h"
#include "core/region/region.h"
#include "core/tokens.h"
#include "core/transfer.h"
#include "ecc_plugin_v1.h"

/* A block a save names on a region with a directory: its id, where in the
 * call it is first named (the entries' blocks counted back to back), and
 * the reservation found holding it (block_claims.c). */
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

/*
 * The locks, outermost first; a thread takes them only in this order:
 *   step_lock       the step's state below (save, flush, load and the
 *                   directory's saves and loads, which fill batches);
 *   inflight.lock   the in-flight queue: FIFOs, stats, region verdicts;
 *   the directory's lock (cross-process, in the region: directory.c),
 *                   taken inside either of the two above or alone;
 *   pool.lock       the transfer pool, held for a pointer swap only.
 * Fields above step_lock are set at create and only read after it; the
 * directory guards its own pages. Each is a common/lock.h lock known to
 * the connector's log, so that the host's log callback runs under none of
 * them (a message made inside one waits in the log: common/log.h).
 */
struct conn {
  struct plugin_config cfg;
  struct ecc_log log;
  struct region region;
  struct engine engine;
  struct dir dir; /* the region's directory, when has_dir */
  bool has_dir;   /* directory.enabled */
  bool save_rank; /* tp_rank == 0 && pcp_rank == 0 */

  struct ecc_mutex step_lock; /* save / flush / load state below */
  struct transfer *pending;   /* the save batch this step is filling */
  uint64_t save_batches;      /* batches submitted per direction */
  uint64_t load_batches;
  uint64_t *order;           /* load scratch: keys (load_plan.h), then as many for the sort */
  size_t order_cap;          /* keys it has room for */
  struct named_block *named; /* scratch of saves by block id on a region with */
  struct named_reservation *named_res; /* a directory, room for named_cap blocks and as */
  size_t named_cap;                    /* many reservations */

  struct inflight inflight;  /* the transfers in flight, stats: its own lock */
  struct transfer_pool pool; /* transfers not in flight: its own lock, the innermost */
};

/* ---- inflight.c: the in-flight queue's calls that need the connector ---- */

/* A rank that is not the save rank counts n saves it did not make: ECC_OK. */
int inflight_skip_saves(struct conn *c, size_t n);
/* ECC_OK when another transfer of `direction` may go in flight, else
 * ECC_ERR_BUSY (normal back-pressure, so logged at debug level). */
int inflight_room(struct conn *c, int direction);
/* Start the engine's copy of t (its direction set); on error nothing started. */
int inflight_start(struct conn *c, struct transfer *t, void *stream);
/* A started save batch, numbered and queued for poll (step_lock held). */
void inflight_queue_save(struct conn *c, struct transfer *t);
/* A started load: the stream ordered after it, queued for poll (step_lock held). */
int inflight_queue_load(struct conn *c, struct transfer *t, void *stream);
/* Account a transfer that just finished (the in-flight lock held). */
void inflight_count_finished(struct conn *c, struct transfer *t);

/* ---- what every call that touches the directory's pages shares ---- */

/* The code a directory call answers for the directory's (or the region
 * check's) error: an operating-system failure there (a lock whose memory
 * was overwritten, an fstat that fails) leaves a region nobody can trust,
 * which the ABI calls ECC_ERR_REGION. */
static inline int directory_code(int rc)
{
  return rc == ECC_ERR_SYSTEM ? ECC_ERR_REGION : rc;
}

/* The directory's pages are read by the call: a region file cut short
 * under the mapping would raise SIGBUS there, so every call that touches
 * them checks the file first (one fstat), after its arguments. */
static inline int directory_need_region(struct conn *c)
{
  return directory_code(region_check(&c->region, &c->log));
}

/* ---- block_claims.c: the directory's side of the block-id calls ---- */

/* A load by block ids: every block of entry idx must lie in a pinned entry
 * (else ECC_ERR_RANGE naming the first that does not), and each entry they
 * lie in is held for t's copy (pins appended to t->holds, released once
 * the copy has completed); ECC_ERR_BUSY, holding nothing more, if the pin
 * table has no room for them (step_lock held). */
int blocks_hold_loads(struct conn *c, struct transfer *t, size_t idx, const uint32_t *ids,
                      uint32_t n);
/* Saves by block ids (n entries, `blocks` ids in all): every block must lie
 * in a live reservation of this process, and each reservation they lie in
 * is claimed for t's copy (appended to t->claims) unless t holds it
 * already. On an error nothing more is claimed (step_lock held). */
int blocks_claim_saves(struct conn *c, struct transfer *t, const ecc_save_entry_v1_t *e, size_t n,
                       uint64_t blocks);
/* ---- directory_calls.c ---- */

/* What the directory's calls and the cache's (cache_calls.c) share: a
 * token read as `kind` (ECC_ERR_CLOSED logged naming what it is); an entry
 * and its minor-2 metadata as the ABI reports them; the directory present
 * (ECC_ERR_UNSUPPORTED), and a role that moves `direction`
 * (ECC_ERR_ROLE); a key's length; and reserve with what it records. */
int directory_token_ref(struct conn *c, const char *what, uint64_t token, enum token_kind kind,
                        struct dir_ref *ref);
void directory_entry_out(const struct dir_entry_info *info, int32_t state, uint64_t token,
                         ecc_entry_v1_t *out);
void directory_meta_out(const struct dir_entry_info *info, ecc_entry_meta_v1_t *meta);
int directory_need(struct conn *c, const char *what);
int directory_need_side(struct conn *c, const char *what, int direction);
int directory_check_key(struct conn *c, const char *what, size_t idx, const char *key);
int directory_reserve(struct conn *c, const char *what, const char *key, uint64_t nbytes,
                      const struct dir_meta *meta, ecc_entry_v1_t *out);

/* The directory's counters and the cache's, read at once; zeros without a
 * directory. ECC_ERR_REGION when the region's file was removed, replaced
 * or truncated, or the directory's error (its lock's timeout): nothing
 * written but zeros. */
int directory_counters(struct conn *c, ecc_directory_stats_v1_t *out, ecc_cache_stats_v1_t *cache);

/* ---- poll.c ---- */

/* The directory work of t's records poll never reported (see poll.c). */
void poll_settle_unreported(struct conn *c, struct transfer *t, int status);
/* Wait for every transfer in `f` and free it (shutdown; done_lock held). */
void poll_drain_all(struct conn *c, struct fifo *f);

#endif /* ECC_CORE_INTERNAL_H */
