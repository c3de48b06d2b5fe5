/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key_index.h - the "section.key" strings of one INI file, each mapped to the
 * position of its pair, so that finding a key costs the same for the first
 * key and the 100,000th. Private to libecc-host.so.
 */
#ifndef ECC_KEY_INDEX_H
#define ECC_KEY_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One slot of the open-addressed table; key NULL when empty. */
struct key_slot {
  const char *key;
  uint32_t hash; /* its low bits pick the first slot to look at */
  uint32_t pos;
};

struct key_index {
  struct key_slot *slots;
  size_t cap; /* a power of two, or 0 before the first key */
  size_t used;
  uint64_t k0, k1; /* the key of the hash (SipHash-1-3) */
  size_t probes;   /* slots looked at so far, rehashing included: the cost */
};

/* The most keys an index holds (positions and hashes are 32-bit). */
#define KEY_INDEX_MAX ((size_t)1 << 30)

/* An empty index whose hash is keyed by (k0, k1). */
void key_index_init(struct key_index *ix, uint64_t k0, uint64_t k1);

/* A hash key nobody writing an INI file can predict, so that no file can be
 * made of keys that collide. */
void key_index_random_key(uint64_t *k0, uint64_t *k1);

/* Whether key is in the index; if so *pos is the position it was added with. */
bool key_index_find(struct key_index *ix, const char *key, size_t *pos);

/* Adds key, which must not be in the index yet and must stay valid and
 * unchanged while the index lives, with position pos. False when out of
 * memory or when the index holds KEY_INDEX_MAX keys already. */
bool key_index_add(struct key_index *ix, const char *key, size_t pos);

void key_index_free(struct key_index *ix);

#endif /* ECC_KEY_INDEX_H */
