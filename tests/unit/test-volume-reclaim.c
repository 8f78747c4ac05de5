/* Unit tests for deleting volumes and snapshots in the background
 * (engine/reaper.c, reaper-jobs.c, reclaim.c): a delete takes effect at
 * once and its space comes back in bounded steps, across restarts and
 * crashes, with fsck clean between any two steps; a delete waits for the
 * last open handle; the reclaims in progress are listed as jobs.
 * Randomised tests print their seed (test-util.h).
 */
#include <config.h>

#include <errno.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

/* Open a pool whose background work the test steps by hand. */
static struct cairn_pool *
open_pool_stepped (struct cairn_dev *dev)
{
  struct pool_open_opts o = { .no_background = true };
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  vol_reclaim_set_budget (pool, 16);
  return pool;
}

/* Reclaim everything deleted, a step at a time; returns the steps. */
static unsigned
reclaim_by_steps (struct cairn_pool *pool)
{
  unsigned steps = 0;
  bool more = true;

  while (more) {
    cr_assert_eq (vol_reclaim_step (pool, &more), 0, "%s", cairn_errmsg ());
    steps++;
  }
  return steps;
}

/* The allocated figure of an empty pool with the catalog's own trees in
 * place (made by creating and deleting a volume).
 */
static uint64_t
empty_pool_base (struct cairn_pool *pool)
{
  cr_assert_eq (vol_create (pool, "probe", 1 << 20, NULL), 0);
  cr_assert_eq (vol_delete (pool, "probe", 0), 0);
  reclaim_by_steps (pool);
  cr_assert_eq (pool_commit (pool), 0);
  return pool_blocks_in_use (pool);
}

/* Deleting a volume takes effect at once; its space comes back in bounded
 * steps that stop at a restart and resume after it (reaper.c, RP-1..5),
 * with fsck clean between any two steps.
 */
Test (volume, background_delete_resumes_after_restart)
{
  struct cairn_dev *dev = mem_pool (256 << 20, NULL);
  struct cairn_pool *pool = open_pool_stepped (dev);
  struct rng r = { test_seed ("volume.background_delete", 77) };
  struct cairn_volume *v;
  struct vol_reclaim_info ri;
  uint8_t block[4096];
  uint64_t base, full, last;
  unsigned steps = 0, restarts = 0;
  bool more = true;

  base = empty_pool_base (pool);

  /* Scattered blocks (many extents, a tree of several levels), a snapshot,
   * then overwrites (deadlist entries), then more blocks.
   */
  cr_assert_eq (vol_create (pool, "big", 64 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "big", &v), 0);
  for (unsigned i = 0; i < 3000; i++) {
    fill_pattern (block, sizeof block, i + 1);
    cr_assert_eq (vol_pwrite (v, block, 4096, 4096 * rng_below (&r, 16384), 0), 0);
    if (i == 2000) {
      cr_assert_eq (snap_create (pool, "big", "s"), 0);
      cr_assert_eq (vol_pwrite (v, block, 4096, 0, 0), 0);
    }
  }
  vol_close (v);
  cr_assert_eq (pool_commit (pool), 0);
  full = pool_blocks_in_use (pool);

  /* The delete is immediate: the name is free again at once. */
  cr_assert_eq (vol_delete (pool, "big", VOL_DELETE_RECURSIVE), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "big", &v), -ENOENT);
  cr_assert_eq (vol_open (pool, "big@s", &v), -ENOENT);
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.volumes, 1);
  cr_assert_eq (vol_create (pool, "big", 1 << 20, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "big", 0), 0);
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.volumes, 2);

  /* Step, restarting every few steps, until done. */
  last = pool_blocks_in_use (pool);
  while (more || steps == 0) {
    cr_assert_eq (vol_reclaim_step (pool, &more), 0, "%s", cairn_errmsg ());
    steps++;
    cr_assert_leq (pool_blocks_in_use (pool), last,
                   "a step never takes space");
    last = pool_blocks_in_use (pool);
    if (more && rng_below (&r, 4) == 0) {
      char when[64];

      cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
      snprintf (when, sizeof when, "after %u reclaim steps", steps);
      assert_fsck_clean (dev, when);
      pool = open_pool_stepped (dev);
      cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
      cr_assert_geq (ri.volumes, 1, "the work survives the restart");
      restarts++;
    }
  }
  fprintf (stderr, "volume.background_delete: %u steps, %u restarts, %" PRIu64
           " blocks freed\n", steps, restarts, full - base);
  cr_assert_gt (steps, 10, "small steps: the delete took several");
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.volumes, 0);
  cr_assert_eq (pool_blocks_in_use (pool), base, "every block is back");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after reclaiming");
  dev_close (dev);
}

/* With background work allowed, a delete's space comes back by itself. */
Test (volume, background_delete_runs_by_itself)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct cairn_volume *v;
  struct vol_reclaim_info ri;
  uint8_t block[4096];
  uint64_t base;

  base = pool_blocks_in_use (pool);
  cr_assert_eq (vol_create (pool, "v", 8 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  fill_pattern (block, sizeof block, 9);
  for (unsigned i = 0; i < 512; i++)
    cr_assert_eq (vol_pwrite (v, block, 4096, 8192 * i, 0), 0);
  vol_close (v);
  vol_reclaim_set_budget (pool, 8);
  cr_assert_eq (vol_delete (pool, "v", 0), 0);
  for (int i = 0; i < 2000; i++) {
    cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
    cr_assert_str_empty (ri.error);
    if (ri.volumes == 0)
      break;
    usleep (5000);
  }
  cr_assert_eq (ri.volumes, 0, "the background finished within 10 s");
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_gt (ri.freed_bytes, 512 * 4096 - 1);
  cr_assert_leq (pool_blocks_in_use (pool), base + 64, "the space is back "
                 "(the catalog's trees may have grown a node)");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after a background delete");
  dev_close (dev);
}

/* Deleting a snapshot or a volume that handles have open: the name goes at
 * once, the handles keep reading (and writing) the same data until they
 * close, and then what was unique to it is freed; after a crash with the
 * handles open, the next open finishes the deletes.
 */
Test (volume, delete_while_open_waits_for_the_last_handle)
{
  const uint64_t size = 128 << 20;
  struct cairn_dev *dev = mem_pool (size, NULL), *crashed;
  struct cairn_pool *pool = open_pool_stepped (dev);
  struct cairn_volume *hv, *hs, *h;
  struct vol_reclaim_info ri;
  static uint8_t a[256 << 10], b[256 << 10], buf[256 << 10];
  uint64_t base, before;

  base = empty_pool_base (pool);

  fill_pattern (a, sizeof a, 1);
  fill_pattern (b, sizeof b, 2);
  cr_assert_eq (vol_create (pool, "v", 4 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "v", &hv), 0);
  cr_assert_eq (vol_pwrite (hv, a, sizeof a, 0, 0), 0);
  cr_assert_eq (snap_create (pool, "v", "s1"), 0);
  cr_assert_eq (vol_open (pool, "v@s1", &hs), 0);

  /* The snapshot: gone by name, still there for its handle. */
  cr_assert_eq (snap_delete (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v@s1", &h), -ENOENT);
  cr_assert_eq (snap_create (pool, "v", "s1"), 0, "the name is free again");
  cr_assert_eq (snap_delete (pool, "v", "s1"), 0);
  cr_assert_eq (vol_pwrite (hv, b, sizeof b, 0, 0), 0);
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (vol_pread (hs, buf, sizeof buf, 0), 0, "%s", cairn_errmsg ());
  cr_assert_arr_eq (buf, a, sizeof a, "the open snapshot still reads its data");
  before = vol_reclaimed_bytes (pool);
  vol_close (hs);
  cr_assert_eq (pool_commit (pool), 0);
  /* The data, and the tree nodes the overwrite copied. */
  cr_assert (vol_reclaimed_bytes (pool) - before >= sizeof a &&
             vol_reclaimed_bytes (pool) - before <= sizeof a + (64 << 10),
             "closing the last handle freed what only it held (%" PRIu64
             " bytes for %zu of data)", vol_reclaimed_bytes (pool) - before,
             sizeof a);

  /* The volume: gone by name, still read-write for its handle. */
  cr_assert_eq (snap_create (pool, "v", "s2"), 0);
  cr_assert_eq (vol_delete (pool, "v", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &h), -ENOENT);
  cr_assert_eq (vol_create (pool, "v", 1 << 20, NULL), 0, "the name is free");
  cr_assert_eq (vol_delete (pool, "v", 0), 0);
  cr_assert_eq (vol_pwrite (hv, a, 4096, 8192, 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (vol_pread (hv, buf, 4096, 8192), 0);
  cr_assert_arr_eq (buf, a, 4096);
  cr_assert_eq (vol_pread (hv, buf, 4096, 0), 0);
  cr_assert_arr_eq (buf, b, 4096);
  reclaim_by_steps (pool);
  cr_assert_gt (pool_blocks_in_use (pool), base,
                "the open volume keeps its data");

  /* A crash with the handle still open: the next open finishes. */
  crashed = copy_dev (dev, size);
  vol_close (hv);
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.volumes, 1, "closing the last handle started the delete");
  reclaim_by_steps (pool);
  cr_assert_eq (pool_blocks_in_use (pool), base, "every block is back");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after the handles closed");
  dev_close (dev);

  assert_fsck_clean (crashed, "crashed with handles open");
  pool = open_pool_stepped (crashed);
  cr_assert_eq (vol_open (pool, "v", &h), -ENOENT);
  cr_assert_eq (pool_commit (pool), 0);
  reclaim_by_steps (pool);
  cr_assert_eq (pool_blocks_in_use (pool), base,
                "the reopened pool finished the deletes");
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (crashed, "after finishing the deletes");
  dev_close (crashed);
}

/* A snapshot that holds much frees a step's worth at once and the rest in
 * the background, across restarts, exactly what its dry run said (RP-6).
 */
Test (volume, snapshot_delete_finishes_in_the_background)
{
  struct cairn_dev *dev = mem_pool (128 << 20, NULL);
  struct cairn_pool *pool = open_pool_stepped (dev);
  struct cairn_volume *v;
  struct vol_reclaim_info ri;
  struct snap_space sp;
  uint8_t block[4096];
  uint64_t before, first;

  cr_assert_eq (vol_create (pool, "v", 16 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  for (int pass = 0; pass < 3; pass++) {
    /* Every other block, so each overwrite is its own deadlist entry. */
    for (unsigned i = 0; i < 1024; i++) {
      fill_pattern (block, sizeof block, pass * 4096 + i);
      cr_assert_eq (vol_pwrite (v, block, 4096, 8192 * i, 0), 0);
    }
    if (pass < 2)
      cr_assert_eq (snap_create (pool, "v", pass ? "s1" : "s0"), 0);
  }
  vol_close (v);
  cr_assert_eq (snap_space (pool, "v", "s1", &sp), 0, "%s", cairn_errmsg ());
  cr_assert_geq (sp.unique, 1024 * 4096);
  before = vol_reclaimed_bytes (pool);
  cr_assert_eq (snap_delete (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
  first = vol_reclaimed_bytes (pool) - before;
  cr_assert_lt (first, sp.unique,
                "with steps of 16 entries, most is left for the background");
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.ranges, 1);
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "a snapshot delete half done");
  pool = open_pool_stepped (dev);
  before = vol_reclaimed_bytes (pool);     /* counted from the open */
  cr_assert_gt (reclaim_by_steps (pool), 10);
  cr_assert_eq (first + vol_reclaimed_bytes (pool) - before, sp.unique,
                "freed what the dry run said");
  cr_assert_eq (vol_reclaim_status (pool, &ri), 0);
  cr_assert_eq (ri.ranges, 0);
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after the snapshot delete finished");
  dev_close (dev);
}

/* The only reclaim job listed, checked against the last one seen: the
 * same job, done never backwards, never past a known total.
 */
static void
one_job (struct cairn_pool *pool, struct vol_reclaim_job *last, bool first)
{
  struct vol_reclaim_job *jobs;
  size_t n;

  cr_assert_eq (vol_reclaim_jobs (pool, &jobs, &n), 0, "%s", cairn_errmsg ());
  cr_assert_eq (n, 1, "one reclaim is listed, not %zu", n);
  if (!first) {
    cr_assert_eq (jobs[0].seq, last->seq, "the job keeps its number");
    cr_assert_geq (jobs[0].done_bytes, last->done_bytes);
    cr_assert_str_eq (jobs[0].what, last->what);
  }
  cr_assert (jobs[0].total_bytes == 0 ||
             jobs[0].done_bytes <= jobs[0].total_bytes,
             "done %" PRIu64 " of %" PRIu64, jobs[0].done_bytes,
             jobs[0].total_bytes);
  *last = jobs[0];
  free (jobs);
}

/* Step until the listed job is gone; returns what it last showed. */
static struct vol_reclaim_job
step_job_to_the_end (struct cairn_pool *pool, struct vol_reclaim_job job)
{
  struct vol_reclaim_job *jobs;
  size_t n = 1;
  bool more = true;

  while (more) {
    cr_assert_eq (vol_reclaim_step (pool, &more), 0, "%s", cairn_errmsg ());
    cr_assert_eq (vol_reclaim_jobs (pool, &jobs, &n), 0);
    free (jobs);
    if (n == 0)
      break;
    one_job (pool, &job, false);
  }
  cr_assert_eq (n, 0, "the job leaves the list with its last block");
  cr_assert_not (more, "no work is left once the list is empty");
  return job;
}

/* The reclaims in progress are listed as jobs (vol_reclaim_jobs): a
 * deleted snapshot's with its name and, from its first background step,
 * the exact bytes left; a deleted volume's with the data it referenced and
 * held; a job leaves the list in the step that frees its last block; after
 * a restart the work is listed by volume id, total unknown.
 */
Test (volume, reclaim_jobs_list_what_is_left)
{
  struct cairn_dev *dev = mem_pool (128 << 20, NULL);
  struct cairn_pool *pool = open_pool_stepped (dev);
  struct vol_reclaim_job *jobs, job;
  struct cairn_volume *v;
  struct snap_space sp;
  struct vol_info vi;
  uint8_t block[4096];
  uint64_t before, first;
  bool more;
  size_t n;

  cr_assert_eq (vol_reclaim_jobs (pool, &jobs, &n), 0);
  cr_assert_eq (n, 0);
  cr_assert_null (jobs);

  /* A snapshot holding 1024 separate extents. */
  cr_assert_eq (vol_create (pool, "v", 16 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  for (int pass = 0; pass < 2; pass++) {
    for (unsigned i = 0; i < 1024; i++) {
      fill_pattern (block, sizeof block, pass * 4096 + i + 1);
      cr_assert_eq (vol_pwrite (v, block, 4096, 8192 * i, 0), 0);
    }
    if (pass == 0)
      cr_assert_eq (snap_create (pool, "v", "s1"), 0);
  }
  vol_close (v);
  cr_assert_eq (snap_space (pool, "v", "s1", &sp), 0, "%s", cairn_errmsg ());
  before = vol_reclaimed_bytes (pool);
  cr_assert_eq (snap_delete (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
  first = vol_reclaimed_bytes (pool) - before;
  one_job (pool, &job, true);
  cr_assert (job.snapshot);
  cr_assert_str_eq (job.what, "v@s1");
  cr_assert_eq (job.done_bytes, 0);
  cr_assert_eq (job.total_bytes, 0, "not counted before its first step");
  cr_assert_eq (vol_reclaim_step (pool, &more), 0, "%s", cairn_errmsg ());
  one_job (pool, &job, false);
  cr_assert_eq (job.total_bytes, sp.unique - first,
                "the total is what the dry run said, less the delete's step");
  cr_assert_gt (job.done_bytes, 0);
  job = step_job_to_the_end (pool, job);
  cr_assert_eq (vol_reclaimed_bytes (pool) - before, sp.unique);

  /* A deleted volume: its total is the data it referenced. */
  cr_assert_eq (vol_stat (pool, "v", &vi), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "v", 0), 0, "%s", cairn_errmsg ());
  one_job (pool, &job, true);
  cr_assert_not (job.snapshot);
  cr_assert_str_eq (job.what, "v");
  cr_assert_eq (job.total_bytes, vi.referenced + vi.held, "total %" PRIu64
                ", referenced %" PRIu64 ", held %" PRIu64, job.total_bytes,
                vi.referenced, vi.held);
  cr_assert_geq (vi.referenced, 1024 * 4096);
  job = step_job_to_the_end (pool, job);

  /* Half done at a restart: listed again by id, total unknown. */
  cr_assert_eq (vol_create (pool, "w", 16 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "w", &v), 0);
  for (unsigned i = 0; i < 1024; i++) {
    fill_pattern (block, sizeof block, i + 7);
    cr_assert_eq (vol_pwrite (v, block, 4096, 8192 * i, 0), 0);
  }
  vol_close (v);
  cr_assert_eq (vol_delete (pool, "w", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaim_step (pool, &more), 0, "%s", cairn_errmsg ());
  cr_assert (more, "steps of 16 leave work after one");
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  pool = open_pool_stepped (dev);
  one_job (pool, &job, true);
  cr_assert_not (job.snapshot);
  cr_assert (strncmp (job.what, "volume #", 8) == 0, "%s", job.what);
  cr_assert_eq (job.total_bytes, 0);
  step_job_to_the_end (pool, job);
  cr_assert_eq (pool_close (pool), 0);
  assert_fsck_clean (dev, "after the listed reclaims");
  dev_close (dev);
}
