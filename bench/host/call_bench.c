/* SPDX-License-Identifier: Apache-2.0 */
/*
 * call_bench.c - ecc-call-bench: the host time of one call through the
 * shim, for the calls a serving loop makes most (an empty poll, a one-entry
 * save, a stats read), on 1 and on several threads sharing one connector;
 * then a scheduler's question about a step's keys: peek of 32 keys against
 * what it would write without peek (lookup, then unpin what was found),
 * each call timed, as p50 and p99 per key.
 * Usage: ecc-call-bench [THREADS] [CALLS_PER_THREAD]   (defaults 4, 2000000)
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "ecc_host.h"

#define BS 256u
#define NB 1024u

enum call { CALL_POLL, CALL_STATS, CALL_SAVE, N_CALLS };
static const char *const names[N_CALLS] = {"poll (nothing ready)", "get_stats", "save (1 entry)"};

struct worker {
  ecc_connector_t *c;
  enum call call;
  uint64_t calls;
  pthread_barrier_t *start;
  int failed;
};

static void die(const char *what)
{
  fprintf(stderr, "ecc-call-bench: %s\n", what);
  exit(1);
}

/* A save only queues descriptors: the same block is saved again and again,
 * with a flush and a drain every 4096 saves so the queue stays small. */
static int one_call(struct worker *w, uint64_t i, ecc_save_entry_t *e)
{
  ecc_completion_t done[16];
  size_t n = 0;
  ecc_stats_t st = {.struct_size = sizeof(st)};
  switch (w->call) {
  case CALL_POLL:
    return ecc_poll(w->c, done, 16, &n);
  case CALL_STATS:
    return ecc_get_stats(w->c, &st);
  default:
    if (i % 4096 == 4095 && ecc_flush(w->c, NULL) != ECC_OK)
      return -1;
    if (i % 4096 == 4095)
      while (ecc_poll(w->c, done, 16, &n) == ECC_OK && n > 0)
        ;
    return ecc_save(w->c, e, 1);
  }
}

static void *work(void *arg)
{
  struct worker *w = arg;
  static char src[BS];
  uint32_t block = 0;
  ecc_save_entry_t e = {"bench", (uint64_t)(uintptr_t)src, BS, &block, 1};
  pthread_barrier_wait(w->start);
  for (uint64_t i = 0; i < w->calls; i++) {
    if (one_call(w, i, &e) != ECC_OK) {
      w->failed = 1;
      break;
    }
  }
  return NULL;
}

/* Nanoseconds per call, per thread, over `threads` threads calling at once. */
static double run(ecc_connector_t *c, enum call call, unsigned threads, uint64_t calls)
{
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, threads + 1);
  struct worker *w = calloc(threads, sizeof(*w));
  pthread_t *t = calloc(threads, sizeof(*t));
  if (w == NULL || t == NULL)
    die("out of memory");
  for (unsigned i = 0; i < threads; i++) {
    w[i] = (struct worker){.c = c, .call = call, .calls = calls, .start = &start};
    if (pthread_create(&t[i], NULL, work, &w[i]) != 0)
      die("pthread_create failed");
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = ecc_now_ns();
  for (unsigned i = 0; i < threads; i++)
    pthread_join(t[i], NULL);
  uint64_t ns = ecc_now_ns() - t0;
  for (unsigned i = 0; i < threads; i++)
    if (w[i].failed)
      die("a call failed");
  free(w);
  free(t);
  pthread_barrier_destroy(&start);
  return (double)ns / (double)calls;
}

static ecc_connector_t *open_connector(const char *name, const char *extra)
{
  char ini[256], text[1024], err[512] = "";
  snprintf(ini, sizeof(ini), "/tmp/ecc-call-bench-%ld.ini", (long)getpid());
  snprintf(text, sizeof(text),
           "[plugin]\nname = shm\n[region]\nname = %s%ld\nblock_size = %u\nsize = %u\n"
           "[engine]\ntype = host\n%s",
           name, (long)getpid(), BS, BS * NB, extra);
  /* 0600 whatever the umask: the host library refuses an INI others can write. */
  int fd = open(ini, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  size_t len = strlen(text);
  if (fd < 0 || fchmod(fd, 0600) != 0 || write(fd, text, len) != (ssize_t)len || close(fd) != 0)
    die("cannot write the INI file");
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  unlink(ini);
  if (rc != ECC_OK) {
    fprintf(stderr, "ecc-call-bench: %s\n", err);
    exit(1);
  }
  return c;
}

/* ---- peek against lookup + unpin ---- */

#define STEP_KEYS 32u
#define STEP_READY 24u /* of them found ready; the rest absent */
#define STEP_SAMPLES 20000u

static char step_keys[STEP_KEYS][32];
static const char *step_key_ptrs[STEP_KEYS];

/* STEP_READY of the step's keys stored (one block each), the rest absent. */
static void fill_step(ecc_connector_t *c)
{
  static char src[BS];
  for (unsigned i = 0; i < STEP_KEYS; i++) {
    snprintf(step_keys[i], sizeof(step_keys[i]), "image-%08u", i * 7919u);
    step_key_ptrs[i] = step_keys[i];
    if (i >= STEP_READY)
      continue;
    ecc_entry_t e;
    if (ecc_reserve(c, step_keys[i], BS, &e) != ECC_OK || e.state != ECC_ENTRY_RESERVED)
      die("reserve failed");
    ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, BS};
    ecc_completion_t done;
    size_t n = 0;
    if (ecc_save_reserved(c, &s, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK)
      die("save_reserved failed");
    while (ecc_poll(c, &done, 1, &n) == ECC_OK && n == 0)
      ;
  }
}

static int by_value(const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* One step's question the way a scheduler without peek asks it: pins taken
 * for the found keys, then given back. */
static int lookup_and_unpin(ecc_connector_t *c, ecc_entry_t *out)
{
  int rc = ecc_lookup(c, step_key_ptrs, STEP_KEYS, 1, out);
  for (unsigned i = 0; rc == ECC_OK && i < STEP_KEYS; i++)
    if (out[i].state == ECC_ENTRY_READY)
      rc = ecc_unpin(c, out[i].token);
  return rc;
}

/* p50 and p99 of one call over the step's keys, in ns per key. */
static void step_percentiles(ecc_connector_t *c, int peek, double *p50, double *p99)
{
  static uint64_t ns[STEP_SAMPLES];
  ecc_peek_t seen[STEP_KEYS];
  ecc_entry_t found[STEP_KEYS];
  for (unsigned i = 0; i < STEP_SAMPLES; i++) {
    uint64_t t0 = ecc_now_ns();
    int rc = peek ? ecc_peek(c, step_key_ptrs, STEP_KEYS, seen) : lookup_and_unpin(c, found);
    ns[i] = ecc_now_ns() - t0;
    if (rc != ECC_OK)
      die(peek ? "peek failed" : "lookup or unpin failed");
  }
  qsort(ns, STEP_SAMPLES, sizeof(ns[0]), by_value);
  *p50 = (double)ns[STEP_SAMPLES / 2] / STEP_KEYS;
  *p99 = (double)ns[(STEP_SAMPLES * 99) / 100] / STEP_KEYS;
}

static void step_bench(void)
{
  ecc_connector_t *c = open_connector("callbench-dir", "[directory]\nenabled = true\n");
  fill_step(c);
  double p50, p99, l50, l99;
  step_percentiles(c, 1, &p50, &p99); /* warm-up */
  step_percentiles(c, 1, &p50, &p99);
  step_percentiles(c, 0, &l50, &l99);
  printf("%-26s p50 %7.1f ns/key   p99 %7.1f ns/key   (%u keys, %u ready)\n", "peek", p50, p99,
         STEP_KEYS, STEP_READY);
  printf("%-26s p50 %7.1f ns/key   p99 %7.1f ns/key   (what a scheduler writes without peek)\n",
         "lookup + unpin", l50, l99);
  printf("peek: keys=%u p50_ns_per_key=%.1f p99_ns_per_key=%.1f lookup_unpin_p50_ns_per_key=%.1f\n",
         STEP_KEYS, p50, p99, l50);
  if (ecc_close(c) != ECC_OK)
    die("ecc_close failed");
}

int main(int argc, char **argv)
{
  unsigned threads = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 4;
  uint64_t calls = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000000;
  if (threads == 0 || calls == 0)
    die("usage: ecc-call-bench [THREADS] [CALLS_PER_THREAD]");
  ecc_connector_t *c = open_connector("callbench", "");
  printf("%-26s %12s %12s\n", "call", "1 thread", "threads");
  for (int k = 0; k < N_CALLS; k++) {
    run(c, (enum call)k, 1, calls / 10); /* warm-up */
    double one = run(c, (enum call)k, 1, calls);
    double many = run(c, (enum call)k, threads, calls);
    printf("%-26s %9.1f ns %9.1f ns   (%u threads)\n", names[k], one, many, threads);
  }
  if (ecc_close(c) != ECC_OK)
    die("ecc_close failed");
  step_bench();
  return 0;
}
