/* Unit tests for where a volume's data goes (engine/volume.c data_hint,
 * space_reuse_hint): once a commit has released what overwrites freed,
 * the next data is written there, not into space never written.  So a
 * volume rewritten again and again keeps to about twice its size on the
 * device, whatever the pool's size, and random overwrites do not leave
 * single free blocks piling up in the free set.  A large write that finds
 * no room where the last release was takes freed space elsewhere before
 * space never written (the high water, space.c).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define BLK 4096u

static int
cmp_u64 (const void *a, const void *b)
{
  uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

  return (x > y) - (x < y);
}

/* Is any block on the device at or past limit one of the volume's live
 * blocks (model: size bytes of unique random blocks)?  The first such
 * device address, or 0.  Blocks are found by their first 8 bytes, then
 * compared whole.
 */
static uint64_t
live_block_past (struct cairn_dev *dev, const uint8_t *model, size_t size,
                 uint64_t limit)
{
  size_t n = size / BLK;
  uint64_t *heads = malloc (n * sizeof *heads), found = 0;
  uint8_t b[BLK];

  for (size_t i = 0; i < n; i++)
    memcpy (&heads[i], model + i * BLK, 8);
  qsort (heads, n, sizeof *heads, cmp_u64);
  for (uint64_t a = limit; found == 0 && a + BLK <= dev->size; a += BLK) {
    uint64_t head;

    cr_assert_eq (dev_pread (dev, b, BLK, a), 0);
    memcpy (&head, b, 8);
    if (bsearch (&head, heads, n, sizeof *heads, cmp_u64) == NULL)
      continue;
    for (size_t off = 0; off < size; off += BLK)
      if (memcmp (b, model + off, BLK) == 0)
        found = a;
  }
  free (heads);
  return found;
}

/* A 128 MiB in-memory pool with volume "v" of size bytes, open. */
struct fixture {
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
};

static struct fixture
fixture_new (size_t size)
{
  struct fixture f;

  f.dev = mem_pool (128 * MIB, NULL);
  f.pool = pool_open_ok (f.dev);
  cr_assert_eq (vol_create (f.pool, "v", size, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (f.pool, "v", &f.v), 0, "%s", cairn_errmsg ());
  return f;
}

/* Close everything; fsck must find the pool clean. */
static void
fixture_free (struct fixture *f)
{
  vol_close (f->v);
  cr_assert_eq (pool_close (f->pool), 0);
  assert_clean (f->dev);
  dev_close (f->dev);
}

Test (alloc, rewrites_reuse_what_they_freed)
{
  struct rng rng = { test_seed ("alloc.rewrites_reuse_what_they_freed", 1) };
  const size_t size = 8 * MIB;
  struct fixture f = fixture_new (size);
  uint8_t *model = malloc (size);
  /* Twelve rewrites are 96 MiB: without reuse, next-fit walks through the
   * whole pool.  With it, each rewrite fills what the one before freed.
   */
  for (int i = 0; i < 12; i++) {
    fill_pattern (model, size, rng_next (&rng));
    for (size_t off = 0; off < size; off += MIB)
      cr_assert_eq (vol_pwrite (f.v, model + off, MIB, off, 0), 0, "%s",
                    cairn_errmsg ());
    cr_assert_eq (pool_commit (f.pool), 0, "%s", cairn_errmsg ());
    uint64_t a = live_block_past (f.dev, model, size, 40 * MIB);
    cr_assert_eq (a, 0, "rewrite %d: live data at byte %" PRIu64 " of the "
                  "device, past the first 40 MiB", i, a);
  }
  fixture_free (&f);
  free (model);
}

Test (alloc, random_overwrites_fill_the_holes_they_leave)
{
  struct rng rng = { test_seed ("alloc.random_overwrites_fill_the_holes", 2) };
  const size_t size = 16 * MIB;
  struct fixture f = fixture_new (size);
  struct pool_info pi;
  uint8_t *buf = malloc (MIB), blk[BLK];

  for (size_t off = 0; off < size; off += MIB) {
    fill_pattern (buf, MIB, rng_next (&rng));
    cr_assert_eq (vol_pwrite (f.v, buf, MIB, off, 0), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (pool_commit (f.pool), 0, "%s", cairn_errmsg ());
  /* 40 rounds of 256 random 4 KiB overwrites, a commit after each: 10,240
   * single blocks freed, scattered over the volume's 16 MiB.
   */
  for (int round = 0; round < 40; round++) {
    for (int i = 0; i < 256; i++) {
      fill_pattern (blk, BLK, rng_next (&rng));
      cr_assert_eq (vol_pwrite (f.v, blk, BLK,
                                rng_below (&rng, size / BLK) * BLK, 0), 0,
                    "%s", cairn_errmsg ());
    }
    cr_assert_eq (pool_commit (f.pool), 0, "%s", cairn_errmsg ());
  }
  pool_info (f.pool, &pi);
  /* Without reuse, over 2,000 of the freed single blocks stay runs of
   * their own; reusing them leaves under 300 (about one commit's worth).
   */
  cr_assert_lt (pi.space.extents, 1000, "%" PRIu64 " free runs",
                pi.space.extents);
  fixture_free (&f);
  free (buf);
}

/* Write len bytes of a fresh pattern at off, keeping model in step. */
static void
write_fresh (struct fixture *f, struct rng *rng, uint8_t *model, size_t len,
             size_t off)
{
  fill_pattern (model + off, len, rng_next (rng));
  cr_assert_eq (vol_pwrite (f->v, model + off, len, off, 0), 0, "%s",
                cairn_errmsg ());
}

/* Commit twice: the second makes the first's frees allocatable. */
static void
commit_twice (struct fixture *f)
{
  cr_assert_eq (pool_commit (f->pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (f->pool), 0, "%s", cairn_errmsg ());
}

Test (alloc, large_writes_reuse_freed_runs_before_growing)
{
  struct rng rng = { test_seed ("alloc.large_writes_reuse_freed_runs", 4) };
  const size_t size = 16 * MIB;
  struct fixture f = fixture_new (size);
  uint8_t *model = malloc (size), *back = malloc (MIB);
  struct pool_info before, after;

  for (size_t off = 0; off < size; off += MIB)        /* a prefill */
    write_fresh (&f, &rng, model, MIB, off);
  commit_twice (&f);
  /* Rewrite the first quarter: its old blocks come back as one run. */
  for (size_t off = 0; off < 4 * MIB; off += MIB)
    write_fresh (&f, &rng, model, MIB, off);
  commit_twice (&f);
  /* Random overwrites in the last quarter: what they free comes back as
   * single blocks, and the reuse hint points there.
   */
  for (int i = 0; i < 200; i++)
    write_fresh (&f, &rng, model, BLK,
                 size - 4 * MIB + rng_below (&rng, MIB / BLK * 4) * BLK);
  commit_twice (&f);
  pool_info (f.pool, &before);
  write_fresh (&f, &rng, model, MIB, 8 * MIB);
  pool_info (f.pool, &after);
  /* The 1 MiB went into what the first quarter's rewrite freed, not past
   * the high water.
   */
  cr_assert_eq (after.space.touched, before.space.touched,
                "a 1 MiB write moved the high water from %" PRIu64 " to %"
                PRIu64 " blocks", before.space.touched, after.space.touched);
  cr_assert_eq (vol_pread (f.v, back, MIB, 8 * MIB), 0, "%s", cairn_errmsg ());
  cr_assert_arr_eq (back, model + 8 * MIB, MIB);
  fixture_free (&f);
  free (model);
  free (back);
}

/* The durable generation of the pool, after waiting up to ms for it to
 * pass gen (0: just read it).
 */
static uint64_t
generation_after (struct cairn_pool *pool, uint64_t gen, int ms)
{
  struct pool_info pi;

  for (int waited = 0;; waited += 10) {
    pool_info (pool, &pi);
    if (pi.generation > gen || waited >= ms)
      return pi.generation;
    usleep (10000);
  }
}

Test (alloc, written_data_starts_a_commit)
{
  struct rng rng = { test_seed ("alloc.written_data_starts_a_commit", 3) };
  struct pool_open_opts o = { .data_limit_bytes = 4 * MIB,
                              .no_background = true };
  struct cairn_dev *dev = mem_pool (64 * MIB, NULL);
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *buf = malloc (MIB);
  uint64_t gen;

  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "v", 16 * MIB, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());
  /* The timer alone would commit in a minute. */
  cr_assert_eq (pool_start_committer (pool, 60000), 0, "%s", cairn_errmsg ());
  gen = generation_after (pool, 0, 0);
  for (int i = 0; i < 3; i++) {            /* 3 MiB: under the limit */
    fill_pattern (buf, MIB, rng_next (&rng));
    cr_assert_eq (vol_pwrite (v, buf, MIB, (uint64_t) i * MIB, 0), 0, "%s",
                  cairn_errmsg ());
  }
  cr_assert_eq (generation_after (pool, gen, 300), gen,
                "a commit came before the data limit");
  fill_pattern (buf, MIB, rng_next (&rng));  /* the 4th MiB reaches it */
  cr_assert_eq (vol_pwrite (v, buf, MIB, 3 * MIB, 0), 0, "%s",
                cairn_errmsg ());
  cr_assert_gt (generation_after (pool, gen, 5000), gen,
                "no commit within 5 s of writing the data limit's worth");
  /* The count starts again after the commit. */
  gen = generation_after (pool, 0, 0);
  fill_pattern (buf, MIB, rng_next (&rng));
  cr_assert_eq (vol_pwrite (v, buf, MIB, 4 * MIB, 0), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (generation_after (pool, gen, 300), gen,
                "a commit came after 1 MiB of a new generation");
  vol_close (v);
  pool_stop_committer (pool);
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  free (buf);
  dev_close (dev);
}
