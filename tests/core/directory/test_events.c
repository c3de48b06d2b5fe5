/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_events.c - the residency-event ring (core/directory/events.h):
 * order and cursors, a reader lapped by the writer learns exactly how many
 * it lost, a record left half-written by a killed writer and a damaged one
 * are never returned, and readers on other threads copy whole records
 * while the writer goes on (the test ThreadSanitizer runs).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/directory/events.h"

#define SLOTS 16u

static void *ring_new(uint32_t slots)
{
  size_t bytes = ev_bytes(slots);
  cr_assert_gt(bytes, 0);
  void *mem = aligned_alloc(64, (bytes + 63) / 64 * 64);
  cr_assert_not_null(mem);
  ev_format(mem, slots);
  return mem;
}

static struct dir_event event_of(uint64_t i)
{
  struct dir_event e = {.time_ns = 1000 + i,
                        .nbytes = 3 * i,
                        .cost_us = 7 * i,
                        .kind = ECC_EVENT_STORED + (uint32_t)(i % 4)};
  snprintf(e.key, sizeof(e.key), "key-%llu", (unsigned long long)i);
  return e;
}

static void put_n(void *ring, uint32_t slots, uint64_t from, uint64_t n)
{
  for (uint64_t i = from; i < from + n; i++) {
    struct dir_event e = event_of(i);
    cr_assert_eq(ev_put(ring, slots, &e), i, "event %llu got another sequence number",
                 (unsigned long long)i);
  }
}

/* Record i (seq i) as event_of(i) made it. */
static void expect_event(const struct dir_event *got, uint64_t i)
{
  struct dir_event want = event_of(i);
  cr_assert_eq(got->seq, i);
  cr_assert_eq(got->time_ns, want.time_ns);
  cr_assert_eq(got->nbytes, want.nbytes);
  cr_assert_eq(got->cost_us, want.cost_us);
  cr_assert_eq(got->kind, want.kind);
  cr_assert_str_eq(got->key, want.key);
}

Test(events, read_in_order_from_a_cursor)
{
  void *ring = ring_new(SLOTS);
  cr_assert_eq(ev_next(ring), 1);
  put_n(ring, SLOTS, 1, 5);
  struct dir_event out[8];
  uint64_t cursor = 0, lost = 9;
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 3, &lost), 3);
  cr_assert_eq(lost, 0);
  cr_assert_eq(cursor, 4);
  for (uint64_t i = 0; i < 3; i++)
    expect_event(&out[i], i + 1);
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 8, &lost), 2);
  expect_event(&out[1], 5);
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 8, &lost), 0, "read past the last event");
  /* cap 0: from now on; a cursor from the future is taken as now. */
  uint64_t now = 1;
  cr_assert_eq(ev_read(ring, SLOTS, &now, NULL, 0, &lost), 0);
  cr_assert_eq(now, 6);
  uint64_t future = 1000;
  cr_assert_eq(ev_read(ring, SLOTS, &future, out, 8, &lost), 0);
  cr_assert_eq(future, 6);
  free(ring);
}

Test(events, a_lapped_reader_learns_exactly_how_many_it_lost)
{
  void *ring = ring_new(SLOTS);
  put_n(ring, SLOTS, 1, 3 * SLOTS + 5); /* 53 events, the last 16 kept */
  struct dir_event out[SLOTS];
  uint64_t cursor = 2, lost = 0;
  size_t n = ev_read(ring, SLOTS, &cursor, out, SLOTS, &lost);
  cr_assert_eq(lost, 3 * SLOTS + 5 - SLOTS - 1, "lost %llu", (unsigned long long)lost);
  cr_assert_eq(n, SLOTS);
  expect_event(&out[0], 2 * SLOTS + 6);
  expect_event(&out[SLOTS - 1], 3 * SLOTS + 5);
  /* cursor 0 is the oldest kept, which is no loss. */
  cursor = 0;
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 1, &lost), 1);
  cr_assert_eq(lost, 0);
  expect_event(&out[0], 2 * SLOTS + 6);
  free(ring);
}

Test(events, a_half_written_record_is_not_read_and_the_next_put_replaces_it)
{
  void *ring = ring_new(SLOTS);
  put_n(ring, SLOTS, 1, 2);
  /* A writer killed inside ev_put of seq 3 left an odd stamp and the head
   * at 3: the stamp is the first word of record (3 - 1) % SLOTS. */
  _Atomic uint64_t *stamp =
      (_Atomic uint64_t *)((char *)ring + 64 + 2 * (ev_bytes(SLOTS) - 64) / SLOTS);
  atomic_store(stamp, 2 * 3 - 1);
  struct dir_event out[4];
  uint64_t cursor = 1, lost = 0;
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 4, &lost), 2);
  cr_assert_eq(cursor, 3);
  put_n(ring, SLOTS, 3, 1);
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 4, &lost), 1);
  expect_event(&out[0], 3);
  cr_assert_eq(lost, 0);
  free(ring);
}

Test(events, a_damaged_record_is_counted_lost_never_returned)
{
  void *ring = ring_new(SLOTS);
  put_n(ring, SLOTS, 1, 1);
  struct dir_event bad = event_of(2);
  bad.kind = 77;
  ev_put(ring, SLOTS, &bad);
  put_n(ring, SLOTS, 3, 1);
  struct dir_event out[4];
  uint64_t cursor = 1, lost = 0;
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 4, &lost), 2);
  cr_assert_eq(lost, 1);
  expect_event(&out[0], 1);
  expect_event(&out[1], 3);
  free(ring);
}

/* ---- a writer and readers at once ---- */

#define WRITES 200000u
#define READERS 2

struct race {
  void *ring;
  atomic_bool done;
  uint64_t read[READERS], lost[READERS];
  int bad[READERS];
};

struct reader_arg {
  struct race *r;
  int id;
};

static void *reader(void *arg)
{
  struct reader_arg *a = arg;
  struct race *r = a->r;
  uint64_t cursor = 1, prev = 0;
  struct dir_event out[8];
  for (;;) {
    bool last = atomic_load(&r->done);
    uint64_t lost = 0;
    size_t n = ev_read(r->ring, SLOTS, &cursor, out, 8, &lost);
    r->lost[a->id] += lost;
    for (size_t i = 0; i < n; i++) {
      struct dir_event want = event_of(out[i].seq);
      r->bad[a->id] += out[i].seq <= prev || strcmp(out[i].key, want.key) != 0 ||
                       out[i].nbytes != want.nbytes || out[i].cost_us != want.cost_us;
      prev = out[i].seq;
    }
    r->read[a->id] += n;
    if (last && n == 0 && lost == 0)
      return NULL;
  }
}

Test(events, readers_beside_the_writer_copy_whole_records_and_count_the_rest_lost, .timeout = 60)
{
  struct race r = {.ring = ring_new(SLOTS)};
  pthread_t t[READERS];
  struct reader_arg args[READERS];
  for (int i = 0; i < READERS; i++) {
    args[i] = (struct reader_arg){&r, i};
    cr_assert_eq(pthread_create(&t[i], NULL, reader, &args[i]), 0);
  }
  for (uint64_t i = 1; i <= WRITES; i++) {
    struct dir_event e = event_of(i);
    ev_put(r.ring, SLOTS, &e);
  }
  atomic_store(&r.done, true);
  for (int i = 0; i < READERS; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(r.bad[i], 0, "reader %d copied %d torn or out-of-order records", i, r.bad[i]);
    cr_assert_eq(r.read[i] + r.lost[i], WRITES, "reader %d: %llu read + %llu lost of %u", i,
                 (unsigned long long)r.read[i], (unsigned long long)r.lost[i], WRITES);
  }
  free(r.ring);
}
