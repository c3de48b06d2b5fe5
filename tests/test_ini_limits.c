/*
 * test_ini_limits.c - what the shim's INI reader does at its limits: many
 * keys, big or endless files, files that are not regular files, failing
 * reads, no descriptors left, and INI files another user could control.
 * Every case ends promptly with the right code and a message naming it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ecc_host.h"
#include "helpers.h"

#define GOOD ECC_FIXTURE_DIR "/libecc-good.so"

static char base[64];

static void setup(void)
{
  snprintf(base, sizeof(base), "/tmp/eccinilim-XXXXXX");
  cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(base);
}

/* A short timeout: a reader that blocks or crawls fails instead of hanging. */
TestSuite(ini_limits, .init = setup, .fini = teardown, .timeout = 10);

static const char *at(const char *rel)
{
  static char paths[8][256];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, 256, "%s/%s", base, rel);
  return p;
}

/* Writes len bytes of text to path with the given mode. */
static void write_file(const char *path, const char *text, size_t len, mode_t mode)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  for (size_t done = 0; done < len;) {
    ssize_t n = write(fd, text + done, len - done);
    cr_assert_gt(n, 0, "write %s: %s", path, strerror(errno));
    done += (size_t)n;
  }
  cr_assert_eq(fchmod(fd, mode), 0);
  cr_assert_eq(close(fd), 0);
}

/* ecc_check of path must give code and an error containing each needle. */
static void expect_check(const char *path, const ecc_open_options *opt, int code,
                         const char *needle1, const char *needle2)
{
  char err[2048] = "";
  int rc = ecc_check(path, opt, NULL, err, sizeof(err));
  cr_assert_eq(rc, code, "%s: rc %d, not %d: %s", path, rc, code, err);
  cr_assert_not_null(strstr(err, needle1), "error '%s' lacks '%s'", err, needle1);
  if (needle2 != NULL)
    cr_assert_not_null(strstr(err, needle2), "error '%s' lacks '%s'", err, needle2);
}

/* ---- many keys ---- */

enum { MANY = 100000 };

/* "[plugin]" naming the fixture, then MANY keys in [s] on lines 4.., then
 * `tail`. Returns the file's path. */
static const char *many_keys_ini(const char *tail)
{
  size_t cap = (size_t)MANY * 24 + 1024;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  size_t used = (size_t)snprintf(text, cap, "[plugin]\npath = %s\n[s]\n", GOOD);
  for (int i = 0; i < MANY; i++)
    used += (size_t)snprintf(text + used, cap - used, "k%07d = %d\n", i, i);
  used += (size_t)snprintf(text + used, cap - used, "%s", tail);
  cr_assert_lt(used, cap);
  const char *path = at("many.ini");
  write_file(path, text, used, 0644);
  free(text);
  return path;
}

Test(ini_limits, a_duplicate_after_100000_keys_names_both_lines)
{
  const char *ini = many_keys_ini("k0000000 = again\n");
  char want[512];
  snprintf(want, sizeof(want), "%s:%d: duplicate key 's.k0000000' (first set on line 4)", ini,
           MANY + 4);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
  ini = many_keys_ini("k0099999 = again\n");
  snprintf(want, sizeof(want), "%s:%d: duplicate key 's.k0099999' (first set on line %d)", ini,
           MANY + 4, MANY + 3);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
}

/* 100,000 overrides each replace their key: the fixture then refuses the
 * first one, named as an override rather than as line 4 of the file. */
Test(ini_limits, overrides_replace_each_of_100000_keys)
{
  const char *ini = many_keys_ini("");
  ecc_kv *kv = calloc(MANY, sizeof(*kv));
  char (*names)[16] = calloc(MANY, sizeof(*names));
  cr_assert(kv != NULL && names != NULL);
  for (int i = 0; i < MANY; i++) {
    snprintf(names[MANY - 1 - i], sizeof(names[0]), "s.k%07d", i);
    kv[MANY - 1 - i] = (ecc_kv){.key = names[MANY - 1 - i], .value = "replaced"};
  }
  ecc_open_options opt = {.struct_size = sizeof(opt), .overrides = kv, .n_overrides = MANY,
                          .log_level = -1};
  expect_check(ini, &opt, ECC_ERR_CONFIG, "override: unknown key 's.k0000000'", NULL);
  free(kv);
  free(names);
}
