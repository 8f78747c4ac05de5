/* Cairn control server: the stream methods (send and receive over a
 * connection in stream mode; cairn-protocol(7) "STREAM MODE").
 *
 *   stream.send     {"snapshot": "v@s", "from"?: "s0", "resume"?: TOKEN,
 *                    "dry_run"?: false}
 *                   → stream.ready {"job", "snapshot", "from"}, the stream,
 *                     then {"snapshot", "incremental", "stream_bytes",
 *                     "data_bytes", "digest"}
 *                   (dry_run: no stream, the reply at once)
 *   stream.size     {"snapshot": "v@s", "from"?: "s0"}
 *                   → {"snapshot", "from", "data_bytes"}: the volume data
 *                     that stream would carry, from the diff alone (a
 *                     puller's progress over a chain, replicate.pull)
 *   stream.receive  {"volume": "v", "rollback"?: false}
 *                   → stream.ready {"job", "volume", "resume": null |
 *                     {"token", "from_guid", "to_guid", "next_offset"}},
 *                     the client's stream, then {"snapshot", "incremental",
 *                     "resumed", "stream_bytes", "data_bytes", "digest",
 *                     "discarded"?} (repl_recv_result_json); an error that
 *                     kept the progress has "token" in its data;
 *                     "rollback": an incremental stream may roll a
 *                     diverged target back to its base (receive.c), and
 *                     "discarded" then says what that destroyed
 *   stream.token    {"volume": "v"} → the "resume" object above
 *   stream.abort    {"volume": "v"} → {} (the interrupted receive is gone)
 *
 * Both stream methods are jobs (job.list, job.cancel, job.progress).  The
 * sender begins stream mode only when the encoder has its first bytes, so
 * that every check (no such snapshot, a bad base or token) is an ordinary
 * error reply.  The receiver begins it once the receive is set up and
 * tells the client, in "resume", whether the stream must be a resumed one:
 * a client that moves a stream between two servers asks the sender for it
 * (`cairn pull`, `cairn replicate`).  One receive per target volume runs at
 * a time; a second one waits up to RECV_WAIT_MS for the first to end (a
 * client that reconnects after a drop finds the old request ending), then
 * is refused as busy.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "methods.h"
#include "replicate.h"

#define RECV_BUF (1024 * 1024)
#define RECV_WAIT_MS 10000
#define MAX_RECEIVES 64

/* The targets receiving now. */
static pthread_mutex_t recv_lock = PTHREAD_MUTEX_INITIALIZER;
static char *receiving[MAX_RECEIVES];

/* ---------------------------------------------------------------- params */

/* Check params: an object whose members are among names (types: 's'
 * string, 'b' boolean), the first nreq required.
 */
static int
check_params (struct control_ctx *ctx, const char *method, json_t *params,
              const char *const *names, const char *types, size_t nreq)
{
  const char *key;
  json_t *v;
  size_t i;

  if (!json_is_object (params))
    return control_invalid_params (ctx, "%s: params must be an object with "
                                   "\"%s\"", method, names[0]);
  json_object_foreach (params, key, v) {
    for (i = 0; names[i]; i++)
      if (strcmp (key, names[i]) == 0)
        break;
    if (names[i] == NULL)
      return control_invalid_params (ctx, "%s: unknown member \"%s\"",
                                     method, key);
    if (types[i] == 's' ? !json_is_string (v) : !json_is_boolean (v))
      return control_invalid_params (ctx, "%s: \"%s\" must be %s", method,
                                     key, types[i] == 's' ? "a string"
                                     : "true or false");
  }
  for (i = 0; i < nreq; i++)
    if (json_object_get (params, names[i]) == NULL)
      return control_invalid_params (ctx, "%s: \"%s\" is missing", method,
                                     names[i]);
  return 0;
}

static const char *
str (json_t *params, const char *name)
{
  return json_string_value (json_object_get (params, name));
}

static struct cairn_pool *
ctx_pool (struct control_ctx *ctx)
{
  return ((struct cairn_methods_ctx *) control_ctx_opaque (ctx))->pool;
}

/* A digest in hex. */
static void
hex (const uint8_t *d, size_t n, char *out)
{
  for (size_t i = 0; i < n; i++)
    sprintf (out + 2 * i, "%02x", d[i]);
}

/* What a rollback discarded, as a reply says it (d: of the volume vol),
 * or NULL for nothing; *oom set when memory ran out.
 */
static json_t *
discarded_json (const char *vol, const struct vol_discarded *d, bool *oom)
{
  char name[2 * VOL_NAME_MAX + 2];
  json_t *snaps, *o;

  if (d->snaps == 0 && !d->writes)
    return NULL;
  snaps = json_array ();
  for (uint64_t i = 0; snaps && i < MIN (d->snaps, VOL_DISCARD_NAMES); i++) {
    snprintf (name, sizeof name, "%s@%s", vol, d->snap[i]);
    if (json_array_append_new (snaps, json_string (name)) == -1) {
      json_decref (snaps);
      snaps = NULL;
    }
  }
  snprintf (name, sizeof name, "%s@%s", vol, d->base);
  o = snaps ? json_pack ("{s:s, s:o, s:I, s:b}", "base", name,
                         "snapshots", snaps,
                         "snapshots_total", (json_int_t) d->snaps,
                         "writes", d->writes) : NULL;
  snprintf (name, sizeof name, "%s@%s", vol, d->since);
  if (o && d->writes &&
      json_object_set_new (o, "writes_since", json_string (name)) == -1) {
    json_decref (o);
    o = NULL;
  }
  *oom = o == NULL;
  return o;
}

json_t *
repl_recv_result_json (const struct repl_recv_result *res)
{
  char digest[2 * STREAM_SHA_LEN + 1], vol[VOL_NAME_MAX + 1];
  const char *at = strchr (res->name, '@');
  bool oom = false;
  json_t *o, *d;

  snprintf (vol, sizeof vol, "%.*s", at ? (int) (at - res->name)
            : (int) strlen (res->name), res->name);
  hex (res->digest, STREAM_SHA_LEN, digest);
  o = json_pack ("{s:s, s:b, s:b, s:I, s:I, s:s}",
                 "snapshot", res->name, "incremental", res->incremental,
                 "resumed", res->resumed,
                 "stream_bytes", (json_int_t) res->stream_bytes,
                 "data_bytes", (json_int_t) res->data_bytes,
                 "digest", digest);
  d = o ? discarded_json (vol, &res->discarded, &oom) : NULL;
  if (oom || (d && json_object_set_new (o, "discarded", d) == -1)) {
    json_decref (o);
    return NULL;
  }
  return o;
}

/* ---------------------------------------------------------------- send */

struct send_job {
  struct control_ctx *ctx;
  json_t *params;
  bool begun;
};

/* The sink: begin stream mode with the first bytes, then frame them. */
static int
send_sink (void *opaque, const void *buf, size_t len)
{
  struct send_job *sj = opaque;
  int r;

  if (control_ctx_cancelled (sj->ctx))
    return cairn_fail (-ECANCELED, "the send was cancelled (job.cancel, the "
                       "client went away, or the server is stopping)");
  if (!sj->begun) {
    json_t *info = json_pack ("{s:I, s:s, s:s?}", "job",
                              (json_int_t) control_job_start (sj->ctx,
                                                              str (sj->params,
                                                                   "snapshot")),
                              "snapshot", str (sj->params, "snapshot"),
                              "from", str (sj->params, "from"));

    if (info == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    r = control_stream_begin (sj->ctx, true, info);
    json_decref (info);
    if (r < 0)
      return r;
    sj->begun = true;
  }
  r = control_stream_write (sj->ctx, buf, len);
  if (r == -EPIPE)
    return cairn_fail (r, "the client went away in the middle of the stream");
  return r;
}

static int
discard_sink (void *opaque, const void *buf, size_t len)
{
  (void) opaque;
  (void) buf;
  (void) len;
  return 0;
}

static void
send_progress (void *opaque, uint64_t done, uint64_t total)
{
  struct send_job *sj = opaque;

  control_job_progress (sj->ctx, done, total);
}

static int
stream_send (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const char *const names[] = { "snapshot", "from", "resume",
                                       "dry_run", NULL };
  struct send_job sj = { .ctx = ctx, .params = params };
  struct repl_send_opts so = { .sink = send_sink, .sink_opaque = &sj,
                               .progress = send_progress,
                               .progress_opaque = &sj };
  struct repl_send_result res;
  char digest[2 * STREAM_SHA_LEN + 1];
  int r = check_params (ctx, "stream.send", params, names, "sssb", 1);

  if (r < 0)
    return r;
  so.from = str (params, "from");
  so.resume = str (params, "resume");
  so.dry_run = json_is_true (json_object_get (params, "dry_run"));
  if (so.dry_run) {
    so.sink = discard_sink;
    so.progress = NULL;
  }
  r = repl_send (ctx_pool (ctx), str (params, "snapshot"), &so, &res);
  if (r < 0)
    return r;
  hex (res.digest, STREAM_SHA_LEN, digest);
  *result = json_pack ("{s:s, s:b, s:b, s:I, s:I, s:s}",
                       "snapshot", str (params, "snapshot"),
                       "incremental", so.from != NULL,
                       "dry_run", so.dry_run,
                       "stream_bytes", (json_int_t) res.stream_bytes,
                       "data_bytes", (json_int_t) res.data_bytes,
                       "digest", digest);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

/* The data a stream would carry, without reading it (repl_send_data). */
static int
stream_size (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const char *const names[] = { "snapshot", "from", NULL };
  uint64_t bytes;
  int r = check_params (ctx, "stream.size", params, names, "ss", 1);

  if (r < 0)
    return r;
  r = repl_send_data (ctx_pool (ctx), str (params, "snapshot"),
                      str (params, "from"), &bytes);
  if (r < 0)
    return r;
  *result = json_pack ("{s:s, s:s*, s:I}", "snapshot",
                       str (params, "snapshot"), "from", str (params, "from"),
                       "data_bytes", (json_int_t) bytes);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

/* ---------------------------------------------------------------- receive */

/* The "resume" object of target's interrupted receive, or json null. */
static json_t *
resume_info (struct cairn_pool *pool, const char *target)
{
  char token[STREAM_TOKEN_MAX], from[17], to[17];
  struct stream_token tok;

  if (repl_recv_token (pool, target, token) < 0 ||
      stream_token_parse (token, &tok) < 0)
    return json_null ();
  snprintf (from, sizeof from, "%016" PRIx64, tok.from_guid);
  snprintf (to, sizeof to, "%016" PRIx64, tok.to_guid);
  return json_pack ("{s:s, s:s?, s:s, s:I}", "token", token,
                    "from_guid", tok.from_guid ? from : NULL,
                    "to_guid", to, "next_offset",
                    (json_int_t) tok.next_offset);
}

/* Mark target as receiving, waiting a while for another receive into it
 * to end.  Returns the slot, or -EBUSY.
 */
int
stream_recv_claim (const char *target)
{
  for (int waited = 0; ; waited += 50) {
    int slot = -1;
    bool busy = false;

    pthread_mutex_lock (&recv_lock);
    for (int i = 0; i < MAX_RECEIVES; i++) {
      if (receiving[i] && strcmp (receiving[i], target) == 0)
        busy = true;
      else if (receiving[i] == NULL && slot < 0)
        slot = i;
    }
    if (!busy && slot >= 0) {
      receiving[slot] = strdup (target);
      if (receiving[slot] == NULL)
        slot = -2;
    }
    pthread_mutex_unlock (&recv_lock);
    if (slot == -2)
      return cairn_fail (-ENOMEM, "out of memory");
    if (!busy && slot >= 0)
      return slot;
    if (!busy)
      return cairn_fail (-EBUSY, "%d receives are running: wait for one to "
                         "end", MAX_RECEIVES);
    if (waited >= RECV_WAIT_MS)
      return cairn_fail (-EBUSY, "a receive into '%s' is running already: "
                         "wait for it to end, or cancel its job (cairn job "
                         "list)", target);
    nanosleep (&(struct timespec) { .tv_nsec = 50 * 1000000 }, NULL);
  }
}

void
stream_recv_release (int slot)
{
  pthread_mutex_lock (&recv_lock);
  free (receiving[slot]);
  receiving[slot] = NULL;
  pthread_mutex_unlock (&recv_lock);
}

struct recv_job {
  struct control_ctx *ctx;
};

static void
recv_progress (void *opaque, uint64_t done, uint64_t total)
{
  struct recv_job *rj = opaque;

  control_job_progress (rj->ctx, done, total);
}

/* Feed the client's stream to the receive until it ends or fails. */
static int
pump_stream (struct control_ctx *ctx, struct repl_recv *rr, uint64_t *got)
{
  uint8_t *buf = malloc (RECV_BUF);
  int r = 0;

  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  while (r == 0) {
    size_t n, used;

    /* Checked first: a cancel must win over a stream that ends now. */
    if (control_ctx_cancelled (ctx)) {
      r = cairn_fail (-ECANCELED, "cancelled");
      break;
    }
    r = control_stream_read (ctx, buf, RECV_BUF, &n);
    if (r < 0 || n == 0)
      break;
    *got += n;
    r = repl_recv_feed (rr, buf, n, &used);
  }
  /* A cancel that came while the read waited, before the client ended
   * the stream short: the receive stopped because it was cancelled, not
   * because the stream was cut.
   */
  if (r == 0 && control_ctx_cancelled (ctx))
    r = cairn_fail (-ECANCELED, "cancelled");
  free (buf);
  return r;
}

static int
stream_receive (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const char *const names[] = { "volume", "rollback", NULL };
  struct cairn_pool *pool = ctx_pool (ctx);
  struct recv_job rj = { .ctx = ctx };
  struct repl_recv_opts ro = { .progress = recv_progress,
                               .progress_opaque = &rj };
  struct repl_recv_result res;
  struct repl_recv *rr;
  char msg[1024];
  const char *target;
  json_t *info;
  uint64_t got = 0;
  int r = check_params (ctx, "stream.receive", params, names, "sb", 1);
  int slot, pr;

  if (r < 0)
    return r;
  target = str (params, "volume");
  ro.rollback = json_is_true (json_object_get (params, "rollback"));
  slot = stream_recv_claim (target);
  if (slot < 0)
    return slot;
  r = repl_recv_new (pool, target, &ro, &rr);
  if (r < 0) {
    stream_recv_release (slot);
    return r;
  }
  info = json_pack ("{s:I, s:s, s:o}", "job",
                    (json_int_t) control_job_start (ctx, target),
                    "volume", target, "resume", resume_info (pool, target));
  r = info ? control_stream_begin (ctx, false, info)
           : cairn_fail (-ENOMEM, "out of memory");
  json_decref (info);
  pr = r == 0 ? pump_stream (ctx, rr, &got) : r;
  if (pr < 0 && r == 0)
    snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
  r = repl_recv_finish (rr, &res);
  repl_recv_free (rr);
  stream_recv_release (slot);
  if (r < 0) {
    /* Say why the stream stopped when the receive only saw it stop. */
    if (pr == -EPIPE || pr == -ECANCELED) {
      char why[1024];

      snprintf (why, sizeof why, "%s", cairn_errmsg ());
      r = cairn_fail (pr, "%s after %" PRIu64 " bytes of the stream (%s)",
                      pr == -EPIPE ? "the client went away"
                      : "the receive was cancelled", got, why);
    }
    if (res.kept)
      control_ctx_error_data (ctx, json_pack ("{s:s, s:s, s:b}",
                                              "token", res.token,
                                              "snapshot", res.name,
                                              "incremental",
                                              res.incremental));
    return r;
  }
  *result = repl_recv_result_json (&res);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static int
stream_token (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const char *const names[] = { "volume", NULL };
  char token[STREAM_TOKEN_MAX];
  int r = check_params (ctx, "stream.token", params, names, "s", 1);

  if (r == 0)
    r = repl_recv_token (ctx_pool (ctx), str (params, "volume"), token);
  if (r < 0)
    return r;
  *result = resume_info (ctx_pool (ctx), str (params, "volume"));
  return 0;
}

static int
stream_abort (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const char *const names[] = { "volume", NULL };
  int r = check_params (ctx, "stream.abort", params, names, "s", 1);
  int slot;

  if (r < 0)
    return r;
  slot = stream_recv_claim (str (params, "volume"));
  if (slot < 0)
    return slot;
  r = repl_recv_abort (ctx_pool (ctx), str (params, "volume"));
  stream_recv_release (slot);
  if (r < 0)
    return r;
  *result = json_object ();
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static const struct control_method stream_methods[] = {
  { .name = "stream.abort", .handler = stream_abort, .blocking = true },
  { .name = "stream.receive", .handler = stream_receive, .blocking = true,
    .long_running = true },
  { .name = "stream.send", .handler = stream_send, .blocking = true,
    .long_running = true },
  { .name = "stream.size", .handler = stream_size, .blocking = true },
  { .name = "stream.token", .handler = stream_token, .blocking = true },
};

const struct control_method_table cairn_stream_methods = {
  .methods = stream_methods,
  .n = ARRAY_SIZE (stream_methods),
};
