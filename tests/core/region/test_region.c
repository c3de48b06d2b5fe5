/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_region.c - the region file on its own: create and join (in one
 * process and across fork), header and layout checks, unsafe files, timeouts,
 * orphan reaping, and failed creates that must leave nothing behind.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "core/config/config.h"
#include "core/region/region.h"
#include "tests/core/unit_helpers.h"
#include "tests/helpers.h"

static char tdir[64];
static struct ecc_log tlog;

static void setup(void)
{
  th_captured[0] = '\0';
  log_init(&tlog, th_capturing_host());
  snprintf(tdir, sizeof(tdir), "/dev/shm/ecctest-XXXXXX");
  cr_assert_not_null(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  if (tdir[0] == '\0')
    return;
  th_remove_tree(tdir);
  tdir[0] = '\0';
  log_destroy(&tlog);
}

TestSuite(region, .init = setup, .fini = teardown);

/* ---- helpers ----------------------------------------------------------- */

static const char *uniq(void)
{
  static char names[16][32];
  static unsigned n;
  unsigned i = n++ % 16;
  snprintf(names[i], sizeof(names[i]), "r%ld-%u", (long)getpid(), n);
  return names[i];
}

static struct region_params params(const char *name, uint64_t bs, uint64_t nb, int mode,
                                   uint32_t timeout_ms)
{
  struct region_params p = {
      .folder = tdir,
      .name = name,
      .block_size = bs,
      .num_blocks = nb,
      .mode = mode,
      .join_timeout_ms = timeout_ms,
      .reap_orphans = 0,
  };
  return p;
}

static const char *path_of(const char *name)
{
  static char paths[8][128];
  static unsigned n;
  unsigned i = n++ % 8;
  snprintf(paths[i], sizeof(paths[i]), "%s/ecc-%s.region", tdir, name);
  return paths[i];
}

static int64_t elapsed_ms(const struct timespec *t0)
{
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

/* A region file made by hand: `h` (may be NULL) at offset 0, `size` bytes,
 * every block allocated as a creator leaves them (a join refuses a sparse
 * file; test_region_life.c checks that). */
static void write_file(const char *path, const struct region_header *h, off_t size, mode_t mode)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  cr_assert_eq(fchmod(fd, mode), 0);
  cr_assert_eq(ftruncate(fd, size), 0);
  if (size > 0)
    cr_assert_eq(posix_fallocate(fd, 0, size), 0);
  if (h != NULL)
    cr_assert_eq(pwrite(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
  close(fd);
}

static void expect_region_error(const struct region_params *p, const char *needle)
{
  struct region r;
  int fds = th_count_fds();
  int rc = region_open(p, &r, &tlog);
  cr_assert_eq(rc, ECC_ERR_REGION, "rc %d, error '%s'", rc, th_log_last(&tlog));
  cr_assert_eq(r.fd, -1);
  cr_assert_null(r.map);
  cr_assert_eq(th_count_fds(), fds, "a failed open leaked a descriptor");
  cr_assert_not_null(strstr(th_log_last(&tlog), needle), "error '%s' lacks '%s'",
                     th_log_last(&tlog), needle);
  cr_assert_not_null(strstr(th_log_last(&tlog), path_of(p->name)), "error '%s' lacks the path",
                     th_log_last(&tlog));
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    buf[i] = (uint8_t)((i * 131u + seed * 7u) | 1u);
}

static int check_fill(const uint8_t *buf, size_t n, unsigned seed)
{
  for (size_t i = 0; i < n; i++)
    if (buf[i] != (uint8_t)((i * 131u + seed * 7u) | 1u))
      return 0;
  return 1;
}

/* A child that opens a region, reports over `ready` (1 byte: 1 ok, 0 failed),
 * then waits for `release` to close; it closes the region only if asked.
 * Never returns. */
static void child_hold(const struct region_params *p, int ready, int release, int close_it)
{
  struct ecc_log clog;
  struct region r;
  log_init(&clog, NULL);
  char ok = region_open(p, &r, &clog) == ECC_OK;
  if (write(ready, &ok, 1) != 1)
    _exit(3);
  char c;
  while (read(release, &c, 1) > 0)
    ;
  if (ok && close_it)
    region_close(&r, &clog);
  _exit(ok ? 0 : 1);
}

struct holder {
  pid_t pid;
  int release; /* write end: closing it lets the child go */
};

static struct holder start_holder(const struct region_params *p, int close_it)
{
  int ready[2], release[2];
  cr_assert_eq(pipe(ready), 0);
  cr_assert_eq(pipe(release), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    close(release[1]);
    child_hold(p, ready[1], release[0], close_it);
  }
  close(ready[1]);
  close(release[0]);
  char ok = 0;
  cr_assert_eq(read(ready[0], &ok, 1), 1, "holder child died");
  close(ready[0]);
  cr_assert_eq(ok, 1, "holder child could not open the region");
  struct holder h = {pid, release[1]};
  return h;
}

static int stop_holder(struct holder *h)
{
  int status = 0;
  close(h->release);
  cr_assert_eq(waitpid(h->pid, &status, 0), h->pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* ---- create and join ---------------------------------------------------- */

Test(region, create_writes_a_correct_header)
{
  const char *name = uniq();
  struct region_params p = params(name, 192, 10, REGION_AUTO, 1000);
  struct region r;
  struct timespec now;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  clock_gettime(CLOCK_REALTIME, &now);

  cr_assert_str_eq(r.path, path_of(name));
  cr_assert_eq(r.creator, 1);
  cr_assert_eq(r.block_size, 192);
  cr_assert_eq(r.num_blocks, 10);
  cr_assert_eq(r.map_bytes, REGION_HEADER_BYTES + 192 * 10);
  cr_assert_eq(r.blocks, r.map + REGION_HEADER_BYTES);

  const struct region_header *h = (const void *)r.map;
  cr_assert_eq(memcmp(h->magic, REGION_MAGIC, 8), 0);
  cr_assert_eq(h->layout_version, REGION_LAYOUT_VERSION);
  cr_assert_eq(h->header_bytes, REGION_HEADER_BYTES);
  cr_assert_eq(h->block_size, 192);
  cr_assert_eq(h->num_blocks, 10);
  cr_assert_eq(h->file_bytes, REGION_HEADER_BYTES + 192 * 10);
  cr_assert_eq(h->creator_pid, (int64_t)getpid());
  cr_assert_eq(h->creator_uid, (uint32_t)geteuid());
  int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
  cr_assert(h->created_unix_ns > now_ns - 60 * 1000000000LL && h->created_unix_ns <= now_ns,
            "created_unix_ns %lld is not about now", (long long)h->created_unix_ns);

  struct stat st;
  cr_assert_eq(stat(r.path, &st), 0);
  cr_assert_eq(st.st_size, (off_t)(REGION_HEADER_BYTES + 192 * 10));
  cr_assert_eq(st.st_mode & 0777, 0600);
  cr_assert_eq(st.st_ino, r.ino);
  cr_assert_eq(th_count_entries(tdir), 1, "the temporary name was left behind");
  cr_assert_not_null(strstr(th_captured, "created region"), "log: %s", th_captured);

  region_close(&r, &tlog);
  cr_assert_eq(r.fd, -1);
  cr_assert_null(r.map);
  cr_assert(!th_exists(path_of(name)), "the creator did not unlink on close");
  region_close(&r, &tlog); /* idempotent */
  cr_assert_eq(r.fd, -1);
}

Test(region, join_in_same_process_shares_data)
{
  const char *name = uniq();
  struct region_params pc = params(name, 256, 16, REGION_CREATE, 1000);
  struct region_params pj = params(name, 256, 16, REGION_JOIN, 1000);
  struct region a, b;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(region_open(&pj, &b, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(a.creator, 1);
  cr_assert_eq(b.creator, 0);
  cr_assert_eq(b.ino, a.ino);
  cr_assert_neq(b.map, a.map, "the joiner should have its own mapping");

  fill(a.blocks + 3 * 256, 256, 1);
  cr_assert(check_fill(b.blocks + 3 * 256, 256, 1), "creator's write not seen by joiner");
  fill(b.blocks + 15 * 256, 256, 2);
  cr_assert(check_fill(a.blocks + 15 * 256, 256, 2), "joiner's write not seen by creator");

  region_close(&b, &tlog);
  cr_assert(th_exists(path_of(name)), "a joiner must not unlink");
  cr_assert(check_fill(a.blocks + 15 * 256, 256, 2));
  region_close(&a, &tlog);
  cr_assert(!th_exists(path_of(name)));
}

Test(region, joiner_outlives_creator_and_next_open_joins_the_same_file)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 4, REGION_AUTO, 1000);
  struct region a, b, c;
  cr_assert_eq(region_open(&p, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(region_open(&p, &b, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(b.creator, 0, "auto must join an existing region");
  fill(a.blocks, 64, 5);
  region_close(&a, &tlog);
  cr_assert(th_exists(path_of(name)), "the creator removed a region the joiner holds");
  cr_assert(check_fill(b.blocks, 64, 5), "the joiner's mapping must survive the close");
  cr_assert_eq(region_open(&p, &c, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(c.creator, 0, "the next open must join the live region");
  cr_assert_eq(c.ino, b.ino);
  cr_assert(check_fill(c.blocks, 64, 5));
  region_close(&b, &tlog);
  cr_assert(th_exists(path_of(name)), "closing the old joiner removed a region still held");
  region_close(&c, &tlog);
  cr_assert(!th_exists(path_of(name)), "the last holder left the region behind");
}

Test(region, join_from_forked_child_sees_and_writes_data)
{
  const char *name = uniq();
  struct region_params pc = params(name, 512, 8, REGION_AUTO, 1000);
  struct region a;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  fill(a.blocks + 2 * 512, 512, 11);

  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    struct ecc_log clog;
    struct region b;
    log_init(&clog, NULL);
    struct region_params pj = params(name, 512, 8, REGION_JOIN, 1000);
    if (region_open(&pj, &b, &clog) != ECC_OK)
      _exit(1);
    if (b.creator != 0)
      _exit(2);
    if (!check_fill(b.blocks + 2 * 512, 512, 11))
      _exit(3);
    fill(b.blocks + 7 * 512, 512, 12);
    region_close(&b, &clog);
    _exit(0);
  }
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: status %d", status);
  cr_assert(check_fill(a.blocks + 7 * 512, 512, 12), "child's write not seen by parent");
  cr_assert(th_exists(path_of(name)), "the joining child unlinked the region");
  region_close(&a, &tlog);
  cr_assert(!th_exists(path_of(name)));
}

Test(region, join_waits_for_a_late_creator)
{
  const char *name = uniq();
  int go[2];
  cr_assert_eq(pipe(go), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    struct ecc_log clog;
    struct region r;
    log_init(&clog, NULL);
    close(go[1]);
    usleep(150 * 1000);
    struct region_params pc = params(name, 128, 4, REGION_CREATE, 1000);
    if (region_open(&pc, &r, &clog) != ECC_OK)
      _exit(1);
    char c;
    while (read(go[0], &c, 1) > 0)
      ;
    region_close(&r, &clog);
    _exit(0);
  }
  close(go[0]);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct region_params pj = params(name, 128, 4, REGION_JOIN, 5000);
  struct region r;
  int rc = region_open(&pj, &r, &tlog);
  int64_t ms = elapsed_ms(&t0);
  close(go[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  cr_assert_eq(rc, ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(r.creator, 0);
  cr_assert(ms >= 100 && ms < 4000, "joined after %lld ms", (long long)ms);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  region_close(&r, &tlog);
}

Test(region, racing_auto_opens_make_exactly_one_creator)
{
  enum { N = 6 };
  const char *name = uniq();
  int start[2], report[2], release[2];
  cr_assert_eq(pipe(start), 0);
  cr_assert_eq(pipe(report), 0);
  cr_assert_eq(pipe(release), 0);
  pid_t pids[N];
  for (int i = 0; i < N; i++) {
    pids[i] = fork();
    cr_assert_geq(pids[i], 0);
    if (pids[i] == 0) {
      struct ecc_log clog;
      struct region r;
      char c;
      log_init(&clog, NULL);
      close(start[1]);
      close(report[0]);
      close(release[1]);
      while (read(start[0], &c, 1) > 0)
        ;
      struct region_params p = params(name, 4096, 64, REGION_AUTO, 5000);
      long msg[2] = {-1, 0};
      if (region_open(&p, &r, &clog) == ECC_OK) {
        msg[0] = r.creator;
        msg[1] = (long)r.ino;
      }
      if (write(report[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
        _exit(2);
      while (read(release[0], &c, 1) > 0)
        ;
      if (msg[0] >= 0)
        region_close(&r, &clog);
      _exit(0);
    }
  }
  close(start[0]);
  close(report[1]);
  close(release[0]);
  close(start[1]); /* all children go at once */
  int creators = 0;
  long ino = 0;
  for (int i = 0; i < N; i++) {
    long msg[2];
    cr_assert_eq(read(report[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
    cr_assert_geq(msg[0], 0, "a racing open failed");
    creators += (int)msg[0];
    if (i == 0)
      ino = msg[1];
    cr_assert_eq(msg[1], ino, "racing opens ended up on different files");
  }
  cr_assert_eq(creators, 1);
  cr_assert_eq(th_count_entries(tdir), 1, "temporary files were left behind");
  close(release[1]);
  for (int i = 0; i < N; i++) {
    int status = 0;
    cr_assert_eq(waitpid(pids[i], &status, 0), pids[i]);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  close(report[0]);
  cr_assert_eq(th_count_entries(tdir), 0);
}

/* ---- layout and header checks ------------------------------------------ */

Test(region, join_with_other_block_size_fails_naming_both_layouts)
{
  const char *name = uniq();
  struct region_params pc = params(name, 64, 8, REGION_AUTO, 1000);
  struct region a;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  struct region_params pj = params(name, 128, 8, REGION_AUTO, 1000);
  expect_region_error(&pj, "has blocks of 64 bytes but this connector is configured for "
                           "blocks of 128 bytes: a block is one row (region.hidden_size");
  cr_assert(th_exists(path_of(name)), "a failed join must not remove the region");
  region_close(&a, &tlog);
}

Test(region, join_with_other_block_count_fails_naming_both_layouts)
{
  const char *name = uniq();
  struct region_params pc = params(name, 64, 8, REGION_CREATE, 1000);
  struct region a;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  struct region_params pj = params(name, 64, 9, REGION_JOIN, 1000);
  expect_region_error(&pj, "has 8 blocks of 64 bytes but this connector is configured for "
                           "9 blocks of 64 bytes");
  region_close(&a, &tlog);
}

Test(region, file_shorter_than_a_header_is_rejected_after_the_timeout)
{
  const char *name = uniq();
  write_file(path_of(name), NULL, 100, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 200);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_region_error(&p, "truncated: 100 bytes");
  int64_t ms = elapsed_ms(&t0);
  cr_assert(ms >= 190 && ms < 2000, "took %lld ms", (long long)ms);
  cr_assert(th_exists(path_of(name)), "a joiner must not remove what it rejects");
}

Test(region, header_without_magic_is_rejected_after_the_timeout)
{
  const char *name = uniq();
  write_file(path_of(name), NULL, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 8, REGION_AUTO, 200);
  expect_region_error(&p, "magic did not appear within 200 ms");
}

Test(region, file_shorter_than_its_header_says_is_rejected)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 7, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 5000);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char want[128];
  snprintf(want, sizeof(want), "truncated: its header declares %u bytes but the file has %u",
           REGION_HEADER_BYTES + 64 * 8, REGION_HEADER_BYTES + 64 * 7);
  expect_region_error(&p, want);
  cr_assert_lt(elapsed_ms(&t0), 1000, "a finished header needs no waiting");
}

Test(region, foreign_magic_is_rejected_at_once)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  memcpy(h.magic, "NOTOURS!", 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 5000);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_region_error(&p, "not an encoder-cache region (magic \"NOTOURS!\"");
  cr_assert_lt(elapsed_ms(&t0), 1000);
}

Test(region, forged_block_count_is_rejected)
{
  /* Header claims more blocks than the file holds, consistently with itself. */
  const char *name = uniq();
  struct region_header h = th_region_header(64, 1000);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 1000, REGION_JOIN, 1000);
  expect_region_error(&p, "truncated");
}

Test(region, inconsistent_header_is_rejected)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  h.num_blocks = 9; /* file_bytes still says 8 */
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 9, 0600);
  struct region_params p = params(name, 64, 9, REGION_JOIN, 1000);
  expect_region_error(&p, "inconsistent header");
}

Test(region, overflowing_header_is_rejected)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  h.block_size = 1ull << 40;
  h.num_blocks = 1ull << 40;
  h.file_bytes = REGION_HEADER_BYTES; /* what the product wraps to */
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 1000);
  expect_region_error(&p, "inconsistent header");
}

Test(region, other_layout_version_is_rejected)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  /* The layout before the directory area, and one from the future. */
  h.layout_version = 1;
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 1000);
  expect_region_error(&p, "has layout version 1; this connector reads versions 2 and 3");
  cr_assert_eq(unlink(path_of(name)), 0);
  h.layout_version = 4;
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  expect_region_error(&p, "has layout version 4; this connector reads versions 2 and 3");
}

Test(region, hand_made_valid_file_is_joined)
{
  /* The checks above fail for the reason they name, not for a bad helper. */
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 1000);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(r.creator, 0);
  region_close(&r, &tlog);
}

/* ---- unsafe files ------------------------------------------------------ */

Test(region, symlink_at_the_region_path_is_refused)
{
  const char *name = uniq();
  char target[128];
  snprintf(target, sizeof(target), "%s/target", tdir);
  struct region_header h = th_region_header(64, 8);
  write_file(target, &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  cr_assert_eq(symlink(target, path_of(name)), 0);
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  expect_region_error(&p, "symbolic link");
  struct region_params pj = params(name, 64, 8, REGION_JOIN, 1000);
  expect_region_error(&pj, "symbolic link");
  struct stat st;
  cr_assert_eq(lstat(path_of(name), &st), 0);
  cr_assert(S_ISLNK(st.st_mode), "the symlink was replaced");
}

Test(region, group_or_world_writable_file_is_refused)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0666);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 1000);
  expect_region_error(&p, "writable by group or others (mode 0666)");
  cr_assert_eq(chmod(path_of(name), 0620), 0);
  expect_region_error(&p, "writable by group or others (mode 0620)");
  cr_assert_eq(chmod(path_of(name), 0644), 0); /* readable is fine */
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  region_close(&r, &tlog);
}

Test(region, file_of_another_user_is_refused_and_not_reaped)
{
  if (geteuid() != 0) {
    teardown(); /* a skipped test does not run the suite's fini */
    cr_skip_test("needs root to give a file away");
  }
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  cr_assert_eq(chown(path_of(name), 12345, 12345), 0);
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  expect_region_error(&p, "owned by uid 12345");
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
  cr_assert(th_exists(path_of(name)), "another user's file was reaped");
}

Test(region, directory_at_the_region_path_is_refused)
{
  const char *name = uniq();
  cr_assert_eq(mkdir(path_of(name), 0700), 0);
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  expect_region_error(&p, "not a regular file");
}

/* ---- modes and timeouts ------------------------------------------------- */

Test(region, exclusive_lock_held_elsewhere_bounds_the_join)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 64 * 8, 0600);
  int fd = open(path_of(name), O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(flock(fd, LOCK_EX), 0);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 200);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_region_error(&p, "timed out after 200 ms waiting for a shared lock");
  int64_t ms = elapsed_ms(&t0);
  cr_assert(ms >= 190 && ms < 2000, "took %lld ms", (long long)ms);
  close(fd);
}

Test(region, join_without_a_file_times_out_in_bounded_time)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_JOIN, 200);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char want[200];
  snprintf(want, sizeof(want), "nobody has created %s yet (waited 200 ms", path_of(name));
  expect_region_error(&p, want);
  int64_t ms = elapsed_ms(&t0);
  cr_assert(ms >= 190 && ms < 2000, "took %lld ms", (long long)ms);
  cr_assert_eq(th_count_entries(tdir), 0, "mode join must never create");
}

Test(region, create_when_the_file_exists_fails)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_CREATE, 1000);
  struct region a;
  cr_assert_eq(region_open(&p, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  expect_region_error(&p, "already exists");
  cr_assert_eq(th_count_entries(tdir), 1);
  cr_assert(th_exists(path_of(name)), "the failed create removed the existing region");
  region_close(&a, &tlog);
}

/* ---- orphans ------------------------------------------------------------ */

Test(region, region_of_an_exited_process_is_reaped)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  struct holder h = start_holder(&p, 0);
  cr_assert_eq(stop_holder(&h), 0);
  cr_assert(th_exists(path_of(name)), "the child should have left its region behind");
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 1);
  cr_assert(!th_exists(path_of(name)));
  cr_assert_not_null(strstr(th_captured, "removed orphaned region"), "log: %s", th_captured);
  cr_assert_not_null(strstr(th_captured, path_of(name)), "log: %s", th_captured);
}

Test(region, region_held_by_a_live_process_is_not_reaped)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  struct holder h = start_holder(&p, 0);
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
  cr_assert(th_exists(path_of(name)), "a held region was reaped");
  /* Held by a joiner in this process only. */
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(r.creator, 0);
  cr_assert_eq(stop_holder(&h), 0);
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
  cr_assert(th_exists(path_of(name)), "a region held by this process was reaped");
  region_close(&r, &tlog);
  cr_assert(!th_exists(path_of(name)), "the last holder left the region behind");
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
}

Test(region, region_created_here_is_not_reaped)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
  cr_assert(th_exists(path_of(name)));
  region_close(&r, &tlog);
}

Test(region, stale_temporary_file_is_reaped_and_other_files_are_left)
{
  const char *name = uniq();
  char tmp[160], keep[4][160];
  snprintf(tmp, sizeof(tmp), "%s.tmp.99999.0", path_of(name));
  write_file(tmp, NULL, 10, 0600);
  snprintf(keep[0], sizeof(keep[0]), "%s/other.txt", tdir);
  snprintf(keep[1], sizeof(keep[1]), "%s/ecc-%s.regionx", tdir, name);
  snprintf(keep[2], sizeof(keep[2]), "%s/ecc-a.b.region", tdir);
  snprintf(keep[3], sizeof(keep[3]), "%s/ecc-.region", tdir);
  for (int i = 0; i < 4; i++)
    write_file(keep[i], NULL, 10, 0600);
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 1);
  cr_assert(!th_exists(tmp), "the stale temporary file is still there");
  for (int i = 0; i < 4; i++)
    cr_assert(th_exists(keep[i]), "%s was reaped", keep[i]);
}

Test(region, temporary_file_being_built_is_not_reaped)
{
  const char *name = uniq();
  char tmp[160];
  snprintf(tmp, sizeof(tmp), "%s.tmp.99999.1", path_of(name));
  write_file(tmp, NULL, 10, 0600);
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(flock(fd, LOCK_SH), 0);
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 0);
  cr_assert(th_exists(tmp));
  close(fd);
  cr_assert_eq(region_reap_orphans(tdir, &tlog), 1);
}

Test(region, open_with_reaping_replaces_an_orphan_of_another_layout)
{
  const char *name = uniq();
  struct region_params old = params(name, 64, 8, REGION_AUTO, 1000);
  struct holder h = start_holder(&old, 0);
  cr_assert_eq(stop_holder(&h), 0);
  struct region_params p = params(name, 128, 4, REGION_AUTO, 1000);
  p.reap_orphans = 1;
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(r.creator, 1);
  cr_assert_eq(r.block_size, 128);
  cr_assert_not_null(strstr(th_captured, "removed orphaned region"), "log: %s", th_captured);
  region_close(&r, &tlog);
}

Test(region, open_without_reaping_keeps_the_orphan)
{
  const char *name = uniq();
  struct region_params old = params(name, 64, 8, REGION_AUTO, 1000);
  struct holder h = start_holder(&old, 0);
  cr_assert_eq(stop_holder(&h), 0);
  struct region_params p = params(name, 128, 4, REGION_AUTO, 1000);
  expect_region_error(&p, "has blocks of 64 bytes");
}

/* ---- failed creates leave nothing --------------------------------------- */

Test(region, bad_names_and_paths_are_refused_before_touching_anything)
{
  char too_long[ECC_NAME_MAX + 2];
  memset(too_long, 'x', ECC_NAME_MAX + 1);
  too_long[ECC_NAME_MAX + 1] = '\0';
  const char *bad[] = {"", "a/b", "a.b", "../x", "sp ace", too_long};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct region_params p = params(bad[i], 64, 8, REGION_AUTO, 100);
    struct region r;
    cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG, "name '%s' accepted", bad[i]);
    cr_assert_not_null(strstr(th_log_last(&tlog), "region.name"), "%s", th_log_last(&tlog));
    cr_assert_eq(r.fd, -1);
  }
  char longest[ECC_NAME_MAX + 1];
  memset(longest, 'n', ECC_NAME_MAX);
  longest[ECC_NAME_MAX] = '\0';
  struct region_params ok = params(longest, 64, 8, REGION_AUTO, 100);
  struct region r;
  cr_assert_eq(region_open(&ok, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  region_close(&r, &tlog);

  char dir[300];
  memset(dir, 'd', sizeof(dir) - 1);
  dir[0] = '/';
  dir[sizeof(dir) - 1] = '\0';
  struct region_params p = params("fine", 64, 8, REGION_AUTO, 100);
  p.folder = dir;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG);
  cr_assert_not_null(strstr(th_log_last(&tlog), "too long"), "%s", th_log_last(&tlog));
  cr_assert_eq(th_count_entries(tdir), 0);
}

Test(region, zero_and_overflowing_layouts_are_refused)
{
  const char *name = uniq();
  struct region r;
  struct region_params p = params(name, 0, 8, REGION_AUTO, 100);
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG);
  p = params(name, 64, 0, REGION_AUTO, 100);
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG);
  p = params(name, 1ull << 40, 1ull << 40, REGION_CREATE, 100);
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG);
  cr_assert_not_null(strstr(th_log_last(&tlog), "too large"), "%s", th_log_last(&tlog));
  cr_assert_not_null(strstr(th_log_last(&tlog), path_of(name)), "%s", th_log_last(&tlog));
  p = params(name, 1ull << 62, 2, REGION_CREATE, 100); /* exceeds off_t by the header */
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_CONFIG);
  p = params(name, 64, 8, 17, 100);
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_INVALID);
  cr_assert_eq(region_open(NULL, &r, &tlog), ECC_ERR_INVALID);
  cr_assert_eq(th_count_entries(tdir), 0);
}

Test(region, missing_directory_fails_with_the_path_named)
{
  char dir[128];
  snprintf(dir, sizeof(dir), "%s/missing", tdir);
  struct region_params p = params(uniq(), 64, 8, REGION_AUTO, 100);
  p.folder = dir;
  struct region r;
  int fds = th_count_fds();
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_SYSTEM, "%s", th_log_last(&tlog));
  cr_assert_not_null(strstr(th_log_last(&tlog), dir), "%s", th_log_last(&tlog));
  cr_assert_not_null(strstr(th_log_last(&tlog), strerror(ENOENT)), "%s", th_log_last(&tlog));
  cr_assert_eq(th_count_fds(), fds);
  cr_assert_eq(th_count_entries(tdir), 0);
}

Test(region, region_larger_than_the_filesystem_fails_with_enospc_and_leaves_nothing)
{
  struct statvfs vfs;
  cr_assert_eq(statvfs(tdir, &vfs), 0);
  if (vfs.f_blocks == 0) {
    teardown(); /* a skipped test does not run the suite's fini */
    cr_skip_test("the filesystem of /dev/shm has no size limit");
  }
  uint64_t fs_bytes = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  uint64_t bs = 1ull << 30;
  const char *name = uniq();
  struct region_params p = params(name, bs, fs_bytes / bs + 2, REGION_CREATE, 100);
  struct region r;
  int fds = th_count_fds();
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_SYSTEM, "%s", th_log_last(&tlog));
  cr_assert_not_null(strstr(th_log_last(&tlog), strerror(ENOSPC)), "%s", th_log_last(&tlog));
  cr_assert_not_null(strstr(th_log_last(&tlog), path_of(name)), "%s", th_log_last(&tlog));
  cr_assert_eq(r.fd, -1);
  cr_assert_null(r.map);
  cr_assert_eq(th_count_fds(), fds);
  cr_assert_eq(th_count_entries(tdir), 0, "a failed create left a file behind");
}

Test(region, file_size_limit_fails_with_efbig_and_leaves_nothing)
{
  const char *name = uniq();
  int out[2];
  cr_assert_eq(pipe(out), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(out[0]);
    struct ecc_log clog;
    struct region r;
    log_init(&clog, NULL);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
      _exit(2);
    struct region_params p = params(name, 1 << 20, 4, REGION_AUTO, 100);
    char msg[520];
    int rc = region_open(&p, &r, &clog);
    memcpy(msg, &rc, sizeof(rc));
    log_last(&clog, msg + sizeof(rc), sizeof(msg) - sizeof(rc));
    if (write(out[1], msg, sizeof(msg)) != (ssize_t)sizeof(msg))
      _exit(3);
    _exit(0);
  }
  close(out[1]);
  char msg[520];
  cr_assert_eq(read(out[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
  int rc;
  memcpy(&rc, msg, sizeof(rc));
  const char *text = msg + sizeof(rc);
  int status = 0;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  cr_assert_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, text);
  cr_assert_not_null(strstr(text, strerror(EFBIG)), "%s", text);
  cr_assert_not_null(strstr(text, path_of(name)), "%s", text);
  cr_assert_eq(th_count_entries(tdir), 0, "a failed create left a file behind");
}

/* ---- the directory area -------------------------------------------------- */

struct format_call {
  int calls;
  uint64_t bytes;
  int rc;
};

static int format_pattern(void *arg, uint8_t *mem, uint64_t bytes, struct ecc_log *log)
{
  (void)log;
  struct format_call *f = arg;
  f->calls++;
  f->bytes = bytes;
  if (f->rc == ECC_OK)
    fill(mem, (size_t)bytes, 9);
  return f->rc;
}

static struct region_params with_dir(struct region_params p, uint64_t bytes, struct format_call *f)
{
  p.dir_bytes = bytes;
  p.dir_format = format_pattern;
  p.dir_arg = f;
  return p;
}

Test(region, directory_area_is_whole_pages_formatted_before_anyone_joins)
{
  const char *name = uniq();
  struct format_call f = {0, 0, ECC_OK}, g = {0, 0, ECC_OK};
  struct region_params pc = with_dir(params(name, 256, 16, REGION_CREATE, 1000), 5000, &f);
  struct region_params pj = with_dir(params(name, 256, 16, REGION_JOIN, 1000), 5000, &g);
  struct region a, b;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(f.calls, 1);
  cr_assert_eq(f.bytes, 8192, "5000 bytes round up to two pages, not %llu",
               (unsigned long long)f.bytes);
  cr_assert_eq(a.dir, a.map + REGION_HEADER_BYTES);
  cr_assert_eq(a.dir_bytes, 8192);
  cr_assert_eq(a.blocks, a.map + REGION_HEADER_BYTES + 8192);
  cr_assert_eq(a.map_bytes, REGION_HEADER_BYTES + 8192 + 256 * 16);
  const struct region_header *h = (const void *)a.map;
  cr_assert_eq(h->dir_bytes, 8192);
  cr_assert_eq(h->header_bytes, REGION_HEADER_BYTES + 8192);
  cr_assert_eq(h->file_bytes, REGION_HEADER_BYTES + 8192 + 256 * 16);

  cr_assert_eq(region_open(&pj, &b, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_eq(g.calls, 0, "a joiner formatted the directory again");
  cr_assert_eq(b.dir_bytes, 8192);
  cr_assert(check_fill(b.dir, 8192, 9), "the joiner does not see the formatted directory");
  fill(a.blocks, 256 * 16, 4);
  cr_assert(check_fill(b.blocks, 256 * 16, 4), "blocks and directory overlap or differ");
  cr_assert(check_fill(b.dir, 8192, 9), "writing the blocks touched the directory");
  region_close(&b, &tlog);
  region_close(&a, &tlog);
}

Test(region, region_without_a_directory_has_none)
{
  const char *name = uniq();
  struct region_params p = params(name, 64, 8, REGION_CREATE, 1000);
  struct region r;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  cr_assert_null(r.dir);
  cr_assert_eq(r.dir_bytes, 0);
  cr_assert_eq(((const struct region_header *)r.map)->dir_bytes, 0);
  region_close(&r, &tlog);
}

Test(region, joiner_with_another_directory_is_refused_naming_both)
{
  const char *name = uniq();
  struct format_call f = {0, 0, ECC_OK}, g = {0, 0, ECC_OK};
  struct region_params pc = with_dir(params(name, 64, 8, REGION_CREATE, 1000), 4096, &f);
  struct region a;
  cr_assert_eq(region_open(&pc, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  struct region_params bigger = with_dir(params(name, 64, 8, REGION_JOIN, 200), 8192, &g);
  expect_region_error(&bigger, "directory area of 4096 bytes but this connector is configured "
                               "for 8192 (its size or its table sizes differ)");
  struct region_params none = params(name, 64, 8, REGION_JOIN, 200);
  expect_region_error(&none, "configured for 0 (a region with a directory and one without");
  cr_assert_eq(g.calls, 0);
  region_close(&a, &tlog);

  /* And the other way round: a directory expected where there is none. */
  struct region_params plain = params(name, 64, 8, REGION_CREATE, 1000);
  cr_assert_eq(region_open(&plain, &a, &tlog), ECC_OK, "%s", th_log_last(&tlog));
  struct region_params want = with_dir(params(name, 64, 8, REGION_JOIN, 200), 4096, &g);
  expect_region_error(&want, "directory area of 0 bytes but this connector is configured for 4096");
  region_close(&a, &tlog);
}

Test(region, failed_format_leaves_nothing_behind)
{
  const char *name = uniq();
  struct format_call f = {0, 0, ECC_ERR_NOMEM};
  struct region_params p = with_dir(params(name, 64, 8, REGION_AUTO, 1000), 4096, &f);
  struct region r;
  int fds = th_count_fds();
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_NOMEM);
  cr_assert_eq(f.calls, 1);
  cr_assert_eq(r.fd, -1);
  cr_assert_null(r.map);
  cr_assert_eq(th_count_fds(), fds, "a failed format leaked a descriptor");
  cr_assert_eq(th_count_entries(tdir), 0, "a failed format left a file behind");
}

Test(region, directory_area_needs_a_formatter_and_a_bound)
{
  const char *name = uniq();
  struct region r;
  struct region_params p = params(name, 64, 8, REGION_AUTO, 1000);
  p.dir_bytes = 4096;
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_INVALID);
  cr_assert_not_null(strstr(th_log_last(&tlog), "with a formatter"), "%s", th_log_last(&tlog));
  struct format_call f = {0, 0, ECC_OK};
  p = with_dir(params(name, 64, 8, REGION_AUTO, 1000), REGION_DIR_MAX_BYTES + 1, &f);
  cr_assert_eq(region_open(&p, &r, &tlog), ECC_ERR_INVALID);
  cr_assert_eq(f.calls, 0);
  cr_assert_eq(th_count_entries(tdir), 0);
}

Test(region, header_with_a_forged_directory_area_is_rejected)
{
  const char *name = uniq();
  struct region_header h = th_region_header(64, 8);
  h.dir_bytes = 100; /* not whole pages */
  h.header_bytes = REGION_HEADER_BYTES + 100;
  h.file_bytes = h.header_bytes + 64 * 8;
  write_file(path_of(name), &h, (off_t)h.file_bytes, 0600);
  struct region_params p = params(name, 64, 8, REGION_JOIN, 1000);
  expect_region_error(&p, "with a 100-byte directory area");
  cr_assert_eq(unlink(path_of(name)), 0);
  h = th_region_header(64, 8);
  h.dir_bytes = 4096; /* the blocks would overlap it */
  write_file(path_of(name), &h, REGION_HEADER_BYTES + 4096 + 64 * 8, 0600);
  expect_region_error(&p, "declares a 4096-byte header with a 4096-byte directory area");
}
