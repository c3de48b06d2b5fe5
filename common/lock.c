/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lock.c - the locks of lock.h: slots claimed from the handle's log when
 * made, a reader's free slot found and given back, condition waits that
 * leave the lock's slot while asleep.
 */
#include "common/lock.h"

#include <stdbool.h>

#include "ecc_plugin_v1.h"

int lock_mutex_init(struct ecc_mutex *mx, struct ecc_log *log)
{
  mx->log = log;
  mx->slot = log != NULL ? log_slots_claim(log, 1) : -1;
  if (log != NULL && mx->slot < 0)
    return ECC_ERR_NOMEM;
  if (pthread_mutex_init(&mx->m, NULL) == 0)
    return ECC_OK;
  if (log != NULL)
    log_slots_release(log, mx->slot, 1);
  return ECC_ERR_SYSTEM;
}

void lock_mutex_destroy(struct ecc_mutex *mx)
{
  pthread_mutex_destroy(&mx->m);
  if (mx->log != NULL)
    log_slots_release(mx->log, mx->slot, 1);
}

int lock_cond_timedwait(pthread_cond_t *cv, struct ecc_mutex *mx, const struct timespec *abstime)
{
  if (mx->slot >= 0)
    log_lock_dropping(mx->log, mx->slot);
  int rc = pthread_cond_timedwait(cv, &mx->m, abstime);
  if (mx->slot >= 0)
    log_lock_taken(mx->log, mx->slot);
  return rc;
}

int lock_rw_init(struct ecc_rwlock *rw, struct ecc_log *log)
{
  rw->log = log;
  rw->slot = log != NULL ? log_slots_claim(log, 1 + LOCK_READERS) : -1;
  if (log != NULL && rw->slot < 0)
    return ECC_ERR_NOMEM;
  atomic_init(&rw->waiting, 0);
  int rc = pthread_rwlock_init(&rw->rw, NULL);
  if (rc == 0 && (rc = pthread_mutex_init(&rw->wait_m, NULL)) != 0)
    pthread_rwlock_destroy(&rw->rw);
  if (rc == 0 && (rc = pthread_cond_init(&rw->wait_cv, NULL)) != 0) {
    pthread_mutex_destroy(&rw->wait_m);
    pthread_rwlock_destroy(&rw->rw);
  }
  if (rc == 0)
    return ECC_OK;
  if (log != NULL)
    log_slots_release(log, rw->slot, 1 + LOCK_READERS);
  return ECC_ERR_SYSTEM;
}

void lock_rw_destroy(struct ecc_rwlock *rw)
{
  pthread_cond_destroy(&rw->wait_cv);
  pthread_mutex_destroy(&rw->wait_m);
  pthread_rwlock_destroy(&rw->rw);
  if (rw->log != NULL)
    log_slots_release(rw->log, rw->slot, 1 + LOCK_READERS);
}

/* A reader slot of rw now holding this thread's id, or false if all are
 * taken. The CAS makes the slot this thread's alone; it is the only one
 * that compares it with its own id, so no order beyond it is needed. */
static bool take_reader_slot(struct ecc_rwlock *rw, unsigned long self)
{
  for (int i = 1; i <= LOCK_READERS; i++) {
    unsigned long free_slot = 0;
    if (atomic_compare_exchange_strong(&rw->log->holder[rw->slot + i], &free_slot, self))
      return true;
  }
  return false;
}

/* The slot is taken before the lock: a reader that waits for one holds
 * nothing of the handle, so the readers it waits for never wait for it. */
void lock_rw_rdlock(struct ecc_rwlock *rw)
{
  if (rw->slot >= 0) {
    unsigned long self = (unsigned long)pthread_self();
    if (!take_reader_slot(rw, self)) {
      pthread_mutex_lock(&rw->wait_m);
      atomic_fetch_add(&rw->waiting, 1);
      while (!take_reader_slot(rw, self))
        pthread_cond_wait(&rw->wait_cv, &rw->wait_m);
      atomic_fetch_sub(&rw->waiting, 1);
      pthread_mutex_unlock(&rw->wait_m);
    }
  }
  pthread_rwlock_rdlock(&rw->rw);
}

void lock_rw_wrlock(struct ecc_rwlock *rw)
{
  pthread_rwlock_wrlock(&rw->rw);
  if (rw->slot >= 0)
    log_lock_taken(rw->log, rw->slot);
}

/* This thread's reader slot given back (seq_cst, so that a reader that
 * found none and counted itself waiting is woken). */
static void give_reader_slot(struct ecc_rwlock *rw, unsigned long self)
{
  for (int i = 1; i <= LOCK_READERS; i++) {
    _Atomic unsigned long *h = &rw->log->holder[rw->slot + i];
    if (atomic_load_explicit(h, memory_order_relaxed) == self) {
      atomic_store(h, 0);
      break;
    }
  }
  if (atomic_load(&rw->waiting) != 0) {
    pthread_mutex_lock(&rw->wait_m);
    pthread_cond_broadcast(&rw->wait_cv);
    pthread_mutex_unlock(&rw->wait_m);
  }
}

void lock_rw_unlock(struct ecc_rwlock *rw)
{
  if (rw->slot < 0) {
    pthread_rwlock_unlock(&rw->rw);
    return;
  }
  unsigned long self = (unsigned long)pthread_self();
  bool writer = atomic_load_explicit(&rw->log->holder[rw->slot], memory_order_relaxed) == self;
  if (writer)
    log_lock_dropping(rw->log, rw->slot);
  pthread_rwlock_unlock(&rw->rw);
  if (!writer)
    give_reader_slot(rw, self);
  log_lock_dropped(rw->log);
}
