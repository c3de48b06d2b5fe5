/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ecc_host.h - the library a host application links to use an encoder-cache
 * connector plugin chosen by an INI file.
 *
 * ecc_open() reads the INI file, loads the plugin it names (dlopen, which
 * runs the plugin's constructors in the calling process), checks its ABI
 * table before calling any of its functions (the table, its strings and
 * its functions must all lie inside the plugin's own loaded object), and
 * creates a connector. The four step operations (save, flush, load,
 * poll) then forward to the plugin; ecc_close() shuts the connector down.
 * A plugin that has created a connector stays loaded for the life of the
 * process (RTLD_NODELETE), so that its code and its handle
 * table outlive every ecc_close: a handle shut down stays invalid even
 * after the plugin is opened again, and a later ecc_open of the same file
 * uses the code already loaded (replacing the file takes effect in a new
 * process). A plugin that is refused, or whose create fails, is unloaded. Swapping
 * connectors means editing the INI file only. ecc_check() loads the plugin
 * in a child process instead, so a plugin that exits, crashes or hangs
 * while loading is reported and the caller is unaffected.
 *
 * INI layout: section [plugin] belongs to this library:
 *     name = shm            short name: <plugin dir>/libecc-<name>.so
 *     path = /abs/lib.so    or an absolute path (one of name/path)
 *     dir  = /abs/dir       plugin directory for short names (optional)
 *     log_level = info      error | warn | info | debug (default warn)
 * Every other "[section] key = value" is passed to the plugin as the pair
 * "section.key" = "value"; the plugin publishes which keys it accepts.
 * A '#' or ';' that starts a line or follows whitespace (a space, a tab)
 * starts a comment; anywhere else it is part of the value ("a;b", "/x#y").
 * The file must be a regular file of at most 4 MiB, with lines of at most
 * 198 characters; it and every directory above it must be owned by root or
 * the caller and writable by nobody else (sticky directories excepted).
 *
 * The plugin directory for short names is, first to last: [plugin] dir, the
 * environment variable ECC_PLUGIN_DIR (ignored in setuid/setgid processes),
 * then the folder "ecc" beside this library. A short name is letters,
 * digits, '-' and '_' only, so it cannot leave that directory.
 *
 * Only a plugin file that another user cannot control is loaded: the file
 * and every directory on its canonical path (symbolic links resolved, so a
 * link is judged by where it leads) must be owned by root or by the
 * process's effective user and writable by nobody else; a directory that
 * others may write is accepted only with the sticky bit (as /tmp), where
 * the next component must pass the rule itself. The error names the
 * component and the reason. The canonical path is the one loaded.
 *
 * Return codes are the plugin ABI's (ECC_OK, ECC_ERR_*); ecc_strerror()
 * names them. A plugin that answers with a code outside that set, or with
 * completions that do not fit or cannot be read, gets ECC_ERR_INCOMPATIBLE
 * from the call instead, and ecc_last_error() says what it did.
 *
 * Threading follows the plugin ABI (see ecc_plugin_v1.h). ecc_close() may
 * race with calls on other threads: it waits for the calls already inside
 * the plugin, and calls that arrive while it runs return ECC_ERR_CLOSED.
 * A call made after ecc_close() has returned is the caller's error, as with
 * fclose(): the connector's memory is gone.
 *
 * A connector belongs to the process that opened it. In a child made by
 * fork() every call on an inherited connector returns ECC_ERR_CLOSED (and
 * logs once why); ecc_close() there frees the child's copy of the connector
 * and returns ECC_OK, touching nothing the parent still uses.
 */
#ifndef ECC_HOST_H
#define ECC_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "ecc_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ecc_connector ecc_connector_t;

/* Optional settings for ecc_open(); NULL means all defaults. */
typedef struct ecc_open_options {
  uint32_t struct_size; /* sizeof(ecc_open_options_t) */
  const ecc_kv_t
      *overrides; /* pairs that replace or add to the INI's, e.g. {"connector.role","consumer"} */
  size_t n_overrides;
  /* Log sink; NULL logs to stderr, less the error lines of a call that
   * returns that error (said once: the caller has the status, and
   * ecc_last_error or err the text). A sink given here gets every line.
   * Called from any thread. */
  void (*log)(void *user, int level, const char *msg);
  void *log_user;
  int log_level; /* -1: take [plugin] log_level from the INI */
  /* ecc_check and ecc_check_params only: how long the check process may
   * take to load and validate the plugin before it is killed, at most
   * 3600000 (an hour); 0 means 10000. */
  uint64_t check_timeout_ms;
} ecc_open_options_t;

/* Open a connector from an INI file. On failure returns an ECC_ERR_* code,
 * writes the reason (naming the file, line or key at fault) to err, sets
 * *out to NULL and leaves nothing loaded or created. */
int ecc_open(const char *ini_path, const ecc_open_options_t *opt, ecc_connector_t **out, char *err,
             size_t err_cap);

/* The four step operations and ecc_close: see ecc_plugin_v1.h for their full
 * contract. */
int ecc_save(ecc_connector_t *c, const ecc_save_entry_t *entries, size_t n);
int ecc_flush(ecc_connector_t *c, void *compute_stream);
int ecc_load(ecc_connector_t *c, const ecc_load_entry_t *entries, size_t n, void *compute_stream);
int ecc_poll(ecc_connector_t *c, ecc_completion_t *out, size_t cap, size_t *n_out);
/* Wait for calls inside the plugin, shut down and free c; the plugin stays
 * loaded (see above). NULL is a no-op returning ECC_OK; a second ecc_close()
 * running at the same time returns ECC_ERR_CLOSED. */
int ecc_close(ecc_connector_t *c);

/* Optional plugin functions; ECC_ERR_UNSUPPORTED when the plugin lacks one. */
int ecc_get_stats(ecc_connector_t *c, ecc_stats_t *out);
int ecc_describe(ecc_connector_t *c, ecc_info_t *out);
int ecc_last_error(ecc_connector_t *c, char *buf, size_t cap);

/* The directory (ABI 1.1; see "The directory" in ecc_plugin_v1.h for the
 * lifecycle and the full contract). ECC_ERR_UNSUPPORTED when the plugin is
 * of ABI 1.0 or lacks the function, or the connector's region has no
 * directory. Tokens are valid in every process attached to the region. */
int ecc_reserve(ecc_connector_t *c, const char *key, uint64_t nbytes, ecc_entry_t *out);
int ecc_save_reserved(ecc_connector_t *c, const ecc_save_reserved_t *entries, size_t n);
int ecc_abort_reserved(ecc_connector_t *c, uint64_t token);
int ecc_lookup(ecc_connector_t *c, const char *const *keys, size_t n, uint32_t ranks,
               ecc_entry_t *out);
int ecc_load_pinned(ecc_connector_t *c, const ecc_load_pinned_t *entries, size_t n,
                    void *compute_stream);
int ecc_unpin(ecc_connector_t *c, uint64_t token);
int ecc_remove(ecc_connector_t *c, const char *key);
int ecc_list(ecc_connector_t *c, uint64_t *cursor, ecc_listed_t *out, size_t cap, size_t *n_out);

/* The cache (ABI 1.2; see "The cache" in ecc_plugin_v1.h). ECC_ERR_UNSUPPORTED
 * when the plugin is older or lacks the function, or the connector's region
 * has no directory. ecc_wait_ready refuses ranks above ECC_RANKS_MAX itself,
 * as ecc_lookup does. */
int ecc_reserve_ex(ecc_connector_t *c, const ecc_reserve_args_t *args, ecc_entry_t *out);
int ecc_peek(ecc_connector_t *c, const char *const *keys, size_t n, ecc_peek_t *out);
int ecc_wait_ready(ecc_connector_t *c, const char *key, uint32_t ranks, uint64_t timeout_ns,
                   ecc_entry_t *out, ecc_entry_meta_t *meta);
int ecc_lookup_ex(ecc_connector_t *c, const char *const *keys, size_t n, uint32_t ranks,
                  ecc_entry_t *out, ecc_entry_meta_t *meta);
int ecc_load_typed(ecc_connector_t *c, const ecc_load_typed_t *entries, size_t n,
                   void *compute_stream);
int ecc_list_ex(ecc_connector_t *c, uint64_t *cursor, ecc_listed_t *out, ecc_entry_meta_t *meta,
                size_t cap, size_t *n_out);
int ecc_events(ecc_connector_t *c, uint64_t *cursor, ecc_event_t *out, size_t cap, size_t *n_out,
               uint64_t *lost);

/* A dtype's name ("float16"; "none" for ECC_DTYPE_NONE) and its bytes per
 * element (0 for none); NULL and 0 for a value that is no dtype. */
const char *ecc_dtype_name(uint32_t dtype);
size_t ecc_dtype_bytes(uint32_t dtype);

/* The loaded plugin's table header, as negotiated. */
typedef struct ecc_plugin_meta {
  char path[4096];           /* resolved plugin file */
  char name[64];             /* plugin's short name */
  char version[64];          /* plugin's implementation version */
  uint32_t abi_major;        /* the plugin's ABI major */
  uint32_t abi_minor;        /* the plugin's ABI minor */
  uint32_t negotiated_minor; /* min(host's, plugin's) */
  uint32_t caps;             /* ECC_CAP_* */
  const ecc_param_t *params; /* the keys the plugin accepts: from ecc_plugin_info valid while
                              the connector is open, from ecc_check_params inside its block,
                              NULL from ecc_check */
  size_t n_params;
} ecc_plugin_meta_t;
int ecc_plugin_info(ecc_connector_t *c, ecc_plugin_meta_t *out);

/* Validate an INI file without creating anything: parse it, then in a
 * child process (fork, no exec) load the plugin, check its table and its
 * keys and let it validate the configuration. The plugin's code runs only
 * in the child; nothing is loaded or created in the caller's process, and
 * the child is reaped before this returns. The caller's buffered stdio
 * output is flushed before the fork. `meta` (may be NULL) receives the
 * plugin's header on success. On success err receives the plugin's
 * one-line summary of the configuration; on failure the reason. A plugin
 * that ends the child (exit, _exit, a signal) or does not finish within
 * check_timeout_ms (then the child is killed) gives ECC_ERR_INCOMPATIBLE
 * with how it ended, e.g. "... the check process exited with status 42
 * while loading or validating the plugin, before it reported" or "... was
 * killed by signal 11 (SIGSEGV: Segmentation fault) ...". In a process
 * that ignores SIGCHLD (or reaps children it did not start) the child's
 * status is lost: its report still counts, and a child that sent none gives
 * ECC_ERR_SYSTEM ("cannot learn how the check process ended"). */
int ecc_check(const char *ini_path, const ecc_open_options_t *opt, ecc_plugin_meta_t *meta,
              char *err, size_t err_cap);

/* ecc_check, and on success *out receives the plugin's header together
 * with the keys it accepts (params, their defaults and help texts) in one
 * block from malloc, which the caller releases with free(). On failure
 * *out is NULL. out must not be NULL (ECC_ERR_INVALID). */
int ecc_check_params(const char *ini_path, const ecc_open_options_t *opt, ecc_plugin_meta_t **out,
                     char *err, size_t err_cap);

/* Name of a status code, e.g. "ECC_ERR_RANGE: block id past the region, or data
 * larger than its blocks".
 * The text is constant and lives as long as the library, for unknown codes
 * too (one text for all of them). */
const char *ecc_strerror(int code);

/* This library's version, "MAJOR.MINOR.PATCH": constant text, never NULL. */
const char *ecc_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ECC_HOST_H */
