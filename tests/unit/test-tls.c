/* Unit tests for TLS on the control protocol (net/tls.c): PSK files,
 * the memory-BIO session layer with both ends in memory, and the control
 * server's TCP port with the real client (net/control-client.c).
 *
 * Sessions: a client and a server session exchange ciphertext through
 * buffers the test owns, cut at random points (seeded) so that records
 * arrive split and joined as TCP would deliver them.  What must hold:
 * the handshake completes with the right key and fails on both ends with
 * a wrong key or an unknown user; every plaintext byte arrives in order
 * in both directions, however the ciphertext is cut (tls.c invariant 2:
 * every whole record fed is decrypted); close_notify ends input; nothing
 * plaintext goes out before the handshake.
 */
#include <config.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <criterion/criterion.h>

#include "control-client.h"
#include "control.h"
#include "rpc.h"
#include "tls.h"
#include "test-util.h"

static char tmpdir[64];

/* Write a file in the test directory; returns its path (static buffer
 * per slot).
 */
static const char *
write_file (int slot, const char *name, const char *text)
{
  static char paths[4][128];
  FILE *f;

  snprintf (paths[slot], sizeof paths[slot], "%s/%s", tmpdir, name);
  f = fopen (paths[slot], "w");
  cr_assert_not_null (f);
  fputs (text, f);
  fclose (f);
  return paths[slot];
}

static void
setup (void)
{
  strcpy (tmpdir, "/tmp/cairn-test-tls.XXXXXX");
  cr_assert_not_null (mkdtemp (tmpdir));
}

static void
teardown (void)
{
  char cmd[128];

  snprintf (cmd, sizeof cmd, "rm -rf %s", tmpdir);
  cr_assert_eq (system (cmd), 0);
}

TestSuite (tls, .init = setup, .fini = teardown, .timeout = 60);

#define KEY_A "alice:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"
#define KEY_B "alice:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n"

/* Credentials from a PSK file's text. */
static struct tls_ctx *
psk_ctx (const char *text, bool server, const char *user)
{
  struct tls_config cfg = {
    .psk_file = write_file (server ? 0 : 1, server ? "server.psk"
                                                   : "client.psk", text),
    .username = user,
  };
  struct tls_ctx *ctx;

  cr_assert_eq (tls_ctx_new (&cfg, server, &ctx), 0, "%s", cairn_errmsg ());
  return ctx;
}

/* ------------------------------------------------------------ PSK files */

Test (tls, psk_files_are_checked)
{
  static const struct { const char *text, *says; } bad[] = {
    { "alice\n", "line 1: expected username:hexkey" },
    { "# keys\n\nalice:abc\n", "line 3: the key must be an even number" },
    { "alice:zz\n", "line 1: the key is not hex" },
    { ":00\n", "line 1: the username must be" },
    { "# nothing\n", "has no key" },
  };
  struct tls_config cfg = { 0 };
  struct tls_ctx *ctx = NULL;

  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    cfg.psk_file = write_file (0, "bad.psk", bad[i].text);
    cr_expect_eq (tls_ctx_new (&cfg, true, &ctx), -EINVAL, "%s", bad[i].text);
    cr_expect (strstr (cairn_errmsg (), bad[i].says), "%s: %s", bad[i].text,
               cairn_errmsg ());
  }
  cfg.psk_file = "/nonexistent/keys.psk";
  cr_expect_eq (tls_ctx_new (&cfg, true, &ctx), -ENOENT);
  cr_expect (strstr (cairn_errmsg (), "/nonexistent/keys.psk"));
  /* A client must find its user. */
  cfg.psk_file = write_file (0, "one.psk", KEY_A);
  cfg.username = "bob";
  cr_expect_eq (tls_ctx_new (&cfg, false, &ctx), -EINVAL);
  cr_expect (strstr (cairn_errmsg (), "no key for user 'bob'"));
  /* A server needs some credentials. */
  memset (&cfg, 0, sizeof cfg);
  cr_expect_eq (tls_ctx_new (&cfg, true, &ctx), -EINVAL);
  cfg.certificates = tmpdir;      /* no server-cert.pem there */
  cr_expect_eq (tls_ctx_new (&cfg, true, &ctx), -EINVAL);
  cr_expect (strstr (cairn_errmsg (), "server-cert.pem"), "%s",
             cairn_errmsg ());
}

Test (tls, modes_parse)
{
  enum tls_mode m;

  cr_assert_eq (tls_parse_mode ("require", &m), 0);
  cr_expect_eq (m, TLS_REQUIRE);
  cr_assert_eq (tls_parse_mode ("on", &m), 0);
  cr_expect_eq (m, TLS_ON);
  cr_assert_eq (tls_parse_mode ("false", &m), 0);
  cr_expect_eq (m, TLS_OFF);
  cr_expect_eq (tls_parse_mode ("maybe", &m), -EINVAL);
  cr_expect_str_eq (tls_mode_name (TLS_REQUIRE), "require");
  /* A request line never looks like a ClientHello. */
  cr_expect (tls_looks_like_hello (0x16));
  cr_expect (!tls_looks_like_hello ('{'));
  cr_expect (!tls_looks_like_hello (' '));
}

/* ------------------------------------------------------------ sessions */

/* One direction of the wire: ciphertext taken from one end, fed to the
 * other in pieces.
 */
struct wire {
  char *buf;
  size_t len;
};

/* Take what end made and queue it on w. */
static void
take (struct tls_session *end, struct wire *w)
{
  char *out;
  size_t n;

  cr_assert_eq (tls_session_take (end, &out, &n), 0);
  if (out == NULL)
    return;
  w->buf = realloc (w->buf, w->len + n);
  cr_assert_not_null (w->buf);
  memcpy (w->buf + w->len, out, n);
  w->len += n;
  free (out);
}

/* Feed up to max bytes of w to end (random cut), then read everything it
 * can into got (if not NULL); returns the last tls_session_read result.
 */
static int
deliver (struct tls_session *end, struct wire *w, size_t max,
         char *got, size_t *got_len, size_t cap)
{
  size_t n = MIN (w->len, max), k;
  char sink[4096];
  int r;

  if (n > 0) {
    cr_assert_eq (tls_session_feed (end, w->buf, n), 0);
    memmove (w->buf, w->buf + n, w->len - n);
    w->len -= n;
  }
  for (;;) {
    if (got) {
      r = tls_session_read (end, got + *got_len, cap - *got_len, &k);
      if (r == TLS_DATA)
        *got_len += k;
    }
    else
      r = tls_session_read (end, sink, sizeof sink, &k);
    if (r != TLS_DATA)
      return r;
  }
}

/* Run the handshake between two sessions, cutting the ciphertext at random
 * points; returns the first failure (or 0) with its end in *who.  What the
 * server sent last and the client has not read stays in *s2c (an alert).
 */
static int
handshake (struct tls_session *cl, struct tls_session *sv, struct rng *rng,
           const char **who, struct wire *s2c_out)
{
  struct wire c2s = { 0 }, s2c = { 0 };
  int r = 0;

  *who = "";
  for (int round = 0; round < 200 && r >= 0; round++) {
    r = deliver (cl, &s2c, 1 + rng_below (rng, 700), NULL, NULL, 0);
    take (cl, &c2s);
    if (r < 0) {
      *who = "client";
      break;
    }
    r = deliver (sv, &c2s, 1 + rng_below (rng, 700), NULL, NULL, 0);
    take (sv, &s2c);
    if (r < 0) {
      *who = "server";
      break;
    }
    if (tls_session_ready (cl) && tls_session_ready (sv) &&
        c2s.len == 0 && s2c.len == 0)
      break;
  }
  free (c2s.buf);
  if (s2c_out)
    *s2c_out = s2c;
  else
    free (s2c.buf);
  return r < 0 ? r : 0;
}

Test (tls, psk_handshake_and_data_both_ways)
{
  struct tls_ctx *sc = psk_ctx (KEY_A, true, NULL);
  struct tls_ctx *cc = psk_ctx (KEY_A, false, "alice");
  struct tls_session *sv, *cl;
  struct rng rng = { test_seed ("tls.psk_handshake_and_data_both_ways", 7) };
  const size_t total = 3 * 1024 * 1024 + 4321;
  char *src = malloc (total), *got = malloc (total);
  struct wire w = { 0 };
  const char *who;
  size_t got_len, sent;
  char probe[16];

  cr_assert (src && got);
  fill_pattern (src, total, 42);
  cr_assert_eq (tls_session_new (sc, "127.0.0.1:1", &sv), 0);
  cr_assert_eq (tls_session_new (cc, "127.0.0.1:10810", &cl), 0);
  /* Nothing plaintext before the handshake (invariant 4). */
  cr_expect_eq (tls_session_write (cl, "x", 1), -EPIPE);
  cr_assert_eq (handshake (cl, sv, &rng, &who, NULL), 0, "%s: %s", who,
                cairn_errmsg ());
  cr_assert (tls_session_ready (cl) && tls_session_ready (sv));

  /* Each direction: writes of random sizes, ciphertext cut at random
   * points, every byte in order at the other end.
   */
  for (int dir = 0; dir < 2; dir++) {
    struct tls_session *from = dir ? sv : cl, *to = dir ? cl : sv;

    got_len = sent = 0;
    while (sent < total || w.len > 0) {
      if (sent < total) {
        size_t n = MIN (total - sent, 1 + rng_below (&rng, 200000));

        cr_assert_eq (tls_session_write (from, src + sent, n), 0);
        sent += n;
        take (from, &w);
      }
      cr_assert_eq (deliver (to, &w, 1 + rng_below (&rng, 100000), got,
                             &got_len, total), TLS_WANT_INPUT);
    }
    cr_assert_eq (got_len, total, "direction %d", dir);
    cr_assert_eq (memcmp (src, got, total), 0, "direction %d", dir);
  }
  /* close_notify ends the input; nothing goes out after it. */
  tls_session_close (cl);
  take (cl, &w);
  cr_assert_gt (w.len, 0);
  got_len = 0;
  cr_expect_eq (deliver (sv, &w, w.len, probe, &got_len, sizeof probe),
                TLS_CLOSED);
  cr_expect_eq (tls_session_write (cl, "x", 1), -EPIPE);
  free (w.buf);
  free (src);
  free (got);
  tls_session_free (cl);
  tls_session_free (sv);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}

/* A handshake that must fail on both ends; the server's message must say
 * says.
 */
static void
expect_refused (const char *server_keys, const char *client_keys,
                const char *user, const char *says)
{
  struct tls_ctx *sc = psk_ctx (server_keys, true, NULL);
  struct tls_ctx *cc = psk_ctx (client_keys, false, user);
  struct tls_session *sv, *cl;
  struct rng rng = { 1 };
  struct wire w = { 0 };
  const char *who;
  int r;

  cr_assert_eq (tls_session_new (sc, "10.0.0.2:5555", &sv), 0);
  cr_assert_eq (tls_session_new (cc, "10.0.0.1:10810", &cl), 0);
  r = handshake (cl, sv, &rng, &who, &w);
  cr_assert_eq (r, -EPROTO, "the handshake did not fail");
  cr_expect_str_eq (who, "server");
  cr_expect (strstr (cairn_errmsg (), "TLS handshake with 10.0.0.2:5555 "
                     "failed: "), "%s", cairn_errmsg ());
  cr_expect (strstr (cairn_errmsg (), says), "%s", cairn_errmsg ());
  cr_expect (!tls_session_ready (sv));
  /* The client gets the server's alert and fails too. */
  cr_assert_gt (w.len, 0, "the server sent no alert");
  cr_expect_lt (deliver (cl, &w, w.len, NULL, NULL, 0), 0);
  cr_expect (strstr (cairn_errmsg (), "TLS handshake with 10.0.0.1:10810 "
                     "failed: "), "%s", cairn_errmsg ());
  free (w.buf);
  tls_session_free (cl);
  tls_session_free (sv);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}

Test (tls, wrong_key_is_refused)
{
  expect_refused (KEY_A, KEY_B, NULL, "not this PSK file's key");
}

Test (tls, unknown_user_is_refused)
{
  expect_refused (KEY_A, "bob:00112233445566778899aabbccddeeff\n", NULL,
                  "offered no username");
}

/* ------------------------------------------------------------ server */

static int
ping (struct control_ctx *ctx, json_t *params, json_t **result)
{
  *result = json_string ("pong");
  return 0;
}

static const struct control_method test_methods[] = {
  { .name = "test.ping", .handler = ping },
};

/* What the server warned about (refused and failed TLS clients). */
static atomic_int warnings;

static void
count_warning (void *opaque, const char *msg)
{
  fprintf (stderr, "server: %s\n", msg);
  atomic_fetch_add (&warnings, 1);
}

/* A control server on loopback TCP with the given TLS (and at most
 * max_clients connections, 0: the default; a setup deadline of
 * handshake_ms, 0: the default).
 */
static struct control_server *
start_server_max (enum tls_mode mode, struct tls_ctx *tls, unsigned *port,
                  unsigned max_clients, unsigned handshake_ms)
{
  static struct control_method_table table = {
    test_methods, ARRAY_SIZE (test_methods)
  };
  char path[128];
  struct control_config cfg = {
    .unix_path = path, .tcp_address = "127.0.0.1", .tls_mode = mode,
    .tls = tls, .tables = &table, .n_tables = 1, .warn = count_warning,
    .max_clients = max_clients, .handshake_timeout_ms = handshake_ms,
    .tcp_insecure = mode == TLS_OFF,
  };
  struct control_server *srv;

  snprintf (path, sizeof path, "%s/ctl.sock", tmpdir);
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  *port = control_server_tcp_port (srv);
  return srv;
}

static struct control_server *
start_server (enum tls_mode mode, struct tls_ctx *tls, unsigned *port)
{
  return start_server_max (mode, tls, port, 0, 0);
}

/* Call test.ping on 127.0.0.1:port with tls (NULL: plain). */
static int
call_ping (unsigned port, struct tls_ctx *tls)
{
  struct control_client *c;
  json_t *res = NULL;
  int r = control_client_connect_tcp ("127.0.0.1", port, tls, 10000, &c);

  if (r < 0)
    return r;
  r = control_client_call (c, "test.ping", NULL, &res);
  if (r == 0)
    cr_expect_str_eq (json_string_value (res), "pong");
  json_decref (res);
  control_client_close (c);
  return r;
}

Test (tls, server_require_on_and_off)
{
  struct tls_ctx *sc = psk_ctx (KEY_A, true, NULL);
  struct tls_ctx *cc = psk_ctx (KEY_A, false, NULL);
  struct tls_ctx *bad = psk_ctx (KEY_B, false, NULL);
  struct control_server *srv;
  unsigned port;

  /* A server needs credentials for on and require. */
  {
    struct control_config cfg = { .unix_path = "/tmp/x",
                                  .tls_mode = TLS_REQUIRE };
    cr_expect_eq (control_server_start (&cfg, &srv), -EINVAL);
  }
  srv = start_server (TLS_REQUIRE, sc, &port);
  cr_expect_eq (call_ping (port, cc), 0, "%s", cairn_errmsg ());
  cr_expect_eq (call_ping (port, bad), -EPROTO);
  cr_expect (strstr (cairn_errmsg (), "TLS handshake with 127.0.0.1:"),
             "%s", cairn_errmsg ());
  cr_expect_eq (call_ping (port, NULL), -EPERM, "%s", cairn_errmsg ());
  cr_expect (strstr (cairn_errmsg (), "requires TLS"), "%s", cairn_errmsg ());
  control_server_stop (srv);

  srv = start_server (TLS_ON, sc, &port);
  cr_expect_eq (call_ping (port, cc), 0, "%s", cairn_errmsg ());
  cr_expect_eq (call_ping (port, NULL), 0, "%s", cairn_errmsg ());
  control_server_stop (srv);

  srv = start_server (TLS_OFF, NULL, &port);
  cr_expect_eq (call_ping (port, NULL), 0, "%s", cairn_errmsg ());
  cr_expect_eq (call_ping (port, cc), -EPROTO);
  cr_expect (strstr (cairn_errmsg (), "the connection was closed"), "%s",
             cairn_errmsg ());
  control_server_stop (srv);
  tls_ctx_free (bad);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}

/* A long call over TLS checks the server's liveness on second connections,
 * which must be TLS too (a plain one would be refused: a warning).
 */
Test (tls, liveness_checks_use_tls)
{
  struct tls_ctx *sc = psk_ctx (KEY_A, true, NULL);
  struct tls_ctx *cc = psk_ctx (KEY_A, false, NULL);
  struct control_server *srv;
  struct control_client *c;
  json_t *res = NULL, *params = json_pack ("{s:i}", "delay_ms", 1000);
  unsigned port;

  srv = start_server (TLS_REQUIRE, sc, &port);
  atomic_store (&warnings, 0);
  cr_assert_eq (control_client_connect_tcp ("127.0.0.1", port, cc, 10000, &c),
                0, "%s", cairn_errmsg ());
  control_client_set_timeout (c, -1, 100);
  cr_assert_eq (control_client_call (c, "server.ping", params, &res), 0, "%s",
                cairn_errmsg ());
  cr_expect_eq (json_integer_value (json_object_get (res, "delay_ms")), 1000);
  cr_expect_eq (atomic_load (&warnings), 0);
  json_decref (res);
  json_decref (params);
  control_client_close (c);
  control_server_stop (srv);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}

/* A TLS client over the connection limit is told so, through TLS; a plain
 * one of an "on" port in plain.
 */
Test (tls, busy_server_says_so_in_the_clients_language)
{
  struct tls_ctx *sc = psk_ctx (KEY_A, true, NULL);
  struct tls_ctx *cc = psk_ctx (KEY_A, false, NULL);
  struct control_server *srv;
  struct control_client *held;
  json_t *res = NULL;
  unsigned port;

  srv = start_server_max (TLS_ON, sc, &port, 1, 0);
  cr_assert_eq (control_client_connect_tcp ("127.0.0.1", port, cc, 10000,
                                            &held), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_call (held, "test.ping", NULL, &res), 0);
  json_decref (res);
  cr_expect_eq (call_ping (port, cc), -EBUSY, "%s", cairn_errmsg ());
  cr_expect (strstr (cairn_errmsg (), "too many control connections"), "%s",
             cairn_errmsg ());
  cr_expect_eq (call_ping (port, NULL), -EBUSY, "%s", cairn_errmsg ());
  cr_expect (strstr (cairn_errmsg (), "too many control connections"), "%s",
             cairn_errmsg ());
  control_client_close (held);
  control_server_stop (srv);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}

/* A raw TCP connection to 127.0.0.1:port that has sent bytes (n may be 0). */
static int
raw_connect (unsigned port, const void *bytes, size_t n)
{
  struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons (port),
                            .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
  int fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

  cr_assert_geq (fd, 0);
  cr_assert_eq (connect (fd, (struct sockaddr *) &sa, sizeof sa), 0);
  if (n)
    cr_assert_eq (write (fd, bytes, n), (ssize_t) n);
  return fd;
}

/* Milliseconds until the server closes fd (reading and dropping what it
 * says), or -1 if it is still open after limit_ms.
 */
static int
ms_until_closed (int fd, int limit_ms)
{
  struct timespec t0, t1;
  char buf[4096];

  clock_gettime (CLOCK_MONOTONIC, &t0);
  for (;;) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int ms;

    clock_gettime (CLOCK_MONOTONIC, &t1);
    ms = (int) ((t1.tv_sec - t0.tv_sec) * 1000 +
                (t1.tv_nsec - t0.tv_nsec) / 1000000);
    if (ms >= limit_ms)
      return -1;
    if (poll (&p, 1, limit_ms - ms) == 1 && read (fd, buf, sizeof buf) <= 0)
      return ms;
  }
}

/* The setup deadline (control_config.handshake_timeout_ms): a client that
 * sends nothing, one stalled in its handshake and a refused plain client
 * are closed at the deadline, with a warning each, which frees their
 * connection slots; a client that finished its handshake may idle.
 */
Test (tls, setup_deadline_closes_clients_that_never_set_up)
{
  static const unsigned char hello[] = { 0x16, 0x03, 0x01, 0x01, 0x2c, 0x01 };
  static const char plain[] = "{\"jsonrpc\":\"2.0\",\"id\":1,"
                              "\"method\":\"test.ping\"}\n";
  struct tls_ctx *sc = psk_ctx (KEY_A, true, NULL);
  struct tls_ctx *cc = psk_ctx (KEY_A, false, NULL);
  struct control_server *srv;
  struct control_client *held;
  json_t *res = NULL;
  int silent, stalled, refused, before;
  unsigned port;

  /* Four slots: one set-up TLS client and three that never set up. */
  srv = start_server_max (TLS_REQUIRE, sc, &port, 4, 400);
  cr_assert_eq (control_client_connect_tcp ("127.0.0.1", port, cc, 10000,
                                            &held), 0, "%s", cairn_errmsg ());
  before = atomic_load (&warnings);
  silent = raw_connect (port, NULL, 0);
  stalled = raw_connect (port, hello, sizeof hello);
  refused = raw_connect (port, plain, sizeof plain - 1);
  usleep (100 * 1000);
  /* Full: a fifth client is turned away. */
  cr_expect_eq (call_ping (port, cc), -EBUSY, "%s", cairn_errmsg ());
  {
    int t1 = ms_until_closed (silent, 3000);
    int t2 = ms_until_closed (stalled, 3000);
    int t3 = ms_until_closed (refused, 3000);

    fprintf (stderr, "closed after %d, %d, %d ms (deadline 400 ms)\n", t1,
             t2, t3);
    cr_expect (t1 >= 0 && t2 >= 0 && t3 >= 0, "every one is closed");
    cr_expect (t1 < 1500 && t2 < 1500 && t3 < 1500, "at the deadline");
  }
  cr_expect_geq (atomic_load (&warnings) - before, 4,
                 "a warning for each of the three (and the refusal)");
  /* Their slots are free again, and the TLS client, idle for more than
   * twice the deadline now, still works.
   */
  usleep (500 * 1000);
  cr_expect_eq (call_ping (port, cc), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_client_call (held, "test.ping", NULL, &res), 0,
                "%s", cairn_errmsg ());
  cr_expect_str_eq (json_string_value (res), "pong");
  json_decref (res);
  close (silent);
  close (stalled);
  close (refused);
  control_client_close (held);
  control_server_stop (srv);
  tls_ctx_free (cc);
  tls_ctx_free (sc);
}
