/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trust.c - the ownership rule of trust.h, applied while walking a canonical
 * path from "/" one component at a time, each opened relative to the one
 * before it without following links.
 */
#include "common/trust.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/errtext.h"

int trust_stat(const struct stat *st, const char *shown, char *why, size_t why_cap)
{
  uid_t me = geteuid();
  if (st->st_uid != 0 && st->st_uid != me)
    return errtext_fail(why, why_cap, TRUST_UNSAFE,
                        "%s is owned by uid %u, not by root or by this process's user (uid %u)",
                        shown, (unsigned)st->st_uid, (unsigned)me);
  mode_t others_write = st->st_mode & (S_IWGRP | S_IWOTH);
  if (others_write == 0)
    return TRUST_OK;
  if (S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))
    return TRUST_OK;
  return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s is writable by %s (mode %04o)%s", shown,
                      others_write == S_IWGRP ? "its group" : "others",
                      (unsigned)(st->st_mode & 07777),
                      S_ISDIR(st->st_mode) ? " and is not a sticky directory" : "");
}

/* What an object is, for a reason that says it is the wrong kind. */
static const char *kind_of(mode_t mode)
{
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO or pipe";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return S_ISREG(mode) ? "a regular file" : "of an unknown type";
}

/* The reason for a descriptor that could not be had: a full descriptor
 * table says so, with the limit and what to do. */
static int no_descriptor(int e, const char *what, const char *path, char *why, size_t why_cap)
{
  if (e == ENFILE)
    return errtext_fail(why, why_cap, TRUST_ERROR,
                        "%s %s: cannot open it: %s: the system's table of open files is full "
                        "(fs.file-max); close files or raise that limit",
                        what, path, strerror(e));
  struct rlimit rl;
  char limit[64] = "";
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    snprintf(limit, sizeof(limit), " of %llu", (unsigned long long)rl.rlim_cur);
  return errtext_fail(why, why_cap, TRUST_ERROR,
                      "%s %s: cannot open it: %s: this process has reached its limit%s open "
                      "descriptors (RLIMIT_NOFILE); close descriptors it no longer needs or raise "
                      "the limit (ulimit -n)",
                      what, path, strerror(e), limit);
}

/* `shown` is the component that could not be opened; NULL: a directory on
 * the way could not be searched. */
static int denied(const char *what, const char *path, const char *shown, char *why, size_t why_cap)
{
  if (shown == NULL)
    return errtext_fail(why, why_cap, TRUST_ERROR,
                        "%s %s: permission denied: a directory on its path cannot be searched by "
                        "this process's user (uid %u)",
                        what, path, (unsigned)geteuid());
  return errtext_fail(why, why_cap, TRUST_ERROR,
                      "%s %s: permission denied: %s cannot be opened by this process's user "
                      "(uid %u)",
                      what, path, shown, (unsigned)geteuid());
}

/* realpath found no name: either nothing is there, or the path leads to an
 * object that has no name of its own (a pipe or socket reached through
 * /dev/stdin or /proc/self/fd, a deleted file), which is the wrong kind. */
static int unresolved(const char *path, int want_folder, const char *what, char *why,
                      size_t why_cap)
{
  struct stat st;
  if (stat(path, &st) != 0)
    return errtext_fail(why, why_cap, TRUST_MISSING, "%s %s not found", what, path);
  if (want_folder ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s: %s is not %s (it is %s)", what, path,
                        path, want_folder ? "a directory" : "a regular file", kind_of(st.st_mode));
  return errtext_fail(why, why_cap, TRUST_UNSAFE,
                      "%s %s leads to %s that has no path of its own (deleted, or not in any "
                      "directory); give the path of one in a directory",
                      what, path, want_folder ? "a directory" : "a file");
}

/* The canonical form of path, or a status with the reason. */
static int canonical(const char *path, int want_folder, const char *what, char *canon, size_t cap,
                     char *why, size_t why_cap)
{
  char *real = realpath(path, NULL);
  if (real == NULL) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      return unresolved(path, want_folder, what, why, why_cap);
    if (e == EACCES)
      return denied(what, path, NULL, why, why_cap);
    if (e == EMFILE || e == ENFILE)
      return no_descriptor(e, what, path, why, why_cap);
    return errtext_fail(why, why_cap, TRUST_ERROR, "%s %s: cannot resolve it: %s", what, path,
                        strerror(e));
  }
  size_t len = strlen(real);
  if (len >= cap) {
    free(real);
    return errtext_fail(why, why_cap, TRUST_ERROR,
                        "%s %s: its canonical path is longer than %zu bytes", what, path, cap - 1);
  }
  memcpy(canon, real, len + 1);
  free(real);
  return TRUST_OK;
}

static int walk_error(int e, const char *what, const char *path, const char *shown, char *why,
                      size_t why_cap)
{
  if (e == ENOENT)
    return errtext_fail(why, why_cap, TRUST_MISSING, "%s %s: %s disappeared while it was checked",
                        what, path, shown);
  if (e == ELOOP || e == ENOTDIR)
    return errtext_fail(why, why_cap, TRUST_UNSAFE,
                        "%s %s: %s changed while it was checked (now a link or not a directory)",
                        what, path, shown);
  if (e == EMFILE || e == ENFILE)
    return no_descriptor(e, what, path, why, why_cap);
  if (e == EACCES)
    return denied(what, path, shown, why, why_cap);
  return errtext_fail(why, why_cap, TRUST_ERROR, "%s %s: cannot open %s: %s", what, path, shown,
                      strerror(e));
}

/* One component against the rule; `shown` is the canonical prefix naming it. */
static int check_component(const struct stat *st, int want_folder, const char *what,
                           const char *path, const char *shown, char *why, size_t why_cap)
{
  if (want_folder && !S_ISDIR(st->st_mode))
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s: %s is not a directory (it is %s)", what,
                        path, shown, kind_of(st->st_mode));
  if (!want_folder && !S_ISREG(st->st_mode))
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s: %s is not a regular file (it is %s)",
                        what, path, shown, kind_of(st->st_mode));
  char reason[512];
  if (trust_stat(st, shown, reason, sizeof(reason)) != TRUST_OK)
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s refused: %s", what, path, reason);
  return TRUST_OK;
}

/* Opens the last component from its checked parent and makes sure the
 * descriptor is the inode that was checked. */
static int open_last(int parent, const char *name, const struct stat *checked, int want_folder,
                     const char *what, const char *path, const char *shown, int *fd_out, char *why,
                     size_t why_cap)
{
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW;
  int fd = openat(parent, name, flags | (want_folder ? O_DIRECTORY : 0));
  if (fd < 0)
    return walk_error(errno, what, path, shown, why, why_cap);
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_dev != checked->st_dev || st.st_ino != checked->st_ino) {
    close(fd);
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s: %s changed while it was checked", what,
                        path, shown);
  }
  *fd_out = fd;
  return TRUST_OK;
}

/* Walks canon from "/"; each directory is held open (O_PATH) while the next
 * component is looked up in it. */
static int walk(const char *canon, int want_folder, const char *what, const char *path, int *fd_out,
                char *why, size_t why_cap)
{
  char shown[PATH_MAX];
  struct stat st;
  int folder = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (folder < 0 || fstat(folder, &st) != 0) {
    int rc = walk_error(errno, what, path, "/", why, why_cap);
    if (folder >= 0)
      close(folder);
    return rc;
  }
  const char *p = canon + 1;
  int rc = check_component(&st, 1, what, path, "/", why, why_cap);
  if (rc == TRUST_OK && *p == '\0' && fd_out != NULL) /* the path is "/" itself */
    rc = open_last(folder, ".", &st, 1, what, path, "/", fd_out, why, why_cap);
  while (rc == TRUST_OK && *p != '\0') {
    const char *slash = strchr(p, '/');
    size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
    int last = slash == NULL;
    snprintf(shown, sizeof(shown), "%.*s", (int)((p - canon) + len), canon);
    char name[NAME_MAX + 1];
    snprintf(name, sizeof(name), "%.*s", (int)len, p);
    if (fstatat(folder, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      rc = walk_error(errno, what, path, shown, why, why_cap);
      break;
    }
    rc = check_component(&st, !last || want_folder, what, path, shown, why, why_cap);
    if (rc != TRUST_OK)
      break;
    if (last) {
      if (fd_out != NULL)
        rc = open_last(folder, name, &st, want_folder, what, path, shown, fd_out, why, why_cap);
      break;
    }
    int next = openat(folder, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat now;
    if (next < 0 || fstat(next, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
      rc = next < 0 ? walk_error(errno, what, path, shown, why, why_cap)
                    : errtext_fail(why, why_cap, TRUST_UNSAFE,
                                   "%s %s: %s changed while it was checked", what, path, shown);
      if (next >= 0)
        close(next);
      break;
    }
    close(folder);
    folder = next;
    p += len + 1;
  }
  close(folder);
  return rc;
}

/* ---- the path as written ---- */

#define MAX_LINKS 40 /* the kernel's own bound on links in one lookup */
#define IS_LINK (-1) /* written_component: a link, to be followed */

/* One component of the path as written, at `at`. A directory must pass the
 * rule; a link must belong to root or this user (its mode means nothing).
 * Whatever else is there, or nothing, is left for the canonical walk. */
static int written_component(const char *what, const char *path, const char *at, char *why,
                             size_t why_cap)
{
  struct stat st;
  if (lstat(at, &st) != 0)
    return TRUST_OK;
  uid_t me = geteuid();
  if (S_ISLNK(st.st_mode)) {
    if (st.st_uid != 0 && st.st_uid != me)
      return errtext_fail(why, why_cap, TRUST_UNSAFE,
                          "%s %s refused: %s is a symbolic link owned by uid %u, not by root or by "
                          "this process's user (uid %u); refusing to follow it",
                          what, path, at, (unsigned)st.st_uid, (unsigned)me);
    return IS_LINK;
  }
  if (!S_ISDIR(st.st_mode))
    return TRUST_OK;
  char reason[512];
  if (trust_stat(&st, at, reason, sizeof(reason)) != TRUST_OK)
    return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s refused: %s", what, path, reason);
  return TRUST_OK;
}

/* Replaces the link at the end of `at` (whose parent is its first
 * parent_len bytes) by its target, to be walked next, before `rest`. */
static int follow_link(const char *what, const char *path, char *at, size_t parent_len,
                       const char *rest, char *todo, size_t cap, char *why, size_t why_cap)
{
  char target[PATH_MAX], next[PATH_MAX];
  ssize_t n = readlink(at, target, sizeof(target) - 1);
  if (n < 0)
    return errtext_fail(why, why_cap, TRUST_ERROR, "%s %s: cannot read the link %s: %s", what, path,
                        at, strerror(errno));
  target[n] = '\0';
  int len = snprintf(next, sizeof(next), "%s/%s", target, rest);
  if (len < 0 || (size_t)len >= sizeof(next) || (size_t)len >= cap)
    return errtext_fail(why, why_cap, TRUST_ERROR,
                        "%s %s: the path through the link %s is too long", what, path, at);
  at[target[0] == '/' ? 0 : parent_len] = '\0';
  memcpy(todo, next, (size_t)len + 1);
  return TRUST_OK;
}

/* The starting point of the written walk: "" for an absolute path (the
 * components append "/name"), the working directory for a relative one. */
static int walk_start(const char *what, const char *path, char *at, size_t cap, char *why,
                      size_t why_cap)
{
  at[0] = '\0';
  if (path[0] == '/')
    return TRUST_OK;
  if (getcwd(at, cap) == NULL)
    return errtext_fail(why, why_cap, TRUST_ERROR, "%s %s: cannot read the working directory: %s",
                        what, path, strerror(errno));
  if (strcmp(at, "/") == 0)
    at[0] = '\0';
  return TRUST_OK;
}

/* The canonical walk judges where the path leads, which realpath reaches by
 * following links whoever owns them: a link of another user's could point
 * this process (root, say) at any object that passes the rule. So the path
 * as written is walked first: a link is followed only if root or this user
 * owns it, and each directory passed on the way must pass the rule, so that
 * nobody else can change where the path leads. */
static int check_written(const char *path, const char *what, char *why, size_t why_cap)
{
  char at[PATH_MAX], todo[PATH_MAX];
  snprintf(todo, sizeof(todo), "%s", path);
  const char *p = todo;
  int links = 0;
  int rc = walk_start(what, path, at, sizeof(at), why, why_cap);
  while (rc == TRUST_OK) {
    p += strspn(p, "/");
    size_t len = strcspn(p, "/"), parent_len = strlen(at);
    if (len == 0)
      return TRUST_OK;
    const char *rest = p + len;
    if (len == 2 && p[0] == '.' && p[1] == '.') {
      char *slash = strrchr(at, '/');
      if (slash != NULL)
        *slash = '\0';
    } else if (!(len == 1 && p[0] == '.')) {
      if (parent_len + 1 + len >= sizeof(at))
        return TRUST_OK; /* the canonical walk says the path is too long */
      snprintf(at + parent_len, sizeof(at) - parent_len, "/%.*s", (int)len, p);
      rc = written_component(what, path, at, why, why_cap);
    }
    if (rc == IS_LINK && ++links > MAX_LINKS)
      return errtext_fail(why, why_cap, TRUST_UNSAFE, "%s %s: more than %d symbolic links", what,
                          path, MAX_LINKS);
    if (rc == IS_LINK) {
      rc = follow_link(what, path, at, parent_len, rest, todo, sizeof(todo), why, why_cap);
      p = todo;
    } else {
      p = rest;
    }
  }
  return rc;
}

int trust_open(const char *path, enum trust_kind kind, const char *what, int *fd_out, char *canon,
               size_t canon_cap, char *why, size_t why_cap)
{
  if (fd_out != NULL)
    *fd_out = -1;
  if (path == NULL || path[0] == '\0')
    return errtext_fail(why, why_cap, TRUST_MISSING, "%s: empty path", what);
  int rc = check_written(path, what, why, why_cap);
  if (rc == TRUST_OK)
    rc = canonical(path, kind == TRUST_FOLDER, what, canon, canon_cap, why, why_cap);
  if (rc == TRUST_OK)
    rc = walk(canon, kind == TRUST_FOLDER, what, path, fd_out, why, why_cap);
  return rc;
}
