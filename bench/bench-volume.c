/* Cairn volume benchmark: snapshot, diff and snapshot-delete costs against
 * volume size (issue figures: a snapshot of a 1 GiB and of a 16 GiB fully
 * written volume within 1.5x of each other; a diff of 1,000 changed blocks
 * in each within 2x; deleting a snapshot with little unique data from a
 * 16 GiB volume).
 *
 * Runs on a real pool file (sparse) in --dir (default /var/tmp), removed at
 * the end.  Build with `make -C build bench/bench-volume`; run
 * `build/bench/bench-volume [--quick] [--dir DIR] [--json]`.  --quick uses
 * 256 MiB and 4 GiB volumes instead of 1 and 16 GiB.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "volume.h"

#define REPS 5

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

static double
median (double *v, int n)
{
  qsort (v, n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void __attribute__ ((noreturn))
die (const char *what)
{
  fprintf (stderr, "bench-volume: %s: %s\n", what, cairn_errmsg ());
  exit (1);
}

/* splitmix64 */
static uint64_t
rnd (uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void
fill (uint8_t *buf, size_t len, uint64_t *seed)
{
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = rnd (seed);
    memcpy (buf + i, &v, 8);
  }
}

static int
count_run (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  (*(uint64_t *) opaque) += len;
  return 0;
}

static long
rss_kib (void)
{
  FILE *fp = fopen ("/proc/self/status", "r");
  char line[256];
  long v = -1;

  while (fp && fgets (line, sizeof line, fp))
    if (sscanf (line, "VmHWM: %ld", &v) == 1)
      break;
  if (fp)
    fclose (fp);
  return v;
}

struct figures {
  uint64_t size;
  uint64_t diff_misses;       /* node cache misses during one diff */
  double fill_s, snap_ms, diff_ms, delete_ms;
  uint64_t diff_bytes;
};

/* Fill a volume, then measure snapshot, diff and delete on it. */
static void
measure (struct cairn_pool *pool, const char *name, uint64_t size,
         struct figures *f, uint64_t *seed)
{
  const size_t chunk = 1 << 20;
  uint8_t *buf = malloc (chunk);
  struct cairn_volume *v;
  double t, snaps[REPS], diffs[REPS];
  char snap[32], from[64];

  f->size = size;
  if (vol_create (pool, name, size, NULL) < 0 || vol_open (pool, name, &v) < 0)
    die ("create");
  t = now ();
  for (uint64_t off = 0; off < size; off += chunk) {
    fill (buf, chunk, seed);
    if (vol_pwrite (v, buf, chunk, off, 0) < 0)
      die ("fill");
  }
  if (vol_flush (v) < 0)
    die ("flush");
  f->fill_s = now () - t;

  for (int rep = 0; rep < REPS; rep++) {
    /* A little dirty data, as on a live volume, then the snapshot. */
    fill (buf, 4096, seed);
    if (vol_pwrite (v, buf, 4096, (rnd (seed) % (size / 4096)) * 4096, 0) < 0)
      die ("write");
    snprintf (snap, sizeof snap, "s%d", rep);
    t = now ();
    if (snap_create (pool, name, snap) < 0)
      die ("snapshot");
    snaps[rep] = (now () - t) * 1000;
    /* 1,000 changed blocks, then the diff from the snapshot. */
    for (int i = 0; i < 1000; i++) {
      fill (buf, 4096, seed);
      if (vol_pwrite (v, buf, 4096, (rnd (seed) % (size / 4096)) * 4096, 0) < 0)
        die ("write");
    }
    if (vol_flush (v) < 0)
      die ("flush");
    snprintf (from, sizeof from, "%s@%s", name, snap);
    f->diff_bytes = 0;
    {
      struct nodecache_stats st0, st1;

      nodecache_stats (pool_cache (pool), &st0);
      t = now ();
      if (vol_diff (pool, from, name, count_run, &f->diff_bytes) < 0)
        die ("diff");
      diffs[rep] = (now () - t) * 1000;
      nodecache_stats (pool_cache (pool), &st1);
      f->diff_misses = st1.misses - st0.misses;
    }
  }
  f->snap_ms = median (snaps, REPS);
  f->diff_ms = median (diffs, REPS);
  /* Delete the oldest snapshot: little unique data (the blocks of 1,000
   * random writes and their metadata).
   */
  vol_close (v);
  t = now ();
  if (snap_delete (pool, name, "s0") < 0)
    die ("delete");
  f->delete_ms = (now () - t) * 1000;
  free (buf);
}

int
main (int argc, char **argv)
{
  const char *dir = "/var/tmp";
  bool quick = false, json = false;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct figures small, big;
  uint64_t seed = 20261202, gib = 1ull << 30;
  char path[4096];
  int c;

  while ((c = getopt_long (argc, argv, "qd:j", (struct option[]) {
        { "quick", no_argument, NULL, 'q' }, { "dir", required_argument, NULL, 'd' },
        { "json", no_argument, NULL, 'j' }, { NULL, 0, NULL, 0 } }, NULL)) != -1) {
    if (c == 'q')
      quick = true;
    else if (c == 'd')
      dir = optarg;
    else if (c == 'j')
      json = true;
    else {
      fprintf (stderr, "usage: bench-volume [--quick] [--dir DIR] [--json]\n");
      return 2;
    }
  }
  snprintf (path, sizeof path, "%s/bench-volume-%d.pool", dir, (int) getpid ());
  if (dev_file_open (path, DEV_CREATE, (quick ? 6 : 24) * gib, &dev) < 0)
    die ("create the pool file");
  if (pool_format (dev, NULL, NULL) < 0 || pool_open (dev, NULL, &pool) < 0)
    die ("pool");
  measure (pool, "small", quick ? gib / 4 : gib, &small, &seed);
  measure (pool, "big", quick ? 4 * gib : 16 * gib, &big, &seed);
  if (pool_close (pool) < 0)
    die ("close");
  dev_close (dev);
  unlink (path);

  if (json) {
    printf ("{\"small_bytes\": %" PRIu64 ", \"big_bytes\": %" PRIu64
            ", \"snapshot_ms\": [%.3f, %.3f], \"diff_1000_ms\": [%.3f, %.3f], "
            "\"delete_snapshot_ms\": [%.3f, %.3f], \"peak_rss_kib\": %ld}\n",
            small.size, big.size, small.snap_ms, big.snap_ms, small.diff_ms,
            big.diff_ms, small.delete_ms, big.delete_ms, rss_kib ());
    return 0;
  }
  printf ("Cairn volume benchmark (pool file in %s, median of %d)\n", dir, REPS);
  printf ("%-34s %12s %12s %8s\n", "", "small", "big", "big/small");
  printf ("%-34s %11.1fG %11.1fG\n", "volume size (fully written)",
          small.size / (double) gib, big.size / (double) gib);
  printf ("%-34s %12.1f %12.1f\n", "fill time (s, 1 MiB writes)", small.fill_s, big.fill_s);
  printf ("%-34s %12.2f %12.2f %8.2f\n", "snapshot create (ms)", small.snap_ms,
          big.snap_ms, big.snap_ms / small.snap_ms);
  printf ("%-34s %12.2f %12.2f %8.2f\n", "diff of 1,000 changed blocks (ms)",
          small.diff_ms, big.diff_ms, big.diff_ms / small.diff_ms);
  printf ("%-34s %12" PRIu64 " %12" PRIu64 "\n", "  node cache misses in one diff",
          small.diff_misses, big.diff_misses);
  printf ("%-34s %12.2f %12.2f %8.2f\n", "delete oldest snapshot (ms)",
          small.delete_ms, big.delete_ms, big.delete_ms / small.delete_ms);
  printf ("peak RSS %ld KiB; diff reported %" PRIu64 " bytes changed (1,000 "
          "blocks written, some twice)\n", rss_kib (), big.diff_bytes);
  return 0;
}
