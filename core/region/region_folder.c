/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region_folder.c - the folder region files live in: the per-user default
 * under /dev/shm, the ownership rule (trust.h) and the filesystem check.
 */
#include "core/region/region_folder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "common/log.h"
#include "common/trust.h"
#include "ecc_plugin_v1.h"

#define DEFAULT_BASE "/dev/shm"
#define DEFAULT_PREFIX "ecc-"

void region_default_folder(char *buf, size_t cap)
{
  snprintf(buf, cap, DEFAULT_BASE "/" DEFAULT_PREFIX "%u", (unsigned)geteuid());
}

const char *region_folder_shown(const char *folder, char *buf, size_t cap)
{
  if (folder != NULL && folder[0] != '\0')
    return folder;
  region_default_folder(buf, cap);
  return buf;
}

/* ---- opening ------------------------------------------------------------ */

static int open_trusted(const char *folder, int *fd, char *canon, size_t cap, struct ecc_log *log)
{
  char why[1024];
  switch (trust_open(folder, TRUST_FOLDER, "region.dir", fd, canon, cap, why, sizeof(why))) {
  case TRUST_OK:
    return ECC_OK;
  case TRUST_UNSAFE:
    return log_fail(log, ECC_ERR_REGION, "%s", why);
  case TRUST_MISSING:
    return log_fail(log, ECC_ERR_SYSTEM, "%s (%s)", why, strerror(ENOENT));
  default:
    return log_fail(log, ECC_ERR_SYSTEM, "%s", why);
  }
}

static int default_refused(const char *shown, const char *what, struct ecc_log *log)
{
  return log_fail(log, ECC_ERR_REGION,
                  "region.dir (default) %s %s: refusing it; remove it or set region.dir", shown,
                  what);
}

/* The folder must be this user's alone: anyone else who made it first
 * would own, or could replace, every region in it. */
static int check_default(const struct stat *st, const char *shown, struct ecc_log *log)
{
  char what[96];
  if (S_ISLNK(st->st_mode))
    return default_refused(shown, "is a symbolic link", log);
  if (!S_ISDIR(st->st_mode))
    return default_refused(shown, "is not a directory", log);
  if (st->st_uid != geteuid()) {
    snprintf(what, sizeof(what), "belongs to uid %u, not to this process's user (uid %u)",
             (unsigned)st->st_uid, (unsigned)geteuid());
    return default_refused(shown, what, log);
  }
  if (st->st_mode & 077) {
    snprintf(what, sizeof(what), "has mode %04o", (unsigned)(st->st_mode & 07777));
    return default_refused(shown, what, log);
  }
  return ECC_OK;
}

/* Judged by its entry first (another user's folder may not even open),
 * then opened without following a link and compared with what was judged. */
static int open_default_in(int base, const char *name, const char *shown, int *fd_out,
                           struct ecc_log *log)
{
  struct stat st, now;
  if (mkdirat(base, name, 0700) != 0 && errno != EEXIST)
    return log_fail(log, ECC_ERR_SYSTEM, "region.dir (default) %s: cannot create it: %s", shown,
                    strerror(errno));
  if (fstatat(base, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "region.dir (default) %s: cannot stat it: %s", shown,
                    strerror(errno));
  int rc = check_default(&st, shown, log);
  if (rc != ECC_OK)
    return rc;
  int fd = openat(base, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return log_fail(log, ECC_ERR_SYSTEM, "region.dir (default) %s: cannot open it: %s", shown,
                    strerror(errno));
  if (fstat(fd, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    close(fd);
    return log_fail(log, ECC_ERR_REGION, "region.dir (default) %s changed while it was checked",
                    shown);
  }
  *fd_out = fd;
  return ECC_OK;
}

/* /dev/shm passes the rule (root's, sticky); the folder in it is made on
 * demand, relative to the descriptor that was checked. */
static int open_default(int *fd_out, char *canon, size_t cap, struct ecc_log *log)
{
  char name[32], shown[64], base_canon[PATH_MAX];
  snprintf(name, sizeof(name), DEFAULT_PREFIX "%u", (unsigned)geteuid());
  region_default_folder(shown, sizeof(shown));
  int base = -1;
  int rc = open_trusted(DEFAULT_BASE, &base, base_canon, sizeof(base_canon), log);
  if (rc != ECC_OK)
    return rc;
  int n = snprintf(canon, cap, "%s/%s", base_canon, name);
  if (n < 0 || (size_t)n >= cap)
    rc = log_fail(log, ECC_ERR_CONFIG, "region.dir (default) %s/%s: path too long", base_canon,
                  name);
  if (rc == ECC_OK)
    rc = open_default_in(base, name, shown, fd_out, log);
  close(base);
  return rc;
}

static const char *fs_name(unsigned long type)
{
  switch (type) {
  case EXT4_SUPER_MAGIC:
    return "ext2/ext3/ext4";
  case XFS_SUPER_MAGIC:
    return "xfs";
  case BTRFS_SUPER_MAGIC:
    return "btrfs";
  case OVERLAYFS_SUPER_MAGIC:
    return "overlay";
  case NFS_SUPER_MAGIC:
    return "nfs";
  case RAMFS_MAGIC:
    return "ramfs";
  default:
    return "not a tmpfs";
  }
}

/* On a disk a region outlives reboots (a killed creator's file stays) and
 * its pages are written back; the region is meant to live in memory. */
static int check_filesystem(int fd, const char *canon, struct ecc_log *log)
{
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "region.dir %s: cannot stat its filesystem: %s", canon,
                    strerror(errno));
  unsigned long type = (unsigned long)fs.f_type;
  if (type == TMPFS_MAGIC)
    return ECC_OK;
  return log_fail(log, ECC_ERR_REGION,
                  "region.dir %s is not on a tmpfs (filesystem %s, type 0x%lx): a region there "
                  "survives reboots and is written back to disk; use a tmpfs such as /dev/shm, "
                  "or set region.require_tmpfs = false",
                  canon, fs_name(type), type);
}

int region_folder_open(const char *folder, bool any_filesystem, int *fd_out, char *canon,
                       size_t canon_cap, struct ecc_log *log)
{
  *fd_out = -1;
  int fd = -1;
  int rc = folder == NULL || folder[0] == '\0' ? open_default(&fd, canon, canon_cap, log)
                                               : open_trusted(folder, &fd, canon, canon_cap, log);
  if (rc == ECC_OK && !any_filesystem)
    rc = check_filesystem(fd, canon, log);
  if (rc != ECC_OK) {
    if (fd >= 0)
      close(fd);
    return rc;
  }
  *fd_out = fd;
  return ECC_OK;
}
