/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_calls.c - the directory functions of ABI 1.1 on a connector: tokens
 * to and from directory refs, reserve and lookup, saves of reservations and
 * loads of pinned entries batched with the step's other copies, and what a
 * polled completion settles (publish, free, release a rank).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "core/internal.h"

/* ---- tokens -------------------------------------------------------------- */

/* A token is the ref's generation above its slot + 1, so that it is never
 * 0 and a stale one never names the next entry of its slot; bit 31 of the
 * low half tells a pin's from a reservation's, so that neither is taken for
 * the other (slots stay below 2^24, generations keep all 32 bits). */
enum token_kind { TOKEN_RESERVATION, TOKEN_PIN };

#define TOKEN_PIN_BIT 0x80000000u

static const char *const token_kind_text[] = {"a reservation (from reserve)",
                                              "a pin (from lookup)"};

static uint64_t token_of(enum token_kind kind, uint32_t slot, uint32_t gen)
{
  uint32_t low = (slot + 1) | (kind == TOKEN_PIN ? TOKEN_PIN_BIT : 0u);
  return (uint64_t)gen << 32 | low;
}

/* What token_read found in a token. */
enum token_verdict { TOKEN_NAMES, TOKEN_NOTHING, TOKEN_OTHER_KIND };

static enum token_verdict token_read(uint64_t token, enum token_kind kind, struct dir_ref *ref)
{
  uint32_t low = (uint32_t)token;
  uint32_t slot1 = low & ~TOKEN_PIN_BIT;
  ref->slot = slot1 - 1;
  ref->gen = (uint32_t)(token >> 32);
  if (slot1 == 0)
    return TOKEN_NOTHING;
  return ((low & TOKEN_PIN_BIT) != 0) == (kind == TOKEN_PIN) ? TOKEN_NAMES : TOKEN_OTHER_KIND;
}

/* token_read for `what`: ECC_OK, or ECC_ERR_CLOSED logged naming the kind
 * the token is and the one expected. */
static int token_ref(struct conn *c, const char *what, uint64_t token, enum token_kind kind,
                     struct dir_ref *ref)
{
  enum token_verdict v = token_read(token, kind, ref);
  if (v == TOKEN_NAMES)
    return ECC_OK;
  if (v == TOKEN_NOTHING)
    return log_fail(&c->log, ECC_ERR_CLOSED, "%s: token 0x%" PRIx64 " names nothing: %s is wanted",
                    what, token, token_kind_text[kind]);
  return log_fail(&c->log, ECC_ERR_CLOSED, "%s: token 0x%" PRIx64 " is %s, not %s", what, token,
                  token_kind_text[kind == TOKEN_PIN ? TOKEN_RESERVATION : TOKEN_PIN],
                  token_kind_text[kind]);
}

static struct dir_pin_ref pin_of(struct dir_ref r)
{
  return (struct dir_pin_ref){r.slot, r.gen};
}

static void entry_out(const struct dir_entry_info *info, int32_t state, uint64_t token,
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

/* ---- checks every call shares ------------------------------------------- */

static int need_directory(struct conn *c, const char *what)
{
  if (c->has_dir)
    return ECC_OK;
  return log_fail(&c->log, ECC_ERR_UNSUPPORTED,
                  "%s: region %s has no directory (directory.enabled = false)", what,
                  c->region.path);
}

/* The code a directory call answers for the directory's (or the region
 * check's) error: an operating-system failure there (a lock whose memory
 * was overwritten, an fstat that fails) leaves a region nobody can trust,
 * which the ABI calls ECC_ERR_REGION. */
static int dir_code(int rc)
{
  return rc == ECC_ERR_SYSTEM ? ECC_ERR_REGION : rc;
}

/* The directory's pages are read by the call: a region file cut short
 * under the mapping would raise SIGBUS there, so every call that touches
 * them checks the file first (one fstat), after its arguments. */
static int need_region(struct conn *c)
{
  return dir_code(region_check(&c->region, &c->log));
}

bool conn_dir_reachable(const struct conn *c)
{
  struct stat st;
  uint64_t end = (uint64_t)(c->region.dir - c->region.map) + c->region.dir_bytes;
  return c->has_dir && fstat(c->region.fd, &st) == 0 && (uint64_t)st.st_size >= end;
}

/* A directory call of one direction's side: the directory, and a role that
 * moves that direction. */
static int need_side(struct conn *c, const char *what, int dir)
{
  int rc = need_directory(c, what);
  int other = dir == ECC_DIR_SAVE ? ROLE_CONSUMER : ROLE_PRODUCER;
  if (rc == ECC_OK && c->cfg.role == other)
    rc = log_fail(&c->log, ECC_ERR_ROLE, "%s: this connector is a %s (connector.role)", what,
                  config_role_name(other));
  return rc;
}

static int check_key(struct conn *c, const char *what, size_t idx, const char *key)
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

int conn_reserve(struct conn *c, const char *key, uint64_t nbytes, ecc_entry_v1_t *out)
{
  int rc = need_side(c, "reserve", ECC_DIR_SAVE);
  if (rc == ECC_OK && out == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "reserve: out is NULL");
  if (rc == ECC_OK)
    rc = check_key(c, "reserve", 0, key);
  if (rc == ECC_OK && nbytes == 0)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "reserve: %s: 0 bytes", key);
  if (rc == ECC_OK)
    rc = need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  int outcome = DIR_RESERVED;
  struct dir_entry_info info;
  rc = dir_reserve(&c->dir, key, nbytes, &outcome, &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail_at(&c->log, rc == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR, dir_code(rc),
                       "reserve %s (%" PRIu64 " bytes): %s", key, nbytes, why);
  if (outcome == DIR_RESERVED)
    entry_out(&info, ECC_ENTRY_RESERVED, token_of(TOKEN_RESERVATION, info.ref.slot, info.ref.gen),
              out);
  else
    entry_out(&info, outcome == DIR_FOUND_READY ? ECC_ENTRY_READY : ECC_ENTRY_WRITING, 0, out);
  return ECC_OK;
}

/* A reservation ended by token: published (its blocks written elsewhere) or
 * given up. */
static int end_reservation(struct conn *c, uint64_t token, const char *what,
                           int (*end)(struct dir *, struct dir_ref, char *, size_t))
{
  int rc = need_directory(c, what);
  if (rc != ECC_OK)
    return rc;
  struct dir_ref ref;
  rc = token_ref(c, what, token, TOKEN_RESERVATION, &ref);
  if (rc == ECC_OK)
    rc = need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = end(&c->dir, ref, why, sizeof(why));
  if (rc == ECC_ERR_INVALID) /* published: no longer a reservation */
    rc = ECC_ERR_CLOSED;
  if (rc != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "%s: token 0x%" PRIx64 ": %s", what, token, why);
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
    (void)dir_unpin_ranks(&c->dir, pin_of(ref), ranks, NULL, 0);
  }
}

static int lookup_all(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                      ecc_entry_v1_t *out)
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
      return log_fail_at(&c->log, rc == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR, dir_code(rc),
                         "lookup: %s", why);
    }
    for (size_t i = 0; i < k; i++) {
      if (found[i])
        entry_out(&info[i], ECC_ENTRY_READY, token_of(TOKEN_PIN, pins[i].slot, pins[i].gen),
                  &out[done + i]);
      else
        memset(&out[done + i], 0, sizeof(out[done + i])); /* ECC_ENTRY_ABSENT is 0 */
    }
    done += k;
  }
  return ECC_OK;
}

static int lookup_checked(struct conn *c, int rc, const char *const *keys, size_t n, uint32_t ranks,
                          ecc_entry_v1_t *out)
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
    rc = check_key(c, "lookup", i, keys[i]);
  if (rc == ECC_OK && n > 0)
    rc = need_region(c);
  if (rc != ECC_OK || n == 0)
    return rc;
  return lookup_all(c, keys, n, ranks, out);
}

int conn_lookup(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_v1_t *out)
{
  return lookup_checked(c, need_side(c, "lookup", ECC_DIR_LOAD), keys, n, ranks, out);
}

int conn_lookup_for_peer(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                         ecc_entry_v1_t *out)
{
  return lookup_checked(c, need_directory(c, "lookup"), keys, n, ranks, out);
}

int conn_unpin_ranks(struct conn *c, uint64_t token, uint32_t ranks)
{
  int rc = need_directory(c, "unpin");
  struct dir_ref ref;
  if (rc == ECC_OK)
    rc = token_ref(c, "unpin", token, TOKEN_PIN, &ref);
  if (rc == ECC_OK)
    rc = need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = dir_unpin_ranks(&c->dir, pin_of(ref), ranks, why, sizeof(why));
  if (rc == ECC_OK)
    return ECC_OK;
  if (ranks == 1)
    return log_fail(&c->log, dir_code(rc), "unpin: token 0x%" PRIx64 ": %s", token, why);
  return log_fail(&c->log, dir_code(rc), "unpin of %" PRIu32 " ranks: token 0x%" PRIx64 ": %s",
                  ranks, token, why);
}

int conn_unpin(struct conn *c, uint64_t token)
{
  return conn_unpin_ranks(c, token, 1);
}

int conn_remove(struct conn *c, const char *key)
{
  int rc = need_directory(c, "remove");
  if (rc == ECC_OK)
    rc = check_key(c, "remove", 0, key);
  if (rc == ECC_OK)
    rc = need_region(c);
  if (rc != ECC_OK)
    return rc;
  char why[256] = "";
  rc = dir_remove(&c->dir, key, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "remove %s: %s", key, why);
  return ECC_OK;
}

/* ---- list and counters -------------------------------------------------- */

struct list_walk {
  uint64_t from; /* first slot wanted */
  ecc_listed_v1_t *out;
  size_t cap, n;
  uint64_t next; /* slot after the last one taken */
  uint64_t now_ns;
};

static void list_one(void *user, const struct dir_entry_info *e)
{
  struct list_walk *w = user;
  if (e->ref.slot < w->from || w->n == w->cap)
    return;
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

int conn_list(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap, size_t *n_out)
{
  if (n_out != NULL)
    *n_out = 0;
  int rc = need_directory(c, "list");
  if (rc == ECC_OK && (cursor == NULL || n_out == NULL || (out == NULL && cap > 0)))
    rc = log_fail(&c->log, ECC_ERR_INVALID, "list: %s is NULL",
                  cursor == NULL  ? "cursor"
                  : n_out == NULL ? "n_out"
                                  : "out");
  if (rc == ECC_OK)
    rc = need_region(c);
  if (rc != ECC_OK)
    return rc;
  struct list_walk w = {*cursor, out, cap, 0, *cursor, ecc_now_ns()};
  rc = dir_list(&c->dir, list_one, &w);
  if (rc != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "list: the directory could not be read");
  *cursor = w.next;
  *n_out = w.n;
  return ECC_OK;
}

int conn_dir_stats(struct conn *c, ecc_directory_stats_v1_t *out)
{
  memset(out, 0, sizeof(*out));
  if (!c->has_dir)
    return ECC_OK;
  int rc = need_region(c);
  struct dir_counters k;
  if (rc == ECC_OK && (rc = dir_get_counters(&c->dir, &k)) != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "stats: the directory's counters could not be read");
  if (rc != ECC_OK)
    return rc;
  *out = (ecc_directory_stats_v1_t){k.entries,   k.blocks_used,  k.blocks_free, k.largest_free_run,
                                    k.pins_live, k.reservations, k.dedup_hits,  k.lookups,
                                    k.hits,      k.misses,       k.evictions,   k.removals,
                                    k.pins,      k.reclaimed,    k.full};
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
  int rc = token_ref(c, what, e->token, TOKEN_RESERVATION, &ref);
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
    return log_fail(&c->log, dir_code(rc), "save_reserved: entry %zu (token 0x%" PRIx64 "): %s",
                    idx, e->token, why);
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
  int rc = need_region(c); /* every call: each claim reads the directory */
  if (rc == ECC_OK && t == NULL && (t = transfer_get(c)) == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "save_reserved: out of memory for a transfer");
  if (rc == ECC_OK && desc_reserve(&t->view.desc, (uint64_t)n * DIR_MAX_RUNS) != 0)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "save_reserved: out of memory for descriptors");
  if (rc != ECC_OK) {
    if (t != NULL && c->pending == NULL)
      transfer_put(c, t);
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
    transfer_put(c, t);
  return rc;
}

int conn_save_reserved(struct conn *c, const ecc_save_reserved_v1_t *e, size_t n)
{
  if (n == 0)
    return ECC_OK;
  int rc = need_side(c, "save_reserved", ECC_DIR_SAVE);
  if (rc == ECC_OK && e == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "save_reserved: entries is NULL but n = %zu", n);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = check_saved(c, &e[i], i);
  if (rc != ECC_OK)
    return rc;
  if (!c->save_rank)
    return conn_skip_saves(c, n);
  conn_lock(c, &c->step_lock);
  rc = save_reserved_locked(c, e, n);
  conn_unlock(c, &c->step_lock);
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

/* Entry i's pin is live and its destination holds the entry: it is added
 * to the transfer (nothing in the directory changes). */
static int add_pinned(struct conn *c, struct transfer *t, const ecc_load_pinned_v1_t *e, size_t idx)
{
  struct dir_ref ref;
  char what[80];
  snprintf(what, sizeof(what), "load_pinned: entry %zu (transfer %" PRIu64 ")", idx,
           e->transfer_id);
  int rc = token_ref(c, what, e->token, TOKEN_PIN, &ref);
  if (rc != ECC_OK)
    return rc;
  struct dir_entry_info info;
  char why[256] = "";
  rc = dir_pinned(&c->dir, pin_of(ref), &info, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "%s: %s", what, why);
  if ((rc = check_dst(c, "load_pinned", idx, e, &info)) != ECC_OK)
    return rc;
  add_runs(c, &t->view.desc, e->dst, &info, 0);
  t->done[t->n_done] = (struct done_rec){e->transfer_id, info.nbytes};
  t->tokens[t->n_done++] = e->token;
  return ECC_OK;
}

static int start_pinned(struct conn *c, struct transfer *t, const ecc_load_pinned_v1_t *e, size_t n,
                        void *stream)
{
  int rc = ECC_OK;
  if (desc_reserve(&t->view.desc, (uint64_t)n * DIR_MAX_RUNS) != 0 ||
      transfer_reserve_done(t, n) != 0 || transfer_reserve_tokens(t, n) != 0)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "load_pinned: out of memory for %zu entries", n);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = add_pinned(c, t, &e[i], i);
  if (rc == ECC_OK)
    rc = conn_check_room(c, ECC_DIR_LOAD);
  t->view.direction = ECC_DIR_LOAD;
  if (rc == ECC_OK)
    rc = conn_engine_submit(c, t, stream);
  return rc;
}

int conn_load_pinned(struct conn *c, const ecc_load_pinned_v1_t *e, size_t n, void *stream)
{
  if (n == 0)
    return ECC_OK;
  int rc = need_side(c, "load_pinned", ECC_DIR_LOAD);
  if (rc == ECC_OK && e == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "load_pinned: entries is NULL but n = %zu", n);
  if (rc != ECC_OK)
    return rc;
  conn_lock(c, &c->step_lock);
  rc = need_region(c);
  struct transfer *t = rc == ECC_OK ? transfer_get(c) : NULL;
  if (rc == ECC_OK && t == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "load_pinned: out of memory for a transfer");
  if (rc == ECC_OK)
    rc = start_pinned(c, t, e, n, stream);
  if (rc == ECC_OK)
    rc = conn_queue_load(c, t, stream);
  else if (t != NULL)
    transfer_put(c, t);
  conn_unlock(c, &c->step_lock);
  return rc;
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
    return log_fail(&c->log, dir_code(rc), "load (held, transfer %" PRIu64 "): %s", e->transfer_id,
                    why);
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
  int rc = token_ref(c, "load (held)", e->token, TOKEN_RESERVATION, &ref);
  if (rc != ECC_OK)
    return rc;
  conn_lock(c, &c->step_lock);
  rc = need_region(c);
  struct transfer *t = rc == ECC_OK ? transfer_get(c) : NULL;
  if (rc == ECC_OK && t == NULL)
    rc = log_fail(&c->log, ECC_ERR_NOMEM, "load (held): out of memory for a transfer");
  bool claimed = false;
  if (rc == ECC_OK)
    claimed = (rc = add_held(c, t, e, ref)) == ECC_OK;
  if (rc == ECC_OK)
    rc = conn_check_room(c, ECC_DIR_LOAD);
  if (rc == ECC_OK)
    rc = conn_engine_submit(c, t, stream);
  if (rc == ECC_OK) {
    *hold = t->view.hold; /* read before poll may see (and recycle) t */
    rc = conn_queue_load(c, t, stream);
  } else if (t != NULL) {
    if (claimed)
      dir_unclaim(&c->dir, ref);
    transfer_put(c, t);
  }
  conn_unlock(c, &c->step_lock);
  return rc;
}

/* ---- what a polled completion settles ------------------------------------- */

int conn_dir_settle(struct conn *c, int direction, uint64_t token, int status)
{
  struct dir_ref ref;
  enum token_kind kind = direction == ECC_DIR_SAVE ? TOKEN_RESERVATION : TOKEN_PIN;
  int rc = ECC_ERR_CLOSED; /* a token of the other kind settles nothing */
  if (token_read(token, kind, &ref) == TOKEN_NAMES)
    rc = kind == TOKEN_RESERVATION ? dir_settle(&c->dir, ref, status == ECC_OK, NULL, 0)
                                   : dir_unpin(&c->dir, pin_of(ref), NULL, 0);
  /* A reservation or pin reclaimed while its copy ran (its deadline passed)
   * leaves bytes nobody may trust: the copy is not reported as a success. */
  return status == ECC_OK && rc != ECC_OK ? ECC_ERR_CLOSED : status;
}

/* ---- saves and loads by block ids on a region with a directory ----------- */

/* A load's blocks must lie in pinned entries. */
int conn_dir_load_blocks(struct conn *c, size_t idx, const uint32_t *ids, uint32_t n)
{
  uint32_t bad = 0;
  int rc = dir_blocks_held(&c->dir, ids, n, true, &bad);
  if (rc == ECC_OK)
    return ECC_OK;
  if (rc != ECC_ERR_RANGE)
    return log_fail(&c->log, dir_code(rc), "load: entry %zu: the directory could not be read", idx);
  return log_fail(&c->log, ECC_ERR_RANGE,
                  "load: entry %zu: block %" PRIu32 " is not in a pinned entry; on a region with a "
                  "directory only those blocks may be named",
                  idx, bad);
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
    conn_dir_unclaim(c, t, from);
    size_t idx;
    uint32_t pos;
    locate(e, w->res[i].at, &idx, &pos);
    if (rc == ECC_ERR_CLOSED) /* ended between the walk and the claim */
      return log_fail(&c->log, ECC_ERR_RANGE,
                      "save: entry %zu: block %" PRIu32 " is not in a live reservation now (%s)",
                      idx, e[idx].block_ids[pos], why);
    return log_fail(&c->log, dir_code(rc), "save: entry %zu: block %" PRIu32 ": %s%s", idx,
                    e[idx].block_ids[pos], why,
                    rc == ECC_ERR_BUSY ? " (a copy in flight writes it: poll first)" : "");
  }
  return ECC_OK;
}

int conn_dir_claim_saves(struct conn *c, struct transfer *t, const ecc_save_entry_v1_t *e, size_t n,
                         uint64_t blocks)
{
  int rc = need_region(c); /* every call, not once per batch: the walk reads the directory */
  if (rc == ECC_OK)
    rc = named_room(c, blocks);
  if (rc != ECC_OK)
    return rc;
  struct save_walk w = {.blocks = c->named, .res = c->named_res, .bad_at = UINT64_MAX};
  w.n = gather_blocks(c, e, n);
  w.self = c->dir.self;
  rc = dir_list(&c->dir, save_walk_one, &w);
  if (rc != ECC_OK)
    return log_fail(&c->log, dir_code(rc), "save: the directory could not be read");
  rc = judge_walk(c, &w, e);
  if (rc == ECC_OK)
    rc = claim_found(c, t, &w, e);
  return rc;
}

void conn_dir_unclaim(struct conn *c, struct transfer *t, size_t from)
{
  for (size_t i = from; i < t->n_claims; i++)
    (void)dir_unclaim(&c->dir, t->claims[i]);
  t->n_claims = from;
}
