/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine_cuda.c - the CUDA engine: device and context handling, the pinned
 * region, per-direction streams and pooled events, and the per-batch choice
 * between the copy engines (dma) and the gather/scatter kernel.
 *
 * Every entry point makes the engine's context current for the duration of
 * the call and puts the caller's back, so connectors on different devices in
 * one process never see each other's device.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "core/config/config.h"
#include "core/engine/cuda/copy_policy.h"
#include "core/engine/cuda/cuda_engine.h"
#include "core/engine/cuda/pin_pool.h"
#include "core/engine/engine.h"
#include "core/region/region.h"

/* Split descriptors so every warp has work: aim at 4 tasks per warp of the
 * grid, none smaller than 16 KiB (a few round trips of a warp). */
#define TASKS_PER_WARP 4u
#define MIN_PIECE (16u << 10)
#define PIECE_ALIGN (4u << 10)
/* A fed load's first part: bytes enough to keep the copy busy (about 40 us
 * at the link's 55 GB/s) while the next part, eight times as large, is
 * written (on the H200's host a scattered 3 KiB block's descriptor takes
 * about 3.5 ns to write, and about 60 ns to copy: the host stays ahead up
 * to a growth of about 16). Few parts, since each costs a launch and the
 * tail of a kernel: an 86.5 MB step of 3 KiB blocks has three. */
#define FEED_FIRST_BYTES (2ull << 20)
#define FEED_GROWTH 8u

typedef CUresult (*ctx_get_fn)(CUcontext *ctx);
typedef CUresult (*ctx_set_fn)(CUcontext ctx);
typedef CUresult (*wait_value_fn)(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                  unsigned int flags);

/* A transfer's events, pooled. */
struct cuda_slot {
  cudaEvent_t gate; /* recorded on the host's stream, waited on by ours */
  cudaEvent_t start, end;
  int failed;      /* ECC_OK, or the copy call's failure to report */
  uint64_t uses;   /* times acquired: tells a later submit whether the
                            end event still belongs to the transfer it knew */
  uint64_t *tasks; /* pinned src[cap] dst[cap] len[cap] of split descriptors */
  size_t task_cap;
  uint32_t *hold;             /* pinned: a held load's word (made on first use) */
  int held;                   /* this use is a held load */
  struct cuda_slot *next;     /* free list */
  struct cuda_slot *all_next; /* every slot, for destroy */
};

struct cuda_engine {
  int device;
  CUcontext ctx;
  ctx_get_fn ctx_get;
  ctx_set_fn ctx_set;
  wait_value_fn wait_value; /* cuStreamWaitValue32, for held loads; NULL if absent */
  struct ecc_log *log;
  struct copy_policy policy; /* the method per batch, and each direction's last submit */
  unsigned max_ctas;         /* min(engine.max_sms, SMs of the device) */
  int priority;              /* of the kernel streams: the highest, so copies get SMs soon */
  /* By direction, a stream for the kernel and one for copy-engine batches.
   * Per direction, not per transfer: on the H200 a stream that had carried
   * batches of one direction and then carried the other made the two
   * directions run one after the other (half the bidirectional rate);
   * streams that keep to one direction run side by side. */
  cudaStream_t kernel_stream[3];
  cudaStream_t dma_stream[3];
  struct pin_state pin;
  struct dma_api dma;
  struct pin_pool pins; /* descriptor arrays and task lists */
  pthread_mutex_t lock; /* free slots */
  struct cuda_slot *free_slots;
  struct cuda_slot *all_slots;
  /* By direction: the slot of the transfer submitted last, and its uses
   * count then (used by submit and order_after only, which the connector
   * serialises). */
  struct cuda_slot *last[3];
  uint64_t last_uses[3];
  cudaStream_t last_stream[3]; /* the stream the direction's last copy ran on */
};

struct ctx_guard {
  CUcontext prev;
  int switched;
};

static const struct engine_ops cuda_ops;

/* ---- context ---- */

static int ctx_enter(struct cuda_engine *ce, struct ctx_guard *g)
{
  g->prev = NULL;
  g->switched = 0;
  if (ce->ctx_get(&g->prev) != CUDA_SUCCESS)
    return -1;
  if (g->prev == ce->ctx)
    return 0;
  if (ce->ctx_set(ce->ctx) != CUDA_SUCCESS)
    return -1;
  g->switched = 1;
  return 0;
}

static void ctx_leave(struct cuda_engine *ce, struct ctx_guard *g)
{
  if (g->switched)
    (void)ce->ctx_set(g->prev);
}

/* ---- pinned host memory: descriptor arrays and split-task lists ---- */

/* The pool's allocator: mapped pinned memory, made in the engine's context. */
static void *pinned_alloc(void *ctx, size_t bytes)
{
  struct cuda_engine *ce = ctx;
  void *p = NULL;
  struct ctx_guard g;
  if (ctx_enter(ce, &g) != 0)
    return NULL;
  cudaError_t rc = cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  ctx_leave(ce, &g);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    /* The size the pool was asked for, without its header. */
    log_msg(ce->log, ECC_LOG_WARN, "cuda: cudaHostAlloc of %zu bytes failed: %s",
            bytes - PIN_POOL_HDR, cudaGetErrorString(rc));
    return NULL;
  }
  return p;
}

static void pinned_release(void *ctx, void *mem)
{
  (void)ctx;
  if (cudaFreeHost(mem) != cudaSuccess)
    (void)cudaGetLastError();
}

static void *cuda_desc_alloc(void *ctx, size_t bytes)
{
  struct cuda_engine *ce = ctx;
  return pin_pool_get(&ce->pins, bytes);
}

static void cuda_desc_free(void *ctx, void *p)
{
  struct cuda_engine *ce = ctx;
  pin_pool_put(&ce->pins, p);
}

/* ---- slots: a stream and its events, pooled ---- */

static void slot_destroy(struct cuda_slot *s)
{
  if (s->gate != NULL)
    (void)cudaEventDestroy(s->gate);
  if (s->start != NULL)
    (void)cudaEventDestroy(s->start);
  if (s->end != NULL)
    (void)cudaEventDestroy(s->end);
  (void)cudaGetLastError();
  free(s);
}

/* A new slot; the engine's context must be current. */
static struct cuda_slot *slot_create(struct cuda_engine *ce, const char **why)
{
  struct cuda_slot *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    *why = "out of memory";
    return NULL;
  }
  cudaError_t rc = cudaEventCreateWithFlags(&s->gate, cudaEventDisableTiming);
  if (rc == cudaSuccess)
    rc = cudaEventCreateWithFlags(&s->start, cudaEventDefault);
  if (rc == cudaSuccess)
    rc = cudaEventCreateWithFlags(&s->end, cudaEventDefault);
  if (rc != cudaSuccess) {
    *why = cudaGetErrorString(rc);
    slot_destroy(s);
    return NULL;
  }
  pthread_mutex_lock(&ce->lock);
  s->all_next = ce->all_slots;
  ce->all_slots = s;
  pthread_mutex_unlock(&ce->lock);
  return s;
}

static struct cuda_slot *slot_get(struct cuda_engine *ce, const char **why)
{
  pthread_mutex_lock(&ce->lock);
  struct cuda_slot *s = ce->free_slots;
  if (s != NULL)
    ce->free_slots = s->next;
  pthread_mutex_unlock(&ce->lock);
  if (s == NULL)
    s = slot_create(ce, why);
  if (s != NULL) {
    s->next = NULL;
    s->failed = ECC_OK;
    s->held = 0;
    s->uses++;
  }
  return s;
}

static void slot_put(struct cuda_engine *ce, struct cuda_slot *s)
{
  pthread_mutex_lock(&ce->lock);
  s->next = ce->free_slots;
  ce->free_slots = s;
  pthread_mutex_unlock(&ce->lock);
}

/* ---- the copy of one transfer ---- */

static uint64_t piece_bytes(const struct cuda_engine *ce, uint64_t total)
{
  uint64_t tasks = (uint64_t)ce->max_ctas * ECC_COPY_WARPS_PER_CTA * TASKS_PER_WARP;
  uint64_t p = (total / tasks + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
  return p < MIN_PIECE ? MIN_PIECE : p;
}

/* Tasks of descriptors from.. once cut into pieces. */
static uint64_t count_tasks(const struct desc_buf *d, size_t from, uint64_t piece)
{
  uint64_t n = 0;
  for (size_t i = from; i < d->count; i++)
    n += d->len[i] <= piece ? 1 : (d->len[i] + piece - 1) / piece;
  return n;
}

/* Room for n tasks in the slot's pinned list, which may move: only before
 * any copy of the transfer reads it. Returns 0 or -1 (no pinned memory). */
static int reserve_tasks(struct cuda_engine *ce, struct cuda_slot *s, uint64_t n)
{
  if (s->task_cap >= n)
    return 0;
  if (n > SIZE_MAX / (3 * sizeof(uint64_t)))
    return -1;
  uint64_t *p = pin_pool_get(&ce->pins, (size_t)n * 3 * sizeof(uint64_t));
  if (p == NULL)
    return -1;
  pin_pool_put(&ce->pins, s->tasks);
  s->tasks = p;
  s->task_cap = (size_t)n;
  return 0;
}

/* Write descriptors from.. cut into pieces at task `at` of the slot's list
 * (room reserved). */
static void cut_tasks(struct cuda_slot *s, const struct desc_buf *d, size_t from, uint64_t piece,
                      size_t at)
{
  uint64_t *src = s->tasks, *dst = s->tasks + s->task_cap, *len = s->tasks + 2 * s->task_cap;
  size_t k = at;
  for (size_t i = from; i < d->count; i++) {
    uint64_t off = 0;
    do {
      uint64_t l = d->len[i] - off < piece ? d->len[i] - off : piece;
      src[k] = d->src[i] + off;
      dst[k] = d->dst[i] + off;
      len[k] = l;
      k++;
      off += l;
    } while (off < d->len[i]);
  }
}

/* What one batch will run, worked out on the host before anything is
 * enqueued (so that none of it falls between the start and end events). */
struct plan {
  int method;
  uint64_t piece;                  /* kernel: the largest task */
  uint64_t task_room;              /* kernel, fed: tasks the slot's list must hold if used */
  size_t tasks_used;               /* kernel: of the slot's list, by parts already run */
  const uint64_t *src, *dst, *len; /* kernel: the task list of the part to run */
  uint32_t n;                      /*   its tasks */
  unsigned ctas;
};

/* The kernel's tasks for descriptors from..: read in place where they are
 * our pinned memory and none needs cutting; else cut into the slot's list
 * after the parts already run. Returns 0, or -1 when that list cannot be
 * had. */
static int plan_part(struct cuda_engine *ce, struct cuda_slot *s, const struct desc_buf *d,
                     size_t from, struct plan *p)
{
  uint64_t n = count_tasks(d, from, p->piece);
  if (n > UINT32_MAX)
    return -1;
  p->src = d->src + from;
  p->dst = d->dst + from;
  p->len = d->len + from;
  if (n != d->count - from || d->alloc != cuda_desc_alloc) {
    /* The room for every part at the first cut: the list must not move
     * under a part that reads it. */
    if (p->tasks_used == 0 && reserve_tasks(ce, s, p->task_room != 0 ? p->task_room : n) != 0)
      return -1;
    if (p->tasks_used + n > s->task_cap)
      return -1;
    cut_tasks(s, d, from, p->piece, p->tasks_used);
    p->src = s->tasks + p->tasks_used;
    p->dst = s->tasks + s->task_cap + p->tasks_used;
    p->len = s->tasks + 2 * s->task_cap + p->tasks_used;
    p->tasks_used += (size_t)n;
  }
  uint64_t want = (n + ECC_COPY_WARPS_PER_CTA - 1) / ECC_COPY_WARPS_PER_CTA;
  p->ctas = want < ce->max_ctas ? (unsigned)want : ce->max_ctas;
  p->n = (uint32_t)n;
  return 0;
}

/* The descriptors a fed transfer will have, guessed from its first part:
 * what the policy judges the whole by. */
static size_t fed_count(const struct transfer_view *t)
{
  if (t->feed == NULL || t->desc.bytes == 0)
    return t->desc.count;
  double whole = (double)t->desc.count * ((double)t->feed->bytes / (double)t->desc.bytes);
  return whole >= (double)SIZE_MAX ? SIZE_MAX : (size_t)whole;
}

/* A fed transfer's first part written; the method for the whole; and for
 * the kernel the first part's tasks. A fed transfer's pieces are sized by
 * its whole, and the slot's list is given room for all its parts (each
 * descriptor makes at most len / piece + 1 tasks, and the buffer's capacity
 * bounds the descriptors). */
static void plan_copy(struct cuda_engine *ce, struct cuda_slot *s, struct transfer_view *t,
                      int direction, struct plan *p)
{
  if (t->feed != NULL && !t->feed->more(t->feed, &t->desc, FEED_FIRST_BYTES))
    t->feed = NULL;
  uint64_t now = ecc_now_ns();
  uint64_t bytes = t->feed != NULL ? t->feed->bytes : t->desc.bytes;
  memset(p, 0, sizeof(*p));
  p->method = copy_policy_pick(&ce->policy, direction, fed_count(t), bytes, now);
  copy_policy_note(&ce->policy, direction, now);
  if (p->method == METHOD_DMA)
    return;
  p->piece = piece_bytes(ce, bytes);
  p->task_room = t->feed != NULL ? t->desc.cap + bytes / p->piece + 1 : 0;
  if (plan_part(ce, s, &t->desc, 0, p) != 0) {
    log_msg(ce->log, ECC_LOG_WARN, "cuda: no pinned memory for a task list; using dma");
    p->method = METHOD_DMA;
  }
}

static int debug_on(const struct cuda_engine *ce)
{
  const ecc_host_services_v1_t *h = ce->log->host;
  return h != NULL && h->log != NULL && h->log_level >= ECC_LOG_DEBUG;
}

/* Enqueue descriptors from.. by the planned method (for the kernel, its
 * tasks are planned already). Returns 0, or an error with *why. */
static int run_part(struct cuda_engine *ce, const struct desc_buf *d, size_t from,
                    const struct plan *p, int to_host, cudaStream_t stream, const char **why)
{
  if (p->method != METHOD_KERNEL)
    return dma_copy(&ce->dma, d->src + from, d->dst + from, d->len + from, d->count - from, to_host,
                    stream, why);
  if (p->n == 0)
    return 0;
  int rc = ecc_copy_launch(p->src, p->dst, p->len, p->n, p->ctas, to_host, stream);
  if (rc != cudaSuccess)
    *why = cudaGetErrorString((cudaError_t)rc);
  return rc;
}

/* Run the planned part; then, while the feed has more, write the next part
 * (larger by FEED_GROWTH, so the host stays ahead of the copy), plan and
 * run it. Returns 0, or an error with *why; the rest of the descriptors are
 * written either way, so that the transfer is whole. */
static int run_parts(struct cuda_engine *ce, struct cuda_slot *s, struct transfer_view *t,
                     int to_host, struct plan *p, cudaStream_t stream, const char **why)
{
  struct desc_buf *d = &t->desc;
  uint64_t want = FEED_FIRST_BYTES;
  size_t from = 0;
  for (;;) {
    int rc = run_part(ce, d, from, p, to_host, stream, why);
    if (rc != 0 || t->feed == NULL) {
      engine_feed_all(t);
      return rc;
    }
    desc_seal(d);
    from = d->count;
    want = want > UINT64_MAX / FEED_GROWTH ? UINT64_MAX : want * FEED_GROWTH;
    if (!t->feed->more(t->feed, d, want))
      t->feed = NULL;
    if (p->method == METHOD_KERNEL && plan_part(ce, s, d, from, p) != 0) {
      *why = "no pinned memory for the task list of a later part";
      engine_feed_all(t);
      return -1;
    }
  }
}

/* Enqueue the copy. A failure is kept in the slot and reported by query,
 * after whatever part of the copy did start. */
static void run_copy(struct cuda_engine *ce, struct cuda_slot *s, struct transfer_view *t,
                     int direction, struct plan *p, cudaStream_t stream)
{
  const struct desc_buf *d = &t->desc;
  int to_host = direction == ECC_DIR_SAVE;
  const char *why = "";
  int rc = run_parts(ce, s, t, to_host, p, stream, &why);
  const char *name = config_method_name(p->method);
  if (rc != 0) {
    s->failed = ECC_ERR_TRANSFER;
    log_msg(ce->log, ECC_LOG_ERROR,
            "cuda: %s of %zu descriptors (%" PRIu64 " bytes) by %s failed: %s",
            to_host ? "save" : "load", d->count, d->bytes, name, why);
  } else if (debug_on(ce)) {
    log_msg(ce->log, ECC_LOG_DEBUG,
            "cuda: %s of %zu descriptors (%" PRIu64 " bytes): method=%s sms=%u",
            to_host ? "save" : "load", d->count, d->bytes, name, p->ctas);
  }
}

/* The stream the host means. NULL is CUDA's legacy default stream, which is
 * where most PyTorch programs work (their current stream's handle is 0); our
 * copy streams are non-blocking, so without an explicit dependency they
 * would not wait for it at all. cudaStreamLegacy and cudaStreamPerThread
 * are passed through as they are. */
static cudaStream_t host_stream_of(void *stream)
{
  return stream == NULL ? cudaStreamLegacy : (cudaStream_t)stream;
}

/* Make `stream` wait for the host's stream and for the transfer submitted
 * before in the same direction (so copies of one direction run one after
 * another: the kernel keeps its SM bound and FIFO order holds). */
static cudaError_t order_before(struct cuda_engine *ce, struct cuda_slot *s, int direction,
                                cudaStream_t host, cudaStream_t stream)
{
  cudaError_t rc = cudaEventRecord(s->gate, host);
  if (rc == cudaSuccess)
    rc = cudaStreamWaitEvent(stream, s->gate, 0);
  /* A slot used again since belongs to a later transfer, and the one we
   * knew has finished (its slot was released). On the same stream the
   * order holds already, and each call costs host time per step. */
  struct cuda_slot *prev = ce->last[direction];
  if (rc == cudaSuccess && prev != NULL && prev != s && prev->uses == ce->last_uses[direction] &&
      ce->last_stream[direction] != stream)
    rc = cudaStreamWaitEvent(stream, prev->end, 0);
  return rc;
}

/* A held load: `stream` waits, on the device, until the slot's word is
 * released (either value). Returns 0, or -1 with the reason in *why. */
static int hold_copy(struct cuda_engine *ce, struct cuda_slot *s, cudaStream_t stream,
                     const char **why)
{
  void *dev = NULL;
  if (ce->wait_value == NULL) {
    *why = "the driver has no cuStreamWaitValue32";
    return -1;
  }
  if (s->hold == NULL)
    s->hold = pin_pool_get(&ce->pins, sizeof(*s->hold));
  if (s->hold == NULL) {
    *why = "out of pinned memory";
    return -1;
  }
  __atomic_store_n(s->hold, HOLD_WAITING, __ATOMIC_RELAXED); /* the slot's last use is over */
  if (cudaHostGetDevicePointer(&dev, s->hold, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    *why = "its word has no device address";
    return -1;
  }
  if (ce->wait_value(stream, (CUdeviceptr)(uintptr_t)dev, HOLD_READY, CU_STREAM_WAIT_VALUE_GEQ) !=
      CUDA_SUCCESS) {
    *why = "cuStreamWaitValue32 failed";
    return -1;
  }
  s->held = 1;
  return 0;
}

static int cuda_submit(struct engine *e, struct transfer_view *t, void *host_stream)
{
  struct cuda_engine *ce = e->impl;
  struct ctx_guard g;
  if (ctx_enter(ce, &g) != 0)
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot make device %d current", ce->device);
  const char *why = "";
  struct cuda_slot *s = slot_get(ce, &why);
  if (s == NULL) {
    ctx_leave(ce, &g);
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot create events: %s", why);
  }
  int direction = t->direction == ECC_DIR_SAVE ? ECC_DIR_SAVE : ECC_DIR_LOAD;
  struct plan p;
  plan_copy(ce, s, t, direction, &p);
  cudaStream_t stream =
      p.method == METHOD_KERNEL ? ce->kernel_stream[direction] : ce->dma_stream[direction];
  cudaError_t rc = order_before(ce, s, direction, host_stream_of(host_stream), stream);
  if (rc == cudaSuccess)
    rc = cudaEventRecord(s->start, stream);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    slot_put(ce, s);
    ctx_leave(ce, &g);
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot order the copy after the stream: %s",
                    cudaGetErrorString(rc));
  }
  if (t->held && hold_copy(ce, s, stream, &why) != 0) {
    /* The start event alone is queued: nothing waits on it, nothing copied. */
    slot_put(ce, s);
    ctx_leave(ce, &g);
    return log_fail(ce->log, ECC_ERR_UNSUPPORTED, "cuda: a load cannot wait for its bytes: %s",
                    why);
  }
  t->hold = s->hold;
  run_copy(ce, s, t, direction, &p, stream);
  rc = cudaEventRecord(s->end, stream);
  if (rc != cudaSuccess) {
    /* Without the end event nothing could tell when the copy is over. */
    log_msg(ce->log, ECC_LOG_ERROR, "cuda: recording the end of a copy failed: %s",
            cudaGetErrorString(rc));
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
    s->failed = ECC_ERR_DEVICE;
  } else {
    ce->last[direction] = s;
    ce->last_uses[direction] = s->uses;
    ce->last_stream[direction] = stream;
  }
  t->engine_state = s;
  ctx_leave(ce, &g);
  return ECC_OK;
}

/* Runs right after the load's submit, under the same connector lock, so the
 * direction's last slot is this transfer's (its end event is recorded again
 * only by a later submit). The transfer itself may already have been polled
 * and released by another thread, so t->engine_state is not read. */
static int cuda_order_after(struct engine *e, struct transfer_view *t, void *stream)
{
  struct cuda_engine *ce = e->impl;
  int direction = t->direction == ECC_DIR_SAVE ? ECC_DIR_SAVE : ECC_DIR_LOAD;
  if (ce->last[direction] == NULL)
    return ECC_OK;
  struct ctx_guard g;
  if (ctx_enter(ce, &g) != 0)
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot make device %d current", ce->device);
  cudaError_t rc = cudaStreamWaitEvent(host_stream_of(stream), ce->last[direction]->end, 0);
  if (rc != cudaSuccess)
    (void)cudaGetLastError();
  ctx_leave(ce, &g);
  if (rc != cudaSuccess)
    return log_fail(ce->log, ECC_ERR_DEVICE,
                    "cuda: the compute stream cannot wait for the load: %s",
                    cudaGetErrorString(rc));
  return ECC_OK;
}

static int cuda_query(struct engine *e, struct transfer_view *t, int *status, uint64_t *elapsed_ns)
{
  struct cuda_engine *ce = e->impl;
  struct cuda_slot *s = t->engine_state;
  struct ctx_guard g;
  *elapsed_ns = 0;
  if (ctx_enter(ce, &g) != 0) {
    *status = log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot make device %d current", ce->device);
    return 1;
  }
  cudaError_t rc = cudaEventQuery(s->end);
  if (rc == cudaErrorNotReady) {
    ctx_leave(ce, &g);
    return 0;
  }
  if (rc == cudaSuccess) {
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, s->start, s->end) == cudaSuccess && ms > 0.0f)
      *elapsed_ns = (uint64_t)((double)ms * 1e6);
    else
      (void)cudaGetLastError();
    *status = s->failed;
    if (s->held && __atomic_load_n(s->hold, __ATOMIC_ACQUIRE) == HOLD_FAILED)
      *status = ECC_ERR_TRANSFER; /* the bytes it copied never came */
  } else {
    (void)cudaGetLastError();
    *status = ECC_ERR_DEVICE;
    log_msg(ce->log, ECC_LOG_ERROR, "cuda: a %s copy failed on device %d: %s",
            ecc_direction_name(t->direction), ce->device, cudaGetErrorString(rc));
  }
  ctx_leave(ce, &g);
  return 1;
}

static void cuda_wait(struct engine *e, struct transfer_view *t)
{
  struct cuda_engine *ce = e->impl;
  struct cuda_slot *s = t->engine_state;
  struct ctx_guard g;
  if (ctx_enter(ce, &g) != 0)
    return;
  if (cudaEventSynchronize(s->end) != cudaSuccess)
    (void)cudaGetLastError();
  ctx_leave(ce, &g);
}

static void cuda_release(struct engine *e, struct transfer_view *t)
{
  struct cuda_engine *ce = e->impl;
  if (t->engine_state != NULL)
    slot_put(ce, t->engine_state);
  t->engine_state = NULL;
}

/* ---- create / destroy ---- */

static void engine_free(struct cuda_engine *ce)
{
  while (ce->all_slots != NULL) {
    struct cuda_slot *s = ce->all_slots;
    ce->all_slots = s->all_next;
    pin_pool_put(&ce->pins, s->tasks);
    pin_pool_put(&ce->pins, s->hold);
    slot_destroy(s);
  }
  ce->free_slots = NULL;
  for (int d = ECC_DIR_SAVE; d <= ECC_DIR_LOAD; d++) {
    if (ce->kernel_stream[d] != NULL)
      (void)cudaStreamDestroy(ce->kernel_stream[d]);
    if (ce->dma_stream[d] != NULL)
      (void)cudaStreamDestroy(ce->dma_stream[d]);
  }
  (void)cudaGetLastError();
  pin_pool_destroy(&ce->pins);
  unpin_region(&ce->pin, ce->log);
  pthread_mutex_destroy(&ce->lock);
  free(ce);
}

static void cuda_destroy(struct engine *e)
{
  struct cuda_engine *ce = e->impl;
  if (ce == NULL)
    return;
  /* Every transfer has been waited for: nothing of ours is still running. */
  struct ctx_guard g;
  ctx_set_fn set = ce->ctx_set;
  int entered = ctx_enter(ce, &g) == 0;
  engine_free(ce);
  if (entered && g.switched)
    (void)set(g.prev);
  e->impl = NULL;
}

static const struct engine_ops cuda_ops = {
    .name = "cuda",
    .takes_feed = true,
    .submit = cuda_submit,
    .order_after = cuda_order_after,
    .query = cuda_query,
    .wait = cuda_wait,
    .release = cuda_release,
    .desc_alloc = cuda_desc_alloc,
    .desc_free = cuda_desc_free,
    .destroy = cuda_destroy,
};

/* The device to use: engine.device, or the caller's current one. */
static int choose_device(const struct plugin_config *cfg, struct ecc_log *log, int *dev,
                         char *detail, size_t cap)
{
  int n = 0;
  cudaError_t rc = cudaGetDeviceCount(&n);
  if (rc != cudaSuccess || n == 0) {
    snprintf(detail, cap, "no usable CUDA device (%s)",
             rc != cudaSuccess ? cudaGetErrorString(rc) : "none found");
    (void)cudaGetLastError();
    return ECC_ERR_UNSUPPORTED;
  }
  if (cfg->device >= n)
    return log_fail(log, ECC_ERR_CONFIG, "engine.device = %d: this machine has %d CUDA device%s",
                    cfg->device, n, n == 1 ? "" : "s");
  if (cfg->device >= 0) {
    *dev = cfg->device;
    return ECC_OK;
  }
  rc = cudaGetDevice(dev);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return log_fail(log, ECC_ERR_DEVICE, "cuda: cannot read the current device: %s",
                    cudaGetErrorString(rc));
  }
  return ECC_OK;
}

/* Pin per pinning.enabled; a failure is fatal only with "on". */
static int setup_pinning(struct cuda_engine *ce, const struct plugin_config *cfg, struct region *r,
                         char *state, size_t cap)
{
  if (cfg->pin == PIN_OFF) {
    snprintf(state, cap, "not pinned (pinning.enabled = off)");
    return ECC_OK;
  }
  char why[256];
  if (pin_region(r, &ce->pin, ce->log, why, sizeof(why)) != 0) {
    if (cfg->pin == PIN_ON)
      return log_fail(ce->log, ECC_ERR_DEVICE, "pinning.enabled = on: cannot pin %s: %s", r->path,
                      why);
    log_msg(ce->log, ECC_LOG_WARN, "cuda: could not pin %s (%s); transfers still work but slower",
            r->path, why);
    snprintf(state, cap, "not pinned (registration failed)");
    return ECC_OK;
  }
  double gib = (double)ce->pin.bytes / (double)(1ull << 30);
  snprintf(state, cap, "pinned, %.3f s/GiB", gib > 0 ? (double)ce->pin.ns / 1e9 / gib : 0.0);
  return ECC_OK;
}

/* Decide whether the kernel method is usable and describe the method. */
static int setup_method(struct cuda_engine *ce, const struct plugin_config *cfg, char *text,
                        size_t cap)
{
  int code = ecc_copy_kernel_check();
  bool kernel_ok = ce->pin.n_chunks > 0 && ce->pin.device_view_ok && code == cudaSuccess;
  copy_policy_init(&ce->policy, cfg->method, kernel_ok);
  if (code != cudaSuccess)
    (void)cudaGetLastError();
  if (cfg->method == METHOD_KERNEL && !kernel_ok) {
    if (cfg->pin == PIN_OFF)
      return log_fail(ce->log, ECC_ERR_CONFIG,
                      "engine.method = kernel needs the region pinned, "
                      "but pinning.enabled = off");
    log_msg(ce->log, ECC_LOG_WARN, "cuda: the kernel method is not usable here (%s); using dma",
            code != cudaSuccess ? cudaGetErrorString((cudaError_t)code)
                                : "the region is not mapped for the device");
  }
  const char *dma = ce->dma.batch != NULL ? "dma" : "dma (one copy per descriptor)";
  if (!kernel_ok || cfg->method == METHOD_DMA)
    snprintf(text, cap, "%s%s", dma, cfg->method == METHOD_DMA ? "" : " (no kernel)");
  else if (cfg->method == METHOD_KERNEL)
    snprintf(text, cap, "kernel on <=%u SMs", ce->max_ctas);
  else
    snprintf(text, cap, "auto: kernel on <=%u SMs or %s", ce->max_ctas, dma);
  return ECC_OK;
}

static int setup_device(struct cuda_engine *ce, const struct plugin_config *cfg, char *name,
                        size_t cap)
{
  cudaError_t rc = cudaSetDevice(ce->device);
  int sms = 0, least = 0, greatest = 0;
  if (rc == cudaSuccess)
    rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ce->device);
  if (rc == cudaSuccess)
    rc = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  struct cudaDeviceProp prop;
  if (rc == cudaSuccess)
    rc = cudaGetDeviceProperties(&prop, ce->device);
  if (rc != cudaSuccess || ce->ctx_get(&ce->ctx) != CUDA_SUCCESS || ce->ctx == NULL) {
    (void)cudaGetLastError();
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot initialise device %d: %s", ce->device,
                    cudaGetErrorString(rc));
  }
  snprintf(name, cap, "%s", prop.name);
  ce->priority = greatest;
  ce->max_ctas = cfg->max_sms < (unsigned)sms ? cfg->max_sms : (unsigned)sms;
  if (ce->max_ctas == 0)
    ce->max_ctas = 1;
  return ECC_OK;
}

/* The streams, and two slots made up front so the first steps create no
 * events. */
static int warm_slots(struct cuda_engine *ce)
{
  for (int d = ECC_DIR_SAVE; d <= ECC_DIR_LOAD; d++) {
    cudaError_t rc =
        cudaStreamCreateWithPriority(&ce->kernel_stream[d], cudaStreamNonBlocking, ce->priority);
    if (rc == cudaSuccess)
      rc = cudaStreamCreateWithFlags(&ce->dma_stream[d], cudaStreamNonBlocking);
    if (rc != cudaSuccess) {
      (void)cudaGetLastError();
      return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot create streams: %s",
                      cudaGetErrorString(rc));
    }
  }
  const char *why = "";
  struct cuda_slot *a = slot_create(ce, &why);
  struct cuda_slot *b = a != NULL ? slot_create(ce, &why) : NULL;
  if (b == NULL)
    return log_fail(ce->log, ECC_ERR_DEVICE, "cuda: cannot create streams and events: %s", why);
  slot_put(ce, a);
  slot_put(ce, b);
  return ECC_OK;
}

static int build_engine(struct cuda_engine *ce, const struct plugin_config *cfg, struct region *r,
                        struct engine *out)
{
  char name[256], pin[64], method[96], detail[512];
  int rc = setup_device(ce, cfg, name, sizeof(name));
  if (rc == ECC_OK) {
    dma_resolve(&ce->dma);
    rc = setup_pinning(ce, cfg, r, pin, sizeof(pin));
  }
  if (rc == ECC_OK)
    rc = setup_method(ce, cfg, method, sizeof(method));
  if (rc == ECC_OK)
    rc = warm_slots(ce);
  if (rc != ECC_OK)
    return rc;
  out->ops = &cuda_ops;
  out->impl = ce;
  out->pinned = ce->pin.n_chunks > 0;
  out->pin_ns = ce->pin.ns;
  snprintf(detail, sizeof(detail), "device %d (%.32s), %s, region %s", ce->device, name, method,
           pin);
  snprintf(out->detail, sizeof(out->detail), "%.127s", detail);
  return ECC_OK;
}

int engine_cuda_create(const struct plugin_config *cfg, struct region *r, struct ecc_log *log,
                       struct engine *out)
{
  int dev = 0;
  int rc = choose_device(cfg, log, &dev, out->detail, sizeof(out->detail));
  if (rc != ECC_OK)
    return rc;
  struct cuda_engine *ce = calloc(1, sizeof(*ce));
  if (ce == NULL)
    return log_fail(log, ECC_ERR_NOMEM, "cuda: out of memory");
  ce->device = dev;
  ce->log = log;
  pthread_mutex_init(&ce->lock, NULL);
  if (pin_pool_init(&ce->pins, pinned_alloc, pinned_release, ce) != 0) {
    pthread_mutex_destroy(&ce->lock);
    free(ce);
    return log_fail(log, ECC_ERR_SYSTEM, "cuda: cannot make the lock of the pinned-buffer pool");
  }
  ce->ctx_get = (ctx_get_fn)cuda_driver_fn("cuCtxGetCurrent", 4000);
  ce->ctx_set = (ctx_set_fn)cuda_driver_fn("cuCtxSetCurrent", 4000);
  ce->wait_value = (wait_value_fn)cuda_driver_fn("cuStreamWaitValue32", 12000);
  if (ce->ctx_get == NULL || ce->ctx_set == NULL) {
    pin_pool_destroy(&ce->pins);
    pthread_mutex_destroy(&ce->lock);
    free(ce);
    snprintf(out->detail, sizeof(out->detail), "the CUDA driver lacks cuCtxGetCurrent");
    return ECC_ERR_UNSUPPORTED;
  }
  CUcontext prev = NULL;
  ctx_set_fn set = ce->ctx_set;
  (void)ce->ctx_get(&prev);
  rc = build_engine(ce, cfg, r, out);
  if (rc != ECC_OK)
    engine_free(ce);
  (void)set(prev);
  return rc;
}

int engine_cuda_built(void)
{
  return 1;
}
