/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.c - the consumer host's side (client.h): the handshake, lookups
 * waited for with a deadline, the remote pins this process holds or
 * borrowed from its group, pulls (data messages into a local reservation
 * and the destination at once, into a reservation a held GPU copy reads,
 * or into the destination alone), and the completions only the client can
 * report.
 */
#include "plugins/ucx/client.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errtext.h"
#include "common/lock.h"
#include "core/conn.h"
#include "plugins/ucx/net.h"
#include "plugins/ucx/wire.h"

/* A server pin this process holds, or one of its group it borrowed for a
 * load (a token another process looked up): what the server said of it. */
struct rpin {
  uint64_t token;        /* the one handed out: the server's, mixed with the server's id */
  uint64_t server_token; /* the server's, which a restarted server gives again */
  bool borrowed;         /* another process's: used once here, never released at close */
  uint64_t nbytes;
  uint32_t left; /* releases due */
  uint32_t n_runs;
  struct wire_run runs[WIRE_MAX_RUNS];
  char key[ECC_KEY_MAX + 1];
};

/* One entry being pulled: its data messages, then its local load. Whoever
 * takes it off the list (under lock) finishes it. */
struct pull {
  struct ucx_client *cl;
  struct pull *next;
  uint64_t req_id; /* the PULL's, which its data messages carry */
  uint64_t transfer_id, dst, dst_capacity;
  uint64_t local_token; /* the local reservation the bytes go to */
  uint64_t remote_token;
  uint64_t nbytes;
  uint32_t n_local;
  ecc_extent_v1_t local[ECC_ENTRY_MAX_EXTENTS]; /* that reservation's blocks */
  bool direct;    /* the bytes land in dst itself (ucx.cache = false) */
  uint32_t *hold; /* CUDA engine: the queued copy of the reservation waits for it; NULL: the host
                   * engine, whose pulls with the cache write each chunk to dst too */
  uint64_t chunks, chunks_got;
  uint8_t *got; /* one byte per chunk: arrived */
  uint64_t started_ns;
  uint64_t progress_ns; /* when it started, or a chunk last arrived */
  int refused;          /* the server's code when it refused the pull; 0: none */
  char key[ECC_KEY_MAX + 1];
};

/* A LOOKUP waiting for its FOUND, or a DESCRIBE for its DESCRIBED. */
struct waiter {
  struct waiter *next;
  uint64_t req_id;
  bool done;
  int status;
  uint32_t n;
  struct wire_found_entry *entries; /* n of them, copied from the reply */
  struct wire_found_entry described;
  char key[ECC_KEY_MAX + 1]; /* DESCRIBED's */
};

enum { LINK_CONNECTING, LINK_UP, LINK_DOWN };

struct ucx_client {
  struct conn *conn;
  struct conn_region_view region; /* the local cache's, where pulls land */
  struct ecc_log *log;
  struct ucx_config cfg;
  /* Calls read net; a reconnect, which replaces it, writes, and holds it
   * while it ends the old layer's progress thread. That thread never waits
   * for it: callbacks of the UCX layer take neither side, and the calls
   * that take it are refused there (on_progress_thread). */
  struct ecc_rwlock net_lock;
  struct net *net;
  struct net_peer *peer;
  uint64_t client_id;
  uint64_t group_id; /* this host's processes on the same region */
  atomic_uint_fast64_t seq;
  struct ecc_mutex lock; /* everything below */
  pthread_cond_t cond;
  int link; /* LINK_* */
  int refused_code;
  char link_why[256];
  uint64_t server_id;
  uint64_t next_req;
  struct waiter *waiters;
  struct rpin *pins;
  size_t n_pins, cap_pins;
  struct pull *pulls;
  size_t n_pulls;
  ecc_completion_v1_t *done; /* completions the client makes itself, for poll */
  size_t n_done, cap_done;
};

static uint64_t deadline_after(uint32_t ms)
{
  return ecc_now_ns() + (uint64_t)ms * 1000000ull;
}

static void wait_until(struct ucx_client *cl, uint64_t deadline_ns)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = ecc_now_ns(), left = deadline_ns > now ? deadline_ns - now : 0;
  if (left > 20000000ull)
    left = 20000000ull; /* wake now and then to look at the clock again */
  uint64_t ns = (uint64_t)ts.tv_nsec + left;
  ts.tv_sec += (time_t)(ns / 1000000000ull);
  ts.tv_nsec = (long)(ns % 1000000000ull);
  lock_cond_timedwait(&cl->cond, &cl->lock, &ts);
}

static void on_data(void *user, struct net_peer *peer, const uint8_t *hdr, size_t hlen,
                    const uint8_t *data, size_t len);
static void fail_all_pulls(struct ucx_client *cl, const char *why);
static void took_pulled(struct ucx_client *cl, const struct wire_pulled *m);
static void on_tick(void *user);

/* ---- messages from the server ------------------------------------------ */

static void took_welcome(struct ucx_client *cl, const struct wire_welcome *w)
{
  int rc = w->block_size == cl->region.block_size
               ? net_peer_region(cl->net, cl->peer, w->rkey, w->rkey_len, w->region_base)
               : ECC_ERR_INCOMPATIBLE;
  lock_mutex_lock(&cl->lock);
  if (rc == ECC_OK) {
    cl->link = LINK_UP;
    cl->server_id = w->server_id;
  } else {
    cl->link = LINK_DOWN;
    cl->refused_code = rc;
    snprintf(cl->link_why, sizeof(cl->link_why),
             "the server's region is not usable (block size %" PRIu64 ")", w->block_size);
  }
  pthread_cond_broadcast(&cl->cond);
  lock_mutex_unlock(&cl->lock);
}

static void took_refuse(struct ucx_client *cl, const struct wire_refuse *r)
{
  char text[sizeof(cl->link_why)];
  snprintf(text, sizeof(text), "refused by the server: %.*s", (int)r->reason_len, r->reason);
  lock_mutex_lock(&cl->lock);
  cl->link = LINK_DOWN;
  cl->refused_code = r->code;
  snprintf(cl->link_why, sizeof(cl->link_why), "%s", text);
  pthread_cond_broadcast(&cl->cond);
  lock_mutex_unlock(&cl->lock);
  log_msg(cl->log, ECC_LOG_ERROR, "ucx: %s", text);
}

/* The call waiting for the answer to req_id, or NULL (lock held). */
static struct waiter *waiter_of(struct ucx_client *cl, uint64_t req_id)
{
  struct waiter *w = cl->waiters;
  while (w != NULL && w->req_id != req_id)
    w = w->next;
  return w;
}

static void took_found(struct ucx_client *cl, struct net_peer *peer, const struct wire_msg *m)
{
  const struct wire_found *f = &m->u.found;
  struct wire_found_entry *copy = f->n > 0 ? calloc(f->n, sizeof(*copy)) : NULL;
  for (uint32_t i = 0; copy != NULL && i < f->n; i++)
    wire_found_entry(m, i, &copy[i]);
  lock_mutex_lock(&cl->lock);
  struct waiter *w = waiter_of(cl, f->req_id);
  if (w != NULL && !w->done) {
    w->done = true;
    w->status = f->n > 0 && copy == NULL ? ECC_ERR_NOMEM : f->status;
    w->n = copy != NULL ? f->n : 0;
    w->entries = copy;
    copy = NULL;
    pthread_cond_broadcast(&cl->cond);
  }
  lock_mutex_unlock(&cl->lock);
  /* An answer nobody waits for any more (its deadline passed): the pins it
   * took are given back at once. */
  if (copy != NULL) {
    uint64_t tokens[WIRE_MAX_KEYS];
    uint32_t k = 0;
    for (uint32_t i = 0; i < f->n; i++)
      if (copy[i].found)
        tokens[k++] = copy[i].token;
    uint8_t buf[WIRE_HEADER_BYTES + 8 + 8 * WIRE_MAX_KEYS];
    size_t len =
        k > 0 ? wire_encode_release(buf, sizeof(buf), atomic_fetch_add(&cl->seq, 1), tokens, k) : 0;
    if (len > 0)
      net_send(cl->net, peer, buf, len);
    free(copy);
  }
}

static void took_described(struct ucx_client *cl, const struct wire_described *d)
{
  lock_mutex_lock(&cl->lock);
  struct waiter *w = waiter_of(cl, d->req_id);
  if (w != NULL && !w->done) {
    w->done = true;
    w->status = d->status;
    w->described = d->entry;
    if (d->key.len > 0)
      memcpy(w->key, d->key.key, d->key.len);
    w->key[d->key.len] = '\0';
    pthread_cond_broadcast(&cl->cond);
  }
  lock_mutex_unlock(&cl->lock);
}

static void on_message(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  struct ucx_client *cl = user;
  struct wire_msg m;
  char why[256];
  if (wire_decode(buf, len, &m, why, sizeof(why)) != ECC_OK) {
    log_msg(cl->log, ECC_LOG_WARN, "ucx: a message from the server dropped: %s", why);
    return;
  }
  switch (m.h.type) {
  case WIRE_WELCOME:
    took_welcome(cl, &m.u.welcome);
    break;
  case WIRE_REFUSE:
    took_refuse(cl, &m.u.refuse);
    break;
  case WIRE_FOUND:
    took_found(cl, p, &m);
    break;
  case WIRE_PULLED:
    took_pulled(cl, &m.u.pulled);
    break;
  case WIRE_DESCRIBED:
    took_described(cl, &m.u.described);
    break;
  case WIRE_PONG:
    break;
  default:
    log_msg(cl->log, ECC_LOG_WARN, "ucx: the server sent %s, which only a client sends: ignored",
            wire_type_name(m.h.type));
  }
}

static void on_peer_error(void *user, struct net_peer *p, int code, const char *why)
{
  (void)p;
  (void)code;
  struct ucx_client *cl = user;
  char text[sizeof(cl->link_why)];
  snprintf(text, sizeof(text), "the server at %s port %u failed: %s", cl->cfg.addr, cl->cfg.port,
           why);
  lock_mutex_lock(&cl->lock);
  cl->link = LINK_DOWN;
  cl->refused_code = ECC_ERR_TRANSFER;
  snprintf(cl->link_why, sizeof(cl->link_why), "%s", text);
  pthread_cond_broadcast(&cl->cond);
  lock_mutex_unlock(&cl->lock);
  log_msg(cl->log, ECC_LOG_ERROR, "ucx: %s", text);
  fail_all_pulls(cl, "the link to the server failed");
}

/* ---- the link ----------------------------------------------------------- */

/* Lookup, load_pinned and unpin wait for the network: an answer, the
 * description of another process's token, or a reconnect, which ends the
 * old layer's progress thread holding net_lock. Made on a progress thread
 * of this plugin (the host's log callback runs there for what UCX's
 * callbacks say), the answer could never come: it arrives through this
 * client's own progress thread, and a server of this process answers
 * through its own, each stopped in this call. Refused at once, before any
 * lock; poll, stats and the local calls need no network and go on. */
static bool on_progress_thread(struct ucx_client *cl, const char *call, int *rc)
{
  if (!net_on_a_progress_thread())
    return false;
  *rc = log_fail(cl->log, ECC_ERR_BUSY,
                 "%s: called on a progress thread of the ucx plugin (from the host's log "
                 "callback, for example), which is the thread its answer would come through; "
                 "call %s from another thread",
                 call, call);
  return true;
}

/* The link's failure as this call's error (lock not held). */
static int link_error(struct ucx_client *cl)
{
  char why[sizeof(cl->link_why)];
  lock_mutex_lock(&cl->lock);
  int code = cl->refused_code != 0 ? cl->refused_code : ECC_ERR_TRANSFER;
  snprintf(why, sizeof(why), "%s", cl->link_why[0] ? cl->link_why : "no link to the server");
  lock_mutex_unlock(&cl->lock);
  return log_fail(cl->log, code, "ucx: %s", why);
}

static int send_to_server(struct ucx_client *cl, const uint8_t *buf, size_t len)
{
  if (len == 0)
    return log_fail(cl->log, ECC_ERR_INVALID, "ucx: a message could not be encoded");
  return net_send(cl->net, cl->peer, buf, len);
}

/* HELLO, and its answer within wait_ms (what is left of shown_ms, which
 * the error names). */
static int handshake(struct ucx_client *cl, uint32_t wait_ms, uint32_t shown_ms, char *err,
                     size_t err_cap)
{
  struct wire_hello h = {.layout_hash = wire_layout_hash(cl->region.block_size),
                         .client_id = cl->client_id,
                         .tp_rank = conn_config(cl->conn)->tp_rank,
                         .group_id = cl->group_id};
  uint8_t buf[WIRE_HEADER_BYTES + 32];
  int rc = send_to_server(cl, buf, wire_encode_hello(buf, sizeof(buf), 0, &h));
  _Static_assert(sizeof(buf) >= WIRE_HEADER_BYTES + 28, "a HELLO fits");
  uint64_t deadline = deadline_after(wait_ms);
  lock_mutex_lock(&cl->lock);
  while (rc == ECC_OK && cl->link == LINK_CONNECTING && ecc_now_ns() < deadline)
    wait_until(cl, deadline);
  if (rc == ECC_OK && cl->link == LINK_CONNECTING) {
    cl->link = LINK_DOWN;
    snprintf(cl->link_why, sizeof(cl->link_why),
             "no answer to the handshake from %s port %u within %u ms", cl->cfg.addr, cl->cfg.port,
             shown_ms);
  }
  if (rc == ECC_OK && cl->link != LINK_UP)
    rc = cl->refused_code != 0 ? cl->refused_code : ECC_ERR_TRANSFER;
  if (rc != ECC_OK)
    errtext_fail(err, err_cap, rc, "ucx: %s", cl->link_why[0] ? cl->link_why : "cannot send");
  lock_mutex_unlock(&cl->lock);
  return rc;
}

static uint64_t random_id(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
  x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

static void fnv_mix(uint64_t *h, const void *p, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    *h ^= ((const uint8_t *)p)[i];
    *h *= 0x100000001b3ull;
  }
}

/* The processes of this host that share the region make one group (the
 * server lets them use each other's pins): this host's name and the
 * region's identity (the file, and the moment and process that built it). */
static uint64_t group_of(const struct conn_region_view *region)
{
  char host[256] = "";
  uint64_t h = 0xcbf29ce484222325ull;
  (void)gethostname(host, sizeof(host) - 1);
  fnv_mix(&h, host, strlen(host));
  fnv_mix(&h, &region->identity, sizeof(region->identity));
  return h != 0 ? h : 1;
}

/* A new link; the handshake may take wait_ms. */
static int connect_net(struct ucx_client *cl, uint32_t wait_ms, char *err, size_t err_cap)
{
  struct net_params np = {.server = 0,
                          .addr = cl->cfg.addr,
                          .port = cl->cfg.port,
                          .transports = cl->cfg.transports,
                          .net_devices = cl->cfg.net_devices[0] ? cl->cfg.net_devices : NULL,
                          .preface_ms = wait_ms,
                          .secret = cl->cfg.has_secret ? cl->cfg.secret : NULL,
                          .region = cl->region.blocks,
                          .region_bytes = cl->region.block_size * cl->region.num_blocks,
                          .log = cl->log,
                          .cb = {cl, NULL, on_message, on_peer_error, on_data, on_tick}};
  /* The preface and the handshake share the wait. */
  uint64_t t0 = ecc_now_ns();
  int rc = net_create(&np, &cl->net, err, err_cap);
  if (rc == ECC_OK) {
    uint64_t spent_ms = (ecc_now_ns() - t0) / 1000000ull;
    cl->peer = net_server_peer(cl->net);
    rc =
        handshake(cl, spent_ms < wait_ms ? wait_ms - (uint32_t)spent_ms : 1, wait_ms, err, err_cap);
  }
  return rc;
}

/* After the link failed and nothing of it is in flight: a new one, and the
 * pins of the old one forgotten (the server drops them itself, or it is a
 * new server that never had them). net_lock is held for writing: the old
 * layer's callbacks read cl->net unlocked, so it is replaced only after
 * their thread has ended, and that thread never waits for net_lock (the
 * calls that take it are refused on a progress thread). */
static int reconnect(struct ucx_client *cl)
{
  uint64_t old_server = cl->server_id;
  net_destroy_keeping_log(cl->net);
  cl->net = NULL;
  cl->peer = NULL;
  lock_mutex_lock(&cl->lock);
  size_t dropped = cl->n_pins;
  cl->n_pins = 0;
  cl->link = LINK_CONNECTING;
  cl->refused_code = 0;
  cl->link_why[0] = '\0';
  lock_mutex_unlock(&cl->lock);
  char why[256] = "";
  /* A call is bounded by the deadline, the first connect only by its own. */
  int rc = connect_net(cl, cl->cfg.deadline_ms, why, sizeof(why));
  if (rc != ECC_OK) {
    lock_mutex_lock(&cl->lock);
    cl->link = LINK_DOWN;
    cl->refused_code = rc;
    snprintf(cl->link_why, sizeof(cl->link_why), "%s", why);
    lock_mutex_unlock(&cl->lock);
    return log_fail(cl->log, rc, "%s", why);
  }
  log_msg(cl->log, ECC_LOG_INFO,
          "ucx: reconnected to %s port %u%s; %zu pins of the old link forgotten", cl->cfg.addr,
          cl->cfg.port, cl->server_id != old_server ? " (a restarted server)" : "", dropped);
  return ECC_OK;
}

/* The link, made again if it failed and nothing of it is in flight. */
static int ensure_link(struct ucx_client *cl)
{
  lock_mutex_lock(&cl->lock);
  bool up = cl->link == LINK_UP, busy = cl->n_pulls > 0 || cl->waiters != NULL;
  lock_mutex_unlock(&cl->lock);
  if (up)
    return ECC_OK;
  if (busy)
    return link_error(cl);
  lock_rw_wrlock(&cl->net_lock);
  lock_mutex_lock(&cl->lock);
  bool still_down = cl->link != LINK_UP && cl->n_pulls == 0 && cl->waiters == NULL;
  lock_mutex_unlock(&cl->lock);
  int rc = still_down ? reconnect(cl) : ECC_OK;
  lock_rw_unlock(&cl->net_lock);
  return rc;
}

/* The client's locks, known to the connector's log (lock.h): the host's
 * callback runs outside them, and may call the client again. */
static int make_locks(struct ucx_client *cl, char *err, size_t err_cap)
{
  int rc = lock_mutex_init(&cl->lock, cl->log);
  if (rc == 0 && (rc = lock_rw_init(&cl->net_lock, cl->log)) != 0)
    lock_mutex_destroy(&cl->lock);
  if (rc == 0 && (rc = pthread_cond_init(&cl->cond, NULL)) != 0) {
    lock_rw_destroy(&cl->net_lock);
    lock_mutex_destroy(&cl->lock);
  }
  if (rc != 0)
    return errtext_fail(err, err_cap, ECC_ERR_SYSTEM, "ucx: the client's locks cannot be made");
  return ECC_OK;
}

static void free_locks(struct ucx_client *cl)
{
  lock_rw_destroy(&cl->net_lock);
  pthread_cond_destroy(&cl->cond);
  lock_mutex_destroy(&cl->lock);
}

int ucx_client_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_client **out)
{
  *out = NULL;
  if (conn_engine_is_cuda(conn) && !cfg->cache)
    return errtext_fail(err, err_cap, ECC_ERR_CONFIG,
                        "config: engine.type = cuda with ucx.cache = false: without the cache the "
                        "bytes are written where they land by the CPU, which cannot write GPU "
                        "memory; keep ucx.cache = true (the GPU copies from the local region)");
  struct ucx_client *cl = calloc(1, sizeof(*cl));
  if (cl == NULL)
    return errtext_fail(err, err_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  cl->conn = conn;
  cl->log = conn_log(conn);
  conn_region(conn, &cl->region);
  cl->cfg = *cfg;
  cl->client_id = random_id();
  cl->group_id = group_of(&cl->region);
  int rc = make_locks(cl, err, err_cap);
  if (rc != ECC_OK) {
    free(cl);
    return rc;
  }
  rc = connect_net(cl, cfg->connect_ms, err, err_cap);
  if (rc != ECC_OK) {
    net_destroy(cl->net);
    free_locks(cl);
    free(cl);
    return rc;
  }
  log_msg(cl->log, ECC_LOG_INFO, "ucx: connected to %s port %u (server %016" PRIx64 ")", cfg->addr,
          cfg->port, cl->server_id);
  *out = cl;
  return ECC_OK;
}

/* ---- remote pins (lock held) ------------------------------------------------ */

static struct rpin *pin_find(struct ucx_client *cl, uint64_t token)
{
  for (size_t i = 0; i < cl->n_pins; i++)
    if (cl->pins[i].token == token)
      return &cl->pins[i];
  return NULL;
}

/* The token for the server's pin f, taken for `ranks` releases; 0 when out
 * of memory. */
static uint64_t pin_add(struct ucx_client *cl, const struct wire_found_entry *f, const char *key,
                        uint32_t ranks)
{
  for (size_t i = 0; i < cl->n_pins; i++)
    if (cl->pins[i].server_token == f->token && !cl->pins[i].borrowed) {
      cl->pins[i].left += ranks;
      return cl->pins[i].token;
    }
  struct rpin *p;
  if (cl->n_pins == cl->cap_pins) {
    size_t cap = cl->cap_pins ? 2 * cl->cap_pins : 64;
    struct rpin *np = realloc(cl->pins, cap * sizeof(*np));
    if (np == NULL)
      return 0;
    cl->pins = np;
    cl->cap_pins = cap;
  }
  /* Another process of the group turns the token back into the server's
   * with the same server id; after a restart the id differs, and an old
   * token names no pin. */
  uint64_t token = f->token ^ cl->server_id;
  if (token == 0)
    return 0;
  p = &cl->pins[cl->n_pins++];
  memset(p, 0, sizeof(*p));
  p->token = token;
  p->server_token = f->token;
  p->nbytes = f->nbytes;
  p->left = ranks;
  p->n_runs = f->n_runs;
  memcpy(p->runs, f->runs, sizeof(p->runs));
  snprintf(p->key, sizeof(p->key), "%s", key);
  return p->token;
}

/* One release of the pin behind `token`: its server token, or 0 if this
 * process holds none. */
static uint64_t pin_take_one(struct ucx_client *cl, uint64_t token)
{
  struct rpin *p = pin_find(cl, token);
  if (p == NULL)
    return 0;
  uint64_t server_token = p->server_token;
  if (--p->left == 0)
    *p = cl->pins[--cl->n_pins];
  return server_token;
}

static void release_remote(struct ucx_client *cl, const uint64_t *tokens, uint32_t n)
{
  uint8_t buf[WIRE_HEADER_BYTES + 8 + 8 * WIRE_MAX_KEYS];
  if (cl->net == NULL)
    return; /* closed: the server drops a gone client's pins */
  for (uint32_t done = 0; done < n;) {
    uint32_t k = n - done < WIRE_MAX_KEYS ? n - done : WIRE_MAX_KEYS;
    size_t len =
        wire_encode_release(buf, sizeof(buf), atomic_fetch_add(&cl->seq, 1), tokens + done, k);
    if (len == 0 || net_send(cl->net, cl->peer, buf, len) != ECC_OK)
      log_msg(cl->log, ECC_LOG_WARN,
              "ucx: %u releases not sent (the server drops a gone "
              "client's pins itself)",
              k);
    done += k;
  }
}

/* ---- lookup ------------------------------------------------------------- */

static int wait_found(struct ucx_client *cl, struct waiter *w)
{
  uint64_t deadline = deadline_after(cl->cfg.deadline_ms);
  while (!w->done && cl->link == LINK_UP && ecc_now_ns() < deadline)
    wait_until(cl, deadline);
  struct waiter **at = &cl->waiters;
  while (*at != w)
    at = &(*at)->next;
  *at = w->next;
  return w->done ? w->status : ECC_ERR_TRANSFER;
}

/* Lists w for the answer to a new request id: ECC_OK, or ECC_ERR_TRANSFER
 * when the link is down (w is listed all the same; wait_found unlists it). */
static int waiter_start(struct ucx_client *cl, struct waiter *w)
{
  lock_mutex_lock(&cl->lock);
  int rc = cl->link == LINK_UP ? ECC_OK : ECC_ERR_TRANSFER;
  w->req_id = ++cl->next_req;
  w->next = cl->waiters;
  cl->waiters = w;
  lock_mutex_unlock(&cl->lock);
  return rc;
}

/* A server that did not answer `what` within the deadline is stopped or
 * cut off: given up now, not after TCP's minutes (lock not held). */
static int give_up(struct ucx_client *cl, const char *what)
{
  char why[96];
  snprintf(why, sizeof(why), "no answer to a %s within %u ms", what, cl->cfg.deadline_ms);
  net_peer_fail(cl->net, cl->peer, why);
  return link_error(cl);
}

/* One LOOKUP of at most WIRE_MAX_KEYS keys. */
static int lookup_chunk(struct ucx_client *cl, const char *const *keys, uint32_t n, uint32_t ranks,
                        ecc_entry_v1_t *out)
{
  static const size_t cap = WIRE_HEADER_BYTES + 16 + WIRE_MAX_KEYS * (2 + ECC_KEY_MAX);
  uint8_t *buf = malloc(cap);
  if (buf == NULL)
    return log_fail(cl->log, ECC_ERR_NOMEM, "ucx: out of memory");
  struct waiter w = {0};
  int rc = waiter_start(cl, &w);
  size_t len =
      wire_encode_lookup(buf, cap, atomic_fetch_add(&cl->seq, 1), w.req_id, ranks, keys, n);
  if (rc == ECC_OK)
    rc = send_to_server(cl, buf, len);
  free(buf);
  lock_mutex_lock(&cl->lock);
  int got = wait_found(cl, &w);
  rc = rc != ECC_OK ? rc : got;
  for (uint32_t i = 0; rc == ECC_OK && i < n; i++) {
    memset(&out[i], 0, sizeof(out[i]));
    const struct wire_found_entry *f = i < w.n ? &w.entries[i] : NULL;
    if (f == NULL || !f->found)
      continue;
    uint64_t token = pin_add(cl, f, keys[i], ranks);
    if (token == 0) {
      rc = ECC_ERR_NOMEM;
      break;
    }
    out[i].state = ECC_ENTRY_READY;
    out[i].token = token;
    out[i].nbytes = f->nbytes;
    out[i].n_extents = f->n_runs;
    for (uint32_t r = 0; r < f->n_runs && r < ECC_ENTRY_MAX_EXTENTS; r++)
      out[i].extents[r] = (ecc_extent_v1_t){f->runs[r].first, f->runs[r].count};
  }
  int link = cl->link;
  bool timed_out = !w.done && link == LINK_UP;
  lock_mutex_unlock(&cl->lock);
  free(w.entries);
  if (timed_out)
    return give_up(cl, "lookup");
  if (rc != ECC_OK && link != LINK_UP)
    return link_error(cl);
  if (rc != ECC_OK && got == ECC_ERR_TRANSFER)
    return link_error(cl);
  if (rc == ECC_ERR_BUSY)
    return log_fail(cl->log, rc,
                    "ucx: lookup of %u keys: the server refused it (ECC_ERR_BUSY): this client "
                    "holds as many pins as the server allows (its ucx.client_max_pins), or the "
                    "server's directory has no pin slot left; load or unpin, then retry",
                    n);
  if (rc != ECC_OK)
    return log_fail(cl->log, rc, "ucx: lookup of %u keys: the server refused it", n);
  return ECC_OK;
}

int ucx_client_lookup(struct ucx_client *cl, const char *const *keys, size_t n, uint32_t ranks,
                      ecc_entry_v1_t *out)
{
  int rc;
  if (on_progress_thread(cl, "lookup", &rc))
    return rc;
  if (n > 0 && (keys == NULL || out == NULL))
    return log_fail(cl->log, ECC_ERR_INVALID, "lookup: %s is NULL", keys == NULL ? "keys" : "out");
  if (ranks == 0)
    return log_fail(cl->log, ECC_ERR_INVALID, "lookup: ranks is 0 (a pin needs one release)");
  if (ranks > ECC_RANKS_MAX)
    return log_fail(cl->log, ECC_ERR_INVALID, "lookup: ranks %u is above ECC_RANKS_MAX (%u)", ranks,
                    (unsigned)ECC_RANKS_MAX);
  for (size_t i = 0; i < n; i++) {
    size_t len = keys[i] != NULL ? strnlen(keys[i], ECC_KEY_MAX + 1) : 0;
    if (len == 0 || len > ECC_KEY_MAX)
      return log_fail(cl->log, ECC_ERR_INVALID, "lookup: key %zu is %s", i,
                      keys[i] == NULL ? "NULL"
                      : len == 0      ? "empty"
                                      : "longer than 127 bytes");
  }
  rc = ensure_link(cl);
  if (rc != ECC_OK)
    return rc;
  lock_rw_rdlock(&cl->net_lock);
  size_t done = 0;
  while (done < n && rc == ECC_OK) {
    uint32_t k = (uint32_t)(n - done < WIRE_MAX_KEYS ? n - done : WIRE_MAX_KEYS);
    rc = lookup_chunk(cl, keys + done, k, ranks, out + done);
    if (rc == ECC_OK)
      done += k;
  }
  /* A refused call keeps no pin: those of the chunks answered before go back. */
  for (size_t i = 0; rc != ECC_OK && i < done; i++)
    for (uint32_t r = 0; out[i].state == ECC_ENTRY_READY && r < ranks; r++) {
      lock_mutex_lock(&cl->lock);
      uint64_t server_token = pin_take_one(cl, out[i].token);
      lock_mutex_unlock(&cl->lock);
      if (server_token != 0)
        release_remote(cl, &server_token, 1);
    }
  lock_rw_unlock(&cl->net_lock);
  return rc;
}

/* ---- tokens of other processes of the group -------------------------------- */

/* Asks the server what the pin behind a token this process never received
 * is; with ECC_OK it is added as borrowed, for one release (lock not held,
 * net_lock held for reading). ECC_ERR_CLOSED: no pin of the group. */
static int describe(struct ucx_client *cl, uint64_t token)
{
  struct waiter w = {0};
  int rc = waiter_start(cl, &w);
  lock_mutex_lock(&cl->lock);
  uint64_t server_token = token ^ cl->server_id;
  lock_mutex_unlock(&cl->lock);
  uint8_t buf[WIRE_HEADER_BYTES + 16];
  if (rc == ECC_OK)
    rc = send_to_server(cl, buf,
                        wire_encode_describe(buf, sizeof(buf), atomic_fetch_add(&cl->seq, 1),
                                             w.req_id, server_token));
  lock_mutex_lock(&cl->lock);
  int got = wait_found(cl, &w);
  rc = rc != ECC_OK ? rc : got;
  if (rc == ECC_OK && w.described.token != server_token)
    rc = ECC_ERR_CLOSED; /* not the pin asked for: never used as if it were */
  struct rpin *p = NULL;
  if (rc == ECC_OK && pin_add(cl, &w.described, w.key, 1) == token) {
    p = pin_find(cl, token);
    p->borrowed = true;
  } else if (rc == ECC_OK) {
    rc = ECC_ERR_NOMEM;
  }
  bool timed_out = !w.done && cl->link == LINK_UP;
  lock_mutex_unlock(&cl->lock);
  return timed_out ? give_up(cl, "describe") : rc;
}

/* Borrowed pins of this call given up again: the call was refused. */
static void forget_borrowed(struct ucx_client *cl, const uint64_t *tokens, size_t n)
{
  lock_mutex_lock(&cl->lock);
  for (size_t i = 0; i < n; i++) {
    struct rpin *p = pin_find(cl, tokens[i]);
    if (p != NULL && p->borrowed)
      *p = cl->pins[--cl->n_pins];
  }
  lock_mutex_unlock(&cl->lock);
}

/* Every token of e[] this process holds no pin for is described (a token
 * handed from another process of the group); those the server knows are
 * borrowed. *n_borrowed of them are listed in borrowed[]. Unknown tokens
 * are left for the caller's checks to refuse by name. */
static int borrow_unknown(struct ucx_client *cl, const uint64_t *tokens, size_t n,
                          uint64_t *borrowed, size_t *n_borrowed)
{
  *n_borrowed = 0;
  for (size_t i = 0; i < n; i++) {
    lock_mutex_lock(&cl->lock);
    bool known = tokens[i] == 0 || pin_find(cl, tokens[i]) != NULL;
    lock_mutex_unlock(&cl->lock);
    if (known)
      continue;
    int rc = describe(cl, tokens[i]);
    if (rc == ECC_OK)
      borrowed[(*n_borrowed)++] = tokens[i];
    else if (rc != ECC_ERR_CLOSED)
      return rc;
  }
  return ECC_OK;
}

int ucx_client_unpin(struct ucx_client *cl, uint64_t token)
{
  int rc;
  if (on_progress_thread(cl, "unpin", &rc))
    return rc;
  rc = ensure_link(cl);
  if (rc != ECC_OK)
    return rc;
  uint64_t borrowed;
  size_t n_borrowed;
  lock_rw_rdlock(&cl->net_lock);
  rc = borrow_unknown(cl, &token, 1, &borrowed, &n_borrowed);
  lock_rw_unlock(&cl->net_lock);
  if (rc != ECC_OK)
    return rc;
  lock_mutex_lock(&cl->lock);
  uint64_t server_token = pin_take_one(cl, token);
  lock_mutex_unlock(&cl->lock);
  if (server_token == 0)
    return log_fail(cl->log, ECC_ERR_CLOSED,
                    "unpin: token 0x%" PRIx64 " names no pin of this "
                    "process",
                    token);
  lock_rw_rdlock(&cl->net_lock);
  release_remote(cl, &server_token, 1);
  lock_rw_unlock(&cl->net_lock);
  return ECC_OK;
}

/* ---- pulls ---------------------------------------------------------------- */

/* A completion only the client can report: a pull that failed (why says
 * what), or one that landed in its destination directly. */
static void queue_done(struct ucx_client *cl, struct pull *p, const char *why)
{
  int status = why == NULL ? ECC_OK : p->refused == ECC_ERR_BUSY ? ECC_ERR_BUSY : ECC_ERR_TRANSFER;
  if (why != NULL)
    log_msg(cl->log, ECC_LOG_ERROR, "ucx: load of %s (transfer %" PRIu64 ") failed: %s", p->key,
            p->transfer_id, why);
  uint64_t elapsed = ecc_now_ns() - p->started_ns;
  conn_count_load(cl->conn, p->nbytes, elapsed, status);
  lock_mutex_lock(&cl->lock);
  if (cl->n_done == cl->cap_done) {
    size_t cap = cl->cap_done ? 2 * cl->cap_done : 16;
    ecc_completion_v1_t *d = realloc(cl->done, cap * sizeof(*d));
    if (d != NULL) {
      cl->done = d;
      cl->cap_done = cap;
    }
  }
  if (cl->n_done < cl->cap_done)
    cl->done[cl->n_done++] = (ecc_completion_v1_t){.direction = ECC_DIR_LOAD,
                                                   .status = status,
                                                   .transfer_id = p->transfer_id,
                                                   .nbytes = status == ECC_OK ? p->nbytes : 0,
                                                   .elapsed_ns = elapsed};
  lock_mutex_unlock(&cl->lock);
}

/* The local copy of a pulled entry: published, pinned, loaded. */
static int load_local(struct ucx_client *cl, struct pull *p, bool published, void *stream)
{
  struct conn *c = cl->conn;
  int rc = published ? ECC_OK : conn_publish_written(c, p->local_token);
  ecc_entry_v1_t e;
  const char *key = p->key;
  if (rc == ECC_OK)
    rc = conn_lookup(c, &key, 1, 1, &e);
  if (rc == ECC_OK && e.state != ECC_ENTRY_READY)
    rc = ECC_ERR_BUSY; /* evicted between the two calls */
  if (rc != ECC_OK)
    return rc;
  ecc_load_pinned_v1_t lp = {p->transfer_id, e.token, p->dst, p->dst_capacity};
  rc = conn_load_pinned(c, &lp, 1, stream);
  if (rc != ECC_OK)
    (void)conn_unpin(c, e.token);
  return rc;
}

/* Takes p off the list if it is still there: true if the caller now owns
 * it (lock held). */
static bool pull_take(struct ucx_client *cl, struct pull *p)
{
  for (struct pull **at = &cl->pulls; *at != NULL; at = &(*at)->next)
    if (*at == p) {
      *at = p->next;
      cl->n_pulls--;
      pthread_cond_broadcast(&cl->cond);
      return true;
    }
  return false;
}

static struct pull *pull_of(struct ucx_client *cl, uint64_t req_id)
{
  for (struct pull *p = cl->pulls; p != NULL; p = p->next)
    if (p->req_id == req_id)
      return p;
  return NULL;
}

/* A pull taken off the list, all its bytes in (why NULL) or not; either
 * way the server's pin is released. A held copy (CUDA engine) runs now,
 * and its record, polled from the connector, publishes the reservation or
 * frees it and fails. Otherwise dst has the bytes already: the reservation
 * is published or given up, and the completion queued here. */
static void pull_finish(struct ucx_client *cl, struct pull *p, const char *why)
{
  if (p->hold != NULL) {
    conn_hold_release(p->hold, why == NULL);
  } else {
    if (!p->direct && why == NULL && conn_publish_written(cl->conn, p->local_token) != ECC_OK)
      why = "the local copy could not be published";
    if (!p->direct && why != NULL)
      (void)conn_abort_reserved(cl->conn, p->local_token);
    queue_done(cl, p, why);
  }
  release_remote(cl, &p->remote_token, 1);
  free(p->got);
  free(p);
}

/* Stores a piece in the local copy and, unless a held GPU copy will read
 * it from there (the host engine writes dst itself), in dst as well: piece by piece, so that the second copy reads from cache
 * what the first just read (the chunk is cold, straight off the socket). */
static void store(const struct pull *p, uint8_t *local, uint64_t off, const uint8_t *data,
                  uint64_t len)
{
  enum { PIECE = 32 * 1024 };
  for (uint64_t done = 0; done < len; done += PIECE) {
    uint64_t n = len - done < PIECE ? len - done : PIECE;
    memcpy(local + done, data + done, n);
    if (p->hold == NULL)
      memcpy((uint8_t *)(uintptr_t)p->dst + off + done, data + done, n); /* within dst_capacity */
  }
}

/* Copies a chunk's bytes to where the entry's offset lies in the local
 * reservation (whose runs need not be cut as the server's are). */
static void place(struct ucx_client *cl, const struct pull *p, uint64_t off, const uint8_t *data,
                  uint64_t len)
{
  uint64_t bs = cl->region.block_size, at = 0;
  for (uint32_t r = 0; r < p->n_local && len > 0; r++) {
    uint64_t run = (uint64_t)p->local[r].n_blocks * bs;
    if (off < at + run) {
      uint64_t in = off - at, n = run - in < len ? run - in : len;
      store(p, cl->region.blocks + (uint64_t)p->local[r].first_block * bs + in, off, data, n);
      data += n;
      off += n;
      len -= n;
    }
    at += run;
  }
}

/* Why a data message cannot be taken, or NULL (lock held). */
static const char *chunk_problem(const struct pull *p, const struct wire_data *d, size_t len)
{
  if (d->offset % WIRE_DATA_CHUNK != 0 || d->offset >= p->nbytes)
    return "the server sent bytes at an offset outside the entry";
  uint64_t want = p->nbytes - d->offset < WIRE_DATA_CHUNK ? p->nbytes - d->offset : WIRE_DATA_CHUNK;
  if (len != want)
    return "the server sent a chunk of the wrong length";
  if (p->got[d->offset / WIRE_DATA_CHUNK])
    return "the server sent a chunk twice";
  return NULL;
}

static void on_data(void *user, struct net_peer *peer, const uint8_t *hdr, size_t hlen,
                    const uint8_t *data, size_t len)
{
  (void)peer;
  struct ucx_client *cl = user;
  struct wire_data d;
  char why[160];
  if (wire_decode_data(hdr, hlen, &d, why, sizeof(why)) != ECC_OK) {
    log_msg(cl->log, ECC_LOG_WARN, "ucx: a data message dropped: %s", why);
    return;
  }
  lock_mutex_lock(&cl->lock);
  struct pull *p = pull_of(cl, d.req_id);
  const char *problem = p != NULL ? chunk_problem(p, &d, len) : NULL;
  bool done = false;
  if (p != NULL && problem == NULL) {
    if (p->direct)
      memcpy((uint8_t *)(uintptr_t)p->dst + d.offset, data, len); /* within dst_capacity */
    else
      place(cl, p, d.offset, data, len);
    p->got[d.offset / WIRE_DATA_CHUNK] = 1;
    p->progress_ns = ecc_now_ns();
    done = ++p->chunks_got == p->chunks;
  }
  bool mine = p != NULL && (done || problem != NULL) && pull_take(cl, p);
  lock_mutex_unlock(&cl->lock);
  if (mine)
    pull_finish(cl, p, problem);
}

static void took_pulled(struct ucx_client *cl, const struct wire_pulled *m)
{
  lock_mutex_lock(&cl->lock);
  struct pull *p = pull_of(cl, m->req_id);
  bool mine = p != NULL && pull_take(cl, p);
  lock_mutex_unlock(&cl->lock);
  if (!mine)
    return;
  p->refused = m->status;
  pull_finish(cl, p,
              m->status == ECC_ERR_CLOSED ? "the server no longer holds its pin"
              : m->status == ECC_ERR_BUSY
                  ? "the server refused it: this client has as many loads in flight as the "
                    "server allows (its ucx.client_max_pulls); poll, then load again"
                  : "the server could not send it");
}

/* Every pull in flight, failed: the link they depend on is gone. */
static void fail_all_pulls(struct ucx_client *cl, const char *why)
{
  lock_mutex_lock(&cl->lock);
  struct pull *list = cl->pulls;
  cl->pulls = NULL;
  cl->n_pulls = 0;
  pthread_cond_broadcast(&cl->cond);
  lock_mutex_unlock(&cl->lock);
  while (list != NULL) {
    struct pull *next = list->next;
    pull_finish(cl, list, why);
    list = next;
  }
}

/* Checks every entry before starting any: tokens held here, room at dst. */
static int check_loads(struct ucx_client *cl, const ecc_load_pinned_v1_t *e, size_t n,
                       struct rpin *copy)
{
  int rc = ECC_OK;
  lock_mutex_lock(&cl->lock);
  for (size_t i = 0; i < n && rc == ECC_OK; i++) {
    struct rpin *r = pin_find(cl, e[i].token);
    if (r == NULL)
      rc = log_fail(cl->log, ECC_ERR_CLOSED,
                    "load_pinned: entry %zu: token 0x%" PRIx64 " names no pin of this process", i,
                    e[i].token);
    else if (e[i].dst == 0 || e[i].dst_capacity < r->nbytes)
      rc = log_fail(cl->log, ECC_ERR_INVALID,
                    "load_pinned: entry %zu (%s): destination of %" PRIu64 " bytes for %" PRIu64, i,
                    r->key, e[i].dst_capacity, r->nbytes);
    else
      copy[i] = *r;
  }
  bool down = rc == ECC_OK && cl->link != LINK_UP;
  lock_mutex_unlock(&cl->lock);
  return down ? link_error(cl) : rc;
}

/* With the CUDA engine: the copy from the reservation to dst, queued on
 * `stream` now and held on the device until the bytes are in. */
static int hold_copy(struct ucx_client *cl, struct pull *p, void *stream)
{
  ecc_load_pinned_v1_t held = {p->transfer_id, p->local_token, p->dst, p->dst_capacity};
  int rc = conn_load_held(cl->conn, &held, stream, &p->hold);
  if (p->hold == NULL)
    (void)conn_abort_reserved(cl->conn, p->local_token);
  return rc;
}

static int start_pull(struct ucx_client *cl, const ecc_load_pinned_v1_t *e, const struct rpin *r,
                      void *stream)
{
  ecc_entry_v1_t local = {.state = ECC_ENTRY_RESERVED};
  int rc = cl->cfg.cache ? conn_reserve(cl->conn, r->key, r->nbytes, &local) : ECC_OK;
  if (rc != ECC_OK)
    return rc;
  if (local.state == ECC_ENTRY_WRITING)
    return log_fail_at(cl->log, ECC_LOG_DEBUG, ECC_ERR_BUSY,
                       "load_pinned: %s is being pulled by another process here", r->key);
  struct pull *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    if (local.state == ECC_ENTRY_RESERVED)
      (void)conn_abort_reserved(cl->conn, local.token);
    return log_fail(cl->log, ECC_ERR_NOMEM, "load_pinned: out of memory");
  }
  *p = (struct pull){.cl = cl,
                     .transfer_id = e->transfer_id,
                     .dst = e->dst,
                     .dst_capacity = e->dst_capacity,
                     .local_token = local.token,
                     .remote_token = r->server_token,
                     .nbytes = r->nbytes,
                     .n_local = local.n_extents,
                     .direct = !cl->cfg.cache,
                     .started_ns = ecc_now_ns()};
  p->progress_ns = p->started_ns;
  memcpy(p->local, local.extents, sizeof(p->local));
  snprintf(p->key, sizeof(p->key), "%s", r->key);
  /* The held copy is queued before any byte can arrive. Should it be queued
   * with an error (the stream not ordered after it), the pull goes on and
   * the error is returned, as load_pinned of the shm plugin does. */
  int held_rc = ECC_OK;
  if (local.state == ECC_ENTRY_RESERVED && conn_engine_is_cuda(cl->conn)) {
    held_rc = hold_copy(cl, p, stream);
    if (p->hold == NULL) {
      free(p);
      return held_rc;
    }
  }
  lock_mutex_lock(&cl->lock);
  pin_take_one(cl, r->token);
  lock_mutex_unlock(&cl->lock);
  if (local.state == ECC_ENTRY_READY) {
    /* Already here from an earlier pull: no bytes cross the network. */
    if (load_local(cl, p, true, stream) != ECC_OK)
      queue_done(cl, p, "the local copy could not start");
    release_remote(cl, &p->remote_token, 1);
    free(p);
    return ECC_OK;
  }
  p->chunks = (p->nbytes + WIRE_DATA_CHUNK - 1) / WIRE_DATA_CHUNK;
  p->got = calloc(p->chunks, 1);
  bool no_memory = p->got == NULL;
  uint64_t remote = p->remote_token;
  lock_mutex_lock(&cl->lock);
  uint64_t req_id = p->req_id = ++cl->next_req;
  p->next = cl->pulls;
  cl->pulls = p;
  cl->n_pulls++;
  lock_mutex_unlock(&cl->lock);
  /* From here p may be finished and freed by the progress thread (the link
   * failed): only what was read before is used, until p is taken back. */
  uint8_t buf[WIRE_HEADER_BYTES + 16];
  size_t len = wire_encode_pull(buf, sizeof(buf), atomic_fetch_add(&cl->seq, 1), req_id, remote);
  if (no_memory || send_to_server(cl, buf, len) != ECC_OK) {
    lock_mutex_lock(&cl->lock);
    bool mine = pull_take(cl, p);
    lock_mutex_unlock(&cl->lock);
    if (mine)
      pull_finish(cl, p, no_memory ? "out of memory" : "the request could not be sent");
  }
  return held_rc;
}

int ucx_client_load_pinned(struct ucx_client *cl, const ecc_load_pinned_v1_t *e, size_t n,
                           void *stream)
{
  int refused;
  if (on_progress_thread(cl, "load_pinned", &refused))
    return refused;
  if (n > 0 && e == NULL)
    return log_fail(cl->log, ECC_ERR_INVALID, "load_pinned: entries is NULL");
  if (stream != NULL && !conn_engine_is_cuda(cl->conn))
    return log_fail(cl->log, ECC_ERR_INVALID,
                    "load_pinned: a stream was given, but the %s engine takes none; pass NULL",
                    conn_engine_name(cl->conn));
  struct rpin *copy = n > 0 ? calloc(n, sizeof(*copy)) : NULL;
  uint64_t *tokens = n > 0 ? calloc(2 * n, sizeof(*tokens)) : NULL;
  if (n > 0 && (copy == NULL || tokens == NULL)) {
    free(copy);
    free(tokens);
    return log_fail(cl->log, ECC_ERR_NOMEM, "load_pinned: out of memory");
  }
  for (size_t i = 0; i < n; i++)
    tokens[i] = e[i].token;
  uint64_t *borrowed = tokens + n;
  size_t n_borrowed = 0, started = 0;
  lock_rw_rdlock(&cl->net_lock);
  int rc = borrow_unknown(cl, tokens, n, borrowed, &n_borrowed);
  if (rc == ECC_OK)
    rc = check_loads(cl, e, n, copy);
  for (; rc == ECC_OK && started < n; started++) {
    rc = start_pull(cl, &e[started], &copy[started], stream);
    if (rc != ECC_OK && started > 0)
      log_msg(cl->log, ECC_LOG_WARN,
              "load_pinned: entries 0..%zu were started; their completions follow", started - 1);
  }
  /* A refused entry keeps no borrowed pin: the group's other loads need it. */
  if (rc != ECC_OK)
    forget_borrowed(cl, borrowed, n_borrowed);
  lock_rw_unlock(&cl->net_lock);
  free(copy);
  free(tokens);
  return rc;
}

/* A pull that has not moved for the deadline means a stopped or cut-off
 * server: the link is given up, which fails the pulls in flight. Watched on
 * the progress thread, not in poll: a held copy's stream may be waited for
 * by a host that polls only afterwards. */
static void watch_pulls(struct ucx_client *cl)
{
  uint64_t now = ecc_now_ns(), limit = (uint64_t)cl->cfg.deadline_ms * 1000000ull;
  bool stuck = false;
  lock_mutex_lock(&cl->lock);
  for (struct pull *p = cl->pulls; p != NULL && !stuck; p = p->next)
    stuck = p->progress_ns < now && now - p->progress_ns > limit;
  lock_mutex_unlock(&cl->lock);
  if (!stuck)
    return;
  char why[96];
  snprintf(why, sizeof(why), "a load made no progress for %u ms", cl->cfg.deadline_ms);
  net_peer_fail(cl->net, cl->peer, why);
}

static void on_tick(void *user)
{
  watch_pulls(user);
}

int ucx_client_poll(struct ucx_client *cl, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  if (n_out == NULL || (cap > 0 && out == NULL))
    return log_fail(cl->log, ECC_ERR_INVALID, "poll: %s is NULL", n_out == NULL ? "n_out" : "out");
  size_t k = 0;
  lock_mutex_lock(&cl->lock);
  while (k < cap && cl->n_done > 0) {
    out[k++] = cl->done[0];
    memmove(cl->done, cl->done + 1, --cl->n_done * sizeof(*cl->done));
  }
  lock_mutex_unlock(&cl->lock);
  size_t more = 0;
  int rc = cap > k ? conn_poll(cl->conn, out + k, cap - k, &more) : ECC_OK;
  *n_out = k + more;
  return rc;
}

void ucx_client_stop(struct ucx_client *cl)
{
  if (cl == NULL)
    return;
  uint64_t deadline = deadline_after(cl->cfg.deadline_ms);
  lock_mutex_lock(&cl->lock);
  while (cl->n_pulls > 0 && ecc_now_ns() < deadline)
    wait_until(cl, deadline);
  size_t left = cl->n_pulls, pins = cl->n_pins;
  lock_mutex_unlock(&cl->lock);
  if (left > 0)
    log_msg(cl->log, ECC_LOG_WARN, "ucx: closing with %zu pulls in flight", left);
  /* The pins still held are not released one by one: the server hands them
   * to another process of this host's group when the link closes (a worker
   * may still load a token this process looked up), or drops them. */
  if (pins > 0)
    log_msg(cl->log, ECC_LOG_DEBUG, "ucx: closing with %zu pins held", pins);
  net_destroy(cl->net);
  cl->net = NULL;
  fail_all_pulls(cl, "the connector was closed before its bytes came");
  free(cl->pins);
  free(cl->done);
  free_locks(cl);
  free(cl);
}
