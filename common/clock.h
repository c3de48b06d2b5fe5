/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h - the one clock that plugins and benchmarks time with:
 * CLOCK_MONOTONIC in nanoseconds, inline so that a timed span pays no call.
 */
#ifndef ECC_CLOCK_H
#define ECC_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds of CLOCK_MONOTONIC; 0 if it cannot be read, which Linux
 * never does (the clock exists everywhere it runs). */
static inline uint64_t ecc_now_ns(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* ECC_CLOCK_H */
