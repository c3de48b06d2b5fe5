/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - eccctl's entry point: the top-level usage text, dispatch to the
 * commands, and the argument helpers they share.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_build_info.h"
#include "ecc_host.h"
#include "host-shim/cli/cli.h"

struct command {
  const char *name;
  const char *synopsis;
  const char *summary;
  int (*run)(int argc, char **argv);
  void (*help)(FILE *out);
};

static const struct command commands[] = {
    {"info", "eccctl info [--open] [--timeout-ms N] CONFIG",
     "show the plugin an INI file selects and what it would build", cmd_info, help_info},
    {"check", "eccctl check [--timeout-ms N] CONFIG",
     "validate an INI file without creating anything", cmd_check, help_check},
    {"demo",
     "eccctl demo [--entries N] [--rows N] [--row-bytes N] [--seed S] "
     "[--per-step N] [--timeout S] [--side producer|consumer [--hold S]] CONFIG",
     "a producer and a consumer process move encoder outputs "
     "through one region; every byte is checked",
     cmd_demo, help_demo},
    {"ls", "eccctl ls CONFIG", "list the live entries of the region's directory", cmd_ls, help_ls},
    {"stat", "eccctl stat CONFIG", "occupancy, fragmentation and counters of the directory",
     cmd_stat, help_stat},
    {"watch", "eccctl watch [--from-now] [--count N] CONFIG",
     "print the region's residency events as JSON lines", cmd_watch, help_watch},
    {"metrics", "eccctl metrics [--listen ADDR:PORT [--once]] CONFIG",
     "the region's counters in the Prometheus text format, printed or served", cmd_metrics,
     help_metrics},
    {"rm", "eccctl rm [--force] CONFIG",
     "delete the region file (a kept one too); refused while processes hold it", cmd_rm, help_rm},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void main_usage(FILE *out)
{
  fprintf(out, "usage: eccctl COMMAND [OPTIONS] CONFIG\n"
               "       eccctl COMMAND --help\n"
               "       eccctl --help | --version\n"
               "\n"
               "Encoder-cache connector control: inspect, validate and exercise a\n"
               "connector configured by an INI file.\n"
               "\n"
               "commands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n"
          "installed configurations: %s/*.ini, commented starting points\n"
          "the demo on them:         eccctl demo %s/default.ini\n"
          "manual pages:             eccctl(1), ecc_host(3)\n"
          "\n"
          "exit status: 0 success, 1 failure, 2 bad command line.\n",
          ECC_INSTALL_CONFIG_DIR, ECC_INSTALL_CONFIG_DIR);
}

static const struct command *find_command(const char *name)
{
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
  va_list ap;
  fprintf(stderr, "eccctl %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  const struct command *c = find_command(cmd);
  if (c)
    fprintf(stderr, "usage: %s\nSee 'eccctl %s --help'.\n", c->synopsis, c->name);
  else
    main_usage(stderr);
  return CLI_USAGE;
}

int cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t min, uint64_t max,
                  uint64_t *out)
{
  char *end = NULL;
  errno = 0;
  /* strtoull accepts a sign and wraps negatives; refuse them up front. */
  if (text == NULL || text[0] < '0' || text[0] > '9') {
    cli_usage_error(cmd, "%s needs a whole number, got '%s'", opt, text ? text : "");
    return -1;
  }
  unsigned long long v = strtoull(text, &end, 0);
  if (errno != 0 || *end != '\0') {
    cli_usage_error(cmd, "%s needs a whole number, got '%s'", opt, text);
    return -1;
  }
  if (v < min || v > max) {
    cli_usage_error(cmd, "%s must be between %llu and %llu, got %llu", opt, (unsigned long long)min,
                    (unsigned long long)max, v);
    return -1;
  }
  *out = v;
  return 0;
}

void cli_config_error(const char *cmd, const char *config, const char *msg, int rc)
{
  if (msg[0] == '\0')
    msg = ecc_strerror(rc);
  /* The shim's messages usually name the file already. */
  if (strstr(msg, config) != NULL)
    fprintf(stderr, "eccctl %s: %s\n", cmd, msg);
  else
    fprintf(stderr, "eccctl %s: %s: %s\n", cmd, config, msg);
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "eccctl: no command given\n");
    main_usage(stderr);
    return CLI_USAGE;
  }
  const char *first = argv[1];
  if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
    main_usage(stdout);
    return CLI_OK;
  }
  if (strcmp(first, "--version") == 0) {
    printf("eccctl %s\n", ecc_version());
    return CLI_OK;
  }
  if (strcmp(first, "help") == 0) {
    if (argc == 2) {
      main_usage(stdout);
      return CLI_OK;
    }
    const struct command *c = find_command(argv[2]);
    if (c == NULL) {
      fprintf(stderr, "eccctl: unknown command '%s'\n", argv[2]);
      main_usage(stderr);
      return CLI_USAGE;
    }
    c->help(stdout);
    return CLI_OK;
  }
  const struct command *c = find_command(first);
  if (c == NULL) {
    fprintf(stderr, "eccctl: unknown %s '%s'\n", first[0] == '-' ? "option" : "command", first);
    main_usage(stderr);
    return CLI_USAGE;
  }
  return c->run(argc - 1, argv + 1);
}
