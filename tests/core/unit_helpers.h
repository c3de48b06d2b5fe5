/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit_helpers.h - what the tests of core/'s units share beyond
 * tests/helpers.h: they call the units directly, so they see their structs.
 */
#ifndef ECC_TESTS_CORE_UNIT_HELPERS_H
#define ECC_TESTS_CORE_UNIT_HELPERS_H

#include <stdint.h>

#include "common/log.h"
#include "core/region/region.h"

/* The most recent error of a plugin log (static storage). */
const char *th_log_last(struct ecc_log *log);

/* A valid region header for bs-byte blocks, nb of them, made by this user. */
struct region_header th_region_header(uint64_t bs, uint64_t nb);

#endif /* ECC_TESTS_CORE_UNIT_HELPERS_H */
