/* Cairn engine: the catalog's pins, snapshots and deletes (catalog.c has
 * the core): pin records, taking, renaming and deleting snapshots,
 * deleting volumes, and the deletes deferred while clients have the state
 * open (design note below).
 *
 * Pins (DESIGN §2.4): a volume's state at generation g stays readable while
 * a pin record (RK_PIN, id, g) exists; it counts the snapshots and clones
 * that need it and holds the root of that state.  Removing the last reason
 * for a pin hands its unique blocks to reclaim.c.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include "catalog-int.h"

/* ---------------------------------------------------------------- pins */

/* Read a pin record into pr (catalog-int.h has the layout). */
int
cat_read_pin (struct catalog *cat, uint64_t id, uint64_t gen,
              struct pinrec *pr)
{
  uint8_t key[17], val[PINREC_LEN];
  size_t len;
  int r;

  cat_key (key, RK_PIN, id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &len);
  if (r < 0)
    return r;
  if (len != PINREC_LEN || (val[PINREC_FLAGS] & ~PINF_ALL))
    return cairn_fail (-EIO, "corrupt pin record (volume %" PRIu64 ", generation "
                       "%" PRIu64 ")", id, gen);
  pr->snaps = get_le32 (val);
  pr->clones = get_le32 (val + 4);
  blkptr_decode (val + 8, &pr->root.bp);
  pr->root.level = val[56];
  pr->ckpt = (val[PINREC_FLAGS] & PINF_CKPT) != 0;
  return 0;
}

/* Read a pin record's counts and root (each may be NULL). */
int
cat_lookup_pin (struct catalog *cat, uint64_t id, uint64_t gen,
                uint32_t *snaps, uint32_t *clones, struct btree_root *root)
{
  struct pinrec pr;
  int r = cat_read_pin (cat, id, gen, &pr);

  if (r < 0)
    return r;
  if (snaps)
    *snaps = pr.snaps;
  if (clones)
    *clones = pr.clones;
  if (root)
    *root = pr.root;
  return 0;
}

/* Write pin record (id, gen). */
static int
pin_store (struct catalog *cat, uint64_t id, uint64_t gen,
           const struct pinrec *pr)
{
  uint8_t key[17], val[PINREC_LEN] = { 0 };

  put_le32 (val, pr->snaps);
  put_le32 (val + 4, pr->clones);
  blkptr_encode (&pr->root.bp, val + 8);
  val[56] = pr->root.level;
  val[PINREC_FLAGS] = pr->ckpt ? PINF_CKPT : 0;
  cat_key (key, RK_PIN, id, gen);
  return cat_root_put (cat, key, 17, val, sizeof val);
}

/* Add a reason (why) to pin (vs, gen) at root; an existing pin keeps its
 * root.  A checkpoint is one reason at most.
 */
int
pin_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
         const struct btree_root *root, enum pin_why why)
{
  struct pinrec pr = { .root = *root };
  int r = cat_read_pin (cat, vs->id, gen, &pr);

  if (r < 0 && r != -ENOENT)
    return r;
  if (r == -ENOENT)
    pr = (struct pinrec) { .root = *root };
  switch (why) {
  case PIN_SNAP: pr.snaps++; break;
  case PIN_CLONE: pr.clones++; break;
  case PIN_CKPT: pr.ckpt = true; break;
  }
  r = pin_store (cat, vs->id, gen, &pr);
  if (r == 0 && gen > vs->max_pin)
    __atomic_store_n (&vs->max_pin, gen, __ATOMIC_RELEASE);
  return r;
}

/* Drop a reason (why) to pin (vs, gen); the last one frees what was
 * unique to the state (RC-3).
 */
int
pin_release (struct catalog *cat, struct volstate *vs, uint64_t gen,
             enum pin_why why)
{
  uint8_t key[17];
  struct pinrec pr;
  int r = cat_read_pin (cat, vs->id, gen, &pr);

  if (r < 0)
    return r;
  switch (why) {
  case PIN_SNAP: pr.snaps--; break;
  case PIN_CLONE: pr.clones--; break;
  case PIN_CKPT: pr.ckpt = false; break;
  }
  if (pr.snaps + pr.clones > 0 || pr.ckpt)
    return pin_store (cat, vs->id, gen, &pr);
  cat_key (key, RK_PIN, vs->id, gen);
  r = reclaim_pin_removed (cat, vs, gen);
  if (r == 0)
    r = cat_root_del (cat, key, 17);
  if (r == 0)
    r = reclaim_max_pin (cat, vs->id, &vs->max_pin);
  return r;
}

/* State of cat_foreach_pin. */
struct pin_walk {
  int (*fn) (void *opaque, uint64_t gen, const uint8_t *rec, size_t len);
  void *opaque;
};

static int
pin_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
          size_t vl)
{
  struct pin_walk *pw = opaque;

  if (kl != 17)
    return 1;
  return pw->fn (pw->opaque, get_be64 (k + 9), v, vl) != 0;
}

/* Call fn for each pin record of volume id, oldest first, with its
 * generation and record; a non-zero return from fn stops the walk (and is
 * not an error: the walk then returns 0).
 */
int
cat_foreach_pin (struct catalog *cat, uint64_t id,
                 int (*fn) (void *opaque, uint64_t gen, const uint8_t *rec,
                            size_t len),
                 void *opaque)
{
  struct pin_walk pw = { fn, opaque };
  uint8_t key[17];

  cat_key (key, RK_PIN, id, 0);
  return cat_foreach_prefix (cat, key, 9, pin_item, &pw);
}

/* cat_foreach_pin callback: stop at the first pin. */
static int
any_pin (void *opaque, uint64_t gen, const uint8_t *rec, size_t len)
{
  bool *yes = opaque;

  (void) gen, (void) rec, (void) len;
  *yes = true;
  return 1;
}

/* Must some state of this volume stay: a clone's origin, or a snapshot
 * deleted while open?
 */
static int
has_pins (struct catalog *cat, uint64_t id, bool *yes)
{
  *yes = false;
  return cat_foreach_pin (cat, id, any_pin, yes);
}

/* ---------------------------------------------------------------- deferred deletes
 *
 * Deleting a snapshot or a volume that clients have open takes its name
 * away at once (nothing new can open it, listings no longer show it), but
 * what it holds stays readable, and a live volume writable, for the
 * handles already open until the last one closes:
 *
 *   snapshot  its records go; its pin keeps its reason, and an RK_DEFER
 *             record counts the reasons to drop once no handle has the
 *             pinned state open
 *   volume    its snapshots go as above, its name goes, and it is hidden
 *             (VOLF_HIDDEN) like a volume that clones still start from; it
 *             is destroyed once it has no handle and no pin left
 *
 * cat_settle() does both in a freeze: when a handle closes on such a state
 * (cat_settle_soon) and at the first commit after the catalog loads, since
 * after a restart nothing is open.  Checking that a pin has no handle and
 * releasing it happen under tlock, and vol_open looks a pin up and counts
 * its handle under tlock too, so no handle can open a pin being released.
 */

/* Handles open on the pinned state (id, gen), or NULL (tlock held). */
struct open_pin *
cat_open_pin (struct catalog *cat, uint64_t id, uint64_t gen)
{
  for (size_t i = 0; i < cat->nopen_pins; i++)
    if (cat->open_pins[i].id == id && cat->open_pins[i].gen == gen)
      return &cat->open_pins[i];
  return NULL;
}

/* Count one more snapshot reason of pin (id, gen) to drop later. */
static int
defer_pin (struct catalog *cat, struct volstate *vs, uint64_t gen,
           struct open_pin *op)
{
  uint8_t key[17], val[4];
  size_t vlen;
  uint32_t n = 0;
  int r;

  cat_key (key, RK_DEFER, vs->id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &vlen);
  if (r == 0 && vlen == 4)
    n = get_le32 (val);
  else if (r != -ENOENT)
    return r < 0 ? r : cairn_fail (-EIO, "corrupt deferred-delete record");
  put_le32 (val, n + 1);
  op->deferred = true;
  return cat_root_put (cat, key, 17, val, 4);
}

/* Delete a snapshot by generation: its records, and its pin reason now, or
 * once no handle has it open.
 */
static int
drop_snapshot (struct catalog *cat, struct volstate *vs, uint64_t sgen,
               const char *snap)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX];
  struct open_pin *op;
  int r;

  cat_key (key, RK_SNAP, vs->id, sgen);
  r = cat_root_del (cat, key, 17);
  if (r == 0 && *snap)      /* "": a damaged record that no name names */
    r = cat_root_del (cat, key, name_key (key, RK_SNAPNAME, &vs->id, snap));
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  op = cat_open_pin (cat, vs->id, sgen);
  if (op && op->opens > 0)
    r = defer_pin (cat, vs, sgen, op);
  else
    r = pin_release (cat, vs, sgen, PIN_SNAP);
  pthread_mutex_unlock (&cat->tlock);
  return r;
}

/* Delete a volume nothing needs any more: its blocks are reclaimed in the
 * background (reaper.c); release its origin.
 */
int
destroy_volume (struct catalog *cat, struct volstate *vs, uint64_t gen)
{
  uint8_t key[17];
  uint64_t origin_id = vs->origin_id, origin_gen = vs->origin_gen;
  struct volstate *origin;
  int r;

  r = drop_props (cat, vs->id);
  if (r == 0)
    r = reaper_begin (cat, vs);
  cat_key (key, RK_VOL, vs->id, 0);
  if (r == 0)
    r = cat_root_del (cat, key, 9);
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  origin = origin_id ? cat_find_id_locked (cat, origin_id) : NULL;
  table_remove (cat, vs);
  pthread_mutex_unlock (&cat->tlock);
  /* No origin: none, or one whose record is damaged, whose pin keeps
   * this clone's reason (DV-2).
   */
  if (origin == NULL)
    return 0;
  r = pin_release (cat, origin, origin_gen, PIN_CLONE);
  if (r == 0 && (origin->flags & VOLF_HIDDEN) && origin->opens == 0) {
    bool pins;
    r = has_pins (cat, origin->id, &pins);
    if (r == 0 && !pins)
      r = destroy_volume (cat, origin, gen);
  }
  return r;
}

/* Delete a volume (request). */
int
apply_delete (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  uint8_t key[1 + VOL_NAME_MAX];
  struct snaplist *sl;
  struct volstate *vs = NULL;
  bool pins;
  int opens, r;

  r = cat_undeletable (cat, req->name);
  if (r == 0)
    r = need_volume (cat, req->name, &vs);
  if (r < 0)
    return r;
  sl = calloc (1, sizeof *sl);
  if (sl == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  r = list_snaps (cat, vs->id, sl);
  if (r == 0 && sl->n > 0 && !(req->flags & VOL_DELETE_RECURSIVE))
    r = cairn_fail (-EBUSY, "volume '%s' has %zu snapshot%s: delete %s first "
                    "or use --recursive", vs->name, sl->n,
                    sl->n == 1 ? "" : "s", sl->n == 1 ? "it" : "them");
  for (size_t i = 0; r == 0 && i < sl->n; i++)
    r = drop_snapshot (cat, vs, sl->gen[i], sl->name[i]);
  snaplist_free (sl);
  if (r == 0)
    r = cat_root_del (cat, key, name_key (key, RK_NAME, NULL, vs->name));
  if (r == 0)
    r = ckpt_drop_all (cat, vs);        /* CK-5 */
  if (r == 0)
    r = has_pins (cat, vs->id, &pins);
  if (r < 0)
    return r;
  /* Hidden under tlock: from here no vol_open finds it, so the count of
   * handles read with it can only fall.
   */
  pthread_mutex_lock (&cat->tlock);
  vs->flags |= VOLF_HIDDEN;
  opens = vs->opens;
  pthread_mutex_unlock (&cat->tlock);
  if (pins || opens > 0)
    /* Clones still start from it, or clients have it open: keep it
     * hidden until the last of them goes (cat_settle).
     */
    return volrec_store (cat, vs);
  return destroy_volume (cat, vs, gen);
}

/* An RK_DEFER record, read before acting on it. */
struct deferred {
  uint64_t id, gen;
  uint32_t n;
};

/* State of list_deferred. */
struct deferred_list {
  struct deferred *d;
  size_t max, n;
};

static int
deferred_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
               size_t vl)
{
  struct deferred_list *dl = opaque;

  if (kl != 17 || vl != 4)
    return cairn_fail (-EIO, "corrupt deferred-delete record (key %zu, value "
                       "%zu bytes)", kl, vl);
  dl->d[dl->n++] = (struct deferred) { get_be64 (k + 1), get_be64 (k + 9),
                                       get_le32 (v) };
  return dl->n == dl->max;
}

/* Read up to max RK_DEFER records. */
static int
list_deferred (struct catalog *cat, struct deferred *d, size_t max, size_t *np)
{
  struct deferred_list dl = { d, max, 0 };
  uint8_t key[1] = { RK_DEFER };
  int r = cat_foreach_prefix (cat, key, 1, deferred_item, &dl);

  *np = dl.n;
  return r;
}

/* Finish the deletes that waited for handles to close (see above). */
int
cat_settle (struct catalog *cat, uint64_t gen)
{
  struct deferred d[64];
  size_t n, kept = 0;
  bool again = true;
  int r;

  /* Snapshot pin reasons whose state nobody has open any more. */
  do {
    r = list_deferred (cat, d, ARRAY_SIZE (d), &n);
    for (size_t i = kept; r == 0 && i < n; i++) {
      struct volstate *vs;
      struct open_pin *op;
      uint8_t key[17];

      pthread_mutex_lock (&cat->tlock);
      vs = cat_find_id_locked (cat, d[i].id);
      op = cat_open_pin (cat, d[i].id, d[i].gen);
      if (vs == NULL && cat_damaged_id (cat, d[i].id))
        kept++;               /* its volume's record is damaged: left as
                                 it is (DV-2) */
      else if (vs == NULL)
        r = cairn_fail (-EIO, "deferred-delete record of unknown volume %"
                        PRIu64, d[i].id);
      else if (op && op->opens > 0)
        kept++;               /* still open: its close settles it */
      else {
        for (uint32_t j = 0; j < d[i].n && r == 0; j++)
          r = pin_release (cat, vs, d[i].gen, PIN_SNAP);
        cat_key (key, RK_DEFER, d[i].id, d[i].gen);
        if (r == 0)
          r = cat_root_del (cat, key, 17);
        if (op)
          op->deferred = false;
      }
      pthread_mutex_unlock (&cat->tlock);
    }
  } while (r == 0 && n == ARRAY_SIZE (d) && kept < n);

  /* Hidden volumes with neither handles nor pins left, once the
   * checkpoints that were open when they were deleted are gone (CK-5).
   */
  while (r == 0 && again) {
    struct volstate *doomed = NULL;

    again = false;
    pthread_mutex_lock (&cat->tlock);
    for (size_t i = 0; i < cat->nvols && doomed == NULL; i++) {
      struct volstate *vs = cat->vols[i];
      bool pins = true;

      if ((vs->flags & (VOLF_HIDDEN | VOLF_PARTIAL)) != VOLF_HIDDEN ||
          vs->opens != 0)
        continue;
      pthread_mutex_unlock (&cat->tlock);
      r = ckpt_drop_all (cat, vs);
      pthread_mutex_lock (&cat->tlock);
      if (r == 0 && (r = has_pins (cat, vs->id, &pins)) == 0 && !pins)
        doomed = vs;
      if (r < 0)
        break;
    }
    pthread_mutex_unlock (&cat->tlock);
    if (doomed) {
      r = destroy_volume (cat, doomed, gen);
      again = true;
    }
  }
  return r;
}

/* Let the next commit settle deferred deletes. */
void
cat_settle_soon (struct catalog *cat)
{
  __atomic_store_n (&cat->settle, true, __ATOMIC_RELEASE);
  /* No txn_begin: that waits for the space map, and the catalog loads
   * when a restarted server's first client opens an export.
   */
  txn_mark_dirty (cat->pool);
}

/* ---------------------------------------------------------------- snapshots */

/* A new snapshot GUID: random, never 0. */
static int
new_guid (uint64_t *guidp)
{
  do {
    if (getrandom (guidp, sizeof *guidp, 0) != sizeof *guidp)
      return cairn_fail (-errno, "getrandom: %m");
  } while (*guidp == 0);
  return 0;
}

/* Add snapshot vs@name at the end of generation gen: its records and a pin
 * of the tree's (frozen) root.
 */
int
snap_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
          const char *name, uint64_t guid, uint64_t ctime)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], val[SNAPREC_FIXED + VOL_NAME_MAX], gv[8];
  struct snaprec sr = {
    .ctime = ctime, .size = vs->size, .guid = guid,
    .referenced = (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED),
  };
  struct btree_root root;
  int r;

  snprintf (sr.name, sizeof sr.name, "%s", name);
  btree_get_root (vs->tree, &root);
  cat_key (key, RK_SNAP, vs->id, gen);
  r = cat_root_put (cat, key, 17, val, snaprec_encode (&sr, val));
  put_le64 (gv, gen);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_SNAPNAME, &vs->id, name), gv, 8);
  if (r == 0)
    r = pin_add (cat, vs, gen, &root, PIN_SNAP);
  return r;
}

/* Make checkpoint req->name ("VOL@#GEN" or "VOL@TIME") snapshot req->snap
 * (checkpoint.c's vol_checkpoint_promote): the snapshot has the
 * checkpoint's time, size and root, and pins the state as a snapshot does
 * (CK-4: the collector never drops it).
 */
int
apply_ckpt_promote (struct catalog *cat, struct cat_request *req,
                    uint64_t gen)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], val[SNAPREC_FIXED + VOL_NAME_MAX], gv[8];
  char vol[VOL_NAME_MAX + 1];
  const char *at = strchr (req->name, '@');
  struct volstate *vs = NULL;
  struct vol_checkpoint c;
  struct vol_info si;
  struct pinrec pr;
  struct snaprec sr = { .ctime = 0 };
  uint64_t cgen = 0;
  int r;

  (void) gen;
  if (at == NULL || (size_t) (at - req->name) > VOL_NAME_MAX)
    return cairn_fail (-EINVAL, "'%s': name a checkpoint as VOL@#GEN or "
                       "VOL@YYYY-MM-DDTHH:MM:SSZ", req->name);
  memcpy (vol, req->name, (size_t) (at - req->name));
  vol[at - req->name] = '\0';
  r = need_volume (cat, vol, &vs);
  if (r == 0)
    r = cat_lookup_point (cat, vs->id, vol, at + 1, &cgen);
  if (r < 0)
    return r;
  r = cat_read_pin (cat, vs->id, cgen, &pr);
  if (r == -ENOENT || (r == 0 && !pr.ckpt))
    return cairn_fail (-ENOENT, "volume '%s' has no checkpoint at generation "
                       "%" PRIu64 " (cairn checkpoint list %s shows the "
                       "ones kept)", vol, cgen, vol);
  if (r == 0 && (r = cat_read_snap (cat, vs->id, cgen, &si)) == 0)
    return cairn_fail (-EEXIST, "the state of '%s' at generation %" PRIu64
                       " is snapshot '%s' already", vol, cgen, si.snap);
  if (r == -ENOENT)
    r = snap_name_free (cat, vs, req->snap);
  if (r == 0)
    r = ckpt_read (cat, vs->id, cgen, &c);
  if (r < 0)
    return r;
  /* The checkpoint's GUID: a receiver that got it sent as a checkpoint
   * has the same state under it.
   */
  sr.guid = ckpt_guid (cat, vs->id, cgen);
  sr.ctime = c.ctime;
  sr.size = c.size;
  sr.referenced = c.referenced / BLOCK_SIZE;
  snprintf (sr.name, sizeof sr.name, "%s", req->snap);
  cat_key (key, RK_SNAP, vs->id, cgen);
  r = cat_root_put (cat, key, 17, val, snaprec_encode (&sr, val));
  put_le64 (gv, cgen);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_SNAPNAME, &vs->id, req->snap),
                      gv, 8);
  if (r == 0)
    r = pin_add (cat, vs, cgen, &pr.root, PIN_SNAP);
  req->out_id = cgen;
  return r;
}

/* Refuse a snapshot name that vs has already. */
int
snap_name_free (struct catalog *cat, struct volstate *vs, const char *name)
{
  uint64_t sgen;
  int r = cat_lookup_snap (cat, vs->id, name, &sgen);

  if (r == 0)
    return cairn_fail (-EEXIST, "volume '%s' has a snapshot named '%s' already",
                       vs->name, name);
  return r == -ENOENT ? 0 : r;
}

/* Snapshot volumes, all or none. */
int
apply_snap (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  struct volstate *vss[64];
  uint64_t guids[64];
  int r;

  if (req->nvols > ARRAY_SIZE (vss))
    return cairn_fail (-E2BIG, "at most %zu volumes in one snapshot",
                       ARRAY_SIZE (vss));
  for (size_t i = 0; i < req->nvols; i++) {
    r = need_volume (cat, req->vols[i], &vss[i]);
    if (r < 0)
      return r;
    for (size_t j = 0; j < i; j++)
      if (vss[j] == vss[i])
        return cairn_fail (-EINVAL, "volume '%s' is named twice", req->vols[i]);
    r = snap_name_free (cat, vss[i], req->snap);
    if (r == 0)
      r = new_guid (&guids[i]);
    if (r < 0)
      return r;
  }
  for (size_t i = 0; i < req->nvols; i++) {
    r = snap_add (cat, vss[i], gen, req->snap, guids[i], (uint64_t) time (NULL));
    if (r < 0)
      return r;
  }
  return 0;
}

/* Delete or rename a snapshot. */
int
apply_snap_change (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], gv[8];
  struct volstate *vs = NULL;
  uint64_t sgen;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  r = cat_lookup_snap (cat, vs->id, req->snap, &sgen);
  if (r == -ENOENT)
    return cat_no_snapshot (vs->name, req->snap);
  if (r < 0)
    return r;
  if (req->kind == REQ_SNAP_DELETE)
    return drop_snapshot (cat, vs, sgen, req->snap);

  r = snap_name_free (cat, vs, req->name2);
  if (r < 0)
    return r;
  {
    uint8_t val[SNAPREC_FIXED + VOL_NAME_MAX];
    struct snaprec sr;
    size_t vlen;

    cat_key (key, RK_SNAP, vs->id, sgen);
    r = cat_root_get (cat, key, 17, val, sizeof val, &vlen);
    if (r == 0)
      r = snaprec_decode (val, vlen, vs->id, sgen, &sr);
    if (r < 0)
      return r;
    snprintf (sr.name, sizeof sr.name, "%s", req->name2);
    r = cat_root_put (cat, key, 17, val, snaprec_encode (&sr, val));
  }
  if (r == 0)
    r = cat_root_del (cat, key, name_key (key, RK_SNAPNAME, &vs->id, req->snap));
  put_le64 (gv, sgen);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_SNAPNAME, &vs->id, req->name2), gv, 8);
  return r;
}

/* ---------------------------------------------------------------- barriers
 *
 * SB-1  A snapshot holds exactly the writes that began before it was
 *       requested (DESIGN.md §2.3), and so does a clone of a live volume.
 *       snap_create_many (vol_clone) raises a barrier on each of its
 *       volumes before it submits the request; a write to a
 *       volume with a barrier waits (snap_barrier_wait, in write_bytes,
 *       holding no lock) until the freeze that applies the request lowers
 *       it, and then lands in the next generation.  Writes that began
 *       before the barrier finish before the freeze (TX-6) and are in the
 *       snapshot.  The wait is that freeze's: since TX-7 it does not wait
 *       for a running commit's I/O, only for a freeze in progress (or, with
 *       two generations in flight already, for the older one's I/O).
 */

int
snap_barrier_raise (struct catalog *cat, const uint64_t *ids, size_t n)
{
  if (n == 0)
    return 0;
  pthread_mutex_lock (&cat->barrier_lock);
  if (cat->nbarrier + n > cat->barrier_cap) {
    size_t cap = MAX (2 * cat->barrier_cap, cat->nbarrier + n);
    uint64_t *b = realloc (cat->barrier_ids, cap * sizeof *b);

    if (b == NULL) {
      pthread_mutex_unlock (&cat->barrier_lock);
      return cairn_fail (-ENOMEM, "out of memory taking a snapshot");
    }
    cat->barrier_ids = b;
    cat->barrier_cap = cap;
  }
  memcpy (cat->barrier_ids + cat->nbarrier, ids, n * sizeof *ids);
  __atomic_store_n (&cat->nbarrier, cat->nbarrier + n, __ATOMIC_RELEASE);
  pthread_mutex_unlock (&cat->barrier_lock);
  return 0;
}

void
snap_barrier_lower (struct catalog *cat, struct cat_request *req)
{
  size_t n = __atomic_exchange_n (&req->nbarrier, 0, __ATOMIC_ACQ_REL);
  const uint64_t *ids = req->barrier;
  size_t left;

  if (n == 0)
    return;                     /* none raised, or lowered already */
  pthread_mutex_lock (&cat->barrier_lock);
  left = cat->nbarrier;
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < left; j++)
      if (cat->barrier_ids[j] == ids[i]) {
        cat->barrier_ids[j] = cat->barrier_ids[--left];
        break;
      }
  __atomic_store_n (&cat->nbarrier, left, __ATOMIC_RELEASE);
  pthread_cond_broadcast (&cat->barrier_cond);
  pthread_mutex_unlock (&cat->barrier_lock);
}

/* Whether a barrier is raised for id (barrier_lock held). */
static bool
barrier_raised (const struct catalog *cat, uint64_t id)
{
  for (size_t j = 0; j < cat->nbarrier; j++)
    if (cat->barrier_ids[j] == id)
      return true;
  return false;
}

void
snap_barrier_wait (struct catalog *cat, uint64_t id)
{
  if (__atomic_load_n (&cat->nbarrier, __ATOMIC_ACQUIRE) == 0)
    return;
  pthread_mutex_lock (&cat->barrier_lock);
  while (barrier_raised (cat, id))
    pthread_cond_wait (&cat->barrier_cond, &cat->barrier_lock);
  pthread_mutex_unlock (&cat->barrier_lock);
}
