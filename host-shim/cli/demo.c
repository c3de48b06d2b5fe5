/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.c - the `demo` command: checks the configuration, forks a producer
 * and a consumer that share one region, bounds them with a timeout, makes
 * sure no region file outlives them, and prints the figures and the verdict.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "host-shim/cli/cli.h"
#include "host-shim/cli/demo.h"

#define DEFAULT_ENTRIES 256
#define DEFAULT_ROWS 880
#define DEFAULT_PER_STEP 4
#define DEFAULT_TIMEOUT_S 120
/* Children stop on their own this long before the parent kills them, so
 * that a hang is reported with its reason. */
#define CHILD_MARGIN_S 3.0
#define REASONS_CAP 2048

void help_demo(FILE *out)
{
  fprintf(out,
          "usage: eccctl demo [OPTIONS] CONFIG\n"
          "\n"
          "Run a producer and a consumer process on the connector that the INI\n"
          "file CONFIG describes, sharing one region (the producer creates it,\n"
          "the consumer joins it). The producer saves a stream of synthetic\n"
          "encoder outputs (entries of about ROWS token rows, in blocks taken from\n"
          "the region as a ring, some entries split by holes or by the wrap),\n"
          "polls each save's completion and then hands the key and block ids to\n"
          "the consumer, which loads the entries in batches, polls, checks every\n"
          "byte and acknowledges them so their blocks can be reused. With the\n"
          "CUDA engine the entries live in GPU memory.\n"
          "\n"
          "options:\n"
          "  --entries N    entries to move (default %d)\n"
          "  --rows N       typical rows (tokens) per entry; entries vary by up to\n"
          "                 an eighth around it (default %d: a 1280x720 image)\n"
          "  --row-bytes N  bytes per row (default: the region's block size,\n"
          "                 i.e. hidden size x dtype size: one row per block)\n"
          "  --seed S       seed of the byte pattern (default 1)\n"
          "  --per-step N   entries per save step and per load step, 1..64\n"
          "                 (default %d)\n"
          "  --timeout S    fail if the demo takes longer, in seconds (default %d)\n"
          "  --corrupt K    self-test: flip one loaded byte of entry K before the\n"
          "                 check, which must then report a mismatch\n"
          "  --side S       run one side alone, in this process, for a producer and a\n"
          "                 consumer on different hosts (e.g. the ucx plugin): producer\n"
          "                 saves every entry and serves them until interrupted;\n"
          "                 consumer finds each by its key through its connector,\n"
          "                 loads and checks it (host engine, directory on)\n"
          "  --hold S       with --side producer: serve for S seconds, then close\n"
          "  -h, --help     this text\n"
          "\n"
          "Prints entries, bytes saved and loaded, GB/s of each phase (over its\n"
          "wall time, and over the engine's busy time from ecc_stats_t), mismatches,\n"
          "and a verdict line. Exit status 0 when every byte matched, 1 otherwise.\n",
          DEFAULT_ENTRIES, DEFAULT_ROWS, DEFAULT_PER_STEP, DEFAULT_TIMEOUT_S);
}

enum {
  OPT_ENTRIES = 256,
  OPT_ROWS,
  OPT_ROW_BYTES,
  OPT_SEED,
  OPT_PER_STEP,
  OPT_TIMEOUT,
  OPT_CORRUPT,
  OPT_SIDE,
  OPT_HOLD
};

static int parse_option(int ch, const char *arg, struct demo_opts *o)
{
  uint64_t v = 0;
  switch (ch) {
  case OPT_ENTRIES:
    return cli_parse_u64("demo", "--entries", arg, 1, 1000000, &o->entries);
  case OPT_ROWS:
    return cli_parse_u64("demo", "--rows", arg, 1, 1u << 20, &o->rows);
  case OPT_ROW_BYTES:
    return cli_parse_u64("demo", "--row-bytes", arg, 1, 1u << 30, &o->row_bytes);
  case OPT_SEED:
    return cli_parse_u64("demo", "--seed", arg, 0, UINT64_MAX, &o->seed);
  case OPT_PER_STEP:
    return cli_parse_u64("demo", "--per-step", arg, 1, 64, &o->per_step);
  case OPT_TIMEOUT:
    return cli_parse_u64("demo", "--timeout", arg, 5, 86400, &o->timeout_s);
  case OPT_CORRUPT:
    if (cli_parse_u64("demo", "--corrupt", arg, 0, 999999, &v) != 0)
      return -1;
    o->corrupt = (int64_t)v;
    return 0;
  case OPT_SIDE:
    if (strcmp(arg, "producer") != 0 && strcmp(arg, "consumer") != 0) {
      cli_usage_error("demo", "--side '%s': want producer or consumer", arg);
      return -1;
    }
    o->side = arg;
    return 0;
  case OPT_HOLD:
    return cli_parse_u64("demo", "--hold", arg, 1, 86400, &o->hold_s);
  default:
    return -1;
  }
}

/* Returns CLI_OK, CLI_USAGE, or -1 when --help was asked for. */
static int parse_args(int argc, char **argv, struct demo_opts *o)
{
  static const struct option long_opts[] = {
      {"entries", required_argument, NULL, OPT_ENTRIES},
      {"rows", required_argument, NULL, OPT_ROWS},
      {"row-bytes", required_argument, NULL, OPT_ROW_BYTES},
      {"seed", required_argument, NULL, OPT_SEED},
      {"per-step", required_argument, NULL, OPT_PER_STEP},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"corrupt", required_argument, NULL, OPT_CORRUPT},
      {"side", required_argument, NULL, OPT_SIDE},
      {"hold", required_argument, NULL, OPT_HOLD},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  *o = (struct demo_opts){.entries = DEFAULT_ENTRIES,
                          .rows = DEFAULT_ROWS,
                          .seed = 1,
                          .per_step = DEFAULT_PER_STEP,
                          .timeout_s = DEFAULT_TIMEOUT_S,
                          .corrupt = -1};
  optind = 1;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
    if (ch == 'h')
      return -1;
    if (ch == ':')
      return cli_usage_error("demo", "option '%s' needs a value", argv[optind - 1]);
    if (ch == '?')
      return cli_usage_error("demo", "unknown option '%s'", argv[optind - 1]);
    if (parse_option(ch, optarg, o) != 0)
      return CLI_USAGE;
  }
  if (optind >= argc)
    return cli_usage_error("demo", "missing CONFIG (an INI file)");
  if (optind + 1 < argc)
    return cli_usage_error("demo", "unexpected argument '%s'", argv[optind + 1]);
  if (o->corrupt >= 0 && (uint64_t)o->corrupt >= o->entries)
    return cli_usage_error("demo", "--corrupt %" PRId64 " names no entry (there are %" PRIu64 ")",
                           o->corrupt, o->entries);
  if (o->hold_s > 0 && (o->side == NULL || strcmp(o->side, "producer") != 0))
    return cli_usage_error("demo", "--hold goes with --side producer");
  o->config = argv[optind];
  return CLI_OK;
}

/* --side: one side in this process, its report, its verdict. */
static int run_one_side(const struct demo_opts *o)
{
  struct demo_side side;
  memset(&side, 0, sizeof(side));
  bool producer = strcmp(o->side, "producer") == 0;
  int rc = producer ? demo_side_producer(o, &side) : demo_side_consumer(o, &side);
  printf("%s: %" PRIu64 " entries, %" PRIu64 " bytes in %.3f s (%.3f GB/s), engine %s, region %s\n",
         o->side, side.entries, side.bytes, side.phase_s,
         side.phase_s > 0 ? (double)side.bytes / side.phase_s / 1e9 : 0.0, side.engine,
         side.region_path);
  if (rc != 0 || !side.done) {
    printf("verdict: FAILED: %s\n", side.error[0] ? side.error : "the side did not finish");
    return CLI_FAIL;
  }
  if (!producer && side.mismatched_bytes > 0) {
    printf("verdict: FAILED: %" PRIu64 " bytes of %" PRIu64 " entries differ\n",
           side.mismatched_bytes, side.mismatched_entries);
    return CLI_FAIL;
  }
  if (producer)
    printf("verdict: OK: %" PRIu64 " entries (%" PRIu64 " bytes) saved and served\n", side.entries,
           side.bytes);
  else
    printf("verdict: OK: every byte of %" PRIu64 " entries (%" PRIu64 " bytes) matched\n",
           side.entries, side.bytes);
  return CLI_OK;
}

/* ---- the two children ---------------------------------------------------- */

struct child {
  const char *name;
  pid_t pid;
  int status;     /* from waitpid, valid once reaped */
  int fork_errno; /* why it could not be started (pid -1) */
  int reaped;
  int timed_out;
};

typedef int (*child_body)(const struct demo_opts *, int, int, struct demo_side *);

/* Fork a child running body(o, fd_a, fd_b, side); it first closes the two
 * pipe ends that belong to its peer. */
static void spawn(struct child *ch, child_body body, const struct demo_opts *o, int fd_a, int fd_b,
                  const int peer_fds[2], struct demo_side *side)
{
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(peer_fds[0]);
    close(peer_fds[1]);
    /* exit, not _exit: sanitizer leak checks run at exit. */
    exit(body(o, fd_a, fd_b, side));
  }
  ch->pid = pid;
  ch->fork_errno = pid < 0 ? errno : 0;
  ch->reaped = pid < 0; /* nothing to wait for */
}

static void reap(struct child *ch, int flags)
{
  if (ch->reaped)
    return;
  pid_t r;
  do {
    r = waitpid(ch->pid, &ch->status, flags);
  } while (r < 0 && errno == EINTR);
  if (r == ch->pid || (r < 0 && errno == ECHILD))
    ch->reaped = 1;
}

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Wait for both children until the deadline; then stop what is left. */
static void wait_children(struct child kids[2], double deadline)
{
  while (!(kids[0].reaped && kids[1].reaped) && demo_now() < deadline) {
    reap(&kids[0], WNOHANG);
    reap(&kids[1], WNOHANG);
    if (!(kids[0].reaped && kids[1].reaped))
      sleep_ms(5);
  }
  for (int sig_round = 0; sig_round < 2; sig_round++) {
    for (int i = 0; i < 2; i++) {
      if (kids[i].pid > 0 && !kids[i].reaped) {
        kids[i].timed_out = 1;
        kill(kids[i].pid, sig_round == 0 ? SIGTERM : SIGKILL);
      }
    }
    double until = demo_now() + 2.0;
    while (!(kids[0].reaped && kids[1].reaped) && demo_now() < until) {
      reap(&kids[0], WNOHANG);
      reap(&kids[1], WNOHANG);
      sleep_ms(5);
    }
  }
  reap(&kids[0], 0);
  reap(&kids[1], 0);
}

/* ---- the verdict --------------------------------------------------------- */

struct reasons {
  char text[REASONS_CAP];
  size_t len;
};

static void add_reason(struct reasons *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add_reason(struct reasons *r, const char *fmt, ...)
{
  if (r->len + 3 >= sizeof(r->text))
    return;
  if (r->len > 0) {
    memcpy(r->text + r->len, "; ", 3);
    r->len += 2;
  }
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(r->text + r->len, sizeof(r->text) - r->len, fmt, ap);
  va_end(ap);
  if (n > 0)
    r->len += (size_t)n < sizeof(r->text) - r->len ? (size_t)n : sizeof(r->text) - r->len - 1;
}

static void judge_child(struct reasons *r, const struct child *ch, const struct demo_side *side,
                        uint64_t timeout_s)
{
  if (ch->pid < 0) {
    add_reason(r, "could not start the %s: %s", ch->name,
               ch->fork_errno ? strerror(ch->fork_errno) : "an earlier step failed");
    return;
  }
  if (ch->timed_out)
    add_reason(r, "%s hung and was stopped after %" PRIu64 " s", ch->name, timeout_s);
  else if (WIFSIGNALED(ch->status))
    add_reason(r, "%s was killed by signal %d", ch->name, WTERMSIG(ch->status));
  else if (WIFEXITED(ch->status) && WEXITSTATUS(ch->status) != 0 && side->error[0] == 0)
    add_reason(r, "%s exited with status %d", ch->name, WEXITSTATUS(ch->status));
  if (side->error[0])
    add_reason(r, "%s: %s", ch->name, side->error);
  else if (!side->done && !ch->timed_out && WIFEXITED(ch->status) && WEXITSTATUS(ch->status) == 0)
    add_reason(r, "%s did not finish", ch->name);
}

/* The last holder removes the region; if none could (one was killed), remove
 * the orphan here, but only when no process holds it any more. */
static void judge_region(struct reasons *r, const char *path)
{
  if (path[0] == '\0')
    return;
  struct stat st;
  if (lstat(path, &st) != 0)
    return;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0) {
    unlink(path);
    add_reason(r, "the region file %s was left behind (removed now)", path);
  } else {
    add_reason(r, "the region file %s is still there and in use", path);
  }
  if (fd >= 0)
    close(fd);
}

static uint64_t expected_bytes(const struct demo_opts *o, uint64_t row_bytes)
{
  uint64_t total = 0;
  for (uint64_t i = 0; i < o->entries; i++)
    total += demo_entry_rows(o, i) * row_bytes;
  return total;
}

static void judge_counts(struct reasons *r, const struct demo_opts *o,
                         const struct demo_results *res)
{
  const struct demo_side *p = &res->producer, *c = &res->consumer;
  if (c->mismatched_bytes)
    add_reason(r, "%" PRIu64 " bytes differed, in %" PRIu64 " entries", c->mismatched_bytes,
               c->mismatched_entries);
  /* After a child failed, short counts are its consequence, not news. */
  if (r->len > 0)
    return;
  if (p->entries != o->entries)
    add_reason(r, "the producer saved %" PRIu64 " of %" PRIu64 " entries", p->entries, o->entries);
  if (c->entries != o->entries)
    add_reason(r, "the consumer checked %" PRIu64 " of %" PRIu64 " entries", c->entries,
               o->entries);
  uint64_t want = p->row_bytes ? expected_bytes(o, p->row_bytes) : 0;
  if (p->row_bytes && p->entries == o->entries && p->bytes != want)
    add_reason(r, "saved %" PRIu64 " bytes, expected %" PRIu64, p->bytes, want);
  if (c->bytes != p->bytes)
    add_reason(r, "loaded %" PRIu64 " bytes but saved %" PRIu64, c->bytes, p->bytes);
}

/* ---- the report ---------------------------------------------------------- */

static void print_rate(const char *label, uint64_t bytes, double phase_s, const struct demo_side *s)
{
  printf("%-13s ", label);
  if (phase_s > 0)
    printf("%.2f over the phase's wall time (%.3f s)", (double)bytes / phase_s / 1e9, phase_s);
  else
    printf("n/a over wall time");
  if (s->have_stats && s->stat_busy_ns > 0)
    printf(", %.2f over the engine's busy time (%.3f s, %" PRIu64 " transfers, %" PRIu64
           " descriptors)",
           (double)s->stat_bytes / (double)s->stat_busy_ns, (double)s->stat_busy_ns / 1e9,
           s->stat_transfers, s->stat_descriptors);
  printf("\n");
}

static void print_report(const struct demo_opts *o, const struct demo_results *res,
                         const char *summary)
{
  const struct demo_side *p = &res->producer, *c = &res->consumer;
  printf("demo:         %s (%s)\n", o->config, summary);
  if (p->block_size) {
    printf("region:       %s, %" PRIu64 " blocks of %" PRIu64 " B (%.1f MiB), created by "
           "the %s\n",
           p->region_path, p->num_blocks, p->block_size,
           (double)(p->num_blocks * p->block_size) / 1048576.0,
           p->creator   ? "producer"
           : c->creator ? "consumer"
                        : "another process");
    printf("engine:       %s (%s); entries in %s memory\n", p->engine, p->engine_detail,
           p->on_gpu ? "GPU" : "host");
    printf(
        "stream:       %" PRIu64 " entries of %" PRIu64 "..%" PRIu64 " rows x %" PRIu64
        " B, %" PRIu64 " per step, seed %" PRIu64 "; %" PRIu64 " entries not one run of blocks\n",
        o->entries, p->min_rows, p->max_rows, p->row_bytes, o->per_step, o->seed, p->split_entries);
    printf("steps:        %" PRIu64 " save steps, %" PRIu64 " load steps\n", p->steps, c->steps);
  }
  printf("entries:      %" PRIu64 " saved, %" PRIu64 " loaded and checked\n", p->entries,
         c->entries);
  printf("bytes saved:  %" PRIu64 " (%.1f MB)\n", p->bytes, (double)p->bytes / 1e6);
  printf("bytes loaded: %" PRIu64 " (%.1f MB)\n", c->bytes, (double)c->bytes / 1e6);
  print_rate("save GB/s:", p->bytes, p->phase_s, p);
  print_rate("load GB/s:", c->bytes, c->phase_s, c);
  printf("mismatches:   %" PRIu64 " bytes in %" PRIu64 " entries\n", c->mismatched_bytes,
         c->mismatched_entries);
}

/* ---- the command --------------------------------------------------------- */

static struct demo_results *shared_results(void)
{
  void *m = mmap(NULL, sizeof(struct demo_results), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  memset(m, 0, sizeof(struct demo_results));
  return m;
}

static int run_children(const struct demo_opts *o, struct demo_results *res, struct child kids[2])
{
  int msg[2], ack[2];
  if (pipe(msg) != 0)
    return -1;
  if (pipe(ack) != 0) {
    close(msg[0]);
    close(msg[1]);
    return -1;
  }
  /* A child whose peer died must see EPIPE, not die of SIGPIPE. */
  signal(SIGPIPE, SIG_IGN);
  const int producer_peer[2] = {msg[0], ack[1]};
  const int consumer_peer[2] = {msg[1], ack[0]};
  spawn(&kids[0], demo_producer, o, msg[1], ack[0], producer_peer, &res->producer);
  if (kids[0].pid > 0)
    spawn(&kids[1], demo_consumer, o, msg[0], ack[1], consumer_peer, &res->consumer);
  close(msg[0]);
  close(msg[1]);
  close(ack[0]);
  close(ack[1]);
  return 0;
}

int cmd_demo(int argc, char **argv)
{
  struct demo_opts o;
  int rc = parse_args(argc, argv, &o);
  if (rc < 0) {
    help_demo(stdout);
    return CLI_OK;
  }
  if (rc != CLI_OK)
    return rc;

  char summary[1024] = "";
  rc = ecc_check(o.config, NULL, NULL, summary, sizeof(summary));
  if (rc != ECC_OK) {
    cli_config_error("demo", o.config, summary, rc);
    printf("verdict: FAILED: the configuration is not usable\n");
    return CLI_FAIL;
  }
  if (o.side != NULL) {
    o.deadline = demo_now() + (double)o.timeout_s;
    return run_one_side(&o);
  }
  struct demo_results *res = shared_results();
  if (res == NULL) {
    fprintf(stderr, "eccctl demo: cannot map shared memory: %s\n", strerror(errno));
    return CLI_FAIL;
  }
  double start = demo_now();
  o.deadline = start + (double)o.timeout_s - CHILD_MARGIN_S;
  struct child kids[2] = {{.name = "producer", .pid = -1, .reaped = 1},
                          {.name = "consumer", .pid = -1, .reaped = 1}};
  struct reasons why = {.len = 0};
  if (run_children(&o, res, kids) != 0)
    add_reason(&why, "cannot create pipes: %s", strerror(errno));
  wait_children(kids, start + (double)o.timeout_s);

  judge_child(&why, &kids[0], &res->producer, o.timeout_s);
  judge_child(&why, &kids[1], &res->consumer, o.timeout_s);
  judge_region(&why, res->producer.region_path[0] ? res->producer.region_path
                                                  : res->consumer.region_path);
  judge_counts(&why, &o, res);
  print_report(&o, res, summary);
  if (why.len > 0) {
    printf("verdict: FAILED: %s\n", why.text);
    rc = CLI_FAIL;
  } else {
    printf("verdict: OK: every byte of %" PRIu64 " entries (%" PRIu64 " bytes) matched\n",
           o.entries, res->consumer.bytes);
    rc = CLI_OK;
  }
  munmap(res, sizeof(*res));
  return rc;
}
