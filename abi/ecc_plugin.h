/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ecc_plugin.h - the newest encoder-cache connector plugin ABI.
 *
 * Include this to get unversioned names for the newest version. Code that
 * must keep building against one version includes ecc_plugin_vN.h instead.
 */
#ifndef ECC_PLUGIN_H
#define ECC_PLUGIN_H

#include "ecc_plugin_v1.h"

#define ECC_ABI_MAJOR ECC_ABI_V1_MAJOR
#define ECC_ABI_MINOR ECC_ABI_V1_MINOR
#define ECC_PLUGIN_SYMBOL ECC_PLUGIN_V1_SYMBOL

typedef ecc_plugin_v1_t ecc_plugin_t;
typedef ecc_kv_v1_t ecc_kv_t;
typedef ecc_param_v1_t ecc_param_t;
typedef ecc_host_services_v1_t ecc_host_services_t;
typedef ecc_create_args_v1_t ecc_create_args_t;
typedef ecc_save_entry_v1_t ecc_save_entry_t;
typedef ecc_load_entry_v1_t ecc_load_entry_t;
typedef ecc_completion_v1_t ecc_completion_t;
typedef ecc_dir_stats_v1_t ecc_dir_stats_t;
typedef ecc_stats_v1_t ecc_stats_t;
typedef ecc_info_v1_t ecc_info_t;
typedef ecc_extent_v1_t ecc_extent_t;
typedef ecc_entry_v1_t ecc_entry_t;
typedef ecc_save_reserved_v1_t ecc_save_reserved_t;
typedef ecc_load_pinned_v1_t ecc_load_pinned_t;
typedef ecc_listed_v1_t ecc_listed_t;
typedef ecc_directory_stats_v1_t ecc_directory_stats_t;
typedef ecc_cache_stats_v1_t ecc_cache_stats_t;
typedef ecc_tensor_v1_t ecc_tensor_t;
typedef ecc_entry_meta_v1_t ecc_entry_meta_t;
typedef ecc_reserve_args_v1_t ecc_reserve_args_t;
typedef ecc_peek_v1_t ecc_peek_t;
typedef ecc_load_typed_v1_t ecc_load_typed_t;
typedef ecc_event_v1_t ecc_event_t;

#endif /* ECC_PLUGIN_H */
