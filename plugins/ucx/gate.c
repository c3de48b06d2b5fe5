/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gate.c - the preface over TCP (gate.h): a server's listener and the
 * connections in their preface (visitors), each stepped on by poll with a
 * deadline and closed the moment it fails; and a client's preface, one
 * blocking call with one deadline.
 */
#include "plugins/ucx/gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errtext.h"
#include "ecc_common.h"
#include "plugins/ucx/preface.h"

#define FRAME_MAX (PREFACE_HEADER + PREFACE_MAX_BODY)
#define ACCEPTS_PER_CALL 64 /* so that a flood of connections cannot hold the thread */
#define NOTE_EVERY_NS 1000000000ull

enum step { STEP_OPEN, STEP_PROOF, STEP_FLUSH };

/* A connection in its preface. */
struct visitor {
  int fd; /* -1: a free slot */
  enum step step;
  uint64_t deadline_ns; /* of the current step */
  struct sockaddr_storage from;
  char who[64];
  uint8_t nonce_c[PREFACE_NONCE], nonce_s[PREFACE_NONCE];
  uint8_t in[FRAME_MAX];
  size_t in_len, in_want;
  uint8_t out[FRAME_MAX]; /* ACCEPT, until it is sent */
  size_t out_len, out_off;
  void *cookie; /* the admitted peer's */
};

struct gate {
  struct gate_params p;
  uint8_t key[SHA256_BYTES];
  bool has_key;
  int fd;
  struct visitor v[GATE_MAX_PENDING];
  uint64_t refused;
  uint64_t unlogged;     /* refusals since the last one logged */
  uint64_t last_note_ns; /* when one was last logged: at most one a second */
};

static uint64_t ms_ns(uint32_t ms)
{
  return (uint64_t)ms * 1000000ull;
}

static int sockaddr_of(const char *addr, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
  if (addr != NULL && inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(*v4);
    return 0;
  }
  if (addr != NULL && inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(*v6);
    return 0;
  }
  return -1;
}

static void name_of(const struct sockaddr_storage *ss, char *out, size_t cap)
{
  char host[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (ss->ss_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  snprintf(out, cap, "%s port %u", host, port);
}

static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
  if (a->ss_family != b->ss_family)
    return false;
  if (a->ss_family == AF_INET)
    return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
           ((const struct sockaddr_in *)b)->sin_addr.s_addr;
  return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* ---- the server's side ------------------------------------------------- */

/* A refusal, logged at most once a second with a count of those between:
 * a flood of garbage must not become a flood of log lines. */
static void note_refusal(struct gate *g, const char *who, const char *why)
{
  g->refused++;
  uint64_t now = ecc_now_ns();
  if (g->last_note_ns != 0 && now - g->last_note_ns < NOTE_EVERY_NS) {
    g->unlogged++;
    return;
  }
  if (g->unlogged > 0)
    log_msg(g->p.log, ECC_LOG_WARN,
            "ucx: refused a connection from %s: %s (and %" PRIu64 " others since the last)", who,
            why, g->unlogged);
  else
    log_msg(g->p.log, ECC_LOG_WARN, "ucx: refused a connection from %s: %s", who, why);
  g->unlogged = 0;
  g->last_note_ns = now;
}

/* Closed; an admitted one's peer is told it will never be linked. */
static void visitor_close(struct gate *g, struct visitor *v)
{
  close(v->fd);
  v->fd = -1;
  if (v->cookie != NULL)
    g->p.linked(g->p.user, v->cookie, -1);
  v->cookie = NULL;
}

/* Refused: told why when it is a peer of this plugin (one try, the socket's
 * buffer is empty by now), then closed. */
static void refuse(struct gate *g, struct visitor *v, int code, const char *why, bool tell)
{
  note_refusal(g, v->who, why);
  uint8_t buf[PREFACE_HEADER + 4 + PREFACE_MAX_REASON];
  size_t len = tell ? preface_encode_refuse(buf, sizeof(buf), code, why) : 0;
  if (len > 0 && send(v->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len)
    log_msg(g->p.log, ECC_LOG_DEBUG, "ucx: the refusal to %s was not sent whole", v->who);
  visitor_close(g, v);
}

static void expect_frame(struct gate *g, struct visitor *v, enum step step)
{
  v->step = step;
  v->in_len = 0;
  v->in_want = PREFACE_HEADER;
  v->deadline_ns = ecc_now_ns() + ms_ns(g->p.step_ms);
}

/* Sends what is left of v->out; once all is sent the connection is the
 * admitted peer's. An error closes it. */
static void flush_out(struct gate *g, struct visitor *v)
{
  while (v->out_off < v->out_len) {
    ssize_t n =
        send(v->fd, v->out + v->out_off, v->out_len - v->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      log_msg(g->p.log, ECC_LOG_WARN, "ucx: the answer to %s could not be sent: %s", v->who,
              strerror(errno));
      visitor_close(g, v);
      return;
    }
    v->out_off += (size_t)n;
  }
  g->p.linked(g->p.user, v->cookie, v->fd);
  v->cookie = NULL;
  v->fd = -1;
}

static void take_open(struct gate *g, struct visitor *v, const struct preface_frame *f)
{
  struct preface_hello h;
  char why[200];
  int rc = preface_decode_hello(f, &h, why, sizeof(why));
  if (rc != ECC_OK) {
    refuse(g, v, rc, why, true);
    return;
  }
  bool theirs = h.flags & PREFACE_FLAG_SECRET;
  if (theirs != g->has_key) {
    refuse(g, v, ECC_ERR_CONFIG,
           g->has_key ? "this server requires the shared secret (ucx.secret_file) and the "
                        "client has none: set the same file on both sides"
                      : "the client has a shared secret (ucx.secret_file) and this server has "
                        "none: set the same file on both sides",
           true);
    return;
  }
  memcpy(v->nonce_c, h.nonce, PREFACE_NONCE);
  struct preface_hello c = {.flags = g->has_key ? PREFACE_FLAG_SECRET : 0};
  if (preface_nonce(v->nonce_s) != 0) {
    refuse(g, v, ECC_ERR_SYSTEM, "the server has no random source", true);
    return;
  }
  memcpy(c.nonce, v->nonce_s, PREFACE_NONCE);
  uint8_t buf[PREFACE_HEADER + PREFACE_NONCE + 4];
  size_t len = preface_encode_hello(buf, sizeof(buf), PREFACE_CHALLENGE, &c);
  if (send(v->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)len) {
    refuse(g, v, ECC_ERR_TRANSFER, "the challenge could not be sent", false);
    return;
  }
  expect_frame(g, v, STEP_PROOF);
}

static void take_proof(struct gate *g, struct visitor *v, const struct preface_frame *f)
{
  struct preface_proof pr;
  char why[256];
  int rc = preface_decode_proof(f, &pr, why, sizeof(why));
  if (rc != ECC_OK) {
    refuse(g, v, rc, why, true);
    return;
  }
  const uint8_t *key = g->has_key ? g->key : NULL;
  uint8_t want[SHA256_BYTES];
  preface_mac(key, false, v->nonce_c, v->nonce_s, pr.addr, pr.addr_len, want);
  if (key != NULL && !mac_equal(want, pr.mac)) {
    refuse(g, v, ECC_ERR_CONFIG,
           "wrong shared secret: the client's proof does not match this server's "
           "ucx.secret_file",
           true);
    return;
  }
  rc = g->p.admit(g->p.user, pr.addr, pr.addr_len, &v->cookie, why, sizeof(why));
  if (rc != ECC_OK) {
    refuse(g, v, rc, why, true);
    return;
  }
  uint8_t mac[SHA256_BYTES];
  preface_mac(key, true, v->nonce_c, v->nonce_s, g->p.own_addr, g->p.own_len, mac);
  v->out_len = preface_encode_proof(v->out, sizeof(v->out), PREFACE_ACCEPT, mac, g->p.own_addr,
                                    g->p.own_len);
  v->out_off = 0;
  v->step = STEP_FLUSH;
  v->deadline_ns = ecc_now_ns() + ms_ns(g->p.step_ms);
  flush_out(g, v);
}

/* Reads what v has sent, never past the frame it owes. */
static void take_input(struct gate *g, struct visitor *v)
{
  while (v->fd >= 0 && v->in_len < v->in_want) {
    ssize_t n = recv(v->fd, v->in + v->in_len, v->in_want - v->in_len, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) {
      refuse(g, v, ECC_ERR_TRANSFER,
             n == 0 ? "it closed the connection during the preface" : strerror(errno), false);
      return;
    }
    v->in_len += (size_t)n;
    if (v->in_len < PREFACE_HEADER || v->in_want > PREFACE_HEADER)
      continue;
    uint16_t type;
    uint32_t length;
    char why[160];
    int rc = preface_header(v->in, &type, &length, why, sizeof(why));
    uint16_t due = v->step == STEP_OPEN ? PREFACE_OPEN : PREFACE_PROOF;
    if (rc == ECC_OK && type != due) {
      snprintf(why, sizeof(why), "a frame of type %u where %s was due", type,
               due == PREFACE_OPEN ? "OPEN" : "PROOF");
      rc = ECC_ERR_INVALID;
    }
    if (rc != ECC_OK) {
      /* Bytes of something else (UCX's own connection manager, a scanner)
       * get no answer: it would not read one. */
      refuse(g, v, rc, why, rc != ECC_ERR_TRANSFER);
      return;
    }
    v->in_want = PREFACE_HEADER + length;
  }
  if (v->fd < 0)
    return;
  struct preface_frame f = {.length = (uint32_t)(v->in_want - PREFACE_HEADER),
                            .body = v->in + PREFACE_HEADER};
  if (v->step == STEP_OPEN)
    take_open(g, v, &f);
  else
    take_proof(g, v, &f);
}

static struct visitor *free_slot(struct gate *g, const struct sockaddr_storage *from,
                                 const char **full)
{
  struct visitor *slot = NULL;
  unsigned same = 0;
  for (unsigned i = 0; i < GATE_MAX_PENDING; i++) {
    if (g->v[i].fd < 0 && slot == NULL)
      slot = &g->v[i];
    else if (g->v[i].fd >= 0 && same_host(&g->v[i].from, from))
      same++;
  }
  *full = slot == NULL                   ? "too many connections in their preface"
          : same >= GATE_MAX_PER_ADDRESS ? "too many connections from its address in their preface"
                                         : NULL;
  return *full == NULL ? slot : NULL;
}

static void accept_new(struct gate *g)
{
  for (int i = 0; i < ACCEPTS_PER_CALL; i++) {
    struct sockaddr_storage from;
    socklen_t len = sizeof(from);
    int fd = accept4(g->fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        log_msg(g->p.log, ECC_LOG_WARN, "ucx: accepting a connection failed: %s", strerror(errno));
      return;
    }
    const char *full;
    struct visitor *v = free_slot(g, &from, &full);
    if (v == NULL) {
      char who[64];
      name_of(&from, who, sizeof(who));
      note_refusal(g, who, full);
      close(fd);
      continue;
    }
    v->fd = fd;
    v->from = from;
    name_of(&from, v->who, sizeof(v->who));
    expect_frame(g, v, STEP_OPEN);
  }
}

int gate_open(const struct gate_params *p, struct gate **out, char *why, size_t why_cap)
{
  *out = NULL;
  struct sockaddr_storage ss;
  socklen_t sl;
  if (p->port == 0 || sockaddr_of(p->addr, p->port, &ss, &sl) != 0)
    return errtext_fail(why, why_cap, ECC_ERR_CONFIG, "ucx: '%s' port %u is not a numeric address",
                        p->addr ? p->addr : "(none)", p->port);
  struct gate *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return errtext_fail(why, why_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  g->p = *p;
  g->has_key = p->key != NULL;
  if (g->has_key)
    memcpy(g->key, p->key, SHA256_BYTES);
  for (unsigned i = 0; i < GATE_MAX_PENDING; i++)
    g->v[i].fd = -1;
  g->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  /* A restarted server takes its port back although connections of the
   * one before are in TIME_WAIT. */
  if (g->fd < 0 || setsockopt(g->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      (ss.ss_family == AF_INET6 &&
       setsockopt(g->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) ||
      bind(g->fd, (struct sockaddr *)&ss, sl) != 0 || listen(g->fd, 64) != 0) {
    int e = errno;
    if (g->fd >= 0)
      close(g->fd);
    free(g);
    return errtext_fail(why, why_cap, ECC_ERR_TRANSFER, "ucx: cannot listen on %s port %u: %s",
                        p->addr, p->port, strerror(e));
  }
  *out = g;
  return ECC_OK;
}

size_t gate_fds(struct gate *g, struct pollfd *out, size_t cap)
{
  size_t n = 0;
  if (cap > 0)
    out[n++] = (struct pollfd){.fd = g->fd, .events = POLLIN};
  for (unsigned i = 0; i < GATE_MAX_PENDING && n < cap; i++)
    if (g->v[i].fd >= 0)
      out[n++] = (struct pollfd){.fd = g->v[i].fd,
                                 .events = g->v[i].step == STEP_FLUSH ? POLLOUT : POLLIN};
  return n;
}

static struct visitor *visitor_of(struct gate *g, int fd)
{
  for (unsigned i = 0; i < GATE_MAX_PENDING; i++)
    if (g->v[i].fd == fd)
      return &g->v[i];
  return NULL;
}

void gate_service(struct gate *g, const struct pollfd *fds, size_t n)
{
  for (size_t i = 1; i < n; i++) {
    struct visitor *v = fds[i].revents != 0 ? visitor_of(g, fds[i].fd) : NULL;
    if (v == NULL)
      continue;
    if (v->step == STEP_FLUSH)
      flush_out(g, v);
    else
      take_input(g, v);
  }
  uint64_t now = ecc_now_ns();
  for (unsigned i = 0; i < GATE_MAX_PENDING; i++) {
    struct visitor *v = &g->v[i];
    if (v->fd < 0 || now < v->deadline_ns)
      continue;
    char why[96];
    snprintf(why, sizeof(why), "%s within %u ms",
             v->step == STEP_OPEN    ? "no opening frame"
             : v->step == STEP_PROOF ? "no proof"
                                     : "the answer not read",
             g->p.step_ms);
    refuse(g, v, ECC_ERR_TRANSFER, why, v->step != STEP_FLUSH);
  }
  if (n > 0 && (fds[0].revents & POLLIN))
    accept_new(g);
}

uint64_t gate_refused(const struct gate *g)
{
  return g->refused;
}

void gate_close(struct gate *g)
{
  if (g == NULL)
    return;
  for (unsigned i = 0; i < GATE_MAX_PENDING; i++)
    if (g->v[i].fd >= 0)
      visitor_close(g, &g->v[i]);
  close(g->fd);
  free(g);
}

/* ---- the client's side -------------------------------------------------- */

struct dial {
  int fd;
  uint64_t deadline_ns;
  uint32_t ms;
  char server[96]; /* "ADDRESS port N", for the texts */
};

/* Waits for events on d->fd until the deadline: 0, or -1 when it passed. */
static int dial_wait(const struct dial *d, short events)
{
  for (;;) {
    uint64_t now = ecc_now_ns();
    if (now >= d->deadline_ns)
      return -1;
    int ms = (int)((d->deadline_ns - now + 999999) / 1000000);
    struct pollfd p = {.fd = d->fd, .events = events};
    int r = poll(&p, 1, ms);
    if (r > 0)
      return 0;
    if (r < 0 && errno != EINTR)
      return -1;
  }
}

static int silent(const struct dial *d, char *why, size_t cap)
{
  return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: no answer from %s within %u ms", d->server,
                      d->ms);
}

static int dial_send(const struct dial *d, const uint8_t *buf, size_t len, char *why, size_t cap)
{
  size_t off = 0;
  while (off < len) {
    ssize_t n = send(d->fd, buf + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: sending to %s failed: %s", d->server,
                          strerror(errno));
    if (dial_wait(d, POLLOUT) != 0)
      return silent(d, why, cap);
  }
  return ECC_OK;
}

static int dial_recv(const struct dial *d, uint8_t *buf, size_t len, char *why, size_t cap)
{
  size_t off = 0;
  while (off < len) {
    ssize_t n = recv(d->fd, buf + off, len - off, MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t)n;
      continue;
    }
    if (n == 0)
      return errtext_fail(why, cap, ECC_ERR_TRANSFER,
                          "ucx: %s closed the connection during the preface", d->server);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: reading from %s failed: %s", d->server,
                          strerror(errno));
    if (dial_wait(d, POLLIN) != 0)
      return silent(d, why, cap);
  }
  return ECC_OK;
}

/* The server's next frame, which must be `want` or REFUSE (a refusal is
 * returned as its code and reason). */
static int dial_frame(const struct dial *d, uint16_t want, uint8_t *buf, struct preface_frame *f,
                      char *why, size_t cap)
{
  int rc = dial_recv(d, buf, PREFACE_HEADER, why, cap);
  if (rc != ECC_OK)
    return rc;
  char bad[160];
  rc = preface_header(buf, &f->type, &f->length, bad, sizeof(bad));
  if (rc == ECC_ERR_TRANSFER)
    return errtext_fail(why, cap, rc, "ucx: %s is not an ecc server: %s", d->server, bad);
  if (rc != ECC_OK)
    return errtext_fail(why, cap, rc, "ucx: the server at %s: %s", d->server, bad);
  f->body = buf + PREFACE_HEADER;
  rc = dial_recv(d, buf + PREFACE_HEADER, f->length, why, cap);
  if (rc != ECC_OK)
    return rc;
  if (f->type == PREFACE_REFUSE) {
    struct preface_refuse r;
    if (preface_decode_refuse(f, &r, bad, sizeof(bad)) != ECC_OK)
      return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: the server at %s: %s", d->server, bad);
    return errtext_fail(why, cap, r.code, "ucx: refused by the server at %s: %.*s", d->server,
                        (int)r.reason_len, r.reason);
  }
  if (f->type != want)
    return errtext_fail(why, cap, ECC_ERR_TRANSFER,
                        "ucx: the server at %s sent a frame of type %u where %u was due", d->server,
                        f->type, want);
  return ECC_OK;
}

static int connect_failed(const struct dial *d, int err, char *why, size_t cap)
{
  if (err == ECONNREFUSED)
    return errtext_fail(why, cap, ECC_ERR_TRANSFER,
                        "ucx: no server is listening at %s: is the producer running, with "
                        "ucx.role = server and this ucx.address?",
                        d->server);
  return errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: cannot connect to %s: %s", d->server,
                      strerror(err));
}

static int dial_connect(struct dial *d, const char *addr, uint16_t port, char *why, size_t cap)
{
  struct sockaddr_storage ss;
  socklen_t sl;
  if (port == 0 || sockaddr_of(addr, port, &ss, &sl) != 0)
    return errtext_fail(why, cap, ECC_ERR_CONFIG, "ucx: '%s' port %u is not a numeric address",
                        addr ? addr : "(none)", port);
  d->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (d->fd < 0)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: no socket: %s", strerror(errno));
  if (connect(d->fd, (struct sockaddr *)&ss, sl) == 0)
    return ECC_OK;
  if (errno != EINPROGRESS)
    return connect_failed(d, errno, why, cap);
  if (dial_wait(d, POLLOUT) != 0)
    return silent(d, why, cap);
  int err = 0;
  socklen_t el = sizeof(err);
  if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0)
    return connect_failed(d, err != 0 ? err : errno, why, cap);
  return ECC_OK;
}

static int dial_preface(struct dial *d, const uint8_t *key, const void *own, size_t own_len,
                        uint8_t *buf, uint8_t **peer, size_t *peer_len, char *why, size_t cap)
{
  struct preface_hello open = {.flags = key != NULL ? PREFACE_FLAG_SECRET : 0}, ch;
  if (preface_nonce(open.nonce) != 0)
    return errtext_fail(why, cap, ECC_ERR_SYSTEM, "ucx: no random source: %s", strerror(errno));
  struct preface_frame f;
  char bad[160];
  int rc = dial_send(d, buf, preface_encode_hello(buf, FRAME_MAX, PREFACE_OPEN, &open), why, cap);
  if (rc == ECC_OK)
    rc = dial_frame(d, PREFACE_CHALLENGE, buf, &f, why, cap);
  if (rc == ECC_OK && preface_decode_hello(&f, &ch, bad, sizeof(bad)) != ECC_OK)
    rc = errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: the server at %s: %s", d->server, bad);
  if (rc == ECC_OK && !(ch.flags & PREFACE_FLAG_SECRET) != (key == NULL))
    rc = errtext_fail(why, cap, ECC_ERR_CONFIG,
                      "ucx: the server at %s %s: set the same ucx.secret_file on both sides",
                      d->server,
                      key != NULL ? "has no shared secret and this client has one"
                                  : "requires a shared secret (ucx.secret_file) and this client "
                                    "has none");
  if (rc != ECC_OK)
    return rc;
  uint8_t mac[SHA256_BYTES];
  preface_mac(key, false, open.nonce, ch.nonce, own, own_len, mac);
  rc = dial_send(d, buf, preface_encode_proof(buf, FRAME_MAX, PREFACE_PROOF, mac, own, own_len),
                 why, cap);
  if (rc == ECC_OK)
    rc = dial_frame(d, PREFACE_ACCEPT, buf, &f, why, cap);
  struct preface_proof acc;
  if (rc == ECC_OK && preface_decode_proof(&f, &acc, bad, sizeof(bad)) != ECC_OK)
    rc = errtext_fail(why, cap, ECC_ERR_TRANSFER, "ucx: the server at %s: %s", d->server, bad);
  if (rc != ECC_OK)
    return rc;
  preface_mac(key, true, open.nonce, ch.nonce, acc.addr, acc.addr_len, mac);
  if (key != NULL && !mac_equal(mac, acc.mac))
    return errtext_fail(why, cap, ECC_ERR_TRANSFER,
                        "ucx: the server at %s did not prove the shared secret: it is not a "
                        "server of this ucx.secret_file",
                        d->server);
  *peer = malloc(acc.addr_len);
  if (*peer == NULL)
    return errtext_fail(why, cap, ECC_ERR_NOMEM, "ucx: out of memory");
  memcpy(*peer, acc.addr, acc.addr_len);
  *peer_len = acc.addr_len;
  return ECC_OK;
}

int gate_connect(const char *addr, uint16_t port, uint32_t ms, const uint8_t *key,
                 const void *own_addr, size_t own_len, uint8_t **peer_addr, size_t *peer_len,
                 int *sock, char *why, size_t why_cap)
{
  *sock = -1;
  *peer_addr = NULL;
  *peer_len = 0;
  struct dial d = {.fd = -1, .deadline_ns = ecc_now_ns() + ms_ns(ms), .ms = ms};
  snprintf(d.server, sizeof(d.server), "%s port %u", addr ? addr : "(none)", port);
  uint8_t *buf = malloc(FRAME_MAX);
  int rc = buf != NULL ? dial_connect(&d, addr, port, why, why_cap)
                       : errtext_fail(why, why_cap, ECC_ERR_NOMEM, "ucx: out of memory");
  if (rc == ECC_OK)
    rc = dial_preface(&d, key, own_addr, own_len, buf, peer_addr, peer_len, why, why_cap);
  if (rc == ECC_OK)
    *sock = d.fd;
  else if (d.fd >= 0)
    close(d.fd);
  free(buf);
  return rc;
}
