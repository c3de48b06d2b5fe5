/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_calls.c - the cache functions of ABI 1.2 on an open connector: the
 * guard every call has, ECC_ERR_UNSUPPORTED where an older plugin lacks a
 * function, and checks of the records the plugin hands back (states, types,
 * events) before the host reads them.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "common/tensor.h"
#include "ecc_host.h"
#include "host-shim/shim_connector.h"

ECC_API const char *ecc_dtype_name(uint32_t dtype)
{
  return tensor_dtype_name(dtype);
}

ECC_API size_t ecc_dtype_bytes(uint32_t dtype)
{
  return tensor_dtype_bytes(dtype);
}

/* A descriptor the host can print and size without reading past it. */
static bool type_sane(const ecc_tensor_t *t)
{
  return tensor_dtype_name(t->dtype) != NULL && t->n_dims <= ECC_TENSOR_MAX_DIMS;
}

static int check_meta(ecc_connector_t *c, const char *what, const ecc_entry_meta_t *meta, size_t n)
{
  for (size_t i = 0; meta != NULL && i < n; i++)
    if (!type_sane(&meta[i].type))
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' answered %s with a malformed type (record %zu: dtype %" PRIu32
                       ", %" PRIu32 " dims)",
                       c->plugin.ops.name, what, i, meta[i].type.dtype, meta[i].type.n_dims);
  return ECC_OK;
}

static int ranks_bounded(ecc_connector_t *c, const char *what, uint32_t ranks)
{
  if (ranks <= ECC_RANKS_MAX)
    return ECC_OK;
  return shim_fail(c, ECC_ERR_INVALID,
                   "%s: ranks is %" PRIu32 ", above ECC_RANKS_MAX (%d): one release per rank "
                   "of the engine that loads the entry",
                   what, ranks, ECC_RANKS_MAX);
}

ECC_API int ecc_reserve_ex(ecc_connector_t *c, const ecc_reserve_args_t *args, ecc_entry_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.reserve_ex == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "reserve_ex", c->plugin.ops.reserve_ex(c->handle, args, out));
  if (rc == ECC_OK) {
    rc = shim_check_entry(c, "reserve_ex", 0, out);
    if (rc == ECC_OK && out->state == ECC_ENTRY_ABSENT)
      rc = shim_fail(c, ECC_ERR_INCOMPATIBLE,
                     "plugin '%s' answered reserve_ex with an absent entry", c->plugin.ops.name);
  }
  shim_leave(c, rc);
  return rc;
}

static int check_peeked(ecc_connector_t *c, const ecc_peek_t *out, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    int32_t st = out[i].state;
    if ((st != ECC_ENTRY_ABSENT && st != ECC_ENTRY_WRITING && st != ECC_ENTRY_READY) ||
        !type_sane(&out[i].meta.type))
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' answered peek with a malformed record %zu (state %" PRId32
                       ", dtype %" PRIu32 ", %" PRIu32 " dims)",
                       c->plugin.ops.name, i, st, out[i].meta.type.dtype, out[i].meta.type.n_dims);
  }
  return ECC_OK;
}

ECC_API int ecc_peek(ecc_connector_t *c, const char *const *keys, size_t n, ecc_peek_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.peek == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "peek", c->plugin.ops.peek(c->handle, keys, n, out));
  if (rc == ECC_OK && out != NULL)
    rc = check_peeked(c, out, n);
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_wait_ready(ecc_connector_t *c, const char *key, uint32_t ranks, uint64_t timeout_ns,
                           ecc_entry_t *out, ecc_entry_meta_t *meta)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.wait_ready == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = ranks_bounded(c, "wait_ready", ranks);
  if (rc == ECC_OK)
    rc = shim_checked(c, "wait_ready",
                      c->plugin.ops.wait_ready(c->handle, key, ranks, timeout_ns, out, meta));
  if (rc == ECC_OK) {
    rc = shim_check_entry(c, "wait_ready", 0, out);
    if (rc == ECC_OK && out->state == ECC_ENTRY_RESERVED)
      rc = shim_fail(c, ECC_ERR_INCOMPATIBLE, "plugin '%s' answered wait_ready with a reservation",
                     c->plugin.ops.name);
  }
  if (rc == ECC_OK)
    rc = check_meta(c, "wait_ready", meta, 1);
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_lookup_ex(ecc_connector_t *c, const char *const *keys, size_t n, uint32_t ranks,
                          ecc_entry_t *out, ecc_entry_meta_t *meta)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.lookup_ex == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = ranks_bounded(c, "lookup_ex", ranks);
  if (rc == ECC_OK)
    rc =
        shim_checked(c, "lookup_ex", c->plugin.ops.lookup_ex(c->handle, keys, n, ranks, out, meta));
  for (size_t i = 0; rc == ECC_OK && out != NULL && i < n; i++) {
    rc = shim_check_entry(c, "lookup_ex", i, &out[i]);
    if (rc == ECC_OK && out[i].state != ECC_ENTRY_READY && out[i].state != ECC_ENTRY_ABSENT)
      rc = shim_fail(c, ECC_ERR_INCOMPATIBLE,
                     "plugin '%s' answered lookup_ex with state %" PRId32
                     " (record %zu): only ready or absent",
                     c->plugin.ops.name, out[i].state, i);
  }
  if (rc == ECC_OK)
    rc = check_meta(c, "lookup_ex", meta, n);
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_load_typed(ecc_connector_t *c, const ecc_load_typed_t *entries, size_t n,
                           void *compute_stream)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.load_typed == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "load_typed",
                      c->plugin.ops.load_typed(c->handle, entries, n, compute_stream));
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_list_ex(ecc_connector_t *c, uint64_t *cursor, ecc_listed_t *out,
                        ecc_entry_meta_t *meta, size_t cap, size_t *n_out)
{
  if (c == NULL || n_out == NULL)
    return ECC_ERR_INVALID;
  *n_out = 0;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  size_t n = 0;
  if (c->plugin.ops.list_ex == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "list_ex", c->plugin.ops.list_ex(c->handle, cursor, out, meta, cap, &n));
  if (rc == ECC_OK)
    rc = shim_check_listed(c, out, n, cap);
  if (rc == ECC_OK)
    rc = check_meta(c, "list_ex", meta, n);
  if (rc == ECC_OK)
    *n_out = n;
  shim_leave(c, rc);
  return rc;
}

static bool event_kind_known(int32_t kind)
{
  switch (kind) {
#define EVENT_CASE(name, value, text) case name:
    ECC_EVENT_MAP(EVENT_CASE)
#undef EVENT_CASE
    return true;
  default:
    return false;
  }
}

static int check_events(ecc_connector_t *c, const ecc_event_t *out, size_t n, size_t cap)
{
  if (n > cap)
    return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                     "plugin '%s' returned %zu events into room for %zu; none is passed on",
                     c->plugin.ops.name, n, cap);
  for (size_t i = 0; i < n; i++)
    if (!event_kind_known(out[i].kind) || memchr(out[i].key, '\0', sizeof(out[i].key)) == NULL)
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' returned a malformed event (record %zu: kind %" PRId32 ")",
                       c->plugin.ops.name, i, out[i].kind);
  return ECC_OK;
}

ECC_API int ecc_events(ecc_connector_t *c, uint64_t *cursor, ecc_event_t *out, size_t cap,
                       size_t *n_out, uint64_t *lost)
{
  if (c == NULL || n_out == NULL)
    return ECC_ERR_INVALID;
  *n_out = 0;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  size_t n = 0;
  if (c->plugin.ops.events == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "events", c->plugin.ops.events(c->handle, cursor, out, cap, &n, lost));
  if (rc == ECC_OK)
    rc = check_events(c, out, n, cap);
  if (rc == ECC_OK)
    *n_out = n;
  shim_leave(c, rc);
  return rc;
}
