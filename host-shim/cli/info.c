/*
 * info.c - the `info` and `check` commands: what plugin an INI file selects,
 * its versions, capabilities and keys, what it would build, and (info --open)
 * what it does build.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "cli.h"
#include "ecc_host.h"

#define MSG_CAP 1024

void help_info(FILE *out)
{
  fprintf(out, "usage: eccctl info [--open] CONFIG\n"
               "\n"
               "Load the plugin that the INI file CONFIG selects and print its file,\n"
               "name, implementation version, ABI version (its own and the negotiated\n"
               "one), capabilities, its one-line summary of the configuration and the\n"
               "configuration keys it accepts with their defaults. Creates nothing.\n"
               "\n"
               "options:\n"
               "  --open    also open a connector briefly and print what it built:\n"
               "            region file, blocks, engine, pinning, role, save rank.\n"
               "            This creates (or joins) the region for a moment; the\n"
               "            creator removes it again on close.\n"
               "  -h, --help  this text\n");
}

void help_check(FILE *out)
{
  fprintf(out, "usage: eccctl check CONFIG\n"
               "\n"
               "Validate the INI file CONFIG without creating anything: parse it, load\n"
               "the plugin, check its ABI table and let it validate every key.\n"
               "Prints 'CONFIG: ok (<summary>)' and exits 0, or prints the error\n"
               "(the file and line, or the key at fault) and exits 1.\n"
               "\n"
               "options:\n"
               "  -h, --help  this text\n");
}

/* Parse "[--open] CONFIG"; returns CLI_OK or CLI_USAGE, or -1 for --help. */
static int parse_args(int argc, char **argv, int allow_open, int *open_flag,
                      const char **config)
{
  static const struct option long_opts[] = {
      {"open", no_argument, NULL, 'o'},
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
      *open_flag = 1;
      continue;
    }
    return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
  }
  if (optind >= argc)
    return cli_usage_error(cmd, "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
  *config = argv[optind];
  return CLI_OK;
}

static void print_caps(uint32_t caps)
{
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {
      {ECC_CAP_SAVE, "save"},
      {ECC_CAP_LOAD, "load"},
      {ECC_CAP_HOST_ENGINE, "host-engine"},
      {ECC_CAP_CUDA_ENGINE, "cuda-engine"},
      {ECC_CAP_STATS, "stats"},
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

static void print_params(const ecc_param *params, size_t n)
{
  printf("keys:           %zu accepted (INI '[section] name' = pair 'section.name')\n",
         n);
  for (size_t i = 0; i < n; i++) {
    const char *def = params[i].default_value ? params[i].default_value : "";
    printf("  %-24s = %-10s  %s\n", params[i].key ? params[i].key : "?",
           def[0] ? def : "(none)", params[i].help ? params[i].help : "");
  }
}

/* ecc_check unloads the plugin before returning, so its key table is gone.
 * The file has just passed the shim's checks; map it again only to read
 * that constant table (no plugin function is called) and unmap it. */
static void print_params_from_file(const ecc_plugin_meta *meta)
{
  void *lib = dlopen(meta->path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    printf("keys:           (cannot reload %s: %s)\n", meta->path, dlerror());
    return;
  }
  const ecc_plugin_t *table = dlsym(lib, ECC_PLUGIN_SYMBOL);
  size_t need = offsetof(ecc_plugin_t, n_params) + sizeof(table->n_params);
  if (table == NULL || table->abi_major != ECC_ABI_MAJOR || table->struct_size < need ||
      (table->params == NULL && table->n_params)) {
    printf("keys:           (the plugin's table does not list them)\n");
  } else {
    print_params(table->params, table->n_params);
  }
  dlclose(lib);
}

static void print_meta(const char *config, const ecc_plugin_meta *meta,
                       const char *summary)
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

static void print_described(ecc_connector *c)
{
  ecc_info info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  int rc = ecc_describe(c, &info);
  printf("opened:\n");
  if (rc != ECC_OK) {
    printf("  describe:     not available (%s)\n", ecc_strerror(rc));
  } else {
    printf("  region:       %s (%s)\n", info.region_path,
           info.creator ? "created by this process, removed on close"
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
  ecc_stats st;
  memset(&st, 0, sizeof(st));
  st.struct_size = sizeof(st);
  rc = ecc_get_stats(c, &st);
  if (rc == ECC_OK)
    printf("  pin time:     %.3f s\n", (double)st.pin_ns / 1e9);
  else
    printf("  pin time:     not available (%s)\n", ecc_strerror(rc));
}

/* Open a connector for a moment: print its keys and what it built. */
static int info_open(const char *config)
{
  char err[MSG_CAP] = "";
  ecc_connector *c = NULL;
  int rc = ecc_open(config, NULL, &c, err, sizeof(err));
  if (rc != ECC_OK) {
    cli_config_error("info --open", config, err, rc);
    return CLI_FAIL;
  }
  ecc_plugin_meta meta;
  memset(&meta, 0, sizeof(meta));
  if (ecc_plugin_info(c, &meta) == ECC_OK && meta.params != NULL)
    print_params(meta.params, meta.n_params);
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
  int open_flag = 0;
  const char *config = NULL;
  int rc = parse_args(argc, argv, 1, &open_flag, &config);
  if (rc < 0) {
    help_info(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;

  ecc_plugin_meta meta;
  memset(&meta, 0, sizeof(meta));
  char msg[MSG_CAP] = "";
  rc = ecc_check(config, NULL, &meta, msg, sizeof(msg));
  if (rc != ECC_OK) {
    cli_config_error("info", config, msg, rc);
    return CLI_FAIL;
  }
  print_meta(config, &meta, msg);
  if (open_flag)
    return info_open(config);
  print_params_from_file(&meta);
  return CLI_OK;
}

int cmd_check(int argc, char **argv)
{
  int unused = 0;
  const char *config = NULL;
  int rc = parse_args(argc, argv, 0, &unused, &config);
  if (rc < 0) {
    help_check(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;

  char msg[MSG_CAP] = "";
  rc = ecc_check(config, NULL, NULL, msg, sizeof(msg));
  if (rc != ECC_OK) {
    fprintf(stderr, "%s: FAILED: %s\n", config, msg[0] ? msg : ecc_strerror(rc));
    return CLI_FAIL;
  }
  printf("%s: ok (%s)\n", config, msg);
  return CLI_OK;
}
