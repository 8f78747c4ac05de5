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

#include "btree.h"
#include "dev.h"
#include "fsck.h"
#include "pool.h"

#define MIB (1024ull * 1024)
#define KEY_LEN 8
#define VAL_LEN 64
#define COMMIT_EVERY 10000u
#define DEFAULT_ITEMS 2000000u
#define QUICK_ITEMS 300000u
#define OPEN_ITEMS 1000000u
#define OPEN_REPS 3
#define OPEN_COMMIT_EVERY 100000u
#define NO_DIRTY_LIMIT (1ull << 40)
#define SYNC_REPS 32
#define NCOMMIT 3
#define DEFAULT_SEED 20261202u

/* Dirty leaves per commit-latency measurement. */
static const unsigned commit_sizes[NCOMMIT] = { 1, 100, 10000 };

/* ---------------------------------------------------------------- setup */

struct config {
  uint64_t items;               /* per insert run */
  uint64_t open_items;          /* in the pool whose open is timed */
  uint64_t lookups;
  uint64_t cache_bytes;
  uint64_t dirty_limit;         /* of the insert runs; 0: the engine's */
  uint64_t max_rss_kib;         /* an insert run stops beyond it */
  uint64_t seed;
  unsigned commit_reps[NCOMMIT];
  const char *dir;              /* where the work directory goes */
  const char *json;             /* NULL, a file, or "-" for stdout */
  bool quick, keep, drop_caches;
};

/* The work directory and the files in it, as full paths made before any
 * file exists, so that the signal handler only has to unlink them.
 */
enum work_file { WF_SEQ, WF_RAND, WF_OPEN, WF_YARD, WF_COUNT };
static const char *const work_names[WF_COUNT] = {
  "seq.pool", "rand.pool", "open.pool", "yardstick.dat",
};
static char work_dir[PATH_MAX];
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
static void __attribute__ ((noreturn)) CAIRN_PRINTF (1, 2)
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
static void
check (int r, const char *what)
{
  if (r < 0)
    die ("%s: %s", what, cairn_errmsg ());
}

/* A progress line on stderr. */
static void CAIRN_PRINTF (1, 2)
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

/* ---------------------------------------------------------------- clocks */

/* Monotonic time in nanoseconds. */
static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* Seconds since t0 (nanoseconds). */
static double
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
static double
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
static uint64_t
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
static bool
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
static bool
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

struct io_stats {
  uint64_t reads, writes, flushes;
  uint64_t read_bytes, write_bytes;
  uint64_t read_ns, write_ns, flush_ns;
};

struct timed_dev {
  struct cairn_dev dev;         /* must be first */
  struct cairn_dev *lower;
  struct io_stats io;           /* single-threaded: plain counters */
};

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
static struct timed_dev *
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
static struct io_stats
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

/* ---------------------------------------------------------------- pools */

/* A pool file, the timing device on it, the pool and its one user tree. */
struct bpool {
  struct cairn_dev *file;
  struct timed_dev *td;
  struct cairn_pool *pool;
  struct btree *tree;
  uint64_t tree_id;
};

/* Open the pool on bp->td with a cache of cache bytes. */
static void
bpool_open_pool (struct bpool *bp, uint64_t cache, uint64_t dirty_limit)
{
  struct pool_open_opts oo = {
    .cache_bytes = cache, .dirty_limit_bytes = dirty_limit,
  };

  check (pool_open (&bp->td->dev, &oo, &bp->pool), "pool_open");
}

/* Create a sparse pool file of size bytes with one empty tree, committed. */
static void
bpool_create (const char *path, uint64_t size, uint64_t cache,
              uint64_t dirty_limit, struct bpool *bp)
{
  memset (bp, 0, sizeof *bp);
  check (dev_file_open (path, DEV_CREATE, size, &bp->file), path);
  bp->td = timed_create (bp->file);
  check (pool_format (&bp->td->dev, NULL, NULL), "pool_format");
  bpool_open_pool (bp, cache, dirty_limit);
  check (txn_begin (bp->pool), "txn_begin");
  check (pool_tree_create (bp->pool, &bp->tree_id, &bp->tree),
         "pool_tree_create");
  txn_end (bp->pool);
  check (pool_commit (bp->pool), "pool_commit");
}

/* Open an existing pool file and its tree. */
static void
bpool_open (const char *path, uint64_t cache, uint64_t dirty_limit,
            uint64_t tree_id, struct bpool *bp)
{
  memset (bp, 0, sizeof *bp);
  check (dev_file_open (path, 0, 0, &bp->file), path);
  bp->td = timed_create (bp->file);
  bpool_open_pool (bp, cache, dirty_limit);
  bp->tree_id = tree_id;
  check (pool_tree_open (bp->pool, tree_id, &bp->tree), "pool_tree_open");
}

/* Close the pool (committing) and its devices. */
static void
bpool_close (struct bpool *bp)
{
  check (pool_close (bp->pool), "pool_close");
  dev_close (&bp->td->dev);
  dev_close (bp->file);
  memset (bp, 0, sizeof *bp);
}

/* Insert or replace one item, under the locks a caller must take. */
static void
bpool_put (struct bpool *bp, const uint8_t *key, const uint8_t *val)
{
  int r;

  check (txn_begin (bp->pool), "txn_begin");
  btree_wrlock (bp->tree);
  r = btree_insert (bp->tree, key, KEY_LEN, val, VAL_LEN, 0);
  btree_unlock (bp->tree);
  txn_end (bp->pool);
  check (r, "btree_insert");
}

/* Look one item up; -ENOENT or 0. */
static int
bpool_get (struct bpool *bp, const uint8_t *key, uint8_t *val, size_t *vlenp)
{
  int r;

  btree_rdlock (bp->tree);
  r = btree_lookup (bp->tree, key, KEY_LEN, val, VAL_LEN, vlenp);
  btree_unlock (bp->tree);
  if (r < 0 && r != -ENOENT)
    check (r, "btree_lookup");
  return r;
}

/* Bytes of the pool in use (allocated blocks, space map included), and
 * the number of free extents, which every commit's space map lists.
 */
static uint64_t
pool_used_bytes (struct cairn_pool *pool, uint64_t *extentsp)
{
  struct space_stats ss;

  space_stats (pool_space (pool), &ss);
  if (extentsp)
    *extentsp = ss.extents;
  return ss.allocated * BLOCK_SIZE;
}

/* A pool file big enough for items (sparse: only what is written counts). */
static uint64_t
pool_file_size (uint64_t items)
{
  return MAX (1024 * MIB, items * 1024);
}

/* ---------------------------------------------------------------- keys */

/* murmur3's 64-bit finaliser: a bijection, so distinct i give distinct
 * keys without a table of the keys used.
 */
static uint64_t
scramble (uint64_t x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/* splitmix64, for the order of lookups. */
static uint64_t
rng_next (uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of item i: i itself, or i scrambled with the seed (big-endian,
 * so that memcmp order is numeric order).
 */
static void
make_key (uint8_t key[KEY_LEN], bool random, uint64_t seed, uint64_t i)
{
  put_be64 (key, random ? scramble (i + seed) : i);
}

/* The value of item i: i, then a cheap pattern. */
static void
make_val (uint8_t val[VAL_LEN], uint64_t i)
{
  put_le64 (val, i);
  for (unsigned j = 8; j < VAL_LEN; j++)
    val[j] = (uint8_t) (i * 31 + j);
}

/* ---------------------------------------------------------------- yardstick */

struct yardstick {
  uint64_t bytes;               /* the insert runs' payload */
  double secs;                  /* to write them, 1 MiB pwrites + fdatasync */
  double sync_ms, sync_p90_ms;  /* 4 KiB overwrite + fdatasync */
  double alloc_sync_ms, alloc_sync_p90_ms; /* 4 KiB into a hole + fdatasync */
};

/* Write all of buf at off. */
static void
pwrite_all (int fd, const uint8_t *buf, size_t len, uint64_t off)
{
  while (len > 0) {
    ssize_t n = pwrite (fd, buf, len, (off_t) off);

    if (n <= 0)
      die ("yardstick pwrite: %m");
    buf += n;
    len -= (size_t) n;
    off += (uint64_t) n;
  }
}

/* Median and p90 of a 4 KiB pwrite + fdatasync, at base, base + 4 KiB... */
static void
sync_latency (int fd, const uint8_t *buf, uint64_t base, double *med,
              double *p90)
{
  double ms[SYNC_REPS];

  for (int i = 0; i < SYNC_REPS; i++) {
    uint64_t t0 = now_ns ();

    pwrite_all (fd, buf, 4096, base + (uint64_t) i * 4096);
    if (fdatasync (fd) == -1)
      die ("yardstick fdatasync: %m");
    ms[i] = secs_since (t0) * 1e3;
  }
  *p90 = percentile (ms, SYNC_REPS, 0.9);
  *med = percentile (ms, SYNC_REPS, 0.5);
}

/* The plain-file yardstick: sequential bandwidth for the payload, and the
 * latency of a small write plus fdatasync, over written blocks and into
 * holes (a pool file is sparse, so a commit's first writes into it are
 * allocating ones).
 */
static void
run_yardstick (const char *path, uint64_t bytes, struct yardstick *y)
{
  const size_t chunk = 1024 * 1024;
  uint8_t *buf = malloc (chunk);
  uint64_t t0;
  int fd;

  if (buf == NULL)
    die ("out of memory");
  for (size_t i = 0; i < chunk; i++)
    buf[i] = (uint8_t) (i * 7 + 1);
  fd = open (path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd == -1 || ftruncate (fd, (off_t) (bytes + 128 * MIB)) == -1)
    die ("%s: %m", path);
  y->bytes = bytes;
  t0 = now_ns ();
  for (uint64_t off = 0; off < bytes; off += chunk)
    pwrite_all (fd, buf, MIN (chunk, bytes - off), off);
  if (fdatasync (fd) == -1)
    die ("yardstick fdatasync: %m");
  y->secs = secs_since (t0);

  sync_latency (fd, buf, 0, &y->sync_ms, &y->sync_p90_ms);
  sync_latency (fd, buf, (bytes + 64 * MIB) & ~(MIB - 1), &y->alloc_sync_ms,
                &y->alloc_sync_p90_ms);     /* inside the file, never written */
  close (fd);
  unlink (path);
  free (buf);
}

/* ---------------------------------------------------------------- tree walk */

/* A tree's shape, counted by a walk of all its nodes. */
struct tree_census {
  uint64_t nodes, leaves, items;
  unsigned height;
  uint64_t *first_keys;         /* of each leaf, in order, if asked for */
  bool want_first;              /* the next item starts a leaf */
  bool collect;
};

/* btree_walk: count a node. */
static int
census_node (void *opaque, const struct blkptr *bp, unsigned level)
{
  struct tree_census *tc = opaque;

  (void) bp;
  tc->nodes++;
  tc->height = MAX (tc->height, level + 1);
  tc->want_first = level == 0;
  if (level > 0)
    return 0;
  if (tc->collect && (tc->leaves & (tc->leaves - 1)) == 0) {
    uint64_t *nk = realloc (tc->first_keys,
                            MAX (tc->leaves * 2, 1024u) * sizeof *nk);

    if (nk == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    tc->first_keys = nk;
  }
  tc->leaves++;
  return 0;
}

/* btree_walk: count an item, keep the first key of each leaf. */
static int
census_item (void *opaque, const uint8_t *key, size_t klen,
             const uint8_t *val, size_t vlen)
{
  struct tree_census *tc = opaque;

  (void) val;
  (void) vlen;
  tc->items++;
  if (tc->want_first && tc->collect) {
    if (klen != KEY_LEN)
      return cairn_fail (-EIO, "a key of %zu bytes in the benchmark tree",
                         klen);
    tc->first_keys[tc->leaves - 1] = get_be64 (key);
  }
  tc->want_first = false;
  return 0;
}

/* Walk the pool's tree (reading every node through the cache). */
static void
tree_census (struct bpool *bp, bool collect, struct tree_census *tc)
{
  struct btree_visitor v = { census_node, census_item, tc };
  struct btree_root root;

  memset (tc, 0, sizeof *tc);
  tc->collect = collect;
  btree_rdlock (bp->tree);
  btree_get_root (bp->tree, &root);
  check (btree_walk (pool_cache (bp->pool), &root, &v), "btree_walk");
  btree_unlock (bp->tree);
}

/* ---------------------------------------------------------------- inserts */

/* Memory and progress at one point of an insert run. */
struct mem_point {
  uint64_t items;
  double secs;                  /* since the run started */
  uint64_t hwm_kib, rss_kib;
  uint64_t pool_used;           /* bytes */
  uint64_t free_extents;
  struct nodecache_stats cache;
};

struct insert_run {
  const char *name;
  bool random;
  uint64_t items;               /* inserted: fewer than asked if stopped */
  uint64_t asked;
  bool stopped;                 /* RSS passed --max-rss-mib */
  double secs;                  /* inserts and commits, final one included */
  uint64_t commits, explicit_commits;
  uint64_t start_rss_kib;       /* after the pool was created */
  bool hwm_reset;               /* VmHWM counts from the run's start */
  struct mem_point mem[3];      /* 25%, 50%, 100% */
  struct io_stats io;
  uint32_t node_size;
  uint64_t tree_id;
  /* Random lookups of present keys after the run, same pool. */
  uint64_t lookups;
  double lookup_secs;
  uint64_t lookup_hits, lookup_misses;
  struct io_stats lookup_io;
  struct tree_census tree;       /* after the run */
  /* fsck of the pool afterwards. */
  struct fsck_report fsck;
  double fsck_secs;
  unsigned fsck_printed;
};

/* Record memory and cache figures at a point of a run. */
static void
mem_point (struct bpool *bp, uint64_t items, uint64_t t0, struct mem_point *m)
{
  m->items = items;
  m->secs = secs_since (t0);
  m->hwm_kib = status_kib ("VmHWM:");
  m->rss_kib = status_kib ("VmRSS:");
  m->pool_used = pool_used_bytes (bp->pool, &m->free_extents);
  nodecache_stats (pool_cache (bp->pool), &m->cache);
}

/* Time random lookups of present keys on the run's pool. */
static void
run_lookups (const struct config *cfg, struct bpool *bp, struct insert_run *ir)
{
  struct nodecache_stats s0, s1;
  struct io_stats io0 = bp->td->io;
  uint64_t s = cfg->seed ^ 0x6c6f6f6b7570ull, t0;

  nodecache_stats (pool_cache (bp->pool), &s0);
  t0 = now_ns ();
  for (uint64_t l = 0; l < cfg->lookups; l++) {
    uint64_t i = rng_next (&s) % ir->items;
    uint8_t key[KEY_LEN], val[VAL_LEN];
    size_t vlen;

    make_key (key, ir->random, cfg->seed, i);
    if (bpool_get (bp, key, val, &vlen) != 0)
      die ("%s: item %" PRIu64 " is missing", ir->name, i);
    if (vlen != VAL_LEN || get_le64 (val) != i)
      die ("%s: item %" PRIu64 " has the wrong value", ir->name, i);
  }
  ir->lookup_secs = secs_since (t0);
  ir->lookups = cfg->lookups;
  nodecache_stats (pool_cache (bp->pool), &s1);
  ir->lookup_hits = s1.hits - s0.hits;
  ir->lookup_misses = s1.misses - s0.misses;
  ir->lookup_io = io_sub (&bp->td->io, &io0);
}

/* Print a problem fsck found (the first few). */
static void
fsck_problem (void *opaque, const char *msg)
{
  struct insert_run *ir = opaque;

  if (ir->fsck_printed++ < 10)
    note ("fsck %s: %s", ir->name, msg);
}

/* Check a closed pool file with fsck, timed. */
static void
run_fsck (const char *path, struct insert_run *ir)
{
  struct fsck_opts fo = { .problem = fsck_problem, .opaque = ir };
  struct cairn_dev *dev;
  uint64_t t0;

  check (dev_file_open (path, DEV_RDONLY, 0, &dev), path);
  t0 = now_ns ();
  check (fsck_pool (dev, &fo, &ir->fsck), "fsck_pool");
  ir->fsck_secs = secs_since (t0);
  dev_close (dev);
}

/* Build a pool of cfg->items items in key order or in random order, with
 * memory checkpoints, then time lookups, close it and fsck it.  The run
 * stops early if RSS passes cfg->max_rss_kib: memory that grows with the
 * tree is the failure this benchmark looks for, and it must not take the
 * machine down with it.
 */
static void
run_inserts (const struct config *cfg, const char *path, bool random,
             struct insert_run *ir)
{
  const uint64_t n = cfg->items;
  const uint64_t marks[2] = { n / 4, n / 2 };
  struct pool_info pi;
  struct io_stats io0;
  struct bpool bp;
  uint64_t t0, commits0;
  unsigned m = 0;

  memset (ir, 0, sizeof *ir);
  ir->name = random ? "random" : "sequential";
  ir->random = random;
  ir->items = ir->asked = n;
  note ("%s inserts: %" PRIu64 " items into %s", ir->name, n, path);
  bpool_create (path, pool_file_size (n), cfg->cache_bytes, cfg->dirty_limit,
                &bp);
  pool_info (bp.pool, &pi);
  ir->node_size = pi.node_size;
  ir->tree_id = bp.tree_id;
  commits0 = pi.commits;
  ir->start_rss_kib = status_kib ("VmRSS:");
  ir->hwm_reset = reset_hwm ();
  io0 = bp.td->io;

  t0 = now_ns ();
  for (uint64_t i = 0; i < n; i++) {
    uint8_t key[KEY_LEN], val[VAL_LEN];

    make_key (key, random, cfg->seed, i);
    make_val (val, i);
    bpool_put (&bp, key, val);
    if ((i + 1) % COMMIT_EVERY == 0) {
      check (pool_commit (bp.pool), "pool_commit");
      ir->explicit_commits++;
      if (status_kib ("VmRSS:") > cfg->max_rss_kib) {
        ir->stopped = true;
        ir->items = i + 1;
        note ("%s inserts: STOPPED after %" PRIu64 " items: RSS %" PRIu64
              " MiB is past --max-rss-mib", ir->name, ir->items,
              status_kib ("VmRSS:") / 1024);
        break;
      }
    }
    if (m < 2 && i + 1 == marks[m]) {
      mem_point (&bp, i + 1, t0, &ir->mem[m]);
      note ("%s inserts: %d%% after %.1f s", ir->name, 25 << m,
            ir->mem[m].secs);
      m++;
    }
  }
  if (ir->items % COMMIT_EVERY) {
    check (pool_commit (bp.pool), "pool_commit");
    ir->explicit_commits++;
  }
  ir->secs = secs_since (t0);
  mem_point (&bp, ir->items, t0, &ir->mem[2]);
  ir->io = io_sub (&bp.td->io, &io0);
  pool_info (bp.pool, &pi);
  ir->commits = pi.commits - commits0;
  note ("%s inserts: done in %.1f s; %" PRIu64 " lookups", ir->name, ir->secs,
        cfg->lookups);

  run_lookups (cfg, &bp, ir);
  tree_census (&bp, false, &ir->tree);
  if (ir->tree.items != ir->items)
    die ("%s: the tree holds %" PRIu64 " items, not %" PRIu64, ir->name,
         ir->tree.items, ir->items);
  bpool_close (&bp);
  note ("%s: fsck", ir->name);
  run_fsck (path, ir);
}

/* ---------------------------------------------------------------- commits */

struct commit_run {
  unsigned want;                /* dirty leaves asked for */
  unsigned leaves;              /* dirtied: capped at the tree's leaves */
  unsigned reps;
  double ms, p90_ms, max_ms;    /* pool_commit wall time */
  double dirty_nodes;           /* median, leaves and their ancestors */
  double write_mib;             /* median bytes written per commit */
  double write_ms, flush_ms;    /* median time in pwrite, in fdatasync */
  uint64_t flushes;             /* per commit */
};

/* Commit latency on the random pool: for each size, dirty that many
 * distinct leaves (rewrite the first item of leaves spread evenly over the
 * tree, other leaves in each repetition) and time pool_commit.  The dirty
 * limit is lifted so that no commit happens before the timed one.
 */
static void
run_commits (const struct config *cfg, const char *path, uint64_t tree_id,
             struct commit_run cr[NCOMMIT], uint64_t *leavesp,
             uint64_t *extentsp)
{
  struct tree_census tc;
  struct bpool bp;

  note ("commit latency on %s", path);
  bpool_open (path, cfg->cache_bytes, NO_DIRTY_LIMIT, tree_id, &bp);
  tree_census (&bp, true, &tc);
  *leavesp = tc.leaves;
  pool_used_bytes (bp.pool, extentsp);
  if (tc.leaves == 0)
    die ("the tree for the commit test is empty");

  for (int s = 0; s < NCOMMIT; s++) {
    struct commit_run *c = &cr[s];
    double ms[32], dn[32], wmib[32], wms[32], fms[32];

    c->want = commit_sizes[s];
    c->leaves = (unsigned) MIN ((uint64_t) c->want, tc.leaves);
    c->reps = MIN (cfg->commit_reps[s], ARRAY_SIZE (ms));
    for (unsigned rep = 0; rep < c->reps; rep++) {
      uint64_t off = ((uint64_t) rep * 7919 + (uint64_t) s * 104729)
                     % tc.leaves;
      struct nodecache_stats st;
      struct io_stats io0, io;
      uint8_t key[KEY_LEN], val[VAL_LEN];
      uint64_t t0;

      for (unsigned j = 0; j < c->leaves; j++) {
        uint64_t leaf = ((uint64_t) j * tc.leaves / c->leaves + off)
                        % tc.leaves;

        put_be64 (key, tc.first_keys[leaf]);
        make_val (val, UINT64_MAX - rep);
        bpool_put (&bp, key, val);
      }
      nodecache_stats (pool_cache (bp.pool), &st);
      io0 = bp.td->io;
      t0 = now_ns ();
      check (pool_commit (bp.pool), "pool_commit");
      ms[rep] = secs_since (t0) * 1e3;
      io = io_sub (&bp.td->io, &io0);
      dn[rep] = (double) st.dirty_nodes;
      wmib[rep] = (double) io.write_bytes / MIB;
      wms[rep] = (double) io.write_ns / 1e6;
      fms[rep] = (double) io.flush_ns / 1e6;
      c->flushes = io.flushes;
    }
    c->max_ms = percentile (ms, c->reps, 1.0);
    c->p90_ms = percentile (ms, c->reps, 0.9);
    c->ms = percentile (ms, c->reps, 0.5);
    c->dirty_nodes = percentile (dn, c->reps, 0.5);
    c->write_mib = percentile (wmib, c->reps, 0.5);
    c->write_ms = percentile (wms, c->reps, 0.5);
    c->flush_ms = percentile (fms, c->reps, 0.5);
    note ("commit latency, %u dirty leaves: median %.2f ms", c->leaves, c->ms);
  }
  bpool_close (&bp);
  free (tc.first_keys);
}

/* ---------------------------------------------------------------- open */

struct open_run {
  uint64_t items;
  double build_secs;
  unsigned build_reopens;       /* to empty a node cache past its limit */
  uint64_t pool_used;
  bool cold;                    /* the page cache was dropped before each */
  double cold_ms, warm_ms;      /* medians */
  double cold_max_ms, warm_max_ms;
  uint64_t reads, read_bytes;   /* by one open and lookup */
};

/* Open the pool, its tree and look up one random present key: ms. */
static double
time_open (const struct config *cfg, const char *path, uint64_t tree_id,
           uint64_t items, unsigned rep, struct io_stats *io)
{
  uint8_t key[KEY_LEN], val[VAL_LEN];
  uint64_t s = cfg->seed + rep, i, t0;
  struct bpool bp;
  size_t vlen;
  double ms;

  i = rng_next (&s) % items;
  make_key (key, true, cfg->seed, i);
  t0 = now_ns ();
  bpool_open (path, cfg->cache_bytes, 0, tree_id, &bp);
  if (bpool_get (&bp, key, val, &vlen) != 0 || get_le64 (val) != i)
    die ("open test: item %" PRIu64 " is missing or wrong", i);
  ms = secs_since (t0) * 1e3;
  *io = bp.td->io;
  bpool_close (&bp);
  return ms;
}

/* Build a pool of open_items items in random order, close it, then time
 * opening it cold and warm.  The build is only the setup, so it is made
 * quick: no dirty limit and a commit every 100,000 items.  Should the node
 * cache hold more than four times its limit after a commit, the pool is
 * reopened, which empties it (the insert runs report such growth).
 */
static void
run_open (const struct config *cfg, const char *path, struct open_run *o)
{
  double cold[OPEN_REPS], warm[OPEN_REPS];
  struct io_stats io;
  struct bpool bp;
  uint64_t t0, tree_id;

  memset (o, 0, sizeof *o);
  o->items = cfg->open_items;
  note ("open: building a pool of %" PRIu64 " items", o->items);
  bpool_create (path, pool_file_size (o->items), cfg->cache_bytes,
                NO_DIRTY_LIMIT, &bp);
  tree_id = bp.tree_id;
  t0 = now_ns ();
  for (uint64_t i = 0; i < o->items; i++) {
    uint8_t key[KEY_LEN], val[VAL_LEN];

    make_key (key, true, cfg->seed, i);
    make_val (val, i);
    bpool_put (&bp, key, val);
    if ((i + 1) % OPEN_COMMIT_EVERY == 0) {
      struct nodecache_stats st;

      check (pool_commit (bp.pool), "pool_commit");
      nodecache_stats (pool_cache (bp.pool), &st);
      if (st.bytes > 4 * cfg->cache_bytes) {
        bpool_close (&bp);
        bpool_open (path, cfg->cache_bytes, NO_DIRTY_LIMIT, tree_id, &bp);
        o->build_reopens++;
      }
    }
  }
  o->pool_used = pool_used_bytes (bp.pool, NULL);
  bpool_close (&bp);
  o->build_secs = secs_since (t0);

  o->cold = cfg->drop_caches;
  for (unsigned rep = 0; rep < OPEN_REPS; rep++) {
    if (o->cold && !drop_page_cache ()) {
      note ("cannot drop the page cache (not root?): open times are warm");
      o->cold = false;
    }
    cold[rep] = time_open (cfg, path, tree_id, o->items, rep, &io);
    if (rep == 0) {
      o->reads = io.reads;
      o->read_bytes = io.read_bytes;
    }
  }
  for (unsigned rep = 0; rep < OPEN_REPS; rep++)
    warm[rep] = time_open (cfg, path, tree_id, o->items, rep + OPEN_REPS, &io);
  o->cold_max_ms = percentile (cold, OPEN_REPS, 1.0);
  o->cold_ms = percentile (cold, OPEN_REPS, 0.5);
  o->warm_max_ms = percentile (warm, OPEN_REPS, 1.0);
  o->warm_ms = percentile (warm, OPEN_REPS, 0.5);
}

/* ---------------------------------------------------------------- report */

struct results {
  struct config cfg;
  double load[2];               /* 1-minute load average, start and end */
  char fs[32];
  char kernel[128];
  struct yardstick yard;
  struct insert_run ins[2];     /* sequential, random */
  struct commit_run commit[NCOMMIT];
  uint64_t commit_tree_leaves;
  uint64_t commit_free_extents;
  struct open_run open;
};

/* The dirty limit of the insert runs. */
static uint64_t
dirty_limit (const struct config *cfg)
{
  return cfg->dirty_limit ? cfg->dirty_limit : cfg->cache_bytes / 4;
}

/* A count with thousands separators, in one of a few rotating buffers. */
static const char *
cnt (uint64_t v)
{
  static char bufs[8][32];
  static unsigned next;
  char tmp[32], *out = bufs[next++ % 8];
  int len = snprintf (tmp, sizeof tmp, "%" PRIu64, v), o = 0;

  for (int i = 0; i < len; i++) {
    if (i > 0 && (len - i) % 3 == 0)
      out[o++] = ',';
    out[o++] = tmp[i];
  }
  out[o] = '\0';
  return out;
}

/* Bytes in MiB. */
static double
mib (uint64_t bytes)
{
  return (double) bytes / MIB;
}

/* Items per second, 0 for no time. */
static double
rate (uint64_t n, double secs)
{
  return secs > 0 ? (double) n / secs : 0;
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

/* a / b, or 0 when b is 0. */
static double
ratio (double a, double b)
{
  return b != 0 ? a / b : 0;
}

/* A row of the two-column table: two numbers with prec decimals, each
 * followed by unit ("", "x" or "%").
 */
static void
row (FILE *fp, const char *label, int prec, const char *unit, double a,
     double b)
{
  int w = 14 - (int) strlen (unit);

  fprintf (fp, "  %-40s %*.*f%s %*.*f%s\n", label, w, prec, a, unit, w, prec,
           b, unit);
}

/* A row of the two-column table: two counts. */
static void
row_count (FILE *fp, const char *label, uint64_t a, uint64_t b)
{
  fprintf (fp, "  %-40s %14s %14s\n", label, cnt (a), cnt (b));
}

/* Seconds of I/O outside the engine during an insert run. */
static double
io_secs (const struct io_stats *io)
{
  return (double) (io->read_ns + io->write_ns + io->flush_ns) / 1e9;
}

/* The insert-run half of the table. */
static void
print_inserts (FILE *fp, const struct results *res)
{
  const struct insert_run *s = &res->ins[0], *r = &res->ins[1];
  const char *seg[3] = { "0-25%", "25-50%", "50-100%" };
  const double cache = (double) res->cfg.cache_bytes;
  const double item = KEY_LEN + VAL_LEN;

  fprintf (fp, "\nInserts (%s items each, one txn_begin/insert/txn_end per "
           "item, pool_commit every %u)\n", cnt (s->asked), COMMIT_EVERY);
  for (int i = 0; i < 2; i++)
    if (res->ins[i].stopped)
      fprintf (fp, "  !! %s run STOPPED after %s items: RSS passed %.0f MiB "
               "(--max-rss-mib)\n", res->ins[i].name, cnt (res->ins[i].items),
               (double) res->cfg.max_rss_kib / 1024);
  fprintf (fp, "  %-40s %14s %14s\n", "", "sequential", "random");
  row_count (fp, "items inserted", s->items, r->items);
  row (fp, "inserts/s (whole run, commits incl.)", 0, "",
       rate (s->items, s->secs), rate (r->items, r->secs));
  for (int i = 0; i < 3 && !s->stopped && !r->stopped; i++) {
    const struct mem_point *s0 = i ? &s->mem[i - 1] : NULL;
    const struct mem_point *r0 = i ? &r->mem[i - 1] : NULL;
    char label[64];

    snprintf (label, sizeof label, "  inserts/s over %s", seg[i]);
    row (fp, label, 0, "",
         rate (s->mem[i].items - (s0 ? s0->items : 0),
               s->mem[i].secs - (s0 ? s0->secs : 0)),
         rate (r->mem[i].items - (r0 ? r0->items : 0),
               r->mem[i].secs - (r0 ? r0->secs : 0)));
  }
  row (fp, "time, s", 1, "", s->secs, r->secs);
  row_count (fp, "commits (explicit + dirty limit)", s->commits, r->commits);
  row_count (fp, "tree nodes (leaves + internal)", s->tree.nodes,
             r->tree.nodes);
  row (fp, "tree height", 0, "", s->tree.height, r->tree.height);
  row (fp, "tree size, MiB (nodes x node size)", 1, "",
       mib (s->tree.nodes * s->node_size), mib (r->tree.nodes * r->node_size));
  row (fp, "tree size / node cache", 1, "x",
       ratio ((double) (s->tree.nodes * s->node_size), cache),
       ratio ((double) (r->tree.nodes * r->node_size), cache));
  row (fp, "items per leaf (avg)", 1, "",
       ratio ((double) s->tree.items, (double) s->tree.leaves),
       ratio ((double) r->tree.items, (double) r->tree.leaves));
  row (fp, "MiB written to the pool", 1, "", mib (s->io.write_bytes),
       mib (r->io.write_bytes));
  row (fp, "  / payload (8 + 64 bytes per item)", 1, "x",
       ratio ((double) s->io.write_bytes, (double) s->items * item),
       ratio ((double) r->io.write_bytes, (double) r->items * item));
  row (fp, "MiB read from the pool (cache misses)", 1, "",
       mib (s->io.read_bytes), mib (r->io.read_bytes));
  row (fp, "time in pwrite, s", 1, "", (double) s->io.write_ns / 1e9,
       (double) r->io.write_ns / 1e9);
  row (fp, "time in pread, s", 1, "", (double) s->io.read_ns / 1e9,
       (double) r->io.read_ns / 1e9);
  row (fp, "time in fdatasync, s", 1, "", (double) s->io.flush_ns / 1e9,
       (double) r->io.flush_ns / 1e9);
  row (fp, "time in the engine (the rest), s", 1, "",
       s->secs - io_secs (&s->io), r->secs - io_secs (&r->io));
  row_count (fp, "free extents at the end (space map ranges)",
             s->mem[2].free_extents, r->mem[2].free_extents);
  row_count (fp, "node cache misses", s->mem[2].cache.misses,
             r->mem[2].cache.misses);
  row_count (fp, "node cache evictions", s->mem[2].cache.evictions,
             r->mem[2].cache.evictions);

  fprintf (fp, "\nLookups (%s random present keys, after the run, same pool "
           "and cache)\n", cnt (s->lookups));
  row (fp, "lookups/s", 0, "", rate (s->lookups, s->lookup_secs),
       rate (r->lookups, r->lookup_secs));
  row (fp, "node cache hit ratio", 1, "%",
       100 * ratio ((double) s->lookup_hits,
                    (double) (s->lookup_hits + s->lookup_misses)),
       100 * ratio ((double) r->lookup_hits,
                    (double) (r->lookup_hits + r->lookup_misses)));
  row (fp, "node reads per lookup", 2, "",
       ratio ((double) s->lookup_io.reads, (double) s->lookups),
       ratio ((double) r->lookup_io.reads, (double) r->lookups));
  row (fp, "time in pread, s", 1, "", (double) s->lookup_io.read_ns / 1e9,
       (double) r->lookup_io.read_ns / 1e9);
}

/* The memory part of the table. */
static void
print_memory (FILE *fp, const struct results *res)
{
  fprintf (fp, "\nMemory during the insert runs (node cache limit %.0f MiB; "
           "VmHWM %s)\n", mib (res->cfg.cache_bytes),
           res->ins[0].hwm_reset ? "reset at each run's start" :
           "NOT reset: peak of the whole process");
  fprintf (fp, "  %-11s %5s %10s %13s %10s %10s %11s %9s %7s\n", "run", "at",
           "items", "pool used MiB", "VmHWM MiB", "VmRSS MiB", "cache MiB",
           "nodes", "dirty");
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "  %-11s %5s %10s %13s %10.1f %10s %11s %9s %7s\n", ir->name,
             "start", "0", "-", (double) ir->start_rss_kib / 1024, "-", "-",
             "-", "-");
    for (int i = 0; i < 3; i++) {
      const struct mem_point *m = &ir->mem[i];
      char at[8];

      if (m->items == 0)
        continue;             /* not reached: the run stopped */
      if (i == 2 && ir->stopped)
        snprintf (at, sizeof at, "stop");
      else
        snprintf (at, sizeof at, "%d%%", i == 2 ? 100 : 25 << i);
      fprintf (fp, "  %-11s %5s %10s %13.1f %10.1f %10.1f %11.1f %9s %7s\n",
               ir->name, at, cnt (m->items), mib (m->pool_used),
               (double) m->hwm_kib / 1024, (double) m->rss_kib / 1024,
               mib (m->cache.bytes), cnt (m->cache.nodes),
               cnt (m->cache.dirty_nodes));
    }
  }
}

/* The whole table. */
static void
print_table (FILE *fp, const struct results *res)
{
  const struct config *cfg = &res->cfg;
  const struct yardstick *y = &res->yard;

  fprintf (fp, "Cairn engine benchmark (%s %s)\n", PACKAGE_NAME,
           PACKAGE_VERSION);
  fprintf (fp, "  pool files in %s (%s), kernel %s, %ld CPUs\n", work_dir,
           res->fs, res->kernel, sysconf (_SC_NPROCESSORS_ONLN));
  fprintf (fp, "  node size %u bytes, node cache %.0f MiB, dirty limit %.0f "
           "MiB%s,\n  RSS guard %.0f MiB, seed %" PRIu64 "%s, load average "
           "%.1f at the start, %.1f at the end\n", res->ins[0].node_size,
           mib (cfg->cache_bytes), mib (dirty_limit (cfg)),
           cfg->dirty_limit ? "" : " (the engine's: cache / 4)",
           (double) cfg->max_rss_kib / 1024, cfg->seed,
           cfg->quick ? ", --quick" : "", res->load[0], res->load[1]);

  fprintf (fp, "\nYardstick: a plain file on the same file system\n");
  fprintf (fp, "  %-58s %8.2f s  (%.0f MiB/s; %.0f items/s of payload)\n",
           "write the insert payload, 1 MiB pwrites + 1 fdatasync",
           y->secs, mib (y->bytes) / MAX (y->secs, 1e-9),
           rate (res->cfg.items, y->secs));
  fprintf (fp, "  %-58s %8.2f ms (p90 %.2f)\n",
           "4 KiB pwrite over written data + fdatasync, median",
           y->sync_ms, y->sync_p90_ms);
  fprintf (fp, "  %-58s %8.2f ms (p90 %.2f)\n",
           "4 KiB pwrite into a hole + fdatasync, median",
           y->alloc_sync_ms, y->alloc_sync_p90_ms);

  print_inserts (fp, res);
  print_memory (fp, res);

  fprintf (fp, "\nCommit latency (pool_commit on the random tree: %s leaves, "
           "%s free extents)\nEach commit writes the nodes and the whole space "
           "map, fdatasyncs, writes the\nsuperblock and fdatasyncs again, all "
           "on the real file.\n", cnt (res->commit_tree_leaves),
           cnt (res->commit_free_extents));
  fprintf (fp, "  %7s %7s %5s %10s %8s %8s %10s %10s %11s\n", "leaves",
           "dirty", "reps", "median ms", "p90 ms", "max ms", "MiB wrtn",
           "pwrite ms", "fdatasync ms");
  for (int s = 0; s < NCOMMIT; s++) {
    const struct commit_run *c = &res->commit[s];

    fprintf (fp, "  %7s %7.0f %5u %10.2f %8.2f %8.2f %10.2f %10.2f %11.2f%s\n",
             cnt (c->leaves), c->dirty_nodes, c->reps, c->ms, c->p90_ms,
             c->max_ms, c->write_mib, c->write_ms, c->flush_ms,
             c->leaves < c->want ? "  (capped: tree too small)" : "");
  }

  fprintf (fp, "\nOpen (dev_file_open + pool_open + pool_tree_open + one "
           "lookup)\n");
  fprintf (fp, "  pool of %s items in random order, %.1f MiB used, built in "
           "%.1f s\n  (setup: no dirty limit, a commit every %s items)",
           cnt (res->open.items), mib (res->open.pool_used),
           res->open.build_secs, cnt (OPEN_COMMIT_EVERY));
  if (res->open.build_reopens)
    fprintf (fp, " (reopened %u times to empty an overgrown node cache)",
             res->open.build_reopens);
  fprintf (fp, "\n");
  fprintf (fp, "  %-40s %8.2f ms (max %.2f), %s reads, %.1f KiB\n",
           res->open.cold ? "cold (page cache dropped), median" :
           "NOT cold (could not drop the page cache)",
           res->open.cold_ms, res->open.cold_max_ms, cnt (res->open.reads),
           (double) res->open.read_bytes / 1024);
  fprintf (fp, "  %-40s %8.2f ms (max %.2f)\n", "warm, median",
           res->open.warm_ms, res->open.warm_max_ms);

  fprintf (fp, "\nfsck (fsck_pool, default 64 MiB cache, page cache warm)\n");
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "  %-11s %8.2f s  %s nodes, %s items, %s problems%s\n",
             ir->name, ir->fsck_secs, cnt (ir->fsck.nodes),
             cnt (ir->fsck.items), cnt (ir->fsck.errors),
             ir->fsck.errors ? "  <-- NOT CLEAN" : "");
  }
}

/* A JSON object of I/O counters. */
static void
json_io (FILE *fp, const char *name, const struct io_stats *io)
{
  fprintf (fp, "\"%s\": {\"reads\": %" PRIu64 ", \"read_bytes\": %" PRIu64
           ", \"read_s\": %.6f, \"writes\": %" PRIu64 ", \"write_bytes\": %"
           PRIu64 ", \"write_s\": %.6f, \"flushes\": %" PRIu64
           ", \"flush_s\": %.6f}", name, io->reads, io->read_bytes,
           (double) io->read_ns / 1e9, io->writes, io->write_bytes,
           (double) io->write_ns / 1e9, io->flushes,
           (double) io->flush_ns / 1e9);
}

/* A string as a JSON literal. */
static void
json_str (FILE *fp, const char *s)
{
  fputc ('"', fp);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fputc ('\\', fp);
    if ((unsigned char) *s < 0x20)
      fprintf (fp, "\\u%04x", (unsigned char) *s);
    else
      fputc (*s, fp);
  }
  fputc ('"', fp);
}

/* The same figures as one JSON object. */
static void
print_json (FILE *fp, const struct results *res)
{
  const struct config *cfg = &res->cfg;

  fprintf (fp, "{\n  \"config\": {\"items\": %" PRIu64 ", \"open_items\": %"
           PRIu64 ", \"lookups\": %" PRIu64 ", \"cache_bytes\": %" PRIu64
           ", \"dirty_limit_bytes\": %" PRIu64 ", \"max_rss_kib\": %" PRIu64
           ", \"node_size\": %u"
           ", \"seed\": %" PRIu64 ", \"quick\": %s, \"commit_every\": %u"
           ", \"key_bytes\": %d, \"value_bytes\": %d, \"dir\": ",
           cfg->items, cfg->open_items, cfg->lookups, cfg->cache_bytes,
           dirty_limit (cfg), cfg->max_rss_kib, res->ins[0].node_size,
           cfg->seed,
           cfg->quick ? "true" : "false", COMMIT_EVERY, KEY_LEN, VAL_LEN);
  json_str (fp, work_dir);
  fprintf (fp, ", \"fs\": ");
  json_str (fp, res->fs);
  fprintf (fp, ", \"kernel\": ");
  json_str (fp, res->kernel);
  fprintf (fp, ", \"load_start\": %.2f, \"load_end\": %.2f", res->load[0],
           res->load[1]);
  fprintf (fp, "},\n  \"yardstick\": {\"bytes\": %" PRIu64 ", \"write_s\": %.6f"
           ", \"sync_ms\": %.4f, \"sync_p90_ms\": %.4f, \"alloc_sync_ms\": %.4f"
           ", \"alloc_sync_p90_ms\": %.4f},\n  \"inserts\": [",
           res->yard.bytes, res->yard.secs, res->yard.sync_ms,
           res->yard.sync_p90_ms, res->yard.alloc_sync_ms,
           res->yard.alloc_sync_p90_ms);
  for (int r = 0; r < 2; r++) {
    const struct insert_run *ir = &res->ins[r];

    fprintf (fp, "%s\n    {\"keys\": \"%s\", \"items\": %" PRIu64
             ", \"asked\": %" PRIu64 ", \"stopped\": %s, \"secs\": %.6f"
             ", \"inserts_per_s\": %.1f, \"commits\": %" PRIu64
             ", \"explicit_commits\": %" PRIu64 ", \"tree_nodes\": %" PRIu64
             ", \"tree_bytes\": %" PRIu64 ", \"tree_items\": %" PRIu64
             ", \"start_rss_kib\": %" PRIu64 ", \"hwm_reset\": %s, ",
             r ? "," : "", ir->name, ir->items, ir->asked,
             ir->stopped ? "true" : "false", ir->secs,
             rate (ir->items, ir->secs), ir->commits, ir->explicit_commits,
             ir->tree.nodes, ir->tree.nodes * ir->node_size, ir->tree.items,
             ir->start_rss_kib, ir->hwm_reset ? "true" : "false");
    json_io (fp, "io", &ir->io);
    fprintf (fp, ",\n     \"memory\": [");
    for (int i = 0; i < 3; i++) {
      const struct mem_point *m = &ir->mem[i];

      fprintf (fp, "%s{\"pct\": %d, \"items\": %" PRIu64 ", \"secs\": %.6f"
               ", \"vm_hwm_kib\": %" PRIu64 ", \"vm_rss_kib\": %" PRIu64
               ", \"pool_used_bytes\": %" PRIu64 ", \"free_extents\": %" PRIu64
               ", \"cache_bytes\": %" PRIu64
               ", \"cache_nodes\": %" PRIu64 ", \"dirty_nodes\": %" PRIu64
               ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
               ", \"evictions\": %" PRIu64 "}", i ? ", " : "",
               i == 2 ? 100 : 25 << i, m->items, m->secs, m->hwm_kib,
               m->rss_kib, m->pool_used, m->free_extents, m->cache.bytes,
               m->cache.nodes,
               m->cache.dirty_nodes, m->cache.hits, m->cache.misses,
               m->cache.evictions);
    }
    fprintf (fp, "],\n     \"lookups\": {\"count\": %" PRIu64 ", \"secs\": %.6f"
             ", \"per_s\": %.1f, \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
             ", ", ir->lookups, ir->lookup_secs,
             rate (ir->lookups, ir->lookup_secs), ir->lookup_hits,
             ir->lookup_misses);
    json_io (fp, "io", &ir->lookup_io);
    fprintf (fp, "},\n     \"fsck\": {\"secs\": %.6f, \"nodes\": %" PRIu64
             ", \"items\": %" PRIu64 ", \"errors\": %" PRIu64 "}}",
             ir->fsck_secs, ir->fsck.nodes, ir->fsck.items, ir->fsck.errors);
  }
  fprintf (fp, "\n  ],\n  \"commit\": {\"tree_leaves\": %" PRIu64
           ", \"free_extents\": %" PRIu64 ", \"runs\": [",
           res->commit_tree_leaves, res->commit_free_extents);
  for (int s = 0; s < NCOMMIT; s++) {
    const struct commit_run *c = &res->commit[s];

    fprintf (fp, "%s\n    {\"want_leaves\": %u, \"leaves\": %u, \"reps\": %u"
             ", \"median_ms\": %.4f, \"p90_ms\": %.4f, \"max_ms\": %.4f"
             ", \"dirty_nodes\": %.0f, \"write_mib\": %.4f, \"write_ms\": %.4f"
             ", \"flush_ms\": %.4f, \"flushes\": %" PRIu64 "}", s ? "," : "",
             c->want, c->leaves, c->reps, c->ms, c->p90_ms, c->max_ms,
             c->dirty_nodes, c->write_mib, c->write_ms, c->flush_ms,
             c->flushes);
  }
  fprintf (fp, "\n  ]},\n  \"open\": {\"items\": %" PRIu64 ", \"build_s\": %.6f"
           ", \"build_reopens\": %u"
           ", \"pool_used_bytes\": %" PRIu64 ", \"cold\": %s"
           ", \"cold_ms\": %.4f, \"cold_max_ms\": %.4f, \"warm_ms\": %.4f"
           ", \"warm_max_ms\": %.4f, \"reads\": %" PRIu64
           ", \"read_bytes\": %" PRIu64 "}\n}\n", res->open.items,
           res->open.build_secs, res->open.build_reopens, res->open.pool_used,
           res->open.cold ? "true" : "false", res->open.cold_ms,
           res->open.cold_max_ms, res->open.warm_ms, res->open.warm_max_ms,
           res->open.reads, res->open.read_bytes);
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
