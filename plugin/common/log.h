/*
 * log.h - messages to the host's log callback and the per-handle last error.
 *
 * Every error path in the plugin goes through log_fail(), so that the text
 * the host sees in its log, in last_error() and in create()'s err buffer is
 * one and the same.
 *
 * The host's callback is never called with a plugin lock held: the callback
 * may call back into the plugin (stats from a log callback is ordinary), and
 * under a lock that would deadlock. Code that takes a lock brackets it with
 * log_hold() and log_release(); messages made in between wait in a small
 * per-thread queue and are sent once the thread holds no lock.
 */
#ifndef ECC_LOG_H
#define ECC_LOG_H

#include <pthread.h>
#include <stddef.h>

#include "ecc_plugin_v1.h"

struct ecc_log {
  const ecc_host_services_v1_t *host; /* may be NULL: then nothing is logged */
  pthread_mutex_t lock;             /* guards last */
  char last[512];                   /* most recent error text */
  char *err;                        /* during create only: the host's err buffer */
  size_t err_cap;
};

void log_init(struct ecc_log *log, const ecc_host_services_v1_t *host);
void log_destroy(struct ecc_log *log);

/* Log at `level` (ECC_LOG_*) if the host asked for that level. */
void log_msg(struct ecc_log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record an error: log it, keep it as the last error, and return `code`. */
int log_fail(struct ecc_log *log, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The same at another level: for refusals that are normal back-pressure
 * (ECC_ERR_BUSY), which the host retries and should not see as errors. */
int log_fail_at(struct ecc_log *log, int level, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Around every lock the plugin takes while it may log: messages of this
 * thread are held from the first log_hold() until the matching last
 * log_release(), which sends them in order (a burst beyond the queue is
 * summarised in one line). Calls nest. */
void log_hold(void);
void log_release(void);

/* Copy the last error text into buf (truncated, always NUL-terminated). */
void log_last(struct ecc_log *log, char *buf, size_t cap);

#endif /* ECC_LOG_H */
