/* Cairn control server: sockets, connections and the loop thread.
 *
 * Handles and their lifetimes (libuv's init → start → close → free in the
 * close callback):
 *
 *   struct control_server   the loop, the listeners and the stop async are
 *                           embedded; freed by control_server_stop after the
 *                           loop thread has run every close callback.
 *   struct conn             one per client; reference counted: one reference
 *                           for the handle (dropped in its close callback)
 *                           and one for a request on the threadpool
 *                           (dropped in the after-work callback).  So a
 *                           client that goes away mid-request leaves a
 *                           closed conn behind until the work is done, and
 *                           the reply is dropped.
 *   struct job              a blocking request on the threadpool, with its
 *                           channel (chan.h) to the worker.
 *   struct chan             worker ⇄ loop messages and stream bytes;
 *                           reference counted on the loop thread: one for
 *                           the job (dropped in the after-work callback),
 *                           one per write of its messages in flight.
 *   struct out              one queued write (uv_write): a reply, or a
 *                           worker's message (then it holds the chan and
 *                           counts against its limit until written).
 *
 * Invariants:
 *
 *  1. A conn is touched only on the loop thread.  A threadpool thread sees
 *     only its request's context (handed over and back by uv_queue_work,
 *     which orders the accesses), the registry (read-only once started)
 *     and the atomic cancel flags.
 *  2. A connection runs at most one request at a time (conn->job), in the
 *     order the lines came, so replies go out in order.
 *  3. A conn buffers at most CONTROL_MAX_LINE bytes of unanswered requests
 *     beyond the line being read: past that it stops reading until its
 *     request finishes.  A line longer than CONTROL_MAX_LINE gets a
 *     "too-large" error and the connection is closed.
 *  4. A conn whose unsent replies exceed max_output when the next reply is
 *     ready is closed: a client that never reads cannot hold server memory.
 *  5. At end of input (the client shut down its side) the remaining
 *     requests are still answered; then the server shuts down its side and
 *     closes.  A client that vanished (on a Unix socket: POLLHUP, see
 *     peer_gone) cancels its running request instead; on TCP it cannot be
 *     told from one that half-closed, so its request runs until a reply or
 *     notification fails to write, and the connection is closed then.  (In
 *     stream mode, end of input before the end frame cuts the stream
 *     short: the receive stops there, see below.)
 *  6. Stream mode (cairn-protocol(7)) is entered only by the worker's
 *     first channel message (stream.ready), so the mode changes in the
 *     order the client sees it; it is left by the end frame (receive) or
 *     when the request finishes (send: the loop writes the end frame after
 *     the worker's last message and before the reply).  Worker output is
 *     bounded by CHAN_OUT_LIMIT (the worker waits); client input by
 *     CHAN_IN_LIMIT (the loop stops reading until the worker has taken it).
 *  7. A receive whose request finished before the client's end frame
 *     (refused mid-stream, cancelled) leaves the conn "discarding": frames
 *     are read and dropped up to the end frame, then lines resume, so the
 *     client can finish its frame and go on.  A frame the codec refuses
 *     closes the connection.
 *  8. A closed conn marks its request's channel gone: a worker blocked on
 *     it wakes and fails (-EPIPE), and what it queued is dropped.
 *  9. TLS (control-tls=, design note in tls.c) sits under all of the
 *     above: a TCP conn's first byte chooses it (conn_sniff); then every
 *     read is decrypted before the line and frame readers see it
 *     (conn_tls_input) and every write encrypted as it is queued
 *     (conn_write), so invariants 1-8 hold for plaintext unchanged.
 * 10. On a port with TLS on or require, a TCP conn has handshake_timeout_ms
 *     from its accept to become a served client: a finished TLS handshake
 *     (conn_tls_input), or a first byte that makes it a plain client the
 *     port serves (conn_sniff).  Until then, including when refused as a
 *     plain client of a require port, it is closed at the deadline with a
 *     log line naming the peer (control_on_setup_timer).  One timer per
 *     server, armed for the earliest deadline, serves every conn.
 *
 * Connection states, with the function behind each transition:
 *
 *   reading ⇄ paused       conn_pump (invariant 3, a request running)
 *   new TCP → TLS/plain    conn_sniff, on the first byte (refused: an
 *                          error reply, input dropped until the client
 *                          closes or the setup deadline)
 *   new TCP → closing      control_on_setup_timer: no TLS session and no
 *                          served plain client by the deadline
 *   reading → eof          conn_eof (EOF, TLS close_notify): answer what
 *                          is buffered
 *   reading → streaming    conn_drain sees stream.ready (smode SEND/RECV)
 *   streaming → reading    the end frame (RECV), job_done (SEND)
 *   streaming → discarding job_done before the end frame (RECV)
 *   discarding → reading   the end frame
 *   any → shutting         conn_shutdown: flush replies, then close
 *   any → closing          conn_close: uv_close, cancel the request
 *   closing → freed        on_conn_close and job_done drop references
 *
 * The server's lifecycle (start, stop, the loop thread) is in
 * control-server.c.  This file holds the connections' lifecycle, reading
 * and writing; control-request.c runs their requests (the threadpool, job
 * threads, the worker's channel and stream mode: invariants 2 and 6-8,
 * conn_dispatch, job_done, conn_drain); control-tls.c holds TLS and the
 * setup deadline (invariants 9 and 10, conn_sniff, conn_tls_input,
 * control_on_setup_timer).  struct conn and struct job are in
 * control-int.h.  No signal handlers: the loop thread is created with
 * every signal blocked, so signals go to the host's (nbdkit's) threads, and
 * writing to a client that has gone returns EPIPE instead of raising
 * SIGPIPE.  (libuv's
 * threadpool threads are created from the loop thread and inherit the mask,
 * unless something else in the process started the pool first.)
 */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <uv.h>

#include "control-int.h"

struct out {
  uv_write_t req;
  struct conn *conn;
  char *data;
  struct chan *chan;               /* a message of a worker's, or NULL */
  size_t len;
};

static void on_alloc (uv_handle_t *handle, size_t size, uv_buf_t *buf);
static void on_read (uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* Tell the host about an event, if it asked to hear. */
void CAIRN_PRINTF (2, 3)
srv_log (struct control_server *srv, const char *fmt, ...)
{
  char msg[512];
  va_list ap;

  if (srv->log == NULL)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  srv->log (srv->opaque, msg);
}

/* Warn the host about a refused or failed client (else log it). */
void CAIRN_PRINTF (2, 3)
srv_warn (struct control_server *srv, const char *fmt, ...)
{
  void (*fn) (void *, const char *) = srv->warn ? srv->warn : srv->log;
  char msg[512];
  va_list ap;

  if (fn == NULL)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  fn (srv->opaque, msg);
}

/* ------------------------------------------------------------ connections */

/* Drop a reference; the last one frees the conn. */
void
conn_unref (struct conn *conn)
{
  if (--conn->refs > 0)
    return;
  control_lines_free (&conn->lines);
  tls_session_free (conn->tls);
  free (conn->pbuf);
  free (conn);
}

/* Drop the loop's reference to a channel (loop thread only). */
void
chan_unref (struct chan *ch)
{
  if (ch && --ch->refs == 0)
    chan_free (ch);
}

/* The handle is closed: drop its reference. */
static void
on_conn_close (uv_handle_t *handle)
{
  conn_unref (handle->data);
}

/* Close a connection now, dropping unsent replies and cancelling its
 * request.
 */
void
conn_close (struct conn *conn)
{
  struct control_server *srv = conn->srv;

  if (conn->closing)
    return;
  conn->closing = true;
  atomic_store (&conn->cancel, true);
  if (conn->prev)
    conn->prev->next = conn->next;
  else
    srv->conns = conn->next;
  if (conn->next)
    conn->next->prev = conn->prev;
  srv->nconns--;
  if (conn->job) {
    if (!conn->job->own_thread)   /* fails once it runs: fine */
      uv_cancel ((uv_req_t *) &conn->job->work);
    if (conn->job->chan)
      chan_gone (conn->job->chan);
  }
  uv_close (&conn->h.handle, on_conn_close);
}

/* Our side is shut down: now close. */
static void
on_shutdown (uv_shutdown_t *req, int status)
{
  conn_close (req->data);
}

/* Send what is queued, then close (invariant 5). */
void
conn_shutdown (struct conn *conn)
{
  int r;

  if (conn->shutting || conn->closing)
    return;
  conn->shutting = true;
  if (conn->reading) {
    uv_read_stop (&conn->h.stream);
    conn->reading = false;
  }
  if (conn->tls) {
    tls_session_close (conn->tls);
    conn_tls_flush (conn);
    if (conn->closing)
      return;
  }
  conn->shutdown_req.data = conn;
  r = uv_shutdown (&conn->shutdown_req, &conn->h.stream, on_shutdown);
  if (r < 0)
    conn_close (conn);
}

/* A reply has been written (or dropped because the conn closed). */
static void
on_write (uv_write_t *req, int status)
{
  struct out *out = req->data;

  /* The conn outlives its write callbacks: uv_close calls them first. */
  if (status < 0 && status != UV_ECANCELED)
    conn_close (out->conn);
  if (out->chan) {
    chan_written (out->chan, out->len);
    chan_unref (out->chan);
  }
  free (out->data);
  free (out);
}

/* Write wlen bytes of wire (taking them); ch: a worker's message of len
 * plaintext bytes, counted against its channel's limit until written.
 */
static void
conn_write_wire (struct conn *conn, char *wire, size_t wlen, struct chan *ch,
                 size_t len)
{
  struct out *out = conn->closing || !wire ? NULL : malloc (sizeof *out);
  uv_buf_t buf;
  int r = -1;

  if (out) {
    out->conn = conn;
    out->data = wire;
    out->chan = ch;
    out->len = len;
    out->req.data = out;
    buf = uv_buf_init (wire, (unsigned) wlen);
    r = uv_write (&out->req, &conn->h.stream, &buf, 1, on_write);
    if (r == 0) {
      if (ch)
        ch->refs++;
      return;
    }
  }
  if (ch)
    chan_written (ch, len);
  free (wire);
  free (out);
  if (!conn->closing)
    conn_close (conn);
}

/* Write what TLS made for the peer (handshake, alerts, close_notify):
 * before anything else is queued (tls.c invariant 1).
 */
void
conn_tls_flush (struct conn *conn)
{
  char *wire;
  size_t wlen;

  if (tls_session_take (conn->tls, &wire, &wlen) < 0)
    conn_close (conn);
  else if (wire)
    conn_write_wire (conn, wire, wlen, NULL, wlen);
}

/* Write bytes (taking them); ch: a worker's message, counted against its
 * channel's limit until written.  On TLS, the ciphertext of the message
 * goes as one write that credits the channel with len (tls.c invariant 3).
 */
void
conn_write (struct conn *conn, char *data, size_t len, struct chan *ch)
{
  char *wire = data;
  size_t wlen = len;

  if (conn->tls && !conn->closing) {
    int r = tls_session_write (conn->tls, data, len);

    free (data);
    if (r == 0)
      r = tls_session_take (conn->tls, &wire, &wlen);
    if (r == 0 && wire == NULL) {     /* an empty message */
      if (ch)
        chan_written (ch, len);
      return;
    }
    if (r < 0) {
      srv_log (conn->srv, "control: %s", cairn_errmsg ());
      wire = NULL;
    }
  }
  conn_write_wire (conn, wire, wlen, ch, len);
}

/* Queue a reply line (taking ownership of it). */
void
conn_send (struct conn *conn, char *line, size_t len)
{
  struct control_server *srv = conn->srv;
  size_t queued;

  if (conn->closing) {
    free (line);
    return;
  }
  queued = uv_stream_get_write_queue_size (&conn->h.stream);
  if (queued > srv->max_output) {
    srv_log (srv, "control: closing a client that left %zu bytes of replies "
             "unread (the limit is %zu)", queued, srv->max_output);
    free (line);
    conn_close (conn);
    return;
  }
  conn_write (conn, line, len, NULL);
}

/* Start or stop reading as the conn wants. */
void
conn_set_reading (struct conn *conn, bool want_read)
{
  int r;

  if (want_read == conn->reading || conn->closing)
    return;
  if (want_read)
    r = uv_read_start (&conn->h.stream, on_alloc, on_read);
  else
    r = uv_read_stop (&conn->h.stream);
  if (r < 0)
    conn_close (conn);
  else
    conn->reading = want_read;
}

/* Send an error reply that belongs to no request. */
void
conn_send_error (struct conn *conn, int code, const char *message)
{
  size_t len;
  char *line = control_format_error (NULL, code, message, &len);

  if (line)
    conn_send (conn, line, len);
  else
    conn_close (conn);
}

/* Process the buffered lines as far as possible, then decide whether to
 * read more (invariants 2, 3 and 5).
 */
void
conn_pump (struct conn *conn)
{
  char *line;
  size_t len;
  bool want_read;
  int r;

  if (conn->smode == CHAN_RECV || conn->discarding) {
    /* Stream bytes, not lines: read unless the worker is behind. */
    if (!conn->closing && !conn->shutting)
      conn_set_reading (conn, !conn->eof && !conn->in_paused);
    return;
  }
  while (!conn->closing && !conn->shutting && conn->job == NULL) {
    r = control_lines_next (&conn->lines, &line, &len);
    if (r == 0)
      break;
    if (r < 0) {
      char msg[160];

      snprintf (msg, sizeof msg, "a request line is longer than %d bytes, "
                "the limit: the connection is closed", CONTROL_MAX_LINE);
      srv_log (conn->srv, "control: %s", msg);
      conn_send_error (conn, CAIRN_E_TOO_LARGE, msg);
      conn_shutdown (conn);
      return;
    }
    conn_dispatch (conn, line, len);
  }
  if (conn->closing || conn->shutting)
    return;

  if (conn->eof && conn->job == NULL) {
    conn_shutdown (conn);
    return;
  }
  want_read = !conn->eof &&
              control_lines_pending (&conn->lines) <= CONTROL_MAX_LINE;
  conn_set_reading (conn, want_read);
}

/* Has the client gone altogether, not only shut down its side?  A Unix
 * socket whose peer closed reports POLLHUP; one that only half-closed
 * does not.  (TCP cannot tell the two apart from a FIN: there the request
 * runs on, as invariant 5 says, until writing to the client fails.)
 */
static bool
peer_gone (struct conn *conn)
{
  struct pollfd p = { .events = 0 };
  uv_os_fd_t fd;

  if (uv_fileno (&conn->h.handle, &fd) < 0)
    return false;
  p.fd = fd;
  return poll (&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR));
}

/* Lend libuv the conn's read buffer (a read is consumed before the next). */
static void
on_alloc (uv_handle_t *handle, size_t size, uv_buf_t *buf)
{
  struct conn *conn = handle->data;

  *buf = uv_buf_init (conn->rbuf, sizeof conn->rbuf);
}

/* The client's input ended (EOF, or a TLS close_notify). */
void
conn_eof (struct conn *conn)
{
  int r;

  /* The client may have only shut down its side: answer what it sent.
   * One that is gone (killed, say) cancels its running request, which
   * has nobody to answer: a replication job stops instead of running on.
   */
  if (conn->job && peer_gone (conn))
    atomic_store (&conn->cancel, true);
  conn->eof = true;
  uv_read_stop (&conn->h.stream);
  conn->reading = false;
  if (conn->smode == CHAN_RECV || conn->discarding) {
    /* The stream ended without its end frame: it is cut short. */
    if (conn->smode == CHAN_RECV && conn->job && conn->job->chan)
      chan_gone (conn->job->chan);
    conn->smode = CHAN_LINES;
    conn->discarding = false;
  }
  r = control_lines_finish (&conn->lines);
  if (r == -ENOMEM) {
    conn_close (conn);
    return;
  }
  conn_pump (conn);
}

/* Plaintext from the client: request lines or stream frames. */
void
conn_input (struct conn *conn, const char *data, size_t n)
{
  int r;

  if (conn->smode == CHAN_RECV || conn->discarding) {
    conn_stream_input (conn, data, n);
    return;
  }
  /* -E2BIG is reported by control_lines_next after the lines before it. */
  r = control_lines_feed (&conn->lines, data, n);
  if (r == -ENOMEM) {
    srv_log (conn->srv, "control: out of memory reading a request");
    conn_close (conn);
    return;
  }
  conn_pump (conn);
}

/* Refuse a client over the connection limit: an error reply, then close. */
void
conn_refuse_busy (struct conn *conn)
{
  struct control_server *srv = conn->srv;
  char msg[160];

  snprintf (msg, sizeof msg, "too many control connections (the limit is "
            "%u): close idle clients and retry", srv->max_clients);
  srv_log (srv, "control: %s", msg);
  conn_send_error (conn, CAIRN_E_BUSY, msg);
  conn_shutdown (conn);
}

/* Bytes (or the end) arrived from a client. */
static void
on_read (uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
  struct conn *conn = stream->data;

  if (nread == 0)
    return;
  if (nread == UV_EOF && conn->refused)
    conn_close (conn);
  else if (nread == UV_EOF)
    conn_eof (conn);
  else if (nread < 0)
    conn_close (conn);
  else if (conn->refused)
    return;
  else if (conn->tcp && !conn->sniffed &&
           !conn_sniff (conn, (unsigned char) buf->base[0]))
    return;
  else if (conn->tls)
    conn_tls_input (conn, buf->base, (size_t) nread);
  else
    conn_input (conn, buf->base, (size_t) nread);
}

/* Name a TCP client for messages: "ADDR:PORT". */
static void
conn_name_peer (struct conn *conn)
{
  struct sockaddr_storage ss;
  int len = sizeof ss;
  char addr[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;

  if (uv_tcp_getpeername (&conn->h.tcp, (struct sockaddr *) &ss, &len) == 0) {
    conn->who.has_addr = true;
    conn->who.addr = ss;
    if (ss.ss_family == AF_INET6) {
      struct sockaddr_in6 *sa = (struct sockaddr_in6 *) &ss;

      uv_ip6_name (sa, addr, sizeof addr);
      port = ntohs (sa->sin6_port);
    }
    else {
      struct sockaddr_in *sa = (struct sockaddr_in *) &ss;

      uv_ip4_name (sa, addr, sizeof addr);
      port = ntohs (sa->sin_port);
    }
  }
  snprintf (conn->peer, sizeof conn->peer, strchr (addr, ':') ? "[%s]:%u"
            : "%s:%u", addr, port);
}

/* The supplementary groups of the process that connected on fd, as the
 * kernel recorded them at connect (SO_PEERGROUPS, Linux 4.13), the first
 * GRANT_MAX_GROUPS of them; none where the kernel cannot say.  No lookup
 * in /etc/group (which could block the loop on a network name service):
 * the groups are the process's own, as setgroups(2) left them.
 */
static void
conn_unix_groups (struct conn *conn, int fd)
{
#ifdef SO_PEERGROUPS
  socklen_t len = sizeof conn->who.groups;
  gid_t *all;

  if (getsockopt (fd, SOL_SOCKET, SO_PEERGROUPS, conn->who.groups,
                  &len) == 0) {
    conn->who.ngroups = len / sizeof (gid_t);
    return;
  }
  /* More than fit: len is what they need. */
  if (errno != ERANGE || (all = malloc (len)) == NULL)
    return;
  if (getsockopt (fd, SOL_SOCKET, SO_PEERGROUPS, all, &len) == 0) {
    memcpy (conn->who.groups, all, sizeof conn->who.groups);
    conn->who.ngroups = GRANT_MAX_GROUPS;
  }
  free (all);
#else
  (void) conn;
  (void) fd;
#endif
}

/* Who a Unix socket client is: its uid, gid (SO_PEERCRED) and
 * supplementary groups.  The server's own user and root are its owners
 * (cairn-grants(5)).
 */
static void
conn_unix_cred (struct conn *conn)
{
  struct ucred cred;
  socklen_t len = sizeof cred;
  uv_os_fd_t fd;

  if (uv_fileno (&conn->h.handle, &fd) != 0 ||
      getsockopt (fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return;                     /* knows nothing: grants give nothing */
  conn->who.has_cred = true;
  conn->who.uid = cred.uid;
  conn->who.gid = cred.gid;
  conn->who.owner = cred.uid == 0 || cred.uid == geteuid ();
  conn_unix_groups (conn, fd);
}

/* A client connected: set up its conn and start reading. */
void
control_on_connection (uv_stream_t *listener, int status)
{
  struct control_server *srv = listener->data;
  struct conn *conn;
  int r;

  if (status < 0) {
    srv_log (srv, "control: accept: %s", uv_strerror (status));
    return;
  }
  conn = calloc (1, sizeof *conn);
  if (conn == NULL) {
    srv_log (srv, "control: out of memory accepting a client");
    return;
  }
  conn->srv = srv;
  conn->refs = 1;
  atomic_init (&conn->cancel, false);
  control_lines_init (&conn->lines, CONTROL_MAX_LINE);
  if (listener->type == UV_TCP)
    r = uv_tcp_init (&srv->loop, &conn->h.tcp);
  else
    r = uv_pipe_init (&srv->loop, &conn->h.pipe, 0);
  if (r < 0) {
    srv_log (srv, "control: cannot set up a client: %s", uv_strerror (r));
    free (conn);
    return;
  }
  conn->h.handle.data = conn;
  conn->next = srv->conns;
  if (srv->conns)
    srv->conns->prev = conn;
  srv->conns = conn;
  srv->nconns++;

  r = uv_accept (listener, &conn->h.stream);
  if (r < 0) {
    srv_log (srv, "control: accept: %s", uv_strerror (r));
    conn_close (conn);
    return;
  }
  if (listener->type == UV_TCP) {
    uv_tcp_nodelay (&conn->h.tcp, 1);
    conn->tcp = true;
    conn_name_peer (conn);
    if (srv->tls) {
      conn->setup_deadline = uv_now (&srv->loop) + srv->handshake_timeout_ms;
      /* Armed already: for an earlier deadline, which re-arms it. */
      if (!uv_is_active ((uv_handle_t *) &srv->setup_timer))
        uv_timer_start (&srv->setup_timer, control_on_setup_timer,
                        srv->handshake_timeout_ms, 0);
    }
  }
  else
    conn_unix_cred (conn);
  conn->busy = srv->nconns > srv->max_clients;
  /* A TCP client may speak TLS: it hears why once its first byte has
   * said which (conn_sniff), and then in its own language.
   */
  if (conn->busy && !(conn->tcp && srv->tls))
    conn_refuse_busy (conn);
  else
    conn_pump (conn);
}

/* Close every connection (the server is stopping; loop thread). */
void
control_conns_close (struct control_server *srv)
{
  while (srv->conns)
    conn_close (srv->conns);
}
