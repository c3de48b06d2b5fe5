/* SPDX-License-Identifier: Apache-2.0 */
/*
 * errtext.h - failing with a reason written into a caller's buffer, for the
 * code that reports that way rather than to a log: configuration parsing,
 * the ownership rule, create before there is a connector to log through.
 */
#ifndef ECC_ERRTEXT_H
#define ECC_ERRTEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Format the reason into buf (nothing when buf is NULL or cap is 0, and
 * truncated to cap) and return `code`, so that a failure is one statement. */
__attribute__((format(printf, 4, 0))) static inline int
errtext_vfail(char *buf, size_t cap, int code, const char *fmt, va_list ap)
{
  if (buf != NULL && cap > 0)
    vsnprintf(buf, cap, fmt, ap);
  return code;
}

__attribute__((format(printf, 4, 5))) static inline int errtext_fail(char *buf, size_t cap,
                                                                     int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = errtext_vfail(buf, cap, code, fmt, ap);
  va_end(ap);
  return rc;
}

#endif /* ECC_ERRTEXT_H */
