/* Unit tests for volumes: the randomised model test, in which every volume
 * and snapshot is a byte array, compared after every step, across
 * snapshots, clones, diffs, deletes (also of states still open), resizes,
 * rollbacks, commits and reopens (fsck clean at each), ending with every
 * block given back.  A second, shorter case runs with the intent log on
 * (engine/txn-log.c): most commits are log flushes, and half the reopens
 * are crashes right after one, reopened (replayed) from a copy of the
 * device as the flush left it.
 * Its seed is printed (test-util.h).
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define VSIZE (2u << 20)
#define MAXSTATES 24

/* A state: a live volume or a snapshot, and its bytes. */
struct state {
  bool used;
  char name[64];            /* "vN" or "vN@sM" */
  char vol[32];             /* its volume */
  bool snapshot;
  uint64_t size;
  uint8_t *bytes;
  struct cairn_volume *h;   /* open handle of a live volume */
  bool zombie;              /* deleted while h was open: still readable
                               (and writable, if live) through h */
};

static void drop_state (struct state *s);

struct world {
  struct cairn_dev *dev;
  uint64_t dev_size;
  bool intent_log;            /* flushes log; some reopens are crashes */
  unsigned crashes, replays;  /* crash reopens; those with records live */
  struct cairn_pool *pool;
  struct state st[MAXSTATES];
  unsigned next_vol, next_snap;
  unsigned clones, snap_deletes, vol_deletes, reopens, unique_checks, diffs;
  unsigned rollbacks, zombies;
  struct rng r;
};

static void do_write (struct world *w, struct state *s);

static struct state *
pick (struct world *w, int want_snapshot)
{
  unsigned n = 0, idx[MAXSTATES];

  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && !w->st[i].zombie &&
        (want_snapshot < 0 || w->st[i].snapshot == want_snapshot))
      idx[n++] = i;
  return n ? &w->st[idx[rng_below (&w->r, n)]] : NULL;
}

static struct state *
free_slot (struct world *w)
{
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (!w->st[i].used)
      return &w->st[i];
  return NULL;
}

/* Compare a state with the engine, in full or over a range. */
static void
check_state (struct world *w, struct state *s, uint64_t off, uint64_t len,
             const char *when)
{
  struct cairn_volume *h = s->h;
  uint8_t *buf = malloc (len ? len : 1);

  if (h == NULL)
    cr_assert_eq (vol_open (w->pool, s->name, &h), 0, "%s: open %s: %s", when,
                  s->name, cairn_errmsg ());
  cr_assert_eq (vol_size (h), s->size, "%s: size of %s", when, s->name);
  cr_assert_eq (vol_pread (h, buf, (uint32_t) len, off), 0, "%s: read %s: %s",
                when, s->name, cairn_errmsg ());
  if (memcmp (buf, s->bytes + off, len) != 0) {
    uint64_t i = 0;
    while (buf[i] == s->bytes[off + i])
      i++;
    cr_assert_fail ("%s: %s differs from the model at byte %" PRIu64, when,
                    s->name, off + i);
  }
  if (h != s->h)
    vol_close (h);
  free (buf);
}

static void
check_all (struct world *w, const char *when)
{
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used)
      check_state (w, &w->st[i], 0, w->st[i].size, when);
}

static void
close_handles (struct world *w)
{
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].h) {
      vol_close (w->st[i].h);
      w->st[i].h = NULL;
      if (w->st[i].zombie)
        drop_state (&w->st[i]);
    }
}

/* A state deleted while open, or NULL. */
static struct state *
pick_zombie (struct world *w)
{
  unsigned n = 0, idx[MAXSTATES];

  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && w->st[i].zombie)
      idx[n++] = i;
  return n ? &w->st[idx[rng_below (&w->r, n)]] : NULL;
}

static void
open_handles (struct world *w)
{
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && !w->st[i].snapshot)
      cr_assert_eq (vol_open (w->pool, w->st[i].name, &w->st[i].h), 0, "%s",
                    cairn_errmsg ());
}

/* Open the world's pool, with the intent log if the world wants it. */
static struct cairn_pool *
world_open (struct world *w)
{
  struct cairn_pool *pool;

  cr_assert_eq (pool_open (w->dev, &(struct pool_open_opts) {
                             .intent_log = w->intent_log }, &pool), 0,
                "%s", cairn_errmsg ());
  return pool;
}

/* Make every change so far durable: a commit, or with the intent log
 * mostly a log flush (the first after an open commits, IL-8).
 */
static void
do_flush (struct world *w)
{
  if (w->intent_log && rng_below (&w->r, 4) != 0)
    cr_assert_eq (pool_log_flush (w->pool), 0, "%s", cairn_errmsg ());
  else
    cr_assert_eq (pool_commit (w->pool), 0, "%s", cairn_errmsg ());
}

/* With the intent log: a crash right after a write and a log flush (so
 * that the log holds a record, unless that flush had to commit).  The
 * device is
 * copied as the flush left it (background reclaim waited out first, so
 * nothing writes meanwhile), the pool is dropped without its closing
 * commit mattering, and the copy is opened read-write, which replays the
 * log: every state must be as the model has it.  fsck is clean before the
 * replay (a live log is no problem) and after.
 */
static void
crash (struct world *w, const char *when)
{
  struct cairn_dev *copy;
  struct fsck_report rep;
  struct problems p;
  struct state *v = pick (w, 0);

  if (v != NULL)
    do_write (w, v);
  cr_assert_eq (vol_reclaim_wait (w->pool, NULL, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (pool_log_flush (w->pool), 0, "%s", cairn_errmsg ());
  copy = copy_dev (w->dev, w->dev_size);
  close_handles (w);
  (void) pool_close (w->pool);
  dev_close (w->dev);
  w->dev = copy;
  rep = run_fsck (w->dev, &p);
  cr_assert_eq (rep.errors, 0, "%s, a crash after a log flush: fsck: %s",
                when, p.text);
  w->crashes++;
  w->replays += rep.intentlog_records > 0;
}

static void
reopen (struct world *w, const char *when)
{
  w->reopens++;
  if (w->intent_log && rng_below (&w->r, 2) == 0)
    crash (w, when);
  else {
    close_handles (w);
    cr_assert_eq (pool_close (w->pool), 0, "%s", cairn_errmsg ());
    assert_fsck_clean (w->dev, when);
  }
  w->pool = world_open (w);
  /* The first flush after an open commits (IL-8): the next ones log. */
  if (w->intent_log)
    cr_assert_eq (pool_log_flush (w->pool), 0, "%s", cairn_errmsg ());
  /* Small background steps, so deletes span commits and reopens. */
  vol_reclaim_set_budget (w->pool, 8 + rng_below (&w->r, 64));
  open_handles (w);
}

static void
new_volume (struct world *w)
{
  struct state *s = free_slot (w);

  if (s == NULL)
    return;
  memset (s, 0, sizeof *s);
  snprintf (s->vol, sizeof s->vol, "v%u", w->next_vol);
  snprintf (s->name, sizeof s->name, "v%u", w->next_vol++);
  s->size = VSIZE;
  s->bytes = calloc (1, VSIZE * 2);
  cr_assert_eq (vol_create (w->pool, s->name, s->size, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (w->pool, s->name, &s->h), 0);
  s->used = true;
}

static void
do_write (struct world *w, struct state *s)
{
  uint64_t len = 1 + rng_below (&w->r, 3 * 65536);
  uint64_t off = rng_below (&w->r, s->size);
  unsigned kind = (unsigned) rng_below (&w->r, 10);
  uint8_t *data;

  if (rng_below (&w->r, 2)) {       /* block-aligned half of the time */
    off &= ~4095ull;
    len = (len + 4095) & ~4095ull;
  }
  if (off + len > s->size)
    len = s->size - off;
  if (len == 0)
    return;
  data = malloc (len);
  fill_pattern (data, len, rng_next (&w->r));
  if (kind == 0)
    memset (data, 0, len);          /* zeros written as data */
  if (kind <= 7) {
    cr_assert_eq (vol_pwrite (s->h, data, (uint32_t) len, off,
                              kind == 7 ? VOL_FUA : 0), 0, "write %s: %s",
                  s->name, cairn_errmsg ());
    memcpy (s->bytes + off, data, len);
  }
  else {
    int r = kind == 8 ? vol_zero (s->h, (uint32_t) len, off, 0)
                      : vol_trim (s->h, (uint32_t) len, off, 0);
    cr_assert_eq (r, 0, "%s", cairn_errmsg ());
    memset (s->bytes + off, 0, len);
  }
  free (data);
  check_state (w, s, off, len, "after write");
}

static void
do_snapshot (struct world *w, struct state *v)
{
  struct state *s = free_slot (w);
  char vol[32];

  if (s == NULL)
    return;

  snprintf (vol, sizeof vol, "%s", v->vol);
  memset (s, 0, sizeof *s);
  snprintf (s->vol, sizeof s->vol, "%s", vol);
  snprintf (s->name, sizeof s->name, "%s@s%u", vol, w->next_snap);
  {
    char snap[16];
    snprintf (snap, sizeof snap, "s%u", w->next_snap++);
    cr_assert_eq (snap_create (w->pool, v->vol, snap), 0, "%s", cairn_errmsg ());
  }
  s->snapshot = true;
  s->size = v->size;
  s->bytes = malloc (VSIZE * 2);
  memcpy (s->bytes, v->bytes, VSIZE * 2);
  s->used = true;
}

static void
do_clone (struct world *w, struct state *src)
{
  struct state *c = free_slot (w);

  if (c == NULL)
    return;
  memset (c, 0, sizeof *c);
  snprintf (c->vol, sizeof c->vol, "v%u", w->next_vol);
  snprintf (c->name, sizeof c->name, "v%u", w->next_vol++);
  cr_assert_eq (vol_clone (w->pool, src->name, c->name), 0, "clone %s: %s",
                src->name, cairn_errmsg ());
  w->clones++;
  c->size = src->size;
  c->bytes = malloc (VSIZE * 2);
  memcpy (c->bytes, src->bytes, VSIZE * 2);
  cr_assert_eq (vol_open (w->pool, c->name, &c->h), 0, "%s", cairn_errmsg ());
  c->used = true;
}

/* Collect diff runs as a per-block map. */
struct diffmap {
  uint8_t *kind;            /* 0 unchanged, 1 data, 2 hole */
  uint64_t nblocks;
};

static int
diff_collect (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  struct diffmap *dm = opaque;

  cr_assert_eq (off % 4096, 0);
  for (uint64_t b = off / 4096; b < DIV_ROUND_UP (off + len, 4096); b++) {
    cr_assert_lt (b, dm->nblocks);
    cr_assert_eq (dm->kind[b], 0, "block %" PRIu64 " reported twice", b);
    dm->kind[b] = type == VOL_DIFF_DATA ? 1 : 2;
  }
  return 0;
}

/* The diff between a snapshot and its live volume equals the model's. */
static void
do_diff (struct world *w, struct state *s)
{
  struct state *v = NULL;
  struct diffmap dm;

  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && !w->st[i].zombie && !w->st[i].snapshot &&
        strcmp (w->st[i].vol, s->vol) == 0)
      v = &w->st[i];
  if (v == NULL)
    return;
  dm.nblocks = DIV_ROUND_UP (v->size, 4096);
  dm.kind = calloc (dm.nblocks, 1);
  cr_assert_eq (vol_diff (w->pool, s->name, v->name, diff_collect, &dm), 0,
                "diff %s %s: %s", s->name, v->name, cairn_errmsg ());
  for (uint64_t b = 0; b < dm.nblocks; b++) {
    bool differs = memcmp (s->bytes + b * 4096, v->bytes + b * 4096, 4096) != 0;
    static const uint8_t zero[4096];

    cr_assert_eq (dm.kind[b] != 0, differs, "diff %s %s: block %" PRIu64
                  " %s but %s", s->name, v->name, b,
                  differs ? "changed" : "did not change",
                  dm.kind[b] == 1 ? "was reported as data" : dm.kind[b] == 2 ? "was reported as a hole" : "was not reported");
    if (dm.kind[b] == 2)
      cr_assert_arr_eq (v->bytes + b * 4096, zero, 4096, "a hole reads zeros");
  }
  free (dm.kind);
  w->diffs++;
}

static void
drop_state (struct state *s)
{
  free (s->bytes);
  memset (s, 0, sizeof *s);
}

static void
do_delete_snapshot (struct world *w, struct state *s)
{
  const char *at = strchr (s->name, '@');
  struct snap_space sp;
  uint64_t before;

  /* The dry run says exactly what the deletion frees (measured with no
   * background delete running and no deferred delete due: those free
   * space too).
   */
  cr_assert_eq (pool_commit (w->pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (w->pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (snap_space (w->pool, s->vol, at + 1, &sp), 0, "%s", cairn_errmsg ());
  w->snap_deletes++;
  if (rng_below (&w->r, 4) == 0) {
    /* Deleted while a handle has it open: nothing is freed until the
     * handle closes, and the handle keeps reading the same data.
     */
    cr_assert_eq (vol_open (w->pool, s->name, &s->h), 0, "%s", cairn_errmsg ());
    before = vol_reclaimed_bytes (w->pool);
    cr_assert_eq (snap_delete (w->pool, s->vol, at + 1), 0, "%s", cairn_errmsg ());
    cr_assert_eq (vol_reclaimed_bytes (w->pool), before, "deleting open %s "
                  "freed something", s->name);
    {
      struct cairn_volume *h;
      cr_assert_eq (vol_open (w->pool, s->name, &h), -ENOENT);
    }
    s->zombie = true;
    w->zombies++;
    return;
  }
  before = vol_reclaimed_bytes (w->pool);
  cr_assert_eq (snap_delete (w->pool, s->vol, at + 1), 0, "%s", cairn_errmsg ());
  /* Small steps: a large delete finishes in the background. */
  cr_assert_eq (vol_reclaim_wait (w->pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaimed_bytes (w->pool) - before, sp.unique,
                "deleting %s freed %" PRIu64 " bytes, its unique figure said %"
                PRIu64, s->name, vol_reclaimed_bytes (w->pool) - before, sp.unique);
  w->unique_checks += sp.unique > 0;
  drop_state (s);
}

static void
do_delete_volume (struct world *w, struct state *v)
{
  bool snaps = false, keep_open = v->h && rng_below (&w->r, 4) == 0;

  w->vol_deletes++;
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && !w->st[i].zombie && w->st[i].snapshot &&
        strcmp (w->st[i].vol, v->vol) == 0)
      snaps = true;
  if (!keep_open) {
    vol_close (v->h);
    v->h = NULL;
  }
  if (snaps) {
    cr_assert_eq (vol_delete (w->pool, v->name, 0), -EBUSY);
    cr_assert_eq (vol_delete (w->pool, v->name, VOL_DELETE_RECURSIVE), 0, "%s",
                  cairn_errmsg ());
    for (unsigned i = 0; i < MAXSTATES; i++)
      if (w->st[i].used && !w->st[i].zombie && w->st[i].snapshot &&
        strcmp (w->st[i].vol, v->vol) == 0)
        drop_state (&w->st[i]);
  }
  else
    cr_assert_eq (vol_delete (w->pool, v->name, 0), 0, "%s", cairn_errmsg ());
  if (keep_open) {
    struct cairn_volume *h;

    /* Its handle keeps it readable and writable until it closes. */
    cr_assert_eq (vol_open (w->pool, v->name, &h), -ENOENT);
    v->zombie = true;
    w->zombies++;
    return;
  }
  drop_state (v);
}

/* The number M of snapshot "vN@sM": snapshots are taken one at a time,
 * so it orders a volume's snapshots as their generations do.
 */
static unsigned long
snap_number (const struct state *s)
{
  return strtoul (strchr (s->name, '@') + 2, NULL, 10);
}

/* Roll the volume of snapshot s back to it: the volume keeps s and its
 * older snapshots and becomes s again; its live state and the snapshots
 * after s move to a new name (catalog-rollback.c, VR-n).
 */
static void
do_rollback (struct world *w, struct state *s)
{
  struct state *v = NULL, *c = free_slot (w);
  char keep[32], vol[32], snap[32];

  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && !w->st[i].zombie && !w->st[i].snapshot &&
        strcmp (w->st[i].vol, s->vol) == 0)
      v = &w->st[i];
  if (v == NULL || c == NULL)
    return;
  snprintf (vol, sizeof vol, "%s", v->vol);
  snprintf (snap, sizeof snap, "%s", strchr (s->name, '@') + 1);
  vol_close (v->h);
  v->h = NULL;
  /* A client of a snapshot of it deleted while open (a zombie) still has
   * the volume open: the rollback is refused and changes nothing.
   */
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && w->st[i].h && strcmp (w->st[i].vol, vol) == 0) {
      cr_assert_eq (vol_rollback (w->pool, vol, snap, "unused"), -EBUSY,
                    "rollback of %s while %s is open", vol, w->st[i].name);
      cr_assert (strstr (cairn_errmsg (), "is open by 1 client") != NULL,
                 "%s", cairn_errmsg ());
      cr_assert_eq (vol_open (w->pool, v->name, &v->h), 0, "%s",
                    cairn_errmsg ());
      return;
    }
  snprintf (keep, sizeof keep, "v%u", w->next_vol++);
  cr_assert_eq (vol_rollback (w->pool, vol, snap, keep), 0, "rollback %s@%s: %s",
                vol, snap, cairn_errmsg ());
  /* The later history, under the new name. */
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w->st[i].used && strcmp (w->st[i].vol, vol) == 0 &&
        (!w->st[i].snapshot || snap_number (&w->st[i]) > snap_number (s))) {
      const char *at = strchr (w->st[i].name, '@');
      char name[64];

      snprintf (name, sizeof name, "%s%s", keep, at ? at : "");
      snprintf (w->st[i].name, sizeof w->st[i].name, "%s", name);
      snprintf (w->st[i].vol, sizeof w->st[i].vol, "%s", keep);
    }
  cr_assert_eq (vol_open (w->pool, v->name, &v->h), 0, "%s", cairn_errmsg ());
  /* The volume, new, as the snapshot was. */
  memset (c, 0, sizeof *c);
  snprintf (c->vol, sizeof c->vol, "%s", vol);
  snprintf (c->name, sizeof c->name, "%s", vol);
  c->size = s->size;
  c->bytes = malloc (VSIZE * 2);
  memcpy (c->bytes, s->bytes, VSIZE * 2);
  cr_assert_eq (vol_open (w->pool, c->name, &c->h), 0, "%s", cairn_errmsg ());
  c->used = true;
  w->rollbacks++;
}

static void
do_resize (struct world *w, struct state *v)
{
  uint64_t size = v->size + 4096 * (1 + rng_below (&w->r, 64));

  if (size > VSIZE * 2)
    return;
  cr_assert_eq (vol_resize (w->pool, v->name, size, false), 0, "%s", cairn_errmsg ());
  v->size = size;
}

/* Random histories of writes, trims, zeros, snapshots, clones, deletes,
 * resizes, commits and reopens; every state equals its model after every
 * step; fsck is clean at every reopen; deleting everything gives back
 * every block.  name prints with the seed; with intent_log, flushes log
 * and half the reopens are crashes (crash above).
 */
static void
random_histories (const char *name, unsigned steps, uint64_t dev_size,
                  bool intent_log)
{
  struct world w = { .dev_size = dev_size, .intent_log = intent_log };
  struct pool_info base, after;

  w.r.s = test_seed (name, 4242);
  w.dev = mem_pool (dev_size, NULL);
  w.pool = world_open (&w);
  /* The empty pool's figure, with the catalog's own trees in place (and
   * the intent log's ring, which the first flush makes and nothing frees).
   */
  cr_assert_eq (vol_create (w.pool, "probe", 1 << 20, NULL), 0);
  cr_assert_eq (vol_delete (w.pool, "probe", 0), 0);
  cr_assert_eq (vol_reclaim_wait (w.pool, NULL, NULL), 0);
  cr_assert_eq (pool_log_flush (w.pool), 0);
  cr_assert_eq (pool_commit (w.pool), 0);
  cr_assert_eq (pool_close (w.pool), 0);
  w.pool = world_open (&w);
  pool_info (w.pool, &base);

  new_volume (&w);
  new_volume (&w);
  for (unsigned step = 0; step < steps; step++) {
    unsigned dice = (unsigned) rng_below (&w.r, 100);
    struct state *v = pick (&w, 0), *s;

    if (v == NULL) {
      new_volume (&w);
      continue;
    }
    if (dice < 60)
      do_write (&w, v);
    else if (dice < 68)
      do_snapshot (&w, v);
    else if (dice < 72 && (s = pick (&w, -1)))
      do_clone (&w, s);
    else if (dice < 78 && (s = pick (&w, 1)))
      do_delete_snapshot (&w, s);
    else if (dice < 81)
      do_delete_volume (&w, v);
    else if (dice < 84)
      new_volume (&w);
    else if (dice < 87)
      do_resize (&w, v);
    else if (dice < 89 && (s = pick (&w, 1)))
      do_diff (&w, s);
    else if (dice < 90 && (s = pick (&w, 1)))
      do_rollback (&w, s);
    else if (dice < 95)
      do_flush (&w);
    else if (dice >= 97 && (s = pick_zombie (&w))) {
      /* A client of a deleted state writes (if it can), or goes away. */
      if (!s->snapshot && rng_below (&w.r, 2))
        do_write (&w, s);
      else {
        vol_close (s->h);
        drop_state (s);
      }
    }
    else if (dice < 97) {
      char when[64];
      snprintf (when, sizeof when, "reopen at step %u", step);
      reopen (&w, when);
      check_all (&w, when);
    }
    if (step % 250 == 0)
      check_all (&w, "periodic");
  }
  reopen (&w, "end of history");
  check_all (&w, "end of history");
  fprintf (stderr, "%s: %u volumes, %u snapshots, %u clones, %u snapshot "
           "deletes, %u volume deletes, %u reopens\n", name, w.next_vol,
           w.next_snap, w.clones, w.snap_deletes, w.vol_deletes, w.reopens);
  fprintf (stderr, "%s: %u diffs, %u snapshot deletes freeing unique data, "
           "%u rollbacks, %u deletes while open\n", name, w.diffs,
           w.unique_checks, w.rollbacks, w.zombies);
  if (intent_log) {
    fprintf (stderr, "%s: %u crashes after a log flush, %u with live log "
             "records to replay\n", name, w.crashes, w.replays);
    cr_assert (w.replays > 0 && w.replays * 2 >= w.crashes, "%u of %u "
               "crashes left a log to replay", w.replays, w.crashes);
  }
  else {
    cr_assert_gt (w.rollbacks, 1);
    cr_assert_gt (w.diffs, 10);
    cr_assert_gt (w.unique_checks, 5);
    cr_assert_gt (w.clones, 10);
    cr_assert_gt (w.snap_deletes, 10);
    cr_assert_gt (w.vol_deletes, 10);
    cr_assert_gt (w.zombies, 10);
  }

  /* Delete everything: every block comes back. */
  close_handles (&w);
  for (unsigned i = 0; i < MAXSTATES; i++)
    if (w.st[i].used && !w.st[i].snapshot && !w.st[i].zombie)
      do_delete_volume (&w, &w.st[i]);
  close_handles (&w);         /* the last clients of deleted states go */
  for (unsigned i = 0; i < MAXSTATES; i++)
    cr_assert (!w.st[i].used, "%s is left (zombie %d)", w.st[i].name,
               w.st[i].zombie);
  cr_assert_eq (pool_commit (w.pool), 0);
  reopen (&w, "after deleting everything");
  cr_assert_eq (vol_reclaim_wait (w.pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  pool_info (w.pool, &after);
  /* The space map's log grew meanwhile: its blocks are not leaks. */
  cr_assert_eq (after.space.allocated - after.spacemap_blocks,
                base.space.allocated - base.spacemap_blocks,
                "allocated %" PRIu64 " blocks (%" PRIu64 " of them the space "
                "map) after deleting everything, %" PRIu64 " (%" PRIu64 ") in "
                "the empty pool", after.space.allocated, after.spacemap_blocks,
                base.space.allocated, base.spacemap_blocks);
  cr_assert_eq (pool_close (w.pool), 0);
  dev_close (w.dev);
}

Test (volume, model_random_histories, .timeout = 600)
{
  random_histories ("volume.model_random_histories", 2500, 512 << 20, false);
}

/* The same with the intent log on: shorter, on a smaller device (each
 * crash copies it).
 */
Test (volume, model_random_histories_intent_log, .timeout = 600)
{
  random_histories ("volume.model_random_histories_intent_log", 500,
                    96 << 20, true);
}
