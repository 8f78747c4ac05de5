/* Unit tests for pools of several devices (engine/dev-chunk.c) and for
 * healing reads from another copy (dev.h, dev_pread_checked).
 *
 * Members are memory devices (some behind fault devices).  The tests
 * check placement from the chunk map (C1: copies and columns on distinct
 * members), that a pool on every profile keeps its data across a reopen
 * from its labels in any order, that a missing member is refused unless
 * the open is degraded (C4) and that a degraded mirror serves every block,
 * and, with a printed seed, that bits flipped in random copies of random
 * blocks (never all copies of one) are all read back right, healed by
 * the reads that meet them or else by a scrub (fsck_opts.scrub), and
 * counted exactly on the members that held them.
 *
 * Time: about 1.5 s in all (3 s under ASan).
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "sha256.h"
#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define BLK 4096u
#define VOL_SIZE (6u * MIB)
#define MAX_MEMBERS 4u

/* A pool's members: memory devices, each behind a fault device. */
struct members {
  unsigned n;
  struct cairn_dev *mem[MAX_MEMBERS], *fault[MAX_MEMBERS];
};

static void
members_create (struct members *m, unsigned n, const uint64_t *sizes_mib)
{
  m->n = n;
  for (unsigned i = 0; i < n; i++) {
    cr_assert_eq (dev_mem_create (sizes_mib[i] * MIB, &m->mem[i]), 0);
    cr_assert_eq (dev_fault_create (m->mem[i], &m->fault[i]), 0);
  }
}

static void
members_close (struct members *m)
{
  for (unsigned i = 0; i < m->n; i++) {
    dev_close (m->fault[i]);
    dev_close (m->mem[i]);
  }
}

/* Open the logical device from the members, all or those in mask. */
static int
open_some (struct members *m, uint32_t mask, unsigned flags,
           struct cairn_dev **devp)
{
  struct cairn_dev *list[MAX_MEMBERS];
  unsigned k = 0;

  /* In reverse: the labels, not the order, say which member is which. */
  for (unsigned i = m->n; i-- > 0;)
    if (mask & (1u << i))
      list[k++] = m->fault[i];
  return dev_chunk_open (list, k, flags, devp);
}

static struct cairn_dev *
open_all (struct members *m)
{
  struct cairn_dev *dev;

  cr_assert_eq (open_some (m, (1u << m->n) - 1, 0, &dev), 0, "%s",
                cairn_errmsg ());
  return dev;
}

/* Format members with profile p and a pool on them. */
static void
format_pool (struct members *m, enum dev_profile p)
{
  struct dev_chunk_format_opts o = { .profile = p };
  struct cairn_dev *dev;

  cr_assert_eq (dev_chunk_format (m->fault, m->n, &o, NULL), 0, "%s",
                cairn_errmsg ());
  dev = open_all (m);
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  dev_close (dev);
}

/* Write random blocks over the whole volume "v" (created), committing a
 * few times on the way, so that every superblock slot gets written.
 */
static void
write_volume (struct cairn_dev *dev, uint8_t *model, uint64_t seed)
{
  struct cairn_pool *pool = pool_open_ok (dev);
  struct cairn_volume *v;

  cr_assert_eq (vol_create (pool, "v", VOL_SIZE, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  fill_pattern (model, VOL_SIZE, seed);
  for (unsigned part = 0; part < 6; part++) {
    uint64_t off = part * (VOL_SIZE / 6);

    cr_assert_eq (vol_pwrite (v, model + off, VOL_SIZE / 6, off, 0), 0, "%s",
                  cairn_errmsg ());
    cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  }
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
}

/* Two mirrored members of the given sizes with a pool and volume "v" of
 * random data (the model) on them, closed.
 */
static void
mirror_with_volume (struct members *m, const uint64_t *sizes, uint8_t *model,
                    uint64_t seed)
{
  struct cairn_dev *dev;

  members_create (m, 2, sizes);
  format_pool (m, DEV_PROFILE_MIRROR);
  dev = open_all (m);
  write_volume (dev, model, seed);
  dev_close (dev);
}

/* Read the whole volume "v" and compare it with the model. */
static void
check_volume (struct cairn_pool *pool, const uint8_t *model)
{
  struct cairn_volume *v;
  uint8_t *buf = malloc (VOL_SIZE);

  cr_assert_not_null (buf);
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  for (uint64_t off = 0; off < VOL_SIZE; off += MIB)
    cr_assert_eq (vol_pread (v, buf + off, MIB, off), 0, "read at %" PRIu64
                  ": %s", off, cairn_errmsg ());
  cr_assert (memcmp (buf, model, VOL_SIZE) == 0,
             "the volume reads back other data than was written");
  vol_close (v);
  free (buf);
}

/* Every stripe unit of the map: copies and columns on distinct members
 * (dup: one member, two places), and no two units anywhere overlapping
 * on a member (C1).
 */
static void
check_placement (struct cairn_dev *dev)
{
  struct dev_chunk_info ci;
  uint64_t units, nused = 0;
  struct { unsigned m; uint64_t phys; } *used;

  dev_chunk_info (dev, &ci);
  units = ci.logical_size / ci.stripe_len;
  used = calloc (units * ci.ncopies, sizeof *used);
  cr_assert_not_null (used);
  for (uint64_t u = 0; u < units; u++) {
    uint64_t off = u * ci.stripe_len, row = off / (ci.stripe_len * ci.width);
    unsigned member[3];
    uint64_t phys[3], run;

    for (unsigned k = 0; k < ci.ncopies; k++) {
      cr_assert_eq (dev_chunk_locate (dev, off, k, &member[k], &phys[k], &run),
                    0);
      cr_assert_geq (run, ci.stripe_len);
      for (unsigned j = 0; j < k; j++) {
        if (ci.profile == DEV_PROFILE_DUP)
          cr_assert (member[j] == member[k] && phys[j] != phys[k],
                     "dup: unit %" PRIu64 " copies not on one member apart",
                     u);
        else
          cr_assert_neq (member[j], member[k], "%s: unit %" PRIu64 " has two "
                         "copies on member %u", dev_profile_name (ci.profile),
                         u, member[k]);
      }
      used[nused].m = member[k];
      used[nused++].phys = phys[k];
    }
    /* The columns of one row of a chunk are on distinct members. */
    if (ci.width > 1 && u % ci.width == ci.width - 1) {
      for (unsigned a = 0; a < ci.width; a++)
        for (unsigned b = 0; b < a; b++) {
          unsigned ma, mb;
          uint64_t pa, pb;

          cr_assert_eq (dev_chunk_locate (dev, (row * ci.width + a) *
                                          ci.stripe_len, 0, &ma, &pa, &run), 0);
          cr_assert_eq (dev_chunk_locate (dev, (row * ci.width + b) *
                                          ci.stripe_len, 0, &mb, &pb, &run), 0);
          cr_assert_neq (ma, mb, "columns %u and %u of a row share member %u",
                         a, b, ma);
        }
    }
  }
  for (uint64_t i = 0; i < nused; i++)
    for (uint64_t j = 0; j < i; j++)
      cr_assert (used[i].m != used[j].m || used[i].phys != used[j].phys,
                 "two stripe units at byte %" PRIu64 " of member %u",
                 used[i].phys, used[i].m);
  free (used);
}

Test (chunk, profiles_place_copies_apart_and_keep_data)
{
  static const struct {
    enum dev_profile p;
    unsigned n;
    unsigned ncopies, width;
  } cases[] = {
    { DEV_PROFILE_SINGLE, 3, 1, 1 },
    { DEV_PROFILE_DUP, 1, 2, 1 },
    { DEV_PROFILE_MIRROR, 2, 2, 1 },
    { DEV_PROFILE_MIRROR, 3, 2, 1 },
    { DEV_PROFILE_MIRROR3, 3, 3, 1 },
    { DEV_PROFILE_STRIPE, 3, 1, 3 },
    { DEV_PROFILE_STRIPE_MIRROR, 4, 2, 2 },
  };
  static const uint64_t sizes[MAX_MEMBERS] = { 28, 24, 32, 26 };
  uint8_t *model = malloc (VOL_SIZE);

  cr_assert_not_null (model);
  for (unsigned c = 0; c < ARRAY_SIZE (cases); c++) {
    struct members m;
    struct dev_chunk_info ci;
    struct cairn_dev *dev;
    struct cairn_pool *pool;

    members_create (&m, cases[c].n, sizes);
    format_pool (&m, cases[c].p);
    dev = open_all (&m);
    dev_chunk_info (dev, &ci);
    cr_assert_eq (ci.ncopies, cases[c].ncopies, "%s",
                  dev_profile_name (cases[c].p));
    cr_assert_eq (ci.width, cases[c].width);
    cr_assert_eq (dev_copies (dev), cases[c].ncopies);
    cr_assert (ci.logical_size >= POOL_MIN_SIZE);
    check_placement (dev);
    write_volume (dev, model, 100 + c);
    dev_close (dev);

    /* Reopened from the labels (in another order), the pool reads back. */
    dev = open_all (&m);
    pool = pool_open_ok (dev);
    check_volume (pool, model);
    cr_assert_eq (pool_close (pool), 0);
    assert_fsck_clean (dev, dev_profile_name (cases[c].p));
    dev_close (dev);
    members_close (&m);
  }
  free (model);
}

Test (chunk, labels_are_checked_and_members_are_not_pools)
{
  static const uint64_t sizes[] = { 16, 16 };
  struct dev_chunk_format_opts o = { .profile = DEV_PROFILE_MIRROR3 };
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct members m;
  uint8_t byte;

  members_create (&m, 2, sizes);
  /* Two devices cannot hold three copies. */
  cr_assert_eq (dev_chunk_format (m.fault, 2, &o, NULL), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "at least 3 devices"), "%s",
             cairn_errmsg ());
  format_pool (&m, DEV_PROFILE_MIRROR);
  /* A member on its own is not a pool. */
  cr_assert_lt (pool_open (m.fault[0], NULL, &pool), 0);
  /* Both copies of one member's label damaged: that member is refused. */
  for (uint64_t at = 100; at < 2 * 128 * 1024; at += 128 * 1024) {
    cr_assert_eq (dev_pread (m.mem[1], &byte, 1, at), 0);
    byte ^= 0x10;
    cr_assert_eq (dev_pwrite (m.mem[1], &byte, 1, at), 0);
  }
  cr_assert_eq (open_some (&m, 3, 0, &dev), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "checksum"), "%s", cairn_errmsg ());
  /* One copy repaired: the member opens from it. */
  cr_assert_eq (dev_pread (m.mem[1], &byte, 1, 100), 0);
  byte ^= 0x10;
  cr_assert_eq (dev_pwrite (m.mem[1], &byte, 1, 100), 0);
  dev = open_all (&m);
  pool = pool_open_ok (dev);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  members_close (&m);
}

Test (chunk, missing_member_is_refused_unless_degraded)
{
  static const uint64_t sizes[] = { 20, 20, 20 };
  uint8_t *model = malloc (VOL_SIZE);
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct cairn_volume *v;
  struct members m;
  struct dev_chunk_info ci;
  struct dev_member_info mi;

  cr_assert_not_null (model);
  mirror_with_volume (&m, sizes, model, 7);

  for (unsigned gone = 0; gone < 2; gone++) {
    uint32_t mask = 3u & ~(1u << gone);

    cr_assert_eq (open_some (&m, mask, 0, &dev), -ENODEV);
    cr_assert (strstr (cairn_errmsg (), "missing") &&
               strstr (cairn_errmsg (), "degraded"), "%s", cairn_errmsg ());
    cr_assert_eq (open_some (&m, mask, DEV_CHUNK_DEGRADED, &dev), 0, "%s",
                  cairn_errmsg ());
    dev_chunk_info (dev, &ci);
    cr_assert (ci.degraded && ci.readonly && ci.missing == 1);
    dev_chunk_member (dev, gone, &mi);
    cr_assert_eq (mi.state, DEV_MEMBER_MISSING);
    pool = pool_open_ok (dev);
    cr_assert (pool_is_readonly (pool));
    check_volume (pool, model);
    cr_assert_eq (vol_open (pool, "v", &v), 0);
    cr_assert_lt (vol_pwrite (v, model, BLK, 0, 0), 0);
    vol_close (v);
    cr_assert_eq (pool_close (pool), 0);
    assert_fsck_clean (dev, "degraded");
    dev_close (dev);
  }
  members_close (&m);

  /* Striped, one copy: a missing member leaves holes, even degraded. */
  members_create (&m, 3, sizes);
  format_pool (&m, DEV_PROFILE_STRIPE);
  cr_assert_eq (open_some (&m, 3, DEV_CHUNK_DEGRADED, &dev), -ENODEV);
  cr_assert (strstr (cairn_errmsg (), "no other copy"), "%s", cairn_errmsg ());
  members_close (&m);
  free (model);
}

/* Flip one random bit of copy k of the logical range [off, off + len) on
 * the member below its fault device; the member's index.
 */
static unsigned
flip_copy (struct members *m, struct cairn_dev *dev, struct rng *r,
           uint64_t off, uint64_t len, unsigned k)
{
  uint64_t at = off + rng_below (r, len), phys, run;
  unsigned member;
  uint8_t byte;

  cr_assert_eq (dev_chunk_locate (dev, at, k, &member, &phys, &run), 0);
  cr_assert_eq (dev_pread (m->mem[member], &byte, 1, phys), 0);
  byte ^= (uint8_t) (1u << rng_below (r, 8));
  cr_assert_eq (dev_pwrite (m->mem[member], &byte, 1, phys), 0);
  return member;
}

/* Does copy k of [off, off + len) hold what copy j does? */
static bool
copy_matches (struct cairn_dev *dev, uint64_t off, uint64_t len, unsigned k,
              unsigned j)
{
  uint8_t a[16384], b[16384];

  cr_assert_leq (len, sizeof a);
  cr_assert_eq (dev->ops->pread_copy (dev, a, len, off, k), 0);
  cr_assert_eq (dev->ops->pread_copy (dev, b, len, off, j), 0);
  return memcmp (a, b, len) == 0;
}

/* A range with damaged copies, to look at again once everything was read. */
struct flip {
  uint64_t off, len;
  uint32_t mask;              /* the damaged copies */
  unsigned member[3];         /* where each copy is */
  enum { FLIP_DATA, FLIP_SB, FLIP_NODE } what;
};

/* Damage the copies in f->mask of f's range (one random bit each, in its
 * first block).
 */
static void
damage (struct members *m, struct cairn_dev *dev, struct rng *r,
        struct flip *f)
{
  for (unsigned k = 0; k < dev_copies (dev); k++)
    if (f->mask & (1u << k))
      f->member[k] = flip_copy (m, dev, r, f->off, BLK, k);
}

Test (chunk, bit_flips_in_random_copies_are_read_right_healed_and_counted)
{
  uint64_t seed = test_seed ("chunk.bit_flips", 28);
  static const uint64_t sizes[] = { 24, 26, 28 };
  struct rng rng = { seed };
  uint8_t *model = malloc (VOL_SIZE), *blk = malloc (BLK);
  struct flip *flips = calloc (2048, sizeof *flips);

  cr_assert (model && blk && flips);
  for (int pass = 0; pass < 2; pass++) {
    enum dev_profile p = pass ? DEV_PROFILE_MIRROR3 : DEV_PROFILE_MIRROR;
    uint64_t want[MAX_MEMBERS] = { 0 }, nflips = 0, ndata = 0, nnodes = 0;
    struct dev_member_info mi;
    struct dev_chunk_info ci;
    struct cairn_pool *pool;
    struct cairn_dev *dev;
    struct members m;

    members_create (&m, pass ? 3 : 2, sizes);
    format_pool (&m, p);
    dev = open_all (&m);
    write_volume (dev, model, seed + pass);
    dev_chunk_info (dev, &ci);

    /* The volume's blocks (random, so each found once) and the nodes
     * (live or not) on the logical device: damage some copies of one in
     * four blocks and one in two nodes, never all the copies of one.  And some copies of every
     * superblock slot (all written: six commits).
     */
    for (uint64_t off = 1 * MIB; off < ci.logical_size && nflips < 2000;
         off += BLK) {
      bool node, data = false;
      struct flip *f = &flips[nflips];

      cr_assert_eq (dev_pread (dev, blk, BLK, off), 0);
      node = get_le32 (blk) == 0x444f4e43u;        /* "CNOD" */
      for (uint64_t b = 0; !node && b < VOL_SIZE && !data; b += BLK)
        data = memcmp (blk, model + b, BLK) == 0;
      if ((!node && !data) || rng_below (&rng, node ? 2 : 4) != 0)
        continue;
      f->off = off;
      f->len = node ? 16384 : BLK;
      f->what = node ? FLIP_NODE : FLIP_DATA;
      f->mask = 1 + (uint32_t) rng_below (&rng, (1u << ci.ncopies) - 2);
      damage (&m, dev, &rng, f);
      nflips++;
      ndata += data;
      nnodes += node;
    }
    for (unsigned slot = 0; slot < SB_SLOTS; slot++) {
      struct flip *f = &flips[nflips++];

      *f = (struct flip) { SB_SLOT_OFFSET (slot), 4096, 0, { 0 }, FLIP_SB };
      f->mask = 1 + (uint32_t) rng_below (&rng, (1u << ci.ncopies) - 2);
      damage (&m, dev, &rng, f);
    }
    dev_close (dev);
    cr_assert_gt (ndata, 50, "seed %" PRIu64 ": too few data blocks damaged",
                  seed);
    cr_assert_gt (nnodes, 0, "seed %" PRIu64 ": no node damaged", seed);

    /* Every read is right, and heals the damaged copies it meets.  The
     * pool is read-only, so that no commit writes over a damaged copy
     * (the copies below it are repaired all the same).
     */
    dev = open_all (&m);
    cr_assert_eq (pool_open (dev, &(struct pool_open_opts) { .readonly = true },
                             &pool), 0, "%s", cairn_errmsg ());
    check_volume (pool, model);
    cr_assert_eq (pool_close (pool), 0);
    /* A read tries the copies in order up to the first good one, and
     * heals and counts the damaged ones before it.  Data blocks and
     * superblocks are all read, so those copies are healed; a node's are
     * when it was live.
     */
    for (uint64_t i = 0; i < nflips; i++) {
      struct flip *f = &flips[i];
      unsigned good = (unsigned) __builtin_ctz (~f->mask);

      for (unsigned k = 0; k < good; k++)
        if (f->what != FLIP_NODE)
          cr_assert (copy_matches (dev, f->off, f->len, k, good), "seed %"
                     PRIu64 ": copy %u of the %s at %" PRIu64 " was not "
                     "healed by a read", seed, k,
                     f->what == FLIP_SB ? "superblock" : "data block", f->off);
    }
    /* The scrub (fsck --scrub) reads the rest: every copy of everything
     * live is healed, and fsck is clean.
     */
    {
      struct problems pr = { .n = 0 };
      struct fsck_opts fo = { .problem = note_problem, .opaque = &pr,
                              .scrub = true };
      struct fsck_report rep;

      cr_assert_eq (fsck_pool (dev, &fo, &rep), 0, "%s", cairn_errmsg ());
      cr_assert_eq (rep.errors, 0, "seed %" PRIu64 ": fsck --scrub: %s", seed,
                    pr.text);
      cr_assert_eq (rep.scrub.lost, 0);
      cr_assert_eq (rep.scrub.repaired, rep.scrub.bad_copies);
    }
    for (uint64_t i = 0; i < nflips; i++) {
      struct flip *f = &flips[i];
      unsigned good = (unsigned) __builtin_ctz (~f->mask);

      for (unsigned k = 0; k < ci.ncopies; k++) {
        bool healed;

        if (!(f->mask & (1u << k)))
          continue;
        healed = copy_matches (dev, f->off, f->len, k, good);
        if (f->what != FLIP_NODE)
          cr_assert (healed, "seed %" PRIu64 ": copy %u of the %s at %"
                     PRIu64 " was not healed by the scrub", seed, k,
                     f->what == FLIP_SB ? "superblock" : "data block", f->off);
        want[f->member[k]] += healed;
      }
    }
    /* The counters: exactly the damaged copies of live blocks, on their
     * members, every one repaired; no read or write failed.
     */
    for (unsigned i = 0; i < m.n; i++) {
      dev_chunk_member (dev, i, &mi);
      cr_assert_eq (mi.cksum_errors, want[i], "seed %" PRIu64 ": member %u "
                    "counted %" PRIu64 " CKSUM errors, not the %" PRIu64
                    " damaged copies read", seed, i, mi.cksum_errors, want[i]);
      cr_assert_eq (mi.repaired, want[i]);
      cr_assert_eq (mi.read_errors, 0);
      cr_assert_eq (mi.write_errors, 0);
    }
    dev_close (dev);
    members_close (&m);
  }
  free (flips);
  free (model);
  free (blk);
}

Test (chunk, a_read_error_is_served_from_another_copy)
{
  static const uint64_t sizes[] = { 20, 20 };
  uint8_t *model = malloc (VOL_SIZE);
  struct dev_member_info mi;
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct members m;

  cr_assert_not_null (model);
  mirror_with_volume (&m, sizes, model, 5);
  dev = open_all (&m);
  pool = pool_open_ok (dev);
  /* Member 0 fails its next read, whatever reads it (a node, data). */
  dev_fault_set (m.fault[0], DEV_FAULT_READ, 1, false, EIO);
  check_volume (pool, model);
  dev_chunk_member (dev, 0, &mi);
  cr_assert_eq (mi.read_errors, 1);
  cr_assert_eq (mi.cksum_errors, 0);
  /* Every read of member 0 failing: still served from member 1. */
  dev_fault_set (m.fault[0], DEV_FAULT_READ, 1, true, EIO);
  check_volume (pool, model);
  dev_chunk_member (dev, 0, &mi);
  cr_assert_gt (mi.read_errors, 1);
  dev_chunk_member (dev, 1, &mi);
  cr_assert_eq (mi.read_errors, 0);
  dev_fault_clear (m.fault[0]);
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after read errors");
  dev_close (dev);
  members_close (&m);
  free (model);
}
