/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.h - what the demo's three processes share: the options, the results
 * each child writes for the parent, the pipe messages between producer and
 * consumer, and the byte pattern both sides derive from (seed, entry).
 */
#ifndef ECC_CLI_DEMO_H
#define ECC_CLI_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ecc_host.h"

struct demo_opts {
  const char *config; /* the INI file */
  uint64_t entries;   /* encoder outputs to move */
  uint64_t rows;      /* typical tokens per entry; entries vary around it */
  uint64_t row_bytes; /* bytes per token row; 0: the region's block size */
  uint64_t seed;      /* pattern seed */
  uint64_t per_step;  /* entries per save step and per load step */
  uint64_t timeout_s; /* the whole demo fails after this long */
  int64_t corrupt;    /* >= 0: the consumer flips a byte of this entry (a self-test) */
  double deadline;    /* monotonic seconds after which children give up */
  const char *side;   /* NULL: both sides; "producer" or "consumer": that one alone */
  uint64_t hold_s;    /* --side producer: serve this long (0: until a signal) */
};

#define DEMO_ERR_CAP 512

/* What one child reports; lives in memory shared with the parent. */
struct demo_side {
  int done;                    /* 1 once the child finished without error */
  char error[DEMO_ERR_CAP];    /* why it failed ("" if it did not) */
  uint64_t entries;            /* entries saved (producer) or loaded and verified (consumer) */
  uint64_t bytes;              /* bytes saved or loaded */
  uint64_t steps;              /* batched saves or loads issued */
  uint64_t split_entries;      /* producer: entries whose blocks are not one run */
  uint64_t min_rows, max_rows; /* producer: smallest and largest entry */
  uint64_t mismatched_bytes;   /* consumer: bytes that differed from the pattern */
  uint64_t mismatched_entries;
  double phase_s;            /* wall time from first save/load to last completion */
  uint64_t stat_bytes;       /* ecc_stats_t bytes of this side's direction */
  uint64_t stat_busy_ns;     /* ecc_stats_t busy time of this side's direction */
  uint64_t stat_transfers;   /* ecc_stats_t batched transfers */
  uint64_t stat_descriptors; /* ecc_stats_t descriptors after coalescing */
  int have_stats;
  /* What this side's connector described. */
  int creator;
  int on_gpu;
  uint64_t block_size, num_blocks, row_bytes;
  char region_path[256];
  char engine[32];
  char engine_detail[128];
};

struct demo_results {
  struct demo_side producer;
  struct demo_side consumer;
};

/* Producer -> consumer messages. HELLO once the region exists, then one
 * ENTRY per saved entry followed by n_blocks uint32 block ids (none when
 * the region has a directory: the consumer looks the key up). */
#define DEMO_MSG_HELLO 0x45434331u /* "ECC1" */
#define DEMO_MSG_ENTRY 0x45434345u

struct demo_msg {
  uint32_t type;
  uint32_t n_blocks;   /* ENTRY: block ids that follow */
  uint64_t index;      /* ENTRY: entry number, from 0 */
  uint64_t nbytes;     /* ENTRY: bytes of the entry */
  uint64_t block_size; /* HELLO: the region's layout, for the consumer to check */
  uint64_t num_blocks;
  uint32_t directory; /* HELLO: 1 when entries go through the region's directory: ENTRY
                       * messages then carry the key and no block ids */
  uint32_t reserved;
  char key[ECC_KEY_MAX + 1];
};

/* Consumer -> producer: entry `index` was loaded and checked; its blocks
 * may be reused. */
struct demo_ack {
  uint64_t index;
};

/* Rows of entry `index`: around opts->rows, deterministic. */
uint64_t demo_entry_rows(const struct demo_opts *o, uint64_t index);
/* The most rows any entry may have. */
uint64_t demo_max_rows(const struct demo_opts *o);
/* Blocks needed for `nbytes`. */
uint64_t demo_blocks_for(uint64_t nbytes, uint64_t block_size);
/* The content-hash-like key of an entry. */
void demo_key(const struct demo_opts *o, uint64_t index, char *out, size_t cap);

/* Fill `n` bytes with the pattern of (seed, index); never all zero. */
void demo_fill(void *buf, size_t n, uint64_t seed, uint64_t index);
/* Count bytes of buf that differ from the pattern of (seed, index). */
uint64_t demo_verify(const void *buf, size_t n, uint64_t seed, uint64_t index);

/* Whole-message pipe I/O, retrying short transfers and EINTR. Return 0,
 * 1 on end of file before the first byte (read only), or -1 with errno. */
int demo_write_all(int fd, const void *buf, size_t n);
int demo_read_all(int fd, void *buf, size_t n);

double demo_now(void);
/* Sleep briefly while waiting for completions. */
void demo_nap(void);
/* Format the failure of an ecc_* call, with the connector's last error. */
void demo_fail(struct demo_side *side, ecc_connector_t *c, const char *what, int rc);
/* Write a formatted reason to side->error; returns -1. */
int demo_failf(struct demo_side *side, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Open one side's connector on o->config with connector.role = role and
 * region.mode = mode, and record in side what it describes (layout,
 * engine, whether it created the region). Returns 0, or -1 with the
 * reason in side->error (*c is then NULL or must still be closed). */
int demo_open(const struct demo_opts *o, const char *role, const char *mode, struct demo_side *side,
              ecc_connector_t **c, ecc_info_t *info);
/* Record the connector's counters for `direction` (ECC_DIR_*) in side;
 * without stats, side->have_stats stays 0. */
void demo_record_stats(ecc_connector_t *c, int direction, struct demo_side *side);
/* Close c (NULL: nothing); a failure is the side's error unless it has
 * one already. */
void demo_close(ecc_connector_t *c, struct demo_side *side);

/* Whether the connector's region has a directory (ABI 1.1). */
bool demo_has_directory(ecc_connector_t *c);

/* One side alone (demo_side.c), in this process: 0, or -1 with the reason
 * in side->error. */
int demo_side_producer(const struct demo_opts *o, struct demo_side *side);
int demo_side_consumer(const struct demo_opts *o, struct demo_side *side);

int demo_producer(const struct demo_opts *o, int msg_fd, int ack_fd, struct demo_side *side);
int demo_consumer(const struct demo_opts *o, int msg_fd, int ack_fd, struct demo_side *side);

#endif /* ECC_CLI_DEMO_H */
