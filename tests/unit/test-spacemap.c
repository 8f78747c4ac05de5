/* Unit tests for the persistent space map (engine/spacemap.c): a long log
 * replays to exactly the free set the engine had (SM-1), the log is
 * condensed at its bound and not before (SM-6), damaged log blocks are
 * refused with an error naming the block (SM-5), and a pool with the
 * version-1 chain opens and is converted by its first commit.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "fsck.h"
#include "pool.h"
#include "txn-int.h"
#include "test-pool.h"
#include "test-util.h"

#define PER_BLOCK 250u            /* records or ranges in one map block */

static struct cairn_pool *
open_pool (struct cairn_dev *dev, uint64_t log_min)
{
  struct pool_open_opts oo = { .spacemap_log_min = log_min,
                               .dirty_limit_bytes = 1ull << 40 };
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, &oo, &pool), 0, "%s", cairn_errmsg ());
  return pool;
}

/* Insert (or with del, delete) one key. */
static void
change (struct cairn_pool *pool, struct btree *t, uint64_t key, bool del)
{
  uint8_t k[8], v[48];
  int r;

  put_be64 (k, key);
  fill_pattern (v, sizeof v, key);
  cr_assert_eq (txn_begin (pool), 0);
  btree_wrlock (t);
  r = del ? btree_delete (t, k, 8) : btree_insert (t, k, 8, v, sizeof v, 0);
  btree_unlock (t);
  txn_end (pool);
  cr_assert (r == 0 || (del && r == -ENOENT), "%s", cairn_errmsg ());
}

static void
commit (struct cairn_pool *pool)
{
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
}

/* The free set (pending frees included), as a list of ranges. */
struct ranges {
  struct space_range *v;
  size_t n, cap;
};

static int
add_range (void *opaque, uint64_t start, uint64_t len)
{
  struct ranges *rs = opaque;

  if (rs->n == rs->cap) {
    rs->cap = rs->cap ? 2 * rs->cap : 256;
    rs->v = realloc (rs->v, rs->cap * sizeof *rs->v);
    cr_assert_not_null (rs->v);
  }
  rs->v[rs->n].start = start;
  rs->v[rs->n].len = len;
  rs->n++;
  return 0;
}

static struct ranges
free_set (struct cairn_pool *pool)
{
  struct ranges rs = { NULL, 0, 0 };

  cr_assert_eq (space_foreach_free (pool_space (pool), true, add_range, &rs), 0);
  return rs;
}

/* SM-1: close the pool, reopen it (replaying its map) and compare the
 * free sets; returns fsck's report of the closed pool.  *poolp is closed.
 */
static struct fsck_report
close_reopen_compare (struct cairn_dev *dev, struct cairn_pool **poolp,
                      const char *when)
{
  struct ranges a = free_set (*poolp), b;

  cr_assert_eq (pool_close (*poolp), 0, "%s", cairn_errmsg ());
  *poolp = open_pool (dev, 0);
  b = free_set (*poolp);
  cr_assert_eq (a.n, b.n, "%s: %zu free ranges, then %zu", when, a.n, b.n);
  for (size_t i = 0; i < a.n; i++)
    cr_assert (a.v[i].start == b.v[i].start && a.v[i].len == b.v[i].len,
               "%s: range %zu is %" PRIu64 "+%" PRIu64 ", then %" PRIu64 "+%"
               PRIu64, when, i, a.v[i].start, a.v[i].len, b.v[i].start,
               b.v[i].len);
  free (a.v);
  free (b.v);
  cr_assert_eq (pool_close (*poolp), 0);
  *poolp = NULL;
  return assert_clean (dev);
}

static struct pool_spacemap_info
map_of (struct cairn_pool *pool)
{
  struct pool_spacemap_info si;

  pool_spacemap (pool, &si);
  return si;
}

/* A random mix of inserts and deletes, one commit each. */
static void
churn (struct cairn_pool *pool, struct btree *t, struct rng *r, unsigned commits,
       unsigned ops)
{
  for (unsigned c = 0; c < commits; c++) {
    for (unsigned i = 0; i < ops; i++)
      change (pool, t, rng_below (r, 20000), rng_below (r, 3) == 0);
    commit (pool);
  }
}

/* SM-1: hundreds of generations appended to the log (never condensed)
 * replay to the very free set the engine had, and fsck agrees.
 */
Test (spacemap, long_log_replays_exactly)
{
  uint64_t seed = test_seed ("spacemap.long_log_replays_exactly", 1203);
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = open_pool (dev, 1u << 20);
  struct rng r = { seed };
  struct pool_spacemap_info si;
  struct fsck_report rep;
  struct btree *t;
  uint64_t id;

  t = new_tree (pool, &id);
  churn (pool, t, &r, 400, 25);
  si = map_of (pool);
  cr_assert_geq (si.log_records, 2 * 400, "two records at least per commit");
  cr_assert_lt (si.nlog, 400, "small commits share log blocks: %zu", si.nlog);
  cr_assert_eq (si.nbase, 1, "never condensed");
  rep = close_reopen_compare (dev, &pool, "before close and after replay");
  cr_assert_eq (rep.spacemap_log_blocks, si.nlog);
  dev_close (dev);
}

/* SM-6 in the engine's own terms (spacemap.c: log_full), in records. */
static uint64_t
bound (struct cairn_pool *pool, uint64_t log_min)
{
  struct space_stats st;

  space_stats (pool_space (pool), &st);
  return MAX (log_min, 2 * st.extents);
}

/* Fragment the free space: allocate pairs of blocks and free the first of
 * each, so the free set has about n more runs (and n blocks stay used).
 */
static void
fragment (struct cairn_pool *pool, unsigned n, uint64_t *blocks)
{
  struct space *sp = pool_space (pool);

  cr_assert_eq (txn_begin (pool), 0);
  for (unsigned i = 0; i < n; i++) {
    uint64_t b;

    cr_assert_eq (space_alloc (sp, 2, 0, 0, &b), 0, "%s", cairn_errmsg ());
    space_free (sp, b, 1, space_open_gen (sp));
    blocks[i] = b + 1;
  }
  txn_end (pool);
}

/* Blocks a scattered commit allocates, each its own range. */
#define SCATTER 130u

struct scatter {
  uint64_t blocks[SCATTER];
  uint64_t birth;                 /* 0: none allocated */
};

/* In the open generation: free the previous scattered blocks (if any) and
 * allocate SCATTER single blocks with a free block between them, so that
 * the generation has 2 x SCATTER records: no two such generations share a
 * log block.
 */
static void
scatter (struct cairn_pool *pool, struct scatter *sc)
{
  struct space *sp = pool_space (pool);

  cr_assert_eq (txn_begin (pool), 0);
  for (unsigned i = 0; sc->birth && i < SCATTER; i++)
    space_free (sp, sc->blocks[i], 1, sc->birth);
  sc->birth = space_open_gen (sp);
  for (unsigned i = 0; i < SCATTER; i++) {
    uint64_t b;

    cr_assert_eq (space_alloc (sp, 2, 0, 0, &b), 0, "%s", cairn_errmsg ());
    space_free (sp, b, 1, sc->birth);
    sc->blocks[i] = b + 1;
  }
  txn_end (pool);
}

/* Free the scattered blocks, so that fsck finds no leak. */
static void
unscatter (struct cairn_pool *pool, struct scatter *sc)
{
  cr_assert_eq (txn_begin (pool), 0);
  for (unsigned i = 0; sc->birth && i < SCATTER; i++)
    space_free (pool_space (pool), sc->blocks[i], 1, sc->birth);
  sc->birth = 0;
  txn_end (pool);
}

/* SM-6: the log is condensed exactly when it has reached max(log_min,
 * 2 x free runs) records, both when the floor decides and when
 * fragmentation does; each condense starts an empty log and the pool
 * reopens equal.
 */
Test (spacemap, condensed_at_the_bound)
{
  uint64_t seed = test_seed ("spacemap.condensed_at_the_bound", 1204);
  const uint64_t log_min = 1000;
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = open_pool (dev, log_min);
  struct rng r = { seed };
  uint64_t id, big_bound = 0, frag_gen = 0, *frag = calloc (1500, sizeof *frag);
  unsigned condenses = 0, appends = 0, big = 0;
  struct scatter sc = { .birth = 0 };
  struct btree *t;

  cr_assert_not_null (frag);
  t = new_tree (pool, &id);
  for (unsigned c = 0; c < 120; c++) {
    struct pool_spacemap_info si = map_of (pool);
    size_t nlog = si.nlog;
    uint64_t records = si.log_records;
    uint64_t base0 = si.nbase ? si.base[0] : 0, b;
    bool exact;

    if (c == 60) {
      frag_gen = space_open_gen (pool_space (pool));
      fragment (pool, 1500, frag);      /* 1,500 more free runs */
    }
    if (c % 2)
      scatter (pool, &sc);              /* about two log blocks */
    for (unsigned i = 0; i < 5; i++)
      change (pool, t, rng_below (&r, 5000), rng_below (&r, 4) == 0);
    /* The commit decides after freezing the trees, which may move the
     * free run count a little: both sides of the bound are checked where
     * they are certain.
     */
    b = bound (pool, log_min);
    commit (pool);
    si = map_of (pool);
    /* Before the fragmentation the floor decides, exactly. */
    exact = b == log_min && frag_gen == 0;
    if (records >= b + 8 * !exact || (records >= b && si.nlog == 0)) {
      cr_assert_eq (si.nlog, 0, "commit %u: a log of %" PRIu64 " records at "
                    "a bound of %" PRIu64 " must be condensed", c, records, b);
      cr_assert_neq (si.base[0], base0, "commit %u: a new base", c);
      condenses++;
      big += b > log_min;
      big_bound = MAX (big_bound, b);
    }
    else if (records + 8 * !exact < b) {
      cr_assert_geq (si.nlog, nlog, "commit %u: below the bound (%" PRIu64
                     " < %" PRIu64 ") the log only grows", c, records, b);
      cr_assert_gt (si.log_records, records, "commit %u: records appended", c);
      appends++;
    }
  }
  cr_assert_geq (condenses, 4, "%u condenses", condenses);
  cr_assert_gt (big, 0, "fragmentation raised the bound (to %" PRIu64 ")",
                big_bound);
  cr_assert_gt (appends, condenses);
  /* Release the fragmenting blocks, so that fsck finds no leak. */
  cr_assert_eq (txn_begin (pool), 0);
  for (unsigned i = 0; i < 1500; i++)
    space_free (pool_space (pool), frag[i], 1, frag_gen);
  txn_end (pool);
  unscatter (pool, &sc);
  commit (pool);
  close_reopen_compare (dev, &pool, "after condenses and reopen");
  free (frag);
  dev_close (dev);
}

/* A pool too full for a new base keeps appending past the bound instead of
 * failing the commit, and condenses once space is back.  The log is grown
 * to 500 blocks and the pool filled to its last 2 blocks (reserve
 * included) with no bound; reopened with a bound it has passed, a new
 * base (which lists the old map's blocks as free) needs 3 blocks.
 */
Test (spacemap, full_pool_appends_past_the_bound)
{
  enum { N = 500, MAXFILL = 20000 };
  struct cairn_dev *dev = mem_pool (16 << 20, NULL);
  struct cairn_pool *pool = open_pool (dev, 1ull << 40);
  uint64_t *fill = calloc (MAXFILL, 8), *fill_len = calloc (MAXFILL, 8);
  uint64_t *fill_gen = calloc (MAXFILL, 8);
  struct scatter sc = { .birth = 0 };
  struct pool_info info;
  struct space_stats st;
  size_t nfill = 0, nlog, big = 0;

  cr_assert (fill && fill_len && fill_gen);
  while (map_of (pool).nlog < N) {
    scatter (pool, &sc);
    commit (pool);
  }
  /* Take every free block but two, a hundred runs per commit. */
  space_stats (pool_space (pool), &st);
  while (st.free > 2) {
    cr_assert_eq (txn_begin (pool), 0);
    for (unsigned i = 0; i < 100 && st.free > 2; i++) {
      cr_assert_lt (nfill, MAXFILL);
      fill_gen[nfill] = space_open_gen (pool_space (pool));
      cr_assert_eq (space_alloc_upto (pool_space (pool), st.free - 2, 0,
                                      SPACE_RESERVE, &fill[nfill],
                                      &fill_len[nfill]), 0);
      if (fill_len[nfill] > fill_len[big])
        big = nfill;
      nfill++;
      space_stats (pool_space (pool), &st);
    }
    txn_end (pool);
    commit (pool);
    space_stats (pool_space (pool), &st);
  }
  cr_assert_eq (pool_close (pool), 0);
  pool = open_pool (dev, 1);
  nlog = map_of (pool).nlog;
  cr_assert_geq (nlog, N, "a long log, at its bound");
  space_stats (pool_space (pool), &st);
  cr_assert_leq (st.free, 2);

  /* Free the longest filler run: no room for a base in that commit, which
   * appends instead; the run is free once it is durable.
   */
  cr_assert_geq (fill_len[big], 4);
  cr_assert_eq (txn_begin (pool), 0);
  space_free (pool_space (pool), fill[big], fill_len[big], fill_gen[big]);
  txn_end (pool);
  commit (pool);
  pool_info (pool, &info);
  cr_assert (!info.failed);
  cr_assert_geq (map_of (pool).nlog, nlog, "appended, not condensed");
  /* Space back: the next commit condenses. */
  cr_assert_eq (txn_begin (pool), 0);
  for (size_t i = 0; i < nfill; i++)
    if (i != big)
      space_free (pool_space (pool), fill[i], fill_len[i], fill_gen[i]);
  txn_end (pool);
  unscatter (pool, &sc);
  commit (pool);
  cr_assert_eq (map_of (pool).nlog, 0, "condensed once space came back");
  close_reopen_compare (dev, &pool, "after the full pool");
  free (fill);
  free (fill_len);
  free (fill_gen);
  dev_close (dev);
}

/* A pool with a few commits in its log; returns the log's blocks. */
static struct cairn_dev *
pool_with_log (size_t *nlogp, uint64_t *logp, uint64_t *genp)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = open_pool (dev, 0);
  struct scatter sc = { .birth = 0 };
  struct pool_spacemap_info si;
  struct pool_info info;

  for (unsigned i = 0; i < 4; i++) {
    scatter (pool, &sc);
    commit (pool);
  }
  unscatter (pool, &sc);
  commit (pool);
  si = map_of (pool);
  cr_assert_geq (si.nlog, 4);
  memcpy (logp, si.log, MIN (si.nlog, 8) * sizeof *logp);
  *nlogp = si.nlog;
  pool_info (pool, &info);
  *genp = info.generation;
  cr_assert_eq (pool_close (pool), 0);
  return dev;
}

/* A read-write open of a pool whose map is damaged: the pool opens (the
 * map loads in the background, pool.c) and reads, but the first change
 * fails with -EIO and a message holding want and also, and the pool counts
 * as failed.
 */
static void
assert_writes_refused (struct cairn_dev *dev, const char *want,
                       const char *also)
{
  struct cairn_pool *pool;
  struct pool_info info;
  int r = pool_open (dev, NULL, &pool);

  cr_assert_eq (r, 0, "open gave %d: %s", r, cairn_errmsg ());
  cr_assert_eq (btree_lookup (pool_root_tree (pool), "", 0, NULL, 0, NULL),
                -ENOENT, "the trees read while the map is damaged");
  r = txn_begin (pool);
  cr_assert_eq (r, -EIO, "the first change gave %d: %s", r, cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "'%s' in: %s", want,
             cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), also) != NULL, "'%s' in: %s", also,
             cairn_errmsg ());
  cr_assert_eq (txn_begin (pool), -EIO, "and so does every change after it");
  pool_info (pool, &info);
  cr_assert (info.failed, "a damaged map marks the pool failed");
  cr_assert_eq (pool_close (pool), 0, "nothing to commit: %s", cairn_errmsg ());
}

/* The same, naming block blk. */
static void
assert_refused_naming (struct cairn_dev *dev, uint64_t blk, const char *also)
{
  char want[64];

  snprintf (want, sizeof want, "space map block %" PRIu64 ":", blk);
  assert_writes_refused (dev, want, also);
}

/* A read-only open defers the map (pool.c): it opens and reads, and the
 * damage shows when free space is asked for, naming the block.
 */
static void
assert_lazy_refusal (struct cairn_dev *dev, uint64_t blk)
{
  struct pool_open_opts ro = { .readonly = true };
  struct cairn_pool *pool;
  struct pool_info info;
  char want[64];

  cr_assert_eq (pool_open (dev, &ro, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (btree_lookup (pool_root_tree (pool), "", 0, NULL, 0, NULL),
                -ENOENT, "the trees read without the map");
  cr_assert_eq (pool_space_load (pool), -EIO);
  snprintf (want, sizeof want, "space map block %" PRIu64 ":", blk);
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "'%s' in: %s", want,
             cairn_errmsg ());
  pool_info (pool, &info);
  cr_assert (info.failed, "a damaged map marks the pool failed");
  cr_assert_eq (pool_space_load (pool), -EIO, "and stays so");
  cr_assert_eq (pool_close (pool), 0);
}

/* SM-5: a flipped bit in a log block, the newest or an older one, is a
 * checksum mismatch naming that block; fsck reports it too.
 */
Test (spacemap, corrupt_log_block_named)
{
  uint64_t log[8], gen;
  size_t nlog;
  struct cairn_dev *dev = pool_with_log (&nlog, log, &gen);
  struct fsck_report rep;
  struct problems p;
  uint8_t byte;

  for (int k = 0; k < 2; k++) {
    uint64_t blk = k == 0 ? log[1] : log[nlog - 1];
    uint64_t off = blk * BLOCK_SIZE + 100 + k;

    cr_assert_eq (dev_pread (dev, &byte, 1, off), 0);
    byte ^= 0x04;
    cr_assert_eq (dev_pwrite (dev, &byte, 1, off), 0);
    assert_refused_naming (dev, blk, "checksum mismatch");
    assert_lazy_refusal (dev, blk);
    rep = run_fsck (dev, &p);
    cr_assert_eq (rep.errors, 1);
    cr_assert (strstr (p.text, "space map block") != NULL, "%s", p.text);
    byte ^= 0x04;
    cr_assert_eq (dev_pwrite (dev, &byte, 1, off), 0);
  }
  assert_clean (dev);
  dev_close (dev);
}

/* Rewrite the newest log block with fn applied, re-checksummed, and point
 * the newest superblock at it: damage that only the decoder can see.
 */
static void
rewrite_head (struct cairn_dev *dev, void (*fn) (uint8_t *b))
{
  struct superblock sb;
  uint8_t b[BLOCK_SIZE];

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  cr_assert_neq (sb.smlog.addr, 0);
  cr_assert_eq (dev_pread (dev, b, BLOCK_SIZE, sb.smlog.addr), 0);
  fn (b);
  sha256 (b, BLOCK_SIZE, sb.smlog.sha);
  cr_assert_eq (dev_pwrite (dev, b, BLOCK_SIZE, sb.smlog.addr), 0);
  cr_assert_eq (sb_write (dev, &sb), 0);
}

/* Turn the first record (an allocation) into a free. */
static void
flip_record_kind (uint8_t *b)
{
  put_le64 (b + 96, get_le64 (b + 96) ^ (1ull << 63));
}

/* Claim a wrong sequence number. */
static void
bad_seq (uint8_t *b)
{
  put_le64 (b + 16, get_le64 (b + 16) + 1);
}

/* A record past the end of the pool. */
static void
record_out_of_bounds (uint8_t *b)
{
  put_le64 (b + 96 + 8, 1ull << 40);
}

/* SM-5: well-checksummed nonsense is refused by the decoder or by replay,
 * naming the block and the check.
 */
Test (spacemap, decoder_refuses_bad_log_contents)
{
  static const struct {
    void (*fn) (uint8_t *);
    const char *msg;
  } cases[] = {
    { flip_record_kind, "log record 0" },
    { bad_seq, "does not match the superblock" },
    { record_out_of_bounds, "out of bounds" },
  };

  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint64_t log[8], gen;
    size_t nlog;
    struct cairn_dev *dev = pool_with_log (&nlog, log, &gen);

    rewrite_head (dev, cases[c].fn);
    assert_refused_naming (dev, log[MIN (nlog, 8) - 1], cases[c].msg);
    dev_close (dev);
  }
}

/* A superblock that records more log blocks than the chain holds. */
static void
longer_log (struct superblock *sb)
{
  sb->smlog_blocks++;
}

Test (spacemap, log_shorter_than_superblock_says)
{
  uint64_t log[8], gen;
  size_t nlog;
  struct cairn_dev *dev = pool_with_log (&nlog, log, &gen);
  struct superblock sb;

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  longer_log (&sb);
  cr_assert_eq (sb_write (dev, &sb), 0);
  assert_writes_refused (dev, "space map", "");
  dev_close (dev);
}

/* Make the fresh pool on dev look like one made by the version-1 format:
 * a chain of one block at blk listing the whole data area free (its own
 * block included), born in generation 2, and no SPACELOG flag.
 */
static void
make_legacy (struct cairn_dev *dev, uint64_t blk)
{
  uint8_t b[BLOCK_SIZE] = { 0 };
  struct superblock sb;

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  cr_assert_eq (sb.generation, 1);
  put_le32 (b, 0x4d505343u);
  put_le32 (b + 4, 1);
  put_le64 (b + 8, 1);
  put_le64 (b + 16, 0);
  put_le64 (b + 24, 1);
  put_le64 (b + 96, sb.data_start);
  put_le64 (b + 104, sb.total_blocks - sb.data_start);
  cr_assert_eq (dev_pwrite (dev, b, BLOCK_SIZE, blk * BLOCK_SIZE), 0);
  sb.incompat = FEATURE_INCOMPAT_SHA256;
  sb.spacemap.addr = blk * BLOCK_SIZE;
  sb.spacemap.birth = 2;
  sha256 (b, BLOCK_SIZE, sb.spacemap.sha);
  sb.spacemap_blocks = 1;
  sb.spacemap_ranges = 1;
  memset (&sb.smlog, 0, sizeof sb.smlog);
  sb.smlog_blocks = sb.smlog_records = sb.smbase_gen = 0;
  cr_assert_eq (sb_write (dev, &sb), 0);
}

/* Old pools: open as they are (read-only they stay so, and check clean),
 * and the first commit converts them: the flag is set and the chain is
 * replaced by a base.
 */
Test (spacemap, version1_pool_converted_by_first_commit)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct pool_open_opts ro = { .readonly = true };
  struct cairn_pool *pool;
  struct superblock sb;
  struct btree *t;
  uint64_t id, blk = 300;
  uint8_t k[8], v[48];
  size_t vl;

  make_legacy (dev, blk);
  cr_assert_eq (pool_open (dev, &ro, &pool), 0, "%s", cairn_errmsg ());
  cr_assert (map_of (pool).legacy);
  cr_assert_eq (map_of (pool).base[0], blk);
  cr_assert (space_is_allocated (pool_space (pool), blk, 1),
             "the chain's own block is allocated");
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  cr_assert_eq (sb.incompat & FEATURE_INCOMPAT_SPACELOG, 0,
                "a read-only open converts nothing");

  pool = open_pool (dev, 0);
  t = new_tree (pool, &id);
  change (pool, t, 7, false);
  commit (pool);
  cr_assert (!map_of (pool).legacy);
  cr_assert_neq (map_of (pool).base[0], blk);
  cr_assert_eq (map_of (pool).nlog, 0, "converted by a condense");
  change (pool, t, 8, false);
  commit (pool);
  cr_assert_gt (map_of (pool).nlog, 0, "then it logs");
  cr_assert_eq (pool_close (pool), 0);
  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  cr_assert_neq (sb.incompat & FEATURE_INCOMPAT_SPACELOG, 0);
  assert_clean (dev);

  pool = open_pool (dev, 0);
  cr_assert_eq (pool_tree_open (pool, id, &t), 0);
  put_be64 (k, 8);
  cr_assert_eq (btree_lookup (t, k, 8, v, sizeof v, &vl), 0);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* A superblock of the new format with log fields but an unknown layout is
 * refused by its decoder: the log fields sit where version-1 had reserved
 * zero bytes, so a version-1 slot with them set is damaged.
 */
Test (spacemap, log_fields_without_the_flag_refused)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct superblock sb;
  uint8_t buf[SB_SIZE];

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  sb.smlog_blocks = 3;
  sb.incompat &= ~FEATURE_INCOMPAT_SPACELOG;
  sb_encode (&sb, buf);
  cr_assert_eq (sb_decode (buf, dev->size, sb.slot, &sb), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "reserved bytes") != NULL, "%s",
             cairn_errmsg ());
  dev_close (dev);
}
