/* Helpers shared by the unit tests of the B-tree (test-btree.c,
 * test-btree-shapes.c): a pool in memory with one user tree, and
 * operations on it under the proper locks.
 */
#ifndef CAIRN_TEST_BTREE_H
#define CAIRN_TEST_BTREE_H

#include <criterion/criterion.h>

#include "fsck.h"
#include "pool.h"
#include "test-pool.h"
#include "test-util.h"

struct env {
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct btree *t;
  uint64_t id;
  uint64_t cache;
};

/* A pool on a memory device with one empty user tree. */
static inline void
env_open (struct env *e, uint64_t size, uint32_t node_size, uint64_t cache)
{
  struct pool_format_opts fo = { .node_size = node_size };
  struct pool_open_opts oo = { .cache_bytes = cache };

  memset (e, 0, sizeof *e);
  e->cache = cache;
  cr_assert_eq (dev_mem_create (size, &e->dev), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_format (e->dev, &fo, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_open (e->dev, &oo, &e->pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (txn_begin (e->pool), 0);
  cr_assert_eq (pool_tree_create (e->pool, &e->id, &e->t), 0, "%s", cairn_errmsg ());
  txn_end (e->pool);
}

/* Close and reopen the pool, then the tree; unless when is NULL, fsck
 * checks the closed pool in between (a failure names when).
 */
static inline void
env_reopen_fsck (struct env *e, const char *when)
{
  struct pool_open_opts oo = { .cache_bytes = e->cache };

  cr_assert_eq (pool_close (e->pool), 0, "%s: %s", when ? when : "reopen",
                cairn_errmsg ());
  if (when)
    assert_fsck_clean (e->dev, when);
  cr_assert_eq (pool_open (e->dev, &oo, &e->pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_tree_open (e->pool, e->id, &e->t), 0, "%s", cairn_errmsg ());
}

/* Close and reopen the pool, then the tree. */
static inline void
env_reopen (struct env *e)
{
  env_reopen_fsck (e, NULL);
}

static inline void
env_close (struct env *e)
{
  cr_assert_eq (pool_close (e->pool), 0, "%s", cairn_errmsg ());
  dev_close (e->dev);
}

/* Insert under the proper locks. */
static inline int
put (struct env *e, const void *k, size_t kl, const void *v, size_t vl,
     unsigned flags)
{
  int r = txn_begin (e->pool);

  if (r < 0)
    return r;
  btree_wrlock (e->t);
  r = btree_insert (e->t, k, kl, v, vl, flags);
  btree_unlock (e->t);
  txn_end (e->pool);
  return r;
}

static inline int
del (struct env *e, const void *k, size_t kl)
{
  int r = txn_begin (e->pool);

  if (r < 0)
    return r;
  btree_wrlock (e->t);
  r = btree_delete (e->t, k, kl);
  btree_unlock (e->t);
  txn_end (e->pool);
  return r;
}

static inline int
get (struct env *e, const void *k, size_t kl, void *v, size_t vmax, size_t *vl)
{
  int r;

  btree_rdlock (e->t);
  r = btree_lookup (e->t, k, kl, v, vmax, vl);
  btree_unlock (e->t);
  return r;
}

/* An 8-byte big-endian key. */
static inline void
k64 (uint8_t k[8], uint64_t v)
{
  put_be64 (k, v);
}

#endif /* CAIRN_TEST_BTREE_H */
