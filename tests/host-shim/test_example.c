/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_example.c - the README's minimal host program, built from the public
 * headers alone, saves in one process and loads in another.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "tests/helpers.h"

Test(example, minimal_host_round_trips_between_processes)
{
  char text[512];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\n[region]\nname = %s\nsize = 1MiB\nblock_size = 3KiB\n"
           "[engine]\ntype = host\n",
           ECC_PLUGIN_PATH, th_region_name());
  const char *ini = th_write_temp(text, ".ini");
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "%s/bin/minimal_host %s 2>&1", ECC_BUILD_DIR, ini);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  char out[4096] = "";
  size_t n = fread(out, 1, sizeof(out) - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  cr_expect_eq(status, 0, "minimal_host failed:\n%s", out);
  cr_expect(strstr(out, "producer: saved sha256:4f2a (12288 bytes)") != NULL, "%s", out);
  cr_expect(strstr(out, "consumer: loaded transfer 1: bytes match") != NULL, "%s", out);
}
