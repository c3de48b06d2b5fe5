/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ini_config.c - turns the INI file given to ecc_open/ecc_check into an
 * ini_config: the [plugin] settings the shim uses itself, and every other key
 * as a "section.key" pair for the plugin, each with the line it came from.
 * The file is opened by the ownership rule and read whole into memory of
 * bounded size, then handed to inih one line at a time.
 */
#include "host-shim/ini_config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/names.h"
#include "common/trust.h"
#include "host-shim/key_index.h"
#include "host-shim/shim_err.h"
#include "host-shim/shim_names.h"

/* A line number never passes the number of bytes plus one. */
_Static_assert(INI_CONFIG_MAX_BYTES < INT_MAX - 1, "INI line numbers are ints");

/* inih keeps the current section in a 50-byte buffer and silently cuts a
 * longer name, which would turn the keys under it into other keys. */
#define SECTION_NAME_MAX 49
#define PARSE_ERR_MAX 512

static const char plugin_keys[] = "name, path, dir, log_level";

/* Everything the reader and the handler share while inih runs. Only the
 * first error (by line) is kept: later ones are often caused by it. */
struct parse_state {
  const char *text; /* the whole file */
  size_t len;
  size_t next; /* where the next line starts */
  struct ini_config *cfg;
  struct key_index *keys; /* every pair's key, to find duplicates */
  int line;               /* the line inih is working on */
  int err_line;           /* line of the first error found here, 0 if none */
  int err_code;
  char err[PARSE_ERR_MAX];
  int hint_line; /* first line inih will call a syntax error, and why */
  const char *hint;
  int plugin_line; /* first [plugin] header */
};

__attribute__((format(printf, 2, 3))) static int parse_fail(struct parse_state *st, const char *fmt,
                                                            ...)
{
  if (st->err_line == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->err, sizeof(st->err), fmt, ap);
    va_end(ap);
    st->err_line = st->line;
    st->err_code = ECC_ERR_CONFIG;
  }
  return 0; /* inih records the line as an error too */
}

static int parse_nomem(struct parse_state *st)
{
  if (st->err_line == 0) {
    parse_fail(st, "out of memory");
    st->err_code = ECC_ERR_NOMEM;
  }
  return 0;
}

/* ---- the reader: line numbers, long lines, section names ---- */

static char *blank_line(char *str)
{
  str[0] = '\n';
  str[1] = '\0';
  return str;
}

/* A section name is names joined by dots ("engine", "my-plugin.opts"). */
static bool section_char_ok(char ch)
{
  return ecc_name_char((unsigned char)ch) || ch == '.';
}

/* A "[name]" line: refuse names inih would mangle or that could never form a
 * plugin key; remember where [plugin] starts. Returns false after an error. */
static bool inspect_section(struct parse_state *st, const char *text)
{
  const char *close = strchr(text, ']');
  if (close == NULL) {
    if (st->hint_line == 0) {
      st->hint_line = st->line;
      st->hint = "section header has no closing ']'";
    }
    return true; /* inih reports it as a syntax error at this line */
  }
  size_t len = (size_t)(close - text - 1);
  for (size_t i = 0; i < len; i++) {
    if (!section_char_ok(text[1 + i])) {
      parse_fail(st, "bad section name '[%.*s]': use letters, digits, '_', '-' and '.'", (int)len,
                 text + 1);
      return false;
    }
  }
  if (len == 0) {
    parse_fail(st, "empty section name '[]'");
    return false;
  }
  if (len > SECTION_NAME_MAX) {
    parse_fail(st, "section name longer than %d characters", SECTION_NAME_MAX);
    return false;
  }
  if (len == 6 && memcmp(text + 1, "plugin", 6) == 0 && st->plugin_line == 0)
    st->plugin_line = st->line;
  return true;
}

/* Lines inih will reject; saying why beats a bare "syntax error". */
static void inspect_other(struct parse_state *st, const char *text)
{
  if (text[0] == '\0') /* blank, or a comment cut away */
    return;
  if (strpbrk(text, "=:") == NULL && st->hint_line == 0) {
    st->hint_line = st->line;
    st->hint = "expected 'key = value' or '[section]'";
  }
}

/* Checks the line in str (NUL-terminated, without its line ending) and ends
 * it with the newline inih expects, or blanks it after an error. */
static char *hand_over(struct parse_state *st, char *str)
{
  if (str[0] == '[') {
    if (!inspect_section(st, str))
      return blank_line(str);
  } else {
    inspect_other(st, str);
  }
  size_t keep = strlen(str);
  str[keep] = '\n';
  str[keep + 1] = '\0';
  return str;
}

/* Whitespace as inih sees it (isspace), so that the two never disagree on
 * where a comment starts or where a line's text begins. */
static bool is_blank(char ch)
{
  return isspace((unsigned char)ch) != 0;
}

/* The comment rule: '#' or ';' starts a comment where it begins the text or
 * follows whitespace, and runs to the end of the line; anywhere else it is
 * part of the text ("a;b", "/x#y"). Returns the length of the text before
 * the comment. inih itself cuts a value at a ';' after whitespace and keeps
 * a '#' there, so once this cut is made it finds nothing left to cut. */
static size_t before_comment(const char *text, size_t len)
{
  for (size_t i = 0; i < len; i++) {
    if ((text[i] == '#' || text[i] == ';') && (i == 0 || is_blank(text[i - 1])))
      return i;
  }
  return len;
}

/* The next line of the file without its line ending; false at the end. */
static bool next_line(struct parse_state *st, const char **text, size_t *len)
{
  if (st->next >= st->len)
    return false;
  const char *start = st->text + st->next;
  size_t rest = st->len - st->next;
  const char *nl = memchr(start, '\n', rest);
  size_t n = nl != NULL ? (size_t)(nl - start) : rest;
  st->next += n + (nl != NULL);
  while (n > 0 && start[n - 1] == '\r')
    n--;
  *text = start;
  *len = n;
  return true;
}

/* fgets-like reader for ini_parse_stream. inih numbers lines by counting
 * calls, so each call hands over exactly one whole line of the file (or a
 * blank line in place of one already reported as bad). Leading blanks are
 * dropped so that inih never takes an indented line for the continuation of
 * the previous value, and comments so that inih never sees one. */
static char *read_line(char *str, int num, void *stream)
{
  struct parse_state *st = stream;
  const char *text;
  size_t len;
  if (!next_line(st, &text, &len))
    return NULL;
  st->line++;
  if (num < 3) { /* no room for even an empty line; not so in any inih */
    parse_fail(st, "inih's line buffer holds only %d bytes", num);
    return NULL;
  }
  if (memchr(text, '\0', len) != NULL) {
    parse_fail(st, "NUL byte in line");
    return blank_line(str);
  }
  /* inih needs room for the line, a newline and the terminating NUL. */
  size_t limit = (size_t)num - 2 < INI_CONFIG_MAX_LINE ? (size_t)num - 2 : INI_CONFIG_MAX_LINE;
  if (len > limit) {
    parse_fail(st, "line longer than %zu characters", limit);
    return blank_line(str);
  }
  if (st->line == 1 && len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
    text += 3;
    len -= 3;
  }
  while (len > 0 && is_blank(text[0])) {
    text++;
    len--;
  }
  len = before_comment(text, len);
  memcpy(str, text, len);
  str[len] = '\0';
  return hand_over(st, str);
}

/* ---- the handler: [plugin] settings and plugin pairs ---- */

static struct ini_setting *plugin_setting(struct ini_config *cfg, const char *name)
{
  if (strcmp(name, "name") == 0)
    return &cfg->name;
  if (strcmp(name, "path") == 0)
    return &cfg->path;
  if (strcmp(name, "dir") == 0)
    return &cfg->folder;
  if (strcmp(name, "log_level") == 0)
    return &cfg->log_level_text;
  return NULL;
}

static int on_plugin_key(struct parse_state *st, const char *name, const char *value)
{
  struct ini_setting *s = plugin_setting(st->cfg, name);
  if (s == NULL)
    return parse_fail(st, "unknown key '%s' in [plugin] (accepted: %s)", name, plugin_keys);
  if (s->value != NULL)
    return parse_fail(st, "duplicate key '%s' in [plugin] (first set on line %d)", name, s->line);
  if (s == &st->cfg->log_level_text && shim_level_from_name(value) < 0)
    return parse_fail(st, "bad log_level '%s' (%s)", value, shim_level_names());
  s->value = strdup(value);
  if (s->value == NULL)
    return parse_nomem(st);
  s->line = st->line;
  return 1;
}

/* The pair of key, or NULL. */
static struct ini_pair *find_pair(const struct ini_config *cfg, struct key_index *keys,
                                  const char *key)
{
  size_t pos;
  return key_index_find(keys, key, &pos) ? &cfg->pairs[pos] : NULL;
}

/* Appends a pair whose key is not in keys yet and indexes it. Takes
 * ownership of key and value (frees them on failure). */
static int append_pair(struct ini_config *cfg, struct key_index *keys, char *key, char *value,
                       int line)
{
  if (key == NULL || value == NULL)
    goto nomem;
  if (cfg->n_pairs == cfg->cap_pairs) {
    size_t cap = cfg->cap_pairs != 0 ? cfg->cap_pairs * 2 : 16;
    struct ini_pair *grown = realloc(cfg->pairs, cap * sizeof(*grown));
    if (grown == NULL)
      goto nomem;
    cfg->pairs = grown;
    cfg->cap_pairs = cap;
  }
  /* Indexed first: a failure then leaves neither the pair nor its entry.
   * The index points at the pair's own key string, freed with cfg. */
  if (!key_index_add(keys, key, cfg->n_pairs))
    goto nomem;
  cfg->pairs[cfg->n_pairs++] = (struct ini_pair){.key = key, .value = value, .line = line};
  return ECC_OK;
nomem:
  free(key);
  free(value);
  return ECC_ERR_NOMEM;
}

static char *join_key(const char *section, const char *name)
{
  size_t len = strlen(section) + 1 + strlen(name) + 1;
  char *key = malloc(len);
  if (key != NULL)
    snprintf(key, len, "%s.%s", section, name);
  return key;
}

static int on_pair(void *user, const char *section, const char *name, const char *value)
{
  struct parse_state *st = user;
  if (st->err_line != 0)
    return 1; /* only the first error is reported */
  if (section[0] == '\0')
    return parse_fail(st, "key '%s' is outside any section (put it under a [section])", name);
  if (name[0] == '\0')
    return parse_fail(st, "empty key name in [%s]", section);
  if (value[0] == '\0')
    return parse_fail(st,
                      "key '%s' in [%s] has an empty value (delete the line to use the default)",
                      name, section);
  if (strcmp(section, "plugin") == 0)
    return on_plugin_key(st, name, value);
  char *key = join_key(section, name);
  if (key == NULL)
    return parse_nomem(st);
  const struct ini_pair *old = find_pair(st->cfg, st->keys, key);
  if (old != NULL) {
    parse_fail(st, "duplicate key '%s' (first set on line %d)", key, old->line);
    free(key);
    return 0;
  }
  if (append_pair(st->cfg, st->keys, key, strdup(value), st->line) != ECC_OK)
    return parse_nomem(st);
  return 1;
}

/* ---- whole file ---- */

/* Picks the first error by line among inih's (syntax) and ours. */
static int report_parse(const struct parse_state *st, int rc, char *err, size_t err_cap)
{
  const char *file = st->cfg->file;
  if (rc == -2) {
    shim_errf(err, err_cap, "%s: out of memory while parsing", file);
    return ECC_ERR_NOMEM;
  }
  if (rc > 0 && (st->err_line == 0 || rc < st->err_line)) {
    const char *why = st->hint_line == rc ? st->hint : "not a '[section]' or 'key = value' line";
    shim_errf(err, err_cap, "%s:%d: syntax error: %s", file, rc, why);
    return ECC_ERR_CONFIG;
  }
  if (st->err_line != 0) {
    shim_errf(err, err_cap, "%s:%d: %s", file, st->err_line, st->err);
    return st->err_code;
  }
  return ECC_OK;
}

/* The file as a descriptor, if it passes the ownership rule; a FIFO or a
 * device is refused before it is opened, so it can never block. */
static int open_ini(const char *file, int *fd, char *err, size_t err_cap)
{
  char canon[PATH_MAX], why[PATH_MAX + 512];
  switch (trust_open(file, TRUST_FILE, "INI file", fd, canon, sizeof(canon), why, sizeof(why))) {
  case TRUST_OK:
    return ECC_OK;
  case TRUST_MISSING:
    shim_errf(err, err_cap, "cannot open INI file %s: not found", file);
    return ECC_ERR_CONFIG;
  case TRUST_UNSAFE:
    shim_errf(err, err_cap, "%s", why);
    return ECC_ERR_CONFIG;
  default:
    shim_errf(err, err_cap, "%s", why);
    return ECC_ERR_SYSTEM;
  }
}

/* A file past the limit is refused at the line holding its first byte too
 * many, so that the message points somewhere. */
static int refuse_long_file(const char *file, const char *text, char *err, size_t err_cap)
{
  int line = 1;
  for (size_t i = 0; i < INI_CONFIG_MAX_BYTES; i++)
    line += text[i] == '\n';
  shim_errf(err, err_cap,
            "%s:%d: the file is longer than %zu bytes (%zu MiB), the most an INI "
            "file may hold",
            file, line, INI_CONFIG_MAX_BYTES, INI_CONFIG_MAX_BYTES >> 20);
  return ECC_ERR_CONFIG;
}

/* What to allocate first: the size fstat gives (4 KiB for files in /proc,
 * which say 0), at most the limit, plus one byte so that a full buffer means
 * there is more to read. */
static size_t first_capacity(const struct stat *st)
{
  if (st->st_size <= 0)
    return 4096 + 1;
  if ((uintmax_t)st->st_size >= INI_CONFIG_MAX_BYTES)
    return INI_CONFIG_MAX_BYTES + 1;
  return (size_t)st->st_size + 1;
}

/* Grows *buf to hold more bytes, never past the limit plus one. */
static int grow_buffer(char **buf, size_t *cap, const char *file, char *err, size_t err_cap)
{
  size_t bigger = *cap * 2 < INI_CONFIG_MAX_BYTES + 1 ? *cap * 2 : INI_CONFIG_MAX_BYTES + 1;
  char *grown = realloc(*buf, bigger);
  if (grown == NULL) {
    shim_errf(err, err_cap, "cannot read INI file %s: out of memory for %zu bytes", file, bigger);
    return ECC_ERR_NOMEM;
  }
  *buf = grown;
  *cap = bigger;
  return ECC_OK;
}

/* Reads the whole file into *out (*len bytes). Every failure is an error:
 * none is taken for the end of the file. */
static int read_whole(int fd, const char *file, char **out, size_t *len, char *err, size_t err_cap)
{
  struct stat st;
  if (fstat(fd, &st) != 0) {
    shim_errf(err, err_cap, "cannot read INI file %s: fstat: %s", file, strerror(errno));
    return ECC_ERR_SYSTEM;
  }
  size_t cap = first_capacity(&st), used = 0;
  char *buf = malloc(cap);
  if (buf == NULL) {
    shim_errf(err, err_cap, "cannot read INI file %s: out of memory for %zu bytes", file, cap);
    return ECC_ERR_NOMEM;
  }
  int rc = ECC_OK;
  while (rc == ECC_OK && used <= INI_CONFIG_MAX_BYTES) {
    if (used == cap && (rc = grow_buffer(&buf, &cap, file, err, err_cap)) != ECC_OK)
      break;
    ssize_t n = read(fd, buf + used, cap - used);
    if (n == 0)
      break;
    if (n > 0)
      used += (size_t)n;
    else if (errno != EINTR) {
      shim_errf(err, err_cap, "cannot read INI file %s: %s", file, strerror(errno));
      rc = ECC_ERR_SYSTEM;
    }
  }
  if (rc == ECC_OK && used > INI_CONFIG_MAX_BYTES)
    rc = refuse_long_file(file, buf, err, err_cap);
  if (rc != ECC_OK) {
    free(buf);
    return rc;
  }
  *out = buf;
  *len = used;
  return ECC_OK;
}

static int parse_file(struct ini_config *cfg, struct parse_state *st, char *err, size_t err_cap)
{
  int fd = -1;
  int rc = open_ini(cfg->file, &fd, err, err_cap);
  if (rc != ECC_OK)
    return rc;
  char *text = NULL;
  size_t len = 0;
  rc = read_whole(fd, cfg->file, &text, &len, err, err_cap);
  (void)close(fd); /* read-only: closing cannot lose anything */
  if (rc != ECC_OK)
    return rc;
  st->text = text;
  st->len = len;
  rc = report_parse(st, ini_parse_stream(read_line, st, on_pair, st), err, err_cap);
  st->text = NULL;
  free(text);
  return rc;
}

/* ---- overrides ---- */

static int set_plugin_override(struct ini_config *cfg, const char *name, const char *value,
                               char *err, size_t err_cap)
{
  struct ini_setting *s = plugin_setting(cfg, name);
  if (s == NULL) {
    shim_errf(err, err_cap, "override: unknown key 'plugin.%s' (accepted: %s)", name, plugin_keys);
    return ECC_ERR_CONFIG;
  }
  if (value[0] == '\0') {
    shim_errf(err, err_cap, "override: key 'plugin.%s' has an empty value", name);
    return ECC_ERR_CONFIG;
  }
  if (s == &cfg->log_level_text && shim_level_from_name(value) < 0) {
    shim_errf(err, err_cap, "override: bad plugin.log_level '%s' (%s)", value, shim_level_names());
    return ECC_ERR_CONFIG;
  }
  char *copy = strdup(value);
  if (copy == NULL)
    return ECC_ERR_NOMEM;
  /* name and path are two ways of saying one thing: the override wins. */
  struct ini_setting *other = s == &cfg->name ? &cfg->path : s == &cfg->path ? &cfg->name : NULL;
  if (other != NULL) {
    free(other->value);
    *other = (struct ini_setting){0};
  }
  free(s->value);
  *s = (struct ini_setting){.value = copy, .line = 0};
  return ECC_OK;
}

static int apply_override(struct ini_config *cfg, struct key_index *keys, const ecc_kv_t *kv,
                          size_t index, char *err, size_t err_cap)
{
  if (kv->key == NULL || kv->key[0] == '\0' || kv->value == NULL) {
    shim_errf(err, err_cap, "override %zu has no key or no value", index);
    return ECC_ERR_INVALID;
  }
  const char *dot = strchr(kv->key, '.');
  if (dot == NULL || dot == kv->key || dot[1] == '\0') {
    shim_errf(err, err_cap, "override '%s' is not of the form 'section.key'", kv->key);
    return ECC_ERR_INVALID;
  }
  if (strncmp(kv->key, "plugin.", 7) == 0)
    return set_plugin_override(cfg, kv->key + 7, kv->value, err, err_cap);
  struct ini_pair *old = find_pair(cfg, keys, kv->key);
  char *value = strdup(kv->value);
  if (value == NULL)
    return ECC_ERR_NOMEM;
  if (old != NULL) {
    free(old->value);
    old->value = value;
    old->line = 0;
    return ECC_OK;
  }
  return append_pair(cfg, keys, strdup(kv->key), value, 0);
}

/* ---- the [plugin] section as a whole ---- */

static int check_plugin_section(const struct ini_config *cfg, const struct parse_state *st,
                                char *err, size_t err_cap)
{
  if (cfg->name.value != NULL && cfg->path.value != NULL) {
    int later = cfg->name.line > cfg->path.line ? cfg->name.line : cfg->path.line;
    shim_errf(err, err_cap,
              "%s:%d: [plugin] gives both 'name' (line %d) and 'path' (line %d); keep one",
              cfg->file, later, cfg->name.line, cfg->path.line);
    return ECC_ERR_CONFIG;
  }
  if (cfg->name.value != NULL || cfg->path.value != NULL)
    return ECC_OK;
  if (st->plugin_line != 0)
    shim_errf(err, err_cap,
              "%s:%d: [plugin] needs 'name' (a short name) or 'path' (an absolute path)", cfg->file,
              st->plugin_line);
  else
    shim_errf(err, err_cap, "%s: no [plugin] section: it must give the plugin's 'name' or 'path'",
              cfg->file);
  return ECC_ERR_CONFIG;
}

int ini_config_load(const char *file, const ecc_kv_t *overrides, size_t n_overrides,
                    struct ini_config *out, char *err, size_t err_cap)
{
  *out = (struct ini_config){.log_level = -1};
  if (file == NULL || (n_overrides != 0 && overrides == NULL)) {
    shim_errf(err, err_cap, "%s", file == NULL ? "INI path is NULL" : "overrides is NULL");
    return ECC_ERR_INVALID;
  }
  out->file = strdup(file);
  if (out->file == NULL) {
    shim_errf(err, err_cap, "out of memory");
    return ECC_ERR_NOMEM;
  }
  uint64_t k0, k1;
  key_index_random_key(&k0, &k1);
  struct key_index keys;
  key_index_init(&keys, k0, k1);
  struct parse_state st = {.cfg = out, .keys = &keys};
  int rc = parse_file(out, &st, err, err_cap);
  for (size_t i = 0; rc == ECC_OK && i < n_overrides; i++) {
    rc = apply_override(out, &keys, &overrides[i], i, err, err_cap);
    if (rc == ECC_ERR_NOMEM) /* the file's own errors say where they ran out */
      shim_errf(err, err_cap, "out of memory");
  }
  key_index_free(&keys);
  if (rc == ECC_OK)
    rc = check_plugin_section(out, &st, err, err_cap);
  if (rc != ECC_OK) {
    ini_config_free(out);
    return rc;
  }
  if (out->log_level_text.value != NULL)
    out->log_level = shim_level_from_name(out->log_level_text.value);
  return ECC_OK;
}

void ini_config_where(const struct ini_config *cfg, int line, char *buf, size_t cap)
{
  if (line > 0)
    snprintf(buf, cap, "%s:%d", cfg->file, line);
  else
    snprintf(buf, cap, "override");
}

void ini_config_free(struct ini_config *cfg)
{
  for (size_t i = 0; i < cfg->n_pairs; i++) {
    free(cfg->pairs[i].key);
    free(cfg->pairs[i].value);
  }
  free(cfg->pairs);
  free(cfg->name.value);
  free(cfg->path.value);
  free(cfg->folder.value);
  free(cfg->log_level_text.value);
  free(cfg->file);
  *cfg = (struct ini_config){.log_level = -1};
}
