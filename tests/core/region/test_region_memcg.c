/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_region_memcg.c - the builder's check of its memory cgroup: the limit
 * read from fake cgroup trees (v1, v2, hybrid, nested, containers), and a
 * real child cgroup too small for the region where the machine allows one.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "core/region/region.h"
#include "tests/core/unit_helpers.h"
#include "tests/helpers.h"

static char root[64];

static void setup(void)
{
  snprintf(root, sizeof(root), "/tmp/eccmemcg-XXXXXX");
  cr_assert_not_null(mkdtemp(root), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  th_remove_tree(root);
}

TestSuite(memcg, .init = setup, .fini = teardown, .timeout = 60);

/* Writes `text` to root/rel, making the directories on the way. */
static void put(const char *rel, const char *text)
{
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *s = strchr(path + strlen(root) + 1, '/'); s != NULL; s = strchr(s + 1, '/')) {
    *s = '\0';
    cr_assert(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
    *s = '/';
  }
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

static struct region_memcg room_of(const char *proc_cgroup_text, int want_rc)
{
  put("proc-cgroup", proc_cgroup_text);
  char proc[128], fs[128];
  snprintf(proc, sizeof(proc), "%s/proc-cgroup", root);
  snprintf(fs, sizeof(fs), "%s/fs", root);
  struct region_memcg m;
  cr_assert_eq(region_memcg_room(proc, fs, &m), want_rc);
  return m;
}

static const char *in_fs(const char *rel)
{
  static char path[512];
  snprintf(path, sizeof(path), "%s/fs%s", root, rel);
  return path;
}

Test(memcg, v2_takes_the_tightest_limit_on_the_way_to_the_root)
{
  put("fs/cgroup.controllers", "cpu memory\n");
  put("fs/a/memory.max", "1073741824\n"); /* 1 GiB, 900 MiB used: 124 MiB left */
  put("fs/a/memory.current", "943718400\n");
  put("fs/a/b/memory.max", "max\n"); /* no limit of its own */
  put("fs/a/b/memory.current", "943718400\n");
  put("fs/a/b/c/memory.max", "536870912\n"); /* 512 MiB, 100 MiB used: 412 left */
  put("fs/a/b/c/memory.current", "104857600\n");
  struct region_memcg m = room_of("0::/a/b/c\n", 0);
  cr_assert(m.limited);
  cr_expect_eq(m.version, 2);
  cr_expect_eq(m.limit, 1073741824ull);
  cr_expect_eq(m.used, 943718400ull);
  cr_expect_eq(m.room, 1073741824ull - 943718400ull);
  cr_expect_str_eq(m.where, in_fs("/a"));
}

Test(memcg, page_cache_counts_as_room_and_tmpfs_pages_do_not)
{
  put("fs/cgroup.controllers", "memory\n");
  put("fs/job/memory.max", "1000000\n");
  put("fs/job/memory.current", "900000\n");
  put("fs/job/memory.stat", "anon 100000\nfile 800000\nshmem 300000\ninactive_file 400000\n"
                            "active_file 100000\nunevictable 0\n");
  struct region_memcg m = room_of("0::/job\n", 0);
  cr_assert(m.limited);
  cr_expect_eq(m.used, 400000ull, "used %llu", (unsigned long long)m.used);
  cr_expect_eq(m.room, 600000ull);
}

Test(memcg, v1_memory_hierarchy_wins_over_the_unified_one_of_a_hybrid_system)
{
  put("fs/unified/cgroup.controllers", "");
  put("fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
  put("fs/memory/memory.usage_in_bytes", "7000000000\n");
  put("fs/memory/pod/memory.limit_in_bytes", "268435456\n");
  put("fs/memory/pod/memory.usage_in_bytes", "200000000\n");
  put("fs/memory/pod/memory.stat", "cache 1\ninactive_file 5\ntotal_inactive_file 1000000\n"
                                   "total_active_file 0\n");
  struct region_memcg m = room_of("12:pids:/pod\n4:memory:/pod\n2:cpu,cpuacct:/pod\n0::/\n", 0);
  cr_assert(m.limited);
  cr_expect_eq(m.version, 1);
  cr_expect_eq(m.limit, 268435456ull);
  cr_expect_eq(m.used, 199000000ull);
  cr_expect_str_eq(m.where, in_fs("/memory/pod"));
}

/* A container with no cgroup namespace sees its host path in
 * /proc/self/cgroup and its own cgroup mounted as the root. */
Test(memcg, missing_directories_are_passed_over_up_to_the_root)
{
  put("fs/cgroup.controllers", "memory\n");
  put("fs/memory.max", "2147483648\n");
  put("fs/memory.current", "1073741824\n");
  struct region_memcg m = room_of("0::/docker/4f2a/\n", 0);
  cr_assert(m.limited);
  cr_expect_eq(m.room, 1073741824ull);
  cr_expect_str_eq(m.where, in_fs(""));
}

Test(memcg, nothing_limits_or_nothing_is_known)
{
  put("fs/cgroup.controllers", "memory\n");
  put("fs/u/memory.max", "max\n");
  put("fs/u/memory.current", "5\n");
  put("fs/v/memory.max", "12x\n"); /* unreadable: no limit is assumed */
  put("fs/v/memory.current", "5\n");
  cr_expect(!room_of("0::/u\n", 0).limited);
  cr_expect(!room_of("0::/v\n", 0).limited);
  /* v1 without the memory controller, and no cgroup file at all. */
  room_of("3:cpu:/\n", -1);
  struct region_memcg m;
  cr_expect_eq(region_memcg_room("/nonexistent/cgroup", root, &m), -1);
}

/* ---- a real cgroup ------------------------------------------------------- */

#define BS 65536u
#define LIMIT (64ull << 20)

/* A child cgroup of this process's memory cgroup limited to LIMIT, or NULL
 * with the reason in `why`. */
static const char *make_cgroup(char *why, size_t cap)
{
  static char dir[512];
  struct region_memcg m;
  if (geteuid() != 0)
    return snprintf(why, cap, "needs root to make a cgroup"), NULL;
  if (region_memcg_room("/proc/self/cgroup", "/sys/fs/cgroup", &m) != 0)
    return snprintf(why, cap, "no memory cgroup is readable here"), NULL;
  char rel[256] = "/";
  FILE *f = fopen("/proc/self/cgroup", "r");
  char line[512];
  while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    char *p = strrchr(line, ':');
    if (p != NULL && (m.version == 1 ? strstr(line, ":memory:") != NULL : line[0] == '0'))
      snprintf(rel, sizeof(rel), "%s", p + 1);
  }
  if (f != NULL)
    fclose(f);
  const char *base = m.version == 1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
  snprintf(dir, sizeof(dir), "%s%s/ecc-memcg-%d", base, strcmp(rel, "/") == 0 ? "" : rel,
           (int)getpid());
  if (mkdir(dir, 0755) != 0)
    return snprintf(why, cap, "cannot make %s: %s", dir, strerror(errno)), NULL;
  char path[600], text[32];
  snprintf(path, sizeof(path), "%s/%s", dir,
           m.version == 1 ? "memory.limit_in_bytes" : "memory.max");
  snprintf(text, sizeof(text), "%llu", LIMIT);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? write(fd, text, strlen(text)) : -1;
  int e = errno;
  if (fd >= 0)
    close(fd);
  if (n != (ssize_t)strlen(text)) {
    rmdir(dir);
    return snprintf(why, cap, "cannot limit %s (v%d): %s", dir, m.version, strerror(e)), NULL;
  }
  return dir;
}

/* In a forked child moved into `cg`: builds a region of `blocks` and
 * reports the status and the error text through `out`. */
static void build_in(const char *cg, const char *dir, uint64_t blocks, int out)
{
  char path[600], pid[32];
  snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
  snprintf(pid, sizeof(pid), "%d", (int)getpid());
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, pid, strlen(pid)) != (ssize_t)strlen(pid))
    _exit(90);
  close(fd);
  struct ecc_log log;
  log_init(&log, NULL);
  struct region_params p = {.folder = dir,
                            .name = "memcg",
                            .block_size = BS,
                            .num_blocks = blocks,
                            .mode = REGION_AUTO,
                            .join_timeout_ms = 2000,
                            .reap_orphans = 1};
  struct region r;
  int rc = region_open(&p, &r, &log);
  char text[1024];
  snprintf(text, sizeof(text), "%d %s", rc, th_log_last(&log));
  if (rc == ECC_OK)
    region_close(&r, &log);
  if (write(out, text, strlen(text) + 1) < 0)
    _exit(91);
  _exit(0);
}

struct outcome {
  int status; /* waitpid's */
  int rc;
  char text[1024];
};

static struct outcome run_in(const char *cg, const char *dir, uint64_t blocks)
{
  int p[2];
  cr_assert_eq(pipe(p), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(p[0]);
    build_in(cg, dir, blocks, p[1]);
  }
  close(p[1]);
  struct outcome o = {.rc = 1};
  char buf[1100] = "";
  ssize_t got = read(p[0], buf, sizeof(buf) - 1);
  close(p[0]);
  waitpid(pid, &o.status, 0);
  if (got > 0 && sscanf(buf, "%d", &o.rc) == 1)
    snprintf(o.text, sizeof(o.text), "%s", strchr(buf, ' ') != NULL ? strchr(buf, ' ') + 1 : "");
  return o;
}

Test(memcg, a_cgroup_smaller_than_the_region_is_refused_by_name_and_leaves_nothing)
{
  char why[600];
  const char *cg = make_cgroup(why, sizeof(why));
  if (cg == NULL) {
    teardown();
    cr_skip_test("no child memory cgroup here: %s", why);
  }
  char dir[64];
  snprintf(dir, sizeof(dir), "/dev/shm/eccmemcg-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  /* 128 MiB of region in a 64 MiB cgroup, then 16 MiB, which fits. */
  struct outcome big = run_in(cg, dir, (128ull << 20) / BS);
  int left = th_count_entries(dir);
  struct outcome small = run_in(cg, dir, (16ull << 20) / BS);
  int left_after = th_count_entries(dir);
  rmdir(cg);
  th_remove_tree(dir);
  cr_assert(WIFEXITED(big.status) && WEXITSTATUS(big.status) == 0,
            "the builder did not return from region_open (status %#x: %s)", big.status,
            WIFSIGNALED(big.status) ? strsignal(WTERMSIG(big.status)) : "exit");
  cr_expect_eq(big.rc, ECC_ERR_NOMEM, "rc %d: %s", big.rc, big.text);
  cr_expect_not_null(strstr(big.text, "memory cgroup"), "%s", big.text);
  cr_expect_not_null(strstr(big.text, cg), "'%s' does not name the cgroup %s", big.text, cg);
  cr_expect_not_null(strstr(big.text, "limit 67108864"), "%s", big.text);
  cr_expect_not_null(strstr(big.text, "needs 134221824 bytes"), "%s", big.text);
  cr_expect_not_null(strstr(big.text, "lower region.size"), "%s", big.text);
  cr_expect_eq(left, 0, "a refused build left %d files", left);
  cr_expect(WIFEXITED(small.status) && WEXITSTATUS(small.status) == 0, "status %#x", small.status);
  cr_expect_eq(small.rc, ECC_OK, "a region that fits was refused: %s", small.text);
  cr_expect_eq(left_after, 0);
}
