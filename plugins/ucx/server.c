/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.c - the producer host's side (server.h): sessions per client, the
 * handshake, lookups answered with pins, releases, and the pins of a client
 * that went away dropped. Clients of one group (the processes of a consumer
 * host that share a region) may describe, pull and release each other's
 * pins, so that a scheduler can hand its tokens to worker processes.
 */
#include "plugins/ucx/server.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/errtext.h"
#include "common/lock.h"
#include "core/conn.h"
#include "plugins/ucx/net.h"
#include "plugins/ucx/wire.h"

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
  uint64_t serial;       /* names this session for its pulls' completions, never reused */
  uint32_t pulls;        /* its pulls whose data messages are not all sent */
  bool warned_pins, warned_pulls, warned_foreign; /* each said once, then at debug level */
  bool welcomed;
  uint64_t client_id;
  uint64_t group_id; /* 0: none, the pins are this session's alone */
  struct held *held;
  size_t n_held, cap_held;
};

struct ucx_server {
  struct conn *conn;
  struct conn_region_view region; /* the local cache's, which pulls read */
  struct ecc_log *log;
  struct net *net;
  uint64_t id;
  uint64_t layout_hash;
  uint32_t max_pins, max_pulls; /* of one client */
  atomic_uint_fast64_t seq;
  struct ecc_mutex lock; /* sessions, next_serial */
  uint64_t next_serial;
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
  free_one->serial = ++s->next_serial;
  return free_one;
}

static struct session *session_by_serial(struct ucx_server *s, uint64_t serial)
{
  for (size_t i = 0; i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++)
    if (s->sessions[i].peer != NULL && s->sessions[i].serial == serial)
      return &s->sessions[i];
  return NULL;
}

/* A limit's refusal is logged once per client, then at debug level: a
 * client that keeps knocking must not flood the log. */
static int warn_level(bool *warned)
{
  bool first = !*warned;
  *warned = true;
  return first ? ECC_LOG_WARN : ECC_LOG_DEBUG;
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
  /* Every rank of a pin in one directory call: a client's ranks may be
   * many, and the progress thread serves every other client meanwhile. */
  for (size_t i = 0; i < ss->n_held; i++)
    (void)conn_unpin_ranks(s->conn, ss->held[i].token, ss->held[i].left);
  if (ss->n_held > 0)
    log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " gone: %zu pins of it dropped",
            ss->client_id, ss->n_held);
  free(ss->held);
  memset(ss, 0, sizeof(*ss));
}

/* ---- replies --------------------------------------------------------------- */

/* A reply that cannot be sent goes with its client: said at debug level,
 * since a client that reads nothing would otherwise flood the log (its
 * failure is logged once). */
static void send_msg(struct ucx_server *s, struct net_peer *p, const uint8_t *buf, size_t len)
{
  if (len == 0 || net_send(s->net, p, buf, len) != ECC_OK)
    log_msg(s->log, len == 0 ? ECC_LOG_WARN : ECC_LOG_DEBUG,
            "ucx: a reply of %zu bytes could not be %s", len, len == 0 ? "encoded" : "sent");
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
             s->region.block_size, WIRE_VERSION, s->layout_hash, h->layout_hash);
    refuse(s, p, ECC_ERR_INCOMPATIBLE, why);
    return;
  }
  struct wire_welcome w = {.server_id = s->id,
                           .block_size = s->region.block_size,
                           .num_blocks = (uint32_t)s->region.num_blocks};
  const void *rkey;
  size_t rkey_len;
  if (net_region_key(s->net, &rkey, &rkey_len, &w.region_base) != ECC_OK ||
      rkey_len > WIRE_MAX_RKEY) {
    refuse(s, p, ECC_ERR_SYSTEM, "the server's region has no usable remote key");
    return;
  }
  w.rkey = rkey;
  w.rkey_len = (uint32_t)rkey_len;
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, true);
  if (ss != NULL) {
    ss->welcomed = true;
    ss->client_id = h->client_id;
    ss->group_id = h->group_id;
  }
  lock_mutex_unlock(&s->lock);
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

/* Why a client's lookup is refused before the directory sees it: ECC_OK;
 * ECC_ERR_INVALID for ranks past ECC_RANKS_MAX (each rank is a release the
 * server must be able to give back in one call); ECC_ERR_BUSY when its pins
 * would pass ucx.client_max_pins. */
static int lookup_refusal(struct ucx_server *s, struct net_peer *p, const struct wire_lookup *q)
{
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  int rc = ECC_OK;
  if (q->ranks > ECC_RANKS_MAX) {
    log_msg(s->log, ss != NULL ? warn_level(&ss->warned_pins) : ECC_LOG_DEBUG,
            "ucx: client %016" PRIx64 " looked up with ranks %u, above ECC_RANKS_MAX (%u): "
            "refused with ECC_ERR_INVALID",
            ss != NULL ? ss->client_id : 0, q->ranks, (unsigned)ECC_RANKS_MAX);
    rc = ECC_ERR_INVALID;
  } else if (ss != NULL && ss->n_held + q->n_keys > s->max_pins) {
    log_msg(s->log, warn_level(&ss->warned_pins),
            "ucx: client %016" PRIx64 " holds %zu pins and looked up %u keys: past its limit "
            "(ucx.client_max_pins = %u), refused with ECC_ERR_BUSY",
            ss->client_id, ss->n_held, q->n_keys, s->max_pins);
    rc = ECC_ERR_BUSY;
  }
  lock_mutex_unlock(&s->lock);
  return rc;
}

static void answer_lookup(struct ucx_server *s, struct net_peer *p, const struct wire_msg *m)
{
  const struct wire_lookup *q = &m->u.lookup;
  int refused = lookup_refusal(s, p, q);
  if (refused != ECC_OK) {
    uint8_t buf[WIRE_HEADER_BYTES + 16];
    send_msg(s, p, buf,
             wire_encode_found(buf, sizeof(buf), atomic_fetch_add(&s->seq, 1), q->req_id, refused,
                               NULL, 0));
    return;
  }
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
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  for (uint32_t i = 0; i < n; i++) {
    to_found(&w->out[i], &w->found[i]);
    /* A pin nobody could release is dropped at once, and reported absent. */
    if (w->found[i].found && (ss == NULL || !hold(ss, &w->found[i], q->ranks, w->keys[i]))) {
      (void)conn_unpin_ranks(s->conn, w->found[i].token, q->ranks);
      memset(&w->found[i], 0, sizeof(w->found[i]));
    }
  }
  lock_mutex_unlock(&s->lock);
  send_msg(s, p, w->reply,
           wire_encode_found(w->reply, sizeof(w->reply), atomic_fetch_add(&s->seq, 1), q->req_id,
                             rc, w->found, n));
  free(w);
}

static void take_release(struct ucx_server *s, struct net_peer *p, const struct wire_msg *m)
{
  unsigned foreign = 0;
  lock_mutex_lock(&s->lock);
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
  lock_mutex_unlock(&s->lock);
  if (foreign > 0) {
    lock_mutex_lock(&s->lock);
    ss = session_of(s, p, false);
    int level = ss != NULL ? warn_level(&ss->warned_foreign) : ECC_LOG_DEBUG;
    lock_mutex_unlock(&s->lock);
    log_msg(s->log, level, "ucx: a client released %u pins it does not hold: ignored", foreign);
  }
}

/* ---- pulls -------------------------------------------------------------------- */

/* A pull being sent: it counts in its session's pulls until its last data
 * message is sent or failed. chunks_left also holds one for the poster, so
 * that a chunk sent at once cannot end it early (progress thread only). */
struct pull_out {
  struct ucx_server *s;
  uint64_t serial; /* its session's: gone sessions are never confused with new ones */
  uint64_t chunks_left;
};

/* A pull of the session `serial` ended (the session may be gone). */
static void pull_ended(struct ucx_server *s, uint64_t serial)
{
  lock_mutex_lock(&s->lock);
  struct session *ss = session_by_serial(s, serial);
  if (ss != NULL && ss->pulls > 0)
    ss->pulls--;
  lock_mutex_unlock(&s->lock);
}

static void pull_put(struct pull_out *po, uint64_t n)
{
  po->chunks_left -= n;
  if (po->chunks_left > 0)
    return;
  pull_ended(po->s, po->serial);
  free(po);
}

/* One data message in flight, and the copy it is sent from when its chunk
 * crosses from one run of the entry to the next. */
struct chunk {
  struct ucx_server *s;
  struct pull_out *pull;
  uint8_t *copy;
};

static void chunk_sent(void *arg, int status)
{
  struct chunk *c = arg;
  if (status != ECC_OK)
    log_msg(c->s->log, ECC_LOG_DEBUG, "ucx: a data message to a client failed (it went away?)");
  pull_put(c->pull, 1);
  free(c->copy);
  free(c);
}

/* Where byte `off` of entry e lies in the region, and how many bytes of
 * its run follow it there. */
static uint8_t *byte_at(struct ucx_server *s, const struct wire_found_entry *e, uint64_t off,
                        uint64_t *run_left)
{
  uint64_t bs = s->region.block_size, at = 0;
  for (uint32_t r = 0; r < e->n_runs; r++) {
    uint64_t run = (uint64_t)e->runs[r].count * bs;
    if (off < at + run) {
      *run_left = at + run - off;
      return s->region.blocks + (uint64_t)e->runs[r].first * bs + (off - at);
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

static int send_chunk(struct ucx_server *s, struct net_peer *p, struct pull_out *po,
                      uint64_t req_id, const struct wire_found_entry *e, uint64_t off)
{
  uint64_t len = e->nbytes - off < WIRE_DATA_CHUNK ? e->nbytes - off : WIRE_DATA_CHUNK;
  struct chunk *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return ECC_ERR_NOMEM;
  c->s = s;
  c->pull = po;
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

/* Whether ss may start one more pull (lock held): ECC_OK, ECC_ERR_CLOSED
 * for a token of no pin of its group, ECC_ERR_BUSY past its pulls. */
static int pull_allowed(struct ucx_server *s, struct session *ss, const struct wire_pull *q,
                        struct wire_found_entry *e)
{
  struct session *owner;
  const struct held *h = ss != NULL ? group_held(s, ss, q->token, &owner) : NULL;
  if (h == NULL) {
    log_msg(s->log, ss != NULL ? warn_level(&ss->warned_foreign) : ECC_LOG_DEBUG,
            "ucx: a client pulled token 0x%" PRIx64 ", which it holds no pin on", q->token);
    return ECC_ERR_CLOSED;
  }
  if (ss->pulls >= s->max_pulls) {
    log_msg(s->log, warn_level(&ss->warned_pulls),
            "ucx: client %016" PRIx64 " has %u pulls in flight: past its limit "
            "(ucx.client_max_pulls), refused with ECC_ERR_BUSY",
            ss->client_id, ss->pulls);
    return ECC_ERR_BUSY;
  }
  *e = h->entry;
  ss->pulls++;
  return ECC_OK;
}

/* The entry's bytes, in chunks, to a client that holds a pin on it. */
static void answer_pull(struct ucx_server *s, struct net_peer *p, const struct wire_pull *q)
{
  struct wire_found_entry e = {0}; /* read only when allowed; cleared for the compiler */
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  int rc = pull_allowed(s, ss, q, &e);
  uint64_t serial = ss != NULL ? ss->serial : 0;
  lock_mutex_unlock(&s->lock);
  struct pull_out *po = rc == ECC_OK ? malloc(sizeof(*po)) : NULL;
  if (rc == ECC_OK && po == NULL) {
    pull_ended(s, serial);
    rc = ECC_ERR_NOMEM;
  }
  uint64_t chunks = rc == ECC_OK ? (e.nbytes + WIRE_DATA_CHUNK - 1) / WIRE_DATA_CHUNK : 0, sent = 0;
  if (po != NULL)
    *po = (struct pull_out){s, serial, chunks + 1};
  while (rc == ECC_OK && sent < chunks) {
    rc = send_chunk(s, p, po, q->req_id, &e, sent * WIRE_DATA_CHUNK);
    sent += rc == ECC_OK;
  }
  if (po != NULL)
    pull_put(po, 1 + (chunks - sent)); /* the poster's, and the chunks never posted */
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
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false), *owner;
  const struct held *h = ss != NULL ? group_held(s, ss, q->token, &owner) : NULL;
  if (h != NULL) {
    e = h->entry;
    memcpy(key, h->key, sizeof(key));
  }
  lock_mutex_unlock(&s->lock);
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
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  bool welcomed = ss != NULL && ss->welcomed;
  lock_mutex_unlock(&s->lock);
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
  lock_mutex_lock(&s->lock);
  struct session *ss = session_of(s, p, false);
  if (ss != NULL) {
    log_msg(s->log, ECC_LOG_INFO, "ucx: client %016" PRIx64 " failed: %s", ss->client_id, why);
    drop_session(s, ss);
  }
  lock_mutex_unlock(&s->lock);
}

/* A quarter of the directory's pin slots, so that no one client can take
 * them all. */
static uint32_t default_max_pins(const struct conn *c)
{
  uint32_t pins = conn_pin_slots(c);
  return pins / 4 > 0 ? pins / 4 : 1;
}

int ucx_server_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_server **out)
{
  *out = NULL;
  struct ucx_server *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return errtext_fail(err, err_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  s->conn = conn;
  s->log = conn_log(conn);
  conn_region(conn, &s->region);
  s->id = random_id();
  s->layout_hash = wire_layout_hash(s->region.block_size);
  s->max_pins = cfg->max_pins != 0 ? cfg->max_pins : default_max_pins(conn);
  s->max_pulls = cfg->max_pulls;
  /* Known to the connector's log: a session's messages are sent after it. */
  if (lock_mutex_init(&s->lock, s->log) != 0) {
    free(s);
    return errtext_fail(err, err_cap, ECC_ERR_SYSTEM, "ucx: the server's lock cannot be made");
  }
  struct net_params np = {.server = 1,
                          .addr = cfg->addr,
                          .port = cfg->port,
                          .transports = cfg->transports,
                          .net_devices = cfg->net_devices[0] ? cfg->net_devices : NULL,
                          .preface_ms = cfg->connect_ms,
                          .secret = cfg->has_secret ? cfg->secret : NULL,
                          .region = s->region.blocks,
                          .region_bytes = s->region.block_size * s->region.num_blocks,
                          .log = s->log,
                          .cb = {s, NULL, on_message, on_peer_error}};
  int rc = net_create(&np, &s->net, err, err_cap);
  if (rc != ECC_OK) {
    lock_mutex_destroy(&s->lock);
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
  lock_mutex_lock(&s->lock);
  for (size_t i = 0; i < sizeof(s->sessions) / sizeof(s->sessions[0]); i++)
    if (s->sessions[i].peer != NULL)
      drop_session(s, &s->sessions[i]);
  lock_mutex_unlock(&s->lock);
  lock_mutex_destroy(&s->lock);
  free(s);
}
