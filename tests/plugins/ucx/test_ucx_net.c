/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_net.c - the UCX layer of the cross-host plugin (plugins/ucx/net.h)
 * over TCP on the loopback: messages both ways, RMA gets into the client's
 * region, refused arguments, and how soon a killed or absent server is
 * noticed.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "plugins/ucx/net.h"
#include "tests/helpers.h"

TestSuite(ucx_net, .timeout = 60);

#define REGION (8u << 20)

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct side {
  struct ecc_log log;
  struct net *net;
  uint8_t *region;
  struct net_peer *_Atomic last_peer;
  atomic_int messages;
  char last[64];
  _Atomic uint64_t failed_at;
  atomic_int failures;
};

static void on_connect(void *user, struct net_peer *p)
{
  struct side *s = user;
  atomic_store(&s->last_peer, p);
}

/* Records the message; a server answers "ping" with "pong". */
static void on_message(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  struct side *s = user;
  size_t n = len < sizeof(s->last) - 1 ? len : sizeof(s->last) - 1;
  memcpy(s->last, buf, n);
  s->last[n] = 0;
  atomic_store(&s->last_peer, p);
  if (len == 4 && memcmp(buf, "ping", 4) == 0)
    net_send(s->net, p, "pong", 4);
  atomic_fetch_add(&s->messages, 1);
}

static void on_peer_error(void *user, struct net_peer *p, int code, const char *why)
{
  (void)p;
  (void)why;
  struct side *s = user;
  cr_expect_eq(code, ECC_ERR_TRANSFER);
  atomic_store(&s->failed_at, now_ns());
  atomic_fetch_add(&s->failures, 1);
}

static int side_open(struct side *s, int server, uint16_t port, char *why, size_t cap)
{
  memset(s, 0, sizeof(*s));
  log_init(&s->log, NULL);
  s->region = aligned_alloc(4096, REGION);
  cr_assert_not_null(s->region);
  for (size_t i = 0; i < REGION; i++)
    s->region[i] = server ? (uint8_t)(i * 31 + 7) : 0;
  struct net_params p = {.server = server,
                         .addr = "127.0.0.1",
                         .port = port,
                         .transports = "tcp",
                         .region = s->region,
                         .region_bytes = REGION,
                         .log = &s->log,
                         .cb = {s, on_connect, on_message, on_peer_error}};
  return net_create(&p, &s->net, why, cap);
}

static void side_close(struct side *s)
{
  net_destroy(s->net);
  log_destroy(&s->log);
  free(s->region);
}

static bool wait_for(atomic_int *v, int want, uint64_t ms)
{
  uint64_t end = now_ns() + ms * 1000000ull;
  while (atomic_load(v) < want && now_ns() < end)
    usleep(1000);
  return atomic_load(v) >= want;
}

static void got(void *arg, int status)
{
  atomic_int *v = arg;
  atomic_fetch_add(v, status == ECC_OK ? 1 : 1000);
}

Test(ucx_net, messages_both_ways_and_gets_into_the_client_region)
{
  char why[256] = "";
  uint16_t port = th_free_port();
  struct side srv, cli;
  cr_assert_eq(side_open(&srv, 1, port, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(side_open(&cli, 0, port, why, sizeof(why)), ECC_OK, "%s", why);
  struct net_peer *to_srv = net_server_peer(cli.net);
  cr_assert_not_null(to_srv);
  cr_assert_eq(net_send(cli.net, to_srv, "ping", 4), ECC_OK);
  cr_assert(wait_for(&cli.messages, 1, 5000), "no answer from the server");
  cr_assert(wait_for(&srv.messages, 1, 5000));
  cr_expect_str_eq(cli.last, "pong");
  cr_expect_str_eq(srv.last, "ping");
  /* The server's key, as WELCOME would carry it. */
  const void *rkey;
  size_t rkey_len;
  uint64_t base;
  cr_assert_eq(net_region_key(srv.net, &rkey, &rkey_len, &base), ECC_OK);
  cr_assert_eq(net_peer_region(cli.net, to_srv, rkey, rkey_len, base), ECC_OK);
  atomic_int done = 0;
  const size_t sizes[] = {1, 4096, 65536 + 3, 1u << 20, 3u << 20};
  size_t at = 0;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    uint64_t off = 12345 * (i + 1);
    cr_assert_eq(net_get(cli.net, to_srv, cli.region + at, sizes[i], off, got, &done), ECC_OK);
    cr_assert(wait_for(&done, (int)i + 1, 10000), "get %zu did not complete", i);
    cr_expect_eq(atomic_load(&done), (int)i + 1, "a get failed");
    cr_expect_eq(memcmp(cli.region + at, srv.region + off, sizes[i]), 0, "get %zu: wrong bytes", i);
    at += sizes[i];
  }
  /* Refused at once, done never called. */
  cr_expect_eq(net_get(cli.net, to_srv, cli.region + REGION - 10, 11, 0, got, &done),
               ECC_ERR_RANGE);
  cr_expect_eq(net_get(cli.net, to_srv, srv.region, 1, 0, got, &done), ECC_ERR_RANGE,
               "a local buffer outside the client's region");
  cr_expect_eq(atomic_load(&done), 5);
  side_close(&cli);
  side_close(&srv);
}

Test(ucx_net, bad_addresses_are_refused_by_name)
{
  char why[256] = "";
  struct side s;
  memset(&s, 0, sizeof(s));
  log_init(&s.log, NULL);
  struct net_params p = {
      .server = 0, .addr = "host.example", .port = 1, .transports = "tcp", .log = &s.log};
  cr_expect_eq(net_create(&p, &s.net, why, sizeof(why)), ECC_ERR_CONFIG);
  cr_expect(strstr(why, "host.example") != NULL, "why: %s", why);
  cr_expect_null(s.net);
  p.addr = "127.0.0.1";
  p.port = 0;
  cr_expect_eq(net_create(&p, &s.net, why, sizeof(why)), ECC_ERR_CONFIG);
  p.port = 1;
  p.transports = "no-such-transport";
  cr_expect_neq(net_create(&p, &s.net, why, sizeof(why)), ECC_OK);
  cr_expect(strstr(why, "no-such-transport") != NULL, "why: %s", why);
  log_destroy(&s.log);
}

Test(ucx_net, an_absent_server_is_reported)
{
  char why[256] = "";
  struct side cli;
  uint16_t port = th_free_port();
  int rc = side_open(&cli, 0, port, why, sizeof(why));
  if (rc == ECC_OK) {
    net_send(cli.net, net_server_peer(cli.net), "ping", 4);
    cr_expect(wait_for(&cli.failures, 1, 5000), "nothing said the server is absent");
    cr_expect_eq(net_send(cli.net, net_server_peer(cli.net), "ping", 4), ECC_ERR_TRANSFER);
    side_close(&cli);
  } else {
    cr_expect_eq(rc, ECC_ERR_TRANSFER, "%s", why);
  }
}

/* A server process for the test below: a fresh program (exec), so that no
 * thread of the test's process is copied into it. */
__attribute__((constructor)) static void server_entry(void)
{
  const char *role, *port;
  int unused, ready;
  if (!th_child_args(&role, &port, &unused, &ready) || strcmp(role, "ucx-server") != 0)
    return;
  char why[256];
  static struct side srv;
  if (side_open(&srv, 1, (uint16_t)atoi(port), why, sizeof(why)) != ECC_OK)
    _exit(2);
  if (write(ready, "r", 1) != 1)
    _exit(3);
  for (;;)
    pause();
}

/* The server in another process, killed with SIGKILL: the client must hear
 * of it within a second. */
Test(ucx_net, a_killed_server_is_noticed_within_a_second)
{
  char port[16];
  snprintf(port, sizeof(port), "%u", th_free_port());
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("ucx-server", port, -1, ready[1]);
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the server did not start");
  char why[256] = "";
  struct side cli;
  cr_assert_eq(side_open(&cli, 0, (uint16_t)atoi(port), why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(net_send(cli.net, net_server_peer(cli.net), "ping", 4), ECC_OK);
  cr_assert(wait_for(&cli.messages, 1, 5000), "no answer from the server");
  uint64_t killed = now_ns();
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  cr_assert(wait_for(&cli.failures, 1, 5000), "the server's death went unnoticed for 5 s");
  double ms = (double)(atomic_load(&cli.failed_at) - killed) / 1e6;
  cr_expect_lt(ms, 1000.0, "noticed after %.0f ms", ms);
  side_close(&cli);
}
