/* SPDX-License-Identifier: Apache-2.0 */
/*
 * preface.h - the frames a client and a server of the ucx plugin exchange
 * over a plain TCP connection before any UCX endpoint exists: the protocol
 * version, an optional proof of a shared secret each way, and the two UCX
 * worker addresses the endpoints are then made from. UCX's own connection
 * manager, which aborted the process on malformed bytes, is never exposed.
 *
 *   client                                  server
 *   OPEN {nonce_c, flags}              ->
 *                                      <-   CHALLENGE {nonce_s, flags}
 *   PROOF {mac_c, client address}      ->       (checks mac_c, makes its endpoint)
 *                                      <-   ACCEPT {mac_s, server address}
 *   either side instead of its next frame: REFUSE {code, reason}, then close
 *
 * Every frame: magic u32 ("ECCP"), version u16 (WIRE_VERSION), type u16,
 * length u32 of the body, then the body; integers little-endian. With a
 * secret (flags bit 0 on both sides) mac_c = HMAC-SHA256(key, "ecc-ucx
 * client" || nonce_c || nonce_s || client address) and mac_s the same with
 * "ecc-ucx server" and the server's address, so neither the secret nor a
 * replayable answer crosses, and the addresses cannot be swapped; without
 * one the MACs are zeros and unchecked. This file owns the encoding and
 * the checks; it does no I/O.
 */
#ifndef ECC_UCX_PREFACE_H
#define ECC_UCX_PREFACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugins/ucx/sha256.h"

#define PREFACE_MAGIC 0x50434345u /* "ECCP" read as little-endian bytes */
#define PREFACE_HEADER 12u
#define PREFACE_NONCE 32u
#define PREFACE_MAX_ADDRESS 16384u /* bytes of a UCX worker address */
#define PREFACE_MAX_REASON 255u
#define PREFACE_MAX_BODY (SHA256_BYTES + 4 + PREFACE_MAX_ADDRESS)
#define PREFACE_FLAG_SECRET 1u

enum preface_type {
  PREFACE_OPEN = 1,
  PREFACE_CHALLENGE = 2,
  PREFACE_PROOF = 3,
  PREFACE_ACCEPT = 4,
  PREFACE_REFUSE = 5,
};

/* A frame as read: its type and a view of its body. */
struct preface_frame {
  uint16_t type;
  uint32_t length;
  const uint8_t *body;
};

/* OPEN and CHALLENGE */
struct preface_hello {
  uint8_t nonce[PREFACE_NONCE];
  uint32_t flags;
};

/* PROOF and ACCEPT */
struct preface_proof {
  uint8_t mac[SHA256_BYTES];
  uint32_t addr_len; /* 1..PREFACE_MAX_ADDRESS */
  const uint8_t *addr;
};

struct preface_refuse {
  int32_t code;
  uint32_t reason_len;
  const char *reason; /* not NUL-terminated */
};

/* Checks the 12 header bytes: ECC_OK with *type and *length (the body's
 * bytes still to read); ECC_ERR_TRANSFER when the magic is not ours (not a
 * peer of this plugin); ECC_ERR_INCOMPATIBLE for another version;
 * ECC_ERR_INVALID for a body longer than PREFACE_MAX_BODY. why names the
 * values. */
int preface_header(const uint8_t hdr[PREFACE_HEADER], uint16_t *type, uint32_t *length, char *why,
                   size_t why_cap);

/* Body decoders: ECC_ERR_INVALID (why names the field) unless the body has
 * exactly the bytes its fields say. */
int preface_decode_hello(const struct preface_frame *f, struct preface_hello *out, char *why,
                         size_t why_cap);
int preface_decode_proof(const struct preface_frame *f, struct preface_proof *out, char *why,
                         size_t why_cap);
int preface_decode_refuse(const struct preface_frame *f, struct preface_refuse *out, char *why,
                          size_t why_cap);

/* Encoders: the whole frame into buf, its length, or 0 if it does not fit. */
size_t preface_encode_hello(uint8_t *buf, size_t cap, enum preface_type type,
                            const struct preface_hello *h);
size_t preface_encode_proof(uint8_t *buf, size_t cap, enum preface_type type,
                            const uint8_t mac[SHA256_BYTES], const void *addr, size_t addr_len);
size_t preface_encode_refuse(uint8_t *buf, size_t cap, int32_t code, const char *reason);

/* The MAC a side sends for its address (server: true for the server's);
 * all zeros without a key. */
void preface_mac(const uint8_t *key, bool server, const uint8_t nonce_c[PREFACE_NONCE],
                 const uint8_t nonce_s[PREFACE_NONCE], const void *addr, size_t addr_len,
                 uint8_t out[SHA256_BYTES]);

/* Fills a nonce from the kernel's random source: 0, or -1 (errno). */
int preface_nonce(uint8_t out[PREFACE_NONCE]);

#endif
