/*
 * connector.h - one connector instance: the worker of the encoder cache.
 * It checks every request, turns a step's saves and loads into batched
 * transfers, keeps them in per-direction FIFOs and reports completions.
 * It owns its region and engine; plugin.c maps ABI handles onto it.
 */
#ifndef ECC_CONNECTOR_H
#define ECC_CONNECTOR_H

#include <pthread.h>

#include "config.h"
#include "ecc_plugin_v1.h"
#include "engine.h"
#include "log.h"
#include "region.h"
#include "transfer.h"

struct fifo {
  struct transfer *head, *tail;
  size_t count;                 /* transfers queued, finished or not */
};

struct conn {
  struct plugin_config cfg;
  struct ecc_log log;
  struct region region;
  struct engine engine;
  int save_rank;                /* tp_rank == 0 && pcp_rank == 0 */

  pthread_mutex_t step_lock;    /* save / flush / load state below */
  struct transfer *pending;     /* the save batch this step is filling */
  uint64_t save_batches;        /* batches submitted per direction */
  uint64_t load_batches;
  uint64_t *order;              /* load scratch: keys (first block << 32 | entry index), then as many for the sort */
  size_t order_cap;             /* keys it has room for */

  pthread_mutex_t done_lock;    /* FIFOs, free transfers, stats */
  struct fifo saves;
  struct fifo loads;
  struct transfer *free_list;
  ecc_stats_v1_t stats;
  int region_dead;              /* a poll found the region removed, replaced or truncated */
};

/* Create: parse nothing (cfg is checked), open region and engine. */
int conn_create(const struct plugin_config *cfg, const ecc_host_services_v1_t *host,
                char *err, size_t err_cap, struct conn **out);
int conn_save(struct conn *c, const ecc_save_entry_v1_t *e, size_t n);
int conn_flush(struct conn *c, void *stream);
int conn_load(struct conn *c, const ecc_load_entry_v1_t *e, size_t n, void *stream);
int conn_poll(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out);
void conn_stats(struct conn *c, ecc_stats_v1_t *out);
void conn_describe(struct conn *c, ecc_info_v1_t *out);
/* Wait for everything in flight, release it all, close the region. */
void conn_destroy(struct conn *c);

/* The one-line summary of a configuration (validate's success text). */
void conn_summary(const struct plugin_config *cfg, char *buf, size_t cap);

#endif /* ECC_CONNECTOR_H */
