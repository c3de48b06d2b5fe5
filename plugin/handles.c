/*
 * handles.c - the slot table behind ecc_handle_t: lock-free entry for the
 * hot calls, a mutex only for create and shutdown.
 */
#include "handles.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

enum { SLOT_FREE, SLOT_OPEN, SLOT_CLOSING };

struct slot {
  atomic_int state;      /* SLOT_* */
  unsigned owner_gen;    /* process_gen of the process that created it */
  atomic_uint gen;       /* bumped each time the slot is freed */
  atomic_int users;      /* calls currently inside this slot's connector */
  struct conn *conn;
};

static struct slot slots[HANDLE_SLOTS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

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
static int atfork_ok;

static void register_atfork(void)
{
  atfork_ok = pthread_atfork(NULL, NULL, on_fork_child) == 0;
}

static int ours(const struct slot *s)
{
  return s->owner_gen == atomic_load_explicit(&process_gen, memory_order_relaxed);
}

/* handle = generation << 32 | (slot + 1): never 0. */
static ecc_handle_t encode(unsigned idx, unsigned gen)
{
  return ((uint64_t)gen << 32) | (uint64_t)(idx + 1);
}

static int decode(ecc_handle_t h, unsigned *idx, unsigned *gen)
{
  uint64_t low = h & 0xffffffffu;
  if (low == 0 || low > HANDLE_SLOTS)
    return -1;
  *idx = (unsigned)(low - 1);
  *gen = (unsigned)(h >> 32);
  return 0;
}

int handles_add(struct conn *c, ecc_handle_t *out)
{
  pthread_once(&atfork_once, register_atfork);
  if (!atfork_ok)
    return ECC_ERR_SYSTEM;
  pthread_mutex_lock(&table_lock);
  for (unsigned i = 0; i < HANDLE_SLOTS; i++) {
    struct slot *s = &slots[i];
    if (atomic_load(&s->state) != SLOT_FREE)
      continue;
    s->conn = c;
    s->owner_gen = atomic_load(&process_gen);
    atomic_store(&s->state, SLOT_OPEN);
    *out = encode(i, atomic_load(&s->gen));
    pthread_mutex_unlock(&table_lock);
    return ECC_OK;
  }
  pthread_mutex_unlock(&table_lock);
  return ECC_ERR_NOMEM;
}

struct conn *handles_enter(ecc_handle_t h, unsigned *slot)
{
  unsigned idx, gen;
  if (decode(h, &idx, &gen) != 0)
    return NULL;
  struct slot *s = &slots[idx];
  /* Calls on a closing slot turn away without touching the count, so that
   * callers that keep calling cannot hold shutdown's wait for zero off. */
  if (atomic_load(&s->state) != SLOT_OPEN || !ours(s))
    return NULL;
  /* Count ourselves in before looking: shutdown marks the slot closing
   * before it waits for users to reach zero, so one of us sees the other. */
  atomic_fetch_add(&s->users, 1);
  if (atomic_load(&s->state) == SLOT_OPEN && atomic_load(&s->gen) == gen) {
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

int handles_remove(ecc_handle_t h, struct conn **out)
{
  unsigned idx, gen;
  if (decode(h, &idx, &gen) != 0)
    return ECC_ERR_CLOSED;
  struct slot *s = &slots[idx];
  pthread_mutex_lock(&table_lock);
  if (atomic_load(&s->state) != SLOT_OPEN || atomic_load(&s->gen) != gen || !ours(s)) {
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
  atomic_fetch_add(&s->gen, 1);
  atomic_store(&s->state, SLOT_FREE);
  pthread_mutex_unlock(&table_lock);
  return ECC_OK;
}
