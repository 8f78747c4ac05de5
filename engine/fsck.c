/* Cairn engine: the offline check (see fsck.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "catalog-int.h"
#include "fsck.h"
#include "pool.h"

#define MAX_REPORTED 20   /* problems of one kind spelled out */

struct fsck {
  const struct fsck_opts *opts;
  struct fsck_report *rep;
  struct cairn_pool *pool;
  uint64_t total_blocks, node_blocks, estimate;
  uint8_t *reach;           /* block is referenced */
  uint8_t *node_seen;       /* a node starts at this block and was walked */
  uint8_t *scrubbed;        /* data block whose copies were scrubbed */
  struct btree_root *trees; /* trees found in the root tree, and pins */
  uint64_t *tree_ids;
  bool *is_volume;          /* the tree holds volume extents */
  size_t ntrees, trees_cap;
  struct fsck_vol {         /* volume records, in id order */
    uint64_t id;
    int64_t held;           /* as recorded (VOLREC_HELD), -1: not recorded */
    uint64_t dead;          /* blocks its deadlist entries hold */
  } *vols;
  size_t nvols, vols_cap;
  unsigned bad_volkeys;     /* volume records whose key has the wrong length
                               (their trees' ids are unknown) */
  uint64_t deadlist_id;     /* 0: none */
  struct btree_root deadlist;
  uint64_t max_ext;         /* longest extent item, in blocks */
  struct destrec *dest;     /* deleted volumes being reclaimed */
  uint64_t *dest_ids;
  size_t ndest;
  uint64_t dest_since;      /* of the one being walked */
  struct fsck_free { uint64_t id, range[4]; } *frees;   /* RK_FREE */
  size_t nfrees;
};

static inline bool
bit_get (const uint8_t *map, uint64_t i)
{
  return map[i >> 3] & (1u << (i & 7));
}

static inline void
bit_set (uint8_t *map, uint64_t i)
{
  map[i >> 3] |= (uint8_t) (1u << (i & 7));
}

/* Report one problem. */
static void CAIRN_PRINTF (2, 3)
problem (struct fsck *f, const char *fmt, ...)
{
  char msg[1024];
  va_list ap;

  f->rep->errors++;
  if (f->opts && f->opts->problem) {
    va_start (ap, fmt);
    vsnprintf (msg, sizeof msg, fmt, ap);
    va_end (ap);
    f->opts->problem (f->opts->opaque, msg);
  }
}

/* Mark blocks referenced; a block referenced twice is a problem. */
static void
mark (struct fsck *f, uint64_t start, uint64_t len, const char *what)
{
  for (uint64_t b = start; b < start + len; b++) {
    if (b >= f->total_blocks) {
      problem (f, "%s at block %" PRIu64 " lies outside the pool", what, b);
      return;
    }
    if (bit_get (f->reach, b))
      problem (f, "block %" PRIu64 " is referenced twice (again by %s)", b, what);
    bit_set (f->reach, b);
  }
}

/* Scrub every copy of a block that sha is the digest of (fsck_opts.scrub):
 * a block with no good copy left is a problem.
 */
static void
scrub (struct fsck *f, uint64_t off, size_t len, const uint8_t *sha,
       const char *what)
{
  uint64_t lost = f->rep->scrub.lost;

  if (dev_scrub (pool_dev (f->pool), len, off, dev_check_sha256, (void *) sha,
                 &f->rep->scrub) < 0)
    problem (f, "scrubbing the %s at block %" PRIu64 ": %s", what,
             off >> BLOCK_SHIFT, cairn_errmsg ());
  else if (f->rep->scrub.lost > lost)
    problem (f, "%s at block %" PRIu64 ": no copy matches its checksum",
             what, off >> BLOCK_SHIFT);
}

/* Visitor: a node was reached. */
static int
on_node (void *opaque, const struct blkptr *bp, unsigned level)
{
  struct fsck *f = opaque;
  uint64_t blk = bp->addr >> BLOCK_SHIFT;

  if (bit_get (f->node_seen, blk))
    return 1;             /* a shared subtree, walked already */
  bit_set (f->node_seen, blk);
  f->rep->nodes++;
  mark (f, blk, f->node_blocks, "a metadata node");
  if (f->opts && f->opts->scrub)
    scrub (f, bp->addr, f->node_blocks * BLOCK_SIZE, bp->sha, "metadata node");
  if (f->opts && f->opts->progress && f->rep->nodes % 1024 == 0)
    f->opts->progress (f->opts->opaque, f->rep->nodes, f->estimate);
  return 0;
}

/* Remember a tree (or pinned state) to walk. */
static int
add_tree (struct fsck *f, uint64_t id, const struct btree_root *root,
          bool is_volume)
{
  if (f->ntrees == f->trees_cap) {
    size_t cap = f->trees_cap ? f->trees_cap * 2 : 16;
    struct btree_root *nt = realloc (f->trees, cap * sizeof *nt);
    uint64_t *ni;
    bool *nv;

    if (nt == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing trees");
    f->trees = nt;
    ni = realloc (f->tree_ids, cap * sizeof *ni);
    if (ni == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing trees");
    f->tree_ids = ni;
    nv = realloc (f->is_volume, cap * sizeof *nv);
    if (nv == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing trees");
    f->is_volume = nv;
    f->trees_cap = cap;
  }
  f->trees[f->ntrees] = *root;
  f->tree_ids[f->ntrees] = id;
  f->is_volume[f->ntrees] = is_volume;
  f->ntrees++;
  return 0;
}

/* Remember that id is a volume's tree.  A record that does not decode is
 * reported in the catalog's words (catalog-damage.c), and its volume is
 * still counted: its tree and deadlist hold blocks that must not look
 * leaked.
 */
static int
add_volume (struct fsck *f, uint64_t id, const uint8_t *val, size_t vlen)
{
  bool bad = volrec_check (val, vlen, id) < 0;

  if (bad)
    problem (f, "root tree: %s", cairn_errmsg ());
  if (f->nvols == f->vols_cap) {
    size_t cap = f->vols_cap ? f->vols_cap * 2 : 16;
    struct fsck_vol *nv = realloc (f->vols, cap * sizeof *nv);

    if (nv == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing volumes");
    f->vols = nv;
    f->vols_cap = cap;
  }
  f->vols[f->nvols++] = (struct fsck_vol) {
    .id = id,
    .held = bad ? -1 : volrec_held (val, vlen),
  };
  return 0;
}

/* The volume record of id, or NULL.  (Root tree keys come in order: every
 * volume record has been seen, in id order, before the walk of the trees
 * starts.)
 */
static struct fsck_vol *
find_volume (struct fsck *f, uint64_t id)
{
  size_t lo = 0, hi = f->nvols;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;

    if (f->vols[mid].id == id)
      return &f->vols[mid];
    if (f->vols[mid].id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* Does id have a volume record? */
static bool
is_volume_id (struct fsck *f, uint64_t id)
{
  return find_volume (f, id) != NULL;
}

/* Remember a deleted volume being reclaimed in the background. */
static int
add_destroy (struct fsck *f, uint64_t id, const uint8_t *val, size_t vlen)
{
  struct destrec *nd = realloc (f->dest, (f->ndest + 1) * sizeof *nd);
  uint64_t *ni;

  if (nd == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing deleted volumes");
  f->dest = nd;
  ni = realloc (f->dest_ids, (f->ndest + 1) * sizeof *ni);
  if (ni == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing deleted volumes");
  f->dest_ids = ni;
  if (destrec_decode (val, vlen, &f->dest[f->ndest]) < 0) {
    problem (f, "root tree: deleted volume %" PRIu64 ": %s", id, cairn_errmsg ());
    return 0;
  }
  f->dest_ids[f->ndest++] = id;
  return 0;
}

/* The destroy record of id, if it is a deleted volume being reclaimed. */
static const struct destrec *
find_destroying (struct fsck *f, uint64_t id)
{
  for (size_t i = 0; i < f->ndest; i++)
    if (f->dest_ids[i] == id)
      return &f->dest[i];
  return NULL;
}

/* Does the root tree hold an item of type with the 16 bytes idgen (be64
 * id, be64 gen) after it?  An error reads as no.
 */
static bool
root_has (struct fsck *f, unsigned type, const uint8_t *idgen, size_t n)
{
  struct btree *root = pool_root_tree (f->pool);
  uint8_t key[17], val[PINREC_LEN];
  size_t vl;
  int r;

  key[0] = (uint8_t) type;
  memcpy (key + 1, idgen, n);
  btree_rdlock (root);
  r = btree_lookup (root, key, 1 + n, val, sizeof val, &vl);
  btree_unlock (root);
  return r == 0;
}

/* Has pin (idgen) its checkpoint flag (CK-1)? */
static bool
root_pin_ckpt (struct fsck *f, const uint8_t *idgen)
{
  struct btree *root = pool_root_tree (f->pool);
  uint8_t key[17], val[PINREC_LEN];
  size_t vl;
  int r;

  key[0] = RK_PIN;
  memcpy (key + 1, idgen, 16);
  btree_rdlock (root);
  r = btree_lookup (root, key, 17, val, sizeof val, &vl);
  btree_unlock (root);
  return r == 0 && vl == PINREC_LEN && (val[PINREC_FLAGS] & PINF_CKPT);
}

/* Visitor: a root tree (catalog) item. */
static int
on_root_item (void *opaque, const uint8_t *key, size_t klen,
              const uint8_t *val, size_t vlen)
{
  struct fsck *f = opaque;
  struct btree_root root;

  f->rep->items++;
  if (klen == 0) {
    problem (f, "root tree: item with an empty key");
    return 0;
  }
  switch (key[0]) {
  case ROOTKEY_TREE:
    if (klen != ROOTKEY_LEN || tree_item_decode (val, vlen, &root) < 0) {
      problem (f, "root tree: bad tree item (%s)", cairn_errmsg ());
      return 0;
    }
    return add_tree (f, get_be64 (key + 1), &root, false);
  case RK_PIN:
    if (klen != 17 || vlen != PINREC_LEN) {
      problem (f, "root tree: bad pin record (key %zu, value %zu bytes)", klen, vlen);
      return 0;
    }
    if (val[PINREC_FLAGS] & ~PINF_ALL)
      problem (f, "pin of volume %" PRIu64 " at generation %" PRIu64
               " has unknown flags 0x%x", get_be64 (key + 1),
               get_be64 (key + 9), val[PINREC_FLAGS]);
    if (get_le32 (val) + get_le32 (val + 4) == 0 &&
        !(val[PINREC_FLAGS] & PINF_CKPT))
      problem (f, "pin of volume %" PRIu64 " at generation %" PRIu64
               " has no reason left", get_be64 (key + 1), get_be64 (key + 9));
    if ((val[PINREC_FLAGS] & PINF_CKPT) &&
        !root_has (f, RK_CKPT, key + 1, 16))
      problem (f, "checkpoint of volume %" PRIu64 " at generation %" PRIu64
               " has no checkpoint record", get_be64 (key + 1),
               get_be64 (key + 9));
    blkptr_decode (val + 8, &root.bp);
    root.level = val[56];
    return add_tree (f, get_be64 (key + 1), &root, true);
  case RK_CONFIG:
    if (klen == 9 && memcmp (key + 1, "deadlist", 8) == 0 && vlen == 8)
      f->deadlist_id = get_le64 (val);
    return 0;
  case RK_VOL:
    if (volkey_check (klen) == 0)
      return add_volume (f, get_be64 (key + 1), val, vlen);
    problem (f, "root tree: %s", cairn_errmsg ());
    f->bad_volkeys++;
    return 0;
  case RK_FREE: {
    struct fsck_free *nf = realloc (f->frees, (f->nfrees + 1) * sizeof *nf);

    if (nf == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing free records");
    f->frees = nf;
    if (freerec_decode (key, klen, val, vlen, &nf[f->nfrees].id,
                        nf[f->nfrees].range) < 0)
      problem (f, "root tree: %s", cairn_errmsg ());
    else
      f->nfrees++;
    return 0;
  }
  case RK_DESTROY:
    if (klen != 9) {
      problem (f, "root tree: bad destroy record key (%zu bytes)", klen);
      return 0;
    }
    return add_destroy (f, get_be64 (key + 1), val, vlen);
  case RK_SNAP: {
    struct snaprec sr;

    /* Named as the listings name it (the decoder's message). */
    if (klen != 17)
      problem (f, "root tree: bad snapshot record key (%zu bytes)", klen);
    else if (snaprec_decode (val, vlen, get_be64 (key + 1),
                             get_be64 (key + 9), &sr) < 0)
      problem (f, "root tree: %s", cairn_errmsg ());
    return 0;
  }
  case RK_CKPT:
    if (klen != 17 || vlen != CKPTREC_LEN)
      problem (f, "root tree: bad checkpoint record (key %zu, value %zu "
               "bytes)", klen, vlen);
    else if (!root_pin_ckpt (f, key + 1))
      problem (f, "checkpoint record of volume %" PRIu64 " at generation %"
               PRIu64 " has no checkpoint pin", get_be64 (key + 1),
               get_be64 (key + 9));
    return 0;
  case RK_CKPTTIME:
    if (klen != 25 || vlen != 8 || get_le64 (val) != get_be64 (key + 17))
      problem (f, "root tree: bad checkpoint time item (key %zu, value %zu "
               "bytes)", klen, vlen);
    return 0;
  case RK_NAME:
  case RK_SNAPNAME:
  case RK_PROP:
  case RK_DEFER:
    return 0;
  default:
    problem (f, "root tree: item with unknown key type %u (length %zu)",
             key[0], klen);
    return 0;
  }
}

/* Visitor: an extent item of a volume tree. */
static int
on_extent (void *opaque, const uint8_t *key, size_t klen, const uint8_t *val,
           size_t vlen)
{
  struct fsck *f = opaque;
  uint64_t len, addr;

  f->rep->items++;
  if (klen != 8 || vlen < EXT_HDR || (len = ext_len (val)) == 0 ||
      len > f->max_ext || vlen != EXT_HDR + len * SHA256_LEN) {
    problem (f, "volume extent at block %" PRIu64 ": malformed item (key %zu, "
             "value %zu bytes)", klen == 8 ? get_be64 (key) : 0, klen, vlen);
    return 0;
  }
  addr = ext_addr (val);
  if (addr + len > f->total_blocks || addr < POOL_DATA_START / BLOCK_SIZE) {
    problem (f, "volume extent at block %" PRIu64 " points outside the data "
             "area (block %" PRIu64 ", %" PRIu64 " blocks)", get_be64 (key),
             addr, len);
    return 0;
  }
  /* Data blocks are shared by the states of one lineage: marking one twice
   * is normal; a data block that is also a node is not.
   */
  for (uint64_t b = addr; b < addr + len; b++) {
    if (bit_get (f->node_seen, b)) {
      problem (f, "block %" PRIu64 " is both volume data and a metadata node", b);
      continue;
    }
    bit_set (f->reach, b);
    if (f->scrubbed && !bit_get (f->scrubbed, b)) {
      bit_set (f->scrubbed, b);
      scrub (f, b * BLOCK_SIZE, BLOCK_SIZE,
             val + EXT_HDR + (b - addr) * SHA256_LEN, "data block");
    }
  }
  return 0;
}

/* Visitor: a deadlist entry, checked after every tree was walked: what a
 * deadlist holds must be needed by some pinned state.
 */
static int
on_dead (void *opaque, const uint8_t *key, size_t klen, const uint8_t *val,
         size_t vlen)
{
  struct fsck *f = opaque;
  const struct destrec *dest;
  struct fsck_vol *vol;
  uint64_t addr, len;

  f->rep->items++;
  if (klen != 24 || vlen != 16) {
    problem (f, "deadlist: malformed entry (key %zu, value %zu bytes)", klen, vlen);
    return 0;
  }
  addr = get_be64 (key + 16);
  len = get_le64 (val);
  if (addr + len > f->total_blocks || len == 0) {
    problem (f, "deadlist entry of volume %" PRIu64 " points outside the pool",
             get_be64 (key));
    return 0;
  }
  if ((vol = find_volume (f, get_be64 (key))) != NULL)
    vol->dead += len;
  for (size_t i = 0; i < f->nfrees; i++) {
    const struct fsck_free *x = &f->frees[i];
    uint64_t d = get_be64 (key + 8), b = get_le64 (val + 8);

    /* Left to free by a removed pin (RP-6): allocated, needed by nothing. */
    if (x->id == get_be64 (key) && d > x->range[0] && d <= x->range[1] &&
        b > x->range[2] && b <= x->range[3]) {
      mark (f, addr, len, "the deadlist range of a deleted snapshot");
      return 0;
    }
  }
  if ((dest = find_destroying (f, get_be64 (key))) != NULL) {
    /* A deleted volume's entries wait for the reaper: allocated, needed
     * by nothing, counted once (those born at or before its origin are
     * the origin's, RC-5).
     */
    if (get_le64 (val + 8) > dest->since)
      mark (f, addr, len, "the deadlist of a deleted volume");
    return 0;
  }
  for (uint64_t b = addr; b < addr + len; b++)
    if (!bit_get (f->reach, b)) {
      problem (f, "deadlist entry of volume %" PRIu64 " (died in generation %"
               PRIu64 ") holds block %" PRIu64 " that no pinned state references",
               get_be64 (key), get_be64 (key + 8), b);
      break;
    }
  return 0;
}

/* Walk one tree's nodes; a walk error is a problem, not the end of the
 * check.
 */
static void
check_tree (struct fsck *f, const char *name, const struct btree_root *root,
            int (*on_item) (void *, const uint8_t *, size_t, const uint8_t *,
                            size_t), bool mark_nodes)
{
  struct btree_visitor v = {
    .on_node = mark_nodes ? on_node : NULL,
    .on_item = on_item,
    .opaque = f,
  };
  int r;

  f->rep->trees += mark_nodes;
  r = btree_walk (pool_cache (f->pool), root, &v);
  if (r < 0)
    problem (f, "%s: %s", name, cairn_errmsg ());
}

/* Visitor: an extent of a deleted volume not yet reclaimed; those born at or
 * before its origin generation are the origin's (RP-2).
 */
static int
on_dest_extent (void *opaque, const uint8_t *key, size_t klen,
                const uint8_t *val, size_t vlen)
{
  struct fsck *f = opaque;

  if (vlen >= EXT_HDR && ext_birth (val) <= f->dest_since)
    return 0;
  return on_extent (opaque, key, klen, val, vlen);
}

/* Walk what is left of a deleted volume's tree (RP-2): its nodes, or its
 * extents.
 */
static void
check_destroying (struct fsck *f, size_t i, bool nodes)
{
  const struct destrec *d = &f->dest[i];
  struct btree_visitor v = {
    .on_node = nodes ? on_node : NULL,
    .on_item = nodes ? NULL : on_dest_extent,
    .opaque = f,
  };
  uint8_t next[BTREE_MAX_KEY];
  size_t nextlen;
  bool done;
  int r;

  if (d->flags & DESTF_TREE_DONE)
    return;
  f->rep->trees += nodes;
  f->dest_since = d->since;
  r = btree_reap (pool_cache (f->pool), &d->root, d->since,
                  d->pointlen ? d->point : NULL, d->pointlen, SIZE_MAX, &v,
                  next, &nextlen, &done);
  if (r < 0)
    problem (f, "deleted volume %" PRIu64 ": %s", f->dest_ids[i], cairn_errmsg ());
}

/* Compare reachability with the free map. */
struct audit {
  struct fsck *f;
  uint64_t next;            /* first block not yet audited */
  unsigned leaks_told, used_told;
};

/* Audit the allocated blocks [a->next, end): each must be reachable. */
static void
audit_allocated (struct audit *a, uint64_t end)
{
  struct fsck *f = a->f;

  for (uint64_t b = a->next; b < end; b++) {
    if (bit_get (f->reach, b))
      continue;
    f->rep->blocks_leaked++;
    if (a->leaks_told++ < MAX_REPORTED)
      problem (f, "block %" PRIu64 " is allocated but nothing references it "
               "(leaked)", b);
    else
      f->rep->errors++;
  }
}

/* space_foreach_free callback: a free run. */
static int
audit_free (void *opaque, uint64_t start, uint64_t len)
{
  struct audit *a = opaque;
  struct fsck *f = a->f;

  audit_allocated (a, start);
  for (uint64_t b = start; b < start + len; b++) {
    if (!bit_get (f->reach, b))
      continue;
    f->rep->blocks_free_but_used++;
    if (a->used_told++ < MAX_REPORTED)
      problem (f, "block %" PRIu64 " is in use but the space map says it is "
               "free", b);
    else
      f->rep->errors++;
  }
  f->rep->blocks_free += len;
  a->next = start + len;
  return 0;
}

/* Run the check. */
int
fsck_pool (struct cairn_dev *dev, const struct fsck_opts *opts,
           struct fsck_report *rep)
{
  struct pool_open_opts oo = {
    .readonly = true,
    .cache_bytes = opts && opts->cache_bytes ? opts->cache_bytes : 64ull << 20,
  };
  struct fsck f = { .opts = opts, .rep = rep };
  struct audit a = { .f = &f };
  struct btree_root root;
  struct pool_info info;
  struct pool_spacemap_info sm;
  int r;

  memset (rep, 0, sizeof *rep);
  /* Before the pool opens on them: the copies of its superblocks. */
  /* A slot with no valid copy is no problem: a commit cut off by a crash
   * leaves one, and opening takes the newest valid slot.
   */
  if (opts && opts->scrub && pool_scrub_superblocks (dev, &rep->scrub) < 0)
    return -ENOMEM;
  r = pool_open (dev, &oo, &f.pool);
  if (r < 0) {
    problem (&f, "cannot open the pool: %s", cairn_errmsg ());
    return 0;
  }
  if (pool_space_load (f.pool) < 0) {   /* read-only opens defer it */
    problem (&f, "cannot open the pool: %s", cairn_errmsg ());
    return pool_close (f.pool) < 0 ? -EIO : 0;
  }
  pool_info (f.pool, &info);
  rep->generation = info.generation;
  f.total_blocks = info.total_blocks;
  rep->blocks_total = info.total_blocks - info.data_start_block;
  f.node_blocks = info.node_size >> BLOCK_SHIFT;
  f.estimate = info.space.allocated / f.node_blocks + 1;
  f.reach = calloc (DIV_ROUND_UP (f.total_blocks, 8), 1);
  f.node_seen = calloc (DIV_ROUND_UP (f.total_blocks, 8), 1);
  if (opts && opts->scrub)
    f.scrubbed = calloc (DIV_ROUND_UP (f.total_blocks, 8), 1);
  if (f.reach == NULL || f.node_seen == NULL ||
      (opts && opts->scrub && f.scrubbed == NULL)) {
    r = cairn_fail (-ENOMEM, "out of memory for the block bitmaps (%" PRIu64
                    " bytes each)", DIV_ROUND_UP (f.total_blocks, 8));
    goto out;
  }

  /* The space map's own blocks are referenced by the superblock: the
   * base (or version-1 chain) and every log block.  Opening replayed the
   * log, checking each record against the state before it; the audit
   * below then checks the result both ways against what is reachable.
   */
  pool_spacemap (f.pool, &sm);
  for (size_t i = 0; i < sm.nbase; i++)
    mark (&f, sm.base[i], 1, "the space map base");
  for (size_t i = 0; i < sm.nlog; i++)
    mark (&f, sm.log[i], 1, "the space map log");
  rep->spacemap_base_blocks = sm.nbase;
  rep->spacemap_log_blocks = sm.nlog;
  /* The intent log's ring is allocated for good.  The records a crash
   * left in it name data blocks that are free until a read-write open
   * replays them (IL-6 in txn-log.c): free here, and checked then.
   */
  {
    struct pool_log_info li;

    if (pool_log_info (f.pool, &li) < 0)
      problem (&f, "the intent log: %s", cairn_errmsg ());
    else if (li.nblocks) {
      mark (&f, li.start, li.nblocks, "the intent log");
      rep->intentlog_blocks = li.nblocks;
      rep->intentlog_live_blocks = li.live_blocks;
      rep->intentlog_records = li.live_records;
    }
  }

  f.max_ext = (btree_max_value (pool_cache (f.pool), 8) - EXT_HDR) / SHA256_LEN;
  btree_get_root (pool_root_tree (f.pool), &root);
  check_tree (&f, "root tree", &root, on_root_item, true);
  /* Every tree's nodes first, so that data can be checked against them;
   * then the volume data; then what the deadlists hold.
   */
  for (size_t i = 0; i < f.ntrees; i++) {
    char name[64];

    if (f.tree_ids[i] == f.deadlist_id && f.deadlist_id)
      f.deadlist = f.trees[i];
    snprintf (name, sizeof name, "tree %" PRIu64, f.tree_ids[i]);
    check_tree (&f, name, &f.trees[i], NULL, true);
  }
  for (size_t i = 0; i < f.ndest; i++)
    check_destroying (&f, i, true);
  for (size_t i = 0; i < f.ndest; i++)
    check_destroying (&f, i, false);
  for (size_t i = 0; i < f.ntrees; i++) {
    char name[64];

    /* Not a volume: its items have no blocks to check.  Every tree but
     * the deadlist is a volume's, so with a volume record whose key is
     * unusable, a tree without a record is taken to be its volume's.
     */
    if (!f.is_volume[i] && !is_volume_id (&f, f.tree_ids[i]) &&
        (f.bad_volkeys == 0 || f.tree_ids[i] == f.deadlist_id))
      continue;
    snprintf (name, sizeof name, "tree %" PRIu64, f.tree_ids[i]);
    check_tree (&f, name, &f.trees[i], on_extent, false);
  }
  if (f.deadlist_id)
    check_tree (&f, "deadlist tree", &f.deadlist, on_dead, false);
  for (size_t i = 0; i < f.nvols; i++)
    if (f.vols[i].held >= 0 && (uint64_t) f.vols[i].held != f.vols[i].dead)
      problem (&f, "volume %" PRIu64 " records %" PRId64 " blocks held for "
               "its snapshots, its deadlist holds %" PRIu64, f.vols[i].id,
               f.vols[i].held, f.vols[i].dead);

  /* Space audit over the data area. */
  a.next = info.data_start_block;
  r = space_foreach_free (pool_space (f.pool), false, audit_free, &a);
  if (r < 0)
    goto out;
  audit_allocated (&a, f.total_blocks);
  for (uint64_t b = info.data_start_block; b < f.total_blocks; b++)
    rep->blocks_reachable += bit_get (f.reach, b);
  if (opts && opts->progress)
    opts->progress (opts->opaque, rep->nodes, rep->nodes);
  r = 0;
 out:
  free (f.reach);
  free (f.node_seen);
  free (f.scrubbed);
  free (f.trees);
  free (f.tree_ids);
  free (f.is_volume);
  free (f.vols);
  free (f.dest);
  free (f.dest_ids);
  free (f.frees);
  if (pool_close (f.pool) < 0 && r == 0)
    r = -EIO;
  return r;
}
