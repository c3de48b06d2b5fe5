/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim_connector.h - the host library's connector object, shared by the file
 * that opens it (open.c) and the files that guard and forward every call to
 * its plugin (calls.c, directory_calls.c). Private to libecc-host.so.
 */
#ifndef ECC_SHIM_CONNECTOR_H
#define ECC_SHIM_CONNECTOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "ecc_plugin.h"
#include "host-shim/loader.h"

#define ECC_API __attribute__((visibility("default")))

struct ecc_connector {
  struct loaded_plugin plugin;
  ecc_handle_t handle;
  /* Lent to the plugin by create: must outlive its shutdown. */
  ecc_host_services_t services;
  /* Where the plugin's and the shim's lines go (services.log forwards to
   * it); quiet_errors: the default sink, which does not print an error a
   * call also returns (the caller has it, and ecc_last_error). */
  void (*sink)(void *user, int level, const char *msg);
  void *sink_user;
  bool quiet_errors;
  atomic_int closing;       /* set once by ecc_close: later arrivals are turned away */
  atomic_int inside;        /* calls currently inside the plugin */
  unsigned fork_gen;        /* the process generation at open (see calls.c) */
  pid_t owner;              /* the process that opened it */
  atomic_int fork_logged;   /* the refusal in a forked child has been logged */
  pthread_mutex_t err_lock; /* guards the two fields below */
  int shim_err_set;         /* the most recent error was found by the shim */
  char shim_err[512];       /* its text, for ecc_last_error */
};

/* After calloc, before anything else: the guard, the owner, the error text. */
void shim_connector_init(ecc_connector_t *c);

/* Frees what shim_connector_init set up and c itself (the plugin must be
 * unloaded or never loaded). */
void shim_connector_free(ecc_connector_t *c);

/* The guard around each call (calls.c): shim_enter returns ECC_OK, or
 * ECC_ERR_CLOSED for a closing connector or one inherited through fork, in
 * which case shim_leave must not follow. shim_leave takes the call's
 * status: error lines logged inside a call that fails are the failure's
 * own text and, with the default sink, are not printed (once said). */
int shim_enter(ecc_connector_t *c);
void shim_leave(ecc_connector_t *c, int rc);

/* What shim_enter and shim_leave do with error lines, for the other calls
 * into the plugin (create): from shim_hold_errors on, this thread's error
 * lines for c are held; shim_release_errors says them if rc is ECC_OK and
 * drops them otherwise. No-ops unless c is on the default sink. */
void shim_hold_errors(const ecc_connector_t *c);
void shim_release_errors(const ecc_connector_t *c, int rc);

/* The log function lent to the plugin (services.log, user c): forwards to
 * c->sink, holding back the error lines of a call in progress on this
 * thread until shim_leave knows whether the call returns them. */
void shim_sink(void *user, int level, const char *msg);

/* A plugin's status passes when it is of the closed set; any other value
 * becomes ECC_ERR_INCOMPATIBLE naming the call `what`. */
int shim_checked(ecc_connector_t *c, const char *what, int raw);

/* Records and logs an error the shim found in a plugin's answer. */
int shim_fail(ecc_connector_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Checks of what a plugin hands back, shared by the directory's calls and
 * the cache's (directory_calls.c): a known entry state; an entry the host
 * may read safely (ECC_ERR_INCOMPATIBLE naming `what` and record i if
 * not); listed records that fit and are terminated. */
bool shim_state_known(int32_t state);
int shim_check_entry(ecc_connector_t *c, const char *what, size_t i, const ecc_entry_t *e);
int shim_check_listed(ecc_connector_t *c, const ecc_listed_t *out, size_t n, size_t cap);

#endif /* ECC_SHIM_CONNECTOR_H */
