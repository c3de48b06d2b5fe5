/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_said_once.c - an error is said once: with the default sink, what a
 * call (or ecc_open) returns is not also printed on stderr, and the caller
 * still has its text; a host's own log sink is told every line as before.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

/* stderr goes to a file from here until stderr_text() reads it back. */
static int saved_stderr = -1;
static char stderr_path[64];

static void capture_stderr(void)
{
  snprintf(stderr_path, sizeof(stderr_path), "/tmp/ecc-said-once-%d.txt", (int)getpid());
  int fd = open(stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  saved_stderr = dup(STDERR_FILENO);
  cr_assert_geq(saved_stderr, 0);
  cr_assert_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
  close(fd);
}

static const char *stderr_text(void)
{
  cr_assert_eq(dup2(saved_stderr, STDERR_FILENO), STDERR_FILENO);
  close(saved_stderr);
  const char *text = th_read_file(stderr_path);
  unlink(stderr_path);
  return text;
}

static const char *directory_ini(void)
{
  return th_ini("both", th_region_name(), 64, 64, "[directory]\nenabled = true\n");
}

Test(said_once, a_failed_call_is_returned_not_printed)
{
  capture_stderr();
  ecc_connector_t *c = NULL;
  char err[512];
  int rc = ecc_open(directory_ini(), NULL, &c, err, sizeof(err));
  int unpin = c != NULL ? ecc_unpin(c, 0x1234) : rc;
  char last[512] = "";
  if (c != NULL)
    ecc_last_error(c, last, sizeof(last));
  ecc_close(c);
  const char *printed = stderr_text();
  cr_assert_eq(rc, ECC_OK, "%s", err);
  cr_expect_eq(unpin, ECC_ERR_CLOSED);
  cr_expect(strstr(last, "0x1234") != NULL, "ecc_last_error: '%s'", last);
  cr_expect_eq(strstr(printed, "0x1234"), NULL, "printed as well:\n%s", printed);
}

Test(said_once, a_failed_open_is_in_err_not_on_stderr)
{
  capture_stderr();
  ecc_connector_t *c = NULL;
  char err[512] = "";
  const char *ini = th_ini("both", th_region_name(), 64, 64, "[engine]\nmax_sms = 0\n");
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  const char *printed = stderr_text();
  cr_expect_neq(rc, ECC_OK);
  cr_expect(strstr(err, "engine.max_sms") != NULL, "err: '%s'", err);
  cr_expect_eq(strstr(printed, "max_sms"), NULL, "printed as well:\n%s", printed);
}

Test(said_once, a_host_sink_is_told_every_error_line)
{
  th_captured[0] = '\0';
  ecc_open_options_t opt = {.struct_size = sizeof(opt), .log = th_capture, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512];
  cr_assert_eq(ecc_open(directory_ini(), &opt, &c, err, sizeof(err)), ECC_OK, "%s", err);
  cr_expect_eq(ecc_unpin(c, 0x1234), ECC_ERR_CLOSED);
  ecc_close(c);
  cr_expect(strstr(th_captured, "0x1234") != NULL, "the sink got: %s", th_captured);
}

/* A region large enough to take a while says so as its creation starts,
 * and how long it took once created. */
Test(said_once, a_large_region_says_it_is_being_created)
{
  th_captured[0] = '\0';
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .log = th_capture, .log_level = ECC_LOG_INFO};
  const char *ini = th_ini_text("[plugin]\npath = %s\n[region]\nname = %s\nsize = 512MiB\n"
                                "block_size = 64KiB\n[engine]\ntype = host\n",
                                ECC_PLUGIN_PATH, th_region_name());
  ecc_connector_t *c = NULL;
  char err[512];
  cr_assert_eq(ecc_open(ini, &opt, &c, err, sizeof(err)), ECC_OK, "%s", err);
  ecc_close(c);
  const char *start = strstr(th_captured, "allocating 512 MiB of shared memory");
  const char *done = strstr(th_captured, "created region ");
  cr_expect(start != NULL && done != NULL && start < done, "the log: %s", th_captured);
  cr_expect(done != NULL && strstr(done, " ms") != NULL, "the log: %s", th_captured);
}
