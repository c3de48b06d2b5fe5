/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_abi.c - libFuzzer target: the input is a program of ABI calls (save,
 * flush, load, poll, stats, describe, last_error, calls on dead handles,
 * shutdown and re-create) with random, often invalid, arguments, run
 * against a live connector with the host engine.
 *
 * Invariants checked besides "no crash" (ASan + UBSan watch every byte the
 * plugin touches outside its region: the fuzzer's buffers are exact-size
 * heap blocks):
 *   - every call returns the status a model of the ABI's rules predicts;
 *     a refused call leaves last_error non-empty;
 *   - every accepted save and load is reported exactly once, in order, with
 *     the bytes it moved; nothing refused is ever reported;
 *   - counters agree with what was reported; the region's header page is
 *     never written.
 * At the end of each input everything is flushed and collected, so inputs
 * do not depend on each other.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ecc_plugin_v1.h"
#include "fuzz/fuzz_input.h"

extern const ecc_plugin_v1_t ecc_plugin_v1;
static const ecc_plugin_v1_t *const T = &ecc_plugin_v1;

#define BS 64u
#define NB 32u
#define SRC_BYTES 4096u
#define DST_BYTES 4096u
#define MAX_ENTRIES 4
#define MAX_BLOCKS 8
#define MAX_OPS 64
#define EXPECT_CAP 4096
#define HEADER_BYTES 4096u

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz_abi: invariant broken at line %d: ", __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* ---- the connector and what it owes us ---------------------------------- */

struct config {
  int role;    /* 0 both, 1 producer, 2 consumer */
  int tp_rank; /* saves happen only on rank 0 */
  unsigned max_inflight;
};

static const struct config default_config = {0, 0, 4};

struct expected {
  char key[ECC_KEY_MAX + 1]; /* saves */
  uint64_t id;               /* loads */
  uint64_t nbytes;
};

struct fifo {
  struct expected items[EXPECT_CAP];
  size_t head, count;
};

static char dir[] = "/dev/shm/eccfuzz-XXXXXX";
static ecc_handle_t handle;
static struct config cfg;
static uint8_t *src, *dst;
static uint8_t *header_view; /* read-only mapping of the header page */
static uint8_t header_at_create[HEADER_BYTES];
/* Batched transfers not yet fully reported, with the entries each still
 * owes: the in-flight bound counts these until poll has returned them. */
struct transfers {
  size_t count;
  size_t head;
  size_t left[EXPECT_CAP];
};

static struct fifo saves, loads;
static struct transfers save_tx, load_tx;
static size_t pending_saves; /* saved since the last flush */
static uint64_t saves_reported, loads_reported, last_batch[3];
static uint64_t key_counter;
static ecc_handle_t dead[16]; /* handles shut down earlier */
static size_t n_dead;

static void push(struct fifo *f, const struct expected *e)
{
  CHECK(f->count < EXPECT_CAP, "expectation queue full");
  f->items[(f->head + f->count) % EXPECT_CAP] = *e;
  f->count++;
}

static struct expected pop(struct fifo *f)
{
  struct expected e = f->items[f->head];
  f->head = (f->head + 1) % EXPECT_CAP;
  f->count--;
  return e;
}

static void tx_add(struct transfers *t, size_t entries)
{
  CHECK(t->count < EXPECT_CAP, "transfer queue full");
  t->left[(t->head + t->count) % EXPECT_CAP] = entries;
  t->count++;
}

static void tx_reported(struct transfers *t)
{
  CHECK(t->count > 0, "an entry reported beyond its transfers");
  if (--t->left[t->head] == 0) {
    t->head = (t->head + 1) % EXPECT_CAP;
    t->count--;
  }
}

/* A new connector owes nothing; a shut one's completions are dropped. */
static void reset_model(void)
{
  memset(&saves, 0, sizeof(saves));
  memset(&loads, 0, sizeof(loads));
  memset(&save_tx, 0, sizeof(save_tx));
  memset(&load_tx, 0, sizeof(load_tx));
  pending_saves = 0;
  saves_reported = loads_reported = 0;
  memset(last_batch, 0, sizeof(last_batch));
}

static void log_sink(void *user, int level, const char *msg)
{
  (void)user;
  (void)level;
  CHECK(msg != NULL && memchr(msg, '\0', 4096) != NULL, "log line is not a string");
}

static const ecc_host_services_v1_t services = {
    .struct_size = sizeof(ecc_host_services_v1_t),
    .log_level = ECC_LOG_DEBUG, /* formats every message, for coverage */
    .log = log_sink,
};

static void map_header(void)
{
  ecc_info_v1_t info = {.struct_size = sizeof(info)};
  CHECK(T->describe(handle, &info) == ECC_OK, "describe failed");
  int fd = open(info.region_path, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0, "cannot open %s", info.region_path);
  if (header_view != NULL)
    munmap(header_view, HEADER_BYTES);
  header_view = mmap(NULL, HEADER_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  CHECK(header_view != MAP_FAILED, "cannot map the header");
  memcpy(header_at_create, header_view, HEADER_BYTES);
}

static void create(const struct config *c)
{
  static const char *const roles[] = {"both", "producer", "consumer"};
  char inflight[16], rank[16];
  snprintf(inflight, sizeof(inflight), "%u", c->max_inflight);
  snprintf(rank, sizeof(rank), "%d", c->tp_rank);
  ecc_kv_v1_t kv[] = {
      {"region.dir", dir},
      {"region.name", "fuzz"},
      {"region.block_size", "64"},
      {"region.size", "2KiB"},
      {"engine.type", "host"},
      {"engine.host_threads", "2"},
      {"connector.role", roles[c->role]},
      {"connector.tp_rank", rank},
      {"connector.max_inflight", inflight},
  };
  char err[512] = "";
  ecc_create_args_v1_t args = {
      sizeof(args), ECC_ABI_V1_MAJOR, ECC_ABI_V1_MINOR, kv, sizeof(kv) / sizeof(kv[0]), &services,
      err,          sizeof(err)};
  int rc = T->create(&args, &handle);
  CHECK(rc == ECC_OK && handle != 0, "create failed: %d %s", rc, err);
  cfg = *c;
  reset_model();
  map_header();
}

static void destroy(void)
{
  CHECK(T->shutdown(handle) == ECC_OK, "shutdown failed");
  CHECK(T->shutdown(handle) == ECC_ERR_CLOSED, "second shutdown did not say CLOSED");
  dead[n_dead++ % 16] = handle;
  handle = 0;
}

static void cleanup(void)
{
  if (handle != 0)
    T->shutdown(handle);
  if (header_view != NULL)
    munmap(header_view, HEADER_BYTES);
  char path[128];
  snprintf(path, sizeof(path), "%s/ecc-fuzz.region", dir);
  unlink(path);
  rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  if (mkdtemp(dir) == NULL) {
    perror("fuzz_abi: mkdtemp");
    exit(1);
  }
  atexit(cleanup);
  src = malloc(SRC_BYTES);
  dst = malloc(DST_BYTES);
  CHECK(src != NULL && dst != NULL, "out of memory");
  for (size_t i = 0; i < SRC_BYTES; i++)
    src[i] = (uint8_t)(i * 13 + 1);
  create(&default_config);
  return 0;
}

static void expect_error_text(void)
{
  char text[512];
  memset(text, 0x5a, sizeof(text));
  CHECK(T->last_error(handle, text, sizeof(text)) == ECC_OK, "last_error failed");
  CHECK(memchr(text, '\0', sizeof(text)) != NULL, "last_error is not terminated");
  CHECK(text[0] != '\0', "a refused call left no error text");
}

static void expect_status(const char *what, int got, int want)
{
  CHECK(got == want, "%s returned %d, the ABI's rules say %d", what, got, want);
  if (want != ECC_OK)
    expect_error_text();
}

/* ---- saves ----------------------------------------------------------- */

struct save_case {
  ecc_save_entry_v1_t e;
  char key[ECC_KEY_MAX + 9]; /* room for a key with no NUL within ECC_KEY_MAX + 1 */
  uint32_t ids[MAX_BLOCKS];
};

static void make_ids(struct input *in, uint32_t *ids, uint32_t n)
{
  for (uint32_t i = 0; i < n; i++) {
    uint8_t pick = u8(in);
    if (pick == 0xff)
      ids[i] = UINT32_MAX;
    else if (pick >= 0xf0)
      ids[i] = NB + (pick & 0x0f); /* just past the region */
    else
      ids[i] = pick % NB;
  }
}

static void make_key(struct input *in, char *key, size_t cap, int *null_key)
{
  uint8_t mode = u8(in) % 8;
  *null_key = mode == 0;
  if (mode == 1) {
    key[0] = '\0';
  } else if (mode == 2 || mode == 3) {
    size_t len = mode == 2 ? ECC_KEY_MAX + 1 : ECC_KEY_MAX; /* one too long, longest */
    memset(key, 'k', len);
    key[len] = '\0';
  } else {
    snprintf(key, cap, "key-%llu", (unsigned long long)key_counter++);
  }
}

static void make_save(struct input *in, struct save_case *c)
{
  int null_key;
  make_key(in, c->key, sizeof(c->key), &null_key);
  /* Mostly within MAX_BLOCKS blocks, sometimes more than the blocks hold. */
  uint64_t nbytes = u8(in) % 16 == 0 ? 0 : 1 + u16(in) % (MAX_BLOCKS * BS + BS);
  uint64_t addr;
  uint8_t smode = u8(in) % 16;
  if (smode == 0)
    addr = 0;
  else if (smode == 1 && nbytes > 0)
    addr = UINT64_MAX - u16(in) % nbytes; /* src + nbytes wraps */
  else
    addr = (uint64_t)(uintptr_t)src + (nbytes > 0 ? u16(in) % (SRC_BYTES - nbytes + 1) : 0);
  uint32_t n_blocks = u8(in) % (MAX_BLOCKS + 1);
  make_ids(in, c->ids, n_blocks);
  c->e = (ecc_save_entry_v1_t){null_key ? NULL : c->key, addr, nbytes,
                               u8(in) % 32 == 0 ? NULL : c->ids, n_blocks};
}

static int blocks_status(const uint32_t *ids, uint32_t n)
{
  if (ids == NULL || n == 0)
    return ECC_ERR_INVALID;
  for (uint32_t i = 0; i < n; i++)
    if (ids[i] >= NB)
      return ECC_ERR_RANGE;
  return ECC_OK;
}

/* The ABI's rules for one save entry, in the order the header lists them. */
static int save_entry_status(const ecc_save_entry_v1_t *e)
{
  if (e->key == NULL || e->key[0] == '\0' || strnlen(e->key, ECC_KEY_MAX + 1) > ECC_KEY_MAX)
    return ECC_ERR_INVALID;
  if (e->src == 0 || e->nbytes == 0 || e->src > UINT64_MAX - e->nbytes)
    return ECC_ERR_INVALID;
  int rc = blocks_status(e->block_ids, e->n_blocks);
  if (rc != ECC_OK)
    return rc;
  return (e->nbytes + BS - 1) / BS > e->n_blocks ? ECC_ERR_RANGE : ECC_OK;
}

static void op_save(struct input *in)
{
  static struct save_case cases[MAX_ENTRIES];
  static ecc_save_entry_v1_t entries[MAX_ENTRIES];
  size_t n = u8(in) % (MAX_ENTRIES + 1);
  int want = ECC_OK;
  for (size_t i = 0; i < n; i++) {
    make_save(in, &cases[i]);
    entries[i] = cases[i].e;
    if (want == ECC_OK)
      want = save_entry_status(&entries[i]);
  }
  int null_array = n > 0 && u8(in) % 32 == 0;
  if (n == 0)
    want = ECC_OK;
  else if (null_array)
    want = ECC_ERR_INVALID;
  else if (cfg.role == 2)
    want = ECC_ERR_ROLE;
  expect_status("save", T->save(handle, null_array ? NULL : entries, n), want);
  if (want != ECC_OK || cfg.tp_rank != 0)
    return; /* refused, or not the save rank: nothing will be reported */
  for (size_t i = 0; i < n; i++) {
    struct expected x = {.nbytes = entries[i].nbytes};
    snprintf(x.key, sizeof(x.key), "%s", entries[i].key);
    push(&saves, &x);
  }
  pending_saves += n;
}

/* ---- flush, load, poll --------------------------------------------------- */

/* Nothing queued: no-op; the bound reached: BUSY; a stream with the host
 * engine: INVALID. Whatever is refused stays queued for a later flush. */
static int flush_with(void *stream)
{
  int want = ECC_OK;
  if (pending_saves > 0 && save_tx.count >= cfg.max_inflight)
    want = ECC_ERR_BUSY;
  else if (pending_saves > 0 && stream != NULL)
    want = ECC_ERR_INVALID;
  int rc = T->flush(handle, stream);
  expect_status("flush", rc, want);
  if (rc == ECC_OK && pending_saves > 0) {
    tx_add(&save_tx, pending_saves);
    pending_saves = 0;
  }
  return rc;
}

static void op_flush(struct input *in)
{
  flush_with(u8(in) % 8 == 0 ? (void *)(uintptr_t)0x1000 : NULL);
}

static uint64_t load_bytes(uint64_t cap, uint32_t n_blocks)
{
  uint64_t all = (uint64_t)n_blocks * BS;
  return cap < all ? cap : all;
}

struct load_case {
  ecc_load_entry_v1_t e;
  uint32_t ids[MAX_BLOCKS];
};

static void make_load(struct input *in, struct load_case *c)
{
  uint32_t n_blocks = u8(in) % (MAX_BLOCKS + 1);
  make_ids(in, c->ids, n_blocks);
  uint64_t cap = u8(in) % 16 == 0 ? 0 : 1 + u16(in) % DST_BYTES;
  uint64_t moved = load_bytes(cap, n_blocks);
  uint64_t addr;
  uint8_t mode = u8(in) % 16;
  if (mode == 0)
    addr = 0;
  else if (mode == 1 && moved > 0)
    addr = UINT64_MAX - u16(in) % moved; /* dst + bytes moved wraps */
  else
    addr = (uint64_t)(uintptr_t)dst + (cap > 0 ? u16(in) % (DST_BYTES - cap + 1) : 0);
  c->e = (ecc_load_entry_v1_t){u32(in), u8(in) % 32 == 0 ? NULL : c->ids, n_blocks, addr, cap};
}

static int load_entry_status(const ecc_load_entry_v1_t *e)
{
  if (e->dst == 0 || e->dst_capacity == 0)
    return ECC_ERR_INVALID;
  int rc = blocks_status(e->block_ids, e->n_blocks);
  if (rc != ECC_OK)
    return rc;
  return e->dst > UINT64_MAX - load_bytes(e->dst_capacity, e->n_blocks) ? ECC_ERR_INVALID : ECC_OK;
}

static void op_load(struct input *in)
{
  static struct load_case cases[MAX_ENTRIES];
  static ecc_load_entry_v1_t entries[MAX_ENTRIES];
  size_t n = u8(in) % (MAX_ENTRIES + 1);
  int want = ECC_OK;
  for (size_t i = 0; i < n; i++) {
    make_load(in, &cases[i]);
    entries[i] = cases[i].e;
    if (want == ECC_OK)
      want = load_entry_status(&entries[i]);
  }
  int null_array = n > 0 && u8(in) % 32 == 0;
  void *stream = n > 0 && u8(in) % 32 == 0 ? (void *)(uintptr_t)0x2000 : NULL;
  if (n == 0)
    want = ECC_OK;
  else if (null_array)
    want = ECC_ERR_INVALID;
  else if (cfg.role == 1)
    want = ECC_ERR_ROLE;
  else if (want == ECC_OK && load_tx.count >= cfg.max_inflight)
    want = ECC_ERR_BUSY;
  else if (want == ECC_OK && stream != NULL)
    want = ECC_ERR_INVALID;
  expect_status("load", T->load(handle, null_array ? NULL : entries, n, stream), want);
  if (want != ECC_OK || n == 0)
    return;
  tx_add(&load_tx, n);
  for (size_t i = 0; i < n; i++) {
    struct expected x = {.id = entries[i].transfer_id,
                         .nbytes = load_bytes(entries[i].dst_capacity, entries[i].n_blocks)};
    push(&loads, &x);
  }
}

static void check_completion(const ecc_completion_v1_t *d)
{
  CHECK(d->status == ECC_OK, "a copy failed: %d", d->status);
  CHECK(d->direction == ECC_DIR_SAVE || d->direction == ECC_DIR_LOAD, "direction %u", d->direction);
  CHECK(d->batch >= 1 && d->batch >= last_batch[d->direction], "batch %llu after %llu",
        (unsigned long long)d->batch, (unsigned long long)last_batch[d->direction]);
  last_batch[d->direction] = d->batch;
  if (d->direction == ECC_DIR_SAVE) {
    CHECK(saves.count > 0, "save '%s' reported but none is owed", d->key);
    struct expected x = pop(&saves);
    CHECK(strcmp(d->key, x.key) == 0, "save '%s' reported, '%s' expected", d->key, x.key);
    CHECK(d->nbytes == x.nbytes && d->transfer_id == 0, "save '%s': %llu bytes", d->key,
          (unsigned long long)d->nbytes);
    saves_reported++;
    tx_reported(&save_tx);
    return;
  }
  CHECK(loads.count > 0, "load %llu reported but none is owed", (unsigned long long)d->transfer_id);
  struct expected x = pop(&loads);
  CHECK(d->transfer_id == x.id && d->nbytes == x.nbytes && d->key[0] == '\0',
        "load %llu (%llu bytes) reported, %llu (%llu bytes) expected",
        (unsigned long long)d->transfer_id, (unsigned long long)d->nbytes, (unsigned long long)x.id,
        (unsigned long long)x.nbytes);
  loads_reported++;
  tx_reported(&load_tx);
}

static size_t poll_once(size_t cap)
{
  ecc_completion_v1_t out[9];
  size_t n = 12345;
  int rc = T->poll(handle, out, cap, &n);
  CHECK(rc == ECC_OK, "poll returned %d", rc);
  CHECK(n <= cap, "poll returned %zu of at most %zu", n, cap);
  for (size_t i = 0; i < n; i++)
    check_completion(&out[i]);
  return n;
}

static void op_poll(struct input *in)
{
  uint8_t mode = u8(in) % 16;
  size_t n;
  ecc_completion_v1_t one;
  if (mode == 0) {
    expect_status("poll without out", T->poll(handle, NULL, 3, &n), ECC_ERR_INVALID);
  } else if (mode == 1) {
    expect_status("poll without n_out", T->poll(handle, &one, 1, NULL), ECC_ERR_INVALID);
  } else {
    poll_once(mode % 10);
  }
}

/* ---- the optional functions, dead handles, re-creation ------------------- */

static void op_info(struct input *in)
{
  uint8_t mode = u8(in) % 8;
  ecc_stats_v1_t st;
  ecc_info_v1_t info;
  char text[64];
  switch (mode) {
  case 0:
    CHECK(T->stats(handle, NULL) == ECC_ERR_INVALID, "stats(NULL)");
    break;
  case 1:
    CHECK(T->describe(handle, NULL) == ECC_ERR_INVALID, "describe(NULL)");
    break;
  case 2:
    CHECK(T->last_error(handle, NULL, 5) == ECC_ERR_INVALID, "last_error(NULL, 5)");
    break;
  case 3: /* a caller built against a shorter struct gets only that much */
    memset(&st, 0x77, sizeof(st));
    st.struct_size = 8 + u8(in) % 64;
    CHECK(T->stats(handle, &st) == ECC_OK, "short stats");
    CHECK(((uint8_t *)&st)[sizeof(st) - 1] == 0x77, "stats wrote past its struct_size");
    break;
  case 4:
    memset(text, 0x5a, sizeof(text));
    CHECK(T->last_error(handle, text, 1 + u8(in) % sizeof(text)) == ECC_OK, "last_error");
    CHECK(memchr(text, '\0', sizeof(text)) != NULL, "last_error not terminated");
    break;
  default:
    info.struct_size = sizeof(info);
    CHECK(T->describe(handle, &info) == ECC_OK, "describe");
    CHECK(info.block_size == BS && info.num_blocks == NB, "describe changed");
    break;
  }
}

static void op_dead(struct input *in)
{
  ecc_handle_t h;
  uint8_t mode = u8(in) % 4;
  if (mode == 0 || n_dead == 0)
    h = 0;
  else if (mode == 1)
    h = dead[u8(in) % (n_dead < 16 ? n_dead : 16)];
  else if (mode == 2)
    h = handle ^ ((uint64_t)(u8(in) | 1) << 32); /* live slot, other generation */
  else
    h = (uint64_t)u32(in) << 32 | u16(in);
  if (h == handle)
    return;
  size_t n;
  ecc_completion_v1_t one;
  CHECK(T->poll(h, &one, 1, &n) == ECC_ERR_CLOSED, "poll on a dead handle");
  CHECK(T->flush(h, NULL) == ECC_ERR_CLOSED, "flush on a dead handle");
  CHECK(T->save(h, NULL, 0) == ECC_ERR_CLOSED, "save on a dead handle");
  CHECK(T->shutdown(h) == ECC_ERR_CLOSED, "shutdown of a dead handle");
}

static void op_recreate(struct input *in)
{
  struct config c = {u8(in) % 3, u8(in) % 4 == 0, 1 + u8(in) % 4};
  destroy();
  create(&c);
}

/* ---- the end of every input: everything owed is collected ---------------- */

static int64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void drain(void)
{
  int64_t give_up = now_ms() + 10000;
  while (flush_with(NULL) == ECC_ERR_BUSY) {
    CHECK(now_ms() < give_up, "flush stayed BUSY");
    poll_once(9);
  }
  while (saves.count > 0 || loads.count > 0) {
    CHECK(now_ms() < give_up, "%zu saves and %zu loads were never reported", saves.count,
          loads.count);
    if (poll_once(9) == 0)
      usleep(50);
  }
  CHECK(poll_once(9) == 0, "completions beyond those owed");
  ecc_stats_v1_t st = {.struct_size = sizeof(st)};
  CHECK(T->stats(handle, &st) == ECC_OK, "stats");
  CHECK(st.save.entries == saves_reported && st.load.entries == loads_reported,
        "counters say %llu saves and %llu loads, %llu and %llu were reported",
        (unsigned long long)st.save.entries, (unsigned long long)st.load.entries,
        (unsigned long long)saves_reported, (unsigned long long)loads_reported);
  CHECK(st.save.failed == 0 && st.load.failed == 0, "failed transfers");
  CHECK(memcmp(header_view, header_at_create, HEADER_BYTES) == 0, "the header page changed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct input in = {data, size};
  if (memcmp(&cfg, &default_config, sizeof(cfg)) != 0) {
    destroy();
    create(&default_config);
  }
  for (int op = 0; op < MAX_OPS && in.n > 0; op++) {
    switch (u8(&in) % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
      op_save(&in);
      break;
    case 4:
    case 5:
    case 6:
      op_flush(&in);
      break;
    case 7:
    case 8:
    case 9:
      op_load(&in);
      break;
    case 10:
    case 11:
    case 12:
      op_poll(&in);
      break;
    case 13:
      op_info(&in);
      break;
    case 14:
      op_dead(&in);
      break;
    default:
      op_recreate(&in);
      break;
    }
  }
  drain();
  return 0;
}
