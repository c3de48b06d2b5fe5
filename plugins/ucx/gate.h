/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gate.h - both ends of the preface (preface.h) over TCP. A server's gate
 * is its own listener: each connection must pass the preface, step by step
 * within a deadline, before the server makes a UCX endpoint for it; one
 * that sends anything else, too slowly or too much is refused and closed
 * at once, and nothing of it is kept. A client's side is one call that
 * connects, passes the preface and returns the server's worker address.
 *
 * A connection that passed stays open, silent, beside the UCX endpoint:
 * its end (a peer closed, killed, or its host's kernel reset it) tells the
 * other side at once that the peer is gone, whatever UCX notices.
 *
 * Threading: a server's gate is driven by one thread (the UCX layer's
 * progress thread): gate_fds, gate_service and gate_close are not called
 * concurrently.
 */
#ifndef ECC_UCX_GATE_H
#define ECC_UCX_GATE_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"

/* Connections in their preface at once, in all and from one address; past
 * them a connection is closed as soon as it is accepted. */
#define GATE_MAX_PENDING 16u
#define GATE_MAX_PER_ADDRESS 4u

struct gate;

struct gate_params {
  const char *addr; /* numeric IPv4 or IPv6 address to listen on */
  uint16_t port;
  uint32_t step_ms;     /* the longest each step of a peer's preface may take */
  const uint8_t *key;   /* SHA256_BYTES of the shared secret, or NULL */
  const void *own_addr; /* this side's UCX worker address, sent in ACCEPT */
  size_t own_len;
  struct ecc_log *log;
  /* A peer passed: make its endpoint from its worker address, and name it
   * in *cookie. ECC_OK, or an error whose text (why) it is refused with. */
  int (*admit)(void *user, const uint8_t *addr, size_t len, void **cookie, char *why,
               size_t why_cap);
  /* The admitted peer's connection, once the answer is sent: fd is now the
   * callee's; -1 when the answer could not be sent (the peer is to go). */
  void (*linked)(void *user, void *cookie, int fd);
  void *user;
};

/* Listens. ECC_ERR_TRANSFER naming the address if it cannot (port taken,
 * address not on this host); nothing is left behind. */
int gate_open(const struct gate_params *p, struct gate **out, char *why, size_t why_cap);

/* The descriptors to poll (at most 1 + GATE_MAX_PENDING), their events set. */
size_t gate_fds(struct gate *g, struct pollfd *out, size_t cap);

/* After poll on what gate_fds gave (revents set, n as it returned):
 * accepts, reads and answers what is ready, and refuses and closes every
 * connection whose step's deadline has passed. */
void gate_service(struct gate *g, const struct pollfd *fds, size_t n);

/* Connections accepted and refused so far (for tests and logs). */
uint64_t gate_refused(const struct gate *g);

/* Closes the listener and every connection still in its preface. */
void gate_close(struct gate *g);

/* A client's preface with the server at addr:port, all within ms: on
 * ECC_OK *peer_addr (malloc'd, the caller frees) is the server's worker
 * address and *sock the connection, the caller's to keep. Otherwise: ECC_ERR_TRANSFER (unreachable, silent, or not a
 * server of this plugin), ECC_ERR_INCOMPATIBLE (another wire version),
 * or the server's refusal's code; why names the server and the reason. */
int gate_connect(const char *addr, uint16_t port, uint32_t ms, const uint8_t *key,
                 const void *own_addr, size_t own_len, uint8_t **peer_addr, size_t *peer_len,
                 int *sock, char *why, size_t why_cap);

#endif
