/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_config.c - the [ucx] keys (ucx_config.h): their table, joined at
 * load time to the shm connector's, and their parsing.
 */
#include "plugins/ucx/ucx_config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/trust.h"
#include "plugins/ucx/sha256.h"

#define SECRET_MIN 16u
#define SECRET_MAX 4096u

static const ecc_param_v1_t own[UCX_N_OWN] = {
    {"ucx.role", "", "server (the producer host: answers lookups, lends its blocks) | client"},
    {"ucx.address", "",
     "HOST:PORT, a numeric address (an IPv6 one in brackets) or a name: where the server "
     "listens, or the server a client connects to"},
    {"ucx.transports", "tcp",
     "UCX transports (UCX_TLS); tcp by default, since UCX would otherwise take shared memory "
     "between namespaces of one host"},
    {"ucx.net_devices", "", "UCX network devices (UCX_NET_DEVICES); empty: all"},
    {"ucx.deadline_ms", "1000",
     "how long a lookup waits for the server's answer, and a silent server is tolerated "
     "(1..600000)"},
    {"ucx.connect_timeout_ms", "5000",
     "client: how long the handshake may take; server: how long each step of a connecting "
     "peer's preface may take (1..600000)"},
    {"ucx.cache", "true",
     "client, a boolean: true keeps each pulled entry in this host's directory as well (a "
     "second load crosses no network); false lands them in the destination alone"},
    {"ucx.secret_file", "",
     "a file of this user, mode 0600 or 0400, of 16..4096 bytes: a peer is admitted only if it "
     "proves it holds the same (both sides must set it); empty: no secret"},
    {"ucx.client_max_pins", "0",
     "server: pins one client may hold at once; a lookup past them is refused with "
     "ECC_ERR_BUSY (0..1048576; 0: a quarter of the directory's pin slots)"},
    {"ucx.client_max_pulls", "64",
     "server: loads of one client in flight at once; one past them fails with ECC_ERR_BUSY "
     "(1..65536)"},
};

ecc_param_v1_t ucx_params[UCX_N_PARAMS];

/* The table cannot be one initializer (config_params lives in another
 * file): it is filled when the plugin is loaded, before any caller can see
 * the ABI table that points at it. */
__attribute__((constructor)) static void join_params(void)
{
  memcpy(ucx_params, config_params, sizeof(config_params));
  memcpy(ucx_params + CONFIG_N_PARAMS, own, sizeof(own));
}

static int fail(char *err, size_t cap, const char *key, const char *value, const char *want)
{
  return errtext_fail(err, cap, ECC_ERR_CONFIG, "config: %s = '%s': %s", key, value, want);
}

static int parse_ms(const char *key, const char *v, uint32_t *out, char *err, size_t cap)
{
  char *end;
  errno = 0;
  unsigned long ms = strtoul(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || ms < 1 || ms > 600000 || v[0] == '-')
    return fail(err, cap, key, v, "want milliseconds, 1..600000");
  *out = (uint32_t)ms;
  return ECC_OK;
}

/* "1.2.3.4:5", "[fd00::1]:5", "cache-0.example:5". */
static int parse_address(const char *v, struct ucx_config *u, char *err, size_t cap)
{
  const char *host = v, *colon;
  size_t len;
  if (v[0] == '[') {
    const char *close = strchr(v, ']');
    if (close == NULL || close[1] != ':')
      return fail(err, cap, "ucx.address", v, "want [IPV6]:PORT");
    host = v + 1;
    len = (size_t)(close - host);
    colon = close + 1;
  } else {
    colon = strrchr(v, ':');
    if (colon == NULL || strchr(v, ':') != colon)
      return fail(err, cap, "ucx.address", v, "want ADDRESS:PORT (an IPv6 address in brackets)");
    len = (size_t)(colon - v);
  }
  char *end;
  errno = 0;
  unsigned long port = strtoul(colon + 1, &end, 10);
  if (len == 0 || len >= sizeof(u->host) || errno != 0 || end == colon + 1 || *end != '\0' ||
      port < 1 || port > 65535)
    return fail(err, cap, "ucx.address", v, "want HOST:PORT with a port of 1..65535");
  memcpy(u->host, host, len);
  u->host[len] = '\0';
  u->port = (uint16_t)port;
  return ECC_OK;
}

/* u->addr from u->host: the host itself when numeric, else the first
 * address the resolver gives for it (a server's is one to listen on). */
static int resolve_address(struct ucx_config *u, char *err, size_t cap)
{
  unsigned char any[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, u->host, any) == 1 || inet_pton(AF_INET6, u->host, any) == 1) {
    strcpy(u->addr, u->host);
    return ECC_OK;
  }
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags =
                               AI_ADDRCONFIG | (u->role == UCX_ROLE_SERVER ? AI_PASSIVE : 0)};
  struct addrinfo *found = NULL;
  int e = getaddrinfo(u->host, NULL, &hints, &found);
  const void *where = NULL;
  if (e == 0 && found->ai_family == AF_INET)
    where = &((const struct sockaddr_in *)(const void *)found->ai_addr)->sin_addr;
  else if (e == 0 && found->ai_family == AF_INET6)
    where = &((const struct sockaddr_in6 *)(const void *)found->ai_addr)->sin6_addr;
  bool ok = where != NULL && inet_ntop(found->ai_family, where, u->addr, sizeof(u->addr)) != NULL;
  if (found != NULL)
    freeaddrinfo(found);
  if (ok)
    return ECC_OK;
  return errtext_fail(err, cap, ECC_ERR_CONFIG,
                      "config: ucx.address: cannot resolve '%s' (%s): give a numeric address, or "
                      "a name this host resolves (/etc/hosts or DNS)",
                      u->host, e != 0 ? gai_strerror(e) : "no IPv4 or IPv6 address");
}

static int parse_count(const char *key, const char *v, uint32_t max, uint32_t *out, char *err,
                       size_t cap)
{
  char *end;
  errno = 0;
  unsigned long n = strtoul(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || n < 1 || n > max || v[0] == '-') {
    char want[48];
    snprintf(want, sizeof(want), "want a count, 1..%u", max);
    return fail(err, cap, key, v, want);
  }
  *out = (uint32_t)n;
  return ECC_OK;
}

/* The secret: a regular file on a path nobody else can change (trust.h),
 * owned by this user and readable by nobody else, since it admits peers. */
static int read_secret(const char *path, struct ucx_config *u, char *err, size_t cap)
{
  int fd;
  char canon[4096], why[512];
  if (trust_open(path, TRUST_FILE, "ucx.secret_file", &fd, canon, sizeof(canon), why,
                 sizeof(why)) != TRUST_OK)
    return errtext_fail(err, cap, ECC_ERR_CONFIG, "config: %s", why);
  struct stat st;
  int rc = ECC_OK;
  if (fstat(fd, &st) != 0)
    rc = errtext_fail(err, cap, ECC_ERR_CONFIG, "config: ucx.secret_file %s: %s", path,
                      strerror(errno));
  else if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
    rc = errtext_fail(err, cap, ECC_ERR_CONFIG,
                      "config: ucx.secret_file %s must be owned by this user (uid %u) and "
                      "readable by nobody else (chmod 600); it is uid %u, mode %04o",
                      path, (unsigned)geteuid(), (unsigned)st.st_uid,
                      (unsigned)(st.st_mode & 07777));
  else if (st.st_size < SECRET_MIN || st.st_size > SECRET_MAX)
    rc = errtext_fail(err, cap, ECC_ERR_CONFIG,
                      "config: ucx.secret_file %s holds %lld bytes: want %u..%u (e.g. head -c 32 "
                      "/dev/urandom > FILE)",
                      path, (long long)st.st_size, SECRET_MIN, SECRET_MAX);
  uint8_t buf[SECRET_MAX];
  ssize_t n = rc == ECC_OK ? read(fd, buf, sizeof(buf)) : 0;
  if (rc == ECC_OK && n != st.st_size)
    rc = errtext_fail(err, cap, ECC_ERR_CONFIG, "config: ucx.secret_file %s: short read", path);
  close(fd);
  if (rc != ECC_OK)
    return rc;
  struct sha256 h;
  sha256_init(&h);
  sha256_update(&h, buf, (size_t)n);
  sha256_final(&h, u->secret);
  memset(buf, 0, sizeof(buf));
  u->has_secret = true;
  return ECC_OK;
}

static int copy_text(const char *key, const char *v, char *dst, size_t cap, char *err,
                     size_t err_cap)
{
  if (strlen(v) >= cap)
    return fail(err, err_cap, key, v, "too long");
  strcpy(dst, v);
  return ECC_OK;
}

static int set_own(struct ucx_config *u, const char *key, const char *v, char *err, size_t cap)
{
  if (strcmp(key, "ucx.role") == 0) {
    if (strcmp(v, "server") != 0 && strcmp(v, "client") != 0)
      return fail(err, cap, key, v, "want server or client");
    u->role = v[0] == 's' ? UCX_ROLE_SERVER : UCX_ROLE_CLIENT;
    return ECC_OK;
  }
  if (strcmp(key, "ucx.address") == 0)
    return parse_address(v, u, err, cap);
  if (strcmp(key, "ucx.transports") == 0)
    return v[0] == '\0' ? fail(err, cap, key, v, "want a transport list, e.g. tcp")
                        : copy_text(key, v, u->transports, sizeof(u->transports), err, cap);
  if (strcmp(key, "ucx.net_devices") == 0)
    return copy_text(key, v, u->net_devices, sizeof(u->net_devices), err, cap);
  if (strcmp(key, "ucx.deadline_ms") == 0)
    return parse_ms(key, v, &u->deadline_ms, err, cap);
  if (strcmp(key, "ucx.secret_file") == 0) {
    u->has_secret = false;
    return v[0] == '\0' ? ECC_OK : read_secret(v, u, err, cap);
  }
  if (strcmp(key, "ucx.client_max_pins") == 0)
    return strcmp(v, "0") == 0 ? (u->max_pins = 0, ECC_OK)
                               : parse_count(key, v, 1u << 20, &u->max_pins, err, cap);
  if (strcmp(key, "ucx.client_max_pulls") == 0)
    return parse_count(key, v, 1u << 16, &u->max_pulls, err, cap);
  if (strcmp(key, "ucx.cache") == 0)
    return config_bool_word(v, &u->cache) == 0
               ? ECC_OK
               : fail(err, cap, key, v, "want a boolean: true | false | on | off | yes | no");
  return parse_ms(key, v, &u->connect_ms, err, cap);
}

int ucx_config_parse(const ecc_kv_v1_t *kv, size_t n, struct ucx_config *ucx,
                     struct plugin_config *local, char *err, size_t err_cap)
{
  struct ucx_config u = {
      .deadline_ms = 1000, .connect_ms = 5000, .cache = true, .max_pins = 0, .max_pulls = 64};
  strcpy(u.transports, "tcp");
  ecc_kv_v1_t *rest = calloc(n > 0 ? n : 1, sizeof(*rest));
  if (rest == NULL)
    return errtext_fail(err, err_cap, ECC_ERR_NOMEM, "config: out of memory");
  size_t n_rest = 0;
  int rc = ECC_OK;
  for (size_t i = 0; i < n && rc == ECC_OK; i++) {
    if (kv[i].key == NULL || kv[i].value == NULL || strncmp(kv[i].key, "ucx.", 4) != 0) {
      rest[n_rest++] = kv[i];
      continue;
    }
    bool known = false;
    for (size_t j = 0; j < UCX_N_OWN && !known; j++)
      known = strcmp(own[j].key, kv[i].key) == 0;
    rc = known ? set_own(&u, kv[i].key, kv[i].value, err, err_cap)
               : errtext_fail(err, err_cap, ECC_ERR_CONFIG, "config: unknown key '%s'", kv[i].key);
  }
  if (rc == ECC_OK)
    rc = config_parse(rest, n_rest, local, err, err_cap);
  free(rest);
  if (rc != ECC_OK)
    return rc;
  if (u.role == 0)
    return errtext_fail(err, err_cap, ECC_ERR_CONFIG,
                        "config: ucx.role is missing: want server or client");
  if (u.port == 0)
    return errtext_fail(err, err_cap, ECC_ERR_CONFIG,
                        "config: ucx.address is missing: where the server %s",
                        u.role == UCX_ROLE_SERVER ? "listens" : "is");
  if (!local->directory)
    return errtext_fail(err, err_cap, ECC_ERR_CONFIG,
                        "config: directory.enabled = false: the ucx plugin moves entries by key "
                        "and needs the directory on both sides");
  rc = resolve_address(&u, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  *ucx = u;
  return ECC_OK;
}
