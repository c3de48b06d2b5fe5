/* SPDX-License-Identifier: Apache-2.0 */
/*
 * server.h - the producer host's side of the ucx plugin: it listens, shakes
 * hands, answers lookups from its local directory by pinning entries for
 * the asking client, lends its region's blocks to the client's gets, and
 * drops a client's pins when the client releases them or goes away. What
 * one client may hold is bounded: ucx.client_max_pins pins,
 * ucx.client_max_pulls pulls in flight, ECC_RANKS_MAX ranks a lookup.
 * Everything else (saves, local loads, the directory calls of processes on
 * this host) is the local connector's.
 */
#ifndef ECC_UCX_SERVER_H
#define ECC_UCX_SERVER_H

#include "core/conn.h"
#include "plugins/ucx/ucx_config.h"

struct ucx_server;

/* Starts serving `conn` (kept, not owned) on cfg's address. ECC_ERR_* with
 * the reason in err; nothing left behind on failure. */
int ucx_server_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_server **out);

/* Stops listening, drops every client's pins, frees the server. */
void ucx_server_stop(struct ucx_server *s);

#endif
