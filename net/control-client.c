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
 *
 * TCP connections and TLS are in control-client-tcp.c; everything here
 * reads and writes through its client_recv and client_send.
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

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "control-client-int.h"

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The deadline for timeout_ms from now (-1: none). */
int64_t
client_deadline_after (int timeout_ms)
{
  return timeout_ms < 0 ? -1 : now_ms () + timeout_ms;
}

/* Waits are cut in slices this long when the client can be cancelled. */
#define CANCEL_SLICE_MS 200

/* Wait until fd is ready for events or the deadline passes: 0 or
 * -ETIMEDOUT, or -ECANCELED (with a message) when c (may be NULL) is
 * cancelled.
 */
int
client_wait_fd (const struct control_client *c, int fd, short events,
         int64_t deadline)
{
  struct pollfd pfd = { .fd = fd, .events = events };
  int r, wait;

  /* TLS may hold the rest of a record already read from the socket. */
  if ((events & POLLIN) && c && c->ssl && SSL_pending (c->ssl) > 0)
    return 0;
  for (;;) {
    wait = -1;
    if (deadline >= 0) {
      int64_t left = deadline - now_ms ();

      if (left <= 0)
        return -ETIMEDOUT;
      wait = (int) MIN (left, (int64_t) 1000000);
    }
    if (c && c->cancelled) {
      if (c->cancelled (c->cancel_opaque))
        return cairn_fail (-ECANCELED, "cancelled while waiting for the "
                           "Cairn server at %s", c->path);
      wait = wait < 0 ? CANCEL_SLICE_MS : MIN (wait, CANCEL_SLICE_MS);
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
int
client_connect_addr (int fd, const struct sockaddr *sa, socklen_t salen,
              int64_t deadline)
{
  socklen_t errlen;
  int err;

  for (;;) {
    if (connect (fd, sa, salen) == 0)
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
    err = -client_wait_fd (NULL, fd, POLLOUT, deadline);
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
  memset (&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  memcpy (sa.sun_path, path, strlen (path) + 1);
  r = client_connect_addr (c->fd, (struct sockaddr *) &sa, sizeof sa,
                    client_deadline_after (timeout_ms));
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
    ssize_t n = client_send (c, buf, len);
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
                         c->path, client_io_why (c));
    r = client_wait_fd (c, c->fd, POLLOUT, deadline);
    if (r == -ECANCELED)
      return r;
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
  int r = c->host ? control_client_connect_tcp (c->host, c->port, c->tls,
                                                c->liveness_ms, &probe)
                 : control_client_connect (c->path, c->liveness_ms, &probe);

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
    r = client_wait_fd (c, c->fd, POLLIN, until);
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
    if (r == -ECANCELED)
      return r;
    if (r == -ETIMEDOUT)
      return r;
    if (r < 0)
      return cairn_fail (r, "poll: %s", strerror (-r));
    n = client_recv (c, buf, sizeof buf);
    if (n == 0 || (n == -1 && errno == ECONNRESET))
      return cairn_fail (-ECONNRESET, "the Cairn server at %s closed the "
                         "connection before replying", c->path);
    if (n == -1) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return cairn_fail (-errno, "reading from the Cairn server at %s: %s",
                         c->path, client_io_why (c));
    }
    r = control_lines_feed (&c->lines, buf, (size_t) n);
    if (r == -ENOMEM)
      return cairn_fail (r, "out of memory");
    /* -E2BIG comes back from control_lines_next. */
  }
}

/* Parse a line from the server into rep. */
static int
parse_line (struct control_client *c, const char *line, size_t len,
            struct control_reply *rep)
{
  int r = control_parse_reply (line, len, rep);

  if (r < 0) {
    char why[256];

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    control_reply_free (rep);
    return cairn_fail (-EPROTO, "the Cairn server at %s sent a bad reply: %s",
                       c->path, why);
  }
  return 0;
}

/* Turn the reply to request id into the call's outcome (freeing rep). */
static int
take_reply (struct control_client *c, struct control_reply *rep, json_t *id,
            json_t **result)
{
  int r;

  /* A null id answers a request the server could not read: ours. */
  if (!json_is_null (rep->id) && !json_equal (rep->id, id))
    r = cairn_fail (-EPROTO, "the Cairn server at %s answered another "
                    "request than the one sent", c->path);
  else if (rep->kind == CONTROL_REPLY_ERROR) {
    c->last_code = rep->code;
    snprintf (c->last_name, sizeof c->last_name, "%s",
              rep->name ? rep->name : "");
    json_decref (c->last_data);
    c->last_data = rep->data ? json_incref (rep->data) : NULL;
    r = cairn_fail (control_error_errno (rep->code), "%s", rep->message);
  }
  else {
    *result = json_incref (rep->result);
    r = 0;
  }
  control_reply_free (rep);
  return r;
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
    if (r == 0)
      r = parse_line (c, line, len, &rep);
    if (r < 0)
      return r;
    if (rep.kind == CONTROL_REPLY_NOTIFICATION) {
      if (c->notify)
        c->notify (c->notify_opaque, rep.method, rep.params);
      control_reply_free (&rep);
      /* A server that reports progress is not hung. */
      if (deadline >= 0)
        deadline = client_deadline_after (c->timeout_ms);
      continue;
    }
    return take_reply (c, &rep, id, result);
  }
}

/* Call a method and wait for the reply. */
int
control_client_call (struct control_client *c, const char *method,
                     json_t *params, json_t **result)
{
  int64_t deadline = client_deadline_after (c->timeout_ms);
  json_t *id;
  char *line;
  size_t len;
  int r;

  c->last_code = 0;
  c->last_name[0] = '\0';
  json_decref (c->last_data);
  c->last_data = NULL;
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

/* Set the cancellation test. */
void
control_client_set_cancel (struct control_client *c,
                           bool (*cancelled) (void *opaque), void *opaque)
{
  c->cancelled = cancelled;
  c->cancel_opaque = opaque;
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
  if (c->ssl) {
    SSL_shutdown (c->ssl);      /* close_notify, if the socket takes it */
    SSL_free (c->ssl);
    ERR_clear_error ();
  }
  close (c->fd);
  free (c->host);
  control_lines_free (&c->lines);
  json_decref (c->last_data);
  json_decref (c->stream_id);
  free (c->rbuf);
  free (c->msg);
  free (c->reply_line);
  free (c->path);
  free (c);
}

/* The data of the last error reply. */
json_t *
control_client_error_data (const struct control_client *c)
{
  return c->last_data;
}

/* ------------------------------------------------------------ stream mode */

#define STREAM_RBUF (256 * 1024)

/* Is this the stream.ready of request id? */
static bool
is_ready (const struct control_reply *rep, json_t *id)
{
  return rep->kind == CONTROL_REPLY_NOTIFICATION &&
         strcmp (rep->method, "stream.ready") == 0 &&
         json_is_object (rep->params) &&
         json_equal (json_object_get (rep->params, "id"), id);
}

int
control_client_stream_start (struct control_client *c, const char *method,
                             json_t *params, json_t **ready, json_t **result)
{
  int64_t deadline = client_deadline_after (c->timeout_ms);
  struct control_reply rep;
  char *line;
  size_t len;
  int r;

  *ready = *result = NULL;
  c->last_code = 0;
  c->last_name[0] = '\0';
  if (c->broken || c->stream_id)
    return cairn_fail (-EPIPE, "the connection to the Cairn server at %s "
                       "cannot start a stream now: reconnect", c->path);
  c->stream_id = json_integer (c->next_id++);
  line = c->stream_id ? control_format_request (c->stream_id, method, params,
                                                &len) : NULL;
  if (line == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  if (c->rbuf == NULL && (c->rbuf = malloc (STREAM_RBUF)) == NULL) {
    free (line);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  memset (&c->frames, 0, sizeof c->frames);
  c->rpos = c->rlen = 0;
  c->replied = false;
  r = send_all (c, line, len, deadline);
  free (line);
  for (; r == 0; ) {
    r = read_line (c, &line, &len, deadline);
    if (r == 0)
      r = parse_line (c, line, len, &rep);
    if (r < 0)
      break;
    if (is_ready (&rep, c->stream_id)) {
      *ready = json_incref (rep.params);
      control_reply_free (&rep);
      return 0;
    }
    if (rep.kind == CONTROL_REPLY_NOTIFICATION) {
      if (c->notify)
        c->notify (c->notify_opaque, rep.method, rep.params);
      control_reply_free (&rep);
      continue;
    }
    /* A reply without a stream: an error, or a dry run. */
    r = take_reply (c, &rep, c->stream_id, result);
    json_decref (c->stream_id);
    c->stream_id = NULL;
    if (r < 0 && c->last_code == 0)
      c->broken = true;
    return r < 0 ? r : 1;
  }
  c->broken = true;
  return r;
}

/* Fill rbuf with what the line reader buffered, else from the socket. */
static int
fill_raw (struct control_client *c, int64_t deadline)
{
  ssize_t n;
  int r;

  c->rpos = 0;
  c->rlen = control_lines_take (&c->lines, c->rbuf, STREAM_RBUF);
  while (c->rlen == 0) {
    r = client_wait_fd (c, c->fd, POLLIN, deadline);
    if (r == -ECANCELED)
      return r;
    if (r == -ETIMEDOUT)
      return cairn_fail (r, "the Cairn server at %s sent nothing for %d ms "
                         "in the middle of the stream", c->path,
                         c->timeout_ms);
    if (r < 0)
      return cairn_fail (r, "poll: %s", strerror (-r));
    n = client_recv (c, c->rbuf, STREAM_RBUF);
    if (n == 0 || (n == -1 && errno == ECONNRESET))
      return cairn_fail (-ECONNRESET, "the Cairn server at %s closed the "
                         "connection in the middle of the stream", c->path);
    if (n == -1 && errno != EINTR && errno != EAGAIN)
      return cairn_fail (-errno, "reading from the Cairn server at %s: %s",
                         c->path, client_io_why (c));
    if (n > 0)
      c->rlen = (size_t) n;
  }
  return 0;
}

/* A whole message frame arrived: hand the notification on. */
static void
message_frame (struct control_client *c)
{
  struct control_reply rep;

  if (parse_line (c, c->msg, c->msg_len, &rep) == 0) {
    if (rep.kind == CONTROL_REPLY_NOTIFICATION && c->notify)
      c->notify (c->notify_opaque, rep.method, rep.params);
    control_reply_free (&rep);
  }
  c->msg_len = 0;
}

int
control_client_stream_read (struct control_client *c, const void **data,
                            size_t *n)
{
  *n = 0;
  if (c->stream_id == NULL || c->broken)
    return cairn_fail (-EPIPE, "no stream is open");
  for (;;) {
    const void *d;
    size_t used, dlen;
    bool last;
    int k, r;

    if (c->rpos == c->rlen) {
      r = fill_raw (c, client_deadline_after (c->timeout_ms));
      if (r < 0) {
        c->broken = true;
        return r;
      }
    }
    k = control_frames_next (&c->frames, c->rbuf + c->rpos, c->rlen - c->rpos,
                             &used, &d, &dlen, &last);
    c->rpos += used;
    if (k < 0) {
      c->broken = true;
      return k;
    }
    if (k == CONTROL_FRAME_DATA) {
      *data = d;
      *n = dlen;
      return 0;
    }
    if (k == CONTROL_FRAME_MSG) {
      char *p = realloc (c->msg, c->msg_len + dlen + 1);

      if (p == NULL) {
        c->broken = true;
        return cairn_fail (-ENOMEM, "out of memory");
      }
      c->msg = p;
      memcpy (c->msg + c->msg_len, d, dlen);
      c->msg_len += dlen;
      if (last)
        message_frame (c);
      continue;
    }
    if (k == CONTROL_FRAME_END) {
      /* What follows is lines again: the reply. */
      r = control_lines_feed (&c->lines, c->rbuf + c->rpos,
                              c->rlen - c->rpos);
      c->rpos = c->rlen = 0;
      if (r == -ENOMEM) {
        c->broken = true;
        return cairn_fail (r, "out of memory");
      }
      return 0;
    }
  }
}

/* Read what the server sent while we stream to it: notifications go to the
 * callback, the final reply is kept (c->replied).  Never blocks.
 */
static int
pump_incoming (struct control_client *c)
{
  char buf[16 * 1024], *line;
  struct control_reply rep;
  size_t len;
  ssize_t n;
  int r;

  for (;;) {
    n = client_recv (c, buf, sizeof buf);
    if (n > 0) {
      if (control_lines_feed (&c->lines, buf, (size_t) n) == -ENOMEM)
        return cairn_fail (-ENOMEM, "out of memory");
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EINTR))
      break;
    if (errno == EAGAIN)
      break;
  }
  while (!c->replied && (r = control_lines_next (&c->lines, &line, &len)) == 1) {
    if (parse_line (c, line, len, &rep) < 0)
      return -EPROTO;
    if (rep.kind == CONTROL_REPLY_NOTIFICATION) {
      if (c->notify)
        c->notify (c->notify_opaque, rep.method, rep.params);
    }
    else {
      c->reply_line = strndup (line, len);
      c->reply_len = len;
      c->replied = c->reply_line != NULL;
    }
    control_reply_free (&rep);
  }
  if (n == 0 && !c->replied)
    return cairn_fail (-ECONNRESET, "the Cairn server at %s closed the "
                       "connection in the middle of the stream", c->path);
  return 0;
}

/* Send stream bytes, reading what the server sends meanwhile (it may
 * reply early, and then reads and drops the rest of the stream up to the
 * end frame, so a frame once begun is always completed): 0 or an error.
 */
static int
send_stream_bytes (struct control_client *c, const void *buf, size_t len)
{
  const char *p = buf;
  int64_t deadline = client_deadline_after (c->timeout_ms);

  while (len > 0) {
    struct pollfd pfd = { .fd = c->fd, .events = POLLIN | POLLOUT };
    ssize_t n;
    int r = client_wait_fd (c, c->fd, POLLIN | POLLOUT, deadline);

    if (r == -ECANCELED)
      return r;
    if (r == -ETIMEDOUT)
      return cairn_fail (-ETIMEDOUT, "the Cairn server at %s took no stream "
                         "bytes for %d ms", c->path, c->timeout_ms);
    r = poll (&pfd, 1, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return cairn_fail (-errno, "poll: %s", strerror (errno));
    }
    if (c->ssl && SSL_pending (c->ssl) > 0)
      pfd.revents |= POLLIN;
    if (!c->replied && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
      r = pump_incoming (c);
      if (r < 0 && !c->replied)
        return r;
    }
    if (!(pfd.revents & POLLOUT))
      continue;
    n = client_send (c, p, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      r = -errno;
      if (!c->replied && pump_incoming (c) == 0 && c->replied)
        return cairn_fail (r, "the Cairn server at %s stopped reading the "
                           "stream after its reply", c->path);
      errno = -r;
      return cairn_fail (r, "sending the stream to the Cairn server at %s: "
                         "%s", c->path, client_io_why (c));
    }
    p += n;
    len -= (size_t) n;
    deadline = client_deadline_after (c->timeout_ms);
  }
  return 0;
}

int
control_client_stream_write (struct control_client *c, const void *buf,
                             size_t len)
{
  const char *p = buf;

  if (c->stream_id == NULL || c->broken)
    return cairn_fail (-EPIPE, "no stream is open");
  if (c->replied)
    return 1;
  while (len > 0) {
    size_t n = MIN (len, (size_t) CONTROL_FRAME_MAX);
    uint8_t hdr[CONTROL_FRAME_HEADER];
    int r;

    control_frame_header ((uint32_t) n, hdr);
    r = send_stream_bytes (c, hdr, sizeof hdr);
    if (r == 0)
      r = send_stream_bytes (c, p, n);
    if (r < 0) {
      c->broken = true;
      return r;
    }
    if (c->replied)
      return 1;
    p += n;
    len -= n;
  }
  return 0;
}

int
control_client_stream_finish (struct control_client *c, bool send_end,
                              json_t **result)
{
  static const uint8_t end[CONTROL_FRAME_HEADER];
  struct control_reply rep;
  int r = 0;

  *result = NULL;
  if (c->stream_id == NULL)
    return cairn_fail (-EPIPE, "no stream is open");
  if (send_end && !c->broken) {
    r = send_stream_bytes (c, end, sizeof end);
    if (r < 0)
      c->broken = true;
  }
  if (c->replied) {
    r = parse_line (c, c->reply_line, c->reply_len, &rep);
    free (c->reply_line);
    c->reply_line = NULL;
    c->replied = false;
    if (r == 0)
      r = take_reply (c, &rep, c->stream_id, result);
  }
  else if (!c->broken)
    r = wait_reply (c, c->stream_id, result,
                    client_deadline_after (c->timeout_ms));
  else if (r == 0)
    r = cairn_fail (-EPIPE, "the connection to the Cairn server at %s broke "
                    "in the middle of the stream", c->path);
  json_decref (c->stream_id);
  c->stream_id = NULL;
  if (r < 0 && c->last_code == 0)
    c->broken = true;
  return r;
}
