/* Power cuts during checkpoint collection and promotion (engine/
 * checkpoint.c CK-1, CK-3, CK-4; reaper.c RP-3, RP-6; DESIGN §6): a pool
 * with a history of checkpoints, and a workload that promotes one the
 * policy drops, prunes most of them (their deadlist ranges left to the
 * reaper in small steps), reclaims, and promotes one it keeps; the power
 * goes at many points of it.  After every cut the pool opens, fsck is
 * clean, every checkpoint the policy keeps reads back as it was written,
 * every dropped one is gone or reads back as it was, a promoted snapshot
 * is there whole or not at all, what was acknowledged stays; finishing the
 * prune and deleting everything returns every block.
 *
 * CAIRN_TEST_SEED replays a history and its cuts; CAIRN_TEST_SCALE=N
 * runs N histories (seeds SEED .. SEED + N - 1), each cut at every point.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "dev.h"
#include "test-pool.h"
#include "test-util.h"

#define CC_DEV_SIZE (16u << 20)
#define CC_BLOCKS 96u
#define CC_VSIZE (CC_BLOCKS * 4096u)
#define CC_COMMITS 36u          /* commits of the history, a minute apart */
#define CC_MAX 64u              /* checkpoints a history may have */
#define CC_KEEP_LAST 6u         /* the policy: keep-last=6, keep-within=1h */
#define CC_BUDGET 8u            /* reaper step: most ranges are deferred */

/* The pool before the workload (closed), and what it holds. */
struct cc_image {
  struct cairn_dev *dev;
  uint64_t base;                /* blocks in use of the empty pool */
  int64_t now;                  /* the clock when the workload runs */
  size_t n;                     /* checkpoints, oldest first */
  uint64_t gen[CC_MAX];
  uint8_t *data[CC_MAX];        /* each one's content */
  uint8_t *snap;                /* v@s's content */
  size_t promote_dropped, promote_kept;   /* indices the workload promotes */
};

/* How far a workload got: each step's result (1: not reached). */
struct cc_progress {
  int promote_a, prune, reclaim, promote_b;
};

/* vol_checkpoint_list callback: collect the generations. */
struct cc_gens {
  uint64_t gen[CC_MAX];
  char snapshot[CC_MAX][VOL_NAME_MAX + 1];
  size_t n;
};

static int
cc_collect (void *opaque, const struct vol_checkpoint *c)
{
  struct cc_gens *g = opaque;

  cr_assert_lt (g->n, CC_MAX, "more checkpoints than the history made");
  snprintf (g->snapshot[g->n], sizeof g->snapshot[0], "%s", c->snapshot);
  g->gen[g->n++] = c->gen;
  return 0;
}

static void
cc_list (struct cairn_pool *pool, struct cc_gens *g)
{
  g->n = 0;
  cr_assert_eq (vol_checkpoint_list (pool, "v", 0, UINT64_MAX, cc_collect, g),
                0, "%s", cairn_errmsg ());
}

/* Read all of export into buf (CC_VSIZE bytes): 0, or the error. */
static int
cc_read (struct cairn_pool *pool, const char *export, uint8_t *buf)
{
  return export_read (pool, export, buf, CC_VSIZE);
}

/* Index of checkpoint gen in the image, or img->n. */
static size_t
cc_index (const struct cc_image *img, uint64_t gen)
{
  size_t i = 0;

  while (i < img->n && img->gen[i] != gen)
    i++;
  return i;
}

/* Does the policy keep checkpoint i when the workload runs (the newest
 * CC_KEEP_LAST: every one is older than keep-within's hour by then)?
 */
static bool
cc_kept (const struct cc_image *img, size_t i)
{
  return i + CC_KEEP_LAST >= img->n;
}

/* Build the history: CC_COMMITS commits a minute apart, each overwriting
 * random runs of blocks (so that every checkpoint's deadlist range holds
 * data and nodes), some zeroing, a snapshot v@s in the middle; the model
 * is each checkpoint's content, read from the volume when it was taken.
 */
static void
cc_build (struct cc_image *img, uint64_t seed)
{
  struct rng rng = { seed };
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *cur = calloc (1, CC_VSIZE);
  struct cc_gens g;

  memset (img, 0, sizeof *img);
  img->now = 1796640000;        /* 2026-12-07T10:40:00Z */
  img->dev = mem_pool (CC_DEV_SIZE, NULL);
  pool = pool_open_ok (img->dev);
  img->base = empty_pool_blocks (img->dev, &pool);
  cr_assert_eq (pool_close (pool), 0);
  pool = pool_open_clock (img->dev, &img->now);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "v", CC_VSIZE, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_checkpoint_set (pool, "v", "keep-last", "6"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  /* The commits that made v may have taken checkpoints of it, empty. */
  cc_list (pool, &g);
  for (; img->n < g.n; img->n++) {
    img->gen[img->n] = g.gen[img->n];
    img->data[img->n] = calloc (1, CC_VSIZE);
  }
  for (unsigned c = 0; c < CC_COMMITS; c++) {
    unsigned runs = 2 + (unsigned) rng_below (&rng, 6);

    for (unsigned k = 0; k < runs; k++) {
      uint64_t len = 1 + rng_below (&rng, 12);
      uint64_t blk = rng_below (&rng, CC_BLOCKS - len + 1);

      if (rng_below (&rng, 8) == 0) {
        cr_assert_eq (vol_zero (v, (uint32_t) (len * 4096), blk * 4096, 0), 0,
                      "%s", cairn_errmsg ());
        memset (cur + blk * 4096, 0, len * 4096);
      }
      else {
        fill_pattern (cur + blk * 4096, len * 4096, rng_next (&rng));
        cr_assert_eq (vol_pwrite (v, cur + blk * 4096, (uint32_t) (len * 4096),
                                  blk * 4096, 0), 0, "%s", cairn_errmsg ());
      }
    }
    img->now += 60;
    cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
    if (c == CC_COMMITS / 2) {
      cr_assert_eq (snap_create (pool, "v", "s"), 0, "%s", cairn_errmsg ());
      img->snap = malloc (CC_VSIZE);
      memcpy (img->snap, cur, CC_VSIZE);
    }
    /* A commit that changed v made one checkpoint, the newest. */
    cc_list (pool, &g);
    cr_assert_eq (g.n, img->n + 1, "commit %u: %zu checkpoints, %zu before",
                  c, g.n, img->n);
    img->gen[img->n] = g.gen[g.n - 1];
    img->data[img->n] = malloc (CC_VSIZE);
    memcpy (img->data[img->n++], cur, CC_VSIZE);
  }
  vol_close (v);
  /* The workload runs two hours later: keep-within keeps none, keep-last
   * the newest 6.  It promotes one that the policy drops and one it keeps.
   */
  img->now += 7200;
  img->promote_dropped = img->n / 4;
  img->promote_kept = img->n - 2;
  cr_assert (!cc_kept (img, img->promote_dropped) &&
             cc_kept (img, img->promote_kept));
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (img->dev, "the history");
  free (cur);
}

static void
cc_free (struct cc_image *img)
{
  for (size_t i = 0; i < img->n; i++)
    free (img->data[i]);
  free (img->snap);
  dev_close (img->dev);
}

/* Promote checkpoint i of the image to snapshot name. */
static int
cc_promote (struct cairn_pool *pool, const struct cc_image *img, size_t i,
            const char *name)
{
  char exp[64];

  snprintf (exp, sizeof exp, "v@#%" PRIu64, img->gen[i]);
  return vol_checkpoint_promote (pool, exp, name);
}

/* The workload, on dev (a power-cut device over a copy of the image):
 * promote, prune, reclaim, promote; *p says how far it got.  With cut_at
 * not 0, the power goes just before the cut_at-th write or flush after
 * the pool opened.  Returns the writes and flushes it made.
 */
static uint64_t
cc_workload (struct cairn_dev *dev, const struct cc_image *img,
             uint64_t cut_at, struct cc_progress *p)
{
  int64_t now = img->now;
  struct cairn_pool *pool = pool_open_clock (dev, &now);
  uint64_t ops0 = dev_powercut_ops (dev), dropped = 0;

  *p = (struct cc_progress) { 1, 1, 1, 1 };
  vol_reclaim_set_budget (pool, CC_BUDGET);
  if (cut_at)
    dev_powercut_arm (dev, cut_at);
  p->promote_a = cc_promote (pool, img, img->promote_dropped, "pa");
  if (p->promote_a == 0)
    p->prune = vol_checkpoint_prune (pool, "v", false, NULL, NULL, &dropped);
  if (p->prune == 0) {
    struct vol_reclaim_info ri;

    cr_assert_eq (dropped, img->n - CC_KEEP_LAST, "the prune dropped %" PRIu64
                  " of %zu", dropped, img->n);
    /* Most dropped ranges are larger than a step: the reaper has them. */
    cr_assert_eq (vol_reclaim_status (pool, &ri), 0, "%s", cairn_errmsg ());
    cr_assert (cut_at || ri.ranges >= 5, "only %" PRIu64 " ranges were left "
               "to the reaper", ri.ranges);
    p->reclaim = vol_reclaim_wait (pool, NULL, NULL);
  }
  if (p->reclaim == 0)
    p->promote_b = cc_promote (pool, img, img->promote_kept, "pb");
  if (cut_at == 0)
    cr_assert (p->promote_a == 0 && p->prune == 0 && p->reclaim == 0 &&
               p->promote_b == 0, "the workload without a cut: %s",
               cairn_errmsg ());
  (void) pool_close (pool);
  return dev_powercut_ops (dev) - ops0;
}

/* Check the pool that cut c left on dev; then finish the prune, delete
 * everything, and check that every block is back.
 */
static void
cc_check (struct cairn_dev *dev, const struct cc_image *img, unsigned c,
          uint64_t seed, const struct cc_progress *p)
{
  int64_t now = img->now;
  struct cairn_pool *pool;
  uint8_t *buf = malloc (CC_VSIZE);
  struct cc_gens g;
  bool listed[CC_MAX] = { false }, pa, pb;
  char when[96];
  size_t i;
  int r;

  snprintf (when, sizeof when, "seed %" PRIu64 ", cut %u", seed, c);
  assert_fsck_clean (dev, when);
  pool = pool_open_clock (dev, &now);
  cc_list (pool, &g);
  for (size_t k = 0; k < g.n; k++) {
    char exp[64];

    i = cc_index (img, g.gen[k]);
    cr_assert_lt (i, img->n, "%s: checkpoint %" PRIu64 " was never taken",
                  when, g.gen[k]);
    listed[i] = true;
    snprintf (exp, sizeof exp, "v@#%" PRIu64, g.gen[k]);
    cr_assert_eq (cc_read (pool, exp, buf), 0, "%s: %s: %s", when, exp,
                  cairn_errmsg ());
    cr_assert_arr_eq (buf, img->data[i], CC_VSIZE, "%s: %s is not the state "
                      "it was taken with", when, exp);
  }
  /* Kept ones stay; dropped ones go once the prune was acknowledged. */
  for (i = 0; i < img->n; i++) {
    if (cc_kept (img, i))
      cr_assert (listed[i], "%s: checkpoint %" PRIu64 " (kept by the policy) "
                 "is lost", when, img->gen[i]);
    else if (p->prune == 0)
      cr_assert (!listed[i], "%s: checkpoint %" PRIu64 " is back after an "
                 "acknowledged prune", when, img->gen[i]);
  }
  /* A snapshot is there whole or not at all; acknowledged ones are. */
  cr_assert_eq (cc_read (pool, "v@s", buf), 0, "%s: v@s: %s", when,
                cairn_errmsg ());
  cr_assert_arr_eq (buf, img->snap, CC_VSIZE, "%s: v@s changed", when);
  r = cc_read (pool, "v@pa", buf);
  cr_assert (r == 0 || r == -ENOENT, "%s: v@pa: %s", when, cairn_errmsg ());
  pa = r == 0;
  if (pa)
    cr_assert_arr_eq (buf, img->data[img->promote_dropped], CC_VSIZE,
                      "%s: v@pa is not the state it was promoted from", when);
  cr_assert (pa || p->promote_a != 0, "%s: an acknowledged promotion is lost",
             when);
  r = cc_read (pool, "v@pb", buf);
  cr_assert (r == 0 || r == -ENOENT, "%s: v@pb: %s", when, cairn_errmsg ());
  pb = r == 0;
  if (pb)
    cr_assert_arr_eq (buf, img->data[img->promote_kept], CC_VSIZE,
                      "%s: v@pb is not the state it was promoted from", when);
  cr_assert (pb || p->promote_b != 0, "%s: an acknowledged promotion is lost",
             when);
  /* Commits are ordered: pb came after the prune and pa. */
  cr_assert (!pb || (pa && !listed[0]), "%s: v@pb is there without what "
             "came before it", when);
  /* A listed checkpoint names the snapshot of its state. */
  for (size_t k = 0; k < g.n; k++) {
    i = cc_index (img, g.gen[k]);
    if (i == img->promote_dropped)
      cr_assert_str_eq (g.snapshot[k], pa ? "pa" : "", "%s", when);
    else if (i == img->promote_kept)
      cr_assert_str_eq (g.snapshot[k], pb ? "pb" : "", "%s", when);
  }

  /* Finish: the prune and the reclaim, then only the kept ones are left;
   * deleting everything returns every block.
   */
  cr_assert_eq (vol_checkpoint_prune (pool, "v", false, NULL, NULL, NULL), 0,
                "%s: %s", when, cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s: %s", when,
                cairn_errmsg ());
  cc_list (pool, &g);
  cr_assert_eq (g.n, CC_KEEP_LAST, "%s: %zu checkpoints after finishing the "
                "prune", when, g.n);
  cr_assert_eq (pool_close (pool), 0, "%s: %s", when, cairn_errmsg ());
  assert_fsck_clean (dev, when);
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s: %s",
                when, cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s: %s", when,
                cairn_errmsg ());
  cr_assert_eq (pool_blocks_in_use (pool), img->base, "%s: %" PRIu64 " blocks "
                "in use after deleting everything, %" PRIu64 " when empty",
                when, pool_blocks_in_use (pool), img->base);
  cr_assert_eq (pool_close (pool), 0, "%s: %s", when, cairn_errmsg ());
  assert_fsck_clean (dev, when);
  free (buf);
}

/* Cut the power at every write and flush of the workload, each time on a
 * fresh copy of one history; the cuts may tear a write.  Returns the
 * number of cuts.
 */
static unsigned
cc_round (uint64_t seed, unsigned reached[5])
{
  struct cc_image img;
  struct cc_progress p;
  struct cairn_dev *copy, *pc;
  uint64_t ops;

  cc_build (&img, seed);
  /* A run without a cut counts the writes and flushes, and is checked. */
  copy = copy_dev (img.dev, CC_DEV_SIZE);
  cr_assert_eq (dev_powercut_create (copy, seed, &pc), 0);
  ops = cc_workload (pc, &img, 0, &p);
  dev_close (pc);
  cc_check (copy, &img, 0, seed, &p);
  dev_close (copy);
  cr_assert_gt (ops, 20, "the workload writes %" PRIu64 " times", ops);

  for (unsigned c = 1; c <= ops; c++) {
    copy = copy_dev (img.dev, CC_DEV_SIZE);
    cr_assert_eq (dev_powercut_create (copy, seed * 1000003 + c, &pc), 0);
    cc_workload (pc, &img, c, &p);
    if (!dev_powercut_is_cut (pc))
      dev_powercut_cut (pc, true);
    dev_close (pc);
    reached[(p.promote_a == 0) + (p.prune == 0) + (p.reclaim == 0) +
            (p.promote_b == 0)]++;
    cc_check (copy, &img, c, seed, &p);
    dev_close (copy);
  }
  fprintf (stderr, "checkpoint_crash.prune_and_promote: seed %" PRIu64 ", %zu "
           "checkpoints, %zu dropped, %" PRIu64 " writes and flushes, each "
           "cut\n", seed, img.n, img.n - CC_KEEP_LAST, ops);
  cc_free (&img);
  return (unsigned) ops;
}

/* One history per round (CAIRN_TEST_SCALE rounds, seeds seed, seed + 1,
 * ...), cut at every point of its workload.
 */
Test (checkpoint_crash, prune_and_promote, .timeout = 600)
{
  uint64_t seed = test_seed ("checkpoint_crash.prune_and_promote", 2027);
  unsigned rounds = test_work (1), cuts = 0, reached[5] = { 0 };

  for (unsigned i = 0; i < rounds; i++)
    cuts += cc_round (seed + i, reached);
  fprintf (stderr, "checkpoint_crash.prune_and_promote: %u histories, %u "
           "cuts; steps acknowledged before the cut: none %u, promote %u, "
           "prune %u, reclaim %u, all %u\n", rounds, cuts, reached[0],
           reached[1], reached[2], reached[3], reached[4]);
  cr_assert_gt (reached[0], 0);
  cr_assert_gt (reached[2], 0, "some cuts land in the reclaim");
}
