/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_reports.c - what the library reports about the work it did: every
 * field of a completion, the stats counters and their histogram, describe
 * and the table's capability bits, each held against what the test itself
 * did or measured (the wall clock, the region file, the bound enforced).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/helpers.h"

#define BS 4096u
#define NB 512u
#define PER 3       /* entries per step */
#define MB 1000000u /* the histogram's unit (ecc_plugin_v1.h) */

/* Poll records as a plugin must never leave them: a field poll forgot to
 * write keeps this, which no real value matches (the key has no NUL). */
static void spoil(ecc_completion_t *out, size_t n)
{
  memset(out, 0xA5, n * sizeof(*out));
}

/* Every completion of one batched transfer in one direction. */
struct batch {
  ecc_completion_t done[PER];
  size_t n;
};

/* Split a step's completions by direction, keeping their order. */
static void split(const ecc_completion_t *done, size_t n, struct batch *saves, struct batch *loads)
{
  saves->n = loads->n = 0;
  for (size_t i = 0; i < n; i++) {
    struct batch *b = done[i].direction == ECC_DIR_SAVE ? saves : loads;
    cr_assert(done[i].direction == ECC_DIR_SAVE || done[i].direction == ECC_DIR_LOAD,
              "completion %zu has direction %u", i, done[i].direction);
    cr_assert_lt(b->n, (size_t)PER, "more completions than entries in one direction");
    b->done[b->n++] = done[i];
  }
}

/* The entries of one batch share its number and its duration, which is
 * positive and no longer than the wall time around the whole step. */
static uint64_t expect_one_batch(const struct batch *b, uint64_t number, uint64_t wall_ns)
{
  uint64_t elapsed = b->done[0].elapsed_ns;
  cr_expect_gt(elapsed, 0, "a transfer that moved bytes took 0 ns");
  cr_expect_leq(elapsed, wall_ns, "elapsed %llu ns, but the step took %llu ns of wall time",
                (unsigned long long)elapsed, (unsigned long long)wall_ns);
  for (size_t i = 0; i < b->n; i++) {
    cr_expect_eq(b->done[i].batch, number, "entry %zu is in batch %llu, expected %llu", i,
                 (unsigned long long)b->done[i].batch, (unsigned long long)number);
    cr_expect_eq(b->done[i].elapsed_ns, elapsed, "entries of one batch report other durations");
    cr_expect_eq(b->done[i].status, ECC_OK);
  }
  return elapsed;
}

/* Each step saves PER entries of different sizes from separate buffers
 * and loads PER entries; the step is timed from its first call until poll
 * returned its last completion. */
Test(reports, completions_carry_batch_number_duration_and_entry)
{
  enum { STEPS = 4 };
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[PER][BS], dst[PER][2 * BS];
  uint64_t busy_save = 0, busy_load = 0, bytes_save = 0, bytes_load = 0;
  for (int step = 0; step < STEPS; step++) {
    ecc_save_entry_t saves[PER];
    ecc_load_entry_t loads[PER];
    char keys[PER][16];
    uint32_t save_ids[PER], load_ids[PER][2];
    for (uint32_t k = 0; k < PER; k++) {
      snprintf(keys[k], sizeof(keys[k]), "s%d-%u", step, k);
      save_ids[k] = (uint32_t)step * PER + k;
      saves[k] =
          (ecc_save_entry_t){keys[k], (uint64_t)(uintptr_t)src[k], BS - 100 * k, &save_ids[k], 1};
      bytes_save += saves[k].nbytes;
      load_ids[k][0] = NB - 1 - k;
      load_ids[k][1] = NB / 2 + k * 2;
      /* Room for both blocks and a little less: the entry moves its capacity. */
      loads[k] = (ecc_load_entry_t){1000u * (uint32_t)step + k, load_ids[k], 2,
                                    (uint64_t)(uintptr_t)dst[k], 2 * BS - 10 * k};
      bytes_load += loads[k].dst_capacity;
    }
    ecc_completion_t done[2 * PER];
    spoil(done, 2 * PER);
    uint64_t t0 = th_now_ns();
    cr_assert_eq(ecc_save(c, saves, PER), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    cr_assert_eq(ecc_load(c, loads, PER, NULL), ECC_OK);
    cr_assert_eq(th_poll_until(c, done, 2 * PER, 5000), 2 * PER);
    uint64_t wall = th_now_ns() - t0;

    struct batch s, l;
    split(done, 2 * PER, &s, &l);
    cr_assert_eq(s.n, PER);
    cr_assert_eq(l.n, PER);
    for (uint32_t k = 0; k < PER; k++) {
      cr_expect_str_eq(s.done[k].key, keys[k], "saves out of order");
      cr_expect_eq(s.done[k].transfer_id, 0, "a save reports transfer id %llu",
                   (unsigned long long)s.done[k].transfer_id);
      cr_expect_eq(s.done[k].nbytes, saves[k].nbytes);
      cr_expect_eq(l.done[k].transfer_id, loads[k].transfer_id, "loads out of order");
      cr_expect_str_eq(l.done[k].key, "", "a load reports a key");
      cr_expect_eq(l.done[k].nbytes, loads[k].dst_capacity);
    }
    /* One batch per flush and per load call, numbered from 1 in each
     * direction on its own. */
    busy_save += expect_one_batch(&s, (uint64_t)step + 1, wall);
    busy_load += expect_one_batch(&l, (uint64_t)step + 1, wall);
  }
  ecc_stats_t st = th_stats(c);
  cr_expect_eq(st.save.busy_ns, busy_save, "save busy_ns %llu, the batches took %llu",
               (unsigned long long)st.save.busy_ns, (unsigned long long)busy_save);
  cr_expect_eq(st.load.busy_ns, busy_load, "load busy_ns %llu, the batches took %llu",
               (unsigned long long)st.load.busy_ns, (unsigned long long)busy_load);
  cr_expect_eq(st.save.transfers, STEPS);
  cr_expect_eq(st.load.transfers, STEPS);
  cr_expect_eq(st.save.entries, STEPS * PER);
  cr_expect_eq(st.load.entries, STEPS * PER);
  cr_expect_eq(st.save.bytes, bytes_save);
  cr_expect_eq(st.load.bytes, bytes_load);
  cr_expect_eq(st.save.failed + st.load.failed, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(reports, batch_numbers_of_one_direction_ignore_the_other)
{
  /* Two save batches for every load batch: each direction counts its own. */
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t buf[BS];
  uint32_t id = 1;
  uint64_t want_save = 1, want_load = 1;
  for (int step = 0; step < 6; step++) {
    ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, BS, &id, 1};
    ecc_load_entry_t l = {(uint64_t)step, &id, 1, (uint64_t)(uintptr_t)buf, BS};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    bool with_load = step % 2 == 1;
    if (with_load)
      cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
    ecc_completion_t done[2];
    spoil(done, 2);
    size_t n = with_load ? 2 : 1;
    cr_assert_eq(th_poll_until(c, done, n, 5000), n);
    for (size_t i = 0; i < n; i++) {
      uint64_t *want = done[i].direction == ECC_DIR_SAVE ? &want_save : &want_load;
      cr_expect_eq(done[i].batch, *want, "%s batch %llu, expected %llu",
                   done[i].direction == ECC_DIR_SAVE ? "save" : "load",
                   (unsigned long long)done[i].batch, (unsigned long long)*want);
      (*want)++;
    }
  }
  cr_expect_eq(want_save, 7);
  cr_expect_eq(want_load, 4);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(reports, poll_returns_finished_saves_before_finished_loads)
{
  /* The host engine copies transfers one after another in the order they
   * were submitted, so once the load is done the save before it is too:
   * the first completion poll returns must be the save's. The pause gives
   * both time to finish before the first poll, so that the order within
   * one poll is what is being checked. */
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[BS], dst[BS];
  uint32_t a = 3, b = 4;
  for (int round = 0; round < 10; round++) {
    ecc_save_entry_t s = {"first", (uint64_t)(uintptr_t)src, BS, &a, 1};
    ecc_load_entry_t l = {77, &b, 1, (uint64_t)(uintptr_t)dst, BS};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
    struct timespec pause = {0, 5 * 1000 * 1000};
    nanosleep(&pause, NULL);
    ecc_completion_t done[4];
    spoil(done, 4);
    cr_assert_eq(th_poll_until(c, done, 2, 5000), 2);
    cr_expect_eq(done[0].direction, ECC_DIR_SAVE, "round %d: a load came before a save", round);
    cr_expect_str_eq(done[0].key, "first");
    cr_expect_eq(done[1].direction, ECC_DIR_LOAD);
    cr_expect_eq(done[1].transfer_id, 77);
  }
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* The stats' histogram change that one save of `sizes` (one entry each,
 * one batch) makes; the batch's bytes are their sum. */
static void hist_after(ecc_connector_t *c, const uint64_t *sizes, size_t n, uint64_t *delta)
{
  static uint8_t src[2 * MB];
  static uint32_t ids[2][(2 * MB) / BS];
  ecc_save_entry_t e[2];
  cr_assert_leq(n, 2);
  uint32_t next = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t blocks = (uint32_t)((sizes[i] + BS - 1) / BS);
    for (uint32_t b = 0; b < blocks; b++)
      ids[i][b] = next++;
    next++; /* a gap, so that the entries do not coalesce */
    e[i] = (ecc_save_entry_t){i == 0 ? "a" : "b", (uint64_t)(uintptr_t)(src + i * MB), sizes[i],
                              ids[i], blocks};
  }
  ecc_stats_t before = th_stats(c);
  cr_assert_eq(ecc_save(c, e, n), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[2];
  cr_assert_eq(th_poll_until(c, done, n, 10000), n);
  ecc_stats_t after = th_stats(c);
  for (unsigned b = 0; b < ECC_HIST_BUCKETS; b++)
    delta[b] = after.save.hist[b] - before.save.hist[b];
}

/* Bucket b counts transfers of at least the bound below it and less than
 * its own: <0.5 MB, <1 MB, <2 MB, ... (ecc_plugin_v1.h). */
static void expect_bucket(ecc_connector_t *c, const uint64_t *sizes, size_t n, unsigned want)
{
  uint64_t delta[ECC_HIST_BUCKETS];
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += sizes[i];
  hist_after(c, sizes, n, delta);
  for (unsigned b = 0; b < ECC_HIST_BUCKETS; b++)
    cr_expect_eq(delta[b], b == want ? 1 : 0,
                 "a transfer of %llu bytes moved bucket %u by %llu (expected bucket %u)",
                 (unsigned long long)total, b, (unsigned long long)delta[b], want);
}

Test(reports, histogram_buckets_split_at_their_bounds)
{
  /* 2 MB of 4 KiB blocks and room for the gaps. */
  ecc_connector_t *c = th_open("producer", th_region_name(), BS, 2 * MB / BS + 8, NULL);
  expect_bucket(c, (uint64_t[]){MB / 2 - 1}, 1, 0);
  expect_bucket(c, (uint64_t[]){MB / 2}, 1, 1);
  expect_bucket(c, (uint64_t[]){MB - 1}, 1, 1);
  expect_bucket(c, (uint64_t[]){MB}, 1, 2);
  /* A batch is counted by the bytes of the whole transfer. */
  expect_bucket(c, (uint64_t[]){MB / 4, MB / 4}, 2, 1);
  expect_bucket(c, (uint64_t[]){MB / 4, MB / 4 - 1}, 2, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* tp_rank, pcp_rank and whether the rank saves. */
struct rank_case {
  const char *ranks;
  bool saves;
};

Test(reports, a_rank_that_does_not_save_counts_each_entry_it_skips)
{
  static const struct rank_case cases[] = {
      {"tp_rank = 0\npcp_rank = 0\n", true},
      {"tp_rank = 0\npcp_rank = 1\n", false},
      {"tp_rank = 2\npcp_rank = 0\n", false},
  };
  static uint8_t buf[3 * BS];
  uint32_t ids[] = {0, 1, 2};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char extra[96];
    snprintf(extra, sizeof(extra), "\n[connector]\n%s", cases[i].ranks);
    ecc_connector_t *c = th_open("producer", th_region_name(), BS, NB, extra);
    cr_expect_eq(th_describe(c).save_rank, cases[i].saves, "%s", cases[i].ranks);
    ecc_save_entry_t e[3];
    for (int k = 0; k < 3; k++)
      e[k] = (ecc_save_entry_t){k == 0   ? "a"
                                : k == 1 ? "b"
                                         : "c",
                                (uint64_t)(uintptr_t)(buf + k * BS), BS, &ids[k], 1};
    cr_assert_eq(ecc_save(c, e, 3), ECC_OK);
    cr_assert_eq(ecc_save(c, e, 2), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    ecc_completion_t done[5];
    size_t want = cases[i].saves ? 5 : 0;
    cr_expect_eq(th_poll_until(c, done, 5, cases[i].saves ? 5000 : 50), want, "%s", cases[i].ranks);
    ecc_stats_t st = th_stats(c);
    cr_expect_eq(st.saves_skipped, cases[i].saves ? 0 : 5, "%s: %llu skipped", cases[i].ranks,
                 (unsigned long long)st.saves_skipped);
    cr_expect_eq(st.save.transfers, cases[i].saves ? 1 : 0, "%s", cases[i].ranks);
    cr_assert_eq(ecc_close(c), ECC_OK);
  }
}

/* Flushes that succeed before the first ECC_ERR_BUSY: the bound enforced. */
static uint64_t enforced_bound(ecc_connector_t *c)
{
  static uint8_t buf[BS];
  uint32_t id = 0;
  for (uint64_t n = 0;; n++) {
    ecc_save_entry_t e = {"bound", (uint64_t)(uintptr_t)buf, BS, &id, 1};
    cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
    int rc = ecc_flush(c, NULL);
    if (rc == ECC_ERR_BUSY)
      return n;
    cr_assert_eq(rc, ECC_OK);
    cr_assert_lt(n, 100000, "no bound on transfers in flight");
  }
}

static void expect_described(const ecc_info_t *info, const char *name, const char *role,
                             bool creator)
{
  const char *path = th_region_path(th_default_dir(), name);
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "no region file at %s", path);
  cr_expect_str_eq(info->region_path, path);
  cr_expect_eq(info->creator, creator, "%s: creator %u", role, info->creator);
  cr_expect_eq(info->block_size, BS);
  cr_expect_eq(info->num_blocks, NB);
  cr_expect_eq(info->region_bytes, (uint64_t)st.st_size, "region_bytes %llu, the file has %lld",
               (unsigned long long)info->region_bytes, (long long)st.st_size);
  cr_expect_str_eq(info->engine, "host");
  cr_expect_str_eq(info->role, role);
  cr_expect_eq(info->save_rank, 1);
  cr_expect_eq(info->pinned, 0, "%s: pinned with pinning.enabled = off", role);
}

Test(reports, describe_says_what_was_built)
{
  const char *extra = "\n[connector]\nmax_inflight = 7\n[pinning]\nenabled = off\n";
  const char *roles[] = {"producer", "consumer", "both"};
  for (int i = 0; i < 3; i++) {
    const char *name = th_region_name();
    ecc_connector_t *first = th_open(roles[i], name, BS, NB, extra);
    ecc_connector_t *second = th_open("both", name, BS, NB, extra);
    ecc_info_t a = th_describe(first), b = th_describe(second);
    expect_described(&a, name, roles[i], true);
    expect_described(&b, name, "both", false);
    cr_expect_eq(a.max_inflight, 7);
    if (strcmp(roles[i], "consumer") != 0)
      cr_expect_eq(enforced_bound(first), a.max_inflight, "describe's bound is not the one kept");
    cr_assert_eq(ecc_close(second), ECC_OK);
    cr_assert_eq(ecc_close(first), ECC_OK);
  }
}

Test(reports, a_load_moves_its_blocks_at_most)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[2 * BS], dst[4 * BS];
  th_fill(src, sizeof(src), 21);
  uint32_t ids[] = {9, 4};
  ecc_save_entry_t s = {"two", (uint64_t)(uintptr_t)src, sizeof(src), ids, 2};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  memset(dst, 0x3C, sizeof(dst));
  /* Room for four blocks, two listed: two blocks move. */
  ecc_load_entry_t l = {5, ids, 2, (uint64_t)(uintptr_t)dst, sizeof(dst)};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_expect_eq(done[0].nbytes, 2 * BS, "the load reports %llu bytes",
               (unsigned long long)done[0].nbytes);
  cr_expect_eq(memcmp(dst, src, sizeof(src)), 0);
  for (size_t i = 2 * BS; i < sizeof(dst); i++)
    cr_assert_eq(dst[i], 0x3C, "byte %zu, past the blocks, was written", i);
  cr_expect_eq(th_stats(c).load.bytes, 2 * BS);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(reports, the_table_claims_what_it_implements)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  cr_expect(t->caps & ECC_CAP_SAVE);
  cr_expect(t->caps & ECC_CAP_LOAD);
  cr_expect(t->caps & ECC_CAP_HOST_ENGINE, "the host engine is always built");
  cr_expect_eq(!!(t->caps & ECC_CAP_STATS), t->stats != NULL, "caps 0x%x", t->caps);
#ifdef ECC_HAVE_CUDA
  cr_expect(t->caps & ECC_CAP_CUDA_ENGINE, "built with CUDA but not claimed");
#else
  cr_expect_not(t->caps & ECC_CAP_CUDA_ENGINE, "claims a CUDA engine it was built without");
#endif
  dlclose(lib);
}
