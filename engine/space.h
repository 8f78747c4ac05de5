/* Cairn engine, layer "space": free-space map and allocator.
 *
 * The pool's data area is a range of 4 KiB blocks [base, end).  The
 * in-memory free set is an extent set (ordered, coalesced ranges) kept in a
 * balanced tree augmented with the longest free run in each subtree, so that
 * "first free run of at least n blocks at or after hint" is O(log n).
 *
 * Generations (DESIGN §2.3): every allocation and free happens in the open
 * generation.  The space module records, per open generation, the net
 * change (ranges allocated and ranges freed in it), which the commit
 * persists as a space map log record (see txn.c).  A block freed in
 * generation G only becomes allocatable once G is durable
 * (space_gen_durable), except a block born in G itself, which no durable
 * generation references and which is freed at once.
 *
 * The reserve: ordinary allocations fail with -ENOSPC when they would leave
 * fewer than `reserve` free blocks; allocations flagged SPACE_RESERVE may use
 * the reserve.  The engine flags the allocations that deleting things and
 * committing need, so that freeing space always works on a full pool.
 *
 * Thread safety: every function takes the space's own mutex.
 */
#ifndef CAIRN_SPACE_H
#define CAIRN_SPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "util.h"

struct space;

#define SPACE_RESERVE 1u    /* this allocation may use the reserve */

/* A set of ranges handed out by space_freeze and replayed on open. */
struct space_range {
  uint64_t start, len;      /* in blocks */
};
struct space_delta {
  uint64_t gen;
  struct space_range *alloc;  /* net ranges allocated in gen, sorted */
  size_t nalloc;
  struct space_range *freed;  /* net ranges freed in gen, sorted */
  size_t nfreed;
};

/* A space map over blocks [base, end), all free, with open generation gen. */
int space_create (uint64_t base, uint64_t end, uint64_t reserve, uint64_t gen,
                  struct space **spp) CAIRN_WUR;
void space_destroy (struct space *sp);

/* Loading (opening a pool): mark a range allocated / free without recording
 * a delta.  -EINVAL (with a message naming the range) when the range is out
 * of bounds or not in the expected state: corrupt space maps are reported,
 * never trusted.
 */
int space_load_alloc (struct space *sp, uint64_t start, uint64_t len) CAIRN_WUR;
int space_load_free (struct space *sp, uint64_t start, uint64_t len) CAIRN_WUR;

/* Allocate exactly len contiguous blocks, first fit at or after hint (then
 * wrapping to base).  -ENOSPC when no run is long enough or the reserve
 * would be touched without SPACE_RESERVE.
 */
int space_alloc (struct space *sp, uint64_t len, uint64_t hint,
                 unsigned flags, uint64_t *startp) CAIRN_WUR;

/* Allocate a run of between 1 and maxlen blocks: the first run at or after
 * hint, as long as it is (up to maxlen).  For data extents, which may be
 * split over several runs.
 */
int space_alloc_upto (struct space *sp, uint64_t maxlen, uint64_t hint,
                      unsigned flags, uint64_t *startp, uint64_t *lenp)
  CAIRN_WUR;

/* Free a range that was born (allocated) in generation birth.  If birth is
 * the open generation the blocks are free at once; otherwise they become
 * allocatable when the open generation is durable.  Freeing blocks that
 * are not allocated is an engine bug: it aborts with a message.
 */
void space_free (struct space *sp, uint64_t start, uint64_t len,
                 uint64_t birth);

/* Close the open generation gen and open gen + 1: the net delta of gen is
 * returned (caller frees it with space_delta_free).  Deferred frees of gen
 * stay unallocatable until space_gen_durable(gen).
 */
int space_freeze (struct space *sp, struct space_delta **deltap) CAIRN_WUR;
void space_delta_free (struct space_delta *d);

/* Generation gen (and every older one) is durable: release its deferred
 * frees into the free set.
 */
void space_gen_durable (struct space *sp, uint64_t gen);

/* The open generation. */
uint64_t space_open_gen (struct space *sp);

/* Counters, in blocks. */
struct space_stats {
  uint64_t total;           /* end - base */
  uint64_t free;            /* allocatable now */
  uint64_t pending;         /* freed, waiting for their generation */
  uint64_t allocated;       /* total - free - pending */
  uint64_t reserve;
  uint64_t extents;         /* number of free runs (fragmentation) */
};
void space_stats (struct space *sp, struct space_stats *st);

/* Is every block of the range allocated (not free, not pending)? */
bool space_is_allocated (struct space *sp, uint64_t start, uint64_t len);

/* Call fn for every free run (including pending frees when with_pending), in
 * address order; stops and returns fn's value if it returns non-zero.  The
 * commit uses it to write a condensed space map, fsck to audit.
 */
int space_foreach_free (struct space *sp, bool with_pending,
                        int (*fn) (void *opaque, uint64_t start, uint64_t len),
                        void *opaque);

#endif /* CAIRN_SPACE_H */
