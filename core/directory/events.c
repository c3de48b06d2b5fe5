/* SPDX-License-Identifier: Apache-2.0 */
/*
 * events.c - the residency-event ring (events.h): a single-writer seqlock
 * per record, read by any process without a lock.
 */
#include "core/directory/events.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

/* A record's payload as words: time, bytes, cost, kind, then the key. */
#define EV_KEY_WORDS ((DIR_KEY_MAX + 1) / 8)
#define EV_WORDS (4 + EV_KEY_WORDS)
_Static_assert((DIR_KEY_MAX + 1) % 8 == 0, "the key must fill whole words");

struct ev_head {
  _Atomic uint64_t next; /* the sequence number the next event gets */
  uint64_t pad[7];
};

struct ev_slot {
  _Atomic uint64_t stamp;
  _Atomic uint64_t word[EV_WORDS];
};

static struct ev_slot *slot_of(const void *mem, uint32_t slots, uint64_t seq)
{
  struct ev_slot *first = (struct ev_slot *)((char *)mem + sizeof(struct ev_head));
  return first + (seq - 1) % slots;
}

size_t ev_bytes(uint32_t slots)
{
  if (slots == 0 || slots > EV_SLOTS_MAX)
    return 0;
  return sizeof(struct ev_head) + (size_t)slots * sizeof(struct ev_slot);
}

void ev_format(void *mem, uint32_t slots)
{
  memset(mem, 0, ev_bytes(slots));
  struct ev_head *h = mem;
  atomic_store_explicit(&h->next, 1, memory_order_release);
}

uint64_t ev_next(const void *mem)
{
  const struct ev_head *h = mem;
  uint64_t next = atomic_load_explicit(&h->next, memory_order_acquire);
  return next == 0 ? 1 : next;
}

static void encode(const struct dir_event *ev, uint64_t *w)
{
  w[0] = ev->time_ns;
  w[1] = ev->nbytes;
  w[2] = ev->cost_us;
  w[3] = ev->kind;
  memset(&w[4], 0, EV_KEY_WORDS * 8);
  memcpy(&w[4], ev->key, strnlen(ev->key, DIR_KEY_MAX));
}

uint64_t ev_put(void *mem, uint32_t slots, const struct dir_event *ev)
{
  struct ev_head *h = mem;
  uint64_t seq = ev_next(mem);
  struct ev_slot *s = slot_of(mem, slots, seq);
  uint64_t w[EV_WORDS];
  encode(ev, w);
  /* Each word's release store keeps the odd stamp before it: a reader
   * that sees a new word sees the stamp move (no fence: ThreadSanitizer
   * does not model them). */
  atomic_store_explicit(&s->stamp, 2 * seq - 1, memory_order_relaxed);
  for (int i = 0; i < EV_WORDS; i++)
    atomic_store_explicit(&s->word[i], w[i], memory_order_release);
  atomic_store_explicit(&s->stamp, 2 * seq, memory_order_release);
  atomic_store_explicit(&h->next, seq + 1, memory_order_release);
  return seq;
}

/* The record of `seq` if it is whole and still that one: false if it was
 * overwritten meanwhile or is damaged. Only sequence numbers below ev_next
 * are asked for, whose records were whole when ev_next was read: a stamp
 * below 2 x seq there is damage, never a write still to come, and waiting
 * for it would hold the reader at that record for ever. */
static bool copy_record(const void *mem, uint32_t slots, uint64_t seq, struct dir_event *out)
{
  const struct ev_slot *s = slot_of(mem, slots, seq);
  uint64_t w[EV_WORDS];
  uint64_t before = atomic_load_explicit(&s->stamp, memory_order_acquire);
  if (before != 2 * seq)
    return false;
  /* Acquire loads keep the stamp's second reading after every word. */
  for (int i = 0; i < EV_WORDS; i++)
    w[i] = atomic_load_explicit(&s->word[i], memory_order_acquire);
  if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != before)
    return false;
  out->seq = seq;
  out->time_ns = w[0];
  out->nbytes = w[1];
  out->cost_us = w[2];
  out->kind = (uint32_t)w[3];
  memcpy(out->key, &w[4], DIR_KEY_MAX);
  out->key[DIR_KEY_MAX] = '\0';
  return out->kind >= ECC_EVENT_STORED && out->kind <= ECC_EVENT_RECLAIMED;
}

size_t ev_read(const void *mem, uint32_t slots, uint64_t *cursor, struct dir_event *out, size_t cap,
               uint64_t *lost)
{
  uint64_t next = ev_next(mem);
  uint64_t oldest_kept = next > slots ? next - slots : 1;
  /* 0 asks for the oldest kept (nothing is lost before it); a cursor from
   * the future (another incarnation's) is taken as now. */
  uint64_t at = *cursor == 0 ? oldest_kept : *cursor > next ? next : *cursor;
  size_t n = 0;
  *lost = 0;
  if (cap == 0) {
    *cursor = next;
    return 0;
  }
  while (n < cap && at < next) {
    uint64_t oldest = next > slots ? next - slots : 1;
    if (at < oldest) {
      *lost += oldest - at;
      at = oldest;
      continue;
    }
    if (copy_record(mem, slots, at, &out[n])) {
      n++;
    } else {
      /* Overwritten while this read went on, or damaged: gone either way,
       * and the writer may have moved on meanwhile. */
      (*lost)++;
      next = ev_next(mem);
    }
    at++;
    if (at == next)
      next = ev_next(mem);
  }
  *cursor = at;
  return n;
}
