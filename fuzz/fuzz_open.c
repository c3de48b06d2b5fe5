/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_open.c - libFuzzer target: the input is an INI file, opened with
 * ecc_open in this process, so the bytes go through the shim's reader, the
 * resolution of [plugin] name, path and dir (with the ownership rule), the
 * loader's table checks, the key checks, and the plugin's create with the
 * host engine; a connector that opens moves one entry both ways and closes.
 *
 * Every region goes to one private directory (region.dir is overridden),
 * on a private 32 MiB tmpfs when this process may mount one (it runs in a
 * mount namespace of its own, so nothing outlives it); elsewhere region.size
 * is overridden too, to keep a region small.
 * Invariants besides "no crash": the status is of the closed set; the
 * error text is a non-empty C string naming where it comes from; an opened
 * connector's region is in the private directory and moves the bytes given;
 * after ecc_close nothing is left in that directory and no descriptor is
 * left open.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"

#define ERR_CAP 4096

static char ini_folder[64], ini_path[96], region_folder[64];
static int ini_fd = -1, fds_at_start;
static int small_tmpfs;

static void quiet(void *user, int level, const char *msg)
{
  (void)user;
  (void)level;
  if (msg == NULL || memchr(msg, '\0', 4096) == NULL)
    abort(); /* a log line must be a C string */
}

static int count_entries(const char *path)
{
  DIR *d = opendir(path);
  if (d == NULL) {
    fprintf(stderr, "fuzz_open: cannot list %s: %s\n", path, strerror(errno));
    abort();
  }
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

/* A tmpfs of our own, when we may: the fuzzer then chooses region sizes
 * freely and a full tmpfs is one more case to handle. */
static void private_tmpfs(void)
{
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return;
  small_tmpfs =
      mount("eccfuzz", region_folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=32m,mode=0700") == 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  snprintf(ini_folder, sizeof(ini_folder), "/dev/shm/eccfuzz-open-XXXXXX");
  snprintf(region_folder, sizeof(region_folder), "/dev/shm/eccfuzz-regions-XXXXXX");
  if (mkdtemp(ini_folder) == NULL || mkdtemp(region_folder) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  private_tmpfs();
  snprintf(ini_path, sizeof(ini_path), "%s/fuzz.ini", ini_folder);
  ini_fd = open(ini_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (ini_fd < 0) {
    perror(ini_path);
    exit(1);
  }
  /* `name = shm` finds the instrumented plugin without a dir line. */
  setenv("ECC_PLUGIN_DIR", FUZZ_PLUGIN_DIR, 1);
  /* libFuzzer reads the plugin's coverage counters after every input: it
   * must stay mapped, also after an ecc_open that refuses it. */
  if (dlopen(FUZZ_PLUGIN_DIR "/libecc-shm.so", RTLD_NOW | RTLD_NODELETE) == NULL) {
    fprintf(stderr, "fuzz_open: %s\n", dlerror());
    exit(1);
  }
  fds_at_start = -1;
  return 0;
}

static int known_status(int rc)
{
  return rc <= ECC_OK && rc >= ECC_ERR_UNSUPPORTED;
}

/* Where an error comes from: a line of the file, the file itself, the
 * plugin, an override, or the environment's plugin directory. */
static int names_its_source(const char *err)
{
  return strstr(err, ini_path) != NULL || strstr(err, "plugin") != NULL ||
         strstr(err, "override") != NULL || strstr(err, "ECC_PLUGIN_DIR") != NULL;
}

/* Polls until one completion arrives. A copy of at most 4 KiB that has not
 * finished after 10 s (a busy machine runs fuzzers side by side) is a hang. */
static void poll_one(ecc_connector_t *c, ecc_completion_t *done)
{
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    size_t got = 0;
    if (ecc_poll(c, done, 1, &got) != ECC_OK)
      abort();
    if (got == 1)
      return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec - t0.tv_sec > 10)
      abort();
    sched_yield();
  }
}

/* One entry saved and loaded back, where the role allows. */
static void use(ecc_connector_t *c)
{
  ecc_info_t info = {.struct_size = sizeof(info)};
  if (ecc_describe(c, &info) != ECC_OK)
    abort();
  if (strncmp(info.region_path, region_folder, strlen(region_folder)) != 0)
    abort(); /* a region outside the directory it was given */
  static uint8_t src[4096], dst[4096];
  uint64_t n = info.block_size < sizeof(src) ? info.block_size : sizeof(src);
  memset(src, 0xa5, n);
  uint32_t block = (uint32_t)(info.num_blocks - 1);
  ecc_save_entry_t s = {"fz", (uint64_t)(uintptr_t)src, n, &block, 1};
  ecc_load_entry_t l = {1, &block, 1, (uint64_t)(uintptr_t)dst, n};
  ecc_completion_t done;
  int saved = ecc_save(c, &s, 1) == ECC_OK && info.save_rank && ecc_flush(c, NULL) == ECC_OK;
  if (saved) {
    poll_one(c, &done);
    if (done.status != ECC_OK || strcmp(done.key, "fz") != 0)
      abort();
  }
  if (!saved || ecc_load(c, &l, 1, NULL) != ECC_OK)
    return; /* a producer-only or non-save rank connector: nothing to read back */
  poll_one(c, &done);
  if (done.status != ECC_OK || done.transfer_id != 1)
    abort();
  if (memcmp(src, dst, n) != 0)
    abort(); /* the bytes saved are not the bytes loaded */
}

static void open_once(char *err)
{
  ecc_kv_t force[2] = {{"region.dir", region_folder}, {"region.size", "64KiB"}};
  ecc_open_options_t o = {.struct_size = sizeof(o),
                          .overrides = force,
                          .n_overrides = small_tmpfs ? 1 : 2,
                          .log = quiet,
                          .log_level = ECC_LOG_DEBUG};
  memset(err, 0x5a, ERR_CAP); /* no NUL anywhere unless the shim writes one */
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini_path, &o, &c, err, ERR_CAP);
  if (!known_status(rc) || memchr(err, '\0', ERR_CAP) == NULL)
    abort();
  if ((rc == ECC_OK) != (c != NULL))
    abort();
  if (rc != ECC_OK && (err[0] == '\0' || !names_its_source(err)))
    abort();
  if (c != NULL) {
    use(c);
    if (ecc_close(c) != ECC_OK)
      abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (ftruncate(ini_fd, 0) != 0 || pwrite(ini_fd, data, size, 0) != (ssize_t)size)
    abort();
  static char err[ERR_CAP];
  open_once(err);
  if (count_entries(region_folder) != 0)
    abort(); /* a region, or its temporary file, outlived its connector */
  /* The first input loads the plugin for good; count descriptors after it.
   * Run with -print_funcs=0 (scripts/fuzz.sh does): otherwise libFuzzer
   * starts a symbolizer for each new function, and its pipes count here. */
  int fds = count_entries("/proc/self/fd");
  if (fds_at_start < 0)
    fds_at_start = fds;
  else if (fds != fds_at_start)
    abort(); /* a descriptor leaked */
  return 0;
}
