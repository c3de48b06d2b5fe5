/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connector.h - one connector instance: the worker of the encoder cache.
 * It checks every request, turns a step's saves and loads into batched
 * transfers, keeps them in per-direction FIFOs and reports completions.
 * It owns its region and engine; plugin.c maps ABI handles onto it and
 * sees only these functions (struct conn is the connector's own).
 */
#ifndef ECC_CONNECTOR_H
#define ECC_CONNECTOR_H

#include <stddef.h>

#include "ecc_plugin_v1.h"

struct conn;
struct plugin_config;

/* Create: parse nothing (cfg is checked), open region and engine. */
int conn_create(const struct plugin_config *cfg, const ecc_host_services_v1_t *host, char *err,
                size_t err_cap, struct conn **out);
int conn_save(struct conn *c, const ecc_save_entry_v1_t *e, size_t n);
int conn_flush(struct conn *c, void *stream);
int conn_load(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream);
int conn_poll(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out);
/* describe and last_error never fail: ECC_OK, so that every call on a
 * handle has one shape (plugin.c); stats fails only on a region with a
 * directory, when the directory cannot be read (conn_dir_stats). */
int conn_stats(struct conn *c, ecc_stats_v1_t *out);
int conn_describe(struct conn *c, ecc_info_v1_t *out);
int conn_last_error(struct conn *c, char *buf, size_t cap);
/* The directory of ABI 1.1 (dir_calls.c). */
int conn_reserve(struct conn *c, const char *key, uint64_t nbytes, ecc_entry_v1_t *out);
int conn_save_reserved(struct conn *c, const ecc_save_reserved_v1_t *e, size_t n);
int conn_abort_reserved(struct conn *c, uint64_t token);
int conn_lookup(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_v1_t *out);
int conn_load_pinned(struct conn *c, const ecc_load_pinned_v1_t *e, size_t n, void *stream);
int conn_unpin(struct conn *c, uint64_t token);
int conn_remove(struct conn *c, const char *key);
int conn_list(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap, size_t *n_out);
/* Wait for everything in flight, release it all, close the region. */
void conn_destroy(struct conn *c);

/* The one-line summary of a configuration (validate's success text). */
void conn_summary(const struct plugin_config *cfg, char *buf, size_t cap);

#endif /* ECC_CONNECTOR_H */
