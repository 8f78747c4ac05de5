/* Cairn control server: the catalog methods (see methods.h).
 *
 * One handler per operation of the engine on volumes, snapshots and clones,
 * plus diff, snapshot space and pool status; cairn-protocol(7) documents
 * each.  A handler checks its params against a table of the members it
 * takes (an unknown member, a missing one or a wrong type is
 * "invalid-params", naming the member), makes one engine call and builds
 * the result.  An engine error goes back as its negative errno, which the
 * dispatcher maps to an error code (ENOENT → "not-found", ...), with the
 * engine's message.  Each state change is a single engine call, and the
 * engine applies it in one generation or not at all, so a method that fails
 * has changed nothing.
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
 * A snapshot whose catalog record does not decode is left out of the
 * listings and reported beside them, in "damaged" (volume.list,
 * snapshot.list, volume.show, pool.status), so that one bad record hides
 * nothing else:
 *
 *   {"name": "db@daily" | "db@#7", "volume": "db", "snapshot": "daily" |
 *    null (no name left), "id": 256, "generation": 7,
 *    "error": "corrupt snapshot record (volume 256, generation 7): ..."}
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "methods-int.h"
#include "units.h"
#include "volume.h"

/* "VOL@SNAP" with its NUL. */
#define FULL_NAME_MAX (2 * VOL_NAME_MAX + 2)

/* ---------------------------------------------------------------- params */

static const char *const param_type_words[] = {
  [PARAM_STRING] = "a string",
  [PARAM_BOOL] = "true or false",
  [PARAM_SIZE] = "a size: a number of bytes, or a string such as \"10G\"",
  [PARAM_STRINGS] = "a non-empty array of strings",
  [PARAM_COUNT] = "a positive integer",
  [PARAM_OBJECT] = "an object",
};

/* Whether v has the type t. */
static bool
param_type_ok (enum param_type t, json_t *v)
{
  size_t i;
  json_t *e;

  switch (t) {
  case PARAM_STRING: return json_is_string (v);
  case PARAM_OBJECT: return json_is_object (v);
  case PARAM_BOOL: return json_is_boolean (v);
  case PARAM_SIZE:
    return json_is_string (v) ||
           (json_is_integer (v) && json_integer_value (v) >= 0);
  case PARAM_COUNT:
    return json_is_integer (v) && json_integer_value (v) > 0;
  case PARAM_STRINGS:
    if (!json_is_array (v) || json_array_size (v) == 0)
      return false;
    json_array_foreach (v, i, e)
      if (!json_is_string (e))
        return false;
    return true;
  }
  return false;
}

/* Check params against the members a method takes (methods-int.h). */
int
check_params (struct control_ctx *ctx, const char *method, json_t *params,
              const struct param *spec, size_t n)
{
  char takes[256] = "";
  const char *key;
  json_t *v;

  for (size_t i = 0; i < n; i++) {
    size_t len = strlen (takes);

    snprintf (takes + len, sizeof takes - len, "%s\"%s\"", i ? ", " : "",
              spec[i].name);
  }
  if (params != NULL && !json_is_object (params))
    return control_invalid_params (ctx, "%s: params must be an object of "
                                   "named members, not an array", method);
  json_object_foreach (params, key, v) {
    const struct param *p = NULL;

    for (size_t i = 0; i < n && p == NULL; i++)
      if (strcmp (spec[i].name, key) == 0)
        p = &spec[i];
    if (p == NULL && n == 0)
      return control_invalid_params (ctx, "%s: unknown member \"%.64s\": the "
                                     "method takes no params", method, key);
    if (p == NULL)
      return control_invalid_params (ctx, "%s: unknown member \"%.64s\": the "
                                     "method takes %s", method, key, takes);
    if (!param_type_ok (p->type, v))
      return control_invalid_params (ctx, "%s: \"%s\" must be %s", method,
                                     key, param_type_words[p->type]);
  }
  for (size_t i = 0; i < n; i++)
    if (spec[i].required && json_object_get (params, spec[i].name) == NULL)
      return control_invalid_params (ctx, "%s: missing member \"%s\" (%s)",
                                     method, spec[i].name,
                                     param_type_words[spec[i].type]);
  return 0;
}

/* A string member (checked), or NULL when absent. */
const char *
param_str (json_t *params, const char *name)
{
  return json_string_value (json_object_get (params, name));
}

/* A boolean member (checked), or false when absent. */
static bool
param_bool (json_t *params, const char *name)
{
  return json_is_true (json_object_get (params, name));
}

/* A size member (checked): bytes, or a string in units (units.h). */
static int
param_size (struct control_ctx *ctx, const char *method, json_t *params,
            const char *name, uint64_t *sizep)
{
  json_t *v = json_object_get (params, name);
  char why[256];

  if (json_is_integer (v))
    *sizep = (uint64_t) json_integer_value (v);
  else if (units_parse_size (json_string_value (v), sizep) < 0) {
    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    return control_invalid_params (ctx, "%s: \"%s\": %s", method, name, why);
  }
  if (*sizep > (uint64_t) INT64_MAX)
    return control_invalid_params (ctx, "%s: \"%s\" is too large: at most "
                                   "%" PRId64 " bytes", method, name,
                                   INT64_MAX);
  return 0;
}

/* Refuse a snapshot or checkpoint name where a volume is meant, then check
 * the name (-EINVAL, "invalid", with the reason).
 */
static int
check_volume_name (const char *what, const char *name)
{
  if (strchr (name, '@'))
    return cairn_fail (-EINVAL, "%s '%s' names a snapshot or a checkpoint: "
                       "give the volume's name alone", what, name);
  return vol_check_name (name);
}

/* The pool of the request. */
struct cairn_pool *
ctx_pool (struct control_ctx *ctx)
{
  const struct cairn_methods_ctx *m = control_ctx_opaque (ctx);

  return m->pool;
}

/* The error for a result that could not be built. */
int
oom (void)
{
  return cairn_fail (-ENOMEM, "out of memory building the reply");
}

/* ---------------------------------------------------------------- objects */

/* Every volume and snapshot, for lookups by id (origins, clones), and the
 * snapshot records that did not decode.
 */
struct listing {
  struct vol_info *v;
  size_t n, cap;
  struct vol_damage *d;
  size_t nd;
};

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
static int
listing_load (struct cairn_pool *pool, struct listing *l)
{
  return vol_list_tolerant (pool, true, listing_add, listing_damaged, l);
}

/* Free what listing_load gathered. */
static void
listing_free (struct listing *l)
{
  free (l->v);
  free (l->d);
}

/* The "damaged" array of a listing: every damaged record, or volume id's
 * (id != 0) only.
 */
static json_t *
damaged_array (const struct listing *l, uint64_t id)
{
  json_t *arr = json_array ();

  for (size_t i = 0; arr && i < l->nd; i++) {
    const struct vol_damage *d = &l->d[i];
    char name[FULL_NAME_MAX];

    if (id != 0 && d->id != id)
      continue;
    if (*d->snap)
      snprintf (name, sizeof name, "%s@%s", d->name, d->snap);
    else
      snprintf (name, sizeof name, "%s@#%" PRIu64, d->name, d->gen);
    if (json_array_append_new (arr, json_pack ("{s:s, s:s, s:s?, s:I, s:I, "
                                               "s:s}",
                                               "name", name,
                                               "volume", d->name,
                                               "snapshot", *d->snap ? d->snap
                                                                    : NULL,
                                               "id", (json_int_t) d->id,
                                               "generation",
                                               (json_int_t) d->gen,
                                               "error", d->what)) < 0) {
      json_decref (arr);
      arr = NULL;
    }
  }
  return arr;
}

/* Add the "damaged" array (of volume id, or all with 0) to obj. */
static int
set_damaged (json_t *obj, const struct listing *l, uint64_t id)
{
  return json_object_set_new (obj, "damaged", damaged_array (l, id)) == 0
         ? 0 : oom ();
}

/* The volume with this id in the listing, or NULL if it is hidden. */
static const struct vol_info *
listing_volume (const struct listing *l, uint64_t id)
{
  for (size_t i = 0; i < l->n; i++)
    if (!l->v[i].is_snapshot && l->v[i].id == id)
      return &l->v[i];
  return NULL;
}

/* "VOL" or "VOL@SNAP". */
static void
full_name (const struct vol_info *vi, char buf[FULL_NAME_MAX])
{
  if (vi->is_snapshot)
    snprintf (buf, FULL_NAME_MAX, "%s@%s", vi->name, vi->snap);
  else
    snprintf (buf, FULL_NAME_MAX, "%s", vi->name);
}

/* Name a clone's origin: "VOL@SNAP" when a snapshot pins it, else
 * "VOL@#GEN".  False when vi is no clone or its origin is hidden (or l is
 * NULL).
 */
static bool
origin_name (const struct listing *l, const struct vol_info *vi,
             char buf[FULL_NAME_MAX])
{
  const struct vol_info *ov;

  if (vi->origin_id == 0 || l == NULL)
    return false;
  ov = listing_volume (l, vi->origin_id);
  if (ov == NULL)
    return false;
  for (size_t i = 0; i < l->n; i++)
    if (l->v[i].is_snapshot && l->v[i].id == vi->origin_id &&
        l->v[i].gen == vi->origin_gen) {
      snprintf (buf, FULL_NAME_MAX, "%s@%s", ov->name, l->v[i].snap);
      return true;
    }
  snprintf (buf, FULL_NAME_MAX, "%s@#%" PRIu64, ov->name, vi->origin_gen);
  return true;
}

/* Seconds since 1970 as ISO 8601 in UTC. */
static void
iso_time (uint64_t t, char buf[32])
{
  time_t tt = (time_t) t;
  struct tm tm;

  if (t > (uint64_t) INT32_MAX * 64 || gmtime_r (&tt, &tm) == NULL ||
      strftime (buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
    snprintf (buf, 32, "%" PRIu64, t);    /* a damaged record: show it raw */
}

/* The object describing a volume or snapshot. */
static json_t *
info_object (const struct listing *l, const struct vol_info *vi)
{
  char name[FULL_NAME_MAX], origin[FULL_NAME_MAX], ctime[32], guid[17];
  bool has_origin = origin_name (l, vi, origin);

  full_name (vi, name);
  iso_time (vi->ctime, ctime);
  snprintf (guid, sizeof guid, "%016" PRIx64, vi->guid);
  return json_pack ("{s:s, s:s, s:s?, s:s?, s:I, s:I, s:I, s:I, s:s, s:b, s:s?}",
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
}

/* Append the object of vi to the array arr. */
static int
append_info (json_t *arr, const struct listing *l, const struct vol_info *vi)
{
  return json_array_append_new (arr, info_object (l, vi)) == 0 ? 0 : oom ();
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
static int
describe (struct cairn_pool *pool, const char *name, bool related,
          json_t **result)
{
  struct listing l = { 0 };
  struct vol_info vi;
  json_t *obj = NULL, *snaps = NULL, *clones = NULL;
  int r = vol_stat (pool, name, &vi);

  if (r == 0)
    r = listing_load (pool, &l);
  if (r < 0)
    goto out;
  obj = info_object (&l, &vi);
  if (obj == NULL) {
    r = oom ();
    goto out;
  }
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

    if (props == NULL ||
        json_object_set_new (obj, "quota", json_integer ((json_int_t) vi.quota)) ||
        json_object_set_new (obj, "held", json_integer ((json_int_t) vi.held))) {
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

/* ---------------------------------------------------------------- volumes */

/* volume.create {name, size} → the volume */
static int
volume_create (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "size", PARAM_SIZE, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *name;
  uint64_t size;
  int r = check_params (ctx, "volume.create", params, spec, ARRAY_SIZE (spec));

  if (r == 0)
    r = param_size (ctx, "volume.create", params, "size", &size);
  if (r < 0)
    return r;
  name = param_str (params, "name");
  r = vol_create (pool, name, size, NULL);
  return r < 0 ? r : describe (pool, name, false, result);
}

/* volume.list {snapshots?} → {"volumes": [...]} */
static int
volume_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "snapshots", PARAM_BOOL, false },
  };
  struct listing l = { 0 };
  json_t *arr = NULL;
  bool snaps;
  int r = check_params (ctx, "volume.list", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  snaps = param_bool (params, "snapshots");
  /* Snapshots are listed either way: they name the clones' origins. */
  r = listing_load (ctx_pool (ctx), &l);
  if (r < 0)
    goto out;
  arr = json_array ();
  if (arr == NULL)
    r = oom ();
  for (size_t i = 0; r == 0 && i < l.n; i++)
    if (snaps || !l.v[i].is_snapshot)
      r = append_info (arr, &l, &l.v[i]);
  if (r == 0) {
    *result = json_pack ("{s:o}", "volumes", arr);
    arr = NULL;
    if (*result == NULL)
      r = oom ();
    else
      r = set_damaged (*result, &l, 0);
  }

 out:
  json_decref (arr);
  listing_free (&l);
  return r;
}

/* volume.show {name} → the volume (or snapshot, for VOL@SNAP), with its
 * snapshots and clones
 */
static int
volume_show (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
  };
  int r = check_params (ctx, "volume.show", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  return describe (ctx_pool (ctx), param_str (params, "name"), true, result);
}

/* volume.delete {name, recursive?} → null */
static int
volume_delete (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "recursive", PARAM_BOOL, false },
  };
  const char *name;
  int r = check_params (ctx, "volume.delete", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  name = param_str (params, "name");
  r = check_volume_name ("volume", name);
  if (r < 0)
    return r;
  return vol_delete (ctx_pool (ctx), name,
                     param_bool (params, "recursive")
                     ? VOL_DELETE_RECURSIVE : 0);
}

/* volume.rename {name, to} → the volume */
static int
volume_rename (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "to", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *name, *to;
  int r = check_params (ctx, "volume.rename", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  name = param_str (params, "name");
  to = param_str (params, "to");
  r = check_volume_name ("volume", name);
  if (r == 0)
    r = check_volume_name ("new name", to);
  if (r == 0)
    r = vol_rename (pool, name, to);
  return r < 0 ? r : describe (pool, to, false, result);
}

/* volume.resize {name, size, force?} → the volume */
static int
volume_resize (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "size", PARAM_SIZE, true },
    { "force", PARAM_BOOL, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *name;
  uint64_t size;
  int r = check_params (ctx, "volume.resize", params, spec, ARRAY_SIZE (spec));

  if (r == 0)
    r = param_size (ctx, "volume.resize", params, "size", &size);
  if (r < 0)
    return r;
  name = param_str (params, "name");
  r = check_volume_name ("volume", name);
  if (r == 0)
    r = vol_resize (pool, name, size, param_bool (params, "force"));
  return r < 0 ? r : describe (pool, name, false, result);
}

/* volume.set {name, readonly?, quota?, properties?} → the volume.
 * properties is an object of user properties (module:name) to set, a null
 * value removing one; quota 0 removes the quota.  Each setting is its own
 * engine transaction, applied in that order: a failure leaves the earlier
 * ones in place (the reply's error says which failed).
 */
static int
volume_set (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "readonly", PARAM_BOOL, false },
    { "quota", PARAM_SIZE, false },
    { "properties", PARAM_OBJECT, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  json_t *props, *v;
  const char *name, *key;
  uint64_t quota = 0;
  int r = check_params (ctx, "volume.set", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  props = json_object_get (params, "properties");
  if (json_object_get (params, "readonly") == NULL &&
      json_object_get (params, "quota") == NULL && props == NULL)
    return control_invalid_params (ctx, "volume.set: nothing to set: give "
                                   "\"readonly\", \"quota\" or \"properties\"");
  json_object_foreach (props, key, v)
    if (!json_is_string (v) && !json_is_null (v))
      return control_invalid_params (ctx, "volume.set: property \"%.64s\" "
                                     "must be a string, or null to remove it",
                                     key);
  if (json_object_get (params, "quota") &&
      (r = param_size (ctx, "volume.set", params, "quota", &quota)) < 0)
    return r;
  name = param_str (params, "name");
  r = check_volume_name ("volume", name);
  if (r == 0 && json_object_get (params, "readonly"))
    r = vol_set_readonly (pool, name, param_bool (params, "readonly"));
  if (r == 0 && json_object_get (params, "quota"))
    r = vol_set_quota (pool, name, quota);
  json_object_foreach (props, key, v) {
    if (r < 0)
      break;
    r = vol_set_prop (pool, name, key, json_string_value (v));
  }
  return r < 0 ? r : describe (pool, name, false, result);
}

/* volume.rollback {name, snapshot, keep_as} → the rolled-back volume */
static int
volume_rollback (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "name", PARAM_STRING, true },
    { "snapshot", PARAM_STRING, true },
    { "keep_as", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *name, *keep;
  int r = check_params (ctx, "volume.rollback", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  name = param_str (params, "name");
  keep = param_str (params, "keep_as");
  r = check_volume_name ("volume", name);
  if (r == 0)
    r = check_volume_name ("keep_as", keep);
  if (r == 0)
    r = vol_rollback (pool, name, param_str (params, "snapshot"), keep);
  return r < 0 ? r : describe (pool, name, true, result);
}

/* volume.clone {source, name} → the new volume */
static int
volume_clone (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "source", PARAM_STRING, true },
    { "name", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *name;
  int r = check_params (ctx, "volume.clone", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  name = param_str (params, "name");
  r = check_volume_name ("clone name", name);
  if (r == 0)
    r = vol_clone (pool, param_str (params, "source"), name);
  return r < 0 ? r : describe (pool, name, false, result);
}

/* ---------------------------------------------------------------- diff */

/* The runs of a diff as they are gathered: adjacent runs of one type are
 * merged, and gathering stops after max runs.
 */
struct diff_state {
  struct control_ctx *ctx;
  json_t *runs;
  size_t max;
  uint64_t calls;
  bool have;                    /* a run is being merged into */
  uint64_t off, len;
  unsigned type;
  bool truncated;
  uint64_t data_bytes, hole_bytes;
};

#define DIFF_STOP 1             /* diff_run's "enough" */

/* Add the run being merged to the array. */
static int
diff_flush (struct diff_state *d)
{
  bool data = d->type == VOL_DIFF_DATA;
  json_t *run;

  if (!d->have)
    return 0;
  if (json_array_size (d->runs) == d->max) {
    d->truncated = true;
    return DIFF_STOP;
  }
  run = json_pack ("{s:I, s:I, s:s}", "offset", (json_int_t) d->off,
                   "length", (json_int_t) d->len,
                   "type", data ? "data" : "hole");
  if (json_array_append_new (d->runs, run) < 0)
    return oom ();
  if (data)
    d->data_bytes += d->len;
  else
    d->hole_bytes += d->len;
  d->have = false;
  return 0;
}

/* vol_diff callback: one run. */
static int
diff_run (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  struct diff_state *d = opaque;
  int r;

  if (++d->calls % 4096 == 0 && control_ctx_cancelled (d->ctx))
    return cairn_fail (-ECANCELED, "the diff was cancelled: the server is "
                       "stopping or the client went away");
  if (d->have && d->type == type && d->off + d->len == off) {
    d->len += len;
    return 0;
  }
  r = diff_flush (d);
  if (r != 0)
    return r;
  d->have = true;
  d->off = off;
  d->len = len;
  d->type = type;
  return 0;
}

/* volume.diff {from, to, max_runs?} → {"runs": [{offset, length, type}],
 * "truncated", "data_bytes", "hole_bytes"}
 */
static int
volume_diff (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "from", PARAM_STRING, true },
    { "to", PARAM_STRING, true },
    { "max_runs", PARAM_COUNT, false },
  };
  struct diff_state d = { .ctx = ctx, .max = CONTROL_DIFF_MAX_RUNS };
  json_t *max = json_object_get (params, "max_runs");
  int r = check_params (ctx, "volume.diff", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  if (max && json_integer_value (max) > CONTROL_DIFF_MAX_RUNS)
    return control_invalid_params (ctx, "volume.diff: \"max_runs\" must be "
                                   "at most %d", CONTROL_DIFF_MAX_RUNS);
  if (max)
    d.max = (size_t) json_integer_value (max);
  d.runs = json_array ();
  if (d.runs == NULL)
    return oom ();
  r = vol_diff (ctx_pool (ctx), param_str (params, "from"),
                param_str (params, "to"), diff_run, &d);
  if (r == 0)
    r = diff_flush (&d);
  if (r == DIFF_STOP)
    r = 0;
  if (r == 0) {
    *result = json_pack ("{s:o, s:b, s:I, s:I}", "runs", d.runs,
                         "truncated", (int) d.truncated,
                         "data_bytes", (json_int_t) d.data_bytes,
                         "hole_bytes", (json_int_t) d.hole_bytes);
    d.runs = NULL;
    if (*result == NULL)
      r = oom ();
  }
  json_decref (d.runs);
  return r;
}

/* ---------------------------------------------------------------- snapshots */

/* snapshot.create {volume | volumes, name} → {"snapshots": [...]}: one
 * snapshot of each volume, all in one generation.
 */
static int
snapshot_create (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, false },
    { "volumes", PARAM_STRINGS, false },
    { "name", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  json_t *one, *many, *arr = NULL, *obj;
  const char **vols = NULL;
  const char *name;
  size_t n;
  int r = check_params (ctx, "snapshot.create", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  one = json_object_get (params, "volume");
  many = json_object_get (params, "volumes");
  if ((one == NULL) == (many == NULL))
    return control_invalid_params (ctx, "snapshot.create: give either "
                                   "\"volume\" (a string) or \"volumes\" (an "
                                   "array of strings)");
  name = param_str (params, "name");
  n = many ? json_array_size (many) : 1;
  vols = calloc (n, sizeof *vols);
  if (vols == NULL)
    return oom ();
  for (size_t i = 0; r == 0 && i < n; i++) {
    vols[i] = json_string_value (many ? json_array_get (many, i) : one);
    r = check_volume_name ("volume", vols[i]);
  }
  if (r == 0)
    r = snap_create_many (pool, vols, n, name);
  if (r == 0 && (arr = json_array ()) == NULL)
    r = oom ();
  for (size_t i = 0; r == 0 && i < n; i++) {
    char full[FULL_NAME_MAX];

    snprintf (full, sizeof full, "%s@%s", vols[i], name);
    r = describe (pool, full, false, &obj);
    if (r == 0 && json_array_append_new (arr, obj) < 0)
      r = oom ();
  }
  if (r == 0) {
    *result = json_pack ("{s:o}", "snapshots", arr);
    arr = NULL;
    if (*result == NULL)
      r = oom ();
  }
  json_decref (arr);
  free (vols);
  return r;
}

/* snapshot.list {volume} → {"snapshots": [...]}, oldest first */
static int
snapshot_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  struct listing l = { 0 };
  struct vol_info vi;
  json_t *arr = NULL;
  const char *vol;
  int r = check_params (ctx, "snapshot.list", params, spec, ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  vol = param_str (params, "volume");
  r = check_volume_name ("volume", vol);
  if (r == 0)
    r = vol_stat (pool, vol, &vi);
  if (r == 0)
    r = listing_load (pool, &l);
  if (r == 0 && (arr = json_array ()) == NULL)
    r = oom ();
  for (size_t i = 0; r == 0 && i < l.n; i++)
    if (l.v[i].is_snapshot && l.v[i].id == vi.id)
      r = append_info (arr, &l, &l.v[i]);
  if (r == 0) {
    *result = json_pack ("{s:o}", "snapshots", arr);
    arr = NULL;
    if (*result == NULL)
      r = oom ();
    else
      r = set_damaged (*result, &l, vi.id);
  }
  json_decref (arr);
  listing_free (&l);
  return r;
}

/* snapshot.delete {volume, name} → null */
static int
snapshot_delete (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
    { "name", PARAM_STRING, true },
  };
  const char *vol;
  int r = check_params (ctx, "snapshot.delete", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  vol = param_str (params, "volume");
  r = check_volume_name ("volume", vol);
  return r < 0 ? r : snap_delete (ctx_pool (ctx), vol,
                                  param_str (params, "name"));
}

/* snapshot.rename {volume, name, to} → the snapshot */
static int
snapshot_rename (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
    { "name", PARAM_STRING, true },
    { "to", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  char full[FULL_NAME_MAX];
  const char *vol, *to;
  int r = check_params (ctx, "snapshot.rename", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  vol = param_str (params, "volume");
  to = param_str (params, "to");
  r = check_volume_name ("volume", vol);
  if (r == 0)
    r = snap_rename (pool, vol, param_str (params, "name"), to);
  if (r < 0)
    return r;
  snprintf (full, sizeof full, "%s@%s", vol, to);
  return describe (pool, full, false, result);
}

/* snapshot.space {volume, name} → {name, referenced, unique, written_since} */
static int
snapshot_space (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
    { "name", PARAM_STRING, true },
  };
  char full[FULL_NAME_MAX];
  struct snap_space sp;
  const char *vol, *name;
  int r = check_params (ctx, "snapshot.space", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  vol = param_str (params, "volume");
  name = param_str (params, "name");
  r = check_volume_name ("volume", vol);
  if (r == 0)
    r = snap_space (ctx_pool (ctx), vol, name, &sp);
  if (r < 0)
    return r;
  snprintf (full, sizeof full, "%s@%s", vol, name);
  *result = json_pack ("{s:s, s:I, s:I, s:I}", "name", full,
                       "referenced", (json_int_t) sp.referenced,
                       "unique", (json_int_t) sp.unique,
                       "written_since", (json_int_t) sp.written_since);
  return *result ? 0 : oom ();
}

/* ---------------------------------------------------------------- pool */

/* Add what background deletes have left to do to a status object. */
static int
reclaim_status (struct cairn_pool *pool, json_t *status)
{
  struct vol_reclaim_info ri;
  json_t *o;
  int r = vol_reclaim_status (pool, &ri);

  if (r < 0)
    return r;
  o = json_pack ("{s:I, s:I, s:I, s:b, s:s}",
                 "volumes", (json_int_t) ri.volumes,
                 "snapshots", (json_int_t) ri.ranges,
                 "freed", (json_int_t) ri.freed_bytes,
                 "running", (int) ri.running,
                 "error", ri.error);
  if (o == NULL || json_object_set_new (status, "reclaim", o) < 0)
    return oom ();
  return 0;
}

/* pool.status {} → the pool's identity, space, cache, I/O totals, state
 * background reclaim, and the damaged catalog records
 */
static int
pool_status (struct control_ctx *ctx, json_t *params, json_t **result)
{
  struct cairn_pool *pool = ctx_pool (ctx);
  struct listing l = { 0 };
  struct pool_info pi;
  uint64_t nvols = 0, nsnaps = 0;
  char uuid[37];
  json_t *cache, *io, *damaged = NULL;
  int r = check_params (ctx, "pool.status", params, NULL, 0);

  if (r == 0)
    r = listing_load (pool, &l);
  for (size_t i = 0; r == 0 && i < l.n; i++) {
    if (l.v[i].is_snapshot)
      nsnaps++;
    else
      nvols++;
  }
  if (r == 0)
    damaged = damaged_array (&l, 0);
  listing_free (&l);
  if (r < 0)
    return r;
  if (damaged == NULL)
    return oom ();
  pool_info (pool, &pi);
  uuid_format (pi.uuid, uuid);
  cache = json_pack ("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                     "nodes", (json_int_t) pi.cache.nodes,
                     "bytes", (json_int_t) pi.cache.bytes,
                     "dirty_nodes", (json_int_t) pi.cache.dirty_nodes,
                     "hits", (json_int_t) pi.cache.hits,
                     "misses", (json_int_t) pi.cache.misses,
                     "evictions", (json_int_t) pi.cache.evictions,
                     "csum_errors", (json_int_t) pi.cache.csum_errors,
                     "corrupt", (json_int_t) pi.cache.corrupt);
  if (cache == NULL) {
    json_decref (damaged);
    return oom ();
  }
  r = stats_pool_totals (pool, &io);
  if (r < 0) {
    json_decref (cache);
    json_decref (damaged);
    return r;
  }
  *result = json_pack ("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
                       "s:I, s:I, s:I, s:I, s:b, s:b, s:o, s:o, s:o}",
                       "uuid", uuid,
                       "generation", (json_int_t) pi.generation,
                       "open_generation", (json_int_t) pi.open_generation,
                       "commits", (json_int_t) pi.commits,
                       "node_size", (json_int_t) pi.node_size,
                       "block_size", (json_int_t) BLOCK_SIZE,
                       "size", (json_int_t) (pi.total_blocks * BLOCK_SIZE),
                       "data_size", (json_int_t) (pi.space.total * BLOCK_SIZE),
                       "used", (json_int_t) (pi.space.allocated * BLOCK_SIZE),
                       "free", (json_int_t) (pi.space.free * BLOCK_SIZE),
                       "pending", (json_int_t) (pi.space.pending * BLOCK_SIZE),
                       "reserve", (json_int_t) (pi.space.reserve * BLOCK_SIZE),
                       "volumes", (json_int_t) nvols,
                       "snapshots", (json_int_t) nsnaps,
                       "readonly", (int) pi.readonly,
                       "failed", (int) pi.failed,
                       "cache", cache,
                       "io", io,
                       "damaged", damaged);
  if (*result && (r = reclaim_status (pool, *result)) < 0) {
    json_decref (*result);
    *result = NULL;
    return r;
  }
  return *result ? 0 : oom ();
}

/* ---------------------------------------------------------------- table */

static const struct control_method catalog_methods[] = {
  { .name = "pool.status", .handler = pool_status, .blocking = true },
  { .name = "snapshot.create", .handler = snapshot_create, .blocking = true },
  { .name = "snapshot.delete", .handler = snapshot_delete, .blocking = true },
  { .name = "snapshot.list", .handler = snapshot_list, .blocking = true },
  { .name = "snapshot.rename", .handler = snapshot_rename, .blocking = true },
  { .name = "snapshot.space", .handler = snapshot_space, .blocking = true },
  { .name = "stats.list", .handler = stats_list, .blocking = true },
  { .name = "stats.show", .handler = stats_show, .blocking = true },
  { .name = "volume.clone", .handler = volume_clone, .blocking = true },
  { .name = "volume.create", .handler = volume_create, .blocking = true },
  { .name = "volume.delete", .handler = volume_delete, .blocking = true },
  { .name = "volume.diff", .handler = volume_diff, .blocking = true },
  { .name = "volume.list", .handler = volume_list, .blocking = true },
  { .name = "volume.rename", .handler = volume_rename, .blocking = true },
  { .name = "volume.resize", .handler = volume_resize, .blocking = true },
  { .name = "volume.rollback", .handler = volume_rollback, .blocking = true },
  { .name = "volume.set", .handler = volume_set, .blocking = true },
  { .name = "volume.show", .handler = volume_show, .blocking = true },
};

const struct control_method_table cairn_catalog_methods = {
  .methods = catalog_methods,
  .n = ARRAY_SIZE (catalog_methods),
};
