/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_cost.h - ecc-dir-bench's cost scenario: a trace whose entries cost
 * their encoders different times, through the directory under each policy
 * and through exact LRU and exact GDSF, judged by encoder time saved.
 */
#ifndef ECC_BENCH_DIR_COST_H
#define ECC_BENCH_DIR_COST_H

#include <stdbool.h>
#include <stdint.h>

/* Runs the trace at Zipf exponent `alpha` over a region of `num_blocks`
 * and prints its `cost:` lines (one per policy), then with `judged` the
 * project's targets for it; 0 on success. */
int cost_run(double alpha, uint32_t num_blocks, uint64_t requests, uint64_t seed, bool judged);

#endif
