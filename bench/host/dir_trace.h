/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_trace.h - the request trace of ecc-dir-bench (entry sizes, skewed key
 * popularity, the consumer's look-ups) and the reference caches the same
 * trace runs through: exact LRU, alone and over a LIFO free stack of blocks.
 */
#ifndef ECC_DIR_TRACE_H
#define ECC_DIR_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A request after which nothing is looked up. */
#define TRACE_NO_KEY UINT32_MAX

struct trace_params {
  uint64_t requests;
  uint32_t num_blocks; /* what the cache holds */
  uint64_t block_size;
  uint32_t min_blocks; /* entry sizes: log-uniform between these */
  uint32_t max_blocks;
  double zipf_s;          /* popularity of key rank r is 1 / (r + 1)^s */
  double universe_factor; /* keys per entry the cache holds */
  uint32_t peek_depth;    /* look-ups pick one of this many last requests */
  uint64_t seed;
};

struct trace {
  uint64_t n;           /* requests */
  uint32_t *key;        /* key id of request i */
  uint32_t *peek;       /* key id looked up after request i, or TRACE_NO_KEY */
  uint32_t universe;    /* key ids are 0 .. universe - 1 */
  uint32_t *blocks;     /* blocks of each key's entry */
  uint64_t *bytes;      /* its bytes (the last block partly filled) */
  double mean_blocks;   /* over the key universe */
  uint64_t warmup;      /* requests before exact LRU first evicts */
  const uint64_t *cost; /* encoder microseconds per key id, or NULL
                         * (set by the caller; trace_free leaves it) */
};

/* What a reference cache did over the requests from the warm-up on. */
struct sim_result {
  uint64_t requests;
  uint64_t hits;
  uint64_t allocated;      /* entries given blocks */
  uint64_t single_run;     /* of those, entries in one run of block ids */
  uint64_t runs;           /* their runs, summed */
  uint64_t first_eviction; /* request that first evicted (n if none) */
  uint64_t cost_all;       /* with t->cost: the cost of every request */
  uint64_t cost_saved;     /* and of those that hit */
};

/* 0, or -1 (out of memory, or parameters that make no trace). */
int trace_build(struct trace *t, const struct trace_params *p);
void trace_free(struct trace *t);
/* The key string of key id `id`. */
void trace_key_name(uint32_t id, char *buf, size_t cap);

/* Exact LRU over whole entries with `num_blocks` of capacity; with `lifo`,
 * blocks come one at a time off a LIFO stack of free block ids and an
 * evicted entry's go back onto it, and each entry's runs are counted. */
int sim_lru(const struct trace *t, uint32_t num_blocks, bool lifo, struct sim_result *out);

#endif /* ECC_DIR_TRACE_H */
