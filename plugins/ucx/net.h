/* SPDX-License-Identifier: Apache-2.0 */
/*
 * net.h - the UCX layer of the cross-host plugin: one UCP context and
 * worker per connector, a progress thread that owns the worker, a listener
 * of its own (server role) or one endpoint (client role), messages both
 * ways, RMA gets from the peer's registered region, and notice of a failed
 * peer. It knows nothing of the wire format: a message is bytes.
 *
 * No UCX endpoint exists before a peer has passed the preface (gate.h)
 * over a plain TCP connection to the server's port: the protocol version
 * and, with a shared secret, a proof of it each way; then the endpoints
 * are made from the worker addresses the two sides exchanged. UCX's own
 * connection manager (which aborted the process on malformed bytes) never
 * listens.
 *
 * Threading: callbacks run on the progress thread, one at a time, and must
 * not block; net_send and net_get may be called from any thread, also from
 * a callback. UCX's own log goes to the connector's log (net_create installs
 * the handler once per process; UCX prints nothing to stderr after that),
 * held while the thread is inside one of the connector's locks, and never
 * sent with a lock of this layer held.
 */
#ifndef ECC_UCX_NET_H
#define ECC_UCX_NET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"

struct net;
struct net_peer;

struct net_callbacks {
  void *user;
  /* A server's new peer, before any of its messages. */
  void (*on_connect)(void *user, struct net_peer *p);
  /* A message from p; buf lives for the call only. */
  void (*on_message)(void *user, struct net_peer *p, const uint8_t *buf, size_t len);
  /* p failed (killed, unreachable, closed): nothing more comes from it, and
   * its gets in flight complete with an error. Called once per peer. */
  void (*on_peer_error)(void *user, struct net_peer *p, int code, const char *why);
  /* A data message from p (net_send_data): its header and its bytes, both
   * living for the call only. */
  void (*on_data)(void *user, struct net_peer *p, const uint8_t *hdr, size_t hlen,
                  const uint8_t *data, size_t len);
  /* On the progress thread, about every 100 ms whether or not anything
   * arrives (deadlines are watched here); may be NULL. */
  void (*on_tick)(void *user);
};

struct net_params {
  int server;              /* 1: listen on addr:port; 0: connect to addr:port */
  const char *addr;        /* numeric IPv4 or IPv6 address */
  uint16_t port;           /* > 0 */
  const char *transports;  /* UCX transports (UCX_TLS), e.g. "tcp" */
  const char *net_devices; /* UCX_NET_DEVICES, or NULL for all */
  uint32_t preface_ms;     /* client: the longest its preface may take; server: each step of a
                            * peer's, and a peer's first message after it; 0: 5000 */
  const uint8_t *secret;   /* the shared secret's key (SHA256_BYTES), copied; NULL: none */
  void *region;            /* memory registered for RMA: the server's is read by */
  size_t region_bytes;     /* its peers, the client's is where gets land */
  struct ecc_log *log;
  struct net_callbacks cb;
};

/* Starts the layer. A client passes the preface with the server within
 * preface_ms, then makes its endpoint, which connects in the background (a
 * peer lost later shows as on_peer_error, and as ECC_ERR_TRANSFER from
 * later sends). Errors: ECC_ERR_CONFIG for a bad address or transport, or a
 * secret one side has and the other has not or differs;
 * ECC_ERR_TRANSFER for a server that cannot be reached, does not answer in
 * time or is not one of this plugin; ECC_ERR_INCOMPATIBLE for another wire
 * version; ECC_ERR_SYSTEM when UCX cannot start; nothing is left behind.
 * *out is set before the first callback can run.
 *
 * A server's peer that fails is closed and freed on the progress thread
 * after its on_peer_error: the callee keeps no pointer to it past that call.
 * A peer that sends no message within preface_ms of its endpoint is given
 * up (on_peer_error). */
int net_create(const struct net_params *p, struct net **out, char *why, size_t why_cap);

/* Whether the calling thread is the progress thread of a layer of this
 * process, any of them: the host's log callback runs there for what the
 * callbacks say. A call that waits for an answer must not be made there:
 * a client's answers come through its own layer's thread, and a server of
 * this process answers through its own. */
bool net_on_a_progress_thread(void);

/* The client's only peer (NULL for a server). */
struct net_peer *net_server_peer(struct net *n);

/* Queues a copy of buf for p. ECC_ERR_TRANSFER if p has failed. */
int net_send(struct net *n, struct net_peer *p, const void *buf, size_t len);

/* Queues a data message: hlen bytes of header (copied) and len bytes at
 * data, read in place, so they must stay as they are until done(arg,
 * ECC_OK or ECC_ERR_TRANSFER) runs (exactly once, on the progress thread,
 * or before this returns when the send completes at once). A refused call
 * returns the error and never calls done. */
int net_send_data(struct net *n, struct net_peer *p, const void *hdr, size_t hlen, const void *data,
                  size_t len, void (*done)(void *arg, int status), void *arg);

/* The packed remote key of this side's region, for the peer's gets
 * (valid until net_destroy), and its base address. */
int net_region_key(struct net *n, const void **rkey, size_t *len, uint64_t *base);

/* Accepts p's packed key and base, so that net_get can read its region. */
int net_peer_region(struct net *n, struct net_peer *p, const void *rkey, size_t len, uint64_t base);

/* Reads len bytes at offset `off` of p's region into `local` (inside this
 * side's region). done(arg, ECC_OK or ECC_ERR_TRANSFER) runs exactly once,
 * on the progress thread or, if the get completes at once, before net_get
 * returns. A refused call (p failed, no key, range outside) returns the
 * error and never calls done. */
int net_get(struct net *n, struct net_peer *p, void *local, size_t len, uint64_t off,
            void (*done)(void *arg, int status), void *arg);

/* Gives p up (a deadline passed): its endpoint is closed at once, forced,
 * its gets in flight complete with ECC_ERR_TRANSFER, later calls on it fail,
 * and on_peer_error is called with why if it had not been. */
void net_peer_fail(struct net *n, struct net_peer *p, const char *why);

/* Stops the progress thread, closes every endpoint (gets in flight complete
 * with ECC_ERR_TRANSFER), unregisters the region, frees everything. */
void net_destroy(struct net *n);

/* net_destroy for a layer whose log lives on (a client's reconnect): UCX
 * lines other threads are sending to it are not waited for. net_destroy
 * waits for them, since its caller may free the log next. */
void net_destroy_keeping_log(struct net *n);

#endif
