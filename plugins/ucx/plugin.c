/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c - the exported ABI table of the cross-host connector. Each side
 * keeps a local cache (core/conn.h: its region and directory); the server role
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
#include "core/conn.h"
#include "ecc_build_info.h"
#include "ecc_plugin_v1.h"
#include "plugins/ucx/client.h"
#include "plugins/ucx/server.h"
#include "plugins/ucx/ucx_config.h"

/* What a handle of this plugin holds: the local cache, and the role's
 * side of the link on top of it. */
struct ucx_conn {
  struct conn *local; /* its region and directory */
  struct ucx_config cfg;
  struct ucx_server *server; /* server role */
  struct ucx_client *client; /* client role */
};

/* Stops the role's side, then the local cache under it (the side's
 * threads use the cache until they are stopped). */
static void ucx_conn_destroy(struct ucx_conn *u)
{
  ucx_client_stop(u->client);
  ucx_server_stop(u->server);
  if (u->local != NULL)
    conn_destroy(u->local);
  free(u);
}

static int side_start(struct ucx_conn *u, char *err, size_t cap)
{
  return u->cfg.role == UCX_ROLE_SERVER ? ucx_server_start(u->local, &u->cfg, err, cap, &u->server)
                                        : ucx_client_start(u->local, &u->cfg, err, cap, &u->client);
}

static int ucx_create(const ecc_create_args_v1_t *args, ecc_handle_t *out)
{
  int rc = create_args_check(args, out);
  if (rc != ECC_OK)
    return rc;
  struct ucx_conn *u = calloc(1, sizeof(*u));
  if (u == NULL)
    rc = errtext_fail(args->err, args->err_cap, ECC_ERR_NOMEM, "create: out of memory");
  struct plugin_config local;
  if (rc == ECC_OK)
    rc = ucx_config_parse(args->config, args->n_config, &u->cfg, &local, args->err, args->err_cap);
  /* A client caches what it pulls in its own directory: it reserves and
   * looks up there, whatever role the host named. */
  if (rc == ECC_OK && u->cfg.role == UCX_ROLE_CLIENT)
    local.role = ROLE_BOTH;
  if (rc == ECC_OK)
    rc = conn_create(&local, args->host, args->err, args->err_cap, &u->local);
  if (rc == ECC_OK)
    rc = side_start(u, args->err, args->err_cap);
  if (rc == ECC_OK)
    rc = handles_add_reporting(u, out, args->err, args->err_cap);
  if (rc != ECC_OK && u != NULL)
    ucx_conn_destroy(u);
  if (rc != ECC_OK && args->host != NULL && args->host->log != NULL && args->err != NULL)
    args->host->log(args->host->user, ECC_LOG_ERROR, args->err);
  return rc;
}

/* Calls the local cache answers on both sides. */
static int ucx_conn_save(struct ucx_conn *u, const ecc_save_entry_v1_t *e, size_t n)
{
  return conn_save(u->local, e, n);
}

static int ucx_conn_flush(struct ucx_conn *u, void *stream)
{
  return conn_flush(u->local, stream);
}

static int ucx_conn_load(struct ucx_conn *u, const ecc_load_entry_v1_t *e, size_t n, void *stream)
{
  return conn_load(u->local, e, n, stream);
}

static int ucx_conn_stats(struct ucx_conn *u, ecc_stats_v1_t *out)
{
  return conn_stats(u->local, out);
}

static int ucx_conn_last_error(struct ucx_conn *u, char *buf, size_t cap)
{
  return conn_last_error(u->local, buf, cap);
}

static int ucx_conn_describe(struct ucx_conn *u, ecc_info_v1_t *out)
{
  return conn_describe(u->local, out);
}

static int ucx_conn_reserve(struct ucx_conn *u, const char *key, uint64_t nbytes,
                            ecc_entry_v1_t *out)
{
  return conn_reserve(u->local, key, nbytes, out);
}

static int ucx_conn_save_reserved(struct ucx_conn *u, const ecc_save_reserved_v1_t *e, size_t n)
{
  return conn_save_reserved(u->local, e, n);
}

static int ucx_conn_abort_reserved(struct ucx_conn *u, uint64_t token)
{
  return conn_abort_reserved(u->local, token);
}

static int ucx_conn_remove(struct ucx_conn *u, const char *key)
{
  return conn_remove(u->local, key);
}

static int ucx_conn_list(struct ucx_conn *u, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap,
                         size_t *n_out)
{
  return conn_list(u->local, cursor, out, cap, n_out);
}

/* Calls a client sends to the server; a server answers them locally. */
static int ucx_conn_poll(struct ucx_conn *u, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  return u->client != NULL ? ucx_client_poll(u->client, out, cap, n_out)
                           : conn_poll(u->local, out, cap, n_out);
}

static int ucx_conn_lookup(struct ucx_conn *u, const char *const *keys, size_t n, uint32_t ranks,
                           ecc_entry_v1_t *out)
{
  return u->client != NULL ? ucx_client_lookup(u->client, keys, n, ranks, out)
                           : conn_lookup(u->local, keys, n, ranks, out);
}

static int ucx_conn_load_pinned(struct ucx_conn *u, const ecc_load_pinned_v1_t *e, size_t n,
                                void *stream)
{
  return u->client != NULL ? ucx_client_load_pinned(u->client, e, n, stream)
                           : conn_load_pinned(u->local, e, n, stream);
}

static int ucx_conn_unpin(struct ucx_conn *u, uint64_t token)
{
  return u->client != NULL ? ucx_client_unpin(u->client, token) : conn_unpin(u->local, token);
}

/* The calls made on an open handle, each forwarded between handles_enter
 * and handles_leave: X(entry point, call, parameters, arguments). */
#define UCX_HANDLE_CALLS(X)                                                                        \
  X(ucx_save, ucx_conn_save, (ecc_handle_t h, const ecc_save_entry_v1_t *entries, size_t n),       \
    (c, entries, n))                                                                               \
  X(ucx_flush, ucx_conn_flush, (ecc_handle_t h, void *compute_stream), (c, compute_stream))        \
  X(ucx_load, ucx_conn_load,                                                                       \
    (ecc_handle_t h, const ecc_load_entry_v1_t *entries, size_t n, void *compute_stream),          \
    (c, entries, n, compute_stream))                                                               \
  X(ucx_poll, ucx_conn_poll,                                                                       \
    (ecc_handle_t h, ecc_completion_v1_t * out, size_t cap, size_t * n_out), (c, out, cap, n_out)) \
  X(ucx_stats, ucx_conn_stats, (ecc_handle_t h, ecc_stats_v1_t * out), (c, out))                   \
  X(ucx_last_error, ucx_conn_last_error, (ecc_handle_t h, char *buf, size_t cap), (c, buf, cap))   \
  X(ucx_describe, ucx_conn_describe, (ecc_handle_t h, ecc_info_v1_t * out), (c, out))              \
  X(ucx_reserve, ucx_conn_reserve,                                                                 \
    (ecc_handle_t h, const char *key, uint64_t nbytes, ecc_entry_v1_t *out),                       \
    (c, key, nbytes, out))                                                                         \
  X(ucx_save_reserved, ucx_conn_save_reserved,                                                     \
    (ecc_handle_t h, const ecc_save_reserved_v1_t *entries, size_t n), (c, entries, n))            \
  X(ucx_abort_reserved, ucx_conn_abort_reserved, (ecc_handle_t h, uint64_t token), (c, token))     \
  X(ucx_lookup, ucx_conn_lookup,                                                                   \
    (ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks, ecc_entry_v1_t *out),      \
    (c, keys, n, ranks, out))                                                                      \
  X(ucx_load_pinned, ucx_conn_load_pinned,                                                         \
    (ecc_handle_t h, const ecc_load_pinned_v1_t *entries, size_t n, void *compute_stream),         \
    (c, entries, n, compute_stream))                                                               \
  X(ucx_unpin, ucx_conn_unpin, (ecc_handle_t h, uint64_t token), (c, token))                       \
  X(ucx_remove, ucx_conn_remove, (ecc_handle_t h, const char *key), (c, key))                      \
  X(ucx_list, ucx_conn_list,                                                                       \
    (ecc_handle_t h, uint64_t * cursor, ecc_listed_v1_t * out, size_t cap, size_t * n_out),        \
    (c, cursor, out, cap, n_out))

UCX_HANDLE_CALLS(HANDLES_FORWARD)

static int ucx_shutdown(ecc_handle_t h)
{
  void *u;
  int rc = handles_remove(h, &u);
  if (rc != ECC_OK)
    return rc;
  ucx_conn_destroy(u);
  return ECC_OK;
}

static int ucx_validate(const ecc_kv_v1_t *config, size_t n_config, char *err, size_t err_cap)
{
  struct ucx_config ucx;
  struct plugin_config local;
  int rc = ucx_config_parse(config, n_config, &ucx, &local, err, err_cap);
  bool named = rc == ECC_OK && strcmp(ucx.host, ucx.addr) != 0;
  if (rc == ECC_OK && err != NULL && err_cap > 0)
    snprintf(err, err_cap, "ucx %s at %s%s%s%s port %u over %s; local region: ",
             ucx.role == UCX_ROLE_SERVER ? "server" : "client", named ? ucx.host : "",
             named ? " (" : "", ucx.addr, named ? ")" : "", ucx.port, ucx.transports);
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
