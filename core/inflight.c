/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inflight.c - the in-flight queue (inflight.h): room in a direction,
 * starting an engine copy, queueing it for poll, and what finished copies
 * and skipped or delivered entries count in the statistics.
 */
#include "core/inflight.h"

#include <inttypes.h>
#include <string.h>

#include "common/names.h"
#include "core/internal.h"

int inflight_init(struct inflight *q, struct ecc_log *log)
{
  memset(q, 0, sizeof(*q));
  q->stats.struct_size = sizeof(q->stats);
  return lock_mutex_init(&q->lock, log);
}

void inflight_destroy(struct inflight *q)
{
  lock_mutex_destroy(&q->lock);
}

unsigned inflight_hist_bucket(uint64_t bytes)
{
  static const uint64_t bounds[ECC_HIST_BUCKETS - 1] = {
#define HIST_BOUND(bytes) bytes##ull,
      ECC_HIST_BOUNDS(HIST_BOUND)
#undef HIST_BOUND
  };
  unsigned b = 0;
  while (b < ECC_HIST_BUCKETS - 1 && bytes >= bounds[b])
    b++;
  return b;
}

/* The call that submits a direction's transfers, for messages. */
static const char *submit_call(int direction)
{
  return direction == ECC_DIR_SAVE ? "flush" : "load";
}

int inflight_skip_saves(struct conn *c, size_t n)
{
  lock_mutex_lock(&c->inflight.lock);
  c->inflight.stats.saves_skipped += n;
  lock_mutex_unlock(&c->inflight.lock);
  return ECC_OK;
}

int inflight_room(struct conn *c, int direction)
{
  const struct fifo *f = inflight_fifo(&c->inflight, direction);
  lock_mutex_lock(&c->inflight.lock);
  bool room = f->count < c->cfg.max_inflight;
  lock_mutex_unlock(&c->inflight.lock);
  if (room)
    return ECC_OK;
  return log_fail_at(&c->log, ECC_LOG_DEBUG, ECC_ERR_BUSY,
                     "%s: %u %s transfers are in flight (connector.max_inflight); poll first",
                     submit_call(direction), c->cfg.max_inflight, ecc_direction_name(direction));
}

int inflight_start(struct conn *c, struct transfer *t, void *stream)
{
  int rc = c->engine.ops->submit(&c->engine, &t->view, stream);
  if (rc == ECC_ERR_INVALID)
    return log_fail(&c->log, rc, "%s: the %s engine takes no compute stream; pass NULL",
                    submit_call(t->view.direction), c->engine.ops->name);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc, "%s: the %s engine could not start the copy",
                    submit_call(t->view.direction), c->engine.ops->name);
  return ECC_OK;
}

void inflight_queue_save(struct conn *c, struct transfer *t)
{
  t->batch = ++c->save_batches;
  lock_mutex_lock(&c->inflight.lock);
  fifo_push(&c->inflight.saves, t);
  lock_mutex_unlock(&c->inflight.lock);
}

int inflight_queue_load(struct conn *c, struct transfer *t, void *stream)
{
  /* Order the compute stream before the transfer is visible to poll (which
   * may recycle it at once). The copy is running either way: from here on
   * the transfer is reported whatever happens, so its completion is never
   * lost. */
  int rc = c->engine.ops->order_after(&c->engine, &t->view, stream);
  t->batch = ++c->load_batches;
  lock_mutex_lock(&c->inflight.lock);
  fifo_push(&c->inflight.loads, t);
  lock_mutex_unlock(&c->inflight.lock);
  if (rc != ECC_OK)
    return log_fail(&c->log, rc,
                    "load: could not order the compute stream after the copy; "
                    "poll for transfer completion before reading");
  return ECC_OK;
}

void inflight_count_finished(struct conn *c, struct transfer *t)
{
  const struct desc_buf *d = &t->view.desc;
  ecc_dir_stats_v1_t *s = inflight_counts(&c->inflight, t->view.direction);
  s->transfers++;
  s->entries += t->n_done;
  s->descriptors += d->count;
  s->bytes += d->bytes;
  s->busy_ns += t->elapsed_ns;
  s->hist[inflight_hist_bucket(d->bytes)]++;
  if (t->status != ECC_OK) {
    s->failed++;
    log_msg(&c->log, ECC_LOG_ERROR, "%s batch %" PRIu64 " failed (%d): %zu entries reported failed",
            ecc_direction_name(t->view.direction), t->batch, t->status, t->n_done);
  } else {
    log_msg(&c->log, ECC_LOG_DEBUG,
            "%s batch %" PRIu64 ": %zu entries, %" PRIu64 " bytes, %zu descriptors, %.3f ms",
            ecc_direction_name(t->view.direction), t->batch, t->n_done, d->bytes, d->count,
            (double)t->elapsed_ns / 1e6);
  }
}

void conn_count_load(struct conn *c, uint64_t bytes, uint64_t elapsed_ns, int status)
{
  lock_mutex_lock(&c->inflight.lock);
  ecc_dir_stats_v1_t *s = &c->inflight.stats.load;
  s->transfers++;
  s->entries++;
  s->bytes += status == ECC_OK ? bytes : 0;
  s->busy_ns += elapsed_ns;
  s->hist[inflight_hist_bucket(bytes)]++;
  s->failed += status != ECC_OK;
  lock_mutex_unlock(&c->inflight.lock);
}
