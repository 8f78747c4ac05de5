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
 * The objects that describe volumes and snapshots, and the damaged
 * records reported beside listings, are built in methods-objects.c;
 * the snapshot.* methods are in methods-snapshot.c.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "methods-int.h"
#include "units.h"
#include "volume.h"

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
int
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
int
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
      r = append_info (arr, ctx_pool (ctx), &l.v[i]);
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

/* Add the intent log's state to a status object (txn-log.c): whether
 * flushes are log writes now, the ring, what the log served since the
 * open, and on a pool not yet replayed (a read-only open after a crash)
 * the records a read-write open would replay.
 */
static int
intent_log_status (struct cairn_pool *pool, json_t *status)
{
  struct pool_log_info li;
  json_t *o;
  int r = pool_log_info (pool, &li);

  if (r < 0)
    return r;
  o = json_pack ("{s:b, s:I, s:I, s:I, s:I}",
                 "active", (int) pool_log_active (pool),
                 "ring_blocks", (json_int_t) li.nblocks,
                 "flushes", (json_int_t) li.flushes,
                 "blocks_written", (json_int_t) li.blocks_written,
                 "live_records", (json_int_t) li.live_records);
  if (o == NULL || json_object_set_new (status, "intent_log", o) < 0)
    return oom ();
  return 0;
}

/* Add the checkpoint collector's state to a status object: the oldest
 * kept checkpoint, and when space ran short and how much went for it.
 */
static int
checkpoint_status (struct cairn_pool *pool, json_t *status)
{
  struct vol_ckpt_status cs;
  char oldest[32], last[32];
  json_t *o;
  int r = vol_checkpoint_status (pool, &cs);

  if (r < 0)
    return r;
  iso_time (cs.oldest, oldest);
  iso_time (cs.pressure_last > 0 ? (uint64_t) cs.pressure_last : 0, last);
  o = json_pack ("{s:s, s:I, s:s?, s:I, s:I, s:I, s:I, s:s?, s:I, s:s}",
                 "default", cs.default_on ? "on" : "off",
                 "volumes", (json_int_t) cs.count_volumes,
                 "oldest", cs.oldest ? oldest : NULL,
                 "oldest_age", (json_int_t) (cs.oldest ? cs.now -
                                             (int64_t) cs.oldest : 0),
                 "collected", (json_int_t) cs.collected,
                 "space_dropped", (json_int_t) cs.pressure_dropped,
                 "space_events", (json_int_t) cs.pressure_events,
                 "space_last", cs.pressure_last > 0 ? last : NULL,
                 "commit_interval_ms", (json_int_t) cs.commit_interval_ms,
                 "commit_interval_from", cs.interval_from);
  if (o == NULL || json_object_set_new (status, "checkpoints", o) < 0)
    return oom ();
  return 0;
}

/* pool.status's "devices", for a pool of several devices (dev-chunk.c):
 * the profile and each device's state and error counters; nothing for a
 * pool of one device.
 */
static int
devices_status (struct cairn_pool *pool, json_t *status)
{
  struct cairn_dev *dev = pool_dev (pool);
  struct dev_chunk_info ci;
  json_t *o, *members;

  if (!dev_is_chunked (dev))
    return 0;
  dev_chunk_info (dev, &ci);
  members = json_array ();
  if (members == NULL)
    return oom ();
  for (unsigned i = 0; i < ci.nmembers; i++) {
    struct dev_member_info mi;
    char uuid[37];

    dev_chunk_member (dev, i, &mi);
    uuid_format (mi.uuid, uuid);
    if (json_array_append_new (members, json_pack (
          "{s:I, s:s, s:s, s:s?, s:I, s:I, s:I, s:I, s:I, s:I}",
          "index", (json_int_t) i, "uuid", uuid,
          "state", mi.state == DEV_MEMBER_ONLINE ? "online"
                   : mi.state == DEV_MEMBER_REPLACING ? "replacing"
                   : "missing",
          "path", mi.name[0] ? mi.name : NULL,
          "size", (json_int_t) mi.size, "used", (json_int_t) mi.used,
          "read_errors", (json_int_t) mi.read_errors,
          "write_errors", (json_int_t) mi.write_errors,
          "cksum_errors", (json_int_t) mi.cksum_errors,
          "repaired", (json_int_t) mi.repaired)) < 0) {
      json_decref (members);
      return oom ();
    }
  }
  o = json_pack ("{s:s, s:I, s:I, s:b, s:I, s:o}",
                 "profile", dev_profile_name (ci.profile),
                 "copies", (json_int_t) ci.ncopies,
                 "stripe_size", (json_int_t) ci.stripe_size,
                 "degraded", (int) ci.degraded,
                 "missing", (json_int_t) ci.missing,
                 "members", members);
  if (o == NULL || json_object_set_new (status, "devices", o) < 0)
    return oom ();
  return device_replace_status_json (pool, o);
}

/* pool.status {} → the pool's identity, space, cache, I/O totals, state
 * background reclaim, the damaged catalog records, and the devices of a
 * pool of several
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
                       "s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:s?, "
                       "s:s, s:I, s:I, s:o, s:o, s:o}",
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
                       "free_runs", (json_int_t) pi.space.extents,
                       "space_map_bytes", (json_int_t) pi.space.map_bytes,
                       "high_water", (json_int_t) (pi.space.touched * BLOCK_SIZE),
                       "volumes", (json_int_t) nvols,
                       "snapshots", (json_int_t) nsnaps,
                       "readonly", (int) pi.readonly,
                       "failed", (int) pi.failed,
                       "failure", pi.failed ? pi.failed_why : NULL,
                       "verify", pi.check_every_read ? "always" : "disk",
                       "blocks_trusted", (json_int_t) pi.blocks_trusted,
                       "read_ahead", (json_int_t) pi.bytes_read_ahead,
                       "cache", cache,
                       "io", io,
                       "damaged", damaged);
  if (*result && ((r = reclaim_status (pool, *result)) < 0 ||
                  (r = checkpoint_status (pool, *result)) < 0 ||
                  (r = intent_log_status (pool, *result)) < 0 ||
                  (r = devices_status (pool, *result)) < 0 ||
                  (r = rbd_status (pool, *result)) < 0)) {
    json_decref (*result);
    *result = NULL;
    return r;
  }
  return *result ? 0 : oom ();
}

/* ---------------------------------------------------------------- table */

static const struct control_method catalog_methods[] = {
  { .name = "checkpoint.list", .handler = checkpoint_list, .blocking = true },
  { .name = "checkpoint.promote", .handler = checkpoint_promote,
    .blocking = true },
  { .name = "checkpoint.prune", .handler = checkpoint_prune, .blocking = true },
  { .name = "checkpoint.set", .handler = checkpoint_set, .blocking = true },
  { .name = "device.replace", .handler = device_replace_method,
    .blocking = true },
  { .name = "device.replace_cancel", .handler = device_replace_cancel_method,
    .blocking = true },
  { .name = "device.replace_status", .handler = device_replace_status_method,
    .blocking = true },
  { .name = "pool.status", .handler = pool_status, .blocking = true },
  { .name = "scrub.cancel", .handler = scrub_cancel_method, .blocking = true },
  { .name = "scrub.pause", .handler = scrub_pause_method, .blocking = true },
  { .name = "scrub.resume", .handler = scrub_resume_method, .blocking = true },
  { .name = "scrub.start", .handler = scrub_start_method, .blocking = true },
  { .name = "scrub.status", .handler = scrub_status_method, .blocking = true },
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
