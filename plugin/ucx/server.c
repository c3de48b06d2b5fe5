/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - the producer host's side (server.h): sessions per client, the
 * handshake, lookups answered with pins, releases, and the pins of a client
 * that went away dropped. Clients of one group (the processes of a consumer
 * host that share a region) may describe, pull and release each other's
 * pins, so that a scheduler can hand its tokens to worker processes.
 */
#include "server.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "connector_private.h"
#include "errtext.h"
#include "net.h"
#include "wire.h"

/* A pin this client holds, how many of its releases are still due, and
 * the entry's blocks (which the pin keeps in place) for its pulls. */
struct held {
  uint64_t token;
  uint32_t left;
  struct wire_found_entry entry;
  char key[ECC_KEY_MAX + 1];
};

struct session {
  struct net_peer *peer; /* NULL: a free session */
  bool welcomed;
  uint64_t client_id;
  uint64_t group_id; /* 0: none, the pins are this session's alone */
  struct held *held;
  size_t n_held, cap_held;
};

struct ucx_server {
  struct conn *conn;
  struct ecc_log *log;
  struct net *net;
  uint64_t id;
  uint64_t layout_hash;
  atomic_uint_fast64_t seq;
  pthread_mutex_t lock; /* sessions */
  struct session sessions[64];
};

static uint64_t random_id(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 12);
  /* splitmix64: a different value for every start, not a secret */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- sessions (lock held) ------------------------------------------------- */

static struct session *session_of(struct ucx_server *s, struct net_peer *p, bool create)
{
  struct session *free_one = NULL;
  for (size_t i = 0; i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++) {
    if (s->sessions[i].peer == p)
      return &s->sessions[i];
    if (s->sessions[i].peer == NULL && free_one == NULL)
      free_one = &s->sessions[i];
  }
  if (!create || free_one == NULL)
    return NULL;
  memset(free_one, 0, sizeof(*free_one));
  free_one->peer = p;
  return free_one;
}

static bool hold(struct session *ss, const struct wire_found_entry *e, uint32_t ranks,
                 const char *key)
{
  if (ss->n_held == ss->cap_held) {
    size_t cap = ss->cap_held ? 2 * ss->cap_held : 64;
    struct held *h = realloc(ss->held, cap * sizeof(*h));
    if (h == NULL)
      return false;
    ss->held = h;
    ss->cap_held = cap;
  }
  struct held *h = &ss->held[ss->n_held++];
  *h = (struct held){e->token, ranks, *e, ""};
  snprintf(h->key, sizeof(h->key), "%s", key);
  return true;
}

static struct held *held_of(struct session *ss, uint64_t token)
{
  for (size_t i = 0; i < ss->n_held; i++)
    if (ss->held[i].token == token)
      return &ss->held[i];
  return NULL;
}

static bool same_group(const struct session *a, const struct session *b)
{
  return b->peer != NULL && b->welcomed && a->group_id != 0 && b->group_id == a->group_id;
}

/* The pin behind token that ss may use: its own, else one of its group's;
 * *owner is the session holding it. NULL if neither holds it. */
static struct held *group_held(struct ucx_server *s, struct session *ss, uint64_t token,
                               struct session **owner)
{
  struct held *h = held_of(ss, token);
  *owner = ss;
  for (size_t i = 0; h == NULL && i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++)
    if (&s->sessions[i] != ss && same_group(ss, &s->sessions[i])) {
      h = held_of(&s->sessions[i], token);
      *owner = &s->sessions[i];
    }
  return h;
}

/* One release of token by this client: false if it holds none. */
static bool release_one(struct session *ss, uint64_t token)
{
  for (size_t i = 0; i < ss->n_held; i++)
    if (ss->held[i].token == token) {
      if (--ss->held[i].left == 0)
        ss->held[i] = ss->held[--ss->n_held];
      return true;
    }
  return false;
}

/* A session that goes while others of its group live hands them its pins
 * (a worker may be pulling one): true if it did. */
static bool hand_over(struct ucx_server *s, struct session *ss)
{
  struct session *heir = NULL;
  for (size_t i = 0; heir == NULL && i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++)
    if (&s->sessions[i] != ss && same_group(ss, &s->sessions[i]))
      heir = &s->sessions[i];
  if (heir == NULL || ss->n_held == 0)
    return heir != NULL;
  size_t need = heir->n_held + ss->n_held;
  if (need > heir->cap_held) {
    struct held *h = realloc(heir->held, need * sizeof(*h));
    if (h == NULL)
      return false;
    heir->held = h;
    heir->cap_held = need;
  }
  memcpy(heir->held + heir->n_held, ss->held, ss->n_held * sizeof(*ss->held));
  heir->n_held = need;
  log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " gone: %zu pins handed to %016" PRIx64,
          ss->client_id, ss->n_held, heir->client_id);
  ss->n_held = 0;
  return true;
}

static void drop_session(struct ucx_server *s, struct session *ss)
{
  (void)hand_over(s, ss);
  for (size_t i = 0; i < ss->n_held; i++)
    for (uint32_t k = 0; k < ss->held[i].left; k++)
      (void)conn_unpin(s->conn, ss->held[i].token);
  if (ss->n_held > 0)
    log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " gone: %zu pins of it dropped",
            ss->client_id, ss->n_held);
  free(ss->held);
  memset(ss, 0, sizeof(*ss));
}

/* ---- replies --------------------------------------------------------------- */

static void send_msg(struct ucx_server *s, struct net_peer *p, const uint8_t *buf, size_t len)
{
  if (len == 0 || net_send(s->net, p, buf, len) != ECC_OK)
    log_msg(s->log, ECC_LOG_WARN, "ucx: a reply of %zu bytes could not be sent", len);
}

static void refuse(struct ucx_server *s, struct net_peer *p, int code, const char *reason)
{
  uint8_t buf[WIRE_HEADER_BYTES + 8 + WIRE_MAX_REASON];
  char text[WIRE_MAX_REASON + 1];
  snprintf(text, sizeof(text), "%s", reason);
  log_msg(s->log, ECC_LOG_WARN, "ucx: refused a client: %s", text);
  send_msg(s, p, buf,
           wire_encode_refuse(buf, sizeof(buf), atomic_fetch_add(&s->seq, 1), code, text));
}

static void welcome(struct ucx_server *s, struct net_peer *p, const struct wire_hello *h)
{
  char why[WIRE_MAX_REASON + 1];
  if (h->layout_hash != s->layout_hash) {
    snprintf(why, sizeof(why),
             "layout differs: this server's block_size is %" PRIu64 " with wire version %u "
             "(hash %016" PRIx64 "), the client's hash is %016" PRIx64,
             s->conn->region.block_size, WIRE_VERSION, s->layout_hash, h->layout_hash);
    refuse(s, p, ECC_ERR_INCOMPATIBLE, why);
    return;
  }
  struct wire_welcome w = {.server_id = s->id,
                           .block_size = s->conn->region.block_size,
                           .num_blocks = (uint32_t)s->conn->region.num_blocks};
  const void *rkey;
  size_t rkey_len;
  if (net_region_key(s->net, &rkey, &rkey_len, &w.region_base) != ECC_OK ||
      rkey_len > WIRE_MAX_RKEY) {
    refuse(s, p, ECC_ERR_SYSTEM, "the server's region has no usable remote key");
    return;
  }
  w.rkey = rkey;
  w.rkey_len = (uint32_t)rkey_len;
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, true);
  if (ss != NULL) {
    ss->welcomed = true;
    ss->client_id = h->client_id;
    ss->group_id = h->group_id;
  }
  pthread_mutex_unlock(&s->lock);
  if (ss == NULL) {
    refuse(s, p, ECC_ERR_BUSY, "too many clients");
    return;
  }
  uint8_t buf[WIRE_HEADER_BYTES + 64 + WIRE_MAX_RKEY];
  send_msg(s, p, buf, wire_encode_welcome(buf, sizeof(buf), atomic_fetch_add(&s->seq, 1), &w));
  log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " (rank %u) connected", h->client_id,
          h->tp_rank);
}

/* ---- lookups and releases -------------------------------------------------- */

struct lookup_work {
  char keys[WIRE_MAX_KEYS][ECC_KEY_MAX + 1];
  const char *ptrs[WIRE_MAX_KEYS];
  ecc_entry_v1_t out[WIRE_MAX_KEYS];
  struct wire_found_entry found[WIRE_MAX_KEYS];
  uint8_t reply[WIRE_HEADER_BYTES + 16 + WIRE_MAX_KEYS * (20 + 8 * WIRE_MAX_RUNS)];
};

static void to_found(const ecc_entry_v1_t *e, struct wire_found_entry *f)
{
  memset(f, 0, sizeof(*f));
  if (e->state != ECC_ENTRY_READY)
    return;
  f->found = 1;
  f->nbytes = e->nbytes;
  f->token = e->token;
  f->n_runs = e->n_extents;
  for (uint32_t r = 0; r < e->n_extents && r < WIRE_MAX_RUNS; r++)
    f->runs[r] = (struct wire_run){e->extents[r].first_block, e->extents[r].n_blocks};
}

static void answer_lookup(struct ucx_server *s, struct net_peer *p, const struct wire_msg *m)
{
  const struct wire_lookup *q = &m->u.lookup;
  struct lookup_work *w = malloc(sizeof(*w));
  if (w == NULL)
    return;
  for (uint32_t i = 0; i < q->n_keys; i++) {
    struct wire_key k;
    wire_lookup_key(m, i, &k);
    memcpy(w->keys[i], k.key, k.len);
    w->keys[i][k.len] = '\0';
    w->ptrs[i] = w->keys[i];
  }
  int rc = conn_lookup_for_peer(s->conn, w->ptrs, q->n_keys, q->ranks, w->out);
  uint32_t n = rc == ECC_OK ? q->n_keys : 0;
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  for (uint32_t i = 0; i < n; i++) {
    to_found(&w->out[i], &w->found[i]);
    /* A pin nobody could release is dropped at once, and reported absent. */
    if (w->found[i].found && (ss == NULL || !hold(ss, &w->found[i], q->ranks, w->keys[i]))) {
      for (uint32_t k = 0; k < q->ranks; k++)
        (void)conn_unpin(s->conn, w->found[i].token);
      memset(&w->found[i], 0, sizeof(w->found[i]));
    }
  }
  pthread_mutex_unlock(&s->lock);
  send_msg(s, p, w->reply,
           wire_encode_found(w->reply, sizeof(w->reply), atomic_fetch_add(&s->seq, 1), q->req_id,
                             rc, w->found, n));
  free(w);
}

static void take_release(struct ucx_server *s, struct net_peer *p, const struct wire_msg *m)
{
  unsigned foreign = 0;
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  for (uint32_t i = 0; i < m->u.release.n; i++) {
    uint64_t token = wire_release_token(m, i);
    /* A client releases only its own pins or its group's, never another's. */
    struct session *owner = NULL;
    if (ss != NULL && group_held(s, ss, token, &owner) != NULL && release_one(owner, token))
      (void)conn_unpin(s->conn, token);
    else
      foreign++;
  }
  pthread_mutex_unlock(&s->lock);
  if (foreign > 0)
    log_msg(s->log, ECC_LOG_WARN, "ucx: a client released %u pins it does not hold: ignored",
            foreign);
}

/* ---- pulls -------------------------------------------------------------------- */

/* One data message in flight, and the copy it is sent from when its chunk
 * crosses from one run of the entry to the next. */
struct chunk {
  struct ucx_server *s;
  uint8_t *copy;
};

static void chunk_sent(void *arg, int status)
{
  struct chunk *c = arg;
  if (status != ECC_OK)
    log_msg(c->s->log, ECC_LOG_DEBUG, "ucx: a data message to a client failed (it went away?)");
  free(c->copy);
  free(c);
}

/* Where byte `off` of entry e lies in the region, and how many bytes of
 * its run follow it there. */
static uint8_t *byte_at(struct ucx_server *s, const struct wire_found_entry *e, uint64_t off,
                        uint64_t *run_left)
{
  uint64_t bs = s->conn->region.block_size, at = 0;
  for (uint32_t r = 0; r < e->n_runs; r++) {
    uint64_t run = (uint64_t)e->runs[r].count * bs;
    if (off < at + run) {
      *run_left = at + run - off;
      return s->conn->region.blocks + (uint64_t)e->runs[r].first * bs + (off - at);
    }
    at += run;
  }
  *run_left = 0;
  return NULL;
}

/* Bytes [off, off + len) of e gathered from its runs into `into`. */
static void gather(struct ucx_server *s, const struct wire_found_entry *e, uint64_t off,
                   uint64_t len, uint8_t *into)
{
  while (len > 0) {
    uint64_t left;
    const uint8_t *p = byte_at(s, e, off, &left);
    uint64_t n = left < len ? left : len;
    memcpy(into, p, n);
    into += n;
    off += n;
    len -= n;
  }
}

static int send_chunk(struct ucx_server *s, struct net_peer *p, uint64_t req_id,
                      const struct wire_found_entry *e, uint64_t off)
{
  uint64_t len = e->nbytes - off < WIRE_DATA_CHUNK ? e->nbytes - off : WIRE_DATA_CHUNK;
  struct chunk *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return ECC_ERR_NOMEM;
  c->s = s;
  uint64_t run_left;
  const uint8_t *data = byte_at(s, e, off, &run_left);
  if (run_left < len) {
    c->copy = malloc(len);
    if (c->copy == NULL) {
      free(c);
      return ECC_ERR_NOMEM;
    }
    gather(s, e, off, len, c->copy);
    data = c->copy;
  }
  uint8_t hdr[WIRE_DATA_HEADER_BYTES];
  wire_encode_data(hdr, req_id, off);
  int rc = net_send_data(s->net, p, hdr, sizeof(hdr), data, len, chunk_sent, c);
  if (rc != ECC_OK) {
    free(c->copy);
    free(c);
  }
  return rc;
}

/* The entry's bytes, in chunks, to a client that holds a pin on it. */
static void answer_pull(struct ucx_server *s, struct net_peer *p, const struct wire_pull *q)
{
  struct wire_found_entry e;
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false), *owner;
  const struct held *h = ss != NULL ? group_held(s, ss, q->token, &owner) : NULL;
  if (h != NULL)
    e = h->entry;
  pthread_mutex_unlock(&s->lock);
  int rc = h != NULL ? ECC_OK : ECC_ERR_CLOSED;
  if (rc != ECC_OK)
    log_msg(s->log, ECC_LOG_WARN,
            "ucx: a client pulled token 0x%" PRIx64 ", which it holds no pin on", q->token);
  for (uint64_t off = 0; rc == ECC_OK && off < e.nbytes; off += WIRE_DATA_CHUNK)
    rc = send_chunk(s, p, q->req_id, &e, off);
  if (rc == ECC_OK)
    return;
  uint8_t buf[WIRE_HEADER_BYTES + 16];
  send_msg(s, p, buf,
           wire_encode_pulled(buf, sizeof(buf), atomic_fetch_add(&s->seq, 1), q->req_id, rc));
}

/* What a pin of the client's group is: its entry and key. */
static void answer_describe(struct ucx_server *s, struct net_peer *p, const struct wire_describe *q)
{
  struct wire_found_entry e;
  char key[ECC_KEY_MAX + 1] = "";
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false), *owner;
  const struct held *h = ss != NULL ? group_held(s, ss, q->token, &owner) : NULL;
  if (h != NULL) {
    e = h->entry;
    memcpy(key, h->key, sizeof(key));
  }
  pthread_mutex_unlock(&s->lock);
  uint8_t buf[WIRE_HEADER_BYTES + 48 + 8 * WIRE_MAX_RUNS + ECC_KEY_MAX];
  send_msg(s, p, buf,
           wire_encode_described(buf, sizeof(buf), atomic_fetch_add(&s->seq, 1), q->req_id,
                                 h != NULL ? ECC_OK : ECC_ERR_CLOSED, &e, key));
}

/* ---- callbacks of the UCX layer ------------------------------------------- */

static void on_message(void *user, struct net_peer *p, const uint8_t *buf, size_t len)
{
  struct ucx_server *s = user;
  struct wire_msg m;
  char why[256];
  int rc = wire_decode(buf, len, &m, why, sizeof(why));
  if (rc != ECC_OK) {
    refuse(s, p, rc, why);
    return;
  }
  if (m.h.type == WIRE_HELLO) {
    welcome(s, p, &m.u.hello);
    return;
  }
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  bool welcomed = ss != NULL && ss->welcomed;
  pthread_mutex_unlock(&s->lock);
  if (!welcomed) {
    refuse(s, p, ECC_ERR_INVALID, "a message before the handshake");
    return;
  }
  uint8_t pong[WIRE_HEADER_BYTES + 8];
  switch (m.h.type) {
  case WIRE_LOOKUP:
    answer_lookup(s, p, &m);
    break;
  case WIRE_RELEASE:
    take_release(s, p, &m);
    break;
  case WIRE_PULL:
    answer_pull(s, p, &m.u.pull);
    break;
  case WIRE_DESCRIBE:
    answer_describe(s, p, &m.u.describe);
    break;
  case WIRE_PING:
    send_msg(s, p, pong,
             wire_encode_ping(pong, sizeof(pong), atomic_fetch_add(&s->seq, 1), 1, m.u.ping.nonce));
    break;
  default:
    log_msg(s->log, ECC_LOG_WARN, "ucx: a client sent %s, which only a server sends: ignored",
            wire_type_name(m.h.type));
  }
}

static void on_peer_error(void *user, struct net_peer *p, int code, const char *why)
{
  (void)code;
  struct ucx_server *s = user;
  pthread_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  if (ss != NULL) {
    log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " failed: %s", ss->client_id, why);
    drop_session(s, ss);
  }
  pthread_mutex_unlock(&s->lock);
}

int ucx_server_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_server **out)
{
  *out = NULL;
  struct ucx_server *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return errtext_fail(err, err_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  s->conn = conn;
  s->log = &conn->log;
  s->id = random_id();
  s->layout_hash = wire_layout_hash(conn->region.block_size);
  pthread_mutex_init(&s->lock, NULL);
  struct net_params np = {.server = 1,
                          .addr = cfg->addr,
                          .port = cfg->port,
                          .transports = cfg->transports,
                          .net_devices = cfg->net_devices[0] ? cfg->net_devices : NULL,
                          .region = conn->region.blocks,
                          .region_bytes = conn->region.block_size * conn->region.num_blocks,
                          .log = s->log,
                          .cb = {s, NULL, on_message, on_peer_error}};
  int rc = net_create(&np, &s->net, err, err_cap);
  if (rc != ECC_OK) {
    pthread_mutex_destroy(&s->lock);
    free(s);
    return rc;
  }
  log_msg(s->log, ECC_LOG_INFO, "ucx: serving %s port %u (server %016" PRIx64 ")", cfg->addr,
          cfg->port, s->id);
  *out = s;
  return ECC_OK;
}

void ucx_server_stop(struct ucx_server *s)
{
  if (s == NULL)
    return;
  net_destroy(s->net);
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++)
    if (s->sessions[i].peer != NULL)
      drop_session(s, &s->sessions[i]);
  pthread_mutex_unlock(&s->lock);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
