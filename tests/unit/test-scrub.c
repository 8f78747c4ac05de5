/* Unit tests for the online scrub (engine/scrub.c).
 *
 * Members are memory devices behind fault devices, whose bit-flip mode
 * (dev_fault_flip) rots chosen copies.  The tests check, with a printed
 * seed, that on a mirror pool bits flipped in random copies of random
 * blocks and nodes (never every copy of one) are all read back right,
 * that a scrub run while a writer changes another volume heals every
 * damaged copy that reads left (SC-1, SC-2), that the members' CKSUM and
 * REPAIRED counters and the scrub's own per-device counts equal what was
 * injected, and that fsck --scrub finds nothing afterwards; that on a pool
 * of one copy the same rot is unrepairable and named by state and byte
 * range; that pause, a restart in the middle, resume and cancel keep the
 * cursor and the counts (SC-3: a pass resumed after a restart counts every
 * block once), that --since-last reads only what was born since the last
 * complete pass; and the errors (a second start, resume or pause with
 * nothing to act on, a degraded read-only pool).
 *
 * Time: about 3 s (6 s under ASan).
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include <criterion/criterion.h>

#include "scrub.h"
#include "sha256.h"
#include "volume-int.h"
#include "test-pool.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define BLK 4096u
#define VOL_A (4u * MIB)
#define VOL_B (2u * MIB)
#define MEMBERS 2u

/* A pool's members: memory devices, each behind a fault device. */
struct members {
  unsigned n;
  struct cairn_dev *mem[MEMBERS], *fault[MEMBERS];
};

/* The volumes' contents: a, its snapshot s1, b. */
struct model {
  uint8_t *a, *s1, *b;
};

static void
members_make (struct members *m, unsigned n, enum dev_profile p)
{
  struct dev_chunk_format_opts o = { .profile = p };

  m->n = n;
  for (unsigned i = 0; i < n; i++) {
    cr_assert_eq (dev_mem_create (32 * MIB, &m->mem[i]), 0);
    cr_assert_eq (dev_fault_create (m->mem[i], &m->fault[i]), 0);
  }
  cr_assert_eq (dev_chunk_format (m->fault, n, &o, NULL), 0, "%s",
                cairn_errmsg ());
}

static struct cairn_dev *
members_open (struct members *m, unsigned n, unsigned flags)
{
  struct cairn_dev *dev;

  cr_assert_eq (dev_chunk_open (m->fault, n, flags, &dev), 0, "%s",
                cairn_errmsg ());
  return dev;
}

static void
members_close (struct members *m)
{
  for (unsigned i = 0; i < m->n; i++) {
    dev_close (m->fault[i]);
    dev_close (m->mem[i]);
  }
}

static void
write_ok (struct cairn_pool *pool, const char *name, const uint8_t *buf,
          size_t len, uint64_t off)
{
  struct cairn_volume *v;

  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, buf + off, (uint32_t) len, off, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
}

/* Volume a (random), its snapshot s1, then 1 MiB of a overwritten; volume
 * b; committed.
 */
static void
populate (struct cairn_pool *pool, struct model *md, uint64_t seed)
{
  md->a = malloc (VOL_A);
  md->s1 = malloc (VOL_A);
  md->b = malloc (VOL_B);
  cr_assert (md->a && md->s1 && md->b);
  fill_pattern (md->a, VOL_A, seed);
  fill_pattern (md->b, VOL_B, seed + 1);
  cr_assert_eq (vol_create (pool, "a", VOL_A, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "b", VOL_B, NULL), 0, "%s", cairn_errmsg ());
  write_ok (pool, "a", md->a, VOL_A, 0);
  write_ok (pool, "b", md->b, VOL_B, 0);
  cr_assert_eq (snap_create (pool, "a", "s1"), 0, "%s", cairn_errmsg ());
  memcpy (md->s1, md->a, VOL_A);
  fill_pattern (md->a + MIB, MIB, seed + 2);
  write_ok (pool, "a", md->a, MIB, MIB);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
}

static void
model_free (struct model *md)
{
  free (md->a);
  free (md->s1);
  free (md->b);
}

/* Every byte of an export is what the model says. */
static void
check_export (struct cairn_pool *pool, const char *name, const uint8_t *want,
              size_t len, uint64_t seed)
{
  struct cairn_volume *v;
  uint8_t *buf = malloc (MIB);

  cr_assert (buf);
  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  for (size_t off = 0; off < len; off += MIB) {
    cr_assert_eq (vol_pread (v, buf, MIB, off), 0, "seed %" PRIu64
                  ": reading %s at %zu: %s", seed, name, off, cairn_errmsg ());
    cr_assert (memcmp (buf, want + off, MIB) == 0, "seed %" PRIu64
               ": %s at %zu reads other data", seed, name, off);
  }
  vol_close (v);
  free (buf);
}

/* The pool address of block lbn of an export. */
static uint64_t
block_addr (struct cairn_pool *pool, const char *name, uint64_t lbn)
{
  struct map_vec mv = { NULL, 0, 0 };
  struct cairn_volume *v;
  uint64_t addr;

  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (map_range (v, lbn, 1, &mv, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (mv.n, 1);
  addr = mv.m[0].addr * BLOCK_SIZE;
  map_vec_free (&mv);
  vol_close (v);
  return addr;
}

/* The pool address of the root node of an export's tree. */
static uint64_t
root_addr (struct cairn_pool *pool, const char *name)
{
  struct btree_root root;
  struct cairn_volume *v;

  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  btree_get_root (vol_tree (v), &root);
  vol_close (v);
  return root.bp.addr;
}

/* Flip a random bit of copy k of [off, off + len) through the fault device
 * of the member holding it; that member.
 */
static unsigned
flip (struct members *m, struct cairn_dev *dev, struct rng *r, uint64_t off,
      uint64_t len, unsigned k)
{
  uint64_t at = off + rng_below (r, len), phys, run;
  unsigned member = 0;

  if (dev_is_chunked (dev))
    cr_assert_eq (dev_chunk_locate (dev, at, k, &member, &phys, &run), 0);
  else
    phys = at;
  cr_assert_eq (dev_fault_flip (m->fault[member], phys,
                                (unsigned) rng_below (r, 8)), 0, "%s",
                cairn_errmsg ());
  return member;
}

static struct scrub_status *
status (struct cairn_pool *pool)
{
  static struct scrub_status st;

  cr_assert_eq (scrub_status (pool, &st), 0, "%s", cairn_errmsg ());
  return &st;
}

/* Start a pass and wait for its end. */
static struct scrub_status *
scrub_full (struct cairn_pool *pool, bool since_last)
{
  struct scrub_opts o = { .since_last = since_last };

  cr_assert_eq (scrub_start (pool, &o), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_wait (pool, NULL, NULL), 0);
  cr_assert_eq (status (pool)->state, SCRUB_FINISHED);
  return status (pool);
}

/* A writer that rewrites volume b while the scrub runs. */
struct writer {
  struct cairn_pool *pool;
  uint8_t *b;
  uint64_t seed;
  bool stop;
  unsigned rounds;
};

static void *
writer_thread (void *arg)
{
  struct writer *w = arg;
  struct cairn_volume *v;
  struct rng r = { w->seed };

  cr_assert_eq (vol_open (w->pool, "b", &v), 0);
  while (!__atomic_load_n (&w->stop, __ATOMIC_ACQUIRE) || w->rounds < 8) {
    uint64_t off = rng_below (&r, VOL_B / BLK) * BLK;

    fill_pattern (w->b + off, BLK, rng_next (&r));
    cr_assert_eq (vol_pwrite (v, w->b + off, BLK, off, 0), 0, "%s",
                  cairn_errmsg ());
    if (++w->rounds % 16 == 0)
      cr_assert_eq (pool_commit (w->pool), 0, "%s", cairn_errmsg ());
  }
  vol_close (v);
  return NULL;
}

Test (scrub, bit_flips_on_a_mirror_are_healed_and_counted)
{
  uint64_t seed = test_seed ("scrub.bit_flips", 2807);
  struct rng rng = { seed };
  uint64_t want[MEMBERS] = { 0 }, nflips = 0, seen = 0;
  struct writer w = { .seed = seed + 9 };
  struct dev_member_info mi;
  struct scrub_status *st;
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct problems probs;
  struct fsck_report rep;
  struct members m;
  struct model md;
  pthread_t t;

  members_make (&m, 2, DEV_PROFILE_MIRROR);
  dev = members_open (&m, 2, 0);
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool = pool_open_ok (dev);
  populate (pool, &md, seed);

  /* One copy each of about one block in four of a and of s1 (shared
   * blocks once), and of s1's root node.
   */
  for (uint64_t lbn = 0; lbn < VOL_A / BLK; lbn++)
    for (int snap = 0; snap < 2; snap++) {
      bool shared = lbn < MIB / BLK || lbn >= 2 * MIB / BLK;
      uint64_t addr;
      unsigned k;

      if ((snap && shared) || rng_below (&rng, 4) != 0)
        continue;
      addr = block_addr (pool, snap ? "a@s1" : "a", lbn);
      k = (unsigned) rng_below (&rng, 2);
      want[flip (&m, dev, &rng, addr, BLK, k)]++;
      nflips++;
    }
  want[flip (&m, dev, &rng, root_addr (pool, "a@s1"), 16384,
             (unsigned) rng_below (&rng, 2))]++;
  nflips++;
  cr_assert_gt (nflips, 100, "seed %" PRIu64, seed);

  /* Reads of a return the right data (and heal the first copies they
   * meet); s1 is left to the scrub.
   */
  check_export (pool, "a", md.a, VOL_A, seed);

  /* The scrub, with b written meanwhile. */
  w.pool = pool;
  w.b = md.b;
  cr_assert_eq (pthread_create (&t, NULL, writer_thread, &w), 0);
  st = scrub_full (pool, false);
  __atomic_store_n (&w.stop, true, __ATOMIC_RELEASE);
  pthread_join (t, NULL);
  cr_assert_eq (st->lost, 0, "seed %" PRIu64 ": %" PRIu64 " unrepairable",
                seed, st->lost);
  cr_assert_eq (st->bad_copies, st->repaired, "seed %" PRIu64, seed);
  cr_assert_eq (st->nmembers, 2);
  for (unsigned i = 0; i < 2; i++) {
    dev_chunk_member (dev, i, &mi);
    cr_assert_eq (mi.cksum_errors, want[i], "seed %" PRIu64 ": device %u "
                  "counted %" PRIu64 " bad copies, %" PRIu64 " were injected",
                  seed, i, mi.cksum_errors, want[i]);
    cr_assert_eq (mi.repaired, want[i], "seed %" PRIu64 ": device %u "
                  "repaired %" PRIu64 " of %" PRIu64, seed, i, mi.repaired,
                  want[i]);
    cr_assert_eq (mi.read_errors + mi.write_errors, 0);
    cr_assert_leq (st->member_bad[i], want[i]);
    cr_assert_eq (st->member_bad[i], st->member_repaired[i]);
    seen += st->member_bad[i];
  }
  cr_assert_eq (seen, st->bad_copies);
  cr_assert_gt (st->bad_copies, 0, "seed %" PRIu64 ": the scrub found what "
                "the reads left? none", seed);
  cr_assert_eq (dev_fault_flips (m.fault[0]) + dev_fault_flips (m.fault[1]),
                nflips);
  /* Everything reads right, and a second pass finds nothing. */
  check_export (pool, "a", md.a, VOL_A, seed);
  check_export (pool, "a@s1", md.s1, VOL_A, seed);
  check_export (pool, "b", md.b, VOL_B, seed);
  st = scrub_full (pool, false);
  cr_assert_eq (st->bad_copies, 0, "seed %" PRIu64, seed);
  cr_assert_gt (st->blocks, (VOL_A + MIB + VOL_B) / BLK);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());

  /* fsck --scrub reads every copy of everything: clean. */
  {
    struct fsck_opts fo = { .problem = note_problem, .opaque = &probs,
                            .scrub = true };

    memset (&probs, 0, sizeof probs);
    cr_assert_eq (fsck_pool (dev, &fo, &rep), 0);
    cr_assert_eq (rep.errors, 0, "seed %" PRIu64 ": %s", seed, probs.text);
    cr_assert_eq (rep.scrub.bad_copies, 0, "seed %" PRIu64, seed);
  }
  dev_close (dev);
  members_close (&m);
  model_free (&md);
}

Test (scrub, one_copy_damage_is_named_unrepairable)
{
  uint64_t seed = test_seed ("scrub.unrepairable", 2808);
  struct rng rng = { seed };
  struct scrub_status *st;
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct members m;
  struct model md;
  uint64_t lbn_s1 = MIB / BLK + rng_below (&rng, MIB / BLK);
  uint64_t lbn_a = 2 * MIB / BLK + rng_below (&rng, MIB / BLK);
  bool found_s1 = false, found_a = false;

  m.n = 1;
  cr_assert_eq (dev_mem_create (32 * MIB, &m.mem[0]), 0);
  cr_assert_eq (dev_fault_create (m.mem[0], &m.fault[0]), 0);
  dev = m.fault[0];
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool = pool_open_ok (dev);
  populate (pool, &md, seed);
  /* A block only s1 has (overwritten in a), and one a and s1 share: the
   * pass names the shared one once, by the first state that holds it.
   */
  flip (&m, dev, &rng, block_addr (pool, "a@s1", lbn_s1), BLK, 0);
  flip (&m, dev, &rng, block_addr (pool, "a", lbn_a), BLK, 0);
  st = scrub_full (pool, false);
  cr_assert_eq (st->lost, 2, "seed %" PRIu64 ": %" PRIu64 " lost", seed,
                st->lost);
  cr_assert_eq (st->bad_copies, 2);
  cr_assert_eq (st->repaired, 0);
  cr_assert_eq (st->ndamage, 2);
  for (size_t i = 0; i < st->ndamage; i++) {
    const struct scrub_damage *d = &st->damage[i];

    cr_assert (!d->metadata);
    cr_assert_eq (d->length, BLK);
    found_s1 |= strcmp (d->state, "a@s1") == 0 && d->offset == lbn_s1 * BLK;
    /* Shared with s1, born before it: found in s1, the older state. */
    found_a |= strcmp (d->state, "a@s1") == 0 && d->offset == lbn_a * BLK;
  }
  cr_assert (found_s1 && found_a, "seed %" PRIu64 ": damage named %s +%"
             PRIu64 ", %s +%" PRIu64, seed, st->damage[0].state,
             st->damage[0].offset, st->damage[1].state, st->damage[1].offset);
  /* The reads fail as they should: the damage is real. */
  {
    struct cairn_volume *v;
    uint8_t buf[BLK];

    cr_assert_eq (vol_open (pool, "a", &v), 0);
    cr_assert_eq (vol_pread (v, buf, BLK, lbn_a * BLK), -EIO);
    vol_close (v);
  }
  cr_assert_eq (pool_close (pool), 0);
  members_close (&m);
  model_free (&md);
}

/* Wait until the running pass has checked something. */
static void
wait_progress (struct cairn_pool *pool)
{
  while (status (pool)->bytes_done == 0) {
    cr_assert_eq (status (pool)->state, SCRUB_RUNNING);
    sched_yield ();
  }
}

Test (scrub, pause_restart_resume_cancel_since_last_and_errors)
{
  struct scrub_opts slow = { .rate = 2 * MIB, .save_ms = 1 };
  uint64_t seed = test_seed ("scrub.cursor", 2809), full_blocks, addr;
  struct rng rng = { seed };
  struct scrub_status *st;
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct members m;
  struct model md;

  members_make (&m, 2, DEV_PROFILE_MIRROR);
  dev = members_open (&m, 2, 0);
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool = pool_open_ok (dev);
  populate (pool, &md, seed);

  /* Nothing to act on yet. */
  cr_assert_eq (status (pool)->state, SCRUB_NONE);
  cr_assert_eq (scrub_pause (pool), -ENOENT);
  cr_assert_eq (scrub_resume (pool, UINT64_MAX), -ENOENT);
  cr_assert_eq (scrub_cancel (pool), -ENOENT);
  cr_assert_eq (scrub_start (pool, &(struct scrub_opts) { .since_last = true }),
                -ENOENT);
  cr_assert (strstr (cairn_errmsg (), "without --since-last"), "%s",
             cairn_errmsg ());

  st = scrub_full (pool, false);
  full_blocks = st->blocks;
  cr_assert_gt (full_blocks, (VOL_A + MIB + VOL_B) / BLK);
  cr_assert_eq (st->bytes_done, st->bytes_read / 2);

  /* Pause: the cursor and counts are kept; a start is refused. */
  cr_assert_eq (scrub_start (pool, &slow), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_start (pool, &slow), -EBUSY);
  wait_progress (pool);
  cr_assert_eq (scrub_pause (pool), 0, "%s", cairn_errmsg ());
  st = status (pool);
  cr_assert_eq (st->state, SCRUB_PAUSED);
  cr_assert (!st->interrupted);
  cr_assert_gt (st->blocks, 0);
  cr_assert_lt (st->blocks, full_blocks);
  cr_assert_eq (scrub_pause (pool), -ENOENT);
  cr_assert_eq (scrub_start (pool, &slow), -EBUSY);
  cr_assert (strstr (cairn_errmsg (), "paused"), "%s", cairn_errmsg ());

  /* Resumed, then the pool closes in the middle: it reopens paused and
   * interrupted at the last cursor saved, and resumes to the end with
   * every block counted once.
   */
  cr_assert_eq (scrub_resume (pool, UINT64_MAX), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_resume (pool, UINT64_MAX), -ENOENT);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  pool = pool_open_ok (dev);
  st = status (pool);
  cr_assert_eq (st->state, SCRUB_PAUSED);
  cr_assert (st->interrupted);
  cr_assert_gt (st->blocks, 0);
  cr_assert_lt (st->blocks, full_blocks);
  cr_assert_eq (scrub_resume (pool, 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_wait (pool, NULL, NULL), 0);
  st = status (pool);
  cr_assert_eq (st->state, SCRUB_FINISHED);
  cr_assert_eq (st->blocks, full_blocks, "seed %" PRIu64 ": resumed pass "
                "checked %" PRIu64 " blocks, a whole one %" PRIu64, seed,
                st->blocks, full_blocks);

  /* Cancel a running pass, then a paused one. */
  cr_assert_eq (scrub_start (pool, &slow), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_cancel (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (status (pool)->state, SCRUB_CANCELLED);
  cr_assert_eq (scrub_cancel (pool), -ENOENT);
  cr_assert_eq (scrub_start (pool, &slow), 0, "%s", cairn_errmsg ());
  cr_assert_eq (scrub_pause (pool), 0);
  cr_assert_eq (scrub_cancel (pool), 0);
  cr_assert_eq (status (pool)->state, SCRUB_CANCELLED);

  /* --since-last: the new blocks only (a cancelled pass does not count),
   * so rot in an old block waits for a whole pass.
   */
  addr = block_addr (pool, "b", rng_below (&rng, VOL_B / BLK));
  flip (&m, dev, &rng, addr, BLK, (unsigned) rng_below (&rng, 2));
  fill_pattern (md.a, MIB, seed + 3);
  write_ok (pool, "a", md.a, MIB, 0);
  cr_assert_eq (pool_commit (pool), 0);
  st = scrub_full (pool, true);
  cr_assert (st->since_last);
  cr_assert_geq (st->blocks, MIB / BLK);
  cr_assert_lt (st->blocks, MIB / BLK + 16, "seed %" PRIu64 ": %" PRIu64
                " blocks", seed, st->blocks);
  cr_assert_eq (st->bad_copies, 0);
  st = scrub_full (pool, false);
  cr_assert_eq (st->bad_copies, 1, "seed %" PRIu64, seed);
  cr_assert_eq (st->repaired, 1);
  check_export (pool, "a", md.a, VOL_A, seed);
  check_export (pool, "b", md.b, VOL_B, seed);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);

  /* Degraded (read-only): refused, and said why. */
  dev = members_open (&m, 1, DEV_CHUNK_DEGRADED);
  pool = pool_open_ok (dev);
  cr_assert_eq (scrub_start (pool, &(struct scrub_opts) { 0 }), -EROFS);
  cr_assert (strstr (cairn_errmsg (), "degraded"), "%s", cairn_errmsg ());
  cr_assert_eq (status (pool)->state, SCRUB_FINISHED);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  members_close (&m);
  model_free (&md);
}
