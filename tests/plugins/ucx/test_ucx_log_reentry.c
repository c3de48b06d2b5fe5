/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_log_reentry.c - libecc-ucx.so's messages made under its locks
 * reach a host log callback that calls back into the same connector
 * (stats, poll, and lookup where the call can be answered) on every
 * message, and every call returns: the client's refused loads, a lost link
 * and its reconnect, the server's session handling (clients connected and
 * gone, refused lookups and pulls), and UCX's own lines routed to a log.
 * A callback on one of the plugin's progress threads is refused at once
 * the client's calls that wait for the network (their answers come through
 * that thread), and a reconnect never waits for such a callback. Each risky
 * call runs under a watchdog, so a deadlock fails the test instead of
 * hanging the suite.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

TestSuite(ucx_log_reentry, .timeout = 90);

#define BS 4096u
#define WATCHDOG_MS 15000
#define WANT_MAX 6
#define PULL_BYTES (8u << 20)

/* ---- a log callback that calls back ---- */

struct reentry {
  ecc_connector_t *_Atomic c; /* the connector it calls back into; NULL: none */
  /* Lookups are made only on the thread under the watchdog, unless the
   * connector answers them locally (a server): a client's lookup made on a
   * progress thread is refused (the tests at the end show it). */
  bool lookup_anywhere;
  const char *want[WANT_MAX]; /* messages the test waits for */
  atomic_int seen[WANT_MAX];
  atomic_int called_back;   /* nested call sets made (each returned) */
  atomic_int nested_errors; /* nested stats or polls that did not return ECC_OK */
};

static __thread int in_callback; /* one level of calling back: the nested calls log too */

static void call_back(struct reentry *r, ecc_connector_t *c)
{
  ecc_stats_t st = {.struct_size = sizeof(st)};
  size_t n = 0;
  if (ecc_get_stats(c, &st) != ECC_OK)
    atomic_fetch_add(&r->nested_errors, 1);
  /* cap 0: takes the poll's locks, takes no completion the test waits for */
  if (ecc_poll(c, NULL, 0, &n) != ECC_OK)
    atomic_fetch_add(&r->nested_errors, 1);
  if (th_on_watchdog_thread() || r->lookup_anywhere) {
    const char *keys[] = {"reentry-absent"};
    ecc_entry_t e;
    (void)ecc_lookup(c, keys, 1, 1, &e); /* ECC_ERR_TRANSFER with no server is fine */
  }
  atomic_fetch_add(&r->called_back, 1);
}

static void calling_back(void *user, int level, const char *msg)
{
  (void)level;
  struct reentry *r = user;
  for (int i = 0; i < WANT_MAX; i++)
    if (r->want[i] != NULL && strstr(msg, r->want[i]) != NULL)
      atomic_fetch_add(&r->seen[i], 1);
  ecc_connector_t *c = atomic_load(&r->c);
  if (c == NULL || in_callback)
    return;
  in_callback = 1;
  call_back(r, c);
  in_callback = 0;
}

static const char *ucx_ini(const char *role, const char *region, uint16_t port, const char *extra)
{
  return th_ini_text("[plugin]\npath = %s\nlog_level = error\n\n"
                     "[region]\nname = %s\nblock_size = %u\nsize = %u\n\n"
                     "[engine]\ntype = host\n\n[directory]\nenabled = true\n\n"
                     "[ucx]\nrole = %s\naddress = 127.0.0.1:%u\n%s",
                     ECC_UCX_PLUGIN_PATH, region, BS, BS * 16384, role, port, extra ? extra : "");
}

static int open_logged(const char *ini, void (*log)(void *, int, const char *), void *user,
                       ecc_connector_t **out)
{
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = log, .log_user = user, .log_level = ECC_LOG_DEBUG};
  char err[512] = "";
  return ecc_open(ini, &opt, out, err, sizeof(err));
}

static int open_with(const char *ini, struct reentry *r, ecc_connector_t **out)
{
  return open_logged(ini, calling_back, r, out);
}

/* Opens ini, retrying while a restarted server's port is still taken. */
static ecc_connector_t *open_calling_back(const char *ini, struct reentry *r)
{
  ecc_connector_t *c = NULL;
  int rc = ECC_ERR_TRANSFER;
  for (int t = 0; t < 50 && rc != ECC_OK; t++)
    if ((rc = open_with(ini, r, &c)) != ECC_OK)
      usleep(100000);
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s): %d", ini, rc);
  atomic_store(&r->c, c);
  return c;
}

/* Until r has seen message i (at most 5 s): whether it did. */
static bool saw(struct reentry *r, int i)
{
  for (int t = 0; t < 1000 && atomic_load(&r->seen[i]) == 0; t++)
    usleep(5000);
  return atomic_load(&r->seen[i]) > 0;
}

static void expect_called_back(struct reentry *r, const char *what)
{
  cr_expect_gt(atomic_load(&r->called_back), 0, "%s: the callback never called back", what);
  cr_expect_eq(atomic_load(&r->nested_errors), 0, "%s: %d nested calls failed", what,
               atomic_load(&r->nested_errors));
}

/* ---- calls run under the watchdog ---- */

/* The producer's side: reserve, save from host memory, wait for the save. */
static void produce(ecc_connector_t *srv, const char *key, uint64_t nbytes)
{
  uint8_t *src = malloc(nbytes);
  cr_assert_not_null(src);
  th_fill(src, nbytes, nbytes);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(srv, key, nbytes, &e), ECC_OK);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(srv, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(srv, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(srv, &done, 1, 10000), 1u, "%s: no save completion", key);
  cr_assert_eq(done.status, ECC_OK);
  free(src);
}

struct call {
  ecc_connector_t *c;
  const char *keys[4];
  size_t n_keys;
  uint32_t ranks;
  ecc_entry_t e[4];
  ecc_load_pinned_t lp[4];
  size_t n_loads;
  ecc_completion_t done[4];
  size_t n_done;
  uint8_t *dst;
  int rc;
};

static void do_lookup(void *arg)
{
  struct call *k = arg;
  k->rc = ecc_lookup(k->c, k->keys, k->n_keys, k->ranks, k->e);
}

/* Loads lp[0..n_loads) and, when started, polls for their completions. */
static void do_load(void *arg)
{
  struct call *k = arg;
  k->n_done = 0;
  k->rc = ecc_load_pinned(k->c, k->lp, k->n_loads, NULL);
  if (k->rc == ECC_OK)
    k->n_done = th_poll_until(k->c, k->done, k->n_loads, 10000);
}

static void do_close(void *arg)
{
  struct call *k = arg;
  k->rc = ecc_close(k->c);
}

static void close_within(struct reentry *r, ecc_connector_t *c)
{
  atomic_store(&r->c, NULL);
  struct call k = {.c = c};
  th_within_watchdog(WATCHDOG_MS, "ecc_close", do_close, &k);
  cr_expect_eq(k.rc, ECC_OK);
}

/* ---- the client ---- */

/* A token that names no pin of the client and a destination too small:
 * both refused by check_loads, which says so holding the client's lock. */
Test(ucx_log_reentry, the_client_s_refused_loads)
{
  uint16_t port = th_free_port();
  struct reentry rs = {.lookup_anywhere = true}, rc = {0};
  rc.want[0] = "names no pin of this process";
  rc.want[1] = "destination of";
  ecc_connector_t *srv = open_calling_back(ucx_ini("server", th_region_name(), port, NULL), &rs);
  produce(srv, "entry", 3 * BS);
  ecc_connector_t *cli = open_calling_back(ucx_ini("client", th_region_name(), port, NULL), &rc);
  uint8_t *dst = calloc(1, 4 * BS);
  struct call k = {.c = cli, .n_loads = 1};
  k.lp[0] = (ecc_load_pinned_t){1, 0x5eed5eed5eedull, (uint64_t)(uintptr_t)dst, 4 * BS};
  th_within_watchdog(WATCHDOG_MS, "a load of a token of no pin", do_load, &k);
  cr_expect_eq(k.rc, ECC_ERR_CLOSED, "load said %d", k.rc);
  cr_expect(saw(&rc, 0), "'%s' never reached the callback", rc.want[0]);

  struct call l = {.c = cli, .keys = {"entry"}, .n_keys = 1, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
  cr_assert_eq(l.rc, ECC_OK);
  cr_assert_eq(l.e[0].state, ECC_ENTRY_READY);
  k.lp[0] = (ecc_load_pinned_t){2, l.e[0].token, (uint64_t)(uintptr_t)dst, BS};
  th_within_watchdog(WATCHDOG_MS, "a load into too small a destination", do_load, &k);
  cr_expect_eq(k.rc, ECC_ERR_INVALID, "load said %d", k.rc);
  cr_expect(saw(&rc, 1), "'%s' never reached the callback", rc.want[1]);
  expect_called_back(&rc, "client");
  cr_expect_eq(ecc_unpin(cli, l.e[0].token), ECC_OK);
  close_within(&rc, cli);
  close_within(&rs, srv);
  free(dst);
}

/* The server goes: the client's next load fails on the lost link (said
 * while the link's lock is held for reading), and the callback's lookup
 * tries a reconnect, which must not wait for the caller itself. A new
 * server on the port: the next lookup reconnects (said holding the link's
 * lock for writing) and the callback's own lookup and load work. */
Test(ucx_log_reentry, a_lost_link_and_its_reconnect)
{
  uint16_t port = th_free_port();
  const char *srv_ini = ucx_ini("server", th_region_name(), port, NULL);
  struct reentry rs = {.lookup_anywhere = true}, rc = {0};
  rc.want[0] = "failed";
  rc.want[1] = "reconnected";
  ecc_connector_t *srv = open_calling_back(srv_ini, &rs);
  produce(srv, "entry", 5 * BS);
  ecc_connector_t *cli = open_calling_back(
      ucx_ini("client", th_region_name(), port, "deadline_ms = 500\nconnect_timeout_ms = 500\n"),
      &rc);
  struct call l = {.c = cli, .keys = {"entry"}, .n_keys = 1, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
  cr_assert_eq(l.rc, ECC_OK);
  cr_assert_eq(l.e[0].state, ECC_ENTRY_READY);

  close_within(&rs, srv);
  cr_assert(saw(&rc, 0), "the client never said its server failed");
  uint8_t *dst = calloc(1, 8 * BS);
  struct call k = {.c = cli, .n_loads = 1};
  k.lp[0] = (ecc_load_pinned_t){1, l.e[0].token, (uint64_t)(uintptr_t)dst, 8 * BS};
  th_within_watchdog(WATCHDOG_MS, "a load over a lost link", do_load, &k);
  cr_expect_eq(k.rc, ECC_ERR_TRANSFER, "load said %d", k.rc);

  struct reentry rs2 = {.lookup_anywhere = true};
  srv = open_calling_back(srv_ini, &rs2);
  produce(srv, "again", 5 * BS);
  l.keys[0] = "again";
  for (int t = 0; t < 3; t++) { /* the first call after the death may only learn of it */
    th_within_watchdog(WATCHDOG_MS, "a lookup that reconnects", do_lookup, &l);
    if (l.rc == ECC_OK)
      break;
  }
  cr_assert_eq(l.rc, ECC_OK, "no new link: %d", l.rc);
  cr_expect(saw(&rc, 1), "the reconnect was never said");
  cr_assert_eq(l.e[0].state, ECC_ENTRY_READY);
  k.lp[0] = (ecc_load_pinned_t){2, l.e[0].token, (uint64_t)(uintptr_t)dst, 8 * BS};
  th_within_watchdog(WATCHDOG_MS, "a load after the reconnect", do_load, &k);
  cr_expect_eq(k.rc, ECC_OK, "load said %d", k.rc);
  cr_expect_eq(k.n_done, 1u, "the load never completed");
  cr_expect_eq(k.done[0].status, ECC_OK);
  expect_called_back(&rc, "client");
  close_within(&rc, cli);
  close_within(&rs2, srv);
  free(dst);
}

/* ---- the server ---- */

/* The server's session handling, on its progress thread with its lock
 * held: a lookup past the client's pins refused, pulls past its pulls
 * refused, a client gone whose pins go to another of its group, and one
 * gone whose pins are dropped. Each is said to a callback that calls the
 * server back; a later message arriving at all shows the earlier ones
 * returned. */
Test(ucx_log_reentry, the_server_s_session_messages)
{
  uint16_t port = th_free_port();
  struct reentry rs = {.lookup_anywhere = true}, rc1 = {0}, rc2 = {0};
  rs.want[0] = "connected";
  rs.want[1] = "client_max_pins";
  rs.want[2] = "client_max_pulls";
  rs.want[3] = "pins handed to";
  rs.want[4] = "pins of it dropped";
  rs.want[5] = "failed";
  ecc_connector_t *srv = open_calling_back(
      ucx_ini("server", th_region_name(), port, "client_max_pins = 3\nclient_max_pulls = 1\n"),
      &rs);
  const char *const keys[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++)
    produce(srv, keys[i], i < 3 ? PULL_BYTES : BS);
  const char *region = th_region_name(); /* both clients on one region: one group */
  /* Without the cache every load pulls, also of an entry pulled before. */
  ecc_connector_t *c1 = open_calling_back(ucx_ini("client", region, port, "cache = false\n"), &rc1);
  cr_expect(saw(&rs, 0), "the server never said a client connected");

  struct call l = {.c = c1, .keys = {"a", "b", "c", "d"}, .n_keys = 4, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup past the client's pins", do_lookup, &l);
  cr_expect_eq(l.rc, ECC_ERR_BUSY, "lookup said %d", l.rc);
  cr_expect(saw(&rs, 1), "the refused lookup was never said");

  /* Three entries in one call with one pull allowed: the server refuses
   * what comes while the first is being sent (tried a few times, since a
   * pull may end before the next arrives). */
  uint8_t *dst = calloc(3, PULL_BYTES);
  cr_assert_not_null(dst);
  for (int t = 0; t < 10 && atomic_load(&rs.seen[2]) == 0; t++) {
    l.n_keys = 3;
    th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
    cr_assert_eq(l.rc, ECC_OK);
    struct call k = {.c = c1, .n_loads = 3};
    for (int i = 0; i < 3; i++)
      k.lp[i] =
          (ecc_load_pinned_t){(uint64_t)i, l.e[i].token,
                              (uint64_t)(uintptr_t)(dst + (size_t)i * PULL_BYTES), PULL_BYTES};
    th_within_watchdog(WATCHDOG_MS, "loads past the client's pulls", do_load, &k);
    cr_assert_eq(k.rc, ECC_OK, "load said %d", k.rc);
    cr_assert_eq(k.n_done, 3u, "the loads never completed");
  }
  cr_expect(atomic_load(&rs.seen[2]) > 0, "no pull was refused in 10 rounds");

  /* A second client of the group holds a pin and goes: the server hands
   * it to the first; then the first goes holding it, and it is dropped. */
  ecc_connector_t *c2 = open_calling_back(ucx_ini("client", region, port, NULL), &rc2);
  struct call l2 = {.c = c2, .keys = {"d"}, .n_keys = 1, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l2);
  cr_assert_eq(l2.rc, ECC_OK);
  cr_assert_eq(l2.e[0].state, ECC_ENTRY_READY);
  close_within(&rc2, c2);
  cr_expect(saw(&rs, 3), "the gone client's pins were never said handed over");
  cr_expect(saw(&rs, 5), "the gone client was never said failed");
  close_within(&rc1, c1);
  cr_expect(saw(&rs, 4), "the last client's dropped pins were never said");
  expect_called_back(&rs, "server");
  close_within(&rs, srv);
  free(dst);
}

/* ---- UCX's own lines ---- */

struct route_call {
  const char *ini;
  struct reentry *r;
  ecc_connector_t *c;
  int rc;
};

static void do_open(void *arg)
{
  struct route_call *o = arg;
  o->rc = open_with(o->ini, o->r, &o->c);
}

/* A connector whose UCX device list names one device that does not exist:
 * UCX warns (on the opening thread), the warning is routed to the newest
 * layer's log, and that callback calls back into a client whose link is
 * down, whose lookup makes (and destroys) a UCX layer of its own. */
Test(ucx_log_reentry, ucx_s_own_lines_routed_to_a_callback_that_calls_back)
{
  uint16_t port = th_free_port();
  struct reentry rs = {.lookup_anywhere = true}, rc = {0}, rw = {0};
  rc.want[0] = "failed";
  rw.want[0] = "ecc_no_such_dev"; /* UCX's line names it */
  ecc_connector_t *srv = open_calling_back(ucx_ini("server", th_region_name(), port, NULL), &rs);
  ecc_connector_t *cli = open_calling_back(
      ucx_ini("client", th_region_name(), port, "connect_timeout_ms = 500\n"), &rc);
  close_within(&rs, srv);
  cr_assert(saw(&rc, 0), "the client never said its server failed");
  /* rw calls back into the client: the new connector is not open yet. */
  atomic_store(&rw.c, cli);
  struct route_call o = {.ini = ucx_ini("server", th_region_name(), th_free_port(),
                                        "net_devices = lo,ecc_no_such_dev\n"),
                         .r = &rw};
  th_within_watchdog(WATCHDOG_MS, "an open whose UCX warns", do_open, &o);
  cr_expect(atomic_load(&rw.seen[0]) > 0, "UCX's warning never reached the callback");
  cr_expect_gt(atomic_load(&rw.called_back), 0, "the callback never called back");
  atomic_store(&rw.c, o.rc == ECC_OK ? o.c : NULL);
  if (o.rc == ECC_OK)
    close_within(&rw, o.c);
  close_within(&rc, cli);
}

/* ---- calls made on a progress thread ---- */

/* A log callback that, on the first message naming `trigger` said on a
 * thread other than the driver's (a progress thread of the plugin: the
 * messages chosen are said only there), calls a client: the calls that
 * wait for the network, then those that need none. */
struct probe {
  ecc_connector_t *_Atomic on; /* the client it calls; NULL: none yet */
  const char *trigger;
  bool load_only;       /* only lp, once the driver has begun a reconnect (go) */
  ecc_load_pinned_t lp; /* that load */
  uint64_t token;       /* a pin the client holds: the one unpinned */
  const char *note[2];  /* messages counted on this log */
  atomic_int noted[2];
  atomic_bool fired, go, returned;
  int unpin_rc, load_rc, lookup_rc;
  char why[3][512];        /* the client's last error after each of the three */
  atomic_int local_errors; /* calls needing no network that failed there */
};

static void note_last_error(struct probe *p, ecc_connector_t *c, char *why)
{
  if (ecc_last_error(c, why, sizeof(p->why[0])) != ECC_OK)
    atomic_fetch_add(&p->local_errors, 1);
}

/* What needs no network works on a progress thread too. */
static void local_calls(struct probe *p, ecc_connector_t *c)
{
  ecc_stats_t st = {.struct_size = sizeof(st)};
  ecc_info_t info = {.struct_size = sizeof(info)};
  size_t n = 0;
  char text[256];
  if (ecc_get_stats(c, &st) != ECC_OK || ecc_poll(c, NULL, 0, &n) != ECC_OK ||
      ecc_describe(c, &info) != ECC_OK || ecc_last_error(c, text, sizeof(text)) != ECC_OK)
    atomic_fetch_add(&p->local_errors, 1);
}

/* Unpin and an empty load first: before the fix they returned at once with
 * the link up, and only the lookup waited (and then gave the link up). */
static void probe_calls(struct probe *p, ecc_connector_t *c)
{
  const char *keys[] = {"probe-absent"};
  ecc_entry_t e;
  p->unpin_rc = ecc_unpin(c, p->token);
  note_last_error(p, c, p->why[0]);
  p->load_rc = ecc_load_pinned(c, NULL, 0, NULL);
  note_last_error(p, c, p->why[1]);
  p->lookup_rc = ecc_lookup(c, keys, 1, 1, &e);
  note_last_error(p, c, p->why[2]);
  local_calls(p, c);
}

/* Waits (at most 10 s) for flag: whether it was set. */
static bool flag_set(atomic_bool *flag)
{
  for (int t = 0; t < 2000 && !atomic_load(flag); t++)
    usleep(5000);
  return atomic_load(flag);
}

/* On the old link's progress thread, told the link failed: the driver's
 * lookup is let go, and once it is inside its reconnect (which joins this
 * thread) the load is made. The pause only makes that order likely; no
 * result depends on its length. */
static void load_during_reconnect(struct probe *p, ecc_connector_t *c)
{
  if (!flag_set(&p->go))
    return;
  usleep(300000);
  p->load_rc = ecc_load_pinned(c, &p->lp, 1, NULL);
  note_last_error(p, c, p->why[1]);
  local_calls(p, c);
}

static void probing(void *user, int level, const char *msg)
{
  (void)level;
  struct probe *p = user;
  for (int i = 0; i < 2; i++)
    if (p->note[i] != NULL && strstr(msg, p->note[i]) != NULL)
      atomic_fetch_add(&p->noted[i], 1);
  ecc_connector_t *c = atomic_load(&p->on);
  if (c == NULL || th_on_watchdog_thread() || in_callback || strstr(msg, p->trigger) == NULL ||
      atomic_exchange(&p->fired, true))
    return;
  in_callback = 1;
  if (p->load_only)
    load_during_reconnect(p, c);
  else
    probe_calls(p, c);
  in_callback = 0;
  atomic_store(&p->returned, true);
}

static ecc_connector_t *open_probed(const char *ini, struct probe *p)
{
  ecc_connector_t *c = NULL;
  int rc = open_logged(ini, probing, p, &c);
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s): %d", ini, rc);
  return c;
}

/* The refusal says what was called, why, and what to do instead. */
static void expect_refused(struct probe *p, int i, const char *call, int rc)
{
  cr_expect_eq(rc, ECC_ERR_BUSY, "%s on a progress thread said %d, not ECC_ERR_BUSY", call, rc);
  const char *why = p->why[i];
  cr_expect(strstr(why, call) != NULL && strstr(why, "progress thread") != NULL &&
                strstr(why, "another thread") != NULL,
            "%s's refusal does not say what, why and what to do: '%s'", call, why);
}

static void expect_all_refused(struct probe *p)
{
  cr_assert(flag_set(&p->returned), "the callback's calls never returned");
  expect_refused(p, 0, "unpin", p->unpin_rc);
  expect_refused(p, 1, "load_pinned", p->load_rc);
  expect_refused(p, 2, "lookup", p->lookup_rc);
  cr_expect_eq(atomic_load(&p->local_errors), 0, "%d calls needing no network failed there",
               atomic_load(&p->local_errors));
}

/* The client's own progress thread says a load the server refused (its
 * pulls past client_max_pulls): there the client's lookup, load and unpin
 * are refused at once, and the link stays up. Before, the lookup waited its
 * whole deadline for an answer only that thread could bring, then gave the
 * link up. */
Test(ucx_log_reentry, the_client_s_own_progress_thread_is_refused_what_waits_for_it)
{
  uint16_t port = th_free_port();
  struct reentry rs = {.lookup_anywhere = true};
  struct probe pc = {.trigger = "client_max_pulls", .note = {"the server at", "reconnected"}};
  ecc_connector_t *srv =
      open_calling_back(ucx_ini("server", th_region_name(), port, "client_max_pulls = 1\n"), &rs);
  const char *const keys[] = {"a", "b", "c"};
  for (int i = 0; i < 3; i++)
    produce(srv, keys[i], PULL_BYTES);
  ecc_connector_t *cli =
      open_probed(ucx_ini("client", th_region_name(), port, "cache = false\n"), &pc);
  uint8_t *dst = calloc(3, PULL_BYTES);
  cr_assert_not_null(dst);
  struct call l = {.c = cli, .keys = {"a", "b", "c"}, .n_keys = 3, .ranks = 2};
  for (int t = 0; t < 10 && !atomic_load(&pc.fired); t++) {
    th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
    cr_assert_eq(l.rc, ECC_OK);
    if (t == 0)
      pc.token = l.e[0].token; /* one release of it stays: the loads take one */
    atomic_store(&pc.on, cli);
    struct call k = {.c = cli, .n_loads = 3};
    for (int i = 0; i < 3; i++)
      k.lp[i] =
          (ecc_load_pinned_t){(uint64_t)i, l.e[i].token,
                              (uint64_t)(uintptr_t)(dst + (size_t)i * PULL_BYTES), PULL_BYTES};
    th_within_watchdog(WATCHDOG_MS, "loads past the client's pulls", do_load, &k);
    cr_assert_eq(k.rc, ECC_OK, "load said %d", k.rc);
    cr_assert_eq(k.n_done, 3u, "the loads never completed");
  }
  cr_assert(atomic_load(&pc.fired), "no pull was refused in 10 rounds");
  expect_all_refused(&pc);
  l.n_keys = 1;
  th_within_watchdog(WATCHDOG_MS, "a lookup after the refused calls", do_lookup, &l);
  cr_expect_eq(l.rc, ECC_OK, "lookup said %d", l.rc);
  cr_expect_eq(atomic_load(&pc.noted[0]), 0, "the client gave its link up");
  cr_expect_eq(atomic_load(&pc.noted[1]), 0, "the client had to reconnect");
  atomic_store(&pc.on, NULL);
  struct call k = {.c = cli};
  th_within_watchdog(WATCHDOG_MS, "ecc_close", do_close, &k);
  close_within(&rs, srv);
  free(dst);
}

/* The server's progress thread says a client connected, and its callback
 * calls another client of this process, whose answers that very server
 * must send: refused at once, and that client's link stays up. Before, the
 * lookup waited its whole deadline and then gave the link up. */
Test(ucx_log_reentry, a_server_s_progress_thread_is_refused_a_client_s_calls_that_wait)
{
  uint16_t port = th_free_port();
  struct probe ps = {.trigger = "connected"};
  struct reentry r1 = {0}, r2 = {0};
  r1.want[0] = "the server at";
  r1.want[1] = "reconnected";
  ecc_connector_t *srv = open_probed(ucx_ini("server", th_region_name(), port, NULL), &ps);
  produce(srv, "entry", BS);
  ecc_connector_t *c1 = open_calling_back(ucx_ini("client", th_region_name(), port, NULL), &r1);
  struct call l = {.c = c1, .keys = {"entry"}, .n_keys = 1, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
  cr_assert_eq(l.rc, ECC_OK);
  cr_assert_eq(l.e[0].state, ECC_ENTRY_READY);
  ps.token = l.e[0].token;
  atomic_store(&ps.on, c1);
  /* Its session's start is said on the server's progress thread. */
  ecc_connector_t *c2 = open_calling_back(ucx_ini("client", th_region_name(), port, NULL), &r2);
  expect_all_refused(&ps);
  th_within_watchdog(WATCHDOG_MS, "a lookup after the refused calls", do_lookup, &l);
  cr_expect_eq(l.rc, ECC_OK, "lookup said %d", l.rc);
  cr_expect_eq(atomic_load(&r1.seen[0]), 0, "the client gave its link up");
  cr_expect_eq(atomic_load(&r1.seen[1]), 0, "the client had to reconnect");
  atomic_store(&ps.on, NULL);
  close_within(&r2, c2);
  close_within(&r1, c1);
  struct call k = {.c = srv};
  th_within_watchdog(WATCHDOG_MS, "ecc_close", do_close, &k);
}

/* The client's progress thread says the server failed, and its callback
 * loads while another thread's lookup reconnects, which ends that thread:
 * the load is refused at once and the reconnect goes on. Before, the load
 * waited for the link's lock, which the reconnect held while it waited for
 * the thread: neither returned. */
Test(ucx_log_reentry, a_reconnect_does_not_wait_for_a_callback_calling_the_client)
{
  uint16_t port = th_free_port();
  struct reentry rs = {.lookup_anywhere = true};
  struct probe pc = {.trigger = "the server at", .load_only = true};
  ecc_connector_t *srv = open_calling_back(ucx_ini("server", th_region_name(), port, NULL), &rs);
  produce(srv, "entry", BS);
  ecc_connector_t *cli = open_probed(
      ucx_ini("client", th_region_name(), port, "deadline_ms = 500\nconnect_timeout_ms = 500\n"),
      &pc);
  struct call l = {.c = cli, .keys = {"entry"}, .n_keys = 1, .ranks = 1};
  th_within_watchdog(WATCHDOG_MS, "a lookup", do_lookup, &l);
  cr_assert_eq(l.rc, ECC_OK);
  cr_assert_eq(l.e[0].state, ECC_ENTRY_READY);
  uint8_t *dst = calloc(1, BS);
  cr_assert_not_null(dst);
  pc.lp = (ecc_load_pinned_t){1, l.e[0].token, (uint64_t)(uintptr_t)dst, BS};
  atomic_store(&pc.on, cli);
  close_within(&rs, srv);
  cr_assert(flag_set(&pc.fired), "the client never said its server failed");
  atomic_store(&pc.go, true);
  th_within_watchdog(WATCHDOG_MS, "a lookup that reconnects while the old link's callback loads",
                     do_lookup, &l);
  cr_expect_eq(l.rc, ECC_ERR_TRANSFER, "lookup with no server said %d", l.rc);
  cr_assert(flag_set(&pc.returned), "the callback's load never returned");
  expect_refused(&pc, 1, "load_pinned", pc.load_rc);
  cr_expect_eq(atomic_load(&pc.local_errors), 0, "calls needing no network failed there");
  atomic_store(&pc.on, NULL);
  struct call k = {.c = cli};
  th_within_watchdog(WATCHDOG_MS, "ecc_close", do_close, &k);
  free(dst);
}
