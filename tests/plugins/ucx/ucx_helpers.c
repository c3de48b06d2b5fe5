/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_helpers.c - shared plumbing of the libecc-ucx.so tests (see
 * ucx_helpers.h).
 */
#include "tests/plugins/ucx/ucx_helpers.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

const char *th_ucx_ini(const char *role, const char *region, uint64_t block_size, uint16_t port,
                       const char *extra)
{
  return th_ini_text("[plugin]\npath = %s\nlog_level = error\n\n"
                     "[region]\nname = %s\nblock_size = %llu\nsize = %llu\n\n"
                     "[engine]\ntype = host\n\n[directory]\nenabled = true\n\n"
                     "[ucx]\nrole = %s\naddress = 127.0.0.1:%u\n%s",
                     ECC_UCX_PLUGIN_PATH, region, (unsigned long long)block_size,
                     (unsigned long long)block_size * 2048, role, port, extra ? extra : "");
}

ecc_connector_t *th_open_ok(const char *ini)
{
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open(%s): %d %s", ini, rc, err);
  return c;
}

uint8_t th_pattern(const char *key, uint64_t i)
{
  return (uint8_t)(key[0] * 7 + key[strlen(key) - 1] * 13 + i * 31 + (i >> 9));
}

void th_produce(ecc_connector_t *srv, const char *key, uint64_t nbytes)
{
  uint8_t *src = malloc(nbytes);
  cr_assert_not_null(src);
  for (uint64_t i = 0; i < nbytes; i++)
    src[i] = th_pattern(key, i);
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(srv, key, nbytes, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED, "%s: state %d", key, e.state);
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(srv, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(srv, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(srv, &done, 1, 10000), 1u, "%s: no save completion", key);
  cr_assert_eq(done.status, ECC_OK);
  free(src);
}

uint32_t th_pins_on(ecc_connector_t *c, const char *key)
{
  ecc_listed_t l[64];
  uint64_t cursor = 0;
  size_t n = 0;
  uint32_t pins = UINT32_MAX;
  do {
    cr_assert_eq(ecc_list(c, &cursor, l, 64, &n), ECC_OK);
    for (size_t i = 0; i < n; i++)
      if (strcmp(l[i].key, key) == 0)
        pins = l[i].pins;
  } while (n > 0 && cursor != 0);
  return pins;
}
