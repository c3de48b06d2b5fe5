/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim_err.h - how the shim's modules write a reason into a caller's error
 * buffer. Private to libecc-host.so.
 */
#ifndef ECC_SHIM_ERR_H
#define ECC_SHIM_ERR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

/* Every public function accepts err == NULL or err_cap == 0, so this is the
 * one place that has to remember it. Text that does not fit is truncated. */
__attribute__((format(printf, 3, 4))) static inline void shim_errf(char *err, size_t cap,
                                                                   const char *fmt, ...)
{
  if (err == NULL || cap == 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
}

#endif /* ECC_SHIM_ERR_H */
