/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_exports.c - the plugin exports its ABI table and nothing else; the
 * shim exports exactly the functions its public header declares, no more
 * and none missing.
 */
#include <criterion/criterion.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ecc_plugin.h"

#define MAX_SYMBOLS 128

/* Names with their nm type letter ('T' code, 'D'/'R' data; 0 from a header). */
struct symbols {
  size_t n;
  char name[MAX_SYMBOLS][128];
  char type[MAX_SYMBOLS];
};

static void add(struct symbols *s, const char *name, char type)
{
  cr_assert_lt(s->n, (size_t)MAX_SYMBOLS, "more than %d symbols", MAX_SYMBOLS);
  cr_assert_lt(strlen(name), sizeof(s->name[0]), "symbol %s is too long", name);
  snprintf(s->name[s->n], sizeof(s->name[0]), "%s", name);
  s->type[s->n++] = type;
}

/* The type of `name` in s, or 0 when s lacks it. */
static char type_of(const struct symbols *s, const char *name)
{
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0)
      return s->type[i];
  return 0;
}

static bool has(const struct symbols *s, const char *name)
{
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->name[i], name) == 0)
      return true;
  return false;
}

/* Defined dynamic symbols of a shared object, via nm -D. */
static void dynamic_symbols(const char *path, struct symbols *out)
{
  char cmd[4200];
  snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", path);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "cannot run nm");
  char line[512];
  out->n = 0;
  while (fgets(line, sizeof(line), p) != NULL) {
    char addr[64], type[8], name[128];
    if (sscanf(line, "%63s %7s %127s", addr, type, name) == 3)
      add(out, name, type[0]);
  }
  cr_assert_eq(pclose(p), 0, "nm -D failed on %s", path);
}

/* The functions a header declares: prototypes start in the first column
 * with their return type (typedefs and indented function pointer fields
 * do not), so "int ecc_open(" and "const char *ecc_strerror(" count. */
static void declared_functions(const char *path, struct symbols *out)
{
  regex_t re;
  cr_assert_eq(regcomp(&re, "^[A-Za-z_][A-Za-z_0-9 ]*[ *](ecc_[A-Za-z_0-9]+)\\(", REG_EXTENDED), 0);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f, "cannot read %s", path);
  char line[512];
  out->n = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    regmatch_t m[2];
    if (strncmp(line, "typedef", 7) == 0 || regexec(&re, line, 2, m, 0) != 0)
      continue;
    line[m[1].rm_eo] = '\0';
    add(out, line + m[1].rm_so, 0);
  }
  fclose(f);
  regfree(&re);
}

Test(exports, plugin_exports_only_its_table)
{
  struct symbols s;
  dynamic_symbols(ECC_PLUGIN_PATH, &s);
  for (size_t i = 0; i < s.n; i++)
    cr_expect_str_eq(s.name[i], ECC_PLUGIN_V1_SYMBOL, "the plugin exports '%s'", s.name[i]);
  char type = type_of(&s, ECC_PLUGIN_V1_SYMBOL);
  cr_expect(type == 'D' || type == 'R', "%s is not exported as data (nm type '%c')",
            ECC_PLUGIN_V1_SYMBOL, type ? type : '-');
}

Test(exports, shim_exports_exactly_the_functions_of_its_header)
{
  struct symbols declared, exported;
  declared_functions(ECC_SOURCE_DIR "/host-shim/include/ecc_host.h", &declared);
  /* Whatever else it holds, the header declares these two. */
  cr_assert(has(&declared, "ecc_open") && has(&declared, "ecc_close"),
            "the prototypes of ecc_host.h were not read (%zu found)", declared.n);
  dynamic_symbols(ECC_BUILD_DIR "/lib/libecc-host.so", &exported);
  for (size_t i = 0; i < declared.n; i++)
    cr_expect_eq(type_of(&exported, declared.name[i]), 'T',
                 "%s is declared in ecc_host.h but not exported as a function", declared.name[i]);
  for (size_t i = 0; i < exported.n; i++)
    cr_expect(has(&declared, exported.name[i]),
              "the shim exports '%s', which ecc_host.h does not declare", exported.name[i]);
}
