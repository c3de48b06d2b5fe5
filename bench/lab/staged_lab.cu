/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staged_lab.cu - can the CPU stage scattered blocks fast enough for the copy
 * engines to run both ways at once at link speed? Loads: threads gather
 * blocks of the pinned region into a pinned staging slot, one contiguous
 * host-to-device copy per slot. Saves: one contiguous device-to-host copy
 * per slot, then threads scatter the slot into region blocks.
 * Not part of the build: nvcc -O3 -arch=sm_90 -Xcompiler -fopenmp,-mavx2 -o staged_lab staged_lab.cu
 * ./staged_lab: CPU rates and the chunked pipeline; ./staged_lab workers:
 * T independent workers per direction, each with its own stream and slots.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <immintrin.h>
#include <omp.h>
#include <thread>
#include <time.h>
#include <vector>

#include <cuda_runtime.h>

#define CK(x) check((x), #x, __LINE__)
static void check(cudaError_t rc, const char *what, int line)
{
  if (rc != cudaSuccess) {
    fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(rc));
    exit(1);
  }
}

static const size_t MB = 1 << 20, REGION = 2048 * MB, STEP = 64 * MB;
static const int NSLOT = 3;

static uint8_t *H, *HS[2][NSLOT], *DL, *DS;
static std::vector<uint32_t> load_ids, save_ids;
static size_t BLK;
static cudaStream_t s_load, s_save;
static cudaEvent_t ev[2][NSLOT];

static double now_us()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Streaming stores: the destination is not read first, and it does not
 * evict the cache the source is read through. n is a multiple of 128. */
static void copy_nt(uint8_t *dst, const uint8_t *src, size_t n)
{
  for (size_t i = 0; i < n; i += 128) {
    __m256i a = _mm256_load_si256((const __m256i *)(src + i));
    __m256i b = _mm256_load_si256((const __m256i *)(src + i + 32));
    __m256i c = _mm256_load_si256((const __m256i *)(src + i + 64));
    __m256i d = _mm256_load_si256((const __m256i *)(src + i + 96));
    _mm256_stream_si256((__m256i *)(dst + i), a);
    _mm256_stream_si256((__m256i *)(dst + i + 32), b);
    _mm256_stream_si256((__m256i *)(dst + i + 64), c);
    _mm256_stream_si256((__m256i *)(dst + i + 96), d);
  }
}

static int g_nt;
static void copy(uint8_t *dst, const uint8_t *src, size_t n)
{
  if (g_nt)
    copy_nt(dst, src, n);
  else
    memcpy(dst, src, n);
}

/* blocks [first, first+n) of ids, gathered into or scattered from buf */
static void cpu_move(int gather, const uint32_t *ids, size_t n, uint8_t *buf, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t i = 0; i < n; i++) {
    uint8_t *blk = H + (size_t)ids[i] * BLK;
    if (gather)
      copy(buf + i * BLK, blk, BLK);
    else
      copy(blk, buf + i * BLK, BLK);
  }
  if (g_nt)
    _mm_sfence();
}

static size_t g_chunk;
static int g_threads;

static void load_pipeline()
{
  size_t per = g_chunk / BLK, nchunk = STEP / g_chunk;
  for (size_t c = 0; c < nchunk; c++) {
    int s = (int)(c % NSLOT);
    CK(cudaEventSynchronize(ev[0][s]));
    cpu_move(1, &load_ids[c * per], per, HS[0][s], g_threads);
    CK(cudaMemcpyAsync(DL + c * g_chunk, HS[0][s], g_chunk, cudaMemcpyHostToDevice, s_load));
    CK(cudaEventRecord(ev[0][s], s_load));
  }
  CK(cudaStreamSynchronize(s_load));
}

static void save_pipeline()
{
  size_t per = g_chunk / BLK, nchunk = STEP / g_chunk;
  for (size_t c = 0; c < nchunk && c < (size_t)NSLOT; c++) {
    CK(cudaMemcpyAsync(HS[1][c], DS + c * g_chunk, g_chunk, cudaMemcpyDeviceToHost, s_save));
    CK(cudaEventRecord(ev[1][c], s_save));
  }
  for (size_t c = 0; c < nchunk; c++) {
    int s = (int)(c % NSLOT);
    CK(cudaEventSynchronize(ev[1][s]));
    cpu_move(0, &save_ids[c * per], per, HS[1][s], g_threads);
    size_t nx = c + NSLOT;
    if (nx < nchunk) {
      CK(cudaMemcpyAsync(HS[1][s], DS + nx * g_chunk, g_chunk, cudaMemcpyDeviceToHost, s_save));
      CK(cudaEventRecord(ev[1][s], s_save));
    }
  }
}

/* ---- second design: independent workers, no barrier. Each of T threads
 * per direction owns 1/T of the step and runs its own pipeline on its own
 * stream with its own staging slots. ---- */
static const int MAXW = 16;
static uint8_t *WS[2][MAXW][NSLOT];
static cudaStream_t wst[2][MAXW];
static cudaEvent_t wev[2][MAXW][NSLOT];

static void worker(int direction, int w, int nw)
{
  size_t n = STEP / BLK, first = (size_t)w * (n / nw);
  size_t per_w = w == nw - 1 ? n - first : n / nw; /* the last takes the rest */
  size_t per_chunk = g_chunk / BLK;
  const uint32_t *ids = direction == 0 ? load_ids.data() : save_ids.data();
  uint8_t *dev = (direction == 0 ? DL : DS) + first * BLK;
  size_t nchunk = (per_w + per_chunk - 1) / per_chunk;
  if (direction == 1) /* saves: device -> slot first, then scatter */
    for (size_t c = 0; c < nchunk && c < (size_t)NSLOT; c++) {
      size_t k = std::min(per_chunk, per_w - c * per_chunk);
      CK(cudaMemcpyAsync(WS[1][w][c], dev + c * per_chunk * BLK, k * BLK, cudaMemcpyDeviceToHost,
                         wst[1][w]));
      CK(cudaEventRecord(wev[1][w][c], wst[1][w]));
    }
  for (size_t c = 0; c < nchunk; c++) {
    int sl = (int)(c % NSLOT);
    size_t k = std::min(per_chunk, per_w - c * per_chunk);
    const uint32_t *cid = ids + first + c * per_chunk;
    CK(cudaEventSynchronize(wev[direction][w][sl]));
    for (size_t i = 0; i < k; i++) {
      uint8_t *blk = H + (size_t)cid[i] * BLK;
      if (direction == 0)
        copy(WS[0][w][sl] + i * BLK, blk, BLK);
      else
        copy(blk, WS[1][w][sl] + i * BLK, BLK);
    }
    if (g_nt)
      _mm_sfence();
    if (direction == 0) {
      CK(cudaMemcpyAsync(dev + c * per_chunk * BLK, WS[0][w][sl], k * BLK, cudaMemcpyHostToDevice,
                         wst[0][w]));
      CK(cudaEventRecord(wev[0][w][sl], wst[0][w]));
    } else if (c + NSLOT < nchunk) {
      size_t nx = c + NSLOT, kk = std::min(per_chunk, per_w - nx * per_chunk);
      CK(cudaMemcpyAsync(WS[1][w][sl], dev + nx * per_chunk * BLK, kk * BLK, cudaMemcpyDeviceToHost,
                         wst[1][w]));
      CK(cudaEventRecord(wev[1][w][sl], wst[1][w]));
    }
  }
  CK(cudaStreamSynchronize(wst[direction][w]));
}

static double run_workers(int which)
{
  std::vector<double> r;
  for (int it = 0; it < 9; it++) {
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    std::vector<std::thread> th;
    for (int d = 0; d < 2; d++)
      if (which & (1 << d))
        for (int w = 0; w < g_threads; w++)
          th.emplace_back(worker, d, w, g_threads);
    for (auto &t : th)
      t.join();
    double us = now_us() - t0;
    if (it >= 2)
      r.push_back((which == 3 ? 2.0 : 1.0) * STEP / (us * 1e3));
  }
  std::sort(r.begin(), r.end());
  return r[3];
}

/* which: 1 load, 2 save, 3 both; GB/s over wall time, median of 7 */
static double run(int which)
{
  std::vector<double> r;
  for (int it = 0; it < 9; it++) {
    CK(cudaDeviceSynchronize());
    double t0 = now_us();
    std::thread a, b;
    if (which & 1)
      a = std::thread(load_pipeline);
    if (which & 2)
      b = std::thread(save_pipeline);
    if (a.joinable())
      a.join();
    if (b.joinable())
      b.join();
    double us = now_us() - t0;
    if (it >= 2)
      r.push_back((which == 3 ? 2.0 : 1.0) * STEP / (us * 1e3));
  }
  std::sort(r.begin(), r.end());
  return r[3];
}

static void pick_ids(uint64_t seed)
{
  size_t nblk = REGION / BLK, n = STEP / BLK;
  std::vector<uint32_t> all(nblk);
  for (size_t i = 0; i < nblk; i++)
    all[i] = (uint32_t)i;
  uint64_t x = seed;
  for (size_t i = nblk - 1; i > 0; i--) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(all[i], all[x % (i + 1)]);
  }
  load_ids.assign(all.begin(), all.begin() + n);
  save_ids.assign(all.begin() + n, all.begin() + 2 * n);
}

static int verify()
{
  std::vector<uint8_t> a(STEP), b(STEP);
  CK(cudaMemcpy(a.data(), DL, STEP, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < load_ids.size(); i++)
    if (memcmp(&a[i * BLK], H + (size_t)load_ids[i] * BLK, BLK))
      return 0;
  CK(cudaMemcpy(b.data(), DS, STEP, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < save_ids.size(); i++)
    if (memcmp(&b[i * BLK], H + (size_t)save_ids[i] * BLK, BLK))
      return 0;
  return 1;
}

int main(int argc, char **argv)
{
  CK(cudaSetDevice(0));
  CK(cudaHostAlloc(&H, REGION, cudaHostAllocPortable));
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < NSLOT; s++) {
      CK(cudaHostAlloc(&HS[d][s], 16 * MB, cudaHostAllocPortable));
      CK(cudaEventCreateWithFlags(&ev[d][s], cudaEventDisableTiming));
    }
  if (argc > 1 && strcmp(argv[1], "workers") == 0) {
    for (int d = 0; d < 2; d++)
      for (int w = 0; w < MAXW; w++) {
        CK(cudaStreamCreateWithFlags(&wst[d][w], cudaStreamNonBlocking));
        for (int sl = 0; sl < NSLOT; sl++) {
          CK(cudaHostAlloc(&WS[d][w][sl], 2 * MB, cudaHostAllocPortable));
          CK(cudaEventCreateWithFlags(&wev[d][w][sl], cudaEventDisableTiming));
        }
      }
  }
  CK(cudaMalloc(&DL, STEP));
  CK(cudaMalloc(&DS, STEP));
  CK(cudaStreamCreateWithFlags(&s_load, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s_save, cudaStreamNonBlocking));
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < REGION; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(H + i, &x, 8);
  }
  std::vector<uint8_t> src(STEP);
  for (size_t i = 0; i < STEP; i++)
    src[i] = (uint8_t)(i * 131 + 7);
  CK(cudaMemcpy(DS, src.data(), STEP, cudaMemcpyHostToDevice));
  printf("cores %d\n", omp_get_num_procs());
  if (argc > 1 && strcmp(argv[1], "workers") == 0) {
    printf("independent workers, 1 MiB chunks, 3 slots each (GB/s over wall time)\n");
    printf("block  copy   thr/dir |  load  save  both | bytes\n");
    g_chunk = 1 * MB;
    for (size_t bs : {(size_t)4096, (size_t)65536}) {
      BLK = bs;
      pick_ids(7654321 + bs);
      for (g_nt = 0; g_nt < 2; g_nt++)
        for (int t : {2, 4, 6, 8}) {
          g_threads = t;
          double l = run_workers(1), sv = run_workers(2), b = run_workers(3);
          printf("%6zu %s %3d | %5.1f %5.1f %5.1f | %s\n", BLK, g_nt ? "nt    " : "memcpy", t, l,
                 sv, b, verify() ? "ok" : "WRONG");
          fflush(stdout);
        }
    }
    return 0;
  }

  /* ceilings: the copy engines alone, contiguous, 64 MiB each way */
  g_threads = 1;
  {
    double t0 = now_us();
    for (int i = 0; i < 5; i++) {
      CK(cudaMemcpyAsync(DL, H, STEP, cudaMemcpyHostToDevice, s_load));
      CK(cudaMemcpyAsync(H + STEP, DS, STEP, cudaMemcpyDeviceToHost, s_save));
    }
    CK(cudaDeviceSynchronize());
    printf("copy engines contiguous both: %.1f GB/s\n", 10.0 * STEP / ((now_us() - t0) * 1e3));
  }

  /* the CPU alone: gather (and scatter) of 16 MiB, GB/s, median of 5 */
  size_t blks[] = {3072, 4096, 65536};
  int ts[] = {1, 2, 4, 8};
  for (size_t bi = 0; bi < 3; bi++) {
    BLK = blks[bi];
    pick_ids(1234567 + bi);
    size_t n = 16 * MB / BLK;
    for (g_nt = 0; g_nt < 2; g_nt++) {
      for (int direction = 0; direction < 2; direction++) {
        printf("cpu %6zu B %s %s:", BLK, g_nt ? "nt    " : "memcpy",
               direction ? "scatter" : "gather ");
        for (int t : ts) {
          std::vector<double> r;
          for (int it = 0; it < 5; it++) {
            double t0 = now_us();
            cpu_move(!direction, direction ? save_ids.data() : load_ids.data(), n, HS[0][0], t);
            r.push_back(16.0 * MB / ((now_us() - t0) * 1e3));
          }
          std::sort(r.begin(), r.end());
          printf("  %dt %5.1f", t, r[2]);
        }
        printf("\n");
      }
    }
  }
  fflush(stdout);

  /* the staged pipelines: load alone, save alone, both; GB/s over wall time */
  size_t chunks[] = {2 * MB, 8 * MB};
  int pts[] = {2, 4, 6, 8};
  printf("block  copy   chunk thr |  load  save  both | bytes\n");
  for (size_t bi = 0; bi < 3; bi++) {
    BLK = blks[bi];
    if (BLK == 3072)
      continue;
    pick_ids(7654321 + bi);
    for (g_nt = 0; g_nt < 2; g_nt++)
      for (size_t g : chunks)
        for (int t : pts) {
          g_chunk = g;
          g_threads = t;
          double l = run(1), s = run(2), b = run(3);
          printf("%6zu %s %3zuMiB %3d | %5.1f %5.1f %5.1f | %s\n", BLK, g_nt ? "nt    " : "memcpy",
                 g / MB, t, l, s, b, verify() ? "ok" : "WRONG");
          fflush(stdout);
        }
  }
  return 0;
}
