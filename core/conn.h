/* SPDX-License-Identifier: Apache-2.0 */
/*
 * conn.h - the local cache's one face: a connector over a shared region
 * (its directory, its copy engine), as every plugin and the rest of the
 * tree see it. struct conn is opaque; nothing outside core/ includes
 * another core/ header (scripts/check-layout.py says so in CI).
 *
 * Three kinds of call: those the ABI table forwards (each checks its own
 * arguments, as the ABI's entry of the same name says), the extension
 * calls a plugin built on the cache needs (the ucx plugin), and read-only
 * views of what the connector holds. The configuration conn_create takes
 * is core/config/config.h's, part of this face.
 */
#ifndef ECC_CORE_CONN_H
#define ECC_CORE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/log.h"
#include "core/config/config.h"
#include "ecc_plugin_v1.h"

struct conn;

/* ---- the calls the ABI table forwards ---- */

/* Create: parse nothing (cfg is checked), open region and engine. */
int conn_create(const struct plugin_config *cfg, const ecc_host_services_v1_t *host, char *err,
                size_t err_cap, struct conn **out);
int conn_save(struct conn *c, const ecc_save_entry_v1_t *e, size_t n);
int conn_flush(struct conn *c, void *stream);
int conn_load(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream);
int conn_poll(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out);
/* describe and last_error fail only on their arguments (ECC_ERR_INVALID:
 * out NULL or its struct_size below 4; buf NULL with cap > 0); stats fails
 * so too, and on a region with a directory when the directory cannot be
 * read (directory_counters). */
int conn_stats(struct conn *c, ecc_stats_v1_t *out);
int conn_describe(struct conn *c, ecc_info_v1_t *out);
int conn_last_error(struct conn *c, char *buf, size_t cap);
/* The directory of ABI 1.1 (directory_calls.c). */
int conn_reserve(struct conn *c, const char *key, uint64_t nbytes, ecc_entry_v1_t *out);
int conn_save_reserved(struct conn *c, const ecc_save_reserved_v1_t *e, size_t n);
int conn_abort_reserved(struct conn *c, uint64_t token);
int conn_lookup(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_v1_t *out);
int conn_load_pinned(struct conn *c, const ecc_load_pinned_v1_t *e, size_t n, void *stream);
int conn_unpin(struct conn *c, uint64_t token);
int conn_remove(struct conn *c, const char *key);
int conn_list(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap, size_t *n_out);
/* The cache of ABI 1.2 (see "The cache" in ecc_plugin_v1.h). */
int conn_reserve_ex(struct conn *c, const ecc_reserve_args_v1_t *args, ecc_entry_v1_t *out);
int conn_peek(struct conn *c, const char *const *keys, size_t n, ecc_peek_v1_t *out);
int conn_wait_ready(struct conn *c, const char *key, uint32_t ranks, uint64_t timeout_ns,
                    ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta);
int conn_lookup_ex(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                   ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta);
int conn_load_typed(struct conn *c, const ecc_load_typed_v1_t *e, size_t n, void *stream);
int conn_list_ex(struct conn *c, uint64_t *cursor, ecc_listed_v1_t *out, ecc_entry_meta_v1_t *meta,
                 size_t cap, size_t *n_out);
int conn_events(struct conn *c, uint64_t *cursor, ecc_event_v1_t *out, size_t cap, size_t *n_out,
                uint64_t *lost);
/* Wait for everything in flight, release it all, close the region. */
void conn_destroy(struct conn *c);

/* validate: cfg as create would take it on this build (a CUDA engine
 * asked of a build without one is ECC_ERR_CONFIG), its one-line summary
 * written to err on success. */
int conn_validate(const struct plugin_config *cfg, char *err, size_t err_cap);
/* The one-line summary of a configuration (validate's success text). */
void conn_summary(const struct plugin_config *cfg, char *buf, size_t cap);

/* ---- extension calls, for a plugin built on the cache ---- */

/* Publishes a reservation whose blocks were written outside save_reserved
 * (the ucx plugin's gets land in them): as the completion of a save would.
 * ECC_ERR_CLOSED for a token that names no live reservation, ECC_ERR_BUSY
 * for one being saved. */
int conn_publish_written(struct conn *c, uint64_t token);

/* A held load (the ucx plugin's pulls with a CUDA engine): e->token names a
 * reservation whose blocks are still being written by the caller; the copy
 * of them to e->dst is queued now, ordered on `stream` as load_pinned's,
 * and waits on the device until the caller releases *hold with
 * conn_hold_release. Its polled record publishes the reservation on
 * success, frees it otherwise. On error nothing is queued or claimed. */
int conn_load_held(struct conn *c, const ecc_load_pinned_v1_t *e, void *stream, uint32_t **hold);
/* The one release of a held load's word: bytes_ok says whether its
 * reservation's blocks now hold the entry (else the load fails). */
void conn_hold_release(uint32_t *hold, bool bytes_ok);

/* Counts in the load statistics one entry a plugin built on the connector
 * delivered by other means than its engine (the ucx plugin's pulls). */
void conn_count_load(struct conn *c, uint64_t bytes, uint64_t elapsed_ns, int status);

/* `ranks` releases of one pin in one directory call (a peer's session that
 * ends gives back every rank it still held). */
int conn_unpin_ranks(struct conn *c, uint64_t token, uint32_t ranks);

/* conn_lookup for another host's client (the ucx plugin's server): pins for
 * a peer whatever this process's own role, which names its local calls. */
int conn_lookup_for_peer(struct conn *c, const char *const *keys, size_t n, uint32_t ranks,
                         ecc_entry_v1_t *out);

/* ---- read-only views ---- */

/* The region's geometry as this process maps it. */
struct conn_region_view {
  uint8_t *blocks;     /* block 0 */
  uint64_t block_size; /* bytes per block */
  uint64_t num_blocks;
  uint64_t identity; /* the same in every process that maps this file as it was built,
                      * different for any other file or a rebuild (region_identity) */
};
void conn_region(const struct conn *c, struct conn_region_view *out);

/* Whether the engine copies to and from GPU memory (streams are CUDA
 * streams), and its name ("host" or "cuda"). */
bool conn_engine_is_cuda(const struct conn *c);
const char *conn_engine_name(const struct conn *c);

/* The pin slots of the region's directory (0 without one). */
uint32_t conn_pin_slots(const struct conn *c);

/* The configuration the connector was created with. */
const struct plugin_config *conn_config(const struct conn *c);

/* The connector's log: a plugin built on it logs there, so that its
 * messages and last_error are one, and registers its own locks with it
 * (common/lock.h). */
struct ecc_log *conn_log(struct conn *c);

#endif /* ECC_CORE_CONN_H */
