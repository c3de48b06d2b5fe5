/* SPDX-License-Identifier: Apache-2.0 */
/*
 * helpers.h - small things every test file needs: unique region names, INI
 * files written on the fly, and opening the real plugin through the shim.
 */
#ifndef ECC_TEST_HELPERS_H
#define ECC_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ecc_host.h"

/* A region name unique to this process and call, e.g. "t12345-3". */
const char *th_region_name(void);

/* Write `text` to a fresh temporary file whose name ends with `suffix`;
 * returns its path (static storage, one per call, up to 64 live paths). */
const char *th_write_temp(const char *text, const char *suffix);

/* Format `fmt` into a fresh temporary INI file; returns its path. */
const char *th_ini_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The path of fixture plugin `name` (tests/fixtures/<name>.c), and an INI
 * loading it by path with `extra` lines after (may be NULL). Static
 * storage, 8 live paths at a time. */
const char *th_fixture(const char *name);
const char *th_fixture_ini(const char *name, const char *extra);

/* A fresh path in /tmp that nothing exists at yet, for a fixture's trace
 * file (8 live at a time). */
const char *th_trace_path(void);

/* The text of a file (static storage, up to 64 KiB), or NULL if it cannot
 * be read. */
const char *th_read_file(const char *path);

/* "dir/rel" (static storage, 8 live at a time). */
const char *th_path_in(const char *dir, const char *rel);

/* mkdir, then chmod to exactly `mode` whatever the umask. */
void th_make_dir(const char *path, mode_t mode);

/* Copy a file to `to` (created or truncated) and give the copy `mode`. */
void th_copy_file(const char *from, const char *to, mode_t mode);

/* Whether any file under `dir` is mapped into this process. */
bool th_mapped_under(const char *dir);

/* Log lines kept as text, "[level] message\n" each: th_capture is a log
 * callback for ecc_open_options_t, th_capturing_host() lends it to the
 * plugin's modules (every level) when a test calls them directly. */
extern char th_captured[16384];
void th_capture(void *user, int level, const char *msg);
const ecc_host_services_v1_t *th_capturing_host(void);

/* Write an INI for the real shm plugin (by absolute path) with the host
 * engine, the given role and region name, and `extra` appended verbatim
 * (may be NULL). Returns the path. */
const char *th_ini(const char *role, const char *region, uint64_t block_size, uint64_t num_blocks,
                   const char *extra);

/* The same with the region file in `dir` (NULL: the default) and
 * `region_extra` written inside [region] (may be NULL). */
const char *th_ini_at(const char *dir, const char *role, const char *region, uint64_t block_size,
                      uint64_t num_blocks, const char *region_extra, const char *extra);

/* The path of region `name` in `dir` (static storage, 8 live at a time). */
const char *th_region_path(const char *dir, const char *name);

/* The plugin's default region directory for this user, /dev/shm/ecc-<euid>
 * (where th_ini's regions go). */
const char *th_default_dir(void);

/* Open a connector from th_ini(...), failing the test with the shim's
 * message if it cannot. */
ecc_connector_t *th_open(const char *role, const char *region, uint64_t block_size,
                         uint64_t num_blocks, const char *extra);

/* The connector's counters and description, failing the test if it has
 * none to give. */
ecc_stats_t th_stats(ecc_connector_t *c);
ecc_info_t th_describe(ecc_connector_t *c);

/* The real plugin's table, loaded with dlopen beside the shim (dlclose
 * *lib when done): the plugin's own contract, without the shim's checks. */
const ecc_plugin_v1_t *th_raw_table(void **lib);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t th_now_ns(void);

/* A TCP port of 127.0.0.1 nothing listens on right now (the kernel's pick). */
uint16_t th_free_port(void);

/* Open `ini` as `role` (connector.role overridden, the log level the
 * INI's), failing the test with the shim's message if it cannot. */
ecc_connector_t *th_open_as(const char *ini, const char *role);

/* Poll until `want` completions arrived or `timeout_ms` passed; returns how
 * many arrived (stored in out[0..]). */
size_t th_poll_until(ecc_connector_t *c, ecc_completion_t *out, size_t want, int timeout_ms);

/* Run a role of this test binary as a fresh process (fork, then exec of
 * /proc/self/exe): the forked copy of a Criterion test process already has
 * threads, so it must not start connector threads of its own. fd0 and fd1
 * (or -1) are passed to the child open; every other descriptor should be
 * close-on-exec (make pipes with pipe2(.., O_CLOEXEC)). The child dies with
 * its parent. */
pid_t th_spawn_self(const char *role, const char *ini, int fd0, int fd1);

/* In the child (call from a constructor): 1 and the arguments given to
 * th_spawn_self if this process is such a child, else 0. */
int th_child_args(const char **role, const char **ini, int *fd0, int *fd1);

/* Wait (at most timeout_ms) until /proc/locks lists no lock taken by pid;
 * returns 1 when none is left. A killed process that had a file mapped can
 * keep its flock for a while after waitpid returns (about 0.1 s was seen on
 * one machine): its mapping, which holds the file, is torn down later. */
int th_wait_locks_released(pid_t pid, int timeout_ms);

/* Entries of a directory other than . and .. (-1 if it cannot be read). */
int th_count_entries(const char *dir);

/* Open file descriptors of this process. */
int th_count_fds(void);

/* Remove dir and everything under it (symlinks are removed, not followed). */
void th_remove_tree(const char *dir);

/* Whether a file exists at path. */
int th_exists(const char *path);

/* Fill buf with bytes derived from seed (never all zero). */
void th_fill(void *buf, size_t n, uint64_t seed);

/* Runs fn(arg) on a thread of its own and fails the test if it has not
 * returned within ms (the thread is then left: it is stuck), naming `what`
 * and saying that a call back from the log callback deadlocked. */
void th_within_watchdog(int ms, const char *what, void (*fn)(void *), void *arg);
/* Whether this thread is one th_within_watchdog started. */
bool th_on_watchdog_thread(void);

#endif
