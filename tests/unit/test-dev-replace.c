/* Unit tests for replacing a member of a pool of several devices
 * (engine/dev-replace.c, invariants C5-C8 there, and the label generation
 * rule in engine/dev-chunk.c).
 *
 * Members are memory devices.  The tests check that a replace under
 * writes leaves NEW an exact copy (the pool reads right from NEW alone),
 * that a replace of a missing member makes the pool open whole again,
 * that bad requests are refused and change nothing, and, with a printed
 * seed, that a power cut at a random point of a replace (during the copy,
 * a cursor save, the final label writes, or a commit of the pool above)
 * leaves labels that open, the data of the last commit, and a replace
 * that resumes and ends with NEW a full copy.
 *
 * Time: about 4 s of CPU in all (24 cuts; a quarter of them under ASan).
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define MEMBER_SIZE (24u * MIB)
#define VOL_SIZE (4u * MIB)
#define WRITE_LEN (64u * 1024)

static const struct pool_open_opts quiet = { .no_background = true };

/* A mirror of a and b with a pool and volume "v" of random data (the
 * model) on it, closed.
 */
static void
mirror_with_volume (struct cairn_dev *a, struct cairn_dev *b, uint8_t *model,
                    uint64_t seed)
{
  struct dev_chunk_format_opts o = { .profile = DEV_PROFILE_MIRROR };
  struct cairn_dev *m[2] = { a, b }, *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;

  cr_assert_eq (dev_chunk_format (m, 2, &o, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (dev_chunk_open (m, 2, 0, &dev), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_open (dev, &quiet, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "v", VOL_SIZE, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  fill_pattern (model, VOL_SIZE, seed);
  cr_assert_eq (vol_pwrite (v, model, VOL_SIZE, 0, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
}

/* Does volume "v" of the pool on dev read as model? */
static bool
volume_is (struct cairn_dev *dev, const uint8_t *model)
{
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *buf = malloc (VOL_SIZE);
  bool same;

  cr_assert_not_null (buf);
  cr_assert_eq (pool_open (dev, &quiet, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pread (v, buf, VOL_SIZE, 0), 0, "%s", cairn_errmsg ());
  same = memcmp (buf, model, VOL_SIZE) == 0;
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  free (buf);
  return same;
}

/* Open the pool from n devices (flags as dev_chunk_open), or fail. */
static struct cairn_dev *
open_ok (struct cairn_dev *const *m, unsigned n, unsigned flags)
{
  struct cairn_dev *dev;

  cr_assert_eq (dev_chunk_open (m, n, flags, &dev), 0, "%s", cairn_errmsg ());
  return dev;
}

/* Run the replace in progress to its end on the test's thread. */
static void
step_to_end (struct cairn_dev *dev)
{
  bool done = false;

  while (!done)
    cr_assert_eq (dev_chunk_replace_step (dev, 4 * MIB, &done), 0, "%s",
                  cairn_errmsg ());
}

/* NEW alone, opened degraded, holds the whole pool: data, trees and
 * superblocks; fsck finds nothing.
 */
static void
check_new_alone (struct cairn_dev *n, const uint8_t *model)
{
  struct cairn_dev *dev = open_ok (&n, 1, DEV_CHUNK_DEGRADED);

  cr_assert (volume_is (dev, model), "NEW alone reads other data");
  assert_clean (dev);
  dev_close (dev);
}

/* Write a random block of "v" (and the model) and commit it, then copy
 * a step further: the copy races writes before and after its
 * cursor (C5).  0, or the first error.
 */
static int
write_and_step (struct cairn_pool *pool, struct cairn_volume *v,
                uint8_t *model, struct rng *rng, struct cairn_dev *dev,
                uint64_t step, bool *donep)
{
  uint8_t blk[WRITE_LEN];
  uint64_t off = rng_below (rng, VOL_SIZE / WRITE_LEN) * WRITE_LEN;
  int r = 0;

  if (pool) {
    fill_pattern (blk, WRITE_LEN, rng_next (rng));
    memcpy (model + off, blk, WRITE_LEN);
    r = vol_pwrite (v, blk, WRITE_LEN, off, 0);
    if (r == 0)
      r = pool_commit (pool);
  }
  return r < 0 ? r : dev_chunk_replace_step (dev, step, donep);
}

Test (replace, a_member_present_under_writes)
{
  uint64_t seed = test_seed ("replace/a_member_present_under_writes", 28);
  struct cairn_dev *a, *b, *n, *dev, *other, *m2[2];
  struct dev_member_info mi;
  struct dev_replace_status st;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *model = malloc (VOL_SIZE);
  struct rng rng = { seed };
  bool done = false;

  cr_assert_not_null (model);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &a), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &b), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &n), 0);
  mirror_with_volume (a, b, model, seed);
  m2[0] = a;
  m2[1] = b;
  dev = open_ok (m2, 2, 0);
  cr_assert_eq (pool_open (dev, &quiet, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  /* b by n, under writes; OLD is listed as replacing meanwhile. */
  cr_assert_eq (dev_chunk_replace_begin (dev, 1, n, false), 0, "%s",
                cairn_errmsg ());
  dev_chunk_member (dev, 1, &mi);
  cr_assert_eq (mi.state, DEV_MEMBER_REPLACING);
  cr_assert_eq (dev_chunk_replace_begin (dev, 0, n, false), -EBUSY);
  cairn_error_clear ();
  while (!done)
    cr_assert_eq (write_and_step (pool, v, model, &rng, dev, MIB, &done), 0,
                  "%s", cairn_errmsg ());
  dev_chunk_replace_status (dev, &st);
  cr_assert_eq (st.state, DEV_REPLACE_FINISHED);
  dev_chunk_member (dev, 1, &mi);
  cr_assert_eq (mi.state, DEV_MEMBER_ONLINE);
  cr_assert_str_eq (mi.name, n->name);
  /* The replaced member's labels are wiped. */
  cr_assert_eq (dev_chunk_open (&b, 1, DEV_CHUNK_DEGRADED, &other), -EINVAL);
  cairn_error_clear ();
  /* Now n by b, cancelled half-way: b's labels go, n stays. */
  cr_assert_eq (dev_chunk_replace_begin (dev, 1, b, false), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (write_and_step (pool, v, model, &rng, dev, 4 * MIB, &done), 0,
                "%s", cairn_errmsg ());
  cr_assert (!done);
  cr_assert_eq (dev_chunk_replace_cancel (dev), 0, "%s", cairn_errmsg ());
  dev_chunk_replace_status (dev, &st);
  cr_assert_eq (st.state, DEV_REPLACE_CANCELLED);
  cr_assert_eq (dev_chunk_replace_cancel (dev), -ENOENT);
  cairn_error_clear ();
  cr_assert_eq (dev_chunk_open (&b, 1, DEV_CHUNK_DEGRADED, &other), -EINVAL);
  cairn_error_clear ();
  /* And again, to the end, with the thread, while writes go on. */
  cr_assert_eq (dev_chunk_replace_start (dev, 1, b, false), 0, "%s",
                cairn_errmsg ());
  for (unsigned i = 0; i < 16; i++)
    cr_assert_eq (write_and_step (pool, v, model, &rng, dev, 0, &done), 0,
                  "%s", cairn_errmsg ());
  cr_assert_eq (dev_chunk_replace_wait (dev, NULL, NULL), 0);
  dev_chunk_replace_status (dev, &st);
  cr_assert_eq (st.state, DEV_REPLACE_FINISHED, "%s: %s",
                dev_replace_state_name (st.state), st.error);
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
  /* a and b are the pool; n is not a device of it any more. */
  cr_assert_eq (dev_chunk_open (&n, 1, DEV_CHUNK_DEGRADED, &other), -EINVAL);
  cairn_error_clear ();
  m2[0] = b;
  m2[1] = a;
  dev = open_ok (m2, 2, 0);
  cr_assert (volume_is (dev, model));
  assert_clean (dev);
  dev_close (dev);
  check_new_alone (b, model);
  dev_close (a);
  dev_close (b);
  dev_close (n);
  free (model);
}

Test (replace, a_missing_member_and_bad_requests)
{
  uint64_t seed = test_seed ("replace/a_missing_member_and_bad_requests", 7);
  struct cairn_dev *a, *b, *n, *small, *dev, *m3[3];
  struct dev_replace_status st;
  struct dev_chunk_info ci;
  uint8_t *model = malloc (VOL_SIZE);

  cr_assert_not_null (model);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &a), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &b), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &n), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE / 2, &small), 0);
  mirror_with_volume (a, b, model, seed);
  /* b died: a alone opens only degraded, read-only. */
  dev = open_ok (&a, 1, DEV_CHUNK_DEGRADED);
  dev_chunk_info (dev, &ci);
  cr_assert (ci.readonly && ci.missing == 1);
  /* Refused, changing nothing: a member, a too small device, no such
   * index, nothing to cancel or resume.
   */
  cr_assert_eq (dev_chunk_replace_start (dev, 1, a, false), -EINVAL);
  cr_assert_eq (dev_chunk_replace_start (dev, 1, small, false), -ENOSPC);
  cr_assert (strstr (cairn_errmsg (), "takes at least"), "%s",
             cairn_errmsg ());
  cr_assert_eq (dev_chunk_replace_start (dev, 2, n, false), -EINVAL);
  cr_assert_eq (dev_chunk_replace_cancel (dev), -ENOENT);
  cr_assert_eq (dev_chunk_replace_resume (dev), 0);
  cairn_error_clear ();
  dev_chunk_replace_status (dev, &st);
  cr_assert_eq (st.state, DEV_REPLACE_NONE);
  /* The replace. */
  cr_assert_eq (dev_chunk_replace_start (dev, 1, n, false), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (dev_chunk_replace_wait (dev, NULL, NULL), 0);
  dev_chunk_replace_status (dev, &st);
  cr_assert_eq (st.state, DEV_REPLACE_FINISHED, "%s: %s",
                dev_replace_state_name (st.state), st.error);
  cr_assert_eq (st.done, st.total);
  dev_chunk_info (dev, &ci);
  cr_assert_eq (ci.missing, 0);
  dev_close (dev);
  /* Whole again: opens without degraded, writable, from a and n; the
   * dead b, back with its old label, is left out.
   */
  m3[0] = n;
  m3[1] = b;
  m3[2] = a;
  dev = open_ok (m3, 3, 0);
  dev_chunk_info (dev, &ci);
  cr_assert (!ci.readonly && ci.missing == 0);
  cr_assert (volume_is (dev, model));
  assert_clean (dev);
  dev_close (dev);
  check_new_alone (n, model);
  dev_close (a);
  dev_close (b);
  dev_close (n);
  dev_close (small);
  free (model);
}

/* One power-cut round: a mirror of a and b (b missing when `dead`),
 * replacing b by n under commits, cut at the cut_at'th write or flush.
 */
struct round {
  uint64_t seed;
  bool dead;
  uint64_t cut_at;
};

/* Open what the cut left: a, b unless dead, and n when it has a label of
 * the pool (a cut before its first label leaves it a stranger), which
 * *with_n says.
 */
static struct cairn_dev *
reopen_after_cut (struct cairn_dev *a, struct cairn_dev *b,
                  struct cairn_dev *n, bool dead, bool *with_n)
{
  struct cairn_dev *m[3] = { a }, *dev;
  unsigned k = 1;
  int r;

  if (!dead)
    m[k++] = b;
  m[k++] = n;
  r = dev_chunk_open (m, k, dead ? DEV_CHUNK_DEGRADED : 0, &dev);
  *with_n = r == 0;
  if (r == -EINVAL && strstr (cairn_errmsg (), "is not a device of a Cairn")) {
    cairn_error_clear ();
    dev = open_ok (m, k - 1, dead ? DEV_CHUNK_DEGRADED : 0);
  }
  else
    cr_assert_eq (r, 0, "%s", cairn_errmsg ());
  return dev;
}

static void
power_cut_round (const struct round *rd, uint64_t *cuts_in_replace)
{
  struct cairn_dev *a, *b, *n, *pa, *pb, *pn, *dev, *m[2];
  struct dev_replace_status st;
  struct cairn_pool *pool = NULL;
  struct cairn_volume *v = NULL;
  uint8_t *durable = malloc (VOL_SIZE), *next = malloc (VOL_SIZE);
  const uint8_t *want;
  struct rng rng = { rd->seed };
  bool done = false, with_n;
  int r;

  cr_assert (durable && next);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &a), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &b), 0);
  cr_assert_eq (dev_mem_create (MEMBER_SIZE, &n), 0);
  mirror_with_volume (a, b, durable, rd->seed);
  memcpy (next, durable, VOL_SIZE);
  cr_assert_eq (dev_powercut_create (a, rd->seed, &pa), 0);
  cr_assert_eq (dev_powercut_create_shared (b, pa, &pb), 0);
  cr_assert_eq (dev_powercut_create_shared (n, pa, &pn), 0);
  m[0] = pa;
  m[1] = pb;
  dev = open_ok (m, rd->dead ? 1 : 2, rd->dead ? DEV_CHUNK_DEGRADED : 0);
  dev_chunk_replace_set_save (dev, 2 * MIB);
  if (!rd->dead) {
    cr_assert_eq (pool_open (dev, &quiet, &pool), 0, "%s", cairn_errmsg ());
    cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  }
  /* Everything on this thread, so that a seed replays its cut. */
  dev_powercut_arm (pa, rd->cut_at);
  r = dev_chunk_replace_begin (dev, 1, pn, false);
  while (r == 0 && !done) {
    r = write_and_step (pool, v, next, &rng, dev, 512 * 1024, &done);
    if (r == 0)
      memcpy (durable, next, VOL_SIZE);
  }
  *cuts_in_replace += !done;
  if (!dev_powercut_is_cut (pa))
    dev_powercut_cut (pa, true);
  if (v)
    vol_close (v);
  if (pool && pool_close (pool) < 0)
    cairn_error_clear ();
  dev_close (dev);
  cairn_error_clear ();
  dev_close (pa);
  dev_close (pb);
  dev_close (pn);

  /* The labels open; the pool holds the last commit (or the one the cut
   * came in); the replace resumes, or starts again if it never began.
   */
  dev = reopen_after_cut (a, b, n, rd->dead, &with_n);
  want = volume_is (dev, durable) ? durable : next;
  cr_assert (volume_is (dev, want), "seed %" PRIu64 " cut %" PRIu64 ": the "
             "volume lost data", rd->seed, rd->cut_at);
  dev_chunk_replace_status (dev, &st);
  if (st.state == DEV_REPLACE_STOPPED) {
    if (st.source_missing)
      cr_assert_eq (dev_chunk_replace_cancel (dev), -EBUSY);
    cairn_error_clear ();
    step_to_end (dev);
  }
  else if (!with_n) {
    cr_assert_eq (dev_chunk_replace_begin (dev, 1, n, false), 0, "%s",
                  cairn_errmsg ());
    step_to_end (dev);
  }
  dev_chunk_replace_status (dev, &st);
  cr_assert (st.state == DEV_REPLACE_FINISHED || st.state == DEV_REPLACE_NONE,
             "seed %" PRIu64 ": replace %s: %s", rd->seed,
             dev_replace_state_name (st.state), st.error);
  dev_close (dev);
  /* Whole from a and n; n alone holds everything. */
  m[0] = a;
  m[1] = n;
  dev = open_ok (m, 2, 0);
  cr_assert (volume_is (dev, want), "seed %" PRIu64 " cut %" PRIu64 ": the "
             "volume lost data after the replace", rd->seed, rd->cut_at);
  assert_clean (dev);
  dev_close (dev);
  check_new_alone (n, want);
  dev_close (a);
  dev_close (b);
  dev_close (n);
  free (durable);
  free (next);
}

Test (replace, power_cuts_during_a_replace_resume_it)
{
  uint64_t seed = test_seed ("replace/power_cuts_during_a_replace_resume_it",
                             2028);
  unsigned rounds = test_work (24);
  uint64_t in_replace = 0;
  struct rng rng = { seed };

  for (unsigned i = 0; i < rounds; i++) {
    struct round rd = {
      .seed = rng_next (&rng), .dead = rng_below (&rng, 3) == 0,
      .cut_at = 1 + rng_below (&rng, 400),
    };

    power_cut_round (&rd, &in_replace);
  }
  fprintf (stderr, "replace/power_cuts: %" PRIu64 " of %u cuts came before "
           "the replace ended\n", in_replace, rounds);
  cr_assert_gt (in_replace, 0, "no cut came during a replace");
}
