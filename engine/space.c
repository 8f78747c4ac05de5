/* Cairn engine, layer "space": the free-space allocator (see space.h).
 *
 * Every block of the data area [base, end) is in exactly one state:
 *
 *   FREE       in sp->free: allocatable now.
 *   ALLOCATED  in none of the sets below except possibly sp->alloc, which
 *              holds the blocks allocated in the open generation.
 *   DEFERRED   freed in generation g but born before g, so the last durable
 *              generation may still reference it: in sp->freed while g is
 *              open, then in the closed[] entry for g until g is durable.
 *
 * Transitions (the function behind each):
 *
 *   FREE --space_alloc/_upto--> ALLOCATED (added to sp->alloc)
 *   ALLOCATED, born in the open gen --space_free--> FREE
 *        (removed from sp->alloc: it cancels out of the delta)
 *   ALLOCATED, born earlier --space_free--> DEFERRED (sp->freed)
 *   DEFERRED of gen g --space_freeze--> stays DEFERRED, moved to closed[]
 *   DEFERRED of gen g --space_gen_durable (h >= g)--> FREE
 *   FREE <--space_load_alloc / space_load_free--> ALLOCATED (no delta)
 *
 * Invariants:
 *  1. free, freed and every closed[i].set are pairwise disjoint and lie
 *     inside [base, end).
 *  2. alloc is disjoint from all of them (its blocks are ALLOCATED).
 *  3. The net delta of the open generation is (alloc, freed): a block
 *     allocated and freed again in the same generation is in neither.
 *  4. closed[] is sorted by generation, oldest first; every entry is older
 *     than the open generation and non-empty.
 *  5. moved is a subset of freed: blocks allocated in the open generation
 *     and then freed with an older birth.  They are DEFERRED like the rest
 *     of freed, but were free before the generation and are free after
 *     it, so they are in neither side of its delta (the space map log
 *     replays deltas, spacemap.c).
 *
 * Multi-set changes reserve their rangeset nodes first, so once a function
 * has checked its arguments nothing can fail half way.  space_free and
 * space_gen_durable return void: a bad free is an engine bug and aborts,
 * and running out of memory for a tree node there aborts too (merging
 * deferred frees reuses their nodes and never allocates).
 *
 * Allocation policy: space that has been written before comes first.
 * touched (the high water) is the end of the highest block allocated
 * since the map was loaded, or of the highest one loaded as allocated
 * (written_end); blocks at or above it have not been written since.  An
 * allocation takes the first fit at or after the hint that ends at or
 * below touched, then the first such fit from base, and only then space
 * above touched (first fit from the hint, then from base).
 * Reusing freed space before growing keeps a rewritten pool's working set
 * (its page-cache pages, the blocks a sparse file or a thin device has
 * backed) the size of its data rather than of its whole history: a large
 * write that finds no run long enough at the hint, as after random writes
 * that freed single blocks, goes to a freed run elsewhere instead of into
 * space never written.  There is no next-fit cursor: a hint outside
 * [base, end) (0, typically) means base, so results depend only on the
 * state and the arguments.  Callers that want locality pass the end of
 * their previous allocation.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rangeset.h"
#include "space.h"

/* The deferred frees of a closed generation that is not durable yet. */
struct space_closed {
  uint64_t gen;
  struct rangeset set;
};

struct space {
  pthread_mutex_t lock;
  uint64_t base, end;          /* the data area, in blocks */
  uint64_t reserve;            /* blocks kept for SPACE_RESERVE */
  uint64_t touched;            /* end of the highest block ever allocated */
  bool touched_known;          /* touched is up to date (not after a load) */
  uint64_t gen;                /* the open generation */
  struct rangeset free;        /* FREE blocks */
  struct rangeset alloc;       /* allocated in gen (net) */
  struct rangeset freed;       /* freed in gen, born earlier: DEFERRED */
  struct rangeset moved;       /* part of freed allocated in gen: no delta */
  struct space_closed *closed; /* older DEFERRED sets, oldest first */
  size_t nclosed, closed_cap;
  bool hold_young;             /* space_set_hold_young */
  uint64_t reuse_seq;          /* space_reuse_hint: releases so far ... */
  uint64_t reuse_start;        /* ... and the lowest block of the last */
};

static void space_die (const char *fmt, ...)
    __attribute__ ((noreturn, format (printf, 1, 2)));

/* Report an engine bug and abort. */
static void
space_die (const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "cairn: space: ");
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\n");
  abort ();
}

/* Abort if a set operation that cannot fail (nodes reserved, states
 * checked) failed anyway.
 */
static void
must (int r, const char *what)
{
  if (r < 0)
    space_die ("%s failed: %s (engine bug)", what, cairn_errmsg ());
}

/* Reserve one node in a set for a void function: abort when out of memory. */
static void
reserve_or_die (struct rangeset *rs)
{
  if (rangeset_reserve (rs, 1) < 0)
    space_die ("out of memory for the free-space map");
}

/* Is [start, start + len) a non-empty range inside the data area? */
static bool
in_bounds (const struct space *sp, uint64_t start, uint64_t len)
{
  return len > 0 && start >= sp->base && start < sp->end
         && len <= sp->end - start;
}

/* Does the range overlap any DEFERRED block (of any generation)? */
static bool
overlaps_deferred (const struct space *sp, uint64_t start, uint64_t len)
{
  if (rangeset_overlaps (&sp->freed, start, len))
    return true;
  for (size_t i = 0; i < sp->nclosed; i++)
    if (rangeset_overlaps (&sp->closed[i].set, start, len))
      return true;
  return false;
}

/* Is every block of the range ALLOCATED (caller holds the lock)? */
static bool
all_allocated (const struct space *sp, uint64_t start, uint64_t len)
{
  return !rangeset_overlaps (&sp->free, start, len)
         && !overlaps_deferred (sp, start, len);
}

/* Create a space map with every block free. */
int
space_create (uint64_t base, uint64_t end, uint64_t reserve, uint64_t gen,
              struct space **spp)
{
  struct space *sp;
  int r;

  if (base >= end)
    return cairn_fail (-EINVAL,
                       "space: empty data area [%" PRIu64 ", %" PRIu64 ")",
                       base, end);
  if (reserve > end - base)
    return cairn_fail (-EINVAL,
                       "space: reserve of %" PRIu64 " blocks is"
                       " larger than the data area (%" PRIu64 " blocks)",
                       reserve, end - base);

  sp = calloc (1, sizeof *sp);
  if (sp == NULL)
    return cairn_fail (-ENOMEM, "space: out of memory");
  if ((r = pthread_mutex_init (&sp->lock, NULL)) != 0) {
    free (sp);
    return cairn_fail (-r, "space: pthread_mutex_init failed");
  }
  sp->base = base;
  sp->end = end;
  sp->reserve = reserve;
  sp->gen = gen;
  rangeset_init (&sp->free);
  rangeset_init (&sp->alloc);
  rangeset_init (&sp->freed);
  rangeset_init (&sp->moved);
  if ((r = rangeset_add (&sp->free, base, end - base)) < 0) {
    space_destroy (sp);
    return r;
  }
  *spp = sp;
  return 0;
}

/* Free a space map and everything it holds. */
void
space_destroy (struct space *sp)
{
  if (sp == NULL)
    return;
  rangeset_destroy (&sp->free);
  rangeset_destroy (&sp->alloc);
  rangeset_destroy (&sp->freed);
  rangeset_destroy (&sp->moved);
  for (size_t i = 0; i < sp->nclosed; i++)
    rangeset_destroy (&sp->closed[i].set);
  free (sp->closed);
  pthread_mutex_destroy (&sp->lock);
  free (sp);
}

/* Mark a free range allocated while loading, recording no delta. */
int
space_load_alloc (struct space *sp, uint64_t start, uint64_t len)
{
  int r = 0;

  pthread_mutex_lock (&sp->lock);
  if (!in_bounds (sp, start, len))
    r = cairn_fail (-EINVAL,
                    "space map: allocated range start %" PRIu64
                    " length %" PRIu64 " is outside the data area [%" PRIu64
                    ", %" PRIu64 ")",
                    start, len, sp->base, sp->end);
  else if ((r = rangeset_remove (&sp->free, start, len)) == -ENOENT)
    r = cairn_fail (-EINVAL,
                    "space map: range [%" PRIu64 ", %" PRIu64
                    ") is allocated but not all free (allocated twice?)",
                    start, start + len);
  sp->touched_known = false;
  pthread_mutex_unlock (&sp->lock);
  return r;
}

/* Mark an allocated range free while loading, recording no delta. */
int
space_load_free (struct space *sp, uint64_t start, uint64_t len)
{
  int r = 0;

  pthread_mutex_lock (&sp->lock);
  if (!in_bounds (sp, start, len))
    r = cairn_fail (-EINVAL,
                    "space map: freed range start %" PRIu64 " length %" PRIu64
                    " is outside the data area [%" PRIu64 ", %" PRIu64 ")",
                    start, len, sp->base, sp->end);
  /* The add itself refuses a range that overlaps a free one; only the
   * other sets need a look, and while the map loads they are empty.
   */
  else if (overlaps_deferred (sp, start, len)
           || rangeset_overlaps (&sp->alloc, start, len)
           || (r = rangeset_add (&sp->free, start, len)) == -EEXIST)
    r = cairn_fail (-EINVAL,
                    "space map: range [%" PRIu64 ", %" PRIu64
                    ") is freed but not all allocated (freed twice?)",
                    start, start + len);
  sp->touched_known = false;
  pthread_mutex_unlock (&sp->lock);
  return r;
}

/* The end of the written part of the data area (caller holds the lock).
 * Loading leaves it unknown: the map it loads says what is allocated, not
 * what was ever written, so the end of the last allocated block stands for
 * it (free blocks below that were written, or freed by a trim, or both).
 */
static uint64_t
written_end (struct space *sp)
{
  uint64_t start, len;

  if (!sp->touched_known) {
    sp->touched = sp->end;
    if (rangeset_next (&sp->free, sp->end - 1, &start, &len)
        && start + len == sp->end)
      sp->touched = start;
    sp->touched_known = true;
  }
  return sp->touched;
}

/* Move [start, start + len) from FREE to ALLOCATED in the open generation
 * (caller holds the lock and has checked the range is free).
 */
static int
take (struct space *sp, uint64_t start, uint64_t len)
{
  int r;

  if ((r = rangeset_reserve (&sp->free, 1)) < 0
      || (r = rangeset_reserve (&sp->alloc, 1)) < 0)
    return r;
  must (rangeset_remove (&sp->free, start, len), "space: taking free blocks");
  must (rangeset_add (&sp->alloc, start, len), "space: recording allocation");
  sp->touched = MAX (written_end (sp), start + len);
  return 0;
}

/* Is the free space that a metadata node fits down to the reserve?  Then
 * ordinary allocations stop: a pool whose free space is single blocks
 * between data has none for the nodes of deletes and commits, however
 * many blocks are free (space_set_node_blocks).
 */
static bool
node_room_low (const struct space *sp)
{
  return sp->free.chunk && sp->free.chunked <= sp->reserve;
}

/* Blocks that an allocation with these flags may take now. */
static uint64_t
usable (const struct space *sp, unsigned flags)
{
  uint64_t nfree = rangeset_total (&sp->free);

  if (flags & SPACE_RESERVE)
    return nfree;
  if (node_room_low (sp))
    return 0;
  return nfree > sp->reserve ? nfree - sp->reserve : 0;
}

/* Fail an allocation of len blocks (or up to len) that usable() refused,
 * saying why.
 */
static int
refuse (const struct space *sp, uint64_t len)
{
  if (node_room_low (sp))
    return cairn_fail (-ENOSPC, "no space left in the pool: of %" PRIu64
                       " free blocks only %" PRIu64 " lie in runs that a "
                       "metadata node fits, and those are kept in reserve; "
                       "delete snapshots or volumes, or grow the pool",
                       rangeset_total (&sp->free), sp->free.chunked);
  return cairn_fail (-ENOSPC, "no space left in the pool: %" PRIu64
                     " blocks wanted, %" PRIu64 " free of which %" PRIu64
                     " are kept in reserve; delete snapshots or volumes, or "
                     "grow the pool", len, rangeset_total (&sp->free),
                     sp->reserve);
}

void
space_set_node_blocks (struct space *sp, uint64_t blocks)
{
  pthread_mutex_lock (&sp->lock);
  rangeset_set_chunk (&sp->free, blocks);
  pthread_mutex_unlock (&sp->lock);
}

/* Normalise a hint: outside the data area means base. */
static uint64_t
clamp_hint (const struct space *sp, uint64_t hint)
{
  return hint >= sp->base && hint < sp->end ? hint : sp->base;
}

/* The first run of len free blocks at or after from that ends at or below
 * limit (caller holds the lock).  rangeset_find gives the first fit after
 * from; if that one passes limit, no fit before it does.
 */
static bool
find_below (const struct space *sp, uint64_t len, uint64_t from,
            uint64_t limit, uint64_t *posp)
{
  uint64_t pos;

  if (from >= limit || !rangeset_find (&sp->free, len, from, &pos)
      || pos > limit || limit - pos < len)
    return false;
  *posp = pos;
  return true;
}

/* Allocate exactly len contiguous blocks: written space first, first fit
 * from hint, then from base (the policy above).
 */
int
space_alloc (struct space *sp, uint64_t len, uint64_t hint, unsigned flags,
             uint64_t *startp)
{
  uint64_t pos, top;
  int r;

  if (len == 0)
    return cairn_fail (-EINVAL, "space: allocating 0 blocks");

  pthread_mutex_lock (&sp->lock);
  if (usable (sp, flags) < len) {
    r = refuse (sp, len);
    goto out;
  }
  hint = clamp_hint (sp, hint);
  top = written_end (sp);
  if (!find_below (sp, len, hint, top, &pos)
      && !find_below (sp, len, sp->base, top, &pos)
      && !rangeset_find (&sp->free, len, hint, &pos)
      && !rangeset_find (&sp->free, len, sp->base, &pos)) {
    r = cairn_fail (
        -ENOSPC,
        "no space left in the pool: no run of %" PRIu64
        " contiguous free blocks (%" PRIu64 " free in %" PRIu64 " runs); "
        "delete snapshots or volumes, or grow the pool",
        len, rangeset_total (&sp->free), rangeset_count (&sp->free));
    goto out;
  }
  if ((r = take (sp, pos, len)) == 0)
    *startp = pos;
out:
  pthread_mutex_unlock (&sp->lock);
  return r;
}

/* Allocate exactly [start, start + len), which must be free. */
int
space_claim (struct space *sp, uint64_t start, uint64_t len)
{
  int r;

  pthread_mutex_lock (&sp->lock);
  if (len == 0 || !in_bounds (sp, start, len) ||
      !rangeset_contains (&sp->free, start, len))
    r = cairn_fail (-EINVAL, "space: blocks [%" PRIu64 ", %" PRIu64 ") are "
                    "not all free", start, start + len);
  else
    r = take (sp, start, len);
  pthread_mutex_unlock (&sp->lock);
  return r;
}

/* Defer frees of blocks born in the open generation (space.h). */
void
space_set_hold_young (struct space *sp, bool on)
{
  pthread_mutex_lock (&sp->lock);
  sp->hold_young = on;
  pthread_mutex_unlock (&sp->lock);
}

/* Allocate 1 to maxlen blocks: the first free run at or after hint. */
int
space_alloc_upto (struct space *sp, uint64_t maxlen, uint64_t hint,
                  unsigned flags, uint64_t *startp, uint64_t *lenp)
{
  uint64_t avail, start, len;
  int r;

  if (maxlen == 0)
    return cairn_fail (-EINVAL, "space: allocating 0 blocks");

  pthread_mutex_lock (&sp->lock);
  avail = usable (sp, flags);
  if (avail == 0) {
    r = refuse (sp, maxlen);
    goto out;
  }
  maxlen = MIN (maxlen, avail);
  hint = clamp_hint (sp, hint);
  if (rangeset_next (&sp->free, hint, &start, &len)) {
    if (start < hint) { /* the run containing hint */
      len -= hint - start;
      start = hint;
    }
  } else if (!rangeset_next (&sp->free, sp->base, &start, &len)) {
    /* Unreachable: avail > 0 means some block is free. */
    r = cairn_fail (-ENOSPC, "no space left in the pool");
    goto out;
  }
  len = MIN (len, maxlen);
  if ((r = take (sp, start, len)) == 0) {
    *startp = start;
    *lenp = len;
  }
out:
  pthread_mutex_unlock (&sp->lock);
  return r;
}

/* Free a range born in generation birth: at once or when the open
 * generation is durable.
 */
void
space_free (struct space *sp, uint64_t start, uint64_t len, uint64_t birth)
{
  if (len == 0)
    return;

  pthread_mutex_lock (&sp->lock);
  if (!in_bounds (sp, start, len))
    space_die ("freeing start %" PRIu64 " length %" PRIu64 ", outside the"
               " data area [%" PRIu64 ", %" PRIu64 ") (engine bug)",
               start, len, sp->base, sp->end);
  if (birth > sp->gen)
    space_die ("freeing [%" PRIu64 ", %" PRIu64 ") born in generation %" PRIu64
               ", after the open generation %" PRIu64 " (engine bug)",
               start, start + len, birth, sp->gen);

  if (birth == sp->gen && sp->hold_young &&
      rangeset_contains (&sp->alloc, start, len)) {
    /* Born in the open generation, but an intent log record may name it
     * (space_set_hold_young): DEFERRED like an older block, out of the
     * delta as invariant 5 says.
     */
    reserve_or_die (&sp->freed);
    reserve_or_die (&sp->moved);
    must (rangeset_remove (&sp->alloc, start, len), "space: moving alloc");
    must (rangeset_add (&sp->freed, start, len), "space: deferring free");
    must (rangeset_add (&sp->moved, start, len), "space: deferring free");
  } else if (birth == sp->gen) {
    /* Born in the open generation: nothing durable references it. */
    if (!rangeset_contains (&sp->alloc, start, len))
      space_die ("freeing [%" PRIu64 ", %" PRIu64 ") born in the open"
                 " generation %" PRIu64 ", but it was not all allocated in"
                 " it (%s) (engine bug)",
                 start, start + len, sp->gen,
                 all_allocated (sp, start, len)
                     ? "allocated earlier: wrong birth"
                     : "free or freed");
    reserve_or_die (&sp->alloc);
    reserve_or_die (&sp->free);
    must (rangeset_remove (&sp->alloc, start, len), "space: cancelling alloc");
    must (rangeset_add (&sp->free, start, len), "space: freeing blocks");
  } else {
    if (!all_allocated (sp, start, len))
      space_die (
          "freeing [%" PRIu64 ", %" PRIu64 ") born in generation %" PRIu64
          ", but it is not all allocated (%s) (engine bug)",
          start, start + len, birth,
          rangeset_overlaps (&sp->free, start, len) ? "some is free"
                                                    : "some is already freed");
    if (rangeset_contains (&sp->alloc, start, len)) {
      /* Allocated in the open generation, yet the caller says an older
       * durable generation references it (a walk of a tree whose
       * pointers carry an older birth).  They must not be reused until
       * the open generation is durable, and leave the delta (invariant 5).
       */
      reserve_or_die (&sp->freed);
      reserve_or_die (&sp->moved);
      must (rangeset_remove (&sp->alloc, start, len), "space: moving alloc");
      must (rangeset_add (&sp->freed, start, len), "space: deferring free");
      must (rangeset_add (&sp->moved, start, len), "space: deferring free");
      pthread_mutex_unlock (&sp->lock);
      return;
    }
    if (rangeset_overlaps (&sp->alloc, start, len))
      space_die (
          "freeing [%" PRIu64 ", %" PRIu64 ") with birth %" PRIu64
          ", but part of it was allocated in the open generation %" PRIu64
          " (engine bug)",
          start, start + len, birth, sp->gen);
    reserve_or_die (&sp->freed);
    must (rangeset_add (&sp->freed, start, len), "space: deferring free");
  }
  pthread_mutex_unlock (&sp->lock);
}

/* State for copying a rangeset into an array. */
struct copy_state {
  struct space_range *v;
  size_t n;
};

/* rangeset_foreach callback: append one range. */
static int
copy_range (void *opaque, uint64_t start, uint64_t len)
{
  struct copy_state *cs = opaque;

  cs->v[cs->n].start = start;
  cs->v[cs->n].len = len;
  cs->n++;
  return 0;
}

/* Copy a set into a new sorted array (NULL when empty). */
static int
to_array (const struct rangeset *rs, struct space_range **vp, size_t *np)
{
  struct copy_state cs = { .v = NULL, .n = 0 };
  uint64_t n = rangeset_count (rs);

  if (n > 0) {
    if (n > SIZE_MAX / sizeof *cs.v
        || (cs.v = malloc (n * sizeof *cs.v)) == NULL)
      return cairn_fail (-ENOMEM, "space: out of memory");
    if (rangeset_foreach (rs, copy_range, &cs) != 0)
      abort (); /* copy_range never stops the walk */
  }
  *vp = cs.v;
  *np = cs.n;
  return 0;
}

/* The freed side of the delta: freed without moved (invariant 5), which
 * may split a range of freed, one more range per range of moved.
 */
static int
freed_array (const struct space *sp, struct space_range **vp, size_t *np)
{
  struct space_range *v;
  size_t n, k = 0;
  int r = to_array (&sp->freed, &v, &n);

  if (r < 0 || rangeset_count (&sp->moved) == 0) {
    *vp = v;
    *np = n;
    return r;
  }
  {
    size_t cap = n + rangeset_count (&sp->moved);
    struct space_range *out = malloc (cap * sizeof *out);

    if (out == NULL) {
      free (v);
      return cairn_fail (-ENOMEM, "space: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
      uint64_t pos = v[i].start, end = v[i].start + v[i].len, ms, ml;

      while (pos < end && rangeset_next (&sp->moved, pos, &ms, &ml)
             && ms < end) {
        if (ms > pos)
          out[k++] = (struct space_range) { pos, ms - pos };
        pos = ms + ml;
      }
      if (pos < end)
        out[k++] = (struct space_range) { pos, end - pos };
    }
    free (v);
    *vp = k ? out : NULL;
    if (k == 0)
      free (out);
    *np = k;
  }
  return 0;
}

/* Close the open generation, hand out its net delta, open the next. */
int
space_freeze (struct space *sp, struct space_delta **deltap)
{
  struct space_delta *d;
  int r;

  d = calloc (1, sizeof *d);
  if (d == NULL)
    return cairn_fail (-ENOMEM, "space: out of memory");

  pthread_mutex_lock (&sp->lock);
  if (sp->gen == UINT64_MAX) {
    r = cairn_fail (-EOVERFLOW, "space: generation number overflow");
    goto err;
  }
  d->gen = sp->gen;
  if ((r = to_array (&sp->alloc, &d->alloc, &d->nalloc)) < 0
      || (r = freed_array (sp, &d->freed, &d->nfreed)) < 0)
    goto err;
  if (rangeset_count (&sp->freed) > 0 && sp->nclosed == sp->closed_cap) {
    size_t cap = sp->closed_cap ? 2 * sp->closed_cap : 4;
    struct space_closed *c = realloc (sp->closed, cap * sizeof *c);

    if (c == NULL) {
      r = cairn_fail (-ENOMEM, "space: out of memory");
      goto err;
    }
    sp->closed = c;
    sp->closed_cap = cap;
  }

  /* Nothing can fail from here on. */
  if (rangeset_count (&sp->freed) > 0) {
    sp->closed[sp->nclosed].gen = sp->gen;
    sp->closed[sp->nclosed].set = sp->freed; /* moves the tree */
    sp->nclosed++;
    rangeset_init (&sp->freed);
  }
  rangeset_destroy (&sp->alloc);
  rangeset_destroy (&sp->moved);
  sp->gen++;
  pthread_mutex_unlock (&sp->lock);
  *deltap = d;
  return 0;

err:
  pthread_mutex_unlock (&sp->lock);
  space_delta_free (d);
  return r;
}

/* Free a delta handed out by space_freeze. */
void
space_delta_free (struct space_delta *d)
{
  if (d == NULL)
    return;
  free (d->alloc);
  free (d->freed);
  free (d);
}

/* Generation gen is durable: its deferred frees (and older ones) become
 * allocatable.
 */
void
space_gen_durable (struct space *sp, uint64_t gen)
{
  uint64_t lowest = UINT64_MAX;
  size_t i;

  pthread_mutex_lock (&sp->lock);
  if (gen >= sp->gen)
    space_die ("generation %" PRIu64 " made durable while generation %" PRIu64
               " is open (engine bug)",
               gen, sp->gen);
  for (i = 0; i < sp->nclosed && sp->closed[i].gen <= gen; i++) {
    uint64_t start, len;

    if (rangeset_next (&sp->closed[i].set, 0, &start, &len) &&
        (lowest == UINT64_MAX || start < lowest))
      lowest = start;
    must (rangeset_merge (&sp->free, &sp->closed[i].set),
          "space: releasing deferred frees");
    rangeset_destroy (&sp->closed[i].set);
  }
  if (lowest != UINT64_MAX) {
    sp->reuse_start = lowest;
    sp->reuse_seq++;
  }
  if (i > 0) {
    memmove (sp->closed, sp->closed + i,
             (sp->nclosed - i) * sizeof *sp->closed);
    sp->nclosed -= i;
  }
  pthread_mutex_unlock (&sp->lock);
}

/* Where freed space came back last (space.h). */
uint64_t
space_reuse_hint (struct space *sp, uint64_t *startp)
{
  uint64_t seq;

  pthread_mutex_lock (&sp->lock);
  seq = sp->reuse_seq;
  *startp = sp->reuse_start;
  pthread_mutex_unlock (&sp->lock);
  return seq;
}

/* The open generation. */
uint64_t
space_open_gen (struct space *sp)
{
  uint64_t gen;

  pthread_mutex_lock (&sp->lock);
  gen = sp->gen;
  pthread_mutex_unlock (&sp->lock);
  return gen;
}

/* Ranges in the open generation's net delta. */
uint64_t
space_delta_ranges (struct space *sp)
{
  uint64_t n;

  pthread_mutex_lock (&sp->lock);
  n = rangeset_count (&sp->alloc) + rangeset_count (&sp->freed)
      + rangeset_count (&sp->moved);
  pthread_mutex_unlock (&sp->lock);
  return n;
}

/* Fill in the counters. */
void
space_stats (struct space *sp, struct space_stats *st)
{
  uint64_t pending;

  pthread_mutex_lock (&sp->lock);
  pending = rangeset_total (&sp->freed);
  st->map_bytes = rangeset_bytes (&sp->free) + rangeset_bytes (&sp->alloc)
    + rangeset_bytes (&sp->freed) + rangeset_bytes (&sp->moved);
  for (size_t i = 0; i < sp->nclosed; i++) {
    pending += rangeset_total (&sp->closed[i].set);
    st->map_bytes += rangeset_bytes (&sp->closed[i].set);
  }
  st->total = sp->end - sp->base;
  st->free = rangeset_total (&sp->free);
  st->pending = pending;
  st->allocated = st->total - st->free - pending;
  st->reserve = sp->reserve;
  st->extents = rangeset_count (&sp->free);
  st->touched = written_end (sp) - sp->base;
  pthread_mutex_unlock (&sp->lock);
}

/* Is every block of the range allocated? */
bool
space_is_allocated (struct space *sp, uint64_t start, uint64_t len)
{
  bool ret;

  pthread_mutex_lock (&sp->lock);
  ret = in_bounds (sp, start, len) && all_allocated (sp, start, len);
  pthread_mutex_unlock (&sp->lock);
  return ret;
}

/* The first range ending after pos in the free set or, with_pending, in
 * any deferred set (they are disjoint).
 */
static bool
next_free (const struct space *sp, bool with_pending, uint64_t pos,
           uint64_t *startp, uint64_t *lenp)
{
  uint64_t s, l;
  bool found = rangeset_next (&sp->free, pos, startp, lenp);

  if (!with_pending)
    return found;
  if (rangeset_next (&sp->freed, pos, &s, &l) && (!found || s < *startp)) {
    *startp = s;
    *lenp = l;
    found = true;
  }
  for (size_t i = 0; i < sp->nclosed; i++)
    if (rangeset_next (&sp->closed[i].set, pos, &s, &l)
        && (!found || s < *startp)) {
      *startp = s;
      *lenp = l;
      found = true;
    }
  return found;
}

/* Call fn for every free run, merging the sets and coalescing runs that
 * touch, in address order.
 */
int
space_foreach_free (struct space *sp, bool with_pending,
                    int (*fn) (void *opaque, uint64_t start, uint64_t len),
                    void *opaque)
{
  uint64_t pos, s, l, run_start = 0, run_end = 0;
  bool have = false;
  int r = 0;

  pthread_mutex_lock (&sp->lock);
  pos = sp->base;
  while (next_free (sp, with_pending, pos, &s, &l)) {
    if (have && s == run_end)
      run_end = s + l;
    else {
      if (have && (r = fn (opaque, run_start, run_end - run_start)) != 0)
        goto out;
      run_start = s;
      run_end = s + l;
      have = true;
    }
    pos = s + l;
  }
  if (have)
    r = fn (opaque, run_start, run_end - run_start);
out:
  pthread_mutex_unlock (&sp->lock);
  return r;
}
