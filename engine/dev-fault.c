/* Cairn engine, layer "dev": the fault injection device.
 *
 * A fault device passes every operation to the device below it, except
 * those a test has chosen to fail: per kind of operation (read, write,
 * flush) one rule "the nth next one fails with err, and, if sticky, every
 * one after it".  A failing operation never reaches the lower device.
 * Discards always pass.  The rules are guarded by a mutex, so that faults
 * can be armed while other threads do I/O; the I/O itself runs outside it.
 * A kind of operation can also be held: its operations wait until it is
 * released (a slow disk, for tests of what runs meanwhile), or delayed:
 * each one sleeps first (a disk whose flushes take time, so that what
 * overlaps them in the engine does overlap).  And bits can be flipped in
 * what the lower device stores (dev_fault_flip): silent rot, which only a
 * checksum finds, until the block is written again.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "dev.h"

#define FAULT_NOPS 3            /* read, write, flush */

/* One armed fault for one kind of operation. */
struct fault_rule {
  uint64_t countdown;         /* operations until the fault; 0: disarmed */
  bool sticky;                /* keep failing once it has fired */
  bool firing;                /* a sticky fault has fired */
  int err;                    /* negative errno to return */
};

struct fault_dev {
  struct cairn_dev dev;       /* must be first */
  struct cairn_dev *lower;
  pthread_mutex_t lock;       /* guards rules, held and waiting */
  pthread_cond_t released;
  struct fault_rule rules[FAULT_NOPS];
  bool held[FAULT_NOPS];
  unsigned waiting[FAULT_NOPS];
  unsigned delay_us[FAULT_NOPS];
  uint64_t flips;             /* bits flipped (dev_fault_flip) */
};

static const char *const fault_op_names[FAULT_NOPS] = {
  [DEV_FAULT_READ] = "read",
  [DEV_FAULT_WRITE] = "write",
  [DEV_FAULT_FLUSH] = "flush",
};

/* The fault device of a device. */
static inline struct fault_dev *
to_fault_dev (struct cairn_dev *dev)
{
  return (struct fault_dev *) dev;
}

/* Count one operation of kind op; return its injected error, or 0. */
static int CAIRN_WUR
fault_check (struct fault_dev *f, enum dev_fault_op op)
{
  struct fault_rule *rule = &f->rules[op];
  unsigned delay;
  int err = 0;

  pthread_mutex_lock (&f->lock);
  f->waiting[op]++;
  while (f->held[op])
    pthread_cond_wait (&f->released, &f->lock);
  f->waiting[op]--;
  if (rule->firing)
    err = rule->err;
  else if (rule->countdown > 0 && --rule->countdown == 0) {
    err = rule->err;
    rule->firing = rule->sticky;
  }
  delay = f->delay_us[op];
  pthread_mutex_unlock (&f->lock);
  if (delay)
    usleep (delay);

  if (err == 0)
    return 0;
  errno = -err;
  return cairn_fail (err, "%s: injected %s fault: %m",
                     f->dev.name, fault_op_names[op]);
}

/* Read from the lower device unless a read fault fires. */
static int
fault_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct fault_dev *f = to_fault_dev (dev);
  int r;

  r = fault_check (f, DEV_FAULT_READ);
  if (r < 0)
    return r;
  return dev_pread (f->lower, buf, len, off);
}

/* Write to the lower device unless a write fault fires. */
static int
fault_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
              uint64_t off)
{
  struct fault_dev *f = to_fault_dev (dev);
  int r;

  r = fault_check (f, DEV_FAULT_WRITE);
  if (r < 0)
    return r;
  return dev_pwrite (f->lower, buf, len, off);
}

/* Flush the lower device unless a flush fault fires. */
static int
fault_flush (struct cairn_dev *dev)
{
  struct fault_dev *f = to_fault_dev (dev);
  int r;

  r = fault_check (f, DEV_FAULT_FLUSH);
  if (r < 0)
    return r;
  return dev_flush (f->lower);
}

/* Discard on the lower device (never faulted). */
static int
fault_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  return dev_discard (to_fault_dev (dev)->lower, off, len);
}

/* Free the fault device, leaving the lower device open. */
static void
fault_close (struct cairn_dev *dev)
{
  struct fault_dev *f = to_fault_dev (dev);

  pthread_cond_destroy (&f->released);
  pthread_mutex_destroy (&f->lock);
  free (f);
}

static const struct cairn_dev_ops fault_ops = {
  .kind = "fault",
  .pread = fault_pread,
  .pwrite = fault_pwrite,
  .flush = fault_flush,
  .discard = fault_discard,
  .close = fault_close,
};

/* Stack a fault device, with no fault armed, on lower. */
int
dev_fault_create (struct cairn_dev *lower, struct cairn_dev **devp)
{
  struct fault_dev *f;
  int r;

  *devp = NULL;
  f = calloc (1, sizeof *f);
  if (f == NULL)
    return cairn_fail (-errno, "fault device: calloc: %m");
  r = pthread_mutex_init (&f->lock, NULL);
  if (r != 0) {
    free (f);
    return cairn_fail (-r, "fault device: pthread_mutex_init failed");
  }
  pthread_cond_init (&f->released, NULL);
  f->lower = lower;
  f->dev.ops = &fault_ops;
  f->dev.size = lower->size;
  /* The precision keeps the name inside the buffer. */
  snprintf (f->dev.name, sizeof f->dev.name, "fault(%.240s)", lower->name);
  *devp = &f->dev;
  return 0;
}

/* Arm a fault: the nth next op fails with err (and, if sticky, all after). */
void
dev_fault_set (struct cairn_dev *dev, enum dev_fault_op op, uint64_t nth,
               bool sticky, int err)
{
  struct fault_dev *f = to_fault_dev (dev);
  struct fault_rule *rule;

  assert (dev->ops == &fault_ops);
  assert ((unsigned) op < FAULT_NOPS);
  rule = &f->rules[op];

  pthread_mutex_lock (&f->lock);
  rule->countdown = nth;
  rule->sticky = sticky;
  rule->firing = false;
  /* Accept EIO as well as -EIO; 0 would be no error at all. */
  rule->err = err > 0 ? -err : err < 0 ? err : -EIO;
  pthread_mutex_unlock (&f->lock);
}

/* Disarm every fault. */
void
dev_fault_clear (struct cairn_dev *dev)
{
  struct fault_dev *f = to_fault_dev (dev);

  assert (dev->ops == &fault_ops);
  pthread_mutex_lock (&f->lock);
  memset (f->rules, 0, sizeof f->rules);
  pthread_mutex_unlock (&f->lock);
}

/* Hold (or release) every operation of kind op. */
void
dev_fault_hold (struct cairn_dev *dev, enum dev_fault_op op, bool hold)
{
  struct fault_dev *f = to_fault_dev (dev);

  assert (dev->ops == &fault_ops);
  assert ((unsigned) op < FAULT_NOPS);
  pthread_mutex_lock (&f->lock);
  f->held[op] = hold;
  pthread_cond_broadcast (&f->released);
  pthread_mutex_unlock (&f->lock);
}

/* Delay every operation of kind op by us microseconds (0: none). */
void
dev_fault_delay (struct cairn_dev *dev, enum dev_fault_op op, unsigned us)
{
  struct fault_dev *f = to_fault_dev (dev);

  assert (dev->ops == &fault_ops);
  assert ((unsigned) op < FAULT_NOPS);
  pthread_mutex_lock (&f->lock);
  f->delay_us[op] = us;
  pthread_mutex_unlock (&f->lock);
}

/* How many operations of kind op are waiting while held. */
unsigned
dev_fault_waiting (struct cairn_dev *dev, enum dev_fault_op op)
{
  struct fault_dev *f = to_fault_dev (dev);
  unsigned n;

  assert (dev->ops == &fault_ops);
  pthread_mutex_lock (&f->lock);
  n = f->held[op] ? f->waiting[op] : 0;
  pthread_mutex_unlock (&f->lock);
  return n;
}

/* Flip one bit of what the lower device stores at byte off (dev.h). */
int
dev_fault_flip (struct cairn_dev *dev, uint64_t off, unsigned bit)
{
  struct fault_dev *f = to_fault_dev (dev);
  uint8_t byte;
  int r;

  if (bit > 7 || off >= dev->size)
    return cairn_fail (-EINVAL, "%s: no bit %u of byte %" PRIu64 " to flip",
                       dev->name, bit, off);
  pthread_mutex_lock (&f->lock);
  r = dev_pread (f->lower, &byte, 1, off);
  if (r == 0) {
    byte ^= (uint8_t) (1u << bit);
    r = dev_pwrite (f->lower, &byte, 1, off);
  }
  if (r == 0)
    f->flips++;
  pthread_mutex_unlock (&f->lock);
  return r;
}

/* How many bits dev_fault_flip has flipped. */
uint64_t
dev_fault_flips (struct cairn_dev *dev)
{
  struct fault_dev *f = to_fault_dev (dev);
  uint64_t n;

  pthread_mutex_lock (&f->lock);
  n = f->flips;
  pthread_mutex_unlock (&f->lock);
  return n;
}
