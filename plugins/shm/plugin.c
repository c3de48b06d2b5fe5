/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin.c - the exported ABI table of the shared-memory connector: thin
 * entry points that judge the handle and forward to the local cache
 * (core/conn.h). This is the only file whose symbol leaves the .so.
 */
#include <stdbool.h>

#include "common/create_args.h"
#include "common/handles.h"
#include "core/conn.h"
#include "ecc_build_info.h"
#include "ecc_plugin_v1.h"

#define ECC_SHM_VERSION ECC_PROJECT_VERSION

static int shm_create(const ecc_create_args_v1_t *args, ecc_handle_t *out)
{
  int rc = create_args_check(args, out);
  if (rc != ECC_OK)
    return rc;
  struct plugin_config cfg;
  rc = config_parse(args->config, args->n_config, &cfg, args->err, args->err_cap);
  if (rc != ECC_OK) {
    if (args->host != NULL && args->host->log != NULL && args->err != NULL)
      args->host->log(args->host->user, ECC_LOG_ERROR, args->err);
    return rc;
  }
  struct conn *c;
  rc = conn_create(&cfg, args->host, args->err, args->err_cap, &c);
  if (rc != ECC_OK)
    return rc;
  rc = handles_add_reporting(c, out, args->err, args->err_cap);
  if (rc != ECC_OK)
    conn_destroy(c);
  return rc;
}

/* The calls made on an open handle, each forwarded to the connector
 * between handles_enter and handles_leave:
 * X(entry point, connector call, parameters, arguments of the call). */
#define SHM_HANDLE_CALLS(X)                                                                       \
  X(shm_save, conn_save, (ecc_handle_t h, const ecc_save_entry_v1_t *entries, size_t n),          \
    (c, entries, n))                                                                              \
  X(shm_flush, conn_flush, (ecc_handle_t h, void *compute_stream), (c, compute_stream))           \
  X(shm_load, conn_load,                                                                          \
    (ecc_handle_t h, const ecc_load_entry_v1_t *entries, size_t n, void *compute_stream),         \
    (c, entries, n, compute_stream))                                                              \
  X(shm_poll, conn_poll, (ecc_handle_t h, ecc_completion_v1_t * out, size_t cap, size_t * n_out), \
    (c, out, cap, n_out))                                                                         \
  X(shm_stats, conn_stats, (ecc_handle_t h, ecc_stats_v1_t * out), (c, out))                      \
  X(shm_last_error, conn_last_error, (ecc_handle_t h, char *buf, size_t cap), (c, buf, cap))      \
  X(shm_describe, conn_describe, (ecc_handle_t h, ecc_info_v1_t * out), (c, out))                 \
  X(shm_reserve, conn_reserve,                                                                    \
    (ecc_handle_t h, const char *key, uint64_t nbytes, ecc_entry_v1_t *out),                      \
    (c, key, nbytes, out))                                                                        \
  X(shm_save_reserved, conn_save_reserved,                                                        \
    (ecc_handle_t h, const ecc_save_reserved_v1_t *entries, size_t n), (c, entries, n))           \
  X(shm_abort_reserved, conn_abort_reserved, (ecc_handle_t h, uint64_t token), (c, token))        \
  X(shm_lookup, conn_lookup,                                                                      \
    (ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks, ecc_entry_v1_t *out),     \
    (c, keys, n, ranks, out))                                                                     \
  X(shm_load_pinned, conn_load_pinned,                                                            \
    (ecc_handle_t h, const ecc_load_pinned_v1_t *entries, size_t n, void *compute_stream),        \
    (c, entries, n, compute_stream))                                                              \
  X(shm_unpin, conn_unpin, (ecc_handle_t h, uint64_t token), (c, token))                          \
  X(shm_remove, conn_remove, (ecc_handle_t h, const char *key), (c, key))                         \
  X(shm_list, conn_list,                                                                          \
    (ecc_handle_t h, uint64_t * cursor, ecc_listed_v1_t * out, size_t cap, size_t * n_out),       \
    (c, cursor, out, cap, n_out))                                                                 \
  X(shm_reserve_ex, conn_reserve_ex,                                                              \
    (ecc_handle_t h, const ecc_reserve_args_v1_t *args, ecc_entry_v1_t *out), (c, args, out))     \
  X(shm_peek, conn_peek, (ecc_handle_t h, const char *const *keys, size_t n, ecc_peek_v1_t *out), \
    (c, keys, n, out))                                                                            \
  X(shm_wait_ready, conn_wait_ready,                                                              \
    (ecc_handle_t h, const char *key, uint32_t ranks, uint64_t timeout_ns, ecc_entry_v1_t *out,   \
     ecc_entry_meta_v1_t *meta),                                                                  \
    (c, key, ranks, timeout_ns, out, meta))                                                       \
  X(shm_lookup_ex, conn_lookup_ex,                                                                \
    (ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks, ecc_entry_v1_t *out,      \
     ecc_entry_meta_v1_t *meta),                                                                  \
    (c, keys, n, ranks, out, meta))                                                               \
  X(shm_load_typed, conn_load_typed,                                                              \
    (ecc_handle_t h, const ecc_load_typed_v1_t *entries, size_t n, void *compute_stream),         \
    (c, entries, n, compute_stream))                                                              \
  X(shm_list_ex, conn_list_ex,                                                                    \
    (ecc_handle_t h, uint64_t * cursor, ecc_listed_v1_t * out, ecc_entry_meta_v1_t * meta,        \
     size_t cap, size_t * n_out),                                                                 \
    (c, cursor, out, meta, cap, n_out))                                                           \
  X(shm_events, conn_events,                                                                      \
    (ecc_handle_t h, uint64_t * cursor, ecc_event_v1_t * out, size_t cap, size_t * n_out,         \
     uint64_t * lost),                                                                            \
    (c, cursor, out, cap, n_out, lost))

SHM_HANDLE_CALLS(HANDLES_FORWARD)

static int shm_shutdown(ecc_handle_t h)
{
  void *c;
  int rc = handles_remove(h, &c);
  if (rc != ECC_OK)
    return rc;
  conn_destroy(c);
  return ECC_OK;
}

static int shm_validate(const ecc_kv_v1_t *config, size_t n_config, char *err, size_t err_cap)
{
  struct plugin_config cfg;
  int rc = config_parse(config, n_config, &cfg, err, err_cap);
  return rc == ECC_OK ? conn_validate(&cfg, err, err_cap) : rc;
}

#define SHM_CAPS_ANY_ENGINE                                                                \
  (ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE | ECC_CAP_STATS | ECC_CAP_DIRECTORY | \
   ECC_CAP_CACHE)
#ifdef ECC_HAVE_CUDA
#define SHM_CAPS (SHM_CAPS_ANY_ENGINE | ECC_CAP_CUDA_ENGINE)
#else
#define SHM_CAPS SHM_CAPS_ANY_ENGINE
#endif

ECC_PLUGIN_EXPORT const ecc_plugin_v1_t ecc_plugin_v1 = {
    .abi_major = ECC_ABI_V1_MAJOR,
    .abi_minor = ECC_ABI_V1_MINOR,
    .struct_size = sizeof(ecc_plugin_v1_t),
    .caps = SHM_CAPS,
    .name = "shm",
    .version = ECC_SHM_VERSION,
    .params = config_params,
    .n_params = CONFIG_N_PARAMS,
    .create = shm_create,
    .save = shm_save,
    .flush = shm_flush,
    .load = shm_load,
    .poll = shm_poll,
    .shutdown = shm_shutdown,
    .validate = shm_validate,
    .stats = shm_stats,
    .last_error = shm_last_error,
    .describe = shm_describe,
    .reserve = shm_reserve,
    .save_reserved = shm_save_reserved,
    .abort_reserved = shm_abort_reserved,
    .lookup = shm_lookup,
    .load_pinned = shm_load_pinned,
    .unpin = shm_unpin,
    .remove = shm_remove,
    .list = shm_list,
    .reserve_ex = shm_reserve_ex,
    .peek = shm_peek,
    .wait_ready = shm_wait_ready,
    .lookup_ex = shm_lookup_ex,
    .load_typed = shm_load_typed,
    .list_ex = shm_list_ex,
    .events = shm_events,
};
