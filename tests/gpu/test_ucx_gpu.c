/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_ucx_gpu.c - libecc-ucx.so's client with the CUDA engine: a pulled
 * entry lands in device memory in the order of the caller's stream (work
 * queued after load_pinned sees the bytes, however late they arrive), a
 * second load is served from the client's region, and a server that stops
 * or dies releases the held stream with a failed completion, without the
 * host polling first. The server runs in its own process with the host
 * engine. Every test skips where no CUDA device is present.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ecc_host.h"
#include "tests/gpu/gpu_kernels.h"
#include "tests/helpers.h"

#define BS (64u << 10)
#define SEED 41u

static const uint64_t sizes[] = {(1u << 20) + 3, (24u << 20) + 7};

static void need_gpu(void)
{
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    (void)cudaGetLastError();
    cr_skip("no CUDA device: GPU tests skipped");
  }
}

static void ck(cudaError_t rc, const char *what)
{
  cr_assert_eq(rc, cudaSuccess, "%s: %s", what, cudaGetErrorString(rc));
}

static const char *ucx_ini(const char *role, const char *engine, uint16_t port, const char *extra)
{
  return th_ini_text("[plugin]\npath = %s\nlog_level = error\n\n"
                     "[region]\nname = %s\nblock_size = %u\nsize = %llu\n\n"
                     "[engine]\ntype = %s\n\n[directory]\nenabled = true\n\n"
                     "[ucx]\nrole = %s\naddress = 127.0.0.1:%u\n%s",
                     ECC_UCX_PLUGIN_PATH, th_region_name(), BS, (unsigned long long)BS * 1024,
                     engine, role, port, extra ? extra : "");
}

/* ---- the server: its own process, the host engine ---- */

static int produce(ecc_connector_t *srv, const char *key, uint64_t nbytes)
{
  uint8_t *src = malloc(nbytes);
  if (src == NULL)
    return -1;
  for (uint64_t i = 0; i < nbytes; i++)
    src[i] = tk_byte(SEED, i);
  ecc_entry_t e;
  ecc_completion_t done;
  size_t n = 0;
  int ok = ecc_reserve(srv, key, nbytes, &e) == ECC_OK && e.state == ECC_ENTRY_RESERVED;
  ecc_save_reserved_t s = {e.token, (uint64_t)(uintptr_t)src, nbytes};
  ok = ok && ecc_save_reserved(srv, &s, 1) == ECC_OK && ecc_flush(srv, NULL) == ECC_OK;
  for (int t = 0; ok && n == 0 && t < 10000; t++)
    if (ecc_poll(srv, &done, 1, &n) != ECC_OK || n == 0)
      usleep(1000);
  free(src);
  return ok && n == 1 && done.status == ECC_OK ? 0 : -1;
}

__attribute__((constructor)) static void server_child(void)
{
  const char *role, *ini;
  int unused, ready;
  if (!th_child_args(&role, &ini, &unused, &ready) || strcmp(role, "ucx-gpu-server") != 0)
    return;
  ecc_connector_t *srv = NULL;
  char err[512];
  if (ecc_open(ini, NULL, &srv, err, sizeof(err)) != ECC_OK)
    _exit(2);
  char key[16];
  for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    snprintf(key, sizeof(key), "g-%u", i);
    if (produce(srv, key, sizes[i]) != 0)
      _exit(3);
  }
  if (write(ready, "r", 1) != 1)
    _exit(4);
  for (;;)
    pause();
}

static pid_t start_server(uint16_t port)
{
  int ready[2];
  cr_assert_eq(pipe2(ready, O_CLOEXEC), 0);
  pid_t pid = th_spawn_self("ucx-gpu-server", ucx_ini("server", "host", port, NULL), -1, ready[1]);
  close(ready[1]);
  char c;
  cr_assert_eq(read(ready[0], &c, 1), 1, "the server did not start");
  close(ready[0]);
  return pid;
}

/* pid 0: stopped already. */
static void stop_server(pid_t pid)
{
  if (pid <= 0)
    return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* ---- the client ---- */

static ecc_connector_t *open_client(uint16_t port, const char *extra)
{
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ucx_ini("client", "cuda", port, extra), NULL, &c, err, sizeof(err));
  cr_assert_eq(rc, ECC_OK, "client: %d %s", rc, err);
  return c;
}

static uint64_t lookup_one(ecc_connector_t *c, const char *key)
{
  const char *keys[] = {key};
  ecc_entry_t e;
  cr_assert_eq(ecc_lookup(c, keys, 1, 1, &e), ECC_OK, "lookup %s", key);
  cr_assert_eq(e.state, ECC_ENTRY_READY, "%s: state %d", key, e.state);
  return e.token;
}

static uint64_t wrong_bytes(const uint8_t *host, uint64_t n)
{
  uint64_t bad = 0;
  for (uint64_t i = 0; i < n; i++)
    bad += host[i] != tk_byte(SEED, i);
  return bad;
}

/* load_pinned on `s`, then the bytes read back on `s` right after it. */
static void load_and_read_back(ecc_connector_t *c, uint64_t token, uint64_t id, void *dst,
                               uint8_t *host, uint64_t n, cudaStream_t s)
{
  ecc_load_pinned_t lp = {id, token, (uint64_t)(uintptr_t)dst, n};
  cr_assert_eq(ecc_load_pinned(c, &lp, 1, s), ECC_OK);
  ck(cudaMemcpyAsync(host, dst, n, cudaMemcpyDeviceToHost, s), "read back");
}

static ecc_completion_t one_completion(ecc_connector_t *c)
{
  ecc_completion_t done;
  cr_assert_eq(th_poll_until(c, &done, 1, 10000), 1u, "no completion");
  return done;
}

static uint32_t pins_on(ecc_connector_t *c, const char *key)
{
  ecc_listed_t l[16];
  uint64_t cursor = 0;
  size_t n = 0;
  uint32_t pins = UINT32_MAX;
  do {
    cr_assert_eq(ecc_list(c, &cursor, l, 16, &n), ECC_OK);
    for (size_t i = 0; i < n; i++)
      if (strcmp(l[i].key, key) == 0)
        pins = l[i].pins;
  } while (n > 0 && cursor != 0);
  return pins;
}

/* A server process, a client with the CUDA engine, a stream of the
 * caller's, and room for the larger entry on the device and in pinned
 * host memory (where it is read back). */
struct rig {
  pid_t pid;
  ecc_connector_t *c;
  cudaStream_t s;
  void *dst;
  uint8_t *host;
};

static void rig_up(struct rig *r, const char *client_extra)
{
  need_gpu();
  uint16_t port = th_free_port();
  r->pid = start_server(port);
  r->c = open_client(port, client_extra);
  ck(cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking), "stream");
  ck(cudaMalloc(&r->dst, sizes[1]), "cudaMalloc");
  ck(cudaMallocHost((void **)&r->host, sizes[1]), "cudaMallocHost");
  ck(cudaMemset(r->dst, 0, sizes[1]), "memset");
  ck(cudaDeviceSynchronize(), "memset");
}

/* The server is killed here if the test has not already. */
static void rig_down(struct rig *r)
{
  cr_assert_eq(ecc_close(r->c), ECC_OK);
  stop_server(r->pid);
  cudaFreeHost(r->host);
  cudaFree(r->dst);
  cudaStreamDestroy(r->s);
}

Test(ucx_gpu, a_pulled_entry_lands_in_device_memory_in_stream_order, .timeout = 120)
{
  struct rig r;
  rig_up(&r, "deadline_ms = 3000\n");
  uint64_t n = sizes[1];

  /* The server is stopped: the bytes come only after the read back was
   * queued, and the stream must wait for them. */
  uint64_t token = lookup_one(r.c, "g-1");
  kill(r.pid, SIGSTOP);
  load_and_read_back(r.c, token, 5, r.dst, r.host, n, r.s);
  usleep(300000);
  cr_expect_eq(cudaStreamQuery(r.s), cudaErrorNotReady, "the stream ran before the bytes came");
  kill(r.pid, SIGCONT);
  ck(cudaStreamSynchronize(r.s), "sync");
  cr_expect_eq(wrong_bytes(r.host, n), 0u, "bytes read back after the load are wrong");
  ecc_completion_t done = one_completion(r.c);
  cr_expect_eq(done.transfer_id, 5u);
  cr_expect_eq(done.status, ECC_OK);
  cr_expect_eq(done.nbytes, n);
  cr_expect_eq(pins_on(r.c, "g-1"), 0u, "the client's copy is missing or still pinned");

  /* The second load is served from the client's region. */
  memset(r.host, 0, n);
  ck(cudaMemset(r.dst, 0, n), "memset");
  ck(cudaDeviceSynchronize(), "memset");
  load_and_read_back(r.c, lookup_one(r.c, "g-1"), 6, r.dst, r.host, n, r.s);
  ck(cudaStreamSynchronize(r.s), "sync");
  cr_expect_eq(wrong_bytes(r.host, n), 0u, "bytes of the kept copy are wrong");
  done = one_completion(r.c);
  cr_expect_eq(done.transfer_id, 6u);
  cr_expect_eq(done.status, ECC_OK);

  /* A small entry, on the legacy default stream (NULL). */
  uint64_t small = sizes[0];
  memset(r.host, 0, small);
  ecc_load_pinned_t lp = {7, lookup_one(r.c, "g-0"), (uint64_t)(uintptr_t)r.dst, n};
  cr_assert_eq(ecc_load_pinned(r.c, &lp, 1, NULL), ECC_OK);
  ck(cudaMemcpyAsync(r.host, r.dst, small, cudaMemcpyDeviceToHost, cudaStreamLegacy), "read back");
  ck(cudaStreamSynchronize(cudaStreamLegacy), "sync");
  cr_expect_eq(wrong_bytes(r.host, small), 0u, "bytes on the legacy stream are wrong");
  done = one_completion(r.c);
  cr_expect_eq(done.status, ECC_OK);
  rig_down(&r);
}

/* The server stops, then dies, while a load is held: each time the stream
 * goes on (the host only waits for it, polls afterwards) and the load
 * fails; the client keeps no copy. */
Test(ucx_gpu, a_stopped_or_killed_server_releases_the_stream_with_an_error, .timeout = 120)
{
  struct rig r;
  rig_up(&r, "deadline_ms = 300\n");
  uint64_t n = sizes[1];

  uint64_t token = lookup_one(r.c, "g-1");
  kill(r.pid, SIGSTOP);
  uint64_t t0 = th_now_ns();
  load_and_read_back(r.c, token, 8, r.dst, r.host, n, r.s);
  ck(cudaStreamSynchronize(r.s), "sync");
  double waited = (double)(th_now_ns() - t0) / 1e9;
  cr_expect_lt(waited, 5.0, "the stream waited %.1f s for a stopped server", waited);
  ecc_completion_t done = one_completion(r.c);
  cr_expect_eq(done.transfer_id, 8u);
  cr_expect_eq(done.status, ECC_ERR_TRANSFER, "a load from a stopped server: status %d",
               done.status);
  cr_expect_eq(pins_on(r.c, "g-1"), UINT32_MAX, "a failed pull was kept in the client's directory");

  /* The server resumes; the next lookup makes a new link. Then it dies. */
  kill(r.pid, SIGCONT);
  token = lookup_one(r.c, "g-1");
  stop_server(r.pid);
  r.pid = 0;
  ecc_load_pinned_t lp = {9, token, (uint64_t)(uintptr_t)r.dst, n};
  int rc = ecc_load_pinned(r.c, &lp, 1, r.s);
  if (rc == ECC_OK) {
    ck(cudaStreamSynchronize(r.s), "sync");
    done = one_completion(r.c);
    cr_expect_eq(done.transfer_id, 9u);
    cr_expect_eq(done.status, ECC_ERR_TRANSFER, "a load from a killed server: status %d",
                 done.status);
  } else {
    cr_expect_eq(rc, ECC_ERR_TRANSFER, "load_pinned after the server died: %d", rc);
  }
  rig_down(&r);
}

Test(ucx_gpu, the_cuda_engine_without_the_cache_is_refused_by_name)
{
  need_gpu();
  uint16_t port = th_free_port();
  pid_t pid = start_server(port);
  char err[512] = "";
  ecc_connector_t *c = NULL;
  int rc = ecc_open(ucx_ini("client", "cuda", port, "cache = false\n"), NULL, &c, err, sizeof(err));
  cr_expect_eq(rc, ECC_ERR_CONFIG);
  cr_expect(strstr(err, "ucx.cache = false") != NULL, "error: %s", err);
  cr_expect_null(c);
  stop_server(pid);
}
