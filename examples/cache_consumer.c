/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_consumer.c - a consumer through the region's directory, written
 * only from ecc_host.h: for each key read from stdin it waits until the
 * entry is ready (sleeping while another process writes it), loads it
 * pinned into its own buffer, and checks every byte; an empty line ends.
 *
 *     cache_producer CONFIG N | cache_consumer CONFIG
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_host.h"

enum { ROWS = 880, ROW_BYTES = 3072 };

/* What the producer's encoder wrote for image i. */
static int same_as_encoded(unsigned i, const unsigned char *got, size_t n)
{
  for (size_t b = 0; b < n; b++)
    if (got[b] != (unsigned char)(b * 131 + i * 7 + 1))
      return 0;
  return 1;
}

/* Polls until the load of one transfer has completed; its pin is released. */
static int loaded(ecc_connector_t *c)
{
  ecc_completion_t done;
  size_t n = 0;
  while (n == 0)
    if (ecc_poll(c, &done, 1, &n) != ECC_OK)
      return ECC_ERR_CLOSED;
  return done.status;
}

static int consume(ecc_connector_t *c, const char *key, unsigned char *dst, size_t cap)
{
  ecc_entry_t e;
  int rc = ecc_wait_ready(c, key, 1, 10ull * 1000000000ull, &e, NULL); /* pinned for 1 rank */
  if (rc != ECC_OK)
    return rc;
  if (e.state != ECC_ENTRY_READY) {
    fprintf(stderr, "cache_consumer: %s is not in the cache (state %d)\n", key, e.state);
    return ECC_ERR_RANGE;
  }
  ecc_load_pinned_t l = {1, e.token, (uint64_t)(uintptr_t)dst, cap};
  if ((rc = ecc_load_pinned(c, &l, 1, NULL)) != ECC_OK || (rc = loaded(c)) != ECC_OK)
    return rc;
  unsigned i = (unsigned)strtoul(key + strlen("example-image-"), NULL, 10);
  return same_as_encoded(i, dst, e.nbytes) ? ECC_OK : ECC_ERR_TRANSFER;
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: cache_producer CONFIG N | cache_consumer CONFIG\n");
    return 2;
  }
  ecc_kv_t host = {"engine.type", "host"};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = &host, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c;
  char err[512], key[160];
  if (ecc_open(argv[1], &opt, &c, err, sizeof(err)) != ECC_OK) {
    fprintf(stderr, "cache_consumer: %s\n", err);
    return 1;
  }
  static unsigned char dst[ROWS * ROW_BYTES];
  unsigned n = 0;
  int rc = ECC_OK;
  while (rc == ECC_OK && fgets(key, sizeof(key), stdin) != NULL) {
    key[strcspn(key, "\n")] = '\0';
    if (key[0] == '\0')
      break; /* the producer's last key came */
    if ((rc = consume(c, key, dst, sizeof(dst))) == ECC_OK)
      n++;
  }
  printf("cache_consumer: %u entries loaded, every byte as encoded\n", n);
  if (rc != ECC_OK)
    fprintf(stderr, "cache_consumer: %s: %s\n", key, ecc_strerror(rc));
  ecc_close(c);
  return rc == ECC_OK && n > 0 ? 0 : 1;
}
