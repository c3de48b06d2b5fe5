/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h - the consumer host's side of the ucx plugin: lookups go to the
 * server, which pins what it finds; a load asks the server for the entry's
 * bytes, which arrive as data messages into a reservation in the local
 * region (its directory then keeps the entry under the same key), and the
 * server's pin is released. With the host engine each chunk is also written
 * to the destination as it arrives; with the CUDA engine the copy to the
 * destination is queued on the caller's stream at once and held on the
 * device until the last chunk is in. With ucx.cache = false (host engine
 * only) the bytes land in the destination alone and nothing is kept.
 *
 * Tokens are usable by every process of the host's group (those sharing
 * the region): one that a process did not look up itself is described by
 * the server first. A load's completion is reported by poll, like the shm
 * connector's.
 */
#ifndef ECC_UCX_CLIENT_H
#define ECC_UCX_CLIENT_H

#include "core/conn.h"
#include "plugins/ucx/ucx_config.h"

struct ucx_client;

/* Connects, passes the preface and shakes hands with the server, all
 * within cfg->connect_ms. ECC_ERR_TRANSFER if it cannot be reached, does
 * not answer or is not a server of this plugin; ECC_ERR_CONFIG when the
 * two sides' ucx.secret_file differ; the server's code
 * (ECC_ERR_INCOMPATIBLE for another layout or wire version) and reason if
 * it refuses. */
int ucx_client_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_client **out);

/* Lookup, load_pinned and unpin wait for the network: made on a progress
 * thread of this plugin (from the host's log callback), through which
 * their answers come, they return ECC_ERR_BUSY at once. */
int ucx_client_lookup(struct ucx_client *cl, const char *const *keys, size_t n, uint32_t ranks,
                      ecc_entry_v1_t *out);
int ucx_client_load_pinned(struct ucx_client *cl, const ecc_load_pinned_v1_t *e, size_t n,
                           void *stream);
int ucx_client_unpin(struct ucx_client *cl, uint64_t token);
/* Failed pulls first, then the local connector's completions. */
int ucx_client_poll(struct ucx_client *cl, ecc_completion_v1_t *out, size_t cap, size_t *n_out);

/* Waits for pulls in flight (at most the deadline), disconnects (the
 * server then hands the pins still held to another process of the group,
 * or drops them), frees. */
void ucx_client_stop(struct ucx_client *cl);

#endif
