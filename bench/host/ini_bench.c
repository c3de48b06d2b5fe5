/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ini_bench.c - ecc-ini-bench: how the cost of reading an INI file grows with
 * its number of keys, through ecc_check, so that a cost growing faster than
 * the count shows as a ratio far above the ratio of the counts.
 *
 * For each count N it writes a file of N distinct keys followed by a
 * duplicate of the first one (the reader must see every key to find it),
 * and the same file without the duplicate checked with N overrides that
 * replace every key. Both stop before any plugin is loaded (the duplicate,
 * or a plugin name that does not exist), so only the INI reader is timed.
 * Usage: ecc-ini-bench [N...]   (default: 10000 100000)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "ecc_host.h"

#define REPS 3
#define KEY_CHARS 24

static char dir[64];
static char ini_path[128];

static double now_s(void)
{
  return (double)ecc_now_ns() * 1e-9;
}

static void key_name(char *buf, size_t i)
{
  snprintf(buf, KEY_CHARS, "k%07zu", i);
}

/* N keys under [bench], and with `dup` the first key again at the end. */
static int write_ini(size_t n, int dup)
{
  /* Writable by its owner alone whatever the umask, or the shim refuses it. */
  int fd = open(ini_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (f == NULL) {
    if (fd >= 0)
      close(fd);
    fprintf(stderr, "ecc-ini-bench: %s: %s\n", ini_path, strerror(errno));
    return -1;
  }
  char key[KEY_CHARS];
  fprintf(f, "[plugin]\nname = ecc-ini-bench-absent\n[bench]\n");
  for (size_t i = 0; i < n; i++) {
    key_name(key, i);
    fprintf(f, "%s = %zu\n", key, i);
  }
  if (dup)
    fprintf(f, "k0000000 = again\n");
  if (fclose(f) != 0) {
    fprintf(stderr, "ecc-ini-bench: %s: %s\n", ini_path, strerror(errno));
    return -1;
  }
  return 0;
}

/* Best of REPS ecc_check calls, in seconds; checks the expected failure. */
static double best_check(const ecc_open_options_t *opt, const char *want)
{
  double best = -1;
  char err[1024];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_s();
    int rc = ecc_check(ini_path, opt, NULL, err, sizeof(err));
    double t = now_s() - t0;
    if (rc != ECC_ERR_CONFIG || strstr(err, want) == NULL) {
      fprintf(stderr, "ecc-ini-bench: unexpected result %d: %s\n", rc, err);
      return -1;
    }
    if (best < 0 || t < best)
      best = t;
  }
  return best;
}

/* Overrides "bench.k..." replacing each of the n keys. */
static double best_overrides(size_t n)
{
  ecc_kv_t *kv = calloc(n, sizeof(*kv));
  char *names = calloc(n, KEY_CHARS + 6);
  if (kv == NULL || names == NULL) {
    free(kv);
    free(names);
    fprintf(stderr, "ecc-ini-bench: out of memory\n");
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char *name = names + i * (KEY_CHARS + 6);
    memcpy(name, "bench.", 6);
    key_name(name + 6, i);
    kv[i] = (ecc_kv_t){.key = name, .value = "replaced"};
  }
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = kv, .n_overrides = n, .log_level = ECC_LOG_ERROR};
  double t = best_check(&opt, "ecc-ini-bench-absent");
  free(kv);
  free(names);
  return t;
}

static int bench(size_t n)
{
  if (write_ini(n, 1) != 0)
    return -1;
  double dup = best_check(NULL, "duplicate key 'bench.k0000000'");
  if (dup < 0 || write_ini(n, 0) != 0)
    return -1;
  double ovr = best_overrides(n);
  if (ovr < 0)
    return -1;
  printf("%8zu keys: duplicate at the end %9.1f ms   every key overridden %9.1f ms\n", n, dup * 1e3,
         ovr * 1e3);
  return 0;
}

int main(int argc, char **argv)
{
  snprintf(dir, sizeof(dir), "/tmp/ecc-ini-bench-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    fprintf(stderr, "ecc-ini-bench: mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  snprintf(ini_path, sizeof(ini_path), "%s/bench.ini", dir);
  size_t defaults[] = {10000, 100000};
  int rc = 0;
  printf("best of %d ecc_check calls\n", REPS);
  for (int i = 1; rc == 0 && i < (argc > 1 ? argc : 3); i++) {
    size_t n = argc > 1 ? strtoul(argv[i], NULL, 10) : defaults[i - 1];
    rc = bench(n);
  }
  unlink(ini_path);
  rmdir(dir);
  return rc == 0 ? 0 : 1;
}
