/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_wire.c - the UCX plugin's wire format (plugins/ucx/wire.c, built into
 * this test): every type round trips at its edges, the bytes are pinned by
 * one golden array per type, every malformed message is refused with the
 * right code and a reason naming the field, and the encoders refuse what
 * the decoder would. Hostile messages are built byte by byte here, apart
 * from the encoders, so that the layout is written down twice.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugins/ucx/wire.h"

#define BIG (WIRE_HEADER_BYTES + 40000u) /* more than any type's largest message */
#define SEED_DIR ECC_SOURCE_DIR "/fuzz/corpus/fuzz_wire"

static uint8_t buf[BIG];
static char why[256];

/* --- Messages built by hand --- */

struct raw {
  uint8_t b[BIG];
  size_t n;
};

static struct raw raw; /* one message at a time; each test runs in its own process */

static void put(struct raw *r, uint64_t v, int bytes)
{
  cr_assert(r->n + (size_t)bytes <= sizeof(r->b));
  /* Fields wider than 8 bytes (padding written as one number) get zeros. */
  for (int i = 0; i < bytes; i++)
    r->b[r->n++] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
}

static void put_bytes(struct raw *r, const void *p, size_t n)
{
  cr_assert(r->n + n <= sizeof(r->b));
  memcpy(r->b + r->n, p, n);
  r->n += n;
}

/* A valid header whose length raw_end fills in. */
static struct raw *raw_begin(uint32_t type)
{
  raw.n = 0;
  put(&raw, WIRE_MAGIC, 4);
  put(&raw, WIRE_VERSION, 2);
  put(&raw, type, 2);
  put(&raw, 0, 4);
  put(&raw, 0, 4);
  put(&raw, 0x5e9, 8);
  return &raw;
}

static size_t raw_end(struct raw *r)
{
  uint32_t len = (uint32_t)(r->n - WIRE_HEADER_BYTES);
  for (int i = 0; i < 4; i++)
    r->b[8 + i] = (uint8_t)(len >> (8 * i));
  return r->n;
}

static void put_key(struct raw *r, const char *k, size_t len)
{
  put(r, len, 2);
  put_bytes(r, k, len);
}

static void put_entry(struct raw *r, uint32_t found, uint32_t n_runs, uint32_t pad, uint64_t nbytes,
                      uint64_t token)
{
  put(r, found, 1);
  put(r, n_runs, 1);
  put(r, pad, 2);
  put(r, nbytes, 8);
  put(r, token, 8);
}

static void put_run(struct raw *r, uint32_t first, uint32_t count)
{
  put(r, first, 4);
  put(r, count, 4);
}

/* --- Checks --- */

static void decode_ok(const uint8_t *b, size_t n, struct wire_msg *m)
{
  int rc = wire_decode(b, n, m, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "decode of %zu bytes: %d: %s", n, rc, why);
}

static bool all_bytes(const void *p, size_t n, uint8_t v)
{
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != v)
      return false;
  return true;
}

/* Refused with `code`, a reason holding `needle`, and *out zeroed. */
static void expect_refused(const uint8_t *b, size_t n, int code, const char *needle)
{
  struct wire_msg m;
  memset(&m, 0xa5, sizeof(m));
  int rc = wire_decode(b, n, &m, why, sizeof(why));
  cr_assert_eq(rc, code, "decode of %zu bytes returned %d, expected %d (%s)", n, rc, code, why);
  cr_assert(strncmp(why, "wire: ", 6) == 0, "reason \"%s\" opens with \"wire: \"", why);
  cr_assert(strstr(why, needle) != NULL, "reason \"%s\" names \"%s\"", why, needle);
  cr_assert(all_bytes(&m, sizeof(m), 0), "out is zeroed on error");
}

static void expect_raw_refused(struct raw *r, int code, const char *needle)
{
  expect_refused(r->b, raw_end(r), code, needle);
}

/* A key of exactly len bytes, different for each i. */
static const char *make_key(char *dst, uint32_t i, size_t len)
{
  for (size_t j = 0; j < len; j++)
    dst[j] = (char)('a' + (i * 7 + j) % 26);
  if (len > 0)
    dst[0] = (char)('A' + i % 26);
  dst[len] = '\0';
  return dst;
}

static struct wire_found_entry absent(void)
{
  struct wire_found_entry e;
  memset(&e, 0, sizeof(e));
  return e;
}

static struct wire_found_entry present(uint32_t n_runs, uint64_t nbytes, uint64_t token)
{
  struct wire_found_entry e = absent();
  e.found = 1;
  e.n_runs = n_runs;
  e.nbytes = nbytes;
  e.token = token;
  for (uint32_t k = 0; k < n_runs; k++)
    e.runs[k] = (struct wire_run){.first = 100 * k + (uint32_t)token % 50, .count = k + 1};
  return e;
}

static void expect_entry_eq(const struct wire_found_entry *got, const struct wire_found_entry *want,
                            uint32_t i)
{
  cr_assert_eq(got->found, want->found, "entry %u found", i);
  cr_assert_eq(got->n_runs, want->n_runs, "entry %u n_runs", i);
  cr_assert_eq(got->nbytes, want->nbytes, "entry %u nbytes", i);
  cr_assert_eq(got->token, want->token, "entry %u token", i);
  for (uint32_t k = 0; k < WIRE_MAX_RUNS; k++) {
    uint32_t first = k < want->n_runs ? want->runs[k].first : 0;
    uint32_t count = k < want->n_runs ? want->runs[k].count : 0;
    cr_assert_eq(got->runs[k].first, first, "entry %u run %u first", i, k);
    cr_assert_eq(got->runs[k].count, count, "entry %u run %u count", i, k);
  }
}

static void expect_header(const struct wire_msg *m, uint32_t type, size_t total, uint64_t seq)
{
  cr_assert_eq(m->h.magic, WIRE_MAGIC);
  cr_assert_eq(m->h.version, WIRE_VERSION);
  cr_assert_eq(m->h.type, type);
  cr_assert_eq(m->h.length, total - WIRE_HEADER_BYTES);
  cr_assert_eq(m->h.flags, 0);
  cr_assert_eq(m->h.seq, seq);
}

/* --- Round trips --- */

Test(wire_round_trip, hello_at_both_ends_of_every_field)
{
  const struct wire_hello cases[] = {{0, 0, 0, 0},
                                     {UINT64_MAX, UINT64_MAX, UINT32_MAX, UINT64_MAX},
                                     {wire_layout_hash(4096), 0x0123456789abcdefull, 7, 0x5a5a}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    size_t n = wire_encode_hello(buf, sizeof(buf), UINT64_MAX - c, &cases[c]);
    cr_assert_eq(n, wire_max_bytes(WIRE_HELLO));
    struct wire_msg m;
    decode_ok(buf, n, &m);
    expect_header(&m, WIRE_HELLO, n, UINT64_MAX - c);
    cr_assert_eq(m.u.hello.layout_hash, cases[c].layout_hash);
    cr_assert_eq(m.u.hello.client_id, cases[c].client_id);
    cr_assert_eq(m.u.hello.tp_rank, cases[c].tp_rank);
    cr_assert_eq(m.u.hello.group_id, cases[c].group_id);
  }
}

Test(wire_round_trip, welcome_with_the_shortest_and_the_longest_rkey)
{
  static uint8_t rkey[WIRE_MAX_RKEY];
  for (size_t i = 0; i < sizeof(rkey); i++)
    rkey[i] = (uint8_t)(i * 31 + 7);
  const uint32_t lens[] = {1, 2, WIRE_MAX_RKEY - 1, WIRE_MAX_RKEY};
  for (size_t c = 0; c < sizeof(lens) / sizeof(lens[0]); c++) {
    struct wire_welcome w = {.server_id = UINT64_MAX - c,
                             .block_size = UINT64_MAX,
                             .num_blocks = UINT32_MAX,
                             .region_base = 0x7f0000000000ull + c,
                             .rkey_len = lens[c],
                             .rkey = rkey};
    size_t n = wire_encode_welcome(buf, sizeof(buf), c, &w);
    cr_assert_eq(n, WIRE_HEADER_BYTES + 32 + lens[c]);
    struct wire_msg m;
    decode_ok(buf, n, &m);
    expect_header(&m, WIRE_WELCOME, n, c);
    cr_assert_eq(m.u.welcome.server_id, w.server_id);
    cr_assert_eq(m.u.welcome.block_size, w.block_size);
    cr_assert_eq(m.u.welcome.num_blocks, w.num_blocks);
    cr_assert_eq(m.u.welcome.region_base, w.region_base);
    cr_assert_eq(m.u.welcome.rkey_len, lens[c]);
    cr_assert(m.u.welcome.rkey >= buf && m.u.welcome.rkey < buf + n, "rkey is a view into buf");
    cr_assert_arr_eq(m.u.welcome.rkey, rkey, lens[c]);
  }
  cr_assert_eq(WIRE_HEADER_BYTES + 32 + WIRE_MAX_RKEY, wire_max_bytes(WIRE_WELCOME));
}

Test(wire_round_trip, refuse_with_empty_none_and_longest_reason_and_every_error_code)
{
  char longest[WIRE_MAX_REASON + 1];
  memset(longest, 'r', WIRE_MAX_REASON);
  longest[WIRE_MAX_REASON] = '\0';
  const char *reasons[] = {"", NULL, "x", longest};
  for (int32_t code = -1; code >= ECC_STATUS_MIN; code--) {
    for (size_t c = 0; c < 4; c++) {
      size_t want_len = reasons[c] == NULL ? 0 : strlen(reasons[c]);
      size_t n = wire_encode_refuse(buf, sizeof(buf), 9, code, reasons[c]);
      cr_assert_eq(n, WIRE_HEADER_BYTES + 6 + want_len, "code %d reason %zu", code, c);
      struct wire_msg m;
      decode_ok(buf, n, &m);
      expect_header(&m, WIRE_REFUSE, n, 9);
      cr_assert_eq(m.u.refuse.code, code);
      cr_assert_eq(m.u.refuse.reason_len, want_len);
      if (want_len > 0)
        cr_assert_arr_eq(m.u.refuse.reason, reasons[c], want_len);
    }
  }
  cr_assert_eq(WIRE_HEADER_BYTES + 6 + WIRE_MAX_REASON, wire_max_bytes(WIRE_REFUSE));
}

static void lookup_round_trip(uint32_t n_keys, size_t key_len, uint32_t ranks)
{
  static char text[WIRE_MAX_KEYS][ECC_KEY_MAX + 1];
  const char *keys[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < n_keys; i++)
    keys[i] = make_key(text[i], i, key_len == 0 ? 1 + i % ECC_KEY_MAX : key_len);
  size_t n = wire_encode_lookup(buf, sizeof(buf), 4, UINT64_MAX - n_keys, ranks, keys, n_keys);
  cr_assert_gt(n, 0, "%u keys of %zu bytes encode", n_keys, key_len);
  struct wire_msg m;
  decode_ok(buf, n, &m);
  expect_header(&m, WIRE_LOOKUP, n, 4);
  cr_assert_eq(m.u.lookup.req_id, UINT64_MAX - n_keys);
  cr_assert_eq(m.u.lookup.ranks, ranks);
  cr_assert_eq(m.u.lookup.n_keys, n_keys);
  cr_assert_eq(m.u.lookup.keys_bytes, n - WIRE_HEADER_BYTES - 16);
  for (uint32_t i = 0; i < n_keys; i++) {
    struct wire_key k;
    wire_lookup_key(&m, i, &k);
    cr_assert_eq(k.len, strlen(keys[i]), "key %u length", i);
    cr_assert_arr_eq(k.key, keys[i], k.len, "key %u bytes", i);
    cr_assert((const uint8_t *)k.key > buf && (const uint8_t *)k.key < buf + n, "a view");
  }
}

Test(wire_round_trip, lookup_from_one_short_key_to_the_most_longest_keys)
{
  lookup_round_trip(1, 1, 1);
  lookup_round_trip(1, ECC_KEY_MAX, UINT32_MAX);
  lookup_round_trip(3, 0, 2);
  lookup_round_trip(WIRE_MAX_KEYS, 0, 8);
  lookup_round_trip(WIRE_MAX_KEYS, 1, 1);
  lookup_round_trip(WIRE_MAX_KEYS, ECC_KEY_MAX, 1);
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, (const char *const[]){"k"}, 1),
               WIRE_HEADER_BYTES + 16 + 2 + 1);
}

Test(wire_round_trip, the_largest_lookup_is_wire_max_bytes)
{
  lookup_round_trip(WIRE_MAX_KEYS, ECC_KEY_MAX, 1);
  cr_assert_eq(WIRE_HEADER_BYTES + 16 + WIRE_MAX_KEYS * (2 + ECC_KEY_MAX),
               wire_max_bytes(WIRE_LOOKUP));
  struct wire_msg m;
  decode_ok(buf, wire_max_bytes(WIRE_LOOKUP), &m);
}

static void found_round_trip(const struct wire_found_entry *entries, uint32_t n, size_t want)
{
  size_t len = wire_encode_found(buf, sizeof(buf), 5, 0xfeedull + n, ECC_OK, entries, n);
  cr_assert_eq(len, want, "FOUND of %u entries: %zu bytes, expected %zu", n, len, want);
  struct wire_msg m;
  decode_ok(buf, len, &m);
  expect_header(&m, WIRE_FOUND, len, 5);
  cr_assert_eq(m.u.found.req_id, 0xfeedull + n);
  cr_assert_eq(m.u.found.status, ECC_OK);
  cr_assert_eq(m.u.found.n, n);
  cr_assert_eq(m.u.found.entries_bytes, len - WIRE_HEADER_BYTES - 16);
  for (uint32_t i = 0; i < n; i++) {
    struct wire_found_entry e;
    memset(&e, 0x5a, sizeof(e));
    wire_found_entry(&m, i, &e);
    expect_entry_eq(&e, &entries[i], i);
  }
}

Test(wire_round_trip, found_with_the_most_entries_and_runs_and_edge_runs)
{
  static struct wire_found_entry e[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < WIRE_MAX_KEYS; i++)
    e[i] = present(WIRE_MAX_RUNS, UINT64_MAX - i, (uint64_t)i << 40 | i);
  /* A run may end on the last block id, and one may be all of it but id 0. */
  e[7].runs[0] = (struct wire_run){.first = UINT32_MAX - 1, .count = 1};
  e[7].runs[1] = (struct wire_run){.first = 0, .count = UINT32_MAX};
  e[8].runs[WIRE_MAX_RUNS - 1] = (struct wire_run){.first = 1, .count = UINT32_MAX - 1};
  found_round_trip(e, WIRE_MAX_KEYS, wire_max_bytes(WIRE_FOUND));
  cr_assert_eq(WIRE_HEADER_BYTES + 16 + WIRE_MAX_KEYS * (20 + WIRE_MAX_RUNS * 8),
               wire_max_bytes(WIRE_FOUND));
}

Test(wire_round_trip, found_mixing_absent_entries_and_single_runs)
{
  struct wire_found_entry e[5] = {absent(), present(1, 1, 0), absent(), present(3, 4096, 9),
                                  absent()};
  found_round_trip(e, 5, WIRE_HEADER_BYTES + 16 + 5 * 20 + 4 * 8);
  found_round_trip(e, 1, WIRE_HEADER_BYTES + 16 + 20);
  found_round_trip(e + 1, 1, WIRE_HEADER_BYTES + 16 + 20 + 8);
}

Test(wire_round_trip, found_with_every_error_status_and_no_entries)
{
  for (int32_t status = -1; status >= ECC_STATUS_MIN; status--) {
    size_t n = wire_encode_found(buf, sizeof(buf), 6, 77, status, NULL, 0);
    cr_assert_eq(n, WIRE_HEADER_BYTES + 16, "status %d", status);
    struct wire_msg m;
    decode_ok(buf, n, &m);
    cr_assert_eq(m.u.found.status, status);
    cr_assert_eq(m.u.found.n, 0);
    cr_assert_eq(m.u.found.req_id, 77);
  }
}

Test(wire_round_trip, release_of_one_and_of_the_most_tokens)
{
  static uint64_t tokens[WIRE_MAX_TOKENS];
  for (uint32_t i = 0; i < WIRE_MAX_TOKENS; i++)
    tokens[i] = i == 0 ? UINT64_MAX : (uint64_t)i * 0x9e3779b97f4a7c15ull;
  const uint32_t counts[] = {1, 2, WIRE_MAX_TOKENS};
  for (size_t c = 0; c < 3; c++) {
    size_t n = wire_encode_release(buf, sizeof(buf), 11, tokens, counts[c]);
    cr_assert_eq(n, WIRE_HEADER_BYTES + 4 + 8 * counts[c]);
    struct wire_msg m;
    decode_ok(buf, n, &m);
    expect_header(&m, WIRE_RELEASE, n, 11);
    cr_assert_eq(m.u.release.n, counts[c]);
    for (uint32_t i = 0; i < counts[c]; i++)
      cr_assert_eq(wire_release_token(&m, i), tokens[i], "token %u", i);
  }
  cr_assert_eq(WIRE_HEADER_BYTES + 4 + 8 * WIRE_MAX_TOKENS, wire_max_bytes(WIRE_RELEASE));
}

Test(wire_round_trip, ping_and_pong_carry_the_nonce)
{
  const uint64_t nonces[] = {0, 1, UINT64_MAX};
  for (int pong = 0; pong <= 1; pong++) {
    for (size_t c = 0; c < 3; c++) {
      size_t n = wire_encode_ping(buf, sizeof(buf), c, pong, nonces[c]);
      cr_assert_eq(n, wire_max_bytes(pong ? WIRE_PONG : WIRE_PING));
      struct wire_msg m;
      decode_ok(buf, n, &m);
      expect_header(&m, pong ? WIRE_PONG : WIRE_PING, n, c);
      cr_assert_eq(m.u.ping.nonce, nonces[c]);
    }
  }
  cr_assert_eq(wire_encode_ping(buf, sizeof(buf), 0, 42, 0), WIRE_HEADER_BYTES + 8);
  cr_assert_eq(buf[6], WIRE_PONG, "any nonzero pong makes a PONG");
}

Test(wire_round_trip, max_bytes_per_type_and_none_outside_the_set)
{
  const size_t want[] = {0, 52, 4152, 285, 33064, 21544, 8220, 32, 32, 40, 36, 40, 253, 0};
  for (uint32_t t = 0; t < sizeof(want) / sizeof(want[0]); t++)
    cr_assert_eq(wire_max_bytes((enum wire_type)t), want[t], "type %u", t);
  cr_assert_eq(wire_max_bytes((enum wire_type)0xffff), 0);
}

Test(wire_round_trip, type_names_come_from_the_map)
{
#define CHECK_NAME(name, value, text)            \
  cr_assert_eq(name, value);                     \
  cr_assert_str_eq(wire_type_name(value), text); \
  cr_assert_str_eq("WIRE_" text, #name);
  WIRE_TYPE_MAP(CHECK_NAME)
#undef CHECK_NAME
  cr_assert_str_eq(wire_type_name(0), "?");
  cr_assert_str_eq(wire_type_name(WIRE_DESCRIBED + 1), "?");
  cr_assert_str_eq(wire_type_name(UINT32_MAX), "?");
}

Test(wire_round_trip, layout_hash_is_fnv1a_of_block_size_and_version)
{
  /* FNV-1a 64 over the 8 little-endian bytes of the block size, then the
   * 2 of version 3, worked out apart from this code. */
  cr_assert_eq(WIRE_VERSION, 3, "the values below are for version 3");
  cr_assert_eq(wire_layout_hash(0), 0x69d66dcc20f9d2b6ull);
  cr_assert_eq(wire_layout_hash(4096), 0x333117f2d74a7186ull);
  cr_assert_eq(wire_layout_hash(65536), 0x4ae272c316104ee7ull);
  cr_assert_eq(wire_layout_hash(1u << 20), 0x5982de5ccfee74c6ull);
  cr_assert_eq(wire_layout_hash(UINT64_MAX), 0xdfe60eb7887bcbeeull);
}

Test(wire_round_trip, accessors_read_zeros_past_the_count_or_on_another_type)
{
  struct wire_found_entry e = present(2, 10, 3);
  size_t n = wire_encode_found(buf, sizeof(buf), 0, 1, ECC_OK, &e, 1);
  struct wire_msg m;
  decode_ok(buf, n, &m);
  struct wire_found_entry got;
  memset(&got, 0x77, sizeof(got));
  wire_found_entry(&m, 1, &got);
  cr_assert(all_bytes(&got, sizeof(got), 0));
  struct wire_key k = {.len = 9, .key = "x"};
  wire_lookup_key(&m, 0, &k);
  cr_assert(k.len == 0 && k.key == NULL, "a FOUND has no keys");
  cr_assert_eq(wire_release_token(&m, 0), 0);

  n = wire_encode_lookup(buf, sizeof(buf), 0, 1, 1, (const char *const[]){"abc"}, 1);
  decode_ok(buf, n, &m);
  wire_lookup_key(&m, 1, &k);
  cr_assert(k.len == 0 && k.key == NULL);
  memset(&got, 0x77, sizeof(got));
  wire_found_entry(&m, 0, &got);
  cr_assert(all_bytes(&got, sizeof(got), 0), "a LOOKUP has no entries");

  uint64_t t = 5;
  n = wire_encode_release(buf, sizeof(buf), 0, &t, 1);
  decode_ok(buf, n, &m);
  cr_assert_eq(wire_release_token(&m, 0), 5);
  cr_assert_eq(wire_release_token(&m, 1), 0);
}

/* --- Golden layouts: a change of layout must fail here, loudly --- */

static void expect_golden(size_t n, const uint8_t *want, size_t want_n)
{
  cr_assert_eq(n, want_n, "encoded %zu bytes, the layout has %zu", n, want_n);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(buf[i], want[i], "byte %zu: 0x%02x, the layout has 0x%02x", i, buf[i], want[i]);
  struct wire_msg m;
  decode_ok(want, want_n, &m);
}

Test(wire_golden, header_and_hello)
{
  struct wire_hello h = {0x1122334455667788ull, 0x99aabbccddeeff00ull, 0x01020304u,
                         0x0a0b0c0d0e0f1011ull};
  size_t n = wire_encode_hello(buf, sizeof(buf), 0x0102030405060708ull, &h);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x01, 0x00,                                     /* type HELLO */
      0x1c, 0x00, 0x00, 0x00,                         /* length 28 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* seq */
      0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* layout_hash */
      0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, /* client_id */
      0x04, 0x03, 0x02, 0x01,                         /* tp_rank */
      0x11, 0x10, 0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, /* group_id */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, welcome)
{
  const uint8_t rkey[] = {0xde, 0xad, 0xbe};
  struct wire_welcome w = {.server_id = 0x0807060504030201ull,
                           .block_size = 65536,
                           .num_blocks = 0x0a0b0c0du,
                           .region_base = 0x7f0000001000ull,
                           .rkey_len = 3,
                           .rkey = rkey};
  size_t n = wire_encode_welcome(buf, sizeof(buf), 2, &w);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x02, 0x00,                                     /* type WELCOME */
      0x23, 0x00, 0x00, 0x00,                         /* length 35 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* server_id */
      0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, /* block_size */
      0x0d, 0x0c, 0x0b, 0x0a,                         /* num_blocks */
      0x00, 0x10, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, /* region_base */
      0x03, 0x00, 0x00, 0x00,                         /* rkey_len */
      0xde, 0xad, 0xbe,                               /* rkey */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, refuse)
{
  size_t n = wire_encode_refuse(buf, sizeof(buf), 3, ECC_ERR_INCOMPATIBLE, "old");
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x03, 0x00,                                     /* type REFUSE */
      0x09, 0x00, 0x00, 0x00,                         /* length 9 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0xfa, 0xff, 0xff, 0xff,                         /* code -6 */
      0x03, 0x00,                                     /* reason_len */
      0x6f, 0x6c, 0x64,                               /* reason "old" */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, lookup)
{
  const char *keys[] = {"ab", "c"};
  size_t n = wire_encode_lookup(buf, sizeof(buf), 4, 0x0000000100000002ull, 2, keys, 2);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x04, 0x00,                                     /* type LOOKUP */
      0x17, 0x00, 0x00, 0x00,                         /* length 23 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* req_id */
      0x02, 0x00, 0x00, 0x00,                         /* ranks */
      0x02, 0x00, 0x00, 0x00,                         /* n_keys */
      0x02, 0x00, 0x61, 0x62,                         /* key 0: "ab" */
      0x01, 0x00, 0x63,                               /* key 1: "c" */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, found)
{
  struct wire_found_entry e[2] = {absent(), absent()};
  e[0] = (struct wire_found_entry){.found = 1,
                                   .n_runs = 2,
                                   .nbytes = 0x3000,
                                   .token = 0xaabbccdd11223344ull,
                                   .runs = {{5, 2}, {0xfffffff0u, 0x0f}}};
  size_t n = wire_encode_found(buf, sizeof(buf), 5, 7, ECC_OK, e, 2);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x05, 0x00,                                     /* type FOUND */
      0x48, 0x00, 0x00, 0x00,                         /* length 72 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* req_id */
      0x00, 0x00, 0x00, 0x00,                         /* status ECC_OK */
      0x02, 0x00, 0x00, 0x00,                         /* n */
      0x01, 0x02, 0x00, 0x00,                         /* found, n_runs, pad */
      0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* nbytes */
      0x44, 0x33, 0x22, 0x11, 0xdd, 0xcc, 0xbb, 0xaa, /* token */
      0x05, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, /* run 0 */
      0xf0, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00, 0x00, /* run 1 */
      0x00, 0x00, 0x00, 0x00,                         /* absent */
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* nbytes */
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* token */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, found_error)
{
  size_t n = wire_encode_found(buf, sizeof(buf), 6, 8, ECC_ERR_BUSY, NULL, 0);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x05, 0x00,                                     /* type FOUND */
      0x10, 0x00, 0x00, 0x00,                         /* length 16 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* req_id */
      0xfc, 0xff, 0xff, 0xff,                         /* status -4 */
      0x00, 0x00, 0x00, 0x00,                         /* n */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, release)
{
  const uint64_t tokens[] = {1, 0x8000000000000000ull};
  size_t n = wire_encode_release(buf, sizeof(buf), 6, tokens, 2);
  const uint8_t want[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x06, 0x00,                                     /* type RELEASE */
      0x14, 0x00, 0x00, 0x00,                         /* length 20 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0x02, 0x00, 0x00, 0x00,                         /* n */
      0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* token 0 */
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, /* token 1 */
  };
  expect_golden(n, want, sizeof(want));
}

Test(wire_golden, ping_and_pong)
{
  size_t n = wire_encode_ping(buf, sizeof(buf), 7, 0, 0x0123456789abcdefull);
  const uint8_t ping[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x07, 0x00,                                     /* type PING */
      0x08, 0x00, 0x00, 0x00,                         /* length 8 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* nonce */
  };
  expect_golden(n, ping, sizeof(ping));
  n = wire_encode_ping(buf, sizeof(buf), 8, 1, 0x0123456789abcdefull);
  const uint8_t pong[] = {
      0x45, 0x43, 0x43, 0x57,                         /* magic "ECCW" */
      0x03, 0x00,                                     /* version 3 */
      0x08, 0x00,                                     /* type PONG */
      0x08, 0x00, 0x00, 0x00,                         /* length 8 */
      0x00, 0x00, 0x00, 0x00,                         /* flags */
      0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* seq */
      0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, /* nonce */
  };
  expect_golden(n, pong, sizeof(pong));
}

/* --- Refusals: the header --- */

/* A valid message of each type, for the tests that spoil one. */
static size_t sample(uint32_t type, uint8_t *out, size_t cap)
{
  static const uint8_t rkey[] = {1, 2, 3, 4, 5};
  const struct wire_hello h = {1, 2, 3, 4};
  const struct wire_welcome w = {9, 4096, 100, 0x1000, sizeof(rkey), rkey};
  const char *keys[] = {"first", "second-key", "3"};
  struct wire_found_entry e[3] = {present(2, 8192, 5), absent(), present(1, 1, 6)};
  const uint64_t tokens[] = {5, 6, 7};
  switch (type) {
  case WIRE_HELLO:
    return wire_encode_hello(out, cap, 1, &h);
  case WIRE_WELCOME:
    return wire_encode_welcome(out, cap, 2, &w);
  case WIRE_REFUSE:
    return wire_encode_refuse(out, cap, 3, ECC_ERR_INCOMPATIBLE, "block size 4096, yours 8192");
  case WIRE_LOOKUP:
    return wire_encode_lookup(out, cap, 4, 40, 2, keys, 3);
  case WIRE_FOUND:
    return wire_encode_found(out, cap, 5, 40, ECC_OK, e, 3);
  case WIRE_RELEASE:
    return wire_encode_release(out, cap, 6, tokens, 3);
  case WIRE_PULL:
    return wire_encode_pull(out, cap, 8, 41, 5);
  case WIRE_PULLED:
    return wire_encode_pulled(out, cap, 9, 41, ECC_ERR_TRANSFER);
  case WIRE_DESCRIBE:
    return wire_encode_describe(out, cap, 10, 42, 5);
  case WIRE_DESCRIBED:
    return wire_encode_described(out, cap, 11, 42, ECC_OK, &e[0], "first");
  default:
    return wire_encode_ping(out, cap, 7, type == WIRE_PONG, 0xabc);
  }
}

static void set32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

Test(wire_refuse_header, another_magic_is_incompatible_and_names_both)
{
  size_t n = sample(WIRE_HELLO, buf, sizeof(buf));
  set32(buf, 0x57434346u);
  expect_refused(buf, n, ECC_ERR_INCOMPATIBLE, "magic 0x57434346, expected 0x57434345");
  set32(buf, 0);
  expect_refused(buf, n, ECC_ERR_INCOMPATIBLE, "magic 0x00000000");
}

Test(wire_refuse_header, another_version_is_incompatible_and_names_both)
{
  const uint32_t versions[] = {0, 2, 0xffff};
  for (size_t c = 0; c < 3; c++) {
    size_t n = sample(WIRE_LOOKUP, buf, sizeof(buf));
    buf[4] = (uint8_t)versions[c];
    buf[5] = (uint8_t)(versions[c] >> 8);
    char needle[64];
    snprintf(needle, sizeof(needle), "version %u, this side speaks version %u", versions[c],
             WIRE_VERSION);
    expect_refused(buf, n, ECC_ERR_INCOMPATIBLE, needle);
  }
}

Test(wire_refuse_header, nonzero_flags)
{
  const uint32_t flags[] = {1, 0x80000000u, UINT32_MAX};
  for (size_t c = 0; c < 3; c++) {
    size_t n = sample(WIRE_PING, buf, sizeof(buf));
    set32(buf + 12, flags[c]);
    char needle[64];
    snprintf(needle, sizeof(needle), "flags 0x%x, must be 0", flags[c]);
    expect_refused(buf, n, ECC_ERR_INVALID, needle);
  }
}

Test(wire_refuse_header, length_other_than_the_bytes_that_follow)
{
  for (uint32_t t = WIRE_HELLO; t <= WIRE_DESCRIBED; t++) {
    size_t n = sample(t, buf, sizeof(buf));
    uint32_t body = (uint32_t)(n - WIRE_HEADER_BYTES);
    set32(buf + 8, body + 1); /* says more than follows */
    char needle[80];
    snprintf(needle, sizeof(needle), "length %u, but %u bytes follow", body + 1, body);
    expect_refused(buf, n, ECC_ERR_INVALID, needle);
    set32(buf + 8, body - 1); /* says less than follows */
    snprintf(needle, sizeof(needle), "length %u, but %u bytes follow", body - 1, body);
    expect_refused(buf, n, ECC_ERR_INVALID, needle);
    set32(buf + 8, 0);
    expect_refused(buf, n, ECC_ERR_INVALID, "header length 0");
    /* One byte more than the header says, also at the end of a valid message. */
    set32(buf + 8, body);
    buf[n] = 0;
    snprintf(needle, sizeof(needle), "length %u, but %u bytes follow", body, body + 1);
    expect_refused(buf, n + 1, ECC_ERR_INVALID, needle);
  }
}

Test(wire_refuse_header, length_over_the_body_limit)
{
  size_t total = WIRE_HEADER_BYTES + WIRE_MAX_BODY + 1;
  uint8_t *big = calloc(1, total);
  cr_assert(big != NULL);
  sample(WIRE_LOOKUP, big, total);
  set32(big + 8, WIRE_MAX_BODY + 1);
  expect_refused(big, total, ECC_ERR_INVALID, "header length 1048577, limit 1048576");
  set32(big + 8, UINT32_MAX);
  expect_refused(big, total, ECC_ERR_INVALID, "header length 4294967295, limit 1048576");
  free(big);
}

Test(wire_refuse_header, unknown_type_names_its_value)
{
  const uint32_t types[] = {0, WIRE_DESCRIBED + 1, 100, 0xffff};
  for (size_t c = 0; c < 4; c++) {
    size_t n = sample(WIRE_PING, buf, sizeof(buf));
    buf[6] = (uint8_t)types[c];
    buf[7] = (uint8_t)(types[c] >> 8);
    char needle[64];
    snprintf(needle, sizeof(needle), "type %u, not a message type", types[c]);
    expect_refused(buf, n, ECC_ERR_INVALID, needle);
  }
}

Test(wire_refuse_header, truncated_at_every_byte_of_every_type)
{
  for (uint32_t t = WIRE_HELLO; t <= WIRE_DESCRIBED; t++) {
    size_t n = sample(t, buf, sizeof(buf));
    for (size_t cut = 0; cut < n; cut++)
      expect_refused(buf, cut, ECC_ERR_INVALID,
                     cut < WIRE_HEADER_BYTES ? "header: message of" : "header length");
  }
  expect_refused(NULL, 0, ECC_ERR_INVALID, "shorter than the 24-byte header");
}

Test(wire_refuse_header, body_cut_short_under_a_header_that_agrees)
{
  static uint8_t cut_msg[BIG];
  for (uint32_t t = WIRE_HELLO; t <= WIRE_DESCRIBED; t++) {
    size_t n = sample(t, buf, sizeof(buf));
    for (size_t body = 0; body < n - WIRE_HEADER_BYTES; body++) {
      memcpy(cut_msg, buf, WIRE_HEADER_BYTES + body);
      set32(cut_msg + 8, (uint32_t)body);
      expect_refused(cut_msg, WIRE_HEADER_BYTES + body, ECC_ERR_INVALID, wire_type_name(t));
    }
    /* And one byte too many. */
    memcpy(cut_msg, buf, n);
    cut_msg[n] = 0x20;
    set32(cut_msg + 8, (uint32_t)(n + 1 - WIRE_HEADER_BYTES));
    expect_refused(cut_msg, n + 1, ECC_ERR_INVALID, wire_type_name(t));
  }
}

Test(wire_refuse_header, why_may_be_absent_or_short)
{
  size_t n = sample(WIRE_HELLO, buf, sizeof(buf));
  buf[12] = 1;
  struct wire_msg m;
  cr_assert_eq(wire_decode(buf, n, &m, NULL, 0), ECC_ERR_INVALID);
  char small[8];
  cr_assert_eq(wire_decode(buf, n, &m, small, sizeof(small)), ECC_ERR_INVALID);
  cr_assert_str_eq(small, "wire: h", "cut to its room, NUL-terminated");
  cr_assert_eq(wire_decode(buf, n, NULL, why, sizeof(why)), ECC_ERR_INVALID);
  cr_assert(strstr(why, "out") != NULL, "%s", why);
  cr_assert_eq(wire_decode(NULL, 30, &m, why, sizeof(why)), ECC_ERR_INVALID);
  buf[12] = 0;
  cr_assert_eq(wire_decode(buf, n, &m, why, sizeof(why)), ECC_OK);
  cr_assert_str_eq(why, "", "a decoded message leaves no reason");
}

/* --- Refusals: the bodies --- */

Test(wire_refuse_body, fixed_size_bodies_of_another_length)
{
  struct raw *r = raw_begin(WIRE_HELLO);
  put(r, 0, 8);
  put(r, 0, 8);
  put(r, 0, 4);
  put(r, 0, 8);
  put(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "HELLO body: length 29, must be 28");
  r = raw_begin(WIRE_PONG);
  put(r, 0, 7);
  expect_raw_refused(r, ECC_ERR_INVALID, "PONG body: length 7, must be 8");
  r = raw_begin(WIRE_PING);
  expect_raw_refused(r, ECC_ERR_INVALID, "PING body: length 0, must be 8");
}

static struct raw *welcome_head(uint32_t rkey_len)
{
  struct raw *r = raw_begin(WIRE_WELCOME);
  put(r, 1, 8);
  put(r, 4096, 8);
  put(r, 10, 4);
  put(r, 0x1000, 8);
  put(r, rkey_len, 4);
  return r;
}

Test(wire_refuse_body, welcome_rkey_len_out_of_range_or_disagreeing)
{
  static uint8_t rkey[WIRE_MAX_RKEY + 1];
  memset(rkey, 0x11, sizeof(rkey));
  expect_raw_refused(welcome_head(0), ECC_ERR_INVALID, "WELCOME rkey_len 0, must be 1..4096");
  struct raw *r = welcome_head(WIRE_MAX_RKEY + 1);
  put_bytes(r, rkey, WIRE_MAX_RKEY + 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "WELCOME rkey_len 4097, must be 1..4096");
  r = welcome_head(5);
  put_bytes(r, rkey, 4);
  expect_raw_refused(r, ECC_ERR_INVALID, "rkey_len 5, but 4 bytes follow");
  r = welcome_head(5);
  put_bytes(r, rkey, 6);
  expect_raw_refused(r, ECC_ERR_INVALID, "rkey_len 5, but 6 bytes follow");
  r = welcome_head(WIRE_MAX_RKEY);
  put_bytes(r, rkey, WIRE_MAX_RKEY);
  struct wire_msg m;
  decode_ok(r->b, raw_end(r), &m);
}

static struct raw *refuse_head(int32_t code, uint32_t reason_len)
{
  struct raw *r = raw_begin(WIRE_REFUSE);
  put(r, (uint32_t)code, 4);
  put(r, reason_len, 2);
  return r;
}

Test(wire_refuse_body, refuse_code_that_is_no_error)
{
  const int32_t codes[] = {ECC_OK, 1, ECC_STATUS_MIN - 1, INT32_MIN, INT32_MAX};
  for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
    char needle[64];
    snprintf(needle, sizeof(needle), "REFUSE code %d", codes[c]);
    expect_raw_refused(refuse_head(codes[c], 0), ECC_ERR_INVALID, needle);
    cr_assert(strstr(why, "must be an ECC_ERR_* value (-13..-1)") != NULL, "%s", why);
  }
}

Test(wire_refuse_body, refuse_reason_too_long_disagreeing_or_holding_nul)
{
  char reason[WIRE_MAX_REASON + 1];
  memset(reason, 'z', sizeof(reason));
  struct raw *r = refuse_head(ECC_ERR_BUSY, WIRE_MAX_REASON + 1);
  put_bytes(r, reason, WIRE_MAX_REASON + 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "REFUSE reason_len 256, must be 0..255");
  r = refuse_head(ECC_ERR_BUSY, 3);
  put_bytes(r, "ab", 2);
  expect_raw_refused(r, ECC_ERR_INVALID, "reason_len 3, but 2 bytes follow");
  r = refuse_head(ECC_ERR_BUSY, 3);
  put_bytes(r, "a\0b", 3);
  expect_raw_refused(r, ECC_ERR_INVALID, "REFUSE reason: NUL byte at offset 1");
}

static struct raw *lookup_head(uint32_t ranks, uint32_t n_keys)
{
  struct raw *r = raw_begin(WIRE_LOOKUP);
  put(r, 99, 8);
  put(r, ranks, 4);
  put(r, n_keys, 4);
  return r;
}

Test(wire_refuse_body, lookup_counts_over_their_limits)
{
  expect_raw_refused(lookup_head(1, 0), ECC_ERR_INVALID, "LOOKUP n_keys 0, must be 1..256");
  struct raw *r = lookup_head(1, WIRE_MAX_KEYS + 1);
  for (uint32_t i = 0; i < WIRE_MAX_KEYS + 1; i++)
    put_key(r, "k", 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP n_keys 257, must be 1..256");
  r = lookup_head(0, 1);
  put_key(r, "k", 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP ranks 0, must be >= 1");
}

Test(wire_refuse_body, lookup_key_empty_too_long_or_holding_nul)
{
  char key[ECC_KEY_MAX + 2];
  memset(key, 'q', sizeof(key));
  struct raw *r = lookup_head(1, 3);
  put_key(r, "ok", 2);
  put_key(r, "", 0);
  put_key(r, "ok", 2);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 1: length 0, must be 1..127");
  r = lookup_head(1, 1);
  put_key(r, key, ECC_KEY_MAX + 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 0: length 128, must be 1..127");
  r = lookup_head(1, 2);
  put_key(r, key, ECC_KEY_MAX);
  put(r, UINT16_MAX, 2);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 1: length 65535, must be 1..127");
  r = lookup_head(1, 3);
  put_key(r, "a", 1);
  put_key(r, "bb", 2);
  put_key(r, "c\0c", 3);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 2: NUL byte at offset 1");
  r = lookup_head(1, 1);
  put_key(r, "\0", 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 0: NUL byte at offset 0");
  r = lookup_head(1, 1);
  put_key(r, key, ECC_KEY_MAX);
  struct wire_msg m;
  decode_ok(r->b, raw_end(r), &m);
}

Test(wire_refuse_body, lookup_keys_disagreeing_with_the_body)
{
  struct raw *r = lookup_head(1, 2);
  put_key(r, "abc", 3);
  put(r, 1, 1); /* key 1's len cut */
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 1: its len needs 2 bytes, 1 left");
  r = lookup_head(1, 2);
  put_key(r, "abc", 3);
  put(r, 4, 2);
  put_bytes(r, "xyz", 3);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP key 1: length 4, but 3 bytes left");
  r = lookup_head(1, 1);
  put_key(r, "abc", 3);
  put(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "LOOKUP body: 1 bytes after the last of n_keys 1");
}

static struct raw *found_head(int32_t status, uint32_t n)
{
  struct raw *r = raw_begin(WIRE_FOUND);
  put(r, 12, 8);
  put(r, (uint32_t)status, 4);
  put(r, n, 4);
  return r;
}

Test(wire_refuse_body, found_status_and_n_that_disagree)
{
  struct raw *r = found_head(ECC_ERR_BUSY, 1);
  put_entry(r, 0, 0, 0, 0, 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND status -4 (ECC_ERR_BUSY) with n 1");
  cr_assert(strstr(why, "n must be 0 unless ECC_OK") != NULL, "%s", why);
  expect_raw_refused(found_head(ECC_OK, 0), ECC_ERR_INVALID,
                     "FOUND n 0 with status ECC_OK, must be 1..256");
  r = found_head(ECC_OK, WIRE_MAX_KEYS + 1);
  for (uint32_t i = 0; i < WIRE_MAX_KEYS + 1; i++)
    put_entry(r, 0, 0, 0, 0, 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND n 257 with status ECC_OK, must be 1..256");
  const int32_t bad[] = {1, ECC_STATUS_MIN - 1, INT32_MIN};
  for (size_t c = 0; c < 3; c++) {
    char needle[64];
    snprintf(needle, sizeof(needle), "FOUND status %d, must be ECC_OK or an ECC_ERR_*", bad[c]);
    expect_raw_refused(found_head(bad[c], 0), ECC_ERR_INVALID, needle);
  }
}

Test(wire_refuse_body, found_absent_entry_with_anything_set)
{
  struct raw *r = found_head(ECC_OK, 2);
  put_entry(r, 0, 0, 0, 0, 0);
  put_entry(r, 0, 1, 0, 0, 0);
  put_run(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 1: absent, n_runs 1, must be 0");
  r = found_head(ECC_OK, 1);
  put_entry(r, 0, 0, 0, 1, 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: absent, nbytes 1 and token 0");
  r = found_head(ECC_OK, 1);
  put_entry(r, 0, 0, 0, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: absent, nbytes 0 and token 1");
}

Test(wire_refuse_body, found_entry_flag_pad_nbytes_and_run_count)
{
  struct raw *r = found_head(ECC_OK, 1);
  put_entry(r, 2, 1, 0, 1, 1);
  put_run(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: found 2, must be 0 or 1");
  r = found_head(ECC_OK, 1);
  put_entry(r, 1, 1, 0x100, 1, 1);
  put_run(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: pad 256, must be 0");
  r = found_head(ECC_OK, 1);
  put_entry(r, 1, 1, 0, 0, 1);
  put_run(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: nbytes 0, must be >= 1");
  r = found_head(ECC_OK, 2);
  put_entry(r, 0, 0, 0, 0, 0);
  put_entry(r, 1, 0, 0, 1, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 1: n_runs 0, must be 1..8");
  r = found_head(ECC_OK, 1);
  put_entry(r, 1, WIRE_MAX_RUNS + 1, 0, 1, 1);
  for (uint32_t k = 0; k < WIRE_MAX_RUNS + 1; k++)
    put_run(r, k, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: n_runs 9, must be 1..8");
  r = found_head(ECC_OK, 1);
  put_entry(r, 1, UINT8_MAX, 0, 1, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: n_runs 255, must be 1..8");
}

Test(wire_refuse_body, found_run_of_no_blocks_or_past_the_last_block_id)
{
  struct raw *r = found_head(ECC_OK, 2);
  put_entry(r, 1, 1, 0, 1, 1);
  put_run(r, 0, 1);
  put_entry(r, 1, 3, 0, 1, 1);
  put_run(r, 0, 1);
  put_run(r, 5, 1);
  put_run(r, 9, 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 1 run 2: count 0, must be >= 1");
  const uint32_t over[][2] = {{UINT32_MAX, 1}, {0x80000000u, 0x80000000u}, {1, UINT32_MAX}};
  for (size_t c = 0; c < 3; c++) {
    r = found_head(ECC_OK, 1);
    put_entry(r, 1, 2, 0, 1, 1);
    put_run(r, 0, 1);
    put_run(r, over[c][0], over[c][1]);
    char needle[96];
    snprintf(needle, sizeof(needle), "FOUND entry 0 run 1: first %u + count %u is past", over[c][0],
             over[c][1]);
    expect_raw_refused(r, ECC_ERR_INVALID, needle);
  }
}

Test(wire_refuse_body, found_entries_disagreeing_with_the_body)
{
  struct raw *r = found_head(ECC_OK, 2);
  put_entry(r, 0, 0, 0, 0, 0);
  put(r, 0, 19);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 1: needs 20 bytes, 19 left");
  r = found_head(ECC_OK, 1);
  put_entry(r, 1, 2, 0, 1, 1);
  put_run(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND entry 0: n_runs 2 needs 16 bytes, 8 left");
  r = found_head(ECC_OK, 1);
  put_entry(r, 0, 0, 0, 0, 0);
  put(r, 0, 3);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND body: 3 bytes after the last of n 1");
  r = found_head(ECC_ERR_CLOSED, 0);
  put(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "FOUND body: 1 bytes after the last of n 0");
}

Test(wire_refuse_body, release_count_out_of_range_or_disagreeing)
{
  struct raw *r = raw_begin(WIRE_RELEASE);
  put(r, 0, 4);
  expect_raw_refused(r, ECC_ERR_INVALID, "RELEASE n 0, must be 1..1024");
  r = raw_begin(WIRE_RELEASE);
  put(r, WIRE_MAX_TOKENS + 1, 4);
  for (uint32_t i = 0; i < WIRE_MAX_TOKENS + 1; i++)
    put(r, i, 8);
  expect_raw_refused(r, ECC_ERR_INVALID, "RELEASE n 1025, must be 1..1024");
  r = raw_begin(WIRE_RELEASE);
  put(r, 2, 4);
  put(r, 1, 8);
  put(r, 2, 7);
  expect_raw_refused(r, ECC_ERR_INVALID, "RELEASE body: n 2 needs 16 token bytes, 15 follow");
  r = raw_begin(WIRE_RELEASE);
  put(r, 1, 4);
  put(r, 1, 8);
  put(r, 2, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "RELEASE body: n 1 needs 8 token bytes, 9 follow");
}

/* --- Encoders refuse what the decoder would --- */

/* Every cap below the size needed is refused and nothing is written. */
static void expect_caps_refused(uint32_t type)
{
  static uint8_t scratch[BIG];
  size_t need = sample(type, buf, sizeof(buf));
  cr_assert_gt(need, WIRE_HEADER_BYTES);
  for (size_t cap = 0; cap < need; cap++) {
    memset(scratch, 0xaa, need);
    size_t n = sample(type, scratch, cap);
    cr_assert_eq(n, 0, "%s into %zu bytes of %zu returned %zu", wire_type_name(type), cap, need, n);
    cr_assert(all_bytes(scratch, need, 0xaa), "%s: a refused call writes nothing (cap %zu)",
              wire_type_name(type), cap);
  }
  cr_assert_eq(sample(type, scratch, need), need, "exactly the size needed is enough");
  cr_assert_eq(sample(type, NULL, BIG), 0, "no buffer, no message");
}

Test(wire_encode, every_cap_too_small_is_refused_for_every_type)
{
  for (uint32_t t = WIRE_HELLO; t <= WIRE_DESCRIBED; t++)
    expect_caps_refused(t);
}

Test(wire_encode, the_largest_messages_need_all_their_bytes)
{
  static char text[WIRE_MAX_KEYS][ECC_KEY_MAX + 1];
  const char *keys[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < WIRE_MAX_KEYS; i++)
    keys[i] = make_key(text[i], i, ECC_KEY_MAX);
  size_t max = wire_max_bytes(WIRE_LOOKUP);
  cr_assert_eq(wire_encode_lookup(buf, max - 1, 0, 0, 1, keys, WIRE_MAX_KEYS), 0);
  cr_assert_eq(wire_encode_lookup(buf, max, 0, 0, 1, keys, WIRE_MAX_KEYS), max);
  static struct wire_found_entry e[WIRE_MAX_KEYS];
  for (uint32_t i = 0; i < WIRE_MAX_KEYS; i++)
    e[i] = present(WIRE_MAX_RUNS, 1, i);
  max = wire_max_bytes(WIRE_FOUND);
  cr_assert_eq(wire_encode_found(buf, max - 1, 0, 0, ECC_OK, e, WIRE_MAX_KEYS), 0);
  cr_assert_eq(wire_encode_found(buf, max, 0, 0, ECC_OK, e, WIRE_MAX_KEYS), max);
}

Test(wire_encode, welcome_and_refuse_arguments_over_a_limit)
{
  static uint8_t rkey[WIRE_MAX_RKEY + 1];
  struct wire_welcome w = {1, 4096, 10, 0x1000, 0, rkey};
  cr_assert_eq(wire_encode_welcome(buf, sizeof(buf), 0, &w), 0, "rkey_len 0");
  w.rkey_len = WIRE_MAX_RKEY + 1;
  cr_assert_eq(wire_encode_welcome(buf, sizeof(buf), 0, &w), 0, "rkey_len 4097");
  w.rkey_len = 4;
  w.rkey = NULL;
  cr_assert_eq(wire_encode_welcome(buf, sizeof(buf), 0, &w), 0, "no rkey");
  cr_assert_eq(wire_encode_welcome(buf, sizeof(buf), 0, NULL), 0);
  cr_assert_eq(wire_encode_hello(buf, sizeof(buf), 0, NULL), 0);

  const int32_t codes[] = {ECC_OK, 1, ECC_STATUS_MIN - 1, INT32_MIN, INT32_MAX};
  for (size_t c = 0; c < 5; c++)
    cr_assert_eq(wire_encode_refuse(buf, sizeof(buf), 0, codes[c], "x"), 0, "code %d", codes[c]);
  char reason[WIRE_MAX_REASON + 2];
  memset(reason, 'y', sizeof(reason) - 1);
  reason[WIRE_MAX_REASON + 1] = '\0';
  cr_assert_eq(wire_encode_refuse(buf, sizeof(buf), 0, ECC_ERR_BUSY, reason), 0, "256 bytes");
  reason[WIRE_MAX_REASON] = '\0';
  cr_assert_gt(wire_encode_refuse(buf, sizeof(buf), 0, ECC_ERR_BUSY, reason), 0, "255 bytes");
}

Test(wire_encode, lookup_arguments_over_a_limit)
{
  static char text[WIRE_MAX_KEYS + 1][ECC_KEY_MAX + 2];
  const char *keys[WIRE_MAX_KEYS + 1];
  for (uint32_t i = 0; i <= WIRE_MAX_KEYS; i++)
    keys[i] = make_key(text[i], i, 4);
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, 0), 0, "n_keys 0");
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, WIRE_MAX_KEYS + 1), 0);
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 0, keys, 1), 0, "ranks 0");
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, NULL, 1), 0, "no keys");
  make_key(text[5], 5, ECC_KEY_MAX + 1);
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, 6), 0, "key of 128 bytes");
  make_key(text[5], 5, 0);
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, 6), 0, "empty key");
  keys[5] = NULL;
  cr_assert_eq(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, 6), 0, "NULL key");
  cr_assert_gt(wire_encode_lookup(buf, sizeof(buf), 0, 0, 1, keys, 5), 0, "the 5 before it");
}

/* FOUND {entry} refused, where the entry breaks one rule. */
static void expect_entry_refused(struct wire_found_entry e, const char *what)
{
  struct wire_found_entry two[2] = {present(1, 1, 1), e};
  memset(buf, 0xaa, 256);
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_OK, two, 2), 0, "%s", what);
  cr_assert(all_bytes(buf, 256, 0xaa), "%s: nothing written", what);
}

Test(wire_encode, found_arguments_over_a_limit)
{
  struct wire_found_entry e = absent();
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_OK, &e, 0), 0, "OK with n 0");
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_ERR_BUSY, &e, 1), 0, "error, n 1");
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, 1, NULL, 0), 0, "status 1");
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_STATUS_MIN - 1, NULL, 0), 0);
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_OK, NULL, 1), 0, "no entries");
  static struct wire_found_entry many[WIRE_MAX_KEYS + 1];
  cr_assert_eq(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_OK, many, WIRE_MAX_KEYS + 1), 0);
  cr_assert_gt(wire_encode_found(buf, sizeof(buf), 0, 0, ECC_OK, many, WIRE_MAX_KEYS), 0);

  e.found = 2;
  expect_entry_refused(e, "found 2");
  e = absent();
  e.n_runs = 1;
  e.runs[0].count = 1;
  expect_entry_refused(e, "absent with n_runs 1");
  e = absent();
  e.nbytes = 1;
  expect_entry_refused(e, "absent with nbytes 1");
  e = absent();
  e.token = 1;
  expect_entry_refused(e, "absent with token 1");
  e = present(1, 0, 1);
  expect_entry_refused(e, "nbytes 0");
  e = present(0, 1, 1);
  expect_entry_refused(e, "n_runs 0");
  e = present(WIRE_MAX_RUNS, 1, 1);
  e.n_runs = WIRE_MAX_RUNS + 1;
  expect_entry_refused(e, "n_runs 9");
  e = present(3, 1, 1);
  e.runs[2].count = 0;
  expect_entry_refused(e, "run count 0");
  e = present(3, 1, 1);
  e.runs[1] = (struct wire_run){.first = UINT32_MAX, .count = 1};
  expect_entry_refused(e, "run past the last block id");
  e = present(3, 1, 1);
  e.runs[1] = (struct wire_run){.first = 2, .count = UINT32_MAX - 1};
  expect_entry_refused(e, "run past the last block id by 1");
}

Test(wire_encode, release_arguments_over_a_limit)
{
  static uint64_t tokens[WIRE_MAX_TOKENS + 1];
  cr_assert_eq(wire_encode_release(buf, sizeof(buf), 0, tokens, 0), 0, "n 0");
  cr_assert_eq(wire_encode_release(buf, sizeof(buf), 0, tokens, WIRE_MAX_TOKENS + 1), 0);
  cr_assert_eq(wire_encode_release(buf, sizeof(buf), 0, NULL, 1), 0, "no tokens");
}

/* --- The fuzzer's seed corpus: one valid message of each type, as the
 * encoders write them. ECC_WIRE_WRITE_SEEDS=1 (re)writes the files. --- */

static size_t seed(uint32_t type, uint8_t *out, size_t cap)
{
  static uint8_t rkey[16];
  static char longest[ECC_KEY_MAX + 1];
  for (size_t i = 0; i < sizeof(rkey); i++)
    rkey[i] = (uint8_t)(0xc0 + i);
  const struct wire_welcome w = {0x5eed, 4096, 1024, 0x7f1234560000ull, sizeof(rkey), rkey};
  /* The longest key last: one byte more in it is a key over the limit. */
  const char *keys[] = {"sha256:00ff", "k", make_key(longest, 3, ECC_KEY_MAX)};
  struct wire_found_entry e[3] = {present(1, 4096, 17), absent(), present(3, 10000, 18)};
  const uint64_t tokens[] = {17, 18, UINT64_MAX};
  switch (type) {
  case WIRE_HELLO:
    return wire_encode_hello(out, cap, 1,
                             &(struct wire_hello){wire_layout_hash(4096), 0xc1, 0, 0x9e});
  case WIRE_WELCOME:
    return wire_encode_welcome(out, cap, 1, &w);
  case WIRE_REFUSE:
    return wire_encode_refuse(out, cap, 1, ECC_ERR_INCOMPATIBLE, "layout hash differs");
  case WIRE_LOOKUP:
    return wire_encode_lookup(out, cap, 2, 1, 2, keys, 3);
  case WIRE_FOUND:
    return wire_encode_found(out, cap, 2, 1, ECC_OK, e, 3);
  case WIRE_RELEASE:
    return wire_encode_release(out, cap, 3, tokens, 3);
  case WIRE_PULL:
    return wire_encode_pull(out, cap, 5, 9, 17);
  case WIRE_PULLED:
    return wire_encode_pulled(out, cap, 6, 9, ECC_ERR_CLOSED);
  case WIRE_DESCRIBE:
    return wire_encode_describe(out, cap, 7, 10, 18);
  case WIRE_DESCRIBED:
    return wire_encode_described(out, cap, 8, 10, ECC_OK, &e[2], keys[2]);
  default:
    return wire_encode_ping(out, cap, 4, type == WIRE_PONG, 0x1234);
  }
}

Test(wire_seeds, the_committed_seeds_are_the_encoders_output)
{
  static uint8_t file[BIG];
  for (uint32_t t = WIRE_HELLO; t <= WIRE_DESCRIBED; t++) {
    char path[512];
    int at = snprintf(path, sizeof(path), "%s/", SEED_DIR);
    for (const char *c = wire_type_name(t); *c != '\0'; c++)
      path[at++] = (char)(*c - 'A' + 'a'); /* "hello", ... as the other corpora name files */
    path[at] = '\0';
    size_t n = seed(t, buf, sizeof(buf));
    cr_assert_gt(n, 0);
    if (getenv("ECC_WIRE_WRITE_SEEDS") != NULL) {
      FILE *f = fopen(path, "wb");
      cr_assert(f != NULL && fwrite(buf, 1, n, f) == n && fclose(f) == 0, "writing %s", path);
    }
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "%s is missing (ECC_WIRE_WRITE_SEEDS=1 writes it)", path);
    size_t got = fread(file, 1, sizeof(file), f);
    fclose(f);
    cr_assert_eq(got, n, "%s: %zu bytes, the encoder writes %zu", path, got, n);
    cr_assert_arr_eq(file, buf, n, "%s differs from the encoder's output", path);
    struct wire_msg m;
    decode_ok(file, got, &m);
    cr_assert_eq(m.h.type, t);
  }
}

/* --- PULL, PULLED and the header of data messages --- */

Test(wire_pull, pull_and_pulled_round_trip_and_keep_their_layout)
{
  size_t n = wire_encode_pull(buf, sizeof(buf), 7, 0x0102030405060708ull, UINT64_MAX);
  cr_assert_eq(n, WIRE_HEADER_BYTES + 16);
  cr_assert_eq(n, wire_max_bytes(WIRE_PULL));
  static const uint8_t pull_body[16] = {8,   7,   6,   5,   4,   3,   2,   1,
                                        255, 255, 255, 255, 255, 255, 255, 255};
  cr_assert_arr_eq(buf + WIRE_HEADER_BYTES, pull_body, 16);
  struct wire_msg m;
  decode_ok(buf, n, &m);
  cr_assert_eq(m.h.type, WIRE_PULL);
  cr_assert_eq(m.u.pull.req_id, 0x0102030405060708ull);
  cr_assert_eq(m.u.pull.token, UINT64_MAX);
  n = wire_encode_pulled(buf, sizeof(buf), 8, 42, ECC_ERR_TRANSFER);
  cr_assert_eq(n, WIRE_HEADER_BYTES + 12);
  cr_assert_eq(n, wire_max_bytes(WIRE_PULLED));
  decode_ok(buf, n, &m);
  cr_assert_eq(m.h.type, WIRE_PULLED);
  cr_assert_eq(m.u.pulled.req_id, 42u);
  cr_assert_eq(m.u.pulled.status, ECC_ERR_TRANSFER);
  cr_assert_str_eq(wire_type_name(WIRE_PULL), "PULL");
  cr_assert_str_eq(wire_type_name(WIRE_PULLED), "PULLED");
}

Test(wire_pull, refused_bodies_and_arguments)
{
  struct wire_msg m;
  size_t n = wire_encode_pull(buf, sizeof(buf), 1, 1, 2);
  for (size_t cut = 0; cut < n; cut++)
    cr_assert_neq(wire_decode(buf, cut, &m, why, sizeof(why)), ECC_OK, "PULL cut at %zu", cut);
  for (size_t cap = 0; cap < n; cap++)
    cr_assert_eq(wire_encode_pull(buf, cap, 1, 1, 2), 0, "cap %zu", cap);
  cr_assert_eq(wire_encode_pulled(buf, sizeof(buf), 1, 1, ECC_OK), 0, "PULLED needs an error");
  cr_assert_eq(wire_encode_pulled(buf, sizeof(buf), 1, 1, ECC_STATUS_MIN - 1), 0);
  n = wire_encode_pulled(buf, sizeof(buf), 1, 1, ECC_ERR_BUSY);
  buf[WIRE_HEADER_BYTES + 8] = 0; /* status 0: not an error */
  buf[WIRE_HEADER_BYTES + 9] = buf[WIRE_HEADER_BYTES + 10] = buf[WIRE_HEADER_BYTES + 11] = 0;
  cr_assert_eq(wire_decode(buf, n, &m, why, sizeof(why)), ECC_ERR_INVALID);
  cr_assert(strstr(why, "PULLED status") != NULL, "why: %s", why);
}

Test(wire_pull, data_headers_round_trip_and_are_checked)
{
  uint8_t h[WIRE_DATA_HEADER_BYTES];
  wire_encode_data(h, 0x1122334455667788ull, 1u << 20);
  static const uint8_t golden[WIRE_DATA_HEADER_BYTES] = {
      0x45, 0x43, 0x43, 0x57, WIRE_VERSION, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33,
      0x22, 0x11, 0,    0,    0x10,         0, 0, 0, 0,    0};
  cr_assert_arr_eq(h, golden, sizeof(h));
  struct wire_data d;
  cr_assert_eq(wire_decode_data(h, sizeof(h), &d, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(d.req_id, 0x1122334455667788ull);
  cr_assert_eq(d.offset, 1u << 20);
  cr_assert_eq(wire_decode_data(h, sizeof(h) - 1, &d, why, sizeof(why)), ECC_ERR_INVALID);
  cr_assert_eq(wire_decode_data(NULL, 0, &d, why, sizeof(why)), ECC_ERR_INVALID);
  h[4] ^= 0xff;
  cr_assert_eq(wire_decode_data(h, sizeof(h), &d, why, sizeof(why)), ECC_ERR_INCOMPATIBLE);
  cr_assert(strstr(why, "version") != NULL, "why: %s", why);
  h[4] ^= 0xff;
  h[6] = 1;
  cr_assert_eq(wire_decode_data(h, sizeof(h), &d, why, sizeof(why)), ECC_ERR_INVALID);
  cr_assert(strstr(why, "flags") != NULL, "why: %s", why);
}

/* --- DESCRIBE and DESCRIBED: a pin of another process of the group --- */

Test(wire_describe, describe_and_described_round_trip)
{
  size_t n = wire_encode_describe(buf, sizeof(buf), 3, 0x0102030405060708ull, UINT64_MAX);
  cr_assert_eq(n, wire_max_bytes(WIRE_DESCRIBE));
  struct wire_msg m;
  decode_ok(buf, n, &m);
  expect_header(&m, WIRE_DESCRIBE, n, 3);
  cr_assert_eq(m.u.describe.req_id, 0x0102030405060708ull);
  cr_assert_eq(m.u.describe.token, UINT64_MAX);

  static char longest[ECC_KEY_MAX + 1];
  make_key(longest, 1, ECC_KEY_MAX);
  struct wire_found_entry e = present(WIRE_MAX_RUNS, 123456, 77);
  n = wire_encode_described(buf, sizeof(buf), 4, 9, ECC_OK, &e, longest);
  cr_assert_eq(n, wire_max_bytes(WIRE_DESCRIBED), "the most runs and the longest key");
  decode_ok(buf, n, &m);
  expect_header(&m, WIRE_DESCRIBED, n, 4);
  cr_assert_eq(m.u.described.req_id, 9);
  cr_assert_eq(m.u.described.status, ECC_OK);
  expect_entry_eq(&m.u.described.entry, &e, 0);
  cr_assert_eq(m.u.described.key.len, ECC_KEY_MAX);
  cr_assert_arr_eq(m.u.described.key.key, longest, ECC_KEY_MAX);

  n = wire_encode_described(buf, sizeof(buf), 5, 10, ECC_ERR_CLOSED, NULL, NULL);
  cr_assert_eq(n, WIRE_HEADER_BYTES + 16, "an error carries no entry");
  decode_ok(buf, n, &m);
  cr_assert_eq(m.u.described.status, ECC_ERR_CLOSED);
  cr_assert_eq(m.u.described.entry.found, 0);
  cr_assert_eq(m.u.described.key.len, 0);
}

Test(wire_describe, encoders_refuse_what_the_decoder_would)
{
  struct wire_found_entry none = absent(), e = present(1, 10, 5);
  cr_assert_eq(wire_encode_described(buf, sizeof(buf), 0, 1, ECC_OK, &none, "k"), 0, "absent");
  cr_assert_eq(wire_encode_described(buf, sizeof(buf), 0, 1, ECC_OK, &e, ""), 0, "empty key");
  cr_assert_eq(wire_encode_described(buf, sizeof(buf), 0, 1, ECC_OK, &e, NULL), 0, "no key");
  cr_assert_eq(wire_encode_described(buf, sizeof(buf), 0, 1, 5, NULL, NULL), 0, "status 5");
  cr_assert_eq(wire_encode_described(buf, 30, 0, 1, ECC_OK, &e, "k"), 0, "too small a buffer");
  cr_assert_eq(wire_encode_describe(buf, 20, 0, 1, 1), 0, "too small a buffer");
}

Test(wire_describe, described_bodies_that_break_a_rule)
{
  struct raw *r = raw_begin(WIRE_DESCRIBED);
  put(r, 1, 8);
  put(r, (uint32_t)ECC_ERR_CLOSED, 4);
  put(r, 0, 4);
  put(r, 0, 1);
  expect_raw_refused(r, ECC_ERR_INVALID, "with 1 bytes after it");
  r = raw_begin(WIRE_DESCRIBED);
  put(r, 1, 8);
  put(r, 0, 4);
  put(r, 7, 4);
  expect_raw_refused(r, ECC_ERR_INVALID, "DESCRIBED pad 7");
  r = raw_begin(WIRE_DESCRIBED);
  put(r, 1, 8);
  put(r, 0, 4);
  put(r, 0, 4);
  put_entry(r, 0, 0, 0, 0, 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "the entry is absent");
  r = raw_begin(WIRE_DESCRIBED);
  put(r, 1, 8);
  put(r, 0, 4);
  put(r, 0, 4);
  put_entry(r, 1, 1, 0, 10, 5);
  put_run(r, 0, 1);
  put_key(r, "", 0);
  expect_raw_refused(r, ECC_ERR_INVALID, "DESCRIBED: LOOKUP key 0: length 0");
  r = raw_begin(WIRE_DESCRIBED);
  put(r, 1, 8);
  put(r, 1, 4);
  put(r, 0, 4);
  expect_raw_refused(r, ECC_ERR_INVALID, "DESCRIBED status 1");
  r = raw_begin(WIRE_DESCRIBE);
  put(r, 1, 8);
  expect_raw_refused(r, ECC_ERR_INVALID, "DESCRIBE body: length 8, must be 16");
}
