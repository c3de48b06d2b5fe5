/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tokens.c - a directory token says what it is: a reservation's token
 * given where a pin's is wanted (or the reverse) is refused with
 * ECC_ERR_CLOSED naming both kinds and changes nothing, through the ABI
 * and through the connector's calls that a plugin built on it uses.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/settle.h"
#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 32u
#define DIR_ON "[directory]\nenabled = true\n"

static const char *const RES = "is a reservation (from reserve), not a pin (from lookup)";
static const char *const PIN = "is a pin (from lookup), not a reservation (from reserve)";

static void expect_refused(ecc_connector_t *c, int rc, const char *says)
{
  char err[512] = "";
  ecc_last_error(c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CLOSED, "a token of the other kind was taken (%d): %s", rc, err);
  cr_expect_not_null(strstr(err, says), "'%s' lacks '%s'", err, says);
}

static ecc_entry_t reserve_ok(ecc_connector_t *c, const char *key, uint64_t nbytes)
{
  ecc_entry_t e;
  cr_assert_eq(ecc_reserve(c, key, nbytes, &e), ECC_OK);
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED);
  return e;
}

static void publish(ecc_connector_t *c, uint64_t token, const void *src, uint64_t nbytes)
{
  ecc_save_reserved_t s = {token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
  cr_assert_eq(done.status, ECC_OK);
}

static ecc_entry_t pin(ecc_connector_t *c, const char *key)
{
  ecc_entry_t f;
  const char *keys[1] = {key};
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &f), ECC_OK);
  cr_assert_eq(f.state, ECC_ENTRY_READY);
  return f;
}

/* Entry slots and pin slots are numbered alike: the second reservation
 * and the second pin of a fresh directory have slot 1 both. */
Test(tokens, a_reservation_token_is_no_pin)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, DIR_ON);
  static uint8_t x[BS], dst[BS];
  th_fill(x, BS, 1);
  publish(c, reserve_ok(c, "X", BS).token, x, BS);
  ecc_entry_t y = reserve_ok(c, "Y", BS);
  ecc_entry_t p0 = pin(c, "X"), p1 = pin(c, "X");
  cr_expect_neq(y.token, p1.token, "a reservation and a pin have the same token");

  ecc_load_pinned_t l = {7, y.token, (uint64_t)(uintptr_t)dst, BS};
  int rc = ecc_load_pinned(c, &l, 1, NULL);
  expect_refused(c, rc, RES);
  ecc_completion_t done;
  if (rc == ECC_OK) {
    cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1);
    cr_assert(done.status != ECC_OK || memcmp(dst, x, BS) != 0,
              "Y's reservation token loaded X's bytes with ECC_OK");
  }
  expect_refused(c, ecc_unpin(c, y.token), RES);
  cr_assert_eq(th_stats(c).directory.pins_live, 2, "a refused unpin released a pin");
  size_t n = 1;
  cr_assert_eq(ecc_poll(c, &done, 1, &n), ECC_OK);
  cr_assert_eq(n, 0, "a refused load was queued");
  cr_assert_eq(ecc_unpin(c, p0.token), ECC_OK);
  cr_assert_eq(ecc_unpin(c, p1.token), ECC_OK);
  cr_assert_eq(ecc_abort_reserved(c, y.token), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(tokens, a_pin_token_is_no_reservation)
{
  ecc_connector_t *c = th_open("both", th_region_name(), BS, NB, DIR_ON);
  static uint8_t x[BS];
  th_fill(x, BS, 2);
  publish(c, reserve_ok(c, "X", BS).token, x, BS);
  ecc_entry_t y = reserve_ok(c, "Y", BS);
  ecc_entry_t p0 = pin(c, "X"), p1 = pin(c, "X");

  expect_refused(c, ecc_abort_reserved(c, p1.token), PIN);
  ecc_save_reserved_t s = {p0.token, (uint64_t)(uintptr_t)x, BS};
  expect_refused(c, ecc_save_reserved(c, &s, 1), PIN);
  s.token = p1.token;
  expect_refused(c, ecc_save_reserved(c, &s, 1), PIN);
  /* Y is still reserved, and X still pinned twice. */
  ecc_directory_stats_t d = th_stats(c).directory;
  cr_assert_eq(d.entries, 2, "a pin token aborted a reservation");
  cr_assert_eq(d.pins_live, 2);
  publish(c, y.token, x, BS);
  cr_assert_eq(ecc_unpin(c, p0.token), ECC_OK);
  cr_assert_eq(ecc_unpin(c, p1.token), ECC_OK);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

/* ---- the connector's own calls, which plugins/ucx passes tokens through ---- */

static struct conn *open_conn(const char *region)
{
  ecc_kv_v1_t kv[] = {{"region.name", region},
                      {"region.block_size", "1KiB"},
                      {"region.size", "32KiB"},
                      {"engine.type", "host"},
                      {"directory.enabled", "true"}};
  struct plugin_config cfg;
  char err[256] = "";
  cr_assert_eq(config_parse(kv, sizeof(kv) / sizeof(kv[0]), &cfg, err, sizeof(err)), ECC_OK, "%s",
               err);
  struct conn *c = NULL;
  cr_assert_eq(conn_create(&cfg, NULL, err, sizeof(err), &c), ECC_OK, "%s", err);
  return c;
}

static void expect_conn_refused(struct conn *c, int rc, const char *says)
{
  char err[512] = "";
  conn_last_error(c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CLOSED, "a token of the other kind was taken (%d): %s", rc, err);
  cr_expect_not_null(strstr(err, says), "'%s' lacks '%s'", err, says);
}

Test(tokens, the_connector_calls_of_a_plugin_built_on_it_check_the_kind)
{
  struct conn *c = open_conn(th_region_name());
  static uint8_t x[BS], dst[BS];
  ecc_entry_t r;
  cr_assert_eq(conn_reserve(c, "X", BS, &r), ECC_OK);
  ecc_save_reserved_t s = {r.token, (uint64_t)(uintptr_t)x, BS};
  cr_assert_eq(conn_save_reserved(c, &s, 1), ECC_OK);
  cr_assert_eq(conn_flush(c, NULL), ECC_OK);
  ecc_completion_t done;
  size_t n = 0;
  for (int i = 0; i < 5000 && n == 0; i++) {
    cr_assert_eq(conn_poll(c, &done, 1, &n), ECC_OK);
    if (n == 0)
      usleep(1000);
  }
  cr_assert_eq(n, 1);
  ecc_entry_t y, p0, p1;
  const char *keys[1] = {"X"};
  cr_assert_eq(conn_reserve(c, "Y", BS, &y), ECC_OK);
  cr_assert_eq(conn_lookup(c, keys, 1, 1, &p0), ECC_OK);
  cr_assert_eq(conn_lookup_for_peer(c, keys, 1, 1, &p1), ECC_OK);

  expect_conn_refused(c, conn_publish_written(c, p1.token), PIN);
  uint32_t *hold = NULL;
  ecc_load_pinned_v1_t held = {3, p1.token, (uint64_t)(uintptr_t)dst, BS};
  expect_conn_refused(c, conn_load_held(c, &held, NULL, &hold), PIN);
  cr_assert_null(hold);
  expect_conn_refused(c, conn_unpin_ranks(c, y.token, 1), RES);
  expect_conn_refused(c, conn_unpin(c, y.token), RES);
  /* Settling a token of the other kind settles nothing and is no success. */
  cr_assert_eq(settle_record(&c->dir, ECC_DIR_LOAD, y.token, ECC_OK), ECC_ERR_CLOSED);
  cr_assert_eq(settle_record(&c->dir, ECC_DIR_SAVE, p1.token, ECC_OK), ECC_ERR_CLOSED);
  ecc_directory_stats_v1_t d;
  ecc_cache_stats_v1_t k;
  directory_counters(c, &d, &k);
  cr_assert_eq(d.entries, 2, "a refused call ended a reservation");
  cr_assert_eq(d.pins_live, 2, "a refused call released a pin");

  cr_assert_eq(conn_publish_written(c, y.token), ECC_OK);
  cr_assert_eq(conn_unpin_ranks(c, p0.token, 1), ECC_OK);
  cr_assert_eq(conn_unpin(c, p1.token), ECC_OK);
  conn_destroy(c);
}
