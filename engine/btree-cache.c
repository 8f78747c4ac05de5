/* Cairn engine: the node cache shared by all trees of a pool.
 *
 * A hash table from address to node, and a clock ring of the clean nodes.
 * Dirty nodes and pinned nodes are never evicted.  The cache lock is never
 * held across I/O: a miss reads and validates the node unlocked and inserts
 * it afterwards (a racing reader's copy wins and the other is dropped).
 *
 * Replacement is CLOCK, not LRU: a hit sets the node's referenced bit and
 * the hand, sweeping the ring when the cache is over its limit, clears the
 * bits it passes and evicts the first clean unpinned node whose bit is
 * clear.  A random read visits a leaf among thousands, and an LRU list
 * relinked on every hit wrote to both neighbours of that leaf, two more
 * cache misses per visit, under the lock.
 *
 * The lock.  A lookup that finds its node (the hit of every walk through a
 * cached tree) takes the cache lock for reading, so walks in parallel do
 * not queue behind each other; a miss's insert, eviction and the changes
 * of a commit take it for writing.  Writers are preferred (lock_init).
 *
 * Pins.  n->refs counts pins, and its NODE_DEAD bit says the node has left
 * the hash.  A pin is taken under the lock (a lookup, holding it for
 * reading at least) or by a holder (cache_pin), and let go without it: so
 * eviction, holding the lock for writing, sees a node at zero pins stay
 * there.  Whoever makes refs exactly NODE_DEAD frees the node: the last
 * cache_put of a dead node, or the thread that marks an unpinned node dead.
 * cache_put takes the lock only to evict, when the cache is over its
 * limit.
 *
 * Buffers.  Node buffers come from chunks the cache maps itself and go
 * back to its own free list, never to malloc.  With malloc, the nbdkit
 * threads' arenas each kept the buffers freed into them: a server that
 * had randomly written a 16 GiB volume held twice its cache in memory.
 * Here memory is the most buffers ever alive at once (the cache limit,
 * plus dirty nodes and the nodes a commit is writing) and stays so; it
 * goes back to the system when the pool closes.  Under AddressSanitizer
 * each buffer is malloc'd, so that it still sees overruns and uses after
 * free of node buffers.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/mman.h>

#include "btree-int.h"

/* Hash an address into the table. */
static inline size_t
hash_slot (const struct nodecache *c, uint64_t addr)
{
  uint64_t h = (addr >> BLOCK_SHIFT) * 0x9e3779b97f4a7c15ull;

  return (size_t) (h >> 20) & (c->hash_size - 1);
}

/* The cache lock: lookups that hit take it for reading, everything that
 * changes the hash or the ring for writing.  Writers are preferred, or a
 * steady stream of hits could keep a miss waiting to insert its node.
 */
static int
lock_init (pthread_rwlock_t *lock)
{
  pthread_rwlockattr_t attr;
  int r;

  if (pthread_rwlockattr_init (&attr) != 0)
    return -1;
  pthread_rwlockattr_setkind_np (&attr,
                                 PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  r = pthread_rwlock_init (lock, &attr);
  pthread_rwlockattr_destroy (&attr);
  return r;
}

/* Create a cache. */
int
nodecache_create (const struct nodecache_config *cfg, struct nodecache **cachep)
{
  struct nodecache *c;

  if (cfg->node_size < NODE_SIZE_MIN || cfg->node_size > NODE_SIZE_MAX ||
      (cfg->node_size & (cfg->node_size - 1)))
    return cairn_fail (-EINVAL, "node size %" PRIu32 " is not a power of two "
                       "between 4K and 64K", cfg->node_size);
  c = calloc (1, sizeof *c);
  if (c == NULL)
    return cairn_fail (-ENOMEM, "out of memory creating the node cache");
  c->dev = cfg->dev;
  c->space = cfg->space;
  c->node_size = cfg->node_size;
  memcpy (c->uuid, cfg->uuid, 16);
  c->limit_bytes = cfg->limit_bytes;
  c->hash_size = 1024;
  c->hash = calloc (c->hash_size, sizeof *c->hash);
  if (c->hash == NULL) {
    free (c);
    return cairn_fail (-ENOMEM, "out of memory creating the node cache");
  }
  if (lock_init (&c->lock) != 0) {
    free (c->hash);
    free (c);
    return cairn_fail (-ENOMEM, "out of memory creating the node cache");
  }
  pthread_mutex_init (&c->buf_lock, NULL);
  *cachep = c;
  return 0;
}

#define BUF_CHUNK (2u << 20)    /* bytes mapped at a time */

#if defined(__SANITIZE_ADDRESS__)
static uint8_t *
buf_get (struct nodecache *c)
{
  return malloc (c->node_size);
}

static void
buf_put (struct nodecache *c, uint8_t *b)
{
  (void) c;
  free (b);
}
#else

/* Map a chunk for node buffers, aligned to its size, and ask for a huge
 * page behind it.  A random read walks a leaf among thousands: with 4 KiB
 * pages nearly every leaf visited costs a TLB miss, and a page walk in a
 * virtual machine is two-dimensional and slow.  Where transparent huge
 * pages are in "madvise" mode (the usual default), only MADV_HUGEPAGE gets
 * them; where they are off, this is a chunk like any other.
 */
static uint8_t *
map_chunk (void)
{
  uint8_t *m = mmap (NULL, 2 * BUF_CHUNK, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uintptr_t a;
  size_t head;

  if (m == MAP_FAILED)
    return m;
  a = ((uintptr_t) m + BUF_CHUNK - 1) & ~((uintptr_t) BUF_CHUNK - 1);
  head = a - (uintptr_t) m;
  if (head > 0)
    munmap (m, head);
  munmap ((uint8_t *) a + BUF_CHUNK, BUF_CHUNK - head);
#ifdef MADV_HUGEPAGE
  (void) madvise ((void *) a, BUF_CHUNK, MADV_HUGEPAGE);
#endif
  return (uint8_t *) a;
}

/* A node buffer from the free list, mapping another chunk when it is
 * empty; NULL when out of memory.
 */
static uint8_t *
buf_get (struct nodecache *c)
{
  uint8_t *b;

  pthread_mutex_lock (&c->buf_lock);
  if (c->free_bufs == NULL) {
    void **nc = realloc (c->chunks, (c->nchunks + 1) * sizeof *nc);
    uint8_t *m = MAP_FAILED;

    if (nc != NULL) {
      c->chunks = nc;
      m = map_chunk ();
    }
    if (m == MAP_FAILED) {
      pthread_mutex_unlock (&c->buf_lock);
      return NULL;
    }
    c->chunks[c->nchunks++] = m;
    for (size_t off = BUF_CHUNK; off >= c->node_size; off -= c->node_size) {
      *(void **) (m + off - c->node_size) = c->free_bufs;
      c->free_bufs = m + off - c->node_size;
    }
  }
  b = c->free_bufs;
  c->free_bufs = *(void **) b;
  pthread_mutex_unlock (&c->buf_lock);
  return b;
}

/* Give a node buffer back to the free list. */
static void
buf_put (struct nodecache *c, uint8_t *b)
{
  pthread_mutex_lock (&c->buf_lock);
  *(void **) b = c->free_bufs;
  c->free_bufs = b;
  pthread_mutex_unlock (&c->buf_lock);
}
#endif

/* Free a node's memory. */
static void
node_destroy (struct nodecache *c, struct node *n)
{
  __atomic_sub_fetch (&c->alive, 1, __ATOMIC_RELAXED);
  buf_put (c, n->buf);
  free (n->checked);
  free (n);
}

/* The children-checked bits of a node that is clean from now on (NULL for
 * a leaf, or out of memory: btree_child then checks every time).
 */
static uint8_t *
checked_bits (const struct node *n)
{
  if (node_level (n) == 0)
    return NULL;
  return calloc (DIV_ROUND_UP (node_nitems (n), 8), 1);
}

/* Destroy the cache and every node in it. */
void
nodecache_destroy (struct nodecache *c)
{
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->hash_size; i++) {
    struct node *n = c->hash[i];
    while (n) {
      struct node *next = n->hnext;
      node_destroy (c, n);
      n = next;
    }
  }
  free (c->hash);
  for (size_t i = 0; i < c->nchunks; i++)
    munmap (c->chunks[i], BUF_CHUNK);
  free (c->chunks);
  pthread_mutex_destroy (&c->buf_lock);
  pthread_rwlock_destroy (&c->lock);
  free (c);
}

/* Set the open generation. */
void
nodecache_set_gen (struct nodecache *c, uint64_t gen)
{
  __atomic_store_n (&c->gen, gen, __ATOMIC_RELEASE);
}

/* The open generation. */
uint64_t
nodecache_gen (struct nodecache *c)
{
  return __atomic_load_n (&c->gen, __ATOMIC_ACQUIRE);
}

/* The configured node size. */
uint32_t
nodecache_node_size (struct nodecache *c)
{
  return c->node_size;
}

/* Copy the counters. */
void
nodecache_stats (struct nodecache *c, struct nodecache_stats *st)
{
  pthread_rwlock_wrlock (&c->lock);
  *st = c->stats;
  COUNTERS_SUM (c->hits, &st->hits);
  pthread_rwlock_unlock (&c->lock);
  st->alive = __atomic_load_n (&c->alive, __ATOMIC_RELAXED);
}

/* Add a clean node to the ring, just behind the hand: the last that the
 * hand will look at (lock held).
 */
static void
ring_add (struct nodecache *c, struct node *n)
{
  if (c->hand == NULL) {
    n->cprev = n->cnext = n;
    c->hand = n;
  }
  else {
    n->cnext = c->hand;
    n->cprev = c->hand->cprev;
    n->cprev->cnext = n;
    c->hand->cprev = n;
  }
  n->in_ring = true;
  c->ring_nodes++;
}

/* Take a node out of the ring (lock held). */
static void
ring_remove (struct nodecache *c, struct node *n)
{
  if (!n->in_ring)
    return;
  if (n->cnext == n)
    c->hand = NULL;
  else {
    n->cprev->cnext = n->cnext;
    n->cnext->cprev = n->cprev;
    if (c->hand == n)
      c->hand = n->cnext;
  }
  n->cprev = n->cnext = NULL;
  n->in_ring = false;
  c->ring_nodes--;
}

/* Count resident bytes (lock held; cache_put reads the count without it). */
static void
bytes_add (struct nodecache *c, int64_t delta)
{
  __atomic_store_n (&c->stats.bytes, c->stats.bytes + (uint64_t) delta,
                    __ATOMIC_RELAXED);
}

/* Pin a node found in the hash (lock held, for reading at least: lookups
 * pin side by side, so the referenced bit is stored atomically).
 */
static void
pin_found (struct node *n)
{
  __atomic_add_fetch (&n->refs, 1, __ATOMIC_RELAXED);
  __atomic_store_n (&n->referenced, true, __ATOMIC_RELAXED);
}

/* Unlink from the hash table (lock held). */
static void
hash_remove (struct nodecache *c, struct node *n)
{
  struct node **pp = &c->hash[hash_slot (c, n->addr)];

  while (*pp && *pp != n)
    pp = &(*pp)->hnext;
  if (*pp)
    *pp = n->hnext;
  n->hnext = NULL;
}

/* Double the hash table when it is fuller than one node per slot. */
static void
hash_grow (struct nodecache *c)
{
  size_t old_size = c->hash_size, new_size = old_size * 2;
  struct node **old = c->hash, **nh = calloc (new_size, sizeof *nh);

  if (nh == NULL)
    return;     /* stay at the current size: slower, still correct */
  c->hash = nh;
  c->hash_size = new_size;
  for (size_t i = 0; i < old_size; i++) {
    struct node *n = old[i];
    while (n) {
      struct node *next = n->hnext;
      size_t s = hash_slot (c, n->addr);
      n->hnext = nh[s];
      nh[s] = n;
      n = next;
    }
  }
  free (old);
}

/* Insert into the hash table (lock held). */
static void
hash_insert (struct nodecache *c, struct node *n)
{
  size_t s;

  if (c->stats.nodes + 1 > c->hash_size)
    hash_grow (c);
  s = hash_slot (c, n->addr);
  n->hnext = c->hash[s];
  c->hash[s] = n;
  c->stats.nodes++;
  bytes_add (c, c->node_size);
}

/* Look an address up (lock held). */
static struct node *
hash_find (struct nodecache *c, uint64_t addr)
{
  struct node *n = c->hash[hash_slot (c, addr)];

  while (n && n->addr != addr)
    n = n->hnext;
  return n;
}

/* Take a node that is leaving the cache out of the hash and the ring and
 * mark it dead; free it if nobody holds it (lock held).
 */
static void
node_retire (struct nodecache *c, struct node *n)
{
  hash_remove (c, n);
  ring_remove (c, n);
  c->stats.nodes--;
  bytes_add (c, -(int64_t) c->node_size);
  if (n->dirty)
    c->stats.dirty_nodes--;
  n->dirty = false;
  if (__atomic_fetch_or (&n->refs, NODE_DEAD, __ATOMIC_ACQ_REL) == 0)
    node_destroy (c, n);
}

/* Evict clean unpinned nodes while over limit bytes (lock held).  The
 * hand gives every node a second chance: two turns of the ring without an
 * eviction mean that every clean node is pinned.
 */
static void
evict_to (struct nodecache *c, uint64_t limit)
{
  size_t passed = 0;

  while (c->stats.bytes > limit && c->hand &&
         passed <= 2 * c->ring_nodes) {
    struct node *n = c->hand;

    c->hand = n->cnext;
    if (__atomic_load_n (&n->refs, __ATOMIC_ACQUIRE) != 0) {
      passed++;
      continue;
    }
    if (n->referenced) {
      n->referenced = false;
      passed++;
      continue;
    }
    node_retire (c, n);
    c->stats.evictions++;
    passed = 0;
  }
}

/* Evict down to the cache's limit (lock held). */
static void
evict (struct nodecache *c)
{
  evict_to (c, c->limit_bytes);
}

/* Allocate an unattached node with a buffer. */
static struct node *
node_alloc (struct nodecache *c)
{
  struct node *n = calloc (1, sizeof *n);

  if (n == NULL)
    return NULL;
  n->buf = buf_get (c);
  if (n->buf == NULL) {
    free (n);
    return NULL;
  }
  __atomic_add_fetch (&c->alive, 1, __ATOMIC_RELAXED);
  return n;
}

/* Get the node that bp points to, pinned. */
int
cache_get (struct nodecache *c, const struct blkptr *bp, struct node **np)
{
  struct node *n, *other;
  uint32_t used;
  int r;

  pthread_rwlock_rdlock (&c->lock);
  n = hash_find (c, bp->addr);
  if (n && n->gen == bp->birth) {
    pin_found (n);
    __atomic_add_fetch (&c->hits[counter_shard ()].c, 1, __ATOMIC_RELAXED);
    pthread_rwlock_unlock (&c->lock);
    *np = n;
    return 0;
  }
  __atomic_add_fetch (&c->stats.misses, 1, __ATOMIC_RELAXED);
  pthread_rwlock_unlock (&c->lock);

  if (bp->addr == 0 || bp->addr % BLOCK_SIZE ||
      bp->addr + c->node_size > c->dev->size) {
    cairn_error ("corrupt block pointer: node address %" PRIu64
                 " is outside the pool", bp->addr);
    return -EIO;
  }
  n = node_alloc (c);
  if (n == NULL)
    return cairn_fail (-ENOMEM, "out of memory reading a metadata node");
  /* The reader holds the tree that points to the node, so the node
   * cannot be freed and reused under a repair (dev.h, H2).
   */
  r = dev_pread_checked (c->dev, n->buf, c->node_size, bp->addr, true,
                         dev_check_sha256, (void *) bp->sha);
  if (r < 0 && r != -EBADMSG)
    goto fail;
  if (r == -EBADMSG) {
    pthread_rwlock_wrlock (&c->lock);
    c->stats.csum_errors++;
    pthread_rwlock_unlock (&c->lock);
    r = cairn_fail (-EIO, "checksum mismatch in metadata node at byte %" PRIu64
                    " (block %" PRIu64 ", birth %" PRIu64 "): the node is "
                    "damaged on disk", bp->addr, bp->addr >> BLOCK_SHIFT,
                    bp->birth);
    goto fail;
  }
  r = node_validate (n->buf, c->node_size, bp, c->uuid, &used);
  if (r < 0) {
    pthread_rwlock_wrlock (&c->lock);
    c->stats.corrupt++;
    pthread_rwlock_unlock (&c->lock);
    goto fail;
  }
  n->addr = bp->addr;
  n->gen = bp->birth;
  n->used = used;
  n->refs = 1;          /* not yet shared: no atomics needed */
  n->checked = checked_bits (n);

  pthread_rwlock_wrlock (&c->lock);
  other = hash_find (c, bp->addr);
  if (other && other->gen == bp->birth) {
    /* Another thread read it meanwhile: use its copy. */
    pin_found (other);
    pthread_rwlock_unlock (&c->lock);
    node_destroy (c, n);
    *np = other;
    return 0;
  }
  if (other)
    node_retire (c, other);   /* a stale node of an older life of the address */
  hash_insert (c, n);
  n->referenced = true;
  ring_add (c, n);
  evict (c);
  pthread_rwlock_unlock (&c->lock);
  *np = n;
  return 0;

 fail:
  node_destroy (c, n);
  return r;
}

/* Find a resident node by address, pinned (NULL if absent). */
struct node *
cache_find (struct nodecache *c, uint64_t addr)
{
  struct node *n;

  pthread_rwlock_rdlock (&c->lock);
  n = hash_find (c, addr);
  if (n)
    pin_found (n);
  pthread_rwlock_unlock (&c->lock);
  return n;
}

/* Make a new dirty node at addr, replacing any stale node cached there. */
int
cache_new (struct nodecache *c, uint64_t addr, unsigned level, uint64_t owner,
           struct node **np)
{
  struct node *n = node_alloc (c), *old;
  uint64_t gen = nodecache_gen (c);

  if (n == NULL)
    return cairn_fail (-ENOMEM, "out of memory creating a metadata node");
  node_init (n, c->node_size, level, addr, gen, owner, c->uuid);
  n->refs = 1;
  n->dirty = true;

  pthread_rwlock_wrlock (&c->lock);
  old = hash_find (c, addr);
  if (old)
    node_retire (c, old);
  hash_insert (c, n);
  c->stats.dirty_nodes++;
  evict (c);
  pthread_rwlock_unlock (&c->lock);
  *np = n;
  return 0;
}

/* Pin a node that the caller already holds. */
void
cache_pin (struct nodecache *c, struct node *n)
{
  (void) c;
  __atomic_add_fetch (&n->refs, 1, __ATOMIC_RELAXED);
}

/* Unpin a node.  A clean node the hand finds unpinned may be evicted; if
 * the cache is over its limit, make room now (the limit was passed while
 * everything clean was pinned, or by a commit's nodes turning clean).
 */
void
cache_put (struct nodecache *c, struct node *n)
{
  uint32_t was;

  if (n == NULL)
    return;
  was = __atomic_fetch_sub (&n->refs, 1, __ATOMIC_ACQ_REL);
  if (was == (NODE_DEAD | 1)) {
    node_destroy (c, n);
    return;
  }
  if (was == 1 &&
      __atomic_load_n (&c->stats.bytes, __ATOMIC_RELAXED) > c->limit_bytes) {
    pthread_rwlock_wrlock (&c->lock);
    evict (c);
    pthread_rwlock_unlock (&c->lock);
  }
}

/* Drop a node whose block is freed; holders keep a valid copy. */
void
cache_forget (struct nodecache *c, struct node *n)
{
  pthread_rwlock_wrlock (&c->lock);
  if (!(__atomic_load_n (&n->refs, __ATOMIC_RELAXED) & NODE_DEAD))
    node_retire (c, n);
  pthread_rwlock_unlock (&c->lock);
}

/* A frozen node is clean from now on: the hand may evict it. */
void
cache_mark_clean (struct nodecache *c, struct node *n)
{
  pthread_rwlock_wrlock (&c->lock);
  if (n->dirty) {           /* a dead node is not: node_retire */
    n->dirty = false;
    c->stats.dirty_nodes--;
    n->referenced = true;
    ring_add (c, n);
    __atomic_store_n (&n->checked, checked_bits (n), __ATOMIC_RELEASE);
  }
  pthread_rwlock_unlock (&c->lock);
}

/* Drop every clean unpinned node. */
void
nodecache_drop_clean (struct nodecache *c)
{
  pthread_rwlock_wrlock (&c->lock);
  evict_to (c, 0);
  pthread_rwlock_unlock (&c->lock);
}
