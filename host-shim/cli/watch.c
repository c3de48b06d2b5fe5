/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c - eccctl watch: the region's residency events (ecc_events) as
 * one JSON object per line, from the oldest the ring keeps or from now,
 * until --count events were printed or SIGINT/SIGTERM. Joins the region as
 * the other tools do and never creates one.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ecc_host.h"
#include "host-shim/cli/cli.h"

#define BATCH 64
#define IDLE_NS 50000000L

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
  (void)sig;
  stop = 1;
}

struct watch_opts {
  const char *config;
  bool from_now;
  uint64_t count; /* 0: no end */
};

static int parse(int argc, char **argv, struct watch_opts *o)
{
  static const struct option long_opts[] = {{"from-now", no_argument, NULL, 'n'},
                                            {"count", required_argument, NULL, 'c'},
                                            {"help", no_argument, NULL, 'h'},
                                            {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    if (ch == 'n')
      o->from_now = true;
    else if (ch == 'c') {
      if (cli_parse_u64("watch", "--count", optarg, 1, UINT64_MAX, &o->count) != 0)
        return CLI_USAGE;
    } else if (ch == ':')
      return cli_usage_error("watch", "option '%s' needs a value", argv[optind - 1]);
    else
      return cli_usage_error("watch", "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error("watch", "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error("watch", "unexpected argument '%s'", argv[optind + 1]);
  o->config = argv[optind];
  return CLI_OK;
}

/* Bytes of one well-formed UTF-8 character at p (at most `left` there), or
 * 0: no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t utf8_len(const unsigned char *p, size_t left)
{
  size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : 2;
  if (p[0] < 0xc2 || p[0] > 0xf4 || n > left)
    return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  bool overlong = (p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xf0 && p[1] < 0x90);
  bool beyond = (p[0] == 0xed && p[1] >= 0xa0) || (p[0] == 0xf4 && p[1] >= 0x90);
  return overlong || beyond ? 0 : n;
}

/* A key as a JSON string: quotes, backslashes and control bytes escaped,
 * UTF-8 as it is; a key is any bytes, so one that is not UTF-8 is written
 * \u00XX per byte, which keeps the line JSON a parser accepts. */
static void json_string(const char *s)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t left = strlen(s);
  putchar('"');
  while (left > 0) {
    size_t n = p[0] < 0x80 ? 1 : utf8_len(p, left);
    if (p[0] == '"' || p[0] == '\\')
      printf("\\%c", p[0]);
    else if (p[0] < 0x20 || n == 0)
      printf("\\u%04x", p[0]);
    else
      fwrite(p, 1, n, stdout);
    n = n == 0 ? 1 : n;
    p += n;
    left -= n;
  }
  putchar('"');
}

static const char *kind_name(int32_t kind)
{
  switch (kind) {
#define KIND_NAME(name, value, text) \
  case name:                         \
    return text;
    ECC_EVENT_MAP(KIND_NAME)
#undef KIND_NAME
  default:
    return "?";
  }
}

/* "2026-12-02T20:30:01.123456789Z" */
static void rfc3339(uint64_t ns, char *buf, size_t cap)
{
  time_t sec = (time_t)(ns / 1000000000ull);
  struct tm tm;
  if (gmtime_r(&sec, &tm) == NULL) {
    snprintf(buf, cap, "?");
    return;
  }
  size_t len = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + len, cap - len, ".%09" PRIu64 "Z", (uint64_t)(ns % 1000000000ull));
}

static void print_event(const ecc_event_t *e)
{
  char when[48];
  rfc3339(e->time_ns, when, sizeof(when));
  printf("{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 ",\"time\":\"%s\",\"instance\":\"%016" PRIx64
         "\",\"kind\":\"%s\",\"key\":",
         e->seq, e->time_ns, when, e->instance, kind_name(e->kind));
  json_string(e->key);
  printf(",\"nbytes\":%" PRIu64 ",\"cost_us\":%" PRIu64 "}\n", e->nbytes, e->cost_us);
}

/* Flushes the lines printed: 0; 1 when their reader has gone (EPIPE: a
 * pipe into head, say), which ends the watch as a signal does; -1 after
 * saying why the write failed. */
static int flush_lines(void)
{
  if (fflush(stdout) == 0 && !ferror(stdout))
    return 0;
  if (errno == EPIPE)
    return 1;
  fprintf(stderr, "eccctl watch: writing the events to stdout failed: %s\n", strerror(errno));
  return -1;
}

/* One read from *cursor, at most the events --count still wants, and its
 * lines: *n events read; ECC_OK, or the call's code. */
static int read_once(ecc_connector_t *c, const struct watch_opts *o, uint64_t *cursor,
                     uint64_t *printed, size_t *n)
{
  static ecc_event_t batch[BATCH];
  uint64_t lost = 0, from = *cursor, left = o->count - *printed;
  size_t cap = o->count == 0 || left > BATCH ? BATCH : (size_t)left;
  int rc = ecc_events(c, cursor, batch, cap, n, &lost);
  if (rc != ECC_OK)
    return rc;
  if (lost > 0)
    printf("{\"lost\":%" PRIu64 ",\"from_seq\":%" PRIu64 "}\n", lost, from);
  for (size_t i = 0; i < *n; i++)
    print_event(&batch[i]);
  *printed += *n;
  return ECC_OK;
}

/* Prints events until the count is reached, a signal comes or the reader
 * of the lines goes; CLI_OK, or CLI_FAIL after saying why a call failed. */
static int follow(ecc_connector_t *c, const struct watch_opts *o)
{
  uint64_t cursor = 0, printed = 0;
  size_t n = 0;
  int rc = o->from_now ? ecc_events(c, &cursor, NULL, 0, &n, NULL) : ECC_OK;
  while (rc == ECC_OK && !stop && (o->count == 0 || printed < o->count)) {
    rc = read_once(c, o, &cursor, &printed, &n);
    int flushed = rc == ECC_OK ? flush_lines() : 0;
    if (flushed != 0)
      return flushed > 0 ? CLI_OK : CLI_FAIL;
    struct timespec idle = {0, IDLE_NS};
    if (rc == ECC_OK && n == 0 && nanosleep(&idle, NULL) != 0 && errno != EINTR) {
      fprintf(stderr, "eccctl watch: nanosleep failed: %s\n", strerror(errno));
      return CLI_FAIL;
    }
  }
  return rc == ECC_OK ? CLI_OK : cli_call_error("watch", c, rc);
}

/* SIGINT and SIGTERM end the watch (without SA_RESTART, so that its pause
 * between reads ends at once); SIGPIPE is ignored, so that a reader gone
 * from the pipe ends it through EPIPE with the connector closed, rather
 * than killing it. */
static int catch_signals(void)
{
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  if (sigemptyset(&sa.sa_mask) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
      sigaction(SIGTERM, &sa, NULL) != 0)
    return -1;
  sa.sa_handler = SIG_IGN;
  return sigaction(SIGPIPE, &sa, NULL);
}

int cmd_watch(int argc, char **argv)
{
  struct watch_opts o = {0};
  int rc = parse(argc, argv, &o);
  if (rc < 0) {
    help_watch(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;
  if (catch_signals() != 0) {
    fprintf(stderr, "eccctl watch: cannot catch SIGINT, SIGTERM and SIGPIPE: %s\n",
            strerror(errno));
    return CLI_FAIL;
  }
  ecc_connector_t *c = cli_join_region("watch", o.config);
  if (c == NULL)
    return CLI_FAIL;
  return cli_close_region("watch", c, follow(c, &o));
}

void help_watch(FILE *out)
{
  fprintf(out, "usage: eccctl watch [--from-now] [--count N] CONFIG\n"
               "\n"
               "Print the residency events of the region CONFIG names (entries stored,\n"
               "evicted, removed, reclaimed) as JSON lines, oldest first, and follow new\n"
               "ones until SIGINT or SIGTERM. Each line holds seq, time_ns, time (UTC),\n"
               "instance (the region's id: a new one is a new, empty cache), kind, key,\n"
               "nbytes and cost_us (bytes of a key that are not UTF-8 are written as\n"
               "\\u00XX). A reader that fell behind the ring prints\n"
               "{\"lost\":N,\"from_seq\":S} before the events that follow. The region must\n"
               "exist and have a directory; it is joined, never created. A signal, the\n"
               "count reached or the reader of the lines gone (EPIPE) ends it with\n"
               "status 0, its connector closed.\n"
               "\n"
               "  --from-now  skip the events already in the ring\n"
               "  --count N   stop after N events\n");
}
