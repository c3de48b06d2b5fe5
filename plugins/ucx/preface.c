/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preface.c - the preface's frames as bytes (preface.h): header checks,
 * body decoders that trust no length they are given, encoders, the MACs
 * and the nonces.
 */
#include "plugins/ucx/preface.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/errtext.h"
#include "ecc_common.h"
#include "plugins/ucx/wire.h"

#define HELLO_BODY (PREFACE_NONCE + 4u)

static uint32_t ld32(const uint8_t *p)
{
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint8_t *st32(uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
  return p + 4;
}

static uint8_t *st_header(uint8_t *p, enum preface_type type, uint32_t length)
{
  p = st32(p, PREFACE_MAGIC);
  p[0] = (uint8_t)WIRE_VERSION;
  p[1] = (uint8_t)(WIRE_VERSION >> 8);
  p[2] = (uint8_t)type;
  p[3] = 0;
  return st32(p + 4, length);
}

int preface_header(const uint8_t hdr[PREFACE_HEADER], uint16_t *type, uint32_t *length, char *why,
                   size_t why_cap)
{
  uint32_t magic = ld32(hdr);
  uint16_t version = (uint16_t)(hdr[4] | hdr[5] << 8);
  *type = (uint16_t)(hdr[6] | hdr[7] << 8);
  *length = ld32(hdr + 8);
  if (magic != PREFACE_MAGIC)
    return errtext_fail(why, why_cap, ECC_ERR_TRANSFER,
                        "not a peer of the ucx plugin (its first bytes are %02x %02x %02x %02x, "
                        "not \"ECCP\")",
                        hdr[0], hdr[1], hdr[2], hdr[3]);
  if (version != WIRE_VERSION)
    return errtext_fail(why, why_cap, ECC_ERR_INCOMPATIBLE,
                        "wire version %u, this side speaks version %u: run the same release "
                        "of the plugin on both hosts",
                        version, WIRE_VERSION);
  if (*length > PREFACE_MAX_BODY)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "a frame of %u bytes (at most %u)", *length,
                        PREFACE_MAX_BODY);
  return ECC_OK;
}

int preface_decode_hello(const struct preface_frame *f, struct preface_hello *out, char *why,
                         size_t why_cap)
{
  if (f->length != HELLO_BODY)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "an opening frame of %u bytes, not %u",
                        f->length, HELLO_BODY);
  memcpy(out->nonce, f->body, PREFACE_NONCE);
  out->flags = ld32(f->body + PREFACE_NONCE);
  if (out->flags & ~PREFACE_FLAG_SECRET)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "unknown flags 0x%x", out->flags);
  return ECC_OK;
}

int preface_decode_proof(const struct preface_frame *f, struct preface_proof *out, char *why,
                         size_t why_cap)
{
  if (f->length < SHA256_BYTES + 4)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "a proof of %u bytes", f->length);
  memcpy(out->mac, f->body, SHA256_BYTES);
  out->addr_len = ld32(f->body + SHA256_BYTES);
  out->addr = f->body + SHA256_BYTES + 4;
  if (out->addr_len == 0 || out->addr_len > PREFACE_MAX_ADDRESS ||
      out->addr_len != f->length - SHA256_BYTES - 4)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID,
                        "a worker address of %u bytes in a proof of %u (1..%u)", out->addr_len,
                        f->length, PREFACE_MAX_ADDRESS);
  return ECC_OK;
}

int preface_decode_refuse(const struct preface_frame *f, struct preface_refuse *out, char *why,
                          size_t why_cap)
{
  if (f->length < 4 || f->length - 4 > PREFACE_MAX_REASON)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "a refusal of %u bytes", f->length);
  out->code = (int32_t)ld32(f->body);
  out->reason_len = f->length - 4;
  out->reason = (const char *)f->body + 4;
  if (out->code >= 0 || out->code < ECC_ERR_UNSUPPORTED)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "a refusal with code %d", out->code);
  if (memchr(out->reason, '\0', out->reason_len) != NULL)
    return errtext_fail(why, why_cap, ECC_ERR_INVALID, "a refusal whose reason holds a NUL");
  return ECC_OK;
}

size_t preface_encode_hello(uint8_t *buf, size_t cap, enum preface_type type,
                            const struct preface_hello *h)
{
  if (cap < PREFACE_HEADER + HELLO_BODY)
    return 0;
  uint8_t *p = st_header(buf, type, HELLO_BODY);
  memcpy(p, h->nonce, PREFACE_NONCE);
  st32(p + PREFACE_NONCE, h->flags);
  return PREFACE_HEADER + HELLO_BODY;
}

size_t preface_encode_proof(uint8_t *buf, size_t cap, enum preface_type type,
                            const uint8_t mac[SHA256_BYTES], const void *addr, size_t addr_len)
{
  size_t body = SHA256_BYTES + 4 + addr_len;
  if (addr_len == 0 || addr_len > PREFACE_MAX_ADDRESS || cap < PREFACE_HEADER + body)
    return 0;
  uint8_t *p = st_header(buf, type, (uint32_t)body);
  memcpy(p, mac, SHA256_BYTES);
  p = st32(p + SHA256_BYTES, (uint32_t)addr_len);
  memcpy(p, addr, addr_len);
  return PREFACE_HEADER + body;
}

size_t preface_encode_refuse(uint8_t *buf, size_t cap, int32_t code, const char *reason)
{
  size_t len = strnlen(reason, PREFACE_MAX_REASON);
  if (cap < PREFACE_HEADER + 4 + len)
    return 0;
  uint8_t *p = st_header(buf, PREFACE_REFUSE, (uint32_t)(4 + len));
  p = st32(p, (uint32_t)code);
  memcpy(p, reason, len);
  return PREFACE_HEADER + 4 + len;
}

void preface_mac(const uint8_t *key, bool server, const uint8_t nonce_c[PREFACE_NONCE],
                 const uint8_t nonce_s[PREFACE_NONCE], const void *addr, size_t addr_len,
                 uint8_t out[SHA256_BYTES])
{
  if (key == NULL) {
    memset(out, 0, SHA256_BYTES);
    return;
  }
  const char *label = server ? "ecc-ucx server" : "ecc-ucx client";
  struct hmac_part parts[] = {
      {label, strlen(label)}, {nonce_c, PREFACE_NONCE}, {nonce_s, PREFACE_NONCE}, {addr, addr_len}};
  hmac_sha256(key, SHA256_BYTES, parts, 4, out);
}

int preface_nonce(uint8_t out[PREFACE_NONCE])
{
  size_t got = 0;
  while (got < PREFACE_NONCE) {
    ssize_t n = getrandom(out + got, PREFACE_NONCE - got, 0);
    if (n < 0 && errno != EINTR)
      return -1;
    if (n > 0)
      got += (size_t)n;
  }
  return 0;
}
