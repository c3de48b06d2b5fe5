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

/* The README's C example: a producer and a consumer through the directory,
 * two processes on a region of conf/default.ini's shape (its own name). */
static void run_pipe(const char *ini, unsigned n, char *out, size_t cap, int *status)
{
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "%s/bin/cache_producer %s %u | %s/bin/cache_consumer %s 2>&1",
           ECC_BUILD_DIR, ini, n, ECC_BUILD_DIR, ini);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t got = fread(out, 1, cap - 1, p);
  out[got] = '\0';
  *status = pclose(p);
}

Test(example, cache_producer_and_consumer_share_entries_through_the_directory)
{
  char text[512];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\n[region]\nname = %s\nsize = 64MiB\nblock_size = 3KiB\n"
           "[directory]\nenabled = true\n",
           ECC_PLUGIN_PATH, th_region_name());
  const char *ini = th_write_temp(text, ".ini");
  char out[4096];
  int status;
  run_pipe(ini, 12, out, sizeof(out), &status);
  cr_expect_eq(status, 0, "the example failed:\n%s", out);
  cr_expect(strstr(out, "cache_consumer: 12 entries loaded, every byte as encoded") != NULL, "%s",
            out);
}
