/* SPDX-License-Identifier: Apache-2.0 */
/*
 * criterion_arena.c - linked into the test programs of ThreadSanitizer
 * builds only, so that Criterion can start under TSan at all.
 *
 * Criterion's sandbox (BoxFort) places its shared arena with MAP_FIXED at
 * 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB, after checking that the
 * pages there are unmapped, and gives up after 10 random tries. Under TSan
 * almost all of that span is TSan's shadow or reserved memory, so the tries
 * nearly always fail and every test program aborts with "Could not
 * initialize inheritable arena" (Criterion issue #274). Only the span
 * 0x550000000000..0x568000000000 is application memory there. This rand_r
 * keeps Criterion's draws inside that span; every other caller gets the C
 * library's rand_r unchanged. Nothing in our own code is affected.
 */
#include <dlfcn.h>
#include <string.h>

/* Draws r with 0x200000000000 + r * 16 MiB inside TSan's PIE span. */
#define ARENA_DRAW_FIRST 0x350000
#define ARENA_DRAW_COUNT 0x18000

static int from_criterion(const void *caller)
{
  Dl_info info;
  return dladdr(caller, &info) != 0 && info.dli_fname != NULL &&
         strstr(info.dli_fname, "libcriterion") != NULL;
}

static int (*libc_rand_r)(unsigned int *);

/* Resolved before main, while the process has one thread. */
__attribute__((constructor)) static void find_libc_rand_r(void)
{
  libc_rand_r = (int (*)(unsigned int *))dlsym(RTLD_NEXT, "rand_r");
}

int rand_r(unsigned int *seed)
{
  int v = libc_rand_r(seed);
  if (from_criterion(__builtin_return_address(0)))
    return ARENA_DRAW_FIRST + v % ARENA_DRAW_COUNT;
  return v;
}
