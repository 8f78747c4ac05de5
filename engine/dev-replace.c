/* Cairn engine, layer "dev": replacing a member of a pool of several
 * devices (btrfs's `replace -r`, ZFS's `zpool replace`).
 *
 * A replace copies every stripe that member OLD holds onto a new device
 * NEW, at the same offsets (NEW must be at least as large as the end of
 * OLD's last stripe), and then names NEW at OLD's index in every label.
 * It runs below the pool: the trees, the space map and the superblocks
 * are bytes in stripes like any other, so it needs nothing from above.
 *
 * The copy walks the logical address space with a cursor, a piece (at
 * most COPY_STEP bytes, within one stripe unit) at a time, skipping
 * chunks with no stripe on OLD.  Each copy of a piece that lies on OLD
 * is read from another copy of the piece on a present member first, and
 * from OLD only when none reads (dup, single, stripe: OLD holds the only
 * copy; or the other member fails).  The read is copy-level: it is not
 * checked against the blocks' SHA-256 (the dev layer does not know them);
 * a copy that is bad on the member it came from is bad on NEW too, and a
 * scrub after the replace finds and heals it from the other copy.
 *
 * State machine (dev_replace_state; the thread's, under rep.lock):
 *
 *   NONE --start--> RUNNING --copy complete--> FINISHED   (replace_finish)
 *   RUNNING --error--> FAILED --resume--> RUNNING
 *   RUNNING --close or cancel stops the thread--> STOPPED --resume--> RUNNING
 *   (opened with the labels saying "replacing") STOPPED
 *   RUNNING, STOPPED, FAILED --cancel--> CANCELLED
 *
 * Invariants:
 *  C5. While a replace is in progress (rep.active), every write to a copy
 *      on OLD also reaches NEW, everywhere (before and after the cursor),
 *      under io_lock held for reading; a copy step holds it for writing,
 *      so no write lands between the step's read and its write to NEW,
 *      and no write of several copies is seen half done.  So NEW below
 *      the cursor always equals what OLD should hold.
 *  C6. The labels hold the replace (flags, OLD's index, NEW's UUID, a
 *      cursor); a cursor is saved only after NEW is flushed
 *      (labels_update), so what it says is copied is durable on NEW.
 *      Writes reach NEW from the moment it is attached (start, or the
 *      open that finds it), so a saved cursor stays true across restarts.
 *  C7. When OLD is missing while the pool can be written, the labels say
 *      so (LABEL_SOURCE_STALE) before any write: OLD is never read or
 *      written again, even if it comes back, and the replace can then not
 *      be cancelled (NEW holds the only current copy of OLD's data), only
 *      finished, or started again onto another device when NEW is gone.
 *  C8. At the end NEW is member OLD's index in every label (generation +
 *      1), written while no write runs; OLD's own labels are then wiped.
 *      A cut between two label writes leaves labels of two generations:
 *      the open's rule ("Label generations" in dev-chunk.c) takes the
 *      newest, under which every other present device is either still a
 *      member (its UUID at its index), NEW, or no longer in the pool.
 *
 * Writes meanwhile: on a pool opened with every member, or with OLD
 * missing and NEW named, writes go on (C5).  A pool opened degraded (OLD
 * missing, no replace yet) stays read-only above the device until it is
 * reopened, as the pool decided at its open; the replace still runs and
 * restores the missing copies, and a reopen with NEW named is writable.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev.h"
#include "dev-chunk-int.h"

#define COPY_STEP (1024u * 1024)
#define SAVE_BYTES_DEFAULT (64ull * 1024 * 1024)

static const char *const state_names[] = {
  [DEV_REPLACE_NONE] = "none",
  [DEV_REPLACE_RUNNING] = "running",
  [DEV_REPLACE_STOPPED] = "stopped",
  [DEV_REPLACE_FAILED] = "failed",
  [DEV_REPLACE_FINISHED] = "finished",
  [DEV_REPLACE_CANCELLED] = "cancelled",
};

/* The word for a state. */
const char *
dev_replace_state_name (enum dev_replace_state s)
{
  return (unsigned) s < ARRAY_SIZE (state_names) ? state_names[s] : "unknown";
}

/* Ready the replace state of a new device. */
void
replace_init (struct chunk_dev *c)
{
  pthread_mutex_init (&c->rep.lock, NULL);
  pthread_cond_init (&c->rep.cond, NULL);
  c->rep.save_bytes = SAVE_BYTES_DEFAULT;
}

/* Stop the thread, if it runs, and wait for it: it saves the cursor. */
static void
replace_stop (struct chunk_dev *c)
{
  pthread_mutex_lock (&c->rep.lock);
  c->rep.stop = true;
  while (c->rep.running)
    pthread_cond_wait (&c->rep.cond, &c->rep.lock);
  if (c->rep.joinable) {
    pthread_join (c->rep.thread, NULL);
    c->rep.joinable = false;
  }
  c->rep.stop = false;
  pthread_mutex_unlock (&c->rep.lock);
}

/* Stop the thread and free the state (the device is being closed). */
void
replace_fini (struct chunk_dev *c)
{
  replace_stop (c);
  pthread_cond_destroy (&c->rep.cond);
  pthread_mutex_destroy (&c->rep.lock);
}

/* Set the thread's state, with the error message when it failed. */
static void
set_state (struct chunk_dev *c, enum dev_replace_state s, int err)
{
  pthread_mutex_lock (&c->rep.lock);
  c->rep.state = s;
  c->rep.error = err;
  if (err < 0)
    snprintf (c->rep.errmsg, sizeof c->rep.errmsg, "%s", cairn_errmsg ());
  pthread_mutex_unlock (&c->rep.lock);
}

/* Copy the piece of the pool at the cursor onto NEW (io_lock held for
 * writing): the bytes the cursor passes go to *lenp, a whole chunk when
 * none of it is on OLD.
 */
static int
copy_piece (struct chunk_dev *c, uint8_t *buf, uint64_t *lenp)
{
  struct replace *rp = &c->rep;
  uint64_t off = rp->cursor, len;
  const struct chunk *ch = chunk_find (c, off);
  bool on_old = false;

  for (unsigned s = 0; s < c->ncopies * c->width; s++)
    on_old |= ch->stripe[s].member == rp->index;
  len = ch->logical + ch->length - off;
  *lenp = len;
  if (!on_old)
    return 0;
  len = MIN (len, COPY_STEP);
  for (unsigned k = 0; k < c->ncopies; k++) {
    const struct stripe *s;
    uint64_t phys, run;

    chunk_map (c, off, k, &s, &phys, &run);
    len = MIN (len, run);
  }
  *lenp = len;
  for (unsigned k = 0; k < c->ncopies; k++) {
    const struct stripe *s;
    struct cairn_dev *old;
    uint64_t phys, run;
    int r = -ENXIO;

    chunk_map (c, off, k, &s, &phys, &run);
    if (s->member != rp->index)
      continue;
    /* Another member's copy first. */
    for (unsigned j = 0; j < c->ncopies && r < 0; j++) {
      const struct stripe *o;
      uint64_t ophys, orun;

      chunk_map (c, off, j, &o, &ophys, &orun);
      if (o->member != rp->index)
        r = chunk_read_copy (c, buf, len, off, j);
    }
    /* OLD's own copy where there is no other. */
    if (r < 0 && (old = member_dev (c, rp->index)) != NULL)
      r = dev_pread (old, buf, len, phys);
    if (r < 0)
      return cairn_fail (r, "%s: replacing device %u: no copy of pool bytes "
                         "%" PRIu64 "-%" PRIu64 " could be read (%s)",
                         c->dev.name, rp->index, off, off + len - 1,
                         cairn_errmsg ());
    r = dev_pwrite (rp->target, buf, len, phys);
    if (r < 0) {
      __atomic_add_fetch (&c->member[rp->index].write_errors, 1,
                          __ATOMIC_RELAXED);
      return cairn_fail (r, "%s: replacing device %u: writing %s: %s",
                         c->dev.name, rp->index, rp->target->name,
                         cairn_errmsg ());
    }
  }
  return 0;
}

/* End the replace (io_lock held for writing): NEW becomes member OLD's
 * index in every label, and OLD's labels are wiped (C8).
 */
static int
replace_finish (struct chunk_dev *c)
{
  struct replace *rp = &c->rep;
  unsigned i = rp->index;
  struct member *m = &c->member[i];
  struct cairn_dev *old = m->dev, *t = rp->target;
  bool old_stale = rp->source_stale;
  int r;

  r = dev_flush (t);
  if (r < 0)
    return cairn_fail (r, "%s: replacing device %u: flushing %s: %s",
                       c->dev.name, i, t->name, cairn_errmsg ());
  if (old) {
    /* Readers may still hold it: closed with the device. */
    c->others[c->nothers] = old;
    c->others_own[c->nothers++] = m->own;
  }
  memcpy (m->uuid, rp->uuid, 16);
  m->size = t->size / STRIPE_LEN * STRIPE_LEN;
  m->own = rp->own_target;
  __atomic_store_n (&m->dev, t, __ATOMIC_RELEASE);
  __atomic_store_n (&rp->active, false, __ATOMIC_RELEASE);
  rp->target = NULL;
  rp->own_target = false;
  __atomic_store_n (&rp->source_stale, false, __ATOMIC_RELAXED);
  count_missing (c);
  c->readonly = c->members_rdonly || c->missing > 0;
  r = labels_update (c);
  if (r < 0)
    return r;
  /* A dead OLD cannot be wiped; a stale one is left alone too: no label
   * names it any more either way.
   */
  if (old && !old_stale && label_wipe (old) < 0)
    cairn_error_clear ();
  return 0;
}

/* Copy at most max_bytes further (dev.h). */
int
dev_chunk_replace_step (struct cairn_dev *dev, uint64_t max_bytes,
                        bool *donep)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  struct replace *rp = &c->rep;
  CLEANUP_FREE uint8_t *buf = malloc (COPY_STEP);
  uint64_t moved = 0;
  bool finished = false;
  int r = 0;

  *donep = false;
  if (!dev_is_chunked (dev))
    return cairn_fail (-EINVAL, "%s is a single device", dev->name);
  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory replacing a device");
  while (r == 0 && !*donep && moved < max_bytes) {
    uint64_t len = 0;

    pthread_rwlock_wrlock (&c->io_lock);
    if (!rp->active)
      *donep = true;
    else if (rp->target == NULL)
      r = cairn_fail (-ENODEV, "%s: the device replacing device %u was not "
                      "named when the pool was opened", dev->name, rp->index);
    else if (rp->cursor < dev->size) {
      r = copy_piece (c, buf, &len);
      if (r == 0)
        __atomic_store_n (&rp->cursor, rp->cursor + len, __ATOMIC_RELAXED);
      if (r == 0 && rp->cursor - rp->saved >= rp->save_bytes &&
          rp->cursor < dev->size)
        r = labels_update (c);
    }
    else {
      r = replace_finish (c);
      *donep = finished = r == 0;
    }
    pthread_rwlock_unlock (&c->io_lock);
    moved += len;
  }
  if (r < 0 || finished)
    set_state (c, r < 0 ? DEV_REPLACE_FAILED : DEV_REPLACE_FINISHED, r);
  return r;
}

/* The replace's thread: copies until done, failed or told to stop. */
static void *
replace_thread (void *arg)
{
  struct chunk_dev *c = arg;
  bool done = false, stop = false;
  int r = 0;

  while (!done && !stop && r == 0) {
    r = dev_chunk_replace_step (&c->dev, COPY_STEP, &done);
    pthread_mutex_lock (&c->rep.lock);
    stop = c->rep.stop;
    pthread_mutex_unlock (&c->rep.lock);
  }
  /* An end or an error has its state from dev_chunk_replace_step. */
  if (r == 0 && !done) {
    /* Stopped: save the cursor so that the next open resumes from it. */
    pthread_rwlock_wrlock (&c->io_lock);
    if (c->rep.active && c->rep.cursor != c->rep.saved)
      r = labels_update (c);
    pthread_rwlock_unlock (&c->io_lock);
    set_state (c, r < 0 ? DEV_REPLACE_FAILED : DEV_REPLACE_STOPPED, r);
  }
  pthread_mutex_lock (&c->rep.lock);
  c->rep.running = false;
  pthread_cond_broadcast (&c->rep.cond);
  pthread_mutex_unlock (&c->rep.lock);
  return NULL;
}

/* Start the thread (none runs). */
static int
thread_start (struct chunk_dev *c)
{
  int r;

  pthread_mutex_lock (&c->rep.lock);
  if (c->rep.joinable) {
    pthread_join (c->rep.thread, NULL);
    c->rep.joinable = false;
  }
  c->rep.state = DEV_REPLACE_RUNNING;
  c->rep.errmsg[0] = '\0';
  c->rep.running = true;
  if (c->rep.started == 0)
    c->rep.started = (int64_t) time (NULL);
  r = pthread_create (&c->rep.thread, NULL, replace_thread, c);
  if (r != 0) {
    c->rep.running = false;
    c->rep.state = DEV_REPLACE_STOPPED;
    pthread_mutex_unlock (&c->rep.lock);
    return cairn_fail (-r, "starting a replace's thread: %s", strerror (r));
  }
  c->rep.joinable = true;
  pthread_mutex_unlock (&c->rep.lock);
  return 0;
}

/* Is a thread copying? */
static bool
thread_running (struct chunk_dev *c)
{
  bool running;

  pthread_mutex_lock (&c->rep.lock);
  running = c->rep.running;
  pthread_mutex_unlock (&c->rep.lock);
  return running;
}

/* Is target, by its label, one of the pool's members? */
static bool
target_is_member (struct chunk_dev *c, struct cairn_dev *target)
{
  uint8_t head[48];

  for (unsigned i = 0; i < c->nmembers; i++)
    if (c->member[i].dev == target)
      return true;
  if (target->size < sizeof head ||
      dev_pread (target, head, sizeof head, 0) < 0) {
    cairn_error_clear ();
    return false;
  }
  if (memcmp (head, LABEL_MAGIC, 8) != 0 ||
      memcmp (head + 16, c->pool_uuid, 16) != 0)
    return false;
  for (unsigned i = 0; i < c->nmembers; i++)
    if (memcmp (head + 32, c->member[i].uuid, 16) == 0)
      return true;
  return false;
}

/* Begin replacing member old by target, with no thread (dev.h). */
int
dev_chunk_replace_begin (struct cairn_dev *dev, unsigned old,
                         struct cairn_dev *target, bool own_target)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  struct replace *rp = &c->rep;
  uint64_t need;
  int r;

  if (!dev_is_chunked (dev) || old >= c->nmembers)
    return cairn_fail (-EINVAL, "%s has no device %u", dev->name, old);
  if (c->members_rdonly)
    return cairn_fail (-EROFS, "%s was opened read-only: a replace writes",
                       dev->name);
  if (target_is_member (c, target))
    return cairn_fail (-EINVAL, "%s is a device of this pool already",
                       target->name);
  need = member_bytes_needed (c, old);
  if (target->size < need)
    return cairn_fail (-ENOSPC, "%s is %" PRIu64 " bytes: replacing device "
                       "%u takes at least %" PRIu64, target->name,
                       target->size, old, need);
  if (thread_running (c))
    return cairn_fail (-EBUSY, "device %u is being replaced: wait for it "
                       "or cancel it first", rp->index);
  pthread_rwlock_wrlock (&c->io_lock);
  if (rp->active && (rp->target || rp->index != old)) {
    r = cairn_fail (-EBUSY, "device %u is being replaced%s%s: resume or "
                    "cancel that first", rp->index,
                    rp->target ? " by " : "",
                    rp->target ? rp->target->name : "");
    goto out;
  }
  /* A replace whose NEW was not named starts again onto target, from
   * the start: nothing says what the lost NEW had.
   */
  rp->index = old;
  r = uuid_generate (rp->uuid);
  if (r < 0)
    goto out;
  rp->target = target;
  rp->own_target = own_target;
  rp->source_stale |= member_dev (c, old) == NULL;      /* C7 */
  rp->cursor = rp->saved = 0;
  __atomic_store_n (&rp->active, true, __ATOMIC_RELEASE);
  count_missing (c);
  c->readonly = c->members_rdonly || c->missing > 0;
  r = labels_update (c);
  if (r < 0) {
    /* The labels may say "replacing" onto a device nobody will name:
     * the open then asks for it or for a degraded open, which allows a
     * new start.
     */
    rp->target = NULL;
    rp->own_target = false;
    count_missing (c);
    c->readonly = c->members_rdonly || c->missing > 0;
  }
 out:
  pthread_rwlock_unlock (&c->io_lock);
  if (r == 0) {
    pthread_mutex_lock (&rp->lock);
    rp->state = DEV_REPLACE_STOPPED;
    rp->started = (int64_t) time (NULL);
    pthread_mutex_unlock (&rp->lock);
  }
  return r;
}

/* Start replacing member old by target (dev.h). */
int
dev_chunk_replace_start (struct cairn_dev *dev, unsigned old,
                         struct cairn_dev *target, bool own_target)
{
  int r = dev_chunk_replace_begin (dev, old, target, own_target);

  return r < 0 ? r : thread_start (to_chunk_dev (dev));
}

/* Start the thread of a replace in progress (dev.h). */
int
dev_chunk_replace_resume (struct cairn_dev *dev)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  bool active, target;

  if (!dev_is_chunked (dev))
    return 0;
  pthread_rwlock_rdlock (&c->io_lock);
  active = c->rep.active;
  target = c->rep.target != NULL;
  pthread_rwlock_unlock (&c->io_lock);
  if (!active || thread_running (c))
    return 0;
  if (!target)
    return cairn_fail (-ENODEV, "%s: the device replacing device %u was not "
                       "named when the pool was opened: start the replace "
                       "again onto a device", dev->name, c->rep.index);
  if (c->members_rdonly)
    return cairn_fail (-EROFS, "%s was opened read-only: the replace in "
                       "progress waits for a writable open", dev->name);
  return thread_start (c);
}

/* Cancel the replace in progress (dev.h). */
int
dev_chunk_replace_cancel (struct cairn_dev *dev)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  struct replace *rp = &c->rep;
  struct cairn_dev *t;
  bool own;
  int r;

  if (!dev_is_chunked (dev))
    return cairn_fail (-ENOENT, "%s is a single device: nothing is being "
                       "replaced", dev->name);
  replace_stop (c);
  pthread_rwlock_wrlock (&c->io_lock);
  if (!rp->active) {
    pthread_rwlock_unlock (&c->io_lock);
    return cairn_fail (-ENOENT, "%s: no device is being replaced", dev->name);
  }
  if (rp->source_stale) {
    pthread_rwlock_unlock (&c->io_lock);
    return cairn_fail (-EBUSY, "device %u missed writes while it was being "
                       "replaced: the replace cannot be cancelled, only "
                       "finished (or started again onto another device if "
                       "its new device is gone)", rp->index);
  }
  if (c->members_rdonly) {
    pthread_rwlock_unlock (&c->io_lock);
    return cairn_fail (-EROFS, "%s was opened read-only", dev->name);
  }
  t = rp->target;
  own = rp->own_target;
  __atomic_store_n (&rp->active, false, __ATOMIC_RELEASE);
  rp->target = NULL;
  rp->own_target = false;
  count_missing (c);
  c->readonly = c->members_rdonly || c->missing > 0;
  r = labels_update (c);
  pthread_rwlock_unlock (&c->io_lock);
  if (r < 0)
    return r;
  if (t && label_wipe (t) < 0)
    cairn_error_clear ();
  if (own)
    dev_close (t);
  set_state (c, DEV_REPLACE_CANCELLED, 0);
  return 0;
}

/* Wait until the thread stops (dev.h). */
int
dev_chunk_replace_wait (struct cairn_dev *dev, bool (*stop) (void *opaque),
                        void *opaque)
{
  struct chunk_dev *c = to_chunk_dev (dev);

  if (!dev_is_chunked (dev))
    return 0;
  pthread_mutex_lock (&c->rep.lock);
  while (c->rep.running) {
    struct timespec ts;

    clock_gettime (CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait (&c->rep.cond, &c->rep.lock, &ts);
    if (c->rep.running && stop && stop (opaque)) {
      pthread_mutex_unlock (&c->rep.lock);
      return -ECANCELED;
    }
  }
  pthread_mutex_unlock (&c->rep.lock);
  return 0;
}

/* The replace's state (dev.h). */
void
dev_chunk_replace_status (struct cairn_dev *dev, struct dev_replace_status *st)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  struct replace *rp = &c->rep;

  memset (st, 0, sizeof *st);
  pthread_rwlock_rdlock (&c->io_lock);
  st->index = rp->index;
  memcpy (st->uuid, rp->uuid, 16);
  if (rp->target)
    snprintf (st->target, sizeof st->target, "%s", rp->target->name);
  else if (!rp->active && c->member[rp->index].dev &&
           memcmp (c->member[rp->index].uuid, rp->uuid, 16) == 0)
    snprintf (st->target, sizeof st->target, "%s",
              c->member[rp->index].dev->name);      /* it ended */
  st->source_missing = rp->active && member_dev (c, rp->index) == NULL;
  st->done = __atomic_load_n (&rp->cursor, __ATOMIC_RELAXED);
  st->total = dev->size;
  pthread_rwlock_unlock (&c->io_lock);
  pthread_mutex_lock (&rp->lock);
  st->state = rp->state;
  st->started = rp->started;
  if (rp->state == DEV_REPLACE_FAILED)
    snprintf (st->error, sizeof st->error, "%s", rp->errmsg);
  pthread_mutex_unlock (&rp->lock);
  if (st->state == DEV_REPLACE_FINISHED)
    st->done = st->total;
}

/* Save the cursor after this many bytes (dev.h). */
void
dev_chunk_replace_set_save (struct cairn_dev *dev, uint64_t bytes)
{
  struct chunk_dev *c = to_chunk_dev (dev);

  pthread_rwlock_wrlock (&c->io_lock);
  c->rep.save_bytes = bytes ? bytes : SAVE_BYTES_DEFAULT;
  pthread_rwlock_unlock (&c->io_lock);
}
