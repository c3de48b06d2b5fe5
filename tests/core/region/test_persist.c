/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_persist.c - warm restart (region.persist): a kept region and its
 * ready entries outlive a graceful exit and a SIGKILLed last holder, are
 * served again with their bytes (a dead writer's reservation never, it is
 * reclaimed), survive reaping, refuse processes that disagree, and go with
 * eccctl rm; without persist the last holder still removes the file.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "core/region/region.h"
#include "tests/core/unit_helpers.h"
#include "tests/helpers.h"

#define BS 4096u
#define NB 256u
#define DIR_ON "[directory]\nenabled = true\n"
#define KEEP "persist = true\n"
/* Entries a writer publishes, and SIGKILL rounds. */
#define KEYS 8
#define ROUNDS 5

static char rdir[64];

static void setup(void)
{
  snprintf(rdir, sizeof(rdir), "/dev/shm/eccpersist-XXXXXX");
  cr_assert_not_null(mkdtemp(rdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(rdir);
}

TestSuite(persist, .init = setup, .fini = teardown, .timeout = 120);

static const char *ini_of(const char *name, const char *region_extra, const char *extra)
{
  return th_ini_at(rdir, "both", name, BS, NB, region_extra, extra);
}

static const char *kept_ini(const char *name)
{
  return ini_of(name, KEEP, DIR_ON);
}

/* ecc_open's code, its message in err. */
static int try_open(const char *ini, ecc_connector_t **c, char *err, size_t cap)
{
  ecc_open_options_t o = {.struct_size = sizeof(o), .log = th_capture, .log_level = ECC_LOG_ERROR};
  *c = NULL;
  err[0] = '\0';
  return ecc_open(ini, &o, c, err, cap);
}

static ecc_connector_t *open_ok(const char *ini)
{
  ecc_connector_t *c;
  char err[1024];
  int rc = try_open(ini, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "open %s: %d %s", ini, rc, err);
  return c;
}

static void key_of(char *buf, size_t cap, int round, int i)
{
  snprintf(buf, cap, "r%d-k%d", round, i);
}

/* Entry i of a round: 1 to 3 blocks, the last one partly filled. */
static uint64_t bytes_of(int i)
{
  return (uint64_t)(i % 3) * BS + BS / 2 + (uint64_t)i;
}

static uint64_t seed_of(int round, int i)
{
  return (uint64_t)round * 1000 + (uint64_t)i + 1;
}

/* Reserve, save and poll one entry of the round: ECC_OK or the first code
 * that was not (for the child, which cannot assert). */
static int publish(ecc_connector_t *c, int round, int i)
{
  static uint8_t src[3 * BS + 64];
  char key[32];
  key_of(key, sizeof(key), round, i);
  uint64_t n = bytes_of(i);
  th_fill(src, n, seed_of(round, i));
  ecc_entry_t e;
  int rc = ecc_reserve(c, key, n, &e);
  if (rc != ECC_OK || e.state != ECC_ENTRY_RESERVED)
    return rc != ECC_OK ? rc : ECC_ERR_INVALID;
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, n};
  if ((rc = ecc_save_reserved(c, &s, 1)) != ECC_OK || (rc = ecc_flush(c, NULL)) != ECC_OK)
    return rc;
  ecc_completion_t done;
  for (int waited = 0; waited < 5000; waited++) {
    size_t got = 0;
    if ((rc = ecc_poll(c, &done, 1, &got)) != ECC_OK)
      return rc;
    if (got == 1)
      return done.status;
    usleep(1000);
  }
  return ECC_ERR_BUSY; /* no completion within 5 s */
}

/* The entry is ready and loads with exactly the bytes it was saved with. */
static void expect_entry(ecc_connector_t *c, int round, int i)
{
  static uint8_t want[3 * BS + 64], got[3 * BS + 64];
  char key[32];
  key_of(key, sizeof(key), round, i);
  const char *keys[1] = {key};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY, "%s is not served after the restart", key);
  uint64_t n = bytes_of(i);
  cr_assert_eq(e.nbytes, n);
  memset(got, 0, sizeof(got));
  ecc_load_pinned_t l = {7, e.token, (uint64_t)(uintptr_t)got, sizeof(got)};
  cr_assert_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
  th_fill(want, n, seed_of(round, i));
  cr_assert_eq(memcmp(got, want, n), 0, "%s came back with other bytes", key);
}

static int32_t peeked_state(ecc_connector_t *c, const char *key)
{
  const char *keys[1] = {key};
  ecc_peek_t p;
  cr_assert_eq(ecc_peek(c, keys, 1, &p), ECC_OK);
  return p.state;
}

/* ---- the SIGKILLed writer ------------------------------------------------- */

/* A writer of round `round` (its role "writer-<round>"): publishes the
 * round's entries, pins the previous round's first one, leaves a
 * reservation saved but never polled (so never published), says so on
 * reply_fd and waits for its SIGKILL. */
static void writer(const char *ini, int round, int reply_fd)
{
  ecc_connector_t *c = NULL;
  char err[512];
  ecc_open_options_t o = {.struct_size = sizeof(o), .log_level = ECC_LOG_ERROR};
  if (ecc_open(ini, &o, &c, err, sizeof(err)) != ECC_OK)
    _exit(80);
  for (int i = 0; i < KEYS; i++)
    if (publish(c, round, i) != ECC_OK)
      _exit(81);
  char key[32];
  key_of(key, sizeof(key), round - 1, 0);
  const char *keys[1] = {key};
  ecc_entry_t pin;
  if (round > 0 && (ecc_lookup(c, keys, 1, 1, &pin) != ECC_OK || pin.state != ECC_ENTRY_READY))
    _exit(82);
  static uint8_t half[2 * BS];
  memset(half, 0xEE, sizeof(half));
  snprintf(key, sizeof(key), "r%d-half", round);
  ecc_entry_t e;
  if (ecc_reserve(c, key, sizeof(half), &e) != ECC_OK || e.state != ECC_ENTRY_RESERVED)
    _exit(83);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)half, sizeof(half)};
  if (ecc_save_reserved(c, &s, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK)
    _exit(84);
  if (write(reply_fd, "w", 1) != 1)
    _exit(85);
  for (;;)
    pause();
}

/* Children are this test binary again (a forked Criterion process must
 * not start connector threads). */
__attribute__((constructor)) static void child_entry(void)
{
  const char *role, *ini;
  int unused, reply_fd, round;
  if (!th_child_args(&role, &ini, &unused, &reply_fd))
    return;
  if (sscanf(role, "writer-%d", &round) == 1)
    writer(ini, round, reply_fd);
  _exit(94);
}

/* Runs the round's writer until it has written, then SIGKILLs it, and
 * waits until the kernel has dropped its lock on the region. */
static void writer_killed(const char *ini, int round)
{
  int reply[2];
  char role[32];
  cr_assert_eq(pipe2(reply, O_CLOEXEC), 0);
  snprintf(role, sizeof(role), "writer-%d", round);
  pid_t pid = th_spawn_self(role, ini, -1, reply[1]);
  close(reply[1]);
  struct pollfd p = {.fd = reply[0], .events = POLLIN};
  char c = 0;
  bool wrote = poll(&p, 1, 30000) == 1 && read(reply[0], &c, 1) == 1;
  close(reply[0]);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(wrote, "round %d: the writer did not write (status %d)", round,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cr_assert(th_wait_locks_released(pid, 5000), "the killed writer still holds its locks");
}

static void check_after_kill(ecc_connector_t *c, int round, uint64_t reclaimed_before)
{
  ecc_info_t info = th_describe(c);
  cr_assert_eq(info.persist, 1);
  cr_assert_eq(info.restarted, 1, "round %d: the open after the kill did not restart", round);
  cr_assert_eq(info.creator, 0);
  for (int r = 0; r <= round; r++)
    for (int i = 0; i < KEYS; i++)
      expect_entry(c, r, i);
  char half[32];
  snprintf(half, sizeof(half), "r%d-half", round);
  cr_assert_eq(peeked_state(c, half), ECC_ENTRY_ABSENT,
               "round %d: the dead writer's unpublished reservation is still there", round);
  ecc_stats_t st = th_stats(c);
  /* Its reservation, and from round 1 on the pin it held. */
  cr_assert_eq(st.directory.reclaimed - reclaimed_before, round > 0 ? 2u : 1u,
               "round %d: %llu reclaimed", round,
               (unsigned long long)(st.directory.reclaimed - reclaimed_before));
  cr_assert_eq(st.directory.pins_live, 0);
  cr_assert_eq(st.directory.entries, (uint64_t)(round + 1) * KEYS);
  /* Every restart counts: the writers' from round 1 on, and ours. */
  cr_assert_eq(st.cache.restarts, 2u * (uint64_t)round + 1);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, half, BS, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED, "the reclaimed key cannot be reserved again");
  cr_assert_eq(ecc_abort_reserved(c, e.token), ECC_OK);
}

Test(persist, sigkilled_last_holder_leaves_its_published_entries_and_no_stale_bytes)
{
  const char *name = th_region_name();
  const char *ini = kept_ini(name);
  uint64_t reclaimed = 0;
  for (int round = 0; round < ROUNDS; round++) {
    writer_killed(ini, round);
    cr_assert(th_exists(th_region_path(rdir, name)), "round %d: the kept region is gone", round);
    ecc_connector_t *c = open_ok(ini);
    check_after_kill(c, round, reclaimed);
    reclaimed = th_stats(c).directory.reclaimed;
    cr_assert_eq(ecc_close(c), ECC_OK);
  }
}

/* ---- graceful exit ------------------------------------------------------ */

Test(persist, graceful_exit_then_reopen_serves_the_entries_with_their_bytes)
{
  const char *name = th_region_name();
  const char *ini = kept_ini(name);
  const char *path = th_region_path(rdir, name);
  ecc_connector_t *c = open_ok(ini);
  ecc_info_t info = th_describe(c);
  cr_assert(info.creator == 1 && info.persist == 1 && info.restarted == 0);
  for (int i = 0; i < KEYS; i++)
    cr_assert_eq(publish(c, 0, i), ECC_OK);
  uint64_t instance = 0;
  ecc_event_t ev;
  uint64_t cursor = 0, lost = 0;
  size_t n = 0;
  cr_assert_eq(ecc_events(c, &cursor, &ev, 1, &n, &lost), ECC_OK);
  cr_assert_eq(n, 1);
  instance = ev.instance;
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(th_exists(path), "the last holder removed a kept region");

  c = open_ok(ini);
  info = th_describe(c);
  cr_assert(info.creator == 0 && info.persist == 1 && info.restarted == 1);
  for (int i = 0; i < KEYS; i++)
    expect_entry(c, 0, i);
  ecc_stats_t st = th_stats(c);
  cr_expect_eq(st.cache.restarts, 1);
  cr_expect_eq(st.directory.entries, KEYS);
  cr_expect_eq(st.directory.reclaimed, 0);
  cursor = 0;
  cr_assert_eq(ecc_events(c, &cursor, &ev, 1, &n, &lost), ECC_OK);
  cr_expect_eq(ev.instance, instance, "a restart changed the region's instance id");
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(th_exists(path));
}

Test(persist, a_process_joining_while_another_holds_it_is_no_restart)
{
  const char *ini = kept_ini(th_region_name());
  ecc_connector_t *a = open_ok(ini);
  cr_assert_eq(publish(a, 0, 0), ECC_OK);
  cr_assert_eq(ecc_close(a), ECC_OK);
  a = open_ok(ini);
  ecc_connector_t *b = open_ok(ini);
  cr_expect_eq(th_describe(a).restarted, 1);
  cr_expect_eq(th_describe(b).restarted, 0, "a join beside a live holder counted as a restart");
  cr_expect_eq(th_stats(b).cache.restarts, 1);
  expect_entry(b, 0, 0);
  cr_assert_eq(ecc_close(a), ECC_OK);
  cr_assert_eq(ecc_close(b), ECC_OK);
}

/* ---- the header, reaping, close without persist ------------------------- */

static struct region_header header_of(const char *path)
{
  struct region_header h;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
  close(fd);
  return h;
}

Test(persist, without_persist_the_last_close_removes_the_region_as_before)
{
  const char *name = th_region_name();
  const char *path = th_region_path(rdir, name);
  ecc_connector_t *c = open_ok(ini_of(name, NULL, DIR_ON));
  cr_assert_eq(publish(c, 0, 0), ECC_OK);
  struct region_header h = header_of(path);
  cr_expect_eq(h.layout_version, REGION_LAYOUT_VERSION, "a region that is not kept changed layout");
  cr_expect_eq(h.flags, 0);
  ecc_info_t info = th_describe(c);
  cr_expect(info.persist == 0 && info.restarted == 0);
  cr_expect_str_eq(info.policy, "lru");
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(!th_exists(path), "the last holder left a region that is not kept");
  cr_assert_eq(th_count_entries(rdir), 0);
}

Test(persist, describe_names_the_policy_and_none_without_a_directory)
{
  ecc_connector_t *c = open_ok(ini_of(th_region_name(), KEEP, DIR_ON "policy = cost\n"));
  cr_expect_str_eq(th_describe(c).policy, "cost");
  cr_assert_eq(ecc_close(c), ECC_OK);
  c = open_ok(ini_of(th_region_name(), NULL, NULL));
  cr_expect_str_eq(th_describe(c).policy, "");
  cr_expect_eq(th_describe(c).persist, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(persist, a_kept_region_is_layout_3_with_its_flag)
{
  const char *name = th_region_name();
  ecc_connector_t *c = open_ok(kept_ini(name));
  struct region_header h = header_of(th_region_path(rdir, name));
  cr_expect_eq(h.layout_version, REGION_LAYOUT_KEPT);
  cr_expect_eq(h.flags, REGION_FLAG_KEPT);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* A region file nobody holds, made by hand: valid, not kept. */
static void make_orphan(const char *path)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
  off_t size = REGION_HEADER_BYTES + (off_t)BS * NB;
  cr_assert_eq(posix_fallocate(fd, 0, size), 0);
  struct region_header h = th_region_header(BS, NB);
  cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
  close(fd);
}

Test(persist, reaping_leaves_a_kept_region_and_takes_an_orphan)
{
  const char *kept = th_region_name();
  ecc_connector_t *c = open_ok(kept_ini(kept));
  cr_assert_eq(publish(c, 0, 0), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
  make_orphan(th_region_path(rdir, "orphan"));
  struct ecc_log log;
  log_init(&log, NULL);
  /* The folder's scan at a first open in this process, with reaping on. */
  struct region_params p = {.folder = rdir,
                            .name = th_region_name(),
                            .block_size = BS,
                            .num_blocks = NB,
                            .mode = REGION_AUTO,
                            .join_timeout_ms = 1000,
                            .reap_orphans = true};
  struct region r;
  cr_assert_eq(region_open(&p, &r, &log), ECC_OK, "%s", th_log_last(&log));
  cr_expect(!th_exists(th_region_path(rdir, "orphan")), "the scan did not run");
  cr_expect(th_exists(th_region_path(rdir, kept)), "the scan reaped a kept region");
  region_close(&r, &log);
  cr_expect_eq(region_reap_orphans(rdir, &log), 0);
  cr_expect(th_exists(th_region_path(rdir, kept)), "region_reap_orphans reaped a kept region");
  log_destroy(&log);
  /* The region's own open, reaping on (the default), reuses it. */
  c = open_ok(kept_ini(kept));
  cr_expect_eq(th_describe(c).restarted, 1);
  expect_entry(c, 0, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* eccctl with `args` on `ini`: its exit status, both streams in out. */
static int run_eccctl(const char *args, const char *ini, char *out, size_t cap)
{
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "'%s' %s '%s' 2>&1", ECCCTL_PATH, args, ini);
  FILE *f = popen(cmd, "r");
  cr_assert_not_null(f);
  size_t n = fread(out, 1, cap - 1, f);
  out[n] = '\0';
  int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- processes that disagree -------------------------------------------- */

static void expect_refused(const char *ini, const char *needle, const char *needle2)
{
  ecc_connector_t *c;
  char err[1024];
  int rc = try_open(ini, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_REGION, "rc %d: %s", rc, err);
  cr_assert_null(c);
  cr_expect_not_null(strstr(err, needle), "'%s' lacks '%s'", err, needle);
  cr_expect_not_null(strstr(err, needle2), "'%s' lacks '%s'", err, needle2);
}

Test(persist, a_process_that_disagrees_on_persist_is_refused_and_changes_nothing)
{
  const char *name = th_region_name();
  const char *path = th_region_path(rdir, name);
  ecc_connector_t *c = open_ok(kept_ini(name));
  cr_assert_eq(publish(c, 0, 0), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
  expect_refused(ini_of(name, NULL, DIR_ON), "is kept (it was made with region.persist = true)",
                 "eccctl rm CONFIG");
  cr_assert(th_exists(path), "a refused process removed the kept region");
  c = open_ok(kept_ini(name));
  cr_expect_eq(th_describe(c).restarted, 1);
  expect_entry(c, 0, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);

  const char *plain = th_region_name();
  c = open_ok(ini_of(plain, NULL, DIR_ON));
  expect_refused(kept_ini(plain), "is not kept", "region.persist = false");
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(!th_exists(th_region_path(rdir, plain)));
}

Test(persist, a_kept_region_of_another_layout_is_refused_saying_how_to_delete_it)
{
  const char *name = th_region_name();
  ecc_connector_t *c = open_ok(kept_ini(name));
  cr_assert_eq(ecc_close(c), ECC_OK);
  const char *wider = th_ini_at(rdir, "both", name, 2 * BS, NB, KEEP, DIR_ON);
  expect_refused(wider, "blocks of", "the region was kept (region.persist)");
  expect_refused(ini_of(name, KEEP, DIR_ON "max_entries = 100\n"), "directory area",
                 "`eccctl rm CONFIG`");
  cr_assert(th_exists(th_region_path(rdir, name)));
  /* As the refusal says: rm needs no connector, so the new INI deletes it. */
  char out[4096];
  cr_assert_eq(run_eccctl("rm", wider, out, sizeof(out)), 0, "%s", out);
  cr_assert(!th_exists(th_region_path(rdir, name)));
  ecc_connector_t *fresh = open_ok(wider);
  cr_expect_eq(th_describe(fresh).creator, 1);
  cr_assert_eq(ecc_close(fresh), ECC_OK);
}

Test(persist, a_layout_3_header_without_its_flag_is_refused)
{
  const char *name = th_region_name();
  const char *path = th_region_path(rdir, name);
  make_orphan(path);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  cr_assert_geq(fd, 0);
  uint32_t v = REGION_LAYOUT_KEPT;
  cr_assert_eq(pwrite(fd, &v, sizeof(v), offsetof(struct region_header, layout_version)),
               (ssize_t)sizeof(v));
  close(fd);
  struct ecc_log log;
  log_init(&log, NULL);
  struct region_params p = {.folder = rdir,
                            .name = name,
                            .block_size = BS,
                            .num_blocks = NB,
                            .mode = REGION_JOIN,
                            .join_timeout_ms = 1000,
                            .persist = true};
  struct region r;
  cr_assert_eq(region_open(&p, &r, &log), ECC_ERR_REGION);
  cr_expect_not_null(strstr(th_log_last(&log), "with flags 0x0"), "%s", th_log_last(&log));
  log_destroy(&log);
}

/* ---- eccctl rm ------------------------------------------------------------ */

Test(persist, eccctl_rm_deletes_a_kept_region_and_the_next_open_starts_empty)
{
  const char *name = th_region_name();
  const char *ini = kept_ini(name);
  const char *path = th_region_path(rdir, name);
  ecc_connector_t *c = open_ok(ini);
  cr_assert_eq(publish(c, 0, 0), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
  char out[4096];
  cr_assert_eq(run_eccctl("rm", ini, out, sizeof(out)), 0, "%s", out);
  cr_expect_not_null(strstr(out, "removed region"), "%s", out);
  cr_expect_not_null(strstr(out, path), "%s", out);
  cr_assert(!th_exists(path), "eccctl rm left the kept region");
  c = open_ok(ini);
  ecc_info_t info = th_describe(c);
  cr_expect(info.creator == 1 && info.restarted == 0);
  cr_expect_eq(peeked_state(c, "r0-k0"), ECC_ENTRY_ABSENT);
  cr_assert_eq(ecc_close(c), ECC_OK);
}
