/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_layout.c - prints what the C compiler makes of the public headers, for
 * python/tests/test_abi_layout.py to compare with the client's ctypes mirror:
 * every struct's size and its fields' offsets and sizes, and every closed set.
 */
#include <stddef.h>
#include <stdio.h>

#include "ecc_host.h"

#define STRUCT(type) printf("struct %s %zu\n", #type, sizeof(type))
#define FIELD(type, field) \
  printf("field %s %s %zu %zu\n", #type, #field, offsetof(type, field), sizeof(((type *)0)->field))

static void save_side(void)
{
  STRUCT(ecc_kv_t);
  FIELD(ecc_kv_t, key);
  FIELD(ecc_kv_t, value);
  STRUCT(ecc_open_options_t);
  FIELD(ecc_open_options_t, struct_size);
  FIELD(ecc_open_options_t, overrides);
  FIELD(ecc_open_options_t, n_overrides);
  FIELD(ecc_open_options_t, log);
  FIELD(ecc_open_options_t, log_user);
  FIELD(ecc_open_options_t, log_level);
  FIELD(ecc_open_options_t, check_timeout_ms);
  STRUCT(ecc_save_entry_t);
  FIELD(ecc_save_entry_t, key);
  FIELD(ecc_save_entry_t, src);
  FIELD(ecc_save_entry_t, nbytes);
  FIELD(ecc_save_entry_t, block_ids);
  FIELD(ecc_save_entry_t, n_blocks);
  STRUCT(ecc_load_entry_t);
  FIELD(ecc_load_entry_t, transfer_id);
  FIELD(ecc_load_entry_t, block_ids);
  FIELD(ecc_load_entry_t, n_blocks);
  FIELD(ecc_load_entry_t, dst);
  FIELD(ecc_load_entry_t, dst_capacity);
  STRUCT(ecc_completion_t);
  FIELD(ecc_completion_t, direction);
  FIELD(ecc_completion_t, status);
  FIELD(ecc_completion_t, transfer_id);
  FIELD(ecc_completion_t, batch);
  FIELD(ecc_completion_t, nbytes);
  FIELD(ecc_completion_t, elapsed_ns);
  FIELD(ecc_completion_t, key);
}

static void counters(void)
{
  STRUCT(ecc_dir_stats_t);
  FIELD(ecc_dir_stats_t, transfers);
  FIELD(ecc_dir_stats_t, entries);
  FIELD(ecc_dir_stats_t, descriptors);
  FIELD(ecc_dir_stats_t, bytes);
  FIELD(ecc_dir_stats_t, busy_ns);
  FIELD(ecc_dir_stats_t, failed);
  FIELD(ecc_dir_stats_t, hist);
  STRUCT(ecc_directory_stats_t);
  FIELD(ecc_directory_stats_t, entries);
  FIELD(ecc_directory_stats_t, blocks_used);
  FIELD(ecc_directory_stats_t, blocks_free);
  FIELD(ecc_directory_stats_t, largest_free_run);
  FIELD(ecc_directory_stats_t, pins_live);
  FIELD(ecc_directory_stats_t, reservations);
  FIELD(ecc_directory_stats_t, dedup_hits);
  FIELD(ecc_directory_stats_t, lookups);
  FIELD(ecc_directory_stats_t, hits);
  FIELD(ecc_directory_stats_t, misses);
  FIELD(ecc_directory_stats_t, evictions);
  FIELD(ecc_directory_stats_t, removals);
  FIELD(ecc_directory_stats_t, pins);
  FIELD(ecc_directory_stats_t, reclaimed);
  FIELD(ecc_directory_stats_t, full);
  STRUCT(ecc_stats_t);
  FIELD(ecc_stats_t, struct_size);
  FIELD(ecc_stats_t, reserved);
  FIELD(ecc_stats_t, save);
  FIELD(ecc_stats_t, load);
  FIELD(ecc_stats_t, saves_skipped);
  FIELD(ecc_stats_t, pin_ns);
  FIELD(ecc_stats_t, directory);
  FIELD(ecc_stats_t, cache);
  STRUCT(ecc_cache_stats_t);
  FIELD(ecc_cache_stats_t, waits);
  FIELD(ecc_cache_stats_t, waits_ready);
  FIELD(ecc_cache_stats_t, waits_absent);
  FIELD(ecc_cache_stats_t, wait_timeouts);
  FIELD(ecc_cache_stats_t, encoder_us_saved);
  FIELD(ecc_cache_stats_t, events);
  FIELD(ecc_cache_stats_t, restarts);
}

static void description(void)
{
  STRUCT(ecc_info_t);
  FIELD(ecc_info_t, struct_size);
  FIELD(ecc_info_t, creator);
  FIELD(ecc_info_t, region_path);
  FIELD(ecc_info_t, block_size);
  FIELD(ecc_info_t, num_blocks);
  FIELD(ecc_info_t, region_bytes);
  FIELD(ecc_info_t, engine);
  FIELD(ecc_info_t, engine_detail);
  FIELD(ecc_info_t, role);
  FIELD(ecc_info_t, save_rank);
  FIELD(ecc_info_t, pinned);
  FIELD(ecc_info_t, max_inflight);
  FIELD(ecc_info_t, persist);
  FIELD(ecc_info_t, restarted);
  FIELD(ecc_info_t, policy);
}

static void directory(void)
{
  STRUCT(ecc_extent_t);
  FIELD(ecc_extent_t, first_block);
  FIELD(ecc_extent_t, n_blocks);
  STRUCT(ecc_entry_t);
  FIELD(ecc_entry_t, state);
  FIELD(ecc_entry_t, n_extents);
  FIELD(ecc_entry_t, token);
  FIELD(ecc_entry_t, nbytes);
  FIELD(ecc_entry_t, extents);
  STRUCT(ecc_save_reserved_t);
  FIELD(ecc_save_reserved_t, token);
  FIELD(ecc_save_reserved_t, src);
  FIELD(ecc_save_reserved_t, nbytes);
  STRUCT(ecc_load_pinned_t);
  FIELD(ecc_load_pinned_t, transfer_id);
  FIELD(ecc_load_pinned_t, token);
  FIELD(ecc_load_pinned_t, dst);
  FIELD(ecc_load_pinned_t, dst_capacity);
  STRUCT(ecc_listed_t);
  FIELD(ecc_listed_t, key);
  FIELD(ecc_listed_t, state);
  FIELD(ecc_listed_t, pins);
  FIELD(ecc_listed_t, nbytes);
  FIELD(ecc_listed_t, n_blocks);
  FIELD(ecc_listed_t, n_extents);
  FIELD(ecc_listed_t, age_ns);
  FIELD(ecc_listed_t, idle_ns);
}

static void cache(void)
{
  STRUCT(ecc_tensor_t);
  FIELD(ecc_tensor_t, dtype);
  FIELD(ecc_tensor_t, n_dims);
  FIELD(ecc_tensor_t, dims);
  STRUCT(ecc_entry_meta_t);
  FIELD(ecc_entry_meta_t, cost_us);
  FIELD(ecc_entry_meta_t, hits);
  FIELD(ecc_entry_meta_t, type);
  STRUCT(ecc_reserve_args_t);
  FIELD(ecc_reserve_args_t, struct_size);
  FIELD(ecc_reserve_args_t, reserved);
  FIELD(ecc_reserve_args_t, key);
  FIELD(ecc_reserve_args_t, nbytes);
  FIELD(ecc_reserve_args_t, cost_us);
  FIELD(ecc_reserve_args_t, type);
  STRUCT(ecc_peek_t);
  FIELD(ecc_peek_t, state);
  FIELD(ecc_peek_t, pins);
  FIELD(ecc_peek_t, nbytes);
  FIELD(ecc_peek_t, meta);
  STRUCT(ecc_load_typed_t);
  FIELD(ecc_load_typed_t, transfer_id);
  FIELD(ecc_load_typed_t, token);
  FIELD(ecc_load_typed_t, dst);
  FIELD(ecc_load_typed_t, dst_capacity);
  FIELD(ecc_load_typed_t, type);
  STRUCT(ecc_event_t);
  FIELD(ecc_event_t, seq);
  FIELD(ecc_event_t, time_ns);
  FIELD(ecc_event_t, instance);
  FIELD(ecc_event_t, nbytes);
  FIELD(ecc_event_t, cost_us);
  FIELD(ecc_event_t, kind);
  FIELD(ecc_event_t, reserved);
  FIELD(ecc_event_t, key);
}

static void closed_sets(void)
{
#define ROW(set, name, value, text) printf("%s %s %d %s\n", set, #name, (int)(value), text);
#define STATUS_ROW(name, value, text) ROW("status", name, value, text)
#define LEVEL_ROW(name, value, text) ROW("level", name, value, text)
#define DIR_ROW(name, value, text) ROW("dir", name, value, text)
#define STATE_ROW(name, value, text) ROW("state", name, value, text)
#define CAP_ROW(name, bit, text) ROW("cap", name, bit, text)
#define DTYPE_ROW(name, value, text, bytes) \
  printf("dtype %s %d %s %d\n", #name, (int)(value), text, (int)(bytes));
#define EVENT_ROW(name, value, text) ROW("event", name, value, text)
  ECC_STATUS_MAP(STATUS_ROW)
  ECC_LOG_LEVEL_MAP(LEVEL_ROW)
  ECC_DIR_MAP(DIR_ROW)
  ECC_ENTRY_STATE_MAP(STATE_ROW)
  ECC_CAP_MAP(CAP_ROW)
  ECC_DTYPE_MAP(DTYPE_ROW)
  ECC_EVENT_MAP(EVENT_ROW)
#define HIST_ROW(bound) printf("hist %llu\n", (unsigned long long)(bound));
  ECC_HIST_BOUNDS(HIST_ROW)
  printf("const ECC_KEY_MAX %d\n", ECC_KEY_MAX);
  printf("const ECC_ENTRY_MAX_EXTENTS %d\n", ECC_ENTRY_MAX_EXTENTS);
  printf("const ECC_HIST_BUCKETS %d\n", ECC_HIST_BUCKETS);
  printf("const ECC_ABI_MAJOR %d\n", ECC_ABI_MAJOR);
  printf("const ECC_ABI_MINOR %d\n", ECC_ABI_MINOR);
  printf("const ECC_TENSOR_MAX_DIMS %d\n", ECC_TENSOR_MAX_DIMS);
}

int main(void)
{
  save_side();
  counters();
  description();
  directory();
  cache();
  closed_sets();
  return 0;
}
