/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c - the plugin's configuration parser: defaults, derived block
 * size, and every kind of bad value rejected with the key named.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/config.h"
#include "core/region/region.h"
#include "tests/helpers.h"

static int parse(const ecc_kv_v1_t *kv, size_t n, struct plugin_config *c, char *err)
{
  return config_parse(kv, n, c, err, 256);
}

Test(config, defaults_with_block_size)
{
  ecc_kv_v1_t kv[] = {{"region.block_size", "4KiB"}};
  struct plugin_config c;
  char err[256] = "";
  cr_assert_eq(parse(kv, 1, &c, err), ECC_OK, "%s", err);
  cr_expect_eq(c.role, ROLE_BOTH);
  cr_expect_eq(c.block_size, 4096);
  cr_expect_eq(c.region_size, 1ull << 30);
  cr_expect_eq(c.num_blocks, (1ull << 30) / 4096);
  cr_expect_str_eq(c.region_name, "default");
  cr_expect_str_eq(c.region_folder, "", "the default directory is kept as empty");
  char dir[64], want[64];
  snprintf(want, sizeof(want), "/dev/shm/ecc-%u", (unsigned)geteuid());
  cr_expect_str_eq(config_region_folder(&c, dir, sizeof(dir)), want);
  cr_expect_eq(c.require_tmpfs, 1);
  cr_expect_eq(c.engine, ENGINE_AUTO);
  cr_expect_eq(c.pin, PIN_AUTO);
  cr_expect_eq(c.max_inflight, 64);
  cr_expect_eq(c.max_sms, 16);
  cr_expect_eq(c.device, -1);
  cr_expect_eq(c.reap_orphans, 1);
}

Test(config, block_size_from_hidden_size_and_dtype)
{
  ecc_kv_v1_t kv[] = {
      {"region.hidden_size", "1536"}, {"region.dtype", "float16"}, {"region.size", "10MB"}};
  struct plugin_config c;
  char err[256] = "";
  cr_assert_eq(parse(kv, 3, &c, err), ECC_OK, "%s", err);
  cr_expect_eq(c.block_size, 3072);
  cr_expect_eq(c.region_size, 10000000);
  cr_expect_eq(c.num_blocks, 10000000 / 3072);
}

/* One member of a closed set: the key, the INI's word, the value parse
 * must give, and the field it goes to. */
struct choice_case {
  const char *key;
  const char *word;
  int value;
  size_t field;
};

#define FIELD(name) offsetof(struct plugin_config, name)
#define ROLE_CASE(constant, value, text) {"connector.role", text, constant, FIELD(role)},
#define MODE_CASE(constant, value, text) {"region.mode", text, constant, FIELD(region_mode)},
#define PIN_CASE(constant, value, text) {"pinning.enabled", text, constant, FIELD(pin)},
#define ENGINE_CASE(constant, value, text) {"engine.type", text, constant, FIELD(engine)},
#define METHOD_CASE(constant, value, text) {"engine.method", text, constant, FIELD(method)},
#define REAP_CASE(constant, value, text) \
  {"region.reap_orphans", text, constant, FIELD(reap_orphans)},
#define TMPFS_CASE(constant, value, text) \
  {"region.require_tmpfs", text, constant, FIELD(require_tmpfs)},
static const struct choice_case choices[] = {
    CONFIG_ROLE_MAP(ROLE_CASE) REGION_MODE_MAP(MODE_CASE) CONFIG_PIN_MAP(PIN_CASE)
        CONFIG_ENGINE_MAP(ENGINE_CASE) CONFIG_METHOD_MAP(METHOD_CASE) CONFIG_BOOL_MAP(REAP_CASE)
            CONFIG_BOOL_MAP(TMPFS_CASE)};
#undef ROLE_CASE
#undef MODE_CASE
#undef PIN_CASE
#undef ENGINE_CASE
#undef METHOD_CASE
#undef REAP_CASE
#undef TMPFS_CASE

static int field_of(const struct plugin_config *c, size_t offset)
{
  int v;
  memcpy(&v, (const char *)c + offset, sizeof(v));
  return v;
}

Test(config, every_choice_parses)
{
  for (size_t i = 0; i < sizeof(choices) / sizeof(choices[0]); i++) {
    const struct choice_case *cc = &choices[i];
    ecc_kv_v1_t kv[] = {{"region.block_size", "16"}, {cc->key, cc->word}};
    struct plugin_config c;
    char err[256] = "";
    cr_assert_eq(parse(kv, 2, &c, err), ECC_OK, "%s = %s: %s", cc->key, cc->word, err);
    cr_expect_eq(field_of(&c, cc->field), cc->value, "%s = %s gave %d, expected %d", cc->key,
                 cc->word, field_of(&c, cc->field), cc->value);
  }
}

/* One vocabulary for booleans: every key takes every word of
 * CONFIG_BOOL_WORD_MAP, and pinning.enabled takes them besides auto. */
Test(config, every_boolean_key_takes_every_boolean_word)
{
  static const struct {
    const char *key;
    size_t field;
  } keys[] = {{"region.reap_orphans", FIELD(reap_orphans)},
              {"region.require_tmpfs", FIELD(require_tmpfs)},
              {"region.persist", FIELD(persist)},
              {"directory.enabled", FIELD(directory)}};
  static const struct {
    const char *word;
    int value;
  } words[] = {
#define WORD(word, value) {word, value},
      CONFIG_BOOL_WORD_MAP(WORD)
#undef WORD
  };
  for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
      /* persist needs the directory: the last pair says so when it is not the key. */
      ecc_kv_v1_t kv[] = {
          {"region.block_size", "16"}, {keys[k].key, words[w].word}, {"directory.enabled", "on"}};
      size_t n = strcmp(keys[k].key, "directory.enabled") == 0 ? 2 : 3;
      struct plugin_config c;
      char err[256] = "";
      cr_assert_eq(parse(kv, n, &c, err), ECC_OK, "%s = %s: %s", keys[k].key, words[w].word, err);
      int want = words[w].value ? CONFIG_TRUE : CONFIG_FALSE;
      cr_expect_eq(field_of(&c, keys[k].field), want, "%s = %s", keys[k].key, words[w].word);
    }
  }
  for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
    ecc_kv_v1_t kv[] = {{"region.block_size", "16"}, {"pinning.enabled", words[w].word}};
    struct plugin_config c;
    char err[256] = "";
    cr_assert_eq(parse(kv, 2, &c, err), ECC_OK, "pinning.enabled = %s: %s", words[w].word, err);
    cr_expect_eq(c.pin, words[w].value ? PIN_ON : PIN_OFF, "pinning.enabled = %s", words[w].word);
  }
}

Test(config, every_dtype_sizes_its_rows)
{
  static const struct {
    const char *name;
    int bytes;
  } dtypes[] = {
#define DTYPE_CASE(name, bytes) {name, bytes},
      CONFIG_DTYPE_MAP(DTYPE_CASE)
#undef DTYPE_CASE
  };
  for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
    ecc_kv_v1_t kv[] = {{"region.hidden_size", "1531"}, {"region.dtype", dtypes[i].name}};
    struct plugin_config c;
    char err[256] = "";
    cr_assert_eq(parse(kv, 2, &c, err), ECC_OK, "dtype %s: %s", dtypes[i].name, err);
    cr_expect_eq(c.block_size, 1531u * (uint64_t)dtypes[i].bytes, "dtype %s: block of %llu B",
                 dtypes[i].name, (unsigned long long)c.block_size);
  }
}

struct named {
  int value;
  const char *text;
};

#define NAME_CASE(constant, value, text) {constant, text},
static const struct named role_names[] = {CONFIG_ROLE_MAP(NAME_CASE)};
static const struct named engine_names[] = {CONFIG_ENGINE_MAP(NAME_CASE)};
static const struct named method_names[] = {CONFIG_METHOD_MAP(NAME_CASE)};
#undef NAME_CASE
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

Test(config, every_name_is_the_word_the_ini_uses)
{
  for (size_t i = 0; i < N_OF(role_names); i++)
    cr_expect_str_eq(config_role_name(role_names[i].value), role_names[i].text);
  for (size_t i = 0; i < N_OF(engine_names); i++)
    cr_expect_str_eq(config_engine_name(engine_names[i].value), engine_names[i].text);
  for (size_t i = 0; i < N_OF(method_names); i++)
    cr_expect_str_eq(config_method_name(method_names[i].value), method_names[i].text);
  cr_expect_str_eq(config_role_name(-1), "?");
  cr_expect_str_eq(config_method_name(99), "?");
}

Test(config, every_published_default_parses)
{
  for (size_t i = 0; i < config_n_params; i++) {
    const ecc_param_v1_t *p = &config_params[i];
    cr_expect_not_null(p->help, "%s has no help", p->key);
    if (p->default_value[0] == '\0')
      continue; /* no default: absent means none */
    bool is_block_size = strcmp(p->key, "region.block_size") == 0;
    ecc_kv_v1_t kv[] = {{p->key, p->default_value}, {"region.block_size", "16"}};
    struct plugin_config c;
    char err[256] = "";
    cr_expect_eq(parse(kv, is_block_size ? 1 : 2, &c, err), ECC_OK, "%s = '%s': %s", p->key,
                 p->default_value, err);
  }
}

/* The next '|'-separated cell of a table row at *p, its blanks trimmed,
 * into buf; advances *p past it. */
static void next_cell(const char **p, char *buf, size_t cap)
{
  const char *end = strchr(*p, '|');
  size_t len = end != NULL ? (size_t)(end - *p) : strlen(*p);
  const char *a = *p;
  while (len > 0 && (*a == ' ' || *a == '\t')) {
    a++;
    len--;
  }
  while (len > 0 && (a[len - 1] == ' ' || a[len - 1] == '\t' || a[len - 1] == '\n'))
    len--;
  snprintf(buf, cap, "%.*s", (int)len, a);
  *p = end != NULL ? end + 1 : a + len;
}

/* docs/configuration.md's table of keys, row by row: "| `[section] key`, `key2` |
 * `default` | meaning |". Calls `row` for each key documented for the
 * plugin ([plugin] is the shim's). */
static void readme_keys(void (*row)(const char *key, const char *def, void *arg), void *arg)
{
  FILE *f = fopen(ECC_SOURCE_DIR "/docs/configuration.md", "r");
  cr_assert_not_null(f, "cannot read docs/configuration.md");
  char line[1024];
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "| `[", 4) != 0)
      continue;
    const char *p = line + 1;
    char keys[512], cell[512], section[32], def[128] = "";
    next_cell(&p, keys, sizeof(keys));
    next_cell(&p, cell, sizeof(cell));
    sscanf(cell, "`%127[^`]`", def);
    int skip = 0;
    if (sscanf(keys, "`[%31[^]]] %n", section, &skip) != 1 || skip == 0 ||
        strcmp(section, "plugin") == 0)
      continue;
    /* "key`" or "key`, `key2`" */
    for (const char *k = keys + skip; k != NULL && *k != '\0';) {
      char name[64], full[128];
      if (sscanf(k, "%63[^`]", name) != 1)
        break;
      snprintf(full, sizeof(full), "%s.%s", section, name);
      row(full, def, arg);
      k = strstr(k, ", `");
      if (k != NULL)
        k += 3;
    }
  }
  fclose(f);
}

struct documented {
  bool seen[CONFIG_N_PARAMS];
  size_t rows;
};

static void check_documented(const char *key, const char *def, void *arg)
{
  struct documented *d = arg;
  d->rows++;
  size_t i = 0;
  while (i < config_n_params && strcmp(config_params[i].key, key) != 0)
    i++;
  cr_expect_lt(i, config_n_params,
               "docs/configuration.md documents %s, which the plugin does not publish", key);
  if (i == config_n_params)
    return;
  d->seen[i] = true;
  const char *published = config_params[i].default_value;
  if (published[0] != '\0' || def[0] == '\0') {
    cr_expect_str_eq(published, def, "%s: published default '%s', docs/configuration.md says '%s'",
                     key, published, def);
    return;
  }
  /* An empty default docs/configuration.md names: the directory the plugin picks,
   * with <uid> standing for this user's. */
  struct plugin_config c;
  char err[256] = "", dir[128], want[128];
  ecc_kv_v1_t kv[] = {{"region.block_size", "16"}};
  cr_assert_eq(parse(kv, 1, &c, err), ECC_OK, "%s", err);
  const char *uid = strstr(def, "<uid>");
  cr_assert_not_null(uid, "%s: docs/configuration.md's default '%s' is not the published ''", key,
                     def);
  snprintf(want, sizeof(want), "%.*s%u%s", (int)(uid - def), def, (unsigned)geteuid(), uid + 5);
  cr_expect_str_eq(config_region_folder(&c, dir, sizeof(dir)), want, "%s", key);
}

Test(config, published_defaults_are_the_documented_ones)
{
  struct documented d = {.rows = 0};
  readme_keys(check_documented, &d);
  cr_assert_gt(d.rows, 0, "no key rows read from docs/configuration.md");
  for (size_t i = 0; i < config_n_params; i++)
    cr_expect(d.seen[i], "%s is published but not in docs/configuration.md's table",
              config_params[i].key);
}

struct bad_case {
  const char *key;
  const char *value;
  const char *must_say;
};

static void expect_rejected(const struct bad_case *bc)
{
  ecc_kv_v1_t kv[2] = {{"region.block_size", "16"}, {bc->key, bc->value}};
  size_t n = strcmp(bc->key, "region.block_size") == 0 ? 1 : 2;
  if (n == 1)
    kv[0].value = bc->value;
  struct plugin_config c;
  memset(&c, 0x5a, sizeof(c));
  struct plugin_config before = c;
  char err[256] = "";
  cr_expect_eq(parse(kv, n, &c, err), ECC_ERR_CONFIG, "%s = %s accepted", bc->key, bc->value);
  cr_expect(strstr(err, bc->must_say) != NULL, "%s = %s: message '%s' lacks '%s'", bc->key,
            bc->value, err, bc->must_say);
  cr_expect(memcmp(&c, &before, sizeof(c)) == 0, "a rejected parse changed the output");
}

Test(config, bad_values_name_the_key)
{
  static const struct bad_case cases[] = {
      {"region.size", "1e99", "region.size"},
      {"region.size", "-1", "region.size"},
      {"region.size", "16EiB", "region.size"},
      {"region.size", "20000000TiB", "region.size"},
      {"region.size", "0", "region.size"},
      {"region.size", "", "region.size"},
      {"region.block_size", "0", "region.block_size"},
      {"region.block_size", "2GiB", "smaller than one block"},
      {"connector.role", "producr", "connector.role"},
      {"connector.max_inflight", "0", "connector.max_inflight"},
      {"connector.max_inflight", "99999999999999999999", "connector.max_inflight"},
      {"connector.tp_rank", "-1", "connector.tp_rank"},
      {"connector.tp_rank", "1.5", "connector.tp_rank"},
      {"engine.type", "gpu", "engine.type"},
      {"engine.max_sms", "0", "engine.max_sms"},
      {"engine.device", "-2", "engine.device"},
      {"region.name", "../etc", "region.name"},
      {"region.name", "", "region.name"},
      {"region.dir", "relative/dir", "region.dir"},
      {"region.mode", "maybe", "region.mode"},
      {"region.reap_orphans", "maybe", "region.reap_orphans = 'maybe' is not a boolean"},
      {"region.require_tmpfs", "True", "true | false | on | off | yes | no"},
      {"directory.enabled", "1", "directory.enabled"},
      {"pinning.enabled", "always", "is not auto or a boolean"},
      {"pinning.enabled", "sometimes", "pinning.enabled"},
      {"region.hidden_size", "1536", "not both"},
      {"region.nmae", "x", "unknown key 'region.nmae'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    expect_rejected(&cases[i]);
}

Test(config, block_size_is_required)
{
  struct plugin_config c;
  char err[256] = "";
  cr_expect_eq(parse(NULL, 0, &c, err), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "region.block_size") != NULL, "%s", err);
}

Test(config, dtype_without_hidden_size_and_unknown_dtype)
{
  struct plugin_config c;
  char err[256] = "";
  ecc_kv_v1_t a[] = {{"region.dtype", "float16"}};
  cr_expect_eq(parse(a, 1, &c, err), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "region.hidden_size") != NULL, "%s", err);
  ecc_kv_v1_t b[] = {{"region.hidden_size", "8"}, {"region.dtype", "float12"}};
  cr_expect_eq(parse(b, 2, &c, err), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "region.dtype") != NULL, "%s", err);
}

Test(config, duplicate_key_and_null_pairs)
{
  struct plugin_config c;
  char err[256] = "";
  ecc_kv_v1_t dup[] = {{"region.block_size", "16"}, {"region.block_size", "32"}};
  cr_expect_eq(parse(dup, 2, &c, err), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "twice") != NULL, "%s", err);
  ecc_kv_v1_t null_value[] = {{"region.block_size", NULL}};
  cr_expect_eq(parse(null_value, 1, &c, err), ECC_ERR_CONFIG);
  cr_expect_eq(parse(NULL, 3, &c, err), ECC_ERR_CONFIG);
}

Test(config, sizes)
{
  uint64_t v;
  cr_expect_eq(config_parse_size("3KiB", &v), 0);
  cr_expect_eq(v, 3072);
  cr_expect_eq(config_parse_size("3 K", &v), 0);
  cr_expect_eq(v, 3072);
  cr_expect_eq(config_parse_size("2MB", &v), 0);
  cr_expect_eq(v, 2000000);
  cr_expect_eq(config_parse_size("16EiB", &v), -1);
  cr_expect_eq(config_parse_size("16777216TiB", &v), -1); /* 2^64: overflows */
  cr_expect_eq(config_parse_size("16777215TiB", &v), 0);
  cr_expect_eq(config_parse_size("18446744073709551616", &v), -1);
  cr_expect_eq(config_parse_size("+5", &v), -1);
  cr_expect_eq(config_parse_size("5kib", &v), -1);
}

Test(config, the_plugin_publishes_every_key_it_parses)
{
  /* What the loaded plugin hands the host is this table, whole. */
  const char *ini = th_ini("both", th_region_name(), 64, 16, NULL);
  ecc_plugin_meta_t *meta = NULL;
  char err[512] = "";
  cr_assert_eq(ecc_check_params(ini, NULL, &meta, err, sizeof(err)), ECC_OK, "%s", err);
  cr_expect_eq(meta->n_params, config_n_params);
  for (size_t i = 0; i < meta->n_params && i < config_n_params; i++) {
    cr_expect_str_eq(meta->params[i].key, config_params[i].key);
    cr_expect_str_eq(meta->params[i].default_value, config_params[i].default_value);
  }
  free(meta);
}
