/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_events.c - the residency-event ring (core/directory/events.h):
 * order and cursors, a reader lapped by the writer learns exactly how many
 * it lost, a record left half-written by a killed writer and a damaged one
 * are never returned, and readers on other threads copy whole records
 * while the writer goes on (the test ThreadSanitizer runs); then through
 * the directory: each kind of event from the call that makes it, with its
 * entry's key, bytes and cost, and a forked process reading them.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/directory/directory.h"
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

/* For every ring size, count written and cursor: the events lost are
 * exactly those the ring no longer holds from the cursor on, and the rest
 * follow them, whole and in order. */
Test(events, every_overrun_counts_exactly_the_events_lost)
{
  static const uint32_t sizes[] = {1, 2, 3, 8};
  struct dir_event out[32];
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    for (uint64_t written = 0; written <= 20; written++) {
      void *ring = ring_new(sizes[s]);
      put_n(ring, sizes[s], 1, written);
      for (uint64_t from = 1; from <= written + 1; from++) {
        uint64_t next = written + 1, oldest = next > sizes[s] ? next - sizes[s] : 1;
        uint64_t first = from < oldest ? oldest : from, cursor = from, lost = 99;
        size_t n = ev_read(ring, sizes[s], &cursor, out, 32, &lost);
        cr_assert_eq(lost, first - from, "%u slots, %llu written, cursor %llu: %llu lost", sizes[s],
                     (unsigned long long)written, (unsigned long long)from,
                     (unsigned long long)lost);
        cr_assert_eq(n, next - first);
        for (size_t i = 0; i < n; i++)
          expect_event(&out[i], first + i);
        cr_assert_eq(cursor, next);
      }
      free(ring);
    }
  }
}

/* The stamp of record `seq`: the first word of its record, records
 * following the ring's 64-byte head (as the half-written test finds it). */
static _Atomic uint64_t *stamp_of(void *ring, uint32_t slots, uint64_t seq)
{
  size_t record = (ev_bytes(slots) - 64) / slots;
  return (_Atomic uint64_t *)(void *)((char *)ring + 64 + (size_t)((seq - 1) % slots) * record);
}

/* A stamp that record's sequence number cannot have (memory overwritten):
 * lost, and the reader goes on past it; a stamp below the right one, read
 * as a write still to come, would hold every reader there for ever. */
Test(events, a_record_with_a_wrong_stamp_is_skipped_not_waited_for)
{
  void *ring = ring_new(SLOTS);
  put_n(ring, SLOTS, 1, 5);
  atomic_store(stamp_of(ring, SLOTS, 2), 0);
  atomic_store(stamp_of(ring, SLOTS, 4), 2 * 4 + 6);
  struct dir_event out[8];
  uint64_t cursor = 1, lost = 0;
  cr_assert_eq(ev_read(ring, SLOTS, &cursor, out, 8, &lost), 3);
  cr_assert_eq(lost, 2);
  expect_event(&out[0], 1);
  expect_event(&out[1], 3);
  expect_event(&out[2], 5);
  cr_assert_eq(cursor, 6, "the reader stopped at a damaged record");
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

/* ---- through the directory ---- */

static char why[512];

struct fx {
  void *mem;
  size_t bytes;
  struct dir_params p;
  struct dir d;
};

/* 16 blocks of 64 bytes in a MAP_SHARED mapping, so that forked children
 * share it. */
static void fx_open(struct fx *f)
{
  memset(f, 0, sizeof(*f));
  f->p = (struct dir_params){.num_blocks = 16, .block_size = 64, .event_slots = 64};
  f->bytes = dir_bytes(&f->p);
  cr_assert_gt(f->bytes, 0);
  f->mem = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(f->mem, MAP_FAILED);
  cr_assert_eq(dir_format(f->mem, f->bytes, &f->p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&f->d, f->mem, f->bytes, &f->p, why, sizeof(why)), ECC_OK, "%s", why);
}

static void fx_close(struct fx *f)
{
  cr_assert_eq(munmap(f->mem, f->bytes), 0);
}

static uint64_t realtime_ns(void)
{
  struct timespec ts;
  cr_assert_eq(clock_gettime(CLOCK_REALTIME, &ts), 0);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct dir_ref reserve_cost(struct dir *d, const char *key, uint64_t nbytes, uint64_t cost)
{
  struct dir_meta meta = {.cost_us = cost};
  struct dir_entry_info info;
  int outcome = -1;
  int rc = dir_reserve_ex(d, key, nbytes, &meta, &outcome, &info, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "reserve %s: %s", key, why);
  cr_assert_eq(outcome, DIR_RESERVED, "reserve %s: outcome %d", key, outcome);
  return info.ref;
}

static void store(struct dir *d, const char *key, uint64_t nbytes, uint64_t cost)
{
  struct dir_ref ref = reserve_cost(d, key, nbytes, cost);
  cr_assert_eq(dir_publish(d, ref, why, sizeof(why)), ECC_OK, "publish %s: %s", key, why);
}

/* Every event from the cursor on, none lost. */
static size_t events_since(struct dir *d, uint64_t *cursor, struct dir_event *out, size_t cap)
{
  size_t n = 0;
  uint64_t lost = 99;
  cr_assert_eq(dir_events(d, cursor, out, cap, &n, &lost), ECC_OK);
  cr_assert_eq(lost, 0);
  return n;
}

static void expect_told(const struct dir_event *e, uint32_t kind, const char *key, uint64_t nbytes,
                        uint64_t cost)
{
  cr_expect_eq(e->kind, kind, "event %llu on '%s': kind %u, want %u", (unsigned long long)e->seq,
               e->key, e->kind, kind);
  cr_expect_str_eq(e->key, key);
  cr_expect_eq(e->nbytes, nbytes, "'%s': %llu bytes", key, (unsigned long long)e->nbytes);
  cr_expect_eq(e->cost_us, cost, "'%s': cost %llu", key, (unsigned long long)e->cost_us);
}

/* A child that reserves `key` and dies before it publishes. */
static void reserve_in_dying_child(struct dir *d, const char *key, uint64_t nbytes, uint64_t cost)
{
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    struct dir_meta meta = {.cost_us = cost};
    int outcome = -1;
    int rc = dir_reserve_ex(d, key, nbytes, &meta, &outcome, NULL, NULL, 0);
    _exit(rc == ECC_OK && outcome == DIR_RESERVED ? 0 : 1);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child could not reserve '%s'", key);
}

Test(events, store_evict_remove_and_reclaim_each_tell_their_entry)
{
  struct fx f;
  fx_open(&f);
  uint64_t cursor = 0, t0 = realtime_ns();
  store(&f.d, "stored", 200, 11); /* 4 blocks */
  store(&f.d, "filler", 12 * 64, 22);
  /* A full region: 14 blocks in one run can only be had by evicting both. */
  struct dir_ref big = reserve_cost(&f.d, "big", 14 * 64, 33);
  cr_assert_eq(dir_publish(&f.d, big, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_remove(&f.d, "big", why, sizeof(why)), ECC_OK, "%s", why);
  reserve_in_dying_child(&f.d, "orphan", 100, 44);
  uint32_t freed = 0;
  cr_assert_eq(dir_reclaim(&f.d, &freed, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(freed, 1);
  uint64_t t1 = realtime_ns();

  struct dir_event ev[16];
  size_t n = events_since(&f.d, &cursor, ev, 16);
  cr_assert_eq(n, 7, "%zu events", n);
  expect_told(&ev[0], ECC_EVENT_STORED, "stored", 200, 11);
  expect_told(&ev[1], ECC_EVENT_STORED, "filler", 12 * 64, 22);
  bool stored_first = strcmp(ev[2].key, "stored") == 0; /* the order the hand met them */
  expect_told(&ev[stored_first ? 2 : 3], ECC_EVENT_EVICTED, "stored", 200, 11);
  expect_told(&ev[stored_first ? 3 : 2], ECC_EVENT_EVICTED, "filler", 12 * 64, 22);
  expect_told(&ev[4], ECC_EVENT_STORED, "big", 14 * 64, 33);
  expect_told(&ev[5], ECC_EVENT_REMOVED, "big", 14 * 64, 33);
  expect_told(&ev[6], ECC_EVENT_RECLAIMED, "orphan", 100, 44);
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(ev[i].seq, i + 1, "event %zu has seq %llu", i, (unsigned long long)ev[i].seq);
    cr_expect(ev[i].time_ns >= t0 && ev[i].time_ns <= t1, "event %zu at %llu, outside [%llu, %llu]",
              i, (unsigned long long)ev[i].time_ns, (unsigned long long)t0, (unsigned long long)t1);
    cr_expect(i == 0 || ev[i].time_ns >= ev[i - 1].time_ns, "event %zu is older than the last", i);
  }
  cr_assert_eq(cursor, 8);
  struct dir_counters c;
  cr_assert_eq(dir_get_counters(&f.d, &c), ECC_OK);
  cr_expect_eq(c.events, 7);
  /* An abort changes no residency: nothing is told. */
  struct dir_ref gone = reserve_cost(&f.d, "aborted", 64, 1);
  cr_assert_eq(dir_abort(&f.d, gone, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(events_since(&f.d, &cursor, ev, 16), 0, "an abort was told as an event");
  fx_close(&f);
}

Test(events, bad_arguments_are_refused_and_move_no_cursor)
{
  struct fx f;
  fx_open(&f);
  store(&f.d, "one", 64, 0);
  struct dir_event ev[2];
  uint64_t cursor = 1;
  size_t n = 7;
  cr_expect_eq(dir_events(&f.d, NULL, ev, 2, &n, NULL), ECC_ERR_INVALID);
  cr_expect_eq(n, 0);
  cr_expect_eq(dir_events(&f.d, &cursor, ev, 2, NULL, NULL), ECC_ERR_INVALID);
  cr_expect_eq(dir_events(&f.d, &cursor, NULL, 2, &n, NULL), ECC_ERR_INVALID);
  cr_expect_eq(cursor, 1, "a refused read moved the cursor");
  cr_expect_eq(dir_events(&f.d, &cursor, NULL, 0, &n, NULL), ECC_OK, "cap 0 needs no room");
  cr_expect_eq(cursor, 2);
  fx_close(&f);
}

#define FORKED_KEYS 6

/* The child takes its cursor from now, says so, then reads what the parent
 * stores after: every key in order, nothing lost. Its status says what
 * went wrong (10 start, 11 a read, 12 an event, 13 too few). */
static int read_in_child(struct dir *d, int ready_fd)
{
  uint64_t cursor = 0, lost = 0;
  size_t n = 0;
  struct dir_event ev[8];
  if (dir_events(d, &cursor, NULL, 0, &n, NULL) != ECC_OK || write(ready_fd, "r", 1) != 1)
    return 10;
  int seen = 0;
  for (int polls = 0; seen < FORKED_KEYS && polls < 50000; polls++) {
    if (dir_events(d, &cursor, ev, 8, &n, &lost) != ECC_OK || lost != 0)
      return 11;
    for (size_t i = 0; i < n; i++, seen++) {
      char want[32];
      snprintf(want, sizeof(want), "forked-%d", seen);
      if (ev[i].kind != ECC_EVENT_STORED || strcmp(ev[i].key, want) != 0 ||
          ev[i].nbytes != 10u + (unsigned)seen)
        return 12;
    }
    if (n == 0)
      usleep(100);
  }
  return seen == FORKED_KEYS ? 0 : 13;
}

Test(events, a_forked_reader_reads_what_its_parent_stores)
{
  struct fx f;
  fx_open(&f);
  store(&f.d, "before", 64, 0); /* before the child's cursor: not its to read */
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(99);
    _exit(read_in_child(&f.d, fds[1]));
  }
  char b;
  cr_assert_eq(read(fds[0], &b, 1), 1, "the child never said it was ready");
  for (int i = 0; i < FORKED_KEYS; i++) {
    char key[32];
    snprintf(key, sizeof(key), "forked-%d", i);
    store(&f.d, key, 10u + (unsigned)i, 0);
  }
  int st = 0;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "the reader did not exit");
  cr_assert_eq(WEXITSTATUS(st), 0,
               "the reader failed with %d (10 start, 11 read, 12 event, 13 "
               "too few)",
               WEXITSTATUS(st));
  close(fds[0]);
  close(fds[1]);
  fx_close(&f);
}
