/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loop.c - open/use/close cycles of the real plugin through the shim. Each
 * cycle opens a connector from an INI file, saves, flushes and polls one
 * small entry, loads it back, checks the bytes and closes (the plugin stays
 * loaded once it has made a connector). Afterwards no region file,
 * descriptor or thread may be left.
 * ctest runs it plainly; scripts/valgrind.sh runs it under memcheck.
 * Usage: ecc_open_loop [CYCLES]   (default 1000)
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"

#define BS 4096u
#define ROWS 3u

static int count_entries(const char *dir)
{
  DIR *d = opendir(dir);
  if (d == NULL)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

static int fail(const char *what, int cycle, int rc, const char *detail)
{
  fprintf(stderr, "ecc_open_loop: cycle %d: %s failed (%d): %s\n", cycle, what, rc,
          detail != NULL ? detail : ecc_strerror(rc));
  return 1;
}

/* Polls until one completion arrives; 10 s at most. */
static int wait_one(ecc_connector_t *c, ecc_completion_t *out)
{
  for (int spins = 0; spins < 100000; spins++) {
    size_t n = 0;
    int rc = ecc_poll(c, out, 1, &n);
    if (rc != ECC_OK)
      return rc;
    if (n == 1)
      return out->status;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return ECC_ERR_TRANSFER;
}

static int one_cycle(const char *ini, const char *dir, int cycle)
{
  static unsigned char src[ROWS * BS - 100], dst[ROWS * BS];
  for (size_t i = 0; i < sizeof(src); i++)
    src[i] = (unsigned char)(i * 7 + (size_t)cycle);
  char err[1024] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  if (rc != ECC_OK)
    return fail("ecc_open", cycle, rc, err);
  uint32_t ids[ROWS] = {5, 6, 2};
  char key[32];
  snprintf(key, sizeof(key), "cycle-%d", cycle);
  ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)src, sizeof(src), ids, ROWS};
  ecc_completion_t done;
  if ((rc = ecc_save(c, &s, 1)) != ECC_OK || (rc = ecc_flush(c, NULL)) != ECC_OK ||
      (rc = wait_one(c, &done)) != ECC_OK || strcmp(done.key, key) != 0)
    return fail("save", cycle, rc, NULL);
  memset(dst, 0, sizeof(dst));
  ecc_load_entry_t l = {(uint64_t)cycle, ids, ROWS, (uint64_t)(uintptr_t)dst, sizeof(src)};
  if ((rc = ecc_load(c, &l, 1, NULL)) != ECC_OK || (rc = wait_one(c, &done)) != ECC_OK ||
      done.transfer_id != (uint64_t)cycle)
    return fail("load", cycle, rc, NULL);
  if (memcmp(src, dst, sizeof(src)) != 0)
    return fail("compare", cycle, 0, "the loaded bytes differ from the saved ones");
  ecc_stats_t st = {.struct_size = sizeof(st)};
  if ((rc = ecc_get_stats(c, &st)) != ECC_OK || st.save.entries != 1 || st.load.entries != 1)
    return fail("stats", cycle, rc, NULL);
  if ((rc = ecc_close(c)) != ECC_OK)
    return fail("ecc_close", cycle, rc, NULL);
  if (count_entries(dir) != 0)
    return fail("cleanup", cycle, 0, "a file is left in the region directory");
  return 0;
}

static int write_ini(char *path, size_t cap, const char *dir)
{
  snprintf(path, cap, "/tmp/ecc-open-loop-XXXXXX.ini");
  int fd = mkstemps(path, 4);
  if (fd < 0)
    return -1;
  FILE *f = fdopen(fd, "w");
  if (f == NULL) {
    close(fd);
    return -1;
  }
  fprintf(f,
          "[plugin]\npath = %s\nlog_level = error\n"
          "[region]\ndir = %s\nname = loop\nblock_size = %u\nsize = 64KiB\n"
          "[engine]\ntype = host\nhost_threads = 1\n",
          ECC_PLUGIN_PATH, dir, BS);
  return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
  int cycles = argc > 1 ? atoi(argv[1]) : 1000;
  if (cycles <= 0) {
    fprintf(stderr, "usage: ecc_open_loop [CYCLES]\n");
    return 2;
  }
  char dir[] = "/dev/shm/eccloop-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("ecc_open_loop: mkdtemp");
    return 1;
  }
  char ini[64];
  if (write_ini(ini, sizeof(ini), dir) != 0) {
    perror("ecc_open_loop: writing the INI file");
    rmdir(dir);
    return 1;
  }
  /* Counted after the first cycle: a sanitizer runtime starts a thread of
   * its own with the first pthread_create. A leak repeats every cycle. */
  int rc = one_cycle(ini, dir, 0);
  int fds = count_entries("/proc/self/fd");
  int threads = count_entries("/proc/self/task");
  for (int i = 1; i < cycles && rc == 0; i++)
    rc = one_cycle(ini, dir, i);
  if (rc == 0 && count_entries("/proc/self/fd") != fds)
    rc = fail("end", cycles, 0, "file descriptors were leaked");
  if (rc == 0 && count_entries("/proc/self/task") != threads)
    rc = fail("end", cycles, 0, "threads outlived their connector");
  unlink(ini);
  if (rmdir(dir) != 0 && rc == 0)
    rc = fail("end", cycles, 0, strerror(errno));
  if (rc == 0)
    printf("ecc_open_loop: %d open/save/load/close cycles, nothing left behind\n", cycles);
  return rc;
}
