/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_version.c - the one version source reaches every part (ecc_version,
 * eccctl --version, the shm plugin's table, the library's file name), and
 * eccctl --help names the configurations where an install puts them.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "tests/helpers.h"

/* Runs `cmd`, keeps its standard output; returns its exit status, or -1. */
static int capture(const char *cmd, char *out, size_t cap)
{
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p, "cannot run %s", cmd);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(version, ecc_version_is_the_project_version)
{
  const char *v = ecc_version();
  cr_assert_not_null(v);
  cr_assert_str_eq(v, ECC_TEST_VERSION);
  /* MAJOR.MINOR.PATCH: digits and exactly two dots. */
  int dots = 0;
  for (const char *p = v; *p; p++) {
    cr_assert(isdigit((unsigned char)*p) || *p == '.', "'%s' is not MAJOR.MINOR.PATCH", v);
    dots += *p == '.';
  }
  cr_assert_eq(dots, 2, "'%s' is not MAJOR.MINOR.PATCH", v);
  cr_assert_eq(ecc_version(), v, "the text must be constant");
}

Test(version, eccctl_prints_ecc_version)
{
  char out[256], want[128];
  int rc = capture("'" ECCCTL_PATH "' --version", out, sizeof(out));
  cr_assert_eq(rc, 0, "eccctl --version exited %d", rc);
  snprintf(want, sizeof(want), "eccctl %s\n", ecc_version());
  cr_assert_str_eq(out, want);
}

Test(version, shm_plugin_reports_the_same_version)
{
  const char *ini = th_ini("both", th_region_name(), 4096, 16, NULL);
  ecc_plugin_meta_t meta;
  char err[512] = "";
  int rc = ecc_check(ini, NULL, &meta, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "%s", err);
  cr_assert_str_eq(meta.name, "shm");
  cr_assert_str_eq(meta.version, ecc_version());
}

Test(version, library_file_carries_the_version)
{
  char path[512];
  snprintf(path, sizeof(path), "%s/lib/libecc-host.so.%s", ECC_BUILD_DIR, ecc_version());
  cr_assert(th_exists(path), "%s is missing", path);
}

Test(version, help_names_the_installed_configurations)
{
  char out[8192];
  int rc = capture("'" ECCCTL_PATH "' --help", out, sizeof(out));
  cr_assert_eq(rc, 0);
  const char *want[] = {
      ECC_TEST_CONFIG_DIR "/*.ini",
      "eccctl demo " ECC_TEST_CONFIG_DIR "/default.ini",
      "eccctl(1), ecc_host(3)",
  };
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    cr_expect(strstr(out, want[i]) != NULL, "--help lacks '%s':\n%s", want[i], out);
  cr_expect(strstr(out, "conf/") == NULL, "--help names the source tree:\n%s", out);
}
