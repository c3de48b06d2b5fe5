/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keys.c - checks the INI's keys against the plugin's published params
 * and, for an unknown one, finds the published key it is a typo of (edit
 * distance of two or less).
 */
#include "host-shim/keys.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "host-shim/shim_err.h"
#include "host-shim/where.h"

/* ---- keys against the plugin's published params ---- */

static bool plugin_accepts(const struct plugin_ops *ops, const char *key)
{
  for (size_t i = 0; i < ops->n_params; i++) {
    if (strcmp(ops->params[i].key, key) == 0)
      return true;
  }
  return false;
}

/* Edit distance, or a large number for strings too long to bother with. */
static size_t edit_distance(const char *a, const char *b)
{
  enum { LIMIT = 64 };
  size_t la = strlen(a), lb = strlen(b);
  if (la > LIMIT || lb > LIMIT)
    return (size_t)-1;
  size_t prev[LIMIT + 1], cur[LIMIT + 1];
  for (size_t j = 0; j <= lb; j++)
    prev[j] = j;
  for (size_t i = 1; i <= la; i++) {
    cur[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, (lb + 1) * sizeof(size_t));
  }
  return prev[lb];
}

/* A typo of a published key, if one is close enough to be worth saying. */
static const char *closest_param(const struct plugin_ops *ops, const char *key)
{
  const char *best = NULL;
  size_t best_d = 3; /* more than two edits away is not a typo */
  for (size_t i = 0; i < ops->n_params; i++) {
    size_t d = edit_distance(key, ops->params[i].key);
    if (d < best_d) {
      best_d = d;
      best = ops->params[i].key;
    }
  }
  return best;
}

static void list_params(const struct plugin_ops *ops, char *buf, size_t cap)
{
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < ops->n_params; i++) {
    int n = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ops->params[i].key);
    if (n < 0 || (size_t)n >= cap - used)
      break; /* truncated: the message still names the bad key first */
    used += (size_t)n;
  }
}

/* Refuses, before create runs, a key the plugin does not publish, naming the
 * line it was written on. A plugin that publishes nothing is left to judge
 * its keys in create. */
int keys_check(const struct ini_config *ini, const struct plugin_ops *ops, char *err,
               size_t err_cap)
{
  if (ops->n_params == 0)
    return ECC_OK;
  for (size_t i = 0; i < ini->n_pairs; i++) {
    const struct ini_pair *p = &ini->pairs[i];
    if (plugin_accepts(ops, p->key))
      continue;
    char where[WHERE_MAX], accepted[1024], hint[160] = "";
    ini_config_where(ini, p->line, where, sizeof(where));
    list_params(ops, accepted, sizeof(accepted));
    const char *near = closest_param(ops, p->key);
    if (near != NULL)
      snprintf(hint, sizeof(hint), "; did you mean '%s'?", near);
    shim_errf(err, err_cap, "%s: unknown key '%s' (the plugin '%s' accepts: %s)%s", where, p->key,
              ops->name, accepted, hint);
    return ECC_ERR_CONFIG;
  }
  return ECC_OK;
}
