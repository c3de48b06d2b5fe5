/* SPDX-License-Identifier: Apache-2.0 */
/*
 * where.c - attributes errors to lines of the INI file: a [plugin]
 * setting by its role, a plugin's message by the key it names as a whole
 * word (the longest such key wins).
 */
#include "host-shim/where.h"

#include <stdbool.h>
#include <string.h>

#include "common/names.h"

/* Where an INI setting came from, for an error about it; "" if unknown. */
void where_setting(const struct ini_config *ini, const struct ini_setting *s, char *buf, size_t cap)
{
  if (s == NULL || s->value == NULL) {
    buf[0] = '\0';
    return;
  }
  ini_config_where(ini, s->line, buf, cap);
  size_t len = strlen(buf);
  if (len + 2 < cap)
    memcpy(buf + len, ": ", 3);
}

/* ---- the steps ecc_open and ecc_check share ---- */

static const struct ini_setting *culprit_setting(const struct ini_config *ini,
                                                 enum plugin_input culprit)
{
  switch (culprit) {
  case PLUGIN_INPUT_NAME:
    return &ini->name;
  case PLUGIN_INPUT_PATH:
    return &ini->path;
  case PLUGIN_INPUT_FOLDER:
    return &ini->folder;
  default:
    return NULL;
  }
}

void where_culprit(const struct ini_config *ini, enum plugin_input culprit, char *buf, size_t cap)
{
  where_setting(ini, culprit_setting(ini, culprit), buf, cap);
}

/* "<file>:<line>: " of the [plugin] name or path line, for errors about
 * the plugin file itself. */
void where_plugin_line(const struct ini_config *ini, char *where, size_t cap)
{
  where_setting(ini, ini->path.value != NULL ? &ini->path : &ini->name, where, cap);
}

/* Whether `key` appears in text as a whole word ("region.size." at the end
 * of a sentence counts; "region.size_x" does not). */
static bool names_key(const char *text, const char *key)
{
  size_t len = strlen(key);
  for (const char *hit = strstr(text, key); hit != NULL; hit = strstr(hit + 1, key)) {
    bool starts = hit == text || (!ecc_name_char((unsigned char)hit[-1]) && hit[-1] != '.');
    const char *end = hit + len;
    bool ends = !ecc_name_char((unsigned char)end[0]) &&
                !(end[0] == '.' && ecc_name_char((unsigned char)end[1]));
    if (starts && ends)
      return true;
  }
  return false;
}

/* The pair a plugin's error text is about, so the shim can add its line:
 * the plugin names keys but has never seen the file. */
static const struct ini_pair *pair_named_in(const struct ini_config *ini, const char *text)
{
  const struct ini_pair *best = NULL;
  for (size_t i = 0; i < ini->n_pairs; i++) {
    const struct ini_pair *p = &ini->pairs[i];
    if (names_key(text, p->key) && (best == NULL || strlen(p->key) > strlen(best->key)))
      best = p;
  }
  return best;
}

/* "<file>:<line>: " of the pair a plugin's error text names, else "". */
void where_plugin_text(const struct ini_config *ini, const char *why, char *buf, size_t cap)
{
  buf[0] = '\0';
  const struct ini_pair *p = why[0] != '\0' ? pair_named_in(ini, why) : NULL;
  if (p != NULL)
    where_setting(ini, &(struct ini_setting){.value = p->value, .line = p->line}, buf, cap);
}
