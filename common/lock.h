/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lock.h - a handle's mutexes, read-write locks and condition waits, made
 * known to its log (log.h), so that the host's log callback never runs on a
 * thread inside one of them: a message made there is held and sent when
 * the thread has dropped the last.
 *
 * Each lock claims holder slots of the log when it is made: a mutex one
 * (its owner's id is written there while it is held), a read-write lock one
 * for its writer and LOCK_READERS for its readers (each reader writes its
 * id in a free one; more readers at once wait for a slot, holding nothing
 * of the handle meanwhile). Nothing is thread-local (see log.h). A lock
 * made with a NULL log is a plain lock.
 */
#ifndef ECC_LOCK_H
#define ECC_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "common/log.h"

#define LOCK_READERS 12

struct ecc_mutex {
  pthread_mutex_t m;
  struct ecc_log *log;
  int slot; /* -1: none (no log, or none left) */
};

struct ecc_rwlock {
  pthread_rwlock_t rw;
  struct ecc_log *log;
  int slot; /* the writer's; readers' are the LOCK_READERS after it; -1: none */
  /* Readers waiting for a free slot (rare: more than LOCK_READERS at once). */
  atomic_uint waiting;
  pthread_mutex_t wait_m;
  pthread_cond_t wait_cv;
};

/* ECC_OK; ECC_ERR_NOMEM (logged) when the log has no slot left, or
 * ECC_ERR_SYSTEM when pthread_mutex_init fails: then nothing is made. */
int lock_mutex_init(struct ecc_mutex *mx, struct ecc_log *log);
void lock_mutex_destroy(struct ecc_mutex *mx);

static inline void lock_mutex_lock(struct ecc_mutex *mx)
{
  pthread_mutex_lock(&mx->m);
  if (mx->slot >= 0)
    log_lock_taken(mx->log, mx->slot);
}

static inline void lock_mutex_unlock(struct ecc_mutex *mx)
{
  if (mx->slot < 0) {
    pthread_mutex_unlock(&mx->m);
    return;
  }
  log_lock_dropping(mx->log, mx->slot);
  pthread_mutex_unlock(&mx->m);
  log_lock_dropped(mx->log);
}

/* pthread_cond_timedwait on mx (held): while asleep the thread is not
 * inside mx, and is again when it returns. Messages it made before stay
 * held until it drops its last lock. */
int lock_cond_timedwait(pthread_cond_t *cv, struct ecc_mutex *mx, const struct timespec *abstime);

/* As lock_mutex_init (ECC_ERR_SYSTEM for any pthread init that fails);
 * the read-write lock's slots are 1 + LOCK_READERS. */
int lock_rw_init(struct ecc_rwlock *rw, struct ecc_log *log);
void lock_rw_destroy(struct ecc_rwlock *rw);
void lock_rw_rdlock(struct ecc_rwlock *rw);
void lock_rw_wrlock(struct ecc_rwlock *rw);
/* Drops the read or the write side, whichever this thread holds. */
void lock_rw_unlock(struct ecc_rwlock *rw);

#endif /* ECC_LOCK_H */
