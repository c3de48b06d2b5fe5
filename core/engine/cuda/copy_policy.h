/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy_policy.h - the CUDA engine's copy method per batch: engine.method, or
 * for `auto` a choice from the batch's descriptors and the other direction's
 * recent submits. No CUDA here, so tests check every threshold anywhere.
 */
#ifndef ECC_COPY_POLICY_H
#define ECC_COPY_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config/config.h"

/*
 * method = auto, per batch, from the mean descriptor size, the count, and
 * whether the other direction is busy too. Figures measured on the H200
 * with ecc-bench, 64 MiB steps (PCIe Gen5 x16, CUDA 13.0; bench/NOTES.md
 * has the tables):
 *
 * One direction at a time, the copy kernel holds 88-95% of the 55 GB/s
 * contiguous copy on 16 SMs at every block size, with one launch (a 4096-
 * descriptor step costs about 12 us to submit). cuMemcpyBatchAsync costs
 * 0.5-0.8 us of host time per descriptor and moves 11-17% at 3-4 KiB
 * scattered blocks, 33-36% at 16 KiB, 70% at 64 KiB, 86-91% at 256 KiB, but
 * 96-99% where descriptors average 512 KiB or more (1 MiB entries of any
 * block size, fragmented 256 KiB blocks), against the kernel's 88-95%. So:
 * dma when the mean is >= 512 KiB and the batch has at most 128 descriptors
 * (about 100 us of host time), else the kernel.
 *
 * Both directions at once, SM copies share the link badly: kernels both ways
 * moved 65-77% of the bidirectional rate (any launch shape, 8-32 SMs, and
 * bulk-copy (TMA) variants; a kernel one way with the copy engine the other
 * did no better), while batched copy-engine calls reached 85-103% where the
 * batch is small enough for its host time to hide (<= 600 descriptors) and
 * descriptors average >= 32 KiB (fragmented 32 KiB blocks 85%, 64 KiB 90%,
 * 256 KiB scattered 86%, 1 MiB entries 93-98%), but only 42-65% beyond 1000
 * descriptors. So when the other direction submitted within the last 50 ms
 * (an ec_both step): dma when the mean is >= 32 KiB and the batch has at
 * most 640 descriptors, else the kernel.
 */
#define AUTO_DMA_MIN_MEAN (512ull << 10)
#define AUTO_DMA_MAX_COUNT 128u
#define AUTO_BOTH_MIN_MEAN (32ull << 10)
#define AUTO_BOTH_MAX_COUNT 640u
#define AUTO_BOTH_WINDOW_NS (50ull * 1000 * 1000)

/* Entries of a by-direction array, indexed by ECC_DIR_SAVE and ECC_DIR_LOAD. */
#define COPY_POLICY_DIRECTIONS (ECC_DIR_LOAD + 1)

struct copy_policy {
  int method;     /* enum cuda_method as configured */
  bool kernel_ok; /* the kernel can run here (pinned, mapped, code present) */
  uint64_t last_submit_ns[COPY_POLICY_DIRECTIONS]; /* CLOCK_MONOTONIC; 0: never */
};

void copy_policy_init(struct copy_policy *p, int method, bool kernel_ok);

/* METHOD_DMA or METHOD_KERNEL for a batch in direction `direction` (ECC_DIR_*) of
 * `count` descriptors and `bytes` in all, submitted at `now` (ns). */
int copy_policy_pick(const struct copy_policy *p, int direction, size_t count, uint64_t bytes,
                     uint64_t now);

/* A batch of `direction` was submitted at `now`, whatever its method: the other
 * direction's choices see it for AUTO_BOTH_WINDOW_NS. */
void copy_policy_note(struct copy_policy *p, int direction, uint64_t now);

#endif /* ECC_COPY_POLICY_H */
