/*
 * status.c - ecc_strerror: the name and meaning of each status code of the
 * closed set, as constant strings that live as long as the library.
 */
#include <stddef.h>

#include "ecc_host.h"
#include "shim_connector.h"

static const struct {
  int code;
  const char *text;
} k_status[] = {
    {ECC_OK, "ECC_OK: success"},
    {ECC_ERR_INVALID, "ECC_ERR_INVALID: invalid argument"},
    {ECC_ERR_RANGE, "ECC_ERR_RANGE: block id or size out of range"},
    {ECC_ERR_ROLE, "ECC_ERR_ROLE: operation not allowed for this connector's role"},
    {ECC_ERR_BUSY, "ECC_ERR_BUSY: too many transfers in flight; poll, then retry"},
    {ECC_ERR_CONFIG, "ECC_ERR_CONFIG: unknown configuration key or bad value"},
    {ECC_ERR_INCOMPATIBLE, "ECC_ERR_INCOMPATIBLE: plugin ABI version not supported, or a plugin that breaks the ABI"},
    {ECC_ERR_REGION, "ECC_ERR_REGION: shared region is foreign, truncated, unsafe, of another layout, or gone"},
    {ECC_ERR_SYSTEM, "ECC_ERR_SYSTEM: an operating-system call failed"},
    {ECC_ERR_NOMEM, "ECC_ERR_NOMEM: out of host memory"},
    {ECC_ERR_DEVICE, "ECC_ERR_DEVICE: the GPU runtime failed"},
    {ECC_ERR_TRANSFER, "ECC_ERR_TRANSFER: a copy failed"},
    {ECC_ERR_CLOSED, "ECC_ERR_CLOSED: connector shut down, never existed, or inherited through fork"},
    {ECC_ERR_UNSUPPORTED, "ECC_ERR_UNSUPPORTED: not built in or not available here"},
};

ECC_API const char *ecc_strerror(int code)
{
  for (size_t i = 0; i < sizeof(k_status) / sizeof(k_status[0]); i++) {
    if (k_status[i].code == code)
      return k_status[i].text;
  }
  return "unknown status code: not one of ECC_OK and the ECC_ERR_* codes";
}
