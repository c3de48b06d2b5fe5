/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dir_region.c - every directory call on a region whose file was cut
 * short under it (below its directory, inside it, or below its blocks
 * only) answers ECC_ERR_REGION instead of touching pages that are gone
 * (SIGBUS), and shutdown then leaves the directory alone.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/region/region.h"
#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 32u
#define DIR_ON "[directory]\nenabled = true\n"

/* What the calls are given: tokens and blocks that were good before. */
struct live {
  uint64_t reservation, pin;
  uint32_t reserved_block, pinned_block;
};

static void publish(ecc_connector_t *c, const char *key, const void *src)
{
  ecc_entry_t r;
  cr_assert_eq(ecc_reserve(c, key, BS, &r), ECC_OK);
  ecc_save_reserved_t s = {r.token, (uint64_t)(uintptr_t)src, BS};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
}

static struct live prepare(ecc_connector_t *c, const void *src)
{
  struct live l;
  publish(c, "ready", src);
  publish(c, "spare", src);
  ecc_entry_t r, p;
  cr_assert_eq(ecc_reserve(c, "reserved", BS, &r), ECC_OK);
  const char *keys[1] = {"ready"};
  cr_assert_eq(ecc_lookup(c, keys, 1, 2, &p), ECC_OK);
  cr_assert_eq(p.state, ECC_ENTRY_READY);
  l.reservation = r.token;
  l.pin = p.token;
  l.reserved_block = r.extents[0].first_block;
  l.pinned_block = p.extents[0].first_block;
  /* Queued, never flushed: shutdown settles it. */
  ecc_entry_t q;
  cr_assert_eq(ecc_reserve(c, "queued", BS, &q), ECC_OK);
  ecc_save_reserved_t s = {q.token, (uint64_t)(uintptr_t)src, BS};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  return l;
}

/* The region's file cut to `size` bytes (a negative size counts from the
 * directory's end: -1 is halfway through it). */
static void cut(ecc_connector_t *c, long long size)
{
  const char *path = th_describe(c).region_path;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  struct region_header h;
  cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
  if (size < 0)
    size = REGION_HEADER_BYTES + (long long)h.dir_bytes / 2;
  cr_assert_eq(ftruncate(fd, (off_t)size), 0);
  close(fd);
}

static void expect_region(ecc_connector_t *c, const char *call, int rc)
{
  char err[512] = "";
  ecc_last_error(c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_REGION, "%s on a truncated region returned %d: %s", call, rc, err);
  cr_expect_not_null(strstr(err, "truncated"), "%s: '%s'", call, err);
}

static void every_call_is_refused(long long size)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, DIR_ON);
  static uint8_t src[BS], dst[BS];
  th_fill(src, BS, 4);
  struct live l = prepare(c, src);
  cut(c, size);

  ecc_entry_t e;
  const char *keys[1] = {"ready"};
  expect_region(c, "reserve", ecc_reserve(c, "new", BS, &e));
  ecc_save_reserved_t s = {l.reservation, (uint64_t)(uintptr_t)src, BS};
  expect_region(c, "save_reserved", ecc_save_reserved(c, &s, 1));
  expect_region(c, "abort_reserved", ecc_abort_reserved(c, l.reservation));
  expect_region(c, "lookup", ecc_lookup(c, keys, 1, 1, &e));
  ecc_load_pinned_t lp = {1, l.pin, (uint64_t)(uintptr_t)dst, BS};
  expect_region(c, "load_pinned", ecc_load_pinned(c, &lp, 1, NULL));
  expect_region(c, "unpin", ecc_unpin(c, l.pin));
  expect_region(c, "remove", ecc_remove(c, "spare"));
  uint64_t cursor = 0;
  ecc_listed_t listed[4];
  size_t n = 9;
  expect_region(c, "list", ecc_list(c, &cursor, listed, 4, &n));
  cr_expect_eq(n, 0);
  ecc_stats_t st = {.struct_size = sizeof(st)};
  expect_region(c, "stats", ecc_get_stats(c, &st));
  ecc_save_entry_t by_id = {"by-id", (uint64_t)(uintptr_t)src, BS, &l.reserved_block, 1};
  expect_region(c, "save by block ids", ecc_save(c, &by_id, 1));
  ecc_load_entry_t load_id = {2, &l.pinned_block, 1, (uint64_t)(uintptr_t)dst, BS};
  expect_region(c, "load by block ids", ecc_load(c, &load_id, 1, NULL));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* Copies that completed before the cut but were not polled: their records
 * say ECC_ERR_REGION, and settling them (a pin's rank, a publish) leaves
 * the directory alone. */
static void completions_are_refused(long long size)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, DIR_ON);
  static uint8_t src[BS], dst[BS];
  struct live l = prepare(c, src);
  ecc_load_pinned_t lp = {1, l.pin, (uint64_t)(uintptr_t)dst, BS};
  cr_assert_eq(ecc_load_pinned(c, &lp, 1, NULL), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK); /* the queued save */
  usleep(100 * 1000); /* the host engine's copies of 1 KiB are done long before */
  cut(c, size);
  ecc_completion_t done[2];
  cr_assert_eq(th_poll_until(c, done, 2, 5000), 2);
  cr_expect_eq(done[0].status, ECC_ERR_REGION);
  cr_expect_eq(done[1].status, ECC_ERR_REGION);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(dir_region, below_the_directory)
{
  every_call_is_refused(0);
  completions_are_refused(0);
}

Test(dir_region, inside_the_directory)
{
  every_call_is_refused(-1);
  completions_are_refused(-1);
}

Test(dir_region, below_the_blocks_only)
{
  ecc_connector_t *probe = th_open("both", th_region_name(), BS, NB, DIR_ON);
  long long whole = (long long)th_describe(probe).region_bytes;
  cr_assert_eq(ecc_close(probe), ECC_OK);
  every_call_is_refused(whole - BS);
  completions_are_refused(whole - BS);
}
