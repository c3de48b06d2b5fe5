/*
 * test_exports.c - the plugin exports its ABI table and nothing else; the
 * shim exports only its public ecc_* functions.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* Defined dynamic symbols of a shared object, one per line, via nm -D. */
static size_t dynamic_symbols(const char *path, char names[][128], size_t cap)
{
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "cannot run nm");
  char line[512];
  size_t n = 0;
  while (fgets(line, sizeof(line), p) != NULL) {
    char addr[64], type[8], name[128];
    if (sscanf(line, "%63s %7s %127s", addr, type, name) != 3)
      continue;
    cr_assert_lt(n, cap);
    memcpy(names[n++], name, sizeof(name));
  }
  cr_assert_eq(pclose(p), 0, "nm -D failed on %s", path);
  return n;
}

Test(exports, plugin_exports_only_its_table)
{
  char names[64][128];
  size_t n = dynamic_symbols(ECC_PLUGIN_PATH, names, 64);
  size_t tables = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(names[i], "ecc_plugin_v1") == 0)
      tables++;
    else if (strcmp(names[i], "ECC_1") != 0) /* nothing but the table */
      cr_expect_fail("plugin exports '%s'", names[i]);
  }
  cr_expect_eq(tables, 1, "ecc_plugin_v1 is not exported");
}

Test(exports, shim_exports_only_the_public_api)
{
  char names[128][128];
  size_t n = dynamic_symbols(ECC_BUILD_DIR "/lib/libecc-host.so", names, 128);
  size_t public = 0;
  for (size_t i = 0; i < n; i++) {
    if (strncmp(names[i], "ecc_", 4) == 0)
      public++;
    else
      cr_expect_fail("shim exports '%s'", names[i]);
  }
  cr_expect_geq(public, 12, "only %zu ecc_* functions exported", public);
}
