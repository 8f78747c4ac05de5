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
 * persists as space map log records (see spacemap.c).  A block freed in
 * generation G only becomes allocatable once G is durable
 * (space_gen_durable), except a block born in G itself, which no durable
 * generation references and which is freed at once.
 *
 * The reserve: ordinary allocations fail with -ENOSPC when they would leave
 * fewer than `reserve` free blocks; allocations flagged SPACE_RESERVE may use
 * the reserve.  The engine flags the allocations that deleting things and
 * committing need, so that freeing space always works on a full pool.
 * Those are metadata nodes, which need runs of node_blocks: so ordinary
 * allocations also stop once no more than `reserve` free blocks lie in
 * such runs (space_set_node_blocks).  Counting blocks alone let a pool
 * whose free space was single blocks between data (overwrites under a
 * snapshot, on a full pool) accept writes until a commit found no room
 * for a node and latched the pool failed.
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

/* A space map over blocks [base, end), all free, with open generation gen.
 * -EINVAL if base >= end or reserve > end - base.
 */
int space_create (uint64_t base, uint64_t end, uint64_t reserve, uint64_t gen,
                  struct space **spp) CAIRN_WUR;
void space_destroy (struct space *sp);

/* Loading (opening a pool): mark a range allocated / free without recording
 * a delta.  -EINVAL (with a message naming the range) when the range is
 * empty, out of bounds or not in the expected state (load_alloc: not all
 * free; load_free: not all allocated): corrupt space maps are reported,
 * never trusted.  A map starts all free, so an opener either load_allocs
 * the allocated runs, or load_allocs [base, end) and load_frees the free
 * runs of a condensed map; then it replays the log records in order.
 */
int space_load_alloc (struct space *sp, uint64_t start, uint64_t len) CAIRN_WUR;
int space_load_free (struct space *sp, uint64_t start, uint64_t len) CAIRN_WUR;

/* Allocate exactly len contiguous blocks: space written before first (the
 * lowest start >= hint, then the lowest start overall, of len free blocks
 * below the high water, space_stats' touched), then space above it (the
 * lowest start >= hint, then overall).  A hint outside [base, end), such
 * as 0, means base; there is no next-fit cursor, so pass the end of the
 * previous allocation for locality.  -ENOSPC when no run is long enough or
 * the reserve would be touched without SPACE_RESERVE; -EINVAL for len 0.
 */
int space_alloc (struct space *sp, uint64_t len, uint64_t hint,
                 unsigned flags, uint64_t *startp) CAIRN_WUR;

/* Allocate a run of between 1 and maxlen blocks: the first run at or after
 * hint (from hint on, if hint is inside a free run; else wrapping to base),
 * as long as it is (up to maxlen, and never into the reserve without
 * SPACE_RESERVE).  For data extents, which may be split over several runs.
 */
int space_alloc_upto (struct space *sp, uint64_t maxlen, uint64_t hint,
                      unsigned flags, uint64_t *startp, uint64_t *lenp)
  CAIRN_WUR;

/* Allocate exactly [start, start + len) in the open generation, as
 * space_alloc would: -EINVAL naming the range unless all of it is free.
 * Replaying the intent log claims the blocks its records name so.
 */
int space_claim (struct space *sp, uint64_t start, uint64_t len) CAIRN_WUR;

/* While on, a free of blocks born in the open generation defers them like
 * older ones (until the generation is durable) instead of freeing them at
 * once: an intent log record may name them, and replaying it after a
 * crash must find the data it names (txn-log.c, IL-4).
 */
void space_set_hold_young (struct space *sp, bool on);

/* Free a range that was born (allocated) in generation birth.  If birth is
 * the open generation the blocks are free at once (and leave the open
 * generation's alloc delta); otherwise they join its freed delta and become
 * allocatable when the open generation is durable.  Freeing blocks that are
 * not allocated, with a birth after the open generation, or with an older
 * birth than the generation that allocated them, is an engine bug: it
 * aborts with a message.  So does running out of memory here.  len 0 does
 * nothing.
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
 * frees into the free set.  gen must be older than the open generation
 * (else abort); closed generations newer than gen keep theirs.
 */
void space_gen_durable (struct space *sp, uint64_t gen);

/* Where freed space came back last: the lowest block that the latest
 * space_gen_durable released, in *startp, and a number that changes
 * whenever that happens (0: never yet).  A data allocator that starts its
 * next search there fills what overwrites freed (often still in the OS
 * page cache, and single blocks that would otherwise stay scattered in the
 * free set) instead of advancing into space never written.
 */
uint64_t space_reuse_hint (struct space *sp, uint64_t *startp);

/* The open generation. */
uint64_t space_open_gen (struct space *sp);

/* At least as many ranges as the open generation's net delta (allocated
 * plus freed) holds: what space_freeze would hand out now.  The commit sizes the space map log
 * record of the generation with it.
 */
uint64_t space_delta_ranges (struct space *sp);

/* Counters, in blocks. */
struct space_stats {
  uint64_t total;           /* end - base */
  uint64_t free;            /* allocatable now */
  uint64_t pending;         /* freed, waiting for their generation */
  uint64_t allocated;       /* total - free - pending */
  uint64_t reserve;
  uint64_t extents;         /* number of free runs (fragmentation) */
  uint64_t touched;         /* blocks from base to the end of the highest
                               ever allocated (since the map was loaded):
                               the pool's written part */
  uint64_t map_bytes;       /* memory of the in-memory space map: every
                               run of free, pending and this generation's
                               allocated blocks takes a node */
};
void space_stats (struct space *sp, struct space_stats *st);

/* Keep the reserve's worth of free space in runs of at least blocks (a
 * metadata node): see above.  0 (the default) counts blocks alone.
 */
void space_set_node_blocks (struct space *sp, uint64_t blocks);

/* Is every block of the range allocated (not free, not pending)? */
bool space_is_allocated (struct space *sp, uint64_t start, uint64_t len);

/* Call fn for every free run (including pending frees when with_pending), in
 * address order, with touching runs coalesced; stops and returns fn's value
 * if it returns non-zero.  The commit uses it to write a condensed space
 * map, fsck to audit.  fn runs under the space's lock: it must not call
 * back into this space.
 */
int space_foreach_free (struct space *sp, bool with_pending,
                        int (*fn) (void *opaque, uint64_t start, uint64_t len),
                        void *opaque);

#endif /* CAIRN_SPACE_H */
