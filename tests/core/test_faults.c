/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_faults.c - failures injected from outside, through the shim: a
 * producer killed mid-step, the next producer rejoining or reaping, creators
 * that died before sizing their file, joiners that time out, a tmpfs too
 * small for the region, the in-flight bound, and shutdown with copies running.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"

/* ---- a region directory of our own, and INI files for it ---------------- */

static char rdir[64];

static void make_rdir(void)
{
  snprintf(rdir, sizeof(rdir), "/dev/shm/eccfault-XXXXXX");
  cr_assert_not_null(mkdtemp(rdir), "mkdtemp: %s", strerror(errno));
}

static void setup(void)
{
  make_rdir();
}

static void teardown(void)
{
  th_remove_tree(rdir);
}

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 120);

static int count_threads(void)
{
  return th_count_entries("/proc/self/task");
}

static ecc_open_options_t capture_options(const ecc_kv_t *overrides, size_t n, int level)
{
  ecc_open_options_t o = {.struct_size = sizeof(o),
                          .overrides = overrides,
                          .n_overrides = n,
                          .log = th_capture,
                          .log_level = level};
  return o;
}

static ecc_connector_t *open_role(const char *ini, const char *role, int level)
{
  ecc_kv_t kv = {"connector.role", role};
  ecc_open_options_t o = capture_options(&kv, 1, level);
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, &o, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s) as %s: %d %s", ini, role, rc, err);
  return c;
}

static int64_t ms_since(const struct timespec *t0)
{
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)(now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000;
}

static int wait_one(ecc_connector_t *c, ecc_completion_t *out)
{
  for (int spins = 0; spins < 200000; spins++) {
    size_t n = 0;
    if (ecc_poll(c, out, 1, &n) != ECC_OK)
      return -1;
    if (n == 1)
      return out->status == ECC_OK ? 0 : -1;
    usleep(50);
  }
  return -1;
}

/* ---- producers in child processes ---------------------------------------- */

/* The layout of the kill test: small entries, then one large entry whose
 * save is in flight when its producer dies. */
#define KBS 4096u
#define SMALL_ROWS 8u
#define SMALL_ENTRIES 24u
#define BIG_FIRST 1024u
#define BIG_ROWS 16384u /* 64 MiB */
#define KNB (BIG_FIRST + BIG_ROWS)
#define P2_FIRST 256u /* the second producer writes past the first's */
#define P2_ENTRIES 12u

enum note_type { NOTE_OPENED = 1, NOTE_SAVED, NOTE_BIG_FLUSHED, NOTE_FAILED, NOTE_DONE };

/* What a producer tells the consumer: an entry is only ever named here after
 * its save completion was polled, which is the protocol under test. */
struct note {
  int type;
  int creator; /* NOTE_OPENED: whether it created the region */
  uint32_t index;
  uint32_t first_block;
  uint32_t rows;
  uint64_t nbytes;
  uint64_t seed;
  char text[160]; /* NOTE_FAILED: why */
};

static void send_note(int fd, const struct note *n)
{
  if (write(fd, n, sizeof(*n)) != (ssize_t)sizeof(*n))
    _exit(90);
}

static void fail_note(int fd, const char *what, int rc)
{
  struct note n = {.type = NOTE_FAILED};
  snprintf(n.text, sizeof(n.text), "%s: %d", what, rc);
  send_note(fd, &n);
  _exit(91);
}

static uint64_t entry_bytes(uint32_t index)
{
  return (uint64_t)SMALL_ROWS * KBS - (index % 7) * 300;
}

/* Saves one entry and hands it over once its completion arrived. */
static void save_and_hand_over(ecc_connector_t *c, int note_fd, const char *key, uint32_t index,
                               uint32_t first, uint64_t seed, uint8_t *src)
{
  struct note n = {.type = NOTE_SAVED,
                   .index = index,
                   .first_block = first,
                   .rows = SMALL_ROWS,
                   .nbytes = entry_bytes(index),
                   .seed = seed};
  uint32_t ids[SMALL_ROWS];
  for (uint32_t b = 0; b < SMALL_ROWS; b++)
    ids[b] = first + b;
  th_fill(src, n.nbytes, seed);
  ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src, n.nbytes, ids, SMALL_ROWS};
  int rc = ecc_save(c, &e, 1);
  if (rc == ECC_OK)
    rc = ecc_flush(c, NULL);
  ecc_completion_t done;
  if (rc != ECC_OK || wait_one(c, &done) != 0 || strcmp(done.key, key) != 0)
    fail_note(note_fd, "save", rc);
  send_note(note_fd, &n);
}

/* Waits for the go byte; EOF means the test ended without needing us. */
static void wait_go(int cmd_fd)
{
  char go;
  if (read(cmd_fd, &go, 1) != 1)
    _exit(0);
}

static ecc_connector_t *child_open(const char *ini, int note_fd)
{
  ecc_kv_t kv = {"connector.role", "producer"};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = ECC_LOG_ERROR};
  ecc_connector_t *c = NULL;
  char err[512];
  int rc = ecc_open(ini, &o, &c, err, sizeof(err));
  if (rc != ECC_OK) {
    struct note n = {.type = NOTE_FAILED};
    snprintf(n.text, sizeof(n.text), "open: %.150s", err);
    send_note(note_fd, &n);
    _exit(92);
  }
  ecc_info_t info = {.struct_size = sizeof(info)};
  if (ecc_describe(c, &info) != ECC_OK)
    fail_note(note_fd, "describe", -1);
  struct note n = {.type = NOTE_OPENED, .creator = (int)info.creator};
  send_note(note_fd, &n);
  return c;
}

/* The producer that is killed: small entries handed over one by one, then a
 * 64 MiB save that is flushed and never polled. */
static void first_producer(const char *ini, int cmd_fd, int note_fd)
{
  wait_go(cmd_fd);
  ecc_connector_t *c = child_open(ini, note_fd);
  static uint8_t src[SMALL_ENTRIES][SMALL_ROWS * KBS];
  for (uint32_t i = 0; i < SMALL_ENTRIES; i++) {
    char key[32];
    snprintf(key, sizeof(key), "p1-%u", i);
    save_and_hand_over(c, note_fd, key, i, i * SMALL_ROWS, 100 + i, src[i]);
  }
  uint8_t *big = malloc((size_t)BIG_ROWS * KBS);
  uint32_t *ids = malloc(BIG_ROWS * sizeof(uint32_t));
  if (big == NULL || ids == NULL)
    fail_note(note_fd, "malloc", -1);
  th_fill(big, (size_t)BIG_ROWS * KBS, 999);
  for (uint32_t b = 0; b < BIG_ROWS; b++)
    ids[b] = BIG_FIRST + b;
  ecc_save_entry_t e = {"p1-big", (uint64_t)(uintptr_t)big, (uint64_t)BIG_ROWS * KBS, ids,
                        BIG_ROWS};
  int rc = ecc_save(c, &e, 1);
  if (rc == ECC_OK)
    rc = ecc_flush(c, NULL);
  if (rc != ECC_OK)
    fail_note(note_fd, "big save", rc);
  struct note n = {.type = NOTE_BIG_FLUSHED};
  send_note(note_fd, &n);
  for (;;)
    pause(); /* SIGKILL arrives here, the copy most likely still running */
}

/* The producer that comes after: joins the region the consumer still holds. */
static void second_producer(const char *ini, int cmd_fd, int note_fd)
{
  wait_go(cmd_fd);
  ecc_connector_t *c = child_open(ini, note_fd);
  static uint8_t src[P2_ENTRIES][SMALL_ROWS * KBS];
  for (uint32_t i = 0; i < P2_ENTRIES; i++) {
    char key[32];
    snprintf(key, sizeof(key), "p2-%u", i);
    save_and_hand_over(c, note_fd, key, i, P2_FIRST + i * SMALL_ROWS, 500 + i, src[i]);
  }
  int rc = ecc_close(c);
  if (rc != ECC_OK)
    fail_note(note_fd, "close", rc);
  struct note n = {.type = NOTE_DONE};
  send_note(note_fd, &n);
  _exit(0);
}

/* A creator that only opens and then waits to be killed. */
static void idle_producer(const char *ini, int cmd_fd, int note_fd)
{
  wait_go(cmd_fd);
  child_open(ini, note_fd);
  for (;;)
    pause();
}

static const struct {
  const char *role;
  void (*body)(const char *ini, int cmd_fd, int note_fd);
} bodies[] = {
    {"first", first_producer},
    {"second", second_producer},
    {"idle", idle_producer},
};

/* A producer runs as a fresh program (this test binary again, picked up
 * here before Criterion's main): a forked copy of a test process, which
 * already has Criterion's threads, must not start threads of its own. */
__attribute__((constructor)) static void producer_entry(void)
{
  const char *role, *ini;
  int cmd_fd, note_fd;
  if (!th_child_args(&role, &ini, &cmd_fd, &note_fd))
    return;
  for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
    if (strcmp(role, bodies[i].role) == 0)
      bodies[i].body(ini, cmd_fd, note_fd);
  _exit(94);
}

struct child {
  pid_t pid;
  int cmd;   /* write end: one byte starts it */
  int notes; /* read end */
};

static struct child spawn(const char *role, const char *ini)
{
  int cmd[2], notes[2];
  cr_assert_eq(pipe2(cmd, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(notes, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self(role, ini, cmd[0], notes[1]);
  close(cmd[0]);
  close(notes[1]);
  struct child ch = {pid, cmd[1], notes[0]};
  return ch;
}

static void start(struct child *ch)
{
  cr_assert_eq(write(ch->cmd, "g", 1), 1);
}

static struct note next_note(struct child *ch)
{
  struct pollfd p = {.fd = ch->notes, .events = POLLIN};
  cr_assert_eq(poll(&p, 1, 30000), 1, "child %d sent nothing for 30 s", (int)ch->pid);
  struct note n;
  cr_assert_eq(read(ch->notes, &n, sizeof(n)), (ssize_t)sizeof(n), "child %d died", (int)ch->pid);
  cr_assert_neq(n.type, NOTE_FAILED, "child %d failed: %s", (int)ch->pid, n.text);
  return n;
}

static int reap(struct child *ch)
{
  int status = 0;
  close(ch->cmd);
  close(ch->notes);
  cr_assert_eq(waitpid(ch->pid, &status, 0), ch->pid);
  return status;
}

/* Loads a handed-over entry and checks every byte. */
static void load_and_check(ecc_connector_t *c, const struct note *n, uint64_t id)
{
  static uint8_t got[SMALL_ROWS * KBS], want[SMALL_ROWS * KBS];
  uint32_t ids[SMALL_ROWS];
  for (uint32_t b = 0; b < n->rows; b++)
    ids[b] = n->first_block + b;
  memset(got, 0, sizeof(got));
  ecc_load_entry_t e = {id, ids, n->rows, (uint64_t)(uintptr_t)got, n->nbytes};
  cr_assert_eq(ecc_load(c, &e, 1, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(wait_one(c, &done), 0, "load %llu did not complete", (unsigned long long)id);
  cr_assert_eq(done.transfer_id, id);
  th_fill(want, n->nbytes, n->seed);
  cr_assert_eq(memcmp(got, want, n->nbytes), 0,
               "a handed-over entry (first block %u) does not hold its saved bytes",
               n->first_block);
}

/* Bytes of the 64 MiB entry that reached the region before the kill. */
static uint64_t big_bytes_present(ecc_connector_t *c, uint64_t id)
{
  uint64_t total = (uint64_t)BIG_ROWS * KBS;
  uint8_t *got = malloc(total), *want = malloc(total);
  uint32_t *ids = malloc(BIG_ROWS * sizeof(uint32_t));
  cr_assert(got != NULL && want != NULL && ids != NULL);
  for (uint32_t b = 0; b < BIG_ROWS; b++)
    ids[b] = BIG_FIRST + b;
  ecc_load_entry_t e = {id, ids, BIG_ROWS, (uint64_t)(uintptr_t)got, total};
  cr_assert_eq(ecc_load(c, &e, 1, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(wait_one(c, &done), 0);
  th_fill(want, total, 999);
  uint64_t same = 0;
  for (uint64_t i = 0; i < total; i += KBS)
    same += memcmp(got + i, want + i, KBS) == 0 ? KBS : 0;
  free(got);
  free(want);
  free(ids);
  return same;
}

Test(faults, producer_killed_mid_step_hands_over_only_completed_saves_and_next_producer_rejoins)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, KBS, KNB,
                              "join_timeout_ms = 5000\n[engine]\nhost_threads = 1\n", NULL);
  struct child p1 = spawn("first", ini);
  struct child p2 = spawn("second", ini);

  start(&p1);
  struct note n = next_note(&p1);
  cr_assert_eq(n.type, NOTE_OPENED);
  cr_assert_eq(n.creator, 1, "the first producer should have created the region");
  ecc_connector_t *cons = open_role(ini, "consumer", ECC_LOG_WARN);
  cr_assert_eq(th_describe(cons).creator, 0);

  /* Entries are checked as they are handed over, while the producer runs. */
  struct note handed[SMALL_ENTRIES];
  uint32_t got = 0;
  uint64_t id = 1;
  for (;;) {
    n = next_note(&p1);
    if (n.type == NOTE_BIG_FLUSHED)
      break;
    cr_assert_eq(n.type, NOTE_SAVED);
    cr_assert_lt(got, SMALL_ENTRIES);
    handed[got++] = n;
    load_and_check(cons, &n, id++);
  }
  cr_assert_eq(kill(p1.pid, SIGKILL), 0);
  int status = reap(&p1);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %d", status);
  cr_assert(th_wait_locks_released(p1.pid, 5000), "the killed producer's lock stayed");
  cr_assert_eq(got, SMALL_ENTRIES);

  /* The consumer keeps working: every handed-over entry is still whole. */
  for (uint32_t i = 0; i < got; i++)
    load_and_check(cons, &handed[i], id++);
  uint64_t present = big_bytes_present(cons, id++);
  cr_log_info("the 64 MiB save in flight at the kill had %llu of %llu bytes in the region",
              (unsigned long long)present, (unsigned long long)BIG_ROWS * KBS);
  cr_assert(th_exists(th_region_path(rdir, name)), "the dead creator's region vanished");

  /* The next producer joins the file the consumer still holds. */
  start(&p2);
  n = next_note(&p2);
  cr_assert_eq(n.type, NOTE_OPENED);
  cr_assert_eq(n.creator, 0, "the consumer holds the region: the next producer must join it");
  for (uint32_t i = 0; i < P2_ENTRIES; i++) {
    n = next_note(&p2);
    cr_assert_eq(n.type, NOTE_SAVED);
    load_and_check(cons, &n, id++);
  }
  cr_assert_eq(next_note(&p2).type, NOTE_DONE);
  status = reap(&p2);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
  for (uint32_t i = 0; i < got; i++)
    load_and_check(cons, &handed[i], id++); /* untouched by the second producer */

  ecc_stats_t s = {.struct_size = sizeof(s)};
  cr_assert_eq(ecc_get_stats(cons, &s), ECC_OK);
  cr_expect_eq(s.load.failed, 0);
  cr_expect_eq(s.load.entries, id - 1);
  cr_assert(th_exists(th_region_path(rdir, name)), "a joiner removed the region it shares");
  cr_assert_eq(ecc_close(cons), ECC_OK);
  /* The consumer held the dead creator's file last: closing removed it. */
  cr_expect(!th_exists(th_region_path(rdir, name)), "the last holder left the region behind");
  cr_expect_eq(th_count_entries(rdir), 0, "files left in %s", rdir);
}

Test(faults, region_of_a_creator_killed_while_alone_is_reaped_by_the_next_open)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, 4096, 64, "join_timeout_ms = 2000\n", NULL);
  struct child p1 = spawn("idle", ini);
  start(&p1);
  cr_assert_eq(next_note(&p1).creator, 1);
  kill(p1.pid, SIGKILL);
  reap(&p1);
  cr_assert(th_wait_locks_released(p1.pid, 5000), "the killed creator's lock stayed");
  struct stat old;
  cr_assert_eq(stat(th_region_path(rdir, name), &old), 0, "the killed creator's file vanished");
  th_captured[0] = '\0';
  ecc_connector_t *next = open_role(ini, "producer", ECC_LOG_INFO);
  cr_expect_eq(th_describe(next).creator, 1,
               "the orphan should have been reaped and a new region created");
  cr_expect_not_null(strstr(th_captured, "removed orphaned region"), "log: %s", th_captured);
  struct stat now;
  cr_assert_eq(stat(th_region_path(rdir, name), &now), 0);
  cr_expect_neq(now.st_ino, old.st_ino, "the orphan's file was reused");
  cr_assert_eq(ecc_close(next), ECC_OK);
  cr_expect_eq(th_count_entries(rdir), 0, "files left in %s", rdir);
}

Test(faults, joiner_rejoins_after_the_creator_is_killed_while_it_holds_the_region)
{
  /* Mode join: the region of a SIGKILLed creator is still joinable while a
   * consumer holds it; the last joiner to close removes it. */
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, 4096, 64, "join_timeout_ms = 2000\n", NULL);
  struct child p1 = spawn("idle", ini);
  start(&p1);
  struct note n = next_note(&p1);
  cr_assert_eq(n.creator, 1);
  ecc_kv_t kv[] = {{"connector.role", "consumer"}, {"region.mode", "join"}};
  ecc_open_options_t o = capture_options(kv, 2, ECC_LOG_WARN);
  ecc_connector_t *cons = NULL;
  char err[512];
  cr_assert_eq(ecc_open(ini, &o, &cons, err, sizeof(err)), ECC_OK, "%s", err);
  kill(p1.pid, SIGKILL);
  reap(&p1);
  cr_assert(th_wait_locks_released(p1.pid, 5000), "the killed creator's lock stayed");
  ecc_connector_t *again = NULL;
  cr_assert_eq(ecc_open(ini, &o, &again, err, sizeof(err)), ECC_OK, "%s", err);
  cr_expect_eq(th_describe(again).creator, 0);
  cr_assert_eq(ecc_close(again), ECC_OK);
  cr_expect(th_exists(th_region_path(rdir, name)), "a joiner removed a region still held");
  cr_assert_eq(ecc_close(cons), ECC_OK);
  cr_expect(!th_exists(th_region_path(rdir, name)), "the last holder left the region behind");
}

/* ---- creators that died before sizing, joiners that give up --------------- */

static void make_file(const char *path, off_t size)
{
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
  cr_assert_eq(ftruncate(fd, size), 0);
  close(fd);
}

Test(faults, unheld_files_of_a_creator_that_died_before_sizing_are_reaped)
{
  const char *name = th_region_name();
  char tmp[200];
  snprintf(tmp, sizeof(tmp), "%s.tmp.99999.0", th_region_path(rdir, name));
  make_file(tmp, 0);
  make_file(th_region_path(rdir, name), 0);
  const char *ini = th_ini_at(rdir, "both", name, 64, 16, "join_timeout_ms = 300\n", NULL);
  th_captured[0] = '\0';
  ecc_connector_t *c = open_role(ini, "both", ECC_LOG_INFO);
  cr_expect_eq(th_describe(c).creator, 1);
  cr_expect(!th_exists(tmp), "the stale temporary file was not reaped");
  cr_expect_not_null(strstr(th_captured, "removed orphaned region"), "log: %s", th_captured);
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_expect_eq(th_count_entries(rdir), 0);
}

static void expect_open_fails(const char *ini, const ecc_kv_t *kv, size_t n, int want,
                              const char *needle, int64_t min_ms, int64_t max_ms)
{
  ecc_open_options_t o = capture_options(kv, n, ECC_LOG_ERROR);
  ecc_connector_t *c = (ecc_connector_t *)&o; /* any non-NULL value: ecc_open must clear it */
  char err[1024] = "";
  int fds = th_count_fds();
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = ecc_open(ini, &o, &c, err, sizeof(err));
  int64_t ms = ms_since(&t0);
  cr_assert_eq(rc, want, "rc %d, expected %d: %s", rc, want, err);
  cr_assert_null(c);
  cr_assert_not_null(strstr(err, needle), "error '%s' lacks '%s'", err, needle);
  cr_assert(ms >= min_ms && ms <= max_ms, "took %lld ms, expected %lld..%lld", (long long)ms,
            (long long)min_ms, (long long)max_ms);
  cr_assert_eq(th_count_fds(), fds, "a failed open leaked a descriptor");
}

Test(faults, held_zero_length_region_makes_joiners_time_out_and_stays_untouched)
{
  /* A creator that died between creating the file in place and sizing it,
   * while some process still holds it: nothing to join, nothing to reap. */
  const char *name = th_region_name();
  make_file(th_region_path(rdir, name), 0);
  int holder = open(th_region_path(rdir, name), O_RDONLY | O_CLOEXEC);
  cr_assert_geq(holder, 0);
  cr_assert_eq(flock(holder, LOCK_SH), 0);
  struct stat before, after;
  cr_assert_eq(stat(th_region_path(rdir, name), &before), 0);
  const char *ini = th_ini_at(rdir, "both", name, 64, 16, "join_timeout_ms = 300\n", NULL);
  expect_open_fails(ini, NULL, 0, ECC_ERR_REGION,
                    "truncated: 0 bytes, less than its 4096-byte header (waited 300 ms)", 290,
                    5000);
  ecc_kv_t join = {"region.mode", "join"};
  expect_open_fails(ini, &join, 1, ECC_ERR_REGION, "truncated: 0 bytes", 290, 5000);
  cr_assert_eq(stat(th_region_path(rdir, name), &after), 0);
  cr_expect_eq(after.st_ino, before.st_ino);
  cr_expect_eq(after.st_size, 0);
  cr_expect_eq(th_count_entries(rdir), 1, "something was created beside the held file");
  close(holder);
}

Test(faults, held_region_without_magic_times_out_naming_the_magic)
{
  const char *name = th_region_name();
  make_file(th_region_path(rdir, name), 4096 + 64 * 16);
  int holder = open(th_region_path(rdir, name), O_RDONLY | O_CLOEXEC);
  cr_assert_eq(flock(holder, LOCK_SH), 0);
  const char *ini = th_ini_at(rdir, "both", name, 64, 16, "join_timeout_ms = 250\n", NULL);
  expect_open_fails(ini, NULL, 0, ECC_ERR_REGION, "magic did not appear within 250 ms", 240, 5000);
  close(holder);
}

Test(faults, joiner_without_a_creator_times_out_and_creates_nothing)
{
  const char *name = th_region_name();
  const char *ini =
      th_ini_at(rdir, "both", name, 64, 16, "mode = join\njoin_timeout_ms = 200\n", NULL);
  char want[256];
  snprintf(want, sizeof(want),
           "nobody has created %s yet (waited 200 ms, region.join_timeout_ms): start the "
           "producer first, or use region.mode = auto",
           th_region_path(rdir, name));
  expect_open_fails(ini, NULL, 0, ECC_ERR_REGION, want, 190, 5000);
  cr_expect_eq(th_count_entries(rdir), 0, "mode join created something");
}

/* ---- a tmpfs too small ------------------------------------------------------ */

Test(faults, tmpfs_too_small_fails_with_enospc_and_leaves_nothing)
{
  char mnt[64];
  snprintf(mnt, sizeof(mnt), "/tmp/ecc-tiny-XXXXXX");
  cr_assert_not_null(mkdtemp(mnt));
  if (mount("tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0700") != 0) {
    int e = errno;
    rmdir(mnt);
    teardown(); /* a skipped test does not run the suite's fini */
    cr_skip_test("cannot mount a 1 MiB tmpfs here (needs root or CAP_SYS_ADMIN): %s", strerror(e));
  }
  const char *name = th_region_name();
  const char *big = th_ini_at(mnt, "both", name, 4096, 1024, NULL, NULL); /* 4 MiB */
  char path[160];
  snprintf(path, sizeof(path), "%s", th_region_path(mnt, name));
  int fds = th_count_fds();
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(big, NULL, &c, err, sizeof(err));
  int left = th_count_entries(mnt);
  /* A control: a region that fits is created in the same tmpfs. */
  const char *small = th_ini_at(mnt, "both", name, 4096, 128, NULL, NULL); /* 512 KiB */
  ecc_connector_t *ok = NULL;
  char err2[1024] = "";
  int rc2 = ecc_open(small, NULL, &ok, err2, sizeof(err2));
  if (rc2 == ECC_OK)
    ecc_close(ok);
  int left_after = th_count_entries(mnt);
  cr_expect_eq(umount(mnt), 0, "umount %s: %s", mnt, strerror(errno));
  rmdir(mnt);

  cr_assert_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, err);
  cr_assert_null(c);
  cr_expect_not_null(strstr(err, strerror(ENOSPC)), "ENOSPC not named: %s", err);
  cr_expect_not_null(strstr(err, path), "the region path is not named: %s", err);
  cr_expect_eq(left, 0, "the failed create left %d entries in the tmpfs", left);
  cr_expect_eq(th_count_fds(), fds);
  cr_expect_eq(rc2, ECC_OK, "a region that fits failed too: %s", err2);
  cr_expect_eq(left_after, 0);
}

/* ---- the in-flight bound ---------------------------------------------------- */

Test(faults, inflight_bound_refuses_each_direction_alone_and_quietly)
{
  const char *name = th_region_name();
  const char *ini = th_ini_at(rdir, "both", name, 64, 64, "[connector]\nmax_inflight = 3\n", NULL);
  th_captured[0] = '\0';
  ecc_connector_t *c = open_role(ini, "both", ECC_LOG_WARN);
  static uint8_t buf[64], dst[8][64];
  th_fill(buf, sizeof(buf), 3);
  uint32_t ids[] = {1};
  /* Completions count against the bound until polled, so no timing matters. */
  for (uint64_t i = 0; i < 3; i++) {
    ecc_load_entry_t l = {i, ids, 1, (uint64_t)(uintptr_t)dst[i], 64};
    cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  }
  ecc_load_entry_t l = {3, ids, 1, (uint64_t)(uintptr_t)dst[3], 64};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_ERR_BUSY);
  char text[256] = "";
  ecc_last_error(c, text, sizeof(text));
  cr_expect_not_null(strstr(text, "max_inflight"), "%s", text);
  /* Saves have their own bound. */
  for (int i = 0; i < 3; i++) {
    char key[16];
    snprintf(key, sizeof(key), "s%d", i);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)buf, 64, ids, 1};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK, "saves were refused by the loads' bound");
  }
  ecc_save_entry_t s = {"s3", (uint64_t)(uintptr_t)buf, 64, ids, 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_ERR_BUSY);
  cr_expect_eq(ecc_load(c, &l, 1, NULL), ECC_ERR_BUSY, "BUSY must persist until poll");

  ecc_completion_t done[16];
  size_t got = th_poll_until(c, done, 6, 5000);
  cr_assert_eq(got, 6);
  for (size_t i = 0; i < got; i++)
    cr_expect(!(done[i].direction == ECC_DIR_LOAD && done[i].transfer_id == 3),
              "the refused load was transferred");
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK, "the queued save was lost after BUSY");
  got = th_poll_until(c, done, 2, 5000);
  cr_assert_eq(got, 2);
  const ecc_completion_t *sv = done[0].direction == ECC_DIR_SAVE ? &done[0] : &done[1];
  const ecc_completion_t *ld = done[0].direction == ECC_DIR_SAVE ? &done[1] : &done[0];
  cr_expect_str_eq(sv->key, "s3");
  cr_expect_eq(ld->direction, ECC_DIR_LOAD);
  cr_expect_eq(ld->transfer_id, 3);
  cr_expect_null(strstr(th_captured, "max_inflight"),
                 "BUSY is back-pressure and must not be logged as an error: %s", th_captured);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- shutdown while copies run ---------------------------------------------- */

#define SBS (256u * 1024u)
#define SROWS 64u /* 16 MiB per entry */
#define SENTRIES 4u

Test(faults, shutdown_with_large_transfers_in_flight_waits_frees_and_unlinks)
{
  const char *name = th_region_name();
  const char *ini =
      th_ini_at(rdir, "both", name, SBS, SROWS * SENTRIES, "[engine]\nhost_threads = 1\n", NULL);
  int fds = th_count_fds(), threads = count_threads();
  ecc_connector_t *c = open_role(ini, "both", ECC_LOG_WARN);
  char path[256];
  snprintf(path, sizeof(path), "%s", th_describe(c).region_path);
  size_t bytes = (size_t)SBS * SROWS;
  uint8_t *src[SENTRIES], *dst[SENTRIES];
  uint32_t ids[SENTRIES][SROWS];
  for (uint32_t e = 0; e < SENTRIES; e++) {
    src[e] = malloc(bytes);
    dst[e] = calloc(1, bytes);
    cr_assert(src[e] != NULL && dst[e] != NULL);
    th_fill(src[e], bytes, 40 + e);
    for (uint32_t b = 0; b < SROWS; b++)
      ids[e][b] = e * SROWS + (SROWS - 1 - b); /* descending: one descriptor per block */
    char key[16];
    snprintf(key, sizeof(key), "big%u", e);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)src[e], bytes, ids[e], SROWS};
    cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  }
  /* Loads of the same blocks queue behind the saves (FIFO), and one save
   * stays queued, never flushed. */
  for (uint32_t e = 0; e < SENTRIES; e++) {
    ecc_load_entry_t l = {e, ids[e], SROWS, (uint64_t)(uintptr_t)dst[e], bytes};
    cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  }
  ecc_save_entry_t s = {"never-flushed", (uint64_t)(uintptr_t)src[0], 64, ids[0], 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);

  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_expect(!th_exists(path), "the creator left %s behind", path);
  cr_expect_eq(th_count_fds(), fds, "descriptors leaked");
  cr_expect_eq(count_threads(), threads, "copy threads outlived shutdown");
  /* Shutdown waited for the loads: their destinations are complete. */
  for (uint32_t e = 0; e < SENTRIES; e++) {
    cr_expect_eq(memcmp(dst[e], src[e], bytes), 0, "load %u was cut short by shutdown", e);
    free(src[e]);
    free(dst[e]);
  }
  cr_expect_eq(th_count_entries(rdir), 0);
}
