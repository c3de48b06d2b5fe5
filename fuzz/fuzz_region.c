/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_region.c - libFuzzer target: the input is a region file as another
 * process (or an attacker) could leave it, and the configuration a joiner
 * brings; region_open joins it (or, in mode auto, may reap and replace it).
 *
 * Input: one byte of flags, the joiner's block size and count (two bytes
 * each), the file's length past the header page (two bytes), then the
 * header page itself (missing bytes are zero).
 * Invariants besides "no crash" (a SIGBUS from a sparse or short file is a
 * crash): the status is of the closed set; a join succeeds only on a header
 * that is valid, complete and of the joiner's layout, and then maps all of
 * it; a refused join leaves the file exactly as it was (name, content,
 * size) and no descriptor behind; nothing but the region is ever left in
 * the directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "core/config/config.h"
#include "core/region/region.h"

#define MAX_TAIL 65536u

enum {
  F_SPARSE = 1u << 0,  /* the file's blocks are not allocated */
  F_AUTO = 1u << 1,    /* the joiner opens with mode auto (else join) */
  F_REAP = 1u << 2,    /* ... with reap_orphans */
  F_HOLD = 1u << 3,    /* another descriptor holds a shared lock, as a live peer would */
  F_GROUP_W = 1u << 4, /* the file is group-writable */
};

static char dir[64];
static char path[128];
static uint8_t page[REGION_HEADER_BYTES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  snprintf(dir, sizeof(dir), "/dev/shm/eccfuzz-region-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  snprintf(path, sizeof(path), "%s/ecc-fz.region", dir);
  return 0;
}

static uint16_t u16(const uint8_t *p)
{
  return (uint16_t)(p[0] | p[1] << 8);
}

static int count_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    abort();
  int n = 0;
  while (readdir(d) != NULL)
    n++;
  closedir(d);
  return n;
}

/* Writes the file; returns its descriptor (kept for F_HOLD) or -1. */
static int write_region(unsigned flags, uint64_t tail)
{
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    abort();
  off_t size = (off_t)(REGION_HEADER_BYTES + tail);
  if (flags & F_SPARSE) {
    if (ftruncate(fd, size) != 0)
      abort();
  } else if (posix_fallocate(fd, 0, size) != 0) {
    abort();
  }
  if (pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page))
    abort();
  if (fchmod(fd, (flags & F_GROUP_W) ? 0620 : 0600) != 0)
    abort();
  return fd;
}

/* What a successful join must have found in the header. */
static int header_allows(const struct region_header *h, const struct region_params *p,
                         uint64_t file_size, unsigned flags)
{
  return memcmp(h->magic, REGION_MAGIC, sizeof(h->magic)) == 0 &&
         h->layout_version == REGION_LAYOUT_VERSION && h->header_bytes == REGION_HEADER_BYTES &&
         h->dir_bytes == 0 && h->block_size == p->block_size && h->num_blocks == p->num_blocks &&
         h->file_bytes == REGION_HEADER_BYTES + p->block_size * p->num_blocks &&
         file_size >= h->file_bytes && !(flags & (F_SPARSE | F_GROUP_W));
}

static void expect_unchanged(const struct stat *before)
{
  struct stat now;
  if (lstat(path, &now) != 0 || now.st_ino != before->st_ino || now.st_size != before->st_size)
    abort(); /* a refused join replaced, removed or resized the file */
  uint8_t got[REGION_HEADER_BYTES];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || pread(fd, got, sizeof(got), 0) != (ssize_t)sizeof(got) ||
      memcmp(got, page, sizeof(got)) != 0)
    abort(); /* a refused join wrote to the file */
  close(fd);
}

static void expect_only_region_left(void)
{
  DIR *d = opendir(dir);
  if (d == NULL)
    abort();
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
        strcmp(e->d_name, "ecc-fz.region") != 0)
      abort(); /* a temporary file or something else was left */
  closedir(d);
}

static void judge_join(int rc, const struct region *r, const struct region_params *p,
                       const struct stat *before, unsigned flags)
{
  const struct region_header *h = (const struct region_header *)page;
  if (rc == ECC_OK && r->creator)
    return; /* mode auto reaped an orphan and built afresh: nothing to compare */
  if (rc == ECC_OK) {
    if (!header_allows(h, p, (uint64_t)before->st_size, flags) || r->map == NULL ||
        r->map_bytes != h->file_bytes)
      abort();                                        /* joined a file it should have refused */
    volatile uint8_t last = r->map[r->map_bytes - 1]; /* every page is there */
    (void)last;
    return;
  }
  /* With reap_orphans an unheld file is an orphan, and removing it is right. */
  if ((flags & F_HOLD) || !(flags & F_REAP))
    expect_unchanged(before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 7)
    return 0;
  unsigned flags = data[0];
  struct region_params p = {
      .folder = dir,
      .name = "fz",
      .block_size = (uint64_t)u16(data + 1) + 1,
      .num_blocks = (uint64_t)u16(data + 3) % 64 + 1,
      .mode = (flags & F_AUTO) ? REGION_AUTO : REGION_JOIN,
      .join_timeout_ms = 0,
      .reap_orphans = (flags & F_REAP) != 0,
      .any_filesystem = 0,
  };
  uint64_t tail = u16(data + 5) % (MAX_TAIL + 1);
  memset(page, 0, sizeof(page));
  memcpy(page, data + 7, size - 7 < sizeof(page) ? size - 7 : sizeof(page));

  int peer = write_region(flags, tail);
  if (flags & F_HOLD)
    (void)flock(peer, LOCK_SH);
  struct stat before;
  if (fstat(peer, &before) != 0)
    abort();
  int fds = count_fds();

  struct ecc_log log;
  log_init(&log, NULL);
  struct region r;
  int rc = region_open(&p, &r, &log);
  if (rc > ECC_OK || rc < ECC_ERR_UNSUPPORTED)
    abort();
  if (rc != ECC_OK && count_fds() != fds)
    abort(); /* a refused open left a descriptor */
  judge_join(rc, &r, &p, &before, flags);
  region_close(&r, &log);
  log_destroy(&log);
  close(peer);
  expect_only_region_left();
  unlink(path);
  return 0;
}
