/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_stampede.h - ecc-dir-bench's single-flight scenario: processes that
 * ask for the same cold keys at once, one encoding each key while the
 * others sleep in dir_wait until its publish.
 */
#ifndef ECC_BENCH_DIR_STAMPEDE_H
#define ECC_BENCH_DIR_STAMPEDE_H

/* Runs `rounds` rounds of `keys` cold keys asked by `procs` processes at
 * once and prints its `stampede:` line; 0 on success. */
int stampede_run(unsigned procs, unsigned keys, unsigned rounds);

#endif
