/* SPDX-License-Identifier: Apache-2.0 */
/*
 * consumer.c - a program outside ecc, built against an installed ecc alone:
 * it opens a connector from an installed INI file through the installed
 * plugin, saves one entry, loads it back and compares every byte.
 *
 *     ecc_consumer CONFIG REGION_NAME
 *
 * The build passes CONSUMER_VERSION and CONSUMER_PLUGIN_DIR as it learnt
 * them: from the CMake package or from pkg-config.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ecc_host.h"

#define N_BLOCKS 4
#define WAIT_STEPS 20000 /* polls 100 us apart: 2 s */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("consumer: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

/* The connector's own settings win over the file's: a small region of this
 * run's own name, copied by the host engine (no GPU here). */
static int open_connector(const char *ini, const char *region, ecc_connector_t **c)
{
  ecc_kv_t
      overrides
          [] =
              {
                  {"region.name", region},        {"region.size", "1MiB"},
                  {"engine.type", "host"},        {"connector.role", "both"},
                  {"directory.enabled", "false"}, /* the block-id path; the directory has tests of its own */
              };
  ecc_open_options_t opt = {.struct_size = sizeof(opt),
                            .overrides = overrides,
                            .n_overrides = sizeof(overrides) / sizeof(overrides[0]),
                            .log_level = -1};
  char err[512];
  int rc = ecc_open(ini, &opt, c, err, sizeof(err));
  if (rc != ECC_OK)
    return fail("ecc_open: %s", err);
  return 0;
}

/* The plugin must be the installed one, of the library's version. */
static int check_plugin(ecc_connector_t *c, ecc_plugin_meta_t *meta)
{
  if (ecc_plugin_info(c, meta) != ECC_OK)
    return fail("ecc_plugin_info failed");
  char dir[PATH_MAX];
  if (realpath(CONSUMER_PLUGIN_DIR, dir) == NULL)
    return fail("the plugin directory %s cannot be resolved", CONSUMER_PLUGIN_DIR);
  size_t len = strlen(dir);
  if (strncmp(meta->path, dir, len) != 0 || meta->path[len] != '/')
    return fail("plugin %s is not in the installed plugin directory %s", meta->path, dir);
  if (strcmp(meta->version, ecc_version()) != 0)
    return fail("plugin version %s, library version %s", meta->version, ecc_version());
  return 0;
}

static int wait_one(ecc_connector_t *c, ecc_completion_t *done)
{
  struct timespec pause = {0, 100000};
  for (int i = 0; i < WAIT_STEPS; i++) {
    size_t n = 0;
    int rc = ecc_poll(c, done, 1, &n);
    if (rc != ECC_OK)
      return fail("ecc_poll: %s", ecc_strerror(rc));
    if (n == 1)
      return done->status == ECC_OK ? 0 : fail("completion: %s", ecc_strerror(done->status));
    nanosleep(&pause, NULL);
  }
  return fail("no completion within 2 s");
}

/* Save `n` bytes into the blocks, load them into a fresh buffer, compare. */
static int round_trip(ecc_connector_t *c, unsigned char *out, unsigned char *back, size_t n)
{
  static const uint32_t blocks[N_BLOCKS] = {5, 6, 2, 7};
  ecc_save_entry_t e = {"sha256:consumer", (uint64_t)(uintptr_t)out, n, blocks, N_BLOCKS};
  ecc_completion_t done;
  int rc = ecc_save(c, &e, 1);
  if (rc == ECC_OK)
    rc = ecc_flush(c, NULL);
  if (rc != ECC_OK)
    return fail("save: %s", ecc_strerror(rc));
  if (wait_one(c, &done) != 0)
    return 1;
  if (done.direction != ECC_DIR_SAVE || done.nbytes != n || strcmp(done.key, e.key) != 0)
    return fail("save completion: direction %u, %llu bytes, key '%s'", done.direction,
                (unsigned long long)done.nbytes, done.key);
  ecc_load_entry_t l = {42, blocks, N_BLOCKS, (uint64_t)(uintptr_t)back, n};
  rc = ecc_load(c, &l, 1, NULL);
  if (rc != ECC_OK)
    return fail("load: %s", ecc_strerror(rc));
  if (wait_one(c, &done) != 0)
    return 1;
  if (done.direction != ECC_DIR_LOAD || done.transfer_id != 42 || done.nbytes != n)
    return fail("load completion: direction %u, transfer %llu, %llu bytes", done.direction,
                (unsigned long long)done.transfer_id, (unsigned long long)done.nbytes);
  return memcmp(out, back, n) == 0 ? 0 : fail("the loaded bytes differ from the saved ones");
}

/* An entry that ends inside its last block, of a pattern that is not zero. */
static int move_entry(ecc_connector_t *c, size_t *moved)
{
  ecc_info_t info = {.struct_size = sizeof(info)};
  int rc = ecc_describe(c, &info);
  if (rc != ECC_OK)
    return fail("ecc_describe: %s", ecc_strerror(rc));
  if (info.num_blocks < 8)
    return fail("the region has %llu blocks, fewer than 8", (unsigned long long)info.num_blocks);
  size_t n = (size_t)info.block_size * (N_BLOCKS - 1) + (size_t)info.block_size / 2 + 1;
  unsigned char *out = malloc(n), *back = calloc(1, n);
  rc = out != NULL && back != NULL ? 0 : fail("out of memory");
  for (size_t i = 0; rc == 0 && i < n; i++)
    out[i] = (unsigned char)(i * 131 + 17);
  if (rc == 0)
    rc = round_trip(c, out, back, n);
  free(out);
  free(back);
  *moved = n;
  return rc;
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "usage: ecc_consumer CONFIG REGION_NAME\n");
    return 2;
  }
  if (strcmp(ecc_version(), CONSUMER_VERSION) != 0)
    return fail("the library says version %s, the build system %s", ecc_version(),
                CONSUMER_VERSION);
  ecc_connector_t *c = NULL;
  if (open_connector(argv[1], argv[2], &c) != 0)
    return 1;
  ecc_plugin_meta_t meta;
  size_t moved = 0;
  int rc = check_plugin(c, &meta);
  if (rc == 0)
    rc = move_entry(c, &moved);
  int closed = ecc_close(c);
  if (closed != ECC_OK)
    rc = fail("ecc_close: %s", ecc_strerror(closed));
  if (rc == 0)
    printf("consumer: libecc-host %s, plugin %s %s (%s): %zu bytes saved and loaded back, "
           "every byte matches\n",
           ecc_version(), meta.name, meta.version, meta.path, moved);
  return rc;
}
