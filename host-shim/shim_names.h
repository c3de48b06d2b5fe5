/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shim_names.h - the host library's view of the closed sets of
 * ecc_common.h: whether a status is one, and the names of log levels (as
 * INI files spell them). Private to libecc-host.so.
 */
#ifndef ECC_SHIM_NAMES_H
#define ECC_SHIM_NAMES_H

/* 1 if code is ECC_OK or one of the ECC_ERR_* codes. */
int shim_status_known(int code);

/* "error", "warn", "info", "debug"; NULL for anything else. */
const char *shim_level_name(int level);

/* "error | warn | info | debug", for messages. */
const char *shim_level_names(void);

/* The level a name stands for, or -1. */
int shim_level_from_name(const char *text);

#endif /* ECC_SHIM_NAMES_H */
