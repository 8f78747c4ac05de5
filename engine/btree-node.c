/* Cairn engine: the B-tree node format (layout in btree-int.h).
 *
 * Nodes are slotted pages edited in place: a slot array grows up from the
 * header, item bodies grow down from the end, and deleted bodies are
 * reclaimed by compacting when an insert needs the room.  node_validate is
 * the only door from disk into memory: it checks every field and every
 * offset, so the rest of the module can trust a node it holds.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "btree-int.h"

/* Slot offset of item i. */
static inline uint32_t
slot_get (const struct node *n, uint32_t i)
{
  return get_le32 (n->buf + NODE_HDR + NODE_SLOT * i);
}

static inline void
slot_set (struct node *n, uint32_t i, uint32_t off)
{
  put_le32 (n->buf + NODE_HDR + NODE_SLOT * i, off);
}

static inline uint32_t
data_start (const struct node *n)
{
  return get_le32 (n->buf + 12);
}

static inline void
set_nitems (struct node *n, uint32_t v)
{
  put_le32 (n->buf + 8, v);
}

static inline void
set_data_start (struct node *n, uint32_t v)
{
  put_le32 (n->buf + 12, v);
}

/* Encode a block pointer (48 bytes). */
void
blkptr_encode (const struct blkptr *bp, uint8_t *p)
{
  put_le64 (p, bp->addr);
  put_le64 (p + 8, bp->birth);
  memcpy (p + 16, bp->sha, SHA256_LEN);
}

/* Decode a block pointer. */
void
blkptr_decode (const uint8_t *p, struct blkptr *bp)
{
  bp->addr = get_le64 (p);
  bp->birth = get_le64 (p + 8);
  memcpy (bp->sha, p + 16, SHA256_LEN);
}

/* Write an empty node's header. */
void
node_init (struct node *n, uint32_t node_size, unsigned level, uint64_t addr,
           uint64_t gen, uint64_t owner, const uint8_t uuid[16])
{
  memset (n->buf, 0, NODE_HDR);
  put_le32 (n->buf, NODE_MAGIC);
  n->buf[4] = (uint8_t) level;
  set_nitems (n, 0);
  set_data_start (n, node_size);
  memcpy (n->buf + 40, uuid, 16);
  node_set_identity (n, addr, gen, owner);
  n->used = 0;
}

/* Set the header fields that change when a node is copied. */
void
node_set_identity (struct node *n, uint64_t addr, uint64_t gen, uint64_t owner)
{
  n->addr = addr;
  n->gen = gen;
  node_stamp_identity (n, owner);
}

/* Write the node's address and generation, and owner, into its header
 * (a copy made by cow carries its source's).  n->addr and n->gen are left
 * alone: the node is in the cache's hash table already, and other threads
 * read them there under the cache lock.
 */
void
node_stamp_identity (struct node *n, uint64_t owner)
{
  put_le64 (n->buf + 16, n->addr);
  put_le64 (n->buf + 24, n->gen);
  put_le64 (n->buf + 32, owner);
}

/* Compare keys: memcmp order, a proper prefix first. */
int
key_cmp (const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
  size_t m = alen < blen ? alen : blen;
  int r = m ? memcmp (a, b, m) : 0;

  if (r)
    return r;
  return (alen > blen) - (alen < blen);
}

/* Report a validation failure naming the node and the check. */
static int CAIRN_PRINTF (2, 3)
corrupt (const struct blkptr *bp, const char *fmt, ...)
{
  char what[512];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (what, sizeof what, fmt, ap);
  va_end (ap);
  cairn_error ("corrupt metadata node at byte %" PRIu64 " (block %" PRIu64
               ", birth %" PRIu64 "): %s", bp->addr, bp->addr >> BLOCK_SHIFT,
               bp->birth, what);
  return -EIO;
}

/* Check every field of a node image; *usedp gets its used byte count. */
int
node_validate (const uint8_t *buf, uint32_t node_size, const struct blkptr *bp,
               const uint8_t uuid[16], uint32_t *usedp)
{
  uint32_t magic = get_le32 (buf), n = get_le32 (buf + 8);
  uint32_t ds = get_le32 (buf + 12), level = buf[4];
  uint32_t slots_end, used;
  const uint8_t *pk = NULL;
  size_t pklen = 0;

  if (magic != NODE_MAGIC)
    return corrupt (bp, "bad magic 0x%08x", magic);
  if (get_le64 (buf + 16) != bp->addr)
    return corrupt (bp, "node says it lives at byte %" PRIu64
                    " (misdirected write)", get_le64 (buf + 16));
  if (get_le64 (buf + 24) != bp->birth)
    return corrupt (bp, "node generation %" PRIu64 " differs from its pointer's",
                    get_le64 (buf + 24));
  if (memcmp (buf + 40, uuid, 16) != 0)
    return corrupt (bp, "node belongs to another pool (UUID differs)");
  if (level >= NODE_MAX_LEVEL)
    return corrupt (bp, "level %u too high", level);
  if (buf[5] || buf[6] || buf[7] || get_le64 (buf + 56))
    return corrupt (bp, "reserved header bytes are not zero");
  if (n > node_capacity (node_size) / (NODE_SLOT + ITEM_HDR))
    return corrupt (bp, "%" PRIu32 " items cannot fit", n);
  slots_end = NODE_HDR + NODE_SLOT * n;
  if (ds < slots_end || ds > node_size)
    return corrupt (bp, "data start %" PRIu32 " out of range", ds);
  if (level > 0 && n == 0)
    return corrupt (bp, "internal node with no children");

  used = NODE_SLOT * n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t off = get_le32 (buf + NODE_HDR + NODE_SLOT * i);
    uint32_t klen, vlen;
    const uint8_t *k;

    if (off < ds || off > node_size - ITEM_HDR)
      return corrupt (bp, "item %" PRIu32 " offset %" PRIu32 " out of range", i, off);
    klen = get_le16 (buf + off);
    vlen = get_le16 (buf + off + 2);
    if ((uint64_t) off + ITEM_HDR + klen + vlen > node_size)
      return corrupt (bp, "item %" PRIu32 " runs past the node end", i);
    if (klen > BTREE_MAX_KEY)
      return corrupt (bp, "item %" PRIu32 " key length %" PRIu32 " too long", i, klen);
    if (level > 0 && vlen != BLKPTR_SIZE)
      return corrupt (bp, "child %" PRIu32 " pointer has length %" PRIu32, i, vlen);
    if (level > 0 && i == 0 && klen != 0)
      return corrupt (bp, "first child of an internal node has a key");
    k = buf + off + ITEM_HDR;
    if (i > 0 && key_cmp (pk, pklen, k, klen) >= 0)
      return corrupt (bp, "keys out of order at item %" PRIu32, i);
    pk = k;
    pklen = klen;
    used += ITEM_HDR + klen + vlen;
  }
  if (used > node_size - NODE_HDR || used - NODE_SLOT * n > node_size - ds)
    return corrupt (bp, "item bodies overlap");
  *usedp = used;
  return 0;
}

/* Key of item i. */
const uint8_t *
node_key (const struct node *n, uint32_t i, size_t *klenp)
{
  uint32_t off = slot_get (n, i);

  *klenp = get_le16 (n->buf + off);
  return n->buf + off + ITEM_HDR;
}

/* Value of item i. */
const uint8_t *
node_val (const struct node *n, uint32_t i, size_t *vlenp)
{
  uint32_t off = slot_get (n, i);
  size_t klen = get_le16 (n->buf + off);

  *vlenp = get_le16 (n->buf + off + 2);
  return n->buf + off + ITEM_HDR + klen;
}

/* Binary search for the first item with key >= key. */
uint32_t
node_search (const struct node *n, const uint8_t *key, size_t klen,
             bool *found)
{
  uint32_t lo = 0, hi = node_nitems (n);

  *found = false;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    size_t mlen;
    const uint8_t *mk = node_key (n, mid, &mlen);
    int c = key_cmp (mk, mlen, key, klen);

    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The child of an internal node whose key range holds key. */
uint32_t
node_child_index (const struct node *n, const uint8_t *key, size_t klen)
{
  bool found;
  uint32_t i = node_search (n, key, klen, &found);

  if (found)
    return i;
  return i > 0 ? i - 1 : 0;
}

/* Would an item of this size fit? */
bool
node_fits (const struct node *n, uint32_t node_size, size_t klen, size_t vlen)
{
  return n->used + item_size (klen, vlen) <= node_capacity (node_size);
}

/* Rewrite the item bodies contiguously at the end of the node. */
static void
node_compact (struct node *n, uint32_t node_size)
{
  uint32_t cnt = node_nitems (n), pos = node_size;
  uint8_t *tmp = malloc (node_size);

  if (tmp == NULL)
    abort ();   /* 64 KiB at most; the engine cannot go on without memory */
  memcpy (tmp, n->buf, node_size);
  for (uint32_t i = 0; i < cnt; i++) {
    uint32_t off = get_le32 (tmp + NODE_HDR + NODE_SLOT * i);
    uint32_t len = ITEM_HDR + get_le16 (tmp + off) + get_le16 (tmp + off + 2);

    pos -= len;
    memcpy (n->buf + pos, tmp + off, len);
    slot_set (n, i, pos);
  }
  set_data_start (n, pos);
  free (tmp);
}

/* Insert an item at index i (the caller checked node_fits). */
void
node_insert_at (struct node *n, uint32_t node_size, uint32_t i,
                const uint8_t *key, size_t klen, const uint8_t *val,
                size_t vlen)
{
  uint32_t cnt = node_nitems (n);
  uint32_t body = ITEM_HDR + (uint32_t) (klen + vlen);
  uint32_t slots_end = NODE_HDR + NODE_SLOT * (cnt + 1);
  uint32_t off;

  if (data_start (n) < slots_end + body)
    node_compact (n, node_size);
  off = data_start (n) - body;
  put_le16 (n->buf + off, (uint16_t) klen);
  put_le16 (n->buf + off + 2, (uint16_t) vlen);
  if (klen)
    memcpy (n->buf + off + ITEM_HDR, key, klen);
  if (vlen)
    memcpy (n->buf + off + ITEM_HDR + klen, val, vlen);
  set_data_start (n, off);
  memmove (n->buf + NODE_HDR + NODE_SLOT * (i + 1),
           n->buf + NODE_HDR + NODE_SLOT * i, NODE_SLOT * (cnt - i));
  slot_set (n, i, off);
  set_nitems (n, cnt + 1);
  n->used += NODE_SLOT + body;
}

/* Delete item i; its body becomes garbage until the next compaction. */
void
node_delete_at (struct node *n, uint32_t i)
{
  uint32_t cnt = node_nitems (n), off = slot_get (n, i);
  uint32_t body = ITEM_HDR + get_le16 (n->buf + off) + get_le16 (n->buf + off + 2);

  memmove (n->buf + NODE_HDR + NODE_SLOT * i,
           n->buf + NODE_HDR + NODE_SLOT * (i + 1), NODE_SLOT * (cnt - i - 1));
  set_nitems (n, cnt - 1);
  n->used -= NODE_SLOT + body;
  if (off == data_start (n))
    set_data_start (n, off + body);
}

/* Overwrite the value of item i with one of the same length. */
void
node_set_val (struct node *n, uint32_t i, const uint8_t *val)
{
  size_t vlen;
  uint8_t *v = (uint8_t *) node_val (n, i, &vlen);

  memcpy (v, val, vlen);
}

/* Move items [from, end) of src to the end of dst. */
void
node_move_tail (struct node *dst, struct node *src, uint32_t from,
                uint32_t node_size)
{
  uint32_t cnt = node_nitems (src);

  for (uint32_t i = from; i < cnt; i++) {
    size_t klen, vlen;
    const uint8_t *k = node_key (src, i, &klen);
    const uint8_t *v = node_val (src, i, &vlen);

    node_insert_at (dst, node_size, node_nitems (dst), k, klen, v, vlen);
  }
  while (node_nitems (src) > from)
    node_delete_at (src, node_nitems (src) - 1);
}

/* Decode the block pointer of child i. */
void
node_get_child (const struct node *n, uint32_t i, struct blkptr *bp)
{
  size_t vlen;

  blkptr_decode (node_val (n, i, &vlen), bp);
}

/* Encode the block pointer of child i. */
void
node_set_child (struct node *n, uint32_t i, const struct blkptr *bp)
{
  uint8_t enc[BLKPTR_SIZE];

  blkptr_encode (bp, enc);
  node_set_val (n, i, enc);
}
