/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region.h - the shared host region: a file on a tmpfs made of one header
 * page, an optional directory area (the cache's index, formatted by its
 * builder) and `num_blocks` blocks of `block_size` bytes, mapped MAP_SHARED.
 *
 * One process at a time builds it under a fixed temporary name and links it
 * into place, so a complete header is all anyone can ever see; joiners
 * check that header against their own configuration. Every process holds a
 * shared flock on the file for as long as it maps it; the last one to close
 * removes it, and a file nobody holds is an orphan. A kept region
 * (region.persist) is the exception: no close and no reaper removes it,
 * and the next open reuses it (a restart when no other process holds it).
 */
#ifndef ECC_REGION_H
#define ECC_REGION_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ecc_log;

/* How an open finds the region: X(constant, value, the INI's word). */
#define REGION_MODE_MAP(X)      \
  X(REGION_AUTO, 0, "auto")     \
  X(REGION_CREATE, 1, "create") \
  X(REGION_JOIN, 2, "join")

enum region_mode {
#define REGION_MODE_ENUM(name, value, text) name = value,
  REGION_MODE_MAP(REGION_MODE_ENUM)
#undef REGION_MODE_ENUM
};

#define REGION_MAGIC "ECCREGN1"
/* 2: the directory area after the header page (dir_bytes, 0 for none).
 * 3: a kept region: version 2 with REGION_FLAG_KEPT in flags (zero in 2).
 * Only kept regions are written as 3, so that a connector reading 2 alone,
 * which would remove the file at its last close, refuses them; every
 * other region is written as 2, as before. */
#define REGION_LAYOUT_VERSION 2
#define REGION_LAYOUT_KEPT 3
/* The region outlives its last holder (region.persist). */
#define REGION_FLAG_KEPT 1u
/* What a process refused for its configuration is told about a kept
 * region, after the reason: nothing removes one but a deliberate delete. */
#define REGION_KEPT_HINT                                                            \
  "; the region was kept (region.persist): delete it with `eccctl rm CONFIG` once " \
  "no process uses it, or configure this connector as it was made"
#define REGION_HEADER_BYTES 4096u
/* The directory area is a whole number of pages, at most this many bytes. */
#define REGION_DIR_MAX_BYTES (1ull << 30)

/* The header page at offset 0 of the file. Fixed-width fields only. */
struct region_header {
  char magic[8];           /* REGION_MAGIC */
  uint32_t layout_version; /* REGION_LAYOUT_VERSION */
  uint32_t header_bytes;   /* REGION_HEADER_BYTES + dir_bytes: blocks start here */
  uint64_t block_size;     /* bytes per block */
  uint64_t num_blocks;     /* blocks in the file */
  uint64_t file_bytes;     /* header_bytes + block_size * num_blocks */
  int64_t creator_pid;     /* process that created the file */
  uint32_t creator_uid;    /* its user */
  uint32_t flags;          /* REGION_FLAG_* (layout 3); 0 in layout 2 */
  int64_t created_unix_ns; /* when it was created */
  uint64_t dir_bytes;      /* bytes of the directory area after the header page; 0: none */
};

struct region_params {
  const char *folder; /* e.g. "/dev/shm"; NULL or "": /dev/shm/ecc-<euid> */
  const char *name;   /* region name: file is <folder>/ecc-<name>.region */
  uint64_t block_size;
  uint64_t num_blocks;
  int mode;                 /* enum region_mode (above) */
  uint32_t join_timeout_ms; /* bound on waiting for a creator */
  bool reap_orphans;        /* unlink unheld region files: this one's at each open, the
                             * folder's once per process */
  bool any_filesystem;      /* folder need not be a tmpfs */
  bool persist;             /* build a kept region; join only a kept one (and only
                             * a region that is not kept without it) */
  uint64_t dir_bytes;       /* directory area (rounded up to pages); 0: none */
  /* Formats the directory area of a region being built, before anyone can
   * see it: ECC_OK, or an error that abandons the build. Required when
   * dir_bytes > 0. */
  int (*dir_format)(void *arg, uint8_t *mem, uint64_t bytes, struct ecc_log *log);
  void *dir_arg;
};

struct region {
  char path[256]; /* the file's path, its folder canonical */
  char file[96];  /* its name within the folder */
  int folder_fd;  /* the folder, checked when opened; -1 when closed */
  int fd;         /* open, shared flock held; -1 when closed */
  dev_t dev;      /* identity of the file we locked */
  ino_t ino;
  uint8_t *map; /* whole file mapping */
  size_t map_bytes;
  uint8_t *dir;       /* the directory area, or NULL */
  uint64_t dir_bytes; /* its bytes (whole pages); 0 without one */
  uint8_t *blocks;    /* map + header_bytes */
  uint64_t block_size;
  uint64_t num_blocks;
  bool creator;      /* this process built the file */
  bool kept;         /* its header says REGION_FLAG_KEPT: close never removes it */
  bool restarted;    /* joined a kept region no other process held at that moment */
  uint64_t identity; /* region_identity */
};

/* What this process's memory cgroup still allows, for the builder: its
 * tmpfs pages are charged to it, and a cgroup that fills up kills. */
struct region_memcg {
  bool limited;         /* a cgroup on the way sets a memory limit */
  int version;          /* 1 or 2: the hierarchy read */
  uint64_t limit;       /* the tightest cgroup's limit, bytes */
  uint64_t used;        /* what it holds that cannot be reclaimed (page cache aside) */
  uint64_t room;        /* limit - used */
  char where[PATH_MAX]; /* that cgroup's directory */
};

/* Reads `proc_cgroup` (the format of /proc/self/cgroup) and the cgroup
 * files under `cgroup_root` (where /sys/fs/cgroup is mounted: v1 with the
 * memory controller at <root>/memory, v2 at <root> or <root>/unified), and
 * walks from the process's cgroup up to the root for the least room left.
 * Returns 0 with *out filled (out->limited false when nothing limits), or
 * -1 when no memory cgroup can be read (then nothing is known). */
int region_memcg_room(const char *proc_cgroup, const char *cgroup_root, struct region_memcg *out);

/* Create or join the region. On failure nothing is left behind: no file we
 * created, no mapping, no open descriptor. A region whose persistence is
 * not p->persist is refused (ECC_ERR_REGION, saying how to agree). Returns
 * ECC_OK or ECC_ERR_*. */
int region_open(const struct region_params *p, struct region *out, struct ecc_log *log);

/* What region_open would refuse before it touches anything, with its texts:
 * the parameters, the folder (ownership; a tmpfs unless any_filesystem)
 * and, for a region that does not exist yet, room for it in the folder's
 * filesystem. Creates, joins and locks nothing. */
int region_precheck(const struct region_params *p, struct ecc_log *log);

/* Whether the mapped file is still the region others share: ECC_ERR_REGION,
 * naming the file, once it was unlinked or replaced (no name left) or
 * truncated below the mapping; ECC_OK otherwise. One fstat. */
int region_check(const struct region *r, struct ecc_log *log);

/* A nonzero number the same in every process that maps this file as it
 * was built, and different for another file or one rebuilt under the same
 * name or inode: taken at open, never read from the mapping again. */
static inline uint64_t region_identity(const struct region *r)
{
  return r->identity;
}

/* Unmap, unlock, close. The last holder in any process (the one that then
 * gets the exclusive lock) also unlinks the file, if the name still names
 * it, unless the region is kept. Errors are logged, never returned. Safe
 * to call twice. */
void region_close(struct region *r, struct ecc_log *log);

/* Unlink orphans (no process holds them) of the region pattern in `folder`,
 * kept regions excepted, and temporary files no builder holds. Returns how
 * many were removed. */
int region_reap_orphans(const char *folder, struct ecc_log *log);

#endif /* ECC_REGION_H */
