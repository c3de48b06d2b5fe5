/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_probe.c - libFuzzer target: the input is the payload of a report
 * from ecc_check's child process, as the parent reads it (probe_decode).
 * The child ran the plugin's code, so these bytes are untrusted. Invariants
 * besides "no crash": the result is ECC_OK, ECC_ERR_INCOMPATIBLE or
 * ECC_ERR_NOMEM; the text is a C string; a decoded status is of the closed
 * set; every string of a decoded meta ends inside its field or its block,
 * and a second decode gives the same result.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host-shim/probe.h"

#define ERR_CAP 9000

static void check_meta(const ecc_plugin_meta_t *m, const uint8_t *data, size_t size)
{
  if (memchr(m->path, '\0', sizeof(m->path)) == NULL ||
      memchr(m->name, '\0', sizeof(m->name)) == NULL ||
      memchr(m->version, '\0', sizeof(m->version)) == NULL)
    abort();
  if (m->n_params > PROBE_PARAMS_MAX || (m->n_params != 0) != (m->params != NULL))
    abort();
  size_t total = 0;
  for (size_t i = 0; i < m->n_params; i++) {
    const ecc_param_t *p = &m->params[i];
    if (p->key == NULL)
      abort(); /* a key is never NULL */
    const char *s[3] = {p->key, p->default_value, p->help};
    for (int k = 0; k < 3; k++)
      total += s[k] != NULL ? strlen(s[k]) : 0;
  }
  if (total > size)
    abort(); /* the strings came from the payload: they cannot be longer */
  (void)data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static char err[ERR_CAP], again[ERR_CAP];
  int status = 1, status2 = 1;
  ecc_plugin_meta_t *meta = NULL, *meta2 = NULL;
  memset(err, 0x5a, sizeof(err));
  int rc = probe_decode(data, size, "fuzz", &status, &meta, err, sizeof(err));
  if (rc != ECC_OK && rc != ECC_ERR_INCOMPATIBLE && rc != ECC_ERR_NOMEM)
    abort();
  if (memchr(err, '\0', sizeof(err)) == NULL)
    abort();
  if (rc == ECC_OK && (status > ECC_OK || status < ECC_ERR_UNSUPPORTED))
    abort();
  if (rc != ECC_OK && meta != NULL)
    abort(); /* nothing is handed out with an error */
  if (meta != NULL)
    check_meta(meta, data, size);
  int rc2 = probe_decode(data, size, "fuzz", &status2, &meta2, again, sizeof(again));
  if (rc2 != rc || strcmp(err, again) != 0 || (rc == ECC_OK && status2 != status))
    abort();
  if ((meta == NULL) != (meta2 == NULL) ||
      (meta != NULL && (meta->n_params != meta2->n_params || strcmp(meta->name, meta2->name))))
    abort();
  free(meta);
  free(meta2);
  return 0;
}
