/* SPDX-License-Identifier: Apache-2.0 */
/*
 * settle.h - the directory work a finished copy leaves behind: a saved
 * reservation published (or freed), a loaded pin's rank released, claims
 * given back, a load's holds released. It takes the directory, not the connector, so that poll,
 * shutdown and a failed submit settle the same way.
 */
#ifndef ECC_CORE_SETTLE_H
#define ECC_CORE_SETTLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/directory/directory.h"
#include "core/region/region.h"
#include "core/transfer.h"

/* A polled record's directory work for a copy of `direction` whose token
 * is `token` and whose copy ended with `status`: a save's reservation is
 * published on success and freed otherwise, a load's pin gives back one
 * rank. Returns the status to report: ECC_ERR_CLOSED instead of ECC_OK
 * when the reservation or pin was reclaimed while the copy ran. */
int settle_record(struct dir *d, int direction, uint64_t token, int status);

/* Gives back t's claims (reservations its saves by block id hold) from
 * index `from` on, unpublished. */
void settle_unclaim(struct dir *d, struct transfer *t, size_t from);

/* Releases t's holds (the pins its loads by block id took on the entries
 * they read), all of them. ECC_ERR_CLOSED if one was dropped while the copy
 * ran (its pin timed out): the entry may have been evicted and its blocks
 * rewritten under the copy, which is then not to be trusted. ECC_OK
 * otherwise, also when the directory's lock could not be taken (the holds
 * then stay until this process ends or their pin timeout, but they were
 * held throughout the copy). */
int settle_release_holds(struct dir *d, struct transfer *t);

/* Whether the directory's pages of region r are still backed by its file
 * (it was not cut short below their end): the work nobody asked for now
 * (what poll and shutdown settle) touches them only then. One fstat. */
bool settle_reachable(const struct region *r);

#endif /* ECC_CORE_SETTLE_H */
