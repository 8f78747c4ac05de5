/* Cairn engine: volume records that do not decode (catalog.c has the
 * core).  One damaged volume record takes that volume out of service, not
 * the pool.
 *
 * A volume record (RK_VOL + be64 id) can be wrong inside a node whose
 * checksum is right: a bug, or a bad manual patch.  Without it the
 * volume's name, size, flags and origin are unknown, so nothing may guess
 * them; but every other volume is described by its own record and can be
 * served.  When the catalog loads (catalog_get):
 *
 *   DV-1  Every record that decodes is loaded as before.  One that does not
 *         (or an RK_VOL key of the wrong length, whose id is then unknown:
 *         0) is kept on the catalog's list of damaged volumes, with the
 *         name the name index (RK_NAME) gives its id ("" when none does)
 *         and the decoder's message.  The list is fixed once loaded and
 *         sorted by name: nothing can delete or rename a damaged volume.
 *   DV-2  The damaged volume's tree is not opened and its record, pins,
 *         deadlist entries, properties and name item are never written.
 *         That is safe for the rest of the pool because reclaim needs
 *         nothing of it (reclaim.c): a volume's pins are RK_PIN records
 *         keyed by its own id, its deadlist entries are keyed by its own
 *         id, and what another volume frees depends only on that volume's
 *         own pins and origin generation (RC-1 to RC-3).  A clone of the
 *         damaged volume never frees blocks born at or before its origin
 *         generation (RC-1), which are the damaged lineage's; deleting the
 *         clone leaves its reason on the origin's pin (destroy_volume
 *         finds no origin in the table), so the pinned state stays.  Only
 *         a free record (reaper.c) left by a snapshot deleted before the
 *         damage goes on: its range was fixed while the record was whole.
 *   DV-3  Every use of the volume by name fails with -EIO and a message
 *         naming the record (cat_no_volume): opening VOL, VOL@SNAP or
 *         VOL@#GEN, stat, snapshots, clones, sends, diffs, renames,
 *         resizes, settings, receives.  Deleting it is refused too
 *         (cat_undeletable): its origin is unknown, so the blocks it owns
 *         cannot be told from its origin's.
 *   DV-4  Its name stays taken (cat_name_free): a create, rename, clone or
 *         receive to that name would overwrite its RK_NAME item and leave
 *         it nameless.
 *   DV-5  The tolerant listing reports it once, in name order among the
 *         volumes, as a vol_damage of kind VOL_DAMAGE_VOLUME; the strict
 *         one fails naming it (vol_damage_error).  fsck reports the same
 *         record in the same words and still counts its tree and deadlist
 *         in the space audit.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"

/* Keep a damaged volume record, whose message is cairn_errmsg's (DV-1). */
int
cat_damaged_add (struct catalog *cat, const uint8_t *key, size_t klen)
{
  struct vol_damaged *nd = realloc (cat->damaged,
                                    (cat->ndamaged + 1) * sizeof *nd);

  if (nd == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the catalog");
  cat->damaged = nd;
  nd += cat->ndamaged++;
  memset (nd, 0, sizeof *nd);
  nd->id = klen == 9 ? get_be64 (key + 1) : 0;
  snprintf (nd->what, sizeof nd->what, "%s", cairn_errmsg ());
  return 0;
}

/* cat_foreach_prefix callback: give a damaged volume the name that the
 * name index gives its id.
 */
static int
name_of_damaged (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
                 size_t vl)
{
  struct catalog *cat = opaque;

  if (vl != 8 || kl < 2 || kl - 1 > VOL_NAME_MAX)
    return 0;
  for (size_t i = 0; i < cat->ndamaged; i++)
    if (cat->damaged[i].id != 0 && cat->damaged[i].id == get_be64 (v)) {
      memcpy (cat->damaged[i].name, k + 1, kl - 1);
      cat->damaged[i].name[kl - 1] = '\0';
    }
  return 0;
}

static int
by_name (const void *a, const void *b)
{
  const struct vol_damaged *x = a, *y = b;
  int c = strcmp (x->name, y->name);

  return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* Name the damaged volumes from the name index and sort them by name, as
 * the listings merge them with the others (loading the catalog).
 */
int
cat_damaged_names (struct catalog *cat)
{
  uint8_t key[1] = { RK_NAME };
  int r;

  if (cat->ndamaged == 0)
    return 0;
  r = cat_foreach_prefix (cat, key, 1, name_of_damaged, cat);
  if (r == 0)
    qsort (cat->damaged, cat->ndamaged, sizeof *cat->damaged, by_name);
  return r;
}

/* The damaged volume record that name names, or NULL. */
const struct vol_damaged *
cat_find_damaged (struct catalog *cat, const char *name)
{
  for (size_t i = 0; i < cat->ndamaged; i++)
    if (*name && strcmp (cat->damaged[i].name, name) == 0)
      return &cat->damaged[i];
  return NULL;
}

/* Is id a volume whose record is damaged? */
bool
cat_damaged_id (struct catalog *cat, uint64_t id)
{
  for (size_t i = 0; i < cat->ndamaged; i++)
    if (cat->damaged[i].id == id)
      return true;
  return false;
}

/* Fail a use of export (VOL, VOL@SNAP, VOL@#GEN) of a volume whose record
 * is damaged (what: the decoder's message).
 */
static int
damaged_use (const char *export, const char *what)
{
  return cairn_fail (-EIO, "'%s' cannot be used: %s; 'cairn fsck' gives "
                     "details (the volume's data is kept as it is)", export,
                     what);
}

/* The error for volume name, not in the table, used as export (DV-3). */
int
cat_no_volume (struct catalog *cat, const char *name, const char *export)
{
  const struct vol_damaged *d = cat_find_damaged (cat, name);

  if (d)
    return damaged_use (export, d->what);
  return cairn_fail (-ENOENT, "no volume named '%s'", name);
}

/* Refuse to delete volume name when its record is damaged (DV-3); 0 when
 * it is not.
 */
int
cat_undeletable (struct catalog *cat, const char *name)
{
  const struct vol_damaged *d = cat_find_damaged (cat, name);

  if (d == NULL)
    return 0;
  return cairn_fail (-EIO, "volume '%s' cannot be deleted: %s; without its "
                     "record its origin is unknown, so the blocks it owns "
                     "cannot be told from its origin's, and freeing them "
                     "could destroy data another volume uses: its data is "
                     "kept as it is ('cairn fsck' gives details)", name,
                     d->what);
}

/* Refuse name for a new or renamed volume while a volume has it: one in
 * the table, a damaged one, or an item of the name index whose volume has
 * no readable record (DV-4).  In the freeze: the index and the table then
 * agree.
 */
int
cat_name_free (struct catalog *cat, const char *name)
{
  uint8_t key[1 + VOL_NAME_MAX], val[8];
  const struct vol_damaged *d;
  size_t vlen;
  int r;

  if (cat_find_name (cat, name))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already", name);
  d = cat_find_damaged (cat, name);
  if (d)
    return cairn_fail (-EEXIST, "a volume named '%s' exists already, and its "
                       "record is damaged: %s; 'cairn fsck' gives details "
                       "(choose another name)", name, d->what);
  r = cat_root_get (cat, key, name_key (key, RK_NAME, NULL, name), val,
                    sizeof val, &vlen);
  if (r == 0)
    return cairn_fail (-EEXIST, "the name index gives '%s' to volume %" PRIu64
                       ", which has no readable record: 'cairn fsck' gives "
                       "details (choose another name)", name,
                       vlen == 8 ? get_be64 (val) : 0);
  return r == -ENOENT ? 0 : r;
}

/* Report damaged volume d to a listing's damage callback (DV-5). */
int
cat_damaged_report (const struct vol_damaged *dv,
                    int (*damage) (void *opaque, const struct vol_damage *d),
                    void *opaque)
{
  struct vol_damage d = { .kind = VOL_DAMAGE_VOLUME, .id = dv->id };

  snprintf (d.name, sizeof d.name, "%s", dv->name);
  snprintf (d.what, sizeof d.what, "%s", dv->what);
  return damage (opaque, &d);
}

int
vol_damage_error (const struct vol_damage *d)
{
  char export[2 * VOL_NAME_MAX + 24];

  if (d->kind == VOL_DAMAGE_VOLUME) {
    if (*d->name)
      snprintf (export, sizeof export, "%s", d->name);
    else
      snprintf (export, sizeof export, "#%" PRIu64, d->id);
    return damaged_use (export, d->what);
  }
  if (*d->snap)
    snprintf (export, sizeof export, "%s@%s", d->name, d->snap);
  else
    snprintf (export, sizeof export, "%s@#%" PRIu64, d->name, d->gen);
  return cat_snap_unusable (export, d->what);
}

/* How many volume records did not decode (fixed once loaded: DV-1). */
int
vol_damaged_volumes (struct cairn_pool *pool, uint64_t *np)
{
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  *np = cat->ndamaged;
  return 0;
}
