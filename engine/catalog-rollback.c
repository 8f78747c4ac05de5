/* Cairn engine: rolling a volume back to one of its snapshots, as a
 * catalog request applied in the freeze (catalog.c).
 *
 * Design note: reverse promotion.
 *
 * `vol_rollback (VOL, SNAP, KEEP_AS)`: VOL becomes its state at SNAP again
 * and keeps its identity -- id, record, properties, quota, and its
 * snapshots up to SNAP, so that incremental sends, replication and diffs
 * from them go on as before (ZFS's rollback keeps those too).  What came
 * after SNAP is not lost: it moves to a new volume KEEP_AS, a clone of
 * VOL@SNAP, as if that later history had been written in a clone all
 * along (the reverse of ZFS's `promote`, which moves a history the other
 * way).  Let K be VOL's id, O the generation of SNAP and X the id of
 * KEEP_AS.  In one request (CAT-1: every check that can refuse comes
 * before the first tree change):
 *
 *   VR-1  Checks (rollback_refusals): no handle on K or any of its states
 *         (a pinned state after O that is open would be moved under a
 *         handle that names K); no receive into K in progress or
 *         interrupted (its partial is a clone of K's base and would find
 *         K's history changed under it); no background free record of K
 *         whose deaths reach past O (its entries move, RP-6: vol_rollback
 *         waits for the reclaim first, so only one that began meanwhile
 *         refuses); no clone of a state after O that the table cannot
 *         move (a damaged volume record might be one: DV-2); SNAP's
 *         record decodes; KEEP_AS names nothing.
 *   VR-2  Trees: X is made from O's pinned root and the two trees are
 *         exchanged (pool_tree_swap, as a receive's publish does), so K's
 *         live tree is its state at O and X's is K's former live tree.
 *         Pin O gets one more clone reason, X's.
 *   VR-3  Records keyed by (id, gen) with gen > O -- RK_PIN, RK_SNAP,
 *         RK_DEFER, RK_CKPT (moved_types below: a new record type of that
 *         key shape needs one line there) -- and the index items whose
 *         value names such a state, RK_SNAPNAME and RK_CKPTTIME, move from
 *         K to X unchanged (checkpoints after O are X's history now), with
 *         the handles' bookkeeping of those states (cat->open_pins).
 *         Volumes whose origin is (K, g > O) get origin X.
 *   VR-4  Deadlist entries (D, B) of K (reclaim_move_deadlist):
 *           D <= O          stay: they died before O and only K's pins at
 *                           or before O can need them;
 *           D > O, B > O    move to X: born after X's origin, so X owns
 *                           them (RC-1), and they were kept for a pin
 *                           after O (RC-2), which is X's now;
 *           D > O, B <= O   are forgotten, not freed: alive at O, they are
 *                           in O's pinned tree and so in K's live tree
 *                           again, owned by K (born after K's origin) as
 *                           any live block is.  When K stops referencing
 *                           one later, RC-2 puts it back on K's deadlist
 *                           (pin O still needs it).  X never frees one
 *                           (born at or before its origin, RC-1), and
 *                           every state of X that holds it is held by
 *                           pin O, which X's clone reason keeps (VR-2).
 *         So no block is owned twice or by nobody, and fsck's space audit
 *         proves it in the tests.
 *   VR-5  Counts: K's referenced blocks and size are SNAP's; X's are K's
 *         former ones; both held counts are counted again from the
 *         deadlist, and both newest pins read again (K's is O).  X gets a
 *         copy of K's user properties, quota and read-only flag.
 *
 * The blocks of X's tree born at or before O are all in O's pinned tree
 * (a block born before O that is still referenced later was referenced
 * at O: blocks are never written twice), which is what makes X a clone of
 * (K, O) and not of some other state.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"

/* Root-tree records keyed type + be64 id + be64 gen that follow their
 * state to the volume keeping the history after the rollback (VR-3).
 */
static const uint8_t moved_types[] = { RK_PIN, RK_SNAP, RK_DEFER, RK_CKPT };
/* Index items keyed type + be64 id + something else, whose value is the
 * le64 generation of the state they name (VR-3).
 */
static const uint8_t moved_index_types[] = { RK_SNAPNAME, RK_CKPTTIME };

/* One root-tree item to move from K to X. */
struct moved_item {
  uint8_t *key, *val;
  size_t klen, vlen;
  uint64_t gen;
};

/* The items a rollback moves, gathered before any change (VR-1). */
struct moves {
  uint64_t after;             /* O */
  unsigned type;              /* the type being gathered */
  struct moved_item *m;
  size_t n, cap;
};

/* Free what gather_moves collected. */
static void
moves_free (struct moves *mv)
{
  for (size_t i = 0; i < mv->n; i++) {
    free (mv->m[i].key);
    free (mv->m[i].val);
  }
  free (mv->m);
}

/* cat_foreach_prefix callback: keep an item of a state after O. */
static int
gather_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
             size_t vl)
{
  struct moves *mv = opaque;
  struct moved_item *it;
  uint64_t gen;

  if (mv->type == RK_SNAPNAME || mv->type == RK_CKPTTIME) {
    if (vl != 8)
      return cairn_fail (-EIO, "corrupt %s item (volume %" PRIu64 ", %zu-byte "
                         "value): run cairn fsck", mv->type == RK_SNAPNAME ?
                         "snapshot name" : "checkpoint time", get_be64 (k + 1),
                         vl);
    gen = get_le64 (v);
  }
  else {
    if (kl != 17)
      return cairn_fail (-EIO, "corrupt catalog key (type %u, %zu bytes): "
                         "run cairn fsck", mv->type, kl);
    gen = get_be64 (k + 9);
  }
  if (gen <= mv->after)
    return 0;
  if (mv->n == mv->cap) {
    size_t cap = mv->cap ? 2 * mv->cap : 16;
    struct moved_item *nm = realloc (mv->m, cap * sizeof *nm);

    if (nm == NULL)
      return cairn_fail (-ENOMEM, "out of memory rolling back");
    mv->m = nm;
    mv->cap = cap;
  }
  it = &mv->m[mv->n];
  it->key = malloc (kl);
  it->val = malloc (vl ? vl : 1);
  if (it->key == NULL || it->val == NULL) {
    free (it->key);
    free (it->val);
    return cairn_fail (-ENOMEM, "out of memory rolling back");
  }
  memcpy (it->key, k, kl);
  memcpy (it->val, v, vl);
  it->klen = kl;
  it->vlen = vl;
  it->gen = gen;
  mv->n++;
  return 0;
}

/* Gather K's records of states after O (VR-3), reading only. */
static int
gather_moves (struct catalog *cat, uint64_t id, struct moves *mv)
{
  uint8_t prefix[9];
  int r = 0;

  for (size_t t = 0;
       t < ARRAY_SIZE (moved_types) + ARRAY_SIZE (moved_index_types) && r == 0;
       t++) {
    mv->type = t < ARRAY_SIZE (moved_types) ? moved_types[t]
               : moved_index_types[t - ARRAY_SIZE (moved_types)];
    prefix[0] = (uint8_t) mv->type;
    put_be64 (prefix + 1, id);
    r = cat_foreach_prefix (cat, prefix, 9, gather_item, mv);
  }
  return r;
}

/* State of free_record_after. */
struct free_after {
  uint64_t after;
  bool found;
};

/* cat_foreach_prefix callback: does a free record reach past O? */
static int
free_record_after (void *opaque, const uint8_t *k, size_t kl,
                   const uint8_t *v, size_t vl)
{
  struct free_after *fa = opaque;
  uint64_t id, range[4];
  int r = freerec_decode (k, kl, v, vl, &id, range);

  if (r < 0)
    return r;
  fa->found |= range[1] > fa->after;    /* deaths up to hi_d */
  return fa->found;
}

/* May vs be rolled back to its snapshot snap at o, with mv its records
 * after o (VR-1)?  -EBUSY or -EIO saying why not.
 */
static int
rollback_refusals (struct catalog *cat, struct volstate *vs, const char *snap,
                   uint64_t o, const struct moves *mv)
{
  struct free_after fa = { o, false };
  uint8_t prefix[9];
  int r = 0;

  pthread_mutex_lock (&cat->tlock);
  if (vs->opens > 0)
    r = cairn_fail (-EBUSY, "volume '%s' is open by %d client%s: disconnect "
                    "them before rolling it back", vs->name, vs->opens,
                    vs->opens == 1 ? "" : "s");
  for (size_t i = 0; r == 0 && i < cat->nvols; i++)
    if ((cat->vols[i]->flags & VOLF_PARTIAL) &&
        cat->vols[i]->origin_id == vs->id)
      r = cairn_fail (-EBUSY, "a receive into '%s' is in progress or was "
                      "interrupted: let it finish, or abort it, before "
                      "rolling the volume back", vs->name);
  for (size_t i = 0; r == 0 && i < mv->n; i++) {
    const struct moved_item *it = &mv->m[i];
    struct open_pin *op;
    uint32_t clones;
    size_t moved = 0;

    if (it->key[0] != RK_PIN)
      continue;
    op = cat_open_pin (cat, vs->id, it->gen);
    if (op && op->opens > 0) {
      r = cairn_fail (-EBUSY, "the state of '%s' at generation %" PRIu64
                      " is open by %d client%s: disconnect them before "
                      "rolling the volume back", vs->name, it->gen, op->opens,
                      op->opens == 1 ? "" : "s");
      break;
    }
    if (it->vlen != PINREC_LEN) {
      r = cairn_fail (-EIO, "corrupt pin record (volume %" PRIu64 ", "
                      "generation %" PRIu64 "): run cairn fsck", vs->id,
                      it->gen);
      break;
    }
    clones = get_le32 (it->val + 4);
    for (size_t j = 0; j < cat->nvols; j++)
      moved += cat->vols[j]->origin_id == vs->id &&
               cat->vols[j]->origin_gen == it->gen;
    if (moved < clones)
      r = cairn_fail (-EIO, "volume '%s' has %" PRIu32 " clones of its "
                      "state at generation %" PRIu64 " and only %zu of them "
                      "can be found (a damaged volume record may be one): "
                      "the rollback cannot move them; see DAMAGED RECORDS "
                      "in cairn(8)", vs->name, clones, it->gen, moved);
  }
  pthread_mutex_unlock (&cat->tlock);
  if (r < 0)
    return r;
  prefix[0] = RK_FREE;
  put_be64 (prefix + 1, vs->id);
  r = cat_foreach_prefix (cat, prefix, 9, free_record_after, &fa);
  if (r == 0 && fa.found)
    r = cairn_fail (-EBUSY, "volume '%s' is still giving back the space of "
                    "snapshots deleted after '%s' (a reclaim job): wait for "
                    "it to end (cairn job list), then roll back again",
                    vs->name, snap);
  return r;
}

/* Move the gathered records from vs's id to xid (VR-3). */
static int
move_records (struct catalog *cat, struct volstate *vs, uint64_t xid,
              const struct moves *mv)
{
  int r = 0;

  for (size_t i = 0; i < mv->n && r == 0; i++) {
    struct moved_item *it = &mv->m[i];

    r = cat_root_del (cat, it->key, it->klen);
    put_be64 (it->key + 1, xid);
    if (r == 0)
      r = cat_root_put (cat, it->key, it->klen, it->val, it->vlen);
  }
  if (r < 0)
    return r;
  /* Handles' bookkeeping of those states (none is open, VR-1). */
  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < cat->nopen_pins; i++)
    if (cat->open_pins[i].id == vs->id && cat->open_pins[i].gen > mv->after)
      cat->open_pins[i].id = xid;
  pthread_mutex_unlock (&cat->tlock);
  return 0;
}

/* Clones of the states after O start from X now (VR-3). */
static int
reparent_clones (struct catalog *cat, struct volstate *vs, uint64_t o,
                 uint64_t xid)
{
  int r = 0;

  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < cat->nvols; i++)
    if (cat->vols[i]->origin_id == vs->id && cat->vols[i]->origin_gen > o)
      cat->vols[i]->origin_id = xid;
  pthread_mutex_unlock (&cat->tlock);
  for (size_t i = 0; i < cat->nvols && r == 0; i++)
    if (cat->vols[i]->origin_id == xid)
      r = volrec_store (cat, cat->vols[i]);
  return r;
}

/* Roll a volume back to its snapshot, keeping the later history as a new
 * volume (design note above).
 */
int
apply_rollback (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  char export[2 * VOL_NAME_MAX + 2];
  struct moves mv = { .m = NULL };
  struct volstate *vs = NULL, *x;
  struct btree_root pinned;
  struct vol_info info;
  struct btree *t;
  uint64_t o, xid;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  /* SNAP: a snapshot's name, or a checkpoint ("#GEN", or a time). */
  r = cat_lookup_point (cat, vs->id, vs->name, req->snap, &o);
  if (r < 0)
    return r;
  r = cat_read_snap (cat, vs->id, o, &info);
  if (r == -ENOENT) {
    struct vol_checkpoint c;

    /* A checkpoint: its record has the size and data of its state. */
    r = ckpt_read (cat, vs->id, o, &c);
    if (r == -ENOENT)
      return cairn_fail (-ENOENT, "volume '%s' keeps no state at generation "
                         "%" PRIu64 " (cairn checkpoint list %s shows the "
                         "checkpoints kept)", vs->name, o, vs->name);
    info.size = c.size;
    info.referenced = c.referenced;
  }
  else if (r < 0) {
    snprintf (export, sizeof export, "%s@%s", vs->name, req->snap);
    return cat_snap_unreadable (r, export);
  }
  if (cat_find_name (cat, req->name2))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already: choose "
                       "another name to keep the rolled-back state under",
                       req->name2);
  r = cat_name_free (cat, req->name2);
  if (r == 0)
    r = cat_lookup_pin (cat, vs->id, o, NULL, NULL, &pinned);
  mv.after = o;
  if (r == 0)
    r = gather_moves (cat, vs->id, &mv);
  if (r == 0)
    r = rollback_refusals (cat, vs, req->snap, o, &mv);
  if (r < 0)
    goto out;

  /* Changes from here (CAT-1). */
  r = pool_tree_create_from (cat->pool, &pinned, &xid, &t);
  if (r == 0)
    r = pool_tree_swap (cat->pool, vs->id, xid);          /* VR-2 */
  if (r < 0)
    goto out;
  x = volstate_new (xid, t, req->name2, vs->size, gen);
  if (x == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory rolling back");
    goto out;
  }
  x->origin_id = vs->id;
  x->origin_gen = o;
  x->quota = vs->quota;
  x->flags = vs->flags & VOLF_READONLY;
  x->ckpt_setting = vs->ckpt_setting;   /* copy_props copies its record */
  x->referenced = __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED);
  r = publish_volume (cat, x);          /* frees x on failure */
  if (r < 0)
    goto out;
  r = pin_add (cat, vs, o, &pinned, PIN_CLONE);
  if (r == 0)
    r = move_records (cat, vs, xid, &mv);
  if (r == 0)
    r = reparent_clones (cat, vs, o, xid);
  if (r == 0)
    r = reclaim_move_deadlist (cat, vs, x, o);            /* VR-4 */
  if (r == 0)
    r = reclaim_count_held (cat, vs);                     /* VR-5 */
  if (r == 0)
    r = reclaim_count_held (cat, x);
  if (r == 0)
    r = reclaim_max_pin (cat, vs->id, &vs->max_pin);
  if (r == 0)
    r = reclaim_max_pin (cat, xid, &x->max_pin);
  if (r == 0)
    r = copy_props (cat, vs->id, xid);
  if (r < 0)
    goto out;
  vs->size = info.size;
  __atomic_store_n (&vs->referenced, (int64_t) (info.referenced / BLOCK_SIZE),
                    __ATOMIC_RELAXED);
  r = volrec_store (cat, vs);
  if (r == 0)
    r = volrec_store (cat, x);
  req->out_id = xid;
 out:
  moves_free (&mv);
  return r;
}
