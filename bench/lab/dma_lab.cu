/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dma_lab.cu - why copy-engine batches of the two directions ran one after
 * the other in the plugin but side by side in the benchmark: both ways at
 * once, 64 MiB each, as 64 cuMemcpyBatchAsync descriptors of 1 MiB, with
 * the things that differ between the two varied one at a time.
 * Not part of the build: nvcc -O3 -arch=sm_90 -o dma_lab dma_lab.cu -lcuda
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
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

typedef CUresult (*batch_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                             size_t *, size_t, CUstream);
static batch_fn batch;
static const size_t MB = 1 << 20, STEP = 64 * MB;

static double now_us()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void enqueue(int to_host, uint8_t *host, uint8_t *dev, cudaStream_t s, int use_batch)
{
  std::vector<CUdeviceptr> src(64), dst(64);
  std::vector<size_t> len(64, MB);
  for (int i = 0; i < 64; i++) {
    /* scatter the 1 MiB pieces a little over the host buffer */
    uint8_t *h = host + (size_t)((i * 37) % 128) * MB;
    uint8_t *d = dev + (size_t)i * MB;
    src[i] = (CUdeviceptr)(to_host ? d : h);
    dst[i] = (CUdeviceptr)(to_host ? h : d);
  }
  if (!use_batch) {
    for (int i = 0; i < 64; i++)
      CK(cudaMemcpyAsync((void *)dst[i], (void *)src[i], MB, cudaMemcpyDefault, s));
    return;
  }
  CUmemcpyAttributes a = {};
  a.srcAccessOrder = to_host ? CU_MEMCPY_SRC_ACCESS_ORDER_STREAM : CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
  size_t idx = 0;
  if (batch(dst.data(), src.data(), len.data(), 64, &a, &idx, 1, (CUstream)s) != CUDA_SUCCESS) {
    fprintf(stderr, "batch failed\n");
    exit(1);
  }
}

/* Both ways at once: GB/s over the wall time, median of 7. */
static double both(uint8_t *hs, uint8_t *hl, uint8_t *ds, uint8_t *dl, cudaStream_t a,
                   cudaStream_t b, int use_batch)
{
  std::vector<double> r;
  for (int it = 0; it < 9; it++) {
    double t0 = now_us();
    enqueue(1, hs, ds, a, use_batch);
    enqueue(0, hl, dl, b, use_batch);
    CK(cudaStreamSynchronize(a));
    CK(cudaStreamSynchronize(b));
    double us = now_us() - t0;
    if (it >= 2)
      r.push_back(2.0 * STEP / (us * 1e3));
  }
  std::sort(r.begin(), r.end());
  return r[3];
}

static uint8_t *shm_map(const char *name, size_t bytes)
{
  int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0)
    exit(2);
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(name);
  if (p == MAP_FAILED)
    exit(3);
  for (size_t i = 0; i < bytes; i += 4096)
    ((uint8_t *)p)[i] = (uint8_t)i;
  return (uint8_t *)p;
}

int main()
{
  CK(cudaSetDevice(0));
  enum cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuMemcpyBatchAsync", (void **)&batch, 13000,
                                      cudaEnableDefault, &q));
  uint8_t *ds, *dl;
  CK(cudaMalloc(&ds, STEP));
  CK(cudaMalloc(&dl, STEP));
  CK(cudaMemset(ds, 1, STEP));
  uint8_t *h1 = shm_map("/dev/shm/dma-lab-1", 128 * MB),
          *h2 = shm_map("/dev/shm/dma-lab-2", 128 * MB);
  int least = 0, greatest = 0;
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t a, b, ha, hb;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithPriority(&ha, cudaStreamNonBlocking, greatest));
  CK(cudaStreamCreateWithPriority(&hb, cudaStreamNonBlocking, greatest));

  const unsigned flag_sets[3] = {cudaHostRegisterDefault, cudaHostRegisterMapped,
                                 cudaHostRegisterMapped | cudaHostRegisterPortable};
  const char *flag_names[3] = {"default", "mapped", "mapped|portable"};
  for (int f = 0; f < 3; f++) {
    CK(cudaHostRegister(h1, 128 * MB, flag_sets[f]));
    CK(cudaHostRegister(h2, 128 * MB, flag_sets[f]));
    printf(
        "register %-16s batch: %6.1f   memcpyAsync: %6.1f   batch, high-priority streams: %6.1f\n",
        flag_names[f], both(h1, h2, ds, dl, a, b, 1), both(h1, h2, ds, dl, a, b, 0),
        both(h1, h2, ds, dl, ha, hb, 1));
    CK(cudaHostUnregister(h1));
    CK(cudaHostUnregister(h2));
  }
  /* Both directions within one registration (the plugin's region is one). */
  uint8_t *h3 = shm_map("/dev/shm/dma-lab-3", 256 * MB);
  for (int f = 0; f < 3; f++) {
    CK(cudaHostRegister(h3, 256 * MB, flag_sets[f]));
    printf("one registration, %-16s batch: %6.1f\n", flag_names[f],
           both(h3, h3 + 128 * MB, ds, dl, a, b, 1));
    CK(cudaHostUnregister(h3));
  }
  CK(cudaHostRegister(h1, 128 * MB, flag_sets[2]));
  CK(cudaHostRegister(h2, 128 * MB, flag_sets[2]));
  /* Same two streams after many others were created in between. */
  std::vector<cudaStream_t> many(40);
  cudaStream_t c, d;
  for (int k = 0; k < 3; k++) {
    CK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
    for (auto &s : many)
      CK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, k == 0 ? least : greatest));
    CK(cudaStreamCreateWithFlags(&d, cudaStreamNonBlocking));
    printf("streams %d apart (%s in between): batch %6.1f\n", (int)many.size() + 1,
           k == 0 ? "default priority" : "high priority", both(h1, h2, ds, dl, c, d, 1));
    many.resize(many.size() / 2 - 1);
  }
  /* Streams created in pairs (kernel high priority, dma default), as the
   * plugin's slots do: the dma streams of slots 1 and 2. */
  cudaStream_t k1, s1, k2, s2;
  CK(cudaStreamCreateWithPriority(&k1, cudaStreamNonBlocking, greatest));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithPriority(&k2, cudaStreamNonBlocking, greatest));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  printf("slot-style pairs: batch %6.1f\n", both(h1, h2, ds, dl, s1, s2, 1));

  /* As the plugin orders them: each copy stream waits for an event recorded
   * on one compute stream, timing events around each batch, and the compute
   * stream then waits for the load. */
  cudaStream_t comp;
  cudaEvent_t g1, g2, st1, en1, st2, en2;
  CK(cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&g1, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&g2, cudaEventDisableTiming));
  CK(cudaEventCreate(&st1));
  CK(cudaEventCreate(&en1));
  CK(cudaEventCreate(&st2));
  CK(cudaEventCreate(&en2));
  for (int variant = 0; variant < 4; variant++) {
    std::vector<double> r;
    for (int it = 0; it < 9; it++) {
      double t0 = now_us();
      if (variant & 1) {
        CK(cudaEventRecord(g1, comp));
        CK(cudaStreamWaitEvent(s1, g1, 0));
      }
      if (variant & 2)
        CK(cudaEventRecord(st1, s1));
      enqueue(1, h1, ds, s1, 1);
      if (variant & 2)
        CK(cudaEventRecord(en1, s1));
      if (variant & 1) {
        CK(cudaEventRecord(g2, comp));
        CK(cudaStreamWaitEvent(s2, g2, 0));
      }
      if (variant & 2)
        CK(cudaEventRecord(st2, s2));
      enqueue(0, h2, dl, s2, 1);
      if (variant & 2)
        CK(cudaEventRecord(en2, s2));
      if (variant & 1)
        CK(cudaStreamWaitEvent(comp, en2, 0));
      CK(cudaStreamSynchronize(s1));
      CK(cudaStreamSynchronize(s2));
      if (it >= 2)
        r.push_back(2.0 * STEP / ((now_us() - t0) * 1e3));
    }
    std::sort(r.begin(), r.end());
    printf("plugin-style: gates %s, timing events %s: batch %6.1f\n", variant & 1 ? "yes" : "no",
           variant & 2 ? "yes" : "no", r[3]);
  }
  return 0;
}
