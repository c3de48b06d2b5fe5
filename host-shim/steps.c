/* SPDX-License-Identifier: Apache-2.0 */
/*
 * steps.c - what ecc_open and ecc_check both do before the plugin runs:
 * read the INI, resolve and load the plugin it names, check the keys
 * against the table, and hand the pairs over in the ABI's shape.
 */
#include "host-shim/steps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host-shim/keys.h"
#include "host-shim/shim_err.h"
#include "host-shim/shim_names.h"
#include "host-shim/where.h"

/* The plugin file the INI names (text only); errors point at the line. */
int steps_resolve(const struct ini_config *ini, char *file, size_t file_cap, char *err,
                  size_t err_cap)
{
  char why[PLUGIN_ERR_MAX], where[WHERE_MAX];
  enum plugin_input culprit = PLUGIN_INPUT_NONE;
  int rc = plugin_resolve(ini->name.value, ini->path.value, ini->folder.value, file, file_cap,
                          &culprit, why, sizeof(why));
  if (rc != ECC_OK) {
    where_culprit(ini, culprit, where, sizeof(where));
    shim_errf(err, err_cap, "%s%s", where, why);
  }
  return rc;
}

/* Load the resolved file and check the INI's keys against its table. On
 * success the caller owns plugin; on error nothing stays loaded. */
int steps_load_and_check(const struct ini_config *ini, const char *file,
                         struct loaded_plugin *plugin, char *err, size_t err_cap)
{
  char why[PLUGIN_ERR_MAX], where[WHERE_MAX];
  int rc = plugin_load(file, plugin, why, sizeof(why));
  if (rc != ECC_OK) {
    where_plugin_line(ini, where, sizeof(where));
    shim_errf(err, err_cap, "%s%s", where, why);
    return rc;
  }
  rc = keys_check(ini, &plugin->ops, err, err_cap);
  if (rc != ECC_OK)
    plugin_unload(plugin);
  return rc;
}

/* Resolve and load the plugin the INI names and check the keys. */
static int load_named_plugin(const struct ini_config *ini, struct loaded_plugin *plugin, char *err,
                             size_t err_cap)
{
  char file[PLUGIN_PATH_MAX];
  int rc = steps_resolve(ini, file, sizeof(file), err, err_cap);
  if (rc == ECC_OK)
    rc = steps_load_and_check(ini, file, plugin, err, err_cap);
  return rc;
}

/* Parse, load, check keys. On success the caller owns ini and plugin. */
int steps_prepare(const char *ini_path, const struct open_settings *s, struct ini_config *ini,
                  struct loaded_plugin *plugin, char *err, size_t err_cap)
{
  int rc = ini_config_load(ini_path, s->overrides, s->n_overrides, ini, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  rc = load_named_plugin(ini, plugin, err, err_cap);
  if (rc != ECC_OK)
    ini_config_free(ini);
  return rc;
}

/* The pairs as the ABI wants them; they point into ini. */
ecc_kv_t *steps_make_kv(const struct ini_config *ini)
{
  ecc_kv_t *kv = calloc(ini->n_pairs != 0 ? ini->n_pairs : 1, sizeof(*kv));
  if (kv == NULL)
    return NULL;
  for (size_t i = 0; i < ini->n_pairs; i++)
    kv[i] = (ecc_kv_t){.key = ini->pairs[i].key, .value = ini->pairs[i].value};
  return kv;
}

/* A plugin may only return codes of the closed set. */
int steps_plugin_status(int rc)
{
  return shim_status_known(rc) ? rc : ECC_ERR_INCOMPATIBLE;
}

/* ---- metadata and checking ---- */

static void copy_text(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src != NULL ? src : "");
}

void steps_fill_meta(const struct loaded_plugin *p, ecc_plugin_meta_t *m)
{
  memset(m, 0, sizeof(*m));
  copy_text(m->path, sizeof(m->path), p->path);
  copy_text(m->name, sizeof(m->name), p->ops.name);
  copy_text(m->version, sizeof(m->version), p->ops.version);
  m->abi_major = p->ops.abi_major;
  m->abi_minor = p->ops.abi_minor;
  m->negotiated_minor = p->ops.negotiated_minor;
  m->caps = p->ops.caps;
  m->params = p->ops.params;
  m->n_params = p->ops.n_params;
}
