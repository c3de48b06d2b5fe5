/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cache_calls.c - the cache functions of ABI 1.2 that are new calls rather
 * than forms of the directory's (those live beside their 1.1 forms in
 * directory_calls.c): reserve with cost and type, peek, the single-flight
 * wait and the residency events.
 */
#include <inttypes.h>
#include <string.h>

#include "common/tensor.h"
#include "core/internal.h"
#include "core/tokens.h"

/* A reservation's type: untyped, or well formed and of exactly nbytes. */
static int check_reserved_type(struct conn *c, const ecc_reserve_args_v1_t *a)
{
  char why[128] = "", text[TENSOR_TEXT_MAX];
  uint64_t bytes = 0;
  if (!tensor_valid(&a->type, &bytes, why, sizeof(why)))
    return log_fail(&c->log, ECC_ERR_INVALID, "reserve_ex %s: the type %s is not one: %s", a->key,
                    tensor_format(&a->type, text, sizeof(text)), why);
  if (!tensor_untyped(&a->type) && bytes != a->nbytes)
    return log_fail(&c->log, ECC_ERR_INVALID,
                    "reserve_ex %s: the type %s holds %" PRIu64 " bytes, but nbytes is %" PRIu64
                    ": give the entry's size in bytes",
                    a->key, tensor_format(&a->type, text, sizeof(text)), bytes, a->nbytes);
  return ECC_OK;
}

int conn_reserve_ex(struct conn *c, const ecc_reserve_args_v1_t *args, ecc_entry_v1_t *out)
{
  int rc = directory_need_side(c, "reserve_ex", ECC_DIR_SAVE);
  if (rc == ECC_OK && args == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "reserve_ex: args is NULL");
  if (rc == ECC_OK && !ECC_COVERS(args, ecc_reserve_args_v1_t, type))
    rc = log_fail(&c->log, ECC_ERR_INVALID,
                  "reserve_ex: args->struct_size %" PRIu32 " does not reach its type (%zu bytes "
                  "needed): set it to sizeof(ecc_reserve_args_v1_t)",
                  args->struct_size, offsetof(ecc_reserve_args_v1_t, type) + sizeof(args->type));
  if (rc == ECC_OK)
    rc = directory_check_key(c, "reserve_ex", 0, args->key);
  if (rc == ECC_OK && args->nbytes > 0)
    rc = check_reserved_type(c, args);
  if (rc != ECC_OK)
    return rc;
  struct dir_meta meta = {.cost_us = args->cost_us, .type = args->type};
  return directory_reserve(c, "reserve_ex", args->key, args->nbytes, &meta, out);
}

/* ---- peek ------------------------------------------------------------------ */

#define PEEK_CHUNK 32

static void peek_out(const struct dir_peeked *p, ecc_peek_v1_t *out)
{
  memset(out, 0, sizeof(*out));
  if (p->state == DIR_STATE_FREE)
    return; /* ECC_ENTRY_ABSENT is 0 */
  out->state = p->state == DIR_STATE_READY ? ECC_ENTRY_READY : ECC_ENTRY_WRITING;
  out->pins = p->pins;
  out->nbytes = p->nbytes;
  out->meta.cost_us = p->meta.cost_us;
  out->meta.hits = p->hits;
  out->meta.type = p->meta.type;
}

int conn_peek(struct conn *c, const char *const *keys, size_t n, ecc_peek_v1_t *out)
{
  int rc = directory_need(c, "peek");
  if (rc == ECC_OK && n > 0 && (keys == NULL || out == NULL))
    rc = log_fail(&c->log, ECC_ERR_INVALID, "peek: %s is NULL", keys == NULL ? "keys" : "out");
  for (size_t i = 0; rc == ECC_OK && i < n; i++)
    rc = directory_check_key(c, "peek", i, keys[i]);
  if (rc == ECC_OK && n > 0)
    rc = directory_need_region(c);
  struct dir_peeked found[PEEK_CHUNK];
  char why[256] = "";
  for (size_t done = 0; rc == ECC_OK && done < n;) {
    size_t k = n - done < PEEK_CHUNK ? n - done : PEEK_CHUNK;
    rc = dir_peek(&c->dir, keys + done, k, found, why, sizeof(why));
    if (rc != ECC_OK)
      return log_fail(&c->log, directory_code(rc), "peek: %s", why);
    for (size_t i = 0; i < k; i++)
      peek_out(&found[i], &out[done + i]);
    done += k;
  }
  return rc;
}

/* ---- wait_ready ---------------------------------------------------------- */

static int check_wait(struct conn *c, const char *key, uint32_t ranks, uint64_t timeout_ns,
                      const ecc_entry_v1_t *out)
{
  int rc = ranks > 0 ? directory_need_side(c, "wait_ready", ECC_DIR_LOAD)
                     : directory_need(c, "wait_ready");
  if (rc == ECC_OK && out == NULL)
    rc = log_fail(&c->log, ECC_ERR_INVALID, "wait_ready: out is NULL");
  if (rc == ECC_OK)
    rc = directory_check_key(c, "wait_ready", 0, key);
  if (rc == ECC_OK && ranks > ECC_RANKS_MAX)
    rc = log_fail(&c->log, ECC_ERR_INVALID,
                  "wait_ready: ranks is %" PRIu32 ", above ECC_RANKS_MAX (%d): one release per "
                  "rank of the engine that loads the entry",
                  ranks, ECC_RANKS_MAX);
  if (rc == ECC_OK && timeout_ns > DIR_WAIT_MAX_NS)
    rc = log_fail(&c->log, ECC_ERR_INVALID,
                  "wait_ready %s: timeout %" PRIu64 " ns is above the bound of an hour (%llu ns)",
                  key, timeout_ns, DIR_WAIT_MAX_NS);
  return rc;
}

int conn_wait_ready(struct conn *c, const char *key, uint32_t ranks, uint64_t timeout_ns,
                    ecc_entry_v1_t *out, ecc_entry_meta_v1_t *meta)
{
  int rc = check_wait(c, key, ranks, timeout_ns, out);
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  int result = DIR_WAIT_ABSENT;
  struct dir_entry_info info;
  struct dir_pin_ref pin = {0, 0};
  char why[256] = "";
  rc = dir_wait(&c->dir, key, ranks, timeout_ns, &result, &info, &pin, why, sizeof(why));
  if (rc != ECC_OK)
    return log_fail_at(&c->log, rc == ECC_ERR_BUSY ? ECC_LOG_DEBUG : ECC_LOG_ERROR,
                       directory_code(rc), "wait_ready %s: %s", key, why);
  /* A region replaced while the call slept is not answered from the old one. */
  if ((rc = directory_need_region(c)) != ECC_OK) {
    if (result == DIR_WAIT_READY && ranks > 0)
      (void)dir_unpin_ranks(&c->dir, pin, ranks, NULL, 0);
    return rc;
  }
  memset(out, 0, sizeof(*out));
  if (meta != NULL)
    memset(meta, 0, sizeof(*meta));
  if (result == DIR_WAIT_TIMEOUT) /* the reservation still being written */
    directory_entry_out(&info, ECC_ENTRY_WRITING, 0, out);
  if (result != DIR_WAIT_READY)
    return ECC_OK;
  uint64_t token = ranks > 0 ? token_of(TOKEN_PIN, pin.slot, pin.gen) : 0;
  directory_entry_out(&info, ECC_ENTRY_READY, token, out);
  if (meta != NULL)
    directory_meta_out(&info, meta);
  return ECC_OK;
}

/* ---- events -------------------------------------------------------------- */

#define EVENTS_CHUNK 64

static void event_out(const struct dir_event *e, uint64_t instance, ecc_event_v1_t *out)
{
  memset(out, 0, sizeof(*out));
  out->seq = e->seq;
  out->time_ns = e->time_ns;
  out->instance = instance;
  out->nbytes = e->nbytes;
  out->cost_us = e->cost_us;
  out->kind = (int32_t)e->kind;
  memcpy(out->key, e->key, sizeof(out->key));
  out->key[sizeof(out->key) - 1] = '\0';
}

int conn_events(struct conn *c, uint64_t *cursor, ecc_event_v1_t *out, size_t cap, size_t *n_out,
                uint64_t *lost)
{
  if (n_out != NULL)
    *n_out = 0;
  int rc = directory_need(c, "events");
  if (rc == ECC_OK && (cursor == NULL || n_out == NULL || (out == NULL && cap > 0)))
    rc = log_fail(&c->log, ECC_ERR_INVALID, "events: %s is NULL",
                  cursor == NULL  ? "cursor"
                  : n_out == NULL ? "n_out"
                                  : "out");
  if (rc == ECC_OK)
    rc = directory_need_region(c);
  if (rc != ECC_OK)
    return rc;
  uint64_t at = *cursor, skipped = 0, instance = dir_instance(&c->dir);
  size_t n = 0;
  struct dir_event chunk[EVENTS_CHUNK];
  do {
    size_t want = cap - n < EVENTS_CHUNK ? cap - n : EVENTS_CHUNK, got = 0;
    uint64_t lost_now = 0;
    (void)dir_events(&c->dir, &at, chunk, want, &got, &lost_now);
    skipped += lost_now;
    for (size_t i = 0; i < got; i++)
      event_out(&chunk[i], instance, &out[n + i]);
    n += got;
    if (got < want || want == 0)
      break;
  } while (n < cap);
  *cursor = at;
  *n_out = n;
  if (lost != NULL)
    *lost = skipped;
  return ECC_OK;
}
