/* Unit tests for pools, superblocks, the space map and commits
 * (engine/pool.c, super.c, spacemap.c, txn.c) and for fsck: opening
 * refuses what it must, corruption is found and named, a full pool says
 * ENOSPC and recovers, failed I/O latches the pool, concurrent commits
 * group and pipeline (a freeze while the commit before writes, whose
 * superblock still goes first), and a thousand power cuts (three hundred
 * with commits overlapping) leave a pool at a durable generation that
 * equals the model and checks clean.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fsck.h"
#include "pool.h"
#include "txn-int.h"
#include "test-pool.h"
#include "test-util.h"

/* Insert one item into tree t of pool. */
static int
put (struct cairn_pool *pool, struct btree *t, uint64_t key, const void *v,
     size_t vl)
{
  uint8_t k[8];
  int r = txn_begin (pool);

  if (r < 0)
    return r;
  put_be64 (k, key);
  btree_wrlock (t);
  r = btree_insert (t, k, 8, v, vl, 0);
  btree_unlock (t);
  txn_end (pool);
  return r;
}

/* Delete one item from tree t of pool. */
static int
del (struct cairn_pool *pool, struct btree *t, uint64_t key)
{
  uint8_t k[8];
  int r = txn_begin (pool);

  if (r < 0)
    return r;
  put_be64 (k, key);
  btree_wrlock (t);
  r = btree_delete (t, k, 8);
  btree_unlock (t);
  txn_end (pool);
  return r;
}

/* ---------------------------------------------------------------- opening */

Test (pool, fresh_pool_opens_and_checks_clean)
{
  uint8_t uuid[16];
  struct cairn_dev *dev = mem_pool (64 << 20, uuid);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct pool_info info;

  pool_info (pool, &info);
  cr_assert_eq (info.generation, 1);
  cr_assert_arr_eq (info.uuid, uuid, 16);
  cr_assert_eq (uuid[6] >> 4, 4, "a random (version 4) UUID");
  cr_assert_eq (uuid[8] >> 6, 2, "of the RFC 4122 variant");
  cr_assert_eq (info.node_size, NODE_SIZE_DEFAULT);
  cr_assert_eq (info.space.total, (64 << 20) / 4096 - 256);
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
}

Test (pool, not_a_pool)
{
  struct cairn_dev *dev;
  struct cairn_pool *pool;

  cr_assert_eq (dev_mem_create (64 << 20, &dev), 0);
  cr_assert_eq (pool_open (dev, NULL, &pool), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "is not a Cairn pool") != NULL, "%s", cairn_errmsg ());
  dev_close (dev);
  cr_assert_eq (dev_mem_create (1 << 20, &dev), 0);
  cr_assert_eq (pool_format (dev, NULL, NULL), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "too small") != NULL, "%s", cairn_errmsg ());
  dev_close (dev);
}

Test (pool, bad_node_size_refused)
{
  struct cairn_dev *dev;
  struct pool_format_opts fo = { .node_size = 12288 };

  cr_assert_eq (dev_mem_create (64 << 20, &dev), 0);
  cr_assert_eq (pool_format (dev, &fo, NULL), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "power of two") != NULL);
  dev_close (dev);
}

/* Rewrite the newest slot with a change (and a valid checksum). */
static void
tamper_newest (struct cairn_dev *dev, void (*fn) (struct superblock *))
{
  struct superblock sb;

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  fn (&sb);
  cr_assert_eq (sb_write (dev, &sb), 0);
}

static void
add_unknown_incompat (struct superblock *sb)
{
  sb->incompat |= 1ull << 40;
}

static void
add_unknown_ro_compat (struct superblock *sb)
{
  sb->ro_compat |= 1ull << 3;
}

Test (pool, unknown_incompat_feature_refused)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool;

  tamper_newest (dev, add_unknown_incompat);
  cr_assert_lt (pool_open (dev, NULL, &pool), 0);
  cr_assert (strstr (cairn_errmsg (), "incompatible features") != NULL, "%s", cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), "0x10000000000") != NULL, "%s", cairn_errmsg ());
  dev_close (dev);
}

Test (pool, unknown_ro_compat_feature_opens_read_only)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool;
  uint64_t id;
  struct btree *t;

  tamper_newest (dev, add_unknown_ro_compat);
  pool = pool_open_ok (dev);
  cr_assert_eq (txn_begin (pool), -EROFS);
  (void) id;
  (void) t;
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

Test (pool, device_of_another_pool_refused)
{
  uint8_t uuid[16], other[16];
  struct cairn_dev *dev = mem_pool (64 << 20, uuid);
  struct pool_open_opts oo = { .expect_uuid = other };
  struct cairn_pool *pool;
  char a[37], b[37];

  memcpy (other, uuid, 16);
  other[0] ^= 1;
  cr_assert_eq (pool_open (dev, &oo, &pool), -EINVAL);
  uuid_format (uuid, a);
  uuid_format (other, b);
  cr_assert (strstr (cairn_errmsg (), a) && strstr (cairn_errmsg (), b),
             "the message names both pools: %s", cairn_errmsg ());
  oo.expect_uuid = uuid;
  cr_assert_eq (pool_open (dev, &oo, &pool), 0);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* A flipped bit in the newest superblock slot: the previous generation is
 * used; in every slot: the pool is refused with the reason.
 */
Test (pool, superblock_bitflip_falls_back_then_refuses)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct pool_info info;
  struct btree *t;
  uint64_t id, gen_a;
  uint8_t byte, v[8];
  size_t vl;

  t = new_tree (pool, &id);
  cr_assert_eq (put (pool, t, 1, "A", 1), 0);
  cr_assert_eq (pool_commit (pool), 0);
  pool_info (pool, &info);
  gen_a = info.generation;
  cr_assert_eq (put (pool, t, 1, "B", 1), 0);
  cr_assert_eq (pool_close (pool), 0);

  /* Flip a bit in the newest slot (generation gen_a + 1). */
  {
    uint64_t off = SB_SLOT_OFFSET ((gen_a + 1) % SB_SLOTS) + 300;
    cr_assert_eq (dev_pread (dev, &byte, 1, off), 0);
    byte ^= 0x80;
    cr_assert_eq (dev_pwrite (dev, &byte, 1, off), 0);
  }
  pool = pool_open_ok (dev);
  pool_info (pool, &info);
  cr_assert_eq (info.generation, gen_a, "fell back to the previous generation");
  cr_assert_eq (pool_tree_open (pool, id, &t), 0);
  {
    uint8_t k[8];
    put_be64 (k, 1);
    cr_assert_eq (btree_lookup (t, k, 8, v, sizeof v, &vl), 0);
    cr_assert_eq (v[0], 'A');
  }
  pool_info (pool, &info);
  cr_assert_eq (pool_close (pool), 0);

  for (unsigned i = 0; i < SB_SLOTS; i++) {
    uint64_t off = SB_SLOT_OFFSET (i) + 100;
    cr_assert_eq (dev_pread (dev, &byte, 1, off), 0);
    byte ^= 0x01;
    cr_assert_eq (dev_pwrite (dev, &byte, 1, off), 0);
  }
  cr_assert_eq (pool_open (dev, NULL, &pool), -EIO);
  cr_assert (strstr (cairn_errmsg (), "no valid superblock") != NULL, "%s", cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), "checksum mismatch") != NULL, "%s", cairn_errmsg ());
  {
    struct problems p;
    struct fsck_report rep = run_fsck (dev, &p);
    cr_assert_eq (rep.errors, 1);
    cr_assert (strstr (p.text, "no valid superblock") != NULL, "%s", p.text);
  }
  dev_close (dev);
}

Test (pool, spacemap_bitflip_detected)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool;
  struct superblock sb;
  uint8_t byte;
  char want[64];

  cr_assert_eq (sb_read_newest (dev, NULL, &sb), 0);
  cr_assert_eq (dev_pread (dev, &byte, 1, sb.spacemap.addr + 97), 0);
  byte ^= 0x20;
  cr_assert_eq (dev_pwrite (dev, &byte, 1, sb.spacemap.addr + 97), 0);
  /* The open reads no map (pool.c): the first change does, and fails. */
  cr_assert_eq (pool_open (dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (txn_begin (pool), -EIO);
  snprintf (want, sizeof want, "space map block %" PRIu64, sb.spacemap.addr / 4096);
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* ---------------------------------------------------------------- fsck */

Test (fsck, finds_leaked_and_free_but_used_blocks)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct btree_root root;
  struct problems p;
  struct fsck_report rep;
  struct btree *t;
  uint64_t id, leak;

  t = new_tree (pool, &id);
  for (uint64_t i = 0; i < 100; i++)
    cr_assert_eq (put (pool, t, i, "x", 1), 0);
  /* A block allocated that nothing references. */
  cr_assert_eq (txn_begin (pool), 0);
  cr_assert_eq (space_alloc (pool_space (pool), 3, 9000, 0, &leak), 0);
  txn_end (pool);
  cr_assert_eq (pool_close (pool), 0);
  rep = run_fsck (dev, &p);
  cr_assert_eq (rep.blocks_leaked, 3, "%s", p.text);
  {
    char want[64];
    snprintf (want, sizeof want, "block %" PRIu64 " is allocated but", leak);
    cr_assert (strstr (p.text, want) != NULL, "%s", p.text);
  }

  /* A node the space map calls free. */
  pool = pool_open_ok (dev);
  cr_assert_eq (pool_tree_open (pool, id, &t), 0);
  btree_get_root (t, &root);
  cr_assert_eq (txn_begin (pool), 0);
  space_free (pool_space (pool), root.bp.addr / 4096, 1, root.bp.birth);
  txn_end (pool);
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (pool_close (pool), 0);
  rep = run_fsck (dev, &p);
  cr_assert_geq (rep.blocks_free_but_used, 1, "%s", p.text);
  cr_assert (strstr (p.text, "space map says it is free") != NULL, "%s", p.text);
  dev_close (dev);
}

/* ---------------------------------------------------------------- ENOSPC */

/* Fill a new tree of pool with 900-byte items, committing every 200,
 * until the pool is full (-ENOSPC, asserted; cairn_errmsg says why);
 * returns how many went in, the tree in *tp and its id in *idp.
 */
static uint64_t
fill_until_full (struct cairn_pool *pool, struct btree **tp, uint64_t *idp)
{
  uint8_t v[900];
  uint64_t n = 0;
  int r = 0;

  *tp = new_tree (pool, idp);
  memset (v, 0xab, sizeof v);
  while (n < 100000 && (r = put (pool, *tp, n, v, sizeof v)) == 0) {
    n++;
    if (n % 200 == 0 && (r = pool_commit (pool)) < 0)
      break;
  }
  cr_assert_eq (r, -ENOSPC, "filling ended with %d: %s", r, cairn_errmsg ());
  return n;
}

Test (pool, full_pool_enospc_then_deletes_and_recovers)
{
  struct cairn_dev *dev = mem_pool (8 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct pool_info info;
  uint8_t v[900];
  struct btree *t;
  uint64_t id, n;
  int r;

  n = fill_until_full (pool, &t, &id);
  cr_assert (strstr (cairn_errmsg (), "no space left") != NULL, "%s", cairn_errmsg ());
  cr_assert_gt (n, 1000);
  /* The pool is consistent and commits on its reserve. */
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  pool_info (pool, &info);
  cr_assert (!info.failed);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_clean (dev);

  /* Deleting works on a full pool (every other key first: copies of
   * half-full leaves, on the reserve), and once whole leaves go (the rest
   * of the first half), frees space for new writes.
   */
  pool = pool_open_ok (dev);
  cr_assert_eq (pool_tree_open (pool, id, &t), 0);
  for (uint64_t j = 0; j < n / 2 + n / 4; j++) {
    uint64_t i = j < n / 2 ? 2 * j : 2 * (j - n / 2) + 1;

    r = del (pool, t, i);
    cr_assert_eq (r, 0, "delete %" PRIu64 ": %s", i, cairn_errmsg ());
  }
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (put (pool, t, n + 1, v, sizeof v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
}

/* Threads deleting on a full pool while the commit thread commits: the
 * deletes' copies come out of the reserve, and the commits must still find
 * room for the space map, or the pool would latch failed because it was
 * full.
 */
struct full_deleter {
  struct cairn_pool *pool;
  struct btree *t;
  uint64_t from, n, step;
  int r;
};

static void *
full_delete_thread (void *arg)
{
  struct full_deleter *d = arg;

  for (uint64_t i = d->from; i < d->n && d->r == 0; i += d->step) {
    int r = del (d->pool, d->t, i);

    if (r < 0 && r != -ENOSPC)
      d->r = r;
  }
  return NULL;
}

Test (pool, full_pool_concurrent_deletes_never_latch)
{
  struct cairn_dev *dev = mem_pool (8 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct full_deleter d[4];
  pthread_t th[4];
  struct pool_info info;
  struct btree *t;
  uint64_t id, n;

  n = fill_until_full (pool, &t, &id);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_start_committer (pool, 50), 0);
  /* Every other key, so that leaves are copied, not dropped. */
  for (int i = 0; i < 4; i++) {
    d[i] = (struct full_deleter) { pool, t, 2 * (uint64_t) i, n, 8, 0 };
    cr_assert_eq (pthread_create (&th[i], NULL, full_delete_thread, &d[i]), 0);
  }
  for (int i = 0; i < 4; i++)
    pthread_join (th[i], NULL);
  pool_info (pool, &info);
  cr_assert (!info.failed, "the pool latched failed: %s", info.failed_why);
  for (int i = 0; i < 4; i++)
    cr_assert_eq (d[i].r, 0, "deleter %d: %d %s", i, d[i].r, cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_clean (dev);
  dev_close (dev);
}

/* ---------------------------------------------------------------- failures */

Test (pool, failed_flush_latches_the_pool)
{
  struct cairn_dev *lower = mem_pool (64 << 20, NULL), *dev;
  struct cairn_pool *pool;
  struct pool_info info;
  struct btree *t;
  uint64_t id, gen;

  cr_assert_eq (dev_fault_create (lower, &dev), 0);
  pool = pool_open_ok (dev);
  t = new_tree (pool, &id);
  cr_assert_eq (put (pool, t, 1, "a", 1), 0);
  cr_assert_eq (pool_commit (pool), 0);
  pool_info (pool, &info);
  gen = info.generation;
  cr_assert_eq (put (pool, t, 2, "b", 1), 0);
  dev_fault_set (dev, DEV_FAULT_FLUSH, 1, false, -EIO);
  cr_assert_eq (pool_commit (pool), -EIO);
  cr_assert (strstr (cairn_errmsg (), "read-only until reopened") != NULL, "%s", cairn_errmsg ());
  /* Latched (TX-4): even with the device healthy again. */
  dev_fault_clear (dev);
  cr_assert_eq (put (pool, t, 3, "c", 1), -EIO);
  cr_assert_eq (pool_commit (pool), -EIO);
  pool_info (pool, &info);
  cr_assert (info.failed);
  pool_close (pool);
  dev_close (dev);

  pool = pool_open_ok (lower);
  pool_info (pool, &info);
  cr_assert_geq (info.generation, gen);
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (lower);
  dev_close (lower);
}

/* ---------------------------------------------------------------- group commit */

struct writer {
  struct cairn_pool *pool;
  struct btree *t;
  uint64_t base;
  int err;
};

static void *
writer_main (void *arg)
{
  struct writer *w = arg;

  for (uint64_t i = 0; i < 2000 && w->err == 0; i++) {
    uint8_t v[16];
    fill_pattern (v, sizeof v, w->base + i);
    w->err = put (w->pool, w->t, w->base + i, v, sizeof v);
    if (w->err == 0 && i % 25 == 0)
      w->err = pool_commit (w->pool);
  }
  return NULL;
}

Test (pool, concurrent_writers_and_group_commit)
{
  struct cairn_dev *dev = mem_pool (128 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct writer w[4];
  pthread_t th[4];
  struct btree *t[4];
  uint64_t id[4];
  struct pool_info info;

  for (int i = 0; i < 4; i++)
    t[i] = new_tree (pool, &id[i]);
  cr_assert_eq (pool_start_committer (pool, 5), 0);
  for (int i = 0; i < 4; i++) {
    w[i] = (struct writer) { pool, t[i], (uint64_t) i << 32, 0 };
    pthread_create (&th[i], NULL, writer_main, &w[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join (th[i], NULL);
    cr_assert_eq (w[i].err, 0, "writer %d: %s", i, cairn_errmsg ());
  }
  pool_info (pool, &info);
  cr_assert_lt (info.commits, 4 * 80 + 1000, "commits were grouped");
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);

  pool = pool_open_ok (dev);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq (pool_tree_open (pool, id[i], &t[i]), 0);
    for (uint64_t j = 0; j < 2000; j++) {
      uint8_t k[8], v[16], want[16];
      size_t vl;
      put_be64 (k, ((uint64_t) i << 32) + j);
      cr_assert_eq (btree_lookup (t[i], k, 8, v, sizeof v, &vl), 0);
      fill_pattern (want, sizeof want, ((uint64_t) i << 32) + j);
      cr_assert_arr_eq (v, want, 16);
    }
  }
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* A writer of keys spread over the key space (so that every put dirties
 * another leaf), counting its progress.
 */
struct spreader {
  struct cairn_pool *pool;
  struct btree *t;
  unsigned n;
  unsigned done;              /* atomic */
  int err;
};

static void *
spreader_main (void *arg)
{
  struct spreader *w = arg;
  uint8_t v[200];

  for (unsigned i = 0; i < w->n && w->err == 0; i++) {
    uint64_t key = (uint64_t) i * 0x9e3779b97f4a7c15ull;

    fill_pattern (v, sizeof v, key);
    w->err = put (w->pool, w->t, key, v, sizeof v);
    __atomic_store_n (&w->done, i + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* The write throttle (txn_end): while a commit's flush is stuck, a writer
 * stops once dirty metadata passes twice the dirty limit rather than
 * filling memory, and goes on when the commit does.
 */
Test (pool, writers_wait_for_a_slow_commit)
{
  struct cairn_dev *mem = mem_pool (128 << 20, NULL), *dev;
  struct pool_open_opts oo = { .cache_bytes = 4 << 20,
                               .dirty_limit_bytes = 256 << 10 };
  struct cairn_pool *pool;
  struct spreader w = { .n = 20000 };
  struct pool_info info;
  pthread_t th;
  uint64_t id, dirty, stalled_at;
  unsigned last;
  int waited;

  cr_assert_eq (dev_fault_create (mem, &dev), 0);
  cr_assert_eq (pool_open (dev, &oo, &pool), 0, "%s", cairn_errmsg ());
  w.pool = pool;
  w.t = new_tree (pool, &id);
  cr_assert_eq (pool_start_committer (pool, 60000), 0);
  dev_fault_hold (dev, DEV_FAULT_FLUSH, true);
  pthread_create (&th, NULL, spreader_main, &w);

  /* A commit gets stuck in its flush, then the writer stops. */
  WAIT_UNTIL (dev_fault_waiting (dev, DEV_FAULT_FLUSH) > 0);
  cr_assert_gt (dev_fault_waiting (dev, DEV_FAULT_FLUSH), 0,
                "no commit reached its flush in 10 s");
  last = __atomic_load_n (&w.done, __ATOMIC_ACQUIRE);
  for (waited = 0; waited < 100; waited++) {
    usleep (100000);
    if (__atomic_load_n (&w.done, __ATOMIC_ACQUIRE) == last)
      break;
    last = __atomic_load_n (&w.done, __ATOMIC_ACQUIRE);
  }
  stalled_at = last;
  cr_assert_lt (stalled_at, w.n, "the writer finished while no commit could");
  pool_info (pool, &info);
  dirty = info.cache.dirty_nodes * info.node_size;
  /* Twice the limit, plus what one put dirties past it (a path and the
   * nodes a split adds).
   */
  cr_assert_leq (dirty, 2 * oo.dirty_limit_bytes + 8 * info.node_size,
                 "%" PRIu64 " bytes dirty with a %" PRIu64 " limit", dirty,
                 oo.dirty_limit_bytes);

  dev_fault_hold (dev, DEV_FAULT_FLUSH, false);
  pthread_join (th, NULL);
  cr_assert_eq (w.err, 0, "%s", cairn_errmsg ());
  cr_assert_eq (w.done, w.n);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  assert_clean (mem);
  dev_close (mem);
}

/* A thread that commits the pool once. */
struct committer_arg {
  struct cairn_pool *pool;
  int r;
};

static void *
commit_main (void *arg)
{
  struct committer_arg *a = arg;

  a->r = pool_commit (a->pool);
  return NULL;
}

/* Two commits in flight, for the TX-7 tests: on a fault device over mem,
 * key 1 is in tree id; the first commit (thread ta, result in a) is held
 * at its first operation of kind held, key 2 is written into generation
 * gen, and the second commit (tb, b) freezes gen meanwhile.
 */
struct two_commits {
  struct cairn_dev *mem, *dev;
  struct cairn_pool *pool;
  struct btree *t;
  uint64_t id, gen;
  enum dev_fault_op held;
  struct committer_arg a, b;
  pthread_t ta, tb;
};

static void
two_commits_start (struct two_commits *tc, uint64_t size,
                   enum dev_fault_op held)
{
  uint64_t v = 1;

  tc->mem = mem_pool (size, NULL);
  tc->held = held;
  cr_assert_eq (dev_fault_create (tc->mem, &tc->dev), 0);
  tc->pool = pool_open_ok (tc->dev);
  tc->t = new_tree (tc->pool, &tc->id);
  cr_assert_eq (put (tc->pool, tc->t, 1, &v, sizeof v), 0);
  dev_fault_hold (tc->dev, held, true);
  tc->a = (struct committer_arg) { tc->pool, 0 };
  pthread_create (&tc->ta, NULL, commit_main, &tc->a);
  WAIT_UNTIL (dev_fault_waiting (tc->dev, held) > 0);
  cr_assert_eq (dev_fault_waiting (tc->dev, held), 1,
                "the first commit was not held in its I/O within 10 s");
  /* The first commit froze gen - 1 and writes it; key 2 goes into gen. */
  tc->gen = pool_open_gen (tc->pool);
  v = 2;
  cr_assert_eq (put (tc->pool, tc->t, 2, &v, sizeof v), 0);
  tc->b = (struct committer_arg) { tc->pool, 0 };
  pthread_create (&tc->tb, NULL, commit_main, &tc->b);
  WAIT_UNTIL (pool_open_gen (tc->pool) != tc->gen);
  cr_assert_eq (pool_open_gen (tc->pool), tc->gen + 1, "the second commit "
                "did not freeze while the first one waited in its I/O");
}

/* Let the held I/O go: both commits succeed, and the pool is durable at
 * the second one's generation.
 */
static void
two_commits_finish (struct two_commits *tc)
{
  struct pool_info info;

  dev_fault_hold (tc->dev, tc->held, false);
  pthread_join (tc->ta, NULL);
  pthread_join (tc->tb, NULL);
  cr_assert_eq (tc->a.r, 0, "%s", cairn_errmsg ());
  cr_assert_eq (tc->b.r, 0, "%s", cairn_errmsg ());
  pool_info (tc->pool, &info);
  cr_assert_eq (info.generation, tc->gen, "the pool is durable at the "
                "second commit's generation");
}

/* Close the pool and its devices; the pool checks clean. */
static void
two_commits_close (struct two_commits *tc)
{
  cr_assert_eq (pool_close (tc->pool), 0);
  dev_close (tc->dev);
  assert_clean (tc->mem);
  dev_close (tc->mem);
}

/* TX-7: while a commit waits in its I/O, the next one freezes at once
 * (the open generation moves on) and holds exactly what was written
 * before it; only its own writing waits.  The pool then lands on the
 * second commit's generation, without what was written after it froze.
 */
Test (pool, a_freeze_does_not_wait_for_the_commit_before)
{
  const uint64_t size = 64 << 20;
  struct two_commits tc;
  struct cairn_dev *copy;
  uint64_t v = 3;
  uint8_t k[8], val[8];
  size_t vl;

  two_commits_start (&tc, size, DEV_FAULT_FLUSH);
  /* Key 3 goes into gen + 1, after the second freeze. */
  cr_assert_eq (put (tc.pool, tc.t, 3, &v, sizeof v), 0);
  two_commits_finish (&tc);

  /* What a power cut now would find: keys 1 and 2, not 3, and clean. */
  copy = copy_dev (tc.mem, size);
  assert_clean (copy);
  {
    struct cairn_pool *p2 = pool_open_ok (copy);
    struct btree *t2;

    cr_assert_eq (pool_tree_open (p2, tc.id, &t2), 0);
    for (uint64_t key = 1; key <= 3; key++) {
      put_be64 (k, key);
      if (key < 3) {
        uint64_t got;

        cr_assert_eq (btree_lookup (t2, k, 8, val, sizeof val, &vl), 0,
                      "key %" PRIu64 " is lost", key);
        memcpy (&got, val, sizeof got);
        cr_assert_eq (got, key);
      }
      else
        cr_assert_eq (btree_lookup (t2, k, 8, val, sizeof val, &vl), -ENOENT,
                      "key 3, written after the freeze, is in its generation");
    }
    cr_assert_eq (pool_close (p2), 0);
  }
  dev_close (copy);
  two_commits_close (&tc);
}

/* TX-7: a frozen generation writes nothing before the one before it is
 * durable.  The first commit is held at its first write; the second
 * freezes meanwhile and must not issue a write of its own (with writes
 * held, one would show as a second waiter) until the first is done.
 */
Test (pool, a_frozen_commit_writes_after_the_one_before)
{
  struct two_commits tc;

  two_commits_start (&tc, 64 << 20, DEV_FAULT_WRITE);
  /* Time for the second commit to issue a write, were it allowed to. */
  usleep (200000);
  cr_assert_eq (dev_fault_waiting (tc.dev, DEV_FAULT_WRITE), 1, "the second "
                "commit wrote before the first one was durable");
  two_commits_finish (&tc);
  two_commits_close (&tc);
}

/* Two threads hand a mutation over to each other: each enters (txn_begin)
 * while the other is still inside, so that the commit lock's count of
 * mutations in progress never drops to zero while both keep going.  A
 * thread inside waits for the other to enter after it, at most
 * RELAY_WAIT_MS, then leaves; the relay ends when told to stop, or after
 * RELAY_MAX handovers (some seconds).
 */
enum { RELAY_MAX = 500000, RELAY_WAIT_MS = 20 };

struct relay {
  struct cairn_pool *pool;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  unsigned entries;           /* under lock */
  bool stop;                  /* under lock */
  int err;                    /* under lock */
};

static void *
relay_main (void *arg)
{
  struct relay *rl = arg;

  for (;;) {
    struct timespec until;
    unsigned mine;
    int r;

    pthread_mutex_lock (&rl->lock);
    if (rl->entries >= RELAY_MAX || rl->stop || rl->err) {
      pthread_mutex_unlock (&rl->lock);
      return NULL;
    }
    pthread_mutex_unlock (&rl->lock);
    r = txn_begin (rl->pool);
    pthread_mutex_lock (&rl->lock);
    if (r < 0) {
      rl->err = r;
      pthread_mutex_unlock (&rl->lock);
      return NULL;
    }
    mine = ++rl->entries;
    pthread_cond_broadcast (&rl->cond);
    clock_gettime (CLOCK_REALTIME, &until);
    until.tv_nsec += RELAY_WAIT_MS * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (rl->entries == mine && mine < RELAY_MAX &&
           pthread_cond_timedwait (&rl->cond, &rl->lock, &until) == 0)
      ;
    pthread_mutex_unlock (&rl->lock);
    txn_end (rl->pool);
  }
}

/* TX-6: a commit waits for the mutations in progress, not for the load.
 * Mutations that overlap without end (an NBD server's writer threads
 * under load) must not keep the freeze out: once it waits, new mutations
 * wait behind it.  Otherwise a flush or a snapshot waited for seconds
 * while writes went on.
 */
Test (pool, overlapping_mutations_do_not_starve_a_commit)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct relay rl = { .pool = pool };
  struct pool_info before, after;
  unsigned at_start, at_commit;
  pthread_t th[2];

  pthread_mutex_init (&rl.lock, NULL);
  pthread_cond_init (&rl.cond, NULL);
  pool_info (pool, &before);
  for (int i = 0; i < 2; i++)
    pthread_create (&th[i], NULL, relay_main, &rl);
  /* Wait until the relay runs (a few handovers). */
  for (;;) {
    pthread_mutex_lock (&rl.lock);
    at_start = rl.entries;
    pthread_mutex_unlock (&rl.lock);
    if (at_start >= 10)
      break;
    usleep (1000);
  }
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  pthread_mutex_lock (&rl.lock);
  at_commit = rl.entries;
  rl.stop = true;
  pthread_mutex_unlock (&rl.lock);
  for (int i = 0; i < 2; i++)
    pthread_join (th[i], NULL);
  cr_assert_eq (rl.err, 0, "%s", cairn_errmsg ());
  cr_assert_lt (at_commit, RELAY_MAX, "the commit got in only when the "
                "mutations stopped (%u handovers after it asked)",
                at_commit - at_start);
  pool_info (pool, &after);
  cr_assert_gt (after.generation, before.generation);
  pthread_cond_destroy (&rl.cond);
  pthread_mutex_destroy (&rl.lock);
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
}

/* ---------------------------------------------------------------- power cuts */

#define PC_KEYS 400u
#define PC_MAX_GENS 256u

struct pc_model {
  uint64_t ver[PC_KEYS];      /* 0: absent */
};

/* The workload: deterministic from wseed; commits every 40 operations,
 * with a space map log bound of 40 records so that the cuts land in
 * appends, rewrites of the newest log block and condenses alike
 * (spacemap.c SM-3).
 * models[g] is the state generation g holds, for every generation whose
 * commit started.  Returns the newest acknowledged generation.
 */
static uint64_t
pc_workload (struct cairn_dev *dev, uint64_t wseed, struct pc_model *models,
             uint64_t *idp)
{
  struct pool_open_opts oo = { .dirty_limit_bytes = 1ull << 40,
                               .spacemap_log_min = 40 };
  struct rng r = { wseed };
  struct pc_model cur = { { 0 } };
  struct cairn_pool *pool;
  struct pool_info info;
  struct btree *t;
  uint64_t acked, ver = 1;

  if (pool_open (dev, &oo, &pool) < 0)
    cr_assert_fail ("open before the cut: %s", cairn_errmsg ());
  pool_info (pool, &info);
  acked = info.generation;
  models[acked] = cur;
  if (txn_begin (pool) < 0 || pool_tree_create (pool, idp, &t) < 0) {
    pool_close (pool);
    return acked;
  }
  txn_end (pool);
  for (unsigned op = 1; op <= 1200; op++) {
    uint32_t key = (uint32_t) rng_below (&r, PC_KEYS);
    uint8_t k[8], v[64];
    int rc;

    put_be64 (k, key);
    if (txn_begin (pool) < 0)
      break;
    btree_wrlock (t);
    if (rng_below (&r, 4) == 0) {
      rc = btree_delete (t, k, 8);
      if (rc == 0 || rc == -ENOENT)
        cur.ver[key] = 0, rc = 0;
    }
    else {
      fill_pattern (v, 8 + ver % 56, ver);
      rc = btree_insert (t, k, 8, v, 8 + ver % 56, 0);
      if (rc == 0)
        cur.ver[key] = ver++;
    }
    btree_unlock (t);
    txn_end (pool);
    if (rc < 0)
      break;
    if (op % 40 == 0) {
      pool_info (pool, &info);
      cr_assert_lt (info.open_generation, PC_MAX_GENS);
      models[info.open_generation] = cur;
      if (pool_commit (pool) < 0)
        break;
      pool_info (pool, &info);
      acked = info.generation;
    }
  }
  pool_close (pool);
  return acked;
}

/* Every key of tree t holds the version ver[key] gives (0: absent), after
 * cut c at generation gen.
 */
static void
assert_keys (struct btree *t, const uint64_t ver[PC_KEYS], unsigned c,
             uint64_t gen)
{
  for (uint32_t key = 0; key < PC_KEYS; key++) {
    uint8_t k[8], v[64], want[64];
    size_t vl;
    int rc;

    put_be64 (k, key);
    rc = btree_lookup (t, k, 8, v, sizeof v, &vl);
    if (ver[key] == 0) {
      cr_assert_eq (rc, -ENOENT, "cut %u gen %" PRIu64 ": key %" PRIu32
                    " should be absent (%s)", c, gen, key, cairn_errmsg ());
      continue;
    }
    cr_assert_eq (rc, 0, "cut %u gen %" PRIu64 ": key %" PRIu32 ": %s", c,
                  gen, key, cairn_errmsg ());
    cr_assert_eq (vl, 8 + ver[key] % 56);
    fill_pattern (want, vl, ver[key]);
    cr_assert_arr_eq (v, want, vl, "cut %u gen %" PRIu64 ": value of key %"
                      PRIu32, c, gen, key);
  }
}

/* Open the pool that cut c (at write cut_at) left: it must open, at a
 * generation at least as new as the acknowledged one (TX-1, TX-3).
 */
static struct cairn_pool *
open_after_cut (struct cairn_dev *lower, unsigned c, uint64_t cut_at,
                uint64_t acked, struct pool_info *info)
{
  struct cairn_pool *pool;

  if (pool_open (lower, NULL, &pool) < 0)
    cr_assert_fail ("cut %u (at write %" PRIu64 "): pool does not open: %s",
                    c, cut_at, cairn_errmsg ());
  pool_info (pool, info);
  cr_assert_geq (info->generation, acked, "cut %u: generation %" PRIu64
                 " is older than the acknowledged %" PRIu64, c,
                 info->generation, acked);
  return pool;
}

/* After a cut the pool opens at a generation at least as new as the last
 * acknowledged commit (TX-1, TX-3), equal to the model of that generation,
 * and fsck is clean.
 */
Test (pool, power_cut_thousand_points, .timeout = 900)
{
  uint64_t seed = test_seed ("pool.power_cut_thousand_points", 1202);
  struct pc_model *models = calloc (PC_MAX_GENS, sizeof *models);
  struct cairn_dev *lower, *pc;
  uint64_t writes, id;
  const unsigned cuts = test_work (1000);
  unsigned newer = 0, at_acked = 0, torn_open = 0;
  uint64_t gens_total = 0;

  /* A dry run counts the workload's device writes and flushes. */
  lower = mem_pool (32 << 20, NULL);
  cr_assert_eq (dev_powercut_create (lower, seed, &pc), 0);
  pc_workload (pc, seed, models, &id);
  writes = dev_powercut_ops (pc);
  dev_close (pc);
  dev_close (lower);
  cr_assert_gt (writes, 100, "the workload writes %" PRIu64 " times", writes);

  for (unsigned c = 0; c < cuts; c++) {
    uint64_t cut_at = 1 + (c * writes) / cuts, acked, id2 = 0;
    struct cairn_pool *pool;
    struct pool_info info;
    struct btree *t;

    memset (models, 0, PC_MAX_GENS * sizeof *models);
    lower = mem_pool (32 << 20, NULL);
    cr_assert_eq (dev_powercut_create (lower, seed * 1000003 + c, &pc), 0);
    dev_powercut_arm (pc, cut_at);
    acked = pc_workload (pc, seed, models, &id2);
    if (!dev_powercut_is_cut (pc))
      dev_powercut_cut (pc, true);
    dev_close (pc);

    pool = open_after_cut (lower, c, cut_at, acked, &info);
    newer += info.generation > acked;
    at_acked += info.generation == acked;
    gens_total += info.generation;
    torn_open += id2 != 0;
    if (id2 != 0 && pool_tree_open (pool, id2, &t) == 0)
      assert_keys (t, models[info.generation].ver, c, info.generation);
    cr_assert_eq (pool_close (pool), 0);
    assert_clean (lower);
    dev_close (lower);
  }
  fprintf (stderr, "pool.power_cut_thousand_points: %u cuts over %" PRIu64
           " writes and flushes: %u at the acknowledged generation, %u at a newer one "
           "(commit in flight), mean generation %.1f\n", cuts, writes, at_acked,
           newer, (double) gens_total / cuts);
  cr_assert_gt (at_acked, 0);
  cr_assert_gt (newer, 0, "some cuts land after a superblock write");
  free (models);
}

/* ---------------------------------------------------------------- power cuts, pipelined */

/* One change of the pipelined workload: key set to version ver (0:
 * deleted) in generation gen.
 */
struct pc_op {
  uint32_t key;
  uint64_t ver, gen;
};

#define PC2_OPS 800u            /* per writer */

/* One of the two writers of the pipelined workload: the keys k with
 * k % 2 == w, versions w + 1, w + 3, ...; a commit every 10 changes.
 */
struct pc2_writer {
  struct cairn_pool *pool;
  struct btree *t;
  unsigned w;
  uint64_t seed;
  struct pc_op *ops;
  size_t nops;
  uint64_t acked;
};

static void *
pc2_writer_main (void *arg)
{
  struct pc2_writer *wr = arg;
  struct rng r = { wr->seed + wr->w };
  uint64_t ver = 1 + wr->w;
  struct pool_info info;

  for (unsigned op = 1; op <= PC2_OPS; op++) {
    uint32_t key = (uint32_t) (rng_below (&r, PC_KEYS / 2) * 2 + wr->w);
    uint8_t k[8], v[64];
    uint64_t gen;
    int rc;

    put_be64 (k, key);
    if (txn_begin (wr->pool) < 0)
      break;
    gen = pool_open_gen (wr->pool);
    btree_wrlock (wr->t);
    if (rng_below (&r, 4) == 0) {
      rc = btree_delete (wr->t, k, 8);
      if (rc == 0 || rc == -ENOENT) {
        wr->ops[wr->nops++] = (struct pc_op) { key, 0, gen };
        rc = 0;
      }
    }
    else {
      fill_pattern (v, 8 + ver % 56, ver);
      rc = btree_insert (wr->t, k, 8, v, 8 + ver % 56, 0);
      if (rc == 0) {
        wr->ops[wr->nops++] = (struct pc_op) { key, ver, gen };
        ver += 2;
      }
    }
    btree_unlock (wr->t);
    txn_end (wr->pool);
    if (rc < 0)
      break;
    if (op % 10 == 0) {
      if (pool_commit (wr->pool) < 0)
        break;
      pool_info (wr->pool, &info);
      wr->acked = info.generation;
    }
  }
  return NULL;
}

/* The workload of power_cut_pipelined_commits: two writers on one tree,
 * each committing every 10 changes, and the commit thread every
 * millisecond, so that one commit freezes while the one before it writes
 * (TX-7).  Each change notes the generation it went into (stable inside
 * txn_begin, since a freeze holds txn_lock exclusive).  Returns the newest
 * generation a writer's pool_commit acknowledged.
 */
static uint64_t
pc2_workload (struct cairn_dev *dev, uint64_t wseed, struct pc2_writer wr[2],
              uint64_t *idp, uint64_t *tree_gen)
{
  struct pool_open_opts oo = { .dirty_limit_bytes = 1ull << 40,
                               .spacemap_log_min = 40 };
  struct cairn_pool *pool;
  struct pool_info info;
  struct btree *t;
  pthread_t th[2];
  uint64_t acked;

  *tree_gen = UINT64_MAX;
  for (unsigned w = 0; w < 2; w++)
    wr[w].nops = 0;
  if (pool_open (dev, &oo, &pool) < 0)
    cr_assert_fail ("open before the cut: %s", cairn_errmsg ());
  pool_info (pool, &info);
  acked = info.generation;
  if (txn_begin (pool) < 0)
    goto out;
  *tree_gen = pool_open_gen (pool);
  if (pool_tree_create (pool, idp, &t) < 0) {
    txn_end (pool);
    goto out;
  }
  txn_end (pool);
  if (pool_start_committer (pool, 1) < 0)
    goto out;
  for (unsigned w = 0; w < 2; w++) {
    wr[w].pool = pool;
    wr[w].t = t;
    wr[w].w = w;
    wr[w].seed = wseed;
    wr[w].acked = acked;
    pthread_create (&th[w], NULL, pc2_writer_main, &wr[w]);
  }
  for (unsigned w = 0; w < 2; w++) {
    pthread_join (th[w], NULL);
    acked = MAX (acked, wr[w].acked);
  }
 out:
  pool_stop_committer (pool);
  pool_close (pool);
  return acked;
}

/* A device over dev whose writes take 20 us and flushes 300 us, as a
 * disk's take time: without it a commit on a memory device is over before
 * another can freeze, and the writes of two commits never interleave.
 */
static struct cairn_dev *
slow_flushes (struct cairn_dev *dev)
{
  struct cairn_dev *slow;

  cr_assert_eq (dev_fault_create (dev, &slow), 0);
  dev_fault_delay (slow, DEV_FAULT_WRITE, 20);
  dev_fault_delay (slow, DEV_FAULT_FLUSH, 300);
  return slow;
}

/* As power_cut_thousand_points, with commits that overlap: after a cut at
 * any write or flush the pool opens at a generation at least as new as
 * the last acknowledged one, holding exactly the changes made in that
 * generation and before it, and fsck is clean.  The cut points are spread
 * over the dry run's writes; with two threads committing, each run's
 * writes differ, so a cut lands where it lands.
 */
Test (pool, power_cut_pipelined_commits, .timeout = 900)
{
  uint64_t seed = test_seed ("pool.power_cut_pipelined_commits", 1204);
  struct pc2_writer wr[2] = { { .ops = calloc (PC2_OPS, sizeof (struct pc_op)) },
                              { .ops = calloc (PC2_OPS, sizeof (struct pc_op)) } };
  struct cairn_dev *lower, *pc, *slow;
  uint64_t writes, id, tree_gen;
  const unsigned cuts = test_work (300);
  unsigned newer = 0;

  cr_assert (wr[0].ops && wr[1].ops);
  lower = mem_pool (32 << 20, NULL);
  cr_assert_eq (dev_powercut_create (lower, seed, &pc), 0);
  slow = slow_flushes (pc);
  pc2_workload (slow, seed, wr, &id, &tree_gen);
  writes = dev_powercut_ops (pc);
  dev_close (slow);
  dev_close (pc);
  dev_close (lower);
  cr_assert_eq (wr[0].nops + wr[1].nops, 2 * PC2_OPS);
  cr_assert_gt (writes, 100, "the workload writes %" PRIu64 " times", writes);

  for (unsigned c = 0; c < cuts; c++) {
    uint64_t cut_at = 1 + (c * writes) / cuts, acked, id2 = 0;
    uint64_t want[PC_KEYS] = { 0 };
    struct cairn_pool *pool;
    struct pool_info info;
    struct btree *t;

    lower = mem_pool (32 << 20, NULL);
    cr_assert_eq (dev_powercut_create (lower, seed * 1000003 + c, &pc), 0);
    dev_powercut_arm (pc, cut_at);
    slow = slow_flushes (pc);
    acked = pc2_workload (slow, seed, wr, &id2, &tree_gen);
    if (!dev_powercut_is_cut (pc))
      dev_powercut_cut (pc, true);
    dev_close (slow);
    dev_close (pc);

    pool = open_after_cut (lower, c, cut_at, acked, &info);
    newer += info.generation > acked;
    for (unsigned w = 0; w < 2; w++)
      for (size_t i = 0; i < wr[w].nops; i++)
        if (wr[w].ops[i].gen <= info.generation)
          want[wr[w].ops[i].key] = wr[w].ops[i].ver;
    if (tree_gen > info.generation)
      cr_assert (id2 == 0 || pool_tree_open (pool, id2, &t) < 0,
                 "cut %u: the tree of generation %" PRIu64 " is there at %"
                 PRIu64, c, tree_gen, info.generation);
    else {
      cr_assert_eq (pool_tree_open (pool, id2, &t), 0, "cut %u: %s", c,
                    cairn_errmsg ());
      assert_keys (t, want, c, info.generation);
    }
    cr_assert_eq (pool_close (pool), 0);
    assert_clean (lower);
    dev_close (lower);
  }
  fprintf (stderr, "pool.power_cut_pipelined_commits: %u cuts over about %"
           PRIu64 " writes and flushes, %u at a newer generation than the "
           "acknowledged one\n", cuts, writes, newer);
  free (wr[0].ops);
  free (wr[1].ops);
}
