/* Cairn control server: replication jobs that connect to another server
 * (cairn-protocol(7); DESIGN §1: replication is a server job).
 *
 *   replicate.push  {"snapshot": "v@s", "to": "HOST[:PORT]", "from"?: "s0",
 *                    "rollback"?: false}
 *                   → {"snapshot", "incremental", "resumed", "stream_bytes",
 *                      "data_bytes", "already": bool, "sent": [{"snapshot",
 *                      "incremental", "resumed", "stream_bytes",
 *                      "data_bytes", "discarded"?}, ...]}
 *   replicate.pull  {"from": "HOST[:PORT]", "volume": "v",
 *                    "rollback"?: false}
 *                   → {"received": [{"snapshot", "incremental", "resumed",
 *                      "stream_bytes", "data_bytes", "digest",
 *                      "discarded"?}, ...], "newest"}
 *
 * "discarded" (repl_recv_result_json) says what a rollback of the
 * receiving volume destroyed, when it destroyed something; a push copies
 * it from the remote's stream.receive reply.
 *
 * The server connects to the other server's control port (control-tcp=)
 * with the protocol's own client (net/control-client.c, which the
 * server library links for this), and runs the other half there as a
 * stream method: a push sends this server's snapshot (repl_send, in
 * process) into the remote's stream.receive; a pull reads the remote's
 * stream.send into a local receive (repl_recv_*).  One TCP connection, no
 * other port.
 *
 * What to send is decided from the GUIDs of both sides' snapshots, and
 * both directions move a chain: a push sends every snapshot of the volume
 * after its base up to the one asked for, oldest first, where the base is
 * "from", else the newest snapshot the remote has (which must be one of
 * ours), else (no volume there) nothing: the chain then starts with a full
 * stream of our oldest snapshot; a pull brings every remote snapshot newer
 * than the newest one both have, oldest first (a full stream of the
 * remote's oldest when we have no such volume).  With "rollback" the base
 * is the newest snapshot both sides have even when the receiving side has
 * newer ones or was written since, and each receive rolls the receiving
 * volume back to its base (receive.c): the receiver mirrors the sender.
 * A push reports progress over the whole chain: the data of every stream
 * is added up (repl_send_data) before the first one starts.
 *
 * Resuming: the receiving side's interrupted receive (its token, with the
 * GUIDs of the stream it belongs to) is asked for before each stream
 * starts, and the sender resumes from it.  So the same request after a
 * dropped connection, a cancelled job or a restart of either server
 * continues without resending what arrived: the snapshots of a chain that
 * arrived are the receiver's now, so the chain starts after them.
 *
 * Both are long-running jobs: progress counts data bytes of the whole
 * chain's total, as sent for a push and as arrived for a pull (whose
 * remote tells each stream's data first, stream.size), and cancelling
 * stops the stream (the receiver keeps what it has).
 *
 * TLS (net/tls.c): the job connects with TLS when this server has
 * control TLS credentials (control-tls-certificates= or control-tls-psk=,
 * which cairnd's --tls-certs and --tls-psk set), using them as its client
 * credentials: the PSK file's first entry as its identity, or the
 * directory's ca-cert.pem to check the other server (whose certificate
 * must name HOST) and client-cert.pem (else server-cert.pem) to present.
 * The request's "tls" (a boolean) overrides: true requires TLS, false
 * connects in plain.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control-client.h"
#include "methods.h"
#include "replicate.h"

/* How long the remote may stay silent, in milliseconds. */
#define REMOTE_TIMEOUT_MS (10 * 60 * 1000)
#define RECV_BUF (1024 * 1024)

static struct cairn_pool *
ctx_pool (struct control_ctx *ctx)
{
  return ((struct cairn_methods_ctx *) control_ctx_opaque (ctx))->pool;
}

static const char *
jstr (json_t *obj, const char *key)
{
  return json_string_value (json_object_get (obj, key));
}

/* ---------------------------------------------------------------- remote */

/* A connection to the other server, named for messages. */
struct remote {
  struct control_client *c;
  struct tls_ctx *tls;          /* client credentials, or NULL: plain */
  char name[300];
};

/* The client credentials for the request: NULL (plain) or *tls, as the
 * server's configuration and the request's "tls" say.
 */
static int
remote_tls (struct control_ctx *ctx, json_t *params, struct tls_ctx **tls)
{
  const struct cairn_methods_ctx *m = control_ctx_opaque (ctx);
  const struct tls_config *cfg = m->tls;
  json_t *want = json_object_get (params, "tls");
  bool have = cfg && (cfg->certificates || cfg->psk_file);

  *tls = NULL;
  if (want && !json_is_boolean (want))
    return control_invalid_params (ctx, "\"tls\" must be true or false");
  if (want ? !json_is_true (want) : !have)
    return 0;
  if (!have)
    return cairn_fail (-EINVAL, "TLS was asked for (--tls), but this server, "
                       "which connects to the other one itself, has no "
                       "control TLS keys: restart it with 'cairnd --tls-psk "
                       "FILE' or 'cairnd --tls-certs DIR' (control-tls-psk= "
                       "or control-tls-certificates= in its configuration); "
                       "the cairn command's own --tls options do not reach "
                       "it");
  return tls_ctx_new (cfg, false, tls);
}

/* Close the connection and free its credentials. */
static void
remote_close (struct remote *rm)
{
  control_client_close (rm->c);
  tls_ctx_free (rm->tls);
}

/* Connect to "HOST[:PORT]" or "[V6ADDR][:PORT]", with TLS as remote_tls
 * decides from params.
 */
static int
remote_connect (struct control_ctx *ctx, const char *arg, json_t *params,
                struct remote *rm)
{
  char host[256];
  const char *h = host;
  unsigned port;
  int r;

  if (control_client_parse_address (arg, host, sizeof host, &port) < 0) {
    char why[512];

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    return control_invalid_params (ctx, "%s", why);
  }
  r = remote_tls (ctx, params, &rm->tls);
  if (r < 0)
    return r;
  r = control_client_connect_tcp (h, port, NULL, REMOTE_TIMEOUT_MS, &rm->c);
  if (r == 0)
    /* A job stops soon when cancelled, even while the remote is silent
     * (a server that stops waits for its jobs), the TLS handshake included.
     */
    control_client_set_cancel (rm->c, (bool (*) (void *))
                               control_ctx_cancelled, ctx);
  if (r == 0 && rm->tls)
    r = control_client_start_tls (rm->c, rm->tls);
  if (r == 0)
    snprintf (rm->name, sizeof rm->name, strchr (h, ':') ? "[%s]:%u"
              : "%s:%u", h, port);
  return r;
}

/* Say that the remote failed: its message, prefixed with its name. */
static int
remote_fail (struct remote *rm, int r)
{
  char msg[1024];

  snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
  return cairn_fail (r, "%s: %s", rm->name, msg);
}

/* The remote's snapshots of vol, oldest first (empty: no such volume). */
static int
remote_snapshots (struct remote *rm, const char *vol, json_t **snaps)
{
  json_t *params = json_pack ("{s:s}", "volume", vol), *res = NULL;
  int r = params ? control_client_call (rm->c, "snapshot.list", params, &res)
                 : cairn_fail (-ENOMEM, "out of memory");

  json_decref (params);
  if (r == -ENOENT) {
    *snaps = json_array ();
    return *snaps ? 0 : cairn_fail (-ENOMEM, "out of memory");
  }
  if (r < 0)
    return remote_fail (rm, r);
  *snaps = json_incref (json_object_get (res, "snapshots"));
  json_decref (res);
  return json_is_array (*snaps) ? 0 : cairn_fail (-EPROTO, "%s answered "
                                                  "snapshot.list without a "
                                                  "list", rm->name);
}

/* ---------------------------------------------------------------- local */

struct local_list {
  const char *vol;
  json_t *arr;
};

static int
add_local (void *opaque, const struct vol_info *vi)
{
  struct local_list *l = opaque;
  char guid[17];

  if (!vi->is_snapshot || strcmp (vi->name, l->vol) != 0)
    return 0;
  snprintf (guid, sizeof guid, "%016" PRIx64, vi->guid);
  return json_array_append_new (l->arr, json_pack ("{s:s, s:s, s:I}",
                                                   "snapshot", vi->snap,
                                                   "guid", guid, "generation",
                                                   (json_int_t) vi->gen))
         ? cairn_fail (-ENOMEM, "out of memory") : 0;
}

/* vol_list_tolerant callback: a damaged record of vol (its own or one of
 * its snapshots') fails the listing, which must see every snapshot; one of
 * another volume does not matter here.
 */
static int
local_damaged (void *opaque, const struct vol_damage *d)
{
  const struct local_list *l = opaque;

  return strcmp (d->name, l->vol) == 0 ? vol_damage_error (d) : 0;
}

/* Order snapshot objects by generation. */
static int
by_generation (const void *a, const void *b)
{
  json_int_t ga = json_integer_value (json_object_get (*(json_t **) a,
                                                       "generation"));
  json_int_t gb = json_integer_value (json_object_get (*(json_t **) b,
                                                       "generation"));

  return (ga > gb) - (ga < gb);
}

/* This pool's snapshots of vol, oldest first, as the remote lists its. */
static int
local_snapshots (struct cairn_pool *pool, const char *vol, json_t **snaps)
{
  struct local_list l = { .vol = vol, .arr = json_array () };
  json_t **v;
  size_t n;
  int r;

  if (l.arr == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  r = vol_list_tolerant (pool, true, add_local, local_damaged, &l);
  n = json_array_size (l.arr);
  v = r == 0 && n ? calloc (n, sizeof *v) : NULL;
  if (r == 0 && n && v == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  if (r < 0) {
    json_decref (l.arr);
    return r;
  }
  for (size_t i = 0; i < n; i++)
    v[i] = json_incref (json_array_get (l.arr, i));
  if (n > 1)
    qsort (v, n, sizeof *v, by_generation);
  json_array_clear (l.arr);
  for (size_t i = 0; i < n; i++)
    json_array_append_new (l.arr, v[i]);
  free (v);
  *snaps = l.arr;
  return 0;
}

/* The snapshot of snaps with this GUID, or NULL. */
static json_t *
find_guid (json_t *snaps, const char *guid)
{
  size_t i;
  json_t *v;

  json_array_foreach (snaps, i, v)
    if (guid && jstr (v, "guid") && strcmp (jstr (v, "guid"), guid) == 0)
      return v;
  return NULL;
}

/* ---------------------------------------------------------------- push */

struct push {
  struct control_ctx *ctx;
  struct remote *rm;
  uint64_t before, total;     /* progress over the chain: data bytes of the
                                 streams before this one, of all of them */
};

/* The sink of a push: the remote's receive. */
static int
push_sink (void *opaque, const void *buf, size_t len)
{
  struct push *p = opaque;
  int r;

  if (control_ctx_cancelled (p->ctx))
    return cairn_fail (-ECANCELED, "the replication was cancelled");
  r = control_client_stream_write (p->rm->c, buf, len);
  if (r == 1)
    return cairn_fail (-ECONNABORTED, "the receiver stopped the stream");
  return r < 0 ? remote_fail (p->rm, r) : 0;
}

static void
push_progress (void *opaque, uint64_t done, uint64_t total)
{
  struct push *p = opaque;

  /* A stream's own count may differ a little from the estimate: never
   * past the next stream's start, never beyond the total.
   */
  control_job_progress (p->ctx, p->before + MIN (done, total),
                        MAX (p->total, p->before + total));
}

/* Stream snapshot snap (base: NULL or a snapshot name; guid: its GUID)
 * into the remote's volume vol (rolling it back to the base if asked);
 * *info describes the stream.
 */
static int
push_stream (struct push *p, const char *snap, const char *base,
             const char *guid, const char *vol, bool rollback, json_t **info)
{
  struct control_ctx *ctx = p->ctx;
  struct remote *rm = p->rm;
  struct repl_send_opts so = { .from = base, .sink = push_sink,
                               .sink_opaque = p, .progress = push_progress,
                               .progress_opaque = p };
  struct repl_send_result res;
  json_t *params, *ready = NULL;
  json_t *resume, *rres = NULL;
  char why[1024];
  int r, fr;

  params = rollback ? json_pack ("{s:s, s:b}", "volume", vol, "rollback", true)
                    : json_pack ("{s:s}", "volume", vol);
  r = params ? control_client_stream_start (rm->c, "stream.receive", params,
                                            &ready, &rres)
             : cairn_fail (-ENOMEM, "out of memory");
  json_decref (params);
  if (r < 0)
    return remote_fail (rm, r);
  resume = json_object_get (ready, "resume");
  if (json_is_object (resume)) {
    if (strcmp (jstr (resume, "to_guid"), guid) != 0) {
      r = cairn_fail (-EBUSY, "'%s' on %s has an interrupted receive of "
                      "another snapshot (GUID %s) than %s (GUID %s): finish "
                      "it with the request that started it, or discard it "
                      "there (cairn receive --abort %s)", vol, rm->name,
                      jstr (resume, "to_guid"), snap, guid, vol);
      goto end;
    }
    so.resume = jstr (resume, "token");
  }
  r = repl_send (ctx_pool (ctx), snap, &so, &res);
 end:
  if (r < 0)
    snprintf (why, sizeof why, "%s", cairn_errmsg ());
  /* The end frame: after a failure, the receiver keeps what it has. */
  fr = control_client_stream_finish (rm->c, true, &rres);
  if ((r == 0 || r == -ECONNABORTED) && fr < 0)
    r = remote_fail (rm, fr);       /* the receiver's reason */
  else if (r < 0)
    r = cairn_fail (r, "%s", why);
  if (r == 0) {
    json_t *d = json_object_get (rres, "discarded");

    /* What the remote's rollback discarded, as its reply says it. */
    *info = json_pack ("{s:s, s:b, s:b, s:I, s:I}", "snapshot", snap,
                       "incremental", base != NULL,
                       "resumed", so.resume != NULL,
                       "stream_bytes", (json_int_t) res.stream_bytes,
                       "data_bytes", (json_int_t) res.data_bytes);
    if (*info && json_is_object (d) &&
        json_object_set (*info, "discarded", d) == -1) {
      json_decref (*info);
      *info = NULL;
    }
    if (*info == NULL)
      r = cairn_fail (-ENOMEM, "out of memory");
  }
  json_decref (ready);
  json_decref (rres);
  return r;
}

/* The index in snaps of the snapshot with this GUID, or of this name
 * (guid NULL); -1 when none.
 */
static long
snap_index (json_t *snaps, const char *guid, const char *name)
{
  size_t i;
  json_t *v;

  json_array_foreach (snaps, i, v) {
    const char *s = jstr (v, guid ? "guid" : "snapshot");

    if (s && strcmp (s, guid ? guid : name) == 0)
      return (long) i;
  }
  return -1;
}

/* Choose the base of a push of lsnaps[k] to a remote that has rsnaps:
 * *b gets its index in lsnaps, -1 for none (the chain starts with a full
 * stream).
 */
static int
push_base (json_t *lsnaps, json_t *rsnaps, long k, const char *vol,
           const char *from, bool rollback, const struct remote *rm, long *b)
{
  json_t *newest = json_array_get (rsnaps, json_array_size (rsnaps) - 1);
  size_t vlen = strlen (vol);

  *b = -1;
  if (from) {
    /* SNAP or VOL@SNAP */
    if (strncmp (from, vol, vlen) == 0 && from[vlen] == '@')
      from += vlen + 1;
    *b = snap_index (lsnaps, NULL, from);
    if (*b < 0)
      return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'",
                         vol, from);
  }
  else if (rollback) {
    /* The newest snapshot both sides have. */
    for (*b = k - 1; *b >= 0; (*b)--)
      if (find_guid (rsnaps, jstr (json_array_get (lsnaps, (size_t) *b),
                                   "guid")))
        break;
    if (*b < 0 && newest)
      return cairn_fail (-ESTALE, "'%s' here and on %s have no snapshot in "
                         "common before '%s', even to roll back to: delete "
                         "'%s' there to send it whole", vol, rm->name,
                         jstr (json_array_get (lsnaps, (size_t) k),
                               "snapshot"), vol);
  }
  else if (newest) {
    *b = snap_index (lsnaps, jstr (newest, "guid"), NULL);
    if (*b < 0)
      return cairn_fail (-ESTALE, "the newest snapshot of '%s' on %s ('%s') "
                         "is not one of this server's: there is no base for "
                         "an incremental stream (name a base with --from, roll "
                         "it back to the newest snapshot both have with "
                         "--rollback, or delete '%s' there to send it whole)",
                         vol,
                         rm->name, jstr (newest, "snapshot"), vol);
  }
  if (*b >= k)
    return cairn_fail (-EINVAL, "the base '%s@%s' is not older than '%s@%s'",
                       vol, jstr (json_array_get (lsnaps, (size_t) *b),
                                  "snapshot"),
                       vol, jstr (json_array_get (lsnaps, (size_t) k),
                                  "snapshot"));
  return 0;
}

/* Send the chain lsnaps[b + 1 .. k] (the first one from lsnaps[b], or
 * whole when b is -1) to the remote's volume vol; *sent lists the streams.
 */
static int
push_chain (struct push *p, json_t *lsnaps, long b, long k, const char *vol,
            bool rollback, json_t *sent)
{
  struct cairn_pool *pool = ctx_pool (p->ctx);
  char name[2 * VOL_NAME_MAX + 2];
  uint64_t *bytes = calloc ((size_t) (k - b), sizeof *bytes);
  int r = bytes ? 0 : cairn_fail (-ENOMEM, "out of memory");

  /* Every stream's base is the snapshot before it: lsnaps[b] for the
   * first (none when b is -1, i = 0).  The data of all of them first, for
   * progress over the chain.
   */
  for (long i = b + 1; r == 0 && i <= k; i++) {
    const char *base = i > 0 ? jstr (json_array_get (lsnaps, (size_t) i - 1),
                                     "snapshot") : NULL;

    snprintf (name, sizeof name, "%s@%s", vol,
              jstr (json_array_get (lsnaps, (size_t) i), "snapshot"));
    r = repl_send_data (pool, name, base, &bytes[i - b - 1]);
    p->total += bytes[i - b - 1];
  }
  for (long i = b + 1; r == 0 && i <= k; i++) {
    json_t *s = json_array_get (lsnaps, (size_t) i), *info = NULL;
    const char *base = i > 0 ? jstr (json_array_get (lsnaps, (size_t) i - 1),
                                     "snapshot") : NULL;

    snprintf (name, sizeof name, "%s@%s", vol, jstr (s, "snapshot"));
    r = push_stream (p, name, base, jstr (s, "guid"), vol, rollback, &info);
    if (r == 0 && json_array_append_new (sent, info) == -1)
      r = cairn_fail (-ENOMEM, "out of memory");
    p->before += bytes[i - b - 1];
  }
  free (bytes);
  return r;
}

static int
replicate_push (struct control_ctx *ctx, json_t *params, json_t **result)
{
  struct cairn_pool *pool = ctx_pool (ctx);
  struct remote rm = { NULL };
  struct push p = { .ctx = ctx, .rm = &rm };
  json_t *lsnaps = NULL, *rsnaps = NULL, *sent = NULL, *rb, *last;
  const char *snap, *to, *from, *at;
  char vol[VOL_NAME_MAX + 1], guid[17];
  uint64_t stream_bytes = 0, data_bytes = 0;
  bool rollback, resumed = false;
  struct vol_info vi;
  long k, b;
  size_t i;
  json_t *t;
  int r;

  snap = jstr (params, "snapshot");
  to = jstr (params, "to");
  from = jstr (params, "from");
  rb = json_object_get (params, "rollback");
  rollback = json_is_true (rb);
  if (!json_is_object (params) || snap == NULL || to == NULL ||
      (rb && !json_is_boolean (rb)) ||
      json_object_size (params) != 2u + (from != NULL) + (rb != NULL) +
                                   (json_object_get (params, "tls") != NULL))
    return control_invalid_params (ctx, "replicate.push takes {\"snapshot\": "
                                   "\"VOL@SNAP\", \"to\": \"HOST[:PORT]\", "
                                   "\"from\"?: \"SNAP\", \"rollback\"?: BOOL, "
                                   "\"tls\"?: BOOL}");
  at = strchr (snap, '@');
  if (at == NULL || (size_t) (at - snap) > VOL_NAME_MAX)
    return control_invalid_params (ctx, "\"%s\" is not VOL@SNAP", snap);
  snprintf (vol, sizeof vol, "%.*s", (int) (at - snap), snap);
  r = vol_stat (pool, snap, &vi);
  if (r < 0)
    return r;
  snprintf (guid, sizeof guid, "%016" PRIx64, vi.guid);
  control_job_start (ctx, snap);
  r = remote_connect (ctx, to, params, &rm);
  if (r == 0)
    r = remote_snapshots (&rm, vol, &rsnaps);
  if (r == 0)
    r = local_snapshots (pool, vol, &lsnaps);
  if (r < 0)
    goto out;
  if (find_guid (rsnaps, guid)) {
    *result = json_pack ("{s:s, s:b}", "snapshot", snap, "already", true);
    r = *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
    goto out;
  }
  k = snap_index (lsnaps, guid, NULL);
  if (k < 0) {
    r = cairn_fail (-ENOENT, "'%s' is not a snapshot of '%s'", snap, vol);
    goto out;
  }
  r = push_base (lsnaps, rsnaps, k, vol, from, rollback, &rm, &b);
  if (r == 0 && (sent = json_array ()) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  if (r == 0)
    r = push_chain (&p, lsnaps, b, k, vol, rollback, sent);
  if (r < 0)
    goto out;
  json_array_foreach (sent, i, t) {
    stream_bytes += (uint64_t) json_integer_value (json_object_get
                                                   (t, "stream_bytes"));
    data_bytes += (uint64_t) json_integer_value (json_object_get
                                                 (t, "data_bytes"));
    resumed |= json_is_true (json_object_get (t, "resumed"));
  }
  last = json_array_get (sent, json_array_size (sent) - 1);
  *result = json_pack ("{s:s, s:b, s:b, s:I, s:I, s:b, s:O}", "snapshot", snap,
                       "incremental", json_is_true (json_object_get
                                                    (last, "incremental")),
                       "resumed", resumed,
                       "stream_bytes", (json_int_t) stream_bytes,
                       "data_bytes", (json_int_t) data_bytes,
                       "already", false, "sent", sent);
  if (*result == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
 out:
  json_decref (sent);
  json_decref (lsnaps);
  json_decref (rsnaps);
  remote_close (&rm);
  return r;
}

/* ---------------------------------------------------------------- pull */

/* A pull's progress.  Over the chain, as a push's: the remote tells each
 * stream's data first (stream.size), and the streams before this one
 * count whole.  Within a stream, the sender's job.progress notifications
 * (one every half second at most) give its total and how far it stands,
 * counting what a resumed stream skipped; the data bytes received since
 * the last one carry it on between them.  So the job shows what has
 * arrived here, not what the sender said up to half a second ago: the
 * sender queues a notification after the data it counts (jobs.c), and
 * both sides count the same WRITE record lengths.  A remote without
 * stream.size (an older server) gives progress per stream.
 */
struct pull_progress {
  struct control_ctx *ctx;
  uint64_t before, chain;     /* data of the streams before this one, of
                                 all of them (0: not known) */
  uint64_t done, total;       /* the sender's last figures (0, 0: none yet) */
  uint64_t data, at;          /* data bytes received; data when done came */
};

static void
pull_report (const struct pull_progress *pp)
{
  /* As push_progress: never past the next stream's start, nor the total. */
  control_job_progress (pp->ctx, pp->before +
                        MIN (pp->done + (pp->data - pp->at), pp->total),
                        MAX (pp->chain, pp->before + pp->total));
}

/* The data of each stream of the chain rsnaps[start..] (the first from
 * base, NULL: whole), as the remote counts it, into sizes; all 0 when the
 * remote does not know stream.size.
 */
static int
pull_sizes (struct remote *rm, const char *vol, json_t *rsnaps, size_t start,
            const char *base, uint64_t *sizes)
{
  char snap[2 * VOL_NAME_MAX + 2];
  size_t n = json_array_size (rsnaps);

  for (size_t i = start; i < n; i++) {
    const char *name = jstr (json_array_get (rsnaps, i), "snapshot");
    json_t *params, *res = NULL;
    int r;

    snprintf (snap, sizeof snap, "%s@%s", vol, name);
    params = json_pack ("{s:s, s:s*}", "snapshot", snap, "from", base);
    r = params ? control_client_call (rm->c, "stream.size", params, &res)
               : cairn_fail (-ENOMEM, "out of memory");
    json_decref (params);
    if (r == -ENOSYS) {
      memset (sizes, 0, (n - start) * sizeof *sizes);
      cairn_error_clear ();
      return 0;
    }
    if (r < 0)
      return remote_fail (rm, r);
    sizes[i - start] = (uint64_t) json_integer_value (json_object_get
                                                      (res, "data_bytes"));
    json_decref (res);
    base = name;
  }
  return 0;
}

static void
pull_notify (void *opaque, const char *method, json_t *params)
{
  struct pull_progress *pp = opaque;

  if (strcmp (method, "job.progress") != 0)
    return;
  pp->done = (uint64_t) json_integer_value (json_object_get (params, "done"));
  pp->total = (uint64_t) json_integer_value (json_object_get (params,
                                                              "total"));
  pp->at = pp->data;
  pull_report (pp);
}

/* The receiver's progress: data bytes written (its total is always 0). */
static void
pull_received (void *opaque, uint64_t data_bytes, uint64_t total)
{
  struct pull_progress *pp = opaque;

  (void) total;
  pp->data = data_bytes;
  if (pp->total > 0)
    pull_report (pp);
}

/* Receive the remote's snapshot vol@name (base: NULL or a snapshot name)
 * into vol.
 */
static int
pull_stream (struct pull_progress *pp, struct remote *rm, const char *vol,
             const char *name, const char *base, const char *guid,
             bool rollback, json_t **info)
{
  struct control_ctx *ctx = pp->ctx;
  char hint[VOL_NAME_MAX + 340];
  struct repl_recv_opts ro = { .rollback = rollback, .rollback_hint = hint,
                               .progress = pull_received,
                               .progress_opaque = pp };
  struct cairn_pool *pool = ctx_pool (ctx);
  char snap[2 * VOL_NAME_MAX + 2], tok[STREAM_TOKEN_MAX], to[17];
  struct repl_recv_result res;
  struct stream_token st;
  struct repl_recv *rr = NULL;
  json_t *params, *ready = NULL, *sres = NULL;
  const char *resume = NULL;
  int slot, r, sr = 0;

  snprintf (snap, sizeof snap, "%s@%s", vol, name);
  snprintf (hint, sizeof hint, "'cairn pull %s %s --rollback'", rm->name, vol);
  slot = stream_recv_claim (vol);
  if (slot < 0)
    return slot;
  if (repl_recv_token (pool, vol, tok) == 0 &&
      stream_token_parse (tok, &st) == 0) {
    snprintf (to, sizeof to, "%016" PRIx64, st.to_guid);
    if (strcmp (to, guid) != 0) {
      r = cairn_fail (-EBUSY, "'%s' has an interrupted receive of another "
                      "snapshot (GUID %s) than %s (GUID %s): finish it, or "
                      "discard it (cairn receive --abort %s)", vol, to, snap,
                      guid, vol);
      goto out;
    }
    resume = tok;
  }
  cairn_error_clear ();
  r = repl_recv_new (pool, vol, &ro, &rr);
  if (r < 0)
    goto out;
  pp->done = pp->total = pp->data = pp->at = 0;
  control_client_set_notify (rm->c, pull_notify, pp);
  params = json_pack ("{s:s, s:s*, s:s*}", "snapshot", snap, "from", base,
                      "resume", resume);
  r = params ? control_client_stream_start (rm->c, "stream.send", params,
                                            &ready, &sres)
             : cairn_fail (-ENOMEM, "out of memory");
  json_decref (params);
  if (r < 0) {
    r = remote_fail (rm, r);
    goto finish;
  }
  /* Read to the end frame (after the END record only it should come). */
  for (;;) {
    const void *d;
    size_t n, used;

    if (control_ctx_cancelled (ctx)) {
      r = cairn_fail (-ECANCELED, "the replication was cancelled");
      break;
    }
    sr = control_client_stream_read (rm->c, &d, &n);
    if (sr < 0 || n == 0)
      break;
    if (r == 0)
      r = repl_recv_feed (rr, d, n, &used);
    if (r < 0)
      break;
  }
  if (sr < 0)
    r = remote_fail (rm, sr);
  else if (r >= 0 && (sr = control_client_stream_finish (rm->c, false,
                                                         &sres)) < 0)
    r = remote_fail (rm, sr);
 finish:
  {
    char why[1024];
    int fr;

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    fr = repl_recv_finish (rr, &res);
    if (r < 0 && res.kept)
      r = cairn_fail (r, "%s (the receive of %s kept its progress: the same "
                      "request resumes it)", why, snap);
    else if (r < 0)
      r = cairn_fail (r, "%s", why);
    else
      r = fr;
    if (r == 0 && (*info = repl_recv_result_json (&res)) == NULL)
      r = cairn_fail (-ENOMEM, "out of memory");
  }
 out:
  control_client_set_notify (rm->c, NULL, NULL);
  repl_recv_free (rr);
  stream_recv_release (slot);
  json_decref (ready);
  json_decref (sres);
  return r;
}

static int
replicate_pull (struct control_ctx *ctx, json_t *params, json_t **result)
{
  struct cairn_pool *pool = ctx_pool (ctx);
  struct remote rm = { NULL };
  json_t *lsnaps = NULL, *rsnaps = NULL, *received = NULL, *rb;
  const char *vol, *from, *base = NULL;
  struct pull_progress pp = { .ctx = ctx };
  uint64_t *sizes = NULL;
  size_t start = 0, n;
  bool rollback;
  int r;

  vol = jstr (params, "volume");
  from = jstr (params, "from");
  rb = json_object_get (params, "rollback");
  rollback = json_is_true (rb);
  if (!json_is_object (params) || vol == NULL || from == NULL ||
      (rb && !json_is_boolean (rb)) ||
      json_object_size (params) != 2u + (rb != NULL) +
                                   (json_object_get (params, "tls") != NULL))
    return control_invalid_params (ctx, "replicate.pull takes {\"from\": "
                                   "\"HOST[:PORT]\", \"volume\": \"VOL\", "
                                   "\"rollback\"?: BOOL, \"tls\"?: BOOL}");
  r = vol_check_name (vol);
  if (r < 0)
    return r;
  control_job_start (ctx, vol);
  r = remote_connect (ctx, from, params, &rm);
  if (r == 0)
    r = remote_snapshots (&rm, vol, &rsnaps);
  if (r == 0)
    r = local_snapshots (pool, vol, &lsnaps);
  if (r == 0 && (received = json_array ()) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  if (r < 0)
    goto out;
  n = json_array_size (rsnaps);
  if (n == 0) {
    r = cairn_fail (-ENOENT, "%s has no snapshot of '%s' (or no volume "
                    "'%s'): there is nothing to pull", rm.name, vol, vol);
    goto out;
  }
  /* The newest snapshot both sides have: the chain starts after it. */
  for (size_t i = json_array_size (lsnaps); i-- > 0; ) {
    json_t *common = find_guid (rsnaps, jstr (json_array_get (lsnaps, i),
                                              "guid"));

    if (common) {
      base = jstr (common, "snapshot");
      while (json_array_get (rsnaps, start) != common)
        start++;
      start++;
      break;
    }
  }
  if (base == NULL && json_array_size (lsnaps) > 0) {
    r = cairn_fail (-ESTALE, "'%s' here and on %s have no snapshot in "
                    "common: pull into another volume, or delete '%s' here",
                    vol, rm.name, vol);
    goto out;
  }
  sizes = start < n ? calloc (n - start, sizeof *sizes) : NULL;
  if (start < n && sizes == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  if (r == 0)
    r = pull_sizes (&rm, vol, rsnaps, start, base, sizes);
  for (size_t i = start; r == 0 && i < n; i++)
    pp.chain += sizes[i - start];
  for (size_t i = start; r == 0 && i < n; i++) {
    json_t *s = json_array_get (rsnaps, i), *info = NULL;

    r = pull_stream (&pp, &rm, vol, jstr (s, "snapshot"), base,
                     jstr (s, "guid"), rollback, &info);
    if (r == 0 && json_array_append_new (received, info) == -1)
      r = cairn_fail (-ENOMEM, "out of memory");
    base = jstr (s, "snapshot");
    pp.before += sizes[i - start];
  }
  if (r == 0) {
    *result = json_pack ("{s:O, s:s}", "received", received, "newest", base);
    if (*result == NULL)
      r = cairn_fail (-ENOMEM, "out of memory");
  }
 out:
  free (sizes);
  json_decref (received);
  json_decref (lsnaps);
  json_decref (rsnaps);
  remote_close (&rm);
  return r;
}

static const struct control_method replicate_methods[] = {
  { .name = "replicate.pull", .handler = replicate_pull, .blocking = true,
    .long_running = true },
  { .name = "replicate.push", .handler = replicate_push, .blocking = true,
    .long_running = true },
};

const struct control_method_table cairn_replicate_methods = {
  .methods = replicate_methods,
  .n = ARRAY_SIZE (replicate_methods),
};
