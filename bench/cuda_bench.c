/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c - ecc-bench: how fast the plugin, used through the shim exactly as
 * a host would, moves encoder-cache blocks between the GPU and the shared
 * region, next to two references measured in the same run on the same bytes:
 * upstream's method (one cuMemcpyBatchAsync per step over the same
 * descriptors) and one contiguous copy (the limit of the link).
 *
 * Every configuration's bytes are checked (destinations poisoned first)
 * before any figure is printed; times are medians of CUDA-event timings over
 * rotating buffer sets after a warm-up. A CSV gets every row; the summary
 * table comes last on stdout.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench/churn_layouts.h"
#include "common/clock.h"
#include "ecc_host.h"

enum { M_CONTIG, M_AUTO, M_DMA, M_KERNEL, M_UPSTREAM, N_METHODS };
static const char *const METHOD_NAMES[N_METHODS] = {"contiguous", "ours-auto", "ours-dma",
                                                    "ours-kernel", "upstream"};
static const char *const ENGINE_METHOD[N_METHODS] = {"", "auto", "dma", "kernel", ""};
/* dir-churn and lifo-churn: the layouts a serving cache leaves after churn,
 * placed by the directory and by upstream's LIFO free stack (churn_layouts.c). */
enum { L_CONTIG, L_FRAG, L_SCATTER, L_DIR_CHURN, L_LIFO_CHURN, N_LAYOUTS };
static const char *const LAYOUT_NAMES[N_LAYOUTS] = {"contiguous", "fragmented", "scattered",
                                                    "dir-churn", "lifo-churn"};
enum { D_SAVE = 1, D_LOAD = 2, D_BOTH = 3 };

#define SETS 2                           /* rotating buffer sets per direction */
#define STEP_BYTES (64ull << 20)         /* bytes per step and direction, at every block size */
#define ENTRY_BYTES (1ull << 20)         /* an encoder output of about 1 MiB */
#define GAP 256u                         /* between entries on the device: they never merge there */
#define LAYOUT_STEPS 16u                 /* region blocks for the layouts, in steps */
#define ZONES (LAYOUT_STEPS + 2u * SETS) /* plus one contiguous zone per set */
#define FRAG_RUN 16u                     /* fragmented: runs of 1..16 blocks */
#define MAX_ITERS 64

struct opts {
  int quick;
  int submit_only; /* only the host cost of a step of 4096 one-block entries */
  int iters;
  int device;
  unsigned max_sms;
  const char *csv;
  const char *plugin;
  const char *folder;
};

struct geom {
  uint64_t bs;
  uint32_t entry_blocks, n_entries, step_blocks;
  uint64_t entry_bytes, stride, step_bytes, dev_bytes;
  uint64_t region_blocks;
};

struct descs {
  uint64_t *src, *dst, *len;
  size_t n, cap;
};

struct set {
  uint32_t *ids;  /* n_entries * entry_blocks block ids, entry after entry */
  uint8_t *dev;   /* device buffer: entry i at i * stride */
  uint8_t *image; /* host: what dev holds (save) or must receive (load) */
  ecc_save_entry_t *saves;
  char (*keys)[24];
  ecc_load_entry_t *loads;
  struct descs up; /* the same copies as descriptors over our own mapping */
  uint64_t zone;   /* first block of its contiguous zone */
};

struct result {
  uint64_t bs;
  int layout, directions, method;
  uint32_t entries;
  size_t descs;
  uint64_t bytes;
  double gbps, limit, submit_us, save_us, gpu_ms;
  int sms;
};

typedef CUresult (*batch13_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                               size_t *, size_t, CUstream);
typedef CUresult (*batch12_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                               size_t *, size_t, size_t *, CUstream);

struct bench {
  struct opts o;
  struct geom g;
  ecc_connector_t *conn[N_METHODS];
  uint8_t *map, *blocks;
  size_t map_bytes;
  cudaStream_t compute, copy[2];
  cudaEvent_t start[2], end[2];
  struct set sets[2][SETS]; /* [0]: save sets, [1]: load sets */
  uint8_t *staging;         /* pinned host buffer for checking device data */
  void *batch;
  int batch_abi;
  uint8_t poison;
  uint64_t rng;
  FILE *csv;
  struct result *res;
  size_t n_res, cap_res;
  int failures;
  double save_call_us;       /* ecc_save per entry, 4096 one-block entries */
  double save_4096_us;       /* that ecc_save call */
  double flush_4096_us;      /* flush of those 4096 descriptors */
  double load_4096_us;       /* ecc_load of 4096 one-block entries, destinations ascending */
  double load_4096_mixed_us; /* the same entries in random order */
};

static int g_sms = -1; /* SMs the engine reported for its last batch */

/* ---- small helpers ---- */

static void die(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ecc-bench: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

static void cuda_ok(cudaError_t rc, const char *what)
{
  if (rc != cudaSuccess)
    die("%s: %s", what, cudaGetErrorString(rc));
}

static void *xmalloc(size_t n)
{
  void *p = malloc(n);
  if (p == NULL)
    die("out of memory (%zu bytes)", n);
  return p;
}

static double now_us(void)
{
  return (double)ecc_now_ns() / 1e3;
}

static uint64_t rnd(struct bench *b)
{
  b->rng ^= b->rng << 13;
  b->rng ^= b->rng >> 7;
  b->rng ^= b->rng << 17;
  return b->rng;
}

/* Pseudo-random bytes: no zeros runs, different for every seed. */
static void fill_pattern(uint8_t *p, uint64_t n, uint64_t seed)
{
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (uint64_t i = 0; i < n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t v = x | 0x0101010101010101ull;
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y);
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *size_name(uint64_t bs, char *buf, size_t cap)
{
  if (bs >= (1u << 20) && bs % (1u << 20) == 0)
    snprintf(buf, cap, "%" PRIu64 "MiB", bs >> 20);
  else if (bs >= 1024 && bs % 1024 == 0)
    snprintf(buf, cap, "%" PRIu64 "KiB", bs >> 10);
  else
    snprintf(buf, cap, "%" PRIu64 "B", bs);
  return buf;
}

static const char *directions_name(int directions)
{
  return directions == D_SAVE ? "save" : directions == D_LOAD ? "load" : "both";
}

/* ---- the plugin's log: warnings shown, the engine's choice kept ---- */

static void on_log(void *user, int level, const char *msg)
{
  (void)user;
  const char *p = strstr(msg, "method=");
  if (p != NULL) {
    const char *s = strstr(p, "sms=");
    g_sms = s != NULL ? atoi(s + 4) : 0;
    return;
  }
  if (level <= ECC_LOG_WARN)
    fprintf(stderr, "plugin: %s\n", msg);
}

/* ---- geometry, region, connectors ---- */

static void geom_init(struct geom *g, uint64_t bs)
{
  uint64_t step = STEP_BYTES / bs;
  uint64_t eb = ENTRY_BYTES / bs;
  if (eb == 0)
    eb = 1;
  if (eb > step)
    eb = step;
  memset(g, 0, sizeof(*g));
  g->bs = bs;
  g->entry_blocks = (uint32_t)eb;
  g->n_entries = (uint32_t)(step / eb);
  g->step_blocks = g->n_entries * g->entry_blocks;
  g->entry_bytes = eb * bs;
  g->stride = (g->entry_bytes + GAP + 255) / 256 * 256;
  g->step_bytes = (uint64_t)g->n_entries * g->entry_bytes;
  g->dev_bytes = (uint64_t)g->n_entries * g->stride;
  g->region_blocks = (uint64_t)ZONES * g->step_blocks;
}

static ecc_connector_t *open_connector(struct bench *b, int m, const char *region)
{
  char text[1024];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\nlog_level = debug\n\n"
           "[connector]\nrole = both\nmax_inflight = 8\n\n"
           "[region]\nname = %s\ndir = %s\nblock_size = %" PRIu64 "\nsize = %" PRIu64 "\n\n"
           "[pinning]\nenabled = on\n\n"
           "[engine]\ntype = cuda\nmethod = %s\ndevice = %d\nmax_sms = %u\n",
           b->o.plugin, region, b->o.folder, b->g.bs, b->g.bs * b->g.region_blocks,
           ENGINE_METHOD[m], b->o.device, b->o.max_sms);
  char path[] = "/tmp/ecc-bench-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
    die("cannot write a temporary INI file: %s", strerror(errno));
  close(fd);
  ecc_open_options_t opt = {.struct_size = sizeof(opt), .log = on_log, .log_level = -1};
  ecc_connector_t *c = NULL;
  char err[512] = "";
  int rc = ecc_open(path, &opt, &c, err, sizeof(err));
  unlink(path);
  if (rc != ECC_OK)
    die("ecc_open (%s): %s: %s", METHOD_NAMES[m], ecc_strerror(rc), err);
  return c;
}

/* Our own mapping of the region, registered the way upstream does it, for
 * the reference copies and for checking bytes. */
static void map_region(struct bench *b)
{
  ecc_info_t info = {.struct_size = sizeof(info)};
  if (ecc_describe(b->conn[M_AUTO], &info) != ECC_OK)
    die("ecc_describe failed");
  if (strcmp(info.engine, "cuda") != 0)
    die("the plugin uses the %s engine (%s)", info.engine, info.engine_detail);
  int fd = open(info.region_path, O_RDWR);
  if (fd < 0)
    die("cannot open %s: %s", info.region_path, strerror(errno));
  b->map_bytes = info.region_bytes;
  b->map = mmap(NULL, b->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (b->map == MAP_FAILED)
    die("cannot map %s: %s", info.region_path, strerror(errno));
  /* The blocks end the file, whose region_bytes count the header page too. */
  b->blocks = b->map + (info.region_bytes - info.block_size * info.num_blocks);
  cuda_ok(cudaHostRegister(b->blocks, b->g.bs * b->g.region_blocks, cudaHostRegisterDefault),
          "cudaHostRegister of the region");
}

static void resolve_batch(struct bench *b)
{
  enum cudaDriverEntryPointQueryResult q;
  void *fn = NULL;
  if (cudaGetDriverEntryPointByVersion("cuMemcpyBatchAsync", &fn, 13000, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess && fn != NULL) {
    b->batch = fn;
    b->batch_abi = 13000;
    return;
  }
  (void)cudaGetLastError();
  if (cudaGetDriverEntryPointByVersion("cuMemcpyBatchAsync", &fn, 12080, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess && fn != NULL) {
    b->batch = fn;
    b->batch_abi = 12080;
    return;
  }
  die("the driver has no cuMemcpyBatchAsync: upstream's method cannot be measured");
}

/* ---- sets: buffers, layouts, descriptors ---- */

static void set_alloc(struct bench *b, struct set *s, int load, int idx)
{
  const struct geom *g = &b->g;
  memset(s, 0, sizeof(*s));
  s->ids = xmalloc((size_t)g->step_blocks * sizeof(uint32_t));
  s->image = xmalloc(g->dev_bytes);
  s->saves = xmalloc(g->n_entries * sizeof(*s->saves));
  s->keys = xmalloc(g->n_entries * sizeof(*s->keys));
  s->loads = xmalloc(g->n_entries * sizeof(*s->loads));
  s->up.cap = g->step_blocks;
  s->up.src = xmalloc(s->up.cap * sizeof(uint64_t));
  s->up.dst = xmalloc(s->up.cap * sizeof(uint64_t));
  s->up.len = xmalloc(s->up.cap * sizeof(uint64_t));
  cuda_ok(cudaMalloc((void **)&s->dev, g->dev_bytes), "cudaMalloc");
  fill_pattern(s->image, g->dev_bytes, g->bs * 131 + (uint64_t)load * 17 + (uint64_t)idx);
  s->zone = (uint64_t)(LAYOUT_STEPS + (uint64_t)load * SETS + (uint64_t)idx) * g->step_blocks;
  if (!load) {
    /* Pageable uploads may return early, on the legacy stream: wait. */
    cuda_ok(cudaMemcpy(s->dev, s->image, g->dev_bytes, cudaMemcpyHostToDevice), "upload");
    cuda_ok(cudaDeviceSynchronize(), "upload");
  } else {
    fill_pattern(b->blocks + s->zone * g->bs, g->step_bytes, g->bs * 977 + (uint64_t)idx);
  }
}

static void set_free(struct set *s)
{
  cudaFree(s->dev);
  free(s->ids);
  free(s->image);
  free(s->saves);
  free(s->keys);
  free(s->loads);
  free(s->up.src);
  free(s->up.dst);
  free(s->up.len);
}

/* The four sets' block ids after a churn, as the directory or a LIFO free
 * stack places them. */
static void churn_ids(struct bench *b, int layout)
{
  const struct geom *g = &b->g;
  uint32_t *ids[2 * SETS];
  for (int k = 0; k < 2 * SETS; k++)
    ids[k] = b->sets[k / SETS][k % SETS].ids;
  struct churn_request q = {(uint32_t)((uint64_t)LAYOUT_STEPS * g->step_blocks),
                            g->bs,
                            g->entry_blocks,
                            g->n_entries,
                            2 * SETS,
                            b->rng};
  double runs = 0;
  int rc = layout == L_DIR_CHURN ? churn_layout_directory(&q, ids, &runs)
                                 : churn_layout_lifo(&q, ids, &runs);
  if (rc != 0)
    die("%s layout: the churn failed", LAYOUT_NAMES[layout]);
  char sz[32];
  fprintf(stderr, "ecc-bench: %s %s: %.2f runs per entry of %u blocks\n",
          size_name(g->bs, sz, sizeof(sz)), LAYOUT_NAMES[layout], runs, g->entry_blocks);
}

/* The four sets' block ids for a layout, disjoint, within the first
 * LAYOUT_STEPS steps of the region. */
static void make_ids(struct bench *b, int layout)
{
  const struct geom *g = &b->g;
  if (layout == L_DIR_CHURN || layout == L_LIFO_CHURN) {
    churn_ids(b, layout);
    return;
  }
  uint64_t usable = (uint64_t)LAYOUT_STEPS * g->step_blocks;
  uint32_t *perm = NULL;
  uint64_t n_slots = usable / FRAG_RUN, cursor = 0;
  if (layout != L_CONTIG) {
    uint64_t n = layout == L_SCATTER ? usable : n_slots;
    perm = xmalloc(n * sizeof(uint32_t));
    for (uint64_t i = 0; i < n; i++)
      perm[i] = (uint32_t)i;
    for (uint64_t i = n - 1; i > 0; i--) {
      uint64_t j = rnd(b) % (i + 1);
      uint32_t t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  }
  for (int k = 0; k < 2 * SETS; k++) {
    uint32_t *ids = b->sets[k / SETS][k % SETS].ids;
    if (layout == L_CONTIG) {
      uint64_t first = (uint64_t)k * (LAYOUT_STEPS / (2 * SETS)) * g->step_blocks +
                       rnd(b) % ((LAYOUT_STEPS / (2 * SETS) - 1) * (uint64_t)g->step_blocks);
      for (uint32_t i = 0; i < g->step_blocks; i++)
        ids[i] = (uint32_t)(first + i);
    } else if (layout == L_SCATTER) {
      for (uint32_t i = 0; i < g->step_blocks; i++)
        ids[i] = perm[(uint64_t)k * g->step_blocks + i];
    } else {
      for (uint32_t i = 0; i < g->step_blocks;) {
        uint32_t run = 1 + (uint32_t)(rnd(b) % FRAG_RUN);
        if (run > g->step_blocks - i)
          run = g->step_blocks - i;
        if (cursor >= n_slots)
          die("fragmented layout: region too small for the runs drawn");
        uint64_t slot = perm[cursor++];
        for (uint32_t j = 0; j < run; j++)
          ids[i + j] = (uint32_t)(slot * FRAG_RUN + j);
        i += run;
      }
    }
  }
  free(perm);
}

static void add_run(struct descs *d, uint64_t src, uint64_t dst, uint64_t len)
{
  size_t n = d->n;
  if (n > 0 && d->src[n - 1] + d->len[n - 1] == src && d->dst[n - 1] + d->len[n - 1] == dst) {
    d->len[n - 1] += len;
    return;
  }
  d->src[n] = src;
  d->dst[n] = dst;
  d->len[n] = len;
  d->n++;
}

static const uint32_t *g_sort_ids; /* for the qsort below: ids and blocks per entry */
static uint32_t g_sort_eb;

static int cmp_first_block(const void *a, const void *b)
{
  uint32_t x = g_sort_ids[(size_t) * (const uint32_t *)a * g_sort_eb];
  uint32_t y = g_sort_ids[(size_t) * (const uint32_t *)b * g_sort_eb];
  if (x != y)
    return x < y ? -1 : 1;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

/* Entries of a set for the current ids, and upstream's descriptors for the
 * same copies: runs of ascending blocks, merged when both sides continue;
 * loads sorted by first block, as the plugin (and upstream) does. */
static void build_entries(struct bench *b, struct set *s, int load)
{
  const struct geom *g = &b->g;
  uint64_t region = (uint64_t)(uintptr_t)b->blocks, dev = (uint64_t)(uintptr_t)s->dev;
  for (uint32_t i = 0; i < g->n_entries; i++) {
    uint32_t *ids = s->ids + (size_t)i * g->entry_blocks;
    snprintf(s->keys[i], sizeof(s->keys[i]), "e%u", i);
    s->saves[i] =
        (ecc_save_entry_t){s->keys[i], dev + i * g->stride, g->entry_bytes, ids, g->entry_blocks};
    s->loads[i] =
        (ecc_load_entry_t){1000u + i, ids, g->entry_blocks, dev + i * g->stride, g->entry_bytes};
  }
  uint32_t *order = xmalloc(g->n_entries * sizeof(uint32_t));
  for (uint32_t i = 0; i < g->n_entries; i++)
    order[i] = i;
  if (load) {
    g_sort_ids = s->ids;
    g_sort_eb = g->entry_blocks;
    qsort(order, g->n_entries, sizeof(uint32_t), cmp_first_block);
  }
  s->up.n = 0;
  for (uint32_t k = 0; k < g->n_entries; k++) {
    uint32_t i = order[k];
    for (uint32_t j = 0; j < g->entry_blocks; j++) {
      uint64_t blk = region + (uint64_t)s->ids[(size_t)i * g->entry_blocks + j] * g->bs;
      uint64_t lin = dev + i * g->stride + (uint64_t)j * g->bs;
      if (load)
        add_run(&s->up, blk, lin, g->bs);
      else
        add_run(&s->up, lin, blk, g->bs);
    }
  }
  free(order);
  if (!load)
    return;
  for (uint32_t i = 0; i < g->n_entries; i++)
    for (uint32_t j = 0; j < g->entry_blocks; j++)
      memcpy(b->blocks + (uint64_t)s->ids[(size_t)i * g->entry_blocks + j] * g->bs,
             s->image + i * g->stride + (uint64_t)j * g->bs, g->bs);
}

/* ---- one step of each method ---- */

struct sample {
  double gpu_ms, submit_us, save_us;
  int sms;
};

static void poll_all(struct bench *b, ecc_connector_t *c, size_t want, double *el_ms)
{
  ecc_completion_t done[256];
  size_t got = 0;
  double t0 = now_us();
  el_ms[0] = el_ms[1] = 0;
  while (got < want) {
    size_t n = 0;
    if (ecc_poll(c, done, 256, &n) != ECC_OK)
      die("ecc_poll failed");
    for (size_t i = 0; i < n; i++) {
      if (done[i].status != ECC_OK) {
        fprintf(stderr, "ecc-bench: a transfer failed: %s\n", ecc_strerror(done[i].status));
        b->failures++;
      }
      double ms = (double)done[i].elapsed_ns / 1e6;
      int d = done[i].direction == ECC_DIR_SAVE ? 0 : 1;
      if (ms > el_ms[d])
        el_ms[d] = ms;
    }
    got += n;
    if (now_us() - t0 > 30e6)
      die("completions did not arrive within 30 s");
  }
}

static void ours_step(struct bench *b, int m, int directions, int si, struct sample *out)
{
  ecc_connector_t *c = b->conn[m];
  struct set *sv = &b->sets[0][si], *ld = &b->sets[1][si];
  uint32_t n = b->g.n_entries;
  memset(out, 0, sizeof(*out));
  double start = now_us();
  if (directions & D_SAVE) {
    g_sms = 0;
    double t0 = now_us();
    if (ecc_save(c, sv->saves, n) != ECC_OK)
      die("ecc_save failed");
    double t1 = now_us();
    if (ecc_flush(c, b->compute) != ECC_OK)
      die("ecc_flush failed");
    out->submit_us += now_us() - t0;
    out->save_us = (t1 - t0) / n;
    out->sms += g_sms;
  }
  if (directions & D_LOAD) {
    g_sms = 0;
    double t0 = now_us();
    if (ecc_load(c, ld->loads, n, b->compute) != ECC_OK)
      die("ecc_load failed");
    out->submit_us += now_us() - t0;
    out->sms += g_sms;
  }
  double el[2];
  poll_all(b, c, (size_t)n * (directions == D_BOTH ? 2 : 1), el);
  /* One direction: the copy's own CUDA-event time. Both: the span from the
   * first submit to the last completion, since the two copies need not
   * start together. */
  out->gpu_ms = directions == D_BOTH ? (now_us() - start) / 1e3 : el[0] > el[1] ? el[0] : el[1];
  cuda_ok(cudaStreamSynchronize(b->compute), "sync");
}

static void ref_copy(struct bench *b, int m, int d, int si, double *submit_us)
{
  struct set *s = &b->sets[d][si];
  cudaStream_t st = b->copy[d];
  double t0 = now_us();
  if (m == M_CONTIG) {
    uint8_t *zone = b->blocks + s->zone * b->g.bs;
    cuda_ok(cudaMemcpyAsync(d ? (void *)s->dev : (void *)zone, d ? (void *)zone : (void *)s->dev,
                            b->g.step_bytes, cudaMemcpyDefault, st),
            "cudaMemcpyAsync");
  } else {
    CUmemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = d ? CU_MEMCPY_SRC_ACCESS_ORDER_ANY : CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    size_t idx = 0, fail = 0;
    CUresult rc;
    CUdeviceptr *dst = (CUdeviceptr *)(void *)s->up.dst, *src = (CUdeviceptr *)(void *)s->up.src;
    size_t *len = (size_t *)(void *)s->up.len;
    if (b->batch_abi == 13000)
      rc = ((batch13_fn)b->batch)(dst, src, len, s->up.n, &attr, &idx, 1, (CUstream)st);
    else
      rc = ((batch12_fn)b->batch)(dst, src, len, s->up.n, &attr, &idx, 1, &fail, (CUstream)st);
    if (rc != CUDA_SUCCESS)
      die("cuMemcpyBatchAsync failed (%d)", (int)rc);
  }
  *submit_us += now_us() - t0;
}

/* Upstream's method or the contiguous copy, on the bench's own streams. */
static void ref_step(struct bench *b, int m, int directions, int si, struct sample *out)
{
  memset(out, 0, sizeof(*out));
  double start = now_us();
  for (int d = 0; d < 2; d++) {
    if (!(directions & (d ? D_LOAD : D_SAVE)))
      continue;
    cuda_ok(cudaEventRecord(b->start[d], b->copy[d]), "cudaEventRecord");
    ref_copy(b, m, d, si, &out->submit_us);
    cuda_ok(cudaEventRecord(b->end[d], b->copy[d]), "cudaEventRecord");
  }
  for (int d = 0; d < 2; d++) {
    if (!(directions & (d ? D_LOAD : D_SAVE)))
      continue;
    cuda_ok(cudaEventSynchronize(b->end[d]), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, b->start[d], b->end[d]), "cudaEventElapsedTime");
    if (ms > out->gpu_ms)
      out->gpu_ms = ms;
  }
  if (directions == D_BOTH)
    out->gpu_ms = (now_us() - start) / 1e3;
  cuda_ok(cudaStreamSynchronize(b->compute), "sync");
}

/* ---- poison and check ---- */

static void poison(struct bench *b, int m, int directions, int si)
{
  const struct geom *g = &b->g;
  b->poison = b->poison == 0x5A ? 0xA5 : 0x5A;
  if (directions & D_SAVE) {
    struct set *s = &b->sets[0][si];
    if (m == M_CONTIG)
      memset(b->blocks + s->zone * g->bs, b->poison, g->step_bytes);
    else
      for (uint32_t i = 0; i < g->step_blocks; i++)
        memset(b->blocks + (uint64_t)s->ids[i] * g->bs, b->poison, g->bs);
  }
  /* cudaMemset runs on the legacy stream, which no stream here waits for. */
  if (directions & D_LOAD) {
    cuda_ok(cudaMemset(b->sets[1][si].dev, b->poison, g->dev_bytes), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
}

static int check_save(struct bench *b, int m, int si)
{
  const struct geom *g = &b->g;
  const struct set *s = &b->sets[0][si];
  if (m == M_CONTIG)
    return memcmp(b->blocks + s->zone * g->bs, s->image, g->step_bytes) != 0;
  int bad = 0;
  for (uint32_t i = 0; i < g->n_entries; i++)
    for (uint32_t j = 0; j < g->entry_blocks; j++)
      bad += memcmp(b->blocks + (uint64_t)s->ids[(size_t)i * g->entry_blocks + j] * g->bs,
                    s->image + i * g->stride + (uint64_t)j * g->bs, g->bs) != 0;
  return bad;
}

static int check_load(struct bench *b, int m, int si)
{
  const struct geom *g = &b->g;
  const struct set *s = &b->sets[1][si];
  cuda_ok(cudaMemcpy(b->staging, s->dev, g->dev_bytes, cudaMemcpyDeviceToHost), "download");
  if (m == M_CONTIG)
    return memcmp(b->staging, b->blocks + s->zone * g->bs, g->step_bytes) != 0;
  int bad = 0;
  for (uint32_t i = 0; i < g->n_entries; i++) {
    const uint8_t *got = b->staging + i * g->stride;
    bad += memcmp(got, s->image + i * g->stride, g->entry_bytes) != 0;
    for (uint64_t k = g->entry_bytes; k < g->stride; k++)
      bad += got[k] != b->poison;
  }
  return bad;
}

static void check(struct bench *b, int layout, int directions, int m, int si)
{
  int bad = 0;
  if (directions & D_SAVE)
    bad += check_save(b, m, si);
  if (directions & D_LOAD)
    bad += check_load(b, m, si);
  if (bad != 0) {
    char sz[32];
    fprintf(stderr, "ecc-bench: WRONG BYTES: %s %s %s %s: %d blocks or entries differ\n",
            size_name(b->g.bs, sz, sizeof(sz)), LAYOUT_NAMES[layout], directions_name(directions),
            METHOD_NAMES[m], bad);
    b->failures++;
  }
}

/* The plugin built as many descriptors as upstream's rules give. */
static void check_descs(struct bench *b, int m, int directions, int si, const ecc_stats_t *before)
{
  ecc_stats_t after = {.struct_size = sizeof(after)};
  if (ecc_get_stats(b->conn[m], &after) != ECC_OK)
    die("ecc_get_stats failed");
  uint64_t ours = after.save.descriptors - before->save.descriptors + after.load.descriptors -
                  before->load.descriptors;
  uint64_t want = (directions & D_SAVE ? b->sets[0][si].up.n : 0) +
                  (directions & D_LOAD ? b->sets[1][si].up.n : 0);
  if (ours != want) {
    fprintf(stderr,
            "ecc-bench: %s built %" PRIu64 " descriptors, upstream's rules give %" PRIu64 "\n",
            METHOD_NAMES[m], ours, want);
    b->failures++;
  }
}

/* ---- one configuration ---- */

static void step(struct bench *b, int m, int directions, int si, struct sample *s)
{
  if (m == M_CONTIG || m == M_UPSTREAM)
    ref_step(b, m, directions, si, s);
  else
    ours_step(b, m, directions, si, s);
}

static void measure(struct bench *b, int layout, int directions, int m, struct result *r)
{
  double gpu[MAX_ITERS], sub[MAX_ITERS], sav[MAX_ITERS];
  int warm = SETS, iters = b->o.iters, sms = 0;
  for (int it = 0; it < warm + iters; it++) {
    int si = it % SETS;
    int checked = it < warm || it == warm + iters - 1;
    ecc_stats_t before = {.struct_size = sizeof(before)};
    if (checked)
      poison(b, m, directions, si);
    if (checked && m != M_CONTIG && m != M_UPSTREAM && ecc_get_stats(b->conn[m], &before) != ECC_OK)
      die("ecc_get_stats failed");
    struct sample s;
    step(b, m, directions, si, &s);
    if (checked) {
      check(b, layout, directions, m, si);
      if (m != M_CONTIG && m != M_UPSTREAM)
        check_descs(b, m, directions, si, &before);
    }
    if (it >= warm) {
      gpu[it - warm] = s.gpu_ms;
      sub[it - warm] = s.submit_us;
      sav[it - warm] = s.save_us;
      if (s.sms > sms)
        sms = s.sms;
    }
  }
  const struct geom *g = &b->g;
  memset(r, 0, sizeof(*r));
  r->bs = g->bs;
  r->layout = layout;
  r->directions = directions;
  r->method = m;
  r->entries = g->n_entries;
  r->descs = m == M_CONTIG ? 1
                           : (directions & D_SAVE ? b->sets[0][0].up.n : 0) +
                                 (directions & D_LOAD ? b->sets[1][0].up.n : 0);
  r->bytes = g->step_bytes * (directions == D_BOTH ? 2 : 1);
  r->gpu_ms = median(gpu, iters);
  r->gbps = r->gpu_ms > 0 ? (double)r->bytes / (r->gpu_ms * 1e6) : 0;
  r->submit_us = median(sub, iters);
  r->save_us = directions & D_SAVE && m != M_CONTIG && m != M_UPSTREAM ? median(sav, iters) : 0;
  r->sms = sms;
}

static void keep(struct bench *b, const struct result *r)
{
  if (b->n_res == b->cap_res) {
    b->cap_res = b->cap_res ? 2 * b->cap_res : 256;
    b->res = realloc(b->res, b->cap_res * sizeof(*b->res));
    if (b->res == NULL)
      die("out of memory");
  }
  b->res[b->n_res++] = *r;
  fprintf(b->csv, "%" PRIu64 ",%s,%s,%s,%u,%zu,%" PRIu64 ",%.4f,%.3f,%.3f,%.1f,%.2f,%.3f,%d,%d\n",
          r->bs, LAYOUT_NAMES[r->layout], directions_name(r->directions), METHOD_NAMES[r->method],
          r->entries, r->descs, r->bytes, r->gpu_ms, r->gbps,
          r->limit > 0 ? 100.0 * r->gbps / r->limit : 0, r->submit_us, r->save_us, r->limit, r->sms,
          b->o.iters);
  fflush(b->csv);
}

/* ---- host cost of a step of 4096 descriptors: one-block entries ---- */

static void submit_4096(struct bench *b)
{
  const struct geom *g = &b->g;
  const uint32_t n = 4096;
  struct set *sv = &b->sets[0][0], *ld = &b->sets[1][0];
  if (g->step_blocks < n)
    return;
  ecc_save_entry_t *e = xmalloc(n * sizeof(*e));
  ecc_load_entry_t *l = xmalloc(n * sizeof(*l));
  ecc_load_entry_t *mixed = xmalloc(n * sizeof(*mixed));
  char(*keys)[24] = xmalloc(n * sizeof(*keys));
  for (uint32_t i = 0; i < n; i++) {
    snprintf(keys[i], sizeof(keys[i]), "one-%u", i);
    e[i] = (ecc_save_entry_t){keys[i], (uint64_t)(uintptr_t)(sv->dev + (uint64_t)i * g->bs), g->bs,
                              &sv->ids[i], 1};
    l[i] = (ecc_load_entry_t){i, &ld->ids[i], 1,
                              (uint64_t)(uintptr_t)(ld->dev + (uint64_t)i * g->bs), g->bs};
    mixed[i] = l[i];
  }
  /* Destinations out of order: the connector must sort by first block. */
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)(rnd(b) % (i + 1));
    ecc_load_entry_t x = mixed[i];
    mixed[i] = mixed[j];
    mixed[j] = x;
  }
  double sc[8], fl[8], lo[8], mx[8], el[2];
  ecc_connector_t *c = b->conn[M_AUTO];
  for (int r = 0; r < 8; r++) {
    double t0 = now_us();
    if (ecc_save(c, e, n) != ECC_OK)
      die("ecc_save failed");
    double t1 = now_us();
    if (ecc_flush(c, b->compute) != ECC_OK)
      die("ecc_flush failed");
    double t2 = now_us();
    poll_all(b, c, n, el);
    double t3 = now_us();
    if (ecc_load(c, l, n, b->compute) != ECC_OK)
      die("ecc_load failed");
    double t4 = now_us();
    poll_all(b, c, n, el);
    double t5 = now_us();
    if (ecc_load(c, mixed, n, b->compute) != ECC_OK)
      die("ecc_load failed");
    double t6 = now_us();
    poll_all(b, c, n, el);
    sc[r] = t1 - t0;
    fl[r] = t2 - t1;
    lo[r] = t4 - t3;
    mx[r] = t6 - t5;
  }
  cuda_ok(cudaStreamSynchronize(b->compute), "sync");
  b->save_4096_us = median(sc, 8);
  b->save_call_us = b->save_4096_us / n;
  b->flush_4096_us = median(fl, 8);
  b->load_4096_us = median(lo, 8);
  b->load_4096_mixed_us = median(mx, 8);
  free(e);
  free(l);
  free(mixed);
  free(keys);
}

/* ---- one block size ---- */

static void bench_size(struct bench *b, uint64_t bs)
{
  geom_init(&b->g, bs);
  char region[64], sz[32];
  snprintf(region, sizeof(region), "bench-%ld-%" PRIu64, (long)getpid(), bs);
  fprintf(stderr,
          "ecc-bench: %s blocks: %u entries x %u blocks per step (%.1f MiB), region %.2f GiB\n",
          size_name(bs, sz, sizeof(sz)), b->g.n_entries, b->g.entry_blocks,
          (double)b->g.step_bytes / (1 << 20),
          (double)(b->g.region_blocks * bs) / (double)(1ull << 30));
  for (int m = M_AUTO; m <= M_KERNEL; m++)
    b->conn[m] = open_connector(b, m, region);
  map_region(b);
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < SETS; s++)
      set_alloc(b, &b->sets[d][s], d, s);
  cuda_ok(cudaHostAlloc((void **)&b->staging, b->g.dev_bytes, cudaHostAllocDefault),
          "cudaHostAlloc");

  for (int layout = 0; layout < N_LAYOUTS && !b->o.submit_only; layout++) {
    make_ids(b, layout);
    for (int d = 0; d < 2; d++)
      for (int s = 0; s < SETS; s++)
        build_entries(b, &b->sets[d][s], d);
    static const int direction_list[3] = {D_SAVE, D_LOAD, D_BOTH};
    for (int k = 0; k < 3; k++) {
      struct result r;
      measure(b, layout, direction_list[k], M_CONTIG, &r);
      double limit = r.gbps;
      r.limit = limit;
      keep(b, &r);
      for (int m = M_AUTO; m < N_METHODS; m++) {
        measure(b, layout, direction_list[k], m, &r);
        r.limit = limit;
        keep(b, &r);
      }
    }
  }
  if (bs == 4096) {
    make_ids(b, L_SCATTER);
    submit_4096(b);
  }

  cudaFreeHost(b->staging);
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < SETS; s++)
      set_free(&b->sets[d][s]);
  cudaHostUnregister(b->blocks);
  munmap(b->map, b->map_bytes);
  for (int m = M_KERNEL; m >= M_AUTO; m--)
    if (ecc_close(b->conn[m]) != ECC_OK)
      die("ecc_close failed");
}

/* ---- the table ---- */

static const struct result *find(const struct bench *b, uint64_t bs, int layout, int directions,
                                 int m)
{
  for (size_t i = 0; i < b->n_res; i++) {
    const struct result *r = &b->res[i];
    if (r->bs == bs && r->layout == layout && r->directions == directions && r->method == m)
      return r;
  }
  return NULL;
}

static double pct(const struct result *r)
{
  return r->limit > 0 ? 100.0 * r->gbps / r->limit : 0;
}

static void print_row(const struct bench *b, uint64_t bs, int layout, int directions)
{
  const struct result *c = find(b, bs, layout, directions, M_CONTIG);
  const struct result *a = find(b, bs, layout, directions, M_AUTO);
  const struct result *d = find(b, bs, layout, directions, M_DMA);
  const struct result *k = find(b, bs, layout, directions, M_KERNEL);
  const struct result *u = find(b, bs, layout, directions, M_UPSTREAM);
  if (!c || !a || !d || !k || !u)
    return;
  char sz[32];
  printf("%-6s %-10s %-4s %5zu %6.1f | %5.1f %5.1f%% | %5.1f%% %5.1f%% | %5.1f %5.1f%% %5.1fx |"
         " %7.1f %7.1f | %3d %3d\n",
         size_name(bs, sz, sizeof(sz)), LAYOUT_NAMES[layout], directions_name(directions), a->descs,
         c->gbps, a->gbps, pct(a), pct(d), pct(k), u->gbps, pct(u),
         u->gbps > 0 ? a->gbps / u->gbps : 0, a->submit_us, u->submit_us, a->sms, k->sms);
}

/* Lowest percentage of the limit for ours-auto (or -kernel) from 4 KiB up. */
static double worst(const struct bench *b, int m, int directions, uint64_t *at_bs, int *at_layout)
{
  double w = 1e9;
  for (size_t i = 0; i < b->n_res; i++) {
    const struct result *r = &b->res[i];
    if (r->method != m || r->directions != directions || r->bs < 4096)
      continue;
    if (pct(r) < w) {
      w = pct(r);
      *at_bs = r->bs;
      *at_layout = r->layout;
    }
  }
  return w;
}

static void print_targets(const struct bench *b)
{
  static const int direction_list[3] = {D_SAVE, D_LOAD, D_BOTH};
  printf("\ntargets (ratios to the contiguous copy of the same run, block sizes >= 4 KiB):\n");
  for (int m = M_AUTO; m <= M_KERNEL; m += M_KERNEL - M_AUTO) {
    for (int k = 0; k < 3; k++) {
      uint64_t bs = 0;
      int layout = 0;
      double w = worst(b, m, direction_list[k], &bs, &layout);
      if (w > 1e8)
        continue;
      char sz[32];
      printf("  %-11s %-4s worst %5.1f%% (%s %s)  %s\n", METHOD_NAMES[m],
             directions_name(direction_list[k]), w, size_name(bs, sz, sizeof(sz)),
             LAYOUT_NAMES[layout], w >= 90.0 ? "PASS" : "MISS");
    }
  }
  printf("  serving (both directions at once, layouts after churn):\n");
  for (size_t i = 0; i < b->n_res; i++) {
    const struct result *r = &b->res[i];
    bool ours = r->layout == L_DIR_CHURN && r->method == M_AUTO;
    bool up = r->layout == L_LIFO_CHURN && r->method == M_UPSTREAM;
    if (r->directions != D_BOTH || !(ours || up))
      continue;
    char sz[32];
    printf("    %-6s %-10s %-9s %5.1f GB/s = %5.1f%% of the contiguous copy%s\n",
           size_name(r->bs, sz, sizeof(sz)), LAYOUT_NAMES[r->layout], METHOD_NAMES[r->method],
           r->gbps, pct(r), ours ? (pct(r) >= 90.0 ? "  PASS (>= 90%)" : "  MISS (>= 90%)") : "");
  }
  if (b->save_call_us > 0) {
    double save_step = b->save_4096_us + b->flush_4096_us;
    double load_step =
        b->load_4096_us > b->load_4096_mixed_us ? b->load_4096_us : b->load_4096_mixed_us;
    printf("  a step of 4096 one-block entries (4 KiB, scattered), ours-auto:\n"
           "    save call %.3f us per entry %s (< 1 us)\n"
           "    save + flush %.1f us (%.1f + %.1f) %s (< 50 us)\n"
           "    load %.1f us with destinations ascending, %.1f us in random order %s (< 50 us)\n",
           b->save_call_us, b->save_call_us < 1.0 ? "PASS" : "MISS", save_step, b->save_4096_us,
           b->flush_4096_us, save_step < 50 ? "PASS" : "MISS", b->load_4096_us,
           b->load_4096_mixed_us, load_step < 50 ? "PASS" : "MISS");
  }
}

static void print_table(const struct bench *b, const uint64_t *sizes, int n_sizes)
{
  printf(
      "\nGB/s = 1e9 B/s over 64 MiB steps each way, medians of %d; one direction timed by CUDA"
      " events, both by the wall time from the\nfirst submit to the last completion; %% = of the"
      " contiguous copy (limit) in the same configuration; desc = descriptors per step;\nsubmit ="
      " host us per step; SMs = CTAs of the copy kernels (auto, kernel); x = ours-auto over"
      " upstream\n\n",
      b->o.iters);
  printf("%-6s %-10s %-4s %5s %6s | %-12s | %-6s %-6s | %-19s | %-15s | %-7s\n", "block", "layout",
         "dir", "desc", "limit", "ours-auto", "dma", "kernel", "upstream", "submit auto/up", "SMs");
  for (int i = 0; i < n_sizes; i++)
    for (int layout = 0; layout < N_LAYOUTS; layout++)
      for (int directions = D_SAVE; directions <= D_BOTH; directions++)
        print_row(b, sizes[i], layout, directions);
  print_targets(b);
}

/* ---- command line ---- */

static void usage(FILE *f)
{
  fprintf(
      f,
      "usage: ecc-bench [--quick | --submit-only] [--iters N] [--device N] [--max-sms N] [--csv "
      "FILE]\n"
      "                 [--plugin PATH] [--dir DIR]\n"
      "Times saves, loads and both at once through the plugin (ours-auto, -dma, -kernel)\n"
      "against upstream's batched memcpy and the contiguous copy, for block sizes 3 KiB..2 MiB\n"
      "and five layouts. Every byte is checked; the table is printed last.\n"
      "  --quick      4 KiB, 64 KiB and 2 MiB only, 4 timed steps\n"
      "  --submit-only  only the host cost of a step of 4096 one-block entries\n"
      "  --iters N    timed steps per configuration (default 10, at most %d)\n"
      "  --device N   CUDA device (default 0)\n"
      "  --max-sms N  engine.max_sms for the kernel method (default 16)\n"
      "  --csv FILE   where the CSV goes (default ecc-bench.csv)\n"
      "  --plugin P   the plugin to load (default: the one built beside this program)\n"
      "  --dir DIR    region directory (default /dev/shm)\n",
      MAX_ITERS);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
  *o = (struct opts){0, 0, 10, 0, 16, "ecc-bench.csv", ECC_PLUGIN_PATH, "/dev/shm"};
  int iters_set = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quick") == 0) {
      o->quick = 1;
      continue;
    }
    if (strcmp(a, "--submit-only") == 0) {
      o->submit_only = 1;
      continue;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (v == NULL) {
      usage(stderr);
      exit(2);
    }
    i++;
    if (strcmp(a, "--iters") == 0) {
      o->iters = atoi(v);
      iters_set = 1;
    } else if (strcmp(a, "--device") == 0) {
      o->device = atoi(v);
    } else if (strcmp(a, "--max-sms") == 0) {
      o->max_sms = (unsigned)atoi(v);
    } else if (strcmp(a, "--csv") == 0) {
      o->csv = v;
    } else if (strcmp(a, "--plugin") == 0) {
      o->plugin = v;
    } else if (strcmp(a, "--dir") == 0) {
      o->folder = v;
    } else {
      usage(stderr);
      exit(2);
    }
  }
  if (o->quick && !iters_set)
    o->iters = 4;
  if (o->iters < 1 || o->iters > MAX_ITERS || o->max_sms < 1 || o->device < 0) {
    usage(stderr);
    exit(2);
  }
}

int main(int argc, char **argv)
{
  static const uint64_t full[] = {3072,  4096,   8192,     16384,   32768,
                                  65536, 262144, 1u << 20, 2u << 20};
  static const uint64_t quick[] = {4096, 65536, 2u << 20};
  struct bench b;
  memset(&b, 0, sizeof(b));
  parse_args(argc, argv, &b.o);
  static const uint64_t submit_only[] = {4096};
  const uint64_t *sizes = b.o.submit_only ? submit_only : b.o.quick ? quick : full;
  int n_sizes = b.o.submit_only ? 1 : b.o.quick ? 3 : 9;
  b.rng = 0x2545F4914F6CDD1Dull;
  b.poison = 0x5A;

  cuda_ok(cudaSetDevice(b.o.device), "cudaSetDevice");
  struct cudaDeviceProp prop;
  cuda_ok(cudaGetDeviceProperties(&prop, b.o.device), "cudaGetDeviceProperties");
  cuda_ok(cudaStreamCreateWithFlags(&b.compute, cudaStreamNonBlocking), "cudaStreamCreate");
  for (int d = 0; d < 2; d++) {
    cuda_ok(cudaStreamCreateWithFlags(&b.copy[d], cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_ok(cudaEventCreate(&b.start[d]), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&b.end[d]), "cudaEventCreate");
  }
  resolve_batch(&b);
  b.csv = fopen(b.o.csv, "w");
  if (b.csv == NULL)
    die("cannot write %s: %s", b.o.csv, strerror(errno));
  fprintf(b.csv, "block_bytes,layout,direction,method,entries,descriptors,bytes_per_step,gpu_ms,"
                 "gbps,pct_of_limit,submit_us,save_us_per_entry,limit_gbps,sms,iters\n");

  double t0 = now_us();
  for (int i = 0; i < n_sizes; i++)
    bench_size(&b, sizes[i]);
  fclose(b.csv);

  int driver = 0;
  cudaDriverGetVersion(&driver);
  printf("\necc-bench on %s (%d SMs), driver %d.%d, max_sms %u, %.0f s, CSV in %s\n", prop.name,
         prop.multiProcessorCount, driver / 1000, driver % 1000 / 10, b.o.max_sms,
         (now_us() - t0) / 1e6, b.o.csv);
  if (b.failures != 0) {
    printf("\nFAILED: %d wrong results (see stderr); no figures are printed\n", b.failures);
    return 1;
  }
  printf("every byte of every configuration checked: OK\n");
  print_table(&b, sizes, n_sizes);
  return 0;
}
