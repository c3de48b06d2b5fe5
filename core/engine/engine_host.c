/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine_host.c - the host engine: "device" addresses are ordinary host
 * memory and each batched transfer is copied by a pool of worker threads,
 * so completions really arrive later and poll has real work to observe.
 *
 * A transfer is cut into fixed-size chunks of its byte stream; workers claim
 * chunks with an atomic counter, so one large descriptor and thousands of
 * small ones both spread over every thread. Transfers run in FIFO order.
 * Copies are memcpy, guarded (below): a region truncated under a copy
 * fails it with ECC_ERR_REGION instead of killing the process with SIGBUS.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/region/region.h"

/* Large enough to amortise claiming, small enough to share a 3 MB entry
 * between threads. */
#define CHUNK_BYTES (256u * 1024u)
#define MAX_THREADS 256

struct host_job {
  struct transfer_view *t;
  uint64_t *prefix; /* prefix[i] = bytes before descriptor i */
  size_t prefix_cap;
  size_t n_chunks;
  atomic_size_t next_chunk; /* next chunk to claim */
  atomic_size_t chunks_done;
  atomic_int done;   /* release-set once every chunk is copied */
  atomic_int status; /* ECC_OK, or the first chunk's failure */
  atomic_uint_fast64_t start_ns;
  uint64_t end_ns;
  struct host_job *next; /* queue link */
};

struct host_engine {
  pthread_t threads[MAX_THREADS];
  unsigned n_threads;
  pthread_mutex_t lock;         /* guards the queue and stop */
  pthread_cond_t work;          /* a job was queued, or stop */
  pthread_cond_t finished;      /* some job finished (for wait) */
  struct host_job *head, *tail; /* jobs with chunks left to claim */
  size_t copying;               /* chunks claimed and not yet finished */
  int stop;
  uintptr_t region_lo, region_hi; /* the region's mapping: faults there fail a copy */
};

/*
 * Guarded copies. Copies are plain memcpy; a page of the region past the
 * end of its file (a same-user process truncated it) raises SIGBUS, and a
 * page of it unmapped or protected SIGSEGV. A handler installed once turns
 * such a fault into a failed copy when, and only when, the faulting thread
 * is inside a guarded copy and the address lies in its engine's region
 * mapping; every other fault goes on to the disposition found at install,
 * as the kernel would have delivered it. A store past the end of the file
 * faults rather than growing it, so a save never writes a truncated file
 * back to its size.
 *
 * The handler reads only the faulting thread's guard and the saved
 * actions. The guard is initial-exec TLS: a dlopened plugin's TLS reached
 * through __tls_get_addr may be allocated on first use, which a handler
 * running on a host thread must not do.
 *
 * Copies use sigsetjmp(env, 0): saving the mask would cost a system call
 * per chunk. The handler is installed with SA_NODEFER and an empty mask,
 * so its signal is not blocked on entry and is not left blocked after the
 * siglongjmp (a fault with its signal blocked kills the process). SA_ONSTACK
 * runs it on a thread's alternate stack where it has one, as a host's own
 * handler for stack overflows needs.
 *
 * A host that installs a SIGBUS or SIGSEGV handler after the first engine
 * replaces this one: its handler then sees every fault, copies included,
 * as it did before guarded copies; chaining to the action it found keeps
 * the guard working.
 */
struct copy_guard {
  _Atomic pid_t tid;        /* the worker thread holding this slot; 0: free */
  sigjmp_buf *volatile env; /* set while it copies; cleared by the handler */
  uintptr_t lo, hi;         /* the region's mapping, [lo, hi) */
};

/* One slot per worker thread of every engine, found by thread id: no
 * thread-local storage, whose blocks a dlopened plugin gets from malloc
 * (not a thing to touch in a signal handler) or, for initial-exec, from a
 * static reserve it may find used up. A worker that finds no free slot
 * copies unguarded. */
#define GUARD_SLOTS 1024
static struct copy_guard guards[GUARD_SLOTS];
static atomic_uint copies_guarded; /* chunks inside copy_chunk, all engines */

static pid_t thread_id(void)
{
  return (pid_t)syscall(SYS_gettid);
}

static struct copy_guard *guard_claim(uintptr_t lo, uintptr_t hi)
{
  pid_t self = thread_id();
  for (size_t i = 0; i < GUARD_SLOTS; i++) {
    pid_t none = 0;
    if (atomic_compare_exchange_strong(&guards[i].tid, &none, self)) {
      guards[i].env = NULL;
      guards[i].lo = lo;
      guards[i].hi = hi;
      return &guards[i];
    }
  }
  return NULL;
}

static void guard_release(struct copy_guard *g)
{
  if (g != NULL)
    atomic_store(&g->tid, 0);
}

/* Async-signal-safe: a system call and loads. */
static struct copy_guard *guard_of_self(void)
{
  pid_t self = thread_id();
  for (size_t i = 0; i < GUARD_SLOTS; i++)
    if (atomic_load(&guards[i].tid) == self)
      return &guards[i];
  return NULL;
}

/* A child of fork() has none of its parent's workers. */
static void guards_forget(void)
{
  for (size_t i = 0; i < GUARD_SLOTS; i++)
    atomic_store(&guards[i].tid, 0);
  atomic_store(&copies_guarded, 0);
}

/* The action found for each guarded signal, for faults that are not ours.
 * `spent`: it had SA_RESETHAND and ran once, so it is the default now. */
struct prior_action {
  int sig;
  struct sigaction act;
  volatile sig_atomic_t spent;
};

static struct prior_action prior[] = {{.sig = SIGBUS}, {.sig = SIGSEGV}};
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_error;      /* 0: installed; GUARD_DISPLACED, or the errno of sigaction */
#define GUARD_DISPLACED (-1) /* installed, but another handler stays in place */

/* Whether returning from the handler re-executes an instruction that
 * faults again: true of memory faults, not of a signal sent by a process
 * (si_code <= 0) or of an asynchronous memory-error report. */
static bool refaults(int sig, const siginfo_t *info)
{
  return info->si_code > 0 && !(sig == SIGBUS && info->si_code == BUS_MCEERR_AO);
}

/* What the kernel does with a signal whose action is the default, or is
 * ignored while a fault cannot be: the default, so the process dies of it
 * as it would have without this handler. */
static void default_action(int sig, const siginfo_t *info, bool ignored)
{
  if (ignored && !refaults(sig, info))
    return; /* a sent signal that is ignored */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  if (!refaults(sig, info))
    raise(sig);
  /* A fault: returning re-executes the instruction under the default. */
}

/* Delivers a fault that is not ours to the prior action, with the mask and
 * flags it asked for, as the kernel would have. */
static void pass_on(int sig, siginfo_t *info, void *uctx)
{
  struct prior_action *p = sig == SIGBUS ? &prior[0] : &prior[1];
  const struct sigaction *a = &p->act;
  /* SIG_DFL and SIG_IGN whatever the flags say, as the kernel reads them. */
  if (p->spent || a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN) {
    default_action(sig, info, !p->spent && a->sa_handler == SIG_IGN);
    return;
  }
  sigset_t mask = a->sa_mask;
  if ((a->sa_flags & SA_NODEFER) == 0)
    sigaddset(&mask, sig);
  pthread_sigmask(SIG_BLOCK, &mask, NULL); /* undone by the return from this handler */
  if ((a->sa_flags & SA_RESETHAND) != 0)
    p->spent = 1;
  if ((a->sa_flags & SA_SIGINFO) != 0)
    a->sa_sigaction(sig, info, uctx);
  else
    a->sa_handler(sig);
}

static void on_fault(int sig, siginfo_t *info, void *uctx)
{
  if (atomic_load(&copies_guarded) == 0) {
    pass_on(sig, info, uctx);
    return;
  }
  struct copy_guard *guard = guard_of_self();
  if (guard == NULL) {
    pass_on(sig, info, uctx);
    return;
  }
  sigjmp_buf *env = guard->env;
  uintptr_t at = (uintptr_t)info->si_addr;
  if (env != NULL && info->si_code > 0 && at >= guard->lo && at < guard->hi) {
    guard->env = NULL;
    siglongjmp(*env, 1);
  }
  /* The prior handler may jump out of the copy: then it is unguarded. */
  guard->env = NULL;
  pass_on(sig, info, uctx);
  guard->env = env;
}

static void install_guard(void)
{
  struct sigaction act;
  memset(&act, 0, sizeof(act));
  act.sa_sigaction = on_fault;
  act.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&act.sa_mask);
  int rc = pthread_atfork(NULL, NULL, guards_forget);
  if (rc != 0) {
    guard_error = rc;
    return;
  }
  for (size_t i = 0; i < sizeof(prior) / sizeof(prior[0]); i++) {
    /* Read first, so that a fault while this installs finds the prior
     * action; one installed meanwhile by another thread replaces it. */
    struct sigaction *was = &prior[i].act, meanwhile, now;
    if (sigaction(prior[i].sig, NULL, was) != 0 || sigaction(prior[i].sig, &act, &meanwhile) != 0 ||
        sigaction(prior[i].sig, NULL, &now) != 0) {
      guard_error = errno;
      return;
    }
    if (meanwhile.sa_handler != was->sa_handler)
      *was = meanwhile;
    /* A sanitizer may keep its own handler and say nothing. */
    if ((now.sa_flags & SA_SIGINFO) == 0 || now.sa_sigaction != on_fault) {
      guard_error = GUARD_DISPLACED;
      return;
    }
  }
}

/* Index of the descriptor holding byte `offset` of the stream. */
static size_t find_desc(const struct host_job *j, uint64_t offset)
{
  size_t lo = 0, hi = j->t->desc.count - 1;
  while (lo < hi) {
    size_t mid = lo + (hi - lo + 1) / 2;
    if (j->prefix[mid] <= offset)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* The chunk's bytes; out of line, so that nothing it changes lives in the
 * frame that sigsetjmp returns to. */
static __attribute__((noinline)) void copy_pieces(const struct host_job *j, size_t chunk)
{
  const struct desc_buf *d = &j->t->desc;
  uint64_t begin = (uint64_t)chunk * CHUNK_BYTES;
  uint64_t end = begin + CHUNK_BYTES < d->bytes ? begin + CHUNK_BYTES : d->bytes;
  size_t i = find_desc(j, begin);
  while (begin < end) {
    uint64_t skip = begin - j->prefix[i];
    uint64_t n = d->len[i] - skip;
    if (n > end - begin)
      n = end - begin;
    memcpy((void *)(uintptr_t)(d->dst[i] + skip), (const void *)(uintptr_t)(d->src[i] + skip), n);
    begin += n;
    i++;
  }
}

/* ECC_ERR_REGION when the region faulted under the copy. */
static int copy_chunk(struct copy_guard *guard, const struct host_job *j, size_t chunk)
{
  if (guard == NULL) {
    copy_pieces(j, chunk);
    return ECC_OK;
  }
  sigjmp_buf env;
  atomic_fetch_add(&copies_guarded, 1);
  if (sigsetjmp(env, 0) != 0) {
    atomic_fetch_sub(&copies_guarded, 1);
    return ECC_ERR_REGION; /* the handler cleared the guard */
  }
  guard->env = &env;
  atomic_signal_fence(memory_order_seq_cst);
  copy_pieces(j, chunk);
  atomic_signal_fence(memory_order_seq_cst);
  guard->env = NULL;
  atomic_fetch_sub(&copies_guarded, 1);
  return ECC_OK;
}

static void finish_chunk(struct host_engine *e, struct host_job *j)
{
  /* Read before counting: once the last chunk is counted the connector may
   * recycle the job. */
  size_t total = j->n_chunks;
  size_t done = atomic_fetch_add_explicit(&j->chunks_done, 1, memory_order_acq_rel) + 1;
  if (done == total) {
    j->end_ns = ecc_now_ns();
    atomic_store_explicit(&j->done, 1, memory_order_release);
  }
  pthread_mutex_lock(&e->lock);
  e->copying--;
  if (done == total)
    pthread_cond_broadcast(&e->finished);
  if (e->copying == 0)
    pthread_cond_broadcast(&e->work); /* the next job may start now */
  pthread_mutex_unlock(&e->lock);
}

/* Transfers are copied one after the other, never overlapping: a later
 * save to the same blocks must land after an earlier one, as on a stream.
 * So the head job's first chunk waits until every earlier chunk finished;
 * its other chunks then spread over the threads. Called with e->lock held. */
static int may_claim(const struct host_engine *e, struct host_job *j)
{
  return atomic_load_explicit(&j->next_chunk, memory_order_relaxed) > 0 || e->copying == 0;
}

/* Claim one chunk of the head job, dequeuing jobs whose chunks are all
 * claimed. Returns NULL when stopping. Called with e->lock held. */
static struct host_job *claim(struct host_engine *e, size_t *chunk)
{
  for (;;) {
    while (e->head == NULL ? !e->stop : !may_claim(e, e->head))
      pthread_cond_wait(&e->work, &e->lock);
    if (e->head == NULL)
      return NULL;
    struct host_job *j = e->head;
    size_t c = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed);
    if (c + 1 >= j->n_chunks) {
      e->head = j->next;
      if (e->head == NULL)
        e->tail = NULL;
    }
    if (c < j->n_chunks) {
      e->copying++;
      *chunk = c;
      return j;
    }
  }
}

static void *worker_main(void *arg)
{
  struct host_engine *e = arg;
  struct copy_guard *guard = guard_claim(e->region_lo, e->region_hi);
  for (;;) {
    size_t chunk;
    pthread_mutex_lock(&e->lock);
    struct host_job *j = claim(e, &chunk);
    pthread_mutex_unlock(&e->lock);
    if (j == NULL) {
      guard_release(guard);
      return NULL;
    }
    uint_fast64_t zero = 0;
    atomic_compare_exchange_strong(&j->start_ns, &zero, ecc_now_ns());
    int rc = copy_chunk(guard, j, chunk);
    if (rc != ECC_OK) {
      int ok = ECC_OK;
      atomic_compare_exchange_strong(&j->status, &ok, rc);
    }
    finish_chunk(e, j);
  }
}

static struct host_job *job_for(struct transfer_view *t)
{
  struct host_job *j = t->engine_state;
  if (j == NULL) {
    j = calloc(1, sizeof(*j));
    if (j == NULL)
      return NULL;
    t->engine_state = j;
  }
  size_t need = t->desc.count + 1;
  if (j->prefix_cap < need) {
    uint64_t *p = realloc(j->prefix, need * sizeof(uint64_t));
    if (p == NULL)
      return NULL;
    j->prefix = p;
    j->prefix_cap = need;
  }
  return j;
}

static int host_submit(struct engine *eng, struct transfer_view *t, void *stream)
{
  struct host_engine *e = eng->impl;
  if (stream != NULL)
    return ECC_ERR_INVALID; /* the connector names the problem */
  if (t->held)
    return ECC_ERR_UNSUPPORTED; /* its callers write the destination themselves */
  struct host_job *j = job_for(t);
  if (j == NULL)
    return ECC_ERR_NOMEM;
  uint64_t sum = 0;
  for (size_t i = 0; i < t->desc.count; i++) {
    j->prefix[i] = sum;
    sum += t->desc.len[i];
  }
  j->prefix[t->desc.count] = sum;
  j->t = t;
  j->n_chunks = (size_t)((sum + CHUNK_BYTES - 1) / CHUNK_BYTES);
  atomic_store(&j->next_chunk, 0);
  atomic_store(&j->chunks_done, 0);
  atomic_store(&j->start_ns, 0);
  atomic_store(&j->status, ECC_OK);
  j->next = NULL;
  if (j->n_chunks == 0) {
    j->end_ns = ecc_now_ns();
    atomic_store(&j->start_ns, j->end_ns);
    atomic_store_explicit(&j->done, 1, memory_order_release);
    return ECC_OK;
  }
  atomic_store(&j->done, 0);
  pthread_mutex_lock(&e->lock);
  if (e->tail != NULL)
    e->tail->next = j;
  else
    e->head = j;
  e->tail = j;
  pthread_cond_broadcast(&e->work);
  pthread_mutex_unlock(&e->lock);
  return ECC_OK;
}

static int host_order_after(struct engine *eng, struct transfer_view *t, void *stream)
{
  (void)eng;
  (void)t;
  return stream == NULL ? ECC_OK : ECC_ERR_INVALID;
}

static int host_query(struct engine *eng, struct transfer_view *t, int *status,
                      uint64_t *elapsed_ns)
{
  (void)eng;
  struct host_job *j = t->engine_state;
  if (!atomic_load_explicit(&j->done, memory_order_acquire))
    return 0;
  *status = atomic_load(&j->status);
  *elapsed_ns = j->end_ns - atomic_load(&j->start_ns);
  return 1;
}

static void host_wait(struct engine *eng, struct transfer_view *t)
{
  struct host_engine *e = eng->impl;
  struct host_job *j = t->engine_state;
  pthread_mutex_lock(&e->lock);
  while (!atomic_load_explicit(&j->done, memory_order_acquire))
    pthread_cond_wait(&e->finished, &e->lock);
  pthread_mutex_unlock(&e->lock);
}

static void host_release(struct engine *eng, struct transfer_view *t)
{
  (void)eng;
  struct host_job *j = t->engine_state;
  if (j == NULL)
    return;
  free(j->prefix);
  free(j);
  t->engine_state = NULL;
}

static void host_destroy(struct engine *eng)
{
  struct host_engine *e = eng->impl;
  if (e == NULL)
    return;
  pthread_mutex_lock(&e->lock);
  e->stop = 1;
  pthread_cond_broadcast(&e->work);
  pthread_mutex_unlock(&e->lock);
  for (unsigned i = 0; i < e->n_threads; i++)
    pthread_join(e->threads[i], NULL);
  pthread_cond_destroy(&e->work);
  pthread_cond_destroy(&e->finished);
  pthread_mutex_destroy(&e->lock);
  free(e);
  eng->impl = NULL;
}

static const struct engine_ops host_ops = {
    .name = "host",
    .submit = host_submit,
    .order_after = host_order_after,
    .query = host_query,
    .wait = host_wait,
    .release = host_release,
    .desc_alloc = NULL,
    .desc_free = NULL,
    .destroy = host_destroy,
};

static unsigned pick_threads(const struct plugin_config *cfg)
{
  if (cfg->host_threads > 0)
    return cfg->host_threads < MAX_THREADS ? cfg->host_threads : MAX_THREADS;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1)
    cpus = 1;
  return cpus < 8 ? (unsigned)cpus : 8;
}

int engine_host_create(const struct plugin_config *cfg, struct region *r, struct ecc_log *log,
                       struct engine *out)
{
  struct host_engine *e = calloc(1, sizeof(*e));
  if (e == NULL)
    return log_fail(log, ECC_ERR_NOMEM, "engine: out of memory for the host engine");
  e->region_lo = (uintptr_t)r->map;
  e->region_hi = (uintptr_t)r->map + r->map_bytes;
  pthread_once(&guard_once, install_guard);
  if (guard_error != 0)
    log_msg(log, ECC_LOG_WARN,
            "engine: cannot install the SIGBUS/SIGSEGV handler that guards host copies (%s): "
            "a region truncated under a copy kills the process with SIGBUS",
            guard_error == GUARD_DISPLACED ? "another handler stays in place"
                                           : strerror(guard_error));
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->work, NULL);
  pthread_cond_init(&e->finished, NULL);
  out->ops = &host_ops;
  out->impl = e;
  unsigned want = pick_threads(cfg);
  for (unsigned i = 0; i < want; i++) {
    int rc = pthread_create(&e->threads[i], NULL, worker_main, e);
    if (rc != 0) {
      host_destroy(out);
      return log_fail(log, ECC_ERR_SYSTEM, "engine: cannot start host copy thread %u of %u: %s",
                      i + 1, want, strerror(rc));
    }
    e->n_threads = i + 1;
  }
  snprintf(out->detail, sizeof(out->detail), "host memcpy%s, %u thread%s, %u KiB chunks",
           guard_error == 0 ? " (guarded)" : " (unguarded)", e->n_threads,
           e->n_threads == 1 ? "" : "s", CHUNK_BYTES / 1024);
  return ECC_OK;
}
