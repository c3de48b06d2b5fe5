/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ucx_config.h - the [ucx] keys of the cross-host plugin: its role, where
 * it listens or connects, UCX's transports, the deadlines, the shared
 * secret and what one client may hold of a server. Every other key is the
 * shm connector's (config.h), for the local region each side keeps.
 */
#ifndef ECC_UCX_CONFIG_H
#define ECC_UCX_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/conn.h"
#include "ecc_plugin_v1.h"

enum ucx_role { UCX_ROLE_SERVER = 1, UCX_ROLE_CLIENT };

struct ucx_config {
  int role;              /* enum ucx_role */
  char host[256];        /* ucx.address's host as given: a numeric address or a name */
  char addr[64];         /* numeric: host itself, or the first address its name resolves to */
  uint16_t port;         /* its port */
  char transports[64];   /* UCX_TLS */
  char net_devices[128]; /* UCX_NET_DEVICES; "" for all */
  uint32_t deadline_ms;  /* the longest a request waits for the peer's answer */
  uint32_t connect_ms;   /* the longest the handshake waits */
  bool cache;            /* client: keep pulled entries in the local directory */
  bool has_secret;       /* ucx.secret_file was given */
  uint8_t secret[32];    /* SHA-256 of its contents: the preface's key */
  uint32_t max_pins;     /* server: pins one client may hold; 0: a quarter of the pin slots */
  uint32_t max_pulls;    /* server: pulls of one client in flight */
};

/* Published keys: the shm connector's, then UCX_N_OWN of ours. */
#define UCX_N_OWN 10
#define UCX_N_PARAMS (CONFIG_N_PARAMS + UCX_N_OWN)
extern ecc_param_v1_t ucx_params[UCX_N_PARAMS];

/* Parses ours and hands the others to config_parse. ECC_ERR_CONFIG naming
 * the key on error. A name in ucx.address is resolved here, so that a
 * check refuses what create would, with the same text. */
int ucx_config_parse(const ecc_kv_v1_t *kv, size_t n, struct ucx_config *ucx,
                     struct plugin_config *local, char *err, size_t err_cap);

#endif
