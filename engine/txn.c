/* Cairn engine: generations and the commit pipeline.
 *
 * Design note.
 *
 * Invariants (tests cite them as TX-n):
 *  TX-1  A crash at any instant leaves the pool at its last durable
 *        generation: a commit writes only to blocks that no durable
 *        generation references, flushes, then writes the superblock slot of
 *        its generation (never the slot of the newest durable one), then
 *        flushes again.
 *  TX-2  A block freed in generation G is allocatable only once G is
 *        durable (space layer, deferred frees); a block the last durable
 *        generation references is never overwritten.
 *  TX-3  Every change made before pool_commit was called is durable when
 *        it returns 0.
 *  TX-4  Once a commit's I/O has failed, the pool is latched failed: every
 *        mutation and every commit fails with -EIO until it is reopened,
 *        because the state on disk is no longer known.  So is a commit
 *        whose freeze failed (the layer above may fail it on purpose:
 *        CAT-1 in catalog.c), since its trees hold changes half made.
 *  TX-5  Mutations run concurrently with a commit's I/O; only the freeze,
 *        which turns dirty nodes into checksummed buffers under txn_lock,
 *        holds them out.
 *  TX-6  A freeze waits only for the mutations in progress when it asks:
 *        txn_lock prefers its writer, so mutations that begin after the
 *        freeze asked wait behind it.  With glibc's default (readers
 *        first), writer threads that overlap without pause kept a commit
 *        out for as long as they went on: 7 s of 1 MiB writes at queue
 *        depth 8, and every flush and snapshot of the pool waited that
 *        long.  The price: a mutation must never begin inside another one
 *        (pool.h, txn_begin).
 *
 *  TX-7  A freeze does not wait for the commit before it to be written:
 *        at most two generations are between freeze and durable, one
 *        writing and the next frozen, and their superblocks go out in
 *        generation order.  So a snapshot (any catalog change) asked for
 *        while a commit writes is frozen at once, with the writes made
 *        before it, and only its writing waits (DESIGN.md §2.3).  A freeze
 *        builds on the newest frozen superblock and space map (frozen_sb,
 *        sm), not the durable ones; frees stay deferred until their own
 *        generation is durable (TX-2), whatever is frozen after it.
 *
 * The state machine of a generation G, and the function behind each step:
 *
 *   open ----(txn_begin..txn_end: trees change in memory)----> open
 *   open ----commit_freeze: under txn_lock--------------------> frozen
 *            (dirty trees -> root tree items -> root tree -> space map
 *             blocks allocated in G -> space delta of G; G+1 opens;
 *             frozen_sb and sm become G's)
 *   frozen --(G - 1 durable) commit_write: nodebatch_write, space map,
 *             flush------------------------------------------> written
 *   written -commit_write: superblock slot G % 4, flush------> durable
 *            (space_gen_durable(G) releases G's deferred frees)
 *   any I/O error ------------------------------------------> failed (TX-4)
 *
 * pool_commit runs the steps for its callers (group commit): one freeze at
 * a time, and callers that arrive meanwhile wait and share what is frozen
 * or written next.
 *
 * A flush need not be a commit: with the intent log (txn-log.c, IL-n), a
 * flush writes the records of the writes since the last commit and
 * flushes the device once; the freeze records the log's head in the
 * superblock (pool_log_freeze) and a durable commit makes the log before
 * it obsolete (pool_log_durable).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "txn-int.h"

/* Latch the pool failed (TX-4), keeping why (msg) for every later
 * refusal to repeat: the failure may have happened in the commit thread,
 * whose message no client sees.
 */
void
pool_latch_failed (struct cairn_pool *pool, const char *msg)
{
  static pthread_mutex_t latch_lock = PTHREAD_MUTEX_INITIALIZER;

  pthread_mutex_lock (&latch_lock);
  if (!__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE)) {
    snprintf (pool->failed_why, sizeof pool->failed_why, "%s", msg);
    __atomic_store_n (&pool->failed, true, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock (&latch_lock);
}

/* Refuse because the pool is latched failed: -EIO saying why. */
static int
refuse_failed (struct cairn_pool *pool)
{
  return cairn_fail (-EIO, "the pool failed earlier and is read-only until "
                     "it is reopened; the failure: %s", pool->failed_why);
}

/* Latch the pool failed because the commit of gen failed (TX-4); returns
 * err with a message that says so, followed by the failure's own.
 */
static int
commit_failed (struct cairn_pool *pool, uint64_t gen, int err)
{
  char msg[512];

  snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
  err = cairn_fail (err, "commit of generation %" PRIu64 " failed, the pool "
                    "is now read-only until reopened: %s", gen, msg);
  pool_latch_failed (pool, cairn_errmsg ());
  return err;
}

/* Freeze every dirty tree but the root tree into batch and record their
 * roots in the root tree.  Called with txn_lock held exclusively.
 */
static int
freeze_user_trees (struct cairn_pool *pool, struct nodebatch *batch)
{
  int r = 0;

  pthread_mutex_lock (&pool->trees_lock);
  for (size_t i = 0; i < pool->ntrees && r == 0; i++) {
    struct btree *t = pool->trees[i].tree;
    struct btree_root tr;
    uint8_t key[ROOTKEY_LEN], item[TREE_ITEM_LEN];

    if (t == pool->root)
      continue;
    btree_wrlock (t);
    if (!btree_is_dirty (t)) {
      btree_release_reserve (t);
      btree_unlock (t);
      continue;
    }
    r = btree_freeze (t, batch, &tr);
    btree_unlock (t);
    if (r < 0)
      break;
    rootkey_tree (pool->trees[i].id, key);
    tree_item_encode (&tr, item);
    btree_wrlock (pool->root);
    r = btree_insert (pool->root, key, sizeof key, item, sizeof item,
                      BTREE_RESERVE);
    btree_unlock (pool->root);
  }
  pthread_mutex_unlock (&pool->trees_lock);
  return r;
}

/* Freeze the trees, run the upper layer's hook between two passes (it may
 * change trees again), then freeze the root tree.
 */
static int
freeze_trees (struct cairn_pool *pool, uint64_t gen, struct nodebatch *batch,
              struct btree_root *root)
{
  int r = freeze_user_trees (pool, batch);

  if (r == 0 && pool->freeze_hook) {
    r = pool->freeze_hook (pool, pool->attached, gen);
    if (r == 0)
      r = freeze_user_trees (pool, batch);
  }
  if (r < 0)
    return r;
  btree_wrlock (pool->root);
  r = btree_freeze (pool->root, batch, root);
  btree_unlock (pool->root);
  return r;
}

/* A generation between its freeze and its superblock. */
struct commit_job {
  uint64_t gen;                 /* 0: nothing was frozen */
  struct nodebatch batch;
  struct spacemap_write smw;
  struct superblock sb;
};

/* Release what a job holds (written or not). */
static void
commit_job_release (struct cairn_pool *pool, struct commit_job *job)
{
  nodebatch_release (pool->cache, &job->batch);
  spacemap_write_free (&job->smw);
}

/* Freeze the open generation into job (job->gen 0 when it holds no
 * change).  pool_commit makes sure only one freeze runs at a time; the
 * commit before may still be writing (TX-7).
 */
static int
commit_freeze (struct cairn_pool *pool, struct commit_job *job)
{
  struct space_delta *delta = NULL;
  struct superblock *sb = &job->sb;
  uint64_t gen;
  int r;

  memset (job, 0, sizeof *job);
  /* A commit frees and allocates: the space map must be there (pool.c),
   * even for a commit that only txn_mark_dirty asked for.
   */
  if ((r = pool_space_load (pool)) < 0)
    return r;
  pthread_rwlock_wrlock (&pool->txn_lock);
  if (__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE)) {
    pthread_rwlock_unlock (&pool->txn_lock);
    return refuse_failed (pool);
  }
  if (!__atomic_load_n (&pool->dirty, __ATOMIC_ACQUIRE)) {
    pthread_rwlock_unlock (&pool->txn_lock);
    return 0;
  }

  /* Freeze generation gen on top of the newest frozen superblock, which
   * may not be durable yet.  The space map's blocks are allocated in gen
   * itself, after the trees and before the space freeze, so that gen's
   * delta records them (spacemap.c, SM-2).
   */
  gen = pool->open_gen;
  *sb = pool->frozen_sb;
  r = freeze_trees (pool, gen, &job->batch, &sb->root);
  if (r < 0)
    goto fail_locked;
  r = spacemap_prepare (&pool->sm, pool->space, pool->frozen_sb.generation,
                        gen, &job->smw);
  if (r < 0)
    goto fail_locked;
  r = space_freeze (pool->space, &delta);
  if (r < 0)
    goto fail_locked;
  __atomic_store_n (&pool->open_gen, gen + 1, __ATOMIC_RELEASE);
  nodecache_set_gen (pool->cache, gen + 1);
  __atomic_store_n (&pool->dirty, false, __ATOMIC_RELEASE);
  __atomic_store_n (&pool->data_written, 0, __ATOMIC_RELAXED);
  r = spacemap_finish (&job->smw, delta, sb);
  space_delta_free (delta);
  if (r == 0) {
    pthread_mutex_lock (&pool->commit_lock);   /* pool_info reads sm */
    r = spacemap_advance (&pool->sm, &job->smw);
    pthread_mutex_unlock (&pool->commit_lock);
  }
  if (r < 0)
    goto fail_locked;
  sb->generation = gen;
  sb->incompat |= pool->need_incompat;
  sb->next_tree_id = pool->next_tree_id;
  sb->slot = (uint32_t) (gen % SB_SLOTS);
  sb->mtime = (uint64_t) time (NULL);
  pool_log_freeze (pool, sb);
  pool->frozen_sb = *sb;
  job->gen = gen;
  pthread_rwlock_unlock (&pool->txn_lock);
  return 0;

 fail_locked:
  r = commit_failed (pool, gen, r);   /* latched before writers get in */
  pthread_rwlock_unlock (&pool->txn_lock);
  commit_job_release (pool, job);
  return r;
}

/* Write a frozen generation and make it durable: nodes and map, barrier,
 * superblock, barrier (TX-1).  The generation before it is durable.
 */
static int
commit_write (struct cairn_pool *pool, struct commit_job *job)
{
  int r = nodebatch_write (pool->cache, &job->batch);

  if (r == 0)
    r = spacemap_write (pool->dev, &job->smw);
#ifndef CAIRN_STRESS_PLANT
  if (r == 0)
    r = dev_flush (pool->dev);
#else
  /* A planted bug, compiled only into tests/stress/cairn-stress-planted
   * (tests/stress/README.md): no barrier between the nodes and the
   * superblock that points to them.
   */
#endif
  if (r == 0)
    r = sb_write (pool->dev, &job->sb);
  if (r == 0)
    r = dev_flush (pool->dev);
  if (r < 0)
    r = commit_failed (pool, job->gen, -EIO);
  else {
    space_gen_durable (pool->space, job->gen);
    pool_log_durable (pool, &job->sb);
  }
  return r;
}

/* Group commit (TX-3), pipelined (TX-7): a caller freezes the open
 * generation unless another one is freezing or two generations are
 * already between freeze and durable, then waits for the generation
 * before its own to be durable and writes its own.  Callers that arrive
 * meanwhile wait and share what is frozen or written next.
 */
int
pool_commit (struct cairn_pool *pool)
{
  uint64_t target;
  int r = 0;

  /* Nothing commits while the intent log is replayed (IL-6). */
  if (pool->readonly || __atomic_load_n (&pool->log.replaying, __ATOMIC_ACQUIRE))
    return 0;
  pthread_mutex_lock (&pool->commit_lock);
  target = __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
  for (;;) {
    uint64_t open = __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
    uint64_t start_ns;
    struct commit_job job;

    if (__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE)) {
      r = refuse_failed (pool);
      break;
    }
    if (pool->durable_gen >= target)
      break;
    if (open == target && !__atomic_load_n (&pool->dirty, __ATOMIC_ACQUIRE) &&
        pool->durable_gen + 1 >= target)
      break;      /* nothing changed since the last durable generation */
    /* Wait while target is frozen (or being frozen, or has nothing of its
     * own) until its commit is durable, and while two generations are in
     * flight.
     */
    if (open > target || pool->freezing ||
        !__atomic_load_n (&pool->dirty, __ATOMIC_ACQUIRE) ||
        open - 1 - pool->durable_gen >= 2) {
      pthread_cond_wait (&pool->commit_cond, &pool->commit_lock);
      continue;
    }
    pool->freezing = true;
    pthread_mutex_unlock (&pool->commit_lock);
    start_ns = lat_now_ns ();
    r = commit_freeze (pool, &job);
    pthread_mutex_lock (&pool->commit_lock);
    pool->freezing = false;
    pthread_cond_broadcast (&pool->commit_cond);
    if (r < 0)
      break;
    if (job.gen == 0)
      continue;
    /* Superblocks go out in generation order. */
    while (pool->durable_gen + 1 < job.gen &&
           !__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE))
      pthread_cond_wait (&pool->commit_cond, &pool->commit_lock);
    if (__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE)) {
      r = refuse_failed (pool);
      pthread_mutex_unlock (&pool->commit_lock);
      commit_job_release (pool, &job);
      pthread_mutex_lock (&pool->commit_lock);
      break;
    }
    pthread_mutex_unlock (&pool->commit_lock);
    r = commit_write (pool, &job);
    commit_job_release (pool, &job);
    pthread_mutex_lock (&pool->commit_lock);
    if (r == 0) {
      pool->sb = job.sb;    /* pool_info and pool_uuid read it under commit_lock */
      pool->durable_gen = job.gen;
      pool->commits++;
      lat_record (&pool->commit_time, lat_now_ns () - start_ns);
    }
    pthread_cond_broadcast (&pool->commit_cond);
    if (r < 0)
      break;
  }
  pthread_mutex_unlock (&pool->commit_lock);
  return r;
}

/* Enter a mutation. */
int
txn_begin (struct cairn_pool *pool)
{
  int r;

  if (pool->readonly)
    return cairn_fail (-EROFS, "the pool is open read-only");
  if ((r = pool_space_load (pool)) < 0) {
    char why[512];

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    return cairn_fail (r, "the pool's free space cannot be known, so "
                       "nothing can be written: %s", why);
  }
  pthread_rwlock_rdlock (&pool->txn_lock);
  if (__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE)) {
    pthread_rwlock_unlock (&pool->txn_lock);
    return refuse_failed (pool);
  }
  __atomic_store_n (&pool->dirty, true, __ATOMIC_RELEASE);
  return 0;
}

/* Wake the commit thread for a commit now. */
static void
kick_committer (struct cairn_pool *pool)
{
  pthread_mutex_lock (&pool->committer_lock);
  pool->committer_kick = true;
  pthread_cond_signal (&pool->committer_cond);
  pthread_mutex_unlock (&pool->committer_lock);
}

/* Wake the commit thread, or commit here without one (txn-int.h). */
void
txn_kick_commit (struct cairn_pool *pool)
{
  if (__atomic_load_n (&pool->committer_running, __ATOMIC_ACQUIRE))
    kick_committer (pool);
  else if (pool_commit (pool) < 0) {
    /* Latched: the next mutation reports it. */
  }
}

/* Count data written in the open generation (pool.h). */
void
txn_note_data (struct cairn_pool *pool, uint64_t bytes)
{
  __atomic_add_fetch (&pool->data_written, bytes, __ATOMIC_RELAXED);
}

/* Leave a mutation; commit when dirty metadata passed its limit or the
 * pool runs on its reserve, and wake the commit thread once the open
 * generation holds the data limit's worth of data.  No tree lock may be
 * held.
 *
 * The write throttle: past the dirty limit the commit thread is woken;
 * past twice the limit (writers outran a slow commit, whose flush may wait
 * for gigabytes of data to reach the disk) the writer waits for a commit
 * itself.  So dirty nodes, plus the frozen ones a commit is writing, stay
 * within about four times the limit -- the whole cache by default --
 * rather than growing with the time a flush takes.
 */
void
txn_end (struct cairn_pool *pool)
{
  struct nodecache_stats st;
  struct space_stats ss;
  uint64_t dirty;
  bool low_space, committer;

  pthread_rwlock_unlock (&pool->txn_lock);
  nodecache_stats (pool->cache, &st);
  dirty = st.dirty_nodes * nodecache_node_size (pool->cache);
  /* Running on the reserve while frees wait for a commit: commit, so that
   * deletes on a full pool keep freeing more than their copies take.
   */
  space_stats (pool->space, &ss);
  low_space = ss.free <= ss.reserve && ss.pending > 0;
  /* Atomic: a thread of the engine (the reaper) may end a mutation while
   * the pool's owner stops the commit thread.
   */
  committer = __atomic_load_n (&pool->committer_running, __ATOMIC_ACQUIRE);
  if (!low_space && dirty <= pool->dirty_limit) {
    if (committer &&
        __atomic_load_n (&pool->data_written, __ATOMIC_RELAXED) >= pool->data_limit)
      kick_committer (pool);
    return;
  }
  if (committer && (low_space || dirty <= 2 * pool->dirty_limit))
    kick_committer (pool);
  else if (pool_commit (pool) < 0) {
    /* Latched: the next mutation reports it. */
  }
}

/* The commit thread's loop. */
static void *
committer_main (void *arg)
{
  struct cairn_pool *pool = arg;

  pthread_mutex_lock (&pool->committer_lock);
  while (!pool->committer_stop) {
    struct timespec ts;

    if (!pool->committer_kick) {
      clock_gettime (CLOCK_REALTIME, &ts);
      ts.tv_sec += pool->commit_interval_ms / 1000;
      ts.tv_nsec += (long) (pool->commit_interval_ms % 1000) * 1000000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait (&pool->committer_cond, &pool->committer_lock, &ts);
    }
    if (pool->committer_stop)
      break;
    pool->committer_kick = false;
    pthread_mutex_unlock (&pool->committer_lock);
    if (__atomic_load_n (&pool->dirty, __ATOMIC_ACQUIRE) &&
        !__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE) &&
        pool_commit (pool) < 0) {
      /* Latched failed; mutations report it. */
    }
    pthread_mutex_lock (&pool->committer_lock);
  }
  pthread_mutex_unlock (&pool->committer_lock);
  return NULL;
}

void
pool_set_commit_interval (struct cairn_pool *pool, unsigned ms)
{
  pthread_mutex_lock (&pool->committer_lock);
  if (!pool->commit_interval_fixed && ms != pool->commit_interval_ms) {
    pool->commit_interval_ms = ms;
    /* A wait for the old period ends now (committing what is dirty);
     * the next one waits the new period.
     */
    pthread_cond_signal (&pool->committer_cond);
  }
  pthread_mutex_unlock (&pool->committer_lock);
}

unsigned
pool_commit_interval (struct cairn_pool *pool, bool *fixed)
{
  unsigned ms;

  pthread_mutex_lock (&pool->committer_lock);
  ms = pool->commit_interval_ms;
  *fixed = pool->commit_interval_fixed;
  pthread_mutex_unlock (&pool->committer_lock);
  return ms;
}

/* Start the commit thread. */
int
pool_start_committer (struct cairn_pool *pool, unsigned interval_ms)
{
  int err;

  if (pool->readonly || pool->committer_running)
    return 0;
  pthread_mutex_lock (&pool->committer_lock);
  if (interval_ms) {
    pool->commit_interval_ms = interval_ms;
    pool->commit_interval_fixed = true;
  }
  pool->committer_stop = false;
  pthread_mutex_unlock (&pool->committer_lock);
  err = pthread_create (&pool->committer, NULL, committer_main, pool);
  if (err)
    return cairn_fail (-err, "cannot start the commit thread: %s", strerror (err));
  __atomic_store_n (&pool->committer_running, true, __ATOMIC_RELEASE);
  return 0;
}

/* Stop the commit thread and wait for it. */
void
pool_stop_committer (struct cairn_pool *pool)
{
  if (!pool->committer_running)
    return;
  pthread_mutex_lock (&pool->committer_lock);
  pool->committer_stop = true;
  pthread_cond_signal (&pool->committer_cond);
  pthread_mutex_unlock (&pool->committer_lock);
  pthread_join (pool->committer, NULL);
  __atomic_store_n (&pool->committer_running, false, __ATOMIC_RELEASE);
}

/* Mark the open generation changed. */
void
txn_mark_dirty (struct cairn_pool *pool)
{
  __atomic_store_n (&pool->dirty, true, __ATOMIC_RELEASE);
}
