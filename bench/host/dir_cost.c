/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_cost.c - the cost scenario of ecc-dir-bench (dir_cost.h). Each key is
 * encoded by one of two encoders whose cost per token differs 4x, and
 * costs grow as tokens^1.3 (attention's share of a vision encoder): cost
 * in microseconds = factor x blocks^1.3. Every request is a reserve with
 * that cost (found ready: a hit, which saves its cost; reserved: a miss,
 * published at once), then the consumer's look-up of a recent key, as in
 * the churn trace. The same requests run through exact LRU and exact
 * greedy-dual-size-frequency (GDSF: the entry of least L + uses x cost /
 * size goes first, L being the last evicted entry's value), the policy
 * "cost" approximates. Figures leave out the warm-up, as the churn's do.
 */
#include "bench/host/dir_cost.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/host/dir_trace.h"
#include "core/directory/directory.h"

#define CO_BLOCK 3072u
#define NOT_IN_HEAP UINT32_MAX

/* Which encoder a key's image goes to: half the keys each, independent of
 * size and popularity. */
static uint64_t encoder_factor(uint32_t k)
{
  return ((uint64_t)k * 0x9E3779B97F4A7C15ull) >> 63 ? 4 : 1;
}

static uint64_t *make_costs(const struct trace *t)
{
  uint64_t *cost = malloc(t->universe * sizeof(*cost));
  for (uint32_t k = 0; cost != NULL && k < t->universe; k++)
    cost[k] = (uint64_t)llround((double)encoder_factor(k) * pow(t->blocks[k], 1.3));
  return cost;
}

/* ---- exact GDSF: a binary min-heap of the present keys by value ---- */

struct gdsf {
  const struct trace *t;
  double *value, aging; /* value per key; L */
  uint32_t *uses, *heap, *pos;
  uint32_t size;
  uint64_t free_blocks;
};

static double gdsf_value(const struct gdsf *g, uint32_t k)
{
  return g->aging + (double)g->uses[k] * (double)g->t->cost[k] / g->t->blocks[k];
}

static void heap_swap(struct gdsf *g, uint32_t i, uint32_t j)
{
  uint32_t a = g->heap[i], b = g->heap[j];
  g->heap[i] = b;
  g->heap[j] = a;
  g->pos[b] = i;
  g->pos[a] = j;
}

static void heap_up(struct gdsf *g, uint32_t i)
{
  while (i > 0 && g->value[g->heap[(i - 1) / 2]] > g->value[g->heap[i]]) {
    heap_swap(g, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_down(struct gdsf *g, uint32_t i)
{
  for (;;) {
    uint32_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < g->size && g->value[g->heap[l]] < g->value[g->heap[m]])
      m = l;
    if (r < g->size && g->value[g->heap[r]] < g->value[g->heap[m]])
      m = r;
    if (m == i)
      return;
    heap_swap(g, i, m);
    i = m;
  }
}

/* A use of a present key: its value only grows, so it sinks. */
static void gdsf_use(struct gdsf *g, uint32_t k)
{
  g->uses[k]++;
  g->value[k] = gdsf_value(g, k);
  heap_down(g, g->pos[k]);
}

static void gdsf_evict_min(struct gdsf *g)
{
  uint32_t k = g->heap[0];
  g->aging = g->value[k];
  g->free_blocks += g->t->blocks[k];
  heap_swap(g, 0, --g->size);
  g->pos[k] = NOT_IN_HEAP;
  heap_down(g, 0);
}

static void gdsf_insert(struct gdsf *g, uint32_t k)
{
  while (g->free_blocks < g->t->blocks[k])
    gdsf_evict_min(g);
  g->free_blocks -= g->t->blocks[k];
  g->uses[k] = 1;
  g->value[k] = gdsf_value(g, k);
  g->heap[g->size] = k;
  g->pos[k] = g->size++;
  heap_up(g, g->pos[k]);
}

static int sim_gdsf(const struct trace *t, uint32_t num_blocks, struct sim_result *r)
{
  uint32_t u = t->universe;
  struct gdsf g = {.t = t, .free_blocks = num_blocks};
  g.value = calloc(u, sizeof(*g.value));
  g.uses = calloc(u, sizeof(*g.uses));
  g.heap = malloc(u * sizeof(*g.heap));
  g.pos = malloc(u * sizeof(*g.pos));
  int rc = g.value && g.uses && g.heap && g.pos ? 0 : -1;
  for (uint32_t k = 0; rc == 0 && k < u; k++)
    g.pos[k] = NOT_IN_HEAP;
  *r = (struct sim_result){.first_eviction = t->n};
  for (uint64_t i = 0; rc == 0 && i < t->n; i++) {
    uint32_t k = t->key[i], peek = t->peek[i];
    bool measured = i >= t->warmup, hit = g.pos[k] != NOT_IN_HEAP;
    if (hit)
      gdsf_use(&g, k);
    else
      gdsf_insert(&g, k);
    r->requests += measured;
    r->hits += measured && hit;
    r->cost_all += measured ? t->cost[k] : 0;
    r->cost_saved += measured && hit ? t->cost[k] : 0;
    if (peek != TRACE_NO_KEY && g.pos[peek] != NOT_IN_HEAP)
      gdsf_use(&g, peek);
  }
  free(g.value);
  free(g.uses);
  free(g.heap);
  free(g.pos);
  return rc;
}

/* ---- the directory, in one process ---- */

struct cost_dir {
  void *mem;
  size_t bytes;
  struct dir d;
  char why[256];
};

static int run_open(struct cost_dir *x, uint32_t num_blocks, uint32_t policy)
{
  struct dir_params p = {.num_blocks = num_blocks, .block_size = CO_BLOCK, .policy = policy};
  x->bytes = dir_bytes(&p);
  x->mem = x->bytes == 0
               ? MAP_FAILED
               : mmap(NULL, x->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (x->mem == MAP_FAILED) {
    snprintf(x->why, sizeof(x->why), "cannot map a directory of %u blocks", num_blocks);
    return -1;
  }
  if (dir_format(x->mem, x->bytes, &p, x->why, sizeof(x->why)) != ECC_OK ||
      dir_attach(&x->d, x->mem, x->bytes, &p, x->why, sizeof(x->why)) != ECC_OK) {
    munmap(x->mem, x->bytes);
    return -1;
  }
  return 0;
}

/* One request: reserve with its cost (a miss is published at once). */
static int run_reserve(struct cost_dir *x, const struct trace *t, uint64_t i, struct sim_result *r)
{
  uint32_t k = t->key[i];
  char key[96];
  trace_key_name(k, key, sizeof(key));
  struct dir_meta meta = {.cost_us = t->cost[k]};
  struct dir_entry_info info;
  int outcome = -1;
  if (dir_reserve_ex(&x->d, key, t->bytes[k], &meta, &outcome, &info, x->why, sizeof(x->why)) !=
      ECC_OK)
    return -1;
  bool measured = i >= t->warmup, hit = outcome == DIR_FOUND_READY;
  if (outcome == DIR_RESERVED) {
    if (dir_publish(&x->d, info.ref, x->why, sizeof(x->why)) != ECC_OK)
      return -1;
    r->allocated += measured;
    r->single_run += measured && info.n_runs == 1;
    r->runs += measured ? info.n_runs : 0;
  } else if (!hit) {
    snprintf(x->why, sizeof(x->why), "%s found being written in a single process", key);
    return -1;
  }
  r->requests += measured;
  r->hits += measured && hit;
  r->cost_all += measured ? t->cost[k] : 0;
  r->cost_saved += measured && hit ? t->cost[k] : 0;
  return 0;
}

/* The consumer's look-up of a recent key: a use, then its pin let go. */
static int run_lookup(struct cost_dir *x, const struct trace *t, uint64_t i)
{
  if (t->peek[i] == TRACE_NO_KEY)
    return 0;
  char key[96];
  trace_key_name(t->peek[i], key, sizeof(key));
  const char *kp = key;
  bool found = false;
  struct dir_pin_ref pin;
  if (dir_lookup(&x->d, &kp, 1, 1, &found, NULL, &pin, x->why, sizeof(x->why)) != ECC_OK)
    return -1;
  return found && dir_unpin(&x->d, pin, x->why, sizeof(x->why)) != ECC_OK ? -1 : 0;
}

static int sim_dir(const struct trace *t, uint32_t num_blocks, uint32_t policy,
                   struct sim_result *r)
{
  struct cost_dir x;
  *r = (struct sim_result){.first_eviction = t->n};
  int rc = run_open(&x, num_blocks, policy);
  for (uint64_t i = 0; rc == 0 && i < t->n; i++)
    rc = run_reserve(&x, t, i, r) == 0 && run_lookup(&x, t, i) == 0 ? 0 : -1;
  if (rc == 0 && dir_check(&x.d, x.why, sizeof(x.why)) != ECC_OK)
    rc = -1;
  if (rc != 0)
    fprintf(stderr, "ecc-dir-bench: cost: %s\n", x.why);
  if (x.bytes != 0 && x.mem != MAP_FAILED)
    munmap(x.mem, x.bytes);
  return rc;
}

/* ---- the lines ---- */

static double pct(uint64_t part, uint64_t whole)
{
  return whole == 0 ? 0 : 100.0 * (double)part / (double)whole;
}

static const char *met(bool ok)
{
  return ok ? "met" : "MISSED";
}

static void print_line(double alpha, const char *policy, const struct sim_result *d,
                       const struct sim_result *lru, const struct sim_result *gdsf)
{
  printf("cost: alpha=%.1f policy=%s cost_saved=%.1f%% exact_lru_cost_saved=%.1f%% "
         "exact_gdsf_cost_saved=%.1f%% hit_rate=%.1f%% exact_lru_hit_rate=%.1f%% "
         "single_run=%.1f%%\n",
         alpha, policy, pct(d->cost_saved, d->cost_all), pct(lru->cost_saved, lru->cost_all),
         pct(gdsf->cost_saved, gdsf->cost_all), pct(d->hits, d->requests),
         pct(lru->hits, lru->requests), pct(d->single_run, d->allocated));
}

static void print_targets(double alpha, const struct sim_result *d, const struct sim_result *lru)
{
  double saved = pct(d->cost_saved, d->cost_all), lru_saved = pct(lru->cost_saved, lru->cost_all);
  double hit = pct(d->hits, d->requests), lru_hit = pct(lru->hits, lru->requests);
  double single = pct(d->single_run, d->allocated);
  printf("cost targets (alpha %.1f): saved %.1f%% against exact LRU's %.1f%% + 5 (%s), hit rate "
         "%.1f%% against %.1f%% - 2 (%s), single run %.1f%% (>= 95: %s)\n",
         alpha, saved, lru_saved, met(saved >= lru_saved + 5), hit, lru_hit,
         met(hit >= lru_hit - 2), single, met(single >= 95));
}

int cost_run(double alpha, uint32_t num_blocks, uint64_t requests, uint64_t seed, bool judged)
{
  struct trace_params tp = {.requests = requests,
                            .num_blocks = num_blocks,
                            .block_size = CO_BLOCK,
                            .min_blocks = 64,
                            .max_blocks = 4096,
                            .zipf_s = alpha,
                            .universe_factor = 4.0,
                            .peek_depth = 16,
                            .seed = seed};
  struct trace t;
  if (trace_build(&t, &tp) != 0)
    return -1;
  uint64_t *cost = make_costs(&t);
  t.cost = cost;
  struct sim_result lru, gdsf, by_cost, by_lru;
  int rc = cost == NULL || sim_lru(&t, num_blocks, false, &lru) != 0 ||
                   sim_gdsf(&t, num_blocks, &gdsf) != 0 ||
                   sim_dir(&t, num_blocks, DIR_POLICY_COST, &by_cost) != 0 ||
                   sim_dir(&t, num_blocks, DIR_POLICY_LRU, &by_lru) != 0
               ? -1
               : 0;
  if (rc == 0) {
    print_line(alpha, "cost", &by_cost, &lru, &gdsf);
    print_line(alpha, "lru", &by_lru, &lru, &gdsf);
    if (judged)
      print_targets(alpha, &by_cost, &lru);
  }
  free(cost);
  trace_free(&t);
  return rc;
}
