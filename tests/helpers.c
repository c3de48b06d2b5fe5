/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helpers.c - shared test plumbing (see helpers.h).
 */
#include "tests/helpers.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A tag drawn once per process: other sessions may share /tmp and /dev/shm
 * from another pid namespace, where the same pid means another process. */
static unsigned process_tag(void)
{
  static unsigned tag;
  static pid_t for_pid;
  if (for_pid != getpid()) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    tag = (unsigned)((uint64_t)ts.tv_nsec * 2654435761u ^ (uint64_t)getpid() << 16) & 0xffffff;
    for_pid = getpid();
  }
  return tag;
}

const char *th_region_name(void)
{
  static char names[64][48];
  static unsigned counter;
  unsigned i = counter++ % 64;
  snprintf(names[i], sizeof(names[i]), "t%ld-%06x-%u", (long)getpid(), process_tag(), counter);
  return names[i];
}

extern char **environ;

/* The shim refuses INI and plugin files that their group or others may
 * write, so the files tests make must not depend on the caller's umask. */
__attribute__((constructor)) static void usual_umask(void)
{
  umask(022);
}

static char temp_paths[64][128];

/* Temporary files go when the test process exits. */
__attribute__((destructor)) static void remove_temp_files(void)
{
  for (unsigned i = 0; i < 64; i++)
    if (temp_paths[i][0] != '\0')
      unlink(temp_paths[i]);
}

const char *th_write_temp(const char *text, const char *suffix)
{
  char(*paths)[128] = temp_paths;
  static unsigned counter;
  unsigned i = counter++ % 64;
  if (paths[i][0] != '\0')
    unlink(paths[i]); /* the slot's previous file */
  int n =
      snprintf(paths[i], sizeof(paths[i]), "/tmp/ecc-test-%ld-XXXXXX%s", (long)getpid(), suffix);
  cr_assert(n > 0 && (size_t)n < sizeof(paths[i]), "suffix %s is too long", suffix);
  int fd = mkstemps(paths[i], (int)strlen(suffix));
  cr_assert_geq(fd, 0, "cannot create %s", paths[i]);
  size_t len = strlen(text);
  cr_assert_eq(write(fd, text, len), (ssize_t)len, "cannot write %s", paths[i]);
  close(fd);
  return paths[i];
}

const char *th_ini_text(const char *fmt, ...)
{
  char text[8192];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  cr_assert(n >= 0 && (size_t)n < sizeof(text), "INI text of %d bytes is too long", n);
  return th_write_temp(text, ".ini");
}

const char *th_fixture(const char *name)
{
  static char paths[8][PATH_MAX];
  static unsigned next;
  char *p = paths[next++ % 8];
  snprintf(p, PATH_MAX, "%s/libecc-%s.so", ECC_FIXTURE_DIR, name);
  return p;
}

const char *th_fixture_ini(const char *name, const char *extra)
{
  return th_ini_text("[plugin]\npath = %s\n%s", th_fixture(name), extra != NULL ? extra : "");
}

const char *th_trace_path(void)
{
  static char paths[8][128];
  static unsigned next;
  char *p = paths[next++ % 8];
  snprintf(p, 128, "/tmp/ecc-trace-%ld-%06x-%u", (long)getpid(), process_tag(), next);
  unlink(p);
  return p;
}

const char *th_read_file(const char *path)
{
  static char buf[1 << 16];
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return NULL;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

const char *th_path_in(const char *dir, const char *rel)
{
  static char paths[8][256];
  static unsigned next;
  char *p = paths[next++ % 8];
  int n = snprintf(p, 256, "%s/%s", dir, rel);
  cr_assert(n > 0 && n < 256, "path %s/%s is too long", dir, rel);
  return p;
}

void th_make_dir(const char *path, mode_t mode)
{
  cr_assert_eq(mkdir(path, 0700), 0, "mkdir %s: %s", path, strerror(errno));
  cr_assert_eq(chmod(path, mode), 0);
}

void th_copy_file(const char *from, const char *to, mode_t mode)
{
  int in = open(from, O_RDONLY | O_CLOEXEC);
  cr_assert_geq(in, 0, "%s: %s", from, strerror(errno));
  int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  cr_assert_geq(out, 0, "%s: %s", to, strerror(errno));
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof(buf))) > 0)
    cr_assert_eq(write(out, buf, (size_t)n), n, "write %s: %s", to, strerror(errno));
  cr_assert_eq(n, 0, "read %s: %s", from, strerror(errno));
  cr_assert_eq(fchmod(out, mode), 0);
  close(in);
  cr_assert_eq(close(out), 0);
}

bool th_mapped_under(const char *dir)
{
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  char line[1024];
  bool found = false;
  while (fgets(line, sizeof(line), f) != NULL)
    if (strstr(line, dir) != NULL)
      found = true;
  fclose(f);
  return found;
}

char th_captured[16384];

void th_capture(void *user, int level, const char *msg)
{
  (void)user;
  size_t used = strlen(th_captured);
  snprintf(th_captured + used, sizeof(th_captured) - used, "[%d] %s\n", level, msg);
}

const ecc_host_services_v1_t *th_capturing_host(void)
{
  static const ecc_host_services_v1_t host = {
      .struct_size = sizeof(ecc_host_services_v1_t),
      .log_level = ECC_LOG_DEBUG,
      .log = th_capture,
      .user = NULL,
  };
  return &host;
}

const char *th_ini_at(const char *dir, const char *role, const char *region, uint64_t block_size,
                      uint64_t num_blocks, const char *region_extra, const char *extra)
{
  char dir_line[256] = "";
  if (dir != NULL)
    snprintf(dir_line, sizeof(dir_line), "dir = %s\n", dir);
  char text[4096];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\nlog_level = error\n\n"
           "[connector]\nrole = %s\n\n"
           "[region]\n%sname = %s\nblock_size = %llu\nsize = %llu\n%s\n"
           "[engine]\ntype = host\n%s",
           ECC_PLUGIN_PATH, role, dir_line, region, (unsigned long long)block_size,
           (unsigned long long)(block_size * num_blocks), region_extra ? region_extra : "",
           extra ? extra : "");
  return th_write_temp(text, ".ini");
}

const char *th_ini(const char *role, const char *region, uint64_t block_size, uint64_t num_blocks,
                   const char *extra)
{
  return th_ini_at(NULL, role, region, block_size, num_blocks, NULL, extra);
}

const char *th_region_path(const char *dir, const char *name)
{
  static char paths[8][256];
  static unsigned n;
  unsigned i = n++ % 8;
  snprintf(paths[i], sizeof(paths[i]), "%s/ecc-%s.region", dir, name);
  return paths[i];
}

const char *th_default_dir(void)
{
  static char dir[64];
  snprintf(dir, sizeof(dir), "/dev/shm/ecc-%u", (unsigned)geteuid());
  return dir;
}

ecc_connector_t *th_open(const char *role, const char *region, uint64_t block_size,
                         uint64_t num_blocks, const char *extra)
{
  char err[512] = "";
  ecc_connector_t *c = NULL;
  const char *ini = th_ini(role, region, block_size, num_blocks, extra);
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s) failed: %d %s", ini, rc, err);
  cr_assert_not_null(c);
  return c;
}

ecc_connector_t *th_open_as(const char *ini, const char *role)
{
  ecc_kv_t kv = {"connector.role", role};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, &o, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s) as %s: %d %s", ini, role, rc, err);
  return c;
}

ecc_stats_t th_stats(ecc_connector_t *c)
{
  ecc_stats_t s = {.struct_size = sizeof(s)};
  cr_assert_eq(ecc_get_stats(c, &s), ECC_OK);
  return s;
}

ecc_info_t th_describe(ecc_connector_t *c)
{
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  return info;
}

const ecc_plugin_v1_t *th_raw_table(void **lib)
{
  *lib = dlopen(ECC_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(*lib, "%s", dlerror());
  const ecc_plugin_v1_t *t = dlsym(*lib, ECC_PLUGIN_V1_SYMBOL);
  cr_assert_not_null(t);
  return t;
}

uint64_t th_now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

size_t th_poll_until(ecc_connector_t *c, ecc_completion_t *out, size_t want, int timeout_ms)
{
  size_t got = 0;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (got < want) {
    size_t n = 0;
    int rc = ecc_poll(c, out + got, want - got, &n);
    cr_assert_eq(rc, ECC_OK, "poll failed: %d", rc);
    got += n;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
    if (ms > timeout_ms)
      break;
    if (n == 0)
      usleep(100);
  }
  return got;
}

pid_t th_spawn_self(const char *role, const char *ini, int fd0, int fd1)
{
  static char self[512], env_role[96], env_ini[320], env_fds[64];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  cr_assert_gt(len, 0);
  self[len] = '\0';
  snprintf(env_role, sizeof(env_role), "ECC_TEST_CHILD=%s", role);
  snprintf(env_ini, sizeof(env_ini), "ECC_TEST_INI=%s", ini);
  snprintf(env_fds, sizeof(env_fds), "ECC_TEST_FDS=%d,%d", fd0, fd1);
  /* Our environment (sanitizer options included) plus the three above,
   * built before fork: the child only adjusts descriptors and execs. */
  size_t n_env = 0;
  while (environ[n_env] != NULL)
    n_env++;
  char **envp = calloc(n_env + 4, sizeof(char *));
  cr_assert_not_null(envp);
  memcpy(envp, environ, n_env * sizeof(char *));
  envp[n_env] = env_role;
  envp[n_env + 1] = env_ini;
  envp[n_env + 2] = env_fds;
  char *argv[] = {self, NULL};
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
    if (fd0 >= 0)
      fcntl(fd0, F_SETFD, 0);
    if (fd1 >= 0)
      fcntl(fd1, F_SETFD, 0);
    execve(self, argv, envp);
    _exit(95);
  }
  free(envp);
  return pid;
}

int th_child_args(const char **role, const char **ini, int *fd0, int *fd1)
{
  const char *fds = getenv("ECC_TEST_FDS");
  *role = getenv("ECC_TEST_CHILD");
  *ini = getenv("ECC_TEST_INI");
  return *role != NULL && *ini != NULL && fds != NULL && sscanf(fds, "%d,%d", fd0, fd1) == 2;
}

int th_count_entries(const char *dir)
{
  DIR *d = opendir(dir);
  if (d == NULL)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

int th_count_fds(void)
{
  return th_count_entries("/proc/self/fd");
}

void th_remove_tree(const char *dir)
{
  DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0)
      continue;
    char sub[512];
    snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
    th_remove_tree(sub);
  }
  closedir(d);
  rmdir(dir);
}

int th_exists(const char *path)
{
  struct stat st;
  return lstat(path, &st) == 0;
}

void th_fill(void *buf, size_t n, uint64_t seed)
{
  uint8_t *p = buf;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)(x | 1); /* never zero */
  }
}

/* Whether a line of /proc/locks ("1: FLOCK  ADVISORY  READ  4242 00:1a:17 0 EOF")
 * names pid as the lock's owner. */
static int locks_of(pid_t pid)
{
  FILE *f = fopen("/proc/locks", "r");
  if (f == NULL)
    return 0;
  char line[256];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    char kind[16], mode[16], access[16];
    long owner = 0;
    if (sscanf(line, "%*d: %15s %15s %15s %ld", kind, mode, access, &owner) == 4 &&
        owner == (long)pid)
      found = 1;
  }
  fclose(f);
  return found;
}

int th_wait_locks_released(pid_t pid, int timeout_ms)
{
  for (int waited = 0; waited <= timeout_ms; waited++) {
    if (!locks_of(pid))
      return 1;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

uint16_t th_free_port(void)
{
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* ---- the watchdog ---- */

static __thread bool on_watchdog_thread;

struct watched_job {
  void (*fn)(void *arg);
  void *arg;
  pthread_mutex_t m;
  pthread_cond_t cv;
  bool done;
};

static void *watched_main(void *p)
{
  struct watched_job *j = p;
  on_watchdog_thread = true;
  j->fn(j->arg);
  pthread_mutex_lock(&j->m);
  j->done = true;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->m);
  return NULL;
}

bool th_on_watchdog_thread(void)
{
  return on_watchdog_thread;
}

void th_within_watchdog(int ms, const char *what, void (*fn)(void *), void *arg)
{
  struct watched_job *j = calloc(1, sizeof(*j));
  cr_assert_not_null(j);
  j->fn = fn;
  j->arg = arg;
  pthread_mutex_init(&j->m, NULL);
  pthread_cond_init(&j->cv, NULL);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, watched_main, j), 0);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&j->m);
  while (!j->done && pthread_cond_timedwait(&j->cv, &j->m, &ts) == 0)
    ;
  bool done = j->done;
  pthread_mutex_unlock(&j->m);
  if (!done)
    cr_assert_fail("%s did not return within %d ms: the log callback's call back into the "
                   "connector deadlocked (a plugin lock was held while the host's callback ran)",
                   what, ms);
  pthread_join(t, NULL);
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->m);
  free(j);
}
