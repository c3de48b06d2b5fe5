/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_concurrency.c - the threading section of ecc_plugin_v1.h, stressed
 * for a bounded time: concurrent savers, loaders, a poller and a stats
 * reader on one handle; several connectors in one process; and shutdown
 * racing with callers on the raw plugin table.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers.h"

static char cdir[64];

static void setup(void)
{
  snprintf(cdir, sizeof(cdir), "/dev/shm/eccconc-XXXXXX");
  cr_assert_not_null(mkdtemp(cdir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void)
{
  DIR *d = opendir(cdir);
  if (d != NULL) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
  }
  rmdir(cdir);
}

TestSuite(concurrency, .init = setup, .fini = teardown, .timeout = 120);

/* How long each stress runs; ECC_STRESS_MS overrides the 2 s default. */
static int64_t stress_ms(void)
{
  const char *env = getenv("ECC_STRESS_MS");
  long v = env != NULL ? strtol(env, NULL, 10) : 0;
  return v > 0 ? v : 2000;
}

static int64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- one handle: two savers, a loader, a poller, a stats reader ---------- */

#define BS 256u
#define NB 65536u
#define SAVERS 2
#define KEYS_MAX 2000000
#define ROTATION (NB / 4 / 4) /* entries before a saver's blocks repeat */

enum { RUNNING, STOPPED, DRAINED };

struct shared {
  ecc_connector_t *c;
  atomic_int phase;                   /* RUNNING; STOPPED: producers stop; DRAINED: all submitted */
  atomic_int give_up;                 /* the poller and the stats reader stop now */
  atomic_int poller_finished;         /* it saw every accepted save and load */
  atomic_uint_fast64_t saved[SAVERS]; /* saves accepted per saver */
  atomic_uint_fast64_t loaded;        /* loads accepted */
  atomic_int bad;                     /* first violation, as a line number */
  char why[256];
  atomic_uint_fast64_t seen[SAVERS]; /* saves reported per saver (written by the poller) */
  uint64_t seen_loads;
  uint64_t stats_reads;
};

static void violation(struct shared *s, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void violation(struct shared *s, int line, const char *fmt, ...)
{
  int zero = 0;
  if (!atomic_compare_exchange_strong(&s->bad, &zero, line))
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->why, sizeof(s->why), fmt, ap);
  va_end(ap);
}

struct saver_arg {
  struct shared *s;
  int id;
};

static void *saver_main(void *arg)
{
  struct saver_arg *a = arg;
  struct shared *s = a->s;
  static uint8_t src[SAVERS][4 * BS];
  th_fill(src[a->id], sizeof(src[a->id]), (uint64_t)a->id + 1);
  unsigned seed = (unsigned)a->id * 7919u + 1;
  uint64_t n = 0;
  while (atomic_load(&s->phase) == RUNNING && n < KEYS_MAX) {
    /* The entries of one batch must not write the same block (which copy
     * lands last is unspecified, and the host engine's threads would race
     * on it): blocks rotate through the saver's own quarter, and a saver
     * waits while a whole quarter's worth of its saves is unreported. */
    if (n - atomic_load(&s->seen[a->id]) >= ROTATION) {
      int rc = ecc_flush(s->c, NULL); /* what waits may be queued, not yet submitted */
      if (rc != ECC_OK && rc != ECC_ERR_BUSY)
        violation(s, __LINE__, "flush returned %d", rc);
      sched_yield();
      continue;
    }
    char key[32];
    snprintf(key, sizeof(key), "%d-%llu", a->id, (unsigned long long)n);
    uint32_t ids[4];
    for (int b = 0; b < 4; b++)
      ids[b] = (uint32_t)(a->id * (NB / 4) + (n * 4 + (uint64_t)b) % (NB / 4)); /* own quarter */
    ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)src[a->id], 1 + rand_r(&seed) % (4 * BS), ids,
                          4};
    int rc = ecc_save(s->c, &e, 1);
    if (rc != ECC_OK) {
      violation(s, __LINE__, "save returned %d", rc);
      break;
    }
    atomic_store(&s->saved[a->id], ++n);
    rc = ecc_flush(s->c, NULL);
    if (rc == ECC_ERR_BUSY)
      sched_yield(); /* the queue stays; a later flush by anyone submits it */
    else if (rc != ECC_OK)
      violation(s, __LINE__, "flush returned %d", rc);
  }
  return NULL;
}

static void *loader_main(void *arg)
{
  struct shared *s = arg;
  static uint8_t dst[4 * BS]; /* never read: copies into it are ordered by the engine */
  unsigned seed = 99;
  uint64_t n = 0;
  while (atomic_load(&s->phase) == RUNNING) {
    uint32_t ids[4];
    for (int b = 0; b < 4; b++)
      ids[b] = NB / 2 + rand_r(&seed) % (NB / 2); /* the half no saver writes */
    ecc_load_entry_t e = {n, ids, 4, (uint64_t)(uintptr_t)dst, 1 + rand_r(&seed) % sizeof(dst)};
    int rc = ecc_load(s->c, &e, 1, NULL);
    if (rc == ECC_OK)
      atomic_store(&s->loaded, ++n);
    else if (rc == ECC_ERR_BUSY)
      sched_yield();
    else
      violation(s, __LINE__, "load returned %d", rc);
  }
  return NULL;
}

/* Each saver's keys and the loads' ids must arrive once each, in order. */
static void check_completion(struct shared *s, const ecc_completion_t *d)
{
  if (d->status != ECC_OK)
    violation(s, __LINE__, "completion status %d", d->status);
  if (d->direction == ECC_DIR_LOAD) {
    if (d->transfer_id != s->seen_loads)
      violation(s, __LINE__, "load %llu reported, expected %llu",
                (unsigned long long)d->transfer_id, (unsigned long long)s->seen_loads);
    s->seen_loads++;
    return;
  }
  int id = -1;
  unsigned long long n = 0;
  if (sscanf(d->key, "%d-%llu", &id, &n) != 2 || id < 0 || id >= SAVERS) {
    violation(s, __LINE__, "unknown key '%s'", d->key);
    return;
  }
  uint64_t want = atomic_load(&s->seen[id]);
  if (n != want)
    violation(s, __LINE__, "key %s reported, expected %d-%llu", d->key, id,
              (unsigned long long)want);
  atomic_store(&s->seen[id], want + 1);
}

static int all_seen(struct shared *s);

/* Runs until everything accepted has been reported once the producers are
 * done (or until told to give up). */
static void *poller_main(void *arg)
{
  struct shared *s = arg;
  ecc_completion_t done[7]; /* odd cap: batches split across polls */
  while (!atomic_load(&s->give_up)) {
    int drained = atomic_load(&s->phase) == DRAINED;
    size_t n = 0;
    int rc = ecc_poll(s->c, done, 7, &n);
    if (rc != ECC_OK) {
      violation(s, __LINE__, "poll returned %d", rc);
      break;
    }
    for (size_t i = 0; i < n; i++)
      check_completion(s, &done[i]);
    if (drained && n == 0 && all_seen(s)) {
      atomic_store(&s->poller_finished, 1);
      break;
    }
    if (n == 0)
      sched_yield();
  }
  return NULL;
}

static void *stats_main(void *arg)
{
  struct shared *s = arg;
  ecc_stats_t prev = {.struct_size = sizeof(prev)};
  while (!atomic_load(&s->give_up)) {
    ecc_stats_t st = {.struct_size = sizeof(st)};
    ecc_info_t info = {.struct_size = sizeof(info)};
    char text[256];
    if (ecc_get_stats(s->c, &st) != ECC_OK || ecc_describe(s->c, &info) != ECC_OK ||
        ecc_last_error(s->c, text, sizeof(text)) != ECC_OK) {
      violation(s, __LINE__, "stats, describe or last_error failed");
      break;
    }
    if (st.save.entries < prev.save.entries || st.load.entries < prev.load.entries ||
        st.save.bytes < prev.save.bytes || st.load.transfers < prev.load.transfers)
      violation(s, __LINE__, "counters went backwards");
    if (info.block_size != BS || info.num_blocks != NB)
      violation(s, __LINE__, "describe changed under load");
    prev = st;
    s->stats_reads++;
  }
  return NULL;
}

static uint64_t total_saved(struct shared *s)
{
  uint64_t t = 0;
  for (int i = 0; i < SAVERS; i++)
    t += atomic_load(&s->saved[i]);
  return t;
}

static int all_seen(struct shared *s)
{
  for (int i = 0; i < SAVERS; i++)
    if (atomic_load(&s->seen[i]) != atomic_load(&s->saved[i]))
      return 0;
  return s->seen_loads == atomic_load(&s->loaded);
}

Test(concurrency, savers_loader_poller_and_stats_reader_share_one_handle)
{
  static struct shared s;
  memset(&s, 0, sizeof(s));
  s.c = th_open_as(
      th_ini_at(cdir, "both", th_region_name(), BS, NB, NULL, "[connector]\nmax_inflight = 8\n"),
      "both");
  pthread_t savers[SAVERS], loader, poller, reader;
  struct saver_arg args[SAVERS];
  for (int i = 0; i < SAVERS; i++) {
    args[i] = (struct saver_arg){&s, i};
    cr_assert_eq(pthread_create(&savers[i], NULL, saver_main, &args[i]), 0);
  }
  cr_assert_eq(pthread_create(&loader, NULL, loader_main, &s), 0);
  cr_assert_eq(pthread_create(&poller, NULL, poller_main, &s), 0);
  cr_assert_eq(pthread_create(&reader, NULL, stats_main, &s), 0);
  usleep((useconds_t)stress_ms() * 1000);
  atomic_store(&s.phase, STOPPED);
  for (int i = 0; i < SAVERS; i++)
    pthread_join(savers[i], NULL);
  pthread_join(loader, NULL);

  /* Submit what the savers left queued, then let the poller catch up. */
  int64_t give_up = now_ms() + 30000;
  int rc;
  while ((rc = ecc_flush(s.c, NULL)) == ECC_ERR_BUSY && now_ms() < give_up)
    usleep(100);
  cr_expect_eq(rc, ECC_OK);
  atomic_store(&s.phase, DRAINED);
  while (!atomic_load(&s.poller_finished) && atomic_load(&s.bad) == 0 && now_ms() < give_up)
    usleep(1000);
  atomic_store(&s.give_up, 1);
  pthread_join(poller, NULL);
  pthread_join(reader, NULL);

  cr_assert_eq(atomic_load(&s.bad), 0, "line %d: %s", atomic_load(&s.bad), s.why);
  cr_assert(atomic_load(&s.poller_finished), "not every accepted save or load was reported");
  ecc_completion_t extra[4];
  size_t n = 7;
  cr_assert_eq(ecc_poll(s.c, extra, 4, &n), ECC_OK);
  cr_expect_eq(n, 0, "completions reported twice");
  ecc_stats_t st = {.struct_size = sizeof(st)};
  cr_assert_eq(ecc_get_stats(s.c, &st), ECC_OK);
  cr_expect_eq(st.save.entries, total_saved(&s));
  cr_expect_eq(st.load.entries, atomic_load(&s.loaded));
  cr_log_info("one handle, %lld ms: %llu saves, %llu loads, %llu stats reads, %llu save batches",
              (long long)stress_ms(), (unsigned long long)total_saved(&s),
              (unsigned long long)atomic_load(&s.loaded), (unsigned long long)s.stats_reads,
              (unsigned long long)st.save.transfers);
  cr_assert_gt(total_saved(&s), 0);
  cr_assert_gt(atomic_load(&s.loaded), 0);
  cr_assert_eq(ecc_close(s.c), ECC_OK);
}

/* ---- several connectors in one process ------------------------------------ */

#define OWN 4   /* threads with a connector and region of their own */
#define RING 16 /* entries in flight between the paired producer and consumer */
#define PBS 1024u
#define ROWS 4u

struct own_arg {
  const char *ini;
  int id;
  uint64_t rounds;
  char why[200];
};

static int wait_done(ecc_connector_t *c, ecc_completion_t *d)
{
  int64_t give_up = now_ms() + 10000;
  while (now_ms() < give_up) {
    size_t n = 0;
    if (ecc_poll(c, d, 1, &n) != ECC_OK)
      return -1;
    if (n == 1)
      return d->status;
    sched_yield();
  }
  return -1;
}

/* Save, then load back and compare, on a connector nobody else uses. */
static void *own_main(void *arg)
{
  struct own_arg *a = arg;
  ecc_kv_t kv = {"connector.role", "both"};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c = NULL;
  if (ecc_open(a->ini, &o, &c, a->why, sizeof(a->why)) != ECC_OK)
    return NULL;
  uint8_t src[ROWS * PBS], dst[ROWS * PBS];
  int64_t end = now_ms() + stress_ms();
  while (now_ms() < end) {
    uint64_t seed = (uint64_t)a->id << 32 | a->rounds;
    th_fill(src, sizeof(src), seed);
    uint32_t ids[ROWS];
    for (uint32_t b = 0; b < ROWS; b++)
      ids[b] = (uint32_t)((a->rounds * 5 + b * 3) % 64);
    char key[32];
    snprintf(key, sizeof(key), "own%d-%llu", a->id, (unsigned long long)a->rounds);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)src, sizeof(src), ids, ROWS};
    ecc_load_entry_t l = {a->rounds, ids, ROWS, (uint64_t)(uintptr_t)dst, sizeof(dst)};
    ecc_completion_t d;
    if (ecc_save(c, &s, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK || wait_done(c, &d) != 0 ||
        strcmp(d.key, key) != 0) {
      snprintf(a->why, sizeof(a->why), "save round %llu failed", (unsigned long long)a->rounds);
      break;
    }
    memset(dst, 0, sizeof(dst));
    if (ecc_load(c, &l, 1, NULL) != ECC_OK || wait_done(c, &d) != 0 || d.transfer_id != a->rounds ||
        memcmp(src, dst, sizeof(src)) != 0) {
      snprintf(a->why, sizeof(a->why), "load round %llu failed or differs",
               (unsigned long long)a->rounds);
      break;
    }
    a->rounds++;
  }
  if (ecc_close(c) != ECC_OK && a->why[0] == '\0')
    snprintf(a->why, sizeof(a->why), "close failed");
  return NULL;
}

/* A producer and a consumer connector on one region, in two threads: an
 * entry is handed over after its save completed, and its slot is reused
 * only after the consumer has checked it. */
struct pair {
  const char *ini;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  uint64_t handed;  /* entries handed over */
  uint64_t checked; /* entries the consumer verified */
  int done;
  char why[200];
};

static void fill_entry(uint8_t *buf, uint64_t index)
{
  th_fill(buf, ROWS * PBS, 0xabc000 + index);
}

static void slot_ids(uint64_t index, uint32_t *ids)
{
  for (uint32_t b = 0; b < ROWS; b++)
    ids[b] = (uint32_t)((index % RING) * ROWS + b);
}

/* th_open_as for threads other than the test's: no assertion, reason kept. */
static ecc_connector_t *pair_open(struct pair *p, const char *role)
{
  ecc_kv_t kv = {"connector.role", role};
  ecc_open_options_t o = {
      .struct_size = sizeof(o), .overrides = &kv, .n_overrides = 1, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512];
  if (ecc_open(p->ini, &o, &c, err, sizeof(err)) == ECC_OK)
    return c;
  pthread_mutex_lock(&p->lock);
  snprintf(p->why, sizeof(p->why), "%s: %.180s", role, err);
  p->done = 1;
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

static void *pair_producer(void *arg)
{
  struct pair *p = arg;
  ecc_connector_t *c = pair_open(p, "producer");
  if (c == NULL)
    return NULL;
  static uint8_t src[ROWS * PBS];
  int64_t end = now_ms() + stress_ms();
  for (uint64_t i = 0; now_ms() < end; i++) {
    pthread_mutex_lock(&p->lock);
    while (p->handed - p->checked >= RING && p->why[0] == '\0')
      pthread_cond_wait(&p->changed, &p->lock);
    int failed = p->why[0] != '\0';
    pthread_mutex_unlock(&p->lock);
    if (failed)
      break;
    fill_entry(src, i);
    uint32_t ids[ROWS];
    slot_ids(i, ids);
    char key[32];
    snprintf(key, sizeof(key), "pair-%llu", (unsigned long long)i);
    ecc_save_entry_t s = {key, (uint64_t)(uintptr_t)src, sizeof(src), ids, ROWS};
    ecc_completion_t d;
    if (ecc_save(c, &s, 1) != ECC_OK || ecc_flush(c, NULL) != ECC_OK || wait_done(c, &d) != 0) {
      pthread_mutex_lock(&p->lock);
      snprintf(p->why, sizeof(p->why), "pair save %llu failed", (unsigned long long)i);
      pthread_mutex_unlock(&p->lock);
      break;
    }
    pthread_mutex_lock(&p->lock);
    p->handed = i + 1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
  }
  pthread_mutex_lock(&p->lock);
  p->done = 1;
  pthread_cond_broadcast(&p->changed);
  pthread_mutex_unlock(&p->lock);
  /* The consumer joined our region: close only once it is finished. */
  pthread_mutex_lock(&p->lock);
  while (p->checked < p->handed && p->why[0] == '\0')
    pthread_cond_wait(&p->changed, &p->lock);
  pthread_mutex_unlock(&p->lock);
  ecc_close(c);
  return NULL;
}

static void *pair_consumer(void *arg)
{
  struct pair *p = arg;
  ecc_connector_t *c = pair_open(p, "consumer");
  if (c == NULL)
    return NULL;
  static uint8_t got[ROWS * PBS], want[ROWS * PBS];
  for (uint64_t i = 0;; i++) {
    pthread_mutex_lock(&p->lock);
    while (p->handed <= i && !p->done)
      pthread_cond_wait(&p->changed, &p->lock);
    int more = p->handed > i;
    pthread_mutex_unlock(&p->lock);
    if (!more)
      break;
    uint32_t ids[ROWS];
    slot_ids(i, ids);
    ecc_load_entry_t l = {i, ids, ROWS, (uint64_t)(uintptr_t)got, sizeof(got)};
    ecc_completion_t d;
    fill_entry(want, i);
    if (ecc_load(c, &l, 1, NULL) != ECC_OK || wait_done(c, &d) != 0 ||
        memcmp(got, want, sizeof(got)) != 0) {
      pthread_mutex_lock(&p->lock);
      snprintf(p->why, sizeof(p->why), "entry %llu did not load intact", (unsigned long long)i);
      pthread_cond_broadcast(&p->changed);
      pthread_mutex_unlock(&p->lock);
      break;
    }
    pthread_mutex_lock(&p->lock);
    p->checked = i + 1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->lock);
  }
  ecc_close(c);
  return NULL;
}

Test(concurrency, several_connectors_in_one_process_never_share_state)
{
  struct own_arg own[OWN];
  pthread_t th[OWN], prod, cons;
  for (int i = 0; i < OWN; i++) {
    own[i] = (struct own_arg){.ini = th_ini_at(cdir, "both", th_region_name(), PBS, 64, NULL, NULL),
                              .id = i};
    cr_assert_eq(pthread_create(&th[i], NULL, own_main, &own[i]), 0);
  }
  static struct pair p;
  memset(&p, 0, sizeof(p));
  p.ini = th_ini_at(cdir, "both", th_region_name(), PBS, RING * ROWS, NULL,
                    "[region]\njoin_timeout_ms = 10000\n");
  pthread_mutex_init(&p.lock, NULL);
  pthread_cond_init(&p.changed, NULL);
  /* The producer creates the region; the consumer's open joins it. */
  cr_assert_eq(pthread_create(&prod, NULL, pair_producer, &p), 0);
  cr_assert_eq(pthread_create(&cons, NULL, pair_consumer, &p), 0);
  for (int i = 0; i < OWN; i++)
    pthread_join(th[i], NULL);
  pthread_join(prod, NULL);
  pthread_join(cons, NULL);
  uint64_t rounds = 0;
  for (int i = 0; i < OWN; i++) {
    cr_expect_str_eq(own[i].why, "", "connector %d: %s", i, own[i].why);
    cr_expect_gt(own[i].rounds, 0, "connector %d made no progress", i);
    rounds += own[i].rounds;
  }
  cr_expect_str_eq(p.why, "", "%s", p.why);
  cr_expect_eq(p.checked, p.handed);
  cr_expect_gt(p.handed, 0);
  cr_log_info("%d private connectors: %llu save+load rounds; pair: %llu entries handed over", OWN,
              (unsigned long long)rounds, (unsigned long long)p.handed);
  pthread_mutex_destroy(&p.lock);
  pthread_cond_destroy(&p.changed);
  cr_expect_eq(th_count_entries(cdir), 0, "regions left behind");
}

/* ---- shutdown racing with callers, on the raw table ------------------------ */

#define RACERS 4

struct race {
  const ecc_plugin_v1_t *t;
  ecc_handle_t h;
  atomic_int go;
  atomic_int shut_returned; /* shutdown has returned */
  atomic_int bad;
  char why[200];
  uint64_t calls;
  uint64_t closed;
};

struct racer {
  struct race *r;
  int id;
  uint64_t calls;
  uint64_t closed;
};

static void race_fail(struct race *r, const char *what, int rc, int after)
{
  int zero = 0;
  if (atomic_compare_exchange_strong(&r->bad, &zero, 1))
    snprintf(r->why, sizeof(r->why), "%s returned %d%s", what, rc,
             after ? " after shutdown had returned" : "");
}

/* One call of the mix; returns its status. */
static int one_call(const ecc_plugin_v1_t *t, ecc_handle_t h, unsigned k, uint8_t *buf,
                    const char **what)
{
  uint32_t ids[] = {k % 16, (k + 1) % 16};
  ecc_completion_t done[4];
  size_t n;
  char text[128];
  switch (k % 7) {
  case 0: {
    char key[24];
    snprintf(key, sizeof(key), "r%u", k);
    ecc_save_entry_t e = {key, (uint64_t)(uintptr_t)buf, 100, ids, 2};
    *what = "save";
    return t->save(h, &e, 1);
  }
  case 1:
    *what = "flush";
    return t->flush(h, NULL);
  case 2: {
    ecc_load_entry_t e = {k, ids, 2, (uint64_t)(uintptr_t)buf, 128};
    *what = "load";
    return t->load(h, &e, 1, NULL);
  }
  case 3:
    *what = "poll";
    return t->poll(h, done, 4, &n);
  case 4: {
    ecc_stats_t st = {.struct_size = sizeof(st)};
    *what = "stats";
    return t->stats(h, &st);
  }
  case 5:
    *what = "last_error";
    return t->last_error(h, text, sizeof(text));
  default: {
    ecc_info_t info = {.struct_size = sizeof(info)};
    *what = "describe";
    return t->describe(h, &info);
  }
  }
}

static void *racer_main(void *arg)
{
  struct racer *me = arg;
  struct race *r = me->r;
  uint8_t src[128], dst[128]; /* saves read src, loads write dst: never the same */
  memset(src, 7, sizeof(src));
  while (!atomic_load(&r->go))
    sched_yield();
  unsigned k = (unsigned)me->id;
  for (int after = 0; after < 50;) {
    int shut = atomic_load(&r->shut_returned);
    const char *what = "?";
    uint8_t *buf = (k % 7) == 2 ? dst : src;
    int rc = one_call(r->t, r->h, k, buf, &what);
    k += RACERS;
    me->calls++;
    if (rc == ECC_ERR_CLOSED)
      me->closed++;
    if (shut && rc != ECC_ERR_CLOSED)
      race_fail(r, what, rc, 1);
    else if (rc != ECC_OK && rc != ECC_ERR_CLOSED && rc != ECC_ERR_BUSY)
      race_fail(r, what, rc, 0);
    if (shut)
      after++; /* a few calls once it is closed, then stop */
  }
  return NULL;
}

static ecc_handle_t raw_create(const ecc_plugin_v1_t *t, const char *name)
{
  ecc_kv_v1_t kv[] = {{"region.dir", cdir},           {"region.name", name},
                      {"region.block_size", "64"},    {"region.size", "1KiB"},
                      {"engine.type", "host"},        {"engine.host_threads", "2"},
                      {"connector.max_inflight", "4"}};
  char err[256] = "";
  ecc_create_args_v1_t args = {sizeof(args), 1,   0,          kv, sizeof(kv) / sizeof(kv[0]),
                               NULL,         err, sizeof(err)};
  ecc_handle_t h = 0;
  cr_assert_eq(t->create(&args, &h), ECC_OK, "%s", err);
  return h;
}

Test(concurrency, shutdown_racing_with_callers_returns_ok_or_closed)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  static struct race r;
  uint64_t rounds = 0, calls = 0, closed = 0;
  int64_t slowest = 0; /* ms a shutdown took while callers kept calling */
  unsigned seed = 12345;
  int64_t end = now_ms() + stress_ms();
  while (now_ms() < end) {
    memset(&r, 0, sizeof(r));
    r.t = t;
    r.h = raw_create(t, th_region_name());
    pthread_t th[RACERS];
    struct racer me[RACERS];
    for (int i = 0; i < RACERS; i++) {
      me[i] = (struct racer){.r = &r, .id = i};
      cr_assert_eq(pthread_create(&th[i], NULL, racer_main, &me[i]), 0);
    }
    atomic_store(&r.go, 1);
    usleep((useconds_t)(rand_r(&seed) % 2000));
    int64_t t0 = now_ms();
    int rc = t->shutdown(r.h);
    atomic_store(&r.shut_returned, 1);
    if (now_ms() - t0 > slowest)
      slowest = now_ms() - t0;
    cr_assert_eq(rc, ECC_OK, "round %llu: shutdown returned %d", (unsigned long long)rounds, rc);
    for (int i = 0; i < RACERS; i++) {
      pthread_join(th[i], NULL);
      calls += me[i].calls;
      closed += me[i].closed;
    }
    cr_assert_eq(atomic_load(&r.bad), 0, "round %llu: %s", (unsigned long long)rounds, r.why);
    cr_assert_eq(t->shutdown(r.h), ECC_ERR_CLOSED);
    rounds++;
  }
  cr_log_info("shutdown races: %llu rounds, %llu calls, %llu answered ECC_ERR_CLOSED, "
              "slowest shutdown %lld ms",
              (unsigned long long)rounds, (unsigned long long)calls, (unsigned long long)closed,
              (long long)slowest);
  cr_expect_gt(rounds, 0);
  cr_expect_eq(th_count_entries(cdir), 0, "regions left behind");
  dlclose(lib);
}

struct double_shut {
  const ecc_plugin_v1_t *t;
  ecc_handle_t h;
  atomic_int go;
  int rc;
};

static void *shut_main(void *arg)
{
  struct double_shut *d = arg;
  while (!atomic_load(&d->go))
    ;
  d->rc = d->t->shutdown(d->h);
  return NULL;
}

Test(concurrency, concurrent_shutdowns_of_one_handle_succeed_exactly_once)
{
  void *lib;
  const ecc_plugin_v1_t *t = th_raw_table(&lib);
  int64_t end = now_ms() + stress_ms() / 4;
  uint64_t rounds = 0;
  while (now_ms() < end) {
    ecc_handle_t h = raw_create(t, th_region_name());
    struct double_shut d[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
      d[i] = (struct double_shut){.t = t, .h = h};
      cr_assert_eq(pthread_create(&th[i], NULL, shut_main, &d[i]), 0);
    }
    for (int i = 0; i < 3; i++)
      atomic_store(&d[i].go, 1);
    int ok = 0;
    for (int i = 0; i < 3; i++) {
      pthread_join(th[i], NULL);
      cr_assert(d[i].rc == ECC_OK || d[i].rc == ECC_ERR_CLOSED, "shutdown returned %d", d[i].rc);
      ok += d[i].rc == ECC_OK;
    }
    cr_assert_eq(ok, 1, "round %llu: %d shutdowns succeeded", (unsigned long long)rounds, ok);
    rounds++;
  }
  cr_log_info("concurrent shutdowns: %llu rounds", (unsigned long long)rounds);
  cr_expect_eq(th_count_entries(cdir), 0);
  dlclose(lib);
}
