/* SPDX-License-Identifier: Apache-2.0 */
/*
 * block_claims.c - the directory's side of saves and loads by block ids on
 * a region with one: a load's blocks must lie in pinned entries, which its
 * copy holds until it ends; a save's in reservations of this process, which
 * its copy claims until it ends.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/settle.h"

/* A load's blocks must lie in pinned entries, and those entries are held
 * (pinned once more, by this process) until its copy has completed: a
 * check alone, at submit, would let the host's pin be released (by any
 * process holding its token, or by a pin timeout) and the entry be evicted
 * and its blocks rewritten while the copy reads them. */
int blocks_hold_loads(struct conn *c, struct transfer *t, size_t idx, const uint32_t *ids,
                      uint32_t n)
{
  if (transfer_reserve_holds(t, n) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: entry %zu: out of memory for %" PRIu32 " holds",
                    idx, n);
  uint32_t bad = 0, got = 0;
  char why[256] = "";
  int rc = dir_hold_blocks(&c->dir, ids, n, t->holds + t->n_holds, &got, &bad, why, sizeof(why));
  t->n_holds += got;
  if (rc == ECC_OK)
    return ECC_OK;
  if (rc == ECC_ERR_RANGE)
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "load: entry %zu: block %" PRIu32 " is not in a pinned entry; on a region "
                    "with a directory only those blocks may be named",
                    idx, bad);
  if (rc == ECC_ERR_BUSY)
    return log_fail(&c->log, ECC_ERR_BUSY,
                    "load: entry %zu: the entries it reads cannot be held until its copy ends: "
                    "%s (poll or unpin first, or raise directory.max_pins)",
                    idx, why);
  return log_fail(&c->log, directory_code(rc),
                  "load: entry %zu: the directory could not be read: %s", idx, why);
}

/* A save's blocks are checked and held where its copy is made: a check
 * alone, at save time, would let the reservation be aborted (and its run
 * reserved and published by someone else) before flush copies into it.
 * The claim makes abort_reserved BUSY until the copy has completed; the
 * reservation stays unpublished, since a save by block ids may write part
 * of it only. */

#define HOLDER_NONE UINT32_MAX            /* the block lies in no live entry */
#define HOLDER_FORBIDDEN (UINT32_MAX - 1) /* in an entry this process may not write */

/* The directory walk of one save call: the call's blocks sorted by id, the
 * reservations found holding them, and the first block (in call order) of
 * an entry it may not write. */
struct save_walk {
  struct named_block *blocks;
  size_t n;
  struct named_reservation *res;
  size_t n_res;
  struct dir_owner self;
  uint64_t bad_at; /* UINT64_MAX: none */
  int bad_state;
  int32_t bad_pid;
  char bad_key[DIR_KEY_MAX + 1];
};

static int by_id_then_at(const void *a, const void *b)
{
  const struct named_block *x = a, *y = b;
  if (x->id != y->id)
    return x->id < y->id ? -1 : 1;
  return x->at < y->at ? -1 : x->at > y->at;
}

/* The first of the sorted blocks whose id is at least `id`. */
static size_t first_from(const struct named_block *b, size_t n, uint32_t id)
{
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (b[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void note_forbidden(struct save_walk *w, const struct dir_entry_info *e, uint64_t at)
{
  if (at >= w->bad_at)
    return;
  w->bad_at = at;
  w->bad_state = e->state;
  w->bad_pid = e->owner.pid;
  memcpy(w->bad_key, e->key, sizeof(w->bad_key));
}

/* dir_list's visit of one live entry: each of the call's blocks in its
 * runs is given to it (under the directory's lock: nothing logged). */
static void save_walk_one(void *user, const struct dir_entry_info *e)
{
  struct save_walk *w = user;
  bool writable = e->state == DIR_STATE_RESERVED && e->owner.pid == w->self.pid &&
                  e->owner.start_ticks == w->self.start_ticks;
  uint32_t mine = HOLDER_NONE;
  for (uint32_t r = 0; r < e->n_runs && r < DIR_MAX_RUNS; r++) {
    uint64_t end = (uint64_t)e->runs[r].first + e->runs[r].count;
    for (size_t k = first_from(w->blocks, w->n, e->runs[r].first);
         k < w->n && w->blocks[k].id < end; k++) {
      struct named_block *b = &w->blocks[k];
      if (!writable || b->holder != HOLDER_NONE) { /* (held twice: a damaged table) */
        b->holder = HOLDER_FORBIDDEN;
        note_forbidden(w, e, b->at);
        continue;
      }
      if (mine == HOLDER_NONE) {
        mine = (uint32_t)w->n_res++;
        w->res[mine] = (struct named_reservation){e->ref, b->at};
      }
      b->holder = mine;
      if (b->at < w->res[mine].at)
        w->res[mine].at = b->at;
    }
  }
}

/* Entry and position in it of the call's block number `at`. */
static void locate(const ecc_save_entry_v1_t *e, uint64_t at, size_t *idx, uint32_t *pos)
{
  size_t i = 0;
  while (at >= e[i].n_blocks)
    at -= e[i++].n_blocks;
  *idx = i;
  *pos = (uint32_t)at;
}

static int named_room(struct conn *c, uint64_t blocks)
{
  if (blocks <= c->named_cap)
    return ECC_OK;
  if (blocks > SIZE_MAX / sizeof(struct named_block))
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: %" PRIu64 " block ids in one call", blocks);
  struct named_block *b = realloc(c->named, (size_t)blocks * sizeof(*b));
  if (b != NULL)
    c->named = b;
  struct named_reservation *r =
      b != NULL ? realloc(c->named_res, (size_t)blocks * sizeof(*r)) : NULL;
  if (r == NULL)
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: out of memory for %" PRIu64 " block ids",
                    blocks);
  c->named_res = r;
  c->named_cap = (size_t)blocks;
  return ECC_OK;
}

/* The call's blocks, sorted by id, each once (where it is first named). */
static size_t gather_blocks(struct conn *c, const ecc_save_entry_v1_t *e, size_t n)
{
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < e[i].n_blocks; j++, k++)
      c->named[k] = (struct named_block){e[i].block_ids[j], HOLDER_NONE, k};
  qsort(c->named, k, sizeof(*c->named), by_id_then_at);
  size_t u = 0;
  for (size_t i = 0; i < k; i++)
    if (u == 0 || c->named[u - 1].id != c->named[i].id)
      c->named[u++] = c->named[i];
  return u;
}

/* Refuses the call if a block lies in no live entry, or in one it may not
 * write: whichever comes first in the call is named. */
static int judge_walk(struct conn *c, const struct save_walk *w, const ecc_save_entry_v1_t *e)
{
  uint64_t none_at = UINT64_MAX;
  for (size_t k = 0; k < w->n; k++)
    if (w->blocks[k].holder == HOLDER_NONE && w->blocks[k].at < none_at)
      none_at = w->blocks[k].at;
  uint64_t at = none_at < w->bad_at ? none_at : w->bad_at;
  if (at == UINT64_MAX)
    return ECC_OK;
  size_t idx;
  uint32_t pos;
  locate(e, at, &idx, &pos);
  uint32_t block = e[idx].block_ids[pos];
  if (at == none_at)
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "save: entry %zu: block %" PRIu32 " is not in a live reservation; on a region "
                    "with a directory only those blocks may be named",
                    idx, block);
  if (w->bad_state != DIR_STATE_RESERVED)
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "save: entry %zu: block %" PRIu32 " is in key '%s', which is published, not "
                    "a live reservation",
                    idx, block, w->bad_key);
  return log_fail(&c->log, ECC_ERR_RANGE,
                  "save: entry %zu: block %" PRIu32 " is in key '%s', reserved by process %" PRId32
                  ", not this one: a save by block ids writes only this process's own "
                  "reservations (save_reserved with the token writes another's)",
                  idx, block, w->bad_key, w->bad_pid);
}

static bool holds_claim(const struct transfer *t, size_t upto, struct dir_ref ref)
{
  for (size_t i = 0; i < upto; i++)
    if (t->claims[i].slot == ref.slot && t->claims[i].gen == ref.gen)
      return true;
  return false;
}

static int claim_found(struct conn *c, struct transfer *t, const struct save_walk *w,
                       const ecc_save_entry_v1_t *e)
{
  size_t from = t->n_claims;
  if (transfer_reserve_claims(t, w->n_res) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: out of memory for %zu claims", w->n_res);
  for (size_t i = 0; i < w->n_res; i++) {
    if (holds_claim(t, from, w->res[i].ref))
      continue; /* an earlier save of this step's batch writes it too */
    struct dir_entry_info info;
    char why[256] = "";
    int rc = dir_claim(&c->dir, w->res[i].ref, &info, why, sizeof(why));
    if (rc == ECC_OK) {
      t->claims[t->n_claims++] = w->res[i].ref;
      continue;
    }
    settle_unclaim(&c->dir, t, from);
    size_t idx;
    uint32_t pos;
    locate(e, w->res[i].at, &idx, &pos);
    if (rc == ECC_ERR_CLOSED) /* ended between the walk and the claim */
      return log_fail(&c->log, ECC_ERR_RANGE,
                      "save: entry %zu: block %" PRIu32 " is not in a live reservation now (%s)",
                      idx, e[idx].block_ids[pos], why);
    return log_fail(&c->log, directory_code(rc), "save: entry %zu: block %" PRIu32 ": %s%s", idx,
                    e[idx].block_ids[pos], why,
                    rc == ECC_ERR_BUSY ? " (a copy in flight writes it: poll first)" : "");
  }
  return ECC_OK;
}

int blocks_claim_saves(struct conn *c, struct transfer *t, const ecc_save_entry_v1_t *e, size_t n,
                       uint64_t blocks)
{
  int rc =
      directory_need_region(c); /* every call, not once per batch: the walk reads the directory */
  if (rc == ECC_OK)
    rc = named_room(c, blocks);
  if (rc != ECC_OK)
    return rc;
  struct save_walk w = {.blocks = c->named, .res = c->named_res, .bad_at = UINT64_MAX};
  w.n = gather_blocks(c, e, n);
  w.self = c->dir.self;
  rc = dir_list(&c->dir, save_walk_one, &w);
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "save: the directory could not be read");
  rc = judge_walk(c, &w, e);
  if (rc == ECC_OK)
    rc = claim_found(c, t, &w, e);
  return rc;
}
