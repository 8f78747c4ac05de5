/* bench-engine: the measurement runs.
 *
 * The pools on their timing devices, the keys and values, and one function
 * per part of the table: the plain-file yardstick, an insert run (with its
 * memory checkpoints, lookups, tree walk and fsck), commit latency, and the
 * open of a large pool.  Each fills its struct of bench-engine.h; the report
 * (bench-engine-report.c) prints them.  The design notes are at the top of
 * bench-engine.c.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-engine.h"

#define OPEN_REPS 3
#define NO_DIRTY_LIMIT (1ull << 40)
#define SYNC_REPS 32

/* Dirty leaves per commit-latency measurement. */
static const unsigned commit_sizes[NCOMMIT] = { 1, 100, 10000 };

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
void
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
void
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

/* Commit latency on the random pool: for each size, dirty that many
 * distinct leaves (rewrite the first item of leaves spread evenly over the
 * tree, other leaves in each repetition) and time pool_commit.  The dirty
 * limit is lifted so that no commit happens before the timed one.
 */
void
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
void
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
