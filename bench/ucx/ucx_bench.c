/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_bench.c - ecc-ucx-bench: entries pulled across hosts through
 * libecc-ucx.so, against raw UCX data messages and raw UCX gets (RMA) of the
 * same bytes over the same link. bench/ucx-netns.sh runs it between two network namespaces,
 * with iperf3 on the same veth for the link's own limit.
 *
 *   ecc-ucx-bench server ADDR:PORT   saves, for each row size, ENTRIES
 *                                    images of 880 rows, then serves
 *   ecc-ucx-bench client ADDR:PORT   looks each image up and loads it (every
 *                                    byte checked), then times raw pushes;
 *                                    prints one line per row size; with a
 *                                    GPU, also into device memory through
 *                                    the CUDA engine, and into host memory
 *                                    followed by a cudaMemcpy
 *   ecc-ucx-bench raw-server ADDR:PORT  the raw side's sender
 * Options: --rows LIST (bytes per row, default 3072,65536,2097152),
 * --entries N (default 4), --plugin PATH, --region-dir DIR.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/ucx/gpu_dst.h"
#include "common/clock.h"
#include "ecc_host.h"
#include "plugins/ucx/net.h"
#include "plugins/ucx/wire.h"

#define ROWS_PER_IMAGE 880u
#define MAX_SIZES 8
#define RAW_CHUNK (1u << 20)

struct opts {
  const char *role, *address, *plugin, *region_folder;
  uint64_t rows[MAX_SIZES];
  unsigned n_rows, entries;
};

static void die(const char *what)
{
  fprintf(stderr, "ecc-ucx-bench: %s\n", what);
  exit(1);
}

static uint8_t byte_of(uint64_t i, unsigned k)
{
  return (uint8_t)(i * 29 + k * 7 + (i >> 13));
}

static const char *ini_for(const struct opts *o, const char *role, uint64_t block, uint64_t bytes,
                           bool cache, const char *engine)
{
  static char path[64];
  snprintf(path, sizeof(path), "/tmp/ecc-ucx-bench-%d.ini", (int)getpid());
  FILE *f = fopen(path, "w");
  if (f == NULL)
    die("cannot write the INI file");
  fprintf(f,
          "[plugin]\npath = %s\nlog_level = warn\n[region]\nname = ucxbench-%s%s-%s-%d\n%s%s%s"
          "block_size = %" PRIu64 "\nsize = %" PRIu64 "\n[engine]\ntype = %s\n"
          "[directory]\nenabled = true\n[ucx]\nrole = %s\naddress = %s\ndeadline_ms = 10000\n"
          "cache = %s\n",
          o->plugin, role, cache ? "" : "-direct", engine, (int)getpid(),
          o->region_folder ? "dir = " : "", o->region_folder ? o->region_folder : "",
          o->region_folder ? "\n" : "", block, bytes, engine, role, o->address,
          cache ? "true" : "false");
  fclose(f);
  return path;
}

static ecc_connector_t *open_or_die(const char *ini)
{
  char err[512];
  ecc_connector_t *c = NULL;
  if (ecc_open(ini, NULL, &c, err, sizeof(err)) != ECC_OK) {
    fprintf(stderr, "ecc-ucx-bench: %s\n", err);
    exit(1);
  }
  unlink(ini);
  return c;
}

/* Polls as a serving loop would, yielding the CPU between polls (on a
 * small machine a busy poll takes it from the progress thread). */
static void wait_one(ecc_connector_t *c, ecc_completion_t *done)
{
  size_t n = 0;
  for (;;) {
    if (ecc_poll(c, done, 1, &n) != ECC_OK)
      die("poll failed");
    if (n > 0)
      break;
    usleep(50);
  }
  if (done->status != ECC_OK)
    die("a transfer failed");
}

/* The server keeps images of 880 rows, each in whole blocks of the largest
 * row (sized to its bytes, not a block a row: that asked for 22 GB). */
static void run_server(const struct opts *o)
{
  uint64_t block = o->rows[o->n_rows - 1], total = 0;
  for (unsigned s = 0; s < o->n_rows; s++)
    total += (uint64_t)o->entries * ((ROWS_PER_IMAGE * o->rows[s] + block - 1) / block) * block;
  ecc_connector_t *c = open_or_die(ini_for(o, "server", block, total + block, true, "host"));
  for (unsigned s = 0; s < o->n_rows; s++)
    for (unsigned k = 0; k < o->entries; k++) {
      uint64_t n = ROWS_PER_IMAGE * o->rows[s];
      uint8_t *src = malloc(n);
      if (src == NULL)
        die("out of memory");
      for (uint64_t i = 0; i < n; i++)
        src[i] = byte_of(i, k);
      char key[64];
      snprintf(key, sizeof(key), "rows%" PRIu64 "-%u", o->rows[s], k);
      ecc_entry_t e;
      if (ecc_reserve(c, key, n, &e) != ECC_OK || e.state != ECC_ENTRY_RESERVED)
        die("reserve failed");
      ecc_save_reserved_t sr = {e.token, (uint64_t)(uintptr_t)src, n};
      ecc_completion_t done;
      if (ecc_save_reserved(c, &sr, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK)
        die("save failed");
      wait_one(c, &done);
      free(src);
    }
  printf("ready\n");
  fflush(stdout);
  for (;;)
    pause();
}

/* ---- raw UCX: the same bytes as data messages, nothing else ---- */

struct raw {
  struct ecc_log log;
  struct net *net;
  uint8_t *buf;
  uint64_t bytes;
  _Atomic uint64_t got;
  atomic_int inflight;
  atomic_bool keyed; /* client: the server's region key arrived (for gets) */
};

static void raw_sent(void *arg, int status)
{
  struct raw *r = arg;
  if (status != ECC_OK)
    die("a raw send failed");
  atomic_fetch_sub(&r->inflight, 1);
}

/* Its region's base and packed key, for a client's gets. */
static void send_key(struct raw *r, struct net_peer *p)
{
  const void *rkey;
  size_t len;
  uint64_t base;
  static uint8_t msg[8 + 4096];
  if (net_region_key(r->net, &rkey, &len, &base) != ECC_OK || len > sizeof(msg) - 8)
    die("the raw region has no key");
  memcpy(msg, &base, 8);
  memcpy(msg + 8, rkey, len);
  if (net_send(r->net, p, msg, 8 + len) != ECC_OK)
    die("sending the raw region's key failed");
}

/* A request of 8 bytes (the size wanted) makes the raw server push that
 * many bytes back in RAW_CHUNK messages; one of 1 byte asks for its key. */
static void raw_server_msg(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  struct raw *r = user;
  uint64_t want;
  if (len == 1) {
    send_key(r, p);
    return;
  }
  if (len != sizeof(want))
    return;
  memcpy(&want, buf, sizeof(want));
  uint8_t hdr[WIRE_DATA_HEADER_BYTES];
  for (uint64_t off = 0; off < want && off < r->bytes; off += RAW_CHUNK) {
    uint64_t n = want - off < RAW_CHUNK ? want - off : RAW_CHUNK;
    wire_encode_data(hdr, 1, off);
    atomic_fetch_add(&r->inflight, 1);
    if (net_send_data(r->net, p, hdr, sizeof(hdr), r->buf + off, n, raw_sent, r) != ECC_OK)
      die("raw send refused");
  }
}

static void raw_client_data(void *user, struct net_peer *p, const uint8_t *hdr, size_t hlen,
                            const uint8_t *data, size_t len)
{
  (void)p;
  struct raw *r = user;
  struct wire_data d;
  if (wire_decode_data(hdr, hlen, &d, NULL, 0) == ECC_OK && d.offset + len <= r->bytes)
    memcpy(r->buf + d.offset, data, len);
  atomic_fetch_add(&r->got, len);
}

static void raw_client_msg(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  struct raw *r = user;
  uint64_t base;
  if (len <= 8)
    return;
  memcpy(&base, buf, 8);
  if (net_peer_region(r->net, p, buf + 8, len - 8, base) != ECC_OK)
    die("the raw server's key was refused");
  atomic_store(&r->keyed, true);
}

static int raw_open(struct raw *r, const struct opts *o, int server, uint64_t bytes)
{
  char host[64];
  const char *colon = strrchr(o->address, ':');
  if (colon == NULL || (size_t)(colon - o->address) >= sizeof(host))
    die("ADDR:PORT expected");
  memcpy(host, o->address, (size_t)(colon - o->address));
  host[colon - o->address] = '\0';
  log_init(&r->log, NULL);
  r->bytes = bytes;
  r->buf = malloc(bytes);
  if (r->buf == NULL)
    die("out of memory");
  memset(r->buf, 0x5a, bytes);
  struct net_params np = {.server = server,
                          .addr = host,
                          .port = (uint16_t)(atoi(colon + 1) + 1),
                          .transports = "tcp",
                          .region = r->buf,
                          .region_bytes = bytes,
                          .log = &r->log,
                          .cb = {r, NULL, server ? raw_server_msg : raw_client_msg, NULL,
                                 server ? NULL : raw_client_data}};
  char why[256];
  int rc = net_create(&np, &r->net, why, sizeof(why));
  if (rc != ECC_OK)
    fprintf(stderr, "ecc-ucx-bench: raw: %s\n", why);
  return rc;
}

static void run_raw_server(const struct opts *o)
{
  static struct raw r;
  uint64_t most = ROWS_PER_IMAGE * o->rows[o->n_rows - 1];
  if (raw_open(&r, o, 1, most) != ECC_OK)
    exit(1);
  printf("ready\n");
  fflush(stdout);
  for (;;)
    pause();
}

static double median3(const double v[3])
{
  double a = v[0], b = v[1], c = v[2];
  return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* GB/s of raw pushes of `bytes`, median of three. */
static double raw_rate(struct raw *r, uint64_t bytes, unsigned times)
{
  double best[3];
  for (int t = 0; t < 3; t++) {
    uint64_t t0 = ecc_now_ns();
    for (unsigned k = 0; k < times; k++) {
      atomic_store(&r->got, 0);
      if (net_send(r->net, net_server_peer(r->net), &bytes, sizeof(bytes)) != ECC_OK)
        die("raw request failed");
      while (atomic_load(&r->got) < bytes)
        usleep(50);
    }
    best[t] = (double)bytes * times / (double)(ecc_now_ns() - t0);
  }
  return median3(best);
}

static void raw_got(void *arg, int status)
{
  struct raw *r = arg;
  if (status != ECC_OK)
    die("a raw get failed");
  atomic_fetch_sub(&r->inflight, 1);
}

/* GB/s of raw gets of `bytes` from the server's region, RAW_CHUNK each and
 * all in flight at once (the way a client would pull an entry by RMA),
 * median of three. */
static double raw_get_rate(struct raw *r, uint64_t bytes, unsigned times)
{
  struct net_peer *server = net_server_peer(r->net);
  uint8_t ask = 'k';
  if (!atomic_load(&r->keyed) && net_send(r->net, server, &ask, 1) != ECC_OK)
    die("asking for the raw region's key failed");
  while (!atomic_load(&r->keyed))
    usleep(50);
  double best[3];
  for (int t = 0; t < 3; t++) {
    uint64_t t0 = ecc_now_ns();
    for (unsigned k = 0; k < times; k++) {
      for (uint64_t off = 0; off < bytes; off += RAW_CHUNK) {
        uint64_t n = bytes - off < RAW_CHUNK ? bytes - off : RAW_CHUNK;
        atomic_fetch_add(&r->inflight, 1);
        if (net_get(r->net, server, r->buf + off, n, off, raw_got, r) != ECC_OK)
          die("a raw get was refused");
      }
      while (atomic_load(&r->inflight) > 0)
        usleep(50);
    }
    best[t] = (double)bytes * times / (double)(ecc_now_ns() - t0);
  }
  return median3(best);
}

/* ---- the client ---- */

/* Where a pass's loads go: host memory, checked there; device memory
 * (dev), read back into host for the check; or host memory then copied to
 * dev within the timed span (upload). */
struct target {
  uint8_t *host;
  void *dev;
  bool upload;
};

static void check_image(const struct target *t, uint64_t n, unsigned k)
{
  if (t->dev != NULL && !t->upload && gpu_dst_read(t->dev, t->host, n) != 0)
    die("reading the device memory back failed");
  for (uint64_t i = 0; i < n; i++)
    if (t->host[i] != byte_of(i, k))
      die("WRONG BYTES");
}

/* Each image of row size s pulled once: GB/s. The client's copies are
 * removed afterwards, so that the next pass crosses the link again. */
static double pull_pass(ecc_connector_t *c, const struct opts *o, unsigned s,
                        const struct target *t)
{
  uint64_t n = ROWS_PER_IMAGE * o->rows[s], spent = 0;
  uint8_t *into = t->dev != NULL && !t->upload ? t->dev : t->host;
  for (unsigned k = 0; k < o->entries; k++) {
    char key[64];
    snprintf(key, sizeof(key), "rows%" PRIu64 "-%u", o->rows[s], k);
    const char *keys[] = {key};
    ecc_entry_t e;
    uint64_t t0 = ecc_now_ns();
    if (ecc_lookup(c, keys, 1, 1, &e) != ECC_OK || e.state != ECC_ENTRY_READY)
      die("lookup failed");
    ecc_load_pinned_t lp = {k, e.token, (uint64_t)(uintptr_t)into, n};
    ecc_completion_t done;
    if (ecc_load_pinned(c, &lp, 1, NULL) != ECC_OK)
      die("load failed");
    wait_one(c, &done);
    if (t->upload && gpu_dst_upload(t->dev, t->host, n) != 0)
      die("cudaMemcpy to the device failed");
    spent += ecc_now_ns() - t0;
    check_image(t, n, k);
  }
  for (unsigned k = 0; k < o->entries; k++) {
    char key[64];
    snprintf(key, sizeof(key), "rows%" PRIu64 "-%u", o->rows[s], k);
    int rc = ecc_remove(c, key);
    if (rc != ECC_OK && rc != ECC_ERR_RANGE) /* RANGE: already evicted by the next image */
      die("removing the client's copy failed");
  }
  return (double)n * o->entries / (double)spent;
}

/* The first pass touches the client's region pages for the first time (a
 * cost paid once per region): the figure is the better of the next two. */
static double pull_rate(ecc_connector_t *c, const struct opts *o, unsigned s,
                        const struct target *t)
{
  (void)pull_pass(c, o, s, t);
  double a = pull_pass(c, o, s, t), b = pull_pass(c, o, s, t);
  return a > b ? a : b;
}

static void run_client(const struct opts *o)
{
  uint64_t most = ROWS_PER_IMAGE * o->rows[o->n_rows - 1];
  uint64_t block = o->rows[o->n_rows - 1];
  ecc_connector_t *c = open_or_die(ini_for(o, "client", block, most + block, true, "host"));
  /* The same pulls landing in the destination, nothing kept (ucx.cache = false). */
  ecc_connector_t *direct = open_or_die(ini_for(o, "client", block, block, false, "host"));
  static struct raw r;
  if (raw_open(&r, o, 0, most) != ECC_OK)
    exit(1);
  struct target host = {malloc(most), NULL, false};
  if (host.host == NULL)
    die("out of memory");
  /* With a GPU: the pulls into device memory through the CUDA engine, and
   * the host pulls followed by a cudaMemcpy, as a host would do without. */
  void *dev = gpu_dst_alloc(most);
  struct target gpu = {host.host, dev, false}, upload = {host.host, dev, true};
  ecc_connector_t *cuda =
      dev != NULL ? open_or_die(ini_for(o, "client", block, most + block, true, "cuda")) : NULL;
  printf("%-10s %12s %14s %14s %14s %14s", "row bytes", "image bytes", "ecc GB/s", "no-cache GB/s",
         "raw UCX GB/s", "raw get GB/s");
  printf(dev != NULL ? " %14s %16s\n" : "\n", "ecc->GPU GB/s", "host+memcpy GB/s");
  for (unsigned s = 0; s < o->n_rows; s++) {
    double ours = pull_rate(c, o, s, &host);
    double landed = pull_rate(direct, o, s, &host);
    double raw = raw_rate(&r, ROWS_PER_IMAGE * o->rows[s], o->entries);
    double got = raw_get_rate(&r, ROWS_PER_IMAGE * o->rows[s], o->entries);
    printf("%-10" PRIu64 " %12" PRIu64 " %14.3f %14.3f %14.3f %14.3f", o->rows[s],
           ROWS_PER_IMAGE * o->rows[s], ours, landed, raw, got);
    if (dev != NULL)
      printf(" %14.3f %16.3f", pull_rate(cuda, o, s, &gpu), pull_rate(c, o, s, &upload));
    printf("\n");
  }
  net_destroy(r.net);
  if (cuda != NULL)
    ecc_close(cuda);
  gpu_dst_free(dev);
  free(host.host);
  ecc_close(direct);
  ecc_close(c);
}

static void parse(int argc, char **argv, struct opts *o)
{
  *o = (struct opts){
      .plugin = ECC_UCX_PLUGIN_PATH, .rows = {3072, 65536, 2097152}, .n_rows = 3, .entries = 4};
  if (argc < 3)
    die("usage: ecc-ucx-bench server|client|raw-server ADDR:PORT [--rows LIST] [--entries N] "
        "[--plugin PATH] [--region-dir DIR]");
  o->role = argv[1];
  o->address = argv[2];
  for (int i = 3; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--entries") == 0)
      o->entries = (unsigned)atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--plugin") == 0)
      o->plugin = argv[i + 1];
    else if (strcmp(argv[i], "--region-dir") == 0)
      o->region_folder = argv[i + 1];
    else if (strcmp(argv[i], "--rows") == 0) {
      o->n_rows = 0;
      for (char *t = strtok(argv[i + 1], ","); t != NULL && o->n_rows < MAX_SIZES;
           t = strtok(NULL, ","))
        o->rows[o->n_rows++] = strtoull(t, NULL, 10);
    } else {
      die("unknown option");
    }
  }
  if (o->n_rows == 0 || o->entries == 0)
    die("--rows and --entries need values");
}

int main(int argc, char **argv)
{
  struct opts o;
  parse(argc, argv, &o);
  if (strcmp(o.role, "server") == 0)
    run_server(&o);
  else if (strcmp(o.role, "raw-server") == 0)
    run_raw_server(&o);
  else if (strcmp(o.role, "client") == 0)
    run_client(&o);
  else
    die("the role is server, client or raw-server");
  return 0;
}
