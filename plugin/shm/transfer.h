/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transfer.h - one batched transfer as the connector keeps it: the part the
 * engine sees, and around it the completion records, the keys, the batch
 * number and the links of the in-flight FIFOs. The connector's files only.
 */
#ifndef ECC_TRANSFER_H
#define ECC_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"

/* What poll reports for one entry, kept small: a full ecc_completion_v1_t is
 * 168 bytes, and a step of thousands of entries would write (and poll copy)
 * megabytes of them at submit time. */
struct done_rec {
  uint64_t id;               /* loads: the host's transfer id; saves: offset of the key in keys */
  uint64_t nbytes;           /* bytes of the entry that the copy moves */
};

struct transfer {
  struct transfer_view view; /* direction, descriptors, engine state */
  uint64_t batch;            /* sequence number in its direction, from 1 */
  struct done_rec *done;     /* one record per entry, filled at submit */
  size_t n_done;             /* records in use */
  size_t cap_done;           /* records allocated */
  char *keys;                /* saves: the entries' keys, each NUL-terminated, back to back */
  size_t keys_len;           /* bytes of keys in use */
  size_t keys_cap;           /* bytes of keys allocated */
  size_t next_report;        /* first record poll has not returned yet */
  int finished;              /* 1 once query() said so (status below is final) */
  int status;                /* ECC_OK or the failure reported by the engine */
  uint64_t elapsed_ns;       /* duration measured by the engine */
  struct transfer *next;     /* FIFO / free-list link */
};

#endif /* ECC_TRANSFER_H */
