/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.h - the transfer engine interface: how one batched transfer (a
 * descriptor list) is started, watched and waited for. The connector above
 * it knows nothing of threads or GPUs; each engine is one implementation,
 * and sees of a transfer only its transfer_view.
 */
#ifndef ECC_ENGINE_H
#define ECC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/engine/descriptors.h"
#include "ecc_plugin_v1.h"

struct ecc_log;
struct plugin_config;
struct region;

/* The rest of a transfer's descriptors, written while its first parts are
 * already being copied: a load of thousands of scattered blocks takes longer
 * to plan on the host than a part of it takes to start on the device. Only
 * engines whose ops say takes_feed are given one, and only inside submit. */
struct desc_feed {
  /* Append descriptors to d, whole entries at a time, until they move at
   * least `want` more bytes or none remain; returns whether some remain. It never
   * grows d (room for all of them was reserved before submit, so parts
   * being copied stay where they are) and never merges into a descriptor
   * below d->sealed. */
  bool (*more)(struct desc_feed *f, struct desc_buf *d, uint64_t want);
  uint64_t bytes; /* of the whole transfer, parts still to come included */
};

/* What an engine sees of one batched transfer. The connector lends it
 * between submit() and the query() that reports it finished; the records,
 * keys and links it keeps around it (transfer.h) are none of the engine's
 * business. */
struct transfer_view {
  int direction;        /* ECC_DIR_SAVE (device->region) or ECC_DIR_LOAD */
  struct desc_buf desc; /* what to copy */
  void *engine_state;   /* the engine's per-transfer state */
  bool held;            /* a load whose source bytes are still arriving */
  uint32_t *hold;       /* held: set by submit; the copy waits until engine_hold_release */
  /* NULL: desc is the whole transfer. Else desc holds a first part or
   * nothing, and submit calls feed->more until it answers false before it
   * returns ECC_OK: desc is whole again after every successful submit. */
  struct desc_feed *feed;
};

/* Write the rest of t's descriptors at once, for a copy that cannot start
 * before it knows them all. */
static inline void engine_feed_all(struct transfer_view *t)
{
  while (t->feed != NULL && t->feed->more(t->feed, &t->desc, UINT64_MAX))
    ;
  t->feed = NULL;
}

/* A held load's word: HOLD_WAITING until the one release. The copy runs
 * after either value; HOLD_FAILED makes the transfer fail (its source never
 * filled in). */
enum { HOLD_WAITING = 0, HOLD_READY = 1, HOLD_FAILED = 2 };

static inline void engine_hold_release(uint32_t *hold, int bytes_ok)
{
  __atomic_store_n(hold, bytes_ok ? HOLD_READY : HOLD_FAILED, __ATOMIC_RELEASE);
}

struct engine;

struct engine_ops {
  const char *name; /* "host" or "cuda" */
  bool takes_feed;  /* submit starts copying parts of a load before it is all written */
  /* Start copying t->desc asynchronously, ordered after work queued on the
   * host's `stream` (see flush in the ABI header for what NULL means to each
   * engine). A held load (t->held) also waits, on the device, for the word
   * submit points t->hold at; ECC_ERR_UNSUPPORTED where the engine cannot
   * hold a copy. On error nothing was started. */
  int (*submit)(struct engine *e, struct transfer_view *t, void *stream);
  /* After a load's submit: make the host's `stream` wait for the copy. */
  int (*order_after)(struct engine *e, struct transfer_view *t, void *stream);
  /* Never blocks. Returns 0 while running; 1 when done, with *status
   * (ECC_OK or an error) and *elapsed_ns set. */
  int (*query)(struct engine *e, struct transfer_view *t, int *status, uint64_t *elapsed_ns);
  /* Block until t is done (shutdown only). */
  void (*wait)(struct engine *e, struct transfer_view *t);
  /* Drop per-transfer state once t is done (recycle streams/events). */
  void (*release)(struct engine *e, struct transfer_view *t);
  /* Memory for descriptor arrays, and its release. */
  void *(*desc_alloc)(void *ctx, size_t bytes);
  void (*desc_free)(void *ctx, void *p);
  /* Stop threads, unpin, free. Every transfer has been waited for. */
  void (*destroy)(struct engine *e);
};

struct engine {
  const struct engine_ops *ops;
  void *impl;       /* the engine's own state */
  char detail[128]; /* one line: what it chose and why */
  bool pinned;      /* the region is registered with the driver */
  uint64_t pin_ns;  /* time spent registering */
};

/* Whether e copies with a GPU (its addresses may be device memory, which
 * the CPU must not touch). */
static inline bool engine_is_cuda(const struct engine *e)
{
  return strcmp(e->ops->name, "cuda") == 0;
}

/* The host (memcpy) engine: addresses are host memory, copies run on worker
 * threads. Always available. */
int engine_host_create(const struct plugin_config *cfg, struct region *r, struct ecc_log *log,
                       struct engine *out);

/* The CUDA engine. Returns ECC_ERR_UNSUPPORTED when not built in or when no
 * GPU is present, with the reason in out->detail and NOT logged as an error
 * (probing is quiet): the caller decides whether that is a fallback
 * (`engine.type = auto`) or a failure (`engine.type = cuda`). Other errors
 * (a GPU that is present but fails) are logged with log_fail. */
int engine_cuda_create(const struct plugin_config *cfg, struct region *r, struct ecc_log *log,
                       struct engine *out);

/* Whether this build has the CUDA engine compiled in. */
int engine_cuda_built(void);

#endif /* ECC_ENGINE_H */
