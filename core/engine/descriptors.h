/* SPDX-License-Identifier: Apache-2.0 */
/*
 * descriptors.h - copy descriptors: (source, destination, length) triples
 * kept as three parallel arrays, the layout batched copy calls and copy
 * kernels read directly. Building them coalesces ascending block runs.
 */
#ifndef ECC_DESCRIPTORS_H
#define ECC_DESCRIPTORS_H

#include <stddef.h>
#include <stdint.h>

struct desc_buf {
  uint64_t *src;    /* source addresses */
  uint64_t *dst;    /* destination addresses */
  uint64_t *len;    /* bytes per descriptor */
  size_t count;     /* descriptors in use */
  size_t cap;       /* capacity of each array */
  uint64_t bytes;   /* sum of len[0..count) */
  uint64_t src_end; /* where the last descriptor ends on each side (count > 0): */
  uint64_t dst_end; /*   the next one may continue it */
  size_t sealed;    /* descriptors below this one are being copied: none is merged into */
  void *storage;    /* one allocation holding the three arrays */
  /* Allocator for storage (the CUDA engine gives pinned memory so kernels
   * can read descriptors in place). NULL means malloc/free. */
  void *(*alloc)(void *ctx, size_t bytes);
  void (*release)(void *ctx, void *p);
  void *alloc_ctx;
};

void desc_init(struct desc_buf *b, void *(*alloc)(void *, size_t), void (*release)(void *, void *),
               void *ctx);
void desc_free(struct desc_buf *b);
/* Forget the contents, keep the storage. */
void desc_clear(struct desc_buf *b);
/* Make room for `more` descriptors. Returns 0 or -1 (out of memory). */
int desc_reserve(struct desc_buf *b, size_t more);

/*
 * A writer holds a buffer's fill state in the caller's locals while a step's
 * entries are added, and desc_write_entry is inline: a step adds thousands
 * of entries, and state kept in the buffer would be stored and read back
 * (stores through the uint64_t arrays may alias its fields) once per entry,
 * several times slower than the work itself.
 */
struct desc_writer {
  uint64_t *src, *dst, *len; /* the buffer's arrays */
  size_t count;              /* descriptors written */
  uint64_t bytes;            /* their total length */
  uint64_t src_end, dst_end; /* where the last one ends (count > 0) */
  size_t sealed;             /* the buffer's: the last descriptor is merged into only above it */
};

/* Inline too: a writer whose address escapes into a call lives in memory,
 * and the point is to keep it in registers. */
static inline void desc_writer_open(const struct desc_buf *b, struct desc_writer *w)
{
  w->src = b->src;
  w->dst = b->dst;
  w->len = b->len;
  w->count = b->count;
  w->bytes = b->bytes;
  w->src_end = b->src_end;
  w->dst_end = b->dst_end;
  w->sealed = b->sealed;
}

/* Store the writer's state back into b. */
static inline void desc_writer_close(struct desc_buf *b, const struct desc_writer *w)
{
  b->count = w->count;
  b->bytes = w->bytes;
  b->src_end = w->src_end;
  b->dst_end = w->dst_end;
}

/*
 * Append the descriptors of one entry: `nbytes` of linear memory at `linear`
 * against region blocks `ids` (block i at region_base + i * block_size).
 * `to_region` 1: linear -> blocks (save); 0: blocks -> linear (load).
 * Only the blocks the bytes reach get descriptors; each run of strictly
 * ascending consecutive ids is one descriptor; the last may be partial. A
 * run that continues the previous descriptor on both sides is merged into
 * it, unless that one is sealed (desc_seal). Room must have been reserved: one descriptor per block listed.
 * Requires nbytes <= (blocks listed) * block_size, a product that fits in
 * 64 bits. Addresses are unsigned 64-bit. Walks the bytes rather than
 * counting blocks first: a division per entry costs more than the walk.
 */
static inline void desc_write_entry(struct desc_writer *w, uint64_t linear, uint64_t region_base,
                                    uint64_t block_size, const uint32_t *ids, uint64_t nbytes,
                                    int to_region)
{
  uint64_t off = 0, i = 0;
  while (off < nbytes) {
    uint64_t first = ids[i], run = 1;
    uint64_t left = nbytes - off;
    uint64_t n = block_size;
    while (n < left && (uint64_t)ids[i + run] == first + run) {
      n += block_size; /* cannot wrap: see the precondition above */
      run++;
    }
    if (n > left)
      n = left; /* the last block of the entry may be partial */
    uint64_t lin = linear + off;
    uint64_t reg = region_base + first * block_size;
    uint64_t s = to_region ? lin : reg;
    uint64_t d = to_region ? reg : lin;
    if (w->count > w->sealed && s == w->src_end && d == w->dst_end) {
      w->len[w->count - 1] += n;
    } else {
      w->src[w->count] = s;
      w->dst[w->count] = d;
      w->len[w->count] = n;
      w->count++;
    }
    w->src_end = s + n;
    w->dst_end = d + n;
    w->bytes += n;
    off += n;
    i += run;
  }
}

/* Append one run: `len` bytes between linear memory and the region address
 * `region` (both contiguous), merged into the last descriptor when it
 * continues it on both sides. Room must have been reserved. */
static inline void desc_write_run(struct desc_writer *w, uint64_t linear, uint64_t region,
                                  uint64_t len, int to_region)
{
  uint64_t s = to_region ? linear : region;
  uint64_t d = to_region ? region : linear;
  if (w->count > w->sealed && s == w->src_end && d == w->dst_end) {
    w->len[w->count - 1] += len;
  } else {
    w->src[w->count] = s;
    w->dst[w->count] = d;
    w->len[w->count] = len;
    w->count++;
  }
  w->src_end = s + len;
  w->dst_end = d + len;
  w->bytes += len;
}

/* The descriptors written so far are handed to a copy that is already
 * running: later ones never merge into them. */
static inline void desc_seal(struct desc_buf *b)
{
  b->sealed = b->count;
}

/* desc_write_entry for a single entry. */
void desc_add_entry(struct desc_buf *b, uint64_t linear, uint64_t region_base, uint64_t block_size,
                    const uint32_t *ids, uint64_t nbytes, int to_region);

#endif /* ECC_DESCRIPTORS_H */
