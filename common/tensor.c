/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor.c - tensor descriptors: names from the ABI's dtype table, the
 * well-formedness rule every caller applies, and their text.
 */
#include "common/tensor.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const char *tensor_dtype_name(uint32_t dtype)
{
  switch (dtype) {
#define DTYPE_NAME(name, value, text, bytes) \
  case value:                                \
    return text;
    ECC_DTYPE_MAP(DTYPE_NAME)
#undef DTYPE_NAME
  default:
    return NULL;
  }
}

size_t tensor_dtype_bytes(uint32_t dtype)
{
  switch (dtype) {
#define DTYPE_BYTES(name, value, text, bytes) \
  case value:                                 \
    return bytes;
    ECC_DTYPE_MAP(DTYPE_BYTES)
#undef DTYPE_BYTES
  default:
    return 0;
  }
}

int tensor_dtype_parse(const char *name)
{
#define DTYPE_PARSE(sym, value, text, bytes) \
  if (strcmp(name, text) == 0)               \
    return value;
  ECC_DTYPE_MAP(DTYPE_PARSE)
#undef DTYPE_PARSE
  return -1;
}

bool tensor_untyped(const ecc_tensor_v1_t *t)
{
  static const ecc_tensor_v1_t none;
  return memcmp(t, &none, sizeof(none)) == 0;
}

static bool dims_product(const ecc_tensor_v1_t *t, uint64_t *bytes, char *why, size_t cap)
{
  uint64_t total = tensor_dtype_bytes(t->dtype);
  for (uint32_t i = 0; i < t->n_dims; i++) {
    if (t->dims[i] == 0) {
      snprintf(why, cap, "dimension %" PRIu32 " is 0", i);
      return false;
    }
    if (total > UINT64_MAX / t->dims[i]) {
      snprintf(why, cap, "its dimensions multiply past 2^64 bytes");
      return false;
    }
    total *= t->dims[i];
  }
  *bytes = total;
  return true;
}

bool tensor_valid(const ecc_tensor_v1_t *t, uint64_t *bytes, char *why, size_t why_cap)
{
  uint64_t total = 0;
  if (tensor_untyped(t)) {
    if (bytes != NULL)
      *bytes = 0;
    return true;
  }
  if (t->dtype == ECC_DTYPE_NONE || tensor_dtype_name(t->dtype) == NULL) {
    snprintf(why, why_cap, "dtype %" PRIu32 " is not one (float32, float16, bfloat16, ...)",
             t->dtype);
    return false;
  }
  if (t->n_dims < 1 || t->n_dims > ECC_TENSOR_MAX_DIMS) {
    snprintf(why, why_cap, "%" PRIu32 " dimensions: a typed entry has 1 to %d", t->n_dims,
             ECC_TENSOR_MAX_DIMS);
    return false;
  }
  for (uint32_t i = t->n_dims; i < ECC_TENSOR_MAX_DIMS; i++)
    if (t->dims[i] != 0) {
      snprintf(why, why_cap, "dimension %" PRIu32 " is set past its %" PRIu32 " dimensions", i,
               t->n_dims);
      return false;
    }
  if (!dims_product(t, &total, why, why_cap))
    return false;
  if (bytes != NULL)
    *bytes = total;
  return true;
}

bool tensor_equal(const ecc_tensor_v1_t *a, const ecc_tensor_v1_t *b)
{
  return memcmp(a, b, sizeof(*a)) == 0;
}

const char *tensor_format(const ecc_tensor_v1_t *t, char *buf, size_t cap)
{
  if (cap == 0)
    return buf;
  if (tensor_untyped(t)) {
    snprintf(buf, cap, "untyped");
    return buf;
  }
  const char *name = tensor_dtype_name(t->dtype);
  int len = snprintf(buf, cap, "%s[", name != NULL ? name : "?");
  uint32_t n = t->n_dims <= ECC_TENSOR_MAX_DIMS ? t->n_dims : ECC_TENSOR_MAX_DIMS;
  for (uint32_t i = 0; i < n && len >= 0 && (size_t)len < cap; i++)
    len += snprintf(buf + len, cap - (size_t)len, i == 0 ? "%" PRIu64 : ", %" PRIu64, t->dims[i]);
  if (len >= 0 && (size_t)len < cap)
    snprintf(buf + len, cap - (size_t)len, "]");
  return buf;
}
