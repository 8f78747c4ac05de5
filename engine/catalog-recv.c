/* Cairn engine: the catalog's side of a receive -- partial volumes and
 * their create, save, publish (with or without a rollback) and abort
 * requests, applied in the freeze like every catalog change (catalog.c).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"

/* ---------------------------------------------------------------- partial volumes
 *
 * A receive (server/receive.c) writes into a partial volume: VOLF_PARTIAL,
 * no RK_NAME item, the name of its target, and its state string in the
 * property PARTIAL_STATE_KEY.  Four requests drive it:
 *
 *   create   full: a new empty volume; incremental: a clone of the base
 *            snapshot, the target's newest state (check_base)
 *   save     a new state string, durable with every write before it
 *   publish  full: the partial takes its name item, loses its flag and is
 *            snapshotted; incremental: check_base again, then the target
 *            and the partial exchange their trees (pool_tree_swap), the
 *            target adopts the partial's deadlist (RC-5), is snapshotted,
 *            and the partial, now holding the base state, is destroyed
 *   abort    the partial is destroyed
 *
 * Why the swap is sound (reclaim.c's invariants): check_base makes sure
 * that the target's live tree is the base's pinned tree (no write since)
 * and that no pin of the target is newer than the base.  Then every block
 * of the partial born after the base is one the target may own (RC-1: it
 * is born after the target's origin), no pin between the base and the new
 * snapshot could have wrongly counted it (there is none), the target's own
 * deadlist holds nothing that died after the base, and what the partial
 * stopped referencing of the base is on the partial's deadlist (RC-5),
 * which becomes the target's, as if the target had made the writes
 * itself.  The partial left holding the base's tree owns nothing in it
 * (every block is born at or before its origin), so destroying it frees
 * nothing but its clone pin on the base.
 *
 * Publishing with a rollback (VOL_RECV_ROLLBACK) first makes the target
 * its base again, in the same freeze, so that the argument above holds:
 *
 *   RB-1  Checks first (rollback_check): no handle on the target or its
 *         snapshots, no clone of a state newer than the base, no snapshot
 *         at or before the base with the new snapshot's name.  A refusal
 *         changes nothing; the partial stays for a later publish.
 *   RB-2  Every snapshot record newer than the base goes, and every pin
 *         newer than the base (with its deferred-delete record, and its
 *         checkpoint's records: CK-1): RB-1 left them no other reason.  The base is then the target's newest pin.
 *   RB-3  The target's deadlist entries that died after the base are
 *         settled at once, synchronously (and the background free ranges
 *         over them dropped, reaper.c RP-6): those born after the base were
 *         kept only for the pins RB-2 removed, so they are freed; those born
 *         at or before it are the base's blocks that the discarded history
 *         stopped using, and are forgotten (the base still holds them, and
 *         the received state's own uses of them are the partial's RC-5
 *         entries that the target adopts, so keeping both would count a
 *         block twice).
 *   RB-4  The target's discarded live tree goes to the partial by the swap;
 *         the partial is a clone of the base, so destroying it frees
 *         exactly the discarded blocks born after the base (RC-1, RC-4).
 *         What RB-3 freed was not in that tree (dead blocks), and what the
 *         tree holds was on no deadlist (live blocks): nothing is freed
 *         twice, and fsck's space audit proves it in the tests.
 *   RB-5  The publish says what the rollback discarded (struct
 *         vol_discarded): the snapshots RB-2 destroyed, counted and the
 *         first VOL_DISCARD_NAMES named, and whether the live tree that
 *         RB-4 discards held writes that no snapshot kept (it is not the
 *         tree of the newest snapshot, the base or a destroyed one).
 *         Checkpoints and clone pins are not counted: RB-1 refuses the
 *         second, and the first are no names a user gave.
 */

/* The key of a partial's state property. */
static size_t
partial_state_key (uint8_t *key, uint64_t id)
{
  size_t klen = strlen (PARTIAL_STATE_KEY);

  key[0] = RK_PROP;
  put_be64 (key + 1, id);
  memcpy (key + 9, PARTIAL_STATE_KEY, klen);
  return 9 + klen;
}

/* Look a partial volume up, with a message when there is none. */
static int
need_partial (struct catalog *cat, const char *name, struct volstate **vsp)
{
  pthread_mutex_lock (&cat->tlock);
  *vsp = cat_find_partial (cat, name);
  pthread_mutex_unlock (&cat->tlock);
  if (*vsp == NULL)
    return cairn_fail (-ENOENT, "no receive into '%s' is in progress or "
                       "interrupted", name);
  return 0;
}

/* Is volume vs still exactly its snapshot at pgen, the base of an
 * incremental receive (snap: its name, for messages)?  -ESTALE saying why
 * not.
 */
static int
check_base (struct catalog *cat, struct volstate *vs, uint64_t pgen,
            const char *snap)
{
  struct btree_root pinned, live;
  int r = cat_lookup_pin (cat, vs->id, pgen, NULL, NULL, &pinned);

  if (r < 0)
    return r;
  if (vs->max_pin != pgen)
    return cairn_fail (-ESTALE, "volume '%s' has a snapshot or clone newer "
                       "than '%s@%s' (generation %" PRIu64 " against %" PRIu64
                       "): a stream can only extend the newest state (--rollback "
                       "discards the newer snapshots)",
                       vs->name, vs->name, snap, vs->max_pin, pgen);
  btree_get_root (vs->tree, &live);
  if (live.bp.addr != pinned.bp.addr || live.bp.birth != pinned.bp.birth ||
      live.level != pinned.level)
    return cairn_fail (-ESTALE, "volume '%s' was written after its snapshot "
                       "'%s' (perhaps with the same bytes): a volume that "
                       "receives incremental streams must stay as its newest "
                       "snapshot left it (--rollback discards the writes)",
                       vs->name, snap);
  return 0;
}

/* Generations of a volume's pins newer than some generation. */
struct genlist {
  uint64_t after;
  uint64_t *gen;
  size_t n, cap;
};

/* cat_foreach_pin callback: collect the pins newer than gl->after. */
static int
collect_newer_pin (void *opaque, uint64_t gen, const uint8_t *rec, size_t len)
{
  struct genlist *gl = opaque;

  (void) rec, (void) len;
  if (gen <= gl->after)
    return 0;
  if (gl->n == gl->cap) {
    size_t cap = gl->cap ? 2 * gl->cap : 16;
    uint64_t *ng = realloc (gl->gen, cap * sizeof *ng);

    if (ng == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing pins");
    gl->gen = ng;
    gl->cap = cap;
  }
  gl->gen[gl->n++] = gen;
  return 0;
}

/* The pins of vs newer than pgen, oldest first (free gl->gen). */
static int
newer_pins (struct catalog *cat, struct volstate *vs, uint64_t pgen,
            struct genlist *gl)
{
  *gl = (struct genlist) { .after = pgen };
  return cat_foreach_pin (cat, vs->id, collect_newer_pin, gl);
}

/* May the target vs be rolled back to its state at pgen (base: its name)
 * and then take snapshot snap (RB-1)?  -EBUSY or -EEXIST saying why not.
 */
static int
rollback_check (struct catalog *cat, struct volstate *vs, uint64_t pgen,
                const char *base, const char *snap)
{
  struct genlist gl;
  uint64_t sgen;
  int r = cat_lookup_snap (cat, vs->id, snap, &sgen);

  if (r == 0 && sgen <= pgen)
    return cairn_fail (-EEXIST, "volume '%s' has a snapshot named '%s' "
                       "already, at or before the base '%s': rename it first",
                       vs->name, snap, base);
  if (r < 0 && r != -ENOENT)
    return r;
  r = newer_pins (cat, vs, pgen, &gl);
  for (size_t i = 0; r == 0 && i < gl.n; i++) {
    uint32_t clones = 0;
    const char *clone = "(a hidden volume)";

    r = cat_lookup_pin (cat, vs->id, gl.gen[i], NULL, &clones, NULL);
    if (r < 0 || clones == 0)
      continue;
    pthread_mutex_lock (&cat->tlock);
    for (size_t j = 0; j < cat->nvols; j++)
      if (cat->vols[j]->origin_id == vs->id &&
          cat->vols[j]->origin_gen == gl.gen[i] &&
          vs_visible (cat->vols[j]))
        clone = cat->vols[j]->name;
    r = cairn_fail (-EBUSY, "volume '%s' has a clone, '%s', of its state at "
                    "generation %" PRIu64 ", newer than the base '%s@%s': a "
                    "rollback would destroy the state it started from, so "
                    "delete the clone first", vs->name, clone, gl.gen[i],
                    vs->name, base);
    pthread_mutex_unlock (&cat->tlock);
  }
  free (gl.gen);
  return r;
}

/* Roll the target vs back to its pinned state at pgen for a publish: drop
 * its newer snapshots and pins (RB-2) and settle what they kept (RB-3),
 * saying in *d what went (RB-5).  The caller swaps the live tree away
 * afterwards (RB-4).
 */
static int
rollback_to_base (struct catalog *cat, struct volstate *vs, uint64_t pgen,
                  struct vol_discarded *d)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX];
  struct snaplist *sl = calloc (1, sizeof *sl);
  struct genlist gl = { .gen = NULL };
  struct btree_root pinned, live;
  uint64_t newest = pgen;
  size_t inewest = SIZE_MAX;
  int r = sl ? list_snaps (cat, vs->id, sl)
             : cairn_fail (-ENOMEM, "out of memory");

  /* RB-5: the live state held writes that no snapshot kept when it is not
   * the newest snapshot's tree (compared as check_base compares).
   */
  for (size_t i = 0; r == 0 && i < sl->n; i++)
    if (sl->gen[i] > newest) {
      newest = sl->gen[i];
      inewest = i;
    }
  if (r == 0)
    r = cat_lookup_pin (cat, vs->id, newest, NULL, NULL, &pinned);
  if (r == 0) {
    btree_get_root (vs->tree, &live);
    d->writes = live.bp.addr != pinned.bp.addr ||
                live.bp.birth != pinned.bp.birth || live.level != pinned.level;
    if (inewest == SIZE_MAX)
      snprintf (d->since, sizeof d->since, "%s", d->base);
    else if (sl->name[inewest][0])
      snprintf (d->since, sizeof d->since, "%s", sl->name[inewest]);
    else
      snprintf (d->since, sizeof d->since, "#%" PRIu64, newest);
    r = newer_pins (cat, vs, pgen, &gl);
  }

  /* The pins go under tlock, with no handle open: from here vol_open
   * finds none of them (it looks a pin up under tlock too).
   */
  pthread_mutex_lock (&cat->tlock);
  if (r == 0 && vs->opens > 0)
    r = cairn_fail (-EBUSY, "volume '%s' was opened during the receive: "
                    "disconnect its clients, then resume", vs->name);
  for (size_t i = 0; r == 0 && i < gl.n; i++) {
    struct open_pin *op = cat_open_pin (cat, vs->id, gl.gen[i]);
    struct pinrec pr;

    /* A checkpoint's records go with its pin (CK-1). */
    r = cat_read_pin (cat, vs->id, gl.gen[i], &pr);
    if (r == 0 && pr.ckpt)
      r = ckpt_records_del (cat, vs->id, gl.gen[i]);
    cat_key (key, RK_PIN, vs->id, gl.gen[i]);
    if (r == 0)
      r = cat_root_del (cat, key, 17);
    cat_key (key, RK_DEFER, vs->id, gl.gen[i]);
    if (r == 0 && (r = cat_root_del (cat, key, 17)) == -ENOENT)
      r = 0;
    if (op)
      op->deferred = false;
  }
  pthread_mutex_unlock (&cat->tlock);
  free (gl.gen);
  for (size_t i = 0; r == 0 && i < sl->n; i++) {
    if (sl->gen[i] <= pgen)
      continue;
    if (d->snaps < VOL_DISCARD_NAMES) {
      if (sl->name[i][0])
        snprintf (d->snap[d->snaps], sizeof d->snap[0], "%s", sl->name[i]);
      else
        snprintf (d->snap[d->snaps], sizeof d->snap[0], "#%" PRIu64,
                  sl->gen[i]);
    }
    d->snaps++;
    cat_key (key, RK_SNAP, vs->id, sl->gen[i]);
    r = cat_root_del (cat, key, 17);
    if (r == 0 && sl->name[i][0])   /* "": a damaged record, unnamed */
      r = cat_root_del (cat, key, name_key (key, RK_SNAPNAME, &vs->id,
                                            sl->name[i]));
  }
  snaplist_free (sl);
  if (r == 0)
    r = reclaim_free_entries (cat, vs->id, &vs->held, pgen, UINT64_MAX, 0,
                              UINT64_MAX, pgen, SIZE_MAX, NULL);
  if (r == 0)
    r = reaper_drop_ranges (cat, vs->id, pgen);
  if (r == 0)
    r = reclaim_max_pin (cat, vs->id, &vs->max_pin);
  return r;
}

/* Store a partial's state string. */
static int
partial_state_put (struct catalog *cat, struct volstate *vs, const char *state)
{
  uint8_t key[1 + 8 + sizeof PARTIAL_STATE_KEY];

  return cat_root_put (cat, key, partial_state_key (key, vs->id), state,
                   strlen (state));
}

/* Start a receive: make the partial volume. */
int
apply_partial_create (struct catalog *cat, struct cat_request *req,
                      uint64_t gen)
{
  char src[2 * VOL_NAME_MAX + 2];
  struct cat_request sub = { .name = req->name, .name2 = req->name,
                             .size = req->size, .flags = REQF_PARTIAL };
  struct volstate *vs, *base = NULL;
  uint64_t pgen;
  int r;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_partial (cat, req->name);
  pthread_mutex_unlock (&cat->tlock);
  if (vs)
    return cairn_fail (-EEXIST, "a receive into '%s' was interrupted and kept "
                       "its progress: resume it, or abort it first",
                       req->name);
  if (req->snap == NULL)
    r = apply_create (cat, &sub, gen);
  else {
    r = need_volume (cat, req->name, &base);
    if (r == 0)
      r = cat_lookup_snap (cat, base->id, req->snap, &pgen);
    if (r == -ENOENT)
      return cat_no_snapshot (req->name, req->snap);
    if (r == 0 && !req->flag)     /* a rollback checks when publishing */
      r = check_base (cat, base, pgen, req->snap);
    if (r < 0)
      return r;
    snprintf (src, sizeof src, "%s@%s", req->name, req->snap);
    sub.name = src;
    r = apply_clone (cat, &sub, gen);
  }
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, sub.out_id);
  pthread_mutex_unlock (&cat->tlock);
  /* A clone has its base's size: give it the stream's. */
  if (req->size < vs->size) {
    uint64_t first = DIV_ROUND_UP (req->size, BLOCK_SIZE);
    uint64_t end = DIV_ROUND_UP (vs->size, BLOCK_SIZE);

    if (end > first && (r = vol_punch (vs, first, end - first)) < 0)
      return r;
  }
  vs->size = req->size;
  r = volrec_store (cat, vs);
  if (r == 0)
    r = partial_state_put (cat, vs, req->name2);
  req->out_id = vs->id;
  return r;
}

/* Save a partial's state (the commit makes the writes before it durable). */
int
apply_partial_save (struct catalog *cat, struct cat_request *req)
{
  struct volstate *vs;
  int r = need_partial (cat, req->name, &vs);

  return r < 0 ? r : partial_state_put (cat, vs, req->name2);
}

/* Publish a partial as its target's newest snapshot and live state.  Every
 * check comes before the first change: a refusal changes nothing.
 */
int
apply_partial_publish (struct catalog *cat, struct cat_request *req,
                       uint64_t gen)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], skey[1 + 8 + sizeof PARTIAL_STATE_KEY];
  uint8_t idv[8];
  struct vol_info base = { .snap = "" };
  struct volstate *vs, *target;
  int r = need_partial (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (vs->opens > 0)
    return cairn_fail (-EBUSY, "internal error: the receive into '%s' still "
                       "has its partial volume open", req->name);

  if (vs->origin_id == 0) {
    /* Full: the partial becomes the volume. */
    if (cat_find_name (cat, req->name))
      return cairn_fail (-EEXIST, "a volume named '%s' was created during the "
                         "receive: rename or delete it, then resume",
                         req->name);
    r = cat_name_free (cat, req->name);
    if (r == 0)
      r = cat_root_del (cat, skey, partial_state_key (skey, vs->id));
    if (r == -ENOENT)
      r = 0;
    put_be64 (idv, vs->id);
    if (r == 0)
      r = cat_root_put (cat, key, name_key (key, RK_NAME, NULL, vs->name), idv, 8);
    if (r < 0)
      return r;
    pthread_mutex_lock (&cat->tlock);
    vs->flags &= ~(uint64_t) VOLF_PARTIAL;
    /* The volume came into being as the sender's snapshot: it is as old
     * as that, not as the receive (which began after it was taken).
     */
    if (req->ctime)
      vs->ctime = req->ctime;
    pthread_mutex_unlock (&cat->tlock);
    r = volrec_store (cat, vs);
    if (r == 0)
      r = snap_add (cat, vs, gen, req->snap, req->guid, req->ctime);
    return r;
  }

  /* Incremental: the target takes the partial's tree. */
  pthread_mutex_lock (&cat->tlock);
  target = cat_find_name (cat, req->name);
  pthread_mutex_unlock (&cat->tlock);
  if (target == NULL || target->id != vs->origin_id)
    return cairn_fail (-ESTALE, "volume '%s' was deleted, renamed or replaced "
                       "during the receive: abort the receive", req->name);
  if (target->opens > 0)
    return cairn_fail (-EBUSY, "volume '%s' is open by %d client%s: "
                       "disconnect them, then resume the receive",
                       target->name, target->opens,
                       target->opens == 1 ? "" : "s");
  if (cat_read_snap (cat, target->id, vs->origin_gen, &base) < 0)
    snprintf (base.snap, sizeof base.snap, "#%" PRIu64, vs->origin_gen);
  if (req->flag)
    r = rollback_check (cat, target, vs->origin_gen, base.snap, req->snap);
  else {
    r = snap_name_free (cat, target, req->snap);
    if (r == 0)
      r = check_base (cat, target, vs->origin_gen, base.snap);
  }
  if (r == 0 && req->flag) {
    *req->discarded = (struct vol_discarded) { .snaps = 0 };
    snprintf (req->discarded->base, sizeof req->discarded->base, "%s",
              base.snap);
    r = rollback_to_base (cat, target, vs->origin_gen, req->discarded);
  }
  if (r == 0)
    r = pool_tree_swap (cat->pool, target->id, vs->id);
  if (r < 0)
    return r;
  {
    int64_t tr = __atomic_load_n (&target->referenced, __ATOMIC_RELAXED);
    uint64_t size = target->size;

    __atomic_store_n (&target->referenced,
                      __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED),
                      __ATOMIC_RELAXED);
    __atomic_store_n (&vs->referenced, tr, __ATOMIC_RELAXED);
    target->size = vs->size;
    vs->size = size;
  }
  r = reclaim_adopt_deadlist (cat, vs, target);
  if (r == 0)
    r = volrec_store (cat, target);
  if (r == 0)
    r = snap_add (cat, target, gen, req->snap, req->guid, req->ctime);
  if (r == 0)
    r = destroy_volume (cat, vs, gen);     /* and its state property */
  return r;
}

/* Discard a partial. */
int
apply_partial_abort (struct catalog *cat, struct cat_request *req,
                     uint64_t gen)
{
  struct volstate *vs;
  int r = need_partial (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (vs->opens > 0)
    return cairn_fail (-EBUSY, "the receive into '%s' is still running",
                       req->name);
  return destroy_volume (cat, vs, gen);
}


/* ---------------------------------------------------------------- API: receiving */

/* A partial cloned from a base whose size ends inside a block, and given
 * a larger size: zero the rest of that block, which a shrink may have left
 * as it was (vol_zero_tail), before the stream's data comes.  The stream
 * carries the block only if it changed at the sender, whose own grow
 * zeroed its copy; the two copies may differ there (a rollback receive's
 * base is an older state of this side's).  Durable (FUA) like the
 * partial itself.
 */
static int
zero_base_tail (struct cairn_pool *pool, const char *name, const char *base,
                uint64_t size)
{
  struct cairn_volume *v;
  uint64_t from, to;
  int r = vol_open (pool, base, &v);

  if (r < 0)
    return r;
  from = vol_size (v);
  vol_close (v);
  to = MIN (DIV_ROUND_UP (from, BLOCK_SIZE) * BLOCK_SIZE, size);
  if (from % BLOCK_SIZE == 0 || to <= from)
    return 0;
  r = vol_partial_open (pool, name, &v);
  if (r < 0)
    return r;
  r = vol_zero (v, (uint32_t) (to - from), from, VOL_FUA);
  vol_close (v);
  return r;
}

int
vol_partial_create (struct cairn_pool *pool, const char *name,
                    const char *base, uint64_t size, const char *state,
                    unsigned flags)
{
  struct cat_request req = { .kind = REQ_PARTIAL_CREATE, .name = name,
                             .name2 = state, .size = size,
                             .flag = (flags & VOL_RECV_ROLLBACK) != 0 };
  int r = vol_check_name (name);

  if (r == 0 && strlen (state) >= VOL_PARTIAL_STATE_MAX)
    r = cairn_fail (-EINVAL, "a receive state of %zu bytes is too long",
                    strlen (state));
  if (r == 0 && (size == 0 || size % 512))
    r = cairn_fail (-EINVAL, "volume size %" PRIu64 " must be a positive "
                    "multiple of 512 bytes", size);
  if (r == 0 && base) {
    size_t nlen = strlen (name);

    if (strncmp (base, name, nlen) != 0 || base[nlen] != '@' ||
        base[nlen + 1] == '#' || base[nlen + 1] == '\0')
      r = cairn_fail (-EINVAL, "the base of a receive into '%s' must be one "
                      "of its snapshots, not '%s'", name, base);
    req.snap = base + nlen + 1;
  }
  if (r == 0)
    r = cat_submit (pool, &req);
  if (r == 0 && base)
    r = zero_base_tail (pool, name, base, size);
  return r;
}

int
vol_partial_get (struct cairn_pool *pool, const char *name,
                 char state[VOL_PARTIAL_STATE_MAX], struct vol_info *info)
{
  uint8_t key[1 + 8 + sizeof PARTIAL_STATE_KEY];
  struct catalog *cat;
  struct volstate *vs;
  size_t vlen;
  int r = catalog_get (pool, &cat);

  if (r == 0)
    r = need_partial (cat, name, &vs);
  if (r < 0)
    return r;
  if (info) {
    pthread_mutex_lock (&cat->tlock);
    info_from_state (vs, info);
    pthread_mutex_unlock (&cat->tlock);
  }
  if (state == NULL)
    return 0;
  r = cat_root_get (cat, key, partial_state_key (key, vs->id), state,
                VOL_PARTIAL_STATE_MAX - 1, &vlen);
  if (r == -ENOENT)
    vlen = 0;
  else if (r < 0)
    return r;
  else if (vlen >= VOL_PARTIAL_STATE_MAX)
    return cairn_fail (-EIO, "corrupt receive state of '%s'", name);
  state[vlen] = '\0';
  return 0;
}

int
vol_partial_save (struct cairn_pool *pool, const char *name, const char *state)
{
  struct cat_request req = { .kind = REQ_PARTIAL_SAVE, .name = name,
                             .name2 = state };

  if (strlen (state) >= VOL_PARTIAL_STATE_MAX)
    return cairn_fail (-EINVAL, "a receive state of %zu bytes is too long",
                       strlen (state));
  return cat_submit (pool, &req);
}

int
vol_partial_publish (struct cairn_pool *pool, const char *name,
                     const char *snap, uint64_t guid, uint64_t ctime,
                     unsigned flags, struct vol_discarded *discarded)
{
  struct vol_discarded ignored;
  struct cat_request req = { .kind = REQ_PARTIAL_PUBLISH, .name = name,
                             .snap = snap, .guid = guid, .ctime = ctime,
                             .flag = (flags & VOL_RECV_ROLLBACK) != 0,
                             .discarded = discarded ? discarded : &ignored };
  int r = vol_check_name (snap);

  *req.discarded = (struct vol_discarded) { .snaps = 0 };

  if (r == 0 && strchr (snap, '/'))
    r = cairn_fail (-EINVAL, "snapshot name '%s' may not contain '/'", snap);
  if (r == 0 && guid == 0)
    r = cairn_fail (-EINVAL, "a snapshot GUID is never 0");
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_partial_abort (struct cairn_pool *pool, const char *name)
{
  struct cat_request req = { .kind = REQ_PARTIAL_ABORT, .name = name };

  return cat_submit (pool, &req);
}
