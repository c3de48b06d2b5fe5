/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status.c - ecc_strerror and the names of log levels, both derived from
 * the closed sets of ecc_common.h, as constant strings that live as long as
 * the library.
 */
#include <stddef.h>
#include <string.h>

#include "ecc_host.h"
#include "host-shim/shim_connector.h"
#include "host-shim/shim_names.h"

static const struct {
  int code;
  const char *text;
} status[] = {
#define STATUS_TEXT(name, value, text) {name, #name ": " text},
    ECC_STATUS_MAP(STATUS_TEXT)
#undef STATUS_TEXT
};

ECC_API const char *ecc_strerror(int code)
{
  for (size_t i = 0; i < sizeof(status) / sizeof(status[0]); i++) {
    if (status[i].code == code)
      return status[i].text;
  }
  return "unknown status code: not one of ECC_OK and the ECC_ERR_* codes";
}

int shim_status_known(int code)
{
  return code <= ECC_OK && code >= ECC_STATUS_MIN;
}

static const char *const levels[] = {
#define LEVEL_NAME(name, value, text) [value] = text,
    ECC_LOG_LEVEL_MAP(LEVEL_NAME)
#undef LEVEL_NAME
};

const char *shim_level_name(int level)
{
  if (level < 0 || (size_t)level >= sizeof(levels) / sizeof(levels[0]))
    return NULL;
  return levels[level];
}

/* " | error | warn | ...": the first separator is skipped. */
static const char level_list[] = ""
#define LEVEL_ITEM(name, value, text) " | " text
    ECC_LOG_LEVEL_MAP(LEVEL_ITEM)
#undef LEVEL_ITEM
    ;

const char *shim_level_names(void)
{
  return level_list + 3;
}

int shim_level_from_name(const char *text)
{
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
    if (strcmp(text, levels[i]) == 0)
      return (int)i;
  }
  return -1;
}
