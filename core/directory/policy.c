/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c - eviction policy "cost" (policy.h): credits set by use in
 * proportion to uses and cost per block, spent by the clock hand.
 */
#include "core/directory/policy.h"

/* Costs above this many microseconds (about 12 days) are taken as this:
 * the fixed-point products below stay inside 64 bits. */
#define COST_MAX_US (1ull << 40)
#define FIXED_SHIFT 16
/* The mean follows the last few hundred stores, so that a workload whose
 * costs drift keeps earning one quantum per use at its new mean. */
#define MEAN_WINDOW 256u

static uint64_t per_block(uint64_t cost_us, uint32_t n_blocks)
{
  if (cost_us > COST_MAX_US)
    cost_us = COST_MAX_US;
  return (cost_us << FIXED_SHIFT) / (n_blocks > 0 ? n_blocks : 1);
}

void policy_note_store(struct policy_mean *m, uint64_t cost_us, uint32_t n_blocks)
{
  if (cost_us == 0)
    return;
  uint64_t x = per_block(cost_us, n_blocks);
  uint64_t weight = m->samples < MEAN_WINDOW ? m->samples + 1 : MEAN_WINDOW;
  if (x >= m->per_block)
    m->per_block += (x - m->per_block) / weight;
  else
    m->per_block -= (m->per_block - x) / weight;
  if (m->samples < MEAN_WINDOW)
    m->samples++;
}

/* One use's worth: cost per block / mean quanta, rounded; unknown cost or
 * no mean yet, one quantum. */
static uint64_t worth(const struct policy_mean *m, uint64_t cost_us, uint32_t n_blocks)
{
  if (cost_us == 0 || m->per_block == 0)
    return POLICY_QUANTUM;
  /* Inside 64 bits: per_block() is below 2^56 and the quantum is 2^4. */
  uint64_t w = (per_block(cost_us, n_blocks) * POLICY_QUANTUM + m->per_block / 2) / m->per_block;
  return w > POLICY_CREDIT_MAX ? POLICY_CREDIT_MAX : w;
}

uint32_t policy_use(const struct policy_mean *m, uint64_t cost_us, uint32_t n_blocks, uint64_t uses,
                    uint32_t credit)
{
  uint64_t one = worth(m, cost_us, n_blocks);
  uint64_t total = (uses < POLICY_CREDIT_MAX ? uses : POLICY_CREDIT_MAX) * one;
  if (total > POLICY_CREDIT_MAX)
    total = POLICY_CREDIT_MAX;
  return total > credit ? (uint32_t)total : credit;
}

bool policy_keeps(uint32_t credit)
{
  return credit >= POLICY_QUANTUM / 2;
}

uint32_t policy_pass(uint32_t credit, bool spend_all)
{
  return spend_all || credit < POLICY_QUANTUM ? 0 : credit - POLICY_QUANTUM;
}
