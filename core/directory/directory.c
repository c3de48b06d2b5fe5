/* SPDX-License-Identifier: Apache-2.0 */
/*
 * directory.c - the cache directory kept in shared memory (directory.h): its
 * layout, the robust lock and the rebuild after a holder's death, the clock
 * allocator, pins, reclaiming what dead processes left, and the checker.
 */
#include "core/directory/directory.h"

#include "common/clock.h"
#include "common/errtext.h"
#include "core/directory/events.h"
#include "core/directory/policy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ALIGN 64u
#define NO_SLOT UINT32_MAX
#define BLOCKS_MAX (1u << 30)
/* Below 2^31: a token keeps the low half's top bit for its kind. */
#define SLOTS_MAX (1u << 24)
#define PIN_FREE 0u
#define PIN_LIVE 1u
/* Reading /proc/PID/stat costs microseconds (17 us in one sandbox): a
 * sweep that meets the same live owner again within this long trusts the
 * note it left. */
#define ALIVE_NOTES 8u
#define ALIVE_TTL_NS 10000000ull
/* Gap hints kept (the longest win a place when the list is full). */
#define DIR_GAPS 32u

/* ---- the shared layout ------------------------------------------------- */

/* A slot's state word: the state in the low half and the generation in the
 * high half, so that one store changes both. The entry's fields are written
 * while the slot is still FREE (nothing reads a free slot's fields), then
 * the word is stored with release order: a process killed before that
 * store leaves the old state, one killed after it leaves the fields whole.
 * Only a few fields change while the slot is live, each with one aligned
 * store that any value of leaves the entry whole: the mark, the use time,
 * the hit count, the policy's credit and the pin count (derived, recounted
 * by the rebuild). */
struct dir_slot {
  _Atomic uint64_t word;
  uint64_t nbytes;
  uint64_t hash; /* of the key, for the index (recomputed on rebuild) */
  uint64_t reserved_ns;
  uint64_t used_ns;
  struct dir_owner owner;
  uint32_t n_blocks;
  uint32_t n_runs;
  uint32_t pins;    /* derived: live pins naming this entry */
  uint32_t marked;  /* used since the hand last passed: its second chance */
  uint32_t claimed; /* a reservation whose copy is under way (dir_claim) */
  uint32_t claim_pad;
  struct dir_owner writer; /* the process making that copy */
  uint64_t hits;           /* found ready since it was stored */
  uint32_t credit;         /* policy "cost": what the hand spends (policy.h) */
  uint32_t credit_pad;
  struct dir_meta meta; /* cost and type, as reserved */
  struct dir_run runs[DIR_MAX_RUNS];
  char key[DIR_KEY_MAX + 1];
};

/* A pin slot; its word is PIN_FREE or PIN_LIVE with the generation, the
 * same one-store rule as entries. ranks_left is the only field that
 * changes while live: one aligned 32-bit store, old or new after a kill. */
struct dir_pin {
  _Atomic uint64_t word;
  uint32_t entry_slot;
  uint32_t entry_gen;
  uint32_t ranks_left;
  uint32_t unused;
  struct dir_owner owner;
  uint64_t pinned_ns;
};

/* Its first fields are struct dir_shape (directory.h), which views copy and
 * compare whole; the assertions below keep the two in step. */
struct dir_shared {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t num_blocks, max_entries, max_pins, index_cap;
  uint64_t block_size, reserve_timeout_ns, pin_timeout_ns;
  uint64_t off_entries, off_pins, off_map, off_index, total;
  uint64_t off_events;          /* the residency-event ring (events.h) */
  uint32_t policy, event_slots; /* enum dir_policy; records of the ring */
  uint64_t instance;            /* random per format: seeds the generations */
  pthread_mutex_t lock;
  /* Levels, derived from the tables (rebuilt after a death). */
  uint64_t entries, blocks_used, pins_live;
  /* Monotonic statistics: a death may lose the last increment. */
  uint64_t reservations, dedup_hits, lookups, hits, misses, evictions, removals, pins, reclaimed,
      full, recoveries;
  /* Where the clock hand and the free-slot searches resume. */
  uint32_t hand, slot_cursor, pin_cursor, unused;
  /* The process inside the lock (zero outside), and the last one the lock
   * reported dead: a holder found dead by EOWNERDEAD is dead whatever /proc
   * still shows while it exits. */
  struct dir_owner holder, dead_holder;
  /* Owners of other processes lately found alive (advisory: a note at
   * worst delays a reclaim by ALIVE_TTL_NS; rebuilds clear them). */
  struct alive_note {
    struct dir_owner owner;
    uint64_t at_ns;
  } alive[ALIVE_NOTES];
  uint32_t alive_next, unused2;
  uint64_t pins_scanned_ns; /* when sweeps last looked for stale pins */
  /* Free runs the hand has passed without using, so that a reservation
   * they fit fills them instead of evicting in front of the hand. Hints
   * only: checked against the block map before use, cleared by rebuilds. */
  struct dir_run gaps[DIR_GAPS];
  uint32_t n_gaps, unused3;
  /* Single flight: bumped by every end of a reservation (publish, abort,
   * failed copy, reclaim), a futex word that waiters sleep on; waiters
   * counts them, so that the bump wakes the kernel only when one sleeps. */
  _Atomic uint32_t wake, waiters;
  /* Cache statistics (monotonic, as above). */
  uint64_t waits, waits_ready, waits_absent, wait_timeouts, encoder_us_saved, events, restarts;
  /* Policy "cost": the mean cost per block that credits are earned
   * against (policy.h), kept by the allocation. */
  struct policy_mean mean;
  uint64_t unused4[2];
};

/* The fields of struct dir_shape, each asserted to lie here as there. */
#define SHAPE_FIELDS(X)  \
  X(magic);              \
  X(version);            \
  X(header_bytes);       \
  X(num_blocks);         \
  X(max_entries);        \
  X(max_pins);           \
  X(index_cap);          \
  X(block_size);         \
  X(reserve_timeout_ns); \
  X(pin_timeout_ns);     \
  X(off_entries);        \
  X(off_pins);           \
  X(off_map);            \
  X(off_index);          \
  X(total);              \
  X(off_events);         \
  X(policy);             \
  X(event_slots);        \
  X(instance)
#define SHAPE_OFFSET(f)                                                                         \
  _Static_assert(offsetof(struct dir_shared, f) == offsetof(struct dir_shape, f) &&             \
                     sizeof(((struct dir_shared *)0)->f) == sizeof(((struct dir_shape *)0)->f), \
                 "struct dir_shape must be the first fields of struct dir_shared: " #f)
SHAPE_FIELDS(SHAPE_OFFSET);
#undef SHAPE_OFFSET
/* The lock right after it: the fuzz target overwrites what follows the
 * lock, and finds it there. */
_Static_assert(offsetof(struct dir_shared, lock) == sizeof(struct dir_shape),
               "the lock must follow struct dir_shape");

struct layout {
  uint32_t index_cap;
  uint64_t off_entries, off_pins, off_map, off_index, off_events, total;
};

static inline uint64_t word_make(uint32_t state, uint32_t gen)
{
  return (uint64_t)gen << 32 | state;
}

static inline uint32_t word_state(uint64_t w)
{
  return (uint32_t)w;
}

static inline uint32_t word_gen(uint64_t w)
{
  return (uint32_t)(w >> 32);
}

static inline struct dir_slot *slot_at(const struct dir_shared *sh, uint32_t s)
{
  return (struct dir_slot *)((char *)sh + sh->off_entries) + s;
}

static inline struct dir_pin *pin_at(const struct dir_shared *sh, uint32_t p)
{
  return (struct dir_pin *)((char *)sh + sh->off_pins) + p;
}

static inline uint32_t *block_map(const struct dir_shared *sh)
{
  return (uint32_t *)((char *)sh + sh->off_map);
}

static inline uint32_t *index_table(const struct dir_shared *sh)
{
  return (uint32_t *)((char *)sh + sh->off_index);
}

/* Every access is made under the lock, which orders them between
 * processes; the release stores and acquire loads of the words order a
 * slot's fields before its state for whoever finds the memory after a
 * holder died mid-way (the store order is what survives a kill). */
static inline uint32_t slot_state(const struct dir_slot *e)
{
  return word_state(atomic_load_explicit(&e->word, memory_order_acquire));
}

static inline bool slot_live(const struct dir_slot *e)
{
  return slot_state(e) != DIR_STATE_FREE;
}

static uint64_t align_up(uint64_t v)
{
  return (v + ALIGN - 1) / ALIGN * ALIGN;
}

/* Defaults filled in and limits checked; false if p cannot be formatted. */
static bool params_resolve(const struct dir_params *p, struct dir_params *r)
{
  if (p == NULL || p->num_blocks == 0 || p->num_blocks > BLOCKS_MAX || p->block_size == 0)
    return false;
  *r = *p;
  if (r->max_entries == 0)
    r->max_entries = r->num_blocks / 16 < 64 ? 64 : r->num_blocks / 16;
  if (r->max_pins == 0)
    r->max_pins = r->max_entries;
  if (r->event_slots == 0)
    r->event_slots = DIR_EVENT_SLOTS_DEFAULT;
  return r->max_entries <= SLOTS_MAX && r->max_pins <= SLOTS_MAX &&
         r->event_slots <= EV_SLOTS_MAX && r->policy <= DIR_POLICY_COST;
}

static uint64_t layout_of(const struct dir_params *r, struct layout *l)
{
  l->index_cap = 1;
  while (l->index_cap < 2 * r->max_entries)
    l->index_cap <<= 1;
  l->off_entries = align_up(sizeof(struct dir_shared));
  l->off_pins = align_up(l->off_entries + (uint64_t)r->max_entries * sizeof(struct dir_slot));
  l->off_map = align_up(l->off_pins + (uint64_t)r->max_pins * sizeof(struct dir_pin));
  l->off_index = align_up(l->off_map + (uint64_t)r->num_blocks * sizeof(uint32_t));
  l->off_events = align_up(l->off_index + (uint64_t)l->index_cap * sizeof(uint32_t));
  l->total = align_up(l->off_events + ev_bytes(r->event_slots));
  return l->total;
}

size_t dir_bytes(const struct dir_params *p)
{
  struct dir_params r;
  struct layout l;
  if (!params_resolve(p, &r))
    return 0;
  return (size_t)layout_of(&r, &l);
}

/* ---- who is alive -------------------------------------------------------- */

/* Field 3 (state) and field 22 (start time) of /proc/PID/stat. The command
 * name (field 2) may hold spaces and parentheses: fields are counted from
 * the last ')'. */
static int read_stat(pid_t pid, char *state, uint64_t *start_ticks)
{
  char path[40], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  int err = errno;
  close(fd);
  if (n <= 0)
    return n < 0 ? -err : -EIO;
  buf[n] = '\0';
  char *at = strrchr(buf, ')');
  if (at == NULL || at[1] != ' ' || at[2] == '\0')
    return -EIO;
  *state = at[2];
  at += 2;
  for (int field = 3; field < 22 && at != NULL; field++) {
    at = strchr(at, ' ');
    at = at != NULL ? at + 1 : NULL;
  }
  if (at == NULL)
    return -EIO;
  *start_ticks = strtoull(at, NULL, 10);
  return 0;
}

int dir_owner_self(struct dir_owner *out)
{
  char state;
  memset(out, 0, sizeof(*out));
  out->pid = (int32_t)getpid();
  return read_stat(getpid(), &state, &out->start_ticks) == 0 ? ECC_OK : ECC_ERR_SYSTEM;
}

static bool same_owner(const struct dir_owner *a, const struct dir_owner *b)
{
  return a->pid == b->pid && a->start_ticks == b->start_ticks;
}

/* Dead: no such pid, a zombie, or a later process with the same pid (its
 * start time differs: kill(pid, 0) alone would call it alive). When /proc
 * cannot tell (hidden by hidepid), kill decides, and in doubt it lives. */
static bool proc_alive(const struct dir_owner *o)
{
  char state = '?';
  uint64_t ticks = 0;
  int rc = read_stat(o->pid, &state, &ticks);
  if (rc == -ENOENT || rc == -ESRCH)
    return false;
  if (rc != 0)
    return !(kill(o->pid, 0) != 0 && errno == ESRCH);
  return state != 'Z' && state != 'X' && ticks == o->start_ticks;
}

static bool noted_alive(const struct dir_shared *sh, const struct dir_owner *o, uint64_t now)
{
  for (uint32_t i = 0; i < ALIVE_NOTES; i++)
    if (same_owner(&sh->alive[i].owner, o) && now >= sh->alive[i].at_ns &&
        now - sh->alive[i].at_ns < ALIVE_TTL_NS)
      return true;
  return false;
}

/* fresh: ask /proc even if a note says alive (explicit reclaims and the
 * rebuild after a death, whose callers expect the dead to be found now). */
static bool owner_alive(const struct dir *d, const struct dir_owner *o, uint64_t now, bool fresh)
{
  struct dir_shared *sh = d->sh;
  if (o->pid <= 0 || same_owner(o, &sh->dead_holder))
    return false;
  if (same_owner(o, &d->self) || (!fresh && noted_alive(sh, o, now)))
    return true;
  if (!proc_alive(o))
    return false;
  sh->alive[sh->alive_next % ALIVE_NOTES] = (struct alive_note){*o, now};
  sh->alive_next = (sh->alive_next + 1) % ALIVE_NOTES;
  return true;
}

/* ---- the key index ----------------------------------------------------- */

/* FNV-1a over the key, then a 64-bit finalizer so the low bits (which pick
 * the bucket) depend on every byte. */
static uint64_t key_hash(const char *key, size_t len)
{
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; i++) {
    h ^= (unsigned char)key[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

/* Buckets hold slot + 1 (0: empty), linear probing; deletion shifts the
 * followers back, so there are no tombstones and a probe stops at the
 * first empty bucket. */
static uint32_t index_find(const struct dir_shared *sh, const char *key, uint64_t hash)
{
  const uint32_t *t = index_table(sh);
  uint32_t mask = sh->index_cap - 1;
  for (uint32_t i = (uint32_t)hash & mask, n = 0; n < sh->index_cap; i = (i + 1) & mask, n++) {
    if (t[i] == 0)
      return NO_SLOT;
    /* A bucket naming a slot past the table or a free one is damage: it
     * matches no key. */
    if (t[i] > sh->max_entries)
      continue;
    const struct dir_slot *e = slot_at(sh, t[i] - 1);
    if (e->hash == hash && slot_live(e) && strncmp(e->key, key, sizeof(e->key)) == 0)
      return t[i] - 1;
  }
  return NO_SLOT;
}

static void index_insert(struct dir_shared *sh, uint32_t s)
{
  uint32_t *t = index_table(sh);
  uint32_t mask = sh->index_cap - 1;
  uint32_t i = (uint32_t)slot_at(sh, s)->hash & mask;
  /* The table has twice as many buckets as entries: an empty one exists
   * (the bound only guards against a table someone else overwrote). */
  for (uint32_t n = 0; t[i] != 0 && n < sh->index_cap; n++)
    i = (i + 1) & mask;
  if (t[i] == 0)
    t[i] = s + 1;
}

/* Whether bucket j's occupant, whose home is h, may move back to hole i:
 * only if h does not lie cyclically in (i, j]. */
static bool may_fill(uint32_t i, uint32_t j, uint32_t h)
{
  return i <= j ? (h <= i || h > j) : (h <= i && h > j);
}

static void index_delete(struct dir_shared *sh, uint32_t s)
{
  uint32_t *t = index_table(sh);
  uint32_t mask = sh->index_cap - 1;
  uint32_t i = (uint32_t)slot_at(sh, s)->hash & mask, n = 0;
  while (t[i] != s + 1 && n++ < sh->index_cap)
    i = (i + 1) & mask;
  if (t[i] != s + 1)
    return;
  /* The probe count bounds a table with no empty bucket (overwritten). */
  n = 0;
  for (uint32_t j = (i + 1) & mask;
       t[j] != 0 && t[j] <= sh->max_entries && j != i && n++ < sh->index_cap; j = (j + 1) & mask) {
    uint32_t h = (uint32_t)slot_at(sh, t[j] - 1)->hash & mask;
    if (may_fill(i, j, h)) {
      t[i] = t[j];
      i = j;
    }
  }
  t[i] = 0;
}

/* ---- slots: creation and retirement -------------------------------------- */

/* The one store that frees a slot also retires its generation, so a ref
 * taken before can never match the next entry put in it. */
static void slot_retire(struct dir_slot *e)
{
  uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
  atomic_store_explicit(&e->word, word_make(DIR_STATE_FREE, word_gen(w) + 1), memory_order_release);
}

/* The run is copied out first: a store to the map could otherwise change
 * e->runs as far as the compiler knows, and the loop would reload it per
 * block (most of a reservation's time, before). A run outside the map (a
 * damaged slot's) is skipped: nothing is written past the map. */
static void map_set(struct dir_shared *sh, const struct dir_slot *e, uint32_t v)
{
  uint32_t *map = block_map(sh);
  for (uint32_t r = 0; r < e->n_runs && r < DIR_MAX_RUNS; r++) {
    uint32_t first = e->runs[r].first, count = e->runs[r].count;
    if (first >= sh->num_blocks || count > sh->num_blocks - first)
      continue;
    uint32_t *at = map + first;
    if (v == 0) {
      memset(at, 0, (size_t)count * sizeof(*at));
      continue;
    }
    for (uint32_t b = 0; b < count; b++)
      at[b] = v;
  }
}

/* ---- gap hints ------------------------------------------------------------- */

/* Remembers a free run; when the list is full, it replaces the shortest
 * hint if it is longer. A hint naming the same first block is updated. */
static void gap_note(struct dir_shared *sh, uint32_t first, uint32_t count)
{
  if (count == 0)
    return;
  uint32_t shortest = 0;
  for (uint32_t i = 0; i < sh->n_gaps; i++) {
    if (sh->gaps[i].first == first) {
      sh->gaps[i].count = count;
      return;
    }
    if (sh->gaps[i].count < sh->gaps[shortest].count)
      shortest = i;
  }
  if (sh->n_gaps < DIR_GAPS)
    sh->gaps[sh->n_gaps++] = (struct dir_run){first, count};
  else if (sh->gaps[shortest].count < count)
    sh->gaps[shortest] = (struct dir_run){first, count};
}

static void gap_drop(struct dir_shared *sh, uint32_t i)
{
  sh->gaps[i] = sh->gaps[--sh->n_gaps];
}

/* Blocks of hint i that are really free, counted from its first (a sweep
 * may have allocated over it since it was noted). */
static uint32_t gap_free_prefix(const struct dir_shared *sh, uint32_t i, uint32_t want)
{
  const uint32_t *map = block_map(sh);
  struct dir_run g = sh->gaps[i];
  if (g.first >= sh->num_blocks || g.count > sh->num_blocks - g.first)
    return 0;
  uint32_t len = 0, stop = g.count < want ? g.count : want;
  while (len < stop && map[g.first + len] == 0)
    len++;
  return len;
}

/* Best fit among the hints: the shortest that holds n free blocks. Hints
 * found stale on the way are shortened or dropped. */
static bool gap_take(struct dir_shared *sh, uint32_t n, uint32_t *first)
{
  for (;;) {
    uint32_t best = NO_SLOT;
    for (uint32_t i = 0; i < sh->n_gaps; i++)
      if (sh->gaps[i].count >= n && (best == NO_SLOT || sh->gaps[i].count < sh->gaps[best].count))
        best = i;
    if (best == NO_SLOT)
      return false;
    uint32_t have = gap_free_prefix(sh, best, n);
    if (have == n) {
      *first = sh->gaps[best].first;
      return true;
    }
    if (have == 0)
      gap_drop(sh, best);
    else
      sh->gaps[best].count = have;
  }
}

/* The hint the new entry at [first, first + n) came from loses those blocks. */
static void gap_used(struct dir_shared *sh, uint32_t first, uint32_t n)
{
  for (uint32_t i = 0; i < sh->n_gaps; i++)
    if (sh->gaps[i].first == first) {
      if (sh->gaps[i].count <= n)
        gap_drop(sh, i);
      else
        sh->gaps[i] = (struct dir_run){first + n, sh->gaps[i].count - n};
      return;
    }
}

/* ---- what others learn: wake-ups, events, hits ------------------------------ */

/* Every end of a reservation bumps the futex word under the lock; the
 * call that ended it wakes the sleepers once it has unlocked (dir_unlock),
 * so that they do not wake into a lock still held for the length of the
 * wake-ups. A waiter reads the word and registers under the lock, so no
 * end falls between its look and its sleep: an end before it registered
 * has already moved the word it reads. A waiter killed asleep leaves
 * `waiters` one too high: later ends then make a futex call that wakes
 * nobody. */
static _Thread_local struct dir_shared *wake_due;

static void wake_waiters(struct dir_shared *sh)
{
  atomic_fetch_add_explicit(&sh->wake, 1, memory_order_release);
  wake_due = sh;
}

static void wake_if_due(void)
{
  struct dir_shared *sh = wake_due;
  wake_due = NULL;
  if (sh != NULL && atomic_load_explicit(&sh->waiters, memory_order_acquire) != 0)
    syscall(SYS_futex, &sh->wake, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static uint64_t realtime_ns(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The ring's place and size come from the header, which every locked call
 * has compared with the view's checked copy first. */
static void note_event(struct dir_shared *sh, const struct dir_slot *e, uint32_t kind)
{
  struct dir_event ev = {
      .time_ns = realtime_ns(), .nbytes = e->nbytes, .cost_us = e->meta.cost_us, .kind = kind};
  memcpy(ev.key, e->key, DIR_KEY_MAX);
  ev.key[DIR_KEY_MAX] = '\0';
  ev_put((char *)sh + sh->off_events, sh->event_slots, &ev);
  sh->events++;
}

/* A hit on a ready entry: used (its second chance), counted, and what it
 * saves added up. */
static void slot_hit(struct dir_shared *sh, struct dir_slot *e, uint64_t now)
{
  e->marked = 1;
  /* Its uses so far: its store, its earlier hits and this one. */
  if (sh->policy == DIR_POLICY_COST)
    e->credit = policy_use(&sh->mean, e->meta.cost_us, e->n_blocks, e->hits + 2, e->credit);
  e->used_ns = now;
  e->hits++;
  sh->encoder_us_saved += e->meta.cost_us;
}

/* ---- slots: freeing ---------------------------------------------------------- */

/* The table first, then the derived parts: a death in between leaves a
 * free slot that the rebuild drops from the map and the index. */
static void entry_drop(struct dir_shared *sh, uint32_t s)
{
  struct dir_slot *e = slot_at(sh, s);
  bool reservation = slot_state(e) == DIR_STATE_RESERVED;
  slot_retire(e);
  map_set(sh, e, 0);
  index_delete(sh, s);
  sh->entries--;
  sh->blocks_used -= e->n_blocks;
  if (reservation)
    wake_waiters(sh);
}

/* An entry freed anywhere but in front of the hand leaves its runs as
 * gaps for later reservations. */
static void entry_free(struct dir_shared *sh, uint32_t s)
{
  struct dir_slot *e = slot_at(sh, s);
  for (uint32_t r = 0; r < e->n_runs && r < DIR_MAX_RUNS; r++)
    gap_note(sh, e->runs[r].first, e->runs[r].count);
  entry_drop(sh, s);
}

/* A reservation whose owner is dead (or whose deadline passed) is freed,
 * said in the event ring and counted. */
static void reclaim_entry(struct dir_shared *sh, uint32_t s)
{
  note_event(sh, slot_at(sh, s), ECC_EVENT_RECLAIMED);
  entry_free(sh, s);
  sh->reclaimed++;
}

/* The reservation's blocks are written: one store makes it visible to
 * lookups, fields unchanged; then its waiters learn it. */
static void entry_publish(struct dir_shared *sh, struct dir_slot *e, struct dir_ref ref)
{
  e->claimed = 0;
  /* Its store is its first use, as a new entry is marked under "lru". */
  if (sh->policy == DIR_POLICY_COST) {
    policy_note_store(&sh->mean, e->meta.cost_us, e->n_blocks);
    e->credit = policy_use(&sh->mean, e->meta.cost_us, e->n_blocks, 1, 0);
  }
  atomic_store_explicit(&e->word, word_make(DIR_STATE_READY, ref.gen), memory_order_release);
  note_event(sh, e, ECC_EVENT_STORED);
  wake_waiters(sh);
}

/* As entry_free: the pin's word first, then the entry's derived count. */
static void pin_free(struct dir_shared *sh, uint32_t p)
{
  struct dir_pin *pin = pin_at(sh, p);
  uint64_t w = atomic_load_explicit(&pin->word, memory_order_relaxed);
  atomic_store_explicit(&pin->word, word_make(PIN_FREE, word_gen(w) + 1), memory_order_release);
  if (pin->entry_slot < sh->max_entries && slot_at(sh, pin->entry_slot)->pins > 0)
    slot_at(sh, pin->entry_slot)->pins--;
  sh->pins_live--;
}

static bool pin_live(const struct dir_pin *pin)
{
  return word_state(atomic_load_explicit(&pin->word, memory_order_acquire)) == PIN_LIVE;
}

/* A free slot (the caller knows one exists), searched from where the last
 * search stopped so the search is short while the table is not full. */
static uint32_t free_slot(struct dir_shared *sh)
{
  for (uint32_t n = 0; n < sh->max_entries; n++) {
    uint32_t s = (sh->slot_cursor + n) % sh->max_entries;
    if (!slot_live(slot_at(sh, s))) {
      sh->slot_cursor = (s + 1) % sh->max_entries;
      return s;
    }
  }
  return NO_SLOT;
}

static uint32_t free_pin(struct dir_shared *sh)
{
  for (uint32_t n = 0; n < sh->max_pins; n++) {
    uint32_t p = (sh->pin_cursor + n) % sh->max_pins;
    if (!pin_live(pin_at(sh, p))) {
      sh->pin_cursor = (p + 1) % sh->max_pins;
      return p;
    }
  }
  return NO_SLOT;
}

static void fill_info(const struct dir_shared *sh, uint32_t s, struct dir_entry_info *out)
{
  const struct dir_slot *e = slot_at(sh, s);
  uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
  if (out == NULL)
    return;
  memset(out, 0, sizeof(*out));
  out->ref.slot = s;
  out->ref.gen = word_gen(w);
  out->state = (int)word_state(w);
  out->nbytes = e->nbytes;
  out->n_blocks = e->n_blocks;
  out->n_runs = e->n_runs;
  memcpy(out->runs, e->runs, sizeof(out->runs));
  out->pins = e->pins;
  out->owner = e->owner;
  out->reserved_ns = e->reserved_ns;
  out->used_ns = e->used_ns;
  out->hits = e->hits;
  out->meta = e->meta;
  memcpy(out->key, e->key, sizeof(out->key));
  out->key[DIR_KEY_MAX] = '\0';
}

/* ---- reclaiming what the dead left ------------------------------------- */

static bool reservation_stale(const struct dir *d, const struct dir_slot *e, uint64_t now,
                              bool fresh)
{
  /* A copy under way writes into the blocks: they are freed only once its
   * process is gone (its copies die with it), never by a deadline. */
  if (e->claimed)
    return !owner_alive(d, &e->writer, now, fresh);
  uint64_t t = d->sh->reserve_timeout_ns;
  if (t != 0 && now > e->reserved_ns && now - e->reserved_ns > t)
    return true;
  return !owner_alive(d, &e->owner, now, fresh);
}

static bool pin_stale(const struct dir *d, const struct dir_pin *pin, uint64_t now, bool fresh)
{
  uint64_t t = d->sh->pin_timeout_ns;
  if (t != 0 && now > pin->pinned_ns && now - pin->pinned_ns > t)
    return true;
  return !owner_alive(d, &pin->owner, now, fresh);
}

/* Drops every stale pin; returns how many. */
static uint32_t drop_stale_pins(struct dir *d, uint64_t now, bool fresh)
{
  struct dir_shared *sh = d->sh;
  uint32_t dropped = 0;
  for (uint32_t p = 0; p < sh->max_pins && sh->pins_live > 0; p++) {
    struct dir_pin *pin = pin_at(sh, p);
    if (pin_live(pin) && pin_stale(d, pin, now, fresh)) {
      pin_free(sh, p);
      sh->reclaimed++;
      dropped++;
    }
  }
  sh->pins_scanned_ns = now;
  return dropped;
}

static uint32_t reclaim_all(struct dir *d, uint64_t now, bool fresh)
{
  struct dir_shared *sh = d->sh;
  uint32_t freed = drop_stale_pins(d, now, fresh);
  for (uint32_t s = 0; s < sh->max_entries; s++) {
    struct dir_slot *e = slot_at(sh, s);
    if (slot_state(e) == DIR_STATE_RESERVED && reservation_stale(d, e, now, fresh)) {
      reclaim_entry(sh, s);
      freed++;
    }
  }
  return freed;
}

/* ---- the rebuild after a death --------------------------------------------- */

static bool run_fits(const struct dir_shared *sh, const struct dir_run *run)
{
  return run->count > 0 && run->first < sh->num_blocks && run->count <= sh->num_blocks - run->first;
}

static bool runs_valid(const struct dir_shared *sh, const struct dir_slot *e)
{
  uint64_t sum = 0;
  if (e->n_runs < 1 || e->n_runs > DIR_MAX_RUNS)
    return false;
  for (uint32_t r = 0; r < e->n_runs; r++) {
    if (!run_fits(sh, &e->runs[r]))
      return false;
    sum += e->runs[r].count;
  }
  return sum == e->n_blocks && e->nbytes > 0 && (e->nbytes - 1) / sh->block_size + 1 == e->n_blocks;
}

static bool key_valid(const struct dir_slot *e)
{
  size_t len = strnlen(e->key, sizeof(e->key));
  return len > 0 && len <= DIR_KEY_MAX;
}

static bool slot_valid(const struct dir_shared *sh, const struct dir_slot *e)
{
  uint32_t st = slot_state(e);
  if (st != DIR_STATE_RESERVED && st != DIR_STATE_READY)
    return false;
  return key_valid(e) && runs_valid(sh, e);
}

/* What is wrong with live slot e, which slot_valid refused, in buf. */
static const char *slot_fault(const struct dir_shared *sh, const struct dir_slot *e, char *buf,
                              size_t cap)
{
  uint64_t sum = 0;
  uint32_t st = slot_state(e);
  if (st != DIR_STATE_RESERVED && st != DIR_STATE_READY) {
    snprintf(buf, cap, "its state is %u", st);
    return buf;
  }
  if (!key_valid(e))
    return "its key is empty or not terminated";
  if (e->n_runs < 1 || e->n_runs > DIR_MAX_RUNS) {
    snprintf(buf, cap, "it has %u runs, 1 to %u allowed", e->n_runs, DIR_MAX_RUNS);
    return buf;
  }
  for (uint32_t r = 0; r < e->n_runs; r++) {
    if (!run_fits(sh, &e->runs[r])) {
      snprintf(buf, cap, "its run %u (%u+%u) lies outside the %u blocks", r, e->runs[r].first,
               e->runs[r].count, sh->num_blocks);
      return buf;
    }
    sum += e->runs[r].count;
  }
  snprintf(buf, cap, "its runs hold %llu blocks, its size %llu bytes, its count %u",
           (unsigned long long)sum, (unsigned long long)e->nbytes, e->n_blocks);
  return buf;
}

/* The error for a call that met damaged slot s: nothing is read through
 * it; the next rebuild (after a holder's death, or dir_rebuild) drops it. */
static int slot_damaged(const struct dir_shared *sh, uint32_t s, char *why, size_t cap)
{
  char detail[96];
  return errtext_fail(why, cap, ECC_ERR_REGION,
                      "directory: slot %u is damaged (%s): the region's memory was overwritten; "
                      "make the region again",
                      s, slot_fault(sh, slot_at(sh, s), detail, sizeof(detail)));
}

static bool map_free(const struct dir_shared *sh, const struct dir_slot *e)
{
  const uint32_t *map = block_map(sh);
  for (uint32_t r = 0; r < e->n_runs; r++)
    for (uint32_t b = 0; b < e->runs[r].count; b++)
      if (map[e->runs[r].first + b] != 0)
        return false;
  return true;
}

/* Entries: anything not a whole live entry is freed; the block map and the
 * index are made again from those left (a key or block claimed twice, which
 * the one-store rule rules out, frees the later claimant). */
static void rebuild_entries(struct dir_shared *sh)
{
  memset(block_map(sh), 0, (size_t)sh->num_blocks * sizeof(uint32_t));
  memset(index_table(sh), 0, (size_t)sh->index_cap * sizeof(uint32_t));
  sh->entries = sh->blocks_used = 0;
  for (uint32_t s = 0; s < sh->max_entries; s++) {
    struct dir_slot *e = slot_at(sh, s);
    if (!slot_live(e))
      continue;
    e->pins = 0;
    e->marked = e->marked != 0;
    if (slot_valid(sh, e))
      e->hash = key_hash(e->key, strlen(e->key));
    if (!slot_valid(sh, e) || !map_free(sh, e) || index_find(sh, e->key, e->hash) != NO_SLOT) {
      slot_retire(e);
      continue;
    }
    map_set(sh, e, s + 1);
    index_insert(sh, s);
    sh->entries++;
    sh->blocks_used += e->n_blocks;
  }
}

/* Pins: those naming no ready entry of their generation are dropped; the
 * others give each entry its pin count back. */
static void rebuild_pins(struct dir_shared *sh)
{
  sh->pins_live = 0;
  for (uint32_t p = 0; p < sh->max_pins; p++) {
    struct dir_pin *pin = pin_at(sh, p);
    uint64_t pw = atomic_load_explicit(&pin->word, memory_order_relaxed);
    if (word_state(pw) == PIN_FREE)
      continue;
    struct dir_slot *e = pin->entry_slot < sh->max_entries ? slot_at(sh, pin->entry_slot) : NULL;
    uint64_t w = e != NULL ? atomic_load_explicit(&e->word, memory_order_acquire) : 0;
    if (word_state(pw) != PIN_LIVE || e == NULL || word_state(w) != DIR_STATE_READY ||
        word_gen(w) != pin->entry_gen || pin->ranks_left == 0) {
      atomic_store_explicit(&pin->word, word_make(PIN_FREE, word_gen(pw) + 1),
                            memory_order_release);
      continue;
    }
    e->pins++;
    sh->pins_live++;
  }
}

static void recover(struct dir *d)
{
  struct dir_shared *sh = d->sh;
  sh->recoveries++;
  memset(sh->alive, 0, sizeof(sh->alive));
  sh->alive_next = 0;
  rebuild_entries(sh);
  rebuild_pins(sh);
  sh->hand %= sh->num_blocks;
  sh->n_gaps = 0;
  sh->slot_cursor %= sh->max_entries;
  sh->pin_cursor %= sh->max_pins;
  /* The derived parts are whole again: the dead holder's reservations and
   * pins (and any other dead process's) go the ordinary way. */
  reclaim_all(d, ecc_now_ns(), true);
}

/* ---- the lock -------------------------------------------------------------- */

/* Forks of this process, counted in each child: a struct dir copied into a
 * child notices that its self is the parent's without a getpid per call. */
static atomic_uint forks_seen;
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
  atomic_fetch_add_explicit(&forks_seen, 1, memory_order_relaxed);
}

static void watch_forks(void)
{
  pthread_atfork(NULL, NULL, count_fork);
}

static void take_identity(struct dir *d)
{
  d->forks = atomic_load_explicit(&forks_seen, memory_order_relaxed);
  dir_owner_self(&d->self);
}

/* A forked child inherits the parent's struct dir: it takes its own
 * identity before it reserves or pins anything. A holder's death is
 * repaired before the lock is marked consistent, so a death during the
 * repair makes the next locker repair again (the repair is idempotent). */
static inline void cpu_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* A holder keeps the lock a microsecond or so, and a waiter put to sleep in
 * the kernel is woken 50-100 us after the unlock on a VM (a halted vCPU
 * must be re-entered): a waiter first retries for up to LOCK_SPIN_NS,
 * backing off, and yields its CPU between the later tries so that a holder
 * descheduled on a crowded machine can finish. With 8 processes contending
 * on 2 cores, retrying took the p99 of reserve from 209 to 24-27 us and of
 * lookup from 199 to 16-18 us; on 16 cores, a budget of 200 us gave 58-61
 * us against 71-79 for 30 us. Settable at build time (-DLOCK_SPIN_NS=). */
#ifndef LOCK_SPIN_NS
#define LOCK_SPIN_NS 200000ull
#endif
#define LOCK_SPINS 64u

/* The wait after the spin ends at an absolute CLOCK_MONOTONIC deadline, so
 * that a step of the wall clock neither stretches nor cuts it. ThreadSanitizer
 * (GCC 12's) does not intercept pthread_mutex_clocklock and would report the
 * lock it did not see taken: under it the wait is pthread_mutex_timedlock's
 * on CLOCK_REALTIME, the same lock otherwise. */
#if defined(__SANITIZE_THREAD__)
#define LOCK_WALL_CLOCK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOCK_WALL_CLOCK 1
#endif
#endif

static int lock_wait(pthread_mutex_t *m, uint64_t deadline_ns)
{
  uint64_t now = ecc_now_ns();
  if (now >= deadline_ns)
    return ETIMEDOUT;
#ifdef LOCK_WALL_CLOCK
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t at = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + (deadline_ns - now);
  ts.tv_sec = (time_t)(at / 1000000000ull);
  ts.tv_nsec = (long)(at % 1000000000ull);
  return pthread_mutex_timedlock(m, &ts);
#else
  struct timespec ts = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
  return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
#endif
}

/* 0, EOWNERDEAD, ENOTRECOVERABLE, or ETIMEDOUT once timeout_ns have passed. */
static int lock_acquire(pthread_mutex_t *m, uint64_t timeout_ns)
{
  int rc = pthread_mutex_trylock(m);
  if (rc != EBUSY)
    return rc;
  uint64_t start = ecc_now_ns();
  uint64_t deadline = timeout_ns < UINT64_MAX - start ? start + timeout_ns : UINT64_MAX;
  uint64_t until = start + (timeout_ns < LOCK_SPIN_NS ? timeout_ns : LOCK_SPIN_NS);
  for (unsigned round = 0; ecc_now_ns() < until; round++) {
    if (round < LOCK_SPINS)
      for (unsigned i = 0; i < (4u << (round < 4 ? round : 4)); i++)
        cpu_pause();
    else
      sched_yield();
    if ((rc = pthread_mutex_trylock(m)) != EBUSY)
      return rc;
  }
  return lock_wait(m, deadline);
}

/* Who holds the lock that timed out: read outside the lock, so one field
 * with one atomic load (the holder writes it so too). */
static int lock_busy(const struct dir *d, char *why, size_t cap)
{
  int32_t pid = __atomic_load_n(&d->sh->holder.pid, __ATOMIC_RELAXED);
  unsigned long long ms = (unsigned long long)(d->lock_timeout_ns / 1000000u);
  if (pid == 0)
    return errtext_fail(why, cap, ECC_ERR_BUSY,
                        "directory: its lock was not free within %llu ms "
                        "(directory.lock_timeout_ms), its holder not yet named; try again",
                        ms);
  if (pid == d->self.pid)
    return errtext_fail(why, cap, ECC_ERR_BUSY,
                        "directory: its lock has been held by pid %d (this process) for more "
                        "than %llu ms (directory.lock_timeout_ms): another of its threads is "
                        "stuck inside a directory call",
                        (int)pid, ms);
  return errtext_fail(why, cap, ECC_ERR_BUSY,
                      "directory: its lock has been held by pid %d for more than %llu ms "
                      "(directory.lock_timeout_ms): that process is stopped (SIGSTOP, a "
                      "debugger) or stuck inside a directory call; continue or end it, then "
                      "try again",
                      (int)pid, ms);
}

/* The header as this view attached it: anything else is not followed. */
static int shape_check(const struct dir *d, char *why, size_t cap)
{
  const struct dir_shared *sh = d->sh;
  if (memcmp(sh, &d->shape, sizeof(d->shape)) == 0)
    return ECC_OK;
  if (memcmp(sh->magic, DIR_MAGIC, sizeof(sh->magic)) == 0 && sh->instance != d->shape.instance)
    return errtext_fail(why, cap, ECC_ERR_REGION,
                        "directory: formatted again since this process attached it (instance "
                        "%016llx, now %016llx): its entries and tokens are gone; open the "
                        "region again",
                        (unsigned long long)d->shape.instance, (unsigned long long)sh->instance);
  return errtext_fail(why, cap, ECC_ERR_REGION,
                      "directory: its header changed since this process attached it (the "
                      "region's memory was overwritten); make the region again");
}

static int dir_lock(struct dir *d, char *why, size_t cap)
{
  if (d == NULL || d->sh == NULL)
    return errtext_fail(why, cap, ECC_ERR_INVALID, "directory: not attached");
  int rc = shape_check(d, why, cap);
  if (rc != ECC_OK)
    return rc;
  rc = lock_acquire(&d->sh->lock, d->lock_timeout_ns);
  if (rc == ETIMEDOUT)
    return lock_busy(d, why, cap);
  /* Under the lock, so that threads sharing d take turns writing self. */
  if ((rc == 0 || rc == EOWNERDEAD) &&
      d->forks != atomic_load_explicit(&forks_seen, memory_order_relaxed))
    take_identity(d);
  if (rc == EOWNERDEAD) {
    /* holder is the dead one's, or zero if it died before writing it. A
     * holder of this process is a thread that ended inside a call (the
     * process lives on): only another process is taken for dead. */
    if (d->sh->holder.pid != 0 && d->sh->holder.pid != d->self.pid)
      d->sh->dead_holder = d->sh->holder;
    recover(d);
    rc = pthread_mutex_consistent(&d->sh->lock);
  }
  if (rc == ENOTRECOVERABLE)
    return errtext_fail(why, cap, ECC_ERR_REGION, "directory: its lock cannot be recovered");
  if (rc != 0)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "directory: lock failed (%s)", strerror(rc));
  d->sh->holder.start_ticks = d->self.start_ticks;
  __atomic_store_n(&d->sh->holder.pid, d->self.pid, __ATOMIC_RELAXED);
  /* Hints only: a count someone overwrote would index past the list. */
  if (d->sh->n_gaps > DIR_GAPS)
    d->sh->n_gaps = 0;
  return ECC_OK;
}

/* holder is cleared before the unlock: a later holder that dies before it
 * writes its own leaves zero, never a live process's identity. */
static void dir_unlock(struct dir *d)
{
  __atomic_store_n(&d->sh->holder.pid, 0, __ATOMIC_RELAXED);
  d->sh->holder.start_ticks = 0;
  pthread_mutex_unlock(&d->sh->lock);
  wake_if_due();
}

/* ---- format and attach --------------------------------------------------- */

static int init_lock(pthread_mutex_t *m)
{
  pthread_mutexattr_t a;
  int rc = pthread_mutexattr_init(&a);
  if (rc != 0)
    return rc;
  rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  if (rc == 0)
    rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  if (rc == 0)
    rc = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return rc;
}

/* splitmix64's finalizer: every bit of x moves about half of the result's. */
static uint64_t mix64(uint64_t x)
{
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The format's instance id: from getrandom, which a kernel without it or
 * not yet seeded at boot may refuse; then from the clocks, the pid and the
 * address, no secret but still unlike an earlier format's. Never 0, which
 * dir_instance keeps for "not attached". */
static uint64_t new_instance(const void *mem)
{
  uint64_t v = 0;
  ssize_t n;
  do
    n = getrandom(&v, sizeof(v), GRND_NONBLOCK);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(v)) {
    struct timespec wall, mono;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    v = mix64((uint64_t)wall.tv_sec * 1000000000ull + (uint64_t)wall.tv_nsec) ^
        mix64((uint64_t)mono.tv_nsec << 20 ^ (uint64_t)getpid()) ^ mix64((uintptr_t)mem);
  }
  return v != 0 ? v : 1;
}

/* The first generation of entry slot s (even i = 2s) or pin slot p (odd
 * i = 2p + 1): a ref of an earlier format matches it by chance alone. */
static uint32_t first_gen(uint64_t instance, uint64_t i)
{
  return (uint32_t)(mix64(instance + (i + 1) * 0x9e3779b97f4a7c15ull) >> 32);
}

static void seed_generations(struct dir_shared *sh)
{
  for (uint32_t s = 0; s < sh->max_entries; s++)
    atomic_store_explicit(&slot_at(sh, s)->word,
                          word_make(DIR_STATE_FREE, first_gen(sh->instance, 2ull * s)),
                          memory_order_relaxed);
  for (uint32_t p = 0; p < sh->max_pins; p++)
    atomic_store_explicit(&pin_at(sh, p)->word,
                          word_make(PIN_FREE, first_gen(sh->instance, 2ull * p + 1)),
                          memory_order_relaxed);
}

int dir_format(void *mem, size_t bytes, const struct dir_params *p, char *why, size_t why_cap)
{
  struct dir_params r;
  struct layout l;
  if (mem == NULL || ((uintptr_t)mem % ALIGN) != 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: memory NULL or not %u-aligned",
                        ALIGN);
  if (!params_resolve(p, &r))
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: bad parameters");
  if (layout_of(&r, &l) > bytes)
    return errtext_fail(why, why_cap, ECC_ERR_RANGE, "directory: needs %llu bytes, given %zu",
                        (unsigned long long)l.total, bytes);
  struct dir_shared *sh = mem;
  memset(mem, 0, (size_t)l.total);
  sh->version = DIR_LAYOUT_VERSION;
  sh->header_bytes = sizeof(*sh);
  sh->num_blocks = r.num_blocks;
  sh->max_entries = r.max_entries;
  sh->max_pins = r.max_pins;
  sh->index_cap = l.index_cap;
  sh->block_size = r.block_size;
  sh->reserve_timeout_ns = r.reserve_timeout_ns;
  sh->pin_timeout_ns = r.pin_timeout_ns;
  sh->off_entries = l.off_entries;
  sh->off_pins = l.off_pins;
  sh->off_map = l.off_map;
  sh->off_index = l.off_index;
  sh->off_events = l.off_events;
  sh->policy = r.policy;
  sh->event_slots = r.event_slots;
  sh->total = l.total;
  ev_format((char *)mem + l.off_events, r.event_slots);
  sh->instance = new_instance(mem);
  seed_generations(sh);
  int rc = init_lock(&sh->lock);
  if (rc != 0)
    return errtext_fail(why, why_cap, ECC_ERR_SYSTEM, "directory: lock init failed (%s)",
                        strerror(rc));
  /* The magic last: a directory formatted halfway is refused by attach. */
  atomic_thread_fence(memory_order_release);
  memcpy(sh->magic, DIR_MAGIC, sizeof(sh->magic));
  return ECC_OK;
}

#define CHECK_FIELD(name, want)                                                       \
  do {                                                                                \
    if ((uint64_t)sh->name != (uint64_t)(want))                                       \
      return errtext_fail(why, cap, ECC_ERR_REGION,                                   \
                          "directory: header field %s is %llu, expected %llu", #name, \
                          (unsigned long long)sh->name, (unsigned long long)(want));  \
  } while (0)

static int header_matches(const struct dir_shared *sh, const struct dir_params *r,
                          const struct layout *l, char *why, size_t cap)
{
  if (memcmp(sh->magic, DIR_MAGIC, sizeof(sh->magic)) != 0)
    return errtext_fail(why, cap, ECC_ERR_REGION, "directory: no magic (not formatted)");
  CHECK_FIELD(version, DIR_LAYOUT_VERSION);
  CHECK_FIELD(header_bytes, sizeof(*sh));
  CHECK_FIELD(num_blocks, r->num_blocks);
  CHECK_FIELD(block_size, r->block_size);
  CHECK_FIELD(max_entries, r->max_entries);
  CHECK_FIELD(max_pins, r->max_pins);
  CHECK_FIELD(reserve_timeout_ns, r->reserve_timeout_ns);
  CHECK_FIELD(pin_timeout_ns, r->pin_timeout_ns);
  CHECK_FIELD(index_cap, l->index_cap);
  CHECK_FIELD(off_entries, l->off_entries);
  CHECK_FIELD(off_pins, l->off_pins);
  CHECK_FIELD(off_map, l->off_map);
  CHECK_FIELD(off_index, l->off_index);
  CHECK_FIELD(policy, r->policy);
  CHECK_FIELD(event_slots, r->event_slots);
  CHECK_FIELD(off_events, l->off_events);
  CHECK_FIELD(total, l->total);
  return ECC_OK;
}

int dir_attach(struct dir *d, void *mem, size_t bytes, const struct dir_params *p, char *why,
               size_t why_cap)
{
  struct dir_params r;
  struct layout l;
  if (d == NULL || mem == NULL || ((uintptr_t)mem % ALIGN) != 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: NULL or misaligned memory");
  memset(d, 0, sizeof(*d));
  if (!params_resolve(p, &r))
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: bad parameters");
  if (layout_of(&r, &l) > bytes)
    return errtext_fail(why, why_cap, ECC_ERR_REGION, "directory: %zu bytes mapped, %llu needed",
                        bytes, (unsigned long long)l.total);
  atomic_thread_fence(memory_order_acquire);
  int rc = header_matches(mem, &r, &l, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  d->sh = mem;
  d->bytes = bytes;
  d->lock_timeout_ns = r.lock_timeout_ns != 0 ? r.lock_timeout_ns : DIR_LOCK_TIMEOUT_DEFAULT_NS;
  memcpy(&d->shape, mem, sizeof(d->shape));
  pthread_once(&forks_once, watch_forks);
  take_identity(d);
  return ECC_OK;
}

uint64_t dir_instance(const struct dir *d)
{
  return d != NULL && d->sh != NULL ? d->shape.instance : 0;
}

/* ---- allocation ------------------------------------------------------------ */

struct request {
  const char *key;
  size_t len;
  uint64_t hash;
  uint64_t nbytes;
  uint32_t n_blocks;
  uint64_t now;
  uint32_t damaged;     /* block + 1 the map gave to a damaged entry, if met */
  struct dir_meta meta; /* what a new entry records */
};

enum occupant { OCC_FREE, OCC_EVICTABLE, OCC_MARKED, OCC_HELD };

/* Whether one of entry e's runs holds block b; *end: that run's end. */
static bool in_run(const struct dir_slot *e, uint32_t b, uint32_t *end)
{
  for (uint32_t r = 0; r < e->n_runs && r < DIR_MAX_RUNS; r++)
    if (b >= e->runs[r].first && b - e->runs[r].first < e->runs[r].count) {
      *end = e->runs[r].first + e->runs[r].count;
      return true;
    }
  return false;
}

/* End (exclusive) of the run of entry e that holds block b, in the map. */
static uint32_t run_end(const struct dir_shared *sh, const struct dir_slot *e, uint32_t b)
{
  uint32_t end;
  if (!in_run(e, b, &end) || end <= b || end > sh->num_blocks)
    return b + 1;
  return end;
}

/* The slot the map gives block b to: NO_SLOT if the block is free, and
 * MAP_DAMAGED if it names a slot past the table, a free one, or one whose
 * runs or size are not whole. */
#define MAP_DAMAGED (NO_SLOT - 1)

static uint32_t map_slot(const struct dir_shared *sh, uint32_t b)
{
  uint32_t o = block_map(sh)[b];
  if (o == 0)
    return NO_SLOT;
  if (o > sh->max_entries || !slot_live(slot_at(sh, o - 1)) || !runs_valid(sh, slot_at(sh, o - 1)))
    return MAP_DAMAGED;
  return o - 1;
}

/* The error of a reservation that found no room and passed block b, which
 * the map gives to a damaged entry. */
static int map_damaged(const struct dir_shared *sh, uint32_t b, char *why, size_t cap)
{
  uint32_t o = block_map(sh)[b];
  if (o != 0 && o <= sh->max_entries && slot_live(slot_at(sh, o - 1)))
    return slot_damaged(sh, o - 1, why, cap);
  return errtext_fail(why, cap, ECC_ERR_REGION,
                      "directory: block %u is mapped to %u (slot + 1), not a live slot: the "
                      "region's memory was overwritten; make the region again",
                      b, o);
}

/* What holds block b (its slot in *slot, or NO_SLOT), reclaiming it first
 * when its holder is a dead or timed-out reservation or its pins are all
 * stale. A damaged holder is held: the sweep passes it, noting it in q. */
static enum occupant occupant_of(struct dir *d, struct request *q, uint32_t b, uint32_t *slot)
{
  struct dir_shared *sh = d->sh;
  uint32_t s = map_slot(sh, b);
  *slot = s;
  if (s == NO_SLOT)
    return OCC_FREE;
  if (s == MAP_DAMAGED) {
    if (q->damaged == 0)
      q->damaged = b + 1;
    *slot = NO_SLOT;
    return OCC_HELD;
  }
  struct dir_slot *e = slot_at(sh, s);
  uint64_t now = q->now;
  if (slot_state(e) == DIR_STATE_RESERVED) {
    if (!reservation_stale(d, e, now, false))
      return OCC_HELD;
    reclaim_entry(sh, s);
    *slot = NO_SLOT;
    return OCC_FREE;
  }
  /* A scan of the pin table per pinned entry met would cost a sweep that
   * meets many of them dearly: the whole table is scanned for stale pins
   * at most once per ALIVE_TTL_NS, the delay the notes of live owners
   * already allow. */
  if (e->pins > 0 && (now < sh->pins_scanned_ns || now - sh->pins_scanned_ns >= ALIVE_TTL_NS))
    drop_stale_pins(d, now, false);
  if (e->pins > 0)
    return OCC_HELD;
  bool kept = sh->policy == DIR_POLICY_COST ? policy_keeps(e->credit) : e->marked != 0;
  return kept ? OCC_MARKED : OCC_EVICTABLE;
}

/* The hand passes a kept entry: "lru" clears its mark, "cost" spends one
 * quantum of its credit, or all of it once the hand has gone round. */
static void slot_pass(struct dir_shared *sh, struct dir_slot *e, bool spend_all)
{
  if (sh->policy == DIR_POLICY_COST)
    e->credit = policy_pass(e->credit, spend_all);
  else
    e->marked = 0;
}

/* The sweep's limit in turns of the hand: "lru" finds every mark cleared
 * after one, "cost" every credit after two (the first spends a quantum,
 * the second the rest). */
static uint64_t sweep_turns(const struct dir_shared *sh)
{
  return sh->policy == DIR_POLICY_COST ? 3 : 2;
}

/* The end of the run of free blocks at p, or of its first `enough` blocks:
 * one tight loop over the map, where the sweep would otherwise take a free
 * block per step (a miss met some 700 of them). The limit keeps a nearly
 * empty region from costing a scan of all its free blocks per reserve. */
static uint32_t free_run_end(const struct dir_shared *sh, uint32_t p, uint32_t enough)
{
  const uint32_t *map = block_map(sh);
  uint32_t end = p + 1, stop = sh->num_blocks - p > enough ? p + enough : sh->num_blocks;
  while (end < stop && map[end] == 0)
    end++;
  return end;
}

/* The free runs of a window that the sweep abandons are left behind the
 * hand: they become gap hints. */
struct passed {
  struct dir_run free[4];
  uint32_t n;
};

static void passed_keep(struct passed *w, uint32_t first, uint32_t count)
{
  if (w->n < 4)
    w->free[w->n++] = (struct dir_run){first, count};
}

static void passed_note(struct dir_shared *sh, struct passed *w)
{
  for (uint32_t i = 0; i < w->n; i++)
    gap_note(sh, w->free[i].first, w->free[i].count);
  w->n = 0;
}

/* The clock sweep: from the hand, the first window of n blocks that are
 * free or held by evictable entries. A marked entry in the way loses its
 * mark and is passed, as is a held one; the window restarts past them.
 * Windows never wrap (a run is contiguous). Marks and credits spent stay
 * spent even if the sweep fails, as does what it reclaimed from dead
 * owners: the only changes a refused reservation makes (neither evicts a
 * live process's entry). */
static bool sweep_window(struct dir *d, struct request *q, uint32_t *first)
{
  struct dir_shared *sh = d->sh;
  uint32_t nb = sh->num_blocks, p = sh->hand % nb, start = p, len = 0, n = q->n_blocks;
  struct passed w = {.n = 0};
  uint64_t limit = sweep_turns(sh) * nb + n;
  for (uint64_t budget = limit; budget > 0;) {
    if (p >= nb) {
      passed_note(sh, &w);
      p = start = 0;
      len = 0;
    }
    uint32_t s;
    enum occupant occ = occupant_of(d, q, p, &s);
    uint32_t end = occ == OCC_FREE ? free_run_end(sh, p, n - len)
                   : s == NO_SLOT  ? p + 1
                                   : run_end(sh, slot_at(sh, s), p);
    if (occ == OCC_FREE || occ == OCC_EVICTABLE) {
      if (len + (end - p) >= n) {
        *first = start;
        return true;
      }
      if (occ == OCC_FREE)
        passed_keep(&w, p, end - p);
      len += end - p;
    } else {
      if (occ == OCC_MARKED)
        slot_pass(sh, slot_at(sh, s), limit - budget >= nb);
      passed_note(sh, &w);
      start = end;
      len = 0;
    }
    budget -= budget < end - p ? budget : end - p;
    p = end;
  }
  return false;
}

/* Whether block b could be taken by the fallback: free, or held by a ready
 * unpinned entry (marked or not: the sweep has cleared the marks it met).
 * The map's value is checked against the table only, this being a loop
 * over every block: a damaged entry it evicts is dropped by a map_set that
 * writes nothing outside the map. */
static bool block_available(const struct dir_shared *sh, uint32_t b)
{
  uint32_t o = block_map(sh)[b];
  if (o == 0)
    return true;
  if (o > sh->max_entries)
    return false;
  const struct dir_slot *e = slot_at(sh, o - 1);
  return slot_state(e) == DIR_STATE_READY && e->pins == 0;
}

/* Keeps the DIR_MAX_RUNS longest segments, longest first. */
static void keep_longest(struct dir_run *top, uint32_t *n_top, struct dir_run seg)
{
  uint32_t i = *n_top < DIR_MAX_RUNS ? (*n_top)++ : DIR_MAX_RUNS;
  if (i == DIR_MAX_RUNS) {
    if (seg.count <= top[DIR_MAX_RUNS - 1].count)
      return;
    i = DIR_MAX_RUNS - 1;
  }
  for (; i > 0 && top[i - 1].count < seg.count; i--)
    top[i] = top[i - 1];
  top[i] = seg;
}

/* The fallback: the fewest runs that cover n blocks, from the longest
 * available segments (the k longest cover the most any k can); the last
 * run comes from the shortest of the kept segments that holds the rest. */
static bool gather_runs(const struct dir_shared *sh, uint32_t n, struct dir_run *runs,
                        uint32_t *n_runs)
{
  struct dir_run top[DIR_MAX_RUNS];
  uint32_t n_top = 0, k = 0, have = 0;
  for (uint32_t b = 0; b < sh->num_blocks;) {
    uint32_t e = b;
    while (e < sh->num_blocks && block_available(sh, e))
      e++;
    if (e > b)
      keep_longest(top, &n_top, (struct dir_run){b, e - b});
    b = e + 1;
  }
  while (k < n_top && have + top[k].count < n)
    have += top[k++].count;
  if (k == n_top)
    return false;
  uint32_t best = k;
  for (uint32_t i = k + 1; i < n_top; i++)
    if (top[i].count >= n - have)
      best = i;
  memcpy(runs, top, k * sizeof(*runs));
  runs[k] = (struct dir_run){top[best].first, n - have};
  *n_runs = k + 1;
  return true;
}

static bool runs_cover_entry(const struct dir_shared *sh, const struct dir_run *runs,
                             uint32_t n_runs)
{
  for (uint32_t r = 0; r < n_runs; r++)
    for (uint32_t b = 0; b < runs[r].count; b++)
      if (block_map(sh)[runs[r].first + b] != 0)
        return true;
  return false;
}

/* With the entry table full and a plan that evicts nothing, one evictable
 * entry is chosen by the clock rule to give up its slot. */
static uint32_t pick_victim(struct dir *d, struct request *q)
{
  struct dir_shared *sh = d->sh;
  uint32_t nb = sh->num_blocks, p = sh->hand % nb, s;
  uint64_t limit = sweep_turns(sh) * nb;
  for (uint64_t budget = limit; budget > 0; budget--) {
    enum occupant occ = occupant_of(d, q, p, &s);
    if (occ == OCC_EVICTABLE)
      return s;
    if (occ == OCC_MARKED)
      slot_pass(sh, slot_at(sh, s), limit - budget >= nb);
    if (sh->entries < sh->max_entries)
      return NO_SLOT; /* a reclaim on the way freed a slot */
    p = (p + 1) % nb;
  }
  return NO_SLOT;
}

/* The blocks of evicted entry e before the window w (the window starts
 * inside it) are left behind the hand; those after it lie at the hand. */
static void note_outside(struct dir_shared *sh, const struct dir_slot *e, struct dir_run w)
{
  for (uint32_t r = 0; r < e->n_runs && r < DIR_MAX_RUNS; r++)
    if (e->runs[r].first < w.first) {
      uint32_t end = e->runs[r].first + e->runs[r].count;
      gap_note(sh, e->runs[r].first, (end < w.first ? end : w.first) - e->runs[r].first);
    }
}

/* A block the map gives to no live slot (damage) is simply taken: the new
 * entry's map_set overwrites it. */
static void evict_runs(struct dir_shared *sh, const struct dir_run *runs, uint32_t n_runs)
{
  const uint32_t *map = block_map(sh);
  for (uint32_t r = 0; r < n_runs; r++) {
    struct dir_run w = runs[r];
    for (uint32_t b = w.first; b < w.first + w.count; b++) {
      if (map[b] == 0 || map[b] > sh->max_entries || !slot_live(slot_at(sh, map[b] - 1)))
        continue;
      uint32_t s = map[b] - 1;
      const struct dir_slot *e = slot_at(sh, s);
      uint32_t end = run_end(sh, e, b);
      note_outside(sh, e, w);
      note_event(sh, e, ECC_EVENT_EVICTED);
      entry_drop(sh, s);
      sh->evictions++;
      b = end - 1;
    }
  }
}

/* ---- reserve ----------------------------------------------------------------- */

static int check_key(const char *key, size_t *len, char *why, size_t cap)
{
  if (key == NULL)
    return errtext_fail(why, cap, ECC_ERR_INVALID, "directory: NULL key");
  *len = strnlen(key, DIR_KEY_MAX + 1);
  if (*len == 0)
    return errtext_fail(why, cap, ECC_ERR_INVALID, "directory: empty key");
  if (*len > DIR_KEY_MAX)
    return errtext_fail(why, cap, ECC_ERR_INVALID, "directory: key '%.32s...' longer than %d bytes",
                        key, DIR_KEY_MAX);
  return ECC_OK;
}

/* Writes the new entry's fields while its slot is free, then publishes the
 * slot with one release store of RESERVED; the map and index follow. */
static uint32_t entry_create(struct dir *d, const struct request *q, const struct dir_run *runs,
                             uint32_t n_runs)
{
  struct dir_shared *sh = d->sh;
  uint32_t s = free_slot(sh);
  if (s == NO_SLOT)
    return NO_SLOT; /* the counts were damaged: plan_blocks trusted them */
  struct dir_slot *e = slot_at(sh, s);
  uint64_t w = atomic_load_explicit(&e->word, memory_order_relaxed);
  e->nbytes = q->nbytes;
  e->hash = q->hash;
  e->reserved_ns = e->used_ns = q->now;
  e->owner = d->self;
  e->n_blocks = q->n_blocks;
  e->n_runs = n_runs;
  e->pins = 0;
  /* A new entry is the most recently used one, as LRU would have it: the
   * hand passes it once before it may be evicted. */
  e->marked = 1;
  e->claimed = 0;
  e->hits = 0;
  e->credit = 0;
  e->meta = q->meta;
  memset(&e->writer, 0, sizeof(e->writer));
  memset(e->runs, 0, sizeof(e->runs));
  memcpy(e->runs, runs, n_runs * sizeof(*runs));
  memset(e->key, 0, sizeof(e->key));
  memcpy(e->key, q->key, q->len);
  atomic_store_explicit(&e->word, word_make(DIR_STATE_RESERVED, word_gen(w)), memory_order_release);
  map_set(sh, e, s + 1);
  index_insert(sh, s);
  sh->entries++;
  sh->blocks_used += q->n_blocks;
  return s;
}

/* The key is there: ready (a use: marked) or being written. A reservation
 * whose writer is dead is reclaimed instead, and the caller reserves anew. */
static bool dedup(struct dir *d, uint32_t s, const struct request *q, int *outcome)
{
  struct dir_shared *sh = d->sh;
  struct dir_slot *e = slot_at(sh, s);
  if (slot_state(e) == DIR_STATE_RESERVED && reservation_stale(d, e, q->now, false)) {
    reclaim_entry(sh, s);
    return false;
  }
  if (slot_state(e) == DIR_STATE_READY) {
    slot_hit(sh, e, q->now);
    *outcome = DIR_FOUND_READY;
  } else {
    *outcome = DIR_FOUND_WRITING;
  }
  sh->dedup_hits++;
  return true;
}

static int entries_miscounted(const struct dir_shared *sh, char *why, size_t cap)
{
  return errtext_fail(why, cap, ECC_ERR_REGION,
                      "directory: %llu of its %u entry slots are counted live, yet none is free: "
                      "the region's memory was overwritten; make the region again",
                      (unsigned long long)sh->entries, sh->max_entries);
}

/* The entry count says a slot is free: whether one is (damage aside, yes). */
static bool slot_free_found(const struct dir_shared *sh)
{
  for (uint32_t n = 0; n < sh->max_entries; n++)
    if (!slot_live(slot_at(sh, (sh->slot_cursor + n) % sh->max_entries)))
      return true;
  return false;
}

/* Chooses the blocks and, if the entry table is full and they free no
 * slot, the entry that gives its slot up; evicts nothing. */
static int plan_blocks(struct dir *d, struct request *q, struct dir_run *runs, uint32_t *n_runs,
                       bool *in_gap, uint32_t *victim, char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  *n_runs = 1;
  runs[0].count = q->n_blocks;
  *in_gap = gap_take(sh, q->n_blocks, &runs[0].first);
  if (!*in_gap && !sweep_window(d, q, &runs[0].first) &&
      !gather_runs(sh, q->n_blocks, runs, n_runs))
    return errtext_fail(
        why, cap, ECC_ERR_BUSY,
        "directory: no room for key '%s' (%u blocks) even after eviction: the rest is "
        "reserved or pinned",
        q->key, q->n_blocks);
  *victim = NO_SLOT;
  if (sh->entries == sh->max_entries && !runs_cover_entry(sh, runs, *n_runs)) {
    *victim = pick_victim(d, q);
    if (*victim == NO_SLOT && sh->entries == sh->max_entries)
      return errtext_fail(why, cap, ECC_ERR_BUSY,
                          "directory: no entry slot for key '%s': all %u are reserved or pinned",
                          q->key, sh->max_entries);
  }
  if (*victim == NO_SLOT && sh->entries < sh->max_entries && !slot_free_found(sh))
    return entries_miscounted(sh, why, cap);
  return ECC_OK;
}

static int reserve_locked(struct dir *d, struct request *q, int *outcome,
                          struct dir_entry_info *info, char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  struct dir_run runs[DIR_MAX_RUNS];
  uint32_t n_runs, victim, s = index_find(sh, q->key, q->hash);
  bool in_gap;
  if (s != NO_SLOT && !runs_valid(sh, slot_at(sh, s)))
    return slot_damaged(sh, s, why, cap);
  if (s != NO_SLOT && dedup(d, s, q, outcome)) {
    fill_info(sh, s, info);
    return ECC_OK;
  }
  /* The size matters only once the key is known to be absent. */
  uint64_t n = (q->nbytes - 1) / sh->block_size + 1;
  if (n > sh->num_blocks)
    return errtext_fail(why, cap, ECC_ERR_RANGE,
                        "directory: key '%s' needs %llu blocks, the region has %u", q->key,
                        (unsigned long long)n, sh->num_blocks);
  q->n_blocks = (uint32_t)n;
  int rc = plan_blocks(d, q, runs, &n_runs, &in_gap, &victim, why, cap);
  if (rc == ECC_ERR_BUSY && q->damaged != 0)
    rc = map_damaged(sh, q->damaged - 1, why, cap);
  if (rc != ECC_OK) {
    sh->full += rc == ECC_ERR_BUSY;
    return rc;
  }
  /* Evictions are stored before the new entry's state: whoever sees the
   * new entry (a rebuild included) sees its blocks released by the old. */
  evict_runs(sh, runs, n_runs);
  if (victim != NO_SLOT && slot_live(slot_at(sh, victim))) {
    note_event(sh, slot_at(sh, victim), ECC_EVENT_EVICTED);
    entry_free(sh, victim);
    sh->evictions++;
  }
  s = entry_create(d, q, runs, n_runs);
  if (s == NO_SLOT)
    return entries_miscounted(sh, why, cap);
  sh->reservations++;
  /* A gap lies behind the hand, which stays where it was. */
  if (in_gap)
    gap_used(sh, runs[0].first, runs[0].count);
  else
    sh->hand = (runs[n_runs - 1].first + runs[n_runs - 1].count) % sh->num_blocks;
  *outcome = DIR_RESERVED;
  fill_info(sh, s, info);
  return ECC_OK;
}

int dir_reserve(struct dir *d, const char *key, uint64_t nbytes, int *outcome,
                struct dir_entry_info *info, char *why, size_t why_cap)
{
  return dir_reserve_ex(d, key, nbytes, NULL, outcome, info, why, why_cap);
}

int dir_reserve_ex(struct dir *d, const char *key, uint64_t nbytes, const struct dir_meta *meta,
                   int *outcome, struct dir_entry_info *info, char *why, size_t why_cap)
{
  struct request q = {.key = key, .nbytes = nbytes};
  if (meta != NULL)
    q.meta = *meta;
  int rc = check_key(key, &q.len, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  if (outcome == NULL || nbytes == 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: key '%s': %s", key,
                        nbytes == 0 ? "zero bytes" : "NULL outcome");
  if ((rc = dir_lock(d, why, why_cap)) != ECC_OK)
    return rc;
  q.hash = key_hash(key, q.len);
  q.now = ecc_now_ns();
  rc = reserve_locked(d, &q, outcome, info, why, why_cap);
  dir_unlock(d);
  return rc;
}

/* ---- publish, abort, remove -------------------------------------------------- */

/* The entry a ref names (*out), if its generation still matches and it is
 * whole: else ECC_ERR_CLOSED or ECC_ERR_REGION, with the reason in why. */
static int ref_entry(struct dir *d, struct dir_ref ref, struct dir_slot **out, char *why,
                     size_t cap)
{
  struct dir_shared *sh = d->sh;
  *out = NULL;
  if (ref.slot >= sh->max_entries)
    return errtext_fail(why, cap, ECC_ERR_CLOSED, "directory: slot %u past the table (%u)",
                        ref.slot, sh->max_entries);
  struct dir_slot *e = slot_at(sh, ref.slot);
  uint64_t w = atomic_load_explicit(&e->word, memory_order_acquire);
  if (word_state(w) == DIR_STATE_FREE || word_gen(w) != ref.gen)
    return errtext_fail(why, cap, ECC_ERR_CLOSED,
                        "directory: slot %u generation %u is gone (now %u, %s)", ref.slot, ref.gen,
                        word_gen(w), word_state(w) == DIR_STATE_FREE ? "free" : "reused");
  /* The ref's own entry, but whole? Its runs are about to be used. */
  if (!slot_valid(sh, e))
    return slot_damaged(sh, ref.slot, why, cap);
  *out = e;
  return ECC_OK;
}

/* Publish or abort of the live entry e that ref names. */
static int finish_locked(struct dir *d, struct dir_slot *e, struct dir_ref ref, bool abort_it,
                         char *why, size_t cap)
{
  if (slot_state(e) != DIR_STATE_RESERVED)
    return errtext_fail(why, cap, ECC_ERR_INVALID,
                        "directory: key '%s' (slot %u) is already published", e->key, ref.slot);
  if (e->claimed && !owner_alive(d, &e->writer, ecc_now_ns(), true)) {
    /* The process saving it died with its copy: nothing will settle it, and
     * its blocks hold what it wrote before. Freed, as the sweep would. */
    int32_t pid = e->writer.pid;
    reclaim_entry(d->sh, ref.slot);
    if (abort_it)
      return ECC_OK;
    return errtext_fail(why, cap, ECC_ERR_CLOSED,
                        "directory: slot %u: pid %d died saving it; its reservation is "
                        "reclaimed, reserve the key again",
                        ref.slot, (int)pid);
  }
  if (e->claimed)
    return errtext_fail(why, cap, ECC_ERR_BUSY,
                        "directory: key '%s' (slot %u) is being saved; its completion settles it",
                        e->key, ref.slot);
  if (abort_it) {
    entry_free(d->sh, ref.slot);
    return ECC_OK;
  }
  /* Its blocks were written before this call. */
  entry_publish(d->sh, e, ref);
  return ECC_OK;
}

/* Publish or abort: both need a live reservation of that ref. */
static int finish_reservation(struct dir *d, struct dir_ref ref, bool abort_it, char *why,
                              size_t cap)
{
  int rc = dir_lock(d, why, cap);
  if (rc != ECC_OK)
    return rc;
  struct dir_slot *e;
  rc = ref_entry(d, ref, &e, why, cap);
  if (rc == ECC_OK)
    rc = finish_locked(d, e, ref, abort_it, why, cap);
  dir_unlock(d);
  return rc;
}

int dir_publish(struct dir *d, struct dir_ref ref, char *why, size_t why_cap)
{
  return finish_reservation(d, ref, false, why, why_cap);
}

int dir_abort(struct dir *d, struct dir_ref ref, char *why, size_t why_cap)
{
  return finish_reservation(d, ref, true, why, why_cap);
}

int dir_remove(struct dir *d, const char *key, char *why, size_t why_cap)
{
  size_t len;
  int rc = check_key(key, &len, why, why_cap);
  if (rc != ECC_OK || (rc = dir_lock(d, why, why_cap)) != ECC_OK)
    return rc;
  struct dir_shared *sh = d->sh;
  uint32_t s = index_find(sh, key, key_hash(key, len));
  struct dir_slot *e = s != NO_SLOT ? slot_at(sh, s) : NULL;
  if (e == NULL)
    rc = errtext_fail(why, why_cap, ECC_ERR_RANGE, "directory: key '%s' is not there", key);
  else if (!runs_valid(sh, e))
    rc = slot_damaged(sh, s, why, why_cap);
  else if (slot_state(e) != DIR_STATE_READY)
    rc = errtext_fail(why, why_cap, ECC_ERR_BUSY, "directory: key '%s' (slot %u) is being written",
                      key, s);
  else if (e->pins > 0)
    rc = errtext_fail(why, why_cap, ECC_ERR_BUSY, "directory: key '%s' (slot %u) has %u pins", key,
                      s, e->pins);
  if (rc == ECC_OK) {
    note_event(sh, e, ECC_EVENT_REMOVED);
    entry_free(sh, s);
    sh->removals++;
  }
  dir_unlock(d);
  return rc;
}

/* ---- lookup and pins ------------------------------------------------------- */

static uint32_t ready_slot(const struct dir_shared *sh, const char *key)
{
  uint32_t s = index_find(sh, key, key_hash(key, strlen(key)));
  return s != NO_SLOT && slot_state(slot_at(sh, s)) == DIR_STATE_READY ? s : NO_SLOT;
}

/* Pin fields first, then the one store that makes the pin live; the
 * entry's count follows (derived: recounted on rebuild). False if no pin
 * slot is free, which pins_live had promised (it was overwritten). */
static bool pin_take(struct dir *d, uint32_t s, uint32_t ranks, uint64_t now,
                     struct dir_pin_ref *out)
{
  struct dir_shared *sh = d->sh;
  uint32_t p = free_pin(sh);
  if (p == NO_SLOT)
    return false;
  struct dir_pin *pin = pin_at(sh, p);
  struct dir_slot *e = slot_at(sh, s);
  uint64_t w = atomic_load_explicit(&pin->word, memory_order_relaxed);
  pin->entry_slot = s;
  pin->entry_gen = word_gen(atomic_load_explicit(&e->word, memory_order_acquire));
  pin->ranks_left = ranks;
  pin->owner = d->self;
  pin->pinned_ns = now;
  atomic_store_explicit(&pin->word, word_make(PIN_LIVE, word_gen(w)), memory_order_release);
  e->pins++;
  sh->pins_live++;
  sh->pins++;
  *out = (struct dir_pin_ref){p, word_gen(w)};
  return true;
}

/* Whether the pins this call needs are free, reclaiming stale ones if not,
 * and the entries found whole: a refused lookup takes no pin and counts
 * nothing. */
static int pins_available(struct dir *d, const char *const *keys, size_t n, char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  uint64_t need = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t s = ready_slot(sh, keys[i]);
    if (s != NO_SLOT && !runs_valid(sh, slot_at(sh, s)))
      return slot_damaged(sh, s, why, cap);
    need += s != NO_SLOT;
  }
  if (sh->pins_live + need > sh->max_pins)
    reclaim_all(d, ecc_now_ns(), true);
  if (sh->pins_live + need > sh->max_pins)
    return errtext_fail(why, cap, ECC_ERR_BUSY, "directory: %llu pins needed, %llu of %u free",
                        (unsigned long long)need,
                        (unsigned long long)(sh->max_pins - sh->pins_live), sh->max_pins);
  return ECC_OK;
}

/* False if a pin could not be taken (see pin_take). */
static bool lookup_one(struct dir *d, const char *key, uint32_t ranks, uint64_t now, bool *found,
                       struct dir_entry_info *info, struct dir_pin_ref *pin)
{
  struct dir_shared *sh = d->sh;
  uint32_t s = ready_slot(sh, key);
  sh->lookups++;
  *found = false;
  memset(pin, 0, sizeof(*pin));
  if (info != NULL)
    memset(info, 0, sizeof(*info));
  if (s == NO_SLOT) {
    sh->misses++;
    return true;
  }
  if (!pin_take(d, s, ranks, now, pin))
    return false;
  slot_hit(sh, slot_at(sh, s), now);
  *found = true;
  fill_info(sh, s, info);
  sh->hits++;
  return true;
}

/* A lookup that found the pin table fuller than counted: the pins it took
 * are freed and its counts undone, as a refused lookup leaves them. */
static int lookup_undo(struct dir *d, const struct dir_counters *before, size_t done, bool *found,
                       struct dir_entry_info *info, struct dir_pin_ref *pins, char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  for (size_t i = 0; i < done; i++) {
    if (found[i]) {
      uint32_t e = pin_at(sh, pins[i].slot)->entry_slot;
      if (e < sh->max_entries)
        slot_at(sh, e)->hits--;
      pin_free(sh, pins[i].slot);
    }
    found[i] = false;
    memset(&pins[i], 0, sizeof(pins[i]));
    if (info != NULL)
      memset(&info[i], 0, sizeof(info[i]));
  }
  sh->lookups = before->lookups;
  sh->hits = before->hits;
  sh->misses = before->misses;
  sh->pins = before->pins;
  sh->encoder_us_saved = before->encoder_us_saved;
  return errtext_fail(why, cap, ECC_ERR_REGION,
                      "directory: %llu of its %u pin slots are counted live, yet none is free: "
                      "the region's memory was overwritten; make the region again",
                      (unsigned long long)sh->pins_live, sh->max_pins);
}

int dir_lookup(struct dir *d, const char *const *keys, size_t n, uint32_t ranks, bool *found,
               struct dir_entry_info *info, struct dir_pin_ref *pins, char *why, size_t why_cap)
{
  size_t len;
  if (n == 0)
    return ECC_OK;
  if (keys == NULL || found == NULL || pins == NULL || ranks == 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: lookup of %zu keys: %s", n,
                        ranks == 0 ? "zero ranks" : "NULL array");
  for (size_t i = 0; i < n; i++) {
    int rc = check_key(keys[i], &len, why, why_cap);
    if (rc != ECC_OK)
      return rc;
  }
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  rc = pins_available(d, keys, n, why, why_cap);
  uint64_t now = ecc_now_ns();
  struct dir_counters before = {.lookups = d->sh->lookups,
                                .hits = d->sh->hits,
                                .misses = d->sh->misses,
                                .pins = d->sh->pins,
                                .encoder_us_saved = d->sh->encoder_us_saved};
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    if (!lookup_one(d, keys[i], ranks, now, &found[i], info != NULL ? &info[i] : NULL, &pins[i]))
      rc = lookup_undo(d, &before, i + 1, found, info, pins, why, why_cap);
  dir_unlock(d);
  return rc;
}

static struct dir_pin *pin_ref_live(struct dir *d, struct dir_pin_ref ref, char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  if (ref.slot >= sh->max_pins) {
    errtext_fail(why, cap, ECC_ERR_CLOSED, "directory: pin slot %u past the table (%u)", ref.slot,
                 sh->max_pins);
    return NULL;
  }
  struct dir_pin *pin = pin_at(sh, ref.slot);
  uint64_t w = atomic_load_explicit(&pin->word, memory_order_acquire);
  if (word_state(w) != PIN_LIVE || word_gen(w) != ref.gen) {
    errtext_fail(why, cap, ECC_ERR_CLOSED, "directory: pin slot %u generation %u is gone (now %u)",
                 ref.slot, ref.gen, word_gen(w));
    return NULL;
  }
  return pin;
}

/* The slot of the ready entry a live pin holds, checked whole: ECC_OK,
 * ECC_ERR_CLOSED for a stale pin (or one naming no ready entry, which only
 * damage leaves), ECC_ERR_REGION for a damaged entry. */
static int pinned_entry(struct dir *d, struct dir_pin_ref ref, uint32_t *slot, char *why,
                        size_t cap)
{
  struct dir_pin *pin = pin_ref_live(d, ref, why, cap);
  if (pin == NULL)
    return ECC_ERR_CLOSED;
  struct dir_slot *e;
  int rc = ref_entry(d, (struct dir_ref){pin->entry_slot, pin->entry_gen}, &e, why, cap);
  if (rc == ECC_ERR_CLOSED || (rc == ECC_OK && slot_state(e) != DIR_STATE_READY))
    return errtext_fail(why, cap, ECC_ERR_CLOSED, "directory: pin slot %u names no ready entry",
                        ref.slot);
  if (rc == ECC_OK)
    *slot = pin->entry_slot;
  return rc;
}

int dir_unpin_ranks(struct dir *d, struct dir_pin_ref ref, uint32_t ranks, char *why,
                    size_t why_cap)
{
  if (ranks == 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: unpin of 0 ranks");
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  struct dir_pin *pin = pin_ref_live(d, ref, why, why_cap);
  if (pin == NULL)
    rc = ECC_ERR_CLOSED;
  else if (pin->ranks_left > ranks)
    pin->ranks_left -= ranks;
  else
    pin_free(d->sh, ref.slot);
  dir_unlock(d);
  return rc;
}

int dir_unpin(struct dir *d, struct dir_pin_ref ref, char *why, size_t why_cap)
{
  return dir_unpin_ranks(d, ref, 1, why, why_cap);
}

static int range_in_runs(const struct dir_slot *e, uint32_t first, uint32_t count, char *why,
                         size_t cap)
{
  uint64_t end = (uint64_t)first + count;
  uint32_t stop;
  if (count == 0)
    return errtext_fail(why, cap, ECC_ERR_RANGE, "directory: empty range at block %u", first);
  for (uint64_t b = first; b < end; b = stop) {
    if (b >= UINT32_MAX || !in_run(e, (uint32_t)b, &stop))
      return errtext_fail(why, cap, ECC_ERR_RANGE, "directory: block %llu is not in key '%s'",
                          (unsigned long long)b, e->key);
  }
  return ECC_OK;
}

int dir_check_pinned(struct dir *d, struct dir_pin_ref ref, uint32_t first, uint32_t count,
                     char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  uint32_t s;
  rc = pinned_entry(d, ref, &s, why, why_cap);
  if (rc == ECC_OK)
    rc = range_in_runs(slot_at(d->sh, s), first, count, why, why_cap);
  dir_unlock(d);
  return rc;
}

/* ---- listing, counters, reclaiming ------------------------------------------ */

int dir_list(struct dir *d, void (*fn)(void *user, const struct dir_entry_info *e), void *user)
{
  struct dir_entry_info info;
  if (fn == NULL)
    return ECC_ERR_INVALID;
  int rc = dir_lock(d, NULL, 0);
  if (rc != ECC_OK)
    return rc;
  /* A damaged entry's runs would be handed on: the listing is refused. */
  for (uint32_t s = 0; s < d->sh->max_entries && rc == ECC_OK; s++)
    if (slot_live(slot_at(d->sh, s)) && !slot_valid(d->sh, slot_at(d->sh, s)))
      rc = ECC_ERR_REGION;
  for (uint32_t s = 0; s < d->sh->max_entries && rc == ECC_OK; s++)
    if (slot_live(slot_at(d->sh, s))) {
      fill_info(d->sh, s, &info);
      fn(user, &info);
    }
  dir_unlock(d);
  return rc;
}

/* Blocks of the map read per hold of the lock by largest_free_run. */
#define FREE_RUN_CHUNK 16384u

/* The longest run of free blocks, read a chunk of the map per hold of the
 * lock: a stats read must not stall every process of the region for a scan
 * of the whole map (1.5 ms at a million blocks). Runs may change between
 * chunks, so the figure is that of the moments each chunk was read. */
static int largest_free_run(struct dir *d, uint64_t *out)
{
  uint32_t nb = d->shape.num_blocks; /* fixed at format */
  uint64_t best = 0, len = 0;
  *out = 0;
  for (uint32_t from = 0; from < nb; from += FREE_RUN_CHUNK) {
    uint32_t to = nb - from < FREE_RUN_CHUNK ? nb : from + FREE_RUN_CHUNK;
    int rc = dir_lock(d, NULL, 0);
    if (rc != ECC_OK)
      return rc;
    const uint32_t *map = block_map(d->sh);
    for (uint32_t b = from; b < to; b++) {
      len = map[b] == 0 ? len + 1 : 0;
      best = len > best ? len : best;
    }
    dir_unlock(d);
  }
  *out = best;
  return ECC_OK;
}

int dir_get_counters(struct dir *d, struct dir_counters *out)
{
  memset(out, 0, sizeof(*out));
  int rc = dir_lock(d, NULL, 0);
  if (rc != ECC_OK)
    return rc;
  const struct dir_shared *sh = d->sh;
  out->entries = sh->entries;
  out->blocks_used = sh->blocks_used;
  out->blocks_free = sh->num_blocks - sh->blocks_used;
  out->pins_live = sh->pins_live;
  out->reservations = sh->reservations;
  out->dedup_hits = sh->dedup_hits;
  out->lookups = sh->lookups;
  out->hits = sh->hits;
  out->misses = sh->misses;
  out->evictions = sh->evictions;
  out->removals = sh->removals;
  out->pins = sh->pins;
  out->reclaimed = sh->reclaimed;
  out->full = sh->full;
  out->recoveries = sh->recoveries;
  out->waits = sh->waits;
  out->waits_ready = sh->waits_ready;
  out->waits_absent = sh->waits_absent;
  out->wait_timeouts = sh->wait_timeouts;
  out->encoder_us_saved = sh->encoder_us_saved;
  out->events = sh->events;
  out->restarts = sh->restarts;
  dir_unlock(d);
  return largest_free_run(d, &out->largest_free_run);
}

int dir_rebuild(struct dir *d, char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  recover(d);
  dir_unlock(d);
  return ECC_OK;
}

int dir_reclaim(struct dir *d, uint32_t *freed, char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  uint32_t n = reclaim_all(d, ecc_now_ns(), true);
  if (freed != NULL)
    *freed = n;
  dir_unlock(d);
  return ECC_OK;
}

/* ---- the cache: peek, single flight, events, restart ------------------------- */

static void peek_one(const struct dir_shared *sh, const char *key, struct dir_peeked *out)
{
  memset(out, 0, sizeof(*out));
  uint32_t s = index_find(sh, key, key_hash(key, strlen(key)));
  if (s == NO_SLOT)
    return;
  const struct dir_slot *e = slot_at(sh, s);
  out->state = (int)slot_state(e);
  out->pins = out->state == DIR_STATE_READY ? e->pins : 0;
  out->nbytes = e->nbytes;
  out->hits = e->hits;
  out->meta = e->meta;
}

int dir_peek(struct dir *d, const char *const *keys, size_t n, struct dir_peeked *out, char *why,
             size_t why_cap)
{
  size_t len;
  if (n == 0)
    return ECC_OK;
  if (keys == NULL || out == NULL)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: peek of %zu keys: NULL array",
                        n);
  for (size_t i = 0; i < n; i++) {
    int rc = check_key(keys[i], &len, why, why_cap);
    if (rc != ECC_OK)
      return rc;
  }
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  for (size_t i = 0; i < n; i++)
    peek_one(d->sh, keys[i], &out[i]);
  dir_unlock(d);
  return ECC_OK;
}

/* One dir_wait in progress. */
struct waiter {
  const char *key;
  size_t len;
  uint32_t ranks;
  bool slept;    /* counted in waits */
  uint32_t seen; /* the wake word when it last looked */
  struct dir_entry_info *info;
  struct dir_pin_ref *pin;
};

/* The key is ready: pinned for the waiter's ranks (a free pin found as
 * lookup finds one), used and counted. */
static int wait_found(struct dir *d, struct waiter *w, uint32_t s, uint64_t now, char *why,
                      size_t cap)
{
  struct dir_shared *sh = d->sh;
  if (w->ranks > 0) {
    if (sh->pins_live >= sh->max_pins)
      reclaim_all(d, now, true);
    if (sh->pins_live >= sh->max_pins)
      return errtext_fail(why, cap, ECC_ERR_BUSY,
                          "directory: key '%s' is ready but all %u pins "
                          "are taken",
                          w->key, sh->max_pins);
    if (!pin_take(d, s, w->ranks, now, w->pin))
      return errtext_fail(why, cap, ECC_ERR_REGION,
                          "directory: %llu of its %u pin slots are counted live, yet none is "
                          "free: the region's memory was overwritten; make the region again",
                          (unsigned long long)sh->pins_live, sh->max_pins);
  }
  slot_hit(sh, slot_at(sh, s), now);
  fill_info(sh, s, w->info);
  return ECC_OK;
}

/* One look under the lock: *over with *result when the wait has ended
 * (the entry ready, or nobody writing it: a dead or timed-out writer's
 * reservation is reclaimed, which wakes the other waiters); else the wake
 * word to sleep on is noted. `fresh` asks /proc rather than trusting a note
 * that the writer was lately alive. */
static int wait_look(struct dir *d, struct waiter *w, bool fresh, bool *over, int *result,
                     char *why, size_t cap)
{
  struct dir_shared *sh = d->sh;
  uint64_t now = ecc_now_ns();
  uint32_t s = index_find(sh, w->key, key_hash(w->key, w->len));
  *over = true;
  *result = DIR_WAIT_ABSENT;
  if (s == NO_SLOT)
    return ECC_OK;
  struct dir_slot *e = slot_at(sh, s);
  if (!runs_valid(sh, e))
    return slot_damaged(sh, s, why, cap);
  if (slot_state(e) == DIR_STATE_READY) {
    *result = DIR_WAIT_READY;
    return wait_found(d, w, s, now, why, cap);
  }
  if (reservation_stale(d, e, now, fresh)) {
    reclaim_entry(sh, s);
    return ECC_OK;
  }
  *over = false;
  w->seen = atomic_load_explicit(&sh->wake, memory_order_acquire);
  fill_info(sh, s, w->info); /* the reservation, should the wait time out */
  return ECC_OK;
}

/* A wait that ended is one lookup, a hit when ready; one that slept is
 * counted by how it ended. */
static void wait_count(struct dir_shared *sh, const struct waiter *w, int result)
{
  sh->lookups++;
  if (result == DIR_WAIT_READY) {
    sh->hits++;
  } else {
    sh->misses++;
  }
  if (!w->slept)
    return;
  sh->waits_ready += result == DIR_WAIT_READY;
  sh->waits_absent += result == DIR_WAIT_ABSENT;
  sh->wait_timeouts += result == DIR_WAIT_TIMEOUT;
}

/* Sleeps until the wake word moves from `seen` or `ns` pass; true if the
 * time passed. Registered as a waiter under the lock by the caller. */
static bool wait_sleep(struct dir_shared *sh, uint32_t seen, uint64_t ns)
{
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                        .tv_nsec = (long)(ns % 1000000000ull)};
  long rc = syscall(SYS_futex, &sh->wake, FUTEX_WAIT, seen, &ts, NULL, 0);
  bool timed_out = rc != 0 && errno == ETIMEDOUT;
  atomic_fetch_sub_explicit(&sh->waiters, 1, memory_order_acq_rel);
  return timed_out;
}

static int wait_args(const char *key, size_t *len, uint32_t ranks, uint64_t timeout_ns,
                     const int *result, const struct dir_pin_ref *pin, char *why, size_t cap)
{
  int rc = check_key(key, len, why, cap);
  if (rc != ECC_OK)
    return rc;
  if (result == NULL || (ranks > 0 && pin == NULL))
    return errtext_fail(why, cap, ECC_ERR_INVALID, "directory: wait for '%s': NULL %s", key,
                        result == NULL ? "result" : "pin");
  if (timeout_ns > DIR_WAIT_MAX_NS)
    return errtext_fail(why, cap, ECC_ERR_INVALID,
                        "directory: wait for '%s': timeout %llu ns is above the bound of %llu "
                        "(an hour)",
                        key, (unsigned long long)timeout_ns, DIR_WAIT_MAX_NS);
  return ECC_OK;
}

/* Every end of any reservation wakes every waiter (one word for the
 * region): each looks at its own key under the lock and sleeps again if
 * it is still being written. A slice that passes without a wake-up makes
 * the next look ask /proc about the writer afresh. */
int dir_wait(struct dir *d, const char *key, uint32_t ranks, uint64_t timeout_ns, int *result,
             struct dir_entry_info *info, struct dir_pin_ref *pin, char *why, size_t why_cap)
{
  struct waiter w = {.key = key, .ranks = ranks, .info = info, .pin = pin};
  int rc = wait_args(key, &w.len, ranks, timeout_ns, result, pin, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  if (info != NULL)
    memset(info, 0, sizeof(*info));
  if (pin != NULL)
    memset(pin, 0, sizeof(*pin));
  uint64_t deadline = ecc_now_ns() + timeout_ns;
  bool fresh = false;
  for (;;) {
    if ((rc = dir_lock(d, why, why_cap)) != ECC_OK)
      return rc;
    bool over;
    rc = wait_look(d, &w, fresh, &over, result, why, why_cap);
    uint64_t now = ecc_now_ns();
    if (rc == ECC_OK && !over && now >= deadline) {
      over = true;
      *result = DIR_WAIT_TIMEOUT;
    }
    if (rc != ECC_OK || over) {
      if (rc == ECC_OK)
        wait_count(d->sh, &w, *result);
      dir_unlock(d);
      return rc;
    }
    d->sh->waits += !w.slept;
    w.slept = true;
    atomic_fetch_add_explicit(&d->sh->waiters, 1, memory_order_acq_rel);
    dir_unlock(d);
    uint64_t left = deadline - now;
    fresh = wait_sleep(d->sh, w.seen, left < DIR_WAIT_SLICE_NS ? left : DIR_WAIT_SLICE_NS);
  }
}

int dir_events(struct dir *d, uint64_t *cursor, struct dir_event *out, size_t cap, size_t *n_out,
               uint64_t *lost)
{
  if (n_out != NULL)
    *n_out = 0;
  if (d == NULL || d->sh == NULL || cursor == NULL || n_out == NULL || (out == NULL && cap > 0))
    return ECC_ERR_INVALID;
  uint64_t skipped = 0;
  /* The view's checked copy of the header places the ring: the shared one
   * may have been overwritten since. */
  const char *ring = (const char *)d->sh + d->shape.off_events;
  *n_out = ev_read(ring, d->shape.event_slots, cursor, out, cap, &skipped);
  if (lost != NULL)
    *lost = skipped;
  return ECC_OK;
}

int dir_restart(struct dir *d, uint32_t *freed, char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  uint32_t n = reclaim_all(d, ecc_now_ns(), true);
  d->sh->restarts++;
  if (freed != NULL)
    *freed = n;
  dir_unlock(d);
  return ECC_OK;
}

/* ---- the checker --------------------------------------------------------------- */

#define BROKEN(...) errtext_fail(why, cap, ECC_ERR_REGION, "directory check: " __VA_ARGS__)

/* One live entry: its fields whole, its blocks its own in the map, its key
 * found at its slot through the index. */
static int check_entry(const struct dir_shared *sh, uint32_t s, char *why, size_t cap)
{
  const struct dir_slot *e = slot_at(sh, s);
  uint32_t st = slot_state(e);
  if (st > DIR_STATE_READY)
    return BROKEN("slot %u has state %u", s, st);
  if (st == DIR_STATE_FREE)
    return ECC_OK;
  char detail[96];
  if (!slot_valid(sh, e))
    return BROKEN("slot %u: %s", s, slot_fault(sh, e, detail, sizeof(detail)));
  if (e->hash != key_hash(e->key, strlen(e->key)))
    return BROKEN("slot %u (key '%s'): stored hash is wrong", s, e->key);
  if (e->marked > 1)
    return BROKEN("slot %u (key '%s'): mark %u", s, e->key, e->marked);
  if (st == DIR_STATE_RESERVED && e->pins != 0)
    return BROKEN("slot %u (key '%s'): reserved yet pinned %u times", s, e->key, e->pins);
  for (uint32_t r = 0; r < e->n_runs; r++)
    for (uint32_t b = e->runs[r].first; b < e->runs[r].first + e->runs[r].count; b++)
      if (block_map(sh)[b] != s + 1)
        return BROKEN("block %u of key '%s' (slot %u) is mapped to %u", b, e->key, s,
                      block_map(sh)[b]);
  uint32_t found = index_find(sh, e->key, e->hash);
  if (found != s)
    return BROKEN("key '%s' (slot %u): the index gives %s %u", e->key, s,
                  found == NO_SLOT ? "no slot" : "slot", found == NO_SLOT ? 0 : found);
  return ECC_OK;
}

/* Every mapped block lies in a run of the live entry the map names. */
static int check_map(const struct dir_shared *sh, uint64_t *used, char *why, size_t cap)
{
  const uint32_t *map = block_map(sh);
  uint32_t end;
  *used = 0;
  for (uint32_t b = 0; b < sh->num_blocks; b++) {
    if (map[b] == 0)
      continue;
    if (map[b] > sh->max_entries || !slot_live(slot_at(sh, map[b] - 1)))
      return BROKEN("block %u is mapped to %u (slot + 1), not a live slot", b, map[b]);
    if (!in_run(slot_at(sh, map[b] - 1), b, &end))
      return BROKEN("block %u is mapped to slot %u, whose runs lack it", b, map[b] - 1);
    (*used)++;
  }
  return ECC_OK;
}

static int check_index(const struct dir_shared *sh, uint64_t entries, char *why, size_t cap)
{
  const uint32_t *t = index_table(sh);
  uint64_t occupied = 0;
  for (uint32_t i = 0; i < sh->index_cap; i++) {
    if (t[i] == 0)
      continue;
    if (t[i] > sh->max_entries || !slot_live(slot_at(sh, t[i] - 1)))
      return BROKEN("index bucket %u holds %u (slot + 1), not a live slot", i, t[i]);
    occupied++;
  }
  if (occupied != entries)
    return BROKEN("index holds %llu keys, the table %llu entries", (unsigned long long)occupied,
                  (unsigned long long)entries);
  return ECC_OK;
}

static int check_pin(const struct dir_shared *sh, uint32_t p, char *why, size_t cap)
{
  const struct dir_pin *pin = pin_at(sh, p);
  uint32_t st = word_state(atomic_load_explicit(&pin->word, memory_order_acquire));
  if (st > PIN_LIVE)
    return BROKEN("pin slot %u has state %u", p, st);
  if (st == PIN_FREE)
    return ECC_OK;
  if (pin->entry_slot >= sh->max_entries)
    return BROKEN("pin slot %u names slot %u past the table", p, pin->entry_slot);
  uint64_t w = atomic_load_explicit(&slot_at(sh, pin->entry_slot)->word, memory_order_acquire);
  if (word_state(w) != DIR_STATE_READY || word_gen(w) != pin->entry_gen)
    return BROKEN("pin slot %u names slot %u gen %u, which is not a ready entry", p,
                  pin->entry_slot, pin->entry_gen);
  if (pin->ranks_left == 0)
    return BROKEN("pin slot %u is live with no release left", p);
  return ECC_OK;
}

/* Adds delta to the count of the entry each live pin before `end` names;
 * a decrement that would go below zero stops there (returned). This is how
 * the checker counts pins per entry in O(pins + entries) with no memory of
 * its own: the counts are derived, so a death between its passes is
 * repaired by the rebuild that death triggers, which recounts them. */
static uint32_t shift_pin_counts(struct dir_shared *sh, uint32_t end, int delta)
{
  for (uint32_t p = 0; p < end; p++) {
    const struct dir_pin *pin = pin_at(sh, p);
    if (!pin_live(pin))
      continue;
    struct dir_slot *e = slot_at(sh, pin->entry_slot);
    if (delta < 0 && e->pins == 0)
      return p;
    e->pins += (uint32_t)delta;
  }
  return end;
}

/* Live pins are whole and name ready entries; each entry's count is the
 * number of live pins naming it, and the live pins number pins_live. */
static int check_pins(struct dir_shared *sh, char *why, size_t cap)
{
  uint64_t live = 0;
  uint32_t over = NO_SLOT, residue = 0;
  for (uint32_t p = 0; p < sh->max_pins; p++) {
    int rc = check_pin(sh, p, why, cap);
    if (rc != ECC_OK)
      return rc;
    live += pin_live(pin_at(sh, p));
  }
  uint32_t stop = shift_pin_counts(sh, sh->max_pins, -1);
  for (uint32_t s = 0; stop == sh->max_pins && s < sh->max_entries && over == NO_SLOT; s++)
    if (slot_live(slot_at(sh, s)) && slot_at(sh, s)->pins != 0) {
      over = s;
      residue = slot_at(sh, s)->pins;
    }
  shift_pin_counts(sh, stop, 1);
  if (stop < sh->max_pins)
    return BROKEN("pin slot %u names slot %u, whose count is short of the pins naming it", stop,
                  pin_at(sh, stop)->entry_slot);
  if (over != NO_SLOT)
    return BROKEN("key '%s' (slot %u) counts %u pins, %u more than name it", slot_at(sh, over)->key,
                  over, slot_at(sh, over)->pins, residue);
  if (live != sh->pins_live)
    return BROKEN("%llu live pins, pins_live %llu", (unsigned long long)live,
                  (unsigned long long)sh->pins_live);
  return ECC_OK;
}

static int check_tables(struct dir_shared *sh, char *why, size_t cap)
{
  uint64_t entries = 0, blocks = 0, mapped;
  for (uint32_t s = 0; s < sh->max_entries; s++) {
    int rc = check_entry(sh, s, why, cap);
    if (rc != ECC_OK)
      return rc;
    if (slot_live(slot_at(sh, s))) {
      entries++;
      blocks += slot_at(sh, s)->n_blocks;
    }
  }
  int rc = check_map(sh, &mapped, why, cap);
  if (rc == ECC_OK)
    rc = check_index(sh, entries, why, cap);
  if (rc == ECC_OK)
    rc = check_pins(sh, why, cap);
  if (rc != ECC_OK)
    return rc;
  if (entries != sh->entries || blocks != sh->blocks_used || mapped != blocks)
    return BROKEN("%llu entries of %llu blocks (%llu mapped); counters say %llu and %llu",
                  (unsigned long long)entries, (unsigned long long)blocks,
                  (unsigned long long)mapped, (unsigned long long)sh->entries,
                  (unsigned long long)sh->blocks_used);
  return ECC_OK;
}

/* The header's sizes still give its offsets: nothing below reads past
 * the tables. */
static int check_header(const struct dir_shared *sh, size_t bytes, char *why, size_t cap)
{
  struct dir_params r = {.num_blocks = sh->num_blocks,
                         .block_size = sh->block_size,
                         .max_entries = sh->max_entries,
                         .max_pins = sh->max_pins,
                         .policy = sh->policy,
                         .event_slots = sh->event_slots};
  struct layout l;
  if (!params_resolve(&r, &r) || r.max_entries != sh->max_entries || r.max_pins != sh->max_pins ||
      r.event_slots != sh->event_slots)
    return BROKEN("header sizes are invalid");
  if (layout_of(&r, &l) > bytes || l.total != sh->total || l.index_cap != sh->index_cap ||
      l.off_entries != sh->off_entries || l.off_pins != sh->off_pins || l.off_map != sh->off_map ||
      l.off_index != sh->off_index || l.off_events != sh->off_events)
    return BROKEN("header offsets do not follow from its sizes");
  if (sh->hand >= sh->num_blocks || sh->slot_cursor >= sh->max_entries ||
      sh->pin_cursor >= sh->max_pins)
    return BROKEN("hand %u or cursors %u, %u out of range", sh->hand, sh->slot_cursor,
                  sh->pin_cursor);
  if (sh->n_gaps > DIR_GAPS)
    return BROKEN("%u gap hints, at most %u", sh->n_gaps, DIR_GAPS);
  for (uint32_t i = 0; i < sh->n_gaps; i++)
    if (sh->gaps[i].count == 0 || sh->gaps[i].first >= sh->num_blocks ||
        sh->gaps[i].count > sh->num_blocks - sh->gaps[i].first)
      return BROKEN("gap hint %u (%u+%u) outside the %u blocks", i, sh->gaps[i].first,
                    sh->gaps[i].count, sh->num_blocks);
  return ECC_OK;
}

int dir_check(struct dir *d, char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  struct dir_shared *sh = d->sh;
  rc = check_header(sh, d->bytes, why, why_cap);
  if (rc == ECC_OK)
    rc = check_tables(sh, why, why_cap);
  dir_unlock(d);
  return rc;
}

/* ---- copies the connector makes of reservations and pins ------------------ */

int dir_claim(struct dir *d, struct dir_ref ref, struct dir_entry_info *info, char *why,
              size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  struct dir_slot *e;
  rc = ref_entry(d, ref, &e, why, why_cap);
  if (rc == ECC_OK && slot_state(e) != DIR_STATE_RESERVED)
    rc = errtext_fail(why, why_cap, ECC_ERR_CLOSED,
                      "directory: key '%s' (slot %u) is no reservation now", e->key, ref.slot);
  else if (rc == ECC_OK && e->claimed)
    rc = errtext_fail(why, why_cap, ECC_ERR_BUSY,
                      "directory: key '%s' (slot %u) is being saved already", e->key, ref.slot);
  if (rc == ECC_OK) {
    /* The writer first, then the flag: a reader that sees the flag sees
     * the writer (both under the lock; a rebuild reads them together). */
    e->writer = d->self;
    e->claimed = 1;
    fill_info(d->sh, ref.slot, info);
  }
  dir_unlock(d);
  return rc;
}

int dir_unclaim(struct dir *d, struct dir_ref ref)
{
  int rc = dir_lock(d, NULL, 0);
  if (rc != ECC_OK)
    return rc;
  struct dir_slot *e;
  if (ref_entry(d, ref, &e, NULL, 0) == ECC_OK && slot_state(e) == DIR_STATE_RESERVED)
    e->claimed = 0;
  dir_unlock(d);
  return ECC_OK;
}

static int settle_locked(struct dir *d, struct dir_ref ref, bool ok, char *why, size_t cap)
{
  struct dir_slot *e;
  int rc = ref_entry(d, ref, &e, why, cap);
  if (rc == ECC_ERR_REGION)
    return rc;
  if (rc != ECC_OK || slot_state(e) != DIR_STATE_RESERVED || !e->claimed)
    return errtext_fail(why, cap, ECC_ERR_CLOSED,
                        "directory: slot %u generation %u holds no reservation being saved",
                        ref.slot, ref.gen);
  if (!ok) {
    entry_free(d->sh, ref.slot);
    return ECC_OK;
  }
  /* The copy has completed. */
  entry_publish(d->sh, e, ref);
  return ECC_OK;
}

int dir_settle(struct dir *d, struct dir_ref ref, bool ok, char *why, size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  rc = settle_locked(d, ref, ok, why, why_cap);
  dir_unlock(d);
  return rc;
}

int dir_pinned(struct dir *d, struct dir_pin_ref pin, struct dir_entry_info *info, char *why,
               size_t why_cap)
{
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  uint32_t s;
  rc = pinned_entry(d, pin, &s, why, why_cap);
  if (rc == ECC_OK)
    fill_info(d->sh, s, info);
  dir_unlock(d);
  return rc;
}

/* The slot of the entry that holds block b, or NO_SLOT: a ready, pinned
 * one (pinned) or a reservation. Only blocks of the region are named back,
 * whatever the map holds: a value past the table is no holder. */
static uint32_t block_holder(const struct dir_shared *sh, uint32_t b, bool pinned)
{
  uint32_t o = b < sh->num_blocks ? block_map(sh)[b] : 0;
  if (o == 0 || o > sh->max_entries)
    return NO_SLOT;
  const struct dir_slot *e = slot_at(sh, o - 1);
  bool ok = pinned ? slot_state(e) == DIR_STATE_READY && e->pins > 0
                   : slot_state(e) == DIR_STATE_RESERVED;
  return ok ? o - 1 : NO_SLOT;
}

int dir_blocks_held(struct dir *d, const uint32_t *ids, uint32_t n, bool pinned, uint32_t *bad)
{
  int rc = dir_lock(d, NULL, 0);
  if (rc != ECC_OK)
    return rc;
  for (uint32_t i = 0; i < n && rc == ECC_OK; i++) {
    if (block_holder(d->sh, ids[i], pinned) == NO_SLOT) {
      *bad = ids[i];
      rc = ECC_ERR_RANGE;
    }
  }
  dir_unlock(d);
  return rc;
}

/* ---- holds of loads by block ids ----------------------------------------- */

/* The distinct entries holding the n blocks, each once, in found[].slot
 * (entry slots); their count, or UINT32_MAX with *bad set if a block is not
 * held. Consecutive blocks of one entry cost one comparison; an entry met
 * again after another is found by a scan of those already met. */
static uint32_t holders_of(const struct dir_shared *sh, const uint32_t *ids, uint32_t n,
                           struct dir_pin_ref *found, uint32_t *bad)
{
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s = block_holder(sh, ids[i], true);
    if (s == NO_SLOT) {
      *bad = ids[i];
      return UINT32_MAX;
    }
    if (m > 0 && found[m - 1].slot == s)
      continue;
    uint32_t k = 0;
    while (k < m && found[k].slot != s)
      k++;
    if (k == m)
      found[m++].slot = s;
  }
  return m;
}

/* The holders found, room for their pins made (stale pins dropped if
 * needed, then looked for again: a dropped pin may have been the one that
 * made a block's entry pinned) and each checked whole. */
static int holders_pinnable(struct dir *d, const uint32_t *ids, uint32_t n,
                            struct dir_pin_ref *found, uint32_t *m, uint32_t *bad, char *why,
                            size_t cap)
{
  struct dir_shared *sh = d->sh;
  *m = holders_of(sh, ids, n, found, bad);
  if (*m != UINT32_MAX && sh->pins_live + *m > sh->max_pins) {
    reclaim_all(d, ecc_now_ns(), true);
    *m = holders_of(sh, ids, n, found, bad);
  }
  if (*m == UINT32_MAX)
    return errtext_fail(why, cap, ECC_ERR_RANGE, "directory: block %u is not in a pinned entry",
                        *bad);
  if (sh->pins_live + *m > sh->max_pins)
    return errtext_fail(why, cap, ECC_ERR_BUSY,
                        "directory: %u pins needed to hold the load's entries, %llu of %u free", *m,
                        (unsigned long long)(sh->max_pins - sh->pins_live), sh->max_pins);
  for (uint32_t k = 0; k < *m; k++)
    if (!runs_valid(sh, slot_at(sh, found[k].slot)))
      return slot_damaged(sh, found[k].slot, why, cap);
  return ECC_OK;
}

int dir_hold_blocks(struct dir *d, const uint32_t *ids, uint32_t n, struct dir_pin_ref *pins,
                    uint32_t *n_pins, uint32_t *bad, char *why, size_t why_cap)
{
  if (n_pins != NULL)
    *n_pins = 0;
  if (ids == NULL || pins == NULL || n_pins == NULL || bad == NULL || n == 0)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "directory: hold of %u blocks: %s", n,
                        n == 0 ? "no blocks" : "NULL array");
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  /* pins[k].slot holds the k-th entry's slot until its pin replaces it. */
  uint32_t m = 0;
  rc = holders_pinnable(d, ids, n, pins, &m, bad, why, why_cap);
  uint64_t now = ecc_now_ns();
  uint32_t taken = 0;
  for (; rc == ECC_OK && taken < m; taken++) {
    struct dir_pin_ref ref;
    if (!pin_take(d, pins[taken].slot, 1, now, &ref))
      break;
    pins[taken] = ref;
  }
  if (rc == ECC_OK && taken < m) { /* pins_live promised room: overwritten */
    for (uint32_t k = 0; k < taken; k++)
      pin_free(d->sh, pins[k].slot);
    d->sh->pins -= taken;
    rc = errtext_fail(why, why_cap, ECC_ERR_REGION,
                      "directory: %llu of its %u pin slots are counted live, yet none is free: "
                      "the region's memory was overwritten; make the region again",
                      (unsigned long long)d->sh->pins_live, d->sh->max_pins);
  }
  dir_unlock(d);
  if (rc == ECC_OK)
    *n_pins = m;
  return rc;
}

int dir_unpin_all(struct dir *d, const struct dir_pin_ref *pins, size_t n, char *why,
                  size_t why_cap)
{
  if (n == 0)
    return ECC_OK;
  int rc = dir_lock(d, why, why_cap);
  if (rc != ECC_OK)
    return rc;
  for (size_t i = 0; i < n; i++) {
    struct dir_pin *pin = pin_ref_live(d, pins[i], rc == ECC_OK ? why : NULL, why_cap);
    if (pin == NULL)
      rc = ECC_ERR_CLOSED;
    else if (pin->ranks_left > 1)
      pin->ranks_left--;
    else
      pin_free(d->sh, pins[i].slot);
  }
  dir_unlock(d);
  return rc;
}
