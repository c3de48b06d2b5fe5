/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.h - what the parts of eccctl share: the command entry points, their
 * help texts and the strict number parsing every option goes through.
 */
#ifndef ECC_CLI_H
#define ECC_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "ecc_host.h"

/* Exit codes of every command. */
#define CLI_OK 0    /* success */
#define CLI_FAIL 1  /* the command ran and failed (bad config, mismatch...) */
#define CLI_USAGE 2 /* the command line itself was wrong */

/* Each command gets argv with argv[0] = the command name. */
int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_rm(int argc, char **argv);

void help_info(FILE *out);
void help_check(FILE *out);
void help_demo(FILE *out);
void help_ls(FILE *out);
void help_stat(FILE *out);
void help_watch(FILE *out);
void help_metrics(FILE *out);
void help_rm(FILE *out);

/* Print "eccctl CMD: <message>" and the command's synopsis to stderr;
 * returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parse a whole decimal (or 0x hex) number in [min, max]. Returns 0, or -1
 * after printing what was wrong, and the usage, to stderr. */
int cli_parse_u64(const char *cmd, const char *opt, const char *text, uint64_t min, uint64_t max,
                  uint64_t *out);

/* Print why CONFIG could not be used: the shim's message (or the code's
 * name when there is none), with the file named once. */
void cli_config_error(const char *cmd, const char *config, const char *msg, int rc);

/* The tools that read a region (dir_tools.c): join the region CONFIG names
 * as a tool (no GPU, no pinning, no create, a short wait for a region that
 * is not there), NULL after saying why; close it, returning `status` or
 * CLI_FAIL when the close fails; say why a call failed, returning CLI_FAIL. */
ecc_connector_t *cli_join_region(const char *cmd, const char *config);
int cli_close_region(const char *cmd, ecc_connector_t *c, int status);
int cli_call_error(const char *cmd, ecc_connector_t *c, int rc);

#endif /* ECC_CLI_H */
