/* SPDX-License-Identifier: Apache-2.0 */
/*
 * open.c - ecc_open: the shared steps, then create in this process; the
 * plugin's error text attributed to the INI line of the key it names; and
 * ecc_plugin_info. calls.c forwards every call after that.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/options.h"
#include "host-shim/shim_connector.h"
#include "host-shim/shim_err.h"
#include "host-shim/steps.h"
#include "host-shim/where.h"

__attribute__((format(printf, 3, 4))) static void shim_log(const ecc_host_services_t *svc,
                                                           int level, const char *fmt, ...)
{
  if (svc->log == NULL || level > svc->log_level)
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  svc->log(svc->user, level, msg);
}

static void create_failed(const ecc_connector_t *c, const struct ini_config *ini, int raw,
                          char *why, char *err, size_t err_cap)
{
  char where[WHERE_MAX + 2];
  where_plugin_text(ini, why, where, sizeof(where));
  shim_errf(err, err_cap, "%splugin '%s' (%s) could not create a connector: %s", where,
            c->plugin.ops.name, c->plugin.path, why[0] != '\0' ? why : ecc_strerror(raw));
}

static int create_connector(ecc_connector_t *c, const struct ini_config *ini, char *err,
                            size_t err_cap)
{
  const struct plugin_ops *ops = &c->plugin.ops;
  ecc_kv_t *kv = steps_make_kv(ini);
  if (kv == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  char why[PLUGIN_ERR_MAX] = "";
  ecc_create_args_t args = {
      .struct_size = sizeof(args),
      .abi_major = ECC_ABI_MAJOR,
      .abi_minor = ops->negotiated_minor,
      .config = kv,
      .n_config = ini->n_pairs,
      .host = &c->services,
      .err = why,
      .err_cap = sizeof(why),
  };
  ecc_handle_t h = 0;
  shim_hold_errors(c); /* a failure's lines are its text in err */
  int raw = ops->create(&args, &h);
  free(kv);
  int rc = steps_plugin_status(raw);
  shim_release_errors(c, rc);
  if (rc != ECC_OK) {
    why[sizeof(why) - 1] = '\0'; /* in case the plugin filled it to the end */
    create_failed(c, ini, raw, why, err, err_cap);
    return rc;
  }
  if (h == 0) {
    shim_errf(err, err_cap, "plugin '%s' (%s) returned ECC_OK from create but handle 0", ops->name,
              c->plugin.path);
    return ECC_ERR_INCOMPATIBLE;
  }
  c->handle = h;
  /* From here the plugin's code and static state must outlive c. */
  rc = plugin_keep_resident(&c->plugin, err, err_cap);
  if (rc != ECC_OK)
    (void)ops->shutdown(h); /* the error above is the one to report */
  return rc;
}

ECC_API int ecc_open(const char *ini_path, const ecc_open_options_t *opt, ecc_connector_t **out,
                     char *err, size_t err_cap)
{
  shim_errf(err, err_cap, "%s", "");
  if (out == NULL) {
    shim_errf(err, err_cap, "ecc_open: out is NULL");
    return ECC_ERR_INVALID;
  }
  *out = NULL;
  struct open_settings s;
  int rc = options_read(opt, &s, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  ecc_connector_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  shim_connector_init(c);
  struct ini_config ini;
  rc = steps_prepare(ini_path, &s, &ini, &c->plugin, err, err_cap);
  if (rc != ECC_OK) {
    shim_connector_free(c);
    return rc;
  }
  c->sink = s.log;
  c->sink_user = s.log_user;
  c->quiet_errors = s.default_sink;
  c->services = (ecc_host_services_t){.struct_size = sizeof(c->services),
                                      .log_level = options_log_level(&s, &ini),
                                      .log = shim_sink,
                                      .user = c};
  rc = create_connector(c, &ini, err, err_cap);
  ini_config_free(&ini);
  if (rc != ECC_OK) {
    plugin_unload(&c->plugin);
    shim_connector_free(c);
    return rc;
  }
  const struct plugin_ops *ops = &c->plugin.ops;
  shim_log(&c->services, ECC_LOG_INFO, "loaded plugin '%s' %s from %s (ABI %u.%u, using minor %u)",
           ops->name, ops->version, c->plugin.path, ops->abi_major, ops->abi_minor,
           ops->negotiated_minor);
  *out = c;
  return ECC_OK;
}

ECC_API int ecc_plugin_info(ecc_connector_t *c, ecc_plugin_meta_t *out)
{
  if (c == NULL || out == NULL)
    return ECC_ERR_INVALID;
  steps_fill_meta(&c->plugin, out);
  return ECC_OK;
}
