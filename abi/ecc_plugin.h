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
typedef ecc_kv_v1 ecc_kv;
typedef ecc_param_v1 ecc_param;
typedef ecc_host_services_v1 ecc_host_services;
typedef ecc_create_args_v1 ecc_create_args;
typedef ecc_save_entry_v1 ecc_save_entry;
typedef ecc_load_entry_v1 ecc_load_entry;
typedef ecc_completion_v1 ecc_completion;
typedef ecc_dir_stats_v1 ecc_dir_stats;
typedef ecc_stats_v1 ecc_stats;
typedef ecc_info_v1 ecc_info;

#endif /* ECC_PLUGIN_H */
