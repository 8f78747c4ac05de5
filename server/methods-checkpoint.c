/* Cairn control server: the checkpoint.* methods (see methods-catalog.c
 * for how a handler checks its params and reports errors,
 * cairn-protocol(7) for each method, engine/checkpoint.c for what a
 * checkpoint is).
 *
 * A checkpoint is described by one object:
 *
 *   {"name": "db@#412", "generation": 412, "ctime": "2026-12-07T10:40:55Z",
 *    "written": 1048576, "size": 10737418240, "referenced": 4194304,
 *    "unique": 65536, "snapshot": "daily" | null, "clones": 0, "opens": 1,
 *    "kept_by": ["snapshot", "clone", "open"]}
 *
 * "unique" is what dropping the checkpoint would free now (0 while a
 * snapshot or clone keeps its state); "kept_by" says what keeps it beyond
 * the retention policy (empty: only the policy).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "methods-int.h"
#include "retention.h"
#include "volume.h"

/* The object of checkpoint c of volume vol. */
static json_t *
checkpoint_object (const char *vol, const struct vol_checkpoint *c)
{
  char name[FULL_NAME_MAX], ctime[32];
  json_t *why = json_array ();

  snprintf (name, sizeof name, "%s@#%" PRIu64, vol, c->gen);
  iso_time (c->ctime, ctime);
  if (why && c->snapshot[0])
    json_array_append_new (why, json_string ("snapshot"));
  if (why && c->clones)
    json_array_append_new (why, json_string ("clone"));
  if (why && c->opens)
    json_array_append_new (why, json_string ("open"));
  if (why == NULL)
    return NULL;
  return json_pack ("{s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:s?, s:I, s:I, "
                    "s:o}",
                    "name", name, "generation", (json_int_t) c->gen,
                    "ctime", ctime, "written", (json_int_t) c->written,
                    "size", (json_int_t) c->size,
                    "referenced", (json_int_t) c->referenced,
                    "unique", (json_int_t) c->unique,
                    "snapshot", c->snapshot[0] ? c->snapshot : NULL,
                    "clones", (json_int_t) c->clones,
                    "opens", (json_int_t) c->opens, "kept_by", why);
}

/* State of checkpoint_list's walk. */
struct list_state {
  const char *vol;
  json_t *arr;
  uint64_t held;
};

/* vol_checkpoint_list callback: append one object. */
static int
list_one (void *opaque, const struct vol_checkpoint *c)
{
  struct list_state *ls = opaque;
  json_t *obj = checkpoint_object (ls->vol, c);

  if (obj == NULL || json_array_append_new (ls->arr, obj) < 0)
    return oom ();
  ls->held += c->unique;
  return 0;
}

/* A time member ("YYYY-MM-DDTHH:MM:SSZ"), or dflt when absent. */
static int
param_time (struct control_ctx *ctx, json_t *params, const char *name,
            uint64_t dflt, uint64_t *tp)
{
  const char *s = param_str (params, name);

  *tp = dflt;
  if (s && vol_parse_time (s, tp) < 0)
    return control_invalid_params (ctx, "checkpoint.list: \"%s\": %s", name,
                                   cairn_errmsg ());
  return 0;
}

/* The settings object of a volume (NULL: the pool's defaults). */
static json_t *
settings_object (struct cairn_pool *pool, const char *vol, int *rp)
{
  struct vol_ckpt_settings st;
  json_t *obj;

  *rp = vol_checkpoint_settings (pool, vol, &st);
  if (*rp < 0)
    return NULL;
  obj = json_pack ("{s:s, s:s, s:s, s:s, s:I}",
                   "checkpoints", st.checkpoints ? "on" : "off",
                   "checkpoints_from", st.own_checkpoints ? "volume" : "pool",
                   "retention", st.retention,
                   "retention_from", st.own_retention ? "volume" : "pool",
                   "collected", (json_int_t) st.dropped);
  /* The pool's own setting, in the pool's settings only. */
  if (obj && vol == NULL) {
    char d[RET_DURATION_MAX];

    char pct[16];

    snprintf (pct, sizeof pct, "%u%%", st.space_threshold);
    if (json_object_set_new (obj, "commit_interval",
                             json_string (retention_format_duration
                                          (st.commit_interval, d))) < 0 ||
        json_object_set_new (obj, "commit_interval_from",
                             json_string (st.own_interval ? "pool"
                                          : "default")) < 0 ||
        json_object_set_new (obj, "space_threshold", json_string (pct)) < 0 ||
        json_object_set_new (obj, "space_threshold_from",
                             json_string (st.own_threshold ? "pool"
                                          : "default")) < 0) {
      json_decref (obj);
      obj = NULL;
    }
  }
  if (obj == NULL)
    *rp = oom ();
  return obj;
}

/* checkpoint.list {volume, since?, until?} → {"volume", "checkpoints": [...],
 * "settings": {...}}, oldest first
 */
int
checkpoint_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
    { "since", PARAM_STRING, false },
    { "until", PARAM_STRING, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  struct list_state ls = { 0 };
  uint64_t since, until;
  json_t *settings = NULL;
  int r = check_params (ctx, "checkpoint.list", params, spec,
                        ARRAY_SIZE (spec));

  if (r == 0)
    r = param_time (ctx, params, "since", 0, &since);
  if (r == 0)
    r = param_time (ctx, params, "until", UINT64_MAX, &until);
  if (r < 0)
    return r;
  ls.vol = param_str (params, "volume");
  r = check_volume_name ("volume", ls.vol);
  if (r == 0 && (ls.arr = json_array ()) == NULL)
    r = oom ();
  if (r == 0)
    r = vol_checkpoint_list (pool, ls.vol, since, until, list_one, &ls);
  if (r == 0)
    settings = settings_object (pool, ls.vol, &r);
  if (r == 0) {
    *result = json_pack ("{s:s, s:o, s:I, s:o}", "volume", ls.vol,
                         "checkpoints", ls.arr, "unique",
                         (json_int_t) ls.held, "settings", settings);
    ls.arr = settings = NULL;
    if (*result == NULL)
      r = oom ();
  }
  json_decref (ls.arr);
  json_decref (settings);
  return r;
}

/* checkpoint.promote {checkpoint: "VOL@#GEN" | "VOL@TIME", name} → the
 * snapshot
 */
int
checkpoint_promote (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "checkpoint", PARAM_STRING, true },
    { "name", PARAM_STRING, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  char full[FULL_NAME_MAX];
  const char *ck, *name, *at;
  int r = check_params (ctx, "checkpoint.promote", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  ck = param_str (params, "checkpoint");
  name = param_str (params, "name");
  at = strchr (ck, '@');
  if (at == NULL || at == ck || (size_t) (at - ck) > VOL_NAME_MAX)
    return cairn_fail (-EINVAL, "'%s' is not a checkpoint: name one as "
                       "VOL@#GEN or VOL@YYYY-MM-DDTHH:MM:SSZ", ck);
  r = vol_checkpoint_promote (pool, ck, name);
  if (r < 0)
    return r;
  snprintf (full, sizeof full, "%.*s@%s", (int) (at - ck), ck, name);
  return describe (pool, full, false, result);
}

/* State of checkpoint_prune's report. */
struct prune_state {
  const char *vol;
  json_t *arr;
};

/* vol_checkpoint_prune callback: one checkpoint and its mark. */
static int
prune_one (void *opaque, uint64_t gen, int64_t ctime, const char *mark)
{
  struct prune_state *ps = opaque;
  char name[FULL_NAME_MAX], t[32];
  json_t *obj;

  snprintf (name, sizeof name, "%s@#%" PRIu64, ps->vol, gen);
  iso_time (ctime < 0 ? 0 : (uint64_t) ctime, t);
  obj = json_pack ("{s:s, s:I, s:s, s:s, s:b}", "name", name,
                   "generation", (json_int_t) gen, "ctime", t, "mark", mark,
                   "keep", strcmp (mark, "remove") != 0);
  if (obj == NULL || json_array_append_new (ps->arr, obj) < 0)
    return oom ();
  return 0;
}

/* checkpoint.prune {volume, dry_run?} → {"checkpoints": [{name, generation,
 * ctime, mark, keep}], "removed": N, "dry_run": bool}
 */
int
checkpoint_prune (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, true },
    { "dry_run", PARAM_BOOL, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  struct prune_state ps = { 0 };
  uint64_t dropped = 0;
  bool dry;
  int r = check_params (ctx, "checkpoint.prune", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  ps.vol = param_str (params, "volume");
  dry = json_is_true (json_object_get (params, "dry_run"));
  r = check_volume_name ("volume", ps.vol);
  if (r == 0 && (ps.arr = json_array ()) == NULL)
    r = oom ();
  if (r == 0)
    r = vol_checkpoint_prune (pool, ps.vol, dry, prune_one, &ps, &dropped);
  if (r == 0) {
    size_t i, removed = 0;
    json_t *o;

    json_array_foreach (ps.arr, i, o)
      removed += !json_is_true (json_object_get (o, "keep"));
    *result = json_pack ("{s:s, s:o, s:I, s:b}", "volume", ps.vol,
                         "checkpoints", ps.arr, "removed",
                         (json_int_t) (dry ? removed : dropped),
                         "dry_run", (int) dry);
    ps.arr = NULL;
    if (*result == NULL)
      r = oom ();
  }
  json_decref (ps.arr);
  return r;
}

/* checkpoint.set {volume?, settings: {KEY: "VALUE" | null}} → the settings
 * (without "volume": the pool's defaults)
 */
int
checkpoint_set (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "volume", PARAM_STRING, false },
    { "settings", PARAM_OBJECT, true },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  const char *vol, *key;
  json_t *settings, *v;
  int r = check_params (ctx, "checkpoint.set", params, spec,
                        ARRAY_SIZE (spec));

  if (r < 0)
    return r;
  vol = param_str (params, "volume");
  settings = json_object_get (params, "settings");
  json_object_foreach (settings, key, v)
    if (!json_is_string (v) && !json_is_null (v))
      return control_invalid_params (ctx, "checkpoint.set: setting \"%.64s\" "
                                     "must be a string, or null for the "
                                     "pool's", key);
  if (vol && (r = check_volume_name ("volume", vol)) < 0)
    return r;
  json_object_foreach (settings, key, v) {
    r = vol_checkpoint_set (pool, vol, key, json_string_value (v));
    if (r < 0)
      return r;
  }
  *result = settings_object (pool, vol, &r);
  return r;
}
