/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c - the exported ABI table of the cross-host connector. Each side
 * keeps a local shm connector (its region and directory); the server role
 * adds the listener, the client role sends lookups and pinned loads to the
 * server. Every other call is the local connector's. Only this file's
 * symbol leaves libecc-ucx.so.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/create_args.h"
#include "common/errtext.h"
#include "common/handles.h"
#include "core/internal.h"
#include "ecc_build_info.h"
#include "ecc_plugin_v1.h"
#include "plugins/ucx/client.h"
#include "plugins/ucx/server.h"
#include "plugins/ucx/ucx_config.h"

struct ucx_side {
  struct ucx_config cfg;
  struct ucx_server *server; /* server role */
  struct ucx_client *client; /* client role */
};

static struct ucx_client *client_of(struct conn *c)
{
  struct ucx_side *side = c->ext;
  return side != NULL ? side->client : NULL;
}

static void side_stop(struct conn *c)
{
  struct ucx_side *side = c->ext;
  if (side == NULL)
    return;
  ucx_client_stop(side->client);
  ucx_server_stop(side->server);
  free(side);
  c->ext = NULL;
}

static int side_start(struct conn *c, const struct ucx_config *cfg, char *err, size_t cap)
{
  struct ucx_side *side = calloc(1, sizeof(*side));
  if (side == NULL)
    return errtext_fail(err, cap, ECC_ERR_NOMEM, "create: out of memory");
  side->cfg = *cfg;
  int rc = cfg->role == UCX_ROLE_SERVER ? ucx_server_start(c, cfg, err, cap, &side->server)
                                        : ucx_client_start(c, cfg, err, cap, &side->client);
  if (rc != ECC_OK) {
    free(side);
    return rc;
  }
  c->ext = side;
  return ECC_OK;
}

static int ucx_create(const ecc_create_args_v1_t *args, ecc_handle_t *out)
{
  int rc = create_args_check(args, out);
  if (rc != ECC_OK)
    return rc;
  struct ucx_config ucx;
  struct plugin_config local;
  rc = ucx_config_parse(args->config, args->n_config, &ucx, &local, args->err, args->err_cap);
  /* A client caches what it pulls in its own directory: it reserves and
   * looks up there, whatever role the host named. */
  if (rc == ECC_OK && ucx.role == UCX_ROLE_CLIENT)
    local.role = ROLE_BOTH;
  struct conn *c = NULL;
  if (rc == ECC_OK)
    rc = conn_create(&local, args->host, args->err, args->err_cap, &c);
  if (rc == ECC_OK)
    rc = side_start(c, &ucx, args->err, args->err_cap);
  if (rc == ECC_OK)
    rc = handles_add_reporting(c, out, args->err, args->err_cap);
  if (rc != ECC_OK && c != NULL) {
    side_stop(c);
    conn_destroy(c);
  }
  if (rc != ECC_OK && args->host != NULL && args->host->log != NULL && args->err != NULL)
    args->host->log(args->host->user, ECC_LOG_ERROR, args->err);
  return rc;
}

/* Calls the local connector answers on both sides: X(name, parameters,
 * arguments of conn_<name>). */
#define UCX_LOCAL_CALLS(X)                                                                        \
  X(save, (ecc_handle_t h, const ecc_save_entry_v1_t *entries, size_t n), (c, entries, n))        \
  X(flush, (ecc_handle_t h, void *compute_stream), (c, compute_stream))                           \
  X(load, (ecc_handle_t h, const ecc_load_entry_v1_t *entries, size_t n, void *compute_stream),   \
    (c, entries, n, compute_stream))                                                              \
  X(stats, (ecc_handle_t h, ecc_stats_v1_t * out), (c, out))                                      \
  X(last_error, (ecc_handle_t h, char *buf, size_t cap), (c, buf, cap))                           \
  X(describe, (ecc_handle_t h, ecc_info_v1_t * out), (c, out))                                    \
  X(reserve, (ecc_handle_t h, const char *key, uint64_t nbytes, ecc_entry_v1_t *out),             \
    (c, key, nbytes, out))                                                                        \
  X(save_reserved, (ecc_handle_t h, const ecc_save_reserved_v1_t *entries, size_t n),             \
    (c, entries, n))                                                                              \
  X(abort_reserved, (ecc_handle_t h, uint64_t token), (c, token))                                 \
  X(remove, (ecc_handle_t h, const char *key), (c, key))                                          \
  X(list, (ecc_handle_t h, uint64_t * cursor, ecc_listed_v1_t * out, size_t cap, size_t * n_out), \
    (c, cursor, out, cap, n_out))

#define UCX_LOCAL_CALL(name, params, args) HANDLES_FORWARD(ucx_##name, conn_##name, params, args)
UCX_LOCAL_CALLS(UCX_LOCAL_CALL)
#undef UCX_LOCAL_CALL

/* Calls a client sends to the server; a server answers them locally. */
static int poll_on(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  struct ucx_client *cl = client_of(c);
  return cl != NULL ? ucx_client_poll(cl, out, cap, n_out) : conn_poll(c, out, cap, n_out);
}

static int lookup_on(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                     ecc_entry_v1_t *out)
{
  struct ucx_client *cl = client_of(c);
  return cl != NULL ? ucx_client_lookup(cl, keys, n, ranks, out)
                    : conn_lookup(c, keys, n, ranks, out);
}

static int load_pinned_on(struct conn *c, const ecc_load_pinned_v1_t *e, size_t n, void *stream)
{
  struct ucx_client *cl = client_of(c);
  return cl != NULL ? ucx_client_load_pinned(cl, e, n, stream) : conn_load_pinned(c, e, n, stream);
}

static int unpin_on(struct conn *c, uint64_t token)
{
  struct ucx_client *cl = client_of(c);
  return cl != NULL ? ucx_client_unpin(cl, token) : conn_unpin(c, token);
}

HANDLES_FORWARD(ucx_poll, poll_on,
                (ecc_handle_t h, ecc_completion_v1_t *out, size_t cap, size_t *n_out),
                (c, out, cap, n_out))
HANDLES_FORWARD(ucx_lookup, lookup_on,
                (ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks,
                 ecc_entry_v1_t *out),
                (c, keys, n, ranks, out))
HANDLES_FORWARD(ucx_load_pinned, load_pinned_on,
                (ecc_handle_t h, const ecc_load_pinned_v1_t *e, size_t n, void *stream),
                (c, e, n, stream))
HANDLES_FORWARD(ucx_unpin, unpin_on, (ecc_handle_t h, uint64_t token), (c, token))

static int ucx_shutdown(ecc_handle_t h)
{
  struct conn *c;
  int rc = handles_remove(h, &c);
  if (rc != ECC_OK)
    return rc;
  side_stop(c);
  conn_destroy(c);
  return ECC_OK;
}

static int ucx_validate(const ecc_kv_v1_t *config, size_t n_config, char *err, size_t err_cap)
{
  struct ucx_config ucx;
  struct plugin_config local;
  int rc = ucx_config_parse(config, n_config, &ucx, &local, err, err_cap);
  if (rc == ECC_OK && err != NULL && err_cap > 0)
    snprintf(err, err_cap, "ucx %s at %s port %u over %s; local region: ",
             ucx.role == UCX_ROLE_SERVER ? "server" : "client", ucx.addr, ucx.port, ucx.transports);
  if (rc == ECC_OK && err != NULL && err_cap > strlen(err))
    conn_summary(&local, err + strlen(err), err_cap - strlen(err));
  return rc;
}

ECC_PLUGIN_EXPORT const ecc_plugin_v1_t ecc_plugin_v1 = {
    .abi_major = ECC_ABI_V1_MAJOR,
    .abi_minor = ECC_ABI_V1_MINOR,
    .struct_size = sizeof(ecc_plugin_v1_t),
    .caps = ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE | ECC_CAP_STATS | ECC_CAP_DIRECTORY,
    .name = "ucx",
    .version = ECC_PROJECT_VERSION,
    .params = ucx_params,
    .n_params = UCX_N_PARAMS,
    .create = ucx_create,
    .save = ucx_save,
    .flush = ucx_flush,
    .load = ucx_load,
    .poll = ucx_poll,
    .shutdown = ucx_shutdown,
    .validate = ucx_validate,
    .stats = ucx_stats,
    .last_error = ucx_last_error,
    .describe = ucx_describe,
    .reserve = ucx_reserve,
    .save_reserved = ucx_save_reserved,
    .abort_reserved = ucx_abort_reserved,
    .lookup = ucx_lookup,
    .load_pinned = ucx_load_pinned,
    .unpin = ucx_unpin,
    .remove = ucx_remove,
    .list = ucx_list,
};
