/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo_side.c - one side of the demo alone (eccctl demo --side), for a
 * producer and a consumer on different hosts: the producer saves every
 * entry into its directory and keeps them until it is stopped; the
 * consumer finds each entry by its key through its own connector (with
 * libecc-ucx.so, by asking the producer's host), loads and checks it.
 * Nothing passes between the two but what the connector carries.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host-shim/cli/demo.h"

static volatile sig_atomic_t stop_asked;

static void on_stop(int sig)
{
  (void)sig;
  stop_asked = 1;
}

static int wait_done(ecc_connector_t *c, struct demo_side *side, const char *what, uint64_t id,
                     double deadline)
{
  ecc_completion_t done;
  size_t n = 0;
  while (n == 0) {
    int rc = ecc_poll(c, &done, 1, &n);
    if (rc != ECC_OK) {
      demo_fail(side, c, "ecc_poll", rc);
      return -1;
    }
    if (n == 0 && demo_now() > deadline)
      return demo_failf(side, "%s %" PRIu64 ": no completion before the timeout", what, id);
    if (n == 0)
      demo_nap();
  }
  if (done.status != ECC_OK)
    return demo_failf(side, "%s %" PRIu64 " failed: %s", what, id, ecc_strerror(done.status));
  return 0;
}

static int need_host_engine(struct demo_side *side, ecc_connector_t *c)
{
  if (!demo_has_directory(c))
    return demo_failf(side, "--side needs the region's directory (directory.enabled = true): "
                            "the other side finds entries by key");
  if (side->on_gpu)
    return demo_failf(side, "--side copies from and to host memory: use engine.type = host");
  return 0;
}

static uint64_t row_bytes_of(const struct demo_opts *o, const struct demo_side *side)
{
  return o->row_bytes != 0 ? o->row_bytes : side->block_size;
}

/* Saves entry i from a host buffer; a key already there counts as saved. */
static int save_one(const struct demo_opts *o, ecc_connector_t *c, struct demo_side *side,
                    uint64_t i, unsigned char *buf)
{
  char key[ECC_KEY_MAX + 1];
  demo_key(o, i, key, sizeof(key));
  uint64_t nbytes = demo_entry_rows(o, i) * row_bytes_of(o, side);
  ecc_entry_t e;
  int rc = ecc_reserve(c, key, nbytes, &e);
  if (rc != ECC_OK) {
    demo_fail(side, c, "ecc_reserve", rc);
    return -1;
  }
  if (e.state == ECC_ENTRY_RESERVED) {
    demo_fill(buf, nbytes, o->seed, i);
    ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)buf, nbytes};
    if ((rc = ecc_save_reserved(c, &s, 1)) != ECC_OK || (rc = ecc_flush(c, NULL)) != ECC_OK) {
      demo_fail(side, c, "saving", rc);
      return -1;
    }
    if (wait_done(c, side, "save of entry", i, o->deadline) != 0)
      return -1;
  }
  side->entries++;
  side->bytes += nbytes;
  return 0;
}

int demo_side_producer(const struct demo_opts *o, struct demo_side *side)
{
  ecc_connector_t *c = NULL;
  ecc_info_t info;
  if (demo_open(o, "producer", "auto", side, &c, &info) != 0 || need_host_engine(side, c) != 0) {
    demo_close(c, side);
    return -1;
  }
  uint64_t need = 0, rb = row_bytes_of(o, side);
  for (uint64_t i = 0; i < o->entries; i++)
    need += demo_blocks_for(demo_entry_rows(o, i) * rb, side->block_size);
  if (need > side->num_blocks) {
    demo_close(c, side);
    return demo_failf(side,
                      "%" PRIu64 " entries take %" PRIu64 " blocks, the region has %" PRIu64
                      ": the consumer could find some evicted",
                      o->entries, need, side->num_blocks);
  }
  unsigned char *buf = malloc(demo_max_rows(o) * rb);
  int rc = buf != NULL ? 0 : demo_failf(side, "out of memory");
  double t0 = demo_now();
  for (uint64_t i = 0; rc == 0 && i < o->entries; i++)
    rc = save_one(o, c, side, i, buf);
  side->phase_s = demo_now() - t0;
  free(buf);
  if (rc == 0) {
    printf("producer: %" PRIu64 " entries (%" PRIu64 " bytes) saved; serving them %s\n",
           side->entries, side->bytes,
           o->hold_s > 0 ? "for the --hold time" : "until interrupted (SIGINT or SIGTERM)");
    fflush(stdout);
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    double until = o->hold_s > 0 ? demo_now() + (double)o->hold_s : 0;
    while (!stop_asked && (until == 0 || demo_now() < until))
      usleep(100000);
    side->done = 1;
  }
  demo_close(c, side);
  return rc;
}

/* Looks entry i up until it is there (its producer may still be saving). */
static int find(const struct demo_opts *o, ecc_connector_t *c, struct demo_side *side, uint64_t i,
                ecc_entry_t *e)
{
  char key[ECC_KEY_MAX + 1];
  demo_key(o, i, key, sizeof(key));
  const char *keys[] = {key};
  for (;;) {
    int rc = ecc_lookup(c, keys, 1, 1, e);
    if (rc != ECC_OK && rc != ECC_ERR_TRANSFER && rc != ECC_ERR_BUSY) {
      demo_fail(side, c, "ecc_lookup", rc);
      return -1;
    }
    if (rc == ECC_OK && e->state == ECC_ENTRY_READY)
      return 0;
    if (demo_now() > o->deadline)
      return demo_failf(side, "entry %" PRIu64 " (%s) was not found before the timeout%s", i, key,
                        rc == ECC_ERR_TRANSFER ? " (no link to its producer)" : "");
    usleep(20000);
  }
}

int demo_side_consumer(const struct demo_opts *o, struct demo_side *side)
{
  ecc_connector_t *c = NULL;
  ecc_info_t info;
  if (demo_open(o, "consumer", "auto", side, &c, &info) != 0 || need_host_engine(side, c) != 0) {
    demo_close(c, side);
    return -1;
  }
  uint64_t rb = row_bytes_of(o, side);
  unsigned char *buf = malloc(demo_max_rows(o) * rb);
  int rc = buf != NULL ? 0 : demo_failf(side, "out of memory");
  double t0 = demo_now();
  for (uint64_t i = 0; rc == 0 && i < o->entries; i++) {
    ecc_entry_t e;
    uint64_t nbytes = demo_entry_rows(o, i) * rb;
    if ((rc = find(o, c, side, i, &e)) != 0)
      break;
    if (e.nbytes != nbytes) {
      rc = demo_failf(side, "entry %" PRIu64 " has %" PRIu64 " bytes, the demo made %" PRIu64, i,
                      e.nbytes, nbytes);
      break;
    }
    ecc_load_pinned_t lp = {i, e.token, (uint64_t)(uintptr_t)buf, nbytes};
    int lrc = ecc_load_pinned(c, &lp, 1, NULL);
    if (lrc != ECC_OK) {
      demo_fail(side, c, "ecc_load_pinned", lrc);
      rc = -1;
      break;
    }
    if ((rc = wait_done(c, side, "load of entry", i, o->deadline)) != 0)
      break;
    if (o->corrupt == (int64_t)i)
      buf[nbytes / 2] ^= 0x01;
    uint64_t bad = demo_verify(buf, nbytes, o->seed, i);
    side->mismatched_bytes += bad;
    side->mismatched_entries += bad > 0;
    side->entries++;
    side->bytes += nbytes;
  }
  side->phase_s = demo_now() - t0;
  free(buf);
  side->done = rc == 0;
  demo_close(c, side);
  return rc;
}
