/* Cairn control server: the device.* methods, replacing a device of a pool
 * of several (engine/dev-replace.c says how; cairn-protocol(7) for each
 * method).
 *
 *   device.replace        {old, new?, wait?} → STATUS
 *   device.replace_cancel {} → STATUS
 *   device.replace_status {} → STATUS
 *
 * STATUS is {"state", "index", "uuid", "target", "source_missing", "done",
 * "total", "started", "error"?}: state as dev_replace_state_name, index
 * the device replaced, uuid the new device's, target its path (null when
 * it was not named at open), source_missing whether the device replaced
 * is gone (redundancy is lost until the end), done and total logical
 * bytes.  device.replace with the replace in progress and "new" its
 * target (or absent) resumes it.  With "wait" the method returns once the
 * replace has ended, failed or been cancelled, for scripts and for a
 * stopped pool (cairn --pool).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "methods-int.h"

/* The pool's device, when it has several: else -EINVAL with why. */
static int
chunked_dev (struct control_ctx *ctx, struct cairn_dev **devp)
{
  *devp = pool_dev (ctx_pool (ctx));
  if (!dev_is_chunked (*devp))
    return cairn_fail (-EINVAL, "the pool is on one device: there is no "
                       "device to replace (a pool of several devices is made "
                       "with 'cairn mkpool A B --data mirror ...')");
  return 0;
}

/* The status object of the device's replace. */
static int
status_json (struct cairn_dev *dev, json_t **result)
{
  struct dev_replace_status st;
  char uuid[37], started[32];

  dev_chunk_replace_status (dev, &st);
  uuid_format (st.uuid, uuid);
  iso_time ((uint64_t) st.started, started);
  *result = json_pack ("{s:s, s:I, s:s?, s:s?, s:b, s:I, s:I, s:s?}",
                       "state", dev_replace_state_name (st.state),
                       "index", (json_int_t) st.index,
                       "uuid", st.state == DEV_REPLACE_NONE ? NULL : uuid,
                       "target", st.target[0] ? st.target : NULL,
                       "source_missing", (int) st.source_missing,
                       "done", (json_int_t) st.done,
                       "total", (json_int_t) st.total,
                       "started", st.started ? started : NULL);
  if (*result && st.error[0] &&
      json_object_set_new (*result, "error", json_string (st.error)) < 0) {
    json_decref (*result);
    *result = NULL;
  }
  return *result ? 0 : oom ();
}

/* The member a word names: its index, its UUID, or its device's path. */
static int
find_member (struct cairn_dev *dev, const char *word, unsigned *ip)
{
  struct dev_chunk_info ci;
  char *end;
  unsigned long n = strtoul (word, &end, 10);

  dev_chunk_info (dev, &ci);
  if (*word && *end == '\0') {
    if (n >= ci.nmembers)
      return cairn_fail (-ENOENT, "the pool has no device %s (devices 0 to "
                         "%u)", word, ci.nmembers - 1);
    *ip = (unsigned) n;
    return 0;
  }
  for (unsigned i = 0; i < ci.nmembers; i++) {
    struct dev_member_info mi;
    char uuid[37];

    dev_chunk_member (dev, i, &mi);
    uuid_format (mi.uuid, uuid);
    if (strcasecmp (word, uuid) == 0 || (mi.name[0] &&
                                          strcmp (word, mi.name) == 0)) {
      *ip = i;
      return 0;
    }
  }
  return cairn_fail (-ENOENT, "no device of the pool is '%s': name it by "
                     "index, UUID or path as 'cairn status' lists them", word);
}

/* control_ctx_cancelled for dev_chunk_replace_wait. */
static bool
ctx_stop (void *opaque)
{
  return control_ctx_cancelled (opaque);
}

/* Resume the replace in progress, or start one of old by the device at
 * path new_path.
 */
static int
replace_start (struct cairn_dev *dev, const char *old_word,
               const char *new_path)
{
  struct dev_replace_status st;
  struct cairn_dev *target;
  unsigned old = 0;
  int r;

  dev_chunk_replace_status (dev, &st);
  if ((st.state == DEV_REPLACE_STOPPED || st.state == DEV_REPLACE_FAILED ||
       st.state == DEV_REPLACE_RUNNING) && st.target[0] &&
      (new_path == NULL || strcmp (new_path, st.target) == 0))
    return dev_chunk_replace_resume (dev);
  if (new_path == NULL)
    return cairn_fail (-ENOENT, "no device replace is in progress to resume "
                       "(name the device to replace and the new device)");
  r = find_member (dev, old_word, &old);
  if (r < 0)
    return r;
  r = dev_open (new_path, 0, 0, &target);
  if (r < 0)
    return r;
  r = dev_chunk_replace_start (dev, old, target, true);
  if (r < 0)
    dev_close (target);
  return r;
}

/* device.replace {old, new?, wait?} → STATUS */
int
device_replace_method (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "old", PARAM_STRING, true },
    { "new", PARAM_STRING, false },
    { "wait", PARAM_BOOL, false },
  };
  struct cairn_dev *dev = NULL;
  int r = check_params (ctx, "device.replace", params, spec,
                        ARRAY_SIZE (spec));

  if (r == 0)
    r = chunked_dev (ctx, &dev);
  if (r == 0)
    r = replace_start (dev, param_str (params, "old"),
                       param_str (params, "new"));
  if (r == 0 && json_is_true (json_object_get (params, "wait")))
    r = dev_chunk_replace_wait (dev, ctx_stop, ctx);
  return r < 0 ? r : status_json (dev, result);
}

/* device.replace_cancel or device.replace_status {} → STATUS */
static int
replace_simple (struct control_ctx *ctx, json_t *params, json_t **result,
                const char *method, bool cancel)
{
  struct cairn_dev *dev = NULL;
  int r = check_params (ctx, method, params, NULL, 0);

  if (r == 0)
    r = chunked_dev (ctx, &dev);
  if (r == 0 && cancel)
    r = dev_chunk_replace_cancel (dev);
  return r < 0 ? r : status_json (dev, result);
}

int
device_replace_cancel_method (struct control_ctx *ctx, json_t *params,
                              json_t **result)
{
  return replace_simple (ctx, params, result, "device.replace_cancel", true);
}

int
device_replace_status_method (struct control_ctx *ctx, json_t *params,
                              json_t **result)
{
  return replace_simple (ctx, params, result, "device.replace_status", false);
}

/* pool.status's "replace" and "redundant" in "devices": the replace's
 * status, when one has run since the pool was opened or is in progress;
 * whether every block has all its copies (no device missing, none being
 * replaced while missing).
 */
int
device_replace_status_json (struct cairn_pool *pool, json_t *devices)
{
  struct cairn_dev *dev = pool_dev (pool);
  struct dev_replace_status st;
  struct dev_chunk_info ci;
  json_t *o;
  int r;

  dev_chunk_info (dev, &ci);
  dev_chunk_replace_status (dev, &st);
  if (json_object_set_new (devices, "redundant", json_boolean (
        !ci.degraded && !st.source_missing)) < 0)
    return oom ();
  if (st.state == DEV_REPLACE_NONE)
    return 0;
  r = status_json (dev, &o);
  if (r < 0)
    return r;
  return json_object_set_new (devices, "replace", o) < 0 ? oom () : 0;
}

/* A replace in progress, as a background job. */
int
device_replace_bg_job (struct cairn_pool *pool, struct control_bg_job *job)
{
  struct cairn_dev *dev = pool_dev (pool);
  struct dev_replace_status st;

  if (!dev_is_chunked (dev))
    return 0;
  dev_chunk_replace_status (dev, &st);
  if (st.state != DEV_REPLACE_RUNNING && st.state != DEV_REPLACE_STOPPED &&
      st.state != DEV_REPLACE_FAILED)
    return 0;
  memset (job, 0, sizeof *job);
  job->key = UINT64_MAX - 2;  /* one replace a pool: never a reclaim's seq */
  snprintf (job->method, sizeof job->method, "device.replace");
  snprintf (job->what, sizeof job->what, "device %u by %s, %s", st.index,
            st.target[0] ? st.target : "(not named)",
            dev_replace_state_name (st.state));
  job->done = st.done;
  job->total = st.total;
  job->started = st.started;
  job->no_cancel = "a replace is cancelled with 'cairn device replace "
                   "--cancel'";
  return 1;
}
