/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dir_tools.c - eccctl ls and eccctl stat: the live entries of a region's
 * directory (with their cost and type from a plugin of ABI 1.2), and its
 * occupancy, fragmentation and counters. Both join a region that exists
 * (never create one) with the host engine, unpinned, as eccctl watch does
 * (cli_join_region).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/cli/cli.h"

#define MSG_CAP 1024
#define PAGE 64

/* "CONFIG" and --help, nothing else. Returns CLI_OK, CLI_USAGE, or -1 for
 * --help. */
static int parse_config(int argc, char **argv, const char **config)
{
  static const struct option long_opts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    return cli_usage_error(argv[0], "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error(argv[0], "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error(argv[0], "unexpected argument '%s'", argv[optind + 1]);
  *config = argv[optind];
  return CLI_OK;
}

ecc_connector_t *cli_join_region(const char *cmd, const char *config)
{
  static const ecc_kv_t tool[] = {{"region.mode", "join"},
                                  {"region.join_timeout_ms", "1000"},
                                  {"engine.type", "host"},
                                  {"engine.host_threads", "1"},
                                  {"pinning.enabled", "off"}};
  ecc_open_options_t o = {.struct_size = sizeof(o),
                          .overrides = tool,
                          .n_overrides = sizeof(tool) / sizeof(tool[0]),
                          .log_level = ECC_LOG_ERROR};
  char err[MSG_CAP] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(config, &o, &c, err, sizeof(err));
  if (rc != ECC_OK)
    cli_config_error(cmd, config, err, rc);
  return c;
}

int cli_close_region(const char *cmd, ecc_connector_t *c, int status)
{
  int rc = ecc_close(c);
  if (rc != ECC_OK) {
    fprintf(stderr, "eccctl %s: closing the connector failed: %s\n", cmd, ecc_strerror(rc));
    return CLI_FAIL;
  }
  return status;
}

int cli_call_error(const char *cmd, ecc_connector_t *c, int rc)
{
  char err[MSG_CAP] = "";
  ecc_last_error(c, err, sizeof(err));
  fprintf(stderr, "eccctl %s: %s\n", cmd, err[0] != '\0' ? err : ecc_strerror(rc));
  return CLI_FAIL;
}

static const char *state_name(int32_t state)
{
  switch (state) {
#define STATE_NAME(name, value, text) \
  case name:                          \
    return text;
    ECC_ENTRY_STATE_MAP(STATE_NAME)
#undef STATE_NAME
  default:
    return "?";
  }
}

/* "float16[880, 3584]", "untyped", or "-" from a plugin before ABI 1.2. */
static const char *type_text(const ecc_entry_meta_t *m, char *buf, size_t cap)
{
  if (m == NULL)
    return "-";
  if (m->type.dtype == ECC_DTYPE_NONE && m->type.n_dims == 0)
    return "untyped";
  const char *name = ecc_dtype_name(m->type.dtype);
  int len = snprintf(buf, cap, "%s[", name != NULL ? name : "?");
  for (uint32_t d = 0;
       d < m->type.n_dims && d < ECC_TENSOR_MAX_DIMS && len > 0 && (size_t)len < cap; d++)
    len +=
        snprintf(buf + len, cap - (size_t)len, d == 0 ? "%" PRIu64 : ", %" PRIu64, m->type.dims[d]);
  if (len > 0 && (size_t)len < cap)
    snprintf(buf + len, cap - (size_t)len, "]");
  return buf;
}

static void print_listed(const ecc_listed_t *e, const ecc_entry_meta_t *m)
{
  char type[128], cost[24] = "-";
  if (m != NULL)
    snprintf(cost, sizeof(cost), "%" PRIu64, m->cost_us);
  printf("%-40s %14" PRIu64 " %6" PRIu32 " %5" PRIu32 " %-8s %4" PRIu32 " %10.3f %10.3f %10s  %s\n",
         e->key, e->nbytes, e->n_blocks, e->n_extents, state_name(e->state), e->pins,
         (double)e->age_ns / 1e9, (double)e->idle_ns / 1e9, cost, type_text(m, type, sizeof(type)));
}

int cmd_ls(int argc, char **argv)
{
  const char *config = NULL;
  int rc = parse_config(argc, argv, &config);
  if (rc < 0) {
    help_ls(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;
  ecc_connector_t *c = cli_join_region("ls", config);
  if (c == NULL)
    return CLI_FAIL;
  ecc_listed_t page[PAGE];
  ecc_entry_meta_t meta[PAGE];
  uint64_t cursor = 0;
  size_t n = 0, total = 0;
  bool typed = true; /* until the plugin says it predates ABI 1.2 */
  printf("%-40s %14s %6s %5s %-8s %4s %10s %10s %10s  %s\n", "key", "bytes", "blocks", "runs",
         "state", "pins", "age_s", "idle_s", "cost_us", "type");
  do {
    rc = typed ? ecc_list_ex(c, &cursor, page, meta, PAGE, &n) : ECC_ERR_UNSUPPORTED;
    if (rc == ECC_ERR_UNSUPPORTED) { /* a plugin before ABI 1.2, or no directory */
      typed = false;
      rc = ecc_list(c, &cursor, page, PAGE, &n);
    }
    if (rc != ECC_OK)
      return cli_close_region("ls", c, cli_call_error("ls", c, rc));
    for (size_t i = 0; i < n; i++)
      print_listed(&page[i], typed ? &meta[i] : NULL);
    total += n;
  } while (n > 0);
  printf("%zu entries\n", total);
  return cli_close_region("ls", c, CLI_OK);
}

static void print_directory(const ecc_info_t *info, const ecc_directory_stats_t *d)
{
  uint64_t blocks = d->blocks_used + d->blocks_free;
  double used = blocks > 0 ? 100.0 * (double)d->blocks_used / (double)blocks : 0.0;
  double frag =
      d->blocks_free > 0 ? 100.0 * (1.0 - (double)d->largest_free_run / (double)d->blocks_free) : 0;
  printf("region:             %s (%" PRIu64 " blocks of %" PRIu64 " B)\n", info->region_path,
         info->num_blocks, info->block_size);
  printf("entries:            %" PRIu64 "\n", d->entries);
  printf("blocks used:        %" PRIu64 " (%.1f%%)\n", d->blocks_used, used);
  printf("blocks free:        %" PRIu64 ", largest free run %" PRIu64
         " (free space fragmented: %.1f%%)\n",
         d->blocks_free, d->largest_free_run, frag);
  printf("pins live:          %" PRIu64 "\n", d->pins_live);
  printf("reservations:       %" PRIu64 " (dedup hits %" PRIu64 ", refused for room %" PRIu64 ")\n",
         d->reservations, d->dedup_hits, d->full);
  printf("lookups:            %" PRIu64 " (hits %" PRIu64 ", misses %" PRIu64 ")\n", d->lookups,
         d->hits, d->misses);
  printf("evictions:          %" PRIu64 ", removals %" PRIu64 "\n", d->evictions, d->removals);
  printf("pins taken:         %" PRIu64 "\n", d->pins);
  printf("reclaimed:          %" PRIu64 " (reservations and pins of dead processes)\n",
         d->reclaimed);
}

int cmd_stat(int argc, char **argv)
{
  const char *config = NULL;
  int rc = parse_config(argc, argv, &config);
  if (rc < 0) {
    help_stat(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;
  ecc_connector_t *c = cli_join_region("stat", config);
  if (c == NULL)
    return CLI_FAIL;
  ecc_info_t info = {.struct_size = sizeof(info)};
  ecc_stats_t st = {.struct_size = sizeof(st)};
  rc = ecc_describe(c, &info);
  if (rc == ECC_OK)
    rc = ecc_get_stats(c, &st);
  /* A region without a directory answers every directory call so. */
  ecc_listed_t probe;
  uint64_t cursor = 0;
  size_t n = 0;
  if (rc == ECC_OK)
    rc = ecc_list(c, &cursor, &probe, 0, &n);
  if (rc != ECC_OK)
    return cli_close_region("stat", c, cli_call_error("stat", c, rc));
  print_directory(&info, &st.directory);
  return cli_close_region("stat", c, CLI_OK);
}

void help_ls(FILE *out)
{
  fprintf(out, "usage: eccctl ls CONFIG\n"
               "\n"
               "List the live entries of the directory of the region CONFIG names: key,\n"
               "bytes, blocks, runs, state (reserved or ready), pins, age and time since\n"
               "last use. Joins a region that exists (never creates one), with the host\n"
               "engine; fails when the region has no directory.\n");
}

void help_stat(FILE *out)
{
  fprintf(out, "usage: eccctl stat CONFIG\n"
               "\n"
               "Print the occupancy, fragmentation and counters of the directory of the\n"
               "region CONFIG names. Joins a region that exists (never creates one), with\n"
               "the host engine; fails when the region has no directory.\n");
}
