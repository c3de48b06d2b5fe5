/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_region_life.c - the region file's life across processes: the last
 * holder removes it (so a restarted side joins the live file), a file
 * removed, replaced or truncated underneath is reported, racing starters
 * build it once, region.dir is checked, sparse and stale temporary files.
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

#include "common/log.h"
#include "core/config/config.h"
#include "core/conn.h"
#include "core/region/region.h"
#include "tests/core/unit_helpers.h"
#include "tests/helpers.h"

#define BS 4096u
#define NB 512u
#define OTHER_UID 65534 /* nobody */

static char rdir[64];
static struct ecc_log tlog;

static void setup(void)
{
  th_captured[0] = '\0';
  log_init(&tlog, th_capturing_host());
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
#define SKIP(...)              \
  do {                         \
    teardown();                \
    cr_skip_test(__VA_ARGS__); \
  } while (0)

static struct region_params params(const char *dir, const char *name, int mode, uint32_t timeout_ms,
                                   int reap)
{
  struct region_params p = {.folder = dir,
                            .name = name,
                            .block_size = BS,
                            .num_blocks = NB,
                            .mode = mode,
                            .join_timeout_ms = timeout_ms,
                            .reap_orphans = reap};
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

/* ---- region.dir ----------------------------------------------------------- */

/* ecc_open with region.dir = dir refuses with `want`, naming `needle`. */
static void expect_dir_refused(const char *dir, const char *region_extra, int want,
                               const char *needle)
{
  const char *ini = th_ini_at(dir, "both", th_region_name(), BS, NB, region_extra, NULL);
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int fds = th_count_fds();
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, want, "region.dir %s: rc %d (%s): %s", dir, rc, ecc_strerror(rc), err);
  cr_assert_null(c);
  cr_expect_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_expect_eq(th_count_fds(), fds, "a refused open leaked a descriptor");
}

static ecc_connector_t *open_in(const char *dir, const char *name, const char *region_extra)
{
  const char *ini = th_ini_at(dir, "both", name, BS, NB, region_extra, NULL);
  ecc_connector_t *c = NULL;
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
  ecc_connector_t *c = open_in(dir, name, "require_tmpfs = false\n");
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
  ecc_connector_t *c = open_in(dir, name, NULL);
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
  ecc_connector_t *c = open_in(link, name, NULL);
  cr_expect_str_eq(th_describe(c).region_path, th_region_path(real, name),
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
  expect_dir_refused(
      link, NULL, ECC_ERR_REGION,
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
  ecc_kv_v1_t kv[] = {{"region.name", "x"}, {"region.block_size", "4096"}, {"region.size", "1MiB"}};
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

static void write_bytes(const char *path, const char *text)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* ---- connectors through the shim, in this process --------------------- */

static uint64_t seed_of(uint64_t seed, uint32_t i)
{
  return seed * 100000 + i;
}

/* Entries of one block each: entry i lives in block first + i and holds
 * th_fill(seed_of(seed, i)). Returns the first failure, or ECC_OK. */
static int save_entries(ecc_connector_t *c, uint64_t seed, uint32_t first, uint32_t count)
{
  uint8_t *src = malloc((size_t)count * BS);
  uint32_t *ids = malloc(count * sizeof(uint32_t));
  ecc_save_entry_t *e = calloc(count, sizeof(*e));
  char(*keys)[32] = calloc(count, 32);
  ecc_completion_t *done = calloc(count, sizeof(*done));
  if (src == NULL || ids == NULL || e == NULL || keys == NULL || done == NULL)
    return ECC_ERR_NOMEM;
  for (uint32_t i = 0; i < count; i++) {
    th_fill(src + (size_t)i * BS, BS, seed_of(seed, i));
    ids[i] = first + i;
    snprintf(keys[i], 32, "k%llu-%u", (unsigned long long)seed, i);
    e[i] = (ecc_save_entry_t){keys[i], (uint64_t)(uintptr_t)(src + (size_t)i * BS), BS, &ids[i], 1};
  }
  int rc = ecc_save(c, e, count);
  if (rc == ECC_OK)
    rc = ecc_flush(c, NULL);
  size_t got = 0;
  for (int spins = 0; rc == ECC_OK && got < count && spins < 200000; spins++) {
    size_t n = 0;
    rc = ecc_poll(c, done + got, count - got, &n);
    for (size_t k = got; rc == ECC_OK && k < got + n; k++)
      rc = done[k].status;
    got += n;
    if (n == 0)
      usleep(50);
  }
  if (rc == ECC_OK && got < count)
    rc = ECC_ERR_TRANSFER;
  free(src);
  free(ids);
  free(e);
  free(keys);
  free(done);
  return rc;
}

/* Loads what save_entries wrote; returns how many entries differ (or -1
 * if the load itself failed). */
static int load_wrong(ecc_connector_t *c, uint64_t seed, uint32_t first, uint32_t count)
{
  uint8_t *dst = calloc(count, BS), *want = malloc(BS);
  uint32_t *ids = malloc(count * sizeof(uint32_t));
  ecc_load_entry_t *e = calloc(count, sizeof(*e));
  ecc_completion_t *done = calloc(count, sizeof(*done));
  if (dst == NULL || want == NULL || ids == NULL || e == NULL || done == NULL)
    return -1;
  for (uint32_t i = 0; i < count; i++) {
    ids[i] = first + i;
    e[i] = (ecc_load_entry_t){i, &ids[i], 1, (uint64_t)(uintptr_t)(dst + (size_t)i * BS), BS};
  }
  int rc = ecc_load(c, e, count, NULL);
  size_t got = 0;
  for (int spins = 0; rc == ECC_OK && got < count && spins < 200000; spins++) {
    size_t n = 0;
    rc = ecc_poll(c, done + got, count - got, &n);
    for (size_t k = got; rc == ECC_OK && k < got + n; k++)
      rc = done[k].status;
    got += n;
    if (n == 0)
      usleep(50);
  }
  int wrong = rc == ECC_OK && got == count ? 0 : -1;
  for (uint32_t i = 0; wrong >= 0 && i < count; i++) {
    th_fill(want, BS, seed_of(seed, i));
    wrong += memcmp(want, dst + (size_t)i * BS, BS) != 0;
  }
  free(dst);
  free(want);
  free(ids);
  free(e);
  free(done);
  return wrong;
}

/* ---- a connector in another process, driven over two pipes ----------- */

enum { CMD_OPEN = 1, CMD_SAVE, CMD_LOAD, CMD_CLOSE };

struct cmd {
  int op;
  char role[16]; /* CMD_OPEN: connector.role */
  uint64_t seed; /* CMD_SAVE, CMD_LOAD: see save_entries */
  uint32_t first, count;
};

struct reply {
  int rc;
  int creator;       /* CMD_OPEN */
  int wrong;         /* CMD_LOAD: entries that differ */
  uint64_t dev, ino; /* CMD_OPEN: the region file */
  char text[400];    /* CMD_OPEN: the error */
};

static void remote_open(const char *ini, const struct cmd *m, ecc_connector_t **c, struct reply *r)
{
  ecc_kv_t kv = {"connector.role", m->role};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = -1};
  r->rc = ecc_open(ini, &o, c, r->text, sizeof(r->text));
  if (r->rc != ECC_OK)
    return;
  ecc_info_t info = {.struct_size = sizeof(info)};
  struct stat st;
  if (ecc_describe(*c, &info) == ECC_OK && stat(info.region_path, &st) == 0) {
    r->creator = (int)info.creator;
    r->dev = st.st_dev;
    r->ino = st.st_ino;
  }
}

/* The child: one connector, opened, used and closed as it is told; it
 * exits (without closing) when the pipe closes. */
static void remote(const char *ini, int cmd_fd, int reply_fd)
{
  ecc_connector_t *c = NULL;
  struct cmd m;
  while (read(cmd_fd, &m, sizeof(m)) == (ssize_t)sizeof(m)) {
    struct reply r;
    memset(&r, 0, sizeof(r));
    if (m.op == CMD_OPEN)
      remote_open(ini, &m, &c, &r);
    else if (m.op == CMD_SAVE)
      r.rc = save_entries(c, m.seed, m.first, m.count);
    else if (m.op == CMD_LOAD)
      r.wrong = load_wrong(c, m.seed, m.first, m.count);
    else if (m.op == CMD_CLOSE)
      r.rc = ecc_close(c);
    if (write(reply_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
      _exit(90);
  }
  _exit(0);
}

/* Children are this test binary again, picked up before Criterion's main:
 * they start connector threads, which a forked test process must not. */
__attribute__((constructor)) static void child_entry(void)
{
  const char *role, *ini;
  int cmd_fd, reply_fd;
  if (!th_child_args(&role, &ini, &cmd_fd, &reply_fd))
    return;
  if (strcmp(role, "remote") == 0)
    remote(ini, cmd_fd, reply_fd);
  _exit(94);
}

struct remote {
  pid_t pid;
  int cmd;   /* write end */
  int reply; /* read end */
};

static struct remote remote_start(const char *ini)
{
  int cmd[2], reply[2];
  cr_assert_eq(pipe2(cmd, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(reply, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("remote", ini, cmd[0], reply[1]);
  close(cmd[0]);
  close(reply[1]);
  struct remote r = {pid, cmd[1], reply[0]};
  return r;
}

static int remote_send(struct remote *r, int op, const char *role, uint64_t seed, uint32_t first,
                       uint32_t count)
{
  struct cmd m = {.op = op, .seed = seed, .first = first, .count = count};
  snprintf(m.role, sizeof(m.role), "%s", role ? role : "");
  return write(r->cmd, &m, sizeof(m)) == (ssize_t)sizeof(m) ? 0 : -1;
}

/* 0 with the reply, or -1 if the child said nothing for 60 s or died. */
static int remote_wait(struct remote *r, struct reply *out)
{
  struct pollfd p = {.fd = r->reply, .events = POLLIN};
  if (poll(&p, 1, 60000) != 1)
    return -1;
  return read(r->reply, out, sizeof(*out)) == (ssize_t)sizeof(*out) ? 0 : -1;
}

static struct reply remote_do(struct remote *r, int op, const char *role, uint64_t seed,
                              uint32_t first, uint32_t count)
{
  struct reply out;
  cr_assert_eq(remote_send(r, op, role, seed, first, count), 0, "child %d is gone", (int)r->pid);
  cr_assert_eq(remote_wait(r, &out), 0, "child %d did not answer", (int)r->pid);
  return out;
}

static void remote_stop(struct remote *r)
{
  close(r->cmd);
  close(r->reply);
  int status = 0;
  waitpid(r->pid, &status, 0);
}

/* ---- the last holder removes the file; restarts join it --------------- */

#define ENTRIES 500u

Test(life, restarted_producer_joins_the_region_the_consumer_still_holds)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, BS, NB, "join_timeout_ms = 5000\n", NULL);
  const char *path = th_region_path(rdir, name);
  struct remote prod = remote_start(ini);
  struct reply r = remote_do(&prod, CMD_OPEN, "producer", 0, 0, 0);
  cr_assert_eq(r.rc, ECC_OK, "producer: %s", r.text);
  cr_assert_eq(r.creator, 1);
  uint64_t dev = r.dev, ino = r.ino;
  ecc_connector_t *cons = th_open_as(ini, "consumer");
  cr_assert_eq(remote_do(&prod, CMD_SAVE, NULL, 1, 0, ENTRIES).rc, ECC_OK);
  cr_assert_eq(load_wrong(cons, 1, 0, ENTRIES), 0);

  cr_assert_eq(remote_do(&prod, CMD_CLOSE, NULL, 0, 0, 0).rc, ECC_OK);
  cr_assert(th_exists(path), "the producer removed the region the consumer holds");
  r = remote_do(&prod, CMD_OPEN, "producer", 0, 0, 0);
  cr_assert_eq(r.rc, ECC_OK, "producer again: %s", r.text);
  cr_expect_eq(r.creator, 0, "the restarted producer created a second region");
  cr_assert(r.dev == dev && r.ino == ino, "the restarted producer is on another file");
  cr_assert_eq(remote_do(&prod, CMD_SAVE, NULL, 2, 0, ENTRIES).rc, ECC_OK);
  int wrong = load_wrong(cons, 2, 0, ENTRIES);
  cr_assert_eq(wrong, 0, "%d of %u entries loaded after the restart are not the new bytes", wrong,
               ENTRIES);

  cr_assert_eq(remote_do(&prod, CMD_CLOSE, NULL, 0, 0, 0).rc, ECC_OK);
  remote_stop(&prod);
  cr_assert(th_exists(path));
  cr_assert_eq(ecc_close(cons), ECC_OK);
  cr_expect(!th_exists(path), "the last holder left the region behind");
}

Test(life, restarted_consumer_that_created_the_region_joins_it_again)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, BS, NB, "join_timeout_ms = 5000\n", NULL);
  const char *path = th_region_path(rdir, name);
  struct remote cons = remote_start(ini);
  struct reply r = remote_do(&cons, CMD_OPEN, "consumer", 0, 0, 0);
  cr_assert_eq(r.rc, ECC_OK, "consumer: %s", r.text);
  cr_assert_eq(r.creator, 1);
  uint64_t dev = r.dev, ino = r.ino;
  ecc_connector_t *prod = th_open_as(ini, "producer");
  cr_assert_eq(th_describe(prod).creator, 0);
  cr_assert_eq(save_entries(prod, 1, 0, ENTRIES), ECC_OK);
  cr_assert_eq(remote_do(&cons, CMD_LOAD, NULL, 1, 0, ENTRIES).wrong, 0);

  cr_assert_eq(remote_do(&cons, CMD_CLOSE, NULL, 0, 0, 0).rc, ECC_OK);
  cr_assert(th_exists(path), "the consumer removed the region the producer holds");
  r = remote_do(&cons, CMD_OPEN, "consumer", 0, 0, 0);
  cr_assert_eq(r.rc, ECC_OK, "consumer again: %s", r.text);
  cr_expect_eq(r.creator, 0, "the restarted consumer created a second region");
  cr_assert(r.dev == dev && r.ino == ino, "the restarted consumer is on another file");
  cr_assert_eq(save_entries(prod, 2, 0, ENTRIES), ECC_OK);
  r = remote_do(&cons, CMD_LOAD, NULL, 2, 0, ENTRIES);
  cr_assert_eq(r.wrong, 0, "%d of %u entries loaded after the restart are not the new bytes",
               r.wrong, ENTRIES);

  cr_assert_eq(remote_do(&cons, CMD_CLOSE, NULL, 0, 0, 0).rc, ECC_OK);
  remote_stop(&cons);
  cr_assert_eq(ecc_close(prod), ECC_OK);
  cr_expect(!th_exists(path), "the last holder left the region behind");
}

Test(life, last_holder_removes_the_file_in_either_order)
{
  for (int creator_first = 0; creator_first < 2; creator_first++) {
    const char *name = th_region_name();
    struct region_params p = params(rdir, name, REGION_AUTO, 1000, 0);
    struct region a, b;
    cr_assert_eq(region_open(&p, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
    cr_assert_eq(region_open(&p, &b, &tlog), ECC_OK, "%s", th_log_last(&tlog));
    cr_assert(a.creator == 1 && b.creator == 0);
    region_close(creator_first ? &a : &b, &tlog);
    cr_assert(th_exists(th_region_path(rdir, name)), "%s closed first and removed the region",
              creator_first ? "the creator" : "the joiner");
    region_close(creator_first ? &b : &a, &tlog);
    cr_assert(!th_exists(th_region_path(rdir, name)), "the last holder (%s) left it behind",
              creator_first ? "the joiner" : "the creator");
  }
  cr_assert_eq(th_count_entries(rdir), 0);
}

struct closer {
  struct region r;
  pthread_barrier_t *go;
};

static void *close_at_once(void *arg)
{
  struct closer *c = arg;
  struct ecc_log quiet;
  log_init(&quiet, NULL);
  pthread_barrier_wait(c->go);
  region_close(&c->r, &quiet);
  log_destroy(&quiet);
  return NULL;
}

Test(life, two_holders_closing_at_once_leave_no_file)
{
  enum { ROUNDS = 300 };
  const char *name = th_region_name();
  struct region_params p = params(rdir, name, REGION_AUTO, 1000, 0);
  pthread_barrier_t go;
  cr_assert_eq(pthread_barrier_init(&go, NULL, 2), 0);
  int left = 0;
  for (int round = 0; round < ROUNDS; round++) {
    struct closer c[2] = {{.go = &go}, {.go = &go}};
    cr_assert_eq(region_open(&p, &c[0].r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
    cr_assert_eq(region_open(&p, &c[1].r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
      cr_assert_eq(pthread_create(&t[i], NULL, close_at_once, &c[i]), 0);
    for (int i = 0; i < 2; i++)
      pthread_join(t[i], NULL);
    left += th_exists(th_region_path(rdir, name));
    unlink(th_region_path(rdir, name));
  }
  pthread_barrier_destroy(&go);
  cr_assert_eq(left, 0, "%d of %d rounds left the region behind", left, ROUNDS);
}

/* ---- a region removed, replaced or truncated underneath ---------------- */

static void save_one(ecc_connector_t *c, const char *key, uint32_t block, const uint8_t *src)
{
  uint32_t id = block;
  ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src, BS, &id, 1};
  cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
}

static int load_one(ecc_connector_t *c, uint64_t id, uint32_t block, uint8_t *dst)
{
  ecc_load_entry_t e = {id, &block, 1, (uint64_t)(uintptr_t)dst, BS};
  return ecc_load(c, &e, 1, NULL);
}

static void expect_last_error(ecc_connector_t *c, const char *path, const char *needle)
{
  char text[512] = "";
  cr_assert_eq(ecc_last_error(c, text, sizeof(text)), ECC_OK);
  cr_expect_not_null(strstr(text, path), "last error '%s' does not name %s", text, path);
  cr_expect_not_null(strstr(text, needle), "last error '%s' lacks '%s'", text, needle);
}

/* A save flushed and one queued, then the file goes (`replace`: another file
 * is renamed over it). The flush and a load are refused, the flushed save is
 * reported with ECC_ERR_REGION, the queued one never reaches the old file,
 * and closing touches neither the replacement nor anything else. */
static void gone_underneath(int replace)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, BS, NB, NULL, NULL);
  ecc_connector_t *c = th_open_as(ini, "both");
  char path[256];
  snprintf(path, sizeof(path), "%s", th_describe(c).region_path);
  int old = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(old, 0);
  static uint8_t a[BS], b[BS], dst[BS];
  th_fill(a, BS, 1);
  th_fill(b, BS, 2);
  save_one(c, "flushed", 0, a);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  save_one(c, "queued", 1, b);
  char other[160];
  snprintf(other, sizeof(other), "%s/replacement", rdir);
  if (replace) {
    write_bytes(other, "someone else's file");
    cr_assert_eq(rename(other, path), 0);
  } else {
    cr_assert_eq(unlink(path), 0);
  }
  cr_expect_eq(ecc_flush(c, NULL), ECC_ERR_REGION, "a flush went through a dead region");
  expect_last_error(c, path, "removed or replaced");
  cr_expect_eq(load_one(c, 7, 0, dst), ECC_ERR_REGION, "a load read a dead region");
  expect_last_error(c, path, "removed or replaced");
  ecc_completion_t done[4];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_expect_str_eq(done[0].key, "flushed");
  cr_expect_eq(done[0].status, ECC_ERR_REGION, "a save into a dead region was reported %d",
               done[0].status);
  cr_expect_eq(th_poll_until(c, done, 1, 50), 0, "a refused call was reported");
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(c, &st), ECC_OK);
  cr_expect_eq(st.save.failed, 1, "the save reported failed is not counted failed");
  uint8_t block[BS], zero[BS] = {0};
  cr_assert_eq(pread(old, block, BS, REGION_HEADER_BYTES + BS), (ssize_t)BS);
  cr_expect_eq(memcmp(block, zero, BS), 0, "the queued save was copied into the dead file");
  close(old);
  cr_assert_eq(ecc_close(c), ECC_OK);
  if (replace) {
    char text[64] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    cr_assert_geq(fd, 0, "closing removed the file that replaced the region");
    cr_expect_gt(read(fd, text, sizeof(text) - 1), 0);
    close(fd);
    cr_expect_str_eq(text, "someone else's file");
    cr_assert_eq(unlink(path), 0);
  }
  cr_expect_eq(th_count_entries(rdir), 0);
}

Test(life, region_removed_underneath_is_reported_and_never_used)
{
  gone_underneath(0);
}

Test(life, region_replaced_underneath_is_reported_and_never_used)
{
  gone_underneath(1);
}

Test(life, region_truncated_while_mapped_is_reported_without_sigbus)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, BS, NB, NULL, NULL);
  ecc_connector_t *c = th_open_as(ini, "both");
  char path[256];
  snprintf(path, sizeof(path), "%s", th_describe(c).region_path);
  static uint8_t a[BS], dst[BS];
  th_fill(a, BS, 3);
  save_one(c, "before", 0, a);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[2];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_assert_eq(done[0].status, ECC_OK);
  /* Every block is now past the end of the file: touching one is SIGBUS. */
  cr_assert_eq(truncate(path, REGION_HEADER_BYTES), 0);
  cr_expect_eq(load_one(c, 1, 0, dst), ECC_ERR_REGION, "a load read a truncated region");
  expect_last_error(c, path, "truncated");
  uint32_t id = 0;
  ecc_save_entry_t e = {"after", (uint64_t)(uintptr_t)a, BS, &id, 1};
  cr_expect_eq(ecc_save(c, &e, 1), ECC_ERR_REGION, "a save started a batch on a truncated region");
  cr_expect_eq(ecc_flush(c, NULL), ECC_OK, "nothing is queued: flush has nothing to refuse");
  cr_expect_eq(th_poll_until(c, done, 1, 50), 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_expect_eq(th_count_entries(rdir), 0, "the last holder left the truncated region behind");
}

static ino_t ino_of(const char *path)
{
  struct stat st;
  cr_assert_eq(lstat(path, &st), 0, "%s: %s", path, strerror(errno));
  return st.st_ino;
}

/* ---- racing starters ------------------------------------------------------ */

/* Samples a filesystem's used bytes until told to stop; keeps the peak. */
struct sampler {
  const char *dir;
  atomic_int stop;
  uint64_t peak;
};

static void *sample_usage(void *arg)
{
  struct sampler *s = arg;
  while (!atomic_load(&s->stop)) {
    struct statvfs v;
    if (statvfs(s->dir, &v) == 0) {
      uint64_t used = (uint64_t)(v.f_blocks - v.f_bfree) * v.f_frsize;
      if (used > s->peak)
        s->peak = used;
    }
    usleep(100);
  }
  return NULL;
}

struct race_result {
  int opened, failed, enospc, creators, other_file, left;
  char first_error[400];
};

#define RACERS 8

/* One round: every racer opens at once, then every racer closes; the last
 * out removes the file. Failures are counted, not asserted, so that the
 * caller can unmount first. */
static int race_round(struct remote *r, struct race_result *res, const char *dir)
{
  struct reply rep[RACERS];
  for (int i = 0; i < RACERS; i++)
    if (remote_send(&r[i], CMD_OPEN, "both", 0, 0, 0) != 0)
      return -1;
  for (int i = 0; i < RACERS; i++)
    if (remote_wait(&r[i], &rep[i]) != 0)
      return -1;
  for (int i = 0; i < RACERS; i++) {
    if (rep[i].rc != ECC_OK) {
      res->failed++;
      res->enospc += strstr(rep[i].text, strerror(ENOSPC)) != NULL;
      if (res->first_error[0] == '\0')
        snprintf(res->first_error, sizeof(res->first_error), "%s", rep[i].text);
      continue;
    }
    res->opened++;
    res->creators += rep[i].creator;
    res->other_file += rep[i].ino != rep[0].ino;
  }
  for (int i = 0; i < RACERS; i++)
    if (rep[i].rc == ECC_OK && remote_send(&r[i], CMD_CLOSE, NULL, 0, 0, 0) != 0)
      return -1;
  for (int i = 0; i < RACERS; i++)
    if (rep[i].rc == ECC_OK && remote_wait(&r[i], &rep[i]) != 0)
      return -1;
  res->left += th_count_entries(dir);
  return 0;
}

/* RACERS processes open one absent region at once, `rounds` times, in a
 * private tmpfs of `fs_bytes`; the peak use of the tmpfs is sampled. */
static int race(uint64_t block_size, uint64_t blocks, uint64_t fs_bytes, int rounds,
                struct race_result *res, uint64_t *peak)
{
  char mnt[64], opts[64];
  snprintf(mnt, sizeof(mnt), "/tmp/ecc-race-XXXXXX");
  cr_assert_not_null(mkdtemp(mnt));
  snprintf(opts, sizeof(opts), "size=%llu,mode=0700", (unsigned long long)fs_bytes);
  if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
    int e = errno;
    rmdir(mnt);
    return e;
  }
  const char *ini = th_ini_at(mnt, "both", th_region_name(), block_size, blocks,
                              "join_timeout_ms = 20000\n", NULL);
  struct remote r[RACERS];
  for (int i = 0; i < RACERS; i++)
    r[i] = remote_start(ini);
  struct sampler s = {.dir = mnt};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, sample_usage, &s), 0);
  int broken = 0;
  for (int round = 0; round < rounds && !broken; round++)
    broken = race_round(r, res, mnt) != 0;
  atomic_store(&s.stop, 1);
  pthread_join(t, NULL);
  for (int i = 0; i < RACERS; i++)
    remote_stop(&r[i]);
  *peak = s.peak;
  cr_expect_eq(umount(mnt), 0, "umount %s: %s", mnt, strerror(errno));
  rmdir(mnt);
  cr_assert(!broken, "a racing process stopped answering");
  return 0;
}

Test(life, racing_starters_build_one_region_and_join_it)
{
  /* 32 MiB: building takes long enough for every racer to arrive. */
  uint64_t bs = 1 << 20, nb = 32, bytes = REGION_HEADER_BYTES + bs * nb;
  struct race_result res = {0};
  uint64_t peak = 0;
  int e = race(bs, nb, (RACERS + 2) * bytes, 2, &res, &peak);
  if (e != 0)
    SKIP("cannot mount a private tmpfs here (needs root or CAP_SYS_ADMIN): %s", strerror(e));
  cr_log_info("racing starters: peak use of the tmpfs %.1f MiB for one %.1f MiB region",
              peak / 1048576.0, bytes / 1048576.0);
  cr_assert_eq(res.failed, 0, "%d opens failed, e.g.: %s", res.failed, res.first_error);
  cr_expect_eq(res.creators, 2, "%d creators in 2 rounds", res.creators);
  cr_expect_eq(res.other_file, 0, "racers ended up on different files");
  cr_expect_eq(res.left, 0, "files were left behind");
  cr_expect_lt(peak, 2 * bytes, "the tmpfs held %llu bytes at once: more than one region",
               (unsigned long long)peak);
}

Test(life, racing_starters_fit_a_tmpfs_with_room_for_one_region)
{
  enum { ROUNDS = 20 };
  uint64_t bs = 1 << 20, nb = 8, bytes = REGION_HEADER_BYTES + bs * nb;
  struct race_result res = {0};
  uint64_t peak = 0;
  int e = race(bs, nb, bytes + (1 << 20), ROUNDS, &res, &peak);
  if (e != 0)
    SKIP("cannot mount a private tmpfs here (needs root or CAP_SYS_ADMIN): %s", strerror(e));
  cr_log_info("tmpfs with room for one region: %d opens, %d failed (%d ENOSPC)",
              res.opened + res.failed, res.failed, res.enospc);
  cr_assert_eq(res.enospc, 0, "%d of %d opens failed with ENOSPC, e.g.: %s", res.enospc,
               RACERS * ROUNDS, res.first_error);
  cr_assert_eq(res.failed, 0, "%d opens failed, e.g.: %s", res.failed, res.first_error);
  cr_expect_eq(res.creators, ROUNDS);
  cr_expect_eq(res.left, 0);
}

/* ---- temporary files ---------------------------------------------------- */

static const char *tmp_of(const char *name)
{
  static char paths[4][200];
  static unsigned n;
  char *p = paths[n++ % 4];
  snprintf(p, 200, "%s.tmp", th_region_path(rdir, name));
  return p;
}

/* A builder that dies while sizing its temporary file: it locks it as
 * builders do, allocates it and is killed. */
static void builder_killed(const char *tmp)
{
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    off_t size = REGION_HEADER_BYTES + (off_t)BS * NB;
    if (fd < 0 || flock(fd, LOCK_SH) != 0 || posix_fallocate(fd, 0, size) != 0)
      _exit(1);
    if (write(ready[1], "r", 1) != 1)
      _exit(2);
    for (;;)
      pause();
  }
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the builder failed");
  close(ready[0]);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  waitpid(pid, NULL, 0);
}

Test(life, temporary_file_of_a_killed_builder_goes_whatever_reap_orphans_says)
{
  const char *name = th_region_name();
  builder_killed(tmp_of(name));
  cr_assert(th_exists(tmp_of(name)));
  struct region_params p = params(rdir, name, REGION_AUTO, 2000, 0);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_expect_eq(r.creator, 1);
  cr_expect(!th_exists(tmp_of(name)), "the dead builder's temporary file is still there");
  cr_expect_not_null(strstr(th_captured, "removed stale temporary file"), "log: %s", th_captured);
  cr_expect_eq(th_count_entries(rdir), 1);
  region_close(&r, &tlog);
  cr_expect_eq(th_count_entries(rdir), 0);
}

Test(life, leftover_temporary_files_go_and_unheld_regions_stay_without_reaping)
{
  char old_form[200];
  snprintf(old_form, sizeof(old_form), "%s.tmp.4242.0", th_region_path(rdir, "old"));
  make_region_file(old_form, 0);
  make_region_file(tmp_of("other"), 0);
  make_region_file(th_region_path(rdir, "orphan"), 0);
  const char *name = th_region_name();
  struct region_params p = params(rdir, name, REGION_AUTO, 2000, 0);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_expect(!th_exists(old_form), "an unheld temporary file of the old form is still there");
  cr_expect(!th_exists(tmp_of("other")), "an unheld temporary file is still there");
  cr_expect(th_exists(th_region_path(rdir, "orphan")), "a region was reaped with reaping off");
  /* The directory was scanned: a later open in this process looks at its
   * own names only, so a scan is paid once, not per open. */
  make_region_file(tmp_of("later"), 0);
  struct region r2;
  struct region_params p2 = params(rdir, th_region_name(), REGION_AUTO, 2000, 1);
  cr_assert_eq(region_open(&p2, &r2, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_expect(th_exists(tmp_of("later")), "a second open in one process scanned again");
  cr_expect(!th_exists(th_region_path(rdir, "orphan")),
            "the first open with reaping on did not scan for orphaned regions");
  region_close(&r2, &tlog);
  region_close(&r, &tlog);
  cr_expect_eq(region_reap_orphans(rdir, &tlog), 1);
  cr_expect_eq(th_count_entries(rdir), 0);
}

struct opener {
  struct region_params p;
  struct region r;
  struct ecc_log log; /* join_in_thread's */
  int rc;
  atomic_int done;
};

static void *open_in_thread(void *arg)
{
  struct opener *o = arg;
  struct ecc_log quiet;
  log_init(&quiet, NULL);
  o->rc = region_open(&o->p, &o->r, &quiet);
  log_destroy(&quiet);
  atomic_store(&o->done, 1);
  return NULL;
}

Test(life, temporary_file_being_built_is_waited_for_not_removed)
{
  const char *name = th_region_name();
  const char *tmp = tmp_of(name), *path = th_region_path(rdir, name);
  int builder = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(builder, 0);
  cr_assert_eq(flock(builder, LOCK_SH), 0);
  ino_t ino = ino_of(tmp);
  /* A short wait ends in an error that says why, and builds nothing. */
  struct region_params p = params(rdir, name, REGION_AUTO, 200, 1);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_REGION, "%s", th_log_last(&tlog));
  cr_expect_not_null(strstr(th_log_last(&tlog), "another process is still building it"), "%s",
                     th_log_last(&tlog));
  cr_expect_eq(ino_of(tmp), ino, "a temporary file being built was removed");
  cr_expect_eq(th_count_entries(rdir), 1);
  /* A longer one joins the region once the builder has linked it in. */
  struct opener o = {.p = params(rdir, name, REGION_AUTO, 20000, 1)};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, open_in_thread, &o), 0);
  usleep(50 * 1000);
  cr_expect_eq(atomic_load(&o.done), 0, "the open did not wait for the builder");
  make_region_file(path, 0);
  cr_assert_eq(unlink(tmp), 0);
  close(builder);
  pthread_join(t, NULL);
  cr_assert_eq(o.rc, ECC_OK);
  cr_expect_eq(o.r.creator, 0, "the waiting open built a region of its own");
  cr_expect_eq(o.r.ino, ino_of(path));
  region_close(&o.r, &tlog);
  cr_expect_eq(th_count_entries(rdir), 0);
}

/* ---- a builder that dies while joiners wait ---------------------------- */

static int format_nothing(void *arg, uint8_t *mem, uint64_t bytes, struct ecc_log *log)
{
  (void)arg;
  (void)mem;
  (void)bytes;
  (void)log;
  return ECC_OK;
}

/* A builder's directory formatter that tells the test it is mid-build (its
 * file sized, pre-faulted and locked) and never returns. */
static int format_and_hang(void *arg, uint8_t *mem, uint64_t bytes, struct ecc_log *log)
{
  (void)mem;
  (void)bytes;
  (void)log;
  if (write(*(int *)arg, "b", 1) != 1)
    _exit(3);
  for (;;)
    pause();
}

static struct region_params with_directory(struct region_params p, int *ready_fd)
{
  p.dir_bytes = 4096;
  p.dir_format = ready_fd != NULL ? format_and_hang : format_nothing;
  p.dir_arg = ready_fd;
  return p;
}

/* Forks a real builder of `name` and returns once it is mid-build. */
static pid_t builder_mid_build(const char *name)
{
  int ready[2];
  cr_assert_eq(pipe(ready), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    struct ecc_log quiet;
    log_init(&quiet, NULL);
    struct region_params p = with_directory(params(rdir, name, REGION_AUTO, 2000, 0), &ready[1]);
    struct region r;
    region_open(&p, &r, &quiet);
    _exit(4); /* never reached: the formatter hangs */
  }
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the builder did not get to its directory");
  close(ready[0]);
  return pid;
}

static void *join_in_thread(void *arg)
{
  struct opener *o = arg;
  o->rc = region_open(&o->p, &o->r, &o->log);
  atomic_store(&o->done, 1);
  return NULL;
}

Test(life, joiners_of_a_builder_killed_mid_build_fail_at_once_and_remove_its_file)
{
  const char *name = th_region_name();
  pid_t builder = builder_mid_build(name);
  cr_assert(th_exists(tmp_of(name)));
  struct opener o[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&o[i], 0, sizeof(o[i]));
    o[i].p = with_directory(params(rdir, name, REGION_JOIN, 8000, 0), NULL);
    log_init(&o[i].log, NULL);
    cr_assert_eq(pthread_create(&t[i], NULL, join_in_thread, &o[i]), 0);
  }
  usleep(100 * 1000);
  cr_expect_eq(atomic_load(&o[0].done) + atomic_load(&o[1].done), 0,
               "a joiner did not wait for a live builder");
  uint64_t killed = th_now_ns();
  cr_assert_eq(kill(builder, SIGKILL), 0);
  cr_assert_eq(waitpid(builder, NULL, 0), builder);
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    double ms = (double)(th_now_ns() - killed) / 1e6;
    const char *text = th_log_last(&o[i].log);
    cr_expect_eq(o[i].rc, ECC_ERR_REGION, "joiner %d: rc %d: %s", i, o[i].rc, text);
    cr_expect_lt(ms, 2000.0, "joiner %d returned %.0f ms after its builder died", i, ms);
    char pid[32];
    snprintf(pid, sizeof(pid), "(pid %d) died", (int)builder);
    cr_expect_not_null(strstr(text, pid), "joiner %d: '%s' lacks '%s'", i, text, pid);
    cr_expect_not_null(strstr(text, "Start the process that creates the region again"), "%s", text);
    log_destroy(&o[i].log);
  }
  cr_expect(!th_exists(tmp_of(name)), "the dead builder's temporary file is still there");
  cr_expect_eq(th_count_entries(rdir), 0);
}

/* A builder that died between creating its file and locking it left it
 * empty: a joiner gives it a moment, then knows. */
Test(life, empty_temporary_file_nobody_takes_up_ends_the_join_within_a_second)
{
  const char *name = th_region_name();
  struct opener o = {.p = params(rdir, name, REGION_JOIN, 8000, 0)};
  log_init(&o.log, NULL);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, join_in_thread, &o), 0);
  usleep(50 * 1000);
  uint64_t made = th_now_ns();
  int fd = open(tmp_of(name), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0);
  close(fd);
  pthread_join(t, NULL);
  double ms = (double)(th_now_ns() - made) / 1e6;
  cr_expect_eq(o.rc, ECC_ERR_REGION, "rc %d: %s", o.rc, th_log_last(&o.log));
  cr_expect_gt(ms, 400.0, "an empty file was judged before a builder could lock it");
  cr_expect_lt(ms, 1500.0, "the join ended %.0f ms after the file appeared", ms);
  cr_expect_not_null(strstr(th_log_last(&o.log), "died or gave up"), "%s", th_log_last(&o.log));
  cr_expect(!th_exists(tmp_of(name)));
  log_destroy(&o.log);
}

/* ---- sparse regions at join ---------------------------------------------- */

struct file_state {
  struct stat st;
  struct region_header h;
};

static struct file_state state_of(const char *path)
{
  struct file_state s;
  memset(&s, 0, sizeof(s));
  cr_assert_eq(lstat(path, &s.st), 0, "%s: %s", path, strerror(errno));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(pread(fd, &s.h, sizeof(s.h), 0), (ssize_t)sizeof(s.h));
  close(fd);
  return s;
}

static void expect_unchanged(const char *path, const struct file_state *before)
{
  struct file_state now = state_of(path);
  cr_expect_eq(now.st.st_ino, before->st.st_ino, "%s was replaced", path);
  cr_expect_eq(now.st.st_size, before->st.st_size, "%s changed size", path);
  cr_expect_eq(now.st.st_blocks, before->st.st_blocks, "%s got blocks allocated", path);
  cr_expect_eq(now.st.st_mtim.tv_nsec, before->st.st_mtim.tv_nsec, "%s was written", path);
  cr_expect_eq(memcmp(&now.h, &before->h, sizeof(now.h)), 0, "%s's header changed", path);
}

static void expect_sparse_refused(const struct region_params *p, const char *path,
                                  const struct file_state *before)
{
  struct region r;
  int fds = th_count_fds();
  int rc = region_open(p, &r, &tlog);
  cr_assert_eq(rc, ECC_ERR_REGION, "a sparse region was accepted (rc %d): %s", rc,
               th_log_last(&tlog));
  char want[160];
  snprintf(want, sizeof(want), "%llu bytes are allocated of the %lld it holds",
           (unsigned long long)before->st.st_blocks * 512, (long long)before->st.st_size);
  cr_expect_not_null(strstr(th_log_last(&tlog), path), "'%s' does not name the file",
                     th_log_last(&tlog));
  cr_expect_not_null(strstr(th_log_last(&tlog), "is sparse"), "%s", th_log_last(&tlog));
  cr_expect_not_null(strstr(th_log_last(&tlog), want), "'%s' lacks '%s'", th_log_last(&tlog), want);
  cr_expect_eq(th_count_fds(), fds);
  expect_unchanged(path, before);
}

Test(life, sparse_region_is_refused_at_join_and_left_alone)
{
  const char *name = th_region_name();
  const char *path = th_region_path(rdir, name);
  make_region_file(path, 1);
  struct file_state before = state_of(path);
  cr_assert_lt(before.st.st_blocks * 512, before.st.st_size, "the file is not sparse here");
  /* Nobody holds it and reaping is off; then held, with reaping on. */
  struct region_params p = params(rdir, name, REGION_JOIN, 500, 0);
  expect_sparse_refused(&p, path, &before);
  p.mode = REGION_AUTO;
  expect_sparse_refused(&p, path, &before);
  int holder = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(holder, 0);
  cr_assert_eq(flock(holder, LOCK_SH), 0);
  p.reap_orphans = 1;
  expect_sparse_refused(&p, path, &before);
  close(holder);
  cr_expect_eq(th_count_entries(rdir), 1, "a refused join added or removed files");
}
