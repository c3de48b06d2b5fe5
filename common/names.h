/* SPDX-License-Identifier: Apache-2.0 */
/*
 * names.h - the one rule for the short names the project reads from its
 * users: region names, plugin short names, and the words of INI sections
 * and keys. Letters, digits, '_' and '-' only, so that a name can never
 * leave a directory or pick another file, and at most ECC_NAME_MAX of them.
 */
#ifndef ECC_NAMES_H
#define ECC_NAMES_H

#include <string.h>

#include "ecc_common.h"

/* Longest name, in characters (a buffer needs one more). */
#define ECC_NAME_MAX 63

static inline int ecc_name_char(int ch)
{
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '_' || ch == '-';
}

/* The length of the run of name characters at the start of s. */
static inline size_t ecc_name_span(const char *s)
{
  size_t n = 0;
  while (ecc_name_char((unsigned char)s[n]))
    n++;
  return n;
}

/* 1 when s is 1 to ECC_NAME_MAX name characters and nothing else. */
static inline int ecc_name_ok(const char *s)
{
  size_t n = ecc_name_span(s);
  return n > 0 && n <= ECC_NAME_MAX && s[n] == '\0';
}

/* "save" or "load" for an ECC_DIR_* value (ecc_common.h), "?" otherwise. */
static inline const char *ecc_direction_name(int direction)
{
  switch (direction) {
#define DIRECTION_CASE(name, value, text) \
  case name:                              \
    return text;
    ECC_DIR_MAP(DIRECTION_CASE)
#undef DIRECTION_CASE
  default:
    return "?";
  }
}

#endif /* ECC_NAMES_H */
