/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handles.c - the slot table behind ecc_handle_t: lock-free entry for the
 * hot calls, a mutex only for create and shutdown.
 */
#include "common/handles.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/clock.h"
#include "common/errtext.h"

enum { SLOT_FREE, SLOT_OPEN, SLOT_CLOSING };

/* handle = sequence << SLOT_BITS | slot. */
#define SLOT_BITS 10
_Static_assert(HANDLE_SLOTS <= (1u << SLOT_BITS), "slot numbers must fit in SLOT_BITS");

struct slot {
  atomic_int state;     /* SLOT_* */
  unsigned owner_gen;   /* process_gen of the process that created it */
  _Atomic uint64_t seq; /* sequence of the handle it holds now */
  atomic_int users;     /* calls currently inside this slot's connector */
  void *conn;
};

static struct slot slots[HANDLE_SLOTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_seq; /* under table_lock */

/* Bumped in every child fork() makes: a slot created under another value
 * belongs to an ancestor process. One load per call instead of getpid(). */
static atomic_uint process_gen;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
  atomic_fetch_add(&process_gen, 1);
  /* The parent may have held it at the fork; no other thread exists here. */
  pthread_mutex_init(&table_lock, NULL);
}

/* Without the handler forks cannot be told apart, and a child could use
 * (and shut down) the parent's connector: refuse to create one instead. */
static bool atfork_ok;

static void register_atfork(void)
{
  atfork_ok = pthread_atfork(NULL, NULL, on_fork_child) == 0;
}

static bool ours(const struct slot *s)
{
  return s->owner_gen == atomic_load_explicit(&process_gen, memory_order_relaxed);
}

/* A handle's sequence is the time, in microseconds of CLOCK_MONOTONIC, at
 * which it was given (or one more than the last one, if that is later).
 * This table starts afresh when the plugin is unloaded and loaded again,
 * but the clock does not: since no create takes under a microsecond, every
 * value given before is smaller than any given after, and a handle shut
 * down long ago can never name a new connector. 54 bits of microseconds
 * last 570 years of uptime. Called with table_lock held. */
static uint64_t next_seq(void)
{
  uint64_t now = ecc_now_ns() / 1000u;
  last_seq = now > last_seq ? now : last_seq + 1;
  return last_seq;
}

static ecc_handle_t encode(unsigned idx, uint64_t seq)
{
  return (seq << SLOT_BITS) | idx;
}

static int decode(ecc_handle_t h, unsigned *idx, uint64_t *seq)
{
  *idx = (unsigned)(h & ((1u << SLOT_BITS) - 1));
  *seq = h >> SLOT_BITS;
  return *idx < HANDLE_SLOTS && *seq != 0 ? 0 : -1;
}

int handles_add(void *c, ecc_handle_t *out)
{
  pthread_once(&atfork_once, register_atfork);
  if (!atfork_ok)
    return ECC_ERR_SYSTEM;
  pthread_mutex_lock(&table_lock);
  for (unsigned i = 0; i < HANDLE_SLOTS; i++) {
    struct slot *s = &slots[i];
    if (atomic_load(&s->state) != SLOT_FREE)
      continue;
    uint64_t seq = next_seq();
    s->conn = c;
    s->owner_gen = atomic_load(&process_gen);
    atomic_store(&s->seq, seq);
    atomic_store(&s->state, SLOT_OPEN);
    *out = encode(i, seq);
    pthread_mutex_unlock(&table_lock);
    return ECC_OK;
  }
  pthread_mutex_unlock(&table_lock);
  return ECC_ERR_NOMEM;
}

void *handles_enter(ecc_handle_t h, unsigned *slot)
{
  unsigned idx;
  uint64_t seq;
  if (decode(h, &idx, &seq) != 0)
    return NULL;
  struct slot *s = &slots[idx];
  /* Calls on a closing slot turn away without touching the count, so that
   * callers that keep calling cannot hold shutdown's wait for zero off. */
  if (atomic_load(&s->state) != SLOT_OPEN || !ours(s))
    return NULL;
  /* Count ourselves in before looking: shutdown marks the slot closing
   * before it waits for users to reach zero, so one of us sees the other. */
  atomic_fetch_add(&s->users, 1);
  if (atomic_load(&s->state) == SLOT_OPEN && atomic_load(&s->seq) == seq) {
    *slot = idx;
    return s->conn;
  }
  atomic_fetch_sub(&s->users, 1);
  return NULL;
}

void handles_leave(unsigned slot)
{
  atomic_fetch_sub(&slots[slot].users, 1);
}

int handles_remove(ecc_handle_t h, void **out)
{
  unsigned idx;
  uint64_t seq;
  if (decode(h, &idx, &seq) != 0)
    return ECC_ERR_CLOSED;
  struct slot *s = &slots[idx];
  pthread_mutex_lock(&table_lock);
  if (atomic_load(&s->state) != SLOT_OPEN || atomic_load(&s->seq) != seq || !ours(s)) {
    pthread_mutex_unlock(&table_lock);
    return ECC_ERR_CLOSED;
  }
  atomic_store(&s->state, SLOT_CLOSING);
  pthread_mutex_unlock(&table_lock);

  while (atomic_load(&s->users) != 0)
    sched_yield();

  pthread_mutex_lock(&table_lock);
  *out = s->conn;
  s->conn = NULL;
  atomic_store(&s->seq, 0);
  atomic_store(&s->state, SLOT_FREE);
  pthread_mutex_unlock(&table_lock);
  return ECC_OK;
}

int handles_add_reporting(void *c, ecc_handle_t *out, char *err, size_t err_cap)
{
  int rc = handles_add(c, out);
  if (rc == ECC_OK)
    return ECC_OK;
  return errtext_fail(err, err_cap, rc, "%s",
                      rc == ECC_ERR_NOMEM ? "create: too many connectors open in this process"
                                          : "create: cannot register the handler that tells "
                                            "forked children from their parent");
}
