/* Cairn engine, layer "reclaim": deletes that run in the background and
 * survive restarts (DESIGN §2.4; ZFS's async destroy with its bookmark).
 *
 * Design note.
 *
 * Deleting a volume that nothing needs any more (no snapshot, no clone, no
 * open handle) frees every block it owns: its deadlist entries and the
 * blocks of its tree born after its origin.  That costs time in proportion
 * to the volume's own data, which for a large volume is far too long to
 * hold a commit's freeze.  So the delete itself only turns the volume into
 * a destroy record (reaper_begin, in the freeze of the delete): the name,
 * record, properties and tree item go at once, the space comes back a
 * bounded step at a time.
 *
 * Invariants (tests cite them as RP-n):
 *  RP-1  A destroy record holds the root of a tree that nothing changes or
 *        reads any more, except the reaper, which reads only nodes not yet
 *        freed.
 *  RP-2  The record's point P (a key) says what is freed: every node whose
 *        key range lies below P and every item with a key below P, among
 *        those born after since (btree_reap).  Nodes and items born at or
 *        before since are the origin's and never freed here (RC-1).
 *  RP-3  A step frees a batch of blocks and moves P past them in the same
 *        generation (reaper_apply, in the freeze), so after a crash the
 *        pool is at a generation where either both happened or neither.
 *  RP-4  The volume's deadlist entries are forgotten as they are freed, in
 *        batches, in the same freeze as the tree's step: a half-drained
 *        deadlist needs no bookmark.
 *  RP-5  The record goes when the tree is done and no deadlist entry of its
 *        id is left, in the freeze that frees the last batch.
 *  RP-6  Removing a pin frees its deadlist range (RC-3) up to a step's worth
 *        at once; the rest is a free record (RK_FREE: volume, range of
 *        deaths and births) whose entries are freed and forgotten a batch
 *        per step, so it needs no bookmark either.  Nothing joins the range
 *        later and the ranges of two pins never overlap, so waiting changes
 *        no other figure; a volume destroyed meanwhile frees its entries
 *        through its own drain, and the free record then finds none.
 *        A publish with rollback (catalog-recv.c RB-3) is the one change after
 *        which a block could join a range (the history after its base is
 *        replaced): it settles every entry that died after the base at
 *        once and drops the free records whose deaths all lie after it
 *        (reaper_drop_ranges); a step gathered before finds its record
 *        gone and does nothing.
 *
 * Free records go first: they are small and what users wait for after
 * deleting a snapshot.
 *
 * Steps.  The reaper thread (one per open pool, started when there is
 * work, stopped before the pool's last commit) repeats: read the first
 * destroy record; walk its tree from P with a budget, outside any lock
 * (the tree is immutable: RP-1), gathering the ranges to free; submit them
 * as a catalog change; the freeze checks that P has not moved, drains some
 * deadlist entries, frees the ranges and stores the new P (RP-3).  One step
 * at a time (reap_lock), so vol_reclaim_wait and the thread may both step.
 *
 * Jobs.  Each record is also a job people can list (reaper-jobs.c): the
 * freeze that stores a record lists it (reap_jobs_add), each step credits
 * what it frees (reap_jobs_update), and the freeze that deletes the record
 * ends it.
 *
 * States of the thread: idle (not running) -> running (reaper_kick, when a
 * record exists and the pool is writable) -> idle (no record left, or a
 * step failed: the message is kept for vol_reclaim_status and the work
 * resumes at the next kick or the next open) ; any -> stopped (reaper_stop,
 * from pool_close: the step in progress finishes first).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"

/* Visits (nodes + items) per step of the tree walk, and deadlist entries
 * per step; a few milliseconds of freeze each.
 */
#define REAP_BUDGET 32768u

struct reaper {
  pthread_mutex_t step_lock;  /* one step at a time */
  pthread_mutex_t lock;       /* the fields below */
  pthread_t thread;
  bool running, joinable, stopped;
  bool again;                 /* kicked while running: look once more */
  size_t budget;
  char error[512];            /* the last step's failure, "" when none */
};

/* A range of blocks to free. */
struct reap_range {
  uint64_t addr, len, birth;
};

/* A free record (RP-6). */
struct freerec {
  uint64_t id, lo_d, hi_d, lo_b, hi_b;
};

/* A step: gathered outside the freeze, applied inside it. */
struct reap_step {
  bool is_free;               /* a free record's step (RP-6) */
  struct freerec fr;
  uint64_t id;
  struct destrec rec;         /* the record as read (its point is the old) */
  struct reap_range *r;
  size_t n, cap;
  uint32_t node_blocks;
  uint8_t next[BTREE_MAX_KEY];
  size_t nextlen;
  bool tree_done;
  uint64_t data_blocks;       /* of the ranges, those of extent items */
  int err;
};

/* ---------------------------------------------------------------- records */

/* Decode a destroy record, checking every field. */
int
destrec_decode (const uint8_t *val, size_t vlen, struct destrec *d)
{
  if (vlen < DESTREC_FIXED)
    return cairn_fail (-EIO, "corrupt destroy record: %zu bytes", vlen);
  memset (d, 0, sizeof *d);
  blkptr_decode (val, &d->root.bp);
  d->root.level = val[48];
  d->flags = val[49];
  d->since = get_le64 (val + 56);
  d->freed = get_le64 (val + 64);
  d->pointlen = get_le16 (val + 72);
  if (d->pointlen > BTREE_MAX_KEY || vlen != DESTREC_FIXED + d->pointlen ||
      (d->flags & ~DESTF_TREE_DONE) != 0)
    return cairn_fail (-EIO, "corrupt destroy record (point of %zu bytes, "
                       "flags %#x, %zu bytes in all)", d->pointlen, d->flags,
                       vlen);
  memcpy (d->point, val + DESTREC_FIXED, d->pointlen);
  return 0;
}

/* Store a destroy record. */
static int
destrec_store (struct catalog *cat, uint64_t id, const struct destrec *d)
{
  uint8_t key[17], val[DESTREC_FIXED + BTREE_MAX_KEY];

  memset (val, 0, DESTREC_FIXED);
  blkptr_encode (&d->root.bp, val);
  val[48] = (uint8_t) d->root.level;
  val[49] = (uint8_t) d->flags;
  put_le64 (val + 56, d->since);
  put_le64 (val + 64, d->freed);
  put_le16 (val + 72, (uint16_t) d->pointlen);
  memcpy (val + DESTREC_FIXED, d->point, d->pointlen);
  cat_key (key, RK_DESTROY, id, 0);
  return cat_root_put (cat, key, 9, val, DESTREC_FIXED + d->pointlen);
}

/* State of first_of_type. */
struct first_walk {
  int (*decode) (const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                 void *out);
  void *out;
  bool found, counting;
  uint64_t count;
};

static int
first_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
            size_t vl)
{
  struct first_walk *fw = opaque;

  if (fw->count++ == 0) {
    int r = fw->decode (k, kl, v, vl, fw->out);

    if (r < 0)
      return r;
    fw->found = true;
  }
  return !fw->counting;
}

/* Decode the first record of a type (a callback), and count them all
 * when countp is not NULL.
 */
static int
first_of_type (struct catalog *cat, uint8_t type,
               int (*decode) (const uint8_t *k, size_t kl, const uint8_t *v,
                              size_t vl, void *out),
               void *out, bool *found, uint64_t *countp)
{
  struct first_walk fw = { decode, out, false, countp != NULL, 0 };
  int r = cat_foreach_prefix (cat, &type, 1, first_item, &fw);

  *found = fw.found;
  if (countp)
    *countp = fw.count;
  return r;
}

/* A destroy record with its volume id. */
struct destitem {
  uint64_t id;
  struct destrec *d;
};

static int
decode_dest (const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
             void *out)
{
  struct destitem *di = out;

  if (kl != 9)
    return cairn_fail (-EIO, "corrupt destroy record key (%zu bytes)", kl);
  di->id = get_be64 (k + 1);
  return destrec_decode (v, vl, di->d);
}

/* The first destroy record, if any: *idp 0 when none. */
static int
first_record (struct catalog *cat, uint64_t *idp, struct destrec *d,
              uint64_t *countp)
{
  struct destitem di = { 0, d };
  bool found;
  int r = first_of_type (cat, RK_DESTROY, decode_dest, &di, &found, countp);

  *idp = found ? di.id : 0;
  return r;
}

/* The key of a free record. */
static void
freerec_key (uint8_t key[25], const struct freerec *f)
{
  key[0] = RK_FREE;
  put_be64 (key + 1, f->id);
  put_be64 (key + 9, f->lo_d);
  put_be64 (key + 17, f->lo_b);
}

static int
decode_free (const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
             void *out)
{
  struct freerec *f = out;
  uint64_t range[4];
  int r = freerec_decode (k, kl, v, vl, &f->id, range);

  f->lo_d = range[0];
  f->hi_d = range[1];
  f->lo_b = range[2];
  f->hi_b = range[3];
  return r;
}

/* The first free record, if any (*found), and how many there are. */
static int
first_free (struct catalog *cat, struct freerec *f, bool *found,
            uint64_t *countp)
{
  return first_of_type (cat, RK_FREE, decode_free, f, found, countp);
}

/* Decode a free record (fsck). */
int
freerec_decode (const uint8_t *key, size_t klen, const uint8_t *val,
                size_t vlen, uint64_t *id, uint64_t range[4])
{
  if (klen != 25 || vlen != 16)
    return cairn_fail (-EIO, "corrupt free record (key %zu, value %zu bytes)",
                       klen, vlen);
  *id = get_be64 (key + 1);
  range[0] = get_be64 (key + 9);
  range[1] = get_le64 (val);
  range[2] = get_be64 (key + 17);
  range[3] = get_le64 (val + 8);
  return 0;
}

/* Entries a step frees at most. */
size_t
reaper_budget (struct catalog *cat)
{
  return cat->reaper ? cat->reaper->budget : REAP_BUDGET;
}

/* Leave the rest of a removed pin's deadlist range to the background (in
 * the freeze).  A range already waiting under the same key (a pin made
 * again at a generation whose earlier pin is still being freed) is freed
 * whole now instead.
 */
int
reaper_defer_range (struct catalog *cat, struct volstate *vs, uint64_t lo_d,
                    uint64_t hi_d, uint64_t lo_b, uint64_t hi_b)
{
  struct freerec f = { vs->id, lo_d, hi_d, lo_b, hi_b };
  const struct cat_request *req = cat->applying;
  uint8_t key[25], val[16];
  char what[sizeof ((struct vol_reclaim_job *) 0)->what];
  size_t vlen;
  int r;

  freerec_key (key, &f);
  r = cat_root_get (cat, key, 25, val, sizeof val, &vlen);
  if (r == 0)
    return reclaim_free_entries (cat, vs->id, &vs->held, lo_d, hi_d, lo_b,
                                 hi_b, 0, SIZE_MAX, NULL);
  if (r != -ENOENT)
    return r;
  put_le64 (val, hi_d);
  put_le64 (val + 8, hi_b);
  cat->kick = true;
  r = cat_root_put (cat, key, 25, val, 16);
  if (r < 0)
    return r;
  /* The pin is a snapshot this freeze's request deletes, or one deleted
   * earlier while open (or a clone's origin): then only its generation.
   */
  if (req && req->kind == REQ_SNAP_DELETE && req->name && req->snap &&
      strcmp (req->name, vs->name) == 0)
    snprintf (what, sizeof what, "%s@%s", vs->name, req->snap);
  else
    snprintf (what, sizeof what, "%s, generation %" PRIu64, vs->name, lo_d);
  reap_jobs_add (cat, true, vs->id, lo_d, lo_b, what, 0);
  return 0;
}

/* State of reaper_drop_ranges. */
struct drop_ranges {
  uint64_t id, after;
  uint8_t (*key)[25];
  size_t n, cap;
};

/* cat_foreach_prefix callback: collect the free records to drop. */
static int
drop_range_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
                 size_t vl)
{
  struct drop_ranges *dr = opaque;
  uint64_t id, range[4];
  int r = freerec_decode (k, kl, v, vl, &id, range);

  if (r < 0 || range[0] < dr->after)
    return r;
  if (dr->n == dr->cap) {
    size_t cap = dr->cap ? 2 * dr->cap : 8;
    uint8_t (*nk)[25] = realloc (dr->key, cap * sizeof *nk);

    if (nk == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    dr->key = nk;
    dr->cap = cap;
  }
  memcpy (dr->key[dr->n++], k, 25);
  return 0;
}

/* Drop volume id's free records whose deaths all lie after generation
 * after, whose entries the caller settled (RP-6; in the freeze).
 */
int
reaper_drop_ranges (struct catalog *cat, uint64_t id, uint64_t after)
{
  struct drop_ranges dr = { .id = id, .after = after };
  uint8_t prefix[9];
  int r;

  prefix[0] = RK_FREE;
  put_be64 (prefix + 1, id);
  r = cat_foreach_prefix (cat, prefix, 9, drop_range_item, &dr);
  for (size_t i = 0; r == 0 && i < dr.n; i++) {
    r = cat_root_del (cat, dr.key[i], 25);
    if (r == 0)
      reap_jobs_update (cat, true, id, get_be64 (dr.key[i] + 9),
                  get_be64 (dr.key[i] + 17), 0, true);
  }
  free (dr.key);
  return r;
}

/* ---------------------------------------------------------------- begin */

/* Turn a volume nothing needs into a destroy record (see catalog-int.h). */
int
reaper_begin (struct catalog *cat, struct volstate *vs)
{
  struct destrec d = { .since = vs->origin_gen };
  int r;

  /* Entries still queued belong to pins that are gone: list them, so the
   * drain frees them (RP-4).
   */
  r = reclaim_flush_pending (cat);
  if (r < 0)
    return r;
  btree_get_root (vs->tree, &d.root);
  cat->kick = true;
  r = destrec_store (cat, vs->id, &d);
  if (r == 0)
    r = pool_tree_remove (cat->pool, vs->id);
  /* A clone's referenced blocks include its origin's, which stay. */
  if (r == 0)
    reap_jobs_add (cat, false, vs->id, 0, 0, vs->name,
             vs->origin_gen ? 0
             : (uint64_t) (__atomic_load_n (&vs->referenced, __ATOMIC_RELAXED) +
                           __atomic_load_n (&vs->held, __ATOMIC_RELAXED)));
  return r;
}

/* ---------------------------------------------------------------- a step */

/* Remember a range to free. */
static void
step_add (struct reap_step *s, uint64_t addr, uint64_t len, uint64_t birth)
{
  if (s->err)
    return;
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 1024;
    struct reap_range *nr = realloc (s->r, cap * sizeof *nr);

    if (nr == NULL) {
      s->err = cairn_fail (-ENOMEM, "out of memory reclaiming a volume");
      return;
    }
    s->r = nr;
    s->cap = cap;
  }
  s->r[s->n++] = (struct reap_range) { addr, len, birth };
}

/* btree_reap: a node is done. */
static int
step_node (void *opaque, const struct blkptr *bp, unsigned level)
{
  struct reap_step *s = opaque;

  (void) level;
  step_add (s, bp->addr >> BLOCK_SHIFT, s->node_blocks, bp->birth);
  return s->err;
}

/* btree_reap: an extent item. */
static int
step_item (void *opaque, const uint8_t *key, size_t klen, const uint8_t *val,
           size_t vlen)
{
  struct reap_step *s = opaque;

  (void) key;
  if (klen != 8 || vlen < EXT_HDR)
    return cairn_fail (-EIO, "corrupt extent item in deleted volume %" PRIu64,
                       s->id);
  if (ext_birth (val) > s->rec.since) {
    step_add (s, ext_addr (val), ext_len (val), ext_birth (val));
    s->data_blocks += ext_len (val);
  }
  return s->err;
}

/* Apply a gathered step in the freeze of gen (RP-3, RP-4, RP-5). */
int
reaper_apply (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  struct reap_step *s = req->data;
  struct destrec now, d = s->rec;
  uint8_t key[25], val[DESTREC_FIXED + BTREE_MAX_KEY];
  uint64_t before = __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED);
  size_t vlen, drained;
  int r;

  if (s->is_free) {
    const struct freerec *f = &s->fr;
    struct volstate *vs;
    uint64_t hi_d;
    size_t removed;

    /* A record dropped since the step was gathered (RP-6) is done. */
    freerec_key (key, f);
    r = cat_root_get (cat, key, 25, val, sizeof val, &vlen);
    if (r < 0)
      return r == -ENOENT ? 0 : r;
    pthread_mutex_lock (&cat->tlock);
    vs = cat_find_id_locked (cat, f->id);
    pthread_mutex_unlock (&cat->tlock);
    r = reclaim_record_end (cat, f->id, f->lo_d, f->hi_d, &hi_d);
    if (r == 0)
      r = reclaim_free_entries (cat, f->id, vs ? &vs->held : NULL, f->lo_d,
                                hi_d, f->lo_b, f->hi_b, 0,
                                cat->reaper->budget, &removed);
    if (r == 0 && removed < cat->reaper->budget)
      r = cat_root_del (cat, key, 25);
    /* Only this freeze frees now: the difference is this step's. */
    if (r == 0)
      reap_jobs_update (cat, true, f->id, f->lo_d, f->lo_b,
                  __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED) - before,
                  removed < cat->reaper->budget);
    return r;
  }
  cat_key (key, RK_DESTROY, s->id, 0);
  r = cat_root_get (cat, key, 9, val, sizeof val, &vlen);
  if (r == 0)
    r = destrec_decode (val, vlen, &now);
  if (r < 0)
    return r;
  if (now.pointlen != d.pointlen || memcmp (now.point, d.point, d.pointlen) ||
      now.flags != d.flags)
    return cairn_fail (-EIO, "internal error: the reclaim point of deleted "
                       "volume %" PRIu64 " moved under a step", s->id);

  r = reclaim_drain_deadlist (cat, s->id, d.since, cat->reaper->budget,
                              &drained);
  if (r < 0)
    return r;
  reap_jobs_update (cat, false, s->id, 0, 0, s->data_blocks +
              __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED) - before,
              false);
  for (size_t i = 0; i < s->n; i++) {
    const struct reap_range *x = &s->r[i];

    space_free (pool_space (cat->pool), x->addr, x->len,
                x->birth >= gen ? gen - 1 : x->birth);
    d.freed += x->len;
    __atomic_add_fetch (&cat->reclaimed, x->len, __ATOMIC_RELAXED);
  }
  if (s->tree_done)
    d.flags |= DESTF_TREE_DONE;
  memcpy (d.point, s->next, s->nextlen);
  d.pointlen = s->nextlen;
  if ((d.flags & DESTF_TREE_DONE) && drained < cat->reaper->budget) {
    r = cat_root_del (cat, key, 9);             /* RP-5 */
    if (r == 0)
      reap_jobs_update (cat, false, s->id, 0, 0, 0, true);
    return r;
  }
  return destrec_store (cat, s->id, &d);
}

/* Is there background work: a free or destroy record? */
static int
any_work (struct catalog *cat, bool *yes)
{
  struct freerec f;
  struct destrec d;
  uint64_t id;
  int r;

  if (__atomic_load_n (&cat->ckpt_due, __ATOMIC_ACQUIRE)) {
    *yes = true;              /* the checkpoint collector (checkpoint.c) */
    return 0;
  }
  r = first_free (cat, &f, yes, NULL);
  if (r == 0 && !*yes) {
    r = first_record (cat, &id, &d, NULL);
    *yes = id != 0;
  }
  return r;
}

/* Gather and apply one step; *more when work is left. */
static int
reap_step (struct cairn_pool *pool, struct catalog *cat, bool *more)
{
  struct reaper *rp = cat->reaper;
  struct reap_step s = { 0 };
  struct cat_request req = { .kind = REQ_REAP, .data = &s };
  uint64_t seen = 0;
  int r;

  *more = false;
  pthread_mutex_lock (&rp->step_lock);
  /* The checkpoint collector first: what it drops becomes free records. */
  if (__atomic_exchange_n (&cat->ckpt_due, false, __ATOMIC_ACQ_REL) &&
      (r = ckpt_collect (cat)) < 0) {
    r = cairn_fail (r, "collecting checkpoints: %s", cairn_errmsg ());
    goto out;
  }
  seen = reap_jobs_seq (cat);   /* jobs listed before the reads below */
  r = first_free (cat, &s.fr, &s.is_free, NULL);
  if (r == 0 && s.is_free) {
    r = reap_jobs_count (cat, s.fr.id, s.fr.lo_d, s.fr.hi_d, s.fr.lo_b,
                         s.fr.hi_b);
    if (r == 0)
      r = cat_submit (pool, &req);
    if (r == 0)
      r = any_work (cat, more);
    goto out;
  }
  if (r == 0)
    r = first_record (cat, &s.id, &s.rec, NULL);
  if (r < 0 || s.id == 0)
    goto out;
  s.node_blocks = nodecache_node_size (pool_cache (pool)) >> BLOCK_SHIFT;
  if (!(s.rec.flags & DESTF_TREE_DONE)) {
    struct btree_visitor v = { step_node, step_item, &s };

    r = btree_reap (pool_cache (pool), &s.rec.root, s.rec.since,
                    s.rec.pointlen ? s.rec.point : NULL, s.rec.pointlen,
                    rp->budget, &v, s.next, &s.nextlen, &s.tree_done);
    if (r == 0)
      r = s.err;
    if (r < 0) {
      r = cairn_fail (r, "reclaiming deleted volume %" PRIu64 ": %s", s.id,
                      cairn_errmsg ());
      goto out;
    }
  }
  r = cat_submit (pool, &req);
  if (r == 0)
    r = any_work (cat, more);
 out:
  if (r == 0 && !*more)
    reap_jobs_prune (cat, seen);
  pthread_mutex_unlock (&rp->step_lock);
  free (s.r);
  return r;
}

/* ---------------------------------------------------------------- thread */

/* The reaper thread: step until nothing is left, stopped, or failed. */
static void *
reaper_thread (void *arg)
{
  struct catalog *cat = arg;
  struct reaper *rp = cat->reaper;

  for (;;) {
    bool more = false;
    int r;

    cairn_error_clear ();
    r = reap_step (cat->pool, cat, &more);
    pthread_mutex_lock (&rp->lock);
    if (r < 0)
      snprintf (rp->error, sizeof rp->error, "%s", cairn_errmsg ());
    /* A kick while this step ran may have brought work it did not see. */
    more = r == 0 && (more || rp->again) && !rp->stopped;
    rp->again = false;
    if (!more)
      rp->running = false;
    pthread_mutex_unlock (&rp->lock);
    if (!more)
      return NULL;
  }
}

/* Make the reaper state. */
int
reaper_new (struct catalog *cat)
{
  struct reaper *rp = calloc (1, sizeof *rp);

  if (rp == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the catalog");
  pthread_mutex_init (&rp->step_lock, NULL);
  pthread_mutex_init (&rp->lock, NULL);
  rp->budget = REAP_BUDGET;
  cat->reaper = rp;
  return reap_jobs_new (cat);
}

/* Start the thread if there is work and it is not running. */
void
reaper_kick (struct catalog *cat)
{
  struct reaper *rp = cat->reaper;
  bool work;

  if (rp == NULL || !pool_background_allowed (cat->pool))
    return;
  if (any_work (cat, &work) < 0 || !work)
    return;
  pthread_mutex_lock (&rp->lock);
  rp->again = rp->running;
  if (!rp->running && !rp->stopped) {
    if (rp->joinable)
      pthread_join (rp->thread, NULL);
    rp->joinable = false;
    rp->error[0] = '\0';
    rp->running = pthread_create (&rp->thread, NULL, reaper_thread, cat) == 0;
    rp->joinable = rp->running;
  }
  pthread_mutex_unlock (&rp->lock);
}

/* Stop the thread for good (the step in progress finishes first). */
void
reaper_stop (struct catalog *cat)
{
  struct reaper *rp = cat->reaper;
  bool join;

  if (rp == NULL)
    return;
  pthread_mutex_lock (&rp->lock);
  rp->stopped = true;
  join = rp->joinable;
  rp->joinable = false;
  pthread_mutex_unlock (&rp->lock);
  if (join)
    pthread_join (rp->thread, NULL);
}

/* Free the reaper state (after reaper_stop). */
void
reaper_free (struct catalog *cat)
{
  struct reaper *rp = cat->reaper;

  if (rp == NULL)
    return;
  pthread_mutex_destroy (&rp->step_lock);
  pthread_mutex_destroy (&rp->lock);
  free (rp);
  cat->reaper = NULL;
  reap_jobs_free (cat);
}

/* ---------------------------------------------------------------- API */

/* One step of reclaiming deleted volumes, in the calling thread. */
int
vol_reclaim_step (struct cairn_pool *pool, bool *more)
{
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  *more = false;
  return r < 0 ? r : reap_step (pool, cat, more);
}

/* Reclaim every deleted volume now, in the calling thread (volume.h). */
int
vol_reclaim_wait (struct cairn_pool *pool,
                  void (*progress) (void *opaque, uint64_t freed_bytes),
                  void *opaque)
{
  struct catalog *cat;
  uint64_t freed = 0;
  bool more = true;
  int r = catalog_get (pool, &cat);

  while (r == 0 && more) {
    uint64_t before = __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED);

    r = reap_step (pool, cat, &more);
    freed += __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED) - before;
    if (progress)
      progress (opaque, freed * BLOCK_SIZE);
  }
  return r;
}

/* What the background deletes have left to do (volume.h). */
int
vol_reclaim_status (struct cairn_pool *pool, struct vol_reclaim_info *info)
{
  struct catalog *cat;
  struct destrec d;
  uint64_t id;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  memset (info, 0, sizeof *info);
  r = first_record (cat, &id, &d, &info->volumes);
  if (r == 0) {
    struct freerec f;
    bool found;

    r = first_free (cat, &f, &found, &info->ranges);
  }
  if (r < 0)
    return r;
  info->freed_bytes = __atomic_load_n (&cat->reclaimed, __ATOMIC_RELAXED) *
                      BLOCK_SIZE;
  pthread_mutex_lock (&cat->reaper->lock);
  info->running = cat->reaper->running;
  snprintf (info->error, sizeof info->error, "%s", cat->reaper->error);
  pthread_mutex_unlock (&cat->reaper->lock);
  return 0;
}

/* Set the step size (tests make steps small to stop between them). */
void
vol_reclaim_set_budget (struct cairn_pool *pool, size_t visits)
{
  struct catalog *cat;

  if (catalog_get (pool, &cat) == 0)
    cat->reaper->budget = visits ? visits : REAP_BUDGET;
}
