/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trust.h - the ownership rule for files another user could control, shared
 * by the host library (plugin files, INI files) and the plugins (region
 * directories).
 *
 * The rule, as sudo and OpenSSH's StrictModes apply it: the object and every
 * directory on its canonical path from "/" must be owned by root or by this
 * process's effective user, and be writable by nobody else. A directory that
 * others may write is accepted only with the sticky bit set (as /tmp and
 * /dev/shm have it): then only the owner of the next component can replace
 * that component, and the next component must pass the rule itself.
 */
#ifndef ECC_TRUST_H
#define ECC_TRUST_H

#include <stddef.h>
#include <sys/stat.h>

/* What the object at the end of the path must be. */
enum trust_kind {
  TRUST_FILE,   /* a regular file */
  TRUST_FOLDER, /* a folder (directory) */
};

/* Outcomes; the text written to `why` names the path and the reason. */
enum trust_status {
  TRUST_OK = 0,
  TRUST_UNSAFE,  /* a component breaks the rule, or is of the wrong type */
  TRUST_MISSING, /* the path, or a component of it, does not exist */
  TRUST_ERROR,   /* a system call failed otherwise (errno in the text) */
};

/* Whether one inode passes the rule: owner root or the effective user; a
 * directory writable by group or others only with the sticky bit; any other
 * object writable by its owner alone. `shown` names it in the reason. */
int trust_stat(const struct stat *st, const char *shown, char *why, size_t why_cap);

/* Walk `path` as written (relative to the working directory if it is
 * relative): every symbolic link on the way must belong to root or this
 * user, and every directory passed must pass the rule, so nobody else can
 * change where it leads. Then canonicalise it and walk the canonical path
 * from "/", one component at a time without following links, checking each
 * against the rule, so that what is checked is what the path names then.
 * `what` ("plugin", "INI file", "region.dir") starts the reason.
 * On TRUST_OK: the canonical path is in canon (canon_cap bytes) and, if
 * fd_out is not NULL, *fd_out is a descriptor of the object opened from the
 * walk (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, O_DIRECTORY for a
 * directory) that the caller closes; otherwise *fd_out is -1. A regular file
 * is checked to be one before it is opened, so a FIFO or device never is. */
int trust_open(const char *path, enum trust_kind kind, const char *what, int *fd_out, char *canon,
               size_t canon_cap, char *why, size_t why_cap);

#endif /* ECC_TRUST_H */
