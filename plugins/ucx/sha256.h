/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the ucx
 * plugin's preface: a peer proves it holds the shared secret without
 * sending it. No library the plugin links provides them.
 */
#ifndef ECC_UCX_SHA256_H
#define ECC_UCX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32u
#define SHA256_BLOCK 64u

struct sha256 {
  uint32_t h[8];
  uint64_t total; /* bytes hashed so far */
  uint8_t buf[SHA256_BLOCK];
  size_t used; /* bytes of buf waiting for a full block */
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t len);
void sha256_final(struct sha256 *s, uint8_t out[SHA256_BYTES]);

/* HMAC-SHA256 over the concatenation of n_parts parts. */
struct hmac_part {
  const void *p;
  size_t len;
};
void hmac_sha256(const uint8_t *key, size_t key_len, const struct hmac_part *parts, size_t n_parts,
                 uint8_t out[SHA256_BYTES]);

/* 1 if the two MACs are equal, in time that does not depend on where they
 * differ. */
int mac_equal(const uint8_t a[SHA256_BYTES], const uint8_t b[SHA256_BYTES]);

#endif
