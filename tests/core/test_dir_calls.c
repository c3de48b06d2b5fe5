/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dir_calls.c - the directory of ABI 1.1 through the host library with
 * the real plugin: an entry's whole life (reserve, save, publish on the
 * polled completion, lookup and pin, load, release), dedup, tokens that go
 * stale, refusals that change nothing, the block-id path on a region with a
 * directory, listing, counters, and what shutdown settles.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/internal.h"
#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 64u
#define DIR_ON "[directory]\nenabled = true\n"

static ecc_connector_t *open_dir(const char *role, const char *region)
{
  return th_open(role, region, BS, NB, DIR_ON);
}

static ecc_entry_t reserve_ok(ecc_connector_t *c, const char *key, uint64_t nbytes)
{
  ecc_entry_t e;
  int rc = ecc_reserve(c, key, nbytes, &e);
  char err[512] = "";
  ecc_last_error(c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "reserve %s: %d %s", key, rc, err);
  return e;
}

static uint32_t entry_blocks(const ecc_entry_t *e)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < e->n_extents; i++)
    n += e->extents[i].n_blocks;
  return n;
}

/* Saves a reserved entry from src, flushes, and polls its completion. */
static ecc_completion_t save_one(ecc_connector_t *c, uint64_t token, const void *src,
                                 uint64_t nbytes)
{
  ecc_save_reserved_t s = {token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "no completion for the save");
  return done;
}

static ecc_entry_t lookup_one(ecc_connector_t *c, const char *key, uint32_t ranks)
{
  ecc_entry_t e;
  const char *keys[1] = {key};
  cr_assert_eq(ecc_lookup(c, keys, 1, ranks, &e), ECC_OK);
  return e;
}

static ecc_completion_t load_one(ecc_connector_t *c, uint64_t id, uint64_t pin, void *dst,
                                 uint64_t cap)
{
  ecc_load_pinned_t l = {id, pin, (uint64_t)(uintptr_t)dst, cap};
  cr_assert_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "no completion for the load");
  return done;
}

static ecc_directory_stats_t dstats(ecc_connector_t *c)
{
  return th_stats(c).directory;
}

Test(dir_calls, an_entry_lives_reserved_ready_pinned_and_released)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint64_t nbytes = 5 * BS + 100;
  uint8_t *src = malloc(nbytes), *dst = calloc(1, nbytes);
  th_fill(src, nbytes, 7);

  ecc_entry_t r = reserve_ok(c, "img-1", nbytes);
  cr_assert_eq(r.state, ECC_ENTRY_RESERVED);
  cr_assert_neq(r.token, 0);
  cr_assert_eq(r.nbytes, nbytes);
  cr_assert_eq(r.n_extents, 1, "an empty region gives one run, not %u", r.n_extents);
  cr_assert_eq(entry_blocks(&r), 6);
  cr_assert_eq(lookup_one(c, "img-1", 1).state, ECC_ENTRY_ABSENT, "visible before it is saved");
  cr_assert_eq(reserve_ok(c, "img-1", nbytes).state, ECC_ENTRY_WRITING);

  ecc_completion_t s = save_one(c, r.token, src, nbytes);
  cr_assert_eq(s.status, ECC_OK);
  cr_assert_str_eq(s.key, "img-1");
  cr_assert_eq(s.nbytes, nbytes);

  ecc_entry_t f = lookup_one(c, "img-1", 1);
  cr_assert_eq(f.state, ECC_ENTRY_READY);
  cr_assert_neq(f.token, 0);
  cr_assert_eq(f.nbytes, nbytes);
  cr_assert_eq(memcmp(f.extents, r.extents, sizeof(r.extents[0]) * r.n_extents), 0);
  cr_assert_eq(dstats(c).pins_live, 1);

  ecc_completion_t l = load_one(c, 42, f.token, dst, nbytes);
  cr_assert_eq(l.status, ECC_OK);
  cr_assert_eq(l.transfer_id, 42);
  cr_assert_eq(l.nbytes, nbytes);
  cr_assert_eq(memcmp(src, dst, nbytes), 0, "the loaded bytes are not the saved ones");
  cr_assert_eq(dstats(c).pins_live, 0, "the polled load did not release its pin");
  cr_assert_eq(ecc_unpin(c, f.token), ECC_ERR_CLOSED, "a released pin was accepted");

  cr_assert_eq(reserve_ok(c, "img-1", nbytes).state, ECC_ENTRY_READY, "no dedup once ready");
  ecc_directory_stats_t d = dstats(c);
  cr_expect_eq(d.entries, 1);
  cr_expect_eq(d.blocks_used, 6);
  cr_expect_eq(d.blocks_free, NB - 6);
  cr_expect_eq(d.reservations, 1);
  cr_expect_eq(d.dedup_hits, 2);
  cr_expect_eq(d.lookups, 2);
  cr_expect_eq(d.hits, 1);
  cr_expect_eq(d.misses, 1);
  cr_expect_eq(d.pins, 1);
  free(src);
  free(dst);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, a_pin_for_two_ranks_needs_two_releases)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS], dst[BS];
  th_fill(src, BS, 3);
  ecc_entry_t r = reserve_ok(c, "k", BS);
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  ecc_entry_t f = lookup_one(c, "k", 2);
  cr_assert_eq(load_one(c, 1, f.token, dst, BS).status, ECC_OK);
  cr_assert_eq(dstats(c).pins_live, 1, "one of two ranks released the pin");
  cr_assert_eq(ecc_remove(c, "k"), ECC_ERR_BUSY, "a pinned entry was removed");
  cr_assert_eq(load_one(c, 2, f.token, dst, BS).status, ECC_OK);
  cr_assert_eq(dstats(c).pins_live, 0);
  cr_assert_eq(ecc_remove(c, "k"), ECC_OK);
  cr_assert_eq(lookup_one(c, "k", 1).state, ECC_ENTRY_ABSENT);
  cr_assert_eq(ecc_remove(c, "k"), ECC_ERR_RANGE);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, an_aborted_reservation_frees_its_blocks_and_its_token)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS];
  ecc_entry_t r = reserve_ok(c, "gone", 3 * BS);
  cr_assert_eq(ecc_abort_reserved(c, r.token), ECC_OK);
  cr_assert_eq(dstats(c).entries, 0);
  cr_assert_eq(dstats(c).blocks_free, NB);
  ecc_save_reserved_t s = {r.token, (uint64_t)(uintptr_t)src, 3 * BS};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_ERR_CLOSED, "a freed token was saved");
  cr_assert_eq(ecc_abort_reserved(c, r.token), ECC_ERR_CLOSED);
  cr_assert_eq(ecc_abort_reserved(c, 0), ECC_ERR_CLOSED);
  ecc_entry_t again = reserve_ok(c, "gone", 3 * BS);
  cr_assert_eq(again.state, ECC_ENTRY_RESERVED);
  cr_assert_neq(again.token, r.token, "a token was given twice");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, a_save_in_flight_cannot_be_aborted_or_saved_twice)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS];
  th_fill(src, BS, 1);
  ecc_entry_t r = reserve_ok(c, "once", BS);
  ecc_save_reserved_t s = {r.token, (uint64_t)(uintptr_t)src, BS};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_ERR_BUSY, "one reservation saved twice");
  cr_assert_eq(ecc_abort_reserved(c, r.token), ECC_ERR_BUSY, "a save in flight was aborted");
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_ERR_CLOSED, "a published token was saved");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, a_refused_save_call_claims_nothing)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[2 * BS];
  ecc_entry_t a = reserve_ok(c, "a", BS);
  ecc_entry_t b = reserve_ok(c, "b", 2 * BS);
  ecc_save_reserved_t s[2] = {{a.token, (uint64_t)(uintptr_t)src, BS},
                              {b.token, (uint64_t)(uintptr_t)src, BS}};
  cr_assert_eq(ecc_save_reserved(c, s, 2), ECC_ERR_RANGE, "a size other than reserved passed");
  char err[512];
  cr_assert_eq(ecc_last_error(c, err, sizeof(err)), ECC_OK);
  cr_assert_not_null(strstr(err, "2048 were reserved"), "%s", err);
  /* Nothing was queued and neither reservation is held by a save. */
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  size_t n = 1;
  cr_assert_eq(ecc_poll(c, &done, 1, &n), ECC_OK);
  cr_assert_eq(n, 0, "a refused call queued a copy");
  cr_assert_eq(ecc_abort_reserved(c, a.token), ECC_OK, "the refused call kept a claim");
  cr_assert_eq(ecc_abort_reserved(c, b.token), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, block_ids_must_lie_in_live_reservations_and_pins)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS], dst[BS];
  th_fill(src, BS, 9);
  uint32_t outside = NB - 1;
  ecc_save_entry_t raw = {"raw", (uint64_t)(uintptr_t)src, BS, &outside, 1};
  cr_assert_eq(ecc_save(c, &raw, 1), ECC_ERR_RANGE, "a block of no reservation was saved to");
  char err[512];
  ecc_last_error(c, err, sizeof(err));
  cr_assert_not_null(strstr(err, "block 63 is not in a live reservation"), "%s", err);

  ecc_entry_t r = reserve_ok(c, "k", BS);
  uint32_t inside = r.extents[0].first_block;
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  ecc_load_entry_t l = {5, &inside, 1, (uint64_t)(uintptr_t)dst, BS};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_ERR_RANGE, "an unpinned entry was read by block id");
  ecc_entry_t f = lookup_one(c, "k", 1);
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
  cr_assert_eq(memcmp(src, dst, BS), 0);
  cr_assert_eq(ecc_unpin(c, f.token), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, eviction_makes_room_and_stale_tokens_are_refused)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  static uint8_t src[16 * BS], dst[16 * BS];
  th_fill(src, sizeof(src), 5);
  uint64_t first_pin = 0;
  char key[32];
  /* 4 entries of 16 blocks fill the region; 8 more evict earlier ones. */
  for (int i = 0; i < 12; i++) {
    snprintf(key, sizeof(key), "e%d", i);
    ecc_entry_t r = reserve_ok(c, key, sizeof(src));
    cr_assert_eq(r.state, ECC_ENTRY_RESERVED, "%s", key);
    cr_assert_eq(r.n_extents, 1, "%s got %u runs", key, r.n_extents);
    cr_assert_eq(save_one(c, r.token, src, sizeof(src)).status, ECC_OK);
    if (i == 0) {
      ecc_entry_t f = lookup_one(c, "e0", 1);
      first_pin = f.token;
      cr_assert_eq(ecc_unpin(c, first_pin), ECC_OK);
    }
  }
  ecc_directory_stats_t d = dstats(c);
  cr_assert_eq(d.entries, 4);
  cr_assert_eq(d.evictions, 8);
  cr_assert_eq(d.blocks_free, 0);
  ecc_load_pinned_t l = {1, first_pin, (uint64_t)(uintptr_t)dst, sizeof(dst)};
  cr_assert_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_ERR_CLOSED, "a stale pin was loaded");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, no_room_without_evicting_a_pinned_entry_is_busy_and_evicts_nothing)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  static uint8_t src[32 * BS];
  ecc_entry_t a = reserve_ok(c, "a", sizeof(src));
  cr_assert_eq(save_one(c, a.token, src, sizeof(src)).status, ECC_OK);
  ecc_entry_t b = reserve_ok(c, "b", sizeof(src));
  cr_assert_eq(save_one(c, b.token, src, sizeof(src)).status, ECC_OK);
  ecc_entry_t pa = lookup_one(c, "a", 1), pb = lookup_one(c, "b", 1);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, "c", BS, &e), ECC_ERR_BUSY);
  ecc_directory_stats_t d = dstats(c);
  cr_assert_eq(d.entries, 2);
  cr_assert_eq(d.evictions, 0);
  cr_assert_eq(d.full, 1);
  cr_assert_eq(ecc_reserve(c, "huge", (NB + 1) * (uint64_t)BS, &e), ECC_ERR_RANGE);
  cr_assert_eq(ecc_unpin(c, pa.token), ECC_OK);
  cr_assert_eq(reserve_ok(c, "c", BS).state, ECC_ENTRY_RESERVED);
  cr_assert_eq(lookup_one(c, "a", 1).state, ECC_ENTRY_ABSENT, "a was not the one evicted");
  cr_assert_eq(ecc_unpin(c, pb.token), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, list_pages_through_the_live_entries)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS];
  char key[32];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof(key), "l%d", i);
    ecc_entry_t r = reserve_ok(c, key, BS);
    if (i < 3)
      cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  }
  uint64_t cursor = 0;
  ecc_listed_t out[2];
  size_t n, total = 0, ready = 0, reserved = 0;
  do {
    cr_assert_eq(ecc_list(c, &cursor, out, 2, &n), ECC_OK);
    cr_assert_leq(n, 2);
    for (size_t i = 0; i < n; i++) {
      cr_assert_eq(strncmp(out[i].key, "l", 1), 0, "%s", out[i].key);
      cr_assert_eq(out[i].n_blocks, 1);
      ready += out[i].state == ECC_ENTRY_READY;
      reserved += out[i].state == ECC_ENTRY_RESERVED;
    }
    total += n;
  } while (n > 0);
  cr_assert_eq(total, 5);
  cr_assert_eq(ready, 3);
  cr_assert_eq(reserved, 2);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, roles_and_arguments_are_checked)
{
  const char *region = th_region_name();
  ecc_connector_t *p = open_dir("producer", region);
  ecc_connector_t *q = open_dir("consumer", region);
  ecc_entry_t e;
  const char *keys[1] = {"k"};
  cr_assert_eq(ecc_reserve(q, "k", 1, &e), ECC_ERR_ROLE);
  cr_assert_eq(ecc_lookup(p, keys, 1, 1, &e), ECC_ERR_ROLE);
  cr_assert_eq(ecc_reserve(p, "", 1, &e), ECC_ERR_INVALID);
  cr_assert_eq(ecc_reserve(p, "k", 0, &e), ECC_ERR_INVALID);
  cr_assert_eq(ecc_reserve(p, "k", 1, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_lookup(q, keys, 1, 0, &e), ECC_ERR_INVALID);
  cr_assert_eq(dstats(p).entries, 0, "a refused call changed the directory");
  /* What the producer reserves and saves, the consumer finds. */
  uint8_t src[BS], dst[BS];
  th_fill(src, BS, 4);
  ecc_entry_t r = reserve_ok(p, "k", BS);
  cr_assert_eq(save_one(p, r.token, src, BS).status, ECC_OK);
  ecc_entry_t f = lookup_one(q, "k", 1);
  cr_assert_eq(f.state, ECC_ENTRY_READY);
  cr_assert_eq(load_one(q, 9, f.token, dst, BS).status, ECC_OK);
  cr_assert_eq(memcmp(src, dst, BS), 0);
  cr_assert_eq(ecc_close(q), ECC_OK);
  cr_assert_eq(ecc_close(p), ECC_OK);
}

Test(dir_calls, a_region_without_a_directory_answers_unsupported)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, NULL);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, "k", 1, &e), ECC_ERR_UNSUPPORTED);
  ecc_stats_t st = th_stats(c);
  cr_assert_eq(st.directory.entries, 0);
  cr_assert_eq(st.directory.blocks_free, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, processes_must_agree_on_the_directory)
{
  const char *region = th_region_name();
  ecc_connector_t *c = open_dir("both", region);
  char err[512] = "";
  ecc_connector_t *other = NULL;
  const char *plain = th_ini("both", region, BS, NB, "[region]\njoin_timeout_ms = 200\n");
  cr_assert_eq(ecc_open(plain, NULL, &other, err, sizeof(err)), ECC_ERR_REGION);
  cr_assert_not_null(strstr(err, "a region with a directory and one without"), "%s", err);
  const char *bigger =
      th_ini("both", region, BS, NB, DIR_ON "max_entries = 500\n[region]\njoin_timeout_ms = 200\n");
  cr_assert_eq(ecc_open(bigger, NULL, &other, err, sizeof(err)), ECC_ERR_REGION);
  cr_assert_null(other);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, shutdown_frees_an_unsubmitted_save_and_keeps_finished_ones)
{
  const char *region = th_region_name();
  ecc_connector_t *keeper = open_dir("both", region);
  ecc_connector_t *c = open_dir("both", region);
  uint8_t src[BS];
  /* One copy completes but is never polled; the other is never flushed. */
  ecc_entry_t unpolled = reserve_ok(c, "unpolled", BS);
  ecc_save_reserved_t s = {unpolled.token, (uint64_t)(uintptr_t)src, BS};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_entry_t unflushed = reserve_ok(c, "unflushed", BS);
  ecc_save_reserved_t t = {unflushed.token, (uint64_t)(uintptr_t)src, BS};
  cr_assert_eq(ecc_save_reserved(c, &t, 1), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert_eq(dstats(keeper).entries, 1, "shutdown left %llu entries",
               (unsigned long long)dstats(keeper).entries);
  cr_assert_eq(lookup_one(keeper, "unpolled", 1).state, ECC_ENTRY_READY,
               "a completed copy was thrown away at shutdown");
  cr_assert_eq(lookup_one(keeper, "unflushed", 1).state, ECC_ENTRY_ABSENT,
               "a copy that never ran was published");
  cr_assert_eq(ecc_close(keeper), ECC_OK);
}

/* ---- a scheduler that reserves and looks up, workers that copy ---- */

/* What the scheduler hands a worker: a token and where its bytes come from. */
struct order {
  uint64_t token;
  uint64_t nbytes;
  uint64_t seed;
  uint32_t load; /* 0: save the reservation; 1: load the pinned entry */
};

/* A worker: its own connector on the region, copying what it is told; each
 * order answered with the completion's status on the same pipe pair. */
static int worker(const char *ini, int rd, int wr)
{
  ecc_connector_t *c = NULL;
  char err[512];
  if (ecc_open(ini, NULL, &c, err, sizeof(err)) != ECC_OK)
    return 10;
  struct order o;
  static uint8_t buf[8 * BS], want[8 * BS];
  while (read(rd, &o, sizeof(o)) == (ssize_t)sizeof(o)) {
    th_fill(want, o.nbytes, o.seed);
    int rc;
    if (!o.load) {
      ecc_save_reserved_t s = {o.token, (uint64_t)(uintptr_t)want, o.nbytes};
      rc = ecc_save_reserved(c, &s, 1);
      if (rc == ECC_OK)
        rc = ecc_flush(c, NULL);
    } else {
      memset(buf, 0, sizeof(buf));
      ecc_load_pinned_t l = {7, o.token, (uint64_t)(uintptr_t)buf, o.nbytes};
      rc = ecc_load_pinned(c, &l, 1, NULL);
    }
    ecc_completion_t done;
    if (rc == ECC_OK)
      rc = th_poll_until(c, &done, 1, 5000) == 1 ? done.status : ECC_ERR_TRANSFER;
    if (rc == ECC_OK && o.load && memcmp(buf, want, o.nbytes) != 0)
      rc = ECC_ERR_TRANSFER;
    if (write(wr, &rc, sizeof(rc)) != (ssize_t)sizeof(rc))
      return 11;
  }
  return ecc_close(c) == ECC_OK ? 0 : 12;
}

/* A process that reserves everything left and pins "pinned", then dies
 * holding all of it. */
static int hog(const char *ini)
{
  ecc_connector_t *k = NULL;
  char err[256];
  if (ecc_open(ini, NULL, &k, err, sizeof(err)) != ECC_OK)
    return 10;
  ecc_entry_t e;
  const char *keys[1] = {"pinned"};
  if (ecc_reserve(k, "hog", (NB - 1) * (uint64_t)BS, &e) != ECC_OK ||
      ecc_lookup(k, keys, 1, 1, &e) != ECC_OK || e.state != ECC_ENTRY_READY)
    return 11;
  kill(getpid(), SIGKILL);
  return 12;
}

__attribute__((constructor)) static void worker_entry(void)
{
  const char *role, *ini;
  int rd, wr;
  if (th_child_args(&role, &ini, &rd, &wr) && strcmp(role, "worker") == 0)
    _exit(worker(ini, rd, wr));
  if (th_child_args(&role, &ini, &rd, &wr) && strcmp(role, "hog") == 0)
    _exit(hog(ini));
}

static int ask(int to, int from, struct order o)
{
  int rc = ECC_ERR_SYSTEM;
  cr_assert_eq(write(to, &o, sizeof(o)), (ssize_t)sizeof(o));
  cr_assert_eq(read(from, &rc, sizeof(rc)), (ssize_t)sizeof(rc));
  return rc;
}

Test(dir_calls, a_scheduler_hands_tokens_to_a_worker_process_that_copies)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *sched = th_open_as(ini, "both");
  int down[2], up[2];
  cr_assert_eq(pipe2(down, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(up, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("worker", ini, down[0], up[1]);
  close(down[0]);
  close(up[1]);

  uint64_t nbytes = 3 * BS + 17;
  ecc_entry_t r = reserve_ok(sched, "sched-1", nbytes);
  cr_assert_eq(ask(down[1], up[0], (struct order){r.token, nbytes, 21, 0}), ECC_OK,
               "the worker could not save the scheduler's reservation");
  /* Published by the worker's polled completion, seen by the scheduler. */
  ecc_entry_t f = lookup_one(sched, "sched-1", 1);
  cr_assert_eq(f.state, ECC_ENTRY_READY);
  cr_assert_eq(ask(down[1], up[0], (struct order){f.token, nbytes, 21, 1}), ECC_OK,
               "the worker could not load the scheduler's pin");
  cr_assert_eq(dstats(sched).pins_live, 0, "the worker's polled load did not release the pin");
  /* A token that went stale is refused in the worker too. */
  cr_assert_eq(ask(down[1], up[0], (struct order){f.token, nbytes, 21, 1}), ECC_ERR_CLOSED);
  cr_assert_eq(ask(down[1], up[0], (struct order){r.token, nbytes, 21, 0}), ECC_ERR_CLOSED);

  close(down[1]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker status %d", status);
  close(up[0]);
  cr_assert_eq(ecc_close(sched), ECC_OK);
}

Test(dir_calls, the_reservations_and_pins_of_a_killed_process_are_reclaimed)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  uint8_t src[BS];
  ecc_entry_t r = reserve_ok(c, "pinned", BS);
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  pid_t pid = th_spawn_self("hog", ini, -1, -1);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status), "the child did not die as planned: status %d", status);
  cr_assert_eq(dstats(c).pins_live, 1, "the dead process's pin is not there to reclaim");
  /* The room the dead process held is given to the next reservation. */
  ecc_entry_t big = reserve_ok(c, "after", (NB - 1) * (uint64_t)BS);
  cr_assert_eq(big.state, ECC_ENTRY_RESERVED);
  ecc_directory_stats_t d = dstats(c);
  cr_expect_geq(d.reclaimed, 2, "reclaimed %llu", (unsigned long long)d.reclaimed);
  cr_expect_eq(d.pins_live, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- the codes each call returns are the ones the ABI lists for it ---- */

#define CODE(c) (1u << (unsigned)-(c))

/* The lists of abi/ecc_plugin_v1.h (ECC_OK always). */
static const unsigned abi_abort =
    CODE(ECC_ERR_CLOSED) | CODE(ECC_ERR_BUSY) | CODE(ECC_ERR_UNSUPPORTED) | CODE(ECC_ERR_REGION);
static const unsigned abi_unpin =
    CODE(ECC_ERR_CLOSED) | CODE(ECC_ERR_UNSUPPORTED) | CODE(ECC_ERR_REGION) | CODE(ECC_ERR_BUSY);
static const unsigned abi_remove = CODE(ECC_ERR_INVALID) | CODE(ECC_ERR_RANGE) |
                                   CODE(ECC_ERR_BUSY) | CODE(ECC_ERR_CLOSED) |
                                   CODE(ECC_ERR_UNSUPPORTED) | CODE(ECC_ERR_REGION);
static const unsigned abi_save_reserved =
    CODE(ECC_ERR_INVALID) | CODE(ECC_ERR_RANGE) | CODE(ECC_ERR_ROLE) | CODE(ECC_ERR_NOMEM) |
    CODE(ECC_ERR_CLOSED) | CODE(ECC_ERR_REGION) | CODE(ECC_ERR_UNSUPPORTED) | CODE(ECC_ERR_BUSY);
static const unsigned abi_list = CODE(ECC_ERR_INVALID) | CODE(ECC_ERR_CLOSED) |
                                 CODE(ECC_ERR_UNSUPPORTED) | CODE(ECC_ERR_REGION) |
                                 CODE(ECC_ERR_BUSY);

static void expect_listed(const char *call, int rc, unsigned listed)
{
  cr_expect(rc == ECC_OK || (rc < 0 && rc >= ECC_STATUS_MIN && (listed & CODE(rc)) != 0),
            "%s returned %d (%s), which its ABI list does not name", call, rc, ecc_strerror(rc));
}

Test(dir_calls, a_published_token_is_no_reservation_to_abort)
{
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS];
  th_fill(src, BS, 8);
  ecc_entry_t r = reserve_ok(c, "done", BS);
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  int rc = ecc_abort_reserved(c, r.token);
  expect_listed("abort_reserved of a published token", rc, abi_abort);
  cr_assert_eq(rc, ECC_ERR_CLOSED);
  char err[512];
  ecc_last_error(c, err, sizeof(err));
  cr_assert_not_null(strstr(err, "already published"), "%s", err);
  cr_assert_eq(lookup_one(c, "done", 1).state, ECC_ENTRY_READY, "the refused abort freed it");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_calls, refusals_use_the_codes_the_abi_lists)
{
  const char *region = th_region_name();
  ecc_connector_t *c = open_dir("both", region);
  ecc_connector_t *q = open_dir("consumer", region);
  uint8_t src[BS];
  ecc_entry_t r = reserve_ok(c, "k", BS);
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  ecc_entry_t pinned = lookup_one(c, "k", 1);
  ecc_entry_t open = reserve_ok(c, "open", BS);
  const uint64_t tokens[] = {0, r.token, pinned.token, open.token, ~0ull, r.token ^ (1ull << 40)};
  for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
    ecc_save_reserved_t s = {tokens[i], (uint64_t)(uintptr_t)src, BS};
    expect_listed("save_reserved", ecc_save_reserved(q, &s, 1), abi_save_reserved);
    s.nbytes = 1;
    expect_listed("save_reserved", ecc_save_reserved(c, &s, 1), abi_save_reserved);
    if (tokens[i] != open.token)
      expect_listed("abort_reserved", ecc_abort_reserved(c, tokens[i]), abi_abort);
    if (tokens[i] != pinned.token)
      expect_listed("unpin", ecc_unpin(c, tokens[i]), abi_unpin);
  }
  expect_listed("remove", ecc_remove(c, "k"), abi_remove);
  expect_listed("remove", ecc_remove(c, "open"), abi_remove);
  expect_listed("remove", ecc_remove(c, ""), abi_remove);
  uint64_t cursor = 0;
  size_t n;
  expect_listed("list", ecc_list(c, NULL, NULL, 0, &n), abi_list);
  expect_listed("list", ecc_list(c, &cursor, NULL, 4, &n), abi_list);
  cr_assert_eq(ecc_unpin(c, pinned.token), ECC_OK);
  cr_assert_eq(ecc_abort_reserved(c, open.token), ECC_OK);
  cr_assert_eq(ecc_close(q), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- the ranks of a lookup are bounded ---- */

static void expect_ranks_refused(int rc, const char *err)
{
  cr_expect_eq(rc, ECC_ERR_INVALID, "a lookup for more than ECC_RANKS_MAX ranks passed (%d)", rc);
  cr_expect_not_null(strstr(err, "above ECC_RANKS_MAX (1024)"), "%s", err);
}

Test(dir_calls, a_lookup_pins_for_at_most_ecc_ranks_max_ranks)
{
  cr_assert_eq(ECC_RANKS_MAX, 1024);
  ecc_connector_t *c = open_dir("both", th_region_name());
  uint8_t src[BS];
  ecc_entry_t r = reserve_ok(c, "k", BS);
  cr_assert_eq(save_one(c, r.token, src, BS).status, ECC_OK);
  const char *keys[1] = {"k"};
  ecc_entry_t e;
  char err[512] = "";
  const uint32_t too_many[] = {ECC_RANKS_MAX + 1, UINT32_MAX};
  for (size_t i = 0; i < 2; i++) {
    int rc = ecc_lookup(c, keys, 1, too_many[i], &e);
    ecc_last_error(c, err, sizeof(err));
    expect_ranks_refused(rc, err);
  }
  cr_assert_eq(dstats(c).pins, 0, "a refused lookup pinned");
  cr_assert_eq(lookup_one(c, "k", ECC_RANKS_MAX).state, ECC_ENTRY_READY);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* Below the host library: the plugin's own lookup and the one it makes for
 * a peer host's client (the ucx server) refuse it too. */
Test(dir_calls, the_connector_bounds_the_ranks_of_its_own_and_its_peers_lookups)
{
  ecc_kv_v1_t kv[] = {{"region.name", th_region_name()},
                      {"region.block_size", "1KiB"},
                      {"region.size", "64KiB"},
                      {"engine.type", "host"},
                      {"directory.enabled", "true"}};
  struct plugin_config cfg;
  char err[512] = "";
  cr_assert_eq(config_parse(kv, sizeof(kv) / sizeof(kv[0]), &cfg, err, sizeof(err)), ECC_OK, "%s",
               err);
  struct conn *c = NULL;
  cr_assert_eq(conn_create(&cfg, NULL, err, sizeof(err), &c), ECC_OK, "%s", err);
  const char *keys[1] = {"k"};
  ecc_entry_t e;
  int rc = conn_lookup(c, keys, 1, ECC_RANKS_MAX + 1, &e);
  conn_last_error(c, err, sizeof(err));
  expect_ranks_refused(rc, err);
  rc = conn_lookup_for_peer(c, keys, 1, UINT32_MAX, &e);
  conn_last_error(c, err, sizeof(err));
  expect_ranks_refused(rc, err);
  cr_assert_eq(conn_lookup_for_peer(c, keys, 1, ECC_RANKS_MAX, &e), ECC_OK);
  conn_destroy(c);
}
