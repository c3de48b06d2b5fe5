/* SPDX-License-Identifier: Apache-2.0 */
/*
 * version.c - ecc_version(): the project's version from project() in the
 * top CMakeLists.txt, the text eccctl --version and the shm plugin print too.
 */
#include "ecc_build_info.h"
#include "ecc_host.h"
#include "host-shim/shim_connector.h"

ECC_API const char *ecc_version(void)
{
  return ECC_PROJECT_VERSION;
}
