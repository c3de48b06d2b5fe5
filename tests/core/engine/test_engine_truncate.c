/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_truncate.c - host-engine copies in flight while the region
 * file is truncated under them, to each kind of size: every one is reported
 * failed (never ECC_OK over bytes that are gone), nothing dies of SIGBUS,
 * and a save never grows the truncated file back.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/region/region.h"
#include "ecc_host.h"
#include "tests/helpers.h"

#define BS (1u << 20)
#define NB 32u

static char rdir[64];
static uint8_t *src, *dst;

static void setup(void)
{
#ifdef __SANITIZE_THREAD__
  /* ThreadSanitizer takes over SIGBUS and SIGSEGV delivery and the jump out
   * of the guarded copy does not survive it; the guard is tested in the
   * normal and the ASan/UBSan builds. */
  cr_skip_test("the copy guard's jump is not supported under ThreadSanitizer");
#endif
  snprintf(rdir, sizeof(rdir), "/dev/shm/ecctrunc-XXXXXX");
  cr_assert_not_null(mkdtemp(rdir), "mkdtemp: %s", strerror(errno));
  src = malloc((size_t)BS * NB);
  dst = malloc((size_t)BS * NB);
  cr_assert(src != NULL && dst != NULL);
  th_fill(src, (size_t)BS * NB, 17);
  memset(dst, 0, (size_t)BS * NB);
}

static void teardown(void)
{
  th_remove_tree(rdir);
  free(src);
  free(dst);
}

TestSuite(truncate, .init = setup, .fini = teardown, .timeout = 120);

static uint32_t ids[NB];

static ecc_save_entry_t whole_entry(const char *key)
{
  for (uint32_t i = 0; i < NB; i++)
    ids[i] = i;
  ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src, (uint64_t)BS * NB, ids, NB};
  return e;
}

/* A connector whose region holds one entry of every block, saved and
 * reported; its file's path in `path`. */
static ecc_connector_t *open_filled(char *path, size_t cap)
{
  const char *ini = th_ini_at(rdir, "both", th_region_name(), BS, NB, NULL, NULL);
  ecc_connector_t *c = th_open_as(ini, "both");
  snprintf(path, cap, "%s", th_describe(c).region_path);
  ecc_save_entry_t e = whole_entry("all");
  cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 10000), 1);
  cr_assert_eq(done.status, ECC_OK);
  return c;
}

static off_t size_of(const char *path)
{
  struct stat st;
  cr_assert_eq(stat(path, &st), 0, "%s: %s", path, strerror(errno));
  return st.st_size;
}

/* Sizes below the blocks' end: nothing, the header page, half the blocks,
 * all but the last page. */
static off_t cut_at(int k)
{
  off_t total = (off_t)REGION_HEADER_BYTES + (off_t)BS * NB;
  const off_t cuts[] = {0, REGION_HEADER_BYTES, REGION_HEADER_BYTES + (off_t)BS * NB / 2,
                        total - 4096};
  return cuts[k];
}

#define CUTS 4

Test(truncate, a_load_in_flight_fails_without_sigbus_at_every_size)
{
  for (int k = 0; k < CUTS; k++) {
    char path[256];
    ecc_connector_t *c = open_filled(path, sizeof(path));
    ecc_load_entry_t e = {1, ids, NB, (uint64_t)(uintptr_t)dst, (uint64_t)BS * NB};
    cr_assert_eq(ecc_load(c, &e, 1, NULL), ECC_OK);
    cr_assert_eq(truncate(path, cut_at(k)), 0, "truncate: %s", strerror(errno));
    ecc_completion_t done;
    cr_assert_eq(th_poll_until(c, &done, 1, 10000), 1, "cut %d: no completion", k);
    cr_expect_eq(done.status, ECC_ERR_REGION, "cut to %lld bytes: a load reported %d",
                 (long long)cut_at(k), done.status);
    cr_expect_eq(size_of(path), cut_at(k));
    cr_assert_eq(ecc_close(c), ECC_OK);
  }
}

Test(truncate, a_save_in_flight_fails_and_never_grows_the_file_back)
{
  for (int k = 0; k < CUTS; k++) {
    char path[256];
    ecc_connector_t *c = open_filled(path, sizeof(path));
    ecc_save_entry_t e = whole_entry("again");
    cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    cr_assert_eq(truncate(path, cut_at(k)), 0, "truncate: %s", strerror(errno));
    ecc_completion_t done;
    cr_assert_eq(th_poll_until(c, &done, 1, 10000), 1, "cut %d: no completion", k);
    cr_expect_eq(done.status, ECC_ERR_REGION, "cut to %lld bytes: a save reported %d",
                 (long long)cut_at(k), done.status);
    cr_expect_eq(size_of(path), cut_at(k), "the save grew the truncated region back");
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_leq((off_t)st.st_blocks * 512, cut_at(k) + 4096,
                  "pages past the cut were written: %lld bytes allocated",
                  (long long)st.st_blocks * 512);
    cr_assert_eq(ecc_close(c), ECC_OK);
  }
}
