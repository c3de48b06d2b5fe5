/*
 * fuzz_ini.c - libFuzzer target: the input is an INI file, checked with
 * ecc_check against the instrumented plugin, so the bytes go through the
 * shim's reader, its [plugin] and key checks, and the plugin's validation.
 * Invariants besides "no crash": the status is one of the ABI's, the error
 * text is non-empty and NUL-terminated, names where it comes from, and a
 * second check of the same bytes says exactly the same thing. ecc_check
 * runs the key checks and the plugin's validation in a child process, so a
 * crash or hang there comes back as an error saying how the check process
 * ended; that counts as a crash here.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ecc_host.h"

#define ERR_CAP 2048
/* How ecc_check's reports about the check process itself begin: the path
 * comes from the override, which the INI's own text cannot produce. */
#define CHILD_ENDED "override: plugin " FUZZ_PLUGIN_PATH ": the check process "

static int ini_fd = -1;
static char ini_dir[64];
static char ini_path[96];

static void quiet(void *user, int level, const char *msg)
{
  (void)user;
  (void)level;
  if (msg == NULL || memchr(msg, '\0', 4096) == NULL)
    abort(); /* a log line must be a C string */
}

static void remove_ini(void)
{
  unlink(ini_path);
  rmdir(ini_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  /* The INI is a regular file in a private directory on tmpfs: the shim
   * reads only regular files that pass its ownership rule. scripts/fuzz.sh
   * removes the directory if a crash leaves it behind. */
  snprintf(ini_dir, sizeof(ini_dir), "/dev/shm/eccfuzz-ini-XXXXXX");
  if (mkdtemp(ini_dir) == NULL) {
    perror("mkdtemp");
    exit(1);
  }
  snprintf(ini_path, sizeof(ini_path), "%s/fuzz.ini", ini_dir);
  ini_fd = open(ini_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (ini_fd < 0) {
    perror(ini_path);
    exit(1);
  }
  atexit(remove_ini);
  /* Held open for the whole run, so that each ecc_check's own dlopen and
   * dlclose only count references instead of mapping the file again. */
  if (dlopen(FUZZ_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL) == NULL) {
    fprintf(stderr, "fuzz_ini: %s\n", dlerror());
    exit(1);
  }
  return 0;
}

static int known_status(int rc)
{
  return rc <= ECC_OK && rc >= ECC_ERR_UNSUPPORTED;
}

static int check(char *err, ecc_plugin_meta *meta)
{
  ecc_kv force = {"plugin.path", FUZZ_PLUGIN_PATH};
  ecc_open_options o = {.struct_size = sizeof(o), .overrides = &force, .n_overrides = 1,
                        .log = quiet, .log_level = ECC_LOG_DEBUG};
  memset(err, 0x5a, ERR_CAP); /* no NUL anywhere unless the shim writes one */
  return ecc_check(ini_path, &o, meta, err, ERR_CAP);
}

/* Where an error comes from: a line of the file, the file itself, the
 * plugin, or the override that forces the plugin's path. */
static int names_its_source(const char *err)
{
  return strstr(err, ini_path) != NULL || strstr(err, "plugin") != NULL ||
         strstr(err, "override") != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (ftruncate(ini_fd, 0) != 0 || pwrite(ini_fd, data, size, 0) != (ssize_t)size)
    abort();
  static char err[ERR_CAP], again[ERR_CAP];
  ecc_plugin_meta meta;
  int rc = check(err, &meta);
  if (!known_status(rc) || memchr(err, '\0', ERR_CAP) == NULL)
    abort();
  if (err[0] == '\0')
    abort(); /* errors carry text; success carries the plugin's summary */
  if (strncmp(err, CHILD_ENDED, strlen(CHILD_ENDED)) == 0)
    abort(); /* the shim or the plugin crashed, exited or hung in the child */
  if (rc != ECC_OK && !names_its_source(err))
    abort();
  if (rc == ECC_OK && strcmp(meta.name, "shm") != 0)
    abort();
  ecc_plugin_meta meta2;
  int rc2 = check(again, &meta2);
  if (rc2 != rc || strcmp(err, again) != 0)
    abort(); /* no hidden state between two checks */
  return 0;
}
