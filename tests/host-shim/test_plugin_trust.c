/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_plugin_trust.c - which plugin files the shim agrees to run: the file,
 * every directory on its path, [plugin] dir and ECC_PLUGIN_DIR must be owned
 * by root or this user and writable by nobody else (a sticky directory
 * aside). Cases with another user's files run only as root (chown 65534).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

#define OTHER_UID 65534 /* nobody */
#define GOOD ECC_FIXTURE_DIR "/libecc-good.so"

static char base[64];

static void setup(void)
{
  snprintf(base, sizeof(base), "/tmp/eccpt-XXXXXX");
  cr_assert_not_null(mkdtemp(base), "mkdtemp: %s", strerror(errno));
  /* Another user must be able to reach what is below, as on a real system. */
  cr_assert_eq(chmod(base, 0755), 0);
  unsetenv("ECC_PLUGIN_DIR");
}

static void teardown(void)
{
  th_remove_tree(base);
}

TestSuite(plugin_trust, .init = setup, .fini = teardown, .timeout = 60);

static const char *at(const char *rel)
{
  return th_path_in(base, rel);
}

static void need_root(void)
{
  if (geteuid() != 0) {
    teardown(); /* a skipped test runs no fini */
    cr_skip_test("needs root to give files to another user (chown %d)", OTHER_UID);
  }
}

static void give_away(const char *path)
{
  cr_assert_eq(chown(path, OTHER_UID, OTHER_UID), 0, "chown %s: %s", path, strerror(errno));
}

static const char *plugin_ini(const char *plugin_lines)
{
  char text[1024];
  snprintf(text, sizeof(text), "[plugin]\n%s\nlog_level = error\n", plugin_lines);
  return th_write_temp(text, ".ini");
}

/* ecc_check and ecc_open both refuse, pointing at line 2 of the INI, naming
 * the plugin file, then `component` and `reason`; nothing gets mapped. */
static void expect_refused(const char *lines, const char *plugin, const char *component,
                           const char *reason)
{
  const char *ini = plugin_ini(lines);
  char want[1024];
  snprintf(want, sizeof(want), "%s:2: plugin %s refused: %s %s", ini, plugin, component, reason);
  char err[2048] = "";
  int rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CONFIG, "ecc_check: rc %d: %s", rc, err);
  cr_expect_not_null(strstr(err, want), "ecc_check said '%s'\nwanted '%s'", err, want);
  ecc_connector_t *c = (ecc_connector_t *)err;
  rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CONFIG, "ecc_open: rc %d: %s", rc, err);
  cr_expect_null(c);
  cr_expect_not_null(strstr(err, want), "ecc_open said '%s'\nwanted '%s'", err, want);
  cr_expect_not(th_mapped_under(base), "a refused plugin was mapped");
}

static void expect_loads(const char *lines, const char *canonical)
{
  const char *ini = plugin_ini(lines);
  char err[2048] = "";
  ecc_plugin_meta_t meta;
  int rc = ecc_check(ini, NULL, &meta, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_check(%s): %s", lines, err);
  cr_expect_str_eq(meta.path, canonical);
  ecc_connector_t *c = NULL;
  rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s): %s", lines, err);
  cr_expect_eq(ecc_close(c), ECC_OK);
}

/* Renames `from` to `to` as the other user, in a child process (which
 * starts no threads); returns 0 or the errno rename failed with. */
static int rename_as_other_user(const char *from, const char *to)
{
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (setgroups(0, NULL) != 0 || setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
      _exit(126);
    _exit(rename(from, to) == 0 ? 0 : errno & 0x7f);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 126, "the child could not become uid %d",
            OTHER_UID);
  return WEXITSTATUS(status);
}

/* ---- the five ways another user's code got run ---- */

Test(plugin_trust, plugin_in_a_folder_another_user_owns_is_refused)
{
  need_root();
  th_make_dir(at("theirs"), 0755);
  th_copy_file(GOOD, at("theirs/libecc-good.so"), 0755); /* the file itself is root's */
  give_away(at("theirs"));
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", at("theirs/libecc-good.so"));
  expect_refused(lines, at("theirs/libecc-good.so"), at("theirs"),
                 "is owned by uid 65534, not by root or by this process's user (uid 0)");
}

Test(plugin_trust, folder_under_a_writable_grandparent_is_refused)
{
  th_make_dir(at("open"), 0777);
  th_make_dir(at("open/plugins"), 0755);
  th_copy_file(GOOD, at("open/plugins/libecc-good.so"), 0755);
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", at("open/plugins/libecc-good.so"));
  expect_refused(lines, at("open/plugins/libecc-good.so"), at("open"),
                 "is writable by others (mode 0777) and is not a sticky directory");
  if (geteuid() != 0)
    return;
  /* Why: anyone may move "plugins" away and put a folder of his own there. */
  cr_assert_eq(rename_as_other_user(at("open/plugins"), at("open/moved")), 0,
               "the other user could not swap the folder");
  cr_assert_eq(rename(at("open/moved"), at("open/plugins")), 0);
  /* With the sticky bit only the folder's owner may move it, and it loads. */
  cr_assert_eq(chmod(at("open"), 01777), 0);
  cr_assert_eq(rename_as_other_user(at("open/plugins"), at("open/moved")), EPERM);
  expect_loads(lines, at("open/plugins/libecc-good.so"));
}

Test(plugin_trust, plugin_dir_another_user_owns_is_refused)
{
  need_root();
  th_make_dir(at("theirs"), 0755);
  th_copy_file(GOOD, at("theirs/libecc-good.so"), 0755);
  give_away(at("theirs"));
  char lines[256];
  snprintf(lines, sizeof(lines), "name = good\ndir = %s", at("theirs"));
  expect_refused(lines, at("theirs/libecc-good.so"), at("theirs"), "is owned by uid 65534");
}

Test(plugin_trust, plugin_dir_variable_naming_another_users_folder_is_refused)
{
  need_root();
  th_make_dir(at("theirs"), 0755);
  th_copy_file(GOOD, at("theirs/libecc-good.so"), 0755);
  give_away(at("theirs"));
  cr_assert_eq(setenv("ECC_PLUGIN_DIR", at("theirs"), 1), 0);
  expect_refused("name = good", at("theirs/libecc-good.so"), at("theirs"), "is owned by uid 65534");
  unsetenv("ECC_PLUGIN_DIR");
}

Test(plugin_trust, group_writable_plugin_is_refused)
{
  th_copy_file(GOOD, at("libecc-good.so"), 0775);
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", at("libecc-good.so"));
  expect_refused(lines, at("libecc-good.so"), at("libecc-good.so"),
                 "is writable by its group (mode 0775)");
}

Test(plugin_trust, plugin_file_another_user_owns_is_refused)
{
  need_root();
  th_copy_file(GOOD, at("libecc-good.so"), 0755);
  give_away(at("libecc-good.so"));
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", at("libecc-good.so"));
  expect_refused(lines, at("libecc-good.so"), at("libecc-good.so"), "is owned by uid 65534");
}

/* ---- what the rule lets through ---- */

/* /tmp is writable by everyone but sticky: a plugin of root (or of the
 * caller) directly in it cannot be replaced by anyone else. */
Test(plugin_trust, own_plugin_in_sticky_tmp_is_accepted)
{
  struct stat st;
  cr_assert_eq(stat("/tmp", &st), 0);
  if (st.st_uid != 0 || (st.st_mode & 07777) != 01777) {
    teardown();
    cr_skip_test("/tmp is not root's sticky 1777 directory here");
  }
  char plugin[128];
  snprintf(plugin, sizeof(plugin), "/tmp/libecc-pt%ld.so", (long)getpid());
  unlink(plugin);
  th_copy_file(GOOD, plugin, 0755);
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", plugin);
  expect_loads(lines, plugin);
  snprintf(lines, sizeof(lines), "name = pt%ld\ndir = /tmp", (long)getpid());
  expect_loads(lines, plugin);
  unlink(plugin);
}

Test(plugin_trust, symlinked_plugin_is_checked_at_its_target)
{
  need_root();
  th_make_dir(at("safe"), 0755);
  th_make_dir(at("theirs"), 0755);
  th_copy_file(GOOD, at("safe/libecc-real.so"), 0755);
  th_copy_file(GOOD, at("theirs/libecc-good.so"), 0755);
  give_away(at("theirs"));
  /* A link in a safe folder leading into theirs: refused for theirs. */
  cr_assert_eq(symlink(at("theirs/libecc-good.so"), at("safe/libecc-link.so")), 0);
  char lines[256];
  snprintf(lines, sizeof(lines), "path = %s", at("safe/libecc-link.so"));
  expect_refused(lines, at("safe/libecc-link.so"), at("theirs"), "is owned by uid 65534");
  /* A link to a safe file loads that file, under its own name. */
  cr_assert_eq(symlink(at("safe/libecc-real.so"), at("safe/libecc-ok.so")), 0);
  snprintf(lines, sizeof(lines), "path = %s", at("safe/libecc-ok.so"));
  expect_loads(lines, at("safe/libecc-real.so"));
}
