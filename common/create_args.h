/* SPDX-License-Identifier: Apache-2.0 */
/*
 * create_args.h - what every plugin checks of create's arguments before it
 * reads its configuration: the struct versions and the ABI version asked.
 */
#ifndef ECC_CREATE_ARGS_H
#define ECC_CREATE_ARGS_H

#include "ecc_plugin_v1.h"

/* Zeroes *out (when out is given), then ECC_OK; ECC_ERR_INVALID for NULL
 * arguments or structs shorter than their first version; ECC_ERR_INCOMPATIBLE
 * for an ABI this plugin does not implement (the reason in args->err). */
int create_args_check(const ecc_create_args_v1_t *args, ecc_handle_t *out);

#endif
