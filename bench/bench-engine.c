/* bench-engine: the storage engine's own figures, measured on a real file.
 *
 * Drives pools through the engine's API alone (no nbdkit, no NBD), on pool
 * files in a fresh directory under /var/tmp (--dir), and prints one table
 * (and, with --json, the same figures as JSON):
 *
 *  - inserts per second with sequential and with random 8-byte keys and
 *    64-byte values into a tree far larger than the node cache (16 MiB),
 *    committing every 10,000 inserts (and whenever the engine's dirty limit
 *    says so), then random lookups per second;
 *  - peak RSS and the node cache's own bytes at 25%, 50% and 100% of each
 *    insert run, to show that memory does not follow the tree's size;
 *  - the latency of pool_commit with 1, 100 and 10,000 dirty leaves;
 *  - the time to open a pool of a million items and look one up, with the
 *    page cache dropped first when we may (root);
 *  - the time fsck takes on the pools built;
 *  - a yardstick: the same payload written to a plain file on the same
 *    disk, and the latency of one fdatasync there.
 *
 * The pool sits on a small timing device stacked on the file device, so
 * that every figure can be split into time in pread, pwrite and fdatasync
 * and time in the engine itself.  Single-threaded: no commit thread; every
 * time is wall time on CLOCK_MONOTONIC.  README-engine.md says what each
 * figure means.
 *
 * The program is three files: this one holds the work directory, the
 * messages, the instruments (clocks, memory figures from /proc, the timing
 * device) and the command line; bench-engine-runs.c holds the measurement
 * runs and bench-engine-report.c the table and the JSON.  bench-engine.h
 * holds what they share.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench-engine.h"

#define DEFAULT_ITEMS 2000000u
#define QUICK_ITEMS 300000u
#define OPEN_ITEMS 1000000u
#define DEFAULT_SEED 20261202u

/* ---------------------------------------------------------------- setup */

/* The work directory and the files in it, as full paths made before any
 * file exists, so that the signal handler only has to unlink them.
 */
enum work_file { WF_SEQ, WF_RAND, WF_OPEN, WF_YARD, WF_COUNT };
static const char *const work_names[WF_COUNT] = {
  "seq.pool", "rand.pool", "open.pool", "yardstick.dat",
};
char work_dir[PATH_MAX];
static char work_path[WF_COUNT][PATH_MAX + 32];
static bool work_keep;

/* Remove the work files and directory (async-signal-safe). */
static void
work_remove (void)
{
  if (work_dir[0] == '\0' || work_keep)
    return;
  for (int i = 0; i < WF_COUNT; i++)
    unlink (work_path[i]);
  rmdir (work_dir);
}

/* Remove one work file once its phase is over (unless --keep). */
static void
work_done (enum work_file f)
{
  if (!work_keep)
    unlink (work_path[f]);
}

/* Clean up on SIGINT / SIGTERM. */
static void
on_signal (int sig)
{
  work_remove ();
  _exit (128 + sig);
}

/* Print a message and exit 1 (the exit handler removes the files). */
void __attribute__ ((noreturn)) CAIRN_PRINTF (1, 2)
die (const char *fmt, ...)
{
  va_list ap;

  fflush (stdout);
  fprintf (stderr, "bench-engine: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\n");
  exit (1);
}

/* Die with the engine's message when an engine call failed. */
void
check (int r, const char *what)
{
  if (r < 0)
    die ("%s: %s", what, cairn_errmsg ());
}

/* A progress line on stderr. */
void CAIRN_PRINTF (1, 2)
note (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "bench-engine: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\n");
}

/* Make the work directory under dir and the paths of its files. */
static void
work_setup (const char *dir, bool keep)
{
  if (snprintf (work_dir, sizeof work_dir, "%s/cairn-bench-engine.XXXXXX",
                dir) >= (int) sizeof work_dir)
    die ("%s: path too long", dir);
  if (mkdtemp (work_dir) == NULL)
    die ("mkdtemp %s: %m", work_dir);
  for (int i = 0; i < WF_COUNT; i++)
    snprintf (work_path[i], sizeof work_path[i], "%s/%s", work_dir,
              work_names[i]);
  work_keep = keep;
  atexit (work_remove);
  signal (SIGINT, on_signal);
  signal (SIGTERM, on_signal);
}

/* The name of the file system that holds dir. */
static void
fs_name (const char *dir, char *buf, size_t len)
{
  struct statfs sf;
  const char *name = "unknown";

  if (statfs (dir, &sf) == 0)
    switch ((unsigned long) sf.f_type) {
    case 0xef53: name = "ext4"; break;
    case 0x58465342: name = "xfs"; break;
    case 0x9123683e: name = "btrfs"; break;
    case 0x01021994: name = "tmpfs"; break;
    case 0x794c7630: name = "overlayfs"; break;
    case 0x2fc12fc1: name = "zfs"; break;
    default: break;
    }
  snprintf (buf, len, "%s", name);
}

/* ---------------------------------------------------------------- clocks */

/* Monotonic time in nanoseconds. */
uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* Seconds since t0 (nanoseconds). */
double
secs_since (uint64_t t0)
{
  return (double) (now_ns () - t0) / 1e9;
}

/* Sort doubles, for percentiles. */
static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

/* The p-th percentile (nearest rank) of v[0..n), which gets sorted. */
double
percentile (double *v, size_t n, double p)
{
  size_t rank;

  if (n == 0)
    return 0;
  qsort (v, n, sizeof *v, cmp_double);
  rank = (size_t) (p * (double) n + 0.999999);
  return v[rank > 0 ? rank - 1 : 0];
}

/* ---------------------------------------------------------------- memory */

/* A "Vm...:" field of /proc/self/status, in KiB (0 if absent). */
uint64_t
status_kib (const char *field)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  size_t flen = strlen (field);
  char line[256];
  uint64_t v = 0;

  if (fp == NULL)
    return 0;
  while (fgets (line, sizeof line, fp))
    if (strncmp (line, field, flen) == 0) {
      v = strtoull (line + flen, NULL, 10);
      break;
    }
  fclose (fp);
  return v;
}

/* Reset VmHWM to the current RSS (Linux 4.0+); false if it cannot be. */
bool
reset_hwm (void)
{
  int fd = open ("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  bool ok;

  if (fd == -1)
    return false;
  ok = write (fd, "5", 1) == 1;
  close (fd);
  return ok;
}

/* Drop the page cache (needs root); false if it could not be. */
bool
drop_page_cache (void)
{
  int fd;
  bool ok;

  sync ();
  fd = open ("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd == -1)
    return false;
  ok = write (fd, "3", 1) == 1;
  close (fd);
  return ok;
}

/* ---------------------------------------------------------------- timing
 *
 * A device stacked on the pool file that counts and times every
 * operation, so that a figure can be split into I/O and engine time.
 */

/* Read through, timed. */
static int
timed_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct timed_dev *t = (struct timed_dev *) dev;
  uint64_t t0 = now_ns ();
  int r = dev_pread (t->lower, buf, len, off);

  t->io.read_ns += now_ns () - t0;
  t->io.reads++;
  t->io.read_bytes += len;
  return r;
}

/* Write through, timed. */
static int
timed_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
              uint64_t off)
{
  struct timed_dev *t = (struct timed_dev *) dev;
  uint64_t t0 = now_ns ();
  int r = dev_pwrite (t->lower, buf, len, off);

  t->io.write_ns += now_ns () - t0;
  t->io.writes++;
  t->io.write_bytes += len;
  return r;
}

/* Flush through (fdatasync on a file), timed. */
static int
timed_flush (struct cairn_dev *dev)
{
  struct timed_dev *t = (struct timed_dev *) dev;
  uint64_t t0 = now_ns ();
  int r = dev_flush (t->lower);

  t->io.flush_ns += now_ns () - t0;
  t->io.flushes++;
  return r;
}

/* Discard through. */
static int
timed_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  return dev_discard (((struct timed_dev *) dev)->lower, off, len);
}

/* Free the timing device; the lower device stays open. */
static void
timed_close (struct cairn_dev *dev)
{
  free (dev);
}

static const struct cairn_dev_ops timed_ops = {
  .kind = "timed",
  .pread = timed_pread,
  .pwrite = timed_pwrite,
  .flush = timed_flush,
  .discard = timed_discard,
  .close = timed_close,
};

/* Stack a timing device on lower. */
struct timed_dev *
timed_create (struct cairn_dev *lower)
{
  struct timed_dev *t = calloc (1, sizeof *t);

  if (t == NULL)
    die ("out of memory");
  t->lower = lower;
  t->dev.ops = &timed_ops;
  t->dev.size = lower->size;
  snprintf (t->dev.name, sizeof t->dev.name, "%.250s", lower->name);
  return t;
}

/* b - a, field by field. */
struct io_stats
io_sub (const struct io_stats *b, const struct io_stats *a)
{
  struct io_stats d = {
    .reads = b->reads - a->reads,
    .writes = b->writes - a->writes,
    .flushes = b->flushes - a->flushes,
    .read_bytes = b->read_bytes - a->read_bytes,
    .write_bytes = b->write_bytes - a->write_bytes,
    .read_ns = b->read_ns - a->read_ns,
    .write_ns = b->write_ns - a->write_ns,
    .flush_ns = b->flush_ns - a->flush_ns,
  };
  return d;
}

/* ---------------------------------------------------------------- main */

/* Print the usage to fp. */
static void
usage (FILE *fp)
{
  fprintf (fp,
"Usage: bench-engine [--quick] [--items N] [--open-items N] [--lookups N]\n"
"                    [--cache-mib N] [--dirty-limit-mib N] [--max-rss-mib N]\n"
"                    [--seed N|random] [--dir DIR] [--json FILE|-] [--warm]\n"
"                    [--keep]\n"
"\n"
"Benchmark the Cairn storage engine on pool files in a new directory under\n"
"DIR (default /var/tmp), removed at the end.\n"
"\n"
"  -q, --quick          %u items per insert run instead of %u, fewer reps\n"
"  -n, --items N        items per insert run\n"
"      --open-items N   items in the pool whose open is timed (default %u)\n"
"      --lookups N      random lookups after each insert run\n"
"      --cache-mib N    node cache size (default 16)\n"
"      --dirty-limit-mib N  commit the insert runs when dirty nodes pass N\n"
"                       (default: the engine's, a quarter of the cache)\n"
"      --max-rss-mib N  stop an insert run when RSS passes N (default 2048)\n"
"      --seed N|random  seed of the random keys (default %u)\n"
"  -d, --dir DIR        where to put the pool files\n"
"  -j, --json FILE      also write the figures as JSON (\"-\": stdout, and\n"
"                       the table goes to stderr)\n"
"      --warm           do not drop the page cache before timing opens\n"
"      --keep           keep the pool files\n",
           QUICK_ITEMS, DEFAULT_ITEMS, OPEN_ITEMS, DEFAULT_SEED);
}

/* A positive count from an option, or die. */
static uint64_t
parse_count (const char *opt, const char *s)
{
  char *end;
  unsigned long long v;

  errno = 0;
  v = strtoull (s, &end, 0);
  if (errno || end == s || *end || v == 0)
    die ("%s: not a positive number: %s", opt, s);
  return v;
}

/* Parse the command line into cfg. */
static void
parse_args (int argc, char **argv, struct config *cfg)
{
  enum {
    OPT_OPEN = 256, OPT_LOOKUPS, OPT_CACHE, OPT_DIRTY, OPT_MAXRSS, OPT_SEED,
    OPT_WARM, OPT_KEEP,
  };
  static const struct option opts[] = {
    { "quick", no_argument, NULL, 'q' },
    { "items", required_argument, NULL, 'n' },
    { "open-items", required_argument, NULL, OPT_OPEN },
    { "lookups", required_argument, NULL, OPT_LOOKUPS },
    { "cache-mib", required_argument, NULL, OPT_CACHE },
    { "dirty-limit-mib", required_argument, NULL, OPT_DIRTY },
    { "max-rss-mib", required_argument, NULL, OPT_MAXRSS },
    { "seed", required_argument, NULL, OPT_SEED },
    { "dir", required_argument, NULL, 'd' },
    { "json", required_argument, NULL, 'j' },
    { "warm", no_argument, NULL, OPT_WARM },
    { "keep", no_argument, NULL, OPT_KEEP },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  uint64_t items = 0, lookups = 0;
  int c;

  *cfg = (struct config) {
    .open_items = OPEN_ITEMS, .cache_bytes = 16 * MIB,
    .max_rss_kib = 2048 * 1024, .seed = DEFAULT_SEED,
    .dir = "/var/tmp", .drop_caches = true,
  };
  while ((c = getopt_long (argc, argv, "qn:d:j:h", opts, NULL)) != -1) {
    switch (c) {
    case 'q': cfg->quick = true; break;
    case 'n': items = parse_count ("--items", optarg); break;
    case OPT_OPEN:
      cfg->open_items = parse_count ("--open-items", optarg);
      break;
    case OPT_LOOKUPS: lookups = parse_count ("--lookups", optarg); break;
    case OPT_CACHE:
      cfg->cache_bytes = parse_count ("--cache-mib", optarg) * MIB;
      break;
    case OPT_DIRTY:
      cfg->dirty_limit = parse_count ("--dirty-limit-mib", optarg) * MIB;
      break;
    case OPT_MAXRSS:
      cfg->max_rss_kib = parse_count ("--max-rss-mib", optarg) * 1024;
      break;
    case OPT_SEED:
      if (strcmp (optarg, "random") == 0)
        cfg->seed = (uint64_t) time (NULL) ^ ((uint64_t) getpid () << 32);
      else
        cfg->seed = parse_count ("--seed", optarg);
      break;
    case 'd': cfg->dir = optarg; break;
    case 'j': cfg->json = optarg; break;
    case OPT_WARM: cfg->drop_caches = false; break;
    case OPT_KEEP: cfg->keep = true; break;
    case 'h': usage (stdout); exit (0);
    default: usage (stderr); exit (2);
    }
  }
  if (optind < argc) {
    usage (stderr);
    exit (2);
  }
  cfg->items = items ? items : cfg->quick ? QUICK_ITEMS : DEFAULT_ITEMS;
  cfg->lookups = lookups ? lookups : cfg->quick ? 100000 : 500000;
  if (cfg->items < 1000)
    die ("--items: at least 1000");
  if (cfg->quick) {
    cfg->commit_reps[0] = 9;
    cfg->commit_reps[1] = 5;
    cfg->commit_reps[2] = 3;
  }
  else {
    cfg->commit_reps[0] = 21;
    cfg->commit_reps[1] = 11;
    cfg->commit_reps[2] = 5;
  }
}

int
main (int argc, char **argv)
{
  struct results *res = calloc (1, sizeof *res);
  FILE *table = stdout;
  struct utsname u;
  int status = 0;

  if (res == NULL)
    die ("out of memory");
  parse_args (argc, argv, &res->cfg);
  work_setup (res->cfg.dir, res->cfg.keep);
  fs_name (work_dir, res->fs, sizeof res->fs);
  if (uname (&u) == 0)
    snprintf (res->kernel, sizeof res->kernel, "%s", u.release);
  note ("work directory %s (%s), seed %" PRIu64, work_dir, res->fs,
        res->cfg.seed);
  if (getloadavg (&res->load[0], 1) != 1)
    res->load[0] = -1;

  run_yardstick (work_path[WF_YARD],
                 res->cfg.items * (KEY_LEN + VAL_LEN), &res->yard);
  run_inserts (&res->cfg, work_path[WF_SEQ], false, &res->ins[0]);
  work_done (WF_SEQ);
  run_inserts (&res->cfg, work_path[WF_RAND], true, &res->ins[1]);
  run_commits (&res->cfg, work_path[WF_RAND], res->ins[1].tree_id,
               res->commit, &res->commit_tree_leaves,
               &res->commit_free_extents);
  work_done (WF_RAND);
  run_open (&res->cfg, work_path[WF_OPEN], &res->open);
  work_done (WF_OPEN);

  if (getloadavg (&res->load[1], 1) != 1)
    res->load[1] = -1;
  if (res->cfg.json && strcmp (res->cfg.json, "-") == 0)
    table = stderr;
  print_table (table, res);
  if (res->cfg.json) {
    FILE *fp = table == stderr ? stdout : fopen (res->cfg.json, "w");

    if (fp == NULL)
      die ("%s: %m", res->cfg.json);
    print_json (fp, res);
    if (fp != stdout && fclose (fp) != 0)
      die ("%s: %m", res->cfg.json);
  }
  for (int r = 0; r < 2; r++)
    if (res->ins[r].fsck.errors || res->ins[r].stopped)
      status = 1;
  free (res);
  return status;
}
