/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo_common.c - the demo's shared pieces: entry sizes and keys, the byte
 * pattern derived from (seed, entry) and its check, pipe I/O and clocks,
 * and what both sides do with their connector: open and describe it, read
 * its stats, close it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "host-shim/cli/demo.h"

static uint64_t mix64(uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t entry_base(uint64_t seed, uint64_t index)
{
  return mix64(mix64(seed) ^ (index * 0xD1B54A32D192ED03ull));
}

uint64_t demo_max_rows(const struct demo_opts *o)
{
  return o->rows + o->rows / 8;
}

/* Entries vary by up to an eighth around the typical size, like images of
 * different resolutions; counts are rarely a multiple of anything. */
uint64_t demo_entry_rows(const struct demo_opts *o, uint64_t index)
{
  uint64_t spread = o->rows / 8;
  if (spread == 0)
    return o->rows;
  uint64_t r = mix64(entry_base(o->seed, index) ^ 0x5EEDull);
  return o->rows - spread + r % (2 * spread + 1);
}

uint64_t demo_blocks_for(uint64_t nbytes, uint64_t block_size)
{
  return nbytes / block_size + (nbytes % block_size != 0);
}

void demo_key(const struct demo_opts *o, uint64_t index, char *out, size_t cap)
{
  /* Shaped like a content hash, with the index last so poll results map
   * back to entries cheaply. */
  uint64_t h = entry_base(o->seed, index);
  snprintf(out, cap, "mm-%016" PRIx64 "%016" PRIx64 "-%" PRIu64, h, mix64(h), index);
}

void demo_fill(void *buf, size_t n, uint64_t seed, uint64_t index)
{
  unsigned char *p = buf;
  uint64_t base = entry_base(seed, index);
  size_t words = n / 8;
  for (size_t w = 0; w < words; w++) {
    uint64_t v = mix64(base + w);
    memcpy(p + 8 * w, &v, 8);
  }
  uint64_t v = mix64(base + words);
  for (size_t i = 8 * words; i < n; i++)
    p[i] = (unsigned char)(v >> (8 * (i % 8)));
}

static unsigned differing_bytes(uint64_t a, uint64_t b)
{
  unsigned d = 0;
  for (uint64_t x = a ^ b; x != 0; x >>= 8)
    d += (x & 0xff) != 0;
  return d;
}

uint64_t demo_verify(const void *buf, size_t n, uint64_t seed, uint64_t index)
{
  const unsigned char *p = buf;
  uint64_t base = entry_base(seed, index);
  size_t words = n / 8;
  uint64_t bad = 0;
  for (size_t w = 0; w < words; w++) {
    uint64_t got;
    memcpy(&got, p + 8 * w, 8);
    uint64_t want = mix64(base + w);
    if (got != want)
      bad += differing_bytes(got, want);
  }
  uint64_t v = mix64(base + words);
  for (size_t i = 8 * words; i < n; i++)
    bad += p[i] != (unsigned char)(v >> (8 * (i % 8)));
  return bad;
}

int demo_write_all(int fd, const void *buf, size_t n)
{
  const char *p = buf;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int demo_read_all(int fd, void *buf, size_t n)
{
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, p + got, n - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      return -1;
    if (k == 0) {
      errno = EPIPE; /* end of file in the middle of a message */
      return got == 0 ? 1 : -1;
    }
    got += (size_t)k;
  }
  return 0;
}

double demo_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void demo_nap(void)
{
  /* Short enough not to add latency to a copy, long enough to leave the
   * copy threads a core on a small machine. */
  struct timespec ts = {0, 20 * 1000};
  nanosleep(&ts, NULL);
}

void demo_fail(struct demo_side *side, ecc_connector_t *c, const char *what, int rc)
{
  char last[256] = "";
  if (c != NULL)
    (void)ecc_last_error(c, last, sizeof(last));
  snprintf(side->error, sizeof(side->error), "%s: %s%s%s", what, ecc_strerror(rc),
           last[0] ? ": " : "", last);
}

int demo_failf(struct demo_side *side, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(side->error, sizeof(side->error), fmt, ap);
  va_end(ap);
  return -1;
}

static void log_line(void *user, int level, const char *msg)
{
  static const char *names[] = {"error", "warn", "info", "debug"};
  const char *lv = level >= 0 && level <= 3 ? names[level] : "log";
  fprintf(stderr, "eccctl demo (%s) %s: %s\n", (const char *)user, lv, msg);
}

int demo_open(const struct demo_opts *o, const char *role, const char *mode, struct demo_side *side,
              ecc_connector_t **c, ecc_info_t *info)
{
  const ecc_kv_t over[] = {
      {"connector.role", role},
      {"region.mode", mode},
  };
  ecc_open_options_t opt = {.struct_size = sizeof(opt),
                            .overrides = over,
                            .n_overrides = 2,
                            .log = log_line,
                            .log_user = (void *)role,
                            .log_level = -1};
  char err[DEMO_ERR_CAP - 64] = "";
  int rc = ecc_open(o->config, &opt, c, err, sizeof(err));
  if (rc != ECC_OK)
    return demo_failf(side, "cannot open the %s: %s", role, err[0] ? err : ecc_strerror(rc));
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  rc = ecc_describe(*c, info);
  if (rc != ECC_OK) {
    demo_fail(side, *c, "ecc_describe (the demo needs the region layout)", rc);
    return -1;
  }
  side->creator = (int)info->creator;
  side->block_size = info->block_size;
  side->num_blocks = info->num_blocks;
  snprintf(side->region_path, sizeof(side->region_path), "%s", info->region_path);
  snprintf(side->engine, sizeof(side->engine), "%s", info->engine);
  snprintf(side->engine_detail, sizeof(side->engine_detail), "%s", info->engine_detail);
  side->on_gpu = strcmp(info->engine, "cuda") == 0;
  return 0;
}

void demo_record_stats(ecc_connector_t *c, int direction, struct demo_side *side)
{
  ecc_stats_t st;
  memset(&st, 0, sizeof(st));
  st.struct_size = sizeof(st);
  if (ecc_get_stats(c, &st) != ECC_OK)
    return;
  const ecc_dir_stats_t *d = direction == ECC_DIR_SAVE ? &st.save : &st.load;
  side->have_stats = 1;
  side->stat_bytes = d->bytes;
  side->stat_busy_ns = d->busy_ns;
  side->stat_transfers = d->transfers;
  side->stat_descriptors = d->descriptors;
}

void demo_close(ecc_connector_t *c, struct demo_side *side)
{
  if (c == NULL)
    return;
  int rc = ecc_close(c);
  if (rc != ECC_OK && side->error[0] == '\0')
    snprintf(side->error, sizeof(side->error), "ecc_close: %s", ecc_strerror(rc));
}

bool demo_has_directory(ecc_connector_t *c)
{
  uint64_t cursor = 0;
  size_t n = 0;
  return ecc_list(c, &cursor, NULL, 0, &n) == ECC_OK;
}
