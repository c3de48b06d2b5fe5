/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_directory.c - libFuzzer target: a small directory (core/
 * directory.c) formatted in an exact-size heap block, driven by a program of
 * reserve, publish, abort, lookup, unpin, check_pinned, remove, attach,
 * reclaim and rebuild calls, those the connector's copies make (claim,
 * unclaim and settle of a reservation, pinned, blocks_held) and the cache's
 * (reserve_ex with a cost and a type, peek, wait with no or a few
 * microseconds of timeout, the event ring read from cursors, restart of a
 * kept region, under either eviction policy), with keys from
 * a small alphabet and often stale or forged refs and pins, and now and
 * then a thread that dies inside dir_list holding the lock (this process,
 * alive, must keep what it holds). Three more turn on what the directory
 * must refuse: the region formatted again in the same memory (refs and pins
 * of the earlier format are offered on, and must name nothing; the view of
 * the earlier format is refused), a thread holding the lock past the 1 ms
 * lock timeout (every call waits it out and fails BUSY naming this
 * process, changing nothing), and damaged tables (a live entry's run sent
 * outside the region, or bytes of the tables, the header's counters and
 * hints or its sizes overwritten: calls give codes of the set, never a
 * crash or a hang, the rebuild repairs the tables; the memory is put back
 * after, so the model goes on).
 *
 * Input: six bytes of parameters (blocks, block size, entry and pin slots
 * and timeouts, policy and event slots, the byte the memory holds before
 * it is formatted), then up to MAX_OPS operations, each a byte that picks
 * the call (modulo 36: 0-3 reserve, the odd ones through reserve_ex, 4-5
 * publish, 6 abort, 7-9 lookup, 10-11 unpin, 12 check_pinned, 13 remove,
 * 14 attach, 15 identity, 16 reclaim, 17 thread death, 18 rebuild, 19-20
 * claim, 21 unclaim, 22-23 settle, 24 pinned, 25 blocks_held, 26
 * unpin_ranks, 27 format again, 28 a held lock, 29 damaged tables, 30-31
 * peek, 32-33 wait, 34 events from a cursor of its own, 35 restart) and
 * then the bytes its arguments take (the pick_* functions say which);
 * exhausted input reads as zeros. A timeout is off, an hour,
 * or 1 ns: then every reservation or pin may be reclaimed by any call after
 * the one that made it, and the model learns which were (from the listing
 * and by asking dir_check_pinned of each pin). A claimed reservation is
 * the exception: it stays while its writer, this process, lives, and the
 * model checks after every call that each claim it holds is still held.
 * A model in plain memory knows which keys exist in which state, their
 * blocks, refs, claims and pins, cost, type and hits, the counters, and
 * the residency events each change must have written: after every
 * operation the ring is read on from the model's cursor, and each event
 * must be one the model expects (a store it saw published, an eviction,
 * removal or reclaim it learned, with the entry's key, bytes and cost), in
 * sequence, with exactly as many lost as the ring could not hold; a second
 * reader's reads from any cursor must agree with what was read. Every
 * return code is checked against what directory.h says where it decides;
 * where it leaves a choice (which entries are evicted, which blocks are
 * taken) the model learns the outcome from dir_list and checks it was
 * allowed: only ready, unpinned entries are evicted, and only by a
 * reservation that succeeds (and, under the LRU policy, only those in the
 * blocks it takes). After every operation dir_check must pass and dir_list
 * and the counters must agree with the model; a call that changes nothing
 * (dir_pinned, dir_unclaim of a stale ref, dir_peek) must leave the listing
 * and the counters as they were. A broken rule aborts with its name on stderr.
 *
 * FUZZ_DIR_TRACE=1 prints each call and its result on stderr, to read a
 * crashing input as a sequence of calls.
 * FUZZ_DIR_RELAX (comma-separated rule names) turns off rules the header
 * leaves open to reading, so that fuzzing can go on past a known finding;
 * an input that reaches a relaxed rule's case stops there (thread-death,
 * relaxed, lets the model allow for this process being taken for dead).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/directory/directory.h"
#include "fuzz/fuzz_input.h"

#define NKEYS 12
#define MAX_OPS 200
#define MAX_BLOCKS 256u
#define MAX_SLOTS 64u /* the most entry or pin slots a formatted directory has here */
/* Pins the model holds: those live plus those reclaimed but not yet seen gone. */
#define MODEL_PINS (2 * MAX_SLOTS)
#define TINY_NS 1ull            /* a timeout that passes before the next call */
#define LOCK_WAIT_NS 1000000ull /* how long a call waits for a held lock */
#define HOUR_NS (3600ull * 1000000000ull)
#define RING 16
#define EV_PENDING 512              /* events the model expects and has not yet read */
#define EV_HISTORY 1024             /* events read, by seq, for the second reader */
#define EV_CHUNK 5                  /* the model's reads, in pieces */
#define COST_MAX ((1ull << 40) - 1) /* costs whose sum over an input stays below 2^64 */
#define WHY_ROOM 320
#define LIST_CAP 128

static int op_index;
static bool tracing;
static int thread_death_op = -1; /* where a thread died holding the lock, if it did */

/* A rule broken after such a death likely has that one cause. */
static void thread_death_note(void)
{
  if (thread_death_op >= 0)
    fprintf(stderr,
            "fuzz_directory: note: a thread of this process died holding the lock at op "
            "%d; the process lives, yet the directory may take it for dead since\n",
            thread_death_op);
}
static bool stop_input; /* a relaxed rule was reached: the model cannot follow */

static bool relaxed(const char *rule)
{
  const char *list = getenv("FUZZ_DIR_RELAX");
  size_t len = strlen(rule);
  for (const char *p = list; p != NULL && *p != '\0'; p = strchr(p, ',')) {
    if (*p == ',')
      p++;
    if (strncmp(p, rule, len) == 0 && (p[len] == ',' || p[len] == '\0'))
      return true;
  }
  return false;
}

/* A broken rule aborts, so that libFuzzer keeps the input. */
#define FAIL(rule, ...)                                                                    \
  do {                                                                                     \
    fprintf(stderr, "fuzz_directory: rule '%s' broken (op %d, line %d): ", rule, op_index, \
            __LINE__);                                                                     \
    fprintf(stderr, __VA_ARGS__);                                                          \
    fprintf(stderr, "\n");                                                                 \
    thread_death_note();                                                                   \
    abort();                                                                               \
  } while (0)

#define CHECK(rule, cond, ...) \
  do {                         \
    if (!(cond))               \
      FAIL(rule, __VA_ARGS__); \
  } while (0)

#define TRACE(...)                           \
  do {                                       \
    if (tracing) {                           \
      fprintf(stderr, "op %3d: ", op_index); \
      fprintf(stderr, __VA_ARGS__);          \
      fprintf(stderr, "\n");                 \
    }                                        \
  } while (0)

/* A rule the header leaves open to reading: relaxed, the input stops. */
#define CHECK_SOFT(rule, cond, ...) \
  do {                              \
    if (!(cond)) {                  \
      if (!relaxed(rule))           \
        FAIL(rule, __VA_ARGS__);    \
      stop_input = true;            \
      return;                       \
    }                               \
  } while (0)

/* ---- the model ----------------------------------------------------------- */

struct mentry {
  bool live;
  int state; /* DIR_STATE_RESERVED or DIR_STATE_READY */
  struct dir_ref ref;
  uint64_t nbytes;
  uint32_t n_blocks;
  uint32_t n_runs;
  struct dir_run runs[DIR_MAX_RUNS];
  uint32_t pins;
  uint64_t reserved_ns, used_ns;
  uint64_t used_lo, used_hi; /* used_ns may have moved into this window (hi 0: no) */
  bool claimed;              /* a reservation dir_claim took: only dir_settle ends it */
  struct dir_meta meta;      /* cost and type, as reserved */
  uint64_t hits;             /* lookups, waits and reserves that found it ready */
};

struct mpin {
  bool live;
  struct dir_pin_ref ref;
  int key;
  uint32_t left; /* releases before it is freed */
};

/* Monotonic counters, in one array so that each can be given slack. */
enum {
  C_RESERVATIONS,
  C_DEDUP,
  C_LOOKUPS,
  C_HITS,
  C_MISSES,
  C_EVICTIONS,
  C_REMOVALS,
  C_PINS,
  C_RECLAIMED,
  C_FULL,
  C_RECOVERIES,
  C_WAITS,
  C_WAITS_READY,
  C_WAITS_ABSENT,
  C_WAIT_TIMEOUTS,
  C_ENCODER_US,
  C_EVENTS,
  C_RESTARTS,
  N_MONO
};

struct model {
  struct dir_params p;
  uint32_t max_entries, max_pins; /* after the defaults */
  struct mentry e[NKEYS];
  struct mpin pins[MODEL_PINS];
  bool tiny_res, tiny_pin; /* reservations, pins time out at once: reclaims happen */
  uint32_t reclaims_now;   /* reclaims learned since the operation began */
  bool check_freed;        /* dir_reclaim ran: what it freed is what was learned */
  bool thread_died;        /* a thread died holding the lock, this process lives on */
  bool self_dead;          /* thread-death relaxed: this process may count as dead */
  uint32_t freed;
  struct dir_ref refs[RING]; /* refs handed out, live or not */
  size_t n_refs;
  struct dir_pin_ref pin_refs[RING];
  size_t n_pin_refs;
  bool entry_seen[MAX_SLOTS], pin_seen[MAX_SLOTS];   /* a slot freed at least once */
  uint32_t entry_gen[MAX_SLOTS], pin_gen[MAX_SLOTS]; /* its generation then */
  uint64_t mono[N_MONO];
  uint64_t slack[N_MONO]; /* the next reading may exceed mono by up to this */
};

static struct model m;

/* One residency event the model expects, by what it learned. */
struct ev_expect {
  uint32_t kind;
  int key;
  uint64_t nbytes, cost_us;
};

/* The event ring as the model knows it: the cursor its reads have reached
 * (the ring's next after each check), what it expects to read next, and
 * the events it has read, for a second reader to be checked against. */
struct ev_model {
  uint32_t slots;  /* after the default */
  uint64_t cursor; /* 0 before the first read: the oldest kept */
  uint64_t next;   /* the ring's next event, as of the last check */
  struct ev_expect pending[EV_PENDING];
  size_t n_pending;
  struct dir_event seen[EV_HISTORY]; /* by seq % EV_HISTORY */
  uint64_t seen_seq[EV_HISTORY];     /* 0: none read there */
  uint64_t t0;                       /* CLOCK_REALTIME when the input began */
};

static struct ev_model evm;
static struct dir d;
static void *mem;
static size_t mem_bytes;
static char keys[NKEYS][DIR_KEY_MAX + 1];
static char bad_keys[2][DIR_KEY_MAX + 2]; /* empty, one byte too long */
static char why[WHY_ROOM];
static size_t why_cap;

/* The window of the latest call that may mark entries used. */
static uint64_t call_t0, call_t1;
/* What the latest reserve records in a new entry (all 0 from dir_reserve). */
static struct dir_meta call_meta;

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t ceil_blocks(uint64_t nbytes)
{
  return nbytes == 0 ? 0 : (nbytes - 1) / m.p.block_size + 1;
}

static int key_index(const char *key)
{
  for (int k = 0; k < NKEYS; k++)
    if (strcmp(keys[k], key) == 0)
      return k;
  return -1;
}

static int entry_by_ref(struct dir_ref ref)
{
  for (int k = 0; k < NKEYS; k++)
    if (m.e[k].live && m.e[k].ref.slot == ref.slot && m.e[k].ref.gen == ref.gen)
      return k;
  return -1;
}

static int pin_by_ref(struct dir_pin_ref ref)
{
  for (uint32_t i = 0; i < MODEL_PINS; i++)
    if (m.pins[i].live && m.pins[i].ref.slot == ref.slot && m.pins[i].ref.gen == ref.gen)
      return (int)i;
  return -1;
}

static uint32_t live_entries(void)
{
  uint32_t n = 0;
  for (int k = 0; k < NKEYS; k++)
    n += m.e[k].live;
  return n;
}

static uint32_t live_pins(void)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < MODEL_PINS; i++)
    n += m.pins[i].live;
  return n;
}

static bool evictable(const struct mentry *e)
{
  return e->live && e->state == DIR_STATE_READY && e->pins == 0;
}

/* Whether any call may reclaim this reservation: its 1 ns timeout has
 * passed and no claim holds it (a claim goes only with its writer, this
 * live process), or this process may be taken for dead. */
static bool may_time_out(const struct mentry *e)
{
  return e->live && e->state == DIR_STATE_RESERVED && (m.self_dead || (m.tiny_res && !e->claimed));
}

/* Whether the entry's blocks can become free in this call: evictable, or
 * (with `reclaiming`) a reservation or pins that have timed out. */
static bool can_go(const struct mentry *e, bool reclaiming)
{
  if (!reclaiming || !e->live)
    return evictable(e);
  if (e->state == DIR_STATE_RESERVED)
    return may_time_out(e);
  return e->pins == 0 || m.tiny_pin;
}

/* owner[b]: the key whose entry holds block b, or -1. Two entries on one
 * block is a broken rule whatever the operation was. */
static void owner_map(int *owner)
{
  for (uint32_t b = 0; b < m.p.num_blocks; b++)
    owner[b] = -1;
  for (int k = 0; k < NKEYS; k++) {
    if (!m.e[k].live)
      continue;
    for (uint32_t r = 0; r < m.e[k].n_runs; r++) {
      for (uint32_t i = 0; i < m.e[k].runs[r].count; i++) {
        uint32_t b = m.e[k].runs[r].first + i;
        CHECK("disjoint", owner[b] < 0, "block %u is in '%.16s' and '%.16s'", b,
              owner[b] >= 0 ? keys[owner[b]] : "", keys[k]);
        owner[b] = k;
      }
    }
  }
}

/* The longest run of blocks for which ok[b] holds, and the sum of the
 * DIR_MAX_RUNS longest. */
static void runs_of(const bool *ok, uint32_t *longest, uint64_t *best_sum)
{
  uint32_t top[DIR_MAX_RUNS] = {0};
  uint32_t len = 0;
  for (uint32_t b = 0; b <= m.p.num_blocks; b++) {
    if (b < m.p.num_blocks && ok[b]) {
      len++;
      continue;
    }
    for (int i = 0; i < DIR_MAX_RUNS && len > 0; i++) {
      if (len > top[i]) {
        uint32_t t = top[i];
        top[i] = len;
        len = t;
      }
    }
    len = 0;
  }
  *longest = top[0];
  *best_sum = 0;
  for (int i = 0; i < DIR_MAX_RUNS; i++)
    *best_sum += top[i];
}

static void remember_ref(struct dir_ref ref)
{
  m.refs[m.n_refs++ % RING] = ref;
}

static void remember_pin(struct dir_pin_ref ref)
{
  m.pin_refs[m.n_pin_refs++ % RING] = ref;
}

/* Whether generation a comes after b: they start anywhere (a random first
 * one per slot per format) and wrap, so the order is that of their
 * difference, as for sequence numbers. */
static bool gen_after(uint32_t a, uint32_t b)
{
  return (int32_t)(a - b) > 0;
}

/* The entry is gone: its slot's next incarnation must carry a later gen. */
static void drop_entry(int k)
{
  struct dir_ref ref = m.e[k].ref;
  CHECK("model", m.e[k].pins == 0, "dropping pinned '%.16s'", keys[k]);
  if (ref.slot < MAX_SLOTS &&
      (!m.entry_seen[ref.slot] || gen_after(ref.gen, m.entry_gen[ref.slot]))) {
    m.entry_seen[ref.slot] = true;
    m.entry_gen[ref.slot] = ref.gen;
  }
  memset(&m.e[k], 0, sizeof(m.e[k]));
}

static void drop_pin(uint32_t i)
{
  struct dir_pin_ref ref = m.pins[i].ref;
  m.e[m.pins[i].key].pins--;
  /* A reclaim is learned late: the slot may hold a later pin already. */
  if (ref.slot < MAX_SLOTS && (!m.pin_seen[ref.slot] || gen_after(ref.gen, m.pin_gen[ref.slot]))) {
    m.pin_seen[ref.slot] = true;
    m.pin_gen[ref.slot] = ref.gen;
  }
  memset(&m.pins[i], 0, sizeof(m.pins[i]));
}

static uint64_t realtime_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The ring is empty (formatted, again or for the first time). */
static void ev_reset(void)
{
  memset(&evm, 0, sizeof(evm));
  evm.slots = m.p.event_slots != 0 ? m.p.event_slots : DIR_EVENT_SLOTS_DEFAULT;
  evm.next = 1;
  evm.t0 = realtime_ns();
}

/* What entry k's change must have told, as the entry is now: called before
 * the model drops it. */
static void expect_ev(uint32_t kind, int k)
{
  CHECK("model", evm.n_pending < EV_PENDING, "more than %d events expected at once", EV_PENDING);
  evm.pending[evm.n_pending++] = (struct ev_expect){kind, k, m.e[k].nbytes, m.e[k].meta.cost_us};
  m.mono[C_EVENTS]++;
}

/* ---- the reason buffer: filled within its cap, text on every error ------ */

static void why_reset(void)
{
  static const size_t caps[] = {256, 1, 7, 64};
  static unsigned calls;
  why_cap = caps[calls++ % 4];
  memset(why, 0x5a, sizeof(why));
}

static void why_after(const char *call, int rc)
{
  for (size_t i = why_cap; i < WHY_ROOM; i++)
    CHECK("why-cap", why[i] == 0x5a, "%s wrote byte %zu of a %zu-byte reason buffer", call, i,
          why_cap);
  if (rc == ECC_OK)
    return;
  CHECK("why-text", memchr(why, '\0', why_cap) != NULL, "%s: %d with an unterminated reason", call,
        rc);
  CHECK("why-text", why_cap == 1 || why[0] != '\0', "%s: %d with no reason", call, rc);
}

/* ---- checks after every operation ------------------------------------------ */

struct listing {
  size_t n;
  bool overflow;
  struct dir_entry_info e[LIST_CAP];
};

static struct listing listed_now; /* the latest dir_list */
static bool listed_key[NKEYS];    /* the keys it holds */

static void list_one(void *user, const struct dir_entry_info *e)
{
  struct listing *l = user;
  if (l->n == LIST_CAP) {
    l->overflow = true;
    return;
  }
  l->e[l->n++] = *e;
}

/* dir_list, each listed entry mapped to its key (or a broken rule). */
static void take_listing(int *key_of)
{
  memset(&listed_now, 0, sizeof(listed_now));
  CHECK("list", dir_list(&d, list_one, &listed_now) == ECC_OK, "dir_list failed");
  TRACE("  %zu entries listed", listed_now.n);
  CHECK("list", !listed_now.overflow && listed_now.n <= m.max_entries,
        "dir_list gave %zu entries, %u slots", listed_now.n, m.max_entries);
  bool *listed = listed_key;
  memset(listed_key, 0, sizeof(listed_key));
  for (size_t i = 0; i < listed_now.n; i++) {
    const struct dir_entry_info *e = &listed_now.e[i];
    CHECK("list", memchr(e->key, '\0', sizeof(e->key)) != NULL, "unterminated key listed");
    int k = key_index(e->key);
    CHECK("list", k >= 0, "listed key '%.16s' was never reserved", e->key);
    CHECK("list", !listed[k], "'%.16s' listed twice", e->key);
    listed[k] = true;
    key_of[i] = k;
  }
}

static bool same_runs(const struct dir_entry_info *e, const struct mentry *x)
{
  if (e->n_runs != x->n_runs || e->n_runs > DIR_MAX_RUNS)
    return false;
  for (uint32_t r = 0; r < e->n_runs; r++)
    if (e->runs[r].first != x->runs[r].first || e->runs[r].count != x->runs[r].count)
      return false;
  return true;
}

/* What an info says of an entry, pins aside (a lookup's may count its own). */
/* used_ns is the model's, or (learned) one within the window it may have
 * moved to; reserved_ns never changes. */
static void check_times(const char *what, const struct dir_entry_info *e, struct mentry *x)
{
  CHECK("time", e->reserved_ns == x->reserved_ns, "%s '%.16s': reserved_ns %llu, was %llu", what,
        e->key, (unsigned long long)e->reserved_ns, (unsigned long long)x->reserved_ns);
  if (e->used_ns == x->used_ns)
    return;
  CHECK("time", x->used_hi != 0 && e->used_ns >= x->used_lo && e->used_ns <= x->used_hi,
        "%s '%.16s': used_ns moved from %llu to %llu, no lookup or reserve hit", what, e->key,
        (unsigned long long)x->used_ns, (unsigned long long)e->used_ns);
  x->used_ns = e->used_ns;
}

static void may_use(int k)
{
  m.e[k].used_lo = call_t0;
  m.e[k].used_hi = call_t1;
}

/* A hit of a lookup, a wait or a reserve on ready entry k: used, counted,
 * and what it saves added up. */
static void model_hit(int k)
{
  may_use(k);
  m.e[k].hits++;
  m.mono[C_ENCODER_US] += m.e[k].meta.cost_us;
}

/* Field by field: what a reservation recorded comes back as it was. */
static bool same_meta(const struct dir_meta *a, const struct dir_meta *b)
{
  return a->cost_us == b->cost_us && a->type.dtype == b->type.dtype &&
         a->type.n_dims == b->type.n_dims &&
         memcmp(a->type.dims, b->type.dims, sizeof(a->type.dims)) == 0;
}

static void check_info(const char *what, const struct dir_entry_info *e, int k)
{
  struct mentry *x = &m.e[k];
  check_times(what, e, x);
  CHECK("info", strcmp(e->key, keys[k]) == 0, "%s: key '%.16s' for '%.16s'", what, e->key, keys[k]);
  CHECK("info", e->state == x->state, "%s '%.16s': state %d, model %d", what, keys[k], e->state,
        x->state);
  CHECK("info", e->ref.slot == x->ref.slot && e->ref.gen == x->ref.gen,
        "%s '%.16s': ref %u/%u, model %u/%u", what, keys[k], e->ref.slot, e->ref.gen, x->ref.slot,
        x->ref.gen);
  CHECK("info", e->nbytes == x->nbytes && e->n_blocks == x->n_blocks,
        "%s '%.16s': %llu bytes in %u blocks, model %llu in %u", what, keys[k],
        (unsigned long long)e->nbytes, e->n_blocks, (unsigned long long)x->nbytes, x->n_blocks);
  CHECK("info", same_runs(e, x), "%s '%.16s': runs differ from those reserved", what, keys[k]);
  CHECK("info", e->owner.pid == d.self.pid && e->owner.start_ticks == d.self.start_ticks,
        "%s '%.16s': owner %d, this process is %d", what, keys[k], e->owner.pid, d.self.pid);
  CHECK("meta", same_meta(&e->meta, &x->meta),
        "%s '%.16s': cost %llu, dtype %u, %u dims; reserved with cost %llu, dtype %u, %u dims",
        what, keys[k], (unsigned long long)e->meta.cost_us, e->meta.type.dtype, e->meta.type.n_dims,
        (unsigned long long)x->meta.cost_us, x->meta.type.dtype, x->meta.type.n_dims);
  CHECK("hits", e->hits == x->hits, "%s '%.16s': %llu hits, model %llu", what, keys[k],
        (unsigned long long)e->hits, (unsigned long long)x->hits);
}

/* ---- reclaims, learned: only where a timeout has passed ----------------- */

static void reclaimed_pin(uint32_t i)
{
  TRACE("  pin %u/%u of '%.16s' reclaimed", m.pins[i].ref.slot, m.pins[i].ref.gen,
        keys[m.pins[i].key]);
  drop_pin(i);
  m.mono[C_RECLAIMED]++;
  m.reclaims_now++;
}

static void reclaimed_entry(int k)
{
  if (!m.tiny_res && m.thread_died && m.e[k].state == DIR_STATE_RESERVED)
    FAIL("thread-death",
         "reservation of '%.16s' freed, this process lives (a thread of it died holding the "
         "lock earlier)",
         keys[k]);
  CHECK("claim-kept", !m.e[k].claimed || m.self_dead,
        "claimed reservation of '%.16s' freed: a claim goes only with its writer, this live "
        "process, never by a timeout",
        keys[k]);
  CHECK("reclaim", m.tiny_res && m.e[k].state == DIR_STATE_RESERVED,
        "'%.16s' (state %d) vanished, no reservation timed out", keys[k], m.e[k].state);
  TRACE("  reservation of '%.16s' (slot %u) reclaimed", keys[k], m.e[k].ref.slot);
  expect_ev(ECC_EVENT_RECLAIMED, k);
  drop_entry(k);
  m.mono[C_RECLAIMED]++;
  m.reclaims_now++;
}

/* Whether the model's pin i is live, asked without changing anything. */
static bool pin_alive(uint32_t i)
{
  const struct mentry *x = &m.e[m.pins[i].key];
  why_reset();
  int rc = dir_check_pinned(&d, m.pins[i].ref, x->runs[0].first, 1, why, why_cap);
  why_after("dir_check_pinned", rc);
  CHECK("probe", rc == ECC_OK || (rc == ECC_ERR_CLOSED && m.tiny_pin),
        "pin %u/%u of '%.16s' on its first block: %d", m.pins[i].ref.slot, m.pins[i].ref.gen,
        keys[m.pins[i].key], rc);
  return rc == ECC_OK;
}

static void learn_pin_reclaims(void)
{
  for (uint32_t i = 0; m.tiny_pin && i < MODEL_PINS; i++)
    if (m.pins[i].live && !pin_alive(i))
      reclaimed_pin(i);
}

static void check_listing(void)
{
  int key_of[LIST_CAP];
  take_listing(key_of);
  for (int k = 0; k < NKEYS; k++)
    if (m.e[k].live && !listed_key[k])
      reclaimed_entry(k);
  CHECK("list", listed_now.n == live_entries(), "dir_list gave %zu entries, the model has %u",
        listed_now.n, live_entries());
  for (size_t i = 0; i < listed_now.n; i++) {
    int k = key_of[i];
    CHECK("list", m.e[k].live, "'%.16s' listed but gone (state %d)", keys[k],
          listed_now.e[i].state);
    check_info("listed", &listed_now.e[i], k);
    CHECK("pins", listed_now.e[i].pins == m.e[k].pins, "'%.16s' has %u pins, model %u", keys[k],
          listed_now.e[i].pins, m.e[k].pins);
    m.e[k].used_hi = 0;
  }
}

static void mono_of(const struct dir_counters *c, uint64_t *v)
{
  const uint64_t all[N_MONO] = {
      c->reservations,     c->dedup_hits, c->lookups,     c->hits,         c->misses,
      c->evictions,        c->removals,   c->pins,        c->reclaimed,    c->full,
      c->recoveries,       c->waits,      c->waits_ready, c->waits_absent, c->wait_timeouts,
      c->encoder_us_saved, c->events,     c->restarts,
  };
  memcpy(v, all, sizeof(all));
}

static void check_counters(void)
{
  static const char *const names[N_MONO] = {
      "reservations",     "dedup_hits", "lookups",     "hits",         "misses",
      "evictions",        "removals",   "pins",        "reclaimed",    "full",
      "recoveries",       "waits",      "waits_ready", "waits_absent", "wait_timeouts",
      "encoder_us_saved", "events",     "restarts",
  };
  struct dir_counters c;
  int owner[MAX_BLOCKS];
  bool free_b[MAX_BLOCKS];
  uint64_t used = 0, sum8, v[N_MONO];
  uint32_t longest;
  owner_map(owner);
  for (uint32_t b = 0; b < m.p.num_blocks; b++) {
    free_b[b] = owner[b] < 0;
    used += owner[b] >= 0;
  }
  runs_of(free_b, &longest, &sum8);
  memset(&c, 0xa5, sizeof(c));
  dir_get_counters(&d, &c);
  CHECK("counters", c.entries == live_entries() && c.pins_live == live_pins(),
        "%llu entries and %llu pins, model %u and %u", (unsigned long long)c.entries,
        (unsigned long long)c.pins_live, live_entries(), live_pins());
  CHECK("counters", c.blocks_used == used && c.blocks_free == m.p.num_blocks - used,
        "%llu used + %llu free blocks, model %llu of %u", (unsigned long long)c.blocks_used,
        (unsigned long long)c.blocks_free, (unsigned long long)used, m.p.num_blocks);
  CHECK("counters", c.largest_free_run == longest, "largest free run %llu, model %u",
        (unsigned long long)c.largest_free_run, longest);
  mono_of(&c, v);
  for (int i = 0; i < N_MONO; i++) {
    CHECK("counters", v[i] >= m.mono[i] && v[i] <= m.mono[i] + m.slack[i],
          "%s is %llu, model %llu (+%llu allowed)", names[i], (unsigned long long)v[i],
          (unsigned long long)m.mono[i], (unsigned long long)m.slack[i]);
    m.mono[i] = v[i];
    m.slack[i] = 0;
  }
}

/* Every claim the model holds is still held, whatever the call was (a
 * rebuild, a reclaim, a timeout): a second claim of it is BUSY and changes
 * nothing. Last, so that whatever it did is learned after the next call. */
static void check_claims(void)
{
  struct dir_entry_info e;
  for (int k = 0; k < NKEYS && !m.self_dead; k++) {
    if (!m.e[k].live || !m.e[k].claimed)
      continue;
    why_reset();
    int rc = dir_claim(&d, m.e[k].ref, &e, why, why_cap);
    why_after("dir_claim", rc);
    CHECK("claim-kept", rc == ECC_ERR_BUSY, "claimed '%.16s' (ref %u/%u) claimed again: %d, BUSY",
          keys[k], m.e[k].ref.slot, m.e[k].ref.gen, rc);
  }
}

/* ---- the event ring, read after every operation ------------------------ */

/* One event read on from the model's cursor: later than the one before it,
 * of this input's time, and one the model expects (taken off its list). */
static void match_event(const struct dir_event *e, uint64_t *last)
{
  CHECK("events", e->seq > *last, "event %llu read after %llu", (unsigned long long)e->seq,
        (unsigned long long)*last);
  *last = e->seq;
  CHECK("events", e->time_ns + HOUR_NS >= evm.t0 && e->time_ns <= realtime_ns() + HOUR_NS,
        "event %llu at %llu ns, the input began at %llu", (unsigned long long)e->seq,
        (unsigned long long)e->time_ns, (unsigned long long)evm.t0);
  int k = key_index(e->key);
  for (size_t i = 0; k >= 0 && i < evm.n_pending; i++) {
    const struct ev_expect *x = &evm.pending[i];
    if (x->kind == e->kind && x->key == k && x->nbytes == e->nbytes && x->cost_us == e->cost_us) {
      evm.pending[i] = evm.pending[--evm.n_pending];
      evm.seen[e->seq % EV_HISTORY] = *e;
      evm.seen_seq[e->seq % EV_HISTORY] = e->seq;
      return;
    }
  }
  FAIL("events",
       "event %llu, kind %u of '%.16s' (%llu bytes, cost %llu), is none the model expects (%zu "
       "expected)",
       (unsigned long long)e->seq, e->kind, e->key, (unsigned long long)e->nbytes,
       (unsigned long long)e->cost_us, evm.n_pending);
}

/* Everything written since the last check, read in pieces: the events the
 * model expects, no other, and as many lost as the ring could not hold
 * (none from cursor 0, the oldest kept, which only the overwritten miss). */
static void check_events(void)
{
  struct dir_event out[EV_CHUNK];
  uint64_t cursor = evm.cursor, lost_all = 0, last = 0, expected = evm.n_pending;
  uint64_t overwritten = expected > evm.slots ? expected - evm.slots : 0;
  size_t n, got = 0;
  do {
    uint64_t lost = 77;
    n = 99;
    int rc = dir_events(&d, &cursor, out, EV_CHUNK, &n, &lost);
    CHECK("events", rc == ECC_OK && n <= EV_CHUNK, "dir_events: %d, %zu events", rc, n);
    lost_all += lost;
    for (size_t i = 0; i < n; i++)
      match_event(&out[i], &last);
    got += n;
  } while (n == EV_CHUNK);
  TRACE("  %zu events read, %llu lost, cursor %llu", got, (unsigned long long)lost_all,
        (unsigned long long)cursor);
  CHECK("events-lost", lost_all == (evm.cursor == 0 ? 0 : overwritten),
        "%llu events lost from cursor %llu, %llu written to a ring of %u",
        (unsigned long long)lost_all, (unsigned long long)evm.cursor, (unsigned long long)expected,
        evm.slots);
  CHECK("events", got == expected - overwritten && evm.n_pending == overwritten,
        "%zu events read of %llu written to a ring of %u: %zu expected ones not among them", got,
        (unsigned long long)expected, evm.slots, evm.n_pending - (size_t)overwritten);
  CHECK("events", cursor == evm.next + expected, "cursor %llu after the read, the ring's next %llu",
        (unsigned long long)cursor, (unsigned long long)(evm.next + expected));
  evm.n_pending = 0;
  evm.cursor = evm.next = cursor;
}

static void verify(void)
{
  why_reset();
  int rc = dir_check(&d, why, why_cap);
  why_after("dir_check", rc);
  if (rc != ECC_OK) {
    char full[512] = ""; /* the reason may not have fit in why_cap */
    dir_check(&d, full, sizeof(full));
    FAIL("dir_check", "dir_check: %d (%s)", rc, full);
  }
  learn_pin_reclaims();
  check_listing();
  check_counters();
  check_events();
  CHECK("reclaim", !m.check_freed || m.freed == m.reclaims_now,
        "dir_reclaim says it freed %u, %u reservations and pins went", m.freed, m.reclaims_now);
  m.check_freed = false;
  check_claims();
}

/* ---- picking arguments ------------------------------------------------- */

/* A key of the alphabet (k >= 0), or an invalid one (k < 0). */
static const char *pick_key(struct input *in, int *k)
{
  uint8_t v = u8(in);
  *k = -1;
  if (v >= 252)
    return bad_keys[1];
  if (v >= 248)
    return bad_keys[0];
  *k = v % NKEYS;
  return keys[*k];
}

static uint64_t pick_nbytes(struct input *in)
{
  uint64_t bs = m.p.block_size, region = (uint64_t)m.p.num_blocks * bs;
  uint8_t mode = u8(in) % 16;
  uint64_t blocks;
  if (mode == 0)
    return 0;
  if (mode == 1)
    return region + 1 + u16(in); /* one block too many at least */
  if (mode == 2)
    return region;
  if (mode == 3)
    return UINT64_MAX - u8(in); /* the block count overflows 32 bits */
  if (mode < 8)
    blocks = 1 + u8(in) % 8;
  else
    blocks = 1 + u16(in) % (m.p.num_blocks / 2);
  return (blocks - 1) * bs + 1 + u16(in) % bs;
}

static struct dir_ref pick_ref(struct input *in)
{
  uint8_t mode = u8(in) % 8;
  struct dir_ref r;
  if (mode == 0 || m.n_refs == 0) {
    r.slot = u8(in) % 4 == 0 ? u32(in) : u8(in) % (m.max_entries + 2);
    r.gen = u8(in) % 4 == 0 ? u32(in) : u8(in) % 4;
    return r;
  }
  size_t n = m.n_refs < RING ? m.n_refs : RING;
  if (mode < 4)
    r = m.refs[(m.n_refs - 1) % RING]; /* the latest, mostly */
  else
    r = m.refs[u8(in) % n];
  if (mode == 1)
    r.gen += u8(in) % 2 ? 1 : (uint32_t)-1; /* the right slot, another incarnation */
  return r;
}

static struct dir_pin_ref pick_pin(struct input *in)
{
  uint8_t mode = u8(in) % 8;
  struct dir_pin_ref r;
  if (mode == 0 || m.n_pin_refs == 0) {
    r.slot = u8(in) % 4 == 0 ? u32(in) : u8(in) % (m.max_pins + 2);
    r.gen = u8(in) % 4 == 0 ? u32(in) : u8(in) % 4;
    return r;
  }
  size_t n = m.n_pin_refs < RING ? m.n_pin_refs : RING;
  if (mode < 4)
    r = m.pin_refs[(m.n_pin_refs - 1) % RING];
  else
    r = m.pin_refs[u8(in) % n];
  if (mode == 1)
    r.gen += u8(in) % 2 ? 1 : (uint32_t)-1;
  return r;
}

/* ---- reserve ---------------------------------------------------------- */

/* Room for n blocks once every evictable entry is gone, as the header
 * defines ECC_ERR_BUSY; and whether a window of free blocks exists now.
 * `reclaiming` counts timed-out reservations and pins as gone too: the
 * most room a call can find. */
struct room {
  bool slot;        /* a free entry slot, or an entry to evict for one */
  bool free_window; /* n free blocks in a row, nothing evicted */
  bool window;      /* n in a row of free and evictable blocks */
  bool runs;        /* n in at most DIR_MAX_RUNS runs of those */
};

static struct room room_for(uint64_t n, bool reclaiming)
{
  struct room r = {.slot = live_entries() < m.max_entries};
  int owner[MAX_BLOCKS];
  bool free_b[MAX_BLOCKS], avail[MAX_BLOCKS];
  uint32_t longest;
  uint64_t sum8;
  owner_map(owner);
  for (int k = 0; k < NKEYS; k++)
    r.slot = r.slot || can_go(&m.e[k], reclaiming);
  for (uint32_t b = 0; b < m.p.num_blocks; b++) {
    free_b[b] = owner[b] < 0;
    avail[b] = free_b[b] || can_go(&m.e[owner[b]], reclaiming);
  }
  runs_of(free_b, &longest, &sum8);
  r.free_window = longest >= n;
  runs_of(avail, &longest, &sum8);
  r.window = longest >= n;
  r.runs = sum8 >= n;
  return r;
}

/* The runs of a new entry: in the region, n blocks in all, each >= 1. */
static void check_new_runs(const struct dir_entry_info *e, uint64_t n)
{
  uint64_t sum = 0;
  CHECK("runs", e->n_runs >= 1 && e->n_runs <= DIR_MAX_RUNS, "%u runs", e->n_runs);
  for (uint32_t r = 0; r < e->n_runs; r++) {
    const struct dir_run *run = &e->runs[r];
    CHECK("runs",
          run->count >= 1 && run->first < m.p.num_blocks &&
              run->count <= m.p.num_blocks - run->first,
          "run %u is [%u, +%u) in %u blocks", r, run->first, run->count, m.p.num_blocks);
    sum += run->count;
  }
  CHECK("runs", sum == n && e->n_blocks == n, "runs hold %llu blocks, n_blocks %u, %llu asked",
        (unsigned long long)sum, e->n_blocks, (unsigned long long)n);
}

/* A slot's new incarnation has a generation past every earlier one. */
static void check_fresh_ref(uint32_t slot, uint32_t gen, uint32_t slots, const bool *seen,
                            const uint32_t *last, const char *what)
{
  CHECK("refs", slot < slots, "%s slot %u of %u", what, slot, slots);
  CHECK("refs", !seen[slot] || gen_after(gen, last[slot]),
        "%s slot %u: gen %u again (freed at gen %u)", what, slot, gen, last[slot]);
}

static bool overlaps(const struct mentry *x, const struct dir_entry_info *e)
{
  for (uint32_t r = 0; r < x->n_runs; r++)
    for (uint32_t q = 0; q < e->n_runs; q++)
      if (x->runs[r].first < e->runs[q].first + e->runs[q].count &&
          e->runs[q].first < x->runs[r].first + x->runs[r].count)
        return true;
  return false;
}

/* Which keys the reservation evicted: each must have been evictable, and
 * in the blocks taken, but for one that gives up its slot when the table
 * is full and the blocks taken free none. */
static void learn_evictions(int k_new, const struct dir_entry_info *e)
{
  int key_of[LIST_CAP];
  learn_pin_reclaims(); /* before: an entry whose pins were reclaimed may go */
  bool full = live_entries() == m.max_entries;
  uint32_t inside = 0, outside = 0;
  take_listing(key_of);
  CHECK("reserve", listed_key[k_new], "reserved '%.16s' is not listed", keys[k_new]);
  for (int k = 0; k < NKEYS; k++) {
    if (!m.e[k].live || listed_key[k])
      continue;
    if (m.tiny_res && m.e[k].state == DIR_STATE_RESERVED) {
      reclaimed_entry(k);
      continue;
    }
    CHECK("evict", m.e[k].state == DIR_STATE_READY, "reserving '%.16s' evicted reserved '%.16s'",
          keys[k_new], keys[k]);
    CHECK("evict", m.e[k].pins == 0, "reserving '%.16s' evicted '%.16s' with %u pins", keys[k_new],
          keys[k], m.e[k].pins);
    TRACE("  evicted '%.16s' (slot %u)", keys[k], m.e[k].ref.slot);
    if (overlaps(&m.e[k], e))
      inside++;
    else
      outside++;
    expect_ev(ECC_EVENT_EVICTED, k);
    drop_entry(k);
    m.mono[C_EVICTIONS]++;
  }
  /* The cost policy may take another window than the first the hand meets. */
  CHECK_SOFT("evict-needless",
             m.p.policy != DIR_POLICY_LRU || outside <= (full && inside == 0 ? 1u : 0u),
             "reserving '%.16s' evicted %u entries outside its blocks, %u inside (table %s)",
             keys[k_new], outside, inside, full ? "full" : "not full");
  for (int k = 0; k < NKEYS; k++)
    CHECK("reserve", !m.e[k].live || m.e[k].ref.slot != e->ref.slot,
          "new '%.16s' shares slot %u with '%.16s'", keys[k_new], e->ref.slot, keys[k]);
}

/* lo: the room there surely is; hi: the most there can be. */
static void learn_reservation(int k, uint64_t nbytes, const struct dir_entry_info *e,
                              const struct room *lo, const struct room *hi)
{
  uint64_t n = ceil_blocks(nbytes);
  CHECK("reserve", e->state == DIR_STATE_RESERVED && e->nbytes == nbytes && e->pins == 0,
        "new '%.16s': state %d, %llu bytes, %u pins", keys[k], e->state,
        (unsigned long long)e->nbytes, e->pins);
  CHECK("reserve", strcmp(e->key, keys[k]) == 0, "new entry named '%.16s'", e->key);
  CHECK("reserve", e->owner.pid == getpid(), "new entry owned by %d", e->owner.pid);
  check_new_runs(e, n);
  CHECK("one-run", e->n_runs == 1 || !lo->free_window,
        "'%.16s' got %u runs while %llu free blocks in a row existed", keys[k], e->n_runs,
        (unsigned long long)n);
  CHECK_SOFT("one-run-evicting", m.p.policy != DIR_POLICY_LRU || e->n_runs == 1 || !lo->window,
             "'%.16s' got %u runs while a window of free and evictable blocks existed", keys[k],
             e->n_runs);
  check_fresh_ref(e->ref.slot, e->ref.gen, m.max_entries, m.entry_seen, m.entry_gen, "entry");
  learn_evictions(k, e);
  /* After what went is learned, so that a claim taken for room says so. */
  CHECK("room", hi->runs && hi->slot, "'%.16s' (%llu blocks) reserved with no room", keys[k],
        (unsigned long long)n);
  struct mentry *x = &m.e[k];
  memset(x, 0, sizeof(*x));
  x->live = true;
  x->state = DIR_STATE_RESERVED;
  x->ref = e->ref;
  x->nbytes = nbytes;
  x->n_blocks = (uint32_t)n;
  x->n_runs = e->n_runs;
  memcpy(x->runs, e->runs, sizeof(x->runs));
  CHECK("time", e->reserved_ns >= call_t0 && e->reserved_ns <= call_t1,
        "new '%.16s': reserved_ns %llu outside the call [%llu, %llu]", keys[k],
        (unsigned long long)e->reserved_ns, (unsigned long long)call_t0,
        (unsigned long long)call_t1);
  CHECK("time", e->used_ns == 0 || (e->used_ns >= call_t0 && e->used_ns <= call_t1),
        "new '%.16s': used_ns %llu", keys[k], (unsigned long long)e->used_ns);
  x->reserved_ns = e->reserved_ns;
  x->used_ns = e->used_ns;
  x->meta = call_meta;
  CHECK("meta", same_meta(&e->meta, &call_meta) && e->hits == 0,
        "new '%.16s': cost %llu, %llu hits; reserved with cost %llu", keys[k],
        (unsigned long long)e->meta.cost_us, (unsigned long long)e->hits,
        (unsigned long long)call_meta.cost_us);
  remember_ref(e->ref);
  m.mono[C_RESERVATIONS]++;
}

/* The key exists: its entry is described and nothing changes. */
/* RANGE is for an absent key only: a size too big still finds it. */
static void reserve_found(int k, int rc, int outcome, const struct dir_entry_info *e)
{
  int want = m.e[k].state == DIR_STATE_READY ? DIR_FOUND_READY : DIR_FOUND_WRITING;
  CHECK("dedup", rc == ECC_OK && outcome == want,
        "reserve of existing '%.16s' (state %d): %d, "
        "outcome %d, want %d",
        keys[k], m.e[k].state, rc, outcome, want);
  if (want == DIR_FOUND_READY)
    model_hit(k); /* a found one keeps its own cost and type */
  else
    may_use(k);
  check_info("found", e, k);
  CHECK("time", want == DIR_FOUND_WRITING || e->used_ns >= call_t0,
        "'%.16s' found ready, used_ns %llu is before the call (%llu)", keys[k],
        (unsigned long long)e->used_ns, (unsigned long long)call_t0);
  CHECK("pins", e->pins == m.e[k].pins || (m.tiny_pin && e->pins < m.e[k].pins),
        "found '%.16s' with %u pins, model %u", keys[k], e->pins, m.e[k].pins);
  remember_ref(e->ref);
  m.mono[C_DEDUP]++;
}

static void reserve_busy(int k, uint64_t n, const struct room *room)
{
  m.mono[C_FULL]++;
  CHECK("busy", !room->slot || !room->window,
        "'%.16s' (%llu blocks) refused BUSY with a window of free and evictable blocks", keys[k],
        (unsigned long long)n);
  CHECK_SOFT("busy-runs", !room->slot || !room->runs,
             "'%.16s' (%llu blocks) refused BUSY while free and evictable blocks would hold it "
             "in %d runs",
             keys[k], (unsigned long long)n, DIR_MAX_RUNS);
}

/* The key is listed: a reservation may have timed out and gone meanwhile. */
static void reserve_existing(int k, uint64_t nbytes, int rc, int outcome,
                             const struct dir_entry_info *e, const struct room *lo,
                             const struct room *hi)
{
  uint64_t n = ceil_blocks(nbytes);
  if (!may_time_out(&m.e[k])) {
    reserve_found(k, rc, outcome, e);
  } else if (rc == ECC_OK && outcome == DIR_RESERVED) {
    reclaimed_entry(k); /* its writer's time ran out: reserved anew */
    learn_reservation(k, nbytes, e, lo, hi);
  } else if (rc == ECC_OK) {
    reserve_found(k, rc, outcome, e);
  } else {
    int key_of[LIST_CAP];
    take_listing(key_of);
    CHECK("dedup", !listed_key[k], "reserve of '%.16s', still being written: %d", keys[k], rc);
    CHECK("dedup", (rc == ECC_ERR_RANGE && n > m.p.num_blocks) || rc == ECC_ERR_BUSY,
          "reserve of '%.16s' after its reclaim: %d", keys[k], rc);
    if (rc == ECC_ERR_BUSY)
      reserve_busy(k, n, lo);
    else
      m.slack[C_FULL] = 1;
  }
}

/* A cost and a type for reserve_ex: the directory records them as they
 * are (the connector judges a type against the bytes), so any will do. */
static void pick_meta(struct input *in, struct dir_meta *meta)
{
  static const uint64_t costs[] = {0, 1, 1000, 1u << 20, COST_MAX};
  memset(meta, 0, sizeof(*meta));
  uint8_t mode = u8(in);
  meta->cost_us = mode % 8 < 5 ? costs[mode % 8] : u32(in);
  if (mode / 8 % 2 == 0)
    return; /* untyped */
  meta->type.dtype = u8(in) % 16;
  meta->type.n_dims = u8(in) % (ECC_TENSOR_MAX_DIMS + 2);
  for (uint32_t i = 0; i < ECC_TENSOR_MAX_DIMS; i++)
    meta->type.dims[i] = u8(in) % 4 == 0 ? u32(in) : u8(in);
}

static void op_reserve(struct input *in, bool ex)
{
  int k, outcome = -1;
  const char *key = pick_key(in, &k);
  uint64_t nbytes = pick_nbytes(in), n = ceil_blocks(nbytes);
  struct room lo = room_for(n, false), hi = room_for(n, m.tiny_res || m.tiny_pin);
  struct dir_entry_info e;
  bool no_meta = !ex || u8(in) % 8 == 0; /* reserve_ex with NULL: cost 0, untyped */
  memset(&call_meta, 0, sizeof(call_meta));
  if (!no_meta)
    pick_meta(in, &call_meta);
  memset(&e, 0xa5, sizeof(e));
  why_reset();
  call_t0 = now_ns();
  int rc =
      ex ? dir_reserve_ex(&d, key, nbytes, no_meta ? NULL : &call_meta, &outcome, &e, why, why_cap)
         : dir_reserve(&d, key, nbytes, &outcome, &e, why, why_cap);
  call_t1 = now_ns();
  why_after("dir_reserve", rc);
  TRACE("reserve%s '%.16s' %llu bytes (%llu blocks, cost %llu): %d, outcome %d, ref %u/%u, %u "
        "runs, first [%u, +%u)",
        ex ? "_ex" : "", key, (unsigned long long)nbytes, (unsigned long long)n,
        (unsigned long long)call_meta.cost_us, rc, outcome, e.ref.slot, e.ref.gen, e.n_runs,
        e.runs[0].first, e.runs[0].count);
  if (k < 0) {
    CHECK("invalid", rc == ECC_ERR_INVALID, "reserve of a %zu-byte key: %d", strlen(key), rc);
  } else if (nbytes == 0) {
    CHECK("invalid", rc == ECC_ERR_INVALID, "reserve of 0 bytes: %d", rc);
  } else if (m.e[k].live) {
    reserve_existing(k, nbytes, rc, outcome, &e, &lo, &hi);
  } else if (n > m.p.num_blocks) {
    CHECK("range", rc == ECC_ERR_RANGE, "reserve of %llu blocks of %u: %d", (unsigned long long)n,
          m.p.num_blocks, rc);
    m.slack[C_FULL] = 1; /* "for want of room": counted or not */
  } else if (rc == ECC_ERR_BUSY) {
    reserve_busy(k, n, &lo);
  } else {
    CHECK("reserve", rc == ECC_OK && outcome == DIR_RESERVED,
          "reserve of new '%.16s' (%llu blocks): %d, outcome %d (%s)", keys[k],
          (unsigned long long)n, rc, outcome, why);
    learn_reservation(k, nbytes, &e, &lo, &hi);
  }
}

/* ---- publish, abort ------------------------------------------------------ */

/* A call on a reservation said CLOSED where it may time out (at once, no
 * claim holding it): then it must be gone (reclaimed meanwhile). */
static bool timed_out(int k, int rc)
{
  int key_of[LIST_CAP];
  if (!may_time_out(&m.e[k]) || rc != ECC_ERR_CLOSED)
    return false;
  take_listing(key_of);
  CHECK("reclaim", !listed_key[k], "'%.16s' refused CLOSED but still listed", keys[k]);
  return true;
}

/* A copy is writing into a claimed reservation's blocks: only dir_settle
 * may end it, so publish and abort are refused and change nothing. */
static void claimed_refused(const char *call, int k, int rc)
{
  CHECK("claimed-finish", rc == ECC_ERR_BUSY, "%s of claimed '%.16s': %d, BUSY documented", call,
        keys[k], rc);
}

static void op_publish(struct input *in)
{
  struct dir_ref ref = pick_ref(in);
  int k = entry_by_ref(ref);
  why_reset();
  int rc = dir_publish(&d, ref, why, why_cap);
  why_after("dir_publish", rc);
  TRACE("publish %u/%u ('%.16s'): %d", ref.slot, ref.gen, k >= 0 ? keys[k] : "stale", rc);
  if (k < 0) {
    CHECK("stale-ref", rc == ECC_ERR_CLOSED, "publish of stale ref %u/%u: %d", ref.slot, ref.gen,
          rc);
  } else if (m.e[k].state == DIR_STATE_RESERVED && timed_out(k, rc)) {
    return; /* the listing after the call learns it is gone */
  } else if (m.e[k].claimed) {
    claimed_refused("publish", k, rc);
  } else if (m.e[k].state == DIR_STATE_RESERVED) {
    CHECK("publish", rc == ECC_OK, "publish of reserved '%.16s': %d (%s)", keys[k], rc, why);
    m.e[k].state = DIR_STATE_READY;
    expect_ev(ECC_EVENT_STORED, k);
  } else {
    /* Published already: the reservation is gone, the entry stays. */
    CHECK("republish", rc == ECC_ERR_INVALID, "second publish of '%.16s': %d, INVALID documented",
          keys[k], rc);
  }
}

static void op_abort(struct input *in)
{
  struct dir_ref ref = pick_ref(in);
  int k = entry_by_ref(ref);
  why_reset();
  int rc = dir_abort(&d, ref, why, why_cap);
  why_after("dir_abort", rc);
  TRACE("abort %u/%u ('%.16s'): %d", ref.slot, ref.gen, k >= 0 ? keys[k] : "stale", rc);
  if (k < 0) {
    CHECK("stale-ref", rc == ECC_ERR_CLOSED, "abort of stale ref %u/%u: %d", ref.slot, ref.gen, rc);
  } else if (m.e[k].state == DIR_STATE_RESERVED && timed_out(k, rc)) {
    return;
  } else if (m.e[k].claimed) {
    claimed_refused("abort", k, rc);
  } else if (m.e[k].state == DIR_STATE_RESERVED) {
    CHECK("abort", rc == ECC_OK, "abort of reserved '%.16s': %d (%s)", keys[k], rc, why);
    drop_entry(k);
  } else {
    /* Readers may hold it: a published entry is not a reservation to give up. */
    CHECK("abort-ready", rc != ECC_OK, "abort freed published '%.16s'", keys[k]);
    CHECK("abort-ready", rc == ECC_ERR_INVALID,
          "abort of published '%.16s': %d, INVALID documented", keys[k], rc);
  }
}

/* ---- claims: the connector's copies into reservations ------------------ */

/* What a call that "changes nothing" must leave as it found: the listing
 * (times, pins and runs of every entry) and all the counters. */
struct snapshot {
  struct listing l;
  struct dir_counters c;
};

static struct snapshot snap_before, snap_after;

static void take_snapshot(struct snapshot *s)
{
  memset(s, 0, sizeof(*s));
  CHECK("list", dir_list(&d, list_one, &s->l) == ECC_OK, "dir_list failed");
  dir_get_counters(&d, &s->c);
}

/* Field by field: struct copies need not keep the padding after state. */
static bool same_info(const struct dir_entry_info *a, const struct dir_entry_info *b)
{
  return a->ref.slot == b->ref.slot && a->ref.gen == b->ref.gen && a->state == b->state &&
         a->nbytes == b->nbytes && a->n_blocks == b->n_blocks && a->n_runs == b->n_runs &&
         memcmp(a->runs, b->runs, sizeof(a->runs)) == 0 && a->pins == b->pins &&
         a->owner.pid == b->owner.pid && a->owner.start_ticks == b->owner.start_ticks &&
         a->reserved_ns == b->reserved_ns && a->used_ns == b->used_ns && a->hits == b->hits &&
         same_meta(&a->meta, &b->meta) && memcmp(a->key, b->key, sizeof(a->key)) == 0;
}

static void check_unchanged(const char *call)
{
  take_snapshot(&snap_after);
  CHECK("unchanged", memcmp(&snap_before.c, &snap_after.c, sizeof(snap_after.c)) == 0,
        "%s changed the counters", call);
  CHECK("unchanged", snap_before.l.n == snap_after.l.n, "%s changed the listing: %zu entries, %zu",
        call, snap_before.l.n, snap_after.l.n);
  for (size_t i = 0; i < snap_after.l.n; i++)
    CHECK("unchanged", same_info(&snap_before.l.e[i], &snap_after.l.e[i]),
          "%s changed listed '%.16s'", call, snap_after.l.e[i].key);
}

static void op_claim(struct input *in)
{
  struct dir_ref ref = pick_ref(in);
  int k = entry_by_ref(ref);
  struct dir_entry_info e;
  memset(&e, 0xa5, sizeof(e));
  why_reset();
  int rc = dir_claim(&d, ref, &e, why, why_cap);
  why_after("dir_claim", rc);
  TRACE("claim %u/%u ('%.16s'): %d", ref.slot, ref.gen, k >= 0 ? keys[k] : "stale", rc);
  if (k < 0) {
    CHECK("stale-ref", rc == ECC_ERR_CLOSED, "claim of stale ref %u/%u: %d", ref.slot, ref.gen, rc);
  } else if (m.e[k].state == DIR_STATE_READY) {
    CHECK("claim-ready", rc == ECC_ERR_CLOSED, "claim of published '%.16s': %d, CLOSED documented",
          keys[k], rc);
  } else if (timed_out(k, rc)) {
    return;
  } else if (m.e[k].claimed) {
    CHECK("claim-twice", rc == ECC_ERR_BUSY, "second claim of '%.16s': %d, BUSY documented",
          keys[k], rc);
  } else {
    CHECK("claim", rc == ECC_OK, "claim of reserved '%.16s': %d (%s)", keys[k], rc, why);
    check_info("claimed", &e, k);
    CHECK("pins", e.pins == 0, "claimed reservation '%.16s' with %u pins", keys[k], e.pins);
    m.e[k].claimed = true;
  }
}

/* Gives the claim back: the reservation is an ordinary one again (and may
 * time out). A stale ref names nothing to change. */
static void op_unclaim(struct input *in)
{
  struct dir_ref ref = pick_ref(in);
  int k = entry_by_ref(ref);
  if (k < 0)
    take_snapshot(&snap_before);
  dir_unclaim(&d, ref);
  TRACE("unclaim %u/%u ('%.16s')", ref.slot, ref.gen, k >= 0 ? keys[k] : "stale");
  if (k < 0)
    check_unchanged("dir_unclaim of a stale ref");
  else if (m.e[k].state == DIR_STATE_RESERVED)
    m.e[k].claimed = false;
}

/* The copy into a claimed reservation completed (ok) or failed: published
 * or freed. Nothing but a claimed live reservation can be settled. */
static void op_settle(struct input *in)
{
  struct dir_ref ref = pick_ref(in);
  bool ok = u8(in) % 2 == 1;
  int k = entry_by_ref(ref);
  why_reset();
  int rc = dir_settle(&d, ref, ok, why, why_cap);
  why_after("dir_settle", rc);
  TRACE("settle %u/%u ('%.16s'), copy %s: %d", ref.slot, ref.gen, k >= 0 ? keys[k] : "stale",
        ok ? "done" : "failed", rc);
  if (k < 0) {
    CHECK("stale-ref", rc == ECC_ERR_CLOSED, "settle of stale ref %u/%u: %d", ref.slot, ref.gen,
          rc);
  } else if (!m.e[k].claimed) {
    CHECK("settle-unclaimed", rc == ECC_ERR_CLOSED, "settle of %s '%.16s': %d, CLOSED documented",
          m.e[k].state == DIR_STATE_READY ? "published" : "unclaimed", keys[k], rc);
  } else if (!timed_out(k, rc)) {
    CHECK("settle", rc == ECC_OK, "settle of claimed '%.16s': %d (%s)", keys[k], rc, why);
    m.e[k].claimed = false;
    if (ok) {
      m.e[k].state = DIR_STATE_READY; /* lookups find it from now on */
      expect_ev(ECC_EVENT_STORED, k);
    } else {
      drop_entry(k); /* a failed copy: never stored, nothing to tell */
    }
  }
}

/* ---- lookup, unpin, check_pinned ---------------------------------------- */

struct lookup_call {
  size_t n;
  uint32_t ranks;
  int k[4];
  const char *keys[4];
  bool found[4];
  struct dir_entry_info info[4];
  struct dir_pin_ref pins[4];
  size_t hits;   /* keys the model says are ready */
  uint64_t cost; /* what hits on them would save */
  bool bad;      /* an invalid key among them */
};

static void lookup_slack(const struct lookup_call *c)
{
  m.slack[C_LOOKUPS] = c->n;
  m.slack[C_HITS] = c->hits;
  m.slack[C_MISSES] = c->n;
  m.slack[C_PINS] = c->hits;
  m.slack[C_ENCODER_US] = c->cost;
}

static bool all_zero(const void *p, size_t n)
{
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0)
      return false;
  return true;
}

/* A pin the call handed out on entry k, for `ranks` releases. */
static void add_pin(int k, struct dir_pin_ref pin, uint32_t ranks)
{
  check_fresh_ref(pin.slot, pin.gen, m.max_pins, m.pin_seen, m.pin_gen, "pin");
  CHECK("pins", pin_by_ref(pin) < 0, "pin %u/%u handed out twice", pin.slot, pin.gen);
  for (uint32_t s = 0; s < MODEL_PINS; s++) {
    if (!m.pins[s].live) {
      m.pins[s] = (struct mpin){true, pin, k, ranks};
      m.e[k].pins++;
      remember_pin(pin);
      return;
    }
  }
  FAIL("pins", "more live pins than %u", MODEL_PINS);
}

static void lookup_hit(struct lookup_call *c, size_t i, uint32_t pins_before)
{
  int k = c->k[i];
  model_hit(k);
  check_info("looked up", &c->info[i], k);
  CHECK("time", c->info[i].used_ns >= call_t0, "'%.16s' looked up, used_ns %llu before the call",
        keys[k], (unsigned long long)c->info[i].used_ns);
  /* Its own pin may be counted; pins timed out may be gone. */
  CHECK("pins",
        (c->info[i].pins >= pins_before || m.tiny_pin) && c->info[i].pins <= pins_before + c->hits,
        "looked-up '%.16s' with %u pins, %u before", keys[k], c->info[i].pins, pins_before);
  add_pin(k, c->pins[i], c->ranks);
}

static void lookup_ok(struct lookup_call *c)
{
  uint32_t before[NKEYS];
  for (int k = 0; k < NKEYS; k++)
    before[k] = m.e[k].pins;
  for (size_t i = 0; i < c->n; i++) {
    bool want = c->k[i] >= 0 && m.e[c->k[i]].live && m.e[c->k[i]].state == DIR_STATE_READY;
    uint8_t found; /* read as a byte: the call may have left it unwritten */
    memcpy(&found, &c->found[i], 1);
    CHECK("lookup", found == want, "lookup of '%.16s' (state %d): found byte %u", c->keys[i],
          c->k[i] >= 0 ? m.e[c->k[i]].state : -1, found);
    if (want) {
      lookup_hit(c, i, before[c->k[i]]);
    } else {
      CHECK("lookup",
            all_zero(&c->info[i], sizeof(c->info[i])) && all_zero(&c->pins[i], sizeof(c->pins[i])),
            "lookup miss of '%.16s' left info or pin set", c->keys[i]);
    }
  }
  m.mono[C_LOOKUPS] += c->n;
  m.mono[C_HITS] += c->hits;
  m.mono[C_MISSES] += c->n - c->hits;
  m.mono[C_PINS] += c->hits;
}

static void pick_lookup(struct input *in, struct lookup_call *c)
{
  memset(c, 0xa5, sizeof(*c));
  c->n = 1 + u8(in) % 4;
  c->ranks = u8(in) % 16 == 0 ? 0 : 1 + u8(in) % 3;
  c->hits = 0;
  c->cost = 0;
  c->bad = false;
  for (size_t i = 0; i < c->n; i++) {
    c->keys[i] = pick_key(in, &c->k[i]);
    c->bad = c->bad || c->k[i] < 0;
    if (c->k[i] >= 0 && m.e[c->k[i]].live && m.e[c->k[i]].state == DIR_STATE_READY) {
      c->hits++;
      c->cost += m.e[c->k[i]].meta.cost_us;
    }
  }
}

static void op_lookup(struct input *in)
{
  struct lookup_call c;
  pick_lookup(in, &c);
  uint32_t free_pins = m.max_pins - live_pins();
  why_reset();
  call_t0 = now_ns();
  int rc = dir_lookup(&d, c.keys, c.n, c.ranks, c.found, c.info, c.pins, why, why_cap);
  call_t1 = now_ns();
  for (size_t i = 0; i < c.n && rc != ECC_OK; i++)
    if (c.k[i] >= 0 && m.e[c.k[i]].live)
      may_use(c.k[i]); /* a refused lookup may have marked them all the same */
  why_after("dir_lookup", rc);
  for (size_t i = 0; i < c.n; i++)
    TRACE("lookup [%zu/%zu] '%.16s' for %u ranks: %d, found %u, pin %u/%u", i, c.n, c.keys[i],
          c.ranks, rc, rc == ECC_OK ? (unsigned)c.found[i] : 0u, c.pins[i].slot, c.pins[i].gen);
  if (c.ranks == 0) {
    lookup_slack(&c);
    CHECK_SOFT("ranks-zero", rc == ECC_ERR_INVALID, "lookup for 0 ranks: %d", rc);
    return;
  }
  if (c.bad && rc == ECC_ERR_INVALID) {
    lookup_slack(&c);
    return;
  }
  if (c.hits > free_pins && !(m.tiny_pin && rc == ECC_OK && c.hits <= m.max_pins)) {
    /* A lookup short of pins counts nothing. */
    CHECK("lookup-busy", rc == ECC_ERR_BUSY, "lookup of %zu ready keys, %u pin slots free: %d",
          c.hits, free_pins, rc);
    return;
  }
  CHECK("lookup", rc == ECC_OK, "lookup of %zu keys (%zu ready, %u pin slots free): %d (%s)", c.n,
        c.hits, free_pins, rc, why);
  lookup_ok(&c);
}

/* As timed_out, for a pin: CLOSED is believed only if it stays so. */
static bool timed_out_pin(uint32_t i, int rc)
{
  if (!m.tiny_pin || rc != ECC_ERR_CLOSED)
    return false;
  CHECK("reclaim", !pin_alive(i), "pin %u/%u refused CLOSED but still live", m.pins[i].ref.slot,
        m.pins[i].ref.gen);
  return true;
}

static void op_unpin(struct input *in)
{
  struct dir_pin_ref pin = pick_pin(in);
  int i = pin_by_ref(pin);
  why_reset();
  int rc = dir_unpin(&d, pin, why, why_cap);
  why_after("dir_unpin", rc);
  TRACE("unpin %u/%u ('%.16s'): %d", pin.slot, pin.gen, i >= 0 ? keys[m.pins[i].key] : "stale", rc);
  if (i < 0) {
    CHECK("stale-pin", rc == ECC_ERR_CLOSED, "unpin of stale pin %u/%u: %d", pin.slot, pin.gen, rc);
    return;
  }
  if (timed_out_pin((uint32_t)i, rc))
    return;
  CHECK("unpin", rc == ECC_OK, "unpin of live pin %u/%u: %d (%s)", pin.slot, pin.gen, rc, why);
  if (--m.pins[i].left == 0)
    drop_pin((uint32_t)i);
}

/* Several releases at once: 0 is refused and changes nothing, more than are
 * left free the pin (as a peer's whole count does when it goes away). */
static void op_unpin_ranks(struct input *in)
{
  struct dir_pin_ref pin = pick_pin(in);
  uint8_t mode = u8(in) % 8;
  uint32_t ranks = mode == 0 ? 0 : mode == 1 ? UINT32_MAX : 1 + u8(in) % 4;
  int i = pin_by_ref(pin);
  if (ranks == 0)
    take_snapshot(&snap_before);
  why_reset();
  int rc = dir_unpin_ranks(&d, pin, ranks, why, why_cap);
  why_after("dir_unpin_ranks", rc);
  TRACE("unpin %u ranks of %u/%u ('%.16s'): %d", ranks, pin.slot, pin.gen,
        i >= 0 ? keys[m.pins[i].key] : "stale", rc);
  if (ranks == 0) {
    CHECK("unpin-ranks", rc == ECC_ERR_INVALID, "unpin of 0 ranks: %d, INVALID documented", rc);
    check_unchanged("dir_unpin_ranks of 0 ranks");
    return;
  }
  if (i < 0) {
    CHECK("stale-pin", rc == ECC_ERR_CLOSED, "unpin of %u ranks of stale pin %u/%u: %d", ranks,
          pin.slot, pin.gen, rc);
    return;
  }
  if (timed_out_pin((uint32_t)i, rc))
    return;
  CHECK("unpin-ranks", rc == ECC_OK, "unpin of %u ranks of live pin %u/%u: %d (%s)", ranks,
        pin.slot, pin.gen, rc, why);
  if (m.pins[i].left > ranks)
    m.pins[i].left -= ranks;
  else
    drop_pin((uint32_t)i);
}

static bool blocks_in_entry(const struct mentry *x, uint32_t first, uint32_t count)
{
  if (count > UINT32_MAX - first)
    return false;
  for (uint32_t b = first; b < first + count; b++) {
    bool in = false;
    for (uint32_t r = 0; r < x->n_runs && !in; r++)
      in = b >= x->runs[r].first && b - x->runs[r].first < x->runs[r].count;
    if (!in)
      return false;
  }
  return true;
}

static void pick_range(struct input *in, const struct mentry *x, uint32_t *first, uint32_t *count)
{
  uint8_t mode = u8(in) % 8;
  if (mode < 3 && x != NULL) {
    const struct dir_run *run = &x->runs[u8(in) % x->n_runs];
    uint32_t off = u8(in) % run->count;
    *first = run->first + off;
    *count = mode == 2 ? run->count - off + 1 : 1 + u8(in) % (run->count - off);
  } else if (mode == 3) {
    *first = UINT32_MAX - u8(in);
    *count = 1 + u8(in); /* past 2^32 */
  } else if (mode == 4) {
    *first = u8(in) % m.p.num_blocks;
    *count = 0;
  } else {
    *first = u16(in) % (m.p.num_blocks + 8);
    *count = 1 + u8(in) % 16;
  }
}

static void op_check_pinned(struct input *in)
{
  struct dir_pin_ref pin = pick_pin(in);
  int i = pin_by_ref(pin);
  const struct mentry *x = i >= 0 ? &m.e[m.pins[i].key] : NULL;
  uint32_t first, count;
  pick_range(in, x, &first, &count);
  why_reset();
  int rc = dir_check_pinned(&d, pin, first, count, why, why_cap);
  why_after("dir_check_pinned", rc);
  TRACE("check_pinned %u/%u [%u, +%u): %d", pin.slot, pin.gen, first, count, rc);
  if (x == NULL) {
    CHECK("stale-pin", rc == ECC_ERR_CLOSED, "check_pinned with stale pin %u/%u: %d", pin.slot,
          pin.gen, rc);
  } else if (timed_out_pin((uint32_t)i, rc)) {
    return;
  } else if (count == 0) {
    CHECK("check-pinned", rc == ECC_ERR_RANGE, "check_pinned of no blocks: %d, RANGE documented",
          rc);
  } else {
    int want = blocks_in_entry(x, first, count) ? ECC_OK : ECC_ERR_RANGE;
    CHECK("check-pinned", rc == want, "check_pinned [%u, +%u) of '%.16s': %d, want %d", first,
          count, keys[m.pins[i].key], rc, want);
  }
}

/* ---- pinned, blocks_held: what a load and a copy ask of the directory ---- */

/* The entry a live pin holds, for a load: told without changing anything
 * (not even the used time a lookup sets). */
static void op_pinned(struct input *in)
{
  struct dir_pin_ref pin = pick_pin(in);
  int i = pin_by_ref(pin);
  struct dir_entry_info e;
  memset(&e, 0xa5, sizeof(e));
  take_snapshot(&snap_before);
  why_reset();
  int rc = dir_pinned(&d, pin, &e, why, why_cap);
  why_after("dir_pinned", rc);
  TRACE("pinned %u/%u ('%.16s'): %d", pin.slot, pin.gen, i >= 0 ? keys[m.pins[i].key] : "stale",
        rc);
  check_unchanged("dir_pinned");
  if (i < 0) {
    CHECK("stale-pin", rc == ECC_ERR_CLOSED, "dir_pinned of stale pin %u/%u: %d", pin.slot, pin.gen,
          rc);
    return;
  }
  int k = m.pins[i].key;
  /* Nothing reclaims between the check after the last call and this one,
   * and it changes nothing: the pin the model holds is live. */
  CHECK("pinned", rc == ECC_OK, "dir_pinned of live pin %u/%u on '%.16s': %d (%s)", pin.slot,
        pin.gen, keys[k], rc, why);
  check_info("pinned", &e, k);
  CHECK("pinned", e.pins == m.e[k].pins, "dir_pinned: '%.16s' with %u pins, model %u", keys[k],
        e.pins, m.e[k].pins);
}

#define MAX_IDS 12

struct held_call {
  uint32_t ids[MAX_IDS];
  uint32_t n;
  bool pinned;
};

/* Whether entry k holds its blocks as `pinned` asks: a live reservation
 * (claimed or not), or a ready entry with a live pin. */
static bool holds(int k, bool pinned)
{
  if (k < 0 || !m.e[k].live)
    return false;
  if (pinned)
    return m.e[k].state == DIR_STATE_READY && m.e[k].pins > 0;
  return m.e[k].state == DIR_STATE_RESERVED;
}

/* A live key at or after v (cyclically) other than `skip`, or -1. */
static int live_key_from(uint8_t v, int skip)
{
  for (int i = 0; i < NKEYS; i++) {
    int k = (v + i) % NKEYS;
    if (m.e[k].live && k != skip)
      return k;
  }
  return -1;
}

static uint32_t block_of(struct input *in, int k)
{
  const struct dir_run *run = &m.e[k].runs[u8(in) % m.e[k].n_runs];
  return run->first + u8(in) % run->count;
}

/* A free block at or after a picked one, or the picked one if none is. */
static uint32_t free_block(struct input *in, const int *owner)
{
  uint32_t b0 = u8(in) % m.p.num_blocks;
  for (uint32_t i = 0; i < m.p.num_blocks; i++)
    if (owner[(b0 + i) % m.p.num_blocks] < 0)
      return (b0 + i) % m.p.num_blocks;
  return b0;
}

/* Mostly blocks of one entry, asked as its state suggests, mixed with free
 * blocks, blocks of other entries and ids past the region. */
static void pick_held(struct input *in, struct held_call *c)
{
  int owner[MAX_BLOCKS];
  owner_map(owner);
  int k = live_key_from(u8(in), -1);
  uint8_t mode = u8(in);
  c->pinned = mode % 4 == 0 ? mode / 4 % 2 == 1 : k >= 0 && m.e[k].state == DIR_STATE_READY;
  c->n = u8(in) % (MAX_IDS + 1);
  for (uint32_t i = 0; i < c->n; i++) {
    uint8_t what = u8(in) % 8;
    int other = what == 6 ? live_key_from(u8(in), k) : -1;
    if (what < 5 && k >= 0)
      c->ids[i] = block_of(in, k);
    else if (other >= 0)
      c->ids[i] = block_of(in, other);
    else if (what == 7)
      c->ids[i] = u8(in) % 2 ? m.p.num_blocks + u8(in) : UINT32_MAX - u8(in);
    else
      c->ids[i] = free_block(in, owner);
  }
}

/* The index of the first id the model says is not held, or -1. */
static int first_not_held(const struct held_call *c)
{
  int owner[MAX_BLOCKS];
  owner_map(owner);
  for (uint32_t i = 0; i < c->n; i++)
    if (c->ids[i] >= m.p.num_blocks || !holds(owner[c->ids[i]], c->pinned))
      return (int)i;
  return -1;
}

/* The call named as not held an id before the model's first (of all, if
 * the model has none): right only if what held it may have gone before
 * the call looked, a reservation timed out or all the pins of a ready
 * entry, and has. */
static bool hold_went(const struct held_call *c, int want, uint32_t bad)
{
  int owner[MAX_BLOCKS], key_of[LIST_CAP];
  uint32_t end = want < 0 ? c->n : (uint32_t)want, j = 0;
  while (j < end && c->ids[j] != bad)
    j++;
  if (j == end)
    return false; /* not an id before the model's first */
  owner_map(owner);
  int k = owner[bad];
  if (!c->pinned) {
    if (!may_time_out(&m.e[k]))
      return false;
    take_listing(key_of);
    return !listed_key[k]; /* the listing after the call learns it */
  }
  if (!m.tiny_pin)
    return false;
  for (uint32_t i = 0; i < MODEL_PINS; i++)
    if (m.pins[i].live && m.pins[i].key == k && pin_alive(i))
      return false;
  return true;
}

static void trace_ids(const struct held_call *c, int rc, uint32_t bad)
{
  char list[MAX_IDS * 12 + 1] = "";
  size_t len = 0;
  if (!tracing)
    return;
  for (uint32_t i = 0; i < c->n; i++)
    len += (size_t)snprintf(list + len, sizeof(list) - len, " %u", c->ids[i]);
  TRACE("blocks_held%s (%s): %d, bad %u", list, c->pinned ? "pinned" : "reserved", rc,
        rc == ECC_OK ? 0u : bad);
}

static void op_blocks_held(struct input *in)
{
  struct held_call c;
  uint32_t bad = 0xa5a5a5a5u;
  pick_held(in, &c);
  int want = first_not_held(&c);
  int rc = dir_blocks_held(&d, c.ids, c.n, c.pinned, &bad);
  trace_ids(&c, rc, bad);
  if (rc == ECC_OK && want < 0)
    return;
  if (rc == ECC_ERR_RANGE && want >= 0 && bad == c.ids[want])
    return;
  if (rc == ECC_ERR_RANGE && hold_went(&c, want, bad))
    return;
  if (want < 0)
    FAIL("blocks-held", "%u ids asked %s, all held in the model: %d, bad %u", c.n,
         c.pinned ? "pinned" : "reserved", rc, bad);
  FAIL("blocks-held", "%u ids asked %s: %d, bad %u; the model's first not held is id %u (#%d)", c.n,
       c.pinned ? "pinned" : "reserved", rc, rc == ECC_OK ? 0u : bad, c.ids[want], want);
}

/* ---- remove, attach, identity ------------------------------------------- */

/* Where timeouts pass at once, a reservation may be gone (RANGE), and a
 * pinned entry's pins may all be (the entry removed). */
static bool removed_late(int k, int rc)
{
  int key_of[LIST_CAP];
  const struct mentry *x = &m.e[k];
  if (rc == ECC_ERR_RANGE && may_time_out(x)) {
    take_listing(key_of);
    return !listed_key[k];
  }
  if (rc != ECC_OK || x->state != DIR_STATE_READY || !m.tiny_pin)
    return false;
  for (uint32_t i = 0; i < MODEL_PINS; i++) {
    if (m.pins[i].live && m.pins[i].key == k) {
      CHECK("remove", !pin_alive(i), "removed '%.16s' with a live pin %u/%u", keys[k],
            m.pins[i].ref.slot, m.pins[i].ref.gen);
      reclaimed_pin(i);
    }
  }
  return true;
}

static void op_remove(struct input *in)
{
  int k;
  const char *key = pick_key(in, &k);
  why_reset();
  int rc = dir_remove(&d, key, why, why_cap);
  why_after("dir_remove", rc);
  TRACE("remove '%.16s': %d", key, rc);
  if (k < 0) {
    CHECK("invalid", rc == ECC_ERR_INVALID || rc == ECC_ERR_RANGE, "remove of a %zu-byte key: %d",
          strlen(key), rc);
    return;
  }
  const struct mentry *x = &m.e[k];
  int want = !x->live                                     ? ECC_ERR_RANGE
             : x->state != DIR_STATE_READY || x->pins > 0 ? ECC_ERR_BUSY
                                                          : ECC_OK;
  if (rc != want && !removed_late(k, rc))
    FAIL("remove", "remove of '%.16s' (live %d, state %d, %u pins): %d, want %d", keys[k], x->live,
         x->state, x->pins, rc, want);
  if (rc == ECC_OK) {
    expect_ev(ECC_EVENT_REMOVED, k);
    drop_entry(k);
    m.mono[C_REMOVALS]++;
  }
}

/* Another view of the same directory, or one whose parameters differ. */
static void op_attach(struct input *in)
{
  uint8_t mode = u8(in) % 4;
  struct dir_params p = m.p;
  size_t bytes = mem_bytes;
  struct dir other;
  if (mode == 1)
    p.num_blocks++;
  else if (mode == 2)
    p.block_size++;
  else if (mode == 3)
    bytes -= 1 + u8(in) % 64; /* a directory is far larger */
  memset(&other, 0, sizeof(other));
  why_reset();
  int rc = dir_attach(&other, mem, bytes, &p, why, why_cap);
  why_after("dir_attach", rc);
  TRACE("attach (mode %u, %zu bytes): %d", mode, bytes, rc);
  if (mode == 0) {
    CHECK("attach", rc == ECC_OK, "attach with the format's parameters: %d (%s)", rc, why);
    CHECK("attach", other.self.pid == getpid(), "attached as pid %d", other.self.pid);
    d = other;
  } else if (mode < 3) {
    CHECK("attach", rc == ECC_ERR_REGION, "attach with other parameters: %d", rc);
  } else {
    CHECK_SOFT("attach-short", rc == ECC_ERR_REGION || rc == ECC_ERR_INVALID,
               "attach to %zu of %zu bytes: %d", bytes, mem_bytes, rc);
  }
}

/* Every owner here is alive: only timeouts free anything. */
static void op_reclaim(void)
{
  uint32_t freed = 12345;
  why_reset();
  int rc = dir_reclaim(&d, &freed, why, why_cap);
  why_after("dir_reclaim", rc);
  TRACE("reclaim: %d, %u freed", rc, freed);
  CHECK("reclaim", rc == ECC_OK, "reclaim: %d (%s)", rc, why);
  m.check_freed = true; /* against what the listing after it finds gone */
  m.freed = freed;
}

/* ---- a thread that dies holding the lock ---------------------------------- */

static void exit_in_callback(void *user, const struct dir_entry_info *e)
{
  (void)user;
  (void)e;
  pthread_exit(NULL); /* inside dir_list, under the lock */
}

static void *list_and_die(void *arg)
{
  (void)arg;
  dir_list(&d, exit_in_callback, NULL);
  return NULL;
}

/* The robust lock's owner is a thread: its death is not this process's,
 * which lives on, so the rebuild the next call makes must keep this
 * process's reservations and pins (the header frees only those of
 * processes that are gone). */
static void op_thread_death(void)
{
  pthread_t t;
  int key_of[LIST_CAP];
  if (live_entries() == 0)
    return; /* the callback would not run */
  CHECK("thread", pthread_create(&t, NULL, list_and_die, NULL) == 0, "pthread_create failed");
  CHECK("thread", pthread_join(t, NULL) == 0, "pthread_join failed");
  TRACE("a thread died inside dir_list");
  m.mono[C_RECOVERIES]++;
  if (relaxed("thread-death")) {
    /* The process may count as dead from now on, as if every timeout were
     * 1 ns: the listing after this call learns what went. */
    m.tiny_res = m.tiny_pin = m.self_dead = true;
    return;
  }
  m.thread_died = true;
  thread_death_op = op_index;
  take_listing(key_of); /* the first call after the death rebuilds */
  /* The first key whose reservation or pins went, timeouts aside. */
  int lost = -1;
  for (int k = 0; k < NKEYS; k++)
    if (lost < 0 && m.e[k].live && !listed_key[k] && !m.tiny_res)
      lost = k;
  for (size_t i = 0; i < listed_now.n; i++)
    if (lost < 0 && listed_now.e[i].pins != m.e[key_of[i]].pins && !m.tiny_pin)
      lost = key_of[i];
  if (lost < 0)
    return;
  FAIL("thread-death",
       "after a thread of this live process died holding the lock, the rebuild freed '%.16s' "
       "(state %d, %u pins): this process's reservations and pins are not a dead one's",
       keys[lost], m.e[lost].state, m.e[lost].pins);
}

/* A rebuild of whole tables changes nothing but the count of rebuilds
 * (what a timeout frees meanwhile is learned as ever). */
static void op_rebuild(void)
{
  why_reset();
  int rc = dir_rebuild(&d, why, why_cap);
  why_after("dir_rebuild", rc);
  TRACE("rebuild: %d", rc);
  CHECK("rebuild", rc == ECC_OK, "dir_rebuild: %d (%s)", rc, why);
  m.mono[C_RECOVERIES]++;
}

/* The region made again in the same memory (its last holder gone, its file
 * removed and created anew): a new instance id, every slot's generations
 * drawn afresh. The model empties but keeps the refs and pins it handed
 * out, so that later calls offer refs of the earlier format, which must
 * name nothing now; the view attached to the earlier format is refused. */
static void op_reformat(void)
{
  struct dir old = d;
  struct model keep = m;
  why_reset();
  int rc = dir_format(mem, mem_bytes, &m.p, why, why_cap);
  why_after("dir_format", rc);
  CHECK("format", rc == ECC_OK, "dir_format again: %d (%s)", rc, why);
  why_reset();
  rc = dir_attach(&d, mem, mem_bytes, &m.p, why, why_cap);
  why_after("dir_attach", rc);
  CHECK("attach", rc == ECC_OK, "dir_attach after a new format: %d (%s)", rc, why);
  TRACE("format again: instance %016llx, was %016llx", (unsigned long long)dir_instance(&d),
        (unsigned long long)dir_instance(&old));
  CHECK("instance", dir_instance(&d) != dir_instance(&old) && dir_instance(&d) != 0,
        "a new format kept instance %016llx", (unsigned long long)dir_instance(&d));
  memset(&m, 0, sizeof(m));
  m.p = keep.p;
  m.max_entries = keep.max_entries;
  m.max_pins = keep.max_pins;
  m.tiny_res = keep.tiny_res;
  m.tiny_pin = keep.tiny_pin;
  m.self_dead = keep.self_dead;
  ev_reset(); /* a new ring: its first read is from cursor 0 again */
  memcpy(m.refs, keep.refs, sizeof(m.refs));
  m.n_refs = keep.n_refs;
  memcpy(m.pin_refs, keep.pin_refs, sizeof(m.pin_refs));
  m.n_pin_refs = keep.n_pin_refs;
  thread_death_op = -1;
  const char *key = keys[0];
  bool found;
  struct dir_pin_ref pin;
  why_reset();
  rc = dir_lookup(&old, &key, 1, 1, &found, NULL, &pin, why, why_cap);
  why_after("dir_lookup", rc);
  CHECK("reformat", rc == ECC_ERR_REGION,
        "a view of the earlier format looked up through the new one: %d", rc);
}

static void op_identity(void)
{
  struct dir_owner me;
  memset(&me, 0, sizeof(me));
  CHECK("owner", dir_owner_self(&me) == ECC_OK, "dir_owner_self failed");
  CHECK("owner", me.pid == getpid() && me.pid == d.self.pid && me.start_ticks == d.self.start_ticks,
        "dir_owner_self says %d/%llu, the view %d/%llu", me.pid, (unsigned long long)me.start_ticks,
        d.self.pid, (unsigned long long)d.self.start_ticks);
}

/* ---- a lock held past the timeout ------------------------------------------ */

/* A thread of this process holds the lock inside dir_list until told to go
 * on: as a process stopped inside a call would, but one this process can
 * release. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static int hold_state; /* 0 starting, 1 holding, 2 told to go on */

static void hold_in_callback(void *user, const struct dir_entry_info *e)
{
  bool *once = user;
  (void)e;
  if (*once)
    return;
  *once = true;
  pthread_mutex_lock(&hold_mu);
  hold_state = 1;
  pthread_cond_broadcast(&hold_cv);
  while (hold_state != 2)
    pthread_cond_wait(&hold_cv, &hold_mu);
  pthread_mutex_unlock(&hold_mu);
}

static void *list_and_hold(void *arg)
{
  bool once = false;
  (void)arg;
  dir_list(&d, hold_in_callback, &once);
  return NULL;
}

static void hold_set(int state)
{
  pthread_mutex_lock(&hold_mu);
  hold_state = state;
  pthread_cond_broadcast(&hold_cv);
  pthread_mutex_unlock(&hold_mu);
}

/* One call while the lock is held, by its pick: all of them wait out the
 * timeout and refuse. */
static int call_while_held(struct input *in, char *text, size_t cap)
{
  int outcome;
  struct dir_entry_info e;
  struct dir_counters c;
  struct listing l = {.n = 0};
  struct lookup_call lc;
  struct dir_peeked peeked;
  struct dir_pin_ref pin;
  const char *key = keys[u8(in) % NKEYS];
  switch (u8(in) % 10) {
  case 8:
    return dir_peek(&d, &key, 1, &peeked, text, cap);
  case 9:
    return dir_wait(&d, key, u8(in) % 2, 0, &outcome, &e, &pin, text, cap);
  case 0:
    pick_lookup(in, &lc);
    for (size_t i = 0; i < lc.n; i++)
      if (lc.k[i] < 0)
        lc.keys[i] = keys[0]; /* an invalid one is refused before the lock */
    return dir_lookup(&d, lc.keys, lc.n, 1, lc.found, lc.info, lc.pins, text, cap);
  case 1:
    return dir_reserve(&d, keys[u8(in) % NKEYS], 1, &outcome, &e, text, cap);
  case 2:
    return dir_unpin(&d, pick_pin(in), text, cap);
  case 3:
    return dir_publish(&d, pick_ref(in), text, cap);
  case 4:
    return dir_check(&d, text, cap);
  case 5:
    return dir_get_counters(&d, &c);
  case 6:
    return dir_list(&d, list_one, &l);
  default:
    return dir_remove(&d, keys[u8(in) % NKEYS], text, cap);
  }
}

/* Once per input: each waits out the timeout, which would otherwise be
 * most of the time an input takes. */
static bool lock_held_done;

static void op_lock_held(struct input *in)
{
  pthread_t t;
  char text[512] = "", pid_text[48];
  if (live_entries() == 0 || lock_held_done)
    return; /* with no entry the callback would not run */
  lock_held_done = true;
  take_snapshot(&snap_before);
  hold_state = 0;
  CHECK("thread", pthread_create(&t, NULL, list_and_hold, NULL) == 0, "pthread_create failed");
  pthread_mutex_lock(&hold_mu);
  while (hold_state != 1)
    pthread_cond_wait(&hold_cv, &hold_mu);
  pthread_mutex_unlock(&hold_mu);
  uint64_t t0 = now_ns();
  int rc = call_while_held(in, text, sizeof(text));
  uint64_t waited = now_ns() - t0;
  /* A reader of the event ring takes no lock: it reads at once. */
  struct dir_event ev[4];
  uint64_t cursor = 0;
  size_t n_ev = 0;
  int ev_rc = dir_events(&d, &cursor, ev, 4, &n_ev, NULL);
  hold_set(2);
  CHECK("events-lockless", ev_rc == ECC_OK, "dir_events under a held lock: %d", ev_rc);
  CHECK("thread", pthread_join(t, NULL) == 0, "pthread_join failed");
  TRACE("a call while a thread holds the lock: %d after %llu us (%s)", rc,
        (unsigned long long)(waited / 1000u), text);
  CHECK("lock-timeout", rc == ECC_ERR_BUSY, "a call under a held lock: %d, BUSY documented", rc);
  CHECK("lock-timeout", waited >= m.p.lock_timeout_ns,
        "a call under a held lock gave up after %llu ns, the timeout is %llu",
        (unsigned long long)waited, (unsigned long long)m.p.lock_timeout_ns);
  snprintf(pid_text, sizeof(pid_text), "pid %d (this process)", (int)getpid());
  CHECK("lock-timeout", text[0] == '\0' || strstr(text, pid_text) != NULL,
        "the refusal does not name '%s': %s", pid_text, text);
  check_unchanged("a call refused for a held lock");
}

/* ---- damaged tables -------------------------------------------------------- */

/* Every code a call may give on damaged tables: the closed set's directory
 * codes, never a crash, a hang or a code outside them. */
static void check_damaged_rc(const char *call, int rc)
{
  CHECK("damaged",
        rc == ECC_OK || rc == ECC_ERR_INVALID || rc == ECC_ERR_RANGE || rc == ECC_ERR_BUSY ||
            rc == ECC_ERR_CLOSED || rc == ECC_ERR_REGION,
        "%s on damaged tables: %d", call, rc);
}

/* The ring read from any cursor whatever its records hold: every event
 * returned is whole (a known kind, a terminated key) and later than the
 * one before, and the cursor ends past the last. */
static int damaged_events(struct input *in)
{
  struct dir_event out[8];
  uint64_t cursor = u8(in) % 2 == 0 ? 0 : u32(in), lost = 0, last = 0;
  size_t cap = u8(in) % 9, n = 99;
  int rc = dir_events(&d, &cursor, cap > 0 ? out : NULL, cap, &n, &lost);
  CHECK("damaged", rc != ECC_OK || n <= cap, "dir_events returned %zu into room for %zu", n, cap);
  for (size_t i = 0; rc == ECC_OK && i < n; i++) {
    CHECK("damaged",
          out[i].kind >= ECC_EVENT_STORED && out[i].kind <= ECC_EVENT_RECLAIMED &&
              memchr(out[i].key, '\0', sizeof(out[i].key)) != NULL && out[i].seq > last &&
              out[i].seq < cursor,
          "event %zu read from a damaged ring: kind %u, seq %llu after %llu, cursor %llu", i,
          out[i].kind, (unsigned long long)out[i].seq, (unsigned long long)last,
          (unsigned long long)cursor);
    last = out[i].seq;
  }
  return rc;
}

/* One call on damaged tables, by its pick. */
static void damaged_call(struct input *in)
{
  int k, outcome;
  struct dir_entry_info e;
  struct lookup_call lc;
  struct dir_counters c;
  struct listing l = {.n = 0};
  uint32_t ids[4], bad, freed, n_held;
  struct dir_pin_ref held[4];
  uint8_t which = u8(in) % 14;
  bool has_why = which < 8 || which == 11 || which == 13;
  why_reset();
  int rc;
  switch (which) {
  case 12:
    rc = damaged_events(in);
    break;
  case 0:
    rc = dir_reserve(&d, pick_key(in, &k), pick_nbytes(in), &outcome, &e, why, why_cap);
    break;
  case 1:
    rc = u8(in) % 2 ? dir_publish(&d, pick_ref(in), why, why_cap)
                    : dir_abort(&d, pick_ref(in), why, why_cap);
    break;
  case 2:
    pick_lookup(in, &lc);
    rc = dir_lookup(&d, lc.keys, lc.n, lc.ranks, lc.found, lc.info, lc.pins, why, why_cap);
    break;
  case 3:
    rc = dir_unpin_ranks(&d, pick_pin(in), 1 + u8(in) % 3, why, why_cap);
    break;
  case 4:
    rc = dir_pinned(&d, pick_pin(in), &e, why, why_cap);
    break;
  case 5:
    rc = dir_check_pinned(&d, pick_pin(in), u8(in) % (m.p.num_blocks + 2), 1 + u8(in) % 4, why,
                          why_cap);
    break;
  case 6:
    rc = dir_remove(&d, pick_key(in, &k), why, why_cap);
    break;
  case 7:
    rc = dir_claim(&d, pick_ref(in), &e, why, why_cap);
    if (rc == ECC_OK)
      rc = dir_settle(&d, e.ref, u8(in) % 2, why, why_cap);
    break;
  case 8:
    for (int i = 0; i < 4; i++)
      ids[i] = u16(in) % (m.p.num_blocks + 4);
    rc = dir_blocks_held(&d, ids, 4, u8(in) % 2, &bad);
    why[0] = '\0';
    break;
  case 9:
    rc = dir_list(&d, list_one, &l);
    why[0] = '\0';
    break;
  case 10:
    rc = dir_get_counters(&d, &c);
    why[0] = '\0';
    break;
  case 11: /* a load's hold taken and given back, as the connector does */
    for (int i = 0; i < 4; i++)
      ids[i] = u16(in) % (m.p.num_blocks + 4);
    rc = dir_hold_blocks(&d, ids, 4, held, &n_held, &bad, why, why_cap);
    if (rc == ECC_OK)
      rc = dir_unpin_all(&d, held, n_held, why, why_cap);
    break;
  default:
    rc = dir_reclaim(&d, &freed, why, why_cap);
    break;
  }
  if (has_why)
    why_after("a call on damaged tables", rc);
  TRACE("  call %u on damaged tables: %d", which, rc);
  check_damaged_rc("a call", rc);
}

#define FOUND_MAX 256u /* above any max_entries a fuzz input makes (64) */

/* Where a live entry's runs lie in the shared memory: found by its key's
 * bytes, which follow a slot's runs, and its first run. Free slots that
 * once held the same entry match too: all of them are returned. */
static size_t runs_of_key(int k, struct dir_run **found, size_t cap)
{
  size_t len = strlen(keys[k]) + 1, before = DIR_MAX_RUNS * sizeof(struct dir_run), n = 0;
  const struct dir_shape *shape = mem;
  char *base = mem;
  for (size_t at = shape->off_entries + before; at + len <= shape->off_pins && n < cap; at += 4) {
    if (memcmp(base + at, keys[k], len) != 0)
      continue;
    struct dir_run *runs = (struct dir_run *)(void *)(base + at - before);
    if (runs[0].first == m.e[k].runs[0].first && runs[0].count == m.e[k].runs[0].count)
      found[n++] = runs;
  }
  return n;
}

/* A live entry's run sent outside the region: the call that meets it first
 * is refused by name. */
static void damage_runs(struct input *in)
{
  /* Room for every slot: free slots that once held the key match too, and
   * a cap below their number could leave the live one unfound. */
  static struct dir_run *found[FOUND_MAX];
  int k = live_key_from(u8(in), -1);
  if (k < 0)
    return;
  size_t n = runs_of_key(k, found, FOUND_MAX);
  CHECK("damaged", n > 0, "the runs of live '%.16s' are not in the directory's memory", keys[k]);
  /* A first block at or past the end, or a count of 0 or past the end from
   * any first block: never a run of the region. */
  uint32_t r = u8(in) % m.e[k].n_runs, v = u8(in) % 2 ? UINT32_MAX - u8(in) : u16(in);
  bool first = u8(in) % 2;
  if (first && v < m.p.num_blocks)
    v += m.p.num_blocks;
  else if (!first && v != 0 && v <= m.p.num_blocks)
    v += m.p.num_blocks;
  for (size_t i = 0; i < n; i++) {
    if (first)
      found[i][r].first = v;
    else
      found[i][r].count = v;
  }
  const char *key = keys[k];
  bool hit;
  struct dir_pin_ref pin;
  why_reset();
  int rc = m.e[k].state == DIR_STATE_READY
               ? dir_lookup(&d, &key, 1, 1, &hit, NULL, &pin, why, why_cap)
               : dir_abort(&d, m.e[k].ref, why, why_cap);
  why_after("a call on a damaged entry", rc);
  TRACE("  run %u of '%.16s' set to %u: %d", r, key, v, rc);
  CHECK("damaged", rc == ECC_ERR_REGION, "%s of '%.16s', its run %u now %u: %d, REGION",
        m.e[k].state == DIR_STATE_READY ? "lookup" : "abort", key, r, v, rc);
}

/* Bytes of `from` .. `to` of the memory overwritten, by flips or words. */
static void scribble_bytes(struct input *in, size_t from, size_t to)
{
  uint8_t *p = mem;
  if (to <= from)
    return;
  for (int i = 1 + u8(in) % 4; i > 0; i--) {
    size_t at = from + u32(in) % (to - from);
    if (u8(in) % 2 == 0) {
      p[at] ^= (uint8_t)(1u << (u8(in) % 8));
    } else if (to - from >= 4) {
      uint32_t v = u32(in);
      at = from + (at - from) / 4 * 4;
      if (at + 4 > to)
        at = to - 4;
      memcpy(p + at, &v, 4);
    }
  }
}

/* The tables (or the header's counters, hand and hints, or its sizes)
 * overwritten, then calls: none crashes, hangs or gives a code outside the
 * set; the rebuild repairs whatever the tables hold, and the checker passes
 * after it. The memory is put back after, so the model goes on exact. */
static void op_scribble(struct input *in)
{
  const struct dir_shape *shape = mem;
  size_t after_lock = sizeof(struct dir_shape) + sizeof(pthread_mutex_t);
  uint8_t *copy = malloc(mem_bytes);
  CHECK("model", copy != NULL, "out of memory");
  memcpy(copy, mem, mem_bytes);
  struct dir view = d;
  uint8_t mode = u8(in) % 4;
  size_t off_entries = shape->off_entries, total = shape->total;
  if (mode == 0)
    damage_runs(in);
  else if (mode == 1)
    scribble_bytes(in, off_entries, total);
  else if (mode == 2)
    scribble_bytes(in, after_lock, off_entries);
  else
    scribble_bytes(in, 0, sizeof(struct dir_shape));
  TRACE("scribble (mode %u)", mode);
  bool shape_changed = memcmp(mem, &d.shape, sizeof(d.shape)) != 0;
  for (int i = 1 + u8(in) % 6; i > 0; i--)
    damaged_call(in);
  why_reset();
  int rc = dir_check(&d, why, why_cap);
  why_after("dir_check", rc);
  CHECK("damaged", rc == ECC_OK || rc == ECC_ERR_REGION, "dir_check on damaged tables: %d", rc);
  why_reset();
  rc = dir_rebuild(&d, why, why_cap);
  why_after("dir_rebuild", rc);
  char full[512] = "";
  if (shape_changed) {
    CHECK("damaged", rc == ECC_ERR_REGION, "dir_rebuild under a changed header: %d", rc);
  } else {
    CHECK("damaged", rc == ECC_OK, "dir_rebuild of damaged tables: %d (%s)", rc, why);
    rc = dir_check(&d, full, sizeof(full));
    CHECK("damaged", rc == ECC_OK, "dir_check after the rebuild of damaged tables: %s", full);
  }
  memcpy(mem, copy, mem_bytes);
  d = view;
  free(copy);
}

/* ---- the cache: peek, wait, events, restart ------------------------------ */

/* What peek says of key k is what the model knows, pins only for a ready
 * entry, all zero for an absent one. */
static void peek_matches(const struct dir_peeked *p, int k)
{
  const struct mentry *x = &m.e[k];
  if (!x->live) {
    CHECK("peek",
          p->state == DIR_STATE_FREE && all_zero(&p->pins, sizeof(p->pins)) && p->nbytes == 0 &&
              p->hits == 0 && all_zero(&p->meta, sizeof(p->meta)),
          "peek of absent '%.16s': state %d, %llu bytes", keys[k], p->state,
          (unsigned long long)p->nbytes);
    return;
  }
  uint32_t pins = x->state == DIR_STATE_READY ? x->pins : 0;
  CHECK("peek", p->state == x->state && p->nbytes == x->nbytes && p->pins == pins,
        "peek of '%.16s': state %d, %llu bytes, %u pins; model %d, %llu, %u", keys[k], p->state,
        (unsigned long long)p->nbytes, p->pins, x->state, (unsigned long long)x->nbytes, pins);
  CHECK("peek", p->hits == x->hits && same_meta(&p->meta, &x->meta),
        "peek of '%.16s': %llu hits, cost %llu; model %llu, %llu", keys[k],
        (unsigned long long)p->hits, (unsigned long long)p->meta.cost_us,
        (unsigned long long)x->hits, (unsigned long long)x->meta.cost_us);
}

/* What a lookup would find, and nothing changed: no pin, no mark of use,
 * no counter, no reclaim (a timed-out reservation is still reported). */
static void op_peek(struct input *in)
{
  int k[4];
  const char *pk[4];
  struct dir_peeked out[4];
  size_t n = 1 + u8(in) % 4;
  bool bad = false;
  for (size_t i = 0; i < n; i++) {
    pk[i] = pick_key(in, &k[i]);
    bad = bad || k[i] < 0;
  }
  memset(out, 0xa5, sizeof(out));
  take_snapshot(&snap_before);
  why_reset();
  int rc = dir_peek(&d, pk, n, out, why, why_cap);
  why_after("dir_peek", rc);
  TRACE("peek of %zu keys ('%.16s' first): %d", n, pk[0], rc);
  check_unchanged("dir_peek");
  if (bad) {
    CHECK("invalid", rc == ECC_ERR_INVALID, "peek with an invalid key: %d", rc);
    return;
  }
  CHECK("peek", rc == ECC_OK, "peek of %zu keys: %d (%s)", n, rc, why);
  for (size_t i = 0; i < n; i++)
    peek_matches(&out[i], k[i]);
}

/* 0 mostly (the wait a scheduler makes when it must not block); a few
 * microseconds, which a wait on this process's own reservation sleeps out
 * alone (whether it sleeps at all is the clock's: waits get slack); or one
 * past the bound. */
static uint64_t pick_wait_timeout(struct input *in)
{
  uint8_t mode = u8(in) % 8;
  if (mode == 5)
    return 1000;
  if (mode == 6)
    return 20000;
  if (mode == 7)
    return DIR_WAIT_MAX_NS + 1 + u8(in);
  return 0;
}

struct wait_call {
  int k;
  uint32_t ranks;
  uint64_t timeout_ns;
  uint32_t free_pins; /* before the call */
  int rc, result;
  struct dir_entry_info info;
  struct dir_pin_ref pin;
};

/* The key is ready: pinned as a lookup pins (BUSY, counting nothing, when
 * no pin slot is free), used and counted as a hit. */
static void wait_found_ready(struct wait_call *w)
{
  struct mentry *x = &m.e[w->k];
  uint32_t before = x->pins;
  if (w->rc == ECC_ERR_BUSY) {
    CHECK("wait-busy", w->ranks > 0 && w->free_pins == 0,
          "wait for ready '%.16s' refused BUSY, %u pin slots free", keys[w->k], w->free_pins);
    return;
  }
  CHECK("wait", w->rc == ECC_OK && w->result == DIR_WAIT_READY,
        "wait for ready '%.16s': %d, result %d (%s)", keys[w->k], w->rc, w->result, why);
  CHECK("wait-busy", w->ranks == 0 || w->free_pins > 0 || m.tiny_pin,
        "wait for '%.16s' pinned it with no pin slot free", keys[w->k]);
  model_hit(w->k);
  check_info("waited for", &w->info, w->k);
  CHECK("time", w->info.used_ns >= call_t0, "'%.16s' waited for, used_ns %llu before the call",
        keys[w->k], (unsigned long long)w->info.used_ns);
  CHECK("pins", (w->info.pins >= before || m.tiny_pin) && w->info.pins <= before + 1,
        "waited-for '%.16s' with %u pins, %u before", keys[w->k], w->info.pins, before);
  m.mono[C_LOOKUPS]++;
  m.mono[C_HITS]++;
  if (w->ranks == 0) {
    CHECK("wait", all_zero(&w->pin, sizeof(w->pin)), "a wait for 0 ranks handed out a pin");
    return;
  }
  add_pin(w->k, w->pin, w->ranks);
  m.mono[C_PINS]++;
}

/* The key is being written, by this process: the wait times out (at once
 * for timeout 0) with the reservation described, unless the reservation
 * itself may have timed out, when the wait reclaims it and says ABSENT
 * (the listing after the call learns it went). */
static void wait_found_writing(struct wait_call *w)
{
  struct mentry *x = &m.e[w->k];
  m.mono[C_LOOKUPS]++;
  m.mono[C_MISSES]++;
  if (w->timeout_ns > 0) {
    m.slack[C_WAITS] = 1;
    m.slack[C_WAIT_TIMEOUTS] = 1;
  }
  if (may_time_out(x)) {
    m.slack[C_WAITS_ABSENT] = w->timeout_ns > 0;
    CHECK("wait",
          w->rc == ECC_OK && (w->result == DIR_WAIT_ABSENT || w->result == DIR_WAIT_TIMEOUT),
          "wait for timed-out '%.16s': %d, result %d (%s)", keys[w->k], w->rc, w->result, why);
    return;
  }
  CHECK("wait", w->rc == ECC_OK && w->result == DIR_WAIT_TIMEOUT,
        "wait for '%.16s', reserved by this live process: %d, result %d, TIMEOUT documented",
        keys[w->k], w->rc, w->result);
  check_info("waited out", &w->info, w->k);
  CHECK("wait", all_zero(&w->pin, sizeof(w->pin)), "a wait that timed out handed out a pin");
}

static void op_wait(struct input *in)
{
  struct wait_call w = {.result = -1};
  const char *key = pick_key(in, &w.k);
  w.ranks = u8(in) % 4 == 0 ? 0 : 1 + u8(in) % 3;
  w.timeout_ns = pick_wait_timeout(in);
  w.free_pins = m.max_pins - live_pins();
  memset(&w.info, 0xa5, sizeof(w.info));
  memset(&w.pin, 0xa5, sizeof(w.pin));
  why_reset();
  call_t0 = now_ns();
  w.rc = dir_wait(&d, key, w.ranks, w.timeout_ns, &w.result, &w.info, &w.pin, why, why_cap);
  call_t1 = now_ns();
  why_after("dir_wait", w.rc);
  TRACE("wait for '%.16s', %u ranks, %llu ns: %d, result %d, pin %u/%u", key, w.ranks,
        (unsigned long long)w.timeout_ns, w.rc, w.result, w.pin.slot, w.pin.gen);
  if (w.k < 0 || w.timeout_ns > DIR_WAIT_MAX_NS) {
    CHECK("invalid", w.rc == ECC_ERR_INVALID, "wait with a bad key or timeout: %d", w.rc);
    return;
  }
  const struct mentry *x = &m.e[w.k];
  if (!x->live) {
    CHECK("wait", w.rc == ECC_OK && w.result == DIR_WAIT_ABSENT,
          "wait for absent '%.16s': %d, result %d", keys[w.k], w.rc, w.result);
    CHECK("wait", all_zero(&w.info, sizeof(w.info)) && all_zero(&w.pin, sizeof(w.pin)),
          "a wait for absent '%.16s' left info or pin set", keys[w.k]);
    m.mono[C_LOOKUPS]++;
    m.mono[C_MISSES]++;
  } else if (x->state == DIR_STATE_READY) {
    wait_found_ready(&w);
  } else {
    wait_found_writing(&w);
  }
}

/* A second reader, with a cursor of its own (0, one the ring has or had,
 * or one from the future) and a cap: what it reads follows from the ring's
 * size and next alone, and is what the model's own reads found. */
static void check_second_read(uint64_t cursor, size_t cap, const struct dir_event *out, size_t n,
                              uint64_t lost, uint64_t at)
{
  uint64_t next = evm.next, oldest = next > evm.slots ? next - evm.slots : 1;
  uint64_t start = cursor == 0 ? oldest : cursor > next ? next : cursor;
  uint64_t from = start < oldest ? oldest : start, want_n = next - from;
  if (cap == 0) {
    CHECK("events-cursor", n == 0 && lost == 0 && at == next,
          "cap 0 from %llu: %zu events, %llu lost, cursor %llu; the ring's next is %llu",
          (unsigned long long)cursor, n, (unsigned long long)lost, (unsigned long long)at,
          (unsigned long long)next);
    return;
  }
  want_n = want_n < cap ? want_n : cap;
  CHECK("events-cursor", n == want_n && lost == from - start && at == from + n,
        "from %llu (cap %zu): %zu events, %llu lost, cursor %llu; want %llu, %llu, %llu",
        (unsigned long long)cursor, cap, n, (unsigned long long)lost, (unsigned long long)at,
        (unsigned long long)want_n, (unsigned long long)(from - start),
        (unsigned long long)(from + want_n));
  for (size_t i = 0; i < n; i++) {
    uint64_t seq = from + i;
    const struct dir_event *seen = &evm.seen[seq % EV_HISTORY];
    CHECK("events-cursor", out[i].seq == seq, "event %zu from %llu has seq %llu, want %llu", i,
          (unsigned long long)from, (unsigned long long)out[i].seq, (unsigned long long)seq);
    if (evm.seen_seq[seq % EV_HISTORY] != seq)
      continue; /* lost to the model's own reader, or long ago */
    CHECK("events-cursor",
          out[i].kind == seen->kind && out[i].nbytes == seen->nbytes &&
              out[i].cost_us == seen->cost_us && out[i].time_ns == seen->time_ns &&
              strcmp(out[i].key, seen->key) == 0,
          "event %llu read again differs from what was read first", (unsigned long long)seq);
  }
}

/* Bad arguments are refused and move no cursor. */
static void events_refused(void)
{
  struct dir_event out[1];
  uint64_t cursor = evm.next;
  size_t n = 7;
  CHECK("events-invalid",
        dir_events(&d, NULL, out, 1, &n, NULL) == ECC_ERR_INVALID && n == 0 &&
            dir_events(&d, &cursor, out, 1, NULL, NULL) == ECC_ERR_INVALID &&
            dir_events(&d, &cursor, NULL, 1, &n, NULL) == ECC_ERR_INVALID && cursor == evm.next,
        "dir_events took a NULL cursor, count or array");
}

static void op_events(struct input *in)
{
  static const size_t caps[] = {0, 1, 3, 8, 32};
  struct dir_event out[32];
  uint8_t mode = u8(in) % 8;
  size_t cap = caps[u8(in) % 5], n = 99;
  uint64_t cursor = mode == 0 ? 0 : 1 + u32(in) % evm.next, lost = 77;
  if (mode == 1)
    cursor = evm.next + 1 + u8(in); /* another incarnation's, or a guess */
  else if (mode == 2)
    cursor = UINT64_MAX - u8(in);
  if (mode == 7) {
    events_refused();
    return;
  }
  uint64_t at = cursor;
  int rc = dir_events(&d, &at, cap > 0 ? out : NULL, cap, &n, mode == 6 ? NULL : &lost);
  TRACE("events from %llu, cap %zu: %d, %zu read, %llu lost, cursor %llu",
        (unsigned long long)cursor, cap, rc, n, (unsigned long long)(mode == 6 ? 0 : lost),
        (unsigned long long)at);
  CHECK("events", rc == ECC_OK, "dir_events from %llu: %d", (unsigned long long)cursor, rc);
  if (mode == 6) {
    uint64_t next = evm.next, oldest = next > evm.slots ? next - evm.slots : 1;
    uint64_t start = cursor == 0 ? oldest : cursor > next ? next : cursor;
    lost = cap == 0 || start >= oldest ? 0 : oldest - start; /* NULL: not told, not needed */
  }
  check_second_read(cursor, cap, out, n, lost, at);
}

/* A kept region reused: as a new process would, mostly through a view of
 * its own, then dir_restart. Every owner here lives, so it frees only what
 * has timed out, and counts a restart. */
static void op_restart(struct input *in)
{
  if (u8(in) % 2 == 1) {
    struct dir fresh;
    memset(&fresh, 0, sizeof(fresh));
    why_reset();
    int rc = dir_attach(&fresh, mem, mem_bytes, &m.p, why, why_cap);
    why_after("dir_attach", rc);
    CHECK("attach", rc == ECC_OK, "attach to a kept directory: %d (%s)", rc, why);
    d = fresh;
  }
  uint32_t freed = 12345;
  why_reset();
  int rc = dir_restart(&d, &freed, why, why_cap);
  why_after("dir_restart", rc);
  TRACE("restart: %d, %u freed", rc, freed);
  CHECK("restart", rc == ECC_OK, "dir_restart: %d (%s)", rc, why);
  m.check_freed = true;
  m.freed = freed;
  m.mono[C_RESTARTS]++;
}

/* ---- one input --------------------------------------------------------- */

static void pick_params(struct input *in, struct dir_params *p)
{
  static const uint64_t sizes[] = {1, 3, 64, 4096, 1u << 20, 1ull << 33};
  uint8_t b_entries, b_pins;
  memset(p, 0, sizeof(*p));
  p->num_blocks = 64 + u8(in) % 193;
  p->block_size = sizes[u8(in) % 6];
  b_entries = u8(in);
  b_pins = u8(in);
  uint8_t b_cache = u8(in);
  static const uint32_t slots[] = {0, 1, 2, 3, 16, 5, 64, 8}; /* 0: the default */
  p->policy = b_cache % 2 == 1 ? DIR_POLICY_COST : DIR_POLICY_LRU;
  p->event_slots = slots[b_cache / 2 % 8];
  /* Mostly fewer slots than keys, so that full tables happen. */
  p->max_entries = b_entries % 8 == 0 ? 0 : 1 + b_entries % 12;
  p->max_pins = b_pins % 8 == 0 ? 0 : 1 + b_pins % 12;
  /* Never, not within an input, or before the next call (reclaims learned). */
  p->reserve_timeout_ns = b_entries >> 6 == 2 ? HOUR_NS : b_entries >> 6 == 3 ? TINY_NS : 0;
  p->pin_timeout_ns = b_pins >> 6 == 2 ? HOUR_NS : b_pins >> 6 == 3 ? TINY_NS : 0;
  p->lock_timeout_ns = LOCK_WAIT_NS; /* waited out only by op_lock_held */
  m.tiny_res = p->reserve_timeout_ns == TINY_NS;
  m.tiny_pin = p->pin_timeout_ns == TINY_NS;
  m.max_entries = p->max_entries;
  if (m.max_entries == 0)
    m.max_entries = p->num_blocks / 16 < 64 ? 64 : p->num_blocks / 16;
  m.max_pins = p->max_pins ? p->max_pins : m.max_entries;
}

/* Memory never formatted is refused; so is formatting too few bytes. */
static void refuse_unformatted(uint8_t fill)
{
  struct dir other;
  why_reset();
  int rc = dir_attach(&other, mem, mem_bytes, &m.p, why, why_cap);
  why_after("dir_attach", rc);
  CHECK("attach", rc == ECC_ERR_REGION, "attach to unformatted bytes 0x%02x: %d", fill, rc);
  if (fill % 4 != 1)
    return;
  why_reset();
  rc = dir_format(mem, mem_bytes - 1 - fill % 64, &m.p, why, why_cap);
  why_after("dir_format", rc);
  CHECK("format-short", rc != ECC_OK, "dir_format into %u bytes too few succeeded",
        1 + fill % 64); /* the code is the unit's to choose */
}

static void start(struct input *in)
{
  struct dir_params bad;
  memset(&m, 0, sizeof(m));
  pick_params(in, &m.p);
  uint8_t fill = u8(in);
  bad = m.p;
  bad.num_blocks = 0;
  CHECK("params", dir_bytes(&bad) == 0, "dir_bytes accepts 0 blocks");
  bad = m.p;
  bad.block_size = 0;
  CHECK("params", dir_bytes(&bad) == 0, "dir_bytes accepts blocks of 0 bytes");
  mem_bytes = dir_bytes(&m.p);
  CHECK("params", mem_bytes > 0, "dir_bytes refuses %u blocks of %llu, %u entries, %u pins",
        m.p.num_blocks, (unsigned long long)m.p.block_size, m.p.max_entries, m.p.max_pins);
  /* Exact size; 64-byte aligned, as the unit requires (a mapping is). */
  CHECK("params", posix_memalign(&mem, 64, mem_bytes) == 0, "out of memory");
  memset(mem, fill, mem_bytes); /* "zeroed or not" */
  refuse_unformatted(fill);
  why_reset();
  int rc = dir_format(mem, mem_bytes, &m.p, why, why_cap);
  why_after("dir_format", rc);
  CHECK("format", rc == ECC_OK, "dir_format: %d (%s)", rc, why);
  memset(&d, 0, sizeof(d));
  why_reset();
  rc = dir_attach(&d, mem, mem_bytes, &m.p, why, why_cap);
  why_after("dir_attach", rc);
  CHECK("attach", rc == ECC_OK, "dir_attach after dir_format: %d (%s)", rc, why);
  ev_reset();
  TRACE("format %u blocks of %llu bytes, %u entry and %u pin slots (asked %u, %u): %zu bytes",
        m.p.num_blocks, (unsigned long long)m.p.block_size, m.max_entries, m.max_pins,
        m.p.max_entries, m.p.max_pins, mem_bytes);
  verify();
}

static void run_op(struct input *in)
{
  uint8_t op = u8(in) % 36;
  if (op < 4)
    op_reserve(in, op % 2 == 1);
  else if (op < 6)
    op_publish(in);
  else if (op < 7)
    op_abort(in);
  else if (op < 10)
    op_lookup(in);
  else if (op < 12)
    op_unpin(in);
  else if (op < 13)
    op_check_pinned(in);
  else if (op < 14)
    op_remove(in);
  else if (op < 15)
    op_attach(in);
  else if (op == 15)
    op_identity();
  else if (op == 16)
    op_reclaim();
  else if (op == 17)
    op_thread_death();
  else if (op == 18)
    op_rebuild();
  else if (op < 21)
    op_claim(in);
  else if (op < 22)
    op_unclaim(in);
  else if (op < 24)
    op_settle(in);
  else if (op < 25)
    op_pinned(in);
  else if (op < 26)
    op_blocks_held(in);
  else if (op < 27)
    op_unpin_ranks(in);
  else if (op < 28)
    op_reformat();
  else if (op < 29)
    op_lock_held(in);
  else if (op < 30)
    op_scribble(in);
  else if (op < 32)
    op_peek(in);
  else if (op < 34)
    op_wait(in);
  else if (op < 35)
    op_events(in);
  else
    op_restart(in);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  /* Prefixes of each other, and two longest keys that differ only last. */
  static const char *const short_keys[NKEYS - 2] = {"a",      "aa",     "ab", "b",  "ba",
                                                    "key-05", "key-06", "k7", "k8", "k9"};
  for (int k = 0; k < NKEYS - 2; k++)
    snprintf(keys[k], sizeof(keys[k]), "%s", short_keys[k]);
  memset(keys[NKEYS - 2], 'z', DIR_KEY_MAX);
  memset(keys[NKEYS - 1], 'z', DIR_KEY_MAX);
  keys[NKEYS - 1][DIR_KEY_MAX - 1] = 'y';
  tracing = getenv("FUZZ_DIR_TRACE") != NULL;
  memset(bad_keys[1], 'z', DIR_KEY_MAX + 1);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct input in = {data, size};
  op_index = -1;
  thread_death_op = -1;
  stop_input = false;
  lock_held_done = false;
  start(&in);
  for (op_index = 0; op_index < MAX_OPS && in.n > 0 && !stop_input; op_index++) {
    m.reclaims_now = 0;
    run_op(&in);
    if (!stop_input)
      verify();
  }
  free(mem);
  mem = NULL;
  return 0;
}
