/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_block_loads.c - loads by block ids on a region with a directory: the
 * entries they read are held from the load until its completion is polled
 * (the host's pin released meanwhile, the entry is neither evicted nor
 * removed, so its blocks are not rewritten under the copy), a hold lost to
 * a pin timeout fails the load, a refused call holds nothing, and a full
 * pin table refuses the load BUSY.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 32u
#define ALL ((uint64_t)NB * BS)
#define DIR_ON "[directory]\nenabled = true\n"

static ecc_connector_t *open_dir(const char *region, const char *extra)
{
  return th_open("both", region, BS, NB, extra);
}

static const char *last_error(ecc_connector_t *c)
{
  static char err[512];
  err[0] = '\0';
  ecc_last_error(c, err, sizeof(err));
  return err;
}

static ecc_completion_t poll_one(ecc_connector_t *c)
{
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "no completion");
  return done;
}

static size_t poll_now(ecc_connector_t *c)
{
  ecc_completion_t done;
  size_t n = 1;
  cr_assert_eq(ecc_poll(c, &done, 1, &n), ECC_OK);
  return n;
}

/* The entry's block ids in entry order; returns how many. */
static uint32_t ids_of(const ecc_entry_t *e, uint32_t *ids)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < e->n_extents; i++)
    for (uint32_t b = 0; b < e->extents[i].n_blocks; b++)
      ids[n++] = e->extents[i].first_block + b;
  return n;
}

/* Reserves key for nbytes and saves src into it, published. */
static void put(ecc_connector_t *c, const char *key, const void *src, uint64_t nbytes)
{
  ecc_entry_t r;
  int rc = ecc_reserve(c, key, nbytes, &r);
  cr_assert_eq(rc, ECC_OK, "reserve %s: %d %s", key, rc, last_error(c));
  cr_assert_eq(r.state, ECC_ENTRY_RESERVED, "reserve %s: state %d", key, r.state);
  ecc_save_reserved_t s = {r.token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  cr_assert_eq(poll_one(c).status, ECC_OK);
}

static ecc_entry_t pin(ecc_connector_t *c, const char *key)
{
  ecc_entry_t f;
  const char *keys[1] = {key};
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &f), ECC_OK, "%s", last_error(c));
  cr_assert_eq(f.state, ECC_ENTRY_READY, "%s is not ready", key);
  return f;
}

/* A second connector tries to take the whole region for "B" and, if it
 * gets it, writes `bytes` there: what another producer does once A is
 * evictable. Returns whether it got it. */
static bool replace_all(ecc_connector_t *other, const void *bytes)
{
  ecc_entry_t b;
  if (ecc_reserve(other, "B", ALL, &b) != ECC_OK || b.state != ECC_ENTRY_RESERVED)
    return false;
  ecc_save_reserved_t s = {b.token, (uint64_t)(uintptr_t)bytes, ALL};
  cr_assert_eq(ecc_save_reserved(other, &s, 1), ECC_OK, "%s", last_error(other));
  cr_assert_eq(ecc_flush(other, NULL), ECC_OK);
  cr_assert_eq(poll_one(other).status, ECC_OK);
  return true;
}

Test(block_loads, the_entry_read_is_not_evicted_and_rewritten_under_the_copy)
{
  const char *region = th_region_name();
  ecc_connector_t *first = open_dir(region, DIR_ON), *other = open_dir(region, DIR_ON);
  static uint8_t old[ALL], fresh[ALL], got[ALL];
  th_fill(old, ALL, 1);
  th_fill(fresh, ALL, 2);
  uint32_t ids[NB];
  /* A takes the whole region: B can only ever get A's blocks. */
  put(first, "A", old, ALL);
  ecc_entry_t a = pin(first, "A");
  cr_assert_eq(ids_of(&a, ids), NB);
  ecc_load_entry_t l = {7, ids, NB, (uint64_t)(uintptr_t)got, ALL};
  cr_assert_eq(ecc_load(first, &l, 1, NULL), ECC_OK, "%s", last_error(first));
  /* The host lets its pin go with the load not yet polled (any process
   * with the token may); the copy may still be reading A's blocks. */
  cr_assert_eq(ecc_unpin(first, a.token), ECC_OK, "%s", last_error(first));
  bool replaced = replace_all(other, fresh);
  cr_expect_not(replaced, "A was evicted and its blocks rewritten with a load of them in flight");
  cr_expect_eq(ecc_remove(other, "A"), ECC_ERR_BUSY, "A was removed with a load of it in flight");
  ecc_completion_t done = poll_one(first);
  cr_assert_eq(done.transfer_id, 7);
  if (done.status == ECC_OK)
    cr_assert(memcmp(got, old, ALL) == 0, "the load reported ECC_OK over bytes that are not A's");
  /* Polled: the hold is over and A may go. */
  if (!replaced)
    cr_assert(replace_all(other, fresh), "the load's hold outlived its completion: %s",
              last_error(other));
  cr_assert_eq(ecc_close(first), ECC_OK);
  cr_assert_eq(ecc_close(other), ECC_OK);
}

Test(block_loads, a_hold_lost_to_a_pin_timeout_fails_the_load)
{
  const char *region = th_region_name();
  const char *quick = DIR_ON "pin_timeout_ms = 1\n";
  ecc_connector_t *first = open_dir(region, quick), *other = open_dir(region, quick);
  static uint8_t old[ALL], fresh[ALL], got[ALL];
  th_fill(old, ALL, 3);
  th_fill(fresh, ALL, 4);
  uint32_t ids[NB];
  put(first, "A", old, ALL);
  ecc_entry_t a = pin(first, "A");
  ids_of(&a, ids);
  ecc_load_entry_t l = {9, ids, NB, (uint64_t)(uintptr_t)got, ALL};
  cr_assert_eq(ecc_load(first, &l, 1, NULL), ECC_OK, "%s", last_error(first));
  /* Past the timeout every pin of A is stale: a reservation may evict it. */
  struct timespec wait = {0, 20 * 1000 * 1000};
  nanosleep(&wait, NULL);
  cr_assert(replace_all(other, fresh), "timed-out pins kept A: %s", last_error(other));
  ecc_completion_t done = poll_one(first);
  cr_assert_eq(done.transfer_id, 9);
  cr_assert_neq(done.status, ECC_OK,
                "a load whose entry was evicted and rewritten under it reported ECC_OK");
  cr_assert_eq(ecc_close(first), ECC_OK);
  cr_assert_eq(ecc_close(other), ECC_OK);
}

Test(block_loads, a_refused_load_holds_nothing_and_names_the_block)
{
  ecc_connector_t *c = open_dir(th_region_name(), DIR_ON);
  static uint8_t src[2 * BS], got[2 * BS];
  th_fill(src, sizeof(src), 5);
  uint32_t ids[2];
  put(c, "A", src, BS);
  ecc_entry_t a = pin(c, "A");
  ids_of(&a, ids);
  ecc_entry_t r;
  cr_assert_eq(ecc_reserve(c, "R", BS, &r), ECC_OK);
  ids_of(&r, ids + 1);
  /* Entry 0 reads pinned A, entry 1 a reservation's block. */
  ecc_load_entry_t l[2] = {{1, ids, 1, (uint64_t)(uintptr_t)got, BS},
                           {2, ids + 1, 1, (uint64_t)(uintptr_t)(got + BS), BS}};
  cr_assert_eq(ecc_load(c, l, 2, NULL), ECC_ERR_RANGE, "a reservation's block was loaded");
  char want[96];
  snprintf(want, sizeof(want), "entry 1: block %u is not in a pinned entry", ids[1]);
  cr_assert_not_null(strstr(last_error(c), want), "%s", last_error(c));
  cr_assert_eq(poll_now(c), 0, "a refused load was queued");
  cr_assert_eq(ecc_unpin(c, a.token), ECC_OK);
  cr_assert_eq(ecc_remove(c, "A"), ECC_OK, "a refused load kept a hold of A: %s", last_error(c));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(block_loads, no_free_pin_slot_refuses_the_load_busy)
{
  ecc_connector_t *c = open_dir(th_region_name(), DIR_ON "max_entries = 4\nmax_pins = 1\n");
  static uint8_t src[BS], got[BS];
  uint32_t id;
  put(c, "A", src, BS);
  ecc_entry_t a = pin(c, "A");
  ids_of(&a, &id);
  ecc_load_entry_t l = {1, &id, 1, (uint64_t)(uintptr_t)got, BS};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_ERR_BUSY, "a load ran with its entry not held");
  cr_assert_not_null(strstr(last_error(c), "max_pins"), "%s", last_error(c));
  cr_assert_eq(poll_now(c), 0, "a refused load was queued");
  cr_assert_eq(ecc_unpin(c, a.token), ECC_OK);
  cr_assert_eq(ecc_remove(c, "A"), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(block_loads, shutdown_lets_go_of_the_hold_of_a_load_never_polled)
{
  const char *region = th_region_name();
  ecc_connector_t *keeper = open_dir(region, DIR_ON), *c = open_dir(region, DIR_ON);
  static uint8_t src[2 * BS], got[2 * BS];
  uint32_t ids[2];
  put(c, "A", src, sizeof(src));
  ecc_entry_t a = pin(c, "A");
  ids_of(&a, ids);
  /* Two entries of one call read A: both holds go. */
  ecc_load_entry_t l[2] = {{1, ids, 2, (uint64_t)(uintptr_t)got, sizeof(got)},
                           {2, ids + 1, 1, (uint64_t)(uintptr_t)got, BS}};
  cr_assert_eq(ecc_load(c, l, 2, NULL), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_unpin(c, a.token), ECC_OK);
  cr_assert_eq(ecc_remove(keeper, "A"), ECC_ERR_BUSY, "A was removed with a load of it in flight");
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert_eq(ecc_remove(keeper, "A"), ECC_OK, "shutdown kept the load's hold: %s",
               last_error(keeper));
  cr_assert_eq(ecc_close(keeper), ECC_OK);
}
