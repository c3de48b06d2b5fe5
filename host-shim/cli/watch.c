/* SPDX-License-Identifier: Apache-2.0 */
/*
 * watch.c - eccctl watch: the region's residency events (ecc_events) as
 * one JSON object per line, from the oldest the ring keeps or from now,
 * until --count events were printed or SIGINT/SIGTERM. Joins the region as
 * the other tools do and never creates one.
 */
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

/* A key as a JSON string: quotes, backslashes and control bytes escaped;
 * other bytes as they are (keys are the host's text). */
static void json_string(const char *s)
{
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\')
      printf("\\%c", *p);
    else if (*p < 0x20)
      printf("\\u%04x", *p);
    else
      putchar(*p);
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

/* Prints events until the count is reached or a signal comes; CLI_OK, or
 * CLI_FAIL after saying why a call failed. */
static int follow(ecc_connector_t *c, const struct watch_opts *o)
{
  uint64_t cursor = 0, printed = 0;
  ecc_event_t batch[BATCH];
  size_t n = 0;
  int rc = o->from_now ? ecc_events(c, &cursor, NULL, 0, &n, NULL) : ECC_OK;
  while (rc == ECC_OK && !stop && (o->count == 0 || printed < o->count)) {
    uint64_t lost = 0, from = cursor;
    rc = ecc_events(c, &cursor, batch, BATCH, &n, &lost);
    if (rc != ECC_OK)
      break;
    if (lost > 0)
      printf("{\"lost\":%" PRIu64 ",\"from_seq\":%" PRIu64 "}\n", lost, from);
    for (size_t i = 0; i < n && (o->count == 0 || printed < o->count); i++, printed++)
      print_event(&batch[i]);
    fflush(stdout);
    if (n == 0) {
      struct timespec idle = {0, IDLE_NS};
      nanosleep(&idle, NULL);
    }
  }
  return rc == ECC_OK ? CLI_OK : cli_call_error("watch", c, rc);
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
  ecc_connector_t *c = cli_join_region("watch", o.config);
  if (c == NULL)
    return CLI_FAIL;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
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
               "nbytes and cost_us. A reader that fell behind the ring prints\n"
               "{\"lost\":N,\"from_seq\":S} before the events that follow. The region must\n"
               "exist and have a directory; it is joined, never created.\n"
               "\n"
               "  --from-now  skip the events already in the ring\n"
               "  --count N   stop after N events\n");
}
