/* Unit tests for rolling a volume back (engine/catalog-rollback.c, design
 * note VR-1..VR-5): the volume keeps its identity and its snapshots up to
 * the one rolled back to, the later history moves to the kept name with
 * its snapshots and clones, diffs go on across the two, every state reads
 * what it held, the accounting stays exact (fsck's audit, unique space),
 * and deleting everything gives every block back.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define NBLK 256u                     /* blocks of the test volume */

/* What each block of a state holds: 0 for zeros, else its pattern tag. */
struct image {
  uint64_t tag[NBLK];
};

/* Write blocks [first, first + n) of export name with tag t, in image. */
static void
put (struct cairn_pool *pool, const char *name, struct image *im,
     unsigned first, unsigned n, uint64_t t)
{
  struct cairn_volume *v;
  uint8_t buf[4096];

  cr_assert_eq (vol_open (pool, name, &v), 0, "open %s: %s", name,
                cairn_errmsg ());
  for (unsigned b = first; b < first + n; b++) {
    im->tag[b] = t << 16 | b;
    fill_pattern (buf, sizeof buf, im->tag[b]);
    cr_assert_eq (vol_pwrite (v, buf, sizeof buf, (uint64_t) b * 4096, 0), 0,
                  "%s", cairn_errmsg ());
  }
  vol_close (v);
}

/* Export name must read as im, block by block. */
static void
check (struct cairn_pool *pool, const char *name, const struct image *im)
{
  struct cairn_volume *v;
  uint8_t buf[4096], want[4096];

  cr_assert_eq (vol_open (pool, name, &v), 0, "open %s: %s", name,
                cairn_errmsg ());
  for (unsigned b = 0; b < NBLK; b++) {
    if (im->tag[b])
      fill_pattern (want, sizeof want, im->tag[b]);
    else
      memset (want, 0, sizeof want);
    cr_assert_eq (vol_pread (v, buf, sizeof buf, (uint64_t) b * 4096), 0,
                  "%s", cairn_errmsg ());
    cr_assert_arr_eq (buf, want, sizeof buf, "%s: block %u differs", name, b);
  }
  vol_close (v);
}

/* The diff runs of a diff, as text "D0+4 H8+2 ..." (in blocks). */
static int
diff_text (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  char *s = opaque;
  size_t l = strlen (s);

  snprintf (s + l, 512 - l, "%s%c%" PRIu64 "+%" PRIu64, l ? " " : "",
            type == VOL_DIFF_DATA ? 'D' : 'H', off / 4096, len / 4096);
  return 0;
}

/* The diff between two states, as diff_text makes it. */
static void
assert_diff (struct cairn_pool *pool, const char *from, const char *to,
             const char *want)
{
  char got[512] = "";

  cr_assert_eq (vol_diff (pool, from, to, diff_text, got), 0, "diff %s %s: %s",
                from, to, cairn_errmsg ());
  cr_assert_str_eq (got, want, "diff %s %s", from, to);
}

/* A state's description. */
static struct vol_info
stat_ok (struct cairn_pool *pool, const char *name)
{
  struct vol_info vi;

  cr_assert_eq (vol_stat (pool, name, &vi), 0, "stat %s: %s", name,
                cairn_errmsg ());
  return vi;
}

/* The space unique to a snapshot. */
static uint64_t
unique_of (struct cairn_pool *pool, const char *vol, const char *snap)
{
  struct snap_space sp;

  cr_assert_eq (snap_space (pool, vol, snap, &sp), 0, "%s@%s: %s", vol, snap,
                cairn_errmsg ());
  return sp.unique;
}

/* Everything on pool was deleted: once reclaimed, every block is free
 * again (empty: what the empty pool used) and fsck is clean.  Closes both.
 */
static void
assert_all_freed (struct cairn_dev *dev, struct cairn_pool *pool,
                  uint64_t empty)
{
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_blocks_in_use (pool), empty,
                "deleting everything frees every block");
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after deleting everything");
  dev_close (dev);
}

/* The history of the tests: v with snapshots s1..s4 and a live state
 * after s4, a clone c1 of s1 and c3 of s3.
 */
struct history {
  struct image s1, s2, s3, s4, live, c1, c3;
  struct vol_info i1, i2, i3, i4, v;
  uint64_t u1, u3, u4;              /* unique space of s1, s3, s4 */
};

/* Make the history on pool. */
static void
make_history (struct cairn_pool *pool, struct history *h)
{
  struct image im = { { 0 } };

  cr_assert_eq (vol_create (pool, "v", NBLK * 4096, NULL), 0, "%s",
                cairn_errmsg ());
  put (pool, "v", &im, 0, 16, 1);
  cr_assert_eq (snap_create (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
  h->s1 = im;
  put (pool, "v", &im, 8, 16, 2);               /* over s1's 8..15 */
  cr_assert_eq (snap_create (pool, "v", "s2"), 0, "%s", cairn_errmsg ());
  h->s2 = im;
  put (pool, "v", &im, 16, 16, 3);              /* over s2's 16..23 */
  cr_assert_eq (snap_create (pool, "v", "s3"), 0, "%s", cairn_errmsg ());
  h->s3 = im;
  put (pool, "v", &im, 0, 4, 4);                /* over s1's 0..3 */
  put (pool, "v", &im, 24, 4, 4);               /* over s3's 24..27 */
  cr_assert_eq (snap_create (pool, "v", "s4"), 0, "%s", cairn_errmsg ());
  h->s4 = im;
  put (pool, "v", &im, 40, 8, 5);
  put (pool, "v", &im, 28, 2, 5);               /* over s3's 28..29 */
  put (pool, "v", &im, 2, 2, 5);                /* over s4's 2..3 */
  h->live = im;
  cr_assert_eq (vol_clone (pool, "v@s1", "c1"), 0, "%s", cairn_errmsg ());
  h->c1 = h->s1;
  put (pool, "c1", &h->c1, 100, 2, 6);
  cr_assert_eq (vol_clone (pool, "v@s3", "c3"), 0, "%s", cairn_errmsg ());
  h->c3 = h->s3;
  put (pool, "c3", &h->c3, 0, 2, 7);
  h->i1 = stat_ok (pool, "v@s1");
  h->i2 = stat_ok (pool, "v@s2");
  h->i3 = stat_ok (pool, "v@s3");
  h->i4 = stat_ok (pool, "v@s4");
  h->v = stat_ok (pool, "v");
  h->u1 = unique_of (pool, "v", "s1");
  h->u3 = unique_of (pool, "v", "s3");
  h->u4 = unique_of (pool, "v", "s4");
}

/* After `rollback v@s2 keep`: every state, its place and its figures. */
static void
check_rolled_back (struct cairn_pool *pool, const struct history *h)
{
  struct vol_info v = stat_ok (pool, "v"), k = stat_ok (pool, "keep");
  struct vol_info c3 = stat_ok (pool, "c3"), c1 = stat_ok (pool, "c1");
  struct vol_info vi;

  /* v is the same volume, as s2 left it, with s1 and s2. */
  cr_assert_eq (v.id, h->v.id, "the volume keeps its id");
  cr_assert_eq (v.referenced, h->i2.referenced);
  cr_assert_eq (v.size, h->i2.size);
  cr_assert_eq (stat_ok (pool, "v@s1").guid, h->i1.guid);
  cr_assert_eq (stat_ok (pool, "v@s2").guid, h->i2.guid);
  cr_assert_eq (vol_stat (pool, "v@s3", &vi), -ENOENT, "s3 moved");
  cr_assert_eq (vol_stat (pool, "v@s4", &vi), -ENOENT, "s4 moved");
  check (pool, "v", &h->s2);
  check (pool, "v@s1", &h->s1);
  check (pool, "v@s2", &h->s2);
  /* keep: the later history, a clone of v@s2. */
  cr_assert_neq (k.id, v.id);
  cr_assert_eq (k.origin_id, v.id);
  cr_assert_eq (k.origin_gen, h->i2.gen);
  cr_assert_eq (k.referenced, h->v.referenced);
  vi = stat_ok (pool, "keep@s3");
  cr_assert_eq (vi.guid, h->i3.guid, "s3 is the same snapshot");
  cr_assert_eq (vi.gen, h->i3.gen);
  cr_assert_eq (stat_ok (pool, "keep@s4").guid, h->i4.guid);
  check (pool, "keep", &h->live);
  check (pool, "keep@s3", &h->s3);
  check (pool, "keep@s4", &h->s4);
  /* Clones follow the state they started from. */
  cr_assert_eq (c3.origin_id, k.id, "c3 starts from keep@s3 now");
  cr_assert_eq (c1.origin_id, v.id, "c1 still starts from v@s1");
  check (pool, "c3", &h->c3);
  check (pool, "c1", &h->c1);
  /* Unique space: s1, s3, s4 hold what they held; s2 is pinned by keep
   * as well now, so deleting it frees nothing.
   */
  cr_assert_eq (unique_of (pool, "v", "s1"), h->u1);
  cr_assert_eq (unique_of (pool, "keep", "s3"), h->u3);
  cr_assert_eq (unique_of (pool, "keep", "s4"), h->u4);
  cr_assert_eq (unique_of (pool, "v", "s2"), 0);
  /* Diffs across the two, by birth: what came after s2 (and s1). */
  assert_diff (pool, "v@s2", "keep", "D0+4 D16+16 D40+8");
  assert_diff (pool, "v@s2", "keep@s3", "D16+16");
  assert_diff (pool, "v@s1", "keep@s4", "D0+4 D8+24");
  assert_diff (pool, "v@s1", "c3", "D0+2 D8+24");
  assert_diff (pool, "v@s2", "v", "");
}

/* Roll back to a middle snapshot: the volume keeps what came before,
 * the kept name gets what came after (VR-2..VR-5); fsck is clean and the
 * figures hold across a reopen.
 */
Test (rollback, keeps_earlier_snapshots)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  uint64_t empty = empty_pool_blocks (dev, &pool);
  struct history h;
  struct image im;
  struct vol_info vi;

  make_history (pool, &h);
  cr_assert_eq (vol_set_prop (pool, "v", "org:owner", "alice"), 0);
  cr_assert_eq (vol_set_quota (pool, "v", 8 << 20), 0);
  cr_assert_eq (vol_rollback (pool, "v", "s2", "keep"), 0, "%s",
                cairn_errmsg ());
  check_rolled_back (pool, &h);
  /* Both keep the settings. */
  cr_assert_eq (stat_ok (pool, "keep").quota, 8 << 20);
  cr_assert_eq (stat_ok (pool, "v").quota, 8 << 20);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after the rollback");
  pool = pool_open_ok (dev);
  check_rolled_back (pool, &h);

  /* The volume goes on: writes, a snapshot, a diff from s2. */
  im = h.s2;
  put (pool, "v", &im, 60, 3, 8);
  put (pool, "v", &im, 8, 2, 8);                /* over s2's 8..9 */
  cr_assert_eq (snap_create (pool, "v", "s5"), 0, "%s", cairn_errmsg ());
  assert_diff (pool, "v@s2", "v@s5", "D8+2 D60+3");
  check (pool, "v@s5", &im);
  check (pool, "keep@s3", &h.s3);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after writing the rolled-back volume");
  pool = pool_open_ok (dev);

  /* Deleting the later history: c3 still needs keep@s3 (keep is hidden
   * until c3 goes), v@s2 is no longer pinned by it.
   */
  cr_assert_eq (vol_delete (pool, "keep", 0), -EBUSY);
  cr_assert (strstr (cairn_errmsg (), "volume 'keep' has 2 snapshot"), "%s",
             cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "keep", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_stat (pool, "keep", &vi), -ENOENT);
  check (pool, "c3", &h.c3);
  check (pool, "v@s2", &h.s2);
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after deleting the kept history");
  pool = pool_open_ok (dev);
  check (pool, "c3", &h.c3);
  cr_assert_eq (vol_delete (pool, "c3", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "c1", 0), 0, "%s", cairn_errmsg ());
  check (pool, "v@s5", &im);
  check (pool, "v@s1", &h.s1);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  assert_all_freed (dev, pool, empty);
}

/* Rolling back to the newest snapshot moves no snapshot: keep has the
 * live state only; to the oldest, every later one moves.  Deleting the
 * rolled-back volume first leaves it hidden until keep goes.
 */
Test (rollback, newest_and_oldest)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  uint64_t empty = empty_pool_blocks (dev, &pool);
  struct history h;
  struct vol_info vi;

  make_history (pool, &h);
  cr_assert_eq (vol_rollback (pool, "v", "s4", "k4"), 0, "%s", cairn_errmsg ());
  check (pool, "v", &h.s4);
  check (pool, "k4", &h.live);
  cr_assert_eq (vol_stat (pool, "k4@s4", &vi), -ENOENT);
  check (pool, "v@s4", &h.s4);
  assert_diff (pool, "v@s4", "k4", "D2+2 D28+2 D40+8");
  cr_assert_eq (vol_rollback (pool, "v", "s1", "k1"), 0, "%s", cairn_errmsg ());
  check (pool, "v", &h.s1);
  check (pool, "k1@s2", &h.s2);
  check (pool, "k1@s4", &h.s4);
  check (pool, "k1", &h.s4);
  check (pool, "k4", &h.live);
  cr_assert_eq (stat_ok (pool, "k4").origin_id, stat_ok (pool, "k1").id,
                "k4 starts from k1@s4 now");
  check (pool, "c3", &h.c3);
  cr_assert_eq (stat_ok (pool, "c3").origin_id, stat_ok (pool, "k1").id);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after two rollbacks");
  pool = pool_open_ok (dev);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  check (pool, "k1@s2", &h.s2);
  check (pool, "c1", &h.c1);
  cr_assert_eq (vol_delete (pool, "k1", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  check (pool, "k4", &h.live);
  check (pool, "c3", &h.c3);
  cr_assert_eq (vol_delete (pool, "k4", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "c3", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "c1", 0), 0, "%s", cairn_errmsg ());
  assert_all_freed (dev, pool, empty);
}

/* Refusals change nothing (VR-1): a later state open, a receive into the
 * volume; a diff between unrelated states says why.  Space of a deleted
 * later snapshot still coming back is waited for.
 */
Test (rollback, refusals)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct pool_open_opts o = { .no_background = true };
  struct cairn_pool *pool;
  struct cairn_volume *h3;
  struct vol_reclaim_info ri;
  struct history h;
  char got[512] = "";

  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  make_history (pool, &h);
  cr_assert_eq (vol_open (pool, "v@s3", &h3), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_rollback (pool, "v", "s2", "keep"), -EBUSY);
  cr_assert (strstr (cairn_errmsg (), "volume 'v' is open by 1 client:"),
             "%s", cairn_errmsg ());
  vol_close (h3);
  cr_assert_eq (vol_partial_create (pool, "v", "v@s2", NBLK * 4096, "tok",
                                    VOL_RECV_ROLLBACK), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_rollback (pool, "v", "s2", "keep"), -EBUSY);
  cr_assert (strstr (cairn_errmsg (), "a receive into 'v' is in progress or "
                     "was interrupted: let it finish, or abort it"), "%s",
             cairn_errmsg ());
  cr_assert_eq (vol_partial_abort (pool, "v"), 0, "%s", cairn_errmsg ());
  check (pool, "v", &h.live);
  check (pool, "v@s4", &h.s4);
  cr_assert_eq (vol_diff (pool, "c1@s1", "c3", diff_text, got), -ENOENT);
  cr_assert_eq (vol_diff (pool, "v@s3", "c1", diff_text, got), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "'v@s3' and 'c1' are not states of one "
                     "volume, and 'c1' does not start from 'v@s3'"), "%s",
             cairn_errmsg ());
  /* A snapshot after s2 deleted: its held data comes back a step at a
   * time; the rollback waits for it.
   */
  vol_reclaim_set_budget (pool, 1);
  cr_assert_eq (snap_delete (pool, "v", "s4"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0, "%s", cairn_errmsg ());
  cr_assert_gt (ri.ranges, 0, "a free record is left for the background");
  cr_assert_eq (vol_rollback (pool, "v", "s2", "keep"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0, "%s", cairn_errmsg ());
  cr_assert_eq (ri.ranges, 0);
  check (pool, "v", &h.s2);
  check (pool, "keep@s3", &h.s3);
  check (pool, "keep", &h.live);
  check (pool, "c3", &h.c3);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "after a rollback that waited for a reclaim");
  dev_close (dev);
}
