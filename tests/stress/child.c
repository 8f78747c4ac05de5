/* Cairn stress tool: the child, threads of random operations against one
 * pool, every read checked against the model (tests/stress/README.md).
 *
 * Locks: a volume's rwlock is taken shared by data operations (each also
 * takes a range lock on the bytes it touches, so no two overlap) and
 * exclusive by everything that changes the catalog or needs the volume
 * still (snapshots, clones, deletes, renames, resizes, rollbacks, diffs).
 * A slot for a new volume is reserved under the model's ns mutex and taken
 * exclusive after the source's lock.  Every change is journalled before
 * the engine call and its end after the model took it, under the same
 * locks (model.c).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "replicate.h"
#include "stress.h"
#include "../unit/test-util.h"

#ifndef MIB
#define MIB (1024u * 1024)
#endif
#define MAX_IO (256u * 1024)
#define LOG_TAIL 64

enum kind {
  K_WRITE, K_READ, K_ZERO, K_TRIM, K_FLUSH, K_SNAP, K_SNAPDEL, K_CLONE,
  K_CREATE, K_DELETE, K_RENAME, K_RESIZE, K_ROLLBACK, K_DIFF, K_SEND,
  K_COLLECT, K_FAULT, K_COUNT
};
static const char *const kind_name[K_COUNT] = {
  "write", "read", "zero", "trim", "flush", "snapshot", "snapdelete",
  "clone", "create", "delete", "rename", "resize", "rollback", "diff",
  "send", "collect", "fault",
};
/* Out of 1000. */
static const unsigned kind_weight[K_COUNT] = {
  300, 250, 50, 50, 50, 40, 30, 20, 20, 20, 20, 20, 20, 30, 20, 20, 40,
};

struct child {
  const struct stress_opts *o;
  struct model m;
  struct journal j;
  struct stress_devs devs;
  struct cairn_pool *pool;
  struct cairn_dev *dev_b;    /* the receiving pool's, in memory */
  struct cairn_pool *pool_b;
  volatile bool stop;
  uint64_t count[K_COUNT], skipped[K_COUNT];
  uint64_t flips, eios;
  uint64_t healed, read_errors, cksum_errors;   /* the faulty device's */
  pthread_mutex_t log_lock;
  char log[LOG_TAIL][160];
  unsigned nlog;
};

struct worker {
  struct child *c;
  unsigned no;
  struct rng rng;
  pthread_t thread;
};

/* Add a line to the log tail that a failure prints. */
static void
oplog (struct child *c, unsigned t, const char *fmt, ...)
{
  va_list ap;
  int n;

  pthread_mutex_lock (&c->log_lock);
  n = snprintf (c->log[c->nlog % LOG_TAIL], 160, "[t%u] ", t);
  va_start (ap, fmt);
  vsnprintf (c->log[c->nlog % LOG_TAIL] + n, 160 - (size_t) n, fmt, ap);
  va_end (ap);
  c->nlog++;
  pthread_mutex_unlock (&c->log_lock);
}

/* A check failed: say what, with the seed and the log tail; the pool's
 * files stay as they are.
 */
static void CAIRN_PRINTF (2, 3)
fail (struct child *c, const char *fmt, ...)
{
  va_list ap;

  pthread_mutex_lock (&c->log_lock);
  fprintf (stderr, "stress: FAILED (seed %" PRIu64 "): ", c->o->seed);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\nstress: the last operations, oldest first:\n");
  for (unsigned i = c->nlog > LOG_TAIL ? c->nlog - LOG_TAIL : 0; i < c->nlog;
       i++)
    fprintf (stderr, "  %s\n", c->log[i % LOG_TAIL]);
  fprintf (stderr, "stress: pool kept in %s; replay: cairn-stress run %s "
           "--seed %" PRIu64 "%s\n", c->o->dir, c->o->dir, c->o->seed,
           c->o->mirror ? "" : " --single");
  fflush (stderr);
  journal_note (&c->j, "FAILED");
  _exit (3);
}

/* ---- locks */

/* A random volume, locked shared or exclusive; NULL when the slot is empty. */
static struct mvol *
pick (struct child *c, struct rng *r, bool excl)
{
  struct mvol *v = &c->m.v[rng_below (r, MODEL_VOLS)];

  if (excl)
    pthread_rwlock_wrlock (&v->rw);
  else
    pthread_rwlock_rdlock (&v->rw);
  if (v->alive && v->h != NULL)
    return v;
  pthread_rwlock_unlock (&v->rw);
  return NULL;
}

/* Wait until no data operation on v overlaps [off, off + len), then hold
 * it.
 */
static void
range_lock (struct mvol *v, uint64_t off, uint64_t len, unsigned *slot)
{
  pthread_mutex_lock (&v->rl);
  for (;;) {
    bool busy = false;
    unsigned freeslot = MODEL_RANGES;

    for (unsigned i = 0; i < MODEL_RANGES; i++) {
      if (!v->range[i].used) {
        freeslot = MIN (freeslot, i);
        continue;
      }
      if (off < v->range[i].off + v->range[i].len &&
          v->range[i].off < off + len)
        busy = true;
    }
    if (!busy && freeslot < MODEL_RANGES) {
      v->range[freeslot].off = off;
      v->range[freeslot].len = len;
      v->range[freeslot].used = true;
      *slot = freeslot;
      break;
    }
    pthread_cond_wait (&v->rc, &v->rl);
  }
  pthread_mutex_unlock (&v->rl);
}

/* Let go of a range range_lock gave. */
static void
range_unlock (struct mvol *v, unsigned slot)
{
  pthread_mutex_lock (&v->rl);
  v->range[slot].used = false;
  pthread_cond_broadcast (&v->rc);
  pthread_mutex_unlock (&v->rl);
}

/* Reserve a free slot for a new volume and take it exclusive. */
static struct mvol *
reserve (struct child *c, struct rng *r)
{
  struct mvol *k = NULL;

  pthread_mutex_lock (&c->m.ns);
  for (unsigned i = 0; i < MODEL_VOLS && k == NULL; i++)
    if (!c->m.v[i].alive && !c->m.v[i].reserved)
      k = &c->m.v[i];
  if (k != NULL) {
    k->reserved = true;
    snprintf (k->name, sizeof k->name, "v%08" PRIx64, rng_next (r) & 0xffffffff);
  }
  pthread_mutex_unlock (&c->m.ns);
  if (k != NULL)
    pthread_rwlock_wrlock (&k->rw);
  return k;
}

/* Give back a reserved slot that did not become a volume, and its lock. */
static void
unreserve (struct child *c, struct mvol *k)
{
  pthread_mutex_lock (&c->m.ns);
  if (!k->alive) {
    k->reserved = false;
    k->name[0] = '\0';
  }
  pthread_mutex_unlock (&c->m.ns);
  pthread_rwlock_unlock (&k->rw);
}

/* Open the child's handle on a volume. */
static void
handle_open (struct child *c, struct mvol *v)
{
  if (vol_open (c->pool, v->name, &v->h) < 0)
    fail (c, "open %s: %s", v->name, cairn_errmsg ());
}

/* Close the child's handle on a volume, if open. */
static void
handle_close (struct mvol *v)
{
  if (v->h != NULL)
    vol_close (v->h);
  v->h = NULL;
}

/* ---- data */

/* A random range of a volume of size bytes: 1 byte to 256 KiB, any
 * alignment.
 */
static void
pick_range (struct rng *r, uint64_t size, uint64_t *offp, uint64_t *lenp)
{
  uint64_t len = 1 + rng_below (r, (uint64_t) 1 << rng_below (r, 19));

  len = MIN (len, (uint64_t) MAX_IO);
  if (rng_below (r, 2) == 0)
    len = (len + 4095) & ~4095ull;
  len = MIN (len, size);
  *offp = rng_below (r, size - len + 1);
  if (rng_below (r, 2) == 0)
    *offp &= ~4095ull;
  *lenp = len;
}

/* After a data operation failed: take what the volume reads (each byte
 * either the old or the new one, or the failure is a bug).
 */
static void
resync (struct child *c, struct mvol *v, const struct mop *op)
{
  uint8_t *buf = malloc (op->len);

  if (vol_pread (v->h, buf, (uint32_t) op->len, op->off) < 0)
    fail (c, "read after a failed %c of %s: %s", op->kind, v->name,
          cairn_errmsg ());
  for (uint64_t i = 0; i < op->len; i++) {
    uint8_t nw = op->kind == 'W' ? pattern_byte (op->tag, i) : 0;

    if (buf[i] != v->img[op->off + i] && buf[i] != nw)
      fail (c, "%s byte %" PRIu64 " after a failed %c: neither old nor new",
            v->name, op->off + i, op->kind);
  }
  memcpy (v->img + op->off, buf, op->len);
  free (buf);
}

/* A write, zero or trim of a random range, checked into the model. */
static int
op_data (struct child *c, struct worker *w, enum kind k)
{
  struct mvol *v = pick (c, &w->rng, false);
  struct mop op = { 0 };
  unsigned slot, flags;
  uint8_t *buf = NULL;
  uint64_t id;
  int r;

  if (v == NULL)
    return 1;
  if (v->size == 0) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  op.kind = k == K_WRITE ? 'W' : k == K_ZERO ? 'Z' : 'T';
  snprintf (op.a, sizeof op.a, "%s", v->name);
  pick_range (&w->rng, v->size, &op.off, &op.len);
  op.tag = rng_next (&w->rng);
  flags = rng_below (&w->rng, 8) == 0 ? VOL_FUA : 0;
  op.fua = flags != 0;
  range_lock (v, op.off, op.len, &slot);
  oplog (c, w->no, "%c %s %" PRIu64 "+%" PRIu64, op.kind, v->name, op.off,
         op.len);
  if (k == K_WRITE) {
    buf = malloc (op.len);
    pattern_fill (buf, op.len, op.tag);
  }
  id = journal_begin (&c->j, &op);
  if (k == K_WRITE)
    r = vol_pwrite (v->h, buf, (uint32_t) op.len, op.off, flags);
  else if (k == K_ZERO)
    r = vol_zero (v->h, (uint32_t) op.len, op.off, flags);
  else
    r = vol_trim (v->h, (uint32_t) op.len, op.off, flags);
  if (r == 0)
    model_apply (&c->m, &op);
  else if (r == -ENOSPC)
    resync (c, v, &op);
  else
    fail (c, "%c %s %" PRIu64 "+%" PRIu64 ": %s", op.kind, v->name, op.off,
          op.len, cairn_errmsg ());
  journal_end (&c->j, id, r);
  range_unlock (v, slot);
  pthread_rwlock_unlock (&v->rw);
  free (buf);
  return r == 0 ? 0 : 1;
}

/* Fail when what was read is not what the model holds. */
static void
check_bytes (struct child *c, const char *what, uint64_t off,
             const uint8_t *got, const uint8_t *want, uint64_t len)
{
  if (memcmp (got, want, len) != 0) {
    uint64_t i = 0;

    while (got[i] == want[i])
      i++;
    fail (c, "%s: byte %" PRIu64 " reads 0x%02x, the model says 0x%02x "
          "(read of %" PRIu64 "+%" PRIu64 ")", what, off + i, got[i],
          want[i], off, len);
  }
}

/* Read a random range of a live volume or a snapshot and compare it. */
static int
op_read (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, false);
  struct mop op = { .kind = 'r' };
  uint64_t off, len;
  uint8_t *buf;
  unsigned slot;
  int r;

  if (v == NULL)
    return 1;
  journal_begin (&c->j, &op);
  if (v->nsnaps > 0 && rng_below (&w->rng, 3) == 0) {
    /* A snapshot: opened for the read, as a client would. */
    struct msnap *s = &v->snap[rng_below (&w->rng, v->nsnaps)];
    char name[2 * MODEL_NAME + 2];
    struct cairn_volume *h;

    snprintf (name, sizeof name, "%s@%s", v->name, s->name);
    if (s->size == 0) {
      pthread_rwlock_unlock (&v->rw);
      return 1;
    }
    pick_range (&w->rng, s->size, &off, &len);
    oplog (c, w->no, "read %s %" PRIu64 "+%" PRIu64, name, off, len);
    if (vol_open (c->pool, name, &h) < 0)
      fail (c, "open %s: %s", name, cairn_errmsg ());
    buf = malloc (len);
    if (vol_pread (h, buf, (uint32_t) len, off) < 0)
      fail (c, "read %s: %s", name, cairn_errmsg ());
    check_bytes (c, name, off, buf, s->img + off, len);
    vol_close (h);
    free (buf);
    pthread_rwlock_unlock (&v->rw);
    return 0;
  }
  if (v->size == 0) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  pick_range (&w->rng, v->size, &off, &len);
  range_lock (v, off, len, &slot);
  oplog (c, w->no, "read %s %" PRIu64 "+%" PRIu64, v->name, off, len);
  buf = malloc (len);
  r = vol_pread (v->h, buf, (uint32_t) len, off);
  if (r < 0)
    fail (c, "read %s %" PRIu64 "+%" PRIu64 ": %s", v->name, off, len,
          cairn_errmsg ());
  check_bytes (c, v->name, off, buf, v->img + off, len);
  range_unlock (v, slot);
  pthread_rwlock_unlock (&v->rw);
  free (buf);
  return 0;
}

/* Flush the pool: the journal's durable point (verify.c, V1).  With the
 * intent log, a flush as NBD's FLUSH makes it (vol_flush): the records of
 * the writes acknowledged so far go to the log under one device flush
 * (txn-log.c, IL-2, IL-5); without, a commit.  Both make durable every
 * change acknowledged before the call.
 */
static int
op_flush (struct child *c, struct worker *w)
{
  struct mop op = { .kind = 'F' };
  uint64_t id;
  int r;

  oplog (c, w->no, "flush");
  id = journal_begin (&c->j, &op);
  r = c->o->intent_log ? pool_log_flush (c->pool) : pool_commit (c->pool);
  if (r < 0)
    fail (c, "flush: %s", cairn_errmsg ());
  journal_end (&c->j, id, r);
  return 0;
}

/* ---- catalog */

/* Run a catalog change: journal, call, model; errors other than those
 * allowed fail the run.
 */
static int
catalog_done (struct child *c, uint64_t id, const struct mop *op, int r,
              int ok1, int ok2)
{
  char s[400];

  mop_format (op, s, sizeof s);
  if (r == 0 && model_apply (&c->m, op) < 0)
    fail (c, "the model cannot take %s", s);
  if (r < 0 && r != ok1 && r != ok2)
    fail (c, "%s: %s", s, cairn_errmsg ());
  journal_end (&c->j, id, r);
  return r == 0 ? 0 : 1;
}

/* Snapshot a volume, or delete one of its snapshots. */
static int
op_snapshot (struct child *c, struct worker *w, bool del)
{
  struct mvol *v = pick (c, &w->rng, true);
  struct mop op = { .kind = del ? 'X' : 'S' };
  uint64_t id;
  int r;

  if (v == NULL)
    return 1;
  if (del ? v->nsnaps == 0 : v->nsnaps == MODEL_SNAPS) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  snprintf (op.a, sizeof op.a, "%s", v->name);
  if (del)
    snprintf (op.b, sizeof op.b, "%s",
              v->snap[rng_below (&w->rng, v->nsnaps)].name);
  else
    snprintf (op.b, sizeof op.b, "s%08" PRIx64, rng_next (&w->rng) & 0xffffffff);
  oplog (c, w->no, "%s %s@%s", del ? "snapdelete" : "snapshot", op.a, op.b);
  id = journal_begin (&c->j, &op);
  r = del ? snap_delete (c->pool, op.a, op.b) : snap_create (c->pool, op.a,
                                                              op.b);
  r = catalog_done (c, id, &op, r, -EBUSY, -ENOSPC);
  pthread_rwlock_unlock (&v->rw);
  return r;
}

/* Clone a volume or a snapshot, or create a volume, into a free slot. */
static int
op_clone (struct child *c, struct worker *w, bool create)
{
  struct mvol *v = create ? NULL : pick (c, &w->rng, true);
  struct mop op = { .kind = create ? 'N' : 'C' };
  struct mvol *k;
  uint64_t id;
  int r;

  if (!create && v == NULL)
    return 1;
  k = reserve (c, &w->rng);
  if (k == NULL) {
    if (v != NULL)
      pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  if (create) {
    snprintf (op.a, sizeof op.a, "%s", k->name);
    op.len = (1 + rng_below (&w->rng, 32)) * 64 * 1024;
  }
  else {
    if (v->nsnaps > 0 && rng_below (&w->rng, 2) == 0)
      snprintf (op.a, sizeof op.a, "%s@%s", v->name,
                v->snap[rng_below (&w->rng, v->nsnaps)].name);
    else
      snprintf (op.a, sizeof op.a, "%s", v->name);
    snprintf (op.b, sizeof op.b, "%s", k->name);
  }
  oplog (c, w->no, "%s %s %s", create ? "create" : "clone", op.a, op.b);
  id = journal_begin (&c->j, &op);
  r = create ? vol_create (c->pool, op.a, op.len, NULL)
             : vol_clone (c->pool, op.a, op.b);
  r = catalog_done (c, id, &op, r, -ENOSPC, -EBUSY);
  if (r == 0)
    handle_open (c, k);
  unreserve (c, k);
  if (v != NULL)
    pthread_rwlock_unlock (&v->rw);
  return r;
}

/* Delete a volume and its snapshots. */
static int
op_delete (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, true);
  struct mop op = { .kind = 'D' };
  uint64_t id;
  int r;

  if (v == NULL)
    return 1;
  snprintf (op.a, sizeof op.a, "%s", v->name);
  oplog (c, w->no, "delete %s", op.a);
  handle_close (v);
  id = journal_begin (&c->j, &op);
  r = vol_delete (c->pool, op.a, VOL_DELETE_RECURSIVE);
  r = catalog_done (c, id, &op, r, -EBUSY, -EBUSY);
  if (r != 0)
    handle_open (c, v);
  pthread_rwlock_unlock (&v->rw);
  return r;
}

/* Rename a volume, or resize it (growing or shrinking). */
static int
op_rename (struct child *c, struct worker *w, bool resize)
{
  struct mvol *v = pick (c, &w->rng, true);
  struct mop op = { .kind = resize ? 'Q' : 'R' };
  uint64_t id;
  int r;

  if (v == NULL)
    return 1;
  snprintf (op.a, sizeof op.a, "%s", v->name);
  if (resize)
    op.len = rng_below (&w->rng, 2) && v->size < 4 * MIB
               ? v->size + 4096 * rng_below (&w->rng, 64)
               : 4096 * (1 + rng_below (&w->rng, v->size / 4096 + 1));
  else
    snprintf (op.b, sizeof op.b, "v%08" PRIx64, rng_next (&w->rng) & 0xffffffff);
  oplog (c, w->no, "%s %s %s %" PRIu64, resize ? "resize" : "rename", op.a,
         op.b, op.len);
  handle_close (v);
  id = journal_begin (&c->j, &op);
  r = resize ? vol_resize (c->pool, op.a, op.len, true)
             : vol_rename (c->pool, op.a, op.b);
  r = catalog_done (c, id, &op, r, -ENOSPC, -EBUSY);
  handle_open (c, v);
  pthread_rwlock_unlock (&v->rw);
  return r;
}

/* Roll a volume back to its newest snapshot, keeping the live state as a
 * new volume.
 */
static int
op_rollback (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, true);
  struct mop op = { .kind = 'L' };
  struct mvol *k;
  uint64_t id;
  int r;

  if (v == NULL)
    return 1;
  if (v->nsnaps == 0 || (k = reserve (c, &w->rng)) == NULL) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  snprintf (op.a, sizeof op.a, "%s", v->name);
  snprintf (op.b, sizeof op.b, "%s", v->snap[v->nsnaps - 1].name);
  snprintf (op.c, sizeof op.c, "%s", k->name);
  oplog (c, w->no, "rollback %s to %s, keep %s", op.a, op.b, op.c);
  handle_close (v);
  id = journal_begin (&c->j, &op);
  r = vol_rollback (c->pool, op.a, op.b, op.c);
  r = catalog_done (c, id, &op, r, -ENOSPC, -EBUSY);
  handle_open (c, v);
  if (r == 0)
    handle_open (c, k);
  unreserve (c, k);
  pthread_rwlock_unlock (&v->rw);
  return r;
}

/* ---- diff, send and receive, checkpoints, faults */

struct diffcheck {
  const uint8_t *to;
  uint8_t *covered;
  uint64_t size;
  bool bad;
};

/* Mark what a diff run covers; a hole must read as zeros. */
static int
diff_fn (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  struct diffcheck *d = opaque;

  if (off + len > d->size) {
    d->bad = true;
    return 0;
  }
  memset (d->covered + off, 1, len);
  if (type == VOL_DIFF_HOLE)
    for (uint64_t i = off; i < off + len; i++)
      if (d->to[i] != 0)
        d->bad = true;
  return 0;
}

/* Diff a snapshot against the live volume: every changed byte must be
 * covered.
 */
static int
op_diff (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, true);
  char from[2 * MODEL_NAME + 2];
  struct diffcheck d;
  struct msnap *s;

  if (v == NULL)
    return 1;
  if (v->nsnaps == 0 ||
      (s = &v->snap[rng_below (&w->rng, v->nsnaps)])->size != v->size) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  snprintf (from, sizeof from, "%s@%s", v->name, s->name);
  journal_begin (&c->j, &(struct mop) { .kind = 'd' });
  oplog (c, w->no, "diff %s %s", from, v->name);
  d = (struct diffcheck) { v->img, calloc (1, v->size + 1), v->size, false };
  if (vol_diff (c->pool, from, v->name, diff_fn, &d) < 0)
    fail (c, "diff %s %s: %s", from, v->name, cairn_errmsg ());
  if (d.bad)
    fail (c, "diff %s %s: a hole that holds data, or a run past the end",
          from, v->name);
  for (uint64_t i = 0; i < v->size; i++)
    if (s->img[i] != v->img[i] && !d.covered[i])
      fail (c, "diff %s %s: byte %" PRIu64 " changed, and no run covers it",
            from, v->name, i);
  free (d.covered);
  pthread_rwlock_unlock (&v->rw);
  return 0;
}

struct buf {
  uint8_t *p;
  size_t len, cap;
};

/* The sink of a stream into a growing buffer. */
static int
buf_sink (void *opaque, const void *data, size_t len)
{
  struct buf *b = opaque;

  if (b->len + len > b->cap) {
    size_t cap = MAX (b->cap * 2, b->len + len + 65536);
    uint8_t *p = realloc (b->p, cap);

    if (p == NULL)
      return -ENOMEM;         /* the stream's writer reports it */
    b->p = p;
    b->cap = cap;
  }
  memcpy (b->p + b->len, data, len);
  b->len += len;
  return 0;
}

/* Send snap (from: NULL or the base) into pool B's target, fed in pieces,
 * and check what it received against the model.
 */
static void
send_one (struct child *c, struct worker *w, const char *snap,
          const char *from, const char *target, const struct msnap *want)
{
  struct buf b = { NULL, 0, 0 };
  struct repl_send_opts so = { .from = from, .sink = buf_sink,
                               .sink_opaque = &b };
  struct repl_send_result sres;
  struct repl_recv_result rres;
  struct repl_recv *rr;
  char got[2 * MODEL_NAME + 2];
  uint8_t *img;
  size_t off = 0;
  int r;

  if (repl_send (c->pool, snap, &so, &sres) < 0)
    fail (c, "send %s from %s: %s", snap, from ? from : "-", cairn_errmsg ());
  if (repl_recv_new (c->pool_b, target, NULL, &rr) < 0)
    fail (c, "receive into %s: %s", target, cairn_errmsg ());
  r = 0;
  while (off < b.len && r == 0) {
    size_t n = MIN (b.len - off, 1 + rng_below (&w->rng, 256 * 1024)), used = 0;

    r = repl_recv_feed (rr, b.p + off, n, &used);
    off += used;
  }
  r = repl_recv_finish (rr, &rres);
  repl_recv_free (rr);
  /* The errno too: a message is only as good as the function that
   * failed, and one that sets none leaves an older one behind (the
   * listing race in tests/stress/README.md showed a stale message).
   */
  if (r < 0)
    fail (c, "receive %s into %s: %s (%s)", snap, target, cairn_errmsg (),
          strerror (-r));
  snprintf (got, sizeof got, "%s@%s", target, want->name);
  {
    struct cairn_volume *h;

    if (vol_open (c->pool_b, got, &h) < 0)
      fail (c, "open received %s: %s", got, cairn_errmsg ());
    if (vol_size (h) != want->size)
      fail (c, "received %s is %" PRIu64 " bytes, must be %" PRIu64, got,
            vol_size (h), want->size);
    img = malloc (want->size + 1);
    for (uint64_t o = 0; o < want->size; o += MIB)
      if (vol_pread (h, img + o, (uint32_t) MIN (MIB, want->size - o), o) < 0)
        fail (c, "read received %s: %s", got, cairn_errmsg ());
    vol_close (h);
  }
  check_bytes (c, got, 0, img, want->img, want->size);
  free (img);
  free (b.p);
}

/* Send a snapshot in full, then incrementally to a newer one, into pool B,
 * and compare.
 */
static int
op_send (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, false);
  char snap[2 * MODEL_NAME + 2], base[2 * MODEL_NAME + 2], target[32];
  unsigned i, j;

  if (v == NULL)
    return 1;
  if (v->nsnaps == 0) {
    pthread_rwlock_unlock (&v->rw);
    return 1;
  }
  i = (unsigned) rng_below (&w->rng, v->nsnaps);
  j = i + (unsigned) rng_below (&w->rng, v->nsnaps - i);
  snprintf (target, sizeof target, "t%u-%08" PRIx64, w->no,
            rng_next (&w->rng) & 0xffffffff);
  snprintf (base, sizeof base, "%s@%s", v->name, v->snap[i].name);
  journal_begin (&c->j, &(struct mop) { .kind = 's' });
  oplog (c, w->no, "send %s (to %s) into %s", base, v->snap[j].name, target);
  send_one (c, w, base, NULL, target, &v->snap[i]);
  if (j > i) {
    snprintf (snap, sizeof snap, "%s@%s", v->name, v->snap[j].name);
    send_one (c, w, snap, base, target, &v->snap[j]);
  }
  if (vol_delete (c->pool_b, target, VOL_DELETE_RECURSIVE) < 0)
    fail (c, "delete received %s: %s", target, cairn_errmsg ());
  pthread_rwlock_unlock (&v->rw);
  return 0;
}

/* Count the checkpoints listed. */
static int
ckpt_count (void *opaque, const struct vol_checkpoint *cp)
{
  (void) cp;
  (*(uint64_t *) opaque)++;
  return 0;
}

/* Run the checkpoint collector and list a volume's checkpoints. */
static int
op_collect (struct child *c, struct worker *w)
{
  struct mvol *v = pick (c, &w->rng, false);
  uint64_t n = 0;

  journal_begin (&c->j, &(struct mop) { .kind = 'k' });
  oplog (c, w->no, "checkpoints: collect");
  if (vol_checkpoint_collect (c->pool) < 0)
    fail (c, "checkpoint collect: %s", cairn_errmsg ());
  if (v != NULL) {
    if (vol_checkpoint_list (c->pool, v->name, 0, UINT64_MAX, ckpt_count,
                             &n) < 0)
      fail (c, "checkpoint list %s: %s", v->name, cairn_errmsg ());
    pthread_rwlock_unlock (&v->rw);
  }
  return 0;
}

/* Damage one copy, always one on the faulty device (never both copies of
 * anything): flip a bit of a byte that it was written lately, or make one
 * of its next reads fail.
 */
static int
op_fault (struct child *c, struct worker *w)
{
  unsigned f = c->devs.faulty;
  uint64_t off;

  if (!c->o->mirror)
    return 1;
  journal_begin (&c->j, &(struct mop) { .kind = 'f' });
  if (rng_below (&w->rng, 2) == 0) {
    dev_fault_set (c->devs.fault[f], DEV_FAULT_READ,
                   1 + rng_below (&w->rng, 20), false, -EIO);
    __atomic_add_fetch (&c->eios, 1, __ATOMIC_RELAXED);
    oplog (c, w->no, "fault: EIO on a read of device %u", f);
    return 0;
  }
  if (!cache_dev_recent (c->devs.cache[f], rng_next (&w->rng), &off))
    return 1;
  if (cache_dev_flip (c->devs.cache[f], off, (unsigned) rng_next (&w->rng))
      < 0)
    fail (c, "flip: %s", cairn_errmsg ());
  __atomic_add_fetch (&c->flips, 1, __ATOMIC_RELAXED);
  oplog (c, w->no, "fault: bit flip at %" PRIu64 " of device %u", off, f);
  return 0;
}

/* A thread of random operations until the child stops. */
static void *
worker_main (void *arg)
{
  struct worker *w = arg;
  struct child *c = w->c;

  while (!c->stop) {
    unsigned x = (unsigned) rng_below (&w->rng, 1000), k = 0;
    int r = 1;

    while (x >= kind_weight[k]) {
      x -= kind_weight[k];
      k++;
    }
    switch ((enum kind) k) {
    case K_WRITE: case K_ZERO: case K_TRIM: r = op_data (c, w, k); break;
    case K_READ: r = op_read (c, w); break;
    case K_FLUSH: r = op_flush (c, w); break;
    case K_SNAP: r = op_snapshot (c, w, false); break;
    case K_SNAPDEL: r = op_snapshot (c, w, true); break;
    case K_CLONE: r = op_clone (c, w, false); break;
    case K_CREATE: r = op_clone (c, w, true); break;
    case K_DELETE: r = op_delete (c, w); break;
    case K_RENAME: r = op_rename (c, w, false); break;
    case K_RESIZE: r = op_rename (c, w, true); break;
    case K_ROLLBACK: r = op_rollback (c, w); break;
    case K_DIFF: r = op_diff (c, w); break;
    case K_SEND: r = op_send (c, w); break;
    case K_COLLECT: r = op_collect (c, w); break;
    case K_FAULT: r = op_fault (c, w); break;
    case K_COUNT: break;
    }
    __atomic_add_fetch (r == 0 ? &c->count[k] : &c->skipped[k], 1,
                        __ATOMIC_RELAXED);
  }
  return NULL;
}

/* Read every volume and snapshot whole and compare with the model. */
static void
check_all (struct child *c, const char *when)
{
  struct model *got = malloc (sizeof *got);

  model_init (got);
  if (model_load (got, c->pool) < 0)
    fail (c, "%s: the pool cannot be read whole: %s", when, cairn_errmsg ());
  for (unsigned i = 0; i < MODEL_VOLS; i++) {
    struct mvol *w = &c->m.v[i], *g;

    if (!w->alive)
      continue;
    if ((g = model_find (got, w->name)) == NULL)
      fail (c, "%s: volume %s is missing", when, w->name);
    if (g->size != w->size)
      fail (c, "%s: %s is %" PRIu64 " bytes, must be %" PRIu64, when,
            w->name, g->size, w->size);
    check_bytes (c, w->name, 0, g->img, w->img, w->size);
    if (g->nsnaps != w->nsnaps)
      fail (c, "%s: %s has %u snapshots, must have %u", when, w->name,
            g->nsnaps, w->nsnaps);
    for (unsigned k = 0; k < w->nsnaps; k++) {
      struct msnap *gs = model_find_snap (g, w->snap[k].name);

      if (gs == NULL || gs->size != w->snap[k].size)
        fail (c, "%s: snapshot %s@%s missing or resized", when, w->name,
              w->snap[k].name);
      check_bytes (c, w->snap[k].name, 0, gs->img, w->snap[k].img,
                   gs->size);
    }
  }
  model_clear (got);
  free (got);
}

/* The receiving pool, in memory. */
static void
pool_b_make (struct child *c)
{
  if (dev_mem_create (128 * MIB, &c->dev_b) < 0 ||
      pool_format (c->dev_b, &(struct pool_format_opts) { 0 }, NULL) < 0 ||
      pool_open (c->dev_b, &(struct pool_open_opts) { 0 }, &c->pool_b) < 0)
    fail (c, "the receiving pool: %s", cairn_errmsg ());
}

int
stress_child (const struct stress_opts *o)
{
  struct child *c = calloc (1, sizeof *c);
  struct worker *w = calloc (o->threads, sizeof *w);
  struct timespec start, now;
  char path[4096];
  unsigned nvols = 0;

  c->o = o;
  model_init (&c->m);
  pthread_mutex_init (&c->log_lock, NULL);
  snprintf (path, sizeof path, "%s/journal", o->dir);
  if (journal_open (&c->j, path) < 0) {
    fprintf (stderr, "stress: %s\n", cairn_errmsg ());
    return 2;
  }
  journal_note (&c->j, "child seed %" PRIu64, o->seed);
  if (stress_devs_open (o, DEVS_CHILD, o->seed, &c->devs) < 0 ||
      pool_open (c->devs.top, &(struct pool_open_opts) {
                   .intent_log = o->intent_log }, &c->pool) < 0)
    fail (c, "open the pool: %s", cairn_errmsg ());
  if (pool_start_committer (c->pool, 200) < 0)
    fail (c, "committer: %s", cairn_errmsg ());
  pool_b_make (c);
  if (model_load (&c->m, c->pool) < 0)
    fail (c, "load the model: %s", cairn_errmsg ());
  for (unsigned i = 0; i < MODEL_VOLS; i++)
    if (c->m.v[i].alive) {
      handle_open (c, &c->m.v[i]);
      nvols++;
    }
  /* A new pool starts with four volumes. */
  for (struct worker w0 = { c, 0, { o->seed }, 0 }; nvols < 4; nvols++)
    op_clone (c, &w0, true);
  clock_gettime (CLOCK_MONOTONIC, &start);
  for (unsigned t = 0; t < o->threads; t++) {
    w[t] = (struct worker) { c, t, { o->seed ^ ((t + 1) * 0x51ed27ull) }, 0 };
    pthread_create (&w[t].thread, NULL, worker_main, &w[t]);
  }
  do {
    struct timespec ts = { 0, 20 * 1000 * 1000 };

    nanosleep (&ts, NULL);
    clock_gettime (CLOCK_MONOTONIC, &now);
  } while ((double) (now.tv_sec - start.tv_sec) +
           (double) (now.tv_nsec - start.tv_nsec) / 1e9 < o->seconds);
  c->stop = true;
  for (unsigned t = 0; t < o->threads; t++)
    pthread_join (w[t].thread, NULL);
  check_all (c, "at the end");
  for (unsigned i = 0; i < MODEL_VOLS; i++)
    handle_close (&c->m.v[i]);
  if (o->mirror) {
    struct dev_member_info mi;

    dev_chunk_member (c->devs.top, c->devs.faulty_member, &mi);
    c->healed = mi.repaired;
    c->read_errors = mi.read_errors;
    c->cksum_errors = mi.cksum_errors;
  }
  pool_stop_committer (c->pool);
  if (pool_close (c->pool) < 0)
    fail (c, "close: %s", cairn_errmsg ());
  pool_close (c->pool_b);
  dev_close (c->dev_b);
  if (dev_flush (c->devs.top) < 0)
    fail (c, "flush: %s", cairn_errmsg ());
  stress_devs_close (&c->devs);
  printf ("stress: seed %" PRIu64 ", %u threads, %.0f s:", o->seed,
          o->threads, o->seconds);
  for (unsigned k = 0; k < K_COUNT; k++)
    printf (" %s %" PRIu64, kind_name[k], c->count[k]);
  printf ("; faults: %" PRIu64 " bit flips, %" PRIu64 " EIO armed; the "
          "faulty device counted %" PRIu64 " read errors, %" PRIu64
          " checksum errors, %" PRIu64 " repairs\n", c->flips, c->eios,
          c->read_errors, c->cksum_errors, c->healed);
  journal_close (&c->j);
  model_clear (&c->m);
  free (w);
  free (c);
  return 0;
}
