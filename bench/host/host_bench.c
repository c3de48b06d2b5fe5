/* SPDX-License-Identifier: Apache-2.0 */
/*
 * host_bench.c - ecc-host-bench: how fast the host engine moves a step's
 * entries, against memcpy of the same bytes on this machine, in one run.
 *
 * For each block size and layout it saves a batch of entries into the
 * region and loads it back through the real shim and plugin, timing from
 * flush/load to the poll that reports the batch, and compares with one
 * memcpy of the same bytes (the limit) and a memcpy per descriptor on one
 * thread (what a naive loop does). Every byte is checked before timing.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "ecc_host.h"

#define REPS 15
#define STEP_BYTES (64ull << 20) /* bytes per timed step */

static double now_s(void)
{
  return (double)ecc_now_ns() * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y);
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t v = x | 0x0101010101010101ull;
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

enum layout { CONTIGUOUS, FRAGMENTED, SCATTERED };
static const char *const layout_names[] = {"contiguous", "fragmented", "scattered"};

/* Block ids for `n` blocks out of `total` in the given layout. */
static void make_ids(uint32_t *ids, uint32_t n, uint32_t total, enum layout l, unsigned *seed)
{
  if (l == CONTIGUOUS) {
    for (uint32_t i = 0; i < n; i++)
      ids[i] = i;
    return;
  }
  /* Scattered: a random permutation of all blocks. Fragmented: runs of
   * 1-16 blocks, each at the start of a distinct random 16-block group. */
  uint32_t items = l == SCATTERED ? total : total / 16;
  uint32_t *perm = malloc(sizeof(uint32_t) * items);
  for (uint32_t i = 0; i < items; i++)
    perm[i] = i;
  for (uint32_t i = items - 1; i > 0; i--) {
    uint32_t j = (uint32_t)rand_r(seed) % (i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  if (l == SCATTERED) {
    memcpy(ids, perm, sizeof(uint32_t) * n);
  } else {
    uint32_t k = 0;
    for (uint32_t r = 0; k < n && r < items; r++) {
      uint32_t len = 1 + (uint32_t)rand_r(seed) % 16;
      for (uint32_t i = 0; i < len && k < n; i++)
        ids[k++] = perm[r] * 16 + i;
    }
  }
  free(perm);
}

static ecc_connector_t *open_host(uint64_t block, uint32_t blocks, unsigned threads)
{
  char path[] = "/tmp/ecc-host-bench-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    return NULL;
  char text[1024];
  int len = snprintf(text, sizeof(text),
                     "[plugin]\nname = shm\n[region]\nname = hostbench-%ld\nblock_size = %llu\n"
                     "size = %llu\nmode = create\n[engine]\ntype = host\nhost_threads = %u\n",
                     (long)getpid(), (unsigned long long)block, (unsigned long long)block * blocks,
                     threads);
  if (write(fd, text, (size_t)len) != len) {
    close(fd);
    unlink(path);
    return NULL;
  }
  close(fd);
  ecc_connector_t *c = NULL;
  char err[512];
  int rc = ecc_open(path, NULL, &c, err, sizeof(err));
  unlink(path);
  if (rc != ECC_OK)
    fprintf(stderr, "ecc-host-bench: %s\n", err);
  return c;
}

static int wait_for(ecc_connector_t *c, size_t want)
{
  ecc_completion_t done[64];
  size_t got = 0;
  while (got < want) {
    size_t n = 0;
    if (ecc_poll(c, done, 64, &n) != ECC_OK)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (done[i].status != ECC_OK)
        return -1;
    got += n;
    if (n == 0)
      sched_yield(); /* leave the cores to the copy threads */
  }
  return 0;
}

struct row {
  double save, load, limit, naive;
};

/* One block size and layout: entries of `per` blocks filling STEP_BYTES. */
static int run_case(ecc_connector_t *c, uint64_t block, uint32_t total, enum layout l,
                    struct row *out)
{
  uint32_t n_blocks = (uint32_t)(STEP_BYTES / block);
  uint32_t per = n_blocks < 880 ? n_blocks : 880; /* one image: 880 tokens */
  uint32_t n_entries = n_blocks / per;
  n_blocks = n_entries * per;
  uint64_t bytes = (uint64_t)n_blocks * block;
  uint32_t *ids = malloc(sizeof(uint32_t) * n_blocks);
  uint8_t *src = malloc(bytes), *dst = malloc(bytes), *flat = malloc(bytes);
  uint8_t *reg = malloc((uint64_t)total * block); /* stand-in region for the naive loop */
  ecc_save_entry_t *se = calloc(n_entries, sizeof(*se));
  ecc_load_entry_t *le = calloc(n_entries, sizeof(*le));
  char(*keys)[32] = calloc(n_entries, 32);
  if (!ids || !src || !dst || !flat || !reg || !se || !le || !keys)
    return -1;
  unsigned seed = 12345u + (unsigned)block + (unsigned)l;
  make_ids(ids, n_blocks, total, l, &seed);
  fill(src, bytes, block + (uint64_t)l);
  memset(dst, 0x5a, bytes);
  memset(flat, 0x5a, bytes);
  memset(reg, 0x5a, (uint64_t)total * block);
  for (uint32_t e = 0; e < n_entries; e++) {
    snprintf(keys[e], 32, "e%u", e);
    se[e] = (ecc_save_entry_t){keys[e], (uint64_t)(uintptr_t)(src + (uint64_t)e * per * block),
                               (uint64_t)per * block, ids + (uint64_t)e * per, per};
    le[e] = (ecc_load_entry_t){e, ids + (uint64_t)e * per, per,
                               (uint64_t)(uintptr_t)(dst + (uint64_t)e * per * block),
                               (uint64_t)per * block};
  }
  double ts[REPS], tl[REPS], tm[REPS], tn[REPS];
  for (int r = -2; r < REPS; r++) { /* two warm-up rounds */
    double t0 = now_s();
    if (ecc_save(c, se, n_entries) != ECC_OK || ecc_flush(c, NULL) != ECC_OK ||
        wait_for(c, n_entries) != 0)
      return -1;
    double t1 = now_s();
    if (ecc_load(c, le, n_entries, NULL) != ECC_OK || wait_for(c, n_entries) != 0)
      return -1;
    double t2 = now_s();
    if (r == -2 && memcmp(src, dst, bytes) != 0) {
      fprintf(stderr, "ecc-host-bench: round trip mismatch at block %llu %s\n",
              (unsigned long long)block, layout_names[l]);
      return -1;
    }
    double t3 = now_s();
    memcpy(flat, src, bytes);
    double t4 = now_s();
    /* One memcpy per block into the same blocks, one thread: the loop an
     * engine replaces. */
    for (uint32_t i = 0; i < n_blocks; i++)
      memcpy(reg + (uint64_t)ids[i] * block, src + (uint64_t)i * block, block);
    double t5 = now_s();
    if (r >= 0) {
      ts[r] = t1 - t0;
      tl[r] = t2 - t1;
      tm[r] = t4 - t3;
      tn[r] = t5 - t4;
    }
  }
  out->save = (double)bytes / median(ts, REPS) / 1e9;
  out->load = (double)bytes / median(tl, REPS) / 1e9;
  out->limit = (double)bytes / median(tm, REPS) / 1e9;
  out->naive = (double)bytes / median(tn, REPS) / 1e9;
  free(ids);
  free(src);
  free(dst);
  free(flat);
  free(reg);
  free(se);
  free(le);
  free(keys);
  return 0;
}

int main(int argc, char **argv)
{
  static const uint64_t sizes[] = {3072, 16384, 262144, 2097152};
  unsigned threads = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
  printf("ecc-host-bench: host engine, %llu MiB per step, median of %d, threads %s\n",
         (unsigned long long)(STEP_BYTES >> 20), REPS, threads ? argv[1] : "auto");
  printf("%-9s %-11s %9s %9s %9s %9s %8s %8s\n", "block", "layout", "save", "load", "memcpy",
         "per-desc", "save/mc", "load/mc");
  int failed = 0;
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    uint32_t total = (uint32_t)((STEP_BYTES * 4) / sizes[s]); /* room for fragmented runs */
    ecc_connector_t *c = open_host(sizes[s], total, threads);
    if (c == NULL)
      return 1;
    for (int l = CONTIGUOUS; l <= SCATTERED; l++) {
      struct row r;
      if (run_case(c, sizes[s], total, (enum layout)l, &r) != 0) {
        failed = 1;
        continue;
      }
      printf("%-9llu %-11s %8.2f  %8.2f  %8.2f  %8.2f  %7.0f%% %7.0f%%\n",
             (unsigned long long)sizes[s], layout_names[l], r.save, r.load, r.limit, r.naive,
             100 * r.save / r.limit, 100 * r.load / r.limit);
    }
    ecc_close(c);
  }
  printf("GB/s = 1e9 bytes/s; memcpy = one memcpy of the step's bytes (the limit);\n"
         "per-desc = one memcpy per block to the same block layout, one thread.\n"
         "save and load time run from the save/load call (descriptors built\n"
         "included) to the poll that reports the batch.\n");
  return failed;
}
