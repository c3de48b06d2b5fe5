/* SPDX-License-Identifier: Apache-2.0 */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define GOOD ECC_FIXTURE_DIR "/libecc-good.so"
#define MAX_BYTES ((size_t)4 << 20) /* INI_CONFIG_MAX_BYTES */
#define OTHER_UID 65534             /* nobody */

/* Sanitizers reserve terabytes of address space: no cap on it can work. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static const int sanitized = 1;
#else
static const int sanitized = 0;
#endif

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
  return th_path_in(base, rel);
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
static void expect_check(const char *path, const ecc_open_options_t *opt, int code,
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
  ecc_kv_t *kv = calloc(MANY, sizeof(*kv));
  char(*names)[16] = calloc(MANY, sizeof(*names));
  cr_assert(kv != NULL && names != NULL);
  for (int i = 0; i < MANY; i++) {
    snprintf(names[MANY - 1 - i], sizeof(names[0]), "s.k%07d", i);
    kv[MANY - 1 - i] = (ecc_kv_t){.key = names[MANY - 1 - i], .value = "replaced"};
  }
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = kv, .n_overrides = MANY, .log_level = -1};
  expect_check(ini, &opt, ECC_ERR_CONFIG, "override: unknown key 's.k0000000'", NULL);
  free(kv);
  free(names);
}

/* ---- what is not a regular file ---- */

static const char *valid_ini(const char *name, mode_t mode)
{
  char text[512];
  int n = snprintf(text, sizeof(text), "[plugin]\npath = %s\n", GOOD);
  const char *path = at(name);
  write_file(path, text, (size_t)n, mode);
  return path;
}

static void expect_not_regular(const char *path)
{
  char want[512];
  snprintf(want, sizeof(want), "INI file %s: %s is not a regular file", path, path);
  expect_check(path, NULL, ECC_ERR_CONFIG, want, NULL);
}

/* Opening a FIFO blocks until a writer comes; it must never be opened. */
Test(ini_limits, a_fifo_is_refused_without_blocking)
{
  const char *fifo = at("fifo.ini");
  cr_assert_eq(mkfifo(fifo, 0600), 0, "mkfifo: %s", strerror(errno));
  expect_not_regular(fifo);
}

/* Endless files: /dev/urandom never ends, /dev/zero never ends a line. */
Test(ini_limits, devices_and_directories_are_refused_unread)
{
  expect_not_regular("/dev/urandom");
  expect_not_regular("/dev/zero");
  expect_not_regular("/dev/null");
  cr_assert_eq(mkdir(at("dir.ini"), 0700), 0);
  char want[512];
  snprintf(want, sizeof(want), "INI file %s: %s is not a regular file", at("dir.ini"),
           at("dir.ini"));
  expect_check(at("dir.ini"), NULL, ECC_ERR_CONFIG, want, NULL);
  const char *link = at("urandom.ini");
  cr_assert_eq(symlink("/dev/urandom", link), 0);
  snprintf(want, sizeof(want), "INI file %s: /dev/urandom is not a regular file", link);
  expect_check(link, NULL, ECC_ERR_CONFIG, want, NULL);
}

/* ---- size ---- */

/* A valid INI padded with comment lines to exactly `size` bytes. */
static char *padded_ini(size_t size)
{
  char *text = malloc(size + 1);
  cr_assert_not_null(text);
  size_t used = (size_t)snprintf(text, size + 1, "[plugin]\npath = %s\n", GOOD);
  while (used < size) {
    size_t n = size - used < 100 ? size - used : 100;
    memset(text + used, 'x', n);
    text[used] = '#';
    text[used + n - 1] = '\n';
    used += n;
  }
  return text;
}

static int count_lines(const char *text, size_t len)
{
  int lines = 1;
  for (size_t i = 0; i < len; i++)
    lines += text[i] == '\n';
  return lines;
}

Test(ini_limits, a_file_at_the_size_limit_is_read_and_one_byte_more_is_refused)
{
  char *text = padded_ini(MAX_BYTES);
  const char *ini = at("limit.ini");
  write_file(ini, text, MAX_BYTES, 0644);
  char err[1024] = "";
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_OK, "%s", err);

  int fd = open(ini, O_WRONLY | O_APPEND | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(write(fd, "#", 1), 1);
  cr_assert_eq(close(fd), 0);
  char want[512];
  snprintf(want, sizeof(want),
           "%s:%d: the file is longer than 4194304 bytes (4 MiB), the most an INI file may hold",
           ini, count_lines(text, MAX_BYTES));
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
  free(text);
}

/* Address space now in use, from /proc/self/statm. */
static size_t address_space(void)
{
  FILE *f = fopen("/proc/self/statm", "r");
  cr_assert_not_null(f);
  unsigned long pages = 0;
  cr_assert_eq(fscanf(f, "%lu", &pages), 1);
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}

/* ecc_check with allocations failing beyond `slack` more bytes of address
 * space (no cap at all under sanitizers). */
static int check_in(size_t slack, const char *ini, char *err, size_t err_cap)
{
  struct rlimit old;
  cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
  struct rlimit cap = {.rlim_cur = address_space() + slack, .rlim_max = old.rlim_max};
  if (!sanitized)
    cr_assert_eq(setrlimit(RLIMIT_AS, &cap), 0, "setrlimit: %s", strerror(errno));
  int rc = ecc_check(ini, NULL, NULL, err, err_cap);
  cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
  return rc;
}

/* A line of 64 MiB (and no end) costs no more memory than the size limit:
 * it is refused at its line with 16 MiB of address space to spare. */
Test(ini_limits, a_line_far_longer_than_every_limit_is_refused_in_bounded_memory)
{
  char head[512];
  int n = snprintf(head, sizeof(head), "[plugin]\npath = %s\n[good]\ntag = ", GOOD);
  const char *ini = at("endless.ini");
  write_file(ini, head, (size_t)n, 0644);
  cr_assert_eq(truncate(ini, (off_t)n + (64 << 20)), 0); /* NUL bytes, sparse */
  char err[1024] = "", want[512];
  int rc = check_in((size_t)16 << 20, ini, err, sizeof(err));
  snprintf(want, sizeof(want), "%s:4: the file is longer than 4194304 bytes", ini);
  cr_assert_eq(rc, ECC_ERR_CONFIG, "rc %d: %s", rc, err);
  cr_assert_not_null(strstr(err, want), "error '%s' lacks '%s'", err, want);
  if (sanitized)
    cr_log_info("built with a sanitizer: the memory bound was not enforced");
}

/* ---- failing reads ---- */

/* Memory running out while the file is read is an error, never the end of
 * the file: what follows the long line would be lost and the rest taken
 * for the whole configuration. */
Test(ini_limits, running_out_of_memory_while_reading_is_an_error)
{
  if (sanitized) {
    teardown(); /* a skipped test runs no fini */
    cr_skip_test("needs a cap on address space, which sanitizers cannot run under");
  }
  size_t size = (size_t)3 << 20;
  char *text = padded_ini(size);
  int n = snprintf(text + size - 100, 100, "\n[region]\nnmae = x\n");
  memset(text + size - 100 + n, '#', 100 - (size_t)n - 1);
  text[size - 1] = '\n';
  memset(text + 1024, 'x', (size_t)2 << 20); /* one long comment line */
  const char *ini = at("big.ini");
  write_file(ini, text, size, 0644);
  free(text);
  char err[1024] = "";
  int rc = check_in((size_t)1 << 20, ini, err, sizeof(err));
  char want[512];
  snprintf(want, sizeof(want), "cannot read INI file %s: out of memory for %zu bytes", ini,
           size + 1);
  cr_assert_eq(rc, ECC_ERR_NOMEM, "rc %d: %s", rc, err);
  cr_assert_str_eq(err, want);
}

/* Reading /proc/self/mem at offset 0 fails (nothing is mapped there). */
Test(ini_limits, a_failing_read_is_a_system_error)
{
  expect_check("/proc/self/mem", NULL, ECC_ERR_SYSTEM,
               "cannot read INI file /proc/self/mem: Input/output error", NULL);
}

/* Files in /proc say they are empty; they are read all the same. */
Test(ini_limits, a_file_that_says_it_is_empty_is_read_to_its_end)
{
  expect_check("/proc/self/status", NULL, ECC_ERR_CONFIG,
               "/proc/self/status:1: key 'Name' is outside any section", NULL);
}

Test(ini_limits, no_descriptor_left_is_a_system_error)
{
  const char *ini = valid_ini("fds.ini", 0644);
  struct rlimit old;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = {.rlim_cur = 64, .rlim_max = old.rlim_max};
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fds[64], n = 0;
  while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
    n++;
  int full = n < 64 && errno == EMFILE;
  char err[1024] = "";
  int rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
  while (n > 0)
    close(fds[--n]);
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  cr_assert(full, "the descriptor table did not fill");
  cr_assert_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, err);
  cr_assert_not_null(strstr(err, ini), "%s", err);
  cr_assert_not_null(strstr(err, "Too many open files"), "%s", err);
}

/* ---- files another user could control ---- */

Test(ini_limits, an_ini_owned_by_another_user_is_refused)
{
  if (geteuid() != 0) {
    teardown(); /* a skipped test runs no fini */
    cr_skip_test("needs root to give a file to another user");
  }
  const char *ini = valid_ini("theirs.ini", 0644);
  cr_assert_eq(chown(ini, OTHER_UID, OTHER_UID), 0, "chown: %s", strerror(errno));
  char want[512];
  snprintf(want, sizeof(want), "INI file %s refused: %s is owned by uid %d, not by root", ini, ini,
           OTHER_UID);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
}

Test(ini_limits, a_group_or_world_writable_ini_is_refused)
{
  const char *ini = valid_ini("group.ini", 0664);
  char want[512];
  snprintf(want, sizeof(want), "INI file %s refused: %s is writable by its group (mode 0664)", ini,
           ini);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
  ini = valid_ini("world.ini", 0666);
  snprintf(want, sizeof(want), "INI file %s refused: %s is writable by others (mode 0666)", ini,
           ini);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);
}

/* Anyone could replace the file in a world-writable directory, unless the
 * directory is sticky (as /tmp is). */
Test(ini_limits, an_ini_in_a_world_writable_directory_is_refused_unless_it_is_sticky)
{
  const char *open_dir = at("open");
  cr_assert_eq(mkdir(open_dir, 0700), 0);
  cr_assert_eq(chmod(open_dir, 0777), 0);
  const char *ini = valid_ini("open/x.ini", 0644);
  char want[512];
  snprintf(want, sizeof(want),
           "INI file %s refused: %s is writable by others (mode 0777) and is not a sticky "
           "directory",
           ini, open_dir);
  expect_check(ini, NULL, ECC_ERR_CONFIG, want, NULL);

  cr_assert_eq(chmod(open_dir, 01777), 0);
  char err[1024] = "";
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_OK, "%s", err);
}

/* A link is followed to a safe file, and messages name the path as given,
 * relative paths included; a link into an unsafe directory is refused. */
Test(ini_limits, an_ini_through_a_symlink_is_judged_by_its_target)
{
  const char *real = valid_ini("real.ini", 0644);
  cr_assert_eq(symlink("real.ini", at("link.ini")), 0);
  char err[1024] = "";
  cr_assert_eq(ecc_check(at("link.ini"), NULL, NULL, err, sizeof(err)), ECC_OK, "%s", err);

  char text[512];
  int n = snprintf(text, sizeof(text), "[plugin]\npath = %s\nnot a pair\n", GOOD);
  write_file(real, text, (size_t)n, 0644);
  cr_assert_eq(chdir(base), 0);
  expect_check("link.ini", NULL, ECC_ERR_CONFIG,
               "link.ini:3: syntax error: expected 'key = value' or '[section]'", NULL);

  cr_assert_eq(mkdir(at("open"), 0700), 0);
  cr_assert_eq(chmod(at("open"), 0777), 0);
  valid_ini("open/x.ini", 0644);
  cr_assert_eq(symlink("open/x.ini", at("unsafe.ini")), 0);
  char want[512];
  snprintf(want, sizeof(want), "INI file unsafe.ini refused: %s is writable by others", at("open"));
  expect_check("unsafe.ini", NULL, ECC_ERR_CONFIG, want, NULL);
}
