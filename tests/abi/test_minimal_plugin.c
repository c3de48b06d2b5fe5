/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_minimal_plugin.c - examples/minimal_plugin.c, a plugin written from
 * the ABI header alone, loaded through the shim and eccctl as a third
 * party's would be, and called through its table directly for what the shim
 * does not let through (calls after shutdown, a forked child, reloading).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

#define MIN_PATH ECC_TEST_PLUGIN_DIR "/libecc-minimal.so"
#define BS 512
#define NB 16

/* ---- through the shim ---------------------------------------------------- */

static const char *ini_named(const char *section)
{
  char text[1024];
  snprintf(text, sizeof(text), "[plugin]\nname = minimal\ndir = %s\n%s", ECC_TEST_PLUGIN_DIR,
           section);
  return th_write_temp(text, ".ini");
}

static const char *small_ini(void)
{
  return ini_named("[minimal]\nblocks = 16\nblock_size = 512\n");
}

static ecc_connector_t *open_ini(const char *ini)
{
  ecc_connector_t *c = NULL;
  char err[1024] = "";
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open: %s", err);
  return c;
}

static void expect_error(ecc_connector_t *c, int got, int want, const char *text)
{
  char err[512] = "";
  cr_expect_eq(got, want, "got %s, want %s", ecc_strerror(got), ecc_strerror(want));
  cr_assert_eq(ecc_last_error(c, err, sizeof(err)), ECC_OK);
  cr_expect(strstr(err, text) != NULL, "last error '%s' does not say '%s'", err, text);
}

static size_t poll_all(ecc_connector_t *c, ecc_completion_t *out, size_t cap)
{
  size_t n = 0;
  cr_assert_eq(ecc_poll(c, out, cap, &n), ECC_OK);
  return n;
}

Test(minimal, loads_by_name_from_the_plugin_dir)
{
  ecc_connector_t *c = open_ini(small_ini());
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  char want[PATH_MAX];
  cr_assert_not_null(realpath(MIN_PATH, want));
  cr_expect_str_eq(m.path, want);
  cr_expect_str_eq(m.name, "minimal");
  cr_expect_eq(m.abi_major, ECC_ABI_MAJOR);
  cr_expect_eq(m.negotiated_minor, ECC_ABI_MINOR);
  uint32_t caps = ECC_CAP_SAVE | ECC_CAP_LOAD | ECC_CAP_HOST_ENGINE | ECC_CAP_STATS;
  cr_expect_eq(m.caps, caps);
  cr_assert_eq(m.n_params, 2);
  cr_expect_str_eq(m.params[0].key, "minimal.blocks");
  cr_expect_str_eq(m.params[1].key, "minimal.block_size");
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  cr_expect_eq(info.block_size, BS);
  cr_expect_eq(info.num_blocks, NB);
  cr_expect_str_eq(info.engine, "host");
  cr_expect_eq(ecc_close(c), ECC_OK);
  cr_expect_eq(ecc_close(NULL), ECC_OK);
}

Test(minimal, loads_by_path_with_the_published_defaults)
{
  char text[512];
  snprintf(text, sizeof(text), "[plugin]\npath = %s\n", MIN_PATH);
  ecc_connector_t *c = open_ini(th_write_temp(text, ".ini"));
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  ecc_plugin_meta_t m;
  cr_assert_eq(ecc_plugin_info(c, &m), ECC_OK);
  cr_expect_eq(info.num_blocks, strtoull(m.params[0].default_value, NULL, 10));
  cr_expect_eq(info.block_size, strtoull(m.params[1].default_value, NULL, 10));
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, bad_configuration_is_refused_naming_the_key)
{
  const struct {
    const char *section, *text;
    int code;
  } bad[] = {
      {"[minimal]\nblocks = 0\n", "minimal.blocks", ECC_ERR_CONFIG},
      {"[minimal]\nblocks = 16777217\n", "minimal.blocks", ECC_ERR_CONFIG},
      {"[minimal]\nblocks = -5\n", "minimal.blocks", ECC_ERR_CONFIG},
      {"[minimal]\nblock_size = 4KiB\n", "minimal.block_size", ECC_ERR_CONFIG},
      {"[minimal]\nblocks = 16777216\nblock_size = 1073741824\n", "4 GiB", ECC_ERR_CONFIG},
      {"[minimal]\nsize = 1\n", "minimal.size", ECC_ERR_CONFIG},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *ini = ini_named(bad[i].section);
    ecc_connector_t *c = NULL;
    char err[1024] = "";
    int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
    cr_expect_eq(rc, bad[i].code, "%s: %s", bad[i].section, err);
    cr_expect_null(c);
    cr_expect(strstr(err, bad[i].text) != NULL, "'%s' does not name %s", err, bad[i].text);
    rc = ecc_check(ini, NULL, NULL, err, sizeof(err));
    cr_expect_eq(rc, bad[i].code, "check %s: %s", bad[i].section, err);
    cr_expect(strstr(err, bad[i].text) != NULL, "check: '%s' does not name %s", err, bad[i].text);
  }
}

/* Four entries whose block lists make 1, 2, 1 and 1 runs of neighbours. */
static const uint32_t blocks_a[] = {0, 1, 2};
static const uint32_t blocks_b[] = {5, 3, 4};
static const uint32_t blocks_c[] = {7};
static const uint32_t blocks_d[] = {9, 10, 12}; /* the bytes reach two blocks */

/* One batch each way of four entries, total bytes, whose blocks make 5 runs. */
static void expect_counted(ecc_connector_t *c, uint64_t total)
{
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(c, &st), ECC_OK);
  cr_expect_eq(st.save.transfers, 1);
  cr_expect_eq(st.save.entries, 4);
  cr_expect_eq(st.save.bytes, total);
  cr_expect_eq(st.save.descriptors, 5, "runs of neighbouring blocks: %llu",
               (unsigned long long)st.save.descriptors);
  cr_expect_eq(st.save.hist[0], 1);
  cr_expect_eq(st.load.transfers, 1);
  cr_expect_eq(st.load.entries, 4);
  cr_expect_eq(st.load.bytes, total);
}

Test(minimal, saves_and_loads_byte_exact)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char src[4][3 * BS], back[4][3 * BS + 64];
  const uint32_t *ids[4] = {blocks_a, blocks_b, blocks_c, blocks_d};
  const uint32_t n_ids[4] = {3, 3, 1, 3};
  const uint64_t sizes[4] = {3 * BS, 2 * BS + 7, BS, BS + 1};
  const char *keys[4] = {"a", "b", "c", "d"};
  ecc_save_entry_t e[4];
  for (int i = 0; i < 4; i++) {
    th_fill(src[i], sizeof(src[i]), (uint64_t)i + 1);
    e[i] = (ecc_save_entry_t){keys[i], (uint64_t)(uintptr_t)src[i], sizes[i], ids[i], n_ids[i]};
  }
  cr_assert_eq(ecc_save(c, e, 3), ECC_OK);
  cr_assert_eq(ecc_save(c, e + 3, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[8];
  cr_assert_eq(poll_all(c, done, 8), 4);
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(done[i].direction, ECC_DIR_SAVE);
    cr_expect_eq(done[i].status, ECC_OK);
    cr_expect_str_eq(done[i].key, e[i].key);
    cr_expect_eq(done[i].nbytes, sizes[i]);
    cr_expect_eq(done[i].batch, 1);
  }
  memset(back, 0xA5, sizeof(back));
  ecc_load_entry_t l[4];
  for (int i = 0; i < 4; i++)
    l[i] = (ecc_load_entry_t){100 + (uint64_t)i, ids[i], n_ids[i], (uint64_t)(uintptr_t)back[i],
                              sizes[i]};
  cr_assert_eq(ecc_load(c, l, 4, NULL), ECC_OK);
  cr_assert_eq(poll_all(c, done, 8), 4);
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(done[i].direction, ECC_DIR_LOAD);
    cr_expect_eq(done[i].transfer_id, 100 + (uint64_t)i);
    cr_expect_eq(done[i].nbytes, sizes[i]);
    cr_expect(memcmp(back[i], src[i], sizes[i]) == 0, "entry %d differs", i);
    cr_expect_eq(back[i][sizes[i]], 0xA5, "entry %d: a byte past dst_capacity was written", i);
  }
  expect_counted(c, sizes[0] + sizes[1] + sizes[2] + sizes[3]);
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, load_moves_at_most_its_blocks)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char src[2 * BS], back[4 * BS];
  th_fill(src, sizeof(src), 9);
  const uint32_t ids[] = {14, 15};
  ecc_save_entry_t e = {"whole", (uint64_t)(uintptr_t)src, sizeof(src), ids, 2};
  cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[2];
  cr_assert_eq(poll_all(c, done, 2), 1);
  memset(back, 0x5A, sizeof(back));
  ecc_load_entry_t l = {1, ids, 2, (uint64_t)(uintptr_t)back, sizeof(back)};
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  cr_assert_eq(poll_all(c, done, 2), 1);
  cr_expect_eq(done[0].nbytes, sizeof(src));
  cr_expect(memcmp(back, src, sizeof(src)) == 0);
  cr_expect_eq(back[sizeof(src)], 0x5A, "wrote past n_blocks x block_size");
  /* Less room than the blocks hold: only that much is written. */
  memset(back, 0x5A, sizeof(back));
  l.dst_capacity = BS + 3;
  cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  cr_assert_eq(poll_all(c, done, 2), 1);
  cr_expect_eq(done[0].nbytes, BS + 3);
  cr_expect(memcmp(back, src, BS + 3) == 0);
  cr_expect_eq(back[BS + 3], 0x5A, "wrote past dst_capacity");
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, completions_come_once_each_in_fifo_order)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char buf[BS];
  const uint32_t id = 3;
  char keys[15][16];
  for (int f = 0; f < 5; f++) {
    ecc_save_entry_t e[3];
    for (int i = 0; i < 3; i++) {
      snprintf(keys[f * 3 + i], sizeof(keys[0]), "k%02d", f * 3 + i);
      e[i] = (ecc_save_entry_t){keys[f * 3 + i], (uint64_t)(uintptr_t)buf, BS, &id, 1};
    }
    cr_assert_eq(ecc_save(c, e, 3), ECC_OK);
    cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  }
  for (int i = 0; i < 2; i++) {
    ecc_load_entry_t l = {500 + (uint64_t)i, &id, 1, (uint64_t)(uintptr_t)buf, BS};
    cr_assert_eq(ecc_load(c, &l, 1, NULL), ECC_OK);
  }
  ecc_completion_t one;
  for (int i = 0; i < 15; i++) {
    cr_assert_eq(poll_all(c, &one, 1), 1);
    cr_expect_eq(one.direction, ECC_DIR_SAVE);
    cr_expect_str_eq(one.key, keys[i]);
    cr_expect_eq(one.batch, (uint64_t)(i / 3 + 1));
  }
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(poll_all(c, &one, 1), 1);
    cr_expect_eq(one.direction, ECC_DIR_LOAD);
    cr_expect_eq(one.transfer_id, 500 + (uint64_t)i);
    cr_expect_eq(one.batch, (uint64_t)(i + 1));
  }
  cr_expect_eq(poll_all(c, &one, 1), 0);
  cr_expect_eq(poll_all(c, NULL, 0), 0);
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, unpolled_batches_bound_flush_and_load_and_keep_the_queue)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char buf[BS];
  const uint32_t id = 1;
  ecc_save_entry_t e = {"again", (uint64_t)(uintptr_t)buf, BS, &id, 1};
  ecc_load_entry_t l = {7, &id, 1, (uint64_t)(uintptr_t)buf, BS};
  int flushes = 0, loads = 0;
  for (; flushes < 1000; flushes++) {
    cr_assert_eq(ecc_save(c, &e, 1), ECC_OK);
    if (ecc_flush(c, NULL) != ECC_OK)
      break;
  }
  for (; loads < 1000 && ecc_load(c, &l, 1, NULL) == ECC_OK; loads++)
    ;
  ecc_info_t info = {.struct_size = sizeof(info)};
  cr_assert_eq(ecc_describe(c, &info), ECC_OK);
  cr_expect_eq((uint64_t)flushes, info.max_inflight, "flushes before BUSY: %d", flushes);
  cr_expect_eq((uint64_t)loads, info.max_inflight, "loads before BUSY: %d", loads);
  expect_error(c, ecc_load(c, &l, 1, NULL), ECC_ERR_BUSY, "poll, then retry");
  static ecc_completion_t done[256];
  cr_assert_eq(poll_all(c, done, 256), (size_t)flushes + (size_t)loads);
  /* The entry the refused flush kept goes with the next one. */
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  cr_assert_eq(poll_all(c, done, 256), 1);
  cr_expect_str_eq(done[0].key, "again");
  cr_expect_eq(done[0].batch, (uint64_t)flushes + 1);
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, bad_saves_are_refused_whole)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char buf[2 * BS];
  const uint32_t ok_ids[] = {1, 2}, far[] = {1, NB};
  char long_key[ECC_KEY_MAX + 2];
  memset(long_key, 'x', sizeof(long_key) - 1);
  long_key[ECC_KEY_MAX + 1] = '\0';
  const ecc_save_entry_t good = {"good", (uint64_t)(uintptr_t)buf, sizeof(buf), ok_ids, 2};
  const struct {
    ecc_save_entry_t e;
    int code;
    const char *text;
  } bad[] = {
      {{NULL, good.src, good.nbytes, ok_ids, 2}, ECC_ERR_INVALID, "key is NULL"},
      {{"", good.src, good.nbytes, ok_ids, 2}, ECC_ERR_INVALID, "key is empty"},
      {{long_key, good.src, good.nbytes, ok_ids, 2}, ECC_ERR_INVALID, "key is too long"},
      {{"k", 0, good.nbytes, ok_ids, 2}, ECC_ERR_INVALID, "src is NULL"},
      {{"k", good.src, good.nbytes, NULL, 2}, ECC_ERR_INVALID, "block_ids is NULL"},
      {{"k", good.src, 0, ok_ids, 2}, ECC_ERR_INVALID, "nbytes is 0"},
      {{"k", good.src, good.nbytes, ok_ids, 0}, ECC_ERR_INVALID, "n_blocks is 0"},
      {{"k", UINT64_MAX - 8, good.nbytes, ok_ids, 2}, ECC_ERR_INVALID, "wraps around"},
      {{"k", good.src, good.nbytes, far, 2}, ECC_ERR_RANGE, "block id 16"},
      {{"k", good.src, good.nbytes + 1, ok_ids, 2}, ECC_ERR_RANGE, "do not fit"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ecc_save_entry_t pair[2] = {good, bad[i].e};
    expect_error(c, ecc_save(c, pair, 2), bad[i].code, bad[i].text);
  }
  expect_error(c, ecc_save(c, NULL, 1), ECC_ERR_INVALID, "entries is NULL");
  cr_expect_eq(ecc_save(c, NULL, 0), ECC_OK);
  expect_error(c, ecc_flush(c, (void *)&good), ECC_ERR_INVALID, "pass NULL");
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done[4];
  cr_expect_eq(poll_all(c, done, 4), 0, "a refused batch queued something");
  char max_key[ECC_KEY_MAX + 1];
  memset(max_key, 'y', ECC_KEY_MAX);
  max_key[ECC_KEY_MAX] = '\0';
  ecc_save_entry_t longest = {max_key, good.src, good.nbytes, ok_ids, 2};
  cr_assert_eq(ecc_save(c, &longest, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  cr_assert_eq(poll_all(c, done, 4), 1);
  cr_expect_str_eq(done[0].key, max_key);
  cr_expect_eq(ecc_close(c), ECC_OK);
}

Test(minimal, bad_loads_and_queries_are_refused)
{
  ecc_connector_t *c = open_ini(small_ini());
  static unsigned char buf[BS];
  const uint32_t id = 2, far = NB;
  const uint64_t dst = (uint64_t)(uintptr_t)buf;
  const struct {
    ecc_load_entry_t l;
    int code;
    const char *text;
  } bad[] = {
      {{1, &id, 1, 0, BS}, ECC_ERR_INVALID, "dst is NULL"},
      {{1, NULL, 1, dst, BS}, ECC_ERR_INVALID, "block_ids is NULL"},
      {{1, &id, 0, dst, BS}, ECC_ERR_INVALID, "n_blocks is 0"},
      {{1, &id, 1, dst, 0}, ECC_ERR_INVALID, "dst_capacity is 0"},
      {{1, &far, 1, dst, BS}, ECC_ERR_RANGE, "block id 16"},
      {{1, &id, 1, UINT64_MAX - 8, BS}, ECC_ERR_INVALID, "wraps around"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    expect_error(c, ecc_load(c, &bad[i].l, 1, NULL), bad[i].code, bad[i].text);
  ecc_load_entry_t good = {1, &id, 1, dst, BS};
  expect_error(c, ecc_load(c, &good, 1, (void *)buf), ECC_ERR_INVALID, "pass NULL");
  expect_error(c, ecc_load(c, NULL, 1, NULL), ECC_ERR_INVALID, "entries is NULL");
  cr_expect_eq(ecc_load(c, NULL, 0, NULL), ECC_OK);
  size_t n = 99;
  expect_error(c, ecc_poll(c, NULL, 4, &n), ECC_ERR_INVALID, "out is NULL");
  cr_expect_eq(n, 0);
  /* A struct_size too small to hold itself is refused; a short struct of
   * an older caller gets what fits and keeps its size. */
  ecc_stats_t st = {.struct_size = 2};
  expect_error(c, ecc_get_stats(c, &st), ECC_ERR_INVALID, "struct_size");
  ecc_info_t info = {.struct_size = 3};
  expect_error(c, ecc_describe(c, &info), ECC_ERR_INVALID, "struct_size");
  memset(&info, 0x5a, sizeof(info));
  info.struct_size = offsetof(ecc_info_t, block_size);
  cr_expect_eq(ecc_describe(c, &info), ECC_OK);
  cr_expect_eq(info.struct_size, offsetof(ecc_info_t, block_size));
  cr_expect_eq(info.creator, 1);
  cr_expect_eq(info.block_size, 0x5a5a5a5a5a5a5a5aull, "describe wrote past the caller's size");
  ecc_completion_t done[2];
  cr_expect_eq(poll_all(c, done, 2), 0, "a refused load completed");
  cr_expect_eq(ecc_close(c), ECC_OK);
}

/* Runs eccctl with `args`; returns its exit status, stdout and stderr in out. */
static int eccctl(const char *args, char *out, size_t cap)
{
  char cmd[2048];
  snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", ECCCTL_PATH, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(minimal, eccctl_check_and_info_work)
{
  const char *ini = small_ini();
  char args[1024], out[16384];
  snprintf(args, sizeof(args), "check '%s'", ini);
  cr_assert_eq(eccctl(args, out, sizeof(out)), 0, "%s", out);
  cr_expect(strstr(out, ": ok (minimal: 16 blocks of 512 B") != NULL, "%s", out);
  snprintf(args, sizeof(args), "info --open '%s'", ini);
  cr_assert_eq(eccctl(args, out, sizeof(out)), 0, "%s", out);
  const char *want[] = {"name:           minimal", "capabilities:   save load host-engine stats",
                        "minimal.blocks",          "minimal.block_size",
                        "engine:       host",      "blocks:       16 x 512 B"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    cr_expect(strstr(out, want[i]) != NULL, "info lacks '%s':\n%s", want[i], out);
  snprintf(args, sizeof(args), "check '%s'", ini_named("[minimal]\nblocks = many\n"));
  cr_expect_eq(eccctl(args, out, sizeof(out)), 1, "%s", out);
  cr_expect(strstr(out, "minimal.blocks: 'many'") != NULL, "%s", out);
}

/* ---- through the table ----------------------------------------------------- */

static const ecc_plugin_v1_t *raw_open(void **dl)
{
  *dl = dlopen(MIN_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(*dl, "%s", dlerror());
  const ecc_plugin_v1_t *t = dlsym(*dl, ECC_PLUGIN_V1_SYMBOL);
  cr_assert_not_null(t, "no %s", ECC_PLUGIN_V1_SYMBOL);
  cr_assert_eq(t->abi_major, ECC_ABI_V1_MAJOR);
  cr_assert_eq(t->struct_size, sizeof(ecc_plugin_v1_t));
  return t;
}

static ecc_create_args_v1_t raw_args(const ecc_kv_v1_t *kv, size_t n, char *err, size_t cap)
{
  return (ecc_create_args_v1_t){.struct_size = sizeof(ecc_create_args_v1_t),
                                .abi_major = ECC_ABI_V1_MAJOR,
                                .abi_minor = ECC_ABI_V1_MINOR,
                                .config = kv,
                                .n_config = n,
                                .err = err,
                                .err_cap = cap};
}

static ecc_handle_t raw_create(const ecc_plugin_v1_t *t)
{
  static const ecc_kv_v1_t kv[] = {{"minimal.blocks", "8"}, {"minimal.block_size", "64"}};
  char err[256] = "";
  ecc_create_args_v1_t a = raw_args(kv, 2, err, sizeof(err));
  ecc_handle_t h = 0;
  cr_assert_eq(t->create(&a, &h), ECC_OK, "%s", err);
  cr_assert_neq(h, 0);
  return h;
}

/* One entry saved, flushed and polled: ECC_OK, or the first error. */
static int raw_round(const ecc_plugin_v1_t *t, ecc_handle_t h)
{
  static unsigned char buf[64];
  const uint32_t id = 0;
  ecc_save_entry_v1_t e = {"raw", (uint64_t)(uintptr_t)buf, sizeof(buf), &id, 1};
  ecc_completion_v1_t done;
  size_t n = 0;
  int rc = t->save(h, &e, 1);
  if (rc == ECC_OK)
    rc = t->flush(h, NULL);
  if (rc == ECC_OK)
    rc = t->poll(h, &done, 1, &n);
  return rc == ECC_OK && n != 1 ? ECC_ERR_TRANSFER : rc;
}

static void expect_all_closed(const ecc_plugin_v1_t *t, ecc_handle_t h)
{
  static unsigned char buf[64];
  const uint32_t id = 0;
  ecc_save_entry_v1_t e = {"k", (uint64_t)(uintptr_t)buf, sizeof(buf), &id, 1};
  ecc_load_entry_v1_t l = {1, &id, 1, (uint64_t)(uintptr_t)buf, sizeof(buf)};
  ecc_completion_v1_t done;
  ecc_stats_v1_t st = {.struct_size = sizeof(st)};
  ecc_info_v1_t info = {.struct_size = sizeof(info)};
  char text[64];
  size_t n = 5;
  cr_expect_eq(t->save(h, &e, 1), ECC_ERR_CLOSED);
  cr_expect_eq(t->flush(h, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(t->load(h, &l, 1, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(t->poll(h, &done, 1, &n), ECC_ERR_CLOSED);
  cr_expect_eq(n, 0);
  cr_expect_eq(t->stats(h, &st), ECC_ERR_CLOSED);
  cr_expect_eq(t->last_error(h, text, sizeof(text)), ECC_ERR_CLOSED);
  cr_expect_eq(t->describe(h, &info), ECC_ERR_CLOSED);
  cr_expect_eq(t->shutdown(h), ECC_ERR_CLOSED);
}

Test(minimal_abi, create_refuses_bad_arguments)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  char err[256] = "";
  ecc_handle_t h = 77;
  ecc_create_args_v1_t a = raw_args(NULL, 0, err, sizeof(err));
  cr_expect_eq(t->create(NULL, &h), ECC_ERR_INVALID);
  cr_expect_eq(h, 0);
  cr_expect_eq(t->create(&a, NULL), ECC_ERR_INVALID);
  a.struct_size = 4;
  h = 77;
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INVALID);
  cr_expect_eq(h, 0);
  a = raw_args(NULL, 0, err, sizeof(err));
  a.abi_major = 2;
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INCOMPATIBLE);
  char want[32];
  snprintf(want, sizeof(want), "ABI 2.%d", ECC_ABI_V1_MINOR);
  cr_expect(strstr(err, want) != NULL, "%s", err);
  a = raw_args(NULL, 0, err, sizeof(err));
  a.abi_minor = ECC_ABI_V1_MINOR + 1;
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INCOMPATIBLE);
  ecc_host_services_v1_t short_host = {.struct_size = 4};
  a = raw_args(NULL, 0, err, sizeof(err));
  a.host = &short_host;
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INVALID);
  a = raw_args(NULL, 3, err, sizeof(err));
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INVALID);
  const ecc_kv_v1_t no_value[] = {{"minimal.blocks", NULL}};
  a = raw_args(no_value, 1, err, sizeof(err));
  cr_expect_eq(t->create(&a, &h), ECC_ERR_INVALID);
  const ecc_kv_v1_t twice[] = {{"minimal.blocks", "4"}, {"minimal.blocks", "5"}};
  a = raw_args(twice, 2, err, sizeof(err));
  cr_expect_eq(t->create(&a, &h), ECC_ERR_CONFIG);
  cr_expect(strstr(err, "minimal.blocks is given twice") != NULL, "%s", err);
  cr_expect_eq(h, 0);
  cr_expect_eq(t->validate(twice, 2, err, sizeof(err)), ECC_ERR_CONFIG);
  cr_expect_eq(t->validate(NULL, 1, err, sizeof(err)), ECC_ERR_INVALID);
  cr_expect_eq(t->validate(NULL, 0, err, sizeof(err)), ECC_OK);
  cr_expect(strstr(err, "64 blocks of 4096 B") != NULL, "%s", err);
  dlclose(dl);
}

Test(minimal_abi, shutdown_twice_and_calls_after_it_are_closed)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  ecc_handle_t h = raw_create(t);
  cr_assert_eq(raw_round(t, h), ECC_OK);
  cr_expect_eq(t->shutdown(h), ECC_OK);
  expect_all_closed(t, h);
  expect_all_closed(t, 0);
  expect_all_closed(t, 12345);
  expect_all_closed(t, h + 1);
  /* A new connector in the freed slot gets another value. */
  ecc_handle_t again = raw_create(t);
  cr_expect_neq(again, h);
  expect_all_closed(t, h);
  cr_expect_eq(t->shutdown(again), ECC_OK);
  dlclose(dl);
}

Test(minimal_abi, handles_stay_invalid_after_the_plugin_is_loaded_again)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  ecc_handle_t old = raw_create(t);
  cr_assert_eq(t->shutdown(old), ECC_OK);
  cr_assert_eq(dlclose(dl), 0);
  cr_assert_null(dlopen(MIN_PATH, RTLD_NOW | RTLD_NOLOAD), "dlclose left the plugin loaded");
  t = raw_open(&dl);
  ecc_handle_t fresh = raw_create(t);
  cr_expect_neq(fresh, old);
  expect_all_closed(t, old);
  cr_expect_eq(raw_round(t, fresh), ECC_OK);
  cr_expect_eq(t->shutdown(fresh), ECC_OK);
  dlclose(dl);
}

/* What a forked child sees; returns its exit status: 0 when it was right. */
static int child_view(const ecc_plugin_v1_t *t, ecc_handle_t inherited)
{
  int wrong = 0;
  wrong += raw_round(t, inherited) != ECC_ERR_CLOSED;
  wrong += t->shutdown(inherited) != ECC_ERR_CLOSED;
  char err[256] = "";
  ecc_create_args_v1_t a = raw_args(NULL, 0, err, sizeof(err));
  ecc_handle_t own = 0;
  wrong += t->create(&a, &own) != ECC_OK;
  wrong += own == inherited;
  wrong += raw_round(t, own) != ECC_OK;
  wrong += t->shutdown(own) != ECC_OK;
  return wrong;
}

Test(minimal_abi, a_forked_child_cannot_use_the_parents_handle)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  ecc_handle_t h = raw_create(t);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0)
    _exit(child_view(t, h));
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "the child saw %d answers it should not have", WEXITSTATUS(status));
  cr_expect_eq(raw_round(t, h), ECC_OK, "the parent's handle was disturbed");
  cr_expect_eq(t->shutdown(h), ECC_OK);
  dlclose(dl);
}

/* ---- threads --------------------------------------------------------------- */

#define SAVERS 4
#define PER_SAVER 300

struct race {
  const ecc_plugin_v1_t *t;
  ecc_handle_t h;
  int index;
  int refused; /* calls answered other than ECC_OK or ECC_ERR_CLOSED */
};

static void *saver(void *arg)
{
  struct race *r = arg;
  static unsigned char buf[64];
  const uint32_t id = (uint32_t)r->index;
  for (int i = 0; i < PER_SAVER; i++) {
    char key[32];
    snprintf(key, sizeof(key), "s%d-%d", r->index, i);
    ecc_save_entry_v1_t e = {key, (uint64_t)(uintptr_t)buf, sizeof(buf), &id, 1};
    int rc = r->t->save(r->h, &e, 1);
    if (rc == ECC_OK)
      rc = r->t->flush(r->h, NULL);
    while (rc == ECC_ERR_BUSY) {
      sched_yield();
      rc = r->t->flush(r->h, NULL);
    }
    if (rc != ECC_OK)
      r->refused++;
  }
  return NULL;
}

/* Collects every completion: each key exactly once, batches in order. */
static void collect(const ecc_plugin_v1_t *t, ecc_handle_t h, pthread_t *threads)
{
  static bool seen[SAVERS][PER_SAVER];
  size_t total = 0;
  uint64_t last_batch = 0;
  while (total < SAVERS * PER_SAVER) {
    ecc_completion_v1_t done[32];
    size_t n = 0;
    cr_assert_eq(t->poll(h, done, 32, &n), ECC_OK);
    for (size_t i = 0; i < n; i++) {
      int s = -1, k = -1;
      cr_assert_eq(sscanf(done[i].key, "s%d-%d", &s, &k), 2, "key '%s'", done[i].key);
      cr_assert(!seen[s][k], "%s was reported twice", done[i].key);
      seen[s][k] = true;
      cr_assert_geq(done[i].batch, last_batch, "batch %llu after %llu",
                    (unsigned long long)done[i].batch, (unsigned long long)last_batch);
      last_batch = done[i].batch;
    }
    total += n;
    if (n == 0)
      sched_yield();
  }
  for (int i = 0; i < SAVERS; i++)
    pthread_join(threads[i], NULL);
}

Test(minimal_abi, savers_and_a_poller_on_one_handle)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  ecc_handle_t h = raw_create(t);
  struct race r[SAVERS];
  pthread_t threads[SAVERS];
  for (int i = 0; i < SAVERS; i++) {
    r[i] = (struct race){.t = t, .h = h, .index = i};
    cr_assert_eq(pthread_create(&threads[i], NULL, saver, &r[i]), 0);
  }
  collect(t, h, threads);
  for (int i = 0; i < SAVERS; i++)
    cr_expect_eq(r[i].refused, 0, "saver %d was refused %d times", i, r[i].refused);
  size_t n = 1;
  ecc_completion_v1_t extra;
  cr_expect_eq(t->poll(h, &extra, 1, &n), ECC_OK);
  cr_expect_eq(n, 0);
  cr_expect_eq(t->shutdown(h), ECC_OK);
  dlclose(dl);
}

/* Until shutdown turns it away; BUSY is back-pressure, not a refusal. */
static void *caller_until_closed(void *arg)
{
  struct race *r = arg;
  static unsigned char buf[64];
  const uint32_t id = (uint32_t)r->index;
  ecc_save_entry_v1_t e = {"racer", (uint64_t)(uintptr_t)buf, sizeof(buf), &id, 1};
  for (;;) {
    ecc_completion_v1_t done[4];
    size_t n = 0;
    int rcs[3] = {r->t->save(r->h, &e, 1), r->t->flush(r->h, NULL), r->t->poll(r->h, done, 4, &n)};
    for (int i = 0; i < 3; i++) {
      if (rcs[i] == ECC_ERR_CLOSED)
        return NULL;
      if (rcs[i] != ECC_OK && rcs[i] != ECC_ERR_BUSY)
        r->refused++;
    }
  }
}

Test(minimal_abi, shutdown_racing_with_callers)
{
  void *dl;
  const ecc_plugin_v1_t *t = raw_open(&dl);
  for (int round = 0; round < 20; round++) {
    ecc_handle_t h = raw_create(t);
    struct race r[3];
    pthread_t threads[3];
    for (int i = 0; i < 3; i++) {
      r[i] = (struct race){.t = t, .h = h, .index = i};
      cr_assert_eq(pthread_create(&threads[i], NULL, caller_until_closed, &r[i]), 0);
    }
    usleep(1000);
    cr_expect_eq(t->shutdown(h), ECC_OK);
    for (int i = 0; i < 3; i++) {
      pthread_join(threads[i], NULL);
      cr_expect_eq(r[i].refused, 0, "a call racing shutdown got neither OK nor CLOSED");
    }
  }
  dlclose(dl);
}
