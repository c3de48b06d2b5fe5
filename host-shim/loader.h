/* SPDX-License-Identifier: Apache-2.0 */
/*
 * loader.h - finding a plugin file, loading it, checking its ABI table and
 * unloading it. Private to libecc-host.so.
 */
#ifndef ECC_LOADER_H
#define ECC_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "ecc_plugin.h"

/* Longest plugin file path the shim handles, NUL included. */
#define PLUGIN_PATH_MAX 4096

/* The plugin's functions in the shape of the newest ABI this shim knows.
 * A plugin exporting an older table version is adapted into this shape, so
 * the rest of the shim never looks at version numbers. Optional functions
 * are NULL when the plugin's table does not cover them. */
struct plugin_ops {
  uint32_t abi_major;        /* the plugin's, as exported */
  uint32_t abi_minor;        /* the plugin's, as exported */
  uint32_t negotiated_minor; /* min(host's, plugin's) */
  uint32_t caps;
  const char *name;
  const char *version;
  const ecc_param_t *params;
  size_t n_params;
  int (*create)(const ecc_create_args_t *args, ecc_handle_t *out);
  int (*save)(ecc_handle_t h, const ecc_save_entry_t *entries, size_t n);
  int (*flush)(ecc_handle_t h, void *compute_stream);
  int (*load)(ecc_handle_t h, const ecc_load_entry_t *entries, size_t n, void *compute_stream);
  int (*poll)(ecc_handle_t h, ecc_completion_t *out, size_t cap, size_t *n_out);
  int (*shutdown)(ecc_handle_t h);
  int (*validate)(const ecc_kv_t *config, size_t n_config, char *err, size_t err_cap);
  int (*stats)(ecc_handle_t h, ecc_stats_t *out);
  int (*last_error)(ecc_handle_t h, char *buf, size_t cap);
  int (*describe)(ecc_handle_t h, ecc_info_t *out);
  /* minor 1: the directory */
  int (*reserve)(ecc_handle_t h, const char *key, uint64_t nbytes, ecc_entry_t *out);
  int (*save_reserved)(ecc_handle_t h, const ecc_save_reserved_t *entries, size_t n);
  int (*abort_reserved)(ecc_handle_t h, uint64_t token);
  int (*lookup)(ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_t *out);
  int (*load_pinned)(ecc_handle_t h, const ecc_load_pinned_t *entries, size_t n,
                     void *compute_stream);
  int (*unpin)(ecc_handle_t h, uint64_t token);
  int (*remove)(ecc_handle_t h, const char *key);
  int (*list)(ecc_handle_t h, uint64_t *cursor, ecc_listed_t *out, size_t cap, size_t *n_out);
  /* minor 2 */
  int (*reserve_ex)(ecc_handle_t h, const ecc_reserve_args_t *args, ecc_entry_t *out);
  int (*peek)(ecc_handle_t h, const char *const *keys, size_t n, ecc_peek_t *out);
  int (*wait_ready)(ecc_handle_t h, const char *key, uint32_t ranks, uint64_t timeout_ns,
                    ecc_entry_t *out, ecc_entry_meta_t *meta);
  int (*lookup_ex)(ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks,
                   ecc_entry_t *out, ecc_entry_meta_t *meta);
  int (*load_typed)(ecc_handle_t h, const ecc_load_typed_t *entries, size_t n,
                    void *compute_stream);
  int (*list_ex)(ecc_handle_t h, uint64_t *cursor, ecc_listed_t *out, ecc_entry_meta_t *meta,
                 size_t cap, size_t *n_out);
  int (*events)(ecc_handle_t h, uint64_t *cursor, ecc_event_t *out, size_t cap, size_t *n_out,
                uint64_t *lost);
};

struct loaded_plugin {
  void *dl;                   /* dlopen handle; NULL when nothing is loaded */
  char path[PLUGIN_PATH_MAX]; /* canonical path of the file loaded */
  struct plugin_ops ops;
};

/* Which input a resolve error is about, so that the caller can point at the
 * INI line it came from. */
enum plugin_input {
  PLUGIN_INPUT_NONE, /* e.g. ECC_PLUGIN_DIR: named in the message itself */
  PLUGIN_INPUT_NAME,
  PLUGIN_INPUT_PATH,
  PLUGIN_INPUT_FOLDER,
};

/* The plugin file for `path` (absolute) or for short `name` (exactly one is
 * non-NULL). A name becomes <folder>/libecc-<name>.so, folder being `folder_given`, else
 * $ECC_PLUGIN_DIR (not in setuid/setgid processes), else the folder "ecc"
 * beside libecc-host.so. Checks the text only: the file may not exist.
 * Returns ECC_OK or ECC_ERR_CONFIG (reason in err, culprit set). */
int plugin_resolve(const char *name, const char *path, const char *folder_given, char *file,
                   size_t file_cap, enum plugin_input *culprit, char *err, size_t err_cap);

/* Check the file (a regular file that it, and every directory on its
 * canonical path, is owned by root or this user and writable by nobody
 * else, as common/trust.h says), dlopen its canonical path (which
 * runs the plugin's constructors) and check its table.
 * Returns ECC_OK; ECC_ERR_CONFIG (file not found, unsafe, not a file);
 * ECC_ERR_SYSTEM (a system call or dlopen failed); ECC_ERR_INCOMPATIBLE (no
 * table this host knows, wrong major, table too small, a required field
 * NULL, the table or what it points at outside the plugin's own segments).
 * On error nothing stays loaded. */
int plugin_load(const char *file, struct loaded_plugin *out, char *err, size_t err_cap);

/* Once a plugin has created a connector it stays mapped for the life of the
 * process (RTLD_NODELETE): its code and static state, such as the handles it
 * gave, must outlive every ecc_close, so that a late call never jumps into
 * unmapped code and a plugin whose handle table restarts when it is loaded
 * again cannot revive a handle shut down long ago. Returns ECC_OK or
 * ECC_ERR_SYSTEM (dlopen refused). */
int plugin_keep_resident(const struct loaded_plugin *p, char *err, size_t err_cap);

/* dlclose of this reference; a resident object stays mapped.
 * The plugin's connectors must all be shut down already. */
void plugin_unload(struct loaded_plugin *p);

#endif /* ECC_LOADER_H */
