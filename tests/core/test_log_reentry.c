/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_log_reentry.c - libecc-shm.so's messages made under its locks (a
 * refused flush of a full connector, a refused load, a poll that finds its
 * region gone) reach a host log callback that calls back into the same
 * connector (stats, poll, lookup) on every message, and every call returns:
 * each risky call runs under a watchdog, so a deadlock fails the test.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

TestSuite(log_reentry, .timeout = 60);

#define BS 4096u
#define NB 64u
#define WATCHDOG_MS 10000

/* ---- a log callback that calls back ---- */

struct reentry {
  ecc_connector_t *_Atomic c; /* the connector it calls back into; NULL: none yet */
  const char *want;           /* a message the test waits for */
  atomic_int seen_on_driver;  /* `want` arrived on the thread that made the call */
  atomic_int called_back;     /* nested calls made (each returned) */
  atomic_int nested_errors;   /* nested stats or polls that did not return ECC_OK */
};

static __thread int in_callback; /* one level of calling back: the nested calls log too */

static void call_back(struct reentry *r, ecc_connector_t *c)
{
  ecc_stats_t st = {.struct_size = sizeof(st)};
  size_t n = 0;
  const char *keys[] = {"reentry-absent"};
  ecc_entry_t e;
  if (ecc_get_stats(c, &st) != ECC_OK)
    atomic_fetch_add(&r->nested_errors, 1);
  /* cap 0: takes the poll's lock, reports nothing the test waits for */
  if (ecc_poll(c, NULL, 0, &n) != ECC_OK)
    atomic_fetch_add(&r->nested_errors, 1);
  (void)ecc_lookup(c, keys, 1, 1, &e); /* no directory here: its refusal is fine */
  atomic_fetch_add(&r->called_back, 1);
}

static void calling_back(void *user, int level, const char *msg)
{
  (void)level;
  struct reentry *r = user;
  ecc_connector_t *c = atomic_load(&r->c);
  if (c == NULL || in_callback)
    return;
  in_callback = 1;
  if (th_on_watchdog_thread() && r->want != NULL && strstr(msg, r->want) != NULL)
    atomic_fetch_add(&r->seen_on_driver, 1);
  call_back(r, c);
  in_callback = 0;
}

static ecc_connector_t *open_calling_back(struct reentry *r, const char *region,
                                          const ecc_kv_t *over, size_t n_over)
{
  ecc_open_options_t opt = {.struct_size = sizeof(opt),
                            .overrides = over,
                            .n_overrides = n_over,
                            .log = calling_back,
                            .log_user = r,
                            .log_level = ECC_LOG_DEBUG};
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(th_ini("both", region, BS, NB, NULL), &opt, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open: %d %s", rc, err);
  atomic_store(&r->c, c);
  return c;
}

/* ---- the calls that log under a lock ---- */

struct save_call {
  ecc_connector_t *c;
  uint32_t block;
  char src[BS];
  int save_rc, flush_rc;
};

static void save_and_flush(void *arg)
{
  struct save_call *s = arg;
  ecc_save_entry_t e = {.key = "reentry-saved",
                        .src = (uint64_t)(uintptr_t)s->src,
                        .nbytes = BS,
                        .block_ids = &s->block,
                        .n_blocks = 1};
  s->save_rc = ecc_save(s->c, &e, 1);
  s->flush_rc = ecc_flush(s->c, NULL);
}

static void expect_called_back(struct reentry *r, const char *what)
{
  cr_expect_gt(atomic_load(&r->seen_on_driver), 0, "%s: '%s' never reached the callback", what,
               r->want);
  cr_expect_gt(atomic_load(&r->called_back), 0, "%s: the callback never called back", what);
  cr_expect_eq(atomic_load(&r->nested_errors), 0, "%s: %d nested calls failed", what,
               atomic_load(&r->nested_errors));
}

/* connector.max_inflight = 1: a second flush before a poll is refused with
 * ECC_ERR_BUSY, said while the step lock is held. */
Test(log_reentry, a_busy_refusal_made_under_the_step_lock)
{
  struct reentry r = {.want = "transfers are in flight"};
  const ecc_kv_t over[] = {{"connector.max_inflight", "1"}};
  ecc_connector_t *c = open_calling_back(&r, th_region_name(), over, 1);
  struct save_call s = {.c = c, .block = 1};
  th_fill(s.src, sizeof(s.src), 7);
  th_within_watchdog(WATCHDOG_MS, "the first flush", save_and_flush, &s);
  cr_assert_eq(s.save_rc, ECC_OK);
  cr_assert_eq(s.flush_rc, ECC_OK);
  s.block = 2;
  th_within_watchdog(WATCHDOG_MS, "a flush refused for want of room", save_and_flush, &s);
  cr_expect_eq(s.flush_rc, ECC_ERR_BUSY, "flush said %d", s.flush_rc);
  expect_called_back(&r, "busy flush");
  ecc_completion_t done[2];
  cr_expect_eq(th_poll_until(c, done, 1, 5000), 1u);
  atomic_store(&r.c, NULL);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

struct load_call {
  ecc_connector_t *c;
  int rc;
};

static void refused_load(void *arg)
{
  struct load_call *l = arg;
  uint32_t bad = NB + 5;
  static char dst[BS];
  ecc_load_entry_t e = {1, &bad, 1, (uint64_t)(uintptr_t)dst, BS};
  l->rc = ecc_load(l->c, &e, 1, NULL);
}

/* A load naming a block past the region is refused while the step is
 * checked under its lock. */
Test(log_reentry, a_refused_load_made_under_the_step_lock)
{
  struct reentry r = {.want = "out of range"};
  ecc_connector_t *c = open_calling_back(&r, th_region_name(), NULL, 0);
  struct load_call l = {.c = c};
  th_within_watchdog(WATCHDOG_MS, "a refused load", refused_load, &l);
  cr_expect_eq(l.rc, ECC_ERR_RANGE, "load said %d", l.rc);
  expect_called_back(&r, "refused load");
  atomic_store(&r.c, NULL);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

struct poll_call {
  ecc_connector_t *c;
  ecc_completion_t done[4];
  size_t n;
  int rc;
};

static void poll_once(void *arg)
{
  struct poll_call *p = arg;
  for (int t = 0; t < 500 && p->n == 0; t++) {
    p->rc = ecc_poll(p->c, p->done, 4, &p->n);
    if (p->n == 0)
      usleep(2000);
  }
}

/* A flushed save whose region file is removed before it is polled: the
 * poll that finds the region gone says so under the completions' lock, and
 * reports the save failed. */
Test(log_reentry, a_failed_poll_made_under_the_completions_lock)
{
  struct reentry r = {.want = "was removed or replaced"};
  const char *name = th_region_name();
  ecc_connector_t *c = open_calling_back(&r, name, NULL, 0);
  struct save_call s = {.c = c, .block = 3};
  th_fill(s.src, sizeof(s.src), 9);
  th_within_watchdog(WATCHDOG_MS, "a save", save_and_flush, &s);
  cr_assert_eq(s.flush_rc, ECC_OK);
  cr_assert_eq(unlink(th_region_path(th_default_dir(), name)), 0);
  struct poll_call p = {.c = c};
  th_within_watchdog(WATCHDOG_MS, "a poll that finds its region removed", poll_once, &p);
  cr_assert_eq(p.rc, ECC_OK);
  cr_assert_eq(p.n, 1u, "the save was never reported");
  cr_expect_eq(p.done[0].status, ECC_ERR_REGION, "the save said %d", p.done[0].status);
  expect_called_back(&r, "failed poll");
  atomic_store(&r.c, NULL);
  cr_assert_eq(ecc_close(c), ECC_OK);
}
