/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - the keys the plugin publishes (with defaults and help) and the
 * translation of the host's key/value pairs into a checked plugin_config.
 * Nothing here touches the system: validate() and create() share it.
 */
#include "core/config/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errtext.h"
#include "core/region/region.h"
#include "core/region/region_folder.h"

const ecc_param_v1_t config_params[CONFIG_N_PARAMS] = {
    {"connector.role", "both", "producer | consumer | both: which directions this process moves"},
    {"connector.tp_rank", "0",
     "tensor-parallel rank; saves happen only where tp_rank and pcp_rank are 0"},
    {"connector.pcp_rank", "0", "prefill-context-parallel rank (see tp_rank)"},
    {"connector.max_inflight", "64",
     "batched transfers in flight per direction before flush/load return BUSY (1..65536)"},
    {"region.name", "default",
     "region name, [A-Za-z0-9_-]{1,63}; the file is <dir>/ecc-<name>.region"},
    {"region.dir", "",
     "absolute directory of the region file, on a tmpfs; empty: /dev/shm/ecc-<uid>, made 0700 for "
     "this user on demand"},
    {"region.size", "1GiB",
     "bytes of block data: number with B, K/KiB, M/MiB, G/GiB, T/TiB (x1024) or KB, MB, GB, TB "
     "(x1000)"},
    {"region.block_size", "", "bytes per block (one token's row); or give hidden_size and dtype"},
    {"region.hidden_size", "", "values per row; block_size = hidden_size x size of dtype"},
    {"region.dtype", "", "float32 | float16 | bfloat16 | float8 | int8 (with hidden_size)"},
    {"region.mode", "auto", "auto (create if absent, else join) | create | join"},
    {"region.join_timeout_ms", "30000",
     "how long a joiner waits for the region's creator (0..3600000)"},
    {"region.reap_orphans", "true",
     "a boolean (true/false, on/off, yes/no): unlink region files no live process holds before "
     "opening"},
    {"region.require_tmpfs", "true",
     "a boolean: refuse a region.dir that is not a tmpfs (on a disk a region outlives reboots)"},
    {"region.persist", "false",
     "a boolean: keep the region and its ready entries after its last process exits, for the "
     "next one to reuse (eccctl rm deletes it); needs directory.enabled"},
    {"pinning.enabled", "auto",
     "auto (try, warn on failure) | on (failure is an error) | off (or any boolean word): "
     "register the region with the GPU driver"},
    {"engine.type", "auto", "auto (cuda if a GPU is usable, else host) | cuda | host"},
    {"engine.method", "auto",
     "cuda copy method: auto | dma (batched copy engine) | kernel (gather/scatter on SMs)"},
    {"engine.device", "-1",
     "CUDA device ordinal; -1 uses the device current when create is called"},
    {"engine.max_sms", "16", "SMs the kernel method may occupy (1..1024)"},
    {"engine.host_threads", "0", "copy threads of the host engine; 0 picks min(online CPUs, 8)"},
    {"directory.enabled", "false",
     "a boolean: the region carries the cache's directory (reserve, lookup, eviction); every "
     "process of the region must agree"},
    {"directory.max_entries", "0",
     "entry slots of the directory; 0: num_blocks / 16, at least 64 (same in every process)"},
    {"directory.max_pins", "0", "pin slots; 0: max_entries (same in every process)"},
    {"directory.reserve_timeout_ms", "0",
     "a reservation unsaved for this long may be reclaimed although its process lives; 0: only "
     "when its process is gone"},
    {"directory.pin_timeout_ms", "0",
     "a pin unreleased for this long may be reclaimed although its process lives; 0: only when "
     "its process is gone"},
    {"directory.lock_timeout_ms", "5000",
     "how long a directory call waits for the lock another process holds (one stopped by SIGSTOP "
     "or a debugger) before it fails with ECC_ERR_BUSY naming that pid (1..3600000; each process "
     "its own)"},
    {"directory.policy", "lru",
     "lru | cost: evict the least recently used entries, or keep entries by encoder cost x reuse "
     "/ size (same in every process)"},
    {"directory.event_slots", "4096",
     "residency events the region's ring keeps for readers (16..1048576; same in every process)"},
};
const size_t config_n_params = CONFIG_N_PARAMS;
_Static_assert(sizeof(config_params) / sizeof(config_params[0]) == CONFIG_N_PARAMS,
               "CONFIG_N_PARAMS must count config_params");

/* Values as text, one slot per published key, filled from defaults first. */
struct raw_config {
  const char *value[CONFIG_N_PARAMS];
};

/* Every configuration error is ECC_ERR_CONFIG, with the key and the reason
 * in the caller's err. */
__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t cap, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int rc = errtext_vfail(err, cap, ECC_ERR_CONFIG, fmt, ap);
  va_end(ap);
  return rc;
}

static int param_index(const char *key)
{
  for (size_t i = 0; i < config_n_params; i++)
    if (strcmp(config_params[i].key, key) == 0)
      return (int)i;
  return -1;
}

static const char *raw(const struct raw_config *r, const char *key)
{
  return r->value[param_index(key)];
}

static int gather(const ecc_kv_v1_t *kv, size_t n, struct raw_config *r, char *err, size_t cap)
{
  int seen[CONFIG_N_PARAMS] = {0};
  for (size_t i = 0; i < config_n_params; i++)
    r->value[i] = config_params[i].default_value;
  if (n > 0 && kv == NULL)
    return fail(err, cap, "config: %zu pairs given but the array is NULL", n);
  for (size_t i = 0; i < n; i++) {
    if (kv[i].key == NULL || kv[i].value == NULL)
      return fail(err, cap, "config: pair %zu has a NULL key or value", i);
    int idx = param_index(kv[i].key);
    if (idx < 0)
      return fail(err, cap, "config: unknown key '%s'", kv[i].key);
    if (seen[idx])
      return fail(err, cap, "config: key '%s' given twice", kv[i].key);
    seen[idx] = 1;
    r->value[idx] = kv[i].value;
  }
  return ECC_OK;
}

int config_parse_size(const char *text, uint64_t *out)
{
  static const struct {
    const char *unit;
    uint64_t mul;
  } units[] = {
      {"", 1},
      {"B", 1},
      {"K", 1ull << 10},
      {"KiB", 1ull << 10},
      {"KB", 1000ull},
      {"M", 1ull << 20},
      {"MiB", 1ull << 20},
      {"MB", 1000000ull},
      {"G", 1ull << 30},
      {"GiB", 1ull << 30},
      {"GB", 1000000000ull},
      {"T", 1ull << 40},
      {"TiB", 1ull << 40},
      {"TB", 1000000000000ull},
  };
  const char *p = text;
  while (*p == ' ' || *p == '\t')
    p++;
  /* strtoull accepts a sign and wraps "-1" to 2^64-1: insist on a digit. */
  if (!isdigit((unsigned char)*p))
    return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno == ERANGE)
    return -1;
  while (*end == ' ' || *end == '\t')
    end++;
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
    if (strcmp(end, units[i].unit) != 0)
      continue;
    if (v > UINT64_MAX / units[i].mul)
      return -1;
    *out = (uint64_t)v * units[i].mul;
    return 0;
  }
  return -1;
}

/* A whole number in [lo, hi]; rejects signs where lo >= 0, fractions, junk. */
static int parse_int(const char *key, const char *text, long long lo, long long hi, long long *out,
                     char *err, size_t cap)
{
  const char *p = text;
  if (*p == '-' && lo < 0)
    p++;
  if (!isdigit((unsigned char)*p))
    return fail(err, cap, "config: %s = '%s' is not a whole number", key, text);
  errno = 0;
  char *end;
  long long v = strtoll(text, &end, 10);
  if (*end != '\0')
    return fail(err, cap, "config: %s = '%s' is not a whole number", key, text);
  if (errno == ERANGE || v < lo || v > hi)
    return fail(err, cap, "config: %s = '%s' is out of range [%lld, %lld]", key, text, lo, hi);
  *out = v;
  return ECC_OK;
}

static int parse_u32(const struct raw_config *r, const char *key, long long lo, long long hi,
                     uint32_t *out, char *err, size_t cap)
{
  long long v;
  int rc = parse_int(key, raw(r, key), lo, hi, &v, err, cap);
  if (rc == ECC_OK)
    *out = (uint32_t)v;
  return rc;
}

/* One member of a closed set: its value and the INI's word for it. */
struct choice {
  int value;
  const char *name;
};

#define CHOICE(constant, value, text) {constant, text},
static const struct choice roles[] = {CONFIG_ROLE_MAP(CHOICE)};
static const struct choice modes[] = {REGION_MODE_MAP(CHOICE)};
static const struct choice engines[] = {CONFIG_ENGINE_MAP(CHOICE)};
static const struct choice methods[] = {CONFIG_METHOD_MAP(CHOICE)};
static const struct choice policies[] = {CONFIG_POLICY_MAP(CHOICE)};
#undef CHOICE
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *choice_name(const struct choice *set, size_t n, int value)
{
  for (size_t i = 0; i < n; i++)
    if (set[i].value == value)
      return set[i].name;
  return "?";
}

/* "a | b | c" into buf, for a message. */
static const char *choice_list(const struct choice *set, size_t n, char *buf, size_t cap)
{
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used < cap; i++) {
    int w = snprintf(buf + used, cap - used, "%s%s", i ? " | " : "", set[i].name);
    if (w < 0)
      break;
    used += (size_t)w;
  }
  return buf;
}

static int parse_choice(const struct raw_config *r, const char *key, const struct choice *set,
                        size_t n, int *out, char *err, size_t cap)
{
  const char *text = raw(r, key);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(text, set[i].name) == 0) {
      *out = set[i].value;
      return ECC_OK;
    }
  }
  char list[160];
  return fail(err, cap, "config: %s = '%s' is not one of: %s", key, text,
              choice_list(set, n, list, sizeof(list)));
}

static const struct choice bool_words[] = {
#define BOOL_WORD(word, value) {value, word},
    CONFIG_BOOL_WORD_MAP(BOOL_WORD)
#undef BOOL_WORD
};

int config_bool_word(const char *text, bool *out)
{
  for (size_t i = 0; i < N_OF(bool_words); i++) {
    if (strcmp(text, bool_words[i].name) == 0) {
      *out = bool_words[i].value != 0;
      return 0;
    }
  }
  return -1;
}

/* A boolean key: any of CONFIG_BOOL_WORD_MAP's words, into CONFIG_TRUE or
 * CONFIG_FALSE. */
static int parse_bool(const struct raw_config *r, const char *key, int *out, char *err, size_t cap)
{
  const char *text = raw(r, key);
  bool on;
  if (config_bool_word(text, &on) == 0) {
    *out = on ? CONFIG_TRUE : CONFIG_FALSE;
    return ECC_OK;
  }
  char list[80];
  return fail(err, cap, "config: %s = '%s' is not a boolean: %s", key, text,
              choice_list(bool_words, N_OF(bool_words), list, sizeof(list)));
}

/* pinning.enabled: auto, or a boolean word (on and off as the file writes). */
static int parse_pin(const struct raw_config *r, int *out, char *err, size_t cap)
{
  const char *key = "pinning.enabled";
  if (strcmp(raw(r, key), "auto") == 0) {
    *out = PIN_AUTO;
    return ECC_OK;
  }
  int on;
  if (parse_bool(r, key, &on, err, cap) != ECC_OK) {
    char list[80];
    return fail(err, cap, "config: %s = '%s' is not auto or a boolean: %s", key, raw(r, key),
                choice_list(bool_words, N_OF(bool_words), list, sizeof(list)));
  }
  *out = on == CONFIG_TRUE ? PIN_ON : PIN_OFF;
  return ECC_OK;
}

static int parse_name(const struct raw_config *r, struct plugin_config *c, char *err, size_t cap)
{
  const char *name = raw(r, "region.name");
  size_t len = strlen(name);
  if (!ecc_name_ok(name))
    return fail(err, cap, "config: region.name = '%s' must be 1 to %d letters, digits, '-' or '_'",
                name, ECC_NAME_MAX);
  memcpy(c->region_name, name, len + 1);
  const char *folder = raw(r, "region.dir");
  if ((folder[0] != '\0' && folder[0] != '/') || strlen(folder) >= sizeof(c->region_folder))
    return fail(err, cap,
                "config: region.dir = '%s' must be empty (the default) or an absolute "
                "path shorter than %zu",
                folder, sizeof(c->region_folder));
  memcpy(c->region_folder, folder, strlen(folder) + 1);
  return ECC_OK;
}

/* Element types, as choices whose value is their size in bytes. */
static const struct choice dtypes[] = {
#define DTYPE(name, bytes) {bytes, name},
    CONFIG_DTYPE_MAP(DTYPE)
#undef DTYPE
};

static int parse_layout(const struct raw_config *r, struct plugin_config *c, char *err, size_t cap)
{
  const char *size = raw(r, "region.size");
  const char *bs = raw(r, "region.block_size");
  const char *hidden = raw(r, "region.hidden_size");
  const char *dtype = raw(r, "region.dtype");

  if (config_parse_size(size, &c->region_size) != 0 || c->region_size == 0)
    return fail(err, cap, "config: region.size = '%s' is not a positive byte size (e.g. 1GiB)",
                size);
  if (bs[0] != '\0' && (hidden[0] != '\0' || dtype[0] != '\0'))
    return fail(err, cap,
                "config: give region.block_size or region.hidden_size with region.dtype, not both");
  if (bs[0] != '\0') {
    if (config_parse_size(bs, &c->block_size) != 0 || c->block_size == 0)
      return fail(err, cap, "config: region.block_size = '%s' is not a positive byte size", bs);
  } else if (hidden[0] != '\0' || dtype[0] != '\0') {
    long long h;
    int per = 0;
    int rc = parse_int("region.hidden_size", hidden, 1, 1 << 24, &h, err, cap);
    if (rc == ECC_OK)
      rc = parse_choice(r, "region.dtype", dtypes, N_OF(dtypes), &per, err, cap);
    if (rc != ECC_OK)
      return rc;
    c->block_size = (uint64_t)h * (uint64_t)per;
  } else {
    return fail(err, cap,
                "config: region.block_size (or region.hidden_size and region.dtype) is required");
  }
  if (c->block_size > c->region_size)
    return fail(err, cap,
                "config: region.size (%" PRIu64 " B) is smaller than one block (%" PRIu64 " B)",
                c->region_size, c->block_size);
  c->num_blocks = c->region_size / c->block_size;
  /* Block ids are 32-bit in the ABI. */
  if (c->num_blocks > UINT32_MAX)
    return fail(err, cap, "config: region holds %" PRIu64 " blocks; at most %u are addressable",
                c->num_blocks, UINT32_MAX);
  return ECC_OK;
}

static int parse_enums(const struct raw_config *r, struct plugin_config *c, char *err, size_t cap)
{
  int rc = parse_choice(r, "connector.role", roles, N_OF(roles), &c->role, err, cap);
  if (rc == ECC_OK)
    rc = parse_choice(r, "region.mode", modes, N_OF(modes), &c->region_mode, err, cap);
  if (rc == ECC_OK)
    rc = parse_pin(r, &c->pin, err, cap);
  if (rc == ECC_OK)
    rc = parse_choice(r, "engine.type", engines, N_OF(engines), &c->engine, err, cap);
  if (rc == ECC_OK)
    rc = parse_choice(r, "engine.method", methods, N_OF(methods), &c->method, err, cap);
  if (rc == ECC_OK)
    rc = parse_bool(r, "region.reap_orphans", &c->reap_orphans, err, cap);
  if (rc == ECC_OK)
    rc = parse_bool(r, "region.require_tmpfs", &c->require_tmpfs, err, cap);
  if (rc == ECC_OK)
    rc = parse_bool(r, "directory.enabled", &c->directory, err, cap);
  if (rc == ECC_OK)
    rc = parse_bool(r, "region.persist", &c->persist, err, cap);
  if (rc == ECC_OK)
    rc = parse_choice(r, "directory.policy", policies, N_OF(policies), &c->dir_policy, err, cap);
  return rc;
}

/* 0 would mean waiting for ever behind a stopped process: refused by name. */
static int parse_lock_timeout(const struct raw_config *r, struct plugin_config *c, char *err,
                              size_t cap)
{
  const char *key = "directory.lock_timeout_ms";
  if (strcmp(raw(r, key), "0") == 0)
    return fail(err, cap,
                "config: %s = 0 would let a process stopped inside a directory call block "
                "every other one for ever; give 1 to 3600000 ms",
                key);
  return parse_u32(r, key, 1, 3600000, &c->dir_lock_timeout_ms, err, cap);
}

static int parse_numbers(const struct raw_config *r, struct plugin_config *c, char *err, size_t cap)
{
  long long dev;
  int rc = parse_u32(r, "connector.tp_rank", 0, 1 << 20, &c->tp_rank, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "connector.pcp_rank", 0, 1 << 20, &c->pcp_rank, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "connector.max_inflight", 1, 65536, &c->max_inflight, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "region.join_timeout_ms", 0, 3600000, &c->join_timeout_ms, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "engine.max_sms", 1, 1024, &c->max_sms, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "engine.host_threads", 0, 256, &c->host_threads, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "directory.max_entries", 0, 1u << 30, &c->dir_max_entries, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "directory.max_pins", 0, 1u << 30, &c->dir_max_pins, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "directory.reserve_timeout_ms", 0, 86400000, &c->dir_reserve_timeout_ms, err,
                   cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "directory.pin_timeout_ms", 0, 86400000, &c->dir_pin_timeout_ms, err, cap);
  if (rc == ECC_OK)
    rc = parse_lock_timeout(r, c, err, cap);
  if (rc == ECC_OK)
    rc = parse_u32(r, "directory.event_slots", 16, 1u << 20, &c->dir_event_slots, err, cap);
  if (rc == ECC_OK)
    rc = parse_int("engine.device", raw(r, "engine.device"), -1, 1023, &dev, err, cap);
  if (rc == ECC_OK)
    c->device = (int)dev;
  return rc;
}

int config_parse(const ecc_kv_v1_t *kv, size_t n, struct plugin_config *out, char *err,
                 size_t err_cap)
{
  struct raw_config r;
  struct plugin_config c;
  memset(&c, 0, sizeof(c));
  int rc = gather(kv, n, &r, err, err_cap);
  if (rc == ECC_OK)
    rc = parse_enums(&r, &c, err, err_cap);
  if (rc == ECC_OK)
    rc = parse_numbers(&r, &c, err, err_cap);
  if (rc == ECC_OK)
    rc = parse_name(&r, &c, err, err_cap);
  if (rc == ECC_OK)
    rc = parse_layout(&r, &c, err, err_cap);
  if (rc == ECC_OK && c.persist && !c.directory)
    rc = fail(err, err_cap,
              "config: region.persist = true needs directory.enabled = true: only the directory "
              "knows which blocks hold whole entries for the next process to reuse");
  if (rc == ECC_OK)
    *out = c;
  return rc;
}

const char *config_region_folder(const struct plugin_config *c, char *buf, size_t cap)
{
  return region_folder_shown(c->region_folder, buf, cap);
}

const char *config_role_name(int role)
{
  return choice_name(roles, N_OF(roles), role);
}

const char *config_engine_name(int engine)
{
  return choice_name(engines, N_OF(engines), engine);
}

const char *config_method_name(int method)
{
  return choice_name(methods, N_OF(methods), method);
}

const char *config_policy_name(int policy)
{
  return choice_name(policies, N_OF(policies), policy);
}
