/* SPDX-License-Identifier: Apache-2.0 */
/*
 * poll.c - completions: the head of each direction's FIFO asked of the
 * engine, finished transfers counted in the stats, and their entries
 * reported exactly once, in order, failed ones and dead regions included.
 */
#include <inttypes.h>
#include <string.h>

#include "core/internal.h"
#include "core/settle.h"

/* What one poll has asked of the region's file, so that it asks once. */
struct poll_pass {
  bool region_checked;
  bool dir_checked;
};

/* Whether the directory may be touched to settle what a finished transfer
 * held (the in-flight lock held): not once the file is found cut below it. */
static bool dir_reachable(struct conn *c, struct poll_pass *p)
{
  if (!c->has_dir || c->inflight.dir_gone)
    return false;
  if (!p->dir_checked) {
    p->dir_checked = true;
    c->inflight.dir_gone = !settle_reachable(&c->region);
  }
  return !c->inflight.dir_gone;
}

/* Its copy is over: the entries its loads by block id read may be evicted
 * again. One whose hold was dropped meanwhile (a pin timeout) may have been
 * rewritten under the copy: the load fails (before it is counted). */
static void release_holds(struct conn *c, struct transfer *t, struct poll_pass *p)
{
  if (t->n_holds == 0 || !dir_reachable(c, p))
    return;
  if (settle_release_holds(&c->dir, t) == ECC_OK || t->status != ECC_OK)
    return;
  t->status = ECC_ERR_CLOSED;
  log_msg(&c->log, ECC_LOG_ERROR,
          "load batch %" PRIu64 ": an entry it read was let go while the copy ran (a pin "
          "timeout, directory.pin_timeout_ms): its bytes are not trusted",
          t->batch);
}

/* Whether the head transfer has finished, asking the engine if needed. */
static int head_finished(struct conn *c, struct transfer *t, struct poll_pass *p)
{
  if (t->finished)
    return 1;
  int status = ECC_OK;
  uint64_t elapsed = 0;
  if (!c->engine.ops->query(&c->engine, &t->view, &status, &elapsed))
    return 0;
  t->finished = 1;
  t->status = status;
  t->elapsed_ns = elapsed;
  c->engine.ops->release(&c->engine, &t->view);
  release_holds(c, t, p);
  inflight_count_finished(c, t);
  /* Its copy is over: the reservations its saves by block id held may be
   * aborted again (and are not published: see block_claims.c). */
  if (t->n_claims > 0 && dir_reachable(c, p))
    settle_unclaim(&c->dir, t, 0);
  return 1;
}

/* Before a finished transfer's first entry is reported: whether the region
 * is still the file others share, asked at most once per poll. A copy that
 * went through a region found dead fails as a whole, and is counted so, so
 * that the stats agree with the completions (the in-flight lock held). Entries of a
 * transfer already judged keep its verdict: its copy landed in the live
 * file, as did those reported before the region went. */
static void judge_region(struct conn *c, struct transfer *t, struct poll_pass *p)
{
  if (t->next_report != 0 || t->status != ECC_OK)
    return;
  if (!p->region_checked && !c->inflight.region_dead) {
    p->region_checked = true;
    c->inflight.region_dead = region_check(&c->region, &c->log) != ECC_OK;
  }
  if (c->inflight.region_dead) {
    t->status = ECC_ERR_REGION;
    inflight_counts(&c->inflight, t->view.direction)->failed++;
  }
}

/* The caller's record for one entry of a finished transfer. */
static void report(const struct transfer *t, const struct done_rec *rec, ecc_completion_v1_t *out)
{
  out->direction = (uint32_t)t->view.direction;
  out->status = t->status;
  out->batch = t->batch;
  out->nbytes = rec->nbytes;
  out->elapsed_ns = t->elapsed_ns;
  if (t->view.direction == ECC_DIR_SAVE) {
    const char *key = t->keys + rec->id;
    out->transfer_id = 0;
    memcpy(out->key, key, strlen(key) + 1);
  } else {
    out->transfer_id = rec->id;
    out->key[0] = '\0';
  }
}

/* Up to cap completions of the finished transfers at the head of f, in
 * order (the in-flight lock held). */
static size_t drain(struct conn *c, struct fifo *f, ecc_completion_v1_t *out, size_t cap,
                    struct poll_pass *p)
{
  size_t n = 0;
  while (n < cap && f->head != NULL && head_finished(c, f->head, p)) {
    struct transfer *t = f->head;
    judge_region(c, t, p);
    while (n < cap && t->next_report < t->n_done) {
      size_t i = t->next_report++;
      report(t, &t->done[i], &out[n]);
      /* (A directory cut off leaves its records' status ECC_ERR_REGION.) */
      if (t->has_tokens && t->tokens[i] != 0 && dir_reachable(c, p))
        out[n].status =
            settle_record(&c->dir, transfer_settle_direction(t), t->tokens[i], out[n].status);
      n++;
    }
    if (t->next_report == t->n_done)
      transfer_put(&c->pool, fifo_pop(f));
  }
  return n;
}

int conn_poll(struct conn *c, ecc_completion_v1_t *out, size_t cap, size_t *n_out)
{
  if (n_out != NULL)
    *n_out = 0;
  if (n_out == NULL || (out == NULL && cap > 0))
    return log_fail(&c->log, ECC_ERR_INVALID, "poll: %s is NULL", n_out == NULL ? "n_out" : "out");
  struct poll_pass p = {false, false};
  lock_mutex_lock(&c->inflight.lock);
  size_t n = drain(c, &c->inflight.saves, out, cap, &p);
  n += drain(c, &c->inflight.loads, out + n, cap - n, &p);
  lock_mutex_unlock(&c->inflight.lock);
  *n_out = n;
  return ECC_OK;
}

/* The directory work of records never reported: a finished save's entry is
 * published all the same (its copy is complete), a failed or unsubmitted
 * one freed, a load's pin released (a held load's reservation settled as a
 * save's). None where the directory is cut off (c->inflight.dir_gone, which the
 * caller has asked). */
void poll_settle_unreported(struct conn *c, struct transfer *t, int status)
{
  if (c->inflight.dir_gone)
    return;
  for (size_t i = t->next_report; t->has_tokens && i < t->n_done; i++)
    if (t->tokens[i] != 0)
      settle_record(&c->dir, transfer_settle_direction(t), t->tokens[i], status);
}

void poll_drain_all(struct conn *c, struct fifo *f)
{
  struct poll_pass p = {true, true}; /* the caller has asked (dir_gone) */
  while (f->head != NULL) {
    struct transfer *t = fifo_pop(f);
    if (!t->finished) {
      c->engine.ops->wait(&c->engine, &t->view);
      head_finished(c, t, &p);
    }
    poll_settle_unreported(c, t, t->status);
    transfer_free(t);
  }
}
