/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c - the UCX layer (net.h): context, worker and progress thread,
 * the gate (a server's) or the preface (a client's) and the endpoints made
 * from exchanged worker addresses, active messages, RMA gets, peer
 * failures, and UCX's log routed to the connector's.
 */
#include "plugins/ucx/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errtext.h"
#include "common/lock.h"
#include "plugins/ucx/gate.h"
#include "plugins/ucx/sha256.h"

#define NET_AM_ID 17u
#define NET_DATA_ID 18u
#define NET_MAX_HEADER 64u
#define NET_MAX_PEERS 64u
/* How long the progress thread sleeps when nothing happens: the longest a
 * stop request waits, since ucp_worker_signal wakes it at once otherwise. */
#define NET_IDLE_MS 100
#define NET_CLOSE_MS 500 /* a graceful close, before it is forced */
#define NET_PREFACE_MS 5000u
/* Messages queued to one peer and not yet sent: one that reads none of its
 * answers is given up past this, instead of growing this process. */
#define NET_MAX_QUEUED 4096u

struct net_peer {
  struct net *net;
  ucp_ep_h ep;
  ucp_rkey_h rkey; /* the peer's region, once known */
  uint64_t base;
  atomic_bool failed;
  atomic_bool close_pending;  /* the progress thread is to close it (failed) */
  atomic_bool heard;          /* a message came from it: its endpoint is connected */
  atomic_bool overflowed;     /* NET_MAX_QUEUED messages wait for it: to be given up */
  atomic_bool gently;         /* given up alive: its endpoint is closed by a flush, not forced */
  atomic_uint queued;         /* its messages not yet sent */
  atomic_uint refs;           /* 1 while listed, and 1 per operation in flight on it */
  uint64_t born_ns;           /* when its endpoint was made */
  int sock;                   /* its preface's connection, kept: its end is the peer's; or -1 */
  struct net_peer *next_gone; /* on the list of closed peers whose operations still run */
};

struct net {
  struct net_params p;
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_address_t *own_addr; /* this worker's address, for the preface */
  size_t own_len;
  uint8_t key[SHA256_BYTES];
  bool has_key;
  struct gate *gate; /* a server's listener */
  ucp_mem_h memh;
  void *rkey_buf;
  size_t rkey_len;
  int efd;
  pthread_t thread;
  bool thread_started;
  atomic_bool stop;
  pthread_mutex_t lock; /* guards peers[] and n_peers */
  /* Endpoints are closed only by the progress thread, holding this for
   * writing; other threads hold it for reading while they use one. The
   * progress thread's own calls (callbacks) take nothing: no close can run
   * beside them, and UCX holds its worker lock around them. Known to the
   * log: what is said under it (a refused send, UCX's own lines) is sent
   * after it. */
  struct ecc_rwlock ep_lock;
  struct net_peer *peers[NET_MAX_PEERS];
  unsigned n_peers;
  struct net_peer *gone; /* closed server peers, freed once no operation refers to them */
};

/* ---- UCX's log --------------------------------------------------------------- */

/* The handler is process-wide in UCX: it goes to the newest live layer's
 * log, or nowhere once none is live (UCX's default would print). A line is
 * sent with no lock of this file held: the host's callback may call the
 * plugin again, whose UCX calls log again, or whose reconnect makes and
 * destroys a layer. Instead each line being sent is listed (a node on its
 * thread's stack), and a log that goes away waits until no other thread
 * is sending to it. */
struct log_route {
  struct ecc_log *log;
  pthread_t thread;
  struct log_route *next;
};

static pthread_mutex_t log_owner_lock = PTHREAD_MUTEX_INITIALIZER; /* the three below */
static pthread_cond_t log_route_done = PTHREAD_COND_INITIALIZER;
static struct ecc_log *log_owner;
static struct log_route *log_routes;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static int level_of(ucs_log_level_t l)
{
  if (l <= UCS_LOG_LEVEL_ERROR)
    return ECC_LOG_ERROR;
  if (l == UCS_LOG_LEVEL_WARN)
    return ECC_LOG_WARN;
  return l <= UCS_LOG_LEVEL_INFO ? ECC_LOG_INFO : ECC_LOG_DEBUG;
}

static void route_end(struct log_route *r)
{
  pthread_mutex_lock(&log_owner_lock);
  for (struct log_route **at = &log_routes; *at != NULL; at = &(*at)->next)
    if (*at == r) {
      *at = r->next;
      break;
    }
  pthread_cond_broadcast(&log_route_done);
  pthread_mutex_unlock(&log_owner_lock);
}

static ucs_log_func_rc_t ucx_log(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                 const char *fmt, va_list ap)
{
  (void)function;
  (void)comp;
  char text[512];
  vsnprintf(text, sizeof(text), fmt, ap);
  struct log_route r = {.thread = pthread_self()};
  pthread_mutex_lock(&log_owner_lock);
  r.log = log_owner;
  if (r.log != NULL) {
    r.next = log_routes;
    log_routes = &r;
  }
  pthread_mutex_unlock(&log_owner_lock);
  if (r.log != NULL) {
    /* Held in the log's queue if this thread is inside one of its locks. */
    log_msg(r.log, level_of(level), "ucx: %s (%s:%u)", text, file, line);
    route_end(&r);
  }
  return UCS_LOG_FUNC_RC_STOP;
}

static void push_log_handler(void)
{
  ucs_log_push_handler(ucx_log);
}

/* Whether a thread other than this one is sending a line to log. */
static bool routed_elsewhere(const struct ecc_log *log)
{
  pthread_t self = pthread_self();
  for (const struct log_route *r = log_routes; r != NULL; r = r->next)
    if (r->log == log && !pthread_equal(r->thread, self))
      return true;
  return false;
}

/* The owner becomes log (unless `unless` is given and is not the owner).
 * With `ending`, unless is going away: wait for the lines other threads
 * are sending to it (this thread's own, when it is inside such a line's
 * callback, end after it returns, and the log outlives them). */
static void log_owner_set(struct ecc_log *log, struct ecc_log *unless, bool ending)
{
  pthread_mutex_lock(&log_owner_lock);
  if (unless == NULL || log_owner == unless)
    log_owner = log;
  while (ending && routed_elsewhere(unless))
    pthread_cond_wait(&log_route_done, &log_owner_lock);
  pthread_mutex_unlock(&log_owner_lock);
}

/* The layer whose progress thread this is (each thread knows its own). */
static __thread const struct net *progress_of;

static bool on_progress_thread(const struct net *n)
{
  return progress_of == n;
}

bool net_on_a_progress_thread(void)
{
  return progress_of != NULL;
}

static void read_lock(struct net *n)
{
  if (!on_progress_thread(n))
    lock_rw_rdlock(&n->ep_lock);
}

static void read_unlock(struct net *n)
{
  if (!on_progress_thread(n))
    lock_rw_unlock(&n->ep_lock);
}

/* ---- peers ------------------------------------------------------------------- */

static void peer_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)ep;
  struct net_peer *peer = arg;
  if (atomic_exchange(&peer->failed, true))
    return;
  struct net *n = peer->net;
  atomic_store(&peer->close_pending, true);
  if (n->p.cb.on_peer_error != NULL)
    n->p.cb.on_peer_error(n->p.cb.user, peer, ECC_ERR_TRANSFER, ucs_status_string(status));
}

static struct net_peer *peer_new(struct net *n)
{
  struct net_peer *peer = calloc(1, sizeof(*peer));
  if (peer == NULL)
    return NULL;
  peer->net = n;
  peer->born_ns = ecc_now_ns();
  peer->sock = -1;
  atomic_init(&peer->refs, 1);
  pthread_mutex_lock(&n->lock);
  if (n->n_peers == NET_MAX_PEERS) {
    pthread_mutex_unlock(&n->lock);
    free(peer);
    return NULL;
  }
  n->peers[n->n_peers++] = peer;
  pthread_mutex_unlock(&n->lock);
  return peer;
}

static struct net_peer *peer_of_ep(struct net *n, ucp_ep_h ep)
{
  struct net_peer *found = NULL;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers && found == NULL; i++)
    if (n->peers[i]->ep == ep)
      found = n->peers[i];
  pthread_mutex_unlock(&n->lock);
  return found;
}

static ucp_ep_params_t ep_params(struct net_peer *peer)
{
  ucp_ep_params_t ep = {0};
  ep.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = peer_failed;
  ep.err_handler.arg = peer;
  return ep;
}

/* A peer's endpoint, made from the worker address it sent in its preface.
 * UCX reads that address trusting it (1.13 asserts on a header of another
 * version, as on the sockaddr bytes it aborted on): only one that opens as
 * this worker's own does goes to it. Behind that check,
 * UCX's parser is as exposed as UCX's own data ports (docs/RELIABILITY.md, Trust). */
static int ep_to(struct net *n, struct net_peer *peer, const uint8_t *addr, size_t len, char *why,
                 size_t cap)
{
  const uint8_t *own = (const uint8_t *)n->own_addr;
  if (len < 9 || addr[0] != own[0]) {
    atomic_store(&peer->failed, true);
    return errtext_fail(why, cap, ECC_ERR_INCOMPATIBLE,
                        "the peer's UCX worker address is not of this UCX (it opens with 0x%02x, "
                        "this side's with 0x%02x): run the same UCX release on both hosts",
                        len > 0 ? addr[0] : 0, own[0]);
  }
  ucp_ep_params_t ep = ep_params(peer);
  ep.field_mask |= UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  ep.address = (const ucp_address_t *)addr;
  ucs_status_t st = ucp_ep_create(n->worker, &ep, &peer->ep);
  if (st != UCS_OK) {
    peer->ep = NULL;
    atomic_store(&peer->failed, true);
    return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: no endpoint to the peer's address: %s",
                        ucs_status_string(st));
  }
  return ECC_OK;
}

/* Unlists a peer whose endpoint is closed: only a server's, only on the
 * progress thread. Its operations in flight complete as the worker goes on
 * (with errors): it is freed by sweep_gone once none is left. */
static void peer_free(struct net *n, struct net_peer *peer)
{
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers; i++)
    if (n->peers[i] == peer) {
      n->peers[i] = n->peers[--n->n_peers];
      break;
    }
  pthread_mutex_unlock(&n->lock);
  atomic_fetch_sub(&peer->refs, 1);
  peer->next_gone = n->gone;
  n->gone = peer;
}

/* Frees the closed peers no operation refers to any more (progress thread,
 * or net_destroy once the worker is gone: then all of them). */
static void sweep_gone(struct net *n, bool all)
{
  for (struct net_peer **at = &n->gone; *at != NULL;) {
    struct net_peer *p = *at;
    if (all || atomic_load(&p->refs) == 0) {
      *at = p->next_gone;
      free(p);
    } else {
      at = &p->next_gone;
    }
  }
}

/* The gate's peer passed its preface (progress thread). The gate holds a
 * reference to it until `linked`. */
static int admit(void *user, const uint8_t *addr, size_t len, void **cookie, char *why, size_t cap)
{
  struct net *n = user;
  *cookie = NULL;
  struct net_peer *peer = peer_new(n);
  if (peer == NULL)
    return errtext_fail(why, cap, ECC_ERR_BUSY, "the server has %u peers already", NET_MAX_PEERS);
  int rc = ep_to(n, peer, addr, len, why, cap);
  if (rc != ECC_OK) {
    peer_free(n, peer);
    return rc;
  }
  atomic_fetch_add(&peer->refs, 1);
  *cookie = peer;
  if (n->p.cb.on_connect != NULL)
    n->p.cb.on_connect(n->p.cb.user, peer);
  return ECC_OK;
}

/* The admitted peer's connection, kept (progress thread). */
static void linked(void *user, void *cookie, int fd)
{
  struct net *n = user;
  struct net_peer *peer = cookie;
  if (fd < 0 || atomic_load(&peer->failed)) {
    if (fd >= 0)
      close(fd);
    net_peer_fail(n, peer, "its preface's answer could not be sent");
  } else {
    peer->sock = fd;
  }
  atomic_fetch_sub(&peer->refs, 1);
}

/* ---- messages ------------------------------------------------------------- */

/* The peer a received message may be handed to: known, not failed, and
 * with its bytes here. Every message of this layer is sent eager; a
 * rendezvous one did not come from it and is dropped, as is one from an
 * unknown sender. */
static struct net_peer *sender_of(struct net *n, const ucp_am_recv_param_t *param, const char *what,
                                  size_t len)
{
  struct net_peer *peer =
      (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? peer_of_ep(n, param->reply_ep) : NULL;
  if (peer == NULL || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    log_msg(n->p.log, ECC_LOG_WARN, "ucx: %s of %zu bytes from an unknown sender dropped", what,
            len);
    return NULL;
  }
  atomic_store(&peer->heard, true);
  return atomic_load(&peer->failed) ? NULL : peer;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_len, void *data, size_t len,
                          const ucp_am_recv_param_t *param)
{
  (void)header;
  (void)header_len;
  struct net *n = arg;
  struct net_peer *peer = sender_of(n, param, "a message", len);
  if (peer != NULL && n->p.cb.on_message != NULL)
    n->p.cb.on_message(n->p.cb.user, peer, data, len);
  return UCS_OK;
}

/* What a message, a data message or a get carries to its completion. */
struct op {
  struct net_peer *peer;               /* held (refs) until the op ends */
  bool counted;                        /* a message: counted in peer->queued */
  void (*done)(void *arg, int status); /* NULL: nobody waits for it */
  void *arg;
  void *owned;                    /* a message's copy, freed with the op */
  uint8_t header[NET_MAX_HEADER]; /* a data message's: UCX reads it until the send completes */
};

static struct op *op_new(struct net_peer *peer, void (*done)(void *arg, int status), void *arg)
{
  struct op *o = malloc(sizeof(*o));
  if (o != NULL) {
    o->peer = peer;
    o->counted = false;
    o->done = done;
    o->arg = arg;
    o->owned = NULL;
    atomic_fetch_add(&peer->refs, 1);
  }
  return o;
}

/* Frees o and runs its done with status. */
static void op_end(struct op *o, int status)
{
  void (*done)(void *, int) = o->done;
  void *arg = o->arg;
  if (o->counted)
    atomic_fetch_sub(&o->peer->queued, 1);
  atomic_fetch_sub(&o->peer->refs, 1);
  free(o->owned);
  free(o);
  if (done != NULL)
    done(arg, status);
}

static void op_done(void *req, ucs_status_t status, void *user)
{
  op_end(user, status == UCS_OK ? ECC_OK : ECC_ERR_TRANSFER);
  ucp_request_free(req);
}

/* After posting: a refused request is the call's error and done never runs;
 * one complete already runs done before the call returns. */
static int op_posted(struct net *n, ucs_status_ptr_t r, struct op *o, const char *what, size_t len)
{
  if (UCS_PTR_IS_ERR(r)) {
    o->done = NULL;
    op_end(o, ECC_ERR_TRANSFER);
    return log_fail(n->p.log, ECC_ERR_TRANSFER, "ucx: %s of %zu bytes failed: %s", what, len,
                    ucs_status_string(UCS_PTR_STATUS(r)));
  }
  if (r == NULL)
    op_end(o, ECC_OK);
  ucp_worker_signal(n->worker);
  return ECC_OK;
}

/* Posts an active message of the layer (AM id `id`), its completion to o.
 * Eager, not rendezvous: over TCP a rendezvous is served by the sender's
 * progress, and a peer that fails while one is open can abort UCX 1.13 (a
 * get handler's fatal error); eager sends just complete with errors. */
static int am_post(struct net *n, struct net_peer *p, unsigned id, const void *hdr, size_t hlen,
                   const void *data, size_t len, struct op *o, const char *what)
{
  ucp_request_param_t rp = {0};
  rp.op_attr_mask =
      UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY;
  rp.cb.send = op_done;
  rp.user_data = o;
  return op_posted(n, ucp_am_send_nbx(p->ep, id, hdr, hlen, data, len, &rp), o, what, len);
}

static bool peer_usable(const struct net_peer *p)
{
  return p != NULL && !atomic_load(&p->failed) && p->ep != NULL;
}

static int send_locked(struct net *n, struct net_peer *p, const void *buf, size_t len)
{
  if (!peer_usable(p))
    return ECC_ERR_TRANSFER;
  if (atomic_load(&p->queued) >= NET_MAX_QUEUED) {
    /* Given up by the progress thread: this may be another thread, or a
     * callback of the peer's own. */
    atomic_store(&p->overflowed, true);
    ucp_worker_signal(n->worker);
    return ECC_ERR_TRANSFER;
  }
  struct op *o = op_new(p, NULL, NULL);
  if (o == NULL)
    return ECC_ERR_NOMEM;
  if ((o->owned = malloc(len > 0 ? len : 1)) == NULL) {
    op_end(o, ECC_ERR_NOMEM);
    return ECC_ERR_NOMEM;
  }
  memcpy(o->owned, buf, len);
  o->counted = true;
  atomic_fetch_add(&p->queued, 1);
  return am_post(n, p, NET_AM_ID, NULL, 0, o->owned, len, o, "a message");
}

int net_send(struct net *n, struct net_peer *p, const void *buf, size_t len)
{
  read_lock(n);
  int rc = send_locked(n, p, buf, len);
  read_unlock(n);
  return rc;
}

/* ---- data messages ------------------------------------------------------------ */

static ucs_status_t on_data_am(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
  struct net *n = arg;
  struct net_peer *peer = sender_of(n, param, "a data message", len);
  if (peer != NULL && n->p.cb.on_data != NULL)
    n->p.cb.on_data(n->p.cb.user, peer, header, header_len, data, len);
  return UCS_OK;
}

static int send_data_locked(struct net *n, struct net_peer *p, const void *hdr, size_t hlen,
                            const void *data, size_t len, void (*done)(void *arg, int status),
                            void *arg)
{
  if (!peer_usable(p))
    return ECC_ERR_TRANSFER;
  if (hlen > NET_MAX_HEADER)
    return ECC_ERR_INVALID;
  struct op *o = op_new(p, done, arg);
  if (o == NULL)
    return ECC_ERR_NOMEM;
  memcpy(o->header, hdr, hlen);
  return am_post(n, p, NET_DATA_ID, o->header, hlen, data, len, o, "a data message");
}

int net_send_data(struct net *n, struct net_peer *p, const void *hdr, size_t hlen, const void *data,
                  size_t len, void (*done)(void *arg, int status), void *arg)
{
  read_lock(n);
  int rc = send_data_locked(n, p, hdr, hlen, data, len, done, arg);
  read_unlock(n);
  return rc;
}

/* ---- RMA ------------------------------------------------------------------- */

static int get_locked(struct net *n, struct net_peer *p, void *local, size_t len, uint64_t off,
                      void (*done)(void *arg, int status), void *arg)
{
  const uint8_t *lo = n->p.region, *hi = lo + n->p.region_bytes;
  if (!peer_usable(p))
    return ECC_ERR_TRANSFER;
  if (p->rkey == NULL)
    return log_fail(n->p.log, ECC_ERR_TRANSFER, "ucx: no remote key from the peer yet");
  const uint8_t *at = local;
  if (at < lo || at >= hi || len > (size_t)(hi - at))
    return log_fail(n->p.log, ECC_ERR_RANGE, "ucx: a get of %zu bytes outside the region", len);
  struct op *o = op_new(p, done, arg);
  if (o == NULL)
    return ECC_ERR_NOMEM;
  ucp_request_param_t rp = {0};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  rp.cb.send = op_done;
  rp.user_data = o;
  ucs_status_ptr_t r = ucp_get_nbx(p->ep, local, len, p->base + off, p->rkey, &rp);
  return op_posted(n, r, o, "a get", len);
}

int net_get(struct net *n, struct net_peer *p, void *local, size_t len, uint64_t off,
            void (*done)(void *arg, int status), void *arg)
{
  read_lock(n);
  int rc = get_locked(n, p, local, len, off, done, arg);
  read_unlock(n);
  return rc;
}

/* A failed peer's kept connection, closed with its endpoint. */
static void close_sock(struct net_peer *peer)
{
  if (peer->sock >= 0)
    close(peer->sock);
  peer->sock = -1;
}

void net_peer_fail(struct net *n, struct net_peer *p, const char *why)
{
  bool first = !atomic_exchange(&p->failed, true);
  atomic_store(&p->close_pending, true);
  ucp_worker_signal(n->worker);
  if (first && n->p.cb.on_peer_error != NULL)
    n->p.cb.on_peer_error(n->p.cb.user, p, ECC_ERR_TRANSFER, why);
}

/* Forced: the peer may never answer. Requests in flight on it complete
 * with errors; the close itself finishes as the worker progresses. A live
 * peer given up with thousands of sends queued is closed by a flush
 * instead, left to finish when it reads or dies: UCX 1.13 crashed in its
 * TCP progress (a call through NULL) after a forced close of such an
 * endpoint. What stays meanwhile is bounded by NET_MAX_QUEUED. */
static void close_forced(struct net_peer *peer)
{
  close_sock(peer);
  if (peer->rkey != NULL)
    ucp_rkey_destroy(peer->rkey);
  peer->rkey = NULL;
  if (peer->ep == NULL)
    return;
  ucp_request_param_t rp = {0};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = atomic_load(&peer->gently) ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(peer->ep, &rp);
  if (UCS_PTR_IS_PTR(r))
    ucp_request_free(r);
  peer->ep = NULL;
}

/* The closes net_peer_fail asked for (progress thread). */
static void close_pending_peers(struct net *n)
{
  bool any = false;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers && !any; i++)
    any = atomic_load(&n->peers[i]->close_pending);
  pthread_mutex_unlock(&n->lock);
  if (!any)
    return;
  /* Closing takes UCX's worker lock, which UCX holds around the callbacks
   * that take n->lock: the peers are gathered first, then closed without it. */
  struct net_peer *closing[NET_MAX_PEERS];
  unsigned k = 0;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers; i++)
    if (atomic_exchange(&n->peers[i]->close_pending, false))
      closing[k++] = n->peers[i];
  pthread_mutex_unlock(&n->lock);
  lock_rw_wrlock(&n->ep_lock);
  for (unsigned i = 0; i < k; i++)
    close_forced(closing[i]);
  lock_rw_unlock(&n->ep_lock);
  /* A server's failed peers go: its on_peer_error has run, and a long-lived
   * server must not run out of slots to clients that came and went. */
  for (unsigned i = 0; n->p.server && i < k; i++)
    peer_free(n, closing[i]);
}

static uint32_t preface_ms(const struct net *n)
{
  return n->p.preface_ms != 0 ? n->p.preface_ms : NET_PREFACE_MS;
}

/* A server's peer that passed the preface but sends nothing holds a slot:
 * given up after preface_ms (progress thread). */
static void fail_silent_peers(struct net *n)
{
  uint64_t now = ecc_now_ns(), limit = (uint64_t)preface_ms(n) * 1000000ull;
  struct net_peer *silent[NET_MAX_PEERS];
  unsigned k = 0;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers; i++) {
    struct net_peer *p = n->peers[i];
    if (!atomic_load(&p->heard) && !atomic_load(&p->failed) && now - p->born_ns > limit)
      silent[k++] = p;
  }
  pthread_mutex_unlock(&n->lock);
  char why[96];
  snprintf(why, sizeof(why), "a peer sent no message within %u ms of its preface", preface_ms(n));
  for (unsigned i = 0; i < k; i++)
    net_peer_fail(n, silent[i], why);
}

/* The kept connections to poll: n_socks of them into pfd, their peers
 * into of[] (progress thread: no peer is freed meanwhile). */
static size_t peer_socks(struct net *n, struct pollfd *pfd, struct net_peer **of)
{
  size_t k = 0;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers; i++) {
    struct net_peer *p = n->peers[i];
    if (p->sock >= 0 && !atomic_load(&p->failed)) {
      pfd[k] = (struct pollfd){.fd = p->sock, .events = POLLIN};
      of[k++] = p;
    }
  }
  pthread_mutex_unlock(&n->lock);
  return k;
}

/* A kept connection that became readable: the peer closed it or its host
 * reset it (or it sent bytes it must not): the peer is gone. */
static void check_socks(struct net *n, const struct pollfd *pfd, struct net_peer **of, size_t k)
{
  for (size_t i = 0; i < k; i++) {
    if (pfd[i].revents == 0)
      continue;
    uint8_t b;
    ssize_t r = recv(pfd[i].fd, &b, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      continue;
    net_peer_fail(n, of[i],
                  r == 0  ? "it closed its connection"
                  : r > 0 ? "it sent bytes on its preface's connection"
                          : "its connection failed");
  }
}

/* Peers that read none of their answers (progress thread). */
static void fail_overflowed_peers(struct net *n)
{
  struct net_peer *full[NET_MAX_PEERS];
  unsigned k = 0;
  pthread_mutex_lock(&n->lock);
  for (unsigned i = 0; i < n->n_peers; i++)
    if (atomic_exchange(&n->peers[i]->overflowed, false)) {
      atomic_store(&n->peers[i]->gently, true);
      full[k++] = n->peers[i];
    }
  pthread_mutex_unlock(&n->lock);
  char why[96];
  snprintf(why, sizeof(why), "it reads none of its answers (%u messages queued for it)",
           NET_MAX_QUEUED);
  for (unsigned i = 0; i < k; i++)
    net_peer_fail(n, full[i], why);
}

int net_region_key(struct net *n, const void **rkey, size_t *len, uint64_t *base)
{
  if (n->rkey_buf == NULL)
    return ECC_ERR_INVALID;
  *rkey = n->rkey_buf;
  *len = n->rkey_len;
  *base = (uint64_t)(uintptr_t)n->p.region;
  return ECC_OK;
}

int net_peer_region(struct net *n, struct net_peer *p, const void *rkey, size_t len, uint64_t base)
{
  (void)len;
  if (p->rkey != NULL)
    ucp_rkey_destroy(p->rkey);
  p->rkey = NULL;
  ucs_status_t st = ucp_ep_rkey_unpack(p->ep, rkey, &p->rkey);
  if (st != UCS_OK)
    return log_fail(n->p.log, ECC_ERR_TRANSFER, "ucx: the peer's remote key is unusable: %s",
                    ucs_status_string(st));
  p->base = base;
  return ECC_OK;
}

struct net_peer *net_server_peer(struct net *n)
{
  return n->p.server || n->n_peers == 0 ? NULL : n->peers[0];
}

/* ---- the progress thread ------------------------------------------------ */

static void *progress_main(void *arg)
{
  struct net *n = arg;
  progress_of = n;
  uint64_t last_tick = ecc_now_ns();
  struct pollfd pfd[2 + GATE_MAX_PENDING + NET_MAX_PEERS];
  struct net_peer *sock_of[NET_MAX_PEERS];
  while (!atomic_load(&n->stop)) {
    while (ucp_worker_progress(n->worker) != 0)
      ;
    fail_overflowed_peers(n);
    close_pending_peers(n);
    sweep_gone(n, false);
    uint64_t now = ecc_now_ns();
    if (now - last_tick >= NET_IDLE_MS * 1000000ull) {
      last_tick = now;
      if (n->p.server)
        fail_silent_peers(n);
      if (n->p.cb.on_tick != NULL)
        n->p.cb.on_tick(n->p.cb.user);
    }
    /* Armed, the worker's descriptor wakes the poll; busy, it is not slept
     * on, but the gate's connections are still looked at. */
    bool busy = ucp_worker_arm(n->worker) == UCS_ERR_BUSY;
    pfd[0] = (struct pollfd){.fd = n->efd, .events = POLLIN};
    size_t k = n->gate != NULL ? gate_fds(n->gate, pfd + 1, 1 + GATE_MAX_PENDING) : 0;
    size_t socks = peer_socks(n, pfd + 1 + k, sock_of);
    int r = poll(pfd, 1 + k + socks, busy ? 0 : NET_IDLE_MS);
    if (r > 0)
      check_socks(n, pfd + 1 + k, sock_of, socks);
    if (n->gate != NULL)
      gate_service(n->gate, pfd + 1, r > 0 ? k : 0);
  }
  return NULL;
}

/* ---- create and destroy ---------------------------------------------------- */

static bool is_ipv6(const char *addr)
{
  struct in6_addr a6;
  return addr != NULL && inet_pton(AF_INET6, addr, &a6) == 1;
}

static int start_context(struct net *n, char *why, size_t cap)
{
  ucp_config_t *cfg;
  ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
  if (st == UCS_OK && n->p.transports != NULL)
    st = ucp_config_modify(cfg, "TLS", n->p.transports);
  if (st == UCS_OK && n->p.net_devices != NULL)
    st = ucp_config_modify(cfg, "NET_DEVICES", n->p.net_devices);
  /* With an IPv6 address on an interface that also has an IPv4 one, UCX
   * 1.13 corrupted its heap on the server's first accept (the wireup took
   * the IPv4 address first): the TCP transport is told to prefer IPv6. A
   * site's own setting of UCX_TCP_AF_PRIO wins. */
  if (st == UCS_OK && is_ipv6(n->p.addr) && getenv("UCX_TCP_AF_PRIO") == NULL)
    st = ucp_config_modify(cfg, "AF_PRIO", "inet6");
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_CONFIG, "ucx: configuration refused: %s",
                        ucs_status_string(st));
  ucp_params_t pp = {0};
  pp.field_mask = UCP_PARAM_FIELD_FEATURES;
  pp.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  st = ucp_init(&pp, cfg, &n->ctx);
  ucp_config_release(cfg);
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: cannot start with transports '%s': %s",
                        n->p.transports ? n->p.transports : "(default)", ucs_status_string(st));
  return ECC_OK;
}

static int start_worker(struct net *n, char *why, size_t cap)
{
  ucp_worker_params_t wp = {0};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  ucs_status_t st = ucp_worker_create(n->ctx, &wp, &n->worker);
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: cannot create a worker: %s",
                        ucs_status_string(st));
  ucp_worker_attr_t wa = {.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE};
  if (ucp_worker_query(n->worker, &wa) != UCS_OK || wa.thread_mode != UCS_THREAD_MODE_MULTI)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM,
                        "ucx: this UCX build has no multi-threaded workers");
  if ((st = ucp_worker_get_efd(n->worker, &n->efd)) != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: no wake-up descriptor: %s",
                        ucs_status_string(st));
  /* Network transports only: the peer is on another host. */
  ucp_worker_attr_t aa = {.field_mask =
                              UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
                          .address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY};
  if ((st = ucp_worker_query(n->worker, &aa)) != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: the worker has no address: %s",
                        ucs_status_string(st));
  n->own_addr = aa.address;
  n->own_len = aa.address_length;
  ucp_am_handler_param_t h = {0};
  h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                 UCP_AM_HANDLER_PARAM_FIELD_ARG;
  h.id = NET_AM_ID;
  h.cb = on_am;
  h.arg = n;
  st = ucp_worker_set_am_recv_handler(n->worker, &h);
  h.id = NET_DATA_ID;
  h.cb = on_data_am;
  if (st == UCS_OK)
    st = ucp_worker_set_am_recv_handler(n->worker, &h);
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: cannot take messages: %s",
                        ucs_status_string(st));
  return ECC_OK;
}

static int map_region(struct net *n, char *why, size_t cap)
{
  if (n->p.region == NULL || n->p.region_bytes == 0)
    return ECC_OK;
  ucp_mem_map_params_t mp = {0};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = n->p.region;
  mp.length = n->p.region_bytes;
  ucs_status_t st = ucp_mem_map(n->ctx, &mp, &n->memh);
  if (st == UCS_OK)
    st = ucp_rkey_pack(n->ctx, n->memh, &n->rkey_buf, &n->rkey_len);
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: cannot register the region (%zu bytes): %s",
                        n->p.region_bytes, ucs_status_string(st));
  return ECC_OK;
}

static int open_server(struct net *n, char *why, size_t cap)
{
  struct gate_params gp = {.addr = n->p.addr,
                           .port = n->p.port,
                           .step_ms = preface_ms(n),
                           .key = n->has_key ? n->key : NULL,
                           .own_addr = n->own_addr,
                           .own_len = n->own_len,
                           .log = n->p.log,
                           .admit = admit,
                           .linked = linked,
                           .user = n};
  return gate_open(&gp, &n->gate, why, cap);
}

static int open_client(struct net *n, char *why, size_t cap)
{
  uint8_t *server_addr;
  size_t len;
  int sock;
  int rc = gate_connect(n->p.addr, n->p.port, preface_ms(n), n->has_key ? n->key : NULL,
                        n->own_addr, n->own_len, &server_addr, &len, &sock, why, cap);
  if (rc != ECC_OK)
    return rc;
  struct net_peer *peer = peer_new(n);
  if (peer != NULL)
    peer->sock = sock;
  else
    close(sock);
  rc = peer != NULL ? ep_to(n, peer, server_addr, len, why, cap)
                    : errtext_fail(why, cap, ECC_ERR_NOMEM, "ucx: out of memory");
  free(server_addr);
  return rc;
}

int net_create(const struct net_params *p, struct net **out, char *why, size_t why_cap)
{
  *out = NULL;
  struct net *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return errtext_fail(why, why_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  n->p = *p;
  n->p.secret = NULL;
  n->has_key = p->secret != NULL;
  if (n->has_key)
    memcpy(n->key, p->secret, SHA256_BYTES);
  n->efd = -1;
  if (lock_rw_init(&n->ep_lock, p->log) != 0) {
    free(n);
    return errtext_fail(why, why_cap, ECC_ERR_SYSTEM, "ucx: the layer's locks cannot be made");
  }
  pthread_mutex_init(&n->lock, NULL);
  pthread_once(&log_once, push_log_handler);
  log_owner_set(p->log, NULL, false);
  int rc = start_context(n, why, why_cap);
  if (rc == ECC_OK)
    rc = start_worker(n, why, why_cap);
  if (rc == ECC_OK)
    rc = map_region(n, why, why_cap);
  if (rc == ECC_OK)
    rc = p->server ? open_server(n, why, why_cap) : open_client(n, why, why_cap);
  /* *out first: callbacks, which start with the thread, may use it. */
  *out = n;
  if (rc == ECC_OK) {
    if (pthread_create(&n->thread, NULL, progress_main, n) != 0)
      rc = errtext_fail(why, why_cap, ECC_ERR_SYSTEM, "ucx: cannot start the progress thread");
    else
      n->thread_started = true;
  }
  if (rc != ECC_OK) {
    *out = NULL;
    net_destroy(n);
  }
  return rc;
}

/* Closes an endpoint: gracefully while the peer lives, so that it learns
 * of the close at once (a forced close tells it nothing, and a server then
 * kept a gone client's session and pins); forced when the peer failed. A
 * graceful close the peer has not answered within NET_CLOSE_MS is left to
 * the worker's destruction. */
static void close_ep(struct net *n, struct net_peer *peer)
{
  close_sock(peer);
  if (peer->rkey != NULL)
    ucp_rkey_destroy(peer->rkey);
  peer->rkey = NULL;
  if (peer->ep == NULL)
    return;
  bool force = atomic_load(&peer->failed);
  ucp_request_param_t rp = {0};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t r = ucp_ep_close_nbx(peer->ep, &rp);
  peer->ep = NULL;
  if (!UCS_PTR_IS_PTR(r))
    return;
  uint64_t deadline = ecc_now_ns() + NET_CLOSE_MS * 1000000ull;
  while (ucp_request_check_status(r) == UCS_INPROGRESS && (force || ecc_now_ns() < deadline))
    ucp_worker_progress(n->worker);
  if (ucp_request_check_status(r) == UCS_INPROGRESS)
    log_msg(n->p.log, ECC_LOG_DEBUG, "ucx: a peer did not answer a close within %u ms",
            NET_CLOSE_MS);
  ucp_request_free(r); /* released by UCX when it completes, if it has not */
}

static void destroy(struct net *n, bool log_ends)
{
  if (n->thread_started) {
    atomic_store(&n->stop, true);
    ucp_worker_signal(n->worker);
    pthread_join(n->thread, NULL);
  }
  gate_close(n->gate);
  for (unsigned i = 0; i < n->n_peers; i++)
    close_ep(n, n->peers[i]);
  if (n->rkey_buf != NULL)
    ucp_rkey_buffer_release(n->rkey_buf);
  if (n->memh != NULL)
    ucp_mem_unmap(n->ctx, n->memh);
  if (n->own_addr != NULL)
    ucp_worker_release_address(n->worker, n->own_addr);
  if (n->worker != NULL)
    ucp_worker_destroy(n->worker);
  /* No operation can end after the worker: every peer goes. */
  for (unsigned i = 0; i < n->n_peers; i++)
    free(n->peers[i]);
  sweep_gone(n, true);
  if (n->ctx != NULL)
    ucp_cleanup(n->ctx);
  log_owner_set(NULL, n->p.log, log_ends);
  lock_rw_destroy(&n->ep_lock);
  pthread_mutex_destroy(&n->lock);
  free(n);
}

void net_destroy(struct net *n)
{
  if (n != NULL)
    destroy(n, true);
}

void net_destroy_keeping_log(struct net *n)
{
  if (n != NULL)
    destroy(n, false);
}
