/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine_cuda_stub.c - stands in for the CUDA engine in builds without the
 * CUDA toolkit, so `engine.type = auto` falls back to the host engine and
 * `engine.type = cuda` fails with a clear reason.
 */
#include <stdio.h>

#include "core/engine/engine.h"

int engine_cuda_create(const struct plugin_config *cfg, struct region *r, struct ecc_log *log,
                       struct engine *out)
{
  (void)cfg;
  (void)r;
  (void)log;
  snprintf(out->detail, sizeof(out->detail), "this plugin was built without the CUDA engine");
  return ECC_ERR_UNSUPPORTED;
}

int engine_cuda_built(void)
{
  return 0;
}
