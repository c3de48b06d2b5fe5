/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_two_process.c - a producer and a consumer in two processes share one
 * region through the shim: keys saved in one are loaded in the other, and
 * only after their save completed.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers.h"

#define BS 4096u
#define NB 1024u
#define ENTRIES 40u
#define ROWS 23u /* blocks per entry: entries share no block */

struct note {
  uint32_t index;
  uint64_t nbytes;
  uint32_t ids[ROWS];
};

static void ids_for(uint32_t index, uint32_t *ids)
{
  /* Every other entry is split in two runs to exercise scattered layouts. */
  uint32_t base = index * ROWS;
  for (uint32_t i = 0; i < ROWS; i++)
    ids[i] = (index % 2 == 0) ? base + i : base + (i + 7) % ROWS;
}

static int consumer(const char *ini, int rd)
{
  ecc_open_options_t opt = {.struct_size = sizeof(opt), .log_level = -1};
  ecc_kv_t role = {"connector.role", "consumer"};
  opt.overrides = &role;
  opt.n_overrides = 1;
  ecc_connector_t *c = NULL;
  char err[512];
  if (ecc_open(ini, &opt, &c, err, sizeof(err)) != ECC_OK) {
    fprintf(stderr, "consumer: %s\n", err);
    return 10;
  }
  /* The joiner reports what it joined as what it was asked to be. */
  ecc_info_t info = {.struct_size = sizeof(info)};
  if (ecc_describe(c, &info) != ECC_OK || info.creator != 0 || strcmp(info.role, "consumer") != 0)
    return 16;
  static uint8_t want[ROWS * BS], got[ROWS * BS];
  struct note n;
  uint32_t verified = 0;
  while (read(rd, &n, sizeof(n)) == (ssize_t)sizeof(n)) {
    memset(got, 0, sizeof(got));
    ecc_load_entry_t e = {n.index + 1000, n.ids, ROWS, (uint64_t)(uintptr_t)got, n.nbytes};
    if (ecc_load(c, &e, 1, NULL) != ECC_OK)
      return 11;
    ecc_completion_t done;
    size_t k = 0;
    for (int spins = 0; k == 0 && spins < 1000000; spins++) {
      if (ecc_poll(c, &done, 1, &k) != ECC_OK)
        return 12;
      if (k == 0)
        usleep(50);
    }
    if (k != 1 || done.transfer_id != n.index + 1000 || done.status != ECC_OK)
      return 13;
    /* One load call per entry: batches 1, 2, 3, ... of the consumer's own. */
    if (done.direction != ECC_DIR_LOAD || done.batch != verified + 1 || done.nbytes != n.nbytes ||
        done.elapsed_ns == 0 || done.key[0] != '\0')
      return 17;
    th_fill(want, n.nbytes, n.index);
    if (memcmp(want, got, n.nbytes) != 0)
      return 14;
    verified++;
  }
  ecc_close(c);
  return verified == ENTRIES ? 0 : 15;
}

/* The consumer runs as a fresh process: this binary again, before main. */
__attribute__((constructor)) static void consumer_entry(void)
{
  const char *role, *ini;
  int rd, unused;
  if (th_child_args(&role, &ini, &rd, &unused) && strcmp(role, "consumer") == 0)
    _exit(consumer(ini, rd));
}

Test(two_process, producer_saves_consumer_loads)
{
  const char *ini = th_ini("both", th_region_name(), BS, NB, NULL);
  ecc_kv_t role = {"connector.role", "producer"};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = &role, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *p = NULL;
  char err[512];
  cr_assert_eq(ecc_open(ini, &opt, &p, err, sizeof(err)), ECC_OK, "%s", err);

  int fds[2];
  cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("consumer", ini, fds[0], -1);
  close(fds[0]);

  static uint8_t src[ENTRIES][ROWS * BS];
  uint32_t sent = 0;
  uint64_t saved_bytes = 0;
  for (uint32_t i = 0; i < ENTRIES; i++) {
    struct note n = {.index = i, .nbytes = ROWS * BS - (i % 5) * 1000};
    ids_for(i, n.ids);
    th_fill(src[i], n.nbytes, i);
    char key[32];
    snprintf(key, sizeof(key), "entry-%u", i);
    ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src[i], n.nbytes, n.ids, ROWS};
    cr_assert_eq(ecc_save(p, &e, 1), ECC_OK);
    cr_assert_eq(ecc_flush(p, NULL), ECC_OK);
    ecc_completion_t done;
    cr_assert_eq(th_poll_until(p, &done, 1, 5000), 1);
    cr_assert_str_eq(done.key, key);
    cr_assert_eq(done.status, ECC_OK);
    cr_assert_eq(done.batch, i + 1, "save %u is in batch %llu", i, (unsigned long long)done.batch);
    cr_assert_eq(done.nbytes, n.nbytes);
    saved_bytes += n.nbytes;
    /* Handed over only once its save completed. */
    cr_assert_eq(write(fds[1], &n, sizeof(n)), (ssize_t)sizeof(n));
    sent++;
  }
  close(fds[1]);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "consumer failed with status %d",
            WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  cr_expect_eq(sent, ENTRIES);
  ecc_info_t info = th_describe(p);
  char path[256];
  snprintf(path, sizeof(path), "%s", info.region_path);
  cr_expect_eq(info.creator, 1, "the producer opened first and should have created the region");
  cr_expect_str_eq(info.role, "producer");
  ecc_stats_t st = th_stats(p);
  cr_expect_eq(st.save.transfers, ENTRIES);
  cr_expect_eq(st.save.entries, ENTRIES);
  cr_expect_eq(st.save.bytes, saved_bytes);
  cr_expect_eq(st.load.transfers, 0, "a producer counted loads");
  cr_assert_eq(ecc_close(p), ECC_OK);
  cr_expect(!th_exists(path), "the creator left %s behind", path);
}
