/* Cairn control server: the objects the catalog methods return (see
 * methods-catalog.c and methods-snapshot.c).
 *
 * A listing gathers every visible volume and snapshot (listing_load), so
 * that an object can name a clone's origin and a volume its snapshots and
 * clones; describe builds the object of one volume or snapshot by name.
 *
 * A volume or a snapshot is described by one object:
 *
 *   {"name": "db@daily", "volume": "db", "snapshot": "daily" | null,
 *    "guid": "5c0e2d1f9a3b7e64" | null, "id": 256, "generation": 7,
 *    "size": 10737418240, "referenced": 4096,
 *    "ctime": "2026-12-02T10:00:00Z",
 *    "readonly": true, "origin": "base@gold" | "base@#5" | null}
 *
 * "origin" names where a clone started; it is null for a volume that is
 * not a clone, and for a clone whose origin volume has been deleted (the
 * engine keeps that volume hidden, unnamed, until its last clone goes).
 *
 * A catalog record that does not decode is left out of the listings and
 * reported beside them, in "damaged" (volume.list, snapshot.list,
 * volume.show, pool.status), so that one bad record hides nothing else.
 * A snapshot's:
 *
 *   {"kind": "snapshot", "name": "db@daily" | "db@#7", "volume": "db",
 *    "snapshot": "daily" | null (no name left), "id": 256,
 *    "generation": 7,
 *    "error": "corrupt snapshot record (volume 256, generation 7): ..."}
 *
 * A volume's (its snapshots are not listed, and the volume cannot be used;
 * an origin that is such a volume is still named, as "db@#GEN"):
 *
 *   {"kind": "volume", "name": "db" | "#256" (no name left), "volume":
 *    "db" | null, "snapshot": null, "id": 256 (0: the record's key is
 *    unusable), "generation": null,
 *    "error": "corrupt volume record (volume 256): ..."}
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "methods-int.h"
#include "volume.h"

/* vol_list callback: keep a copy. */
static int
listing_add (void *opaque, const struct vol_info *info)
{
  struct listing *l = opaque;

  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    struct vol_info *v = realloc (l->v, cap * sizeof *v);

    if (v == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing volumes");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = *info;
  return 0;
}

/* vol_list_tolerant callback: keep a copy of a damaged record's report. */
static int
listing_damaged (void *opaque, const struct vol_damage *d)
{
  struct listing *l = opaque;
  struct vol_damage *nd = realloc (l->d, (l->nd + 1) * sizeof *nd);

  if (nd == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing volumes");
  l->d = nd;
  l->d[l->nd++] = *d;
  return 0;
}

/* List every visible volume and its snapshots (damaged records apart). */
int
listing_load (struct cairn_pool *pool, struct listing *l)
{
  return vol_list_tolerant (pool, true, listing_add, listing_damaged, l);
}

/* Free what listing_load gathered. */
void
listing_free (struct listing *l)
{
  free (l->v);
  free (l->d);
}

/* The object of one damaged record (see the top). */
static json_t *
damaged_object (const struct vol_damage *d)
{
  bool vol = d->kind == VOL_DAMAGE_VOLUME;
  char name[FULL_NAME_MAX];

  if (vol && *d->name)
    snprintf (name, sizeof name, "%s", d->name);
  else if (vol)
    snprintf (name, sizeof name, "#%" PRIu64, d->id);
  else if (*d->snap)
    snprintf (name, sizeof name, "%s@%s", d->name, d->snap);
  else
    snprintf (name, sizeof name, "%s@#%" PRIu64, d->name, d->gen);
  return json_pack ("{s:s, s:s, s:s?, s:s?, s:I, s:o, s:s}",
                    "kind", vol ? "volume" : "snapshot",
                    "name", name,
                    "volume", *d->name ? d->name : NULL,
                    "snapshot", *d->snap ? d->snap : NULL,
                    "id", (json_int_t) d->id,
                    "generation", vol ? json_null ()
                                      : json_integer ((json_int_t) d->gen),
                    "error", d->what);
}

/* The "damaged" array of a listing: every damaged record, or volume id's
 * (id != 0) only.
 */
json_t *
damaged_array (const struct listing *l, uint64_t id)
{
  json_t *arr = json_array ();

  for (size_t i = 0; arr && i < l->nd; i++) {
    const struct vol_damage *d = &l->d[i];

    if (id != 0 && d->id != id)
      continue;
    if (json_array_append_new (arr, damaged_object (d)) < 0) {
      json_decref (arr);
      arr = NULL;
    }
  }
  return arr;
}

/* Add the "damaged" array (of volume id, or all with 0) to obj. */
int
set_damaged (json_t *obj, const struct listing *l, uint64_t id)
{
  return json_object_set_new (obj, "damaged", damaged_array (l, id)) == 0
         ? 0 : oom ();
}

/* "VOL", "VOL@SNAP", or "VOL@#GEN" for a checkpoint. */
static void
full_name (const struct vol_info *vi, char buf[FULL_NAME_MAX])
{
  if (vi->is_snapshot && vi->snap[0])
    snprintf (buf, FULL_NAME_MAX, "%s@%s", vi->name, vi->snap);
  else if (vi->is_snapshot)   /* a checkpoint (vol_stat of VOL@#GEN) */
    snprintf (buf, FULL_NAME_MAX, "%s@#%" PRIu64, vi->name, vi->gen);
  else
    snprintf (buf, FULL_NAME_MAX, "%s", vi->name);
}

/* Name a clone's origin: "VOL@SNAP" when a snapshot pins it, else
 * "VOL@#GEN" (always for an origin whose record is damaged, whose
 * snapshots are not listed).  A lookup, not a walk of the listing, so that
 * describing one object costs the same at any snapshot count (issue #27).
 * False when vi is no clone or its origin is hidden.
 */
static int
origin_name (struct cairn_pool *pool, const struct vol_info *vi,
             char buf[FULL_NAME_MAX], bool *has)
{
  char vol[VOL_NAME_MAX + 1], snap[VOL_NAME_MAX + 1];
  int r;

  *has = false;
  if (vi->origin_id == 0)
    return 0;
  r = vol_state_name (pool, vi->origin_id, vi->origin_gen, vol, snap);
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  if (*snap)
    snprintf (buf, FULL_NAME_MAX, "%s@%s", vol, snap);
  else
    snprintf (buf, FULL_NAME_MAX, "%s@#%" PRIu64, vol, vi->origin_gen);
  *has = true;
  return 0;
}

/* Seconds since 1970 as ISO 8601 in UTC. */
void
iso_time (uint64_t t, char buf[32])
{
  time_t tt = (time_t) t;
  struct tm tm;

  if (t > (uint64_t) INT32_MAX * 64 || gmtime_r (&tt, &tm) == NULL ||
      strftime (buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf (buf, 32, "%" PRIu64, t);    /* a damaged record: show it raw */
}

/* The object describing a volume or snapshot into *objp. */
static int
info_object (struct cairn_pool *pool, const struct vol_info *vi,
             json_t **objp)
{
  char name[FULL_NAME_MAX], origin[FULL_NAME_MAX], ctime[32], guid[17];
  bool has_origin;
  int r = origin_name (pool, vi, origin, &has_origin);

  if (r < 0)
    return r;
  full_name (vi, name);
  iso_time (vi->ctime, ctime);
  snprintf (guid, sizeof guid, "%016" PRIx64, vi->guid);
  *objp = json_pack ("{s:s, s:s, s:s?, s:s?, s:I, s:I, s:I, s:I, s:s, s:b, s:s?}",
                     "name", name,
                     "volume", vi->name,
                     "snapshot", vi->is_snapshot ? vi->snap : NULL,
                     "guid", vi->is_snapshot ? guid : NULL,
                     "id", (json_int_t) vi->id,
                     "generation", (json_int_t) vi->gen,
                     "size", (json_int_t) vi->size,
                     "referenced", (json_int_t) vi->referenced,
                     "ctime", ctime,
                     "readonly", (int) vi->readonly,
                     "origin", has_origin ? origin : NULL);
  return *objp ? 0 : oom ();
}

/* Append the object of vi to the array arr. */
int
append_info (json_t *arr, struct cairn_pool *pool, const struct vol_info *vi)
{
  json_t *obj;
  int r = info_object (pool, vi, &obj);

  if (r == 0 && json_array_append_new (arr, obj) < 0)
    r = oom ();
  return r;
}

/* vol_list_props callback: add a property to a JSON object. */
static int
add_prop (void *opaque, const char *key, const char *value)
{
  return json_object_set_new (opaque, key, json_string (value)) == 0 ? 0 : oom ();
}

/* Describe one volume or snapshot (VOL@SNAP) by name into *result.  With
 * related, a volume's object also lists its snapshots ("snapshots":
 * ["VOL@SNAP", ...]) and its clones and a snapshot's its clones ("clones":
 * ["NAME", ...]).
 */
int
describe (struct cairn_pool *pool, const char *name, bool related,
          json_t **result)
{
  struct listing l = { 0 };
  struct vol_info vi;
  json_t *obj = NULL, *snaps = NULL, *clones = NULL;
  int r = vol_stat (pool, name, &vi);

  /* Only the related names need the whole listing: an object alone costs
   * the same at any snapshot count (the reply of every snapshot.create).
   */
  if (r == 0 && related)
    r = listing_load (pool, &l);
  if (r == 0)
    r = info_object (pool, &vi, &obj);
  if (r < 0)
    goto out;
  if (related) {
    snaps = vi.is_snapshot ? NULL : json_array ();
    clones = json_array ();
    if (clones == NULL || (!vi.is_snapshot && snaps == NULL)) {
      r = oom ();
      goto out;
    }
    for (size_t i = 0; r == 0 && i < l.n; i++) {
      const struct vol_info *e = &l.v[i];
      char en[FULL_NAME_MAX];

      full_name (e, en);
      if (snaps && e->is_snapshot && e->id == vi.id)
        r = json_array_append_new (snaps, json_string (en));
      else if (!e->is_snapshot && e->origin_id == vi.id &&
               (!vi.is_snapshot || e->origin_gen == vi.gen))
        r = json_array_append_new (clones, json_string (en));
    }
    /* json_object_set_new takes the value, even when it fails. */
    if (r == 0 && snaps) {
      r = json_object_set_new (obj, "snapshots", snaps);
      snaps = NULL;
    }
    if (r == 0) {
      r = json_object_set_new (obj, "clones", clones);
      clones = NULL;
    }
    if (r < 0) {
      r = oom ();
      goto out;
    }
    if (!vi.is_snapshot && (r = set_damaged (obj, &l, vi.id)) < 0)
      goto out;
  }
  if (!vi.is_snapshot) {
    json_t *props = json_object ();

    uint64_t by_snaps = 0, by_ckpts = 0;

    /* What the volume's snapshots (and clones) keep of what it no longer
     * maps, apart from what only its checkpoints keep.
     */
    if (related && (r = vol_held_split (pool, vi.name, &by_snaps,
                                        &by_ckpts)) < 0) {
      json_decref (props);
      goto out;
    }
    if (props == NULL ||
        json_object_set_new (obj, "quota", json_integer ((json_int_t) vi.quota)) ||
        json_object_set_new (obj, "held", json_integer ((json_int_t) vi.held)) ||
        (related &&
         (json_object_set_new (obj, "held_by_snapshots",
                               json_integer ((json_int_t) by_snaps)) ||
          json_object_set_new (obj, "held_by_checkpoints",
                               json_integer ((json_int_t) by_ckpts))))) {
      json_decref (props);
      r = oom ();
      goto out;
    }
    r = vol_list_props (pool, vi.name, add_prop, props);
    if (r == 0 && json_object_set_new (obj, "properties", props))
      r = oom ();
    else if (r < 0)
      json_decref (props);
    if (r < 0)
      goto out;
  }
  *result = obj;
  obj = NULL;

 out:
  json_decref (snaps);
  json_decref (clones);
  json_decref (obj);
  listing_free (&l);
  return r;
}
