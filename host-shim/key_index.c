/* SPDX-License-Identifier: Apache-2.0 */
/*
 * key_index.c - the open-addressed table of key_index.h: linear probing, at
 * most half full, over SipHash-1-3 with a key drawn for each INI file.
 */
#include "host-shim/key_index.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define FIRST_CAP 64

/* ---- SipHash-1-3 (Aumasson and Bernstein): a keyed hash, so that the slots
 * of a key depend on a secret as well as on what the file says ---- */

struct sip_state {
  uint64_t v0, v1, v2, v3;
};

static uint64_t rotl(uint64_t x, int bits)
{
  return (x << bits) | (x >> (64 - bits));
}

static void sip_round(struct sip_state *s)
{
  s->v0 += s->v1;
  s->v1 = rotl(s->v1, 13) ^ s->v0;
  s->v0 = rotl(s->v0, 32);
  s->v2 += s->v3;
  s->v3 = rotl(s->v3, 16) ^ s->v2;
  s->v0 += s->v3;
  s->v3 = rotl(s->v3, 21) ^ s->v0;
  s->v2 += s->v1;
  s->v1 = rotl(s->v1, 17) ^ s->v2;
  s->v2 = rotl(s->v2, 32);
}

static uint64_t load_le64(const unsigned char *p)
{
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t siphash13(uint64_t k0, uint64_t k1, const unsigned char *p, size_t len)
{
  struct sip_state s = {k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull,
                        k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull};
  size_t whole = len - len % 8;
  for (size_t i = 0; i < whole; i += 8) {
    uint64_t m = load_le64(p + i);
    s.v3 ^= m;
    sip_round(&s);
    s.v0 ^= m;
  }
  uint64_t last = (uint64_t)len << 56;
  for (size_t i = whole; i < len; i++)
    last |= (uint64_t)p[i] << (8 * (i - whole));
  s.v3 ^= last;
  sip_round(&s);
  s.v0 ^= last;
  s.v2 ^= 0xff;
  for (int i = 0; i < 3; i++)
    sip_round(&s);
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

static uint32_t hash_key(const struct key_index *ix, const char *key)
{
  return (uint32_t)siphash13(ix->k0, ix->k1, (const unsigned char *)key, strlen(key));
}

/* ---- the key of the hash ---- */

/* splitmix64's finaliser: spreads a weak seed over all 64 bits. */
static uint64_t mix64(uint64_t x)
{
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void key_index_random_key(uint64_t *k0, uint64_t *k1)
{
  uint64_t k[2];
  if (getrandom(k, sizeof(k), GRND_NONBLOCK) == (ssize_t)sizeof(k)) {
    *k0 = k[0];
    *k1 = k[1];
    return;
  }
  /* No entropy yet (early boot) or no getrandom: the clock, the process and
   * where the stack was placed are still unknown to whoever wrote the file. */
  struct timespec ts = {0};
  (void)clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t seed = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  *k0 = mix64(seed ^ (uint64_t)(uintptr_t)&ts);
  *k1 = mix64(*k0 ^ (uint64_t)getpid());
}

/* ---- the table ---- */

void key_index_init(struct key_index *ix, uint64_t k0, uint64_t k1)
{
  *ix = (struct key_index){.k0 = k0, .k1 = k1};
}

/* The slot holding key, or the empty slot where it would go. */
static struct key_slot *probe(struct key_index *ix, const char *key, uint32_t hash)
{
  size_t mask = ix->cap - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    struct key_slot *s = &ix->slots[i];
    ix->probes++;
    if (s->key == NULL || (s->hash == hash && strcmp(s->key, key) == 0))
      return s;
  }
}

/* Doubles the table; the hashes are kept, so no key is hashed again. */
static bool grow(struct key_index *ix)
{
  size_t cap = ix->cap != 0 ? ix->cap * 2 : FIRST_CAP;
  struct key_slot *slots = calloc(cap, sizeof(*slots));
  if (slots == NULL)
    return false;
  struct key_index bigger = *ix;
  bigger.slots = slots;
  bigger.cap = cap;
  for (size_t i = 0; i < ix->cap; i++) {
    const struct key_slot *old = &ix->slots[i];
    if (old->key != NULL)
      *probe(&bigger, old->key, old->hash) = *old;
  }
  free(ix->slots);
  *ix = bigger;
  return true;
}

bool key_index_find(struct key_index *ix, const char *key, size_t *pos)
{
  if (ix->used == 0)
    return false;
  const struct key_slot *s = probe(ix, key, hash_key(ix, key));
  if (s->key == NULL)
    return false;
  *pos = s->pos;
  return true;
}

bool key_index_add(struct key_index *ix, const char *key, size_t pos)
{
  if (ix->used >= KEY_INDEX_MAX || pos > UINT32_MAX)
    return false;
  /* At most half full: a lookup then looks at 2.5 slots on average. */
  if ((ix->used + 1) * 2 > ix->cap && !grow(ix))
    return false;
  uint32_t hash = hash_key(ix, key);
  *probe(ix, key, hash) = (struct key_slot){.key = key, .hash = hash, .pos = (uint32_t)pos};
  ix->used++;
  return true;
}

void key_index_free(struct key_index *ix)
{
  free(ix->slots);
  *ix = (struct key_index){0};
}
