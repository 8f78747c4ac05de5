/* Cairn engine, layer "space" (private header): sets of block ranges.
 *
 * A rangeset holds disjoint, coalesced ranges [start, start + len) of
 * uint64 block numbers: two stored ranges never overlap and never touch
 * (adding [5, 8) next to [0, 5) leaves one range [0, 8)).  The ranges sit
 * in an AVL tree keyed by start, each node augmented with the longest
 * range in its subtree, so that every operation below is O(log n) worst
 * case, n being the number of stored ranges.
 *
 * A range always has len >= 1 and start + len <= UINT64_MAX; functions
 * that take a range reject others with -EINVAL.
 *
 * Memory: add and remove need at most one new node each.  A rangeset
 * keeps a few spare nodes; rangeset_reserve tops them up so that the next
 * adds and removes cannot fail with -ENOMEM, which lets a caller change
 * several sets as one step.
 *
 * Only the space module uses this header.  The struct is public so that it
 * can be embedded without an allocation; its fields are private.
 * Not thread safe: the owner locks.
 */
#ifndef CAIRN_RANGESET_H
#define CAIRN_RANGESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct rangeset_node;

struct rangeset {
  struct rangeset_node *root;
  uint64_t count;              /* stored ranges */
  uint64_t total;              /* sum of their lengths */
  uint64_t chunk;              /* 0, or the size of the pieces counted in */
  uint64_t chunked;            /* ... sum of len rounded down to chunk */
  struct rangeset_node *spare; /* unused nodes, linked through left */
  size_t nspare;
};

/* Callback for rangeset_foreach: non-zero stops the walk. */
typedef int (*rangeset_fn) (void *opaque, uint64_t start, uint64_t len);

/* Make an empty set (no allocation). */
void rangeset_init (struct rangeset *rs);
/* Count, in chunked, how much of the set lies in whole pieces of chunk
 * blocks (the free set: room for metadata nodes); 0 stops counting.
 */
void rangeset_set_chunk (struct rangeset *rs, uint64_t chunk);

/* Free every node; the set is empty again and may be reused. */
void rangeset_destroy (struct rangeset *rs);

/* Add [start, start + len), coalescing with the ranges it touches.
 * -EEXIST (set unchanged) if any block is already in the set.
 */
int rangeset_add (struct rangeset *rs, uint64_t start, uint64_t len) CAIRN_WUR;

/* Remove [start, start + len), which must lie inside one stored range
 * (splitting it if needed); -ENOENT (set unchanged) otherwise.
 */
int rangeset_remove (struct rangeset *rs, uint64_t start,
                     uint64_t len) CAIRN_WUR;

/* Keep at least n spare nodes, so that the next n calls of rangeset_add
 * and rangeset_remove cannot fail with -ENOMEM.
 */
int rangeset_reserve (struct rangeset *rs, size_t n) CAIRN_WUR;

/* Move every range of src into dst without allocating (src's nodes are
 * reused); src ends empty.  -EEXIST if a range of src overlaps dst: the
 * rest is still moved and the overlapping ranges are dropped.
 */
int rangeset_merge (struct rangeset *dst, struct rangeset *src) CAIRN_WUR;

/* Is every block of [start, start + len) in the set?  (Since ranges are
 * coalesced, that means inside one stored range.)  False for len 0.
 */
bool rangeset_contains (const struct rangeset *rs, uint64_t start,
                        uint64_t len);

/* Is any block of [start, start + len) in the set?  False for len 0. */
bool rangeset_overlaps (const struct rangeset *rs, uint64_t start,
                        uint64_t len);

/* Find the lowest pos >= hint such that [pos, pos + n) is in the set: a
 * run of n blocks at or after hint, which may sit inside a range that
 * starts before hint.  False if there is none (or n is 0).
 */
bool rangeset_find (const struct rangeset *rs, uint64_t n, uint64_t hint,
                    uint64_t *posp);

/* Find the first stored range that ends after pos, that is the range
 * containing pos or else the first one starting after it.  False if there
 * is none.
 */
bool rangeset_next (const struct rangeset *rs, uint64_t pos, uint64_t *startp,
                    uint64_t *lenp);

/* Call fn for every range in address order; stops and returns fn's value
 * when it is non-zero, else returns 0.  fn must not change the set.
 */
int rangeset_foreach (const struct rangeset *rs, rangeset_fn fn, void *opaque);

/* Number of stored ranges. */
static inline uint64_t
rangeset_count (const struct rangeset *rs)
{
  return rs->count;
}

/* Memory the set's nodes take, spares included (allocator overhead not
 * counted).
 */
size_t rangeset_bytes (const struct rangeset *rs);

/* Number of blocks in the set. */
static inline uint64_t
rangeset_total (const struct rangeset *rs)
{
  return rs->total;
}

/* Check the tree's invariants (order, disjoint and coalesced ranges, AVL
 * balance, heights, subtree maxima, count and total); -EUCLEAN with a
 * message naming the first broken one.  For tests and debugging: O(n).
 */
int rangeset_check (const struct rangeset *rs) CAIRN_WUR;

#endif /* CAIRN_RANGESET_H */
