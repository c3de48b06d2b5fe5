/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ini_config.h - an INI file turned into the shim's settings ([plugin]) and
 * the plugin's "section.key" pairs, each remembering the line it came from.
 * Private to libecc-host.so.
 */
#ifndef ECC_INI_CONFIG_H
#define ECC_INI_CONFIG_H

#include <stddef.h>

#include "ecc_plugin.h"

/* The most bytes an INI file may hold: a thousand times the shipped
 * templates, room for 100,000 keys on lines of 40 characters, and a bound on
 * what reading any file costs (the whole file is held in memory while it is
 * parsed). A longer file is refused at the line where it passes the limit.
 * Line numbers are ints: a file this size has at most 4,194,305 lines. */
#define INI_CONFIG_MAX_BYTES ((size_t)4 << 20)

/* The most characters a line may hold, its line ending not counted: what
 * inih's line buffer takes (200 bytes in Debian's build, less the newline
 * and the NUL it adds). A longer line is refused at its line. */
#define INI_CONFIG_MAX_LINE 198

/* One pair for the plugin. line is 0 for a pair that came from an override. */
struct ini_pair {
  char *key;   /* "section.key" exactly as written */
  char *value; /* the text after '=', trimmed */
  int line;
};

/* One [plugin] setting; value NULL when absent, line 0 when overridden. */
struct ini_setting {
  char *value;
  int line;
};

struct ini_config {
  char *file;                        /* the INI path as the caller gave it */
  struct ini_setting name;           /* [plugin] name */
  struct ini_setting path;           /* [plugin] path */
  struct ini_setting folder;         /* [plugin] dir */
  struct ini_setting log_level_text; /* [plugin] log_level as written */
  int log_level;                     /* ECC_LOG_* from log_level_text, or -1 when absent */
  struct ini_pair *pairs;
  size_t n_pairs;
  size_t cap_pairs;
};

/* Read `file`, then apply `overrides` (a key "plugin.<k>" sets a [plugin]
 * setting, and setting name clears path and the other way round; any other
 * key replaces the pair of the same key or is appended), then check that
 * exactly one of name/path is given.
 * The file names code (its [plugin]), so it must pass the ownership rule of
 * trust.h: a regular file, it and every directory above it owned by root or
 * this user and writable by nobody else (sticky directories excepted).
 * Returns ECC_OK; ECC_ERR_CONFIG with "<file>:<line>: <what>" in err, or
 * without a line for a file that is missing, unsafe or not a regular file;
 * ECC_ERR_SYSTEM when a system call fails (errno named); ECC_ERR_INVALID for
 * a malformed override; ECC_ERR_NOMEM. On error *out holds nothing that
 * needs freeing. */
int ini_config_load(const char *file, const ecc_kv_t *overrides, size_t n_overrides,
                    struct ini_config *out, char *err, size_t err_cap);

/* "<file>:<line>" for a line of the file, or "override" for line 0. */
void ini_config_where(const struct ini_config *cfg, int line, char *buf, size_t cap);

void ini_config_free(struct ini_config *cfg);

#endif /* ECC_INI_CONFIG_H */
