/*
 * log.c - formats plugin messages once and sends them to the host's logger;
 * keeps the last error per handle for last_error().
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void log_init(struct ecc_log *log, const ecc_host_services_v1 *host)
{
  memset(log, 0, sizeof(*log));
  /* A host built against a smaller struct than ours still has log/user:
   * they are in the first (and so far only) version of the struct. */
  log->host = host;
  pthread_mutex_init(&log->lock, NULL);
}

void log_destroy(struct ecc_log *log)
{
  pthread_mutex_destroy(&log->lock);
}

static void emit(struct ecc_log *log, int level, const char *text)
{
  const ecc_host_services_v1 *h = log->host;
  if (h == NULL || h->log == NULL || level > h->log_level)
    return;
  h->log(h->user, level, text);
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
