/* SPDX-License-Identifier: Apache-2.0 */
/*
 * block_calls.c - a step's saves and loads by block ids: each request checked, each direction
 * batched into one transfer and handed to the engine within the in-flight
 * bound; one translation unit with the checks and load plan its loops inline.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/load_plan.h"
#include "core/settle.h"

/* ---- checks shared by save and load ---- */

/* Four block ids, in the vector extension of GCC and Clang. */
typedef uint32_t ids_x4 __attribute__((vector_size(16)));

/* Whether every id is below `limit`. The lanes compare independently, four
 * ids an instruction, at any optimisation level: this runs over a load's
 * every block before any of its copy may start, and a running maximum
 * chains each comparison to the one before (about 1 ns an id on the H200's
 * host, 28 us for a step of 32 images of 880 blocks). */
static bool ids_below(const uint32_t *ids, uint32_t n, uint64_t limit)
{
  if (limit > UINT32_MAX)
    return true;
  uint32_t lim = (uint32_t)limit;
  ids_x4 lims = {lim, lim, lim, lim}, over = {0, 0, 0, 0};
  uint32_t i = 0;
  for (; n - i >= 4; i += 4) {
    ids_x4 four;
    memcpy(&four, ids + i, sizeof(four)); /* the ids are 4-byte aligned only */
    over |= (ids_x4)(four >= lims);
  }
  uint32_t any = over[0] | over[1] | over[2] | over[3];
  for (; i < n; i++)
    any |= ids[i] >= lim;
  return any == 0;
}

/* Block ids in range, and their span (n_ids x block_size) within 64 bits,
 * which the byte counts below and desc_write_entry rely on. */
static int check_blocks(struct conn *c, const char *what, size_t idx, const uint32_t *ids,
                        uint32_t n_ids)
{
  if (ids == NULL || n_ids == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: entry %zu has no block ids", what, idx);
  uint64_t span;
  if (__builtin_mul_overflow((uint64_t)n_ids, c->region.block_size, &span))
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "%s: entry %zu: %" PRIu32 " blocks of %" PRIu64 " bytes exceed 2^64 bytes",
                    what, idx, n_ids, c->region.block_size);
  /* The culprit is looked for only when there is one. */
  uint64_t limit = c->region.num_blocks;
  if (ids_below(ids, n_ids, limit))
    return ECC_OK;
  uint32_t at = 0;
  while (ids[at] < limit)
    at++;
  return log_fail(&c->log, ECC_ERR_RANGE,
                  "%s: entry %zu: block id %" PRIu32 " (position %" PRIu32
                  ") is out of range: the region has %" PRIu64 " blocks",
                  what, idx, ids[at], at, limit);
}

/* On success sets *key_len to the key's length. */
static int check_save_entry(struct conn *c, const ecc_save_entry_v1_t *e, size_t idx,
                            size_t *key_len)
{
  if (e->key == NULL)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu has a NULL key", idx);
  size_t klen = strnlen(e->key, ECC_KEY_MAX + 1);
  if (klen == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu has an empty key", idx);
  if (klen > ECC_KEY_MAX)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu: key longer than %d bytes", idx,
                    ECC_KEY_MAX);
  if (e->src == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu (%s) has a NULL source", idx,
                    e->key);
  if (e->nbytes == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu (%s) has 0 bytes", idx, e->key);
  if (e->src > UINT64_MAX - e->nbytes)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "save: entry %zu (%s): source 0x%" PRIx64 " + %" PRIu64 " bytes wraps around",
                    idx, e->key, e->src, e->nbytes);
  int rc = check_blocks(c, "save", idx, e->block_ids, e->n_blocks);
  if (rc != ECC_OK)
    return rc;
  uint64_t room = (uint64_t)e->n_blocks * c->region.block_size; /* fits: check_blocks */
  if (e->nbytes > room)
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "save: encoder output exceeds allocated blocks for key %s: %" PRIu64
                    " bytes but only %" PRIu32 " blocks of %" PRIu64 " bytes",
                    e->key, e->nbytes, e->n_blocks, c->region.block_size);
  *key_len = klen;
  return ECC_OK;
}

/* Bytes a load entry moves: its blocks, cut at the destination's capacity.
 * The product fits in 64 bits once check_blocks has passed. */
static uint64_t load_bytes(const struct conn *c, const ecc_load_entry_v1_t *e)
{
  uint64_t blocks = (uint64_t)e->n_blocks * c->region.block_size;
  return blocks < e->dst_capacity ? blocks : e->dst_capacity;
}

/* On success adds the entry's block count to *descs (at most one
 * descriptor per block), so the entries are not walked again for it. */
static int check_load_entry(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e,
                            size_t idx, uint64_t *descs)
{
  if (e->dst == 0)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 ") has a NULL destination", idx,
                    e->transfer_id);
  if (e->dst_capacity == 0)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 ") has a destination capacity of 0", idx,
                    e->transfer_id);
  /* What it holds is let go by the caller if this or a later entry fails. */
  int rc = check_blocks(c, "load", idx, e->block_ids, e->n_blocks);
  if (rc == ECC_OK && c->has_dir)
    rc = blocks_hold_loads(c, t, idx, e->block_ids, e->n_blocks);
  if (rc != ECC_OK)
    return rc;
  if (e->dst > UINT64_MAX - load_bytes(c, e))
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 "): destination 0x%" PRIx64
                    " wraps around",
                    idx, e->transfer_id, e->dst);
  *descs += e->n_blocks;
  return ECC_OK;
}

/* A save or load call of n > 0 entries: an array, and a role that moves
 * this direction. */
static int check_call(struct conn *c, int direction, const void *e, size_t n)
{
  if (e == NULL)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: entries is NULL but n = %zu",
                    ecc_direction_name(direction), n);
  int other = direction == ECC_DIR_SAVE ? ROLE_CONSUMER : ROLE_PRODUCER;
  if (c->cfg.role == other)
    return log_fail(&c->log, ECC_ERR_ROLE, "%s: this connector is a %s (connector.role)",
                    ecc_direction_name(direction), config_role_name(other));
  return ECC_OK;
}

/* ---- what flush and load share: the in-flight bound, the engine ---- */

/* ---- save / flush ---- */

/* Every entry is checked before any is added: adding may merge the first
 * one into the batch's last descriptor, which a later bad entry could not
 * take back. Sets *descs (at most one descriptor per block listed) and
 * *key_bytes (NULs included). */
static int check_saves(struct conn *c, const ecc_save_entry_v1_t *e, size_t n, uint64_t *descs,
                       size_t *key_bytes)
{
  *descs = 0;
  *key_bytes = 0;
  for (size_t i = 0; i < n; i++) {
    size_t klen = 0;
    int rc = check_save_entry(c, &e[i], i, &klen);
    if (rc != ECC_OK)
      return rc;
    *descs += e[i].n_blocks;
    *key_bytes += klen + 1;
  }
  return ECC_OK;
}

static int add_saves(struct conn *c, struct transfer *t, const ecc_save_entry_v1_t *e, size_t n,
                     uint64_t descs, size_t key_bytes)
{
  if (desc_reserve(&t->view.desc, descs) != 0 || transfer_reserve_done(t, n) != 0 ||
      transfer_reserve_keys(t, t->keys_len + key_bytes) != 0 ||
      (t->has_tokens && transfer_reserve_tokens(t, n) != 0))
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: out of memory for %" PRIu64 " descriptors",
                    descs);
  /* Locals, stored back once: see struct desc_writer. */
  uint64_t base = (uint64_t)(uintptr_t)c->region.blocks, bs = c->region.block_size;
  struct desc_writer w;
  desc_writer_open(&t->view.desc, &w);
  struct done_rec *rec = t->done + t->n_done;
  char *keys = t->keys;
  size_t keys_len = t->keys_len;
  for (size_t i = 0; i < n; i++) {
    desc_write_entry(&w, e[i].src, base, bs, e[i].block_ids, e[i].nbytes, 1);
    rec[i].id = keys_len;
    rec[i].nbytes = e[i].nbytes;
    size_t klen = strlen(e[i].key) + 1; /* checked: <= ECC_KEY_MAX + 1 */
    memcpy(keys + keys_len, e[i].key, klen);
    keys_len += klen;
  }
  desc_writer_close(&t->view.desc, &w);
  if (t->has_tokens) /* a batch that also holds reservations: these have none */
    memset(t->tokens + t->n_done, 0, n * sizeof(*t->tokens));
  t->n_done += n;
  t->keys_len = keys_len;
  return ECC_OK;
}

/* On a region with a directory the reservations the blocks lie in are
 * claimed first, and given back if the call is refused after all. */
static int save_locked(struct conn *c, const ecc_save_entry_v1_t *e, size_t n, uint64_t descs,
                       size_t key_bytes)
{
  struct transfer *t = c->pending;
  /* Once per batch, not per entry: a step's first save starts it. */
  int rc = t == NULL ? region_check(&c->region, &c->log) : ECC_OK;
  if (rc != ECC_OK)
    return rc;
  if (t == NULL && (t = transfer_get(&c->pool)) == NULL)
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: out of memory for a transfer");
  size_t claims = t->n_claims;
  if (c->has_dir)
    rc = blocks_claim_saves(c, t, e, n, descs);
  if (rc == ECC_OK)
    rc = add_saves(c, t, e, n, descs, key_bytes);
  if (rc == ECC_OK) {
    c->pending = t;
    return ECC_OK;
  }
  settle_unclaim(&c->dir, t, claims);
  if (c->pending == NULL)
    transfer_put(&c->pool, t);
  return rc;
}

int conn_save(struct conn *c, const ecc_save_entry_v1_t *e, size_t n)
{
  if (n == 0)
    return ECC_OK;
  int rc = check_call(c, ECC_DIR_SAVE, e, n);
  if (rc != ECC_OK)
    return rc;
  uint64_t descs;
  size_t key_bytes;
  rc = check_saves(c, e, n, &descs, &key_bytes);
  if (rc != ECC_OK)
    return rc;
  if (!c->save_rank) /* copies nothing, so it holds no reservation (as save_reserved) */
    return inflight_skip_saves(c, n);
  lock_mutex_lock(&c->step_lock);
  rc = save_locked(c, e, n, descs, key_bytes);
  lock_mutex_unlock(&c->step_lock);
  return rc;
}

static int flush_locked(struct conn *c, void *stream)
{
  struct transfer *t = c->pending;
  if (t == NULL)
    return ECC_OK;
  int rc = region_check(&c->region, &c->log);
  if (rc == ECC_OK)
    rc = inflight_room(c, ECC_DIR_SAVE);
  if (rc != ECC_OK)
    return rc;
  t->view.direction = ECC_DIR_SAVE;
  rc = inflight_start(c, t, stream);
  if (rc != ECC_OK)
    return rc;
  c->pending = NULL;
  inflight_queue_save(c, t);
  return ECC_OK;
}

int conn_flush(struct conn *c, void *stream)
{
  lock_mutex_lock(&c->step_lock);
  int rc = flush_locked(c, stream);
  lock_mutex_unlock(&c->step_lock);
  return rc;
}

/* ---- load ---- */

/* What the checking pass learnt about a call's loads. */
struct load_pass {
  uint64_t descs; /* descriptors at most: one per block listed */
  uint64_t bytes; /* that the entries move */
  bool sort;      /* whether the entries are copied in the order of their first blocks */
};

/* One pass over the entries in the host's order: each is checked, and gets
 * its completion record and its sort key in c->order, while load_order
 * learns whether the sort is needed. Records and keys are scratch until the
 * transfer is queued, so a rejected call still changes nothing. */
static int check_loads(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                       struct load_pass *pass)
{
  struct load_order order;
  load_order_init(&order);
  struct done_rec *rec = t->done; /* the transfer is new: no records yet */
  uint64_t *keys = c->order;
  pass->descs = 0;
  pass->bytes = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = check_load_entry(c, t, &e[i], i, &pass->descs);
    if (rc != ECC_OK)
      return rc;
    uint64_t bytes = load_bytes(c, &e[i]);
    rec[i].id = e[i].transfer_id;
    rec[i].nbytes = bytes;
    /* Saturating: only the engine's sizing of its parts reads it. */
    pass->bytes = bytes > UINT64_MAX - pass->bytes ? UINT64_MAX : pass->bytes + bytes;
    /* dst + bytes does not wrap: checked */
    keys[i] = load_order_add(&order, i, e[i].block_ids[0], e[i].dst, bytes);
  }
  pass->sort = load_order_sorts(&order);
  return ECC_OK;
}

static int reserve_order(struct conn *c, size_t n)
{
  if (c->order_cap >= n)
    return 0;
  /* Keys, then as many again of scratch for the sort. */
  uint64_t *p = realloc(c->order, 2 * n * sizeof(*p));
  if (p == NULL)
    return -1;
  c->order = p;
  c->order_cap = n;
  return 0;
}

/* The descriptors of a step's loads, in the order load_plan.h picks: all
 * of them now, or, for an engine that copies parts while the rest is
 * written, room for all of them and `feed` to write them with. */
static int build_load(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                      const struct load_pass *pass, struct load_feed *feed)
{
  if (desc_reserve(&t->view.desc, pass->descs) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for %" PRIu64 " descriptors",
                    pass->descs);
  uint64_t base = (uint64_t)(uintptr_t)c->region.blocks, bs = c->region.block_size;
  const uint64_t *sorted = pass->sort ? load_sort(c->order, c->order + c->order_cap, n) : NULL;
  t->n_done = n;
  t->view.direction = ECC_DIR_LOAD;
  if (c->engine.ops->takes_feed) {
    load_feed_init(feed, e, t->done, n, sorted, base, bs, pass->bytes);
    t->view.feed = &feed->feed;
    return ECC_OK;
  }
  struct desc_writer w;
  desc_writer_open(&t->view.desc, &w);
  load_plan_write(&w, e, t->done, n, sorted, base, bs);
  desc_writer_close(&t->view.desc, &w);
  return ECC_OK;
}

/* Checked entries first, then the in-flight bound, then the copy. */
static int start_load(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                      void *stream)
{
  if (transfer_reserve_done(t, n) != 0 || reserve_order(c, n) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for %zu entries", n);
  struct load_pass pass;
  struct load_feed feed; /* read by the engine inside inflight_start only */
  int rc = check_loads(c, t, e, n, &pass);
  if (rc == ECC_OK)
    rc = inflight_room(c, ECC_DIR_LOAD);
  if (rc == ECC_OK)
    rc = build_load(c, t, e, n, &pass, &feed);
  if (rc == ECC_OK)
    rc = inflight_start(c, t, stream);
  t->view.feed = NULL;
  return rc;
}

static int load_locked(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream)
{
  int rc = region_check(&c->region, &c->log);
  if (rc != ECC_OK)
    return rc;
  struct transfer *t = transfer_get(&c->pool);
  if (t == NULL)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for a transfer");
  rc = start_load(c, t, e, n, stream);
  if (rc != ECC_OK) {
    /* No copy started: the entries it would have read are let go. */
    (void)settle_release_holds(&c->dir, t);
    transfer_put(&c->pool, t);
    return rc;
  }
  return inflight_queue_load(c, t, stream);
}

/* The entries are checked under the step lock, in the same pass that
 * prepares them: a step of thousands of entries pays for one walk, not two. */
int conn_load(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream)
{
  if (n == 0)
    return ECC_OK;
  int rc = check_call(c, ECC_DIR_LOAD, e, n);
  if (rc != ECC_OK)
    return rc;
  if (n > UINT32_MAX)
    return log_fail(&c->log, ECC_ERR_INVALID, "load: %zu entries in one call; at most %u", n,
                    UINT32_MAX);
  lock_mutex_lock(&c->step_lock);
  rc = load_locked(c, e, n, stream);
  lock_mutex_unlock(&c->step_lock);
  return rc;
}
