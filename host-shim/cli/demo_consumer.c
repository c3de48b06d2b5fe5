/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo_consumer.c - the demo's consumer process: joins the producer's region,
 * loads the entries it is handed in batches (looked up by key in the
 * region's directory, or by the block ids handed over where there is none;
 * one destination buffer per step, so region neighbours coalesce), checks
 * every byte against the pattern and acknowledges each entry.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host-shim/cli/demo.h"
#include "host-shim/cli/devmem.h"

#define POLL_CAP 64
#define STEP_MAX 64

struct pending {
  struct demo_msg m;
  uint64_t transfer_id;
  uint64_t offset; /* of its destination in the step buffer */
  int done;
};

struct consumer {
  const struct demo_opts *o;
  struct demo_side *side;
  ecc_connector_t *c;
  struct devmem dm;
  int msg_fd, ack_fd;
  bool use_dir; /* entries are looked up by key; messages carry no block ids */
  uint64_t bs, max_blocks;
  unsigned char *dst;  /* step buffer where the engine writes */
  unsigned char *host; /* host copy to check (== dst without a GPU) */
  uint64_t dst_bytes;
  uint32_t *ids; /* block ids of the step, per_step * max_blocks */
  uint8_t *seen; /* per entry: handed over already */
  uint64_t next_transfer_id;
  struct pending step[STEP_MAX];
  size_t n_step;
  double t_first, t_last;
};

/* Wait until fd has data (or end of file) or the deadline passes. */
static int wait_readable(int fd, double deadline)
{
  for (;;) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int n = poll(&pfd, 1, 100);
    if (n > 0)
      return 0;
    if (n < 0 && errno != EINTR)
      return -1;
    if (demo_now() > deadline)
      return -1;
  }
}

/* Wait for the producer to have created the region, then join it. */
static int join_region(struct consumer *q)
{
  struct demo_msg hello;
  if (wait_readable(q->msg_fd, q->o->deadline) != 0)
    return demo_failf(q->side, "timed out waiting for the producer to create the region");
  int rc = demo_read_all(q->msg_fd, &hello, sizeof(hello));
  if (rc != 0 || hello.type != DEMO_MSG_HELLO)
    return demo_failf(q->side, "the producer ended before the region was ready");
  ecc_info_t info;
  if (demo_open(q->o, "consumer", "join", q->side, &q->c, &info) != 0)
    return -1;
  q->bs = info.block_size;
  if (info.block_size != hello.block_size || info.num_blocks != hello.num_blocks)
    return demo_failf(q->side,
                      "joined a region of another layout than the producer's "
                      "(block size %" PRIu64 ", %" PRIu64 " blocks)",
                      info.block_size, info.num_blocks);
  q->use_dir = hello.directory != 0;
  if (q->use_dir != demo_has_directory(q->c))
    return demo_failf(q->side, "the producer's region %s a directory but this connector's %s",
                      q->use_dir ? "has" : "has no", q->use_dir ? "has none" : "has one");
  return 0;
}

static int prepare(struct consumer *q)
{
  const struct demo_opts *o = q->o;
  struct demo_side *sd = q->side;
  sd->row_bytes = o->row_bytes ? o->row_bytes : q->bs;
  q->max_blocks = demo_blocks_for(demo_max_rows(o) * sd->row_bytes, q->bs);
  q->dst_bytes = o->per_step * q->max_blocks * q->bs;
  q->ids = malloc(o->per_step * q->max_blocks * sizeof(uint32_t));
  q->seen = calloc(o->entries, 1);
  if (q->ids == NULL || q->seen == NULL)
    return demo_failf(q->side, "out of host memory");
  if (devmem_init(&q->dm, sd->on_gpu, sd->error, sizeof(sd->error)) != 0)
    return -1;
  q->dst = devmem_alloc(&q->dm, q->dst_bytes, sd->error, sizeof(sd->error));
  if (q->dst == NULL)
    return -1;
  q->host = q->dst;
  if (q->dm.on_gpu && (q->host = malloc(q->dst_bytes)) == NULL)
    return demo_failf(q->side, "out of host memory");
  return 0;
}

/* Read one ENTRY message and its block ids into the step; 1 at end of stream. */
static int take_message(struct consumer *q, uint64_t *ids_used)
{
  struct pending *pd = &q->step[q->n_step];
  memset(pd, 0, sizeof(*pd));
  int rc = demo_read_all(q->msg_fd, &pd->m, sizeof(pd->m));
  if (rc == 1)
    return 1;
  if (rc != 0)
    return demo_failf(q->side, "the message pipe broke after %" PRIu64 " entries",
                      q->side->entries);
  const struct demo_msg *m = &pd->m;
  char want[ECC_KEY_MAX + 1];
  if (m->type != DEMO_MSG_ENTRY || m->index >= q->o->entries || q->seen[m->index])
    return demo_failf(q->side, "unexpected message for entry %" PRIu64 " (type 0x%" PRIx32 ")",
                      m->index, m->type);
  demo_key(q->o, m->index, want, sizeof(want));
  uint64_t want_blocks = q->use_dir ? 0 : demo_blocks_for(m->nbytes, q->bs);
  if (m->nbytes == 0 || m->n_blocks != want_blocks || m->n_blocks > q->max_blocks ||
      strncmp(want, m->key, sizeof(want)) != 0)
    return demo_failf(q->side, "malformed message for entry %" PRIu64 " (%" PRIu64 " bytes)",
                      m->index, m->nbytes);
  if (demo_read_all(q->msg_fd, q->ids + *ids_used, m->n_blocks * sizeof(uint32_t)) != 0)
    return demo_failf(q->side, "the message pipe broke inside entry %" PRIu64, m->index);
  q->seen[m->index] = 1;
  *ids_used += m->n_blocks;
  q->n_step++;
  return 0;
}

static int readable(int fd)
{
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  int n;
  do {
    n = poll(&pfd, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

/* Gather a step: wait for one entry, then take those already waiting. */
static int gather_step(struct consumer *q)
{
  uint64_t ids_used = 0;
  q->n_step = 0;
  if (wait_readable(q->msg_fd, q->o->deadline) != 0)
    return demo_failf(q->side,
                      "timed out waiting for the producer after %" PRIu64 " of %" PRIu64 " entries",
                      q->side->entries, q->o->entries);
  int rc = take_message(q, &ids_used);
  if (rc == 1)
    return demo_failf(q->side,
                      "the producer ended the stream after %" PRIu64 " of %" PRIu64 " entries",
                      q->side->entries, q->o->entries);
  if (rc != 0)
    return -1;
  while (q->n_step < q->o->per_step && q->side->entries + q->n_step < q->o->entries &&
         readable(q->msg_fd)) {
    rc = take_message(q, &ids_used);
    if (rc != 0)
      return rc == 1 ? demo_failf(q->side,
                                  "the producer ended the stream after %" PRIu64 " of %" PRIu64
                                  " entries",
                                  q->side->entries + q->n_step, q->o->entries)
                     : -1;
  }
  return 0;
}

/* Looks the step's keys up (each pinned for this one load) and loads them. */
static int issue_pinned(struct consumer *q)
{
  const char *keys[STEP_MAX];
  ecc_entry_t found[STEP_MAX];
  ecc_load_pinned_t batch[STEP_MAX];
  for (size_t i = 0; i < q->n_step; i++)
    keys[i] = q->step[i].m.key;
  int rc = ecc_lookup(q->c, keys, q->n_step, 1, found);
  if (rc != ECC_OK) {
    demo_fail(q->side, q->c, "ecc_lookup", rc);
    return -1;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < q->n_step; i++) {
    struct pending *pd = &q->step[i];
    if (found[i].state != ECC_ENTRY_READY || found[i].nbytes != pd->m.nbytes)
      return demo_failf(q->side, "entry '%s' was handed over but the directory has %s", keys[i],
                        found[i].state == ECC_ENTRY_READY ? "another size" : "no ready entry");
    pd->transfer_id = ++q->next_transfer_id;
    pd->offset = off;
    batch[i] = (ecc_load_pinned_t){pd->transfer_id, found[i].token,
                                   (uint64_t)(uintptr_t)(q->dst + off), pd->m.nbytes};
    off += demo_blocks_for(pd->m.nbytes, q->bs) * q->bs;
  }
  if (q->t_first == 0)
    q->t_first = demo_now();
  while ((rc = ecc_load_pinned(q->c, batch, q->n_step, NULL)) != ECC_OK) {
    if (rc != ECC_ERR_BUSY || demo_now() > q->o->deadline) {
      demo_fail(q->side, q->c, "ecc_load_pinned", rc);
      return -1;
    }
    demo_nap();
  }
  q->side->steps++;
  return 0;
}

static int issue_loads(struct consumer *q)
{
  if (q->use_dir)
    return issue_pinned(q);
  ecc_load_entry_t batch[STEP_MAX];
  uint64_t off = 0, ids_used = 0;
  for (size_t i = 0; i < q->n_step; i++) {
    struct pending *pd = &q->step[i];
    pd->transfer_id = ++q->next_transfer_id;
    pd->offset = off;
    batch[i] = (ecc_load_entry_t){.transfer_id = pd->transfer_id,
                                  .block_ids = q->ids + ids_used,
                                  .n_blocks = pd->m.n_blocks,
                                  .dst = (uint64_t)(uintptr_t)(q->dst + off),
                                  .dst_capacity = pd->m.nbytes};
    /* Whole blocks apart, so entries adjacent in the region are adjacent
     * here too and the plugin can copy them as one run. */
    off += (uint64_t)pd->m.n_blocks * q->bs;
    ids_used += pd->m.n_blocks;
  }
  if (q->t_first == 0)
    q->t_first = demo_now();
  for (;;) {
    int rc = ecc_load(q->c, batch, q->n_step, NULL);
    if (rc == ECC_OK)
      break;
    if (rc != ECC_ERR_BUSY || demo_now() > q->o->deadline) {
      demo_fail(q->side, q->c, "ecc_load", rc);
      return -1;
    }
    demo_nap();
  }
  q->side->steps++;
  return 0;
}

static int take_completion(struct consumer *q, const ecc_completion_t *cp)
{
  uint64_t first = q->step[0].transfer_id;
  if (cp->direction != ECC_DIR_LOAD || cp->transfer_id < first ||
      cp->transfer_id >= first + q->n_step)
    return demo_failf(q->side,
                      "poll returned a completion nobody was waiting for "
                      "(direction %" PRIu32 ", transfer id %" PRIu64 ")",
                      cp->direction, cp->transfer_id);
  struct pending *pd = &q->step[cp->transfer_id - first];
  if (pd->done)
    return demo_failf(q->side, "transfer id %" PRIu64 " completed twice", cp->transfer_id);
  if (cp->status != ECC_OK)
    return demo_failf(q->side, "the load of entry %" PRIu64 " completed with %s", pd->m.index,
                      ecc_strerror(cp->status));
  if (cp->nbytes != pd->m.nbytes)
    return demo_failf(q->side, "the load of entry %" PRIu64 " moved %" PRIu64 " bytes", pd->m.index,
                      cp->nbytes);
  pd->done = 1;
  return 0;
}

static int wait_loads(struct consumer *q)
{
  size_t left = q->n_step;
  while (left > 0) {
    ecc_completion_t out[POLL_CAP];
    size_t n = 0;
    int rc = ecc_poll(q->c, out, POLL_CAP, &n);
    if (rc != ECC_OK) {
      demo_fail(q->side, q->c, "ecc_poll", rc);
      return -1;
    }
    for (size_t i = 0; i < n; i++)
      if (take_completion(q, &out[i]) != 0)
        return -1;
    left -= n;
    if (n == 0) {
      if (demo_now() > q->o->deadline)
        return demo_failf(q->side, "timed out waiting for %" PRIu64 " loads", left);
      demo_nap();
    }
  }
  q->t_last = demo_now();
  return 0;
}

/* Check every byte of the step, then let the producer reuse its blocks. */
static int verify_and_ack(struct consumer *q)
{
  char *err = q->side->error;
  size_t cap = sizeof(q->side->error);
  if (devmem_sync(&q->dm, err, cap) != 0)
    return -1;
  for (size_t i = 0; i < q->n_step; i++) {
    struct pending *pd = &q->step[i];
    unsigned char *h = q->host + pd->offset;
    if (q->dm.on_gpu &&
        devmem_download(&q->dm, h, q->dst + pd->offset, pd->m.nbytes, err, cap) != 0)
      return -1;
    if (q->o->corrupt >= 0 && pd->m.index == (uint64_t)q->o->corrupt)
      h[pd->m.nbytes / 2] ^= 0x5A;
    uint64_t bad = demo_verify(h, pd->m.nbytes, q->o->seed, pd->m.index);
    q->side->mismatched_bytes += bad;
    q->side->mismatched_entries += bad != 0;
    q->side->entries++;
    q->side->bytes += pd->m.nbytes;
    struct demo_ack ack = {.index = pd->m.index};
    if (demo_write_all(q->ack_fd, &ack, sizeof(ack)) != 0)
      return demo_failf(q->side, "the producer went away before entry %" PRIu64 " was acknowledged",
                        pd->m.index);
  }
  return 0;
}

static int run_stream(struct consumer *q)
{
  while (q->side->entries < q->o->entries) {
    if (gather_step(q) != 0 || issue_loads(q) != 0 || wait_loads(q) != 0 || verify_and_ack(q) != 0)
      return -1;
  }
  q->side->phase_s = q->t_last - q->t_first;
  /* The stream must end here: anything more is an entry sent twice. */
  struct demo_msg extra;
  if (demo_read_all(q->msg_fd, &extra, sizeof(extra)) != 1)
    return demo_failf(q->side, "the producer sent more than %" PRIu64 " entries", q->o->entries);
  return 0;
}

static void teardown(struct consumer *q)
{
  demo_close(q->c, q->side);
  if (q->host != q->dst)
    free(q->host);
  devmem_free(&q->dm, q->dst);
  devmem_fini(&q->dm);
  free(q->ids);
  free(q->seen);
}

int demo_consumer(const struct demo_opts *o, int msg_fd, int ack_fd, struct demo_side *side)
{
  struct consumer q;
  memset(&q, 0, sizeof(q));
  q.o = o;
  q.side = side;
  q.msg_fd = msg_fd;
  q.ack_fd = ack_fd;
  int rc = -1;
  if (join_region(&q) == 0 && prepare(&q) == 0 && run_stream(&q) == 0) {
    demo_record_stats(q.c, ECC_DIR_LOAD, side);
    rc = 0;
  }
  teardown(&q);
  side->done = rc == 0 && side->error[0] == '\0';
  return side->done ? 0 : 1;
}
