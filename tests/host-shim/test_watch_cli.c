/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_watch_cli.c - eccctl watch run as a user runs it, beside a live
 * region: every field of its JSON lines, keys that are not UTF-8, --count,
 * --from-now, a watch that fell behind told what it lost, and SIGINT,
 * SIGTERM or its reader going away ending it with its connector closed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

TestSuite(watch_cli, .timeout = 120);

#define BS 1024u
#define NB 64u
#define DIR_ON "[directory]\nenabled = true\nevent_slots = 16\n"
#define LINE_MS 5000 /* the longest a line may take to come */

/* ---- eccctl as a child whose stdout is read line by line ---- */

struct child {
  pid_t pid;
  int out;           /* its stdout, read end */
  char buf[1 << 16]; /* read, not yet taken as lines */
  size_t len;
  char err_path[128]; /* its stderr */
};

static void spawn(struct child *ch, const char *const *args)
{
  memset(ch, 0, sizeof(*ch));
  static unsigned counter;
  snprintf(ch->err_path, sizeof(ch->err_path), "/tmp/ecc-watch-%ld-%u.err", (long)getpid(),
           counter++);
  int fds[2];
  /* Close-on-exec: eccctl must hold the write end only (dup2 makes its
   * stdout), or a reader going away would never be an EPIPE to it. */
  cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
  pid_t parent = getpid();
  ch->pid = fork();
  cr_assert_geq(ch->pid, 0, "fork: %s", strerror(errno));
  if (ch->pid == 0) {
    int err = open(ch->err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent || err < 0 ||
        dup2(fds[1], 1) < 0 || dup2(err, 2) < 0)
      _exit(99);
    const char *argv[16] = {ECCCTL_PATH};
    for (int i = 0; args[i] != NULL && i < 14; i++)
      argv[i + 1] = args[i];
    execv(ECCCTL_PATH, (char *const *)argv);
    _exit(98);
  }
  close(fds[1]);
  ch->out = fds[0];
}

/* The next line of its stdout (static storage, newline cut), or NULL at
 * its end or after `ms` without one. */
static const char *next_line(struct child *ch, int ms)
{
  static char line[4096];
  uint64_t deadline = th_now_ns() + (uint64_t)ms * 1000000u;
  for (;;) {
    char *nl = memchr(ch->buf, '\n', ch->len);
    if (nl != NULL) {
      size_t n = (size_t)(nl - ch->buf);
      cr_assert_lt(n, sizeof(line));
      memcpy(line, ch->buf, n);
      line[n] = '\0';
      memmove(ch->buf, nl + 1, ch->len - n - 1);
      ch->len -= n + 1;
      return line;
    }
    uint64_t now = th_now_ns();
    if (now >= deadline)
      return NULL;
    struct pollfd p = {.fd = ch->out, .events = POLLIN};
    int rc = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
    cr_assert_geq(rc, 0, "poll: %s", strerror(errno));
    if (rc == 0)
      continue;
    ssize_t got = read(ch->out, ch->buf + ch->len, sizeof(ch->buf) - ch->len);
    cr_assert_geq(got, 0, "read: %s", strerror(errno));
    if (got == 0)
      return NULL;
    ch->len += (size_t)got;
  }
}

/* Its exit status once it has ended (within LINE_MS), or -1 if a signal
 * ended it. */
static int finish(struct child *ch)
{
  int st = 0;
  pid_t got = 0;
  for (int i = 0; i < LINE_MS / 10 && got == 0; i++) {
    got = waitpid(ch->pid, &st, WNOHANG);
    if (got == 0)
      usleep(10000);
  }
  if (got == 0) {
    kill(ch->pid, SIGKILL);
    waitpid(ch->pid, &st, 0);
    cr_assert_fail("eccctl did not end");
  }
  close(ch->out);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *stderr_of(struct child *ch)
{
  return th_read_file(ch->err_path);
}

/* ---- entries ---- */

static void store(ecc_connector_t *c, const char *key, uint64_t nbytes, uint64_t cost,
                  ecc_tensor_t type)
{
  static uint8_t src[4 * BS];
  cr_assert_leq(nbytes, sizeof(src));
  ecc_reserve_args_t a = {
      .struct_size = sizeof(a), .key = key, .nbytes = nbytes, .cost_us = cost, .type = type};
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_OK, "reserve_ex %s", key);
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, LINE_MS), 1, "no completion for the save of %s", key);
  cr_assert_eq(done.status, ECC_OK);
}

static const ecc_tensor_t untyped = {0};

/* ---- the lines ---- */

/* The number after "\"name\":" in a JSON line, or UINT64_MAX. */
static uint64_t number(const char *line, const char *name)
{
  char at[64];
  snprintf(at, sizeof(at), "\"%s\":", name);
  const char *p = strstr(line, at);
  return p == NULL ? UINT64_MAX : strtoull(p + strlen(at), NULL, 10);
}

/* The string after "\"name\":\"" up to its closing quote (no escapes in
 * the keys used here), in static storage; "" if absent. */
static const char *text(const char *line, const char *name)
{
  static char out[256];
  char at[64];
  snprintf(at, sizeof(at), "\"%s\":\"", name);
  const char *p = strstr(line, at);
  out[0] = '\0';
  if (p == NULL)
    return out;
  p += strlen(at);
  const char *end = strchr(p, '"');
  cr_assert_not_null(end, "unterminated \"%s\" in %s", name, line);
  snprintf(out, sizeof(out), "%.*s", (int)(end - p), p);
  return out;
}

/* "2023-11-14T22:13:20.123456789Z" and what time_ns says, to the second. */
static void expect_time(const char *line)
{
  const char *t = text(line, "time");
  cr_assert_eq(strlen(t), 30, "time '%s'", t);
  cr_expect(t[4] == '-' && t[7] == '-' && t[10] == 'T' && t[13] == ':' && t[16] == ':' &&
                t[19] == '.' && t[29] == 'Z',
            "time '%s' is not RFC 3339 with nanoseconds", t);
  uint64_t ns = number(line, "time_ns");
  char want[16];
  snprintf(want, sizeof(want), "%09llu", (unsigned long long)(ns % 1000000000u));
  cr_expect_eq(strncmp(t + 20, want, 9), 0, "time '%s' and time_ns %llu differ", t,
               (unsigned long long)ns);
  cr_expect_gt(ns, 1500000000ull * 1000000000ull, "time_ns %llu is not a date of this era",
               (unsigned long long)ns);
}

static void expect_event(const char *line, uint64_t seq, const char *kind, const char *key,
                         uint64_t nbytes, uint64_t cost)
{
  cr_assert_not_null(line, "no line for event %llu", (unsigned long long)seq);
  cr_expect_eq(line[0], '{', "%s", line);
  cr_expect_eq(line[strlen(line) - 1], '}', "%s", line);
  cr_expect_eq(number(line, "seq"), seq, "%s", line);
  cr_expect_str_eq(text(line, "kind"), kind, "%s", line);
  cr_expect_str_eq(text(line, "key"), key, "%s", line);
  cr_expect_eq(number(line, "nbytes"), nbytes, "%s", line);
  cr_expect_eq(number(line, "cost_us"), cost, "%s", line);
  const char *inst = text(line, "instance");
  cr_expect_eq(strlen(inst), 16, "instance '%s' in %s", inst, line);
  cr_expect_eq(strspn(inst, "0123456789abcdef"), 16, "instance '%s' is not hex", inst);
  expect_time(line);
}

Test(watch_cli, prints_each_event_as_a_json_line_and_count_ends_it)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "img-1", 3 * BS, 1500, untyped);
  cr_assert_eq(ecc_remove(c, "img-1"), ECC_OK);
  store(c, "img-2", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", "--count", "2", ini, NULL});
  const char *line = next_line(&ch, LINE_MS);
  expect_event(line, 1, "stored", "img-1", 3 * BS, 1500);
  char instance[32];
  snprintf(instance, sizeof(instance), "%s", text(line, "instance"));
  line = next_line(&ch, LINE_MS);
  expect_event(line, 2, "removed", "img-1", 3 * BS, 1500);
  cr_expect_str_eq(text(line, "instance"), instance, "one region, one instance");
  cr_expect_null(next_line(&ch, LINE_MS), "a line past --count 2");
  cr_assert_eq(finish(&ch), 0, "stderr: %s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* Stored again and again until one is seen: whichever comes first, none of
 * those before the watch started is printed. */
Test(watch_cli, from_now_prints_only_what_comes_after)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "old-1", BS, 0, untyped);
  store(c, "old-2", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", "--from-now", "--count", "1", ini, NULL});
  const char *line = NULL;
  for (int i = 0; i < 50 && line == NULL; i++) {
    char key[32];
    snprintf(key, sizeof(key), "new-%d", i);
    store(c, key, BS, 0, untyped);
    line = next_line(&ch, 100);
  }
  cr_assert_not_null(line, "no event printed; stderr: %s", stderr_of(&ch));
  cr_expect_eq(strncmp(text(line, "key"), "new-", 4), 0, "printed %s", line);
  cr_expect_gt(number(line, "seq"), 2, "%s", line);
  cr_assert_eq(finish(&ch), 0, "stderr: %s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* Stopped while 24 events go through a ring of 16, the watch learns on
 * resuming that the 8 oldest of them are gone, then reads the rest. */
Test(watch_cli, a_watch_that_fell_behind_says_how_many_it_lost)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "first", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", ini, NULL});
  expect_event(next_line(&ch, LINE_MS), 1, "stored", "first", BS, 0);
  cr_assert_eq(kill(ch.pid, SIGSTOP), 0);
  for (int i = 0; i < 12; i++) {
    char key[32];
    snprintf(key, sizeof(key), "k%02d", i);
    store(c, key, BS, (uint64_t)i, untyped);
    cr_assert_eq(ecc_remove(c, key), ECC_OK);
  }
  cr_assert_eq(kill(ch.pid, SIGCONT), 0);
  const char *line = next_line(&ch, LINE_MS);
  cr_assert_not_null(line, "nothing after SIGCONT; stderr: %s", stderr_of(&ch));
  cr_expect_str_eq(line, "{\"lost\":8,\"from_seq\":2}");
  /* Events 2..9 are lost: 10 is k04's store, then every one to 25. */
  for (uint64_t seq = 10; seq <= 25; seq++) {
    char key[32];
    int i = (int)(seq - 2) / 2;
    snprintf(key, sizeof(key), "k%02d", i);
    expect_event(next_line(&ch, LINE_MS), seq, seq % 2 == 0 ? "stored" : "removed", key, BS,
                 (uint64_t)i);
  }
  cr_assert_eq(kill(ch.pid, SIGINT), 0);
  cr_assert_eq(finish(&ch), 0, "stderr: %s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

static void ended_by(int sig)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "one", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", ini, NULL});
  expect_event(next_line(&ch, LINE_MS), 1, "stored", "one", BS, 0);
  cr_assert_eq(kill(ch.pid, sig), 0);
  cr_assert_eq(finish(&ch), 0, "ended by signal %d: stderr: %s", sig, stderr_of(&ch));
  cr_expect_str_empty(stderr_of(&ch));
  /* It closed its connector: this one is the region's only holder again. */
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(!th_exists(th_region_path(th_default_dir(), region)),
            "the region outlived its last holder");
}

Test(watch_cli, sigint_ends_it_cleanly)
{
  ended_by(SIGINT);
}

Test(watch_cli, sigterm_ends_it_cleanly)
{
  ended_by(SIGTERM);
}

Test(watch_cli, bad_command_lines_and_regions_are_refused)
{
  struct child ch;
  spawn(&ch, (const char *[]){"watch", NULL});
  cr_expect_eq(finish(&ch), 2);
  cr_expect_not_null(strstr(stderr_of(&ch), "missing CONFIG"), "%s", stderr_of(&ch));
  const char *region = th_region_name();
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  spawn(&ch, (const char *[]){"watch", "--count", "0", ini, NULL});
  cr_expect_eq(finish(&ch), 2);
  cr_expect_not_null(strstr(stderr_of(&ch), "--count"), "%s", stderr_of(&ch));
  spawn(&ch, (const char *[]){"watch", ini, NULL});
  cr_expect_eq(finish(&ch), 1, "a watch of an absent region");
  cr_expect_not_null(strstr(stderr_of(&ch), region), "%s", stderr_of(&ch));
  cr_expect(!th_exists(th_region_path(th_default_dir(), region)), "watch created the region");
  ecc_connector_t *c = th_open("both", region, BS, NB, NULL);
  const char *plain = th_ini("both", region, BS, NB, NULL);
  spawn(&ch, (const char *[]){"watch", plain, NULL});
  cr_expect_eq(finish(&ch), 1);
  cr_expect_not_null(strstr(stderr_of(&ch), "has no directory"), "%s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* A key is any bytes: UTF-8 is kept, quotes and control bytes escaped, and
 * a byte that is no UTF-8 written \u00XX, so that the line stays JSON. */
Test(watch_cli, a_key_that_is_not_utf8_still_makes_a_json_line)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "caf\xc3\xa9 \"q\"\t\xff\xc3", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", "--count", "1", ini, NULL});
  const char *line = next_line(&ch, LINE_MS);
  cr_assert_not_null(line, "stderr: %s", stderr_of(&ch));
  cr_expect_not_null(strstr(line, "\"key\":\"caf\xc3\xa9 \\\"q\\\"\\u0009\\u00ff\\u00c3\","), "%s",
                     line);
  cr_assert_eq(finish(&ch), 0, "stderr: %s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* The reader of its lines gone (a pipe into head), the next line it
 * writes ends it: status 0, its connector closed, not killed by SIGPIPE. */
Test(watch_cli, its_reader_going_away_ends_it_cleanly)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, BS, NB, DIR_ON);
  store(c, "seen", BS, 0, untyped);
  const char *ini = th_ini("both", region, BS, NB, DIR_ON);
  struct child ch;
  spawn(&ch, (const char *[]){"watch", ini, NULL});
  expect_event(next_line(&ch, LINE_MS), 1, "stored", "seen", BS, 0);
  cr_assert_eq(close(ch.out), 0);
  ch.out = -1;
  int st = 0;
  pid_t got = 0;
  for (int i = 0; i < 100 && got == 0; i++) {
    char key[32];
    snprintf(key, sizeof(key), "unseen-%d", i);
    store(c, key, BS, 0, untyped);
    cr_assert_eq(ecc_remove(c, key), ECC_OK);
    usleep(50000);
    got = waitpid(ch.pid, &st, WNOHANG);
  }
  cr_assert_eq(got, ch.pid, "eccctl watch went on writing into a closed pipe");
  cr_assert(WIFEXITED(st), "ended by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  cr_assert_eq(WEXITSTATUS(st), 0, "stderr: %s", stderr_of(&ch));
  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert(!th_exists(th_region_path(th_default_dir(), region)),
            "the region outlived its last holder");
}
