/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_helpers.h - what the tests of libecc-ucx.so share: a server or
 * client INI on loopback, an open that must succeed, the byte pattern an
 * entry is checked against, and a producer's reserve-save-poll.
 */
#ifndef ECC_TESTS_UCX_HELPERS_H
#define ECC_TESTS_UCX_HELPERS_H

#include <stdint.h>

#include "ecc_host.h"

/* An INI for libecc-ucx.so as `role` ("server" or "client") on
 * 127.0.0.1:port, region `region` of 2048 blocks of block_size bytes, the
 * host engine and the directory; `extra` (may be NULL) is appended inside
 * [ucx]. Static storage, as th_ini_text's. */
const char *th_ucx_ini(const char *role, const char *region, uint64_t block_size, uint16_t port,
                       const char *extra);

/* ecc_open of ini with no options; the test fails with the error text. */
ecc_connector_t *th_open_ok(const char *ini);

/* Byte i of the entry named key. */
uint8_t th_pattern(const char *key, uint64_t i);

/* The producer's side: reserve key, save nbytes of th_pattern from host
 * memory, wait for the save's completion (the test fails otherwise). */
void th_produce(ecc_connector_t *srv, const char *key, uint64_t nbytes);

/* The pins ecc_list reports on key, UINT32_MAX when it is not listed. */
uint32_t th_pins_on(ecc_connector_t *c, const char *key);

#endif /* ECC_TESTS_UCX_HELPERS_H */
