/* Unit tests for the control server (server/) and its client
 * (net/control-client.c): a real server on a Unix socket in a temporary
 * directory, real socket clients.
 *
 * Covered: the built-in methods; 20 concurrent clients; blocking methods
 * running in parallel on the threadpool; pipelined requests answered in
 * order; half messages, half-closed and vanished clients; a client that
 * floods requests and never reads (dropped, while others are served);
 * every malformed input class, each answered with its code on a
 * connection that keeps working; an oversized line (error, then close);
 * the connection limit; socket mode and group; a second server on a live
 * socket; stale sockets; stop cancelling a running request and removing the
 * socket; TCP; method tables added by other modules; the in-process path.
 */
#include <config.h>

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "rpc.h"
#include "control.h"
#include "control-client.h"

#define TIMEOUT_MS 5000
#define VERSION_REQ \
  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.version\"}\n"

/* ------------------------------------------------------------ fixture */

static char tmpdir[64];
static char sock_path[128];
static struct control_server *srv;

/* Log lines from the server, for tests that check what it said. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];

/* Collect a server log line. */
static void
test_log (void *opaque, const char *msg)
{
  pthread_mutex_lock (&log_lock);
  strncat (log_text, msg, sizeof log_text - strlen (log_text) - 2);
  strcat (log_text, "\n");
  pthread_mutex_unlock (&log_lock);
  fprintf (stderr, "server: %s\n", msg);
}

/* True if the server logged something containing s. */
static bool
logged (const char *s)
{
  bool r;

  pthread_mutex_lock (&log_lock);
  r = strstr (log_text, s) != NULL;
  pthread_mutex_unlock (&log_lock);
  return r;
}

/* A config for the socket in the test directory. */
static struct control_config
test_config (void)
{
  struct control_config cfg = {
    .unix_path = sock_path,
    .log = test_log,
  };
  return cfg;
}

/* Make the test directory (no server). */
static void
make_dir (void)
{
  strcpy (tmpdir, "/tmp/cairn-ctl.XXXXXX");
  cr_assert_not_null (mkdtemp (tmpdir));
  snprintf (sock_path, sizeof sock_path, "%s/control.sock", tmpdir);
}

/* Remove the test directory: it must be empty again.  (Criterion ignores
 * failed assertions in .fini, so a failure here crashes the test instead.)
 */
static void
remove_dir (void)
{
  if (rmdir (tmpdir) == -1) {
    fprintf (stderr, "rmdir %s: %s (files left behind)\n", tmpdir,
             strerror (errno));
    abort ();
  }
}

/* Make the directory and start a default server. */
static void
setup (void)
{
  struct control_config cfg = test_config ();

  make_dir ();
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "start: %s",
                cairn_errmsg ());
}

/* Stop the server and remove the directory, which the socket must have
 * left.
 */
static void
teardown (void)
{
  control_server_stop (srv);
  srv = NULL;
  remove_dir ();
}

/* ------------------------------------------------------------ helpers */

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep for ms milliseconds. */
static void
sleep_ms (int ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

  nanosleep (&ts, NULL);
}

/* Connect a client to the test server. */
static struct control_client *
client (void)
{
  struct control_client *c;

  cr_assert_eq (control_client_connect (sock_path, TIMEOUT_MS, &c), 0,
                "connect: %s", cairn_errmsg ());
  return c;
}

/* Call server.version and check it. */
static void
check_version (struct control_client *c)
{
  json_t *res;

  cr_assert_eq (control_client_call (c, "server.version", NULL, &res), 0,
                "server.version: %s", cairn_errmsg ());
  cr_assert_str_eq (json_string_value (json_object_get (res, "version")),
                    PACKAGE_VERSION);
  cr_assert_eq (json_integer_value (json_object_get (res, "protocol")), 1);
  json_decref (res);
}

/* A fresh client calls server.version. */
static void
check_server_alive (void)
{
  struct control_client *c = client ();

  check_version (c);
  control_client_close (c);
}

/* Wait until a new client is served server.version again, 10 s at most:
 * a closed client's place is free once the loop thread has seen the
 * close, which a loaded machine delays by any time at all.
 */
static void
wait_server_serves_a_new_client (void)
{
  int64_t deadline = now_ms () + 10000;
  int r;

  do {
    struct control_client *c;
    json_t *res = NULL;

    r = control_client_connect (sock_path, TIMEOUT_MS, &c);
    if (r == 0) {
      r = control_client_call (c, "server.version", NULL, &res);
      json_decref (res);
      control_client_close (c);
    }
    if (r < 0)
      sleep_ms (10);
  } while (r < 0 && now_ms () < deadline);
  cr_assert_eq (r, 0, "a new client is not served after 10 s: %s",
                cairn_errmsg ());
}

/* A raw socket client: exact bytes in, lines out. */
struct raw {
  int fd;
  struct control_lines lines;
};

/* Set a socket's receive and send timeouts, so a bug cannot hang a test. */
static void
set_timeouts (int fd, int ms)
{
  struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

  setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* Connect a raw client to a Unix socket path. */
static void
raw_connect (struct raw *rc, const char *path)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };

  rc->fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq (rc->fd, 0);
  strcpy (sa.sun_path, path);
  cr_assert_eq (connect (rc->fd, (struct sockaddr *) &sa, sizeof sa), 0,
                "connect %s: %s", path, strerror (errno));
  set_timeouts (rc->fd, TIMEOUT_MS);
  control_lines_init (&rc->lines, 64 * 1024 * 1024);
}

/* Close a raw client. */
static void
raw_close (struct raw *rc)
{
  if (rc->fd >= 0)
    close (rc->fd);
  rc->fd = -1;
  control_lines_free (&rc->lines);
}

/* Send bytes: 0 or -errno (never SIGPIPE). */
static int
raw_send_n (struct raw *rc, const char *s, size_t len)
{
  while (len > 0) {
    ssize_t n = send (rc->fd, s, len, MSG_NOSIGNAL);

    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    s += n;
    len -= (size_t) n;
  }
  return 0;
}

/* Send a string, which must go through. */
static void
raw_send (struct raw *rc, const char *s)
{
  cr_assert_eq (raw_send_n (rc, s, strlen (s)), 0, "send: %s",
                strerror (errno));
}

/* Read one line: 1 with the line, 0 at end of stream, -errno. */
static int
raw_read_line (struct raw *rc, char **line, size_t *len)
{
  char buf[65536];

  for (;;) {
    ssize_t n;
    int r = control_lines_next (&rc->lines, line, len);

    if (r != 0)
      return r;
    n = recv (rc->fd, buf, sizeof buf, 0);
    if (n == 0)
      return 0;
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -errno;
    }
    cr_assert_eq (control_lines_feed (&rc->lines, buf, (size_t) n), 0);
  }
}

/* Read the next reply, which must parse. */
static void
raw_reply (struct raw *rc, struct control_reply *rep)
{
  char *line;
  size_t len;
  int r = raw_read_line (rc, &line, &len);

  cr_assert_eq (r, 1, "expected a reply, got %d (%s)", r,
                r < 0 ? strerror (-r) : "end of stream");
  cr_assert_eq (control_parse_reply (line, len, rep), 0, "bad reply %s: %s",
                line, cairn_errmsg ());
}

/* The next reply must be an error with code and (if id >= 0) that id. */
static void
raw_expect_error (struct raw *rc, int code, int64_t id, const char *why)
{
  struct control_reply rep;

  raw_reply (rc, &rep);
  cr_assert_eq (rep.kind, CONTROL_REPLY_ERROR, "%s: not an error", why);
  cr_assert_eq (rep.code, code, "%s: code %d, expected %d (%s)", why,
                rep.code, code, rep.message);
  cr_assert_str_eq (rep.name, control_error_name (code), "%s", why);
  if (id >= 0)
    cr_assert_eq (json_integer_value (rep.id), id, "%s: wrong id", why);
  else
    cr_assert (json_is_null (rep.id), "%s: id should be null", why);
  control_reply_free (&rep);
}

/* The next reply must be a result with this id. */
static void
raw_expect_result (struct raw *rc, int64_t id, const char *why)
{
  struct control_reply rep;

  raw_reply (rc, &rep);
  cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT, "%s: %s", why,
                rep.kind == CONTROL_REPLY_ERROR ? rep.message : "");
  cr_assert_eq (json_integer_value (rep.id), id, "%s: wrong id", why);
  control_reply_free (&rep);
}

/* The server must have closed the connection (after what was read). */
static void
raw_expect_closed (struct raw *rc, const char *why)
{
  char *line;
  size_t len;
  int r = raw_read_line (rc, &line, &len);

  /* A close with our bytes unread is ECONNRESET on Unix sockets. */
  cr_assert (r == 0 || r == -ECONNRESET, "%s: connection still open (%d)",
             why, r);
}

/* ------------------------------------------------------------ methods */

TestSuite (server, .init = setup, .fini = teardown, .timeout = 30);

Test (server, version)
{
  struct control_client *c = client ();

  check_version (c);
  check_version (c);
  control_client_close (c);
}

Test (server, methods_lists_builtins)
{
  struct control_client *c = client ();
  json_t *res, *names;
  bool seen[3] = { false };
  const char *want[3] = { "server.methods", "server.ping", "server.version" };

  cr_assert_eq (control_client_call (c, "server.methods", NULL, &res), 0);
  names = json_object_get (res, "methods");
  cr_assert (json_is_array (names));
  for (size_t i = 0; i < json_array_size (names); i++)
    for (size_t j = 0; j < 3; j++)
      if (strcmp (json_string_value (json_array_get (names, i)), want[j]) == 0)
        seen[j] = true;
  for (size_t j = 0; j < 3; j++)
    cr_assert (seen[j], "%s not listed", want[j]);
  json_decref (res);
  control_client_close (c);
}

Test (server, ping_echoes_params)
{
  struct control_client *c = client ();
  json_t *params = json_pack ("{s:s, s:[i,b,n]}", "hello", "wörld",
                              "list", 1, 1);
  json_t *arr = json_pack ("[i,s]", 5, "x");
  json_t *res;

  cr_assert_eq (control_client_call (c, "server.ping", params, &res), 0);
  cr_assert (json_equal (res, params));
  json_decref (res);
  cr_assert_eq (control_client_call (c, "server.ping", arr, &res), 0);
  cr_assert (json_equal (res, arr));
  json_decref (res);
  cr_assert_eq (control_client_call (c, "server.ping", NULL, &res), 0);
  cr_assert (json_is_object (res) && json_object_size (res) == 0);
  json_decref (res);
  json_decref (params);
  json_decref (arr);
  control_client_close (c);
}

Test (server, ping_delay_is_checked)
{
  struct control_client *c = client ();
  const char *bad[] = { "{\"delay_ms\":-1}", "{\"delay_ms\":10001}",
                        "{\"delay_ms\":\"5\"}", "{\"delay_ms\":1.5}" };
  json_t *res;

  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    json_t *params = json_loads (bad[i], 0, NULL);

    cr_assert_eq (control_client_call (c, "server.ping", params, &res),
                  -EINVAL, "%s was accepted", bad[i]);
    cr_assert_eq (control_client_error_code (c), CONTROL_E_INVALID_PARAMS);
    cr_assert_str_eq (control_client_error_name (c), "invalid-params");
    cr_assert (strstr (cairn_errmsg (), "delay_ms"), "%s", cairn_errmsg ());
    json_decref (params);
  }
  /* An error reply leaves the connection usable. */
  check_version (c);
  control_client_close (c);
}

Test (server, unknown_method)
{
  struct control_client *c = client ();
  json_t *res;

  cr_assert_eq (control_client_call (c, "volume.frobnicate", NULL, &res),
                -ENOSYS);
  cr_assert_eq (control_client_error_code (c), CONTROL_E_METHOD_NOT_FOUND);
  cr_assert (strstr (cairn_errmsg (), "volume.frobnicate"));
  cr_assert (strstr (cairn_errmsg (), "server.methods"));
  control_client_close (c);
}

/* ------------------------------------------------------------ concurrency */

/* One of many clients: 50 pings with its own payload. */
static void *
busy_client (void *arg)
{
  intptr_t n = (intptr_t) arg;
  struct control_client *c;
  intptr_t bad = 0;

  if (control_client_connect (sock_path, TIMEOUT_MS, &c) < 0)
    return (void *) 1000;
  for (int i = 0; i < 50; i++) {
    json_t *params = json_pack ("{s:i, s:i}", "client", (int) n, "i", i);
    json_t *res;

    if (control_client_call (c, "server.ping", params, &res) < 0)
      bad++;
    else {
      if (!json_equal (res, params))
        bad++;
      json_decref (res);
    }
    json_decref (params);
  }
  control_client_close (c);
  return (void *) bad;
}

Test (server, twenty_concurrent_clients)
{
  pthread_t t[20];

  for (intptr_t i = 0; i < 20; i++)
    cr_assert_eq (pthread_create (&t[i], NULL, busy_client, (void *) i), 0);
  for (int i = 0; i < 20; i++) {
    void *bad;

    pthread_join (t[i], &bad);
    cr_assert_eq ((intptr_t) bad, 0, "client %d had %zd failures", i,
                  (intptr_t) bad);
  }
}

/* A client that pings with a 400 ms delay. */
static void *
slow_client (void *arg)
{
  struct control_client *c;
  json_t *params = json_pack ("{s:i}", "delay_ms", 400);
  json_t *res = NULL;
  intptr_t r;

  if (control_client_connect (sock_path, TIMEOUT_MS, &c) < 0)
    return (void *) -1;
  r = control_client_call (c, "server.ping", params, &res);
  json_decref (res);
  json_decref (params);
  control_client_close (c);
  return (void *) r;
}

Test (server, blocking_requests_run_in_parallel)
{
  pthread_t t[4];
  int64_t start = now_ms (), took;

  for (int i = 0; i < 4; i++)
    cr_assert_eq (pthread_create (&t[i], NULL, slow_client, NULL), 0);
  /* Meanwhile the loop thread answers at once. */
  sleep_ms (100);
  {
    int64_t t0 = now_ms ();

    check_server_alive ();
    cr_assert_lt (now_ms () - t0, 300, "the loop was blocked");
  }
  for (int i = 0; i < 4; i++) {
    void *r;

    pthread_join (t[i], &r);
    cr_assert_eq ((intptr_t) r, 0);
  }
  took = now_ms () - start;
  /* One after the other would take 1600 ms. */
  cr_assert_geq (took, 400);
  cr_assert_lt (took, 1200, "4 delayed pings took %" PRId64 " ms", took);
}

Test (server, pipelined_requests_answered_in_order)
{
  struct raw rc;

  raw_connect (&rc, sock_path);
  raw_send (&rc,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.ping\","
            "\"params\":{\"delay_ms\":150}}\n"
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server.version\"}\n"
            "\n"
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server.ping\"}\n");
  raw_expect_result (&rc, 1, "first");
  raw_expect_result (&rc, 2, "second");
  raw_expect_result (&rc, 3, "third");
  raw_close (&rc);
}

/* ------------------------------------------------------------ bad clients */

Test (server, half_message_then_disconnect)
{
  struct raw rc;

  raw_connect (&rc, sock_path);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":1,\"meth");
  raw_close (&rc);
  check_server_alive ();
}

Test (server, half_close_is_still_answered)
{
  struct raw rc;

  /* A request, then end of input (as `socat` or `nc -N` do). */
  raw_connect (&rc, sock_path);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"server.ping\","
            "\"params\":{\"delay_ms\":50}}\n");
  shutdown (rc.fd, SHUT_WR);
  raw_expect_result (&rc, 5, "after half-close");
  raw_expect_closed (&rc, "after the last reply");
  raw_close (&rc);

  /* Half a message, then end of input: it is answered as a bad line. */
  raw_connect (&rc, sock_path);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":1,\"meth");
  shutdown (rc.fd, SHUT_WR);
  raw_expect_error (&rc, CONTROL_E_PARSE, -1, "truncated at EOF");
  raw_expect_closed (&rc, "after the error");
  raw_close (&rc);
}

Test (server, disconnect_during_delayed_ping)
{
  struct raw rc;

  for (int i = 0; i < 3; i++) {
    raw_connect (&rc, sock_path);
    raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.ping\","
              "\"params\":{\"delay_ms\":300}}\n"
              "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"server.ping\"}\n");
    raw_close (&rc);
  }
  check_server_alive ();
  /* The replies are written to closed sockets, then dropped. */
  sleep_ms (500);
  check_server_alive ();
}

/* A client (connected by the test thread: no assertions in threads) that
 * sends big pings and never reads.  Returns the errno that ended it: the
 * server must close it.
 */
static void *
flood_client (void *arg)
{
  struct raw *rc = arg;
  size_t pad = 64 * 1024;
  char *req = malloc (pad + 200);
  int64_t deadline = now_ms () + 15000;
  intptr_t r = 0;
  int n;

  if (req == NULL)
    return (void *) -ENOMEM;
  n = sprintf (req, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.ping\","
               "\"params\":{\"pad\":\"");
  memset (req + n, 'p', pad);
  strcpy (req + n + pad, "\"}}\n");
  while (r == 0 && now_ms () < deadline) {
    r = raw_send_n (rc, req, strlen (req));
    if (r == -EAGAIN || r == -EWOULDBLOCK)
      r = 0;  /* the send timeout: the server is not reading; go on */
  }
  free (req);
  return (void *) r;
}

Test (server, flooding_client_that_never_reads)
{
  pthread_t t;
  void *r;
  struct raw flood;
  struct control_client *c = client ();

  raw_connect (&flood, sock_path);
  cr_assert_eq (pthread_create (&t, NULL, flood_client, &flood), 0);
  /* Others are answered quickly all along. */
  for (int i = 0; i < 20; i++) {
    int64_t t0 = now_ms ();
    struct control_client *c2 = client ();

    check_version (c);
    check_version (c2);
    control_client_close (c2);
    cr_assert_lt (now_ms () - t0, 2000, "slow answer during the flood");
    sleep_ms (50);
  }
  pthread_join (t, &r);
  raw_close (&flood);
  cr_assert ((intptr_t) r == -EPIPE || (intptr_t) r == -ECONNRESET,
             "the flooding client was not disconnected (%zd)", (intptr_t) r);
  cr_assert (logged ("unread"), "the server did not log why it closed it");
  check_version (c);
  control_client_close (c);
}

Test (server, malformed_inputs_get_their_codes)
{
  static const struct {
    const char *line;
    int code;
    int id;                     /* -1: null */
  } cases[] = {
    { "this is not json", CONTROL_E_PARSE, -1 },
    { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.version\"",
      CONTROL_E_PARSE, -1 },
    { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xc3\x28\"}",
      CONTROL_E_PARSE, -1 },
    { "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.version\"}]",
      CONTROL_E_INVALID_REQUEST, -1 },
    { "17", CONTROL_E_INVALID_REQUEST, -1 },
    { "{\"jsonrpc\":\"1.0\",\"id\":2,\"method\":\"server.version\"}",
      CONTROL_E_INVALID_REQUEST, 2 },
    { "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":42}",
      CONTROL_E_INVALID_REQUEST, 3 },
    { "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"server.ping\","
      "\"params\":\"x\"}", CONTROL_E_INVALID_REQUEST, 4 },
    { "{\"jsonrpc\":\"2.0\",\"id\":[],\"method\":\"server.version\"}",
      CONTROL_E_INVALID_REQUEST, -1 },
    { "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"no.such\"}",
      CONTROL_E_METHOD_NOT_FOUND, 5 },
    { "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"server.ping\","
      "\"params\":{\"delay_ms\":\"x\"}}", CONTROL_E_INVALID_PARAMS, 6 },
  };
  struct raw rc;
  char line[512];

  raw_connect (&rc, sock_path);
  for (size_t i = 0; i < ARRAY_SIZE (cases); i++) {
    snprintf (line, sizeof line, "%s\n", cases[i].line);
    raw_send (&rc, line);
    raw_expect_error (&rc, cases[i].code, cases[i].id, cases[i].line);
  }
  /* Notifications and blank lines get no reply, even for unknown methods:
   * the next reply is the next request's.
   */
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"method\":\"server.version\"}\n"
            "{\"jsonrpc\":\"2.0\",\"method\":\"no.such\"}\n"
            "   \r\n"
            "{\"jsonrpc\":\"2.0\",\"id\":77,\"method\":\"server.version\"}\n");
  raw_expect_result (&rc, 77, "after notifications");
  raw_close (&rc);
  check_server_alive ();
}

Test (server, oversized_line_gets_error_and_close)
{
  struct raw rc;
  size_t n = CONTROL_MAX_LINE + 4096;
  char *big = malloc (n);

  cr_assert_not_null (big);
  memset (big, 'x', n);
  raw_connect (&rc, sock_path);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.ping\"}\n");
  /* The server may close before taking it all: ignore send errors. */
  (void) raw_send_n (&rc, big, n);
  raw_expect_result (&rc, 1, "the request before the long line");
  raw_expect_error (&rc, CAIRN_E_TOO_LARGE, -1, "long line");
  raw_expect_closed (&rc, "after a long line");
  raw_close (&rc);
  free (big);
  check_server_alive ();
}

Test (server, line_just_under_the_limit_is_served)
{
  struct control_client *c = client ();
  size_t pad = CONTROL_MAX_LINE - 200;
  char *s = malloc (pad + 1);
  json_t *params, *res;

  memset (s, 'q', pad);
  s[pad] = '\0';
  params = json_pack ("{s:s}", "pad", s);
  cr_assert_eq (control_client_call (c, "server.ping", params, &res), 0,
                "%s", cairn_errmsg ());
  cr_assert (json_equal (res, params));
  json_decref (res);
  json_decref (params);
  free (s);
  control_client_close (c);
}

/* ------------------------------------------------------------ the socket */

Test (server, socket_mode_is_0660)
{
  struct stat st;

  cr_assert_eq (stat (sock_path, &st), 0);
  cr_assert (S_ISSOCK (st.st_mode));
  cr_assert_eq (st.st_mode & 07777, 0660, "mode %o", st.st_mode & 07777);
}

Test (server, second_server_on_live_socket_fails)
{
  struct control_config cfg = test_config ();
  struct control_server *srv2 = NULL;
  struct stat st1, st2;

  cr_assert_eq (stat (sock_path, &st1), 0);
  cr_assert_eq (control_server_start (&cfg, &srv2), -EADDRINUSE);
  cr_assert_null (srv2);
  cr_assert (strstr (cairn_errmsg (), "already listening"), "%s",
             cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), sock_path), "%s", cairn_errmsg ());
  /* The first server's socket is untouched and it still serves. */
  cr_assert_eq (stat (sock_path, &st2), 0);
  cr_assert_eq (st1.st_ino, st2.st_ino);
  check_server_alive ();
}

Test (server, stop_removes_the_socket)
{
  struct stat st;

  cr_assert_eq (lstat (sock_path, &st), 0);
  control_server_stop (srv);
  srv = NULL;
  cr_assert_eq (lstat (sock_path, &st), -1, "socket left after stop");
  cr_assert_eq (errno, ENOENT);
}

Test (server, stop_with_idle_clients)
{
  struct raw rc;
  struct control_client *c = client ();
  int64_t t0;

  raw_connect (&rc, sock_path);
  check_version (c);
  t0 = now_ms ();
  control_server_stop (srv);
  srv = NULL;
  cr_assert_lt (now_ms () - t0, 1000);
  raw_expect_closed (&rc, "after stop");
  raw_close (&rc);
  control_client_close (c);
}

Test (server, stop_cancels_a_running_request)
{
  struct raw rc;
  int64_t t0;

  raw_connect (&rc, sock_path);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.ping\","
            "\"params\":{\"delay_ms\":10000}}\n");
  sleep_ms (200);
  t0 = now_ms ();
  control_server_stop (srv);
  srv = NULL;
  cr_assert_lt (now_ms () - t0, 2000, "stop waited for the 10 s ping");
  /* The cancelled request may still get its error reply before the close
   * (it does when the machine is loaded): that reply, then the close.
   */
  {
    char *line;
    size_t len;
    int r = raw_read_line (&rc, &line, &len);

    if (r == 1) {
      struct control_reply rep;

      cr_assert_eq (control_parse_reply (line, len, &rep), 0);
      cr_assert_eq (rep.kind, CONTROL_REPLY_ERROR, "a cancelled ping succeeded");
      cr_assert (rep.code == CAIRN_E_CANCELLED || rep.code == CAIRN_E_SHUTDOWN,
                 "cancelled ping: code %d (%s)", rep.code, rep.message);
      control_reply_free (&rep);
      raw_expect_closed (&rc, "after stop and the cancelled reply");
    }
    else
      cr_assert (r == 0 || r == -ECONNRESET, "after stop: connection still open (%d)", r);
  }
  raw_close (&rc);
}

Test (server_start, too_many_clients, .init = make_dir, .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct raw a, b, extra;

  cfg.max_clients = 2;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  raw_connect (&a, sock_path);
  raw_connect (&b, sock_path);
  raw_send (&a, VERSION_REQ);
  raw_expect_result (&a, 1, "first client");
  raw_send (&b, VERSION_REQ);
  raw_expect_result (&b, 1, "second client");
  raw_connect (&extra, sock_path);
  raw_expect_error (&extra, CAIRN_E_BUSY, -1, "third client");
  raw_expect_closed (&extra, "third client");
  raw_close (&extra);
  raw_close (&a);
  /* A place is free again, once the server has seen the close. */
  wait_server_serves_a_new_client ();
  check_server_alive ();
  raw_close (&b);
  control_server_stop (srv);
}

Test (server_start, stale_socket_is_replaced, .init = make_dir,
      .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  /* A socket file nobody listens on, as a crashed server leaves. */
  strcpy (sa.sun_path, sock_path);
  cr_assert_eq (bind (fd, (struct sockaddr *) &sa, sizeof sa), 0);
  close (fd);
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  check_server_alive ();
  control_server_stop (srv);
  cr_assert_eq (access (sock_path, F_OK), -1);
}

Test (server_start, refuses_a_path_that_is_not_a_socket, .init = make_dir,
      .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct control_server *s = NULL;
  FILE *fp = fopen (sock_path, "w");

  cr_assert_not_null (fp);
  fputs ("precious\n", fp);
  fclose (fp);
  cr_assert_eq (control_server_start (&cfg, &s), -EEXIST);
  cr_assert (strstr (cairn_errmsg (), "not a socket"), "%s", cairn_errmsg ());
  cr_assert_eq (access (sock_path, F_OK), 0, "the file was removed");
  unlink (sock_path);
}

Test (server_start, socket_group, .init = make_dir, .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct group *g = getgrgid (getegid ());
  struct stat st;

  if (g == NULL)
    cr_skip_test ("our group has no name");
  cfg.unix_group = g->gr_name;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  cr_assert_eq (stat (sock_path, &st), 0);
  cr_assert_eq (st.st_gid, getegid ());
  cr_assert_eq (st.st_mode & 07777, 0660);
  control_server_stop (srv);

  cfg.unix_group = "cairn-no-such-group";
  cr_assert_eq (control_server_start (&cfg, &srv), -ENOENT);
  cr_assert (strstr (cairn_errmsg (), "cairn-no-such-group"), "%s",
             cairn_errmsg ());
  cr_assert_eq (access (sock_path, F_OK), -1);
}

Test (server_start, bad_paths, .init = make_dir, .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct control_server *s = NULL;
  char longpath[200];

  memset (longpath, 'a', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  cfg.unix_path = longpath;
  cr_assert_eq (control_server_start (&cfg, &s), -ENAMETOOLONG);
  cr_assert (strstr (cairn_errmsg (), "shorter"), "%s", cairn_errmsg ());
  cfg.unix_path = "/nonexistent-dir-for-cairn/control.sock";
  cr_assert_lt (control_server_start (&cfg, &s), 0);
  cfg.unix_path = NULL;
  cr_assert_eq (control_server_start (&cfg, &s), -EINVAL);
  cr_assert_null (s);
}

Test (server_start, tcp_listener, .init = make_dir, .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct sockaddr_in sa = { .sin_family = AF_INET };
  struct raw rc;
  unsigned port;

  /* Plain TCP is refused unless asked for, with what to do. */
  cfg.tcp_address = "127.0.0.1";
  cr_assert_eq (control_server_start (&cfg, &srv), -EPERM);
  cr_assert_null (srv);
  cr_assert_not_null (strstr (cairn_errmsg (), "control-insecure=true"));
  cr_assert_eq (access (sock_path, F_OK), -1);
  cfg.tcp_insecure = true;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  port = control_server_tcp_port (srv);
  cr_assert_neq (port, 0);
  rc.fd = socket (AF_INET, SOCK_STREAM, 0);
  sa.sin_port = htons ((uint16_t) port);
  sa.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  cr_assert_eq (connect (rc.fd, (struct sockaddr *) &sa, sizeof sa), 0);
  set_timeouts (rc.fd, TIMEOUT_MS);
  control_lines_init (&rc.lines, 1 << 20);
  raw_send (&rc, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"server.ping\"}\n");
  raw_expect_result (&rc, 9, "over TCP");
  raw_close (&rc);
  control_server_stop (srv);

  /* Without tcp_address there is no TCP listener. */
  cfg.tcp_address = NULL;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  cr_assert_eq (control_server_tcp_port (srv), 0);
  control_server_stop (srv);

  cfg.tcp_address = "not an address";
  cr_assert_lt (control_server_start (&cfg, &srv), 0);
  cr_assert_eq (access (sock_path, F_OK), -1);
}

/* ------------------------------------------------------------ the client */

Test (client, no_server_says_how_to_start_one, .init = make_dir,
      .fini = remove_dir)
{
  struct control_client *c = NULL;
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  int fd;

  cr_assert_eq (control_client_connect (sock_path, 1000, &c), -ENOENT);
  cr_assert_null (c);
  cr_assert (strstr (cairn_errmsg (), "no Cairn server at"), "%s",
             cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), "cairnd --pool"), "%s", cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), sock_path), "%s", cairn_errmsg ());

  /* A stale socket: refused, same advice. */
  fd = socket (AF_UNIX, SOCK_STREAM, 0);
  strcpy (sa.sun_path, sock_path);
  cr_assert_eq (bind (fd, (struct sockaddr *) &sa, sizeof sa), 0);
  close (fd);
  cr_assert_eq (control_client_connect (sock_path, 1000, &c), -ECONNREFUSED);
  cr_assert (strstr (cairn_errmsg (), "cairnd --pool"), "%s", cairn_errmsg ());
  unlink (sock_path);
}

Test (client, timeout, .init = setup, .fini = teardown)
{
  struct control_client *c;
  json_t *params = json_pack ("{s:i}", "delay_ms", 2000);
  json_t *res;
  int64_t t0;

  cr_assert_eq (control_client_connect (sock_path, 200, &c), 0);
  t0 = now_ms ();
  cr_assert_eq (control_client_call (c, "server.ping", params, &res),
                -ETIMEDOUT);
  cr_assert_lt (now_ms () - t0, 1000);
  cr_assert (strstr (cairn_errmsg (), "no reply"), "%s", cairn_errmsg ());
  /* The connection is in an unknown state now. */
  cr_assert_eq (control_client_call (c, "server.version", NULL, &res), -EPIPE);
  control_client_close (c);
  json_decref (params);
}

/* ------------------------------------------------------------ extensions */

static atomic_bool inline_ran_elsewhere, blocking_ran_elsewhere;
static pthread_t test_thread, inline_thread;

/* Fail the way an engine call does. */
static int
t_fail (struct control_ctx *ctx, json_t *params, json_t **result)
{
  json_t *e = json_object_get (params, "errno");

  return cairn_fail (-(int) json_integer_value (e),
                     "no volume \"tank\": create it with cairn create");
}

/* Record the thread an inline handler runs on. */
static int
t_inline (struct control_ctx *ctx, json_t *params, json_t **result)
{
  inline_thread = pthread_self ();
  atomic_store (&inline_ran_elsewhere,
                !pthread_equal (inline_thread, test_thread));
  *result = json_string (control_ctx_opaque (ctx));
  return 0;
}

/* Check that a blocking handler runs off the loop thread. */
static int
t_blocking (struct control_ctx *ctx, json_t *params, json_t **result)
{
  pthread_t self = pthread_self ();

  atomic_store (&blocking_ran_elsewhere,
                !pthread_equal (self, test_thread) &&
                !pthread_equal (self, inline_thread));
  *result = NULL;
  return 0;
}

static const struct control_method test_methods[] = {
  { .name = "test.fail", .handler = t_fail },
  { .name = "test.inline", .handler = t_inline },
  { .name = "test.blocking", .handler = t_blocking, .blocking = true },
};
static const struct control_method_table test_table = {
  test_methods, ARRAY_SIZE (test_methods)
};

Test (extensions, module_tables, .init = make_dir, .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct control_client *c;
  json_t *res, *params;

  cfg.tables = &test_table;
  cfg.n_tables = 1;
  cfg.opaque = "the-pool";
  test_thread = pthread_self ();
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  c = client ();

  params = json_pack ("{s:i}", "errno", ENOENT);
  cr_assert_eq (control_client_call (c, "test.fail", params, &res), -ENOENT);
  cr_assert_eq (control_client_error_code (c), CAIRN_E_NOT_FOUND);
  cr_assert_str_eq (control_client_error_name (c), "not-found");
  cr_assert_str_eq (cairn_errmsg (),
                    "no volume \"tank\": create it with cairn create");
  json_decref (params);

  /* An errno without a code of its own is an internal error. */
  params = json_pack ("{s:i}", "errno", EXDEV);
  cr_assert_eq (control_client_call (c, "test.fail", params, &res), -EIO);
  cr_assert_eq (control_client_error_code (c), CONTROL_E_INTERNAL);
  json_decref (params);

  cr_assert_eq (control_client_call (c, "test.inline", NULL, &res), 0);
  cr_assert_str_eq (json_string_value (res), "the-pool");
  json_decref (res);
  cr_assert (atomic_load (&inline_ran_elsewhere));
  cr_assert_eq (control_client_call (c, "test.blocking", NULL, &res), 0);
  cr_assert (json_is_null (res));
  json_decref (res);
  cr_assert (atomic_load (&blocking_ran_elsewhere),
             "a blocking method ran on the loop thread");

  cr_assert_eq (control_client_call (c, "server.methods", NULL, &res), 0);
  /* 3 server.*, 3 job.*, grants.reload, audit.list and the 3 of the
   * test table.
   */
  cr_assert_eq (json_array_size (json_object_get (res, "methods")), 11);
  json_decref (res);
  control_client_close (c);
  control_server_stop (srv);
}

Test (extensions, duplicate_names_are_refused, .init = make_dir,
      .fini = remove_dir)
{
  static const struct control_method dup[] = {
    { .name = "server.ping", .handler = t_fail },
  };
  const struct control_method_table tables[] = {
    test_table, { dup, ARRAY_SIZE (dup) },
  };
  struct control_config cfg = test_config ();
  struct control_server *s = NULL;

  cfg.tables = tables;
  cfg.n_tables = 2;
  cr_assert_eq (control_server_start (&cfg, &s), -EEXIST);
  cr_assert (strstr (cairn_errmsg (), "server.ping"), "%s", cairn_errmsg ());
  {
    const struct control_method_table twice[] = { test_table, test_table };

    cfg.tables = twice;
    cfg.n_tables = 2;
    cr_assert_eq (control_server_start (&cfg, &s), -EEXIST);
  }
  cr_assert_eq (access (sock_path, F_OK), -1);
}

/* ------------------------------------------------------------ in-process */

/* Answer a line in-process; returns the parsed reply (or kind -1 if none). */
static void
local_call (const struct control_config *cfg, const char *line,
            struct control_reply *rep, bool expect_reply)
{
  char *reply;
  size_t len;

  cr_assert_eq (control_call_local (cfg, line, strlen (line), &reply, &len),
                0, "%s", cairn_errmsg ());
  if (!expect_reply) {
    cr_assert_null (reply, "a reply to %s: %s", line, reply);
    return;
  }
  cr_assert_not_null (reply, "no reply to %s", line);
  cr_assert_eq (control_parse_reply (reply, len, rep), 0);
  free (reply);
}

Test (local, same_methods_without_a_server)
{
  struct control_config cfg = {
    .tables = &test_table, .n_tables = 1, .opaque = "offline",
  };
  struct control_reply rep;

  local_call (&cfg, VERSION_REQ, &rep, true);
  cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT);
  cr_assert_str_eq (json_string_value (json_object_get (rep.result,
                                                        "version")),
                    PACKAGE_VERSION);
  control_reply_free (&rep);

  local_call (&cfg, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.inline\"}",
              &rep, true);
  cr_assert_str_eq (json_string_value (rep.result), "offline");
  control_reply_free (&rep);

  local_call (&cfg, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"server.ping\","
              "\"params\":{\"delay_ms\":1,\"k\":2}}", &rep, true);
  cr_assert_eq (json_integer_value (json_object_get (rep.result, "k")), 2);
  control_reply_free (&rep);

  local_call (&cfg, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"x.y\"}", &rep,
              true);
  cr_assert_eq (rep.code, CONTROL_E_METHOD_NOT_FOUND);
  control_reply_free (&rep);

  local_call (&cfg, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"test.fail\","
              "\"params\":{\"errno\":17}}", &rep, true);
  cr_assert_eq (rep.code, CAIRN_E_EXISTS);
  cr_assert_str_eq (rep.name, "exists");
  control_reply_free (&rep);

  local_call (&cfg, "{oops", &rep, true);
  cr_assert_eq (rep.code, CONTROL_E_PARSE);
  control_reply_free (&rep);

  local_call (&cfg, "{\"jsonrpc\":\"2.0\",\"method\":\"server.version\"}",
              &rep, false);
  local_call (&cfg, "", &rep, false);
}

/* ------------------------------------------------------------ timeouts */

/* Call server.ping with a delay on c; returns the call's result and the
 * time it took in *msp.
 */
static int
timed_ping (struct control_client *c, int delay_ms, int64_t *msp)
{
  int64_t t0 = now_ms ();
  json_t *res = NULL;
  int r = control_client_call (c, "server.ping",
                               json_pack ("{s:i}", "delay_ms", delay_ms),
                               &res);

  *msp = now_ms () - t0;
  json_decref (res);
  return r;
}

/* No deadline: a call waits for a long method, checking meanwhile that the
 * server is alive (on a second connection).
 */
Test (server, long_call_waits_with_liveness_checks)
{
  struct control_client *c = client ();
  int64_t ms;

  control_client_set_timeout (c, -1, 100);
  cr_assert_eq (timed_ping (c, 1200, &ms), 0, "%s", cairn_errmsg ());
  cr_assert_geq (ms, 1150);           /* clocks in whole ms */
  check_version (c);
  control_client_close (c);
}

/* A deadline still bounds the call, liveness checks or not. */
Test (server, deadline_bounds_a_call)
{
  struct control_client *c = client ();
  int64_t ms;

  control_client_set_timeout (c, 300, 100);
  cr_assert_eq (timed_ping (c, 3000, &ms), -ETIMEDOUT);
  cr_assert_not_null (strstr (cairn_errmsg (), "no reply from the Cairn "
                              "server"), "%s", cairn_errmsg ());
  cr_assert_geq (ms, 300);
  cr_assert_lt (ms, 2000);
  control_client_close (c);
}

/* A server that refuses the check's connection (too many clients) still
 * answered it: the call goes on.
 */
Test (server_start, busy_server_is_alive, .init = make_dir,
      .fini = remove_dir)
{
  struct control_config cfg = test_config ();
  struct control_client *c;
  int64_t ms;

  cfg.max_clients = 1;
  cr_assert_eq (control_server_start (&cfg, &srv), 0, "%s", cairn_errmsg ());
  c = client ();
  control_client_set_timeout (c, -1, 100);
  cr_assert_eq (timed_ping (c, 600, &ms), 0, "%s", cairn_errmsg ());
  control_client_close (c);
  control_server_stop (srv);
}

/* A hung server (here a socket that nobody accepts on: the kernel queues
 * the connections, nothing ever answers) fails a call with no deadline
 * within two liveness intervals, with a message that says so.
 */
Test (server_start, hung_server_fails_the_liveness_check, .init = make_dir,
      .fini = remove_dir)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct control_client *c;
  json_t *res = NULL;
  int64_t t0;
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);

  cr_assert_geq (fd, 0);
  strcpy (sa.sun_path, sock_path);
  cr_assert_eq (bind (fd, (struct sockaddr *) &sa, sizeof sa), 0);
  cr_assert_eq (listen (fd, 8), 0);
  cr_assert_eq (control_client_connect (sock_path, TIMEOUT_MS, &c), 0,
                "%s", cairn_errmsg ());
  control_client_set_timeout (c, -1, 200);
  t0 = now_ms ();
  cr_assert_eq (control_client_call (c, "server.version", NULL, &res),
                -ETIMEDOUT);
  cr_assert_lt (now_ms () - t0, 2000);
  cr_assert_not_null (strstr (cairn_errmsg (), "stopped answering"), "%s",
                      cairn_errmsg ());
  control_client_close (c);
  close (fd);
  unlink (sock_path);
}
