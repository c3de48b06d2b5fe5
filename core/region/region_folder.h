/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region_folder.h - the folder region files live in: which one (region.dir,
 * or a per-user folder under /dev/shm), whether it can be trusted, and the
 * descriptor every file operation on the region is made relative to.
 */
#ifndef ECC_REGION_FOLDER_H
#define ECC_REGION_FOLDER_H

#include <stdbool.h>
#include <stddef.h>

struct ecc_log;

/* The default folder, /dev/shm/ecc-<euid>, written to buf. */
void region_default_folder(char *buf, size_t cap);

/* `folder`, or the default folder (in buf) when folder is NULL or empty.
 * Touches nothing, so validation can show it. */
const char *region_folder_shown(const char *folder, char *buf, size_t cap);

/* Open the folder as a descriptor (*fd_out, O_DIRECTORY, close-on-exec)
 * and write its canonical path to canon. `folder` NULL or empty is the default
 * folder, created 0700 on demand and refused unless it is this user's
 * with no group or other permission. An explicit folder must pass the
 * ownership rule of trust.h on every component of its canonical path and on
 * every link leading there. Unless any_filesystem is set it must be a tmpfs.
 * Returns ECC_OK, ECC_ERR_REGION (unsafe or the wrong filesystem),
 * ECC_ERR_SYSTEM (missing, or a system call failed; errno named) or
 * ECC_ERR_CONFIG (a path too long); on failure *fd_out is -1. */
int region_folder_open(const char *folder, bool any_filesystem, int *fd_out, char *canon,
                       size_t canon_cap, struct ecc_log *log);

#endif /* ECC_REGION_FOLDER_H */
