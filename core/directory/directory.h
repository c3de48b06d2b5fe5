/* SPDX-License-Identifier: Apache-2.0 */
/*
 * directory.h - the cache's index, kept in shared memory beside the blocks:
 * which key lives in which blocks and in what state, who reserved or pinned
 * it, and where the next entry goes. Every process that maps the region
 * sees and changes the same directory under one process-shared robust lock.
 *
 * Allocation keeps each entry in one run of blocks: a clock hand sweeps the
 * block positions; a window of the size asked for is taken where every
 * entry in it is ready, unpinned and not recently used, and those entries
 * are evicted (a recently used one loses its mark and the hand passes it:
 * its second chance). Free runs left behind the hand are kept as hints and
 * filled first, best fit, by reservations they hold. Only when no window
 * exists does an entry get several runs (at most DIR_MAX_RUNS). Nothing is
 * evicted by a reservation that fails.
 *
 * Crash safety: the entry and pin tables are the truth; the block map, the
 * key index and the counters derive from them. Each table slot changes
 * state with one store, made after its other fields, so a process killed
 * anywhere leaves tables whose every slot is either in its old or its new
 * state; the next process to take the lock after such a death rebuilds the
 * derived parts from them, frees the reservations and drops the pins of
 * processes that are gone.
 *
 * No call waits without bound: one whose lock stays taken for longer than
 * the view's lock timeout (a holder stopped by SIGSTOP or a debugger) fails
 * with ECC_ERR_BUSY naming the holder's pid. Values read from the shared
 * tables are checked before they index anything: an entry whose runs lie
 * outside the region, or a header changed since attach, is refused with
 * ECC_ERR_REGION naming it, never followed. Every call below that takes the
 * lock may return those two besides the codes it lists.
 *
 * Nothing here logs or allocates: errors are ECC_ERR_* codes with a reason
 * written into the caller's buffer, so the unit runs the same in the
 * plugin, its tests, the fuzz target and the benchmark.
 */
#ifndef ECC_DIRECTORY_H
#define ECC_DIRECTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ecc_plugin_v1.h"

#define DIR_MAGIC "ECCDIR01"
#define DIR_LAYOUT_VERSION 4
/* Runs an entry may have when no single window could be found. */
#define DIR_MAX_RUNS 8
/* Longest key, terminating NUL excluded (the ABI's ECC_KEY_MAX). */
#define DIR_KEY_MAX ECC_KEY_MAX
/* Residency events the ring keeps when dir_params asks for 0. */
#define DIR_EVENT_SLOTS_DEFAULT 4096u
/* The longest dir_wait sleeps, and the slice after which a waiter judges
 * the writer's liveness afresh (its wake-up bound after a SIGKILL). */
#define DIR_WAIT_MAX_NS 3600000000000ull
#define DIR_WAIT_SLICE_NS 20000000ull
/* How long a call waits for the lock when dir_params asks for 0. */
#define DIR_LOCK_TIMEOUT_DEFAULT_NS 5000000000ull

/* A process, told apart from a later one with the same pid by its start
 * time (field 22 of /proc/PID/stat, in clock ticks since boot). */
struct dir_owner {
  int32_t pid;
  uint32_t reserved;
  uint64_t start_ticks;
};

struct dir_run {
  uint32_t first; /* first block id */
  uint32_t count; /* blocks, >= 1 */
};

/* An entry's incarnation: slot and generation. A slot's generation grows
 * each time the slot is freed, so a ref kept past its entry's end never
 * names the next entry put in that slot; a directory formatted anew starts
 * every slot at a generation drawn from its random instance id, so a ref
 * kept from an earlier format of the region names nothing in the new one
 * (but with odds of 2^-32). Slots stay below 2^24 and generations use all
 * 32 bits. */
struct dir_ref {
  uint32_t slot;
  uint32_t gen;
};

/* A pin's incarnation, likewise. */
struct dir_pin_ref {
  uint32_t slot;
  uint32_t gen;
};

/* What dir_reserve found or did. */
enum dir_outcome {
  DIR_RESERVED = 0, /* new entry: write its blocks, then dir_publish */
  DIR_FOUND_READY,  /* the key is there and ready: nothing to write */
  DIR_FOUND_WRITING /* someone else has reserved it and is writing it */
};

/* How dir_reserve makes room (fixed when the directory is formatted). */
enum dir_policy {
  DIR_POLICY_LRU = 0, /* clock with second chance: least recently used first */
  DIR_POLICY_COST = 1 /* keeps entries by cost x reuse / size (see policy.h) */
};

/* What dir_wait ended with. */
enum dir_wait_result {
  DIR_WAIT_READY = 0, /* the entry is ready (and pinned when ranks > 0) */
  DIR_WAIT_ABSENT,    /* nobody is writing it: reserve it */
  DIR_WAIT_TIMEOUT    /* still being written when the timeout passed */
};

/* What a reservation records besides its size: the encoder time a hit on
 * it saves (0: unknown) and its tensor type (untyped: all 0). */
struct dir_meta {
  uint64_t cost_us;
  ecc_tensor_v1_t type;
};

enum dir_state {
  DIR_STATE_FREE = 0,
  DIR_STATE_RESERVED, /* blocks allocated, being written, invisible to lookup */
  DIR_STATE_READY     /* published: lookups find it */
};

/* One entry as dir_reserve, dir_lookup and dir_list describe it. */
struct dir_entry_info {
  struct dir_ref ref;
  int state;         /* enum dir_state */
  uint64_t nbytes;   /* as reserved */
  uint32_t n_blocks; /* ceil(nbytes / block_size) */
  uint32_t n_runs;   /* 1 .. DIR_MAX_RUNS */
  struct dir_run runs[DIR_MAX_RUNS];
  uint32_t pins;          /* live pins on it */
  struct dir_owner owner; /* the reserver */
  uint64_t reserved_ns;   /* CLOCK_MONOTONIC when reserved */
  uint64_t used_ns;       /* last reserve hit or lookup */
  uint64_t hits;          /* lookups, waits and reserves that found it ready */
  struct dir_meta meta;   /* as reserved */
  char key[DIR_KEY_MAX + 1];
};

/* One key as dir_peek finds it. */
struct dir_peeked {
  int state; /* enum dir_state: FREE when absent */
  uint32_t pins;
  uint64_t nbytes;
  uint64_t hits;
  struct dir_meta meta;
};

/* One residency event (ECC_EVENT_* kinds). */
struct dir_event {
  uint64_t seq;     /* from 1 */
  uint64_t time_ns; /* CLOCK_REALTIME */
  uint64_t nbytes;
  uint64_t cost_us;
  uint32_t kind; /* ECC_EVENT_* */
  char key[DIR_KEY_MAX + 1];
};

/* Counters, monotonic except the first five (levels). */
struct dir_counters {
  uint64_t entries;     /* reserved or ready */
  uint64_t blocks_used; /* blocks of those entries */
  uint64_t blocks_free;
  uint64_t largest_free_run;
  uint64_t pins_live;
  uint64_t reservations; /* dir_reserve calls that reserved */
  uint64_t dedup_hits;   /* dir_reserve calls that found the key */
  uint64_t lookups;      /* keys looked up */
  uint64_t hits;
  uint64_t misses;
  uint64_t evictions;        /* entries evicted to make room */
  uint64_t removals;         /* entries removed by key */
  uint64_t pins;             /* pins taken */
  uint64_t reclaimed;        /* reservations and pins of dead processes freed */
  uint64_t full;             /* reservations refused for want of room */
  uint64_t recoveries;       /* rebuilds after a process died holding the lock */
  uint64_t waits;            /* dir_wait calls that slept */
  uint64_t waits_ready;      /* of those, woken with the entry ready */
  uint64_t waits_absent;     /* of those, woken with nobody writing it */
  uint64_t wait_timeouts;    /* of those, ended by their timeout */
  uint64_t encoder_us_saved; /* the cost of every hit */
  uint64_t events;           /* residency events written */
  uint64_t restarts;         /* dir_restart calls: a kept region reused */
};

/* Sizes fixed when the directory is formatted, and this process's wait. */
struct dir_params {
  uint32_t num_blocks;         /* blocks of the region */
  uint64_t block_size;         /* their bytes */
  uint32_t max_entries;        /* entry slots; 0: num_blocks / 16, at least 64 */
  uint32_t max_pins;           /* pin slots; 0: max_entries */
  uint64_t reserve_timeout_ns; /* a reservation older than this may be
                                * reclaimed even if its owner lives; 0: never */
  uint64_t pin_timeout_ns;     /* likewise for a pin (its ranks never all
                                * released); 0: never */
  uint64_t lock_timeout_ns;    /* the longest this process's calls wait for
                                * the lock; 0: DIR_LOCK_TIMEOUT_DEFAULT_NS.
                                * Not in the header: each process its own */
  uint32_t policy;             /* enum dir_policy */
  uint32_t event_slots;        /* events the ring keeps; 0: DIR_EVENT_SLOTS_DEFAULT */
};

/* The header as formatted: sizes, offsets and the instance id (random per
 * format). A view keeps a copy and every call compares it with the shared
 * one first, so a header overwritten since, or a directory formatted again
 * under a live view, is refused instead of followed. */
struct dir_shape {
  char magic[8];
  uint32_t version, header_bytes;
  uint32_t num_blocks, max_entries, max_pins, index_cap;
  uint64_t block_size, reserve_timeout_ns, pin_timeout_ns;
  uint64_t off_entries, off_pins, off_map, off_index, total;
  uint64_t off_events;
  uint32_t policy, event_slots;
  uint64_t instance;
};

/* A process's view of one directory. */
struct dir {
  struct dir_shared *sh; /* the shared part (opaque outside directory.c) */
  size_t bytes;
  struct dir_owner self;    /* this process */
  uint32_t forks;           /* forks this process had seen when self was taken */
  uint64_t lock_timeout_ns; /* from dir_params, the default filled in */
  struct dir_shape shape;   /* the header as attached */
};

/* Bytes the shared part needs for these parameters (0 if they are invalid). */
size_t dir_bytes(const struct dir_params *p);

/* Formats `bytes` bytes at `mem` (zeroed or not) as an empty directory
 * with a new random instance id (getrandom; the clocks and the pid if it
 * fails). Only the region's builder calls it, before anyone else can map
 * it. */
int dir_format(void *mem, size_t bytes, const struct dir_params *p, char *why, size_t why_cap);

/* Attaches to a formatted directory, checking its header against p
 * (ECC_ERR_REGION naming the field that differs: a directory of another
 * layout version is refused so). */
int dir_attach(struct dir *d, void *mem, size_t bytes, const struct dir_params *p, char *why,
               size_t why_cap);

/* The attached directory's instance id: random, drawn at each format, never
 * 0 (0 for a view not attached). Two views with the same id see the same
 * incarnation of the region; a token may carry it to tell incarnations
 * apart beyond what generations do. */
uint64_t dir_instance(const struct dir *d);

/* Producer side: the key is there (ready or being written: *outcome says
 * which, and `info` describes it, whatever nbytes it was reserved with),
 * or n blocks are reserved for it, owned by this process (a reservation
 * of the key whose owner is dead is reclaimed first). ECC_ERR_RANGE: the
 * key is absent and needs more blocks than the region has; ECC_ERR_BUSY:
 * no room even after evicting every evictable entry (nothing was evicted;
 * second-chance marks the sweep cleared and what it reclaimed from dead
 * owners stay so), or ECC_ERR_REGION instead when a damaged entry stood
 * in the way; ECC_ERR_INVALID: a bad key, nbytes 0 or outcome NULL.
 * info may be NULL. */
int dir_reserve(struct dir *d, const char *key, uint64_t nbytes, int *outcome,
                struct dir_entry_info *info, char *why, size_t why_cap);

/* dir_reserve, recording `meta` (may be NULL: cost 0, untyped) in a new
 * entry; a found one keeps what it was reserved with (info says). The type
 * is not judged here: the caller checks it against nbytes. */
int dir_reserve_ex(struct dir *d, const char *key, uint64_t nbytes, const struct dir_meta *meta,
                   int *outcome, struct dir_entry_info *info, char *why, size_t why_cap);

/* For each of n keys, what a lookup would find (out[i]; state FREE when
 * absent, RESERVED while being written), under one lock, changing and
 * counting nothing. ECC_ERR_INVALID: a bad key, keys or out NULL. */
int dir_peek(struct dir *d, const char *const *keys, size_t n, struct dir_peeked *out, char *why,
             size_t why_cap);

/* Single flight: looks the key up as dir_lookup does (pinning it for
 * `ranks` releases into *pin when ranks > 0; ranks 0 pins nothing) and,
 * while another process's reservation of it is live, sleeps on a futex in
 * the region until a publish, abort or reclaim ends it or timeout_ns
 * (at most DIR_WAIT_MAX_NS) passes. Every DIR_WAIT_SLICE_NS asleep it asks
 * /proc afresh whether the writer lives, and reclaims the reservation of
 * a dead one (waking every other waiter). *result: DIR_WAIT_READY (info
 * and *pin filled), DIR_WAIT_ABSENT (nobody writes it: reserve it), or
 * DIR_WAIT_TIMEOUT (nothing changed; also at once for a reservation of
 * this process's own, which it would wait for itself). ECC_ERR_BUSY: no
 * free pin (nothing kept). info and pin may be NULL when ranks is 0. */
int dir_wait(struct dir *d, const char *key, uint32_t ranks, uint64_t timeout_ns, int *result,
             struct dir_entry_info *info, struct dir_pin_ref *pin, char *why, size_t why_cap);

/* Residency events from sequence *cursor on (0: the oldest kept), at most
 * cap into out, oldest first: *n_out of them, *cursor past the last; *lost
 * (may be NULL) counts those overwritten before they could be read. cap 0
 * sets *cursor to the next event to come. Takes no lock: a writer is never
 * delayed by a reader. */
int dir_events(struct dir *d, uint64_t *cursor, struct dir_event *out, size_t cap, size_t *n_out,
               uint64_t *lost);

/* A process reusing a kept region (region.persist) after every process
 * that held it has gone: frees every reservation and drops every pin whose
 * owner is dead (asking /proc afresh), counts a restart, and says in
 * *freed (may be NULL) how many it freed. Ready entries stay. */
int dir_restart(struct dir *d, uint32_t *freed, char *why, size_t why_cap);

/* The reserved entry's blocks are written: lookups find it from now on.
 * ECC_ERR_CLOSED if the reservation is gone (reclaimed, or ref stale);
 * ECC_ERR_INVALID if it is already published; ECC_ERR_BUSY if it is claimed
 * (dir_claim: a save of it is in flight). A claim whose process is dead is
 * reclaimed instead: ECC_ERR_CLOSED here, ECC_OK for dir_abort. Any process
 * may call it. */
int dir_publish(struct dir *d, struct dir_ref ref, char *why, size_t why_cap);

/* Gives a reservation up: its blocks are free again. Errors as for
 * dir_publish. */
int dir_abort(struct dir *d, struct dir_ref ref, char *why, size_t why_cap);

/* Consumer side: for each of n keys, found[i] says whether it is ready;
 * a found entry is described in info[i], marked used, and pinned for
 * `ranks` releases (pins[i]); others leave info[i] and pins[i] zeroed.
 * ECC_ERR_BUSY: not enough free pin slots for the found keys, even after
 * dropping dead owners' pins (no pin of this call is kept, nothing is
 * counted); ECC_ERR_INVALID: a bad key, ranks 0, or keys, found or pins
 * NULL (info may be NULL); ECC_ERR_REGION: a found entry is damaged (no
 * pin kept, as for BUSY). n 0 is ECC_OK. */
int dir_lookup(struct dir *d, const char *const *keys, size_t n, uint32_t ranks, bool *found,
               struct dir_entry_info *info, struct dir_pin_ref *pins, char *why, size_t why_cap);

/* One release of a pin, from any process; its last frees it.
 * ECC_ERR_CLOSED if stale (already fully released, or dropped). */
int dir_unpin(struct dir *d, struct dir_pin_ref pin, char *why, size_t why_cap);

/* `ranks` releases of a pin at once, under one lock (a peer that goes away
 * gives back all it held): more than are left frees it. ECC_ERR_INVALID for
 * ranks 0, ECC_ERR_CLOSED if stale. */
int dir_unpin_ranks(struct dir *d, struct dir_pin_ref pin, uint32_t ranks, char *why,
                    size_t why_cap);

/* Whether blocks [first, first + count) lie in the entry that `pin` holds
 * (in its runs: a range over a gap between two runs does not) and the pin
 * is live: ECC_OK, else ECC_ERR_RANGE naming the first block outside (an
 * empty range is refused too) or ECC_ERR_CLOSED for a stale pin. */
int dir_check_pinned(struct dir *d, struct dir_pin_ref pin, uint32_t first, uint32_t count,
                     char *why, size_t why_cap);

/* The connector's copies. dir_claim takes a live reservation for this
 * process's save: from then on only dir_settle ends it (abort is BUSY), and
 * it is reclaimed only when this process is gone, never by a deadline (the
 * copy writes into its blocks). ECC_ERR_CLOSED for a stale ref or a
 * published entry, ECC_ERR_BUSY if claimed already. dir_unclaim gives a
 * claim back (a save call refused after claiming): ECC_OK, also for a
 * stale ref, or the lock's error (the claim then stays). dir_settle ends a
 * claimed reservation when its copy has completed: published if ok, freed
 * if not; ECC_ERR_CLOSED if it was reclaimed meanwhile. */
int dir_claim(struct dir *d, struct dir_ref ref, struct dir_entry_info *info, char *why,
              size_t why_cap);
int dir_unclaim(struct dir *d, struct dir_ref ref);
int dir_settle(struct dir *d, struct dir_ref ref, bool ok, char *why, size_t why_cap);

/* The ready entry a live pin holds, for a load of it; ECC_ERR_CLOSED for a
 * stale pin. Changes nothing. */
int dir_pinned(struct dir *d, struct dir_pin_ref pin, struct dir_entry_info *info, char *why,
               size_t why_cap);

/* Whether each of the n blocks lies in a live reservation (pinned false) or
 * a ready, pinned entry (pinned true): ECC_OK, else ECC_ERR_RANGE with the
 * first that does not in *bad (a block the map gives to no slot of the
 * table counts as not held), or the lock's error (*bad untouched). */
int dir_blocks_held(struct dir *d, const uint32_t *ids, uint32_t n, bool pinned, uint32_t *bad);

/* A load by block ids holds what it reads: each of the n blocks must lie
 * in a ready, pinned entry (as dir_blocks_held with pinned true), and each
 * distinct entry they lie in gets one pin more, of one rank, owned by this
 * process, in pins[0 .. *n_pins) (room for n), so that no eviction can take
 * its blocks until dir_unpin_all gives them back (a death of this process
 * drops them as any pin; a pin timeout too, which dir_unpin_all reports).
 * All or nothing, under one lock: ECC_ERR_RANGE with the first block not so
 * held in *bad; ECC_ERR_BUSY if the free pin slots are too few even after
 * dropping stale pins; ECC_ERR_INVALID for NULL arrays or n 0. *n_pins is 0
 * on any error. */
int dir_hold_blocks(struct dir *d, const uint32_t *ids, uint32_t n, struct dir_pin_ref *pins,
                    uint32_t *n_pins, uint32_t *bad, char *why, size_t why_cap);

/* One release of each of n pins under one lock (0 is ECC_OK): ECC_OK if each
 * was live, ECC_ERR_CLOSED if one or more were gone (dropped meanwhile: the
 * live ones are released all the same), or the lock's error (none
 * released). */
int dir_unpin_all(struct dir *d, const struct dir_pin_ref *pins, size_t n, char *why,
                  size_t why_cap);

/* Removes a ready entry by key: ECC_ERR_BUSY if pinned or being written,
 * ECC_ERR_RANGE if absent. */
int dir_remove(struct dir *d, const char *key, char *why, size_t why_cap);

/* Calls fn for each live entry, in slot order (under the lock: fn must not
 * call back). ECC_ERR_INVALID if fn is NULL or d not attached;
 * ECC_ERR_REGION, before fn is called at all, if an entry is damaged. */
int dir_list(struct dir *d, void (*fn)(void *user, const struct dir_entry_info *e), void *user);

/* The counters: ECC_OK, or the lock's error with all of them zero.
 * largest_free_run is measured by a scan of the block map (zero as well if
 * a later hold of the lock fails: the code says so). */
int dir_get_counters(struct dir *d, struct dir_counters *out);

/* Verifies every invariant: the header's offsets follow from its sizes,
 * entry runs plus free blocks cover every block once, the block map, key
 * index, pin counts and level counters agree with the tables. ECC_OK or
 * ECC_ERR_REGION with the first broken one in why. Safe on tables someone
 * overwrote (it reads nothing past them); O(blocks + entries + pins), not
 * meant for hot paths. To count pins per entry it steps the derived counts
 * down and back up under the lock (a death in between is repaired by the
 * rebuild it triggers). */
int dir_check(struct dir *d, char *why, size_t why_cap);

/* Frees every reservation and drops every pin whose owner is dead or
 * whose timeout passed (what sweeps do for what they meet), counting them
 * in `reclaimed`; *freed (may be NULL) says how many this call freed.
 * Asks /proc afresh for each owner (sweeps trust a 10 ms note that an
 * owner was alive). */
int dir_reclaim(struct dir *d, uint32_t *freed, char *why, size_t why_cap);

/* Rebuilds the derived parts from the tables, as the first locker after a
 * holder's death does (counted in `recoveries`): for tools, tests and
 * fuzzing. Entries and pins that are not whole are freed. */
int dir_rebuild(struct dir *d, char *why, size_t why_cap);

/* This process's identity (pid and start time). */
int dir_owner_self(struct dir_owner *out);

#endif
