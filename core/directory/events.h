/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.h - the residency-event ring kept in the region after the
 * directory's tables. One writer at a time (the directory's lock holder)
 * appends; readers in any process copy from a cursor of their own without
 * a lock, so a reader never delays a writer, and learn how many events
 * were overwritten before they got to them.
 *
 * Each record carries a seqlock stamp (2 x seq - 1 while being written,
 * 2 x seq once whole); a reader keeps a copy only if the stamp was the
 * same whole value before and after it. A writer killed halfway leaves an
 * odd stamp that the next write of that sequence number replaces. Every
 * word is read and written atomically, so readers and the writer never
 * race in the language's sense. The ring's size comes from the caller (the
 * directory's checked header), never from the shared memory.
 */
#ifndef ECC_EVENTS_H
#define ECC_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/directory/directory.h"

/* Most records a ring holds. */
#define EV_SLOTS_MAX (1u << 20)

/* Bytes a ring of `slots` records needs (0 if slots is 0 or too many). */
size_t ev_bytes(uint32_t slots);

/* An empty ring at `mem` (64-aligned, ev_bytes(slots) bytes). */
void ev_format(void *mem, uint32_t slots);

/* Appends one event and returns its sequence number (from 1). The caller
 * serialises writers. */
uint64_t ev_put(void *mem, uint32_t slots, const struct dir_event *ev);

/* The sequence number the next ev_put will give. */
uint64_t ev_next(const void *mem);

/* Up to cap events from *cursor on (0: the oldest kept), oldest first;
 * returns their count and moves *cursor past the last. *lost receives how
 * many from the cursor on were overwritten (or found damaged: a record
 * whose stamp or kind is wrong) and skipped.
 * cap 0 sets *cursor to ev_next. A cursor past ev_next is taken as
 * ev_next. */
size_t ev_read(const void *mem, uint32_t slots, uint64_t *cursor, struct dir_event *out, size_t cap,
               uint64_t *lost);

#endif /* ECC_EVENTS_H */
