/* SPDX-License-Identifier: Apache-2.0 */
/*
 * settle.c - publishing, freeing and unpinning for copies that finished
 * (see settle.h).
 */
#include "core/settle.h"

#include <sys/stat.h>

#include "core/tokens.h"
#include "ecc_plugin_v1.h"

int settle_record(struct dir *d, int direction, uint64_t token, int status)
{
  struct dir_ref ref;
  enum token_kind kind = direction == ECC_DIR_SAVE ? TOKEN_RESERVATION : TOKEN_PIN;
  int rc = ECC_ERR_CLOSED; /* a token of the other kind settles nothing */
  if (token_read(token, kind, &ref) == TOKEN_NAMES)
    rc = kind == TOKEN_RESERVATION ? dir_settle(d, ref, status == ECC_OK, NULL, 0)
                                   : dir_unpin(d, token_pin_ref(ref), NULL, 0);
  /* A reservation or pin reclaimed while its copy ran (its deadline passed)
   * leaves bytes nobody may trust: the copy is not reported as a success. */
  return status == ECC_OK && rc != ECC_OK ? ECC_ERR_CLOSED : status;
}

void settle_unclaim(struct dir *d, struct transfer *t, size_t from)
{
  for (size_t i = from; i < t->n_claims; i++)
    (void)dir_unclaim(d, t->claims[i]);
  t->n_claims = from;
}

int settle_release_holds(struct dir *d, struct transfer *t)
{
  int rc = dir_unpin_all(d, t->holds, t->n_holds, NULL, 0);
  t->n_holds = 0;
  return rc == ECC_ERR_CLOSED ? rc : ECC_OK;
}

bool settle_reachable(const struct region *r)
{
  struct stat st;
  uint64_t end = (uint64_t)(r->dir - r->map) + r->dir_bytes;
  return r->dir != NULL && fstat(r->fd, &st) == 0 && (uint64_t)st.st_size >= end;
}
