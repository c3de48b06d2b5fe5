/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_block_saves.c - saves by block ids on a region with a directory: the
 * reservations they write are held from the save until the copy has
 * completed (an abort meanwhile is refused, so the run is never reserved
 * and published by another producer under the copy), only this process's
 * own reservations may be written so, and a refused call holds nothing.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/helpers.h"

#define BS 1024u
#define NB 32u
#define DIR_ON "[directory]\nenabled = true\n"

static ecc_connector_t *open_dir(const char *region)
{
  return th_open("both", region, BS, NB, DIR_ON);
}

static const char *last_error(ecc_connector_t *c)
{
  static char err[512];
  err[0] = '\0';
  ecc_last_error(c, err, sizeof(err));
  return err;
}

static ecc_entry_t reserve_ok(ecc_connector_t *c, const char *key, uint64_t nbytes)
{
  ecc_entry_t e;
  int rc = ecc_reserve(c, key, nbytes, &e);
  cr_assert_eq(rc, ECC_OK, "reserve %s: %d %s", key, rc, last_error(c));
  cr_assert_eq(e.state, ECC_ENTRY_RESERVED, "reserve %s: state %d", key, e.state);
  return e;
}

/* The entry's block ids in entry order; returns how many. */
static uint32_t ids_of(const ecc_entry_t *e, uint32_t *ids)
{
  uint32_t n = 0;
  for (uint32_t i = 0; i < e->n_extents; i++)
    for (uint32_t b = 0; b < e->extents[i].n_blocks; b++)
      ids[n++] = e->extents[i].first_block + b;
  return n;
}

static ecc_completion_t poll_one(ecc_connector_t *c)
{
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 5000), 1, "no completion");
  return done;
}

static void save_reserved_ok(ecc_connector_t *c, uint64_t token, const void *src, uint64_t nbytes)
{
  ecc_save_reserved_t s = {token, (uint64_t)(uintptr_t)src, nbytes};
  cr_assert_eq(ecc_save_reserved(c, &s, 1), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  cr_assert_eq(poll_one(c).status, ECC_OK);
}

/* Looks key up, loads it into dst and says whether it holds want. */
static bool holds(ecc_connector_t *c, const char *key, void *dst, const void *want, uint64_t nbytes)
{
  ecc_entry_t f;
  const char *keys[1] = {key};
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &f), ECC_OK);
  cr_assert_eq(f.state, ECC_ENTRY_READY, "%s is not ready", key);
  memset(dst, 0, nbytes);
  ecc_load_pinned_t l = {1, f.token, (uint64_t)(uintptr_t)dst, nbytes};
  cr_assert_eq(ecc_load_pinned(c, &l, 1, NULL), ECC_OK, "%s", last_error(c));
  cr_assert_eq(poll_one(c).status, ECC_OK, "the load of %s failed", key);
  return memcmp(dst, want, nbytes) == 0;
}

Test(block_saves, an_abort_waits_for_the_copy_so_the_run_is_not_reused_under_it)
{
  const char *region = th_region_name();
  ecc_connector_t *first = open_dir(region), *other = open_dir(region);
  static uint8_t junk[NB * BS], good[NB * BS], got[NB * BS];
  uint64_t all = sizeof(junk);
  th_fill(junk, all, 1);
  th_fill(good, all, 2);
  uint32_t ids[NB];
  /* A takes the whole region: B can only ever get A's blocks. */
  ecc_entry_t a = reserve_ok(first, "A", all);
  ecc_save_entry_t s = {"A", (uint64_t)(uintptr_t)junk, all, ids, ids_of(&a, ids)};
  cr_assert_eq(ecc_save(first, &s, 1), ECC_OK, "%s", last_error(first));
  /* A's encoder failed: its owner gives it up before flushing. */
  int aborted = ecc_abort_reserved(first, a.token);
  cr_expect_eq(aborted, ECC_ERR_BUSY,
               "a reservation was aborted with a save into its blocks queued");
  ecc_entry_t b;
  if (ecc_reserve(other, "B", all, &b) == ECC_OK && b.state == ECC_ENTRY_RESERVED)
    save_reserved_ok(other, b.token, good, all);
  /* The first connector's step goes on: its copy runs now. */
  cr_assert_eq(ecc_flush(first, NULL), ECC_OK);
  cr_assert_eq(poll_one(first).status, ECC_OK);
  if (aborted != ECC_OK) {
    cr_assert_eq(ecc_abort_reserved(first, a.token), ECC_OK, "the copy done, A is still held: %s",
                 last_error(first));
    save_reserved_ok(other, reserve_ok(other, "B", all).token, good, all);
  }
  cr_assert(holds(other, "B", got, good, all), "B loads with ECC_OK but holds A's bytes");
  cr_assert_eq(ecc_close(first), ECC_OK);
  cr_assert_eq(ecc_close(other), ECC_OK);
}

Test(block_saves, the_hold_ends_with_the_copy_and_publishes_nothing)
{
  ecc_connector_t *c = open_dir(th_region_name());
  static uint8_t src[4 * BS];
  th_fill(src, sizeof(src), 3);
  uint32_t ids[NB];
  ecc_entry_t r = reserve_ok(c, "R", sizeof(src));
  uint32_t n = ids_of(&r, ids);
  cr_assert_eq(n, 4);
  /* Two saves of one step write halves of one reservation. */
  ecc_save_entry_t halves[2] = {{"R0", (uint64_t)(uintptr_t)src, 2 * BS, ids, 2},
                                {"R1", (uint64_t)(uintptr_t)(src + 2 * BS), 2 * BS, ids + 2, 2}};
  cr_assert_eq(ecc_save(c, &halves[0], 1), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_save(c, &halves[1], 1), ECC_OK, "%s", last_error(c));
  ecc_save_reserved_t sr = {r.token, (uint64_t)(uintptr_t)src, sizeof(src)};
  cr_assert_eq(ecc_save_reserved(c, &sr, 1), ECC_ERR_BUSY,
               "a reservation written by block ids was saved again by its token");
  cr_assert_eq(ecc_abort_reserved(c, r.token), ECC_ERR_BUSY);
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  /* Flushed, not yet complete for the host: a second batch into it waits. */
  cr_assert_eq(ecc_save(c, &halves[0], 1), ECC_ERR_BUSY,
               "two batches in flight write one reservation");
  cr_assert_not_null(strstr(last_error(c), "poll first"), "%s", last_error(c));
  ecc_completion_t done[2];
  cr_assert_eq(th_poll_until(c, done, 2, 5000), 2);
  cr_assert_eq(done[0].status, ECC_OK);
  cr_assert_eq(done[1].status, ECC_OK);
  const char *keys[1] = {"R"};
  ecc_entry_t f;
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &f), ECC_OK);
  cr_assert_eq(f.state, ECC_ENTRY_ABSENT, "a save by block ids published its reservation");
  cr_assert_eq(ecc_abort_reserved(c, r.token), ECC_OK, "the hold outlived the copy: %s",
               last_error(c));
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(block_saves, a_refused_call_holds_nothing_and_names_the_block)
{
  ecc_connector_t *c = open_dir(th_region_name());
  static uint8_t src[2 * BS];
  uint32_t ids[NB];
  ecc_entry_t mine = reserve_ok(c, "mine", BS);
  ids_of(&mine, ids);
  ecc_entry_t ready = reserve_ok(c, "ready", BS);
  ids_of(&ready, ids + 1);
  save_reserved_ok(c, ready.token, src, BS);
  /* Entry 0 is good, entry 1 names a published entry's block. */
  ecc_save_entry_t s[2] = {{"a", (uint64_t)(uintptr_t)src, BS, ids, 1},
                           {"b", (uint64_t)(uintptr_t)src, BS, ids + 1, 1}};
  cr_assert_eq(ecc_save(c, s, 2), ECC_ERR_RANGE, "a published entry was written by block id");
  char want[128];
  snprintf(want, sizeof(want), "entry 1: block %u is in key 'ready', which is published", ids[1]);
  cr_assert_not_null(strstr(last_error(c), want), "%s", last_error(c));
  cr_assert_eq(ecc_abort_reserved(c, mine.token), ECC_OK, "a refused save kept its claim");
  /* The save queued nothing. */
  cr_assert_eq(ecc_flush(c, NULL), ECC_OK);
  size_t n = 1;
  ecc_completion_t done;
  cr_assert_eq(ecc_poll(c, &done, 1, &n), ECC_OK);
  cr_assert_eq(n, 0);
  cr_assert_eq(ecc_close(c), ECC_OK);
}

Test(block_saves, shutdown_gives_back_the_hold_of_a_save_never_flushed)
{
  const char *region = th_region_name();
  ecc_connector_t *keeper = open_dir(region), *c = open_dir(region);
  static uint8_t src[BS];
  uint32_t id;
  ecc_entry_t r = reserve_ok(c, "R", BS);
  ids_of(&r, &id);
  ecc_save_entry_t s = {"R", (uint64_t)(uintptr_t)src, BS, &id, 1};
  cr_assert_eq(ecc_save(c, &s, 1), ECC_OK, "%s", last_error(c));
  cr_assert_eq(ecc_close(c), ECC_OK);
  /* The reservation is this process's: the keeper may give it up. */
  cr_assert_eq(ecc_abort_reserved(keeper, r.token), ECC_OK, "%s", last_error(keeper));
  cr_assert_eq(ecc_close(keeper), ECC_OK);
}

/* ---- another process's reservation ---- */

/* What the test asks the intruder: save `n` blocks from `first` by id (save
 * 1), or flush and poll (save 0). */
struct ask {
  uint32_t save, first, n;
};

struct answer {
  int rc;
  char err[256];
};

/* A process with its own connector on the region that saves by block ids
 * wherever it is told to. */
static int intruder(const char *ini, int rd, int wr)
{
  ecc_connector_t *c = NULL;
  char err[256];
  if (ecc_open(ini, NULL, &c, err, sizeof(err)) != ECC_OK)
    return 10;
  static uint8_t junk[NB * BS];
  th_fill(junk, sizeof(junk), 99);
  uint32_t ids[NB];
  struct ask q;
  bool queued = false;
  while (read(rd, &q, sizeof(q)) == (ssize_t)sizeof(q)) {
    struct answer a = {ECC_OK, ""};
    if (q.save) {
      for (uint32_t i = 0; i < q.n && i < NB; i++)
        ids[i] = q.first + i;
      ecc_save_entry_t s = {"intruder", (uint64_t)(uintptr_t)junk, (uint64_t)q.n * BS, ids, q.n};
      a.rc = ecc_save(c, &s, 1);
      queued = a.rc == ECC_OK;
    } else if (queued) {
      ecc_completion_t done;
      a.rc = ecc_flush(c, NULL);
      if (a.rc == ECC_OK)
        a.rc = th_poll_until(c, &done, 1, 5000) == 1 ? done.status : ECC_ERR_TRANSFER;
    }
    ecc_last_error(c, a.err, sizeof(a.err));
    if (write(wr, &a, sizeof(a)) != (ssize_t)sizeof(a))
      return 11;
  }
  return ecc_close(c) == ECC_OK ? 0 : 12;
}

__attribute__((constructor)) static void child_entry(void)
{
  const char *role, *ini;
  int rd, wr;
  if (th_child_args(&role, &ini, &rd, &wr) && strcmp(role, "intruder") == 0)
    _exit(intruder(ini, rd, wr));
}

static struct answer ask(int to, int from, struct ask q)
{
  struct answer a = {ECC_ERR_SYSTEM, ""};
  cr_assert_eq(write(to, &q, sizeof(q)), (ssize_t)sizeof(q));
  cr_assert_eq(read(from, &a, sizeof(a)), (ssize_t)sizeof(a));
  return a;
}

Test(block_saves, another_process_may_not_write_a_reservation_by_block_ids)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, DIR_ON);
  ecc_connector_t *c = th_open_as(ini, "both");
  int down[2], up[2];
  cr_assert_eq(pipe2(down, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(up, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("intruder", ini, down[0], up[1]);
  close(down[0]);
  close(up[1]);

  static uint8_t good[4 * BS], got[4 * BS];
  th_fill(good, sizeof(good), 5);
  ecc_entry_t r = reserve_ok(c, "mine", sizeof(good));
  cr_assert_eq(r.n_extents, 1);
  struct answer a = ask(down[1], up[0], (struct ask){1, r.extents[0].first_block, 4});
  cr_expect_eq(a.rc, ECC_ERR_RANGE, "another process saved into this one's reservation (%d)", a.rc);
  char want[64];
  snprintf(want, sizeof(want), "reserved by process %d, not this one", (int)getpid());
  cr_expect_not_null(strstr(a.err, want), "%s", a.err);
  /* The owner saves and publishes; then the intruder's step goes on. */
  save_reserved_ok(c, r.token, good, sizeof(good));
  ask(down[1], up[0], (struct ask){0, 0, 0});
  cr_assert(holds(c, "mine", got, good, sizeof(good)),
            "the entry loads with ECC_OK but holds another process's bytes");

  close(down[1]);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "intruder status %d", status);
  close(up[0]);
  cr_assert_eq(ecc_close(c), ECC_OK);
}
