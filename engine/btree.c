/* Cairn engine: copy-on-write B-tree operations.
 *
 * Design note.
 *
 * Invariants (tests cite them as BT-n):
 *  BT-1  Keys in a node are strictly increasing (memcmp order).
 *  BT-2  An internal node's item i points at a child one level lower whose
 *        keys k satisfy key(i) <= k < key(i+1); item 0's key is empty and
 *        stands for the parent's own lower bound.
 *  BT-3  A node born in a generation older than the open one is never
 *        changed: it is copied to a fresh block first (cow), and the old
 *        block goes to the tree's free function with its birth.
 *  BT-4  A child's birth is never newer than its parent's pointer birth, so
 *        every node born in the open generation hangs below a path of nodes
 *        born in it too: freezing walks only pointers whose birth is the
 *        open generation (the same walk the diff layer uses, DESIGN §2.5).
 *  BT-5  No non-root node is empty; an internal root has at least two
 *        children after any deletion (the tree shrinks in height instead).
 *        Other internal nodes may have one child: an append starts a new
 *        internal node with one, and a lone child beside a full sibling
 *        cannot merge with it; once emptied it leaves (remove_child).
 *  BT-6  A modification that has started cannot fail for lack of space: it
 *        first pre-allocates the worst case of new nodes (resv_fill) and
 *        returns -ENOSPC before touching anything.
 *  BT-7  A node whose key range changes is born in the open generation.
 *        Splits and merges rewrite the nodes they change anyway; when an
 *        emptied child leaves its parent (remove_child), the sibling that
 *        takes over its range is copied down to the leaf at the edge that
 *        grows.  With BT-4, a walk since generation g (the diff) then meets
 *        every key range whose mapping changed after g, even where every
 *        item of it went.
 *
 * State of a node: clean (on disk, immutable) -> cow -> dirty (open
 * generation, edited in place) -> btree_freeze -> clean and pinned in a
 * batch -> nodebatch_write -> clean, evictable.
 *
 * Deletion merges an underfull node (less than a quarter full) with a
 * sibling when the two fit in one node and otherwise leaves it as it is:
 * occupancy is a matter of efficiency, not correctness.  An empty node is
 * a matter of correctness (BT-5): it leaves its parent whether or not it
 * could merge.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "btree-int.h"

struct split {
  bool happened;
  uint8_t key[BTREE_MAX_KEY];
  size_t klen;
  struct node *right;
};

/* The largest item (slot, header, key and value) a node may hold: a
 * quarter of the capacity, so that a split always leaves room.
 */
static inline uint32_t
max_item (uint32_t node_size)
{
  return node_capacity (node_size) / 4;
}

/* Largest value for a key of klen bytes. */
size_t
btree_max_value (struct nodecache *cache, size_t klen)
{
  uint32_t m = max_item (cache->node_size);

  if (klen > BTREE_MAX_KEY || item_size (klen, 0) > m)
    return 0;
  return MIN (m - item_size (klen, 0), 65535u);
}

/* Free the blocks of a node through the tree's free function. */
static void
default_free (void *opaque, uint64_t addr, uint64_t len, uint64_t birth)
{
  struct nodecache *cache = opaque;

  space_free (cache->space, addr >> BLOCK_SHIFT, len >> BLOCK_SHIFT, birth);
}

/* Open a handle on a tree. */
int
btree_open (struct nodecache *cache, uint64_t id, const struct btree_root *root,
            struct btree **treep)
{
  struct btree *t = calloc (1, sizeof *t);

  if (t == NULL)
    return cairn_fail (-ENOMEM, "out of memory opening tree %" PRIu64, id);
  t->cache = cache;
  t->id = id;
  if (root)
    t->root = *root;
  t->free_fn = default_free;
  t->free_opaque = cache;
  pthread_rwlock_init (&t->lock, NULL);
  *treep = t;
  return 0;
}

/* Return pre-allocated nodes to the allocator. */
void
btree_release_reserve (struct btree *t)
{
  uint64_t nblocks = t->cache->node_size >> BLOCK_SHIFT;
  uint64_t gen = nodecache_gen (t->cache);

  while (t->nresv > 0)
    space_free (t->cache->space, t->resv[--t->nresv] >> BLOCK_SHIFT, nblocks, gen);
}

/* Close a handle. */
void
btree_close (struct btree *t)
{
  if (t == NULL)
    return;
  btree_release_reserve (t);
  pthread_rwlock_destroy (&t->lock);
  free (t);
}

void
btree_set_free_fn (struct btree *t, btree_free_fn fn, void *opaque)
{
  t->free_fn = fn;
  t->free_opaque = opaque;
}

uint64_t
btree_id (struct btree *t)
{
  return t->id;
}

void
btree_get_root (struct btree *t, struct btree_root *root)
{
  *root = t->root;
}

uint64_t
nodecache_changes (struct nodecache *cache)
{
  return __atomic_load_n (&cache->changes, __ATOMIC_ACQUIRE);
}

void
nodecache_fail_change (struct nodecache *cache, uint64_t nth, int err)
{
  cache->fail_err = err < 0 ? err : -EIO;
  __atomic_store_n (&cache->fail_at, nth ? nodecache_changes (cache) + nth : 0,
                    __ATOMIC_RELEASE);
}

/* Count a change that begins now; fail it when a test asked to. */
static int
change_begins (struct btree *t)
{
  struct nodecache *c = t->cache;
  uint64_t n = __atomic_add_fetch (&c->changes, 1, __ATOMIC_ACQ_REL);

  if (n == __atomic_load_n (&c->fail_at, __ATOMIC_ACQUIRE))
    return cairn_fail (c->fail_err, "tree %" PRIu64 ": change %" PRIu64
                       " failed as the test asked", t->id, n);
  return 0;
}

int
btree_swap_roots (struct btree *a, struct btree *b)
{
  struct btree_root root = a->root;
  int r;

  if (a->dirty || b->dirty)
    return cairn_fail (-EBUSY, "internal error: swapping the roots of trees "
                       "%" PRIu64 " and %" PRIu64 " with unfrozen changes",
                       a->id, b->id);
  r = change_begins (a);
  if (r < 0)
    return r;
  a->root = b->root;
  b->root = root;
  return 0;
}

bool
btree_is_dirty (struct btree *t)
{
  return t->dirty;
}

void
btree_rdlock (struct btree *t)
{
  pthread_rwlock_rdlock (&t->lock);
}

void
btree_wrlock (struct btree *t)
{
  pthread_rwlock_wrlock (&t->lock);
}

void
btree_unlock (struct btree *t)
{
  pthread_rwlock_unlock (&t->lock);
}

/* Pre-allocate node blocks until want are held (BT-6). */
static int
resv_fill (struct btree *t, unsigned want, unsigned flags)
{
  struct nodecache *c = t->cache;
  uint64_t nblocks = c->node_size >> BLOCK_SHIFT;

  assert (want <= ARRAY_SIZE (t->resv));
  while (t->nresv < want) {
    uint64_t hint = __atomic_load_n (&c->alloc_hint, __ATOMIC_RELAXED);
    uint64_t start;
    int r = space_alloc (c->space, nblocks, hint, flags, &start);

    if (r < 0) {
      char why[256];

      snprintf (why, sizeof why, "%s", cairn_errmsg ());
      return cairn_fail (r, "metadata of tree %" PRIu64 ": %s", t->id, why);
    }
    __atomic_store_n (&c->alloc_hint, start + nblocks, __ATOMIC_RELAXED);
    t->resv[t->nresv++] = start << BLOCK_SHIFT;
  }
  return 0;
}

/* Nodes a modification may create: a copy and a split per level, a root.
 * A delete copies its path, and per level above that either a sibling it
 * merges with or, once, the edge of the sibling that takes over an emptied
 * child's range (BT-7), which is as long as the levels below: within it.
 */
static unsigned
resv_need (const struct btree *t)
{
  unsigned height = t->root.bp.addr ? t->root.level + 1u : 0u;

  return 2 * height + 3;
}

/* A new dirty node from the reserve. */
static int
new_node (struct btree *t, unsigned level, struct node **np)
{
  assert (t->nresv > 0);
  return cache_new (t->cache, t->resv[--t->nresv], level, t->id, np);
}

/* The pointer to a dirty node (its checksum is filled in by freeze). */
static void
dirty_ptr (const struct node *n, struct blkptr *bp)
{
  bp->addr = n->addr;
  bp->birth = n->gen;
  memset (bp->sha, 0, SHA256_LEN);
}

/* Make *np writable: copy a clean node to a fresh block (BT-3). */
static int
cow (struct btree *t, struct node **np)
{
  struct node *old = *np, *n;
  struct nodecache *c = t->cache;
  int r;

  if (old->dirty)
    return 0;
  r = new_node (t, node_level (old), &n);
  if (r < 0)
    return r;
  memcpy (n->buf, old->buf, c->node_size);
  node_stamp_identity (n, t->id);   /* cache_new set n->addr and n->gen */
  n->used = old->used;
  if (old->gen == nodecache_gen (c))
    /* Frozen by the commit that is running (a freeze hook changes the tree
     * again): the commit is writing this block, so it must not be reused
     * before the generation is durable.
     */
    space_free (c->space, old->addr >> BLOCK_SHIFT, c->node_size >> BLOCK_SHIFT,
                old->gen - 1);
  else
    t->free_fn (t->free_opaque, old->addr, c->node_size, old->gen);
  cache_put (c, old);
  *np = n;
  return 0;
}

/* Free a node that leaves the tree. */
static void
drop_node (struct btree *t, struct node *n)
{
  t->free_fn (t->free_opaque, n->addr, t->cache->node_size, n->gen);
  if (n->dirty)
    cache_forget (t->cache, n);
}

/* Report a structural error found while descending. */
static int
bad_child (const struct node *parent, uint32_t i, const char *what)
{
  return cairn_fail (-EIO, "corrupt metadata: child %" PRIu32 " of the node at "
                     "byte %" PRIu64 " (level %u) %s", i, parent->addr,
                     node_level (parent), what);
}

/* Get child i of an internal node, pinned, checking its level and keys
 * against the parent's separators (BT-2).
 */
int
btree_child (struct btree *t, struct node *parent, uint32_t i, struct node **cp)
{
  struct blkptr bp;
  struct node *c;
  uint32_t n = node_nitems (parent), cn;
  uint8_t *memo = __atomic_load_n (&parent->checked, __ATOMIC_ACQUIRE);
  uint8_t bit = (uint8_t) (1u << (i % 8));
  int r;

  node_get_child (parent, i, &bp);
  if (bp.birth > parent->gen)
    return bad_child (parent, i, "is newer than its parent");
  r = cache_get (t->cache, &bp, &c);
  if (r < 0)
    return r;
  cn = node_nitems (c);
  if (node_level (c) + 1 != node_level (parent)) {
    cache_put (t->cache, c);
    return bad_child (parent, i, "has the wrong level");
  }
  if (cn == 0) {
    cache_put (t->cache, c);
    return bad_child (parent, i, "is empty");
  }
  /* The child's smallest real key (item 1 in an internal child) and its
   * largest must lie inside the parent's range for it: checked once for
   * each child of a clean parent (node->checked), and every time below a
   * dirty one.
   */
  if (memo == NULL ||
      !(__atomic_load_n (&memo[i / 8], __ATOMIC_RELAXED) & bit)) {
    size_t lo_len, hi_len, first_len, last_len;
    uint32_t first = node_level (c) > 0 ? 1 : 0;
    const uint8_t *lo = node_key (parent, i, &lo_len);
    const uint8_t *last = node_key (c, cn - 1, &last_len);

    if (i > 0 && first < cn) {
      const uint8_t *fk = node_key (c, first, &first_len);
      if (key_cmp (fk, first_len, lo, lo_len) < 0) {
        cache_put (t->cache, c);
        return bad_child (parent, i, "holds a key below its range");
      }
    }
    if (i + 1 < n && (cn > first)) {
      const uint8_t *hi = node_key (parent, i + 1, &hi_len);
      if (key_cmp (last, last_len, hi, hi_len) >= 0) {
        cache_put (t->cache, c);
        return bad_child (parent, i, "holds a key above its range");
      }
    }
    if (memo)
      __atomic_fetch_or (&memo[i / 8], bit, __ATOMIC_RELAXED);
  }
  *cp = c;
  return 0;
}

/* Look a key up. */
int
btree_lookup (struct btree *t, const void *key, size_t klen, void *val,
              size_t valmax, size_t *vlenp)
{
  struct node *n, *c;
  bool found;
  uint32_t i;
  int r;

  if (t->root.bp.addr == 0)
    return -ENOENT;
  r = cache_get (t->cache, &t->root.bp, &n);
  if (r < 0)
    return r;
  while (node_level (n) > 0) {
    i = node_child_index (n, key, klen);
    r = btree_child (t, n, i, &c);
    cache_put (t->cache, n);
    if (r < 0)
      return r;
    n = c;
  }
  i = node_search (n, key, klen, &found);
  if (found) {
    size_t vlen;
    const uint8_t *v = node_val (n, i, &vlen);

    if (val)
      memcpy (val, v, MIN (vlen, valmax));
    if (vlenp)
      *vlenp = vlen;
  }
  cache_put (t->cache, n);
  return found ? 0 : -ENOENT;
}

/* Split a full node at its byte midpoint into n and a new right node.
 * For an internal node the first key of the right half moves up and the
 * right node's item 0 key becomes empty (BT-2).  Returns the split index.
 */
static int
split_node (struct btree *t, struct node *n, struct split *s, uint32_t *midp)
{
  uint32_t cnt = node_nitems (n), half = n->used / 2, acc = 0, m;
  unsigned level = node_level (n);
  struct node *right;
  size_t klen, vlen;
  const uint8_t *k;
  int r;

  for (m = 0; m < cnt; m++) {
    k = node_key (n, m, &klen);
    node_val (n, m, &vlen);
    acc += item_size (klen, vlen);
    if (acc >= half)
      break;
  }
  m = MAX (m, 1u);
  m = MIN (m, cnt - 1);
  r = new_node (t, level, &right);
  if (r < 0)
    return r;
  k = node_key (n, m, &klen);
  memcpy (s->key, k, klen);
  s->klen = klen;
  node_move_tail (right, n, m, t->cache->node_size);
  if (level > 0) {
    uint8_t bpbuf[BLKPTR_SIZE];
    const uint8_t *v = node_val (right, 0, &vlen);

    memcpy (bpbuf, v, BLKPTR_SIZE);
    node_delete_at (right, 0);
    node_insert_at (right, t->cache->node_size, 0, NULL, 0, bpbuf, BLKPTR_SIZE);
  }
  s->happened = true;
  s->right = right;
  *midp = m;
  return 0;
}

/* Insert into a dirty subtree; a split of n is reported in *s. */
static int
insert_rec (struct btree *t, struct node *n, const uint8_t *key, size_t klen,
            const uint8_t *val, size_t vlen, struct split *s)
{
  uint32_t ns = t->cache->node_size, i, m;
  struct split cs = { .happened = false };
  struct blkptr bp;
  struct node *c;
  bool found;
  int r;

  s->happened = false;
  if (node_level (n) == 0) {
    i = node_search (n, key, klen, &found);
    if (found)
      node_delete_at (n, i);
    if (node_fits (n, ns, klen, vlen)) {
      node_insert_at (n, ns, i, key, klen, val, vlen);
      return 0;
    }
    if (i == node_nitems (n) && i > 0) {
      /* Appending past the last key (sequential writes): leave this node
       * full and start a new one, rather than two half-full nodes.
       */
      r = new_node (t, 0, &s->right);
      if (r < 0)
        return r;
      node_insert_at (s->right, ns, 0, key, klen, val, vlen);
      memcpy (s->key, key, klen);
      s->klen = klen;
      s->happened = true;
      return 0;
    }
    r = split_node (t, n, s, &m);
    if (r < 0)
      return r;
    if (i <= m)
      node_insert_at (n, ns, i, key, klen, val, vlen);
    else
      node_insert_at (s->right, ns, i - m, key, klen, val, vlen);
    return 0;
  }

  i = node_child_index (n, key, klen);
  r = btree_child (t, n, i, &c);
  if (r < 0)
    return r;
  r = cow (t, &c);
  if (r < 0) {
    cache_put (t->cache, c);
    return r;
  }
  dirty_ptr (c, &bp);
  node_set_child (n, i, &bp);
  r = insert_rec (t, c, key, klen, val, vlen, &cs);
  cache_put (t->cache, c);
  if (r < 0 || !cs.happened)
    return r;

  /* The child split: add a pointer to its new right sibling. */
  {
    uint8_t enc[BLKPTR_SIZE];
    uint32_t pos = i + 1;

    dirty_ptr (cs.right, &bp);
    cache_put (t->cache, cs.right);
    blkptr_encode (&bp, enc);
    if (node_fits (n, ns, cs.klen, BLKPTR_SIZE)) {
      node_insert_at (n, ns, pos, cs.key, cs.klen, enc, BLKPTR_SIZE);
      return 0;
    }
    if (pos == node_nitems (n)) {
      /* Appending, as above: the new child starts a new node, whose first
       * key moves up.
       */
      r = new_node (t, node_level (n), &s->right);
      if (r < 0)
        return r;
      node_insert_at (s->right, ns, 0, NULL, 0, enc, BLKPTR_SIZE);
      memcpy (s->key, cs.key, cs.klen);
      s->klen = cs.klen;
      s->happened = true;
      return 0;
    }
    r = split_node (t, n, s, &m);
    if (r < 0)
      return r;
    if (pos <= m)
      node_insert_at (n, ns, pos, cs.key, cs.klen, enc, BLKPTR_SIZE);
    else
      node_insert_at (s->right, ns, pos - m, cs.key, cs.klen, enc, BLKPTR_SIZE);
  }
  return 0;
}

/* Check that a key and value can be stored. */
static int
check_sizes (struct btree *t, size_t klen, size_t vlen)
{
  if (klen > BTREE_MAX_KEY || vlen > btree_max_value (t->cache, klen))
    return cairn_fail (-E2BIG, "item too large for the tree: key %zu bytes, "
                       "value %zu bytes (at most %zu with this key)", klen,
                       vlen, btree_max_value (t->cache, klen));
  return 0;
}

/* Insert or replace an item. */
int
btree_insert (struct btree *t, const void *key, size_t klen, const void *val,
              size_t vlen, unsigned flags)
{
  struct split s = { .happened = false };
  struct blkptr bp;
  struct node *root;
  int r;

  r = check_sizes (t, klen, vlen);
  if (r < 0)
    return r;
  if (flags & BTREE_NOOVERWRITE) {
    r = btree_lookup (t, key, klen, NULL, 0, NULL);
    if (r == 0)
      return cairn_fail (-EEXIST, "the key exists already in tree %" PRIu64, t->id);
    if (r != -ENOENT)
      return r;
  }
  r = change_begins (t);
  if (r == 0)
    r = resv_fill (t, resv_need (t), flags & BTREE_RESERVE ? SPACE_RESERVE : 0);
  if (r < 0)
    return r;

  if (t->root.bp.addr == 0) {
    r = new_node (t, 0, &root);
    if (r < 0)
      return r;
    node_insert_at (root, t->cache->node_size, 0, key, klen, val, vlen);
  }
  else {
    r = cache_get (t->cache, &t->root.bp, &root);
    if (r < 0)
      return r;
    r = cow (t, &root);
    if (r == 0)
      r = insert_rec (t, root, key, klen, val, vlen, &s);
    if (r < 0) {
      cache_put (t->cache, root);
      return r;
    }
  }
  t->dirty = true;
  if (s.happened) {
    /* The root split: grow the tree by one level. */
    struct node *nr;
    uint8_t enc[BLKPTR_SIZE];

    r = new_node (t, node_level (root) + 1, &nr);
    assert (r == 0);
    dirty_ptr (root, &bp);
    blkptr_encode (&bp, enc);
    node_insert_at (nr, t->cache->node_size, 0, NULL, 0, enc, BLKPTR_SIZE);
    dirty_ptr (s.right, &bp);
    blkptr_encode (&bp, enc);
    node_insert_at (nr, t->cache->node_size, 1, s.key, s.klen, enc, BLKPTR_SIZE);
    cache_put (t->cache, s.right);
    cache_put (t->cache, root);
    root = nr;
  }
  dirty_ptr (root, &t->root.bp);
  t->root.level = (uint8_t) node_level (root);
  cache_put (t->cache, root);
  return 0;
}

/* Append copies of src's items [from, end) to dst (src is not changed). */
static void
append_items (struct node *dst, const struct node *src, uint32_t from,
              uint32_t node_size)
{
  for (uint32_t i = from; i < node_nitems (src); i++) {
    size_t klen, vlen;
    const uint8_t *k = node_key (src, i, &klen);
    const uint8_t *v = node_val (src, i, &vlen);

    node_insert_at (dst, node_size, node_nitems (dst), k, klen, v, vlen);
  }
}

/* Merge child i of parent (dirty, underfull) with a sibling when the two fit
 * in one node; otherwise leave it.
 */
static int
merge_child (struct btree *t, struct node *parent, uint32_t i, struct node *child)
{
  uint32_t ns = t->cache->node_size, n = node_nitems (parent), j;
  struct node *left, *right, *sib;
  size_t seplen, vlen;
  const uint8_t *sep;
  uint32_t need;
  int r;

  if (n < 2)
    return 0;
  j = i > 0 ? i - 1 : 0;            /* merge children j and j + 1 */
  r = btree_child (t, parent, i > 0 ? j : 1, &sib);
  if (r < 0)
    return r;
  left = i > 0 ? sib : child;
  right = i > 0 ? child : sib;
  sep = node_key (parent, j + 1, &seplen);
  need = left->used + right->used;
  if (node_level (child) > 0)
    need += (uint32_t) seplen;        /* right's item 0 takes the separator */
  if (need > node_capacity (ns)) {
    cache_put (t->cache, sib);
    return 0;
  }
  if (left == sib) {
    struct blkptr bp;

    r = cow (t, &sib);
    if (r < 0) {
      cache_put (t->cache, sib);
      return r;
    }
    left = sib;
    dirty_ptr (left, &bp);
    node_set_child (parent, j, &bp);
  }
  if (node_level (child) > 0) {
    const uint8_t *v = node_val (right, 0, &vlen);
    node_insert_at (left, ns, node_nitems (left), sep, seplen, v, vlen);
    append_items (left, right, 1, ns);
  }
  else
    append_items (left, right, 0, ns);
  drop_node (t, right);
  node_delete_at (parent, j + 1);
  cache_put (t->cache, sib);
  return 0;
}

/* Copy child i of a dirty parent, and below it the first (or, with last,
 * the last) child of each level down to a leaf, into the open generation
 * (BT-7).
 */
static int
cow_edge (struct btree *t, struct node *parent, uint32_t i, bool last)
{
  struct node *n = parent, *c;
  struct blkptr bp;
  int r;

  for (;;) {
    r = btree_child (t, n, i, &c);
    if (r == 0) {
      r = cow (t, &c);
      if (r < 0)
        cache_put (t->cache, c);
    }
    if (r < 0)
      break;
    dirty_ptr (c, &bp);
    node_set_child (n, i, &bp);
    if (n != parent)
      cache_put (t->cache, n);
    n = c;
    if (node_level (n) == 0)
      break;
    i = last ? node_nitems (n) - 1 : 0;
  }
  if (n != parent)
    cache_put (t->cache, n);
  return r;
}

/* Take an emptied child out of its parent (BT-5).  merge_child cannot
 * always do it: a lone child has no sibling, and sequential inserts leave
 * a new internal node with one child beside a full one, too full to merge
 * with.  Item 0 keeps its empty key (BT-2): when child 0 goes, child 1's
 * pointer moves into item 0.  The sibling whose key range grows over the
 * child's, the left one (or for child 0 the right one), is copied along
 * the edge that grows (BT-7).  The parent may be left empty in turn; its
 * own parent, or btree_delete for the root, takes it out.
 */
static int
remove_child (struct btree *t, struct node *parent, uint32_t i,
              struct node *child)
{
  bool first = i == 0;

  if (i == 0 && node_nitems (parent) > 1) {
    struct blkptr bp;

    node_get_child (parent, 1, &bp);
    node_set_child (parent, 0, &bp);
    i = 1;
  }
  node_delete_at (parent, i);
  drop_node (t, child);
  if (node_nitems (parent) == 0)
    return 0;
  return first ? cow_edge (t, parent, 0, false)
               : cow_edge (t, parent, i - 1, true);
}

/* Delete from a dirty subtree. */
static int
delete_rec (struct btree *t, struct node *n, const uint8_t *key, size_t klen)
{
  struct blkptr bp;
  struct node *c;
  bool found;
  uint32_t i;
  int r;

  if (node_level (n) == 0) {
    i = node_search (n, key, klen, &found);
    if (!found)
      return cairn_fail (-ENOENT, "key not found in tree %" PRIu64, t->id);
    node_delete_at (n, i);
    return 0;
  }
  i = node_child_index (n, key, klen);
  r = btree_child (t, n, i, &c);
  if (r < 0)
    return r;
  r = cow (t, &c);
  if (r == 0) {
    dirty_ptr (c, &bp);
    node_set_child (n, i, &bp);
    r = delete_rec (t, c, key, klen);
  }
  if (r == 0 && node_nitems (c) == 0)
    r = remove_child (t, n, i, c);
  else if (r == 0 && c->used < node_capacity (t->cache->node_size) / 4)
    r = merge_child (t, n, i, c);
  cache_put (t->cache, c);
  return r;
}

/* Delete an item. */
int
btree_delete (struct btree *t, const void *key, size_t klen)
{
  struct blkptr rootbp;
  struct node *root;
  int r;

  r = btree_lookup (t, key, klen, NULL, 0, NULL);
  if (r < 0)
    return r == -ENOENT
      ? cairn_fail (-ENOENT, "key not found in tree %" PRIu64, t->id) : r;
  /* Deletes may use the reserve, so that space can always be freed. */
  r = change_begins (t);
  if (r == 0)
    r = resv_fill (t, resv_need (t), SPACE_RESERVE);
  if (r < 0)
    return r;
  r = cache_get (t->cache, &t->root.bp, &root);
  if (r < 0)
    return r;
  r = cow (t, &root);
  if (r == 0)
    r = delete_rec (t, root, key, klen);
  if (r < 0) {
    cache_put (t->cache, root);
    return r;
  }
  t->dirty = true;
  dirty_ptr (root, &rootbp);
  /* Shrink: an internal root with one child is replaced by it (BT-5). */
  while (node_level (root) > 0 && node_nitems (root) == 1) {
    struct node *c;

    r = btree_child (t, root, 0, &c);
    if (r < 0) {
      cache_put (t->cache, root);
      return r;
    }
    node_get_child (root, 0, &rootbp);
    drop_node (t, root);
    cache_put (t->cache, root);
    root = c;
  }
  if (node_nitems (root) == 0) {
    drop_node (t, root);
    cache_put (t->cache, root);
    memset (&t->root, 0, sizeof t->root);
    return 0;
  }
  t->root.bp = rootbp;
  t->root.level = (uint8_t) node_level (root);
  cache_put (t->cache, root);
  return 0;
}
