/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trust.c - the ownership rule of common/trust.h on real files:
 * owners, write bits, sticky directories, links, FIFOs, pipes without a
 * path, missing paths, permissions and a full descriptor table. Cases that
 * need another user run only as root (chown, setuid in a child).
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

#include "common/trust.h"
#include "tests/helpers.h"

#define OTHER_UID 65534 /* nobody */

static char base[64];
static char canon[4096];
static char why[1024];

static void setup(void)
{
  snprintf(base, sizeof(base), "/tmp/ecctrust-XXXXXX");
  cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(base);
}

TestSuite(trust, .init = setup, .fini = teardown, .timeout = 30);

static const char *at(const char *rel)
{
  return th_path_in(base, rel);
}

static void make_file(const char *path, mode_t mode)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, "x", 1), 1);
  cr_assert_eq(fchmod(fd, mode), 0);
  close(fd);
}

static int check(const char *path, enum trust_kind kind)
{
  why[0] = '\0';
  return trust_open(path, kind, "test", NULL, canon, sizeof(canon), why, sizeof(why));
}

Test(trust, own_file_in_own_directory_passes_and_opens)
{
  make_file(at("f"), 0644);
  int fd = -2;
  int rc = trust_open(at("f"), TRUST_FILE, "test", &fd, canon, sizeof(canon), why, sizeof(why));
  cr_assert_eq(rc, TRUST_OK, "%s", why);
  cr_assert_geq(fd, 0);
  char c = 0;
  cr_assert_eq(read(fd, &c, 1), 1);
  cr_assert_eq(c, 'x');
  close(fd);
  cr_assert_str_eq(canon, at("f"));
}

Test(trust, group_or_world_writable_file_is_refused)
{
  make_file(at("g"), 0664);
  make_file(at("w"), 0646);
  cr_assert_eq(check(at("g"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, "writable by its group") && strstr(why, "0664"), "%s", why);
  cr_assert_eq(check(at("w"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, "writable by others"), "%s", why);
}

Test(trust, writable_directory_without_sticky_bit_is_refused)
{
  th_make_dir(at("open"), 0777);
  make_file(at("open/f"), 0644);
  cr_assert_eq(check(at("open/f"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, at("open")) && strstr(why, "not a sticky directory"), "%s", why);
  th_make_dir(at("grp"), 0770);
  cr_assert_eq(check(at("grp"), TRUST_FOLDER), TRUST_UNSAFE);
}

Test(trust, sticky_directory_passes_when_the_next_component_does)
{
  th_make_dir(at("sticky"), 01777);
  th_make_dir(at("sticky/mine"), 0755);
  make_file(at("sticky/mine/f"), 0644);
  cr_assert_eq(check(at("sticky/mine/f"), TRUST_FILE), TRUST_OK, "%s", why);
  cr_assert_eq(check(at("sticky"), TRUST_FOLDER), TRUST_OK, "%s", why);
}

Test(trust, another_users_file_or_directory_is_refused)
{
  if (geteuid() != 0)
    cr_skip_test("needs root to give files to another user");
  make_file(at("theirs"), 0644);
  cr_assert_eq(chown(at("theirs"), OTHER_UID, OTHER_UID), 0);
  cr_assert_eq(check(at("theirs"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, "owned by uid 65534"), "%s", why);
  /* Their directory inside a sticky one: they could swap what is below. */
  th_make_dir(at("st"), 01777);
  th_make_dir(at("st/theirs"), 0755);
  make_file(at("st/theirs/f"), 0644);
  cr_assert_eq(chown(at("st/theirs"), OTHER_UID, OTHER_UID), 0);
  cr_assert_eq(check(at("st/theirs/f"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, at("st/theirs")), "%s", why);
}

Test(trust, root_owned_file_in_sticky_tmp_passes_for_root)
{
  if (geteuid() != 0)
    cr_skip_test("needs root");
  make_file(at("rootfile"), 0644);
  cr_assert_eq(check(at("rootfile"), TRUST_FILE), TRUST_OK, "%s", why);
}

Test(trust, links_are_checked_where_they_lead)
{
  th_make_dir(at("real"), 0755);
  make_file(at("real/f"), 0644);
  cr_assert_eq(symlink(at("real"), at("dirlink")), 0);
  cr_assert_eq(check(at("dirlink/f"), TRUST_FILE), TRUST_OK, "%s", why);
  cr_assert_str_eq(canon, at("real/f"));
  /* A link into an unsafe directory is refused for that directory. */
  th_make_dir(at("bad"), 0777);
  make_file(at("bad/f"), 0644);
  cr_assert_eq(symlink(at("bad/f"), at("flink")), 0);
  cr_assert_eq(check(at("flink"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, at("bad")), "%s", why);
}

Test(trust, fifo_and_device_are_refused_without_opening)
{
  cr_assert_eq(mkfifo(at("fifo"), 0600), 0);
  int fd = 5;
  int rc = trust_open(at("fifo"), TRUST_FILE, "test", &fd, canon, sizeof(canon), why, sizeof(why));
  cr_assert_eq(rc, TRUST_UNSAFE);
  cr_assert_eq(fd, -1);
  cr_assert(strstr(why, "not a regular file"), "%s", why);
  cr_assert_eq(check("/dev/urandom", TRUST_FILE), TRUST_UNSAFE);
}

Test(trust, kind_mismatch_and_missing_paths)
{
  th_make_dir(at("d"), 0755);
  make_file(at("f"), 0644);
  cr_assert_eq(check(at("d"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert_eq(check(at("f"), TRUST_FOLDER), TRUST_UNSAFE);
  cr_assert_eq(check(at("nothing"), TRUST_FILE), TRUST_MISSING);
  cr_assert(strstr(why, "not found"), "%s", why);
  cr_assert_eq(check("", TRUST_FILE), TRUST_MISSING);
}

Test(trust, the_root_directory_itself)
{
  int fd = -1;
  cr_assert_eq(trust_open("/", TRUST_FOLDER, "test", &fd, canon, sizeof(canon), why, sizeof(why)),
               TRUST_OK, "%s", why);
  cr_assert_geq(fd, 0);
  close(fd);
  cr_assert_str_eq(canon, "/");
}

Test(trust, another_users_link_is_not_followed_even_to_a_safe_file)
{
  if (geteuid() != 0)
    cr_skip_test("needs root to give a link to another user");
  th_make_dir(at("st"), 01777);
  make_file(at("safe"), 0644);
  cr_assert_eq(symlink(at("safe"), at("st/theirs")), 0);
  cr_assert_eq(lchown(at("st/theirs"), OTHER_UID, OTHER_UID), 0);
  cr_assert_eq(check(at("st/theirs"), TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, "symbolic link owned by uid 65534"), "%s", why);
  /* The same link of our own leads to the same file and passes. */
  cr_assert_eq(symlink(at("safe"), at("st/mine")), 0);
  cr_assert_eq(check(at("st/mine"), TRUST_FILE), TRUST_OK, "%s", why);
  cr_assert_str_eq(canon, at("safe"));
}

Test(trust, relative_paths_are_walked_from_the_working_directory)
{
  th_make_dir(at("open"), 0777);
  th_make_dir(at("open/sub"), 0755);
  make_file(at("open/sub/f"), 0644);
  char cwd[4096];
  cr_assert_not_null(getcwd(cwd, sizeof(cwd)));
  cr_assert_eq(chdir(at("open")), 0);
  int rc = check("sub/f", TRUST_FILE);
  cr_assert_eq(chdir(cwd), 0);
  /* The working directory itself is writable by others: refused. */
  cr_assert_eq(rc, TRUST_UNSAFE);
  cr_assert(strstr(why, at("open")), "%s", why);
  cr_assert_eq(chmod(at("open"), 0755), 0);
  cr_assert_eq(chdir(at("open")), 0);
  rc = check("./sub/../sub/f", TRUST_FILE);
  cr_assert_eq(chdir(cwd), 0);
  cr_assert_eq(rc, TRUST_OK, "%s", why);
  cr_assert_str_eq(canon, at("open/sub/f"));
}

/* /dev/stdin or /proc/self/fd/N of a pipe leads to an object with no path
 * of its own: it is there, and it is the wrong kind. */
Test(trust, a_pipe_through_proc_is_not_a_regular_file_not_missing)
{
  int p[2];
  cr_assert_eq(pipe(p), 0);
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]);
  int rc = check(path, TRUST_FILE);
  close(p[0]);
  close(p[1]);
  cr_assert_eq(rc, TRUST_UNSAFE, "rc %d: %s", rc, why);
  char want[256];
  snprintf(want, sizeof(want), "test %s: %s is not a regular file (it is a FIFO or pipe)", path,
           path);
  cr_assert_str_eq(why, want);
  cr_assert_eq(check(path, TRUST_FILE), TRUST_MISSING, "a closed descriptor: %s", why);
  cr_assert(strstr(why, "not found"), "%s", why);
}

Test(trust, the_wrong_kind_is_named)
{
  cr_assert_eq(check("/dev/null", TRUST_FILE), TRUST_UNSAFE);
  cr_assert(strstr(why, "/dev/null is not a regular file (it is a character device)"), "%s", why);
  make_file(at("f"), 0644);
  cr_assert_eq(check(at("f"), TRUST_FOLDER), TRUST_UNSAFE);
  cr_assert(strstr(why, "is not a directory (it is a regular file)"), "%s", why);
}

/* Runs fn in a forked child and returns the reason it wrote. */
static const char *in_child(void (*fn)(int out))
{
  static char text[1024];
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    fn(p[1]);
    _exit(0);
  }
  close(p[1]);
  memset(text, 0, sizeof(text));
  size_t got = 0;
  ssize_t n;
  while ((n = read(p[0], text + got, sizeof(text) - 1 - got)) > 0)
    got += (size_t)n;
  close(p[0]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
  cr_assert_gt(got, 0u, "the child wrote nothing");
  return text;
}

static void report(int out, int rc)
{
  char line[1100];
  int n = snprintf(line, sizeof(line), "%d %s", rc, why);
  if (write(out, line, (size_t)n) != n)
    _exit(9);
}

static void open_as_nobody(int out)
{
  if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
    _exit(8);
  int fd = -1;
  report(out, trust_open(at("open/secret"), TRUST_FILE, "test", &fd, canon, sizeof(canon), why,
                         sizeof(why)));
  report(out, check(at("shut/f"), TRUST_FILE));
}

Test(trust, permission_denied_is_said_so)
{
  if (geteuid() != 0)
    cr_skip_test("needs root to run a child as another user");
  cr_assert_eq(chmod(base, 0755), 0);
  th_make_dir(at("open"), 0755);
  make_file(at("open/secret"), 0600);
  th_make_dir(at("shut"), 0700);
  make_file(at("shut/f"), 0644);
  const char *text = in_child(open_as_nobody);
  char want[512];
  snprintf(want, sizeof(want),
           "%d test %s: permission denied: %s cannot be opened by this process's user (uid %d)",
           TRUST_ERROR, at("open/secret"), at("open/secret"), OTHER_UID);
  cr_expect(strncmp(text, want, strlen(want)) == 0, "'%s' is not '%s'", text, want);
  snprintf(want, sizeof(want),
           "%d test %s: permission denied: a directory on its path cannot be searched by this "
           "process's user (uid %d)",
           TRUST_ERROR, at("shut/f"), OTHER_UID);
  cr_expect_not_null(strstr(text, want), "'%s' lacks '%s'", text, want);
}

static void open_with_no_descriptor_left(int out)
{
  struct rlimit low = {.rlim_cur = 32, .rlim_max = 32};
  if (setrlimit(RLIMIT_NOFILE, &low) != 0)
    _exit(7);
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0)
    ;
  if (errno != EMFILE)
    _exit(6);
  int fd = -1;
  int rc = trust_open(at("f"), TRUST_FILE, "test", &fd, canon, sizeof(canon), why, sizeof(why));
  report(out, rc);
}

Test(trust, a_full_descriptor_table_names_the_file_and_the_limit)
{
  make_file(at("f"), 0644);
  const char *text = in_child(open_with_no_descriptor_left);
  char want[512];
  snprintf(want, sizeof(want),
           "%d test %s: cannot open it: Too many open files: this process has "
           "reached its limit of 32 open descriptors (RLIMIT_NOFILE)",
           TRUST_ERROR, at("f"));
  cr_expect(strncmp(text, want, strlen(want)) == 0, "'%s' is not '%s'", text, want);
  cr_expect_not_null(strstr(text, "ulimit -n"), "%s", text);
  cr_expect_null(strstr(text, "cannot open /:"), "%s", text);
}
