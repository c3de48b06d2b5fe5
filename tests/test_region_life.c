/*
 * test_region_life.c - the region file's life: region.dir is checked (a
 * tmpfs unless allowed, the ownership rule on every component, links
 * followed only if their owner is trusted) and the per-user default
 * directory is made for its user alone.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "connector.h"
#include "helpers.h"
#include "log.h"
#include "region.h"

#define BS 4096u
#define NB 512u
#define OTHER_UID 65534 /* nobody */

static char rdir[64];
static char captured[16384];
static struct ecc_log tlog;

static void capture(void *user, int level, const char *msg)
{
  (void)user;
  size_t used = strlen(captured);
  snprintf(captured + used, sizeof(captured) - used, "[%d] %s\n", level, msg);
}

static const ecc_host_services_v1 host = {
    .struct_size = sizeof(ecc_host_services_v1),
    .log_level = ECC_LOG_DEBUG,
    .log = capture,
    .user = NULL,
};

static void setup(void)
{
  captured[0] = '\0';
  log_init(&tlog, &host);
  snprintf(rdir, sizeof(rdir), "/dev/shm/ecclife-XXXXXX");
  cr_assert_not_null(mkdtemp(rdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(rdir);
  log_destroy(&tlog);
}

TestSuite(life, .init = setup, .fini = teardown, .timeout = 120);

/* Skipping runs no fini: clean up first. */
#define SKIP(...)                                                                              \
  do {                                                                                         \
    teardown();                                                                                \
    cr_skip_test(__VA_ARGS__);                                                                 \
  } while (0)

static struct region_params params(const char *dir, const char *name, int mode,
                                   uint32_t timeout_ms, int reap)
{
  struct region_params p = {.dir = dir, .name = name, .block_size = BS, .num_blocks = NB,
                            .mode = mode, .join_timeout_ms = timeout_ms, .reap_orphans = reap};
  return p;
}

/* A region file made by hand: a valid header for BS x NB, every block
 * allocated unless `sparse`. */
static void make_region_file(const char *path, int sparse)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  off_t size = REGION_HEADER_BYTES + (off_t)BS * NB;
  cr_assert_eq(ftruncate(fd, size), 0);
  if (!sparse)
    cr_assert_eq(posix_fallocate(fd, 0, size), 0);
  struct region_header h = th_region_header(BS, NB);
  cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
  close(fd);
}

static ecc_info describe(ecc_connector *c)
{
  ecc_info info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  return info;
}

/* ---- region.dir ----------------------------------------------------------- */

/* ecc_open with region.dir = dir refuses with `want`, naming `needle`. */
static void expect_dir_refused(const char *dir, const char *region_extra, int want,
                               const char *needle)
{
  const char *ini = th_ini_at(dir, "both", th_region_name(), BS, NB, region_extra, NULL);
  ecc_connector *c = NULL;
  char err[1024] = "";
  int fds = th_count_fds();
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, want, "region.dir %s: rc %d (%s): %s", dir, rc, ecc_strerror(rc), err);
  cr_assert_null(c);
  cr_expect_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_expect_eq(th_count_fds(), fds, "a refused open leaked a descriptor");
}

static ecc_connector *open_in(const char *dir, const char *name, const char *region_extra)
{
  const char *ini = th_ini_at(dir, "both", name, BS, NB, region_extra, NULL);
  ecc_connector *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "region.dir %s: %s", dir, err);
  return c;
}

Test(life, directory_on_a_disk_is_refused_unless_allowed)
{
  char dir[64];
  snprintf(dir, sizeof(dir), "/tmp/ecclife-disk-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  struct statfs fs;
  cr_assert_eq(statfs(dir, &fs), 0);
  if (fs.f_type == TMPFS_MAGIC) {
    th_remove_tree(dir);
    SKIP("/tmp is a tmpfs here: no disk directory to test with");
  }
  expect_dir_refused(dir, NULL, ECC_ERR_REGION, "is not on a tmpfs");
  expect_dir_refused(dir, NULL, ECC_ERR_REGION, dir);
  cr_expect_eq(th_count_entries(dir), 0, "a refused open left a file on the disk");
  const char *name = th_region_name();
  ecc_connector *c = open_in(dir, name, "require_tmpfs = false\n");
  cr_expect(th_exists(th_region_path(dir, name)));
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_expect_eq(th_count_entries(dir), 0);
  th_remove_tree(dir);
}

Test(life, world_writable_directory_is_refused_unless_sticky)
{
  char dir[128];
  snprintf(dir, sizeof(dir), "%s/open", rdir);
  cr_assert_eq(mkdir(dir, 0700), 0);
  cr_assert_eq(chmod(dir, 0777), 0);
  expect_dir_refused(dir, NULL, ECC_ERR_REGION,
                     "is writable by others (mode 0777) and is not a sticky directory");
  cr_expect_eq(th_count_entries(dir), 0);
  cr_assert_eq(chmod(dir, 01777), 0);
  const char *name = th_region_name();
  ecc_connector *c = open_in(dir, name, NULL);
  cr_expect(th_exists(th_region_path(dir, name)));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(life, linked_directory_is_resolved_and_the_real_one_checked)
{
  char real[128], link[128];
  snprintf(real, sizeof(real), "%s/real", rdir);
  snprintf(link, sizeof(link), "%s/link", rdir);
  cr_assert_eq(mkdir(real, 0700), 0);
  cr_assert_eq(symlink(real, link), 0);
  const char *name = th_region_name();
  ecc_connector *c = open_in(link, name, NULL);
  cr_expect_str_eq(describe(c).region_path, th_region_path(real, name),
                   "the region path should name the real directory");
  cr_expect(th_exists(th_region_path(real, name)));
  cr_assert_eq(ecc_close(c), ECC_OK);
  if (geteuid() != 0)
    SKIP("needs root to give the directory to another user");
  cr_assert_eq(chown(real, OTHER_UID, OTHER_UID), 0);
  expect_dir_refused(link, NULL, ECC_ERR_REGION, "is owned by uid 65534");
  expect_dir_refused(link, NULL, ECC_ERR_REGION, real);
  cr_expect_eq(th_count_entries(real), 0);
}

Test(life, reaper_never_follows_another_users_link_out_of_the_directory)
{
  /* The attack: a user's link in a sticky directory, named as a shared
   * region.dir, points at a directory of root's holding files the reaper
   * would take for orphans. */
  if (geteuid() != 0)
    SKIP("needs root to make a link that belongs to another user");
  char victim[128], shared[128], link[160];
  snprintf(victim, sizeof(victim), "%s/root-only", rdir);
  snprintf(shared, sizeof(shared), "%s/shared", rdir);
  snprintf(link, sizeof(link), "%s/cache", shared);
  cr_assert_eq(mkdir(victim, 0700), 0);
  cr_assert_eq(mkdir(shared, 0700), 0);
  cr_assert_eq(chmod(shared, 01777), 0);
  const char *kept[2] = {th_region_path(victim, "victim"), NULL};
  make_region_file(kept[0], 0);
  char tmp[200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", th_region_path(victim, "victim2"));
  make_region_file(tmp, 0);
  kept[1] = tmp;
  cr_assert_eq(symlink(victim, link), 0);
  cr_assert_eq(lchown(link, OTHER_UID, OTHER_UID), 0);
  expect_dir_refused(link, NULL, ECC_ERR_REGION,
                     "is a symbolic link owned by uid 65534, not by root or by this process's user");
  expect_dir_refused(link, "reap_orphans = false\n", ECC_ERR_REGION, link);
  for (int i = 0; i < 2; i++)
    cr_expect(th_exists(kept[i]), "the reaper removed %s through another user's link", kept[i]);
  cr_expect_eq(th_count_entries(victim), 2);
}

/* ---- the per-user default directory ------------------------------------ */

/* Runs fn in a forked child with all its ids set to uid (fn makes no
 * threads, so no exec is needed); returns fn's result and its message. */
struct as_user {
  int rc;
  char text[512];
};

static struct as_user run_as(uid_t uid, int (*fn)(char *text, size_t cap))
{
  int out[2];
  cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    struct as_user r = {ECC_ERR_SYSTEM, "cannot change user"};
    if (setgroups(0, NULL) == 0 && setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0)
      r.rc = fn(r.text, sizeof(r.text));
    _exit(write(out[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
  }
  close(out[1]);
  struct as_user r;
  cr_assert_eq(read(out[0], &r, sizeof(r)), (ssize_t)sizeof(r), "the child died");
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return r;
}

/* In the child: open and close a region in the default directory. */
static int open_default(char *text, size_t cap)
{
  struct ecc_log log;
  log_init(&log, NULL);
  struct region_params p = params(NULL, "mine", REGION_AUTO, 1000, 1);
  struct region r;
  int rc = region_open(&p, &r, &log);
  if (rc == ECC_OK) {
    snprintf(text, cap, "%s", r.path);
    region_close(&r, &log);
  } else {
    log_last(&log, text, cap);
  }
  return rc;
}

static const char *default_dir_of(uid_t uid)
{
  static char dir[64];
  snprintf(dir, sizeof(dir), "/dev/shm/ecc-%u", (unsigned)uid);
  return dir;
}

/* A test user of its own per test: tests of a suite run side by side. */
static const char *fresh_default_dir(uid_t uid)
{
  if (geteuid() != 0)
    SKIP("needs root to act as another user");
  th_remove_tree(default_dir_of(uid));
  cr_assert(!th_exists(default_dir_of(uid)));
  return default_dir_of(uid);
}

Test(life, default_directory_is_made_for_this_user_alone)
{
  uid_t uid = 54301;
  const char *dir = fresh_default_dir(uid);
  struct as_user r = run_as(uid, open_default);
  struct stat st;
  int made = lstat(dir, &st) == 0;
  int entries = th_count_entries(dir);
  th_remove_tree(dir);
  cr_assert_eq(r.rc, ECC_OK, "%s", r.text);
  cr_expect_str_eq(r.text, th_region_path(dir, "mine"));
  cr_assert(made, "%s was not made", dir);
  cr_expect(S_ISDIR(st.st_mode));
  cr_expect_eq(st.st_uid, uid);
  cr_expect_eq(st.st_mode & 07777, 0700);
  cr_expect_eq(entries, 0, "closing left files in %s", dir);
}

static void expect_default_refused(uid_t uid, const char *needle)
{
  const char *dir = default_dir_of(uid);
  struct as_user r = run_as(uid, open_default);
  int entries = th_count_entries(dir);
  th_remove_tree(dir);
  unlink(dir);
  cr_expect_eq(r.rc, ECC_ERR_REGION, "rc %d: %s", r.rc, r.text);
  cr_expect_not_null(strstr(r.text, dir), "'%s' does not name %s", r.text, dir);
  cr_expect_not_null(strstr(r.text, needle), "'%s' lacks '%s'", r.text, needle);
  cr_expect_not_null(strstr(r.text, "remove it or set region.dir"), "%s", r.text);
  cr_expect_leq(entries, 0, "something was made in the refused directory");
}

Test(life, default_directory_made_by_another_user_is_refused)
{
  uid_t uid = 54302;
  const char *dir = fresh_default_dir(uid);
  cr_assert_eq(mkdir(dir, 0700), 0);
  cr_assert_eq(chown(dir, OTHER_UID, OTHER_UID), 0);
  expect_default_refused(uid, "belongs to uid 65534");
}

Test(life, default_directory_open_to_others_or_a_link_is_refused)
{
  uid_t uid = 54303;
  const char *dir = fresh_default_dir(uid);
  cr_assert_eq(mkdir(dir, 0700), 0);
  cr_assert_eq(chown(dir, uid, uid), 0);
  cr_assert_eq(chmod(dir, 0755), 0);
  expect_default_refused(uid, "has mode 0755");
  char target[128];
  snprintf(target, sizeof(target), "%s/target", rdir);
  cr_assert_eq(mkdir(target, 0700), 0);
  cr_assert_eq(chown(target, uid, uid), 0);
  cr_assert_eq(symlink(target, dir), 0);
  cr_assert_eq(lchown(dir, uid, uid), 0);
  expect_default_refused(uid, "is a symbolic link");
}

/* In the child: the summary validate prints, for the default directory. */
static int summarise_default(char *text, size_t cap)
{
  ecc_kv_v1 kv[] = {{"region.name", "x"}, {"region.block_size", "4096"}, {"region.size", "1MiB"}};
  struct plugin_config cfg;
  int rc = config_parse(kv, 3, &cfg, text, cap);
  if (rc == ECC_OK)
    conn_summary(&cfg, text, cap);
  return rc;
}

Test(life, validation_names_the_default_directory_and_makes_nothing)
{
  uid_t uid = 54304;
  const char *dir = fresh_default_dir(uid);
  struct as_user r = run_as(uid, summarise_default);
  cr_assert_eq(r.rc, ECC_OK, "%s", r.text);
  cr_expect_not_null(strstr(r.text, th_region_path(dir, "x")), "summary: %s", r.text);
  cr_expect(!th_exists(dir), "validation made %s", dir);
}
