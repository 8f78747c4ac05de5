/* Cairn control server: the channel between a request's worker thread and
 * the loop thread, for stream mode and progress notifications.
 *
 * A blocking request runs on libuv's threadpool, but its connection belongs
 * to the loop thread (control.c invariant 1).  The channel is how the two
 * talk while the request runs, with no libuv in sight:
 *
 *   worker → loop   messages (a notification line, a stream frame); the
 *                   worker blocks while more than out_limit bytes are
 *                   queued or being written (backpressure: memory is
 *                   bounded by the limit, never by the stream)
 *   loop → worker   stream data read from the client; the loop stops
 *                   reading while more than in_limit bytes wait, and the
 *                   worker asks for reading to resume once it has taken
 *                   them (backpressure the other way)
 *
 * Everything is under one mutex, held only to move pointers and copy one
 * read's worth of bytes, so the loop thread never waits for long.  The
 * worker waits on a condition variable, in slices of CHAN_POLL_MS so that
 * it also sees cancellation (job.cancel, the server stopping) that comes
 * through atomic flags rather than through the channel.  wake() (a
 * uv_async_send) tells the loop to look at the channel again.
 *
 * Lifetime: created with the request, freed by the loop thread after the
 * request has finished and every message it queued has been written or
 * dropped (refs counts the loop's holders: the request and each write in
 * flight; only the loop thread touches it).
 */
#ifndef CAIRN_SERVER_CHAN_H
#define CAIRN_SERVER_CHAN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

#define CHAN_OUT_LIMIT (4 * 1024 * 1024)
#define CHAN_IN_LIMIT (4 * 1024 * 1024)
#define CHAN_POLL_MS 100

enum chan_mode {
  CHAN_LINES,           /* no stream: notifications go as lines */
  CHAN_SEND,            /* stream from the server: frames */
  CHAN_RECV,            /* stream from the client: frames come in */
};

/* A message for the loop to write. */
struct chan_msg {
  struct chan_msg *next;
  char *data;           /* malloc'd */
  size_t len;
  bool begin;           /* the first message of stream mode */
};

struct chan {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  void (*wake) (void *opaque);
  void *wake_opaque;
  unsigned refs;        /* loop thread only */

  enum chan_mode mode;  /* set by the worker (chan_begin) */
  /* worker → loop */
  struct chan_msg *out_head, *out_tail;
  size_t out_bytes;     /* queued or being written */
  /* loop → worker */
  uint8_t *in;
  size_t in_start, in_len, in_cap;
  bool in_end;          /* the client sent the end frame */
  bool in_paused;       /* the loop stopped reading: wake it when drained */
  bool gone;            /* the connection closed: the worker must stop */
};

/* Make a channel (refs = 1). */
int chan_new (void (*wake) (void *opaque), void *wake_opaque,
              struct chan **out) CAIRN_WUR;
void chan_free (struct chan *ch);

/* Worker: queue a message (taking data).  With wait, block while the
 * queue is over its limit; returns 0, -EPIPE if the connection is gone, or
 * -ECANCELED if cancelled() became true while waiting.
 */
int chan_put (struct chan *ch, char *data, size_t len, bool begin, bool wait,
              bool (*cancelled) (void *opaque), void *opaque) CAIRN_WUR;
/* Worker: take up to cap bytes of stream data; waits for some.  Returns 0
 * with *n > 0, 0 with *n == 0 at the end frame, -EPIPE if the connection
 * went away before it, -ECANCELED if cancelled.
 */
int chan_read (struct chan *ch, void *buf, size_t cap, size_t *n,
               bool (*cancelled) (void *opaque), void *opaque) CAIRN_WUR;

/* Loop: take every queued message (a list, in order). */
struct chan_msg *chan_take (struct chan *ch);
/* Loop: n bytes of taken messages were written or dropped. */
void chan_written (struct chan *ch, size_t n);
/* Loop: stream data from the client.  Returns true if the loop should
 * stop reading (the worker will wake it); -ENOMEM is reported as the
 * connection being gone.
 */
bool chan_push (struct chan *ch, const void *data, size_t n);
/* Loop: the end frame came. */
void chan_end (struct chan *ch);
/* Loop: should reading resume (the worker drained what waited)? */
bool chan_resume (struct chan *ch);
/* Loop: the connection closed. */
void chan_gone (struct chan *ch);

#endif /* CAIRN_SERVER_CHAN_H */
