/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_producer.c - a producer through the region's directory, written
 * only from ecc_host.h: for each image it reserves the key (skipping those
 * another process already stored or is writing), saves the encoder's output
 * into the reservation, and prints the key once its copy has completed.
 * An empty line ends its output; it keeps the region open until whoever
 * reads that output is done.
 *
 *     cache_producer CONFIG N | cache_consumer CONFIG
 *
 * The "encoder output" is host memory here, so the connector runs the host
 * engine; a GPU host passes device pointers and its compute stream instead.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>

#include "ecc_host.h"

enum { ROWS = 880, ROW_BYTES = 3072 }; /* a 1280x720 image on Qwen2-VL-2B */

/* What the encoder would have written for image i. */
static void encode(unsigned i, unsigned char *out, size_t n)
{
  for (size_t b = 0; b < n; b++)
    out[b] = (unsigned char)(b * 131 + i * 7 + 1);
}

/* Polls until the save of one key has completed (a host polls once a step). */
static int saved(ecc_connector_t *c)
{
  ecc_completion_t done;
  size_t n = 0;
  while (n == 0)
    if (ecc_poll(c, &done, 1, &n) != ECC_OK)
      return ECC_ERR_CLOSED;
  return done.status;
}

static int produce(ecc_connector_t *c, unsigned i, unsigned char *out, size_t nbytes)
{
  char key[64];
  snprintf(key, sizeof(key), "example-image-%u", i);
  ecc_entry_t e;
  int rc = ecc_reserve(c, key, nbytes, &e);
  if (rc != ECC_OK || e.state != ECC_ENTRY_RESERVED) /* READY or WRITING: nothing to encode */
    return rc;
  encode(i, out, nbytes);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)out, nbytes};
  if ((rc = ecc_save_reserved(c, &s, 1)) != ECC_OK || (rc = ecc_flush(c, NULL)) != ECC_OK ||
      (rc = saved(c)) != ECC_OK)
    return rc;
  printf("%s\n", key);
  return fflush(stdout) == 0 ? ECC_OK : ECC_ERR_SYSTEM;
}

int main(int argc, char **argv)
{
  if (argc != 3) {
    fprintf(stderr, "usage: cache_producer CONFIG N\n");
    return 2;
  }
  ecc_kv_t host = {"engine.type", "host"};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = &host, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c;
  char err[512];
  if (ecc_open(argv[1], &opt, &c, err, sizeof(err)) != ECC_OK) {
    fprintf(stderr, "cache_producer: %s\n", err);
    return 1;
  }
  static unsigned char out[ROWS * ROW_BYTES];
  unsigned n = (unsigned)strtoul(argv[2], NULL, 10);
  int rc = ECC_OK;
  for (unsigned i = 0; i < n && rc == ECC_OK; i++)
    rc = produce(c, i, out, sizeof(out));
  if (rc != ECC_OK)
    fprintf(stderr, "cache_producer: %s\n", ecc_strerror(rc));
  /* An empty line ends the keys; then hold the region (and so its entries)
   * until the reader has closed the pipe. */
  if (rc == ECC_OK && (printf("\n") < 0 || fflush(stdout) != 0))
    rc = ECC_ERR_SYSTEM;
  struct pollfd p = {.fd = 1, .events = 0};
  while (rc == ECC_OK && poll(&p, 1, -1) == 0)
    ;
  ecc_close(c);
  return rc == ECC_OK ? 0 : 1;
}
