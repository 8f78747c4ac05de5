/* Cairn engine: freezing a B-tree's dirty nodes for a commit and writing
 * them (the node half of the commit in txn.c).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "btree-int.h"

/* Add a node to a batch (the batch takes over the caller's pin). */
static int
batch_add (struct nodebatch *b, struct node *n)
{
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 64;
    struct node **nn = realloc (b->nodes, cap * sizeof *nn);

    if (nn == NULL)
      return cairn_fail (-ENOMEM, "out of memory freezing metadata");
    b->nodes = nn;
    b->cap = cap;
  }
  b->nodes[b->n++] = n;
  return 0;
}

/* Freeze a dirty node and its dirty descendants (BT-4): compute checksums
 * bottom-up into the parent pointers.
 */
static int
freeze_node (struct nodecache *c, struct node *n, struct nodebatch *b,
             uint8_t sha[SHA256_LEN])
{
  uint64_t gen = n->gen;
  int r;

  if (node_level (n) > 0) {
    for (uint32_t i = 0; i < node_nitems (n); i++) {
      struct blkptr bp;
      struct node *child;

      node_get_child (n, i, &bp);
      if (bp.birth != gen)
        continue;
      child = cache_find (c, bp.addr);
      if (child && !child->dirty && child->gen == gen) {
        /* Frozen by this commit's first pass already (a freeze hook changed
         * the tree again, copying its parent): its checksum is in bp.
         */
        cache_put (c, child);
        continue;
      }
      if (child == NULL || !child->dirty || child->gen != gen) {
        if (child)
          cache_put (c, child);
        return cairn_fail (-EIO, "internal error: dirty node at byte %" PRIu64
                           " missing from the cache at commit", bp.addr);
      }
      r = freeze_node (c, child, b, bp.sha);
      cache_put (c, child);
      if (r < 0)
        return r;
      node_set_child (n, i, &bp);
    }
  }
  sha256 (n->buf, c->node_size, sha);
  cache_mark_clean (c, n);
  cache_pin (c, n);
  return batch_add (b, n);
}

/* Freeze a tree for the commit of the open generation. */
int
btree_freeze (struct btree *t, struct nodebatch *b, struct btree_root *root)
{
  struct nodecache *c = t->cache;
  int r = 0;

  if (t->dirty && t->root.bp.addr && t->root.bp.birth == nodecache_gen (c)) {
    struct node *n = cache_find (c, t->root.bp.addr);

    if (n == NULL || !n->dirty) {
      if (n)
        cache_put (c, n);
      r = cairn_fail (-EIO, "internal error: dirty root of tree %" PRIu64
                      " missing from the cache at commit", t->id);
    }
    else {
      r = freeze_node (c, n, b, t->root.bp.sha);
      cache_put (c, n);
    }
  }
  if (r == 0)
    t->dirty = false;
  btree_release_reserve (t);
  *root = t->root;
  return r;
}

/* Order nodes by address. */
static int
cmp_addr (const void *a, const void *b)
{
  const struct node *x = *(struct node * const *) a;
  const struct node *y = *(struct node * const *) b;

  return (x->addr > y->addr) - (x->addr < y->addr);
}

/* Unpin every node of a batch and empty it. */
void
nodebatch_release (struct nodecache *c, struct nodebatch *b)
{
  for (size_t i = 0; i < b->n; i++)
    cache_put (c, b->nodes[i]);
  free (b->nodes);
  b->nodes = NULL;
  b->n = b->cap = 0;
}

/* Write a batch: adjacent nodes go out in one write of up to 1 MiB. */
int
nodebatch_write (struct nodecache *c, struct nodebatch *b)
{
  const size_t max_run = 1024 * 1024;
  uint32_t ns = c->node_size;
  uint8_t *stage = NULL;
  size_t i = 0;
  int r = 0;

  if (b->n > 1)
    qsort (b->nodes, b->n, sizeof *b->nodes, cmp_addr);
  if (b->n > 1) {
    stage = malloc (max_run);
    if (stage == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory writing metadata");
      goto out;
    }
  }
  while (i < b->n) {
    size_t j = i + 1;

    while (j < b->n && stage && (j - i + 1) * ns <= max_run &&
           b->nodes[j]->addr == b->nodes[j - 1]->addr + ns)
      j++;
    if (j - i == 1)
      r = dev_pwrite (c->dev, b->nodes[i]->buf, ns, b->nodes[i]->addr);
    else {
      for (size_t k = i; k < j; k++)
        memcpy (stage + (k - i) * ns, b->nodes[k]->buf, ns);
      r = dev_pwrite (c->dev, stage, (j - i) * ns, b->nodes[i]->addr);
    }
    if (r < 0)
      goto out;
    i = j;
  }
 out:
  free (stage);
  nodebatch_release (c, b);
  return r;
}
