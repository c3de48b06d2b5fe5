/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.h - the arithmetic of eviction policy "cost": the credit an entry
 * earns per use and what each pass of the clock hand spends of it. The
 * directory keeps the credit in the entry and the running mean below in
 * its header; this unit touches neither memory nor lock.
 *
 * Greedy-dual-size-frequency keeps the entries of highest uses x cost /
 * size, aged by what was evicted before them. A clock approximates it
 * without a heap: a use sets an entry's credit to its uses x its cost per
 * block against the mean cost per block of the entries stored so far, and
 * each pass of the hand spends one quantum. An entry the hand meets with
 * less than half a quantum left is evicted, so that a window of blocks is
 * still found in front of the hand and entries stay one run each.
 */
#ifndef ECC_POLICY_H
#define ECC_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* The credit one pass of the hand spends: one use at the mean cost per
 * block is worth one, the second chance that policy "lru" gives. */
#define POLICY_QUANTUM 16u
/* At most 32 passes of credit: an entry of any cost and popularity that
 * stops being used leaves within 32 turns of the hand. (On ecc-dir-bench's
 * cost trace at alpha 0.7, a cap of 4 passes saved 55.2% of encoder time,
 * 32 passes 60.3%, 256 passes 61.2%.) */
#define POLICY_CREDIT_MAX (32u * POLICY_QUANTUM)

/* The mean cost per block of the entries stored with a known cost, in
 * 1/65536 microseconds (the directory keeps it in its header). */
struct policy_mean {
  uint64_t per_block;
  uint64_t samples;
};

/* Adds an entry stored with cost_us (0: unknown, taken as the mean: cost
 * in proportion to size) over n_blocks to the mean. */
void policy_note_store(struct policy_mean *m, uint64_t cost_us, uint32_t n_blocks);

/* The credit of an entry that has `credit` left when it is used for the
 * `uses`th time (its store being the first): uses x cost per block / mean
 * quanta, never less than what it had, at most POLICY_CREDIT_MAX. */
uint32_t policy_use(const struct policy_mean *m, uint64_t cost_us, uint32_t n_blocks, uint64_t uses,
                    uint32_t credit);

/* Whether the hand passes an entry with `credit` (else it may evict it). */
bool policy_keeps(uint32_t credit);

/* The credit after the hand passes: one quantum spent, or all of it once
 * the hand has gone a full turn without finding room. */
uint32_t policy_pass(uint32_t credit, bool spend_all);

#endif /* ECC_POLICY_H */
