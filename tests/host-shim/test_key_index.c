/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_key_index.c - the shim's table of INI keys (host-shim/key_index.c,
 * built into this test): it finds every key it was given and no other, and
 * the slots it looks at grow with the number of keys, not with its square.
 * The cost is counted in slots, not timed, so the checks are exact.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host-shim/key_index.h"

/* A fixed hash key, so that every count below is the same on every run. */
#define K0 0x0123456789abcdefull
#define K1 0xfedcba9876543210ull

/* n keys "section<i/100>.key<i>", in one allocation the caller frees. */
static char **make_keys(size_t n)
{
  char **keys = calloc(n, sizeof(*keys));
  char *text = calloc(n, 48);
  cr_assert(keys != NULL && text != NULL);
  for (size_t i = 0; i < n; i++) {
    keys[i] = text + i * 48;
    snprintf(keys[i], 48, "section%zu.key%zu", i / 100, i);
  }
  return keys;
}

static void free_keys(char **keys)
{
  free(keys[0]);
  free(keys);
}

/* What the INI reader does for each key of a file without duplicates: look
 * it up, then add it. Returns the slots looked at. */
static size_t read_like_a_file(struct key_index *ix, char **keys, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    size_t pos;
    cr_assert_not(key_index_find(ix, keys[i], &pos), "%s found before it was added", keys[i]);
    cr_assert(key_index_add(ix, keys[i], i));
  }
  return ix->probes;
}

Test(key_index, finds_every_key_added_at_its_position_and_no_other)
{
  enum { N = 5000 };
  char **keys = make_keys(N);
  struct key_index ix;
  key_index_init(&ix, K0, K1);
  size_t pos = 77;
  cr_assert_not(key_index_find(&ix, "a.b", &pos), "an empty index holds nothing");
  cr_assert_eq(pos, 77, "pos is left alone when the key is absent");
  read_like_a_file(&ix, keys, N);
  for (size_t i = 0; i < N; i++) {
    cr_assert(key_index_find(&ix, keys[i], &pos), "%s lost", keys[i]);
    cr_assert_eq(pos, i, "%s at %zu, not %zu", keys[i], pos, i);
  }
  cr_assert_eq(ix.used, N);
  const char *absent[] = {"",
                          "section0",
                          "section0.key",
                          "section0.key00",
                          "section49.key5000",
                          "section0.key0 ",
                          "Section0.key0"};
  for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
    cr_assert_not(key_index_find(&ix, absent[i], &pos), "'%s' found", absent[i]);
  key_index_free(&ix);
  free_keys(keys);
}

/* Linear probing at most half full looks at 2.5 slots per failed lookup on
 * average, fewer for a found key; rehashing adds under 2 per key in all.
 * Ten slots per key is a loose bound that a cost growing with the square of
 * the count (100,000 keys: 5e9 comparisons) could never meet. */
Test(key_index, cost_grows_with_the_number_of_keys_not_its_square)
{
  size_t counts[] = {10000, 100000};
  size_t probes[2];
  for (size_t c = 0; c < 2; c++) {
    char **keys = make_keys(counts[c]);
    struct key_index ix;
    key_index_init(&ix, K0, K1);
    probes[c] = read_like_a_file(&ix, keys, counts[c]);
    cr_log_info("%zu keys: %zu slots looked at (%.2f per key)", counts[c], probes[c],
                (double)probes[c] / (double)counts[c]);
    cr_assert_leq(probes[c], 10 * counts[c], "%zu keys: %zu slots looked at", counts[c], probes[c]);
    cr_assert_leq(ix.cap, 4 * counts[c], "table of %zu slots for %zu keys", ix.cap, counts[c]);
    key_index_free(&ix);
    free_keys(keys);
  }
  /* Ten times the keys, about ten times the work (not a hundred). */
  cr_assert_leq(probes[1], 12 * probes[0], "10x the keys cost %.1fx the slots",
                (double)probes[1] / (double)probes[0]);
}

/* Keys alike but for their last bytes, or differing only in length, spread
 * like any others: the hash covers every byte and the length. */
Test(key_index, keys_that_differ_only_at_the_end_spread_too)
{
  enum { N = 20000 };
  char **keys = calloc(N, sizeof(*keys));
  char *text = calloc(N, 80);
  cr_assert(keys != NULL && text != NULL);
  for (size_t i = 0; i < N; i++) {
    keys[i] = text + i * 80;
    memset(keys[i], 'x', 60);
    snprintf(keys[i] + 60, 20, "%zu", i);
  }
  struct key_index ix;
  key_index_init(&ix, K0, K1);
  size_t probes = read_like_a_file(&ix, keys, N);
  cr_assert_leq(probes, 10 * (size_t)N, "%zu slots looked at for %d keys", probes, N);
  key_index_free(&ix);
  free(text);
  free(keys);
}

/* Where a key goes depends on the hash key, so a file cannot be written to
 * collide under every one of them. */
Test(key_index, slots_depend_on_the_hash_key)
{
  enum { N = 64 };
  char **keys = make_keys(N);
  struct key_index a, b;
  key_index_init(&a, K0, K1);
  key_index_init(&b, K0 ^ 1, K1);
  read_like_a_file(&a, keys, N);
  read_like_a_file(&b, keys, N);
  size_t same = 0;
  for (size_t i = 0; i < a.cap; i++)
    same += a.slots[i].key == b.slots[i].key;
  cr_assert_lt(same, a.cap, "both hash keys placed every key alike");
  uint64_t k0 = 0, k1 = 0, k2 = 0, k3 = 0;
  key_index_random_key(&k0, &k1);
  key_index_random_key(&k2, &k3);
  cr_assert(k0 != k2 || k1 != k3, "two random hash keys are equal");
  key_index_free(&a);
  key_index_free(&b);
  free_keys(keys);
}
