/* Cairn control server: the snapshot.* methods (see methods-catalog.c for
 * how a handler checks its params and reports errors, cairn-protocol(7)
 * for each method).
 *
 * snapshot.create takes one or several volumes and snapshots them all in
 * one generation; the others name a snapshot by its volume and its name.
 * The objects they return are built in methods-objects.c.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include "methods-int.h"
#include "volume.h"

/* snapshot.create {volume | volumes, name} → {"snapshots": [...]}: one
 * snapshot of each volume, all in one generation.
 */
int
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
int
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
      r = append_info (arr, pool, &l.v[i]);
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
int
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
int
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
int
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
