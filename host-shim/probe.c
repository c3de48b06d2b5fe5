/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe.c - runs plugin code in a forked child and carries its report back
 * over a pipe in a fixed, length-prefixed form. The parent bounds every
 * length it reads (the plugin's code ran where the bytes were made), waits
 * with a deadline, and says how a child that sent no report ended.
 */
#include "host-shim/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host-shim/shim_err.h"
#include "host-shim/shim_names.h"

/* "ECC1": the first word of every report. */
#define REPORT_MAGIC 0x31434345u
/* The length word of a NULL string. */
#define NULL_TEXT 0xffffffffu
/* Bound of a report's payload: the message, the meta and PROBE_PARAMS_MAX
 * params of three PROBE_TEXT_MAX strings all fit below it. */
#define REPORT_BYTES_MAX (4u << 20)
/* The child's exit status when its own setup or sending fails. */
#define CHILD_FAILED 125

/* ---- the report as bytes, written in the child ---- */

struct out_buf {
  unsigned char *data;
  size_t len, cap;
  bool failed; /* out of memory: nothing is sent */
};

static void put_bytes(struct out_buf *b, const void *p, size_t n)
{
  if (b->failed)
    return;
  if (b->cap - b->len < n) {
    size_t cap = b->cap != 0 ? b->cap : 4096;
    while (cap - b->len < n)
      cap *= 2;
    unsigned char *grown = realloc(b->data, cap);
    if (grown == NULL) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void put_u32(struct out_buf *b, uint32_t v)
{
  put_bytes(b, &v, sizeof(v));
}

/* A length word and at most max - 1 bytes of s; NULL_TEXT for NULL. */
static void put_text(struct out_buf *b, const char *s, size_t max)
{
  if (s == NULL) {
    put_u32(b, NULL_TEXT);
    return;
  }
  size_t len = strnlen(s, max - 1);
  put_u32(b, (uint32_t)len);
  put_bytes(b, s, len);
}

static void put_meta(struct out_buf *b, const ecc_plugin_meta_t *m)
{
  put_text(b, m->path, sizeof(m->path));
  put_text(b, m->name, sizeof(m->name));
  put_text(b, m->version, sizeof(m->version));
  put_u32(b, m->abi_major);
  put_u32(b, m->abi_minor);
  put_u32(b, m->negotiated_minor);
  put_u32(b, m->caps);
  size_t n = m->n_params < PROBE_PARAMS_MAX ? m->n_params : PROBE_PARAMS_MAX;
  put_u32(b, (uint32_t)n);
  for (size_t i = 0; i < n; i++) {
    put_text(b, m->params[i].key, PROBE_TEXT_MAX);
    put_text(b, m->params[i].default_value, PROBE_TEXT_MAX);
    put_text(b, m->params[i].help, PROBE_TEXT_MAX);
  }
}

/* The magic, the payload's length, then the payload. */
static void encode(struct out_buf *b, const struct probe_report *r)
{
  put_u32(b, REPORT_MAGIC);
  put_u32(b, 0); /* the payload's length, filled in below */
  put_u32(b, (uint32_t)r->status);
  put_text(b, r->message, sizeof(r->message));
  put_u32(b, r->has_meta ? 1 : 0);
  if (r->has_meta)
    put_meta(b, &r->meta);
  if (!b->failed) {
    uint32_t payload = (uint32_t)(b->len - 2 * sizeof(uint32_t));
    memcpy(b->data + sizeof(uint32_t), &payload, sizeof(payload));
  }
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* ---- the child ---- */

static void exit_at_once(int status, void *arg)
{
  (void)arg;
  _exit(status);
}

/* The child is a copy of the caller, whose signal handlers, blocked signals
 * and exit handlers must not act for the plugin (a crash handler would
 * report a crash of the host; an exit handler could remove the host's
 * files). exit() in the plugin's code runs exit_at_once first, since exit
 * handlers run last registered first, and it ends the process at once. */
static void child_setup(pid_t parent)
{
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
    _exit(CHILD_FAILED);
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; sig++) {
    /* Refused only for the signals the C library keeps for itself. */
    if (sig != SIGKILL && sig != SIGSTOP)
      (void)sigaction(sig, &dfl, NULL);
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) != 0 || on_exit(exit_at_once, NULL) != 0)
    _exit(CHILD_FAILED);
}

/* Never returns. Nothing is freed or unloaded: the process ends. */
static void child_main(probe_job job, void *arg, int fd, pid_t parent)
{
  child_setup(parent);
  struct probe_report *r = calloc(1, sizeof(*r));
  if (r == NULL)
    _exit(CHILD_FAILED);
  job(arg, r);
  struct out_buf b = {.data = NULL, .len = 0, .cap = 0, .failed = false};
  encode(&b, r);
  if (b.failed || write_all(fd, b.data, b.len) != 0)
    _exit(CHILD_FAILED);
  _exit(0);
}

/* ---- waiting, in the parent ---- */

static uint64_t now_ns(void)
{
  struct timespec ts;
  /* CLOCK_MONOTONIC does not fail; if it did, every deadline has passed. */
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    return UINT64_MAX;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds until deadline, rounded up; 0 once it has passed. */
static int ms_left(uint64_t deadline)
{
  uint64_t now = now_ns();
  if (now >= deadline)
    return 0;
  uint64_t ms = (deadline - now + 999999) / 1000000;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

enum rx_state { RX_DONE, RX_EOF, RX_TIMEOUT, RX_ERROR, RX_BAD };

static enum rx_state read_exact(int fd, unsigned char *p, size_t n, uint64_t deadline, int *err_no)
{
  size_t have = 0;
  while (have < n) {
    int ms = ms_left(deadline);
    if (ms == 0)
      return RX_TIMEOUT;
    struct pollfd pfd = {.fd = fd, .events = POLLIN, .revents = 0};
    int ready = poll(&pfd, 1, ms);
    if (ready < 0 && errno != EINTR) {
      *err_no = errno;
      return RX_ERROR;
    }
    if (ready <= 0)
      continue;
    ssize_t got = read(fd, p + have, n - have);
    if (got == 0)
      return RX_EOF;
    if (got < 0 && errno != EINTR && errno != EAGAIN) {
      *err_no = errno;
      return RX_ERROR;
    }
    if (got > 0)
      have += (size_t)got;
  }
  return RX_DONE;
}

struct received {
  enum rx_state state;
  int err_no;             /* for RX_ERROR */
  const char *bad;        /* for RX_BAD: what was wrong with the header */
  unsigned char *payload; /* malloc'd, len bytes */
  size_t len;
};

static void receive(int fd, uint64_t deadline, struct received *rx)
{
  uint32_t head[2];
  rx->state = read_exact(fd, (unsigned char *)head, sizeof(head), deadline, &rx->err_no);
  if (rx->state != RX_DONE)
    return;
  if (head[0] != REPORT_MAGIC || head[1] > REPORT_BYTES_MAX) {
    rx->state = RX_BAD;
    rx->bad = head[0] != REPORT_MAGIC ? "it does not start as one" : "it is too long";
    return;
  }
  rx->len = head[1];
  rx->payload = malloc(rx->len != 0 ? rx->len : 1);
  if (rx->payload == NULL) {
    rx->state = RX_ERROR;
    rx->err_no = ENOMEM;
    return;
  }
  rx->state = read_exact(fd, rx->payload, rx->len, deadline, &rx->err_no);
}

/* Waits for the child until deadline, then kills it (*killed). Returns 0
 * with *wstatus, or -1 with errno: ECHILD when something else in this
 * process reaped it (SIGCHLD ignored, or a handler that reaps all). */
static int reap(pid_t pid, uint64_t deadline, int *wstatus, bool *killed)
{
  *killed = false;
  for (;;) {
    pid_t r = waitpid(pid, wstatus, WNOHANG);
    if (r == pid)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
    if (r == 0 && ms_left(deadline) == 0)
      break;
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 1000000};
    (void)nanosleep(&nap, NULL); /* an interrupted nap only shortens the wait */
  }
  *killed = true;
  if (kill(pid, SIGKILL) != 0)
    return -1;
  for (;;) {
    pid_t r = waitpid(pid, wstatus, 0);
    if (r == pid)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
  }
}

/* ---- the report as bytes, read in the parent ---- */

struct in_buf {
  const unsigned char *p;
  size_t left;
  const char *bad; /* the first field found malformed */
};

static uint32_t get_u32(struct in_buf *b, const char *field)
{
  uint32_t v = 0;
  if (b->bad != NULL)
    return 0;
  if (b->left < sizeof(v)) {
    b->bad = field;
    return 0;
  }
  memcpy(&v, b->p, sizeof(v));
  b->p += sizeof(v);
  b->left -= sizeof(v);
  return v;
}

/* A string of fewer than max bytes and no NUL, left in the buffer; NULL
 * for a NULL string (malformed unless nullable) or a malformed one. */
static const unsigned char *get_text(struct in_buf *b, size_t max, bool nullable, const char *field,
                                     uint32_t *len)
{
  *len = get_u32(b, field);
  if (b->bad != NULL)
    return NULL;
  if (*len == NULL_TEXT) {
    if (!nullable)
      b->bad = field;
    return NULL;
  }
  if (*len >= max || *len > b->left || memchr(b->p, '\0', *len) != NULL) {
    b->bad = field;
    return NULL;
  }
  const unsigned char *s = b->p;
  b->p += *len;
  b->left -= *len;
  return s;
}

/* Into an array of cap bytes; get_text keeps the length below cap. */
static void get_into(struct in_buf *b, char *dst, size_t cap, const char *field)
{
  uint32_t len;
  const unsigned char *s = get_text(b, cap, false, field, &len);
  if (s != NULL) {
    memcpy(dst, s, len);
    dst[len] = '\0';
  }
}

static const char *pool_add(char **pool, const unsigned char *s, uint32_t len)
{
  if (s == NULL)
    return NULL;
  char *out = *pool;
  memcpy(out, s, len);
  out[len] = '\0';
  *pool += (size_t)len + 1;
  return out;
}

static void get_params(struct in_buf *b, uint32_t n, ecc_param_t *params, char *pool)
{
  for (uint32_t i = 0; i < n && b->bad == NULL; i++) {
    uint32_t kl, dl, hl;
    const unsigned char *k = get_text(b, PROBE_TEXT_MAX, false, "a param's key", &kl);
    const unsigned char *d = get_text(b, PROBE_TEXT_MAX, true, "a param's default", &dl);
    const unsigned char *h = get_text(b, PROBE_TEXT_MAX, true, "a param's help", &hl);
    if (b->bad != NULL)
      break;
    params[i].key = pool_add(&pool, k, kl);
    params[i].default_value = pool_add(&pool, d, dl);
    params[i].help = pool_add(&pool, h, hl);
  }
}

/* The meta, its params and their strings in one block: the strings take
 * no more than the bytes left in the payload, plus a NUL each. */
static int get_meta(struct in_buf *b, ecc_plugin_meta_t **out)
{
  ecc_plugin_meta_t head;
  memset(&head, 0, sizeof(head));
  get_into(b, head.path, sizeof(head.path), "the plugin's path");
  get_into(b, head.name, sizeof(head.name), "the plugin's name");
  get_into(b, head.version, sizeof(head.version), "the plugin's version");
  head.abi_major = get_u32(b, "the ABI major");
  head.abi_minor = get_u32(b, "the ABI minor");
  head.negotiated_minor = get_u32(b, "the negotiated minor");
  head.caps = get_u32(b, "the capabilities");
  uint32_t n = get_u32(b, "the number of params");
  if (b->bad == NULL && n > PROBE_PARAMS_MAX)
    b->bad = "the number of params";
  if (b->bad != NULL)
    return ECC_OK;
  size_t pool = b->left + 3 * (size_t)n;
  ecc_plugin_meta_t *m = malloc(sizeof(*m) + n * sizeof(ecc_param_t) + pool);
  if (m == NULL)
    return ECC_ERR_NOMEM;
  *m = head;
  ecc_param_t *params = (ecc_param_t *)(m + 1);
  m->params = n != 0 ? params : NULL;
  m->n_params = n;
  get_params(b, n, params, (char *)(params + n));
  if (b->bad != NULL)
    free(m);
  else
    *out = m;
  return ECC_OK;
}

int probe_decode(const unsigned char *payload, size_t len, const char *subject, int *status,
                 ecc_plugin_meta_t **meta, char *err, size_t err_cap)
{
  struct in_buf b = {.p = payload, .left = len, .bad = NULL};
  int32_t st = (int32_t)get_u32(&b, "the status");
  uint32_t msg_len;
  const unsigned char *msg = get_text(&b, PROBE_MESSAGE_MAX, false, "the message", &msg_len);
  uint32_t has_meta = get_u32(&b, "the meta flag");
  if (b.bad == NULL && !shim_status_known(st))
    b.bad = "the status";
  if (b.bad == NULL && has_meta > 1)
    b.bad = "the meta flag";
  ecc_plugin_meta_t *m = NULL;
  if (b.bad == NULL && has_meta == 1 && get_meta(&b, &m) != ECC_OK) {
    shim_errf(err, err_cap, "%s: out of memory for the check process's report", subject);
    return ECC_ERR_NOMEM;
  }
  if (b.bad == NULL && b.left != 0)
    b.bad = "its length";
  if (b.bad != NULL) {
    free(m);
    shim_errf(err, err_cap, "%s: the check process sent a malformed report (%s)", subject, b.bad);
    return ECC_ERR_INCOMPATIBLE;
  }
  shim_errf(err, err_cap, "%.*s", (int)msg_len, (const char *)msg);
  *status = st;
  if (meta != NULL)
    *meta = m;
  else
    free(m);
  return ECC_OK;
}

/* ---- running it ---- */

/* "exited with status 3", "was killed by signal 11 (SIGSEGV: ...)". */
static void describe_end(int wstatus, char *buf, size_t cap)
{
  if (WIFEXITED(wstatus)) {
    snprintf(buf, cap, "exited with status %d", WEXITSTATUS(wstatus));
    return;
  }
  if (!WIFSIGNALED(wstatus)) {
    snprintf(buf, cap, "ended with wait status %#x", (unsigned)wstatus);
    return;
  }
  int sig = WTERMSIG(wstatus);
  const char *abbrev = sigabbrev_np(sig), *descr = sigdescr_np(sig);
  if (abbrev != NULL && descr != NULL)
    snprintf(buf, cap, "was killed by signal %d (SIG%s: %s)", sig, abbrev, descr);
  else
    snprintf(buf, cap, "was killed by signal %d", sig);
}

static int judge(pid_t pid, const struct received *rx, uint64_t deadline, uint64_t timeout_ms,
                 const char *subject, int *status, ecc_plugin_meta_t **meta, char *err,
                 size_t err_cap)
{
  int wstatus = 0;
  bool killed = false;
  /* A child that used up its time is killed at once. */
  int reaped = reap(pid, rx->state == RX_TIMEOUT ? 0 : deadline, &wstatus, &killed);
  int reap_errno = errno;
  if (killed || rx->state == RX_TIMEOUT) {
    shim_errf(err, err_cap,
              "%s: the check process did not finish loading and validating the plugin within "
              "%llu ms; it was killed",
              subject, (unsigned long long)timeout_ms);
    return ECC_ERR_INCOMPATIBLE;
  }
  if (reaped != 0 && !(reap_errno == ECHILD && rx->state == RX_DONE)) {
    shim_errf(err, err_cap, "%s: cannot learn how the check process ended: %s", subject,
              strerror(reap_errno));
    return ECC_ERR_SYSTEM;
  }
  if (rx->state == RX_ERROR) {
    shim_errf(err, err_cap, "%s: cannot read the check process's report: %s", subject,
              strerror(rx->err_no));
    return ECC_ERR_SYSTEM;
  }
  char how[160];
  describe_end(wstatus, how, sizeof(how));
  bool ended_well = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (rx->state == RX_EOF || !ended_well) {
    shim_errf(err, err_cap, "%s: the check process %s %s", subject, how,
              rx->state == RX_EOF ? "while loading or validating the plugin, before it reported"
                                  : "after it reported");
    return ECC_ERR_INCOMPATIBLE;
  }
  if (rx->state == RX_BAD) {
    shim_errf(err, err_cap, "%s: the check process sent a malformed report (%s)", subject, rx->bad);
    return ECC_ERR_INCOMPATIBLE;
  }
  return probe_decode(rx->payload, rx->len, subject, status, meta, err, err_cap);
}

int probe_run(probe_job job, void *arg, uint64_t timeout_ms, const char *subject, int *status,
              ecc_plugin_meta_t **meta, char *err, size_t err_cap)
{
  *status = ECC_OK;
  if (meta != NULL)
    *meta = NULL;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    shim_errf(err, err_cap, "%s: cannot make a pipe for the check process: %s", subject,
              strerror(errno));
    return ECC_ERR_SYSTEM;
  }
  pid_t parent = getpid();
  /* Else output buffered here could be written again by the child. */
  (void)fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    shim_errf(err, err_cap, "%s: cannot start the check process: %s", subject, strerror(e));
    return ECC_ERR_SYSTEM;
  }
  if (pid == 0) {
    close(fds[0]);
    child_main(job, arg, fds[1], parent);
  }
  close(fds[1]);
  uint64_t deadline = now_ns() + timeout_ms * 1000000u;
  struct received rx = {.state = RX_EOF, .err_no = 0, .bad = NULL, .payload = NULL, .len = 0};
  receive(fds[0], deadline, &rx);
  close(fds[0]);
  int rc = judge(pid, &rx, deadline, timeout_ms, subject, status, meta, err, err_cap);
  free(rx.payload);
  return rc;
}
