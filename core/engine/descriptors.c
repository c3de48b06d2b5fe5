/* SPDX-License-Identifier: Apache-2.0 */
/*
 * descriptors.c - builds the copy descriptors of a batch: cuts block lists
 * into ascending runs, merges a run into the previous descriptor when both
 * sides continue it, and grows the three parallel arrays in one allocation.
 */
#include "core/engine/descriptors.h"

#include <stdlib.h>
#include <string.h>

static void *default_alloc(void *ctx, size_t bytes)
{
  (void)ctx;
  return malloc(bytes);
}

static void default_release(void *ctx, void *p)
{
  (void)ctx;
  free(p);
}

void desc_init(struct desc_buf *b, void *(*alloc)(void *, size_t), void (*release)(void *, void *),
               void *ctx)
{
  memset(b, 0, sizeof(*b));
  b->alloc = alloc != NULL ? alloc : default_alloc;
  b->release = release != NULL ? release : default_release;
  b->alloc_ctx = ctx;
}

void desc_free(struct desc_buf *b)
{
  if (b->storage != NULL)
    b->release(b->alloc_ctx, b->storage);
  b->storage = NULL;
  b->src = b->dst = b->len = NULL;
  b->count = b->cap = 0;
  b->bytes = 0;
  b->sealed = 0;
}

void desc_clear(struct desc_buf *b)
{
  b->count = 0;
  b->bytes = 0;
  b->src_end = b->dst_end = 0;
  b->sealed = 0;
}

int desc_reserve(struct desc_buf *b, size_t more)
{
  if (more > SIZE_MAX / 2 - b->count)
    return -1;
  size_t need = b->count + more;
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap < 64 ? 64 : b->cap;
  while (cap < need)
    cap *= 2;
  if (cap > SIZE_MAX / (3 * sizeof(uint64_t)))
    return -1;
  uint64_t *mem = b->alloc(b->alloc_ctx, cap * 3 * sizeof(uint64_t));
  if (mem == NULL)
    return -1;
  if (b->count > 0) {
    memcpy(mem, b->src, b->count * sizeof(uint64_t));
    memcpy(mem + cap, b->dst, b->count * sizeof(uint64_t));
    memcpy(mem + 2 * cap, b->len, b->count * sizeof(uint64_t));
  }
  if (b->storage != NULL)
    b->release(b->alloc_ctx, b->storage);
  b->storage = mem;
  b->src = mem;
  b->dst = mem + cap;
  b->len = mem + 2 * cap;
  b->cap = cap;
  return 0;
}

void desc_add_entry(struct desc_buf *b, uint64_t linear, uint64_t region_base, uint64_t block_size,
                    const uint32_t *ids, uint64_t nbytes, int to_region)
{
  struct desc_writer w;
  desc_writer_open(b, &w);
  desc_write_entry(&w, linear, region_base, block_size, ids, nbytes, to_region);
  desc_writer_close(b, &w);
}
