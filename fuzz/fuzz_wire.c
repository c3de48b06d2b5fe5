/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_wire.c - libFuzzer target: bytes as one message of the UCX plugin's
 * wire format (plugins/ucx/wire.c, compiled in alone), decoded twice: as
 * they are, and with the header repaired (magic, version, flags and length
 * made right, the type folded into the set), so that mutations reach the
 * bodies instead of stopping at the header.
 *
 * A message that decodes must keep every rule wire.h states, checked here
 * by a model of its own (not by asking wire.c); every item is read through
 * the accessors; the matching encoder, given the decoded fields, must write
 * the input again byte for byte into a buffer of exactly its size; and that
 * output must decode to the same fields. A refused message must leave the
 * decoded struct zeroed, and every reason buffer size the same answer. A
 * broken rule aborts with its name on stderr.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/ucx/wire.h"

__attribute__((format(printf, 1, 2), noreturn)) static void broken(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_wire: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

#define REQUIRE(cond, ...) \
  do {                     \
    if (!(cond))           \
      broken(__VA_ARGS__); \
  } while (0)

static bool in_buffer(const void *p, size_t n, const uint8_t *buf, size_t len)
{
  const uint8_t *b = p;
  return b >= buf && b <= buf + len && n <= (size_t)(buf + len - b);
}

/* --- The model: wire.h's rules, written here again --- */

static void model_key(const struct wire_key *k, uint32_t i, const uint8_t *buf, size_t len)
{
  REQUIRE(k->len >= 1 && k->len <= ECC_KEY_MAX, "key %u: length %u decoded", i, k->len);
  REQUIRE(in_buffer(k->key, k->len, buf, len), "key %u: not a view into the message", i);
  REQUIRE(memchr(k->key, 0, k->len) == NULL, "key %u: NUL inside decoded", i);
}

static void model_entry(const struct wire_found_entry *e, uint32_t i)
{
  REQUIRE(e->found <= 1, "entry %u: found %u decoded", i, e->found);
  if (e->found == 0) {
    REQUIRE(e->n_runs == 0 && e->nbytes == 0 && e->token == 0,
            "entry %u: absent with n_runs %u nbytes %llu token %llu decoded", i, e->n_runs,
            (unsigned long long)e->nbytes, (unsigned long long)e->token);
    return;
  }
  REQUIRE(e->n_runs >= 1 && e->n_runs <= WIRE_MAX_RUNS, "entry %u: n_runs %u decoded", i,
          e->n_runs);
  REQUIRE(e->nbytes >= 1, "entry %u: nbytes 0 decoded", i);
  uint64_t blocks = 0;
  for (uint32_t k = 0; k < e->n_runs; k++) {
    REQUIRE(e->runs[k].count >= 1, "entry %u run %u: count 0 decoded", i, k);
    REQUIRE((uint64_t)e->runs[k].first + e->runs[k].count <= UINT32_MAX,
            "entry %u run %u: first %u + count %u overflows, decoded", i, k, e->runs[k].first,
            e->runs[k].count);
    blocks += e->runs[k].count;
  }
  REQUIRE(blocks >= 1, "entry %u: no blocks decoded", i);
  for (uint32_t k = e->n_runs; k < WIRE_MAX_RUNS; k++)
    REQUIRE(e->runs[k].first == 0 && e->runs[k].count == 0, "entry %u: run %u past n_runs set", i,
            k);
}

static void model_lookup(const struct wire_msg *m, const uint8_t *buf, size_t len)
{
  const struct wire_lookup *l = &m->u.lookup;
  REQUIRE(l->ranks >= 1, "LOOKUP ranks 0 decoded");
  REQUIRE(l->n_keys >= 1 && l->n_keys <= WIRE_MAX_KEYS, "LOOKUP n_keys %u decoded", l->n_keys);
  REQUIRE(in_buffer(l->keys, l->keys_bytes, buf, len), "LOOKUP keys: not a view");
  size_t bytes = 0;
  for (uint32_t i = 0; i < l->n_keys; i++) {
    struct wire_key k;
    wire_lookup_key(m, i, &k);
    model_key(&k, i, buf, len);
    bytes += 2 + k.len;
  }
  REQUIRE(bytes == l->keys_bytes, "LOOKUP: keys take %zu bytes, keys_bytes %u", bytes,
          l->keys_bytes);
}

static void model_found(const struct wire_msg *m, const uint8_t *buf, size_t len)
{
  const struct wire_found *f = &m->u.found;
  REQUIRE(f->status >= ECC_STATUS_MIN && f->status <= ECC_OK, "FOUND status %d decoded", f->status);
  if (f->status != ECC_OK)
    REQUIRE(f->n == 0, "FOUND status %d with n %u decoded", f->status, f->n);
  else
    REQUIRE(f->n >= 1 && f->n <= WIRE_MAX_KEYS, "FOUND ECC_OK with n %u decoded", f->n);
  REQUIRE(in_buffer(f->entries, f->entries_bytes, buf, len), "FOUND entries: not a view");
  size_t bytes = 0;
  for (uint32_t i = 0; i < f->n; i++) {
    struct wire_found_entry e;
    wire_found_entry(m, i, &e);
    model_entry(&e, i);
    bytes += 20 + 8 * (size_t)e.n_runs;
  }
  REQUIRE(bytes == f->entries_bytes, "FOUND: entries take %zu bytes, entries_bytes %u", bytes,
          f->entries_bytes);
}

/* ECC_OK: a found entry and a key within the buffer; otherwise neither. */
static void model_described(const struct wire_msg *m, const uint8_t *buf, size_t len)
{
  const struct wire_described *d = &m->u.described;
  REQUIRE(d->status >= ECC_STATUS_MIN && d->status <= ECC_OK, "DESCRIBED status %d decoded",
          d->status);
  if (d->status != ECC_OK) {
    REQUIRE(d->entry.found == 0 && d->key.len == 0, "DESCRIBED error with an entry decoded");
    return;
  }
  REQUIRE(d->entry.found == 1, "DESCRIBED ECC_OK with an absent entry decoded");
  model_entry(&d->entry, 0);
  model_key(&d->key, 0, buf, len);
}

static void model_body(const struct wire_msg *m, const uint8_t *buf, size_t len)
{
  switch (m->h.type) {
  case WIRE_WELCOME:
    REQUIRE(m->u.welcome.rkey_len >= 1 && m->u.welcome.rkey_len <= WIRE_MAX_RKEY,
            "WELCOME rkey_len %u decoded", m->u.welcome.rkey_len);
    REQUIRE(in_buffer(m->u.welcome.rkey, m->u.welcome.rkey_len, buf, len), "rkey: not a view");
    break;
  case WIRE_REFUSE:
    REQUIRE(m->u.refuse.code >= ECC_STATUS_MIN && m->u.refuse.code <= -1, "REFUSE code %d decoded",
            m->u.refuse.code);
    REQUIRE(m->u.refuse.reason_len <= WIRE_MAX_REASON, "reason_len %u decoded",
            m->u.refuse.reason_len);
    REQUIRE(in_buffer(m->u.refuse.reason, m->u.refuse.reason_len, buf, len), "reason: no view");
    REQUIRE(memchr(m->u.refuse.reason, 0, m->u.refuse.reason_len) == NULL, "reason NUL decoded");
    break;
  case WIRE_LOOKUP:
    model_lookup(m, buf, len);
    break;
  case WIRE_FOUND:
    model_found(m, buf, len);
    break;
  case WIRE_RELEASE:
    REQUIRE(m->u.release.n >= 1 && m->u.release.n <= WIRE_MAX_TOKENS, "RELEASE n %u decoded",
            m->u.release.n);
    REQUIRE(in_buffer(m->u.release.tokens, 8 * (size_t)m->u.release.n, buf, len), "tokens view");
    for (uint32_t i = 0; i < m->u.release.n; i++)
      (void)wire_release_token(m, i);
    break;
  case WIRE_PULLED:
    REQUIRE(m->u.pulled.status >= ECC_STATUS_MIN && m->u.pulled.status <= -1,
            "PULLED status %d decoded", m->u.pulled.status);
    break;
  case WIRE_DESCRIBED:
    model_described(m, buf, len);
    break;
  default:
    break;
  }
}

static void model(const struct wire_msg *m, const uint8_t *buf, size_t len)
{
  const struct wire_header *h = &m->h;
  REQUIRE(h->magic == WIRE_MAGIC && h->version == WIRE_VERSION, "magic or version decoded");
  REQUIRE(h->flags == 0, "flags 0x%x decoded", h->flags);
  REQUIRE(h->length <= WIRE_MAX_BODY && len >= WIRE_HEADER_BYTES &&
              h->length == len - WIRE_HEADER_BYTES,
          "length %u decoded from %zu bytes", h->length, len);
  REQUIRE(strcmp(wire_type_name(h->type), "?") != 0, "type %u decoded", h->type);
  REQUIRE(len <= wire_max_bytes((enum wire_type)h->type), "%s of %zu bytes, more than max_bytes",
          wire_type_name(h->type), len);
  model_body(m, buf, len);
}

/* --- Encoding the decoded fields again --- */

static size_t encode_lookup(const struct wire_msg *m, uint8_t *out, size_t cap)
{
  static char text[WIRE_MAX_KEYS][ECC_KEY_MAX + 1];
  const char *keys[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < m->u.lookup.n_keys; i++) {
    struct wire_key k;
    wire_lookup_key(m, i, &k);
    memcpy(text[i], k.key, k.len); /* the model bounded k.len */
    text[i][k.len] = '\0';
    keys[i] = text[i];
  }
  return wire_encode_lookup(out, cap, m->h.seq, m->u.lookup.req_id, m->u.lookup.ranks, keys,
                            m->u.lookup.n_keys);
}

static size_t encode_found(const struct wire_msg *m, uint8_t *out, size_t cap)
{
  static struct wire_found_entry entries[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < m->u.found.n; i++)
    wire_found_entry(m, i, &entries[i]);
  return wire_encode_found(out, cap, m->h.seq, m->u.found.req_id, m->u.found.status, entries,
                           m->u.found.n);
}

static size_t encode_release(const struct wire_msg *m, uint8_t *out, size_t cap)
{
  static uint64_t tokens[WIRE_MAX_TOKENS];
  for (uint32_t i = 0; i < m->u.release.n; i++)
    tokens[i] = wire_release_token(m, i);
  return wire_encode_release(out, cap, m->h.seq, tokens, m->u.release.n);
}

/* The key is a view into the message: the encoder wants a C string. */
static size_t encode_described(const struct wire_msg *m, uint8_t *out, size_t cap)
{
  const struct wire_described *d = &m->u.described;
  char key[ECC_KEY_MAX + 1];
  if (d->key.len > 0)
    memcpy(key, d->key.key, d->key.len);
  key[d->key.len] = '\0';
  return wire_encode_described(out, cap, m->h.seq, d->req_id, d->status, &d->entry, key);
}

static size_t encode_again(const struct wire_msg *m, uint8_t *out, size_t cap)
{
  char reason[WIRE_MAX_REASON + 1];
  switch (m->h.type) {
  case WIRE_HELLO:
    return wire_encode_hello(out, cap, m->h.seq, &m->u.hello);
  case WIRE_WELCOME:
    return wire_encode_welcome(out, cap, m->h.seq, &m->u.welcome);
  case WIRE_REFUSE:
    memcpy(reason, m->u.refuse.reason, m->u.refuse.reason_len);
    reason[m->u.refuse.reason_len] = '\0';
    return wire_encode_refuse(out, cap, m->h.seq, m->u.refuse.code, reason);
  case WIRE_LOOKUP:
    return encode_lookup(m, out, cap);
  case WIRE_FOUND:
    return encode_found(m, out, cap);
  case WIRE_RELEASE:
    return encode_release(m, out, cap);
  case WIRE_PULL:
    return wire_encode_pull(out, cap, m->h.seq, m->u.pull.req_id, m->u.pull.token);
  case WIRE_PULLED:
    return wire_encode_pulled(out, cap, m->h.seq, m->u.pulled.req_id, m->u.pulled.status);
  case WIRE_DESCRIBE:
    return wire_encode_describe(out, cap, m->h.seq, m->u.describe.req_id, m->u.describe.token);
  case WIRE_DESCRIBED:
    return encode_described(m, out, cap);
  default:
    return wire_encode_ping(out, cap, m->h.seq, m->h.type == WIRE_PONG, m->u.ping.nonce);
  }
}

/* --- Two decoded messages holding the same fields and items --- */

static void same_items(const struct wire_msg *a, const struct wire_msg *b)
{
  for (uint32_t i = 0; a->h.type == WIRE_LOOKUP && i < a->u.lookup.n_keys; i++) {
    struct wire_key ka, kb;
    wire_lookup_key(a, i, &ka);
    wire_lookup_key(b, i, &kb);
    REQUIRE(ka.len == kb.len && memcmp(ka.key, kb.key, ka.len) == 0, "key %u differs", i);
  }
  for (uint32_t i = 0; a->h.type == WIRE_FOUND && i < a->u.found.n; i++) {
    struct wire_found_entry ea, eb;
    wire_found_entry(a, i, &ea);
    wire_found_entry(b, i, &eb);
    REQUIRE(memcmp(&ea, &eb, sizeof(ea)) == 0, "entry %u differs", i);
  }
  for (uint32_t i = 0; a->h.type == WIRE_RELEASE && i < a->u.release.n; i++)
    REQUIRE(wire_release_token(a, i) == wire_release_token(b, i), "token %u differs", i);
}

static void same_fields(const struct wire_msg *a, const struct wire_msg *b)
{
  REQUIRE(memcmp(&a->h, &b->h, sizeof(a->h)) == 0, "headers differ");
  const struct wire_welcome *wa = &a->u.welcome, *wb = &b->u.welcome;
  const struct wire_refuse *ra = &a->u.refuse, *rb = &b->u.refuse;
  switch (a->h.type) {
  case WIRE_HELLO:
    REQUIRE(memcmp(&a->u.hello, &b->u.hello, sizeof(a->u.hello)) == 0, "HELLO fields differ");
    break;
  case WIRE_WELCOME:
    REQUIRE(wa->server_id == wb->server_id && wa->block_size == wb->block_size &&
                wa->num_blocks == wb->num_blocks && wa->region_base == wb->region_base &&
                wa->rkey_len == wb->rkey_len && memcmp(wa->rkey, wb->rkey, wa->rkey_len) == 0,
            "WELCOME fields differ");
    break;
  case WIRE_REFUSE:
    REQUIRE(ra->code == rb->code && ra->reason_len == rb->reason_len &&
                memcmp(ra->reason, rb->reason, ra->reason_len) == 0,
            "REFUSE fields differ");
    break;
  case WIRE_LOOKUP:
    REQUIRE(a->u.lookup.req_id == b->u.lookup.req_id && a->u.lookup.ranks == b->u.lookup.ranks &&
                a->u.lookup.n_keys == b->u.lookup.n_keys &&
                a->u.lookup.keys_bytes == b->u.lookup.keys_bytes,
            "LOOKUP fields differ");
    break;
  case WIRE_FOUND:
    REQUIRE(a->u.found.req_id == b->u.found.req_id && a->u.found.status == b->u.found.status &&
                a->u.found.n == b->u.found.n &&
                a->u.found.entries_bytes == b->u.found.entries_bytes,
            "FOUND fields differ");
    break;
  case WIRE_RELEASE:
    REQUIRE(a->u.release.n == b->u.release.n, "RELEASE fields differ");
    break;
  case WIRE_PULL:
    REQUIRE(memcmp(&a->u.pull, &b->u.pull, sizeof(a->u.pull)) == 0, "PULL fields differ");
    break;
  case WIRE_PULLED:
    REQUIRE(memcmp(&a->u.pulled, &b->u.pulled, sizeof(a->u.pulled)) == 0, "PULLED fields differ");
    break;
  case WIRE_DESCRIBE:
    REQUIRE(memcmp(&a->u.describe, &b->u.describe, sizeof(a->u.describe)) == 0,
            "DESCRIBE fields differ");
    break;
  case WIRE_DESCRIBED:
    REQUIRE(a->u.described.req_id == b->u.described.req_id &&
                a->u.described.status == b->u.described.status &&
                memcmp(&a->u.described.entry, &b->u.described.entry,
                       sizeof(a->u.described.entry)) == 0 &&
                a->u.described.key.len == b->u.described.key.len &&
                memcmp(a->u.described.key.key, b->u.described.key.key, a->u.described.key.len) == 0,
            "DESCRIBED fields differ");
    break;
  default:
    REQUIRE(a->u.ping.nonce == b->u.ping.nonce, "nonces differ");
    break;
  }
  same_items(a, b);
}

/* --- One input --- */

static bool all_zero(const void *p, size_t n)
{
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != 0)
      return false;
  return true;
}

/* The reason's room changes the text only, never the answer. */
static int decode_checked(const uint8_t *buf, size_t len, struct wire_msg *m)
{
  char why[256];
  int rc = wire_decode(buf, len, m, why, sizeof(why));
  REQUIRE(rc == ECC_OK || rc == ECC_ERR_INVALID || rc == ECC_ERR_INCOMPATIBLE, "decode: %d", rc);
  REQUIRE(rc == ECC_OK || (strncmp(why, "wire: ", 6) == 0 && all_zero(m, sizeof(*m))),
          "refused (%d) with reason \"%s\" or a struct not zeroed", rc, why);
  struct wire_msg again;
  char small[7];
  REQUIRE(wire_decode(buf, len, &again, NULL, 0) == rc, "the answer depends on why");
  REQUIRE(wire_decode(buf, len, &again, small, sizeof(small)) == rc, "the answer depends on why");
  REQUIRE(memcmp(&again, m, sizeof(again)) == 0, "a second decode differs");
  return rc;
}

static void check(const uint8_t *buf, size_t len)
{
  struct wire_msg m;
  if (decode_checked(buf, len, &m) != ECC_OK)
    return;
  model(&m, buf, len);
  uint8_t *out = malloc(len); /* exactly the size: ASan sees any byte past it */
  REQUIRE(out != NULL, "malloc");
  size_t n = encode_again(&m, out, len);
  REQUIRE(n == len, "%s of %zu bytes encodes again to %zu", wire_type_name(m.h.type), len, n);
  for (size_t i = 0; i < len; i++)
    REQUIRE(out[i] == buf[i], "%s encodes again differently at byte %zu: 0x%02x, was 0x%02x",
            wire_type_name(m.h.type), i, out[i], buf[i]);
  struct wire_msg m2;
  REQUIRE(decode_checked(out, n, &m2) == ECC_OK, "the encoder's output is refused");
  same_fields(&m, &m2);
  free(out);
}

static void put32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* A data message's header: one that decodes is re-encoded to the same bytes. */
static void check_data_header(const uint8_t *data, size_t size)
{
  struct wire_data d;
  if (wire_decode_data(data, size, &d, NULL, 0) != ECC_OK)
    return;
  uint8_t again[WIRE_DATA_HEADER_BYTES];
  wire_encode_data(again, d.req_id, d.offset);
  REQUIRE(size == WIRE_DATA_HEADER_BYTES && memcmp(again, data, size) == 0,
          "a data header of %zu bytes decoded but encodes otherwise", size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  check(data, size);
  check_data_header(data, size < WIRE_DATA_HEADER_BYTES ? size : WIRE_DATA_HEADER_BYTES);
  if (size < WIRE_HEADER_BYTES || size - WIRE_HEADER_BYTES > WIRE_MAX_BODY)
    return 0;
  uint8_t *fixed = malloc(size);
  if (fixed == NULL)
    return 0;
  memcpy(fixed, data, size);
  put32(fixed, WIRE_MAGIC);
  fixed[4] = (uint8_t)WIRE_VERSION;
  fixed[5] = (uint8_t)(WIRE_VERSION >> 8);
  fixed[6] = (uint8_t)(1 + (fixed[6] | fixed[7] << 8) % WIRE_PULLED); /* types are 1..10 */
  fixed[7] = 0;
  put32(fixed + 8, (uint32_t)(size - WIRE_HEADER_BYTES));
  put32(fixed + 12, 0);
  check(fixed, size);
  free(fixed);
  return 0;
}
