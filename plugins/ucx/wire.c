/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.c - the UCX plugin's messages as bytes (wire.h): the layouts below,
 * the encoders, the decoder that checks every field before anything reads
 * it, and the accessors over a decoded message's keys, entries and tokens.
 *
 * Layouts. Every integer is little-endian and unaligned; fields follow each
 * other in the order given, with nothing between them.
 *
 *   header   magic u32, version u16, type u16, length u32, flags u32,
 *            seq u64                                               24 bytes
 *   HELLO    layout_hash u64, client_id u64, tp_rank u32,
 *            group_id u64                                          28 bytes
 *   WELCOME  server_id u64, block_size u64, num_blocks u32,
 *            region_base u64, rkey_len u32, then rkey_len bytes    32 + rkey_len
 *   REFUSE   code i32, reason_len u16, then reason_len bytes       6 + reason_len
 *   LOOKUP   req_id u64, ranks u32, n_keys u32,
 *            then n_keys x (len u16, then len bytes)               16 + sum(2 + len)
 *   FOUND    req_id u64, status i32, n u32, then n entries of
 *            found u8, n_runs u8, pad u16 (0), nbytes u64, token u64,
 *            then n_runs x (first u32, count u32)                  16 + sum(20 + 8 n_runs)
 *   RELEASE  n u32, then n x token u64                             4 + 8 n
 *   PING     nonce u64                                             8 bytes
 *   PONG     nonce u64                                             8 bytes
 *   PULL     req_id u64, token u64                                 16 bytes
 *   PULLED   req_id u64, status i32                                12 bytes
 *   DESCRIBE req_id u64, token u64                                 16 bytes
 *   DESCRIBED req_id u64, status i32, pad u32 (0), then with       16 + (20 + 8 n_runs
 *            ECC_OK one entry as in FOUND and its key as in LOOKUP  + 2 + key) with ECC_OK
 *   data     (header of a data message, not a message type) magic u32,
 *            version u16, flags u16 (0), req_id u64, offset u64    24 bytes
 *
 * The rules on field values (wire.h) are each written once, as a *_problem
 * function that both the decoder and the encoders call: the encoders can
 * then never send what the decoder refuses.
 */
#include "plugins/ucx/wire.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define HELLO_BODY 28u
#define WELCOME_FIXED 32u
#define REFUSE_FIXED 6u
#define LOOKUP_FIXED 16u
#define KEY_FIXED 2u
#define FOUND_FIXED 16u
#define ENTRY_FIXED 20u
#define RUN_BYTES 8u
#define RELEASE_FIXED 4u
#define TOKEN_BYTES 8u
#define PING_BODY 8u
#define PULL_BODY 16u
#define PULLED_BODY 12u
#define DESCRIBE_BODY 16u
#define DESCRIBED_FIXED 16u

/* The counts bound every body far below WIRE_MAX_BODY, which stays a coarse
 * first check that needs no knowledge of the type. */
_Static_assert(LOOKUP_FIXED + WIRE_MAX_KEYS * (KEY_FIXED + ECC_KEY_MAX) <= WIRE_MAX_BODY,
               "a LOOKUP of WIRE_MAX_KEYS longest keys fits a body");
_Static_assert(FOUND_FIXED + WIRE_MAX_KEYS * (ENTRY_FIXED + WIRE_MAX_RUNS * RUN_BYTES) <=
                   WIRE_MAX_BODY,
               "a FOUND of WIRE_MAX_KEYS entries of WIRE_MAX_RUNS runs fits a body");
_Static_assert(WIRE_MAX_REASON <= UINT16_MAX, "reason_len travels as u16");
_Static_assert(ECC_KEY_MAX <= UINT16_MAX, "a key's len travels as u16");
_Static_assert(WIRE_MAX_RUNS <= UINT8_MAX, "n_runs travels as u8");

/* Where an error's text goes; buf may be NULL (the encoders pass none). */
struct why {
  char *buf;
  size_t cap;
};

__attribute__((format(printf, 3, 4))) static int fail(const struct why *w, int code,
                                                      const char *fmt, ...)
{
  if (w == NULL || w->buf == NULL || w->cap == 0)
    return code;
  int n = snprintf(w->buf, w->cap, "wire: ");
  if (n >= 0 && (size_t)n < w->cap) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->buf + n, w->cap - (size_t)n, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* Byte helpers: the layout is fixed whatever the host's order. */
static uint16_t ld16(const uint8_t *p)
{
  return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t ld32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t ld64(const uint8_t *p)
{
  return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static uint8_t *st8(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  return p + 1;
}

static uint8_t *st16(uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  return p + 2;
}

static uint8_t *st32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
  return p + 4;
}

static uint8_t *st64(uint8_t *p, uint64_t v)
{
  st32(p, (uint32_t)v);
  return st32(p + 4, (uint32_t)(v >> 32));
}

static uint8_t *stbytes(uint8_t *p, const void *src, size_t n)
{
  if (n > 0)
    memcpy(p, src, n);
  return p + n;
}

/* A cursor over a body whose length the header gave. */
struct rd {
  const uint8_t *p;
  size_t left;
};

/* The next n bytes, or NULL when fewer are left. */
static const uint8_t *take(struct rd *r, size_t n)
{
  if (r->left < n)
    return NULL;
  const uint8_t *at = r->p;
  r->p += n;
  r->left -= n;
  return at;
}

const char *wire_type_name(uint32_t type)
{
  switch (type) {
#define WIRE_TYPE_NAME(name, value, text) \
  case name:                              \
    return text;
    WIRE_TYPE_MAP(WIRE_TYPE_NAME)
#undef WIRE_TYPE_NAME
  default:
    return "?";
  }
}

static bool known_type(uint32_t type)
{
  return strcmp(wire_type_name(type), "?") != 0;
}

static const char *status_name(int32_t code)
{
  switch (code) {
#define WIRE_STATUS_NAME(name, value, text) \
  case value:                               \
    return #name;
    ECC_STATUS_MAP(WIRE_STATUS_NAME)
#undef WIRE_STATUS_NAME
  default:
    return "not a status";
  }
}

uint64_t wire_layout_hash(uint64_t block_size)
{
  uint8_t bytes[10];
  st16(st64(bytes, block_size), WIRE_VERSION);
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
  for (size_t i = 0; i < sizeof(bytes); i++) {
    h ^= bytes[i];
    h *= 0x100000001b3ull; /* FNV 64 prime */
  }
  return h;
}

/* --- The rules, shared by the decoder and the encoders --- */

static int welcome_problem(uint32_t rkey_len, const struct why *w)
{
  if (rkey_len < 1 || rkey_len > WIRE_MAX_RKEY)
    return fail(w, ECC_ERR_INVALID, "WELCOME rkey_len %u, must be 1..%u", rkey_len, WIRE_MAX_RKEY);
  return ECC_OK;
}

static int refuse_problem(int32_t code, size_t reason_len, const struct why *w)
{
  if (code < ECC_STATUS_MIN || code > -1)
    return fail(w, ECC_ERR_INVALID, "REFUSE code %d (%s), must be an ECC_ERR_* value (%d..-1)",
                code, status_name(code), ECC_STATUS_MIN);
  if (reason_len > WIRE_MAX_REASON)
    return fail(w, ECC_ERR_INVALID, "REFUSE reason_len %zu, must be 0..%u", reason_len,
                WIRE_MAX_REASON);
  return ECC_OK;
}

static int lookup_problem(uint32_t ranks, uint32_t n_keys, const struct why *w)
{
  if (ranks < 1)
    return fail(w, ECC_ERR_INVALID, "LOOKUP ranks %u, must be >= 1", ranks);
  if (n_keys < 1 || n_keys > WIRE_MAX_KEYS)
    return fail(w, ECC_ERR_INVALID, "LOOKUP n_keys %u, must be 1..%u", n_keys, WIRE_MAX_KEYS);
  return ECC_OK;
}

static int key_len_problem(size_t len, uint32_t i, const struct why *w)
{
  if (len < 1 || len > ECC_KEY_MAX)
    return fail(w, ECC_ERR_INVALID, "LOOKUP key %u: length %zu, must be 1..%u", i, len,
                ECC_KEY_MAX);
  return ECC_OK;
}

/* A key travels as its bytes alone; a NUL inside could not be told from
 * its end on the side that holds keys as C strings. */
static int key_problem(const uint8_t *key, size_t len, uint32_t i, const struct why *w)
{
  int rc = key_len_problem(len, i, w);
  if (rc != ECC_OK)
    return rc;
  const uint8_t *nul = memchr(key, 0, len);
  if (nul != NULL)
    return fail(w, ECC_ERR_INVALID, "LOOKUP key %u: NUL byte at offset %zu of its %zu", i,
                (size_t)(nul - key), len);
  return ECC_OK;
}

static int found_problem(int32_t status, uint32_t n, const struct why *w)
{
  if (status < ECC_STATUS_MIN || status > ECC_OK)
    return fail(w, ECC_ERR_INVALID, "FOUND status %d, must be ECC_OK or an ECC_ERR_* value (%d..0)",
                status, ECC_STATUS_MIN);
  if (status != ECC_OK && n != 0)
    return fail(w, ECC_ERR_INVALID, "FOUND status %d (%s) with n %u, n must be 0 unless ECC_OK",
                status, status_name(status), n);
  if (status == ECC_OK && (n < 1 || n > WIRE_MAX_KEYS))
    return fail(w, ECC_ERR_INVALID, "FOUND n %u with status ECC_OK, must be 1..%u", n,
                WIRE_MAX_KEYS);
  return ECC_OK;
}

/* The fields before the runs; n_runs is bounded here, before any run is
 * read into the entry's WIRE_MAX_RUNS slots. */
static int entry_head_problem(const struct wire_found_entry *e, uint32_t i, const struct why *w)
{
  if (e->found > 1)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: found %u, must be 0 or 1", i, e->found);
  if (e->found == 0) {
    if (e->n_runs != 0)
      return fail(w, ECC_ERR_INVALID, "FOUND entry %u: absent, n_runs %u, must be 0", i, e->n_runs);
    if (e->nbytes != 0 || e->token != 0)
      return fail(w, ECC_ERR_INVALID,
                  "FOUND entry %u: absent, nbytes %llu and token %llu, both must be 0", i,
                  (unsigned long long)e->nbytes, (unsigned long long)e->token);
    return ECC_OK;
  }
  if (e->n_runs < 1 || e->n_runs > WIRE_MAX_RUNS)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: n_runs %u, must be 1..%u", i, e->n_runs,
                WIRE_MAX_RUNS);
  if (e->nbytes < 1)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: nbytes 0, must be >= 1", i);
  return ECC_OK;
}

/* Each run holds a block and ends where a uint32 block id can still say;
 * with n_runs >= 1 the entry then has at least one block. */
static int runs_problem(const struct wire_found_entry *e, uint32_t i, const struct why *w)
{
  for (uint32_t k = 0; k < e->n_runs; k++) {
    const struct wire_run *run = &e->runs[k];
    if (run->count < 1)
      return fail(w, ECC_ERR_INVALID, "FOUND entry %u run %u: count 0, must be >= 1", i, k);
    if ((uint64_t)run->first + run->count > UINT32_MAX)
      return fail(w, ECC_ERR_INVALID,
                  "FOUND entry %u run %u: first %u + count %u is past the last block id %u", i, k,
                  run->first, run->count, UINT32_MAX);
  }
  return ECC_OK;
}

static int entry_problem(const struct wire_found_entry *e, uint32_t i, const struct why *w)
{
  int rc = entry_head_problem(e, i, w);
  return rc != ECC_OK ? rc : runs_problem(e, i, w);
}

static int release_problem(uint32_t n, const struct why *w)
{
  if (n < 1 || n > WIRE_MAX_TOKENS)
    return fail(w, ECC_ERR_INVALID, "RELEASE n %u, must be 1..%u", n, WIRE_MAX_TOKENS);
  return ECC_OK;
}

/* --- Decoding --- */

static int decode_header(const uint8_t *buf, size_t len, struct wire_header *h, const struct why *w)
{
  if (len < WIRE_HEADER_BYTES)
    return fail(w, ECC_ERR_INVALID, "header: message of %zu bytes, shorter than the %u-byte header",
                len, WIRE_HEADER_BYTES);
  h->magic = ld32(buf);
  h->version = ld16(buf + 4);
  h->type = ld16(buf + 6);
  h->length = ld32(buf + 8);
  h->flags = ld32(buf + 12);
  h->seq = ld64(buf + 16);
  if (h->magic != WIRE_MAGIC)
    return fail(w, ECC_ERR_INCOMPATIBLE, "header magic 0x%08x, expected 0x%08x", h->magic,
                WIRE_MAGIC);
  if (h->version != WIRE_VERSION)
    return fail(w, ECC_ERR_INCOMPATIBLE, "header version %u, this side speaks version %u",
                h->version, WIRE_VERSION);
  if (h->flags != 0)
    return fail(w, ECC_ERR_INVALID, "header flags 0x%x, must be 0", h->flags);
  if (h->length > WIRE_MAX_BODY)
    return fail(w, ECC_ERR_INVALID, "header length %u, limit %u", h->length, WIRE_MAX_BODY);
  if (h->length != len - WIRE_HEADER_BYTES)
    return fail(w, ECC_ERR_INVALID, "header length %u, but %zu bytes follow the header", h->length,
                len - WIRE_HEADER_BYTES);
  if (!known_type(h->type))
    return fail(w, ECC_ERR_INVALID, "header type %u, not a message type", h->type);
  return ECC_OK;
}

/* A body shorter than its fixed fields, named with its type. */
static int short_body(const char *type, size_t len, uint32_t fixed, const struct why *w)
{
  return fail(w, ECC_ERR_INVALID, "%s body: length %zu, shorter than its %u fixed bytes", type, len,
              fixed);
}

static int dec_hello(const uint8_t *b, size_t len, struct wire_hello *m, const struct why *w)
{
  if (len != HELLO_BODY)
    return fail(w, ECC_ERR_INVALID, "HELLO body: length %zu, must be %u", len, HELLO_BODY);
  m->layout_hash = ld64(b);
  m->client_id = ld64(b + 8);
  m->tp_rank = ld32(b + 16);
  m->group_id = ld64(b + 20);
  return ECC_OK;
}

static int dec_welcome(const uint8_t *b, size_t len, struct wire_welcome *m, const struct why *w)
{
  if (len < WELCOME_FIXED)
    return short_body("WELCOME", len, WELCOME_FIXED, w);
  m->server_id = ld64(b);
  m->block_size = ld64(b + 8);
  m->num_blocks = ld32(b + 16);
  m->region_base = ld64(b + 20);
  m->rkey_len = ld32(b + 28);
  int rc = welcome_problem(m->rkey_len, w);
  if (rc != ECC_OK)
    return rc;
  if (len - WELCOME_FIXED != m->rkey_len)
    return fail(w, ECC_ERR_INVALID, "WELCOME body: rkey_len %u, but %zu bytes follow", m->rkey_len,
                len - WELCOME_FIXED);
  m->rkey = b + WELCOME_FIXED;
  return ECC_OK;
}

/* The reason reaches the encoder as a C string: a NUL inside would cut it. */
static int dec_refuse(const uint8_t *b, size_t len, struct wire_refuse *m, const struct why *w)
{
  if (len < REFUSE_FIXED)
    return short_body("REFUSE", len, REFUSE_FIXED, w);
  m->code = (int32_t)ld32(b);
  m->reason_len = ld16(b + 4);
  int rc = refuse_problem(m->code, m->reason_len, w);
  if (rc != ECC_OK)
    return rc;
  if (len - REFUSE_FIXED != m->reason_len)
    return fail(w, ECC_ERR_INVALID, "REFUSE body: reason_len %u, but %zu bytes follow",
                m->reason_len, len - REFUSE_FIXED);
  m->reason = (const char *)(b + REFUSE_FIXED);
  const char *nul = memchr(m->reason, 0, m->reason_len);
  if (nul != NULL)
    return fail(w, ECC_ERR_INVALID, "REFUSE reason: NUL byte at offset %zu of its %u",
                (size_t)(nul - m->reason), m->reason_len);
  return ECC_OK;
}

/* Key i at the cursor, checked; the cursor moves past it. */
static int take_key(struct rd *r, uint32_t i, struct wire_key *k, const struct why *w)
{
  const uint8_t *p = take(r, KEY_FIXED);
  if (p == NULL)
    return fail(w, ECC_ERR_INVALID, "LOOKUP key %u: its len needs %u bytes, %zu left", i, KEY_FIXED,
                r->left);
  k->len = ld16(p);
  int rc = key_len_problem(k->len, i, w); /* before the bytes: a wild len names the limit */
  if (rc != ECC_OK)
    return rc;
  p = take(r, k->len);
  if (p == NULL)
    return fail(w, ECC_ERR_INVALID, "LOOKUP key %u: length %u, but %zu bytes left", i, k->len,
                r->left);
  k->key = (const char *)p;
  return key_problem(p, k->len, i, w);
}

static int dec_lookup(const uint8_t *b, size_t len, struct wire_lookup *m, const struct why *w)
{
  if (len < LOOKUP_FIXED)
    return short_body("LOOKUP", len, LOOKUP_FIXED, w);
  m->req_id = ld64(b);
  m->ranks = ld32(b + 8);
  m->n_keys = ld32(b + 12);
  int rc = lookup_problem(m->ranks, m->n_keys, w);
  if (rc != ECC_OK)
    return rc;
  struct rd r = {b + LOOKUP_FIXED, len - LOOKUP_FIXED};
  for (uint32_t i = 0; i < m->n_keys; i++) {
    struct wire_key k;
    rc = take_key(&r, i, &k, w);
    if (rc != ECC_OK)
      return rc;
  }
  if (r.left != 0)
    return fail(w, ECC_ERR_INVALID, "LOOKUP body: %zu bytes after the last of n_keys %u", r.left,
                m->n_keys);
  m->keys = b + LOOKUP_FIXED;
  m->keys_bytes = (uint32_t)(len - LOOKUP_FIXED);
  return ECC_OK;
}

/* Entry i at the cursor, checked; the cursor moves past it. */
static int take_entry(struct rd *r, uint32_t i, struct wire_found_entry *e, const struct why *w)
{
  memset(e, 0, sizeof(*e));
  const uint8_t *p = take(r, ENTRY_FIXED);
  if (p == NULL)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: needs %u bytes, %zu left", i, ENTRY_FIXED,
                r->left);
  e->found = p[0];
  e->n_runs = p[1];
  uint32_t pad = ld16(p + 2);
  e->nbytes = ld64(p + 4);
  e->token = ld64(p + 12);
  if (pad != 0)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: pad %u, must be 0", i, pad);
  int rc = entry_head_problem(e, i, w);
  if (rc != ECC_OK)
    return rc;
  p = take(r, (size_t)e->n_runs * RUN_BYTES);
  if (p == NULL)
    return fail(w, ECC_ERR_INVALID, "FOUND entry %u: n_runs %u needs %u bytes, %zu left", i,
                e->n_runs, e->n_runs * RUN_BYTES, r->left);
  for (uint32_t k = 0; k < e->n_runs; k++) {
    e->runs[k].first = ld32(p + k * RUN_BYTES);
    e->runs[k].count = ld32(p + k * RUN_BYTES + 4);
  }
  return runs_problem(e, i, w);
}

static int dec_found(const uint8_t *b, size_t len, struct wire_found *m, const struct why *w)
{
  if (len < FOUND_FIXED)
    return short_body("FOUND", len, FOUND_FIXED, w);
  m->req_id = ld64(b);
  m->status = (int32_t)ld32(b + 8);
  m->n = ld32(b + 12);
  int rc = found_problem(m->status, m->n, w);
  if (rc != ECC_OK)
    return rc;
  struct rd r = {b + FOUND_FIXED, len - FOUND_FIXED};
  for (uint32_t i = 0; i < m->n; i++) {
    struct wire_found_entry e;
    rc = take_entry(&r, i, &e, w);
    if (rc != ECC_OK)
      return rc;
  }
  if (r.left != 0)
    return fail(w, ECC_ERR_INVALID, "FOUND body: %zu bytes after the last of n %u", r.left, m->n);
  m->entries = b + FOUND_FIXED;
  m->entries_bytes = (uint32_t)(len - FOUND_FIXED);
  return ECC_OK;
}

static int dec_release(const uint8_t *b, size_t len, struct wire_release *m, const struct why *w)
{
  if (len < RELEASE_FIXED)
    return short_body("RELEASE", len, RELEASE_FIXED, w);
  m->n = ld32(b);
  int rc = release_problem(m->n, w);
  if (rc != ECC_OK)
    return rc;
  if (len - RELEASE_FIXED != (size_t)m->n * TOKEN_BYTES)
    return fail(w, ECC_ERR_INVALID, "RELEASE body: n %u needs %u token bytes, %zu follow", m->n,
                m->n * TOKEN_BYTES, len - RELEASE_FIXED);
  m->tokens = b + RELEASE_FIXED;
  return ECC_OK;
}

static int dec_ping(const uint8_t *b, size_t len, uint32_t type, struct wire_ping *m,
                    const struct why *w)
{
  if (len != PING_BODY)
    return fail(w, ECC_ERR_INVALID, "%s body: length %zu, must be %u", wire_type_name(type), len,
                PING_BODY);
  m->nonce = ld64(b);
  return ECC_OK;
}

static int dec_pull(const uint8_t *b, size_t len, struct wire_pull *m, const struct why *w)
{
  if (len != PULL_BODY)
    return fail(w, ECC_ERR_INVALID, "PULL body: length %zu, must be %u", len, PULL_BODY);
  m->req_id = ld64(b);
  m->token = ld64(b + 8);
  return ECC_OK;
}

static int dec_pulled(const uint8_t *b, size_t len, struct wire_pulled *m, const struct why *w)
{
  if (len != PULLED_BODY)
    return fail(w, ECC_ERR_INVALID, "PULLED body: length %zu, must be %u", len, PULLED_BODY);
  m->req_id = ld64(b);
  m->status = (int32_t)ld32(b + 8);
  if (m->status < ECC_STATUS_MIN || m->status > -1)
    return fail(w, ECC_ERR_INVALID, "PULLED status %d, must be an error code %d..-1", m->status,
                ECC_STATUS_MIN);
  return ECC_OK;
}

/* A reason the shared entry and key checks gave ("FOUND entry 0: ..."),
 * said again under the type that carried them. */
static int named_as(const struct why *w, int rc, const char *type)
{
  if (w == NULL || w->buf == NULL || w->cap == 0 || strlen(w->buf) < 6 ||
      strncmp(w->buf + 6, type, strlen(type)) == 0)
    return rc;
  char inner[256];
  snprintf(inner, sizeof(inner), "%s", w->buf + 6); /* past "wire: " */
  return fail(w, rc, "%s: %s", type, inner);
}

static int dec_describe(const uint8_t *b, size_t len, struct wire_describe *m, const struct why *w)
{
  if (len != DESCRIBE_BODY)
    return fail(w, ECC_ERR_INVALID, "DESCRIBE body: length %zu, must be %u", len, DESCRIBE_BODY);
  m->req_id = ld64(b);
  m->token = ld64(b + 8);
  return ECC_OK;
}

static int described_problem(int32_t status, const struct why *w)
{
  if (status < ECC_STATUS_MIN || status > ECC_OK)
    return fail(w, ECC_ERR_INVALID,
                "DESCRIBED status %d, must be ECC_OK or an ECC_ERR_* value (%d..0)", status,
                ECC_STATUS_MIN);
  return ECC_OK;
}

static int dec_described(const uint8_t *b, size_t len, struct wire_described *m,
                         const struct why *w)
{
  if (len < DESCRIBED_FIXED)
    return short_body("DESCRIBED", len, DESCRIBED_FIXED, w);
  m->req_id = ld64(b);
  m->status = (int32_t)ld32(b + 8);
  uint32_t pad = ld32(b + 12);
  int rc = described_problem(m->status, w);
  if (rc == ECC_OK && pad != 0)
    rc = fail(w, ECC_ERR_INVALID, "DESCRIBED pad %u, must be 0", pad);
  if (rc != ECC_OK)
    return rc;
  struct rd r = {b + DESCRIBED_FIXED, len - DESCRIBED_FIXED};
  if (m->status != ECC_OK) {
    if (r.left != 0)
      return fail(w, ECC_ERR_INVALID, "DESCRIBED status %d (%s) with %zu bytes after it", m->status,
                  status_name(m->status), r.left);
    return ECC_OK;
  }
  rc = take_entry(&r, 0, &m->entry, w);
  if (rc == ECC_OK && m->entry.found != 1)
    rc = fail(w, ECC_ERR_INVALID, "DESCRIBED with ECC_OK: the entry is absent");
  if (rc == ECC_OK)
    rc = take_key(&r, 0, &m->key, w);
  if (rc == ECC_OK && r.left != 0)
    rc = fail(w, ECC_ERR_INVALID, "DESCRIBED body: %zu bytes after the key", r.left);
  return rc == ECC_OK ? rc : named_as(w, rc, "DESCRIBED");
}

static int decode_body(const uint8_t *b, size_t len, struct wire_msg *m, const struct why *w)
{
  switch (m->h.type) {
  case WIRE_HELLO:
    return dec_hello(b, len, &m->u.hello, w);
  case WIRE_WELCOME:
    return dec_welcome(b, len, &m->u.welcome, w);
  case WIRE_REFUSE:
    return dec_refuse(b, len, &m->u.refuse, w);
  case WIRE_LOOKUP:
    return dec_lookup(b, len, &m->u.lookup, w);
  case WIRE_FOUND:
    return dec_found(b, len, &m->u.found, w);
  case WIRE_RELEASE:
    return dec_release(b, len, &m->u.release, w);
  case WIRE_PING:
  case WIRE_PONG:
    return dec_ping(b, len, m->h.type, &m->u.ping, w);
  case WIRE_PULL:
    return dec_pull(b, len, &m->u.pull, w);
  case WIRE_PULLED:
    return dec_pulled(b, len, &m->u.pulled, w);
  case WIRE_DESCRIBE:
    return dec_describe(b, len, &m->u.describe, w);
  case WIRE_DESCRIBED:
    return dec_described(b, len, &m->u.described, w);
  default: /* decode_header let no other type through */
    return fail(w, ECC_ERR_INVALID, "header type %u, not a message type", m->h.type);
  }
}

int wire_decode(const uint8_t *buf, size_t len, struct wire_msg *out, char *why, size_t why_cap)
{
  const struct why w = {why, why_cap};
  if (why != NULL && why_cap > 0)
    why[0] = '\0';
  if (out == NULL)
    return fail(&w, ECC_ERR_INVALID, "no message to decode into (out is NULL)");
  memset(out, 0, sizeof(*out));
  if (buf == NULL && len > 0)
    return fail(&w, ECC_ERR_INVALID, "buffer NULL with length %zu", len);
  int rc = decode_header(buf, len, &out->h, &w);
  if (rc == ECC_OK)
    rc = decode_body(buf + WIRE_HEADER_BYTES, out->h.length, out, &w);
  if (rc != ECC_OK)
    memset(out, 0, sizeof(*out));
  return rc;
}

/* --- Accessors: they walk the checked bytes again, so a decoded message
 * needs no storage of its own for its items --- */

void wire_lookup_key(const struct wire_msg *m, uint32_t i, struct wire_key *out)
{
  memset(out, 0, sizeof(*out));
  if (m->h.type != WIRE_LOOKUP || i >= m->u.lookup.n_keys)
    return;
  struct rd r = {m->u.lookup.keys, m->u.lookup.keys_bytes};
  for (uint32_t k = 0; k <= i; k++) {
    if (take_key(&r, k, out, NULL) != ECC_OK) {
      memset(out, 0, sizeof(*out));
      return;
    }
  }
}

void wire_found_entry(const struct wire_msg *m, uint32_t i, struct wire_found_entry *out)
{
  memset(out, 0, sizeof(*out));
  if (m->h.type != WIRE_FOUND || i >= m->u.found.n)
    return;
  struct rd r = {m->u.found.entries, m->u.found.entries_bytes};
  for (uint32_t k = 0; k <= i; k++) {
    if (take_entry(&r, k, out, NULL) != ECC_OK) {
      memset(out, 0, sizeof(*out));
      return;
    }
  }
}

uint64_t wire_release_token(const struct wire_msg *m, uint32_t i)
{
  if (m->h.type != WIRE_RELEASE || i >= m->u.release.n)
    return 0;
  return ld64(m->u.release.tokens + (size_t)i * TOKEN_BYTES);
}

/* --- Encoding: each encoder checks its arguments and the size first, so a
 * refused call writes nothing --- */

/* Writes the header of a message whose body has `body` bytes; returns where
 * the body goes. */
static uint8_t *put_header(uint8_t *buf, enum wire_type type, size_t body, uint64_t seq)
{
  uint8_t *p = st32(buf, WIRE_MAGIC);
  p = st16(p, WIRE_VERSION);
  p = st16(p, (uint32_t)type);
  p = st32(p, (uint32_t)body);
  p = st32(p, 0);
  return st64(p, seq);
}

static bool fits(const uint8_t *buf, size_t cap, size_t body)
{
  return buf != NULL && cap >= WIRE_HEADER_BYTES + body;
}

size_t wire_encode_hello(uint8_t *buf, size_t cap, uint64_t seq, const struct wire_hello *m)
{
  if (m == NULL || !fits(buf, cap, HELLO_BODY))
    return 0;
  uint8_t *p = put_header(buf, WIRE_HELLO, HELLO_BODY, seq);
  p = st64(p, m->layout_hash);
  p = st64(p, m->client_id);
  p = st32(p, m->tp_rank);
  st64(p, m->group_id);
  return WIRE_HEADER_BYTES + HELLO_BODY;
}

size_t wire_encode_welcome(uint8_t *buf, size_t cap, uint64_t seq, const struct wire_welcome *m)
{
  if (m == NULL || m->rkey == NULL || welcome_problem(m->rkey_len, NULL) != ECC_OK)
    return 0;
  size_t body = WELCOME_FIXED + m->rkey_len;
  if (!fits(buf, cap, body))
    return 0;
  uint8_t *p = put_header(buf, WIRE_WELCOME, body, seq);
  p = st64(p, m->server_id);
  p = st64(p, m->block_size);
  p = st32(p, m->num_blocks);
  p = st64(p, m->region_base);
  p = st32(p, m->rkey_len);
  stbytes(p, m->rkey, m->rkey_len);
  return WIRE_HEADER_BYTES + body;
}

size_t wire_encode_refuse(uint8_t *buf, size_t cap, uint64_t seq, int32_t code, const char *reason)
{
  if (reason == NULL)
    reason = "";
  /* One byte past the limit is enough to know it is broken. */
  size_t len = strnlen(reason, WIRE_MAX_REASON + 1);
  if (refuse_problem(code, len, NULL) != ECC_OK)
    return 0;
  size_t body = REFUSE_FIXED + len;
  if (!fits(buf, cap, body))
    return 0;
  uint8_t *p = put_header(buf, WIRE_REFUSE, body, seq);
  p = st32(p, (uint32_t)code);
  p = st16(p, (uint32_t)len);
  stbytes(p, reason, len);
  return WIRE_HEADER_BYTES + body;
}

/* The body bytes of n_keys keys, or 0 if one is missing or breaks a rule. */
static size_t keys_bytes(const char *const *keys, uint32_t n_keys)
{
  size_t total = 0;
  for (uint32_t i = 0; i < n_keys; i++) {
    if (keys[i] == NULL)
      return 0;
    size_t len = strnlen(keys[i], ECC_KEY_MAX + 1);
    if (key_problem((const uint8_t *)keys[i], len, i, NULL) != ECC_OK)
      return 0;
    total += KEY_FIXED + len;
  }
  return total;
}

size_t wire_encode_lookup(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, uint32_t ranks,
                          const char *const *keys, uint32_t n_keys)
{
  if (keys == NULL || lookup_problem(ranks, n_keys, NULL) != ECC_OK)
    return 0;
  size_t kb = keys_bytes(keys, n_keys);
  if (kb == 0 || !fits(buf, cap, LOOKUP_FIXED + kb))
    return 0;
  uint8_t *p = put_header(buf, WIRE_LOOKUP, LOOKUP_FIXED + kb, seq);
  p = st64(p, req_id);
  p = st32(p, ranks);
  p = st32(p, n_keys);
  for (uint32_t i = 0; i < n_keys; i++) {
    size_t len = strlen(keys[i]);
    p = st16(p, (uint32_t)len);
    p = stbytes(p, keys[i], len);
  }
  return WIRE_HEADER_BYTES + LOOKUP_FIXED + kb;
}

/* The body bytes of n entries, or 0 if one breaks a rule. */
static size_t entries_bytes(const struct wire_found_entry *entries, uint32_t n)
{
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (entry_problem(&entries[i], i, NULL) != ECC_OK)
      return 0;
    total += ENTRY_FIXED + (size_t)entries[i].n_runs * RUN_BYTES;
  }
  return total;
}

static uint8_t *put_entry(uint8_t *p, const struct wire_found_entry *e)
{
  p = st8(p, e->found);
  p = st8(p, e->n_runs);
  p = st16(p, 0);
  p = st64(p, e->nbytes);
  p = st64(p, e->token);
  for (uint32_t k = 0; k < e->n_runs; k++) {
    p = st32(p, e->runs[k].first);
    p = st32(p, e->runs[k].count);
  }
  return p;
}

size_t wire_encode_found(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, int32_t status,
                         const struct wire_found_entry *entries, uint32_t n)
{
  if (found_problem(status, n, NULL) != ECC_OK || (n > 0 && entries == NULL))
    return 0;
  size_t eb = entries_bytes(entries, n);
  if ((n > 0 && eb == 0) || !fits(buf, cap, FOUND_FIXED + eb))
    return 0;
  uint8_t *p = put_header(buf, WIRE_FOUND, FOUND_FIXED + eb, seq);
  p = st64(p, req_id);
  p = st32(p, (uint32_t)status);
  p = st32(p, n);
  for (uint32_t i = 0; i < n; i++)
    p = put_entry(p, &entries[i]);
  return WIRE_HEADER_BYTES + FOUND_FIXED + eb;
}

size_t wire_encode_release(uint8_t *buf, size_t cap, uint64_t seq, const uint64_t *tokens,
                           uint32_t n)
{
  if (tokens == NULL || release_problem(n, NULL) != ECC_OK)
    return 0;
  size_t body = RELEASE_FIXED + (size_t)n * TOKEN_BYTES;
  if (!fits(buf, cap, body))
    return 0;
  uint8_t *p = put_header(buf, WIRE_RELEASE, body, seq);
  p = st32(p, n);
  for (uint32_t i = 0; i < n; i++)
    p = st64(p, tokens[i]);
  return WIRE_HEADER_BYTES + body;
}

size_t wire_encode_ping(uint8_t *buf, size_t cap, uint64_t seq, int pong, uint64_t nonce)
{
  if (!fits(buf, cap, PING_BODY))
    return 0;
  uint8_t *p = put_header(buf, pong ? WIRE_PONG : WIRE_PING, PING_BODY, seq);
  st64(p, nonce);
  return WIRE_HEADER_BYTES + PING_BODY;
}

/* PULL and DESCRIBE: a request id and a token, 16 bytes. */
static size_t encode_token_request(uint8_t *buf, size_t cap, enum wire_type type, uint64_t seq,
                                   uint64_t req_id, uint64_t token)
{
  _Static_assert(PULL_BODY == 16 && DESCRIBE_BODY == 16, "both bodies are req_id, token");
  if (!fits(buf, cap, PULL_BODY))
    return 0;
  uint8_t *p = put_header(buf, type, PULL_BODY, seq);
  p = st64(p, req_id);
  st64(p, token);
  return WIRE_HEADER_BYTES + PULL_BODY;
}

size_t wire_encode_pull(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, uint64_t token)
{
  return encode_token_request(buf, cap, WIRE_PULL, seq, req_id, token);
}

size_t wire_encode_pulled(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, int32_t status)
{
  if (status < ECC_STATUS_MIN || status > -1 || !fits(buf, cap, PULLED_BODY))
    return 0;
  uint8_t *p = put_header(buf, WIRE_PULLED, PULLED_BODY, seq);
  p = st64(p, req_id);
  st32(p, (uint32_t)status);
  return WIRE_HEADER_BYTES + PULLED_BODY;
}

size_t wire_encode_describe(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, uint64_t token)
{
  return encode_token_request(buf, cap, WIRE_DESCRIBE, seq, req_id, token);
}

size_t wire_encode_described(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id,
                             int32_t status, const struct wire_found_entry *entry, const char *key)
{
  if (described_problem(status, NULL) != ECC_OK)
    return 0;
  size_t body = DESCRIBED_FIXED, klen = 0;
  if (status == ECC_OK) {
    if (entry == NULL || entry->found != 1 || key == NULL)
      return 0;
    size_t eb = entries_bytes(entry, 1), kb = keys_bytes(&key, 1);
    if (eb == 0 || kb == 0)
      return 0;
    klen = kb - KEY_FIXED;
    body += eb + kb;
  }
  if (!fits(buf, cap, body))
    return 0;
  uint8_t *p = put_header(buf, WIRE_DESCRIBED, body, seq);
  p = st64(p, req_id);
  p = st32(p, (uint32_t)status);
  p = st32(p, 0);
  if (status == ECC_OK) {
    p = put_entry(p, entry);
    p = st16(p, (uint32_t)klen);
    stbytes(p, key, klen);
  }
  return WIRE_HEADER_BYTES + body;
}

void wire_encode_data(uint8_t out[WIRE_DATA_HEADER_BYTES], uint64_t req_id, uint64_t offset)
{
  uint8_t *p = st32(out, WIRE_MAGIC);
  p = st16(p, WIRE_VERSION);
  p = st16(p, 0);
  p = st64(p, req_id);
  st64(p, offset);
}

int wire_decode_data(const uint8_t *hdr, size_t len, struct wire_data *out, char *why,
                     size_t why_cap)
{
  const struct why w = {why, why_cap};
  memset(out, 0, sizeof(*out));
  if (hdr == NULL || len != WIRE_DATA_HEADER_BYTES)
    return fail(&w, ECC_ERR_INVALID, "data header: length %zu, must be %u", len,
                WIRE_DATA_HEADER_BYTES);
  if (ld32(hdr) != WIRE_MAGIC || ld16(hdr + 4) != WIRE_VERSION)
    return fail(&w, ECC_ERR_INCOMPATIBLE, "data header: magic 0x%08x version %u, want 0x%08x %u",
                ld32(hdr), ld16(hdr + 4), WIRE_MAGIC, WIRE_VERSION);
  if (ld16(hdr + 6) != 0)
    return fail(&w, ECC_ERR_INVALID, "data header: flags 0x%x, must be 0", ld16(hdr + 6));
  out->req_id = ld64(hdr + 8);
  out->offset = ld64(hdr + 16);
  return ECC_OK;
}

size_t wire_max_bytes(enum wire_type type)
{
  size_t body;
  switch (type) {
  case WIRE_HELLO:
    body = HELLO_BODY;
    break;
  case WIRE_WELCOME:
    body = WELCOME_FIXED + WIRE_MAX_RKEY;
    break;
  case WIRE_REFUSE:
    body = REFUSE_FIXED + WIRE_MAX_REASON;
    break;
  case WIRE_LOOKUP:
    body = LOOKUP_FIXED + WIRE_MAX_KEYS * (KEY_FIXED + ECC_KEY_MAX);
    break;
  case WIRE_FOUND:
    body = FOUND_FIXED + WIRE_MAX_KEYS * (ENTRY_FIXED + WIRE_MAX_RUNS * RUN_BYTES);
    break;
  case WIRE_RELEASE:
    body = RELEASE_FIXED + WIRE_MAX_TOKENS * TOKEN_BYTES;
    break;
  case WIRE_PING:
  case WIRE_PONG:
    body = PING_BODY;
    break;
  case WIRE_PULL:
    body = PULL_BODY;
    break;
  case WIRE_PULLED:
    body = PULLED_BODY;
    break;
  case WIRE_DESCRIBE:
    body = DESCRIBE_BODY;
    break;
  case WIRE_DESCRIBED:
    body = DESCRIBED_FIXED + ENTRY_FIXED + WIRE_MAX_RUNS * RUN_BYTES + KEY_FIXED + ECC_KEY_MAX;
    break;
  default:
    return 0;
  }
  return WIRE_HEADER_BYTES + body;
}
