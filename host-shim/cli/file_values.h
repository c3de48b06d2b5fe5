/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_values.h - the values an INI file sets itself, as "section.key"
 * pairs, so that `eccctl info` can show them beside the plugin's defaults.
 */
#ifndef ECC_CLI_FILE_VALUES_H
#define ECC_CLI_FILE_VALUES_H

#include <stddef.h>

struct file_values {
  size_t n;
  char **keys;   /* "section.key", [plugin] excluded (the shim's own) */
  char **values; /* as written, trimmed */
};

/* Reads path; 0, or -1 when it cannot be read (info then shows no values:
 * the shim has already said what is wrong with it). */
int file_values_read(const char *path, struct file_values *out);

/* The value the file sets for key, or NULL. */
const char *file_values_get(const struct file_values *v, const char *key);

void file_values_free(struct file_values *v);

#endif /* ECC_CLI_FILE_VALUES_H */
