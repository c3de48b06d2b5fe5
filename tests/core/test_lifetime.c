/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_lifetime.c - the host library's promises about a connector's life:
 * ecc_close racing with calls on other threads, a log callback that calls
 * back, connectors inherited by a forked child, handle values across a
 * plugin reload, plugins that break the ABI in their answers, and the
 * lifetime of ecc_strerror's text.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"

#define BS 256u
#define NB 64u

static char dir[64];

static void setup(void)
{
  snprintf(dir, sizeof(dir), "/dev/shm/ecclife-XXXXXX");
  cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(dir);
}

TestSuite(lifetime, .init = setup, .fini = teardown, .timeout = 60);

static ecc_connector_t *open_fixture(const char *name, const char *tag,
                                     const ecc_open_options_t *opt)
{
  char text[1024];
  snprintf(text, sizeof(text), "[plugin]\npath = %s\nlog_level = error\n[good]\ntag = %s\n",
           th_fixture(name), tag);
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(th_write_temp(text, ".ini"), opt, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "open %s: %s", name, err);
  return c;
}

static ecc_connector_t *open_real(const char *region, const ecc_open_options_t *opt)
{
  const char *ini = th_ini_at(dir, "both", region, BS, NB, NULL, NULL);
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini, opt, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "open: %s", err);
  return c;
}

static ecc_save_entry_t one_save(const char *key, const void *src, const uint32_t *block)
{
  return (ecc_save_entry_t){key, (uint64_t)(uintptr_t)src, BS, block, 1};
}

/* ---- ecc_close racing with calls on other threads ---- */

struct fx_gate {
  atomic_int inside, calls, shutting, inside_at_shutdown, entered_after;
  atomic_int *release;
};

#define RACERS 4

struct racer {
  ecc_connector_t *c;
  atomic_int *turned_away;
  atomic_int *release;
  atomic_int calls;
  int last_rc;
};

static void *race(void *arg)
{
  struct racer *r = arg;
  uint32_t block = 0;
  char src[BS] = {0};
  ecc_save_entry_t e = one_save("k", src, &block);
  for (unsigned i = 0;; i++) {
    ecc_completion_t done[4];
    size_t n = 0;
    int rc = (i % 2) ? ecc_save(r->c, &e, 1) : ecc_poll(r->c, done, 4, &n);
    atomic_fetch_add(&r->calls, 1);
    if (rc == ECC_ERR_CLOSED) {
      r->last_rc = rc;
      if (atomic_fetch_add(r->turned_away, 1) + 1 == RACERS)
        atomic_store(r->release, 1);
      return NULL;
    }
  }
}

Test(lifetime, close_waits_for_calls_inside_and_turns_away_later_ones)
{
  ecc_connector_t *c = open_fixture("gate", "race", NULL);
  void *dl = dlopen(th_fixture("gate"), RTLD_NOW | RTLD_NOLOAD);
  cr_assert_not_null(dl, "the fixture is loaded: %s", dlerror());
  struct fx_gate *gate = dlsym(dl, "fx_gate");
  cr_assert_not_null(gate);
  atomic_int turned_away = 0, release = 0;
  gate->release = &release;

  struct racer r[RACERS];
  pthread_t t[RACERS];
  for (int i = 0; i < RACERS; i++) {
    r[i] = (struct racer){.c = c, .turned_away = &turned_away, .release = &release};
    cr_assert_eq(pthread_create(&t[i], NULL, race, &r[i]), 0);
  }
  while (atomic_load(&gate->calls) < 200)
    sched_yield();
  cr_assert_eq(ecc_close(c), ECC_OK);
  for (int i = 0; i < RACERS; i++)
    pthread_join(t[i], NULL);

  cr_assert_eq(atomic_load(&turned_away), RACERS, "every caller saw ECC_ERR_CLOSED");
  cr_assert_eq(atomic_load(&gate->inside_at_shutdown), 0,
               "shutdown ran while %d calls were inside the plugin",
               atomic_load(&gate->inside_at_shutdown));
  cr_assert_eq(atomic_load(&gate->entered_after), 0,
               "%d calls reached the plugin after its shutdown began",
               atomic_load(&gate->entered_after));
  dlclose(dl);
}

/* ---- a log callback that calls back ---- */

struct calls_back {
  ecc_connector_t *_Atomic c;
  atomic_int stats_ok; /* ecc_get_stats from inside the callback succeeded */
  atomic_int flush_rc; /* what ecc_flush returned from inside it (1: not tried) */
};

static __thread int in_callback;

static void calling_back(void *user, int level, const char *msg)
{
  (void)level;
  struct calls_back *cb = user;
  ecc_connector_t *c = atomic_load(&cb->c);
  if (c == NULL || in_callback)
    return;
  in_callback = 1;
  ecc_stats_t st = {.struct_size = sizeof(st)};
  if (ecc_get_stats(c, &st) == ECC_OK)
    atomic_fetch_add(&cb->stats_ok, 1);
  if (strstr(msg, "out of range") != NULL)
    atomic_store(&cb->flush_rc, ecc_flush(c, NULL));
  in_callback = 0;
}

Test(lifetime, log_callback_may_call_back_into_the_connector)
{
  struct calls_back cb = {.flush_rc = 1};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = calling_back, .log_user = &cb, .log_level = ECC_LOG_DEBUG};
  ecc_connector_t *c = open_real(th_region_name(), &opt);
  atomic_store(&cb.c, c);

  /* The plugin logs each finished batch at debug level from inside poll. */
  char src[BS];
  th_fill(src, sizeof(src), 1);
  uint32_t block = 3;
  ecc_save_entry_t e = one_save("called-back", src, &block);
  cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_assert_gt(atomic_load(&cb.stats_ok), 0, "stats from the callback never succeeded");

  /* A refused load logs its reason while the step is being checked. */
  uint32_t bad = NB + 5;
  char dst[BS];
  ecc_load_entry_t l = {1, &bad, 1, (uint64_t)(uintptr_t)dst, BS};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_ERR_RANGE);
  cr_assert_eq(atomic_load(&cb.flush_rc), ECC_OK, "flush from the callback returned %d",
               atomic_load(&cb.flush_rc));
  atomic_store(&cb.c, NULL);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- connectors inherited by fork() ---- */

struct child_report {
  int save_rc, flush_rc, poll_rc, stats_rc, last_error_rc, close_rc;
  char last_error[256];
};

static void child_uses(ecc_connector_t *c, int fd)
{
  struct child_report rep;
  memset(&rep, 0, sizeof(rep));
  char src[BS] = {0};
  uint32_t block = 1;
  ecc_save_entry_t e = one_save("from-child", src, &block);
  ecc_completion_t done[4];
  size_t n = 0;
  ecc_stats_t st = {.struct_size = sizeof(st)};
  rep.save_rc = ecc_save(c, &e, 1);
  rep.flush_rc = ecc_flush(c, NULL);
  rep.poll_rc = ecc_poll(c, done, 4, &n);
  rep.stats_rc = ecc_get_stats(c, &st);
  rep.last_error_rc = ecc_last_error(c, rep.last_error, sizeof(rep.last_error));
  rep.close_rc = ecc_close(c);
  ssize_t w = write(fd, &rep, sizeof(rep));
  _exit(w == (ssize_t)sizeof(rep) ? 0 : 1);
}

/* Waits for pid at most 10 s; kills it and fails if it hangs. */
static int reap_within(pid_t pid)
{
  for (int i = 0; i < 1000; i++) {
    int status = 0;
    pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid)
      return status;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  cr_assert_fail("the forked child hung using the inherited connector");
  return -1;
}

Test(lifetime, forked_child_is_turned_away_and_touches_nothing_shared)
{
  const char *name = th_region_name();
  ecc_connector_t *c = open_real(name, NULL);
  char src[BS];
  th_fill(src, sizeof(src), 7);
  uint32_t block = 5;
  ecc_save_entry_t e = one_save("parent", src, &block);
  cr_assert_eq(ecc_save(c, &e, 1), ECC_OK); /* queued, not flushed, at the fork */

  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    child_uses(c, p[1]);
  }
  close(p[1]);
  struct child_report rep;
  int status = reap_within(pid);
  cr_assert_eq(read(p[0], &rep, sizeof(rep)), (ssize_t)sizeof(rep), "child wrote no report");
  close(p[0]);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  cr_assert_eq(rep.save_rc, ECC_ERR_CLOSED);
  cr_assert_eq(rep.flush_rc, ECC_ERR_CLOSED);
  cr_assert_eq(rep.poll_rc, ECC_ERR_CLOSED);
  cr_assert_eq(rep.stats_rc, ECC_ERR_CLOSED);
  cr_assert_eq(rep.last_error_rc, ECC_ERR_CLOSED);
  cr_assert(strstr(rep.last_error, "fork") != NULL, "%s", rep.last_error);
  cr_assert_eq(rep.close_rc, ECC_OK);

  /* The parent's region and its queued save are untouched. */
  cr_assert(th_exists(th_region_path(dir, name)), "the child removed the parent's region");
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[1];
  cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
  cr_assert_str_eq(done[0].key, "parent");
  cr_assert_eq(done[0].status, ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* The plugin keeps the same promise for hosts that use its table directly. */

static const ecc_plugin_t *load_plugin(void **dl)
{
  *dl = dlopen(ECC_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(*dl, "dlopen: %s", dlerror());
  const ecc_plugin_t *t = dlsym(*dl, ECC_PLUGIN_SYMBOL);
  cr_assert_not_null(t);
  return t;
}

static ecc_handle_t create_direct(const ecc_plugin_t *t, const char *region)
{
  char size[32];
  snprintf(size, sizeof(size), "%u", BS * NB);
  ecc_kv_t kv[] = {{"connector.role", "both"},   {"region.name", region}, {"region.dir", dir},
                   {"region.block_size", "256"}, {"region.size", size},   {"engine.type", "host"}};
  char err[512] = "";
  ecc_create_args_t args = {.struct_size = sizeof(args),
                            .abi_major = ECC_ABI_MAJOR,
                            .abi_minor = ECC_ABI_MINOR,
                            .config = kv,
                            .n_config = sizeof(kv) / sizeof(kv[0]),
                            .err = err,
                            .err_cap = sizeof(err)};
  ecc_handle_t h = 0;
  cr_assert_eq(t->create(&args, &h), ECC_OK, "create: %s", err);
  return h;
}

Test(lifetime, plugin_refuses_a_handle_of_the_parent_in_a_forked_child)
{
  void *dl;
  const ecc_plugin_t *t = load_plugin(&dl);
  const char *name = th_region_name();
  ecc_handle_t h = create_direct(t, name);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    char src[BS] = {0};
    uint32_t block = 0;
    ecc_save_entry_t e = one_save("child", src, &block);
    int ok = t->save(h, &e, 1) == ECC_ERR_CLOSED && t->shutdown(h) == ECC_ERR_CLOSED;
    _exit(ok ? 0 : 1);
  }
  int status = reap_within(pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child's save or shutdown was not refused");
  cr_assert(th_exists(th_region_path(dir, name)));
  cr_assert_eq(t->shutdown(h), ECC_OK);
  dlclose(dl);
}

/* ---- handle values across a reload of the plugin ---- */

Test(lifetime, handle_stays_invalid_after_the_plugin_is_loaded_again)
{
  void *dl;
  const ecc_plugin_t *t = load_plugin(&dl);
  ecc_handle_t old = create_direct(t, th_region_name());
  cr_assert_eq(t->shutdown(old), ECC_OK);
  dlclose(dl);

  t = load_plugin(&dl);
  ecc_handle_t fresh = create_direct(t, th_region_name());
  cr_assert_neq(fresh, old, "a new connector got the value of one shut down before");
  char src[BS] = {0};
  uint32_t block = 0;
  ecc_save_entry_t e = one_save("stale", src, &block);
  cr_assert_eq(t->save(old, &e, 1), ECC_ERR_CLOSED);
  cr_assert_eq(t->shutdown(fresh), ECC_OK);
  dlclose(dl);
}

/* ---- plugins that break the ABI in their answers ---- */

struct log_seen {
  atomic_int errors;
  char last[512];
};

static void note_log(void *user, int level, const char *msg)
{
  struct log_seen *s = user;
  if (level == ECC_LOG_ERROR) {
    atomic_fetch_add(&s->errors, 1);
    snprintf(s->last, sizeof(s->last), "%s", msg);
  }
}

Test(lifetime, status_outside_the_closed_set_is_an_error)
{
  struct log_seen seen = {0};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = note_log, .log_user = &seen, .log_level = ECC_LOG_ERROR};
  ecc_connector_t *c = open_fixture("liar", "status", &opt);
  char src[BS] = {0};
  uint32_t block = 0;
  ecc_save_entry_t e = one_save("k", src, &block);
  cr_assert_eq(ecc_save(c, &e, 1), ECC_ERR_INCOMPATIBLE);
  cr_assert_eq(ecc_flush(c, NULL), ECC_ERR_INCOMPATIBLE);
  char text[512] = "";
  cr_assert_eq(ecc_last_error(c, text, sizeof(text)), ECC_OK);
  cr_assert(strstr(text, "-99") && strstr(text, "flush") && strstr(text, "liar"), "%s", text);
  cr_assert_eq(atomic_load(&seen.errors), 2);
  cr_assert(strstr(seen.last, "not an ECC_* status code"), "%s", seen.last);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

static void saved_then_polled(const char *mode, size_t cap, const char *want)
{
  ecc_connector_t *c = open_fixture("liar", mode, NULL);
  char src[BS] = {0};
  uint32_t block = 0;
  ecc_save_entry_t e[2] = {one_save("a", src, &block), one_save("b", src, &block)};
  cr_assert_eq(ecc_save(c, e, 2), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t out[8];
  size_t n = 12345;
  cr_assert_eq(ecc_poll(c, out, cap, &n), ECC_ERR_INCOMPATIBLE, "mode %s", mode);
  cr_assert_eq(n, 0, "mode %s passed on %zu completions", mode, n);
  char text[512] = "";
  cr_assert_eq(ecc_last_error(c, text, sizeof(text)), ECC_OK);
  cr_assert(strstr(text, want), "mode %s: %s", mode, text);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(lifetime, completion_count_beyond_the_buffer_is_an_error)
{
  saved_then_polled("count", 4, "reported 1004 completions from poll into room for 4");
}

Test(lifetime, malformed_completion_is_an_error)
{
  saved_then_polled("record", 8, "malformed completion");
}

/* ---- ecc_strerror ---- */

static void *strerror_unknown(void *arg)
{
  (void)arg;
  return (void *)ecc_strerror(-1234);
}

Test(lifetime, strerror_text_lives_forever)
{
  const char *a = ecc_strerror(-77);
  char copy[256];
  snprintf(copy, sizeof(copy), "%s", a);
  pthread_t t;
  void *b = NULL;
  cr_assert_eq(pthread_create(&t, NULL, strerror_unknown, NULL), 0);
  pthread_join(t, &b);
  (void)ecc_strerror(ECC_ERR_RANGE);
  (void)ecc_strerror(42);
  /* The other thread has exited: its text must still be readable, and ours
   * unchanged by the later calls. */
  cr_assert_str_eq(a, copy);
  cr_assert_str_eq((const char *)b, copy);
  cr_assert(strstr(copy, "unknown status code"), "%s", copy);
}
