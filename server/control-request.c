/* Cairn control server: a connection's requests (design note in control.c).
 *
 * A request line is answered at once (a parse error), run on the loop
 * thread (a method that does not block), or handed to a worker: libuv's
 * threadpool, or a thread of its own for a long-running method, so that a
 * stream lasting hours holds none of the pool's four threads (invariant 2:
 * one at a time per connection, replies in order).  The worker talks back
 * through its channel (chan.h): progress notifications and stream frames
 * the loop writes out when woken, and stream mode entered on its first
 * message and left by the end frame or when the request finishes
 * (invariants 6-8).  Reading and writing are control.c's.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "control-int.h"

/* Drop what a worker queued for a closed conn. */
static void
free_msgs (struct chan *ch)
{
  struct chan_msg *m = chan_take (ch), *next;

  for (; m; m = next) {
    next = m->next;
    chan_written (ch, m->len);
    free (m->data);
    free (m);
  }
}

/* Write what the worker queued on its channel (loop thread).  The first
 * message of stream mode switches the conn: for a receive, bytes that
 * came after the request line are the start of the stream.
 */
static void
conn_drain (struct conn *conn, struct chan *ch)
{
  struct chan_msg *m = chan_take (ch), *next;

  for (; m; m = next) {
    next = m->next;
    if (m->begin) {
      pthread_mutex_lock (&ch->lock);
      conn->smode = ch->mode;
      pthread_mutex_unlock (&ch->lock);
      memset (&conn->frames, 0, sizeof conn->frames);
    }
    conn_write (conn, m->data, m->len, ch);
    if (m->begin && conn->smode == CHAN_RECV && !conn->closing) {
      char buf[4096];
      size_t n;

      while (conn->smode == CHAN_RECV &&
             (n = control_lines_take (&conn->lines, buf, sizeof buf)) > 0)
        conn_stream_input (conn, buf, n);
      if (conn->eof && conn->smode == CHAN_RECV) {
        chan_gone (ch);         /* the stream ended without its end frame */
        conn->smode = CHAN_LINES;
      }
      conn_pump (conn);
    }
    free (m);
  }
  if (conn->in_paused && chan_resume (ch)) {
    conn->in_paused = false;
    conn_pump (conn);
  }
}

static void job_done (uv_work_t *work, int status);

/* A worker queued something or a job thread finished (loop thread): drain
 * every running request's channel, finish the jobs whose thread is done.
 * Once the server is stopping and no job thread is left, the wake handle
 * closes: it is what keeps the loop running for them.
 */
void
control_on_wake (uv_async_t *async)
{
  struct control_server *srv = async->data;
  struct conn *conn, *next;
  struct job **pp = &srv->threads, *job;

  for (conn = srv->conns; conn; conn = next) {
    next = conn->next;
    if (conn->job && conn->job->chan)
      conn_drain (conn, conn->job->chan);
  }
  while ((job = *pp) != NULL) {
    if (atomic_load (&job->finished)) {
      *pp = job->next_thread;
      job_done (&job->work, 0);
    }
    else
      pp = &job->next_thread;
  }
  if (atomic_load (&srv->stopping) && srv->threads == NULL &&
      !uv_is_closing ((uv_handle_t *) &srv->wake_async))
    uv_close ((uv_handle_t *) &srv->wake_async, NULL);
}

/* Wake the loop (any thread). */
static void
wake_loop (void *opaque)
{
  struct control_server *srv = opaque;

  uv_async_send (&srv->wake_async);
}

/* Stream bytes from the client (stream mode "receive", or discarding the
 * rest of a stream whose request has ended).
 */
void
conn_stream_input (struct conn *conn, const char *data, size_t n)
{
  struct chan *ch = conn->job ? conn->job->chan : NULL;
  bool pause = false;

  while (n > 0 && !conn->closing) {
    const void *d;
    size_t used, dlen;
    bool last;
    int k = control_frames_next (&conn->frames, data, n, &used, &d, &dlen,
                                 &last);

    data += used;
    n -= used;
    if (k < 0 || k == CONTROL_FRAME_MSG) {
      srv_log (conn->srv, "control: %s", k < 0 ? cairn_errmsg ()
               : "a client sent a message frame: closing it");
      conn_close (conn);
      return;
    }
    if (k == CONTROL_FRAME_DATA && !conn->discarding && ch)
      pause |= chan_push (ch, d, dlen);
    else if (k == CONTROL_FRAME_END) {
      if (!conn->discarding && ch)
        chan_end (ch);
      conn->smode = CHAN_LINES;
      conn->discarding = false;
      conn->in_paused = false;
      /* What follows is request lines again. */
      if (n > 0 && control_lines_feed (&conn->lines, data, n) == -ENOMEM) {
        conn_close (conn);
        return;
      }
      conn_pump (conn);
      return;
    }
    else if (k == CONTROL_FRAME_NONE)
      break;
  }
  if (pause && conn->smode == CHAN_RECV) {
    conn->in_paused = true;
    conn_set_reading (conn, false);
  }
}

/* Send the reply of a finished request and free it. */
static void
conn_finish (struct conn *conn, struct control_ctx *ctx)
{
  char *reply = NULL;
  size_t len;
  int r = 0;

  if (!conn->closing)
    r = control_ctx_reply (ctx, &reply, &len);
  control_ctx_free (ctx);
  if (r < 0)
    conn_close (conn);
  else if (reply)
    conn_send (conn, reply, len);
}

/* Run a blocking request (threadpool thread). */
static void
job_work (uv_work_t *work)
{
  struct job *job = work->data;

  control_ctx_run (job->ctx);
}

/* A long-running request's own thread: run it, then have the loop finish
 * it.  The wake is the thread's last touch of anything shared.
 */
static void *
job_thread (void *arg)
{
  struct job *job = arg;
  struct control_server *srv = job->conn->srv;

  control_ctx_run (job->ctx);
  atomic_store (&job->finished, true);
  uv_async_send (&srv->wake_async);
  return NULL;
}

/* Start a long-running request on a thread of its own (detached, with the
 * loop thread's signal mask: every signal blocked).
 */
static int
start_job_thread (struct control_server *srv, struct job *job)
{
  pthread_attr_t attr;
  pthread_t tid;
  int r;

  atomic_init (&job->finished, false);
  pthread_attr_init (&attr);
  pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
  r = pthread_create (&tid, &attr, job_thread, job);
  pthread_attr_destroy (&attr);
  if (r != 0)
    return -r;
  job->own_thread = true;
  job->next_thread = srv->threads;
  srv->threads = job;
  return 0;
}

/* The request has finished: end its stream mode (loop thread).  A stream
 * to the client gets its end frame; a stream from the client that has not
 * ended yet is read and dropped up to its end frame, so the connection can
 * carry requests again.
 */
static void
conn_stream_done (struct conn *conn, struct chan *ch)
{
  static const uint8_t end[CONTROL_FRAME_HEADER];
  char *frame;

  conn_drain (conn, ch);
  if (conn->smode == CHAN_SEND) {
    frame = malloc (sizeof end);
    if (frame) {
      memcpy (frame, end, sizeof end);
      conn_write (conn, frame, sizeof end, NULL);
    }
    else
      conn_close (conn);
  }
  else if (conn->smode == CHAN_RECV) {
    conn->discarding = true;
    conn->in_paused = false;
  }
  conn->smode = CHAN_LINES;
}

/* A blocking request is done (loop thread): answer it, go on. */
static void
job_done (uv_work_t *work, int status)
{
  struct job *job = work->data;
  struct conn *conn = job->conn;

  conn->job = NULL;
  if (status == UV_ECANCELED)
    control_ctx_fail (job->ctx, -ECANCELED, "the request was cancelled "
                      "before it started: the server is stopping");
  if (job->chan) {
    if (!conn->closing)
      conn_stream_done (conn, job->chan);
    else
      free_msgs (job->chan);
    chan_unref (job->chan);
  }
  conn_finish (conn, job->ctx);
  free (job);
  conn_pump (conn);
  conn_unref (conn);
}

/* Start one request line: answer it, run it here, or queue it. */
void
conn_dispatch (struct conn *conn, const char *line, size_t len)
{
  struct control_server *srv = conn->srv;
  struct control_ctx *ctx;
  struct job *job;
  char *reply;
  size_t rlen;
  int r;

  r = control_prepare (srv->reg, srv->opaque, line, len, &ctx, &reply, &rlen);
  if (r < 0) {
    srv_log (srv, "control: out of memory reading a request");
    conn_close (conn);
    return;
  }
  if (reply)
    conn_send (conn, reply, rlen);
  if (ctx == NULL)
    return;

  ctx->cancel[0] = &srv->stopping;
  ctx->cancel[1] = &conn->cancel;
  ctx->jobs = &srv->jobs;
  control_ctx_set_peer (ctx, srv->grants, &conn->who);
  ctx->audit = &srv->audit;
  if (!ctx->method->blocking) {
    control_ctx_run (ctx);
    conn_finish (conn, ctx);
    return;
  }

  job = calloc (1, sizeof *job);
  if (job == NULL) {
    control_ctx_fail (ctx, -ENOMEM, "out of memory");
    conn_finish (conn, ctx);
    return;
  }
  job->conn = conn;
  job->ctx = ctx;
  job->work.data = job;
  if (chan_new (wake_loop, srv, &job->chan) < 0) {
    control_ctx_fail (ctx, -ENOMEM, "out of memory");
    conn_finish (conn, ctx);
    free (job);
    return;
  }
  ctx->chan = job->chan;
  /* The threadpool has 4 threads: a stream that lasts hours, or waits for
   * a slow client, must not hold one of them.
   */
  if (ctx->method->long_running)
    r = start_job_thread (srv, job);
  else
    r = uv_queue_work (&srv->loop, &job->work, job_work, job_done);
  if (r < 0) {
    char msg[128];

    snprintf (msg, sizeof msg, "cannot queue the request: %s",
              uv_strerror (r));
    control_ctx_fail (ctx, -EIO, msg);
    conn_finish (conn, ctx);
    chan_unref (job->chan);
    free (job);
    return;
  }
  conn->job = job;
  conn->refs++;
}
