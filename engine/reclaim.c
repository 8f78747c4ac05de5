/* Cairn engine, layer "reclaim": what stops being referenced, and when it
 * becomes free (DESIGN §2.4, ZFS's dead lists generalised to many pins).
 *
 * Design note.
 *
 * Invariants (tests cite them as RC-n):
 *  RC-1  A volume S owns the blocks of its tree born after its origin
 *        generation O (0 for a volume that is not a clone); blocks born at
 *        or before O belong to the origin's lineage and S never frees them.
 *  RC-2  When S stops referencing a block it owns, born at B, in generation
 *        D: if some pin p of S has B <= p (p < D always holds, pins being
 *        frozen generations), the block goes on S's deadlist as (D, B);
 *        otherwise it is freed.  Only the newest pin matters for the test.
 *  RC-3  When the last reason for pin p of S goes, in generation G, with
 *        neighbouring pins p- < p < p+ (p- = O when none, p+ = G when
 *        none), exactly the deadlist entries with p- < B <= p and
 *        p < D <= p+ are freed.  Entries with B <= p- stay: p- still needs
 *        them.  p+ is G, not infinity: a pin made later (a snapshot, a
 *        clone) is newer than G and keeps what dies after it, born in
 *        (p-, p] or not, on the deadlist for itself.
 *  RC-4  Deleting a volume with no pins frees every block of its tree born
 *        after O, walking only pointers born after O: the cost is the
 *        volume's own data, not its size.  It runs in the background, a
 *        bounded step per commit, and resumes after a restart (reaper.c).
 *  RC-5  A partial volume (a receive in progress, a clone of its target's
 *        base snapshot) also lists on its deadlist, as (D, B), the blocks
 *        born at or before O that it stops referencing: they are what the
 *        target stops referencing of the base when the receive publishes,
 *        and the target then adopts the entries (those born after its own
 *        origin) as if it had written the changes itself.  Until then no
 *        pin removal looks at them (they are under the partial's id), and
 *        destroying the partial drops them without freeing anything (RC-1).
 *  RC-6  A rollback of S to its pin O (catalog-rollback.c VR-4) hands the
 *        history after O to a new clone X of (S, O): S's entries that died
 *        after O move to X when born after O (X owns them, RC-1, and they
 *        are kept for its pins, RC-2), and are forgotten when born at or
 *        before O (they are in S's live tree again, and S's deadlist will
 *        take them when S stops referencing them).  RC-1..RC-3 then hold
 *        for both, as fsck's audit shows.
 *
 * Deadlist entries are gathered in memory as trees change (the free
 * function must not modify another tree in the middle of a B-tree
 * operation) and written to the deadlist tree in the next freeze, before
 * any catalog change runs.  Deadlist keys: be64 volume id, be64 D, be64
 * first block; values: u64 length in blocks, u64 birth.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "catalog-int.h"

#define DL_KEY 24u
#define DL_VAL 16u

/* Queue a deadlist entry. */
static void
defer (struct volstate *vs, uint64_t addr, uint64_t len, uint64_t birth)
{
  pthread_mutex_lock (&vs->pend_lock);
  if (vs->npending == vs->pending_cap) {
    size_t cap = vs->pending_cap ? vs->pending_cap * 2 : 64;
    struct dl_entry *np = realloc (vs->pending, cap * sizeof *np);

    if (np == NULL) {
      /* Without memory the entry is lost: the blocks leak (fsck reports
       * them) but nothing a pin needs is freed.
       */
      pthread_mutex_unlock (&vs->pend_lock);
      return;
    }
    vs->pending = np;
    vs->pending_cap = cap;
  }
  vs->pending[vs->npending++] = (struct dl_entry) {
    addr, len, birth, pool_open_gen (vs->cat->pool)
  };
  __atomic_add_fetch (&vs->held, (int64_t) len, __ATOMIC_RELAXED);
  pthread_mutex_unlock (&vs->pend_lock);
}

/* A volume stops referencing blocks [addr, addr + len) born at birth
 * (RC-1, RC-2).
 */
bool
reclaim_free_blocks (struct volstate *vs, uint64_t addr, uint64_t len,
                     uint64_t birth)
{
  if (birth <= vs->origin_gen) {
    if (vs->flags & VOLF_PARTIAL)
      defer (vs, addr, len, birth);       /* RC-5 */
    return false;
  }
  if (birth <= __atomic_load_n (&vs->max_pin, __ATOMIC_ACQUIRE)) {
    defer (vs, addr, len, birth);
    return true;
  }
  space_free (pool_space (vs->cat->pool), addr, len, birth);
  return false;
}

/* The tree free function of a volume tree (byte addresses). */
void
reclaim_free_fn (void *opaque, uint64_t addr, uint64_t len, uint64_t birth)
{
  (void) reclaim_free_blocks (opaque, addr >> BLOCK_SHIFT, len >> BLOCK_SHIFT,
                              birth);
}

/* Write every queued deadlist entry to the deadlist tree (in the freeze).
 * The entries are taken off their queues first: a failure here loses
 * them, so the caller must not let the commit go on (catalog_freeze).
 */
int
reclaim_flush_pending (struct catalog *cat)
{
  int r = 0;

  for (size_t i = 0; i < cat->nvols && r == 0; i++) {
    struct volstate *vs = cat->vols[i];
    struct dl_entry *e;
    size_t n;

    pthread_mutex_lock (&vs->pend_lock);
    e = vs->pending;
    n = vs->npending;
    vs->pending = NULL;
    vs->npending = vs->pending_cap = 0;
    pthread_mutex_unlock (&vs->pend_lock);
    if (n == 0)
      continue;
    if (cat->deadlist == NULL) {
      free (e);
      r = cairn_fail (-EIO, "internal error: deadlist entries without a "
                      "deadlist tree");
      break;
    }
    btree_wrlock (cat->deadlist);
    for (size_t j = 0; j < n && r == 0; j++) {
      uint8_t key[DL_KEY], val[DL_VAL];

      put_be64 (key, vs->id);
      put_be64 (key + 8, e[j].death);
      put_be64 (key + 16, e[j].addr);
      put_le64 (val, e[j].len);
      put_le64 (val + 8, e[j].birth);
      r = btree_insert (cat->deadlist, key, DL_KEY, val, DL_VAL, BTREE_RESERVE);
    }
    btree_unlock (cat->deadlist);
    free (e);
  }
  return r;
}

/* The generation of the pin record of volume id the cursor is on, or 0
 * when it is on another item.
 */
static uint64_t
cursor_pin (struct btree_cursor *cur, uint64_t id)
{
  const uint8_t *k, *v;
  size_t kl, vl;

  btree_cursor_item (cur, &k, &kl, &v, &vl);
  if (kl != 17 || k[0] != RK_PIN || get_be64 (k + 1) != id)
    return 0;
  return get_be64 (k + 9);
}

/* The pins of volume id around gen: the newest below and the oldest above
 * (0 and UINT64_MAX when none).  Two seeks in the root tree: with a
 * checkpoint at every commit a volume may have many thousands of pins,
 * and removing one must not cost a walk over them.
 */
int
reclaim_pin_neighbours (struct catalog *cat, uint64_t id, uint64_t gen,
                        uint64_t *below, uint64_t *above)
{
  struct btree *root = pool_root_tree (cat->pool);
  struct btree_cursor *cur;
  uint8_t key[17];
  int r = btree_cursor_new (root, &cur);

  *below = 0;
  *above = UINT64_MAX;
  if (r < 0)
    return r;
  btree_rdlock (root);
  if (gen > 0) {
    cat_key (key, RK_PIN, id, gen - 1);
    r = btree_cursor_seek_le (cur, key, sizeof key);
    if (r == 0) {
      uint64_t g = cursor_pin (cur, id);

      if (g < gen)
        *below = g;
    }
  }
  if ((r == 0 || r == -ENOENT) && gen < UINT64_MAX) {
    cat_key (key, RK_PIN, id, gen + 1);
    r = btree_cursor_seek (cur, key, sizeof key);
    if (r == 0) {
      uint64_t g = cursor_pin (cur, id);

      if (g > gen)
        *above = g;
    }
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  return r == -ENOENT ? 0 : r;
}

/* The end of the deaths a free record of volume id starting at lo_d may
 * still free: hi_d, or the oldest pin above lo_d if that is older (RC-3).
 * Records written before RC-3 bounded them by the generation of the
 * removal have hi_d UINT64_MAX, and a pin made since then keeps what died
 * after it; this keeps those records from freeing it.
 */
int
reclaim_record_end (struct catalog *cat, uint64_t id, uint64_t lo_d,
                    uint64_t hi_d, uint64_t *endp)
{
  uint64_t below, above;
  int r = reclaim_pin_neighbours (cat, id, lo_d, &below, &above);

  *endp = MIN (hi_d, above);
  return r;
}

/* The newest pin of a volume. */
int
reclaim_max_pin (struct catalog *cat, uint64_t id, uint64_t *maxp)
{
  uint64_t below, above;
  int r = reclaim_pin_neighbours (cat, id, UINT64_MAX, &below, &above);

  if (r == 0)
    __atomic_store_n (maxp, below, __ATOMIC_RELEASE);
  return r;
}

/* Remove the deadlist entries of volume id with D in (lo_d, hi_d] and birth
 * in (lo_b, hi_b], at most limit of them: the blocks of those born after
 * keep_upto are freed, the others only forgotten (RC-5).  *held (when not
 * NULL) drops by the blocks removed; *removedp (when not NULL) gets the
 * number of entries removed.
 */
int
reclaim_free_entries (struct catalog *cat, uint64_t id, int64_t *held,
                     uint64_t lo_d, uint64_t hi_d, uint64_t lo_b, uint64_t hi_b,
                     uint64_t keep_upto, size_t limit, size_t *removedp)
{
  struct btree_cursor *cur;
  uint8_t key[DL_KEY];
  size_t removed = 0;
  int r;

  if (removedp)
    *removedp = 0;
  if (cat->deadlist == NULL)
    return 0;
  for (;;) {
    uint8_t batch[256][DL_KEY];
    size_t n = 0;

    r = btree_cursor_new (cat->deadlist, &cur);
    if (r < 0)
      return r;
    put_be64 (key, id);
    put_be64 (key + 8, lo_d + 1);
    put_be64 (key + 16, 0);
    btree_rdlock (cat->deadlist);
    for (r = btree_cursor_seek (cur, key, DL_KEY);
         r == 0 && n < ARRAY_SIZE (batch) && removed + n < limit;
         r = btree_cursor_next (cur)) {
      const uint8_t *k, *v;
      size_t kl, vl;
      uint64_t d, b;

      btree_cursor_item (cur, &k, &kl, &v, &vl);
      if (kl != DL_KEY || vl != DL_VAL || get_be64 (k) != id)
        break;
      d = get_be64 (k + 8);
      if (d > hi_d)
        break;
      b = get_le64 (v + 8);
      if (b > lo_b && b <= hi_b) {
        if (b > keep_upto) {
          space_free (pool_space (cat->pool), get_be64 (k + 16), get_le64 (v), b);
          __atomic_add_fetch (&cat->reclaimed, get_le64 (v), __ATOMIC_RELAXED);
        }
        if (held)
          __atomic_sub_fetch (held, (int64_t) get_le64 (v), __ATOMIC_RELAXED);
        memcpy (batch[n++], k, DL_KEY);
      }
    }
    btree_unlock (cat->deadlist);
    btree_cursor_free (cur);
    if (r < 0 && r != -ENOENT)
      return r;
    r = 0;
    btree_wrlock (cat->deadlist);
    for (size_t i = 0; i < n && r == 0; i++)
      r = btree_delete (cat->deadlist, batch[i], DL_KEY);
    btree_unlock (cat->deadlist);
    if (r < 0)
      return r;
    removed += n;
    if (removedp)
      *removedp = removed;
    if (n < ARRAY_SIZE (batch) || removed >= limit)
      return 0;
  }
}

/* Forget up to limit deadlist entries of a volume being destroyed, freeing
 * those born after since (reaper.c).
 */
int
reclaim_drain_deadlist (struct catalog *cat, uint64_t id, uint64_t since,
                        size_t limit, size_t *removedp)
{
  return reclaim_free_entries (cat, id, NULL, 0, UINT64_MAX, 0, UINT64_MAX,
                              since, limit, removedp);
}

/* The last reason for pin gen of vs went (RC-3). */
int
reclaim_pin_removed (struct catalog *cat, struct volstate *vs, uint64_t gen)
{
  uint64_t below, above;
  int r = reclaim_pin_neighbours (cat, vs->id, gen, &below, &above);

  if (r < 0)
    return r;
  if (below < vs->origin_gen)
    below = vs->origin_gen;
  /* Nothing has died after now yet; what dies later belongs to the pins
   * made later (RC-3), so the range a free record keeps must not reach
   * past now.
   */
  if (above == UINT64_MAX)
    above = pool_open_gen (cat->pool);
  return reclaim_free_range (cat, vs, gen, above, below, gen);
}

/* Free the deadlist entries of volume id with D in (lo_d, hi_d] and B in
 * (lo_b, hi_b]: up to a step's worth now, the rest in the background
 * (reaper.c), so that deleting a snapshot that held much is as quick as
 * one that held little.  No entry can join the range later (hi_d is not
 * in the future, RC-3), and ranges of different pins never overlap, so
 * the rest can wait.
 */
int
reclaim_free_range (struct catalog *cat, struct volstate *vs, uint64_t lo_d,
                    uint64_t hi_d, uint64_t lo_b, uint64_t hi_b)
{
  size_t limit = reaper_budget (cat), removed;
  int r = reclaim_free_entries (cat, vs->id, &vs->held, lo_d, hi_d, lo_b,
                                hi_b, 0, limit, &removed);

  if (r == 0 && removed == limit)
    r = reaper_defer_range (cat, vs, lo_d, hi_d, lo_b, hi_b);
  return r;
}

/* Sum the blocks of volume id's listed deadlist entries with D in
 * [min_d, max_d] and B in [min_b, max_b].
 */
static int
dl_sum (struct catalog *cat, uint64_t id, uint64_t min_d, uint64_t max_d,
        uint64_t min_b, uint64_t max_b, uint64_t *blocksp)
{
  struct btree_cursor *cur;
  uint8_t key[DL_KEY];
  uint64_t total = 0;
  int r;

  *blocksp = 0;
  if (cat->deadlist == NULL)
    return 0;
  r = btree_cursor_new (cat->deadlist, &cur);
  if (r < 0)
    return r;
  put_be64 (key, id);
  put_be64 (key + 8, min_d);
  put_be64 (key + 16, 0);
  btree_rdlock (cat->deadlist);
  for (r = btree_cursor_seek (cur, key, DL_KEY); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;
    uint64_t b;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl != DL_KEY || vl != DL_VAL || get_be64 (k) != id ||
        get_be64 (k + 8) > max_d)
      break;
    b = get_le64 (v + 8);
    if (b >= min_b && b <= max_b)
      total += get_le64 (v);
  }
  btree_unlock (cat->deadlist);
  btree_cursor_free (cur);
  if (r < 0 && r != -ENOENT)
    return r;
  *blocksp = total;
  return 0;
}

/* Call fn for every deadlist entry of volume vs with a death in
 * (lo_d, hi_d], those written and those still queued in memory (len in
 * blocks); fn returning non-zero stops the walk (< 0 fails it).
 */
int
reclaim_foreach_entry (struct catalog *cat, struct volstate *vs,
                       uint64_t lo_d, uint64_t hi_d,
                       int (*fn) (void *opaque, uint64_t len, uint64_t birth,
                                  uint64_t death),
                       void *opaque)
{
  struct btree_cursor *cur;
  uint8_t key[DL_KEY];
  int r = 0, fr = 0;

  pthread_mutex_lock (&vs->pend_lock);
  for (size_t i = 0; fr == 0 && i < vs->npending; i++)
    if (vs->pending[i].death > lo_d && vs->pending[i].death <= hi_d)
      fr = fn (opaque, vs->pending[i].len, vs->pending[i].birth,
               vs->pending[i].death);
  pthread_mutex_unlock (&vs->pend_lock);
  if (fr != 0 || cat->deadlist == NULL || lo_d == UINT64_MAX)
    return fr < 0 ? fr : 0;
  r = btree_cursor_new (cat->deadlist, &cur);
  if (r < 0)
    return r;
  put_be64 (key, vs->id);
  put_be64 (key + 8, lo_d + 1);
  put_be64 (key + 16, 0);
  btree_rdlock (cat->deadlist);
  for (r = btree_cursor_seek (cur, key, DL_KEY); r == 0 && fr == 0;
       r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl != DL_KEY || vl != DL_VAL || get_be64 (k) != vs->id ||
        get_be64 (k + 8) > hi_d)
      break;
    fr = fn (opaque, get_le64 (v), get_le64 (v + 8), get_be64 (k + 8));
  }
  btree_unlock (cat->deadlist);
  btree_cursor_free (cur);
  if (fr != 0)
    return fr < 0 ? fr : 0;
  return r == -ENOENT ? 0 : r;
}

/* The blocks of volume id's deadlist entries with D in (lo_d, hi_d] and
 * B in (lo_b, hi_b] (listed ones only).
 */
int
reclaim_range_blocks (struct catalog *cat, uint64_t id, uint64_t lo_d,
                      uint64_t hi_d, uint64_t lo_b, uint64_t hi_b,
                      uint64_t *blocksp)
{
  *blocksp = 0;
  if (lo_d >= hi_d || lo_b >= hi_b)
    return 0;
  return dl_sum (cat, id, lo_d + 1, hi_d, lo_b + 1, hi_b, blocksp);
}

/* Blocks that removing pin gen of vs would free (RC-3, without freeing):
 * listed deadlist entries and, for the newest pin, those still queued.
 */
int
reclaim_unique_blocks (struct catalog *cat, struct volstate *vs, uint64_t gen,
                       uint64_t *blocksp)
{
  uint64_t below, above, total = 0, listed;
  int r = reclaim_pin_neighbours (cat, vs->id, gen, &below, &above);

  if (r < 0)
    return r;
  if (below < vs->origin_gen)
    below = vs->origin_gen;
  if (above == UINT64_MAX) {
    pthread_mutex_lock (&vs->pend_lock);
    for (size_t i = 0; i < vs->npending; i++)
      if (vs->pending[i].birth > below && vs->pending[i].birth <= gen)
        total += vs->pending[i].len;
    pthread_mutex_unlock (&vs->pend_lock);
  }
  r = reclaim_range_blocks (cat, vs->id, gen, above, below, gen, &listed);
  *blocksp = total + listed;
  return r;
}

/* Move from's deadlist entries that died after after_d: those born after
 * keep_b go to `to`, the others are forgotten (not freed).  The held
 * counts follow.  In the freeze, after the pending entries were written.
 */
static int
move_entries (struct catalog *cat, struct volstate *from, struct volstate *to,
              uint64_t after_d, uint64_t keep_b)
{
  struct btree_cursor *cur;
  uint8_t key[DL_KEY];
  int r;

  if (cat->deadlist == NULL || after_d == UINT64_MAX)
    return 0;
  for (;;) {
    uint8_t batch[256][DL_KEY + DL_VAL];
    size_t n = 0;

    r = btree_cursor_new (cat->deadlist, &cur);
    if (r < 0)
      return r;
    put_be64 (key, from->id);
    put_be64 (key + 8, after_d + 1);
    put_be64 (key + 16, 0);
    btree_rdlock (cat->deadlist);
    for (r = btree_cursor_seek (cur, key, DL_KEY); r == 0 && n < ARRAY_SIZE (batch);
         r = btree_cursor_next (cur)) {
      const uint8_t *k, *v;
      size_t kl, vl;

      btree_cursor_item (cur, &k, &kl, &v, &vl);
      if (kl != DL_KEY || vl != DL_VAL || get_be64 (k) != from->id)
        break;
      memcpy (batch[n], k, DL_KEY);
      memcpy (batch[n++] + DL_KEY, v, DL_VAL);
    }
    btree_unlock (cat->deadlist);
    btree_cursor_free (cur);
    if (r < 0 && r != -ENOENT)
      return r;
    r = 0;
    btree_wrlock (cat->deadlist);
    for (size_t i = 0; i < n && r == 0; i++) {
      uint8_t *k = batch[i], *v = batch[i] + DL_KEY;
      int64_t len = (int64_t) get_le64 (v);

      r = btree_delete (cat->deadlist, k, DL_KEY);
      __atomic_sub_fetch (&from->held, len, __ATOMIC_RELAXED);
      if (r < 0 || get_le64 (v + 8) <= keep_b)
        continue;
      put_be64 (k, to->id);
      r = btree_insert (cat->deadlist, k, DL_KEY, v, DL_VAL, BTREE_RESERVE);
      __atomic_add_fetch (&to->held, len, __ATOMIC_RELAXED);
    }
    btree_unlock (cat->deadlist);
    if (r < 0)
      return r;
    if (n < ARRAY_SIZE (batch))
      return 0;
  }
}

/* A published partial's deadlist becomes its target's (RC-5): entries
 * born after the target's origin move to the target's id, the others go.
 */
int
reclaim_adopt_deadlist (struct catalog *cat, struct volstate *from,
                        struct volstate *to)
{
  return move_entries (cat, from, to, 0, to->origin_gen);
}

/* A rollback of from to its pin at gen gives the deaths after gen to the
 * volume that keeps the later states (catalog-rollback.c VR-4).
 */
int
reclaim_move_deadlist (struct catalog *cat, struct volstate *from,
                       struct volstate *to, uint64_t gen)
{
  return move_entries (cat, from, to, gen, gen);
}

/* Count the blocks on a volume's deadlist (opening the catalog). */
int
reclaim_count_held (struct catalog *cat, struct volstate *vs)
{
  uint64_t total;
  int r = dl_sum (cat, vs->id, 0, UINT64_MAX, 0, UINT64_MAX, &total);

  if (r == 0)
    __atomic_store_n (&vs->held, (int64_t) total, __ATOMIC_RELAXED);
  return r;
}
