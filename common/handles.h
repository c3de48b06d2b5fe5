/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles.h - maps the ABI's integer handles onto a plugin's connectors
 * (whatever a plugin keeps per handle: a void pointer here).
 *
 * A handle names a slot and the slot's generation. Slots are never freed,
 * so a stale or forged handle is detected (ECC_ERR_CLOSED) instead of
 * touching freed memory, and a call racing with shutdown is counted in the
 * slot and waited for.
 *
 * A handle also belongs to the process that created it. In a child made by
 * fork() the connector's threads do not exist and its region, locks and
 * registrations are the parent's, so there every call on it answers
 * ECC_ERR_CLOSED and shutdown touches nothing (the child's copy of the
 * connector's memory is simply left alone).
 *
 * Handle values stay unique for the life of the process, also when the
 * plugin is unloaded and loaded again and this table starts afresh: each
 * carries the time it was given (see handles.c).
 */
#ifndef ECC_HANDLES_H
#define ECC_HANDLES_H

#include "ecc_plugin_v1.h"

/* Connectors one process may have open at once per plugin. */
#define HANDLE_SLOTS 1024

/* Register c; returns ECC_OK, ECC_ERR_NOMEM when every slot is in use, or
 * ECC_ERR_SYSTEM when the fork handler cannot be registered. */
int handles_add(void *c, ecc_handle_t *out);

/* handles_add for a plugin's create: a failure's reason goes to err. */
int handles_add_reporting(void *c, ecc_handle_t *out, char *err, size_t err_cap);

/* Enter a call on h: returns its connector (and the slot to leave), or
 * NULL if h is not open. Every successful enter needs one leave. */
void *handles_enter(ecc_handle_t h, unsigned *slot);
void handles_leave(unsigned slot);

/* Take h out of service: wait for calls inside it to leave, then hand its
 * connector to the caller for destruction. ECC_ERR_CLOSED if h is not open,
 * or if it was created by another process (this one is a fork of it). */
int handles_remove(ecc_handle_t h, void **out);

/* One entry point of a plugin's table that works on an open handle h: the
 * handle is judged first (the ABI says so), then `fn args` runs on its
 * connector c, whose arguments are the connector's to check. For the
 * X-macro tables of calls in each plugin's plugin.c. */
#define HANDLES_FORWARD(entry, fn, params, args) \
  static int entry params                        \
  {                                              \
    unsigned slot;                               \
    void *c = handles_enter(h, &slot);           \
    if (c == NULL)                               \
      return ECC_ERR_CLOSED;                     \
    int rc = fn args;                            \
    handles_leave(slot);                         \
    return rc;                                   \
  }

#endif /* ECC_HANDLES_H */
