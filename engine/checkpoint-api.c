/* Cairn engine, layer "catalog": the public calls of continuous
 * checkpoints (volume.h) and what they compute -- listings with what
 * dropping each checkpoint would free, the split of a volume's held space
 * between snapshots and checkpoints, the collector's status, promotion,
 * pruning and settings.  The design note (CK-n) is at the top of
 * checkpoint.c.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint-int.h"

static int find_volume (struct catalog *cat, const char *name,
                        struct volstate **vsp);
static void release_volume (struct catalog *cat, struct volstate *vs);

/* ---------------------------------------------------------------- accounting */

/* The generations that a snapshot or a clone pins, sorted (from the pin
 * records, oldest first).
 */
struct pinned {
  uint64_t *gen;
  size_t n, cap;
};

/* cat_foreach_pin callback: keep a pin with a snapshot or clone reason. */
static int
pinned_item (void *opaque, uint64_t gen, const uint8_t *rec, size_t len)
{
  struct pinned *p = opaque;

  if (len != PINREC_LEN || get_le32 (rec) + get_le32 (rec + 4) == 0)
    return 0;
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 32;
    uint64_t *ng = realloc (p->gen, cap * sizeof *ng);

    if (ng == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    p->gen = ng;
    p->cap = cap;
  }
  p->gen[p->n++] = gen;
  return 0;
}

/* State of the held split. */
struct split {
  const struct pinned *p;
  uint64_t snap, ckpt;        /* blocks */
};

/* reclaim_foreach_entry callback: a dead block (birth B, death D) is a
 * snapshot's or clone's when one of theirs lies in [B, D) (RC-2: the pins
 * that need it), else only checkpoints keep it.
 */
static int
split_entry (void *opaque, uint64_t len, uint64_t birth, uint64_t death)
{
  struct split *sp = opaque;
  size_t lo = 0, hi = sp->p->n;

  while (lo < hi) {           /* the first pinned generation >= birth */
    size_t mid = (lo + hi) / 2;

    if (sp->p->gen[mid] < birth)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < sp->p->n && sp->p->gen[lo] < death)
    sp->snap += len;
  else
    sp->ckpt += len;
  return 0;
}

int
vol_held_split (struct cairn_pool *pool, const char *vol, uint64_t *snaps,
                uint64_t *ckpts)
{
  struct catalog *cat;
  struct volstate *vs = NULL;
  struct pinned p = { 0 };
  struct split sp = { .p = &p };
  int r = catalog_get (pool, &cat);

  if (r == 0)
    r = find_volume (cat, vol, &vs);
  if (r == 0)
    r = cat_foreach_pin (cat, vs->id, pinned_item, &p);
  if (r == 0)
    r = reclaim_foreach_entry (cat, vs, 0, UINT64_MAX, split_entry, &sp);
  release_volume (cat, vs);
  free (p.gen);
  *snaps = sp.snap * BLOCK_SIZE;
  *ckpts = sp.ckpt * BLOCK_SIZE;
  return r;
}

int
vol_checkpoint_status (struct cairn_pool *pool, struct vol_ckpt_status *st)
{
  struct catalog *cat;
  uint64_t *ids = NULL;
  size_t n = 0;
  int r = catalog_get (pool, &cat);

  memset (st, 0, sizeof *st);
  if (r == 0)
    r = visible_ids (cat, &ids, &n);
  /* The oldest kept checkpoint: the first item of each volume's index. */
  for (size_t i = 0; r == 0 && i < n; i++) {
    struct ckbatch b = { .n = 0 };
    uint8_t key[CKPT_KEY_TIME_LEN];

    ckpt_time_key (key, ids[i], 0, 0);
    r = cat_foreach_prefix_from (cat, key, sizeof key, 9, batch_item, &b);
    if (r == 0 && b.n) {
      st->count_volumes++;
      if (st->oldest == 0 || b.ctime[0] < st->oldest)
        st->oldest = b.ctime[0];
    }
  }
  free (ids);
  st->collected = __atomic_load_n (&cat->ckpt_dropped, __ATOMIC_RELAXED);
  st->pressure_dropped = __atomic_load_n (&cat->ckpt_pressure_dropped,
                                          __ATOMIC_RELAXED);
  st->pressure_events = __atomic_load_n (&cat->ckpt_pressure_events,
                                         __ATOMIC_RELAXED);
  st->pressure_last = __atomic_load_n (&cat->ckpt_pressure_last,
                                       __ATOMIC_RELAXED);
  st->now = pool_now (pool);
  st->default_on = cat->ckpt_default > 0;
  if (r == 0) {
    uint64_t secs;
    bool own, server;

    r = interval_get (cat, &secs, &own);
    st->commit_interval_ms = pool_commit_interval (pool, &server);
    st->interval_from = server ? "server" : own ? "pool" : "default";
  }
  return r;
}

/* ---------------------------------------------------------------- API */

/* Look a visible volume up by name and hold it (as an open handle does,
 * so that a delete meanwhile hides it and frees it only at release_volume):
 * the calls below read its records outside any lock.
 */
static int
find_volume (struct catalog *cat, const char *name, struct volstate **vsp)
{
  pthread_mutex_lock (&cat->tlock);
  *vsp = cat_find_name (cat, name);
  if (*vsp)
    (*vsp)->opens++;
  pthread_mutex_unlock (&cat->tlock);
  return *vsp ? 0 : cat_no_volume (cat, name, name);
}

/* Let go of a volume find_volume held (NULL: none). */
static void
release_volume (struct catalog *cat, struct volstate *vs)
{
  bool settle;

  if (vs == NULL)
    return;
  pthread_mutex_lock (&cat->tlock);
  vs->opens--;
  settle = (vs->flags & VOLF_HIDDEN) && vs->opens == 0;
  pthread_mutex_unlock (&cat->tlock);
  if (settle)
    cat_settle_soon (cat);
}

/* cat_foreach_prefix callback over the time index: collect the
 * generations of the checkpoints up to gv->until.
 */
static int
time_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
           size_t vl)
{
  struct genvec *gv = opaque;

  if (kl != CKPT_KEY_TIME_LEN || vl != 8)
    return cairn_fail (-EIO, "corrupt checkpoint time index item (key %zu, "
                       "value %zu bytes)", kl, vl);
  if (get_be64 (k + 9) > gv->until)
    return 1;
  if (get_be64 (k + 9) < gv->since)
    return 0;
  if (gv->n == gv->cap) {
    size_t cap = gv->cap ? gv->cap * 2 : 64;
    uint64_t *ng = realloc (gv->gen, cap * sizeof *ng);

    if (ng == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing checkpoints");
    gv->gen = ng;
    gv->cap = cap;
  }
  gv->gen[gv->n++] = get_be64 (k + 17);
  return 0;
}

/* The pins around a listing's checkpoints, and what dropping each would
 * free, found in one walk of the deadlist (ckpt_unique_window).
 */
struct wpin {
  uint64_t gen;
  uint32_t snaps, clones;     /* the pin record's reasons */
  bool ckpt;
  uint64_t blocks;            /* what only this pin keeps */
};
struct window {
  struct wpin *p;             /* every pin from the one below the first
                                 listed to the one above the last, sorted */
  size_t n, cap;
  uint64_t above;             /* the pin above the last listed, or
                                 UINT64_MAX */
  size_t next;                /* window_entry: the first pin at or above
                                 the last entry's death */
};

/* cat_foreach_prefix callback over pin records: keep the window's. */
static int
window_pin (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
            size_t vl)
{
  struct window *w = opaque;
  uint64_t gen;

  if (kl != 17 || vl != PINREC_LEN)
    return cairn_fail (-EIO, "corrupt pin record (key %zu, value %zu bytes)",
                       kl, vl);
  gen = get_be64 (k + 9);
  if (gen > w->above)
    return 1;
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    struct wpin *np = realloc (w->p, cap * sizeof *np);

    if (np == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing checkpoints");
    w->p = np;
    w->cap = cap;
  }
  w->p[w->n++] = (struct wpin) {
    .gen = gen, .snaps = get_le32 (v), .clones = get_le32 (v + 4),
    .ckpt = (v[PINREC_FLAGS] & PINF_CKPT) != 0,
  };
  return 0;
}

/* The index of the first pin of w at or above g. */
static size_t
window_find (const struct window *w, uint64_t g)
{
  size_t lo = 0, hi = w->n;

  while (lo < hi) {
    size_t mid = (lo + hi) / 2;

    if (w->p[mid].gen < g)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* reclaim_foreach_entry callback: a dead block (B, D) is unique to a pin
 * when that pin is the only one in [B, D) (RC-2, RC-3): when the last pin
 * below D is at or above B and the one before it is below B.  The
 * deadlist comes in order of death, so the pin below D is found by moving
 * forward from the last entry's; only the few entries not yet in the
 * tree (whose deaths come in any order) need a search.
 */
static int
window_entry (void *opaque, uint64_t len, uint64_t birth, uint64_t death)
{
  struct window *w = opaque;
  size_t j = w->next;

  if (j > 0 && w->p[j - 1].gen >= death)
    j = window_find (w, death);
  while (j < w->n && w->p[j].gen < death)
    j++;
  w->next = j;
  if (j > 0 && w->p[j - 1].gen >= birth &&
      (j == 1 || w->p[j - 2].gen < birth))
    w->p[j - 1].blocks += len;
  return 0;
}

/* What dropping each checkpoint with a generation in [first, last] would
 * free, for all of them in one walk: the pins from the one below first to
 * the one above last, then the deadlist entries that died after first
 * and no later than that pin above (RC-3 for every pin at once: a block
 * is unique to a pin when no other pin lies in [B, D)).  The cost follows
 * the history listed, not the volume's.
 */
static int
ckpt_unique_window (struct catalog *cat, struct volstate *vs, uint64_t first,
                    uint64_t last, struct window *w)
{
  uint8_t key[17];
  uint64_t below, above, below_last;
  int r = reclaim_pin_neighbours (cat, vs->id, first, &below, &above);

  if (r == 0)
    r = reclaim_pin_neighbours (cat, vs->id, last, &below_last, &w->above);
  if (r < 0)
    return r;
  cat_key (key, RK_PIN, vs->id, below);
  r = cat_foreach_prefix_from (cat, key, 17, 9, window_pin, w);
  if (r == 0)
    r = reclaim_foreach_entry (cat, vs, first, w->above, window_entry, w);
  return r;
}

/* Fill in what a listing adds to a checkpoint's record from w (its pin's
 * reasons, what dropping it would free), its snapshot's name when it has
 * one, and the handles open on it.
 */
static int
ckpt_details (struct catalog *cat, struct volstate *vs,
              const struct window *w, struct vol_checkpoint *c)
{
  struct open_pin *op;
  size_t i = window_find (w, c->gen);
  const struct wpin *p = i < w->n && w->p[i].gen == c->gen ? &w->p[i] : NULL;

  if (p == NULL)
    return -ENOENT;             /* collected meanwhile */
  if (p->snaps) {
    struct vol_info si;
    int r = cat_read_snap (cat, vs->id, c->gen, &si);

    if (r == 0)
      snprintf (c->snapshot, sizeof c->snapshot, "%s", si.snap);
    else if (r != -ENOENT)
      return r;
  }
  c->clones = p->clones;
  pthread_mutex_lock (&cat->tlock);
  op = cat_open_pin (cat, vs->id, c->gen);
  c->opens = op ? (unsigned) op->opens : 0;
  pthread_mutex_unlock (&cat->tlock);
  c->unique = p->snaps + p->clones == 0 && p->ckpt ? p->blocks * BLOCK_SIZE
                                                   : 0;
  return 0;
}

/* Checkpoint records read in generation order, a batch at a time (the
 * root tree's lock is held while a batch is read, not while the listing's
 * callback runs).
 */
#define LIST_BATCH 256
struct recbatch {
  uint64_t last;              /* the last generation wanted */
  size_t n;
  struct {
    uint64_t gen;
    uint8_t v[CKPTREC_LEN];
    size_t vl;
  } rec[LIST_BATCH];
};

/* cat_foreach_prefix_from callback over checkpoint records. */
static int
rec_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
          size_t vl)
{
  struct recbatch *b = opaque;

  if (kl != 17)
    return cairn_fail (-EIO, "corrupt checkpoint key (%zu bytes)", kl);
  if (get_be64 (k + 9) > b->last)
    return 1;
  b->rec[b->n].gen = get_be64 (k + 9);
  b->rec[b->n].vl = vl;
  memcpy (b->rec[b->n].v, v, MIN (vl, (size_t) CKPTREC_LEN));
  return ++b->n == LIST_BATCH;
}

/* Hand checkpoint c, read with result r, to fn with what a listing adds
 * (ckpt_details); one collected meanwhile (-ENOENT) is left out.
 */
static int
list_one (struct catalog *cat, struct volstate *vs, const struct window *w,
          int r, struct vol_checkpoint *c,
          int (*fn) (void *opaque, const struct vol_checkpoint *c),
          void *opaque)
{
  if (r == 0)
    r = ckpt_details (cat, vs, w, c);
  if (r == -ENOENT)
    return 0;
  return r == 0 ? fn (opaque, c) : r;
}

/* Call fn for the checkpoint of each generation of gv that is still kept,
 * in gv's order, each looked up by its key.
 */
static int
list_one_by_one (struct catalog *cat, struct volstate *vs,
                 const struct genvec *gv, const struct window *w,
                 int (*fn) (void *opaque, const struct vol_checkpoint *c),
                 void *opaque)
{
  int r = 0;

  for (size_t i = 0; r == 0 && i < gv->n; i++) {
    struct vol_checkpoint c;

    r = ckpt_read (cat, vs->id, gv->gen[i], &c);
    r = list_one (cat, vs, w, r, &c, fn, opaque);
  }
  return r;
}

/* The same, for many: the time index is in generation order unless the
 * clock went back, and then the records are read in batches by a walk of
 * their keys, not a lookup each.
 */
static int
list_records (struct catalog *cat, struct volstate *vs,
              const struct genvec *gv, const struct window *w,
              int (*fn) (void *opaque, const struct vol_checkpoint *c),
              void *opaque)
{
  struct recbatch *b;
  uint8_t key[17];
  size_t j = 0;
  int r = 0;

  for (size_t i = 1; i < gv->n; i++)
    if (gv->gen[i] <= gv->gen[i - 1])
      return list_one_by_one (cat, vs, gv, w, fn, opaque);
  if (gv->n < 2)
    return list_one_by_one (cat, vs, gv, w, fn, opaque);
  b = malloc (sizeof *b);
  if (b == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing checkpoints");
  b->last = gv->gen[gv->n - 1];
  while (r == 0 && j < gv->n) {
    b->n = 0;
    cat_key (key, RK_CKPT, vs->id, gv->gen[j]);
    r = cat_foreach_prefix_from (cat, key, 17, 9, rec_item, b);
    for (size_t k = 0; r == 0 && k < b->n; k++) {
      struct vol_checkpoint c;

      while (j < gv->n && gv->gen[j] < b->rec[k].gen)
        j++;                  /* collected meanwhile */
      if (j == gv->n || gv->gen[j] != b->rec[k].gen)
        continue;             /* taken meanwhile: not in this listing */
      j++;
      r = ckptrec_decode (b->rec[k].v, b->rec[k].vl, vs->id, b->rec[k].gen,
                          &c);
      r = list_one (cat, vs, w, r, &c, fn, opaque);
    }
    if (b->n < LIST_BATCH)
      break;                  /* no record left up to the last wanted */
  }
  free (b);
  return r;
}

int
vol_checkpoint_list (struct cairn_pool *pool, const char *vol, uint64_t since,
                     uint64_t until,
                     int (*fn) (void *opaque, const struct vol_checkpoint *c),
                     void *opaque)
{
  struct catalog *cat;
  struct volstate *vs = NULL;
  struct genvec gv = { .since = since, .until = until };
  struct window w = { .n = 0 };
  uint8_t key[CKPT_KEY_TIME_LEN];
  int r = catalog_get (pool, &cat);

  if (r == 0)
    r = find_volume (cat, vol, &vs);
  if (r < 0)
    return r;
  /* The time index from since on, collected under the root tree's lock;
   * each checkpoint is then read without it.
   */
  ckpt_time_key (key, vs->id, since, 0);
  r = cat_foreach_prefix_from (cat, key, sizeof key, 9, time_item, &gv);
  if (r == 0 && gv.n) {
    uint64_t first = UINT64_MAX, last = 0;

    for (size_t i = 0; i < gv.n; i++) {
      first = MIN (first, gv.gen[i]);
      last = MAX (last, gv.gen[i]);
    }
    r = ckpt_unique_window (cat, vs, first, last, &w);
  }
  if (r == 0)
    r = list_records (cat, vs, &gv, &w, fn, opaque);
  release_volume (cat, vs);
  genvec_free (&gv);
  free (w.p);
  return r < 0 ? r : 0;
}

/* The newest checkpoint of volume id at or before time t (a seek in the
 * time index): -ENOENT when there is none.
 */
int
ckpt_at_time (struct catalog *cat, uint64_t id, uint64_t t, uint64_t *genp,
              uint64_t *ctimep)
{
  struct btree *root = pool_root_tree (cat->pool);
  struct btree_cursor *cur;
  uint8_t key[CKPT_KEY_TIME_LEN];
  int r;

  ckpt_time_key (key, id, t, UINT64_MAX);
  r = btree_cursor_new (root, &cur);
  if (r < 0)
    return r;
  btree_rdlock (root);
  r = btree_cursor_seek_le (cur, key, sizeof key);
  if (r == 0) {
    const uint8_t *k, *v;
    size_t kl, vl;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl == CKPT_KEY_TIME_LEN && k[0] == RK_CKPTTIME &&
        get_be64 (k + 1) == id && get_be64 (k + 9) <= t) {
      *ctimep = get_be64 (k + 9);
      *genp = get_be64 (k + 17);
    }
    else
      r = -ENOENT;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  return r;
}

int
vol_checkpoint_prune (struct cairn_pool *pool, const char *vol, bool dry_run,
                      int (*fn) (void *opaque, uint64_t gen, int64_t ctime,
                                 const char *mark),
                      void *opaque, uint64_t *droppedp)
{
  struct catalog *cat;
  struct volstate *vs = NULL;
  uint64_t dropped = 0;
  int r = catalog_get (pool, &cat);

  if (r == 0)
    r = find_volume (cat, vol, &vs);
  if (r == 0)
    r = ckpt_prune_vs (cat, vs->id, dry_run, fn, opaque, &dropped);
  release_volume (cat, vs);
  if (droppedp)
    *droppedp = dropped;
  return r;
}

int
vol_checkpoint_promote (struct cairn_pool *pool, const char *export,
                        const char *snap)
{
  struct cat_request req = { .kind = REQ_CKPT_PROMOTE, .name = export,
                             .snap = snap };
  int r = vol_check_name (snap);

  if (r < 0)
    return r;
  if (strchr (snap, '/'))
    return cairn_fail (-EINVAL, "'%s': a snapshot name has no '/'", snap);
  return cat_submit (pool, &req);
}

int
vol_parse_time (const char *s, uint64_t *tp)
{
  if (cat_parse_time (s, tp) < 0)
    return cairn_fail (-EINVAL, "'%s' is not a time of the form "
                       "YYYY-MM-DDTHH:MM:SSZ (UTC)", s);
  return 0;
}

int
vol_checkpoint_collect (struct cairn_pool *pool)
{
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  return r < 0 ? r : ckpt_collect (cat);
}

/* Apply a REQ_CKPT_SET: req->name the volume ("" for the pool's
 * default), req->name2 the setting's name, req->snap its text (NULL: back
 * to what it inherits).
 */
int
apply_ckpt_set (struct catalog *cat, struct cat_request *req)
{
  struct volstate *vs = NULL;
  uint64_t id = 0;
  int on = -1, r = 0;

  if (req->name[0]) {
    r = need_volume (cat, req->name, &vs);
    id = vs ? vs->id : 0;
  }
  if (r == 0 && req->snap && strcmp (req->name2, "checkpoints") == 0)
    r = parse_onoff (req->snap, &on);
  if (r == 0)
    r = setting_put (cat, id, req->name2, req->snap);
  if (r == 0 && (strcmp (req->name2, "commit-interval") == 0 ||
                 strcmp (req->name2, "space-threshold") == 0))
    r = pool_settings_apply (cat);
  if (r == 0 && strcmp (req->name2, "checkpoints") == 0) {
    if (vs)
      vs->ckpt_setting = on;
    else
      cat->ckpt_default = on >= 0 ? on : pool_default (cat);
  }
  return r;
}

int
vol_checkpoint_set (struct cairn_pool *pool, const char *vol, const char *key,
                    const char *value)
{
  struct cat_request req = { .kind = REQ_CKPT_SET, .name = vol ? vol : "" };
  struct catalog *cat;
  char text[RET_POLICY_TEXT_MAX];
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  if (strcmp (key, "checkpoints") == 0) {
    int on;

    if (value && (r = parse_onoff (value, &on)) < 0)
      return r;
    req.name2 = "checkpoints";
    req.snap = value;
  }
  else if (strcmp (key, "commit-interval") == 0 ||
           strcmp (key, "space-threshold") == 0) {
    bool interval = strcmp (key, "commit-interval") == 0;
    uint64_t secs;
    unsigned pct;

    if (vol)
      return cairn_fail (-EINVAL, "%s is the pool's setting, not a volume's: "
                         "set it as the pool's default", key);
    if (value && strcmp (value, "inherit") == 0)
      value = NULL;
    req.name2 = interval ? "commit-interval" : "space-threshold";
    if (value && interval) {
      if ((r = parse_interval (value, &secs)) < 0)
        return r;
      req.snap = retention_format_duration (secs, text);
    }
    else if (value) {
      if ((r = parse_threshold (value, &pct)) < 0)
        return r;
      snprintf (text, sizeof text, "%u%%", pct);
      req.snap = text;
    }
  }
  else if (strcmp (key, "retention") == 0 && (value == NULL ||
                                               strcmp (value, "inherit") == 0)) {
    req.name2 = "retention";
    req.snap = NULL;
  }
  else {
    struct ret_policy p;
    struct volstate *vs = NULL;
    bool own;

    if (vol && (r = find_volume (cat, vol, &vs)) < 0)
      return r;
    r = policy_get (cat, vs ? vs->id : 0, &p, &own);
    release_volume (cat, vs);
    if (r == 0 && value == NULL)
      r = cairn_fail (-EINVAL, "%s: give a value", key);
    if (r == 0)
      r = retention_parse (&p, key, value);
    if (r < 0)
      return r;
    req.name2 = "retention";
    req.snap = retention_encode (&p, text);
  }
  return cat_submit (pool, &req);
}

int
vol_checkpoint_settings (struct cairn_pool *pool, const char *vol,
                         struct vol_ckpt_settings *st)
{
  struct catalog *cat;
  struct volstate *vs = NULL;
  struct ret_policy p;
  char buf[RET_POLICY_TEXT_MAX];
  int r = catalog_get (pool, &cat);

  if (r == 0 && vol)
    r = find_volume (cat, vol, &vs);
  if (r == 0)
    r = policy_get (cat, vs ? vs->id : 0, &p, &st->own_retention);
  if (r == 0) {
    st->own_checkpoints = vs && vs->ckpt_setting >= 0;
    st->checkpoints = vs ? ckpt_enabled (cat, vs) : cat->ckpt_default > 0;
    r = interval_get (cat, &st->commit_interval, &st->own_interval);
  }
  if (r == 0)
    r = threshold_get (cat, &st->space_threshold, &st->own_threshold);
  if (r == 0)
    st->commit_interval_ms = pool_commit_interval (pool, &st->server_interval);
  release_volume (cat, vs);
  if (r < 0)
    return r;
  snprintf (st->retention, sizeof st->retention, "%s",
            retention_encode (&p, buf));
  st->dropped = __atomic_load_n (&cat->ckpt_dropped, __ATOMIC_RELAXED);
  return 0;
}
