/* Cairn engine: the catalog's public calls (volume.h; catalog.c has the
 * core).  A change checks its arguments and submits its request
 * (cat_submit), which the next commit's freeze applies; the listings,
 * stat and properties read the table of volume states and the root tree.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"

/* ---------------------------------------------------------------- API */

int
vol_create (struct cairn_pool *pool, const char *name, uint64_t size,
            uint64_t *idp)
{
  struct cat_request req = { .kind = REQ_CREATE, .name = name, .size = size };
  int r = vol_check_name (name);

  if (r < 0)
    return r;
  if (size == 0 || size % 512)
    return cairn_fail (-EINVAL, "volume size %" PRIu64 " must be a positive "
                       "multiple of 512 bytes", size);
  r = cat_submit (pool, &req);
  if (r == 0 && idp)
    *idp = req.out_id;
  return r;
}

int
vol_delete (struct cairn_pool *pool, const char *name, unsigned flags)
{
  struct cat_request req = { .kind = REQ_DELETE, .name = name, .flags = flags };

  return cat_submit (pool, &req);
}

int
vol_rename (struct cairn_pool *pool, const char *from, const char *to)
{
  struct cat_request req = { .kind = REQ_RENAME, .name = from, .name2 = to };
  int r = vol_check_name (to);

  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_resize (struct cairn_pool *pool, const char *name, uint64_t size, bool force)
{
  struct cat_request req = { .kind = REQ_RESIZE, .name = name, .size = size,
                             .flag = force };
  struct cairn_volume *v;

  if (size == 0 || size % 512)
    return cairn_fail (-EINVAL, "volume size %" PRIu64 " must be a positive "
                       "multiple of 512 bytes", size);
  /* Growing from inside a block: first zero that block past the old end,
   * which a shrink may have left as it was.  (A name that does not open
   * gets its error from the request.)
   */
  if (vol_open (pool, name, &v) == 0) {
    int r = 0;

    if (vol_size (v) < size)
      r = vol_zero_tail (v);
    vol_close (v);
    if (r < 0)
      return r;
  }
  return cat_submit (pool, &req);
}

int
vol_set_readonly (struct cairn_pool *pool, const char *name, bool ro)
{
  struct cat_request req = { .kind = REQ_READONLY, .name = name, .flag = ro };

  return cat_submit (pool, &req);
}

/* The ids of the volumes named, for the snapshot barrier (SB-1 in
 * catalog-snap.c); a name that is no volume gets none (the request fails
 * on it with the right message).
 */
static void
barrier_ids (struct catalog *cat, const char *const *vols, size_t nvols,
             uint64_t *ids, size_t *n)
{
  *n = 0;
  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < nvols; i++) {
    struct volstate *vs = cat_find_name (cat, vols[i]);

    if (vs)
      ids[(*n)++] = vs->id;
  }
  pthread_mutex_unlock (&cat->tlock);
}

/* Submit req, a change that takes the state of the live volumes named
 * (a snapshot, a clone of a live volume), behind a snapshot barrier on
 * them: writes to them that begin from now on wait for the freeze that
 * applies it (SB-1 in catalog-snap.c).
 */
static int
submit_with_barrier (struct cairn_pool *pool, struct cat_request *req,
                     const char *const *vols, size_t nvols)
{
  struct catalog *cat;
  size_t n;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  req->barrier = malloc (nvols * sizeof *req->barrier);
  if (req->barrier == NULL)
    return cairn_fail (-ENOMEM, "out of memory taking a snapshot");
  barrier_ids (cat, vols, nvols, req->barrier, &n);
  r = snap_barrier_raise (cat, req->barrier, n);
  if (r == 0) {
    req->nbarrier = n;
    r = cat_submit (pool, req);
    /* When no freeze took the request, the barrier is still up. */
    snap_barrier_lower (cat, req);
  }
  free (req->barrier);
  req->barrier = NULL;
  return r;
}

int
snap_create_many (struct cairn_pool *pool, const char *const *vols,
                  size_t nvols, const char *snap)
{
  struct cat_request req = { .kind = REQ_SNAP, .vols = vols, .nvols = nvols,
                             .snap = snap };
  int r = vol_check_name (snap);

  if (r == 0 && strchr (snap, '/'))
    r = cairn_fail (-EINVAL, "snapshot name '%s' may not contain '/'", snap);
  if (r == 0 && nvols == 0)
    r = cairn_fail (-EINVAL, "no volume to snapshot");
  return r < 0 ? r : submit_with_barrier (pool, &req, vols, nvols);
}

int
snap_create (struct cairn_pool *pool, const char *vol, const char *snap)
{
  return snap_create_many (pool, &vol, 1, snap);
}

/* Collect the names of the volumes under a prefix. */
struct prefix_names {
  const char *prefix;
  size_t plen;
  char (*names)[VOL_NAME_MAX + 1];
  size_t n, cap;
};

/* Is name pn->prefix or under it? */
static bool
prefix_has (const struct prefix_names *pn, const char *name)
{
  return strncmp (name, pn->prefix, pn->plen) == 0 &&
         (name[pn->plen] == '\0' || name[pn->plen] == '/');
}

static int
prefix_collect (void *opaque, const struct vol_info *info)
{
  struct prefix_names *pn = opaque;

  if (!prefix_has (pn, info->name))
    return 0;
  if (pn->n == pn->cap) {
    size_t cap = pn->cap ? pn->cap * 2 : 8;
    void *nn = realloc (pn->names, cap * sizeof *pn->names);
    if (nn == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    pn->names = nn;
    pn->cap = cap;
  }
  snprintf (pn->names[pn->n++], VOL_NAME_MAX + 1, "%s", info->name);
  return 0;
}

/* vol_list_tolerant callback: a damaged volume under the prefix cannot
 * be snapshotted, so the snapshot of them all fails; others do not count.
 */
static int
prefix_damaged (void *opaque, const struct vol_damage *d)
{
  return prefix_has (opaque, d->name) ? vol_damage_error (d) : 0;
}

/* Snapshot every volume under a name prefix in one generation.  The
 * volumes are listed before the request: one created meanwhile is not in
 * the snapshot, one deleted meanwhile fails it (nothing is taken).
 */
int
snap_create_prefix (struct cairn_pool *pool, const char *prefix,
                    const char *snap)
{
  struct prefix_names pn = { .prefix = prefix, .plen = strlen (prefix) };
  const char **vols = NULL;
  int r = vol_check_name (prefix);

  if (r == 0)
    r = vol_list_tolerant (pool, false, prefix_collect, prefix_damaged, &pn);
  if (r == 0 && pn.n == 0)
    r = cairn_fail (-ENOENT, "no volume is named '%s' or '%s/...'", prefix, prefix);
  if (r == 0 && (vols = calloc (pn.n, sizeof *vols)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  for (size_t i = 0; r == 0 && i < pn.n; i++)
    vols[i] = pn.names[i];
  if (r == 0)
    r = snap_create_many (pool, vols, pn.n, snap);
  free (vols);
  free (pn.names);
  return r;
}

int
snap_delete (struct cairn_pool *pool, const char *vol, const char *snap)
{
  struct cat_request req = { .kind = REQ_SNAP_DELETE, .name = vol, .snap = snap };

  return cat_submit (pool, &req);
}

int
snap_rename (struct cairn_pool *pool, const char *vol, const char *from,
             const char *to)
{
  struct cat_request req = { .kind = REQ_SNAP_RENAME, .name = vol, .snap = from,
                             .name2 = to };
  int r = vol_check_name (to);

  if (r == 0 && strchr (to, '/'))
    r = cairn_fail (-EINVAL, "snapshot name '%s' may not contain '/'", to);
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_rollback (struct cairn_pool *pool, const char *vol, const char *snap,
              const char *keep_as)
{
  struct cat_request req = { .kind = REQ_ROLLBACK, .name = vol, .snap = snap,
                             .name2 = keep_as };
  int r = vol_check_name (keep_as);

  /* Space of deleted snapshots still being given back in the background
   * may be the volume's, after SNAP: finish it first (VR-1).
   */
  if (r == 0)
    r = vol_reclaim_wait (pool, NULL, NULL);
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_clone (struct cairn_pool *pool, const char *src, const char *newname)
{
  struct cat_request req = { .kind = REQ_CLONE, .name = src, .name2 = newname };
  int r = vol_check_name (newname);

  if (r < 0)
    return r;
  /* A clone of the live volume takes its state as a snapshot does. */
  return strchr (src, '@') ? cat_submit (pool, &req)
                           : submit_with_barrier (pool, &req, &src, 1);
}

/* Check a property key. */
static int
check_prop_key (const char *key)
{
  size_t len = strlen (key);

  if (len == 0 || len > VOL_PROP_KEY_MAX)
    return cairn_fail (-EINVAL, "property name '%s' must be 1 to %d bytes", key,
                       VOL_PROP_KEY_MAX);
  for (size_t i = 0; i < len; i++)
    if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= '0' && key[i] <= '9') ||
          strchr ("._:-", key[i])))
      return cairn_fail (-EINVAL, "property name '%s': use lower-case letters, "
                         "digits, '.', '_', ':' and '-'", key);
  if (strchr (key, ':') == NULL)
    return cairn_fail (-EINVAL, "user property '%s' needs a ':' (module:name, "
                       "as in com.example:backup)", key);
  return 0;
}

int
vol_set_prop (struct cairn_pool *pool, const char *name, const char *key,
              const char *value)
{
  struct cat_request req = { .kind = REQ_PROP, .name = name, .name2 = key,
                             .snap = value };
  int r = check_prop_key (key);

  if (r == 0 && value && strlen (value) > VOL_PROP_VALUE_MAX)
    r = cairn_fail (-EINVAL, "the value of '%s' is longer than %d bytes", key,
                    VOL_PROP_VALUE_MAX);
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_set_quota (struct cairn_pool *pool, const char *name, uint64_t bytes)
{
  struct cat_request req = { .kind = REQ_QUOTA, .name = name, .size = bytes };

  return cat_submit (pool, &req);
}

int
vol_list_props (struct cairn_pool *pool, const char *name,
                int (*fn) (void *opaque, const char *key, const char *value),
                void *opaque)
{
  struct btree *root = pool_root_tree (pool);
  struct btree_cursor *cur;
  struct catalog *cat;
  struct volstate *vs = NULL;
  uint8_t key[9];
  uint64_t id;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, name);
  id = vs ? vs->id : 0;
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cat_no_volume (cat, name, name);
  r = btree_cursor_new (root, &cur);
  if (r < 0)
    return r;
  key[0] = RK_PROP;
  put_be64 (key + 1, id);
  btree_rdlock (root);
  for (r = btree_cursor_seek (cur, key, 9); r == 0; r = btree_cursor_next (cur)) {
    char k[VOL_PROP_KEY_MAX + 1], v[VOL_PROP_VALUE_MAX + 1];
    const uint8_t *kk, *vv;
    size_t kl, vl;

    btree_cursor_item (cur, &kk, &kl, &vv, &vl);
    if (kl < 10 || kk[0] != RK_PROP || get_be64 (kk + 1) != id)
      break;
    if (kl - 9 > VOL_PROP_KEY_MAX || vl > VOL_PROP_VALUE_MAX) {
      r = cairn_fail (-EIO, "corrupt property record of volume '%s'", name);
      break;
    }
    memcpy (k, kk + 9, kl - 9);
    k[kl - 9] = '\0';
    memcpy (v, vv, vl);
    v[vl] = '\0';
    r = fn (opaque, k, v);
    if (r != 0)
      break;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  return r == -ENOENT ? 0 : r;
}

/* Fill info from a volume state. */
void
info_from_state (const struct volstate *vs, struct vol_info *info)
{
  memset (info, 0, sizeof *info);
  info->id = vs->id;
  snprintf (info->name, sizeof info->name, "%s", vs->name);
  info->size = vs->size;
  info->ctime = vs->ctime;
  info->gen = vs->create_gen;
  info->readonly = (vs->flags & VOLF_READONLY) != 0;
  info->origin_id = vs->origin_id;
  info->origin_gen = vs->origin_gen;
  info->referenced = (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED)
    * BLOCK_SIZE;
  info->held = (uint64_t) __atomic_load_n (&vs->held, __ATOMIC_RELAXED) * BLOCK_SIZE;
  info->quota = vs->quota;
}

int
vol_stat (struct cairn_pool *pool, const char *name, struct vol_info *info)
{
  char vol[VOL_NAME_MAX + 1];
  const char *at = strchr (name, '@');
  struct catalog *cat;
  struct volstate *vs = NULL;
  uint64_t sgen;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  snprintf (vol, sizeof vol, "%.*s", at ? (int) (at - name) : (int) strlen (name),
            name);
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, vol);
  if (vs)
    info_from_state (vs, info);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cat_no_volume (cat, vol, name);
  if (at == NULL)
    return 0;
  r = cat_lookup_point (cat, info->id, vol, at + 1, &sgen);
  if (r == 0) {
    /* A snapshot, or else a checkpoint (VOL@#GEN, or found by time). */
    r = cat_read_snap (cat, info->id, sgen, info);
    if (r == -ENOENT)
      r = ckpt_stat (cat, info->id, sgen, info);
    else if (r < 0)
      r = cat_snap_unreadable (r, name);
    else
      return 0;
  }
  if (r == -ENOENT && at[1] == '#')
    r = cairn_fail (-ENOENT, "volume '%s' keeps no snapshot or checkpoint at "
                    "generation %" PRIu64, vol, sgen);
  return r;
}

int
vol_state_name (struct cairn_pool *pool, uint64_t id, uint64_t gen,
                char vol[VOL_NAME_MAX + 1], char snap[VOL_NAME_MAX + 1])
{
  struct volstate *vs;
  struct vol_info si;
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  *vol = *snap = '\0';
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, id);
  if (vs && vs_visible (vs))
    snprintf (vol, VOL_NAME_MAX + 1, "%s", vs->name);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    for (size_t i = 0; i < cat->ndamaged; i++)   /* fixed once loaded (DV-1) */
      if (cat->damaged[i].id == id)
        snprintf (vol, VOL_NAME_MAX + 1, "%s", cat->damaged[i].name);
  if (*vol == '\0')
    return -ENOENT;
  if (vs == NULL)
    return 0;                   /* a damaged volume lists no snapshots */
  r = cat_read_snap (cat, id, gen, &si);
  if (r == 0)
    snprintf (snap, VOL_NAME_MAX + 1, "%s", si.snap);
  /* None at gen, or a damaged record: the state is "VOL@#GEN". */
  return r == -ENOENT || r == -EIO ? 0 : r;
}

/* Report snapshot j of sl (volume vi), whose record did not decode (the
 * message is cairn_errmsg's), to damage.
 */
static int
snap_damaged (const struct vol_info *vi, const struct snaplist *sl, size_t j,
              int (*damage) (void *opaque, const struct vol_damage *d),
              void *opaque)
{
  struct vol_damage d = { .id = vi->id, .gen = sl->gen[j] };

  snprintf (d.name, sizeof d.name, "%s", vi->name);
  snprintf (d.snap, sizeof d.snap, "%s", sl->name[j]);
  snprintf (d.what, sizeof d.what, "%s", cairn_errmsg ());
  return damage (opaque, &d);
}

/* Report the damaged volumes (sorted by name) from *k on that sort before
 * name, or all that are left when name is NULL.
 */
static int
damaged_before (struct catalog *cat, const char *name, size_t *k,
                int (*damage) (void *opaque, const struct vol_damage *d),
                void *opaque)
{
  int r = 0;

  for (; r == 0 && *k < cat->ndamaged &&
         (name == NULL || strcmp (cat->damaged[*k].name, name) < 0); ++*k)
    r = cat_damaged_report (&cat->damaged[*k], damage, opaque);
  return r;
}

/* The strict listing's damage callback: fail naming the record. */
static int
strict_damage (void *opaque, const struct vol_damage *d)
{
  (void) opaque;
  return vol_damage_error (d);
}

int
vol_list_tolerant (struct cairn_pool *pool, bool with_snapshots,
                   int (*fn) (void *opaque, const struct vol_info *info),
                   int (*damage) (void *opaque, const struct vol_damage *d),
                   void *opaque)
{
  struct vol_info *infos = NULL;
  struct snaplist *sl = NULL;
  struct catalog *cat;
  size_t n = 0, k = 0;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  if (damage == NULL)
    damage = strict_damage;
  pthread_mutex_lock (&cat->tlock);
  infos = calloc (cat->nvols + 1, sizeof *infos);
  if (infos)
    for (size_t i = 0; i < cat->nvols; i++)
      if (vs_visible (cat->vols[i]))
        info_from_state (cat->vols[i], &infos[n++]);
  pthread_mutex_unlock (&cat->tlock);
  if (infos == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing volumes");
  /* Name order. */
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && strcmp (infos[j - 1].name, infos[j].name) > 0; j--) {
      struct vol_info t = infos[j];
      infos[j] = infos[j - 1];
      infos[j - 1] = t;
    }
  if (with_snapshots && (sl = calloc (1, sizeof *sl)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory listing snapshots");
  for (size_t i = 0; r == 0 && i < n; i++) {
    r = damaged_before (cat, infos[i].name, &k, damage, opaque);
    if (r == 0)
      r = fn (opaque, &infos[i]);
    if (r != 0 || !with_snapshots)
      continue;
    r = list_snaps (cat, infos[i].id, sl);
    for (size_t j = 0; r == 0 && j < sl->n; j++) {
      struct vol_info si = infos[i];

      /* A damaged record fails to read again, with its message.  One
       * that is gone was deleted since list_snaps saw it (the listing
       * holds no lock across its reads, so a concurrent delete, a
       * rollback or a receive's publish may remove it): it is listed as
       * the state after that change, without it.  Reading it gave a
       * bare -ENOENT, no message, and failed the whole listing.
       */
      r = cat_read_snap (cat, si.id, sl->gen[j], &si);
      if (r == 0)
        r = fn (opaque, &si);
      else if (r == -ENOENT)
        r = 0;
      else if (r == -EIO && sl->bad[j])
        r = snap_damaged (&infos[i], sl, j, damage, opaque);
    }
  }
  if (r == 0)
    r = damaged_before (cat, NULL, &k, damage, opaque);
  snaplist_free (sl);
  free (infos);
  return r;
}

int
vol_list (struct cairn_pool *pool, bool with_snapshots,
          int (*fn) (void *opaque, const struct vol_info *info), void *opaque)
{
  return vol_list_tolerant (pool, with_snapshots, fn, NULL, opaque);
}
