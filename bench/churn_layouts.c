/* SPDX-License-Identifier: Apache-2.0 */
/*
 * churn_layouts.c - the block layouts a serving cache leaves behind once
 * eviction has run for a while: entries placed by the directory
 * (core/directory/directory.c), and by a LIFO stack of free blocks with exact
 * LRU eviction, as upstream's scheduler keeps them, after the same churn.
 */
#include "bench/churn_layouts.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/directory/directory.h"

/* Requests of the churn, in region capacities (of mean-sized entries). */
#define CHURN_TURNS 16u
/* Keys per entry the region holds: most requests miss and evict. */
#define UNIVERSE_FACTOR 4u

struct churn {
  uint32_t usable, entry_blocks;
  uint32_t universe;
  uint32_t *size; /* blocks of each key's entry */
  uint64_t requests;
  uint64_t rng;
};

static uint64_t next_rnd(struct churn *c)
{
  c->rng ^= c->rng << 13;
  c->rng ^= c->rng >> 7;
  c->rng ^= c->rng << 17;
  return c->rng;
}

/* Entry sizes log-uniform between a quarter and four times the bench's
 * entry, as images of different resolutions give. */
static int churn_init(struct churn *c, uint32_t usable, uint32_t entry_blocks, uint64_t seed)
{
  memset(c, 0, sizeof(*c));
  c->usable = usable;
  c->entry_blocks = entry_blocks;
  c->rng = seed * 0x9E3779B97F4A7C15ull | 1;
  uint32_t lo = entry_blocks / 4 ? entry_blocks / 4 : 1;
  uint64_t hi = (uint64_t)entry_blocks * 4 < usable / 16 ? (uint64_t)entry_blocks * 4 : usable / 16;
  if (hi < lo)
    hi = lo;
  double mean = 0;
  uint32_t capacity = usable / (entry_blocks ? entry_blocks : 1);
  c->universe = UNIVERSE_FACTOR * (capacity ? capacity : 1);
  c->size = malloc(c->universe * sizeof(uint32_t));
  if (c->size == NULL)
    return -1;
  for (uint32_t k = 0; k < c->universe; k++) {
    double u = (double)(next_rnd(c) % 1000000) / 1e6;
    double s = (double)lo * __builtin_exp(u * __builtin_log((double)hi / (double)lo));
    c->size[k] = (uint32_t)s < lo ? lo : (uint32_t)s;
    mean += c->size[k];
  }
  mean /= c->universe;
  c->requests = (uint64_t)(CHURN_TURNS * (double)usable / mean);
  return 0;
}

static uint32_t runs_of(const uint32_t *ids, uint32_t n)
{
  uint32_t runs = n > 0;
  for (uint32_t i = 1; i < n; i++)
    runs += ids[i] != ids[i - 1] + 1;
  return runs;
}

/* ---- the directory ---------------------------------------------------- */

static int dir_churn(struct dir *d, struct churn *c, uint64_t bs)
{
  char key[32], why[256];
  for (uint64_t r = 0; r < c->requests; r++) {
    uint32_t k = (uint32_t)(next_rnd(c) % c->universe);
    snprintf(key, sizeof(key), "churn-%u", k);
    int outcome;
    struct dir_entry_info info;
    int rc = dir_reserve(d, key, (uint64_t)c->size[k] * bs, &outcome, &info, why, sizeof(why));
    if (rc == ECC_OK && outcome == DIR_RESERVED)
      rc = dir_publish(d, info.ref, why, sizeof(why));
    if (rc != ECC_OK && rc != ECC_ERR_BUSY) {
      fprintf(stderr, "churn_layouts: directory churn: %s\n", why);
      return -1;
    }
  }
  return 0;
}

/* One set entry: reserved, published and pinned, so that the later sets
 * cannot evict it; its blocks in entry order. */
static int dir_place(struct dir *d, uint64_t bs, const char *key, uint32_t n, uint32_t *ids)
{
  char why[256];
  int outcome;
  struct dir_entry_info info;
  int rc = dir_reserve(d, key, (uint64_t)n * bs, &outcome, &info, why, sizeof(why));
  if (rc == ECC_OK && outcome != DIR_RESERVED)
    rc = ECC_ERR_INVALID;
  if (rc == ECC_OK)
    rc = dir_publish(d, info.ref, why, sizeof(why));
  bool found = false;
  struct dir_pin_ref pin;
  if (rc == ECC_OK)
    rc = dir_lookup(d, &key, 1, 1, &found, NULL, &pin, why, sizeof(why));
  if (rc != ECC_OK || !found) {
    fprintf(stderr, "churn_layouts: cannot place %s: %s\n", key, why);
    return -1;
  }
  uint32_t at = 0;
  for (uint32_t r = 0; r < info.n_runs; r++)
    for (uint32_t j = 0; j < info.runs[r].count && at < n; j++)
      ids[at++] = info.runs[r].first + j;
  return 0;
}

int churn_layout_directory(const struct churn_request *q, uint32_t **ids, double *runs_per_entry)
{
  /* Slots for the churn's entries (a quarter of the bench's entry at the
   * least) and for every set entry pinned at once. */
  uint32_t least = q->entry_blocks / 4 ? q->entry_blocks / 4 : 1;
  struct dir_params p = {.num_blocks = q->usable,
                         .block_size = q->block_size,
                         .max_entries = q->usable / least + q->n_sets * q->entries + 64};
  size_t bytes = dir_bytes(&p);
  void *mem = NULL;
  struct dir d;
  struct churn c;
  memset(&c, 0, sizeof(c));
  char why[256];
  int rc = -1;
  if (bytes == 0 || posix_memalign(&mem, 64, bytes) != 0 ||
      churn_init(&c, q->usable, q->entry_blocks, q->seed) != 0)
    goto out;
  if (dir_format(mem, bytes, &p, why, sizeof(why)) != ECC_OK ||
      dir_attach(&d, mem, bytes, &p, why, sizeof(why)) != ECC_OK ||
      dir_churn(&d, &c, q->block_size))
    goto out;
  uint64_t runs = 0;
  for (uint32_t s = 0; s < q->n_sets; s++)
    for (uint32_t i = 0; i < q->entries; i++) {
      char key[32];
      uint32_t *e = ids[s] + (size_t)i * q->entry_blocks;
      snprintf(key, sizeof(key), "set-%u-%u", s, i);
      if (dir_place(&d, q->block_size, key, q->entry_blocks, e) != 0)
        goto out;
      runs += runs_of(e, q->entry_blocks);
    }
  *runs_per_entry = (double)runs / ((double)q->n_sets * q->entries);
  rc = 0;
out:
  free(c.size);
  free(mem);
  return rc;
}

/* ---- a LIFO stack of free blocks, exact LRU ------------------------------- */

struct lifo {
  uint32_t *stack; /* free block ids; the top is popped first */
  uint32_t top;
  uint32_t **held; /* per key: its blocks, or NULL */
  uint64_t *used;  /* per key: when last requested */
  uint64_t clock;
};

/* Evicts the least recently used entry: its blocks go back last first, so
 * a freed entry comes back in its old order (the best a stack allows). */
static void lifo_evict(struct lifo *l, const struct churn *c)
{
  uint32_t victim = UINT32_MAX;
  for (uint32_t k = 0; k < c->universe; k++)
    if (l->held[k] != NULL && (victim == UINT32_MAX || l->used[k] < l->used[victim]))
      victim = k;
  for (uint32_t j = c->size[victim]; j > 0; j--)
    l->stack[l->top++] = l->held[victim][j - 1];
  free(l->held[victim]);
  l->held[victim] = NULL;
}

/* n blocks off the stack into ids, evicting until there are enough; -1 if
 * even an empty cache has too few. */
static int lifo_take(struct lifo *l, const struct churn *c, uint32_t n, uint32_t *ids)
{
  while (l->top < n) {
    bool any = false;
    for (uint32_t k = 0; k < c->universe && !any; k++)
      any = l->held[k] != NULL;
    if (!any)
      return -1;
    lifo_evict(l, c);
  }
  for (uint32_t j = 0; j < n; j++)
    ids[j] = l->stack[--l->top];
  return 0;
}

static int lifo_churn(struct lifo *l, struct churn *c)
{
  for (uint64_t r = 0; r < c->requests; r++) {
    uint32_t k = (uint32_t)(next_rnd(c) % c->universe);
    l->used[k] = ++l->clock;
    if (l->held[k] != NULL)
      continue;
    l->held[k] = malloc(c->size[k] * sizeof(uint32_t));
    if (l->held[k] == NULL || lifo_take(l, c, c->size[k], l->held[k]) != 0)
      return -1;
  }
  return 0;
}

int churn_layout_lifo(const struct churn_request *q, uint32_t **ids, double *runs_per_entry)
{
  struct churn c;
  struct lifo l = {0};
  int rc = -1;
  if (churn_init(&c, q->usable, q->entry_blocks, q->seed) != 0)
    return -1;
  l.stack = malloc(q->usable * sizeof(uint32_t));
  l.held = calloc(c.universe, sizeof(*l.held));
  l.used = calloc(c.universe, sizeof(*l.used));
  if (l.stack == NULL || l.held == NULL || l.used == NULL)
    goto out;
  for (uint32_t b = 0; b < q->usable; b++)
    l.stack[l.top++] = q->usable - 1 - b; /* block 0 on top */
  if (lifo_churn(&l, &c) != 0)
    goto out;
  uint64_t runs = 0;
  for (uint32_t s = 0; s < q->n_sets; s++)
    for (uint32_t i = 0; i < q->entries; i++) {
      uint32_t *e = ids[s] + (size_t)i * q->entry_blocks;
      if (lifo_take(&l, &c, q->entry_blocks, e) != 0)
        goto out;
      runs += runs_of(e, q->entry_blocks);
    }
  *runs_per_entry = (double)runs / ((double)q->n_sets * q->entries);
  rc = 0;
out:
  for (uint32_t k = 0; l.held != NULL && k < c.universe; k++)
    free(l.held[k]);
  free(l.held);
  free(l.used);
  free(l.stack);
  free(c.size);
  return rc;
}
