/* SPDX-License-Identifier: Apache-2.0 */
/*
 * calls.c - every call on an open connector: the guard that lets ecc_close
 * wait for calls already inside and turn away those that arrive while it
 * runs, the refusal of a connector inherited by a forked child, and the
 * checks of what the plugin hands back before any of it reaches the host.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"
#include "host-shim/shim_connector.h"
#include "host-shim/shim_names.h"

/* ---- the process a connector belongs to ---- */

/* Bumped in every child that fork() makes, so a connector can tell it was
 * inherited with one load instead of a getpid() system call per call. */
static atomic_uint process_gen;
static atomic_int atfork_ok;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
  atomic_fetch_add(&process_gen, 1);
}

static void register_atfork(void)
{
  atomic_store(&atfork_ok, pthread_atfork(NULL, NULL, on_fork_child) == 0);
}

static bool in_forked_child(const ecc_connector_t *c)
{
  if (atomic_load_explicit(&atfork_ok, memory_order_relaxed))
    return c->fork_gen != atomic_load_explicit(&process_gen, memory_order_relaxed);
  return getpid() != c->owner;
}

void shim_connector_init(ecc_connector_t *c)
{
  pthread_once(&atfork_once, register_atfork);
  atomic_init(&c->closing, 0);
  atomic_init(&c->inside, 0);
  atomic_init(&c->fork_logged, 0);
  c->fork_gen = atomic_load(&process_gen);
  c->owner = getpid();
  pthread_mutex_init(&c->err_lock, NULL);
}

void shim_connector_free(ecc_connector_t *c)
{
  pthread_mutex_destroy(&c->err_lock);
  free(c);
}

static void log_line(const ecc_connector_t *c, int level, const char *text)
{
  const ecc_host_services_t *s = &c->services;
  if (s->log != NULL && level <= s->log_level)
    s->log(s->user, level, text);
}

static void forked_text(const ecc_connector_t *c, char *buf, size_t cap)
{
  snprintf(buf, cap,
           "this connector was opened by process %ld and cannot be used in process %ld, "
           "a child made by fork(): every call returns ECC_ERR_CLOSED; open a new connector "
           "in this process",
           (long)c->owner, (long)getpid());
}

/* No lock is taken here: a thread of the parent may have held one at fork. */
static int refuse_forked(ecc_connector_t *c)
{
  if (atomic_exchange(&c->fork_logged, 1) == 0) {
    char text[256];
    forked_text(c, text, sizeof(text));
    log_line(c, ECC_LOG_ERROR, text);
  }
  return ECC_ERR_CLOSED;
}

/* ---- error lines a call also returns ---- */

/* The error lines logged on this thread inside the call in progress, held
 * until it returns: dropped when it fails (the caller has its status and
 * ecc_last_error its text), said when it succeeds (they were about
 * something else). Only for a connector on the default sink. */
enum { HELD_LINES = 4, HELD_TEXT = 512 };
static _Thread_local struct {
  const ecc_connector_t *c; /* the connector whose call is in progress, or NULL */
  unsigned n;
  char text[HELD_LINES][HELD_TEXT];
} held;

void shim_hold_errors(const ecc_connector_t *c)
{
  if (c->quiet_errors && held.c == NULL) {
    held.c = c;
    held.n = 0;
  }
}

void shim_release_errors(const ecc_connector_t *c, int rc)
{
  if (held.c != c)
    return;
  held.c = NULL;
  for (unsigned i = 0; rc == ECC_OK && i < held.n; i++)
    c->sink(c->sink_user, ECC_LOG_ERROR, held.text[i]);
  held.n = 0;
}

void shim_sink(void *user, int level, const char *msg)
{
  const ecc_connector_t *c = user;
  if (level == ECC_LOG_ERROR && held.c == c && held.n < HELD_LINES) {
    snprintf(held.text[held.n++], HELD_TEXT, "%s", msg);
    return;
  }
  c->sink(c->sink_user, level, msg);
}

/* ---- errors the shim finds in a plugin's answers ---- */

int shim_fail(ecc_connector_t *c, int code, const char *fmt, ...)
{
  char text[sizeof(c->shim_err)];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&c->err_lock);
  memcpy(c->shim_err, text, sizeof(text));
  c->shim_err_set = 1;
  pthread_mutex_unlock(&c->err_lock);
  log_line(c, ECC_LOG_ERROR, text);
  return code;
}

/* A status of the closed set passes; anything else is the plugin's fault. A
 * plugin error makes the plugin's own text the most recent one again. */
int shim_checked(ecc_connector_t *c, const char *what, int raw)
{
  if (raw == ECC_OK)
    return ECC_OK;
  if (shim_status_known(raw)) {
    pthread_mutex_lock(&c->err_lock);
    c->shim_err_set = 0;
    pthread_mutex_unlock(&c->err_lock);
    return raw;
  }
  return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                   "plugin '%s' returned %d from %s, which is not an ECC_* status code",
                   c->plugin.ops.name, raw, what);
}

/* ---- the guard around each call ---- */

/* Counting in before looking at `closing` (both sequentially consistent)
 * means ecc_close either sees this call or this call sees it closing. */
int shim_enter(ecc_connector_t *c)
{
  if (in_forked_child(c))
    return refuse_forked(c);
  atomic_fetch_add(&c->inside, 1);
  if (atomic_load(&c->closing)) {
    atomic_fetch_sub(&c->inside, 1);
    return ECC_ERR_CLOSED;
  }
  shim_hold_errors(c);
  return ECC_OK;
}

void shim_leave(ecc_connector_t *c, int rc)
{
  shim_release_errors(c, rc);
  atomic_fetch_sub(&c->inside, 1);
}

/* Calls never wait for a copy, so this is short; yield first, then sleep
 * so that a caller held up in its log callback does not cost a core. */
static void wait_for_calls(ecc_connector_t *c)
{
  for (unsigned spins = 0; atomic_load(&c->inside) != 0; spins++) {
    if (spins < 1000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 100 * 1000};
      nanosleep(&ts, NULL);
    }
  }
}

/* ---- forwarding ---- */

ECC_API int ecc_save(ecc_connector_t *c, const ecc_save_entry_t *entries, size_t n)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  rc = shim_checked(c, "save", c->plugin.ops.save(c->handle, entries, n));
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_flush(ecc_connector_t *c, void *compute_stream)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  rc = shim_checked(c, "flush", c->plugin.ops.flush(c->handle, compute_stream));
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_load(ecc_connector_t *c, const ecc_load_entry_t *entries, size_t n,
                     void *compute_stream)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  rc = shim_checked(c, "load", c->plugin.ops.load(c->handle, entries, n, compute_stream));
  shim_leave(c, rc);
  return rc;
}

/* Every record poll returned must be one the host can read safely. */
static int check_records(ecc_connector_t *c, const ecc_completion_t *out, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    const ecc_completion_t *r = &out[i];
    bool direction_ok = r->direction == ECC_DIR_SAVE || r->direction == ECC_DIR_LOAD;
    bool status_ok = shim_status_known(r->status);
    bool key_ok = memchr(r->key, '\0', sizeof(r->key)) != NULL;
    if (!direction_ok || !status_ok || !key_ok)
      return shim_fail(c, ECC_ERR_INCOMPATIBLE,
                       "plugin '%s' returned a malformed completion from poll (record %zu: "
                       "%s %" PRIu32 ", status %" PRId32 "%s)",
                       c->plugin.ops.name, i, direction_ok ? "direction" : "unknown direction",
                       r->direction, r->status, key_ok ? "" : ", key not terminated");
  }
  return ECC_OK;
}

ECC_API int ecc_poll(ecc_connector_t *c, ecc_completion_t *out, size_t cap, size_t *n_out)
{
  if (c == NULL || n_out == NULL)
    return ECC_ERR_INVALID;
  *n_out = 0;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  size_t n = 0;
  rc = shim_checked(c, "poll", c->plugin.ops.poll(c->handle, out, cap, &n));
  if (rc == ECC_OK && n > cap)
    rc = shim_fail(c, ECC_ERR_INCOMPATIBLE,
                   "plugin '%s' reported %zu completions from poll into room for %zu; "
                   "none of them is passed on",
                   c->plugin.ops.name, n, cap);
  else if (rc == ECC_OK)
    rc = check_records(c, out, n);
  if (rc == ECC_OK)
    *n_out = n;
  shim_leave(c, rc);
  return rc;
}

ECC_API int ecc_close(ecc_connector_t *c)
{
  if (c == NULL)
    return ECC_OK;
  /* The parent still uses the region, the plugin's threads and its locks:
   * the child frees its copy of this object and touches nothing else. */
  if (in_forked_child(c)) {
    shim_connector_free(c);
    return ECC_OK;
  }
  if (atomic_exchange(&c->closing, 1) != 0)
    return ECC_ERR_CLOSED;
  wait_for_calls(c);
  /* The plugin's threads and mappings are gone once shutdown returns, and
   * the loader keeps its code mapped, so unloading afterwards is safe
   * whatever shutdown returned. */
  int rc = shim_checked(c, "shutdown", c->plugin.ops.shutdown(c->handle));
  plugin_unload(&c->plugin);
  shim_connector_free(c);
  return rc;
}

ECC_API int ecc_get_stats(ecc_connector_t *c, ecc_stats_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.stats == NULL)
    rc = ECC_ERR_UNSUPPORTED;
  else
    rc = shim_checked(c, "stats", c->plugin.ops.stats(c->handle, out));
  shim_leave(c, rc);
  return rc;
}

/* Strings a plugin wrote are cut at their field's end, whatever it put. */
static void terminate(char *field, size_t field_size, size_t offset, uint32_t struct_size)
{
  if (offset + field_size <= struct_size)
    field[field_size - 1] = '\0';
}

static void terminate_info(ecc_info_t *out, uint32_t size)
{
  terminate(out->region_path, sizeof(out->region_path), offsetof(ecc_info_t, region_path), size);
  terminate(out->engine, sizeof(out->engine), offsetof(ecc_info_t, engine), size);
  terminate(out->engine_detail, sizeof(out->engine_detail), offsetof(ecc_info_t, engine_detail),
            size);
  terminate(out->role, sizeof(out->role), offsetof(ecc_info_t, role), size);
  terminate(out->policy, sizeof(out->policy), offsetof(ecc_info_t, policy), size);
}

ECC_API int ecc_describe(ecc_connector_t *c, ecc_info_t *out)
{
  if (c == NULL)
    return ECC_ERR_INVALID;
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  if (c->plugin.ops.describe == NULL) {
    rc = ECC_ERR_UNSUPPORTED;
  } else {
    uint32_t size = out != NULL ? out->struct_size : 0;
    rc = shim_checked(c, "describe", c->plugin.ops.describe(c->handle, out));
    if (rc == ECC_OK)
      terminate_info(out, size);
  }
  shim_leave(c, rc);
  return rc;
}

/* The shim's own finding wins while it is the most recent error. */
static int last_error_locked(ecc_connector_t *c, char *buf, size_t cap)
{
  pthread_mutex_lock(&c->err_lock);
  int mine = c->shim_err_set;
  if (mine && cap > 0)
    snprintf(buf, cap, "%s", c->shim_err);
  pthread_mutex_unlock(&c->err_lock);
  if (mine)
    return ECC_OK;
  if (c->plugin.ops.last_error == NULL)
    return ECC_ERR_UNSUPPORTED;
  int rc = shim_checked(c, "last_error", c->plugin.ops.last_error(c->handle, buf, cap));
  if (rc == ECC_OK && cap > 0)
    buf[cap - 1] = '\0';
  return rc;
}

ECC_API int ecc_last_error(ecc_connector_t *c, char *buf, size_t cap)
{
  if (c == NULL || (buf == NULL && cap > 0))
    return ECC_ERR_INVALID;
  if (in_forked_child(c)) {
    if (cap > 0)
      forked_text(c, buf, cap);
    return refuse_forked(c);
  }
  int rc = shim_enter(c);
  if (rc != ECC_OK)
    return rc;
  rc = last_error_locked(c, buf, cap);
  shim_leave(c, rc);
  return rc;
}
