/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_policy.c - eviction policy "cost": the credit arithmetic on its own
 * (policy.h), then through the directory: what it keeps that "lru" does
 * not, and that it never evicts a pinned or reserved entry.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/directory/directory.h"
#include "core/directory/policy.h"

TestSuite(policy, .timeout = 120);

static char why[512];

/* ---- the arithmetic ---- */

/* A mean of `per_block_us` per block, as after one store at that rate. */
static struct policy_mean mean_of(uint64_t per_block_us)
{
  struct policy_mean m = {0};
  policy_note_store(&m, per_block_us * 10, 10);
  return m;
}

Test(policy, a_use_is_worth_its_cost_per_block_against_the_mean)
{
  struct policy_mean m = mean_of(100);
  cr_expect_eq(policy_use(&m, 1000, 10, 1, 0), POLICY_QUANTUM, "at the mean: one quantum");
  cr_expect_eq(policy_use(&m, 2000, 10, 1, 0), 2 * POLICY_QUANTUM);
  cr_expect_eq(policy_use(&m, 500, 10, 1, 0), POLICY_QUANTUM / 2);
  /* Per block, not per entry: the same cost over twice the blocks is
   * worth half. */
  cr_expect_eq(policy_use(&m, 2000, 20, 1, 0), POLICY_QUANTUM);
  /* Rounded to the nearest unit of credit, never to nothing for a real
   * cost at a sixteenth of the mean. */
  cr_expect_eq(policy_use(&m, 63, 10, 1, 0), 1);
}

Test(policy, an_unknown_cost_is_worth_what_the_mean_is)
{
  struct policy_mean m = mean_of(100);
  cr_expect_eq(policy_use(&m, 0, 10, 1, 0), POLICY_QUANTUM);
  cr_expect_eq(policy_use(&m, 0, 4000, 1, 0), POLICY_QUANTUM, "cost in proportion to size");
  struct policy_mean none = {0};
  cr_expect_eq(policy_use(&none, 5000, 10, 1, 0), POLICY_QUANTUM, "no mean yet: one quantum");
  /* Unknown costs do not move the mean. */
  policy_note_store(&m, 0, 10);
  cr_expect_eq(m.samples, 1);
  cr_expect_eq(policy_use(&m, 1000, 10, 1, 0), POLICY_QUANTUM);
}

/* As greedy-dual-size-frequency values uses x cost / size: the credit of
 * the nth use is n times one use's worth, up to the cap. */
Test(policy, credit_grows_with_uses_up_to_its_cap)
{
  struct policy_mean m = mean_of(100);
  cr_expect_eq(policy_use(&m, 1000, 10, 3, 0), 3 * POLICY_QUANTUM);
  cr_expect_eq(policy_use(&m, 3000, 10, 3, 0), 9 * POLICY_QUANTUM);
  uint32_t n_cap = POLICY_CREDIT_MAX / POLICY_QUANTUM;
  cr_expect_eq(policy_use(&m, 1000, 10, n_cap, 0), POLICY_CREDIT_MAX);
  cr_expect_eq(policy_use(&m, 1000, 10, n_cap + 1, 0), POLICY_CREDIT_MAX, "stops at the cap");
  cr_expect_eq(policy_use(&m, 1000, 10, UINT64_MAX, 0), POLICY_CREDIT_MAX);
  /* A use never lowers what is left: credit earned at a higher mean, or
   * more uses ago, stays until the hand spends it. */
  cr_expect_eq(policy_use(&m, 1000, 10, 2, 5 * POLICY_QUANTUM), 5 * POLICY_QUANTUM);
  cr_expect_eq(policy_use(&m, 1000, 10, 6, 5 * POLICY_QUANTUM), 6 * POLICY_QUANTUM);
  /* Costs far beyond any real one neither overflow nor wrap. */
  cr_expect_eq(policy_use(&m, UINT64_MAX, 1, UINT64_MAX, 0), POLICY_CREDIT_MAX);
  cr_expect_eq(policy_use(&m, 1000ull * POLICY_CREDIT_MAX, 10, 1, 0), POLICY_CREDIT_MAX);
  struct policy_mean huge = {0};
  policy_note_store(&huge, UINT64_MAX, 1);
  cr_expect_eq(policy_use(&huge, UINT64_MAX, 1, 1, 0), POLICY_QUANTUM);
}

Test(policy, the_mean_follows_recent_stores)
{
  struct policy_mean m = {0};
  for (int i = 0; i < 1000; i++)
    policy_note_store(&m, 100 * 8, 8);
  cr_expect_eq(policy_use(&m, 800, 8, 1, 0), POLICY_QUANTUM);
  /* Costs quadruple: within a few windows a use at the new rate is worth
   * one quantum again, and one at the old rate a quarter of one. */
  for (int i = 0; i < 1000; i++)
    policy_note_store(&m, 400 * 8, 8);
  uint32_t now = policy_use(&m, 3200, 8, 1, 0);
  cr_expect(now >= POLICY_QUANTUM - 1 && now <= POLICY_QUANTUM + 1, "worth %u", now);
  uint32_t old = policy_use(&m, 800, 8, 1, 0);
  cr_expect(old >= POLICY_QUANTUM / 4 - 1 && old <= POLICY_QUANTUM / 4 + 1, "worth %u", old);
}

Test(policy, a_pass_spends_one_quantum_or_everything)
{
  cr_expect_eq(policy_pass(POLICY_CREDIT_MAX, false), POLICY_CREDIT_MAX - POLICY_QUANTUM);
  cr_expect_eq(policy_pass(POLICY_QUANTUM, false), 0);
  cr_expect_eq(policy_pass(POLICY_QUANTUM - 1, false), 0, "less than a quantum: all spent");
  cr_expect_eq(policy_pass(POLICY_CREDIT_MAX, true), 0);
  cr_expect(policy_keeps(POLICY_QUANTUM / 2));
  cr_expect(!policy_keeps(POLICY_QUANTUM / 2 - 1));
  cr_expect(!policy_keeps(0));
  /* An entry at the cap is passed once per quantum, then evicted. */
  uint32_t c = POLICY_CREDIT_MAX;
  uint32_t passes = 0;
  while (policy_keeps(c)) {
    c = policy_pass(c, false);
    passes++;
  }
  cr_expect_eq(passes, POLICY_CREDIT_MAX / POLICY_QUANTUM);
}

/* ---- through the directory ---- */

#define BLOCK 64u

struct fx {
  void *mem;
  size_t bytes;
  struct dir d;
};

static void fx_open(struct fx *f, uint32_t blocks, uint32_t entries, uint32_t policy)
{
  struct dir_params p = {.num_blocks = blocks,
                         .block_size = BLOCK,
                         .max_entries = entries,
                         .max_pins = entries,
                         .policy = policy,
                         .event_slots = 16};
  f->bytes = dir_bytes(&p);
  cr_assert_gt(f->bytes, 0);
  f->mem = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(f->mem, MAP_FAILED);
  cr_assert_eq(dir_format(f->mem, f->bytes, &p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&f->d, f->mem, f->bytes, &p, why, sizeof(why)), ECC_OK, "%s", why);
}

static void fx_close(struct fx *f)
{
  munmap(f->mem, f->bytes);
}

static void check(struct dir *d)
{
  int rc = dir_check(d, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "dir_check: %s", why);
}

/* Reserves and publishes key over `blocks` blocks with this cost; returns
 * ECC_OK or what reserve refused with. */
static int store(struct dir *d, const char *key, uint32_t blocks, uint64_t cost_us)
{
  struct dir_meta meta = {.cost_us = cost_us};
  struct dir_entry_info info;
  int outcome = -1;
  int rc =
      dir_reserve_ex(d, key, (uint64_t)blocks * BLOCK, &meta, &outcome, &info, why, sizeof(why));
  if (rc != ECC_OK)
    return rc;
  cr_assert_eq(outcome, DIR_RESERVED, "%s: outcome %d", key, outcome);
  cr_assert_eq(dir_publish(d, info.ref, why, sizeof(why)), ECC_OK, "%s: %s", key, why);
  return ECC_OK;
}

static int state_of(struct dir *d, const char *key)
{
  struct dir_peeked out;
  cr_assert_eq(dir_peek(d, &key, 1, &out, why, sizeof(why)), ECC_OK, "%s", why);
  return out.state;
}

/* How many of keys prefix0 .. prefix(n-1) are ready. */
static int survivors(struct dir *d, const char *prefix, int n)
{
  int count = 0;
  char key[32];
  for (int i = 0; i < n; i++) {
    snprintf(key, sizeof(key), "%s%d", prefix, i);
    count += state_of(d, key) == DIR_STATE_READY;
  }
  return count;
}

/* A full region of 32 expensive and 32 cheap entries side by side (8x
 * apart per block), then half the region's worth of new entries at the
 * mean: "cost" evicts the cheap ones only; "lru", blind to cost, as many
 * of one as of the other. */
static void churn_mixed(struct fx *f, int *hi_left, int *lo_left)
{
  char key[32];
  for (int i = 0; i < 32; i++) {
    snprintf(key, sizeof(key), "hi%d", i);
    cr_assert_eq(store(&f->d, key, 4, 4 * 800), ECC_OK, "%s", why);
    snprintf(key, sizeof(key), "lo%d", i);
    cr_assert_eq(store(&f->d, key, 4, 4 * 100), ECC_OK, "%s", why);
  }
  for (int i = 0; i < 32; i++) {
    snprintf(key, sizeof(key), "new%d", i);
    cr_assert_eq(store(&f->d, key, 4, 4 * 450), ECC_OK, "%s: %s", key, why);
    check(&f->d);
  }
  *hi_left = survivors(&f->d, "hi", 32);
  *lo_left = survivors(&f->d, "lo", 32);
  cr_expect_eq(survivors(&f->d, "new", 32), 32);
}

Test(policy, cost_keeps_expensive_entries_that_lru_evicts)
{
  struct fx f;
  int hi, lo;
  fx_open(&f, 256, 64, DIR_POLICY_COST);
  churn_mixed(&f, &hi, &lo);
  cr_expect_eq(hi, 32, "cost: %d of 32 expensive entries kept", hi);
  cr_expect_eq(lo, 0, "cost: %d of 32 cheap entries kept", lo);
  fx_close(&f);

  fx_open(&f, 256, 64, DIR_POLICY_LRU);
  churn_mixed(&f, &hi, &lo);
  cr_expect_eq(hi + lo, 32);
  cr_expect_eq(hi, lo, "lru: %d expensive against %d cheap kept", hi, lo);
  fx_close(&f);
}

/* Looks key up (a use) and lets its pin go; whether it was there. */
static bool lookup_once(struct dir *d, const char *key)
{
  bool found = false;
  struct dir_pin_ref pin;
  cr_assert_eq(dir_lookup(d, &key, 1, 1, &found, NULL, &pin, why, sizeof(why)), ECC_OK, "%s", why);
  if (found)
    cr_assert_eq(dir_unpin(d, pin, why, sizeof(why)), ECC_OK, "%s", why);
  return found;
}

/* Reuse counts as well as cost: a cheap entry looked up at every step
 * outlives entries of four times its cost per block that nobody uses
 * again, whose credit runs out within a few turns of the hand. */
Test(policy, reuse_keeps_a_cheap_entry_and_unused_credit_runs_out)
{
  struct fx f;
  fx_open(&f, 64, 64, DIR_POLICY_COST);
  char key[32];
  cr_assert_eq(store(&f.d, "hot", 4, 4 * 100), ECC_OK, "%s", why);
  for (int i = 0; i < 15; i++) {
    if (i < 4)
      cr_assert_eq(lookup_once(&f.d, "hot"), true);
    snprintf(key, sizeof(key), "rich%d", i);
    cr_assert_eq(store(&f.d, key, 4, 4 * 400), ECC_OK, "%s", why);
  }
  /* Twelve turns of the hand of entries at the cheap rate. */
  for (int i = 0; i < 12 * 16; i++) {
    cr_assert(lookup_once(&f.d, "hot"), "hot evicted after %d stores", i);
    snprintf(key, sizeof(key), "cheap%d", i);
    cr_assert_eq(store(&f.d, key, 4, 4 * 100), ECC_OK, "%s: %s", key, why);
  }
  cr_expect_eq(survivors(&f.d, "rich", 15), 0, "unused credit outlived twelve turns");
  check(&f.d);
  fx_close(&f);
}

/* A random run of stores (costs of 0 to 100x, 1 to 16 blocks), pins and
 * reservations left open: neither policy ever evicts what is pinned or
 * being written, and a refusal is only for want of evictable room. */
static void stress(uint32_t policy, unsigned seed)
{
  enum { KEYS = 96, STEPS = 4000 };
  struct fx f;
  fx_open(&f, 512, 48, policy);
  srand(seed);
  struct dir_pin_ref pins[KEYS];
  struct dir_ref writing[KEYS];
  bool pinned[KEYS] = {false}, open[KEYS] = {false};
  char key[32];
  for (int step = 0; step < STEPS; step++) {
    int k = rand() % KEYS, op = rand() % 8;
    snprintf(key, sizeof(key), "k%d", k);
    const char *kp = key;
    if (op < 4 && !open[k]) {
      struct dir_meta meta = {.cost_us = (uint64_t)(rand() % 101) * (uint64_t)(rand() % 50)};
      struct dir_entry_info info;
      int outcome = -1;
      uint32_t blocks = 1 + (uint32_t)(rand() % 16);
      int rc = dir_reserve_ex(&f.d, key, blocks * BLOCK, &meta, &outcome, &info, why, sizeof(why));
      cr_assert(rc == ECC_OK || rc == ECC_ERR_BUSY, "reserve %s: %d %s", key, rc, why);
      if (rc == ECC_OK && outcome == DIR_RESERVED) {
        if (op == 0) {
          open[k] = true; /* left being written */
          writing[k] = info.ref;
        } else {
          cr_assert_eq(dir_publish(&f.d, info.ref, why, sizeof(why)), ECC_OK, "%s", why);
        }
      }
    } else if (op == 4 && open[k]) {
      cr_assert_eq(dir_publish(&f.d, writing[k], why, sizeof(why)), ECC_OK, "%s", why);
      open[k] = false;
    } else if (op == 5 && !pinned[k]) {
      bool found = false;
      cr_assert_eq(dir_lookup(&f.d, &kp, 1, 1, &found, NULL, &pins[k], why, sizeof(why)), ECC_OK);
      pinned[k] = found;
    } else if (op == 6 && pinned[k]) {
      cr_assert_eq(dir_unpin(&f.d, pins[k], why, sizeof(why)), ECC_OK, "%s", why);
      pinned[k] = false;
    } else if (op == 7 && open[k]) {
      cr_assert_eq(dir_abort(&f.d, writing[k], why, sizeof(why)), ECC_OK, "%s", why);
      open[k] = false;
    }
    for (int i = 0; i < KEYS; i++) {
      snprintf(key, sizeof(key), "k%d", i);
      if (pinned[i])
        cr_assert_eq(state_of(&f.d, key), DIR_STATE_READY, "step %d: pinned %s evicted", step, key);
      if (open[i])
        cr_assert_eq(state_of(&f.d, key), DIR_STATE_RESERVED, "step %d: reservation %s lost", step,
                     key);
    }
    if (step % 64 == 0)
      check(&f.d);
  }
  check(&f.d);
  struct dir_counters c;
  dir_get_counters(&f.d, &c);
  cr_expect_gt(c.evictions, 100, "the run must evict to mean anything (%lu)",
               (unsigned long)c.evictions);
  fx_close(&f);
}

Test(policy, cost_never_evicts_a_pinned_or_reserved_entry)
{
  for (unsigned seed = 1; seed <= 4; seed++)
    stress(DIR_POLICY_COST, seed);
}

Test(policy, lru_never_evicts_a_pinned_or_reserved_entry)
{
  for (unsigned seed = 1; seed <= 2; seed++)
    stress(DIR_POLICY_LRU, seed);
}
