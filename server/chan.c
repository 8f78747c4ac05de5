/* Cairn control server: the worker ⇄ loop channel (see chan.h). */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chan.h"

int
chan_new (void (*wake) (void *opaque), void *wake_opaque, struct chan **out)
{
  struct chan *ch = calloc (1, sizeof *ch);
  pthread_condattr_t attr;

  if (ch == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  pthread_mutex_init (&ch->lock, NULL);
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (&ch->cond, &attr);
  pthread_condattr_destroy (&attr);
  ch->wake = wake;
  ch->wake_opaque = wake_opaque;
  ch->refs = 1;
  *out = ch;
  return 0;
}

void
chan_free (struct chan *ch)
{
  struct chan_msg *m, *next;

  if (ch == NULL)
    return;
  for (m = ch->out_head; m; m = next) {
    next = m->next;
    free (m->data);
    free (m);
  }
  free (ch->in);
  pthread_cond_destroy (&ch->cond);
  pthread_mutex_destroy (&ch->lock);
  free (ch);
}

/* Wait on the condition for one slice (lock held). */
static void
wait_slice (struct chan *ch)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  ts.tv_nsec += CHAN_POLL_MS * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait (&ch->cond, &ch->lock, &ts);
}

int
chan_put (struct chan *ch, char *data, size_t len, bool begin, bool wait,
          bool (*cancelled) (void *opaque), void *opaque)
{
  struct chan_msg *m = malloc (sizeof *m);
  int r = 0;

  if (m == NULL) {
    free (data);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  m->next = NULL;
  m->data = data;
  m->len = len;
  m->begin = begin;
  pthread_mutex_lock (&ch->lock);
  while (wait && ch->out_bytes > CHAN_OUT_LIMIT && !ch->gone &&
         !(cancelled && cancelled (opaque)))
    wait_slice (ch);
  if (ch->gone)
    r = cairn_fail (-EPIPE, "the client went away");
  else if (wait && cancelled && cancelled (opaque))
    r = cairn_fail (-ECANCELED, "cancelled");
  if (r < 0) {
    pthread_mutex_unlock (&ch->lock);
    free (data);
    free (m);
    return r;
  }
  if (ch->out_tail)
    ch->out_tail->next = m;
  else
    ch->out_head = m;
  ch->out_tail = m;
  ch->out_bytes += len;
  pthread_mutex_unlock (&ch->lock);
  ch->wake (ch->wake_opaque);
  return 0;
}

int
chan_read (struct chan *ch, void *buf, size_t cap, size_t *n,
           bool (*cancelled) (void *opaque), void *opaque)
{
  bool wake = false;
  int r = 0;

  *n = 0;
  pthread_mutex_lock (&ch->lock);
  while (ch->in_len == 0 && !ch->in_end && !ch->gone &&
         !(cancelled && cancelled (opaque)))
    wait_slice (ch);
  if (ch->in_len > 0) {
    *n = MIN (cap, ch->in_len);
    memcpy (buf, ch->in + ch->in_start, *n);
    ch->in_start += *n;
    ch->in_len -= *n;
    if (ch->in_len == 0)
      ch->in_start = 0;
    if (ch->in_paused && ch->in_len <= CHAN_IN_LIMIT / 2) {
      ch->in_paused = false;
      wake = true;
    }
  }
  else if (ch->in_end)
    ;
  else if (ch->gone)
    r = cairn_fail (-EPIPE, "the client went away in the middle of the "
                    "stream");
  else
    r = cairn_fail (-ECANCELED, "cancelled");
  pthread_mutex_unlock (&ch->lock);
  if (wake)
    ch->wake (ch->wake_opaque);
  return r;
}

struct chan_msg *
chan_take (struct chan *ch)
{
  struct chan_msg *m;

  pthread_mutex_lock (&ch->lock);
  m = ch->out_head;
  ch->out_head = ch->out_tail = NULL;
  pthread_mutex_unlock (&ch->lock);
  return m;
}

void
chan_written (struct chan *ch, size_t n)
{
  pthread_mutex_lock (&ch->lock);
  ch->out_bytes -= MIN (n, ch->out_bytes);
  if (ch->out_bytes <= CHAN_OUT_LIMIT)
    pthread_cond_broadcast (&ch->cond);
  pthread_mutex_unlock (&ch->lock);
}

bool
chan_push (struct chan *ch, const void *data, size_t n)
{
  bool pause;

  pthread_mutex_lock (&ch->lock);
  if (ch->in_start + ch->in_len + n > ch->in_cap) {
    if (ch->in_start > 0) {
      memmove (ch->in, ch->in + ch->in_start, ch->in_len);
      ch->in_start = 0;
    }
    if (ch->in_len + n > ch->in_cap) {
      size_t cap = MAX (ch->in_cap * 2, ch->in_len + n);
      uint8_t *p = realloc (ch->in, cap);

      if (p == NULL) {
        ch->gone = true;
        pthread_cond_broadcast (&ch->cond);
        pthread_mutex_unlock (&ch->lock);
        return true;
      }
      ch->in = p;
      ch->in_cap = cap;
    }
  }
  memcpy (ch->in + ch->in_start + ch->in_len, data, n);
  ch->in_len += n;
  pause = ch->in_len > CHAN_IN_LIMIT;
  if (pause)
    ch->in_paused = true;
  pthread_cond_broadcast (&ch->cond);
  pthread_mutex_unlock (&ch->lock);
  return pause;
}

void
chan_end (struct chan *ch)
{
  pthread_mutex_lock (&ch->lock);
  ch->in_end = true;
  pthread_cond_broadcast (&ch->cond);
  pthread_mutex_unlock (&ch->lock);
}

bool
chan_resume (struct chan *ch)
{
  bool r;

  pthread_mutex_lock (&ch->lock);
  r = !ch->in_paused;
  pthread_mutex_unlock (&ch->lock);
  return r;
}

void
chan_gone (struct chan *ch)
{
  pthread_mutex_lock (&ch->lock);
  ch->gone = true;
  pthread_cond_broadcast (&ch->cond);
  pthread_mutex_unlock (&ch->lock);
}
