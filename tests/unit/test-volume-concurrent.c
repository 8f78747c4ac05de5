/* Unit tests for volumes under concurrency: threads share one pool, as
 * nbdkit's PARALLEL thread model has them (DESIGN §2.6), with the commit
 * thread and the background reclaim running too.
 *
 *   own_volumes: OWN_WRITERS threads each own a volume and write (unaligned
 *   half of the time), zero, trim, flush and snapshot it, read and delete
 *   their snapshots, clone them and write the clones, read each other's
 *   snapshots (also as their writer deletes them) and step reclaim, each
 *   checking every read against its models at once.  Then the pool is
 *   reopened, every state compared byte for byte and everything deleted:
 *   every block must come back, with fsck clean.
 *
 *   shared_volume_snapshot: SH_THREADS threads write disjoint chunks of one
 *   volume, each block carrying (thread, block, version), while a thread
 *   takes snapshots: every block of one holds at least the newest version
 *   acknowledged before the request (DESIGN §2.3) and at most the newest
 *   started before the call returned (a write in flight may or may not be
 *   in it), and a snapshot never changes.
 *
 *   snapshot_holds_no_write_begun_after_it (and live_clone_...): with two
 *   commits in flight (a flush held), a write that begins after a snapshot
 *   (a clone of the live volume) was requested waits for its freeze and is
 *   not in it (SB-1, DESIGN §2.3).
 *
 * The pool is on the memory device, which takes no lock (dev-mem.c): the
 * engine's own locks are all that orders the threads, and the shared
 * machine's disk is spared.  Criterion asserts in the test's own thread
 * only, so a worker keeps its first failure and stops the others, and the
 * test fails with it after joining them.
 *
 * The seed is printed (test-util.h) and each thread's generator drawn from
 * it: CAIRN_TEST_SEED=N replays every thread's choices but not how the
 * threads interleave, which is the scheduler's (run a failing seed several
 * times).  CAIRN_TEST_SCALE=N does N times the work:
 *
 *   CAIRN_TEST_SEED=7 CAIRN_TEST_SCALE=10 ./tests/unit/test-volume \
 *     --filter 'volume_concurrent/own_volumes'
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "catalog-int.h"
#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

/* A thread's name, its first failure, and the test's flag that stops every
 * thread once one failed.
 */
struct who {
  char name[24];
  int *stop;
  char fail[1024];
};

/* Keep t's first failure and stop every thread; false. */
static bool __attribute__ ((format (printf, 2, 3)))
thread_fail (struct who *t, const char *fmt, ...)
{
  va_list ap;

  if (t->fail[0] == '\0') {
    va_start (ap, fmt);
    vsnprintf (t->fail, sizeof t->fail, fmt, ap);
    va_end (ap);
  }
  __atomic_store_n (t->stop, 1, __ATOMIC_RELEASE);
  return false;
}

/* Has a thread of t's test failed? */
static bool
stopped (const struct who *t)
{
  return __atomic_load_n (t->stop, __ATOMIC_ACQUIRE) != 0;
}

/* Read [off, off + len) of h (named what) into buf and compare it with
 * model + off: the first differing byte fails t.
 */
static bool
read_matches (struct who *t, struct cairn_volume *h, const char *what,
              const uint8_t *model, uint64_t off, uint64_t len, uint8_t *buf)
{
  uint64_t i = 0;

  if (vol_pread (h, buf, (uint32_t) len, off) < 0)
    return thread_fail (t, "%s: reading %s, %" PRIu64 " bytes at %" PRIu64
                        ": %s", t->name, what, len, off, cairn_errmsg ());
  if (memcmp (buf, model + off, len) == 0)
    return true;
  while (buf[i] == model[off + i])
    i++;
  return thread_fail (t, "%s: %s differs at byte %" PRIu64 " (block %" PRIu64
                      "): expected 0x%02x, got 0x%02x (read of %" PRIu64
                      " bytes at %" PRIu64 ")", t->name, what, off + i,
                      (off + i) / BLOCK_SIZE, model[off + i], buf[i], len,
                      off);
}

/* Close the pool, check it with fsck and open it again. */
static struct cairn_pool *
reopen_pool (struct cairn_pool *pool, struct cairn_dev *dev, const char *when)
{
  cr_assert_eq (pool_close (pool), 0, "%s: %s", when, cairn_errmsg ());
  assert_fsck_clean (dev, when);
  return pool_open_ok (dev);
}

/* Everything is deleted: reclaim it, across reopens, find the pool as it
 * was empty (base), close it and check it with fsck.
 */
static void
assert_all_space_back (struct cairn_pool *pool, struct cairn_dev *dev,
                       uint64_t base, const char *test)
{
  uint64_t used;

  for (int i = 0; i < 2; i++) {
    cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s: %s", test,
                  cairn_errmsg ());
    pool = reopen_pool (pool, dev, "after deleting everything");
  }
  used = pool_blocks_in_use (pool);
  cr_assert_eq (used, base, "%s: %" PRIu64 " blocks in use after deleting "
                "everything, %" PRIu64 " in the empty pool", test, used, base);
  cr_assert_eq (pool_close (pool), 0, "%s: %s", test, cairn_errmsg ());
  assert_fsck_clean (dev, test);
}

/* ------------------------------------------------------------ own_volumes */

#define OWN_WRITERS 5
#define OWN_VSIZE ((2u << 20) + 1536)   /* ends inside a block */
#define OWN_STEPS 300u                  /* per writer, at scale 1 */
#define OWN_SNAPS 4                     /* kept by a writer at once */
#define OWN_CLONES 2
#define OWN_MAXIO (192u * 1024)

/* What a writer does in a step (own_ops has how often, and how). */
enum own_op {
  OWN_WRITE, OWN_ZERO, OWN_TRIM, OWN_READ, OWN_FLUSH, OWN_SNAP,
  OWN_SNAPREAD, OWN_SNAPDEL, OWN_CLONE, OWN_CLONEDEL, OWN_PEEK, OWN_RECLAIM,
  OWN_OPS
};

/* A volume, snapshot or clone and its model. */
struct own_state {
  char name[24];                /* "wT", "wT@sN" or "wT-cN" */
  uint8_t *bytes;               /* OWN_VSIZE; a snapshot's never change */
  struct cairn_volume *h;       /* the volume's or clone's handle */
  unsigned refs;                /* a snapshot's: its writer's, and other
                                   writers' while they read it (lock) */
  bool deleted;                 /* a snapshot its writer deletes (lock) */
};

struct own_writer {
  struct who t;
  struct cairn_pool *pool;
  struct own_writer *all;       /* every writer */
  unsigned idx, steps;
  struct rng r;
  struct own_state live;
  pthread_mutex_t lock;         /* snaps and nsnaps, against other writers */
  struct own_state *snaps[OWN_SNAPS];
  struct own_state clones[OWN_CLONES];
  unsigned nsnaps, nclones, next;
  uint8_t *buf;                 /* OWN_VSIZE */
  unsigned n[OWN_OPS], n_gone;
};

/* Drop a reference to snapshot s (its writer's lock held, or s unshared). */
static void
own_put (struct own_state *s)
{
  if (--s->refs == 0) {
    free (s->bytes);
    free (s);
  }
}

/* A range of up to OWN_MAXIO bytes, block-aligned half of the time. */
static void
own_range (struct rng *r, uint64_t *offp, uint64_t *lenp)
{
  uint64_t off = rng_below (r, OWN_VSIZE), len = 1 + rng_below (r, OWN_MAXIO);

  if (rng_below (r, 2)) {
    off &= ~(uint64_t) (BLOCK_SIZE - 1);
    len = DIV_ROUND_UP (len, BLOCK_SIZE) * BLOCK_SIZE;
  }
  *offp = off;
  *lenp = MIN (len, OWN_VSIZE - off);
}

/* Write data (zeros a tenth of the time), zero, trim or read a range of the
 * volume or of a clone; read it back with a block on either side.
 */
static bool
own_io (struct own_writer *w, enum own_op op)
{
  struct own_state *s = &w->live;
  static const char *const what[] = { "write", "zero", "trim", "read" };
  unsigned flags = rng_below (&w->r, 8) ? 0 : VOL_FUA;
  uint64_t off, len, lo, hi;
  int r = 0;

  if (w->nclones && rng_below (&w->r, 10) < 3)
    s = &w->clones[rng_below (&w->r, w->nclones)];
  own_range (&w->r, &off, &len);
  if (op == OWN_WRITE) {
    fill_pattern (w->buf, len, rng_next (&w->r));
    if (rng_below (&w->r, 10) == 0)
      memset (w->buf, 0, len);
    r = vol_pwrite (s->h, w->buf, (uint32_t) len, off, flags);
    memcpy (s->bytes + off, w->buf, len);
  }
  else if (op != OWN_READ) {
    r = op == OWN_ZERO ? vol_zero (s->h, (uint32_t) len, off, flags)
                       : vol_trim (s->h, (uint32_t) len, off, flags);
    memset (s->bytes + off, 0, len);
  }
  if (r < 0)
    return thread_fail (&w->t, "%s: %s of %s, %" PRIu64 " bytes at %" PRIu64
                        ": %s", w->t.name, what[op], s->name, len, off,
                        cairn_errmsg ());
  lo = off / BLOCK_SIZE * BLOCK_SIZE;
  lo = lo >= BLOCK_SIZE ? lo - BLOCK_SIZE : 0;
  hi = MIN ((uint64_t) OWN_VSIZE,
            DIV_ROUND_UP (off + len, BLOCK_SIZE) * BLOCK_SIZE + BLOCK_SIZE);
  return read_matches (&w->t, s->h, s->name, s->bytes, lo, hi - lo, w->buf);
}

/* Snapshot the volume: its model is what the writes so far made it. */
static bool
own_snapshot (struct own_writer *w, enum own_op op)
{
  struct own_state *s = calloc (1, sizeof *s);

  s->refs = 1;
  s->bytes = malloc (OWN_VSIZE);
  memcpy (s->bytes, w->live.bytes, OWN_VSIZE);
  snprintf (s->name, sizeof s->name, "w%u@s%u", w->idx, w->next++);
  if (snap_create (w->pool, w->live.name, strchr (s->name, '@') + 1) < 0) {
    own_put (s);
    return thread_fail (&w->t, "%s: snapshot %s: %s", w->t.name,
                        w->live.name, cairn_errmsg ());
  }
  pthread_mutex_lock (&w->lock);
  w->snaps[w->nsnaps++] = s;
  pthread_mutex_unlock (&w->lock);
  return true;
}

/* Delete a snapshot, which other writers may be reading. */
static bool
own_delete_snap (struct own_writer *w, enum own_op op)
{
  unsigned i = (unsigned) rng_below (&w->r, w->nsnaps);
  struct own_state *s;
  bool ok = true;

  pthread_mutex_lock (&w->lock);
  s = w->snaps[i];
  w->snaps[i] = w->snaps[--w->nsnaps];
  s->deleted = true;
  pthread_mutex_unlock (&w->lock);
  if (snap_delete (w->pool, w->live.name, strchr (s->name, '@') + 1) < 0)
    ok = thread_fail (&w->t, "%s: deleting %s: %s", w->t.name, s->name,
                      cairn_errmsg ());
  pthread_mutex_lock (&w->lock);
  own_put (s);
  pthread_mutex_unlock (&w->lock);
  return ok;
}

/* Read a snapshot of a writer, its own (op OWN_SNAPREAD: a range, or all
 * of it a quarter of the time) or any (OWN_PEEK: all of it), through a
 * handle of its own: its writer may delete it meanwhile, which must not
 * change what the handle reads.
 */
static bool
own_read_snap (struct own_writer *w, enum own_op op)
{
  struct own_writer *o = op == OWN_PEEK ?
    &w->all[rng_below (&w->r, OWN_WRITERS)] : w;
  struct own_state *s = NULL;
  struct cairn_volume *h;
  uint64_t off = 0, len = OWN_VSIZE;
  bool ok = true;
  int r;

  pthread_mutex_lock (&o->lock);
  if (o->nsnaps) {
    s = o->snaps[rng_below (&w->r, o->nsnaps)];
    s->refs++;
  }
  pthread_mutex_unlock (&o->lock);
  if (s == NULL)
    return true;
  if (op == OWN_SNAPREAD && rng_below (&w->r, 4))
    own_range (&w->r, &off, &len);
  r = vol_open (w->pool, s->name, &h);
  if (r == 0) {
    ok = read_matches (&w->t, h, s->name, s->bytes, off, len, w->buf);
    vol_close (h);
  }
  pthread_mutex_lock (&o->lock);
  /* Opening it fails only once its writer has deleted it. */
  if (r < 0 && (r != -ENOENT || !s->deleted))
    ok = thread_fail (&w->t, "%s: opening %s (%s by its writer): %s",
                      w->t.name, s->name, s->deleted ? "deleted" :
                      "not deleted", cairn_errmsg ());
  w->n_gone += s->deleted;
  own_put (s);
  pthread_mutex_unlock (&o->lock);
  return ok;
}

/* Clone a snapshot, check the clone whole, and keep it open to write. */
static bool
own_clone (struct own_writer *w, enum own_op op)
{
  struct own_state *s = w->snaps[rng_below (&w->r, w->nsnaps)];
  struct own_state *c = &w->clones[w->nclones];

  snprintf (c->name, sizeof c->name, "w%u-c%u", w->idx, w->next++);
  if (vol_clone (w->pool, s->name, c->name) < 0 ||
      vol_open (w->pool, c->name, &c->h) < 0)
    return thread_fail (&w->t, "%s: cloning %s as %s: %s", w->t.name,
                        s->name, c->name, cairn_errmsg ());
  c->bytes = malloc (OWN_VSIZE);
  memcpy (c->bytes, s->bytes, OWN_VSIZE);
  w->nclones++;
  return read_matches (&w->t, c->h, c->name, c->bytes, 0, OWN_VSIZE, w->buf);
}

/* Close and delete a clone. */
static bool
own_delete_clone (struct own_writer *w, enum own_op op)
{
  struct own_state *c = &w->clones[rng_below (&w->r, w->nclones)];
  bool ok = true;

  vol_close (c->h);
  if (vol_delete (w->pool, c->name, 0) < 0)
    ok = thread_fail (&w->t, "%s: deleting %s: %s", w->t.name, c->name,
                      cairn_errmsg ());
  free (c->bytes);
  *c = w->clones[--w->nclones];
  return ok;
}

/* vol_list callback: count what is listed. */
static int
count_listed (void *opaque, const struct vol_info *info)
{
  (*(unsigned *) opaque)++;
  return 0;
}

/* A step of reclaim, then a listing: every writer's volume is in it. */
static bool
own_reclaim (struct own_writer *w, enum own_op op)
{
  unsigned n = 0;

  if (vol_reclaim_step (w->pool, &(bool) { false }) < 0)
    return thread_fail (&w->t, "%s: reclaim step: %s", w->t.name,
                        cairn_errmsg ());
  if (vol_list (w->pool, false, count_listed, &n) < 0 || n < OWN_WRITERS)
    return thread_fail (&w->t, "%s: listing found %u volumes, at least %u "
                        "expected: %s", w->t.name, n, OWN_WRITERS,
                        cairn_errmsg ());
  return true;
}

/* Make every write of the pool so far durable. */
static bool
own_flush (struct own_writer *w, enum own_op op)
{
  return vol_flush (w->live.h) == 0 ||
    thread_fail (&w->t, "%s: flush: %s", w->t.name, cairn_errmsg ());
}

/* Each op: its name, how often (when the dice, 0-99, fall below upto and
 * not below the previous op's), and what does it.
 */
static const struct {
  const char *name;
  unsigned upto;
  bool (*fn) (struct own_writer *w, enum own_op op);
} own_ops[OWN_OPS] = {
  [OWN_WRITE] = { "writes", 28, own_io },
  [OWN_ZERO] = { "zeroes", 33, own_io },
  [OWN_TRIM] = { "trims", 38, own_io },
  [OWN_READ] = { "reads", 45, own_io },
  [OWN_FLUSH] = { "flushes", 49, own_flush },
  [OWN_SNAP] = { "snapshots", 58, own_snapshot },
  [OWN_SNAPREAD] = { "snapshot reads", 66, own_read_snap },
  [OWN_SNAPDEL] = { "snapshot deletes", 72, own_delete_snap },
  [OWN_CLONE] = { "clones", 78, own_clone },
  [OWN_CLONEDEL] = { "clone deletes", 82, own_delete_clone },
  [OWN_PEEK] = { "reads of any writer's snapshots", 94, own_read_snap },
  [OWN_RECLAIM] = { "reclaim steps", 100, own_reclaim },
};

/* A writer's thread: test_work_full (OWN_STEPS) steps, each an op at
 * random (at fewer, a small cache need not evict a thousand nodes).
 */
static void *
own_writer_main (void *arg)
{
  struct own_writer *w = arg;
  bool ok = true;

  for (unsigned step = 0; ok && step < w->steps && !stopped (&w->t); step++) {
    unsigned dice = (unsigned) rng_below (&w->r, 100);
    enum own_op op = OWN_WRITE;

    while (dice >= own_ops[op].upto)
      op++;
    if (op == OWN_SNAP || (op >= OWN_SNAPREAD && op <= OWN_CLONE &&
                           w->nsnaps == 0))
      op = w->nsnaps == OWN_SNAPS ? OWN_SNAPDEL : OWN_SNAP;
    if (op == OWN_CLONE && w->nclones == OWN_CLONES)
      op = OWN_CLONEDEL;
    if (op == OWN_CLONEDEL && w->nclones == 0)
      op = OWN_READ;
    w->n[op]++;
    ok = own_ops[op].fn (w, op);
  }
  return NULL;
}

/* OWN_WRITERS threads, each with a volume, its snapshots and clones of
 * them, reading each other's snapshots: every read equals its model, at
 * once and after a reopen; deleting everything gives every block back,
 * with fsck clean.  With cache_bytes, the threads run on a node cache that
 * small (0: the default, which holds every node of this test), and must
 * have made it evict.
 */
static void
own_volumes (const char *test, uint64_t cache_bytes)
{
  struct cairn_dev *dev = mem_pool (1ull << 30, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct own_writer w[OWN_WRITERS];
  struct rng r = { test_seed (test, 1729) };
  unsigned nlisted = 0, nexpect = 0;
  pthread_t th[OWN_WRITERS];
  struct cairn_volume *h;
  struct pool_info info;
  int stop = 0;
  uint64_t base = empty_pool_blocks (dev, &pool);

  if (cache_bytes) {
    /* Commits stay as often as with the default cache: the dirty limit
     * would otherwise be a quarter of this one.
     */
    struct pool_open_opts oo = { .cache_bytes = cache_bytes,
                                 .dirty_limit_bytes = 8 << 20 };

    cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
    cr_assert_eq (pool_open (dev, &oo, &pool), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (pool_start_committer (pool, 20), 0, "%s", cairn_errmsg ());
  vol_reclaim_set_budget (pool, 8 + rng_below (&r, 64));
  for (unsigned i = 0; i < OWN_WRITERS; i++) {
    w[i] = (struct own_writer) { .t = { .stop = &stop }, .pool = pool,
                                 .all = w, .idx = i, .r = { rng_next (&r) },
                                 .steps = test_work_full (OWN_STEPS),
                                 .buf = malloc (OWN_VSIZE) };
    snprintf (w[i].t.name, sizeof w[i].t.name, "writer %u", i);
    snprintf (w[i].live.name, sizeof w[i].live.name, "w%u", i);
    w[i].live.bytes = calloc (1, OWN_VSIZE);
    pthread_mutex_init (&w[i].lock, NULL);
    cr_assert_eq (vol_create (pool, w[i].live.name, OWN_VSIZE, NULL), 0);
    cr_assert_eq (vol_open (pool, w[i].live.name, &w[i].live.h), 0);
  }
  for (unsigned i = 0; i < OWN_WRITERS; i++)
    cr_assert_eq (pthread_create (&th[i], NULL, own_writer_main, &w[i]), 0);
  for (unsigned i = 0; i < OWN_WRITERS; i++)
    cr_assert_eq (pthread_join (th[i], NULL), 0);
  for (unsigned i = 0; i < OWN_WRITERS; i++) {
    cr_assert (w[i].t.fail[0] == '\0', "%s", w[i].t.fail);
    fprintf (stderr, "%s: writer %u:", test, i);
    for (unsigned op = 0; op < OWN_OPS; op++)
      fprintf (stderr, " %u %s,", w[i].n[op], own_ops[op].name);
    fprintf (stderr, " %u snapshots deleted as they were read\n",
             w[i].n_gone);
    vol_close (w[i].live.h);
    for (unsigned j = 0; j < w[i].nclones; j++)
      vol_close (w[i].clones[j].h);
  }

  /* At rest, with nothing dirty, the cache is back within its limit: a
   * last write makes the commit free nodes that nothing will look up again.
   */
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  memset (w[0].live.bytes, 0x5a, BLOCK_SIZE);
  cr_assert_eq (vol_open (pool, w[0].live.name, &h), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (h, w[0].live.bytes, BLOCK_SIZE, 0, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (h);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  pool_info (pool, &info);
  fprintf (stderr, "%s: node cache: %" PRIu64 " hits, %" PRIu64 " misses, %"
           PRIu64 " evictions, %" PRIu64 " bytes at rest\n", test,
           info.cache.hits, info.cache.misses, info.cache.evictions,
           info.cache.bytes);
  if (cache_bytes) {
    cr_assert_gt (info.cache.evictions, 1000, "%s: the threads did not make "
                  "the node cache evict", test);
    cr_assert_leq (info.cache.bytes, cache_bytes, "%s: the node cache holds "
                   "%" PRIu64 " bytes at rest, over its limit", test,
                   info.cache.bytes);
  }

  /* What was committed is what is checked. */
  pool = reopen_pool (pool, dev, "own_volumes: after the threads");
  for (unsigned i = 0; i < OWN_WRITERS; i++) {
    struct own_state *all[1 + OWN_SNAPS + OWN_CLONES] = { &w[i].live };
    unsigned n = 1;

    for (unsigned j = 0; j < w[i].nsnaps; j++)
      all[n++] = w[i].snaps[j];
    for (unsigned j = 0; j < w[i].nclones; j++)
      all[n++] = &w[i].clones[j];
    for (unsigned j = 0; j < n; j++) {
      cr_assert_eq (vol_open (pool, all[j]->name, &h), 0, "%s: %s",
                    all[j]->name, cairn_errmsg ());
      cr_assert_eq (vol_size (h), OWN_VSIZE, "size of %s", all[j]->name);
      cr_assert (read_matches (&w[i].t, h, all[j]->name, all[j]->bytes, 0,
                               OWN_VSIZE, w[i].buf), "after reopening: %s",
                 w[i].t.fail);
      vol_close (h);
    }
    nexpect += n;
  }
  cr_assert_eq (vol_list (pool, true, count_listed, &nlisted), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (nlisted, nexpect, "after reopening: %u volumes, snapshots "
                "and clones listed, %u expected", nlisted, nexpect);

  /* Delete everything: every block comes back. */
  for (unsigned i = 0; i < OWN_WRITERS; i++) {
    for (unsigned j = 0; j < w[i].nclones; j++) {
      cr_assert_eq (vol_delete (pool, w[i].clones[j].name, 0), 0, "%s",
                    cairn_errmsg ());
      free (w[i].clones[j].bytes);
    }
    cr_assert_eq (vol_delete (pool, w[i].live.name, VOL_DELETE_RECURSIVE), 0,
                  "%s", cairn_errmsg ());
    for (unsigned j = 0; j < w[i].nsnaps; j++)
      own_put (w[i].snaps[j]);
    pthread_mutex_destroy (&w[i].lock);
    free (w[i].live.bytes);
    free (w[i].buf);
  }
  assert_all_space_back (pool, dev, base, test);
  dev_close (dev);
}

Test (volume_concurrent, own_volumes, .timeout = 600)
{
  own_volumes ("volume_concurrent.own_volumes", 0);
}

/* The same on a node cache of eight 16 KiB nodes: nearly every node a
 * thread visits is read from the pool and evicted again, while other
 * threads hold it, look it up, copy it and free it (btree-cache.c).
 */
Test (volume_concurrent, own_volumes_small_cache, .timeout = 600)
{
  own_volumes ("volume_concurrent.own_volumes_small_cache", 16384);
}

/* ------------------------------------------------- shared_volume_snapshot */

#define SH_THREADS 4
#define SH_BLOCKS 1024u                 /* the volume: 4 MiB */
#define SH_CHUNK 16u                    /* blocks a thread owns in a row */
#define SH_WRITES 1500u                 /* per thread, at scale 1 */
#define SH_KEEP 6u                      /* snapshots kept at once */
#define SH_SNAPS_MIN 4u                 /* even once the writers are done */

/* Each block's versions, numbered from 1 by the thread that owns it: the
 * newest whose write has started and the newest acknowledged (stored
 * before the write is issued and after it returns, in one order with the
 * snapshot thread's loads: __ATOMIC_SEQ_CST).
 */
struct sh_world {
  struct cairn_pool *pool;
  int stop;
  unsigned running;                     /* writers still writing */
  uint32_t started[SH_BLOCKS], acked[SH_BLOCKS];
  struct who snapper;
  uint32_t kept[SH_KEEP][SH_BLOCKS];    /* what sN held: kept[N % SH_KEEP] */
  unsigned nsnaps, inflight;
};

struct sh_writer {
  struct who t;
  struct sh_world *sw;
  unsigned idx;
  struct rng r;
  struct cairn_volume *h;
  uint32_t nwrites, maxwrites;
  uint8_t buf[SH_CHUNK * BLOCK_SIZE];
};

/* The thread that owns block b. */
static unsigned
sh_owner (uint64_t b)
{
  return (unsigned) (b / SH_CHUNK % SH_THREADS);
}

/* Block b as version v of its owner: a header (thread, block, version),
 * then bytes determined by it.
 */
static void
sh_fill (uint8_t *p, uint64_t b, uint64_t v)
{
  uint64_t hdr[3] = { sh_owner (b), b, v };

  memcpy (p, hdr, sizeof hdr);
  fill_pattern (p + sizeof hdr, BLOCK_SIZE - sizeof hdr,
                (b << 32 | v) * SH_THREADS + sh_owner (b));
}

/* Read blocks [first, first + n) of h (named what) into buf and their
 * versions into ver (0: zeros); a block that holds none of its versions
 * (torn, or another block's) fails t.
 */
static bool
sh_read (struct who *t, struct cairn_volume *h, const char *what,
         uint64_t first, uint64_t n, uint8_t *buf, uint32_t *ver)
{
  static const uint8_t zero[BLOCK_SIZE];
  uint8_t expect[BLOCK_SIZE];
  uint64_t hdr[3];

  if (vol_pread (h, buf, (uint32_t) (n * BLOCK_SIZE), first * BLOCK_SIZE) < 0)
    return thread_fail (t, "%s: reading %s, blocks %" PRIu64 "-%" PRIu64
                        ": %s", t->name, what, first, first + n - 1,
                        cairn_errmsg ());
  for (uint64_t i = 0, b = first; i < n; i++, b++) {
    const uint8_t *p = buf + i * BLOCK_SIZE;

    memcpy (hdr, p, sizeof hdr);
    ver[i] = hdr[2] <= UINT32_MAX ? (uint32_t) hdr[2] : 0;
    sh_fill (expect, b, ver[i]);
    if (memcmp (p, ver[i] ? expect : zero, BLOCK_SIZE) != 0)
      return thread_fail (t, "%s: %s, block %" PRIu64 " (thread %u's) holds "
                          "none of its versions; its header says thread %"
                          PRIu64 ", block %" PRIu64 ", version %" PRIu64,
                          t->name, what, b, sh_owner (b), hdr[0], hdr[1],
                          hdr[2]);
  }
  return true;
}

/* Write a run of blocks in one of its chunks, as their next version, then
 * read the chunk back: each block holds its newest version.
 */
static bool
sh_write_once (struct sh_writer *w)
{
  struct sh_world *sw = w->sw;
  uint64_t chunk = w->idx + SH_THREADS *
    rng_below (&w->r, SH_BLOCKS / SH_CHUNK / SH_THREADS);
  uint64_t first = chunk * SH_CHUNK + rng_below (&w->r, SH_CHUNK);
  uint64_t n = 1 + rng_below (&w->r, (chunk + 1) * SH_CHUNK - first);
  uint32_t v = ++w->nwrites, got[SH_CHUNK];
  int r;

  for (uint64_t b = first; b < first + n; b++) {
    sh_fill (w->buf + (b - first) * BLOCK_SIZE, b, v);
    __atomic_store_n (&sw->started[b], v, __ATOMIC_SEQ_CST);
  }
  r = vol_pwrite (w->h, w->buf, (uint32_t) (n * BLOCK_SIZE),
                  first * BLOCK_SIZE, rng_below (&w->r, 8) ? 0 : VOL_FUA);
  if (r < 0)
    return thread_fail (&w->t, "%s: writing version %" PRIu32 " of blocks %"
                        PRIu64 "-%" PRIu64 ": %s", w->t.name, v, first,
                        first + n - 1, cairn_errmsg ());
  for (uint64_t b = first; b < first + n; b++)
    __atomic_store_n (&sw->acked[b], v, __ATOMIC_SEQ_CST);
  if (!sh_read (&w->t, w->h, "the volume", chunk * SH_CHUNK, SH_CHUNK,
                w->buf, got))
    return false;
  for (uint64_t i = 0, b = chunk * SH_CHUNK; i < SH_CHUNK; i++, b++)
    if (got[i] != sw->acked[b])
      return thread_fail (&w->t, "%s: block %" PRIu64 " holds version %"
                          PRIu32 ", its last is %" PRIu32 " (after writing "
                          "blocks %" PRIu64 "-%" PRIu64 ")", w->t.name, b,
                          got[i], sw->acked[b], first, first + n - 1);
  return true;
}

/* A writer's thread: test_work (SH_WRITES) writes. */
static void *
sh_writer_main (void *arg)
{
  struct sh_writer *w = arg;

  while (w->nwrites < w->maxwrites && !stopped (&w->t) && sh_write_once (w))
    ;
  __atomic_sub_fetch (&w->sw->running, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Read snapshot sN whole into ver, or (when) compare it with ver. */
static bool
sh_read_snap (struct who *t, struct cairn_pool *pool, unsigned n,
              uint32_t *ver, uint8_t *buf, const char *when)
{
  uint32_t now[SH_BLOCKS];
  struct cairn_volume *h;
  char name[32];
  bool ok;

  snprintf (name, sizeof name, "shared@s%u", n);
  if (vol_open (pool, name, &h) < 0)
    return thread_fail (t, "%s: opening %s: %s", t->name, name,
                        cairn_errmsg ());
  ok = sh_read (t, h, name, 0, SH_BLOCKS, buf, when ? now : ver);
  for (uint64_t b = 0; ok && when && b < SH_BLOCKS; b++)
    if (now[b] != ver[b])
      ok = thread_fail (t, "%s: %s changed %s: block %" PRIu64 " held "
                        "version %" PRIu32 " when taken, now %" PRIu32,
                        t->name, name, when, b, ver[b], now[b]);
  vol_close (h);
  return ok;
}

/* Take snapshot sN and check it: every block holds a version at least the
 * newest acknowledged before the request, and at most the newest started
 * before the call returned.
 */
static bool
sh_snapshot (struct sh_world *sw, unsigned n, uint8_t *buf)
{
  uint32_t lo[SH_BLOCKS], hi[SH_BLOCKS], *ver = sw->kept[n % SH_KEEP];
  char snap[16];

  snprintf (snap, sizeof snap, "s%u", n);
  for (unsigned b = 0; b < SH_BLOCKS; b++)
    lo[b] = __atomic_load_n (&sw->acked[b], __ATOMIC_SEQ_CST);
  if (snap_create (sw->pool, "shared", snap) < 0)
    return thread_fail (&sw->snapper, "snapshots: taking shared@%s: %s", snap,
                        cairn_errmsg ());
  for (unsigned b = 0; b < SH_BLOCKS; b++)
    hi[b] = __atomic_load_n (&sw->started[b], __ATOMIC_SEQ_CST);
  if (!sh_read_snap (&sw->snapper, sw->pool, n, ver, buf, NULL))
    return false;
  for (unsigned b = 0; b < SH_BLOCKS; b++) {
    if (ver[b] < lo[b] || ver[b] > hi[b])
      return thread_fail (&sw->snapper, "snapshots: shared@%s, block %u "
                          "(thread %u's) holds version %" PRIu32 ", not one "
                          "from %" PRIu32 " (the newest acknowledged before "
                          "the request) to %" PRIu32 " (the newest started "
                          "before it returned)", snap, b, sh_owner (b),
                          ver[b], lo[b], hi[b]);
    sw->inflight += ver[b] > lo[b];
  }
  return true;
}

/* Take snapshots while the writers write; past SH_KEEP, read the oldest
 * kept again and delete it.
 */
static void *
sh_snapper_main (void *arg)
{
  struct sh_world *sw = arg;
  uint8_t *buf = malloc (SH_BLOCKS * BLOCK_SIZE);
  bool ok = true;
  char snap[16];

  for (unsigned n = 0; ok && !stopped (&sw->snapper) &&
       (n < SH_SNAPS_MIN || __atomic_load_n (&sw->running,
                                             __ATOMIC_ACQUIRE) > 0); n++) {
    if (n >= SH_KEEP) {
      snprintf (snap, sizeof snap, "s%u", n - SH_KEEP);
      ok = sh_read_snap (&sw->snapper, sw->pool, n - SH_KEEP,
                         sw->kept[n % SH_KEEP], buf, "while writers wrote") &&
        (snap_delete (sw->pool, "shared", snap) == 0 ||
         thread_fail (&sw->snapper, "snapshots: deleting shared@%s: %s",
                      snap, cairn_errmsg ()));
    }
    ok = ok && sh_snapshot (sw, n, buf);
    sw->nsnaps = n + ok;
  }
  free (buf);
  return NULL;
}

/* SH_THREADS threads write disjoint chunks of one volume while snapshots
 * are taken: each snapshot holds, block by block, what DESIGN §2.3 says,
 * and never changes, also after a reopen.
 */
Test (volume_concurrent, shared_volume_snapshot, .timeout = 600)
{
  struct cairn_dev *dev = mem_pool (1ull << 30, NULL);
  struct sh_world *sw = calloc (1, sizeof *sw);
  struct sh_writer *w = calloc (SH_THREADS, sizeof *w);
  struct rng r = { test_seed ("volume_concurrent.shared_volume_snapshot",
                              31337) };
  unsigned nwrites = 0;
  pthread_t th[SH_THREADS + 1];
  uint8_t *buf = malloc (SH_BLOCKS * BLOCK_SIZE);
  uint32_t ver[SH_BLOCKS];
  struct cairn_volume *h;
  uint64_t base;

  sw->pool = pool_open_ok (dev);
  sw->running = SH_THREADS;
  sw->snapper = (struct who) { "snapshots", &sw->stop, "" };
  base = empty_pool_blocks (dev, &sw->pool);
  cr_assert_eq (pool_start_committer (sw->pool, 20), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_create (sw->pool, "shared", SH_BLOCKS * BLOCK_SIZE,
                            NULL), 0);
  for (unsigned i = 0; i < SH_THREADS; i++) {
    w[i] = (struct sh_writer) { .t = { .stop = &sw->stop }, .sw = sw,
                                .idx = i, .r = { rng_next (&r) },
                                .maxwrites = test_work (SH_WRITES) };
    snprintf (w[i].t.name, sizeof w[i].t.name, "writer %u", i);
    cr_assert_eq (vol_open (sw->pool, "shared", &w[i].h), 0);
    cr_assert_eq (pthread_create (&th[i], NULL, sh_writer_main, &w[i]), 0);
  }
  cr_assert_eq (pthread_create (&th[SH_THREADS], NULL, sh_snapper_main, sw),
                0);
  for (unsigned i = 0; i <= SH_THREADS; i++)
    cr_assert_eq (pthread_join (th[i], NULL), 0);
  for (unsigned i = 0; i < SH_THREADS; i++) {
    cr_assert (w[i].t.fail[0] == '\0', "%s", w[i].t.fail);
    nwrites += w[i].nwrites;
    vol_close (w[i].h);
  }
  cr_assert (sw->snapper.fail[0] == '\0', "%s", sw->snapper.fail);
  fprintf (stderr, "volume_concurrent.shared_volume_snapshot: %u snapshots, "
           "%u writes; %u blocks of snapshots held a write in flight\n",
           sw->nsnaps, nwrites, sw->inflight);
  cr_assert_geq (sw->nsnaps, SH_SNAPS_MIN);

  /* After a reopen, the snapshots kept hold what they did when taken and
   * the volume the last version of every block.
   */
  sw->pool = reopen_pool (sw->pool, dev, "shared_volume_snapshot: after "
                          "the threads");
  for (unsigned n = sw->nsnaps - MIN (sw->nsnaps, SH_KEEP); n < sw->nsnaps;
       n++)
    cr_assert (sh_read_snap (&sw->snapper, sw->pool, n, sw->kept[n % SH_KEEP],
                             buf, "after reopening"), "%s", sw->snapper.fail);
  cr_assert_eq (vol_open (sw->pool, "shared", &h), 0, "%s", cairn_errmsg ());
  cr_assert (sh_read (&sw->snapper, h, "the volume", 0, SH_BLOCKS, buf, ver),
             "%s", sw->snapper.fail);
  vol_close (h);
  for (uint32_t b = 0; b < SH_BLOCKS; b++)
    cr_assert_eq (ver[b], sw->acked[b], "after reopening: the volume's block %"
                  PRIu32 " holds version %" PRIu32 ", its last write was %"
                  PRIu32, b, ver[b], sw->acked[b]);

  /* Delete everything: every block comes back. */
  cr_assert_eq (vol_delete (sw->pool, "shared", VOL_DELETE_RECURSIVE), 0,
                "%s", cairn_errmsg ());
  assert_all_space_back (sw->pool, dev, base, "shared_volume_snapshot");
  dev_close (dev);
  free (sw);
  free (w);
  free (buf);
}

/* ---------------------------------------------------------------- the barrier */

/* What one helper thread of the barrier tests does: commit the pool,
 * snapshot "v" as "v@s", clone it live as "c", or write byte over block 0.
 */
struct sb_job {
  struct cairn_pool *pool;
  struct cairn_volume *h;
  enum { SB_COMMIT, SB_SNAP, SB_CLONE, SB_WRITE } what;
  uint8_t byte;
  bool done;                  /* atomic */
  int r;
};

static void *
sb_main (void *arg)
{
  struct sb_job *j = arg;
  uint8_t buf[BLOCK_SIZE];

  switch (j->what) {
  case SB_COMMIT:
    j->r = pool_commit (j->pool);
    break;
  case SB_SNAP:
    j->r = snap_create (j->pool, "v", "s");
    break;
  case SB_CLONE:
    j->r = vol_clone (j->pool, "v", "c");
    break;
  case SB_WRITE:
    memset (buf, j->byte, sizeof buf);
    j->r = vol_pwrite (j->h, buf, sizeof buf, 0, 0);
    break;
  }
  __atomic_store_n (&j->done, true, __ATOMIC_RELEASE);
  return NULL;
}

/* Write byte over block 0 of h. */
static void
sb_write (struct cairn_volume *h, uint8_t byte)
{
  uint8_t buf[BLOCK_SIZE];

  memset (buf, byte, sizeof buf);
  cr_assert_eq (vol_pwrite (h, buf, sizeof buf, 0, 0), 0, "%s",
                cairn_errmsg ());
}

/* Block 0 of export name reads as byte. */
static void
sb_expect (struct cairn_pool *pool, const char *name, uint8_t byte)
{
  struct cairn_volume *h;
  uint8_t buf[BLOCK_SIZE];

  cr_assert_eq (vol_open (pool, name, &h), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pread (h, buf, sizeof buf, 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (buf[0], byte, "%s holds the write of 0x%02x, not 0x%02x",
                name, buf[0], byte);
  vol_close (h);
}

/* SB-1: the snapshot's (clone's) freeze must wait here (two generations
 * are in flight, the older one stuck in its flush), and a write that
 * begins meanwhile, after the request, waits for it and is not in the
 * snapshot (clone), named taken; the one before the request is.  Without
 * the barrier the later write went into the generation it froze.
 */
static void
sb_check_barrier (int what, const char *taken)
{
  struct cairn_dev *mem = mem_pool (64 << 20, NULL), *dev;
  struct sb_job c1, c2, snap, late;
  pthread_t t[4];
  struct cairn_pool *pool;
  struct cairn_volume *h;
  struct catalog *cat;
  uint64_t gen;

  cr_assert_eq (dev_fault_create (mem, &dev), 0);
  pool = pool_open_ok (dev);
  cr_assert_eq (vol_create (pool, "v", 1 << 20, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &h), 0, "%s", cairn_errmsg ());
  cr_assert_eq (catalog_get (pool, &cat), 0);
  sb_write (h, 1);
  cr_assert_eq (pool_commit (pool), 0);

  /* Generation G writes and holds its flush; G + 1 is frozen behind it. */
  dev_fault_hold (dev, DEV_FAULT_FLUSH, true);
  sb_write (h, 2);
  c1 = (struct sb_job) { .pool = pool, .what = SB_COMMIT };
  pthread_create (&t[0], NULL, sb_main, &c1);
  WAIT_UNTIL (dev_fault_waiting (dev, DEV_FAULT_FLUSH) > 0);
  cr_assert_gt (dev_fault_waiting (dev, DEV_FAULT_FLUSH), 0,
                "the first commit's flush did not happen in 10 s");
  sb_write (h, 3);
  gen = pool_open_gen (pool);
  c2 = (struct sb_job) { .pool = pool, .what = SB_COMMIT };
  pthread_create (&t[1], NULL, sb_main, &c2);
  WAIT_UNTIL (pool_open_gen (pool) > gen);
  cr_assert_gt (pool_open_gen (pool), gen,
                "the second commit's freeze did not happen in 10 s");

  /* The last write before the request, the request, a write after it. */
  sb_write (h, 4);
  snap = (struct sb_job) { .pool = pool, .what = what };
  pthread_create (&t[2], NULL, sb_main, &snap);
  WAIT_UNTIL (__atomic_load_n (&cat->nbarrier, __ATOMIC_ACQUIRE) > 0);
  cr_assert_gt (__atomic_load_n (&cat->nbarrier, __ATOMIC_ACQUIRE), 0,
                "the snapshot's barrier did not happen in 10 s");
  late = (struct sb_job) { .h = h, .what = SB_WRITE, .byte = 5 };
  pthread_create (&t[3], NULL, sb_main, &late);
  /* Time for the late write to go through, were nothing holding it. */
  for (int i = 0; i < 50 && !__atomic_load_n (&late.done, __ATOMIC_ACQUIRE); i++)
    usleep (10000);
  cr_assert (!__atomic_load_n (&snap.done, __ATOMIC_ACQUIRE),
             "the snapshot did not wait for the commits in flight");

  dev_fault_hold (dev, DEV_FAULT_FLUSH, false);
  for (int i = 0; i < 4; i++)
    pthread_join (t[i], NULL);
  cr_assert_eq (c1.r, 0);
  cr_assert_eq (c2.r, 0);
  cr_assert_eq (snap.r, 0, "snapshot: %s", cairn_errmsg ());
  cr_assert_eq (late.r, 0);
  sb_expect (pool, taken, 4);
  sb_expect (pool, "v", 5);
  vol_close (h);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  assert_clean (mem);
  dev_close (mem);
}

Test (volume_concurrent, snapshot_holds_no_write_begun_after_it)
{
  sb_check_barrier (SB_SNAP, "v@s");
}

Test (volume_concurrent, live_clone_holds_no_write_begun_after_it)
{
  sb_check_barrier (SB_CLONE, "c");
}
