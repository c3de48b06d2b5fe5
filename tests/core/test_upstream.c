/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_upstream.c - the reference worker's test cases (block = 16 bytes,
 * 8 blocks), run through the real plugin and the real shim with the host
 * engine. Region contents are read straight from the shared file.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/region/region.h"
#include "tests/helpers.h"

#define BS 16u
#define NB 8u

struct rig {
  ecc_connector_t *c;
  uint8_t *blocks; /* our own view of the region's blocks */
  size_t map_bytes;
  uint8_t *map;
};

static struct rig rig_open(const char *role, const char *extra)
{
  struct rig r;
  const char *name = th_region_name();
  r.c = th_open(role, name, BS, NB, extra);
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(r.c, &info), ECC_OK);
  int fd = open(info.region_path, O_RDWR);
  cr_assert_geq(fd, 0, "cannot open %s", info.region_path);
  r.map_bytes = info.region_bytes;
  r.map = mmap(NULL, r.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  cr_assert_neq(r.map, MAP_FAILED);
  r.blocks = r.map + REGION_HEADER_BYTES;
  memset(r.blocks, 0xEE, BS * NB); /* old contents that must survive */
  return r;
}

static void rig_close(struct rig *r)
{
  munmap(r->map, r->map_bytes);
  cr_assert_eq(ecc_close(r->c), ECC_OK);
}

/* Save `nbytes` of a seeded pattern under `key`, flush, wait for it. */
static void save_one(struct rig *r, const char *key, const uint32_t *ids, uint32_t n, uint8_t *src,
                     uint64_t nbytes)
{
  ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src, nbytes, ids, n};
  cr_assert_eq(ecc_save(r->c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(r->c, NULL), ECC_OK);
  ecc_completion_t done[2];
  cr_assert_eq(th_poll_until(r->c, done, 1, 5000), 1);
  cr_expect_eq(done[0].direction, ECC_DIR_SAVE);
  cr_expect_eq(done[0].status, ECC_OK);
  cr_expect_str_eq(done[0].key, key);
  cr_expect_eq(done[0].nbytes, nbytes);
}

/* Every block listed got its slice of src; every other byte kept 0xEE. */
static void expect_region(const struct rig *r, const uint32_t *ids, uint32_t n, const uint8_t *src,
                          uint64_t nbytes)
{
  uint8_t want[BS * NB];
  memset(want, 0xEE, sizeof(want));
  for (uint32_t i = 0; i < n && (uint64_t)i * BS < nbytes; i++) {
    uint64_t len = nbytes - (uint64_t)i * BS < BS ? nbytes - (uint64_t)i * BS : BS;
    memcpy(want + (size_t)ids[i] * BS, src + (size_t)i * BS, len);
  }
  for (size_t b = 0; b < BS * NB; b++)
    cr_assert_eq(r->blocks[b], want[b], "region byte %zu (block %zu): 0x%02x, expected 0x%02x", b,
                 b / BS, r->blocks[b], want[b]);
}

static void save_case(const uint32_t *ids, uint32_t n, uint64_t nbytes, uint64_t want_descs)
{
  struct rig r = rig_open("producer", NULL);
  uint8_t src[BS * NB];
  th_fill(src, sizeof(src), n * 1000 + nbytes);
  save_one(&r, "k", ids, n, src, nbytes);
  expect_region(&r, ids, n, src, nbytes);
  ecc_stats_t s = th_stats(r.c);
  cr_expect_eq(s.save.descriptors, want_descs, "descriptors: %llu, expected %llu",
               (unsigned long long)s.save.descriptors, (unsigned long long)want_descs);
  cr_expect_eq(s.save.bytes, nbytes);
  rig_close(&r);
}

Test(upstream_save, scattered_exact_fit)
{
  save_case((uint32_t[]){7, 2, 5}, 3, 48, 3);
}

Test(upstream_save, partial_last_block_keeps_its_tail)
{
  save_case((uint32_t[]){7, 2, 5, 0}, 4, 56, 4);
}

Test(upstream_save, contiguous_run)
{
  save_case((uint32_t[]){2, 3, 4}, 3, 48, 1);
}

Test(upstream_save, run_and_single)
{
  save_case((uint32_t[]){2, 3, 4, 6}, 4, 64, 2);
}

Test(upstream_save, run_then_gap_descriptors)
{
  save_case((uint32_t[]){2, 3, 6}, 3, 48, 2);
}

Test(upstream_save, unused_blocks_get_no_descriptor)
{
  save_case((uint32_t[]){2, 3, 4}, 3, 40, 1);
  save_case((uint32_t[]){2, 3, 4}, 3, 16, 1);
}

Test(upstream_save, noop_on_non_save_rank)
{
  struct rig r = rig_open("producer", "\n[connector]\ntp_rank = 1\n");
  uint8_t src[48];
  th_fill(src, sizeof(src), 9);
  ecc_save_entry_t e = {"k", (uint64_t)(uintptr_t)src, 48, (uint32_t[]){2, 3, 4}, 3};
  cr_assert_eq(ecc_save(r.c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_expect_eq(th_poll_until(r.c, done, 1, 100), 0, "a non-save rank reported a save");
  expect_region(&r, NULL, 0, src, 0);
  ecc_stats_t s = th_stats(r.c);
  cr_expect_eq(s.saves_skipped, 1);
  cr_expect_eq(s.save.transfers, 0);
  rig_close(&r);
}

Test(upstream_save, allocation_too_small_is_an_error)
{
  struct rig r = rig_open("producer", NULL);
  uint8_t src[64];
  th_fill(src, sizeof(src), 3);
  ecc_save_entry_t e = {"big", (uint64_t)(uintptr_t)src, 49, (uint32_t[]){2, 3, 4}, 3};
  cr_expect_eq(ecc_save(r.c, &e, 1), ECC_ERR_RANGE);
  char text[512];
  cr_assert_eq(ecc_last_error(r.c, text, sizeof(text)), ECC_OK);
  cr_expect(strstr(text, "exceeds allocated blocks") != NULL, "%s", text);
  cr_expect(strstr(text, "big") != NULL, "the key is not named: %s", text);
  cr_assert_eq(ecc_flush(r.c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_expect_eq(th_poll_until(r.c, done, 1, 50), 0, "a rejected save was transferred");
  expect_region(&r, NULL, 0, src, 0);
  rig_close(&r);
}

Test(upstream_save, several_keys_in_one_step_form_one_batch)
{
  struct rig r = rig_open("producer", NULL);
  uint8_t a[32], b[16], c[32];
  th_fill(a, sizeof(a), 1);
  th_fill(b, sizeof(b), 2);
  th_fill(c, sizeof(c), 3);
  ecc_save_entry_t e1 = {"a", (uint64_t)(uintptr_t)a, 32, (uint32_t[]){0, 1}, 2};
  ecc_save_entry_t e2[2] = {{"b", (uint64_t)(uintptr_t)b, 16, (uint32_t[]){4}, 1},
                            {"c", (uint64_t)(uintptr_t)c, 32, (uint32_t[]){6, 7}, 2}};
  cr_assert_eq(ecc_save(r.c, &e1, 1), ECC_OK);
  cr_assert_eq(ecc_save(r.c, e2, 2), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, NULL), ECC_OK);
  ecc_completion_t done[4];
  cr_assert_eq(th_poll_until(r.c, done, 3, 5000), 3);
  cr_expect_str_eq(done[0].key, "a");
  cr_expect_str_eq(done[1].key, "b");
  cr_expect_str_eq(done[2].key, "c");
  cr_expect_eq(done[0].batch, done[2].batch);
  cr_expect_eq(th_stats(r.c).save.transfers, 1);
  cr_expect_eq(memcmp(r.blocks + 4 * BS, b, 16), 0);
  cr_expect_eq(memcmp(r.blocks + 6 * BS, c, 32), 0);
  rig_close(&r);
}

Test(upstream_save, flush_with_nothing_queued_is_a_noop)
{
  struct rig r = rig_open("producer", NULL);
  cr_assert_eq(ecc_flush(r.c, NULL), ECC_OK);
  cr_assert_eq(ecc_save(r.c, NULL, 0), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, NULL), ECC_OK);
  cr_expect_eq(th_stats(r.c).save.transfers, 0);
  rig_close(&r);
}

/* ---- loads ---- */

static void load_and_wait(struct rig *r, const ecc_load_entry_t *e, size_t n)
{
  cr_assert_eq(ecc_load(r->c, e, n, NULL), ECC_OK);
  ecc_completion_t done[8];
  cr_assert_eq(th_poll_until(r->c, done, n, 5000), n);
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(done[i].direction, ECC_DIR_LOAD);
    cr_expect_eq(done[i].status, ECC_OK);
    cr_expect_eq(done[i].transfer_id, e[i].transfer_id, "completion %zu: id %llu", i,
                 (unsigned long long)done[i].transfer_id);
  }
}

Test(upstream_load, scattered_blocks_land_in_order)
{
  struct rig r = rig_open("consumer", NULL);
  th_fill(r.blocks, BS * NB, 77);
  uint8_t dst[48];
  memset(dst, 0, sizeof(dst));
  uint32_t ids[] = {3, 1, 6};
  ecc_load_entry_t e = {42, ids, 3, (uint64_t)(uintptr_t)dst, sizeof(dst)};
  load_and_wait(&r, &e, 1);
  for (int i = 0; i < 3; i++)
    cr_expect_eq(memcmp(dst + i * BS, r.blocks + ids[i] * BS, BS), 0, "block %d", i);
  cr_expect_eq(th_stats(r.c).load.bytes, 48);
  rig_close(&r);
}

/* Two entries whose blocks neighbour each other, loaded into one buffer. */
static uint64_t neighbour_descriptors(const uint32_t *a, const uint32_t *b, int b_first)
{
  struct rig r = rig_open("consumer", NULL);
  th_fill(r.blocks, BS * NB, 5);
  uint8_t dst[64];
  memset(dst, 0, sizeof(dst));
  ecc_load_entry_t ea = {1, a, 2, (uint64_t)(uintptr_t)dst, 32};
  ecc_load_entry_t eb = {2, b, 2, (uint64_t)(uintptr_t)(dst + 32), 32};
  ecc_load_entry_t e[2] = {b_first ? eb : ea, b_first ? ea : eb};
  load_and_wait(&r, e, 2);
  cr_expect_eq(memcmp(dst, r.blocks + a[0] * BS, 32), 0);
  cr_expect_eq(memcmp(dst + 32, r.blocks + b[0] * BS, 32), 0);
  uint64_t descs = th_stats(r.c).load.descriptors;
  rig_close(&r);
  return descs;
}

Test(upstream_load, neighbours_coalesce_in_either_order)
{
  uint32_t a[] = {2, 3}, b[] = {4, 5};
  cr_expect_eq(neighbour_descriptors(a, b, 0), 1);
  cr_expect_eq(neighbour_descriptors(a, b, 1), 1);
}

Test(upstream_load, distant_entries_stay_apart)
{
  uint32_t a[] = {2, 3}, b[] = {6, 7};
  cr_expect_eq(neighbour_descriptors(a, b, 0), 2);
}

Test(upstream_load, empty_load_is_a_noop)
{
  struct rig r = rig_open("consumer", NULL);
  cr_assert_eq(ecc_load(r.c, NULL, 0, NULL), ECC_OK);
  cr_expect_eq(th_stats(r.c).load.transfers, 0);
  rig_close(&r);
}

Test(upstream_load, resident_key_is_reloaded_and_reported_each_time)
{
  struct rig r = rig_open("consumer", NULL);
  th_fill(r.blocks, BS * NB, 8);
  uint8_t dst[32];
  uint32_t ids[] = {0, 1};
  ecc_load_entry_t e1 = {10, ids, 2, (uint64_t)(uintptr_t)dst, 32};
  ecc_load_entry_t e2 = {11, ids, 2, (uint64_t)(uintptr_t)dst, 32};
  load_and_wait(&r, &e1, 1);
  memset(dst, 0, sizeof(dst));
  load_and_wait(&r, &e2, 1);
  cr_expect_eq(memcmp(dst, r.blocks, 32), 0);
  cr_expect_eq(th_stats(r.c).load.transfers, 2);
  rig_close(&r);
}

Test(upstream_load, works_on_every_rank)
{
  struct rig r = rig_open("consumer", "\n[connector]\ntp_rank = 3\npcp_rank = 1\n");
  th_fill(r.blocks, BS * NB, 4);
  uint8_t dst[16];
  uint32_t ids[] = {7};
  ecc_load_entry_t e = {5, ids, 1, (uint64_t)(uintptr_t)dst, 16};
  load_and_wait(&r, &e, 1);
  cr_expect_eq(memcmp(dst, r.blocks + 7 * BS, 16), 0);
  rig_close(&r);
}

Test(upstream_load, capacity_cuts_the_last_block)
{
  struct rig r = rig_open("consumer", NULL);
  th_fill(r.blocks, BS * NB, 6);
  uint8_t dst[48];
  memset(dst, 0xAB, sizeof(dst));
  uint32_t ids[] = {5, 6, 1};
  ecc_load_entry_t e = {6, ids, 3, (uint64_t)(uintptr_t)dst, 20};
  load_and_wait(&r, &e, 1);
  cr_expect_eq(memcmp(dst, r.blocks + 5 * BS, 20), 0);
  for (int i = 20; i < 48; i++)
    cr_expect_eq(dst[i], 0xAB, "byte %d past the capacity was written", i);
  cr_expect_eq(th_stats(r.c).load.bytes, 20);
  rig_close(&r);
}

/* ---- both ---- */

Test(upstream_roundtrip, save_then_load_returns_the_bytes)
{
  struct rig r = rig_open("both", NULL);
  uint8_t src[56], dst[64];
  th_fill(src, sizeof(src), 99);
  memset(dst, 0, sizeof(dst));
  uint32_t ids[] = {6, 0, 3, 4};
  save_one(&r, "round", ids, 4, src, sizeof(src));
  ecc_load_entry_t e = {1, ids, 4, (uint64_t)(uintptr_t)dst, sizeof(src)};
  load_and_wait(&r, &e, 1);
  cr_expect_eq(memcmp(dst, src, sizeof(src)), 0);
  rig_close(&r);
}

Test(upstream_roundtrip, buffers_are_reused_across_steps)
{
  struct rig r = rig_open("both", NULL);
  for (int step = 0; step < 200; step++) {
    uint8_t src[64], dst[64];
    th_fill(src, sizeof(src), (uint64_t)step);
    uint32_t ids[4];
    for (int i = 0; i < 4; i++)
      ids[i] = (uint32_t)((step + i * 3) % NB);
    char key[32];
    snprintf(key, sizeof(key), "step-%d", step);
    save_one(&r, key, ids, 4, src, 64);
    ecc_load_entry_t e = {(uint64_t)step, ids, 4, (uint64_t)(uintptr_t)dst, 64};
    load_and_wait(&r, &e, 1);
    cr_assert_eq(memcmp(dst, src, 64), 0, "step %d", step);
  }
  ecc_stats_t s = th_stats(r.c);
  cr_expect_eq(s.save.transfers, 200);
  cr_expect_eq(s.load.transfers, 200);
  cr_expect_eq(s.save.entries, 200);
  cr_expect_eq(s.save.hist[0], 200, "every transfer is under 0.5 MB");
  rig_close(&r);
}
