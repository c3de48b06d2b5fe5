/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy_policy.c - the rules of copy_policy.h: the configured method where
 * it can run, and for `auto` the one- or two-direction thresholds.
 */
#include "core/engine/cuda/copy_policy.h"

void copy_policy_init(struct copy_policy *p, int method, bool kernel_ok)
{
  p->method = method;
  p->kernel_ok = kernel_ok;
  for (int d = 0; d < COPY_POLICY_DIRECTIONS; d++)
    p->last_submit_ns[d] = 0;
}

int copy_policy_pick(const struct copy_policy *p, int direction, size_t count, uint64_t bytes,
                     uint64_t now)
{
  if (!p->kernel_ok || p->method == METHOD_DMA)
    return METHOD_DMA;
  if (p->method == METHOD_KERNEL || count == 0)
    return METHOD_KERNEL;
  uint64_t mean = bytes / count;
  uint64_t other = p->last_submit_ns[direction == ECC_DIR_SAVE ? ECC_DIR_LOAD : ECC_DIR_SAVE];
  if (other != 0 && now - other < AUTO_BOTH_WINDOW_NS)
    return count <= AUTO_BOTH_MAX_COUNT && mean >= AUTO_BOTH_MIN_MEAN ? METHOD_DMA : METHOD_KERNEL;
  return count <= AUTO_DMA_MAX_COUNT && mean >= AUTO_DMA_MIN_MEAN ? METHOD_DMA : METHOD_KERNEL;
}

void copy_policy_note(struct copy_policy *p, int direction, uint64_t now)
{
  p->last_submit_ns[direction] = now;
}
