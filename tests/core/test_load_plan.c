/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_load_plan.c - load planning on its own (load_plan.h): the radix
 * sort's order and stability, when the host's order is kept, which
 * neighbours coalesce once the entries are in plan order, and the plan
 * written in parts for an engine that copies while it is written.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/load_plan.h"

#define BS 16u
#define BASE 0x100000ull
#define DST 0x900000ull
#define MAX_ENTRIES 4096u

/* ---- the sort ---- */

static int cmp_u64(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts keys made by load_order_add from these first blocks, and checks
 * the result against a comparison sort of the same keys: the index in the
 * low half makes every key distinct, so matching it means sorted by first
 * block with equal blocks in index order. */
static void expect_sorted(const uint32_t *first, size_t n)
{
  static uint64_t keys[MAX_ENTRIES], tmp[MAX_ENTRIES], want[MAX_ENTRIES];
  struct load_order o;
  load_order_init(&o);
  for (size_t i = 0; i < n; i++)
    keys[i] = want[i] = load_order_add(&o, i, first[i], DST + i * BS, BS);
  qsort(want, n, sizeof(want[0]), cmp_u64);
  const uint64_t *got = load_sort(keys, tmp, n);
  cr_assert(got == keys || got == tmp, "the result is in neither buffer");
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(got[i], want[i], "position %zu: entry %u (block %u), expected entry %u (block %u)",
                 i, load_key_entry(got[i]), (unsigned)(got[i] >> 32), load_key_entry(want[i]),
                 (unsigned)(want[i] >> 32));
}

Test(load_plan, sort_orders_by_first_block_and_keeps_host_order_among_equals)
{
  uint32_t first[] = {7, 3, 7, 1, 3, 7, 0, 1};
  expect_sorted(first, sizeof(first) / sizeof(first[0]));
  /* Spelled out: equal blocks stay in the host's order. */
  static uint64_t keys[8], tmp[8];
  struct load_order o;
  load_order_init(&o);
  for (size_t i = 0; i < 8; i++)
    keys[i] = load_order_add(&o, i, first[i], DST, BS);
  const uint64_t *got = load_sort(keys, tmp, 8);
  const uint32_t want[] = {6, 3, 7, 1, 4, 0, 2, 5};
  for (size_t k = 0; k < 8; k++)
    cr_expect_eq(load_key_entry(got[k]), want[k], "position %zu: entry %u, expected %u", k,
                 load_key_entry(got[k]), want[k]);
}

Test(load_plan, sort_handles_every_byte_of_the_block_id)
{
  /* Blocks that differ in one byte only, in each byte in turn, and in all
   * of them: passes are skipped for bytes every key shares. */
  static uint32_t first[MAX_ENTRIES];
  unsigned seed = 1;
  for (unsigned byte = 0; byte < 4; byte++) {
    for (size_t i = 0; i < 512; i++)
      first[i] = 0x5a5a5a5au ^ ((uint32_t)(rand_r(&seed) & 0xff) << (8 * byte));
    expect_sorted(first, 512);
  }
  for (size_t i = 0; i < MAX_ENTRIES; i++)
    first[i] = (uint32_t)rand_r(&seed) ^ ((uint32_t)rand_r(&seed) << 16);
  expect_sorted(first, MAX_ENTRIES);
  /* Few distinct values among many entries: long runs of equal blocks. */
  for (size_t i = 0; i < MAX_ENTRIES; i++)
    first[i] = (uint32_t)(rand_r(&seed) % 5) << 24;
  expect_sorted(first, MAX_ENTRIES);
}

Test(load_plan, sort_of_equal_or_single_keys_changes_nothing)
{
  uint32_t same[64];
  for (size_t i = 0; i < 64; i++)
    same[i] = 42;
  expect_sorted(same, 64);
  expect_sorted(same, 1);
}

/* ---- the "sort needed" decision ---- */

struct entry_spec {
  uint32_t first;
  uint64_t dst; /* offset from DST */
  uint64_t bytes;
};

static bool sorts(const struct entry_spec *s, size_t n)
{
  struct load_order o;
  load_order_init(&o);
  for (size_t i = 0; i < n; i++)
    load_order_add(&o, i, s[i].first, DST + s[i].dst, s[i].bytes);
  return load_order_sorts(&o);
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

Test(load_plan, no_sort_while_blocks_ascend)
{
  /* Destinations in any order, even overlapping. */
  struct entry_spec up[] = {{1, 300, 16}, {2, 0, 16}, {9, 8, 16}, {40, 100, 16}};
  cr_expect_not(sorts(up, N_OF(up)));
  struct entry_spec equal[] = {{5, 64, 16}, {5, 0, 16}, {5, 32, 16}};
  cr_expect_not(sorts(equal, N_OF(equal)), "equal first blocks count as ascending");
}

Test(load_plan, no_sort_while_destinations_ascend_without_overlap)
{
  struct entry_spec apart[] = {{9, 0, 16}, {3, 100, 16}, {7, 500, 32}};
  cr_expect_not(sorts(apart, N_OF(apart)));
  struct entry_spec touching[] = {{9, 0, 16}, {3, 16, 16}, {7, 32, 16}};
  cr_expect_not(sorts(touching, N_OF(touching)), "a destination may start where the last ends");
}

Test(load_plan, sort_when_neither_ascends)
{
  struct entry_spec both_down[] = {{9, 100, 16}, {3, 0, 16}};
  cr_expect(sorts(both_down, N_OF(both_down)));
  /* One byte of overlap is enough to lose the destinations' order. */
  struct entry_spec overlap[] = {{9, 0, 16}, {3, 15, 16}};
  cr_expect(sorts(overlap, N_OF(overlap)));
  /* Order lost late: only the last pair breaks both. */
  struct entry_spec late[] = {{1, 0, 16}, {2, 16, 16}, {3, 32, 16}, {0, 0, 16}};
  cr_expect(sorts(late, N_OF(late)));
  /* Order lost on different pairs for blocks and destinations. */
  struct entry_spec split[] = {{5, 0, 16}, {4, 16, 16}, {6, 8, 16}};
  cr_expect(sorts(split, N_OF(split)));
}

Test(load_plan, one_entry_never_sorts)
{
  struct entry_spec one[] = {{UINT32_MAX, 0, 16}};
  cr_expect_not(sorts(one, 1));
}

/* ---- descriptors in plan order ---- */

/* Plans and writes n one-block-or-more entries as the connector does (keys,
 * decision, sort, write) into b. Returns whether it sorted. */
static bool plan_and_write(const ecc_load_entry_v1_t *e, size_t n, struct desc_buf *b)
{
  static uint64_t keys[2 * MAX_ENTRIES];
  static struct done_rec rec[MAX_ENTRIES];
  struct load_order o;
  load_order_init(&o);
  uint64_t descs = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t blocks = (uint64_t)e[i].n_blocks * BS;
    rec[i].id = e[i].transfer_id;
    rec[i].nbytes = blocks < e[i].dst_capacity ? blocks : e[i].dst_capacity;
    keys[i] = load_order_add(&o, i, e[i].block_ids[0], e[i].dst, rec[i].nbytes);
    descs += e[i].n_blocks;
  }
  bool sort = load_order_sorts(&o);
  const uint64_t *sorted = sort ? load_sort(keys, keys + MAX_ENTRIES, n) : NULL;
  desc_init(b, NULL, NULL, NULL);
  cr_assert_eq(desc_reserve(b, descs), 0);
  struct desc_writer w;
  desc_writer_open(b, &w);
  load_plan_write(&w, e, rec, n, sorted, BASE, BS);
  desc_writer_close(b, &w);
  return sort;
}

static void expect_desc(const struct desc_buf *b, size_t i, uint32_t block, uint64_t dst_off,
                        uint64_t len)
{
  cr_assert_lt(i, b->count, "descriptor %zu missing: only %zu", i, b->count);
  cr_expect_eq(b->src[i], BASE + (uint64_t)block * BS, "descriptor %zu: src is block %llu, not %u",
               i, (unsigned long long)((b->src[i] - BASE) / BS), block);
  cr_expect_eq(b->dst[i], DST + dst_off, "descriptor %zu: dst +%llu, not +%llu", i,
               (unsigned long long)(b->dst[i] - DST), (unsigned long long)dst_off);
  cr_expect_eq(b->len[i], len, "descriptor %zu: %llu bytes, not %llu", i,
               (unsigned long long)b->len[i], (unsigned long long)len);
}

Test(load_plan, neighbours_in_region_and_destination_coalesce_after_the_sort)
{
  /* Blocks 10..13 to consecutive destinations, handed over shuffled: both
   * orders are lost, the sort restores them, one descriptor is left. */
  uint32_t ids[] = {12, 10, 13, 11};
  ecc_load_entry_v1_t e[4];
  for (size_t i = 0; i < 4; i++)
    e[i] = (ecc_load_entry_v1_t){i, &ids[i], 1, DST + (ids[i] - 10) * BS, BS};
  struct desc_buf b;
  cr_expect(plan_and_write(e, 4, &b));
  cr_assert_eq(b.count, 1, "%zu descriptors, expected 1", b.count);
  expect_desc(&b, 0, 10, 0, 4 * BS);
  cr_expect_eq(b.bytes, 4 * BS);
  desc_free(&b);
}

Test(load_plan, neighbours_on_one_side_only_stay_apart)
{
  /* Region neighbours (blocks 20, 21) whose destinations are not, and
   * destination neighbours (+0, +16) whose blocks are not. */
  uint32_t ids[] = {21, 30, 20};
  ecc_load_entry_v1_t e[] = {
      {0, &ids[0], 1, DST + 512, BS},
      {1, &ids[1], 1, DST + 16, BS},
      {2, &ids[2], 1, DST + 0, BS},
  };
  struct desc_buf b;
  cr_expect(plan_and_write(e, 3, &b));
  cr_assert_eq(b.count, 3, "%zu descriptors, expected 3", b.count);
  expect_desc(&b, 0, 20, 0, BS);
  expect_desc(&b, 1, 21, 512, BS);
  expect_desc(&b, 2, 30, 16, BS);
  desc_free(&b);
}

Test(load_plan, host_order_kept_when_destinations_ascend)
{
  /* Blocks descend, destinations ascend apart: no sort, so the descriptors
   * come in the host's order, not by block. */
  uint32_t ids[] = {9, 5, 2};
  ecc_load_entry_v1_t e[] = {
      {0, &ids[0], 1, DST + 0, BS},
      {1, &ids[1], 1, DST + 64, BS},
      {2, &ids[2], 1, DST + 256, BS},
  };
  struct desc_buf b;
  cr_expect_not(plan_and_write(e, 3, &b));
  cr_assert_eq(b.count, 3);
  expect_desc(&b, 0, 9, 0, BS);
  expect_desc(&b, 1, 5, 64, BS);
  expect_desc(&b, 2, 2, 256, BS);
  desc_free(&b);
}

Test(load_plan, host_order_kept_when_blocks_ascend_and_runs_merge)
{
  /* Multi-block entries whose runs continue across entries on both sides
   * merge in the host's order; the capacity cuts the last entry short. */
  uint32_t a[] = {4, 5}, c[] = {6, 7}, d[] = {8, 9};
  ecc_load_entry_v1_t e[] = {
      {0, a, 2, DST + 0, 2 * BS},
      {1, c, 2, DST + 2 * BS, 2 * BS},
      {2, d, 2, DST + 4 * BS, BS + 3},
  };
  struct desc_buf b;
  cr_expect_not(plan_and_write(e, 3, &b));
  cr_assert_eq(b.count, 1, "%zu descriptors, expected 1", b.count);
  expect_desc(&b, 0, 4, 0, 5 * BS + 3);
  desc_free(&b);
}

Test(load_plan, sorted_plan_writes_every_entry_once)
{
  /* A shuffled step of one-block entries over a strided block layout:
   * every entry's bytes appear exactly once, in block order. */
  static uint32_t ids[MAX_ENTRIES];
  static ecc_load_entry_v1_t e[MAX_ENTRIES];
  static uint32_t perm[MAX_ENTRIES];
  unsigned seed = 3;
  size_t n = 1000;
  for (size_t i = 0; i < n; i++)
    perm[i] = (uint32_t)i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = (size_t)rand_r(&seed) % (i + 1);
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    ids[i] = 2 * perm[i]; /* never neighbours in the region */
    e[i] = (ecc_load_entry_v1_t){i, &ids[i], 1, DST + (uint64_t)(n - i) * 2 * BS, BS};
  }
  struct desc_buf b;
  cr_expect(plan_and_write(e, n, &b));
  cr_assert_eq(b.count, n);
  for (size_t k = 0; k < n; k++)
    cr_assert_eq(b.src[k], BASE + (uint64_t)(2 * k) * BS, "descriptor %zu out of block order", k);
  cr_expect_eq(b.bytes, (uint64_t)n * BS);
  desc_free(&b);
}

/* ---- the plan in parts (load_feed) ---- */

/* Feeds a step as the CUDA engine does: a first part moving at least
 * `first` bytes, then parts twice as large, sealing what was written before
 * each (it is being copied). Checks that every part ends on an entry and
 * reaches its size unless it is the last; returns the parts, their ends in
 * descriptors in `ends`. */
static size_t feed_in_parts(const ecc_load_entry_v1_t *e, const struct done_rec *rec, size_t n,
                            struct desc_buf *b, uint64_t first, size_t *ends, size_t max_parts)
{
  uint64_t bytes = 0, descs = 0;
  for (size_t i = 0; i < n; i++) {
    bytes += rec[i].nbytes;
    descs += e[i].n_blocks;
  }
  desc_init(b, NULL, NULL, NULL);
  cr_assert_eq(desc_reserve(b, descs), 0);
  size_t cap = b->cap;
  struct load_feed lf;
  load_feed_init(&lf, e, rec, n, NULL, BASE, BS, bytes);
  cr_expect_eq(lf.feed.bytes, bytes);
  size_t parts = 0;
  uint64_t want = first;
  bool more = true;
  while (more) {
    size_t from = b->count;
    uint64_t moved = b->bytes;
    more = lf.feed.more(&lf.feed, b, want);
    cr_assert_lt(parts, max_parts);
    ends[parts++] = b->count;
    cr_assert_gt(b->count, from, "part %zu wrote nothing", parts);
    if (more)
      cr_expect_geq(b->bytes - moved, want, "part %zu moves %llu bytes, fewer than %llu", parts,
                    (unsigned long long)(b->bytes - moved), (unsigned long long)want);
    desc_seal(b);
    want *= 2;
  }
  cr_expect_eq(lf.next, n, "the feed stopped at entry %zu of %zu", lf.next, n);
  cr_expect_eq(b->cap, cap, "the feed grew the buffer under parts being copied");
  cr_expect_eq(b->bytes, bytes);
  return parts;
}

Test(load_plan, a_feed_writes_every_entry_once_in_growing_parts)
{
  /* 40 scattered entries of 25 blocks: parts of 100, 200, 400, then the
   * 300 blocks left. */
  static uint32_t ids[40][25];
  static ecc_load_entry_v1_t e[40];
  static struct done_rec rec[40];
  for (uint32_t i = 0; i < 40; i++) {
    for (uint32_t k = 0; k < 25; k++)
      ids[i][k] = 2 * (i * 25 + k); /* never neighbours */
    e[i] = (ecc_load_entry_v1_t){i, ids[i], 25, DST + (uint64_t)i * 25 * BS, 25 * BS};
    rec[i] = (struct done_rec){i, 25 * BS};
  }
  struct desc_buf b;
  size_t ends[16];
  size_t parts = feed_in_parts(e, rec, 40, &b, 100 * BS, ends, 16);
  cr_expect_eq(parts, 4, "%zu parts", parts);
  cr_expect_eq(ends[0], 100);
  cr_expect_eq(ends[1], 300);
  cr_expect_eq(ends[2], 700);
  cr_assert_eq(b.count, 1000);
  for (size_t k = 0; k < 1000; k++)
    cr_assert_eq(b.src[k], BASE + (uint64_t)(2 * k) * BS, "descriptor %zu", k);
  desc_free(&b);
}

Test(load_plan, a_run_continued_across_a_part_is_not_merged_into_the_part_before)
{
  /* Four entries whose runs continue each other on both sides make one
   * descriptor when written at once. Fed in parts of 8, 16 and 32 blocks'
   * bytes (entry 0; entries 1 and 2; entry 3), they merge within a part
   * but never into the part before, which is being copied. */
  static uint32_t ids[4][8];
  static ecc_load_entry_v1_t e[4];
  static struct done_rec rec[4];
  for (uint32_t i = 0; i < 4; i++) {
    for (uint32_t k = 0; k < 8; k++)
      ids[i][k] = i * 8 + k;
    e[i] = (ecc_load_entry_v1_t){i, ids[i], 8, DST + (uint64_t)i * 8 * BS, 8 * BS};
    rec[i] = (struct done_rec){i, 8 * BS};
  }
  struct desc_buf whole;
  cr_expect_not(plan_and_write(e, 4, &whole));
  cr_expect_eq(whole.count, 1);
  desc_free(&whole);
  struct desc_buf b;
  size_t ends[8];
  size_t parts = feed_in_parts(e, rec, 4, &b, 8 * BS, ends, 8);
  cr_expect_eq(parts, 3, "%zu parts", parts);
  cr_assert_eq(b.count, 3);
  expect_desc(&b, 0, 0, 0, 8 * BS);
  expect_desc(&b, 1, 8, 8 * BS, 16 * BS);
  expect_desc(&b, 2, 24, 24 * BS, 8 * BS);
  desc_free(&b);
}

Test(load_plan, a_feed_writes_one_entry_at_least_whatever_it_is_asked)
{
  uint32_t ids[3] = {5, 9, 13};
  ecc_load_entry_v1_t e[3];
  struct done_rec rec[3];
  for (uint32_t i = 0; i < 3; i++) {
    e[i] = (ecc_load_entry_v1_t){i, &ids[i], 1, DST + (uint64_t)i * 4 * BS, BS};
    rec[i] = (struct done_rec){i, BS};
  }
  struct desc_buf b;
  size_t ends[4];
  cr_expect_eq(feed_in_parts(e, rec, 3, &b, 0, ends, 4), 3);
  desc_free(&b);
}
