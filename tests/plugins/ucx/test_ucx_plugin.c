/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_plugin.c - libecc-ucx.so through the host library, a server and
 * a client over TCP on the loopback: entries of every size found by key on
 * the server and loaded on the client, the client's local copy, the
 * server's pins released, a layout mismatch refused by name on both sides,
 * and a killed server turned into errors, never into wrong bytes.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "plugins/ucx/net.h"
#include "plugins/ucx/wire.h"
#include "tests/helpers.h"
#include "tests/plugins/ucx/ucx_helpers.h"

TestSuite(ucx_plugin, .timeout = 120);

#define BS 4096u

/* The consumer's side: one entry looked up and loaded; 0 if absent. */
static int consume(ecc_connector_t *cli, const char *key, uint64_t nbytes, int *status)
{
  ecc_entry_t e;
  const char *keys[] = {key};
  int rc = ecc_lookup(cli, keys, 1, 1, &e);
  if (rc != ECC_OK)
    return rc;
  if (e.state != ECC_ENTRY_READY)
    return 0;
  cr_expect_eq(e.nbytes, nbytes, "%s: nbytes", key);
  uint8_t *dst = malloc(nbytes + 64);
  cr_assert_not_null(dst);
  memset(dst, 0xEE, nbytes + 64);
  ecc_load_pinned_t lp = {77, e.token, (uint64_t)(uintptr_t)dst, nbytes + 64};
  rc = ecc_load_pinned(cli, &lp, 1, NULL);
  if (rc != ECC_OK) {
    free(dst);
    return rc;
  }
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(cli, &done, 1, 10000), 1u, "%s: no load completion", key);
  cr_expect_eq(done.transfer_id, 77u);
  *status = done.status;
  if (done.status == ECC_OK) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < nbytes; i++)
      bad += dst[i] != th_pattern(key, i);
    cr_expect_eq(bad, 0u, "%s: %llu of %llu bytes wrong", key, (unsigned long long)bad,
                 (unsigned long long)nbytes);
    cr_expect_eq(dst[nbytes], 0xEE, "%s: written past its bytes", key);
  }
  free(dst);
  return 1;
}

Test(ucx_plugin, entries_of_every_size_cross_and_their_pins_are_released)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  const uint64_t sizes[] = {1, BS - 1, BS, BS + 1, 16 * BS + 7, 1u << 20, 3u << 20};
  char key[32];
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    snprintf(key, sizeof(key), "img-%zu", i);
    th_produce(srv, key, sizes[i]);
  }
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    snprintf(key, sizeof(key), "img-%zu", i);
    int status = -1;
    cr_assert_eq(consume(cli, key, sizes[i], &status), 1, "%s not found", key);
    cr_expect_eq(status, ECC_OK, "%s: load status %d", key, status);
    /* The release follows the load's completion: give it a moment. */
    for (int t = 0; t < 200 && th_pins_on(srv, key) != 0; t++)
      usleep(5000);
    cr_expect_eq(th_pins_on(srv, key), 0u, "%s: the server still holds a pin", key);
    cr_expect_eq(th_pins_on(cli, key), 0u, "%s: the client's copy is pinned", key);
  }
  /* An absent key is reported absent, and pins nothing. */
  int status;
  cr_expect_eq(consume(cli, "no-such-image", 10, &status), 0);
  /* A second load of the same key is served from the client's copy. */
  cr_expect_eq(consume(cli, "img-5", sizes[5], &status), 1);
  cr_expect_eq(status, ECC_OK);
  /* A token this process never received is refused, not sent on. */
  ecc_load_pinned_t bogus = {1, 0x12345678, 0x1000, 1 << 20};
  cr_expect_eq(ecc_load_pinned(cli, &bogus, 1, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(ecc_unpin(cli, 0x12345678), ECC_ERR_CLOSED);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

Test(ucx_plugin, an_unpinned_lookup_releases_the_server_pin)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  th_produce(srv, "k", 5 * BS);
  const char *keys[] = {"k"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(cli, keys, 1, 2, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_expect_eq(th_pins_on(srv, "k"), 1u);
  cr_expect_eq(ecc_unpin(cli, e.token), ECC_OK);
  cr_expect_eq(ecc_unpin(cli, e.token), ECC_OK, "two ranks, two releases");
  cr_expect_eq(ecc_unpin(cli, e.token), ECC_ERR_CLOSED, "a third release");
  for (int t = 0; t < 200 && th_pins_on(srv, "k") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "k"), 0u);
  /* A client that goes away with pins held: the server drops them. */
  cr_assert_eq(ecc_lookup(cli, keys, 1, 3, &e), ECC_OK);
  cr_expect_eq(th_pins_on(srv, "k"), 1u);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  for (int t = 0; t < 200 && th_pins_on(srv, "k") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "k"), 0u, "the closed client's pin is still held");
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

Test(ucx_plugin, another_block_size_is_refused_by_name_on_both_sides)
{
  uint16_t port = th_free_port();
  const char *srv_ini = th_ucx_ini("server", th_region_name(), BS, port, NULL);
  char err[512] = "";
  ecc_connector_t *srv = NULL, *cli = NULL;
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = th_capture, .log_level = ECC_LOG_WARN};
  cr_assert_eq(ecc_open(srv_ini, &opt, &srv, err, sizeof(err)), ECC_OK, "%s", err);
  int rc = ecc_open(th_ucx_ini("client", th_region_name(), 2 * BS, port, NULL), NULL, &cli, err,
                    sizeof(err));
  cr_expect_eq(rc, ECC_ERR_INCOMPATIBLE, "%d: %s", rc, err);
  cr_expect(strstr(err, "block_size is 4096") != NULL, "the client's error: %s", err);
  cr_expect(strstr(th_captured, "layout differs") != NULL, "the server's log: %s", th_captured);
  cr_expect_null(cli);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

Test(ucx_plugin, no_server_is_a_clear_error)
{
  char err[512] = "";
  ecc_connector_t *cli = NULL;
  uint16_t port = th_free_port();
  int rc = ecc_open(th_ucx_ini("client", th_region_name(), BS, port, "connect_timeout_ms = 500\n"),
                    NULL, &cli, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_TRANSFER, "%d: %s", rc, err);
  cr_expect(strstr(err, "127.0.0.1") != NULL, "%s", err);
  cr_expect_null(cli);
}

/* A server process for the tests below (exec'd: no thread of the test's
 * process is copied into it), holding "big". */
__attribute__((constructor)) static void server_entry(void)
{
  const char *role, *ini;
  int unused, ready;
  if (!th_child_args(&role, &ini, &unused, &ready) || strcmp(role, "ucx-server") != 0)
    return;
  ecc_connector_t *srv = NULL;
  char err[512];
  int rc = ECC_ERR_TRANSFER;
  /* A restarted server may find its port in TIME_WAIT for a moment. */
  for (int t = 0; t < 50 && rc != ECC_OK; t++)
    if ((rc = ecc_open(ini, NULL, &srv, err, sizeof(err))) != ECC_OK)
      usleep(100000);
  if (rc != ECC_OK)
    _exit(2);
  th_produce(srv, "big", 8u << 20);
  if (write(ready, "r", 1) != 1)
    _exit(3);
  for (;;)
    pause();
}

static pid_t start_server(const char *ini)
{
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("ucx-server", ini, -1, ready[1]);
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the server did not start");
  close(ready[0]);
  return pid;
}

static int load_status(ecc_connector_t *cli, uint64_t token, uint64_t nbytes, uint8_t *dst)
{
  ecc_load_pinned_t lp = {9, token, (uint64_t)(uintptr_t)dst, nbytes};
  int rc = ecc_load_pinned(cli, &lp, 1, NULL);
  if (rc != ECC_OK)
    return rc;
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(cli, &done, 1, 5000), 1u, "the load never completed");
  return done.status;
}

Test(ucx_plugin, a_stopped_server_is_given_up_after_the_deadline_and_reconnected)
{
  uint16_t port = th_free_port();
  pid_t pid = start_server(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli =
      th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, "deadline_ms = 300\n"));
  const char *keys[] = {"big"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(cli, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  kill(pid, SIGSTOP);
  uint8_t *dst = malloc(8u << 20);
  uint64_t t0 = th_now_ns();
  int st = load_status(cli, e.token, 8u << 20, dst);
  double ms = (double)(th_now_ns() - t0) / 1e6;
  cr_expect_eq(st, ECC_ERR_TRANSFER, "a load from a stopped server said %d", st);
  cr_expect_lt(ms, 1500.0, "given up after %.0f ms (deadline 300)", ms);
  t0 = th_now_ns();
  cr_expect_eq(ecc_lookup(cli, keys, 1, 1, &e), ECC_ERR_TRANSFER);
  cr_expect_lt((double)(th_now_ns() - t0) / 1e6, 1500.0);
  kill(pid, SIGCONT);
  /* The server is back: the next lookup makes a new link. */
  cr_assert_eq(ecc_lookup(cli, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_expect_eq(load_status(cli, e.token, 8u << 20, dst), ECC_OK);
  free(dst);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

Test(ucx_plugin, a_restarted_server_is_reconnected_and_old_tokens_refused)
{
  uint16_t port = th_free_port();
  pid_t pid = start_server(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  const char *keys[] = {"big"};
  ecc_entry_t old, e;
  cr_assert_eq(ecc_lookup(cli, keys, 1, 1, &old), ECC_OK);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  pid = start_server(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  /* The first call after the death may only learn of it. */
  int rc = ecc_lookup(cli, keys, 1, 1, &e);
  if (rc != ECC_OK)
    rc = ecc_lookup(cli, keys, 1, 1, &e);
  cr_assert_eq(rc, ECC_OK, "no new link to the restarted server");
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  uint8_t *dst = malloc(8u << 20);
  cr_expect_eq(load_status(cli, old.token, 8u << 20, dst), ECC_ERR_CLOSED,
               "a token of the dead server was taken");
  cr_expect_eq(load_status(cli, e.token, 8u << 20, dst), ECC_OK);
  free(dst);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

Test(ucx_plugin, a_killed_server_fails_loads_and_lookups_within_a_second)
{
  uint16_t port = th_free_port();
  pid_t pid = start_server(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  const char *keys[] = {"big"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(cli, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  uint64_t t0 = th_now_ns();
  uint8_t *dst = malloc(8u << 20);
  ecc_load_pinned_t lp = {5, e.token, (uint64_t)(uintptr_t)dst, 8u << 20};
  int rc = ecc_load_pinned(cli, &lp, 1, NULL);
  if (rc == ECC_OK) {
    ecc_completion_t done;
    cr_assert_eq(th_poll_until(cli, &done, 1, 5000), 1u, "the load never completed");
    cr_expect_eq(done.status, ECC_ERR_TRANSFER, "a load from a dead server said %d", done.status);
  } else {
    cr_expect_eq(rc, ECC_ERR_TRANSFER);
  }
  double ms = (double)(th_now_ns() - t0) / 1e6;
  cr_expect_lt(ms, 1000.0, "the failure took %.0f ms", ms);
  cr_expect_eq(ecc_lookup(cli, keys, 1, 1, &e), ECC_ERR_TRANSFER);
  free(dst);
  cr_assert_eq(ecc_close(cli), ECC_OK);
}

/* ---- a hostile client, speaking the wire format directly ---- */

struct raw {
  struct ecc_log log;
  struct net *net;
  atomic_int refusals, others;
};

static void raw_msg(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  (void)p;
  struct raw *r = user;
  struct wire_msg m;
  char why[256];
  if (wire_decode(buf, len, &m, why, sizeof(why)) == ECC_OK && m.h.type == WIRE_REFUSE)
    atomic_fetch_add(&r->refusals, 1);
  else
    atomic_fetch_add(&r->others, 1);
}

static bool raw_wait(atomic_int *v, int want)
{
  for (int t = 0; t < 1000 && atomic_load(v) < want; t++)
    usleep(5000);
  return atomic_load(v) >= want;
}

Test(ucx_plugin, hostile_messages_are_refused_and_the_server_serves_on)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  th_produce(srv, "kept", 3 * BS);
  /* A proper client holds a pin on it, whose token the hostile one guesses. */
  ecc_connector_t *holder = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  const char *held_keys[] = {"kept"};
  ecc_entry_t held;
  cr_assert_eq(ecc_lookup(holder, held_keys, 1, 1, &held), ECC_OK);
  cr_assert_eq(th_pins_on(srv, "kept"), 1u);
  static struct raw r;
  log_init(&r.log, NULL);
  static uint8_t region[1 << 16];
  struct net_params np = {.server = 0,
                          .addr = "127.0.0.1",
                          .port = port,
                          .transports = "tcp",
                          .region = region,
                          .region_bytes = sizeof(region),
                          .log = &r.log,
                          .cb = {&r, NULL, raw_msg, NULL, NULL}};
  char why[256];
  cr_assert_eq(net_create(&np, &r.net, why, sizeof(why)), ECC_OK, "%s", why);
  struct net_peer *p = net_server_peer(r.net);
  uint8_t buf[512];
  /* Each message waits for the server's answer to the one before: messages
   * sent before the link is up may reach the server in another order. */
  /* Garbage, then a lookup before any handshake: both refused. */
  for (size_t i = 0; i < sizeof(buf); i++)
    buf[i] = (uint8_t)(i * 37 + 11);
  cr_assert_eq(net_send(r.net, p, buf, 100), ECC_OK);
  cr_assert(raw_wait(&r.refusals, 1), "garbage was not refused");
  const char *keys[] = {"kept"};
  size_t n = wire_encode_lookup(buf, sizeof(buf), 1, 1, 1, keys, 1);
  cr_assert_eq(net_send(r.net, p, buf, n), ECC_OK);
  cr_assert(raw_wait(&r.refusals, 2), "a lookup before the handshake was not refused");
  /* A proper handshake (WELCOME), then releases of pins this client never
   * took, a pull of one (PULLED), and a lookup cut short (refused). */
  struct wire_hello h = {wire_layout_hash(BS), 99, 0, 0};
  n = wire_encode_hello(buf, sizeof(buf), 2, &h);
  cr_assert_eq(net_send(r.net, p, buf, n), ECC_OK);
  cr_assert(raw_wait(&r.others, 1), "no WELCOME");
  const uint64_t foreign[] = {1, 2, 0x100000001ull};
  n = wire_encode_release(buf, sizeof(buf), 3, foreign, 3);
  cr_assert_eq(net_send(r.net, p, buf, n), ECC_OK);
  n = wire_encode_pull(buf, sizeof(buf), 4, 5, 1);
  cr_assert_eq(net_send(r.net, p, buf, n), ECC_OK);
  cr_assert(raw_wait(&r.others, 2), "no PULLED for a pull of a pin this client never took");
  n = wire_encode_lookup(buf, sizeof(buf), 5, 6, 1, keys, 1);
  cr_assert_eq(net_send(r.net, p, buf, n - 3), ECC_OK);
  cr_expect(raw_wait(&r.refusals, 3), "a cut lookup was not refused");
  cr_expect_eq(th_pins_on(srv, "kept"), 1u, "a client released a pin another holds");
  cr_assert_eq(ecc_close(holder), ECC_OK);
  /* The server still serves a proper client, and nothing of it was pinned. */
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  int status = -1;
  cr_expect_eq(consume(cli, "kept", 3 * BS, &status), 1);
  cr_expect_eq(status, ECC_OK);
  for (int t = 0; t < 200 && th_pins_on(srv, "kept") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "kept"), 0u);
  net_destroy(r.net);
  log_destroy(&r.log);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* A client process that looks "k" up, pinning it for three ranks, says so
 * and waits to be killed. */
__attribute__((constructor)) static void holder_entry(void)
{
  const char *role, *ini;
  int unused, ready;
  if (!th_child_args(&role, &ini, &unused, &ready) || strcmp(role, "ucx-holder") != 0)
    return;
  ecc_connector_t *cli = NULL;
  char err[512];
  if (ecc_open(ini, NULL, &cli, err, sizeof(err)) != ECC_OK)
    _exit(2);
  const char *keys[] = {"k"};
  ecc_entry_t e;
  if (ecc_lookup(cli, keys, 1, 3, &e) != ECC_OK || e.state != ECC_ENTRY_READY)
    _exit(3);
  if (write(ready, "r", 1) != 1)
    _exit(3);
  for (;;)
    pause();
}

Test(ucx_plugin, a_client_killed_holding_pins_loses_them)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  th_produce(srv, "k", 2 * BS);
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("ucx-holder", th_ucx_ini("client", th_region_name(), BS, port, NULL),
                            -1, ready[1]);
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the client did not start");
  cr_expect_eq(th_pins_on(srv, "k"), 1u);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  for (int t = 0; t < 400 && th_pins_on(srv, "k") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "k"), 0u, "the killed client's pin is still held");
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* More keys than one LOOKUP carries go in several, answered in order. */
Test(ucx_plugin, a_lookup_of_more_keys_than_one_message_holds)
{
  uint16_t port = th_free_port();
  /* Entry slots for all of them (the default is a sixteenth of the blocks). */
  const char *slots = "[directory]\nmax_entries = 1024\n";
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, slots));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  enum { N = WIRE_MAX_KEYS + 44 };
  static char names[N][16];
  static const char *keys[N];
  static ecc_entry_t out[N];
  for (int i = 0; i < N; i++) {
    snprintf(names[i], sizeof(names[i]), "many-%d", i);
    keys[i] = names[i];
    if (i % 3 != 2)
      th_produce(srv, names[i], 100 + (uint64_t)i);
  }
  cr_assert_eq(ecc_lookup(cli, keys, N, 1, out), ECC_OK);
  for (int i = 0; i < N; i++) {
    cr_expect_eq(out[i].state, i % 3 != 2 ? ECC_ENTRY_READY : ECC_ENTRY_ABSENT, "%s", names[i]);
    if (out[i].state == ECC_ENTRY_READY) {
      cr_expect_eq(out[i].nbytes, 100 + (uint64_t)i, "%s", names[i]);
      cr_expect_eq(ecc_unpin(cli, out[i].token), ECC_OK);
    }
  }
  for (int t = 0; t < 200 && th_pins_on(srv, names[N - 2]) != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, names[0]), 0u);
  cr_expect_eq(th_pins_on(srv, names[N - 2]), 0u, "%s is absent, %s was pinned", names[N - 1],
               names[N - 2]);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* ucx.cache = false: the bytes land in the destination, nothing is kept in
 * the client's directory, and the load statistics count them. */
Test(ucx_plugin, without_the_cache_entries_land_in_the_destination)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli =
      th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, "cache = false\n"));
  const uint64_t sizes[] = {1, BS + 1, 3u << 20};
  char key[32];
  for (size_t i = 0; i < 3; i++) {
    snprintf(key, sizeof(key), "direct-%zu", i);
    th_produce(srv, key, sizes[i]);
  }
  uint64_t bytes = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < 3; i++) {
      snprintf(key, sizeof(key), "direct-%zu", i);
      int status = -1;
      cr_assert_eq(consume(cli, key, sizes[i], &status), 1, "%s", key);
      cr_expect_eq(status, ECC_OK, "%s", key);
      cr_expect_eq(th_pins_on(cli, key), UINT32_MAX, "%s was kept in the client's directory", key);
      bytes += sizes[i];
    }
  ecc_stats_t st = th_stats(cli);
  cr_expect_eq(st.load.bytes, bytes);
  cr_expect_eq(st.load.entries, 6u);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* With the cache, each chunk lands in the destination and in the client's
 * own region: the kept copy, read back through libecc-shm.so on the same
 * region, holds the entry byte for byte. */
Test(ucx_plugin, the_kept_copy_holds_the_entry_byte_for_byte)
{
  uint16_t port = th_free_port();
  char region[64];
  snprintf(region, sizeof(region), "%s", th_region_name());
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", region, BS, port, NULL));
  const uint64_t nbytes = (3u << 20) + 5; /* chunks of 256 KiB, the last one short */
  int status = -1;
  th_produce(srv, "kept", nbytes);
  cr_assert_eq(consume(cli, "kept", nbytes, &status), 1);
  cr_assert_eq(status, ECC_OK);
  ecc_connector_t *local =
      th_open_ok(th_ini_text("[plugin]\npath = %s\nlog_level = error\n\n"
                             "[region]\nname = %s\nblock_size = %u\nsize = %llu\n\n"
                             "[engine]\ntype = host\n\n[directory]\nenabled = true\n",
                             ECC_PLUGIN_PATH, region, BS, (unsigned long long)BS * 2048));
  int rc = consume(local, "kept", nbytes, &status);
  cr_expect_eq(rc, 1, "the client kept no copy (%d)", rc);
  cr_expect_eq(status, ECC_OK);
  cr_assert_eq(ecc_close(local), ECC_OK);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* ---- tokens handed between processes of one host -------------------------- */

#define SHARED_BYTES ((1u << 20) + 3)

/* A worker: its own connector on the scheduler's region (so of its group);
 * says it is up, then for each token it reads loads the entry and writes
 * the load's status (one byte, its negation), until its input closes. */
__attribute__((constructor)) static void worker_child(void)
{
  const char *role, *ini;
  int in, out;
  if (!th_child_args(&role, &ini, &in, &out) || strcmp(role, "ucx-worker") != 0)
    return;
  ecc_connector_t *cli = NULL;
  char err[512];
  if (ecc_open(ini, NULL, &cli, err, sizeof(err)) != ECC_OK)
    _exit(2);
  uint8_t *dst = malloc(SHARED_BYTES);
  uint64_t token;
  if (dst == NULL || write(out, "r", 1) != 1)
    _exit(3);
  while (read(in, &token, sizeof(token)) == (ssize_t)sizeof(token)) {
    ecc_load_pinned_t lp = {1, token, (uint64_t)(uintptr_t)dst, SHARED_BYTES};
    memset(dst, 0, SHARED_BYTES);
    int rc = ecc_load_pinned(cli, &lp, 1, NULL);
    ecc_completion_t done;
    size_t n = 0;
    for (int t = 0; rc == ECC_OK && n == 0 && t < 10000; t++)
      if (ecc_poll(cli, &done, 1, &n) != ECC_OK || n == 0)
        usleep(1000);
    if (rc == ECC_OK)
      rc = n == 1 ? done.status : ECC_ERR_TRANSFER;
    for (uint64_t i = 0; rc == ECC_OK && i < SHARED_BYTES; i++)
      if (dst[i] != th_pattern("shared", i))
        rc = ECC_ERR_RANGE; /* wrong bytes */
    uint8_t status = (uint8_t)-rc;
    if (write(out, &status, 1) != 1)
      _exit(4);
  }
  ecc_close(cli);
  _exit(0);
}

struct worker {
  pid_t pid;
  int to, from;
};

static void worker_start(struct worker *w, const char *ini)
{
  int to[2], from[2];
  cr_assert_eq(pipe2(to, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(from, O_CLOEXEC), 0);
  w->pid = th_spawn_self("ucx-worker", ini, to[0], from[1]);
  close(to[0]);
  close(from[1]);
  w->to = to[1];
  w->from = from[0];
  char c;
  cr_assert_eq(read(w->from, &c, 1), 1, "a worker did not start");
}

/* The worker's load of token: its status. */
static int worker_load(struct worker *w, uint64_t token)
{
  uint8_t status;
  cr_assert_eq(write(w->to, &token, sizeof(token)), (ssize_t)sizeof(token));
  cr_assert_eq(read(w->from, &status, 1), 1, "the worker died");
  return -(int)status;
}

static void worker_stop(struct worker *w)
{
  close(w->to);
  int st = 0;
  waitpid(w->pid, &st, 0);
  close(w->from);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a worker ended with status 0x%x", st);
}

/* As a scheduler does with the shm connector: one process looks entries up
 * for two ranks and hands the token to two worker processes of its host,
 * each of which loads it; the scheduler may be gone by then. A process of
 * another host (another region) cannot use the token. */
Test(ucx_plugin, a_token_looked_up_in_one_process_is_loaded_by_the_others_of_its_host)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  th_produce(srv, "shared", SHARED_BYTES);
  char region[64];
  snprintf(region, sizeof(region), "%s", th_region_name());
  const char *host_ini = th_ucx_ini("client", region, BS, port, NULL);
  ecc_connector_t *sched = th_open_ok(host_ini);
  struct worker w1, w2;
  worker_start(&w1, host_ini);
  worker_start(&w2, host_ini);

  const char *keys[] = {"shared"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(sched, keys, 1, 2, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_assert_eq(th_pins_on(srv, "shared"), 1u, "one pin, of two ranks");

  ecc_connector_t *other = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  uint8_t *dst = malloc(SHARED_BYTES);
  ecc_load_pinned_t lp = {1, e.token, (uint64_t)(uintptr_t)dst, SHARED_BYTES};
  cr_expect_eq(ecc_load_pinned(other, &lp, 1, NULL), ECC_ERR_CLOSED, "another group's token");
  cr_expect_eq(ecc_unpin(other, e.token), ECC_ERR_CLOSED, "another group's token");
  cr_expect_eq(th_pins_on(srv, "shared"), 1u, "another group's calls changed the pins");
  cr_assert_eq(ecc_close(other), ECC_OK);
  free(dst);

  /* The scheduler goes; its pins pass to the workers' sessions. */
  cr_assert_eq(ecc_close(sched), ECC_OK);
  /* The server notices the closed link within milliseconds here: give it
   * time enough to have dropped the pin, had it not handed it over. */
  for (int t = 0; t < 60 && th_pins_on(srv, "shared") == 1; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "shared"), 1u, "the scheduler's pin went with it");
  cr_expect_eq(worker_load(&w1, e.token), ECC_OK, "the first worker's load (a pull)");
  cr_expect_eq(worker_load(&w2, e.token), ECC_OK, "the second worker's (from the host's copy)");
  for (int t = 0; t < 200 && th_pins_on(srv, "shared") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "shared"), 0u, "the ranks were not all released");
  /* Both ranks are used: a third load of the token is refused. */
  cr_expect_eq(worker_load(&w1, e.token), ECC_ERR_CLOSED, "a token used up");
  worker_stop(&w1);
  worker_stop(&w2);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* A client that closes with pins held, alone in its group: the server
 * learns of the close at once and drops them. Before, the close was forced,
 * which told the server nothing while another client (here in another
 * process) was connected, and the pins stayed. */
Test(ucx_plugin, a_closed_client_s_pins_are_dropped_by_the_server)
{
  uint16_t port = th_free_port();
  ecc_connector_t *srv = th_open_ok(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  th_produce(srv, "left", 3 * BS);
  ecc_connector_t *cli = th_open_ok(th_ucx_ini("client", th_region_name(), BS, port, NULL));
  struct worker other; /* another client, in another process, stays connected */
  worker_start(&other, th_ucx_ini("client", th_region_name(), BS, port, NULL));
  const char *keys[] = {"left"};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(cli, keys, 1, 4, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_READY);
  cr_assert_eq(th_pins_on(srv, "left"), 1u);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  for (int t = 0; t < 200 && th_pins_on(srv, "left") != 0; t++)
    usleep(5000);
  cr_expect_eq(th_pins_on(srv, "left"), 0u, "the closed client's pin is still held");
  worker_stop(&other);
  cr_assert_eq(ecc_close(srv), ECC_OK);
}

/* ecc_open and ecc_check of a client whose ucx.address is `address`. */
static int open_client_at(const char *address, ecc_connector_t **cli, char *err, size_t cap)
{
  ecc_kv_t kv = {"ucx.address", address};
  ecc_open_options_t opt = {.struct_size = sizeof(opt), .overrides = &kv, .n_overrides = 1};
  const char *ini = th_ucx_ini("client", th_region_name(), BS, 1, "connect_timeout_ms = 500\n");
  return cli != NULL ? ecc_open(ini, &opt, cli, err, cap) : ecc_check(ini, &opt, NULL, err, cap);
}

Test(ucx_plugin, an_unresolvable_name_is_refused_by_check_and_open_alike)
{
  char checked[512] = "", opened[512] = "";
  ecc_connector_t *cli = NULL;
  int rc_check = open_client_at("no-such-host.invalid:7000", NULL, checked, sizeof(checked));
  int rc_open = open_client_at("no-such-host.invalid:7000", &cli, opened, sizeof(opened));
  cr_expect_eq(rc_check, ECC_ERR_CONFIG, "check: %d: %s", rc_check, checked);
  cr_expect_eq(rc_open, ECC_ERR_CONFIG, "open: %d: %s", rc_open, opened);
  cr_expect_null(cli);
  cr_expect(strstr(opened, "ucx.address: cannot resolve 'no-such-host.invalid'") != NULL, "%s",
            opened);
  cr_expect(strstr(checked, "ucx.address: cannot resolve 'no-such-host.invalid'") != NULL, "%s",
            checked);
}

Test(ucx_plugin, a_name_is_resolved_and_the_client_reaches_its_server)
{
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *found = NULL;
  if (getaddrinfo("localhost", NULL, &hints, &found) != 0)
    cr_skip_test("this host does not resolve localhost to an IPv4 address");
  freeaddrinfo(found);
  uint16_t port = th_free_port();
  char address[64], err[512] = "";
  snprintf(address, sizeof(address), "localhost:%u", port);
  cr_assert_eq(open_client_at(address, NULL, err, sizeof(err)), ECC_OK, "check: %s", err);
  pid_t pid = start_server(th_ucx_ini("server", th_region_name(), BS, port, NULL));
  ecc_connector_t *cli = NULL;
  int rc = open_client_at(address, &cli, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "%d: %s", rc, err);
  int status = -1;
  cr_expect_eq(consume(cli, "big", 8u << 20, &status), 1, "the server's entry was not found");
  cr_expect_eq(status, ECC_OK);
  cr_assert_eq(ecc_close(cli), ECC_OK);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}
