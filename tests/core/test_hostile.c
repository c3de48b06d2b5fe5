/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_hostile.c - hostile input end to end, through ecc_open and ecc_check:
 * unsafe or forged region files, unsafe plugin files and names, the plugin
 * directory variable in a setuid process, and malformed INI files. Each is
 * refused with a clear error, and nothing hostile is modified.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/region/region.h"
#include "tests/core/unit_helpers.h"
#include "tests/helpers.h"

#define BS 64u
#define NB 8u

static char hdir[64];

static void setup(void)
{
  snprintf(hdir, sizeof(hdir), "/dev/shm/ecchostile-XXXXXX");
  cr_assert_not_null(mkdtemp(hdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(hdir);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 60);

/* Empties the region directory between cases, so that the reaper of one
 * case never meets the leftovers of another. */
static void clear_hdir(void)
{
  th_remove_tree(hdir);
  cr_assert_eq(mkdir(hdir, 0700), 0, "mkdir %s: %s", hdir,
               strerror(errno)); /* as mkdtemp made it */
}

/* ---- hostile region files ---------------------------------------------- */

static const char *region_ini(const char *name, const char *extra)
{
  char region_extra[512];
  snprintf(region_extra, sizeof(region_extra), "join_timeout_ms = 200\n%s", extra ? extra : "");
  return th_ini_at(hdir, "both", name, BS, NB, region_extra, NULL);
}

static void write_region(const char *path, const struct region_header *h, off_t size, mode_t mode)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  cr_assert_eq(ftruncate(fd, size), 0);
  if (h != NULL)
    cr_assert_eq(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
  /* A byte in the first block, so that any write to the file shows. */
  if (size > (off_t)REGION_HEADER_BYTES)
    cr_assert_eq(pwrite(fd, "Z", 1, REGION_HEADER_BYTES), 1);
  cr_assert_eq(fchmod(fd, mode), 0);
  close(fd);
}

/* What a file looked like, to show that a refusal changed nothing. */
struct snap {
  struct stat st;
  char content[REGION_HEADER_BYTES + 1];
  ssize_t got;
  char link[256];
};

static struct snap snap_of(const char *path)
{
  struct snap s;
  memset(&s, 0, sizeof(s));
  cr_assert_eq(lstat(path, &s.st), 0, "%s: %s", path, strerror(errno));
  if (S_ISLNK(s.st.st_mode)) {
    cr_assert_gt(readlink(path, s.link, sizeof(s.link) - 1), 0);
  } else if (S_ISREG(s.st.st_mode)) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    s.got = pread(fd, s.content, sizeof(s.content), 0);
    close(fd);
  }
  return s;
}

static void expect_same(const char *path, const struct snap *before)
{
  struct snap now = snap_of(path);
  cr_expect_eq(now.st.st_ino, before->st.st_ino, "%s was replaced", path);
  cr_expect_eq(now.st.st_mode, before->st.st_mode, "%s changed mode", path);
  cr_expect_eq(now.st.st_uid, before->st.st_uid, "%s changed owner", path);
  cr_expect_eq(now.st.st_size, before->st.st_size, "%s changed size", path);
  cr_expect_eq(now.st.st_mtim.tv_sec, before->st.st_mtim.tv_sec, "%s was written", path);
  cr_expect_eq(now.st.st_mtim.tv_nsec, before->st.st_mtim.tv_nsec, "%s was written", path);
  cr_expect_eq(now.got, before->got);
  cr_expect_eq(memcmp(now.content, before->content, sizeof(now.content)), 0, "%s changed content",
               path);
  cr_expect_str_eq(now.link, before->link, "%s was retargeted", path);
}

/* ecc_open must fail with ECC_ERR_REGION naming `needle` and the path, and
 * leave `victim` (and the rest of the directory) as it was. */
static void expect_refused(const char *ini, const char *path, const char *victim,
                           const char *needle)
{
  struct snap before = snap_of(victim);
  int entries = th_count_entries(hdir);
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_REGION, "rc %d (%s): %s", rc, ecc_strerror(rc), err);
  cr_assert_null(c);
  cr_expect_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_expect_not_null(strstr(err, path), "error '%s' does not name %s", err, path);
  expect_same(victim, &before);
  cr_expect_eq(th_count_entries(hdir), entries, "a refused open added or removed files");
}

/* Each hostile kind: builds the file at `path` and says what the refusal
 * must mention. Returns the file to watch (the symlink's target too). */
typedef const char *(*make_hostile)(const char *path, const char **needle);

static const char *make_world_writable(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS, NB);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0666);
  *needle = "writable by group or others (mode 0666)";
  return path;
}

static const char *make_group_writable(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS, NB);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0620);
  *needle = "writable by group or others (mode 0620)";
  return path;
}

static const char *make_truncated(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS, NB);
  write_region(path, &h, REGION_HEADER_BYTES + BS * (NB - 1), 0600);
  *needle = "truncated";
  return path;
}

static const char *make_short_of_a_header(const char *path, const char **needle)
{
  write_region(path, NULL, 100, 0600);
  *needle = "truncated: 100 bytes";
  return path;
}

static const char *make_forged_count(const char *path, const char **needle)
{
  /* Consistent with itself and with nothing else: 1000 blocks claimed. */
  struct region_header h = th_region_header(BS, 1000);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  *needle = "truncated: its header declares";
  return path;
}

static const char *make_inconsistent(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS, NB);
  h.num_blocks = 1ull << 58; /* file_bytes still says NB blocks; the product wraps */
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  *needle = "inconsistent header";
  return path;
}

static const char *make_foreign(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS, NB);
  memcpy(h.magic,
         "\x7f"
         "ELF\2\1\1\0",
         8);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  *needle = "not an encoder-cache region";
  return path;
}

static const char *make_other_layout(const char *path, const char **needle)
{
  struct region_header h = th_region_header(BS * 2, NB / 2);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  *needle = "has blocks of 128 bytes but this connector is configured for blocks of 64 bytes";
  return path;
}

static const char *make_sparse(const char *path, const char **needle)
{
  /* A valid header and a hole where the blocks are: the file of a creator
   * that never allocated them, which a full tmpfs would answer with SIGBUS. */
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  cr_assert_eq(ftruncate(fd, REGION_HEADER_BYTES + BS * NB), 0);
  struct region_header h = th_region_header(BS, NB);
  cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
  close(fd);
  *needle = "is sparse";
  return path;
}

static const char *make_symlink(const char *path, const char **needle)
{
  static char target[200];
  snprintf(target, sizeof(target), "%s/target-of-symlink", hdir);
  struct region_header h = th_region_header(BS, NB);
  write_region(target, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  cr_assert_eq(symlink(target, path), 0);
  *needle = "symbolic link";
  return target; /* the link itself is checked by the caller too */
}

static const char *make_directory(const char *path, const char **needle)
{
  cr_assert_eq(mkdir(path, 0700), 0);
  *needle = "not a regular file";
  return path;
}

static const char *make_fifo(const char *path, const char **needle)
{
  cr_assert_eq(mkfifo(path, 0600), 0);
  *needle = "not a regular file";
  return path;
}

static const struct hostile_kind {
  const char *what;
  make_hostile make;
  int regular; /* a regular file of ours: an orphan the reaper may take */
} kinds[] = {
    {"world-writable", make_world_writable, 1},
    {"group-writable", make_group_writable, 1},
    {"truncated", make_truncated, 1},
    {"shorter than a header", make_short_of_a_header, 1},
    {"forged block count", make_forged_count, 1},
    {"inconsistent header", make_inconsistent, 1},
    {"foreign magic", make_foreign, 1},
    {"other layout", make_other_layout, 1},
    {"sparse", make_sparse, 1},
    {"symlink", make_symlink, 0},
    {"directory", make_directory, 0},
    {"fifo", make_fifo, 0},
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

Test(hostile, region_files_are_refused_and_left_alone_when_reaping_is_off)
{
  for (size_t i = 0; i < N_KINDS; i++) {
    const char *name = th_region_name();
    const char *path = th_region_path(hdir, name);
    const char *needle = NULL;
    const char *victim = kinds[i].make(path, &needle);
    cr_log_info("region file: %s", kinds[i].what);
    const char *ini = region_ini(name, "reap_orphans = false");
    expect_refused(ini, path, victim, needle);
    if (victim != path)
      expect_refused(ini, path, path, needle);
    ecc_kv_t join = {"region.mode", "join"};
    ecc_open_options_t o = {
        .struct_size = sizeof(o), .overrides = &join, .n_overrides = 1, .log_level = -1};
    ecc_connector_t *c = NULL;
    char err[1024];
    cr_expect_eq(ecc_open(ini, &o, &c, err, sizeof(err)), ECC_ERR_REGION,
                 "%s: mode join accepted it", kinds[i].what);
    clear_hdir();
  }
}

Test(hostile, region_files_held_by_a_live_process_are_refused_with_reaping_on)
{
  for (size_t i = 0; i < N_KINDS; i++) {
    const char *name = th_region_name();
    const char *path = th_region_path(hdir, name);
    const char *needle = NULL;
    const char *victim = kinds[i].make(path, &needle);
    int holder = -1;
    if (kinds[i].regular) {
      holder = open(path, O_RDONLY | O_CLOEXEC);
      cr_assert_geq(holder, 0);
      cr_assert_eq(flock(holder, LOCK_SH), 0);
    }
    cr_log_info("region file with reaping on: %s", kinds[i].what);
    expect_refused(region_ini(name, NULL), path, victim, needle);
    if (holder >= 0)
      close(holder);
    clear_hdir();
  }
}

Test(hostile, unheld_hostile_file_of_our_own_user_is_reaped_as_an_orphan)
{
  /* Documented behaviour: a region file of this user that no process holds
   * is garbage, whatever it contains; reaping removes it and a fresh region
   * replaces it. Links, directories and fifos are never reaped. */
  for (size_t i = 0; i < N_KINDS; i++) {
    const char *name = th_region_name();
    const char *path = th_region_path(hdir, name);
    const char *needle = NULL;
    kinds[i].make(path, &needle);
    ecc_connector_t *c = NULL;
    char err[1024] = "";
    int rc = ecc_open(region_ini(name, NULL), NULL, &c, err, sizeof(err));
    if (kinds[i].regular) {
      cr_expect_eq(rc, ECC_OK, "%s: %s", kinds[i].what, err);
      ecc_info_t info = {.struct_size = sizeof(info)};
      if (rc == ECC_OK) {
        cr_expect_eq(ecc_describe(c, &info), ECC_OK);
        cr_expect_eq(info.creator, 1, "%s: the orphan was joined, not replaced", kinds[i].what);
        struct stat st;
        cr_expect_eq(stat(path, &st), 0);
        cr_expect_eq(st.st_mode & 0777, 0600);
        ecc_close(c);
      }
    } else {
      cr_expect_eq(rc, ECC_ERR_REGION, "%s: rc %d %s", kinds[i].what, rc, err);
      cr_expect(th_exists(path), "%s was removed", kinds[i].what);
    }
    clear_hdir();
  }
}

Test(hostile, region_file_of_another_user_is_refused_and_never_reaped)
{
  if (geteuid() != 0) {
    teardown();
    cr_skip_test("needs root to give a file to another user");
  }
  const char *name = th_region_name();
  const char *path = th_region_path(hdir, name);
  struct region_header h = th_region_header(BS, NB);
  write_region(path, &h, REGION_HEADER_BYTES + BS * NB, 0600);
  cr_assert_eq(chown(path, 12345, 12345), 0);
  expect_refused(region_ini(name, NULL), path, path, "owned by uid 12345");
  expect_refused(region_ini(name, "reap_orphans = false"), path, path, "owned by uid 12345");
}

/* ---- hostile plugin files and names -------------------------------------- */

static char pdir[64];

/* A private plugin directory holding a copy of the real plugin. */
static const char *plugin_copy(const char *name, mode_t file_mode, mode_t dir_mode)
{
  if (pdir[0] == '\0') {
    snprintf(pdir, sizeof(pdir), "/tmp/eccplug-XXXXXX");
    cr_assert_not_null(mkdtemp(pdir));
  }
  cr_assert_eq(chmod(pdir, dir_mode), 0);
  static char path[128];
  snprintf(path, sizeof(path), "%s/libecc-%s.so", pdir, name);
  unlink(path);
  th_copy_file(ECC_PLUGIN_PATH, path, file_mode);
  return path;
}

/* Runs after the test, before the suite's teardown. */
static void plugin_teardown(void)
{
  if (pdir[0] != '\0')
    th_remove_tree(pdir);
  pdir[0] = '\0';
}

static const char *plugin_ini(const char *plugin_lines)
{
  char text[1024];
  snprintf(text, sizeof(text),
           "# hostile plugin settings\n[plugin]\n%s\nlog_level = error\n"
           "[region]\ndir = %s\nname = %s\nblock_size = 64\nsize = 4KiB\n[engine]\ntype = host\n",
           plugin_lines, hdir, th_region_name());
  return th_write_temp(text, ".ini");
}

/* Both ecc_check and ecc_open refuse with `want`, naming `needle` and
 * `line` of the INI (the plugin lines start on line 3), and load nothing. */
static void expect_plugin_refused(const char *lines, int line, int want, const char *needle)
{
  const char *ini = plugin_ini(lines);
  char where[256];
  snprintf(where, sizeof(where), "%s:%d: ", ini, line);
  char err[2048] = "";
  int rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
  cr_expect_eq(rc, want, "ecc_check(%s): rc %d: %s", lines, rc, err);
  cr_expect_not_null(strstr(err, needle), "'%s': error '%s' lacks '%s'", lines, err, needle);
  cr_expect_not_null(strstr(err, where), "'%s': error '%s' does not point at %s", lines, err,
                     where);
  ecc_connector_t *c = NULL;
  rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, want, "ecc_open(%s): rc %d: %s", lines, rc, err);
  cr_expect_null(c);
  cr_expect_not_null(strstr(err, needle), "'%s': error '%s' lacks '%s'", lines, err, needle);
  if (pdir[0] != '\0')
    cr_expect(!th_mapped_under(pdir), "'%s': a refused plugin was loaded", lines);
  cr_expect_eq(th_count_entries(hdir), 0, "'%s': a region was created", lines);
}

Test(hostile, world_writable_plugin_file_or_directory_is_refused, .fini = plugin_teardown)
{
  char lines[512];
  /* The control: the same copy, safely stored, is accepted. */
  const char *path = plugin_copy("copy", 0755, 0755);
  snprintf(lines, sizeof(lines), "path = %s", path);
  char err[1024] = "";
  cr_assert_eq(ecc_check(plugin_ini(lines), NULL, NULL, err, sizeof(err)), ECC_OK, "%s", err);

  path = plugin_copy("evil", 0666, 0755);
  char needle[256];
  snprintf(needle, sizeof(needle), "%s is writable by others (mode 0666)", path);
  snprintf(lines, sizeof(lines), "path = %s", path);
  expect_plugin_refused(lines, 3, ECC_ERR_CONFIG, needle);
  snprintf(lines, sizeof(lines), "name = evil\ndir = %s", pdir);
  expect_plugin_refused(lines, 3, ECC_ERR_CONFIG, needle);

  path = plugin_copy("evil", 0755, 0777);
  snprintf(needle, sizeof(needle),
           "%s is writable by others (mode 0777) and is not a sticky directory", pdir);
  snprintf(lines, sizeof(lines), "path = %s", path);
  expect_plugin_refused(lines, 3, ECC_ERR_CONFIG, needle);
  cr_assert_eq(chmod(pdir, 0755), 0);
}

Test(hostile, symlink_into_a_world_writable_directory_is_refused, .fini = plugin_teardown)
{
  const char *real = plugin_copy("real", 0755, 0755);
  char unsafe[128], link[160];
  snprintf(unsafe, sizeof(unsafe), "%s/open", pdir);
  cr_assert_eq(mkdir(unsafe, 0777), 0);
  cr_assert_eq(chmod(unsafe, 0777), 0);
  char moved[192];
  snprintf(moved, sizeof(moved), "%s/libecc-real.so", unsafe);
  cr_assert_eq(rename(real, moved), 0);
  snprintf(link, sizeof(link), "%s/libecc-linked.so", pdir);
  cr_assert_eq(symlink(moved, link), 0);
  char lines[256], needle[256];
  snprintf(lines, sizeof(lines), "path = %s", link);
  /* The link's own directory is safe; the one it leads into is not. */
  snprintf(needle, sizeof(needle),
           "%s is writable by others (mode 0777) and is not a sticky directory", unsafe);
  expect_plugin_refused(lines, 3, ECC_ERR_CONFIG, needle);
}

Test(hostile, plugin_names_that_could_leave_the_plugin_directory_are_refused)
{
  char too_long[80];
  memset(too_long, 'n', 65);
  too_long[65] = '\0';
  const char *names[] = {
      "../../../tmp/evil", "a/b", "..", ".", "shm.so", "sh m", "/abs", too_long, "shm\\x"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    char lines[256];
    snprintf(lines, sizeof(lines), "name = %s", names[i]);
    expect_plugin_refused(lines, 3, ECC_ERR_CONFIG, "bad plugin name");
  }
  expect_plugin_refused("path = build/lib/ecc/libecc-shm.so", 3, ECC_ERR_CONFIG,
                        "must be absolute");
  expect_plugin_refused("name = shm\ndir = lib/ecc", 4, ECC_ERR_CONFIG, "must be an absolute path");
  cr_assert_eq(setenv("ECC_PLUGIN_DIR", "lib/ecc", 1), 0);
  const char *ini = plugin_ini("name = shm");
  char err[1024] = "";
  cr_expect_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG, "%s", err);
  cr_expect_not_null(strstr(err, "ECC_PLUGIN_DIR 'lib/ecc' must be an absolute path"), "%s", err);
  unsetenv("ECC_PLUGIN_DIR");
}

/* ---- ECC_PLUGIN_DIR in a setuid process -------------------------------- */

/* Run as a separate program (this test binary, copied and made setuid):
 * check an INI naming plugin "shm" and say which plugin answered. Runs
 * before Criterion's main, which it never reaches. */
__attribute__((constructor)) static void setuid_probe(void)
{
  const char *ini = getenv("ECC_TEST_SETUID_PROBE");
  if (ini == NULL)
    return;
  char err[2048] = "";
  ecc_plugin_meta_t meta;
  memset(&meta, 0, sizeof(meta));
  int rc = ecc_check(ini, NULL, &meta, err, sizeof(err));
  printf("rc=%d euid=%u uid=%u name=%s err=%s\n", rc, (unsigned)geteuid(), (unsigned)getuid(),
         rc == ECC_OK ? meta.name : "-", err);
  fflush(stdout);
  _exit(0);
}

/* Runs the probe; returns its exit status (0 when it ran). */
static int run_probe(const char *exe, const char *ini, const char *env_dir, char *out, size_t cap)
{
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    char e1[512], e2[512];
    snprintf(e1, sizeof(e1), "ECC_PLUGIN_DIR=%s", env_dir);
    snprintf(e2, sizeof(e2), "ECC_TEST_SETUID_PROBE=%s", ini);
    char *envp[] = {e1, e2, NULL};
    char *argv[] = {(char *)exe, NULL};
    execve(exe, argv, envp);
    _exit(127);
  }
  close(fds[1]);
  size_t used = 0;
  ssize_t n;
  while (used + 1 < cap && (n = read(fds[0], out + used, cap - used - 1)) > 0)
    used += (size_t)n;
  out[used] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status), "probe killed: status %d: %s", status, out);
  return WEXITSTATUS(status);
}

Test(hostile, plugin_dir_variable_is_ignored_in_a_setuid_process, .fini = plugin_teardown)
{
  struct passwd *nobody = getpwnam("nobody");
  if (geteuid() != 0 || nobody == NULL || nobody->pw_uid == 0) {
    plugin_teardown(); /* a skipped test runs no fini */
    teardown();
    cr_skip_test("needs root and a user 'nobody' to make a setuid program");
  }
  /* ECC_PLUGIN_DIR points at a directory whose libecc-shm.so is a fixture
   * plugin named "good"; the build tree's own plugin is named "shm". */
  plugin_copy("unused", 0755, 0755);
  char fake[160];
  snprintf(fake, sizeof(fake), "%s/libecc-shm.so", pdir);
  th_copy_file(ECC_FIXTURE_DIR "/libecc-good.so", fake, 0755);
  char exe[160];
  snprintf(exe, sizeof(exe), "%s/probe", pdir);
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  cr_assert_gt(n, 0);
  self[n] = '\0';
  th_copy_file(self, exe, 0755);
  char ini[160];
  snprintf(ini, sizeof(ini), "%s/probe.ini", pdir);
  FILE *f = fopen(ini, "w");
  cr_assert_not_null(f);
  fprintf(f, "[plugin]\nname = shm\n[region]\nname = probe\nblock_size = 64\nsize = 4KiB\n");
  fclose(f);
  cr_assert_eq(chmod(ini, 0644), 0);

  char out[4096];
  cr_assert_eq(run_probe(exe, ini, pdir, out, sizeof(out)), 0, "%s", out);
  cr_log_info("plain probe: %s", out);
  cr_assert_not_null(strstr(out, "'good'"),
                     "without setuid, ECC_PLUGIN_DIR should have been used: %s", out);

  cr_assert_eq(chown(exe, nobody->pw_uid, nobody->pw_gid), 0);
  cr_assert_eq(chmod(exe, 04755), 0);
  int status = run_probe(exe, ini, pdir, out, sizeof(out));
  cr_log_info("setuid probe: %s", out);
  char euid[32];
  snprintf(euid, sizeof(euid), "euid=%u ", (unsigned)nobody->pw_uid);
  if (status != 0 || strstr(out, euid) == NULL) {
    /* Not a failure of the shim: the build tree may be unreadable for
     * 'nobody', or setuid bits ignored (a nosuid mount). */
    plugin_teardown();
    teardown();
    cr_skip_test("cannot run a setuid copy of this test as 'nobody' here (exit %d): %s", status,
                 out);
  }
  cr_expect_not_null(strstr(out, "rc=0 "), "%s", out);
  cr_expect_not_null(strstr(out, "name=shm "),
                     "a setuid process loaded the plugin ECC_PLUGIN_DIR points at: %s", out);
}

/* ---- malformed INI files ---------------------------------------------- */

/* Both entry points refuse `text` with `want`, pointing at `line` of the
 * file (0: no line expected) and saying `needle`. */
static void expect_ini_refused(const char *text, int line, const char *needle)
{
  const char *ini = th_write_temp(text, ".ini");
  char where[256] = "";
  if (line > 0)
    snprintf(where, sizeof(where), "%s:%d: ", ini, line);
  char err[2048] = "";
  int rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CONFIG, "ecc_check: rc %d: %s", rc, err);
  cr_expect_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_expect_not_null(strstr(err, where), "error '%s' does not start at '%s'", err, where);
  ecc_connector_t *c = NULL;
  rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CONFIG, "ecc_open: rc %d: %s", rc, err);
  cr_expect_null(c);
  cr_expect_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_expect_not_null(strstr(err, where), "error '%s' does not start at '%s'", err, where);
  cr_expect_eq(th_count_entries(hdir), 0, "a refused INI created a region");
}

/* A valid INI with `line5` as its fifth line (inside [region]); the
 * region key line5 sets, if it is one of the usual three, is left out. */
static const char *with_line5(const char *line5)
{
  static const char *const usual[] = {"name = x", "block_size = 64", "size = 4KiB"};
  char rest[64] = "";
  for (size_t i = 0; i < 3; i++) {
    size_t key = strcspn(usual[i], " ");
    if (strncmp(line5, usual[i], key) == 0 && (line5[key] == ' ' || line5[key] == '='))
      continue;
    strcat(rest, usual[i]);
    strcat(rest, "\n");
  }
  static char text[300000];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\n[region]\ndir = %s\n%s\n%s[engine]\ntype = host\n",
           ECC_PLUGIN_PATH, hdir, line5, rest);
  return text;
}

Test(hostile, ini_duplicate_keys_name_both_lines)
{
  expect_ini_refused(with_line5("block_size = 128\nblock_size = 64"), 6,
                     "duplicate key 'region.block_size' (first set on line 5)");
  expect_ini_refused(with_line5("[plugin]\npath = /x"), 6,
                     "duplicate key 'path' in [plugin] (first set on line 2)");
  expect_ini_refused(with_line5("[region]\ndir = /dev/shm"), 6,
                     "duplicate key 'region.dir' (first set on line 4)");
}

Test(hostile, ini_unknown_sections_and_keys_are_named_with_their_line)
{
  expect_ini_refused(with_line5("[bogus]\nkey = 1\n[region]"), 6, "unknown key 'bogus.key'");
  expect_ini_refused(with_line5("blocksize = 64"), 5,
                     "unknown key 'region.blocksize' (the plugin 'shm' accepts");
  expect_ini_refused(with_line5("[plugin]\nevil = 1"), 6, "unknown key 'evil' in [plugin]");
  expect_ini_refused(with_line5("[re gion]"), 5, "bad section name");
}

Test(hostile, ini_out_of_range_and_overflowing_sizes_are_refused_at_their_line)
{
  /* The plugin judges values; the shim finds the key in its text and adds
   * the line the key was written on. */
  static const struct {
    const char *line;
    const char *needle;
  } cases[] = {
      {"size = 1e99", "region.size = '1e99' is not a positive byte size"},
      {"size = -1", "region.size = '-1' is not a positive byte size"},
      {"size = 16EiB", "region.size = '16EiB' is not a positive byte size"},
      {"size = 18446744073709551616", "region.size = '18446744073709551616'"},
      {"size = 17179869184GiB", "region.size = '17179869184GiB'"},
      {"size = 0", "region.size = '0' is not a positive byte size"},
      {"size = 0x100", "region.size = '0x100'"},
      {"size = 1 GiB extra", "region.size = '1 GiB extra'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    expect_ini_refused(with_line5(cases[i].line), 5, cases[i].needle);
  static const struct {
    const char *line;
    const char *needle;
  } numbers[] = {
      {"block_size = 99999999999999999999999", "region.block_size = '99999999999999999999999'"},
      {"join_timeout_ms = 1e3", "region.join_timeout_ms = '1e3' is not a whole number"},
      {"join_timeout_ms = -5", "region.join_timeout_ms = '-5' is not a whole number"},
      {"join_timeout_ms = 99999999999", "region.join_timeout_ms = '99999999999' is out of range"},
      {"reap_orphans = sure", "region.reap_orphans = 'sure' is not a boolean"},
      {"mode = steal", "region.mode = 'steal' is not one of"},
      {"name = ../../etc", "region.name = '../../etc' must be 1 to 63 letters"},
  };
  for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++)
    expect_ini_refused(with_line5(numbers[i].line), 5, numbers[i].needle);
}

Test(hostile, ini_very_long_lines_are_refused_at_their_line)
{
  static char line[200000];
  const size_t lengths[] = {250, 4096, sizeof(line) - 1};
  for (size_t i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
    memset(line, 'x', lengths[i]);
    memcpy(line, "name = ", 7);
    line[lengths[i]] = '\0';
    expect_ini_refused(with_line5(line), 5, "line longer than");
  }
  /* A long key, and a long section header. */
  memset(line, 'k', 300);
  strcpy(line + 300, " = 1");
  expect_ini_refused(with_line5(line), 5, "line longer than");
  memset(line, 's', 120);
  line[0] = '[';
  strcpy(line + 120, "]");
  expect_ini_refused(with_line5(line), 5, "section name longer than");
}

Test(hostile, ini_syntax_errors_and_binary_junk_name_their_line)
{
  expect_ini_refused(with_line5("just words"), 5, "syntax error");
  expect_ini_refused(with_line5("[unclosed"), 5, "syntax error");
  expect_ini_refused(with_line5("= 5"), 5, "");
  expect_ini_refused("key = 1\n[plugin]\nname = shm\n", 1, "outside any section");
  /* A NUL byte inside a line cannot be written with th_write_temp. */
  char path[128];
  snprintf(path, sizeof(path), "%s/nul.ini", hdir);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "[plugin]\npath = %s\n", ECC_PLUGIN_PATH);
  fwrite("[region]\nname = a\0b\n", 1, 21, f);
  fclose(f);
  char err[1024] = "";
  cr_expect_eq(ecc_check(path, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG, "%s", err);
  char want[160];
  snprintf(want, sizeof(want), "%s:4: NUL byte in line", path);
  cr_expect_not_null(strstr(err, want), "%s", err);
  unlink(path);
}

Test(hostile, ini_error_after_many_lines_still_names_the_right_line)
{
  enum { COMMENTS = 100000 };
  size_t cap = (size_t)COMMENTS * 16 + 1024;
  char *text = malloc(cap);
  cr_assert_not_null(text);
  size_t used = (size_t)snprintf(text, cap, "[plugin]\npath = %s\n[region]\n", ECC_PLUGIN_PATH);
  for (int i = 0; i < COMMENTS; i++)
    used += (size_t)snprintf(text + used, cap - used, "; line %d\n", i);
  snprintf(text + used, cap - used, "size = 1e99\nblock_size = 64\n");
  expect_ini_refused(text, 3 + COMMENTS + 1, "region.size = '1e99'");
  free(text);
}
