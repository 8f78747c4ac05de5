/* Cairn control server: jobs and the handler side of stream mode.
 *
 *   job.list    → {"jobs": [JOB, ...]}
 *   job.show    {"job": ID} → JOB
 *   job.cancel  {"job": ID} → JOB (its cancel flag now set)
 *
 * where JOB is {"job", "method", "what", "done", "total", "rate",
 * "elapsed", "started", "background"} (bytes, bytes per second, seconds,
 * ISO 8601 UTC; background: work the server does by itself, which
 * job.cancel refuses).
 *
 * Background work (control_config's background_jobs) joins the registry
 * when a job.* method first sees it and leaves it when a later one no
 * longer does (bg_sync, on the loop thread): its id stays the same while
 * it runs, and its figures are as fresh as the last job.* call.
 *
 * The registry is a short list under a mutex: worker threads add, update
 * and remove their own job; job.* methods run on the loop thread and only
 * read it or set a job's atomic cancel flag, which its handler polls
 * through control_ctx_cancelled.  A job is removed by the worker before
 * its reply is sent, so a client that saw the reply never sees its job.
 *
 * Stream mode (control.h): the handler's bytes are gathered into frames of
 * STREAM_FRAME bytes and queued on the request's channel (chan.h), which
 * blocks the handler while the client is slow; notifications go on the
 * same channel, framed while the connection streams to the client (they
 * must not land in the middle of a frame), as lines otherwise.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control-int.h"

/* Payload bytes of the data frames the server sends. */
#define STREAM_FRAME (256 * 1024)
/* Least time between two progress notifications of a job. */
#define PROGRESS_INTERVAL_MS 500

static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
control_jobs_init (struct control_jobs *jobs)
{
  pthread_mutex_init (&jobs->lock, NULL);
  jobs->head = NULL;
  jobs->next_id = 1;
}

void
control_jobs_destroy (struct control_jobs *jobs)
{
  /* Only background entries are left: requests' jobs went with them. */
  while (jobs->head) {
    struct control_job *job = jobs->head;

    jobs->head = job->next;
    free (job);
  }
  pthread_mutex_destroy (&jobs->lock);
}

/* Describe a job (lock held). */
static json_t *
job_json (const struct control_job *job)
{
  int64_t elapsed = now_ms () - job->start_ms;
  time_t t = (time_t) job->start_time;
  char started[32];
  struct tm tm;

  gmtime_r (&t, &tm);
  strftime (started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return json_pack ("{s:I, s:s, s:s, s:I, s:I, s:I, s:f, s:s, s:b}",
                    "job", (json_int_t) job->id, "method", job->method,
                    "what", job->what, "done", (json_int_t) job->done,
                    "total", (json_int_t) job->total,
                    "rate", (json_int_t) (elapsed > 0
                                          ? job->done * 1000 / (uint64_t) elapsed
                                          : 0),
                    "elapsed", (double) elapsed / 1000.0,
                    "started", started, "background", (int) job->background);
}

/* A background job's entry from what its module says (lock held). */
static void
bg_fill (struct control_job *job, const struct control_bg_job *bg)
{
  int64_t age = (int64_t) time (NULL) - bg->started;

  snprintf (job->method, sizeof job->method, "%s", bg->method);
  snprintf (job->what, sizeof job->what, "%s", bg->what);
  job->done = bg->done;
  job->total = bg->total;
  job->no_cancel = bg->no_cancel;
  if (job->start_time == 0) {
    job->start_time = bg->started;
    job->start_ms = now_ms () - (age > 0 ? age * 1000 : 0);
  }
}

/* Bring the registry's background entries up to date (loop thread):
 * add the new, refresh the running, drop the finished.  Fails only when
 * the module cannot say (the registry then stays as it was).
 */
static int
bg_sync (struct control_jobs *jobs)
{
  struct control_bg_job *bg = NULL;
  struct control_job **pp;
  size_t n = 0;
  int r;

  if (jobs == NULL || jobs->background == NULL)
    return 0;
  r = jobs->background (jobs->opaque, &bg, &n);
  if (r < 0)
    return r;
  pthread_mutex_lock (&jobs->lock);
  for (pp = &jobs->head; *pp;) {
    struct control_job *job = *pp;
    size_t i;

    for (i = 0; job->background && i < n; i++)
      if (bg[i].key == job->bg_key)
        break;
    if (job->background && i == n) {
      *pp = job->next;
      free (job);
      continue;
    }
    if (job->background) {
      bg_fill (job, &bg[i]);
      bg[i].key = 0;            /* seen */
    }
    pp = &job->next;
  }
  /* The new ones, oldest first, so ids follow their order. */
  for (size_t i = 0; i < n; i++) {
    struct control_job *job;

    if (bg[i].key == 0 || (job = calloc (1, sizeof *job)) == NULL)
      continue;                 /* seen, or (no memory) unlisted */
    job->background = true;
    job->bg_key = bg[i].key;
    atomic_init (&job->cancel, false);
    bg_fill (job, &bg[i]);
    job->id = jobs->next_id++;
    *pp = job;
    pp = &job->next;
  }
  pthread_mutex_unlock (&jobs->lock);
  free (bg);
  return 0;
}

int
control_server_jobs (struct control_server *srv, struct control_bg_job **jobs,
                     size_t *n)
{
  struct control_bg_job *out = NULL;
  size_t count = 0, k = 0;

  pthread_mutex_lock (&srv->jobs.lock);
  for (const struct control_job *job = srv->jobs.head; job; job = job->next)
    count += !job->background;
  if (count > 0 && (out = calloc (count, sizeof *out)) != NULL)
    for (const struct control_job *job = srv->jobs.head; job; job = job->next) {
      if (job->background)
        continue;
      out[k].key = job->id;
      snprintf (out[k].method, sizeof out[k].method, "%s", job->method);
      snprintf (out[k].what, sizeof out[k].what, "%s", job->what);
      out[k].done = job->done;
      out[k].total = job->total;
      out[k].started = job->start_time;
      k++;
    }
  pthread_mutex_unlock (&srv->jobs.lock);
  if (count > 0 && out == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing jobs");
  *jobs = out;
  *n = k;
  return 0;
}

uint64_t
control_job_start (struct control_ctx *ctx, const char *what)
{
  struct control_jobs *jobs = ctx->jobs;
  struct control_job *job;

  if (jobs == NULL || ctx->job)
    return ctx->job ? ctx->job->id : 0;
  job = calloc (1, sizeof *job);
  if (job == NULL)
    return 0;                   /* it runs, only unlisted */
  snprintf (job->method, sizeof job->method, "%s", ctx->method->name);
  snprintf (job->what, sizeof job->what, "%s", what);
  atomic_init (&job->cancel, false);
  job->start_ms = now_ms ();
  job->start_time = (int64_t) time (NULL);
  pthread_mutex_lock (&jobs->lock);
  job->id = jobs->next_id++;
  job->next = jobs->head;
  jobs->head = job;
  pthread_mutex_unlock (&jobs->lock);
  ctx->job = job;
  ctx->cancel[2] = &job->cancel;
  return job->id;
}

/* Queue a notification to the requesting connection (worker). */
static void
notify (struct control_ctx *ctx, const char *method, json_t *params)
{
  size_t len;
  char *line = control_format_notification (method, params, &len);

  json_decref (params);
  if (line == NULL || ctx->chan == NULL) {
    free (line);
    return;
  }
  if (ctx->streaming && ctx->chan->mode == CHAN_SEND) {
    /* A message frame: the header, then the line without its '\n'. */
    char *frame = malloc (len - 1 + CONTROL_FRAME_HEADER);

    if (frame == NULL) {
      free (line);
      return;
    }
    control_frame_header (CONTROL_FRAME_MESSAGE | (uint32_t) (len - 1),
                          (uint8_t *) frame);
    memcpy (frame + CONTROL_FRAME_HEADER, line, len - 1);
    free (line);
    line = frame;
    len = len - 1 + CONTROL_FRAME_HEADER;
  }
  /* Notifications are small and rare: never wait for room; one that
   * cannot go (the client left) is simply lost.
   */
  if (chan_put (ctx->chan, line, len, false, false, NULL, NULL) < 0)
    return;
}

static int stream_flush (struct control_ctx *ctx);

void
control_job_progress (struct control_ctx *ctx, uint64_t done, uint64_t total)
{
  struct control_job *job = ctx->job;
  json_t *params = NULL;
  int64_t now;

  if (job == NULL)
    return;
  now = now_ms ();
  pthread_mutex_lock (&ctx->jobs->lock);
  job->done = done;
  job->total = total;
  /* Every PROGRESS_INTERVAL_MS at most, and once when done reaches the
   * total, so that the last figure a client shows is the whole.
   */
  if (now - job->notified_ms >= PROGRESS_INTERVAL_MS ||
      (total > 0 && done >= total && !job->notified_all)) {
    job->notified_ms = now;
    job->notified_all = total > 0 && done >= total;
    params = job_json (job);
  }
  pthread_mutex_unlock (&ctx->jobs->lock);
  if (params == NULL)
    return;
  /* The data that done counts goes first: a receiver that carries the
   * figure on with its own count (a pull) must not count a byte twice.
   * Fails only if the client left: nothing more to send then.
   */
  if (ctx->streaming && ctx->chan->mode == CHAN_SEND)
    (void) stream_flush (ctx);
  notify (ctx, "job.progress", params);
}

/* Queue the pending stream data as one frame. */
static int
stream_flush (struct control_ctx *ctx)
{
  int r;

  if (ctx->slen == 0)
    return 0;
  control_frame_header ((uint32_t) ctx->slen, (uint8_t *) ctx->sbuf);
  r = chan_put (ctx->chan, ctx->sbuf, ctx->slen + CONTROL_FRAME_HEADER, false,
                true, (bool (*) (void *)) control_ctx_cancelled, ctx);
  ctx->sbuf = NULL;
  ctx->slen = 0;
  return r;
}

void
control_ctx_end (struct control_ctx *ctx)
{
  struct control_job *job = ctx->job, **pp;

  if (ctx->streaming && ctx->chan->mode == CHAN_SEND) {
    /* Fails only if the client left: nothing more to send then. */
    int r = stream_flush (ctx);

    (void) r;
  }
  if (job == NULL)
    return;
  pthread_mutex_lock (&ctx->jobs->lock);
  for (pp = &ctx->jobs->head; *pp; pp = &(*pp)->next)
    if (*pp == job) {
      *pp = job->next;
      break;
    }
  pthread_mutex_unlock (&ctx->jobs->lock);
  ctx->cancel[2] = NULL;
  ctx->job = NULL;
  free (job);
}

int
control_stream_begin (struct control_ctx *ctx, bool send, json_t *info)
{
  json_t *params;
  char *line;
  size_t len;
  int r;

  if (ctx->chan == NULL)
    return cairn_fail (-ENOTSUP, "stream mode needs a connection to a "
                       "server");
  if (ctx->streaming)
    return cairn_fail (-EINVAL, "the stream has begun already");
  params = info ? json_deep_copy (info) : json_object ();
  if (params == NULL ||
      json_object_set (params, "id", ctx->req.id ? ctx->req.id
                                                 : json_null ()) == -1 ||
      json_object_set_new (params, "direction",
                           json_string (send ? "send" : "receive")) == -1) {
    json_decref (params);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  line = control_format_notification ("stream.ready", params, &len);
  json_decref (params);
  if (line == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  /* The mode changes before the loop can see the message that says so
   * (chan_put takes the lock after this).
   */
  pthread_mutex_lock (&ctx->chan->lock);
  ctx->chan->mode = send ? CHAN_SEND : CHAN_RECV;
  pthread_mutex_unlock (&ctx->chan->lock);
  r = chan_put (ctx->chan, line, len, true, false, NULL, NULL);
  if (r == 0)
    ctx->streaming = true;
  return r;
}

int
control_stream_write (struct control_ctx *ctx, const void *buf, size_t len)
{
  const char *p = buf;
  int r;

  if (!ctx->streaming || ctx->chan->mode != CHAN_SEND)
    return cairn_fail (-EINVAL, "the request is not streaming to its client");
  while (len > 0) {
    size_t n;

    if (ctx->sbuf == NULL) {
      ctx->sbuf = malloc (CONTROL_FRAME_HEADER + STREAM_FRAME);
      if (ctx->sbuf == NULL)
        return cairn_fail (-ENOMEM, "out of memory");
    }
    n = MIN (len, (size_t) STREAM_FRAME - ctx->slen);
    memcpy (ctx->sbuf + CONTROL_FRAME_HEADER + ctx->slen, p, n);
    ctx->slen += n;
    p += n;
    len -= n;
    if (ctx->slen == STREAM_FRAME) {
      r = stream_flush (ctx);
      if (r < 0)
        return r;
    }
  }
  return 0;
}

int
control_stream_read (struct control_ctx *ctx, void *buf, size_t cap,
                     size_t *n)
{
  if (!ctx->streaming || ctx->chan->mode != CHAN_RECV)
    return cairn_fail (-EINVAL, "the request is not streaming from its "
                       "client");
  return chan_read (ctx->chan, buf, cap, n,
                    (bool (*) (void *)) control_ctx_cancelled, ctx);
}

void
control_ctx_error_data (struct control_ctx *ctx, json_t *data)
{
  json_decref (ctx->error_data);
  ctx->error_data = data;
}

/* ------------------------------------------------------------ job.* */

/* The job named by params' "job", with the lock held (NULL: error set). */
static struct control_job *
find_job (struct control_ctx *ctx, json_t *params, int *err)
{
  json_t *id = json_is_object (params) ? json_object_get (params, "job")
                                       : NULL;
  struct control_job *job = NULL;

  if (!json_is_integer (id)) {
    *err = control_invalid_params (ctx, "%s: give the job's id as \"job\": "
                                   "an integer (job.list lists them)",
                                   ctx->method->name);
    return NULL;
  }
  *err = bg_sync (ctx->jobs);
  if (*err < 0)
    return NULL;
  if (ctx->jobs) {
    pthread_mutex_lock (&ctx->jobs->lock);
    for (job = ctx->jobs->head; job; job = job->next)
      if ((json_int_t) job->id == json_integer_value (id))
        return job;
    pthread_mutex_unlock (&ctx->jobs->lock);
  }
  *err = cairn_fail (-ENOENT, "no job %" JSON_INTEGER_FORMAT " is running "
                     "(it may have finished): 'cairn job list' shows the "
                     "running jobs", json_integer_value (id));
  return NULL;
}

static int
job_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  json_t *list = json_array ();
  int r = 0;

  (void) params;
  if (list == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  r = bg_sync (ctx->jobs);
  if (r < 0) {
    json_decref (list);
    return r;
  }
  if (ctx->jobs) {
    pthread_mutex_lock (&ctx->jobs->lock);
    for (struct control_job *job = ctx->jobs->head; job && r == 0;
         job = job->next)
      r = json_array_append_new (list, job_json (job));
    pthread_mutex_unlock (&ctx->jobs->lock);
  }
  *result = r == 0 ? json_pack ("{s:o}", "jobs", list) : NULL;
  if (*result == NULL) {
    if (r != 0)
      json_decref (list);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  return 0;
}

static int
job_show (struct control_ctx *ctx, json_t *params, json_t **result)
{
  int err = 0;
  struct control_job *job = find_job (ctx, params, &err);

  if (job == NULL)
    return err;
  *result = job_json (job);
  pthread_mutex_unlock (&ctx->jobs->lock);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static int
job_cancel (struct control_ctx *ctx, json_t *params, json_t **result)
{
  int err = 0;
  struct control_job *job = find_job (ctx, params, &err);

  if (job == NULL)
    return err;
  if (job->background) {
    err = cairn_fail (-ENOTSUP, "job %" PRIu64 " (%s of %s) cannot be "
                      "cancelled: %s", job->id, job->method, job->what,
                      job->no_cancel ? job->no_cancel
                                     : "the server does it by itself");
    pthread_mutex_unlock (&ctx->jobs->lock);
    return err;
  }
  atomic_store (&job->cancel, true);
  *result = job_json (job);
  pthread_mutex_unlock (&ctx->jobs->lock);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static const struct control_method job_methods[] = {
  { .name = "job.cancel", .handler = job_cancel },
  { .name = "job.list", .handler = job_list },
  { .name = "job.show", .handler = job_show },
};

const struct control_method_table control_job_methods = {
  .methods = job_methods,
  .n = ARRAY_SIZE (job_methods),
};
