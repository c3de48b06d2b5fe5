# SPDX-License-Identifier: Apache-2.0
"""The C ABI as ctypes sees it: the closed sets of abi/ecc_common.h written once as
tables (status codes, log levels, directions, entry states, capability bits), the
constants, and every struct of ecc_host.h / ecc_plugin_v1.h the client passes."""

import enum
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

ABI_MAJOR = 1
ABI_MINOR = 2
KEY_MAX = 127
ENTRY_MAX_EXTENTS = 8
HIST_BOUNDS = (500000, 1000000, 2000000, 5000000, 10000000, 20000000, 50000000, 100000000,
               250000000)
HIST_BUCKETS = len(HIST_BOUNDS) + 1

# (name, value, text), as ECC_STATUS_MAP has them; tests/test_abi_layout.py
# compares every row with what the C compiler sees.
STATUS_TABLE = (
    ("ECC_OK", 0, "success"),
    ("ECC_ERR_INVALID", -1, "bad argument: NULL pointer, empty or over-long key, zero size"),
    ("ECC_ERR_RANGE", -2, "block id past the region, or data larger than its blocks"),
    ("ECC_ERR_ROLE", -3, "save on a consumer, or load on a producer"),
    ("ECC_ERR_BUSY", -4, "in-flight bound reached, or no room in the directory: poll, then retry"),
    ("ECC_ERR_CONFIG", -5, "unknown configuration key or bad value"),
    ("ECC_ERR_INCOMPATIBLE", -6, "ABI version not supported, or a plugin that breaks the ABI"),
    ("ECC_ERR_REGION", -7, "shared region foreign, truncated, unsafe, of another layout, or gone"),
    ("ECC_ERR_SYSTEM", -8, "an operating-system call failed"),
    ("ECC_ERR_NOMEM", -9, "out of host memory"),
    ("ECC_ERR_DEVICE", -10, "the GPU runtime failed"),
    ("ECC_ERR_TRANSFER", -11, "a copy failed"),
    ("ECC_ERR_CLOSED", -12, "handle shut down, never existed, or inherited through fork"),
    ("ECC_ERR_UNSUPPORTED", -13, "not built in or not available here"),
)
LOG_LEVEL_TABLE = (("ECC_LOG_ERROR", 0, "error"), ("ECC_LOG_WARN", 1, "warn"),
                   ("ECC_LOG_INFO", 2, "info"), ("ECC_LOG_DEBUG", 3, "debug"))
DIR_TABLE = (("ECC_DIR_SAVE", 1, "save"), ("ECC_DIR_LOAD", 2, "load"))
ENTRY_STATE_TABLE = (("ECC_ENTRY_ABSENT", 0, "absent"), ("ECC_ENTRY_RESERVED", 1, "reserved"),
                     ("ECC_ENTRY_WRITING", 2, "writing"), ("ECC_ENTRY_READY", 3, "ready"))
# (name, bit number, short name), as ECC_CAP_MAP.
CAP_TABLE = (("ECC_CAP_SAVE", 0, "save"), ("ECC_CAP_LOAD", 1, "load"),
             ("ECC_CAP_HOST_ENGINE", 2, "host-engine"), ("ECC_CAP_CUDA_ENGINE", 3, "cuda-engine"),
             ("ECC_CAP_STATS", 4, "stats"), ("ECC_CAP_DIRECTORY", 5, "directory"),
             ("ECC_CAP_CACHE", 6, "cache"))
# (name, value, text, bytes per element), as ECC_DTYPE_MAP.
DTYPE_TABLE = (("ECC_DTYPE_NONE", 0, "none", 0), ("ECC_DTYPE_FLOAT32", 1, "float32", 4),
               ("ECC_DTYPE_FLOAT16", 2, "float16", 2), ("ECC_DTYPE_BFLOAT16", 3, "bfloat16", 2),
               ("ECC_DTYPE_FLOAT64", 4, "float64", 8), ("ECC_DTYPE_INT8", 5, "int8", 1),
               ("ECC_DTYPE_UINT8", 6, "uint8", 1), ("ECC_DTYPE_INT16", 7, "int16", 2),
               ("ECC_DTYPE_INT32", 8, "int32", 4), ("ECC_DTYPE_INT64", 9, "int64", 8),
               ("ECC_DTYPE_FLOAT8_E4M3", 10, "float8_e4m3fn", 1),
               ("ECC_DTYPE_FLOAT8_E5M2", 11, "float8_e5m2", 1))
# (name, value, text), as ECC_EVENT_MAP.
EVENT_TABLE = (("ECC_EVENT_STORED", 1, "stored"), ("ECC_EVENT_EVICTED", 2, "evicted"),
               ("ECC_EVENT_REMOVED", 3, "removed"), ("ECC_EVENT_RECLAIMED", 4, "reclaimed"))
TENSOR_MAX_DIMS = 4

Status = enum.IntEnum("Status", [(name, value) for name, value, _ in STATUS_TABLE])
Status.__doc__ = "An ECC_* status code: .name is the C name, the value the C value."
STATUS_TEXT = {value: text for _, value, text in STATUS_TABLE}


def _short(table, prefix):
    return [(name[len(prefix):], value) for name, value, _ in table]


LogLevel = enum.IntEnum("LogLevel", _short(LOG_LEVEL_TABLE, "ECC_LOG_"))
EntryState = enum.IntEnum("EntryState", _short(ENTRY_STATE_TABLE, "ECC_ENTRY_"))
DIRECTION_NAME = {value: text for _, value, text in DIR_TABLE}
DIR_SAVE, DIR_LOAD = (value for _, value, _ in DIR_TABLE)


def status_of(code):
    """The Status member of a code, or the plain int for one outside the set."""
    try:
        return Status(code)
    except ValueError:
        return code


# ---- structs (field for field as the headers declare them) ----

LogFunction = CFUNCTYPE(None, c_void_p, c_int, c_char_p)


class KeyValue(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


class OpenOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("overrides", POINTER(KeyValue)),
        ("n_overrides", c_size_t),
        ("log", LogFunction),
        ("log_user", c_void_p),
        ("log_level", c_int),
        ("check_timeout_ms", c_uint64),
    ]


class SaveEntry(Structure):
    _fields_ = [
        ("key", c_char_p),
        ("src", c_uint64),
        ("nbytes", c_uint64),
        ("block_ids", c_void_p),  # const uint32_t *
        ("n_blocks", c_uint32),
    ]


class LoadEntry(Structure):
    _fields_ = [
        ("transfer_id", c_uint64),
        ("block_ids", c_void_p),  # const uint32_t *
        ("n_blocks", c_uint32),
        ("dst", c_uint64),
        ("dst_capacity", c_uint64),
    ]


class CompletionRecord(Structure):
    _fields_ = [
        ("direction", c_uint32),
        ("status", c_int32),
        ("transfer_id", c_uint64),
        ("batch", c_uint64),
        ("nbytes", c_uint64),
        ("elapsed_ns", c_uint64),
        ("key", c_char * (KEY_MAX + 1)),
    ]


DIR_STATS_FIELDS = ("transfers", "entries", "descriptors", "bytes", "busy_ns", "failed")


class DirStatsRecord(Structure):
    _fields_ = [(name, c_uint64) for name in DIR_STATS_FIELDS] + [
        ("hist", c_uint64 * HIST_BUCKETS)
    ]


DIRECTORY_STATS_FIELDS = ("entries", "blocks_used", "blocks_free", "largest_free_run",
                          "pins_live", "reservations", "dedup_hits", "lookups", "hits", "misses",
                          "evictions", "removals", "pins", "reclaimed", "full")


class DirectoryStatsRecord(Structure):
    _fields_ = [(name, c_uint64) for name in DIRECTORY_STATS_FIELDS]


CACHE_STATS_FIELDS = ("waits", "waits_ready", "waits_absent", "wait_timeouts",
                      "encoder_us_saved", "events", "restarts")


class CacheStatsRecord(Structure):
    _fields_ = [(name, c_uint64) for name in CACHE_STATS_FIELDS]


class StatsRecord(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("reserved", c_uint32),
        ("save", DirStatsRecord),
        ("load", DirStatsRecord),
        ("saves_skipped", c_uint64),
        ("pin_ns", c_uint64),
        ("directory", DirectoryStatsRecord),
        ("cache", CacheStatsRecord),
    ]


class InfoRecord(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("creator", c_uint32),
        ("region_path", c_char * 256),
        ("block_size", c_uint64),
        ("num_blocks", c_uint64),
        ("region_bytes", c_uint64),
        ("engine", c_char * 32),
        ("engine_detail", c_char * 128),
        ("role", c_char * 16),
        ("save_rank", c_uint32),
        ("pinned", c_uint32),
        ("max_inflight", c_uint64),
        ("persist", c_uint32),
        ("restarted", c_uint32),
        ("policy", c_char * 16),
    ]


class Extent(Structure):
    _fields_ = [("first_block", c_uint32), ("n_blocks", c_uint32)]


class EntryRecord(Structure):
    _fields_ = [
        ("state", c_int32),
        ("n_extents", c_uint32),
        ("token", c_uint64),
        ("nbytes", c_uint64),
        ("extents", Extent * ENTRY_MAX_EXTENTS),
    ]


class SaveReserved(Structure):
    _fields_ = [("token", c_uint64), ("src", c_uint64), ("nbytes", c_uint64)]


class LoadPinned(Structure):
    _fields_ = [
        ("transfer_id", c_uint64),
        ("token", c_uint64),
        ("dst", c_uint64),
        ("dst_capacity", c_uint64),
    ]


class ListedRecord(Structure):
    _fields_ = [
        ("key", c_char * (KEY_MAX + 1)),
        ("state", c_int32),
        ("pins", c_uint32),
        ("nbytes", c_uint64),
        ("n_blocks", c_uint32),
        ("n_extents", c_uint32),
        ("age_ns", c_uint64),
        ("idle_ns", c_uint64),
    ]


class Tensor(Structure):
    _fields_ = [("dtype", c_uint32), ("n_dims", c_uint32), ("dims", c_uint64 * TENSOR_MAX_DIMS)]


class EntryMeta(Structure):
    _fields_ = [("cost_us", c_uint64), ("hits", c_uint64), ("type", Tensor)]


class ReserveArgs(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("reserved", c_uint32),
        ("key", c_char_p),
        ("nbytes", c_uint64),
        ("cost_us", c_uint64),
        ("type", Tensor),
    ]


class PeekRecord(Structure):
    _fields_ = [("state", c_int32), ("pins", c_uint32), ("nbytes", c_uint64), ("meta", EntryMeta)]


class LoadTyped(Structure):
    _fields_ = [
        ("transfer_id", c_uint64),
        ("token", c_uint64),
        ("dst", c_uint64),
        ("dst_capacity", c_uint64),
        ("type", Tensor),
    ]


class EventRecord(Structure):
    _fields_ = [
        ("seq", c_uint64),
        ("time_ns", c_uint64),
        ("instance", c_uint64),
        ("nbytes", c_uint64),
        ("cost_us", c_uint64),
        ("kind", c_int32),
        ("reserved", c_uint32),
        ("key", c_char * (KEY_MAX + 1)),
    ]


# The C name of each struct above, for the layout test.
C_STRUCTS = {
    "ecc_kv_t": KeyValue,
    "ecc_open_options_t": OpenOptions,
    "ecc_save_entry_t": SaveEntry,
    "ecc_load_entry_t": LoadEntry,
    "ecc_completion_t": CompletionRecord,
    "ecc_dir_stats_t": DirStatsRecord,
    "ecc_directory_stats_t": DirectoryStatsRecord,
    "ecc_stats_t": StatsRecord,
    "ecc_info_t": InfoRecord,
    "ecc_extent_t": Extent,
    "ecc_entry_t": EntryRecord,
    "ecc_save_reserved_t": SaveReserved,
    "ecc_load_pinned_t": LoadPinned,
    "ecc_listed_t": ListedRecord,
    "ecc_cache_stats_t": CacheStatsRecord,
    "ecc_tensor_t": Tensor,
    "ecc_entry_meta_t": EntryMeta,
    "ecc_reserve_args_t": ReserveArgs,
    "ecc_peek_t": PeekRecord,
    "ecc_load_typed_t": LoadTyped,
    "ecc_event_t": EventRecord,
}
