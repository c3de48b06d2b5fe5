/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.c - the UCX layer (net.h): context, worker and progress thread,
 * listener or endpoint, active messages, RMA gets, peer failures, and
 * UCX's log routed to the connector's.
 */
#include "net.h"

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
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include "clock.h"
#include "errtext.h"

#define NET_AM_ID 17u
#define NET_DATA_ID 18u
#define NET_MAX_HEADER 64u
#define NET_MAX_PEERS 64u
/* How long the progress thread sleeps when nothing happens: the longest a
 * stop request waits, since ucp_worker_signal wakes it at once otherwise. */
#define NET_IDLE_MS 100
#define NET_CLOSE_MS 500 /* a graceful close, before it is forced */

struct net_peer {
  struct net *net;
  ucp_ep_h ep;
  ucp_rkey_h rkey; /* the peer's region, once known */
  uint64_t base;
  atomic_bool failed;
  atomic_bool close_pending; /* net_peer_fail asked the progress thread to close it */
};

struct net {
  struct net_params p;
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_listener_h listener;
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
   * beside them, and UCX holds its worker lock around them. */
  pthread_rwlock_t ep_lock;
  struct net_peer *peers[NET_MAX_PEERS];
  unsigned n_peers;
};

/* ---- UCX's log --------------------------------------------------------------- */

/* The handler is process-wide in UCX: it goes to the newest live layer's
 * log, or nowhere once none is live (UCX's default would print). */
static pthread_mutex_t log_owner_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ecc_log *log_owner;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static int level_of(ucs_log_level_t l)
{
  if (l <= UCS_LOG_LEVEL_ERROR)
    return ECC_LOG_ERROR;
  if (l == UCS_LOG_LEVEL_WARN)
    return ECC_LOG_WARN;
  return l <= UCS_LOG_LEVEL_INFO ? ECC_LOG_INFO : ECC_LOG_DEBUG;
}

static ucs_log_func_rc_t ucx_log(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                 const char *fmt, va_list ap)
{
  (void)function;
  (void)comp;
  char text[512];
  vsnprintf(text, sizeof(text), fmt, ap);
  pthread_mutex_lock(&log_owner_lock);
  if (log_owner != NULL)
    log_msg(log_owner, level_of(level), "ucx: %s (%s:%u)", text, file, line);
  pthread_mutex_unlock(&log_owner_lock);
  return UCS_LOG_FUNC_RC_STOP;
}

static void push_log_handler(void)
{
  ucs_log_push_handler(ucx_log);
}

static void log_owner_set(struct ecc_log *log, struct ecc_log *unless)
{
  pthread_mutex_lock(&log_owner_lock);
  if (unless == NULL || log_owner == unless)
    log_owner = log;
  pthread_mutex_unlock(&log_owner_lock);
}

/* The layer whose progress thread this is (each thread knows its own). */
static __thread const struct net *progress_of;

static bool on_progress_thread(const struct net *n)
{
  return progress_of == n;
}

static void read_lock(struct net *n)
{
  if (!on_progress_thread(n))
    pthread_rwlock_rdlock(&n->ep_lock);
}

static void read_unlock(struct net *n)
{
  if (!on_progress_thread(n))
    pthread_rwlock_unlock(&n->ep_lock);
}

/* ---- peers ------------------------------------------------------------------- */

static void peer_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
  (void)ep;
  struct net_peer *peer = arg;
  if (atomic_exchange(&peer->failed, true))
    return;
  struct net *n = peer->net;
  if (n->p.cb.on_peer_error != NULL)
    n->p.cb.on_peer_error(n->p.cb.user, peer, ECC_ERR_TRANSFER, ucs_status_string(status));
}

static struct net_peer *peer_new(struct net *n)
{
  struct net_peer *peer = calloc(1, sizeof(*peer));
  if (peer == NULL)
    return NULL;
  peer->net = n;
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

static void on_conn_request(ucp_conn_request_h req, void *arg)
{
  struct net *n = arg;
  struct net_peer *peer = peer_new(n);
  if (peer == NULL) {
    log_msg(n->p.log, ECC_LOG_WARN, "ucx: a connection refused: %u peers already", NET_MAX_PEERS);
    ucp_listener_reject(n->listener, req);
    return;
  }
  ucp_ep_params_t ep = ep_params(peer);
  ep.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
  ep.conn_request = req;
  ucs_status_t st = ucp_ep_create(n->worker, &ep, &peer->ep);
  if (st != UCS_OK) {
    log_msg(n->p.log, ECC_LOG_WARN, "ucx: accepting a connection failed: %s",
            ucs_status_string(st));
    atomic_store(&peer->failed, true);
    return;
  }
  if (n->p.cb.on_connect != NULL)
    n->p.cb.on_connect(n->p.cb.user, peer);
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
  void (*done)(void *arg, int status); /* NULL: nobody waits for it */
  void *arg;
  void *owned;                    /* a message's copy, freed with the op */
  uint8_t header[NET_MAX_HEADER]; /* a data message's: UCX reads it until the send completes */
};

static struct op *op_new(void (*done)(void *arg, int status), void *arg)
{
  struct op *o = malloc(sizeof(*o));
  if (o != NULL) {
    o->done = done;
    o->arg = arg;
    o->owned = NULL;
  }
  return o;
}

/* Frees o and runs its done with status. */
static void op_end(struct op *o, int status)
{
  void (*done)(void *, int) = o->done;
  void *arg = o->arg;
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
  struct op *o = op_new(NULL, NULL);
  if (o == NULL || (o->owned = malloc(len > 0 ? len : 1)) == NULL) {
    free(o);
    return ECC_ERR_NOMEM;
  }
  memcpy(o->owned, buf, len);
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
  struct op *o = op_new(done, arg);
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
  struct op *o = op_new(done, arg);
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

void net_peer_fail(struct net *n, struct net_peer *p, const char *why)
{
  bool first = !atomic_exchange(&p->failed, true);
  atomic_store(&p->close_pending, true);
  ucp_worker_signal(n->worker);
  if (first && n->p.cb.on_peer_error != NULL)
    n->p.cb.on_peer_error(n->p.cb.user, p, ECC_ERR_TRANSFER, why);
}

/* Forced: the peer may never answer. Requests in flight on it complete
 * with errors; the close itself finishes as the worker progresses. */
static void close_forced(struct net_peer *peer)
{
  if (peer->rkey != NULL)
    ucp_rkey_destroy(peer->rkey);
  peer->rkey = NULL;
  if (peer->ep == NULL)
    return;
  ucp_request_param_t rp = {0};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;
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
  pthread_rwlock_wrlock(&n->ep_lock);
  for (unsigned i = 0; i < k; i++)
    close_forced(closing[i]);
  pthread_rwlock_unlock(&n->ep_lock);
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
  while (!atomic_load(&n->stop)) {
    while (ucp_worker_progress(n->worker) != 0)
      ;
    close_pending_peers(n);
    uint64_t now = ecc_now_ns();
    if (n->p.cb.on_tick != NULL && now - last_tick >= NET_IDLE_MS * 1000000ull) {
      last_tick = now;
      n->p.cb.on_tick(n->p.cb.user);
    }
    ucs_status_t st = ucp_worker_arm(n->worker);
    if (st == UCS_ERR_BUSY)
      continue;
    struct pollfd pfd = {.fd = n->efd, .events = POLLIN};
    (void)poll(&pfd, 1, NET_IDLE_MS);
  }
  return NULL;
}

/* ---- create and destroy ---------------------------------------------------- */

static int sockaddr_of(const char *addr, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(*v4);
    return 0;
  }
  if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(*v6);
    return 0;
  }
  return -1;
}

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
  /* A restarted server takes its port back even while connections of the
   * one before are in TIME_WAIT (UCX fails the listen with "Device is busy"
   * otherwise). */
  if (st == UCS_OK && n->p.server)
    st = ucp_config_modify(cfg, "CM_REUSEADDR", "y");
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

static int open_side(struct net *n, char *why, size_t cap)
{
  struct sockaddr_storage ss;
  socklen_t sl;
  if (n->p.addr == NULL || n->p.port == 0 || sockaddr_of(n->p.addr, n->p.port, &ss, &sl) != 0)
    return errtext_fail(why, cap, ECC_ERR_CONFIG, "ucx: '%s' port %u is not a numeric address",
                        n->p.addr ? n->p.addr : "(none)", n->p.port);
  ucs_status_t st;
  if (n->p.server) {
    ucp_listener_params_t lp = {0};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (struct sockaddr *)&ss;
    lp.sockaddr.addrlen = sl;
    lp.conn_handler.cb = on_conn_request;
    lp.conn_handler.arg = n;
    st = ucp_listener_create(n->worker, &lp, &n->listener);
  } else {
    struct net_peer *peer = peer_new(n);
    if (peer == NULL)
      return errtext_fail(why, cap, ECC_ERR_NOMEM, "ucx: out of memory");
    ucp_ep_params_t ep = ep_params(peer);
    ep.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = (struct sockaddr *)&ss;
    ep.sockaddr.addrlen = sl;
    st = ucp_ep_create(n->worker, &ep, &peer->ep);
  }
  if (st != UCS_OK)
    return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: cannot %s %s port %u: %s",
                        n->p.server ? "listen on" : "connect to", n->p.addr, n->p.port,
                        ucs_status_string(st));
  return ECC_OK;
}

int net_create(const struct net_params *p, struct net **out, char *why, size_t why_cap)
{
  *out = NULL;
  struct net *n = calloc(1, sizeof(*n));
  if (n == NULL)
    return errtext_fail(why, why_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  n->p = *p;
  n->efd = -1;
  pthread_mutex_init(&n->lock, NULL);
  pthread_rwlock_init(&n->ep_lock, NULL);
  pthread_once(&log_once, push_log_handler);
  log_owner_set(p->log, NULL);
  int rc = start_context(n, why, why_cap);
  if (rc == ECC_OK)
    rc = start_worker(n, why, why_cap);
  if (rc == ECC_OK)
    rc = map_region(n, why, why_cap);
  if (rc == ECC_OK)
    rc = open_side(n, why, why_cap);
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

void net_destroy(struct net *n)
{
  if (n == NULL)
    return;
  if (n->thread_started) {
    atomic_store(&n->stop, true);
    ucp_worker_signal(n->worker);
    pthread_join(n->thread, NULL);
  }
  if (n->listener != NULL)
    ucp_listener_destroy(n->listener);
  for (unsigned i = 0; i < n->n_peers; i++) {
    close_ep(n, n->peers[i]);
    free(n->peers[i]);
  }
  if (n->rkey_buf != NULL)
    ucp_rkey_buffer_release(n->rkey_buf);
  if (n->memh != NULL)
    ucp_mem_unmap(n->ctx, n->memh);
  if (n->worker != NULL)
    ucp_worker_destroy(n->worker);
  if (n->ctx != NULL)
    ucp_cleanup(n->ctx);
  log_owner_set(NULL, n->p.log);
  pthread_rwlock_destroy(&n->ep_lock);
  pthread_mutex_destroy(&n->lock);
  free(n);
}
