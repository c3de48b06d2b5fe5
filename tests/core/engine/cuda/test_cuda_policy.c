/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda_policy.c - the CUDA engine's copy-method policy without a GPU:
 * the configured method, and each threshold of `auto` (mean descriptor size,
 * count, the other direction's activity window) at and around its boundary.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/engine/cuda/copy_policy.h"

#define T0 (1000ull * 1000 * 1000) /* a submit time well after the clock's start */

static const char *name(int method)
{
  return method == METHOD_DMA ? "dma" : method == METHOD_KERNEL ? "kernel" : "?";
}

static struct copy_policy auto_policy(void)
{
  struct copy_policy p;
  copy_policy_init(&p, METHOD_AUTO, true);
  return p;
}

/* The method for `count` descriptors averaging exactly `mean` bytes, or
 * mean - 1 when `short_by_one` (the total one byte short of count * mean). */
static int pick_mean(const struct copy_policy *p, int direction, size_t count, uint64_t mean,
                     bool short_by_one, uint64_t now)
{
  return copy_policy_pick(p, direction, count, count * mean - (short_by_one ? 1 : 0), now);
}

Test(cuda_policy, thresholds_are_the_measured_ones)
{
  /* bench/NOTES.md and copy_policy.h give the measurements behind them. */
  cr_expect_eq(AUTO_DMA_MIN_MEAN, 512u * 1024);
  cr_expect_eq(AUTO_DMA_MAX_COUNT, 128u);
  cr_expect_eq(AUTO_BOTH_MIN_MEAN, 32u * 1024);
  cr_expect_eq(AUTO_BOTH_MAX_COUNT, 640u);
  cr_expect_eq(AUTO_BOTH_WINDOW_NS, 50ull * 1000 * 1000);
}

Test(cuda_policy, configured_method_is_kept_where_the_kernel_runs)
{
  struct copy_policy p;
  copy_policy_init(&p, METHOD_DMA, true);
  /* A batch auto would give to the kernel. */
  int got = copy_policy_pick(&p, ECC_DIR_SAVE, 4096, 4096ull * 4096, T0);
  cr_expect_eq(got, METHOD_DMA, "method dma: got %s", name(got));
  copy_policy_init(&p, METHOD_KERNEL, true);
  /* A batch auto would give to the copy engines. */
  got = copy_policy_pick(&p, ECC_DIR_SAVE, 1, AUTO_DMA_MIN_MEAN * 4, T0);
  cr_expect_eq(got, METHOD_KERNEL, "method kernel: got %s", name(got));
}

Test(cuda_policy, no_kernel_means_dma_whatever_is_configured)
{
  const int methods[] = {METHOD_AUTO, METHOD_KERNEL, METHOD_DMA};
  for (size_t i = 0; i < 3; i++) {
    struct copy_policy p;
    copy_policy_init(&p, methods[i], false);
    int got = copy_policy_pick(&p, ECC_DIR_LOAD, 4096, 4096ull * 4096, T0);
    cr_expect_eq(got, METHOD_DMA, "configured %d without a kernel: got %s", methods[i], name(got));
    got = copy_policy_pick(&p, ECC_DIR_LOAD, 0, 0, T0);
    cr_expect_eq(got, METHOD_DMA, "configured %d, empty batch: got %s", methods[i], name(got));
  }
}

Test(cuda_policy, empty_batch_goes_to_the_kernel)
{
  struct copy_policy p = auto_policy();
  int got = copy_policy_pick(&p, ECC_DIR_SAVE, 0, 0, T0);
  cr_expect_eq(got, METHOD_KERNEL, "got %s", name(got));
}

Test(cuda_policy, one_direction_mean_boundary)
{
  struct copy_policy p = auto_policy();
  const size_t counts[] = {1, 2, AUTO_DMA_MAX_COUNT};
  for (size_t i = 0; i < 3; i++) {
    size_t n = counts[i];
    int at = pick_mean(&p, ECC_DIR_SAVE, n, AUTO_DMA_MIN_MEAN, false, T0);
    int below = pick_mean(&p, ECC_DIR_SAVE, n, AUTO_DMA_MIN_MEAN, true, T0);
    int above = pick_mean(&p, ECC_DIR_LOAD, n, AUTO_DMA_MIN_MEAN + 1, false, T0);
    cr_expect_eq(at, METHOD_DMA, "%zu descriptors of the minimum mean: %s", n, name(at));
    cr_expect_eq(below, METHOD_KERNEL, "%zu descriptors one byte short: %s", n, name(below));
    cr_expect_eq(above, METHOD_DMA, "%zu descriptors above the mean: %s", n, name(above));
  }
}

Test(cuda_policy, one_direction_count_boundary)
{
  struct copy_policy p = auto_policy();
  uint64_t mean = AUTO_DMA_MIN_MEAN;
  int at = pick_mean(&p, ECC_DIR_SAVE, AUTO_DMA_MAX_COUNT, mean, false, T0);
  int over = pick_mean(&p, ECC_DIR_SAVE, AUTO_DMA_MAX_COUNT + 1, mean, false, T0);
  int under = pick_mean(&p, ECC_DIR_LOAD, AUTO_DMA_MAX_COUNT - 1, mean, false, T0);
  cr_expect_eq(at, METHOD_DMA, "at the count: %s", name(at));
  cr_expect_eq(over, METHOD_KERNEL, "one over the count: %s", name(over));
  cr_expect_eq(under, METHOD_DMA, "one under the count: %s", name(under));
  /* Large descriptors do not lift the bound. */
  int big = pick_mean(&p, ECC_DIR_SAVE, AUTO_DMA_MAX_COUNT + 1, 64 * mean, false, T0);
  cr_expect_eq(big, METHOD_KERNEL, "one over the count, huge descriptors: %s", name(big));
}

Test(cuda_policy, both_directions_thresholds_inside_the_window)
{
  struct copy_policy p = auto_policy();
  copy_policy_note(&p, ECC_DIR_LOAD, T0);
  uint64_t now = T0 + 1;
  uint64_t mean = AUTO_BOTH_MIN_MEAN;
  size_t max = AUTO_BOTH_MAX_COUNT;
  int at = pick_mean(&p, ECC_DIR_SAVE, max, mean, false, now);
  int short_mean = pick_mean(&p, ECC_DIR_SAVE, max, mean, true, now);
  int over = pick_mean(&p, ECC_DIR_SAVE, max + 1, mean, false, now);
  int one = pick_mean(&p, ECC_DIR_SAVE, 1, mean, false, now);
  int one_short = pick_mean(&p, ECC_DIR_SAVE, 1, mean, true, now);
  cr_expect_eq(at, METHOD_DMA, "%zu descriptors of the two-way mean: %s", max, name(at));
  cr_expect_eq(short_mean, METHOD_KERNEL, "mean one byte short: %s", name(short_mean));
  cr_expect_eq(over, METHOD_KERNEL, "one over the two-way count: %s", name(over));
  cr_expect_eq(one, METHOD_DMA, "one descriptor of the two-way mean: %s", name(one));
  cr_expect_eq(one_short, METHOD_KERNEL, "one descriptor one byte short: %s", name(one_short));
  /* One-way limits do not apply: count and mean between the two sets. */
  int between = pick_mean(&p, ECC_DIR_SAVE, AUTO_DMA_MAX_COUNT + 1, mean, false, now);
  cr_expect_eq(between, METHOD_DMA, "%u descriptors of %llu B: %s", AUTO_DMA_MAX_COUNT + 1,
               (unsigned long long)mean, name(between));
}

Test(cuda_policy, window_boundary)
{
  /* A batch that the two-way rule gives to dma and the one-way rule to the
   * kernel shows which rule applied. */
  size_t n = AUTO_DMA_MAX_COUNT + 1;
  uint64_t mean = AUTO_BOTH_MIN_MEAN;
  struct copy_policy p = auto_policy();
  copy_policy_note(&p, ECC_DIR_LOAD, T0);
  int last_inside = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0 + AUTO_BOTH_WINDOW_NS - 1);
  int at_end = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0 + AUTO_BOTH_WINDOW_NS);
  int after = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0 + AUTO_BOTH_WINDOW_NS + 1);
  int same_time = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0);
  cr_expect_eq(last_inside, METHOD_DMA, "1 ns before the window ends: %s", name(last_inside));
  cr_expect_eq(at_end, METHOD_KERNEL, "when the window ends: %s", name(at_end));
  cr_expect_eq(after, METHOD_KERNEL, "after the window: %s", name(after));
  cr_expect_eq(same_time, METHOD_DMA, "in the same nanosecond: %s", name(same_time));
  /* A later submit of the other direction opens the window again. */
  copy_policy_note(&p, ECC_DIR_LOAD, T0 + AUTO_BOTH_WINDOW_NS);
  int renewed = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0 + AUTO_BOTH_WINDOW_NS + 1);
  cr_expect_eq(renewed, METHOD_DMA, "after a newer load: %s", name(renewed));
}

Test(cuda_policy, only_the_other_direction_opens_the_window)
{
  size_t n = AUTO_DMA_MAX_COUNT + 1;
  uint64_t mean = AUTO_BOTH_MIN_MEAN;
  struct copy_policy p = auto_policy();
  copy_policy_note(&p, ECC_DIR_SAVE, T0);
  int own = pick_mean(&p, ECC_DIR_SAVE, n, mean, false, T0 + 1);
  int other = pick_mean(&p, ECC_DIR_LOAD, n, mean, false, T0 + 1);
  cr_expect_eq(own, METHOD_KERNEL, "saves after a save: %s", name(own));
  cr_expect_eq(other, METHOD_DMA, "loads after a save: %s", name(other));
}

Test(cuda_policy, never_submitted_is_outside_the_window)
{
  /* Early in the clock's life `now` is inside a window that would have
   * begun at 0; a direction that never submitted opens none. */
  size_t n = AUTO_DMA_MAX_COUNT + 1;
  struct copy_policy p = auto_policy();
  int early = pick_mean(&p, ECC_DIR_SAVE, n, AUTO_BOTH_MIN_MEAN, false, 1000);
  cr_expect_eq(early, METHOD_KERNEL, "no load ever: %s", name(early));
  /* init forgets earlier submits. */
  copy_policy_note(&p, ECC_DIR_LOAD, T0);
  copy_policy_init(&p, METHOD_AUTO, true);
  int fresh = pick_mean(&p, ECC_DIR_SAVE, n, AUTO_BOTH_MIN_MEAN, false, T0 + 1);
  cr_expect_eq(fresh, METHOD_KERNEL, "after init: %s", name(fresh));
}
