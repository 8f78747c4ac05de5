/* Cairn continuous-checkpoint benchmark (issue #27, "Benchmarks"): the
 * engine alone, on a real pool file in --dir (default /var/tmp, removed at
 * the end), on a fake clock (pool_set_clock), so an hour of checkpoints
 * takes seconds.  Two modes:
 *
 *   space   An hour of random 4 KiB overwrites of a prefilled volume, a
 *           commit (a checkpoint) every 5 fake seconds, 720 commits,
 *           keep-within=1h.  Prints the pool's used space beside the live
 *           data and the overwritten blocks the kept checkpoints hold:
 *           once as the engine counts them (the volume's held bytes) and
 *           once as this program's own model computes them (every version
 *           of a block, born in round b and overwritten in round d, that a
 *           kept checkpoint of a round in [b, d) still shows).  Then
 *           collection: the clock moves on an hour, vol_checkpoint_prune
 *           drops them all, vol_reclaim_wait and two commits make the
 *           space free, timed as MB/s freed; beside it the reaper freeing a
 *           deleted snapshot that holds as many overwritten blocks
 *           (snap_delete, vol_reclaim_wait, two commits).
 *   many    N checkpoints of one volume (a 4 KiB write and a pool_commit
 *           each, 5 fake seconds apart, keep-within long enough to keep
 *           them all): the process's VmRSS and VmHWM after 1,000, 10,000,
 *           100,000 (whichever N reaches), then the time to open VOL@TIME
 *           at random times, to list every checkpoint and to list a
 *           one-hour window, and one pass of the collector over them
 *           (vol_checkpoint_prune, dry run: what it does once a minute).
 *
 * Build with `make -C build bench/bench-checkpoints`; run
 * `build/bench/bench-checkpoints --mode space|many [--dir DIR] ...`
 * (--help).  In many mode, --keep FILE builds the pool in FILE and keeps
 * it; a later run with the same --keep and --count measures that pool
 * again without building it (for profiling the listing).  Not part of `make check`.
 */
#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

#include "dev.h"
#include "pool.h"
#include "volume.h"
#include "bench-util.h"

#define DIE(what) bench_die ("bench-checkpoints", what)

#define BLK 4096u
#define STEP 5                  /* fake seconds between commits */
#define T0 BENCH_T0

struct opts {
  const char *dir;
  uint64_t size_mib;            /* the volume */
  unsigned rounds;              /* space: commits after the prefill */
  unsigned writes;              /* space: overwrites per commit */
  unsigned count;               /* many: checkpoints */
  uint64_t cache_mib;           /* node cache, 0: the engine's default */
  unsigned seed;
  const char *keep;             /* many: build the pool here and keep it;
                                   reuse it when it exists */
};

/* The fake clock. */
static int64_t fake_now = BENCH_T0;

/* VmRSS and VmHWM of this process, in KiB. */
static void
proc_mem (uint64_t *rss, uint64_t *hwm)
{
  FILE *f = fopen ("/proc/self/status", "r");
  char line[256];

  *rss = *hwm = 0;
  while (f && fgets (line, sizeof line, f)) {
    if (strncmp (line, "VmRSS:", 6) == 0)
      *rss = strtoull (line + 6, NULL, 10);
    else if (strncmp (line, "VmHWM:", 6) == 0)
      *hwm = strtoull (line + 6, NULL, 10);
  }
  if (f)
    fclose (f);
}

/* A 64-bit xorshift generator. */
static uint64_t rng_state;

static uint64_t
rng (void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Commit at the fake time t. */
static void
commit_at (struct cairn_pool *pool, int64_t t)
{
  fake_now = t;
  if (pool_commit (pool) < 0)
    DIE ("pool_commit");
}

/* Write one 4 KiB block of vol whose content no other write repeats. */
static void
write_block (struct cairn_volume *vol, uint64_t blk, uint64_t tag)
{
  uint64_t buf[BLK / 8];

  for (size_t i = 0; i < BLK / 8; i++)
    buf[i] = tag * 0x9e3779b97f4a7c15ull + i;
  if (vol_pwrite (vol, buf, BLK, blk * BLK, 0) < 0)
    DIE ("vol_pwrite");
}

/* Allocated bytes of the pool (freed blocks waiting for a commit count as
 * allocated).
 */
static uint64_t
pool_used (struct cairn_pool *pool)
{
  struct pool_info pi;

  pool_info (pool, &pi);
  return pi.space.allocated * BLK;
}

/* Create the pool file and a pool that takes checkpoints. */
static struct cairn_pool *
make_pool (const struct opts *o, char *path, size_t pathsz, uint64_t pool_size,
           struct cairn_dev **devp)
{
  struct pool_format_opts fo = { .checkpoints = true };
  struct pool_open_opts po = { .cache_bytes = o->cache_mib << 20 };
  struct cairn_pool *pool;

  if (o->keep)
    snprintf (path, pathsz, "%s", o->keep);
  else
    snprintf (path, pathsz, "%s/bench-checkpoints-%d.pool", o->dir,
              (int) getpid ());
  if (o->keep && access (path, F_OK) == 0) {
    if (dev_file_open (path, 0, 0, devp) < 0 || pool_open (*devp, &po, &pool) < 0)
      DIE ("open the kept pool");
  }
  else if (dev_file_open (path, DEV_CREATE, pool_size, devp) < 0 ||
           pool_format (*devp, &fo, NULL) < 0 ||
           pool_open (*devp, &po, &pool) < 0)
    DIE ("create the pool");
  pool_set_clock (pool, bench_fake_clock, &fake_now);
  return pool;
}

static void
close_pool (struct cairn_pool *pool, struct cairn_dev *dev, const char *path)
{
  if (pool_close (pool) < 0)
    DIE ("close");
  dev_close (dev);
  if (path != NULL)
    unlink (path);
}

/* ---------------------------------------------------------------- space */

/* vol_checkpoint_list callback: mark the round of each kept checkpoint. */
struct kept {
  uint8_t *round;               /* rounds + 1 flags */
  unsigned rounds;
  uint64_t n, unique, odd;
};

static int
kept_fn (void *opaque, const struct vol_checkpoint *c)
{
  struct kept *k = opaque;
  int64_t dt = (int64_t) c->ctime - T0;

  k->n++;
  k->unique += c->unique;
  if (dt < 0 || dt % STEP || dt / STEP > k->rounds)
    k->odd++;
  else
    k->round[dt / STEP] = 1;
  return 0;
}

/* Make the space that pending frees hold free: two commits. */
static void
settle (struct cairn_pool *pool)
{
  if (vol_reclaim_wait (pool, NULL, NULL) < 0)
    DIE ("vol_reclaim_wait");
  commit_at (pool, fake_now);
  commit_at (pool, fake_now);
}

static int
run_space (const struct opts *o)
{
  uint64_t nb = (o->size_mib << 20) / BLK, nver = 0, held_blocks = 0;
  uint32_t *born = calloc (nb, sizeof *born);
  uint32_t (*ver)[2] = malloc ((size_t) o->rounds * o->writes * sizeof *ver);
  uint32_t *cum = calloc (o->rounds + 2, sizeof *cum);
  struct kept k = { .round = calloc (o->rounds + 1, 1), .rounds = o->rounds };
  struct cairn_volume *vol;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct vol_info vi;
  struct pool_info pi;
  uint64_t used, live, held, distinct = 0, freed_c, freed_s, dropped = 0,
    commits0;
  double t, t_build, t_list, t_coll, t_snap;
  char path[4096];
  uint8_t *buf;

  if (!born || !ver || !cum || !k.round)
    DIE ("out of memory");
  /* Room for what the hour's checkpoints hold (tree nodes above all,
   * about 4x the data they hold), so that the collector never has to drop
   * one for space (under 5% free it would).
   */
  pool = make_pool (o, path, sizeof path, 8 * (o->size_mib << 20) + (1ull << 30),
                    &dev);
  if (vol_checkpoint_set (pool, NULL, "keep-within", "1h") < 0 ||
      vol_create (pool, "v", o->size_mib << 20, NULL) < 0 ||
      vol_open (pool, "v", &vol) < 0)
    DIE ("volume");
  /* Round 0: the prefill, one checkpoint at T0. */
  buf = malloc (1 << 20);
  for (uint64_t off = 0; off < o->size_mib << 20; off += 1 << 20) {
    for (size_t i = 0; i < (1 << 20) / 8; i++)
      ((uint64_t *) buf)[i] = off + i + 1;
    if (vol_pwrite (vol, buf, 1 << 20, off, 0) < 0)
      DIE ("prefill");
  }
  free (buf);
  commit_at (pool, T0);
  pool_info (pool, &pi);
  commits0 = pi.commits;
  /* Rounds 1..R: random overwrites, then a commit STEP seconds later. */
  t = bench_now ();
  for (unsigned r = 1; r <= o->rounds; r++) {
    for (unsigned w = 0; w < o->writes; w++) {
      uint64_t b = rng () % nb;

      write_block (vol, b, (uint64_t) r << 32 | w);
      distinct += born[b] == 0;
      ver[nver][0] = born[b];
      ver[nver++][1] = r;
      born[b] = r;
    }
    commit_at (pool, T0 + (int64_t) r * STEP);
  }
  t_build = bench_now () - t;
  pool_info (pool, &pi);
  /* The collector as the hour ends, then the kept checkpoints. */
  if (vol_checkpoint_collect (pool) < 0)
    DIE ("vol_checkpoint_collect");
  settle (pool);
  t = bench_now ();
  if (vol_checkpoint_list (pool, "v", 0, UINT64_MAX, kept_fn, &k) < 0)
    DIE ("vol_checkpoint_list");
  t_list = bench_now () - t;
  /* The model: a version (b, d) is held iff a kept round r has b <= r < d. */
  for (unsigned r = 0; r <= o->rounds; r++)
    cum[r + 1] = cum[r] + k.round[r];
  for (uint64_t i = 0; i < nver; i++)
    held_blocks += cum[ver[i][1]] - cum[ver[i][0]] > 0;
  used = pool_used (pool);
  if (vol_stat (pool, "v", &vi) < 0)
    DIE ("vol_stat");
  live = vi.referenced;
  held = vi.held;

  printf ("space: %" PRIu64 " MiB volume, prefilled, then %u commits %d fake "
          "seconds apart (%" PRIu64 " commits counted by the pool), %u random "
          "4 KiB overwrites before each (%" PRIu64 " writes, %" PRIu64
          " distinct blocks) in %.1f s; keep-within=1h\n",
          o->size_mib, o->rounds, STEP, pi.commits - commits0, o->writes,
          nver, distinct, t_build);
  printf ("  kept checkpoints               %" PRIu64 " (%" PRIu64 " not on "
          "the 5 s grid), listed in %.1f ms\n", k.n, k.odd, t_list * 1e3);
  printf ("  pool used                      %10.1f MiB\n", used / 1048576.0);
  printf ("  live data (referenced)         %10.1f MiB\n", live / 1048576.0);
  printf ("  held by checkpoints (engine)   %10.1f MiB  (data and tree nodes the "
          "deadlist keeps)\n", held / 1048576.0);
  printf ("  overwritten data held (model)  %10.1f MiB  (%" PRIu64 " blocks)\n",
          held_blocks * (double) BLK / 1048576.0, held_blocks);
  printf ("  engine - model                 %10.1f MiB  (%" PRId64 " blocks: "
          "the checkpoints' own tree nodes)\n",
          ((double) held - held_blocks * (double) BLK) / 1048576.0,
          (int64_t) (held / BLK) - (int64_t) held_blocks);
  printf ("  used - live - held             %10.1f MiB  (live tree, catalog, "
          "deadlist, space map)\n",
          ((double) used - live - held) / 1048576.0);
  printf ("  sum of the list's FREES        %10.1f MiB\n", k.unique / 1048576.0);

  /* Collection: an hour later every checkpoint is past keep-within. */
  fake_now += 3600 + STEP;
  used = pool_used (pool);
  t = bench_now ();
  if (vol_checkpoint_prune (pool, "v", false, NULL, NULL, &dropped) < 0)
    DIE ("vol_checkpoint_prune");
  settle (pool);
  t_coll = bench_now () - t;
  freed_c = used - pool_used (pool);

  /* The reaper: a snapshot holding as many overwritten blocks. */
  if (vol_checkpoint_set (pool, "v", "checkpoints", "off") < 0 ||
      snap_create (pool, "v", "s") < 0)
    DIE ("snapshot");
  for (uint64_t i = 0; i < nb; i++)           /* born[]: a permutation */
    born[i] = (uint32_t) i;
  for (uint64_t i = nb - 1; i > 0; i--) {
    uint64_t j = rng () % (i + 1), x = born[i];

    born[i] = born[j];
    born[j] = (uint32_t) x;
  }
  for (uint64_t i = 0; i < held_blocks && i < nb; i++) {
    write_block (vol, born[i], (uint64_t) 1 << 62 | i);
    if ((i + 1) % o->writes == 0)
      commit_at (pool, fake_now + STEP);
  }
  settle (pool);
  used = pool_used (pool);
  t = bench_now ();
  if (snap_delete (pool, "v", "s") < 0)
    DIE ("snap_delete");
  settle (pool);
  t_snap = bench_now () - t;
  freed_s = used - pool_used (pool);
  vol_close (vol);

  printf ("collection: vol_checkpoint_prune an hour later dropped %" PRIu64
          " checkpoints (the background collector may take some), then vol_reclaim_wait and 2 commits: %.1f MiB freed "
          "in %.3f s, %.0f MB/s\n", dropped, freed_c / 1048576.0, t_coll,
          freed_c / t_coll / 1e6);
  printf ("reaper:     snap_delete of a snapshot holding %" PRIu64 " overwritten "
          "blocks, then vol_reclaim_wait and 2 commits: %.1f MiB freed in "
          "%.3f s, %.0f MB/s\n", held_blocks, freed_s / 1048576.0, t_snap,
          freed_s / t_snap / 1e6);
  printf ("collection/reaper: %.2fx\n",
          (freed_c / t_coll) / (freed_s / t_snap));
  close_pool (pool, dev, path);
  free (born);
  free (ver);
  free (cum);
  free (k.round);
  return 0;
}

/* ---------------------------------------------------------------- many */

static int
count_fn (void *opaque, const struct vol_checkpoint *c)
{
  (void) c;
  ++*(uint64_t *) opaque;
  return 0;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return x < y ? -1 : x > y;
}

/* Print the median, 99th percentile and maximum of v[0..n) (ms). */
static void
print_dist (const char *what, double *v, size_t n)
{
  qsort (v, n, sizeof *v, cmp_double);
  printf ("  %-40s median %.3f ms, p99 %.3f ms, max %.3f ms (%zu runs)\n",
          what, v[n / 2] * 1e3, v[n * 99 / 100] * 1e3, v[n - 1] * 1e3, n);
}

/* Print the memory line after n checkpoints. */
static void
print_mem (struct cairn_pool *pool, unsigned n, double secs)
{
  struct pool_info pi;
  uint64_t rss, hwm;

  proc_mem (&rss, &hwm);
  pool_info (pool, &pi);
  printf ("  after %6u checkpoints: VmRSS %6.1f MiB, VmHWM %6.1f MiB, node "
          "cache %6.1f MiB, %.1f s to build (%.3f ms each)\n", n,
          rss / 1024.0, hwm / 1024.0, pi.cache.bytes / 1048576.0, secs,
          secs * 1e3 / n);
  fflush (stdout);
}

static int
run_many (const struct opts *o)
{
  enum { RUNS = 1000, WINDOWS = 50, FULL = 7 };
  static double v[RUNS];
  uint64_t nb = (o->size_mib << 20) / BLK;
  struct cairn_volume *vol;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  unsigned next = 1000;
  double t0, t;
  char path[4096];

  bool reuse = o->keep && access (o->keep, F_OK) == 0;

  pool = make_pool (o, path, sizeof path, 4ull << 30, &dev);
  fake_now = T0 + (int64_t) o->count * STEP;
  if (!reuse &&
      (vol_checkpoint_set (pool, NULL, "keep-within", "10000w") < 0 ||
       vol_create (pool, "v", o->size_mib << 20, NULL) < 0))
    DIE ("volume");
  if (vol_open (pool, "v", &vol) < 0)
    DIE ("volume");
  printf ("many: %u checkpoints of a %" PRIu64 " MiB volume, one 4 KiB write "
          "and a commit each, %d fake seconds apart; node cache %s%s\n",
          o->count, o->size_mib, STEP, o->cache_mib ? "as --cache-mib" : "default",
          reuse ? "; the kept pool, not built again" : "");
  print_mem (pool, 0, 1e-9);
  t0 = bench_now ();
  for (unsigned i = 1; !reuse && i <= o->count; i++) {
    write_block (vol, rng () % nb, i);
    commit_at (pool, T0 + (int64_t) i * STEP);
    if (i == next || i == o->count) {
      print_mem (pool, i, bench_now () - t0);
      if (i == next)
        next *= 10;
    }
  }
  vol_close (vol);

  /* VOL@TIME at random times, through vol_open and vol_stat. */
  for (int pass = 0, r = 0; pass < 2; pass++) {
    for (size_t i = 0; i < RUNS; i++) {
      time_t at = T0 + STEP + (time_t) (rng () % ((uint64_t) o->count * STEP));
      struct cairn_volume *h;
      struct vol_info vi;
      char name[64];
      struct tm tm;

      gmtime_r (&at, &tm);
      strftime (name, sizeof name, "v@%Y-%m-%dT%H:%M:%SZ", &tm);
      t = bench_now ();
      if (pass == 0) {
        if (vol_open (pool, name, &h) < 0)
          DIE (name);
        vol_close (h);
      }
      else if ((r = vol_stat (pool, name, &vi)) < 0) {
        /* Reported, not fatal: vol_stat resolves VOL@TIME to a state, then
         * reads it as a snapshot record.
         */
        printf ("  vol_stat %s: %s (%s)\n", name, strerror (-r), cairn_errmsg ());
        break;
      }
      v[i] = bench_now () - t;
    }
    if (pass == 1 && r < 0)
      continue;
    print_dist (pass == 0 ? "vol_open+vol_close VOL@TIME" : "vol_stat VOL@TIME",
                v, RUNS);
  }
  /* Listings, in wall and in CPU time. */
  for (size_t i = 0; i < FULL; i++) {
    uint64_t n = 0;
    double c = bench_cpu ();

    t = bench_now ();
    if (vol_checkpoint_list (pool, "v", 0, UINT64_MAX, count_fn, &n) < 0)
      DIE ("vol_checkpoint_list");
    v[i] = bench_now () - t;
    v[FULL + i] = bench_cpu () - c;
    if (i == 0)
      printf ("  whole listing: %" PRIu64 " checkpoints\n", n);
  }
  print_dist ("vol_checkpoint_list, all", v, FULL);
  print_dist ("vol_checkpoint_list, all (CPU time)", v + FULL, FULL);
  for (size_t i = 0; i < WINDOWS; i++) {
    uint64_t since = T0 + rng () % ((uint64_t) o->count * STEP), n = 0;

    t = bench_now ();
    if (vol_checkpoint_list (pool, "v", since, since + 3599, count_fn, &n) < 0)
      DIE ("vol_checkpoint_list");
    v[i] = bench_now () - t;
  }
  print_dist ("vol_checkpoint_list, a one-hour window", v, WINDOWS);
  /* What the collector does once a minute for the volume: read and mark
   * every checkpoint by the policy (a dry run drops nothing).
   */
  for (size_t i = 0; i < FULL; i++) {
    double c = bench_cpu ();

    t = bench_now ();
    if (vol_checkpoint_prune (pool, "v", true, NULL, NULL, NULL) < 0)
      DIE ("vol_checkpoint_prune");
    v[i] = bench_now () - t;
    v[FULL + i] = bench_cpu () - c;
  }
  print_dist ("a collector pass (prune --dry-run)", v, FULL);
  print_dist ("a collector pass (CPU time)", v + FULL, FULL);
  print_mem (pool, o->count, bench_now () - t0);
  close_pool (pool, dev, o->keep ? NULL : path);
  return 0;
}

int
main (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "mode", required_argument, NULL, 'm' },
    { "dir", required_argument, NULL, 'd' },
    { "size-mib", required_argument, NULL, 's' },
    { "rounds", required_argument, NULL, 'r' },
    { "writes", required_argument, NULL, 'w' },
    { "count", required_argument, NULL, 'n' },
    { "cache-mib", required_argument, NULL, 'c' },
    { "seed", required_argument, NULL, 'S' },
    { "keep", required_argument, NULL, 'k' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct opts o = { .dir = "/var/tmp", .rounds = 720, .writes = 256,
                    .count = 100000, .seed = 1 };
  const char *mode = NULL;
  int c;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'm': mode = optarg; break;
    case 'd': o.dir = optarg; break;
    case 's': o.size_mib = strtoull (optarg, NULL, 10); break;
    case 'r': o.rounds = (unsigned) strtoul (optarg, NULL, 10); break;
    case 'w': o.writes = (unsigned) strtoul (optarg, NULL, 10); break;
    case 'n': o.count = (unsigned) strtoul (optarg, NULL, 10); break;
    case 'c': o.cache_mib = strtoull (optarg, NULL, 10); break;
    case 'S': o.seed = (unsigned) strtoul (optarg, NULL, 10); break;
    case 'k': o.keep = optarg; break;
    default: mode = NULL; optind = argc + 1; break;
    }
  }
  if (mode == NULL || optind != argc ||
      (strcmp (mode, "space") && strcmp (mode, "many")) ||
      o.rounds == 0 || o.writes == 0 || o.count == 0) {
    fprintf (stderr, "usage: bench-checkpoints --mode space|many [--dir DIR] "
             "[--size-mib N] [--seed N] [--cache-mib N]\n"
             "  space: [--rounds 720] [--writes 256] (volume 1024 MiB)\n"
             "  many:  [--count 100000] [--keep POOL-FILE] (volume 64 MiB)\n");
    return 2;
  }
  rng_state = 0x2545f4914f6cdd1dull ^ o.seed;
  if (strcmp (mode, "space") == 0) {
    if (!o.size_mib)
      o.size_mib = 1024;
    return run_space (&o);
  }
  if (!o.size_mib)
    o.size_mib = 64;
  return run_many (&o);
}
