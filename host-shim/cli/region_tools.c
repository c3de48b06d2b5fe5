/* SPDX-License-Identifier: Apache-2.0 */
/*
 * region_tools.c - eccctl rm: deletes the region file an INI file names, on
 * purpose (a kept region, region.persist, is never removed otherwise),
 * refusing while live processes hold it unless --force.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "ecc_host.h"
#include "host-shim/cli/cli.h"

#define MSG_CAP 1024
#define PATH_CAP 512
/* Holders named in a refusal; more are counted. */
#define PIDS_SHOWN 8

struct rm_args {
  bool force;
  const char *config;
};

/* "[--force] CONFIG"; returns CLI_OK or CLI_USAGE, or -1 for --help. */
static int parse_rm(int argc, char **argv, struct rm_args *a)
{
  static const struct option long_opts[] = {
      {"force", no_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    if (ch == 'f') {
      a->force = true;
      continue;
    }
    return cli_usage_error(argv[0], "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error(argv[0], "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind + 1]);
  a->config = argv[optind];
  return CLI_OK;
}

/* The region file in the plugin's one-line summary of the configuration
 * ("..., region /dev/shm/ecc-1000/ecc-demo.region: ..."): the INI's folder
 * and name as the plugin resolves them, defaults and overrides included,
 * without opening anything. 0, or -1 when the summary names none. */
static int path_in_summary(const char *summary, char *path, size_t cap)
{
  static const char suffix[] = ".region:";
  const char *start = strstr(summary, "region /");
  if (start == NULL)
    return -1;
  start += strlen("region ");
  const char *end = strstr(start, suffix);
  if (end == NULL)
    return -1;
  size_t len = (size_t)(end - start) + strlen(".region");
  if (len >= cap)
    return -1;
  memcpy(path, start, len);
  path[len] = '\0';
  const char *base = strrchr(path, '/');
  return strncmp(base + 1, "ecc-", 4) == 0 ? 0 : -1;
}

/* Validates CONFIG in a check process (nothing is created) and finds its
 * region's path there. */
static int region_path(const char *config, char *path, size_t cap)
{
  ecc_open_options_t o = {.struct_size = sizeof(o), .log_level = ECC_LOG_ERROR};
  char summary[MSG_CAP] = "";
  int rc = ecc_check(config, &o, NULL, summary, sizeof(summary));
  if (rc != ECC_OK) {
    cli_config_error("rm", config, summary, rc);
    return CLI_FAIL;
  }
  if (path_in_summary(summary, path, cap) != 0) {
    fprintf(stderr,
            "eccctl rm: %s: its plugin names no region file in its summary ('%s'), so there "
            "is nothing eccctl can delete for it\n",
            config, summary);
    return CLI_FAIL;
  }
  return CLI_OK;
}

/* The region file, opened without following a link, checked to be a
 * regular file of this user. -1 after saying why. */
static int open_region_file(const char *path, struct stat *st)
{
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    fprintf(stderr, "eccctl rm: no region at %s: nothing to delete\n", path);
    return -1;
  }
  if (fd < 0) {
    fprintf(stderr, "eccctl rm: cannot open region %s: %s%s\n", path, strerror(errno),
            errno == ELOOP ? " (a symbolic link: not followed, not deleted)" : "");
    return -1;
  }
  const char *wrong = NULL;
  if (fstat(fd, st) != 0)
    wrong = strerror(errno);
  else if (!S_ISREG(st->st_mode))
    wrong = "it is not a regular file";
  else if (st->st_uid != geteuid())
    wrong = "it belongs to another user";
  if (wrong != NULL) {
    fprintf(stderr, "eccctl rm: not deleting %s: %s\n", path, wrong);
    close(fd);
    return -1;
  }
  return fd;
}

/* The pids /proc/locks names as holding a lock on the file (at most cap of
 * them in pids); returns how many it names, 0 when it cannot be read. */
static size_t holders_of(const struct stat *st, long *pids, size_t cap)
{
  FILE *f = fopen("/proc/locks", "re");
  if (f == NULL)
    return 0;
  char line[256];
  size_t n = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    /* "1: FLOCK  ADVISORY  READ  4242 00:1a:17 0 EOF"; a waiter's line has
     * "->" after the number and holds nothing. */
    char kind[16], mode[16], access[16];
    unsigned maj, min;
    unsigned long ino;
    long pid;
    if (strstr(line, "->") != NULL || sscanf(line, "%*d: %15s %15s %15s %ld %x:%x:%lu", kind, mode,
                                             access, &pid, &maj, &min, &ino) != 7)
      continue;
    if (maj == major(st->st_dev) && min == minor(st->st_dev) && ino == (unsigned long)st->st_ino) {
      if (n < cap)
        pids[n] = pid;
      n++;
    }
  }
  fclose(f);
  return n;
}

/* " (pids 1, 2 and 3 more)" into buf, or "" when none are known. */
static void name_holders(const struct stat *st, char *buf, size_t cap)
{
  long pids[PIDS_SHOWN];
  size_t n = holders_of(st, pids, PIDS_SHOWN);
  buf[0] = '\0';
  if (n == 0)
    return;
  size_t len = (size_t)snprintf(buf, cap, " (pid%s", n > 1 ? "s" : "");
  for (size_t i = 0; i < n && i < PIDS_SHOWN && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s %ld", i > 0 ? "," : "", pids[i]);
  if (n > PIDS_SHOWN && len < cap)
    len += (size_t)snprintf(buf + len, cap - len, " and %zu more", n - PIDS_SHOWN);
  if (len < cap)
    snprintf(buf + len, cap - len, ")");
}

/* Whether no process holds the file: with the exclusive lock taken, none
 * can join it before it is gone. -1 after saying why it cannot be told. */
static int lock_alone(int fd, const char *path)
{
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return 1;
    if (errno == EWOULDBLOCK)
      return 0;
    if (errno != EINTR) {
      fprintf(stderr, "eccctl rm: cannot lock region %s: %s\n", path, strerror(errno));
      return -1;
    }
  }
}

/* Unlinks path if it still names the file opened as st. */
static int unlink_same(const char *path, const struct stat *st)
{
  struct stat now;
  if (lstat(path, &now) != 0 || now.st_dev != st->st_dev || now.st_ino != st->st_ino) {
    fprintf(stderr,
            "eccctl rm: %s changed while it was being deleted (made again by another "
            "process?); nothing deleted, run eccctl rm again\n",
            path);
    return CLI_FAIL;
  }
  if (unlink(path) != 0) {
    fprintf(stderr, "eccctl rm: cannot delete region %s: %s\n", path, strerror(errno));
    return CLI_FAIL;
  }
  return CLI_OK;
}

static int remove_region(const char *path, bool force)
{
  struct stat st;
  int fd = open_region_file(path, &st);
  if (fd < 0)
    return CLI_FAIL;
  char who[160] = "";
  int alone = lock_alone(fd, path);
  if (alone == 0)
    name_holders(&st, who, sizeof(who));
  int rc = CLI_FAIL;
  if (alone == 0 && !force)
    fprintf(stderr,
            "eccctl rm: region %s is in use by live processes%s; not deleting it. Close them "
            "first, or pass --force: they keep what they mapped, but their next calls fail "
            "with ECC_ERR_REGION\n",
            path, who);
  else if (alone >= 0)
    rc = unlink_same(path, &st);
  if (rc == CLI_OK)
    printf("removed region %s (%lld bytes)%s%s\n", path, (long long)st.st_size,
           alone ? "" : "; held by live processes", alone ? "" : who);
  close(fd);
  return rc;
}

int cmd_rm(int argc, char **argv)
{
  struct rm_args a = {0};
  int rc = parse_rm(argc, argv, &a);
  if (rc < 0) {
    help_rm(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;
  char path[PATH_CAP];
  rc = region_path(a.config, path, sizeof(path));
  if (rc != CLI_OK)
    return rc;
  return remove_region(path, a.force);
}

void help_rm(FILE *out)
{
  fprintf(out, "usage: eccctl rm [--force] CONFIG\n"
               "\n"
               "Delete the region file of the INI file CONFIG, on purpose: a kept region\n"
               "(region.persist = true), which no process removes when it closes, goes\n"
               "with its entries. Validates CONFIG first (in a separate process) and\n"
               "prints what it deleted. Refuses, naming their pids, while live processes\n"
               "hold the region; fails when there is no region.\n"
               "\n"
               "options:\n"
               "  --force   delete it although processes hold it: they keep what they\n"
               "            mapped, and their next calls fail with ECC_ERR_REGION\n"
               "  -h, --help  this text\n");
}
