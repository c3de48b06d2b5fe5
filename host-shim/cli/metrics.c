/* SPDX-License-Identifier: Apache-2.0 */
/*
 * metrics.c - eccctl metrics: a connector's counters in the Prometheus text
 * format (version 0.0.4), with the names, types and help of the Python
 * collector (python/ecc/metrics.py), printed once or served on GET
 * /metrics by a small blocking server: one scrape is one ecc_get_stats,
 * requests are read with a deadline and a size bound, so a slow client
 * cannot hold it.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ecc_host.h"
#include "host-shim/cli/cli.h"

#define REQUEST_MAX 8192
#define REQUEST_TIMEOUT_S 2
#define BODY_MAX 65536

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
  (void)sig;
  stop = 1;
}

/* ---- the exposition ------------------------------------------------------ */

struct text {
  char buf[BODY_MAX];
  size_t len;
};

__attribute__((format(printf, 2, 3))) static void put(struct text *t, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->len, sizeof(t->buf) - t->len, fmt, ap);
  va_end(ap);
  if (n > 0)
    t->len = t->len + (size_t)n < sizeof(t->buf) ? t->len + (size_t)n : sizeof(t->buf) - 1;
}

static void family(struct text *t, const char *name, const char *type, const char *help)
{
  put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct text *t, const char *name, const char *help, double value)
{
  char full[128];
  snprintf(full, sizeof(full), "%s_total", name);
  family(t, full, "counter", help);
  put(t, "%s %.17g\n", full, value);
}

static void gauge(struct text *t, const char *name, const char *help, double value)
{
  family(t, name, "gauge", help);
  put(t, "%s %.17g\n", name, value);
}

/* The bounds of ECC_HIST_BOUNDS, in order. */
static const double hist_bounds[] = {
#define HIST_BOUND(b) (double)(b),
    ECC_HIST_BOUNDS(HIST_BOUND)
#undef HIST_BOUND
};

static void histogram(struct text *t, const char *dir, const ecc_dir_stats_t *d)
{
  char name[64], help[80];
  snprintf(name, sizeof(name), "ecc_%s_size_bytes", dir);
  snprintf(help, sizeof(help), "Batched %s transfers by size in bytes", dir);
  family(t, name, "histogram", help);
  uint64_t running = 0;
  for (size_t i = 0; i < sizeof(hist_bounds) / sizeof(hist_bounds[0]); i++) {
    running += d->hist[i];
    put(t, "%s_bucket{le=\"%.1f\"} %" PRIu64 "\n", name, hist_bounds[i], running);
  }
  running += d->hist[ECC_HIST_BUCKETS - 1];
  put(t, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_count %" PRIu64 "\n%s_sum %" PRIu64 "\n", name,
      running, name, running, name, d->bytes);
}

/* Per direction: (name suffix, field, scale, help), as the Python
 * collector's DIRECTION_COUNTERS. */
static const struct {
  const char *suffix;
  size_t offset;
  double scale;
  const char *help;
} direction_counters[] = {
    {"bytes", offsetof(ecc_dir_stats_t, bytes), 1, "Bytes moved"},
    {"time_seconds", offsetof(ecc_dir_stats_t, busy_ns), 1e-9,
     "Seconds the batched transfers took, summed"},
    {"transfers", offsetof(ecc_dir_stats_t, transfers), 1, "Batched transfers completed"},
    {"entries", offsetof(ecc_dir_stats_t, entries), 1, "Entries (keys or transfer ids) completed"},
    {"descriptors", offsetof(ecc_dir_stats_t, descriptors), 1, "Copy descriptors after coalescing"},
    {"failed_transfers", offsetof(ecc_dir_stats_t, failed), 1,
     "Batched transfers that ended with an error"},
};

static void direction(struct text *t, const char *dir, const ecc_dir_stats_t *d)
{
  char name[64], help[96];
  for (size_t i = 0; i < sizeof(direction_counters) / sizeof(direction_counters[0]); i++) {
    uint64_t v;
    memcpy(&v, (const char *)d + direction_counters[i].offset, sizeof(v));
    snprintf(name, sizeof(name), "ecc_%s_%s", dir, direction_counters[i].suffix);
    snprintf(help, sizeof(help), "%s (%s)", direction_counters[i].help, dir);
    counter(t, name, help, (double)v * direction_counters[i].scale);
  }
  histogram(t, dir, d);
}

static void directory(struct text *t, const ecc_directory_stats_t *d, uint64_t block_size)
{
  gauge(t, "ecc_directory_entries", "Entries reserved or ready", (double)d->entries);
  gauge(t, "ecc_directory_blocks_used", "Blocks of those entries", (double)d->blocks_used);
  gauge(t, "ecc_directory_blocks_free", "Blocks of no entry", (double)d->blocks_free);
  gauge(t, "ecc_directory_largest_free_run", "Longest run of free blocks",
        (double)d->largest_free_run);
  gauge(t, "ecc_directory_pins_live", "Pins not yet released", (double)d->pins_live);
  uint64_t blocks = d->blocks_used + d->blocks_free;
  gauge(t, "ecc_directory_occupancy", "Fraction of the blocks in use",
        blocks != 0 ? (double)d->blocks_used / (double)blocks : 0.0);
  gauge(t, "ecc_directory_used_bytes", "Bytes of the blocks in use",
        (double)d->blocks_used * (double)block_size);
  gauge(t, "ecc_directory_free_bytes", "Bytes of the free blocks",
        (double)d->blocks_free * (double)block_size);
  counter(t, "ecc_directory_reservations", "reserve calls that reserved", (double)d->reservations);
  counter(t, "ecc_directory_dedup_hits", "reserve calls that found the key ready or being written",
          (double)d->dedup_hits);
  counter(t, "ecc_directory_lookups", "Keys looked up", (double)d->lookups);
  counter(t, "ecc_directory_hits", "Keys looked up and found ready", (double)d->hits);
  counter(t, "ecc_directory_misses", "Keys looked up and not found ready", (double)d->misses);
  counter(t, "ecc_directory_evictions", "Entries evicted to make room", (double)d->evictions);
  counter(t, "ecc_directory_removals", "Entries removed by key", (double)d->removals);
  counter(t, "ecc_directory_reclaimed", "Reservations and pins of dead processes freed",
          (double)d->reclaimed);
  counter(t, "ecc_directory_full", "reserve calls refused for want of room", (double)d->full);
}

static void cache(struct text *t, const ecc_cache_stats_t *k)
{
  counter(t, "ecc_cache_waits", "wait_ready calls that found the key being written",
          (double)k->waits);
  counter(t, "ecc_cache_waits_ready", "Waits that ended with the entry ready",
          (double)k->waits_ready);
  counter(t, "ecc_cache_waits_absent", "Waits that ended absent: the writer aborted or died",
          (double)k->waits_absent);
  counter(t, "ecc_cache_wait_timeouts", "Waits that ended with their timeout",
          (double)k->wait_timeouts);
  counter(t, "ecc_cache_encoder_seconds_saved", "Encoder seconds the hits saved, by their cost",
          (double)k->encoder_us_saved * 1e-6);
  counter(t, "ecc_cache_events", "Residency events written", (double)k->events);
  counter(t, "ecc_cache_restarts", "Opens that reused a kept region", (double)k->restarts);
}

/* One scrape: ECC_OK with the exposition in t, or the call's error. */
static int expose(ecc_connector_t *c, struct text *t)
{
  ecc_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  ecc_info_t info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  int rc = ecc_get_stats(c, &s);
  if (rc == ECC_OK)
    rc = ecc_describe(c, &info);
  if (rc != ECC_OK)
    return rc;
  t->len = 0;
  direction(t, "save", &s.save);
  direction(t, "load", &s.load);
  directory(t, &s.directory, info.block_size);
  cache(t, &s.cache);
  return ECC_OK;
}

/* ---- the server ------------------------------------------------------------ */

struct metrics_opts {
  const char *config;
  const char *listen; /* NULL: print once to stdout */
  bool once;          /* serve one scrape, then exit */
};

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (every address) into host and port. */
static int split_address(const char *text, char *host, size_t host_cap, char *port, size_t port_cap)
{
  const char *colon = strrchr(text, ':');
  if (colon == NULL || colon[1] == '\0')
    return -1;
  const char *h = text;
  size_t hlen = (size_t)(colon - text);
  if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
    h++;
    hlen -= 2;
  }
  if (hlen >= host_cap || strlen(colon + 1) >= port_cap)
    return -1;
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  snprintf(port, port_cap, "%s", colon + 1);
  return 0;
}

/* A listening socket on the address, or -1 after saying why. */
static int listen_on(const char *address)
{
  char host[256], port[16];
  if (split_address(address, host, sizeof(host), port, sizeof(port)) != 0) {
    fprintf(stderr,
            "eccctl metrics: --listen '%s' is not ADDR:PORT (e.g. 127.0.0.1:9464, "
            "[::1]:9464, :9464)\n",
            address);
    return -1;
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *ai = NULL;
  int rc = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &ai);
  if (rc != 0) {
    fprintf(stderr, "eccctl metrics: --listen '%s': %s\n", address, gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    int one = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
                    bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0)) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    fprintf(stderr, "eccctl metrics: cannot listen on %s: %s\n", address, strerror(err));
  return fd;
}

/* Prints the bound address on stdout's first line (port 0 picks one). */
static void say_where(int fd)
{
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char host[128] = "?", port[16] = "?";
  if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
    getnameinfo((struct sockaddr *)&ss, len, host, sizeof(host), port, sizeof(port),
                NI_NUMERICHOST | NI_NUMERICSERV);
  bool v6 = ss.ss_family == AF_INET6;
  printf("listening on http://%s%s%s:%s/metrics\n", v6 ? "[" : "", host, v6 ? "]" : "", port);
  fflush(stdout);
}

static void send_all(int fd, const char *buf, size_t len)
{
  while (len > 0) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n <= 0)
      return;
    buf += n;
    len -= (size_t)n;
  }
}

static void respond(int fd, const char *status, const char *type, const char *body, size_t len)
{
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   status, type, len);
  send_all(fd, head, (size_t)n);
  send_all(fd, body, len);
}

/* The request's first line, read with a deadline and a bound; false when
 * the client sent none in time. */
static bool read_request(int fd, char *req, size_t cap)
{
  struct timeval tv = {REQUEST_TIMEOUT_S, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = recv(fd, req + len, cap - 1 - len, 0);
    if (n <= 0)
      return false;
    len += (size_t)n;
    req[len] = '\0';
    if (strstr(req, "\r\n\r\n") != NULL || strstr(req, "\n\n") != NULL)
      return true;
  }
  return false;
}

static void serve_one(ecc_connector_t *c, int client, struct text *t)
{
  char req[REQUEST_MAX];
  if (!read_request(client, req, sizeof(req)))
    return;
  char method[16] = "", path[256] = "";
  if (sscanf(req, "%15s %255s", method, path) != 2) {
    respond(client, "400 Bad Request", "text/plain", "bad request\n", 12);
    return;
  }
  char *query = strchr(path, '?');
  if (query != NULL)
    *query = '\0';
  if (strcmp(path, "/metrics") != 0) {
    respond(client, "404 Not Found", "text/plain", "only /metrics is served\n", 24);
    return;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    respond(client, "405 Method Not Allowed", "text/plain", "GET /metrics\n", 13);
    return;
  }
  int rc = expose(c, t);
  if (rc != ECC_OK) {
    const char *why = ecc_strerror(rc);
    respond(client, "503 Service Unavailable", "text/plain", why, strlen(why));
    return;
  }
  respond(client, "200 OK", "text/plain; version=0.0.4; charset=utf-8", t->buf,
          strcmp(method, "HEAD") == 0 ? 0 : t->len);
}

static int serve(ecc_connector_t *c, const struct metrics_opts *o)
{
  static struct text t;
  int fd = listen_on(o->listen);
  if (fd < 0)
    return CLI_FAIL;
  say_where(fd);
  while (!stop) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 500) <= 0)
      continue;
    int client = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    if (client < 0)
      continue;
    serve_one(c, client, &t);
    close(client);
    if (o->once)
      break;
  }
  close(fd);
  return CLI_OK;
}

static int parse(int argc, char **argv, struct metrics_opts *o)
{
  static const struct option long_opts[] = {{"listen", required_argument, NULL, 'l'},
                                            {"once", no_argument, NULL, 'o'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    if (ch == 'l')
      o->listen = optarg;
    else if (ch == 'o')
      o->once = true;
    else if (ch == ':')
      return cli_usage_error("metrics", "option '%s' needs a value", argv[optind - 1]);
    else
      return cli_usage_error("metrics", "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error("metrics", "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error("metrics", "unexpected argument '%s'", argv[optind + 1]);
  if (o->once && o->listen == NULL)
    return cli_usage_error("metrics", "--once needs --listen");
  o->config = argv[optind];
  return CLI_OK;
}

int cmd_metrics(int argc, char **argv)
{
  struct metrics_opts o = {0};
  int rc = parse(argc, argv, &o);
  if (rc < 0) {
    help_metrics(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;
  ecc_connector_t *c = cli_join_region("metrics", o.config);
  if (c == NULL)
    return CLI_FAIL;
  if (o.listen == NULL) {
    static struct text t;
    rc = expose(c, &t);
    if (rc != ECC_OK)
      return cli_close_region("metrics", c, cli_call_error("metrics", c, rc));
    fwrite(t.buf, 1, t.len, stdout);
    return cli_close_region("metrics", c, CLI_OK);
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  return cli_close_region("metrics", c, serve(c, &o));
}

void help_metrics(FILE *out)
{
  fprintf(out, "usage: eccctl metrics [--listen ADDR:PORT [--once]] CONFIG\n"
               "\n"
               "The counters of the region CONFIG names (transfers of this connector, the\n"
               "directory's and the cache's of every process of the region) in the\n"
               "Prometheus text format, with the names of the Python collector\n"
               "(ecc.metrics.Collector): printed once, or served on GET /metrics at ADDR:PORT\n"
               "(127.0.0.1:9464, [::1]:9464, :9464 for every address; port 0 picks a free\n"
               "one) until SIGINT or SIGTERM. The first line printed says where it listens.\n"
               "The region is joined, never created.\n"
               "\n"
               "  --listen ADDR:PORT  serve scrapes instead of printing once\n"
               "  --once              serve one scrape, then exit\n");
}
