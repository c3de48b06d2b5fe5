/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_connector.c - the connector's contract through the real plugin: bad
 * input rejected with no state change, the in-flight bound, FIFO
 * exactly-once completions over many steps, and the handle state machine.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/region/region.h"
#include "tests/helpers.h"

#define BS 64u
#define NB 256u

static void expect_error(ecc_connector_t *c, int got, int want, const char *must_say)
{
  char text[512] = "";
  cr_expect_eq(got, want, "returned %d (%s), expected %d", got, ecc_strerror(got), want);
  cr_assert_eq(ecc_last_error(c, text, sizeof(text)), ECC_OK);
  cr_expect(strstr(text, must_say) != NULL, "message '%s' lacks '%s'", text, must_say);
}

/* After a rejected call nothing may have been queued: a flush moves only
 * the good entry saved afterwards. */
static void expect_nothing_queued(ecc_connector_t *c)
{
  static uint8_t src[BS];
  th_fill(src, sizeof(src), 1);
  ecc_save_entry_t good = {"good", (uint64_t)(uintptr_t)src, BS, (uint32_t[]){0}, 1};
  cr_assert_eq(ecc_save(c, &good, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[4];
  size_t n = th_poll_until(c, done, 1, 5000);
  cr_assert_eq(n, 1);
  cr_expect_str_eq(done[0].key, "good");
  cr_expect_eq(th_poll_until(c, done, 1, 20), 0, "a rejected entry was transferred");
  cr_expect_eq(th_stats(c).save.bytes, BS, "bytes beyond the good entry moved");
}

Test(connector, bad_saves_are_rejected_and_change_nothing)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[4 * BS];
  uint64_t s = (uint64_t)(uintptr_t)src;
  char long_key[ECC_KEY_MAX + 2];
  memset(long_key, 'k', sizeof(long_key) - 1);
  long_key[sizeof(long_key) - 1] = '\0';
  uint32_t ok_ids[] = {1, 2};
  uint32_t far_ids[] = {1, NB};

  ecc_save_entry_t good = {"a", s, BS, ok_ids, 1};
  ecc_save_entry_t bad[] = {
      {"b", s, BS, far_ids, 2},             /* block id out of range */
      {"c", s, 2 * BS + 1, ok_ids, 2},      /* larger than its blocks */
      {"", s, BS, ok_ids, 1},               /* empty key */
      {long_key, s, BS, ok_ids, 1},         /* over-long key */
      {NULL, s, BS, ok_ids, 1},             /* NULL key */
      {"d", 0, BS, ok_ids, 1},              /* NULL source */
      {"e", s, BS, NULL, 1},                /* NULL block ids */
      {"f", s, 0, ok_ids, 1},               /* zero bytes */
      {"g", UINT64_MAX - 8, BS, ok_ids, 1}, /* wraps around */
  };
  const int want[] = {ECC_ERR_RANGE,   ECC_ERR_RANGE,   ECC_ERR_INVALID,
                      ECC_ERR_INVALID, ECC_ERR_INVALID, ECC_ERR_INVALID,
                      ECC_ERR_INVALID, ECC_ERR_INVALID, ECC_ERR_INVALID};
  const char *say[] = {"out of range", "exceeds allocated blocks",
                       "empty key",    "longer than",
                       "NULL key",     "NULL source",
                       "no block ids", "0 bytes",
                       "wraps"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    /* A good entry first in the same call: it must not be queued either. */
    ecc_save_entry_t pair[2] = {good, bad[i]};
    expect_error(c, ecc_save(c, pair, 2), want[i], say[i]);
  }
  expect_error(c, ecc_save(c, NULL, 3), ECC_ERR_INVALID, "NULL");
  expect_nothing_queued(c);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, bad_loads_are_rejected_and_change_nothing)
{
  ecc_connector_t *c = th_open("consumer", th_region_name(), BS, NB, NULL);
  static uint8_t dst[4 * BS];
  uint64_t d = (uint64_t)(uintptr_t)dst;
  uint32_t ok_ids[] = {1, 2};
  uint32_t far_ids[] = {7, 4096};
  ecc_load_entry_t good = {1, ok_ids, 2, d, sizeof(dst)};
  ecc_load_entry_t bad[] = {
      {2, far_ids, 2, d, sizeof(dst)}, {3, ok_ids, 2, 0, sizeof(dst)}, {4, ok_ids, 2, d, 0},
      {5, NULL, 2, d, sizeof(dst)},    {6, ok_ids, 0, d, sizeof(dst)},
  };
  const int want[] = {ECC_ERR_RANGE, ECC_ERR_INVALID, ECC_ERR_INVALID, ECC_ERR_INVALID,
                      ECC_ERR_INVALID};
  const char *say[] = {"block id 4096", "NULL destination", "capacity of 0", "no block ids",
                       "no block ids"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ecc_load_entry_t pair[2] = {good, bad[i]};
    expect_error(c, ecc_load(c, pair, 2, NULL), want[i], say[i]);
  }
  ecc_completion_t done[2];
  cr_expect_eq(th_poll_until(c, done, 1, 50), 0, "a rejected load was transferred");
  cr_expect_eq(th_stats(c).load.transfers, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* The range check compares four ids at a time, then the rest one by one: a
 * bad id is found in every lane and in the tail, the first id past the end
 * as the largest, and the message names its position; ids up to the last
 * block pass. */
Test(connector, a_block_id_past_the_region_is_found_at_every_position)
{
  ecc_connector_t *c = th_open("consumer", th_region_name(), BS, NB, NULL);
  static uint8_t dst[11 * BS];
  uint64_t d = (uint64_t)(uintptr_t)dst;
  const uint32_t past[] = {NB, NB + 1, 1u << 31, UINT32_MAX};
  uint32_t ids[11];
  for (uint32_t at = 0; at < 11; at++) {
    for (size_t k = 0; k < sizeof(past) / sizeof(past[0]); k++) {
      for (uint32_t i = 0; i < 11; i++)
        ids[i] = NB - 1 - i;
      ids[at] = past[k];
      ecc_load_entry_t e = {at, ids, 11, d, sizeof(dst)};
      char want[64];
      snprintf(want, sizeof(want), "block id %u (position %u)", past[k], at);
      expect_error(c, ecc_load(c, &e, 1, NULL), ECC_ERR_RANGE, want);
    }
  }
  for (uint32_t i = 0; i < 11; i++)
    ids[i] = NB - 1 - i;
  ecc_load_entry_t last = {99, ids, 11, d, sizeof(dst)};
  cr_assert_eq(ecc_load(c, &last, 1, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_expect_eq(done[0].transfer_id, 99);
  cr_expect_eq(done[0].status, ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, roles_are_enforced)
{
  static uint8_t buf[BS];
  uint32_t ids[] = {0};
  ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, BS, ids, 1};
  ecc_load_entry_t l = {1, ids, 1, (uint64_t)(uintptr_t)buf, BS};
  ecc_connector_t *cons = th_open("consumer", th_region_name(), BS, NB, NULL);
  expect_error(cons, ecc_save(cons, &s, 1), ECC_ERR_ROLE, "consumer");
  cr_assert_eq(ecc_close(cons), ECC_OK);
  ecc_connector_t *prod = th_open("producer", th_region_name(), BS, NB, NULL);
  expect_error(prod, ecc_load(prod, &l, 1, NULL), ECC_ERR_ROLE, "producer");
  cr_assert_eq(ecc_close(prod), ECC_OK);
}

Test(connector, host_engine_refuses_a_stream)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t buf[BS];
  uint32_t ids[] = {0};
  ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, BS, ids, 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  expect_error(c, ecc_flush(c, (void *)0x1234), ECC_ERR_INVALID, "no compute stream");
  /* The queue survived the refused flush. */
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_expect_eq(th_poll_until(c, done, 1, 5000), 1);
  ecc_load_entry_t l = {1, ids, 1, (uint64_t)(uintptr_t)buf, BS};
  expect_error(c, ecc_load(c, &l, 1, (void *)0x1234), ECC_ERR_INVALID, "no compute stream");
  cr_expect_eq(th_poll_until(c, done, 1, 50), 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, inflight_bound_returns_busy_then_recovers)
{
  ecc_connector_t *c =
      th_open("both", th_region_name(), BS, NB, "\n[connector]\nmax_inflight = 2\n");
  static uint8_t buf[BS];
  uint32_t ids[] = {0};
  char key[16];
  for (int i = 0; i < 2; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)buf, BS, ids, 1};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  }
  ecc_save_entry_t s = {"k2", (uint64_t)(uintptr_t)buf, BS, ids, 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  expect_error(c, ecc_flush(c, NULL), ECC_ERR_BUSY, "max_inflight");
  ecc_completion_t done[3];
  cr_assert_eq(th_poll_until(c, done, 2, 5000), 2);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK, "the queued save was lost after BUSY");
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_expect_str_eq(done[0].key, "k2");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, fifo_exactly_once_over_many_steps)
{
  enum { STEPS = 400, PER = 5 };
  ecc_connector_t *c =
      th_open("both", th_region_name(), BS, NB, "\n[connector]\nmax_inflight = 16\n");
  static uint8_t src[PER][8 * BS], dst[16][PER][4 * BS]; /* 16 = max_inflight */
  for (int e = 0; e < PER; e++)
    th_fill(src[e], sizeof(src[e]), (uint64_t)e + 1);
  int next_save = 0, next_load = 0, saved = 0, loaded = 0, flush_pending = 0;
  ecc_completion_t done[64];
  srand(7);
  while (next_save < STEPS * PER || next_load < STEPS * PER) {
    if (saved < STEPS) {
      /* After BUSY the step stays queued: retry its flush, queue nothing. */
      if (!flush_pending) {
        ecc_save_entry_t e[PER];
        char keys[PER][24];
        uint32_t ids[PER][8];
        for (int k = 0; k < PER; k++) {
          snprintf(keys[k], sizeof(keys[k]), "s%d", saved * PER + k);
          for (int b = 0; b < 8; b++)
            ids[k][b] = (uint32_t)(rand() % (NB / 2)); /* saves: lower half */
          e[k] = (ecc_save_entry_t){keys[k], (uint64_t)(uintptr_t)src[k],
                                    1 + (uint64_t)(rand() % (8 * BS)), ids[k], 8};
        }
        cr_assert_eq(ecc_save(c, e, PER), ECC_OK);
      }
      int rc = ecc_flush(c, NULL);
      cr_assert(rc == ECC_OK || rc == ECC_ERR_BUSY);
      flush_pending = rc == ECC_ERR_BUSY;
      if (rc == ECC_OK)
        saved++;
    }
    if (loaded < STEPS) {
      ecc_load_entry_t e[PER];
      uint32_t ids[PER][4];
      for (int k = 0; k < PER; k++) {
        for (int b = 0; b < 4; b++)
          ids[k][b] = (uint32_t)(NB / 2 + rand() % (NB / 2)); /* loads: upper half */
        e[k] = (ecc_load_entry_t){(uint64_t)(loaded * PER + k), ids[k], 4,
                                  (uint64_t)(uintptr_t)dst[loaded % 16][k], 4 * BS};
      }
      int rc = ecc_load(c, e, PER, NULL);
      cr_assert(rc == ECC_OK || rc == ECC_ERR_BUSY);
      if (rc == ECC_OK)
        loaded++;
    }
    size_t n = 0;
    cr_assert_eq(ecc_poll(c, done, 3, &n), ECC_OK); /* small cap: batches split over polls */
    for (size_t i = 0; i < n; i++) {
      cr_assert_eq(done[i].status, ECC_OK);
      if (done[i].direction == ECC_DIR_SAVE) {
        char want[24];
        snprintf(want, sizeof(want), "s%d", next_save++);
        cr_assert_str_eq(done[i].key, want, "save completions out of order or repeated");
      } else {
        cr_assert_eq(done[i].transfer_id, (uint64_t)next_load++, "load completions out of order");
      }
    }
  }
  size_t n = 0;
  cr_assert_eq(ecc_poll(c, done, 64, &n), ECC_OK);
  cr_expect_eq(n, 0, "completions reported after all were seen");
  ecc_stats_t s = th_stats(c);
  cr_expect_eq(s.save.entries, STEPS * PER);
  cr_expect_eq(s.load.entries, STEPS * PER);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

struct poller {
  ecc_connector_t *c;
  int want;
  int got;
  int in_order;
};

static void *poll_thread(void *arg)
{
  struct poller *p = arg;
  ecc_completion_t done[16];
  p->in_order = 1;
  time_t give_up = time(NULL) + 60;
  while (p->got < p->want && time(NULL) < give_up) {
    size_t n = 0;
    if (ecc_poll(p->c, done, 16, &n) != ECC_OK)
      break;
    for (size_t i = 0; i < n; i++) {
      char want[24];
      snprintf(want, sizeof(want), "k%d", p->got++);
      if (strcmp(done[i].key, want) != 0)
        p->in_order = 0;
    }
  }
  return NULL;
}

Test(connector, poll_from_another_thread_than_save)
{
  enum { N = 2000 };
  ecc_connector_t *c =
      th_open("producer", th_region_name(), BS, NB, "\n[connector]\nmax_inflight = 8\n");
  struct poller p = {c, N, 0, 0};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, poll_thread, &p), 0);
  static uint8_t src[BS];
  uint32_t ids[] = {5};
  for (int i = 0; i < N;) {
    char key[24];
    snprintf(key, sizeof(key), "k%d", i);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)src, BS, ids, 1};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    int rc;
    time_t give_up = time(NULL) + 60;
    while ((rc = ecc_flush(c, NULL)) == ECC_ERR_BUSY && time(NULL) < give_up)
      sched_yield();
    cr_assert_eq(rc, ECC_OK);
    i++;
  }
  pthread_join(th, NULL);
  cr_expect_eq(p.got, N);
  cr_expect(p.in_order, "completions out of order across threads");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* A connector made through the raw table (th_raw_table): the plugin's own state
 * machine, without the shim. */
static ecc_handle_t raw_create(const ecc_plugin_v1_t *t, const char *region)
{
  ecc_kv_v1_t kv[] = {{"region.name", region},
                      {"region.block_size", "64"},
                      {"region.size", "64KiB"},
                      {"engine.type", "host"}};
  char err[256] = "";
  ecc_create_args_v1_t args = {sizeof(args), 1, 0, kv, 4, NULL, err, sizeof(err)};
  ecc_handle_t h = 0;
  cr_assert_eq(t->create(&args, &h), ECC_OK, "%s", err);
  cr_assert_neq(h, 0);
  return h;
}

Test(connector, shutdown_twice_and_calls_after_shutdown)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  ecc_handle_t h = raw_create(t, th_region_name());
  static uint8_t buf[64];
  uint32_t ids[] = {0};
  ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, 64, ids, 1};
  cr_assert_eq(t->save(h, &s, 1), ECC_OK);
  cr_assert_eq(t->flush(h, NULL), ECC_OK);
  cr_assert_eq(t->shutdown(h), ECC_OK, "shutdown with a transfer in flight");
  cr_expect_eq(t->shutdown(h), ECC_ERR_CLOSED);
  cr_expect_eq(t->save(h, &s, 1), ECC_ERR_CLOSED);
  cr_expect_eq(t->flush(h, NULL), ECC_ERR_CLOSED);
  ecc_load_entry_t l = {1, ids, 1, (uint64_t)(uintptr_t)buf, 64};
  cr_expect_eq(t->load(h, &l, 1, NULL), ECC_ERR_CLOSED);
  size_t n;
  ecc_completion_t done[1];
  cr_expect_eq(t->poll(h, done, 1, &n), ECC_ERR_CLOSED);
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_expect_eq(t->stats(h, &st), ECC_ERR_CLOSED);
  char text[64];
  cr_expect_eq(t->last_error(h, text, sizeof(text)), ECC_ERR_CLOSED);
  /* A new connector reusing the slot does not revive the old handle. */
  ecc_handle_t h2 = raw_create(t, th_region_name());
  cr_expect_neq(h2, h);
  cr_expect_eq(t->poll(h, done, 1, &n), ECC_ERR_CLOSED);
  cr_expect_eq(t->poll(h2, done, 1, &n), ECC_OK);
  cr_expect_eq(t->shutdown(h2), ECC_OK);
  /* Handles that never existed. */
  cr_expect_eq(t->poll(0, done, 1, &n), ECC_ERR_CLOSED);
  cr_expect_eq(t->poll(0xdeadbeef00000007ull, done, 1, &n), ECC_ERR_CLOSED);
  cr_expect_eq(t->shutdown(UINT64_MAX), ECC_ERR_CLOSED);
  dlclose(lib);
}

Test(connector, create_refuses_newer_minor_and_other_major)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  ecc_kv_v1_t kv[] = {{"region.block_size", "64"}};
  char err[256] = "";
  ecc_handle_t h = 7;
  ecc_create_args_v1_t args = {sizeof(args), 1,   ECC_ABI_V1_MINOR + 1, kv, 1,
                               NULL,         err, sizeof(err)};
  cr_expect_eq(t->create(&args, &h), ECC_ERR_INCOMPATIBLE);
  cr_expect_eq(h, 0);
  cr_expect(strstr(err, "ABI") != NULL, "%s", err);
  args.abi_major = 2;
  args.abi_minor = 0;
  cr_expect_eq(t->create(&args, &h), ECC_ERR_INCOMPATIBLE);
  cr_expect_eq(t->create(NULL, &h), ECC_ERR_INVALID);
  dlclose(lib);
}

Test(connector, failed_create_leaves_no_file)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  const char *name = th_region_name();
  char path[256];
  snprintf(path, sizeof(path), "%s", th_region_path(th_default_dir(), name));
  /* Valid config, but engine.type = cuda fails after the region opened
   * when the CUDA engine is absent or has no GPU. */
  ecc_kv_v1_t kv[] = {{"region.name", name},
                      {"region.block_size", "64"},
                      {"region.size", "64KiB"},
                      {"engine.type", "cuda"},
                      {"engine.device", "1023"}};
  char err[256] = "";
  ecc_create_args_v1_t args = {sizeof(args), 1, 0, kv, 5, NULL, err, sizeof(err)};
  ecc_handle_t h = 0;
  int rc = t->create(&args, &h);
  cr_expect_neq(rc, ECC_OK);
  cr_expect(strstr(err, "cuda") != NULL || strstr(err, "CUDA") != NULL ||
                strstr(err, "device") != NULL,
            "%s", err);
  cr_expect(!th_exists(path), "a failed create left %s behind", path);
  dlclose(lib);
}

/* perm = a random permutation of 0..n-1, the same for the same seed. */
static void shuffled(uint32_t *perm, uint32_t n, unsigned seed)
{
  for (uint32_t i = 0; i < n; i++)
    perm[i] = i;
  srand(seed);
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)rand() % (i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}

/* Fills src with pattern `seed`, saves it as one entry over every block of
 * the region in order (ids[i] = i) and waits for the save. */
static void save_every_block(ecc_connector_t *c, uint8_t src[NB * BS], uint32_t ids[NB],
                             uint64_t seed)
{
  th_fill(src, NB * BS, seed);
  for (uint32_t i = 0; i < NB; i++)
    ids[i] = i;
  ecc_save_entry_t s = {"all", (uint64_t)(uintptr_t)src, (uint64_t)NB * BS, ids, NB};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
}

Test(connector, load_sorts_many_entries_so_neighbours_coalesce)
{
  enum { N = NB }; /* every block once, one entry each, given in random order */
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[NB * BS], dst[NB * BS];
  uint32_t ids[NB];
  save_every_block(c, src, ids, 31);
  ecc_completion_t done[N];

  uint32_t perm[N];
  shuffled(perm, N, 11);
  /* Entry k loads block perm[k] to where that block sits in dst: sorted by
   * first block, consecutive entries continue each other on both sides. */
  ecc_load_entry_t e[N];
  for (uint32_t k = 0; k < N; k++)
    e[k] = (ecc_load_entry_t){k, &ids[perm[k]], 1, (uint64_t)(uintptr_t)(dst + perm[k] * BS), BS};
  cr_assert_eq(ecc_load(c, e, N, NULL), ECC_OK);
  cr_assert_eq(th_poll_until(c, done, N, 5000), N);
  for (uint32_t k = 0; k < N; k++)
    cr_assert_eq(done[k].transfer_id, k, "completions follow the host's order");
  cr_expect_eq(memcmp(dst, src, sizeof(src)), 0);
  cr_expect_eq(th_stats(c).load.descriptors, 1,
               "%llu descriptors: the sort did not bring neighbours together",
               (unsigned long long)th_stats(c).load.descriptors);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, load_sort_spans_several_bytes_of_block_ids)
{
  enum { N = 4096, FIRST = 61000, SMALL = 16 }; /* ids 61000..65095 cross byte boundaries */
  ecc_connector_t *c = th_open("both", th_region_name(), SMALL, 65536, NULL);
  static uint8_t src[N * SMALL], dst[N * SMALL];
  static uint32_t ids[N], perm[N];
  th_fill(src, sizeof(src), 32);
  for (uint32_t i = 0; i < N; i++)
    ids[i] = FIRST + i;
  ecc_save_entry_t s = {"all", (uint64_t)(uintptr_t)src, sizeof(src), ids, N};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  static ecc_completion_t done[N];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  shuffled(perm, N, 12);
  static ecc_load_entry_t e[N];
  for (uint32_t k = 0; k < N; k++)
    e[k] = (ecc_load_entry_t){k, &ids[perm[k]], 1, (uint64_t)(uintptr_t)(dst + perm[k] * SMALL),
                              SMALL};
  cr_assert_eq(ecc_load(c, e, N, NULL), ECC_OK);
  cr_assert_eq(th_poll_until(c, done, N, 5000), N);
  cr_expect_eq(memcmp(dst, src, sizeof(src)), 0);
  cr_expect_eq(th_stats(c).load.descriptors, 1);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, load_in_host_order_when_destinations_ascend)
{
  /* Blocks in random order but destinations ascending: merges can only join
   * entries that are neighbours in the host's order, so no sort is needed
   * and the descriptors are exactly the breaks in that order. */
  enum { N = NB };
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[NB * BS], dst[NB * BS];
  uint32_t ids[NB];
  save_every_block(c, src, ids, 33);
  ecc_completion_t done[N];

  uint32_t perm[N];
  shuffled(perm, N, 13);
  /* Keep a few runs of neighbours so that some entries do merge. */
  for (uint32_t k = 0; k + 1 < N; k += 16)
    perm[k + 1] = perm[k] + 1 < NB ? perm[k] + 1 : perm[k + 1];
  uint64_t breaks = 0;
  ecc_load_entry_t e[N];
  for (uint32_t k = 0; k < N; k++) {
    e[k] = (ecc_load_entry_t){k, &ids[perm[k]], 1, (uint64_t)(uintptr_t)(dst + k * BS), BS};
    if (k == 0 || perm[k] != perm[k - 1] + 1)
      breaks++;
  }
  cr_assert_eq(ecc_load(c, e, N, NULL), ECC_OK);
  cr_assert_eq(th_poll_until(c, done, N, 5000), N);
  for (uint32_t k = 0; k < N; k++) {
    cr_assert_eq(done[k].transfer_id, k, "completions follow the host's order");
    cr_assert_eq(memcmp(dst + k * BS, src + perm[k] * BS, BS), 0, "entry %u holds the wrong block",
                 k);
  }
  cr_expect(breaks < N, "the test must contain neighbours");
  cr_expect_eq(th_stats(c).load.descriptors, breaks, "%llu descriptors, %llu breaks in host order",
               (unsigned long long)th_stats(c).load.descriptors, (unsigned long long)breaks);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, save_completions_carry_each_key_exactly)
{
  /* Keys of every length from 1 to the maximum, reported back byte for byte
   * (completions keep the keys packed until poll writes the records). */
  enum { N = ECC_KEY_MAX };
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  static uint8_t src[N * BS];
  static char keys[N][ECC_KEY_MAX + 1];
  uint32_t ids[N];
  ecc_save_entry_t e[N];
  th_fill(src, sizeof(src), 34);
  for (uint32_t i = 0; i < N; i++) {
    size_t len = (size_t)i + 1;
    for (size_t j = 0; j < len; j++)
      keys[i][j] = (char)('a' + (i + j) % 26);
    keys[i][len] = '\0';
    ids[i] = NB - 1 - i;
    e[i] = (ecc_save_entry_t){keys[i], (uint64_t)(uintptr_t)(src + i * BS), BS, &ids[i], 1};
  }
  cr_assert_eq(ecc_save(c, e, N), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  static ecc_completion_t done[N];
  cr_assert_eq(th_poll_until(c, done, N, 5000), N);
  for (uint32_t i = 0; i < N; i++) {
    cr_assert_str_eq(done[i].key, keys[i]);
    cr_assert_eq(done[i].direction, ECC_DIR_SAVE);
    cr_assert_eq(done[i].transfer_id, 0);
    cr_assert_eq(done[i].nbytes, BS);
    cr_assert_eq(done[i].status, ECC_OK);
  }
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(connector, rejected_save_leaves_the_queued_batch_as_it_was)
{
  /* A queued entry, then a call whose first entry would merge into it and
   * whose second is bad, then a good entry elsewhere: the batch must move
   * the two good entries, to their blocks, and nothing of the rejected call. */
  const char *name = th_region_name();
  ecc_connector_t *c = th_open("both", name, BS, NB, NULL);
  static uint8_t src[3 * BS];
  th_fill(src, sizeof(src), 35);
  uint32_t first[] = {0}, next[] = {1}, wild[] = {NB}, far[] = {10};
  ecc_save_entry_t a = {"a", (uint64_t)(uintptr_t)src, BS, first, 1};
  cr_assert_eq(ecc_save(c, &a, 1), ECC_OK);
  ecc_save_entry_t call[2] = {
      {"b", (uint64_t)(uintptr_t)(src + BS), BS, next, 1}, /* continues a on both sides */
      {"c", (uint64_t)(uintptr_t)src, BS, wild, 1},        /* block id out of range */
  };
  cr_assert_eq(ecc_save(c, call, 2), ECC_ERR_RANGE);
  ecc_save_entry_t d = {"d", (uint64_t)(uintptr_t)(src + 2 * BS), BS, far, 1};
  cr_assert_eq(ecc_save(c, &d, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[4];
  cr_assert_eq(th_poll_until(c, done, 2, 5000), 2);
  cr_expect_str_eq(done[0].key, "a");
  cr_expect_str_eq(done[1].key, "d");
  cr_expect_eq(th_poll_until(c, done, 1, 20), 0, "a rejected entry was reported");
  cr_expect_eq(th_stats(c).save.bytes, 2 * BS);

  uint8_t block[BS], zero[BS] = {0};
  int fd = open(th_region_path(th_default_dir(), name), O_RDONLY); /* th_open: the default dir */
  cr_assert(fd >= 0, "cannot open the region file");
  cr_assert_eq(pread(fd, block, BS, REGION_HEADER_BYTES + 1 * BS), (ssize_t)BS);
  cr_expect_eq(memcmp(block, zero, BS), 0, "block 1, only in the rejected call, was written");
  cr_assert_eq(pread(fd, block, BS, REGION_HEADER_BYTES + 10 * BS), (ssize_t)BS);
  cr_expect_eq(memcmp(block, src + 2 * BS, BS), 0, "block 10 does not hold entry d");
  close(fd);
  cr_assert_eq(ecc_close(c), ECC_OK);
}
