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

#include "catalog-int.h"
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

/* A listing longer than a batch of records comes whole and in order of
 * time; so does one after the clock went back, where time and generation
 * order differ (then each record is looked up).
 */
Test (checkpoint, long_listing_and_a_clock_that_went_back)
{
  int64_t now = 1796640000;
  struct cairn_dev *dev;
  struct cairn_pool *pool = ck_pool (&dev, &now);
  struct ck_seen *s = calloc (1, sizeof *s);
  enum { N = 600 };
  uint64_t first;

  for (uint64_t i = 0; i < N; i++) {
    write_block (pool, "v", i % VBLOCKS, i);
    now += 5;
    cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  }
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, N);
  first = s->c[0].gen;
  for (size_t i = 0; i < s->n; i++) {
    cr_assert_eq (s->c[i].ctime, 1796640005 + 5 * (uint64_t) i);
    cr_assert_eq (s->c[i].gen, first + i, "one commit a checkpoint");
    cr_assert_eq (s->c[i].written, 4096);
  }
  /* Back by 12 s: the newest checkpoint lists between two older ones. */
  write_block (pool, "v", 0, 7);
  now -= 12;
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, N + 1);
  for (size_t i = 1; i < s->n; i++)
    cr_assert_leq (s->c[i - 1].ctime, s->c[i].ctime, "in order of time");
  cr_assert_eq (s->c[N - 3].gen, first + N, "the newest, at %" PRIu64,
                s->c[N - 3].ctime);
  for (size_t i = N - 2; i <= N; i++)
    cr_assert_eq (s->c[i].gen, first + i - 1);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
  free (s);
}

/* Check the pool's commit-interval setting and the period the timer uses. */
static void
assert_interval (struct cairn_pool *pool, uint64_t secs, bool own,
                 unsigned ms, bool server)
{
  struct vol_ckpt_settings st;

  cr_assert_eq (vol_checkpoint_settings (pool, NULL, &st), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (st.commit_interval, secs);
  cr_assert_eq (st.own_interval, own);
  cr_assert_eq (st.commit_interval_ms, ms);
  cr_assert_eq (st.server_interval, server);
}

/* How often the pool commits while volumes change (and so how far apart
 * checkpoints are at most) is the pool's setting: stored in the pool,
 * refused for a volume or out of range, followed by the commit timer, and
 * overridden by a server's own period while that server runs.
 */
Test (checkpoint, commit_interval_is_a_pool_setting)
{
  int64_t now = 1796640000;
  struct cairn_dev *dev;
  struct cairn_pool *pool = ck_pool (&dev, &now);
  struct ck_seen *s = calloc (1, sizeof *s);
  static const char *const bad[] = { "0", "3601", "2h", "5x", "", "-1" };

  assert_interval (pool, 5, false, 5000, false);
  cr_assert_eq (vol_checkpoint_set (pool, "v", "commit-interval", "2s"),
                -EINVAL, "a volume has none of its own");
  cr_assert (strstr (cairn_errmsg (), "pool's setting") != NULL);
  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    cr_assert_eq (vol_checkpoint_set (pool, NULL, "commit-interval", bad[i]),
                  -EINVAL, "'%s'", bad[i]);
    cr_assert (strstr (cairn_errmsg (), "1s to 3600s") != NULL, "%s",
               cairn_errmsg ());
  }
  assert_interval (pool, 5, false, 5000, false);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "commit-interval", "120"), 0,
                "%s", cairn_errmsg ());
  assert_interval (pool, 120, true, 120000, false);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "commit-interval", "1s"), 0);
  assert_interval (pool, 1, true, 1000, false);

  /* The timer commits a write by itself at the pool's period. */
  cr_assert_eq (pool_start_committer (pool, 0), 0, "%s", cairn_errmsg ());
  assert_interval (pool, 1, true, 1000, false);
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 0);
  write_block (pool, "v", 0, 1);
  WAIT_UNTIL ((list_ck (pool, "v", s), s->n > 0));
  cr_assert_eq (s->n, 1, "the timer committed the write");
  pool_stop_committer (pool);

  /* Stored in the pool. */
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  pool = pool_open_clock (dev, &now);
  assert_interval (pool, 1, true, 1000, false);
  /* A server's own period wins while it runs; the setting is kept. */
  cr_assert_eq (pool_start_committer (pool, 250), 0);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "commit-interval", "3s"), 0);
  assert_interval (pool, 3, true, 250, true);
  pool_stop_committer (pool);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "commit-interval", "inherit"),
                0);
  assert_interval (pool, 5, false, 250, true);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
  free (s);
}

/* The free space under which checkpoints go beyond the policy is the
 * pool's setting: refused for a volume or out of range, stored, and
 * followed: raised over what is free, the collector drops every
 * checkpoint that only the policy keeps, oldest first, and no snapshot.
 */
Test (checkpoint, space_threshold_is_a_pool_setting)
{
  int64_t now = 1796640000;
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_clock (dev, &now);
  struct ck_seen *s = calloc (1, sizeof *s);
  struct vol_ckpt_settings st;
  struct vol_ckpt_status cs;
  static const char *const bad[] = { "0", "51", "5x", "", "%", "-1", "1000" };
  uint8_t *buf = malloc (1 << 20);

  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "on"), 0);
  cr_assert_eq (vol_checkpoint_settings (pool, NULL, &st), 0);
  cr_assert (st.space_threshold == 5 && !st.own_threshold);
  cr_assert_eq (vol_create (pool, "v", VSIZE, NULL), 0);
  cr_assert_eq (vol_checkpoint_set (pool, "v", "space-threshold", "9%"),
                -EINVAL);
  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    cr_assert_eq (vol_checkpoint_set (pool, NULL, "space-threshold", bad[i]),
                  -EINVAL, "'%s'", bad[i]);
    cr_assert (strstr (cairn_errmsg (), "from 1% to 50%") != NULL, "%s",
               cairn_errmsg ());
  }
  /* Half the pool's space used by a volume without checkpoints. */
  cr_assert_eq (vol_checkpoint_set (pool, "v", "checkpoints", "on"), 0);
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "checkpoints", "off"), 0);
  cr_assert_eq (vol_create (pool, "fill", 32 << 20, NULL), 0);
  for (unsigned mib = 0; mib < 32; mib++) {
    struct cairn_volume *f;

    fill_pattern (buf, 1 << 20, mib);
    cr_assert_eq (vol_open (pool, "fill", &f), 0);
    cr_assert_eq (vol_pwrite (f, buf, 1 << 20, (uint64_t) mib << 20, 0), 0,
                  "%s", cairn_errmsg ());
    vol_close (f);
  }
  /* Six checkpoints of v, all within the policy's hour; one of them a
   * snapshot too (taken in the generation of its write).
   */
  for (uint64_t i = 0; i < 6; i++) {
    write_block (pool, "v", i, 500 + i);
    now += 10;
    if (i == 1)
      cr_assert_eq (snap_create (pool, "v", "kept"), 0);
    else
      cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (vol_checkpoint_collect (pool), 0, "%s", cairn_errmsg ());
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 6, "5%% free is far: the policy keeps all six");
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "space-threshold", "50"), 0,
                "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  pool = pool_open_clock (dev, &now);
  cr_assert_eq (vol_checkpoint_settings (pool, NULL, &st), 0);
  cr_assert (st.space_threshold == 50 && st.own_threshold, "stored");
  cr_assert_eq (vol_checkpoint_collect (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_checkpoint_status (pool, &cs), 0);
  cr_assert_eq (cs.pressure_dropped, 5, "all but the snapshot's: %" PRIu64,
                cs.pressure_dropped);
  list_ck (pool, "v", s);
  cr_assert (s->n == 1 && strcmp (s->c[0].snapshot, "kept") == 0,
             "%zu left", s->n);
  list_ck (pool, "fill", s);
  cr_assert_eq (s->n, 0, "fill takes none");
  cr_assert_eq (read_all (pool, "v@kept", buf), 0, "the snapshot stays");
  /* Back to the default: a new checkpoint stays. */
  cr_assert_eq (vol_checkpoint_set (pool, NULL, "space-threshold", "inherit"),
                0);
  write_block (pool, "v", 7, 7);
  now += 10;
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (vol_checkpoint_collect (pool), 0);
  list_ck (pool, "v", s);
  cr_assert_eq (s->n, 2);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after giving space back");
  dev_close (dev);
  free (buf);
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

/* The model's state at a generation a checkpoint was seen at. */
struct mstate {
  uint64_t gen;
  uint8_t *data;
};

/* List v's checkpoints into s; a new one is the newest, and holds the
 * model's state cur now: add it to states.
 */
static void
see_states (struct cairn_pool *pool, struct ck_seen *s, const uint8_t *cur,
            struct mstate *states, size_t *np)
{
  list_ck (pool, "v", s);
  for (size_t i = 0; i < s->n; i++)
    if (*np == 0 || s->c[i].gen > states[*np - 1].gen) {
      cr_assert_lt (*np, 4096);
      states[*np].gen = s->c[i].gen;
      states[*np].data = malloc (VSIZE);
      memcpy (states[*np].data, cur, VSIZE);
      ++*np;
    }
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
  struct mstate *states = calloc (4096, sizeof *states);
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
    see_states (pool, s, cur, states, &nstates);
    /* What dropping one would free is the same listed alone (a window
     * of one checkpoint) as in the whole listing, and is what RC-3 counts
     * for its pin alone: the deadlist's blocks born after the pin below
     * it and dead by the pin above it.
     */
    if (s->n) {
      struct ck_seen *one = calloc (1, sizeof *one);
      size_t i = rng_below (&rng, s->n);

      cr_assert_eq (vol_checkpoint_list (pool, "v", s->c[i].ctime,
                                         s->c[i].ctime, collect_ck, one), 0);
      for (size_t j = 0; j < one->n; j++) {
        struct catalog *cat;
        struct vol_info vi;
        uint64_t g = one->c[j].gen, t, below, above, blocks;

        if (g != s->c[i].gen)
          continue;
        cr_assert_eq (one->c[j].unique, s->c[i].unique, "seed %" PRIu64
                      " step %u: checkpoint %" PRIu64 " frees %" PRIu64
                      " alone, %" PRIu64 " in the whole list", seed, step,
                      g, one->c[j].unique, s->c[i].unique);
        if (one->c[j].snapshot[0] || one->c[j].clones ||
            rng_below (&rng, 3) != 0)
          break;                /* kept by more than itself, or not now */
        /* The deadlist entries not yet in the tree go there at a commit
         * (which may take a checkpoint above this one: listed again).
         * Only at one step in three, so that writes also stay uncommitted
         * across steps.
         */
        cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
        see_states (pool, s, cur, states, &nstates);
        t = one->c[j].ctime;
        one->n = 0;
        cr_assert_eq (vol_checkpoint_list (pool, "v", t, t, collect_ck, one),
                      0);
        for (j = 0; j < one->n && one->c[j].gen != g; j++)
          ;
        cr_assert_lt (j, one->n, "checkpoint %" PRIu64 " still listed", g);
        cr_assert_eq (catalog_get (pool, &cat), 0);
        cr_assert_eq (vol_stat (pool, "v", &vi), 0);
        cr_assert_eq (reclaim_pin_neighbours (cat, vi.id, g, &below, &above),
                      0);
        cr_assert_eq (reclaim_range_blocks (cat, vi.id, g, above, below, g,
                                            &blocks), 0);
        cr_assert_eq (one->c[j].unique, blocks * 4096, "seed %" PRIu64
                      " step %u: checkpoint %" PRIu64 " lists %" PRIu64
                      " bytes to free, its pin alone holds %" PRIu64, seed,
                      step, g, one->c[j].unique, blocks * 4096);
        break;
      }
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
