/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ini.c - the shim's reading of INI files and overrides: every mistake
 * is reported with the file and line at fault (or as an override), and
 * overrides replace or add pairs before the plugin sees them.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define GOOD ECC_FIXTURE_DIR "/libecc-good.so"

/* ---- helpers ---- */

/* ecc_check and ecc_open must both refuse `ini` with `code` and exactly the
 * text "<ini>:<line>: <what>" (or "<ini>: <what>" for line 0). */
static void expect_error(const char *ini, const ecc_open_options_t *opt, int code, int line,
                         const char *what)
{
  char want[2048], err[2048] = "";
  if (line > 0)
    snprintf(want, sizeof(want), "%s:%d: %s", ini, line, what);
  else
    snprintf(want, sizeof(want), "%s: %s", ini, what);
  int rc = ecc_check(ini, opt, NULL, err, sizeof(err));
  cr_assert_eq(rc, code, "ecc_check: %d (%s)", rc, err);
  cr_assert_str_eq(err, want);

  ecc_connector_t *c = (ecc_connector_t *)err;
  err[0] = '\0';
  rc = ecc_open(ini, opt, &c, err, sizeof(err));
  cr_assert_eq(rc, code, "ecc_open: %d (%s)", rc, err);
  cr_assert_null(c);
  cr_assert_str_eq(err, want);
}

static void open_and_close(const char *ini, const ecc_open_options_t *opt)
{
  char err[1024] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini, opt, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open: %d %s", rc, err);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* A line "tag = xxx..." exactly `len` characters long. */
static char *tag_line(size_t len)
{
  static char line[512];
  cr_assert_lt(len, sizeof(line));
  memset(line, 0, sizeof(line));
  memcpy(line, "tag = ", 6);
  for (size_t i = 6; i < len; i++)
    line[i] = (char)('a' + i % 26);
  return line;
}

/* ---- syntax ---- */

Test(ini, syntax_error_names_the_line)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\n; a comment\nthis is not a pair\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4, "syntax error: expected 'key = value' or '[section]'");
}

Test(ini, unclosed_section_header)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\n\n[region\nname = x\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4, "syntax error: section header has no closing ']'");
}

Test(ini, bad_section_names)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\n[re gion]\nname = x\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3,
               "bad section name '[re gion]': use letters, digits, '_', '-' and '.'");
  ini = th_ini_text("[plugin]\npath = %s\n[]\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3, "empty section name '[]'");
  char name[64];
  memset(name, 's', 50);
  name[50] = '\0';
  ini = th_ini_text("[plugin]\npath = %s\n[%s]\nkey = 1\n", GOOD, name);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3, "section name longer than 49 characters");
}

Test(ini, nul_byte_is_refused)
{
  char text[256];
  int n = snprintf(text, sizeof(text), "[plugin]\npath = %s\n[region]\nname = a", GOOD);
  cr_assert_lt((size_t)n + 8, sizeof(text));
  memcpy(text + n, "\0b\n", 3);
  const char *ini = th_write_temp("", ".ini");
  FILE *f = fopen(ini, "wb");
  cr_assert_not_null(f);
  fwrite(text, 1, (size_t)n + 3, f);
  fclose(f);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4, "NUL byte in line");
}

Test(ini, the_first_error_is_reported)
{
  const char *ini =
      th_ini_text("[plugin]\npath = %s\n[region]\nname = a\nname = b\nnot a pair\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 5, "duplicate key 'region.name' (first set on line 4)");
  ini = th_ini_text("[plugin]\npath = %s\n[region]\nnot a pair\nname = a\nname = b\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4, "syntax error: expected 'key = value' or '[section]'");
}

/* ---- keys and values ---- */

Test(ini, duplicate_key)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\n\n[region]\n# the name\nname = a\n"
                                "[connector]\nrole = both\n[region]\nname = b\n",
                                GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 10, "duplicate key 'region.name' (first set on line 6)");
  ini = th_ini_text("[plugin]\npath = %s\nlog_level = info\npath = %s\n", GOOD, GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
               "duplicate key 'path' in [plugin] (first set on line 2)");
}

Test(ini, key_before_any_section)
{
  const char *ini = th_ini_text("\nname = good\n[plugin]\npath = %s\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 2,
               "key 'name' is outside any section (put it under a [section])");
}

Test(ini, empty_value_is_refused)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\n[region]\nname =\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
               "key 'name' in [region] has an empty value (delete the line to use the default)");
  ini = th_ini_text("[plugin]\npath = %s\ndir = \n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3,
               "key 'dir' in [plugin] has an empty value (delete the line to use the default)");
}

Test(ini, unknown_plugin_section_key)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\npth = x\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3,
               "unknown key 'pth' in [plugin] (accepted: name, path, dir, log_level)");
}

Test(ini, bad_log_level)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\nlog_level = loud\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3, "bad log_level 'loud' (error | warn | info | debug)");
}

/* ---- the [plugin] section ---- */

Test(ini, both_name_and_path)
{
  const char *ini = th_ini_text("[plugin]\nname = good\npath = %s\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 3,
               "[plugin] gives both 'name' (line 2) and 'path' (line 3); keep one");
}

Test(ini, neither_name_nor_path)
{
  const char *ini = th_ini_text("[region]\nname = x\n\n[plugin]\nlog_level = info\n");
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
               "[plugin] needs 'name' (a short name) or 'path' (an absolute path)");
  ini = th_ini_text("[region]\nname = x\n");
  expect_error(ini, NULL, ECC_ERR_CONFIG, 0,
               "no [plugin] section: it must give the plugin's 'name' or 'path'");
}

Test(ini, missing_file)
{
  char err[512], want[512];
  const char *path = "/nonexistent-ecc-dir/none.ini";
  snprintf(want, sizeof(want), "cannot open INI file %s: not found", path);
  cr_assert_eq(ecc_check(path, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_assert_str_eq(err, want);
}

/* ---- line length ---- */

/* inih needs room for the line, its newline and a NUL in INI_MAX_LINE (200)
 * bytes: 198 characters fit, 199 do not, and the line number is right. */
Test(ini, long_lines)
{
  const char *trace = th_trace_path();
  const char *ini =
      th_ini_text("[plugin]\npath = %s\n[good]\ntrace = %s\n%s\n", GOOD, trace, tag_line(198));
  open_and_close(ini, NULL);
  const char *text = th_read_file(trace);
  cr_assert_not_null(text);
  char want[256];
  snprintf(want, sizeof(want), "tag %s\n", tag_line(198) + 6);
  cr_assert_not_null(strstr(text, want), "the whole value must arrive: %s", text);

  ini =
      th_ini_text("[plugin]\npath = %s\n[good]\ntrace = %s\n%s\n[x]\n", GOOD, trace, tag_line(199));
  expect_error(ini, NULL, ECC_ERR_CONFIG, 5, "line longer than 198 characters");
  ini = th_ini_text("[plugin]\npath = %s\n\n%s\nnot a pair\n", GOOD, tag_line(300));
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4, "line longer than 198 characters");
}

/* ---- what is accepted ---- */

Test(ini, comments_indentation_crlf_and_colons)
{
  const char *trace = th_trace_path();
  /* The indented "trace" after "tag" would be a continuation of tag's value
   * to inih; the shim reads it as a key of its own. */
  const char *ini = th_ini_text("\xEF\xBB\xBF; comment\r\n# another\r\n  [plugin]  \r\n"
                                "   path = %s ; why this one\r\n\r\n[good]\r\n"
                                "tag: a b ; inline comment\r\n    trace = %s\r\n",
                                GOOD, trace);
  open_and_close(ini, NULL);
  const char *text = th_read_file(trace);
  cr_assert_not_null(text, "trace was not taken as a key of its own");
  cr_assert_not_null(strstr(text, "n_config 2 tag a b\n"), "trace: %s", text);
}

/* ---- comments: '#' and ';' alike ---- */

static const char comment_chars[] = {'#', ';'};

/* The value good.tag reaches the plugin with, from the line "tag<rest>". */
static const char *tag_as_read(const char *rest)
{
  const char *trace = th_trace_path();
  const char *ini =
      th_ini_text("[plugin]\npath = %s\n[good]\ntrace = %s\ntag%s\n", GOOD, trace, rest);
  open_and_close(ini, NULL);
  static char tag[256];
  const char *text = th_read_file(trace);
  cr_assert_not_null(text, "no trace for tag%s", rest);
  const char *at = strstr(text, " tag ");
  cr_assert_not_null(at, "trace: %s", text);
  snprintf(tag, sizeof(tag), "%.*s", (int)strcspn(at + 5, "\n"), at + 5);
  return tag;
}

/* tmpl with every '@' replaced by c. */
static const char *with_char(const char *tmpl, char c)
{
  static char text[2][128];
  static int next;
  char *out = text[next++ % 2];
  snprintf(out, sizeof(text[0]), "%s", tmpl);
  for (char *p = out; (p = strchr(p, '@')) != NULL; p++)
    *p = c;
  return out;
}

/* A '#' or ';' after a blank starts a comment; anywhere else it is text.
 * Each case is the rest of the line after "tag" and the value read, with
 * '@' standing for the comment character. */
Test(ini, comment_characters_in_a_plugin_section_value)
{
  static const struct {
    const char *rest, *value;
  } cases[] = {
      {" = a b @ note", "a b"}, {" = a\t@note", "a"},     {" = a@b", "a@b"},
      {" =@b", "@b"},           {" = /x@y @@ z", "/x@y"},
  };
  for (size_t i = 0; i < sizeof(comment_chars); i++) {
    char c = comment_chars[i];
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
      const char *rest = with_char(cases[k].rest, c);
      cr_expect_str_eq(tag_as_read(rest), with_char(cases[k].value, c), "tag%s", rest);
    }
  }
}

Test(ini, comment_characters_in_plugin_keys)
{
  for (size_t i = 0; i < sizeof(comment_chars); i++) {
    char c = comment_chars[i];
    ecc_plugin_meta_t m;
    char err[1024] = "";
    const char *ini = th_ini_text("%c whole line\n  %c indented\n[plugin] %c header\n"
                                  "path = %s %c which plugin\nlog_level = info\t%c note\n",
                                  c, c, c, GOOD, c, c);
    cr_assert_eq(ecc_check(ini, NULL, &m, err, sizeof(err)), ECC_OK, "'%c': %s", c, err);
    cr_assert_str_eq(m.name, "good");

    char text[32];
    snprintf(text, sizeof(text), "info%cnote", c);
    ini = th_ini_text("[plugin]\npath = %s\nlog_level = %s\n", GOOD, text);
    char want[128];
    snprintf(want, sizeof(want), "bad log_level '%s' (error | warn | info | debug)", text);
    expect_error(ini, NULL, ECC_ERR_CONFIG, 3, want);

    ini = th_ini_text("[plugin]\npath = %s%cx\n", GOOD, c);
    cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG);
    snprintf(want, sizeof(want), "plugin file not found: %s%cx", GOOD, c);
    cr_assert_not_null(strstr(err, want), "'%c': %s", c, err);
  }
}

/* What a comment leaves must still be a whole line. */
Test(ini, a_comment_can_leave_a_line_incomplete)
{
  for (size_t i = 0; i < sizeof(comment_chars); i++) {
    char c = comment_chars[i];
    const char *ini = th_ini_text("[plugin]\npath = %s\n[good]\ntag = %cnote\n", GOOD, c);
    expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
                 "key 'tag' in [good] has an empty value (delete the line to use the default)");
    ini = th_ini_text("[plugin]\npath = %s\n[go %cod]\n", GOOD, c);
    expect_error(ini, NULL, ECC_ERR_CONFIG, 3, "syntax error: section header has no closing ']'");
    ini = th_ini_text("[plugin]\npath = %s\n[good]\ntag %c= x\n", GOOD, c);
    expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
                 "syntax error: expected 'key = value' or '[section]'");
  }
}

/* The two lines the issue was about, with the real plugin: the size is
 * 4 KiB and the region file goes in the directory, not in "dir #note". */
Test(ini, comments_after_values_of_the_real_plugin)
{
  if (!th_exists(ECC_PLUGIN_PATH))
    cr_skip_test("%s is not built", ECC_PLUGIN_PATH);
  char dir[64];
  snprintf(dir, sizeof(dir), "/dev/shm/eccini-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  const char *name = th_region_name();
  const char *ini = th_ini_text("[plugin]\npath = %s\n[region]\ndir = %s #note\nname = %s ; x\n"
                                "block_size = 64\nsize = 4KiB ; note\n[engine]\ntype = host\n",
                                ECC_PLUGIN_PATH, dir, name);
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, ECC_OK, "%s", err);
  cr_expect(th_exists(th_region_path(dir, name)), "no region file in %s", dir);
  ecc_info_t info = {.struct_size = sizeof(info)};
  if (rc == ECC_OK) {
    cr_expect_eq(ecc_describe(c, &info), ECC_OK);
    cr_expect_eq(info.num_blocks, 64, "4KiB of 64-byte blocks: %llu blocks",
                 (unsigned long long)info.num_blocks);
  }
  ecc_close(c);
  th_remove_tree(dir);
}

/* ---- keys against the plugin's published params ---- */

Test(ini, unknown_key_is_named_with_its_line_before_create)
{
  const char *trace = th_trace_path();
  const char *ini =
      th_ini_text("[plugin]\npath = %s\n[good]\ntrace = %s\n[region]\nnmae = x\n", GOOD, trace);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 6,
               "unknown key 'region.nmae' (the plugin 'good' accepts: connector.role, "
               "region.name, region.size, good.trace, good.tag); did you mean 'region.name'?");
  cr_assert_not(th_exists(trace), "create must not run");

  ini = th_ini_text("[plugin]\npath = %s\n[region]\nsomething = x\n", GOOD);
  expect_error(ini, NULL, ECC_ERR_CONFIG, 4,
               "unknown key 'region.something' (the plugin 'good' accepts: connector.role, "
               "region.name, region.size, good.trace, good.tag)");
}

Test(ini, unknown_key_with_the_real_plugin)
{
  if (!th_exists(ECC_PLUGIN_PATH))
    cr_skip_test("%s is not built", ECC_PLUGIN_PATH);
  const char *ini =
      th_ini_text("[plugin]\npath = %s\n[region]\nnmae = x\nblock_size = 4096\n", ECC_PLUGIN_PATH);
  char err[4096], want[512];
  snprintf(want, sizeof(want), "%s:4: unknown key 'region.nmae' (the plugin 'shm' accepts: ", ini);
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, sizeof(err)), ECC_ERR_CONFIG, "err: %s", err);
  cr_assert_eq(strncmp(err, want, strlen(want)), 0, "err: %s", err);
  cr_assert_not_null(strstr(err, "region.name"), "err: %s", err);
}

/* ---- log levels ---- */

/* Which levels a connector's log callback was called with. */
struct levels_seen {
  atomic_int count[ECC_LOG_DEBUG + 2]; /* the last slot: levels out of range */
};

static void note_level(void *user, int level, const char *msg)
{
  (void)msg;
  struct levels_seen *seen = user;
  int slot = level >= 0 && level <= ECC_LOG_DEBUG ? level : ECC_LOG_DEBUG + 1;
  atomic_fetch_add(&seen->count[slot], 1);
}

Test(ini, every_log_level_parses_and_filters_what_is_passed_on)
{
  static const struct {
    int value;
    const char *name;
  } levels[] = {
#define LEVEL_CASE(constant, value, text) {constant, text},
      ECC_LOG_LEVEL_MAP(LEVEL_CASE)
#undef LEVEL_CASE
  };
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
    const char *ini = th_ini_text("[plugin]\npath = %s\nlog_level = %s\n[region]\nname = %s\n"
                                  "block_size = 64\nsize = 4KiB\n[engine]\ntype = host\n",
                                  ECC_PLUGIN_PATH, levels[i].name, th_region_name());
    static struct levels_seen seen;
    for (int l = 0; l <= ECC_LOG_DEBUG + 1; l++)
      atomic_store(&seen.count[l], 0);
    ecc_open_options_t opt = {
        .struct_size = sizeof(opt), .log = note_level, .log_user = &seen, .log_level = -1};
    ecc_connector_t *c = NULL;
    char err[512] = "";
    cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "log_level = %s: %s",
                 levels[i].name, err);
    /* Creating logs at info (what was built), each batch at debug. */
    static uint8_t buf[64];
    uint32_t id = 0;
    ecc_save_entry_t e = {"k", (uint64_t)(uintptr_t)buf, sizeof(buf), &id, 1};
    cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
    ecc_completion_t done[1];
    cr_assert_eq(th_poll_until(c, done, 1, 5000), 1);
    cr_assert_eq(ecc_close(c), ECC_OK);
    for (int l = 0; l <= ECC_LOG_DEBUG + 1; l++) {
      int n = atomic_load(&seen.count[l]);
      if (l > levels[i].value)
        cr_expect_eq(n, 0, "log_level = %s passed on %d messages of level %d", levels[i].name, n,
                     l);
      else if (l >= ECC_LOG_INFO)
        cr_expect_gt(n, 0, "log_level = %s passed on no message of level %d", levels[i].name, l);
    }
  }
}

/* ---- overrides ---- */

Test(ini, override_replaces_and_adds_keys)
{
  const char *in_file = th_trace_path();
  const char *overridden = th_trace_path();
  const char *ini = th_ini_text("[plugin]\npath = %s\n[good]\ntrace = %s\n", GOOD, in_file);
  ecc_kv_t kv[2] = {{"good.trace", overridden}, {"good.tag", "from-override"}};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = kv, .n_overrides = 2, .log_level = -1};
  open_and_close(ini, &opt);
  cr_assert_not(th_exists(in_file), "the INI's good.trace must be replaced");
  const char *text = th_read_file(overridden);
  cr_assert_not_null(text);
  cr_assert_not_null(strstr(text, "n_config 2 tag from-override\n"), "trace: %s", text);
}

Test(ini, override_of_plugin_path_replaces_name)
{
  const char *ini = th_ini_text("[plugin]\nname = not-installed\nlog_level = error\n");
  ecc_kv_t kv[1] = {{"plugin.path", GOOD}};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = kv, .n_overrides = 1, .log_level = -1};
  ecc_plugin_meta_t m;
  char err[1024];
  cr_assert_eq(ecc_check(ini, &opt, &m, err, sizeof(err)), ECC_OK, "err: %s", err);
  cr_assert_str_eq(m.name, "good");
  /* without the override, the name is looked up and not found */
  cr_assert_eq(ecc_check(ini, NULL, &m, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_assert_not_null(strstr(err, "plugin file not found: "), "err: %s", err);
}

Test(ini, bad_overrides)
{
  char err[1024];
  const char *ini = th_ini_text("[plugin]\npath = %s\n", GOOD);
  ecc_kv_t unknown[1] = {{"region.nmae", "x"}};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = unknown, .n_overrides = 1, .log_level = -1};
  cr_assert_eq(ecc_check(ini, &opt, NULL, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_assert_eq(strncmp(err, "override: unknown key 'region.nmae' (the plugin 'good' accepts: ",
                       strlen("override: unknown key 'region.nmae' (the plugin 'good' accepts: ")),
               0, "err: %s", err);

  ecc_kv_t no_key[1] = {{NULL, "x"}};
  opt.overrides = no_key;
  cr_assert_eq(ecc_check(ini, &opt, NULL, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_str_eq(err, "override 0 has no key or no value");

  ecc_kv_t no_dot[1] = {{"nodot", "x"}};
  opt.overrides = no_dot;
  cr_assert_eq(ecc_check(ini, &opt, NULL, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_str_eq(err, "override 'nodot' is not of the form 'section.key'");

  ecc_kv_t plugin_key[1] = {{"plugin.pth", "x"}};
  opt.overrides = plugin_key;
  cr_assert_eq(ecc_check(ini, &opt, NULL, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_assert_str_eq(err,
                   "override: unknown key 'plugin.pth' (accepted: name, path, dir, log_level)");

  opt.overrides = NULL;
  cr_assert_eq(ecc_check(ini, &opt, NULL, err, sizeof(err)), ECC_ERR_INVALID);
  cr_assert_str_eq(err, "overrides is NULL");
}

/* ---- the error buffer ---- */

Test(ini, small_error_buffer_is_truncated_not_overrun)
{
  const char *ini = th_ini_text("[plugin]\npath = %s\npth = x\n", GOOD);
  char err[24];
  memset(err, 'Z', sizeof(err));
  cr_assert_eq(ecc_check(ini, NULL, NULL, err, 16), ECC_ERR_CONFIG);
  cr_assert_eq(strlen(err), 15);
  cr_assert_eq(strncmp(err, ini, 15), 0);
  cr_assert_eq(err[16], 'Z', "wrote past err_cap");
}
