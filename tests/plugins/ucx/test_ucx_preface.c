/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_preface.c - the ucx plugin's preface as bytes (plugins/ucx/
 * preface.h) and the hash under its proofs: SHA-256 against FIPS 180-4's
 * examples, HMAC-SHA256 against RFC 4231's, and frames that must be
 * refused by name.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "ecc_common.h"
#include "plugins/ucx/preface.h"
#include "plugins/ucx/sha256.h"
#include "plugins/ucx/wire.h"

TestSuite(ucx_preface);

static void hex_of(const uint8_t *d, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", d[i]);
}

static void expect_sha(const void *data, size_t len, const char *want)
{
  uint8_t d[SHA256_BYTES];
  char got[2 * SHA256_BYTES + 1];
  struct sha256 s;
  sha256_init(&s);
  sha256_update(&s, data, len);
  sha256_final(&s, d);
  hex_of(d, sizeof(d), got);
  cr_expect_str_eq(got, want, "SHA-256 of %zu bytes", len);
  /* The same bytes fed in pieces of 1, 7 and 63 bytes. */
  for (size_t piece = 1; piece < 64; piece += piece == 1 ? 6 : 56) {
    sha256_init(&s);
    for (size_t at = 0; at < len; at += piece)
      sha256_update(&s, (const uint8_t *)data + at, len - at < piece ? len - at : piece);
    sha256_final(&s, d);
    hex_of(d, sizeof(d), got);
    cr_expect_str_eq(got, want, "SHA-256 of %zu bytes in pieces of %zu", len, piece);
  }
}

Test(ucx_preface, sha256_of_the_fips_examples)
{
  expect_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expect_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  static char million[1000000];
  memset(million, 'a', sizeof(million));
  expect_sha(million, sizeof(million),
             "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void expect_hmac(const uint8_t *key, size_t key_len, const char *data, const char *want)
{
  uint8_t d[SHA256_BYTES];
  char got[2 * SHA256_BYTES + 1];
  struct hmac_part part = {data, strlen(data)};
  hmac_sha256(key, key_len, &part, 1, d);
  hex_of(d, sizeof(d), got);
  cr_expect_str_eq(got, want, "HMAC-SHA256 of \"%s\"", data);
  /* In two parts: the same MAC. */
  size_t half = strlen(data) / 2;
  struct hmac_part parts[] = {{data, half}, {data + half, strlen(data) - half}};
  hmac_sha256(key, key_len, parts, 2, d);
  hex_of(d, sizeof(d), got);
  cr_expect_str_eq(got, want, "HMAC-SHA256 of \"%s\" in two parts", data);
}

Test(ucx_preface, hmac_sha256_of_the_rfc_4231_cases)
{
  uint8_t k1[20];
  memset(k1, 0x0b, sizeof(k1));
  expect_hmac(k1, sizeof(k1), "Hi There",
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  expect_hmac((const uint8_t *)"Jefe", 4, "what do ya want for nothing?",
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  uint8_t k6[131];
  memset(k6, 0xaa, sizeof(k6));
  expect_hmac(k6, sizeof(k6), "Test Using Larger Than Block-Size Key - Hash Key First",
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

Test(ucx_preface, a_mac_changes_with_every_input)
{
  uint8_t key[SHA256_BYTES] = {1}, other[SHA256_BYTES] = {2};
  uint8_t nc[PREFACE_NONCE] = {3}, ns[PREFACE_NONCE] = {4};
  uint8_t base[SHA256_BYTES], m[SHA256_BYTES];
  preface_mac(key, false, nc, ns, "addr", 4, base);
  preface_mac(key, true, nc, ns, "addr", 4, m);
  cr_expect(!mac_equal(base, m), "the server's and the client's MACs are the same");
  preface_mac(other, false, nc, ns, "addr", 4, m);
  cr_expect(!mac_equal(base, m), "another key, the same MAC");
  preface_mac(key, false, ns, nc, "addr", 4, m);
  cr_expect(!mac_equal(base, m), "the nonces swapped, the same MAC");
  preface_mac(key, false, nc, ns, "addR", 4, m);
  cr_expect(!mac_equal(base, m), "another address, the same MAC");
  preface_mac(NULL, false, nc, ns, "addr", 4, m);
  uint8_t zeros[SHA256_BYTES] = {0};
  cr_expect(mac_equal(m, zeros), "without a key the MAC is zeros");
}

static int header_of(const uint8_t *hdr, char *why, size_t cap)
{
  uint16_t type;
  uint32_t len;
  return preface_header(hdr, &type, &len, why, cap);
}

Test(ucx_preface, headers_not_ours_of_another_version_or_too_long_are_refused_by_name)
{
  uint8_t buf[PREFACE_HEADER + 64];
  struct preface_hello h = {.flags = PREFACE_FLAG_SECRET};
  size_t n = preface_encode_hello(buf, sizeof(buf), PREFACE_OPEN, &h);
  cr_assert_eq(n, PREFACE_HEADER + PREFACE_NONCE + 4);
  char why[200];
  cr_expect_eq(header_of(buf, why, sizeof(why)), ECC_OK);
  uint8_t bad[PREFACE_HEADER];
  memcpy(bad, buf, sizeof(bad));
  bad[0] = 1;
  cr_expect_eq(header_of(bad, why, sizeof(why)), ECC_ERR_TRANSFER);
  cr_expect(strstr(why, "not a peer of the ucx plugin") != NULL, "%s", why);
  memcpy(bad, buf, sizeof(bad));
  bad[4] = (uint8_t)(WIRE_VERSION + 1);
  cr_expect_eq(header_of(bad, why, sizeof(why)), ECC_ERR_INCOMPATIBLE);
  char want[80];
  snprintf(want, sizeof(want), "wire version %u, this side speaks version %u", WIRE_VERSION + 1,
           WIRE_VERSION);
  cr_expect(strstr(why, want) != NULL, "%s", why);
  memcpy(bad, buf, sizeof(bad));
  bad[10] = 1; /* 64 KiB and more */
  cr_expect_eq(header_of(bad, why, sizeof(why)), ECC_ERR_INVALID);
}

Test(ucx_preface, bodies_decode_only_with_exactly_their_bytes)
{
  static uint8_t buf[PREFACE_HEADER + PREFACE_MAX_BODY + 16];
  uint8_t mac[SHA256_BYTES] = {9};
  size_t n = preface_encode_proof(buf, sizeof(buf), PREFACE_PROOF, mac, "abcdef", 6);
  cr_assert_eq(n, PREFACE_HEADER + SHA256_BYTES + 4 + 6);
  struct preface_frame f = {PREFACE_PROOF, (uint32_t)(n - PREFACE_HEADER), buf + PREFACE_HEADER};
  struct preface_proof p;
  char why[200];
  cr_expect_eq(preface_decode_proof(&f, &p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(p.addr_len, 6);
  cr_expect_eq(memcmp(p.addr, "abcdef", 6), 0);
  f.length--; /* one byte short of what addr_len says */
  cr_expect_eq(preface_decode_proof(&f, &p, why, sizeof(why)), ECC_ERR_INVALID);
  f.length = SHA256_BYTES + 4; /* no address at all */
  buf[PREFACE_HEADER + SHA256_BYTES] = 0;
  cr_expect_eq(preface_decode_proof(&f, &p, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect_eq(preface_encode_proof(buf, sizeof(buf), PREFACE_PROOF, mac, buf, 0), 0u);
  cr_expect_eq(
      preface_encode_proof(buf, sizeof(buf), PREFACE_PROOF, mac, buf, PREFACE_MAX_ADDRESS + 1), 0u);

  struct preface_hello h = {.flags = 0};
  n = preface_encode_hello(buf, sizeof(buf), PREFACE_CHALLENGE, &h);
  f = (struct preface_frame){PREFACE_CHALLENGE, (uint32_t)(n - PREFACE_HEADER),
                             buf + PREFACE_HEADER};
  struct preface_hello got;
  cr_expect_eq(preface_decode_hello(&f, &got, why, sizeof(why)), ECC_OK);
  buf[PREFACE_HEADER + PREFACE_NONCE] = 2; /* a flag nobody defined */
  cr_expect_eq(preface_decode_hello(&f, &got, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect(strstr(why, "unknown flags") != NULL, "%s", why);
  f.length++;
  cr_expect_eq(preface_decode_hello(&f, &got, why, sizeof(why)), ECC_ERR_INVALID);

  n = preface_encode_refuse(buf, sizeof(buf), ECC_ERR_CONFIG, "wrong shared secret");
  f = (struct preface_frame){PREFACE_REFUSE, (uint32_t)(n - PREFACE_HEADER), buf + PREFACE_HEADER};
  struct preface_refuse r;
  cr_expect_eq(preface_decode_refuse(&f, &r, why, sizeof(why)), ECC_OK);
  cr_expect_eq(r.code, ECC_ERR_CONFIG);
  cr_expect_eq(r.reason_len, strlen("wrong shared secret"));
  memset(buf + PREFACE_HEADER, 0, 4); /* code 0 is no error */
  cr_expect_eq(preface_decode_refuse(&f, &r, why, sizeof(why)), ECC_ERR_INVALID);
}
