/* SPDX-License-Identifier: Apache-2.0 */
/*
 * load_plan.h - the order a step's loads are copied in: by first block, so
 * that neighbours in region and destination coalesce, unless the host's order
 * serves as well. Inline: block_calls.c's checking pass calls it once per entry.
 */
#ifndef ECC_LOAD_PLAN_H
#define ECC_LOAD_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/engine/descriptors.h"
#include "core/transfer.h"
#include "ecc_plugin_v1.h"

/* What the host's order tells, entry by entry. */
struct load_order {
  bool blocks_ascend; /* no entry's first block below the one before */
  bool dsts_ascend;   /* no destination starting before the previous one ends */
  uint64_t prev_key;  /* the previous entry's sort key */
  uint64_t prev_end;  /* where the previous entry's destination ends */
};

/* Zeros, so that the first entry ascends from both whatever it holds. */
static inline void load_order_init(struct load_order *o)
{
  o->blocks_ascend = true;
  o->dsts_ascend = true;
  o->prev_key = 0;
  o->prev_end = 0;
}

/* Entry `i` (first block, destination, bytes that reach it; dst + bytes
 * must not wrap). Returns its sort key: the first block above the index,
 * so equal first blocks keep the host's order and the key names its entry. */
static inline uint64_t load_order_add(struct load_order *o, size_t i, uint32_t first_block,
                                      uint64_t dst, uint64_t bytes)
{
  uint64_t key = ((uint64_t)first_block << 32) | (uint64_t)i;
  if (key < o->prev_key)
    o->blocks_ascend = false;
  if (dst < o->prev_end)
    o->dsts_ascend = false;
  o->prev_key = key;
  o->prev_end = dst + bytes;
  return key;
}

/* Whether sorting can merge more than the host's order. Not when the blocks
 * ascend (the sort would keep the order), nor when the destinations ascend
 * without overlap: two entries then merge only if one's destination ends
 * where the next's begins, and those are neighbours in the host's order. */
static inline bool load_order_sorts(const struct load_order *o)
{
  return !o->blocks_ascend && !o->dsts_ascend;
}

/* The entry a sort key names. */
static inline uint32_t load_key_entry(uint64_t key)
{
  return (uint32_t)key;
}

/* Stable LSD radix sort of keys by their high 32 bits, a byte per pass,
 * skipping the bytes every key shares (one pass over the keys finds them:
 * block ids rarely use all 32 bits). Returns keys or tmp, whichever holds
 * the result. A step may load thousands of entries, and a comparison sort
 * of them costs more than building their descriptors. */
static inline uint64_t *load_sort(uint64_t *keys, uint64_t *tmp, size_t n)
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

static inline void load_plan_write_entry(struct desc_writer *w, const ecc_load_entry_v1_t *e,
                                         const struct done_rec *rec, size_t i, uint64_t base,
                                         uint64_t bs)
{
  desc_write_entry(w, e[i].dst, base, bs, e[i].block_ids, rec[i].nbytes, 0);
}

/* The descriptors of n checked loads, entry i moving rec[i].nbytes from its
 * blocks (block b at base + b * bs) to e[i].dst: in the order of the
 * `sorted` keys, or in the host's order when sorted is NULL. Neighbours on
 * both sides merge as desc_write_entry merges them. */
static inline void load_plan_write(struct desc_writer *w, const ecc_load_entry_v1_t *e,
                                   const struct done_rec *rec, size_t n, const uint64_t *sorted,
                                   uint64_t base, uint64_t bs)
{
  for (size_t k = 0; k < n; k++)
    load_plan_write_entry(w, e, rec, sorted != NULL ? load_key_entry(sorted[k]) : k, base, bs);
}

/* The same from plan position `next` on, one entry at least, then until the
 * writer's descriptors move `goal` bytes or more. Returns the first position
 * not written. */
static inline size_t load_plan_write_part(struct desc_writer *w, const ecc_load_entry_v1_t *e,
                                          const struct done_rec *rec, size_t n,
                                          const uint64_t *sorted, uint64_t base, uint64_t bs,
                                          size_t next, uint64_t goal)
{
  while (next < n) {
    load_plan_write_entry(w, e, rec, sorted != NULL ? load_key_entry(sorted[next]) : next, base,
                          bs);
    next++;
    if (w->bytes >= goal)
      break;
  }
  return next;
}

/* A step's plan handed to an engine that copies it in parts (engine.h's
 * desc_feed): the arguments of load_plan_write, and how far it has got.
 * It lives in the frame of the call that submits: the engine calls it only
 * inside submit, and the entries are the caller's, valid only during it. */
struct load_feed {
  struct desc_feed feed; /* first, so the engine's pointer is the feed's */
  const ecc_load_entry_v1_t *e;
  const struct done_rec *rec;
  const uint64_t *sorted;
  size_t n, next;
  uint64_t base, bs;
};

static inline bool load_feed_more(struct desc_feed *f, struct desc_buf *d, uint64_t want)
{
  struct load_feed *lf = (struct load_feed *)(void *)f;
  struct desc_writer w;
  desc_writer_open(d, &w);
  uint64_t goal = want > UINT64_MAX - w.bytes ? UINT64_MAX : w.bytes + want;
  lf->next =
      load_plan_write_part(&w, lf->e, lf->rec, lf->n, lf->sorted, lf->base, lf->bs, lf->next, goal);
  desc_writer_close(d, &w);
  return lf->next < lf->n;
}

/* A feed of the n checked loads that moves `bytes` in all, of which nothing
 * is written yet. */
static inline void load_feed_init(struct load_feed *lf, const ecc_load_entry_v1_t *e,
                                  const struct done_rec *rec, size_t n, const uint64_t *sorted,
                                  uint64_t base, uint64_t bs, uint64_t bytes)
{
  lf->feed.more = load_feed_more;
  lf->feed.bytes = bytes;
  lf->e = e;
  lf->rec = rec;
  lf->sorted = sorted;
  lf->n = n;
  lf->next = 0;
  lf->base = base;
  lf->bs = bs;
}

#endif /* ECC_LOAD_PLAN_H */
