/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tokens.h - the 64-bit tokens the directory calls hand out: which
 * directory slot and generation one names, and whether it is a pin or a
 * reservation. Pure arithmetic; the calls that check them are the callers'.
 */
#ifndef ECC_CORE_TOKENS_H
#define ECC_CORE_TOKENS_H

#include <stdint.h>

#include "core/directory/directory.h"

/* A token is the ref's generation above its slot + 1, so that it is never
 * 0 and a stale one never names the next entry of its slot; bit 31 of the
 * low half tells a pin's from a reservation's, so that neither is taken for
 * the other (slots stay below 2^24, generations keep all 32 bits). */
enum token_kind { TOKEN_RESERVATION, TOKEN_PIN };

#define TOKEN_PIN_BIT 0x80000000u

/* What token_read found in a token. */
enum token_verdict { TOKEN_NAMES, TOKEN_NOTHING, TOKEN_OTHER_KIND };

static inline uint64_t token_of(enum token_kind kind, uint32_t slot, uint32_t gen)
{
  uint32_t low = (slot + 1) | (kind == TOKEN_PIN ? TOKEN_PIN_BIT : 0u);
  return (uint64_t)gen << 32 | low;
}

/* The ref `token` names (*ref filled whatever the verdict), and whether it
 * is a token of `kind`. */
static inline enum token_verdict token_read(uint64_t token, enum token_kind kind,
                                            struct dir_ref *ref)
{
  uint32_t low = (uint32_t)token;
  uint32_t slot1 = low & ~TOKEN_PIN_BIT;
  ref->slot = slot1 - 1;
  ref->gen = (uint32_t)(token >> 32);
  if (slot1 == 0)
    return TOKEN_NOTHING;
  return ((low & TOKEN_PIN_BIT) != 0) == (kind == TOKEN_PIN) ? TOKEN_NAMES : TOKEN_OTHER_KIND;
}

/* How messages name a kind: "a reservation (from reserve)", "a pin (from lookup)". */
static inline const char *token_kind_text(enum token_kind kind)
{
  return kind == TOKEN_PIN ? "a pin (from lookup)" : "a reservation (from reserve)";
}

static inline struct dir_pin_ref token_pin_ref(struct dir_ref r)
{
  return (struct dir_pin_ref){r.slot, r.gen};
}

#endif /* ECC_CORE_TOKENS_H */
