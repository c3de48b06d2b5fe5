/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_cuda_engine.c - the CUDA engine through the real plugin and shim:
 * round trips over block sizes, layouts and alignments with every method,
 * coalescing, ordering against the compute stream, source reuse, shutdown
 * with copies in flight, and several processes and devices. Every test skips
 * where no CUDA device is present.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/region/region.h"
#include "tests/gpu/gpu_kernels.h"
#include "tests/helpers.h"

#define POISON 0x5A
#define OLD 0xEE

/* ---- plumbing ---- */

static int gpu_count(void)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

static void need_gpus(int n, int have)
{
  if (have < 1)
    cr_skip("no CUDA device: GPU tests skipped");
  if (have < n)
    cr_skip("fewer than %d CUDA devices: test skipped", n);
}

static void ck(cudaError_t rc, const char *what)
{
  cr_assert_eq(rc, cudaSuccess, "%s: %s", what, cudaGetErrorString(rc));
}

/* cudaMemset of device memory returns before it is done, on the legacy
 * stream, which the plugin's and our non-blocking streams do not wait for. */
static void memset_now(void *dev, int value, size_t n, const char *what)
{
  ck(cudaMemset(dev, value, n), what);
  ck(cudaDeviceSynchronize(), what);
}

static uint64_t now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *gpu_ini(const char *role, const char *region, uint64_t bs, uint64_t nb,
                           const char *type, const char *method, int device, const char *extra)
{
  char text[2048];
  snprintf(text, sizeof(text),
           "[plugin]\npath = %s\nlog_level = error\n\n"
           "[connector]\nrole = %s\n\n"
           "[region]\nname = %s\nblock_size = %llu\nsize = %llu\n\n"
           "[engine]\ntype = %s\nmethod = %s\ndevice = %d\n%s",
           ECC_PLUGIN_PATH, role, region, (unsigned long long)bs, (unsigned long long)(bs * nb),
           type, method, device, extra ? extra : "");
  return th_write_temp(text, ".ini");
}

static void pattern(uint8_t *p, uint64_t n, uint64_t seed, uint64_t first)
{
  for (uint64_t i = 0; i < n; i++)
    p[i] = tk_byte(seed, first + i);
}

struct rig {
  ecc_connector_t *c;
  uint8_t *map;
  size_t map_bytes;
  uint8_t *blocks; /* our own view of the region's blocks */
  uint64_t bs, nb;
  cudaStream_t stream; /* the "compute stream" of the tests */
  ecc_info_t info;
};

static void rig_open_ini(struct rig *r, const char *ini, uint64_t bs, uint64_t nb)
{
  memset(r, 0, sizeof(*r));
  char err[512] = "";
  int rc = ecc_open(ini, NULL, &r->c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "ecc_open: %d %s", rc, err);
  r->bs = bs;
  r->nb = nb;
  r->info.struct_size = sizeof(r->info);
  cr_assert_eq(ecc_describe(r->c, &r->info), ECC_OK);
  cr_assert_str_eq(r->info.engine, "cuda", "engine: %s (%s)", r->info.engine,
                   r->info.engine_detail);
  int fd = open(r->info.region_path, O_RDWR);
  cr_assert_geq(fd, 0, "cannot open %s", r->info.region_path);
  r->map_bytes = r->info.region_bytes;
  r->map = mmap(NULL, r->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  cr_assert_neq(r->map, MAP_FAILED);
  r->blocks = r->map + REGION_HEADER_BYTES;
  ck(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

static void rig_open(struct rig *r, const char *method, uint64_t bs, uint64_t nb, const char *extra)
{
  const char *ini = gpu_ini("both", th_region_name(), bs, nb, "cuda", method, 0, extra);
  rig_open_ini(r, ini, bs, nb);
}

static void rig_close(struct rig *r)
{
  cr_assert_eq(ecc_close(r->c), ECC_OK);
  ck(cudaStreamDestroy(r->stream), "cudaStreamDestroy");
  munmap(r->map, r->map_bytes);
}

static ecc_stats_t stats_of(ecc_connector_t *c)
{
  ecc_stats_t s = {.struct_size = sizeof(s)};
  cr_assert_eq(ecc_get_stats(c, &s), ECC_OK);
  return s;
}

/* Poll `n` completions of one direction, all successful. */
static void expect_done(ecc_connector_t *c, size_t n, uint32_t direction, int timeout_ms)
{
  ecc_completion_t done[16];
  cr_assert_leq(n, 16);
  size_t got = th_poll_until(c, done, n, timeout_ms);
  cr_assert_eq(got, n, "%zu of %zu completions within %d ms", got, n, timeout_ms);
  for (size_t i = 0; i < n; i++) {
    cr_expect_eq(done[i].direction, direction);
    cr_expect_eq(done[i].status, ECC_OK, "completion %zu: status %d", i, done[i].status);
  }
}

static void expect_same(const uint8_t *got, const uint8_t *want, uint64_t n, const char *what)
{
  if (memcmp(got, want, n) == 0)
    return;
  uint64_t i = 0;
  while (got[i] == want[i])
    i++;
  cr_assert_fail("%s: byte %llu of %llu is 0x%02x, want 0x%02x", what, (unsigned long long)i,
                 (unsigned long long)n, got[i], want[i]);
}

/* ---- round trips ---- */

struct spec {
  uint32_t ids[8];
  uint32_t n;      /* blocks given */
  uint64_t nbytes; /* bytes saved (reaching fewer blocks than given for b) */
};

static void make_specs(int scattered, uint64_t bs, struct spec *a, struct spec *b)
{
  static const uint32_t sa[8] = {31, 5, 17, 3, 22, 8, 12, 27};
  static const uint32_t sb[7] = {1, 36, 19, 25, 14, 33, 20};
  for (uint32_t i = 0; i < 8; i++)
    a->ids[i] = scattered ? sa[i] : 2 + i;
  for (uint32_t i = 0; i < 7; i++)
    b->ids[i] = scattered ? sb[i] : 10 + i;
  a->n = 8;
  b->n = 7;
  uint64_t cut = bs / 3 > 0 ? bs / 3 : 0;
  a->nbytes = 8 * bs - cut; /* partial last block */
  b->nbytes = 5 * bs + 1;   /* one byte into the 6th block, 7th untouched */
}

/* What the region must hold after saving `s` from host copy `src`. */
static void apply_save(uint8_t *image, uint64_t bs, const struct spec *s, const uint8_t *src)
{
  for (uint32_t k = 0; (uint64_t)k * bs < s->nbytes; k++) {
    uint64_t len = s->nbytes - (uint64_t)k * bs < bs ? s->nbytes - (uint64_t)k * bs : bs;
    memcpy(image + (uint64_t)s->ids[k] * bs, src + (uint64_t)k * bs, len);
  }
}

/* What a load of `s` moving `nbytes` must put at its destination. */
static void apply_load(uint8_t *out, uint64_t bs, const struct spec *s, uint64_t nbytes,
                       const uint8_t *image)
{
  for (uint32_t k = 0; (uint64_t)k * bs < nbytes; k++) {
    uint64_t len = nbytes - (uint64_t)k * bs < bs ? nbytes - (uint64_t)k * bs : bs;
    memcpy(out + (uint64_t)k * bs, image + (uint64_t)s->ids[k] * bs, len);
  }
}

struct bufs {
  uint8_t *src_dev, *dst_dev; /* device */
  uint8_t *src, *dst, *want;  /* host */
  uint8_t *image;             /* expected region blocks */
  uint64_t cap;
};

static void one_round_trip(struct rig *r, struct bufs *b, int scattered, unsigned align,
                           uint64_t seed)
{
  uint64_t bs = r->bs, region = r->bs * r->nb;
  struct spec sa, sb;
  make_specs(scattered, bs, &sa, &sb);
  uint64_t off_b = 8 * bs + 512;
  unsigned dalign = (align + 3) % 16;

  memset(r->blocks, OLD, region);
  pattern(b->src, b->cap, seed, 0);
  /* From pageable memory cudaMemcpy may return before the data is on the
   * device: wait, since the plugin's streams do not wait for the legacy one. */
  ck(cudaMemcpy(b->src_dev, b->src, b->cap, cudaMemcpyHostToDevice), "upload source");
  ck(cudaDeviceSynchronize(), "upload source");

  ecc_save_entry_t e[2] = {
      {"a", (uint64_t)(uintptr_t)(b->src_dev + align), sa.nbytes, sa.ids, sa.n},
      {"b", (uint64_t)(uintptr_t)(b->src_dev + off_b + align), sb.nbytes, sb.ids, sb.n},
  };
  cr_assert_eq(ecc_save(r->c, e, 2), ECC_OK);
  cr_assert_eq(ecc_flush(r->c, r->stream), ECC_OK);
  expect_done(r->c, 2, ECC_DIR_SAVE, 10000);

  memset(b->image, OLD, region);
  apply_save(b->image, bs, &sa, b->src + align);
  apply_save(b->image, bs, &sb, b->src + off_b + align);
  expect_same(r->blocks, b->image, region, "region after save");

  memset_now(b->dst_dev, POISON, b->cap, "poison destination");
  uint64_t moved_b = 7 * bs;
  ecc_load_entry_t l[2] = {
      {11, sa.ids, sa.n, (uint64_t)(uintptr_t)(b->dst_dev + dalign), sa.nbytes},
      {12, sb.ids, sb.n, (uint64_t)(uintptr_t)(b->dst_dev + off_b + dalign), moved_b + 5},
  };
  cr_assert_eq(ecc_load(r->c, l, 2, r->stream), ECC_OK);
  /* The compute stream was made to wait for the copy. */
  ck(cudaStreamSynchronize(r->stream), "sync compute stream");
  ck(cudaMemcpy(b->dst, b->dst_dev, b->cap, cudaMemcpyDeviceToHost), "download destination");
  memset(b->want, POISON, b->cap);
  apply_load(b->want + dalign, bs, &sa, sa.nbytes, b->image);
  apply_load(b->want + off_b + dalign, bs, &sb, moved_b, b->image);
  expect_same(b->dst, b->want, b->cap, "destination after load");
  expect_done(r->c, 2, ECC_DIR_LOAD, 10000);
}

static void round_trips(const char *method)
{
  need_gpus(1, gpu_count());
  static const uint64_t sizes[] = {16, 100, 1000, 3072, 4096, 65536, 2u << 20};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    struct rig r;
    rig_open(&r, method, sizes[s], 40, NULL);
    struct bufs b;
    b.cap = 16 * sizes[s] + 1024;
    ck(cudaMalloc((void **)&b.src_dev, b.cap), "cudaMalloc");
    ck(cudaMalloc((void **)&b.dst_dev, b.cap), "cudaMalloc");
    b.src = malloc(b.cap);
    b.dst = malloc(b.cap);
    b.want = malloc(b.cap);
    b.image = malloc(sizes[s] * 40);
    cr_assert(b.src && b.dst && b.want && b.image);
    static const unsigned aligns[] = {0, 1, 8};
    for (int scattered = 0; scattered < 2; scattered++)
      for (size_t a = 0; a < 3; a++)
        one_round_trip(&r, &b, scattered, aligns[a], s * 100 + (uint64_t)scattered * 10 + a);
    ecc_stats_t st = stats_of(r.c);
    cr_expect_eq(st.save.failed + st.load.failed, 0);
    cr_expect_eq(st.save.transfers, 6);
    cr_expect_eq(st.load.transfers, 6);
    cudaFree(b.src_dev);
    cudaFree(b.dst_dev);
    free(b.src);
    free(b.dst);
    free(b.want);
    free(b.image);
    rig_close(&r);
  }
}

Test(gpu, round_trip_dma, .timeout = 300)
{
  round_trips("dma");
}
Test(gpu, round_trip_kernel, .timeout = 300)
{
  round_trips("kernel");
}
Test(gpu, round_trip_auto, .timeout = 300)
{
  round_trips("auto");
}

/* ---- coalescing ---- */

static void coalescing(const char *method)
{
  const uint64_t bs = 4096;
  struct rig r;
  rig_open(&r, method, bs, 16, NULL);
  uint8_t *src_dev, *dst_dev;
  ck(cudaMalloc((void **)&src_dev, 8 * bs), "cudaMalloc");
  ck(cudaMalloc((void **)&dst_dev, 8 * bs), "cudaMalloc");
  ck(tk_fill(src_dev, 8 * bs, 77, 0, r.stream), "fill");

  /* Two entries adjacent on both sides: one descriptor. */
  uint32_t x[2] = {2, 3}, y[2] = {4, 5}, z[2] = {6, 7};
  ecc_save_entry_t e[2] = {
      {"x", (uint64_t)(uintptr_t)src_dev, 2 * bs, x, 2},
      {"y", (uint64_t)(uintptr_t)(src_dev + 2 * bs), 2 * bs, y, 2},
  };
  cr_assert_eq(ecc_save(r.c, e, 2), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, r.stream), ECC_OK);
  expect_done(r.c, 2, ECC_DIR_SAVE, 10000);
  cr_expect_eq(stats_of(r.c).save.descriptors, 1);

  /* Given in reverse order, sorted by first block: one descriptor. */
  ecc_load_entry_t l[2] = {
      {2, y, 2, (uint64_t)(uintptr_t)(dst_dev + 2 * bs), 2 * bs},
      {1, x, 2, (uint64_t)(uintptr_t)dst_dev, 2 * bs},
  };
  cr_assert_eq(ecc_load(r.c, l, 2, r.stream), ECC_OK);
  unsigned long long *bad;
  ck(cudaMalloc((void **)&bad, sizeof(*bad)), "cudaMalloc");
  ck(cudaMemsetAsync(bad, 0, sizeof(*bad), r.stream), "memset");
  ck(tk_count_mismatch(dst_dev, 4 * bs, 77, 0, bad, r.stream), "check");
  unsigned long long n_bad = 1;
  ck(cudaMemcpyAsync(&n_bad, bad, sizeof(n_bad), cudaMemcpyDeviceToHost, r.stream), "copy");
  ck(cudaStreamSynchronize(r.stream), "sync");
  cr_expect_eq(n_bad, 0, "%llu bytes wrong after a coalesced load", n_bad);
  expect_done(r.c, 2, ECC_DIR_LOAD, 10000);
  cr_expect_eq(stats_of(r.c).load.descriptors, 1);

  /* Neighbours in the destination but not in the region: two. */
  ecc_load_entry_t m[2] = {
      {3, x, 2, (uint64_t)(uintptr_t)dst_dev, 2 * bs},
      {4, z, 2, (uint64_t)(uintptr_t)(dst_dev + 2 * bs), 2 * bs},
  };
  cr_assert_eq(ecc_load(r.c, m, 2, r.stream), ECC_OK);
  expect_done(r.c, 2, ECC_DIR_LOAD, 10000);
  cr_expect_eq(stats_of(r.c).load.descriptors, 3);

  cudaFree(bad);
  cudaFree(src_dev);
  cudaFree(dst_dev);
  rig_close(&r);
}

Test(gpu, coalescing)
{
  need_gpus(1, gpu_count());
  coalescing("dma");
  coalescing("kernel");
}

/* ---- a load copied in parts ---- */

#define PART_BS 4096u
#define PART_NB 24576u
#define PART_ENTRIES 6

/* A load whose plan the engine writes in parts while the first ones copy
 * (engine_cuda.c: a first part moving at least 2 MiB, then parts eight
 * times as large, whole entries each). The step is laid out so that the
 * second part ends after entry 3 (entries 1..3: 17.2 MB), whose last block
 * (19999) the run of entry 4 (20000..20999) continues on both sides:
 * written at once they would merge into one descriptor (6200 in all), fed
 * they must not (the second part is being copied when the third is
 * written). Scattered blocks are even and never continue one another, so
 * every other descriptor is one block. Entry 4's 4 MB descriptor is cut
 * into the kernel's tasks in the third part. */
static const uint32_t part_blocks[PART_ENTRIES] = {1000, 2000, 1000, 1200, 1000, 1000};

static uint32_t *part_ids(uint32_t *all, uint32_t **ids)
{
  uint32_t evens = 8000, next = 0;
  uint32_t *perm = malloc(evens * sizeof(*perm));
  cr_assert_not_null(perm);
  for (uint32_t i = 0; i < evens; i++)
    perm[i] = 2 * i;
  unsigned seed = 11;
  for (uint32_t i = evens - 1; i > 0; i--) {
    uint32_t j = (uint32_t)rand_r(&seed) % (i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  uint32_t *at = all;
  for (int k = 0; k < PART_ENTRIES; k++) {
    ids[k] = at;
    for (uint32_t j = 0; j < part_blocks[k]; j++)
      at[j] = k == 4 ? 20000 + j : perm[next++];
    at += part_blocks[k];
  }
  ids[3][part_blocks[3] - 1] = 19999;
  free(perm);
  return at;
}

static void load_in_parts(const char *method, uint64_t want_descs)
{
  struct rig r;
  rig_open(&r, method, PART_BS, PART_NB, NULL);
  for (uint64_t b = 0; b < PART_NB; b++)
    pattern(r.blocks + b * PART_BS, PART_BS, 9, b * PART_BS);
  static uint32_t all[8000];
  uint32_t *ids[PART_ENTRIES];
  uint64_t total = (uint64_t)(part_ids(all, ids) - all) * PART_BS;
  uint8_t *dst_dev, *got = malloc(total), *want = malloc(total);
  cr_assert(got != NULL && want != NULL);
  ck(cudaMalloc((void **)&dst_dev, total), "cudaMalloc");
  memset_now(dst_dev, POISON, total, "poison destination");
  ecc_load_entry_t e[PART_ENTRIES];
  uint64_t off = 0;
  for (int k = 0; k < PART_ENTRIES; k++) {
    uint64_t n = (uint64_t)part_blocks[k] * PART_BS;
    e[k] = (ecc_load_entry_t){100 + k, ids[k], part_blocks[k], (uint64_t)(uintptr_t)(dst_dev + off),
                              n};
    for (uint32_t j = 0; j < part_blocks[k]; j++)
      memcpy(want + off + (uint64_t)j * PART_BS, r.blocks + (uint64_t)ids[k][j] * PART_BS, PART_BS);
    off += n;
  }
  ecc_stats_t before = stats_of(r.c);
  cr_assert_eq(ecc_load(r.c, e, PART_ENTRIES, r.stream), ECC_OK);
  ck(cudaStreamSynchronize(r.stream), "sync compute stream");
  ck(cudaMemcpy(got, dst_dev, total, cudaMemcpyDeviceToHost), "download destination");
  expect_same(got, want, total, method);
  ecc_completion_t done[PART_ENTRIES];
  cr_assert_eq(th_poll_until(r.c, done, PART_ENTRIES, 10000), PART_ENTRIES);
  for (int k = 0; k < PART_ENTRIES; k++)
    cr_expect_eq(done[k].status, ECC_OK, "%s: entry %d: status %d", method, k, done[k].status);
  ecc_stats_t after = stats_of(r.c);
  cr_expect_eq(after.load.bytes - before.load.bytes, total);
  cr_expect_eq(after.load.descriptors - before.load.descriptors, want_descs,
               "%s: %llu descriptors, expected %llu", method,
               (unsigned long long)(after.load.descriptors - before.load.descriptors),
               (unsigned long long)want_descs);
  cudaFree(dst_dev);
  free(got);
  free(want);
  rig_close(&r);
}

Test(gpu, a_load_of_thousands_of_scattered_blocks_copied_in_parts_lands_whole, .timeout = 120)
{
  need_gpus(1, gpu_count());
  load_in_parts("dma", 6201);
  load_in_parts("kernel", 6201);
  load_in_parts("auto", 6201); /* the kernel, for thousands of descriptors */
}

/* ---- ordering against the compute stream ---- */

/* Which stream the host's work runs on, and what it hands to flush/load:
 * its own stream, the legacy default stream (PyTorch's default: handle 0,
 * passed as NULL) or the per-thread default stream. */
enum host_stream { SIDE_STREAM, LEGACY_STREAM, PER_THREAD_STREAM };

static const char *const stream_names[] = {"side stream", "legacy default stream (NULL)",
                                           "per-thread default stream"};

static cudaStream_t work_stream(const struct rig *r, enum host_stream which)
{
  if (which == LEGACY_STREAM)
    return cudaStreamLegacy;
  return which == PER_THREAD_STREAM ? cudaStreamPerThread : r->stream;
}

static void *passed_stream(const struct rig *r, enum host_stream which)
{
  return which == LEGACY_STREAM ? NULL : (void *)work_stream(r, which);
}

/* The source is rewritten by the host's stream after a long spin; flush is
 * called before that has happened, so the copy must wait for it. */
static void save_waits_for_stream(const char *method, enum host_stream which)
{
  const uint64_t bs = 65536, nb = 256, bytes = bs * nb;
  struct rig r;
  rig_open(&r, method, bs, nb, NULL);
  cudaStream_t work = work_stream(&r, which);
  uint8_t *src_dev;
  ck(cudaMalloc((void **)&src_dev, bytes), "cudaMalloc");
  ck(tk_fill(src_dev, bytes, 1, 0, work), "fill old");
  ck(cudaStreamSynchronize(work), "sync");

  ck(tk_spin(200u * 1000u * 1000u, work), "spin");
  ck(tk_fill(src_dev, bytes, 2, 0, work), "fill new");
  uint32_t *ids = malloc(nb * sizeof(*ids));
  for (uint32_t i = 0; i < nb; i++)
    ids[i] = (i * 37) % nb; /* scattered */
  ecc_save_entry_t e = {"late", (uint64_t)(uintptr_t)src_dev, bytes, ids, (uint32_t)nb};
  uint64_t t0 = now_ms();
  cr_assert_eq(ecc_save(r.c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, passed_stream(&r, which)), ECC_OK);
  expect_done(r.c, 1, ECC_DIR_SAVE, 20000);
  cr_expect_geq(now_ms() - t0, 150, "%s, %s: the save finished before the spin ended", method,
                stream_names[which]);

  uint8_t *want = malloc(bs);
  for (uint32_t i = 0; i < nb; i++) {
    pattern(want, bs, 2, (uint64_t)i * bs);
    expect_same(r.blocks + (uint64_t)ids[i] * bs, want, bs, stream_names[which]);
  }
  free(want);
  free(ids);
  cudaFree(src_dev);
  rig_close(&r);
}

Test(gpu, save_waits_for_compute_stream, .timeout = 120)
{
  need_gpus(1, gpu_count());
  save_waits_for_stream("dma", SIDE_STREAM);
  save_waits_for_stream("kernel", SIDE_STREAM);
}

Test(gpu, save_waits_for_legacy_and_per_thread_default_streams, .timeout = 120)
{
  need_gpus(1, gpu_count());
  save_waits_for_stream("dma", LEGACY_STREAM);
  save_waits_for_stream("kernel", LEGACY_STREAM);
  save_waits_for_stream("auto", PER_THREAD_STREAM);
}

/* The load waits for a spin already queued on the host's stream (the
 * destination is still being read there), and a kernel queued on that stream
 * right after load reads the data. */
static void load_then_kernel(const char *method, enum host_stream which)
{
  const uint64_t bs = 65536, nb = 256, bytes = bs * nb;
  struct rig r;
  rig_open(&r, method, bs, nb, NULL);
  cudaStream_t work = work_stream(&r, which);
  uint32_t *ids = malloc(nb * sizeof(*ids));
  for (uint32_t i = 0; i < nb; i++) {
    ids[i] = (i * 37 + 5) % nb;
    pattern(r.blocks + (uint64_t)ids[i] * bs, bs, 3, (uint64_t)i * bs);
  }
  uint8_t *dst_dev;
  unsigned long long *bad, *bad_before;
  ck(cudaMalloc((void **)&dst_dev, bytes), "cudaMalloc");
  ck(cudaMalloc((void **)&bad, sizeof(*bad)), "cudaMalloc");
  ck(cudaMalloc((void **)&bad_before, sizeof(*bad_before)), "cudaMalloc");
  memset_now(dst_dev, POISON, bytes, "poison");
  memset_now(bad, 0, sizeof(*bad), "zero");
  memset_now(bad_before, 0, sizeof(*bad_before), "zero");

  /* Still-running work that reads the old destination: after the spin it
   * counts bytes that already look loaded, which must be none. */
  ck(tk_spin(100u * 1000u * 1000u, work), "spin");
  ck(tk_count_mismatch(dst_dev, bytes, 3, 0, bad_before, work), "check before");
  ecc_load_entry_t l = {9, ids, (uint32_t)nb, (uint64_t)(uintptr_t)dst_dev, bytes};
  cr_assert_eq(ecc_load(r.c, &l, 1, passed_stream(&r, which)), ECC_OK);
  ck(tk_count_mismatch(dst_dev, bytes, 3, 0, bad, work), "check");
  unsigned long long n_bad = 1, n_before = 0;
  ck(cudaMemcpyAsync(&n_bad, bad, sizeof(n_bad), cudaMemcpyDeviceToHost, work), "copy");
  ck(cudaMemcpyAsync(&n_before, bad_before, sizeof(n_before), cudaMemcpyDeviceToHost, work),
     "copy");
  ck(cudaStreamSynchronize(work), "sync");
  cr_expect_eq(n_bad, 0, "%s, %s: the kernel after load saw %llu stale bytes", method,
               stream_names[which], n_bad);
  unsigned long long poison_differs = 0; /* what the check counts on an untouched destination */
  for (uint64_t i = 0; i < bytes; i++)
    poison_differs += tk_byte(3, i) != POISON;
  cr_expect_eq(n_before, poison_differs,
               "%s, %s: the load overwrote the destination before the "
               "work queued ahead of it had read it",
               method, stream_names[which]);
  expect_done(r.c, 1, ECC_DIR_LOAD, 20000);

  free(ids);
  cudaFree(bad);
  cudaFree(bad_before);
  cudaFree(dst_dev);
  rig_close(&r);
}

Test(gpu, kernel_after_load_sees_data, .timeout = 120)
{
  need_gpus(1, gpu_count());
  load_then_kernel("dma", SIDE_STREAM);
  load_then_kernel("kernel", SIDE_STREAM);
}

Test(gpu, legacy_and_per_thread_default_streams_are_ordered_around_load, .timeout = 120)
{
  need_gpus(1, gpu_count());
  load_then_kernel("dma", LEGACY_STREAM);
  load_then_kernel("kernel", LEGACY_STREAM);
  load_then_kernel("auto", PER_THREAD_STREAM);
}

/* Once its completion is polled, a save's source may be overwritten at once:
 * the region keeps what was saved. */
static void reuse_after_completion(const char *method)
{
  const uint64_t bs = 65536, nb = 1024, bytes = bs * nb;
  struct rig r;
  rig_open(&r, method, bs, nb, NULL);
  uint8_t *src_dev;
  ck(cudaMalloc((void **)&src_dev, bytes), "cudaMalloc");
  uint32_t *ids = malloc(nb * sizeof(*ids));
  uint8_t *want = malloc(bs);
  for (int round = 0; round < 3; round++) {
    uint64_t seed = 40 + (uint64_t)round;
    ck(tk_fill(src_dev, bytes, seed, 0, r.stream), "fill");
    for (uint32_t i = 0; i < nb; i++)
      ids[i] = (i * 101 + (uint32_t)round) % nb;
    ecc_save_entry_t e = {"reused", (uint64_t)(uintptr_t)src_dev, bytes, ids, (uint32_t)nb};
    cr_assert_eq(ecc_save(r.c, &e, 1), ECC_OK);
    cr_assert_eq(ecc_flush(r.c, r.stream), ECC_OK);
    expect_done(r.c, 1, ECC_DIR_SAVE, 20000);
    memset_now(src_dev, 0, bytes, "overwrite source");
    for (uint32_t i = 0; i < nb; i++) {
      pattern(want, bs, seed, (uint64_t)i * bs);
      expect_same(r.blocks + (uint64_t)ids[i] * bs, want, bs, "block after source reuse");
    }
  }
  free(want);
  free(ids);
  cudaFree(src_dev);
  rig_close(&r);
}

Test(gpu, source_reused_after_completion, .timeout = 120)
{
  need_gpus(1, gpu_count());
  reuse_after_completion("dma");
  reuse_after_completion("kernel");
}

/* shutdown waits for copies still running: our view of the region holds
 * the data once close returns, although the file is gone. */
Test(gpu, shutdown_waits_for_copies, .timeout = 120)
{
  need_gpus(1, gpu_count());
  const uint64_t bs = 1u << 20, nb = 128, bytes = bs * nb;
  struct rig r;
  rig_open(&r, "kernel", bs, nb, NULL);
  uint8_t *src_dev;
  ck(cudaMalloc((void **)&src_dev, bytes), "cudaMalloc");
  ck(tk_spin(100u * 1000u * 1000u, r.stream), "spin");
  ck(tk_fill(src_dev, bytes, 5, 0, r.stream), "fill");
  uint32_t *ids = malloc(nb * sizeof(*ids));
  for (uint32_t i = 0; i < nb; i++)
    ids[i] = nb - 1 - i;
  ecc_save_entry_t e = {"late", (uint64_t)(uintptr_t)src_dev, bytes, ids, (uint32_t)nb};
  cr_assert_eq(ecc_save(r.c, &e, 1), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, r.stream), ECC_OK);
  cr_assert_eq(ecc_close(r.c), ECC_OK);
  uint8_t *want = malloc(bs);
  for (uint32_t i = 0; i < nb; i++) {
    pattern(want, bs, 5, (uint64_t)i * bs);
    expect_same(r.blocks + (uint64_t)ids[i] * bs, want, bs, "block saved before shutdown");
  }
  free(want);
  free(ids);
  cudaFree(src_dev);
  cudaStreamDestroy(r.stream);
  munmap(r.map, r.map_bytes);
}

/* ---- configuration, description, pinning ---- */

/* The directory on the GPU: entries reserved, saved from device memory on
 * a compute stream, looked up and loaded back into device memory, byte for
 * byte, each in one run of blocks. */
static void directory_round_trip(const char *method)
{
  enum { N = 48 };
  const uint64_t bs = 65536, nb = 512;
  struct rig r;
  rig_open(&r, method, bs, nb, "\n[directory]\nenabled = true\n");
  uint64_t sizes[N], offs[N], total = 0;
  for (int i = 0; i < N; i++) {
    sizes[i] = (uint64_t)(1 + i % 8) * bs - (uint64_t)(i * 97) % bs;
    offs[i] = total;
    total += sizes[i];
  }
  uint8_t *host = malloc(total), *back = malloc(total), *src_dev, *dst_dev;
  pattern(host, total, 11, 0);
  ck(cudaMalloc((void **)&src_dev, total), "cudaMalloc");
  ck(cudaMalloc((void **)&dst_dev, total), "cudaMalloc");
  ck(cudaMemcpy(src_dev, host, total, cudaMemcpyHostToDevice), "upload");
  memset_now(dst_dev, POISON, total, "poison");
  char keys[N][32];
  const char *names[N];
  ecc_save_reserved_t saves[N];
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof(keys[i]), "gpu-%s-%d", method, i);
    names[i] = keys[i];
    ecc_entry_t e;
    cr_assert_eq(ecc_reserve(r.c, keys[i], sizes[i], &e), ECC_OK);
    cr_assert_eq(e.state, ECC_ENTRY_RESERVED);
    cr_assert_eq(e.n_extents, 1, "%s: entry %d has %u runs", method, i, e.n_extents);
    saves[i] = (ecc_save_reserved_t){e.token, (uint64_t)(uintptr_t)(src_dev + offs[i]), sizes[i]};
  }
  cr_assert_eq(ecc_save_reserved(r.c, saves, N), ECC_OK);
  cr_assert_eq(ecc_flush(r.c, r.stream), ECC_OK);
  for (int i = 0; i < N; i += 16)
    expect_done(r.c, 16, ECC_DIR_SAVE, 20000);
  ecc_entry_t found[N];
  ecc_load_pinned_t loads[N];
  cr_assert_eq(ecc_lookup(r.c, names, N, 1, found), ECC_OK);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(found[i].state, ECC_ENTRY_READY, "%s: entry %d not found", method, i);
    loads[i] = (ecc_load_pinned_t){(uint64_t)i + 1, found[i].token,
                                   (uint64_t)(uintptr_t)(dst_dev + offs[i]), sizes[i]};
  }
  cr_assert_eq(ecc_load_pinned(r.c, loads, N, r.stream), ECC_OK);
  ck(cudaMemcpyAsync(back, dst_dev, total, cudaMemcpyDeviceToHost, r.stream), "download");
  ck(cudaStreamSynchronize(r.stream), "sync");
  expect_same(back, host, total, method);
  for (int i = 0; i < N; i += 16)
    expect_done(r.c, 16, ECC_DIR_LOAD, 20000);
  ecc_stats_t st = stats_of(r.c);
  cr_expect_eq(st.directory.entries, N);
  cr_expect_eq(st.directory.pins_live, 0, "%s: polled loads left pins", method);
  /* One run per entry: at most one descriptor each way. */
  cr_expect_leq(st.save.descriptors, N, "%s: %llu save descriptors", method,
                (unsigned long long)st.save.descriptors);
  cr_expect_leq(st.load.descriptors, N, "%s: %llu load descriptors", method,
                (unsigned long long)st.load.descriptors);
  free(host);
  free(back);
  cudaFree(src_dev);
  cudaFree(dst_dev);
  rig_close(&r);
}

Test(gpu, directory_round_trip_from_and_to_device_memory, .timeout = 120)
{
  need_gpus(1, gpu_count());
  directory_round_trip("dma");
  directory_round_trip("kernel");
  directory_round_trip("auto");
}

Test(gpu, describe_and_pinning)
{
  need_gpus(1, gpu_count());
  const char *name = th_region_name();
  struct rig r;
  rig_open_ini(&r, gpu_ini("both", name, 4096, 64, "auto", "auto", -1, NULL), 4096, 64);
  cr_expect_eq(r.info.pinned, 1);
  cr_expect_not_null(strstr(r.info.engine_detail, "pinned"), "%s", r.info.engine_detail);
  cr_expect_not_null(strstr(r.info.engine_detail, "auto"), "%s", r.info.engine_detail);
  cr_expect_gt(stats_of(r.c).pin_ns, 0);
  rig_close(&r);

  rig_open(&r, "auto", 4096, 64, "\n[pinning]\nenabled = off\n");
  cr_expect_eq(r.info.pinned, 0);
  cr_expect_eq(stats_of(r.c).pin_ns, 0);
  cr_expect_not_null(strstr(r.info.engine_detail, "not pinned"), "%s", r.info.engine_detail);
  /* Unpinned, the copy engines still move the data. */
  struct bufs b;
  b.cap = 16 * 4096 + 1024;
  ck(cudaMalloc((void **)&b.src_dev, b.cap), "cudaMalloc");
  ck(cudaMalloc((void **)&b.dst_dev, b.cap), "cudaMalloc");
  b.src = malloc(b.cap);
  b.dst = malloc(b.cap);
  b.want = malloc(b.cap);
  b.image = malloc(4096 * 64);
  one_round_trip(&r, &b, 1, 0, 99);
  cudaFree(b.src_dev);
  cudaFree(b.dst_dev);
  free(b.src);
  free(b.dst);
  free(b.want);
  free(b.image);
  rig_close(&r);
}

static void expect_open_fails(const char *ini, int code, const char *needle, const char *region)
{
  ecc_connector_t *c = NULL;
  char err[512] = "";
  int rc = ecc_open(ini, NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, code, "ecc_open gave %d (%s), want %d", rc, err, code);
  cr_expect_null(c);
  cr_expect_not_null(strstr(err, needle), "error text lacks '%s': %s", needle, err);
  char path[256];
  snprintf(path, sizeof(path), "%s", th_region_path(th_default_dir(), region));
  cr_expect_not(th_exists(path), "a failed open left %s behind", path);
}

Test(gpu, bad_configurations_leave_nothing)
{
  need_gpus(1, gpu_count());
  const char *name = th_region_name();
  expect_open_fails(
      gpu_ini("both", name, 4096, 64, "cuda", "kernel", 0, "\n[pinning]\nenabled = off\n"),
      ECC_ERR_CONFIG, "engine.method", name);
  name = th_region_name();
  expect_open_fails(gpu_ini("both", name, 4096, 64, "cuda", "dma", 1023, NULL), ECC_ERR_CONFIG,
                    "engine.device", name);
}

/* ---- several connectors, processes and devices ---- */

/* Two connectors in one process, on two devices where there are two: each
 * call leaves the caller's current device as it was. */
Test(gpu, two_connectors_one_process, .timeout = 120)
{
  int n = gpu_count();
  need_gpus(1, n);
  int dev[2] = {0, n > 1 ? 1 : 0};
  const uint64_t bs = 4096, nb = 64, bytes = bs * 32;
  struct rig r[2];
  uint8_t *src[2], *dst[2];
  for (int k = 0; k < 2; k++) {
    const char *ini =
        gpu_ini("both", th_region_name(), bs, nb, "cuda", k ? "kernel" : "dma", dev[k], NULL);
    ck(cudaSetDevice(dev[k]), "cudaSetDevice");
    rig_open_ini(&r[k], ini, bs, nb);
    ck(cudaMalloc((void **)&src[k], bytes), "cudaMalloc");
    ck(cudaMalloc((void **)&dst[k], bytes), "cudaMalloc");
    ck(tk_fill(src[k], bytes, 60 + (uint64_t)k, 0, r[k].stream), "fill");
    ck(cudaStreamSynchronize(r[k].stream), "sync");
  }
  uint32_t ids[32];
  for (uint32_t i = 0; i < 32; i++)
    ids[i] = 63 - 2 * i;
  for (int k = 0; k < 2; k++) {
    int other = dev[1 - k], cur = -1;
    ck(cudaSetDevice(other), "cudaSetDevice");
    ecc_save_entry_t e = {"k", (uint64_t)(uintptr_t)src[k], bytes, ids, 32};
    cr_assert_eq(ecc_save(r[k].c, &e, 1), ECC_OK);
    cr_assert_eq(ecc_flush(r[k].c, r[k].stream), ECC_OK);
    ck(cudaGetDevice(&cur), "cudaGetDevice");
    cr_expect_eq(cur, other, "flush changed the current device");
  }
  for (int k = 0; k < 2; k++) {
    expect_done(r[k].c, 1, ECC_DIR_SAVE, 10000);
    ecc_load_entry_t l = {7, ids, 32, (uint64_t)(uintptr_t)dst[k], bytes};
    int other = dev[1 - k], cur = -1;
    ck(cudaSetDevice(other), "cudaSetDevice");
    cr_assert_eq(ecc_load(r[k].c, &l, 1, r[k].stream), ECC_OK);
    ck(cudaGetDevice(&cur), "cudaGetDevice");
    cr_expect_eq(cur, other, "load changed the current device");
  }
  uint8_t *host = malloc(bytes), *want = malloc(bytes);
  for (int k = 0; k < 2; k++) {
    expect_done(r[k].c, 1, ECC_DIR_LOAD, 10000);
    ck(cudaSetDevice(dev[k]), "cudaSetDevice");
    ck(cudaMemcpy(host, dst[k], bytes, cudaMemcpyDeviceToHost), "download");
    pattern(want, bytes, 60 + (uint64_t)k, 0);
    expect_same(host, want, bytes, "round trip of one of two connectors");
    cudaFree(src[k]);
    cudaFree(dst[k]);
    rig_close(&r[k]);
  }
  free(host);
  free(want);
}

#define PROC_ENTRIES 8u
#define PROC_BLOCKS 4u
#define PROC_NB 64u
#define PROC_BS 12288u

static uint32_t proc_block(uint32_t entry, uint32_t j)
{
  return ((entry * PROC_BLOCKS + j) * 7u) % PROC_NB;
}

static int child_open(const char *ini, ecc_connector_t **c)
{
  char err[512] = "";
  int rc = ecc_open(ini, NULL, c, err, sizeof(err));
  if (rc != ECC_OK)
    fprintf(stderr, "child: ecc_open: %d %s\n", rc, err);
  return rc;
}

static int child_poll(ecc_connector_t *c, size_t want)
{
  ecc_completion_t done[PROC_ENTRIES];
  size_t got = 0;
  uint64_t t0 = now_ms();
  while (got < want && now_ms() - t0 < 20000) {
    size_t n = 0;
    if (ecc_poll(c, done, PROC_ENTRIES, &n) != ECC_OK)
      return -1;
    for (size_t i = 0; i < n; i++)
      if (done[i].status != ECC_OK)
        return -1;
    got += n;
    if (n == 0)
      usleep(200);
  }
  return got == want ? 0 : -1;
}

/* The child's buffers go on the device its connector copies on (the
 * parent names it in ECC_TEST_GPU): a kernel on one device cannot write
 * another device's memory. */
static int use_test_gpu(void)
{
  const char *d = getenv("ECC_TEST_GPU");
  return d == NULL || cudaSetDevice(atoi(d)) == cudaSuccess ? 0 : -1;
}

static int producer(const char *ini, int to_consumer, int from_consumer)
{
  ecc_connector_t *c = NULL;
  if (use_test_gpu() != 0)
    return 15;
  if (child_open(ini, &c) != ECC_OK)
    return 10;
  const uint64_t bytes = (uint64_t)PROC_ENTRIES * PROC_BLOCKS * PROC_BS;
  uint8_t *host = malloc(bytes), *dev = NULL;
  pattern(host, bytes, 21, 0);
  if (cudaMalloc((void **)&dev, bytes) != cudaSuccess ||
      cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess)
    return 11;
  ecc_save_entry_t e[PROC_ENTRIES];
  uint32_t ids[PROC_ENTRIES][PROC_BLOCKS];
  char keys[PROC_ENTRIES][16];
  for (uint32_t i = 0; i < PROC_ENTRIES; i++) {
    for (uint32_t j = 0; j < PROC_BLOCKS; j++)
      ids[i][j] = proc_block(i, j);
    snprintf(keys[i], sizeof(keys[i]), "img%u", i);
    e[i] = (ecc_save_entry_t){keys[i],
                              (uint64_t)(uintptr_t)(dev + (uint64_t)i * PROC_BLOCKS * PROC_BS),
                              (uint64_t)PROC_BLOCKS * PROC_BS, ids[i], PROC_BLOCKS};
  }
  if (ecc_save(c, e, PROC_ENTRIES) != ECC_OK || ecc_flush(c, NULL) != ECC_OK ||
      child_poll(c, PROC_ENTRIES) != 0)
    return 12;
  char ch = 's';
  if (write(to_consumer, &ch, 1) != 1 || read(from_consumer, &ch, 1) != 1)
    return 13;
  cudaFree(dev);
  free(host);
  return ecc_close(c) == ECC_OK ? 0 : 14;
}

static int consumer(const char *ini, int from_producer, int to_producer)
{
  char ch = 0;
  if (read(from_producer, &ch, 1) != 1)
    return 20;
  ecc_connector_t *c = NULL;
  if (use_test_gpu() != 0)
    return 28;
  if (child_open(ini, &c) != ECC_OK)
    return 21;
  const uint64_t bytes = (uint64_t)PROC_ENTRIES * PROC_BLOCKS * PROC_BS;
  uint8_t *host = malloc(bytes), *want = malloc(bytes), *dev = NULL;
  if (cudaMalloc((void **)&dev, bytes) != cudaSuccess ||
      cudaMemset(dev, POISON, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
    return 22;
  ecc_load_entry_t l[PROC_ENTRIES];
  uint32_t ids[PROC_ENTRIES][PROC_BLOCKS];
  for (uint32_t i = 0; i < PROC_ENTRIES; i++) {
    for (uint32_t j = 0; j < PROC_BLOCKS; j++)
      ids[i][j] = proc_block(i, j);
    l[i] = (ecc_load_entry_t){100 + i, ids[i], PROC_BLOCKS,
                              (uint64_t)(uintptr_t)(dev + (uint64_t)i * PROC_BLOCKS * PROC_BS),
                              (uint64_t)PROC_BLOCKS * PROC_BS};
  }
  if (ecc_load(c, l, PROC_ENTRIES, NULL) != ECC_OK || child_poll(c, PROC_ENTRIES) != 0)
    return 23;
  if (cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    return 24;
  pattern(want, bytes, 21, 0);
  int same = memcmp(host, want, bytes) == 0;
  if (!same)
    fprintf(stderr, "consumer: loaded bytes differ from what the producer saved\n");
  ch = 'd';
  if (write(to_producer, &ch, 1) != 1)
    return 25;
  cudaFree(dev);
  free(host);
  free(want);
  if (ecc_close(c) != ECC_OK)
    return 26;
  return same ? 0 : 27;
}

/* Producer and consumer run as fresh processes: this binary again. */
__attribute__((constructor)) static void gpu_child_entry(void)
{
  const char *role, *ini;
  int fd0, fd1;
  if (!th_child_args(&role, &ini, &fd0, &fd1))
    return;
  if (strcmp(role, "gpu-producer") == 0)
    _exit(producer(ini, fd0, fd1));
  if (strcmp(role, "gpu-consumer") == 0)
    _exit(consumer(ini, fd0, fd1));
}

static void producer_consumer(int dev_p, int dev_c)
{
  const char *name = th_region_name();
  const char *ini_p = gpu_ini("producer", name, PROC_BS, PROC_NB, "cuda", "auto", dev_p, NULL);
  const char *ini_c = gpu_ini("consumer", name, PROC_BS, PROC_NB, "cuda", "kernel", dev_c, NULL);
  int p2c[2], c2p[2];
  cr_assert_eq(pipe2(p2c, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(c2p, O_CLOEXEC), 0);
  char dev[16];
  snprintf(dev, sizeof(dev), "%d", dev_p);
  setenv("ECC_TEST_GPU", dev, 1); /* children inherit it at spawn */
  pid_t pp = th_spawn_self("gpu-producer", ini_p, p2c[1], c2p[0]);
  snprintf(dev, sizeof(dev), "%d", dev_c);
  setenv("ECC_TEST_GPU", dev, 1);
  pid_t pc = th_spawn_self("gpu-consumer", ini_c, p2c[0], c2p[1]);
  unsetenv("ECC_TEST_GPU");
  close(p2c[0]);
  close(p2c[1]);
  close(c2p[0]);
  close(c2p[1]);
  int sp = 0, sc = 0;
  cr_assert_eq(waitpid(pp, &sp, 0), pp);
  cr_assert_eq(waitpid(pc, &sc, 0), pc);
  cr_expect(WIFEXITED(sp) && WEXITSTATUS(sp) == 0, "producer failed (status 0x%x)", sp);
  cr_expect(WIFEXITED(sc) && WEXITSTATUS(sc) == 0, "consumer failed (status 0x%x)", sc);
}

Test(gpu, producer_and_consumer_processes_one_gpu, .timeout = 120)
{
  need_gpus(1, gpu_count());
  producer_consumer(0, 0);
}

Test(gpu, producer_and_consumer_processes_two_gpus, .timeout = 120)
{
  need_gpus(2, gpu_count());
  producer_consumer(0, 1);
}
