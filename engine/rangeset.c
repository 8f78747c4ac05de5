/* Cairn engine, layer "space": sets of block ranges (see rangeset.h).
 *
 * An AVL tree of ranges keyed by start.  Each node also stores its height
 * and the longest range in its subtree (maxlen); every function that
 * changes the tree recomputes both on the way back up, so the search for
 * "first run of n blocks at or after hint" can skip any subtree whose
 * maxlen is below n.
 *
 * Invariants (checked by rangeset_check):
 *  1. In-order, ranges are sorted by start and separated by a gap of at
 *     least one block (disjoint and coalesced); every len >= 1 and no range
 *     wraps past UINT64_MAX.
 *  2. Every node's height is 1 + the larger child height, and the two child
 *     heights differ by at most one.
 *  3. Every node's maxlen is the largest len in its subtree.
 *  4. count and total are the number of ranges and the sum of their lens.
 *
 * Changing a node's start or len in place (coalescing or trimming) keeps
 * the tree order because of invariant 1, so only the maxima on the path to
 * the node need fixing (retarget).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "rangeset.h"

struct rangeset_node {
  uint64_t start, len;
  uint64_t maxlen; /* longest len in this subtree */
  struct rangeset_node *left, *right;
  int height; /* a leaf has height 1 */
};

/* Memory of the nodes (rangeset.h). */
size_t
rangeset_bytes (const struct rangeset *rs)
{
  return (rs->count + rs->nspare) * sizeof (struct rangeset_node);
}

/* Spare nodes kept after a coalesce frees one (rangeset_reserve may keep
 * more on request).
 */
#define RANGESET_KEEP_SPARE 8

/* Height of a subtree (0 when empty). */
static inline int
node_height (const struct rangeset_node *n)
{
  return n ? n->height : 0;
}

/* Longest range in a subtree (0 when empty). */
static inline uint64_t
node_maxlen (const struct rangeset_node *n)
{
  return n ? n->maxlen : 0;
}

/* One past the last block of a node's range. */
static inline uint64_t
node_end (const struct rangeset_node *n)
{
  return n->start + n->len;
}

/* Is [start, start + len) a valid range (non-empty, not wrapping)? */
static inline bool
range_ok (uint64_t start, uint64_t len)
{
  return len > 0 && start <= UINT64_MAX - len;
}

/* Recompute a node's height and maxlen from its children. */
static void
node_update (struct rangeset_node *n)
{
  n->height = 1 + MAX (node_height (n->left), node_height (n->right));
  n->maxlen = MAX (n->len, MAX (node_maxlen (n->left), node_maxlen (n->right)));
}

/* Rotate right around n; return the new subtree root. */
static struct rangeset_node *
rotate_right (struct rangeset_node *n)
{
  struct rangeset_node *l = n->left;

  n->left = l->right;
  l->right = n;
  node_update (n);
  node_update (l);
  return l;
}

/* Rotate left around n; return the new subtree root. */
static struct rangeset_node *
rotate_left (struct rangeset_node *n)
{
  struct rangeset_node *r = n->right;

  n->right = r->left;
  r->left = n;
  node_update (n);
  node_update (r);
  return r;
}

/* Update n and restore the AVL balance at it; return the subtree root. */
static struct rangeset_node *
rebalance (struct rangeset_node *n)
{
  int bf;

  node_update (n);
  bf = node_height (n->left) - node_height (n->right);
  if (bf > 1) {
    if (node_height (n->left->left) < node_height (n->left->right))
      n->left = rotate_left (n->left);
    return rotate_right (n);
  }
  if (bf < -1) {
    if (node_height (n->right->right) < node_height (n->right->left))
      n->right = rotate_right (n->right);
    return rotate_left (n);
  }
  return n;
}

/* Insert node n (whose range overlaps nothing) into subtree t. */
static struct rangeset_node *
insert_node (struct rangeset_node *t, struct rangeset_node *n)
{
  if (t == NULL)
    return n;
  if (n->start < t->start)
    t->left = insert_node (t->left, n);
  else
    t->right = insert_node (t->right, n);
  return rebalance (t);
}

/* Unlink the leftmost node of non-empty subtree t into *minp. */
static struct rangeset_node *
remove_min (struct rangeset_node *t, struct rangeset_node **minp)
{
  if (t->left == NULL) {
    *minp = t;
    return t->right;
  }
  t->left = remove_min (t->left, minp);
  return rebalance (t);
}

/* Unlink the node whose start is key (it must exist) into *nodep. */
static struct rangeset_node *
remove_key (struct rangeset_node *t, uint64_t key, struct rangeset_node **nodep)
{
  struct rangeset_node *m, *r;

  if (key < t->start)
    t->left = remove_key (t->left, key, nodep);
  else if (key > t->start)
    t->right = remove_key (t->right, key, nodep);
  else {
    *nodep = t;
    if (t->left == NULL)
      return t->right;
    if (t->right == NULL)
      return t->left;
    r = remove_min (t->right, &m);
    m->left = t->left;
    m->right = r;
    return rebalance (m);
  }
  return rebalance (t);
}

/* Give the node whose start is key (it must exist) a new range that keeps
 * the tree order, and fix the maxima on the path to it.
 */
static void
retarget (struct rangeset_node *t, uint64_t key, uint64_t start, uint64_t len)
{
  if (key < t->start)
    retarget (t->left, key, start, len);
  else if (key > t->start)
    retarget (t->right, key, start, len);
  else {
    t->start = start;
    t->len = len;
  }
  node_update (t);
}

/* The last node whose start is <= pos, or NULL. */
static struct rangeset_node *
floor_node (struct rangeset_node *t, uint64_t pos)
{
  struct rangeset_node *best = NULL;

  while (t) {
    if (t->start <= pos) {
      best = t;
      t = t->right;
    } else
      t = t->left;
  }
  return best;
}

/* The first node whose start is >= pos, or NULL. */
static struct rangeset_node *
ceil_node (struct rangeset_node *t, uint64_t pos)
{
  struct rangeset_node *best = NULL;

  while (t) {
    if (t->start >= pos) {
      best = t;
      t = t->left;
    } else
      t = t->right;
  }
  return best;
}

/* Take a node from the spares, else from malloc; NULL when out of memory. */
static struct rangeset_node *
get_node (struct rangeset *rs, uint64_t start, uint64_t len)
{
  struct rangeset_node *n = rs->spare;

  if (n) {
    rs->spare = n->left;
    rs->nspare--;
  } else if ((n = malloc (sizeof *n)) == NULL)
    return NULL;
  n->start = start;
  n->len = len;
  n->maxlen = len;
  n->left = n->right = NULL;
  n->height = 1;
  return n;
}

/* Keep an unlinked node as a spare, or free it if there are enough. */
static void
put_node (struct rangeset *rs, struct rangeset_node *n)
{
  if (rs->nspare >= RANGESET_KEEP_SPARE) {
    free (n);
    return;
  }
  n->left = rs->spare;
  rs->spare = n;
  rs->nspare++;
}

/* Free spares beyond keep. */
static void
trim_spares (struct rangeset *rs, size_t keep)
{
  while (rs->nspare > keep) {
    struct rangeset_node *n = rs->spare;

    rs->spare = n->left;
    rs->nspare--;
    free (n);
  }
}

/* Make an empty set. */
void
rangeset_init (struct rangeset *rs)
{
  rs->root = NULL;
  rs->count = rs->total = 0;
  rs->chunk = rs->chunked = 0;
  rs->spare = NULL;
  rs->nspare = 0;
}

/* What a range of len blocks adds to chunked. */
static uint64_t
pieces (const struct rangeset *rs, uint64_t len)
{
  return rs->chunk ? len / rs->chunk * rs->chunk : 0;
}

/* Sum pieces over subtree t. */
static uint64_t
sum_pieces (const struct rangeset *rs, const struct rangeset_node *t)
{
  return t ? pieces (rs, t->len) + sum_pieces (rs, t->left) +
             sum_pieces (rs, t->right) : 0;
}

void
rangeset_set_chunk (struct rangeset *rs, uint64_t chunk)
{
  rs->chunk = chunk;
  rs->chunked = sum_pieces (rs, rs->root);
}

/* Free a subtree. */
static void
free_tree (struct rangeset_node *t)
{
  while (t) {
    struct rangeset_node *r = t->right;

    free_tree (t->left);
    free (t);
    t = r;
  }
}

/* Free every node and spare; the set is empty again. */
void
rangeset_destroy (struct rangeset *rs)
{
  free_tree (rs->root);
  trim_spares (rs, 0);
  rangeset_init (rs);
}

/* Add a range, coalescing with its neighbours. */
int
rangeset_add (struct rangeset *rs, uint64_t start, uint64_t len)
{
  struct rangeset_node *p, *left, *right, *gone;
  uint64_t end;

  if (!range_ok (start, len))
    return cairn_fail (-EINVAL,
                       "rangeset: bad range start %" PRIu64 " len %" PRIu64,
                       start, len);
  end = start + len;

  /* The only range that could overlap is the last one starting before end.
   * If it does not, no range starts inside [start, end), so it is also the
   * left neighbour.
   */
  p = floor_node (rs->root, end - 1);
  if (p && node_end (p) > start)
    return cairn_fail (-EEXIST,
                       "rangeset: adding [%" PRIu64 ", %" PRIu64
                       ") overlaps [%" PRIu64 ", %" PRIu64 ")",
                       start, end, p->start, node_end (p));

  left = p && node_end (p) == start ? p : NULL;
  right = ceil_node (rs->root, end);
  if (right && right->start != end)
    right = NULL;

  if (left && right) {
    uint64_t newlen = left->len + len + right->len;

    rs->chunked += pieces (rs, newlen) - pieces (rs, left->len) -
                   pieces (rs, right->len);
    rs->root = remove_key (rs->root, right->start, &gone);
    put_node (rs, gone);
    retarget (rs->root, left->start, left->start, newlen);
    rs->count--;
  } else if (left) {
    rs->chunked += pieces (rs, left->len + len) - pieces (rs, left->len);
    retarget (rs->root, left->start, left->start, left->len + len);
  }
  else if (right) {
    rs->chunked += pieces (rs, right->len + len) - pieces (rs, right->len);
    retarget (rs->root, right->start, start, right->len + len);
  }
  else {
    struct rangeset_node *n = get_node (rs, start, len);

    if (n == NULL)
      return cairn_fail (-ENOMEM, "rangeset: out of memory");
    rs->root = insert_node (rs->root, n);
    rs->count++;
    rs->chunked += pieces (rs, len);
  }
  rs->total += len;
  return 0;
}

/* Remove a range that lies inside one stored range. */
int
rangeset_remove (struct rangeset *rs, uint64_t start, uint64_t len)
{
  struct rangeset_node *r, *gone;
  uint64_t end, rstart, rend, dchunk;

  if (!range_ok (start, len))
    return cairn_fail (-EINVAL,
                       "rangeset: bad range start %" PRIu64 " len %" PRIu64,
                       start, len);
  end = start + len;

  r = floor_node (rs->root, start);
  if (r == NULL || node_end (r) < end)
    return cairn_fail (-ENOENT,
                       "rangeset: removing [%" PRIu64 ", %" PRIu64
                       ") which is not wholly in the set",
                       start, end);
  rstart = r->start;
  rend = node_end (r);
  /* Modulo 2^64: the sum is smaller than what it replaces. */
  dchunk = pieces (rs, start - rstart) + pieces (rs, rend - end) -
           pieces (rs, rend - rstart);

  if (rstart == start && rend == end) {
    rs->root = remove_key (rs->root, rstart, &gone);
    put_node (rs, gone);
    rs->count--;
  } else if (rstart == start)
    retarget (rs->root, rstart, end, rend - end);
  else if (rend == end)
    retarget (rs->root, rstart, rstart, start - rstart);
  else {
    struct rangeset_node *n = get_node (rs, end, rend - end);

    if (n == NULL)
      return cairn_fail (-ENOMEM, "rangeset: out of memory");
    retarget (rs->root, rstart, rstart, start - rstart);
    rs->root = insert_node (rs->root, n);
    rs->count++;
  }
  rs->total -= len;
  rs->chunked += dchunk;
  return 0;
}

/* Keep at least n spare nodes. */
int
rangeset_reserve (struct rangeset *rs, size_t n)
{
  while (rs->nspare < n) {
    struct rangeset_node *node = malloc (sizeof *node);

    if (node == NULL)
      return cairn_fail (-ENOMEM, "rangeset: out of memory");
    node->left = rs->spare;
    rs->spare = node;
    rs->nspare++;
  }
  return 0;
}

/* Unlink every node of subtree t onto the front of *listp (via left). */
static void
flatten (struct rangeset_node *t, struct rangeset_node **listp)
{
  while (t) {
    struct rangeset_node *l = t->left;

    flatten (t->right, listp);
    t->left = *listp;
    *listp = t;
    t = l;
  }
}

/* Move every range of src into dst, reusing src's nodes. */
int
rangeset_merge (struct rangeset *dst, struct rangeset *src)
{
  struct rangeset_node *list = NULL;
  size_t keep = MAX (dst->nspare, (size_t)RANGESET_KEEP_SPARE);
  int err = 0;

  flatten (src->root, &list);
  src->root = NULL;
  src->count = src->total = src->chunked = 0;

  while (list) {
    struct rangeset_node *n = list;
    uint64_t start = n->start, len = n->len;
    int r;

    list = n->left;
    /* The node becomes a spare first, so the add cannot run out. */
    n->left = dst->spare;
    dst->spare = n;
    dst->nspare++;
    r = rangeset_add (dst, start, len);
    if (r < 0 && err == 0)
      err = r;
  }
  trim_spares (dst, keep);
  if (err)
    cairn_error ("rangeset: merged sets overlap");
  return err;
}

/* Is the range wholly in the set? */
bool
rangeset_contains (const struct rangeset *rs, uint64_t start, uint64_t len)
{
  const struct rangeset_node *p;

  if (!range_ok (start, len))
    return false;
  p = floor_node (rs->root, start);
  return p && node_end (p) >= start + len;
}

/* Is any block of the range in the set? */
bool
rangeset_overlaps (const struct rangeset *rs, uint64_t start, uint64_t len)
{
  const struct rangeset_node *p;

  if (len == 0)
    return false;
  if (start > UINT64_MAX - len)
    len = UINT64_MAX - start; /* clip: nothing stored reaches past */
  if (len == 0)
    return false;
  p = floor_node (rs->root, start + len - 1);
  return p && node_end (p) > start;
}

/* The leftmost node of subtree t with len >= n, or NULL. */
static const struct rangeset_node *
leftmost_fit (const struct rangeset_node *t, uint64_t n)
{
  while (t && t->maxlen >= n) {
    if (node_maxlen (t->left) >= n)
      t = t->left;
    else if (t->len >= n)
      return t;
    else
      t = t->right;
  }
  return NULL;
}

/* The first node of subtree t with start > hint and len >= n, or NULL.
 *
 * O(height): the walk follows the search path for hint; off it, only the
 * first right subtree whose maxlen is big enough is entered, and that
 * search (leftmost_fit) always succeeds.
 */
static const struct rangeset_node *
first_fit_after (const struct rangeset_node *t, uint64_t hint, uint64_t n)
{
  const struct rangeset_node *f;

  while (t && t->maxlen >= n) {
    if (t->start <= hint) {
      t = t->right;
      continue;
    }
    f = first_fit_after (t->left, hint, n);
    if (f)
      return f;
    if (t->len >= n)
      return t;
    return leftmost_fit (t->right, n);
  }
  return NULL;
}

/* Find the lowest pos >= hint with [pos, pos + n) in the set. */
bool
rangeset_find (const struct rangeset *rs, uint64_t n, uint64_t hint,
               uint64_t *posp)
{
  const struct rangeset_node *p;

  if (n == 0)
    return false;

  /* A range containing hint with n blocks from hint on. */
  p = floor_node (rs->root, hint);
  if (p && node_end (p) > hint && node_end (p) - hint >= n) {
    *posp = hint;
    return true;
  }

  /* Else the first long enough range starting after hint. */
  p = first_fit_after (rs->root, hint, n);
  if (p == NULL)
    return false;
  *posp = p->start;
  return true;
}

/* Find the first range that ends after pos. */
bool
rangeset_next (const struct rangeset *rs, uint64_t pos, uint64_t *startp,
               uint64_t *lenp)
{
  const struct rangeset_node *p = floor_node (rs->root, pos);

  if (p == NULL || node_end (p) <= pos) {
    if (pos == UINT64_MAX)
      return false;
    p = ceil_node (rs->root, pos + 1);
  }
  if (p == NULL)
    return false;
  *startp = p->start;
  *lenp = p->len;
  return true;
}

/* In-order walk of subtree t. */
static int
walk (const struct rangeset_node *t, rangeset_fn fn, void *opaque)
{
  int r;

  while (t) {
    if ((r = walk (t->left, fn, opaque)) != 0)
      return r;
    if ((r = fn (opaque, t->start, t->len)) != 0)
      return r;
    t = t->right;
  }
  return 0;
}

/* Call fn for every range in address order. */
int
rangeset_foreach (const struct rangeset *rs, rangeset_fn fn, void *opaque)
{
  return walk (rs->root, fn, opaque);
}

/* State of an invariant check. */
struct check_state {
  bool have_prev;
  uint64_t prev_end;
  uint64_t count, total, chunked;
  const struct rangeset *rs;
};

/* Check invariants 1-3 in subtree t; its height goes to *heightp. */
static int
check_tree (const struct rangeset_node *t, struct check_state *cs, int *heightp)
{
  int hl, hr, r;
  uint64_t m;

  if (t == NULL) {
    *heightp = 0;
    return 0;
  }
  if ((r = check_tree (t->left, cs, &hl)) != 0)
    return r;

  if (!range_ok (t->start, t->len))
    return cairn_fail (-EUCLEAN,
                       "rangeset: bad range start %" PRIu64 " len %" PRIu64,
                       t->start, t->len);
  if (cs->have_prev && t->start <= cs->prev_end)
    return cairn_fail (
        -EUCLEAN,
        "rangeset: range [%" PRIu64 ", %" PRIu64
        ") overlaps or touches the previous one ending at %" PRIu64,
        t->start, node_end (t), cs->prev_end);
  cs->have_prev = true;
  cs->prev_end = node_end (t);
  cs->count++;
  cs->total += t->len;
  cs->chunked += pieces (cs->rs, t->len);

  if ((r = check_tree (t->right, cs, &hr)) != 0)
    return r;

  if (t->height != 1 + MAX (hl, hr))
    return cairn_fail (-EUCLEAN,
                       "rangeset: node %" PRIu64 " has height %d,"
                       " children %d and %d",
                       t->start, t->height, hl, hr);
  if (hl - hr > 1 || hr - hl > 1)
    return cairn_fail (-EUCLEAN,
                       "rangeset: node %" PRIu64 " unbalanced"
                       " (children %d and %d)",
                       t->start, hl, hr);
  m = MAX (t->len, MAX (node_maxlen (t->left), node_maxlen (t->right)));
  if (t->maxlen != m)
    return cairn_fail (-EUCLEAN,
                       "rangeset: node %" PRIu64 " has maxlen %" PRIu64
                       ", expected %" PRIu64,
                       t->start, t->maxlen, m);
  *heightp = t->height;
  return 0;
}

/* Check every invariant of the set. */
int
rangeset_check (const struct rangeset *rs)
{
  struct check_state cs = { .have_prev = false, .rs = rs };
  int height, r;

  if ((r = check_tree (rs->root, &cs, &height)) != 0)
    return r;
  if (cs.count != rs->count || cs.total != rs->total)
    return cairn_fail (-EUCLEAN,
                       "rangeset: count %" PRIu64 " total %" PRIu64
                       ", but the tree holds %" PRIu64 " ranges of %" PRIu64
                       " blocks",
                       rs->count, rs->total, cs.count, cs.total);
  if (cs.chunked != rs->chunked)
    return cairn_fail (-EUCLEAN,
                       "rangeset: %" PRIu64 " blocks in whole pieces of %"
                       PRIu64 ", but the tree holds %" PRIu64,
                       rs->chunked, rs->chunk, cs.chunked);
  return 0;
}
