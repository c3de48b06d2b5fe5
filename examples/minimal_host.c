/* SPDX-License-Identifier: Apache-2.0 */
/*
 * minimal_host.c - the smallest host program: written only from ecc_host.h
 * (and the ABI header it includes). A producer process saves one entry; a
 * consumer process loads it back and checks it.
 *
 *     minimal_host CONFIG
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"

enum { ROWS = 4, ROW_BYTES = 3072 };

static ecc_connector_t *open_as(const char *ini, const char *role)
{
  ecc_kv_t override = {"connector.role", role};
  ecc_open_options_t opt = {
      .struct_size = sizeof(opt), .overrides = &override, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512];
  if (ecc_open(ini, &opt, &c, err, sizeof(err)) != ECC_OK)
    fprintf(stderr, "%s: %s\n", role, err);
  return c;
}

/* Poll until one completion arrives; the host would do this once a step. */
static int wait_one(ecc_connector_t *c, ecc_completion_t *done)
{
  size_t n = 0;
  while (n == 0) {
    if (ecc_poll(c, done, 1, &n) != ECC_OK)
      return -1;
    if (n == 0)
      usleep(100);
  }
  return done->status;
}

/* The consumer: waits until the producer says the entry is saved, then
 * loads it into its own buffer and compares. */
static int consume(const char *ini, int ready_fd, const unsigned char *expect,
                   const uint32_t *blocks)
{
  static unsigned char back[ROWS * ROW_BYTES];
  char go;
  if (read(ready_fd, &go, 1) != 1)
    return 1; /* the producer failed */
  ecc_connector_t *consumer = open_as(ini, "consumer");
  ecc_load_entry_t l = {1, blocks, ROWS, (uint64_t)(uintptr_t)back, sizeof(back)};
  ecc_completion_t done;
  if (consumer == NULL || ecc_load(consumer, &l, 1, NULL) != ECC_OK ||
      wait_one(consumer, &done) != ECC_OK)
    return 1;
  int same = memcmp(expect, back, sizeof(back)) == 0;
  printf("consumer: loaded transfer %llu: %s\n", (unsigned long long)done.transfer_id,
         same ? "bytes match" : "BYTES DIFFER");
  ecc_close(consumer);
  return same ? 0 : 1;
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: minimal_host CONFIG\n");
    return 2;
  }
  static unsigned char out[ROWS * ROW_BYTES];
  uint32_t blocks[ROWS] = {7, 8, 9, 3}; /* chosen by the host's allocator */
  for (size_t i = 0; i < sizeof(out); i++)
    out[i] = (unsigned char)(i * 31 + 7);

  /* Fork before any connector exists: the consumer is another process
   * sharing the region, and starts its threads only after the fork. */
  int ready[2];
  if (pipe(ready) != 0)
    return 1;
  pid_t pid = fork();
  if (pid < 0)
    return 1;
  if (pid == 0) {
    close(ready[1]);
    int rc = consume(argv[1], ready[0], out, blocks);
    fflush(stdout);
    _exit(rc);
  }
  close(ready[0]);

  int rc = 1;
  ecc_connector_t *producer = open_as(argv[1], "producer");
  ecc_save_entry_t e = {"sha256:4f2a", (uint64_t)(uintptr_t)out, sizeof(out), blocks, ROWS};
  ecc_completion_t done;
  if (producer != NULL && ecc_save(producer, &e, 1) == ECC_OK &&
      ecc_flush(producer, NULL) == ECC_OK && wait_one(producer, &done) == ECC_OK) {
    printf("producer: saved %s (%llu bytes)\n", done.key, (unsigned long long)done.nbytes);
    fflush(stdout);
    rc = write(ready[1], "s", 1) == 1 ? 0 : 1; /* only now may the consumer load it */
  }
  close(ready[1]);
  int status = 1;
  waitpid(pid, &status, 0);
  ecc_close(producer); /* the last of the two to close removes the region */
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
    rc = 1;
  return rc;
}
