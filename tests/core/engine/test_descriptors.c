/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_descriptors.c - descriptor building on its own: run cutting, partial
 * last blocks, merging across entries (and not into sealed descriptors) and
 * unsigned address arithmetic.
 */
#include <criterion/criterion.h>
#include <stdint.h>

#include "core/engine/descriptors.h"

#define BS 16u
#define BASE 0x10000ull

static struct desc_buf build(uint64_t linear, const uint32_t *ids, uint64_t nbytes, int to_region)
{
  struct desc_buf b;
  desc_init(&b, NULL, NULL, NULL);
  cr_assert_eq(desc_reserve(&b, 8), 0); /* every case lists at most 8 blocks */
  desc_add_entry(&b, linear, BASE, BS, ids, nbytes, to_region);
  return b;
}

static void expect_lens(const struct desc_buf *b, const uint64_t *lens, size_t n)
{
  cr_assert_eq(b->count, n, "expected %zu descriptors, got %zu", n, b->count);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(b->len[i], lens[i], "descriptor %zu: len %llu, expected %llu", i,
                 (unsigned long long)b->len[i], (unsigned long long)lens[i]);
    sum += lens[i];
  }
  cr_expect_eq(b->bytes, sum);
}

Test(descriptors, ascending_run_is_one_descriptor)
{
  uint32_t ids[] = {2, 3, 4};
  struct desc_buf b = build(0x5000, ids, 48, 1);
  expect_lens(&b, (uint64_t[]){48}, 1);
  cr_expect_eq(b.src[0], 0x5000);
  cr_expect_eq(b.dst[0], BASE + 2 * BS);
  desc_free(&b);
}

Test(descriptors, scattered_blocks_are_one_descriptor_each)
{
  uint32_t ids[] = {7, 2, 5};
  struct desc_buf b = build(0x5000, ids, 48, 1);
  expect_lens(&b, (uint64_t[]){16, 16, 16}, 3);
  cr_expect_eq(b.dst[0], BASE + 7 * BS);
  cr_expect_eq(b.dst[1], BASE + 2 * BS);
  cr_expect_eq(b.dst[2], BASE + 5 * BS);
  cr_expect_eq(b.src[1], 0x5000 + 16);
  cr_expect_eq(b.src[2], 0x5000 + 32);
  desc_free(&b);
}

Test(descriptors, run_then_gap)
{
  uint32_t ids[] = {2, 3, 6};
  struct desc_buf b = build(0x5000, ids, 48, 1);
  expect_lens(&b, (uint64_t[]){32, 16}, 2);
  desc_free(&b);
}

Test(descriptors, descending_and_duplicate_ids_split)
{
  uint32_t desc_ids[] = {4, 3, 2};
  struct desc_buf b = build(0x5000, desc_ids, 48, 1);
  expect_lens(&b, (uint64_t[]){16, 16, 16}, 3);
  desc_free(&b);
  uint32_t dup_ids[] = {2, 2, 3};
  b = build(0x5000, dup_ids, 48, 1);
  expect_lens(&b, (uint64_t[]){16, 32}, 2);
  desc_free(&b);
}

Test(descriptors, unused_blocks_get_no_descriptor)
{
  uint32_t ids[] = {2, 3, 4};
  struct desc_buf b = build(0x5000, ids, 40, 1);
  expect_lens(&b, (uint64_t[]){40}, 1);
  desc_free(&b);
  b = build(0x5000, ids, 16, 1);
  expect_lens(&b, (uint64_t[]){16}, 1);
  desc_free(&b);
  b = build(0x5000, ids, 8, 1);
  expect_lens(&b, (uint64_t[]){8}, 1);
  desc_free(&b);
}

Test(descriptors, partial_last_block_of_scattered_entry)
{
  uint32_t ids[] = {7, 2, 5, 0};
  struct desc_buf b = build(0x5000, ids, 56, 1);
  expect_lens(&b, (uint64_t[]){16, 16, 16, 8}, 4);
  cr_expect_eq(b.dst[3], BASE);
  desc_free(&b);
}

Test(descriptors, high_bit_addresses_in_unsigned_arithmetic)
{
  uint64_t src = UINT64_MAX - 127; /* 2^64 - 128 */
  uint32_t ids[] = {7, 2, 5};
  struct desc_buf b = build(src, ids, 48, 1);
  expect_lens(&b, (uint64_t[]){16, 16, 16}, 3);
  cr_expect_eq(b.src[0], src);
  cr_expect_eq(b.src[1], src + 16);
  cr_expect_eq(b.src[2], src + 32);
  desc_free(&b);
}

Test(descriptors, load_direction_swaps_sides)
{
  uint32_t ids[] = {3, 1, 6};
  struct desc_buf b = build(0x9000, ids, 48, 0);
  expect_lens(&b, (uint64_t[]){16, 16, 16}, 3);
  cr_expect_eq(b.src[0], BASE + 3 * BS);
  cr_expect_eq(b.dst[0], 0x9000);
  cr_expect_eq(b.src[2], BASE + 6 * BS);
  cr_expect_eq(b.dst[2], 0x9000 + 32);
  desc_free(&b);
}

Test(descriptors, neighbours_merge_across_entries_only_when_both_sides_continue)
{
  struct desc_buf b;
  desc_init(&b, NULL, NULL, NULL);
  cr_assert_eq(desc_reserve(&b, 8), 0);
  uint32_t a[] = {2, 3}, c[] = {4, 5}, d[] = {6, 7};
  desc_add_entry(&b, 0x9000, BASE, BS, a, 32, 0);
  desc_add_entry(&b, 0x9000 + 32, BASE, BS, c, 32, 0);
  expect_lens(&b, (uint64_t[]){64}, 1);
  /* Region continues but the destination does not: a new descriptor. */
  desc_add_entry(&b, 0x20000, BASE, BS, d, 32, 0);
  expect_lens(&b, (uint64_t[]){64, 32}, 2);
  desc_free(&b);
}

Test(descriptors, a_sealed_descriptor_is_never_merged_into)
{
  /* The same neighbours as above merge, until the buffer is sealed: the
   * descriptors below the seal are being copied, and a longer one would
   * not be seen. desc_clear lifts the seal. */
  struct desc_buf b;
  desc_init(&b, NULL, NULL, NULL);
  cr_assert_eq(desc_reserve(&b, 8), 0);
  uint32_t a[] = {2, 3}, c[] = {4, 5}, d[] = {6, 7};
  desc_add_entry(&b, 0x9000, BASE, BS, a, 32, 0);
  desc_seal(&b);
  desc_add_entry(&b, 0x9000 + 32, BASE, BS, c, 32, 0);
  expect_lens(&b, (uint64_t[]){32, 32}, 2);
  desc_add_entry(&b, 0x9000 + 64, BASE, BS, d, 32, 0); /* above the seal: merges */
  expect_lens(&b, (uint64_t[]){32, 64}, 2);
  struct desc_writer w;
  desc_seal(&b);
  desc_writer_open(&b, &w);
  desc_write_run(&w, 0x9000 + 96, BASE + 8 * BS, 16, 0);
  desc_writer_close(&b, &w);
  expect_lens(&b, (uint64_t[]){32, 64, 16}, 3);
  desc_clear(&b);
  desc_add_entry(&b, 0x9000, BASE, BS, a, 32, 0);
  desc_add_entry(&b, 0x9000 + 32, BASE, BS, c, 32, 0);
  expect_lens(&b, (uint64_t[]){64}, 1);
  desc_free(&b);
}

Test(descriptors, reserve_grows_and_keeps_contents)
{
  struct desc_buf b;
  desc_init(&b, NULL, NULL, NULL);
  uint32_t id = 0;
  for (uint32_t i = 0; i < 1000; i++) {
    cr_assert_eq(desc_reserve(&b, 1), 0);
    id = (i * 7) % 8; /* never ascending by one from the previous entry's block */
    desc_add_entry(&b, 0x100000 + (uint64_t)i * 4096, BASE, BS, &id, BS, 1);
  }
  cr_assert_eq(b.count, 1000);
  for (uint32_t i = 0; i < 1000; i++) {
    cr_expect_eq(b.src[i], 0x100000 + (uint64_t)i * 4096);
    cr_expect_eq(b.dst[i], BASE + (uint64_t)((i * 7) % 8) * BS);
  }
  desc_clear(&b);
  cr_expect_eq(b.count, 0);
  cr_expect_eq(b.bytes, 0);
  desc_free(&b);
}
