/* SPDX-License-Identifier: Apache-2.0 */
/*
 * steps.h - the steps ecc_open and ecc_check share: resolve the plugin
 * the INI names, load it and check the keys, and turn the INI into the
 * ABI's pairs. Private to libecc-host.so.
 */
#ifndef ECC_SHIM_STEPS_H
#define ECC_SHIM_STEPS_H

#include <stddef.h>

#include "ecc_host.h"
#include "host-shim/ini_config.h"
#include "host-shim/loader.h"
#include "host-shim/options.h"

/* Room for a plugin's reason and the path it is about. */
#define PLUGIN_ERR_MAX (PLUGIN_PATH_MAX + 1024)

/* The plugin file the INI names (text only); errors point at the line. */
int steps_resolve(const struct ini_config *ini, char *file, size_t file_cap, char *err,
                  size_t err_cap);

/* Load the resolved file and check the INI's keys against its table. On
 * success the caller owns plugin; on error nothing stays loaded. */
int steps_load_and_check(const struct ini_config *ini, const char *file,
                         struct loaded_plugin *plugin, char *err, size_t err_cap);

/* Parse, resolve, load, check keys. On success the caller owns ini and plugin. */
int steps_prepare(const char *ini_path, const struct open_settings *s, struct ini_config *ini,
                  struct loaded_plugin *plugin, char *err, size_t err_cap);

/* The pairs as the ABI wants them, pointing into ini; NULL when out of memory. */
ecc_kv_t *steps_make_kv(const struct ini_config *ini);

/* A plugin's status, or ECC_ERR_INCOMPATIBLE for one outside the closed set. */
int steps_plugin_status(int rc);

/* The table header of p as ecc_plugin_meta_t (without params). */
void steps_fill_meta(const struct loaded_plugin *p, ecc_plugin_meta_t *m);

#endif /* ECC_SHIM_STEPS_H */
