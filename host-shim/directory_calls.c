/* SPDX-License-Identifier: Apache-2.0 */
/*
 * directory_calls.c - the directory functions of ABI 1.1 on an open
 * connector: the same guard as every call, ECC_ERR_UNSUPPORTED where the
 * plugin (of ABI 1.0, or without a directory) lacks a function, and checks
 * of the entries and listings the plugin hands back.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/shim_connector.h"

bool shim_state_known(int32_t state)
{
  switch (state) {
#define STATE_CASE(name, value, text) case name:
    ECC_ENTRY_STATE_MAP(STATE_CASE)
#undef STATE_CASE
    return true;
  default:
    return false;
  }
}

/* An entry the host may read safely: a known state, extents that fit, and
 * a token wherever the state promises one. */
int shim_check_entry(ecc_connector_t *c, const char *what, size_t i, const ecc_entry_t *e)
{
  bool absent = e->state == ECC_ENTRY_ABSENT;
  bool extents_ok =
      absent ? e->n_extents == 0 : e->n_extents >= 1 && e->n_extents <= ECC_ENTRY_MAX_EXTENTS;
  bool token_ok = e->state != ECC_ENTRY_RESERVED || e->token != 0;
  if (shim_state_known(e->state) && extents_ok && token_ok)
    return ECC_OK;
  return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                   "plugin '%s' returned a malformed entry from %s (record %zu: state %" PRId32
                   ", %" PRIu32 " extents, token %" PRIu64 ")",
                   c->plugin.ops.name, what, i, e->state, e->n_extents, e->token);
}

ECC_API int ecc_reserve(ecc_connector_t *c, const char *key, uint64_t nbytes, ecc_entry_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.reserve == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "reserve", c->plugin.ops.reserve(c->handle, key, nbytes, out));
  if (rc == ECC_OK) {
    rc = shim_check_entry(c, "reserve", 0, out);
    if (rc == ECC_OK && out->state == ECC_ENTRY_ABSENT)
      rc = shim_fail(c, ECC_ERR_INCOMPATIBLE, "plugin '%s' answered reserve with an absent entry",
                     c->plugin.ops.name);
  }
  shim_leave(c, rc);
  return rc;
}

/* The directory calls that answer with a status only, each forwarded
 * between the guard's enter and leave: X(entry point, member of the plugin's
 * table, parameters, arguments). */
#define DIRECTORY_STATUS_CALLS(X)                                                                  \
  X(ecc_save_reserved, save_reserved,                                                              \
    (ecc_connector_t * c, const ecc_save_reserved_t *entries, size_t n), (c->handle, entries, n))  \
  X(ecc_abort_reserved, abort_reserved, (ecc_connector_t * c, uint64_t token), (c->handle, token)) \
  X(ecc_unpin, unpin, (ecc_connector_t * c, uint64_t token), (c->handle, token))                   \
  X(ecc_remove, remove, (ecc_connector_t * c, const char *key), (c->handle, key))                  \
  X(ecc_load_pinned, load_pinned,                                                                  \
    (ecc_connector_t * c, const ecc_load_pinned_t *entries, size_t n, void *compute_stream),       \
    (c->handle, entries, n, compute_stream))

#define DIRECTORY_STATUS_CALL(entry, member, params, args)      \
  ECC_API int entry params                                      \
  {                                                             \
    if (c == NULL)                                              \
      return ECC_ERR_INVALID;                                   \
    int rc = shim_enter(c);                                     \
    if (rc != ECC_OK)                                           \
      return rc;                                                \
    if (c->plugin.ops.member == NULL)                           \
      rc = ECC_ERR_UNSUPPORTED;                                 \
    else                                                        \
      rc = shim_checked(c, #member, c->plugin.ops.member args); \
    shim_leave(c, rc);                                          \
    return rc;                                                  \
  }
DIRECTORY_STATUS_CALLS(DIRECTORY_STATUS_CALL)
#undef DIRECTORY_STATUS_CALL

static int check_lookup(ecc_connector_t *c, const ecc_entry_t *out, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    int rc = shim_check_entry(c, "lookup", i, &out[i]);
    if (rc != ECC_OK)
      return rc;
    if (out[i].state != ECC_ENTRY_READY && out[i].state != ECC_ENTRY_ABSENT)
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' answered lookup with state %" PRId32
                       " (record %zu): only ready or absent",
                       c->plugin.ops.name, out[i].state, i);
  }
  return ECC_OK;
}

ECC_API int ecc_lookup(ecc_connector_t *c, const char *const *keys, size_t n, uint32_t ranks,
                       ecc_entry_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.lookup == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else if (ranks > ECC_RANKS_MAX) /* whatever the plugin would do: no pin beyond the bound */
    rc = shim_fail(c, ECC_ERR_INVALID,
                   "lookup: ranks is %" PRIu32 ", above ECC_RANKS_MAX (%d): one release per rank "
                   "of the engine that loads the entry",
                   ranks, ECC_RANKS_MAX);
  else
    rc = shim_checked(c, "lookup", c->plugin.ops.lookup(c->handle, keys, n, ranks, out));
  if (rc == ECC_OK && out != NULL)
    rc = check_lookup(c, out, n);
  shim_leave(c, rc);
  return rc;
}

int shim_check_listed(ecc_connector_t *c, const ecc_listed_t *out, size_t n, size_t cap)
{
  if (n > cap)
    return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                     "plugin '%s' listed %zu entries into room for %zu; none is passed on",
                     c->plugin.ops.name, n, cap);
  for (size_t i = 0; i < n; i++) {
    bool state_ok = out[i].state == ECC_ENTRY_RESERVED || out[i].state == ECC_ENTRY_READY;
    if (!state_ok || memchr(out[i].key, '\0', sizeof(out[i].key)) == NULL)
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' listed a malformed entry (record %zu: state %" PRId32 "%s)",
                       c->plugin.ops.name, i, out[i].state, state_ok ? ", key not terminated" : "");
  }
  return ECC_OK;
}

ECC_API int ecc_list(ecc_connector_t *c, uint64_t *cursor, ecc_listed_t *out, size_t cap,
                     size_t *n_out)
{
  if (c == NULL || n_out == NULL)
    return ECC_ERR_INVALID;
  *n_out = 0;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  size_t n = 0;
  if (c->plugin.ops.list == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "list", c->plugin.ops.list(c->handle, cursor, out, cap, &n));
  if (rc == ECC_OK)
    rc = shim_check_listed(c, out, n, cap);
  if (rc == ECC_OK)
    *n_out = n;
  shim_leave(c, rc);
  return rc;
}
