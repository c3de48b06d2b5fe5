/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.h - the INI's keys against the keys a plugin publishes: an unknown
 * one is refused before create runs, naming its line and, for a typo, the
 * key it is close to. Private to libecc-host.so.
 */
#ifndef ECC_SHIM_KEYS_H
#define ECC_SHIM_KEYS_H

#include <stddef.h>

#include "host-shim/ini_config.h"
#include "host-shim/loader.h"

/* ECC_OK, or ECC_ERR_CONFIG with "<file>:<line>: unknown key ... did you
 * mean ...?" in err. A plugin that publishes no keys judges them itself. */
int keys_check(const struct ini_config *ini, const struct plugin_ops *ops, char *err,
               size_t err_cap);

#endif /* ECC_SHIM_KEYS_H */
