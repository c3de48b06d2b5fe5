/* SPDX-License-Identifier: Apache-2.0 */
/*
 * unit_helpers.c - shared plumbing of the tests of core/'s units (see
 * unit_helpers.h).
 */
#include "tests/core/unit_helpers.h"

#include <string.h>
#include <unistd.h>

const char *th_log_last(struct ecc_log *log)
{
  static char buf[LOG_TEXT_MAX];
  log_last(log, buf, sizeof(buf));
  return buf;
}

struct region_header th_region_header(uint64_t bs, uint64_t nb)
{
  struct region_header h;
  memset(&h, 0, sizeof(h));
  memcpy(h.magic, REGION_MAGIC, sizeof(h.magic));
  h.layout_version = REGION_LAYOUT_VERSION;
  h.header_bytes = REGION_HEADER_BYTES;
  h.block_size = bs;
  h.num_blocks = nb;
  h.file_bytes = REGION_HEADER_BYTES + bs * nb;
  h.creator_pid = 1;
  h.creator_uid = (uint32_t)geteuid();
  return h;
}
