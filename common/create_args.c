/* SPDX-License-Identifier: Apache-2.0 */
/*
 * create_args.c - the checks of create's arguments every plugin makes
 * (create_args.h).
 */
#include "common/create_args.h"

#include "common/errtext.h"

int create_args_check(const ecc_create_args_v1_t *args, ecc_handle_t *out)
{
  if (out != NULL)
    *out = 0;
  if (args == NULL || out == NULL)
    return ECC_ERR_INVALID;
  /* The fields read are all in the first version of the struct. */
  if (!ECC_COVERS(args, ecc_create_args_v1_t, err_cap))
    return ECC_ERR_INVALID;
  if (args->host != NULL && !ECC_COVERS(args->host, ecc_host_services_v1_t, user))
    return errtext_fail(args->err, args->err_cap, ECC_ERR_INVALID,
                        "create: the host's services struct is shorter than its first version");
  if (args->abi_major != ECC_ABI_V1_MAJOR || args->abi_minor > ECC_ABI_V1_MINOR)
    return errtext_fail(args->err, args->err_cap, ECC_ERR_INCOMPATIBLE,
                        "create: ABI %u.%u requested; this plugin implements %d.%d",
                        args->abi_major, args->abi_minor, ECC_ABI_V1_MAJOR, ECC_ABI_V1_MINOR);
  return ECC_OK;
}
