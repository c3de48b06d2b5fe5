/*
 * connector.c - ecc_open and ecc_check: they put the INI reader and the
 * loader together, check the keys against what the plugin publishes and
 * create the connector. calls.c forwards everything after that.
 */
#include "ecc_host.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ini_config.h"
#include "loader.h"
#include "probe.h"
#include "shim_connector.h"
#include "names.h"
#include "shim_err.h"
#include "shim_names.h"

#define PLUGIN_ERR_MAX (PLUGIN_PATH_MAX + 1024)
#define WHERE_MAX (PLUGIN_PATH_MAX + 32)
/* How long the check process may take when the options do not say. */
#define CHECK_TIMEOUT_DEFAULT_MS 10000
#define CHECK_TIMEOUT_MAX_MS 3600000

/* ---- logging ---- */

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

__attribute__((format(printf, 3, 4))) static void
shim_log(const ecc_host_services_t *svc, int level, const char *fmt, ...)
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

/* ---- options ---- */

typedef struct open_settings {
  const ecc_kv_t *overrides;
  size_t n_overrides;
  void (*log)(void *user, int level, const char *msg);
  void *log_user;
  int log_level;
  uint64_t check_timeout_ms;
} open_settings;

/* The check timeout: 0, or a field the caller's struct_size does not
 * reach, leaves the default. */
static int read_timeout(const ecc_open_options_t *opt, open_settings *s, char *err, size_t err_cap)
{
  if (ECC_COVERS(opt, ecc_open_options_t, check_timeout_ms) &&
      opt->check_timeout_ms != 0)
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
static int read_options(const ecc_open_options_t *opt, open_settings *s, char *err, size_t err_cap)
{
  *s = (open_settings){.log = stderr_log, .log_level = -1,
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
  if (ECC_COVERS(opt, ecc_open_options_t, log_user) &&
      opt->log != NULL) {
    s->log = opt->log;
    s->log_user = opt->log_user;
  }
  if (ECC_COVERS(opt, ecc_open_options_t, log_level))
    s->log_level = opt->log_level;
  if (s->log_level < -1 || s->log_level > ECC_LOG_DEBUG) {
    shim_errf(err, err_cap, "ecc_open_options_t.log_level %d is not -1 or ECC_LOG_*",
              s->log_level);
    return ECC_ERR_INVALID;
  }
  return read_timeout(opt, s, err, err_cap);
}

/* ---- keys against the plugin's published params ---- */

static bool plugin_accepts(const plugin_ops *ops, const char *key)
{
  for (size_t i = 0; i < ops->n_params; i++) {
    if (strcmp(ops->params[i].key, key) == 0)
      return true;
  }
  return false;
}

/* Edit distance, or a large number for strings too long to bother with. */
static size_t edit_distance(const char *a, const char *b)
{
  enum { LIMIT = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la > LIMIT || lb > LIMIT)
    return (size_t)-1;
  size_t prev[LIMIT + 1], cur[LIMIT + 1];
  for (size_t j = 0; j <= lb; j++)
    prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (lb + 1) * sizeof(size_t));
  }
  return prev[lb];
}

/* A typo of a published key, if one is close enough to be worth saying. */
static const char *closest_param(const plugin_ops *ops, const char *key)
{
  const char *best = NULL;
  size_t best_d = 3; /* more than two edits away is not a typo */
  for (size_t i = 0; i < ops->n_params; i++) {
    size_t d = edit_distance(key, ops->params[i].key);
    if (d < best_d) {
      best_d = d;
      best = ops->params[i].key;
    }
  }
  return best;
}

static void list_params(const plugin_ops *ops, char *buf, size_t cap)
{
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < ops->n_params; i++) {
    int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ops->params[i].key);
    if (n < 0 || (size_t)n >= cap - used)
      break; /* truncated: the message still names the bad key first */
    used += (size_t)n;
  }
}

/* Refuses, before create runs, a key the plugin does not publish, naming the
 * line it was written on. A plugin that publishes nothing is left to judge
 * its keys in create. */
static int check_keys(const ini_config *ini, const plugin_ops *ops, char *err, size_t err_cap)
{
  if (ops->n_params == 0)
    return ECC_OK;
  for (size_t i = 0; i < ini->n_pairs; i++) {
    const ini_pair *p = &ini->pairs[i];
    if (plugin_accepts(ops, p->key))
      continue;
    char where[WHERE_MAX], accepted[1024], hint[160] = "";
    ini_config_where(ini, p->line, where, sizeof(where));
    list_params(ops, accepted, sizeof(accepted));
    const char *near = closest_param(ops, p->key);
    if (near != NULL)
      snprintf(hint, sizeof(hint), "; did you mean '%s'?", near);
    shim_errf(err, err_cap, "%s: unknown key '%s' (the plugin '%s' accepts: %s)%s", where,
              p->key, ops->name, accepted, hint);
    return ECC_ERR_CONFIG;
  }
  return ECC_OK;
}

/* ---- the steps ecc_open and ecc_check share ---- */

/* Where an INI setting came from, for an error about it; "" if unknown. */
static void setting_where(const ini_config *ini, const ini_setting *s, char *buf, size_t cap)
{
  if (s == NULL || s->value == NULL) {
    buf[0] = '\0';
    return;
  }
  ini_config_where(ini, s->line, buf, cap);
  size_t len = strlen(buf);
  if (len + 2 < cap)
    memcpy(buf + len, ": ", 3);
}

static const ini_setting *culprit_setting(const ini_config *ini, enum plugin_input culprit)
{
  switch (culprit) {
  case PLUGIN_INPUT_NAME:
    return &ini->name;
  case PLUGIN_INPUT_PATH:
    return &ini->path;
  case PLUGIN_INPUT_DIR:
    return &ini->dir;
  default:
    return NULL;
  }
}

/* The plugin file the INI names (text only); errors point at the line. */
static int resolve_named_plugin(const ini_config *ini, char *file, size_t file_cap, char *err,
                                size_t err_cap)
{
  char why[PLUGIN_ERR_MAX], where[WHERE_MAX];
  enum plugin_input culprit = PLUGIN_INPUT_NONE;
  int rc = plugin_resolve(ini->name.value, ini->path.value, ini->dir.value, file, file_cap,
                          &culprit, why, sizeof(why));
  if (rc != ECC_OK) {
    setting_where(ini, culprit_setting(ini, culprit), where, sizeof(where));
    shim_errf(err, err_cap, "%s%s", where, why);
  }
  return rc;
}

/* "<file>:<line>: " of the [plugin] name or path line, for errors about
 * the plugin file itself. */
static void plugin_line(const ini_config *ini, char *where, size_t cap)
{
  setting_where(ini, ini->path.value != NULL ? &ini->path : &ini->name, where, cap);
}

/* Load the resolved file and check the INI's keys against its table. On
 * success the caller owns plugin; on error nothing stays loaded. */
static int load_and_check_keys(const ini_config *ini, const char *file, loaded_plugin *plugin,
                               char *err, size_t err_cap)
{
  char why[PLUGIN_ERR_MAX], where[WHERE_MAX];
  int rc = plugin_load(file, plugin, why, sizeof(why));
  if (rc != ECC_OK) {
    plugin_line(ini, where, sizeof(where));
    shim_errf(err, err_cap, "%s%s", where, why);
    return rc;
  }
  rc = check_keys(ini, &plugin->ops, err, err_cap);
  if (rc != ECC_OK)
    plugin_unload(plugin);
  return rc;
}

/* Resolve and load the plugin the INI names and check the keys. */
static int load_named_plugin(const ini_config *ini, loaded_plugin *plugin, char *err,
                             size_t err_cap)
{
  char file[PLUGIN_PATH_MAX];
  int rc = resolve_named_plugin(ini, file, sizeof(file), err, err_cap);
  if (rc == ECC_OK)
    rc = load_and_check_keys(ini, file, plugin, err, err_cap);
  return rc;
}

/* Parse, load, check keys. On success the caller owns ini and plugin. */
static int prepare(const char *ini_path, const open_settings *s, ini_config *ini,
                   loaded_plugin *plugin, char *err, size_t err_cap)
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
static ecc_kv_t *make_kv(const ini_config *ini)
{
  ecc_kv_t *kv = calloc(ini->n_pairs != 0 ? ini->n_pairs : 1, sizeof(*kv));
  if (kv == NULL)
    return NULL;
  for (size_t i = 0; i < ini->n_pairs; i++)
    kv[i] = (ecc_kv_t){.key = ini->pairs[i].key, .value = ini->pairs[i].value};
  return kv;
}

/* A plugin may only return codes of the closed set. */
static int plugin_status(int rc)
{
  return shim_status_known(rc) ? rc : ECC_ERR_INCOMPATIBLE;
}

/* Whether `key` appears in text as a whole word ("region.size." at the end
 * of a sentence counts; "region.size_x" does not). */
static bool names_key(const char *text, const char *key)
{
  size_t len = strlen(key);
  for (const char *hit = strstr(text, key); hit != NULL; hit = strstr(hit + 1, key)) {
    bool starts = hit == text || (!ecc_name_char((unsigned char)hit[-1]) && hit[-1] != '.');
    const char *end = hit + len;
    bool ends = !ecc_name_char((unsigned char)end[0]) && !(end[0] == '.' && ecc_name_char((unsigned char)end[1]));
    if (starts && ends)
      return true;
  }
  return false;
}

/* The pair a plugin's error text is about, so the shim can add its line:
 * the plugin names keys but has never seen the file. */
static const ini_pair *pair_named_in(const ini_config *ini, const char *text)
{
  const ini_pair *best = NULL;
  for (size_t i = 0; i < ini->n_pairs; i++) {
    const ini_pair *p = &ini->pairs[i];
    if (names_key(text, p->key) && (best == NULL || strlen(p->key) > strlen(best->key)))
      best = p;
  }
  return best;
}

/* "<file>:<line>: " of the pair a plugin's error text names, else "". */
static void where_plugin_points(const ini_config *ini, const char *why, char *buf, size_t cap)
{
  buf[0] = '\0';
  const ini_pair *p = why[0] != '\0' ? pair_named_in(ini, why) : NULL;
  if (p != NULL)
    setting_where(ini, &(ini_setting){.value = p->value, .line = p->line}, buf, cap);
}

static void create_failed(const ecc_connector_t *c, const ini_config *ini, int raw, char *why,
                          char *err, size_t err_cap)
{
  char where[WHERE_MAX + 2];
  where_plugin_points(ini, why, where, sizeof(where));
  shim_errf(err, err_cap, "%splugin '%s' (%s) could not create a connector: %s", where,
            c->plugin.ops.name, c->plugin.path, why[0] != '\0' ? why : ecc_strerror(raw));
}

static int create_connector(ecc_connector_t *c, const ini_config *ini, char *err, size_t err_cap)
{
  const plugin_ops *ops = &c->plugin.ops;
  ecc_kv_t *kv = make_kv(ini);
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
  int raw = ops->create(&args, &h);
  free(kv);
  int rc = plugin_status(raw);
  if (rc != ECC_OK) {
    why[sizeof(why) - 1] = '\0'; /* in case the plugin filled it to the end */
    create_failed(c, ini, raw, why, err, err_cap);
    return rc;
  }
  if (h == 0) {
    shim_errf(err, err_cap, "plugin '%s' (%s) returned ECC_OK from create but handle 0",
              ops->name, c->plugin.path);
    return ECC_ERR_INCOMPATIBLE;
  }
  c->handle = h;
  /* From here the plugin's code and static state must outlive c. */
  rc = plugin_keep_resident(&c->plugin, err, err_cap);
  if (rc != ECC_OK)
    (void)ops->shutdown(h); /* the error above is the one to report */
  return rc;
}

static int effective_level(const open_settings *s, const ini_config *ini)
{
  if (s->log_level >= 0)
    return s->log_level;
  if (ini->log_level >= 0)
    return ini->log_level;
  return ECC_LOG_WARN;
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
  open_settings s;
  int rc = read_options(opt, &s, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  ecc_connector_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  shim_connector_init(c);
  ini_config ini;
  rc = prepare(ini_path, &s, &ini, &c->plugin, err, err_cap);
  if (rc != ECC_OK) {
    shim_connector_free(c);
    return rc;
  }
  c->services = (ecc_host_services_t){.struct_size = sizeof(c->services),
                                    .log_level = effective_level(&s, &ini),
                                    .log = s.log,
                                    .user = s.log_user};
  rc = create_connector(c, &ini, err, err_cap);
  ini_config_free(&ini);
  if (rc != ECC_OK) {
    plugin_unload(&c->plugin);
    shim_connector_free(c);
    return rc;
  }
  const plugin_ops *ops = &c->plugin.ops;
  shim_log(&c->services, ECC_LOG_INFO, "loaded plugin '%s' %s from %s (ABI %u.%u, using minor %u)",
           ops->name, ops->version, c->plugin.path, ops->abi_major, ops->abi_minor,
           ops->negotiated_minor);
  *out = c;
  return ECC_OK;
}

/* ---- metadata and checking ---- */

static void copy_text(char *dst, size_t cap, const char *src)
{
  snprintf(dst, cap, "%s", src != NULL ? src : "");
}

static void fill_meta(const loaded_plugin *p, ecc_plugin_meta_t *m)
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

ECC_API int ecc_plugin_info(ecc_connector_t *c, ecc_plugin_meta_t *out)
{
  if (c == NULL || out == NULL)
    return ECC_ERR_INVALID;
  fill_meta(&c->plugin, out);
  return ECC_OK;
}

/* Let the plugin judge the values; without validate, only keys were checked. */
static int validate_config(const loaded_plugin *p, const ini_config *ini, char *err,
                           size_t err_cap)
{
  const plugin_ops *ops = &p->ops;
  if (ops->validate == NULL) {
    shim_errf(err, err_cap,
              "keys checked; plugin '%s' %s has no validate function, so values are "
              "checked only when a connector is created",
              ops->name, ops->version);
    return ECC_OK;
  }
  ecc_kv_t *kv = make_kv(ini);
  if (kv == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  char why[PLUGIN_ERR_MAX] = "";
  int raw = ops->validate(kv, ini->n_pairs, why, sizeof(why));
  free(kv);
  why[sizeof(why) - 1] = '\0';
  int rc = plugin_status(raw);
  if (rc == ECC_OK) {
    shim_errf(err, err_cap, "%s", why);
    return rc;
  }
  char where[WHERE_MAX + 2];
  where_plugin_points(ini, why, where, sizeof(where));
  shim_errf(err, err_cap, "%splugin '%s' refused the configuration: %s", where, ops->name,
            why[0] != '\0' ? why : ecc_strerror(raw));
  return rc;
}

/* What the check process works from: its copies of the caller's memory. */
struct check_job {
  const ini_config *ini;
  const char *file;
};

/* Runs in the check process: load, check keys, validate, describe. The
 * process ends afterwards, so nothing is unloaded or freed here. */
static void run_check_job(void *arg, probe_report *out)
{
  const struct check_job *job = arg;
  char *msg = out->message;
  size_t cap = sizeof(out->message);
  loaded_plugin *plugin = calloc(1, sizeof(*plugin));
  int rc = ECC_ERR_NOMEM;
  if (plugin == NULL)
    shim_errf(msg, cap, "out of memory");
  else
    rc = load_and_check_keys(job->ini, job->file, plugin, msg, cap);
  if (rc == ECC_OK && plugin->ops.n_params > PROBE_PARAMS_MAX) {
    shim_errf(msg, cap, "plugin '%s' (%s) publishes %zu keys; a check reports at most %d",
              plugin->ops.name, plugin->path, plugin->ops.n_params, PROBE_PARAMS_MAX);
    rc = ECC_ERR_INCOMPATIBLE;
  }
  if (rc == ECC_OK)
    rc = validate_config(plugin, job->ini, msg, cap);
  if (rc == ECC_OK) {
    fill_meta(plugin, &out->meta);
    out->has_meta = 1;
  }
  out->status = rc;
}

/* The plugin's code runs only in a child process: whatever it does there
 * (exit, crash, hang) is reported, and nothing of it is ever mapped here. */
static int check_in_child(const ini_config *ini, const char *file, uint64_t timeout_ms,
                            ecc_plugin_meta_t **meta, char *err, size_t err_cap)
{
  char where[WHERE_MAX], subject[WHERE_MAX + PLUGIN_PATH_MAX + 16];
  plugin_line(ini, where, sizeof(where));
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
  open_settings s;
  int rc = read_options(opt, &s, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  ini_config ini;
  rc = ini_config_load(ini_path, s.overrides, s.n_overrides, &ini, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  char file[PLUGIN_PATH_MAX];
  rc = resolve_named_plugin(&ini, file, sizeof(file), err, err_cap);
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

