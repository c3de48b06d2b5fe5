/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ecc_common.h - what every version of the encoder-cache connector plugin
 * ABI shares: status codes, log levels, capability bits, directions, the
 * handle type, the longest key, and how to read a struct whose other side
 * may be older. Each versioned header (ecc_plugin_v1.h, ...) includes it.
 *
 * Append only: a code, level or bit, once released, keeps its value and
 * meaning for good. Each closed set is written once, as an X-macro table
 * (X(name, value, text) per member), so that code naming the members
 * (ecc_strerror, the INI's log_level names, eccctl's capability list)
 * derives them from here instead of repeating them.
 */
#ifndef ECC_COMMON_H
#define ECC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: 0 is success, the errors a closed set of negatives. Every
 * function of every ABI version returns one of these. */
#define ECC_STATUS_MAP(X)                                                                       \
  X(ECC_OK, 0, "success")                                                                       \
  X(ECC_ERR_INVALID, -1, "bad argument: NULL pointer, empty or over-long key, zero size")       \
  X(ECC_ERR_RANGE, -2, "block id past the region, or data larger than its blocks")              \
  X(ECC_ERR_ROLE, -3, "save on a consumer, or load on a producer")                              \
  X(ECC_ERR_BUSY, -4, "in-flight bound reached, or no room in the directory: poll, then retry") \
  X(ECC_ERR_CONFIG, -5, "unknown configuration key or bad value")                               \
  X(ECC_ERR_INCOMPATIBLE, -6, "ABI version not supported, or a plugin that breaks the ABI")     \
  X(ECC_ERR_REGION, -7, "shared region foreign, truncated, unsafe, of another layout, or gone") \
  X(ECC_ERR_SYSTEM, -8, "an operating-system call failed")                                      \
  X(ECC_ERR_NOMEM, -9, "out of host memory")                                                    \
  X(ECC_ERR_DEVICE, -10, "the GPU runtime failed")                                              \
  X(ECC_ERR_TRANSFER, -11, "a copy failed")                                                     \
  X(ECC_ERR_CLOSED, -12, "handle shut down, never existed, or inherited through fork")          \
  X(ECC_ERR_UNSUPPORTED, -13, "not built in or not available here")

typedef enum ecc_status {
#define ECC_STATUS_ENUM(name, value, text) name = value,
  ECC_STATUS_MAP(ECC_STATUS_ENUM)
#undef ECC_STATUS_ENUM
} ecc_status_t;

/* The most negative code; a code below it (or above ECC_OK) is not one. */
#define ECC_STATUS_MIN ECC_ERR_UNSUPPORTED

/* Log levels, most severe first; the text is the level's name in INI files. */
#define ECC_LOG_LEVEL_MAP(X)   \
  X(ECC_LOG_ERROR, 0, "error") \
  X(ECC_LOG_WARN, 1, "warn")   \
  X(ECC_LOG_INFO, 2, "info")   \
  X(ECC_LOG_DEBUG, 3, "debug")

typedef enum ecc_log_level {
#define ECC_LOG_LEVEL_ENUM(name, value, text) name = value,
  ECC_LOG_LEVEL_MAP(ECC_LOG_LEVEL_ENUM)
#undef ECC_LOG_LEVEL_ENUM
} ecc_log_level_t;

/* Capability bits of a plugin's table: X(name, bit number, short name). */
#define ECC_CAP_MAP(X)                     \
  X(ECC_CAP_SAVE, 0, "save")               \
  X(ECC_CAP_LOAD, 1, "load")               \
  X(ECC_CAP_HOST_ENGINE, 2, "host-engine") \
  X(ECC_CAP_CUDA_ENGINE, 3, "cuda-engine") \
  X(ECC_CAP_STATS, 4, "stats")             \
  X(ECC_CAP_DIRECTORY, 5, "directory")     \
  X(ECC_CAP_CACHE, 6, "cache")

enum ecc_cap {
#define ECC_CAP_ENUM(name, bit, text) name = 1u << (bit),
  ECC_CAP_MAP(ECC_CAP_ENUM)
#undef ECC_CAP_ENUM
};
/* ECC_CAP_SAVE:        implements the producer side
 * ECC_CAP_LOAD:        implements the consumer side
 * ECC_CAP_HOST_ENGINE: can copy to and from host memory (no GPU needed)
 * ECC_CAP_CUDA_ENGINE: built with the CUDA engine (a GPU may still be absent)
 * ECC_CAP_STATS:       the stats function is implemented
 * ECC_CAP_DIRECTORY:   implements the directory functions of ABI 1.1 (reserve,
 *                      lookup, ...); a handle answers them only when its region
 *                      has a directory
 * ECC_CAP_CACHE:       implements the cache functions of ABI 1.2 (reserve_ex,
 *                      peek, wait_ready, lookup_ex, load_typed, list_ex,
 *                      events) on the same terms */

/* Which direction a completion belongs to: X(name, value, text). */
#define ECC_DIR_MAP(X)       \
  X(ECC_DIR_SAVE, 1, "save") \
  X(ECC_DIR_LOAD, 2, "load")

enum ecc_dir {
#define ECC_DIR_ENUM(name, value, text) name = value,
  ECC_DIR_MAP(ECC_DIR_ENUM)
#undef ECC_DIR_ENUM
};
/* ECC_DIR_SAVE: device -> region; ECC_DIR_LOAD: region -> device. */

/* The states of a directory entry as reserve, lookup and list report them:
 * X(name, value, text). */
#define ECC_ENTRY_STATE_MAP(X)         \
  X(ECC_ENTRY_ABSENT, 0, "absent")     \
  X(ECC_ENTRY_RESERVED, 1, "reserved") \
  X(ECC_ENTRY_WRITING, 2, "writing")   \
  X(ECC_ENTRY_READY, 3, "ready")

enum ecc_entry_state {
#define ECC_ENTRY_STATE_ENUM(name, value, text) name = value,
  ECC_ENTRY_STATE_MAP(ECC_ENTRY_STATE_ENUM)
#undef ECC_ENTRY_STATE_ENUM
};
/* ECC_ENTRY_ABSENT:   lookup: not there, or not ready yet
 * ECC_ENTRY_RESERVED: reserve: blocks are reserved for the caller to write;
 *                     list: a reservation being written
 * ECC_ENTRY_WRITING:  reserve: another reservation of the key is being written
 * ECC_ENTRY_READY:    written and published: lookups find it */

/* Element types of a typed entry (ABI 1.2): X(name, value, text, bytes per
 * element). The text is the name eccctl, the INI and the Python client use
 * (as numpy and PyTorch spell them). ECC_DTYPE_NONE marks an untyped entry. */
#define ECC_DTYPE_MAP(X)                           \
  X(ECC_DTYPE_NONE, 0, "none", 0)                  \
  X(ECC_DTYPE_FLOAT32, 1, "float32", 4)            \
  X(ECC_DTYPE_FLOAT16, 2, "float16", 2)            \
  X(ECC_DTYPE_BFLOAT16, 3, "bfloat16", 2)          \
  X(ECC_DTYPE_FLOAT64, 4, "float64", 8)            \
  X(ECC_DTYPE_INT8, 5, "int8", 1)                  \
  X(ECC_DTYPE_UINT8, 6, "uint8", 1)                \
  X(ECC_DTYPE_INT16, 7, "int16", 2)                \
  X(ECC_DTYPE_INT32, 8, "int32", 4)                \
  X(ECC_DTYPE_INT64, 9, "int64", 8)                \
  X(ECC_DTYPE_FLOAT8_E4M3, 10, "float8_e4m3fn", 1) \
  X(ECC_DTYPE_FLOAT8_E5M2, 11, "float8_e5m2", 1)

enum ecc_dtype {
#define ECC_DTYPE_ENUM(name, value, text, bytes) name = value,
  ECC_DTYPE_MAP(ECC_DTYPE_ENUM)
#undef ECC_DTYPE_ENUM
};

/* Most dimensions a typed entry records. */
#define ECC_TENSOR_MAX_DIMS 4

/* What a residency event reports (ABI 1.2): X(name, value, text). */
#define ECC_EVENT_MAP(X)             \
  X(ECC_EVENT_STORED, 1, "stored")   \
  X(ECC_EVENT_EVICTED, 2, "evicted") \
  X(ECC_EVENT_REMOVED, 3, "removed") \
  X(ECC_EVENT_RECLAIMED, 4, "reclaimed")

enum ecc_event_kind {
#define ECC_EVENT_ENUM(name, value, text) name = value,
  ECC_EVENT_MAP(ECC_EVENT_ENUM)
#undef ECC_EVENT_ENUM
};
/* ECC_EVENT_STORED:    an entry was published: lookups find it from now on
 * ECC_EVENT_EVICTED:   a ready entry was evicted to make room
 * ECC_EVENT_REMOVED:   a ready entry was removed by key
 * ECC_EVENT_RECLAIMED: a dead or timed-out writer's reservation was freed
 *                      (its key is absent: another process may reserve it) */

/* Longest key (content hash string) in bytes, without the terminating NUL. */
#define ECC_KEY_MAX 127

/* Most releases one lookup may pin an entry for (its `ranks`): every rank
 * of one engine that loads the entry, tensor-parallel times
 * prefill-context-parallel (TP 128 x PCP 8 fits). A lookup asking for more
 * is refused with ECC_ERR_INVALID naming this bound, so that no caller
 * (a peer host's included) can pin an entry for more releases than an
 * engine can give back. */
#define ECC_RANKS_MAX 1024

/* Opaque connector handle. 0 is never valid. After shutdown a handle's value
 * stays invalid for the life of the process, also after the plugin has been
 * closed and opened again: calls with it return ECC_ERR_CLOSED and never
 * touch freed memory. */
typedef uint64_t ecc_handle_t;

/* Marks the one symbol a plugin exports, its table, when it is built with
 * -fvisibility=hidden (as it should be: nothing else leaves the object). */
#if defined(__GNUC__)
#define ECC_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ECC_PLUGIN_EXPORT
#endif

/* Whether a struct that begins with `uint32_t struct_size`, as the other
 * side compiled it, reaches past `field` of `type`: a field appended after
 * the other side was built is read (or written) only when this holds. */
#define ECC_COVERS(ptr, type, field) \
  ((size_t)(ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

#ifdef __cplusplus
}
#endif

#endif /* ECC_COMMON_H */
