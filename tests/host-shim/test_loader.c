/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_loader.c - the shim's loading of plugins: finding the file, refusing
 * unsafe or broken ones with a message that names the fault, using tables
 * of other minors, forwarding calls, and unloading cleanly.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/names.h"
#include "ecc_host.h"
#include "tests/helpers.h"

/* ---- helpers ---- */

static int open_ini(const char *ini, ecc_connector_t **c, char *err, size_t cap)
{
  *c = (ecc_connector_t *)&err; /* must be overwritten, with NULL on failure */
  return ecc_open(ini, NULL, c, err, cap);
}

static int count_lines_with(const char *path, const char *prefix)
{
  const char *text = th_read_file(path);
  if (text == NULL)
    return 0;
  int n = 0;
  size_t len = strlen(prefix);
  for (const char *line = text; *line != '\0';) {
    if (strncmp(line, prefix, len) == 0)
      n++;
    const char *nl = strchr(line, '\n');
    if (nl == NULL)
      break;
    line = nl + 1;
  }
  return n;
}

/* Whether the plugin file is still mapped in this process. */
static int still_loaded(const char *path)
{
  void *dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (dl == NULL)
    return 0;
  dlclose(dl);
  return 1;
}

static char *private_dir(void)
{
  static char dirs[4][64];
  static unsigned next;
  char *d = dirs[next++ % 4];
  snprintf(d, 64, "/tmp/ecc-loader-XXXXXX");
  cr_assert_not_null(mkdtemp(d), "mkdtemp: %s", strerror(errno));
  return d;
}

static void expect_open_fails(const char *ini, int code, const char *what)
{
  char err[1024] = "";
  ecc_connector_t *c;
  int rc = open_ini(ini, &c, err, sizeof(err));
  cr_assert_eq(rc, code, "rc %d (%s), want %d; err: %s", rc, ecc_strerror(rc), code, err);
  cr_assert_null(c, "a failed open must set *out to NULL");
  cr_assert_not_null(strstr(err, what), "error '%s' does not say '%s'", err, what);
}

static ecc_connector_t *open_ok(const char *ini)
{
  char err[1024] = "";
  ecc_connector_t *c;
  int rc = open_ini(ini, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "open failed: %d %s", rc, err);
  cr_assert_not_null(c);
  return c;
}

/* ---- a working plugin through the shim ---- */

Test(loader, good_plugin_forwards_every_call)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n", trace);
  ecc_connector_t *c = open_ok(th_fixture_ini("good", extra));
  char want[64];
  snprintf(want, sizeof(want), "create 1 minor %d n_config 1 ", ECC_ABI_V1_MINOR);
  cr_assert_eq(count_lines_with(trace, want), 1, "trace: %s", th_read_file(trace));

  uint32_t blocks[1] = {0};
  ecc_save_entry_t saves[2] = {{.key = "k-one", .nbytes = 1, .block_ids = blocks, .n_blocks = 1},
                               {.key = "k-two", .nbytes = 1, .block_ids = blocks, .n_blocks = 1}};
  cr_assert_eq(ecc_save(c, saves, 2), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_load_entry_t load = {
      .transfer_id = 77, .block_ids = blocks, .n_blocks = 1, .dst_capacity = 1};
  cr_assert_eq(ecc_load(c, &load, 1, NULL), ECC_OK);

  ecc_completion_t done[4];
  size_t n = 0;
  cr_assert_eq(ecc_poll(c, done, 4, &n), ECC_OK);
  cr_assert_eq(n, 3);
  cr_assert_eq(done[0].direction, ECC_DIR_SAVE);
  cr_assert_str_eq(done[0].key, "k-one");
  cr_assert_str_eq(done[1].key, "k-two");
  cr_assert_eq(done[2].direction, ECC_DIR_LOAD);
  cr_assert_eq(done[2].transfer_id, 77);
  /* the plugin's own checks come back unchanged */
  ecc_save_entry_t bad = {.key = "", .nbytes = 1, .block_ids = blocks, .n_blocks = 1};
  cr_assert_eq(ecc_save(c, &bad, 1), ECC_ERR_INVALID);

  cr_assert_eq(ecc_close(c), ECC_OK);
  cr_assert_eq(count_lines_with(trace, "shutdown 1"), 1, "trace: %s", th_read_file(trace));
  cr_assert(still_loaded(th_fixture("good")), "an accepted plugin stays loaded after ecc_close");
}

Test(loader, plugin_info_reports_the_table)
{
  ecc_connector_t *c = open_ok(th_fixture_ini("good", NULL));
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  char *real = realpath(th_fixture("good"), NULL);
  cr_assert_str_eq(m.path, real);
  free(real);
  cr_assert_str_eq(m.name, "good");
  cr_assert_str_eq(m.version, "0.1.0");
  cr_assert_eq(m.abi_major, 1);
  cr_assert_eq(m.abi_minor, ECC_ABI_V1_MINOR);
  cr_assert_eq(m.negotiated_minor, ECC_ABI_V1_MINOR);
  cr_assert_eq(m.caps, ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE);
  cr_assert_not_null(m.params);
  cr_assert_eq(m.n_params, 5);
  cr_assert_str_eq(m.params[1].key, "region.name");
  cr_assert_eq(ecc_plugin_info(c, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(loader, null_connector_is_invalid)
{
  ecc_completion_t done[1];
  size_t n = 0;
  ecc_stats_t st = {.struct_size = sizeof(st)};
  ecc_info_t info = {.struct_size = sizeof(info)};
  char buf[16];
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_save(NULL, NULL, 0), ECC_ERR_INVALID);
  cr_assert_eq(ecc_flush(NULL, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_load(NULL, NULL, 0, NULL), ECC_ERR_INVALID);
  cr_assert_eq(ecc_poll(NULL, done, 1, &n), ECC_ERR_INVALID);
  cr_assert_eq(ecc_get_stats(NULL, &st), ECC_ERR_INVALID);
  cr_assert_eq(ecc_describe(NULL, &info), ECC_ERR_INVALID);
  cr_assert_eq(ecc_last_error(NULL, buf, sizeof(buf)), ECC_ERR_INVALID);
  cr_assert_eq(ecc_plugin_info(NULL, &m), ECC_ERR_INVALID);
  cr_assert_eq(ecc_close(NULL), ECC_OK);
}

Test(loader, open_checks_its_arguments)
{
  char err[256] = "";
  cr_assert_eq(ecc_open(th_fixture_ini("good", NULL), NULL, NULL, err, sizeof(err)),
               ECC_ERR_INVALID);
  cr_assert_not_null(strstr(err, "out is NULL"), "err: %s", err);

  ecc_connector_t *c = (ecc_connector_t *)err;
  cr_assert_eq(ecc_open(NULL, NULL, &c, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_null(c);

  ecc_open_options_t bad_size = {.struct_size = 0};
  cr_assert_eq(ecc_open(th_fixture_ini("good", NULL), &bad_size, &c, err, sizeof(err)),
               ECC_ERR_INVALID);
  cr_assert_not_null(strstr(err, "struct_size"), "err: %s", err);

  ecc_open_options_t bad_level = {.struct_size = sizeof(bad_level), .log_level = 9};
  cr_assert_eq(ecc_open(th_fixture_ini("good", NULL), &bad_level, &c, err, sizeof(err)),
               ECC_ERR_INVALID);
  cr_assert_not_null(strstr(err, "log_level 9"), "err: %s", err);

  /* no error buffer at all is allowed */
  cr_assert_eq(ecc_open(th_fixture_ini("wrong_major", NULL), NULL, &c, NULL, 0),
               ECC_ERR_INCOMPATIBLE);
  cr_assert_null(c);
}

/* ---- broken tables: each refused before any of its functions is called ---- */

Test(loader, wrong_major_is_refused)
{
  char want[PATH_MAX + 64];
  snprintf(want, sizeof(want), "plugin %s: its ecc_plugin_v1 table says ABI major 2",
           th_fixture("wrong_major"));
  expect_open_fails(th_fixture_ini("wrong_major", NULL), ECC_ERR_INCOMPATIBLE, want);
  cr_assert_not(still_loaded(th_fixture("wrong_major")));
}

Test(loader, missing_symbol_is_refused)
{
  char want[PATH_MAX + 64];
  snprintf(want, sizeof(want), "plugin %s exports no ecc_plugin_v1 table", th_fixture("no_symbol"));
  expect_open_fails(th_fixture_ini("no_symbol", NULL), ECC_ERR_INCOMPATIBLE, want);
  cr_assert_not(still_loaded(th_fixture("no_symbol")));
}

Test(loader, null_required_function_is_named)
{
  expect_open_fails(th_fixture_ini("null_required", NULL), ECC_ERR_INCOMPATIBLE,
                    "required function 'poll' is NULL");
}

Test(loader, small_struct_is_refused)
{
  char want[128];
  snprintf(want, sizeof(want),
           "table struct_size %zu is smaller than the %zu bytes of the required v1 fields",
           offsetof(ecc_plugin_v1_t, shutdown),
           offsetof(ecc_plugin_v1_t, shutdown) + sizeof(void (*)(void)));
  expect_open_fails(th_fixture_ini("small_struct", NULL), ECC_ERR_INCOMPATIBLE, want);
}

Test(loader, struct_size_larger_than_the_table_is_refused)
{
  char want[128];
  snprintf(want, sizeof(want), "table struct_size %zu is larger than the table (%zu bytes)",
           sizeof(ecc_plugin_v1_t) + 4096, sizeof(ecc_plugin_v1_t));
  expect_open_fails(th_fixture_ini("lying_size", NULL), ECC_ERR_INCOMPATIBLE, want);
}

Test(loader, table_without_name_is_refused)
{
  expect_open_fails(th_fixture_ini("no_name", NULL), ECC_ERR_INCOMPATIBLE,
                    "table field 'name' is NULL");
}

/* ---- tables that point outside the plugin ---- */

/* ecc_open and ecc_check both refuse fixture `name` with ECC_ERR_INCOMPATIBLE,
 * saying `want` and `also` (may be NULL), and nothing stays loaded. */
static void expect_refused_both(const char *name, const char *want, const char *also)
{
  const char *ini = th_fixture_ini(name, NULL);
  expect_open_fails(ini, ECC_ERR_INCOMPATIBLE, want);
  if (also != NULL)
    expect_open_fails(ini, ECC_ERR_INCOMPATIBLE, also);
  char err[1024] = "";
  int rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_INCOMPATIBLE, "ecc_check: rc %d: %s", rc, err);
  cr_assert_not_null(strstr(err, want), "ecc_check said '%s', not '%s'", err, want);
  cr_assert(also == NULL || strstr(err, also) != NULL, "ecc_check said '%s'", err);
  cr_assert_not(still_loaded(th_fixture(name)), "a refused plugin stayed loaded");
}

Test(loader, table_at_an_absolute_address_is_refused)
{
  char want[PATH_MAX + 128];
  snprintf(want, sizeof(want),
           "plugin %s: its table symbol is at 0x10, which is not inside the plugin's "
           "readable segments",
           th_fixture("abs_table"));
  expect_refused_both("abs_table", want, NULL);
}

Test(loader, function_outside_the_plugin_is_refused)
{
  char want[PATH_MAX + 128];
  snprintf(want, sizeof(want), "plugin %s: table function 'describe' is at 0x",
           th_fixture("foreign_function"));
  expect_refused_both("foreign_function", want,
                      "which is not inside the plugin's executable segments");
}

Test(loader, name_outside_the_plugin_is_refused)
{
  char want[PATH_MAX + 128];
  snprintf(want, sizeof(want),
           "plugin %s: table field 'name' does not point to a string inside the plugin",
           th_fixture("stray_name"));
  expect_refused_both("stray_name", want, NULL);
}

Test(loader, params_outside_the_plugin_are_refused)
{
  char want[PATH_MAX + 128];
  snprintf(want, sizeof(want),
           "plugin %s: its 3 params do not lie inside the plugin's readable segments",
           th_fixture("stray_params"));
  expect_refused_both("stray_params", want, NULL);
}

Test(loader, failing_create_reports_the_plugin_text_and_line)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n[region]\nsize = 3\n", trace);
  const char *ini = th_fixture_ini("failing_create", extra);
  char want[PATH_MAX + 128];
  /* [plugin] path trace... : region.size is on line 6 */
  snprintf(want, sizeof(want), "%s:6: plugin 'failing_create' (", ini);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);
  expect_open_fails(ini, ECC_ERR_CONFIG, "region.size: '3' is not a power of two");
  cr_assert_eq(count_lines_with(trace, "create refused"), 2);
  cr_assert_eq(count_lines_with(trace, "shutdown"), 0);
  /* No connector was made, so nothing of the plugin is left either. */
  cr_assert_not(still_loaded(th_fixture("failing_create")));
}

Test(loader, zero_handle_from_create_is_refused)
{
  expect_open_fails(th_fixture_ini("zero_handle", NULL), ECC_ERR_INCOMPATIBLE,
                    "returned ECC_OK from create but handle 0");
}

/* ---- versions and optional functions ---- */

Test(loader, newer_minor_is_used_at_the_host_minor)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n", trace);
  ecc_connector_t *c = open_ok(th_fixture_ini("newer_minor", extra));
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  cr_assert_eq(m.abi_minor, 7);
  cr_assert_eq(m.negotiated_minor, ECC_ABI_V1_MINOR);
  /* create was told the negotiated minor, not the plugin's own */
  char want[64];
  snprintf(want, sizeof(want), "create 1 minor %d ", ECC_ABI_V1_MINOR);
  cr_assert_eq(count_lines_with(trace, want), 1, "trace: %s", th_read_file(trace));
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(c, &st), ECC_OK, "stats is covered by its struct_size");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(loader, missing_optional_functions_are_unsupported)
{
  ecc_connector_t *c = open_ok(th_fixture_ini("good", NULL));
  ecc_stats_t st = {.struct_size = sizeof(st)};
  ecc_info_t info = {.struct_size = sizeof(info)};
  char buf[64];
  cr_assert_eq(ecc_get_stats(c, &st), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_describe(c, &info), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_last_error(c, buf, sizeof(buf)), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* Every directory call of ABI 1.1 on a connector whose plugin lacks it. */
static void expect_no_directory(ecc_connector_t *c)
{
  ecc_entry_t e;
  const char *keys[1] = {"k"};
  ecc_save_reserved_t s = {1, 0x1000, 1};
  ecc_load_pinned_t l = {1, 1, 0x1000, 1};
  ecc_listed_t listed[1];
  uint64_t cursor = 0;
  size_t n = 7;
  cr_expect_eq(ecc_reserve(c, "k", 1, &e), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_save_reserved(c, &s, 1), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_abort_reserved(c, 1), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_unpin(c, 1), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_remove(c, "k"), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_list(c, &cursor, listed, 1, &n), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(n, 0);
  /* Nor the cache of 1.2. */
  ecc_reserve_args_t a = {.struct_size = sizeof(a), .key = "k", .nbytes = 1};
  ecc_peek_t p;
  ecc_entry_meta_t meta;
  cr_expect_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_peek(c, keys, 1, &p), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_wait_ready(c, "k", 1, 0, &e, &meta), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_lookup_ex(c, keys, 1, 1, &e, &meta), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_list_ex(c, &cursor, listed, &meta, 1, &n), ECC_ERR_UNSUPPORTED);
}

/* A plugin of ABI 1.0 keeps loading and working under a 1.1 host; the
 * functions its table would hold past describe abort if the host took
 * them. */
Test(loader, plugin_of_minor_0_works_and_has_no_directory)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n", trace);
  ecc_connector_t *c = open_ok(th_fixture_ini("minor0", extra));
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  cr_assert_eq(m.abi_minor, 0);
  cr_assert_eq(m.negotiated_minor, 0);
  cr_assert_eq(count_lines_with(trace, "create 1 minor 0 "), 1, "trace: %s", th_read_file(trace));
  uint32_t block = 0;
  ecc_save_entry_t s = {.key = "a", .src = 0x1000, .nbytes = 1, .block_ids = &block, .n_blocks = 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(c, &st), ECC_OK);
  expect_no_directory(c);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* A plugin of ABI 1.1 keeps loading and working under a 1.2 host: its
 * directory is used, and the cache functions its table would hold past
 * list abort if the host took them. */
Test(loader, plugin_of_minor_1_keeps_its_directory_and_has_no_cache)
{
  ecc_connector_t *c = open_ok(th_fixture_ini("minor1", NULL));
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  cr_assert_eq(m.abi_minor, 1);
  cr_assert_eq(m.negotiated_minor, 1);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, "k", 10, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED);
  cr_assert_eq(e.token, 7);
  const char *keys[1] = {"k"};
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_ABSENT);
  ecc_reserve_args_t a = {.struct_size = sizeof(a), .key = "k", .nbytes = 10};
  ecc_peek_t p;
  ecc_entry_meta_t meta;
  ecc_load_typed_t l = {0};
  ecc_listed_t listed[1];
  ecc_event_t ev[1];
  uint64_t cursor = 0;
  size_t n = 9;
  cr_expect_eq(ecc_reserve_ex(c, &a, &e), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_peek(c, keys, 1, &p), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_wait_ready(c, "k", 1, 0, &e, &meta), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_lookup_ex(c, keys, 1, 1, &e, &meta), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_load_typed(c, &l, 1, NULL), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(ecc_list_ex(c, &cursor, listed, &meta, 1, &n), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(n, 0);
  n = 9;
  cr_expect_eq(ecc_events(c, &cursor, ev, 1, &n, NULL), ECC_ERR_UNSUPPORTED);
  cr_expect_eq(n, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(loader, plugin_without_directory_functions_answers_unsupported)
{
  ecc_connector_t *c = open_ok(th_fixture_ini("good", NULL));
  expect_no_directory(c);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* old_struct's optional pointers abort if called: the shim must not read
 * fields past the plugin's struct_size. */
Test(loader, optional_functions_past_struct_size_are_not_used)
{
  const char *ini = th_fixture_ini("old_struct", NULL);
  ecc_connector_t *c = open_ok(ini);
  ecc_stats_t st = {.struct_size = sizeof(st)};
  ecc_info_t info = {.struct_size = sizeof(info)};
  char buf[64];
  cr_assert_eq(ecc_get_stats(c, &st), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_describe(c, &info), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_last_error(c, buf, sizeof(buf)), ECC_ERR_UNSUPPORTED);
  cr_assert_eq(ecc_close(c), ECC_OK);
  char err[512];
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_OK, "err: %s", err);
  cr_assert_not_null(strstr(err, "has no validate function"), "err: %s", err);
}

Test(loader, optional_functions_are_forwarded)
{
  ecc_connector_t *c = open_ok(th_fixture_ini("full", NULL));
  uint32_t blocks[1] = {0};
  ecc_save_entry_t saves[3] = {{.key = "a", .nbytes = 1, .block_ids = blocks, .n_blocks = 1},
                               {.key = "b", .nbytes = 1, .block_ids = blocks, .n_blocks = 1},
                               {.key = "c", .nbytes = 1, .block_ids = blocks, .n_blocks = 1}};
  cr_assert_eq(ecc_save(c, saves, 3), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(c, &st), ECC_OK);
  cr_assert_eq(st.save.transfers, 1);
  cr_assert_eq(st.save.entries, 3);
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  cr_assert_str_eq(info.engine, "host");
  char buf[64] = "x";
  cr_assert_eq(ecc_last_error(c, buf, sizeof(buf)), ECC_OK);
  cr_assert_str_eq(buf, "");
  ecc_save_entry_t bad = {.key = NULL};
  cr_assert_eq(ecc_save(c, &bad, 1), ECC_ERR_INVALID);
  cr_assert_eq(ecc_last_error(c, buf, sizeof(buf)), ECC_OK);
  cr_assert_str_eq(buf, "save refused: -1");
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(loader, check_uses_validate_and_creates_nothing)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n[region]\nsize = 4096\n", trace);
  ecc_plugin_meta_t m;
  memset(&m, 0xff, sizeof(m));
  char err[512] = "";
  cr_assert_eq(ecc_check(th_fixture_ini("full", extra), NULL, &m, err, sizeof(err)), ECC_OK,
               "err: %s", err);
  cr_assert_str_eq(err, "fixture would create a connector from 2 keys");
  cr_assert_str_eq(m.name, "full");
  cr_assert_str_eq(m.version, "0.2.0");
  cr_assert_null(m.params, "params would dangle once the plugin is unloaded");
  cr_assert_eq(m.n_params, 0);
  cr_assert_not(th_exists(trace), "check must not create a connector");
  cr_assert_not(still_loaded(th_fixture("full")));

  const char *ini = th_fixture_ini("full", "[region]\nsize = 0\n");
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG);
  char want[PATH_MAX + 128];
  snprintf(want, sizeof(want),
           "%s:4: plugin 'full' refused the configuration: region.size: must be more than 0", ini);
  cr_assert_str_eq(err, want);
}

Test(loader, plugin_without_params_leaves_keys_to_create)
{
  const char *ini = th_fixture_ini("no_params", "[region]\nnmae = x\n");
  expect_open_fails(ini, ECC_ERR_CONFIG, "could not create a connector: unknown key 'region.nmae'");
  char err[512];
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_OK, "err: %s", err);
}

/* ---- check loads the plugin in a child process ---- */

/* Whether any mapping of this process comes from `path`'s file. */
static int mapped_here(const char *path)
{
  char *real = realpath(path, NULL);
  cr_assert_not_null(real, "%s: %s", path, strerror(errno));
  FILE *f = fopen("/proc/self/maps", "r");
  cr_assert_not_null(f);
  char line[PATH_MAX + 256];
  int found = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    const char *name = strchr(line, '/');
    if (name != NULL && strcmp(name, real) == 0)
      found = 1;
  }
  fclose(f);
  free(real);
  return found;
}

static ecc_open_options_t check_timeout(uint64_t ms)
{
  ecc_open_options_t o;
  memset(&o, 0, sizeof(o));
  o.struct_size = sizeof(o);
  o.log_level = -1;
  o.check_timeout_ms = ms;
  return o;
}

/* ecc_check and ecc_check_params on fixture `name` both fail with
 * ECC_ERR_INCOMPATIBLE, saying at the INI's path line how the check
 * process ended; this process goes on and never maps the plugin. */
static void expect_check_reports(const char *name, uint64_t timeout_ms, const char *how)
{
  const char *ini = th_fixture_ini(name, NULL);
  ecc_open_options_t o = check_timeout(timeout_ms);
  char want[2 * PATH_MAX], err[2048] = "";
  snprintf(want, sizeof(want), "%s:2: plugin %s: the check process %s", ini, th_fixture(name), how);
  int rc = ecc_check(ini, &o, NULL, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_INCOMPATIBLE, "rc %d: %s", rc, err);
  cr_assert_str_eq(err, want);
  ecc_plugin_meta_t *meta = (ecc_plugin_meta_t *)err; /* must be overwritten with NULL */
  rc = ecc_check_params(ini, &o, &meta, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_INCOMPATIBLE, "rc %d: %s", rc, err);
  cr_assert_null(meta);
  cr_assert_str_eq(err, want);
  cr_assert_not(mapped_here(th_fixture(name)), "the plugin was mapped into the caller");
}

/* Ends with exit status 7 on purpose: where the plugin is loaded into the
 * test's own process, its _exit(0) ends the test early with status 0,
 * which the test runner would take for a pass. */
Test(loader, check_reports_a_constructor_that_calls__exit_0, .exit_code = 7)
{
  expect_check_reports("ctor_exit0", 0,
                       "exited with status 0 while loading or validating the plugin, "
                       "before it reported");
  exit(7);
}

Test(loader, check_reports_a_constructor_that_calls_exit_42)
{
  expect_check_reports("ctor_exit42", 0,
                       "exited with status 42 while loading or validating the plugin, "
                       "before it reported");
}

Test(loader, check_reports_a_constructor_that_crashes)
{
  expect_check_reports("ctor_segv", 0,
                       "was killed by signal 11 (SIGSEGV: Segmentation fault) while loading "
                       "or validating the plugin, before it reported");
}

Test(loader, check_stops_a_constructor_that_never_returns)
{
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  expect_check_reports("ctor_hang", 300,
                       "did not finish loading and validating the plugin within 300 ms; it "
                       "was killed");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  cr_assert_lt(s, 5.0, "two checks of 300 ms took %.1f s", s);
}

/* The check process is a copy of the caller: an exit() in the plugin's
 * constructor must not run the caller's exit handlers there. */
static pid_t handler_owner;
static char handler_marker[128];

static void mark_if_run_elsewhere(void)
{
  if (getpid() == handler_owner)
    return;
  int fd = open(handler_marker, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0)
    close(fd);
}

Test(loader, exit_in_a_plugin_runs_none_of_the_callers_exit_handlers)
{
  handler_owner = getpid();
  snprintf(handler_marker, sizeof(handler_marker), "/tmp/ecc-exit-marker-%ld", (long)getpid());
  unlink(handler_marker);
  cr_assert_eq(atexit(mark_if_run_elsewhere), 0);
  const char *ini = th_fixture_ini("ctor_exit42", NULL);
  char err[1024];
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_INCOMPATIBLE, "%s", err);
  cr_assert_not(th_exists(handler_marker), "the caller's exit handler ran in the check process");
  cr_assert(th_exists(ini), "the test's own exit handler removed its files");
}

/* A host that ignores SIGCHLD has its children reaped by the kernel, so
 * the check process's status cannot be read: its report still counts, and
 * a child that sent none is an error rather than a success. */
Test(loader, check_works_when_the_caller_ignores_sigchld)
{
  cr_assert_neq(signal(SIGCHLD, SIG_IGN), SIG_ERR);
  char err[1024] = "";
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_check(th_fixture_ini("full", NULL), NULL, &m, err, sizeof(err)), ECC_OK, "%s",
               err);
  cr_assert_str_eq(m.name, "full");
  int rc = ecc_check(th_fixture_ini("ctor_exit42", NULL), NULL, NULL, err, sizeof(err));
  cr_assert_eq(rc, ECC_ERR_SYSTEM, "rc %d: %s", rc, err);
  cr_assert_not_null(strstr(err, "cannot learn how the check process ended"), "%s", err);
  cr_assert_neq(signal(SIGCHLD, SIG_DFL), SIG_ERR);
}

Test(loader, check_params_returns_every_key_in_one_block)
{
  const char *ini = th_fixture_ini("full", "[region]\nsize = 4096\n");
  ecc_plugin_meta_t *m = NULL;
  char err[512] = "";
  cr_assert_eq(ecc_check_params(ini, NULL, &m, err, sizeof(err)), ECC_OK, "%s", err);
  cr_assert_str_eq(err, "fixture would create a connector from 1 keys");
  cr_assert_not_null(m);
  char *real = realpath(th_fixture("full"), NULL);
  cr_assert_str_eq(m->path, real);
  free(real);
  cr_assert_str_eq(m->name, "full");
  cr_assert_str_eq(m->version, "0.2.0");
  cr_assert_eq(m->caps, ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE | ECC_CAP_STATS);
  static const char *const keys[] = {"connector.role", "region.name", "region.size", "good.trace",
                                     "good.tag"};
  static const char *const defaults[] = {"both", "default", "1MiB", "", ""};
  cr_assert_eq(m->n_params, 5);
  for (size_t i = 0; i < 5; i++) {
    cr_assert_str_eq(m->params[i].key, keys[i]);
    cr_assert_str_eq(m->params[i].default_value, defaults[i]);
    cr_assert_not_null(m->params[i].help);
    cr_assert_gt(strlen(m->params[i].help), 5);
  }
  cr_assert_not(mapped_here(th_fixture("full")));
  free(m);

  char *before = (char *)err;
  ecc_plugin_meta_t *none = (ecc_plugin_meta_t *)before;
  cr_assert_eq(ecc_check_params(th_fixture_ini("full", "[region]\nsize = 0\n"), NULL, &none, err,
                                sizeof(err)),
               ECC_ERR_CONFIG);
  cr_assert_null(none);
  cr_assert_not_null(strstr(err, "region.size: must be more than 0"), "%s", err);
  cr_assert_eq(ecc_check_params(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_not_null(strstr(err, "out is NULL"), "%s", err);
}

Test(loader, check_timeout_option_is_bounded)
{
  const char *ini = th_fixture_ini("full", NULL);
  ecc_open_options_t o = check_timeout(3600001);
  char err[256] = "";
  cr_assert_eq(ecc_check(ini, &o, NULL, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_not_null(strstr(err, "check_timeout_ms 3600001 is more than 3600000"), "%s", err);
  o = check_timeout(3600000);
  cr_assert_eq(ecc_check(ini, &o, NULL, err, sizeof(err)), ECC_OK, "%s", err);
  /* A caller built before the field existed: its struct_size ends before
   * it, so the value there is not read and the default (10 s) applies. */
  o = check_timeout(5);
  o.struct_size = offsetof(ecc_open_options_t, check_timeout_ms);
  cr_assert_eq(ecc_check(th_fixture_ini("ctor_hang", NULL), &o, NULL, err, sizeof(err)),
               ECC_ERR_INCOMPATIBLE);
  cr_assert_not_null(strstr(err, "within 10000 ms; it was killed"), "%s", err);
}

/* ---- finding the file ---- */

Test(loader, missing_file_is_told_apart_from_a_corrupt_one)
{
  const char *dir = private_dir();
  char missing[PATH_MAX], corrupt[PATH_MAX], want[PATH_MAX + 64];
  snprintf(missing, sizeof(missing), "%s/libecc-absent.so", dir);
  snprintf(corrupt, sizeof(corrupt), "%s/libecc-corrupt.so", dir);

  snprintf(want, sizeof(want), "plugin file not found: %s", missing);
  const char *ini = th_ini_text("[plugin]\npath = %s\n", missing);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);

  FILE *f = fopen(corrupt, "wb");
  cr_assert_not_null(f);
  fputs("\x7f"
        "ELF but not really; just some garbage bytes",
        f);
  fclose(f);
  chmod(corrupt, 0644);
  snprintf(want, sizeof(want), "cannot load plugin %s: ", corrupt);
  ini = th_ini_text("[plugin]\npath = %s\n", corrupt);
  char err[1024];
  ecc_connector_t *c;
  cr_assert_eq(open_ini(ini, &c, err, sizeof(err)), ECC_ERR_SYSTEM, "err: %s", err);
  cr_assert_not_null(strstr(err, want), "err: %s", err);
  cr_assert_null(strstr(err, "not found"), "a corrupt file is not a missing one: %s", err);
  unlink(corrupt);
  rmdir(dir);
}

Test(loader, relative_path_is_refused)
{
  const char *ini =
      th_ini_text("[plugin]\nlog_level = error\npath = tests/fixtures/libecc-good.so\n");
  char want[PATH_MAX];
  snprintf(want, sizeof(want), "%s:3: plugin path 'tests/fixtures/libecc-good.so' must be absolute",
           ini);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);
}

Test(loader, short_names_cannot_leave_the_plugin_dir)
{
  char too_long[ECC_NAME_MAX + 2];
  memset(too_long, 'a', ECC_NAME_MAX + 1);
  too_long[ECC_NAME_MAX + 1] = '\0';
  const char *bad[] = {"../good", "fixtures/good", "good.so", "go od", too_long};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *ini = th_ini_text("[plugin]\nname = %s\ndir = %s\n", bad[i], ECC_FIXTURE_DIR);
    char want[256];
    snprintf(want, sizeof(want), "%s:2: bad plugin name '%s'", ini, bad[i]);
    expect_open_fails(ini, ECC_ERR_CONFIG, want);
  }
  /* ECC_NAME_MAX characters is still a name */
  too_long[ECC_NAME_MAX] = '\0';
  const char *ini = th_ini_text("[plugin]\nname = %s\ndir = %s\n", too_long, ECC_FIXTURE_DIR);
  expect_open_fails(ini, ECC_ERR_CONFIG, "plugin file not found: ");
}

Test(loader, short_name_resolves_in_plugin_dir)
{
  setenv("ECC_PLUGIN_DIR", "/nonexistent-ecc-dir", 1); /* [plugin] dir comes first */
  const char *ini = th_ini_text("[plugin]\nname = good\ndir = %s/\n", ECC_FIXTURE_DIR);
  ecc_connector_t *c = open_ok(ini);
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  char *real = realpath(th_fixture("good"), NULL);
  cr_assert_str_eq(m.path, real);
  free(real);
  cr_assert_eq(ecc_close(c), ECC_OK);

  ini = th_ini_text("[plugin]\nname = good\ndir = relative/dir\n");
  char want[256];
  snprintf(want, sizeof(want), "%s:3: plugin dir 'relative/dir' must be an absolute path", ini);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);
}

Test(loader, short_name_resolves_in_env_dir)
{
  setenv("ECC_PLUGIN_DIR", ECC_FIXTURE_DIR, 1);
  ecc_connector_t *c = open_ok(th_ini_text("[plugin]\nname = full\n"));
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  cr_assert_str_eq(m.name, "full");
  cr_assert_eq(ecc_close(c), ECC_OK);

  setenv("ECC_PLUGIN_DIR", "not/absolute", 1);
  expect_open_fails(th_ini_text("[plugin]\nname = full\n"), ECC_ERR_CONFIG,
                    "ECC_PLUGIN_DIR 'not/absolute' must be an absolute path");
}

/* Without dir or ECC_PLUGIN_DIR a name is looked up in "ecc" beside
 * libecc-host.so, which in the build tree is where the real plugin goes. */
Test(loader, short_name_defaults_to_the_dir_beside_the_library)
{
  unsetenv("ECC_PLUGIN_DIR");
  Dl_info info;
  cr_assert(dladdr((void *)ecc_open, &info) != 0);
  char *lib = realpath(info.dli_fname, NULL);
  cr_assert_not_null(lib);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof(want), "%.*s/ecc/libecc-shm.so", (int)(strrchr(lib, '/') - lib), lib);
  free(lib);
  const char *ini = th_ini_text("[plugin]\nname = shm\n[region]\nblock_size = 4096\n");
  char err[1024];
  ecc_plugin_meta_t m;
  int rc = ecc_check(ini, NULL, &m, err, sizeof(err));
  if (th_exists(want)) {
    cr_assert_eq(rc, ECC_OK, "err: %s", err);
    char *real = realpath(want, NULL);
    cr_assert_str_eq(m.path, real);
    free(real);
  } else {
    char msg[PATH_MAX + 128];
    snprintf(msg, sizeof(msg), "%s:2: plugin file not found: %s", ini, want);
    cr_assert_eq(rc, ECC_ERR_CONFIG);
    cr_assert_str_eq(err, msg);
  }
}

Test(loader, not_a_regular_file_is_refused)
{
  const char *dir = private_dir();
  char want[PATH_MAX];
  snprintf(want, sizeof(want), "plugin %s: %s is not a regular file", dir, dir);
  expect_open_fails(th_ini_text("[plugin]\npath = %s\n", dir), ECC_ERR_CONFIG, want);
  rmdir(dir);
}

Test(loader, world_writable_plugin_or_dir_is_refused)
{
  const char *dir = private_dir();
  cr_assert_eq(chmod(dir, 0755), 0);
  char copy[PATH_MAX], want[3 * PATH_MAX];
  snprintf(copy, sizeof(copy), "%s/libecc-copy.so", dir);
  th_copy_file(th_fixture("good"), copy, 0666);
  const char *ini = th_ini_text("[plugin]\npath = %s\n", copy);
  snprintf(want, sizeof(want), "plugin %s refused: %s is writable by others (mode 0666)", copy,
           copy);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);

  cr_assert_eq(chmod(copy, 0644), 0);
  cr_assert_eq(chmod(dir, 0777), 0);
  snprintf(want, sizeof(want),
           "plugin %s refused: %s is writable by others (mode 0777) and is not a sticky directory",
           copy, dir);
  expect_open_fails(ini, ECC_ERR_CONFIG, want);
  /* the same name through the directory: refused as well */
  expect_open_fails(th_ini_text("[plugin]\nname = copy\ndir = %s\n", dir), ECC_ERR_CONFIG, want);

  cr_assert_eq(chmod(dir, 0755), 0);
  ecc_connector_t *c = open_ok(ini);
  cr_assert_eq(ecc_close(c), ECC_OK);
  unlink(copy);
  rmdir(dir);
}

/* ---- lifecycle ---- */

/* The state machine the shim relies on, checked on the table directly:
 * shutdown twice, and any call after shutdown, answer ECC_ERR_CLOSED. */
Test(loader, plugin_state_machine_after_shutdown)
{
  void *dl = dlopen(th_fixture("good"), RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(dl, "%s", dlerror());
  const ecc_plugin_v1_t *t = dlsym(dl, ECC_PLUGIN_V1_SYMBOL);
  cr_assert_not_null(t);
  ecc_create_args_v1_t args = {.struct_size = sizeof(args), .abi_major = 1, .abi_minor = 0};
  ecc_handle_t a = 0, b = 0;
  cr_assert_eq(t->create(&args, &a), ECC_OK);
  cr_assert_eq(t->create(&args, &b), ECC_OK);
  cr_assert_neq(a, 0);
  cr_assert_neq(a, b);
  cr_assert_eq(t->shutdown(a), ECC_OK);
  cr_assert_eq(t->shutdown(a), ECC_ERR_CLOSED);

  uint32_t blocks[1] = {0};
  ecc_save_entry_t save = {.key = "k", .nbytes = 1, .block_ids = blocks, .n_blocks = 1};
  ecc_load_entry_t load = {.transfer_id = 1, .block_ids = blocks, .n_blocks = 1, .dst_capacity = 1};
  ecc_completion_t done[1];
  size_t n = 0;
  cr_assert_eq(t->save(a, &save, 1), ECC_ERR_CLOSED);
  cr_assert_eq(t->flush(a, NULL), ECC_ERR_CLOSED);
  cr_assert_eq(t->load(a, &load, 1, NULL), ECC_ERR_CLOSED);
  cr_assert_eq(t->poll(a, done, 1, &n), ECC_ERR_CLOSED);
  cr_assert_eq(t->shutdown(0), ECC_ERR_CLOSED, "0 is never a handle");
  cr_assert_eq(t->poll(b + 1000, done, 1, &n), ECC_ERR_CLOSED, "a handle never issued");
  /* the other handle is untouched */
  cr_assert_eq(t->save(b, &save, 1), ECC_OK);
  cr_assert_eq(t->shutdown(b), ECC_OK);
  dlclose(dl);
}

Test(loader, two_connectors_share_one_loaded_plugin)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n", trace);
  const char *ini = th_fixture_ini("good", extra);
  ecc_connector_t *a = open_ok(ini);
  ecc_connector_t *b = open_ok(ini);
  cr_assert_eq(ecc_close(a), ECC_OK);
  cr_assert(still_loaded(th_fixture("good")), "b still needs the plugin");
  uint32_t blocks[1] = {0};
  ecc_save_entry_t save = {.key = "k", .nbytes = 1, .block_ids = blocks, .n_blocks = 1};
  cr_assert_eq(ecc_save(b, &save, 1), ECC_OK);
  cr_assert_eq(ecc_close(b), ECC_OK);
  cr_assert(still_loaded(th_fixture("good")), "an accepted plugin stays loaded");
  cr_assert_eq(count_lines_with(trace, "create "), 2);
  cr_assert_eq(count_lines_with(trace, "shutdown "), 2);
}

Test(loader, load_unload_loop_leaks_no_fds)
{
  const char *ini = th_fixture_ini("good", NULL);
  const char *broken = th_fixture_ini("null_required", NULL);
  char err[512];
  int before = th_count_fds();
  for (int i = 0; i < 200; i++) {
    ecc_connector_t *c = NULL;
    cr_assert_eq(ecc_open(ini, NULL, &c, err, sizeof(err)), ECC_OK, "round %d: %s", i, err);
    cr_assert_eq(ecc_close(c), ECC_OK);
    cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_OK);
    cr_assert_eq(ecc_open(broken, NULL, &c, err, sizeof(err)), ECC_ERR_INCOMPATIBLE);
  }
  cr_assert_eq(th_count_fds(), before, "file descriptors leaked");
  cr_assert(still_loaded(th_fixture("good")), "an accepted plugin stays loaded");
  cr_assert_not(still_loaded(th_fixture("null_required")), "a refused plugin is unloaded");
}

/* The handles the good fixture gave, in order, read back from its trace. */
static size_t traced_handles(const char *trace, unsigned long long *out, size_t cap)
{
  const char *text = th_read_file(trace);
  size_t n = 0;
  for (const char *line = text; line != NULL && *line != '\0' && n < cap;) {
    unsigned long long h;
    if (sscanf(line, "create %llu ", &h) == 1)
      out[n++] = h;
    const char *nl = strchr(line, '\n');
    line = nl != NULL ? nl + 1 : NULL;
  }
  return n;
}

/* The header promises that a handle stays invalid after its shutdown for
 * the life of the process. Closing the last connector must therefore not
 * unload the plugin: loading it again would start its handle table afresh
 * and give the old value out again. */
Test(loader, shut_handle_stays_invalid_after_the_plugin_is_opened_again)
{
  const char *trace = th_trace_path();
  char extra[256];
  snprintf(extra, sizeof(extra), "[good]\ntrace = %s\n", trace);
  const char *ini = th_fixture_ini("good", extra);
  cr_assert_eq(ecc_close(open_ok(ini)), ECC_OK);
  ecc_connector_t *c = open_ok(ini);
  unsigned long long h[2];
  cr_assert_eq(traced_handles(trace, h, 2), 2, "trace: %s", th_read_file(trace));
  /* Only now does this test hold a reference of its own. */
  void *dl = dlopen(th_fixture("good"), RTLD_NOW | RTLD_NOLOAD);
  cr_assert_not_null(dl, "the open connector's plugin is not loaded");
  const ecc_plugin_v1_t *t = dlsym(dl, ECC_PLUGIN_V1_SYMBOL);
  cr_assert_not_null(t);
  ecc_completion_t done[1];
  size_t n = 0;
  cr_assert_eq(t->poll(h[0], done, 1, &n), ECC_ERR_CLOSED,
               "handle %llu, shut down by the first ecc_close, works again after the reopen "
               "(the second connector got %llu)",
               h[0], h[1]);
  uint32_t blocks[1] = {0};
  ecc_save_entry_t save = {.key = "k", .nbytes = 1, .block_ids = blocks, .n_blocks = 1};
  cr_assert_eq(t->save(h[0], &save, 1), ECC_ERR_CLOSED);
  cr_assert_eq(t->shutdown(h[0]), ECC_ERR_CLOSED);
  cr_assert_neq(h[0], h[1]);
  cr_assert_eq(ecc_save(c, &save, 1), ECC_OK, "the open connector is untouched");
  cr_assert_eq(ecc_close(c), ECC_OK);
  dlclose(dl);
  cr_assert_eq(count_lines_with(trace, "shutdown "), 2, "trace: %s", th_read_file(trace));
}

/* ---- logging ---- */

struct log_capture {
  int count;
  int max_level;
  char text[2048];
};

static void capture(void *user, int level, const char *msg)
{
  struct log_capture *cap = user;
  cap->count++;
  if (level > cap->max_level)
    cap->max_level = level;
  size_t used = strlen(cap->text);
  snprintf(cap->text + used, sizeof(cap->text) - used, "%d:%s\n", level, msg);
}

Test(loader, log_sink_and_level_reach_plugin_and_shim)
{
  struct log_capture cap = {.max_level = -1};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = capture, .log_user = &cap, .log_level = ECC_LOG_INFO};
  const char *ini = th_fixture_ini("good", NULL);
  ecc_connector_t *c = NULL;
  char err[512];
  cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "%s", err);
  cr_assert_not_null(strstr(cap.text, "2:fixture: created a connector"), "log: %s", cap.text);
  cr_assert_not_null(strstr(cap.text, "2:loaded plugin 'good' 0.1.0 from "), "log: %s", cap.text);
  cr_assert_eq(ecc_close(c), ECC_OK);

  /* the INI's level applies when the options leave it to the file */
  struct log_capture quiet = {.max_level = -1};
  opt.log_user = &quiet;
  opt.log_level = -1;
  cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "%s", err);
  cr_assert_eq(quiet.count, 0, "default level is warn: %s", quiet.text);
  cr_assert_eq(ecc_close(c), ECC_OK);

  struct log_capture chatty = {.max_level = -1};
  opt.log_user = &chatty;
  ini = th_ini_text("[plugin]\npath = %s\nlog_level = debug\n", th_fixture("good"));
  cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "%s", err);
  cr_assert_eq(chatty.count, 2, "log: %s", chatty.text);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- status names ---- */

Test(loader, strerror_names_every_code)
{
  static const struct {
    int code;
    const char *name;
  } codes[] = {
#define CODE(name, value, text) {name, #name ": "},
      ECC_STATUS_MAP(CODE)
#undef CODE
  };
  size_t n = sizeof(codes) / sizeof(codes[0]);
  /* The set is 0, -1, ..., ECC_STATUS_MIN, each code once. */
  cr_assert_eq(n, (size_t)(1 - ECC_STATUS_MIN));
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq(codes[i].code, -(int)i, "%s is out of order", codes[i].name);
    const char *s = ecc_strerror(codes[i].code);
    cr_assert_eq(strncmp(s, codes[i].name, strlen(codes[i].name)), 0, "%d -> %s", codes[i].code, s);
    cr_assert_gt(strlen(s), strlen(codes[i].name) + 2, "%s has no description", s);
  }
  /* Unknown codes get one constant text: the pointer stays valid forever,
   * also across threads and later calls. */
  const char *unknown = ecc_strerror(ECC_ERR_UNSUPPORTED - 1);
  cr_assert(strstr(unknown, "unknown status code") == unknown, "%s", unknown);
  cr_assert_eq(ecc_strerror(5), unknown);
  cr_assert_eq(ecc_strerror(-99), unknown);
}
