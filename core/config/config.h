/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - the plugin's configuration: its published keys and defaults, and
 * the parsing of the host's key/value pairs into one checked struct.
 */
#ifndef ECC_CONFIG_H
#define ECC_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/names.h"
#include "ecc_plugin_v1.h"

/* The configuration's closed sets, each written once:
 * X(constant, value, the word INI files use). */
#define CONFIG_ROLE_MAP(X)        \
  X(ROLE_PRODUCER, 1, "producer") \
  X(ROLE_CONSUMER, 2, "consumer") \
  X(ROLE_BOTH, 3, "both")
#define CONFIG_PIN_MAP(X) \
  X(PIN_AUTO, 0, "auto")  \
  X(PIN_ON, 1, "on")      \
  X(PIN_OFF, 2, "off")
#define CONFIG_ENGINE_MAP(X) \
  X(ENGINE_AUTO, 0, "auto")  \
  X(ENGINE_HOST, 1, "host")  \
  X(ENGINE_CUDA, 2, "cuda")
#define CONFIG_METHOD_MAP(X) \
  X(METHOD_AUTO, 0, "auto")  \
  X(METHOD_DMA, 1, "dma")    \
  X(METHOD_KERNEL, 2, "kernel")
#define CONFIG_POLICY_MAP(X) \
  X(POLICY_LRU, 0, "lru")    \
  X(POLICY_COST, 1, "cost")
#define CONFIG_BOOL_MAP(X)    \
  X(CONFIG_FALSE, 0, "false") \
  X(CONFIG_TRUE, 1, "true")
/* Words every boolean key (and pinning.enabled besides "auto") accepts:
 * X(word, value). */
#define CONFIG_BOOL_WORD_MAP(X) \
  X("true", 1)                  \
  X("false", 0)                 \
  X("on", 1)                    \
  X("off", 0)                   \
  X("yes", 1)                   \
  X("no", 0)
/* Element types of a row: X(name, bytes). */
#define CONFIG_DTYPE_MAP(X) \
  X("float32", 4)           \
  X("float16", 2)           \
  X("bfloat16", 2)          \
  X("float8", 1)            \
  X("int8", 1)

#define CONFIG_ENUM(name, value, text) name = value,
enum conn_role { CONFIG_ROLE_MAP(CONFIG_ENUM) };
enum pin_mode { CONFIG_PIN_MAP(CONFIG_ENUM) };
enum engine_kind { CONFIG_ENGINE_MAP(CONFIG_ENUM) };
enum cuda_method { CONFIG_METHOD_MAP(CONFIG_ENUM) };
enum config_bool { CONFIG_BOOL_MAP(CONFIG_ENUM) };
enum dir_policy_kind { CONFIG_POLICY_MAP(CONFIG_ENUM) };
#undef CONFIG_ENUM

struct plugin_config {
  int role;                           /* enum conn_role */
  uint32_t tp_rank;                   /* tensor-parallel rank of this process */
  uint32_t pcp_rank;                  /* prefill-context-parallel rank of this process */
  char region_name[ECC_NAME_MAX + 1]; /* names.h */
  char region_folder[128];            /* folder of the region file; "" for /dev/shm/ecc-<euid> */
  uint64_t region_size;               /* bytes of block data requested */
  uint64_t block_size;                /* bytes per block */
  uint64_t num_blocks;                /* floor(region_size / block_size) */
  int region_mode;                    /* enum region_mode (region.h) */
  uint32_t join_timeout_ms;           /* how long a joiner waits for the creator */
  int reap_orphans;                   /* unlink dead regions before opening */
  int require_tmpfs;                  /* refuse a region_folder that is not a tmpfs */
  int persist;                        /* keep the region after its last process (bool) */
  int pin;                            /* enum pin_mode */
  int engine;                         /* enum engine_kind */
  int method;                         /* enum cuda_method */
  int device;                         /* CUDA device ordinal, -1 for the current one */
  uint32_t max_sms;                   /* SMs the kernel method may use */
  uint32_t host_threads;              /* copy threads of the host engine */
  uint32_t max_inflight;              /* in-flight transfers per direction */
  int directory;                      /* the region carries a directory (bool) */
  uint32_t dir_max_entries;           /* its entry slots; 0: derived from num_blocks */
  uint32_t dir_max_pins;              /* its pin slots; 0: max_entries */
  uint32_t dir_reserve_timeout_ms;    /* reclaim a live process's reservation after; 0: never */
  uint32_t dir_pin_timeout_ms;        /* the same for a pin */
  uint32_t dir_lock_timeout_ms;       /* longest wait for the directory's lock, >= 1 */
  int dir_policy;                     /* enum dir_policy_kind */
  uint32_t dir_event_slots;           /* residency events the region's ring holds */
};

/* Number of published keys (checked against the table in config.c). */
#define CONFIG_N_PARAMS 29
extern const ecc_param_v1_t config_params[CONFIG_N_PARAMS];
extern const size_t config_n_params;

/* Parse and check `n` pairs (defaults for absent keys). On error returns
 * ECC_ERR_CONFIG with the key and the reason written to err. */
int config_parse(const ecc_kv_v1_t *kv, size_t n, struct plugin_config *out, char *err,
                 size_t err_cap);

/* Parse a byte size: a whole number with an optional unit (B, K/KiB, M/MiB,
 * G/GiB, T/TiB are powers of 1024; KB, MB, GB, TB powers of 1000).
 * Returns 0, or -1 if the text is not such a size or overflows 64 bits. */
int config_parse_size(const char *text, uint64_t *out);

/* One of CONFIG_BOOL_WORD_MAP's words into *out: 0, or -1 for any other
 * text (*out unchanged). Every boolean key of every plugin reads this way. */
int config_bool_word(const char *text, bool *out);

/* The region folder create would use: region_folder, or the per-user
 * default written to buf. Touches nothing. */
const char *config_region_folder(const struct plugin_config *c, char *buf, size_t cap);

/* The INI's word for a role, engine or copy method ("?" for none). */
const char *config_role_name(int role);
const char *config_engine_name(int engine);
const char *config_method_name(int method);
const char *config_policy_name(int policy);

#endif /* ECC_CONFIG_H */
