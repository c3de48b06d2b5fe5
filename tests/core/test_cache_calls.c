/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cache_calls.c - the cache of ABI 1.2 through the host library with
 * the real plugin: single-flight waits (woken by publish, abort and the
 * writer's death, a timeout that changes nothing), peek that changes
 * nothing, typed entries and the loads that disagree with them, costs
 * counted on hits, and the residency events of an entry's life.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 64u
#define DIR_ON "[directory]\nenabled = true\n"
#define WAITERS 7

static char err[1024];

static const char *last(ecc_connector_t *c)
{
  ecc_last_error(c, err, sizeof(err));
  return err;
}

static ecc_entry_t reserve_typed(ecc_connector_t *c, const char *key, uint64_t nbytes,
                                 uint64_t cost_us, ecc_tensor_t type)
{
  ecc_reserve_args_t a = {
      .struct_size = sizeof(a), .key = key, .nbytes = nbytes, .cost_us = cost_us, .type = type};
  ecc_entry_t e;
  int rc = ecc_reserve_ex(c, &a, &e);
  cr_assert_eq(rc, ECC_OK, "reserve_ex %s: %d %s", key, rc, last(c));
  return e;
}

static void save_one(ecc_connector_t *c, uint64_t token, const void *src, uint64_t nbytes)
{
  ecc_save_reserved_t s = {token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK, "%s", last(c));
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "no completion for the save");
  cr_assert_eq(done.status, ECC_OK);
}

static ecc_tensor_t f16(uint64_t rows, uint64_t cols)
{
  return (ecc_tensor_t){.dtype = ECC_DTYPE_FLOAT16, .n_dims = 2, .dims = {rows, cols}};
}

static ecc_peek_t peek_one(ecc_connector_t *c, const char *key)
{
  ecc_peek_t p;
  const char *keys[1] = {key};
  cr_assert_eq(ecc_peek(c, keys, 1, &p), ECC_OK, "%s", last(c));
  return p;
}

/* ---- single flight across processes ---------------------------------- */

/* What a waiter process reports on its pipe. */
struct waited {
  int32_t rc, state;     /* of wait_ready */
  uint64_t woke_ns;      /* CLOCK_MONOTONIC when wait_ready returned */
  int32_t reserve_rc;    /* of the reserve it makes next */
  int32_t reserve_state; /* RESERVED for the one that took the key over */
};

static int run_writer(const char *ini, int fd)
{
  ecc_connector_t *c = th_open_as(ini, "producer");
  ecc_entry_t e;
  if (ecc_reserve(c, "flight", 4 * BS, &e) != ECC_OK || e.state != ECC_ENTRY_RESERVED)
    return 3;
  char ready = 'R';
  if (write(fd, &ready, 1) != 1)
    return 4;
  for (;;)
    pause(); /* "encoding" until the parent kills it */
}

static int run_waiter(const char *ini, int fd)
{
  ecc_connector_t *c = th_open_as(ini, "both");
  char asleep = 'W';
  if (write(fd, &asleep, 1) != 1)
    return 4;
  struct waited w = {0};
  ecc_entry_t e;
  w.rc = ecc_wait_ready(c, "flight", 1, 10ull * 1000000000ull, &e, NULL);
  w.woke_ns = th_now_ns();
  w.state = e.state;
  if (write(fd, &w, sizeof(w)) != (ssize_t)sizeof(w))
    return 5;
  /* Reserving once every waiter has reported: one that woke later would
   * find the key reserved by a live process, and rightly wait for it. */
  char go;
  if (read(fd, &go, 1) != 1)
    return 6;
  ecc_entry_t r;
  w.reserve_rc = ecc_reserve(c, "flight", 4 * BS, &r);
  w.reserve_state = r.state;
  if (write(fd, &w, sizeof(w)) != (ssize_t)sizeof(w))
    return 7;
  /* The one that reserved holds the key until the parent has counted. */
  if (read(fd, &go, 1) != 1)
    return 8;
  ecc_close(c);
  return 0;
}

__attribute__((constructor)) static void child_entry(void)
{
  const char *role, *ini;
  int fd0, fd1;
  if (!th_child_args(&role, &ini, &fd0, &fd1))
    return;
  if (strcmp(role, "writer") == 0)
    _exit(run_writer(ini, fd1));
  if (strcmp(role, "waiter") == 0)
    _exit(run_waiter(ini, fd1));
}

static void read_byte(int fd, char want)
{
  char got = 0;
  cr_assert_eq(read(fd, &got, 1), 1, "a child ended before it was ready");
  cr_assert_eq(got, want);
}

/* One round: a writer reserves, seven waiters go to sleep on the key, the
 * writer is killed; every waiter wakes with ABSENT within the dead-owner
 * detection time, and exactly one of them then reserves the key. */
static void sigkill_round(const char *ini)
{
  int wfd[2], pfd[WAITERS][2];
  cr_assert_eq(pipe2(wfd, O_CLOEXEC), 0);
  pid_t writer = th_spawn_self("writer", ini, -1, wfd[1]);
  close(wfd[1]);
  read_byte(wfd[0], 'R');
  pid_t waiter[WAITERS];
  for (int i = 0; i < WAITERS; i++) {
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pfd[i]), 0);
    waiter[i] = th_spawn_self("waiter", ini, -1, pfd[i][1]);
    close(pfd[i][1]);
    read_byte(pfd[i][0], 'W');
  }
  usleep(300 * 1000); /* each is inside wait_ready, asleep on the futex */
  uint64_t killed_ns = th_now_ns();
  cr_assert_eq(kill(writer, SIGKILL), 0);
  int reserved = 0;
  for (int i = 0; i < WAITERS; i++) {
    struct waited w;
    cr_assert_eq(read(pfd[i][0], &w, sizeof(w)), (ssize_t)sizeof(w), "waiter %d ended early", i);
    cr_assert_eq(w.rc, ECC_OK, "waiter %d: wait_ready returned %d", i, w.rc);
    cr_assert_eq(w.state, ECC_ENTRY_ABSENT, "waiter %d woke with state %d", i, w.state);
    uint64_t after = w.woke_ns > killed_ns ? w.woke_ns - killed_ns : 0;
    cr_assert_lt(after, 2000000000ull, "waiter %d woke %llu ms after the kill", i,
                 (unsigned long long)(after / 1000000));
  }
  for (int i = 0; i < WAITERS; i++)
    cr_assert_eq(write(pfd[i][0], "g", 1), 1);
  for (int i = 0; i < WAITERS; i++) {
    struct waited w;
    cr_assert_eq(read(pfd[i][0], &w, sizeof(w)), (ssize_t)sizeof(w), "waiter %d ended early", i);
    cr_assert_eq(w.reserve_rc, ECC_OK);
    reserved += w.reserve_state == ECC_ENTRY_RESERVED;
  }
  cr_assert_eq(reserved, 1, "%d waiters reserved the key after the writer died", reserved);
  for (int i = 0; i < WAITERS; i++) {
    cr_assert_eq(write(pfd[i][0], "q", 1), 1);
    close(pfd[i][0]);
  }
  int status;
  for (int i = 0; i < WAITERS; i++) {
    cr_assert_eq(waitpid(waiter[i], &status, 0), waiter[i]);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "waiter %d: status %d", i, status);
  }
  cr_assert_eq(waitpid(writer, &status, 0), writer);
  close(wfd[0]);
}

Test(cache_calls, waiters_of_a_killed_writer_wake_absent_and_one_reserves, .timeout = 60)
{
  for (int round = 0; round < 3; round++) {
    char region[64];
    snprintf(region, sizeof(region), "%s-k%d", th_region_name(), round);
    const char *ini = th_ini("both", region, BS, NB, DIR_ON);
    ecc_connector_t *watch = th_open_as(ini, "both");
    sigkill_round(ini);
    ecc_stats_t s = th_stats(watch);
    cr_assert_eq(s.cache.waits, WAITERS, "round %d: %llu waits slept", round,
                 (unsigned long long)s.cache.waits);
    cr_assert_eq(s.cache.waits_absent, WAITERS);
    cr_assert_geq(s.directory.reclaimed, 1, "the dead writer's reservation was not reclaimed");
    cr_assert_eq(ecc_close(watch), ECC_OK);
  }
}

/* ---- single flight in one process ------------------------------------ */

struct publisher {
  ecc_connector_t *c;
  uint64_t token;
  const void *src;
  bool abort_it;
};

static void *publish_later(void *arg)
{
  struct publisher *p = arg;
  usleep(100 * 1000);
  if (p->abort_it) {
    cr_assert_eq(ecc_abort_reserved(p->c, p->token), ECC_OK);
    return NULL;
  }
  ecc_save_reserved_t s = {p->token, (uint64_t)(uintptr_t)p->src, 2 * BS};
  cr_assert_eq(ecc_save_reserved(p->c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(p->c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(p->c, &done, 1, 5000), 1);
  return NULL;
}

Test(cache_calls, a_wait_ends_ready_and_pinned_at_the_publish)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[2 * BS], dst[2 * BS];
  th_fill(src, sizeof(src), 5);
  ecc_entry_t r = reserve_typed(c, "later", sizeof(src), 7000, f16(2, BS / 2));
  struct publisher p = {c, r.token, src, false};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, publish_later, &p), 0);
  ecc_entry_t e;
  ecc_entry_meta_t meta;
  uint64_t t0 = th_now_ns();
  cr_assert_eq(ecc_wait_ready(c, "later", 1, 5000000000ull, &e, &meta), ECC_OK, "%s", last(c));
  cr_assert_geq(th_now_ns() - t0, 50000000ull, "it did not wait for the publish");
  pthread_join(t, NULL);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_assert_neq(e.token, 0);
  cr_assert_eq(meta.cost_us, 7000);
  cr_assert_eq(meta.type.dtype, ECC_DTYPE_FLOAT16);
  cr_assert_eq(peek_one(c, "later").pins, 1, "the wait's pin is not live");
  ecc_load_pinned_t l = {9, e.token, (uint64_t)(uintptr_t)dst, sizeof(dst)};
  cr_assert_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_OK, "%s", last(c));
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(memcmp(src, dst, sizeof(src)), 0);
  ecc_stats_t s = th_stats(c);
  cr_assert_eq(s.cache.waits, 1);
  cr_assert_eq(s.cache.waits_ready, 1);
  cr_assert_eq(s.cache.encoder_us_saved, 7000, "the hit's cost was not counted");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, an_abort_wakes_the_waiter_absent)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  ecc_entry_t r;
  cr_assert_eq(ecc_reserve(c, "gives-up", BS, &r), ECC_OK);
  struct publisher p = {c, r.token, NULL, true};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, publish_later, &p), 0);
  ecc_entry_t e;
  cr_assert_eq(ecc_wait_ready(c, "gives-up", 1, 5000000000ull, &e, NULL), ECC_OK);
  pthread_join(t, NULL);
  cr_assert_eq(e.state, ECC_ENTRY_ABSENT);
  cr_assert_eq(e.token, 0);
  cr_assert_eq(th_stats(c).cache.waits_absent, 1);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, a_timeout_changes_nothing)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  ecc_entry_t r;
  cr_assert_eq(ecc_reserve(c, "slow", BS, &r), ECC_OK);
  ecc_stats_t before = th_stats(c);
  ecc_entry_t e;
  uint64_t t0 = th_now_ns();
  cr_assert_eq(ecc_wait_ready(c, "slow", 2, 60000000ull, &e, NULL), ECC_OK, "%s", last(c));
  cr_assert_geq(th_now_ns() - t0, 60000000ull, "it returned before its timeout");
  cr_assert_eq(e.state, ECC_ENTRY_WRITING);
  cr_assert_eq(e.token, 0);
  ecc_stats_t after = th_stats(c);
  cr_assert_eq(after.directory.pins_live, before.directory.pins_live);
  cr_assert_eq(after.directory.entries, before.directory.entries);
  cr_assert_eq(after.cache.wait_timeouts, 1);
  /* The reservation is the caller's still: saving it works. */
  static uint8_t src[BS];
  save_one(c, r.token, src, BS);
  cr_assert_eq(peek_one(c, "slow").state, ECC_ENTRY_READY);
  /* Ready now: a wait of no time finds it, with ranks 0 unpinned. */
  cr_assert_eq(ecc_wait_ready(c, "slow", 0, 0, &e, NULL), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_assert_eq(e.token, 0, "ranks 0 took a pin");
  cr_assert_eq(peek_one(c, "slow").pins, 0);
  /* Absent: no wait at all. */
  cr_assert_eq(ecc_wait_ready(c, "nobody", 1, 5000000000ull, &e, NULL), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_ABSENT);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, bad_waits_are_refused_by_name)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "producer");
  ecc_entry_t e;
  cr_assert_eq(ecc_wait_ready(c, "k", 1, 0, &e, NULL), ECC_ERR_ROLE, "a producer pinned");
  cr_assert_eq(ecc_wait_ready(c, "k", 0, 0, &e, NULL), ECC_OK, "%s", last(c));
  cr_assert_eq(ecc_wait_ready(c, "k", 0, 3600000000001ull, &e, NULL), ECC_ERR_INVALID);
  cr_assert(strstr(last(c), "hour") != NULL, "%s", err);
  cr_assert_eq(ecc_wait_ready(c, "", 0, 0, &e, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_wait_ready(c, "k", 0, 0, NULL, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- peek --------------------------------------------------------------- */

Test(cache_calls, peek_tells_states_and_types_and_changes_nothing)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[4 * BS];
  ecc_entry_t ready = reserve_typed(c, "ready", sizeof(src), 900, f16(4, BS / 2));
  save_one(c, ready.token, src, sizeof(src));
  ecc_entry_t w;
  cr_assert_eq(ecc_reserve(c, "writing", BS, &w), ECC_OK);
  ecc_stats_t before = th_stats(c);
  const char *keys[3] = {"ready", "writing", "absent"};
  ecc_peek_t p[3];
  cr_assert_eq(ecc_peek(c, keys, 3, p), ECC_OK, "%s", last(c));
  cr_assert_eq(p[0].state, ECC_ENTRY_READY);
  cr_assert_eq(p[0].nbytes, sizeof(src));
  cr_assert_eq(p[0].meta.cost_us, 900);
  cr_assert_eq(p[0].meta.type.dims[0], 4);
  cr_assert_eq(p[1].state, ECC_ENTRY_WRITING);
  cr_assert_eq(p[2].state, ECC_ENTRY_ABSENT);
  cr_assert_eq(p[2].nbytes, 0);
  ecc_stats_t after = th_stats(c);
  cr_assert_eq(memcmp(&before.directory, &after.directory, sizeof(before.directory)), 0,
               "peek changed the directory's counters");
  cr_assert_eq(memcmp(&before.cache, &after.cache, sizeof(before.cache)), 0,
               "peek changed the cache's counters");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- typed entries -------------------------------------------------------- */

Test(cache_calls, a_type_that_is_not_the_size_is_refused_and_reserves_nothing)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  ecc_reserve_args_t a = {
      .struct_size = sizeof(a), .key = "t", .nbytes = 3 * BS, .type = f16(2, BS / 2)};
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_INVALID);
  cr_assert(strstr(last(c), "float16[2, 512]") != NULL && strstr(err, "3072") != NULL, "%s", err);
  a.type = (ecc_tensor_t){.dtype = 99, .n_dims = 1, .dims = {3 * BS}};
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_INVALID);
  a.type = (ecc_tensor_t){.dtype = ECC_DTYPE_UINT8, .n_dims = 5};
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_INVALID);
  a.type = (ecc_tensor_t){.dtype = ECC_DTYPE_UINT8, .n_dims = 1, .dims = {3 * BS, 7}};
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_INVALID, "a dim past n_dims was taken");
  a.struct_size = 8;
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_INVALID);
  cr_assert_eq(peek_one(c, "t").state, ECC_ENTRY_ABSENT, "a refused reserve_ex reserved");
  cr_assert_eq(th_stats(c).directory.reservations, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, a_load_of_another_type_is_refused_naming_both)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[4 * BS], dst[8 * BS];
  th_fill(src, sizeof(src), 11);
  ecc_entry_t r = reserve_typed(c, "typed", sizeof(src), 0, f16(4, BS / 2));
  save_one(c, r.token, src, sizeof(src));
  const char *keys[1] = {"typed"};
  ecc_entry_t e;
  ecc_entry_meta_t meta;
  cr_assert_eq(ecc_lookup_ex(c, keys, 1, 1, &e, &meta), ECC_OK);
  cr_assert_eq(meta.type.dtype, ECC_DTYPE_FLOAT16);
  cr_assert_eq(meta.type.dims[1], BS / 2);
  ecc_load_typed_t l = {.transfer_id = 1,
                        .token = e.token,
                        .dst = (uint64_t)(uintptr_t)dst,
                        .dst_capacity = sizeof(dst),
                        .type = {.dtype = ECC_DTYPE_FLOAT32, .n_dims = 2, .dims = {4, BS / 2}}};
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_ERR_RANGE);
  cr_assert(strstr(last(c), "float32[4, 512]") != NULL && strstr(err, "float16[4, 512]") != NULL,
            "%s", err);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 100), 0, "a refused load was queued");
  l.type = f16(2, BS);
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_ERR_RANGE, "same bytes, other shape");
  l.type = (ecc_tensor_t){0};
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_ERR_INVALID, "an untyped declaration");
  l.type = f16(4, BS / 2);
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_OK, "%s", last(c));
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
  cr_assert_eq(memcmp(src, dst, sizeof(src)), 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, an_untyped_entry_loads_typed_by_its_bytes)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[2 * BS], dst[2 * BS];
  ecc_entry_t r;
  cr_assert_eq(ecc_reserve(c, "raw", sizeof(src), &r), ECC_OK);
  save_one(c, r.token, src, sizeof(src));
  const char *keys[1] = {"raw"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_OK);
  ecc_load_typed_t l = {1,
                        e.token,
                        (uint64_t)(uintptr_t)dst,
                        sizeof(dst),
                        {.dtype = ECC_DTYPE_FLOAT32, .n_dims = 1, .dims = {BS}}};
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_ERR_RANGE);
  cr_assert(strstr(last(c), "untyped") != NULL, "%s", err);
  l.type.dims[0] = BS / 2;
  cr_assert_eq(ecc_load_typed(c, &l, 1, NULL), ECC_OK, "%s", last(c));
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, list_ex_returns_cost_hits_and_type)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[2 * BS];
  ecc_entry_t r = reserve_typed(c, "listed", sizeof(src), 1234, f16(2, BS / 2));
  save_one(c, r.token, src, sizeof(src));
  const char *keys[1] = {"listed"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(ecc_unpin(c, e.token), ECC_OK);
  uint64_t cursor = 0;
  ecc_listed_t out[4];
  ecc_entry_meta_t meta[4];
  size_t n = 0;
  cr_assert_eq(ecc_list_ex(c, &cursor, out, meta, 4, &n), ECC_OK, "%s", last(c));
  cr_assert_eq(n, 1);
  cr_assert_str_eq(out[0].key, "listed");
  cr_assert_eq(meta[0].cost_us, 1234);
  cr_assert_eq(meta[0].hits, 1);
  cr_assert_eq(meta[0].type.n_dims, 2);
  cr_assert_eq(th_stats(c).cache.encoder_us_saved, 1234);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- events --------------------------------------------------------------- */

Test(cache_calls, an_entry_life_is_told_in_events)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  uint64_t cursor = 0;
  size_t n = 1;
  cr_assert_eq(ecc_events(c, &cursor, NULL, 0, &n, NULL), ECC_OK);
  cr_assert_eq(n, 0);
  cr_assert_eq(cursor, 1, "an empty ring's next event is 1");
  static uint8_t src[3 * BS];
  ecc_entry_t r = reserve_typed(c, "told", sizeof(src), 55, (ecc_tensor_t){0});
  save_one(c, r.token, src, sizeof(src));
  cr_assert_eq(ecc_remove(c, "told"), ECC_OK);
  ecc_event_t ev[4];
  uint64_t lost = 9;
  cr_assert_eq(ecc_events(c, &cursor, ev, 4, &n, &lost), ECC_OK, "%s", last(c));
  cr_assert_eq(n, 2);
  cr_assert_eq(lost, 0);
  cr_assert_eq(cursor, 3);
  cr_assert_eq(ev[0].kind, ECC_EVENT_STORED);
  cr_assert_eq(ev[1].kind, ECC_EVENT_REMOVED);
  cr_assert_eq(ev[0].seq, 1);
  cr_assert_eq(ev[1].seq, 2);
  cr_assert_str_eq(ev[0].key, "told");
  cr_assert_eq(ev[0].nbytes, sizeof(src));
  cr_assert_eq(ev[0].cost_us, 55);
  cr_assert_neq(ev[0].instance, 0);
  cr_assert_leq(ev[0].time_ns, ev[1].time_ns);
  cr_assert_eq(th_stats(c).cache.events, 2);
  cr_assert_eq(ecc_events(c, &cursor, ev, 4, &n, &lost), ECC_OK);
  cr_assert_eq(n, 0, "the cursor did not move past what was read");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cache_calls, the_ring_keeps_event_slots_and_a_late_reader_learns_what_it_lost)
{
  const char *ini =
      th_ini("both", th_region_name(), BS, NB, "[directory]\nenabled = true\nevent_slots = 16\n");
  ecc_connector_t *c = th_open_as(ini, "both");
  static uint8_t src[BS];
  for (int i = 0; i < 10; i++) {
    char key[16];
    snprintf(key, sizeof(key), "e%d", i);
    ecc_entry_t r;
    cr_assert_eq(ecc_reserve(c, key, BS, &r), ECC_OK);
    save_one(c, r.token, src, BS);
    cr_assert_eq(ecc_remove(c, key), ECC_OK);
  }
  uint64_t cursor = 1, lost = 0;
  ecc_event_t ev[32];
  size_t n = 0;
  cr_assert_eq(ecc_events(c, &cursor, ev, 32, &n, &lost), ECC_OK, "%s", last(c));
  cr_assert_eq(lost, 4, "20 events through a ring of 16: %llu lost", (unsigned long long)lost);
  cr_assert_eq(n, 16);
  cr_assert_eq(ev[0].seq, 5);
  cr_assert_eq(ev[15].seq, 20);
  cr_assert_eq(cursor, 21);
  cr_assert_eq(ecc_close(c), ECC_OK);
}
