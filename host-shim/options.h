/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.h - ecc_open_options_t as the library reads it: only the fields
 * the caller's struct_size covers, checked, with the defaults filled in.
 * Private to libecc-host.so.
 */
#ifndef ECC_SHIM_OPTIONS_H
#define ECC_SHIM_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ecc_host.h"
#include "host-shim/ini_config.h"

/* How long the check process may take when the options do not say. */
#define CHECK_TIMEOUT_DEFAULT_MS 10000
#define CHECK_TIMEOUT_MAX_MS 3600000

struct open_settings {
  const ecc_kv_t *overrides;
  size_t n_overrides;
  void (*log)(void *user, int level, const char *msg);
  void *log_user;
  bool default_sink; /* log is stderr_log: errors a call returns are not also printed */
  int log_level;
  uint64_t check_timeout_ms;
};

/* Fill s from opt (NULL: every default; the log goes to stderr). Returns
 * ECC_OK or ECC_ERR_INVALID with the field at fault named in err. */
int options_read(const ecc_open_options_t *opt, struct open_settings *s, char *err, size_t err_cap);

/* The log level: the options' if set, else the INI's [plugin] log_level,
 * else warn. */
int options_log_level(const struct open_settings *s, const struct ini_config *ini);

#endif /* ECC_SHIM_OPTIONS_H */
