/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_engine_signals.c - the host engine's SIGBUS/SIGSEGV handler leaves
 * every fault that is not the region's under a copy to the action the
 * process had before: a handler installed first still runs, with its
 * arguments and mask, and the default action or an ignored fault still
 * kills by the signal. Each case runs in a forked child.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define BS (256u * 1024u)
#define NB 8u
#define PAGE 4096u

/* How a child ends, besides by a signal. */
enum {
  CHILD_HANDLED = 42,      /* the prior handler ran, with the fault's arguments */
  CHILD_WRONG_ARGS = 43,   /* it ran with another signal, address or code */
  CHILD_UNMASKED = 44,     /* it ran without its signal blocked */
  CHILD_SURVIVED = 45,     /* the fault did not stop the child */
  CHILD_SETUP_FAILED = 46, /* the connector or a mapping could not be set up */
};

/* Where a child faults. */
enum fault {
  SEGV_OUTSIDE,         /* the main thread reads a PROT_NONE page */
  BUS_OUTSIDE,          /* it reads a page of a truncated file of its own */
  BUS_IN_REGION,        /* it reads the engine's own region mapping, truncated */
  SEGV_IN_COPY_CALLERS, /* a copy thread writes a load's PROT_NONE destination */
  SEGV_SENT,            /* SIGSEGV sent with raise: no fault at all */
};

/* What the child had for the signal before the engine was created. */
enum prior { PRIOR_HANDLER, PRIOR_ONE_SHOT, PRIOR_DEFAULT, PRIOR_IGNORED };

static char rdir[64];
static const char *ini;

static void setup(void)
{
  snprintf(rdir, sizeof(rdir), "/dev/shm/eccsig-XXXXXX");
  cr_assert_not_null(mkdtemp(rdir), "mkdtemp: %s", strerror(errno));
  ini = th_ini_at(rdir, "both", th_region_name(), BS, NB, NULL, "host_threads = 2\n");
}

static void teardown(void)
{
  th_remove_tree(rdir);
}

TestSuite(signals, .init = setup, .fini = teardown, .timeout = 60);

/* The child's side: what its handler expects to see. */
static int want_sig;
static uintptr_t want_lo, want_hi;
static uint8_t *fix_page; /* the one-shot handler makes this readable */

static void prior_handler(int sig, siginfo_t *info, void *uctx)
{
  (void)uctx;
  uintptr_t at = (uintptr_t)info->si_addr;
  if (sig != want_sig || info->si_signo != sig || info->si_code <= 0 || at < want_lo ||
      at >= want_hi)
    _exit(CHILD_WRONG_ARGS);
  sigset_t now;
  if (pthread_sigmask(SIG_BLOCK, NULL, &now) != 0 || sigismember(&now, sig) != 1)
    _exit(CHILD_UNMASKED);
  _exit(CHILD_HANDLED);
}

/* Installed with SA_RESETHAND: makes the page readable and returns, so the
 * read is retried and succeeds; a second fault gets the default. */
static void one_shot_handler(int sig, siginfo_t *info, void *uctx)
{
  (void)sig;
  (void)info;
  (void)uctx;
  if (mprotect(fix_page, PAGE, PROT_READ) != 0)
    _exit(CHILD_SETUP_FAILED);
}

static void set_prior(int sig, enum prior p)
{
  struct sigaction a;
  memset(&a, 0, sizeof(a));
  sigemptyset(&a.sa_mask);
  if (p == PRIOR_HANDLER || p == PRIOR_ONE_SHOT) {
    a.sa_flags = SA_SIGINFO | (p == PRIOR_ONE_SHOT ? SA_RESETHAND : 0);
    a.sa_sigaction = p == PRIOR_HANDLER ? prior_handler : one_shot_handler;
  } else {
    a.sa_handler = p == PRIOR_DEFAULT ? SIG_DFL : SIG_IGN;
  }
  if (sigaction(sig, &a, NULL) != 0)
    _exit(CHILD_SETUP_FAILED);
}

/* The start of this process's mapping of the file at `path`, or NULL. By
 * inode: the region was mapped under the name it was built at. */
static uint8_t *mapping_of(const char *path)
{
  struct stat st;
  FILE *f = stat(path, &st) == 0 ? fopen("/proc/self/maps", "r") : NULL;
  if (f == NULL)
    return NULL;
  char line[1024];
  uintptr_t lo = 0;
  while (lo == 0 && fgets(line, sizeof(line), f) != NULL) {
    unsigned long long start, end, offset, ino;
    char perms[8], dev[16];
    if (sscanf(line, "%llx-%llx %7s %llx %15s %llu", &start, &end, perms, &offset, dev, &ino) ==
            6 &&
        ino == (unsigned long long)st.st_ino && offset == 0)
      lo = (uintptr_t)start;
  }
  fclose(f);
  return (uint8_t *)lo;
}

static uint8_t *no_access(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    _exit(CHILD_SETUP_FAILED);
  return p;
}

/* A page of a file of the child's own, mapped and then cut to nothing. */
static uint8_t *cut_page(void)
{
  char path[128];
  snprintf(path, sizeof(path), "%s/cut-%ld", rdir, (long)getpid());
  int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, PAGE) != 0)
    _exit(CHILD_SETUP_FAILED);
  void *p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED || ftruncate(fd, 0) != 0)
    _exit(CHILD_SETUP_FAILED);
  close(fd);
  unlink(path);
  return p;
}

static void touch(const uint8_t *p)
{
  (void)*(const volatile uint8_t *)p;
}

static void expect_at(int sig, const void *lo, size_t bytes)
{
  want_sig = sig;
  want_lo = (uintptr_t)lo;
  want_hi = (uintptr_t)lo + bytes;
  atomic_signal_fence(memory_order_seq_cst); /* set before the fault */
}

/* The status of the next completion, or -1 after 10 s or on a failed
 * poll (the child's own loop: Criterion's asserts belong to the parent). */
static int next_status(ecc_connector_t *c)
{
  for (int tries = 0; tries < 100000; tries++) {
    ecc_completion_t done;
    size_t n = 0;
    if (ecc_poll(c, &done, 1, &n) != ECC_OK)
      return -1;
    if (n == 1)
      return done.status;
    usleep(100);
  }
  return -1;
}

/* A connector with the host engine, which has copied both ways once. */
static ecc_connector_t *open_copied(uint8_t *buf)
{
  ecc_kv_t kv = {"connector.role", "both"};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512];
  if (ecc_open(ini, &o, &c, err, sizeof(err)) != ECC_OK)
    _exit(CHILD_SETUP_FAILED);
  static uint32_t ids[NB];
  for (uint32_t i = 0; i < NB; i++)
    ids[i] = i;
  ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, (uint64_t)BS * NB, ids, NB};
  ecc_load_entry_t l = {1, ids, NB, (uint64_t)(uintptr_t)buf, (uint64_t)BS * NB};
  if (ecc_save(c, &s, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK || next_status(c) != ECC_OK ||
      ecc_load(c, &l, 1, NULL) != ECC_OK || next_status(c) != ECC_OK)
    _exit(CHILD_SETUP_FAILED);
  return c;
}

static void fault_in_copy(ecc_connector_t *c)
{
  uint8_t *dst = no_access((size_t)BS * NB);
  expect_at(SIGSEGV, dst, (size_t)BS * NB);
  static uint32_t ids[NB];
  for (uint32_t i = 0; i < NB; i++)
    ids[i] = i;
  ecc_load_entry_t l = {1, ids, NB, (uint64_t)(uintptr_t)dst, (uint64_t)BS * NB};
  if (ecc_load(c, &l, 1, NULL) != ECC_OK)
    _exit(CHILD_SETUP_FAILED);
  next_status(c); /* the handler ends the child first */
}

static void child(int sig, enum prior p, enum fault f)
{
  struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none); /* a child killed on purpose dumps no core */
  set_prior(sig, p);
  uint8_t *buf = malloc((size_t)BS * NB);
  if (buf == NULL)
    _exit(CHILD_SETUP_FAILED);
  memset(buf, 7, (size_t)BS * NB);
  ecc_connector_t *c = open_copied(buf);
  if (f == SEGV_OUTSIDE) {
    uint8_t *page = no_access(2 * PAGE);
    fix_page = page;
    expect_at(SIGSEGV, page, PAGE);
    touch(&page[0]);
    if (p == PRIOR_ONE_SHOT) /* the default now */
      touch(&page[PAGE]);
  } else if (f == BUS_OUTSIDE) {
    uint8_t *page = cut_page();
    expect_at(SIGBUS, page, PAGE);
    touch(&page[0]);
  } else if (f == BUS_IN_REGION) {
    ecc_info_t info = {.struct_size = sizeof(info)};
    uint8_t *map = ecc_describe(c, &info) == ECC_OK ? mapping_of(info.region_path) : NULL;
    if (map == NULL || truncate(info.region_path, 0) != 0)
      _exit(CHILD_SETUP_FAILED);
    expect_at(SIGBUS, map, PAGE);
    touch(&map[0]);
  } else if (f == SEGV_IN_COPY_CALLERS) {
    fault_in_copy(c);
  } else {
    raise(SIGSEGV);
  }
  _exit(CHILD_SURVIVED);
}

/* Runs the child and returns its wait status; a child still running after
 * 10 s (a handler that returns to the fault forever) is killed and fails. */
static int run_child(int sig, enum prior p, enum fault f)
{
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
  if (pid == 0)
    child(sig, p, f);
  int status = 0;
  for (int waited = 0; waited < 1000; waited++) {
    pid_t got = waitpid(pid, &status, WNOHANG);
    cr_assert_neq(got, -1, "waitpid: %s", strerror(errno));
    if (got == pid)
      return status;
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  cr_assert_fail("the child (signal %d, prior %d, fault %d) still ran after 10 s", sig, p, f);
  return status;
}

static void expect_handled(int status, const char *what)
{
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == CHILD_HANDLED,
            "%s: the prior handler did not run as installed (%s %d; 42 is handled, 43 wrong "
            "arguments, 44 its signal not blocked, 45 survived, 46 setup failed)",
            what, WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void expect_killed_by(int status, int sig, const char *what)
{
  cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == sig,
            "%s: not killed by signal %d (%s %d; 45 is survived, 46 setup failed)", what, sig,
            WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

Test(signals, a_fault_outside_a_copy_reaches_the_handler_installed_before)
{
  expect_handled(run_child(SIGSEGV, PRIOR_HANDLER, SEGV_OUTSIDE), "SIGSEGV, main thread");
  expect_handled(run_child(SIGBUS, PRIOR_HANDLER, BUS_OUTSIDE), "SIGBUS, main thread");
  expect_handled(run_child(SIGBUS, PRIOR_HANDLER, BUS_IN_REGION),
                 "SIGBUS in the region, outside a copy");
}

Test(signals, a_fault_in_a_copy_on_the_callers_memory_reaches_the_handler_installed_before)
{
  expect_handled(run_child(SIGSEGV, PRIOR_HANDLER, SEGV_IN_COPY_CALLERS),
                 "SIGSEGV on a load's destination");
}

Test(signals, with_the_default_action_a_fault_still_kills_by_its_signal)
{
  expect_killed_by(run_child(SIGSEGV, PRIOR_DEFAULT, SEGV_OUTSIDE), SIGSEGV, "main thread");
  expect_killed_by(run_child(SIGBUS, PRIOR_DEFAULT, BUS_OUTSIDE), SIGBUS, "main thread");
  expect_killed_by(run_child(SIGBUS, PRIOR_DEFAULT, BUS_IN_REGION), SIGBUS,
                   "the region, outside a copy");
  expect_killed_by(run_child(SIGSEGV, PRIOR_DEFAULT, SEGV_IN_COPY_CALLERS), SIGSEGV,
                   "a load's destination");
  expect_killed_by(run_child(SIGSEGV, PRIOR_DEFAULT, SEGV_SENT), SIGSEGV, "raise(SIGSEGV)");
}

Test(signals, an_ignored_fault_still_kills_and_an_ignored_sent_signal_does_not)
{
  expect_killed_by(run_child(SIGSEGV, PRIOR_IGNORED, SEGV_OUTSIDE), SIGSEGV, "main thread");
  expect_killed_by(run_child(SIGBUS, PRIOR_IGNORED, BUS_OUTSIDE), SIGBUS, "main thread");
  int status = run_child(SIGSEGV, PRIOR_IGNORED, SEGV_SENT);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == CHILD_SURVIVED,
            "raise(SIGSEGV) ignored: the child did not carry on (%s %d)",
            WIFEXITED(status) ? "exit" : "signal",
            WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

Test(signals, a_one_shot_handler_runs_once_then_the_default_kills)
{
  expect_killed_by(run_child(SIGSEGV, PRIOR_ONE_SHOT, SEGV_OUTSIDE), SIGSEGV,
                   "the second fault after an SA_RESETHAND handler");
}
