/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.c - reading ecc_open_options_t field by field as far as the
 * caller's struct_size reaches, so callers built against an older
 * ecc_host.h keep working; and the default log sink, stderr.
 */
#include "host-shim/options.h"

#include <stdio.h>
#include <unistd.h>

#include "host-shim/shim_err.h"
#include "host-shim/shim_names.h"

/* The default sink: one write per line so that lines from several threads
 * never interleave. */
static void stderr_log(void *user, int level, const char *msg)
{
  (void)user;
  char line[1024];
  const char *name = shim_level_name(level);
  int n = snprintf(line, sizeof(line), "ecc[%s]: %s\n", name != NULL ? name : "log", msg);
  if (n < 0)
    return;
  size_t len = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  if (write(STDERR_FILENO, line, len) < 0)
    return; /* nowhere left to report a failed log write */
}

/* The check timeout: 0, or a field the caller's struct_size does not
 * reach, leaves the default. */
static int read_timeout(const ecc_open_options_t *opt, struct open_settings *s, char *err,
                        size_t err_cap)
{
  if (ECC_COVERS(opt, ecc_open_options_t, check_timeout_ms) && opt->check_timeout_ms != 0)
    s->check_timeout_ms = opt->check_timeout_ms;
  if (s->check_timeout_ms > CHECK_TIMEOUT_MAX_MS) {
    shim_errf(err, err_cap, "ecc_open_options_t.check_timeout_ms %llu is more than %d (an hour)",
              (unsigned long long)s->check_timeout_ms, CHECK_TIMEOUT_MAX_MS);
    return ECC_ERR_INVALID;
  }
  return ECC_OK;
}

/* Reads only the fields the caller's struct_size covers, so a caller built
 * against an older ecc_host.h keeps working when fields are appended. */
int options_read(const ecc_open_options_t *opt, struct open_settings *s, char *err, size_t err_cap)
{
  *s = (struct open_settings){.log = stderr_log,
                              .default_sink = true,
                              .log_level = -1,
                              .check_timeout_ms = CHECK_TIMEOUT_DEFAULT_MS};
  if (opt == NULL)
    return ECC_OK;
  if (opt->struct_size < sizeof(uint32_t)) {
    shim_errf(err, err_cap, "ecc_open_options_t.struct_size %u is too small", opt->struct_size);
    return ECC_ERR_INVALID;
  }
  if (ECC_COVERS(opt, ecc_open_options_t, n_overrides)) {
    s->overrides = opt->overrides;
    s->n_overrides = opt->n_overrides;
  }
  if (ECC_COVERS(opt, ecc_open_options_t, log_user) && opt->log != NULL) {
    s->log = opt->log;
    s->log_user = opt->log_user;
    s->default_sink = false;
  }
  if (ECC_COVERS(opt, ecc_open_options_t, log_level))
    s->log_level = opt->log_level;
  if (s->log_level < -1 || s->log_level > ECC_LOG_DEBUG) {
    shim_errf(err, err_cap, "ecc_open_options_t.log_level %d is not -1 or ECC_LOG_*", s->log_level);
    return ECC_ERR_INVALID;
  }
  return read_timeout(opt, s, err, err_cap);
}

int options_log_level(const struct open_settings *s, const struct ini_config *ini)
{
  if (s->log_level >= 0)
    return s->log_level;
  if (ini->log_level >= 0)
    return ini->log_level;
  return ECC_LOG_WARN;
}
