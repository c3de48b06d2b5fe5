/*
 * connector.c - the connector's step logic: request checking, batching of a
 * step's saves and loads into one transfer each, the in-flight FIFOs and the
 * exactly-once completion reports. Copies themselves belong to the engine.
 */
#include "connector.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every connector lock is taken through these, so that nothing is logged to
 * the host while one is held (see log_hold). */
static void lock(pthread_mutex_t *m)
{
  log_hold();
  pthread_mutex_lock(m);
}

static void unlock(pthread_mutex_t *m)
{
  pthread_mutex_unlock(m);
  log_release();
}

/* ---- transfers: pooled, with their descriptor and completion storage ---- */

static struct transfer *transfer_get(struct conn *c)
{
  lock(&c->done_lock);
  struct transfer *t = c->free_list;
  if (t != NULL)
    c->free_list = t->next;
  unlock(&c->done_lock);
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
  t->finished = 0;
  t->status = ECC_OK;
  t->elapsed_ns = 0;
  desc_clear(&t->view.desc);
  return t;
}

/* Called with done_lock held. */
static void transfer_put_locked(struct conn *c, struct transfer *t)
{
  t->next = c->free_list;
  c->free_list = t;
}

static void transfer_put(struct conn *c, struct transfer *t)
{
  lock(&c->done_lock);
  transfer_put_locked(c, t);
  unlock(&c->done_lock);
}

static void transfer_free(struct transfer *t)
{
  desc_free(&t->view.desc);
  free(t->done);
  free(t->keys);
  free(t);
}

/* Room for `more` completion records. */
static int reserve_done(struct transfer *t, size_t more)
{
  if (t->n_done + more <= t->cap_done)
    return 0;
  size_t cap = t->cap_done < 16 ? 16 : t->cap_done;
  while (cap < t->n_done + more)
    cap *= 2;
  struct done_rec *p = realloc(t->done, cap * sizeof(*p));
  if (p == NULL)
    return -1;
  t->done = p;
  t->cap_done = cap;
  return 0;
}

/* Room for keys up to `need` bytes in all. Records hold offsets, not
 * pointers, so the keys may move. */
static int reserve_keys(struct transfer *t, size_t need)
{
  if (need <= t->keys_cap)
    return 0;
  size_t cap = t->keys_cap < 1024 ? 1024 : t->keys_cap;
  while (cap < need)
    cap *= 2;
  char *p = realloc(t->keys, cap);
  if (p == NULL)
    return -1;
  t->keys = p;
  t->keys_cap = cap;
  return 0;
}

static void fifo_push(struct fifo *f, struct transfer *t)
{
  t->next = NULL;
  if (f->tail != NULL)
    f->tail->next = t;
  else
    f->head = t;
  f->tail = t;
  f->count++;
}

static struct transfer *fifo_pop(struct fifo *f)
{
  struct transfer *t = f->head;
  f->head = t->next;
  if (f->head == NULL)
    f->tail = NULL;
  f->count--;
  return t;
}

/* ---- checks shared by save and load ---- */

/* Block ids in range, and their span (n_ids x block_size) within 64 bits,
 * which the byte counts below and desc_write_entry rely on. */
static int check_blocks(struct conn *c, const char *what, size_t idx,
                        const uint32_t *ids, uint32_t n_ids)
{
  if (ids == NULL || n_ids == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: entry %zu has no block ids", what, idx);
  uint64_t span;
  if (__builtin_mul_overflow((uint64_t)n_ids, c->region.block_size, &span))
    return log_fail(&c->log, ECC_ERR_RANGE,
                    "%s: entry %zu: %" PRIu32 " blocks of %" PRIu64 " bytes exceed 2^64 bytes",
                    what, idx, n_ids, c->region.block_size);
  /* The largest id first, without a branch per block; the culprit is
   * looked for only when there is one. */
  uint32_t top = 0;
  for (uint32_t i = 0; i < n_ids; i++)
    top = ids[i] > top ? ids[i] : top;
  uint64_t limit = c->region.num_blocks;
  if (top < limit)
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
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu: key longer than %d bytes",
                    idx, ECC_KEY_MAX);
  if (e->src == 0)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entry %zu (%s) has a NULL source", idx, e->key);
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
static int check_load_entry(struct conn *c, const ecc_load_entry_v1_t *e, size_t idx,
                            uint64_t *descs)
{
  if (e->dst == 0)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 ") has a NULL destination",
                    idx, e->transfer_id);
  if (e->dst_capacity == 0)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 ") has a destination capacity of 0",
                    idx, e->transfer_id);
  int rc = check_blocks(c, "load", idx, e->block_ids, e->n_blocks);
  if (rc != ECC_OK)
    return rc;
  if (e->dst > UINT64_MAX - load_bytes(c, e))
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "load: entry %zu (transfer %" PRIu64 "): destination 0x%" PRIx64
                    " wraps around", idx, e->transfer_id, e->dst);
  *descs += e->n_blocks;
  return ECC_OK;
}

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
  if (desc_reserve(&t->view.desc, descs) != 0 || reserve_done(t, n) != 0 ||
      reserve_keys(t, t->keys_len + key_bytes) != 0)
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
  t->n_done += n;
  t->keys_len = keys_len;
  return ECC_OK;
}

static int save_locked(struct conn *c, const ecc_save_entry_v1_t *e, size_t n, uint64_t descs,
                       size_t key_bytes)
{
  struct transfer *t = c->pending;
  /* Once per batch, not per entry: a step's first save starts it. */
  int rc = t == NULL ? region_check(&c->region, &c->log) : ECC_OK;
  if (rc != ECC_OK)
    return rc;
  if (t == NULL && (t = transfer_get(c)) == NULL)
    return log_fail(&c->log, ECC_ERR_NOMEM, "save: out of memory for a transfer");
  rc = add_saves(c, t, e, n, descs, key_bytes);
  if (rc == ECC_OK)
    c->pending = t;
  else if (c->pending == NULL)
    transfer_put(c, t);
  return rc;
}

int conn_save(struct conn *c, const ecc_save_entry_v1_t *e, size_t n)
{
  if (n == 0)
    return ECC_OK;
  if (e == NULL)
    return log_fail(&c->log, ECC_ERR_INVALID, "save: entries is NULL but n = %zu", n);
  if (c->cfg.role == ROLE_CONSUMER)
    return log_fail(&c->log, ECC_ERR_ROLE, "save: this connector is a consumer (connector.role)");
  uint64_t descs;
  size_t key_bytes;
  int rc = check_saves(c, e, n, &descs, &key_bytes);
  if (rc != ECC_OK)
    return rc;
  if (!c->save_rank) {
    lock(&c->done_lock);
    c->stats.saves_skipped += n;
    unlock(&c->done_lock);
    return ECC_OK;
  }
  lock(&c->step_lock);
  rc = save_locked(c, e, n, descs, key_bytes);
  unlock(&c->step_lock);
  return rc;
}

/* Whether another transfer may go in flight in `f` (done_lock held). */
static int has_room(struct conn *c, const struct fifo *f)
{
  return f->count < c->cfg.max_inflight;
}

static int flush_locked(struct conn *c, void *stream)
{
  struct transfer *t = c->pending;
  if (t == NULL)
    return ECC_OK;
  int rc = region_check(&c->region, &c->log);
  if (rc != ECC_OK)
    return rc;
  lock(&c->done_lock);
  int room = has_room(c, &c->saves);
  unlock(&c->done_lock);
  if (!room)
    return log_fail_at(&c->log, ECC_LOG_DEBUG, ECC_ERR_BUSY,
                    "flush: %u save transfers are in flight (connector.max_inflight); poll first",
                    c->cfg.max_inflight);
  t->view.direction = ECC_DIR_SAVE;
  rc = c->engine.ops->submit(&c->engine, &t->view, stream);
  if (rc != ECC_OK) {
    if (rc == ECC_ERR_INVALID)
      return log_fail(&c->log, rc, "flush: the %s engine takes no compute stream; pass NULL",
                      c->engine.ops->name);
    return log_fail(&c->log, rc, "flush: the %s engine could not start the copy",
                    c->engine.ops->name);
  }
  t->batch = ++c->save_batches;
  c->pending = NULL;
  lock(&c->done_lock);
  fifo_push(&c->saves, t);
  unlock(&c->done_lock);
  return ECC_OK;
}

int conn_flush(struct conn *c, void *stream)
{
  lock(&c->step_lock);
  int rc = flush_locked(c, stream);
  unlock(&c->step_lock);
  return rc;
}

/* ---- load ---- */

/* Stable LSD radix sort of keys by their high 32 bits, a byte per pass,
 * skipping the bytes every key shares (one pass over the keys finds them:
 * block ids rarely use all 32 bits). Returns keys or tmp, whichever holds
 * the result. A step may load thousands of entries, and a comparison sort
 * of them costs more than building their descriptors. */
static uint64_t *radix_sort_high32(uint64_t *keys, uint64_t *tmp, size_t n)
{
  uint64_t all_and = ~0ull, all_or = 0;
  for (size_t i = 0; i < n; i++) {
    all_and &= keys[i];
    all_or |= keys[i];
  }
  uint64_t varying = all_and ^ all_or;
  for (unsigned shift = 32; shift < 64; shift += 8) {
    if (((varying >> shift) & 0xff) == 0)
      continue;
    size_t pos[256] = {0};
    for (size_t i = 0; i < n; i++)
      pos[(keys[i] >> shift) & 0xff]++;
    size_t sum = 0;
    for (unsigned v = 0; v < 256; v++) {
      size_t count = pos[v];
      pos[v] = sum;
      sum += count;
    }
    for (size_t i = 0; i < n; i++)
      tmp[pos[(keys[i] >> shift) & 0xff]++] = keys[i];
    uint64_t *swap = keys;
    keys = tmp;
    tmp = swap;
  }
  return keys;
}

/* What the checking pass learnt about a call's loads. */
struct load_plan {
  uint64_t descs; /* descriptors at most: one per block listed */
  int sort;       /* whether the entries must be sorted by first block */
};

/* One pass over the entries in the host's order: each is checked, and gets
 * its completion record and its sort key (first block << 32 | index, so
 * equal first blocks keep the host's order) in c->order. The sort is not
 * needed when the blocks already ascend, nor when the destinations do
 * without overlap: two entries can then merge only if one's destination
 * ends where the next's begins, and those are neighbours in the host's
 * order already. Records and keys are scratch until the transfer is
 * queued, so a rejected call still changes nothing. */
static int plan_loads(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                      struct load_plan *plan)
{
  int blocks_ascend = 1, dsts_ascend = 1;
  uint64_t prev_end = 0, prev_key = 0;
  struct done_rec *rec = t->done; /* the transfer is new: no records yet */
  uint64_t *keys = c->order;
  plan->descs = 0;
  for (size_t i = 0; i < n; i++) {
    int rc = check_load_entry(c, &e[i], i, &plan->descs);
    if (rc != ECC_OK)
      return rc;
    uint64_t bytes = load_bytes(c, &e[i]);
    rec[i].id = e[i].transfer_id;
    rec[i].nbytes = bytes;
    uint64_t key = ((uint64_t)e[i].block_ids[0] << 32) | (uint64_t)i;
    keys[i] = key;
    if (i > 0 && key < prev_key)
      blocks_ascend = 0;
    if (i > 0 && e[i].dst < prev_end)
      dsts_ascend = 0;
    prev_key = key;
    prev_end = e[i].dst + bytes; /* checked: does not wrap */
  }
  plan->sort = !blocks_ascend && !dsts_ascend;
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

/* Descriptors of a step's loads in order of first block, so that entries
 * next to each other in the region and at their destinations coalesce. */
static int build_load(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                      const struct load_plan *plan)
{
  if (desc_reserve(&t->view.desc, plan->descs) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for %" PRIu64 " descriptors",
                    plan->descs);
  uint64_t base = (uint64_t)(uintptr_t)c->region.blocks, bs = c->region.block_size;
  const struct done_rec *rec = t->done;
  struct desc_writer w;
  desc_writer_open(&t->view.desc, &w);
  if (plan->sort) {
    const uint64_t *sorted = radix_sort_high32(c->order, c->order + c->order_cap, n);
    for (size_t k = 0; k < n; k++) {
      uint32_t i = (uint32_t)sorted[k];
      desc_write_entry(&w, e[i].dst, base, bs, e[i].block_ids, rec[i].nbytes, 0);
    }
  } else {
    for (size_t i = 0; i < n; i++)
      desc_write_entry(&w, e[i].dst, base, bs, e[i].block_ids, rec[i].nbytes, 0);
  }
  desc_writer_close(&t->view.desc, &w);
  t->n_done = n;
  t->view.direction = ECC_DIR_LOAD;
  return ECC_OK;
}

/* Checked entries first, then the in-flight bound, then the copy. */
static int start_load(struct conn *c, struct transfer *t, const ecc_load_entry_v1_t *e, size_t n,
                      void *stream)
{
  if (reserve_done(t, n) != 0 || reserve_order(c, n) != 0)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for %zu entries", n);
  struct load_plan plan;
  int rc = plan_loads(c, t, e, n, &plan);
  if (rc != ECC_OK)
    return rc;
  lock(&c->done_lock);
  int room = has_room(c, &c->loads);
  unlock(&c->done_lock);
  if (!room)
    return log_fail_at(&c->log, ECC_LOG_DEBUG, ECC_ERR_BUSY,
                    "load: %u load transfers are in flight (connector.max_inflight); poll first",
                    c->cfg.max_inflight);
  rc = build_load(c, t, e, n, &plan);
  if (rc != ECC_OK)
    return rc;
  rc = c->engine.ops->submit(&c->engine, &t->view, stream);
  if (rc == ECC_ERR_INVALID)
    return log_fail(&c->log, rc, "load: the %s engine takes no compute stream; pass NULL",
                    c->engine.ops->name);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "load: the %s engine could not start the copy",
                    c->engine.ops->name);
  return ECC_OK;
}

static int load_locked(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream)
{
  int rc = region_check(&c->region, &c->log);
  if (rc != ECC_OK)
    return rc;
  struct transfer *t = transfer_get(c);
  if (t == NULL)
    return log_fail(&c->log, ECC_ERR_NOMEM, "load: out of memory for a transfer");
  rc = start_load(c, t, e, n, stream);
  if (rc != ECC_OK) {
    transfer_put(c, t);
    return rc;
  }
  /* Order the compute stream before the transfer is visible to poll (which
   * may recycle it at once). The copy is running either way: from here on
   * the transfer is reported whatever happens, so its completion is never
   * lost. */
  rc = c->engine.ops->order_after(&c->engine, &t->view, stream);
  t->batch = ++c->load_batches;
  lock(&c->done_lock);
  fifo_push(&c->loads, t);
  unlock(&c->done_lock);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "load: could not order the compute stream after the copy; "
                    "poll for transfer completion before reading");
  return ECC_OK;
}

/* The entries are checked under the step lock, in the same pass that
 * prepares them: a step of thousands of entries pays for one walk, not two. */
int conn_load(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream)
{
  if (n == 0)
    return ECC_OK;
  if (e == NULL)
    return log_fail(&c->log, ECC_ERR_INVALID, "load: entries is NULL but n = %zu", n);
  if (c->cfg.role == ROLE_PRODUCER)
    return log_fail(&c->log, ECC_ERR_ROLE, "load: this connector is a producer (connector.role)");
  if (n > UINT32_MAX)
    return log_fail(&c->log, ECC_ERR_INVALID, "load: %zu entries in one call; at most %u", n, UINT32_MAX);
  lock(&c->step_lock);
  int rc = load_locked(c, e, n, stream);
  unlock(&c->step_lock);
  return rc;
}

/* ---- poll ---- */

static unsigned hist_bucket(uint64_t bytes)
{
  static const uint64_t bounds[ECC_HIST_BUCKETS - 1] = {
    500000ull, 1000000ull, 2000000ull, 5000000ull, 10000000ull,
    20000000ull, 50000000ull, 100000000ull, 250000000ull,
  };
  unsigned b = 0;
  while (b < ECC_HIST_BUCKETS - 1 && bytes >= bounds[b])
    b++;
  return b;
}

/* Account a transfer that just finished (done_lock held). */
static void count_finished(struct conn *c, struct transfer *t)
{
  ecc_dir_stats_v1_t *s = t->view.direction == ECC_DIR_SAVE ? &c->stats.save : &c->stats.load;
  s->transfers++;
  s->entries += t->n_done;
  s->descriptors += t->view.desc.count;
  s->bytes += t->view.desc.bytes;
  s->busy_ns += t->elapsed_ns;
  s->hist[hist_bucket(t->view.desc.bytes)]++;
  if (t->status != ECC_OK) {
    s->failed++;
    log_msg(&c->log, ECC_LOG_ERROR, "%s batch %" PRIu64 " failed (%d): %zu entries reported failed",
            ecc_dir_name(t->view.direction), t->batch, t->status, t->n_done);
  } else {
    log_msg(&c->log, ECC_LOG_DEBUG, "%s batch %" PRIu64 ": %zu entries, %" PRIu64
            " bytes, %zu descriptors, %.3f ms",
            ecc_dir_name(t->view.direction), t->batch, t->n_done,
            t->view.desc.bytes, t->view.desc.count, (double)t->elapsed_ns / 1e6);
  }
}

/* Whether the head transfer has finished, asking the engine if needed. */
static int head_finished(struct conn *c, struct transfer *t)
{
  if (t->finished)
    return 1;
  int status = ECC_OK;
  uint64_t elapsed = 0;
  if (!c->engine.ops->query(&c->engine, &t->view, &status, &elapsed))
    return 0;
  t->finished = 1;
  t->status = status;
  t->elapsed_ns = elapsed;
  c->engine.ops->release(&c->engine, &t->view);
  count_finished(c, t);
  return 1;
}

/* Before a poll reports its first completion: whether the region is still
 * the file others share. Once it is not, no copy through it is reported as
 * a success (done_lock held). */
static void check_region_once(struct conn *c, int *checked)
{
  if (*checked || c->region_dead)
    return;
  *checked = 1;
  if (region_check(&c->region, &c->log) != ECC_OK)
    c->region_dead = 1;
}

/* A copy that went through a region found dead is reported failed, and
 * counted so: the stats agree with the completions (done_lock held). */
static void count_dead_region(struct conn *c, const struct transfer *t)
{
  ecc_dir_stats_v1_t *s = t->view.direction == ECC_DIR_SAVE ? &c->stats.save : &c->stats.load;
  s->failed++;
}

/* The caller's record for one entry of a finished transfer. */
static void report(const struct transfer *t, const struct done_rec *rec, int region_dead,
                   ecc_completion_v1_t *out)
{
  out->direction = (uint32_t)t->view.direction;
  out->status = t->status == ECC_OK && region_dead ? ECC_ERR_REGION : t->status;
  out->batch = t->batch;
  out->nbytes = rec->nbytes;
  out->elapsed_ns = t->elapsed_ns;
  if (t->view.direction == ECC_DIR_SAVE) {
    const char *key = t->keys + rec->id;
    out->transfer_id = 0;
    memcpy(out->key, key, strlen(key) + 1);
  } else {
    out->transfer_id = rec->id;
    out->key[0] = '\0';
  }
}

static size_t drain(struct conn *c, struct fifo *f, ecc_completion_v1_t *out, size_t cap,
                    int *checked)
{
  size_t n = 0;
  while (n < cap && f->head != NULL && head_finished(c, f->head)) {
    struct transfer *t = f->head;
    check_region_once(c, checked);
    if (c->region_dead && t->status == ECC_OK && t->next_report == 0)
      count_dead_region(c, t);
    while (n < cap && t->next_report < t->n_done)
      report(t, &t->done[t->next_report++], c->region_dead, &out[n++]);
    if (t->next_report == t->n_done)
      transfer_put_locked(c, fifo_pop(f));
  }
  return n;
}

int conn_poll(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  if (n_out == NULL || (out == NULL && cap > 0))
    return log_fail(&c->log, ECC_ERR_INVALID, "poll: %s is NULL", n_out == NULL ? "n_out" : "out");
  int checked = 0;
  lock(&c->done_lock);
  size_t n = drain(c, &c->saves, out, cap, &checked);
  n += drain(c, &c->loads, out + n, cap - n, &checked);
  unlock(&c->done_lock);
  *n_out = n;
  return ECC_OK;
}

/* ---- create / describe / destroy ---- */

static int open_engine(struct conn *c)
{
  const struct plugin_config *cfg = &c->cfg;
  if (cfg->engine == ENGINE_HOST)
    return engine_host_create(cfg, &c->region, &c->log, &c->engine);
  int rc = engine_cuda_create(cfg, &c->region, &c->log, &c->engine);
  if (rc == ECC_OK) {
    log_msg(&c->log, ECC_LOG_INFO, "engine: cuda (%s)", c->engine.detail);
    return ECC_OK;
  }
  if (rc != ECC_ERR_UNSUPPORTED || cfg->engine == ENGINE_CUDA) {
    if (rc == ECC_ERR_UNSUPPORTED)
      return log_fail(&c->log, rc, "engine.type = cuda: %s", c->engine.detail);
    return rc;
  }
  char why[sizeof(c->engine.detail)];
  snprintf(why, sizeof(why), "%s", c->engine.detail);
  rc = engine_host_create(cfg, &c->region, &c->log, &c->engine);
  if (rc == ECC_OK)
    log_msg(&c->log, ECC_LOG_INFO, "engine: host, since cuda is not usable (%s)", why);
  return rc;
}

static int open_region(struct conn *c)
{
  struct region_params p = {
    .dir = c->cfg.region_dir,
    .name = c->cfg.region_name,
    .block_size = c->cfg.block_size,
    .num_blocks = c->cfg.num_blocks,
    .mode = c->cfg.region_mode,
    .join_timeout_ms = c->cfg.join_timeout_ms,
    .reap_orphans = c->cfg.reap_orphans,
    .any_filesystem = !c->cfg.require_tmpfs,
  };
  return region_open(&p, &c->region, &c->log);
}

int conn_create(const struct plugin_config *cfg, const ecc_host_services_v1_t *host,
                char *err, size_t err_cap, struct conn **out)
{
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    if (err != NULL && err_cap > 0)
      snprintf(err, err_cap, "create: out of memory");
    return ECC_ERR_NOMEM;
  }
  c->cfg = *cfg;
  log_init(&c->log, host);
  c->log.err = err;
  c->log.err_cap = err_cap;
  c->region.fd = -1;
  c->save_rank = cfg->tp_rank == 0 && cfg->pcp_rank == 0;
  pthread_mutex_init(&c->step_lock, NULL);
  pthread_mutex_init(&c->done_lock, NULL);
  c->stats.struct_size = sizeof(c->stats);

  int rc = open_region(c);
  if (rc == ECC_OK) {
    rc = open_engine(c);
    if (rc != ECC_OK)
      region_close(&c->region, &c->log);
  }
  c->log.err = NULL;
  if (rc != ECC_OK) {
    pthread_mutex_destroy(&c->step_lock);
    pthread_mutex_destroy(&c->done_lock);
    log_destroy(&c->log);
    free(c);
    return rc;
  }
  c->stats.pin_ns = c->engine.pin_ns;
  log_msg(&c->log, ECC_LOG_INFO, "connector: %s, region %s (%" PRIu64 " blocks of %" PRIu64
          " B, %s), engine %s: %s", config_role_name(cfg->role), c->region.path,
          c->region.num_blocks, c->region.block_size, c->region.creator ? "created" : "joined",
          c->engine.ops->name, c->engine.detail);
  *out = c;
  return ECC_OK;
}

void conn_stats(struct conn *c, ecc_stats_v1_t *out)
{
  ecc_stats_v1_t copy;
  lock(&c->done_lock);
  copy = c->stats;
  unlock(&c->done_lock);
  /* The caller may have been built against a shorter struct. */
  size_t n = out->struct_size < sizeof(copy) ? out->struct_size : sizeof(copy);
  uint32_t size = out->struct_size;
  memcpy(out, &copy, n);
  out->struct_size = size;
}

void conn_describe(struct conn *c, ecc_info_v1_t *out)
{
  ecc_info_v1_t info;
  memset(&info, 0, sizeof(info));
  info.creator = (uint32_t)c->region.creator;
  snprintf(info.region_path, sizeof(info.region_path), "%s", c->region.path);
  info.block_size = c->region.block_size;
  info.num_blocks = c->region.num_blocks;
  info.region_bytes = c->region.map_bytes;
  snprintf(info.engine, sizeof(info.engine), "%s", c->engine.ops->name);
  snprintf(info.engine_detail, sizeof(info.engine_detail), "%s", c->engine.detail);
  snprintf(info.role, sizeof(info.role), "%s", config_role_name(c->cfg.role));
  info.save_rank = (uint32_t)c->save_rank;
  info.pinned = (uint32_t)c->engine.pinned;
  info.max_inflight = c->cfg.max_inflight;
  uint32_t size = out->struct_size;
  memcpy(out, &info, size < sizeof(info) ? size : sizeof(info));
  out->struct_size = size;
}

static void drain_all(struct conn *c, struct fifo *f)
{
  while (f->head != NULL) {
    struct transfer *t = fifo_pop(f);
    if (!t->finished) {
      c->engine.ops->wait(&c->engine, &t->view);
      head_finished(c, t);
    }
    transfer_free(t);
  }
}

void conn_destroy(struct conn *c)
{
  lock(&c->done_lock);
  drain_all(c, &c->saves);
  drain_all(c, &c->loads);
  while (c->free_list != NULL) {
    struct transfer *t = c->free_list;
    c->free_list = t->next;
    transfer_free(t);
  }
  unlock(&c->done_lock);
  if (c->pending != NULL)
    transfer_free(c->pending);
  c->engine.ops->destroy(&c->engine);
  region_close(&c->region, &c->log);
  free(c->order);
  pthread_mutex_destroy(&c->step_lock);
  pthread_mutex_destroy(&c->done_lock);
  log_destroy(&c->log);
  free(c);
}

void conn_summary(const struct plugin_config *cfg, char *buf, size_t cap)
{
  char dir[sizeof(cfg->region_dir)];
  snprintf(buf, cap, "%s, region %s/ecc-%s.region: %" PRIu64 " blocks of %" PRIu64
           " B (%" PRIu64 " B), engine %s, max_inflight %u", config_role_name(cfg->role),
           config_region_dir(cfg, dir, sizeof(dir)), cfg->region_name, cfg->num_blocks,
           cfg->block_size, cfg->num_blocks * cfg->block_size, config_engine_name(cfg->engine),
           cfg->max_inflight);
}
