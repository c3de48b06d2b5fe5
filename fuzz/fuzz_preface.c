/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_preface.c - libFuzzer target: bytes as one frame of the ucx plugin's
 * preface (plugins/ucx/preface.c, compiled in with wire.c and sha256.c),
 * read as the plugin reads one: the 12-byte header checked, then the body
 * given to the decoder of the header's type (and, so that mutations reach
 * every decoder, to the other two as well).
 *
 * A frame that decodes must keep preface.h's rules (sizes in range, views
 * inside the body), and the matching encoder, given the decoded fields,
 * must write the input again byte for byte; a refused one must say why. A
 * broken rule aborts with its name on stderr.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_common.h"
#include "plugins/ucx/preface.h"

__attribute__((format(printf, 1, 2), noreturn)) static void broken(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_preface: ");
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

static bool inside(const void *p, size_t n, const struct preface_frame *f)
{
  const uint8_t *b = p;
  return b >= f->body && n <= f->length && b - f->body <= (ptrdiff_t)(f->length - n);
}

/* The encoder's frame must be the header and body read. */
static void same_frame(const char *what, const uint8_t *enc, size_t n, const uint8_t *data,
                       size_t size)
{
  REQUIRE(n == size, "%s: decoded from %zu bytes, encoded to %zu", what, size, n);
  REQUIRE(memcmp(enc, data, size) == 0, "%s: encoded differently from its input", what);
}

static void hello(const struct preface_frame *f, const uint8_t *data, size_t size, bool whole)
{
  struct preface_hello h;
  char why[160] = "";
  if (preface_decode_hello(f, &h, why, sizeof(why)) != ECC_OK) {
    REQUIRE(why[0] != '\0', "hello: refused without a reason");
    return;
  }
  REQUIRE(f->length == PREFACE_NONCE + 4, "hello: a body of %u bytes decoded", f->length);
  if (!whole || (f->type != PREFACE_OPEN && f->type != PREFACE_CHALLENGE))
    return;
  static uint8_t enc[PREFACE_HEADER + PREFACE_MAX_BODY];
  size_t n = preface_encode_hello(enc, sizeof(enc), f->type, &h);
  same_frame("hello", enc, n, data, size);
}

static void proof(const struct preface_frame *f, const uint8_t *data, size_t size, bool whole)
{
  struct preface_proof p;
  char why[160] = "";
  if (preface_decode_proof(f, &p, why, sizeof(why)) != ECC_OK) {
    REQUIRE(why[0] != '\0', "proof: refused without a reason");
    return;
  }
  REQUIRE(p.addr_len >= 1 && p.addr_len <= PREFACE_MAX_ADDRESS, "proof: address of %u bytes",
          p.addr_len);
  REQUIRE(inside(p.addr, p.addr_len, f), "proof: the address is not a view into the body");
  if (!whole || (f->type != PREFACE_PROOF && f->type != PREFACE_ACCEPT))
    return;
  static uint8_t enc[PREFACE_HEADER + PREFACE_MAX_BODY];
  size_t n = preface_encode_proof(enc, sizeof(enc), f->type, p.mac, p.addr, p.addr_len);
  same_frame("proof", enc, n, data, size);
}

static void refuse(const struct preface_frame *f, const uint8_t *data, size_t size, bool whole)
{
  struct preface_refuse r;
  char why[160] = "";
  if (preface_decode_refuse(f, &r, why, sizeof(why)) != ECC_OK) {
    REQUIRE(why[0] != '\0', "refuse: refused without a reason");
    return;
  }
  REQUIRE(r.reason_len <= PREFACE_MAX_REASON, "refuse: a reason of %u bytes", r.reason_len);
  REQUIRE(inside(r.reason, r.reason_len, f), "refuse: the reason is not a view into the body");
  /* The encoder takes a C string: a reason with a NUL inside cannot be
   * written again as it was read. */
  if (!whole || f->type != PREFACE_REFUSE || memchr(r.reason, 0, r.reason_len) != NULL)
    return;
  char text[PREFACE_MAX_REASON + 1];
  memcpy(text, r.reason, r.reason_len);
  text[r.reason_len] = '\0';
  static uint8_t enc[PREFACE_HEADER + PREFACE_MAX_BODY];
  size_t n = preface_encode_refuse(enc, sizeof(enc), r.code, text);
  same_frame("refuse", enc, n, data, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < PREFACE_HEADER)
    return 0;
  uint16_t type = 0;
  uint32_t length = 0;
  char why[160] = "";
  int rc = preface_header(data, &type, &length, why, sizeof(why));
  if (rc != ECC_OK) {
    REQUIRE(why[0] != '\0', "header: refused (%d) without a reason", rc);
    return 0;
  }
  REQUIRE(length <= PREFACE_MAX_BODY, "header: a body of %u bytes accepted", length);
  /* The plugin reads exactly `length` body bytes after the header; what
   * the input has beyond them belongs to no frame. */
  if (size - PREFACE_HEADER < length)
    return 0;
  bool whole = size - PREFACE_HEADER == length;
  struct preface_frame f = {type, length, data + PREFACE_HEADER};
  hello(&f, data, size, whole);
  proof(&f, data, size, whole);
  refuse(&f, data, size, whole);
  return 0;
}
