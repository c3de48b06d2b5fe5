/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_stampede.c - the stampede scenario of ecc-dir-bench (dir_stampede.h).
 * Each round, every process asks for the same K cold keys in the same
 * order, starting together at a barrier: the first to reserve a key
 * "encodes" it (sleeps ENCODE_NS), notes the time and publishes it; the
 * others find it being written and sleep in dir_wait. A waiter's wake
 * latency is the time its dir_wait returned minus that publish time.
 * The line printed says how many encodes there were (single flight:
 * exactly K per round), how many waits slept, and the p50 and p99 wake.
 * The same run again with waiters that do what a host without dir_wait
 * writes, a lookup every POLL_NS until the key is there, gives the
 * comparison line; without single flight at all (upstream's connector
 * keeps no shared index) every process encodes every key: procs x K.
 */
#include "bench/host/dir_stampede.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "core/directory/directory.h"

#define ST_BLOCK 4096u
#define ST_BLOCKS 65536u
#define ST_ENTRY_BLOCKS 64u
#define ENCODE_NS 2000000ull
#define MAX_PROCS 64u
#define MAX_KEYS 4096u
#define POLL_NS 1000000ull

/* What every process shares, after the directory in one mapping. */
struct shared {
  pthread_barrier_t start;
  _Atomic uint64_t published_ns[MAX_KEYS]; /* per key of all rounds */
  _Atomic uint64_t encodes, found_ready, failures;
  _Atomic uint64_t n_wakes;
  uint32_t wake_ns[]; /* one per wait that ended ready */
};

struct stampede {
  void *mem;
  size_t dir_bytes, total;
  struct dir_params p;
  struct shared *sh;
  unsigned procs, keys, rounds;
  bool poll; /* waiters look up every POLL_NS instead of dir_wait */
};

static void key_of(unsigned round, unsigned k, char *buf, size_t cap)
{
  snprintf(buf, cap, "stampede-r%u-image-%05u", round, k);
}

static void sleep_ns(uint64_t ns)
{
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

/* The key is this process's to encode: the encoder's time, then publish. */
static void encode_and_publish(struct stampede *s, struct dir *d, struct dir_ref ref, unsigned slot)
{
  char why[256];
  sleep_ns(ENCODE_NS);
  atomic_store(&s->sh->published_ns[slot], ecc_now_ns());
  if (dir_publish(d, ref, why, sizeof(why)) != ECC_OK)
    atomic_fetch_add(&s->sh->failures, 1);
  atomic_fetch_add(&s->sh->encodes, 1);
}

/* Another process encodes it: sleep until its publish, then give the pin
 * back as a load's completion would. */
/* What a host without dir_wait does: look the key up until it is there. */
static int poll_for(struct dir *d, const char *key, int *result, struct dir_pin_ref *pin)
{
  char why[256];
  const char *keys[1] = {key};
  bool found = false;
  for (uint64_t deadline = ecc_now_ns() + 5000000000ull; ecc_now_ns() < deadline;) {
    int rc = dir_lookup(d, keys, 1, 1, &found, NULL, pin, why, sizeof(why));
    if (rc != ECC_OK || found) {
      *result = DIR_WAIT_READY;
      return rc;
    }
    sleep_ns(POLL_NS);
  }
  return ECC_OK;
}

static void wait_for(struct stampede *s, struct dir *d, const char *key, unsigned slot)
{
  char why[256];
  int result = DIR_WAIT_TIMEOUT;
  struct dir_pin_ref pin;
  int rc = s->poll ? poll_for(d, key, &result, &pin)
                   : dir_wait(d, key, 1, 5000000000ull, &result, NULL, &pin, why, sizeof(why));
  uint64_t woke = ecc_now_ns();
  if (rc != ECC_OK || result != DIR_WAIT_READY) {
    atomic_fetch_add(&s->sh->failures, 1);
    return;
  }
  uint64_t pub = atomic_load(&s->sh->published_ns[slot]);
  uint64_t i = atomic_fetch_add(&s->sh->n_wakes, 1);
  s->sh->wake_ns[i] = woke > pub ? (uint32_t)(woke - pub) : 0;
  if (dir_unpin(d, pin, why, sizeof(why)) != ECC_OK)
    atomic_fetch_add(&s->sh->failures, 1);
}

static void ask(struct stampede *s, struct dir *d, unsigned round, unsigned k)
{
  char key[64], why[256];
  key_of(round, k, key, sizeof(key));
  int outcome = DIR_FOUND_READY;
  struct dir_entry_info info;
  unsigned slot = round * s->keys + k;
  if (dir_reserve(d, key, (uint64_t)ST_ENTRY_BLOCKS * ST_BLOCK, &outcome, &info, why,
                  sizeof(why)) != ECC_OK) {
    atomic_fetch_add(&s->sh->failures, 1);
    return;
  }
  if (outcome == DIR_RESERVED)
    encode_and_publish(s, d, info.ref, slot);
  else if (outcome == DIR_FOUND_WRITING)
    wait_for(s, d, key, slot);
  else
    atomic_fetch_add(&s->sh->found_ready, 1);
}

static int child(struct stampede *s)
{
  struct dir d;
  char why[256];
  if (dir_attach(&d, s->mem, s->dir_bytes, &s->p, why, sizeof(why)) != ECC_OK) {
    fprintf(stderr, "stampede: attach: %s\n", why);
    return 1;
  }
  for (unsigned r = 0; r < s->rounds; r++) {
    pthread_barrier_wait(&s->sh->start);
    for (unsigned k = 0; k < s->keys; k++)
      ask(s, &d, r, k);
  }
  return 0;
}

static int map_shared(struct stampede *s)
{
  s->p = (struct dir_params){.num_blocks = ST_BLOCKS, .block_size = ST_BLOCK};
  s->dir_bytes = (dir_bytes(&s->p) + 63) / 64 * 64;
  uint64_t waits = (uint64_t)s->procs * s->keys * s->rounds;
  s->total = s->dir_bytes + sizeof(struct shared) + waits * sizeof(uint32_t);
  s->mem = mmap(NULL, s->total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (s->mem == MAP_FAILED)
    return -1;
  char why[256];
  if (dir_format(s->mem, s->dir_bytes, &s->p, why, sizeof(why)) != ECC_OK) {
    fprintf(stderr, "stampede: format: %s\n", why);
    return -1;
  }
  s->sh = (struct shared *)((char *)s->mem + s->dir_bytes);
  pthread_barrierattr_t a;
  pthread_barrierattr_init(&a);
  pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  int rc = pthread_barrier_init(&s->sh->start, &a, s->procs);
  pthread_barrierattr_destroy(&a);
  return rc == 0 ? 0 : -1;
}

static int cmp_u32(const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static double pct_us(const uint32_t *v, uint64_t n, double q)
{
  if (n == 0)
    return 0.0;
  uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);
  return (double)v[i] / 1000.0;
}

static int report(struct stampede *s)
{
  struct dir d;
  struct dir_counters k;
  char why[256];
  if (dir_attach(&d, s->mem, s->dir_bytes, &s->p, why, sizeof(why)) != ECC_OK ||
      dir_get_counters(&d, &k) != ECC_OK)
    return -1;
  uint64_t n = atomic_load(&s->sh->n_wakes);
  qsort(s->sh->wake_ns, n, sizeof(uint32_t), cmp_u32);
  unsigned keys = s->keys * s->rounds;
  printf("%s: procs=%u keys=%u encodes=%" PRIu64 " waits=%" PRIu64
         " wake_p50_us=%.1f wake_p99_us=%.1f\n",
         s->poll ? "stampede_lookup_every_1ms" : "stampede", s->procs, keys,
         atomic_load(&s->sh->encodes), s->poll ? n : k.waits, pct_us(s->sh->wake_ns, n, 0.50),
         pct_us(s->sh->wake_ns, n, 0.99));
  if (s->poll)
    printf("  (without a shared index, as upstream's connector: encodes=%u)\n", keys * s->procs);
  else
    printf("  (%u rounds of %u cold keys, encode %.1f ms each; %" PRIu64 " asks found the key "
           "ready, %" PRIu64 " waits ended ready, %" PRIu64 " failures; targets: encodes = keys, "
           "wake p99 <= 100 us)\n",
           s->rounds, s->keys, (double)ENCODE_NS / 1e6, atomic_load(&s->sh->found_ready), n,
           atomic_load(&s->sh->failures));
  return atomic_load(&s->sh->failures) == 0 ? 0 : -1;
}

static int stampede_once(unsigned procs, unsigned keys, unsigned rounds, bool poll)
{
  struct stampede s = {.procs = procs, .keys = keys, .rounds = rounds, .poll = poll};
  if (procs == 0 || procs > MAX_PROCS || keys == 0 || (uint64_t)keys * rounds > MAX_KEYS ||
      map_shared(&s) != 0)
    return -1;
  pid_t pids[MAX_PROCS];
  unsigned started = 0;
  for (; started < procs; started++) {
    pids[started] = fork();
    if (pids[started] < 0)
      break;
    if (pids[started] == 0)
      _exit(child(&s));
  }
  int ok = started == procs;
  for (unsigned i = 0; i < started; i++) {
    int status;
    ok &= waitpid(pids[i], &status, 0) == pids[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  int rc = ok ? report(&s) : -1;
  munmap(s.mem, s.total);
  return rc;
}

int stampede_run(unsigned procs, unsigned keys, unsigned rounds)
{
  int rc = stampede_once(procs, keys, rounds, false);
  return rc == 0 ? stampede_once(procs, keys, rounds, true) : rc;
}
