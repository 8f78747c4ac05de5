/* Unit tests for stream mode and jobs in the control server (server/chan.c,
 * server/jobs.c, server/methods-stream.c and the stream half of the
 * connections, server/control-request.c)
 * with the real client (net/control-client.c) on a Unix socket.
 *
 * Pool A holds the source volume; a server on pool B receives.  Streams
 * made in-process from A (repl_send) are the reference: what stream.send
 * puts on the socket must be byte-identical to it, and what stream.receive
 * takes must leave B's snapshot byte-identical to A's.  Then what must
 * change nothing visible on B: a corrupted stream, a truncated one, bad
 * framing, a client that vanishes mid-stream, a cancelled job; and each of
 * those must leave a partial that a resumed stream completes.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "control-client.h"
#include "control.h"
#include "methods.h"
#include "replicate.h"
#include "rpc.h"
#include "volume.h"
#include "test-util.h"

#define MIB (1024u * 1024)
#define VOL_SIZE (48u * MIB)
#define TIMEOUT_MS 20000

static char tmpdir[64], sock_path[128];
static struct cairn_dev *dev_a, *dev_b;
static struct cairn_pool *pool_a, *pool_b;
static struct cairn_methods_ctx mctx;
static struct control_server *srv;

/* ---------------------------------------------------------------- fixture */

static struct cairn_pool *
mem_pool (struct cairn_dev **dev)
{
  struct cairn_pool *pool;

  cr_assert_eq (dev_mem_create (256 * MIB, dev), 0);
  cr_assert_eq (pool_format (*dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_open (*dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  return pool;
}

/* Write len bytes of pattern tag at off of volume name. */
static void
write_data (struct cairn_pool *pool, const char *name, uint64_t off,
            size_t len, uint64_t tag)
{
  uint8_t *data = malloc (len);
  struct cairn_volume *v;

  cr_assert_not_null (data);
  fill_pattern (data, len, tag);
  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  for (size_t done = 0; done < len; done += 4 * MIB)
    cr_assert_eq (vol_pwrite (v, data + done, (uint32_t) MIN (4 * MIB,
                                                              len - done),
                              off + done, 0), 0, "%s", cairn_errmsg ());
  vol_close (v);
  free (data);
}

/* Pool A: v@s1 with 40 MiB of data (so a stream has several PROGRESS
 * points, one every 16 MiB), v@s2 with a few changes.  Pool B empty, served
 * (with the stream methods) on a socket.
 */
static void
setup (void)
{
  static struct control_method_table tables[2];
  struct control_config cfg = {
    .tables = tables, .n_tables = 2, .opaque = &mctx,
  };
  uint64_t id;

  pool_a = mem_pool (&dev_a);
  pool_b = mem_pool (&dev_b);
  cr_assert_eq (vol_create (pool_a, "v", VOL_SIZE, &id), 0, "%s",
                cairn_errmsg ());
  write_data (pool_a, "v", 0, 40 * MIB, 1);
  cr_assert_eq (snap_create (pool_a, "v", "s1"), 0, "%s", cairn_errmsg ());
  write_data (pool_a, "v", 8 * MIB, 64 * 1024, 2);
  cr_assert_eq (snap_create (pool_a, "v", "s2"), 0, "%s", cairn_errmsg ());

  strcpy (tmpdir, "/tmp/cairn-stream.XXXXXX");
  cr_assert_not_null (mkdtemp (tmpdir));
  snprintf (sock_path, sizeof sock_path, "%s/control.sock", tmpdir);
  tables[0] = cairn_catalog_methods;
  tables[1] = cairn_stream_methods;
  cfg.unix_path = sock_path;
  mctx.pool = pool_b;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
}

static void
teardown (void)
{
  control_server_stop (srv);
  srv = NULL;
  rmdir (tmpdir);
  cr_assert_eq (pool_close (pool_a), 0);
  cr_assert_eq (pool_close (pool_b), 0);
  dev_close (dev_a);
  dev_close (dev_b);
}

static struct control_client *
client (void)
{
  struct control_client *c;

  cr_assert_eq (control_client_connect (sock_path, TIMEOUT_MS, &c), 0,
                "connect: %s", cairn_errmsg ());
  return c;
}

/* A growing buffer. */
struct buf {
  uint8_t *p;
  size_t len, cap;
};

static int
buf_sink (void *opaque, const void *data, size_t len)
{
  struct buf *b = opaque;

  if (b->len + len > b->cap) {
    b->cap = MAX (b->cap * 2, b->len + len + 65536);
    b->p = realloc (b->p, b->cap);
    cr_assert_not_null (b->p);
  }
  memcpy (b->p + b->len, data, len);
  b->len += len;
  return 0;
}

/* The stream of snap from pool, made in-process. */
static struct buf
stream_from (struct cairn_pool *pool, const char *snap, const char *from,
             const char *resume)
{
  struct buf b = { 0 };
  struct repl_send_opts o = { .from = from, .resume = resume,
                              .sink = buf_sink, .sink_opaque = &b };
  struct repl_send_result res;

  cr_assert_eq (repl_send (pool, snap, &o, &res), 0, "%s", cairn_errmsg ());
  return b;
}

/* The stream of snap from pool A. */
static struct buf
stream_of (const char *snap, const char *from, const char *resume)
{
  return stream_from (pool_a, snap, from, resume);
}

/* Give B A's snapshot snap (from base from, NULL: whole), in-process. */
static void
receive_in_b (const char *snap, const char *from)
{
  struct buf st = stream_of (snap, from, NULL);
  struct repl_recv_result rres;
  struct repl_recv *rr;
  size_t used;

  cr_assert_eq (repl_recv_new (pool_b, "v", NULL, &rr), 0);
  cr_assert_eq (repl_recv_feed (rr, st.p, st.len, &used), 1, "%s: %s", snap,
                cairn_errmsg ());
  cr_assert_eq (repl_recv_finish (rr, &rres), 0, "%s", cairn_errmsg ());
  repl_recv_free (rr);
  free (st.p);
}

/* B's catalog as text, to compare before and after a failed receive. */
static int
list_line (void *opaque, const struct vol_info *vi)
{
  char line[512];
  int n = snprintf (line, sizeof line, "%s@%s gen=%" PRIu64 " guid=%" PRIx64
                    "\n", vi->name, vi->snap, vi->gen, vi->guid);

  return buf_sink (opaque, line, (size_t) n);
}

static char *
catalog_b (void)
{
  struct buf b = { 0 };

  cr_assert_eq (vol_list (pool_b, true, list_line, &b), 0);
  buf_sink (&b, "", 1);
  return (char *) b.p;
}

/* Snapshot a of pool A and b of pool B hold the same bytes. */
static void
assert_same (const char *a, const char *b)
{
  static uint8_t x[MIB], y[MIB];
  struct cairn_volume *va, *vb;

  cr_assert_eq (vol_open (pool_a, a, &va), 0, "%s: %s", a, cairn_errmsg ());
  cr_assert_eq (vol_open (pool_b, b, &vb), 0, "%s: %s", b, cairn_errmsg ());
  cr_assert_eq (vol_size (va), vol_size (vb));
  for (uint64_t off = 0; off < vol_size (va); off += MIB) {
    cr_assert_eq (vol_pread (va, x, MIB, off), 0);
    cr_assert_eq (vol_pread (vb, y, MIB, off), 0);
    cr_assert (memcmp (x, y, MIB) == 0, "%s and %s differ in the MiB at %"
               PRIu64, a, b, off);
  }
  vol_close (va);
  vol_close (vb);
}

/* Start stream.receive into v on c; returns the ready params. */
static json_t *
start_receive (struct control_client *c, const char *vol)
{
  json_t *ready = NULL, *result = NULL, *params = json_pack ("{s:s}",
                                                             "volume", vol);

  cr_assert_eq (control_client_stream_start (c, "stream.receive", params,
                                             &ready, &result), 0,
                "stream.receive: %s", cairn_errmsg ());
  json_decref (params);
  cr_assert (json_is_integer (json_object_get (ready, "job")));
  cr_assert_str_eq (json_string_value (json_object_get (ready, "direction")),
                    "receive");
  return ready;
}

/* Push len bytes of p over a receive on c (in 100 KB writes). */
static int
push (struct control_client *c, const uint8_t *p, size_t len)
{
  for (size_t off = 0; off < len; off += 100000) {
    int r = control_client_stream_write (c, p + off, MIN (100000, len - off));

    if (r != 0)
      return r;
  }
  return 0;
}

/* Call method with params (consumed). */
static int
call (struct control_client *c, const char *method, json_t *params,
      json_t **res)
{
  int r = control_client_call (c, method, params, res);

  json_decref (params);
  return r;
}

/* The number of running jobs on the server. */
static size_t
njobs (struct control_client *c, json_int_t *first)
{
  json_t *res;
  size_t n;

  cr_assert_eq (control_client_call (c, "job.list", NULL, &res), 0, "%s",
                cairn_errmsg ());
  n = json_array_size (json_object_get (res, "jobs"));
  if (n && first)
    *first = json_integer_value (json_object_get
                                 (json_array_get (json_object_get (res, "jobs"),
                                                  0), "job"));
  json_decref (res);
  return n;
}

/* Wait until the server runs no job (the one of a closed client ended). */
static void
wait_no_jobs (void)
{
  struct control_client *c = client ();

  for (int i = 0; njobs (c, NULL) > 0; i++) {
    cr_assert (i < 500, "a job is still running after 10 s");
    usleep (20000);
  }
  control_client_close (c);
}

/* Wait until the receive into vol on B has made its partial (the server
 * may take the frames that follow, a bad one say, before its job has
 * read the first).
 */
static void
wait_partial (const char *vol)
{
  for (int i = 0; vol_partial_get (pool_b, vol, NULL, NULL) != 0; i++) {
    cr_assert (i < 500, "no partial for '%s' after 10 s", vol);
    usleep (20000);
  }
}

/* The token of v's interrupted receive on B (must exist). */
static char *
token_of (const char *vol)
{
  struct control_client *c = client ();
  json_t *res;
  char *tok;

  cr_assert_eq (call (c, "stream.token",
                                     json_pack ("{s:s}", "volume", vol), &res),
                0, "%s", cairn_errmsg ());
  tok = strdup (json_string_value (json_object_get (res, "token")));
  json_decref (res);
  control_client_close (c);
  return tok;
}

/* Receive the rest of v@s1 resumed from B's token, over the socket, and
 * check the result.
 */
static void
resume_and_check (void)
{
  char *tok = token_of ("v");
  struct buf rest = stream_of ("v@s1", NULL, tok);
  struct control_client *c = client ();
  json_t *ready = start_receive (c, "v"), *result;

  cr_assert (json_is_object (json_object_get (ready, "resume")),
             "stream.ready does not announce the interrupted receive");
  cr_assert_str_eq (json_string_value (json_object_get
                                       (json_object_get (ready, "resume"),
                                        "token")), tok);
  cr_assert_eq (push (c, rest.p, rest.len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_stream_finish (c, true, &result), 0, "%s",
                cairn_errmsg ());
  cr_assert (json_is_true (json_object_get (result, "resumed")));
  assert_same ("v@s1", "v@s1");
  json_decref (result);
  json_decref (ready);
  control_client_close (c);
  free (rest.p);
  free (tok);
}

TestSuite (stream, .init = setup, .fini = teardown, .timeout = 120);

/* ---------------------------------------------------------------- send */

/* stream.send on B's server: B first gets v@s1 in-process from A. */
Test (stream, send_matches_the_stream_made_in_process)
{
  struct buf ref, got = { 0 };
  struct control_client *c;
  json_t *ready, *result, *params;

  receive_in_b ("v@s1", NULL);
  /* The reference is B's own stream (its header names B's pool). */
  ref = stream_from (pool_b, "v@s1", NULL, NULL);

  c = client ();
  params = json_pack ("{s:s}", "snapshot", "v@s1");
  cr_assert_eq (control_client_stream_start (c, "stream.send", params, &ready,
                                             &result), 0, "%s",
                cairn_errmsg ());
  cr_assert_str_eq (json_string_value (json_object_get (ready, "direction")),
                    "send");
  for (;;) {
    const void *d;
    size_t n;

    cr_assert_eq (control_client_stream_read (c, &d, &n), 0, "%s",
                  cairn_errmsg ());
    if (n == 0)
      break;
    buf_sink (&got, d, n);
  }
  cr_assert_eq (control_client_stream_finish (c, false, &result), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (got.len, ref.len, "%zu bytes on the socket, %zu in-process",
                got.len, ref.len);
  cr_assert (memcmp (got.p, ref.p, ref.len) == 0);
  cr_assert_eq ((size_t) json_integer_value (json_object_get (result,
                                                              "stream_bytes")),
                ref.len);
  json_decref (result);
  json_decref (ready);
  json_decref (params);

  /* The connection carries requests again after the stream. */
  cr_assert_eq (control_client_call (c, "server.version", NULL, &result), 0);
  json_decref (result);

  /* An error before any byte is an ordinary reply: no stream mode. */
  params = json_pack ("{s:s}", "snapshot", "v@nope");
  cr_assert_eq (control_client_stream_start (c, "stream.send", params, &ready,
                                             &result), -ENOENT);
  cr_assert_null (ready);
  json_decref (params);
  control_client_close (c);
  free (ref.p);
  free (got.p);
}

/* stream.size: the data of the stream that stream.send would make, counted
 * without making it, and refused as stream.send refuses.
 */
Test (stream, size_counts_the_data_of_the_stream)
{
  static const struct { const char *snap, *from; uint64_t want; } ok[] = {
    { "v@s1", NULL, 40 * MIB },
    { "v@s2", "s1", 64 * 1024 },
    { "v@s2", "v@s1", 64 * 1024 },
    { "v@s2", NULL, 40 * MIB },
  };
  static const struct { const char *params; int err; } bad[] = {
    { "{\"snapshot\": \"v\"}", -EINVAL },             /* not a snapshot */
    { "{\"snapshot\": \"v@nope\"}", -ENOENT },
    { "{\"snapshot\": \"v@s1\", \"from\": \"s2\"}", -EINVAL }, /* newer */
    { "{\"snapshot\": \"v@s2\", \"from\": \"nope\"}", -ENOENT },
    { "{\"snapshot\": \"v@s1\", \"resume\": \"x\"}", -EINVAL },
    { "{\"snapshot\": 1}", -EINVAL },
    { "{}", -EINVAL },
  };
  struct control_client *c;
  json_t *res;

  receive_in_b ("v@s1", NULL);
  receive_in_b ("v@s2", "s1");
  c = client ();
  for (size_t i = 0; i < ARRAY_SIZE (ok); i++) {
    struct buf b = { 0 };
    struct repl_send_opts o = { .from = ok[i].from, .sink = buf_sink,
                                .sink_opaque = &b };
    struct repl_send_result sres;
    uint64_t got;

    cr_assert_eq (repl_send (pool_b, ok[i].snap, &o, &sres), 0, "%s",
                  cairn_errmsg ());
    cr_assert_eq (call (c, "stream.size",
                        json_pack ("{s:s, s:s*}", "snapshot", ok[i].snap,
                                   "from", ok[i].from), &res), 0,
                  "%s from %s: %s", ok[i].snap, ok[i].from, cairn_errmsg ());
    got = (uint64_t) json_integer_value (json_object_get (res,
                                                          "data_bytes"));
    cr_assert_eq (got, sres.data_bytes, "%s from %s: stream.size says %"
                  PRIu64 " bytes, the stream carries %" PRIu64, ok[i].snap,
                  ok[i].from, got, sres.data_bytes);
    cr_assert_eq (got, ok[i].want, "%s from %s: %" PRIu64 " bytes, not %"
                  PRIu64, ok[i].snap, ok[i].from, got, ok[i].want);
    json_decref (res);
    free (b.p);
  }
  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    int r = call (c, "stream.size", json_loads (bad[i].params, 0, NULL),
                  &res);

    cr_assert_eq (r, bad[i].err, "stream.size %s gave %d (%s), not %d",
                  bad[i].params, r, cairn_errmsg (), bad[i].err);
  }
  control_client_close (c);
}

/* ---------------------------------------------------------------- receive */

Test (stream, receive_full_then_incremental)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct buf inc = stream_of ("v@s2", "s1", NULL);
  struct control_client *c = client ();
  json_t *ready, *result;

  ready = start_receive (c, "v");
  cr_assert (json_is_null (json_object_get (ready, "resume")));
  json_decref (ready);
  cr_assert_eq (push (c, full.p, full.len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_stream_finish (c, true, &result), 0, "%s",
                cairn_errmsg ());
  cr_assert_str_eq (json_string_value (json_object_get (result, "snapshot")),
                    "v@s1");
  json_decref (result);
  assert_same ("v@s1", "v@s1");

  /* Same connection, next stream. */
  ready = start_receive (c, "v");
  json_decref (ready);
  cr_assert_eq (push (c, inc.p, inc.len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_stream_finish (c, true, &result), 0, "%s",
                cairn_errmsg ());
  cr_assert (json_is_true (json_object_get (result, "incremental")));
  json_decref (result);
  assert_same ("v@s2", "v@s2");
  assert_same ("v@s1", "v@s1");
  control_client_close (c);
  free (full.p);
  free (inc.p);
}

/* "rollback": a target that diverged from the stream's base (written, a
 * snapshot of its own) is rolled back to it; the param must be a boolean.
 */
Test (stream, receive_with_rollback)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct buf inc = stream_of ("v@s2", "s1", NULL);
  struct control_client *c = client ();
  json_t *ready = NULL, *result = NULL, *params;
  struct cairn_volume *v;
  struct vol_info vi;
  uint8_t block[4096];

  json_decref (start_receive (c, "v"));
  cr_assert_eq (push (c, full.p, full.len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_stream_finish (c, true, &result), 0, "%s",
                cairn_errmsg ());
  json_decref (result);
  memset (block, 0x5a, sizeof block);
  cr_assert_eq (vol_open (pool_b, "v", &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, block, sizeof block, 0, 0), 0);
  vol_close (v);
  cr_assert_eq (snap_create (pool_b, "v", "extra"), 0);

  params = json_pack ("{s:s, s:s}", "volume", "v", "rollback", "yes");
  cr_assert_lt (control_client_stream_start (c, "stream.receive", params,
                                             &ready, &result), 0);
  cr_assert (strstr (cairn_errmsg (), "\"rollback\" must be true or false"),
             "%s", cairn_errmsg ());
  json_decref (params);

  params = json_pack ("{s:s, s:b}", "volume", "v", "rollback", 1);
  ready = result = NULL;
  cr_assert_eq (control_client_stream_start (c, "stream.receive", params,
                                             &ready, &result), 0, "%s",
                cairn_errmsg ());
  json_decref (params);
  json_decref (ready);
  cr_assert_eq (push (c, inc.p, inc.len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_stream_finish (c, true, &result), 0, "%s",
                cairn_errmsg ());
  json_decref (result);
  assert_same ("v@s2", "v@s2");
  assert_same ("v@s2", "v");
  cr_assert_eq (vol_stat (pool_b, "v@extra", &vi), -ENOENT);
  control_client_close (c);
  free (full.p);
  free (inc.p);
}

/* A byte changed: refused with where, nothing visible changes, and the
 * connection can go on (the rest of the stream is read and dropped).
 */
Test (stream, corrupted_stream_changes_nothing)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct control_client *c = client ();
  char *before = catalog_b (), *after;
  json_t *ready, *result;
  int r;

  uint64_t seed = test_seed ("corrupted_stream", 2);
  struct rng rng = { seed };
  size_t at = rng_below (&rng, full.len);

  full.p[at] ^= (uint8_t) (1u << rng_below (&rng, 8));
  ready = start_receive (c, "v");
  json_decref (ready);
  r = push (c, full.p, full.len);
  cr_assert (r == 0 || r == 1, "%s", cairn_errmsg ());
  r = control_client_stream_finish (c, true, &result);
  cr_assert_lt (r, 0);
  cr_assert (strstr (cairn_errmsg (), "byte") != NULL,
             "seed %" PRIu64 ": the error does not say where: %s", seed,
             cairn_errmsg ());
  cr_assert_eq (control_client_error_code (c), CAIRN_E_INVALID);
  after = catalog_b ();
  cr_assert_str_eq (before, after);
  cr_assert_eq (control_client_call (c, "server.version", NULL, &result), 0,
                "%s", cairn_errmsg ());
  json_decref (result);
  control_client_close (c);
  free (before);
  free (after);
  free (full.p);
}

/* Cut short (the client ends the stream early): an error naming the byte,
 * the token in the error's data, nothing visible; the resumed stream then
 * completes it.
 */
Test (stream, truncated_stream_keeps_a_resumable_partial)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct control_client *c = client ();
  char *before = catalog_b (), *after;
  json_t *ready, *result, *data;

  uint64_t seed = test_seed ("truncated_stream", 20);
  struct rng rng = { seed };
  size_t cut = 1 + rng_below (&rng, full.len - 1);

  ready = start_receive (c, "v");
  json_decref (ready);
  cr_assert_eq (push (c, full.p, cut), 0, "%s", cairn_errmsg ());
  cr_assert_lt (control_client_stream_finish (c, true, &result), 0);
  cr_assert (strstr (cairn_errmsg (), "truncated at byte") != NULL, "%s",
             cairn_errmsg ());
  cr_assert_eq (control_client_error_code (c), CAIRN_E_IO);
  data = control_client_error_data (c);
  /* Cut inside the header: nothing to keep. */
  if (!json_is_string (json_object_get (data, "token"))) {
    cr_assert_lt (cut, 4096, "seed %" PRIu64 ": cut at %zu, no token", seed,
                  cut);
    free (before);
    free (full.p);
    control_client_close (c);
    return;
  }
  after = catalog_b ();
  cr_assert_str_eq (before, after);
  control_client_close (c);
  resume_and_check ();
  free (before);
  free (after);
  free (full.p);
}

/* A frame over the limit: the server closes the connection; the receive
 * keeps what it had, nothing is visible, and the server serves on.
 */
Test (stream, bad_frame_closes_the_connection)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  static const char req[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                            "\"stream.receive\",\"params\":{\"volume\":\"v\"}}\n";
  uint8_t hdr[4] = { 0x7f, 0xff, 0xff, 0xff };
  char buf[4096], *before = catalog_b (), *after;
  size_t got = 0;
  ssize_t n;
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  strcpy (sa.sun_path, sock_path);
  cr_assert_eq (connect (fd, (struct sockaddr *) &sa, sizeof sa), 0);
  cr_assert_eq (write (fd, req, sizeof req - 1), (ssize_t) sizeof req - 1);
  /* Wait for stream.ready. */
  while (memchr (buf, '\n', got) == NULL) {
    n = read (fd, buf + got, sizeof buf - got);
    cr_assert_gt (n, 0);
    got += (size_t) n;
  }
  cr_assert (strstr (buf, "stream.ready") != NULL, "%.*s", (int) got, buf);
  /* A good frame, then a bad one. */
  control_frame_header (65536, hdr);
  cr_assert_eq (write (fd, hdr, 4), 4);
  cr_assert_eq (write (fd, full.p, 65536), 65536);
  wait_partial ("v");
  memset (hdr, 0x7f, 4);
  cr_assert_eq (write (fd, hdr, 4), 4);
  /* The server closes: read until the end (any reply is the error). */
  while ((n = read (fd, buf, sizeof buf)) > 0)
    ;
  cr_assert (n == 0 || errno == ECONNRESET);
  close (fd);
  wait_no_jobs ();
  after = catalog_b ();
  cr_assert_str_eq (before, after);
  resume_and_check ();
  free (before);
  free (after);
  free (full.p);
}

/* The client vanishes mid-stream: the job ends, the partial stays and
 * resumes.
 */
Test (stream, client_vanishing_mid_stream_leaves_a_resumable_partial)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct control_client *c = client ();
  char *before = catalog_b (), *after;
  json_t *ready = start_receive (c, "v");

  cr_assert_eq (push (c, full.p, 30 * MIB), 0, "%s", cairn_errmsg ());
  control_client_close (c);
  wait_no_jobs ();
  after = catalog_b ();
  cr_assert_str_eq (before, after);
  resume_and_check ();
  json_decref (ready);
  free (before);
  free (after);
  free (full.p);
}

/* ---------------------------------------------------------------- jobs */

/* job.cancel stops a receive waiting for bytes: the reply is "cancelled",
 * with the token; the partial resumes.
 */
Test (stream, cancelled_receive_keeps_a_resumable_partial)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct control_client *c = client (), *ctl = client ();
  json_t *ready = start_receive (c, "v"), *res;
  json_int_t id = 0;

  cr_assert_eq (push (c, full.p, 25 * MIB), 0, "%s", cairn_errmsg ());
  cr_assert_eq (njobs (ctl, &id), 1);
  cr_assert_eq (id, json_integer_value (json_object_get (ready, "job")));
  cr_assert_eq (call (ctl, "job.show",
                                     json_pack ("{s:I}", "job", id), &res), 0);
  cr_assert_str_eq (json_string_value (json_object_get (res, "what")), "v");
  json_decref (res);
  cr_assert_eq (call (ctl, "job.cancel",
                                     json_pack ("{s:I}", "job", id), &res), 0);
  json_decref (res);
  cr_assert_eq (control_client_stream_finish (c, true, &res), -ECANCELED,
                "%s", cairn_errmsg ());
  cr_assert_eq (control_client_error_code (c), CAIRN_E_CANCELLED);
  cr_assert (json_is_string (json_object_get (control_client_error_data (c),
                                              "token")));
  cr_assert_eq (njobs (ctl, NULL), 0);
  cr_assert_eq (call (ctl, "job.cancel",
                                     json_pack ("{s:I}", "job", id), &res),
                -ENOENT);
  json_decref (ready);
  control_client_close (c);
  control_client_close (ctl);
  resume_and_check ();
  free (full.p);
}

/* A cancelled send ends its stream cleanly (end frame, then the error
 * reply); the client that does not read holds the server to a bounded
 * queue meanwhile.
 */
Test (stream, cancelled_send_ends_the_stream)
{
  struct control_client *c = client (), *ctl = client ();
  struct buf full = stream_of ("v@s1", NULL, NULL);
  json_t *ready, *res, *params;
  json_int_t id = 0;
  size_t got = 0;

  /* B needs the snapshot to send it. */
  receive_in_b ("v@s1", NULL);

  params = json_pack ("{s:s}", "snapshot", "v@s1");
  cr_assert_eq (control_client_stream_start (c, "stream.send", params, &ready,
                                             &res), 0, "%s", cairn_errmsg ());
  json_decref (params);
  /* Not reading: the sender waits on its queue; its job is listed. */
  WAIT_UNTIL (njobs (ctl, &id) == 1);
  cr_assert_eq (njobs (ctl, &id), 1, "the send's job is not listed");
  cr_assert_eq (call (ctl, "job.cancel",
                                     json_pack ("{s:I}", "job", id), &res), 0);
  json_decref (res);
  for (;;) {
    const void *d;
    size_t n;

    cr_assert_eq (control_client_stream_read (c, &d, &n), 0, "%s",
                  cairn_errmsg ());
    if (n == 0)
      break;
    got += n;
  }
  cr_assert_lt (got, full.len, "the cancelled send sent all of it");
  cr_assert_eq (control_client_stream_finish (c, false, &res), -ECANCELED,
                "%s", cairn_errmsg ());
  json_decref (ready);
  control_client_close (c);
  control_client_close (ctl);
  free (full.p);
}

/* The server stops in the middle of a receive (nbdkit shutting down): the
 * stop does not wait for the client, and the receive keeps its progress.
 */
Test (stream, server_stop_mid_stream_keeps_the_partial)
{
  struct buf full = stream_of ("v@s1", NULL, NULL);
  struct control_client *c = client ();
  char tok[STREAM_TOKEN_MAX];
  json_t *ready = start_receive (c, "v"), *res;

  cr_assert_eq (push (c, full.p, 20 * MIB), 0, "%s", cairn_errmsg ());
  control_server_stop (srv);
  srv = NULL;
  cr_assert_lt (control_client_stream_finish (c, true, &res), 0);
  cr_assert_eq (repl_recv_token (pool_b, "v", tok), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_stat (pool_b, "v", &(struct vol_info) { 0 }), -ENOENT);
  json_decref (ready);
  control_client_close (c);
  free (full.p);
}

/* Streams run on threads of their own: more idle streams than libuv's
 * threadpool has threads (4) leave the engine methods answering.
 */
Test (stream, idle_streams_do_not_starve_other_requests)
{
  struct control_client *c[6], *ctl = client ();
  json_t *ready[6], *res;
  char vol[16], *cat;

  for (int i = 0; i < 6; i++) {
    c[i] = client ();
    snprintf (vol, sizeof vol, "idle%d", i);
    ready[i] = start_receive (c[i], vol);
  }
  cr_assert_eq (njobs (ctl, NULL), 6);
  cr_assert_eq (call (ctl, "server.ping", json_pack ("{s:i}", "delay_ms", 1),
                      &res), 0, "%s", cairn_errmsg ());
  json_decref (res);
  cr_assert_eq (call (ctl, "volume.list", json_object (), &res), 0, "%s",
                cairn_errmsg ());
  json_decref (res);
  for (int i = 0; i < 6; i++) {
    /* No byte came: the receive fails and nothing is kept or shown. */
    cr_assert_lt (control_client_stream_finish (c[i], true, &res), 0);
    json_decref (ready[i]);
    control_client_close (c[i]);
  }
  cat = catalog_b ();
  cr_assert_str_eq (cat, "");
  free (cat);
  control_client_close (ctl);
}
