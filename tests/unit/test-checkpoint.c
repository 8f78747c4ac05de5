/* Unit tests of continuous checkpoints (engine/checkpoint.c, CK-n): every
 * commit that changed a volume is a state that can be read back, found by
 * generation or time, promoted, and collected by policy, with fsck clean
 * and every block back once everything is deleted.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "test-pool.h"
#include "test-util.h"

#define VBLOCKS 64u
#define VSIZE (VBLOCKS * 4096u)

/* Write block blk of vol with the pattern of tag. */
static void
write_block (struct cairn_pool *pool, const char *vol, uint64_t blk,
             uint64_t tag)
{
  struct cairn_volume *v;
  uint8_t buf[4096];

  fill_pattern (buf, sizeof buf, tag);
  cr_assert_eq (vol_open (pool, vol, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, buf, sizeof buf, blk * 4096, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
}

/* Read the whole of export into buf (VSIZE bytes). */
static int
read_all (struct cairn_pool *pool, const char *export, uint8_t *buf)
{
  return export_read (pool, export, buf, VSIZE);
}

/* What vol_checkpoint_list reported. */
struct ck_seen {
  struct vol_checkpoint c[4096];
  size_t n;
};

static int
collect_ck (void *opaque, const struct vol_checkpoint *c)
{
  struct ck_seen *s = opaque;

  cr_assert_lt (s->n, ARRAY_SIZE (s->c));
  s->c[s->n++] = *c;
  return 0;
}

static void
list_ck (struct cairn_pool *pool, const char *vol, struct ck_seen *s)
{
  s->n = 0;
  cr_assert_eq (vol_checkpoint_list (pool, vol, 0, UINT64_MAX, collect_ck, s),
                0, "%s", cairn_errmsg ());
}

/* A pool with checkpoints on and one volume "v". */
static struct cairn_pool *
ck_pool (struct cairn_dev **devp, int64_t *now)
{
  struct cairn_pool *pool;

  *devp = mem_pool (256 << 20, NULL);
  pool = pool_open_clock (*devp, now);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "v", VSIZE, NULL), 0, "%s", cairn_errmsg ());
  return pool;
}

/* CK-2: a commit that changed a volume is a checkpoint; one that did not
 * is none; each reads back as it was, by generation and by time.
 */
Test (checkpoint, every_changing_commit_is_a_state)
{
  int64_t now = 1796640000;   /* 2026-12-07T10:40:00Z */
  struct cairn_dev *dev;
  struct cairn_pool *pool = ck_pool (&dev, &now);
  uint8_t buf[VSIZE], want[4096];
  struct ck_seen *s = calloc (1, sizeof *s);
  char exp[128];
  uint64_t g[3];

  for (int i = 0; i < 3; i++) {
    write_block (pool, "v", 0, 100 + (uint64_t) i);
    now += 10;
    cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (pool_commit (pool), 0);     /* nothing changed */
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 3, "three commits changed v: %zu checkpoints", s->n);
  for (int i = 0; i < 3; i++) {
    g[i] = s->c[i].gen;
    cr_assert_eq (s->c[i].ctime, 1796640010 + 10 * (uint64_t) i);
    cr_assert_eq (s->c[i].written, 4096, "each wrote one block");
    cr_assert_eq (s->c[i].size, VSIZE);
    snprintf (exp, sizeof exp, "v@#%" PRIu64, g[i]);
    cr_assert_eq (read_all (pool, exp, buf), 0, "%s: %s", exp, cairn_errmsg ());
    fill_pattern (want, sizeof want, 100 + (uint64_t) i);
    cr_assert_arr_eq (buf, want, 4096, "%s holds its own write", exp);
  }
  /* By time: the newest at or before it. */
  cr_assert_eq (read_all (pool, "v@2026-12-07T10:40:25Z", buf), 0, "%s",
                cairn_errmsg ());
  fill_pattern (want, sizeof want, 101);
  cr_assert_arr_eq (buf, want, 4096, "10:40:25 is the second state (10:40:20)");
  cr_assert_eq (read_all (pool, "v@2026-12-07T10:40:09Z", buf), -ENOENT,
                "nothing was kept before the first commit");
  /* A volume with checkpoints off takes none. */
  cr_assert_eq (vol_checkpoint_set (pool, "v", "checkpoints", "off"), 0);
  write_block (pool, "v", 1, 7);
  cr_assert_eq (pool_commit (pool), 0);
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 3, "off: no new checkpoint");
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after three checkpoints");
  dev_close (dev);
  free (s);
}

/* Retention on the fake clock: keep-within keeps the last hour, older ones
 * go (RC-3 frees what only they held), a promoted one stays as a snapshot,
 * an open one stays until closed (CK-3); fsck is clean and deleting the
 * volume returns every block.
 */
Test (checkpoint, policy_collects_and_promotion_keeps)
{
  int64_t now = 1796640000;
  struct cairn_dev *dev = mem_pool (256 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  uint64_t base = empty_pool_blocks (dev, &pool), dropped;
  struct ck_seen *s = calloc (1, sizeof *s);
  struct cairn_volume *held;
  uint8_t buf[VSIZE], want[4096];
  char exp[128];
  uint64_t promoted, leased;

  cr_assert_eq (pool_close (pool), 0);
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0);
  cr_assert_eq (vol_create (pool, "v", VSIZE, NULL), 0);
  /* 20 states, 10 minutes apart, each overwriting the same 8 blocks. */
  for (uint64_t i = 0; i < 20; i++) {
    for (uint64_t b = 0; b < 8; b++)
      write_block (pool, "v", b, 1000 * i + b);
    now += 600;
    cr_assert_eq (pool_commit (pool), 0);
  }
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 20);
  promoted = s->c[2].gen;
  leased = s->c[4].gen;
  snprintf (exp, sizeof exp, "v@#%" PRIu64, promoted);
  {
    struct vol_info a, b;

    /* A checkpoint is a state with a GUID that stays its own (a stream
     * of it names it so), and its promotion keeps it.
     */
    cr_assert_eq (vol_stat (pool, exp, &a), 0, "%s", cairn_errmsg ());
    cr_assert (a.is_snapshot && a.guid != 0 && a.gen == promoted);
    cr_assert_str_eq (a.snap, "");
    cr_assert_eq (vol_stat (pool, exp, &b), 0);
    cr_assert_eq (a.guid, b.guid);
    cr_assert_eq (vol_checkpoint_promote (pool, exp, "kept"), 0, "%s",
                  cairn_errmsg ());
    cr_assert_eq (vol_stat (pool, "v@kept", &b), 0, "%s", cairn_errmsg ());
    cr_assert_eq (b.guid, a.guid, "the snapshot has the checkpoint's GUID");
    cr_assert_eq (b.ctime, a.ctime);
    cr_assert_eq (b.gen, promoted);
  }
  cr_assert_eq (vol_checkpoint_promote (pool, exp, "again"), -EEXIST);
  snprintf (exp, sizeof exp, "v@#%" PRIu64, leased);
  cr_assert_eq (vol_open (pool, exp, &held), 0, "%s", cairn_errmsg ());

  /* The policy: the last hour (6 states at most, 10 minutes apart). */
  cr_assert_eq (vol_checkpoint_set (pool, "v", "keep-within", "1h"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_checkpoint_prune (pool, "v", false, NULL, NULL, &dropped),
                0, "%s", cairn_errmsg ());
  list_ck (pool, "v", s);
  /* Younger than an hour: the states at now, now-600 .. now-3000 (6 of
   * them; now-3600 is not younger), plus the open one.  The promoted one
   * is a checkpoint no more (CK-4), and stays as the snapshot.
   */
  cr_assert_eq (s->n, 6 + 1, "kept %zu", s->n);
  cr_assert_eq (dropped, 13);
  cr_assert_eq (s->c[0].gen, leased);
  for (size_t i = 1; i < s->n; i++)
    cr_assert_gt ((int64_t) s->c[i].ctime, now - 3600);
  /* The promoted state reads as it was, as a snapshot too. */
  cr_assert_eq (read_all (pool, "v@kept", buf), 0, "%s", cairn_errmsg ());
  fill_pattern (want, sizeof want, 2000);
  cr_assert_arr_eq (buf, want, 4096);
  /* Closing the lease lets the next pass take it. */
  vol_close (held);
  cr_assert_eq (vol_checkpoint_prune (pool, "v", false, NULL, NULL, &dropped),
                0);
  cr_assert_eq (dropped, 1, "the lease ended");
  snprintf (exp, sizeof exp, "v@#%" PRIu64, leased);
  cr_assert_eq (read_all (pool, exp, buf), -ENOENT);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after collecting");
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (read_all (pool, "v@kept", buf), 0, "the promotion survives");
  cr_assert_arr_eq (buf, want, 4096);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_blocks_in_use (pool), base, "every block is back");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after deleting everything");
  dev_close (dev);
  free (s);
}

/* The model: every kept checkpoint reads as the model's state at its
 * generation, after random writes, commits, snapshots, promotions, clones,
 * policy changes, prunes and reopens; fsck is clean at every reopen and
 * deleting everything returns every block.
 */
Test (checkpoint, model_random_histories)
{
  uint64_t seed = test_seed ("checkpoint.model_random_histories", 2718);
  struct rng rng = { seed };
  int64_t now = 1796640000;
  struct cairn_dev *dev = mem_pool (256 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  uint64_t base = empty_pool_blocks (dev, &pool);
  uint8_t *cur = calloc (1, VSIZE), *buf = malloc (VSIZE);
  struct ck_seen *s = calloc (1, sizeof *s);
  /* The model's state at each generation a checkpoint was seen at. */
  struct { uint64_t gen; uint8_t *data; } *states = calloc (4096, sizeof *states);
  size_t nstates = 0;
  unsigned steps = test_work (300), commits = 0, prunes = 0, promotions = 0,
    clones = 0, reopens = 0, snaps = 0;
  static const char *const opts[] = {
    "keep-within", "keep-last", "keep-minutely", "keep-hourly", "keep-daily",
  };

  cr_assert_eq (pool_close (pool), 0);
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0);
  cr_assert_eq (vol_create (pool, "v", VSIZE, NULL), 0);
  for (unsigned step = 0; step < steps; step++) {
    unsigned what = (unsigned) rng_below (&rng, 100);
    char exp[128];

    if (what < 50) {
      uint64_t blk = rng_below (&rng, VBLOCKS), tag = rng_next (&rng);

      write_block (pool, "v", blk, tag);
      fill_pattern (cur + blk * 4096, 4096, tag);
    }
    else if (what < 75) {
      now += (int64_t) rng_below (&rng, 900) + 1;
      cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
      commits++;
    }
    else if (what < 82) {
      const char *opt = opts[rng_below (&rng, ARRAY_SIZE (opts))];
      char val[32];

      if (strcmp (opt, "keep-within") == 0)
        snprintf (val, sizeof val, "%um", (unsigned) rng_below (&rng, 120));
      else
        snprintf (val, sizeof val, "%u", (unsigned) rng_below (&rng, 6));
      cr_assert_eq (vol_checkpoint_set (pool, "v", opt, val), 0, "%s=%s: %s",
                    opt, val, cairn_errmsg ());
      cr_assert_eq (vol_checkpoint_prune (pool, "v", false, NULL, NULL, NULL),
                    0, "%s", cairn_errmsg ());
      prunes++;
    }
    else if (what < 86 && nstates) {
      list_ck (pool, "v", s);
      if (s->n) {
        char name[32];
        int r;

        snprintf (exp, sizeof exp, "v@#%" PRIu64,
                  s->c[rng_below (&rng, s->n)].gen);
        snprintf (name, sizeof name, "p%u", promotions + snaps);
        r = vol_checkpoint_promote (pool, exp, name);
        cr_assert (r == 0 || r == -EEXIST, "%s: %s", exp, cairn_errmsg ());
        promotions += r == 0;
      }
    }
    else if (what < 89) {
      char name[32];

      snprintf (name, sizeof name, "s%u", snaps++);
      cr_assert_eq (snap_create (pool, "v", name), 0, "%s", cairn_errmsg ());
    }
    else if (what < 92) {
      list_ck (pool, "v", s);
      if (s->n) {
        snprintf (exp, sizeof exp, "v@#%" PRIu64,
                  s->c[rng_below (&rng, s->n)].gen);
        cr_assert_eq (vol_clone (pool, exp, "c"), 0, "%s", cairn_errmsg ());
        write_block (pool, "c", rng_below (&rng, VBLOCKS), rng_next (&rng));
        cr_assert_eq (vol_delete (pool, "c", VOL_DELETE_RECURSIVE), 0, "%s",
                      cairn_errmsg ());
        clones++;
      }
    }
    else if (what < 95) {
      cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
      snprintf (exp, sizeof exp, "seed %" PRIu64 ", step %u", seed, step);
      assert_fsck_clean (dev, exp);
      pool = pool_open_clock (dev, &now);
      reopens++;
    }
    else
      now += (int64_t) rng_below (&rng, 86400);
    /* Every step may have committed (a catalog change commits): a new
     * checkpoint is the newest, and holds the model's state now.
     */
    list_ck (pool, "v", s);
    for (size_t i = 0; i < s->n; i++)
      if (nstates == 0 || s->c[i].gen > states[nstates - 1].gen) {
        cr_assert_lt (nstates, 4096);
        states[nstates].gen = s->c[i].gen;
        states[nstates].data = malloc (VSIZE);
        memcpy (states[nstates].data, cur, VSIZE);
        nstates++;
      }
    /* What dropping one would free is the same listed alone (a window
     * of one checkpoint) as in the whole listing.
     */
    if (s->n) {
      struct ck_seen *one = calloc (1, sizeof *one);
      size_t i = rng_below (&rng, s->n);

      cr_assert_eq (vol_checkpoint_list (pool, "v", s->c[i].ctime,
                                         s->c[i].ctime, collect_ck, one), 0);
      for (size_t j = 0; j < one->n; j++)
        if (one->c[j].gen == s->c[i].gen)
          cr_assert_eq (one->c[j].unique, s->c[i].unique, "seed %" PRIu64
                        " step %u: checkpoint %" PRIu64 " frees %" PRIu64
                        " alone, %" PRIu64 " in the whole list", seed, step,
                        s->c[i].gen, one->c[j].unique, s->c[i].unique);
      free (one);
    }
    /* Every kept checkpoint holds the model's state at its generation. */
    for (size_t i = 0; i < s->n; i++) {
      size_t j = 0;

      while (j < nstates && states[j].gen != s->c[i].gen)
        j++;
      cr_assert_lt (j, nstates, "seed %" PRIu64 " step %u: checkpoint %"
                    PRIu64 " has no model state", seed, step, s->c[i].gen);
      snprintf (exp, sizeof exp, "v@#%" PRIu64, s->c[i].gen);
      cr_assert_eq (read_all (pool, exp, buf), 0, "%s", cairn_errmsg ());
      cr_assert_arr_eq (buf, states[j].data, VSIZE, "seed %" PRIu64 " step %u:"
                        " %s differs from the model", seed, step, exp);
    }
  }
  fprintf (stderr, "checkpoint.model_random_histories: seed %" PRIu64 ", %u "
           "steps: %u commits, %zu states seen, %u prunes, %u promotions, %u "
           "snapshots, %u clones, %u reopens\n", seed, steps, commits, nstates,
           prunes, promotions, snaps, clones, reopens);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "at the end");
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_blocks_in_use (pool), base, "seed %" PRIu64 ": every "
                "block is back", seed);
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after deleting everything");
  dev_close (dev);
  for (size_t i = 0; i < nstates; i++)
    free (states[i].data);
  free (states);
  free (s);
  free (cur);
  free (buf);
}

/* A rollback to a checkpoint (VOL@#GEN): the volume reads as that state,
 * keeps its checkpoints up to it, and the later ones go with the rest of
 * the later history to KEEP_AS (VR-3); fsck is clean and deleting
 * everything returns every block.
 */
Test (checkpoint, rollback_to_a_checkpoint)
{
  int64_t now = 1796640000;
  struct cairn_dev *dev = mem_pool (256 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  uint64_t base = empty_pool_blocks (dev, &pool);
  struct ck_seen *s = calloc (1, sizeof *s), *k = calloc (1, sizeof *k);
  uint8_t buf[VSIZE], want[4096];
  char snap[32];
  uint64_t g[4];

  cr_assert_eq (pool_close (pool), 0);
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0);
  cr_assert_eq (vol_create (pool, "v", VSIZE, NULL), 0);
  for (uint64_t i = 0; i < 4; i++) {
    write_block (pool, "v", 0, 500 + i);
    write_block (pool, "v", 1 + i, 600 + i);
    now += 60;
    cr_assert_eq (pool_commit (pool), 0);
  }
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 4);
  for (int i = 0; i < 4; i++)
    g[i] = s->c[i].gen;
  snprintf (snap, sizeof snap, "#%" PRIu64, g[1]);
  cr_assert_eq (vol_rollback (pool, "v", snap, "keep"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (read_all (pool, "v", buf), 0);
  fill_pattern (want, sizeof want, 501);
  cr_assert_arr_eq (buf, want, 4096, "v reads as checkpoint 2");
  fill_pattern (want, sizeof want, 601);
  cr_assert_arr_eq (buf + 2 * 4096, want, 4096);
  memset (want, 0, sizeof want);
  cr_assert_arr_eq (buf + 3 * 4096, want, 4096, "the third state's block is "
                    "not in v any more");
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 2, "v keeps its checkpoints up to the rollback");
  cr_assert_eq (s->c[1].gen, g[1]);
  list_ck (pool, "keep", k);
  cr_assert_geq (k->n, 2, "keep has the later ones");
  cr_assert_eq (k->c[0].gen, g[2]);
  cr_assert_eq (k->c[1].gen, g[3]);
  cr_assert_eq (read_all (pool, "keep", buf), 0);
  fill_pattern (want, sizeof want, 503);
  cr_assert_arr_eq (buf, want, 4096, "keep holds the newest state");
  /* A time between the second and third checkpoints finds the second. */
  cr_assert_eq (read_all (pool, "v@2026-12-07T10:42:30Z", buf), 0, "%s",
                cairn_errmsg ());
  fill_pattern (want, sizeof want, 501);
  cr_assert_arr_eq (buf, want, 4096);
  cr_assert_eq (vol_rollback (pool, "v", "#999999", "k2"), -ENOENT);
  cr_assert (strstr (cairn_errmsg (), "keeps no state at generation 999999"),
             "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after a rollback to a checkpoint");
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_delete (pool, "keep", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_blocks_in_use (pool), base, "every block is back");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after deleting everything");
  dev_close (dev);
  free (s);
  free (k);
}

/* A full pool with checkpoints: a writer that overwrites far more than the
 * pool holds never gets ENOSPC while checkpoints can go; the collector
 * drops the oldest first, beyond the policy, and never a snapshot; what
 * is left reads as it was; status says that space ran short.
 */
Test (checkpoint, full_pool_gives_space_back_before_a_write_fails)
{
  enum { BLOCKS = 1024, ROUNDS = 24 };     /* a 4 MiB volume */
  int64_t now = 1796640000;
  struct cairn_dev *dev = mem_pool (32 << 20, NULL);
  struct cairn_pool *pool = pool_open_clock (dev, &now);
  struct ck_seen *s = calloc (1, sizeof *s);
  struct vol_ckpt_status cs;
  struct cairn_volume *v;
  uint8_t *buf = malloc (BLOCKS * 4096), *back = malloc (BLOCKS * 4096);
  uint64_t first_gen = 0;

  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0);
  cr_assert_eq (vol_create (pool, "v", BLOCKS * 4096, NULL), 0);
  for (unsigned round = 0; round < ROUNDS; round++) {
    fill_pattern (buf, BLOCKS * 4096, 9000 + round);
    cr_assert_eq (vol_open (pool, "v", &v), 0);
    /* In pieces, so that a piece finds the pool full part-way. */
    for (unsigned off = 0; off < BLOCKS * 4096; off += 256 * 1024)
      cr_assert_eq (vol_pwrite (v, buf + off, 256 * 1024, off, 0), 0,
                    "round %u, offset %u: %s", round, off, cairn_errmsg ());
    vol_close (v);
    now += 5;
    cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
    if (round == 0) {
      cr_assert_eq (snap_create (pool, "v", "first"), 0);
      list_ck (pool, "v", s);
      first_gen = s->c[0].gen;
    }
  }
  /* 24 x 4 MiB overwritten in a 32 MiB pool: checkpoints went for space,
   * the oldest first; the snapshot did not.
   */
  cr_assert_eq (vol_checkpoint_status (pool, &cs), 0, "%s", cairn_errmsg ());
  cr_assert_gt (cs.pressure_dropped, 0, "space never ran short");
  cr_assert_gt (cs.pressure_events, 0);
  cr_assert (cs.pressure_last > 1796640000 && cs.pressure_last <= now,
             "when it last did: %" PRId64, cs.pressure_last);
  list_ck (pool, "v", s);
  cr_assert_lt (s->n, ROUNDS, "%zu checkpoints kept", s->n);
  cr_assert_gt (s->n, 0);
  for (size_t i = 1; i < s->n; i++)
    cr_assert_gt (s->c[i].gen, s->c[i - 1].gen);
  cr_assert_eq (s->c[s->n - 1].ctime, (uint64_t) now, "the newest stays");
  /* The first checkpoint is the snapshot's state: it goes as a
   * checkpoint, the snapshot stays whole.
   */
  cr_assert (s->c[0].gen != first_gen || s->c[0].snapshot[0],
             "the first checkpoint is the snapshot's");
  cr_assert_eq (export_read (pool, "v@first", back, BLOCKS * 4096), 0, "%s",
                cairn_errmsg ());
  fill_pattern (buf, BLOCKS * 4096, 9000);
  cr_assert_arr_eq (back, buf, BLOCKS * 4096, "the snapshot is whole");
  /* The kept checkpoints hold their rounds: the newest is the last. */
  {
    char exp[64];

    snprintf (exp, sizeof exp, "v@#%" PRIu64, s->c[s->n - 1].gen);
    cr_assert_eq (export_read (pool, exp, back, BLOCKS * 4096), 0);
    fill_pattern (buf, BLOCKS * 4096, 9000 + ROUNDS - 1);
    cr_assert_arr_eq (back, buf, BLOCKS * 4096);
  }
  fprintf (stderr, "checkpoint.full_pool: %" PRIu64 " checkpoints dropped "
           "for space in %" PRIu64 " events, %zu kept\n", cs.pressure_dropped,
           cs.pressure_events, s->n);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after filling the pool");
  dev_close (dev);
  free (buf);
  free (back);
  free (s);
}
