/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe.h - running a job that loads plugin code in a child process and
 * bringing back what it reported, or how the child ended instead. Private
 * to libecc-host.so.
 */
#ifndef ECC_PROBE_H
#define ECC_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "ecc_host.h"

/* Longest message a report carries, NUL included. */
#define PROBE_MESSAGE_MAX 8192
/* Most params a report carries, and the longest of their strings (NUL
 * included); longer strings arrive cut to this length. */
#define PROBE_PARAMS_MAX 1024
#define PROBE_TEXT_MAX 1024

/* What a job fills in the child. meta.params points into the plugin. */
struct probe_report {
  int status;                      /* ECC_OK or an ECC_ERR_* code */
  char message[PROBE_MESSAGE_MAX]; /* the job's error, or its summary */
  int has_meta;                    /* 1 when meta is filled */
  ecc_plugin_meta_t meta;
};

typedef void (*probe_job)(void *arg, struct probe_report *out);

/* Runs job(arg, report) in a child process made by fork, which then ends
 * without running the caller's exit handlers; this process never runs the
 * job. Waits at most timeout_ms for the report and the child's end.
 * Returns ECC_OK when the child sent a well-formed report and exited with
 * status 0: *status is the report's, err receives its message and, when
 * meta is not NULL, *meta is one block from malloc holding the
 * ecc_plugin_meta_t, its params and their strings (NULL if the report had no
 * meta), which the caller frees.
 * Otherwise err says how the child ended, after `subject`:
 * ECC_ERR_INCOMPATIBLE when it exited without a report, was killed by a
 * signal, did not finish in time (it is killed then) or sent a malformed
 * report; ECC_ERR_SYSTEM when pipe, fork or waitpid failed; ECC_ERR_NOMEM.
 * In every case the child has been reaped when this returns. */
int probe_run(probe_job job, void *arg, uint64_t timeout_ms, const char *subject, int *status,
              ecc_plugin_meta_t **meta, char *err, size_t err_cap);

/* The parent's reading of a report's payload (the bytes after its magic
 * and length words), as probe_run does it; on its own for the fuzz target.
 * Returns ECC_OK with *status, the message in err and *meta (when meta is
 * not NULL) as probe_run says; ECC_ERR_INCOMPATIBLE for a malformed
 * payload (err names the field); ECC_ERR_NOMEM. */
int probe_decode(const unsigned char *payload, size_t len, const char *subject, int *status,
                 ecc_plugin_meta_t **meta, char *err, size_t err_cap);

#endif /* ECC_PROBE_H */
