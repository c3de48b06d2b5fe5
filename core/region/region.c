/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region.c - the life of the region file: its name, creation by exactly one
 * builder under a fixed temporary name, joining with header, layout and
 * allocation checks, the liveness check, removal by the last holder, and
 * reaping of files no process holds; a kept region (region.persist) is
 * never removed and is reused by the next open. Every file operation is
 * made relative to the folder descriptor that region_folder.c checked.
 */
#include "core/region/region.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/names.h"
#include "core/region/region_folder.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define FILE_PREFIX "ecc-"
#define FILE_SUFFIX ".region"
/* The one temporary name of a region being built: <file>.tmp. Versions
 * before it appended ".tmp.<pid>.<n>", which reaping still recognises. */
#define TMP_SUFFIX ".tmp"
#define POLL_MS 5
/* Rounds lost to other processes (a file replaced under us, a lost link
 * race, a temporary name taken) before the join deadline may end the loop. */
#define CHURN_MIN 8

/* Outcomes of one attempt besides ECC_OK and the (negative) error codes. */
enum { STEP_ABSENT = 1, STEP_EXISTS = 2, STEP_AGAIN = 3, STEP_BUILDING = 4 };

static int64_t now_ms(void)
{
  return (int64_t)(ecc_now_ns() / 1000000u);
}

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Bytes of a file holding `nb` blocks of `bs` after a `hb`-byte header, or
 * -1 when zero or too large for both off_t and size_t. */
static int layout_bytes(uint64_t bs, uint64_t nb, uint64_t hb, uint64_t *total)
{
  uint64_t limit = INT64_MAX;
  if ((uint64_t)SIZE_MAX < limit)
    limit = SIZE_MAX;
  if (bs == 0 || nb == 0 || hb > limit || nb > (limit - hb) / bs)
    return -1;
  *total = hb + bs * nb;
  return 0;
}

/* Where the blocks start: the header page, then the directory area in
 * whole pages, so that blocks stay page-aligned. */
static uint64_t dir_area_bytes(uint64_t dir_bytes)
{
  return (dir_bytes + REGION_HEADER_BYTES - 1) / REGION_HEADER_BYTES * REGION_HEADER_BYTES;
}

static uint64_t header_bytes_for(uint64_t dir_bytes)
{
  return REGION_HEADER_BYTES + dir_area_bytes(dir_bytes);
}

static bool header_kept(const struct region_header *h)
{
  return h->layout_version == REGION_LAYOUT_KEPT && (h->flags & REGION_FLAG_KEPT) != 0;
}

/* Whether the finished header of the open file says kept. Read before the
 * file is locked, it is a hint that the lock's holder confirms. */
static bool file_kept(int fd)
{
  struct region_header h;
  return pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
         memcmp(h.magic, REGION_MAGIC, sizeof(h.magic)) == 0 && header_kept(&h);
}

/* Whether `name` in the directory is still the file dev/ino. */
static int names_file(int folder_fd, const char *name, dev_t dev, ino_t ino)
{
  struct stat now;
  return fstatat(folder_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == dev &&
         now.st_ino == ino;
}

static void tmp_name(const struct region *r, char *buf, size_t cap)
{
  snprintf(buf, cap, "%s" TMP_SUFFIX, r->file);
}

/* The directory part of r->path, for messages about other files in it. */
static void folder_of(const struct region *r, char *buf, size_t cap)
{
  size_t len = strlen(r->path) - strlen(r->file) - 1;
  snprintf(buf, cap, "%.*s", (int)len, r->path);
}

/* Checks everything that needs no system call and builds the file name and
 * a first path (the folder as configured; open_folder makes it canonical). */
static int prepare(const struct region_params *p, struct region *out, uint64_t *total,
                   struct ecc_log *log)
{
  if (p->name == NULL || !ecc_name_ok(p->name))
    return log_fail(log, ECC_ERR_CONFIG,
                    "region.name '%s' is not 1..%d of the characters A-Z a-z 0-9 _ -",
                    p->name ? p->name : "(null)", ECC_NAME_MAX);
  snprintf(out->file, sizeof(out->file), FILE_PREFIX "%s" FILE_SUFFIX, p->name);
  char shown[64];
  const char *folder = region_folder_shown(p->folder, shown, sizeof(shown));
  int n = snprintf(out->path, sizeof(out->path), "%s/%s", folder, out->file);
  if (n < 0 || (size_t)n >= sizeof(out->path))
    return log_fail(log, ECC_ERR_CONFIG,
                    "region.dir: the region path %s/%s is too long (at most %zu bytes)", folder,
                    out->file, sizeof(out->path) - 1);
  const char *path = out->path;
  if (p->mode != REGION_AUTO && p->mode != REGION_CREATE && p->mode != REGION_JOIN)
    return log_fail(log, ECC_ERR_INVALID, "region %s: unknown mode %d", path, p->mode);
  if (p->block_size == 0)
    return log_fail(log, ECC_ERR_CONFIG, "region %s: block size is 0", path);
  if (p->num_blocks == 0)
    return log_fail(log, ECC_ERR_CONFIG,
                    "region %s: 0 blocks (region.size is smaller than one %llu-byte block)", path,
                    (unsigned long long)p->block_size);
  if (p->dir_bytes > REGION_DIR_MAX_BYTES || (p->dir_bytes > 0 && p->dir_format == NULL))
    return log_fail(log, ECC_ERR_INVALID,
                    "region %s: a directory area of %llu bytes (at most %llu, with a formatter)",
                    path, (unsigned long long)p->dir_bytes, REGION_DIR_MAX_BYTES);
  if (layout_bytes(p->block_size, p->num_blocks, header_bytes_for(p->dir_bytes), total) != 0)
    return log_fail(log, ECC_ERR_CONFIG,
                    "region %s: %llu blocks of %llu bytes are too large for one file", path,
                    (unsigned long long)p->num_blocks, (unsigned long long)p->block_size);
  return ECC_OK;
}

/* The directory, checked and held open; the path is rebuilt on its
 * canonical name, which is what every later message names. */
static int open_folder(const struct region_params *p, struct region *out, struct ecc_log *log)
{
  char canon[PATH_MAX];
  int rc =
      region_folder_open(p->folder, p->any_filesystem, &out->folder_fd, canon, sizeof(canon), log);
  if (rc != ECC_OK)
    return rc;
  int n = snprintf(out->path, sizeof(out->path), "%s/%s", canon, out->file);
  if (n < 0 || (size_t)n >= sizeof(out->path))
    return log_fail(log, ECC_ERR_CONFIG,
                    "region.dir: the region path %s/%s is too long (at most %zu bytes)", canon,
                    out->file, sizeof(out->path) - 1);
  return ECC_OK;
}

/* Room in the folder's filesystem for a new region of `total` bytes: the
 * same refusal at check time and before a build starts, instead of an
 * ENOSPC half way through allocating (or SIGBUS later). True, with the free
 * bytes, when there is too little; a filesystem that cannot say has room
 * (the build's own allocation still refuses cleanly). */
static bool room_short(int folder_fd, uint64_t total, uint64_t *avail)
{
  struct statvfs fs;
  if (fstatvfs(folder_fd, &fs) != 0)
    return false;
  *avail = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize;
  return *avail < total;
}

static int no_room(uint64_t total, uint64_t avail, const char *path, struct ecc_log *log)
{
  return log_fail(log, ECC_ERR_SYSTEM,
                  "region %s needs %llu MiB but its filesystem has %llu MiB free (%s): lower "
                  "region.size, free room there, or enlarge it (a container's /dev/shm is "
                  "64 MiB unless started with a larger one, e.g. docker run --shm-size=16g)",
                  path, (unsigned long long)((total + (1u << 20) - 1) >> 20),
                  (unsigned long long)(avail >> 20), strerror(ENOSPC));
}

static int check_room(int folder_fd, uint64_t total, const char *path, struct ecc_log *log)
{
  uint64_t avail = 0;
  return room_short(folder_fd, total, &avail) ? no_room(total, avail, path, log) : ECC_OK;
}

int region_precheck(const struct region_params *p, struct ecc_log *log)
{
  struct region r;
  memset(&r, 0, sizeof(r));
  r.fd = -1;
  r.folder_fd = -1;
  uint64_t total = 0;
  int rc = prepare(p, &r, &total, log);
  char shown[PATH_MAX];
  struct stat st;
  /* An absent default folder is open's to make (0700): nothing to check. */
  if (rc == ECC_OK && (p->folder == NULL || p->folder[0] == '\0') &&
      stat(region_folder_shown(NULL, shown, sizeof(shown)), &st) != 0 && errno == ENOENT)
    return ECC_OK;
  if (rc == ECC_OK)
    rc = open_folder(p, &r, log);
  /* Only a region to create needs room. One that another process linked in
   * while we looked fills the filesystem and is joined: no reason to refuse. */
  uint64_t avail = 0;
  if (rc == ECC_OK && fstatat(r.folder_fd, r.file, &st, AT_SYMLINK_NOFOLLOW) != 0 &&
      room_short(r.folder_fd, total, &avail) &&
      fstatat(r.folder_fd, r.file, &st, AT_SYMLINK_NOFOLLOW) != 0)
    rc = no_room(total, avail, r.path, log);
  if (r.folder_fd >= 0)
    close(r.folder_fd);
  return rc;
}

static int map_file(int fd, uint64_t bytes, uint8_t **map, const char *path, struct ecc_log *log)
{
  void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return log_fail(log, errno == ENOMEM ? ECC_ERR_NOMEM : ECC_ERR_SYSTEM,
                    "cannot map the %llu bytes of region %s: %s", (unsigned long long)bytes, path,
                    strerror(errno));
  *map = m;
  return ECC_OK;
}

/* FNV-1a over the fields that tell one built file from any other: the
 * inode (dev, ino) and the builder's moment and pid from the header, which
 * a file rebuilt under the same inode changes. */
static uint64_t identity_of(const struct stat *st, const struct region_header *h)
{
  const uint64_t parts[4] = {(uint64_t)st->st_dev, (uint64_t)st->st_ino,
                             (uint64_t)h->created_unix_ns, (uint64_t)h->creator_pid};
  const uint8_t *b = (const uint8_t *)parts;
  uint64_t x = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof(parts); i++)
    x = (x ^ b[i]) * 0x100000001b3ull;
  return x != 0 ? x : 1;
}

static void fill_out(struct region *out, int fd, const struct stat *st, uint8_t *map,
                     uint64_t total, const struct region_params *p, bool creator)
{
  uint64_t area = dir_area_bytes(p->dir_bytes);
  out->fd = fd;
  out->dev = st->st_dev;
  out->ino = st->st_ino;
  out->map = map;
  out->map_bytes = (size_t)total;
  out->dir = area > 0 ? map + REGION_HEADER_BYTES : NULL;
  out->dir_bytes = area;
  out->blocks = map + REGION_HEADER_BYTES + area;
  out->block_size = p->block_size;
  out->num_blocks = p->num_blocks;
  out->creator = creator;
  out->kept = header_kept((const struct region_header *)map);
  out->identity = identity_of(st, (const struct region_header *)map);
}

/* ---- the memory cgroup --------------------------------------------------- */

/* The first line of a small file, without its newline; 0 if readable. */
static int read_line(const char *path, char *buf, size_t cap)
{
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return -1;
  char *got = fgets(buf, (int)cap, f);
  fclose(f);
  if (got == NULL)
    return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* A whole decimal number; "max" (v2's no limit) and anything else is -1. */
static int parse_bytes(const char *text, uint64_t *out)
{
  if (text[0] < '0' || text[0] > '9')
    return -1;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0')
    return -1;
  *out = v;
  return 0;
}

static int read_bytes(const char *folder, const char *name, uint64_t *out)
{
  char path[PATH_MAX + 64], line[64];
  int n = snprintf(path, sizeof(path), "%s/%s", folder, name);
  if (n < 0 || (size_t)n >= sizeof(path) || read_line(path, line, sizeof(line)) != 0)
    return -1;
  return parse_bytes(line, out);
}

/* Page cache the kernel reclaims before it kills: the file LRU lists of
 * memory.stat (tmpfs pages are not on them). v1 names them total_*. */
static uint64_t reclaimable(const char *folder, int version)
{
  char path[PATH_MAX + 64], line[128];
  snprintf(path, sizeof(path), "%s/memory.stat", folder);
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return 0;
  const char *prefix = version == 1 ? "total_" : "";
  uint64_t sum = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    char key[64];
    unsigned long long v;
    if (sscanf(line, "%63s %llu", key, &v) != 2 || strncmp(key, prefix, strlen(prefix)) != 0)
      continue;
    const char *k = key + strlen(prefix);
    if (strcmp(k, "inactive_file") == 0 || strcmp(k, "active_file") == 0)
      sum += v;
  }
  fclose(f);
  return sum;
}

/* One cgroup directory's limit, kept in *out if it leaves the least room. */
static void consider_cgroup(const char *folder, int version, struct region_memcg *out)
{
  uint64_t limit, usage;
  if (read_bytes(folder, version == 1 ? "memory.limit_in_bytes" : "memory.max", &limit) != 0 ||
      read_bytes(folder, version == 1 ? "memory.usage_in_bytes" : "memory.current", &usage) != 0)
    return;
  uint64_t cache = reclaimable(folder, version);
  uint64_t used = usage > cache ? usage - cache : 0;
  uint64_t room = limit > used ? limit - used : 0;
  if (out->limited && room >= out->room)
    return;
  out->limited = true;
  out->limit = limit;
  out->used = used;
  out->room = room;
  snprintf(out->where, sizeof(out->where), "%s", folder);
}

/* The process's cgroup path in the hierarchy holding the memory controller
 * (v1), else in the unified one (v2); 0 if found. */
static int memcg_path(const char *proc_cgroup, char *path, size_t cap, int *version)
{
  FILE *f = fopen(proc_cgroup, "re");
  if (f == NULL)
    return -1;
  char line[PATH_MAX + 64];
  int found = 0;
  while (found != 1 && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    char *ctl = strchr(line, ':');
    char *rel = ctl != NULL ? strchr(ctl + 1, ':') : NULL;
    if (rel == NULL || rel[1] != '/')
      continue;
    *rel++ = '\0';
    *ctl++ = '\0';
    bool v1_memory = false;
    for (char *save = NULL, *c = strtok_r(ctl, ",", &save); c != NULL;
         c = strtok_r(NULL, ",", &save))
      v1_memory |= strcmp(c, "memory") == 0;
    bool v2 = strcmp(line, "0") == 0 && *ctl == '\0';
    if (v1_memory || (v2 && found == 0)) {
      snprintf(path, cap, "%s", rel);
      *version = v1_memory ? 1 : 2;
      found = *version == 1 ? 1 : 2;
    }
  }
  fclose(f);
  return found != 0 ? 0 : -1;
}

int region_memcg_room(const char *proc_cgroup, const char *cgroup_root, struct region_memcg *out)
{
  memset(out, 0, sizeof(*out));
  char rel[PATH_MAX], base[PATH_MAX], folder[PATH_MAX], probe[PATH_MAX + 32];
  if (memcg_path(proc_cgroup, rel, sizeof(rel), &out->version) != 0)
    return -1;
  struct stat st;
  snprintf(probe, sizeof(probe), "%s/cgroup.controllers", cgroup_root);
  if (out->version == 1)
    snprintf(base, sizeof(base), "%s/memory", cgroup_root);
  else if (stat(probe, &st) == 0)
    snprintf(base, sizeof(base), "%s", cgroup_root);
  else
    snprintf(base, sizeof(base), "%s/unified", cgroup_root); /* a hybrid system's v2 */
  if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
    return -1;
  /* From the process's cgroup up to the root; a directory that is not
   * there (a container sees its own cgroup as the root) is passed over. */
  size_t len = strlen(rel);
  for (;;) {
    while (len > 1 && rel[len - 1] == '/')
      len--;
    int n = snprintf(folder, sizeof(folder), "%s%.*s", base, len > 1 ? (int)len : 0, rel);
    if (n > 0 && (size_t)n < sizeof(folder))
      consider_cgroup(folder, out->version, out);
    if (len <= 1)
      break;
    while (len > 0 && rel[len - 1] != '/')
      len--;
  }
  return 0;
}

/* The builder's pages are charged to its memory cgroup as it allocates
 * them, and a cgroup that cannot hold them kills the process before the
 * allocation can fail: refuse while refusing is still an error. */
static int check_memcg(uint64_t total, const char *path, struct ecc_log *log)
{
  struct region_memcg m;
  if (region_memcg_room("/proc/self/cgroup", "/sys/fs/cgroup", &m) != 0 || !m.limited ||
      total <= m.room)
    return ECC_OK;
  return log_fail(log, ECC_ERR_NOMEM,
                  "region %s needs %llu bytes (%.1f MiB), but this process's memory cgroup %s "
                  "has room for %llu more (limit %llu, %llu in use that cannot be reclaimed): "
                  "a region's tmpfs pages are charged to the cgroup of the process that builds "
                  "it, which would be killed while filling them. Raise the memory limit of the "
                  "cgroup (the container) or lower region.size",
                  path, (unsigned long long)total, (double)total / (1024.0 * 1024.0), m.where,
                  (unsigned long long)m.room, (unsigned long long)m.limit,
                  (unsigned long long)m.used);
}

/* ---- creating ---------------------------------------------------------- */

/* Allocation up front: a tmpfs too small for the region fails here with
 * ENOSPC instead of killing a process with SIGBUS on first touch. */
static int size_file(int fd, uint64_t total, const char *path, struct ecc_log *log)
{
  if (ftruncate(fd, (off_t)total) != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "cannot size region %s to %llu bytes: %s", path,
                    (unsigned long long)total, strerror(errno));
  int e;
  do
    e = posix_fallocate(fd, 0, (off_t)total);
  while (e == EINTR);
  if (e != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "cannot allocate %llu bytes for region %s: %s",
                    (unsigned long long)total, path, strerror(e));
  return ECC_OK;
}

static int prefault(uint8_t *map, size_t bytes, const char *path, struct ecc_log *log)
{
  if (madvise(map, bytes, MADV_POPULATE_WRITE) == 0)
    return ECC_OK;
  if (errno != EINVAL && errno != EINTR)
    return log_fail(log, ECC_ERR_SYSTEM, "cannot pre-fault the %zu bytes of region %s: %s", bytes,
                    path, strerror(errno));
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0)
    page = 4096;
  /* Nobody else can see the file yet, so writing a byte back is harmless. */
  for (size_t off = 0; off < bytes; off += (size_t)page) {
    volatile uint8_t *b = map + off;
    *b = *b;
  }
  return ECC_OK;
}

/* The builder's pid, in the header's place for it, while the magic is
 * still blank: what a joiner names when the builder dies. */
static int note_builder(int fd, const char *path, struct ecc_log *log)
{
  int64_t pid = (int64_t)getpid();
  off_t at = (off_t)offsetof(struct region_header, creator_pid);
  if (pwrite(fd, &pid, sizeof(pid), at) != (ssize_t)sizeof(pid))
    return log_fail(log, ECC_ERR_SYSTEM, "cannot write the header of %s" TMP_SUFFIX ": %s", path,
                    strerror(errno));
  return ECC_OK;
}

/* The magic goes in last, after a fence: a header without it is never
 * taken for a finished one. */
static void write_header(uint8_t *map, const struct region_params *p, uint64_t total)
{
  struct region_header h;
  struct timespec ts;
  memset(&h, 0, sizeof(h));
  h.layout_version = p->persist ? REGION_LAYOUT_KEPT : REGION_LAYOUT_VERSION;
  h.flags = p->persist ? REGION_FLAG_KEPT : 0;
  h.header_bytes = (uint32_t)header_bytes_for(p->dir_bytes);
  h.dir_bytes = dir_area_bytes(p->dir_bytes);
  h.block_size = p->block_size;
  h.num_blocks = p->num_blocks;
  h.file_bytes = total;
  h.creator_pid = (int64_t)getpid();
  h.creator_uid = (uint32_t)geteuid();
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
    h.created_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  size_t body = offsetof(struct region_header, layout_version);
  memcpy(map + body, (const uint8_t *)&h + body, sizeof(h) - body);
  atomic_thread_fence(memory_order_release);
  memcpy(map, REGION_MAGIC, sizeof(h.magic));
}

/* Lock the fresh temporary file, then make sure the name still is ours: a
 * process that found it unheld before we held the lock took it for a dead
 * builder's and removed it. A builder links its region in before it frees
 * the temporary name, so a region present now is one to join, not to build
 * a second time. */
static int lock_new_file(int fd, const struct region *r, const char *tmp, const struct stat *st,
                         struct ecc_log *log)
{
  while (flock(fd, LOCK_SH) != 0) {
    if (errno != EINTR)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot lock %s" TMP_SUFFIX ": %s", r->path,
                      strerror(errno));
  }
  if (!names_file(r->folder_fd, tmp, st->st_dev, st->st_ino))
    return STEP_AGAIN;
  struct stat final;
  if (fstatat(r->folder_fd, r->file, &final, AT_SYMLINK_NOFOLLOW) == 0)
    return STEP_EXISTS;
  return ECC_OK;
}

static int publish(const struct region *r, const char *tmp, struct ecc_log *log)
{
  if (linkat(r->folder_fd, tmp, r->folder_fd, r->file, 0) == 0)
    return ECC_OK;
  if (errno == EEXIST)
    return STEP_EXISTS;
  if (errno == ENOENT)
    return STEP_AGAIN; /* the temporary name was removed under us */
  return log_fail(log, ECC_ERR_SYSTEM, "cannot link %s" TMP_SUFFIX " to %s: %s", r->path, r->path,
                  strerror(errno));
}

static int build_file(int fd, const struct region *r, const char *tmp,
                      const struct region_params *p, uint64_t total, const struct stat *st,
                      uint8_t **map, struct ecc_log *log)
{
  int rc = lock_new_file(fd, r, tmp, st, log);
  /* Only after the lock: a racer's region linked in meanwhile fills the
   * filesystem, and is to be joined, not refused for want of room. */
  if (rc == ECC_OK)
    rc = check_room(r->folder_fd, total, r->path, log);
  if (rc == ECC_OK)
    rc = check_memcg(total, r->path, log);
  if (rc == ECC_OK)
    rc = size_file(fd, total, r->path, log);
  if (rc == ECC_OK)
    rc = note_builder(fd, r->path, log);
  if (rc == ECC_OK)
    rc = map_file(fd, total, map, r->path, log);
  if (rc == ECC_OK)
    rc = prefault(*map, (size_t)total, r->path, log);
  /* The directory is formatted before the header names the file finished:
   * a joiner that sees the magic sees a formatted directory. */
  if (rc == ECC_OK && p->dir_bytes > 0)
    rc = p->dir_format(p->dir_arg, *map + REGION_HEADER_BYTES, dir_area_bytes(p->dir_bytes), log);
  if (rc == ECC_OK) {
    write_header(*map, p, total);
    rc = publish(r, tmp, log);
  }
  return rc;
}

enum unheld {
  UNHELD_GONE,
  UNHELD_HELD,
  UNHELD_REMOVED,
  UNHELD_KEPT,
  UNHELD_FOREIGN,
  UNHELD_FAILED
};

/* Removes `name` if it is a regular file of this user that no process
 * holds (its exclusive lock is free) and the name still names the file that
 * was locked: with the lock held nobody can join it meanwhile. With
 * spare_kept a kept region stays (UNHELD_KEPT); a temporary file is never
 * spared, since nobody can ever join one. On UNHELD_FAILED *err is the
 * errno. */
static int remove_unheld(int folder_fd, const char *name, bool spare_kept, int *err)
{
  int fd = openat(folder_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    if (errno == ENOENT)
      return UNHELD_GONE;
    return errno == ELOOP || errno == EACCES || errno == EPERM ? UNHELD_FOREIGN : UNHELD_FAILED;
  }
  struct stat st;
  int rc = UNHELD_REMOVED;
  if (fstat(fd, &st) != 0)
    rc = UNHELD_FAILED;
  else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
    rc = UNHELD_FOREIGN;
  else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
    rc = errno == EWOULDBLOCK ? UNHELD_HELD : UNHELD_FAILED;
  else if (!names_file(folder_fd, name, st.st_dev, st.st_ino))
    rc = UNHELD_GONE;
  else if (spare_kept && file_kept(fd))
    rc = UNHELD_KEPT;
  else if (unlinkat(folder_fd, name, 0) != 0)
    rc = UNHELD_FAILED;
  *err = errno;
  close(fd);
  return rc;
}

/* The temporary name is taken: by a live builder, whose region is waited
 * for, or by what a dead one left, which can never be joined and so is
 * removed whatever reap_orphans says. */
static int tmp_taken(const struct region *r, const char *tmp, struct ecc_log *log)
{
  int err = 0;
  switch (remove_unheld(r->folder_fd, tmp, false, &err)) {
  case UNHELD_HELD:
    return STEP_BUILDING;
  case UNHELD_REMOVED:
    log_msg(log, ECC_LOG_INFO,
            "removed stale temporary file %s" TMP_SUFFIX " (no process held it: its builder "
            "died)",
            r->path);
    return STEP_AGAIN;
  case UNHELD_GONE:
    return STEP_AGAIN;
  case UNHELD_FOREIGN:
    return log_fail(log, ECC_ERR_REGION,
                    "region %s cannot be built: its temporary name %s" TMP_SUFFIX " is taken "
                    "by something other than a regular file of this user (uid %u); remove it",
                    r->path, r->path, (unsigned)geteuid());
  default:
    return log_fail(log, ECC_ERR_SYSTEM,
                    "region %s: cannot check its temporary file %s" TMP_SUFFIX ": %s", r->path,
                    r->path, strerror(err));
  }
}

/* Returns ECC_OK, STEP_EXISTS (a region holds the name), STEP_AGAIN (the
 * temporary name changed hands: try again), STEP_BUILDING (another process
 * is building it) or an error. */
/* A region this large takes about a second or more to allocate on a small,
 * busy machine (8 GiB took 14-31 s on two cores): its creator says so first. */
#define REGION_SLOW_BYTES ((uint64_t)512 << 20)

static int create_once(const struct region_params *p, uint64_t total, struct region *out,
                       struct ecc_log *log)
{
  char tmp[sizeof(out->file) + sizeof(TMP_SUFFIX)];
  tmp_name(out, tmp, sizeof(tmp));
  int fd = openat(out->folder_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return tmp_taken(out, tmp, log);
    return log_fail(log, ECC_ERR_SYSTEM, "cannot create %s" TMP_SUFFIX " for region %s: %s",
                    out->path, out->path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = log_fail(log, ECC_ERR_SYSTEM, "cannot stat %s" TMP_SUFFIX ": %s", out->path,
                      strerror(errno));
    if (unlinkat(out->folder_fd, tmp, 0) != 0)
      log_msg(log, ECC_LOG_WARN, "cannot remove %s" TMP_SUFFIX ": %s", out->path, strerror(errno));
    close(fd);
    return rc;
  }
  uint8_t *map = NULL;
  int64_t started = now_ms();
  if (total >= REGION_SLOW_BYTES)
    log_msg(log, ECC_LOG_INFO,
            "creating region %s: allocating %llu MiB of shared memory before it can be used "
            "(a region of several GiB takes seconds)",
            out->path, (unsigned long long)(total >> 20));
  int rc = build_file(fd, out, tmp, p, total, &st, &map, log);
  /* A failed build gives its memory back before it frees the name, which
   * the next builder may take at once. */
  if (rc != ECC_OK && map != NULL && munmap(map, (size_t)total) != 0)
    log_msg(log, ECC_LOG_WARN, "cannot unmap %s" TMP_SUFFIX ": %s", out->path, strerror(errno));
  if (rc != ECC_OK && ftruncate(fd, 0) != 0)
    log_msg(log, ECC_LOG_WARN, "cannot empty %s" TMP_SUFFIX ": %s", out->path, strerror(errno));
  /* Linked or not, the temporary name goes; a failed build leaves nothing. */
  if (names_file(out->folder_fd, tmp, st.st_dev, st.st_ino) &&
      unlinkat(out->folder_fd, tmp, 0) != 0)
    log_msg(log, ECC_LOG_WARN, "region %s: cannot remove temporary name %s" TMP_SUFFIX ": %s",
            out->path, out->path, strerror(errno));
  if (rc != ECC_OK) {
    close(fd);
    return rc;
  }
  fill_out(out, fd, &st, map, total, p, 1);
  log_msg(log, ECC_LOG_INFO, "created region %s: %llu blocks of %llu bytes in %lld ms", out->path,
          (unsigned long long)p->num_blocks, (unsigned long long)p->block_size,
          (long long)(now_ms() - started));
  return ECC_OK;
}

/* ---- joining ----------------------------------------------------------- */

static int open_error(const char *path, int err, struct ecc_log *log)
{
  switch (err) {
  case ENOENT:
    return STEP_ABSENT;
  case ELOOP:
    return log_fail(log, ECC_ERR_REGION, "region %s is a symbolic link; refusing to follow it",
                    path);
  case EISDIR:
    return log_fail(log, ECC_ERR_REGION, "region %s is not a regular file", path);
  case EACCES:
  case EPERM:
    return log_fail(log, ECC_ERR_REGION,
                    "region %s cannot be opened for writing (%s): it belongs to another user "
                    "or is read-only",
                    path, strerror(err));
  default:
    return log_fail(log, ECC_ERR_SYSTEM, "cannot open region %s: %s", path, strerror(err));
  }
}

/* Shared memory is only trusted if this user alone can write it. */
static int check_owner(int fd, const char *path, struct stat *st, struct ecc_log *log)
{
  if (fstat(fd, st) != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "cannot stat region %s: %s", path, strerror(errno));
  if (!S_ISREG(st->st_mode))
    return log_fail(log, ECC_ERR_REGION, "region %s is not a regular file", path);
  if (st->st_uid != geteuid())
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is owned by uid %u, not by this process's uid %u; refusing it", path,
                    (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is writable by group or others (mode %04o); refusing it", path,
                    (unsigned)(st->st_mode & 07777));
  return ECC_OK;
}

/* Only a reaper, a closer and a restarter (below) take the exclusive lock,
 * and only for a moment. */
static int lock_shared(int fd, const char *path, int64_t deadline, uint32_t timeout_ms,
                       struct ecc_log *log)
{
  for (;;) {
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
      return ECC_OK;
    if (errno == EINTR)
      continue;
    if (errno != EWOULDBLOCK)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot lock region %s: %s", path, strerror(errno));
    if (now_ms() >= deadline)
      return log_fail(log, ECC_ERR_REGION,
                      "timed out after %u ms waiting for a shared lock on region %s",
                      (unsigned)timeout_ms, path);
    sleep_ms(POLL_MS);
  }
}

/* A kept region's joiner first asks whether any process holds the file:
 * the exclusive lock is free only when none does, and then this open is a
 * restart. Linux converts the lock to a shared one by dropping it first,
 * so lock_shared takes it as every joiner does; a second starter that
 * finds the lock free in that instant restarts too, which frees nothing
 * twice (what a restart frees belongs to dead processes only). */
static int lock_joining(int fd, const char *path, int64_t deadline, uint32_t timeout_ms,
                        bool *alone, struct ecc_log *log)
{
  *alone = false;
  if (file_kept(fd)) {
    int e;
    do
      e = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno;
    while (e == EINTR);
    if (e != 0 && e != EWOULDBLOCK)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot lock region %s: %s", path, strerror(e));
    *alone = e == 0;
  }
  return lock_shared(fd, path, deadline, timeout_ms, log);
}

static bool magic_is_zero(const char *magic)
{
  for (size_t i = 0; i < sizeof(((struct region_header *)0)->magic); i++)
    if (magic[i] != 0)
      return 0;
  return 1;
}

static int foreign_magic(const struct region_header *h, const char *path, struct ecc_log *log)
{
  char shown[sizeof(h->magic) + 1];
  for (size_t i = 0; i < sizeof(h->magic); i++) {
    unsigned char c = (unsigned char)h->magic[i];
    shown[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  shown[sizeof(h->magic)] = '\0';
  return log_fail(log, ECC_ERR_REGION,
                  "region %s is not an encoder-cache region (magic \"%s\", expected \"%s\")", path,
                  shown, REGION_MAGIC);
}

/* A file made by another tool in place (not linked in finished) may still
 * be growing; wait for its header while its magic is blank. On return *now
 * is the file as last seen. */
static int wait_header(int fd, const char *path, int64_t deadline, uint32_t timeout_ms,
                       struct region_header *h, struct stat *now, struct ecc_log *log)
{
  for (;;) {
    if (fstat(fd, now) != 0)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot stat region %s: %s", path, strerror(errno));
    if (now->st_size >= (off_t)REGION_HEADER_BYTES) {
      ssize_t got = pread(fd, h, sizeof(*h), 0);
      if (got < 0 && errno != EINTR)
        return log_fail(log, ECC_ERR_SYSTEM, "cannot read the header of region %s: %s", path,
                        strerror(errno));
      if (got == (ssize_t)sizeof(*h)) {
        if (memcmp(h->magic, REGION_MAGIC, sizeof(h->magic)) == 0)
          return ECC_OK;
        if (!magic_is_zero(h->magic))
          return foreign_magic(h, path, log);
      }
    }
    if (now_ms() >= deadline)
      break;
    sleep_ms(POLL_MS);
  }
  if (now->st_size < (off_t)REGION_HEADER_BYTES)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is truncated: %lld bytes, less than its %u-byte header "
                    "(waited %u ms)",
                    path, (long long)now->st_size, REGION_HEADER_BYTES, (unsigned)timeout_ms);
  return log_fail(log, ECC_ERR_REGION,
                  "region %s has no header: its magic did not appear within %u ms", path,
                  (unsigned)timeout_ms);
}

static int check_header(const struct region_header *h, off_t size, const char *path,
                        struct ecc_log *log)
{
  uint64_t want;
  if (h->layout_version != REGION_LAYOUT_VERSION && h->layout_version != REGION_LAYOUT_KEPT)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has layout version %u; this connector reads versions %u and %u "
                    "(%u: a kept region)",
                    path, (unsigned)h->layout_version, (unsigned)REGION_LAYOUT_VERSION,
                    (unsigned)REGION_LAYOUT_KEPT, (unsigned)REGION_LAYOUT_KEPT);
  if (h->layout_version == REGION_LAYOUT_KEPT && h->flags != REGION_FLAG_KEPT)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has layout version %u with flags 0x%x; this connector reads "
                    "that version with flags 0x%x (kept) only",
                    path, (unsigned)h->layout_version, (unsigned)h->flags,
                    (unsigned)REGION_FLAG_KEPT);
  if (h->dir_bytes > REGION_DIR_MAX_BYTES || h->dir_bytes != dir_area_bytes(h->dir_bytes) ||
      h->header_bytes != header_bytes_for(h->dir_bytes))
    return log_fail(log, ECC_ERR_REGION,
                    "region %s declares a %u-byte header with a %llu-byte directory area; "
                    "expected a %u-byte header page and an area of whole pages",
                    path, (unsigned)h->header_bytes, (unsigned long long)h->dir_bytes,
                    REGION_HEADER_BYTES);
  if (layout_bytes(h->block_size, h->num_blocks, h->header_bytes, &want) != 0 ||
      want != h->file_bytes)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has an inconsistent header: %llu blocks of %llu bytes after "
                    "a %u-byte header do not make the %llu file bytes it declares",
                    path, (unsigned long long)h->num_blocks, (unsigned long long)h->block_size,
                    (unsigned)h->header_bytes, (unsigned long long)h->file_bytes);
  if ((uint64_t)size < h->file_bytes)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is truncated: its header declares %llu bytes but the file "
                    "has %lld",
                    path, (unsigned long long)h->file_bytes, (long long)size);
  return ECC_OK;
}

/* Every process of a region agrees on its persistence: one that would
 * remove a kept region at its last close, or keep one that its other
 * processes expect to go, is refused. */
static int check_kept(const struct region_header *h, const struct region_params *p,
                      const char *path, struct ecc_log *log)
{
  bool kept = header_kept(h);
  if (kept == p->persist)
    return ECC_OK;
  if (kept)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is kept (it was made with region.persist = true) but this "
                    "connector is configured with region.persist = false; every process of a "
                    "region must agree: set region.persist = true, or delete the region with "
                    "`eccctl rm CONFIG` once no process uses it",
                    path);
  return log_fail(log, ECC_ERR_REGION,
                  "region %s is not kept (it was made with region.persist = false: its last "
                  "holder removes it) but this connector is configured with region.persist = "
                  "true; every process of a region must agree: set region.persist = false, or "
                  "open this connector once the region's processes have closed it",
                  path);
}

static int check_layout(const struct region_header *h, const struct region_params *p,
                        const char *path, struct ecc_log *log)
{
  if (h->block_size == p->block_size && h->num_blocks == p->num_blocks &&
      h->dir_bytes == dir_area_bytes(p->dir_bytes))
    return ECC_OK;
  const char *hint = header_kept(h) ? REGION_KEPT_HINT : "";
  /* The row layout first: a different hidden_size or dtype also changes
   * the directory's size, and the blocks are what the user set. */
  if (h->block_size != p->block_size)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has blocks of %llu bytes but this connector is configured for "
                    "blocks of %llu bytes: a block is one row (region.hidden_size x the bytes "
                    "of region.dtype, or region.block_size), which every process of a region "
                    "must set alike%s",
                    path, (unsigned long long)h->block_size, (unsigned long long)p->block_size,
                    hint);
  if (h->num_blocks == p->num_blocks && h->dir_bytes != dir_area_bytes(p->dir_bytes))
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has a directory area of %llu bytes but this connector is "
                    "configured for %llu (%s)%s",
                    path, (unsigned long long)h->dir_bytes,
                    (unsigned long long)dir_area_bytes(p->dir_bytes),
                    h->dir_bytes == 0 || p->dir_bytes == 0 ? "a region with a directory and "
                                                             "one without cannot be shared"
                                                           : "its size or its table sizes differ",
                    hint);
  return log_fail(log, ECC_ERR_REGION,
                  "region %s has %llu blocks of %llu bytes but this connector is "
                  "configured for %llu blocks of %llu bytes%s",
                  path, (unsigned long long)h->num_blocks, (unsigned long long)h->block_size,
                  (unsigned long long)p->num_blocks, (unsigned long long)p->block_size, hint);
}

/* A file with holes gets its pages on first touch, and a full tmpfs answers
 * that touch with SIGBUS, which kills the process: refuse it at join, while
 * refusing is still an error. A creator allocates every block before it
 * links the file in. */
static int check_allocated(const struct stat *st, const char *path, struct ecc_log *log)
{
  unsigned long long allocated = (unsigned long long)st->st_blocks * 512;
  if (allocated >= (unsigned long long)st->st_size)
    return ECC_OK;
  return log_fail(log, ECC_ERR_REGION,
                  "region %s is sparse: %llu bytes are allocated of the %lld it holds; "
                  "touching the rest could kill this process with SIGBUS, so it is refused",
                  path, allocated, (long long)st->st_size);
}

/* On ECC_OK *alone says whether no other process held the file when it
 * was locked. */
static int join_checks(int fd, const struct region_params *p, const struct region *r,
                       int64_t deadline, struct stat *st, struct region_header *h, bool *alone,
                       struct ecc_log *log)
{
  struct stat now;
  int rc = check_owner(fd, r->path, st, log);
  if (rc == ECC_OK)
    rc = lock_joining(fd, r->path, deadline, p->join_timeout_ms, alone, log);
  /* Locked a file that was reaped, replaced or removed by its last holder
   * meanwhile: start over. */
  if (rc == ECC_OK && !names_file(r->folder_fd, r->file, st->st_dev, st->st_ino))
    rc = STEP_AGAIN;
  if (rc == ECC_OK)
    rc = wait_header(fd, r->path, deadline, p->join_timeout_ms, h, &now, log);
  if (rc == ECC_OK)
    rc = check_header(h, now.st_size, r->path, log);
  if (rc == ECC_OK)
    rc = check_kept(h, p, r->path, log);
  if (rc == ECC_OK)
    rc = check_layout(h, p, r->path, log);
  if (rc == ECC_OK)
    rc = check_allocated(&now, r->path, log);
  return rc;
}

/* Returns ECC_OK, STEP_ABSENT (no file), STEP_AGAIN (the file changed under
 * us) or an error. */
static int join_once(const struct region_params *p, int64_t deadline, struct region *out,
                     struct ecc_log *log)
{
  int fd = openat(out->folder_fd, out->file, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return open_error(out->path, errno, log);
  struct stat st;
  struct region_header h;
  uint8_t *map = NULL;
  bool alone = false;
  int rc = join_checks(fd, p, out, deadline, &st, &h, &alone, log);
  if (rc == ECC_OK)
    rc = map_file(fd, h.file_bytes, &map, out->path, log);
  if (rc != ECC_OK) {
    close(fd);
    return rc;
  }
  fill_out(out, fd, &st, map, h.file_bytes, p, 0);
  out->restarted = out->kept && alone;
  log_msg(log, ECC_LOG_INFO, "joined %sregion %s (created by pid %lld): %llu blocks of %llu bytes",
          out->restarted ? "the kept " : "", out->path, (long long)h.creator_pid,
          (unsigned long long)h.num_blocks, (unsigned long long)h.block_size);
  return ECC_OK;
}

/* ---- leftovers ----------------------------------------------------------- */

enum { ENTRY_OTHER, ENTRY_REGION, ENTRY_TMP };

/* ecc-<name>.region, or a temporary name of one: ecc-<name>.region.tmp, or
 * the ecc-<name>.region.tmp.<pid>.<n> of earlier versions. */
static int entry_kind(const char *name)
{
  if (strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)) != 0)
    return ENTRY_OTHER;
  const char *s = name + strlen(FILE_PREFIX);
  size_t n = ecc_name_span(s);
  if (n == 0)
    return ENTRY_OTHER;
  s += n;
  if (strcmp(s, FILE_SUFFIX) == 0)
    return ENTRY_REGION;
  if (strncmp(s, FILE_SUFFIX TMP_SUFFIX, strlen(FILE_SUFFIX TMP_SUFFIX)) != 0)
    return ENTRY_OTHER;
  s += strlen(FILE_SUFFIX TMP_SUFFIX);
  if (s[0] == '\0')
    return ENTRY_TMP;
  if (s[0] == '.' && s[1] != '\0' && strspn(s + 1, "0123456789.") == strlen(s + 1))
    return ENTRY_TMP;
  return ENTRY_OTHER;
}

/* Removes `name` if it is ours and nobody holds it. Returns 1 if removed. */
static int reap_one(int folder_fd, const char *folder, const char *name, struct ecc_log *log)
{
  int err = 0;
  bool tmp = entry_kind(name) == ENTRY_TMP;
  int rc = remove_unheld(folder_fd, name, !tmp, &err);
  const char *what = tmp ? "stale temporary file" : "orphaned region";
  if (rc == UNHELD_REMOVED)
    log_msg(log, ECC_LOG_INFO, "removed %s %s/%s (no process held it)", what, folder, name);
  else if (rc == UNHELD_KEPT)
    log_msg(log, ECC_LOG_DEBUG, "left kept region %s/%s in place (region.persist)", folder, name);
  else if (rc == UNHELD_FAILED)
    log_msg(log, ECC_LOG_WARN, "cannot remove %s %s/%s: %s", what, folder, name, strerror(err));
  return rc == UNHELD_REMOVED;
}

enum { SCAN_TMP = 1, SCAN_REGIONS = 2 };

/* Removes what `todo` asks for among the directory's entries: temporary
 * files and region files that no process holds. Returns how many. */
static int scan_folder(int folder_fd, const char *folder, int todo, struct ecc_log *log)
{
  int fd = openat(folder_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (d == NULL) {
    log_msg(log, ECC_LOG_WARN, "cannot scan %s for leftover region files: %s", folder,
            strerror(errno));
    if (fd >= 0)
      close(fd);
    return 0;
  }
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    int kind = entry_kind(e->d_name);
    if ((kind == ENTRY_TMP && (todo & SCAN_TMP)) || (kind == ENTRY_REGION && (todo & SCAN_REGIONS)))
      count += reap_one(folder_fd, folder, e->d_name, log);
  }
  closedir(d);
  return count;
}

/* Directories this process has scanned, by identity. A scan opens and locks
 * every ecc-* file in the directory, so it runs once per process; later
 * opens look at their own names only. Past SCANNED_MAX directories every
 * open scans. */
#define SCANNED_MAX 64
static struct scanned {
  dev_t dev;
  ino_t ino;
  int done; /* SCAN_* bits */
} scanned[SCANNED_MAX];
static size_t n_scanned;
static pthread_mutex_t scanned_lock = PTHREAD_MUTEX_INITIALIZER;

/* The parts of `want` not yet done in this directory; they count as done
 * from now on. */
static int claim_scan(int folder_fd, int want)
{
  struct stat st;
  if (fstat(folder_fd, &st) != 0)
    return want;
  pthread_mutex_lock(&scanned_lock);
  struct scanned *s = NULL;
  for (size_t i = 0; i < n_scanned && s == NULL; i++)
    if (scanned[i].dev == st.st_dev && scanned[i].ino == st.st_ino)
      s = &scanned[i];
  if (s == NULL && n_scanned < SCANNED_MAX) {
    s = &scanned[n_scanned++];
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    s->done = 0;
  }
  int todo = s != NULL ? want & ~s->done : want;
  if (s != NULL)
    s->done |= want;
  pthread_mutex_unlock(&scanned_lock);
  return todo;
}

/* Before joining or building: this region's own leftovers (its temporary
 * file always, since no one can ever join one; the region itself with
 * reap_orphans), then, once per process, everybody else's. */
static void clean_up_leftovers(const struct region_params *p, const struct region *r,
                               struct ecc_log *log)
{
  char folder[sizeof(r->path)], tmp[sizeof(r->file) + sizeof(TMP_SUFFIX)];
  folder_of(r, folder, sizeof(folder));
  tmp_name(r, tmp, sizeof(tmp));
  reap_one(r->folder_fd, folder, tmp, log);
  if (p->reap_orphans)
    reap_one(r->folder_fd, folder, r->file, log);
  int todo = claim_scan(r->folder_fd, SCAN_TMP | (p->reap_orphans ? SCAN_REGIONS : 0));
  if (todo != 0)
    scan_folder(r->folder_fd, folder, todo, log);
}

/* ---- opening ----------------------------------------------------------- */

static int already_exists(const char *path, struct ecc_log *log)
{
  return log_fail(log, ECC_ERR_REGION,
                  "region %s already exists (region.mode = create); use mode auto or join, "
                  "or remove it if no process uses it",
                  path);
}

static int still_building(const struct region_params *p, const struct region *r,
                          struct ecc_log *log)
{
  return log_fail(log, ECC_ERR_REGION,
                  "timed out after %u ms waiting for region %s: another process is still "
                  "building it (it holds %s" TMP_SUFFIX "); raise region.join_timeout_ms for "
                  "a region this large",
                  (unsigned)p->join_timeout_ms, r->path, r->path);
}

/* A joiner never builds, so a builder that dies while joiners wait for it
 * would leave them waiting out their whole timeout. They watch its
 * temporary file instead: the kernel drops a process's flock when it dies,
 * so an unheld temporary file is a builder gone without finishing. */
struct builder_watch {
  int fd;    /* the temporary file being watched; -1: none */
  dev_t dev; /* its identity */
  ino_t ino;
  bool seen_held;       /* a builder held it since it was first seen */
  int64_t unheld_since; /* when it was first seen empty and unheld (ms); 0: not yet */
};

/* A builder creates its file, then locks it, then sizes it: an empty file
 * nobody holds may be one whose builder is about to lock it. */
#define BORN_MS 500

static void watch_end(struct builder_watch *w)
{
  if (w->fd >= 0)
    close(w->fd);
  memset(w, 0, sizeof(*w));
  w->fd = -1;
}

/* Starts watching the temporary name's file; 0 when there is none to watch
 * (no builder, or something joiners have no business with). */
static int watch_start(const struct region *r, const char *tmp, struct builder_watch *w)
{
  int fd = openat(r->folder_fd, tmp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0)
    return 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    close(fd);
    return 0;
  }
  w->fd = fd;
  w->dev = st.st_dev;
  w->ino = st.st_ino;
  return 1;
}

/* Whether the watched file is a finished region: its builder linked it in
 * (and every holder has closed it since). */
static bool watched_finished(const struct builder_watch *w)
{
  char magic[sizeof(((struct region_header *)0)->magic)];
  return pread(w->fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
         memcmp(magic, REGION_MAGIC, sizeof(magic)) == 0;
}

static int builder_died(const struct region *r, const struct builder_watch *w, bool removed,
                        struct ecc_log *log)
{
  int64_t pid = 0;
  char who[48] = "", file[sizeof(r->path) + 48] = "";
  if (pread(w->fd, &pid, sizeof(pid), (off_t)offsetof(struct region_header, creator_pid)) ==
          (ssize_t)sizeof(pid) &&
      pid > 0)
    snprintf(who, sizeof(who), " (pid %lld)", (long long)pid);
  if (removed)
    snprintf(file, sizeof(file), " (its temporary file %s" TMP_SUFFIX " is removed)", r->path);
  return log_fail(log, ECC_ERR_REGION,
                  "region %s: the process building it%s died or gave up before finishing it%s; "
                  "none is building it now. Start the process that creates the region again "
                  "(region.mode = join never builds one; mode auto would)",
                  r->path, who, file);
}

/* One look at the builder of the region a joiner waits for: STEP_BUILDING
 * or STEP_ABSENT to wait on, or ECC_ERR_REGION once the builder it saw is
 * gone without finishing (its temporary file removed). */
static int watch_builder(const struct region *r, struct builder_watch *w, struct ecc_log *log)
{
  char tmp[sizeof(r->file) + sizeof(TMP_SUFFIX)];
  tmp_name(r, tmp, sizeof(tmp));
  if (w->fd < 0 && !watch_start(r, tmp, w))
    return STEP_ABSENT;
  if (flock(w->fd, LOCK_EX | LOCK_NB) != 0) {
    w->seen_held = true;
    return STEP_BUILDING;
  }
  /* Nobody holds it, and with the exclusive lock nobody can take it up
   * before it is judged. */
  bool named = names_file(r->folder_fd, tmp, w->dev, w->ino);
  struct stat st;
  if (watched_finished(w) || fstat(w->fd, &st) != 0) {
    watch_end(w);
    return STEP_ABSENT;
  }
  if (named && !w->seen_held && st.st_size == 0) {
    if (w->unheld_since == 0)
      w->unheld_since = now_ms();
    if (now_ms() - w->unheld_since < BORN_MS) {
      (void)flock(w->fd, LOCK_UN);
      return STEP_BUILDING;
    }
  }
  if (!named && !w->seen_held) {
    watch_end(w); /* removed before anyone held it: watch the next one */
    return STEP_ABSENT;
  }
  bool removed = named && unlinkat(r->folder_fd, tmp, 0) == 0;
  if (named && !removed)
    log_msg(log, ECC_LOG_WARN, "cannot remove stale temporary file %s" TMP_SUFFIX ": %s", r->path,
            strerror(errno));
  struct stat next;
  /* Another builder took over meanwhile: wait for its region instead. */
  if (fstatat(r->folder_fd, tmp, &next, AT_SYMLINK_NOFOLLOW) == 0 &&
      (next.st_dev != w->dev || next.st_ino != w->ino)) {
    watch_end(w);
    return STEP_BUILDING;
  }
  return builder_died(r, w, removed, log);
}

static int open_loop(const struct region_params *p, uint64_t total, int64_t deadline,
                     struct region *out, struct builder_watch *watch, struct ecc_log *log)
{
  int churn = 0;
  struct stat st;
  for (;;) {
    int rc = STEP_ABSENT;
    if (p->mode != REGION_CREATE) {
      rc = join_once(p, deadline, out, log);
      if (rc <= 0)
        return rc;
    }
    if (rc == STEP_ABSENT && p->mode == REGION_JOIN) {
      rc = watch_builder(out, watch, log);
      if (rc < 0)
        return rc;
      if (rc == STEP_BUILDING && now_ms() >= deadline)
        return still_building(p, out, log);
      if (now_ms() >= deadline)
        return log_fail(log, ECC_ERR_REGION,
                        "nobody has created %s yet (waited %u ms, region.join_timeout_ms): "
                        "start the producer first, or use region.mode = auto",
                        out->path, (unsigned)p->join_timeout_ms);
      sleep_ms(POLL_MS);
      continue;
    }
    if (rc == STEP_ABSENT) {
      /* Cheap refusal before building a file that could not be linked. */
      if (p->mode == REGION_CREATE &&
          fstatat(out->folder_fd, out->file, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return already_exists(out->path, log);
      rc = create_once(p, total, out, log);
      if (rc <= 0)
        return rc;
      if (rc == STEP_EXISTS && p->mode == REGION_CREATE)
        return already_exists(out->path, log);
      /* One process builds; the others wait for its region and join it. */
      if (rc == STEP_BUILDING && now_ms() >= deadline)
        return still_building(p, out, log);
      if (rc == STEP_BUILDING) {
        sleep_ms(POLL_MS);
        continue;
      }
    }
    if (++churn >= CHURN_MIN && now_ms() >= deadline)
      return log_fail(log, ECC_ERR_REGION,
                      "region %s kept changing (created, replaced or removed by other "
                      "processes); gave up after %d attempts",
                      out->path, churn);
    sleep_ms(1);
  }
}

static void clear_out(struct region *out)
{
  if (out->folder_fd >= 0)
    close(out->folder_fd);
  memset(out, 0, sizeof(*out));
  out->fd = -1;
  out->folder_fd = -1;
}

int region_open(const struct region_params *p, struct region *out, struct ecc_log *log)
{
  if (out != NULL) {
    memset(out, 0, sizeof(*out));
    out->fd = -1;
    out->folder_fd = -1;
  }
  if (log == NULL)
    return ECC_ERR_INVALID;
  if (p == NULL || out == NULL)
    return log_fail(log, ECC_ERR_INVALID, "region_open: NULL argument");
  uint64_t total = 0;
  int rc = prepare(p, out, &total, log);
  if (rc == ECC_OK)
    rc = open_folder(p, out, log);
  if (rc == ECC_OK) {
    clean_up_leftovers(p, out, log);
    int64_t deadline = now_ms() + (int64_t)p->join_timeout_ms;
    struct builder_watch watch = {.fd = -1};
    rc = open_loop(p, total, deadline, out, &watch, log);
    watch_end(&watch);
  }
  if (rc != ECC_OK)
    clear_out(out);
  return rc;
}

/* ---- checking and closing ------------------------------------------------ */

int region_check(const struct region *r, struct ecc_log *log)
{
  struct stat st;
  if (r->fd < 0)
    return log_fail(log, ECC_ERR_REGION, "region %s is closed", r->path);
  if (fstat(r->fd, &st) != 0)
    return log_fail(log, ECC_ERR_SYSTEM, "cannot stat region %s: %s", r->path, strerror(errno));
  if (st.st_nlink == 0)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s was removed or replaced while this connector used it: other "
                    "processes no longer share its data; shut this connector down and create "
                    "it again",
                    r->path);
  if ((uint64_t)st.st_size < r->map_bytes)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s was truncated to %lld bytes while mapped (%zu expected): its "
                    "data is gone; shut this connector down and create it again",
                    r->path, (long long)st.st_size, r->map_bytes);
  return ECC_OK;
}

/* Called with the exclusive lock: no other process holds the file, and
 * none can join it before we close. */
static void unlink_if_named(const struct region *r, struct ecc_log *log)
{
  if (!names_file(r->folder_fd, r->file, r->dev, r->ino))
    log_msg(log, ECC_LOG_INFO, "region %s no longer names our file; not removing it", r->path);
  else if (unlinkat(r->folder_fd, r->file, 0) != 0)
    log_msg(log, ECC_LOG_ERROR, "cannot remove region %s: %s", r->path, strerror(errno));
  else
    log_msg(log, ECC_LOG_INFO, "removed region %s: no other process holds it", r->path);
}

/* The last holder removes the region, unless it is kept. */
static void leave_as_last(const struct region *r, struct ecc_log *log)
{
  if (!r->kept) {
    unlink_if_named(r, log);
    return;
  }
  log_msg(log, ECC_LOG_INFO,
          "kept region %s (region.persist): no process holds it now; the next open reuses "
          "its entries, `eccctl rm CONFIG` deletes it",
          r->path);
}

void region_close(struct region *r, struct ecc_log *log)
{
  if (r == NULL)
    return;
  if (r->map != NULL && munmap(r->map, r->map_bytes) != 0)
    log_msg(log, ECC_LOG_ERROR, "cannot unmap region %s: %s", r->path, strerror(errno));
  r->map = NULL;
  r->blocks = NULL;
  if (r->fd >= 0) {
    /* Linux converts a flock lock by dropping it first, so drop it, then
     * try for the exclusive one: of holders closing at once at least one
     * gets it, and a joiner that takes its shared lock in between keeps
     * the file (it checks afterwards that the name still names it). */
    if (flock(r->fd, LOCK_UN) != 0)
      log_msg(log, ECC_LOG_ERROR, "cannot unlock region %s: %s", r->path, strerror(errno));
    else if (flock(r->fd, LOCK_EX | LOCK_NB) == 0)
      leave_as_last(r, log);
    if (close(r->fd) != 0)
      log_msg(log, ECC_LOG_ERROR, "cannot close region %s: %s", r->path, strerror(errno));
    r->fd = -1;
  }
  if (r->folder_fd >= 0 && close(r->folder_fd) != 0)
    log_msg(log, ECC_LOG_ERROR, "cannot close the directory of region %s: %s", r->path,
            strerror(errno));
  r->folder_fd = -1;
}

int region_reap_orphans(const char *folder, struct ecc_log *log)
{
  if (folder == NULL)
    return 0;
  int folder_fd = -1;
  char canon[PATH_MAX];
  if (region_folder_open(folder, 1, &folder_fd, canon, sizeof(canon), log) != ECC_OK)
    return 0;
  int count = scan_folder(folder_fd, canon, SCAN_TMP | SCAN_REGIONS, log);
  close(folder_fd);
  return count;
}
