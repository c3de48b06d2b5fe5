/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo_producer.c - the demo's producer process: reserves a stream of
 * synthetic encoder outputs in the region's directory (or, on a region
 * without one, allocates their blocks from a ring of its own), with
 * back-pressure, saves them a step at a time, and hands each entry's key to
 * the consumer once its save has completed.
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

/* Steps whose sources may be in flight at once (each has its own buffer). */
#define SRC_SLOTS 3
/* Unacknowledged entries at most: keeps the consumer's acks well inside one
 * pipe buffer, so neither side can block the other on a full pipe. */
#define MAX_LIVE 2048
#define POLL_CAP 64

enum entry_state { E_NEW, E_SAVING, E_SENT, E_ACKED };

struct entry {
  uint64_t start; /* ring position of its first block */
  uint64_t span;  /* ring positions it occupies, holes included */
  uint64_t nbytes;
  uint32_t n_blocks;
  uint32_t hole_at; /* blocks before the hole */
  uint32_t hole;    /* blocks skipped (0: contiguous in the ring) */
  uint8_t state;    /* enum entry_state */
  uint8_t slot;     /* source buffer it was saved from */
  uint64_t token;   /* directory: its reservation */
};

struct producer {
  const struct demo_opts *o;
  struct demo_side *side;
  ecc_connector_t *c;
  struct devmem dm;
  int msg_fd, ack_fd;
  bool use_dir;        /* the region has a directory: it allocates, the ring only budgets */
  uint64_t bs, cap;    /* block size, blocks in the ring */
  uint64_t head, tail; /* ring positions: next free, oldest in use */
  uint64_t next;       /* next entry to produce */
  uint64_t oldest;     /* oldest entry not yet acknowledged */
  uint64_t completed;  /* save completions seen */
  uint64_t acked;
  struct entry *e;
  uint64_t max_blocks; /* blocks of the largest entry */
  uint64_t slot_bytes; /* bytes of one source buffer */
  unsigned char *src[SRC_SLOTS];
  uint64_t slot_pending[SRC_SLOTS];
  unsigned cur_slot;
  uint64_t max_inflight;  /* the connector's bound on batched saves in flight */
  unsigned char *staging; /* host copy of one entry, GPU case only */
  uint32_t *ids;          /* block ids of one step's saves */
  uint32_t *msg_ids;      /* block ids of one entry handed over */
  double t_first, t_last;
};

/* Holes appear in a few entries, as after evictions in a real scheduler. */
static uint32_t hole_for(uint64_t index, uint64_t n_blocks)
{
  if (n_blocks < 2 || index % 5 != 3)
    return 0;
  return 1 + (uint32_t)(index % 2);
}

static uint32_t block_id(const struct producer *p, const struct entry *en, uint32_t j)
{
  uint64_t pos = en->start + j + (j >= en->hole_at ? en->hole : 0);
  return (uint32_t)(pos % p->cap);
}

/* The directory's blocks for entry `index`: 1 reserved, 0 no room yet, -1
 * failed. The key is new in a region this producer created. */
static int dir_reserve(struct producer *p, uint64_t index, struct entry *en)
{
  char key[ECC_KEY_MAX + 1];
  demo_key(p->o, index, key, sizeof(key));
  ecc_entry_t r;
  int rc = ecc_reserve(p->c, key, en->nbytes, &r);
  if (rc == ECC_ERR_BUSY)
    return 0;
  if (rc != ECC_OK) {
    demo_fail(p->side, p->c, "ecc_reserve", rc);
    return -1;
  }
  if (r.state != ECC_ENTRY_RESERVED)
    return demo_failf(p->side, "the new key '%s' was already in the directory (state %d)", key,
                      (int)r.state);
  en->token = r.token;
  if (r.n_extents > 1)
    p->side->split_entries++;
  return 1;
}

/* Reserve space for entry `index`: 1 done, 0 if there is none yet, -1 on
 * failure. With a directory the ring only keeps the entries not yet
 * acknowledged to half the region, so that nothing the consumer has still
 * to load is ever evicted. */
static int ring_alloc(struct producer *p, uint64_t index)
{
  struct entry *en = &p->e[index];
  uint64_t rows = demo_entry_rows(p->o, index);
  en->nbytes = rows * p->side->row_bytes;
  en->n_blocks = (uint32_t)demo_blocks_for(en->nbytes, p->bs);
  en->hole = p->use_dir ? 0 : hole_for(index, en->n_blocks);
  en->hole_at = en->n_blocks / 2;
  en->span = en->n_blocks + en->hole;
  uint64_t room = p->use_dir ? p->cap / 2 : p->cap;
  if (room - (p->head - p->tail) < en->span || index - p->oldest >= MAX_LIVE)
    return 0;
  if (p->use_dir) {
    int got = dir_reserve(p, index, en);
    if (got != 1)
      return got;
  }
  en->start = p->head;
  p->head += en->span;
  if (!p->use_dir && (en->hole || block_id(p, en, 0) + (uint64_t)en->n_blocks > p->cap))
    p->side->split_entries++;
  if (rows < p->side->min_rows || p->side->min_rows == 0)
    p->side->min_rows = rows;
  if (rows > p->side->max_rows)
    p->side->max_rows = rows;
  return 1;
}

/* Release ring space of acknowledged entries, oldest first. */
static void ring_release(struct producer *p)
{
  while (p->oldest < p->next && p->e[p->oldest].state == E_ACKED) {
    const struct entry *en = &p->e[p->oldest];
    p->tail = en->start + en->span;
    p->oldest++;
  }
}

/* Take one acknowledgement; 1 when the consumer has closed its end. */
static int take_ack(struct producer *p)
{
  struct demo_ack ack;
  int rc = demo_read_all(p->ack_fd, &ack, sizeof(ack));
  if (rc == 1)
    return 1;
  if (rc != 0)
    return demo_failf(p->side, "cannot read acknowledgements: %s", strerror(errno));
  if (ack.index >= p->next || p->e[ack.index].state != E_SENT)
    return demo_failf(p->side, "the consumer acknowledged entry %" PRIu64 ", which it was not sent",
                      ack.index);
  p->e[ack.index].state = E_ACKED;
  p->acked++;
  return 0;
}

/* Read acknowledgements: those already there, or wait up to `wait_ms`. */
static int drain_acks(struct producer *p, int wait_ms)
{
  while (p->acked < p->o->entries) {
    struct pollfd pfd = {.fd = p->ack_fd, .events = POLLIN};
    int n = poll(&pfd, 1, wait_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return demo_failf(p->side, "poll on the acknowledgement pipe failed: %s", strerror(errno));
    if (n == 0)
      break;
    int rc = take_ack(p);
    if (rc == 1)
      return demo_failf(
          p->side, "the consumer went away after acknowledging %" PRIu64 " of %" PRIu64 " entries",
          p->acked, p->o->entries);
    if (rc != 0)
      return -1;
    wait_ms = 0;
  }
  ring_release(p);
  return 0;
}

static int send_entry(struct producer *p, uint64_t index)
{
  const struct entry *en = &p->e[index];
  struct demo_msg m;
  memset(&m, 0, sizeof(m));
  m.type = DEMO_MSG_ENTRY;
  m.index = index;
  m.nbytes = en->nbytes;
  m.n_blocks = p->use_dir ? 0 : en->n_blocks;
  demo_key(p->o, index, m.key, sizeof(m.key));
  for (uint32_t j = 0; j < en->n_blocks; j++)
    p->msg_ids[j] = block_id(p, en, j);
  if (demo_write_all(p->msg_fd, &m, sizeof(m)) != 0 ||
      demo_write_all(p->msg_fd, p->msg_ids, m.n_blocks * sizeof(uint32_t)) != 0)
    return demo_failf(p->side, "cannot hand an entry to the consumer: %s", strerror(errno));
  return 0;
}

/* Map a completion back to its entry and check it is due exactly now. */
static int take_completion(struct producer *p, const ecc_completion_t *cp)
{
  char want[ECC_KEY_MAX + 1];
  const char *dash = strrchr(cp->key, '-');
  uint64_t index = dash ? strtoull(dash + 1, NULL, 10) : UINT64_MAX;
  if (cp->direction != ECC_DIR_SAVE)
    return demo_failf(p->side,
                      "poll returned a completion of direction %" PRIu32 " to the producer",
                      cp->direction);
  if (index < p->next)
    demo_key(p->o, index, want, sizeof(want));
  if (index >= p->next || strcmp(want, cp->key) != 0)
    return demo_failf(p->side, "poll returned an unknown key '%s'", cp->key);
  if (p->e[index].state != E_SAVING)
    return demo_failf(p->side, "poll returned the save of '%s' twice", cp->key);
  if (cp->status != ECC_OK)
    return demo_failf(p->side, "the save of '%s' completed with %s", cp->key,
                      ecc_strerror(cp->status));
  struct entry *en = &p->e[index];
  if (cp->nbytes != en->nbytes)
    return demo_failf(p->side, "the save of '%s' moved %" PRIu64 " bytes, not %" PRIu64, cp->key,
                      cp->nbytes, en->nbytes);
  en->state = E_SENT;
  p->slot_pending[en->slot]--;
  p->completed++;
  p->side->entries++;
  p->side->bytes += en->nbytes;
  p->t_last = demo_now();
  return send_entry(p, index);
}

static int poll_saves(struct producer *p, int *progressed)
{
  ecc_completion_t out[POLL_CAP];
  size_t n = 0;
  int rc = ecc_poll(p->c, out, POLL_CAP, &n);
  if (rc != ECC_OK) {
    demo_fail(p->side, p->c, "ecc_poll", rc);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (take_completion(p, &out[i]) != 0)
      return -1;
  if (n > 0)
    *progressed = 1;
  return 0;
}

static int put_source(struct producer *p, unsigned char *dst, uint64_t index, uint64_t nbytes)
{
  if (!p->dm.on_gpu) {
    demo_fill(dst, nbytes, p->o->seed, index);
    return 0;
  }
  demo_fill(p->staging, nbytes, p->o->seed, index);
  return devmem_upload(&p->dm, dst, p->staging, nbytes, p->side->error, sizeof(p->side->error));
}

static int flush_step(struct producer *p)
{
  for (;;) {
    int rc = ecc_flush(p->c, NULL);
    if (rc == ECC_OK)
      return 0;
    if (rc != ECC_ERR_BUSY) {
      demo_fail(p->side, p->c, "ecc_flush", rc);
      return -1;
    }
    /* Too many saves in flight: collect some, then submit again. */
    int progressed = 0;
    if (poll_saves(p, &progressed) != 0)
      return -1;
    if (demo_now() > p->o->deadline)
      return demo_failf(p->side, "timed out: the in-flight bound never cleared");
    if (!progressed)
      demo_nap();
  }
}

/* Produce and save up to per_step new entries into the current source slot. */
static int save_step(struct producer *p, int *progressed)
{
  unsigned s = p->cur_slot, busy = 0;
  for (unsigned i = 0; i < SRC_SLOTS; i++)
    busy += p->slot_pending[i] != 0;
  /* Each step is one batched transfer: staying inside the connector's bound
   * spares a flush that could only answer BUSY. */
  if (p->next >= p->o->entries || p->slot_pending[s] != 0 || busy >= p->max_inflight)
    return 0;
  ecc_save_entry_t batch[64];
  ecc_save_reserved_t reserved[64];
  char keys[64][ECC_KEY_MAX + 1];
  uint64_t first = p->next, off = 0, ids_used = 0;
  size_t k = 0;
  int got = 0;
  while (k < p->o->per_step && p->next < p->o->entries && (got = ring_alloc(p, p->next)) == 1) {
    struct entry *en = &p->e[p->next];
    unsigned char *src = p->src[s] + off;
    if (put_source(p, src, p->next, en->nbytes) != 0)
      return -1;
    for (uint32_t j = 0; j < en->n_blocks && !p->use_dir; j++)
      p->ids[ids_used + j] = block_id(p, en, j);
    demo_key(p->o, p->next, keys[k], sizeof(keys[k]));
    batch[k] = (ecc_save_entry_t){.key = keys[k],
                                  .src = (uint64_t)(uintptr_t)src,
                                  .nbytes = en->nbytes,
                                  .block_ids = p->ids + ids_used,
                                  .n_blocks = en->n_blocks};
    reserved[k] = (ecc_save_reserved_t){en->token, (uint64_t)(uintptr_t)src, en->nbytes};
    en->slot = (uint8_t)s;
    en->state = E_SAVING;
    off += en->nbytes;
    ids_used += en->n_blocks;
    p->next++;
    k++;
  }
  if (got < 0)
    return -1;
  if (k == 0)
    return 0; /* the ring is full: wait for acknowledgements */
  /* A copy from pageable memory may still be landing when cudaMemcpy
   * returns, and flush gets no stream to order after. */
  if (devmem_sync(&p->dm, p->side->error, sizeof(p->side->error)) != 0)
    return -1;
  if (p->t_first == 0)
    p->t_first = demo_now();
  int rc = p->use_dir ? ecc_save_reserved(p->c, reserved, k) : ecc_save(p->c, batch, k);
  if (rc != ECC_OK) {
    char what[64];
    snprintf(what, sizeof(what), "ecc_save of entries %" PRIu64 "..%" PRIu64, first, first + k - 1);
    demo_fail(p->side, p->c, what, rc);
    return -1;
  }
  p->slot_pending[s] = k;
  p->cur_slot = (s + 1) % SRC_SLOTS;
  p->side->steps++;
  *progressed = 1;
  return flush_step(p);
}

static int run_stream(struct producer *p)
{
  while (p->completed < p->o->entries) {
    int progressed = 0;
    if (drain_acks(p, 0) != 0 || save_step(p, &progressed) != 0 || poll_saves(p, &progressed) != 0)
      return -1;
    if (demo_now() > p->o->deadline)
      return demo_failf(p->side, "timed out with saves still outstanding");
    if (!progressed) {
      /* Nothing in flight means the ring is full: wait for the consumer. */
      int waiting_for_ring = p->completed == p->next;
      if (waiting_for_ring && drain_acks(p, 1) != 0)
        return -1;
      if (!waiting_for_ring)
        demo_nap();
    }
  }
  p->side->phase_s = p->t_last - p->t_first;
  return 0;
}

/* Every entry has been handed over: end the stream, then wait until the
 * consumer has checked them all (it must not outlive the region's creator
 * while still loading). */
static int finish_stream(struct producer *p)
{
  close(p->msg_fd);
  p->msg_fd = -1;
  while (p->acked < p->o->entries) {
    if (drain_acks(p, 100) != 0)
      return -1;
    if (demo_now() > p->o->deadline)
      return demo_failf(p->side, "timed out waiting for the consumer's acknowledgements");
  }
  return 0;
}

/* Open the connector that creates the region, and learn its layout. */
static int open_connector(struct producer *p)
{
  ecc_info_t info;
  if (demo_open(p->o, "producer", "create", p->side, &p->c, &info) != 0)
    return -1;
  p->bs = info.block_size;
  p->cap = info.num_blocks;
  p->max_inflight = info.max_inflight ? info.max_inflight : 1;
  p->use_dir = demo_has_directory(p->c);
  if (!info.save_rank)
    return demo_failf(p->side, "this configuration is not the save rank (tp_rank and pcp_rank "
                               "must be 0), so nothing would be saved");
  return 0;
}

/* Size the buffers from the layout; refuse a region too small to hold two
 * of the largest entries, since the ring could then never overlap work. */
static int prepare(struct producer *p)
{
  const struct demo_opts *o = p->o;
  struct demo_side *sd = p->side;
  sd->row_bytes = o->row_bytes ? o->row_bytes : p->bs;
  uint64_t max_bytes = demo_max_rows(o) * sd->row_bytes;
  p->max_blocks = demo_blocks_for(max_bytes, p->bs);
  uint64_t need = 2 * (p->max_blocks + 2);
  if (p->cap < need || p->max_blocks > UINT32_MAX) {
    snprintf(sd->error, sizeof(sd->error),
             "the region holds %" PRIu64 " blocks of %" PRIu64 " B; the demo needs at "
             "least %" PRIu64 " (two entries of up to %" PRIu64 " rows of %" PRIu64
             " B): raise region.size or lower --rows",
             p->cap, p->bs, need, demo_max_rows(o), sd->row_bytes);
    return -1;
  }
  p->e = calloc(o->entries, sizeof(*p->e));
  p->ids = malloc(o->per_step * p->max_blocks * sizeof(uint32_t));
  p->msg_ids = malloc(p->max_blocks * sizeof(uint32_t));
  if (p->e == NULL || p->ids == NULL || p->msg_ids == NULL)
    return demo_failf(p->side, "out of host memory");
  if (devmem_init(&p->dm, sd->on_gpu, sd->error, sizeof(sd->error)) != 0)
    return -1;
  p->slot_bytes = o->per_step * max_bytes;
  for (unsigned s = 0; s < SRC_SLOTS; s++) {
    p->src[s] = devmem_alloc(&p->dm, p->slot_bytes, sd->error, sizeof(sd->error));
    if (p->src[s] == NULL)
      return -1;
  }
  if (p->dm.on_gpu && (p->staging = malloc(max_bytes)) == NULL)
    return demo_failf(p->side, "out of host memory");
  return 0;
}

static int say_hello(struct producer *p)
{
  struct demo_msg m;
  memset(&m, 0, sizeof(m));
  m.type = DEMO_MSG_HELLO;
  m.block_size = p->bs;
  m.num_blocks = p->cap;
  m.directory = p->use_dir;
  if (demo_write_all(p->msg_fd, &m, sizeof(m)) != 0)
    return demo_failf(p->side, "cannot reach the consumer: %s", strerror(errno));
  return 0;
}

static void teardown(struct producer *p)
{
  /* Closing first waits for copies still reading the sources. */
  demo_close(p->c, p->side);
  for (unsigned s = 0; s < SRC_SLOTS; s++)
    devmem_free(&p->dm, p->src[s]);
  devmem_fini(&p->dm);
  free(p->staging);
  free(p->ids);
  free(p->msg_ids);
  free(p->e);
  if (p->msg_fd >= 0)
    close(p->msg_fd);
}

int demo_producer(const struct demo_opts *o, int msg_fd, int ack_fd, struct demo_side *side)
{
  struct producer p;
  memset(&p, 0, sizeof(p));
  p.o = o;
  p.side = side;
  p.msg_fd = msg_fd;
  p.ack_fd = ack_fd;
  int rc = -1;
  if (open_connector(&p) == 0 && prepare(&p) == 0 && say_hello(&p) == 0 && run_stream(&p) == 0 &&
      finish_stream(&p) == 0) {
    demo_record_stats(p.c, ECC_DIR_SAVE, side);
    rc = 0;
  }
  teardown(&p);
  side->done = rc == 0 && side->error[0] == '\0';
  return side->done ? 0 : 1;
}
