/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dir_lock.c - the directory's lock timeout: a process stopped while it
 * holds the lock makes the others' calls fail with ECC_ERR_BUSY naming it,
 * within the timeout, and everything works again once it goes on or dies;
 * and the configuration key that sets the timeout.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/directory/directory.h"

TestSuite(dir_lock, .timeout = 60);

#define TIMEOUT_MS 100u
/* What a loaded machine may add to the wait before the call returns. */
#define MARGIN_MS 1500u

struct rig {
  void *mem;
  size_t bytes;
  struct dir_params p;
  struct dir d;
  atomic_int *stopped; /* in the shared mapping: the child is in its callback */
};

static char why[512];

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void rig_open(struct rig *r, uint64_t lock_timeout_ms)
{
  memset(r, 0, sizeof(*r));
  r->p = (struct dir_params){.num_blocks = 64,
                             .block_size = 64,
                             .max_entries = 16,
                             .max_pins = 16,
                             .lock_timeout_ns = lock_timeout_ms * 1000000u};
  r->bytes = dir_bytes(&r->p);
  cr_assert_gt(r->bytes, 0);
  r->mem = mmap(NULL, r->bytes + 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(r->mem, MAP_FAILED);
  r->stopped = (atomic_int *)((char *)r->mem + r->bytes);
  cr_assert_eq(dir_format(r->mem, r->bytes, &r->p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&r->d, r->mem, r->bytes, &r->p, why, sizeof(why)), ECC_OK, "%s", why);
  int outcome;
  struct dir_entry_info info;
  cr_assert_eq(dir_reserve(&r->d, "kept", 64, &outcome, &info, why, sizeof(why)), ECC_OK, "%s",
               why);
  cr_assert_eq(dir_publish(&r->d, info.ref, why, sizeof(why)), ECC_OK, "%s", why);
}

static atomic_int *child_flag;
static unsigned child_hold_ms;

/* Runs under the directory's lock, inside dir_list. */
static void stop_inside(void *user, const struct dir_entry_info *e)
{
  (void)user;
  (void)e;
  atomic_store(child_flag, 1);
  raise(SIGSTOP);
}

static void hold_inside(void *user, const struct dir_entry_info *e)
{
  (void)user;
  (void)e;
  atomic_store(child_flag, 1);
  usleep(child_hold_ms * 1000u);
}

/* A child of the test that lists the directory with `fn` as callback, so
 * that it holds the lock while fn runs; killed if the test process ends. */
static pid_t spawn_holder(struct rig *r, void (*fn)(void *, const struct dir_entry_info *))
{
  pid_t parent = getpid();
  child_flag = r->stopped;
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(99);
    _exit(dir_list(&r->d, fn, NULL) == ECC_OK ? 0 : 1);
  }
  return pid;
}

/* The child has stopped itself inside the lock. */
static void wait_stopped(pid_t pid)
{
  int st;
  cr_assert_eq(waitpid(pid, &st, WUNTRACED), pid);
  cr_assert(WIFSTOPPED(st), "the child did not stop (status 0x%x)", st);
  cr_assert_eq(atomic_load(child_flag), 1, "the child stopped outside its callback");
}

static int lookup(struct rig *r, const char *key, struct dir_pin_ref *pin)
{
  bool found = false;
  return dir_lookup(&r->d, &key, 1, 1, &found, NULL, pin, why, sizeof(why));
}

/* A call refused for the stopped holder: BUSY, after the timeout but not
 * much later, naming the child's pid. */
static void expect_busy(const char *call, int rc, uint64_t t0, pid_t pid)
{
  uint64_t took = now_ms() - t0;
  char pid_text[32];
  snprintf(pid_text, sizeof(pid_text), "pid %d", (int)pid);
  cr_expect_eq(rc, ECC_ERR_BUSY, "%s: %d (%s)", call, rc, why);
  cr_expect_geq(took, TIMEOUT_MS - 5, "%s returned after %llu ms, before the timeout", call,
                (unsigned long long)took);
  cr_expect_leq(took, TIMEOUT_MS + MARGIN_MS, "%s returned after %llu ms", call,
                (unsigned long long)took);
  cr_expect(strstr(why, pid_text) != NULL, "%s: the reason does not name %s: %s", call, pid_text,
            why);
  cr_expect(strstr(why, "directory.lock_timeout_ms") != NULL, "%s: no key named: %s", call, why);
}

Test(dir_lock, a_stopped_holder_makes_calls_busy_naming_it_until_it_goes_on)
{
  struct rig r;
  rig_open(&r, TIMEOUT_MS);
  pid_t pid = spawn_holder(&r, stop_inside);
  wait_stopped(pid);

  struct dir_pin_ref pin;
  uint64_t t0 = now_ms();
  expect_busy("lookup", lookup(&r, "kept", &pin), t0, pid);
  int outcome;
  struct dir_entry_info info;
  t0 = now_ms();
  expect_busy("reserve", dir_reserve(&r.d, "new", 64, &outcome, &info, why, sizeof(why)), t0, pid);
  t0 = now_ms();
  expect_busy("remove", dir_remove(&r.d, "kept", why, sizeof(why)), t0, pid);
  struct dir_counters c;
  cr_expect_eq(dir_get_counters(&r.d, &c), ECC_ERR_BUSY);
  cr_expect_eq(c.lookups, 0, "counters of a refused read must read zero");

  /* Going on, the child leaves the lock; everything works again. */
  cr_assert_eq(kill(pid, SIGCONT), 0);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's dir_list failed (0x%x)", st);
  t0 = now_ms();
  cr_expect_eq(lookup(&r, "kept", &pin), ECC_OK, "%s", why);
  cr_expect_lt(now_ms() - t0, TIMEOUT_MS, "a free lock still waited");
  cr_expect_eq(dir_unpin(&r.d, pin, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_get_counters(&r.d, &c), ECC_OK);
  cr_expect_eq(c.recoveries, 0, "a live holder was repaired as a dead one");
  cr_expect_eq(c.entries, 1);
  cr_expect_eq(c.lookups, 1, "refused lookups were counted");
  cr_expect_eq(dir_check(&r.d, why, sizeof(why)), ECC_OK, "%s", why);
}

Test(dir_lock, a_stopped_holder_killed_is_repaired_as_a_dead_one)
{
  struct rig r;
  rig_open(&r, TIMEOUT_MS);
  pid_t pid = spawn_holder(&r, stop_inside);
  wait_stopped(pid);
  struct dir_pin_ref pin;
  uint64_t t0 = now_ms();
  expect_busy("lookup", lookup(&r, "kept", &pin), t0, pid);
  cr_assert_eq(kill(pid, SIGKILL), 0);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_expect(WIFSIGNALED(st));
  cr_expect_eq(lookup(&r, "kept", &pin), ECC_OK, "%s", why);
  struct dir_counters c;
  cr_expect_eq(dir_get_counters(&r.d, &c), ECC_OK);
  cr_expect_eq(c.recoveries, 1, "the dead holder's lock was not repaired");
  cr_expect_eq(c.entries, 1);
  cr_expect_eq(c.pins_live, 1);
  cr_expect_eq(dir_check(&r.d, why, sizeof(why)), ECC_OK, "%s", why);
}

/* The timeout bounds the wait, it does not cut short a holder that lets go
 * within it. */
Test(dir_lock, a_holder_that_lets_go_within_the_timeout_is_waited_for)
{
  struct rig r;
  rig_open(&r, 3000);
  child_hold_ms = 200;
  pid_t pid = spawn_holder(&r, hold_inside);
  while (atomic_load(r.stopped) == 0)
    usleep(1000);
  struct dir_pin_ref pin;
  uint64_t t0 = now_ms();
  cr_expect_eq(lookup(&r, "kept", &pin), ECC_OK, "%s", why);
  uint64_t took = now_ms() - t0;
  cr_expect_gt(took, 50, "the lookup did not wait for the holder (%llu ms)",
               (unsigned long long)took);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A zero timeout in dir_params means the default, not for ever. */
Test(dir_lock, zero_in_the_params_is_the_default)
{
  struct rig r;
  rig_open(&r, 0);
  cr_expect_eq(r.d.lock_timeout_ns, DIR_LOCK_TIMEOUT_DEFAULT_NS);
  cr_expect_eq(DIR_LOCK_TIMEOUT_DEFAULT_NS, 5000000000ull);
}

/* ---- directory.lock_timeout_ms ---- */

static int parse_one(const char *key, const char *value, struct plugin_config *c, char *err,
                     size_t cap)
{
  ecc_kv_v1_t kv[] = {{"region.block_size", "16"}, {key, value}};
  return config_parse(kv, key != NULL ? 2 : 1, c, err, cap);
}

Test(dir_lock, the_config_key_sets_the_timeout_and_refuses_zero_by_name)
{
  struct plugin_config c;
  char err[256] = "";
  cr_assert_eq(parse_one(NULL, NULL, &c, err, sizeof(err)), ECC_OK, "%s", err);
  cr_expect_eq(c.dir_lock_timeout_ms, 5000);
  cr_assert_eq(parse_one("directory.lock_timeout_ms", "250", &c, err, sizeof(err)), ECC_OK, "%s",
               err);
  cr_expect_eq(c.dir_lock_timeout_ms, 250);
  cr_expect_eq(parse_one("directory.lock_timeout_ms", "0", &c, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "directory.lock_timeout_ms") != NULL && strstr(err, "for ever") != NULL,
            "%s", err);
  cr_expect_eq(parse_one("directory.lock_timeout_ms", "3600001", &c, err, sizeof(err)),
               ECC_ERR_CONFIG);
  cr_expect(strstr(err, "out of range") != NULL, "%s", err);
  cr_expect_eq(parse_one("directory.lock_timeout_ms", "-5", &c, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_expect_eq(parse_one("directory.lock_timeout_ms", "5s", &c, err, sizeof(err)), ECC_ERR_CONFIG);
}
