/* SPDX-License-Identifier: Apache-2.0 */
/*
 * client.h - the consumer host's side of the ucx plugin: lookups go to the
 * server, which pins what it finds; a load asks the server for the entry's
 * bytes, which arrive as data messages into the local region (its directory
 * keeps the entry under the same key), then the local engine copies them to
 * the destination and the server's pin is released. With ucx.cache = false
 * the bytes land in the destination as they arrive, and nothing is kept.
 *
 * Tokens of remote pins are valid in the process that looked them up. A
 * load's completion is reported by poll, like the shm connector's; its
 * copy to the destination starts once the bytes have arrived, so the host
 * engine only (it takes no streams): a CUDA engine is refused at create.
 */
#ifndef ECC_UCX_CLIENT_H
#define ECC_UCX_CLIENT_H

#include "connector.h"
#include "ucx_config.h"

struct ucx_client;

/* Connects and shakes hands with the server within cfg->connect_ms.
 * ECC_ERR_TRANSFER if it cannot be reached or does not answer; the
 * server's code (ECC_ERR_INCOMPATIBLE for another layout or protocol) and
 * reason if it refuses. */
int ucx_client_start(struct conn *conn, const struct ucx_config *cfg, char *err, size_t err_cap,
                     struct ucx_client **out);

int ucx_client_lookup(struct ucx_client *cl, const char *const *keys, size_t n, uint32_t ranks,
                      ecc_entry_v1_t *out);
int ucx_client_load_pinned(struct ucx_client *cl, const ecc_load_pinned_v1_t *e, size_t n,
                           void *stream);
int ucx_client_unpin(struct ucx_client *cl, uint64_t token);
/* Failed pulls first, then the local connector's completions. */
int ucx_client_poll(struct ucx_client *cl, ecc_completion_v1_t *out, size_t cap, size_t *n_out);

/* Waits for pulls in flight (at most the deadline), releases the remote
 * pins still held, disconnects, frees. */
void ucx_client_stop(struct ucx_client *cl);

#endif
