/*
 * test_config.c - the plugin's configuration parser: defaults, derived block
 * size, and every kind of bad value rejected with the key named.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "region.h"

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
  cr_expect_str_eq(c.region_dir, "", "the default directory is kept as empty");
  char dir[64], want[64];
  snprintf(want, sizeof(want), "/dev/shm/ecc-%u", (unsigned)geteuid());
  cr_expect_str_eq(config_region_dir(&c, dir, sizeof(dir)), want);
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
  ecc_kv_v1_t kv[] = {{"region.hidden_size", "1536"}, {"region.dtype", "float16"},
                    {"region.size", "10MB"}};
  struct plugin_config c;
  char err[256] = "";
  cr_assert_eq(parse(kv, 3, &c, err), ECC_OK, "%s", err);
  cr_expect_eq(c.block_size, 3072);
  cr_expect_eq(c.region_size, 10000000);
  cr_expect_eq(c.num_blocks, 10000000 / 3072);
}

Test(config, every_choice_parses)
{
  ecc_kv_v1_t kv[] = {{"region.block_size", "16"}, {"connector.role", "consumer"},
                    {"engine.type", "host"}, {"engine.method", "kernel"},
                    {"pinning.enabled", "off"}, {"region.mode", "join"},
                    {"region.reap_orphans", "false"}, {"engine.device", "3"},
                    {"connector.tp_rank", "2"}, {"region.require_tmpfs", "false"},
                    {"region.dir", "/srv/regions"}};
  struct plugin_config c;
  char err[256] = "";
  cr_assert_eq(parse(kv, 11, &c, err), ECC_OK, "%s", err);
  cr_expect_eq(c.role, ROLE_CONSUMER);
  cr_expect_eq(c.engine, ENGINE_HOST);
  cr_expect_eq(c.method, METHOD_KERNEL);
  cr_expect_eq(c.pin, PIN_OFF);
  cr_expect_eq(c.region_mode, REGION_JOIN);
  cr_expect_eq(c.reap_orphans, 0);
  cr_expect_eq(c.device, 3);
  cr_expect_eq(c.tp_rank, 2);
  cr_expect_eq(c.require_tmpfs, 0);
  char dir[64];
  cr_expect_str_eq(config_region_dir(&c, dir, sizeof(dir)), "/srv/regions");
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
    {"region.reap_orphans", "yes", "region.reap_orphans"},
    {"region.require_tmpfs", "no", "region.require_tmpfs"},
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
