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
  uint64_t *src;   /* source addresses */
  uint64_t *dst;   /* destination addresses */
  uint64_t *len;   /* bytes per descriptor */
  size_t count;    /* descriptors in use */
  size_t cap;      /* capacity of each array */
  uint64_t bytes;  /* sum of len[0..count) */
  void *storage;   /* one allocation holding the three arrays */
  /* Allocator for storage (the CUDA engine gives pinned memory so kernels
   * can read descriptors in place). NULL means malloc/free. */
  void *(*alloc)(void *ctx, size_t bytes);
  void (*release)(void *ctx, void *p);
  void *alloc_ctx;
};

void desc_init(struct desc_buf *b, void *(*alloc)(void *, size_t),
               void (*release)(void *, void *), void *ctx);
void desc_free(struct desc_buf *b);
/* Forget the contents, keep the storage. */
void desc_clear(struct desc_buf *b);
/* Make room for `more` descriptors. Returns 0 or -1 (out of memory). */
int desc_reserve(struct desc_buf *b, size_t more);

/*
 * Append the descriptors of one entry: `nbytes` of linear memory at `linear`
 * against region blocks `ids` (block i at region_base + i * block_size).
 * `to_region` 1: linear -> blocks (save); 0: blocks -> linear (load).
 * Only the blocks the bytes reach get descriptors; each run of strictly
 * ascending consecutive ids is one descriptor; the last may be partial. A
 * run that continues the previous descriptor on both sides is merged into
 * it. Room must have been reserved: one descriptor per block listed.
 * Addresses are unsigned 64-bit.
 */
void desc_add_entry(struct desc_buf *b, uint64_t linear, uint64_t region_base,
                    uint64_t block_size, const uint32_t *ids, uint64_t nbytes,
                    int to_region);

#endif /* ECC_DESCRIPTORS_H */
