/* SPDX-License-Identifier: Apache-2.0 */
/*
 * wire.h - the messages between the UCX plugin's two roles: a consumer host
 * (client) asks a producer host (server) for entries by key, pulls their
 * blocks and releases them. This file owns the encoding and a decoder that
 * trusts nothing it is given; it knows nothing of UCX.
 *
 * Every message is one UCX active message: a fixed 24-byte header, then a
 * body whose length the header gives. Integers are little-endian whatever
 * the host; nothing is aligned. A conversation opens with HELLO, answered
 * by WELCOME or REFUSE; any other message before WELCOME is refused.
 *
 *   client                                     server
 *   HELLO {layout hash, client id, rank,
 *          group id}                         ->
 *                                            <- WELCOME {server id, region, rkey}
 *                                               or REFUSE {code, reason}
 *   LOOKUP {req id, ranks, keys}             ->     (pins each found entry)
 *                                            <- FOUND {req id, status, entries}
 *   PULL {req id, token}                     ->
 *                                            <- data {req id, offset} + bytes, ...
 *                                               or PULLED {req id, error}
 *   RELEASE {tokens}                         ->     (drops those pins)
 *   DESCRIBE {req id, token}                 ->     (a pin of the client's group)
 *                                            <- DESCRIBED {req id, status, entry, key}
 *   PING {nonce}                             <-> PONG {nonce}   (either side)
 *
 * The decoder checks the magic, the version, that the body has exactly the
 * bytes its counts say, every count against its limit, every key's length
 * (1..ECC_KEY_MAX, no NUL inside), every run (count >= 1, no overflow of
 * first + count), every code and status against the ECC_STATUS_MAP range,
 * and returns views into the caller's buffer (no copies, nothing
 * allocated): the views live as long as that buffer. The byte layout of
 * each body is written down in wire.c.
 */
#ifndef ECC_UCX_WIRE_H
#define ECC_UCX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "ecc_common.h"

#define WIRE_MAGIC 0x57434345u /* "ECCW" read as little-endian bytes */
#define WIRE_VERSION 3u        /* 3: the preface (preface.h) before any message */
#define WIRE_HEADER_BYTES 24u
#define WIRE_MAX_BODY (1u << 20) /* no message body is longer */
#define WIRE_MAX_KEYS 256u       /* keys per LOOKUP, entries per FOUND */
#define WIRE_MAX_TOKENS 1024u    /* tokens per RELEASE */
#define WIRE_MAX_RUNS 8u         /* runs per entry: the ABI's ECC_ENTRY_MAX_EXTENTS */
#define WIRE_MAX_RKEY 4096u      /* bytes of a packed UCX remote key */
#define WIRE_MAX_REASON 255u     /* bytes of a REFUSE reason */

/* The closed set of message types: X(enumerator, value, name in logs). */
#define WIRE_TYPE_MAP(X)           \
  X(WIRE_HELLO, 1, "HELLO")        \
  X(WIRE_WELCOME, 2, "WELCOME")    \
  X(WIRE_REFUSE, 3, "REFUSE")      \
  X(WIRE_LOOKUP, 4, "LOOKUP")      \
  X(WIRE_FOUND, 5, "FOUND")        \
  X(WIRE_RELEASE, 6, "RELEASE")    \
  X(WIRE_PING, 7, "PING")          \
  X(WIRE_PONG, 8, "PONG")          \
  X(WIRE_PULL, 9, "PULL")          \
  X(WIRE_PULLED, 10, "PULLED")     \
  X(WIRE_DESCRIBE, 11, "DESCRIBE") \
  X(WIRE_DESCRIBED, 12, "DESCRIBED")

enum wire_type {
#define WIRE_TYPE_ENUM(name, value, text) name = value,
  WIRE_TYPE_MAP(WIRE_TYPE_ENUM)
#undef WIRE_TYPE_ENUM
};

/* "HELLO", ... or "?" for a value outside the set. */
const char *wire_type_name(uint32_t type);

/* The 24 bytes that open every message. */
struct wire_header {
  uint32_t magic;   /* WIRE_MAGIC */
  uint16_t version; /* WIRE_VERSION of the sender */
  uint16_t type;    /* enum wire_type */
  uint32_t length;  /* body bytes after the header, <= WIRE_MAX_BODY */
  uint32_t flags;   /* 0; a receiver refuses any other value */
  uint64_t seq;     /* the sender's message counter, for logs and traces */
};

/* What both sides must agree on for blocks to mean the same bytes: the
 * block size and the protocol version, hashed (FNV-1a 64 over the 8
 * little-endian bytes of block_size, then the 2 of WIRE_VERSION, as the
 * header carries it). */
uint64_t wire_layout_hash(uint64_t block_size);

struct wire_hello {
  uint64_t layout_hash; /* wire_layout_hash of the client's configuration */
  uint64_t client_id;   /* random per client process start: names it in the server's logs */
  uint32_t tp_rank;     /* the client's rank, for logs */
  uint64_t group_id;    /* the client host's processes that share one region: the pins of
                         * one are the others' to describe, pull and release; 0: none */
};

struct wire_welcome {
  uint64_t server_id;   /* random per server start: a change means the producer restarted */
  uint64_t block_size;  /* bytes per block */
  uint32_t num_blocks;  /* blocks of the server's region */
  uint64_t region_base; /* remote address of block 0, for RMA gets */
  uint32_t rkey_len;    /* 1..WIRE_MAX_RKEY */
  const uint8_t *rkey;  /* packed UCX remote key of the region (view) */
};

struct wire_refuse {
  int32_t code;        /* an ECC_ERR_* value */
  uint32_t reason_len; /* 0..WIRE_MAX_REASON */
  const char *reason;  /* not NUL-terminated, no NUL inside (view) */
};

struct wire_key {
  uint32_t len;    /* 1..ECC_KEY_MAX */
  const char *key; /* not NUL-terminated (view) */
};

struct wire_lookup {
  uint64_t req_id; /* echoed by FOUND */
  uint32_t ranks;  /* releases each pin needs: >= 1; a server refuses more than ECC_RANKS_MAX */
  uint32_t n_keys; /* 1..WIRE_MAX_KEYS */
  /* The keys, decoded lazily: wire_lookup_key(msg, i, &k) for i < n_keys. */
  const uint8_t *keys;
  uint32_t keys_bytes;
};

struct wire_run {
  uint32_t first; /* first block id */
  uint32_t count; /* >= 1; first + count <= UINT32_MAX */
};

struct wire_found_entry {
  uint32_t found;  /* 1: ready and pinned for the client; 0: absent (the rest is 0) */
  uint32_t n_runs; /* 1..WIRE_MAX_RUNS when found */
  uint64_t nbytes; /* the entry's bytes: >= 1 when found */
  uint64_t token;  /* the server's pin token, for RELEASE */
  struct wire_run runs[WIRE_MAX_RUNS];
};

struct wire_found {
  uint64_t req_id;        /* the LOOKUP's */
  int32_t status;         /* ECC_OK, or the server's error for the whole lookup */
  uint32_t n;             /* the LOOKUP's n_keys (1..WIRE_MAX_KEYS) when ECC_OK, else 0 */
  const uint8_t *entries; /* decoded lazily: wire_found_entry(msg, i, &e) */
  uint32_t entries_bytes;
};

struct wire_release {
  uint32_t n;            /* 1..WIRE_MAX_TOKENS */
  const uint8_t *tokens; /* n little-endian uint64 (view): wire_release_token(msg, i) */
};

/* A client asks for the bytes of an entry it holds a pin on; the server
 * sends them as data messages (wire_data below) and, if it cannot, PULLED
 * with the error. */
struct wire_pull {
  uint64_t req_id; /* names the data messages that answer it */
  uint64_t token;  /* the server's pin token, from FOUND */
};

struct wire_pulled {
  uint64_t req_id; /* the PULL's */
  int32_t status;  /* an ECC_ERR_* value: why no (more) bytes come */
};

/* A client process asks what a pin another process of its group took is
 * (a token handed from a scheduler to a worker): the server answers with
 * DESCRIBED, the entry and its key, or the error. */
struct wire_describe {
  uint64_t req_id; /* echoed by DESCRIBED */
  uint64_t token;  /* the server's pin token */
};

struct wire_described {
  uint64_t req_id;               /* the DESCRIBE's */
  int32_t status;                /* ECC_OK, or why not (ECC_ERR_CLOSED: no pin of the group) */
  struct wire_found_entry entry; /* with ECC_OK: found 1; else all 0 */
  struct wire_key key;           /* with ECC_OK: the entry's key; else len 0 (view) */
};

struct wire_ping {
  uint64_t nonce; /* echoed by PONG */
};

/* A decoded message: the header, and the body of its type. */
struct wire_msg {
  struct wire_header h;
  union {
    struct wire_hello hello;
    struct wire_welcome welcome;
    struct wire_refuse refuse;
    struct wire_lookup lookup;
    struct wire_found found;
    struct wire_release release;
    struct wire_ping ping; /* PING and PONG */
    struct wire_pull pull;
    struct wire_pulled pulled;
    struct wire_describe describe;
    struct wire_described described;
  } u;
};

/* Decodes the message of `len` bytes at buf. ECC_OK; ECC_ERR_INCOMPATIBLE
 * for another magic or version (why names both values); ECC_ERR_INVALID
 * for anything malformed (why names the field, the value and the limit).
 * On error *out is zeroed. A FOUND's and a LOOKUP's items are checked here
 * in full, so the accessors below cannot fail on a message that decoded. */
int wire_decode(const uint8_t *buf, size_t len, struct wire_msg *out, char *why, size_t why_cap);

/* Item i of a decoded message (i below its count; past it, or on a message
 * of another type, the item reads as zeros and the token as 0). */
void wire_lookup_key(const struct wire_msg *m, uint32_t i, struct wire_key *out);
void wire_found_entry(const struct wire_msg *m, uint32_t i, struct wire_found_entry *out);
uint64_t wire_release_token(const struct wire_msg *m, uint32_t i);

/* Encoders: write the whole message (header included, seq as given) into
 * buf and return its length, or 0 if it does not fit in cap or an argument
 * breaks a limit the decoder checks (so nothing the decoder would refuse is
 * ever sent); a refused call writes nothing. Keys and the reason are C
 * strings (reason NULL: none); a FOUND's entries may be NULL when n is 0. */
size_t wire_encode_hello(uint8_t *buf, size_t cap, uint64_t seq, const struct wire_hello *m);
size_t wire_encode_welcome(uint8_t *buf, size_t cap, uint64_t seq, const struct wire_welcome *m);
size_t wire_encode_refuse(uint8_t *buf, size_t cap, uint64_t seq, int32_t code, const char *reason);
size_t wire_encode_lookup(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, uint32_t ranks,
                          const char *const *keys, uint32_t n_keys);
size_t wire_encode_found(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, int32_t status,
                         const struct wire_found_entry *entries, uint32_t n);
size_t wire_encode_release(uint8_t *buf, size_t cap, uint64_t seq, const uint64_t *tokens,
                           uint32_t n);
size_t wire_encode_ping(uint8_t *buf, size_t cap, uint64_t seq, int pong, uint64_t nonce);

size_t wire_encode_pull(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, uint64_t token);
size_t wire_encode_pulled(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id, int32_t status);
size_t wire_encode_describe(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id,
                            uint64_t token);
/* With status ECC_OK, entry (found) and key describe the pin; otherwise both
 * are ignored (may be NULL). */
size_t wire_encode_described(uint8_t *buf, size_t cap, uint64_t seq, uint64_t req_id,
                             int32_t status, const struct wire_found_entry *entry, const char *key);

/* The header of a data message, which carries bytes of a pulled entry as
 * its payload (a separate active message, so that the bytes need no copy
 * into a wire buffer): magic u32, version u16, flags u16 (0), the PULL's
 * req_id u64 and the payload's offset in the entry u64. */
#define WIRE_DATA_HEADER_BYTES 24u
/* A data message carries the entry's bytes [offset, offset + len) with
 * offset a multiple of this and len = min(this, nbytes - offset): a client
 * can then account for every byte once, in whatever order they arrive. */
#define WIRE_DATA_CHUNK (256u << 10)

struct wire_data {
  uint64_t req_id;
  uint64_t offset;
};

void wire_encode_data(uint8_t out[WIRE_DATA_HEADER_BYTES], uint64_t req_id, uint64_t offset);
/* ECC_OK, ECC_ERR_INCOMPATIBLE for another magic or version, ECC_ERR_INVALID
 * for another length or nonzero flags. */
int wire_decode_data(const uint8_t *hdr, size_t len, struct wire_data *out, char *why,
                     size_t why_cap);

/* Bytes the largest message of a type can take, for buffer sizing; 0 for
 * a value outside the set. */
size_t wire_max_bytes(enum wire_type type);

#endif
