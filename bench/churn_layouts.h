/* SPDX-License-Identifier: Apache-2.0 */
/*
 * churn_layouts.h - block layouts after a serving cache's churn, for
 * ecc-bench: placed by the directory, or by a LIFO free stack (upstream).
 */
#ifndef ECC_CHURN_LAYOUTS_H
#define ECC_CHURN_LAYOUTS_H

#include <stdint.h>

struct churn_request {
  uint32_t usable;       /* blocks of the region the layouts may use: [0, usable) */
  uint64_t block_size;   /* bytes per block */
  uint32_t entry_blocks; /* blocks of each entry of the sets */
  uint32_t entries;      /* entries per set */
  uint32_t n_sets;       /* sets, each ids[s] of entries * entry_blocks ids */
  uint64_t seed;
};

/* After the churn, the sets' entries placed as the allocator places them,
 * disjoint, their block ids entry after entry in ids[s]; *runs_per_entry
 * is the mean number of runs of consecutive blocks per entry. 0, or -1
 * with the reason on stderr. */
int churn_layout_directory(const struct churn_request *q, uint32_t **ids, double *runs_per_entry);
int churn_layout_lifo(const struct churn_request *q, uint32_t **ids, double *runs_per_entry);

#endif /* ECC_CHURN_LAYOUTS_H */
