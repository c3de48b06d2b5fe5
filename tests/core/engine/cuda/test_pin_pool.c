/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pin_pool.c - the CUDA engine's pinned-buffer pool with an injected
 * allocator: reuse of released buffers, which spare a request gets, the
 * sizes asked of the allocator, freeing at destroy, and allocator failure.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine/cuda/pin_pool.h"

#define MAX_LIVE 64

/* An allocator that records what it was asked and what it gave. It may run
 * on the test's own threads, so it reports trouble in its fields instead of
 * asserting; each test checks them. */
struct fake_alloc {
  pthread_mutex_t lock;
  unsigned allocs, releases;
  unsigned foreign;     /* releases of memory it never gave, or gave back already */
  bool fail;            /* the next allocations return NULL */
  bool overflow;        /* more than MAX_LIVE were wanted at once */
  size_t last_bytes;    /* size of the last request */
  void *live[MAX_LIVE]; /* given and not released */
};

static void *fake_get(void *ctx, size_t bytes)
{
  struct fake_alloc *a = ctx;
  pthread_mutex_lock(&a->lock);
  a->last_bytes = bytes;
  size_t i = 0;
  while (i < MAX_LIVE && a->live[i] != NULL)
    i++;
  a->overflow |= i == MAX_LIVE;
  void *p = NULL;
  if (!a->fail && i < MAX_LIVE)
    p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p != NULL) {
    memset(p, 0xa5, bytes); /* the pool must write its own header */
    a->live[i] = p;
    a->allocs++;
  }
  pthread_mutex_unlock(&a->lock);
  return p;
}

static void fake_put(void *ctx, void *mem)
{
  struct fake_alloc *a = ctx;
  pthread_mutex_lock(&a->lock);
  size_t i = 0;
  while (i < MAX_LIVE && a->live[i] != mem)
    i++;
  if (i < MAX_LIVE) {
    a->live[i] = NULL;
    a->releases++;
    free(mem);
  } else {
    a->foreign++; /* never given, or released twice: not freed again */
  }
  pthread_mutex_unlock(&a->lock);
}

static struct fake_alloc fa;
static struct pin_pool pool;

static void setup(void)
{
  memset(&fa, 0, sizeof(fa));
  pthread_mutex_init(&fa.lock, NULL);
  cr_assert_eq(pin_pool_init(&pool, fake_get, fake_put, &fa), 0);
}

static void teardown(void)
{
  pthread_mutex_destroy(&fa.lock);
}

/* Destroy the pool: every allocation is then released exactly once, and
 * nothing else was. */
static void destroy_pool(void)
{
  pin_pool_destroy(&pool);
  cr_expect_eq(fa.releases, fa.allocs, "%u allocations, %u released", fa.allocs, fa.releases);
  cr_expect_eq(fa.foreign, 0, "%u releases of memory the allocator did not give out", fa.foreign);
  cr_expect_not(fa.overflow, "more than %d buffers were allocated at once", MAX_LIVE);
  for (size_t i = 0; i < MAX_LIVE; i++)
    cr_expect_null(fa.live[i], "allocation %zu was never released", i);
}

TestSuite(pin_pool, .init = setup, .fini = teardown);

/* Every byte of a buffer is the caller's: write it all. */
static void *get_and_fill(size_t bytes, int value)
{
  uint8_t *p = pin_pool_get(&pool, bytes);
  cr_assert_not_null(p, "no buffer of %zu bytes", bytes);
  memset(p, value, bytes);
  return p;
}

Test(pin_pool, new_buffer_has_the_header_before_it_and_keeps_alignment)
{
  void *p = get_and_fill(1000, 1);
  cr_expect_eq(fa.allocs, 1);
  cr_expect_eq(fa.last_bytes, 1000 + PIN_POOL_HDR, "asked %zu bytes of the allocator",
               fa.last_bytes);
  cr_expect_eq(p, (uint8_t *)fa.live[0] + PIN_POOL_HDR);
  cr_expect_eq((uintptr_t)p % 64, 0, "buffer %p is not 64-byte aligned", p);
  pin_pool_put(&pool, p);
  destroy_pool();
  cr_expect_eq(fa.releases, 1);
}

Test(pin_pool, released_buffer_is_reused_without_allocating)
{
  void *a = get_and_fill(4096, 2);
  pin_pool_put(&pool, a);
  void *b = get_and_fill(4096, 3);
  cr_expect_eq(b, a, "a spare of the same size was not reused");
  pin_pool_put(&pool, b);
  void *c = get_and_fill(100, 4);
  cr_expect_eq(c, a, "a smaller request did not take the larger spare");
  cr_expect_eq(fa.allocs, 1, "%u allocations for one buffer", fa.allocs);
  pin_pool_put(&pool, c);
  destroy_pool();
  cr_expect_eq(fa.releases, 1);
}

Test(pin_pool, spare_too_small_is_left_for_a_new_allocation)
{
  void *small = get_and_fill(256, 5);
  pin_pool_put(&pool, small);
  void *big = get_and_fill(257, 6);
  cr_expect_neq(big, small, "a 256-byte spare served 257 bytes");
  cr_expect_eq(fa.allocs, 2);
  cr_expect_eq(fa.last_bytes, 257 + PIN_POOL_HDR);
  /* The small spare is still there for a request it fits. */
  void *again = get_and_fill(256, 7);
  cr_expect_eq(again, small);
  cr_expect_eq(fa.allocs, 2);
  pin_pool_put(&pool, big);
  pin_pool_put(&pool, again);
  destroy_pool();
  cr_expect_eq(fa.releases, 2);
}

Test(pin_pool, request_gets_the_smallest_spare_that_fits)
{
  const size_t sizes[] = {8192, 1024, 65536, 2048, 4096};
  void *bufs[5];
  for (size_t i = 0; i < 5; i++)
    bufs[i] = get_and_fill(sizes[i], (int)i);
  for (size_t i = 0; i < 5; i++)
    pin_pool_put(&pool, bufs[i]);
  /* Best fit, whatever the order they were released in (asserted: a wrong
   * buffer would be put back twice below). */
  cr_assert_eq(pin_pool_get(&pool, 1500), bufs[3], "1500 bytes: not the 2048-byte spare");
  cr_assert_eq(pin_pool_get(&pool, 4096), bufs[4], "4096 bytes: not the 4096-byte spare");
  cr_assert_eq(pin_pool_get(&pool, 1), bufs[1], "1 byte: not the 1024-byte spare");
  cr_assert_eq(pin_pool_get(&pool, 8193), bufs[2], "8193 bytes: not the 65536-byte spare");
  cr_assert_eq(pin_pool_get(&pool, 8192), bufs[0], "8192 bytes: not the 8192-byte spare");
  cr_expect_eq(fa.allocs, 5, "the spares were enough, yet %u allocations", fa.allocs);
  /* A buffer keeps the size it was made with, not the last request's. */
  pin_pool_put(&pool, bufs[2]);
  cr_assert_eq(pin_pool_get(&pool, 65536), bufs[2], "the 65536-byte buffer shrank");
  for (size_t i = 0; i < 5; i++)
    pin_pool_put(&pool, bufs[i]);
  destroy_pool();
  cr_expect_eq(fa.releases, 5);
}

Test(pin_pool, destroy_frees_every_spare_once)
{
  void *bufs[10];
  for (size_t i = 0; i < 10; i++)
    bufs[i] = get_and_fill(100 * (i + 1), (int)i);
  for (size_t i = 0; i < 10; i++)
    pin_pool_put(&pool, bufs[i]);
  cr_expect_eq(fa.releases, 0, "put freed memory");
  destroy_pool();
  cr_expect_eq(fa.releases, 10, "%u of 10 buffers freed", fa.releases);
}

Test(pin_pool, put_of_null_is_ignored_and_empty_destroy_frees_nothing)
{
  pin_pool_put(&pool, NULL);
  destroy_pool();
  cr_expect_eq(fa.allocs, 0);
  cr_expect_eq(fa.releases, 0);
}

Test(pin_pool, allocator_failure_returns_null_and_changes_nothing)
{
  void *spare = get_and_fill(128, 8);
  pin_pool_put(&pool, spare);
  fa.fail = true;
  cr_expect_null(pin_pool_get(&pool, 4096), "a failed allocation gave a buffer");
  cr_expect_eq(fa.last_bytes, 4096 + PIN_POOL_HDR);
  /* The spare was not lost or handed out by the failed request. */
  cr_expect_eq(pin_pool_get(&pool, 128), spare);
  pin_pool_put(&pool, spare);
  fa.fail = false;
  void *p = get_and_fill(4096, 9);
  cr_expect_neq(p, spare);
  pin_pool_put(&pool, p);
  destroy_pool();
  cr_expect_eq(fa.allocs, 2);
}

Test(pin_pool, size_overflow_is_refused_before_the_allocator)
{
  fa.last_bytes = 0;
  cr_expect_null(pin_pool_get(&pool, SIZE_MAX));
  cr_expect_null(pin_pool_get(&pool, SIZE_MAX - PIN_POOL_HDR + 1));
  cr_expect_eq(fa.last_bytes, 0, "the allocator was asked for %zu bytes", fa.last_bytes);
  destroy_pool();
}

/* Threads sharing the pool, as submit and poll threads share the engine's:
 * every buffer stays whole while it is out. */
static void *churn(void *arg)
{
  int id = (int)(intptr_t)arg;
  for (int round = 0; round < 2000; round++) {
    size_t bytes = 64u << (round % 4);
    uint8_t *p = pin_pool_get(&pool, bytes);
    if (p == NULL)
      return (void *)1;
    memset(p, id, bytes);
    for (size_t i = 0; i < bytes; i++)
      if (p[i] != (uint8_t)id)
        return (void *)2;
    pin_pool_put(&pool, p);
  }
  return NULL;
}

Test(pin_pool, threads_never_share_a_buffer)
{
  pthread_t t[4];
  for (intptr_t i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
  for (int i = 0; i < 4; i++) {
    void *rc;
    cr_assert_eq(pthread_join(t[i], &rc), 0);
    cr_expect_null(rc, "thread %d saw its buffer change or got none (%p)", i, rc);
  }
  /* A buffer of one size is made only while the other threads hold every
   * buffer at least as large (fewer than 4 of them): 4 sizes, at most 16. */
  cr_expect_leq(fa.allocs, 16, "%u allocations for 4 threads and 4 sizes", fa.allocs);
  destroy_pool();
}
