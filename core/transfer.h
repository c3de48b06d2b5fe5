/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transfer.h - one batched transfer as the connector keeps it: the part the
 * engine sees, and around it the completion records, the keys, the batch
 * number and the links of the in-flight FIFOs. The connector's files only.
 */
#ifndef ECC_TRANSFER_H
#define ECC_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/lock.h"
#include "core/directory/directory.h"
#include "core/engine/engine.h"

/* What poll reports for one entry, kept small: a full ecc_completion_v1_t is
 * 168 bytes, and a step of thousands of entries would write (and poll copy)
 * megabytes of them at submit time. */
struct done_rec {
  uint64_t id;     /* loads: the host's transfer id; saves: offset of the key in keys */
  uint64_t nbytes; /* bytes of the entry that the copy moves */
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
  uint64_t *tokens;          /* per record: its directory token (0: none); NULL when no
                              * record of the transfer has one */
  size_t cap_tokens;         /* tokens allocated */
  bool has_tokens;           /* tokens[0 .. n_done) are valid */
  bool settles_reservations; /* a held load: its tokens are reservations that its
                              * success publishes (else frees), not pins */
  struct dir_ref *claims;    /* reservations its saves by block id hold (dir_claim), so
                              * that none is aborted and reused under the copy; given
                              * back, unpublished, once the copy has completed */
  size_t n_claims;           /* claims in use */
  size_t cap_claims;         /* claims allocated */
  struct dir_pin_ref *holds; /* pins its loads by block id took (dir_hold_blocks) on the
                              * entries they read, so that none is evicted and its
                              * blocks rewritten under the copy; released once the
                              * copy has completed */
  size_t n_holds;            /* holds in use */
  size_t cap_holds;          /* holds allocated */
  bool finished;             /* query() said so (status below is final) */
  int status;                /* ECC_OK or the failure reported by the engine */
  uint64_t elapsed_ns;       /* duration measured by the engine */
  struct transfer *next;     /* FIFO / free-list link */
};

/* The direction whose directory work a polled record of t does. */
static inline int transfer_settle_direction(const struct transfer *t)
{
  return t->settles_reservations ? ECC_DIR_SAVE : t->view.direction;
}

/* The connector's transfers not in flight, each kept with its storage for
 * a later batch, so that steps of a steady size allocate nothing. Its lock
 * is the innermost of the connector's: held for a pointer swap, never
 * while anything is called or logged. */
struct transfer_pool {
  struct ecc_mutex lock; /* free */
  struct transfer *free;
  void *(*desc_alloc)(void *ctx, size_t bytes); /* the engine's descriptor memory */
  void (*desc_free)(void *ctx, void *p);
  void *desc_ctx;
};

/* An empty pool whose transfers take descriptor memory from alloc/release
 * (the engine's; NULL: malloc), its lock known to `log`. ECC_OK, or
 * lock_mutex_init's failure (then nothing is made). */
int transfer_pool_init(struct transfer_pool *p, struct ecc_log *log, void *(*alloc)(void *, size_t),
                       void (*release)(void *, void *), void *ctx);
/* Frees every pooled transfer. */
void transfer_pool_destroy(struct transfer_pool *p);
/* A cleared transfer, from the pool or new; NULL when out of memory. */
struct transfer *transfer_get(struct transfer_pool *p);
void transfer_put(struct transfer_pool *p, struct transfer *t);
/* Everything a transfer owns, and the transfer. */
void transfer_free(struct transfer *t);

/* Room for `more` completion records. Returns 0 or -1 (out of memory).
 * Inline, as the other helpers here: every save call grows its batch. */
static inline int transfer_reserve_done(struct transfer *t, size_t more)
{
  if (t->n_done + more <= t->cap_done)
    return 0;
  size_t cap = t->cap_done < 16 ? 16 : t->cap_done;
  while (cap < t->n_done + more)
    cap *= 2;
  struct done_rec *p = realloc(t->done, cap * sizeof(*p));
  if (p == NULL)
    return -1;
  t->done = p;
  t->cap_done = cap;
  return 0;
}

/* Room for keys up to `need` bytes in all. Records hold offsets, not
 * pointers, so the keys may move. Returns 0 or -1 (out of memory). */
static inline int transfer_reserve_keys(struct transfer *t, size_t need)
{
  if (need <= t->keys_cap)
    return 0;
  size_t cap = t->keys_cap < 1024 ? 1024 : t->keys_cap;
  while (cap < need)
    cap *= 2;
  char *p = realloc(t->keys, cap);
  if (p == NULL)
    return -1;
  t->keys = p;
  t->keys_cap = cap;
  return 0;
}

/* Room for the tokens of records up to n_done + more; the records already
 * there that have none read 0 from now on. Returns 0 or -1 (out of memory). */
static inline int transfer_reserve_tokens(struct transfer *t, size_t more)
{
  size_t need = t->n_done + more;
  if (need > t->cap_tokens) {
    size_t cap = t->cap_done > need ? t->cap_done : need;
    uint64_t *p = realloc(t->tokens, cap * sizeof(*p));
    if (p == NULL)
      return -1;
    t->tokens = p;
    t->cap_tokens = cap;
  }
  if (!t->has_tokens && t->n_done > 0)
    memset(t->tokens, 0, t->n_done * sizeof(*t->tokens));
  t->has_tokens = true;
  return 0;
}

/* Room for `more` claims. Returns 0 or -1 (out of memory). */
static inline int transfer_reserve_claims(struct transfer *t, size_t more)
{
  if (t->n_claims + more <= t->cap_claims)
    return 0;
  size_t cap = t->cap_claims < 8 ? 8 : t->cap_claims;
  while (cap < t->n_claims + more)
    cap *= 2;
  struct dir_ref *p = realloc(t->claims, cap * sizeof(*p));
  if (p == NULL)
    return -1;
  t->claims = p;
  t->cap_claims = cap;
  return 0;
}

/* Room for `more` holds. Returns 0 or -1 (out of memory). */
static inline int transfer_reserve_holds(struct transfer *t, size_t more)
{
  if (t->n_holds + more <= t->cap_holds)
    return 0;
  size_t cap = t->cap_holds < 8 ? 8 : t->cap_holds;
  while (cap < t->n_holds + more)
    cap *= 2;
  struct dir_pin_ref *p = realloc(t->holds, cap * sizeof(*p));
  if (p == NULL)
    return -1;
  t->holds = p;
  t->cap_holds = cap;
  return 0;
}

#endif /* ECC_TRANSFER_H */
