/*
 * engine.h - the transfer engine interface: how one batched transfer (a
 * descriptor list) is started, watched and waited for. The connector above
 * it knows nothing of threads or GPUs; each engine is one implementation.
 */
#ifndef ECC_ENGINE_H
#define ECC_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "descriptors.h"
#include "ecc_plugin_v1.h"

struct ecc_log;
struct plugin_config;
struct region;

/* What poll reports for one entry, kept small: a full ecc_completion_v1_t is
 * 168 bytes, and a step of thousands of entries would write (and poll copy)
 * megabytes of them at submit time. */
struct done_rec {
  uint64_t id;               /* loads: the host's transfer id; saves: offset of the key in keys */
  uint64_t nbytes;           /* bytes of the entry that the copy moves */
};

/* One batched transfer, owned by the connector, lent to the engine between
 * submit() and the query() that reports it finished. */
struct transfer {
  int direction;             /* ECC_DIR_SAVE (device->region) or ECC_DIR_LOAD */
  uint64_t batch;            /* sequence number in its direction, from 1 */
  struct desc_buf desc;      /* what to copy */
  struct done_rec *done;     /* one record per entry, filled at submit */
  size_t n_done;             /* records in use */
  size_t cap_done;           /* records allocated */
  char *keys;                /* saves: the entries' keys, each NUL-terminated, back to back */
  size_t keys_len;           /* bytes of keys in use */
  size_t keys_cap;           /* bytes of keys allocated */
  size_t next_report;        /* first record poll has not returned yet */
  int finished;              /* 1 once query() said so (status below is final) */
  int status;                /* ECC_OK or the failure reported by the engine */
  uint64_t elapsed_ns;       /* duration measured by the engine */
  void *engine_state;        /* the engine's per-transfer state */
  struct transfer *next;     /* FIFO / free-list link */
};

struct engine;

struct engine_ops {
  const char *name; /* "host" or "cuda" */
  /* Start copying t->desc asynchronously, ordered after work queued on the
   * host's `stream` (see flush in the ABI header for what NULL means to each
   * engine). On error nothing was started. */
  int (*submit)(struct engine *e, struct transfer *t, void *stream);
  /* After a load's submit: make the host's `stream` wait for the copy. */
  int (*order_after)(struct engine *e, struct transfer *t, void *stream);
  /* Never blocks. Returns 0 while running; 1 when done, with *status
   * (ECC_OK or an error) and *elapsed_ns set. */
  int (*query)(struct engine *e, struct transfer *t, int *status, uint64_t *elapsed_ns);
  /* Block until t is done (shutdown only). */
  void (*wait)(struct engine *e, struct transfer *t);
  /* Drop per-transfer state once t is done (recycle streams/events). */
  void (*release)(struct engine *e, struct transfer *t);
  /* Memory for descriptor arrays, and its release. */
  void *(*desc_alloc)(void *ctx, size_t bytes);
  void (*desc_free)(void *ctx, void *p);
  /* Stop threads, unpin, free. Every transfer has been waited for. */
  void (*destroy)(struct engine *e);
};

struct engine {
  const struct engine_ops *ops;
  void *impl;              /* the engine's own state */
  char detail[128];        /* one line: what it chose and why */
  int pinned;              /* 1 if the region is registered with the driver */
  uint64_t pin_ns;         /* time spent registering */
};

/* The host (memcpy) engine: addresses are host memory, copies run on worker
 * threads. Always available. */
int engine_host_create(const struct plugin_config *cfg, struct region *r,
                       struct ecc_log *log, struct engine *out);

/* The CUDA engine. Returns ECC_ERR_UNSUPPORTED when not built in or when no
 * GPU is present, with the reason in out->detail and NOT logged as an error
 * (probing is quiet): the caller decides whether that is a fallback
 * (`engine.type = auto`) or a failure (`engine.type = cuda`). Other errors
 * (a GPU that is present but fails) are logged with log_fail. */
int engine_cuda_create(const struct plugin_config *cfg, struct region *r,
                       struct ecc_log *log, struct engine *out);

/* Whether this build has the CUDA engine compiled in. */
int engine_cuda_built(void);

#endif /* ECC_ENGINE_H */
