/* SPDX-License-Identifier: Apache-2.0 */
/*
 * minimal_plugin.c - a complete connector plugin written from ecc_plugin_v1.h
 * alone: a block store in this process's memory, copies made by flush and
 * load on the calling thread, completions handed out once each by poll.
 *
 * Build:  cc -std=c11 -shared -fPIC -fvisibility=hidden -I<folder of ecc_plugin_v1.h>
 *            minimal_plugin.c -o libecc-minimal.so -lpthread
 * Use:    [plugin] name = minimal (with the file in the plugin directory)
 *         [minimal] blocks = 64, block_size = 4096
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, pthread_atfork */

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecc_plugin_v1.h"

#define MINIMAL_VERSION "0.1.0"

/* Connectors open at once in one process; a handle's low bits name its slot. */
#define MAX_HANDLES 64
#define SLOT_BITS 8
/* Batches finished but not yet polled, per direction, before flush and load
 * answer ECC_ERR_BUSY: the bound on what an idle poller makes this hold. */
#define MAX_UNPOLLED_BATCHES 64
/* The most bytes one store may hold. */
#define STORE_MAX ((uint64_t)1 << 32)
#define ERR_MAX 256

#define STR_(x) #x
#define STR(x) STR_(x)

/* The configuration keys: X(field, key, default, min, max, what). */
#define MINIMAL_PARAM_MAP(X)                                            \
  X(blocks, "minimal.blocks", "64", 1, 16777216, "blocks in the store") \
  X(block_size, "minimal.block_size", "4096", 1, 1073741824, "bytes per block")

enum param_index {
#define PARAM_INDEX(field, key, def, min, max, what) PARAM_##field,
  MINIMAL_PARAM_MAP(PARAM_INDEX)
#undef PARAM_INDEX
      N_PARAMS
};

static const ecc_param_v1_t params[] = {
#define PARAM_ENTRY(field, key, def, min, max, what) \
  {key, def, what ", a whole number from " STR(min) " to " STR(max)},
    MINIMAL_PARAM_MAP(PARAM_ENTRY)
#undef PARAM_ENTRY
};

static const struct {
  uint64_t min, max;
} limits[] = {
#define PARAM_LIMITS(field, key, def, min, max, what) {min, max},
    MINIMAL_PARAM_MAP(PARAM_LIMITS)
#undef PARAM_LIMITS
};

struct config {
#define PARAM_FIELD(field, key, def, min, max, what) uint64_t field;
  MINIMAL_PARAM_MAP(PARAM_FIELD)
#undef PARAM_FIELD
};

/* ---- text for the caller ----------------------------------------------- */

__attribute__((format(printf, 4, 5))) static int fail_text(char *buf, size_t cap, int code,
                                                           const char *fmt, ...)
{
  if (buf == NULL || cap == 0)
    return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- configuration ------------------------------------------------------ */

/* Digits only: no sign, no blanks, no units, no overflow. */
static bool parse_whole(const char *text, uint64_t *out)
{
  uint64_t v = 0;
  if (text[0] == '\0')
    return false;
  for (const char *p = text; *p != '\0'; p++) {
    if (*p < '0' || *p > '9' || v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
      return false;
    v = v * 10 + (uint64_t)(*p - '0');
  }
  *out = v;
  return true;
}

static int param_of(const char *key)
{
  for (int i = 0; i < N_PARAMS; i++) {
    if (strcmp(params[i].key, key) == 0)
      return i;
  }
  return -1;
}

static int set_value(uint64_t values[N_PARAMS], int i, const char *text, char *err, size_t cap)
{
  uint64_t v = 0;
  if (!parse_whole(text, &v) || v < limits[i].min || v > limits[i].max)
    return fail_text(err, cap, ECC_ERR_CONFIG,
                     "%s: '%s' is not a whole number from %" PRIu64 " to %" PRIu64, params[i].key,
                     text, limits[i].min, limits[i].max);
  values[i] = v;
  return ECC_OK;
}

/* One pair: known, given once, of a value in range. */
static int apply_pair(const ecc_kv_v1_t *kv, size_t at, uint64_t values[N_PARAMS],
                      bool seen[N_PARAMS], char *err, size_t cap)
{
  if (kv->key == NULL || kv->value == NULL)
    return fail_text(err, cap, ECC_ERR_INVALID, "config pair %zu has a NULL %s", at,
                     kv->key == NULL ? "key" : "value");
  int i = param_of(kv->key);
  if (i < 0)
    return fail_text(err, cap, ECC_ERR_CONFIG,
                     "unknown key '%s' (this plugin accepts minimal.blocks and "
                     "minimal.block_size)",
                     kv->key);
  if (seen[i])
    return fail_text(err, cap, ECC_ERR_CONFIG, "%s is given twice", kv->key);
  seen[i] = true;
  return set_value(values, i, kv->value, err, cap);
}

/* The defaults go through the same checks as the caller's values. */
static int parse_config(const ecc_kv_v1_t *kv, size_t n, struct config *cfg, char *err, size_t cap)
{
  if (n != 0 && kv == NULL)
    return fail_text(err, cap, ECC_ERR_INVALID, "config is NULL but n_config is %zu", n);
  uint64_t values[N_PARAMS];
  bool seen[N_PARAMS] = {false};
  int rc = ECC_OK;
  for (int i = 0; rc == ECC_OK && i < N_PARAMS; i++)
    rc = set_value(values, i, params[i].default_value, err, cap);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = apply_pair(&kv[i], i, values, seen, err, cap);
  if (rc != ECC_OK)
    return rc;
  cfg->blocks = values[PARAM_blocks];
  cfg->block_size = values[PARAM_block_size];
  if (cfg->blocks > STORE_MAX / cfg->block_size)
    return fail_text(err, cap, ECC_ERR_CONFIG,
                     "minimal.blocks x minimal.block_size = %" PRIu64 " x %" PRIu64
                     " bytes is more than the 4 GiB a store may hold",
                     cfg->blocks, cfg->block_size);
  return ECC_OK;
}

static void summary(const struct config *cfg, char *buf, size_t cap)
{
  if (buf != NULL && cap > 0)
    snprintf(buf, cap,
             "minimal: %" PRIu64 " blocks of %" PRIu64 " B (%" PRIu64
             " bytes) in this process's memory, copied by flush and load",
             cfg->blocks, cfg->block_size, cfg->blocks * cfg->block_size);
}

/* ---- one connector ------------------------------------------------------ */

/* Finished entries not yet polled, oldest first. */
struct fifo {
  ecc_completion_v1_t *items;
  size_t head, len, cap;
};

struct queued_save {
  char key[ECC_KEY_MAX + 1];
  uint64_t src, nbytes;
  size_t first_id; /* into the queue's ids */
  uint32_t n_ids;  /* the blocks the bytes reach */
};

struct save_queue {
  struct queued_save *entries;
  size_t n, cap;
  uint32_t *ids;
  size_t n_ids, cap_ids;
};

enum direction_index { DIRECTION_SAVE, DIRECTION_LOAD, N_DIRECTIONS };

struct store {
  /* Serialises save, flush and load; guards the queue, the blocks, batch. */
  pthread_mutex_t step_lock;
  /* Guards done, stats and last_error, so poll never waits for a copy. */
  pthread_mutex_t done_lock;
  unsigned char *blocks;
  uint64_t block_size;
  uint64_t n_blocks;
  struct save_queue queue;
  uint64_t batch[N_DIRECTIONS]; /* the last batch number given, per direction */
  struct fifo done[N_DIRECTIONS];
  ecc_stats_v1_t stats;
  char last_error[ERR_MAX];
  const ecc_host_services_v1_t *host;
};

static void host_log(const struct store *s, int level, const char *text)
{
  const ecc_host_services_v1_t *h = s->host;
  if (h != NULL && h->log != NULL && level <= h->log_level)
    h->log(h->user, level, text);
}

/* Every refusal is kept for last_error and logged. */
__attribute__((format(printf, 3, 4))) static int refuse(struct store *s, int code, const char *fmt,
                                                        ...)
{
  char text[ERR_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&s->done_lock);
  memcpy(s->last_error, text, sizeof(text));
  pthread_mutex_unlock(&s->done_lock);
  /* BUSY is back-pressure, not a fault. */
  host_log(s, code == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR, text);
  return code;
}

static int store_new(const struct config *cfg, const ecc_host_services_v1_t *host,
                     struct store **out)
{
  struct store *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return ECC_ERR_NOMEM;
  s->blocks = calloc((size_t)cfg->blocks, (size_t)cfg->block_size);
  if (s->blocks == NULL) {
    free(s);
    return ECC_ERR_NOMEM;
  }
  s->block_size = cfg->block_size;
  s->n_blocks = cfg->blocks;
  s->host = host;
  s->stats.struct_size = sizeof(s->stats);
  if (pthread_mutex_init(&s->step_lock, NULL) != 0) {
    free(s->blocks);
    free(s);
    return ECC_ERR_NOMEM;
  }
  if (pthread_mutex_init(&s->done_lock, NULL) != 0) {
    pthread_mutex_destroy(&s->step_lock);
    free(s->blocks);
    free(s);
    return ECC_ERR_NOMEM;
  }
  *out = s;
  return ECC_OK;
}

static void store_free(struct store *s)
{
  pthread_mutex_destroy(&s->step_lock);
  pthread_mutex_destroy(&s->done_lock);
  for (int d = 0; d < N_DIRECTIONS; d++)
    free(s->done[d].items);
  free(s->queue.entries);
  free(s->queue.ids);
  free(s->blocks);
  free(s);
}

/* ---- handles ------------------------------------------------------------ */

/* A handle is (stamp << SLOT_BITS) | (slot + 1), the stamp a microsecond
 * count of CLOCK_MONOTONIC, never the same twice: so a handle value is never
 * given again in this process, even after the plugin is unloaded and its
 * static state starts over. */
enum slot_state { SLOT_FREE, SLOT_OPEN, SLOT_CLOSING, SLOT_INHERITED };

struct slot {
  ecc_handle_t handle;
  enum slot_state state;
  unsigned inside; /* calls between enter and leave */
  struct store *store;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[MAX_HANDLES];
static uint64_t last_stamp;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static int atfork_rc;

static void fork_prepare(void)
{
  pthread_mutex_lock(&table_lock);
}

static void fork_parent(void)
{
  pthread_mutex_unlock(&table_lock);
}

/* In a child every handle it inherited is the parent's: refuse them all. */
static void fork_child(void)
{
  for (int i = 0; i < MAX_HANDLES; i++) {
    if (slots[i].state != SLOT_FREE)
      slots[i].state = SLOT_INHERITED;
  }
  pthread_mutex_unlock(&table_lock);
}

static void register_atfork(void)
{
  atfork_rc = pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* With table_lock held. Without a clock the stamps still never repeat while
 * the plugin stays loaded. */
static uint64_t next_stamp(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    ts = (struct timespec){0, 0};
  uint64_t now = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
  last_stamp = now > last_stamp ? now : last_stamp + 1;
  return last_stamp;
}

static int table_add(struct store *s, ecc_handle_t *out)
{
  pthread_once(&atfork_once, register_atfork);
  if (atfork_rc != 0)
    return ECC_ERR_NOMEM;
  pthread_mutex_lock(&table_lock);
  int free_slot = -1;
  for (int i = 0; i < MAX_HANDLES && free_slot < 0; i++) {
    if (slots[i].state == SLOT_FREE || slots[i].state == SLOT_INHERITED)
      free_slot = i;
  }
  if (free_slot >= 0) {
    struct slot *sl = &slots[free_slot];
    /* An inherited store is the parent's copy: it is left alone. */
    *sl = (struct slot){.handle = (next_stamp() << SLOT_BITS) | (uint64_t)(free_slot + 1),
                        .state = SLOT_OPEN,
                        .store = s};
    *out = sl->handle;
  }
  pthread_mutex_unlock(&table_lock);
  return free_slot >= 0 ? ECC_OK : ECC_ERR_NOMEM;
}

/* With table_lock held: the slot of handle h in any state, or NULL. */
static struct slot *slot_of(ecc_handle_t h)
{
  uint64_t i = (h & ((1u << SLOT_BITS) - 1)) - 1;
  if (h == 0 || i >= MAX_HANDLES || slots[i].handle != h)
    return NULL;
  return &slots[i];
}

/* The store of an open handle, counted in until leave(); NULL: closed. */
static struct store *enter(ecc_handle_t h)
{
  pthread_mutex_lock(&table_lock);
  struct slot *sl = slot_of(h);
  struct store *s = NULL;
  if (sl != NULL && sl->state == SLOT_OPEN) {
    sl->inside++;
    s = sl->store;
  }
  pthread_mutex_unlock(&table_lock);
  return s;
}

static void leave(ecc_handle_t h)
{
  pthread_mutex_lock(&table_lock);
  struct slot *sl = slot_of(h);
  if (sl != NULL)
    sl->inside--;
  pthread_mutex_unlock(&table_lock);
}

/* ---- copies ------------------------------------------------------------- */

/* Only for elapsed times: without a clock they read 0. */
static uint64_t now_ns(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Moves nbytes between buf and the listed blocks, one memcpy per run of
 * consecutive block ids; returns the number of runs (descriptors). */
static uint64_t copy_blocks(struct store *s, const uint32_t *ids, uint64_t nbytes,
                            unsigned char *buf, bool to_store)
{
  uint64_t runs = 0, done = 0;
  for (uint32_t i = 0; done < nbytes; runs++) {
    uint32_t first = ids[i], n = 1;
    while (done + (uint64_t)n * s->block_size < nbytes && ids[i + n] == first + n)
      n++;
    uint64_t len = (uint64_t)n * s->block_size;
    len = len < nbytes - done ? len : nbytes - done;
    unsigned char *at = s->blocks + (uint64_t)first * s->block_size;
    memcpy(to_store ? at : buf + done, to_store ? buf + done : at, (size_t)len);
    done += len;
    i += n;
  }
  return runs;
}

static unsigned hist_bucket(uint64_t bytes)
{
  /* The bounds ecc_plugin_v1.h gives ECC_HIST_BUCKETS, in bytes (MB = 10^6). */
  static const uint64_t bounds[ECC_HIST_BUCKETS - 1] = {
      500000, 1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000, 250000000,
  };
  unsigned b = 0;
  while (b < ECC_HIST_BUCKETS - 1 && bytes >= bounds[b])
    b++;
  return b;
}

/* With done_lock held: batches with entries not yet polled. */
static uint64_t unpolled_batches(const struct store *s, enum direction_index d)
{
  const struct fifo *f = &s->done[d];
  if (f->len == 0)
    return 0;
  return s->batch[d] - f->items[f->head].batch + 1;
}

/* An array of *cap items of `size` bytes with room for `want` (>= 1): the
 * same, or a larger one with *cap raised; NULL, and the old one intact, when
 * there is no memory for it. */
static void *grow(void *items, size_t *cap, size_t want, size_t size)
{
  if (want <= *cap)
    return items;
  size_t n = *cap * 2 > want ? *cap * 2 : want;
  void *grown = n <= SIZE_MAX / size ? realloc(items, n * size) : NULL;
  if (grown != NULL)
    *cap = n;
  return grown;
}

/* With done_lock held: room for `more` (>= 1) records, or ECC_ERR_NOMEM.
 * The oldest record moves to the front first, so the room is at the end. */
static int fifo_reserve(struct fifo *f, size_t more)
{
  if (f->head != 0)
    memmove(f->items, f->items + f->head, f->len * sizeof(*f->items));
  f->head = 0;
  ecc_completion_v1_t *items = grow(f->items, &f->cap, f->len + more, sizeof(*items));
  if (items == NULL)
    return ECC_ERR_NOMEM;
  f->items = items;
  return ECC_OK;
}

/* Room for a batch of n entries in direction d, or why there is none. */
static int make_room(struct store *s, enum direction_index d, size_t n)
{
  pthread_mutex_lock(&s->done_lock);
  int rc = unpolled_batches(s, d) >= MAX_UNPOLLED_BATCHES ? ECC_ERR_BUSY : ECC_OK;
  if (rc == ECC_OK)
    rc = fifo_reserve(&s->done[d], n);
  pthread_mutex_unlock(&s->done_lock);
  if (rc == ECC_ERR_BUSY)
    return refuse(s, rc, "%s: %d batches wait to be polled; poll, then retry",
                  d == DIRECTION_SAVE ? "flush" : "load", MAX_UNPOLLED_BATCHES);
  if (rc != ECC_OK)
    return refuse(s, rc, "%s: out of memory for %zu completions",
                  d == DIRECTION_SAVE ? "flush" : "load", n);
  return ECC_OK;
}

/* With done_lock held: one batch's counters. */
static void count_batch(ecc_dir_stats_v1_t *st, size_t entries, uint64_t runs, uint64_t bytes,
                        uint64_t ns)
{
  st->transfers++;
  st->entries += entries;
  st->descriptors += runs;
  st->bytes += bytes;
  st->busy_ns += ns;
  st->hist[hist_bucket(bytes)]++;
}

/* ---- save and flush ----------------------------------------------------- */

/* The blocks an entry of nbytes reaches, or 0 if its blocks cannot hold it. */
static uint64_t blocks_needed(const struct store *s, uint64_t nbytes, uint32_t n_blocks)
{
  uint64_t need = nbytes / s->block_size + (nbytes % s->block_size != 0);
  return need <= n_blocks ? need : 0;
}

static int check_ids(struct store *s, const char *what, size_t i, const uint32_t *ids, uint32_t n)
{
  for (uint32_t b = 0; b < n; b++) {
    if (ids[b] >= s->n_blocks)
      return refuse(s, ECC_ERR_RANGE,
                    "%s: entry %zu: block id %" PRIu32 " is past the %" PRIu64
                    " blocks of the store",
                    what, i, ids[b], s->n_blocks);
  }
  return ECC_OK;
}

static int check_save(struct store *s, const ecc_save_entry_v1_t *e, size_t i)
{
  size_t key_len = e->key != NULL ? strnlen(e->key, ECC_KEY_MAX + 1) : 0;
  if (e->key == NULL || key_len == 0 || key_len > ECC_KEY_MAX)
    return refuse(s, ECC_ERR_INVALID, "save: entry %zu: the key is %s (1 to %d bytes)", i,
                  e->key == NULL ? "NULL"
                  : key_len == 0 ? "empty"
                                 : "too long",
                  ECC_KEY_MAX);
  if (e->src == 0 || e->block_ids == NULL)
    return refuse(s, ECC_ERR_INVALID, "save: entry %zu: %s is NULL", i,
                  e->src == 0 ? "src" : "block_ids");
  if (e->nbytes == 0 || e->n_blocks == 0)
    return refuse(s, ECC_ERR_INVALID, "save: entry %zu: %s is 0", i,
                  e->nbytes == 0 ? "nbytes" : "n_blocks");
  if (e->src > UINT64_MAX - e->nbytes)
    return refuse(s, ECC_ERR_INVALID, "save: entry %zu: src + nbytes wraps around", i);
  int rc = check_ids(s, "save", i, e->block_ids, e->n_blocks);
  if (rc == ECC_OK && blocks_needed(s, e->nbytes, e->n_blocks) == 0)
    rc = refuse(s, ECC_ERR_RANGE,
                "save: entry %zu: %" PRIu64 " bytes do not fit in %" PRIu32 " blocks of %" PRIu64
                " bytes",
                i, e->nbytes, e->n_blocks, s->block_size);
  return rc;
}

/* Room in the queue for n (>= 1) entries and the blocks their bytes reach. */
static int reserve_saves(struct store *s, const ecc_save_entry_v1_t *entries, size_t n)
{
  struct save_queue *q = &s->queue;
  size_t n_ids = q->n_ids;
  for (size_t i = 0; i < n; i++)
    n_ids += blocks_needed(s, entries[i].nbytes, entries[i].n_blocks);
  struct queued_save *queued = grow(q->entries, &q->cap, q->n + n, sizeof(*queued));
  if (queued != NULL)
    q->entries = queued;
  uint32_t *ids = queued != NULL ? grow(q->ids, &q->cap_ids, n_ids, sizeof(*ids)) : NULL;
  if (ids == NULL)
    return refuse(s, ECC_ERR_NOMEM, "save: out of memory for %zu more entries", n);
  q->ids = ids;
  return ECC_OK;
}

static void queue_save(struct store *s, const ecc_save_entry_v1_t *e)
{
  struct save_queue *q = &s->queue;
  struct queued_save *qs = &q->entries[q->n++];
  snprintf(qs->key, sizeof(qs->key), "%s", e->key);
  qs->src = e->src;
  qs->nbytes = e->nbytes;
  qs->first_id = q->n_ids;
  qs->n_ids = (uint32_t)blocks_needed(s, e->nbytes, e->n_blocks);
  memcpy(q->ids + q->n_ids, e->block_ids, qs->n_ids * sizeof(*q->ids));
  q->n_ids += qs->n_ids;
}

/* All entries are checked before any is queued. */
static int save_locked(struct store *s, const ecc_save_entry_v1_t *entries, size_t n)
{
  if (n != 0 && entries == NULL)
    return refuse(s, ECC_ERR_INVALID, "save: entries is NULL but n is %zu", n);
  if (n == 0)
    return ECC_OK;
  for (size_t i = 0; i < n; i++) {
    int rc = check_save(s, &entries[i], i);
    if (rc != ECC_OK)
      return rc;
  }
  int rc = reserve_saves(s, entries, n);
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    queue_save(s, &entries[i]);
  return rc;
}

static int minimal_save(ecc_handle_t h, const ecc_save_entry_v1_t *entries, size_t n)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  pthread_mutex_lock(&s->step_lock);
  int rc = save_locked(s, entries, n);
  pthread_mutex_unlock(&s->step_lock);
  leave(h);
  return rc;
}

/* With done_lock held: the record of one finished entry. */
static void complete(struct store *s, enum direction_index d, uint64_t id, const char *key,
                     uint64_t nbytes, uint64_t ns)
{
  struct fifo *f = &s->done[d];
  ecc_completion_v1_t *c = &f->items[f->head + f->len++];
  *c = (ecc_completion_v1_t){.direction = d == DIRECTION_SAVE ? ECC_DIR_SAVE : ECC_DIR_LOAD,
                             .status = ECC_OK,
                             .transfer_id = id,
                             .batch = s->batch[d],
                             .nbytes = nbytes,
                             .elapsed_ns = ns};
  snprintf(c->key, sizeof(c->key), "%s", key);
}

/* The queued saves as one batch; poll sees all of its entries at once. */
static void flush_queue(struct store *s)
{
  struct save_queue *q = &s->queue;
  uint64_t start = now_ns(), runs = 0, bytes = 0;
  for (size_t i = 0; i < q->n; i++) {
    const struct queued_save *e = &q->entries[i];
    runs +=
        copy_blocks(s, q->ids + e->first_id, e->nbytes, (unsigned char *)(uintptr_t)e->src, true);
    bytes += e->nbytes;
  }
  uint64_t ns = now_ns() - start;
  pthread_mutex_lock(&s->done_lock);
  s->batch[DIRECTION_SAVE]++;
  for (size_t i = 0; i < q->n; i++)
    complete(s, DIRECTION_SAVE, 0, q->entries[i].key, q->entries[i].nbytes, ns);
  count_batch(&s->stats.save, q->n, runs, bytes, ns);
  pthread_mutex_unlock(&s->done_lock);
  q->n = 0;
  q->n_ids = 0;
}

/* On ECC_ERR_BUSY the queue stays for a later flush. */
static int flush_locked(struct store *s, void *compute_stream)
{
  if (compute_stream != NULL)
    return refuse(s, ECC_ERR_INVALID,
                  "flush: this plugin copies host memory and cannot order itself after a "
                  "stream; pass NULL");
  if (s->queue.n == 0)
    return ECC_OK;
  int rc = make_room(s, DIRECTION_SAVE, s->queue.n);
  if (rc == ECC_OK)
    flush_queue(s);
  return rc;
}

static int minimal_flush(ecc_handle_t h, void *compute_stream)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  pthread_mutex_lock(&s->step_lock);
  int rc = flush_locked(s, compute_stream);
  pthread_mutex_unlock(&s->step_lock);
  leave(h);
  return rc;
}

/* ---- load --------------------------------------------------------------- */

/* min(dst_capacity, n_blocks * block_size): blocks past it are not read. */
static uint64_t load_bytes(const struct store *s, const ecc_load_entry_v1_t *e)
{
  uint64_t all = (uint64_t)e->n_blocks * s->block_size;
  return e->dst_capacity < all ? e->dst_capacity : all;
}

static int check_load(struct store *s, const ecc_load_entry_v1_t *e, size_t i)
{
  if (e->dst == 0 || e->block_ids == NULL)
    return refuse(s, ECC_ERR_INVALID, "load: entry %zu: %s is NULL", i,
                  e->dst == 0 ? "dst" : "block_ids");
  if (e->dst_capacity == 0 || e->n_blocks == 0)
    return refuse(s, ECC_ERR_INVALID, "load: entry %zu: %s is 0", i,
                  e->dst_capacity == 0 ? "dst_capacity" : "n_blocks");
  int rc = check_ids(s, "load", i, e->block_ids, e->n_blocks);
  if (rc == ECC_OK && e->dst > UINT64_MAX - load_bytes(s, e))
    rc = refuse(s, ECC_ERR_INVALID, "load: entry %zu: dst + the bytes it takes wraps around", i);
  return rc;
}

static void load_batch(struct store *s, const ecc_load_entry_v1_t *entries, size_t n)
{
  uint64_t start = now_ns(), runs = 0, bytes = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t len = load_bytes(s, &entries[i]);
    runs += copy_blocks(s, entries[i].block_ids, len, (unsigned char *)(uintptr_t)entries[i].dst,
                        false);
    bytes += len;
  }
  uint64_t ns = now_ns() - start;
  pthread_mutex_lock(&s->done_lock);
  s->batch[DIRECTION_LOAD]++;
  for (size_t i = 0; i < n; i++)
    complete(s, DIRECTION_LOAD, entries[i].transfer_id, "", load_bytes(s, &entries[i]), ns);
  count_batch(&s->stats.load, n, runs, bytes, ns);
  pthread_mutex_unlock(&s->done_lock);
}

static int load_locked(struct store *s, const ecc_load_entry_v1_t *entries, size_t n,
                       void *compute_stream)
{
  if (n != 0 && entries == NULL)
    return refuse(s, ECC_ERR_INVALID, "load: entries is NULL but n is %zu", n);
  if (compute_stream != NULL)
    return refuse(s, ECC_ERR_INVALID,
                  "load: this plugin copies host memory and cannot order itself after a "
                  "stream; pass NULL");
  for (size_t i = 0; i < n; i++) {
    int rc = check_load(s, &entries[i], i);
    if (rc != ECC_OK)
      return rc;
  }
  int rc = n != 0 ? make_room(s, DIRECTION_LOAD, n) : ECC_OK;
  if (rc == ECC_OK && n != 0)
    load_batch(s, entries, n);
  return rc;
}

static int minimal_load(ecc_handle_t h, const ecc_load_entry_v1_t *entries, size_t n,
                        void *compute_stream)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  pthread_mutex_lock(&s->step_lock);
  int rc = load_locked(s, entries, n, compute_stream);
  pthread_mutex_unlock(&s->step_lock);
  leave(h);
  return rc;
}

/* ---- poll --------------------------------------------------------------- */

/* With done_lock held: up to cap records of one direction, oldest first. */
static size_t take(struct fifo *f, ecc_completion_v1_t *out, size_t cap)
{
  size_t n = f->len < cap ? f->len : cap;
  if (n == 0)
    return 0;
  memcpy(out, f->items + f->head, n * sizeof(*out));
  f->head += n;
  f->len -= n;
  return n;
}

static int minimal_poll(ecc_handle_t h, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  if (n_out != NULL)
    *n_out = 0;
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  int rc = ECC_OK;
  if (n_out == NULL || (out == NULL && cap != 0)) {
    rc = refuse(s, ECC_ERR_INVALID, "poll: %s is NULL", n_out == NULL ? "n_out" : "out");
  } else if (cap != 0) {
    pthread_mutex_lock(&s->done_lock);
    size_t n = take(&s->done[DIRECTION_SAVE], out, cap);
    n += take(&s->done[DIRECTION_LOAD], out + n, cap - n);
    pthread_mutex_unlock(&s->done_lock);
    *n_out = n;
  }
  leave(h);
  return rc;
}

/* ---- create and shutdown ------------------------------------------------ */

static int check_create_args(const ecc_create_args_v1_t *args)
{
  if (args->host != NULL && !ECC_COVERS(args->host, ecc_host_services_v1_t, user))
    return fail_text(args->err, args->err_cap, ECC_ERR_INVALID,
                     "create: the host's services struct is %u bytes, shorter than its "
                     "first version",
                     args->host->struct_size);
  if (args->abi_major != ECC_ABI_V1_MAJOR || args->abi_minor > ECC_ABI_V1_MINOR)
    return fail_text(args->err, args->err_cap, ECC_ERR_INCOMPATIBLE,
                     "create: ABI %" PRIu32 ".%" PRIu32 " asked for; this plugin implements "
                     "%d.%d",
                     args->abi_major, args->abi_minor, ECC_ABI_V1_MAJOR, ECC_ABI_V1_MINOR);
  return ECC_OK;
}

static int minimal_create(const ecc_create_args_v1_t *args, ecc_handle_t *out)
{
  if (out != NULL)
    *out = 0;
  if (args == NULL || out == NULL || !ECC_COVERS(args, ecc_create_args_v1_t, err_cap))
    return ECC_ERR_INVALID;
  struct config cfg;
  struct store *s = NULL;
  int rc = check_create_args(args);
  if (rc == ECC_OK)
    rc = parse_config(args->config, args->n_config, &cfg, args->err, args->err_cap);
  if (rc == ECC_OK && store_new(&cfg, args->host, &s) != ECC_OK)
    rc = fail_text(args->err, args->err_cap, ECC_ERR_NOMEM,
                   "create: no memory for %" PRIu64 " blocks of %" PRIu64 " bytes", cfg.blocks,
                   cfg.block_size);
  if (rc == ECC_OK && table_add(s, out) != ECC_OK) {
    store_free(s);
    rc = fail_text(args->err, args->err_cap, ECC_ERR_NOMEM,
                   "create: %d connectors are open in this process already", MAX_HANDLES);
  }
  if (rc != ECC_OK)
    return rc;
  char text[ERR_MAX];
  summary(&cfg, text, sizeof(text));
  host_log(s, ECC_LOG_INFO, text);
  return ECC_OK;
}

/* Calls inside never wait for anything but the step lock, so this is short. */
static void wait_until_idle(struct slot *sl)
{
  struct timespec pause = {0, 100000};
  while (sl->inside != 0) {
    pthread_mutex_unlock(&table_lock);
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&table_lock);
  }
}

static int minimal_shutdown(ecc_handle_t h)
{
  pthread_mutex_lock(&table_lock);
  struct slot *sl = slot_of(h);
  if (sl == NULL || sl->state != SLOT_OPEN) {
    pthread_mutex_unlock(&table_lock);
    return ECC_ERR_CLOSED;
  }
  sl->state = SLOT_CLOSING; /* new callers are turned away from here on */
  wait_until_idle(sl);
  struct store *s = sl->store;
  *sl = (struct slot){.state = SLOT_FREE};
  pthread_mutex_unlock(&table_lock);
  store_free(s);
  return ECC_OK;
}

/* ---- optional functions ------------------------------------------------- */

static int minimal_validate(const ecc_kv_v1_t *config, size_t n_config, char *err, size_t err_cap)
{
  struct config cfg;
  int rc = parse_config(config, n_config, &cfg, err, err_cap);
  if (rc == ECC_OK)
    summary(&cfg, err, err_cap);
  return rc;
}

/* A caller built against another version of the header gets the part of
 * the struct both know: min(its size, ours) bytes, its struct_size kept. */
static void copy_out(void *out, const void *ours, size_t our_size)
{
  uint32_t size;
  memcpy(&size, out, sizeof(size));
  memcpy(out, ours, size < our_size ? size : our_size);
  memcpy(out, &size, sizeof(size));
}

static int minimal_stats(ecc_handle_t h, ecc_stats_v1_t *out)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  int rc = ECC_OK;
  if (out == NULL || out->struct_size < sizeof(out->struct_size)) {
    rc = refuse(s, ECC_ERR_INVALID, "stats: %s",
                out == NULL ? "out is NULL" : "out->struct_size is too small");
  } else {
    pthread_mutex_lock(&s->done_lock);
    ecc_stats_v1_t copy = s->stats;
    pthread_mutex_unlock(&s->done_lock);
    copy_out(out, &copy, sizeof(copy));
  }
  leave(h);
  return rc;
}

static int minimal_last_error(ecc_handle_t h, char *buf, size_t cap)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  int rc = ECC_OK;
  if (buf == NULL && cap != 0) {
    rc = ECC_ERR_INVALID; /* not kept: it would replace the error asked for */
  } else if (cap != 0) {
    pthread_mutex_lock(&s->done_lock);
    snprintf(buf, cap, "%s", s->last_error);
    pthread_mutex_unlock(&s->done_lock);
  }
  leave(h);
  return rc;
}

static void describe_store(const struct store *s, ecc_info_v1_t *out)
{
  ecc_info_v1_t info = {.struct_size = sizeof(info),
                        .creator = 1,
                        .block_size = s->block_size,
                        .num_blocks = s->n_blocks,
                        .region_bytes = s->block_size * s->n_blocks,
                        .save_rank = 1,
                        .max_inflight = MAX_UNPOLLED_BATCHES};
  snprintf(info.engine, sizeof(info.engine), "host");
  snprintf(info.engine_detail, sizeof(info.engine_detail),
           "blocks in this process's memory (no region file); copies made by flush and load");
  snprintf(info.role, sizeof(info.role), "both");
  copy_out(out, &info, sizeof(info));
}

static int minimal_describe(ecc_handle_t h, ecc_info_v1_t *out)
{
  struct store *s = enter(h);
  if (s == NULL)
    return ECC_ERR_CLOSED;
  int rc = ECC_OK;
  if (out == NULL || out->struct_size < sizeof(out->struct_size))
    rc = refuse(s, ECC_ERR_INVALID, "describe: %s",
                out == NULL ? "out is NULL" : "out->struct_size is too small");
  else
    describe_store(s, out);
  leave(h);
  return rc;
}

/* ---- the table ---------------------------------------------------------- */

ECC_PLUGIN_EXPORT const ecc_plugin_v1_t ecc_plugin_v1 = {
    .abi_major = ECC_ABI_V1_MAJOR,
    .abi_minor = ECC_ABI_V1_MINOR,
    .struct_size = sizeof(ecc_plugin_v1_t),
    .caps = ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE | ECC_CAP_STATS,
    .name = "minimal",
    .version = MINIMAL_VERSION,
    .params = params,
    .n_params = N_PARAMS,
    .create = minimal_create,
    .save = minimal_save,
    .flush = minimal_flush,
    .load = minimal_load,
    .poll = minimal_poll,
    .shutdown = minimal_shutdown,
    .validate = minimal_validate,
    .stats = minimal_stats,
    .last_error = minimal_last_error,
    .describe = minimal_describe,
};
