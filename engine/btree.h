/* Cairn engine, layer "btree": copy-on-write B-trees of checksummed nodes.
 *
 * Keys and values are byte strings; keys order by memcmp (shorter first on
 * a common prefix), so integer keys are stored big-endian.  Every node is
 * reached through a block pointer (address, birth generation, SHA-256), so
 * a tree is a Merkle tree: a node read from disk is checked against its
 * pointer and fully validated before use (btree-node.c).
 *
 * A modification never changes a node that a durable generation can see:
 * the node is copied to a new address first (COW) and the old block is
 * handed to the tree's free function with its birth generation, which
 * decides whether it is free or still held by a snapshot (reclaim layer).
 *
 * Nodes live in a node cache shared by all trees of a pool, bounded in
 * bytes: clean nodes not used lately are evicted (CLOCK, btree-cache.c);
 * dirty nodes stay until the commit writes them (txn.c keeps their number
 * bounded).
 *
 * Locking: a tree is not locked internally.  Callers hold btree_rdlock for
 * lookups and cursors and btree_wrlock for modifications; the cache, the
 * allocator and the nodes that trees share have their own locks.
 */
#ifndef CAIRN_BTREE_H
#define CAIRN_BTREE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "sha256.h"
#include "space.h"
#include "util.h"

#define BLOCK_SIZE 4096u
#define BLOCK_SHIFT 12

/* A block pointer: where a block is, when it was written, what it holds. */
struct blkptr {
  uint64_t addr;                  /* byte address on the pool device; 0: none */
  uint64_t birth;                 /* generation that wrote the block */
  uint8_t sha[SHA256_LEN];        /* SHA-256 of the whole block */
};
#define BLKPTR_SIZE 48
void blkptr_encode (const struct blkptr *bp, uint8_t *p);
void blkptr_decode (const uint8_t *p, struct blkptr *bp);

/* What names a tree: its root pointer and the root's level.  bp.addr == 0
 * is the empty tree.
 */
struct btree_root {
  struct blkptr bp;
  uint8_t level;
};

#define BTREE_MAX_KEY 512
#define NODE_SIZE_MIN 4096u
#define NODE_SIZE_MAX 65536u
#define NODE_SIZE_DEFAULT 16384u

/* ---------------------------------------------------------------- cache */

struct nodecache;

struct nodecache_config {
  struct cairn_dev *dev;
  struct space *space;
  uint32_t node_size;             /* bytes, power of two, 4 KiB to 64 KiB */
  uint8_t uuid[16];               /* pool UUID, recorded in every node */
  uint64_t limit_bytes;           /* clean nodes beyond this are evicted */
};

struct nodecache_stats {
  uint64_t nodes, bytes;          /* resident */
  uint64_t alive;                 /* node buffers in memory, held ones too */
  uint64_t dirty_nodes;
  uint64_t hits, misses, evictions;
  uint64_t csum_errors;           /* nodes whose checksum did not match */
  uint64_t corrupt;               /* nodes that failed validation */
};

int nodecache_create (const struct nodecache_config *cfg,
                      struct nodecache **cachep) CAIRN_WUR;
/* Every tree must be closed first. */
void nodecache_destroy (struct nodecache *cache);
/* The open generation: nodes born in it are modified in place. */
void nodecache_set_gen (struct nodecache *cache, uint64_t gen);
uint64_t nodecache_gen (struct nodecache *cache);
void nodecache_stats (struct nodecache *cache, struct nodecache_stats *st);
uint32_t nodecache_node_size (struct nodecache *cache);
/* Drop every clean, unused node (tests use it to force re-reads). */
void nodecache_drop_clean (struct nodecache *cache);
/* How many changes the trees of the cache have begun: an insert or a
 * delete that got past its checks (the key exists for a delete, it is new
 * for BTREE_NOOVERWRITE) counts once, whether it then succeeds or fails.
 * A caller that compares the count around a multi-step change knows
 * whether a failure left part of it done.
 */
uint64_t nodecache_changes (struct nodecache *cache);
/* For tests: the nth change from now fails with err (a negative errno)
 * before it touches anything; 0 disarms.
 */
void nodecache_fail_change (struct nodecache *cache, uint64_t nth, int err);

/* ---------------------------------------------------------------- trees */

struct btree;

/* Called with a block that a tree stops referencing. */
typedef void (*btree_free_fn) (void *opaque, uint64_t addr, uint64_t len,
                               uint64_t birth);

/* Open a tree handle on root (which may be empty).  id is recorded as the
 * owner of the nodes it writes.  The default free function frees the block
 * in the allocator (space_free).
 */
int btree_open (struct nodecache *cache, uint64_t id,
                const struct btree_root *root, struct btree **treep) CAIRN_WUR;
/* Close a handle.  Unwritten changes are dropped (and their blocks freed). */
void btree_close (struct btree *tree);
void btree_set_free_fn (struct btree *tree, btree_free_fn fn, void *opaque);
uint64_t btree_id (struct btree *tree);
void btree_get_root (struct btree *tree, struct btree_root *root);
/* Exchange the roots of two trees with no unfrozen change (-EBUSY
 * otherwise): the catalog publishes a received state this way.  Both are
 * write-locked by the caller.
 */
int btree_swap_roots (struct btree *a, struct btree *b) CAIRN_WUR;
/* Has the tree changed since it was opened or last frozen? */
bool btree_is_dirty (struct btree *tree);

void btree_rdlock (struct btree *tree);
void btree_wrlock (struct btree *tree);
void btree_unlock (struct btree *tree);

/* The largest value that can be stored with a key of klen bytes. */
size_t btree_max_value (struct nodecache *cache, size_t klen);

/* Look key up: copies up to valmax bytes of the value into val and sets
 * *vlenp to its full length.  -ENOENT when absent, -EIO on a bad node.
 */
int btree_lookup (struct btree *tree, const void *key, size_t klen,
                  void *val, size_t valmax, size_t *vlenp) CAIRN_WUR;

/* Insert or replace.  With BTREE_NOOVERWRITE an existing key fails with
 * -EEXIST.  -ENOSPC when the pool cannot hold the new nodes (nothing
 * changed), -E2BIG when key or value is too large.
 */
#define BTREE_NOOVERWRITE 1u
#define BTREE_RESERVE 2u      /* may use the pool's reserve (commits) */
int btree_insert (struct btree *tree, const void *key, size_t klen,
                  const void *val, size_t vlen, unsigned flags) CAIRN_WUR;

/* Delete key: -ENOENT when absent. */
int btree_delete (struct btree *tree, const void *key, size_t klen) CAIRN_WUR;

/* ---------------------------------------------------------------- cursors
 *
 * A cursor walks items in key order.  Its key and value pointers stay valid
 * until the cursor moves or the tree is modified; a modification of the
 * tree invalidates every cursor on it (seek again).
 */
struct btree_cursor;
int btree_cursor_new (struct btree *tree, struct btree_cursor **curp) CAIRN_WUR;
void btree_cursor_free (struct btree_cursor *cur);
/* Position on the first item with key >= key (NULL, 0: the first item).
 * -ENOENT when there is none.
 */
int btree_cursor_seek (struct btree_cursor *cur, const void *key, size_t klen)
  CAIRN_WUR;
/* Position on the last item with key <= key, or on the first item when
 * every key is greater (a lookup of the item that may cover key, as an
 * extent map needs).  -ENOENT on an empty tree.
 */
int btree_cursor_seek_le (struct btree_cursor *cur, const void *key,
                          size_t klen) CAIRN_WUR;
/* Move to the next item: -ENOENT at the end. */
int btree_cursor_next (struct btree_cursor *cur) CAIRN_WUR;
void btree_cursor_item (struct btree_cursor *cur, const uint8_t **keyp,
                        size_t *klenp, const uint8_t **valp, size_t *vlenp);

/* ---------------------------------------------------------------- commit */

/* Nodes frozen for writing: pinned in the cache until written. */
struct nodebatch {
  struct node **nodes;
  size_t n, cap;
};

/* Freeze a dirty tree for the commit of the open generation: compute every
 * dirty node's checksum bottom-up into its parent, mark the nodes clean, add
 * them to batch, return the new root in *root and give back the tree's
 * unused pre-allocated nodes.  Called with the tree write-locked.
 */
int btree_freeze (struct btree *tree, struct nodebatch *batch,
                  struct btree_root *root) CAIRN_WUR;
/* Give back pre-allocated nodes without freezing (before space_freeze). */
void btree_release_reserve (struct btree *tree);
/* Write the batch's nodes to the device (sorted, adjacent ones coalesced),
 * then unpin them.  Does not flush.
 */
int nodebatch_write (struct nodecache *cache, struct nodebatch *batch)
  CAIRN_WUR;
/* Unpin without writing (after a failed commit). */
void nodebatch_release (struct nodecache *cache, struct nodebatch *batch);

/* ---------------------------------------------------------------- checking */

/* Visit every node of the tree, fully validated (checksums, levels, key
 * order and key bounds, births never newer than their parent's pointer).
 * on_node is called once per node reached; when it returns 1 the subtree is
 * skipped (already visited through a shared pointer), < 0 stops the walk.
 * on_item is called for each leaf item.  Returns 0, or the first error
 * (with a message naming the node and the check).
 */
struct btree_visitor {
  int (*on_node) (void *opaque, const struct blkptr *bp, unsigned level);
  int (*on_item) (void *opaque, const uint8_t *key, size_t klen,
                  const uint8_t *val, size_t vlen);
  void *opaque;
};
int btree_walk (struct nodecache *cache, const struct btree_root *root,
                const struct btree_visitor *v) CAIRN_WUR;

/* Take apart a tree that will neither change nor be read again, one
 * bounded step at a time, so that deleting a large volume runs in the
 * background and resumes after a restart (DESIGN §2.4).  Visits, in key
 * order from the point `from` (a key; NULL: the start), the items of the
 * leaves born after `since` (on_item), and hands each node born after since
 * to on_node once everything below it has been visited (post-order).
 * Subtrees born at or before since are passed over unread.  The step ends
 * once about `budget` nodes and items were visited, between two children of
 * a node, with the point reached in next (at most BTREE_MAX_KEY bytes), or
 * with *done when the tree is finished.  Every node whose key range lies
 * wholly below the point has been handed out, and no other: resuming from
 * the point visits nothing twice and never reads a node handed out before.
 */
int btree_reap (struct nodecache *cache, const struct btree_root *root,
                uint64_t since, const uint8_t *from, size_t fromlen,
                size_t budget, const struct btree_visitor *v, uint8_t *next,
                size_t *nextlen, bool *done) CAIRN_WUR;

/* Visit, in key order, every leaf born after generation since, descending
 * only into pointers born after it (BT-4 makes that complete): the cost
 * follows the change, not the tree.  on_leaf gets the leaf's key range,
 * lo <= k < hi (NULL: unbounded), and the leaf itself, whose items it may
 * read with btree_leaf_item until it returns; a non-zero return stops the
 * walk.
 */
struct btree_leaf;
uint32_t btree_leaf_nitems (const struct btree_leaf *leaf);
void btree_leaf_item (const struct btree_leaf *leaf, uint32_t i,
                      const uint8_t **keyp, size_t *klenp,
                      const uint8_t **valp, size_t *vlenp);
int btree_walk_since (struct nodecache *cache, const struct btree_root *root,
                      uint64_t since,
                      int (*on_leaf) (void *opaque, const uint8_t *lo,
                                      size_t lolen, const uint8_t *hi,
                                      size_t hilen,
                                      const struct btree_leaf *leaf),
                      void *opaque) CAIRN_WUR;

#endif /* CAIRN_BTREE_H */
