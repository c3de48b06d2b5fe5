/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_trace.c - builds ecc-dir-bench's trace from a seed alone, and runs it
 * through the reference caches (exact LRU; exact LRU over a LIFO free stack,
 * as upstream's block pool allocates) that the directory is judged against.
 */
#include "bench/host/dir_trace.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* splitmix64: small, fast, and the same stream on every machine. */
static uint64_t mix(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
  return (double)(mix(s) >> 11) * 0x1.0p-53;
}

/* Mean of the log-uniform size law, used to size the key universe before
 * any key exists. */
static double law_mean(const struct trace_params *p)
{
  if (p->max_blocks == p->min_blocks)
    return p->min_blocks;
  return (double)(p->max_blocks - p->min_blocks) / log((double)p->max_blocks / p->min_blocks);
}

/* Sizes come from their own stream, so they do not follow popularity. */
static void make_sizes(struct trace *t, const struct trace_params *p)
{
  uint64_t s = p->seed ^ 0x51ED270B0A3D3CB1ull;
  double ratio = (double)p->max_blocks / p->min_blocks, sum = 0;
  for (uint32_t k = 0; k < t->universe; k++) {
    double b = round(p->min_blocks * pow(ratio, unit(&s)));
    if (b < p->min_blocks)
      b = p->min_blocks;
    if (b > p->max_blocks)
      b = p->max_blocks;
    t->blocks[k] = (uint32_t)b;
    t->bytes[k] = (uint64_t)b * p->block_size - mix(&s) % p->block_size;
    sum += b;
  }
  t->mean_blocks = sum / t->universe;
}

/* Cumulative Zipf weights; the key of rank r is key id r. */
static double *zipf_cdf(uint32_t universe, double s)
{
  double *cdf = malloc(universe * sizeof(*cdf)), acc = 0;
  if (cdf == NULL)
    return NULL;
  for (uint32_t r = 0; r < universe; r++) {
    acc += 1.0 / pow((double)r + 1, s);
    cdf[r] = acc;
  }
  return cdf;
}

static uint32_t zipf_pick(const double *cdf, uint32_t universe, double u)
{
  double x = u * cdf[universe - 1];
  uint32_t lo = 0, hi = universe - 1;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (cdf[mid] > x)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Each request names a key; after it a consumer looks up one of the last
 * peek_depth requests' keys, as a consumer loads what a producer just
 * saved or found. */
static void make_requests(struct trace *t, const struct trace_params *p, const double *cdf)
{
  uint64_t s = p->seed * 0x2545F4914F6CDD1Dull + 0x3C6EF372FE94F82Aull;
  for (uint64_t i = 0; i < t->n; i++) {
    t->key[i] = zipf_pick(cdf, t->universe, unit(&s));
    uint64_t d = 1 + mix(&s) % p->peek_depth;
    t->peek[i] = i >= d ? t->key[i - d] : TRACE_NO_KEY;
  }
}

static bool params_ok(const struct trace_params *p)
{
  return p->requests > 0 && p->block_size > 0 && p->min_blocks > 0 &&
         p->min_blocks <= p->max_blocks && p->max_blocks <= p->num_blocks &&
         p->universe_factor > 0 && p->peek_depth > 0 && p->zipf_s > 0;
}

int trace_build(struct trace *t, const struct trace_params *p)
{
  *t = (struct trace){.n = p->requests};
  if (!params_ok(p))
    return -1;
  double universe = ceil(p->universe_factor * p->num_blocks / law_mean(p));
  t->universe = universe < 2 ? 2 : (uint32_t)universe;
  t->key = malloc(t->n * sizeof(*t->key));
  t->peek = malloc(t->n * sizeof(*t->peek));
  t->blocks = malloc(t->universe * sizeof(*t->blocks));
  t->bytes = malloc(t->universe * sizeof(*t->bytes));
  double *cdf = zipf_cdf(t->universe, p->zipf_s);
  if (t->key == NULL || t->peek == NULL || t->blocks == NULL || t->bytes == NULL || cdf == NULL) {
    free(cdf);
    trace_free(t);
    return -1;
  }
  make_sizes(t, p);
  make_requests(t, p, cdf);
  free(cdf);
  /* The warm-up is the same for every cache judged: until the region first
   * fills under exact LRU. */
  struct sim_result r;
  t->warmup = 0;
  if (sim_lru(t, p->num_blocks, false, &r) != 0) {
    trace_free(t);
    return -1;
  }
  t->warmup = r.first_eviction;
  return 0;
}

void trace_free(struct trace *t)
{
  free(t->key);
  free(t->peek);
  free(t->blocks);
  free(t->bytes);
  *t = (struct trace){0};
}

/* 64 hex digits, the shape of the content hashes that name images. */
void trace_key_name(uint32_t id, char *buf, size_t cap)
{
  uint64_t s = 0xECC0000000000000ull | id, h[4];
  for (int j = 0; j < 4; j++)
    h[j] = mix(&s);
  snprintf(buf, cap, "mm-%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64, h[0], h[1], h[2],
           h[3]);
}

/* Exact LRU: a doubly linked list over key ids, the sentinel at index
 * `universe` (its next is the most recent entry, its prev the least). */
struct lru {
  const struct trace *t;
  uint32_t *prev, *next;
  bool *present;
  uint64_t free_blocks;
  bool lifo;
  uint32_t **owned; /* lifo: each present entry's block ids, in order */
  uint32_t *stack;  /* lifo: free block ids, top at stack[top - 1] */
  uint32_t top;
};

static void lru_fini(struct lru *l)
{
  if (l->owned != NULL)
    for (uint32_t k = 0; k < l->t->universe; k++)
      free(l->owned[k]);
  free(l->owned);
  free(l->stack);
  free(l->prev);
  free(l->next);
  free(l->present);
}

static int lru_init(struct lru *l, const struct trace *t, uint32_t num_blocks, bool lifo)
{
  uint32_t u = t->universe;
  *l = (struct lru){.t = t, .free_blocks = num_blocks, .lifo = lifo};
  l->prev = malloc((u + 1) * sizeof(*l->prev));
  l->next = malloc((u + 1) * sizeof(*l->next));
  l->present = calloc(u, sizeof(*l->present));
  if (lifo) {
    l->owned = calloc(u, sizeof(*l->owned));
    l->stack = malloc((size_t)num_blocks * sizeof(*l->stack));
  }
  if (l->prev == NULL || l->next == NULL || l->present == NULL ||
      (lifo && (l->owned == NULL || l->stack == NULL))) {
    lru_fini(l);
    return -1;
  }
  l->prev[u] = l->next[u] = u;
  /* Pushed high ids first, so the first pops hand out 0, 1, 2, ... */
  for (uint32_t b = 0; lifo && b < num_blocks; b++)
    l->stack[l->top++] = num_blocks - 1 - b;
  return 0;
}

static void lru_unlink(struct lru *l, uint32_t k)
{
  l->next[l->prev[k]] = l->next[k];
  l->prev[l->next[k]] = l->prev[k];
}

static void lru_front(struct lru *l, uint32_t k)
{
  uint32_t s = l->t->universe;
  l->next[k] = l->next[s];
  l->prev[k] = s;
  l->prev[l->next[s]] = k;
  l->next[s] = k;
}

/* An evicted entry's blocks go back last first, so that popping them again
 * yields them in their old order: the most contiguity a LIFO stack keeps. */
static void lru_evict(struct lru *l)
{
  uint32_t k = l->prev[l->t->universe];
  uint32_t n = l->t->blocks[k];
  lru_unlink(l, k);
  l->present[k] = false;
  l->free_blocks += n;
  if (!l->lifo)
    return;
  for (uint32_t j = n; j-- > 0;)
    l->stack[l->top++] = l->owned[k][j];
  free(l->owned[k]);
  l->owned[k] = NULL;
}

/* Pops an entry's blocks one by one; returns its runs (0: out of memory). */
static uint32_t lifo_alloc(struct lru *l, uint32_t k)
{
  uint32_t n = l->t->blocks[k], runs = 1;
  uint32_t *ids = malloc(n * sizeof(*ids));
  if (ids == NULL)
    return 0;
  for (uint32_t j = 0; j < n; j++) {
    ids[j] = l->stack[--l->top];
    if (j > 0 && ids[j] != ids[j - 1] + 1)
      runs++;
  }
  l->owned[k] = ids;
  return runs;
}

/* Makes room for key k by evicting least recent entries, then takes its
 * blocks; returns its runs (1 without lifo; 0: out of memory). */
static uint32_t lru_insert(struct lru *l, uint32_t k, bool *evicted)
{
  *evicted = false;
  while (l->free_blocks < l->t->blocks[k]) {
    lru_evict(l);
    *evicted = true;
  }
  l->free_blocks -= l->t->blocks[k];
  l->present[k] = true;
  lru_front(l, k);
  return l->lifo ? lifo_alloc(l, k) : 1;
}

static void lru_touch(struct lru *l, uint32_t k)
{
  lru_unlink(l, k);
  lru_front(l, k);
}

/* One request: the key itself, then the consumer's look-up (a use that
 * counts for recency, as the directory's look-ups do). */
static int sim_request(struct lru *l, uint64_t i, struct sim_result *r)
{
  const struct trace *t = l->t;
  uint32_t k = t->key[i], peek = t->peek[i];
  bool measured = i >= t->warmup, evicted;
  uint64_t cost = measured && t->cost != NULL ? t->cost[k] : 0;
  r->cost_all += cost;
  if (l->present[k]) {
    lru_touch(l, k);
    r->hits += measured;
    r->cost_saved += cost;
  } else {
    uint32_t runs = lru_insert(l, k, &evicted);
    if (runs == 0)
      return -1;
    if (evicted && r->first_eviction == t->n)
      r->first_eviction = i;
    r->allocated += measured;
    r->runs += measured ? runs : 0;
    r->single_run += measured && runs == 1;
  }
  r->requests += measured;
  if (peek != TRACE_NO_KEY && l->present[peek])
    lru_touch(l, peek);
  return 0;
}

int sim_lru(const struct trace *t, uint32_t num_blocks, bool lifo, struct sim_result *out)
{
  struct lru l;
  *out = (struct sim_result){.first_eviction = t->n};
  if (lru_init(&l, t, num_blocks, lifo) != 0)
    return -1;
  int rc = 0;
  for (uint64_t i = 0; i < t->n && rc == 0; i++)
    rc = sim_request(&l, i, out);
  lru_fini(&l);
  return rc;
}
