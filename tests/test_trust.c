/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trust.c - the ownership rule of plugin/common/trust.h on real files:
 * owners, write bits, sticky directories, links, FIFOs and missing paths.
 * Cases that need another user's files run only as root (chown).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "trust.h"

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
  cr_assert_eq(check(at("grp"), TRUST_DIR), TRUST_UNSAFE);
}

Test(trust, sticky_directory_passes_when_the_next_component_does)
{
  th_make_dir(at("sticky"), 01777);
  th_make_dir(at("sticky/mine"), 0755);
  make_file(at("sticky/mine/f"), 0644);
  cr_assert_eq(check(at("sticky/mine/f"), TRUST_FILE), TRUST_OK, "%s", why);
  cr_assert_eq(check(at("sticky"), TRUST_DIR), TRUST_OK, "%s", why);
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
  cr_assert_eq(check(at("f"), TRUST_DIR), TRUST_UNSAFE);
  cr_assert_eq(check(at("nothing"), TRUST_FILE), TRUST_MISSING);
  cr_assert(strstr(why, "not found"), "%s", why);
  cr_assert_eq(check("", TRUST_FILE), TRUST_MISSING);
}

Test(trust, the_root_directory_itself)
{
  int fd = -1;
  cr_assert_eq(trust_open("/", TRUST_DIR, "test", &fd, canon, sizeof(canon), why, sizeof(why)),
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
