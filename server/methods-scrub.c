/* Cairn control server: the scrub.* methods (engine/scrub.c for what a
 * scrub reads and how it repairs, cairn-protocol(7) for each method).
 *
 *   scrub.start  {rate?, since_last?, wait?} → STATUS
 *   scrub.pause  {} → STATUS
 *   scrub.resume {rate?, wait?} → STATUS
 *   scrub.cancel {} → STATUS
 *   scrub.status {} → STATUS
 *
 * STATUS is {"state", "interrupted", "since_last", "rate_limit",
 * "pass_generation", "since_generation", "last_complete_generation",
 * "bytes_done", "bytes_total", "bytes_read", "rate", "elapsed", "started",
 * "blocks", "errors", "repaired", "unrepairable", "cursor": {"volume_id",
 * "state"}, "devices": [{"index", "path", "errors", "repaired"}],
 * "damage": [{"state", "metadata", "offset", "length"}],
 * "damage_truncated", "unread"?: [VOL, ...]}: bytes, bytes per second,
 * seconds; "unread" names the volumes whose catalog record does not
 * decode, which no scrub can read.  With "wait",
 * the method returns once the pass has ended (or was paused or cancelled
 * by another request), for scripts and for a stopped pool (cairn --pool).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "methods-int.h"
#include "scrub.h"

/* The devices' part of a status. */
static json_t *
devices_json (struct cairn_pool *pool, const struct scrub_status *st)
{
  struct cairn_dev *dev = pool_dev (pool);
  json_t *arr = json_array ();

  for (unsigned i = 0; arr && i < st->nmembers; i++) {
    struct dev_member_info mi;

    dev_chunk_member (dev, i, &mi);
    if (json_array_append_new (arr, json_pack (
          "{s:I, s:s?, s:I, s:I}", "index", (json_int_t) i,
          "path", mi.name[0] ? mi.name : NULL,
          "errors", (json_int_t) st->member_bad[i],
          "repaired", (json_int_t) st->member_repaired[i])) < 0) {
      json_decref (arr);
      return NULL;
    }
  }
  return arr;
}

/* The damage the pass found that it could not repair. */
static json_t *
damage_json (const struct scrub_status *st)
{
  json_t *arr = json_array ();

  for (size_t i = 0; arr && i < st->ndamage; i++) {
    const struct scrub_damage *d = &st->damage[i];

    if (json_array_append_new (arr, json_pack (
          "{s:s, s:b, s:I, s:I}", "state", d->state,
          "metadata", (int) d->metadata, "offset", (json_int_t) d->offset,
          "length", (json_int_t) d->length)) < 0) {
      json_decref (arr);
      return NULL;
    }
  }
  return arr;
}

/* The status object of the pool's scrub. */
static int
status_json (struct cairn_pool *pool, json_t **result)
{
  struct scrub_status *st = malloc (sizeof *st);
  json_t *devs = NULL, *dmg = NULL;
  char started[32];
  int r;

  if (st == NULL)
    return oom ();
  r = scrub_status (pool, st);
  if (r < 0) {
    free (st);
    return r;
  }
  iso_time ((uint64_t) st->started, started);
  devs = devices_json (pool, st);
  dmg = damage_json (st);
  if (devs && dmg)
    *result = json_pack (
      "{s:s, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:s?, "
      "s:I, s:I, s:I, s:I, s:{s:I, s:s}, s:O, s:O, s:b}",
      "state", scrub_state_name (st->state),
      "interrupted", (int) st->interrupted,
      "since_last", (int) st->since_last,
      "rate_limit", (json_int_t) st->rate,
      "pass_generation", (json_int_t) st->pass_gen,
      "since_generation", (json_int_t) st->since_gen,
      "last_complete_generation", (json_int_t) st->last_complete_gen,
      "bytes_done", (json_int_t) st->bytes_done,
      "bytes_total", (json_int_t) st->bytes_total,
      "bytes_read", (json_int_t) st->bytes_read,
      "rate", (json_int_t) (st->elapsed_ms ? st->bytes_read * 1000 /
                            st->elapsed_ms : 0),
      "elapsed", st->elapsed_ms / 1000.0,
      "started", st->started ? started : NULL,
      "blocks", (json_int_t) st->blocks,
      "errors", (json_int_t) st->bad_copies,
      "repaired", (json_int_t) st->repaired,
      "unrepairable", (json_int_t) st->lost,
      "cursor", "volume_id", (json_int_t) st->cursor_id,
      "state", st->cursor_gen == UINT64_MAX ? "live" : "pinned",
      "devices", devs, "damage", dmg,
      "damage_truncated", (int) (st->lost > 0 &&
                                 st->ndamage == SCRUB_DAMAGE_MAX));
  json_decref (devs);
  json_decref (dmg);
  if (*result && st->nunread) {
    json_t *arr = json_array ();

    for (size_t i = 0; arr && i < st->nunread; i++)
      json_array_append_new (arr, json_string (st->unread[i]));
    if (arr == NULL || json_object_set_new (*result, "unread", arr) < 0) {
      json_decref (*result);
      *result = NULL;
    }
  }
  free (st);
  return *result ? 0 : oom ();
}

/* control_ctx_cancelled for scrub_wait. */
static bool
ctx_stop (void *opaque)
{
  return control_ctx_cancelled (opaque);
}

/* The rate member, UINT64_MAX when absent. */
static int
param_rate (struct control_ctx *ctx, const char *method, json_t *params,
            uint64_t *ratep)
{
  *ratep = UINT64_MAX;
  if (json_object_get (params, "rate") == NULL)
    return 0;
  return param_size (ctx, method, params, "rate", ratep);
}

/* scrub.start {rate?, since_last?, wait?} → STATUS */
int
scrub_start_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "rate", PARAM_SIZE, false },
    { "since_last", PARAM_BOOL, false },
    { "wait", PARAM_BOOL, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  struct scrub_opts o = { 0 };
  uint64_t rate;
  int r = check_params (ctx, "scrub.start", params, spec, ARRAY_SIZE (spec));

  if (r == 0)
    r = param_rate (ctx, "scrub.start", params, &rate);
  if (r < 0)
    return r;
  o.rate = rate == UINT64_MAX ? 0 : rate;
  o.since_last = json_is_true (json_object_get (params, "since_last"));
  r = scrub_start (pool, &o);
  if (r == 0 && json_is_true (json_object_get (params, "wait")))
    r = scrub_wait (pool, ctx_stop, ctx);
  if (r < 0)
    return r;
  return status_json (pool, result);
}

/* scrub.pause {} → STATUS */
int
scrub_pause_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  int r = check_params (ctx, "scrub.pause", params, NULL, 0);

  if (r == 0)
    r = scrub_pause (ctx_pool (ctx));
  return r < 0 ? r : status_json (ctx_pool (ctx), result);
}

/* scrub.resume {rate?, wait?} → STATUS */
int
scrub_resume_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "rate", PARAM_SIZE, false },
    { "wait", PARAM_BOOL, false },
  };
  struct cairn_pool *pool = ctx_pool (ctx);
  uint64_t rate;
  int r = check_params (ctx, "scrub.resume", params, spec, ARRAY_SIZE (spec));

  if (r == 0)
    r = param_rate (ctx, "scrub.resume", params, &rate);
  if (r == 0)
    r = scrub_resume (pool, rate);
  if (r == 0 && json_is_true (json_object_get (params, "wait")))
    r = scrub_wait (pool, ctx_stop, ctx);
  return r < 0 ? r : status_json (pool, result);
}

/* scrub.cancel {} → STATUS */
int
scrub_cancel_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  int r = check_params (ctx, "scrub.cancel", params, NULL, 0);

  if (r == 0)
    r = scrub_cancel (ctx_pool (ctx));
  return r < 0 ? r : status_json (ctx_pool (ctx), result);
}

/* scrub.status {} → STATUS */
int
scrub_status_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  int r = check_params (ctx, "scrub.status", params, NULL, 0);

  return r < 0 ? r : status_json (ctx_pool (ctx), result);
}

/* A scrub that runs or is paused, as a background job. */
int
scrub_bg_job (struct cairn_pool *pool, struct control_bg_job *job)
{
  struct scrub_status *st = malloc (sizeof *st);
  int r;

  if (st == NULL)
    return 0;
  r = scrub_status (pool, st);
  if (r < 0 || (st->state != SCRUB_RUNNING && st->state != SCRUB_PAUSED)) {
    cairn_error_clear ();
    free (st);
    return 0;
  }
  memset (job, 0, sizeof *job);
  job->key = UINT64_MAX - 1;  /* one scrub a pool: never a reclaim's seq */
  snprintf (job->method, sizeof job->method, "scrub");
  snprintf (job->what, sizeof job->what, "%s%s, %s%s",
            st->since_last ? "blocks born since the last pass" : "the pool",
            st->rate ? " (rate-limited)" : "",
            scrub_state_name (st->state),
            st->interrupted ? " (interrupted)" : "");
  job->done = st->bytes_done;
  job->total = st->bytes_total;
  job->started = st->started;
  job->no_cancel = "a scrub is paused, resumed and cancelled with 'cairn "
                   "scrub pause|resume|cancel'";
  free (st);
  return 1;
}
