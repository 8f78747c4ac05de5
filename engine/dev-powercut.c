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
 *  6. Several power-cut devices can share one power supply
 *     (dev_powercut_create_shared): the members of a pool of several
 *     devices, each over its own lower device.  They share the op counter
 *     that arming counts, the generator and the cut: an armed cut on any
 *     member's operation, or a cut asked of any member, cuts every member
 *     at that one moment, each member's pending list treated as in 5 in
 *     the order the members were created.
 *  7. A cut policy (dev_powercut_set_policy) chooses which pending entries
 *     reach lower at a cut in place of 5's coin per entry: none, all, all
 *     but one, one, a prefix in order (what replaying a dm-log-writes log
 *     up to an entry gives), or a coin of a probability drawn for the cut.
 *     Between them they reach every subset of the writes since the last
 *     completed flush, and the corners (nothing lost, one lost, one kept)
 *     that a fair coin over hundreds of writes almost never gives.  The
 *     tear policy makes a torn write keep any subset of its sectors, not
 *     just a prefix: a write of several blocks cut part-way on a disk that
 *     writes a request's sectors in any order.  The default policy is 5
 *     exactly, with the same choices for the same seed.
 *
 * The device has no FUA: the engine's durability points are flushes (a
 * FUA write to a volume is a commit, which ends with one), so "durable on
 * return" means "nothing pending once it returned": dev_powercut_pending
 * says how many entries a cut could still lose.
 *
 * One mutex per power supply guards its devices, I/O to lower included,
 * so that a cut is atomic with respect to every other operation.  This is
 * a test device: simplicity beats concurrency here.
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

#define POWERCUT_MEMBERS 8

struct powercut_dev;

/* The power supply that one or more power-cut devices share (6). */
struct powercut_power {
  pthread_mutex_t lock;       /* guards everything below, and the members'
                                 pending lists */
  struct powercut_dev *member[POWERCUT_MEMBERS];  /* in creation order */
  unsigned nmembers;
  uint64_t rng;               /* splitmix64 state */
  uint64_t writes;            /* writes acknowledged so far */
  uint64_t ops;               /* writes and flushes acknowledged so far */
  uint64_t cut_at;            /* the op number that cuts; 0: none armed */
  bool cut;                   /* the power is gone */
  enum dev_powercut_keep keep;
  enum dev_powercut_tear tear;
};

struct powercut_dev {
  struct cairn_dev dev;       /* must be first */
  struct cairn_dev *lower;
  struct powercut_power *power;
  struct pending *pending;    /* in the order they were acknowledged */
  size_t npending, cap;
};

/* The power-cut device of a device. */
static inline struct powercut_dev *
to_powercut_dev (struct cairn_dev *dev)
{
  return (struct powercut_dev *) dev;
}

/* Next number of the power supply's splitmix64 generator. */
static uint64_t
powercut_random (struct powercut_power *pw)
{
  uint64_t z = (pw->rng += UINT64_C (0x9e3779b97f4a7c15));

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

/* Choose which of the n pending entries of a member reach lower (7). */
static void
powercut_choose (struct powercut_power *pw, size_t n, bool *apply)
{
  size_t i, k;
  uint64_t p;

  switch (pw->keep) {
  case DEV_POWERCUT_KEEP_HALF:
    for (i = 0; i < n; i++)
      apply[i] = powercut_random (pw) & 1;
    break;
  case DEV_POWERCUT_KEEP_RANDOM:
    /* p in 0/64 .. 64/64, both ends included. */
    p = powercut_random (pw) % 65;
    for (i = 0; i < n; i++)
      apply[i] = powercut_random (pw) % 64 < p;
    break;
  case DEV_POWERCUT_KEEP_NONE:
  case DEV_POWERCUT_KEEP_ALL:
    for (i = 0; i < n; i++)
      apply[i] = pw->keep == DEV_POWERCUT_KEEP_ALL;
    break;
  case DEV_POWERCUT_KEEP_ALL_BUT_ONE:
  case DEV_POWERCUT_KEEP_ONE:
    k = n ? powercut_random (pw) % n : 0;
    for (i = 0; i < n; i++)
      apply[i] = (i == k) == (pw->keep == DEV_POWERCUT_KEEP_ONE);
    break;
  case DEV_POWERCUT_KEEP_PREFIX:
  case DEV_POWERCUT_KEEP_COUNT:
    k = powercut_random (pw) % (n + 1);
    for (i = 0; i < n; i++)
      apply[i] = i < k;
    break;
  }
}

/* Apply the torn write p as the tear policy says: a prefix of 0 .. len - 1
 * bytes in whole sectors, or any subset of its sectors but all of them.
 * A failing lower device loses the rest of the write: nobody is left to
 * tell.
 */
static void
powercut_tear (struct powercut_power *pw, struct powercut_dev *pc,
               const struct pending *p)
{
  uint64_t sectors = DIV_ROUND_UP (p->len, POWERCUT_SECTOR), s, run, n;

  if (pw->tear == DEV_POWERCUT_TEAR_PREFIX || sectors < 2) {
    struct pending prefix = *p;

    prefix.len = powercut_random (pw) % sectors * POWERCUT_SECTOR;
    if (powercut_apply (pc, &prefix, prefix.len) < 0)
      return;
    return;
  }
  /* One sector chosen to be lost, each other one kept with p = 1/2, each
   * run of kept sectors applied as one write.
   */
  n = powercut_random (pw) % sectors;
  for (s = 0; s < sectors; s = run) {
    struct pending piece;

    for (run = s; run < sectors && run != n && (powercut_random (pw) & 1);
         run++)
      ;
    if (run > s) {
      piece = *p;
      piece.off = p->off + s * POWERCUT_SECTOR;
      piece.data = p->data + s * POWERCUT_SECTOR;
      piece.len = MIN (p->len, run * POWERCUT_SECTOR) - s * POWERCUT_SECTOR;
      if (powercut_apply (pc, &piece, piece.len) < 0)
        return;
    }
    else
      run = s + 1;
  }
}

/* Lose power on one member: apply the chosen subset of its pending
 * entries, maybe tear one.
 */
static void
powercut_cut_member (struct powercut_power *pw, struct powercut_dev *pc,
                     bool allow_tear)
{
  CLEANUP_FREE bool *apply = NULL;
  size_t i, napplied = 0, torn = SIZE_MAX;

  apply = calloc (pc->npending ? pc->npending : 1, sizeof *apply);
  if (apply == NULL) {
    /* Losing every pending write is one of the allowed outcomes. */
    powercut_drop_pending (pc);
    return;
  }

  powercut_choose (pw, pc->npending, apply);
  for (i = 0; i < pc->npending; i++)
    if (apply[i] && pc->pending[i].data != NULL)
      napplied++;

  /* With p = 1/2, tear one of the applied writes, chosen uniformly. */
  if (allow_tear && napplied > 0 && (powercut_random (pw) & 1)) {
    uint64_t k = powercut_random (pw) % napplied;

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
    if (i == torn) {
      powercut_tear (pw, pc, &pc->pending[i]);
      continue;
    }
    /* A failing lower device loses the write: nobody is left to tell. */
    if (powercut_apply (pc, &pc->pending[i], pc->pending[i].len) < 0)
      continue;
  }
  powercut_drop_pending (pc);
}

/* Lose power on every member of the supply, at this one moment. */
static void
powercut_do_cut (struct powercut_power *pw, bool allow_tear)
{
  if (pw->cut)
    return;
  pw->cut = true;
  pw->cut_at = 0;
  for (unsigned m = 0; m < pw->nmembers; m++)
    powercut_cut_member (pw, pw->member[m], allow_tear);
}

/* Read lower, then lay the pending entries over it in order. */
static int
powercut_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  uint8_t *out = buf;
  uint64_t end = off + len, start, stop;
  int r;

  pthread_mutex_lock (&pc->power->lock);
  if (pc->power->cut) {
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
  pthread_mutex_unlock (&pc->power->lock);
  return r;
}

/* Keep a copy of the write as pending, or cut if this is the armed write. */
static int
powercut_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
                 uint64_t off)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  struct powercut_power *pw = pc->power;
  uint8_t *copy;
  int r;

  pthread_mutex_lock (&pw->lock);
  if (pw->cut_at != 0 && pw->ops + 1 == pw->cut_at)
    powercut_do_cut (pw, true);
  if (pw->cut) {
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
  pw->writes++;
  pw->ops++;

 out:
  pthread_mutex_unlock (&pw->lock);
  return r;
}

/* Apply every pending entry to lower in order, then flush lower. */
static int
powercut_flush (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  struct powercut_power *pw = pc->power;
  size_t i = 0;
  int r = 0;

  pthread_mutex_lock (&pw->lock);
  if (pw->cut_at != 0 && pw->ops + 1 == pw->cut_at)
    powercut_do_cut (pw, true);
  if (pw->cut) {
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
    pw->ops++;

 out:
  pthread_mutex_unlock (&pw->lock);
  return r;
}

/* Keep the discard as a pending entry. */
static int
powercut_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  int r;

  pthread_mutex_lock (&pc->power->lock);
  if (pc->power->cut)
    r = powercut_lost ();
  else
    r = powercut_push (pc, off, len, NULL);
  pthread_mutex_unlock (&pc->power->lock);
  return r;
}

/* Free the device and its pending writes, leaving lower open; the power
 * supply goes with its last member.
 */
static void
powercut_close (struct cairn_dev *dev)
{
  struct powercut_dev *pc = to_powercut_dev (dev);
  struct powercut_power *pw = pc->power;
  unsigned m, left;

  pthread_mutex_lock (&pw->lock);
  powercut_drop_pending (pc);
  free (pc->pending);
  for (m = 0; m < pw->nmembers && pw->member[m] != pc; m++)
    ;
  assert (m < pw->nmembers);
  memmove (&pw->member[m], &pw->member[m + 1],
           (pw->nmembers - m - 1) * sizeof pw->member[0]);
  left = --pw->nmembers;
  pthread_mutex_unlock (&pw->lock);
  free (pc);
  if (left == 0) {
    pthread_mutex_destroy (&pw->lock);
    free (pw);
  }
}

static const struct cairn_dev_ops powercut_ops = {
  .kind = "powercut",
  .pread = powercut_pread,
  .pwrite = powercut_pwrite,
  .flush = powercut_flush,
  .discard = powercut_discard,
  .close = powercut_close,
};

/* A power-cut device on lower, a member of supply pw (locked by the
 * caller when it has other members already).
 */
static int
powercut_new (struct cairn_dev *lower, struct powercut_power *pw,
              struct cairn_dev **devp)
{
  struct powercut_dev *pc;

  if (pw->nmembers == POWERCUT_MEMBERS)
    return cairn_fail (-EINVAL, "power-cut device: at most %u devices share "
                       "a power supply", POWERCUT_MEMBERS);
  pc = calloc (1, sizeof *pc);
  if (pc == NULL)
    return cairn_fail (-errno, "power-cut device: calloc: %m");
  pc->lower = lower;
  pc->power = pw;
  pc->dev.ops = &powercut_ops;
  pc->dev.size = lower->size;
  /* The precision keeps the name inside the buffer. */
  snprintf (pc->dev.name, sizeof pc->dev.name, "powercut(%.240s)",
            lower->name);
  pw->member[pw->nmembers++] = pc;
  *devp = &pc->dev;
  return 0;
}

/* Stack a power-cut device with the given seed on lower. */
int
dev_powercut_create (struct cairn_dev *lower, uint64_t seed,
                     struct cairn_dev **devp)
{
  struct powercut_power *pw;
  int r;

  *devp = NULL;
  pw = calloc (1, sizeof *pw);
  if (pw == NULL)
    return cairn_fail (-errno, "power-cut device: calloc: %m");
  r = pthread_mutex_init (&pw->lock, NULL);
  if (r != 0) {
    free (pw);
    return cairn_fail (-r, "power-cut device: pthread_mutex_init failed");
  }
  pw->rng = seed;
  pw->keep = DEV_POWERCUT_KEEP_HALF;
  pw->tear = DEV_POWERCUT_TEAR_PREFIX;
  r = powercut_new (lower, pw, devp);
  if (r < 0) {
    pthread_mutex_destroy (&pw->lock);
    free (pw);
  }
  return r;
}

/* Stack a power-cut device on lower that shares peer's power supply. */
int
dev_powercut_create_shared (struct cairn_dev *lower, struct cairn_dev *peer,
                            struct cairn_dev **devp)
{
  struct powercut_power *pw;
  int r;

  *devp = NULL;
  if (peer->ops != &powercut_ops)
    return cairn_fail (-EINVAL, "%s is not a power-cut device", peer->name);
  pw = to_powercut_dev (peer)->power;
  pthread_mutex_lock (&pw->lock);
  if (pw->cut)
    r = powercut_lost ();
  else
    r = powercut_new (lower, pw, devp);
  pthread_mutex_unlock (&pw->lock);
  return r;
}

/* Choose how the next cut of dev's power supply picks what survives. */
void
dev_powercut_set_policy (struct cairn_dev *dev, enum dev_powercut_keep keep,
                         enum dev_powercut_tear tear)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;

  assert (dev->ops == &powercut_ops);
  assert (keep < DEV_POWERCUT_KEEP_COUNT && tear < DEV_POWERCUT_TEAR_COUNT);
  pthread_mutex_lock (&pw->lock);
  pw->keep = keep;
  pw->tear = tear;
  pthread_mutex_unlock (&pw->lock);
}

/* The name of a keep policy, for messages. */
const char *
dev_powercut_keep_name (enum dev_powercut_keep keep)
{
  static const char *const names[DEV_POWERCUT_KEEP_COUNT] = {
    [DEV_POWERCUT_KEEP_HALF] = "half",
    [DEV_POWERCUT_KEEP_RANDOM] = "random",
    [DEV_POWERCUT_KEEP_NONE] = "none",
    [DEV_POWERCUT_KEEP_ALL] = "all",
    [DEV_POWERCUT_KEEP_ALL_BUT_ONE] = "all-but-one",
    [DEV_POWERCUT_KEEP_ONE] = "one",
    [DEV_POWERCUT_KEEP_PREFIX] = "prefix",
  };

  return keep < DEV_POWERCUT_KEEP_COUNT ? names[keep] : "?";
}

/* Cut the power just before the nth next write or flush; 0 disarms. */
void
dev_powercut_arm (struct cairn_dev *dev, uint64_t nth_op)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  pw->cut_at = nth_op == 0 ? 0 : pw->ops + nth_op;
  pthread_mutex_unlock (&pw->lock);
}

/* Cut the power now. */
void
dev_powercut_cut (struct cairn_dev *dev, bool allow_tear)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  powercut_do_cut (pw, allow_tear);
  pthread_mutex_unlock (&pw->lock);
}

/* Has the power been cut? */
bool
dev_powercut_is_cut (struct cairn_dev *dev)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;
  bool cut;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  cut = pw->cut;
  pthread_mutex_unlock (&pw->lock);
  return cut;
}

/* Number of writes acknowledged so far. */
uint64_t
dev_powercut_writes (struct cairn_dev *dev)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;
  uint64_t n;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  n = pw->writes;
  pthread_mutex_unlock (&pw->lock);
  return n;
}

/* Number of writes and flushes acknowledged so far. */
uint64_t
dev_powercut_ops (struct cairn_dev *dev)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;
  uint64_t n;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  n = pw->ops;
  pthread_mutex_unlock (&pw->lock);
  return n;
}

/* Number of entries a cut could lose now, over the whole power supply. */
size_t
dev_powercut_pending (struct cairn_dev *dev)
{
  struct powercut_power *pw = to_powercut_dev (dev)->power;
  size_t n = 0;

  assert (dev->ops == &powercut_ops);
  pthread_mutex_lock (&pw->lock);
  for (unsigned m = 0; m < pw->nmembers; m++)
    n += pw->member[m]->npending;
  pthread_mutex_unlock (&pw->lock);
  return n;
}
