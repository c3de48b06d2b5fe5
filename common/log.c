/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - formats plugin messages once and sends them to the host's logger;
 * keeps the last error per handle for last_error(); holds messages made
 * under a lock until the thread has released it.
 */
#include "common/log.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void log_init(struct ecc_log *log, const ecc_host_services_v1_t *host)
{
  memset(log, 0, sizeof(*log));
  /* Every field read here is in the first version of the struct; one too
   * short even for those is no logger at all (create refuses it). */
  log->host = host != NULL && ECC_COVERS(host, ecc_host_services_v1_t, user) ? host : NULL;
  pthread_mutex_init(&log->lock, NULL);
  log->claimed = 0;
  atomic_init(&log->n_slots, 0);
}

static uint64_t run_of(int first, unsigned n)
{
  return (n >= 64 ? ~0ull : (1ull << n) - 1) << first;
}

int log_slots_claim(struct ecc_log *log, unsigned n)
{
  int first = -1;
  pthread_mutex_lock(&log->lock);
  for (int i = 0; n > 0 && first < 0 && i + (int)n <= LOG_SLOTS; i++)
    if ((log->claimed & run_of(i, n)) == 0)
      first = i;
  if (first >= 0) {
    log->claimed |= run_of(first, n);
    if (atomic_load_explicit(&log->n_slots, memory_order_relaxed) < (unsigned)first + n)
      atomic_store_explicit(&log->n_slots, (unsigned)first + n, memory_order_relaxed);
  }
  pthread_mutex_unlock(&log->lock);
  assert(first >= 0 && "a handle's locks need more than LOG_SLOTS holder slots");
  if (first < 0)
    log_msg(log, ECC_LOG_ERROR,
            "internal: a lock of this handle has no log slot (%u more wanted, %d in all): the "
            "host's log callback may run while it is held",
            n, LOG_SLOTS);
  return first;
}

void log_slots_release(struct ecc_log *log, int first, unsigned n)
{
  if (first < 0)
    return;
  for (unsigned i = 0; i < n; i++)
    atomic_store_explicit(&log->holder[first + (int)i], 0, memory_order_relaxed);
  pthread_mutex_lock(&log->lock);
  log->claimed &= ~run_of(first, n);
  pthread_mutex_unlock(&log->lock);
}

void log_destroy(struct ecc_log *log)
{
  pthread_mutex_destroy(&log->lock);
}

static void send_line(const ecc_host_services_v1_t *h, int level, const char *text)
{
  h->log(h->user, level, text);
}

static bool inside_a_lock(const struct ecc_log *log, unsigned long self)
{
  unsigned n = atomic_load_explicit(&log->n_slots, memory_order_relaxed);
  for (unsigned i = 0; i < n; i++)
    if (atomic_load_explicit(&log->holder[i], memory_order_relaxed) == self)
      return true;
  return false;
}

static void hold(struct ecc_log *log, unsigned long self, int level, const char *text)
{
  pthread_mutex_lock(&log->lock);
  unsigned n = atomic_load_explicit(&log->n_held, memory_order_relaxed);
  if (n == LOG_HELD_MAX) {
    log->dropped++;
    log->dropped_owner = self;
  } else {
    struct log_held *m = &log->held[n];
    m->owner = self;
    m->level = level;
    snprintf(m->text, sizeof(m->text), "%s", text);
    atomic_store_explicit(&log->n_held, n + 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&log->lock);
}

static void emit(struct ecc_log *log, int level, const char *text)
{
  const ecc_host_services_v1_t *h = log->host;
  if (h == NULL || h->log == NULL || level > h->log_level)
    return;
  unsigned long self = (unsigned long)pthread_self();
  if (inside_a_lock(log, self))
    hold(log, self, level, text);
  else
    send_line(h, level, text);
}

/* This thread's messages leave the queue before any is sent: the callback
 * may log through the plugin again, and nothing is sent twice. */
void log_send_held(struct ecc_log *log)
{
  unsigned long self = (unsigned long)pthread_self();
  if (inside_a_lock(log, self))
    return;
  struct log_held mine[LOG_HELD_MAX];
  unsigned n_mine = 0, kept = 0, dropped = 0;
  pthread_mutex_lock(&log->lock);
  unsigned n = atomic_load_explicit(&log->n_held, memory_order_relaxed);
  for (unsigned i = 0; i < n; i++) {
    if (log->held[i].owner == self)
      mine[n_mine++] = log->held[i];
    else
      log->held[kept++] = log->held[i];
  }
  atomic_store_explicit(&log->n_held, kept, memory_order_relaxed);
  if (log->dropped != 0 && log->dropped_owner == self) {
    dropped = log->dropped;
    log->dropped = 0;
  }
  pthread_mutex_unlock(&log->lock);
  for (unsigned i = 0; i < n_mine; i++)
    send_line(log->host, mine[i].level, mine[i].text);
  if (dropped != 0) {
    char line[96];
    snprintf(line, sizeof(line), "(%u more messages of this call were not logged)", dropped);
    send_line(log->host, ECC_LOG_WARN, line);
  }
}

void log_msg(struct ecc_log *log, int level, const char *fmt, ...)
{
  char text[LOG_TEXT_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  emit(log, level, text);
}

__attribute__((format(printf, 4, 0))) static int record(struct ecc_log *log, int level, int code,
                                                        const char *fmt, va_list ap)
{
  char text[512];
  vsnprintf(text, sizeof(text), fmt, ap);
  pthread_mutex_lock(&log->lock);
  memcpy(log->last, text, sizeof(log->last));
  if (log->err != NULL && log->err_cap > 0)
    snprintf(log->err, log->err_cap, "%s", text);
  pthread_mutex_unlock(&log->lock);
  emit(log, level, text);
  return code;
}

int log_fail(struct ecc_log *log, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = record(log, ECC_LOG_ERROR, code, fmt, ap);
  va_end(ap);
  return rc;
}

int log_fail_at(struct ecc_log *log, int level, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = record(log, level, code, fmt, ap);
  va_end(ap);
  return rc;
}

void log_last(struct ecc_log *log, char *buf, size_t cap)
{
  if (cap == 0)
    return;
  pthread_mutex_lock(&log->lock);
  snprintf(buf, cap, "%s", log->last);
  pthread_mutex_unlock(&log->lock);
}
