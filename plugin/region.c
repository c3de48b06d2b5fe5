/*
 * region.c - the life of the region file: its name, race-free creation under
 * a temporary name, joining with header and layout checks, reaping files no
 * process holds, and cleanup.
 */
#include "region.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
#define FILE_PREFIX "ecc-"
#define FILE_SUFFIX ".region"
#define TMP_INFIX ".region.tmp."
/* The temporary name appends ".tmp.<pid>.<n>" to the region path. */
#define TMP_PATH_MAX (sizeof(((struct region *)0)->path) + 48)
#define POLL_MS 5
/* Rounds lost to other processes (a file replaced under us, a lost link
 * race, a temporary name taken) before the join deadline may end the loop. */
#define CHURN_MIN 8

/* Outcomes of one attempt besides ECC_OK and the (negative) error codes. */
enum { STEP_ABSENT = 1, STEP_EXISTS = 2, STEP_AGAIN = 3 };

static atomic_uint tmp_counter;

static int64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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

static int name_ok(const char *name)
{
  size_t n = strlen(name);
  return n > 0 && n <= REGION_NAME_MAX && strspn(name, NAME_CHARS) == n;
}

static int same_file(const char *path, const struct stat *st)
{
  struct stat now;
  return lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino;
}

/* Checks everything that needs no system call and builds the path. */
static int prepare(const struct region_params *p, char *path, size_t cap,
                   uint64_t *total, struct ecc_log *log)
{
  if (p->dir == NULL || p->dir[0] == '\0')
    return log_fail(log, ECC_ERR_CONFIG, "region.dir is empty");
  if (p->name == NULL || !name_ok(p->name))
    return log_fail(log, ECC_ERR_CONFIG,
                    "region.name '%s' is not 1..%d of the characters A-Z a-z 0-9 _ -",
                    p->name ? p->name : "(null)", REGION_NAME_MAX);
  int n = snprintf(path, cap, "%s/" FILE_PREFIX "%s" FILE_SUFFIX, p->dir, p->name);
  if (n < 0 || (size_t)n >= cap)
    return log_fail(log, ECC_ERR_CONFIG,
                    "region.dir: the region path %s/" FILE_PREFIX "%s" FILE_SUFFIX
                    " is too long (at most %zu bytes)", p->dir, p->name, cap - 1);
  if (p->mode != REGION_AUTO && p->mode != REGION_CREATE && p->mode != REGION_JOIN)
    return log_fail(log, ECC_ERR_INVALID, "region %s: unknown mode %d", path, p->mode);
  if (p->block_size == 0)
    return log_fail(log, ECC_ERR_CONFIG, "region %s: block size is 0", path);
  if (p->num_blocks == 0)
    return log_fail(log, ECC_ERR_CONFIG,
                    "region %s: 0 blocks (region.size is smaller than one %llu-byte block)",
                    path, (unsigned long long)p->block_size);
  if (layout_bytes(p->block_size, p->num_blocks, REGION_HEADER_BYTES, total) != 0)
    return log_fail(log, ECC_ERR_CONFIG,
                    "region %s: %llu blocks of %llu bytes are too large for one file",
                    path, (unsigned long long)p->num_blocks,
                    (unsigned long long)p->block_size);
  return ECC_OK;
}

static int map_file(int fd, uint64_t bytes, uint8_t **map, const char *path,
                    struct ecc_log *log)
{
  void *m = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return log_fail(log, errno == ENOMEM ? ECC_ERR_NOMEM : ECC_ERR_SYSTEM,
                    "cannot map the %llu bytes of region %s: %s",
                    (unsigned long long)bytes, path, strerror(errno));
  *map = m;
  return ECC_OK;
}

static void fill_out(struct region *out, int fd, const struct stat *st, uint8_t *map,
                     uint64_t total, const struct region_params *p, int creator)
{
  out->fd = fd;
  out->dev = st->st_dev;
  out->ino = st->st_ino;
  out->map = map;
  out->map_bytes = (size_t)total;
  out->blocks = map + REGION_HEADER_BYTES;
  out->block_size = p->block_size;
  out->num_blocks = p->num_blocks;
  out->creator = creator;
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
    return log_fail(log, ECC_ERR_SYSTEM, "cannot pre-fault the %zu bytes of region %s: %s",
                    bytes, path, strerror(errno));
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

/* The magic goes in last, after a fence: a header without it is never
 * taken for a finished one. */
static void write_header(uint8_t *map, const struct region_params *p, uint64_t total)
{
  struct region_header h;
  struct timespec ts;
  memset(&h, 0, sizeof(h));
  h.layout_version = REGION_LAYOUT_VERSION;
  h.header_bytes = REGION_HEADER_BYTES;
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

/* Lock the fresh temporary file, then make sure the name still is ours: an
 * orphan reaper may have removed it before we held the lock. */
/* Lock the fresh temporary file, then make sure the name still is ours: an
 * orphan reaper may have removed it before we held the lock. */
static int lock_new_file(int fd, const char *tmp, const struct stat *st, struct ecc_log *log)
{
  while (flock(fd, LOCK_SH) != 0) {
    if (errno != EINTR)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot lock %s: %s", tmp, strerror(errno));
  }
  return same_file(tmp, st) ? ECC_OK : STEP_AGAIN;
}

static int publish(const char *tmp, const char *path, struct ecc_log *log)
{
  if (link(tmp, path) == 0)
    return ECC_OK;
  if (errno == EEXIST)
    return STEP_EXISTS;
  if (errno == ENOENT)
    return STEP_AGAIN; /* the temporary name was removed under us */
  return log_fail(log, ECC_ERR_SYSTEM, "cannot link %s to %s: %s", tmp, path,
                  strerror(errno));
}

static int build_file(int fd, const char *tmp, const struct region_params *p,
                      uint64_t total, const struct stat *st, uint8_t **map,
                      const char *path, struct ecc_log *log)
{
  int rc = lock_new_file(fd, tmp, st, log);
  if (rc == ECC_OK)
    rc = size_file(fd, total, path, log);
  if (rc == ECC_OK)
    rc = map_file(fd, total, map, path, log);
  if (rc == ECC_OK)
    rc = prefault(*map, (size_t)total, path, log);
  if (rc == ECC_OK) {
    write_header(*map, p, total);
    rc = publish(tmp, path, log);
  }
  return rc;
}

/* Returns ECC_OK, STEP_EXISTS (someone else's file holds the name),
 * STEP_AGAIN (try another temporary name) or an error. */
static int create_once(const struct region_params *p, uint64_t total, struct region *out,
                       struct ecc_log *log)
{
  char tmp[TMP_PATH_MAX];
  unsigned n = atomic_fetch_add(&tmp_counter, 1);
  int len = snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.%u", out->path, (long)getpid(), n);
  if (len < 0 || (size_t)len >= sizeof(tmp))
    return log_fail(log, ECC_ERR_CONFIG, "region %s: path too long for a temporary name",
                    out->path);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST)
      return STEP_AGAIN;
    return log_fail(log, ECC_ERR_SYSTEM, "cannot create %s for region %s: %s", tmp,
                    out->path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = log_fail(log, ECC_ERR_SYSTEM, "cannot stat %s: %s", tmp, strerror(errno));
    if (unlink(tmp) != 0)
      log_msg(log, ECC_LOG_WARN, "cannot remove %s: %s", tmp, strerror(errno));
    close(fd);
    return rc;
  }
  uint8_t *map = NULL;
  int rc = build_file(fd, tmp, p, total, &st, &map, out->path, log);
  /* Linked or not, the temporary name goes; a failed build leaves nothing. */
  if (same_file(tmp, &st) && unlink(tmp) != 0)
    log_msg(log, ECC_LOG_WARN, "region %s: cannot remove temporary name %s: %s", out->path,
            tmp, strerror(errno));
  if (rc != ECC_OK) {
    if (map != NULL && munmap(map, (size_t)total) != 0)
      log_msg(log, ECC_LOG_WARN, "cannot unmap %s: %s", tmp, strerror(errno));
    close(fd);
    return rc;
  }
  fill_out(out, fd, &st, map, total, p, 1);
  log_msg(log, ECC_LOG_INFO, "created region %s: %llu blocks of %llu bytes", out->path,
          (unsigned long long)p->num_blocks, (unsigned long long)p->block_size);
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
                    "or is read-only", path, strerror(err));
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
                    "region %s is owned by uid %u, not by this process's uid %u; refusing it",
                    path, (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & (S_IWGRP | S_IWOTH))
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is writable by group or others (mode %04o); refusing it", path,
                    (unsigned)(st->st_mode & 07777));
  return ECC_OK;
}

/* Only a reaper takes the exclusive lock, and only for a moment. */
static int lock_shared(int fd, const char *path, int64_t deadline, uint32_t timeout_ms,
                       struct ecc_log *log)
{
  for (;;) {
    if (flock(fd, LOCK_SH | LOCK_NB) == 0)
      return ECC_OK;
    if (errno == EINTR)
      continue;
    if (errno != EWOULDBLOCK)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot lock region %s: %s", path,
                      strerror(errno));
    if (now_ms() >= deadline)
      return log_fail(log, ECC_ERR_REGION,
                      "timed out after %u ms waiting for a shared lock on region %s",
                      (unsigned)timeout_ms, path);
    sleep_ms(POLL_MS);
  }
}

static int magic_is_zero(const char *magic)
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
                  "region %s is not an encoder-cache region (magic \"%s\", expected \"%s\")",
                  path, shown, REGION_MAGIC);
}

/* A file made by another tool in place (not linked in finished) may still
 * be growing; wait for its header while its magic is blank. */
static int wait_header(int fd, const char *path, int64_t deadline, uint32_t timeout_ms,
                       struct region_header *h, off_t *size, struct ecc_log *log)
{
  for (;;) {
    struct stat st;
    if (fstat(fd, &st) != 0)
      return log_fail(log, ECC_ERR_SYSTEM, "cannot stat region %s: %s", path,
                      strerror(errno));
    *size = st.st_size;
    if (st.st_size >= (off_t)REGION_HEADER_BYTES) {
      ssize_t got = pread(fd, h, sizeof(*h), 0);
      if (got < 0 && errno != EINTR)
        return log_fail(log, ECC_ERR_SYSTEM, "cannot read the header of region %s: %s",
                        path, strerror(errno));
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
  if (*size < (off_t)REGION_HEADER_BYTES)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is truncated: %lld bytes, less than its %u-byte header "
                    "(waited %u ms)", path, (long long)*size, REGION_HEADER_BYTES,
                    (unsigned)timeout_ms);
  return log_fail(log, ECC_ERR_REGION,
                  "region %s has no header: its magic did not appear within %u ms", path,
                  (unsigned)timeout_ms);
}

static int check_header(const struct region_header *h, off_t size, const char *path,
                        struct ecc_log *log)
{
  uint64_t want;
  if (h->layout_version != REGION_LAYOUT_VERSION)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has layout version %u; this connector reads version %u", path,
                    (unsigned)h->layout_version, (unsigned)REGION_LAYOUT_VERSION);
  if (h->header_bytes != REGION_HEADER_BYTES)
    return log_fail(log, ECC_ERR_REGION, "region %s declares a %u-byte header, expected %u",
                    path, (unsigned)h->header_bytes, REGION_HEADER_BYTES);
  if (layout_bytes(h->block_size, h->num_blocks, h->header_bytes, &want) != 0 ||
      want != h->file_bytes)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s has an inconsistent header: %llu blocks of %llu bytes after "
                    "a %u-byte header do not make the %llu file bytes it declares",
                    path, (unsigned long long)h->num_blocks,
                    (unsigned long long)h->block_size, (unsigned)h->header_bytes,
                    (unsigned long long)h->file_bytes);
  if ((uint64_t)size < h->file_bytes)
    return log_fail(log, ECC_ERR_REGION,
                    "region %s is truncated: its header declares %llu bytes but the file "
                    "has %lld", path, (unsigned long long)h->file_bytes, (long long)size);
  return ECC_OK;
}

static int check_layout(const struct region_header *h, const struct region_params *p,
                        const char *path, struct ecc_log *log)
{
  if (h->block_size == p->block_size && h->num_blocks == p->num_blocks)
    return ECC_OK;
  return log_fail(log, ECC_ERR_REGION,
                  "region %s has %llu blocks of %llu bytes but this connector is "
                  "configured for %llu blocks of %llu bytes",
                  path, (unsigned long long)h->num_blocks, (unsigned long long)h->block_size,
                  (unsigned long long)p->num_blocks, (unsigned long long)p->block_size);
}

static int join_checks(int fd, const struct region_params *p, int64_t deadline,
                       struct stat *st, struct region_header *h, const char *path,
                       struct ecc_log *log)
{
  off_t size = 0;
  int rc = check_owner(fd, path, st, log);
  if (rc == ECC_OK)
    rc = lock_shared(fd, path, deadline, p->join_timeout_ms, log);
  /* Locked a file that was reaped or replaced meanwhile: start over. */
  if (rc == ECC_OK && !same_file(path, st))
    rc = STEP_AGAIN;
  if (rc == ECC_OK)
    rc = wait_header(fd, path, deadline, p->join_timeout_ms, h, &size, log);
  if (rc == ECC_OK)
    rc = check_header(h, size, path, log);
  if (rc == ECC_OK)
    rc = check_layout(h, p, path, log);
  return rc;
}

/* Returns ECC_OK, STEP_ABSENT (no file), STEP_AGAIN (the file changed under
 * us) or an error. */
static int join_once(const struct region_params *p, int64_t deadline, struct region *out,
                     struct ecc_log *log)
{
  int fd = open(out->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return open_error(out->path, errno, log);
  struct stat st;
  struct region_header h;
  uint8_t *map = NULL;
  int rc = join_checks(fd, p, deadline, &st, &h, out->path, log);
  if (rc == ECC_OK)
    rc = map_file(fd, h.file_bytes, &map, out->path, log);
  if (rc != ECC_OK) {
    close(fd);
    return rc;
  }
  fill_out(out, fd, &st, map, h.file_bytes, p, 0);
  log_msg(log, ECC_LOG_INFO, "joined region %s (created by pid %lld): %llu blocks of %llu bytes",
          out->path, (long long)h.creator_pid, (unsigned long long)h.num_blocks,
          (unsigned long long)h.block_size);
  return ECC_OK;
}

/* ---- opening ----------------------------------------------------------- */

static int already_exists(const char *path, struct ecc_log *log)
{
  return log_fail(log, ECC_ERR_REGION,
                  "region %s already exists (region.mode = create); use mode auto or join, "
                  "or remove it if no process uses it", path);
}

static int open_loop(const struct region_params *p, uint64_t total, int64_t deadline,
                     struct region *out, struct ecc_log *log)
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
      if (now_ms() >= deadline)
        return log_fail(log, ECC_ERR_REGION, "timed out after %u ms waiting for %s",
                        (unsigned)p->join_timeout_ms, out->path);
      sleep_ms(POLL_MS);
      continue;
    }
    if (rc == STEP_ABSENT) {
      /* Cheap refusal before building a file that could not be linked. */
      if (p->mode == REGION_CREATE && lstat(out->path, &st) == 0)
        return already_exists(out->path, log);
      rc = create_once(p, total, out, log);
      if (rc <= 0)
        return rc;
      if (rc == STEP_EXISTS && p->mode == REGION_CREATE)
        return already_exists(out->path, log);
    }
    if (++churn >= CHURN_MIN && now_ms() >= deadline)
      return log_fail(log, ECC_ERR_REGION,
                      "region %s kept changing (created, replaced or removed by other "
                      "processes); gave up after %d attempts", out->path, churn);
    sleep_ms(1);
  }
}

int region_open(const struct region_params *p, struct region *out, struct ecc_log *log)
{
  if (out != NULL) {
    memset(out, 0, sizeof(*out));
    out->fd = -1;
  }
  if (log == NULL)
    return ECC_ERR_INVALID;
  if (p == NULL || out == NULL)
    return log_fail(log, ECC_ERR_INVALID, "region_open: NULL argument");
  uint64_t total = 0;
  int rc = prepare(p, out->path, sizeof(out->path), &total, log);
  if (rc != ECC_OK) {
    out->path[0] = '\0';
    return rc;
  }
  if (p->reap_orphans)
    region_reap_orphans(p->dir, log);
  int64_t deadline = now_ms() + (int64_t)p->join_timeout_ms;
  rc = open_loop(p, total, deadline, out, log);
  if (rc != ECC_OK) {
    memset(out, 0, sizeof(*out));
    out->fd = -1;
  }
  return rc;
}

/* ---- closing and reaping ----------------------------------------------- */

void region_close(struct region *r, struct ecc_log *log)
{
  if (r == NULL)
    return;
  if (r->map != NULL && munmap(r->map, r->map_bytes) != 0)
    log_msg(log, ECC_LOG_ERROR, "cannot unmap region %s: %s", r->path, strerror(errno));
  r->map = NULL;
  r->blocks = NULL;
  if (r->fd < 0)
    return;
  /* Unlink while still holding the lock; never remove a file that replaced ours. */
  if (r->creator) {
    struct stat st = {0};
    st.st_dev = r->dev;
    st.st_ino = r->ino;
    if (!same_file(r->path, &st))
      log_msg(log, ECC_LOG_INFO, "region %s no longer names our file; not removing it",
              r->path);
    else if (unlink(r->path) != 0)
      log_msg(log, ECC_LOG_ERROR, "cannot remove region %s: %s", r->path, strerror(errno));
  }
  if (close(r->fd) != 0)
    log_msg(log, ECC_LOG_ERROR, "cannot close region %s: %s", r->path, strerror(errno));
  r->fd = -1;
}

/* ecc-<name>.region or ecc-<name>.region.tmp.<pid>.<n> */
static int is_region_entry(const char *name)
{
  if (strncmp(name, FILE_PREFIX, strlen(FILE_PREFIX)) != 0)
    return 0;
  const char *s = name + strlen(FILE_PREFIX);
  size_t n = strspn(s, NAME_CHARS);
  if (n == 0)
    return 0;
  s += n;
  if (strcmp(s, FILE_SUFFIX) == 0)
    return 1;
  if (strncmp(s, TMP_INFIX, strlen(TMP_INFIX)) != 0)
    return 0;
  s += strlen(TMP_INFIX);
  return s[0] != '\0' && strspn(s, "0123456789.") == strlen(s);
}

/* Removes `name` if it is ours and nobody holds it. Returns 1 if removed. */
static int reap_one(int dfd, const char *dir, const char *name, struct ecc_log *log)
{
  int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return 0;
  int removed = 0;
  struct stat st, now;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      flock(fd, LOCK_EX | LOCK_NB) == 0) {
    /* With the exclusive lock held no one can join; the name must still be
     * this file, or we would remove a newcomer's. */
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st.st_dev &&
        now.st_ino == st.st_ino) {
      if (unlinkat(dfd, name, 0) == 0) {
        removed = 1;
        log_msg(log, ECC_LOG_INFO, "removed orphaned region %s/%s (no process held it)", dir,
                name);
      } else {
        log_msg(log, ECC_LOG_WARN, "cannot remove orphaned region %s/%s: %s", dir, name,
                strerror(errno));
      }
    }
  }
  close(fd);
  return removed;
}

int region_reap_orphans(const char *dir, struct ecc_log *log)
{
  if (dir == NULL)
    return 0;
  DIR *d = opendir(dir);
  if (d == NULL) {
    log_msg(log, ECC_LOG_WARN, "cannot scan %s for orphaned regions: %s", dir,
            strerror(errno));
    return 0;
  }
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (is_region_entry(e->d_name))
      count += reap_one(dirfd(d), dir, e->d_name, log);
  }
  closedir(d);
  return count;
}
