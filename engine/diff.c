/* Cairn engine, layer "diff": what changed between two states of a
 * volume, and the space accounting built on the same walk (DESIGN §2.5).
 *
 * Every pointer carries the birth of what it points to, which is at least
 * every birth below it (BT-4), so the leaves that changed after generation
 * a are found by descending only into pointers born after a.  Within the
 * key range of each such leaf, the new state's extents born after a are
 * new data, and what the old state mapped but the new one does not is now
 * a hole.  The range is widened by the longest extent, since an extent
 * keyed in one leaf may reach into the next; runs found twice are merged.
 * A new state whose tree was emptied has no root to walk from: all that
 * the old state mapped is a hole, and finding it costs what changed.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "catalog-int.h"

/* A changed run, in blocks. */
struct run {
  uint64_t start, len;
  unsigned type;
};

struct diff_state {
  struct catalog *cat;
  struct btree *a, *b;      /* old and new state */
  uint64_t since;           /* the old state's generation */
  uint64_t nblocks;         /* the new state's size in blocks */
  uint64_t maxe;
  struct run *runs;
  size_t n, cap;
  int err;
};

/* Remember a run. */
static int
add_run (struct diff_state *d, uint64_t start, uint64_t len, unsigned type)
{
  if (len == 0)
    return 0;
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 64;
    struct run *nr = realloc (d->runs, cap * sizeof *nr);

    if (nr == NULL)
      return cairn_fail (-ENOMEM, "out of memory computing a diff");
    d->runs = nr;
    d->cap = cap;
  }
  d->runs[d->n++] = (struct run) { start, len, type };
  return 0;
}

/* Subtract the new state's mapping from the old one's over [from, to):
 * what the old state mapped there and the new one does not is a hole.
 */
static int
holes_in (struct diff_state *d, uint64_t from, uint64_t to)
{
  struct map_vec ma = { NULL, 0, 0 }, mb = { NULL, 0, 0 };
  size_t ia = 0;
  int r = map_range_locked (d->cat, d->b, from, to - from, &mb);

  if (r == 0)
    r = map_range_locked (d->cat, d->a, from, to - from, &ma);
  for (size_t i = 0; r == 0 && i < ma.n; i++) {
    uint64_t s = ma.m[i].lbn, e = s + ma.m[i].n;

    while (ia < mb.n && mb.m[ia].lbn + mb.m[ia].n <= s)
      ia++;
    for (size_t j = ia; r == 0 && j < mb.n && s < e; j++) {
      uint64_t bs = mb.m[j].lbn, be = bs + mb.m[j].n;

      if (bs >= e)
        break;
      if (bs > s)
        r = add_run (d, s, bs - s, VOL_DIFF_HOLE);
      s = MAX (s, be);
    }
    if (r == 0 && s < e)
      r = add_run (d, s, e - s, VOL_DIFF_HOLE);
  }
  map_vec_free (&ma);
  map_vec_free (&mb);
  return r;
}

/* A changed leaf of the new state, keyed lo <= lbn < hi.  Its own extents
 * born after the old state are new data.  Holes can only be where the
 * leaf maps nothing in its range: only those gaps (none in a fully
 * written volume) are looked up in both states.  The range ends the
 * longest extent past hi: an extent keyed here may have reached into the
 * next leaf's range, which need not have changed when it was cut short.
 */
static int
on_changed_leaf (void *opaque, const uint8_t *lo, size_t lolen,
                 const uint8_t *hi, size_t hilen, const struct btree_leaf *leaf)
{
  struct diff_state *d = opaque;
  uint64_t from = lo && lolen == 8 ? get_be64 (lo) : 0;
  uint64_t to = hi && hilen == 8 ? get_be64 (hi) : d->nblocks;
  uint64_t pos = from;
  uint32_t n = btree_leaf_nitems (leaf);
  int r = 0;

  to = MIN (to, d->nblocks);
  for (uint32_t i = 0; r == 0 && i < n; i++) {
    const uint8_t *k, *v;
    size_t kl, vl;
    uint64_t s, len;

    btree_leaf_item (leaf, i, &k, &kl, &v, &vl);
    if (kl != 8 || vl < EXT_HDR || (len = ext_len (v)) == 0)
      return cairn_fail (-EIO, "corrupt extent item in volume tree %" PRIu64,
                         btree_id (d->b));
    s = get_be64 (k);
    if (s >= d->nblocks)
      break;
    len = MIN (len, d->nblocks - s);
    if (ext_birth (v) > d->since)
      r = add_run (d, s, len, VOL_DIFF_DATA);
    if (r == 0 && s > pos && pos < to)
      r = holes_in (d, pos, MIN (s, to));
    pos = MAX (pos, s + len);
  }
  to = MIN (to + d->maxe, d->nblocks);
  if (r == 0 && pos < to)
    r = holes_in (d, pos, to);
  return r;
}

/* Order runs by start. */
static int
cmp_run (const void *x, const void *y)
{
  const struct run *a = x, *b = y;

  if (a->start != b->start)
    return (a->start > b->start) - (a->start < b->start);
  return (int) a->type - (int) b->type;
}

/* Does the newer state b descend from volume a's state at since: is it a
 * state of a itself, or of a volume whose chain of origins reaches a at a
 * generation at or after since (a clone of a later state, or the history
 * a rollback kept)?  Every block of b born at or before since is then
 * one a had at since, so the walk by birth finds what changed.
 */
static bool
in_lineage (struct cairn_volume *a, struct cairn_volume *b)
{
  struct volstate *va = vol_state (a), *vs = vol_state (b);
  struct catalog *cat = va->cat;
  uint64_t since = vol_pin_gen (a);
  bool yes = false;

  if (va == vs)
    return true;
  pthread_mutex_lock (&cat->tlock);
  for (size_t hops = 0; vs && vs->origin_id && hops <= cat->nvols; hops++) {
    if (vs->origin_id == va->id) {
      yes = vs->origin_gen >= since;
      break;
    }
    vs = cat_find_id_locked (cat, vs->origin_id);
  }
  pthread_mutex_unlock (&cat->tlock);
  return yes;
}

/* Open the two states of a diff and check that they make sense. */
static int
open_pair (struct cairn_pool *pool, const char *from, const char *to,
           struct cairn_volume **ap, struct cairn_volume **bp)
{
  struct cairn_volume *a = NULL, *b = NULL;
  int r = vol_open (pool, from, &a);

  if (r == 0)
    r = vol_open (pool, to, &b);
  if (r == 0 && vol_pin_gen (a) == 0)
    r = cairn_fail (-EINVAL, "'%s' is a live volume: the older side of a diff "
                    "must be a snapshot or a kept generation", from);
  if (r == 0 && !in_lineage (a, b))
    r = cairn_fail (-EINVAL, "'%s' and '%s' are not states of one volume, and "
                    "'%s' does not start from '%s' or a later state of its "
                    "volume (a clone, or what a rollback kept)", from, to, to,
                    from);
  if (r == 0 && vol_pin_gen (b) && vol_pin_gen (b) <= vol_pin_gen (a))
    r = cairn_fail (-EINVAL, "'%s' is not older than '%s'", from, to);
  if (r < 0) {
    vol_close (a);
    vol_close (b);
    return r;
  }
  *ap = a;
  *bp = b;
  return 0;
}

/* The changed runs between two states, sorted and merged. */
static int
diff_runs (struct cairn_pool *pool, struct cairn_volume *a,
           struct cairn_volume *b, struct diff_state *d)
{
  struct catalog *cat;
  struct btree_root root;
  size_t out = 0;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  memset (d, 0, sizeof *d);
  d->cat = cat;
  d->a = vol_tree (a);
  d->b = vol_tree (b);
  d->since = vol_pin_gen (a);
  d->nblocks = DIV_ROUND_UP (vol_size (b), BLOCK_SIZE);
  d->maxe = max_ext_blocks (cat);
  btree_rdlock (d->b);
  btree_get_root (d->b, &root);
  /* A tree whose last item was deleted has no root (btree_delete), so no
   * birth to walk by: whatever the old state mapped is a hole now.
   */
  if (root.bp.addr == 0)
    r = holes_in (d, 0, d->nblocks);
  else
    r = btree_walk_since (pool_cache (pool), &root, d->since, on_changed_leaf,
                          d);
  btree_unlock (d->b);
  if (r < 0) {
    free (d->runs);
    d->runs = NULL;
    return r;
  }
  if (d->n > 1)
    qsort (d->runs, d->n, sizeof *d->runs, cmp_run);
  for (size_t i = 0; i < d->n; i++) {
    struct run *last = out ? &d->runs[out - 1] : NULL;
    struct run cur = d->runs[i];

    if (last && last->type == cur.type && cur.start <= last->start + last->len) {
      uint64_t end = MAX (last->start + last->len, cur.start + cur.len);
      last->len = end - last->start;
    }
    else
      d->runs[out++] = cur;
  }
  d->n = out;
  return 0;
}

int
vol_diff (struct cairn_pool *pool, const char *from, const char *to,
          int (*fn) (void *opaque, uint64_t off, uint64_t len, unsigned type),
          void *opaque)
{
  struct cairn_volume *a, *b;
  struct diff_state d = { .runs = NULL };
  uint64_t size;
  int r = open_pair (pool, from, to, &a, &b);

  if (r < 0)
    return r;
  size = vol_size (b);
  r = diff_runs (pool, a, b, &d);
  for (size_t i = 0; r == 0 && i < d.n; i++) {
    uint64_t off = d.runs[i].start * BLOCK_SIZE;
    uint64_t len = MIN (d.runs[i].len * BLOCK_SIZE, size - off);

    r = fn (opaque, off, len, d.runs[i].type);
  }
  free (d.runs);
  vol_close (a);
  vol_close (b);
  return r;
}

int
snap_space (struct cairn_pool *pool, const char *vol, const char *snap,
            struct snap_space *sp)
{
  char name[2 * VOL_NAME_MAX + 2];
  struct cairn_volume *a, *b;
  struct vol_info info;
  struct catalog *cat;
  struct diff_state d;
  uint64_t unique;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  snprintf (name, sizeof name, "%s@%s", vol, snap);
  r = vol_stat (pool, name, &info);
  if (r < 0)
    return r;
  r = open_pair (pool, name, vol, &a, &b);
  if (r < 0)
    return r;
  memset (sp, 0, sizeof *sp);
  sp->referenced = info.referenced;
  {
    struct pinrec pr;

    /* While a clone, another snapshot or a checkpoint also pins this
     * state, deleting the snapshot frees nothing.
     */
    r = cat_read_pin (cat, vol_state (a)->id, vol_pin_gen (a), &pr);
    unique = 0;
    if (r == 0 && pr.snaps + pr.clones == 1 && !pr.ckpt)
      r = reclaim_unique_blocks (cat, vol_state (a), vol_pin_gen (a), &unique);
  }
  if (r == 0)
    r = diff_runs (pool, a, b, &d);
  if (r == 0) {
    for (size_t i = 0; i < d.n; i++)
      if (d.runs[i].type == VOL_DIFF_DATA)
        sp->written_since += d.runs[i].len * BLOCK_SIZE;
    free (d.runs);
    sp->unique = unique * BLOCK_SIZE;
  }
  vol_close (a);
  vol_close (b);
  return r;
}

uint64_t
vol_reclaimed_bytes (struct cairn_pool *pool)
{
  struct catalog *cat;

  if (catalog_get (pool, &cat) < 0)
    return 0;
  return __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED) * BLOCK_SIZE;
}
