/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_abi_rules.c - the shm plugin's table against the rules the ABI header
 * states for every function: the handle is judged first, structs the host
 * hands over are written as far as both sides know them, poll leaves
 * *n_out at 0 on an error, last_error with no room writes nothing.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ecc_plugin.h"
#include "tests/helpers.h"

static char dir[64];
static void *dl;
static const ecc_plugin_t *t;

static void setup(void)
{
  snprintf(dir, sizeof(dir), "/dev/shm/eccabi-XXXXXX");
  cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
  dl = dlopen(ECC_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(dl, "%s", dlerror());
  t = dlsym(dl, ECC_PLUGIN_SYMBOL);
  cr_assert_not_null(t);
}

static void teardown(void)
{
  dlclose(dl);
  th_remove_tree(dir);
}

TestSuite(abi_rules, .init = setup, .fini = teardown, .timeout = 30);

static ecc_handle_t create(void)
{
  ecc_kv_t kv[] = {{"region.name", th_region_name()},
                   {"region.dir", dir},
                   {"region.block_size", "64"},
                   {"region.size", "4KiB"},
                   {"engine.type", "host"}};
  char err[256] = "";
  ecc_create_args_t args = {.struct_size = sizeof(args),
                            .abi_major = ECC_ABI_MAJOR,
                            .abi_minor = ECC_ABI_MINOR,
                            .config = kv,
                            .n_config = sizeof(kv) / sizeof(kv[0]),
                            .err = err,
                            .err_cap = sizeof(err)};
  ecc_handle_t h = 0;
  cr_assert_eq(t->create(&args, &h), ECC_OK, "%s", err);
  return h;
}

Test(abi_rules, a_closed_handle_wins_over_a_bad_argument)
{
  ecc_handle_t h = create();
  cr_assert_eq(t->shutdown(h), ECC_OK);
  size_t n = 7;
  cr_expect_eq(t->stats(h, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(t->describe(h, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(t->last_error(h, NULL, 16), ECC_ERR_CLOSED);
  cr_expect_eq(t->poll(h, NULL, 4, &n), ECC_ERR_CLOSED);
  cr_expect_eq(t->save(h, NULL, 3), ECC_ERR_CLOSED);
  cr_expect_eq(t->load(h, NULL, 3, NULL), ECC_ERR_CLOSED);
  cr_expect_eq(t->flush(h, (void *)1), ECC_ERR_CLOSED);
}

Test(abi_rules, structs_are_written_as_far_as_the_caller_knows_them)
{
  ecc_handle_t h = create();
  ecc_stats_t st;
  memset(&st, 0x5a, sizeof(st));
  st.struct_size = 2; /* cannot even hold itself */
  cr_expect_eq(t->stats(h, &st), ECC_ERR_INVALID);
  /* An older caller that knew only the save counters. */
  st.struct_size = offsetof(ecc_stats_t, load);
  cr_expect_eq(t->stats(h, &st), ECC_OK);
  cr_expect_eq(st.struct_size, offsetof(ecc_stats_t, load), "struct_size was not kept");
  cr_expect_eq(st.save.transfers, 0);
  cr_expect_eq(st.load.transfers, 0x5a5a5a5a5a5a5a5aull, "stats wrote past the caller's size");
  ecc_info_t info;
  memset(&info, 0x5a, sizeof(info));
  info.struct_size = offsetof(ecc_info_t, block_size);
  cr_expect_eq(t->describe(h, &info), ECC_OK);
  cr_expect_eq(info.creator, 1);
  cr_expect_eq(info.block_size, 0x5a5a5a5a5a5a5a5aull, "describe wrote past the caller's size");
  /* A newer caller's larger struct: the plugin's part only. */
  unsigned char big[sizeof(ecc_info_t) + 32];
  memset(big, 0x5a, sizeof(big));
  ((ecc_info_t *)big)->struct_size = sizeof(big);
  cr_expect_eq(t->describe(h, (ecc_info_t *)big), ECC_OK);
  cr_expect_eq(((ecc_info_t *)big)->struct_size, sizeof(big));
  for (size_t i = sizeof(ecc_info_t); i < sizeof(big); i++)
    cr_expect_eq(big[i], 0x5a, "describe wrote byte %zu, past its own struct", i);
  cr_assert_eq(t->shutdown(h), ECC_OK);
}

Test(abi_rules, poll_errors_leave_no_count_and_last_error_may_have_no_room)
{
  ecc_handle_t h = create();
  size_t n = 7;
  cr_expect_eq(t->poll(h, NULL, 4, &n), ECC_ERR_INVALID);
  cr_expect_eq(n, 0, "poll left *n_out at %zu after an error", n);
  cr_expect_eq(t->last_error(h, NULL, 0), ECC_OK);
  char buf[128] = "x";
  cr_expect_eq(t->last_error(h, NULL, 8), ECC_ERR_INVALID);
  cr_expect_eq(t->last_error(h, buf, sizeof(buf)), ECC_OK);
  cr_expect(strstr(buf, "poll") != NULL, "the refusal replaced the error asked for: %s", buf);
  cr_assert_eq(t->shutdown(h), ECC_OK);
}
