/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_input.h - how the model-based targets read their input: bytes
 * taken from the front, little-endian, an exhausted input reading as zeros.
 */
#ifndef ECC_FUZZ_INPUT_H
#define ECC_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct input {
  const uint8_t *p;
  size_t n;
};

static inline uint8_t u8(struct input *in)
{
  if (in->n == 0)
    return 0;
  in->n--;
  return *in->p++;
}

static inline uint32_t u16(struct input *in)
{
  return (uint32_t)u8(in) | (uint32_t)u8(in) << 8;
}

static inline uint32_t u32(struct input *in)
{
  return u16(in) | u16(in) << 16;
}

#endif /* ECC_FUZZ_INPUT_H */
