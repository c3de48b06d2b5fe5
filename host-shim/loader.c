/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loader.c - finds a plugin file from a path or a short name, refuses files
 * another user could control, dlopens it, finds and checks its ABI table,
 * adapts the table to the shim's internal shape, and unloads it.
 */
#include "host-shim/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/names.h"
#include "common/trust.h"
#include "host-shim/shim_err.h"

/* ---- resolving a name or path to a file ---- */

/* Letters, digits, '-' and '_' only: a short name can never climb out of
 * the plugin directory ('/', "..") or pick another file name. */
static int copy_folder(const char *folder, char *out, size_t cap, const char *what, char *err,
                       size_t err_cap)
{
  size_t len = strlen(folder);
  while (len > 1 && folder[len - 1] == '/')
    len--; /* "/opt/ecc/" and "/opt/ecc" name the same folder */
  if (len >= cap) {
    shim_errf(err, err_cap, "%s is longer than %zu characters", what, cap - 1);
    return ECC_ERR_CONFIG;
  }
  memcpy(out, folder, len);
  out[len] = '\0';
  return ECC_OK;
}

/* The folder "ecc" beside the file this code was loaded from, so that an
 * install (lib/libecc-host.so, lib/ecc/) and the build tree work alike. */
static int default_folder(char *out, size_t cap, char *err, size_t err_cap)
{
  Dl_info info;
  if (dladdr((void *)default_folder, &info) == 0 || info.dli_fname == NULL) {
    shim_errf(err, err_cap, "cannot find where libecc-host.so is; set [plugin] dir");
    return ECC_ERR_CONFIG;
  }
  char *self = realpath(info.dli_fname, NULL);
  if (self == NULL) {
    shim_errf(err, err_cap, "cannot resolve %s: %s; set [plugin] dir", info.dli_fname,
              strerror(errno));
    return ECC_ERR_CONFIG;
  }
  int n = snprintf(out, cap, "%s/ecc", dirname(self));
  free(self);
  if (n < 0 || (size_t)n >= cap) {
    shim_errf(err, err_cap, "the directory of libecc-host.so is too long; set [plugin] dir");
    return ECC_ERR_CONFIG;
  }
  return ECC_OK;
}

static int plugin_folder(const char *folder_given, char *out, size_t cap,
                         enum plugin_input *culprit, char *err, size_t err_cap)
{
  if (folder_given != NULL) {
    *culprit = PLUGIN_INPUT_FOLDER;
    if (folder_given[0] != '/') {
      shim_errf(err, err_cap, "plugin dir '%s' must be an absolute path", folder_given);
      return ECC_ERR_CONFIG;
    }
    return copy_folder(folder_given, out, cap, "plugin dir", err, err_cap);
  }
  /* secure_getenv: a setuid host must not load code a caller points at. */
  const char *env = secure_getenv("ECC_PLUGIN_DIR");
  if (env != NULL && env[0] != '\0') {
    *culprit = PLUGIN_INPUT_NONE;
    if (env[0] != '/') {
      shim_errf(err, err_cap, "ECC_PLUGIN_DIR '%s' must be an absolute path", env);
      return ECC_ERR_CONFIG;
    }
    return copy_folder(env, out, cap, "ECC_PLUGIN_DIR", err, err_cap);
  }
  *culprit = PLUGIN_INPUT_NONE;
  return default_folder(out, cap, err, err_cap);
}

int plugin_resolve(const char *name, const char *path, const char *folder_given, char *file,
                   size_t file_cap, enum plugin_input *culprit, char *err, size_t err_cap)
{
  if (path != NULL) {
    *culprit = PLUGIN_INPUT_PATH;
    if (path[0] != '/') {
      shim_errf(err, err_cap, "plugin path '%s' must be absolute", path);
      return ECC_ERR_CONFIG;
    }
    if (strlen(path) >= file_cap) {
      shim_errf(err, err_cap, "plugin path is longer than %zu characters", file_cap - 1);
      return ECC_ERR_CONFIG;
    }
    strcpy(file, path);
    return ECC_OK;
  }
  *culprit = PLUGIN_INPUT_NAME;
  if (name == NULL || !ecc_name_ok(name)) {
    shim_errf(err, err_cap,
              "bad plugin name '%s': use 1 to %d letters, digits, '-' or '_' "
              "(or give an absolute 'path')",
              name != NULL ? name : "", ECC_NAME_MAX);
    return ECC_ERR_CONFIG;
  }
  char folder[PLUGIN_PATH_MAX];
  int rc = plugin_folder(folder_given, folder, sizeof(folder), culprit, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  int n = snprintf(file, file_cap, "%s/libecc-%s.so", folder, name);
  if (n < 0 || (size_t)n >= file_cap) {
    shim_errf(err, err_cap, "plugin path %s/libecc-%s.so is too long", folder, name);
    return ECC_ERR_CONFIG;
  }
  *culprit = PLUGIN_INPUT_NAME;
  return ECC_OK;
}

/* ---- checking the file before dlopen ---- */

/* The file and every directory on its canonical path must pass the
 * ownership rule of trust.h (root or this user owns each, nobody else may
 * write to it, a sticky directory aside): otherwise another user could put
 * his code where this process, often root, would run it. That covers a
 * path, [plugin] dir, ECC_PLUGIN_DIR and the default directory alike.
 * canon (PLUGIN_PATH_MAX bytes) receives the path that was checked: nobody
 * else can change what it names, so it is the one to dlopen. */
static int check_file(const char *file, char *canon, char *err, size_t err_cap)
{
  int rc = trust_open(file, TRUST_FILE, "plugin", NULL, canon, PLUGIN_PATH_MAX, err, err_cap);
  switch (rc) {
  case TRUST_OK:
    return ECC_OK;
  case TRUST_MISSING:
    shim_errf(err, err_cap, "plugin file not found: %s", file);
    return ECC_ERR_CONFIG;
  case TRUST_UNSAFE:
    return ECC_ERR_CONFIG; /* trust_open named the component and the reason */
  default:
    return ECC_ERR_SYSTEM;
  }
}

/* ---- where the loaded object lies ---- */

/* The program headers of the object dlopen loaded, so that what its table
 * points at can be checked against the plugin's own segments: dlsym may
 * return an absolute address, or a symbol of another object. */
struct object_map {
  uintptr_t base;          /* load bias: a segment starts at base + p_vaddr */
  const ElfW(Phdr) * phdr; /* in the loaded image; valid while it is loaded */
  size_t phnum;
};

struct object_search {
  const struct link_map *lm;
  struct object_map *out;
  bool found;
};

static int match_object(struct dl_phdr_info *info, size_t size, void *data)
{
  struct object_search *s = data;
  (void)size;
  if (info->dlpi_addr != s->lm->l_addr || info->dlpi_name == NULL ||
      strcmp(info->dlpi_name, s->lm->l_name) != 0)
    return 0;
  *s->out = (struct object_map){
      .base = info->dlpi_addr, .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum};
  s->found = true;
  return 1;
}

static int find_object(void *dl, const char *path, struct object_map *out, char *err,
                       size_t err_cap)
{
  struct link_map *lm = NULL;
  if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || lm == NULL) {
    const char *why = dlerror();
    shim_errf(err, err_cap, "plugin %s: cannot find its link map: %s", path,
              why != NULL ? why : "unknown error");
    return ECC_ERR_SYSTEM;
  }
  struct object_search s = {.lm = lm, .out = out, .found = false};
  dl_iterate_phdr(match_object, &s);
  if (!s.found) {
    shim_errf(err, err_cap, "plugin %s: its segments are not among the loaded objects", path);
    return ECC_ERR_SYSTEM;
  }
  return ECC_OK;
}

/* The end of the loadable segment with all of `flags` that holds the len
 * (>= 1) bytes at addr, or 0 when no segment holds all of them. */
static uintptr_t segment_end(const struct object_map *m, uintptr_t addr, size_t len,
                             ElfW(Word) flags)
{
  for (size_t i = 0; i < m->phnum; i++) {
    const ElfW(Phdr) *ph = &m->phdr[i];
    if (ph->p_type != PT_LOAD || (ph->p_flags & flags) != flags)
      continue;
    uintptr_t start = m->base + ph->p_vaddr, end = start + ph->p_memsz;
    if (addr >= start && addr < end && len <= end - addr)
      return end;
  }
  return 0;
}

static bool in_object(const struct object_map *m, const void *p, size_t len, ElfW(Word) flags)
{
  return len != 0 && segment_end(m, (uintptr_t)p, len, flags) != 0;
}

/* A string that ends before the readable segment it starts in does. */
static bool string_in_object(const struct object_map *m, const char *s)
{
  uintptr_t end = segment_end(m, (uintptr_t)s, 1, PF_R);
  return end != 0 && memchr(s, '\0', end - (uintptr_t)s) != NULL;
}

/* ---- checking the table ---- */

/* Size of the ELF symbol at addr, 0 if unknown. Lets the shim refuse a table
 * that claims a struct_size bigger than the object really is. */
static size_t symbol_size(const void *addr)
{
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  if (dladdr1(addr, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL)
    return 0;
  if (info.dli_saddr != addr)
    return 0;
  return (size_t)sym->st_size;
}

/* Bytes of the v1 table the shim cannot work without: up to `shutdown`. */
static const size_t v1_required =
    offsetof(ecc_plugin_v1_t, shutdown) + sizeof(((ecc_plugin_v1_t *)0)->shutdown);
static const size_t v1_header = offsetof(ecc_plugin_v1_t, struct_size) + sizeof(uint32_t);

static const char *v1_missing_required(const ecc_plugin_v1_t *t)
{
  if (t->create == NULL)
    return "create";
  if (t->save == NULL)
    return "save";
  if (t->flush == NULL)
    return "flush";
  if (t->load == NULL)
    return "load";
  if (t->poll == NULL)
    return "poll";
  if (t->shutdown == NULL)
    return "shutdown";
  return NULL;
}

/* Header checks of a v1 table; reads only what struct_size covers. */
static int v1_check(const ecc_plugin_v1_t *t, size_t sym_size, const char *path, char *err,
                    size_t err_cap)
{
  if (sym_size != 0 && sym_size < v1_header) {
    shim_errf(err, err_cap, "plugin %s: its %s symbol is only %zu bytes", path,
              ECC_PLUGIN_V1_SYMBOL, sym_size);
    return ECC_ERR_INCOMPATIBLE;
  }
  if (t->abi_major != ECC_ABI_V1_MAJOR) {
    shim_errf(err, err_cap,
              "plugin %s: its %s table says ABI major %u; this host supports major %d", path,
              ECC_PLUGIN_V1_SYMBOL, t->abi_major, ECC_ABI_V1_MAJOR);
    return ECC_ERR_INCOMPATIBLE;
  }
  if (!ECC_COVERS(t, ecc_plugin_v1_t, shutdown)) {
    shim_errf(err, err_cap,
              "plugin %s: table struct_size %u is smaller than the %zu bytes of the "
              "required v1 fields",
              path, t->struct_size, v1_required);
    return ECC_ERR_INCOMPATIBLE;
  }
  if (sym_size != 0 && sym_size < t->struct_size) {
    shim_errf(err, err_cap, "plugin %s: table struct_size %u is larger than the table (%zu bytes)",
              path, t->struct_size, sym_size);
    return ECC_ERR_INCOMPATIBLE;
  }
  return ECC_OK;
}

static int v1_check_fields(const ecc_plugin_v1_t *t, const char *path, char *err, size_t err_cap)
{
  const char *missing = v1_missing_required(t);
  if (missing != NULL) {
    shim_errf(err, err_cap, "plugin %s: required function '%s' is NULL", path, missing);
    return ECC_ERR_INCOMPATIBLE;
  }
  if (t->name == NULL || t->version == NULL) {
    shim_errf(err, err_cap, "plugin %s: table field '%s' is NULL", path,
              t->name == NULL ? "name" : "version");
    return ECC_ERR_INCOMPATIBLE;
  }
  if (t->n_params != 0 && t->params == NULL) {
    shim_errf(err, err_cap, "plugin %s: n_params is %zu but params is NULL", path, t->n_params);
    return ECC_ERR_INCOMPATIBLE;
  }
  return ECC_OK;
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
  return a < b ? a : b;
}

/* The directory functions of minor 1, taken only from a table of minor 1
 * or later that covers each one: a minor-0 table's bytes past describe are
 * whatever followed it in the plugin's object. */
static void v1_fill_directory(const ecc_plugin_v1_t *t, struct plugin_ops *ops)
{
  if (t->abi_minor < 1)
    return;
  if (ECC_COVERS(t, ecc_plugin_v1_t, reserve))
    ops->reserve = t->reserve;
  if (ECC_COVERS(t, ecc_plugin_v1_t, save_reserved))
    ops->save_reserved = t->save_reserved;
  if (ECC_COVERS(t, ecc_plugin_v1_t, abort_reserved))
    ops->abort_reserved = t->abort_reserved;
  if (ECC_COVERS(t, ecc_plugin_v1_t, lookup))
    ops->lookup = t->lookup;
  if (ECC_COVERS(t, ecc_plugin_v1_t, load_pinned))
    ops->load_pinned = t->load_pinned;
  if (ECC_COVERS(t, ecc_plugin_v1_t, unpin))
    ops->unpin = t->unpin;
  if (ECC_COVERS(t, ecc_plugin_v1_t, remove))
    ops->remove = t->remove;
  if (ECC_COVERS(t, ecc_plugin_v1_t, list))
    ops->list = t->list;
}

/* The cache functions of minor 2, on the same terms as the directory's. */
static void v1_fill_cache(const ecc_plugin_v1_t *t, struct plugin_ops *ops)
{
  if (t->abi_minor < 2)
    return;
  if (ECC_COVERS(t, ecc_plugin_v1_t, reserve_ex))
    ops->reserve_ex = t->reserve_ex;
  if (ECC_COVERS(t, ecc_plugin_v1_t, peek))
    ops->peek = t->peek;
  if (ECC_COVERS(t, ecc_plugin_v1_t, wait_ready))
    ops->wait_ready = t->wait_ready;
  if (ECC_COVERS(t, ecc_plugin_v1_t, lookup_ex))
    ops->lookup_ex = t->lookup_ex;
  if (ECC_COVERS(t, ecc_plugin_v1_t, load_typed))
    ops->load_typed = t->load_typed;
  if (ECC_COVERS(t, ecc_plugin_v1_t, list_ex))
    ops->list_ex = t->list_ex;
  if (ECC_COVERS(t, ecc_plugin_v1_t, events))
    ops->events = t->events;
}

static void v1_fill_ops(const ecc_plugin_v1_t *t, struct plugin_ops *ops)
{
  *ops = (struct plugin_ops){
      .abi_major = t->abi_major,
      .abi_minor = t->abi_minor,
      .negotiated_minor = min_u32(t->abi_minor, ECC_ABI_V1_MINOR),
      .caps = t->caps,
      .name = t->name,
      .version = t->version,
      .params = t->params,
      .n_params = t->n_params,
      .create = t->create,
      .save = t->save,
      .flush = t->flush,
      .load = t->load,
      .poll = t->poll,
      .shutdown = t->shutdown,
  };
  /* Optional fields exist only if the plugin's struct_size reaches them. */
  if (ECC_COVERS(t, ecc_plugin_v1_t, validate))
    ops->validate = t->validate;
  if (ECC_COVERS(t, ecc_plugin_v1_t, stats))
    ops->stats = t->stats;
  if (ECC_COVERS(t, ecc_plugin_v1_t, last_error))
    ops->last_error = t->last_error;
  if (ECC_COVERS(t, ecc_plugin_v1_t, describe))
    ops->describe = t->describe;
  v1_fill_directory(t, ops);
  v1_fill_cache(t, ops);
}

/* Every table version starts with abi_major, abi_minor and struct_size. */
#define TABLE_HEADER_BYTES (3 * sizeof(uint32_t))

/* The `len` bytes of the table from its start must lie in one readable
 * segment of the plugin before any of them is read. */
static int table_in_object(const void *table, size_t len, const struct object_map *m,
                           const char *path, char *err, size_t err_cap)
{
  if (in_object(m, table, len, PF_R))
    return ECC_OK;
  if (len == TABLE_HEADER_BYTES)
    shim_errf(err, err_cap,
              "plugin %s: its table symbol is at %p, which is not inside the plugin's "
              "readable segments",
              path, table);
  else
    shim_errf(err, err_cap,
              "plugin %s: its table at %p runs past the end of the plugin's readable segment "
              "(struct_size %zu)",
              path, table, len);
  return ECC_ERR_INCOMPATIBLE;
}

static int adapt_v1(const void *table, const struct object_map *m, const char *path,
                    struct plugin_ops *ops, char *err, size_t err_cap)
{
  const ecc_plugin_v1_t *t = table;
  int rc = v1_check(t, symbol_size(table), path, err, err_cap);
  if (rc == ECC_OK)
    rc = table_in_object(table, t->struct_size, m, path, err, err_cap);
  if (rc == ECC_OK)
    rc = v1_check_fields(t, path, err, err_cap);
  if (rc == ECC_OK)
    v1_fill_ops(t, ops);
  return rc;
}

/* ---- what the adapted table points at ---- */

static int strings_in_object(const struct plugin_ops *ops, const struct object_map *m,
                             const char *path, char *err, size_t err_cap)
{
  const char *bad = !string_in_object(m, ops->name)      ? "name"
                    : !string_in_object(m, ops->version) ? "version"
                                                         : NULL;
  if (bad == NULL)
    return ECC_OK;
  shim_errf(err, err_cap,
            "plugin %s: table field '%s' does not point to a string inside the plugin", path, bad);
  return ECC_ERR_INCOMPATIBLE;
}

/* Which string of one param is missing or outside the plugin, or NULL. */
static const char *param_fault(const ecc_param_t *p, const struct object_map *m)
{
  if (p->key == NULL || !string_in_object(m, p->key))
    return "key";
  if (p->default_value != NULL && !string_in_object(m, p->default_value))
    return "default_value";
  if (p->help != NULL && !string_in_object(m, p->help))
    return "help";
  return NULL;
}

static int params_in_object(const struct plugin_ops *ops, const struct object_map *m,
                            const char *path, char *err, size_t err_cap)
{
  size_t n = ops->n_params;
  if (n == 0)
    return ECC_OK;
  if (n > SIZE_MAX / sizeof(ecc_param_t) ||
      !in_object(m, ops->params, n * sizeof(ecc_param_t), PF_R)) {
    shim_errf(err, err_cap,
              "plugin %s: its %zu params do not lie inside the plugin's readable "
              "segments",
              path, n);
    return ECC_ERR_INCOMPATIBLE;
  }
  for (size_t i = 0; i < n; i++) {
    const char *fault = param_fault(&ops->params[i], m);
    if (fault == NULL)
      continue;
    if (ops->params[i].key == NULL)
      shim_errf(err, err_cap, "plugin %s: params[%zu] has no key", path, i);
    else
      shim_errf(err, err_cap,
                "plugin %s: params[%zu].%s does not point to a string inside "
                "the plugin",
                path, i, fault);
    return ECC_ERR_INCOMPATIBLE;
  }
  return ECC_OK;
}

/* Every function the shim may call must be code of the plugin itself. */
static int functions_in_object(const struct plugin_ops *ops, const struct object_map *m,
                               const char *path, char *err, size_t err_cap)
{
  const struct {
    const char *name;
    uintptr_t addr;
  } fns[] = {
      {"create", (uintptr_t)ops->create},
      {"save", (uintptr_t)ops->save},
      {"flush", (uintptr_t)ops->flush},
      {"load", (uintptr_t)ops->load},
      {"poll", (uintptr_t)ops->poll},
      {"shutdown", (uintptr_t)ops->shutdown},
      {"validate", (uintptr_t)ops->validate},
      {"stats", (uintptr_t)ops->stats},
      {"last_error", (uintptr_t)ops->last_error},
      {"describe", (uintptr_t)ops->describe},
      {"reserve", (uintptr_t)ops->reserve},
      {"save_reserved", (uintptr_t)ops->save_reserved},
      {"abort_reserved", (uintptr_t)ops->abort_reserved},
      {"lookup", (uintptr_t)ops->lookup},
      {"load_pinned", (uintptr_t)ops->load_pinned},
      {"unpin", (uintptr_t)ops->unpin},
      {"remove", (uintptr_t)ops->remove},
      {"list", (uintptr_t)ops->list},
  };
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
    if (fns[i].addr == 0 || in_object(m, (const void *)fns[i].addr, 1, PF_X))
      continue;
    shim_errf(err, err_cap,
              "plugin %s: table function '%s' is at %p, which is not inside the plugin's "
              "executable segments",
              path, fns[i].name, (const void *)fns[i].addr);
    return ECC_ERR_INCOMPATIBLE;
  }
  return ECC_OK;
}

static int ops_in_object(const struct plugin_ops *ops, const struct object_map *m, const char *path,
                         char *err, size_t err_cap)
{
  int rc = strings_in_object(ops, m, path, err, err_cap);
  if (rc == ECC_OK)
    rc = params_in_object(ops, m, path, err, err_cap);
  if (rc == ECC_OK)
    rc = functions_in_object(ops, m, path, err, err_cap);
  return rc;
}

/* ---- finding the table ---- */

/* Table versions this shim knows, newest first: a plugin exporting several
 * is used through the newest one. A v2 entry would go above v1, and
 * struct plugin_ops would take v2's shape with adapt_v1 filling the gaps. */
static const struct table_version {
  const char *symbol;
  int (*adapt)(const void *table, const struct object_map *m, const char *path,
               struct plugin_ops *ops, char *err, size_t err_cap);
} versions[] = {
    {ECC_PLUGIN_V1_SYMBOL, adapt_v1},
};
static const size_t n_versions = sizeof(versions) / sizeof(versions[0]);

/* The table is read only after its bytes are known to be the plugin's. */
static int use_table(const struct table_version *v, const void *table, const struct object_map *m,
                     const char *path, struct plugin_ops *ops, char *err, size_t err_cap)
{
  int rc = table_in_object(table, TABLE_HEADER_BYTES, m, path, err, err_cap);
  if (rc == ECC_OK)
    rc = v->adapt(table, m, path, ops, err, err_cap);
  if (rc == ECC_OK)
    rc = ops_in_object(ops, m, path, err, err_cap);
  return rc;
}

static int find_table(void *dl, const struct object_map *m, const char *path,
                      struct plugin_ops *ops, char *err, size_t err_cap)
{
  for (size_t i = 0; i < n_versions; i++) {
    dlerror();
    const void *table = dlsym(dl, versions[i].symbol);
    if (table != NULL)
      return use_table(&versions[i], table, m, path, ops, err, err_cap);
  }
  char names[256] = "";
  size_t used = 0;
  for (size_t i = 0; i < n_versions && used < sizeof(names); i++) {
    int n =
        snprintf(names + used, sizeof(names) - used, "%s%s", i ? " or " : "", versions[i].symbol);
    if (n < 0)
      break;
    used += (size_t)n;
  }
  shim_errf(err, err_cap, "plugin %s exports no %s table", path, names);
  return ECC_ERR_INCOMPATIBLE;
}

/* ---- loading ---- */

/* Loads are one at a time in this library: the dynamic loader serialises
 * dlopen anyway, and reading the link map it built (find_object) is then
 * ordered after the dlopen of another thread that built it. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

/* A second reference with RTLD_NODELETE marks the object; dropping that
 * reference leaves the count as it was, and dlclose then never unmaps it. */
int plugin_keep_resident(const struct loaded_plugin *p, char *err, size_t err_cap)
{
  const char *canon = p->path, *shown = p->path;
  pthread_mutex_lock(&load_lock);
  void *again = dlopen(canon, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  pthread_mutex_unlock(&load_lock);
  if (again == NULL) {
    const char *why = dlerror();
    shim_errf(err, err_cap, "cannot keep plugin %s loaded: %s", shown,
              why != NULL ? why : "unknown error");
    return ECC_ERR_SYSTEM;
  }
  dlclose(again);
  return ECC_OK;
}

static int load_checked(const char *file, struct loaded_plugin *out, char *err, size_t err_cap)
{
  void *dl = dlopen(out->path, RTLD_NOW | RTLD_LOCAL);
  if (dl == NULL) {
    const char *why = dlerror();
    shim_errf(err, err_cap, "cannot load plugin %s: %s", file, why != NULL ? why : "unknown error");
    return ECC_ERR_SYSTEM;
  }
  struct object_map map;
  int rc = find_object(dl, file, &map, err, err_cap);
  if (rc == ECC_OK)
    rc = find_table(dl, &map, file, &out->ops, err, err_cap);
  if (rc != ECC_OK) {
    dlclose(dl); /* a refused plugin is unmapped entirely */
    memset(out, 0, sizeof(*out));
    return rc;
  }
  out->dl = dl;
  return ECC_OK;
}

int plugin_load(const char *file, struct loaded_plugin *out, char *err, size_t err_cap)
{
  memset(out, 0, sizeof(*out));
  int rc = check_file(file, out->path, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  pthread_mutex_lock(&load_lock);
  rc = load_checked(file, out, err, err_cap);
  pthread_mutex_unlock(&load_lock);
  return rc;
}

void plugin_unload(struct loaded_plugin *p)
{
  /* dlclose fails only for a handle dlopen never gave; nothing to undo.
   * A plugin that created a connector stays mapped (plugin_keep_resident). */
  if (p->dl != NULL)
    dlclose(p->dl);
  memset(p, 0, sizeof(*p));
}
