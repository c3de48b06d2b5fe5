/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plugin_both.c - both directions at once through the plugin (one connector,
 * then saves and loads on two), with and without a compute stream: how the
 * plugin's copy-engine batches of the two directions were found to run in
 * turn. Not part of the build:
 *   gcc -O2 -Ihost-shim -Iabi -I/usr/local/cuda/include bench/lab/plugin_both.c \
 *     -Lbuild/lib -lecc-host -L/usr/local/cuda/lib64 -lcudart -o plugin_both
 *   ./plugin_both build/lib/ecc/libecc-shm.so dma
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ecc_host.h"

static double now_us(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
  const char *plugin = argv[1], *method = argc > 2 ? argv[2] : "dma";
  char ini[] = "/tmp/pb-XXXXXX";
  int fd = mkstemp(ini);
  dprintf(fd,
          "[plugin]\npath = %s\n[connector]\nrole = both\n[region]\nname = pb%d\n"
          "block_size = 1MiB\nsize = 512MiB\n[engine]\ntype = cuda\nmethod = %s\n",
          plugin, (int)getpid(), method);
  close(fd);
  ecc_connector_t *c;
  char err[256];
  if (ecc_open(ini, NULL, &c, err, sizeof(err)) != ECC_OK) {
    printf("open: %s\n", err);
    return 1;
  }
  unlink(ini);
  uint8_t *ds, *dl;
  cudaMalloc((void **)&ds, 64 << 20);
  cudaMalloc((void **)&dl, 64 << 20);
  cudaStream_t comp;
  cudaStreamCreateWithFlags(&comp, cudaStreamNonBlocking);
  static uint32_t sid[64], lid[64];
  ecc_save_entry_t se[64];
  ecc_load_entry_t le[64];
  char keys[64][16];
  for (int i = 0; i < 64; i++) {
    sid[i] = (uint32_t)i * 3;
    lid[i] = (uint32_t)i * 3 + 1;
    snprintf(keys[i], 16, "k%d", i);
    se[i] = (ecc_save_entry_t){keys[i], (uint64_t)(uintptr_t)(ds + ((size_t)i << 20)), 1 << 20,
                               &sid[i], 1};
    le[i] = (ecc_load_entry_t){(uint64_t)i, &lid[i], 1,
                               (uint64_t)(uintptr_t)(dl + ((size_t)i << 20)), 1 << 20};
  }
  for (int variant = 0; variant < 4; variant++) {
    void *s_save = variant & 1 ? comp : NULL, *s_load = variant & 2 ? comp : NULL;
    double best = 0;
    for (int it = 0; it < 8; it++) {
      double t0 = now_us();
      ecc_save(c, se, 64);
      ecc_flush(c, s_save);
      ecc_load(c, le, 64, s_load);
      size_t got = 0;
      ecc_completion_t done[128];
      while (got < 128) {
        size_t n = 0;
        ecc_poll(c, done, 128, &n);
        got += n;
      }
      double gbs = 2.0 * (64 << 20) / ((now_us() - t0) * 1e3);
      if (it >= 2 && gbs > best)
        best = gbs;
      cudaStreamSynchronize(comp);
    }
    printf("plugin %s both: save stream %s, load stream %s: %.1f GB/s (best of 6)\n", method,
           s_save ? "compute" : "NULL", s_load ? "compute" : "NULL", best);
  }
  /* Saves on this connector, loads on a second one over another region. */
  char ini2[] = "/tmp/pb-XXXXXX";
  fd = mkstemp(ini2);
  dprintf(fd,
          "[plugin]\npath = %s\n[connector]\nrole = both\n[region]\nname = pc%d\n"
          "block_size = 1MiB\nsize = 512MiB\n[engine]\ntype = cuda\nmethod = %s\n",
          plugin, (int)getpid(), method);
  close(fd);
  ecc_connector_t *c2;
  if (ecc_open(ini2, NULL, &c2, err, sizeof(err)) != ECC_OK) {
    printf("open: %s\n", err);
    return 1;
  }
  unlink(ini2);
  double best = 0;
  for (int it = 0; it < 8; it++) {
    double t0 = now_us();
    ecc_save(c, se, 64);
    ecc_flush(c, comp);
    ecc_load(c2, le, 64, comp);
    size_t got = 0, got2 = 0;
    ecc_completion_t done[128];
    while (got < 64 || got2 < 64) {
      size_t n = 0;
      ecc_poll(c, done, 128, &n);
      got += n;
      ecc_poll(c2, done, 128, &n);
      got2 += n;
    }
    double gbs = 2.0 * (64 << 20) / ((now_us() - t0) * 1e3);
    if (it >= 2 && gbs > best)
      best = gbs;
    cudaStreamSynchronize(comp);
  }
  printf("plugin %s both, save and load on two connectors: %.1f GB/s\n", method, best);
  ecc_close(c2);
  ecc_close(c);
  return 0;
}
