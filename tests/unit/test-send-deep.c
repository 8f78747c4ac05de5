/* Unit tests of send and receive on deep trees: the randomised chain of
 * incremental streams from a volume whose tree is three levels deep
 * (send::deep_tree_chain), and the reproducers of what it and
 * volume_shapes::deep_trees found.
 */
#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fsck.h"
#include "replicate.h"
#include "volume.h"
#include "test-util.h"
#include "test-send.h"

/* Snapshot a's volume v as s0 and send it whole to b; trim len bytes at
 * off through the open handle v (closed here); snapshot s1 and send it as
 * an incremental from s0: b's v@s1 must read as a's.
 */
static void
trim_between_two_sends (struct cairn_pool *a, struct cairn_pool *b,
                        struct cairn_volume *v, uint64_t len, uint64_t off)
{
  struct rng rng = { 1 };
  struct repl_recv_result res;
  struct buf s;

  cr_assert_eq (snap_create (a, "v", "s0"), 0, "%s", cairn_errmsg ());
  s = send_to_buf (a, "v@s0", NULL, NULL);
  cr_assert_eq (receive_buf (b, "v", s.p, s.len, &rng, NULL), 0, "%s",
                cairn_errmsg ());
  free (s.p);
  cr_assert_eq (vol_trim (v, (uint32_t) len, off, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
  cr_assert_eq (snap_create (a, "v", "s1"), 0, "%s", cairn_errmsg ());
  s = send_to_buf (a, "v@s1", "s0", NULL);
  cr_assert_eq (receive_buf (b, "v", s.p, s.len, &rng, &res), 0, "%s",
                cairn_errmsg ());
  free (s.p);
  cr_assert (res.incremental);
  assert_same (a, "v@s1", b, "v@s1");
}

/* An incremental stream carries the trim of a whole leaf.  Single-block
 * extents at every other block fill 4 KiB leaves of 56 items; trimming
 * one leaf's items empties it, its full sibling cannot take it in, and
 * the leaf leaves the tree.  The diff that makes the stream used to miss
 * those holes (the sibling whose range grew was not rewritten), and the
 * receiver kept the old data where the source reads zeros.
 */
Test (send, incremental_carries_the_trim_of_a_whole_leaf)
{
  struct pool_format_opts fo = { .node_size = NODE_SIZE_MIN };
  enum { BLOCKS = 12288, PER_LEAF = 56 };
  const uint64_t lo = 2 * PER_LEAF * 91, hi = lo + 2 * PER_LEAF;
  struct cairn_dev *da, *db = mem_pool (128 * MIB, NULL);
  struct cairn_pool *a, *b = pool_open_ok (db);
  struct cairn_volume *v;
  uint8_t data[4096];

  cr_assert_eq (dev_mem_create (256 * MIB, &da), 0);
  cr_assert_eq (pool_format (da, &fo, NULL), 0, "%s", cairn_errmsg ());
  a = pool_open_ok (da);
  cr_assert_eq (vol_create (a, "v", (uint64_t) BLOCKS * 4096, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (a, "v", &v), 0, "%s", cairn_errmsg ());
  for (uint64_t i = 0; i < BLOCKS; i += 2) {
    fill_pattern (data, sizeof data, i + 1);
    cr_assert_eq (vol_pwrite (v, data, sizeof data, i * 4096, 0), 0, "%s",
                  cairn_errmsg ());
  }
  trim_between_two_sends (a, b, v, (hi - lo) * 4096, lo * 4096);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (db);
}

/* ---------------------------------------------------------------- deep trees */

/* send::deep_tree_chain: a chain of incremental streams of a volume whose
 * tree is three levels deep, in the shapes that sequential runs, scattered
 * blocks, zero writes, large trims (whole leaves exactly, and ranges across
 * leaf boundaries) and resizes leave.  The other tests here send small
 * volumes, whose trees are one or two levels deep.
 *
 * The source pool has 4 KiB nodes and its volume (48 MiB) starts with a
 * single-block write at every other block, so that its tree has three
 * levels (the test fails if it never had); the target pool has the default
 * node size or, in some seeds, 4 KiB too.  Both have a small node cache and
 * no background work: the test steps the reclaim of deleted snapshots, so
 * that a seed replays exactly.
 *
 * Each round changes the source in random phases, snapshots it, and sends
 * the snapshot from the target's newest one: as it is, or cut short and
 * resumed from the receiver's token (after a reopen of the target,
 * sometimes; the resumed stream cut again, sometimes); or not at all (the
 * next stream then skips a snapshot); or from an older snapshot that both
 * sides have, received with rollback (after writes to the target's live
 * volume, sometimes), which destroys the target's newer snapshots.  The
 * received snapshot and the target's live volume must read as the source's
 * snapshot, byte for byte.  Between rounds, old snapshots are deleted on
 * either side (never the target's newest, which the next stream needs as
 * its base on both sides), snapshots both sides have are compared again,
 * and either pool is reopened after fsck.  At the end every snapshot both
 * sides have must still be the same, fsck must be clean on both pools, and
 * deleting what was received must give back every block of the target.
 *
 * Every failure message names the round and its step, and a difference the
 * byte, its block and the source phase that last changed that block.  The
 * seed is printed (test-util.h).  CAIRN_TEST_SCALE=N (a positive integer,
 * default 1) runs N times as many rounds, for bug hunts; CAIRN_TEST_VERBOSE=1
 * prints every step and phase as it starts:
 *
 *   CAIRN_TEST_SEED=7 CAIRN_TEST_SCALE=20 ./tests/unit/test-send \
 *     --filter 'send/deep_tree_chain'
 *
 * At scale 1 (12 rounds) it takes 1.3 to 3 seconds in a normal build.  The
 * tests after it are the reproducers of what it found.
 */
#define DT_BLK 4096u
#define DT_BLOCKS 12288u                /* the source volume at first */
#define DT_MINBLOCKS (DT_BLOCKS - 2048) /* ... at its smallest */
#define DT_MAXBLOCKS (DT_BLOCKS + 2048) /* ... at its largest */
#define DT_ROUNDS 12u                   /* at scale 1 */
#define DT_KEEP 6u                      /* snapshots kept on either side */
#define DT_IOBLOCKS 256u                /* largest write of one call */
#define DT_POOL_BYTES (512ull * MIB)

/* Failure messages start with the round and its step. */
#define DT "round %u, %s: "
#define DTA(d) (d)->round, (d)->step

/* Snapshot s<N> of the chain. */
struct dt_snap {
  bool on_src, on_dst;                /* the sides that have it */
  uint32_t *wphase;                   /* per block: the source phase that
                                         last changed it (0: the fill) */
};

struct dt {
  struct cairn_dev *da, *db;
  struct cairn_pool *a, *b;           /* source and target */
  struct cairn_volume *h;             /* the source's live "v" */
  struct rng r;
  bool verbose;
  unsigned round;
  char step[256];                     /* what the round is doing */
  unsigned phase;                     /* the source's last phase */
  char (*log)[160];                   /* every phase, by number */
  size_t logcap;
  uint64_t size;                      /* the source volume's size, bytes */
  uint32_t *wphase;                   /* the live volume's, per block */
  struct dt_snap *snaps;              /* s0 .. s<nsnaps - 1> */
  unsigned nsnaps, newest;            /* newest: the target's newest */
  uint8_t *buf;                       /* DT_IOBLOCKS blocks */
  uint64_t tag;                       /* the pattern of the next write */
  unsigned src_levels, dst_levels, deep_rounds;
  unsigned n_sent, n_cut, n_resumed, n_skipped, n_rollback, n_diverged;
  unsigned n_leaf_trims, n_cross_trims, n_resize, n_del_src, n_del_dst;
  unsigned n_reopen;
  uint64_t stream_bytes;
};

/* Say what the round does now. */
static void
dt_step (struct dt *d, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (d->step, sizeof d->step, fmt, ap);
  va_end (ap);
  if (d->verbose)
    fprintf (stderr, "round %u: %s\n", d->round, d->step);
}

/* Start a phase on the source: its number and action, kept for failure
 * messages about the blocks it changes.
 */
static void
dt_phase (struct dt *d, const char *fmt, ...)
{
  va_list ap;

  if (++d->phase >= d->logcap) {
    d->logcap = d->logcap ? 2 * d->logcap : 256;
    d->log = realloc (d->log, d->logcap * sizeof *d->log);
    cr_assert_not_null (d->log);
  }
  va_start (ap, fmt);
  vsnprintf (d->log[d->phase], sizeof *d->log, fmt, ap);
  va_end (ap);
  dt_step (d, "phase %u (%s)", d->phase, d->log[d->phase]);
}

/* Blocks [b, b + n) changed in the current phase. */
static void
dt_mark (struct dt *d, uint64_t b, uint64_t n)
{
  for (uint64_t i = b; i < b + n && i < DT_MAXBLOCKS; i++)
    d->wphase[i] = d->phase;
}

/* Whole blocks of the source volume. */
static uint64_t
dt_blocks (const struct dt *d)
{
  return d->size / DT_BLK;
}

/* Write blocks [b, b + n) of the source (n <= DT_IOBLOCKS): data, or zeros
 * written as data.
 */
static void
dt_write (struct dt *d, uint64_t b, uint64_t n, bool zeros)
{
  if (zeros)
    memset (d->buf, 0, n * DT_BLK);
  else
    fill_pattern (d->buf, n * DT_BLK, ++d->tag);
  cr_assert_eq (vol_pwrite (d->h, d->buf, (uint32_t) (n * DT_BLK), b * DT_BLK,
                            0), 0, DT "write blocks %" PRIu64 "-%" PRIu64 ": %s",
                DTA (d), b, b + n - 1, cairn_errmsg ());
  dt_mark (d, b, n);
}

/* Trim (or zero) blocks [b, b + n) of the source. */
static void
dt_trim (struct dt *d, uint64_t b, uint64_t n, bool zero)
{
  int r = zero ? vol_zero (d->h, (uint32_t) (n * DT_BLK), b * DT_BLK, 0)
    : vol_trim (d->h, (uint32_t) (n * DT_BLK), b * DT_BLK, 0);

  cr_assert_eq (r, 0, DT "%s blocks %" PRIu64 "-%" PRIu64 ": %s", DTA (d),
                zero ? "zero" : "trim", b, b + n - 1, cairn_errmsg ());
  dt_mark (d, b, n);
}

/* ---- tree shapes */

/* A leaf: its key range [lo, hi) and its items' blocks [first, end). */
struct dt_leaf {
  uint64_t lo, hi, first, end;
  uint32_t items;
};

struct dt_leaves {
  struct dt_leaf *v;
  size_t n, cap;
};

static int
dt_on_leaf (void *opaque, const uint8_t *lo, size_t lolen, const uint8_t *hi,
            size_t hilen, const struct btree_leaf *leaf)
{
  struct dt_leaves *ls = opaque;
  struct dt_leaf *l;
  const uint8_t *k, *v;
  size_t kl, vl;

  if (ls->n == ls->cap) {
    ls->cap = ls->cap ? 2 * ls->cap : 256;
    ls->v = realloc (ls->v, ls->cap * sizeof *ls->v);
    cr_assert_not_null (ls->v);
  }
  l = &ls->v[ls->n++];
  l->lo = lo && lolen == 8 ? get_be64 (lo) : 0;
  l->hi = hi && hilen == 8 ? get_be64 (hi) : UINT64_MAX;
  l->items = btree_leaf_nitems (leaf);
  l->first = l->end = l->lo;
  if (l->items > 0) {
    btree_leaf_item (leaf, 0, &k, &kl, &v, &vl);
    l->first = get_be64 (k);
    btree_leaf_item (leaf, l->items - 1, &k, &kl, &v, &vl);
    l->end = get_be64 (k) + get_le32 (v);
  }
  return 0;
}

static int
dt_on_node (void *opaque, const struct blkptr *bp, unsigned level)
{
  unsigned *levels = opaque;

  (void) bp;
  *levels = MAX (*levels, level + 1);
  return 0;
}

static int
dt_on_item (void *opaque, const uint8_t *key, size_t klen, const uint8_t *val,
            size_t vlen)
{
  (void) opaque, (void) key, (void) klen, (void) val, (void) vlen;
  return 0;
}

/* The leaves of a volume's live tree (ls) or its depth (levels), every
 * node read and checked.
 */
static void
dt_tree (struct dt *d, struct cairn_pool *pool, const char *name,
         struct dt_leaves *ls, unsigned *levels)
{
  struct btree_visitor vis = { dt_on_node, dt_on_item, levels };
  struct btree_root root;
  struct vol_info info;
  struct btree *t;
  int r;

  cr_assert_eq (vol_stat (pool, name, &info), 0, DT "stat %s: %s", DTA (d),
                name, cairn_errmsg ());
  cr_assert_eq (pool_tree_open (pool, info.id, &t), 0, DT "tree of %s: %s",
                DTA (d), name, cairn_errmsg ());
  btree_rdlock (t);
  btree_get_root (t, &root);
  r = ls ? btree_walk_since (pool_cache (pool), &root, 0, dt_on_leaf, ls)
    : btree_walk (pool_cache (pool), &root, &vis);
  btree_unlock (t);
  cr_assert_eq (r, 0, DT "walk of %s: %s", DTA (d), name, cairn_errmsg ());
}

/* ---- phases on the source */

/* A sequential run written in calls of a few blocks (one item each) or of
 * many (long extents).
 */
static void
dt_seq (struct dt *d)
{
  static const unsigned chunks[] = { 1, 1, 2, 7, 29, 64, 256 };
  unsigned chunk = chunks[rng_below (&d->r, 7)];
  uint64_t nb = dt_blocks (d), b = rng_below (&d->r, nb);
  uint64_t n = 64 + rng_below (&d->r, 4032);

  /* MIN evaluates its arguments twice: no rng_below in them. */
  n = MIN (n, nb - b);

  dt_phase (d, "sequential write of blocks %" PRIu64 "-%" PRIu64 " in calls "
            "of %u blocks", b, b + n - 1, chunk);
  for (uint64_t i = 0; i < n; i += chunk)
    dt_write (d, b + i, MIN (chunk, n - i), false);
}

/* Single blocks at random places of a window, some of them zeros. */
static void
dt_scatter (struct dt *d)
{
  uint64_t nb = dt_blocks (d), win = 64 + rng_below (&d->r, nb - 64);
  uint64_t lo = rng_below (&d->r, nb - win + 1);
  unsigned n = 100 + (unsigned) rng_below (&d->r, 1000);

  dt_phase (d, "%u scattered single blocks in %" PRIu64 "-%" PRIu64, n, lo,
            lo + win - 1);
  for (unsigned i = 0; i < n; i++)
    dt_write (d, lo + rng_below (&d->r, win), 1, rng_below (&d->r, 8) == 0);
}

/* Every second or third block of a range, ascending or descending: one
 * item each, which makes the tree deep again after trims.
 */
static void
dt_alternate (struct dt *d)
{
  unsigned stride = 2 + (unsigned) rng_below (&d->r, 2);
  uint64_t nb = dt_blocks (d), lo = rng_below (&d->r, nb);
  uint64_t n = 200 + rng_below (&d->r, 3000), hi;
  bool down = rng_below (&d->r, 3) == 0;

  n = MIN (n, (nb - lo + stride - 1) / stride);
  hi = lo + (n - 1) * stride;

  dt_phase (d, "every %s block of %" PRIu64 "-%" PRIu64 ", %s",
            stride == 2 ? "2nd" : "3rd", lo, hi, down ? "descending" : "ascending");
  for (uint64_t i = 0; i < n; i++)
    dt_write (d, down ? hi - i * stride : lo + i * stride, 1, false);
}

/* A range of zeros: zeroed, or written as zero data. */
static void
dt_zeros (struct dt *d)
{
  uint64_t nb = dt_blocks (d), b = rng_below (&d->r, nb);
  uint64_t n = 1 + rng_below (&d->r, 2048);
  bool write = rng_below (&d->r, 2);

  n = MIN (n, nb - b);

  dt_phase (d, "%s blocks %" PRIu64 "-%" PRIu64, write ? "write zeros over"
            : "zero", b, b + n - 1);
  if (!write)
    dt_trim (d, b, n, true);
  else
    for (uint64_t i = 0; i < n; i += DT_IOBLOCKS)
      dt_write (d, b + i, MIN (DT_IOBLOCKS, n - i), true);
}

/* Large trims at random places. */
static void
dt_large_trims (struct dt *d)
{
  unsigned k = 1 + (unsigned) rng_below (&d->r, 3);

  for (unsigned i = 0; i < k; i++) {
    uint64_t nb = dt_blocks (d), b = rng_below (&d->r, nb);
    uint64_t n = 16 + rng_below (&d->r, 8192);

    n = MIN (n, nb - b);

    dt_phase (d, "trim blocks %" PRIu64 "-%" PRIu64 " (%u of %u)", b,
              b + n - 1, i + 1, k);
    dt_trim (d, b, n, false);
  }
}

/* A trim shaped by the tree's leaves as they are now: exactly the items of
 * one to four leaves (which empties them), their whole key ranges, or a
 * range across the boundary of two leaves.
 */
static void
dt_leaf_trim (struct dt *d)
{
  struct dt_leaves ls = { NULL, 0, 0 };
  uint64_t nb = dt_blocks (d), lo, hi;
  unsigned kind = (unsigned) rng_below (&d->r, 3);
  bool zero = rng_below (&d->r, 5) == 0;
  size_t k, c;
  const char *what;

  dt_step (d, "find the source's leaves");
  dt_tree (d, d->a, "v", &ls, NULL);
  if (ls.n < 3) {
    free (ls.v);
    dt_large_trims (d);
    return;
  }
  k = rng_below (&d->r, ls.n - 1);
  c = 1 + rng_below (&d->r, MIN (4, ls.n - k));
  if (kind == 0) {
    what = "the items of";
    lo = ls.v[k].first;
    hi = ls.v[k + c - 1].end;
    d->n_leaf_trims++;
  }
  else if (kind == 1) {
    what = "the key ranges of";
    lo = ls.v[k].lo;
    hi = MIN (ls.v[k + c - 1].hi, nb);
    d->n_leaf_trims++;
  }
  else {
    /* k + 1 < ls.n: the boundary is ls.v[k].hi. */
    uint64_t edge = ls.v[k].hi, below = 1 + rng_below (&d->r, 120);

    what = "a range across the upper boundary of";
    c = 1;
    lo = edge - MIN (edge, below);
    hi = edge + 1 + rng_below (&d->r, 120);
    d->n_cross_trims++;
  }
  hi = MIN (hi, nb);
  if (lo >= hi) {
    free (ls.v);
    dt_large_trims (d);
    return;
  }
  dt_phase (d, "%s %s leaves %zu-%zu of %zu (keys %" PRIu64 "-%" PRIu64
            ", %u items in the first): blocks %" PRIu64 "-%" PRIu64,
            zero ? "zero" : "trim", what, k, k + c - 1, ls.n, ls.v[k].lo,
            ls.v[k + c - 1].hi, ls.v[k].items, lo, hi - 1);
  dt_trim (d, lo, hi - lo, zero);
  free (ls.v);
}

/* Grow or shrink the source, sometimes to a size that ends inside a block
 * (whose tail is then written, sometimes), sometimes in the generation of
 * the writes before.
 */
static void
dt_resize (struct dt *d)
{
  uint64_t old = d->size, size;
  bool grow = rng_below (&d->r, 2), odd = rng_below (&d->r, 3) == 0;
  bool commit = rng_below (&d->r, 2);
  uint64_t by = 1 + rng_below (&d->r, 1024);

  if (grow)
    size = MIN ((dt_blocks (d) + by) * DT_BLK, (uint64_t) DT_MAXBLOCKS * DT_BLK);
  else
    size = MAX ((dt_blocks (d) - by) * DT_BLK, (uint64_t) DT_MINBLOCKS * DT_BLK);
  if (odd)
    size -= 512 * (1 + rng_below (&d->r, 7));
  dt_phase (d, "resize from %" PRIu64 " to %" PRIu64 " bytes%s", old, size,
            commit ? ", after a commit" : "");
  vol_close (d->h);
  d->h = NULL;
  if (commit)
    cr_assert_eq (pool_commit (d->a), 0, DT "commit: %s", DTA (d),
                  cairn_errmsg ());
  cr_assert_eq (vol_resize (d->a, "v", size, size < old), 0, DT "%s", DTA (d),
                cairn_errmsg ());
  cr_assert_eq (vol_open (d->a, "v", &d->h), 0, DT "open: %s", DTA (d),
                cairn_errmsg ());
  cr_assert_eq (vol_size (d->h), size, DT "size", DTA (d));
  d->size = size;
  dt_mark (d, MIN (old, size) / DT_BLK,
           (MAX (old, size) + DT_BLK - 1) / DT_BLK - MIN (old, size) / DT_BLK);
  if (size % DT_BLK && rng_below (&d->r, 2)) {
    uint64_t tail = size % DT_BLK;

    fill_pattern (d->buf, tail, ++d->tag);
    cr_assert_eq (vol_pwrite (d->h, d->buf, (uint32_t) tail, size - tail, 0),
                  0, DT "write the last %" PRIu64 " bytes: %s", DTA (d), tail,
                  cairn_errmsg ());
  }
  d->n_resize++;
}

/* One to four phases on the source, then its depth. */
static void
dt_change_source (struct dt *d)
{
  unsigned n = 1 + (unsigned) rng_below (&d->r, 4), levels = 0;

  for (unsigned i = 0; i < n; i++) {
    unsigned dice = (unsigned) rng_below (&d->r, 100);

    if (dice < 14)
      dt_seq (d);
    else if (dice < 30)
      dt_scatter (d);
    else if (dice < 44)
      dt_alternate (d);
    else if (dice < 54)
      dt_zeros (d);
    else if (dice < 64)
      dt_large_trims (d);
    else if (dice < 84)
      dt_leaf_trim (d);
    else if (dice < 89)
      dt_resize (d);
    else {
      dt_phase (d, "commit");
      cr_assert_eq (pool_commit (d->a), 0, DT "%s", DTA (d), cairn_errmsg ());
    }
  }
  dt_step (d, "measure the source's tree");
  dt_tree (d, d->a, "v", NULL, &levels);
  d->src_levels = MAX (d->src_levels, levels);
  d->deep_rounds += levels >= 3;
}

/* ---- the two sides */

/* Open a pool with a small node cache and no background work. */
static struct cairn_pool *
dt_open (struct dt *d, struct cairn_dev *dev)
{
  struct pool_open_opts o = {
    .cache_bytes = (256u << 10) << rng_below (&d->r, 3),
    .no_background = true,
  };
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, &o, &pool), 0, DT "open a pool: %s", DTA (d),
                cairn_errmsg ());
  vol_reclaim_set_budget (pool, 8 + rng_below (&d->r, 120));
  return pool;
}

/* Close a pool, check it with fsck and open it again (as fsck_reopen, with
 * dt_open's options).
 */
static struct cairn_pool *
dt_reopen (struct dt *d, struct cairn_dev *dev, struct cairn_pool *pool)
{
  char when[400];

  snprintf (when, sizeof when, "round %u, %s", d->round, d->step);
  if (pool == d->a && d->h) {
    vol_close (d->h);
    d->h = NULL;
  }
  cr_assert_eq (pool_close (pool), 0, DT "close: %s", DTA (d), cairn_errmsg ());
  assert_fsck_clean (dev, when);
  pool = dt_open (d, dev);
  if (dev == d->da)
    cr_assert_eq (vol_open (pool, "v", &d->h), 0, DT "open v: %s", DTA (d),
                  cairn_errmsg ());
  d->n_reopen++;
  return pool;
}

/* A few steps of the reclaim of deleted snapshots on one side, or (every
 * fourth round, so that the pools do not fill up) all of it.
 */
static void
dt_reclaim_steps (struct dt *d, struct cairn_pool *pool)
{
  unsigned n = (unsigned) rng_below (&d->r, 6);
  bool more = true;

  if (d->round % 4 == 0) {
    cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, DT "reclaim: %s",
                  DTA (d), cairn_errmsg ());
    return;
  }
  for (unsigned i = 0; i < n && more; i++)
    cr_assert_eq (vol_reclaim_step (pool, &more), 0, DT "reclaim step: %s",
                  DTA (d), cairn_errmsg ());
}

/* State a of the source and state b of the target read the same; snap is
 * the source snapshot's number, for the phases that changed a block.
 */
static void
dt_same (struct dt *d, const char *a, const char *b, unsigned snap)
{
  static uint8_t x[MIB], y[MIB];
  struct cairn_volume *va, *vb;
  uint64_t size;

  cr_assert_eq (vol_open (d->a, a, &va), 0, DT "open %s: %s", DTA (d), a,
                cairn_errmsg ());
  cr_assert_eq (vol_open (d->b, b, &vb), 0, DT "open %s on the target: %s",
                DTA (d), b, cairn_errmsg ());
  size = vol_size (va);
  cr_assert_eq (size, vol_size (vb), DT "%s is %" PRIu64 " bytes, %s on the "
                "target %" PRIu64, DTA (d), a, size, b, vol_size (vb));
  for (uint64_t off = 0; off < size; off += MIB) {
    uint32_t n = (uint32_t) MIN ((uint64_t) MIB, size - off);

    cr_assert_eq (vol_pread (va, x, n, off), 0, DT "read %s at %" PRIu64
                  ": %s", DTA (d), a, off, cairn_errmsg ());
    cr_assert_eq (vol_pread (vb, y, n, off), 0, DT "read %s on the target at %"
                  PRIu64 ": %s", DTA (d), b, off, cairn_errmsg ());
    if (memcmp (x, y, n) != 0) {
      static const uint8_t zero[DT_BLK];
      size_t i = 0;
      uint64_t at, blk;
      uint32_t p;

      while (x[i] == y[i])
        i++;
      at = off + i;
      blk = at / DT_BLK;
      p = blk < DT_MAXBLOCKS ? d->snaps[snap].wphase[blk] : 0;
      i -= i % DT_BLK;
      cr_assert_fail (DT "%s and %s on the target differ at byte %" PRIu64
                      " (block %" PRIu64 ": the source reads %s, the target "
                      "%s; the source's phase %u last changed it: %s)", DTA (d),
                      a, b, at, blk,
                      memcmp (x + i, zero, MIN (DT_BLK, n - i)) ? "data" : "zeros",
                      memcmp (y + i, zero, MIN (DT_BLK, n - i)) ? "data" : "zeros",
                      p, p ? d->log[p] : "the fill");
    }
  }
  vol_close (va);
  vol_close (vb);
}

/* Receive a stream into the target's "v", fed in random pieces: whole, or
 * (cut) cut short first and resumed from the token it kept, with a reopen
 * of the target and a second cut sometimes.  Returns the result.
 */
static struct repl_recv_result
dt_receive (struct dt *d, const char *snap, const char *from, struct buf *s,
            bool rollback, bool cut)
{
  struct repl_recv_opts o = { .rollback = rollback };
  struct repl_recv_result res;
  char token[STREAM_TOKEN_MAX];
  unsigned cuts = 0;
  int r;

  d->stream_bytes += s->len;
  while (cut) {
    size_t at = rng_below (&d->r, s->len);
    char *before = listing (d->b);

    dt_step (d, "receive %s from %s%s cut at byte %zu of %zu", snap, from,
             rollback ? " with rollback" : "", at, s->len);
    r = receive_opts (d->b, "v", s->p, at, &d->r, &o, &res);
    cr_assert_eq (r, -EPIPE, DT "%d: %s", DTA (d), r, cairn_errmsg ());
    {
      char *now = listing (d->b);

      cr_assert_str_eq (now, before, DT "the cut stream changed the catalog",
                        DTA (d));
      free (now);
    }
    free (before);
    d->n_cut++;
    cuts++;
    if (rng_below (&d->r, 3) == 0)
      d->b = dt_reopen (d, d->db, d->b);
    if (!res.kept) {
      cr_assert_eq (repl_recv_token (d->b, "v", token), -ENOENT, DT "a token "
                    "without progress kept", DTA (d));
      break;
    }
    cr_assert_eq (repl_recv_token (d->b, "v", token), 0, DT "token: %s",
                  DTA (d), cairn_errmsg ());
    cr_assert_str_eq (token, res.token, DT "the token changed", DTA (d));
    free (s->p);
    dt_step (d, "send %s from %s resumed (cut %u)", snap, from, cuts);
    *s = send_to_buf (d->a, snap, from, token);
    d->stream_bytes += s->len;
    d->n_resumed++;
    cut = cuts < 2 && rng_below (&d->r, 3) == 0;
  }
  dt_step (d, "receive %s from %s%s%s (%zu bytes)", snap, from,
           rollback ? " with rollback" : "", cuts ? ", resumed" : "", s->len);
  r = receive_opts (d->b, "v", s->p, s->len, &d->r, &o, &res);
  cr_assert_eq (r, 0, DT "%d: %s", DTA (d), r, cairn_errmsg ());
  cr_assert (res.incremental, DT "not incremental", DTA (d));
  cr_assert_str_eq (res.name, snap, DT "published as %s", DTA (d), res.name);
  d->n_sent++;
  return res;
}

/* Send the round's snapshot n from base (a snapshot both sides have) and
 * check what the target received.
 */
static void
dt_send (struct dt *d, unsigned n, unsigned base, bool rollback)
{
  char snap[32], from[32];
  bool cut = rng_below (&d->r, 4) == 0;
  struct buf s;

  snprintf (snap, sizeof snap, "v@s%u", n);
  /* The base as SNAP or as VOL@SNAP. */
  snprintf (from, sizeof from, rng_below (&d->r, 2) ? "s%u" : "v@s%u", base);
  dt_step (d, "send %s from %s", snap, from);
  s = send_to_buf (d->a, snap, from, NULL);
  dt_receive (d, snap, from, &s, rollback, cut);
  free (s.p);
  if (rollback)
    for (unsigned i = base + 1; i < n; i++)
      d->snaps[i].on_dst = false;
  d->snaps[n].on_dst = true;
  d->newest = n;
  dt_step (d, "compare %s (received from %s%s)", snap, from,
           rollback ? " with rollback" : "");
  dt_same (d, snap, snap, n);
  dt_step (d, "compare %s with the target's live volume (received from %s%s)",
           snap, from, rollback ? " with rollback" : "");
  dt_same (d, snap, "v", n);
}

/* Write a few blocks of the target's live volume: it diverges from its
 * newest snapshot, which only a receive with rollback accepts.
 */
static void
dt_diverge (struct dt *d)
{
  struct cairn_volume *v;
  unsigned n = 1 + (unsigned) rng_below (&d->r, 4);

  dt_step (d, "write %u blocks of the target's live volume", n);
  cr_assert_eq (vol_open (d->b, "v", &v), 0, DT "%s", DTA (d), cairn_errmsg ());
  for (unsigned i = 0; i < n; i++) {
    uint64_t b = rng_below (&d->r, vol_size (v) / DT_BLK);

    fill_pattern (d->buf, DT_BLK, ++d->tag);
    cr_assert_eq (vol_pwrite (v, d->buf, DT_BLK, b * DT_BLK, 0), 0, DT
                  "block %" PRIu64 ": %s", DTA (d), b, cairn_errmsg ());
  }
  vol_close (v);
  d->n_diverged++;
}

/* Delete snapshot i on one side; the model forgets it when neither has it. */
static void
dt_delete (struct dt *d, unsigned i, bool target)
{
  char snap[16];

  snprintf (snap, sizeof snap, "s%u", i);
  dt_step (d, "delete v@%s on the %s", snap, target ? "target" : "source");
  cr_assert_eq (snap_delete (target ? d->b : d->a, "v", snap), 0, DT "%s",
                DTA (d), cairn_errmsg ());
  if (target) {
    d->snaps[i].on_dst = false;
    d->n_del_dst++;
  }
  else {
    d->snaps[i].on_src = false;
    d->n_del_src++;
  }
  if (!d->snaps[i].on_src && !d->snaps[i].on_dst) {
    free (d->snaps[i].wphase);
    d->snaps[i].wphase = NULL;
  }
}

/* Delete an old snapshot of one side, chosen at random, or the oldest ones
 * past DT_KEEP: never the target's newest (the next stream's base).
 */
static void
dt_delete_some (struct dt *d, bool target, bool random)
{
  unsigned cand[64], nc = 0, have = 0;

  for (unsigned i = 0; i < d->nsnaps; i++) {
    bool on = target ? d->snaps[i].on_dst : d->snaps[i].on_src;

    have += on;
    if (on && i != d->newest && nc < 64)
      cand[nc++] = i;
  }
  if (random && nc > 0)
    dt_delete (d, cand[rng_below (&d->r, nc)], target);
  else
    for (unsigned k = 0; k < nc && have > DT_KEEP; k++, have--)
      dt_delete (d, cand[k], target);
}

/* A new snapshot s<nsnaps> of the source. */
static unsigned
dt_snapshot (struct dt *d)
{
  unsigned n = d->nsnaps++;
  char snap[16];

  d->snaps = realloc (d->snaps, d->nsnaps * sizeof *d->snaps);
  cr_assert_not_null (d->snaps);
  snprintf (snap, sizeof snap, "s%u", n);
  dt_step (d, "snapshot v@%s", snap);
  cr_assert_eq (snap_create (d->a, "v", snap), 0, DT "%s", DTA (d),
                cairn_errmsg ());
  d->snaps[n].on_src = true;
  d->snaps[n].on_dst = false;
  d->snaps[n].wphase = malloc (DT_MAXBLOCKS * sizeof *d->wphase);
  cr_assert_not_null (d->snaps[n].wphase);
  memcpy (d->snaps[n].wphase, d->wphase, DT_MAXBLOCKS * sizeof *d->wphase);
  return n;
}

/* One round: change the source, snapshot it, send the snapshot (or not),
 * then delete, compare and reopen at random.
 */
static void
dt_round (struct dt *d, bool last)
{
  unsigned n, dice, older[64], nolder = 0;

  dt_change_source (d);
  n = dt_snapshot (d);
  for (unsigned i = 0; i < d->newest; i++)
    if (d->snaps[i].on_src && d->snaps[i].on_dst && nolder < 64)
      older[nolder++] = i;
  dice = (unsigned) rng_below (&d->r, 100);
  if (dice < 12 && !last) {
    dt_step (d, "v@s%u not sent", n);
    d->n_skipped++;
  }
  else if (dice < 27) {
    /* From an older snapshot both sides have, or from the newest after
     * writes to the target.
     */
    unsigned base = d->newest;

    if (nolder > 0 && rng_below (&d->r, 3))
      base = older[rng_below (&d->r, nolder)];
    if (base == d->newest || rng_below (&d->r, 2))
      dt_diverge (d);
    dt_send (d, n, base, true);
    d->n_rollback++;
  }
  else
    dt_send (d, n, d->newest, false);

  dt_reclaim_steps (d, d->a);
  dt_reclaim_steps (d, d->b);
  if (rng_below (&d->r, 4) == 0)
    dt_delete_some (d, false, true);
  if (rng_below (&d->r, 4) == 0)
    dt_delete_some (d, true, true);
  dt_delete_some (d, false, false);
  dt_delete_some (d, true, false);
  if (rng_below (&d->r, 3) == 0) {
    /* An older snapshot that both sides have is still the same. */
    unsigned both[64], nb = 0;

    for (unsigned i = 0; i < d->nsnaps; i++)
      if (d->snaps[i].on_src && d->snaps[i].on_dst && i != d->newest && nb < 64)
        both[nb++] = i;
    if (nb > 0) {
      unsigned i = both[rng_below (&d->r, nb)];
      char snap[16];

      snprintf (snap, sizeof snap, "v@s%u", i);
      dt_step (d, "compare the older %s again", snap);
      dt_same (d, snap, snap, i);
    }
  }
  if (rng_below (&d->r, 5) == 0) {
    dt_step (d, "reopen the target");
    d->b = dt_reopen (d, d->db, d->b);
  }
  if (rng_below (&d->r, 8) == 0) {
    dt_step (d, "reopen the source");
    d->a = dt_reopen (d, d->da, d->a);
  }
}

Test (send, deep_tree_chain, .timeout = 3600)
{
  struct pool_format_opts small = { .node_size = NODE_SIZE_MIN };
  struct dt d = { .verbose = getenv ("CAIRN_TEST_VERBOSE") != NULL };
  double scale = test_scale ();
  unsigned rounds = test_work (DT_ROUNDS);
  bool dst_small;
  uint64_t first, base, used;
  struct buf s;

  d.r.s = test_seed ("send.deep_tree_chain", 9);
  dst_small = rng_below (&d.r, 3) == 0;
  fprintf (stderr, "send.deep_tree_chain: scale %g (CAIRN_TEST_SCALE), %u "
           "rounds, target nodes of %s\n", scale, rounds,
           dst_small ? "4 KiB" : "the default size");
  d.buf = malloc (DT_IOBLOCKS * DT_BLK);
  d.wphase = calloc (DT_MAXBLOCKS, sizeof *d.wphase);
  cr_assert (d.buf && d.wphase);
  dt_step (&d, "set up the pools");
  cr_assert_eq (dev_mem_create (DT_POOL_BYTES, &d.da), 0);
  cr_assert_eq (dev_mem_create (DT_POOL_BYTES, &d.db), 0);
  cr_assert_eq (pool_format (d.da, &small, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_format (d.db, dst_small ? &small : NULL, NULL), 0, "%s",
                cairn_errmsg ());
  d.a = dt_open (&d, d.da);
  d.b = dt_open (&d, d.db);
  base = empty_pool_blocks (d.db, &d.b);
  cr_assert_eq (pool_close (d.b), 0);
  d.b = dt_open (&d, d.db);

  /* A single block at every other block, ascending: full leaves, three
   * levels at once.
   */
  d.size = (uint64_t) DT_BLOCKS * DT_BLK;
  first = rng_below (&d.r, 2);
  dt_step (&d, "fill v: every other block from %" PRIu64, first);
  cr_assert_eq (vol_create (d.a, "v", d.size, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (d.a, "v", &d.h), 0, "%s", cairn_errmsg ());
  for (uint64_t b = first; b < DT_BLOCKS; b += 2)
    dt_write (&d, b, 1, false);
  dt_snapshot (&d);
  dt_step (&d, "send v@s0 (full)");
  s = send_to_buf (d.a, "v@s0", NULL, NULL);
  dt_step (&d, "receive v@s0 (full)");
  cr_assert_eq (receive_buf (d.b, "v", s.p, s.len, &d.r, NULL), 0, DT "%s",
                DTA (&d), cairn_errmsg ());
  free (s.p);
  d.snaps[0].on_dst = true;
  dt_same (&d, "v@s0", "v@s0", 0);
  dt_same (&d, "v@s0", "v", 0);

  for (d.round = 1; d.round <= rounds; d.round++)
    dt_round (&d, d.round == rounds);

  d.round = rounds;
  dt_step (&d, "end: measure the target's tree");
  dt_tree (&d, d.b, "v", NULL, &d.dst_levels);
  for (unsigned i = 0; i < d.nsnaps; i++)
    if (d.snaps[i].on_src && d.snaps[i].on_dst) {
      char snap[16];

      snprintf (snap, sizeof snap, "v@s%u", i);
      dt_step (&d, "end: compare %s", snap);
      dt_same (&d, snap, snap, i);
    }
  dt_step (&d, "end: reopen both pools");
  d.a = dt_reopen (&d, d.da, d.a);
  d.b = dt_reopen (&d, d.db, d.b);
  {
    char snap[16];

    snprintf (snap, sizeof snap, "v@s%u", d.newest);
    dt_step (&d, "end: compare %s and the live volume after the reopen", snap);
    dt_same (&d, snap, snap, d.newest);
    dt_same (&d, snap, "v", d.newest);
  }
  fprintf (stderr, "send.deep_tree_chain: source tree %u levels deep at most "
           "(%u of %u rounds ended at 3+), target's %u at the end; %u streams "
           "received (%" PRIu64 " bytes sent), %u cut, %u resumed, %u "
           "snapshots not sent, %u with rollback (%u after writes to the "
           "target); %u trims of whole leaves, %u across a boundary, %u "
           "resizes; %u deletes on the source, %u on the target, %u reopens\n",
           d.src_levels, d.deep_rounds, rounds, d.dst_levels, d.n_sent,
           d.stream_bytes, d.n_cut, d.n_resumed, d.n_skipped, d.n_rollback,
           d.n_diverged, d.n_leaf_trims, d.n_cross_trims, d.n_resize,
           d.n_del_src, d.n_del_dst, d.n_reopen);
  cr_assert_geq (d.src_levels, 3, "the source's tree never had three levels");

  /* Deleting what was received gives every block back. */
  dt_step (&d, "end: delete the received volume");
  cr_assert_eq (vol_delete (d.b, "v", VOL_DELETE_RECURSIVE), 0, DT "%s",
                DTA (&d), cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (d.b, NULL, NULL), 0, DT "%s", DTA (&d),
                cairn_errmsg ());
  d.b = dt_reopen (&d, d.db, d.b);
  used = pool_blocks_in_use (d.b);
  cr_assert_eq (used, base, DT "%" PRIu64 " blocks allocated (besides the "
                "space map's) after deleting everything, %" PRIu64 " in the "
                "empty pool", DTA (&d), used, base);
  vol_close (d.h);
  cr_assert_eq (pool_close (d.a), 0);
  cr_assert_eq (pool_close (d.b), 0);
  dev_close (d.da);
  dev_close (d.db);
  for (unsigned i = 0; i < d.nsnaps; i++)
    free (d.snaps[i].wphase);
  free (d.snaps);
  free (d.log);
  free (d.wphase);
  free (d.buf);
}

/* Add up the bytes of the holes a diff reports. */
static int
count_holes (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  (void) off;
  if (type == VOL_DIFF_HOLE)
    *(uint64_t *) opaque += len;
  return 0;
}

/* Found by deep_tree_chain (CAIRN_TEST_SEED=1): an incremental stream
 * carries the trim of everything a volume held.  Trimming every mapped
 * block empties the volume's tree, and btree_delete then leaves the tree
 * without a root (address 0): the diff walks by the root's birth, found
 * none, and reported no change at all, so the stream carried nothing and
 * the receiver kept every block the source had trimmed.  Any volume shows
 * it, one level deep or three.
 */
Test (send, incremental_carries_the_trim_of_everything)
{
  struct cairn_dev *da = mem_pool (64 * MIB, NULL), *db = mem_pool (64 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da), *b = pool_open_ok (db);
  struct cairn_volume *v;
  uint64_t holes = 0;

  cr_assert_eq (vol_create (a, "v", MIB, NULL), 0, "%s", cairn_errmsg ());
  for (uint64_t i = 0; i < 3; i++)
    write_block (a, "v", i * 50, i + 1);
  cr_assert_eq (vol_open (a, "v", &v), 0, "%s", cairn_errmsg ());
  trim_between_two_sends (a, b, v, MIB, 0);
  /* The diff under the stream: the three blocks are holes now. */
  cr_assert_eq (vol_diff (a, "v@s0", "v@s1", count_holes, &holes), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (holes, 3 * 4096, "the diff from s0 to s1 finds %" PRIu64
                " bytes of holes, not the 3 blocks trimmed", holes);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (db);
}
