/* Helpers shared by the unit tests of pools (test-txn, test-spacemap,
 * test-volume, test-send, ...): in-memory pools, fsck with its problems
 * collected, new trees.
 */
#ifndef CAIRN_TEST_POOL_H
#define CAIRN_TEST_POOL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fsck.h"
#include "pool.h"
#include "volume.h"

/* Blocks in use, leaving out the space map's own (its log grows with every
 * commit): what deleting everything must bring a pool back to.
 */
static inline uint64_t
pool_blocks_in_use (struct cairn_pool *pool)
{
  struct pool_info pi;

  pool_info (pool, &pi);
  return pi.space.allocated - pi.spacemap_blocks;
}

/* Collect fsck's problem lines. */
struct problems {
  char text[8192];
  unsigned n;
};

static inline void
note_problem (void *opaque, const char *msg)
{
  struct problems *p = opaque;
  size_t len = strlen (p->text);

  /* Keep what fits: past it, the size below would wrap around. */
  p->n++;
  if (len + 2 < sizeof p->text)
    snprintf (p->text + len, sizeof p->text - len, "%.*s\n",
              (int) (sizeof p->text - len - 2), msg);
}

/* Run fsck, collecting problems. */
static inline struct fsck_report
run_fsck (struct cairn_dev *dev, struct problems *p)
{
  struct fsck_opts o = { .problem = note_problem, .opaque = p };
  struct fsck_report rep;

  memset (p, 0, sizeof *p);
  cr_assert_eq (fsck_pool (dev, &o, &rep), 0, "%s", cairn_errmsg ());
  return rep;
}

/* fsck must find nothing; its report. */
static inline struct fsck_report
assert_clean (struct cairn_dev *dev)
{
  struct problems p;
  struct fsck_report rep = run_fsck (dev, &p);

  cr_assert_eq (rep.errors, 0, "fsck: %s", p.text);
  return rep;
}

/* fsck must find nothing; a failure says when (what the test had done)
 * and what fsck found.
 */
static inline void
assert_fsck_clean (struct cairn_dev *dev, const char *when)
{
  struct problems p;
  struct fsck_report rep = run_fsck (dev, &p);

  cr_assert_eq (rep.errors, 0, "%s: fsck found %" PRIu64 " problems (leaked %"
                PRIu64 ", free but used %" PRIu64 "):\n%s", when, rep.errors,
                rep.blocks_leaked, rep.blocks_free_but_used, p.text);
}

/* A new pool on an in-memory device (uuid_out may be NULL). */
static inline struct cairn_dev *
mem_pool (uint64_t size, uint8_t uuid[16])
{
  struct cairn_dev *dev;

  cr_assert_eq (dev_mem_create (size, &dev), 0);
  cr_assert_eq (pool_format (dev, NULL, uuid), 0, "%s", cairn_errmsg ());
  return dev;
}

/* Open the pool on dev, with the default options. */
static inline struct cairn_pool *
pool_open_ok (struct cairn_dev *dev)
{
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  return pool;
}

/* A fake clock for pool_set_clock: the seconds *opaque holds, which the
 * test moves.
 */
static inline int64_t
test_clock (void *opaque)
{
  return *(int64_t *) opaque;
}

/* Open the pool on dev without background work (the test steps the
 * reaper and the collector), on the fake clock *now.
 */
static inline struct cairn_pool *
pool_open_clock (struct cairn_dev *dev, int64_t *now)
{
  struct pool_open_opts o = { .no_background = true };
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (dev, &o, &pool), 0, "%s", cairn_errmsg ());
  pool_set_clock (pool, test_clock, now);
  return pool;
}

/* Read the first len bytes of export into buf: 0, or the error of the
 * open or the read.
 */
static inline int
export_read (struct cairn_pool *pool, const char *export, void *buf,
             uint32_t len)
{
  struct cairn_volume *v;
  int r = vol_open (pool, export, &v);

  if (r < 0)
    return r;
  r = vol_pread (v, buf, len, 0);
  vol_close (v);
  return r;
}

/* A new, empty tree in its own transaction. */
static inline struct btree *
new_tree (struct cairn_pool *pool, uint64_t *idp)
{
  struct btree *t;

  cr_assert_eq (txn_begin (pool), 0);
  cr_assert_eq (pool_tree_create (pool, idp, &t), 0, "%s", cairn_errmsg ());
  txn_end (pool);
  return t;
}

/* Blocks in use (pool_blocks_in_use) of the empty pool *poolp on dev,
 * with the catalog's own trees in place (a volume made, deleted and
 * reclaimed), after a close, a clean fsck and a reopen: what deleting
 * everything must bring the pool back to.
 */
static inline uint64_t
empty_pool_blocks (struct cairn_dev *dev, struct cairn_pool **poolp)
{
  cr_assert_eq (vol_create (*poolp, "probe", 1 << 20, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_delete (*poolp, "probe", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (*poolp, NULL, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (pool_close (*poolp), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, "the empty pool");
  *poolp = pool_open_ok (dev);
  return pool_blocks_in_use (*poolp);
}

/* A copy of a device's bytes in a new memory device: what a crash would
 * leave at this point, when nothing is being written.  A new memory device
 * reads as zeros, so chunks of zeros are not written (tests that copy a
 * mostly empty pool many times spent their time faulting pages in).
 */
static inline struct cairn_dev *
copy_dev (struct cairn_dev *dev, uint64_t size)
{
  static const uint8_t zero[64 << 10];
  struct cairn_dev *copy;
  uint8_t *buf = malloc (sizeof zero);

  cr_assert_not_null (buf);
  cr_assert_eq (size % sizeof zero, 0);
  cr_assert_eq (dev_mem_create (size, &copy), 0);
  for (uint64_t off = 0; off < size; off += sizeof zero) {
    cr_assert_eq (dev_pread (dev, buf, sizeof zero, off), 0);
    if (memcmp (buf, zero, sizeof zero) != 0)
      cr_assert_eq (dev_pwrite (copy, buf, sizeof zero, off), 0);
  }
  free (buf);
  return copy;
}

#endif /* CAIRN_TEST_POOL_H */
