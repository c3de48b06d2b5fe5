/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tensor.h - the one reading of a tensor descriptor (ecc_tensor_v1_t): its
 * dtype's name and element bytes, whether it is well formed, how many
 * bytes it describes, and how it is written in messages ("float16[880,
 * 3584]"). Pure: nothing here logs or allocates.
 */
#ifndef ECC_TENSOR_H
#define ECC_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ecc_plugin_v1.h"

/* The dtype's name ("none" for ECC_DTYPE_NONE), NULL for no dtype. */
const char *tensor_dtype_name(uint32_t dtype);

/* Bytes per element, 0 for ECC_DTYPE_NONE and for no dtype. */
size_t tensor_dtype_bytes(uint32_t dtype);

/* The dtype whose name is `name` (as tensor_dtype_name spells it), or -1. */
int tensor_dtype_parse(const char *name);

/* True for the untyped descriptor (every field 0). */
bool tensor_untyped(const ecc_tensor_v1_t *t);

/* Whether t is untyped or a well-formed typed descriptor (see
 * ecc_tensor_v1_t): false with the reason in why otherwise. A typed one's
 * bytes go to *bytes (0 for untyped); a product past 2^64 is not well
 * formed. bytes may be NULL. */
bool tensor_valid(const ecc_tensor_v1_t *t, uint64_t *bytes, char *why, size_t why_cap);

/* Whether two descriptors are the same type. */
bool tensor_equal(const ecc_tensor_v1_t *a, const ecc_tensor_v1_t *b);

/* Writes t as "float16[880, 3584]" ("untyped" for the untyped one) into buf
 * and returns buf. */
const char *tensor_format(const ecc_tensor_v1_t *t, char *buf, size_t cap);

/* Room tensor_format needs for any descriptor. */
#define TENSOR_TEXT_MAX 128

#endif /* ECC_TENSOR_H */
