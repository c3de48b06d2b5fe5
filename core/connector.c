/* SPDX-License-Identifier: Apache-2.0 */
/*
 * connector.c - a connector's life: its region and engine opened at create
 * (the host engine where CUDA is not usable and not required; a kept
 * region's directory restarted), its stats and description read,
 * everything waited for and freed at destroy, and the read-only views of
 * conn.h. The calls are in block_calls.c and directory_calls.c, the
 * in-flight queue in inflight.c and poll.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "core/internal.h"
#include "core/settle.h"

static int open_engine(struct conn *c)
{
  const struct plugin_config *cfg = &c->cfg;
  if (cfg->engine == ENGINE_HOST)
    return engine_host_create(cfg, &c->region, &c->log, &c->engine);
  int rc = engine_cuda_create(cfg, &c->region, &c->log, &c->engine);
  if (rc == ECC_OK) {
    log_msg(&c->log, ECC_LOG_INFO, "engine: cuda (%s)", c->engine.detail);
    return ECC_OK;
  }
  if (rc != ECC_ERR_UNSUPPORTED || cfg->engine == ENGINE_CUDA) {
    if (rc == ECC_ERR_UNSUPPORTED)
      return log_fail(&c->log, rc, "engine.type = cuda: %s", c->engine.detail);
    return rc;
  }
  char why[sizeof(c->engine.detail)];
  snprintf(why, sizeof(why), "%s", c->engine.detail);
  rc = engine_host_create(cfg, &c->region, &c->log, &c->engine);
  if (rc == ECC_OK)
    log_msg(&c->log, ECC_LOG_INFO, "engine: host, since cuda is not usable (%s)", why);
  return rc;
}

/* The directory's sizes, the same in every process of the region. */
static struct dir_params directory_params(const struct plugin_config *cfg)
{
  struct dir_params p = {
      .num_blocks = (uint32_t)cfg->num_blocks,
      .block_size = cfg->block_size,
      .max_entries = cfg->dir_max_entries,
      .max_pins = cfg->dir_max_pins,
      .reserve_timeout_ns = (uint64_t)cfg->dir_reserve_timeout_ms * 1000000u,
      .pin_timeout_ns = (uint64_t)cfg->dir_pin_timeout_ms * 1000000u,
      .lock_timeout_ns = (uint64_t)cfg->dir_lock_timeout_ms * 1000000u,
      .policy = (uint32_t)cfg->dir_policy,
      .event_slots = cfg->dir_event_slots,
  };
  return p;
}

/* region_open's formatter: the builder lays the directory out before any
 * other process can see the file. */
static int format_directory(void *arg, uint8_t *mem, uint64_t bytes, struct ecc_log *log)
{
  const struct plugin_config *cfg = arg;
  struct dir_params p = directory_params(cfg);
  char why[256] = "";
  int rc = dir_format(mem, (size_t)bytes, &p, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(log, rc, "directory: %s", why);
  return ECC_OK;
}

static int attach_directory(struct conn *c)
{
  struct dir_params p = directory_params(&c->cfg);
  char why[256] = "";
  int rc = dir_attach(&c->dir, c->region.dir, (size_t)c->region.dir_bytes, &p, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "region %s: directory: %s%s", c->region.path, why,
                    c->region.kept ? REGION_KEPT_HINT : "");
  c->has_dir = true;
  return ECC_OK;
}

/* A kept region that no process held when this one joined it: what its
 * dead processes left reserved or pinned is freed before its entries are
 * served again (a reservation's bytes may be half-written). */
static int restart_directory(struct conn *c)
{
  char why[256] = "";
  uint32_t freed = 0;
  struct dir_counters k;
  int rc = dir_restart(&c->dir, &freed, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "region %s: the kept region cannot be reused: %s", c->region.path,
                    why);
  rc = dir_get_counters(&c->dir, &k);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "region %s: the kept region's counters cannot be read",
                    c->region.path);
  log_msg(&c->log, ECC_LOG_INFO,
          "region %s: reusing the kept region (region.persist): %" PRIu64 " entries, %" PRIu32
          " reservations and pins of processes gone freed",
          c->region.path, k.entries, freed);
  return ECC_OK;
}

/* The region a configuration asks for, its directory area included (0 with
 * the directory off, or when it cannot be laid out: *area_ok says which). */
static struct region_params params_of(const struct plugin_config *cfg, bool *area_ok)
{
  uint64_t area = 0;
  if (cfg->directory) {
    struct dir_params dp = directory_params(cfg);
    area = dir_bytes(&dp);
  }
  *area_ok = !cfg->directory || area != 0;
  return (struct region_params){
      .folder = cfg->region_folder,
      .name = cfg->region_name,
      .block_size = cfg->block_size,
      .num_blocks = cfg->num_blocks,
      .mode = cfg->region_mode,
      .join_timeout_ms = cfg->join_timeout_ms,
      .reap_orphans = cfg->reap_orphans,
      .any_filesystem = !cfg->require_tmpfs,
      .persist = cfg->persist,
      .dir_bytes = area,
      .dir_format = format_directory,
      .dir_arg = (void *)cfg,
  };
}

static int area_fails(struct ecc_log *log, const struct plugin_config *cfg)
{
  return log_fail(log, ECC_ERR_CONFIG,
                  "directory: %" PRIu64 " blocks with %u entry and %u pin slots cannot be "
                  "laid out (directory.max_entries, directory.max_pins)",
                  cfg->num_blocks, cfg->dir_max_entries, cfg->dir_max_pins);
}

static int open_region(struct conn *c)
{
  bool area_ok;
  struct region_params p = params_of(&c->cfg, &area_ok);
  if (!area_ok)
    return area_fails(&c->log, &c->cfg);
  int rc = region_open(&p, &c->region, &c->log);
  if (rc == ECC_OK && c->cfg.directory)
    rc = attach_directory(c);
  if (rc == ECC_OK && c->has_dir && c->region.restarted)
    rc = restart_directory(c);
  if (rc != ECC_OK && c->region.fd >= 0)
    region_close(&c->region, &c->log);
  return rc;
}

/* The step's and the in-flight queue's locks, known to the log; on a
 * failure neither is left. */
static int make_locks(struct conn *c)
{
  int rc = lock_mutex_init(&c->step_lock, &c->log);
  if (rc == ECC_OK && (rc = inflight_init(&c->inflight, &c->log)) != ECC_OK)
    lock_mutex_destroy(&c->step_lock);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "create: the connector's locks cannot be made");
  return ECC_OK;
}

/* The engine's, then the transfer pool over its descriptor memory; on a
 * failure neither is left. */
static int open_copies(struct conn *c)
{
  int rc = open_engine(c);
  if (rc != ECC_OK)
    return rc;
  const struct engine_ops *ops = c->engine.ops;
  rc = transfer_pool_init(&c->pool, &c->log, ops->desc_alloc, ops->desc_free, c->engine.impl);
  if (rc != ECC_OK) {
    ops->destroy(&c->engine);
    return log_fail(&c->log, rc, "create: the transfer pool's lock cannot be made");
  }
  return ECC_OK;
}

/* What create set up before the region and the engine. */
static void free_conn(struct conn *c)
{
  lock_mutex_destroy(&c->step_lock);
  inflight_destroy(&c->inflight);
  log_destroy(&c->log);
  free(c);
}

int conn_create(const struct plugin_config *cfg, const ecc_host_services_v1_t *host, char *err,
                size_t err_cap, struct conn **out)
{
  struct conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return errtext_fail(err, err_cap, ECC_ERR_NOMEM, "create: out of memory");
  c->cfg = *cfg;
  log_init(&c->log, host);
  c->log.err = err;
  c->log.err_cap = err_cap;
  c->region.fd = -1;
  c->save_rank = cfg->tp_rank == 0 && cfg->pcp_rank == 0;
  int rc = make_locks(c);
  if (rc != ECC_OK) {
    log_destroy(&c->log);
    free(c);
    return rc;
  }
  rc = open_region(c);
  if (rc == ECC_OK) {
    rc = open_copies(c);
    if (rc != ECC_OK)
      region_close(&c->region, &c->log);
  }
  c->log.err = NULL;
  if (rc != ECC_OK) {
    free_conn(c);
    return rc;
  }
  c->inflight.stats.pin_ns = c->engine.pin_ns;
  log_msg(&c->log, ECC_LOG_INFO,
          "connector: %s, region %s (%" PRIu64 " blocks of %" PRIu64 " B, %s), engine %s: %s",
          config_role_name(cfg->role), c->region.path, c->region.num_blocks, c->region.block_size,
          c->region.creator ? "created" : "joined", c->engine.ops->name, c->engine.detail);
  *out = c;
  return ECC_OK;
}

/* Copy `full` into the caller's struct, which may be an older, shorter
 * version: as many bytes as its struct_size says, which stays as it was. */
static void copy_versioned(void *out, uint32_t *struct_size, const void *full, size_t full_size)
{
  uint32_t size = *struct_size;
  memcpy(out, full, size < full_size ? size : full_size);
  *struct_size = size;
}

/* `struct_size` is the caller's out->struct_size, NULL when out is NULL. A
 * struct too short to hold its own struct_size cannot say what it is. */
static int check_versioned(struct conn *c, const char *what, const uint32_t *struct_size)
{
  if (struct_size == NULL)
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: out is NULL", what);
  if (*struct_size < sizeof(*struct_size))
    return log_fail(&c->log, ECC_ERR_INVALID, "%s: out->struct_size %u is too small to hold itself",
                    what, *struct_size);
  return ECC_OK;
}

int conn_stats(struct conn *c, ecc_stats_v1_t *out)
{
  int rc = check_versioned(c, "stats", out != NULL ? &out->struct_size : NULL);
  if (rc != ECC_OK)
    return rc;
  ecc_stats_v1_t copy;
  lock_mutex_lock(&c->inflight.lock);
  copy = c->inflight.stats;
  lock_mutex_unlock(&c->inflight.lock);
  rc = directory_counters(c, &copy.directory, &copy.cache);
  if (rc != ECC_OK)
    return rc;
  copy_versioned(out, &out->struct_size, &copy, sizeof(copy));
  return ECC_OK;
}

int conn_describe(struct conn *c, ecc_info_v1_t *out)
{
  int rc = check_versioned(c, "describe", out != NULL ? &out->struct_size : NULL);
  if (rc != ECC_OK)
    return rc;
  ecc_info_v1_t info;
  memset(&info, 0, sizeof(info));
  info.creator = (uint32_t)c->region.creator;
  snprintf(info.region_path, sizeof(info.region_path), "%s", c->region.path);
  info.block_size = c->region.block_size;
  info.num_blocks = c->region.num_blocks;
  info.region_bytes = c->region.map_bytes;
  snprintf(info.engine, sizeof(info.engine), "%s", c->engine.ops->name);
  snprintf(info.engine_detail, sizeof(info.engine_detail), "%s", c->engine.detail);
  snprintf(info.role, sizeof(info.role), "%s", config_role_name(c->cfg.role));
  info.save_rank = (uint32_t)c->save_rank;
  info.pinned = (uint32_t)c->engine.pinned;
  info.max_inflight = c->cfg.max_inflight;
  info.persist = (uint32_t)c->region.kept;
  info.restarted = (uint32_t)(c->has_dir && c->region.restarted);
  if (c->has_dir)
    snprintf(info.policy, sizeof(info.policy), "%s", config_policy_name(c->cfg.dir_policy));
  copy_versioned(out, &out->struct_size, &info, sizeof(info));
  return ECC_OK;
}

/* A refusal here is not recorded: it would replace the text asked for. */
int conn_last_error(struct conn *c, char *buf, size_t cap)
{
  if (buf == NULL && cap > 0)
    return ECC_ERR_INVALID;
  log_last(&c->log, buf, cap);
  return ECC_OK;
}

void conn_destroy(struct conn *c)
{
  lock_mutex_lock(&c->inflight.lock);
  /* What is settled below touches the directory: not if its pages are gone. */
  c->inflight.dir_gone = c->inflight.dir_gone || (c->has_dir && !settle_reachable(&c->region));
  poll_drain_all(c, &c->inflight.saves);
  poll_drain_all(c, &c->inflight.loads);
  lock_mutex_unlock(&c->inflight.lock);
  transfer_pool_destroy(&c->pool);
  if (c->pending != NULL) {
    /* A batch gets its direction at flush; this one never got there. */
    c->pending->view.direction = ECC_DIR_SAVE;
    poll_settle_unreported(c, c->pending, ECC_ERR_CLOSED); /* never submitted: freed */
    if (!c->inflight.dir_gone)
      settle_unclaim(&c->dir, c->pending, 0);
    transfer_free(c->pending);
  }
  c->engine.ops->destroy(&c->engine);
  region_close(&c->region, &c->log);
  free(c->order);
  free(c->named);
  free(c->named_res);
  free_conn(c);
}

/* eccctl rm reads the region's path here, as "region <path>: ", so that it
 * finds the file without opening a connector. */
void conn_summary(const struct plugin_config *cfg, char *buf, size_t cap)
{
  char folder[sizeof(cfg->region_folder)];
  snprintf(buf, cap,
           "%s, region %s/ecc-%s.region: %" PRIu64 " blocks of %" PRIu64 " B (%" PRIu64
           " B), engine %s, max_inflight %u",
           config_role_name(cfg->role), config_region_folder(cfg, folder, sizeof(folder)),
           cfg->region_name, cfg->num_blocks, cfg->block_size, cfg->num_blocks * cfg->block_size,
           config_engine_name(cfg->engine), cfg->max_inflight);
}

/* What opening would refuse of the region before creating anything (its
 * folder, its filesystem's room), with open's own texts into err. */
static int validate_region(const struct plugin_config *cfg, char *err, size_t err_cap)
{
  struct ecc_log log;
  log_init(&log, NULL);
  log.err = err;
  log.err_cap = err_cap;
  bool area_ok;
  struct region_params p = params_of(cfg, &area_ok);
  int rc = area_ok ? region_precheck(&p, &log) : area_fails(&log, cfg);
  log_destroy(&log);
  return rc;
}

int conn_validate(const struct plugin_config *cfg, char *err, size_t err_cap)
{
  if (cfg->engine == ENGINE_CUDA && !engine_cuda_built())
    return errtext_fail(err, err_cap, ECC_ERR_CONFIG,
                        "config: engine.type = cuda but this plugin was built without CUDA");
  int rc = validate_region(cfg, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  if (err != NULL && err_cap > 0)
    conn_summary(cfg, err, err_cap);
  return ECC_OK;
}

/* ---- read-only views (conn.h) ---- */

void conn_region(const struct conn *c, struct conn_region_view *out)
{
  out->blocks = c->region.blocks;
  out->block_size = c->region.block_size;
  out->num_blocks = c->region.num_blocks;
  out->identity = region_identity(&c->region);
}

bool conn_engine_is_cuda(const struct conn *c)
{
  return engine_is_cuda(&c->engine);
}

const char *conn_engine_name(const struct conn *c)
{
  return c->engine.ops->name;
}

uint32_t conn_pin_slots(const struct conn *c)
{
  return c->has_dir ? c->dir.shape.max_pins : 0;
}

const struct plugin_config *conn_config(const struct conn *c)
{
  return &c->cfg;
}

struct ecc_log *conn_log(struct conn *c)
{
  return &c->log;
}

void conn_hold_release(uint32_t *hold, bool bytes_ok)
{
  engine_hold_release(hold, bytes_ok);
}
