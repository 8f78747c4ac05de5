/* Cairn engine: creating, opening and closing pools, and the registry of
 * open trees.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "txn-int.h"

#define DEFAULT_CACHE (128ull * 1024 * 1024)

/* Key of a tree's root item in the root tree. */
void
rootkey_tree (uint64_t id, uint8_t key[ROOTKEY_LEN])
{
  key[0] = ROOTKEY_TREE;
  put_be64 (key + 1, id);
}

/* Encode a tree root item: the root pointer, the level, 7 reserved bytes. */
void
tree_item_encode (const struct btree_root *root, uint8_t *p)
{
  memset (p, 0, TREE_ITEM_LEN);
  blkptr_encode (&root->bp, p);
  p[BLKPTR_SIZE] = root->level;
}

/* Decode a tree root item. */
int
tree_item_decode (const uint8_t *p, size_t len, struct btree_root *root)
{
  bool reserved_zero = true;

  for (size_t i = BLKPTR_SIZE + 1; i < len && i < TREE_ITEM_LEN; i++)
    reserved_zero &= p[i] == 0;
  if (len != TREE_ITEM_LEN || p[BLKPTR_SIZE] >= 32 || !reserved_zero)
    return cairn_fail (-EIO, "corrupt tree root item in the root tree "
                       "(length %zu)", len);
  blkptr_decode (p, &root->bp);
  root->level = p[BLKPTR_SIZE];
  return 0;
}

/* Blocks kept back for deletes and commits: 1% of the pool, 64 blocks to
 * 32 MiB.
 */
static uint64_t
default_reserve (uint64_t data_blocks)
{
  uint64_t r = data_blocks / 100;

  return MIN (MAX (r, 64u), 8192u);
}

/* Write a new, empty pool. */
int
pool_format (struct cairn_dev *dev, const struct pool_format_opts *opts,
             uint8_t uuid_out[16])
{
  uint32_t node_size = opts && opts->node_size ? opts->node_size : NODE_SIZE_DEFAULT;
  struct space_delta none = { .gen = 1 };
  struct spacemap_write w = { 0 };
  struct superblock sb = { 0 };
  uint8_t zero[SB_SIZE] = { 0 };
  struct space *sp = NULL;
  int r;

  if (dev->size < POOL_MIN_SIZE)
    return cairn_fail (-EINVAL, "%s is too small for a pool: at least %llu MiB "
                       "are needed", dev->name, POOL_MIN_SIZE >> 20);
  if (node_size < NODE_SIZE_MIN || node_size > NODE_SIZE_MAX ||
      (node_size & (node_size - 1)))
    return cairn_fail (-EINVAL, "node size %" PRIu32 " must be a power of two "
                       "from 4K to 64K", node_size);
  sb.version = POOL_FORMAT_VERSION;
  sb.incompat = FEATURE_INCOMPAT_SHA256 | FEATURE_INCOMPAT_SPACELOG;
  if (opts && opts->checkpoints)
    sb.compat |= FEATURE_COMPAT_CKPT_NEW;
  if (dev_is_chunked (dev)) {
    sb.incompat |= FEATURE_INCOMPAT_MULTIDEV;
    dev_chunk_pool_uuid (dev, sb.uuid);
  }
  else if (opts && opts->uuid)
    memcpy (sb.uuid, opts->uuid, 16);
  else if ((r = uuid_generate (sb.uuid)) < 0)
    return r;
  sb.generation = 1;
  sb.slot = 1;
  sb.node_size = node_size;
  sb.total_blocks = dev->size / BLOCK_SIZE;
  sb.data_start = POOL_DATA_START / BLOCK_SIZE;
  sb.next_tree_id = TREE_ID_FIRST_USER;
  sb.reserve_blocks = default_reserve (sb.total_blocks - sb.data_start);
  sb.ctime = sb.mtime = (uint64_t) time (NULL);

  /* Generation 1 holds the space map's base and nothing else. */
  r = space_create (sb.data_start, sb.total_blocks, sb.reserve_blocks, 1, &sp);
  if (r < 0)
    return r;
  r = spacemap_condense (sp, 1, NULL, 0, &w);
  if (r == 0)
    r = spacemap_finish (&w, &none, &sb);
  if (r < 0)
    goto out;

  /* Old superblocks go first, so a half-made pool is never mistaken for
   * whatever the device held before.
   */
  for (unsigned i = 0; i < SB_SLOTS && r == 0; i++)
    r = dev_pwrite (dev, zero, SB_SIZE, SB_SLOT_OFFSET (i));
  if (r == 0)
    r = spacemap_write (dev, &w);
  if (r == 0)
    r = dev_flush (dev);
  if (r == 0)
    r = sb_write (dev, &sb);
  if (r == 0)
    r = dev_flush (dev);
  if (r == 0 && uuid_out)
    memcpy (uuid_out, sb.uuid, 16);
 out:
  spacemap_write_free (&w);
  space_destroy (sp);
  return r;
}

static void *space_loader_main (void *arg);

/* Free everything a pool holds (the device is the caller's). */
static void
pool_free (struct cairn_pool *pool)
{
  if (pool->space_thread)
    pthread_join (pool->space_loader, NULL);
  if (pool->attached_destroy)
    pool->attached_destroy (pool->attached);
  for (size_t i = 0; i < pool->ntrees; i++)
    btree_close (pool->trees[i].tree);
  free (pool->trees);
  nodecache_destroy (pool->cache);
  space_destroy (pool->space);
  spacemap_free (&pool->sm);
  if (pool->dev)
    dev_trust_disable (pool->dev);   /* the device stays the caller's */
  pthread_rwlock_destroy (&pool->txn_lock);
  pthread_mutex_destroy (&pool->commit_lock);
  pthread_cond_destroy (&pool->commit_cond);
  pthread_mutex_destroy (&pool->trees_lock);
  pthread_mutex_destroy (&pool->committer_lock);
  pthread_cond_destroy (&pool->committer_cond);
  pthread_mutex_destroy (&pool->attach_lock);
  pthread_cond_destroy (&pool->space_cond);
  pthread_mutex_destroy (&pool->space_lock);
  pool_log_free (pool);
  free (pool);
}

/* Add a tree handle to the registry (trees_lock held). */
static int
registry_add (struct cairn_pool *pool, uint64_t id, struct btree *t)
{
  if (pool->ntrees == pool->trees_cap) {
    size_t cap = pool->trees_cap ? pool->trees_cap * 2 : 16;
    struct pool_tree *nt = realloc (pool->trees, cap * sizeof *nt);

    if (nt == NULL)
      return cairn_fail (-ENOMEM, "out of memory opening a tree");
    pool->trees = nt;
    pool->trees_cap = cap;
  }
  pool->trees[pool->ntrees].id = id;
  pool->trees[pool->ntrees].tree = t;
  pool->ntrees++;
  return 0;
}

/* The commit lock: mutations shared, the freeze exclusive, and a freeze
 * that waits keeps new mutations out (txn.c, TX-6).
 */
static void
init_txn_lock (pthread_rwlock_t *lock)
{
  pthread_rwlockattr_t a;

  pthread_rwlockattr_init (&a);
  pthread_rwlockattr_setkind_np (&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  pthread_rwlock_init (lock, &a);
  pthread_rwlockattr_destroy (&a);
}

/* A pool of several devices is opened on the chunked device over them,
 * and only such a pool is: a pool and its devices' labels name the same
 * pool.
 */
static int
check_multidev (struct cairn_dev *dev, const struct superblock *sb)
{
  bool multi = sb->incompat & FEATURE_INCOMPAT_MULTIDEV;
  uint8_t uuid[16];

  if (multi != dev_is_chunked (dev))
    return cairn_fail (-EINVAL, multi ? "%s holds a pool of several devices, "
                       "found on one of them: open it from its devices"
                       : "%s: the devices' labels make one logical device but "
                       "its pool is a single-device pool", dev->name);
  if (multi) {
    dev_chunk_pool_uuid (dev, uuid);
    if (memcmp (uuid, sb->uuid, 16) != 0)
      return cairn_fail (-EIO, "%s: the pool's superblock names another pool "
                         "than its devices' labels", dev->name);
  }
  return 0;
}

/* Open the pool on dev. */
int
pool_open (struct cairn_dev *dev, const struct pool_open_opts *opts,
           struct cairn_pool **poolp)
{
  struct pool_open_opts o = opts ? *opts : (struct pool_open_opts) { 0 };
  struct nodecache_config cc;
  struct cairn_pool *pool;
  int r;

  pool = calloc (1, sizeof *pool);
  if (pool == NULL)
    return cairn_fail (-ENOMEM, "out of memory opening the pool");
  init_txn_lock (&pool->txn_lock);
  pthread_mutex_init (&pool->commit_lock, NULL);
  pthread_cond_init (&pool->commit_cond, NULL);
  pthread_mutex_init (&pool->trees_lock, NULL);
  pthread_mutex_init (&pool->committer_lock, NULL);
  pthread_cond_init (&pool->committer_cond, NULL);
  pool->commit_interval_ms = POOL_COMMIT_INTERVAL_MS;
  pthread_mutex_init (&pool->attach_lock, NULL);
  pthread_mutex_init (&pool->space_lock, NULL);
  pthread_cond_init (&pool->space_cond, NULL);
  pool->dev = dev;

  r = sb_read_newest (dev, o.expect_uuid, &pool->sb);
  if (r < 0)
    goto fail;
  r = check_multidev (dev, &pool->sb);
  if (r < 0)
    goto fail;
  pool->readonly = o.readonly ||
    (pool->sb.ro_compat & ~FEATURE_RO_COMPAT_SUPPORTED) != 0;
  if (dev_is_chunked (dev)) {
    struct dev_chunk_info ci;

    dev_chunk_info (dev, &ci);
    pool->readonly |= ci.readonly;    /* degraded: dev-chunk.c, C4 */
  }
  pool->no_background = o.no_background;
  pool->durable_gen = pool->sb.generation;
  pool->frozen_sb = pool->sb;
  pool->next_tree_id = pool->sb.next_tree_id;
  pool->open_gen = pool->sb.generation + 1;
  r = pool_log_init (pool, o.intent_log);
  if (r < 0)
    goto fail;

  r = space_create (pool->sb.data_start, pool->sb.total_blocks,
                    pool->sb.reserve_blocks, pool->open_gen, &pool->space);
  if (r < 0)
    goto fail;
  space_set_node_blocks (pool->space, pool->sb.node_size >> BLOCK_SHIFT);
  pool->space_log_min = o.spacemap_log_min;
  pool->space_lazy = true;          /* "loading the space map" */

  cc.dev = dev;
  cc.space = pool->space;
  cc.node_size = pool->sb.node_size;
  memcpy (cc.uuid, pool->sb.uuid, 16);
  cc.limit_bytes = o.cache_bytes ? o.cache_bytes : DEFAULT_CACHE;
  pool->dirty_limit = o.dirty_limit_bytes ? o.dirty_limit_bytes : cc.limit_bytes / 4;
  pool->data_limit = o.data_limit_bytes ? o.data_limit_bytes : POOL_DATA_LIMIT;
  r = nodecache_create (&cc, &pool->cache);
  if (r < 0)
    goto fail;
  nodecache_set_gen (pool->cache, pool->open_gen);

  r = btree_open (pool->cache, TREE_ID_ROOT, &pool->sb.root, &pool->root);
  if (r < 0)
    goto fail;
  r = registry_add (pool, TREE_ID_ROOT, pool->root);
  if (r < 0) {
    btree_close (pool->root);
    goto fail;
  }
  /* Read the root tree's root now, so that a damaged one fails the open. */
  r = btree_lookup (pool->root, "", 0, NULL, 0, NULL);
  if (r < 0 && r != -ENOENT)
    goto fail;
  /* A pool opened read-only shares its file with other read-only openers
   * (a shared lock), whose reads bring pages into the cache that this
   * process did not check (dev.h, T4): it trusts nothing.
   */
  if (!o.check_every_read && !o.readonly && dev->ops->pread_cached) {
    r = dev_trust_enable (dev, DEV_TRUST_ENTRIES);
    if (r < 0)
      goto fail;
  }
  *poolp = pool;
  return 0;

 fail:
  pool_free (pool);
  return r;
}

/* Commit and free the pool. */
int
pool_close (struct cairn_pool *pool)
{
  int r = 0;

  if (pool == NULL)
    return 0;
  if (pool->attached_quiesce)
    pool->attached_quiesce (pool->attached);
  pool_stop_committer (pool);
  if (!pool->readonly && !__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE))
    r = pool_commit (pool);
  pool_free (pool);
  return r;
}

/* Find a registered tree (trees_lock held). */
static struct btree *
registry_find (struct cairn_pool *pool, uint64_t id)
{
  for (size_t i = 0; i < pool->ntrees; i++)
    if (pool->trees[i].id == id)
      return pool->trees[i].tree;
  return NULL;
}

/* Create a new tree starting at root (NULL: empty). */
int
pool_tree_create_from (struct cairn_pool *pool, const struct btree_root *root,
                       uint64_t *idp, struct btree **treep)
{
  uint8_t key[ROOTKEY_LEN], item[TREE_ITEM_LEN];
  struct btree_root start = { 0 };
  struct btree *t;
  uint64_t id;
  int r;

  if (root)
    start = *root;
  pthread_mutex_lock (&pool->trees_lock);
  id = pool->next_tree_id;
  rootkey_tree (id, key);
  tree_item_encode (&start, item);
  btree_wrlock (pool->root);
  r = btree_insert (pool->root, key, sizeof key, item, sizeof item,
                    BTREE_NOOVERWRITE);
  btree_unlock (pool->root);
  if (r == 0)
    r = btree_open (pool->cache, id, &start, &t);
  if (r == 0) {
    r = registry_add (pool, id, t);
    if (r < 0)
      btree_close (t);
  }
  if (r == 0) {
    pool->next_tree_id++;
    *idp = id;
    *treep = t;
  }
  pthread_mutex_unlock (&pool->trees_lock);
  return r;
}

/* Create a new, empty tree. */
int
pool_tree_create (struct cairn_pool *pool, uint64_t *idp, struct btree **treep)
{
  return pool_tree_create_from (pool, NULL, idp, treep);
}

/* Forget a tree. */
int
pool_tree_remove (struct cairn_pool *pool, uint64_t id)
{
  uint8_t key[ROOTKEY_LEN];
  int r;

  pthread_mutex_lock (&pool->trees_lock);
  for (size_t i = 0; i < pool->ntrees; i++)
    if (pool->trees[i].id == id) {
      btree_close (pool->trees[i].tree);
      pool->trees[i] = pool->trees[--pool->ntrees];
      break;
    }
  rootkey_tree (id, key);
  btree_wrlock (pool->root);
  r = btree_delete (pool->root, key, sizeof key);
  btree_unlock (pool->root);
  pthread_mutex_unlock (&pool->trees_lock);
  return r;
}

/* Open a tree by id (the pool keeps the handle). */
int
pool_tree_open (struct cairn_pool *pool, uint64_t id, struct btree **treep)
{
  uint8_t key[ROOTKEY_LEN], item[TREE_ITEM_LEN];
  struct btree_root root;
  struct btree *t;
  size_t len;
  int r;

  pthread_mutex_lock (&pool->trees_lock);
  t = registry_find (pool, id);
  if (t) {
    pthread_mutex_unlock (&pool->trees_lock);
    *treep = t;
    return 0;
  }
  rootkey_tree (id, key);
  btree_rdlock (pool->root);
  r = btree_lookup (pool->root, key, sizeof key, item, sizeof item, &len);
  btree_unlock (pool->root);
  if (r == -ENOENT)
    r = cairn_fail (-ENOENT, "no tree %" PRIu64 " in the pool", id);
  if (r == 0)
    r = tree_item_decode (item, len, &root);
  if (r == 0)
    r = btree_open (pool->cache, id, &root, &t);
  if (r == 0) {
    r = registry_add (pool, id, t);
    if (r < 0)
      btree_close (t);
    else
      *treep = t;
  }
  pthread_mutex_unlock (&pool->trees_lock);
  return r;
}

/* Swap two trees' contents. */
int
pool_tree_swap (struct cairn_pool *pool, uint64_t a, uint64_t b)
{
  struct btree *ta, *tb;
  int r;

  pthread_mutex_lock (&pool->trees_lock);
  ta = registry_find (pool, a);
  tb = registry_find (pool, b);
  if (ta == NULL || tb == NULL || ta == tb) {
    pthread_mutex_unlock (&pool->trees_lock);
    return cairn_fail (-EINVAL, "internal error: swapping trees %" PRIu64
                       " and %" PRIu64 ", which are not two open trees", a, b);
  }
  btree_wrlock (ta);
  btree_wrlock (tb);
  r = btree_swap_roots (ta, tb);
  btree_unlock (tb);
  btree_unlock (ta);
  for (int i = 0; i < 2 && r == 0; i++) {
    struct btree *t = i ? tb : ta;
    uint8_t key[ROOTKEY_LEN], item[TREE_ITEM_LEN];
    struct btree_root root;

    btree_get_root (t, &root);
    rootkey_tree (i ? b : a, key);
    tree_item_encode (&root, item);
    btree_wrlock (pool->root);
    r = btree_insert (pool->root, key, sizeof key, item, sizeof item,
                      BTREE_RESERVE);
    btree_unlock (pool->root);
  }
  pthread_mutex_unlock (&pool->trees_lock);
  return r;
}

void
pool_uuid (struct cairn_pool *pool, uint8_t uuid[16])
{
  pthread_mutex_lock (&pool->commit_lock);    /* a commit copies sb whole */
  memcpy (uuid, pool->sb.uuid, 16);
  pthread_mutex_unlock (&pool->commit_lock);
}

/* Loading the space map.
 *
 * Replaying the map of a pool whose free space is fragmented takes long
 * (a third of a second for a randomly written 16 GiB volume), and only
 * allocating and freeing need it.  So pool_open does not read it: whatever
 * needs it -- txn_begin, pool_info, pool_space, pool_spacemap -- calls
 * space_ensure, which loads it on first use or waits for a load under way.
 * A read, a send or a diff never loads it.  A server calls
 * pool_preload_space once it may start threads (after nbdkit forks): a
 * thread loads it while clients already read, so a server restarted after
 * a crash answers at once and its first write waits only for what is left.
 * A damaged map does not fail the open: space_ensure reports it, naming
 * the block, from then on, and the pool counts as failed (TX-4), so that
 * it is still readable and nothing is written.
 */

/* Load the map into pool->space and record the outcome (space_lock not
 * held: nothing else touches the space until space_ready).
 */
static void
space_load (struct cairn_pool *pool)
{
  int r = spacemap_load (pool->dev, pool->space, &pool->sb, &pool->sm);

  pthread_mutex_lock (&pool->space_lock);
  pool->sm.log_min = pool->space_log_min;
  if (r < 0) {
    pool->space_err = r;
    snprintf (pool->space_msg, sizeof pool->space_msg, "%s", cairn_errmsg ());
    pool_latch_failed (pool, pool->space_msg);
  }
  pool->space_loading = false;
  __atomic_store_n (&pool->space_ready, true, __ATOMIC_RELEASE);
  pthread_cond_broadcast (&pool->space_cond);
  pthread_mutex_unlock (&pool->space_lock);
}

static void *
space_loader_main (void *arg)
{
  space_load (arg);
  return NULL;
}

/* Wait for the space map, or load it now if no one has started to; -EIO
 * and why when it is damaged.
 */
static int
space_ensure (struct cairn_pool *pool)
{
  bool load = false;
  int r;

  if (__atomic_load_n (&pool->space_ready, __ATOMIC_ACQUIRE) &&
      pool->space_err == 0)
    return 0;
  pthread_mutex_lock (&pool->space_lock);
  if (pool->space_lazy) {
    pool->space_lazy = false;
    pool->space_loading = load = true;
  }
  pthread_mutex_unlock (&pool->space_lock);
  if (load)
    space_load (pool);
  pthread_mutex_lock (&pool->space_lock);
  while (pool->space_loading)
    pthread_cond_wait (&pool->space_cond, &pool->space_lock);
  r = pool->space_err;
  if (r < 0)
    cairn_fail (r, "%s", pool->space_msg);
  pthread_mutex_unlock (&pool->space_lock);
  return r;
}

void
pool_preload_space (struct cairn_pool *pool)
{
  bool start;

  pthread_mutex_lock (&pool->space_lock);
  start = pool->space_lazy && !pool->space_thread;
  if (start) {
    pool->space_lazy = false;
    pool->space_loading = true;
    pool->space_thread =
      pthread_create (&pool->space_loader, NULL, space_loader_main, pool) == 0;
    if (!pool->space_thread) {      /* load on first use after all */
      pool->space_lazy = true;
      pool->space_loading = false;
    }
  }
  pthread_mutex_unlock (&pool->space_lock);
}

bool
pool_is_readonly (struct cairn_pool *pool)
{
  return pool->readonly;
}

int
pool_space_load (struct cairn_pool *pool)
{
  return space_ensure (pool);
}

/* Describe the pool. */
void
pool_info (struct cairn_pool *pool, struct pool_info *info)
{
  struct dev_counts dc;

  (void) space_ensure (pool);   /* a failure shows as info->failed */
  memset (info, 0, sizeof *info);
  pthread_mutex_lock (&pool->commit_lock);
  memcpy (info->uuid, pool->sb.uuid, 16);
  info->generation = pool->durable_gen;
  info->commits = pool->commits;
  info->commit_time = pool->commit_time;
  info->spacemap_blocks = pool->sm.nbase + pool->sm.nlog;
  info->node_size = pool->sb.node_size;
  info->total_blocks = pool->sb.total_blocks;
  info->data_start_block = pool->sb.data_start;
  pthread_mutex_unlock (&pool->commit_lock);
  info->open_generation = __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
  info->readonly = pool->readonly;
  info->failed = __atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE);
  if (info->failed)
    snprintf (info->failed_why, sizeof info->failed_why, "%s",
              pool->failed_why);
  else
    info->failed_why[0] = '\0';
  space_stats (pool->space, &info->space);
  nodecache_stats (pool->cache, &info->cache);
  info->check_every_read = !dev_trusting (pool->dev);
  dev_counts (pool->dev, &dc);
  info->blocks_trusted = dc.blocks_trusted;
  info->bytes_read_ahead = dc.bytes_prefetched;
}

struct nodecache *
pool_cache (struct cairn_pool *pool)
{
  return pool->cache;
}

struct space *
pool_space (struct cairn_pool *pool)
{
  (void) space_ensure (pool);   /* callers that care use pool_space_load */
  return pool->space;
}

struct cairn_dev *
pool_dev (struct cairn_pool *pool)
{
  return pool->dev;
}

struct btree *
pool_root_tree (struct cairn_pool *pool)
{
  return pool->root;
}

void
pool_spacemap (struct cairn_pool *pool, struct pool_spacemap_info *info)
{
  (void) space_ensure (pool);
  info->base = pool->sm.base;
  info->nbase = pool->sm.nbase;
  info->log = pool->sm.log;
  info->nlog = pool->sm.nlog;
  info->log_records = pool->sm.log_records;
  info->legacy = pool->sm.legacy;
}

/* Hang the upper layer's state on the pool. */
void
pool_attach (struct cairn_pool *pool, void *obj, void (*destroy) (void *),
             pool_freeze_hook hook, void (*quiesce) (void *))
{
  pool->attached = obj;
  pool->attached_destroy = destroy;
  pool->freeze_hook = hook;
  pool->attached_quiesce = quiesce;
}

/* Give the pool a clock (pool.h). */
void
pool_set_clock (struct cairn_pool *pool, int64_t (*clock) (void *opaque),
                void *opaque)
{
  pool->clock_opaque = opaque;
  pool->clock = clock;
}

/* The pool's time (pool.h). */
int64_t
pool_now (struct cairn_pool *pool)
{
  return pool->clock ? pool->clock (pool->clock_opaque) : (int64_t) time (NULL);
}

/* Has the pool these compat feature flags (pool.h)? */
bool
pool_has_compat (struct cairn_pool *pool, uint64_t bits)
{
  return (pool->sb.compat & bits) == bits;
}

bool
pool_background_allowed (struct cairn_pool *pool)
{
  return !pool->readonly && !pool->no_background &&
         !__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE);
}

void *
pool_attached (struct cairn_pool *pool)
{
  return pool->attached;
}

void
pool_attach_lock (struct cairn_pool *pool)
{
  pthread_mutex_lock (&pool->attach_lock);
}

void
pool_attach_unlock (struct cairn_pool *pool)
{
  pthread_mutex_unlock (&pool->attach_lock);
}

void
pool_need_feature (struct cairn_pool *pool, uint64_t bits)
{
  pool->need_incompat |= bits;    /* txn_lock is held exclusive */
}

/* The open generation. */
uint64_t
pool_open_gen (struct cairn_pool *pool)
{
  return __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
}
