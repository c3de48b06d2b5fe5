/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ini_open.c - why an INI file could not be opened, as ecc_check says
 * it: not found, a pipe given as /dev/stdin, permission denied, and a full
 * descriptor table, each named for what it is and the file it concerns.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define OTHER_UID 65534 /* nobody */

static char base[64];

static void setup(void)
{
  snprintf(base, sizeof(base), "/tmp/eccinio-XXXXXX");
  cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
  cr_assert_eq(chmod(base, 0755), 0);
}

static void teardown(void)
{
  th_remove_tree(base);
}

TestSuite(ini_open, .init = setup, .fini = teardown, .timeout = 30);

static const char *valid_ini(const char *name, mode_t mode)
{
  const char *path = th_path_in(base, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  char text[512];
  int n = snprintf(text, sizeof(text), "[plugin]\npath = %s\n", th_fixture("good"));
  cr_assert_eq(write(fd, text, (size_t)n), n);
  cr_assert_eq(fchmod(fd, mode), 0);
  cr_assert_eq(close(fd), 0);
  return path;
}

static int check(const char *path, char *err, size_t cap)
{
  err[0] = '\0';
  return ecc_check(path, NULL, NULL, err, cap);
}

Test(ini_open, a_missing_file_is_not_found)
{
  char err[1024];
  const char *path = th_path_in(base, "absent.ini");
  cr_assert_eq(check(path, err, sizeof(err)), ECC_ERR_CONFIG, "%s", err);
  char want[256];
  snprintf(want, sizeof(want), "cannot open INI file %s: not found", path);
  cr_assert_not_null(strstr(err, want), "'%s' lacks '%s'", err, want);
}

/* `... | eccctl check /dev/stdin`: the pipe is there, and it is not a file. */
Test(ini_open, a_pipe_given_as_dev_stdin_is_not_a_regular_file)
{
  int p[2];
  cr_assert_eq(pipe(p), 0);
  int saved = dup(0);
  cr_assert_geq(saved, 0);
  cr_assert_eq(dup2(p[0], 0), 0);
  char err[1024];
  int rc = check("/dev/stdin", err, sizeof(err));
  cr_assert_eq(dup2(saved, 0), 0);
  close(saved);
  close(p[0]);
  close(p[1]);
  cr_assert_eq(rc, ECC_ERR_CONFIG, "rc %d: %s", rc, err);
  cr_assert_not_null(strstr(err, "INI file /dev/stdin: /dev/stdin is not a regular file (it is a "
                                 "FIFO or pipe)"),
                     "%s", err);
  cr_assert_null(strstr(err, "not found"), "%s", err);
}

/* Status, then the text, from a child. */
static int in_child(void (*fn)(const char *path, int out), const char *path, char *text, size_t cap)
{
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    fn(path, p[1]);
    _exit(0);
  }
  close(p[1]);
  memset(text, 0, cap);
  size_t got = 0;
  ssize_t n;
  while ((n = read(p[0], text + got, cap - 1 - got)) > 0)
    got += (size_t)n;
  close(p[0]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
  int rc = 0, used = 0;
  cr_assert_eq(sscanf(text, "%d %n", &rc, &used), 1, "child wrote '%s'", text);
  memmove(text, text + used, strlen(text + used) + 1);
  return rc;
}

static void report(int out, int rc, const char *err)
{
  char line[1200];
  int n = snprintf(line, sizeof(line), "%d %s", rc, err);
  if (write(out, line, (size_t)n) != n)
    _exit(9);
}

static void check_as_nobody(const char *path, int out)
{
  if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
    _exit(8);
  char err[1024];
  report(out, check(path, err, sizeof(err)), err);
}

Test(ini_open, an_unreadable_file_is_permission_denied)
{
  if (geteuid() != 0)
    cr_skip_test("needs root to run a child as another user");
  const char *ini = valid_ini("secret.ini", 0600);
  char text[1200];
  int rc = in_child(check_as_nobody, ini, text, sizeof(text));
  cr_expect_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, text);
  char want[512];
  snprintf(want, sizeof(want),
           "INI file %s: permission denied: %s cannot be opened by this "
           "process's user (uid %d)",
           ini, ini, OTHER_UID);
  cr_expect_not_null(strstr(text, want), "'%s' lacks '%s'", text, want);
}

static void check_with_no_descriptor_left(const char *path, int out)
{
  struct rlimit low = {.rlim_cur = 32, .rlim_max = 32};
  if (setrlimit(RLIMIT_NOFILE, &low) != 0)
    _exit(7);
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0)
    ;
  if (errno != EMFILE)
    _exit(6);
  char err[1024];
  report(out, check(path, err, sizeof(err)), err);
}

Test(ini_open, a_full_descriptor_table_names_the_file_and_the_limit)
{
  const char *ini = valid_ini("fds.ini", 0644);
  char text[1200];
  int rc = in_child(check_with_no_descriptor_left, ini, text, sizeof(text));
  cr_expect_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, text);
  char want[512];
  snprintf(want, sizeof(want),
           "INI file %s: cannot open it: Too many open files: this process "
           "has reached its limit of 32 open descriptors (RLIMIT_NOFILE)",
           ini);
  cr_expect_not_null(strstr(text, want), "'%s' lacks '%s'", text, want);
  cr_expect_null(strstr(text, "cannot open /:"), "%s", text);
}
