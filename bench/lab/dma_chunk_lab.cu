/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dma_chunk_lab.cu - whether a step's copy-engine batch should be enqueued
 * in one cuMemcpyBatchAsync or in several growing ones: the host cost of
 * one call against its descriptor count, then both directions at once
 * (64 MiB each way) with the batch split by the schedule the plugin uses
 * (a first call of up to LEAD bytes, then calls that each hold at most one
 * descriptor per UNIT bytes of the call before, at least twice as many) or
 * not split at all.
 * Not part of the build: nvcc -O3 -o dma_chunk_lab dma_chunk_lab.cu -lcuda
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <time.h>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>

#define CK(x) check((x), #x, __LINE__)
static void check(cudaError_t rc, const char *what, int line)
{
  if (rc != cudaSuccess) {
    fprintf(stderr, "line %d: %s: %s\n", line, what, cudaGetErrorString(rc));
    exit(1);
  }
}

static const size_t MB = 1 << 20, STEP = 64 * MB;

static double now_us()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double median(std::vector<double> v)
{
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct batch {
  std::vector<CUdeviceptr> src, dst;
  std::vector<size_t> len;
};

/* n descriptors of `piece` bytes, the host side scattered by a stride. */
static batch make(int to_host, uint8_t *host, size_t host_bytes, uint8_t *dev, size_t n,
                  size_t piece)
{
  batch b;
  size_t slots = host_bytes / piece;
  for (size_t i = 0; i < n; i++) {
    uint8_t *h = host + ((i * 7919) % slots) * piece;
    uint8_t *d = dev + i * piece;
    b.src.push_back((CUdeviceptr)(to_host ? d : h));
    b.dst.push_back((CUdeviceptr)(to_host ? h : d));
    b.len.push_back(piece);
  }
  return b;
}

static void call(batch &b, size_t from, size_t n, int to_host, cudaStream_t s)
{
  CUmemcpyAttributes a = {};
  a.srcAccessOrder = to_host ? CU_MEMCPY_SRC_ACCESS_ORDER_STREAM : CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  size_t idx = 0;
  if (cuMemcpyBatchAsync(&b.dst[from], &b.src[from], &b.len[from], n, &a, &idx, 1, (CUstream)s) !=
      CUDA_SUCCESS) {
    fprintf(stderr, "cuMemcpyBatchAsync failed\n");
    exit(1);
  }
}

/* lead 0: one call. Otherwise the growing schedule; returns the calls made. */
static int enqueue(batch &b, int to_host, cudaStream_t s, size_t lead, size_t unit)
{
  size_t n = b.len.size();
  if (lead == 0) {
    call(b, 0, n, to_host, s);
    return 1;
  }
  size_t at = 0, bytes = 0, k = 0, calls = 0;
  while (k < n && bytes < lead)
    bytes += b.len[k++];
  for (;;) {
    call(b, at, k, to_host, s);
    calls++;
    at += k;
    if (at == n)
      return (int)calls;
    size_t next = std::max(2 * k, (size_t)(bytes / unit));
    k = std::min(next, n - at);
    bytes = 0;
    for (size_t i = at; i < at + k; i++)
      bytes += b.len[i];
  }
}

int main()
{
  uint8_t *hs, *hl, *ds, *dl;
  size_t host_bytes = 256 * MB;
  CK(cudaHostAlloc((void **)&hs, host_bytes, cudaHostAllocDefault));
  CK(cudaHostAlloc((void **)&hl, host_bytes, cudaHostAllocDefault));
  CK(cudaMalloc((void **)&ds, STEP));
  CK(cudaMalloc((void **)&dl, STEP));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));

  printf("host cost of one call (us, median of 15), 64 MiB over n descriptors:\n");
  printf("%6s %10s %10s\n", "n", "save", "load");
  for (size_t n : {1, 2, 4, 16, 64, 256, 1024, 4096, 16384}) {
    double us[2];
    for (int d = 0; d < 2; d++) {
      batch x = make(d == 0, d == 0 ? hs : hl, host_bytes, d == 0 ? ds : dl, n, STEP / n);
      std::vector<double> t;
      for (int it = 0; it < 17; it++) {
        double t0 = now_us();
        call(x, 0, n, d == 0, d == 0 ? a : b);
        t.push_back(now_us() - t0);
        CK(cudaStreamSynchronize(d == 0 ? a : b));
      }
      us[d] = median(t);
    }
    printf("%6zu %10.1f %10.1f\n", n, us[0], us[1]);
  }

  printf("\nboth ways at once, 64 MiB each, GB/s over the wall time (median of 15):\n");
  printf("%8s %6s | %8s | %18s %18s %18s\n", "piece", "n", "one call", "lead 256K unit 64K",
         "lead 1M unit 64K", "lead 1M unit 256K");
  const size_t leads[3][2] = {{256 << 10, 64 << 10}, {1 << 20, 64 << 10}, {1 << 20, 256 << 10}};
  for (size_t piece : {(size_t)4096, (size_t)65536, (size_t)MB, 4 * MB}) {
    size_t n = STEP / piece;
    batch sv = make(1, hs, host_bytes, ds, n, piece), ld = make(0, hl, host_bytes, dl, n, piece);
    printf("%7zuK %6zu |", piece >> 10, n);
    for (int v = -1; v < 3; v++) {
      std::vector<double> r;
      int calls = 0;
      for (int it = 0; it < 17; it++) {
        double t0 = now_us();
        calls = enqueue(sv, 1, a, v < 0 ? 0 : leads[v][0], v < 0 ? 1 : leads[v][1]);
        enqueue(ld, 0, b, v < 0 ? 0 : leads[v][0], v < 0 ? 1 : leads[v][1]);
        CK(cudaStreamSynchronize(a));
        CK(cudaStreamSynchronize(b));
        if (it >= 2)
          r.push_back(2.0 * STEP / ((now_us() - t0) * 1e3));
      }
      if (v < 0)
        printf(" %8.1f |", median(r));
      else
        printf(" %10.1f (%2d calls)", median(r), calls);
    }
    printf("\n");
  }
  return 0;
}
