/* Cairn control client: a blocking client with deadlines (see
 * control-client.h).  The socket is non-blocking and every wait is a
 * poll() bounded by the call's deadline, so a hung server costs the user
 * the timeout, never a hang.
 *
 * A call may also have no deadline (a long method takes as long as it
 * takes) and a liveness interval instead: after each interval without a
 * byte from the server, the client asks server.version on a second
 * connection, which the server answers on its event loop whatever its
 * workers are doing.  A server that died closes the connection (an
 * immediate error); one that is hung or stopped fails the check, and the
 * call fails after at most two intervals.
 */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control-client.h"
#include "rpc.h"

struct control_client {
  int fd;
  char *path;
  int timeout_ms;
  int liveness_ms;              /* 0: no liveness checks */
  bool broken;                  /* a call failed mid-way: reconnect */
  json_int_t next_id;
  struct control_lines lines;
  int last_code;
  char last_name[32];
  control_client_notify_fn notify;
  void *notify_opaque;
};

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The deadline for timeout_ms from now (-1: none). */
static int64_t
deadline_after (int timeout_ms)
{
  return timeout_ms < 0 ? -1 : now_ms () + timeout_ms;
}

/* Wait until fd is ready for events or the deadline passes: 0 or
 * -ETIMEDOUT.
 */
static int
wait_fd (int fd, short events, int64_t deadline)
{
  struct pollfd pfd = { .fd = fd, .events = events };
  int r, wait;

  for (;;) {
    wait = -1;
    if (deadline >= 0) {
      int64_t left = deadline - now_ms ();

      if (left <= 0)
        return -ETIMEDOUT;
      wait = (int) MIN (left, (int64_t) 1000000);
    }
    r = poll (&pfd, 1, wait);
    if (r > 0)
      return 0;
    if (r == -1 && errno != EINTR)
      return -errno;
  }
}

/* Explain a failed connect to the user. */
static int
connect_error (const char *path, int err)
{
  if (err == ENOENT || err == ECONNREFUSED)
    return cairn_fail (-err, "no Cairn server at %s (%s): start it with: "
                       "cairnd --pool POOL --control %s", path,
                       strerror (err), path);
  if (err == EACCES || err == EPERM)
    return cairn_fail (-err, "permission denied on the control socket %s: "
                       "it is mode 0660, so run as its owner or as a member "
                       "of its group", path);
  if (err == ETIMEDOUT)
    return cairn_fail (-err, "the Cairn server at %s does not accept "
                       "connections (timed out): it may be overloaded or "
                       "hung", path);
  return cairn_fail (-err, "cannot connect to the Cairn server at %s: %s",
                     path, strerror (err));
}

/* Connect with a deadline. */
static int
connect_socket (int fd, const char *path, int64_t deadline)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  socklen_t errlen;
  int err;

  memcpy (sa.sun_path, path, strlen (path) + 1);
  for (;;) {
    if (connect (fd, (struct sockaddr *) &sa, sizeof sa) == 0)
      return 0;
    err = errno;
    if (err == EINTR)
      continue;
    if (err == EAGAIN) {
      /* The server's backlog is full: retry until the deadline. */
      struct timespec ts = { .tv_nsec = 10 * 1000000 };

      if (deadline >= 0 && now_ms () >= deadline)
        return -ETIMEDOUT;
      nanosleep (&ts, NULL);
      continue;
    }
    if (err != EINPROGRESS)
      return -err;
    err = -wait_fd (fd, POLLOUT, deadline);
    if (err)
      return -err;
    errlen = sizeof err;
    if (getsockopt (fd, SOL_SOCKET, SO_ERROR, &err, &errlen) == -1)
      return -errno;
    return -err;
  }
}

/* Connect to a server. */
int
control_client_connect (const char *path, int timeout_ms,
                        struct control_client **out)
{
  struct sockaddr_un sa;
  struct control_client *c;
  int r;

  if (strlen (path) >= sizeof sa.sun_path)
    return cairn_fail (-ENAMETOOLONG, "control socket %s: the path is "
                       "longer than %zu bytes", path, sizeof sa.sun_path - 1);
  c = calloc (1, sizeof *c);
  if (c == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  c->fd = -1;
  c->path = strdup (path);
  if (c->path)
    c->fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (c->path == NULL || c->fd == -1) {
    r = c->path ? cairn_fail (-errno, "socket: %s", strerror (errno))
                : cairn_fail (-ENOMEM, "out of memory");
    goto fail;
  }
  c->timeout_ms = timeout_ms;
  c->next_id = 1;
  control_lines_init (&c->lines, CONTROL_CLIENT_MAX_REPLY);
  r = connect_socket (c->fd, path, deadline_after (timeout_ms));
  if (r < 0) {
    r = connect_error (path, -r);
    goto fail;
  }
  *out = c;
  return 0;

 fail:
  if (c->fd >= 0)
    close (c->fd);
  free (c->path);
  free (c);
  return r;
}

/* Send all of buf before the deadline. */
static int
send_all (struct control_client *c, const char *buf, size_t len,
          int64_t deadline)
{
  while (len > 0) {
    ssize_t n = send (c->fd, buf, len, MSG_NOSIGNAL);
    int r;

    if (n >= 0) {
      buf += n;
      len -= (size_t) n;
      continue;
    }
    if (errno == EINTR)
      continue;
    if (errno != EAGAIN)
      return cairn_fail (-errno, "sending to the Cairn server at %s: %s",
                         c->path, strerror (errno));
    r = wait_fd (c->fd, POLLOUT, deadline);
    if (r == -ETIMEDOUT)
      return cairn_fail (r, "the Cairn server at %s did not take the "
                         "request within %d ms", c->path, c->timeout_ms);
    if (r < 0)
      return cairn_fail (r, "poll: %s", strerror (-r));
  }
  return 0;
}

/* Check that the server still answers, on a second connection. */
static int
check_alive (struct control_client *c)
{
  struct control_client *probe;
  json_t *res = NULL;
  char why[512];
  int r = control_client_connect (c->path, c->liveness_ms, &probe);

  if (r == 0) {
    r = control_client_call (probe, "server.version", NULL, &res);
    /* Only silence means a hung server: an error reply, or a connection
     * closed at once (too many clients, say), is an answer of its loop.
     */
    if (r != -ETIMEDOUT)
      r = 0;
    json_decref (res);
    control_client_close (probe);
  }
  if (r == 0)
    return 0;
  snprintf (why, sizeof why, "%s", cairn_errmsg ());
  return cairn_fail (-ETIMEDOUT, "the Cairn server at %s stopped answering "
                     "while it worked on the request (%s): it may be hung, "
                     "stopped or overloaded; the request may still take "
                     "effect", c->path, why);
}

/* Wait until the reply's bytes come or the deadline passes, checking after
 * each liveness interval of silence that the server is alive.
 */
static int
wait_reply_bytes (struct control_client *c, int64_t deadline)
{
  for (;;) {
    int64_t until = deadline;
    int r;

    if (c->liveness_ms > 0) {
      int64_t next = now_ms () + c->liveness_ms;

      if (deadline < 0 || next < deadline)
        until = next;
    }
    r = wait_fd (c->fd, POLLIN, until);
    if (r == -ETIMEDOUT && until == deadline)
      return cairn_fail (r, "no reply from the Cairn server at %s within "
                         "%d ms", c->path, c->timeout_ms);
    if (r != -ETIMEDOUT)
      return r;
    r = check_alive (c);
    if (r < 0)
      return r;
  }
}

/* Read the next line before the deadline. */
static int
read_line (struct control_client *c, char **line, size_t *len,
           int64_t deadline)
{
  char buf[64 * 1024];

  for (;;) {
    ssize_t n;
    int r = control_lines_next (&c->lines, line, len);

    if (r == 1)
      return 0;
    if (r < 0)
      return cairn_fail (-EPROTO, "the Cairn server at %s sent a reply "
                         "longer than %d bytes", c->path,
                         CONTROL_CLIENT_MAX_REPLY);
    r = wait_reply_bytes (c, deadline);
    if (r == -ETIMEDOUT)
      return r;
    if (r < 0)
      return cairn_fail (r, "poll: %s", strerror (-r));
    n = recv (c->fd, buf, sizeof buf, 0);
    if (n == 0 || (n == -1 && errno == ECONNRESET))
      return cairn_fail (-ECONNRESET, "the Cairn server at %s closed the "
                         "connection before replying", c->path);
    if (n == -1) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return cairn_fail (-errno, "reading from the Cairn server at %s: %s",
                         c->path, strerror (errno));
    }
    r = control_lines_feed (&c->lines, buf, (size_t) n);
    if (r == -ENOMEM)
      return cairn_fail (r, "out of memory");
    /* -E2BIG comes back from control_lines_next. */
  }
}

/* Wait for the reply to request id; hand notifications to the callback. */
static int
wait_reply (struct control_client *c, json_t *id, json_t **result,
            int64_t deadline)
{
  struct control_reply rep;
  char *line;
  size_t len;
  int r;

  for (;;) {
    r = read_line (c, &line, &len, deadline);
    if (r < 0)
      return r;
    r = control_parse_reply (line, len, &rep);
    if (r < 0) {
      char why[256];

      snprintf (why, sizeof why, "%s", cairn_errmsg ());
      r = cairn_fail (-EPROTO, "the Cairn server at %s sent a bad reply: %s",
                      c->path, why);
      break;
    }
    if (rep.kind == CONTROL_REPLY_NOTIFICATION) {
      if (c->notify)
        c->notify (c->notify_opaque, rep.method, rep.params);
      control_reply_free (&rep);
      continue;
    }
    /* A null id answers a request the server could not read: ours. */
    if (!json_is_null (rep.id) && !json_equal (rep.id, id)) {
      r = cairn_fail (-EPROTO, "the Cairn server at %s answered another "
                      "request than the one sent", c->path);
      break;
    }
    if (rep.kind == CONTROL_REPLY_ERROR) {
      c->last_code = rep.code;
      snprintf (c->last_name, sizeof c->last_name, "%s",
                rep.name ? rep.name : "");
      r = cairn_fail (control_error_errno (rep.code), "%s", rep.message);
      break;
    }
    *result = json_incref (rep.result);
    r = 0;
    break;
  }
  control_reply_free (&rep);
  return r;
}

/* Call a method and wait for the reply. */
int
control_client_call (struct control_client *c, const char *method,
                     json_t *params, json_t **result)
{
  int64_t deadline = deadline_after (c->timeout_ms);
  json_t *id;
  char *line;
  size_t len;
  int r;

  c->last_code = 0;
  c->last_name[0] = '\0';
  if (c->broken)
    return cairn_fail (-EPIPE, "the connection to the Cairn server at %s "
                       "failed earlier: reconnect", c->path);
  id = json_integer (c->next_id++);
  line = id ? control_format_request (id, method, params, &len) : NULL;
  if (line == NULL) {
    json_decref (id);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  r = send_all (c, line, len, deadline);
  free (line);
  if (r == 0)
    r = wait_reply (c, id, result, deadline);
  json_decref (id);
  /* Only an error reply leaves the connection in a known state. */
  if (r < 0 && c->last_code == 0)
    c->broken = true;
  return r;
}

/* Set the bound of later calls and the liveness interval. */
void
control_client_set_timeout (struct control_client *c, int timeout_ms,
                            int liveness_ms)
{
  c->timeout_ms = timeout_ms;
  c->liveness_ms = liveness_ms > 0 ? liveness_ms : 0;
}

/* The last error reply's code. */
int
control_client_error_code (const struct control_client *c)
{
  return c->last_code;
}

/* The last error reply's name. */
const char *
control_client_error_name (const struct control_client *c)
{
  return c->last_name;
}

/* Set the notification callback. */
void
control_client_set_notify (struct control_client *c,
                           control_client_notify_fn fn, void *opaque)
{
  c->notify = fn;
  c->notify_opaque = opaque;
}

/* Close and free. */
void
control_client_close (struct control_client *c)
{
  if (c == NULL)
    return;
  close (c->fd);
  control_lines_free (&c->lines);
  free (c->path);
  free (c);
}
