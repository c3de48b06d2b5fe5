/* SPDX-License-Identifier: Apache-2.0 */
/*
 * where.h - which line of the INI file an error is about: the [plugin]
 * setting a resolve error names, or the pair a plugin's error text names
 * (the plugin sees keys, never the file). Private to libecc-host.so.
 */
#ifndef ECC_SHIM_WHERE_H
#define ECC_SHIM_WHERE_H

#include <stddef.h>

#include "host-shim/ini_config.h"
#include "host-shim/loader.h"

/* Room for "<file>:<line>: ". */
#define WHERE_MAX (PLUGIN_PATH_MAX + 32)

/* "<file>:<line>: " of setting s (or "override: "), "" if s is unset. */
void where_setting(const struct ini_config *ini, const struct ini_setting *s, char *buf,
                   size_t cap);

/* The same for the [plugin] setting a resolve error is about. */
void where_culprit(const struct ini_config *ini, enum plugin_input culprit, char *buf, size_t cap);

/* The same for the [plugin] name or path line (errors about the file). */
void where_plugin_line(const struct ini_config *ini, char *buf, size_t cap);

/* The same for the pair a plugin's error text names, else "". */
void where_plugin_text(const struct ini_config *ini, const char *why, char *buf, size_t cap);

#endif /* ECC_SHIM_WHERE_H */
