/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - messages to the host's log callback and the per-handle last error.
 *
 * Every error path in the plugin goes through log_fail(), so that the text
 * the host sees in its log, in last_error() and in create()'s err buffer is
 * one and the same.
 *
 * The host's callback is never called with a plugin lock held: the callback
 * may call back into the plugin (stats from a log callback is ordinary), and
 * under a lock that would deadlock. Code that takes one of a handle's locks
 * says so with log_lock_taken(), log_lock_dropping() and log_lock_dropped()
 * on the holder slot the lock claimed (lock.h wraps mutexes, read-write
 * locks and condition waits so); a message made by a thread inside one of
 * them waits in the handle's small queue and is sent once that thread
 * holds none. (The owner of each lock is written in the
 * log, not in thread-local storage: in a plugin loaded with dlopen every
 * thread-local access costs a call, and these run on every lock.)
 */
#ifndef ECC_LOG_H
#define ECC_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "ecc_plugin_v1.h"

/* Holder slots of one handle's log: each lock of the handle that may be
 * held while its code logs owns one or more of them (lock.h), claimed when
 * the lock is made: a connector's three (core/internal.h), and on a ucx
 * handle its client's or server's and its UCX layer's, at most about 33 in
 * all. A claim past LOG_SLOTS is refused. */
#define LOG_SLOTS 64
/* Messages kept while their thread is inside a lock; a failed poll may
 * finish dozens of failed batches at once, and past this only a count is
 * kept (one line reports it). */
#define LOG_HELD_MAX 8
#define LOG_TEXT_MAX 512

struct log_held {
  unsigned long owner; /* the thread that made it (pthread_self) */
  int level;
  char text[LOG_TEXT_MAX];
};

struct ecc_log {
  const ecc_host_services_v1_t *host; /* may be NULL: then nothing is logged */
  pthread_mutex_t lock;               /* guards last, held, dropped, claimed */
  char last[LOG_TEXT_MAX];            /* most recent error text */
  char *err;                          /* during create only: the host's err buffer */
  size_t err_cap;
  _Atomic unsigned long holder[LOG_SLOTS]; /* the thread inside each slot's lock, or 0 */
  atomic_uint n_slots;                     /* slots ever claimed end below this */
  uint64_t claimed;                        /* one bit per claimed slot */
  atomic_uint n_held;                      /* messages waiting in held */
  struct log_held held[LOG_HELD_MAX];
  unsigned dropped; /* messages past LOG_HELD_MAX, and whose */
  unsigned long dropped_owner;
};

_Static_assert(LOG_SLOTS <= 64, "claimed has one bit per slot");

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

/* Sends the messages the calling thread made while inside a lock, once it
 * holds none of them (the slow half of log_lock_dropped). */
void log_send_held(struct ecc_log *log);

/* n consecutive free slots, claimed for a lock being made: the first's
 * index, or -1 (logged) when LOG_SLOTS would be passed, which a debug
 * build also asserts: a lock without a slot would let the host's callback
 * run inside it. */
int log_slots_claim(struct ecc_log *log, unsigned n);
/* Gives back what log_slots_claim returned (the lock is destroyed). */
void log_slots_release(struct ecc_log *log, int first, unsigned n);

/* Right after taking the lock of slot `which` of the handle. */
static inline void log_lock_taken(struct ecc_log *log, int which)
{
  atomic_store_explicit(&log->holder[which], (unsigned long)pthread_self(), memory_order_relaxed);
}

/* Right before dropping it (after, the next owner may already have written
 * its id). A thread compares only its own id with these, and its own stores
 * are always visible to it, so relaxed order is enough. */
static inline void log_lock_dropping(struct ecc_log *log, int which)
{
  atomic_store_explicit(&log->holder[which], 0, memory_order_relaxed);
}

/* Right after dropping it: send what this thread made meanwhile. */
static inline void log_lock_dropped(struct ecc_log *log)
{
  if (atomic_load_explicit(&log->n_held, memory_order_relaxed) != 0)
    log_send_held(log);
}

/* Copy the last error text into buf (truncated, always NUL-terminated). */
void log_last(struct ecc_log *log, char *buf, size_t cap);

#endif /* ECC_LOG_H */
