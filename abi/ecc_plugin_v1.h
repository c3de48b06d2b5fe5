/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ecc_plugin_v1.h - encoder-cache connector plugin ABI, major version 1.
 *
 * FROZEN: once released, nothing in this file changes except by appending
 * fields at the end of a struct (and raising ECC_ABI_V1_MINOR). A new major
 * version gets a new file. This header, with ecc_common.h that it includes,
 * is the specification: a plugin author and a host author can each work
 * from the two alone (examples/minimal_plugin.c is such a plugin). Pure
 * C11, no CUDA include.
 *
 * The model
 * ---------
 * A producer saves encoder outputs ("entries": one row of `hidden` values per
 * token, keyed by a content-hash string) from device memory into a shared host
 * region made of fixed-size blocks; a consumer on the same host loads them
 * back. The host (the inference server) owns block allocation and decides
 * which blocks an entry uses; the plugin only copies, asynchronously, and
 * reports completions.
 *
 * One step of the host looks like:
 *     save(h, entries, n)          zero or more times: fill descriptors only
 *     flush(h, compute_stream)     one batched device->host transfer
 *     load(h, entries, n, stream)  one batched host->device transfer
 *     poll(h, out, cap, &n)        collect finished saves and loads
 *
 * Discovery
 * ---------
 * A plugin exports one const data symbol per major version it implements,
 * named ECC_PLUGIN_V1_SYMBOL for this one. The host finds it with dlsym (newest
 * major first) before calling any of the plugin's functions (loading it has
 * already run its constructors), then checks abi_major, abi_minor,
 * struct_size and every required function pointer. The table, its name,
 * version and params (with their strings) must lie in the plugin's own
 * loaded object, and every function pointer must be the plugin's own code.
 *
 * Compatibility
 * -------------
 * The major version must match. If the plugin's minor is newer than the
 * host's, the host uses the fields it knows. A host reads an optional field
 * only if struct_size covers it and the pointer is non-NULL. Structs passed
 * from host to plugin also start with struct_size so that either side can be
 * the older one.
 *
 * Errors
 * ------
 * Every function returns ECC_OK (0) on success or one of the negative
 * ECC_ERR_* codes of ecc_common.h (ECC_STATUS_MAP); the set is closed. Each
 * function lists the codes it can return. A call that returns an error
 * changes no state of the handle. The handle is judged first: a call on a
 * handle that is not open returns ECC_ERR_CLOSED whatever its other
 * arguments. An address of 0, or an address whose byte range wraps past
 * 2^64, is ECC_ERR_INVALID. Human-readable text goes to the host's log
 * callback and to the handle's last-error string (see last_error).
 *
 * Structs the host fills for the plugin to write (stats, describe)
 * ---------------------------------------------------------------------
 * The caller sets struct_size to the size it was compiled with, which may
 * be smaller (an older host) or larger (a newer one) than the plugin's. The
 * plugin writes min(struct_size, its own size) bytes, never past them, and
 * leaves struct_size as the caller set it; a struct_size below 4 is
 * ECC_ERR_INVALID.
 *
 * Threading
 * ---------
 * All functions are safe to call from any thread. On one handle, save, flush
 * and load are serialised by the plugin (a second caller waits for the first
 * to return; none of them waits for a copy or for the device, though a
 * plugin without an engine of its own may make the copy inside the call, as
 * long as poll is what reports it). poll, stats, last_error and
 * describe may run concurrently with anything. shutdown must be the last call
 * on a handle: a call that races with it either finishes first or returns
 * ECC_ERR_CLOSED; shutdown itself waits for calls already inside the plugin.
 * Several handles may live in one process (one per device, for instance) and
 * never share state.
 *
 * Processes
 * ---------
 * A handle belongs to the process that created it. In a child made by
 * fork() its threads do not exist and its region, locks and driver state are
 * the parent's, so every call there returns ECC_ERR_CLOSED, shutdown
 * included, and touches nothing the parent uses; the child creates its own
 * handles (a pthread_atfork child handler is one way for a plugin to tell
 * that it runs in a child). A plugin keeps handle values unique for the life of the process,
 * also across dlclose and a new dlopen (the shm plugin puts the time a
 * handle was given into its value).
 *
 * Streams
 * -------
 * `compute_stream` in flush and load is a cudaStream_t of the caller's
 * device context. With a CUDA engine, NULL means CUDA's legacy default
 * stream (handle 0, where PyTorch programs run unless they pick a stream),
 * not "no stream": flush's copy waits for work queued there, and work queued
 * there after load waits for the load. cudaStreamLegacy and
 * cudaStreamPerThread may be passed as they are. With the host engine the
 * stream must be NULL (it cannot order itself after GPU work); its data is
 * ordered by poll alone.
 */
#ifndef ECC_PLUGIN_V1_H
#define ECC_PLUGIN_V1_H

#include <stddef.h>
#include <stdint.h>

#include "ecc_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ECC_ABI_V1_MAJOR 1
/* 1: the directory (reserve, save_reserved, lookup, load_pinned, ...).
 * 2: the cache (reserve_ex, peek, wait_ready, lookup_ex, load_typed,
 *    list_ex, events; the stats' cache counters, info's persist and policy). */
#define ECC_ABI_V1_MINOR 2
/* Name of the exported table (type ecc_plugin_v1_t). */
#define ECC_PLUGIN_V1_SYMBOL "ecc_plugin_v1"

/* One configuration pair. Both strings are read during the call only. */
typedef struct ecc_kv_v1 {
  const char *key;   /* "section.name", e.g. "region.block_size" */
  const char *value; /* the text as written, e.g. "3KiB" */
} ecc_kv_v1_t;

/* A configuration key the plugin accepts, with its default. */
typedef struct ecc_param_v1 {
  const char *key;           /* "section.name" */
  const char *default_value; /* text used when the key is absent; "" if none */
  const char *help;          /* one line: what it means and what values it takes */
} ecc_param_v1_t;

/* Services the host lends to the plugin for the life of the handle. */
typedef struct ecc_host_services_v1 {
  uint32_t struct_size; /* sizeof(ecc_host_services_v1_t) as the host compiled it */
  int log_level;        /* the plugin drops messages above this level */
  /* Receives one line of text without a newline; may be NULL. Called from any
   * plugin thread; `msg` is valid during the call only. */
  void (*log)(void *user, int level, const char *msg);
  void *user; /* passed back to log unchanged */
} ecc_host_services_v1_t;

/* Arguments of create(). Everything pointed to is read during the call only,
 * except `host`, which must stay valid until shutdown returns. */
typedef struct ecc_create_args_v1 {
  uint32_t struct_size;               /* sizeof(ecc_create_args_v1_t) as the host compiled it */
  uint32_t abi_major;                 /* negotiated major: ECC_ABI_V1_MAJOR */
  uint32_t abi_minor;                 /* negotiated minor: min(host's, plugin's) */
  const ecc_kv_v1_t *config;          /* configuration pairs; a key may appear once */
  size_t n_config;                    /* number of pairs */
  const ecc_host_services_v1_t *host; /* may be NULL: then nothing is logged */
  char *err;                          /* if non-NULL, receives the reason a create failed */
  size_t err_cap;                     /* capacity of err in bytes, NUL included */
} ecc_create_args_v1_t;

/* Device addresses in entries (save `src`, load `dst`) must be memory the
 * connector's device can reach: its own, or pinned host memory. They are
 * not checked: another device's memory makes the copy kernel fault, which
 * ends that device's context in the calling process, as any kernel fault
 * does. */

/* One entry to save: `nbytes` at device address `src` go to `block_ids`. */
typedef struct ecc_save_entry_v1 {
  const char *key;           /* 1..ECC_KEY_MAX bytes, copied during the call */
  uint64_t src;              /* device (or, with the host engine, host) address; unsigned */
  uint64_t nbytes;           /* > 0 and <= n_blocks * block_size */
  const uint32_t *block_ids; /* region blocks in entry order; read during the call only */
  uint32_t n_blocks;         /* >= 1; blocks past ceil(nbytes / block_size) are not touched */
} ecc_save_entry_v1_t;

/* One entry to load: blocks `block_ids` go to device address `dst`. */
typedef struct ecc_load_entry_v1 {
  uint64_t transfer_id;      /* the host's id for this dispatch; reported back by poll */
  const uint32_t *block_ids; /* region blocks in entry order; read during the call only */
  uint32_t n_blocks;         /* >= 1 */
  uint64_t dst;              /* device (or host) address written by the copy */
  uint64_t dst_capacity;     /* bytes writable at dst, > 0; the copy moves
                               min(dst_capacity, n_blocks * block_size) bytes and
                               blocks past that amount are not read */
} ecc_load_entry_v1_t;

/* One finished save (identified by key) or load (identified by transfer id). */
typedef struct ecc_completion_v1 {
  uint32_t direction;        /* ECC_DIR_SAVE or ECC_DIR_LOAD */
  int32_t status;            /* ECC_OK, or ECC_ERR_TRANSFER / ECC_ERR_DEVICE if the copy failed,
                              * or ECC_ERR_REGION if the region file was removed, replaced or
                              * truncated before poll began to report this batch, or
                              * ECC_ERR_CLOSED (minor 1) if the reservation or pin of a
                              * save_reserved / load_pinned entry was reclaimed while its
                              * copy ran: its bytes are not to be trusted */
  uint64_t transfer_id;      /* loads: the id given to load(); saves: 0 */
  uint64_t batch;            /* sequence number of the batched transfer, per direction, from 1 */
  uint64_t nbytes;           /* bytes of this entry that the copy moved */
  uint64_t elapsed_ns;       /* duration of the whole batched transfer it was part of */
  char key[ECC_KEY_MAX + 1]; /* saves: the key, NUL-terminated; loads: "" */
} ecc_completion_v1_t;

/* Histogram of transfers by their size in bytes: X(upper bound) of each
 * bucket but the last, which is open (>= 250,000,000). A transfer of
 * exactly a bound's bytes counts in the bucket above it. */
#define ECC_HIST_BOUNDS(X) \
  X(500000)                \
  X(1000000)               \
  X(2000000)               \
  X(5000000)               \
  X(10000000)              \
  X(20000000)              \
  X(50000000)              \
  X(100000000)             \
  X(250000000)
#define ECC_HIST_BUCKETS 10 /* the 9 bounds above, then >= 250,000,000 bytes */

/* Counters for one direction. */
typedef struct ecc_dir_stats_v1 {
  uint64_t transfers;              /* batched transfers completed */
  uint64_t entries;                /* entries (keys or transfer ids) completed */
  uint64_t descriptors;            /* copy descriptors after coalescing */
  uint64_t bytes;                  /* bytes moved */
  uint64_t busy_ns;                /* sum of transfer durations */
  uint64_t failed;                 /* transfers that ended with an error */
  uint64_t hist[ECC_HIST_BUCKETS]; /* transfers by size (bucket bounds above) */
} ecc_dir_stats_v1_t;

/*
 * The directory (minor 1)
 * -----------------------
 * A region may carry a directory: the cache's index, shared by every
 * process attached to the region. It knows which key lives in which blocks,
 * allocates blocks for new entries (one contiguous run whenever it can, so
 * an entry is one copy descriptor), evicts whole entries when room is short,
 * and pins entries while they are read. The host then keeps no allocator,
 * no index and no side channel of its own:
 *
 *   producer: reserve(key, nbytes)     READY or WRITING: skip the encoder;
 *                                      RESERVED: a token and the blocks
 *             save_reserved(token, src), flush, poll -> the key's completion;
 *                                      a successful copy publishes the entry
 *                                      (lookups find it from then on), a
 *                                      failed one frees its blocks
 *   consumer: lookup(keys, ranks)      READY: a pin token and the blocks
 *             load_pinned(id, pin, dst), poll -> the id's completion; each
 *                                      polled completion releases one rank
 *
 *   an entry:  reserved --copy done--> ready <--lookup--> pinned (ranks > 0)
 *                 |                      |
 *             failed copy,          evicted when room is short and it is
 *             abort, owner died     neither pinned nor recently used; or removed
 *                 v                      v
 *               (free)                 (free)
 *
 * Tokens are plain numbers, never 0, valid in every process attached to the
 * region (a scheduler may reserve or look up, and hand the token to the
 * workers that copy). A token names one incarnation of an entry: once the
 * entry is gone, its token is refused (ECC_ERR_CLOSED) and never names
 * another, so a stale token cannot deliver another key's bytes. A token
 * also says what it names: a reservation's (from reserve) given where a
 * pin is wanted (load_pinned, unpin), or a pin's (from lookup) given where
 * a reservation is (save_reserved, abort_reserved), is refused with
 * ECC_ERR_CLOSED saying which it is, and changes nothing. A
 * reservation belongs to the process that made it, and a pin to the one
 * that looked it up: when that process dies they are reclaimed by the next
 * process that needs the room. On a region with a directory, save and load
 * by block ids are accepted only for blocks of a live reservation (save)
 * or a pinned entry (load); any other block is ECC_ERR_RANGE naming it.
 * A save by block ids writes only reservations the calling process made
 * (another process's is ECC_ERR_RANGE naming the block and its owner's
 * pid) and holds each one it writes from the call until its copy has
 * completed, as save_reserved does: abort_reserved and save_reserved of it
 * answer ECC_ERR_BUSY meanwhile, so its blocks never pass to another entry
 * under the copy. The copy does not publish it (the host may have written
 * part of it only).
 *
 * Lifetimes: keys, key arrays and entry arrays passed to these functions
 * are read during the call only; `out` arrays are written before the call
 * returns and not after. save_reserved's sources and load_pinned's
 * destinations follow save's and load's rules (valid until the completion
 * is polled).
 *
 * Threading: save_reserved and load_pinned are serialised with save, flush
 * and load, as those are with each other. reserve, abort_reserved, lookup,
 * unpin, remove and list may run concurrently with anything: they take the
 * directory's own lock, which every process attached to the region shares.
 * A call that finds that lock held past the handle's lock timeout (a
 * process stopped inside a call) returns ECC_ERR_BUSY having changed
 * nothing: every directory function may return it, and so may save, load
 * and stats on a region with a directory.
 *
 * Region checks: every directory function, after its arguments, checks
 * that the region file is still the one mapped, whole, and returns
 * ECC_ERR_REGION once it was removed, replaced or truncated, so that no
 * call touches pages that are gone.
 */

/* Runs of blocks one entry may have (one when the directory can). */
#define ECC_ENTRY_MAX_EXTENTS 8

/* A run of consecutive blocks. */
typedef struct ecc_extent_v1 {
  uint32_t first_block; /* first block id */
  uint32_t n_blocks;    /* >= 1 */
} ecc_extent_v1_t;

/* An entry as reserve and lookup report it. */
typedef struct ecc_entry_v1 {
  int32_t state;      /* ECC_ENTRY_* (ecc_common.h) */
  uint32_t n_extents; /* extents in use: 1..ECC_ENTRY_MAX_EXTENTS; 0 when ABSENT */
  uint64_t token;     /* reserve, RESERVED: the reservation; lookup, READY: the pin; else 0 */
  uint64_t nbytes;    /* the entry's bytes, as reserved; 0 when ABSENT */
  ecc_extent_v1_t extents[ECC_ENTRY_MAX_EXTENTS]; /* the entry's blocks, in entry order */
} ecc_entry_v1_t;

/* One reserved entry to save: `nbytes` at device address `src`. */
typedef struct ecc_save_reserved_v1 {
  uint64_t token;  /* from reserve (RESERVED) */
  uint64_t src;    /* device (or, with the host engine, host) address */
  uint64_t nbytes; /* the reserved size exactly */
} ecc_save_reserved_v1_t;

/* One pinned entry to load into device address `dst`. */
typedef struct ecc_load_pinned_v1 {
  uint64_t transfer_id;  /* the host's id for this dispatch; reported back by poll */
  uint64_t token;        /* from lookup (READY) */
  uint64_t dst;          /* device (or host) address written by the copy */
  uint64_t dst_capacity; /* bytes writable at dst: at least the entry's nbytes */
} ecc_load_pinned_v1_t;

/* One live entry as list reports it. */
typedef struct ecc_listed_v1 {
  char key[ECC_KEY_MAX + 1]; /* NUL-terminated */
  int32_t state;             /* ECC_ENTRY_RESERVED or ECC_ENTRY_READY */
  uint32_t pins;             /* live pins */
  uint64_t nbytes;           /* as reserved */
  uint32_t n_blocks;         /* blocks it occupies */
  uint32_t n_extents;        /* runs they form */
  uint64_t age_ns;           /* since it was reserved */
  uint64_t idle_ns;          /* since it was last reserved or looked up */
} ecc_listed_v1_t;

/*
 * The cache (minor 2)
 * -------------------
 * Minor 2 adds, on the same directory and under the same rules:
 *
 *   single flight:  wait_ready(key) sleeps (in the kernel, never spinning)
 *                   while another process writes the key, and wakes when the
 *                   writer publishes it (READY, pinned as lookup pins),
 *                   aborts it or dies (ABSENT: reserve it now), or when the
 *                   timeout passes (WRITING: nothing changed). A waiter
 *                   judges the writer's liveness afresh about every 20 ms,
 *                   so a writer killed by a signal wakes its waiters within
 *                   that time.
 *   peek:           what lookup would find, pinning and counting nothing.
 *   typed entries:  reserve_ex records a tensor descriptor (dtype, up to 4
 *                   dimensions) whose bytes are the entry's bytes; lookup_ex,
 *                   peek, wait_ready and list_ex return it; load_typed
 *                   refuses a load whose declared type disagrees.
 *   cost:           reserve_ex records what the entry saves (encoder
 *                   microseconds); with the policy "cost" the directory keeps
 *                   entries by cost x reuse / size rather than by recency,
 *                   and every hit adds its entry's cost to encoder_us_saved.
 *   events:         a ring in the region records when entries are stored,
 *                   evicted, removed or reclaimed; any process reads it from
 *                   a cursor of its own without ever blocking a writer, and
 *                   learns how many events it lost when it fell behind.
 *
 * An untyped entry (made by reserve, or reserve_ex with ECC_DTYPE_NONE) has
 * dtype ECC_DTYPE_NONE and no dimensions; an entry reserved with cost 0 is
 * taken by the policy "cost" as costing in proportion to its size.
 */

/* A tensor descriptor: dtype ECC_DTYPE_* (ecc_common.h) and dims[0 ..
 * n_dims), outermost first, e.g. float16 {880, 3584} for 880 rows of 3584
 * values. Untyped: dtype ECC_DTYPE_NONE, n_dims 0, dims all 0. Typed: n_dims
 * 1..ECC_TENSOR_MAX_DIMS, each of those dims >= 1, the rest 0, and the
 * product of the dims times the dtype's bytes equal to the entry's bytes. */
typedef struct ecc_tensor_v1 {
  uint32_t dtype;                     /* ECC_DTYPE_* */
  uint32_t n_dims;                    /* 0 (untyped) or 1..ECC_TENSOR_MAX_DIMS */
  uint64_t dims[ECC_TENSOR_MAX_DIMS]; /* dims[i] for i < n_dims, then 0 */
} ecc_tensor_v1_t;

/* What minor 2 knows of an entry besides its blocks. */
typedef struct ecc_entry_meta_v1 {
  uint64_t cost_us;     /* encoder microseconds it saves, as reserved (0: unknown) */
  uint64_t hits;        /* lookups and waits that found it ready since it was stored */
  ecc_tensor_v1_t type; /* as reserved; untyped for an entry made by reserve */
} ecc_entry_meta_v1_t;

/* Arguments of reserve_ex. Read during the call only. */
typedef struct ecc_reserve_args_v1 {
  uint32_t struct_size; /* sizeof(ecc_reserve_args_v1_t) as the caller compiled it */
  uint32_t reserved;    /* zero */
  const char *key;      /* 1..ECC_KEY_MAX bytes */
  uint64_t nbytes;      /* > 0 */
  uint64_t cost_us;     /* encoder microseconds a hit on it saves; 0: unknown */
  ecc_tensor_v1_t type; /* the entry's type, or untyped (all 0) */
} ecc_reserve_args_v1_t;

/* One key as peek reports it. */
typedef struct ecc_peek_v1 {
  int32_t state;            /* ECC_ENTRY_ABSENT, ECC_ENTRY_WRITING (reserved, not yet
                             * published, by any process) or ECC_ENTRY_READY */
  uint32_t pins;            /* live pins (READY), else 0 */
  uint64_t nbytes;          /* as reserved; 0 when ABSENT */
  ecc_entry_meta_v1_t meta; /* all 0 when ABSENT */
} ecc_peek_v1_t;

/* One pinned entry to load, with the type the host expects it to have. */
typedef struct ecc_load_typed_v1 {
  uint64_t transfer_id;  /* as in ecc_load_pinned_v1_t */
  uint64_t token;        /* from lookup, lookup_ex or wait_ready (READY) */
  uint64_t dst;          /* device (or host) address written by the copy */
  uint64_t dst_capacity; /* bytes writable at dst: at least the entry's nbytes */
  ecc_tensor_v1_t type;  /* what the host expects: equal to a typed entry's type;
                          * for an untyped entry, bytes equal to its nbytes */
} ecc_load_typed_v1_t;

/* One residency event. */
typedef struct ecc_event_v1 {
  uint64_t seq;              /* per region, from 1, one more per event */
  uint64_t time_ns;          /* CLOCK_REALTIME when it happened, in ns since the epoch */
  uint64_t instance;         /* the region's instance id: random per format, kept by a
                              * warm restart; a new id means a new, empty cache */
  uint64_t nbytes;           /* the entry's bytes */
  uint64_t cost_us;          /* the entry's cost, as reserved */
  int32_t kind;              /* ECC_EVENT_* (ecc_common.h) */
  uint32_t reserved;         /* zero */
  char key[ECC_KEY_MAX + 1]; /* NUL-terminated */
} ecc_event_v1_t;

/* The directory's counters (all 0 on a region without one). The first five
 * are levels, the rest count since the region was made. */
typedef struct ecc_directory_stats_v1 {
  uint64_t entries;          /* reserved or ready */
  uint64_t blocks_used;      /* blocks of those entries */
  uint64_t blocks_free;      /* blocks of no entry */
  uint64_t largest_free_run; /* longest run of free blocks */
  uint64_t pins_live;        /* pins not yet released */
  uint64_t reservations;     /* reserve calls that reserved */
  uint64_t dedup_hits;       /* reserve calls that found the key (ready or being written) */
  uint64_t lookups;          /* keys looked up */
  uint64_t hits;             /* of those, found ready */
  uint64_t misses;           /* of those, not */
  uint64_t evictions;        /* entries evicted to make room */
  uint64_t removals;         /* entries removed by key */
  uint64_t pins;             /* pins taken */
  uint64_t reclaimed;        /* reservations and pins of dead processes freed */
  uint64_t full;             /* reserve calls refused for want of room */
} ecc_directory_stats_v1_t;

/* The cache's counters of minor 2, counted since the region was made, by
 * every process attached to it (all 0 on a region without a directory). */
typedef struct ecc_cache_stats_v1 {
  uint64_t waits;            /* wait_ready calls that found the key being written */
  uint64_t waits_ready;      /* of those, ended with the entry ready */
  uint64_t waits_absent;     /* of those, ended absent: the writer aborted or died */
  uint64_t wait_timeouts;    /* of those, ended with the timeout */
  uint64_t encoder_us_saved; /* the cost of every hit: lookups and waits that found an
                              * entry ready, each adding the cost it was reserved with
                              * (an entry reserved with cost 0 counts 0) */
  uint64_t events;           /* residency events written */
  uint64_t restarts;         /* opens that found a kept region and reused it */
} ecc_cache_stats_v1_t;

/* Statistics of one handle since create. The caller sets struct_size. */
typedef struct ecc_stats_v1 {
  uint32_t struct_size;    /* in: sizeof(ecc_stats_v1_t) as the caller compiled it */
  uint32_t reserved;       /* zero */
  ecc_dir_stats_v1_t save; /* device -> region */
  ecc_dir_stats_v1_t load; /* region -> device */
  uint64_t saves_skipped;  /* saves ignored because this rank is not the save rank */
  uint64_t pin_ns;         /* time spent pinning the region (0 if not pinned) */
  /* minor 1 */
  ecc_directory_stats_v1_t directory; /* the region's directory, shared by all its users */
  /* minor 2 */
  ecc_cache_stats_v1_t cache; /* the region's cache counters, shared as `directory` is */
} ecc_stats_v1_t;

/* What a handle is using. The caller sets struct_size. */
typedef struct ecc_info_v1 {
  uint32_t struct_size; /* in: sizeof(ecc_info_v1_t) as the caller compiled it */
  uint32_t creator; /* 1 if this handle created the region (whoever closes it last unlinks it) */
  char region_path[256];   /* the region file, e.g. "/dev/shm/ecc-1000/ecc-demo.region" */
  uint64_t block_size;     /* bytes per block */
  uint64_t num_blocks;     /* blocks in the region */
  uint64_t region_bytes;   /* bytes of the file, header page included */
  char engine[32];         /* "host" or "cuda" */
  char engine_detail[128]; /* what the engine chose and why, one line */
  char role[16];           /* "producer", "consumer" or "both" */
  uint32_t save_rank;      /* 1 if saves are performed on this rank */
  uint32_t pinned;         /* 1 if the region is registered with the GPU driver */
  uint64_t max_inflight;   /* bound on in-flight transfers per direction */
  /* minor 2 */
  uint32_t persist;   /* 1 if the region outlives its last process (region.persist) */
  uint32_t restarted; /* 1 if this handle reused a kept region's entries */
  char policy[16];    /* eviction policy of the directory: "lru" or "cost"; "" without one */
} ecc_info_v1_t;

/*
 * The exported table. Header fields first, then required functions, then
 * optional ones (which may be NULL). Append only.
 */
typedef struct ecc_plugin_v1 {
  uint32_t abi_major;           /* ECC_ABI_V1_MAJOR */
  uint32_t abi_minor;           /* ECC_ABI_V1_MINOR the plugin was built with */
  uint32_t struct_size;         /* sizeof(ecc_plugin_v1_t) as the plugin compiled it */
  uint32_t caps;                /* ECC_CAP_* bits */
  const char *name;             /* short name, e.g. "shm" */
  const char *version;          /* implementation version, e.g. "1.0.0" */
  const ecc_param_v1_t *params; /* the configuration keys it accepts, with defaults */
  size_t n_params;              /* number of params */

  /* create: open a connector. `args->abi_major` must be 1; a minor newer than
   * the plugin's is refused. Unknown keys and bad values are refused with the
   * key named in args->err; so is a key given twice (ECC_ERR_CONFIG). On
   * failure nothing is left behind (no file, no mapping, no registration)
   * and *out is 0.
   * Returns ECC_OK, ECC_ERR_INVALID (NULL args/out), ECC_ERR_INCOMPATIBLE,
   * ECC_ERR_CONFIG, ECC_ERR_REGION, ECC_ERR_SYSTEM, ECC_ERR_NOMEM,
   * ECC_ERR_DEVICE, ECC_ERR_UNSUPPORTED (an engine that is not available). */
  int (*create)(const ecc_create_args_v1_t *args, ecc_handle_t *out);

  /* save: queue `n` entries for this step's flush. Fills descriptors only:
   * never copies, never waits. All entries are checked before any is queued.
   * `src` must stay valid and unchanged until this key's completion has been
   * polled. On a rank that is not the save rank it does nothing and returns
   * ECC_OK (no completion will follow). n == 0 is a no-op. The copies of one
   * batch run in parallel: if two of its entries list the same block, which
   * one the block ends up holding is unspecified.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_RANGE, ECC_ERR_ROLE,
   * ECC_ERR_NOMEM, ECC_ERR_CLOSED, ECC_ERR_REGION (checked when the call
   * starts a step's batch: the region file was removed, replaced or
   * truncated since create, so the handle can move no more data).
   * Minor 1, a region with a directory: also ECC_ERR_BUSY (a block lies in
   * a reservation that a copy in flight writes: poll first), and the region
   * is checked at every call. */
  int (*save)(ecc_handle_t h, const ecc_save_entry_v1_t *entries, size_t n);

  /* flush: submit everything queued since the last flush as ONE batched
   * transfer, ordered after all work already queued on `compute_stream`
   * (see Streams above: with a CUDA engine NULL is the legacy default
   * stream; with the host engine it must be NULL). Nothing queued: no-op.
   * On ECC_ERR_BUSY the queue is kept and a later flush submits it.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_BUSY, ECC_ERR_DEVICE,
   * ECC_ERR_NOMEM, ECC_ERR_CLOSED, ECC_ERR_REGION (the region file was
   * removed, replaced or truncated since create: nothing is submitted, the
   * queue is kept, and the handle can move no more data). */
  int (*flush)(ecc_handle_t h, void *compute_stream);

  /* load: copy `n` entries in ONE batched transfer, in order of first block
   * so that neighbours in the region whose destinations are adjacent
   * coalesce (when the destinations ascend in the given order, that order
   * already brings every such pair together and is kept).
   * The copy runs after work already queued on `compute_stream`, and work
   * queued there after load returns sees the data (see Streams above: NULL
   * is the legacy default stream with a CUDA engine); with the host engine
   * (stream NULL) the data is there once poll has reported the transfer id.
   * `dst` must not be read or reused otherwise before then.
   * n == 0 is a no-op.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_RANGE, ECC_ERR_ROLE,
   * ECC_ERR_BUSY, ECC_ERR_DEVICE, ECC_ERR_NOMEM, ECC_ERR_CLOSED, ECC_ERR_REGION
   * (the region file was removed, replaced or truncated since create: nothing
   * is copied, and the handle can move no more data). */
  int (*load)(ecc_handle_t h, const ecc_load_entry_v1_t *entries, size_t n, void *compute_stream);

  /* poll: never blocks. Writes up to `cap` finished entries to `out` and
   * their count to *n_out: saves first, then loads, each in submission (FIFO)
   * order; each exactly once. A transfer finishes only after every transfer
   * submitted before it in the same direction. A failed copy is reported with
   * a negative status in each of its entries. Entries that did not fit stay
   * for the next poll. On an error *n_out is 0 (when n_out is not NULL) and
   * nothing is consumed.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_CLOSED. */
  int (*poll)(ecc_handle_t h, ecc_completion_v1_t *out, size_t cap, size_t *n_out);

  /* shutdown: wait for every in-flight transfer, free everything, clean up
   * the region (whoever closes it last, in any process, unlinks it).
   * Completions not yet polled are dropped. A second call, or any call after
   * it, returns ECC_ERR_CLOSED.
   * Returns ECC_OK, ECC_ERR_CLOSED. */
  int (*shutdown)(ecc_handle_t h);

  /* ---- optional (may be NULL) ---- */

  /* validate: check a configuration as create would, without creating
   * anything. On failure err receives the reason (the key named); on success
   * a one-line summary of what create would build (region, layout, engine).
   * Returns ECC_OK, ECC_ERR_CONFIG, ECC_ERR_INVALID. */
  int (*validate)(const ecc_kv_v1_t *config, size_t n_config, char *err, size_t err_cap);

  /* stats: copy the handle's counters (see "Structs the host fills" above).
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_CLOSED. Minor 1, a region
   * with a directory: also ECC_ERR_REGION (its file removed, replaced or
   * truncated) and ECC_ERR_BUSY (the directory's lock timed out): then
   * nothing is written. */
  int (*stats)(ecc_handle_t h, ecc_stats_v1_t *out);

  /* last_error: copy the text of the handle's most recent error ("" if none),
   * truncated to cap and NUL-terminated; cap 0 (buf may then be NULL) writes
   * nothing. Returns ECC_OK, ECC_ERR_INVALID (buf NULL with cap > 0),
   * ECC_ERR_CLOSED. */
  int (*last_error)(ecc_handle_t h, char *buf, size_t cap);

  /* describe: the region and engine in use (see "Structs the host fills"
   * above). Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_CLOSED. */
  int (*describe)(ecc_handle_t h, ecc_info_v1_t *out);

  /* ---- minor 1: the directory (see "The directory" above). A plugin
   * sets ECC_CAP_DIRECTORY when it implements these; a handle whose region
   * has no directory answers each of them ECC_ERR_UNSUPPORTED. ---- */

  /* reserve: the key is there (*out READY or WRITING: nothing to write;
   * READY marks it used), or ceil(nbytes / block_size) blocks are reserved
   * for it (*out RESERVED, with the token and the blocks). Room is made by
   * evicting ready, unpinned entries, least recently used first (or an
   * approximation of that order); when even that cannot make room, nothing
   * is evicted and the call returns ECC_ERR_BUSY. Producer or both only.
   * Returns ECC_OK, ECC_ERR_INVALID (key, nbytes 0, out NULL),
   * ECC_ERR_RANGE (more blocks than the region has), ECC_ERR_ROLE,
   * ECC_ERR_BUSY, ECC_ERR_CLOSED, ECC_ERR_REGION, ECC_ERR_UNSUPPORTED. */
  int (*reserve)(ecc_handle_t h, const char *key, uint64_t nbytes, ecc_entry_v1_t *out);

  /* save_reserved: queue `n` reserved entries for this step's flush, as save
   * does (same rules for src, n == 0, save rank, and checking every entry
   * first). Each completion carries the key; the entry is published when
   * its copy has completed and the completion is polled (or at shutdown,
   * which waits for the copy), never before; a failed copy frees the
   * reservation, and so does a shutdown before the flush. A token may be
   * saved once.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_RANGE (nbytes is not the
   * reserved size), ECC_ERR_ROLE, ECC_ERR_NOMEM, ECC_ERR_CLOSED (a token
   * that names no live reservation: never made, published, freed or
   * reclaimed; or a closed handle), ECC_ERR_REGION, ECC_ERR_UNSUPPORTED.
   * Also ECC_ERR_BUSY: the reservation is being saved already (by this
   * step's batch or one in flight): poll first. */
  int (*save_reserved)(ecc_handle_t h, const ecc_save_reserved_v1_t *entries, size_t n);

  /* abort_reserved: give a reservation up before it is saved; its blocks are
   * free again. Returns ECC_OK, ECC_ERR_CLOSED (stale token or closed
   * handle), ECC_ERR_BUSY (its save is in flight: poll first),
   * ECC_ERR_UNSUPPORTED. ECC_ERR_CLOSED also for a published entry's
   * token (no longer a reservation); and ECC_ERR_REGION. A save whose
   * process died is in flight no more: its reservation is reclaimed (a
   * RECLAIMED event) and the abort answers ECC_OK. */
  int (*abort_reserved)(ecc_handle_t h, uint64_t token);

  /* lookup: for each of `n` keys, out[i] is READY (found; marked used and
   * pinned for `ranks` releases: one per load_pinned completion polled, or
   * per unpin) or ABSENT. `keys` and the strings are read during the call.
   * Returns ECC_OK, ECC_ERR_INVALID (NULL or bad key, ranks 0),
   * ECC_ERR_ROLE (a producer), ECC_ERR_BUSY (no free pin: no pin of the
   * call is kept), ECC_ERR_CLOSED, ECC_ERR_REGION, ECC_ERR_UNSUPPORTED.
   * `ranks` is at most ECC_RANKS_MAX (ecc_common.h): more is
   * ECC_ERR_INVALID, naming the bound, and pins nothing. */
  int (*lookup)(ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks,
                ecc_entry_v1_t *out);

  /* load_pinned: copy `n` pinned entries in ONE batched transfer, as load
   * does (same stream rules, dst lifetime and ordering). The pin is checked
   * when the call is made: an entry can no longer change under a live pin.
   * Polling a completion releases one rank of its pin, also on failure.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_RANGE (dst_capacity below the
   * entry's bytes), ECC_ERR_ROLE, ECC_ERR_BUSY, ECC_ERR_DEVICE,
   * ECC_ERR_NOMEM, ECC_ERR_CLOSED (a pin already released, or a closed
   * handle), ECC_ERR_REGION, ECC_ERR_UNSUPPORTED. */
  int (*load_pinned)(ecc_handle_t h, const ecc_load_pinned_v1_t *entries, size_t n,
                     void *compute_stream);

  /* unpin: release one rank of a pin without loading (an entry the host
   * decided not to read). Returns ECC_OK, ECC_ERR_CLOSED (stale pin or
   * closed handle), ECC_ERR_UNSUPPORTED; also ECC_ERR_REGION, and
   * ECC_ERR_BUSY (the lock's timeout: see The directory). */
  int (*unpin)(ecc_handle_t h, uint64_t token);

  /* remove: drop a ready entry by key. Returns ECC_OK, ECC_ERR_INVALID,
   * ECC_ERR_RANGE (no such entry), ECC_ERR_BUSY (pinned, or being
   * written), ECC_ERR_CLOSED, ECC_ERR_UNSUPPORTED; also ECC_ERR_REGION. */
  int (*remove)(ecc_handle_t h, const char *key);

  /* list: up to `cap` live entries from *cursor on (start with 0), their
   * count in *n_out, and *cursor advanced; *n_out 0 at the end. Entries
   * may come and go between calls: each call is consistent on its own.
   * Returns ECC_OK, ECC_ERR_INVALID, ECC_ERR_CLOSED, ECC_ERR_UNSUPPORTED;
   * also ECC_ERR_REGION, and ECC_ERR_BUSY (the lock's timeout). On an
   * error *n_out is 0 (when n_out is not NULL) and *cursor unchanged. */
  int (*list)(ecc_handle_t h, uint64_t *cursor, ecc_listed_v1_t *out, size_t cap, size_t *n_out);

  /* ---- minor 2: the cache (see "The cache" above). A plugin sets
   * ECC_CAP_CACHE when it implements these; a handle whose region has no
   * directory answers each of them ECC_ERR_UNSUPPORTED. ---- */

  /* reserve_ex: reserve, with a cost and a type recorded in the entry. A
   * struct_size that does not cover `type` is ECC_ERR_INVALID. A type that
   * is not one (an unknown dtype, n_dims above ECC_TENSOR_MAX_DIMS, a dim 0
   * or dims past n_dims not 0) or whose bytes are not nbytes is
   * ECC_ERR_INVALID naming both. A key found READY or WRITING keeps the
   * cost and type it was reserved with. Otherwise as reserve. */
  int (*reserve_ex)(ecc_handle_t h, const ecc_reserve_args_v1_t *args, ecc_entry_v1_t *out);

  /* peek: for each of `n` keys, what lookup would find, without pinning,
   * marking used or counting anything. Any role.
   * Returns ECC_OK, ECC_ERR_INVALID (NULL or bad key, out NULL),
   * ECC_ERR_CLOSED, ECC_ERR_REGION, ECC_ERR_BUSY (the lock's timeout),
   * ECC_ERR_UNSUPPORTED. */
  int (*peek)(ecc_handle_t h, const char *const *keys, size_t n, ecc_peek_v1_t *out);

  /* wait_ready: look the key up (as lookup, pinning for `ranks`); when
   * another process holds a reservation of it, sleep until that ends or
   * `timeout_ns` passes (0: do not sleep; at most 3,600 s). On ECC_OK
   * out->state is
   *   READY:   found, pinned for `ranks` releases as lookup pins (ranks 0:
   *            not pinned, out->token 0; any role);
   *   ABSENT:  nobody is writing it: never reserved, or its writer aborted
   *            or died (then the reservation has been reclaimed): the caller
   *            may reserve it now;
   *   WRITING: the timeout passed while it was still being written; nothing
   *            was pinned or changed.
   * `meta` (may be NULL) receives the entry's cost and type when READY. A
   * reservation of the calling process is waited for as any other (another
   * thread may be writing it); a thread that waits for its own runs into
   * the timeout. Every wait_ready counts as one lookup (a hit when READY). 
   * Returns ECC_OK, ECC_ERR_INVALID (key, out NULL, timeout above the
   * bound, ranks above ECC_RANKS_MAX), ECC_ERR_ROLE (ranks > 0 on a
   * producer), ECC_ERR_BUSY (no free pin), ECC_ERR_CLOSED, ECC_ERR_REGION,
   * ECC_ERR_UNSUPPORTED. */
  int (*wait_ready)(ecc_handle_t h, const char *key, uint32_t ranks, uint64_t timeout_ns,
                    ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta);

  /* lookup_ex: lookup, and meta[i] (meta may be NULL) receives each found
   * entry's cost and type (all 0 for an absent one). Otherwise as lookup;
   * found entries' costs are added to encoder_us_saved. */
  int (*lookup_ex)(ecc_handle_t h, const char *const *keys, size_t n, uint32_t ranks,
                   ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta);

  /* load_typed: load_pinned, after checking each entry's declared type
   * against the entry's. A typed entry must have exactly that type; an
   * untyped one, that many bytes. A mismatch is ECC_ERR_RANGE naming the
   * record, both types and both byte counts; a declared type that is not
   * one (as for reserve_ex) or untyped is ECC_ERR_INVALID. Every record is
   * checked before any is queued. Otherwise as load_pinned. */
  int (*load_typed)(ecc_handle_t h, const ecc_load_typed_v1_t *entries, size_t n,
                    void *compute_stream);

  /* list_ex: list, and meta[i] (meta may be NULL) receives each listed
   * entry's cost, hits and type. Otherwise as list. */
  int (*list_ex)(ecc_handle_t h, uint64_t *cursor, ecc_listed_v1_t *out, ecc_entry_meta_v1_t *meta,
                 size_t cap, size_t *n_out);

  /* events: up to `cap` residency events from sequence number *cursor on
   * (0: from the oldest the ring still holds), oldest first; their count in
   * *n_out, *cursor advanced past the last one written. *lost (may be NULL)
   * receives how many events from *cursor on were overwritten before this
   * call could read them (the reader fell behind by more than the ring
   * holds, or a writer overtook it while it read); the events returned
   * follow them. cap 0 (out may then be NULL) reads nothing and sets
   * *cursor to the next event to come: a reader that wants only new events
   * starts so. Never waits for a lock and never delays a writer.
   * Returns ECC_OK, ECC_ERR_INVALID (cursor or n_out NULL, out NULL with
   * cap > 0), ECC_ERR_CLOSED, ECC_ERR_REGION, ECC_ERR_UNSUPPORTED. On an
   * error *n_out is 0 and *cursor unchanged. */
  int (*events)(ecc_handle_t h, uint64_t *cursor, ecc_event_v1_t *out, size_t cap, size_t *n_out,
                uint64_t *lost);
} ecc_plugin_v1_t;

#ifdef __cplusplus
}
#endif

#endif /* ECC_PLUGIN_V1_H */
