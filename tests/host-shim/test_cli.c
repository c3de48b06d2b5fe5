/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cli.c - eccctl run as a user runs it: help and usage errors, info and
 * check creating nothing, config errors naming file and line, the demo
 * moving a stream through a region, catching corruption, and cleaning up,
 * and rm deleting a region only when nobody holds it (or with --force).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

#define DEFAULT_INI ECC_SOURCE_DIR "/conf/default.ini"

struct run {
  int status; /* exit status; -1 if it did not exit normally */
  char out[1 << 16];
  char err[1 << 16];
};

static void slurp(const char *path, char *buf, size_t cap)
{
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot read %s", path);
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(path);
}

/* Run eccctl with `args` (shell words, our own paths only); capture both
 * streams separately. */
static struct run *cli(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static struct run *cli(const char *fmt, ...)
{
  static struct run r;
  static unsigned counter;
  char args[2048], out_path[128], err_path[128], cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof(args), fmt, ap);
  va_end(ap);
  counter++;
  snprintf(out_path, sizeof(out_path), "/tmp/ecc-cli-%ld-%u.out", (long)getpid(), counter);
  snprintf(err_path, sizeof(err_path), "/tmp/ecc-cli-%ld-%u.err", (long)getpid(), counter);
  snprintf(cmd, sizeof(cmd), "'%s' %s >'%s' 2>'%s'", ECCCTL_PATH, args, out_path, err_path);
  int st = system(cmd);
  cr_assert_neq(st, -1, "system() failed");
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  slurp(out_path, r.out, sizeof(r.out));
  slurp(err_path, r.err, sizeof(r.err));
  return &r;
}

/* Names in the default region directory of the default config's region
 * (and its temporary files), as one string for comparison; empty while the
 * directory does not exist. */
static void shm_listing(char *out, size_t cap)
{
  out[0] = '\0';
  DIR *d = opendir(th_default_dir());
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strncmp(de->d_name, "ecc-demo", 8) == 0) {
      strncat(out, de->d_name, cap - strlen(out) - 2);
      strncat(out, "\n", cap - strlen(out) - 1);
    }
  }
  closedir(d);
}

/* A number printed after `label` in the output, or UINT64_MAX if absent. */
static uint64_t figure(const char *text, const char *label)
{
  const char *p = strstr(text, label);
  if (p == NULL)
    return UINT64_MAX;
  return strtoull(p + strlen(label), NULL, 10);
}

/* A region of a test's own: its name, and the path its file will have. */
struct own_region {
  const char *name;
  char path[256];
};

static struct own_region own_region(void)
{
  struct own_region o = {.name = th_region_name()};
  snprintf(o.path, sizeof(o.path), "%s", th_region_path(th_default_dir(), o.name));
  return o;
}

/* ---- help and usage ------------------------------------------------------ */

Test(cli, help_lists_every_command)
{
  struct run *r = cli("--help");
  cr_assert_eq(r->status, 0, "stderr: %s", r->err);
  cr_assert_str_empty(r->err);
  cr_assert(strstr(r->out, "usage: eccctl"));
  const char *cmds[] = {"info", "check", "demo", "rm"};
  for (int i = 0; i < 4; i++) {
    char line[32];
    snprintf(line, sizeof(line), "\n  %s ", cmds[i]);
    cr_assert(strstr(r->out, line), "--help does not list '%s':\n%s", cmds[i], r->out);
  }
}

Test(cli, each_command_has_help)
{
  const char *cmds[] = {"info", "check", "demo"};
  for (int i = 0; i < 3; i++) {
    char want[64];
    snprintf(want, sizeof(want), "usage: eccctl %s", cmds[i]);
    struct run *r = cli("%s --help", cmds[i]);
    cr_assert_eq(r->status, 0, "%s --help: %s", cmds[i], r->err);
    cr_assert(strstr(r->out, want), "%s --help printed:\n%s", cmds[i], r->out);
    r = cli("help %s", cmds[i]);
    cr_assert_eq(r->status, 0);
    cr_assert(strstr(r->out, want));
  }
  struct run *r = cli("demo --help");
  const char *opts[] = {"--entries", "--rows", "--row-bytes", "--seed", "--timeout"};
  for (int i = 0; i < 5; i++)
    cr_assert(strstr(r->out, opts[i]), "demo --help lacks %s", opts[i]);
}

Test(cli, bad_command_lines_exit_2_with_usage_on_stderr)
{
  const char *bad[] = {
      "",                                          /* no command */
      "frobnicate",                                /* unknown command */
      "--frobnicate",                              /* unknown option */
      "check",                                     /* missing CONFIG */
      "check a.ini b.ini",                         /* extra argument */
      "info --nope " DEFAULT_INI,                  /* unknown option */
      "check --open " DEFAULT_INI,                 /* info's option on check */
      "demo --entries abc " DEFAULT_INI,           /* not a number */
      "demo --entries 0 " DEFAULT_INI,             /* out of range */
      "demo --entries -3 " DEFAULT_INI,            /* negative */
      "demo --rows 12x " DEFAULT_INI,              /* trailing junk */
      "demo --per-step 65 " DEFAULT_INI,           /* above the bound */
      "demo --entries 4 --corrupt 4 " DEFAULT_INI, /* names no entry */
      "demo " DEFAULT_INI " --entries",            /* missing value */
      "check --timeout-ms 0 " DEFAULT_INI,         /* out of range */
      "check --timeout-ms soon " DEFAULT_INI,      /* not a number */
      "info --timeout-ms 3600001 " DEFAULT_INI,    /* above the bound */
      "check " DEFAULT_INI " --timeout-ms",        /* missing value */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct run *r = cli("%s", bad[i]);
    cr_assert_eq(r->status, 2, "'eccctl %s' exited %d\nstdout: %s\nstderr: %s", bad[i], r->status,
                 r->out, r->err);
    cr_assert_str_empty(r->out, "'eccctl %s' wrote to stdout: %s", bad[i], r->out);
    cr_assert(strstr(r->err, "usage: eccctl"), "'eccctl %s' printed no usage: %s", bad[i], r->err);
  }
  struct run *r = cli("frobnicate");
  cr_assert(strstr(r->err, "'frobnicate'"), "the unknown command is not named: %s", r->err);
  r = cli("demo --entries abc " DEFAULT_INI);
  cr_assert(strstr(r->err, "--entries") && strstr(r->err, "abc"), "%s", r->err);
}

/* ---- info and check ------------------------------------------------------ */

Test(cli, info_on_default_ini_describes_plugin_and_creates_nothing)
{
  char before[4096], after[4096];
  shm_listing(before, sizeof(before));
  struct run *r = cli("info '%s'", DEFAULT_INI);
  shm_listing(after, sizeof(after));
  cr_assert_eq(r->status, 0, "info failed: %s", r->err);
  cr_assert_str_eq(before, after, "info created or removed region files");

  cr_assert(strstr(r->out, "/lib/ecc/libecc-shm.so"), "no plugin path:\n%s", r->out);
  cr_assert(strstr(r->out, "name:           shm\n"), "%s", r->out);
  cr_assert(strstr(r->out, "version:        "), "%s", r->out);
  char abi[64];
  snprintf(abi, sizeof(abi), "plugin %d.%d, host %d.%d, negotiated %d.%d", ECC_ABI_MAJOR,
           ECC_ABI_MINOR, ECC_ABI_MAJOR, ECC_ABI_MINOR, ECC_ABI_MAJOR, ECC_ABI_MINOR);
  cr_assert(strstr(r->out, abi), "no ABI line '%s':\n%s", abi, r->out);
  cr_assert(strstr(r->out, "save") && strstr(r->out, "load") && strstr(r->out, "host-engine"),
            "capabilities missing:\n%s", r->out);
  /* The summary comes from the plugin and reflects the file's settings. */
  cr_assert(strstr(r->out, "summary:") && strstr(r->out, "ecc-demo.region") &&
                strstr(r->out, "3072"),
            "summary missing or wrong:\n%s", r->out);
  cr_assert(strstr(r->out, "region.size") && strstr(r->out, "connector.role") &&
                strstr(r->out, "engine.type"),
            "accepted keys missing:\n%s", r->out);
}

Test(cli, check_on_default_ini_says_ok_and_creates_nothing)
{
  char before[4096], after[4096];
  shm_listing(before, sizeof(before));
  struct run *r = cli("check '%s'", DEFAULT_INI);
  shm_listing(after, sizeof(after));
  cr_assert_eq(r->status, 0, "check failed: %s", r->err);
  cr_assert_str_eq(before, after, "check created or removed region files");
  char want[512];
  snprintf(want, sizeof(want), "%s: ok (", DEFAULT_INI);
  cr_assert(strncmp(r->out, want, strlen(want)) == 0, "got: %s", r->out);
  cr_assert(strstr(r->out, "ecc-demo.region"), "summary missing: %s", r->out);
}

/* The value of `key` in [section] of an INI file as written, or "" (our
 * templates only: no continuation lines, comments on lines of their own). */
static const char *ini_value(const char *path, const char *section, const char *key)
{
  static char value[256];
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot read %s", path);
  char line[512], current[64] = "";
  value[0] = '\0';
  while (fgets(line, sizeof(line), f) != NULL) {
    char name[64], text[256];
    if (sscanf(line, " [%63[^]]]", name) == 1)
      snprintf(current, sizeof(current), "%s", name);
    else if (sscanf(line, " %63[^ =#;] = %255[^\n]", name, text) == 2 &&
             strcmp(current, section) == 0 && strcmp(name, key) == 0)
      snprintf(value, sizeof(value), "%s", text);
  }
  fclose(f);
  return value;
}

/* One save and one load by block ids, where the role allows each. */
static void expect_block_role(ecc_connector_t *c, const char *ini, bool saves, bool loads)
{
  static uint8_t buf[16384];
  uint32_t id = 0;
  ecc_save_entry_t s = {"k", (uint64_t)(uintptr_t)buf, 1, &id, 1};
  ecc_load_entry_t l = {1, &id, 1, (uint64_t)(uintptr_t)buf, sizeof(buf)};
  int rc = ecc_save(c, &s, 1);
  cr_expect_eq(rc, saves ? ECC_OK : ECC_ERR_ROLE, "%s: save returned %d", ini, rc);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  rc = ecc_load(c, &l, 1, NULL);
  cr_expect_eq(rc, loads ? ECC_OK : ECC_ERR_ROLE, "%s: load returned %d", ini, rc);
  ecc_completion_t done[2];
  size_t want = (size_t)saves + (size_t)loads;
  cr_expect_eq(th_poll_until(c, done, want, 5000), want, "%s", ini);
}

/* The same through the directory: reserve and save, look up and load. */
static void expect_directory_role(ecc_connector_t *c, const char *ini, bool saves, bool loads)
{
  static uint8_t buf[16384];
  ecc_entry_t e;
  int rc = ecc_reserve(c, "k", 1, &e);
  cr_expect_eq(rc, saves ? ECC_OK : ECC_ERR_ROLE, "%s: reserve returned %d", ini, rc);
  if (rc == ECC_OK) {
    ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)buf, 1};
    cr_expect_eq(ecc_save_reserved(c, &s, 1), ECC_OK, "%s", ini);
  }
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  if (saves) {
    ecc_completion_t done;
    cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "%s", ini);
  }
  const char *keys[1] = {"k"};
  rc = ecc_lookup(c, keys, 1, 1, &e);
  cr_expect_eq(rc, loads ? ECC_OK : ECC_ERR_ROLE, "%s: lookup returned %d", ini, rc);
  if (rc == ECC_OK && e.state == ECC_ENTRY_READY) {
    ecc_load_pinned_t l = {1, e.token, (uint64_t)(uintptr_t)buf, sizeof(buf)};
    cr_expect_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_OK, "%s", ini);
    ecc_completion_t done;
    cr_expect_eq(th_poll_until(c, &done, 1, 5000), 1, "%s", ini);
    cr_expect_eq(done.status, ECC_OK, "%s", ini);
  }
}

/* A connector opened from the template (on a small region of its own, with
 * the host engine) is what the template says, and acts as it. */
static void expect_effective_role(const char *ini, const char *role)
{
  const ecc_kv_t over[] = {
      {"region.name", th_region_name()}, {"region.size", "1MiB"}, {"engine.type", "host"}};
  ecc_open_options_t opt = {.struct_size = sizeof(opt),
                            .overrides = over,
                            .n_overrides = 3,
                            .log = th_capture,
                            .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512] = "";
  cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "%s: %s", ini, err);
  cr_expect_str_eq(th_describe(c).role, role, "%s", ini);
  bool saves = strcmp(role, "consumer") != 0, loads = strcmp(role, "producer") != 0;
  if (strcmp(ini_value(ini, "directory", "enabled"), "true") == 0)
    expect_directory_role(c, ini, saves, loads);
  else
    expect_block_role(c, ini, saves, loads);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cli, conf_templates_all_check)
{
  static const struct {
    const char *file;
    const char *role; /* what the template is for */
  } templates[] = {
      {"default", "both"}, {"producer", "producer"}, {"consumer", "consumer"}, {"both", "both"}};
  for (size_t i = 0; i < sizeof(templates) / sizeof(templates[0]); i++) {
    char ini[512], want[640];
    snprintf(ini, sizeof(ini), "%s/conf/%s.ini", ECC_SOURCE_DIR, templates[i].file);
    struct run *r = cli("check '%s'", ini);
    cr_assert_eq(r->status, 0, "%s: %s", ini, r->err);
    /* The summary's first word is the role the plugin will take. */
    snprintf(want, sizeof(want), "%s: ok (%s, region ", ini, templates[i].role);
    cr_expect(strncmp(r->out, want, strlen(want)) == 0, "expected '%s...', got: %s", want, r->out);
    snprintf(want, sizeof(want), "/ecc-%s.region: ", ini_value(ini, "region", "name"));
    cr_expect(strstr(r->out, want) != NULL, "the summary names another region than %s: %s", want,
              r->out);
    expect_effective_role(ini, templates[i].role);
  }
}

/* The line of `text` that starts with `label` (static copy, "" if none). */
static const char *line_of(const char *text, const char *label)
{
  static char line[512];
  line[0] = '\0';
  for (const char *p = text; p != NULL && *p != '\0';) {
    const char *end = strchr(p, '\n');
    size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
    if (strncmp(p, label, strlen(label)) == 0) {
      snprintf(line, sizeof(line), "%.*s", (int)len, p);
      break;
    }
    p = end != NULL ? end + 1 : NULL;
  }
  return line;
}

Test(cli, info_open_prints_what_describe_says)
{
  /* Ours created the region; eccctl's joins it, so both describe one. */
  const char *ini = th_ini("both", th_region_name(), 4096, 64,
                           "[connector]\nmax_inflight = 5\n[pinning]\nenabled = off\n");
  ecc_connector_t *mine = th_open_as(ini, "both");
  ecc_info_t info = th_describe(mine);
  struct run *r = cli("info --open '%s'", ini);
  cr_assert_eq(r->status, 0, "info --open failed: %s", r->err);
  char want[8][320];
  snprintf(want[0], sizeof(want[0]), "  region:       %s (joined an existing region)",
           info.region_path);
  snprintf(want[1], sizeof(want[1]),
           "  blocks:       %" PRIu64 " x %" PRIu64 " B = ", info.num_blocks, info.block_size);
  snprintf(want[2], sizeof(want[2]), "  file bytes:   %" PRIu64 " (header page included)",
           info.region_bytes);
  snprintf(want[3], sizeof(want[3]), "  engine:       %s (%s)", info.engine, info.engine_detail);
  snprintf(want[4], sizeof(want[4]), "  pinned:       %s", info.pinned ? "yes" : "no");
  snprintf(want[5], sizeof(want[5]), "  role:         %s", info.role);
  snprintf(want[6], sizeof(want[6]), "  save rank:    %s", info.save_rank ? "yes" : "no");
  snprintf(want[7], sizeof(want[7]), "  max inflight: %" PRIu64 " transfers per direction",
           info.max_inflight);
  for (int i = 0; i < 8; i++) {
    char label[17]; /* "  name:" padded to the values' column */
    snprintf(label, sizeof(label), "%.16s", want[i]);
    const char *got = line_of(r->out, label);
    cr_expect(strncmp(got, want[i], strlen(want[i])) == 0, "expected '%s', got '%s'", want[i], got);
  }
  cr_assert_eq(ecc_close(mine), ECC_OK);
}

Test(cli, info_open_describes_the_connector_and_removes_the_region)
{
  struct own_region o = own_region();
  const char *ini = th_ini("both", o.name, 4096, 256, NULL);
  struct run *r = cli("info --open '%s'", ini);
  cr_assert_eq(r->status, 0, "info --open failed: %s", r->err);
  cr_assert(strstr(r->out, o.path), "region path missing:\n%s", r->out);
  cr_assert(strstr(r->out, "created by this process"), "%s", r->out);
  cr_assert(strstr(r->out, "256 x 4096 B"), "layout missing:\n%s", r->out);
  cr_assert(strstr(r->out, "engine:       host"), "%s", r->out);
  cr_assert(strstr(r->out, "pin time:"), "%s", r->out);
  cr_assert(strstr(r->out, "save rank:    yes"), "%s", r->out);
  cr_assert_not(th_exists(o.path), "info --open left %s behind", o.path);
}

Test(cli, check_names_file_and_line_of_a_syntax_error)
{
  const char *ini = th_write_temp("[plugin]\nname = shm\n[region\nname = x\n", ".ini");
  struct run *r = cli("check '%s'", ini);
  cr_assert_eq(r->status, 1, "stdout: %s stderr: %s", r->out, r->err);
  char want[256];
  snprintf(want, sizeof(want), "%s:3", ini);
  cr_assert(strstr(r->err, want), "'%s' not in: %s", want, r->err);
  cr_assert_not(strstr(r->out, "ok ("));
}

Test(cli, check_names_an_unknown_key_and_a_bad_value)
{
  const char *ini = th_write_temp("[plugin]\nname = shm\n[region]\nname = x\n"
                                  "block_size = 4096\nbogus_key = 1\n",
                                  ".ini");
  struct run *r = cli("check '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_assert(strstr(r->err, "region.bogus_key"), "key not named: %s", r->err);

  ini = th_write_temp("[plugin]\nname = shm\n[region]\nname = x\nblock_size = 4096\n"
                      "size = lots\n",
                      ".ini");
  r = cli("check '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_assert(strstr(r->err, "region.size"), "key not named: %s", r->err);

  r = cli("check /nonexistent/ecc.ini");
  cr_assert_eq(r->status, 1);
  cr_assert(strstr(r->err, "/nonexistent/ecc.ini"), "%s", r->err);
}

/* check and info exit 1 saying `how`, and print nothing to stdout. */
static void expect_cli_fails(const char *name, const char *options, const char *how)
{
  const char *ini = th_fixture_ini(name, NULL);
  const char *cmds[] = {"check", "info"};
  for (int i = 0; i < 2; i++) {
    struct run *r = cli("%s %s '%s'", cmds[i], options, ini);
    cr_assert_eq(r->status, 1, "%s on %s exited %d\nstdout: %s\nstderr: %s", cmds[i], name,
                 r->status, r->out, r->err);
    cr_assert_str_empty(r->out, "%s on %s: %s", cmds[i], name, r->out);
    cr_assert(strstr(r->err, how), "%s on %s said: %s", cmds[i], name, r->err);
    cr_assert(strstr(r->err, ini), "%s on %s does not name the INI: %s", cmds[i], name, r->err);
  }
}

Test(cli, check_and_info_say_how_a_misbehaving_plugin_ended)
{
  expect_cli_fails("ctor_exit0", "",
                   "the check process exited with status 0 while loading or validating the "
                   "plugin, before it reported");
  expect_cli_fails("ctor_exit42", "", "the check process exited with status 42 while loading");
  expect_cli_fails("ctor_segv", "", "the check process was killed by signal 11 (SIGSEGV");
  expect_cli_fails("ctor_hang", "--timeout-ms 300",
                   "the check process did not finish loading and validating the plugin within "
                   "300 ms; it was killed");
  expect_cli_fails("abs_table", "", "its table symbol is at 0x10, which is not inside");
  expect_cli_fails("foreign_function", "", "table function 'describe' is at 0x");
}

Test(cli, info_lists_every_key_of_the_plugin_with_its_default)
{
  struct run *r = cli("info --timeout-ms 5000 '%s'", th_fixture_ini("full", NULL));
  cr_assert_eq(r->status, 0, "stderr: %s", r->err);
  cr_assert(strstr(r->out, "keys:           5 accepted"), "%s", r->out);
  static const char *const lines[] = {
      "  key                        this file    default     meaning\n",
      "  connector.role             -            both        producer, consumer or both\n",
      "  region.name                -            default     name of the region\n",
      "  region.size                -            1MiB        bytes of block data\n",
      "  good.trace                 -            (none)      file to which create and shutdown",
      "  good.tag                   -            (none)      any text, written to the trace on "
      "create\n",
  };
  for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++)
    cr_assert(strstr(r->out, lines[i]), "'%s' missing from:\n%s", lines[i], r->out);
}

/* check refuses what open would refuse, with open's text: a region its
 * filesystem has no room for, a region.dir that fails the ownership rule,
 * and one that is not a tmpfs. (A UCX address that does not resolve:
 * test_ucx_plugin.c.) */
static void expect_check_and_open_refuse(const char *ini, const char *text)
{
  struct run *r = cli("check '%s'", ini);
  cr_expect_eq(r->status, 1, "check exited %d:\n%s%s", r->status, r->out, r->err);
  cr_expect(strstr(r->err, text) != NULL, "check: '%s' missing from:\n%s", text, r->err);
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  cr_expect_neq(ecc_open(ini, NULL, &c, err, sizeof(err)), ECC_OK);
  cr_expect(strstr(err, text) != NULL, "open: '%s' missing from: %s", text, err);
  ecc_close(c);
}

Test(cli, check_refuses_what_open_refuses_with_the_same_text)
{
  const char *big = th_ini_text("[plugin]\npath = %s\n[region]\nname = %s\nsize = 64TiB\n"
                                "block_size = 64MiB\n[engine]\ntype = host\n",
                                ECC_PLUGIN_PATH, th_region_name());
  expect_check_and_open_refuse(big, "MiB free (No space left on device): lower region.size");
  /* A folder anyone may write to (no sticky bit): others could replace its regions. */
  char open_dir[] = "/dev/shm/ecc-open-XXXXXX";
  cr_assert_not_null(mkdtemp(open_dir), "mkdtemp: %s", strerror(errno));
  cr_assert_eq(chmod(open_dir, 0777), 0);
  const char *shared = th_ini_text("[plugin]\npath = %s\n[region]\nname = %s\nsize = 1MiB\n"
                                   "block_size = 4KiB\ndir = %s\n[engine]\ntype = host\n",
                                   ECC_PLUGIN_PATH, th_region_name(), open_dir);
  expect_check_and_open_refuse(shared, "is writable by others (mode 0777) and is not a sticky");
  cr_expect_eq(rmdir(open_dir), 0, "%s was left with something in it", open_dir);
  /* A folder of this user's in the build tree, which lies on a disk. */
  const char *dir = th_path_in(ECC_BUILD_DIR, "not-a-tmpfs");
  cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", dir, strerror(errno));
  struct statfs fs;
  cr_assert_eq(statfs(dir, &fs), 0);
  if (fs.f_type == TMPFS_MAGIC)
    cr_skip_test("the build tree is on a tmpfs here");
  const char *disk = th_ini_text("[plugin]\npath = %s\n[region]\nname = %s\nsize = 1MiB\n"
                                 "block_size = 4KiB\ndir = %s\n[engine]\ntype = host\n",
                                 ECC_PLUGIN_PATH, th_region_name(), dir);
  expect_check_and_open_refuse(disk, "is not on a tmpfs");
}

/* What the file sets is shown beside the default, never in its place. */
Test(cli, info_shows_what_the_file_sets_beside_each_default)
{
  struct run *r =
      cli("info --timeout-ms 5000 '%s'", th_fixture_ini("full", "[good]\ntag = mine\n"));
  cr_assert_eq(r->status, 0, "stderr: %s", r->err);
  const char *want = "  good.tag                   mine         (none)      any text";
  cr_assert(strstr(r->out, want), "'%s' missing from:\n%s", want, r->out);
}

/* ---- demo ---------------------------------------------------------------- */

/* A rate line of the demo's report gives the engine's busy time over
 * `transfers` batched transfers. */
static void expect_rate_line(const char *out, const char *label, unsigned long long transfers)
{
  const char *line = line_of(out, label);
  const char *busy = strstr(line, "over the engine's busy time (");
  cr_assert_not_null(busy, "no engine figures in '%s'", line);
  double seconds = 0;
  unsigned long long n = 0;
  cr_assert_eq(sscanf(busy, "over the engine's busy time (%lf s, %llu transfers", &seconds, &n), 2,
               "%s", line);
  cr_expect_eq(n, transfers, "'%s': expected %llu transfers", line, transfers);
}

/* Every figure the report prints agrees with a successful run of n entries. */
static void assert_demo_ok(const struct run *r, unsigned n, const char *path)
{
  cr_assert_eq(r->status, 0, "demo failed\nstdout: %s\nstderr: %s", r->out, r->err);
  char want[128];
  snprintf(want, sizeof(want), "verdict: OK: every byte of %u entries (", n);
  cr_assert(strstr(r->out, want), "no OK verdict:\n%s", r->out);
  uint64_t saved = figure(r->out, "bytes saved:  ");
  uint64_t loaded = figure(r->out, "bytes loaded: ");
  cr_assert(saved > 0 && saved != UINT64_MAX, "%s", r->out);
  cr_assert_eq(saved, loaded, "%s", r->out);
  cr_assert_eq(figure(r->out, "mismatches:   "), 0, "%s", r->out);
  cr_assert_eq(figure(r->out, "entries:      "), n, "%s", r->out);
  /* Each side's engine figures are its own direction's: one transfer per
   * step it issued. */
  unsigned long long save_steps = 0, load_steps = 0;
  cr_assert_eq(sscanf(line_of(r->out, "steps:"), "steps: %llu save steps, %llu load steps",
                      &save_steps, &load_steps),
               2, "%s", r->out);
  expect_rate_line(r->out, "save GB/s:", save_steps);
  expect_rate_line(r->out, "load GB/s:", load_steps);
  cr_assert_not(th_exists(path), "the demo left %s behind", path);
}

Test(cli, demo_moves_a_stream_through_a_small_region)
{
  struct own_region o = own_region();
  /* 2048 blocks hold about six entries of ~300 rows: the ring wraps and
   * blocks are reused only after the consumer acknowledged them. */
  const char *ini = th_ini("both", o.name, 3072, 2048, NULL);
  struct run *r = cli("demo '%s' --entries 20 --rows 300 --seed 7", ini);
  assert_demo_ok(r, 20, o.path);
  uint64_t expect_min = 20ull * (300 - 300 / 8) * 3072;
  cr_assert_geq(figure(r->out, "bytes saved:  "), expect_min, "%s", r->out);
  cr_assert(strstr(r->out, "created by the producer"), "%s", r->out);
  /* Holes and the ring's wrap must have split some entries. */
  uint64_t split = figure(r->out, "seed 7; ");
  cr_assert(split > 0 && split != UINT64_MAX, "no entry was split:\n%s", r->out);
}

Test(cli, demo_handles_rows_that_end_inside_a_block)
{
  struct own_region o = own_region();
  const char *ini = th_ini("both", o.name, 4096, 1024, NULL);
  struct run *r = cli("demo '%s' --entries 9 --rows 100 --row-bytes 1000 --per-step 3", ini);
  assert_demo_ok(r, 9, o.path);
}

Test(cli, demo_reports_a_corrupted_byte)
{
  struct own_region o = own_region();
  const char *ini = th_ini("both", o.name, 3072, 2048, NULL);
  struct run *r = cli("demo '%s' --entries 6 --rows 200 --corrupt 4", ini);
  cr_assert_eq(r->status, 1, "stdout: %s", r->out);
  cr_assert(strstr(r->out, "verdict: FAILED: 1 bytes differed, in 1 entries"), "%s", r->out);
  cr_assert_eq(figure(r->out, "mismatches:   "), 1);
  cr_assert_not(th_exists(o.path));
}

Test(cli, demo_with_a_bad_config_fails_cleanly)
{
  struct own_region o = own_region();
  const char *ini = th_ini("both", o.name, 3072, 2048, "bogus_engine_key = 1\n");
  struct run *r = cli("demo '%s' --entries 4", ini);
  cr_assert_eq(r->status, 1, "stdout: %s", r->out);
  cr_assert(strstr(r->err, "engine.bogus_engine_key"), "key not named: %s", r->err);
  cr_assert(strstr(r->out, "verdict: FAILED"), "%s", r->out);
  cr_assert_not(th_exists(o.path));

  r = cli("demo /nonexistent/ecc.ini --entries 4");
  cr_assert_eq(r->status, 1);
  cr_assert(strstr(r->err, "/nonexistent/ecc.ini"), "%s", r->err);
}

Test(cli, demo_refuses_a_region_too_small_for_its_entries)
{
  struct own_region o = own_region();
  const char *ini = th_ini("both", o.name, 3072, 64, NULL);
  struct run *r = cli("demo '%s' --entries 4 --rows 300", ini);
  cr_assert_eq(r->status, 1, "stdout: %s", r->out);
  cr_assert(strstr(r->out, "verdict: FAILED") && strstr(r->out, "region.size"), "%s", r->out);
  cr_assert_not(th_exists(o.path), "a failed demo left %s behind", o.path);
}

Test(cli, demo_does_not_join_a_region_someone_else_uses)
{
  struct own_region o = own_region();
  ecc_connector_t *mine = th_open("both", o.name, 3072, 2048, NULL);
  cr_assert(th_exists(o.path));
  const char *ini = th_ini("both", o.name, 3072, 2048, NULL);
  struct run *r = cli("demo '%s' --entries 4 --rows 100", ini);
  cr_assert_eq(r->status, 1, "the demo used a live region:\n%s", r->out);
  cr_assert(strstr(r->out, "verdict: FAILED") && strstr(r->out, "cannot open the producer"), "%s",
            r->out);
  cr_assert(th_exists(o.path), "the demo removed a region it did not create");
  cr_assert_eq(ecc_close(mine), ECC_OK);
  cr_assert_not(th_exists(o.path));
}

/* ---- ls and stat: the directory of a live region ---- */

#define DIR_BS 1024u
#define DIR_NB 64u

Test(cli, ls_and_stat_show_the_directory_of_a_live_region)
{
  const char *region = th_region_name();
  const char *extra = "[directory]\nenabled = true\n";
  ecc_connector_t *c = th_open("both", region, DIR_BS, DIR_NB, extra);
  static uint8_t src[3 * DIR_BS];
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, "cli-ready", sizeof(src), &e), ECC_OK);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, sizeof(src)};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(ecc_reserve(c, "cli-reserved", DIR_BS, &e), ECC_OK);

  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, extra);
  struct run *r = cli("ls '%s'", ini);
  cr_assert_eq(r->status, 0, "ls: %s", r->err);
  cr_expect_not_null(strstr(r->out, "cli-ready"), "%s", r->out);
  cr_expect_not_null(strstr(r->out, "cli-reserved"), "%s", r->out);
  cr_expect_not_null(strstr(r->out, " ready "), "%s", r->out);
  cr_expect_not_null(strstr(r->out, " reserved "), "%s", r->out);
  cr_expect_not_null(strstr(r->out, "2 entries"), "%s", r->out);
  r = cli("stat '%s'", ini);
  cr_assert_eq(r->status, 0, "stat: %s", r->err);
  cr_expect_eq(figure(r->out, "entries:"), 2, "%s", r->out);
  cr_expect_eq(figure(r->out, "blocks used:"), 4, "%s", r->out);
  cr_expect_eq(figure(r->out, "blocks free:"), DIR_NB - 4, "%s", r->out);
  cr_expect_eq(figure(r->out, "reservations:"), 2, "%s", r->out);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cli, ls_of_an_absent_region_fails_and_creates_nothing)
{
  const char *region = th_region_name();
  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, "[directory]\nenabled = true\n");
  struct run *r = cli("ls '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_expect_not_null(strstr(r->err, region), "%s", r->err);
  cr_assert(!th_exists(th_region_path(th_default_dir(), region)), "ls created the region");
  r = cli("stat '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_assert(!th_exists(th_region_path(th_default_dir(), region)), "stat created the region");
}

Test(cli, ls_of_a_region_without_a_directory_says_so)
{
  const char *region = th_region_name();
  ecc_connector_t *c = th_open("both", region, DIR_BS, DIR_NB, NULL);
  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, NULL);
  struct run *r = cli("ls '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_expect_not_null(strstr(r->err, "has no directory"), "%s", r->err);
  r = cli("stat '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_expect_not_null(strstr(r->err, "has no directory"), "%s", r->err);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cli, watch_prints_the_events_as_json_lines_and_ls_the_types)
{
  const char *region = th_region_name();
  const char *extra = "[directory]\nenabled = true\n";
  ecc_connector_t *c = th_open("both", region, DIR_BS, DIR_NB, extra);
  static uint8_t src[2 * DIR_BS];
  ecc_reserve_args_t a = {
      .struct_size = sizeof(a),
      .key = "cli\"typed",
      .nbytes = sizeof(src),
      .cost_us = 321,
      .type = {.dtype = ECC_DTYPE_FLOAT16, .n_dims = 2, .dims = {2, DIR_BS / 2}}};
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve_ex(c, &a, &e), ECC_OK);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, sizeof(src)};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);

  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, extra);
  struct run *r = cli("ls '%s'", ini);
  cr_assert_eq(r->status, 0, "ls: %s", r->err);
  cr_expect_not_null(strstr(r->out, "float16[2, 512]"), "%s", r->out);
  cr_expect_not_null(strstr(r->out, " 321 "), "%s", r->out);

  cr_assert_eq(ecc_remove(c, "cli\"typed"), ECC_OK);
  r = cli("watch --count 2 '%s'", ini);
  cr_assert_eq(r->status, 0, "watch: %s", r->err);
  const char *first = strstr(r->out, "{\"seq\":1,");
  const char *second = strstr(r->out, "{\"seq\":2,");
  cr_assert(first != NULL && second != NULL && first < second, "%s", r->out);
  cr_expect_not_null(strstr(first, "\"kind\":\"stored\",\"key\":\"cli\\\"typed\""), "%s", r->out);
  cr_expect_not_null(strstr(second, "\"kind\":\"removed\""), "%s", r->out);
  cr_expect_not_null(strstr(first, "\"nbytes\":2048,\"cost_us\":321}"), "%s", r->out);
  cr_expect_eq(strchr(second, '\n')[1], '\0', "more than two lines: %s", r->out);
  r = cli("watch --count 0 '%s'", ini);
  cr_expect_eq(r->status, 2, "--count 0 was taken");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- rm: the region deleted on purpose ---- */

Test(cli, rm_refuses_a_held_region_naming_its_holder_and_force_deletes_it)
{
  const char *region = th_region_name();
  const char *extra = "[directory]\nenabled = true\n";
  ecc_connector_t *c = th_open("both", region, DIR_BS, DIR_NB, extra);
  const char *path = th_region_path(th_default_dir(), region);
  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, extra);
  struct run *r = cli("rm '%s'", ini);
  cr_assert_eq(r->status, 1, "rm of a held region: %s%s", r->out, r->err);
  cr_expect_not_null(strstr(r->err, "in use by live processes"), "%s", r->err);
  char pid[32];
  snprintf(pid, sizeof(pid), "pid %ld", (long)getpid());
  cr_expect_not_null(strstr(r->err, pid), "the holder is not named: %s", r->err);
  cr_assert(th_exists(path), "rm deleted a region a live process holds");
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, "after-refusal", DIR_BS, &e), ECC_OK);

  r = cli("rm --force '%s'", ini);
  cr_assert_eq(r->status, 0, "rm --force: %s", r->err);
  cr_expect_not_null(strstr(r->out, "removed region"), "%s", r->out);
  cr_expect_not_null(strstr(r->out, path), "%s", r->out);
  cr_expect_not_null(strstr(r->out, "held by live processes"), "%s", r->out);
  cr_assert(!th_exists(path));
  cr_expect_eq(ecc_reserve(c, "after-rm", DIR_BS, &e), ECC_ERR_REGION,
               "the holder of a deleted region was not told");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(cli, rm_of_an_absent_region_fails_saying_so)
{
  const char *region = th_region_name();
  const char *ini = th_ini("both", region, DIR_BS, DIR_NB, NULL);
  struct run *r = cli("rm '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_expect_str_empty(r->out);
  cr_expect_not_null(strstr(r->err, "no region at"), "%s", r->err);
  cr_expect_not_null(strstr(r->err, region), "%s", r->err);
  cr_assert(!th_exists(th_region_path(th_default_dir(), region)), "rm created the region");
}

Test(cli, rm_of_a_bad_config_or_command_line_deletes_nothing)
{
  struct run *r = cli("rm");
  cr_assert_eq(r->status, 2);
  cr_expect(strstr(r->err, "usage: eccctl rm [--force] CONFIG"), "%s", r->err);
  r = cli("rm --nope " DEFAULT_INI);
  cr_assert_eq(r->status, 2);
  r = cli("rm --help");
  cr_assert_eq(r->status, 0);
  cr_expect(strstr(r->out, "usage: eccctl rm"), "%s", r->out);
  const char *ini = th_ini_text("[plugin]\npath = %s\n[region]\nsize = lots\n", ECC_PLUGIN_PATH);
  r = cli("rm '%s'", ini);
  cr_assert_eq(r->status, 1);
  cr_expect(strstr(r->err, "region.size"), "the bad key is not named: %s", r->err);
}
