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

static ecc_connector *open_as(const char *ini, const char *role)
{
  ecc_kv override = {"connector.role", role};
  ecc_open_options opt = {.struct_size = sizeof(opt), .overrides = &override,
                          .n_overrides = 1, .log_level = -1};
  ecc_connector *c = NULL;
  char err[512];
  if (ecc_open(ini, &opt, &c, err, sizeof(err)) != ECC_OK)
    fprintf(stderr, "%s: %s\n", role, err);
  return c;
}

/* Poll until one completion arrives; the host would do this once a step. */
static int wait_one(ecc_connector *c, ecc_completion *done)
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

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: minimal_host CONFIG\n");
    return 2;
  }
  static unsigned char out[ROWS * ROW_BYTES], back[ROWS * ROW_BYTES];
  uint32_t blocks[ROWS] = {7, 8, 9, 3}; /* chosen by the host's allocator */
  for (size_t i = 0; i < sizeof(out); i++)
    out[i] = (unsigned char)(i * 31 + 7);

  ecc_connector *producer = open_as(argv[1], "producer");
  if (producer == NULL)
    return 1;
  ecc_save_entry e = {"sha256:4f2a", (uint64_t)(uintptr_t)out, sizeof(out), blocks, ROWS};
  ecc_completion done;
  if (ecc_save(producer, &e, 1) != ECC_OK || ecc_flush(producer, NULL) != ECC_OK ||
      wait_one(producer, &done) != ECC_OK)
    return 1;
  printf("producer: saved %s (%llu bytes)\n", done.key, (unsigned long long)done.nbytes);

  fflush(stdout);
  pid_t pid = fork(); /* the consumer: another process, same region */
  if (pid == 0) {
    ecc_connector *consumer = open_as(argv[1], "consumer");
    ecc_load_entry l = {1, blocks, ROWS, (uint64_t)(uintptr_t)back, sizeof(back)};
    if (consumer == NULL || ecc_load(consumer, &l, 1, NULL) != ECC_OK ||
        wait_one(consumer, &done) != ECC_OK)
      _exit(1);
    int same = memcmp(out, back, sizeof(out)) == 0;
    printf("consumer: loaded transfer %llu: %s\n", (unsigned long long)done.transfer_id,
           same ? "bytes match" : "BYTES DIFFER");
    ecc_close(consumer);
    fflush(stdout);
    _exit(same ? 0 : 1);
  }
  int status = 1;
  waitpid(pid, &status, 0);
  ecc_close(producer);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
