/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_directory.c - the shared directory (directory.h) on its own: the
 * header check, each call's contract, the clock allocator's order, stale
 * refs, a long randomized run, many processes at once, and SIGKILL.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/directory/directory.h"

TestSuite(directory, .timeout = 120);

/* ---- fixtures ---- */

struct fx {
  void *mem;
  size_t bytes;
  struct dir_params p;
  struct dir d;
};

static char why[512];

/* A directory in a MAP_SHARED anonymous mapping (so forked children share
 * it), with `extra` more bytes after it for the test's own use. */
static void fx_open(struct fx *f, uint32_t blocks, uint64_t bs, uint32_t entries, uint32_t pins,
                    size_t extra)
{
  memset(f, 0, sizeof(*f));
  f->p = (struct dir_params){.num_blocks = blocks,
                             .block_size = bs,
                             .max_entries = entries,
                             .max_pins = pins,
                             .event_slots = 16 /* the tables are what these tests look at */};
  f->bytes = dir_bytes(&f->p);
  cr_assert_gt(f->bytes, 0);
  f->mem = mmap(NULL, f->bytes + extra, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(f->mem, MAP_FAILED);
  cr_assert_eq(dir_format(f->mem, f->bytes, &f->p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&f->d, f->mem, f->bytes, &f->p, why, sizeof(why)), ECC_OK, "%s", why);
}

static void *fx_extra(struct fx *f)
{
  return (char *)f->mem + f->bytes;
}

static void check(struct dir *d)
{
  int rc = dir_check(d, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "dir_check: %s", why);
}

static struct dir_entry_info reserve_new(struct dir *d, const char *key, uint64_t nbytes)
{
  struct dir_entry_info info;
  int outcome = -1;
  int rc = dir_reserve(d, key, nbytes, &outcome, &info, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "reserve %s: %s", key, why);
  cr_assert_eq(outcome, DIR_RESERVED, "reserve %s: outcome %d", key, outcome);
  return info;
}

static struct dir_entry_info put(struct dir *d, const char *key, uint64_t nbytes)
{
  struct dir_entry_info info = reserve_new(d, key, nbytes);
  cr_assert_eq(dir_publish(d, info.ref, why, sizeof(why)), ECC_OK, "publish %s: %s", key, why);
  info.state = DIR_STATE_READY;
  return info;
}

static struct dir_pin_ref pin_key(struct dir *d, const char *key, uint32_t ranks,
                                  struct dir_entry_info *info)
{
  bool found = false;
  struct dir_pin_ref pin;
  struct dir_entry_info tmp;
  int rc = dir_lookup(d, &key, 1, ranks, &found, info ? info : &tmp, &pin, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "lookup %s: %s", key, why);
  cr_assert(found, "lookup %s: not found", key);
  return pin;
}

struct listing {
  size_t n;
  struct dir_entry_info e[256];
};

static void collect(void *user, const struct dir_entry_info *e)
{
  struct listing *l = user;
  if (l->n < 256)
    l->e[l->n++] = *e;
}

static void list(struct dir *d, struct listing *l)
{
  l->n = 0;
  cr_assert_eq(dir_list(d, collect, l), ECC_OK);
}

/* The listed entry of this key, or NULL. */
static const struct dir_entry_info *listed(const struct listing *l, const char *key)
{
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->e[i].key, key) == 0)
      return &l->e[i];
  return NULL;
}

static bool present(struct dir *d, const char *key)
{
  static struct listing l;
  list(d, &l);
  return listed(&l, key) != NULL;
}

/* fork(), with the child killed when the test process ends, so that a
 * failed assertion leaves no worker looping behind it. */
static pid_t fork_child(void)
{
  pid_t parent = getpid();
  pid_t pid = fork();
  cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
  if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent))
    _exit(99);
  return pid;
}

static struct dir_counters counters(struct dir *d)
{
  struct dir_counters c;
  dir_get_counters(d, &c);
  return c;
}

/* ---- format and attach ---- */

Test(directory, format_and_attach_check_the_header)
{
  struct fx f;
  fx_open(&f, 256, 4096, 0, 0, 0);
  struct dir_params bad = {0};
  cr_expect_eq(dir_bytes(&bad), 0, "zero blocks must be refused");
  struct dir d;
  struct dir_params p = f.p;
  p.num_blocks = 255;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "num_blocks") != NULL, "why: %s", why);
  p = f.p;
  p.block_size = 8192;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "block_size") != NULL, "why: %s", why);
  p = f.p;
  p.max_pins = 7;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "max_pins") != NULL, "why: %s", why);
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes - 64, &f.p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect_eq(dir_format(f.mem, f.bytes - 64, &f.p, why, sizeof(why)), ECC_ERR_RANGE);
  /* Magic gone: not a directory. */
  ((char *)f.mem)[0] ^= 1;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "magic") != NULL, "why: %s", why);
  ((char *)f.mem)[0] ^= 1;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK, "%s", why);
  /* Defaults: num_blocks / 16, at least 64 entries; pins = entries. */
  struct dir_counters c = counters(&d);
  cr_expect_eq(c.blocks_free, 256);
  cr_expect_eq(c.largest_free_run, 256);
  check(&d);
}

/* Offsets only: the same memory mapped twice, at two addresses, is one
 * directory through either. */
Test(directory, two_mappings_at_different_addresses_agree)
{
  struct dir_params p = {.num_blocks = 64, .block_size = 64};
  size_t bytes = dir_bytes(&p);
  int fd = memfd_create("dirtest", MFD_CLOEXEC);
  cr_assert_geq(fd, 0);
  cr_assert_eq(ftruncate(fd, (off_t)bytes), 0);
  void *m1 = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void *m2 = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  cr_assert(m1 != MAP_FAILED && m2 != MAP_FAILED && m1 != m2);
  close(fd);
  struct dir d1, d2;
  cr_assert_eq(dir_format(m1, bytes, &p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&d1, m1, bytes, &p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_attach(&d2, m2, bytes, &p, why, sizeof(why)), ECC_OK, "%s", why);
  struct dir_entry_info e = put(&d1, "both", 200);
  struct dir_entry_info got;
  struct dir_pin_ref pin = pin_key(&d2, "both", 1, &got);
  cr_expect_eq(got.ref.slot, e.ref.slot);
  cr_expect_eq(got.runs[0].first, e.runs[0].first);
  cr_expect_eq(dir_unpin(&d1, pin, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_remove(&d2, "both", why, sizeof(why)), ECC_OK, "%s", why);
  check(&d1);
  check(&d2);
  munmap(m1, bytes);
  munmap(m2, bytes);
}

/* ---- the calls' contracts ---- */

Test(directory, reserve_publish_lookup_unpin_remove)
{
  struct fx f;
  fx_open(&f, 64, 100, 0, 0, 0);
  struct dir_entry_info r = reserve_new(&f.d, "alpha", 250);
  cr_expect_eq(r.n_blocks, 3);
  cr_expect_eq(r.n_runs, 1);
  cr_expect_eq(r.runs[0].count, 3);
  cr_expect_eq(r.state, DIR_STATE_RESERVED);
  cr_expect_eq(r.owner.pid, getpid());
  check(&f.d);
  /* Invisible to lookup while being written. */
  const char *key = "alpha";
  bool found = true;
  struct dir_pin_ref pin = {99, 99};
  struct dir_entry_info info;
  cr_assert_eq(dir_lookup(&f.d, &key, 1, 1, &found, &info, &pin, why, sizeof(why)), ECC_OK);
  cr_expect(!found);
  cr_expect_eq(pin.slot, 0);
  cr_assert_eq(dir_publish(&f.d, r.ref, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_publish(&f.d, r.ref, why, sizeof(why)), ECC_ERR_INVALID);
  check(&f.d);
  pin = pin_key(&f.d, "alpha", 1, &info);
  cr_expect_eq(info.ref.slot, r.ref.slot);
  cr_expect_eq(info.runs[0].first, r.runs[0].first);
  cr_expect_eq(info.pins, 1);
  cr_expect_eq(dir_check_pinned(&f.d, pin, r.runs[0].first, 3, why, sizeof(why)), ECC_OK, "%s",
               why);
  cr_expect_eq(dir_remove(&f.d, "alpha", why, sizeof(why)), ECC_ERR_BUSY);
  cr_expect(strstr(why, "alpha") != NULL, "why: %s", why);
  check(&f.d);
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_check_pinned(&f.d, pin, r.runs[0].first, 1, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_assert_eq(dir_remove(&f.d, "alpha", why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_remove(&f.d, "alpha", why, sizeof(why)), ECC_ERR_RANGE);
  cr_expect(strstr(why, "alpha") != NULL, "why: %s", why);
  cr_assert_eq(dir_lookup(&f.d, &key, 1, 1, &found, &info, &pin, why, sizeof(why)), ECC_OK);
  cr_expect(!found);
  check(&f.d);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.entries, 0);
  cr_expect_eq(c.blocks_free, 64);
  cr_expect_eq(c.reservations, 1);
  cr_expect_eq(c.lookups, 3);
  cr_expect_eq(c.hits, 1);
  cr_expect_eq(c.misses, 2);
  cr_expect_eq(c.pins, 1);
  cr_expect_eq(c.pins_live, 0);
  cr_expect_eq(c.removals, 1);
}

Test(directory, abort_frees_and_bad_arguments_are_refused)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  struct dir_entry_info r = reserve_new(&f.d, "k", 64 * 16);
  cr_expect_eq(counters(&f.d).blocks_free, 0);
  cr_expect_eq(dir_remove(&f.d, "k", why, sizeof(why)), ECC_ERR_BUSY, "being written");
  cr_assert_eq(dir_abort(&f.d, r.ref, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(counters(&f.d).blocks_free, 16);
  cr_expect_eq(dir_publish(&f.d, r.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect(strstr(why, "slot") != NULL, "why: %s", why);
  cr_expect_eq(dir_abort(&f.d, r.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  check(&f.d);
  int outcome;
  struct dir_entry_info info;
  char longkey[DIR_KEY_MAX + 2];
  memset(longkey, 'x', sizeof(longkey) - 1);
  longkey[sizeof(longkey) - 1] = '\0';
  cr_expect_eq(dir_reserve(&f.d, NULL, 1, &outcome, &info, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect_eq(dir_reserve(&f.d, "", 1, &outcome, &info, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect_eq(dir_reserve(&f.d, longkey, 1, &outcome, &info, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect_eq(dir_reserve(&f.d, "k", 0, &outcome, &info, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect_eq(dir_reserve(&f.d, "k", 64 * 16 + 1, &outcome, &info, why, sizeof(why)),
               ECC_ERR_RANGE);
  cr_expect(strstr(why, "17 blocks") != NULL, "why: %s", why);
  longkey[DIR_KEY_MAX] = '\0';
  put(&f.d, longkey, 1);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.reservations, 2);
  cr_expect_eq(c.entries, 1);
  cr_expect_eq(c.full, 0);
  check(&f.d);
}

Test(directory, dedup_reports_writing_then_ready)
{
  struct fx f;
  fx_open(&f, 32, 64, 0, 0, 0);
  struct dir_entry_info r = reserve_new(&f.d, "dup", 100);
  struct dir_entry_info info;
  int outcome = -1;
  cr_assert_eq(dir_reserve(&f.d, "dup", 100, &outcome, &info, why, sizeof(why)), ECC_OK);
  cr_expect_eq(outcome, DIR_FOUND_WRITING);
  cr_expect_eq(info.ref.slot, r.ref.slot);
  cr_expect_eq(info.ref.gen, r.ref.gen);
  cr_assert_eq(dir_publish(&f.d, r.ref, why, sizeof(why)), ECC_OK);
  cr_assert_eq(dir_reserve(&f.d, "dup", 5000, &outcome, &info, why, sizeof(why)), ECC_OK);
  cr_expect_eq(outcome, DIR_FOUND_READY);
  cr_expect_eq(info.state, DIR_STATE_READY);
  cr_expect_eq(info.n_blocks, 2, "the entry as reserved, not as asked again");
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.reservations, 1);
  cr_expect_eq(c.dedup_hits, 2);
  cr_expect_eq(c.entries, 1);
  check(&f.d);
}

Test(directory, stale_refs_are_refused_after_reuse)
{
  struct fx f;
  fx_open(&f, 64, 64, 0, 0, 0);
  struct dir_entry_info first = reserve_new(&f.d, "old", 64);
  cr_assert_eq(dir_abort(&f.d, first.ref, why, sizeof(why)), ECC_OK);
  /* Reserve and abort until the slot is reused. */
  struct dir_entry_info now = {0};
  char key[32];
  for (int i = 0; i < 200; i++) {
    snprintf(key, sizeof(key), "new%d", i);
    now = reserve_new(&f.d, key, 64);
    if (now.ref.slot == first.ref.slot)
      break;
    cr_assert_eq(dir_abort(&f.d, now.ref, why, sizeof(why)), ECC_OK);
  }
  cr_assert_eq(now.ref.slot, first.ref.slot, "the slot was never reused");
  cr_expect_neq(now.ref.gen, first.ref.gen);
  cr_expect_eq(dir_publish(&f.d, first.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect(strstr(why, "generation") != NULL, "why: %s", why);
  cr_expect_eq(dir_abort(&f.d, first.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  /* The live entry was not touched by the stale calls. */
  struct listing l;
  list(&f.d, &l);
  cr_assert_eq(l.n, 1);
  cr_expect_eq(l.e[0].state, DIR_STATE_RESERVED);
  cr_assert_eq(dir_publish(&f.d, now.ref, why, sizeof(why)), ECC_OK);
  /* Pins likewise: a freed pin's ref stays dead when its slot is reused. */
  struct dir_pin_ref p1 = pin_key(&f.d, key, 1, NULL);
  cr_assert_eq(dir_unpin(&f.d, p1, why, sizeof(why)), ECC_OK);
  struct dir_pin_ref p2 = {0};
  for (int i = 0; i < 200; i++) {
    p2 = pin_key(&f.d, key, 1, NULL);
    if (p2.slot == p1.slot)
      break;
    cr_assert_eq(dir_unpin(&f.d, p2, why, sizeof(why)), ECC_OK);
  }
  cr_assert_eq(p2.slot, p1.slot);
  cr_expect_neq(p2.gen, p1.gen);
  cr_expect_eq(dir_unpin(&f.d, p1, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(counters(&f.d).pins_live, 1, "the stale unpin released nothing");
  cr_expect_eq(dir_unpin(&f.d, (struct dir_pin_ref){1u << 30, 0}, why, sizeof(why)),
               ECC_ERR_CLOSED);
  cr_expect_eq(dir_publish(&f.d, (struct dir_ref){1u << 30, 0}, why, sizeof(why)), ECC_ERR_CLOSED);
  check(&f.d);
}

/* ---- the allocator ---- */

/* Four 2-block entries fill 8 blocks: a, b, c, d at 0, 2, 4, 6. */
static void fill_four(struct fx *f)
{
  fx_open(f, 8, 64, 0, 0, 0);
  const char *keys[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++) {
    struct dir_entry_info e = put(&f->d, keys[i], 128);
    cr_assert_eq(e.runs[0].first, (uint32_t)(2 * i));
  }
}

Test(directory, second_chance_spares_a_used_entry)
{
  struct fx f;
  fill_four(&f);
  /* A new entry counts as just used, as LRU has it: the first reservation
   * past a full region clears every mark in one turn, then takes the
   * oldest entry, a. */
  struct dir_entry_info e = put(&f.d, "e", 128);
  cr_expect_eq(e.runs[0].first, 0, "e should take a's blocks");
  cr_expect(!present(&f.d, "a"));
  /* c is used since the hand passed, b and d are not: b goes, the hand
   * passes c (clearing its mark) and d goes. */
  struct dir_pin_ref pin = pin_key(&f.d, "c", 1, NULL);
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK);
  struct dir_entry_info g = put(&f.d, "g", 128);
  cr_expect_eq(g.runs[0].first, 2, "g should take b's blocks");
  struct dir_entry_info h = put(&f.d, "h", 128);
  cr_expect_eq(h.runs[0].first, 6, "h should pass the used c and take d's blocks");
  cr_expect(present(&f.d, "c"), "the used entry was evicted");
  cr_expect(!present(&f.d, "b") && !present(&f.d, "d"));
  cr_expect_eq(counters(&f.d).evictions, 3);
  check(&f.d);
  /* e and g are new (marked), c lost its mark: c goes next. */
  struct dir_entry_info i = put(&f.d, "i", 128);
  cr_expect_eq(i.runs[0].first, 4, "c had its second chance already");
  cr_expect(!present(&f.d, "c"));
  cr_expect(present(&f.d, "e") && present(&f.d, "g"));
  /* A dedup hit marks too: e is passed again, g (unmarked since i's turn)
   * goes. */
  int outcome;
  struct dir_entry_info info;
  cr_assert_eq(dir_reserve(&f.d, "e", 128, &outcome, &info, why, sizeof(why)), ECC_OK);
  cr_expect_eq(outcome, DIR_FOUND_READY);
  struct dir_entry_info j = put(&f.d, "j", 128);
  cr_expect_eq(j.runs[0].first, 2, "e was marked by the dedup hit; g should go");
  cr_expect(present(&f.d, "e"));
  check(&f.d);
}

/* A removed entry's blocks lie behind the hand: a reservation they hold
 * fills them instead of evicting the unmarked entry at the hand. */
Test(directory, freed_blocks_behind_the_hand_are_filled_before_evicting)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  put(&f.d, "a", 256);
  put(&f.d, "b", 256);
  put(&f.d, "c", 256);
  put(&f.d, "d", 256);
  /* The first turn clears every mark, the second evicts a: the hand is at
   * block 4 and b, c, d are unmarked. */
  cr_expect_eq(put(&f.d, "e", 256).runs[0].first, 0);
  cr_assert_eq(dir_remove(&f.d, "c", why, sizeof(why)), ECC_OK, "%s", why);
  struct dir_counters before = counters(&f.d);
  cr_expect_eq(put(&f.d, "x", 128).runs[0].first, 8, "x should fill c's blocks");
  cr_expect_eq(put(&f.d, "y", 128).runs[0].first, 10, "y should fill the rest of them");
  cr_expect_eq(counters(&f.d).evictions, before.evictions, "nothing evicted while a gap held it");
  cr_expect(present(&f.d, "b") && present(&f.d, "d"));
  /* No gap is left: the hand (still at 4) takes b's blocks. */
  cr_expect_eq(put(&f.d, "z", 128).runs[0].first, 4);
  cr_expect(!present(&f.d, "b"));
  check(&f.d);
}

/* The sweep leaves a free run shorter than its request behind it (here in
 * front of a pinned entry); a later reservation it holds fills it rather
 * than evicting the entry at the hand. */
Test(directory, free_runs_the_sweep_passes_are_filled_later)
{
  struct fx f;
  fx_open(&f, 12, 64, 0, 0, 0);
  put(&f.d, "g", 128);
  put(&f.d, "m", 256);
  put(&f.d, "e", 256);
  put(&f.d, "f", 128);
  struct dir_pin_ref pin = pin_key(&f.d, "m", 1, NULL);
  cr_assert_eq(dir_remove(&f.d, "g", why, sizeof(why)), ECC_OK, "%s", why);
  /* A rebuild forgets what removals noted: only the sweep can find the run. */
  cr_assert_eq(dir_rebuild(&f.d, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(put(&f.d, "x", 256).runs[0].first, 6, "x should take e's blocks");
  cr_expect(present(&f.d, "f"));
  struct dir_counters before = counters(&f.d);
  cr_expect_eq(put(&f.d, "y", 128).runs[0].first, 0, "y should fill the run before m");
  cr_expect_eq(counters(&f.d).evictions, before.evictions);
  cr_expect(present(&f.d, "f"), "f, at the hand, was evicted although a gap held y");
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK);
  check(&f.d);
}

Test(directory, pinned_and_reserved_entries_are_never_evicted)
{
  struct fx f;
  fx_open(&f, 8, 64, 0, 0, 0);
  put(&f.d, "a", 128);
  struct dir_entry_info b = reserve_new(&f.d, "b", 128);
  put(&f.d, "c", 128);
  put(&f.d, "d", 128);
  struct dir_entry_info ainfo;
  struct dir_pin_ref pin = pin_key(&f.d, "a", 1, &ainfo);
  char key[16];
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof(key), "x%d", i);
    struct dir_entry_info x = put(&f.d, key, 128);
    cr_expect(x.runs[0].first == 4 || x.runs[0].first == 6, "%s at %u", key, x.runs[0].first);
    cr_expect_eq(dir_check_pinned(&f.d, pin, ainfo.runs[0].first, 2, why, sizeof(why)), ECC_OK);
    check(&f.d);
  }
  cr_expect(present(&f.d, "a") && present(&f.d, "b"));
  cr_expect_eq(dir_publish(&f.d, b.ref, why, sizeof(why)), ECC_OK, "%s", why);
  /* Four blocks fit beside the pinned entry; seven cannot, and the refusal
   * evicts nothing. */
  put(&f.d, "big", 64 * 4);
  struct dir_counters before = counters(&f.d);
  int outcome;
  struct dir_entry_info info;
  cr_expect_eq(dir_reserve(&f.d, "bigger", 64 * 7, &outcome, &info, why, sizeof(why)),
               ECC_ERR_BUSY);
  struct dir_counters after = counters(&f.d);
  cr_expect_eq(after.evictions, before.evictions);
  cr_expect_eq(after.full, before.full + 1);
  cr_expect(present(&f.d, "big"));
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK);
  check(&f.d);
}

static bool same_listing(const struct listing *a, const struct listing *b)
{
  if (a->n != b->n)
    return false;
  for (size_t i = 0; i < a->n; i++)
    if (memcmp(&a->e[i], &b->e[i], sizeof(a->e[i])) != 0)
      return false;
  return true;
}

Test(directory, full_region_is_busy_and_evicts_nothing)
{
  struct fx f;
  fx_open(&f, 8, 64, 0, 0, 0);
  put(&f.d, "a", 128);
  reserve_new(&f.d, "b", 128);
  put(&f.d, "c", 128);
  reserve_new(&f.d, "d", 128);
  pin_key(&f.d, "a", 1, NULL);
  pin_key(&f.d, "c", 2, NULL);
  struct listing before, after;
  list(&f.d, &before);
  struct dir_counters c0 = counters(&f.d);
  int outcome;
  struct dir_entry_info info;
  cr_expect_eq(dir_reserve(&f.d, "e", 64, &outcome, &info, why, sizeof(why)), ECC_ERR_BUSY);
  cr_expect(strstr(why, "'e'") != NULL, "why: %s", why);
  list(&f.d, &after);
  struct dir_counters c1 = counters(&f.d);
  cr_expect(same_listing(&before, &after), "a refused reservation changed the entries");
  cr_expect_eq(c1.full, c0.full + 1);
  c1.full = c0.full;
  cr_expect(memcmp(&c0, &c1, sizeof(c0)) == 0, "counters other than full changed");
  check(&f.d);
}

/* Pinned 1-block entries at odd blocks leave only 1-block gaps: a request
 * of 4 takes 4 runs; one past DIR_MAX_RUNS gaps is refused. */
Test(directory, fragmented_space_gives_several_runs_at_most_the_limit)
{
  struct fx f;
  fx_open(&f, 2 * (DIR_MAX_RUNS + 1), 64, 0, 0, 0);
  char key[16];
  for (int i = 0; i < 2 * (DIR_MAX_RUNS + 1); i++) {
    snprintf(key, sizeof(key), "k%d", i);
    put(&f.d, key, 64);
    if (i % 2 == 1)
      pin_key(&f.d, key, 1, NULL);
  }
  struct listing before, after;
  list(&f.d, &before);
  int outcome;
  struct dir_entry_info info;
  cr_expect_eq(
      dir_reserve(&f.d, "wide", 64 * (DIR_MAX_RUNS + 1), &outcome, &info, why, sizeof(why)),
      ECC_ERR_BUSY, "needs %d runs", DIR_MAX_RUNS + 1);
  list(&f.d, &after);
  cr_expect_eq(after.n, before.n, "nothing evicted");
  struct dir_entry_info w = put(&f.d, "four", 64 * 4);
  cr_expect_eq(w.n_runs, 4);
  for (uint32_t r = 0; r < w.n_runs; r++) {
    cr_expect_eq(w.runs[r].count, 1);
    cr_expect_eq(w.runs[r].first % 2, 0, "run %u on a pinned block %u", r, w.runs[r].first);
  }
  struct dir_pin_ref pin = pin_key(&f.d, "four", 1, NULL);
  for (uint32_t r = 0; r < w.n_runs; r++)
    cr_expect_eq(dir_check_pinned(&f.d, pin, w.runs[r].first, 1, why, sizeof(why)), ECC_OK);
  cr_expect_eq(dir_check_pinned(&f.d, pin, w.runs[0].first, 2, why, sizeof(why)), ECC_ERR_RANGE,
               "a range over a gap between runs");
  cr_expect(strstr(why, "four") != NULL, "why: %s", why);
  cr_expect_eq(counters(&f.d).evictions, 4);
  check(&f.d);
}

Test(directory, full_entry_table_evicts_one_entry_for_its_slot)
{
  struct fx f;
  fx_open(&f, 128, 64, 64, 64, 0);
  char key[16];
  for (int i = 0; i < 64; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    put(&f.d, key, 64);
  }
  pin_key(&f.d, "k0", 1, NULL);
  struct dir_entry_info e = put(&f.d, "one-more", 64);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.entries, 64);
  cr_expect_eq(c.evictions, 1);
  cr_expect_geq(e.runs[0].first, 64, "took a free block, not the victim's");
  cr_expect(present(&f.d, "k0"), "the pinned entry gave its slot up");
  cr_expect(!present(&f.d, "k1"), "the clock's first evictable entry is k1");
  check(&f.d);
  /* Every entry pinned: no slot, nothing evicted. */
  struct listing l;
  list(&f.d, &l);
  for (size_t i = 0; i < l.n; i++)
    if (strcmp(l.e[i].key, "k0") != 0)
      pin_key(&f.d, l.e[i].key, 1, NULL);
  int outcome;
  struct dir_entry_info info;
  cr_expect_eq(dir_reserve(&f.d, "none", 64, &outcome, &info, why, sizeof(why)), ECC_ERR_BUSY);
  cr_expect(strstr(why, "entry slot") != NULL, "why: %s", why);
  cr_expect_eq(counters(&f.d).evictions, 1);
  check(&f.d);
}

/* ---- pins ---- */

Test(directory, ranks_count_releases_from_any_process)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  put(&f.d, "shared", 64);
  struct dir_pin_ref pin = pin_key(&f.d, "shared", 3, NULL);
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK);
  cr_expect_eq(counters(&f.d).pins_live, 1);
  cr_expect_eq(dir_remove(&f.d, "shared", why, sizeof(why)), ECC_ERR_BUSY);
  pid_t pid = fork_child();
  if (pid == 0)
    _exit(dir_unpin(&f.d, pin, NULL, 0) == ECC_OK ? 0 : 1);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's release failed");
  cr_expect_eq(counters(&f.d).pins_live, 1);
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK);
  cr_expect_eq(counters(&f.d).pins_live, 0);
  cr_expect_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_remove(&f.d, "shared", why, sizeof(why)), ECC_OK, "%s", why);
  const char *k = "x";
  bool found;
  struct dir_pin_ref p;
  cr_expect_eq(dir_lookup(&f.d, &k, 1, 0, &found, NULL, &p, why, sizeof(why)), ECC_ERR_INVALID);
  check(&f.d);
}

/* Several releases under one lock: what is left after them, a release of 0
 * refused with nothing changed, more than are left freeing the pin at once
 * (the count a peer that went away held, however large), from any
 * process, and a stale pin refused. */
Test(directory, unpin_ranks_gives_back_several_releases_at_once)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  put(&f.d, "shared", 64);
  struct dir_entry_info info;
  struct dir_pin_ref pin = pin_key(&f.d, "shared", 5, NULL);
  cr_assert_eq(dir_unpin_ranks(&f.d, pin, 2, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_pinned(&f.d, pin, &info, why, sizeof(why)), ECC_OK, "%s", why);
  struct dir_counters before = counters(&f.d);
  cr_expect_eq(dir_unpin_ranks(&f.d, pin, 0, why, sizeof(why)), ECC_ERR_INVALID);
  cr_expect(strstr(why, "0 ranks") != NULL, "why: %s", why);
  struct dir_counters after = counters(&f.d);
  cr_expect(memcmp(&before, &after, sizeof(before)) == 0, "a refused release changed counters");
  cr_assert_eq(dir_unpin(&f.d, pin, why, sizeof(why)), ECC_OK, "%s", why);
  /* Two left: releasing two frees it. */
  cr_expect_eq(dir_unpin_ranks(&f.d, pin, 2, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(counters(&f.d).pins_live, 0);
  cr_expect_eq(dir_pinned(&f.d, pin, &info, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_unpin_ranks(&f.d, pin, 1, why, sizeof(why)), ECC_ERR_CLOSED);

  /* The most ranks a pin can have go in one call, as fast as one. */
  pin = pin_key(&f.d, "shared", UINT32_MAX, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cr_expect_eq(dir_unpin_ranks(&f.d, pin, UINT32_MAX, why, sizeof(why)), ECC_OK, "%s", why);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  cr_expect_lt(ms, 50.0, "releasing 2^32-1 ranks took %.1f ms", ms);
  cr_expect_eq(counters(&f.d).pins_live, 0);

  /* More than are left, and from another process. */
  pin = pin_key(&f.d, "shared", 3, NULL);
  pid_t pid = fork_child();
  if (pid == 0)
    _exit(dir_unpin_ranks(&f.d, pin, 1000, NULL, 0) == ECC_OK ? 0 : 1);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's release failed");
  cr_expect_eq(counters(&f.d).pins_live, 0);
  cr_expect_eq(dir_remove(&f.d, "shared", why, sizeof(why)), ECC_OK, "%s", why);

  /* Forged pins name nothing. */
  cr_expect_eq(
      dir_unpin_ranks(&f.d, (struct dir_pin_ref){pin.slot, pin.gen + 1}, 1, why, sizeof(why)),
      ECC_ERR_CLOSED);
  cr_expect_eq(
      dir_unpin_ranks(&f.d, (struct dir_pin_ref){UINT32_MAX, pin.gen}, 1, why, sizeof(why)),
      ECC_ERR_CLOSED);
  check(&f.d);
}

Test(directory, check_pinned_bounds)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  put(&f.d, "before", 64);
  struct dir_entry_info e = put(&f.d, "mid", 3 * 64);
  put(&f.d, "after", 64);
  struct dir_pin_ref pin = pin_key(&f.d, "mid", 1, NULL);
  uint32_t b = e.runs[0].first;
  cr_assert_eq(b, 1);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b, 3, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b + 1, 2, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b + 2, 1, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b, 4, why, sizeof(why)), ECC_ERR_RANGE);
  cr_expect(strstr(why, "block 4") != NULL, "why: %s", why);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b - 1, 1, why, sizeof(why)), ECC_ERR_RANGE);
  cr_expect_eq(dir_check_pinned(&f.d, pin, b, 0, why, sizeof(why)), ECC_ERR_RANGE);
  cr_expect_eq(dir_check_pinned(&f.d, pin, UINT32_MAX, 2, why, sizeof(why)), ECC_ERR_RANGE);
  cr_expect_eq(
      dir_check_pinned(&f.d, (struct dir_pin_ref){pin.slot, pin.gen + 1}, b, 1, why, sizeof(why)),
      ECC_ERR_CLOSED);
  check(&f.d);
}

Test(directory, lookup_without_enough_pin_slots_keeps_none)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 2, 0);
  put(&f.d, "a", 64);
  put(&f.d, "b", 64);
  put(&f.d, "c", 64);
  pin_key(&f.d, "a", 1, NULL);
  const char *keys[] = {"b", "c", "missing"};
  bool found[3];
  struct dir_pin_ref pins[3];
  struct dir_counters c0 = counters(&f.d);
  cr_expect_eq(dir_lookup(&f.d, keys, 3, 1, found, NULL, pins, why, sizeof(why)), ECC_ERR_BUSY);
  cr_expect(strstr(why, "pins") != NULL, "why: %s", why);
  struct dir_counters c1 = counters(&f.d);
  cr_expect(memcmp(&c0, &c1, sizeof(c0)) == 0, "a refused lookup changed counters");
  cr_expect_eq(dir_lookup(&f.d, keys + 1, 2, 1, found, NULL, pins, why, sizeof(why)), ECC_OK);
  cr_expect(found[0] && !found[1]);
  cr_expect_eq(counters(&f.d).pins_live, 2);
  check(&f.d);
}

/* ---- dead owners ---- */

Test(directory, dead_and_reused_owners_are_reclaimed)
{
  struct fx f;
  fx_open(&f, 8, 64, 0, 0, 0);
  put(&f.d, "pinned-by-child", 128);
  pid_t pid = fork_child();
  if (pid == 0) {
    int outcome;
    struct dir_entry_info info;
    bool found;
    struct dir_pin_ref pin;
    const char *k = "pinned-by-child";
    int rc = dir_reserve(&f.d, "left-by-child", 128, &outcome, &info, NULL, 0);
    rc |= dir_lookup(&f.d, &k, 1, 1, &found, &info, &pin, NULL, 0);
    _exit(rc == ECC_OK && found && outcome == DIR_RESERVED ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  struct dir_entry_info mine = reserve_new(&f.d, "mine", 128);
  /* Same pid as this process, another start time: a process that had this
   * pid before, so dead although kill(pid, 0) succeeds. */
  struct dir ghost = f.d;
  ghost.self.start_ticks += 1;
  struct dir_entry_info g = reserve_new(&ghost, "ghost", 128);
  cr_expect_eq(g.owner.pid, getpid());
  cr_expect_eq(counters(&f.d).entries, 4);
  /* The region is full: a 2-block request meets them in its sweep. */
  put(&f.d, "new", 128);
  put(&f.d, "new2", 128);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.reclaimed, 3, "child's reservation and pin, the ghost's reservation");
  cr_expect_eq(c.pins_live, 0);
  cr_expect(present(&f.d, "mine"), "a live owner's reservation was taken");
  cr_expect(!present(&f.d, "left-by-child") && !present(&f.d, "ghost"));
  cr_expect_eq(dir_publish(&f.d, mine.ref, why, sizeof(why)), ECC_OK);
  cr_expect_eq(dir_publish(&f.d, g.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  check(&f.d);
}

Test(directory, reserving_a_key_whose_writer_died_reserves_it_anew)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  pid_t pid = fork_child();
  if (pid == 0) {
    int outcome;
    struct dir_entry_info info;
    _exit(dir_reserve(&f.d, "half", 64, &outcome, &info, NULL, 0) == ECC_OK ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  struct dir_entry_info e = reserve_new(&f.d, "half", 64);
  cr_expect_eq(e.owner.pid, getpid());
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.reclaimed, 1);
  cr_expect_eq(c.dedup_hits, 0);
  cr_expect_eq(c.entries, 1);
  check(&f.d);
}

/* A scheduler reserves, a worker claims the reservation for its copy and is
 * killed: the live owner's abort frees it (nothing will settle the copy),
 * and a publish of such a reservation is refused. */
static void claim_in_child_and_die(struct fx *f, struct dir_ref ref)
{
  pid_t pid = fork_child();
  if (pid == 0) {
    struct dir_entry_info info;
    _exit(dir_claim(&f->d, ref, &info, NULL, 0) == ECC_OK ? 0 : 1);
  }
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

Test(directory, a_claim_whose_writer_died_is_reclaimed_by_abort_or_publish)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, 0);
  struct dir_entry_info a = reserve_new(&f.d, "claimed-then-killed", 64);
  struct dir_entry_info live = reserve_new(&f.d, "claimed-by-me", 64);
  struct dir_entry_info info;
  cr_assert_eq(dir_claim(&f.d, live.ref, &info, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_abort(&f.d, live.ref, why, sizeof(why)), ECC_ERR_BUSY,
               "a live writer's copy is settled by its completion only");
  claim_in_child_and_die(&f, a.ref);
  cr_expect_eq(dir_abort(&f.d, a.ref, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect(!present(&f.d, "claimed-then-killed"));
  cr_expect_eq(counters(&f.d).reclaimed, 1);
  cr_expect_eq(dir_abort(&f.d, a.ref, why, sizeof(why)), ECC_ERR_CLOSED);

  struct dir_entry_info b = reserve_new(&f.d, "claimed-then-killed", 64);
  claim_in_child_and_die(&f, b.ref);
  cr_expect_eq(dir_publish(&f.d, b.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect(strstr(why, "died saving it") != NULL, "%s", why);
  cr_expect(!present(&f.d, "claimed-then-killed"), "a dead writer's copy was published");
  cr_expect_eq(counters(&f.d).reclaimed, 2);
  cr_expect_eq(dir_settle(&f.d, live.ref, true, why, sizeof(why)), ECC_OK, "%s", why);
  check(&f.d);
}

Test(directory, timeouts_reclaim_live_owners)
{
  struct fx f;
  memset(&f, 0, sizeof(f));
  f.p = (struct dir_params){.num_blocks = 16,
                            .block_size = 64,
                            .reserve_timeout_ns = 200000000,
                            .pin_timeout_ns = 200000000};
  f.bytes = dir_bytes(&f.p);
  f.mem = mmap(NULL, f.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(f.mem, MAP_FAILED);
  cr_assert_eq(dir_format(f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK);
  cr_assert_eq(dir_attach(&f.d, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK);
  reserve_new(&f.d, "slow", 64);
  put(&f.d, "held", 64);
  pin_key(&f.d, "held", 1, NULL);
  uint32_t freed = 99;
  cr_assert_eq(dir_reclaim(&f.d, &freed, why, sizeof(why)), ECC_OK);
  cr_expect_eq(freed, 0, "nothing is old yet");
  usleep(300000);
  cr_assert_eq(dir_reclaim(&f.d, &freed, why, sizeof(why)), ECC_OK);
  cr_expect_eq(freed, 2);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.pins_live, 0);
  cr_expect_eq(c.entries, 1);
  cr_expect_eq(c.reclaimed, 2);
  check(&f.d);
}

/* A child that dies holding the lock (inside a dir_list callback): the
 * next locker rebuilds and frees the child's reservation. */
static atomic_int *in_callback;

static void hang(void *user, const struct dir_entry_info *e)
{
  (void)user;
  (void)e;
  atomic_store(in_callback, 1);
  for (;;)
    pause();
}

Test(directory, death_inside_the_lock_is_recovered)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 0, sizeof(atomic_int));
  in_callback = fx_extra(&f);
  put(&f.d, "kept", 64);
  pid_t pid = fork_child();
  if (pid == 0) {
    int outcome;
    struct dir_entry_info info;
    if (dir_reserve(&f.d, "orphan", 64 * 3, &outcome, &info, NULL, 0) != ECC_OK)
      _exit(1);
    dir_list(&f.d, hang, NULL);
    _exit(2);
  }
  for (int i = 0; i < 5000 && !atomic_load(in_callback); i++)
    usleep(1000);
  cr_assert(atomic_load(in_callback), "the child never reached its callback");
  kill(pid, SIGKILL);
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  check(&f.d);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.recoveries, 1);
  cr_expect_eq(c.reclaimed, 1);
  cr_expect_eq(c.entries, 1);
  cr_expect_eq(c.blocks_free, 15);
  cr_expect(present(&f.d, "kept"));
}

/* ---- the checker ---- */

/* One bit flipped anywhere past the header of a directory in use: the
 * checker never crashes, says OK or ECC_ERR_REGION, and catches the flips
 * that break an invariant (many bytes, such as free slots' fields and
 * timestamps, break none). */
Test(directory, checker_reports_flipped_bits_without_crashing)
{
  struct fx f;
  fx_open(&f, 128, 64, 64, 64, 0);
  char key[16];
  for (int i = 0; i < 40; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    if (i % 5 == 0)
      reserve_new(&f.d, key, 64 * (1 + i % 3));
    else
      put(&f.d, key, 64 * (1 + i % 3));
    if (i % 4 == 1 && i % 5 != 0)
      pin_key(&f.d, key, 2, NULL);
  }
  check(&f.d);
  unsigned char *snap = malloc(f.bytes);
  cr_assert_not_null(snap);
  memcpy(snap, f.mem, f.bytes);
  unsigned seed = 5, caught = 0, trials = 4000;
  for (unsigned t = 0; t < trials; t++) {
    memcpy(f.mem, snap, f.bytes);
    size_t at = 1024 + (size_t)rand_r(&seed) % (f.bytes - 1024);
    ((unsigned char *)f.mem)[at] ^= (unsigned char)(1u << (rand_r(&seed) % 8));
    int rc = dir_check(&f.d, why, sizeof(why));
    cr_assert(rc == ECC_OK || rc == ECC_ERR_REGION, "flip at %zu: %d", at, rc);
    caught += rc == ECC_ERR_REGION;
  }
  memcpy(f.mem, snap, f.bytes);
  free(snap);
  check(&f.d);
  fprintf(stderr, "directory checker: %u of %u single-bit flips caught\n", caught, trials);
  cr_expect_gt(caught, trials / 10);
}

/* The rebuild after a death trusts only the tables' whole slots: after one
 * bit flipped anywhere past the header, it leaves a directory the checker
 * passes, every time. */
Test(directory, rebuild_repairs_any_flipped_bit)
{
  struct fx f;
  fx_open(&f, 128, 64, 64, 64, 0);
  char key[16];
  for (int i = 0; i < 40; i++) {
    snprintf(key, sizeof(key), "k%d", i);
    if (i % 5 == 0)
      reserve_new(&f.d, key, 64 * (1 + i % 3));
    else
      put(&f.d, key, 64 * (1 + i % 3));
    if (i % 4 == 1 && i % 5 != 0)
      pin_key(&f.d, key, 2, NULL);
  }
  unsigned char *snap = malloc(f.bytes);
  cr_assert_not_null(snap);
  memcpy(snap, f.mem, f.bytes);
  unsigned seed = 11;
  for (unsigned t = 0; t < 4000; t++) {
    memcpy(f.mem, snap, f.bytes);
    size_t at = 1024 + (size_t)rand_r(&seed) % (f.bytes - 1024);
    ((unsigned char *)f.mem)[at] ^= (unsigned char)(1u << (rand_r(&seed) % 8));
    cr_assert_eq(dir_rebuild(&f.d, why, sizeof(why)), ECC_OK, "%s", why);
    int rc = dir_check(&f.d, why, sizeof(why));
    cr_assert_eq(rc, ECC_OK, "flip at byte %zu, after the rebuild: %s", at, why);
    /* And it still works. */
    put(&f.d, "after", 64);
  }
  free(snap);
}

/* ---- a region made again ---- */

/* The same memory formatted again, and the same calls made in the same
 * order, put the same keys in the same slots: the refs and pins of the
 * first format must name nothing in the second. */
Test(directory, refs_and_pins_of_an_earlier_format_are_refused)
{
  struct fx f;
  fx_open(&f, 64, 64, 8, 8, 0);
  struct dir_entry_info x = put(&f.d, "x", 64);
  struct dir_pin_ref old_pin = pin_key(&f.d, "x", 1, NULL);
  struct dir_entry_info r = reserve_new(&f.d, "r", 64);
  uint64_t first = dir_instance(&f.d);
  cr_expect_neq(first, 0);

  cr_assert_eq(dir_format(f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK, "%s", why);
  struct dir d2;
  cr_assert_eq(dir_attach(&d2, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_neq(dir_instance(&d2), first, "a new format kept the instance id");
  struct dir_entry_info y = put(&d2, "y", 64);
  struct dir_pin_ref new_pin = pin_key(&d2, "y", 1, NULL);
  struct dir_entry_info c = reserve_new(&d2, "c", 64);
  cr_assert_eq(y.ref.slot, x.ref.slot);
  cr_assert_eq(new_pin.slot, old_pin.slot);
  cr_assert_eq(c.ref.slot, r.ref.slot);
  cr_expect_neq(y.ref.gen, x.ref.gen, "slot %u starts at the same generation again", y.ref.slot);

  struct dir_entry_info info;
  cr_expect_eq(dir_pinned(&d2, old_pin, &info, why, sizeof(why)), ECC_ERR_CLOSED, "%s", why);
  cr_expect_eq(dir_check_pinned(&d2, old_pin, y.runs[0].first, 1, why, sizeof(why)),
               ECC_ERR_CLOSED);
  cr_expect_eq(dir_unpin(&d2, old_pin, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_unpin_ranks(&d2, old_pin, 5, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_claim(&d2, r.ref, &info, why, sizeof(why)), ECC_ERR_CLOSED, "%s", why);
  cr_expect_eq(dir_publish(&d2, r.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_abort(&d2, r.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_settle(&d2, r.ref, true, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_abort(&d2, x.ref, why, sizeof(why)), ECC_ERR_CLOSED);
  /* Nothing of the second format was touched. */
  struct dir_counters k = counters(&d2);
  cr_expect_eq(k.entries, 2);
  cr_expect_eq(k.pins_live, 1);
  cr_expect_eq(dir_pinned(&d2, new_pin, &info, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_str_eq(info.key, "y");
  cr_expect_eq(dir_claim(&d2, c.ref, &info, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_settle(&d2, c.ref, true, why, sizeof(why)), ECC_OK, "%s", why);
  check(&d2);

  /* The view attached to the first format is refused by name. */
  const char *key = "y";
  bool found;
  struct dir_pin_ref p;
  cr_expect_eq(dir_lookup(&f.d, &key, 1, 1, &found, NULL, &p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "formatted again") != NULL, "why: %s", why);
  cr_expect_eq(counters(&d2).pins_live, 1);
}

/* Independent formats draw independent instance ids and first generations. */
Test(directory, each_format_draws_its_own_generations)
{
  struct fx f;
  fx_open(&f, 64, 64, 8, 8, 0);
  uint64_t ids[16];
  uint32_t gens[16];
  for (int i = 0; i < 16; i++) {
    cr_assert_eq(dir_format(f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK, "%s", why);
    cr_assert_eq(dir_attach(&f.d, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_OK, "%s", why);
    ids[i] = dir_instance(&f.d);
    gens[i] = reserve_new(&f.d, "k", 64).ref.gen;
    for (int j = 0; j < i; j++) {
      cr_expect_neq(ids[i], ids[j], "formats %d and %d drew one instance id", j, i);
      cr_expect_neq(gens[i], gens[j], "formats %d and %d start slot 0 at gen %u", j, i, gens[i]);
    }
  }
  /* A directory of the previous layout is refused by name. */
  struct dir_shape *shape = f.mem;
  shape->version = DIR_LAYOUT_VERSION - 1;
  struct dir d;
  cr_expect_eq(dir_attach(&d, f.mem, f.bytes, &f.p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "version") != NULL, "why: %s", why);
}

/* ---- damaged tables ---- */

/* The runs of the slot that holds e, found in the shared memory by the key's
 * bytes (a slot's runs lie right before its key) and checked against e. */
static struct dir_run *runs_in_memory(struct fx *f, const struct dir_entry_info *e)
{
  size_t len = strlen(e->key) + 1, before = DIR_MAX_RUNS * sizeof(struct dir_run);
  char *m = f->mem;
  for (size_t at = sizeof(struct dir_shape) + before; at + len <= f->bytes; at += 4) {
    if (memcmp(m + at, e->key, len) != 0)
      continue;
    struct dir_run *runs = (struct dir_run *)(void *)(m + at - before);
    if (runs[0].first == e->runs[0].first && runs[0].count == e->runs[0].count)
      return runs;
  }
  cr_assert_fail("the runs of '%s' are not in the directory's memory", e->key);
  return NULL;
}

static void expect_damaged(const char *call, int rc, uint32_t slot)
{
  char named[32];
  snprintf(named, sizeof(named), "slot %u is damaged", slot);
  cr_expect_eq(rc, ECC_ERR_REGION, "%s: %d (%s)", call, rc, why);
  cr_expect(strstr(why, named) != NULL, "%s does not say '%s': %s", call, named, why);
}

/* Runs pointing far outside the region: every call that meets them says
 * so, none follows them (the map write of a free, the runs handed back to
 * a caller who would copy there). */
Test(directory, damaged_runs_are_refused_by_name_never_followed)
{
  struct fx f;
  fx_open(&f, 64, 64, 16, 16, 0);
  struct dir_entry_info ready = put(&f.d, "damaged-ready", 2 * 64);
  struct dir_entry_info res = reserve_new(&f.d, "damaged-reserved", 64);
  struct dir_entry_info pinned = put(&f.d, "damaged-pinned", 64);
  struct dir_pin_ref pin = pin_key(&f.d, "damaged-pinned", 1, NULL);
  put(&f.d, "whole", 64);
  runs_in_memory(&f, &ready)[0].first = 0x7fffff00u;
  runs_in_memory(&f, &res)[0].first = 0x7fffff00u;
  runs_in_memory(&f, &pinned)[0].count = 0xffffff00u;

  const char *key = "damaged-ready";
  bool found = true;
  struct dir_pin_ref p;
  struct dir_entry_info info;
  int outcome;
  expect_damaged("lookup", dir_lookup(&f.d, &key, 1, 1, &found, &info, &p, why, sizeof(why)),
                 ready.ref.slot);
  cr_expect_eq(counters(&f.d).pins_live, 1, "a refused lookup kept a pin");
  expect_damaged("reserve of its key",
                 dir_reserve(&f.d, key, 64, &outcome, &info, why, sizeof(why)), ready.ref.slot);
  expect_damaged("remove", dir_remove(&f.d, key, why, sizeof(why)), ready.ref.slot);
  expect_damaged("abort", dir_abort(&f.d, res.ref, why, sizeof(why)), res.ref.slot);
  expect_damaged("publish", dir_publish(&f.d, res.ref, why, sizeof(why)), res.ref.slot);
  expect_damaged("claim", dir_claim(&f.d, res.ref, &info, why, sizeof(why)), res.ref.slot);
  expect_damaged("settle", dir_settle(&f.d, res.ref, false, why, sizeof(why)), res.ref.slot);
  expect_damaged("pinned", dir_pinned(&f.d, pin, &info, why, sizeof(why)), pinned.ref.slot);
  expect_damaged("check_pinned",
                 dir_check_pinned(&f.d, pin, pinned.runs[0].first, 1, why, sizeof(why)),
                 pinned.ref.slot);
  static struct listing l;
  l.n = 0;
  cr_expect_eq(dir_list(&f.d, collect, &l), ECC_ERR_REGION);
  cr_expect_eq(l.n, 0, "a refused listing handed out %zu entries", l.n);
  cr_expect_eq(dir_check(&f.d, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "outside the 64 blocks") != NULL, "why: %s", why);

  /* What is whole still works; what needs the damaged blocks is refused. */
  struct dir_pin_ref whole = pin_key(&f.d, "whole", 1, NULL);
  cr_expect_eq(dir_unpin(&f.d, whole, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_reserve(&f.d, "all", 64 * 64, &outcome, &info, why, sizeof(why)),
               ECC_ERR_REGION);
  cr_expect(strstr(why, "damaged") != NULL, "why: %s", why);
  reserve_new(&f.d, "small", 64);

  /* The rebuild drops the damaged entries and their pin. */
  cr_assert_eq(dir_rebuild(&f.d, why, sizeof(why)), ECC_OK, "%s", why);
  check(&f.d);
  cr_expect_eq(counters(&f.d).entries, 2);
  cr_expect_eq(dir_pinned(&f.d, pin, &info, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect(present(&f.d, "whole") && present(&f.d, "small") && !present(&f.d, key));
}

/* A block map naming slots past the table or free ones: such blocks are no
 * one's, and a sweep passes them instead of reading a slot there. */
Test(directory, a_damaged_block_map_is_passed_not_followed)
{
  struct fx f;
  fx_open(&f, 32, 64, 16, 16, 0);
  const struct dir_shape *shape = f.mem;
  uint32_t *map = (uint32_t *)(void *)((char *)f.mem + shape->off_map);
  put(&f.d, "a", 64);
  map[10] = 0xfffffff0u;
  map[11] = 5 + 1; /* slot 5 is free */
  uint32_t ids[] = {10, 11}, bad = 0;
  cr_expect_eq(dir_blocks_held(&f.d, ids, 1, false, &bad), ECC_ERR_RANGE);
  cr_expect_eq(bad, 10);
  cr_expect_eq(dir_blocks_held(&f.d, ids + 1, 1, true, &bad), ECC_ERR_RANGE);
  cr_expect_eq(bad, 11);
  int outcome;
  struct dir_entry_info info;
  cr_expect_eq(dir_reserve(&f.d, "all", 31 * 64, &outcome, &info, why, sizeof(why)),
               ECC_ERR_REGION);
  cr_expect(strstr(why, "block 10") != NULL, "why: %s", why);
  struct dir_entry_info e = reserve_new(&f.d, "twenty", 20 * 64);
  for (uint32_t r = 0; r < e.n_runs; r++)
    cr_expect(e.runs[r].first > 11 || e.runs[r].first + e.runs[r].count <= 10,
              "run %u+%u takes a damaged block", e.runs[r].first, e.runs[r].count);
  cr_expect_eq(dir_check(&f.d, why, sizeof(why)), ECC_ERR_REGION);
  cr_assert_eq(dir_rebuild(&f.d, why, sizeof(why)), ECC_OK, "%s", why);
  check(&f.d);
}

/* A header changed under a view (its sizes give every offset) stops every
 * call of that view; put back, the view works again. */
Test(directory, a_changed_header_is_refused_by_every_call)
{
  struct fx f;
  fx_open(&f, 32, 64, 16, 16, 0);
  put(&f.d, "a", 64);
  struct dir_shape *shape = f.mem;
  shape->num_blocks = 1u << 30;
  const char *key = "a";
  bool found;
  struct dir_pin_ref p;
  cr_expect_eq(dir_lookup(&f.d, &key, 1, 1, &found, NULL, &p, why, sizeof(why)), ECC_ERR_REGION);
  cr_expect(strstr(why, "header changed") != NULL, "why: %s", why);
  struct dir_counters c;
  cr_expect_eq(dir_get_counters(&f.d, &c), ECC_ERR_REGION);
  cr_expect_eq(dir_check(&f.d, why, sizeof(why)), ECC_ERR_REGION);
  shape->num_blocks = 32;
  cr_expect_eq(dir_lookup(&f.d, &key, 1, 1, &found, NULL, &p, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect(found);
  check(&f.d);
}

/* ---- a long randomized run ---- */

struct held_pin {
  struct dir_pin_ref pin;
  struct dir_entry_info info;
};

struct model {
  struct dir *d;
  unsigned seed;
  struct dir_ref reserved[16];
  int n_reserved;
  struct held_pin pins[28];
  int n_pins;
  uint64_t new_entries, single_run, runs;
};

static void random_key(struct model *m, char *key, size_t cap)
{
  snprintf(key, cap, "key-%u", (unsigned)rand_r(&m->seed) % 96);
}

/* The oracle: the key's entry as dir_list shows it before the call (state
 * FREE and no pins if absent). */
static struct dir_entry_info key_before(struct model *m, const char *key)
{
  static struct listing l;
  list(m->d, &l);
  const struct dir_entry_info *e = listed(&l, key);
  struct dir_entry_info none = {.state = DIR_STATE_FREE};
  return e != NULL ? *e : none;
}

static void op_reserve(struct model *m)
{
  char key[32];
  int outcome;
  struct dir_entry_info info;
  random_key(m, key, sizeof(key));
  uint64_t nbytes = 1 + (uint64_t)(rand_r(&m->seed) % (48 * 64));
  struct dir_entry_info before = key_before(m, key);
  int rc = dir_reserve(m->d, key, nbytes, &outcome, &info, why, sizeof(why));
  cr_assert(rc == ECC_OK || rc == ECC_ERR_BUSY, "reserve %s: %d %s", key, rc, why);
  if (before.state != DIR_STATE_FREE) {
    cr_assert_eq(rc, ECC_OK, "reserve of present %s: %s", key, why);
    cr_assert_eq(outcome, before.state == DIR_STATE_READY ? DIR_FOUND_READY : DIR_FOUND_WRITING);
    cr_assert(info.ref.slot == before.ref.slot && info.ref.gen == before.ref.gen);
  }
  if (rc != ECC_OK || outcome != DIR_RESERVED)
    return;
  cr_assert_eq(before.state, DIR_STATE_FREE, "%s reserved twice", key);
  cr_assert_eq(info.n_blocks, (nbytes + 63) / 64);
  m->new_entries++;
  m->single_run += info.n_runs == 1;
  m->runs += info.n_runs;
  if (m->n_reserved < 16 && rand_r(&m->seed) % 4 == 0) {
    m->reserved[m->n_reserved++] = info.ref;
    return;
  }
  cr_assert_eq(dir_publish(m->d, info.ref, why, sizeof(why)), ECC_OK, "%s", why);
}

static void op_finish(struct model *m)
{
  if (m->n_reserved == 0)
    return;
  int i = rand_r(&m->seed) % m->n_reserved;
  struct dir_ref ref = m->reserved[i];
  m->reserved[i] = m->reserved[--m->n_reserved];
  int rc = rand_r(&m->seed) % 3 == 0 ? dir_abort(m->d, ref, why, sizeof(why))
                                     : dir_publish(m->d, ref, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "a live reservation was lost: %s", why);
}

static void op_lookup(struct model *m)
{
  char key[32];
  const char *k = key;
  bool found;
  struct held_pin h;
  random_key(m, key, sizeof(key));
  struct dir_entry_info before = key_before(m, key);
  int rc =
      dir_lookup(m->d, &k, 1, 1 + rand_r(&m->seed) % 2, &found, &h.info, &h.pin, why, sizeof(why));
  cr_assert(rc == ECC_OK || rc == ECC_ERR_BUSY, "lookup: %s", why);
  if (rc == ECC_OK)
    cr_assert_eq(found, before.state == DIR_STATE_READY, "lookup %s: found %d, state %d", key,
                 found, before.state);
  if (rc != ECC_OK || !found)
    return;
  cr_assert_eq(h.info.ref.slot, before.ref.slot);
  cr_assert_eq(memcmp(h.info.runs, before.runs, sizeof(before.runs)), 0, "%s moved", key);
  cr_assert_eq(h.info.pins, before.pins + 1);
  if (m->n_pins < 28 && rand_r(&m->seed) % 2 == 0) {
    m->pins[m->n_pins++] = h;
    return;
  }
  while (dir_unpin(m->d, h.pin, NULL, 0) == ECC_OK)
    ;
}

static void op_unpin(struct model *m)
{
  if (m->n_pins == 0)
    return;
  int i = rand_r(&m->seed) % m->n_pins;
  struct held_pin *h = &m->pins[i];
  /* Still pinned: every run of the entry is where lookup said. */
  for (uint32_t r = 0; r < h->info.n_runs; r++)
    cr_assert_eq(dir_check_pinned(m->d, h->pin, h->info.runs[r].first, h->info.runs[r].count, why,
                                  sizeof(why)),
                 ECC_OK, "%s", why);
  int rc = dir_unpin(m->d, h->pin, why, sizeof(why));
  cr_assert_eq(rc, ECC_OK, "%s", why);
  if (dir_check_pinned(m->d, h->pin, h->info.runs[0].first, 1, NULL, 0) == ECC_ERR_CLOSED)
    *h = m->pins[--m->n_pins];
}

static void op_remove(struct model *m)
{
  char key[32];
  random_key(m, key, sizeof(key));
  struct dir_entry_info before = key_before(m, key);
  int want = before.state == DIR_STATE_FREE                          ? ECC_ERR_RANGE
             : before.state == DIR_STATE_RESERVED || before.pins > 0 ? ECC_ERR_BUSY
                                                                     : ECC_OK;
  int rc = dir_remove(m->d, key, why, sizeof(why));
  cr_assert_eq(rc, want, "remove %s (state %d, %u pins): %d %s", key, before.state, before.pins, rc,
               why);
  cr_assert(!present(m->d, key) || rc != ECC_OK);
}

Test(directory, randomized_run_keeps_every_invariant)
{
  struct fx f;
  fx_open(&f, 512, 64, 64, 32, 0);
  struct model m = {.d = &f.d, .seed = 20261201};
  for (int op = 0; op < 20000; op++) {
    int pick = rand_r(&m.seed) % 10;
    if (pick < 4)
      op_reserve(&m);
    else if (pick < 5)
      op_finish(&m);
    else if (pick < 8)
      op_lookup(&m);
    else if (pick < 9)
      op_unpin(&m);
    else
      op_remove(&m);
    check(&f.d);
  }
  struct dir_counters c = counters(&f.d);
  cr_assert_gt(m.new_entries, 1000);
  double single = 100.0 * (double)m.single_run / (double)m.new_entries;
  fprintf(stderr,
          "directory random run: %llu new entries, %.1f%% in one run, %.3f runs per entry, "
          "%llu evictions, %llu refused (full)\n",
          (unsigned long long)m.new_entries, single, (double)m.runs / (double)m.new_entries,
          (unsigned long long)c.evictions, (unsigned long long)c.full);
  cr_expect_gt(single, 90.0, "only %.1f%% of entries in one run", single);
  cr_expect_gt(c.evictions, 0);
}

/* ---- many processes ---- */

#define MP_CHILDREN 8
#define MP_OPS 2500
#define MP_BS 64u

struct mp_tally {
  uint64_t reserve_ok, keys_looked, found, busy;
};

/* The fill of key k's blocks: its number in every byte, never 0. */
static unsigned char mp_fill(int k)
{
  return (unsigned char)(1 + k % 251);
}

static void mp_write(unsigned char *data, const struct dir_entry_info *e, int k)
{
  for (uint32_t r = 0; r < e->n_runs; r++)
    memset(data + (uint64_t)e->runs[r].first * MP_BS, mp_fill(k), e->runs[r].count * MP_BS);
}

static bool mp_verify(const unsigned char *data, const struct dir_entry_info *e, int k)
{
  for (uint32_t r = 0; r < e->n_runs; r++)
    for (uint64_t i = 0; i < e->runs[r].count * MP_BS; i++)
      if (data[e->runs[r].first * MP_BS + i] != mp_fill(k))
        return false;
  return true;
}

/* One child's work: returns 0 or the number of the broken rule. */
static int mp_reserve(struct dir *d, unsigned char *data, int k, struct mp_tally *t)
{
  char key[32];
  int outcome;
  struct dir_entry_info e;
  snprintf(key, sizeof(key), "mp-%d", k);
  int rc =
      dir_reserve(d, key, (uint64_t)(1 + k % 7) * MP_BS - (uint64_t)(k % 5), &outcome, &e, NULL, 0);
  if (rc == ECC_ERR_BUSY) {
    t->busy++;
    return 0;
  }
  if (rc != ECC_OK)
    return 1;
  t->reserve_ok++;
  if (outcome != DIR_RESERVED)
    return 0;
  mp_write(data, &e, k);
  return dir_publish(d, e.ref, NULL, 0) == ECC_OK ? 0 : 2;
}

static int mp_lookup(struct dir *d, const unsigned char *data, int k, struct mp_tally *t)
{
  char key[32];
  const char *kp = key;
  bool found;
  struct dir_entry_info e;
  struct dir_pin_ref pin;
  snprintf(key, sizeof(key), "mp-%d", k);
  if (dir_lookup(d, &kp, 1, 1, &found, &e, &pin, NULL, 0) != ECC_OK)
    return 3;
  t->keys_looked++;
  if (!found)
    return 0;
  t->found++;
  if (!mp_verify(data, &e, k))
    return 4;
  for (uint32_t r = 0; r < e.n_runs; r++)
    if (dir_check_pinned(d, pin, e.runs[r].first, e.runs[r].count, NULL, 0) != ECC_OK)
      return 5;
  if (!mp_verify(data, &e, k))
    return 6;
  return dir_unpin(d, pin, NULL, 0) == ECC_OK ? 0 : 7;
}

static int mp_child(struct dir *d, unsigned char *data, unsigned seed, struct mp_tally *t)
{
  char key[32];
  for (int op = 0; op < MP_OPS; op++) {
    int k = rand_r(&seed) % 100, pick = rand_r(&seed) % 8, rc = 0;
    if (pick < 3)
      rc = mp_reserve(d, data, k, t);
    else if (pick < 7)
      rc = mp_lookup(d, data, k, t);
    else {
      snprintf(key, sizeof(key), "mp-%d", k);
      int r = dir_remove(d, key, NULL, 0);
      rc = r == ECC_OK || r == ECC_ERR_BUSY || r == ECC_ERR_RANGE ? 0 : 8;
    }
    if (rc != 0)
      return rc;
  }
  return 0;
}

Test(directory, many_processes_share_one_directory)
{
  struct fx f;
  size_t data_bytes = 256 * MP_BS;
  fx_open(&f, 256, MP_BS, 64, 64, sizeof(struct mp_tally) * MP_CHILDREN + data_bytes);
  struct mp_tally *tally = fx_extra(&f);
  unsigned char *data = (unsigned char *)(tally + MP_CHILDREN);
  pid_t pids[MP_CHILDREN];
  for (int i = 0; i < MP_CHILDREN; i++) {
    pids[i] = fork_child();
    if (pids[i] == 0)
      _exit(mp_child(&f.d, data, 1000u + (unsigned)i, &tally[i]));
  }
  struct mp_tally sum = {0};
  for (int i = 0; i < MP_CHILDREN; i++) {
    int st;
    cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d broke rule %d", i,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    sum.reserve_ok += tally[i].reserve_ok;
    sum.keys_looked += tally[i].keys_looked;
    sum.found += tally[i].found;
    sum.busy += tally[i].busy;
  }
  check(&f.d);
  struct dir_counters c = counters(&f.d);
  struct listing l;
  list(&f.d, &l);
  cr_expect_eq(c.reservations + c.dedup_hits, sum.reserve_ok);
  cr_expect_eq(c.full, sum.busy);
  cr_expect_eq(c.lookups, sum.keys_looked);
  cr_expect_eq(c.hits, sum.found);
  cr_expect_eq(c.hits + c.misses, c.lookups);
  cr_expect_eq(c.pins, c.hits);
  cr_expect_eq(c.pins_live, 0);
  cr_expect_eq(c.entries, l.n);
  cr_expect_eq(c.reclaimed, 0, "no process died");
  cr_expect_gt(c.hits, 0);
  cr_expect_gt(c.evictions + c.removals, 0);
  for (size_t i = 0; i < l.n; i++)
    cr_expect_eq(l.e[i].state, DIR_STATE_READY, "%s left reserved", l.e[i].key);
}

/* ---- SIGKILL at random moments ---- */

#define CR_WORKERS 2
#define CR_KILLS 500
/* Under a sanitizer a fork and an exit cost 5 to 20 ms each (their shadow
 * memory), more on a loaded machine: the run still stops at 20 s, and asks
 * for fewer kills. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CR_KILLS_MIN 150
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define CR_KILLS_MIN 150
#endif
#endif
#ifndef CR_KILLS_MIN
#define CR_KILLS_MIN CR_KILLS
#endif

/* A worker loops for ever, holding a few reservations and pins at a time
 * so that a kill leaves some behind; a broken rule exits with its number. */
static void crash_worker(struct dir *d, unsigned seed)
{
  struct dir_ref held[4];
  struct dir_pin_ref pins[4];
  int n_held = 0, n_pins = 0;
  char key[32];
  for (;;) {
    int k = rand_r(&seed) % 48, pick = rand_r(&seed) % 6;
    const char *kp = key;
    snprintf(key, sizeof(key), "c-%d", k);
    if (pick == 0 && n_held < 4) {
      int outcome;
      struct dir_entry_info e;
      int rc = dir_reserve(d, key, 1 + (uint64_t)(k % 6) * 64, &outcome, &e, NULL, 0);
      if (rc != ECC_OK && rc != ECC_ERR_BUSY)
        _exit(20);
      if (rc == ECC_OK && outcome == DIR_RESERVED)
        held[n_held++] = e.ref;
    } else if (pick == 1 && n_held > 0) {
      if (dir_publish(d, held[--n_held], NULL, 0) != ECC_OK)
        _exit(21);
    } else if (pick == 2 && n_pins < 4) {
      bool found;
      struct dir_entry_info e;
      if (dir_lookup(d, &kp, 1, 1, &found, &e, &pins[n_pins], NULL, 0) != ECC_OK)
        _exit(22);
      n_pins += found;
    } else if (pick == 3 && n_pins > 0) {
      if (dir_unpin(d, pins[--n_pins], NULL, 0) != ECC_OK)
        _exit(23);
    } else if (pick == 4) {
      int rc = dir_remove(d, key, NULL, 0);
      if (rc != ECC_OK && rc != ECC_ERR_BUSY && rc != ECC_ERR_RANGE)
        _exit(24);
    }
  }
}

static pid_t crash_spawn(struct dir *d, unsigned seed)
{
  pid_t pid = fork_child();
  if (pid == 0)
    crash_worker(d, seed);
  return pid;
}

static void crash_reap(pid_t pid)
{
  int st;
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "worker %d exited by itself (rule %d)",
            (int)pid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

struct owner_scan {
  pid_t pid;
  int reserved; /* by pid */
  int all_reserved;
};

static void count_reserved_by(void *user, const struct dir_entry_info *e)
{
  struct owner_scan *s = user;
  s->reserved += e->state == DIR_STATE_RESERVED && e->owner.pid == s->pid;
  s->all_reserved += e->state == DIR_STATE_RESERVED;
}

/* After a kill: the check passes (taking the lock, rebuilding if the victim
 * held it), and once reclaimed nothing of the victim's is left reserved.
 * Each live worker holds at most 4 reservations and 4 pins: more live ones
 * would be some dead worker's, never reclaimed. */
static void crash_after_kill(struct dir *d, pid_t victim)
{
  check(d);
  cr_assert_eq(dir_reclaim(d, NULL, why, sizeof(why)), ECC_OK, "%s", why);
  struct owner_scan s = {victim, 0, 0};
  cr_assert_eq(dir_list(d, count_reserved_by, &s), ECC_OK);
  cr_assert_eq(s.reserved, 0, "the dead worker %d still holds %d reservations", (int)victim,
               s.reserved);
  cr_assert_leq(s.all_reserved, 4 * CR_WORKERS, "%d reservations live", s.all_reserved);
  uint64_t pins = counters(d).pins_live;
  cr_assert_leq(pins, 4 * CR_WORKERS, "%llu pins live", (unsigned long long)pins);
}

static uint64_t mono_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

Test(directory, sigkill_at_random_moments_is_recovered, .timeout = 120)
{
  struct fx f;
  fx_open(&f, 128, 64, 64, 64, 0);
  pid_t pids[CR_WORKERS];
  unsigned seed = 77, kills = 0;
  for (int i = 0; i < CR_WORKERS; i++)
    pids[i] = crash_spawn(&f.d, seed + (unsigned)i);
  uint64_t start = mono_ms();
  while (kills < CR_KILLS && mono_ms() - start < 20000) {
    int i = rand_r(&seed) % CR_WORKERS;
    usleep((useconds_t)(rand_r(&seed) % 1000));
    pid_t victim = pids[i];
    kill(victim, SIGKILL);
    kills++;
    /* The replacement starts while the victim's memory is torn down (slow
     * under sanitizers); the checks wait for the victim to be reaped. */
    pids[i] = crash_spawn(&f.d, seed + kills * 131u);
    crash_reap(victim);
    crash_after_kill(&f.d, victim);
  }
  for (int i = 0; i < CR_WORKERS; i++) {
    kill(pids[i], SIGKILL);
    crash_reap(pids[i]);
  }
  cr_assert_geq(kills, CR_KILLS_MIN, "only %u kills in 20 s", kills);
  uint32_t freed;
  cr_assert_eq(dir_reclaim(&f.d, &freed, why, sizeof(why)), ECC_OK);
  check(&f.d);
  struct dir_counters c = counters(&f.d);
  struct owner_scan none = {0, 0, 0};
  struct listing l;
  list(&f.d, &l);
  for (size_t i = 0; i < l.n; i++)
    none.reserved += l.e[i].state == DIR_STATE_RESERVED;
  fprintf(stderr,
          "directory crash run: %u kills in %llu ms, %llu recoveries, %llu reclaimed, "
          "%llu reservations\n",
          kills, (unsigned long long)(mono_ms() - start), (unsigned long long)c.recoveries,
          (unsigned long long)c.reclaimed, (unsigned long long)c.reservations);
  cr_expect_eq(none.reserved, 0);
  cr_expect_eq(c.pins_live, 0);
  cr_expect_gt(c.reclaimed, 0);
  cr_expect_gt(c.recoveries, 0, "no kill ever hit a worker inside the lock");
  cr_expect_gt(c.reservations, kills);
}

/* ---- threads of one process ---- */

struct th_arg {
  struct dir *d;
  unsigned char *data;
  unsigned seed;
  struct mp_tally tally;
  int rc;
};

static void *th_run(void *p)
{
  struct th_arg *a = p;
  a->rc = mp_child(a->d, a->data, a->seed, &a->tally);
  return NULL;
}

/* The same work in threads sharing one struct dir: blocks are written and
 * read outside the lock, so a block handed to a writer while a reader
 * still holds it is a data race that TSan reports. */
Test(directory, threads_share_one_directory)
{
  struct fx f;
  fx_open(&f, 256, MP_BS, 64, 64, 256 * MP_BS);
  struct th_arg args[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (struct th_arg){.d = &f.d, .data = fx_extra(&f), .seed = 500u + (unsigned)i};
    cr_assert_eq(pthread_create(&t[i], NULL, th_run, &args[i]), 0);
  }
  uint64_t reserve_ok = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    cr_expect_eq(args[i].rc, 0, "thread %d broke rule %d", i, args[i].rc);
    reserve_ok += args[i].tally.reserve_ok;
  }
  check(&f.d);
  struct dir_counters c = counters(&f.d);
  cr_expect_eq(c.reservations + c.dedup_hits, reserve_ok);
  cr_expect_eq(c.pins_live, 0);
}

/* A load's hold: one pin per distinct entry its blocks lie in (an entry
 * named again after another is not pinned twice), all or nothing: a block
 * outside a pinned entry is RANGE naming it, too few pin slots BUSY, and
 * neither takes a pin; the hold keeps the entry from removal once the
 * host's pin is gone, and dir_unpin_all reports a pin dropped meanwhile. */
Test(directory, hold_blocks_pins_each_entry_once_all_or_nothing)
{
  struct fx f;
  fx_open(&f, 16, 64, 0, 4, 0);
  struct dir_entry_info a = put(&f.d, "a", 2 * 64), b = put(&f.d, "b", 64);
  struct dir_entry_info r = reserve_new(&f.d, "r", 64);
  struct dir_pin_ref pa = pin_key(&f.d, "a", 1, NULL), pb = pin_key(&f.d, "b", 1, NULL);
  uint32_t ids[4] = {a.runs[0].first, b.runs[0].first, a.runs[0].first + 1, a.runs[0].first};
  struct dir_pin_ref held[4];
  uint32_t n = 99, bad = 0;
  cr_assert_eq(dir_hold_blocks(&f.d, ids, 4, held, &n, &bad, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(n, 2, "entries a and b held by %u pins", n);
  cr_expect_eq(counters(&f.d).pins_live, 4);
  check(&f.d);
  /* Full: a third hold of a needs a fifth slot. */
  struct dir_counters before = counters(&f.d);
  cr_expect_eq(dir_hold_blocks(&f.d, ids, 1, held + 2, &n, &bad, why, sizeof(why)), ECC_ERR_BUSY);
  cr_expect(strstr(why, "1 pins needed") != NULL, "why: %s", why);
  cr_expect_eq(n, 0);
  struct dir_counters after = counters(&f.d);
  cr_expect(memcmp(&before, &after, sizeof(before)) == 0, "a refused hold changed counters");
  /* The host's pins go: the holds keep both entries. */
  cr_assert_eq(dir_unpin(&f.d, pa, why, sizeof(why)), ECC_OK, "%s", why);
  cr_assert_eq(dir_unpin(&f.d, pb, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(dir_remove(&f.d, "a", why, sizeof(why)), ECC_ERR_BUSY, "a held entry was removed");
  /* A reservation's block is not held: RANGE naming it, no pin taken. */
  uint32_t mixed[2] = {b.runs[0].first, r.runs[0].first};
  cr_expect_eq(dir_hold_blocks(&f.d, mixed, 2, held + 2, &n, &bad, why, sizeof(why)),
               ECC_ERR_RANGE);
  cr_expect_eq(bad, r.runs[0].first);
  cr_expect_eq(counters(&f.d).pins_live, 2);
  cr_expect_eq(dir_hold_blocks(&f.d, mixed, 0, held + 2, &n, &bad, why, sizeof(why)),
               ECC_ERR_INVALID);
  /* Released: the entries may go; a second release reports the pins gone. */
  cr_assert_eq(dir_unpin_all(&f.d, held, 2, why, sizeof(why)), ECC_OK, "%s", why);
  cr_expect_eq(counters(&f.d).pins_live, 0);
  cr_expect_eq(dir_unpin_all(&f.d, held, 2, why, sizeof(why)), ECC_ERR_CLOSED);
  cr_expect_eq(dir_unpin_all(&f.d, held, 0, why, sizeof(why)), ECC_OK);
  cr_expect_eq(dir_remove(&f.d, "a", why, sizeof(why)), ECC_OK, "%s", why);
  check(&f.d);
}
