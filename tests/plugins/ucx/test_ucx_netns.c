/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_netns.c - libecc-ucx.so between two network namespaces joined by
 * a veth pair, as between two hosts: the producer's server in one, the
 * consumer in the other, over TCP with link-local addresses the test sets
 * itself. Entries of every size cross, a link taken down is given up
 * after the deadline and used again once it is back, and a packet that
 * aborted UCX's own listener leaves the server serving. Needs root and ip(8);
 * skips, saying so, otherwise.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

TestSuite(ucx_netns, .timeout = 120);

#define BS 4096u
#define PORT 7341

struct pair {
  char a[32], b[32]; /* namespace names: server in a, client in b */
  char addr_a[48];   /* a's address, as the INI names it */
  bool v6;           /* a's address is IPv6 (both ends have IPv4 ones too) */
  double setup_ms;
};

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
  char cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  return system(cmd);
}

static void pair_down(struct pair *p)
{
  sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", p->a, p->b);
}

/* Two namespaces, a veth pair between them, 169.254.N.1 and .2 (and with
 * p->v6 also fd00:ecc:N::1 and ::2, unique local addresses); waits for both
 * ends to be up (the kernel takes a moment to report the carrier). */
static bool pair_up(struct pair *p)
{
  if (geteuid() != 0 || sh("command -v ip >/dev/null 2>&1") != 0)
    return false;
  unsigned n = (unsigned)getpid() % 250 + 1;
  snprintf(p->a, sizeof(p->a), "ecct-%u-a", (unsigned)getpid());
  snprintf(p->b, sizeof(p->b), "ecct-%u-b", (unsigned)getpid());
  if (p->v6)
    snprintf(p->addr_a, sizeof(p->addr_a), "[fd00:ecc:%u::1]", n);
  else
    snprintf(p->addr_a, sizeof(p->addr_a), "169.254.%u.1", n);
  uint64_t t0 = th_now_ns();
  int rc = sh("ip netns add %s && ip netns add %s && "
              "ip link add va%u netns %s type veth peer name vb%u netns %s && "
              "ip -n %s link set va%u up && ip -n %s link set vb%u up && "
              "ip -n %s link set lo up && ip -n %s link set lo up && "
              "ip -n %s addr add 169.254.%u.1/24 dev va%u && "
              "ip -n %s addr add 169.254.%u.2/24 dev vb%u",
              p->a, p->b, n, p->a, n, p->b, p->a, n, p->b, n, p->a, p->b, p->a, n, n, p->b, n, n);
  /* nodad: usable at once, not after duplicate address detection. */
  if (rc == 0 && p->v6)
    rc = sh("ip -n %s addr add fd00:ecc:%u::1/64 dev va%u nodad && "
            "ip -n %s addr add fd00:ecc:%u::2/64 dev vb%u nodad",
            p->a, n, n, p->b, n, n);
  for (int i = 0; rc == 0 && i < 300; i++) {
    if (sh("[ \"$(ip netns exec %s cat /sys/class/net/va%u/operstate)\" = up ] && "
           "[ \"$(ip netns exec %s cat /sys/class/net/vb%u/operstate)\" = up ]",
           p->a, n, p->b, n) == 0)
      break;
    usleep(10000);
  }
  p->setup_ms = (double)(th_now_ns() - t0) / 1e6;
  if (rc != 0)
    pair_down(p);
  return rc == 0;
}

/* Joins namespace ns as ip-netns-exec(8) does: the network namespace, and
 * a mount namespace of its own with /sys mounted again, since UCX finds its
 * network devices in /sys/class/net. Call before any thread is started. */
static int enter(const char *ns)
{
  char path[96];
  snprintf(path, sizeof(path), "/run/netns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
    return -1;
  close(fd);
  if (unshare(CLONE_NEWNS) != 0 || mount("", "/", NULL, MS_SLAVE | MS_REC, NULL) != 0 ||
      umount2("/sys", MNT_DETACH) != 0 || mount(ns, "/sys", "sysfs", 0, NULL) != 0)
    return -2;
  return 0;
}

static const char *ucx_ini(const char *role, const char *addr, const char *extra)
{
  return th_ini_text("[plugin]\npath = %s\nlog_level = error\n\n"
                     "[region]\nname = %s\nblock_size = %u\nsize = %u\n\n"
                     "[engine]\ntype = host\n\n[directory]\nenabled = true\n\n"
                     "[ucx]\nrole = %s\naddress = %s:%d\n%s",
                     ECC_UCX_PLUGIN_PATH, th_region_name(), BS, BS * 4096, role, addr, PORT,
                     extra ? extra : "");
}

static uint8_t byte_of(uint64_t i)
{
  return (uint8_t)(i * 131 + (i >> 11));
}

static const uint64_t sizes[] = {1, BS, 7 * BS + 5, 880 * 3072, 3u << 20};
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

/* The server: in namespace `ns` (the role's suffix), saves one entry per
 * size, says so, and serves until killed. */
__attribute__((constructor)) static void server_entry(void)
{
  const char *role, *ini;
  int unused, ready;
  if (!th_child_args(&role, &ini, &unused, &ready) || strncmp(role, "netns-server:", 13) != 0)
    return;
  if (enter(role + 13) != 0)
    _exit(4);
  ecc_connector_t *srv = NULL;
  char err[512];
  if (ecc_open(ini, NULL, &srv, err, sizeof(err)) != ECC_OK)
    _exit(2);
  for (size_t k = 0; k < N_SIZES; k++) {
    uint8_t *src = malloc(sizes[k]);
    for (uint64_t i = 0; i < sizes[k]; i++)
      src[i] = byte_of(i + k);
    char key[32];
    snprintf(key, sizeof(key), "entry-%zu", k);
    ecc_entry_t e;
    ecc_completion_t done;
    size_t n = 0;
    if (ecc_reserve(srv, key, sizes[k], &e) != ECC_OK)
      _exit(3);
    ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, sizes[k]};
    if (ecc_save_reserved(srv, &s, 1) != ECC_OK || ecc_flush(srv, NULL) != ECC_OK)
      _exit(3);
    while (n == 0)
      if (ecc_poll(srv, &done, 1, &n) != ECC_OK || (n == 1 && done.status != ECC_OK))
        _exit(3);
    free(src);
  }
  if (write(ready, "r", 1) != 1)
    _exit(3);
  for (;;)
    pause();
}

struct scene {
  struct pair ns;
  pid_t server;
  ecc_connector_t *cli;
};

static bool scene_up(struct scene *s, const char *client_extra, bool v6)
{
  s->ns.v6 = v6;
  if (!pair_up(&s->ns))
    return false;
  cr_log_info("two namespaces and a veth pair up in %.0f ms", s->ns.setup_ms);
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  char role[64];
  snprintf(role, sizeof(role), "netns-server:%s", s->ns.a);
  s->server = th_spawn_self(role, ucx_ini("server", s->ns.addr_a, NULL), -1, ready[1]);
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the server did not start in %s", s->ns.a);
  close(ready[0]);
  int rc = enter(s->ns.b);
  cr_assert_eq(rc, 0, "entering %s: %s", s->ns.b, strerror(errno));
  char err[512] = "";
  rc = ecc_open(ucx_ini("client", s->ns.addr_a, client_extra), NULL, &s->cli, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "the client in %s: %s", s->ns.b, err);
  return true;
}

static void scene_down(struct scene *s)
{
  if (s->cli != NULL)
    ecc_close(s->cli);
  kill(s->server, SIGKILL);
  waitpid(s->server, NULL, 0);
  pair_down(&s->ns);
}

/* Looks entry k up and loads it: its load's status (bytes checked on OK). */
static int fetch(ecc_connector_t *cli, size_t k)
{
  char key[32];
  snprintf(key, sizeof(key), "entry-%zu", k);
  const char *keys[] = {key};
  ecc_entry_t e;
  int rc = ecc_lookup(cli, keys, 1, 1, &e);
  if (rc != ECC_OK)
    return rc;
  cr_assert_eq(e.state, ECC_ENTRY_READY, "%s not found", key);
  uint8_t *dst = malloc(sizes[k]);
  ecc_load_pinned_t lp = {k + 1, e.token, (uint64_t)(uintptr_t)dst, sizes[k]};
  rc = ecc_load_pinned(cli, &lp, 1, NULL);
  ecc_completion_t done;
  if (rc == ECC_OK) {
    cr_assert_eq(th_poll_until(cli, &done, 1, 10000), 1u, "%s: no completion", key);
    rc = done.status;
  }
  uint64_t bad = 0;
  for (uint64_t i = 0; rc == ECC_OK && i < sizes[k]; i++)
    bad += dst[i] != byte_of(i + k);
  cr_expect_eq(bad, 0u, "%s: %llu bytes wrong", key, (unsigned long long)bad);
  free(dst);
  return rc;
}

Test(ucx_netns, entries_of_every_size_cross_between_namespaces)
{
  struct scene s = {0};
  if (!scene_up(&s, NULL, false))
    cr_skip_test("needs root and ip(8) to make network namespaces");
  cr_expect_lt(s.ns.setup_ms, 1000.0, "setup took %.0f ms", s.ns.setup_ms);
  for (size_t k = 0; k < N_SIZES; k++)
    cr_expect_eq(fetch(s.cli, k), ECC_OK, "entry %zu", k);
  scene_down(&s);
}

/* IPv6 on interfaces that have IPv4 addresses too: UCX 1.13 corrupted its
 * heap on the server's first accept there unless told to prefer IPv6 (the
 * server then aborted with "double free or corruption"). */
Test(ucx_netns, entries_cross_over_ipv6_beside_ipv4)
{
  struct scene s = {0};
  if (!scene_up(&s, NULL, true))
    cr_skip_test("needs root and ip(8) to make network namespaces");
  for (size_t k = 0; k < N_SIZES; k++)
    cr_expect_eq(fetch(s.cli, k), ECC_OK, "entry %zu", k);
  int status = 0;
  cr_expect_eq(waitpid(s.server, &status, WNOHANG), 0, "the server died (status 0x%x)", status);
  scene_down(&s);
}

Test(ucx_netns, a_link_taken_down_is_given_up_then_used_again)
{
  struct scene s = {0};
  if (!scene_up(&s, "deadline_ms = 400\n", false))
    cr_skip_test("needs root and ip(8) to make network namespaces");
  cr_assert_eq(fetch(s.cli, 1), ECC_OK);
  unsigned n = (unsigned)getpid() % 250 + 1;
  cr_assert_eq(sh("ip -n %s link set vb%u down", s.ns.b, n), 0);
  uint64_t t0 = th_now_ns();
  int rc = fetch(s.cli, 4);
  double ms = (double)(th_now_ns() - t0) / 1e6;
  cr_expect_eq(rc, ECC_ERR_TRANSFER, "a fetch over a dead link said %d", rc);
  cr_expect_lt(ms, 2000.0, "given up after %.0f ms (deadline 400)", ms);
  cr_assert_eq(sh("ip -n %s link set vb%u up", s.ns.b, n), 0);
  rc = ECC_ERR_TRANSFER;
  for (int t = 0; t < 20 && rc != ECC_OK; t++) {
    usleep(100000);
    rc = fetch(s.cli, 4);
  }
  cr_expect_eq(rc, ECC_OK, "the link came back but the client did not use it");
  scene_down(&s);
}

/* The 80 bytes that aborted UCX 1.13's connection manager (a 16-byte
 * header declaring 1 byte of private data, then 64 more), sent from the
 * client's namespace to the server's port: the server refuses them and
 * serves on. */
Test(ucx_netns, the_80_byte_packet_from_another_host_leaves_the_server_serving)
{
  struct scene s = {0};
  if (!scene_up(&s, NULL, false))
    cr_skip_test("needs root and ip(8) to make network namespaces");
  uint8_t pkt[80] = {1};
  memset(pkt + 16, 0x41, 64);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
  cr_assert_eq(inet_pton(AF_INET, s.ns.addr_a, &a.sin_addr), 1);
  for (int i = 0; i < 3; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
    cr_assert_eq(write(fd, pkt, sizeof(pkt)), (ssize_t)sizeof(pkt));
    close(fd);
  }
  usleep(200000);
  int status = 0;
  cr_expect_eq(waitpid(s.server, &status, WNOHANG), 0, "the server died (status 0x%x)", status);
  for (size_t k = 0; k < N_SIZES; k++)
    cr_expect_eq(fetch(s.cli, k), ECC_OK, "entry %zu after the packet", k);
  scene_down(&s);
}
