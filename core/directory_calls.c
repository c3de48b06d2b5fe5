/* SPDX-License-Identifier: Apache-2.0 */
/*
 * directory_calls.c - the directory functions of ABI 1.1 on a connector:
 * reserve and lookup, saves of reservations and loads of pinned entries
 * batched with the step's other copies, held loads, list and counters.
 * Tokens are tokens.h's; what a polled completion settles is settle.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/tensor.h"
#include "core/internal.h"
#include "core/settle.h"
#include "core/tokens.h"

/* ---- tokens -------------------------------------------------------------- */

/* token_read for `what`: ECC_OK, or ECC_ERR_CLOSED logged naming the kind
 * the token is and the one expected. */
int directory_token_ref(struct conn *c, const char *what, uint64_t token, enum token_kind kind,
                        struct dir_ref *ref)
{
  enum token_verdict v = token_read(token, kind, ref);
  if (v == TOKEN_NAMES)
    return ECC_OK;
  if (v == TOKEN_NOTHING)
    return log_fail(&c->log, ECC_ERR_CLOSED, "%s: token 0x%" PRIx64 " names nothing: %s is wanted",
                    what, token, token_kind_text(kind));
  return log_fail(&c->log, ECC_ERR_CLOSED, "%s: token 0x%" PRIx64 " is %s, not %s", what, token,
                  token_kind_text(kind == TOKEN_PIN ? TOKEN_RESERVATION : TOKEN_PIN),
                  token_kind_text(kind));
}

void directory_entry_out(const struct dir_entry_info *info, int32_t state, uint64_t token,
                         ecc_entry_v1_t *out)
{
  memset(out, 0, sizeof(*out));
  out->state = state;
  out->token = token;
  out->nbytes = info->nbytes;
  out->n_extents = info->n_runs;
  for (uint32_t i = 0; i < info->n_runs; i++) {
    out->extents[i].first_block = info->runs[i].first;
    out->extents[i].n_blocks = info->runs[i].count;
  }
}

void directory_meta_out(const struct dir_entry_info *info, ecc_entry_meta_v1_t *meta)
{
  memset(meta, 0, sizeof(*meta));
  meta->cost_us = info->meta.cost_us;
  meta->hits = info->hits;
  meta->type = info->meta.type;
}

/* ---- checks every call shares ------------------------------------------- */

int directory_need(struct conn *c, const char *what)
{
  if (c->has_dir)
    return ECC_OK;
  return log_fail(&c->log, ECC_ERR_UNSUPPORTED,
                  "%s: region %s has no directory (directory.enabled = false)", what,
                  c->region.path);
}

/* A directory call of one direction's side: the directory, and a role that
 * moves that direction. */
int directory_need_side(struct conn *c, const char *what, int direction)
{
  int rc = directory_need(c, what);
  int other = direction == ECC_DIR_SAVE ? ROLE_CONSUMER : ROLE_PRODUCER;
  if (rc == ECC_OK && c->cfg.role == other)
    rc = log_fail(&c->log, ECC_ERR_ROLE, "%s: this connector is a %s (connector.role)", what,
                  config_role_name(other));
  return rc;
}

int directory_check_key(struct conn *c, const char *what, size_t idx, const char *key)
{
  size_t len = key != NULL ? strnlen(key, ECC_KEY_MAX + 1) : 0;
  if (key == NULL || len == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: key %zu is %s", what, idx,
                    key == NULL ? "NULL" : "empty");
  if (len > ECC_KEY_MAX)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: key %zu is longer than %d bytes", what, idx,
                    ECC_KEY_MAX);
  return ECC_OK;
}

/* ---- reserve, abort, lookup, unpin, remove -------------------------------- */

int directory_reserve(struct conn *c, const char *what, const char *key, uint64_t nbytes,
                      const struct dir_meta *meta, ecc_entry_v1_t *out)
{
  int rc = directory_need_side(c, what, ECC_DIR_SAVE);
  if (rc == ECC_OK && out == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "%s: out is NULL", what);
  if (rc == ECC_OK)
    rc = directory_check_key(c, what, 0, key);
  if (rc == ECC_OK && nbytes == 0)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "%s: %s: 0 bytes", what, key);
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  int outcome = DIR_RESERVED;
  struct dir_entry_info info;
  rc = dir_reserve_ex(&c->dir, key, nbytes, meta, &outcome, &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail_at(&c->log, rc == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR,
                       directory_code(rc), "%s %s (%" PRIu64 " bytes): %s", what, key, nbytes, why);
  if (outcome == DIR_RESERVED)
    directory_entry_out(&info, ECC_ENTRY_RESERVED,
                        token_of(TOKEN_RESERVATION, info.ref.slot, info.ref.gen), out);
  else
    directory_entry_out(&info, outcome == DIR_FOUND_READY ? ECC_ENTRY_READY : ECC_ENTRY_WRITING, 0,
                        out);
  return ECC_OK;
}

int conn_reserve(struct conn *c, const char *key, uint64_t nbytes, ecc_entry_v1_t *out)
{
  return directory_reserve(c, "reserve", key, nbytes, NULL, out);
}

/* A reservation ended by token: published (its blocks written elsewhere) or
 * given up. */
static int end_reservation(struct conn *c, uint64_t token, const char *what,
                           int (*end)(struct dir *, struct dir_ref, char *, size_t))
{
  int rc = directory_need(c, what);
  if (rc != ECC_OK)
    return rc;
  struct dir_ref ref;
  rc = directory_token_ref(c, what, token, TOKEN_RESERVATION, &ref);
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = end(&c->dir, ref, why, sizeof(why));
  if (rc == ECC_ERR_INVALID) /* published: no longer a reservation */
    rc = ECC_ERR_CLOSED;
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "%s: token 0x%" PRIx64 ": %s", what, token, why);
  return ECC_OK;
}

int conn_publish_written(struct conn *c, uint64_t token)
{
  return end_reservation(c, token, "publish", dir_publish);
}

int conn_abort_reserved(struct conn *c, uint64_t token)
{
  return end_reservation(c, token, "abort_reserved", dir_abort);
}

/* Keys are looked up a chunk at a time (the directory's answers are large);
 * a chunk refused for want of pins releases every pin the call took. */
#define LOOKUP_CHUNK 32

static void release_pins(struct conn *c, const ecc_entry_v1_t *out, size_t n, uint32_t ranks)
{
  for (size_t i = 0; i < n; i++) {
    struct dir_ref ref;
    if (out[i].state != ECC_ENTRY_READY || token_read(out[i].token, TOKEN_PIN, &ref) != TOKEN_NAMES)
      continue;
    (void)dir_unpin_ranks(&c->dir, token_pin_ref(ref), ranks, NULL, 0);
  }
}

static int lookup_all(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                      ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta)
{
  bool found[LOOKUP_CHUNK];
  struct dir_entry_info info[LOOKUP_CHUNK];
  struct dir_pin_ref pins[LOOKUP_CHUNK];
  char why[256] = "";
  for (size_t done = 0; done < n;) {
    size_t k = n - done < LOOKUP_CHUNK ? n - done : LOOKUP_CHUNK;
    int rc = dir_lookup(&c->dir, keys + done, k, ranks, found, info, pins, why, sizeof(why));
    if (rc != ECC_OK) {
      release_pins(c, out, done, ranks);
      return log_fail_at(&c->log, rc == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR,
                         directory_code(rc), "lookup: %s", why);
    }
    for (size_t i = 0; i < k; i++) {
      if (found[i])
        directory_entry_out(&info[i], ECC_ENTRY_READY,
                            token_of(TOKEN_PIN, pins[i].slot, pins[i].gen), &out[done + i]);
      else
        memset(&out[done + i], 0, sizeof(out[done + i])); /* ECC_ENTRY_ABSENT is 0 */
      if (meta != NULL && found[i])
        directory_meta_out(&info[i], &meta[done + i]);
      else if (meta != NULL)
        memset(&meta[done + i], 0, sizeof(meta[done + i]));
    }
    done += k;
  }
  return ECC_OK;
}

static int lookup_checked(struct conn *c, int rc, const char *const *keys, size_t n, uint32_t ranks,
                          ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta)
{
  if (rc == ECC_OK && n > 0 && (keys == NULL || out == NULL))
    rc = log_fail(&c->log, ECC_ERR_INVALID, "lookup: %s is NULL", keys == NULL ? "keys" : "out");
  if (rc == ECC_OK && ranks == 0)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "lookup: ranks is 0 (a pin needs one release)");
  if (rc == ECC_OK && ranks > ECC_RANKS_MAX)
    rc = log_fail(&c->log, ECC_ERR_INVALID,
                  "lookup: ranks is %" PRIu32 ", above ECC_RANKS_MAX (%d): one release per rank "
                  "of the engine that loads the entry",
                  ranks, ECC_RANKS_MAX);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = directory_check_key(c, "lookup", i, keys[i]);
  if (rc == ECC_OK && n > 0)
    rc = directory_need_region(c);
  if (rc != ECC_OK || n == 0)
    return rc;
  return lookup_all(c, keys, n, ranks, out, meta);
}

int conn_lookup(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_v1_t *out)
{
  return lookup_checked(c, directory_need_side(c, "lookup", ECC_DIR_LOAD), keys, n, ranks, out,
                        NULL);
}

int conn_lookup_ex(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                   ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta)
{
  return lookup_checked(c, directory_need_side(c, "lookup_ex", ECC_DIR_LOAD), keys, n, ranks, out,
                        meta);
}

int conn_lookup_for_peer(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                         ecc_entry_v1_t *out)
{
  return lookup_checked(c, directory_need(c, "lookup"), keys, n, ranks, out, NULL);
}

int conn_unpin_ranks(struct conn *c, uint64_t token, uint32_t ranks)
{
  int rc = directory_need(c, "unpin");
  struct dir_ref ref;
  if (rc == ECC_OK)
    rc = directory_token_ref(c, "unpin", token, TOKEN_PIN, &ref);
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = dir_unpin_ranks(&c->dir, token_pin_ref(ref), ranks, why, sizeof(why));
  if (rc == ECC_OK)
    return ECC_OK;
  if (ranks == 1)
    return log_fail(&c->log, directory_code(rc), "unpin: token 0x%" PRIx64 ": %s", token, why);
  return log_fail(&c->log, directory_code(rc),
                  "unpin of %" PRIu32 " ranks: token 0x%" PRIx64 ": %s", ranks, token, why);
}

int conn_unpin(struct conn *c, uint64_t token)
{
  return conn_unpin_ranks(c, token, 1);
}

int conn_remove(struct conn *c, const char *key)
{
  int rc = directory_need(c, "remove");
  if (rc == ECC_OK)
    rc = directory_check_key(c, "remove", 0, key);
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = dir_remove(&c->dir, key, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "remove %s: %s", key, why);
  return ECC_OK;
}

/* ---- list and counters -------------------------------------------------- */

struct list_walk {
  uint64_t from; /* first slot wanted */
  ecc_listed_v1_t *out;
  ecc_entry_meta_v1_t *meta; /* may be NULL */
  size_t cap, n;
  uint64_t next; /* slot after the last one taken */
  uint64_t now_ns;
};

static void list_one(void *user, const struct dir_entry_info *e)
{
  struct list_walk *w = user;
  if (e->ref.slot < w->from || w->n == w->cap)
    return;
  if (w->meta != NULL)
    directory_meta_out(e, &w->meta[w->n]);
  ecc_listed_v1_t *o = &w->out[w->n++];
  memset(o, 0, sizeof(*o));
  memcpy(o->key, e->key, sizeof(o->key));
  o->key[sizeof(o->key) - 1] = '\0';
  o->state = e->state == DIR_STATE_READY ? ECC_ENTRY_READY : ECC_ENTRY_RESERVED;
  o->pins = e->pins;
  o->nbytes = e->nbytes;
  o->n_blocks = e->n_blocks;
  o->n_extents = e->n_runs;
  o->age_ns = w->now_ns > e->reserved_ns ? w->now_ns - e->reserved_ns : 0;
  o->idle_ns = w->now_ns > e->used_ns ? w->now_ns - e->used_ns : 0;
  if (e->ref.slot + 1 > w->next)
    w->next = (uint64_t)e->ref.slot + 1;
}

static int list_walked(struct conn *c, const char *what, uint64_t *cursor, ecc_listed_v1_t *out,
                       ecc_entry_meta_v1_t *meta, size_t cap, size_t *n_out)
{
  if (n_out != NULL)
    *n_out = 0;
  int rc = directory_need(c, what);
  if (rc == ECC_OK && (cursor == NULL || n_out == NULL || (out == NULL && cap > 0)))
    rc = log_fail(&c->log, ECC_ERR_INVALID, "%s: %s is NULL", what,
                  cursor == NULL  ? "cursor"
                  : n_out == NULL ? "n_out"
                                  : "out");
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  struct list_walk w = {*cursor, out, meta, cap, 0, *cursor, ecc_now_ns()};
  rc = dir_list(&c->dir, list_one, &w);
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "%s: the directory could not be read", what);
  *cursor = w.next;
  *n_out = w.n;
  return ECC_OK;
}

int conn_list(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap, size_t *n_out)
{
  return list_walked(c, "list", cursor, out, NULL, cap, n_out);
}

int conn_list_ex(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, ecc_entry_meta_v1_t *meta,
                 size_t cap, size_t *n_out)
{
  return list_walked(c, "list_ex", cursor, out, meta, cap, n_out);
}

int directory_counters(struct conn *c, ecc_directory_stats_v1_t *out, ecc_cache_stats_v1_t *cache)
{
  memset(out, 0, sizeof(*out));
  memset(cache, 0, sizeof(*cache));
  if (!c->has_dir)
    return ECC_OK;
  int rc = directory_need_region(c);
  struct dir_counters k;
  if (rc == ECC_OK && (rc = dir_get_counters(&c->dir, &k)) != ECC_OK)
    return log_fail(&c->log, directory_code(rc),
                    "stats: the directory's counters could not be read");
  if (rc != ECC_OK)
    return rc;
  *out = (ecc_directory_stats_v1_t){k.entries,   k.blocks_used,  k.blocks_free, k.largest_free_run,
                                    k.pins_live, k.reservations, k.dedup_hits,  k.lookups,
                                    k.hits,      k.misses,       k.evictions,   k.removals,
                                    k.pins,      k.reclaimed,    k.full};
  *cache = (ecc_cache_stats_v1_t){k.waits,         k.waits_ready,      k.waits_absent,
                                  k.wait_timeouts, k.encoder_us_saved, k.events,
                                  k.restarts};
  return ECC_OK;
}

/* ---- saves of reservations ------------------------------------------------ */

/* Where a batch's descriptors stood, to take back entries added after it. */
struct desc_mark {
  size_t count;
  uint64_t bytes, src_end, dst_end, last_len;
};

static struct desc_mark desc_mark_of(const struct desc_buf *b)
{
  struct desc_mark m = {b->count, b->bytes, b->src_end, b->dst_end, 0};
  if (b->count > 0)
    m.last_len = b->len[b->count - 1];
  return m;
}

static void desc_back_to(struct desc_buf *b, const struct desc_mark *m)
{
  b->count = m->count;
  b->bytes = m->bytes;
  b->src_end = m->src_end;
  b->dst_end = m->dst_end;
  if (m->count > 0)
    b->len[m->count - 1] = m->last_len;
}

/* The runs of an entry as descriptors between `linear` and its blocks. */
static void add_runs(struct conn *c, struct desc_buf *b, uint64_t linear,
                     const struct dir_entry_info *info, int to_region)
{
  uint64_t base = (uint64_t)(uintptr_t)c->region.blocks, bs = c->region.block_size;
  uint64_t left = info->nbytes, off = 0;
  struct desc_writer w;
  desc_writer_open(b, &w);
  for (uint32_t i = 0; i < info->n_runs && left > 0; i++) {
    uint64_t len = (uint64_t)info->runs[i].count * bs;
    len = len < left ? len : left;
    desc_write_run(&w, linear + off, base + (uint64_t)info->runs[i].first * bs, len, to_region);
    off += len;
    left -= len;
  }
  desc_writer_close(b, &w);
}

static int check_saved(struct conn *c, const ecc_save_reserved_v1_t *e, size_t idx)
{
  struct dir_ref ref;
  char what[48];
  snprintf(what, sizeof(what), "save_reserved: entry %zu", idx);
  int rc = directory_token_ref(c, what, e->token, TOKEN_RESERVATION, &ref);
  if (rc != ECC_OK)
    return rc;
  if (e->src == 0 || e->nbytes == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "save_reserved: entry %zu has %s", idx,
                    e->src == 0 ? "a NULL source" : "0 bytes");
  if (e->src > UINT64_MAX - e->nbytes)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "save_reserved: entry %zu: source 0x%" PRIx64 " + %" PRIu64
                    " bytes wraps around",
                    idx, e->src, e->nbytes);
  return ECC_OK;
}

/* Claims entry i's reservation for this process's copy and adds it to the
 * batch; on an error nothing of entry i is kept. */
static int add_saved(struct conn *c, struct transfer *t, const ecc_save_reserved_v1_t *e,
                     size_t idx)
{
  struct dir_ref ref;
  (void)token_read(e->token, TOKEN_RESERVATION, &ref); /* checked: check_saved */
  struct dir_entry_info info;
  char why[256] = "";
  int rc = dir_claim(&c->dir, ref, &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc),
                    "save_reserved: entry %zu (token 0x%" PRIx64 "): %s", idx, e->token, why);
  size_t klen = strlen(info.key) + 1;
  if (e->nbytes != info.nbytes)
    rc = log_fail(&c->log, ECC_ERR_RANGE,
                  "save_reserved: entry %zu (%s): %" PRIu64 " bytes, but %" PRIu64 " were reserved",
                  idx, info.key, e->nbytes, info.nbytes);
  else if (transfer_reserve_done(t, 1) != 0 || transfer_reserve_tokens(t, 1) != 0 ||
           transfer_reserve_keys(t, t->keys_len + klen) != 0)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "save_reserved: out of memory for entry %zu", idx);
  if (rc != ECC_OK) {
    dir_unclaim(&c->dir, ref);
    return rc;
  }
  add_runs(c, &t->view.desc, e->src, &info, 1);
  t->done[t->n_done] = (struct done_rec){t->keys_len, info.nbytes};
  t->tokens[t->n_done++] = e->token;
  memcpy(t->keys + t->keys_len, info.key, klen);
  t->keys_len += klen;
  return ECC_OK;
}

/* Every entry is claimed and added, or none: a refusal takes the batch back
 * to where it was and gives the claims up. */
static int save_reserved_locked(struct conn *c, const ecc_save_reserved_v1_t *e, size_t n)
{
  struct transfer *t = c->pending;
  int rc = directory_need_region(c); /* every call: each claim reads the directory */
  if (rc == ECC_OK && t == NULL && (t = transfer_get(&c->pool)) == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "save_reserved: out of memory for a transfer");
  if (rc == ECC_OK && desc_reserve(&t->view.desc, (uint64_t)n * DIR_MAX_RUNS) != 0)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "save_reserved: out of memory for descriptors");
  if (rc != ECC_OK) {
    if (t != NULL && c->pending == NULL)
      transfer_put(&c->pool, t);
    return rc;
  }
  struct desc_mark mark = desc_mark_of(&t->view.desc);
  size_t n_done = t->n_done, keys_len = t->keys_len;
  for (size_t i = 0; i < n && rc == ECC_OK; i++)
    rc = add_saved(c, t, &e[i], i);
  if (rc == ECC_OK) {
    c->pending = t;
    return ECC_OK;
  }
  for (size_t j = n_done; j < t->n_done; j++) {
    struct dir_ref ref;
    (void)token_read(t->tokens[j], TOKEN_RESERVATION, &ref);
    (void)dir_unclaim(&c->dir, ref);
  }
  desc_back_to(&t->view.desc, &mark);
  t->n_done = n_done;
  t->keys_len = keys_len;
  if (c->pending == NULL)
    transfer_put(&c->pool, t);
  return rc;
}

int conn_save_reserved(struct conn *c, const ecc_save_reserved_v1_t *e, size_t n)
{
  if (n == 0)
    return ECC_OK;
  int rc = directory_need_side(c, "save_reserved", ECC_DIR_SAVE);
  if (rc == ECC_OK && e == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "save_reserved: entries is NULL but n = %zu", n);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = check_saved(c, &e[i], i);
  if (rc != ECC_OK)
    return rc;
  if (!c->save_rank)
    return inflight_skip_saves(c, n);
  lock_mutex_lock(&c->step_lock);
  rc = save_reserved_locked(c, e, n);
  lock_mutex_unlock(&c->step_lock);
  return rc;
}

/* ---- loads of pinned entries ---------------------------------------------- */

/* Whether e's destination can take the entry: ECC_OK, or the error,
 * logged as `what`'s for entry idx. */
static int check_dst(struct conn *c, const char *what, size_t idx, const ecc_load_pinned_v1_t *e,
                     const struct dir_entry_info *info)
{
  if (e->dst == 0 || e->dst_capacity < info->nbytes)
    return log_fail(&c->log, e->dst == 0 ? ECC_ERR_INVALID : ECC_ERR_RANGE,
                    "%s: entry %zu (transfer %" PRIu64 ", %s): %s", what, idx, e->transfer_id,
                    info->key,
                    e->dst == 0 ? "NULL destination" : "destination smaller than the entry");
  if (e->dst > UINT64_MAX - info->nbytes)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "%s: entry %zu (transfer %" PRIu64 "): destination wraps around", what, idx,
                    e->transfer_id);
  return ECC_OK;
}

/* The records of a load_pinned or a load_typed call: one or the other. */
struct pinned_list {
  const char *what; /* "load_pinned" or "load_typed" */
  const ecc_load_pinned_v1_t *plain;
  const ecc_load_typed_v1_t *typed;
};

/* Record i as load_pinned's, and the type it declares (NULL: none). */
static ecc_load_pinned_v1_t pinned_at(const struct pinned_list *l, size_t i,
                                      const ecc_tensor_v1_t **type)
{
  *type = NULL;
  if (l->plain != NULL)
    return l->plain[i];
  const ecc_load_typed_v1_t *t = &l->typed[i];
  *type = &t->type;
  return (ecc_load_pinned_v1_t){t->transfer_id, t->token, t->dst, t->dst_capacity};
}

/* A typed entry must be of the declared type, an untyped one of its bytes. */
static int check_type(struct conn *c, size_t idx, const ecc_load_pinned_v1_t *e,
                      const ecc_tensor_v1_t *want, const struct dir_entry_info *info)
{
  char a[TENSOR_TEXT_MAX], b[TENSOR_TEXT_MAX], why[128] = "";
  uint64_t bytes = 0;
  if (!tensor_valid(want, &bytes, why, sizeof(why)) || tensor_untyped(want))
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load_typed: entry %zu (transfer %" PRIu64 "): the declared type %s is not "
                    "one: %s",
                    idx, e->transfer_id, tensor_format(want, a, sizeof(a)),
                    why[0] != '\0' ? why : "give a dtype and 1 to 4 dimensions");
  const ecc_tensor_v1_t *have = &info->meta.type;
  bool same = tensor_untyped(have) ? bytes == info->nbytes : tensor_equal(want, have);
  if (same)
    return ECC_OK;
  return log_fail(&c->log, ECC_ERR_RANGE,
                  "load_typed: entry %zu (transfer %" PRIu64 ", %s): declared %s (%" PRIu64
                  " bytes), but the entry is %s (%" PRIu64 " bytes)",
                  idx, e->transfer_id, info->key, tensor_format(want, a, sizeof(a)), bytes,
                  tensor_format(have, b, sizeof(b)), info->nbytes);
}

/* Entry i's pin is live, its destination holds the entry and its declared
 * type (if any) is the entry's: it is added to the transfer (nothing in the
 * directory changes). */
static int add_pinned(struct conn *c, struct transfer *t, const struct pinned_list *l, size_t idx)
{
  struct dir_ref ref;
  char what[80];
  const ecc_tensor_v1_t *type;
  ecc_load_pinned_v1_t rec = pinned_at(l, idx, &type);
  const ecc_load_pinned_v1_t *e = &rec;
  snprintf(what, sizeof(what), "%s: entry %zu (transfer %" PRIu64 ")", l->what, idx,
           e->transfer_id);
  int rc = directory_token_ref(c, what, e->token, TOKEN_PIN, &ref);
  if (rc != ECC_OK)
    return rc;
  struct dir_entry_info info;
  char why[256] = "";
  rc = dir_pinned(&c->dir, token_pin_ref(ref), &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "%s: %s", what, why);
  if (type != NULL && (rc = check_type(c, idx, e, type, &info)) != ECC_OK)
    return rc;
  if ((rc = check_dst(c, l->what, idx, e, &info)) != ECC_OK)
    return rc;
  add_runs(c, &t->view.desc, e->dst, &info, 0);
  t->done[t->n_done] = (struct done_rec){e->transfer_id, info.nbytes};
  t->tokens[t->n_done++] = e->token;
  return ECC_OK;
}

static int start_pinned(struct conn *c, struct transfer *t, const struct pinned_list *l, size_t n,
                        void *stream)
{
  int rc = ECC_OK;
  if (desc_reserve(&t->view.desc, (uint64_t)n * DIR_MAX_RUNS) != 0 ||
      transfer_reserve_done(t, n) != 0 || transfer_reserve_tokens(t, n) != 0)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "%s: out of memory for %zu entries", l->what, n);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = add_pinned(c, t, l, i);
  if (rc == ECC_OK)
    rc = inflight_room(c, ECC_DIR_LOAD);
  t->view.direction = ECC_DIR_LOAD;
  if (rc == ECC_OK)
    rc = inflight_start(c, t, stream);
  return rc;
}

static int load_listed(struct conn *c, const struct pinned_list *l, size_t n, void *stream)
{
  if (n == 0)
    return ECC_OK;
  int rc = directory_need_side(c, l->what, ECC_DIR_LOAD);
  if (rc == ECC_OK && l->plain == NULL && l->typed == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "%s: entries is NULL but n = %zu", l->what, n);
  if (rc != ECC_OK)
    return rc;
  lock_mutex_lock(&c->step_lock);
  rc = directory_need_region(c);
  struct transfer *t = rc == ECC_OK ? transfer_get(&c->pool) : NULL;
  if (rc == ECC_OK && t == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "%s: out of memory for a transfer", l->what);
  if (rc == ECC_OK)
    rc = start_pinned(c, t, l, n, stream);
  if (rc == ECC_OK)
    rc = inflight_queue_load(c, t, stream);
  else if (t != NULL)
    transfer_put(&c->pool, t);
  lock_mutex_unlock(&c->step_lock);
  return rc;
}

int conn_load_pinned(struct conn *c, const ecc_load_pinned_v1_t *e, size_t n, void *stream)
{
  struct pinned_list l = {.what = "load_pinned", .plain = e};
  return load_listed(c, &l, n, stream);
}

int conn_load_typed(struct conn *c, const ecc_load_typed_v1_t *e, size_t n, void *stream)
{
  struct pinned_list l = {.what = "load_typed", .typed = e};
  return load_listed(c, &l, n, stream);
}

/* ---- held loads ------------------------------------------------------------ */

/* Claims the reservation and adds its runs, to be read into e->dst. */
static int add_held(struct conn *c, struct transfer *t, const ecc_load_pinned_v1_t *e,
                    struct dir_ref ref)
{
  struct dir_entry_info info;
  char why[256] = "";
  int rc = dir_claim(&c->dir, ref, &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, directory_code(rc), "load (held, transfer %" PRIu64 "): %s",
                    e->transfer_id, why);
  rc = check_dst(c, "load (held)", 0, e, &info);
  if (rc == ECC_OK && (desc_reserve(&t->view.desc, DIR_MAX_RUNS) != 0 ||
                       transfer_reserve_done(t, 1) != 0 || transfer_reserve_tokens(t, 1) != 0))
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "load (held): out of memory");
  if (rc != ECC_OK) {
    dir_unclaim(&c->dir, ref);
    return rc;
  }
  add_runs(c, &t->view.desc, e->dst, &info, 0);
  t->done[t->n_done] = (struct done_rec){e->transfer_id, info.nbytes};
  t->tokens[t->n_done++] = e->token;
  t->settles_reservations = true;
  t->view.held = true;
  t->view.direction = ECC_DIR_LOAD;
  return ECC_OK;
}

int conn_load_held(struct conn *c, const ecc_load_pinned_v1_t *e, void *stream, uint32_t **hold)
{
  struct dir_ref ref;
  int rc = directory_token_ref(c, "load (held)", e->token, TOKEN_RESERVATION, &ref);
  if (rc != ECC_OK)
    return rc;
  lock_mutex_lock(&c->step_lock);
  rc = directory_need_region(c);
  struct transfer *t = rc == ECC_OK ? transfer_get(&c->pool) : NULL;
  if (rc == ECC_OK && t == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "load (held): out of memory for a transfer");
  bool claimed = false;
  if (rc == ECC_OK)
    claimed = (rc = add_held(c, t, e, ref)) == ECC_OK;
  if (rc == ECC_OK)
    rc = inflight_room(c, ECC_DIR_LOAD);
  if (rc == ECC_OK)
    rc = inflight_start(c, t, stream);
  if (rc == ECC_OK) {
    *hold = t->view.hold; /* read before poll may see (and recycle) t */
    rc = inflight_queue_load(c, t, stream);
  } else if (t != NULL) {
    if (claimed)
      dir_unclaim(&c->dir, ref);
    transfer_put(&c->pool, t);
  }
  lock_mutex_unlock(&c->step_lock);
  return rc;
}
