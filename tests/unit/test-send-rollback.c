/* Unit tests for receives with rollback (repl_recv_opts.rollback,
 * VOL_RECV_ROLLBACK; catalog-recv.c RB-1..RB-4): an incremental stream onto a
 * target that diverged from its base (written since, newer snapshots, one
 * of them held open, a clone of a newer state) either applies after
 * rolling the target back to the base, or is refused changing nothing;
 * a cut stream with rollback destroys nothing.  Every received state is
 * compared byte for byte with the source's, and fsck (with its space
 * audit) runs after every rollback; deleting everything afterwards gives
 * every block back.  Randomised tests print their seed (test-util.h).
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-send.h"

static const struct repl_recv_opts rollback = { .rollback = true };

/* Receive src's incremental stream (s1 to s2) into v with rollback. */
static int
receive_rollback (struct cairn_pool *pool, struct source *src, struct rng *rng,
                  struct repl_recv_result *res)
{
  return receive_opts (pool, "v", src->incr.p, src->incr.len, rng, &rollback,
                       res);
}

/* Assert that name does not exist (any more). */
static void
assert_gone (struct cairn_pool *pool, const char *name)
{
  struct vol_info vi;

  cr_assert_eq (vol_stat (pool, name, &vi), -ENOENT, "%s still exists", name);
}

/* Assert that the last error says msg. */
static void
assert_said (const char *msg)
{
  cr_assert (strstr (cairn_errmsg (), msg) != NULL, "no '%s' in: %s", msg,
             cairn_errmsg ());
}

/* Delete v with its snapshots, reclaim, and check that the pool is back
 * to its empty size (nothing leaked, nothing freed twice: fsck).
 */
static struct cairn_pool *
assert_all_back (struct cairn_dev *dev, struct cairn_pool *pool, uint64_t base)
{
  uint64_t used;

  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool = fsck_reopen (dev, pool, "after deleting the rolled-back volume");
  used = pool_blocks_in_use (pool);
  cr_assert_eq (used, base, "%" PRIu64 " blocks allocated after deleting "
                "everything, %" PRIu64 " in the empty pool", used, base);
  return pool;
}

/* Resume the kept receive into v with src's stream from its token, with
 * rollback: it must publish v@s2.
 */
static void
resume_rollback (struct cairn_pool *pool, struct source *src,
                 const char *token, struct rng *rng)
{
  struct buf s = send_to_buf (src->pool, "v@s2", "s1", token);
  struct repl_recv_result res;

  cr_assert_eq (receive_opts (pool, "v", s.p, s.len, rng, &rollback, &res), 0,
                "resuming: %s", cairn_errmsg ());
  free (s.p);
  cr_assert (res.resumed);
  assert_gone (pool, "v@extra");
  assert_same (src->pool, "v@s2", pool, "v");
}

/* Assert that block number block of export name holds the pattern of tag. */
static void
assert_block (struct cairn_pool *pool, const char *name, uint64_t block,
              uint64_t tag)
{
  static uint8_t x[4096], y[4096];
  struct cairn_volume *v;

  fill_pattern (y, sizeof y, tag);
  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pread (v, x, sizeof x, block * 4096), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
  cr_assert (memcmp (x, y, sizeof x) == 0, "%s changed", name);
}

/* The end of a test: everything comes back, everything is closed. */
static void
finish (struct cairn_dev *dev, struct cairn_pool *pool, uint64_t base,
        struct source *src)
{
  pool = assert_all_back (dev, pool, base);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  source_free (src);
}

/* A target holding v@s1 (received), in a pool whose empty size is *base. */
static struct cairn_pool *
target_with_base (struct cairn_dev **devp, struct source *src, struct rng *rng,
                  uint64_t *base)
{
  struct cairn_pool *pool = target_make (devp, src, false, rng);

  *base = empty_pool_blocks (*devp, &pool);
  cr_assert_eq (receive_buf (pool, "v", src->full.p, src->full.len, rng, NULL),
                0, "%s", cairn_errmsg ());
  return pool;
}

/* Such a target that then diverged: block 7 written (tag 42), snapshot
 * v@extra, block 7 written again (tag 43).
 */
static struct cairn_pool *
target_diverged (struct cairn_dev **devp, struct source *src, struct rng *rng,
                 uint64_t *base)
{
  struct cairn_pool *pool = target_with_base (devp, src, rng, base);

  write_block (pool, "v", 7, 42);
  cr_assert_eq (snap_create (pool, "v", "extra"), 0);
  write_block (pool, "v", 7, 43);
  return pool;
}

Test (send_rollback, written_target)
{
  struct rng rng = { test_seed ("send_rollback.written_target", 11) };
  struct repl_recv_result res;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint64_t base;
  char *before;

  source_make (&src, &rng);
  pool = target_with_base (&dev, &src, &rng, &base);
  scribble (pool, "v", &rng, 40);
  pool = fsck_reopen (dev, pool, "the written target");

  /* Without rollback: refused, saying how to go on. */
  before = listing (pool);
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len, &rng, NULL),
                -ESTALE);
  assert_said ("was written after its snapshot 's1'");
  assert_said ("run the same command with --rollback to discard the writes");
  pool = assert_unchanged (dev, pool, before, "a refused diverged receive");
  free (before);
  cr_assert_eq (repl_recv_abort (pool, "v"), -ENOENT, "the refusal kept a partial");

  /* With it: the writes are gone, the stream applies. */
  cr_assert_eq (receive_rollback (pool, &src, &rng, &res), 0, "%s",
                cairn_errmsg ());
  cr_assert_str_eq (res.name, "v@s2");
  cr_assert (res.incremental);
  assert_same (src.pool, "v@s2", pool, "v@s2");
  assert_same (src.pool, "v@s2", pool, "v");
  assert_same (src.pool, "v@s1", pool, "v@s1");
  pool = fsck_reopen (dev, pool, "after a rollback receive");
  assert_same (src.pool, "v@s2", pool, "v");
  /* The volume goes on as an ordinary one. */
  write_block (pool, "v", 2, 5);
  finish (dev, pool, base, &src);
}

Test (send_rollback, newer_snapshots)
{
  struct rng rng = { test_seed ("send_rollback.newer_snapshots", 12) };
  struct vol_info vi, si;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint64_t base;
  char *before;

  source_make (&src, &rng);
  pool = target_with_base (&dev, &src, &rng, &base);
  /* Two newer states of the target's own, the first named as the stream's
   * snapshot (another state, another GUID), and live writes after them.
   */
  scribble (pool, "v", &rng, 30);
  cr_assert_eq (snap_create (pool, "v", "s2"), 0);
  scribble (pool, "v", &rng, 30);
  cr_assert_eq (snap_create (pool, "v", "extra"), 0);
  scribble (pool, "v", &rng, 10);

  before = listing (pool);
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len, &rng, NULL),
                -ESTALE);
  assert_said ("has newer snapshots ('extra' is the newest)");
  assert_said ("or run the same command with --rollback to discard them");
  pool = assert_unchanged (dev, pool, before, "a refused receive");
  free (before);

  cr_assert_eq (receive_rollback (pool, &src, &rng, NULL), 0, "%s",
                cairn_errmsg ());
  assert_gone (pool, "v@extra");
  assert_same (src.pool, "v@s2", pool, "v@s2");
  assert_same (src.pool, "v@s2", pool, "v");
  assert_same (src.pool, "v@s1", pool, "v@s1");
  cr_assert_eq (vol_stat (src.pool, "v@s2", &si), 0);
  cr_assert_eq (vol_stat (pool, "v@s2", &vi), 0);
  cr_assert_eq (vi.guid, si.guid, "v@s2 is not the received state");
  pool = fsck_reopen (dev, pool, "after rolling back two snapshots");
  assert_same (src.pool, "v@s2", pool, "v@s2");
  finish (dev, pool, base, &src);
}

Test (send_rollback, newer_snapshot_held_open)
{
  struct rng rng = { test_seed ("send_rollback.newer_snapshot_held_open", 13) };
  struct repl_recv_result res;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint64_t base;
  char *before, *now;

  source_make (&src, &rng);
  pool = target_diverged (&dev, &src, &rng, &base);

  /* A client reads the newer snapshot: the rollback would take the state
   * it reads, so publishing waits (nothing changes, the receive keeps its
   * progress) ...
   */
  cr_assert_eq (vol_open (pool, "v@extra", &v), 0, "%s", cairn_errmsg ());
  before = listing (pool);
  cr_assert_eq (receive_rollback (pool, &src, &rng, &res), -EBUSY);
  assert_said ("volume 'v' is open by 1 client:");
  cr_assert (res.kept, "the refused publish did not keep the receive");
  assert_block (pool, "v@extra", 7, 42);
  now = listing (pool);
  cr_assert_str_eq (now, before, "a refused rollback changed the catalog");
  free (now);
  free (before);

  /* ... until it is closed; then the sender resumes from the token. */
  vol_close (v);
  pool = fsck_reopen (dev, pool, "a rollback that waited");
  resume_rollback (pool, &src, res.token, &rng);
  pool = fsck_reopen (dev, pool, "after a rollback that waited");
  finish (dev, pool, base, &src);
}

Test (send_rollback, clone_of_a_newer_state)
{
  struct rng rng = { test_seed ("send_rollback.clone_of_a_newer_state", 14) };
  struct repl_recv_result res;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint64_t base;
  char *before;

  source_make (&src, &rng);
  pool = target_diverged (&dev, &src, &rng, &base);
  cr_assert_eq (vol_clone (pool, "v@extra", "c"), 0);
  before = listing (pool);
  cr_assert_eq (receive_rollback (pool, &src, &rng, &res), -EBUSY);
  assert_said ("has a clone, 'c', of its state at generation");
  assert_said ("delete the clone first");
  cr_assert (res.kept);
  pool = assert_unchanged (dev, pool, before, "a rollback refused for a clone");
  free (before);
  /* Without the clone the kept receive, resumed, publishes. */
  cr_assert_eq (vol_delete (pool, "c", 0), 0, "%s", cairn_errmsg ());
  resume_rollback (pool, &src, res.token, &rng);
  pool = fsck_reopen (dev, pool, "after the clone went");
  finish (dev, pool, base, &src);
}

Test (send_rollback, missing_base_is_refused)
{
  struct rng rng = { test_seed ("send_rollback.missing_base_is_refused", 15) };
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct buf s3;
  uint64_t base;
  char *before;

  source_make (&src, &rng);
  scribble (src.pool, "v", &rng, 5);
  cr_assert_eq (snap_create (src.pool, "v", "s3"), 0);
  s3 = send_to_buf (src.pool, "v@s3", "s2", NULL);
  pool = target_with_base (&dev, &src, &rng, &base);
  write_block (pool, "v", 1, 1);
  cr_assert_eq (snap_create (pool, "v", "extra"), 0);
  before = listing (pool);
  cr_assert_eq (receive_opts (pool, "v", s3.p, s3.len, &rng, &rollback, NULL),
                -ESTALE);
  assert_said ("'v' has no snapshot with the stream's base GUID");
  assert_said ("even to roll back to");
  pool = assert_unchanged (dev, pool, before, "a missing base with rollback");
  cr_assert_eq (repl_recv_abort (pool, "v"), -ENOENT);
  free (before);
  /* No target at all: refused as without rollback. */
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0);
  cr_assert_eq (receive_rollback (pool, &src, &rng, NULL), -ENOENT);
  assert_said ("does not exist");
  free (s3.p);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  source_free (&src);
}

Test (send_rollback, cut_stream_destroys_nothing)
{
  struct rng rng = { test_seed ("send_rollback.cut_stream_destroys_nothing", 16) };
  struct repl_recv_result res;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint64_t base;
  char *before;

  source_make (&src, &rng);
  pool = target_diverged (&dev, &src, &rng, &base);
  before = listing (pool);
  for (int i = 0; i < 4; i++) {
    /* Cut anywhere before the END is complete. */
    size_t cut = (size_t) rng_below (&rng, src.incr.len);

    fprintf (stderr, "send_rollback.cut_stream_destroys_nothing: cut at %zu "
             "of %zu\n", cut, src.incr.len);
    cr_assert_neq (receive_opts (pool, "v", src.incr.p, cut, &rng, &rollback,
                                 &res), 0, "a stream cut at %zu was accepted",
                   cut);
    pool = assert_unchanged (dev, pool, before, "a cut rollback stream");
    /* The live volume still holds its own write, the snapshot its own. */
    assert_block (pool, "v", 7, 43);
    assert_block (pool, "v@extra", 7, 42);
    cr_assert_eq (repl_recv_abort (pool, "v"), res.kept ? 0 : -ENOENT, "%s",
                  cairn_errmsg ());
  }
  free (before);
  /* A resumed stream with rollback completes it. */
  cr_assert_neq (receive_opts (pool, "v", src.incr.p, src.incr.len / 2, &rng,
                               &rollback, &res), 0);
  cr_assert (res.kept);
  resume_rollback (pool, &src, res.token, &rng);
  pool = fsck_reopen (dev, pool, "after resuming a rollback receive");
  finish (dev, pool, base, &src);
}

Test (send_rollback, pending_free_range_is_dropped)
{
  struct rng rng = { test_seed ("send_rollback.pending_free_range_is_dropped",
                                17) };
  struct pool_open_opts o = { .no_background = true };
  struct repl_recv_result res;
  struct vol_reclaim_info ri;
  struct repl_recv *rr;
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint64_t base;
  size_t used, half;

  source_make (&src, &rng);
  half = src.incr.len / 2;
  pool = target_with_base (&dev, &src, &rng, &base);
  cr_assert_eq (pool_close (pool), 0);
  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  vol_reclaim_set_budget (pool, 16);

  /* Half the stream first: the partial holds blocks born now ... */
  cr_assert_eq (repl_recv_new (pool, "v", &rollback, &rr), 0);
  cr_assert_eq (repl_recv_feed (rr, src.incr.p, half, &used), 0, "%s",
                cairn_errmsg ());
  /* ... before a snapshot of the target whose delete leaves a range of
   * births up to it to the background (every other block: one deadlist
   * entry each, far more than a step).
   */
  for (uint64_t i = 0; i < 256; i++)
    write_block (pool, "v", 2 * i, i);
  cr_assert_eq (snap_create (pool, "v", "extra"), 0);
  for (uint64_t i = 0; i < 256; i++)
    write_block (pool, "v", 2 * i, 1000 + i);
  cr_assert_eq (snap_delete (pool, "v", "extra"), 0);
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.ranges, 1, "no free range is pending");

  /* The rollback settles that range: nothing is left pending that the
   * received blocks, born in it, could join.
   */
  cr_assert_eq (repl_recv_feed (rr, src.incr.p + half, src.incr.len - half,
                                &used), 1, "%s", cairn_errmsg ());
  cr_assert_eq (repl_recv_finish (rr, &res), 0, "%s", cairn_errmsg ());
  repl_recv_free (rr);
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.ranges, 0, "the rollback left a free range pending");
  /* Overwrite the received state; v@s2 keeps it, whatever the background
   * frees.
   */
  scribble (pool, "v", &rng, 80);
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  assert_same (src.pool, "v@s2", pool, "v@s2");
  pool = fsck_reopen (dev, pool, "after the background after a rollback");
  assert_same (src.pool, "v@s2", pool, "v@s2");
  finish (dev, pool, base, &src);
}
