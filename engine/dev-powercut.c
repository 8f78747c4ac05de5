/* Cairn engine, layer "dev": the power-cut device (DESIGN §6).
 *
 * The power-cut device models a disk with a volatile write cache in front
 * of the device below it, which stands for the persistent media:
 *
 *  1. A write is acknowledged at once and kept, with a copy of its data, at
 *     the end of an ordered list of pending writes; nothing reaches lower.
 *  2. A read returns lower's contents with every overlapping pending write
 *     laid over them in order, so later writes win: the device reads back
 *     what was written, as a disk does, flushed or not.
 *  3. A flush applies every pending write to lower in order, then flushes
 *     lower: after it returns, everything acknowledged before it is durable.
 *  4. A discard is kept in the same list (it reads back as zeros), and is
 *     passed to lower's discard when applied.
 *  5. A cut (dev_powercut_cut, or an armed cut just before the nth write
 *     or flush)
 *     applies each pending entry to lower with probability 1/2, in order,
 *     optionally tears one applied write (only a random 512-byte-aligned
 *     prefix of it, possibly nothing, reaches lower), and loses the rest.
 *     The choices come from a splitmix64 generator seeded at creation, so a
 *     seed replays the same cut.  From then on every operation fails with
 *     -EIO.
 *
 * One mutex guards the whole device, I/O to lower included, so that a cut
 * is atomic with respect to every other operation.  This is a test device:
 * simplicity beats concurrency here.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "dev.h"

#define POWERCUT_SECTOR 512

/* One acknowledged but unflushed write (or discard, when data is NULL). */
struct pending {
  uint64_t off;
  uint64_t len;
  uint8_t *data;
};

struct powercut_dev {
  struct cairn_dev dev;       /* must be first */
  struct cairn_dev *lower;
  pthread_mutex_t lock;       /* guards everything below */
  struct pending *pending;    /* in the order they were acknowledged */
  size_t npending, cap;
  uint64_t rng;               /* splitmix64 state */
  uint64_t writes;            /* writes acknowledged so far */
  uint64_t ops;               /* writes and flushes acknowledged so far */
  uint64_t cut_at;            /* the op number that cuts; 0: none armed */
  bool cut;                   /* the power is gone */
};

/* The power-cut device of a device. */
static inline struct powercut_dev *
to_powercut_dev (struct cairn_dev *dev)
{
  return (struct powercut_dev *) dev;
}

/* Next number of the device's splitmix64 generator. */
static uint64_t
powercut_random (struct powercut_dev *pc)
{
  uint64_t z = (pc->rng += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* The error every operation returns after the cut. */
static int
powercut_lost (void)
{
  return cairn_fail (-EIO, "device lost power (simulated power cut)");
}

/* Forget every pending entry. */
static void
powercut_drop_pending (struct powercut_dev *pc)
{
  for (size_t i = 0; i < pc->npending; i++)
    free (pc->pending[i].data);
  pc->npending = 0;
}

/* Append an entry to the pending list; data (owned from now on) may be NULL. */
static int CAIRN_WUR
powercut_push (struct powercut_dev *pc, uint64_t off, uint64_t len,
               uint8_t *data)
{
  struct pending *p;
  size_t cap;

  if (pc->npending == pc->cap) {
    cap = pc->cap ? pc->cap * 2 : 64;
    p = realloc (pc->pending, cap * sizeof *p);
    if (p == NULL) {
      free (data);
      return cairn_fail (-ENOMEM, "%s: out of memory for pending writes",
                         pc->dev.name);
    }
    pc->pending = p;
    pc->cap = cap;
  }
  pc->pending[pc->npending++] = (struct pending) {
    .off = off, .len = len, .data = data
  };
  return 0;
}

/* Apply the first len bytes of pending entry p to lower. */
static int CAIRN_WUR
powercut_apply (struct powercut_dev *pc, const struct pending *p,
                uint64_t len)
{
  if (len == 0)
    return 0;
  if (p->data == NULL)
    return dev_discard (pc->lower, p->off, len);
  return dev_pwrite (pc->lower, p->data, len, p->off);
}

/* Lose power: apply a random subset of pending entries, maybe tear one. */
static void
powercut_do_cut (struct powercut_dev *pc, bool allow_tear)
{
  CLEANUP_FREE bool *apply = NULL;
  size_t i, napplied = 0, torn = SIZE_MAX;
  uint64_t len;

  if (pc->cut)
    return;
  pc->cut = true;
  pc->cut_at = 0;

  apply = calloc (pc->npending ? pc->npending : 1, sizeof *apply);
  if (apply == NULL) {
    /* Losing every pending write is one of the allowed outcomes. */
    powercut_drop_pending (pc);
    return;
  }

  /* Choose, independently and with p = 1/2, which entries reach lower. */
  for (i = 0; i < pc->npending; i++) {
    apply[i] = powercut_random (pc) & 1;
    if (apply[i] && pc->pending[i].data != NULL)
      napplied++;
  }

  /* With p = 1/2, tear one of the applied writes, chosen uniformly. */
  if (allow_tear && napplied > 0 && (powercut_random (pc) & 1)) {
    uint64_t k = powercut_random (pc) % napplied;

    for (i = 0; i < pc->npending; i++) {
      if (apply[i] && pc->pending[i].data != NULL && k-- == 0) {
        torn = i;
        break;
      }
    }
  }

  for (i = 0; i < pc->npending; i++) {
    if (!apply[i])
      continue;
    len = pc->pending[i].len;
    if (i == torn) {
      /* A prefix of 0 .. len - 1 bytes, in whole sectors. */
      uint64_t sectors = DIV_ROUND_UP (len, POWERCUT_SECTOR);

      len = powercut_random (pc) % sectors * POWERCUT_SECTOR;
    }
    /* A failing lower device loses the write: nobody is left to tell. */
    if (powercut_apply (pc, &pc->pending[i], len) < 0)
      continue;
  }
  powercut_drop_pending (pc);
}

/* Read lower, then lay the pending entries over it in order. */
static int
powercut_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  uint8_t *out = buf;
  uint64_t end = off + len, start, stop;
  int r;

  pthread_mutex_lock (&pc->lock);
  if (pc->cut) {
    r = powercut_lost ();
    goto out;
  }
  r = dev_pread (pc->lower, buf, len, off);
  if (r < 0)
    goto out;
  for (size_t i = 0; i < pc->npending; i++) {
    const struct pending *p = &pc->pending[i];

    start = MAX (off, p->off);
    stop = MIN (end, p->off + p->len);
    if (start >= stop)
      continue;
    if (p->data)
      memcpy (out + (start - off), p->data + (start - p->off), stop - start);
    else
      memset (out + (start - off), 0, stop - start);
  }

 out:
  pthread_mutex_unlock (&pc->lock);
  return r;
}

/* Keep a copy of the write as pending, or cut if this is the armed write. */
static int
powercut_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
                 uint64_t off)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  uint8_t *copy;
  int r;

  pthread_mutex_lock (&pc->lock);
  if (pc->cut_at != 0 && pc->ops + 1 == pc->cut_at)
    powercut_do_cut (pc, true);
  if (pc->cut) {
    r = powercut_lost ();
    goto out;
  }
  copy = malloc (len > 0 ? len : 1);
  if (copy == NULL) {
    r = cairn_fail (-ENOMEM, "%s: out of memory for a pending write",
                    dev->name);
    goto out;
  }
  memcpy (copy, buf, len);
  r = powercut_push (pc, off, len, copy);
  if (r < 0)
    goto out;
  pc->writes++;
  pc->ops++;

 out:
  pthread_mutex_unlock (&pc->lock);
  return r;
}

/* Apply every pending entry to lower in order, then flush lower. */
static int
powercut_flush (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  size_t i = 0;
  int r = 0;

  pthread_mutex_lock (&pc->lock);
  if (pc->cut_at != 0 && pc->ops + 1 == pc->cut_at)
    powercut_do_cut (pc, true);
  if (pc->cut) {
    r = powercut_lost ();
    goto out;
  }
  for (i = 0; i < pc->npending; i++) {
    r = powercut_apply (pc, &pc->pending[i], pc->pending[i].len);
    if (r < 0)
      break;
    free (pc->pending[i].data);
  }
  /* Keep what was not applied (nothing, unless lower failed). */
  if (i > 0) {
    memmove (pc->pending, pc->pending + i,
             (pc->npending - i) * sizeof *pc->pending);
    pc->npending -= i;
  }
  if (r == 0)
    r = dev_flush (pc->lower);
  if (r == 0)
    pc->ops++;

 out:
  pthread_mutex_unlock (&pc->lock);
  return r;
}

/* Keep the discard as a pending entry. */
static int
powercut_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  int r;

  pthread_mutex_lock (&pc->lock);
  if (pc->cut)
    r = powercut_lost ();
  else
    r = powercut_push (pc, off, len, NULL);
  pthread_mutex_unlock (&pc->lock);
  return r;
}

/* Free the device and its pending writes, leaving lower open. */
static void
powercut_close (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);

  powercut_drop_pending (pc);
  free (pc->pending);
  pthread_mutex_destroy (&pc->lock);
  free (pc);
}

static const struct cairn_dev_ops powercut_ops = {
  .kind = "powercut",
  .pread = powercut_pread,
  .pwrite = powercut_pwrite,
  .flush = powercut_flush,
  .discard = powercut_discard,
  .close = powercut_close,
};

/* Stack a power-cut device with the given seed on lower. */
int
dev_powercut_create (struct cairn_dev *lower, uint64_t seed,
                     struct cairn_dev **devp)
{
  struct powercut_dev *pc;
  int r;

  *devp = NULL;
  pc = calloc (1, sizeof *pc);
  if (pc == NULL)
    return cairn_fail (-errno, "power-cut device: calloc: %m");
  r = pthread_mutex_init (&pc->lock, NULL);
  if (r != 0) {
    free (pc);
    return cairn_fail (-r, "power-cut device: pthread_mutex_init failed");
  }
  pc->lower = lower;
  pc->rng = seed;
  pc->dev.ops = &powercut_ops;
  pc->dev.size = lower->size;
  /* The precision keeps the name inside the buffer. */
  snprintf (pc->dev.name, sizeof pc->dev.name, "powercut(%.240s)",
            lower->name);
  *devp = &pc->dev;
  return 0;
}

/* Cut the power just before the nth next write or flush; 0 disarms. */
void
dev_powercut_arm (struct cairn_dev *dev, uint64_t nth_op)
{
  struct powercut_dev *pc = to_powercut_dev (dev);

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pc->lock);
  pc->cut_at = nth_op == 0 ? 0 : pc->ops + nth_op;
  pthread_mutex_unlock (&pc->lock);
}

/* Cut the power now. */
void
dev_powercut_cut (struct cairn_dev *dev, bool allow_tear)
{
  struct powercut_dev *pc = to_powercut_dev (dev);

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pc->lock);
  powercut_do_cut (pc, allow_tear);
  pthread_mutex_unlock (&pc->lock);
}

/* Has the power been cut? */
bool
dev_powercut_is_cut (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  bool cut;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pc->lock);
  cut = pc->cut;
  pthread_mutex_unlock (&pc->lock);
  return cut;
}

/* Number of writes acknowledged so far. */
uint64_t
dev_powercut_writes (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  uint64_t n;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pc->lock);
  n = pc->writes;
  pthread_mutex_unlock (&pc->lock);
  return n;
}

/* Number of writes and flushes acknowledged so far. */
uint64_t
dev_powercut_ops (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  uint64_t n;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pc->lock);
  n = pc->ops;
  pthread_mutex_unlock (&pc->lock);
  return n;
}
