/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy_lab.cu - the experiments behind the copy kernel's launch shape: the
 * gather (host -> device) and scatter (device -> host) kernels over mapped
 * pinned memory with several CTA sizes, loads in flight and CTA counts,
 * alone and with traffic the other way (kernel or copy engine).
 * Not part of the build: nvcc -O3 -arch=sm_90 -o copy_lab copy_lab.cu
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
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

/* Loads with an L2 prefetch-size hint (HINT 1: 128 B, 2: 256 B, 0: none):
 * do larger L2 fills of host memory make fewer, larger read requests on
 * the link, leaving the upstream direction to the other way's writes? */
template <int HINT> __device__ __forceinline__ uint4 load16(const uint4 *p)
{
  uint4 r;
  if (HINT == 1)
    asm volatile("ld.global.nc.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  else if (HINT == 2)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  else
    r = *p;
  return r;
}

template <int U, int HINT = 0>
__global__ void copy_kernel(const uint64_t *__restrict__ src, const uint64_t *__restrict__ dst,
                            const uint64_t *__restrict__ len, uint32_t n, int fence)
{
  const unsigned lane = threadIdx.x & 31;
  const uint64_t warp = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const uint64_t warps = ((uint64_t)gridDim.x * blockDim.x) / 32;
  for (uint64_t first = warp; first < n; first += warps * 32) {
    uint64_t mine = first + lane * warps, s = 0, d = 0, l = 0;
    if (mine < n) {
      s = src[mine];
      d = dst[mine];
      l = len[mine];
    }
    for (unsigned k = 0; k < 32 && first + k * warps < n; k++) {
      const uint4 *sp = (const uint4 *)__shfl_sync(~0u, s, k);
      uint4 *dp = (uint4 *)__shfl_sync(~0u, d, k);
      uint64_t units = __shfl_sync(~0u, l, k) / 16;
      for (uint64_t base = 0; base < units; base += 32 * U) {
        uint4 r[U];
#pragma unroll
        for (int j = 0; j < U; j++) {
          uint64_t i = base + j * 32 + lane;
          if (i < units)
            r[j] = load16<HINT>(sp + i);
        }
#pragma unroll
        for (int j = 0; j < U; j++) {
          uint64_t i = base + j * 32 + lane;
          if (i < units)
            dp[i] = r[j];
        }
      }
    }
  }
  if (fence)
    __threadfence_system();
}

/* ---- the bulk-copy (TMA) variant: one warp per CTA drives a ring of
 * shared-memory stages; lane 0 issues cp.async.bulk loads into the ring
 * and bulk stores out of it. Addresses and sizes must be 16-byte multiples. */
static __device__ __forceinline__ uint32_t sm(const void *p)
{
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity)
{
  asm volatile("{\n .reg .pred p;\n W%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               " @!p bra W%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

struct rec {
  uint64_t src, dst, len;
};

template <int S, int CHUNK>
__global__ void __launch_bounds__(32)
    tma_kernel(const uint64_t *__restrict__ src, const uint64_t *__restrict__ dst,
               const uint64_t *__restrict__ len, uint32_t n, int fence)
{
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bars[S];
  __shared__ rec recs[2][32];
  const unsigned lane = threadIdx.x;
  uint32_t first = (uint32_t)(((uint64_t)n * blockIdx.x) / gridDim.x);
  uint32_t last = (uint32_t)(((uint64_t)n * (blockIdx.x + 1)) / gridDim.x);
  uint32_t mine = last - first;
  if (lane == 0) {
    for (int i = 0; i < S; i++)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sm(&bars[i])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (int g = 0; g < 2; g++) {
    uint32_t t = first + g * 32 + lane;
    if (g * 32 + lane < mine)
      recs[g][lane] = rec{src[t], dst[t], len[t]};
  }
  __syncwarp();
  uint32_t parity = 0; /* bit i: phase of stage i */
  for (uint32_t k = 0; k < mine && k < (uint32_t)S; k++) {
    if (lane == 0) {
      const rec &r = recs[(k / 32) & 1][k % 32];
      uint32_t bar = sm(&bars[k % S]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                   "r"((uint32_t)r.len)
                   : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                   "%2, [%3];" ::"r"(sm(ring + (k % S) * CHUNK)),
                   "l"(r.src), "r"((uint32_t)r.len), "r"(bar)
                   : "memory");
    }
  }
  for (uint32_t k = 0; k < mine; k++) {
    uint32_t st = k % S;
    if (lane == 0) {
      bar_wait(sm(&bars[st]), (parity >> st) & 1);
      const rec &r = recs[(k / 32) & 1][k % 32];
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(r.dst),
                   "r"(sm(ring + st * CHUNK)), "r"((uint32_t)r.len)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
    parity ^= 1u << st;
    uint32_t next = k - 1 + S;
    if (k >= 1 && next < mine && lane == 0) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      const rec &r = recs[(next / 32) & 1][next % 32];
      uint32_t ps = (k - 1) % S;
      uint32_t bar = sm(&bars[ps]);
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                   "r"((uint32_t)r.len)
                   : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                   "%2, [%3];" ::"r"(sm(ring + ps * CHUNK)),
                   "l"(r.src), "r"((uint32_t)r.len), "r"(bar)
                   : "memory");
    }
    __syncwarp();
    /* Group k/32 is finished with once store k (its last) was issued and
     * every load of the next group is at least issued: refill it. */
    if (k % 32 == 31) {
      uint32_t g = k / 32 + 2, t = first + g * 32 + lane;
      if (g * 32 + lane < mine)
        recs[g & 1][lane] = rec{src[t], dst[t], len[t]};
      __syncwarp();
    }
  }
  if (lane == 0)
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if (fence)
    __threadfence_system();
}

typedef void (*kern_t)(const uint64_t *, const uint64_t *, const uint64_t *, uint32_t, int);
struct variant {
  const char *name;
  int threads;
  kern_t k;
  int smem; /* dynamic shared memory (bulk-copy variants) */
};
static const variant VARIANTS[] = {
    {"256x4", 256, copy_kernel<4>, 0},
    {"512x4", 512, copy_kernel<4>, 0},
    {"512x8", 512, copy_kernel<8>, 0},
    {"1024x4", 1024, copy_kernel<4>, 0},
    {"tma8x16K", 32, tma_kernel<8, 16384>, 8 * 16384},
    {"tma12x16K", 32, tma_kernel<12, 16384>, 12 * 16384},
    {"tma16x8K", 32, tma_kernel<16, 8192>, 16 * 8192},
};

struct job {
  uint64_t *src, *dst, *len; /* pinned, mapped */
  uint32_t n;
  size_t bytes;
  int to_host;
};

static uint8_t *H, *D;
static const size_t HBYTES = 2ull << 30, DBYTES = 1ull << 30;

/* n random distinct host blocks of bs against contiguous device memory at
 * dev_off, each cut in pieces of at most `piece` bytes; to_host: device ->
 * host. */
static job make_job(size_t bs, uint32_t n, size_t dev_off, int to_host, unsigned seed, size_t piece)
{
  job j;
  size_t per = (bs + piece - 1) / piece;
  j.n = n * (uint32_t)per;
  j.bytes = bs * n;
  j.to_host = to_host;
  CK(cudaHostAlloc(&j.src, 3 * j.n * sizeof(uint64_t), cudaHostAllocMapped));
  j.dst = j.src + j.n;
  j.len = j.src + 2 * j.n;
  std::vector<uint32_t> ids(HBYTES / bs / 2);
  for (size_t i = 0; i < ids.size(); i++)
    ids[i] = (uint32_t)i * 2 + (to_host ? 1 : 0); /* saves and loads use other blocks */
  srand(seed);
  for (size_t i = ids.size() - 1; i > 0; i--)
    std::swap(ids[i], ids[(size_t)rand() % (i + 1)]);
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) {
    for (size_t off = 0; off < bs; off += piece, k++) {
      uint64_t h = (uint64_t)(uintptr_t)(H + (uint64_t)ids[i] * bs + off);
      uint64_t d = (uint64_t)(uintptr_t)(D + dev_off + (uint64_t)i * bs + off);
      j.src[k] = to_host ? d : h;
      j.dst[k] = to_host ? h : d;
      j.len[k] = std::min(piece, bs - off);
    }
  }
  return j;
}

static void CUDART_CB hold(void *)
{
  usleep(300);
}

/* Every piece of the job landed (checked after a run). */
static const char *verify(const job &j)
{
  static std::vector<uint8_t> tmp;
  for (uint32_t i = 0; i < j.n; i += 7) {
    tmp.resize(j.len[i]);
    const uint8_t *host = (const uint8_t *)(uintptr_t)(j.to_host ? j.dst[i] : j.src[i]);
    void *dev = (void *)(uintptr_t)(j.to_host ? j.src[i] : j.dst[i]);
    CK(cudaMemcpy(tmp.data(), dev, j.len[i], cudaMemcpyDeviceToHost));
    if (memcmp(tmp.data(), host, j.len[i]) != 0)
      return "BAD";
  }
  return "ok";
}

static cudaStream_t st[3];
static cudaEvent_t e0[2], e1[2], gate;

struct op {
  int kind; /* 0: kernel job, 1: contiguous copy engine */
  const job *j;
  const variant *v;
  int ctas;
  int to_host;
  size_t bytes;
  size_t dev_off;
};

static void issue(const op &o, int i)
{
  CK(cudaStreamWaitEvent(st[i], gate, 0));
  CK(cudaEventRecord(e0[i], st[i]));
  if (o.kind == 0) {
    o.v->k<<<o.ctas, o.v->threads, o.v->smem, st[i]>>>(o.j->src, o.j->dst, o.j->len, o.j->n,
                                                       o.j->to_host);
    CK(cudaGetLastError());
  } else if (o.to_host) {
    CK(cudaMemcpyAsync(H + (1ull << 30), D + o.dev_off, o.bytes, cudaMemcpyDeviceToHost, st[i]));
  } else {
    CK(cudaMemcpyAsync(D + o.dev_off, H, o.bytes, cudaMemcpyHostToDevice, st[i]));
  }
  CK(cudaEventRecord(e1[i], st[i]));
}

/* GB/s of one or two ops started together; median of 7 after 2 warm-ups.
 * rate[] gets each op's own rate. */
static double run(const op *ops, int n_ops, double *rate)
{
  std::vector<double> tot, r0, r1;
  for (int it = 0; it < 9; it++) {
    CK(cudaLaunchHostFunc(st[2], hold, nullptr));
    CK(cudaEventRecord(gate, st[2]));
    for (int i = 0; i < n_ops; i++)
      issue(ops[i], i);
    CK(cudaDeviceSynchronize());
    float ms[2] = {0, 0};
    for (int i = 0; i < n_ops; i++)
      CK(cudaEventElapsedTime(&ms[i], e0[i], e1[i]));
    if (it < 2)
      continue;
    size_t b0 = ops[0].kind == 0 ? ops[0].j->bytes : ops[0].bytes;
    size_t b1 = n_ops > 1 ? (ops[1].kind == 0 ? ops[1].j->bytes : ops[1].bytes) : 0;
    double mx = std::max(ms[0], ms[1]);
    tot.push_back((double)(b0 + b1) / (mx * 1e6));
    r0.push_back((double)b0 / (ms[0] * 1e6));
    r1.push_back(n_ops > 1 ? (double)b1 / (ms[1] * 1e6) : 0);
  }
  std::sort(tot.begin(), tot.end());
  std::sort(r0.begin(), r0.end());
  std::sort(r1.begin(), r1.end());
  rate[0] = r0[3];
  rate[1] = r1[3];
  return tot[3];
}

int main(int argc, char **argv)
{
  CK(cudaSetDevice(0));
  CK(cudaHostAlloc(&H, HBYTES, cudaHostAllocMapped));
  CK(cudaMalloc(&D, DBYTES));
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < HBYTES; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(H + i, &x, 8);
  }
  CK(cudaMemcpy(D, H + (1ull << 30), DBYTES, cudaMemcpyHostToDevice));
  for (int i = 0; i < 3; i++)
    CK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
  for (int i = 0; i < 2; i++) {
    CK(cudaEventCreate(&e0[i]));
    CK(cudaEventCreate(&e1[i]));
  }
  CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
  for (const variant &v : VARIANTS)
    if (v.smem > 0)
      CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
  double rt[2];
  const size_t MB64 = 64ull << 20;

  op ch2d = {1, nullptr, nullptr, 0, 0, MB64, 0},
     cd2h = {1, nullptr, nullptr, 0, 1, MB64, 256ull << 20};
  double a = run(&ch2d, 1, rt), b = run(&cd2h, 1, rt);
  op both[2] = {ch2d, cd2h};
  double c = run(both, 2, rt);
  printf("copy engine, contiguous 64 MiB: h2d %.1f  d2h %.1f  both %.1f (%.1f + %.1f)\n", a, b, c,
         rt[0], rt[1]);

  if (argc > 1 && strcmp(argv[1], "hints") == 0) {
    static const variant HV[] = {
        {"512x8", 512, copy_kernel<8, 0>, 0},
        {"512x8/128B", 512, copy_kernel<8, 1>, 0},
        {"512x8/256B", 512, copy_kernel<8, 2>, 0},
    };
    for (size_t bs : {(size_t)4096, (size_t)65536}) {
      uint32_t n = (uint32_t)(MB64 / bs);
      job g = make_job(bs, n, 0, 0, 1, bs), s = make_job(bs, n, 256ull << 20, 1, 2, bs);
      printf("\n%zu B blocks, %u scattered, 64 MiB each way (GB/s; both: total = load + save)\n",
             bs, n);
      for (const variant &v : HV)
        for (int ctas : {16, 32}) {
          op lo = {0, &g, &v, ctas, 0, 0, 0}, so = {0, &s, &HV[0], ctas, 1, 0, 0};
          double l = run(&lo, 1, rt), sv = run(&so, 1, rt);
          op bo[2] = {lo, so};
          double t = run(bo, 2, rt);
          printf("%-11s %4d | %6.1f %6.1f | %6.1f = %6.1f + %6.1f  %s %s\n", v.name, ctas, l, sv, t,
                 rt[0], rt[1], verify(g), verify(s));
          op mix[2] = {lo, cd2h};
          double m = run(mix, 2, rt);
          printf("    %s load/%d + copy-engine contiguous save: %.1f = %.1f + %.1f\n", v.name, ctas,
                 m, rt[0], rt[1]);
        }
      op so = {0, &s, &HV[0], 16, 1, 0, 0};
      op mix2[2] = {ch2d, so};
      double m2 = run(mix2, 2, rt);
      printf("copy-engine contiguous load + kernel save 512x8/16: %.1f = %.1f + %.1f\n", m2, rt[0],
             rt[1]);
    }
    return 0;
  }
  const size_t sizes[] = {4096, 65536};
  for (size_t bs : sizes) {
    uint32_t n = (uint32_t)(MB64 / bs);
    job g = make_job(bs, n, 0, 0, 1, bs), s = make_job(bs, n, 256ull << 20, 1, 2, bs);
    job gt = make_job(bs, n, 0, 0, 1, 8192), stt = make_job(bs, n, 256ull << 20, 1, 2, 8192);
    printf("\n%zu B blocks, %u scattered, 64 MiB each way (GB/s; both: total = load + save)\n", bs,
           n);
    printf("%-7s %4s | %6s %6s | %6s = %6s + %6s\n", "shape", "ctas", "load", "save", "both",
           "load", "save");
    for (const variant &v : VARIANTS) {
      for (int ctas : {8, 16, 32}) {
        const job *jg = v.smem ? &gt : &g, *js = v.smem ? &stt : &s;
        op lo = {0, jg, &v, ctas, 0, 0, 0}, so = {0, js, &v, ctas, 1, 0, 0};
        double l = run(&lo, 1, rt), sv = run(&so, 1, rt);
        op bo[2] = {lo, so};
        double t = run(bo, 2, rt);
        printf("%-9s %4d | %6.1f %6.1f | %6.1f = %6.1f + %6.1f  %s %s\n", v.name, ctas, l, sv, t,
               rt[0], rt[1], verify(*jg), verify(*js));
      }
    }
    const variant &v = VARIANTS[1];
    op lo = {0, &g, &v, 16, 0, 0, 0}, so = {0, &s, &v, 16, 1, 0, 0};
    op mix1[2] = {lo, cd2h}, mix2[2] = {ch2d, so};
    double m1 = run(mix1, 2, rt);
    printf("kernel load 512x4/16 + copy-engine save: %.1f = %.1f + %.1f\n", m1, rt[0], rt[1]);
    double m2 = run(mix2, 2, rt);
    printf("copy-engine load + kernel save 512x4/16: %.1f = %.1f + %.1f\n", m2, rt[0], rt[1]);
    for (int lc : {8, 32, 64}) {
      op l2 = {0, &g, &v, lc, 0, 0, 0}, s2 = {0, &s, &v, 16, 1, 0, 0};
      op mix3[2] = {l2, s2};
      double m3 = run(mix3, 2, rt);
      printf("kernel load 512x4/%d + kernel save 512x4/16: %.1f = %.1f + %.1f\n", lc, m3, rt[0],
             rt[1]);
    }
    const variant &tv = VARIANTS[4];
    op tl = {0, &gt, &tv, 16, 0, 0, 0}, ts = {0, &stt, &tv, 16, 1, 0, 0};
    op mix4[2] = {tl, so}, mix5[2] = {lo, ts}, mix6[2] = {tl, cd2h}, mix7[2] = {ch2d, ts};
    double m4 = run(mix4, 2, rt);
    printf("tma load/16 + kernel save 512x4/16: %.1f = %.1f + %.1f\n", m4, rt[0], rt[1]);
    double m5 = run(mix5, 2, rt);
    printf("kernel load 512x4/16 + tma save/16: %.1f = %.1f + %.1f\n", m5, rt[0], rt[1]);
    double m6 = run(mix6, 2, rt);
    printf("tma load/16 + copy-engine save: %.1f = %.1f + %.1f\n", m6, rt[0], rt[1]);
    double m7 = run(mix7, 2, rt);
    printf("copy-engine load + tma save/16: %.1f = %.1f + %.1f\n", m7, rt[0], rt[1]);
    for (int sc : {4, 8}) {
      op l2 = {0, &g, &v, 16, 0, 0, 0}, s2 = {0, &s, &v, sc, 1, 0, 0};
      op mix3[2] = {l2, s2};
      double m3 = run(mix3, 2, rt);
      printf("kernel load 512x4/16 + kernel save 512x4/%d: %.1f = %.1f + %.1f\n", sc, m3, rt[0],
             rt[1]);
    }
  }
  return 0;
}
