/* SPDX-License-Identifier: Apache-2.0 */
/*
 * file_values.c - what an INI file sets, read with inih as the library reads
 * it, for `eccctl info` (file_values.h).
 */
#include "host-shim/cli/file_values.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_pair(void *user, const char *section, const char *name, const char *value)
{
  struct file_values *v = user;
  if (strcmp(section, "plugin") == 0)
    return 1;
  size_t len = strlen(section) + 1 + strlen(name) + 1;
  char *key = malloc(len);
  char *val = strdup(value);
  char **keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
  if (keys != NULL)
    v->keys = keys;
  char **values = keys != NULL ? realloc(v->values, (v->n + 1) * sizeof(*values)) : NULL;
  if (values != NULL)
    v->values = values;
  if (key == NULL || val == NULL || keys == NULL || values == NULL) {
    free(key);
    free(val);
    return 0;
  }
  snprintf(key, len, "%s.%s", section, name);
  v->keys[v->n] = key;
  v->values[v->n] = val;
  v->n++;
  return 1;
}

int file_values_read(const char *path, struct file_values *out)
{
  *out = (struct file_values){0};
  if (ini_parse(path, add_pair, out) == 0)
    return 0;
  file_values_free(out);
  return -1;
}

const char *file_values_get(const struct file_values *v, const char *key)
{
  const char *found = NULL;
  for (size_t i = 0; i < v->n; i++)
    if (strcmp(v->keys[i], key) == 0)
      found = v->values[i]; /* the last one, should a file repeat a key */
  return found;
}

void file_values_free(struct file_values *v)
{
  for (size_t i = 0; i < v->n; i++) {
    free(v->keys[i]);
    free(v->values[i]);
  }
  free(v->keys);
  free(v->values);
  *v = (struct file_values){0};
}
