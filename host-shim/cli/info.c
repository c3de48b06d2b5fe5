/* SPDX-License-Identifier: Apache-2.0 */
/*
 * info.c - the `info` and `check` commands: what plugin an INI file selects,
 * its versions, capabilities and keys, what it would build, and (info --open)
 * what it does build.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/cli/cli.h"
#include "host-shim/cli/file_values.h"

#define MSG_CAP 1024
/* Bound of --timeout-ms: the shim's own. */
#define TIMEOUT_MAX_MS 3600000

void help_info(FILE *out)
{
  fprintf(out, "usage: eccctl info [--open] [--timeout-ms N] CONFIG\n"
               "\n"
               "Load the plugin that the INI file CONFIG selects, in a separate process,\n"
               "and print its file, name, implementation version, ABI version (its own\n"
               "and the negotiated one), capabilities, its one-line summary of the\n"
               "configuration and the configuration keys it accepts, each with the\n"
               "value CONFIG sets ('-': none) beside its default. Creates nothing.\n"
               "A plugin that exits, crashes or hangs while loading is reported as\n"
               "such.\n"
               "\n"
               "options:\n"
               "  --open    also open a connector briefly and print what it built:\n"
               "            region file, blocks, engine, pinning, role, save rank.\n"
               "            This creates (or joins) the region for a moment; its\n"
               "            last holder removes it again on close.\n"
               "  --timeout-ms N  how long the plugin may take to load and validate\n"
               "            before it is stopped (1 to 3600000; default 10000)\n"
               "  -h, --help  this text\n");
}

void help_check(FILE *out)
{
  fprintf(out, "usage: eccctl check [--timeout-ms N] CONFIG\n"
               "\n"
               "Validate the INI file CONFIG without creating anything: parse it, load\n"
               "the plugin in a separate process, check its ABI table and let it\n"
               "validate every key. Prints 'CONFIG: ok (<summary>)' and exits 0, or\n"
               "prints the error (the file and line, or the key at fault; for a plugin\n"
               "that exits, crashes or hangs while loading, how it ended) and exits 1.\n"
               "\n"
               "options:\n"
               "  --timeout-ms N  how long the plugin may take to load and validate\n"
               "            before it is stopped (1 to 3600000; default 10000)\n"
               "  -h, --help  this text\n");
}

struct info_args {
  int open_flag;
  uint64_t timeout_ms; /* 0: the shim's default */
  const char *config;
};

/* Parse "[--open] [--timeout-ms N] CONFIG"; returns CLI_OK or CLI_USAGE,
 * or -1 for --help. */
static int parse_args(int argc, char **argv, int allow_open, struct info_args *a)
{
  static const struct option long_opts[] = {
      {"open", no_argument, NULL, 'o'},
      {"timeout-ms", required_argument, NULL, 't'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *cmd = argv[0];
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    if (ch == 'o' && allow_open) {
      a->open_flag = 1;
      continue;
    }
    if (ch == 't') {
      if (cli_parse_u64(cmd, "--timeout-ms", optarg, 1, TIMEOUT_MAX_MS, &a->timeout_ms) != 0)
        return CLI_USAGE;
      continue;
    }
    if (ch == ':')
      return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
    return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error(cmd, "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
  a->config = argv[optind];
  return CLI_OK;
}

/* The options for ecc_check: all defaults but the timeout. */
static ecc_open_options_t check_options(const struct info_args *a)
{
  ecc_open_options_t o;
  memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.log_level = -1;
  o.check_timeout_ms = a->timeout_ms;
  return o;
}

static void print_caps(uint32_t caps)
{
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {
#define CAP_NAME(name, bit, text) {name, text},
      ECC_CAP_MAP(CAP_NAME)
#undef CAP_NAME
  };
  uint32_t known = 0;
  const char *sep = "";
  printf("capabilities:   ");
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    known |= names[i].bit;
    if (caps & names[i].bit) {
      printf("%s%s", sep, names[i].name);
      sep = " ";
    }
  }
  if (caps & ~known)
    printf("%s(unknown bits 0x%" PRIx32 ")", sep, caps & ~known);
  if (caps == 0)
    printf("none");
  printf("\n");
}

/* Each key with what the file sets ("-": nothing, the default applies) and
 * the plugin's default, in separate columns, so that neither reads as the
 * other. */
static void print_params(const char *config, const ecc_param_t *params, size_t n)
{
  struct file_values file;
  if (file_values_read(config, &file) != 0)
    file = (struct file_values){0};
  printf("keys:           %zu accepted (INI '[section] name' = pair 'section.name')\n", n);
  printf("  %-24s   %-12s %-10s  %s\n", "key", "this file", "default", "meaning");
  for (size_t i = 0; i < n; i++) {
    const char *key = params[i].key ? params[i].key : "?";
    const char *def = params[i].default_value ? params[i].default_value : "";
    const char *set = file_values_get(&file, key);
    printf("  %-24s   %-12s %-10s  %s\n", key, set != NULL ? set : "-", def[0] ? def : "(none)",
           params[i].help ? params[i].help : "");
  }
  file_values_free(&file);
}

static void print_meta(const char *config, const ecc_plugin_meta_t *meta, const char *summary)
{
  printf("config:         %s\n", config);
  printf("plugin:         %s\n", meta->path);
  printf("name:           %s\n", meta->name);
  printf("version:        %s\n", meta->version);
  printf("abi:            plugin %" PRIu32 ".%" PRIu32 ", host %d.%d, negotiated %" PRIu32
         ".%" PRIu32 "\n",
         meta->abi_major, meta->abi_minor, ECC_ABI_MAJOR, ECC_ABI_MINOR, meta->abi_major,
         meta->negotiated_minor);
  print_caps(meta->caps);
  printf("summary:        %s\n", summary[0] ? summary : "(the plugin gave none)");
}

static double mib(uint64_t bytes)
{
  return (double)bytes / (1024.0 * 1024.0);
}

static void print_described(ecc_connector_t *c)
{
  ecc_info_t info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  int rc = ecc_describe(c, &info);
  printf("opened:\n");
  if (rc != ECC_OK) {
    printf("  describe:     not available (%s)\n", ecc_strerror(rc));
  } else {
    printf("  region:       %s (%s)\n", info.region_path,
           info.creator ? "created by this process; its last holder removes it"
                        : "joined an existing region");
    printf("  blocks:       %" PRIu64 " x %" PRIu64 " B = %.1f MiB of block data\n",
           info.num_blocks, info.block_size, mib(info.num_blocks * info.block_size));
    printf("  file bytes:   %" PRIu64 " (header page included)\n", info.region_bytes);
    printf("  engine:       %s (%s)\n", info.engine, info.engine_detail);
    printf("  pinned:       %s\n", info.pinned ? "yes" : "no");
    printf("  role:         %s\n", info.role);
    printf("  save rank:    %s\n", info.save_rank ? "yes" : "no (saves are skipped)");
    printf("  max inflight: %" PRIu64 " transfers per direction\n", info.max_inflight);
  }
  ecc_stats_t st;
  memset(&st, 0, sizeof(st));
  st.struct_size = sizeof(st);
  rc = ecc_get_stats(c, &st);
  if (rc == ECC_OK)
    printf("  pin time:     %.3f s\n", (double)st.pin_ns / 1e9);
  else
    printf("  pin time:     not available (%s)\n", ecc_strerror(rc));
}

/* Open a connector for a moment: print what it built. */
static int info_open(const char *config)
{
  char err[MSG_CAP] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(config, NULL, &c, err, sizeof(err));
  if (rc != ECC_OK) {
    cli_config_error("info --open", config, err, rc);
    return CLI_FAIL;
  }
  print_described(c);
  rc = ecc_close(c);
  if (rc != ECC_OK) {
    fprintf(stderr, "eccctl info: closing the connector failed: %s\n", ecc_strerror(rc));
    return CLI_FAIL;
  }
  return CLI_OK;
}

int cmd_info(int argc, char **argv)
{
  struct info_args a = {.open_flag = 0, .timeout_ms = 0, .config = NULL};
  int rc = parse_args(argc, argv, 1, &a);
  if (rc < 0) {
    help_info(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;

  /* The keys come back from the check process with the rest: the plugin
   * is never loaded into eccctl itself to read them. */
  ecc_open_options_t o = check_options(&a);
  ecc_plugin_meta_t *meta = NULL;
  char msg[MSG_CAP] = "";
  rc = ecc_check_params(a.config, &o, &meta, msg, sizeof(msg));
  if (rc != ECC_OK) {
    cli_config_error("info", a.config, msg, rc);
    return CLI_FAIL;
  }
  print_meta(a.config, meta, msg);
  print_params(a.config, meta->params, meta->n_params);
  free(meta);
  if (a.open_flag)
    return info_open(a.config);
  return CLI_OK;
}

int cmd_check(int argc, char **argv)
{
  struct info_args a = {.open_flag = 0, .timeout_ms = 0, .config = NULL};
  int rc = parse_args(argc, argv, 0, &a);
  if (rc < 0) {
    help_check(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;

  ecc_open_options_t o = check_options(&a);
  char msg[MSG_CAP] = "";
  rc = ecc_check(a.config, &o, NULL, msg, sizeof(msg));
  if (rc != ECC_OK) {
    fprintf(stderr, "%s: FAILED: %s\n", a.config, msg[0] ? msg : ecc_strerror(rc));
    return CLI_FAIL;
  }
  printf("%s: ok (%s)\n", a.config, msg);
  return CLI_OK;
}
