/*
 * log.c - formats plugin messages once and sends them to the host's logger;
 * keeps the last error per handle for last_error(); holds messages made
 * under a lock until the thread has released it.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void log_init(struct ecc_log *log, const ecc_host_services_v1_t *host)
{
  memset(log, 0, sizeof(*log));
  /* Every field read here is in the first version of the struct; one too
   * short even for those is no logger at all (create refuses it). */
  log->host = host != NULL && ECC_COVERS(host, ecc_host_services_v1_t, user) ? host : NULL;
  pthread_mutex_init(&log->lock, NULL);
}

void log_destroy(struct ecc_log *log)
{
  pthread_mutex_destroy(&log->lock);
}

/* Messages waiting for their thread to release its last lock. A failed
 * poll may finish dozens of failed batches at once; past HELD_MAX only a
 * count is kept, and one line reports it. */
#define HELD_MAX 8

struct held_msg {
  const ecc_host_services_v1_t *host;
  int level;
  char text[512];
};

static __thread struct {
  unsigned depth;
  unsigned n;
  unsigned dropped;
  const ecc_host_services_v1_t *dropped_host;
  struct held_msg q[HELD_MAX];
} held;

static void send_line(const ecc_host_services_v1_t *h, int level, const char *text)
{
  h->log(h->user, level, text);
}

static void emit(struct ecc_log *log, int level, const char *text)
{
  const ecc_host_services_v1_t *h = log->host;
  if (h == NULL || h->log == NULL || level > h->log_level)
    return;
  if (held.depth == 0) {
    send_line(h, level, text);
    return;
  }
  if (held.n == HELD_MAX) {
    held.dropped++;
    held.dropped_host = h;
    return;
  }
  struct held_msg *m = &held.q[held.n++];
  m->host = h;
  m->level = level;
  snprintf(m->text, sizeof(m->text), "%s", text);
}

void log_hold(void)
{
  held.depth++;
}

/* A callback may log through the plugin again, and its messages queue
 * behind a new hold: the queue is emptied into a copy before anything is
 * sent, so nothing is sent twice. */
void log_release(void)
{
  if (--held.depth != 0)
    return;
  struct held_msg out[HELD_MAX];
  unsigned n = held.n, dropped = held.dropped;
  const ecc_host_services_v1_t *dropped_host = held.dropped_host;
  memcpy(out, held.q, n * sizeof(out[0]));
  held.n = 0;
  held.dropped = 0;
  for (unsigned i = 0; i < n; i++)
    send_line(out[i].host, out[i].level, out[i].text);
  if (dropped != 0) {
    char line[96];
    snprintf(line, sizeof(line), "(%u more messages of this call were not logged)", dropped);
    send_line(dropped_host, ECC_LOG_WARN, line);
  }
}

void log_msg(struct ecc_log *log, int level, const char *fmt, ...)
{
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  emit(log, level, text);
}

__attribute__((format(printf, 4, 0))) static int record(struct ecc_log *log, int level,
                                                      int code, const char *fmt, va_list ap)
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
