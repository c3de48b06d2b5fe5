/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - ecc_check and ecc_check_params: the shared steps up to the
 * plugin file, then loading, the key checks and the plugin's validate in a
 * child process (probe.c), so a plugin that exits, crashes or hangs while
 * loading is reported and the caller is unaffected.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/options.h"
#include "host-shim/probe.h"
#include "host-shim/shim_connector.h"
#include "host-shim/shim_err.h"
#include "host-shim/steps.h"
#include "host-shim/where.h"

/* Let the plugin judge the values; without validate, only keys were checked. */
static int validate_config(const struct loaded_plugin *p, const struct ini_config *ini, char *err,
                           size_t err_cap)
{
  const struct plugin_ops *ops = &p->ops;
  if (ops->validate == NULL) {
    shim_errf(err, err_cap,
              "keys checked; plugin '%s' %s has no validate function, so values are "
              "checked only when a connector is created",
              ops->name, ops->version);
    return ECC_OK;
  }
  ecc_kv_t *kv = steps_make_kv(ini);
  if (kv == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  char why[PLUGIN_ERR_MAX] = "";
  int raw = ops->validate(kv, ini->n_pairs, why, sizeof(why));
  free(kv);
  why[sizeof(why) - 1] = '\0';
  int rc = steps_plugin_status(raw);
  if (rc == ECC_OK) {
    shim_errf(err, err_cap, "%s", why);
    return rc;
  }
  char where[WHERE_MAX + 2];
  where_plugin_text(ini, why, where, sizeof(where));
  shim_errf(err, err_cap, "%splugin '%s' refused the configuration: %s", where, ops->name,
            why[0] != '\0' ? why : ecc_strerror(raw));
  return rc;
}

/* What the check process works from: its copies of the caller's memory. */
struct check_job {
  const struct ini_config *ini;
  const char *file;
};

/* Runs in the check process: load, check keys, validate, describe. The
 * process ends afterwards, so nothing is unloaded or freed here. */
static void run_check_job(void *arg, struct probe_report *out)
{
  const struct check_job *job = arg;
  char *msg = out->message;
  size_t cap = sizeof(out->message);
  struct loaded_plugin *plugin = calloc(1, sizeof(*plugin));
  int rc = ECC_ERR_NOMEM;
  if (plugin == NULL)
    shim_errf(msg, cap, "out of memory");
  else
    rc = steps_load_and_check(job->ini, job->file, plugin, msg, cap);
  if (rc == ECC_OK && plugin->ops.n_params > PROBE_PARAMS_MAX) {
    shim_errf(msg, cap, "plugin '%s' (%s) publishes %zu keys; a check reports at most %d",
              plugin->ops.name, plugin->path, plugin->ops.n_params, PROBE_PARAMS_MAX);
    rc = ECC_ERR_INCOMPATIBLE;
  }
  if (rc == ECC_OK)
    rc = validate_config(plugin, job->ini, msg, cap);
  if (rc == ECC_OK) {
    steps_fill_meta(plugin, &out->meta);
    out->has_meta = 1;
  }
  out->status = rc;
}

/* The plugin's code runs only in a child process: whatever it does there
 * (exit, crash, hang) is reported, and nothing of it is ever mapped here. */
static int check_in_child(const struct ini_config *ini, const char *file, uint64_t timeout_ms,
                          ecc_plugin_meta_t **meta, char *err, size_t err_cap)
{
  char where[WHERE_MAX], subject[WHERE_MAX + PLUGIN_PATH_MAX + 16];
  where_plugin_line(ini, where, sizeof(where));
  snprintf(subject, sizeof(subject), "%splugin %s", where, file);
  struct check_job job = {.ini = ini, .file = file};
  int status = ECC_OK;
  int rc = probe_run(run_check_job, &job, timeout_ms, subject, &status, meta, err, err_cap);
  if (rc == ECC_OK)
    rc = status;
  if (rc == ECC_OK && meta != NULL && *meta == NULL) {
    shim_errf(err, err_cap, "%s: the check process reported success without the plugin's table",
              subject);
    rc = ECC_ERR_INCOMPATIBLE;
  }
  return rc;
}

/* ecc_check and ecc_check_params: the INI is read here, the plugin is
 * loaded and judged in a child. On success *meta (if meta is not NULL) is
 * the probe's block, which the caller frees. */
static int check_config(const char *ini_path, const ecc_open_options_t *opt,
                        ecc_plugin_meta_t **meta, char *err, size_t err_cap)
{
  shim_errf(err, err_cap, "%s", "");
  struct open_settings s;
  int rc = options_read(opt, &s, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  struct ini_config ini;
  rc = ini_config_load(ini_path, s.overrides, s.n_overrides, &ini, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  char file[PLUGIN_PATH_MAX];
  rc = steps_resolve(&ini, file, sizeof(file), err, err_cap);
  if (rc == ECC_OK)
    rc = check_in_child(&ini, file, s.check_timeout_ms, meta, err, err_cap);
  ini_config_free(&ini);
  if (rc != ECC_OK && meta != NULL) {
    free(*meta);
    *meta = NULL;
  }
  return rc;
}

ECC_API int ecc_check(const char *ini_path, const ecc_open_options_t *opt, ecc_plugin_meta_t *meta,
                      char *err, size_t err_cap)
{
  ecc_plugin_meta_t *found = NULL;
  int rc = check_config(ini_path, opt, meta != NULL ? &found : NULL, err, err_cap);
  if (rc == ECC_OK && meta != NULL) {
    *meta = *found;
    meta->params = NULL; /* they live in found, freed below */
    meta->n_params = 0;
  }
  free(found);
  return rc;
}

ECC_API int ecc_check_params(const char *ini_path, const ecc_open_options_t *opt,
                             ecc_plugin_meta_t **out, char *err, size_t err_cap)
{
  if (out == NULL) {
    shim_errf(err, err_cap, "ecc_check_params: out is NULL");
    return ECC_ERR_INVALID;
  }
  *out = NULL;
  return check_config(ini_path, opt, out, err, err_cap);
}
