/* Cairn engine: B-tree internals shared by btree-node.c, btree-cache.c and
 * btree.c.  Nothing outside the btree module includes this.
 *
 * On-disk node format (version 1), node_size bytes, little-endian:
 *
 *   offset size field
 *   0      4    magic        NODE_MAGIC ("CNOD")
 *   4      1    level        0 for leaves; a child is one level lower
 *   5      3    reserved     zero
 *   8      4    nitems       number of items
 *   12     4    data_start   lowest byte offset used by item bodies
 *   16     8    addr         the node's own byte address (misdirected
 *                            writes are caught by comparing it)
 *   24     8    gen          birth generation (equals the pointer's birth)
 *   32     8    owner        id of the tree that wrote the node
 *   40     16   uuid         pool UUID
 *   56     8    reserved     zero
 *   64     4*n  slots        u32 byte offset of item i's body, in key order
 *   ...         free space
 *   data_start..node_size    item bodies, in any order:
 *                              u16 klen, u16 vlen, key, value
 *
 * Internal nodes hold one item per child: the key is the lowest key the
 * child may hold (empty for item 0, which means "no lower bound"), the
 * value an encoded block pointer.  The node's checksum lives in the
 * pointer to it, not in the node.
 */
#ifndef CAIRN_BTREE_INT_H
#define CAIRN_BTREE_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "btree.h"

#define NODE_MAGIC 0x444f4e43u   /* "CNOD" */
#define NODE_HDR 64u
#define NODE_SLOT 4u
#define ITEM_HDR 4u
#define NODE_MAX_LEVEL 32u

/* A node in memory: the on-disk image plus cache bookkeeping. */
struct node {
  uint64_t addr;
  uint64_t gen;
  uint32_t used;            /* bytes used by slots and item bodies */
  uint32_t refs;            /* pins (users, batches), and NODE_DEAD once the
                               node has left the hash: atomic, see
                               btree-cache.c */
  bool dirty;               /* born in the open generation, not yet frozen */
  bool referenced;          /* used since the clock hand last passed */
  bool in_ring;
  struct node *hnext;       /* hash chain */
  struct node *cprev, *cnext; /* the clock ring of clean nodes */
  uint8_t *buf;
  /* A clean internal node's children whose keys btree_child found inside
   * the node's range for them, a bit each (set atomically); NULL for a
   * dirty node or a leaf, or when memory ran out: check every time.  A
   * clean node never changes, and its pointers name each child by its
   * checksum, so what was found holds for the node's life in the cache.
   */
  uint8_t *checked;
};

#define NODE_DEAD 0x80000000u

struct nodecache {
  struct cairn_dev *dev;
  struct space *space;
  uint32_t node_size;
  uint8_t uuid[16];
  uint64_t limit_bytes;
  uint64_t gen;             /* open generation (atomic) */
  uint64_t alloc_hint;      /* next-fit hint for node allocation, blocks */
  uint64_t changes;         /* changes begun (atomic; nodecache_changes) */
  uint64_t alive;           /* node buffers in memory (atomic: buffers are
                               made and freed outside the lock) */
  uint64_t fail_at;         /* tests: fail the change with this number */
  int fail_err;

  pthread_rwlock_t lock;    /* hash, ring, dirty, counters: read-locked by
                               lookups (btree-cache.c) */
  struct node **hash;
  size_t hash_size;         /* power of two */
  struct node *hand;        /* the clock hand: NULL when the ring is empty */
  size_t ring_nodes;
  struct nodecache_stats stats;  /* but hits: */
  SHARDED (uint64_t) hits[COUNTER_SHARDS];

  /* Node buffers (btree-cache.c, "buffers"), under their own lock. */
  pthread_mutex_t buf_lock;
  void *free_bufs;          /* free buffers, linked through their first bytes */
  void **chunks;            /* the mappings they come from */
  size_t nchunks;
};

struct btree {
  struct nodecache *cache;
  uint64_t id;
  struct btree_root root;
  bool dirty;
  btree_free_fn free_fn;
  void *free_opaque;
  pthread_rwlock_t lock;
  /* Pre-allocated node blocks, so that a modification that has started
   * cannot fail for lack of space (btree.c).
   */
  uint64_t resv[2 * NODE_MAX_LEVEL + 8];
  unsigned nresv;
};

/* ---- btree-node.c: the node format */

static inline uint32_t
node_capacity (uint32_t node_size)
{
  return node_size - NODE_HDR;
}
static inline unsigned
node_level (const struct node *n)
{
  return n->buf[4];
}
static inline uint32_t
node_nitems (const struct node *n)
{
  return get_le32 (n->buf + 8);
}
static inline uint32_t
item_size (size_t klen, size_t vlen)
{
  return (uint32_t) (NODE_SLOT + ITEM_HDR + klen + vlen);
}

void node_init (struct node *n, uint32_t node_size, unsigned level,
                uint64_t addr, uint64_t gen, uint64_t owner,
                const uint8_t uuid[16]);
/* Rewrite the header's address, generation and owner (after a copy). */
void node_set_identity (struct node *n, uint64_t addr, uint64_t gen,
                        uint64_t owner);
void node_stamp_identity (struct node *n, uint64_t owner);
/* Check a node image read from disk against what points to it. */
int node_validate (const uint8_t *buf, uint32_t node_size,
                   const struct blkptr *bp, const uint8_t uuid[16],
                   uint32_t *usedp) CAIRN_WUR;
const uint8_t *node_key (const struct node *n, uint32_t i, size_t *klenp);
const uint8_t *node_val (const struct node *n, uint32_t i, size_t *vlenp);
int key_cmp (const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);
/* Index of the first item with key >= key; *found if equal. */
uint32_t node_search (const struct node *n, const uint8_t *key, size_t klen,
                      bool *found);
/* Index of the child whose range holds key (internal nodes). */
uint32_t node_child_index (const struct node *n, const uint8_t *key,
                           size_t klen);
bool node_fits (const struct node *n, uint32_t node_size, size_t klen,
                size_t vlen);
void node_insert_at (struct node *n, uint32_t node_size, uint32_t i,
                     const uint8_t *key, size_t klen, const uint8_t *val,
                     size_t vlen);
void node_delete_at (struct node *n, uint32_t i);
/* Overwrite item i's value in place (same length). */
void node_set_val (struct node *n, uint32_t i, const uint8_t *val);
/* Move items [from, nitems) of src to the end of dst. */
void node_move_tail (struct node *dst, struct node *src, uint32_t from,
                     uint32_t node_size);
void node_get_child (const struct node *n, uint32_t i, struct blkptr *bp);
void node_set_child (struct node *n, uint32_t i, const struct blkptr *bp);

/* ---- btree.c */

/* Get child i of an internal node, pinned, after checking its level and
 * that its keys lie in the parent's range for it.
 */
int btree_child (struct btree *t, struct node *parent, uint32_t i,
                 struct node **cp) CAIRN_WUR;

/* ---- btree-cache.c: the node cache */

/* Get the node bp points to, reading and validating it on a miss.  The
 * node is pinned; release it with cache_put.
 */
int cache_get (struct nodecache *c, const struct blkptr *bp,
               struct node **np) CAIRN_WUR;
/* Find a resident node by address (dirty children during freeze), pinned. */
struct node *cache_find (struct nodecache *c, uint64_t addr);
/* A new dirty node at addr, pinned, initialised as an empty node. */
int cache_new (struct nodecache *c, uint64_t addr, unsigned level,
               uint64_t owner, struct node **np) CAIRN_WUR;
void cache_pin (struct nodecache *c, struct node *n);
void cache_put (struct nodecache *c, struct node *n);
/* Remove a node whose block is being freed (it stays valid for holders). */
void cache_forget (struct nodecache *c, struct node *n);
/* A dirty node was frozen: it is clean from now on. */
void cache_mark_clean (struct nodecache *c, struct node *n);

#endif /* CAIRN_BTREE_INT_H */
