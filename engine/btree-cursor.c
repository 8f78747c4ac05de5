/* Cairn engine: ordered iteration over a B-tree, and the validating walk
 * that fsck uses.
 *
 * A cursor keeps the path from the root to its leaf pinned in the cache, so
 * its key and value pointers stay valid until it moves.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "btree-int.h"

struct btree_cursor {
  struct btree *tree;
  int depth;                          /* nodes on the path; 0: not positioned */
  struct node *path[NODE_MAX_LEVEL];
  uint32_t idx[NODE_MAX_LEVEL];
};

/* Make a cursor. */
int
btree_cursor_new (struct btree *tree, struct btree_cursor **curp)
{
  struct btree_cursor *cur = calloc (1, sizeof *cur);

  if (cur == NULL)
    return cairn_fail (-ENOMEM, "out of memory making a cursor");
  cur->tree = tree;
  *curp = cur;
  return 0;
}

/* Unpin the path. */
static void
cursor_reset (struct btree_cursor *cur)
{
  while (cur->depth > 0)
    cache_put (cur->tree->cache, cur->path[--cur->depth]);
}

/* Free a cursor. */
void
btree_cursor_free (struct btree_cursor *cur)
{
  if (cur) {
    cursor_reset (cur);
    free (cur);
  }
}

/* Descend from the node at the top of the path to its leftmost leaf, or
 * its rightmost (last) leaf and item.
 */
static int
descend_edge (struct btree_cursor *cur, bool last)
{
  for (;;) {
    struct node *n = cur->path[cur->depth - 1], *c;
    int r;

    if (node_level (n) == 0)
      return 0;
    r = btree_child (cur->tree, n, cur->idx[cur->depth - 1], &c);
    if (r < 0)
      return r;
    cur->path[cur->depth] = c;
    cur->idx[cur->depth] = last && node_nitems (c) ? node_nitems (c) - 1 : 0;
    cur->depth++;
  }
}

/* Descend to the first or the last item under the path's top: 0 there,
 * 1 when that leaf is empty (move on), or an error (the cursor reset).
 */
static int
descend_to_item (struct btree_cursor *cur, bool last)
{
  int r = descend_edge (cur, last);

  if (r < 0) {
    cursor_reset (cur);
    return r;
  }
  return node_nitems (cur->path[cur->depth - 1]) > 0 ? 0 : 1;
}

/* The leaf is used up: move to the first item of the next leaf. */
static int
advance_leaf (struct btree_cursor *cur)
{
  for (;;) {
    int r;

    while (cur->depth > 0 &&
           cur->idx[cur->depth - 1] + 1 >= node_nitems (cur->path[cur->depth - 1]))
      cache_put (cur->tree->cache, cur->path[--cur->depth]);
    if (cur->depth == 0)
      return -ENOENT;
    if (node_level (cur->path[cur->depth - 1]) == 0) {
      cur->idx[cur->depth - 1]++;
      return 0;
    }
    cur->idx[cur->depth - 1]++;
    r = descend_to_item (cur, false);
    if (r <= 0)
      return r;
  }
}

/* The leaf is used up going backwards: move to the last item of the
 * previous leaf.  -ENOENT when there is none (the cursor is then on an
 * empty leaf or has not moved).
 */
static int
retreat_leaf (struct btree_cursor *cur)
{
  for (;;) {
    int d = cur->depth - 2, r;

    while (d >= 0 && cur->idx[d] == 0)
      d--;
    if (d < 0)
      return -ENOENT;
    while (cur->depth > d + 1)
      cache_put (cur->tree->cache, cur->path[--cur->depth]);
    cur->idx[d]--;
    r = descend_to_item (cur, true);
    if (r <= 0)
      return r;
  }
}

/* Descend to the leaf where key belongs, its index on the first item with
 * key >= key (*foundp: equal to it).  -ENOENT on an empty tree.
 */
static int
descend_to (struct btree_cursor *cur, const void *key, size_t klen,
            bool *foundp)
{
  struct btree *t = cur->tree;
  struct node *n;
  int r;

  cursor_reset (cur);
  *foundp = false;
  if (t->root.bp.addr == 0)
    return -ENOENT;
  r = cache_get (t->cache, &t->root.bp, &n);
  if (r < 0)
    return r;
  cur->path[0] = n;
  cur->depth = 1;
  for (;;) {
    uint32_t i;

    n = cur->path[cur->depth - 1];
    if (node_level (n) == 0) {
      cur->idx[cur->depth - 1] = key ? node_search (n, key, klen, foundp) : 0;
      return 0;
    }
    i = key ? node_child_index (n, key, klen) : 0;
    cur->idx[cur->depth - 1] = i;
    r = btree_child (t, n, i, &cur->path[cur->depth]);
    if (r < 0) {
      cursor_reset (cur);
      return r;
    }
    cur->depth++;
  }
}

/* Position on the first item with key >= key. */
int
btree_cursor_seek (struct btree_cursor *cur, const void *key, size_t klen)
{
  struct node *n;
  uint32_t i;
  bool found;
  int r = descend_to (cur, key, klen, &found);

  if (r < 0)
    return r;
  n = cur->path[cur->depth - 1];
  i = cur->idx[cur->depth - 1];
  if (i < node_nitems (n))
    return 0;
  /* Past the end of this leaf: the answer is in the next one. */
  cur->idx[cur->depth - 1] = i ? i - 1 : 0;
  if (node_nitems (n) == 0) {
    cursor_reset (cur);
    return -ENOENT;
  }
  return advance_leaf (cur);
}

/* Position on the last item with key <= key, else the first item. */
int
btree_cursor_seek_le (struct btree_cursor *cur, const void *key, size_t klen)
{
  bool found;
  int r = descend_to (cur, key, klen, &found);

  if (r < 0 || found)
    return r;
  if (cur->idx[cur->depth - 1] > 0) {
    cur->idx[cur->depth - 1]--;
    return 0;
  }
  r = retreat_leaf (cur);
  /* Every key is greater (or the leaves before are empty). */
  return r == -ENOENT ? btree_cursor_seek (cur, NULL, 0) : r;
}

/* Move to the next item. */
int
btree_cursor_next (struct btree_cursor *cur)
{
  struct node *leaf;

  if (cur->depth == 0)
    return -ENOENT;
  leaf = cur->path[cur->depth - 1];
  if (cur->idx[cur->depth - 1] + 1 < node_nitems (leaf)) {
    cur->idx[cur->depth - 1]++;
    return 0;
  }
  return advance_leaf (cur);
}

/* The current item. */
void
btree_cursor_item (struct btree_cursor *cur, const uint8_t **keyp,
                   size_t *klenp, const uint8_t **valp, size_t *vlenp)
{
  struct node *leaf = cur->path[cur->depth - 1];
  uint32_t i = cur->idx[cur->depth - 1];

  *keyp = node_key (leaf, i, klenp);
  *valp = node_val (leaf, i, vlenp);
}

/* ---------------------------------------------------------------- walk */

/* Bounds of a subtree's keys: lo <= k < hi; NULL means unbounded. */
struct bounds {
  const uint8_t *lo, *hi;
  size_t lolen, hilen;
};

/* Report a structural error found by the walk. */
static int CAIRN_PRINTF (2, 3)
walk_error (const struct blkptr *bp, const char *fmt, ...)
{
  char what[256];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (what, sizeof what, fmt, ap);
  va_end (ap);
  return cairn_fail (-EIO, "corrupt metadata node at byte %" PRIu64
                     " (block %" PRIu64 "): %s", bp->addr,
                     bp->addr >> BLOCK_SHIFT, what);
}

/* Validate and visit one subtree. */
static int
walk_rec (struct nodecache *c, const struct blkptr *bp, int level,
          uint64_t parent_birth, const struct bounds *b,
          const struct btree_visitor *v)
{
  struct node *n;
  uint32_t cnt;
  int r;

  if (bp->birth > parent_birth)
    return walk_error (bp, "born in generation %" PRIu64 ", after its parent "
                       "(%" PRIu64 ")", bp->birth, parent_birth);
  r = cache_get (c, bp, &n);
  if (r < 0)
    return r;
  if (level >= 0 && (int) node_level (n) != level) {
    r = walk_error (bp, "level %u where %d was expected", node_level (n), level);
    goto out;
  }
  if (v->on_node) {
    r = v->on_node (v->opaque, bp, node_level (n));
    if (r != 0) {
      r = r > 0 ? 0 : r;
      goto out;
    }
  }
  cnt = node_nitems (n);
  if (cnt == 0 && level >= 0) {
    r = walk_error (bp, "empty node below the root");
    goto out;
  }
  for (uint32_t i = 0; i < cnt; i++) {
    size_t klen, vlen;
    const uint8_t *k = node_key (n, i, &klen);
    const uint8_t *val = node_val (n, i, &vlen);
    bool has_key = node_level (n) == 0 || i > 0;

    if (has_key && b->lo && key_cmp (k, klen, b->lo, b->lolen) < 0) {
      r = walk_error (bp, "item %" PRIu32 " is below the node's key range", i);
      goto out;
    }
    if (has_key && b->hi && key_cmp (k, klen, b->hi, b->hilen) >= 0) {
      r = walk_error (bp, "item %" PRIu32 " is above the node's key range", i);
      goto out;
    }
    if (node_level (n) == 0) {
      if (v->on_item) {
        r = v->on_item (v->opaque, k, klen, val, vlen);
        if (r < 0)
          goto out;
      }
    }
    else {
      struct blkptr cbp;
      struct bounds cb = *b;

      blkptr_decode (val, &cbp);
      if (i > 0) {
        cb.lo = k;
        cb.lolen = klen;
      }
      if (i + 1 < cnt)
        cb.hi = node_key (n, i + 1, &cb.hilen);
      r = walk_rec (c, &cbp, (int) node_level (n) - 1, bp->birth, &cb, v);
      if (r < 0)
        goto out;
    }
  }
  r = 0;
 out:
  cache_put (c, n);
  return r;
}

/* Visit every node and item of a tree, validating everything. */
int
btree_walk (struct nodecache *cache, const struct btree_root *root,
            const struct btree_visitor *v)
{
  struct bounds b = { NULL, NULL, 0, 0 };

  if (root->bp.addr == 0)
    return 0;
  return walk_rec (cache, &root->bp, root->level, root->bp.birth, &b, v);
}

/* State of btree_walk_since. */
struct since_walk {
  struct nodecache *cache;
  uint64_t since;
  int (*on_leaf) (void *, const uint8_t *, size_t, const uint8_t *, size_t,
                  const struct btree_leaf *);
  void *opaque;
};

/* A leaf handed to btree_walk_since's callback is a node. */
uint32_t
btree_leaf_nitems (const struct btree_leaf *leaf)
{
  return node_nitems ((const struct node *) leaf);
}

void
btree_leaf_item (const struct btree_leaf *leaf, uint32_t i,
                 const uint8_t **keyp, size_t *klenp, const uint8_t **valp,
                 size_t *vlenp)
{
  const struct node *n = (const struct node *) leaf;

  *keyp = node_key (n, i, klenp);
  *valp = node_val (n, i, vlenp);
}

/* Visit the changed leaves below bp, whose keys lie in b. */
static int
since_rec (struct since_walk *w, const struct blkptr *bp, const struct bounds *b)
{
  struct node *n;
  uint32_t cnt;
  int r = 0;

  if (bp->birth <= w->since)
    return 0;
  r = cache_get (w->cache, bp, &n);
  if (r < 0)
    return r;
  if (node_level (n) == 0) {
    r = w->on_leaf (w->opaque, b->lo, b->lolen, b->hi, b->hilen,
                    (const struct btree_leaf *) n);
    cache_put (w->cache, n);
    return r;
  }
  cnt = node_nitems (n);
  for (uint32_t i = 0; i < cnt && r == 0; i++) {
    struct blkptr cbp;
    struct bounds cb = *b;
    size_t vlen;

    blkptr_decode (node_val (n, i, &vlen), &cbp);
    if (i > 0)
      cb.lo = node_key (n, i, &cb.lolen);
    if (i + 1 < cnt)
      cb.hi = node_key (n, i + 1, &cb.hilen);
    r = since_rec (w, &cbp, &cb);
  }
  cache_put (w->cache, n);
  return r;
}

/* Visit the leaves changed after since. */
int
btree_walk_since (struct nodecache *cache, const struct btree_root *root,
                  uint64_t since,
                  int (*on_leaf) (void *opaque, const uint8_t *lo, size_t lolen,
                                  const uint8_t *hi, size_t hilen,
                                  const struct btree_leaf *leaf),
                  void *opaque)
{
  struct since_walk w = { cache, since, on_leaf, opaque };
  struct bounds b = { NULL, NULL, 0, 0 };

  if (root->bp.addr == 0)
    return 0;
  return since_rec (&w, &root->bp, &b);
}

/* State of btree_reap. */
struct reap {
  struct nodecache *cache;
  uint64_t since;
  const uint8_t *from;        /* the point reached by earlier steps */
  size_t fromlen;
  size_t budget, visits;
  const struct btree_visitor *v;
  uint8_t *next;
  size_t *nextlen;
};

/* Reap the part of the subtree at bp (keys in b) at or after the point.
 * Returns 0 when the subtree is finished (and bp was handed out), 1 when
 * the step stopped inside it (*next set), or an error.
 */
static int
reap_rec (struct reap *w, const struct blkptr *bp, int level,
          const struct bounds *b)
{
  struct node *n;
  uint32_t cnt;
  int r;

  w->visits++;
  if (bp->birth <= w->since)
    return 0;                 /* not the tree's own: pass over it unread */
  r = cache_get (w->cache, bp, &n);
  if (r < 0)
    return r;
  if (level >= 0 && (int) node_level (n) != level) {
    r = walk_error (bp, "level %u where %d was expected", node_level (n), level);
    goto out;
  }
  cnt = node_nitems (n);
  for (uint32_t i = 0; i < cnt; i++) {
    size_t klen, vlen;
    const uint8_t *k = node_key (n, i, &klen);
    const uint8_t *val = node_val (n, i, &vlen);
    struct blkptr cbp;
    struct bounds cb = *b;

    if (node_level (n) == 0) {
      if (w->from && key_cmp (k, klen, w->from, w->fromlen) < 0)
        continue;
      w->visits++;
      if (w->v->on_item && (r = w->v->on_item (w->v->opaque, k, klen, val,
                                                 vlen)) < 0)
        goto out;
      continue;
    }
    if (i > 0) {
      cb.lo = k;
      cb.lolen = klen;
    }
    if (i + 1 < cnt)
      cb.hi = node_key (n, i + 1, &cb.hilen);
    if (w->from && cb.hi && key_cmp (cb.hi, cb.hilen, w->from, w->fromlen) <= 0)
      continue;               /* reaped by an earlier step */
    blkptr_decode (val, &cbp);
    r = reap_rec (w, &cbp, (int) node_level (n) - 1, &cb);
    if (r != 0)
      goto out;
    /* Stop between two children, never after the last: a node whose
     * children are all done is handed out before the step ends, so the
     * point never passes a node that was not.
     */
    if (w->visits >= w->budget && i + 1 < cnt) {
      memcpy (w->next, cb.hi, cb.hilen);
      *w->nextlen = cb.hilen;
      r = 1;
      goto out;
    }
  }
  r = w->v->on_node ? w->v->on_node (w->v->opaque, bp, node_level (n)) : 0;
  if (r > 0)
    r = 0;
 out:
  cache_put (w->cache, n);
  return r;
}

/* Take a tree apart one bounded step at a time (see btree.h). */
int
btree_reap (struct nodecache *cache, const struct btree_root *root,
            uint64_t since, const uint8_t *from, size_t fromlen,
            size_t budget, const struct btree_visitor *v, uint8_t *next,
            size_t *nextlen, bool *done)
{
  struct bounds b = { NULL, NULL, 0, 0 };
  struct reap w = {
    cache, since, from, fromlen, budget, 0, v, next, nextlen
  };
  int r;

  *done = false;
  if (root->bp.addr == 0) {
    *done = true;
    return 0;
  }
  r = reap_rec (&w, &root->bp, root->level, &b);
  if (r == 0)
    *done = true;
  return r < 0 ? r : 0;
}
