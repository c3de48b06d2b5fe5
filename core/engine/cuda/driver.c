/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.c - the one lookup of CUDA driver functions by name and version,
 * for the context switch of every engine call and the batched copy.
 */
#include "core/engine/cuda/cuda_engine.h"

void *cuda_driver_fn(const char *name, unsigned version)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return q == cudaDriverEntryPointSuccess ? fn : NULL;
}
