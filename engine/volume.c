/* Cairn engine, layer "volume": block I/O on volumes and snapshots.
 *
 * A volume tree maps the first logical block of each extent to its item
 * (catalog-int.h): where the data is, when it was written, and the SHA-256
 * of every block, so that a read checks every block and an overwrite that
 * splits an extent never re-reads data.
 *
 * Writes allocate and write their data outside the tree lock (inside
 * txn_begin), then take the tree's write lock only to replace the mapping.
 * Reads (volume-read.c) copy the mapping under the read lock and read and
 * check the data outside it; a block can be freed and reused between the
 * two (the write that freed it may even be in the same generation), so a
 * checksum mismatch is retried once with a fresh mapping before it counts
 * as damage.  A read makes one device read per run of mappings contiguous
 * on the device and checks runs contiguous in the volume with
 * sha256_blocks (two blocks at a time): the check, not the mapping, is what
 * a read costs.
 * All-zero blocks, zero requests and trims store nothing: they leave holes.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "volume-int.h"

/* Free a mapping list. */
void
map_vec_free (struct map_vec *mv)
{
  for (size_t i = 0; i < mv->n; i++)
    free (mv->m[i].sha);
  free (mv->m);
  mv->m = NULL;
  mv->n = mv->cap = 0;
}

/* Data blocks are checked with sha256_blocks. */
_Static_assert (BLOCK_SIZE == SHA256_DATA_BLOCK,
                "a data block is what sha256_blocks hashes");

/* The most blocks one extent item can describe. */
uint64_t
max_ext_blocks (struct catalog *cat)
{
  size_t maxv = btree_max_value (pool_cache (cat->pool), 8);

  return (maxv - EXT_HDR) / SHA256_LEN;
}

/* ---------------------------------------------------------------- opening */

/* Count one more handle on a pinned state (tlock held); vol_close counts
 * it off.
 */
static int
open_pin_add (struct catalog *cat, uint64_t id, uint64_t gen)
{
  struct open_pin *op = cat_open_pin (cat, id, gen);

  if (op) {
    op->opens++;
    return 0;
  }
  if (cat->nopen_pins == cat->open_pins_cap) {
    size_t cap = cat->open_pins_cap ? cat->open_pins_cap * 2 : 8;
    struct open_pin *np = realloc (cat->open_pins, cap * sizeof *np);
    if (np == NULL)
      return cairn_fail (-ENOMEM, "out of memory opening a snapshot");
    cat->open_pins = np;
    cat->open_pins_cap = cap;
  }
  cat->open_pins[cat->nopen_pins++] = (struct open_pin) { id, gen, 1, false };
  return 0;
}

/* Open an export name. */
int
vol_open (struct cairn_pool *pool, const char *export_name,
          struct cairn_volume **volp)
{
  char name[VOL_NAME_MAX + 1];
  const char *at = strchr (export_name, '@');
  struct cairn_volume *v;
  struct catalog *cat;
  struct volstate *vs;
  size_t nlen = at ? (size_t) (at - export_name) : strlen (export_name);
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  if (nlen > VOL_NAME_MAX)
    return cairn_fail (-ENOENT, "no volume named '%s'", export_name);
  memcpy (name, export_name, nlen);
  name[nlen] = '\0';
  v = calloc (1, sizeof *v);
  if (v == NULL)
    return cairn_fail (-ENOMEM, "out of memory opening '%s'", export_name);
  v->cat = cat;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, name);
  if (vs)
    vs->opens++;
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL) {
    free (v);
    return cat_no_volume (cat, name, export_name);
  }
  v->vs = vs;
  v->info.id = vs->id;
  snprintf (v->info.name, sizeof v->info.name, "%s", vs->name);
  v->info.ctime = vs->ctime;
  v->info.origin_id = vs->origin_id;
  v->info.origin_gen = vs->origin_gen;
  v->info.quota = vs->quota;

  if (at == NULL) {
    v->tree = vs->tree;
    v->readonly = (vs->flags & VOLF_READONLY) != 0;
    *volp = v;
    return 0;
  }

  /* A pinned state: a snapshot or a generation. */
  {
    struct btree_root root;
    uint64_t gen;

    /* A snapshot name, "#GEN" or a time; a malformed one is no export. */
    r = cat_lookup_point (cat, vs->id, name, at + 1, &gen);
    if (r == -EINVAL)
      r = -ENOENT;
    /* Looking the pin up and counting the handle on it happen under
     * tlock, so that settling a deferred delete cannot release the pin in
     * between (catalog-snap.c, "deferred deletes").
     */
    pthread_mutex_lock (&cat->tlock);
    if (r == 0) {
      r = cat_lookup_pin (cat, vs->id, gen, NULL, NULL, &root);
      if (r == -ENOENT)
        r = cairn_fail (-ENOENT, "generation %" PRIu64 " of volume '%s' is not "
                        "kept", gen, name);
    }
    if (r == 0) {
      struct vol_info si = { .size = 0 };

      /* A generation pinned only by a clone has no snapshot record: it
       * has the volume's current size and no creation time of its own.
       * A record that does not decode is no such case: its size is
       * unknown, so the state is not served.
       */
      r = cat_read_snap (cat, vs->id, gen, &si);
      if (r == 0) {
        v->size = si.size;
        v->info.ctime = si.ctime;
        v->info.referenced = si.referenced;
        snprintf (v->info.snap, sizeof v->info.snap, "%s", si.snap);
      }
      else if (r == -ENOENT) {
        struct vol_checkpoint c;

        /* A checkpoint knows its size and time; a generation only a
         * clone pins has the volume's current size and no time.
         */
        r = ckpt_read (cat, vs->id, gen, &c);
        v->size = r == 0 ? c.size : vs->size;
        v->info.ctime = r == 0 ? c.ctime : 0;
        v->info.referenced = r == 0 ? c.referenced : 0;
        r = r == -ENOENT ? 0 : r;
      }
      else
        r = cat_snap_unreadable (r, export_name);
      v->gen = gen;
      if (r == 0)
        r = btree_open (pool_cache (pool), vs->id, &root, &v->tree);
    }
    if (r == 0)
      r = open_pin_add (cat, vs->id, v->gen);
    if (r < 0)
      vs->opens--;
    pthread_mutex_unlock (&cat->tlock);
    if (r < 0) {
      if (v->tree)
        btree_close (v->tree);
      free (v);
      return r;
    }
  }
  v->own_tree = true;
  v->readonly = true;
  *volp = v;
  return 0;
}

/* Open the partial volume of a receive into name (engine/volume.h). */
int
vol_partial_open (struct cairn_pool *pool, const char *name,
                  struct cairn_volume **volp)
{
  struct cairn_volume *v;
  struct catalog *cat;
  struct volstate *vs;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  v = calloc (1, sizeof *v);
  if (v == NULL)
    return cairn_fail (-ENOMEM, "out of memory opening '%s'", name);
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_partial (cat, name);
  if (vs && vs->opens == 0)
    vs->opens++;
  else if (vs)
    r = cairn_fail (-EBUSY, "another receive into '%s' is running", name);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    r = cairn_fail (-ENOENT, "no receive into '%s' is in progress", name);
  if (r < 0) {
    free (v);
    return r;
  }
  v->cat = cat;
  v->vs = vs;
  v->tree = vs->tree;
  v->info.id = vs->id;
  snprintf (v->info.name, sizeof v->info.name, "%s", vs->name);
  v->info.ctime = vs->ctime;
  v->info.origin_id = vs->origin_id;
  v->info.origin_gen = vs->origin_gen;
  *volp = v;
  return 0;
}

/* Close a handle. */
void
vol_close (struct cairn_volume *v)
{
  struct catalog *cat;
  bool settle = false;

  if (v == NULL)
    return;
  cat = v->cat;
  xstats_close (v);
  pthread_mutex_lock (&cat->tlock);
  v->vs->opens--;
  if (v->own_tree) {
    struct open_pin *op = cat_open_pin (cat, v->vs->id, v->gen);

    /* The last handle: the entry goes, so the table holds only what is
     * open now (a server that opens many states over its life would
     * otherwise keep one entry for each, and every lookup would walk
     * them all).
     */
    if (op && --op->opens == 0) {
      settle = op->deferred;
      *op = cat->open_pins[--cat->nopen_pins];
    }
  }
  /* The last handle on something deleted while open. */
  settle |= (v->vs->flags & VOLF_HIDDEN) && v->vs->opens == 0;
  pthread_mutex_unlock (&cat->tlock);
  if (v->own_tree)
    btree_close (v->tree);
  free (v);
  if (settle)
    cat_settle_soon (cat);
}

struct btree *
vol_tree (struct cairn_volume *v)
{
  return v->tree;
}

struct volstate *
vol_state (struct cairn_volume *v)
{
  return v->vs;
}

uint64_t
vol_pin_gen (struct cairn_volume *v)
{
  return v->own_tree ? v->gen : 0;
}

bool
vol_is_readonly (struct cairn_volume *v)
{
  return v->readonly || (!v->own_tree && (v->vs->flags & VOLF_READONLY));
}

uint64_t
vol_size (struct cairn_volume *v)
{
  return v->own_tree ? v->size : __atomic_load_n (&v->vs->size, __ATOMIC_RELAXED);
}

void
vol_get_info (struct cairn_volume *v, struct vol_info *info)
{
  *info = v->info;
  if (!v->own_tree)
    info->referenced = (uint64_t) __atomic_load_n (&v->vs->referenced,
                                                   __ATOMIC_RELAXED) * BLOCK_SIZE;
  info->size = vol_size (v);
  info->readonly = vol_is_readonly (v);
  info->is_snapshot = v->own_tree;
  info->gen = v->own_tree ? v->gen : v->vs->create_gen;
}

void
vol_stats (struct cairn_volume *v, struct vol_stats *st)
{
  COUNTERS_SUM (v->stats, st);   /* other threads add meanwhile (COUNT) */
}

/* The request latencies of an open volume (volstats.c folds them). */
void
vol_latency (struct cairn_volume *v, struct vol_latency *lat)
{
  COUNTERS_SUM (v->lat, lat);    /* other threads add meanwhile */
}

void
vol_stats_time (struct cairn_volume *v, enum vol_op op, uint64_t ns)
{
  lat_record (&v->lat[counter_shard ()].c.op[op], ns);
}

/* ---------------------------------------------------------------- writing */

/* Encode and insert extent items for [lbn, lbn + n) at data block addr. */
static int
insert_extents (struct volstate *vs, uint64_t lbn, uint64_t n, uint64_t addr,
                uint64_t birth, const uint8_t *shas)
{
  uint64_t maxe = max_ext_blocks (vs->cat);
  uint8_t *val = malloc (EXT_HDR + maxe * SHA256_LEN);
  int r = 0;

  if (val == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing a volume");
  while (n > 0 && r == 0) {
    uint64_t len = MIN (n, maxe);
    uint8_t key[8];

    put_be64 (key, lbn);
    put_le32 (val, (uint32_t) len);
    put_le32 (val + 4, 0);
    put_le64 (val + 8, addr);
    put_le64 (val + 16, birth);
    memcpy (val + EXT_HDR, shas, len * SHA256_LEN);
    r = btree_insert (vs->tree, key, 8, val, EXT_HDR + len * SHA256_LEN,
                      BTREE_RESERVE);
    lbn += len;
    addr += len;
    shas += len * SHA256_LEN;
    n -= len;
  }
  free (val);
  return r;
}

/* Data that a write or trim took out of a volume while its snapshots keep
 * it: the ranges of blocks whose cached pages the writer lets go once the
 * tree is unlocked (drop_held).
 *
 * The host's page cache is the pool's cache (dev.h).  A block that only
 * the volume's snapshots hold is read again only if someone reads those
 * snapshots, while the live volume's new copy needs a page of its own:
 * handing the old page back at once keeps the cache for live data and
 * lets the new copy reuse memory that was just freed, instead of making
 * the kernel evict by age (under memory pressure) or take memory that
 * has long been free (on a virtual machine, often memory its host took
 * back, faulted in again page by page).  A clone's write over blocks it
 * shares with its origin lets nothing go: the origin's other clones may be
 * reading them.  (A volume's own write does let go of blocks that clones
 * of its snapshots share: such a clone reads them from the disk once.)
 * A reader of a snapshot then reads such a block from the disk, once, and
 * checks it (T1): letting pages go is only advice to the kernel, which
 * never drops a dirty page.
 */
struct held {
  struct { uint64_t addr, len; } *r;
  size_t n, cap;
};

/* Add [addr, addr + len) to h (merged with the last range when they
 * touch); without memory the range stays cached, which is only slower.
 */
static void
held_add (struct held *h, uint64_t addr, uint64_t len)
{
  if (h->n && h->r[h->n - 1].addr + h->r[h->n - 1].len == addr) {
    h->r[h->n - 1].len += len;
    return;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 4;
    void *nr = realloc (h->r, cap * sizeof *h->r);

    if (nr == NULL)
      return;
    h->r = nr;
    h->cap = cap;
  }
  h->r[h->n].addr = addr;
  h->r[h->n].len = len;
  h->n++;
}

/* Let the pages of h's blocks go (no tree lock held) and empty h. */
static void
drop_held (struct cairn_pool *pool, struct held *h)
{
  for (size_t i = 0; i < h->n; i++)
    dev_drop_cached (pool_dev (pool), h->r[i].addr * BLOCK_SIZE,
                     h->r[i].len * BLOCK_SIZE);
  free (h->r);
  *h = (struct held) { NULL, 0, 0 };
}

/* Remove the mapping of [lbn, lbn + n), keeping the parts of extents
 * outside it (tree write-locked by the caller).  Blocks that stay for
 * the volume's snapshots go into held when it is not NULL.
 */
static int
punch_locked (struct volstate *vs, uint64_t lbn, uint64_t n, struct held *held)
{
  struct map_vec mv = { NULL, 0, 0 };
  uint64_t end = lbn + n;
  struct btree_cursor *cur;
  uint8_t key[8];
  int r;

  /* Whole extents overlapping the range: from the one that may cover lbn
   * (it starts at or before it), keep those that touch the range.
   */
  r = btree_cursor_new (vs->tree, &cur);
  if (r < 0)
    return r;
  put_be64 (key, lbn);
  for (r = btree_cursor_seek_le (cur, key, 8); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;
    uint64_t s, len;
    struct mapping *m;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl != 8 || vl < EXT_HDR || (len = ext_len (v)) == 0 ||
        vl != EXT_HDR + len * SHA256_LEN) {
      r = cairn_fail (-EIO, "corrupt extent item in volume '%s'", vs->name);
      break;
    }
    s = get_be64 (k);
    if (s >= end)
      break;
    if (s + len <= lbn)
      continue;
    if (mv.n == mv.cap) {
      size_t cap = mv.cap ? mv.cap * 2 : 8;
      struct mapping *nm = realloc (mv.m, cap * sizeof *nm);
      if (nm == NULL) {
        r = cairn_fail (-ENOMEM, "out of memory writing a volume");
        break;
      }
      mv.m = nm;
      mv.cap = cap;
    }
    m = &mv.m[mv.n];
    m->lbn = s;
    m->n = len;
    m->addr = ext_addr (v);
    m->birth = ext_birth (v);
    m->sha = malloc (len * SHA256_LEN);
    if (m->sha == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory writing a volume");
      break;
    }
    memcpy (m->sha, v + EXT_HDR, len * SHA256_LEN);
    mv.n++;
  }
  btree_cursor_free (cur);
  if (r == -ENOENT)
    r = 0;

  for (size_t i = 0; i < mv.n && r == 0; i++) {
    struct mapping *m = &mv.m[i];
    uint64_t from = MAX (m->lbn, lbn), to = MIN (m->lbn + m->n, end);

    put_be64 (key, m->lbn);
    r = btree_delete (vs->tree, key, 8);
    if (r == 0 && m->lbn < lbn)
      r = insert_extents (vs, m->lbn, lbn - m->lbn, m->addr, m->birth, m->sha);
    if (r == 0 && m->lbn + m->n > end)
      r = insert_extents (vs, end, m->lbn + m->n - end, m->addr + (end - m->lbn),
                          m->birth, m->sha + (end - m->lbn) * SHA256_LEN);
    if (r == 0) {
      uint64_t addr = m->addr + (from - m->lbn);

      if (reclaim_free_blocks (vs, addr, to - from, m->birth) && held)
        held_add (held, addr, to - from);
      __atomic_sub_fetch (&vs->referenced, (int64_t) (to - from), __ATOMIC_RELAXED);
      __atomic_store_n (&vs->rec_dirty, true, __ATOMIC_RELAXED);
    }
  }
  map_vec_free (&mv);
  return r;
}

/* Remove a mapping (resize, inside the freeze). */
int
vol_punch (struct volstate *vs, uint64_t lbn, uint64_t n)
{
  int r;

  btree_wrlock (vs->tree);
  r = punch_locked (vs, lbn, n, NULL);
  btree_unlock (vs->tree);
  return r;
}

/* Are the changes of vs logged when the pool logs (txn-log.c, IL-7)?  Not
 * those of a receive's partial volume, which commits its progress.
 */
static bool
logged (const struct volstate *vs)
{
  return !(vs->flags & VOLF_PARTIAL);
}

/* Is a 4 KiB block all zeros? */
static bool
is_zero_block (const uint8_t *p)
{
  static const uint8_t zero[BLOCK_SIZE];

  return memcmp (p, zero, BLOCK_SIZE) == 0;
}

/* Where to look for the next data blocks: on from the last allocation, or,
 * once a commit has released freed space since, from the lowest block it
 * released.  Overwrites then reuse what earlier overwrites freed instead
 * of advancing through space never written: a pool whose volumes are
 * rewritten keeps the same blocks (and their page-cache pages) in use
 * rather than its whole size, and single blocks that random overwrites
 * freed are filled instead of piling up in the free set.
 */
static uint64_t
data_hint (struct volstate *vs, struct space *sp)
{
  uint64_t start, seq = space_reuse_hint (sp, &start);

  if (seq != __atomic_load_n (&vs->reuse_seen, __ATOMIC_RELAXED)) {
    __atomic_store_n (&vs->reuse_seen, seq, __ATOMIC_RELAXED);
    return start;
  }
  return __atomic_load_n (&vs->alloc_hint, __ATOMIC_RELAXED);
}

/* Write a run of non-zero blocks: allocate, checksum (or take the
 * caller's digests, sums, when not NULL), write the data, then replace the
 * mapping.  Inside txn_begin.
 */
static int
write_run (struct cairn_volume *v, uint64_t lbn, uint64_t n,
           const uint8_t *data, const uint8_t *sums)
{
  struct volstate *vs = v->vs;
  struct cairn_pool *pool = v->cat->pool;
  struct space *sp = pool_space (pool);
  uint64_t birth = pool_open_gen (pool);
  struct piece { uint64_t start, len; } *piece = NULL;
  struct held held = { NULL, 0, 0 };
  size_t npieces = 0, cap = 0;
  /* The digests: the caller's, or computed into own. */
  uint8_t *own = sums ? NULL : malloc (n * SHA256_LEN);
  const uint8_t *shas = sums ? sums : own;
  uint64_t got = 0;
  int r = 0;

  if (shas == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing '%s'", vs->name);
  if (vs->quota) {
    uint64_t used = (uint64_t) (__atomic_load_n (&vs->referenced, __ATOMIC_RELAXED) +
                                __atomic_load_n (&vs->held, __ATOMIC_RELAXED));

    if ((used + n) * BLOCK_SIZE > vs->quota) {
      free (own);
      return cairn_fail (-ENOSPC, "volume '%s' would pass its quota of %" PRIu64
                         " bytes (it holds %" PRIu64 " with its snapshots): "
                         "delete snapshots or raise the quota", vs->name,
                         vs->quota, used * BLOCK_SIZE);
    }
  }
  /* One run for the whole write when there is one (long extents, one
   * device write); otherwise as many pieces as free space offers.
   */
  while (got < n) {
    uint64_t start, len = n - got, hint;

    if (npieces == cap) {
      size_t ncap = cap ? cap * 2 : 4;
      struct piece *np = realloc (piece, ncap * sizeof *np);
      if (np == NULL) {
        r = cairn_fail (-ENOMEM, "out of memory writing '%s'", vs->name);
        break;
      }
      piece = np;
      cap = ncap;
    }
    hint = data_hint (vs, sp);
    r = space_alloc (sp, len, hint, 0, &start);
    if (r == -ENOSPC)
      r = space_alloc_upto (sp, len, hint, 0, &start, &len);
    if (r < 0) {
      r = cairn_fail (-ENOSPC, "no space left in the pool for '%s': delete "
                      "snapshots or volumes, or grow the pool", vs->name);
      break;
    }
    __atomic_store_n (&vs->alloc_hint, start + len, __ATOMIC_RELAXED);
    piece[npieces].start = start;
    piece[npieces].len = len;
    npieces++;
    got += len;
  }
  if (r == 0) {
    if (own)
      sha256_blocks (data, n, own);
    txn_note_data (pool, n * BLOCK_SIZE);
    __atomic_add_fetch (&vs->gen_written, n * BLOCK_SIZE, __ATOMIC_RELAXED);
  }
  got = 0;
  for (size_t i = 0; r == 0 && i < npieces; i++) {
    struct cairn_dev *dev = pool_dev (pool);

    /* The cache now holds what was hashed here (dev.h, T3); digests a
     * caller gave are checked at the first read instead.
     */
    r = dev_pwrite_hashed (dev, data + got * BLOCK_SIZE,
                           piece[i].len * BLOCK_SIZE,
                           piece[i].start * BLOCK_SIZE,
                           own ? own + got * SHA256_LEN : NULL);
    got += piece[i].len;
  }
  if (r < 0) {
    for (size_t i = 0; i < npieces; i++)
      space_free (sp, piece[i].start, piece[i].len, birth);
    free (piece);
    free (own);
    return r;
  }

  btree_wrlock (vs->tree);
  r = punch_locked (vs, lbn, n, &held);
  got = 0;
  for (size_t i = 0; r == 0 && i < npieces; i++) {
    r = insert_extents (vs, lbn + got, piece[i].len, piece[i].start, birth,
                        shas + got * SHA256_LEN);
    if (r == 0 && logged (vs))
      pool_log_append (pool, &(struct pool_log_rec) {
          POOL_LOG_WRITE, vs->id, lbn + got, piece[i].len, piece[i].start,
          shas + got * SHA256_LEN });
    got += piece[i].len;
  }
  btree_unlock (vs->tree);
  drop_held (pool, &held);
  if (r == 0) {
    __atomic_add_fetch (&vs->referenced, (int64_t) n, __ATOMIC_RELAXED);
    __atomic_store_n (&vs->rec_dirty, true, __ATOMIC_RELAXED);
  }
  free (piece);
  free (own);
  return r;
}

/* Write whole blocks (NULL data: make them holes), with their digests
 * from sums when it is not NULL.
 */
static int
write_blocks (struct cairn_volume *v, uint64_t lbn, uint64_t n,
              const uint8_t *data, const uint8_t *sums)
{
  struct cairn_pool *pool = v->cat->pool;
  uint64_t i = 0;
  int r = txn_begin (pool);

  if (r < 0)
    return r;
  while (i < n && r == 0) {
    uint64_t j = i;
    bool zero = data == NULL || is_zero_block (data + i * BLOCK_SIZE);

    while (j < n && (data == NULL || is_zero_block (data + j * BLOCK_SIZE) == zero))
      j++;
    if (zero) {
      struct held held = { NULL, 0, 0 };

      btree_wrlock (v->vs->tree);
      r = punch_locked (v->vs, lbn + i, j - i, &held);
      if (r == 0 && logged (v->vs))
        pool_log_append (pool, &(struct pool_log_rec) {
            POOL_LOG_PUNCH, v->vs->id, lbn + i, j - i, 0, NULL });
      btree_unlock (v->vs->tree);
      drop_held (pool, &held);
    }
    else
      r = write_run (v, lbn + i, j - i, data + i * BLOCK_SIZE,
                     sums ? sums + i * SHA256_LEN : NULL);
    i = j;
  }
  txn_end (pool);
  return r;
}

/* Check that a handle may be written. */
static int
check_writable (struct cairn_volume *v)
{
  if (vol_is_readonly (v))
    return cairn_fail (-EROFS, "'%s%s%s' is read-only", v->info.name,
                       v->own_tree ? "@" : "", v->info.snap);
  return 0;
}

/* Write count bytes at off, of buf or zeros (a partial first or last block
 * is read, merged, rewritten; one the request leaves as it was is not);
 * sums, for whole blocks only, are their digests.  No check of the
 * handle or the range.
 */
static int
merge_write (struct cairn_volume *v, const void *buf, uint32_t count,
             uint64_t off, bool zero, const uint8_t *sums)
{
  uint64_t lbn = off / BLOCK_SIZE, end = DIV_ROUND_UP (off + count, BLOCK_SIZE);
  size_t len = (end - lbn) * BLOCK_SIZE;
  uint8_t *tmp;
  int r;

  if (off % BLOCK_SIZE == 0 && count % BLOCK_SIZE == 0)
    return write_blocks (v, lbn, end - lbn, zero ? NULL : buf, sums);
  tmp = malloc (len);
  if (tmp == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing '%s'", v->info.name);
  /* Concurrent partial writes to one block would lose one another's
   * bytes: serialise them.
   */
  pthread_mutex_lock (&v->vs->rmw_lock);
  r = read_blocks (v, lbn, 1, tmp);
  if (r == 0 && end - lbn > 1)
    r = read_blocks (v, end - 1, 1, tmp + len - BLOCK_SIZE);
  if (r == 0) {
    uint8_t first[BLOCK_SIZE], last[BLOCK_SIZE];
    uint64_t from = lbn, to = end;

    memcpy (first, tmp, BLOCK_SIZE);
    memcpy (last, tmp + len - BLOCK_SIZE, BLOCK_SIZE);
    if (zero)
      memset (tmp + off % BLOCK_SIZE, 0, count);
    else
      memcpy (tmp + off % BLOCK_SIZE, buf, count);
    /* A partial edge block the request leaves as it was is not
     * rewritten (zeroing bytes that are zero already, say): no new
     * data, nothing for diffs and snapshots to carry.
     */
    if (memcmp (tmp, first, BLOCK_SIZE) == 0)
      from++;
    if (to > from && memcmp (tmp + len - BLOCK_SIZE, last, BLOCK_SIZE) == 0)
      to--;
    if (to > from)
      r = write_blocks (v, from, to - from, tmp + (from - lbn) * BLOCK_SIZE,
                        NULL);
  }
  pthread_mutex_unlock (&v->vs->rmw_lock);
  free (tmp);
  return r;
}

/* Write bytes through a handle: checked, counted, FUA honoured.  A write
 * that finds the pool (or the volume's quota) full first makes the
 * checkpoint collector give back what only checkpoints hold, oldest first
 * beyond their policy, and tries again (checkpoint.c, "Collection"): a
 * client gets ENOSPC only when no checkpoint is left to drop.
 */
static int
write_bytes (struct cairn_volume *v, const void *buf, uint32_t count,
             uint64_t off, unsigned flags, bool zero, const uint8_t *sums)
{
  int r = check_writable (v);

  if (r == 0)
    r = check_range (v, count, off);
  /* A snapshot of the volume requested before this write holds it out
   * (SB-1 in catalog-snap.c).
   */
  if (r == 0 && count > 0)
    snap_barrier_wait (v->cat, v->vs->id);
  if (r == 0 && count > 0)
    r = merge_write (v, buf, count, off, zero, sums);
  for (int tries = 0; r == -ENOSPC && tries < 8; tries++) {
    char why[512];
    uint64_t dropped = 0;
    bool pool_low = ckpt_space_low (v->cat);

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    if (ckpt_relieve (v->cat, pool_low ? NULL : v->vs, true, &dropped) < 0 ||
        dropped == 0) {
      r = cairn_fail (-ENOSPC, "%s", why);
      break;
    }
    r = merge_write (v, buf, count, off, zero, sums);
  }
  if (r == 0 && count > 0 && (flags & VOL_FUA))
    r = pool_log_flush (v->cat->pool);
  if (r < 0)
    COUNT (v, errors, 1);
  return r;
}

/* Zero the bytes of the last block past the end of a volume whose size is
 * not a whole number of blocks (volume.h).  They are not part of the
 * volume, so no client writes them meanwhile; merge_write leaves the block
 * as it is when they are zeros already.
 */
int
vol_zero_tail (struct cairn_volume *v)
{
  uint64_t size = vol_size (v);
  uint32_t keep = (uint32_t) (size % BLOCK_SIZE);

  return keep ? merge_write (v, NULL, BLOCK_SIZE - keep, size, true, NULL) : 0;
}

int
vol_pwrite (struct cairn_volume *v, const void *buf, uint32_t count,
            uint64_t off, unsigned flags)
{
  int r = write_bytes (v, buf, count, off, flags, false, NULL);

  if (r == 0) {
    COUNT (v, writes, 1);
    COUNT (v, bytes_written, count);
  }
  return r;
}

/* Write whole blocks whose digests the caller has (a received stream's). */
int
vol_pwrite_sums (struct cairn_volume *v, const void *buf, uint32_t count,
                 uint64_t off, const uint8_t *sums, unsigned flags)
{
  int r;

  if (off % BLOCK_SIZE || count % BLOCK_SIZE) {
    COUNT (v, errors, 1);
    return cairn_fail (-EINVAL, "write with digests at [%" PRIu64 ", +%"
                       PRIu32 ") of '%s' is not in whole %d-byte blocks: "
                       "use vol_pwrite", off, count, v->info.name, BLOCK_SIZE);
  }
  r = write_bytes (v, buf, count, off, flags, false, sums);

  if (r == 0) {
    COUNT (v, writes, 1);
    COUNT (v, bytes_written, count);
  }
  return r;
}

int
vol_zero (struct cairn_volume *v, uint32_t count, uint64_t off, unsigned flags)
{
  int r = write_bytes (v, NULL, count, off, flags, true, NULL);

  if (r == 0 && !(flags & VOL_MORE))
    COUNT (v, zeros, 1);
  if (r == 0)
    COUNT (v, bytes_zeroed, count);
  return r;
}

int
vol_trim (struct cairn_volume *v, uint32_t count, uint64_t off, unsigned flags)
{
  int r = write_bytes (v, NULL, count, off, flags, true, NULL);

  if (r == 0 && !(flags & VOL_MORE))
    COUNT (v, trims, 1);
  if (r == 0)
    COUNT (v, bytes_trimmed, count);
  return r;
}

/* A FLUSH: the intent log's, which commits when the pool logs nothing. */
int
vol_flush (struct cairn_volume *v)
{
  int r = pool_log_flush (v->cat->pool);

  COUNT (v, flushes, r == 0);
  COUNT (v, errors, r < 0);
  return r;
}

/* Re-make one change of the intent log in the open generation
 * (pool_log_replay's apply; txn-log.c, IL-6 and IL-7), its data blocks
 * claimed already: 0 done, 1 to end the replay at a record that does not
 * fit the pool, 2 for a record of a volume the last commit deleted,
 * dropped (pool_log_replay gives back what either leaves unused).
 */
static int
replay_apply (void *opaque, const struct pool_log_rec *rec)
{
  struct catalog *cat = opaque;
  struct volstate *vs;
  uint64_t blocks;
  int r;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, rec->tree);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL || (vs->flags & VOLF_HIDDEN))
    return 2;
  blocks = DIV_ROUND_UP (__atomic_load_n (&vs->size, __ATOMIC_RELAXED),
                         BLOCK_SIZE);
  if ((vs->flags & VOLF_PARTIAL) || rec->lbn >= blocks ||
      rec->n > blocks - rec->lbn)
    return 1;
  btree_wrlock (vs->tree);
  r = punch_locked (vs, rec->lbn, rec->n, NULL);
  if (r == 0 && rec->type == POOL_LOG_WRITE)
    r = insert_extents (vs, rec->lbn, rec->n, rec->addr,
                        pool_open_gen (cat->pool), rec->shas);
  btree_unlock (vs->tree);
  if (r == 0 && rec->type == POOL_LOG_WRITE)
    __atomic_add_fetch (&vs->referenced, (int64_t) rec->n, __ATOMIC_RELAXED);
  __atomic_store_n (&vs->rec_dirty, true, __ATOMIC_RELAXED);
  return r;
}

/* Replay the pool's intent log into the catalog's volumes (catalog_get,
 * before anything else can write them).
 */
int
vol_log_replay (struct catalog *cat, uint64_t *applied)
{
  return pool_log_replay (cat->pool, replay_apply, cat, applied);
}

/* Read and check a range, keeping no data (at most 1 MiB at a time). */
int
vol_cache (struct cairn_volume *v, uint32_t count, uint64_t off,
           unsigned flags)
{
  uint64_t lbn = off / BLOCK_SIZE, end = DIV_ROUND_UP (off + count, BLOCK_SIZE);
  const uint64_t chunk = (1u << 20) / BLOCK_SIZE;
  uint8_t *buf = NULL;
  int r = check_range (v, count, off);

  if (r == 0 && count > 0 && (buf = malloc (chunk * BLOCK_SIZE)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory caching '%s'", v->info.name);
  for (; r == 0 && count > 0 && lbn < end; lbn += chunk)
    r = read_blocks (v, lbn, MIN (chunk, end - lbn), buf);
  free (buf);
  COUNT (v, caches, r == 0 && !(flags & VOL_MORE));
  COUNT (v, errors, r < 0);
  return r;
}

/* Block status of [off, off + count). */
int
vol_extents (struct cairn_volume *v, uint32_t count, uint64_t off,
             int (*fn) (void *opaque, uint64_t off, uint64_t len, unsigned type),
             void *opaque)
{
  uint64_t lbn = off / BLOCK_SIZE, end = DIV_ROUND_UP (off + count, BLOCK_SIZE);
  uint64_t pos = off, stop = off + count;
  struct map_vec mv = { NULL, 0, 0 };
  int r = check_range (v, count, off);

  if (r == 0 && count > 0)
    r = map_range (v, lbn, end - lbn, &mv, NULL);
  for (size_t i = 0; r == 0 && i <= mv.n; i++) {
    uint64_t dstart = i < mv.n ? mv.m[i].lbn * BLOCK_SIZE : stop;
    uint64_t dend = i < mv.n ? (mv.m[i].lbn + mv.m[i].n) * BLOCK_SIZE : stop;

    /* Adjacent mapped runs make one data run. */
    while (i + 1 < mv.n && mv.m[i + 1].lbn * BLOCK_SIZE == dend) {
      i++;
      dend = (mv.m[i].lbn + mv.m[i].n) * BLOCK_SIZE;
    }
    dstart = MAX (dstart, off);
    dend = MIN (dend, stop);
    if (dstart > pos)
      r = fn (opaque, pos, dstart - pos, VOL_EXTENT_HOLE);
    if (r == 0 && dend > dstart)
      r = fn (opaque, dstart, dend - dstart, 0);
    pos = MAX (pos, dend);
  }
  map_vec_free (&mv);
  COUNT (v, extents, r == 0);
  COUNT (v, errors, r < 0);
  return r;
}
