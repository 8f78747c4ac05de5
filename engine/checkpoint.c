/* Cairn engine, layer "catalog": continuous checkpoints (DESIGN §2.7, in
 * the spirit of NILFS2).
 *
 * Design note.
 *
 * Every commit that changed a volume is a checkpoint of that volume: the
 * volume's state at the end of the generation stays readable, as VOL@#GEN
 * or VOL@TIME, without anyone having asked for it.  A checkpoint is one
 * more reason of the pin that keeps a state (catalog-snap.c), so the whole
 * space model of reclaim.c applies unchanged: what overwrites take from a
 * checkpointed state goes on the volume's deadlist, and dropping a
 * checkpoint frees exactly what only it kept (RC-3).
 *
 * Invariants (tests cite them as CK-n):
 *  CK-1  A checkpoint of volume V at generation G exists exactly when pin
 *        (V, G) has its checkpoint flag, and then its record (RK_CKPT) and
 *        its time index item (RK_CKPTTIME) exist too: the three change in
 *        the same freeze.
 *  CK-2  The freeze of G takes a checkpoint of every volume whose tree it
 *        froze (the tree's root was born in G, and no change since left
 *        it dirty) and whose checkpoints are on, after the catalog request
 *        it carries and the deletes it settles: a request that changes a
 *        tree in the freeze (a shrink punches it) frees the nodes of the
 *        root frozen before it, born in G, so no pin may hold that root.
 *        Such a tree's state becomes a checkpoint with the next commit
 *        that changes it.  A snapshot or clone taken in G pins the same
 *        root as the checkpoint.  Hidden and partial volumes take none.
 *  CK-3  A checkpoint is dropped only in a freeze, under tlock, and never
 *        while a handle has its state open (a lease: an export, a send or
 *        a clone reading it); a snapshot or a clone at the same generation
 *        keeps the state after its checkpoint goes (other pin reasons).
 *  CK-4  Snapshots are never collected: the collector drops only the
 *        checkpoint reason, by the policy like any other checkpoint's, and
 *        a snapshot or clone at the same generation keeps the state.
 *  CK-5  Deleting a volume drops its checkpoints in the same freeze (the
 *        ones open stay until their handles close, as snapshots deleted
 *        while open do), so a volume is never kept hidden by its own
 *        history.
 *
 * Settings.  "checkpoints" (on | off) and "retention" (the policy's text,
 * retention.h) are kept per volume as properties without ':' (so no user
 * property clashes), and as pool defaults in RK_CONFIG items
 * "ckpt.checkpoints" and "ckpt.retention".  A volume without its own
 * setting follows the pool's.  A pool without one takes checkpoints when
 * it was made to (FEATURE_COMPAT_CKPT_NEW: `cairn mkpool` and `cairnd
 * --create` make every pool so), and none when it was made before
 * checkpoints existed, so that such a pool goes on using its space as it
 * did until its operator turns them on.  The policy without a setting is
 * RET_POLICY_DEFAULT (keep every checkpoint for an hour).
 * "commit-interval" is the pool's alone (RK_CONFIG "ckpt.commit-interval",
 * a duration of 1 s to 1 h, POOL_COMMIT_INTERVAL_MS without one): how
 * often the commit thread commits while volumes change, and so how far
 * apart checkpoints are at most; a server's own commit-interval= option
 * overrides it for as long as that server runs (pool_start_committer).
 * "space-threshold" is the pool's alone too (RK_CONFIG
 * "ckpt.space-threshold", 1% to 50%, CKPT_PRESSURE without one): the share
 * of the data space under which the collector drops checkpoints beyond
 * the policy.  A write that finds the pool full gives space back whatever
 * the threshold (volume.c).
 *
 * Collection.  The collector (ckpt_collect) reads a volume's checkpoints
 * outside any freeze, marks them with retention_apply on the pool's clock,
 * and submits the ones to drop in batches (REQ_CKPT_DROP); the freeze
 * checks each again (CK-3) before it drops it.  It runs in the reaper's
 * thread once a minute while checkpoints exist, and at once when the
 * pool's free space falls under its threshold (then, beyond the policy,
 * the oldest checkpoints that no snapshot or lease holds go first, until
 * the free space is back over it).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint-int.h"


/* ---------------------------------------------------------------- records */

/* The key of a checkpoint's time index item. */
void
ckpt_time_key (uint8_t key[CKPT_KEY_TIME_LEN], uint64_t id, uint64_t ctime,
               uint64_t gen)
{
  key[0] = RK_CKPTTIME;
  put_be64 (key + 1, id);
  put_be64 (key + 9, ctime);
  put_be64 (key + 17, gen);
}

/* Decode a checkpoint record of (id, gen), range-checked. */
int
ckptrec_decode (const uint8_t *v, size_t vl, uint64_t id, uint64_t gen,
                struct vol_checkpoint *c)
{
  if (vl != CKPTREC_LEN)
    return cairn_fail (-EIO, "corrupt checkpoint record (volume %" PRIu64
                       ", generation %" PRIu64 "): %zu bytes, not %u", id, gen,
                       vl, CKPTREC_LEN);
  memset (c, 0, sizeof *c);
  c->gen = gen;
  c->ctime = get_le64 (v);
  c->written = get_le64 (v + 8);
  c->size = get_le64 (v + 16);
  c->referenced = get_le64 (v + 24) * BLOCK_SIZE;
  return 0;
}

uint64_t
ckpt_guid (struct catalog *cat, uint64_t id, uint64_t gen)
{
  uint8_t in[16 + 8 + 8 + 4], out[SHA256_LEN];
  uint64_t guid;

  pool_uuid (cat->pool, in);
  put_le64 (in + 16, id);
  put_le64 (in + 24, gen);
  memcpy (in + 32, "ckpt", 4);
  sha256 (in, sizeof in, out);
  guid = get_le64 (out);
  return guid ? guid : 1;     /* a GUID is never 0 */
}

int
ckpt_stat (struct catalog *cat, uint64_t id, uint64_t gen,
           struct vol_info *info)
{
  struct vol_checkpoint c;
  int r = ckpt_read (cat, id, gen, &c);

  if (r < 0)
    return r;
  info->snap[0] = '\0';
  info->gen = gen;
  info->ctime = c.ctime;
  info->size = c.size;
  info->referenced = c.referenced;
  info->guid = ckpt_guid (cat, id, gen);
  info->is_snapshot = true;
  info->readonly = true;
  return 0;
}

/* Read the checkpoint record of (id, gen): -ENOENT when there is none. */
int
ckpt_read (struct catalog *cat, uint64_t id, uint64_t gen,
           struct vol_checkpoint *c)
{
  uint8_t key[17], val[CKPTREC_LEN];
  size_t vl;
  int r;

  cat_key (key, RK_CKPT, id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &vl);
  return r < 0 ? r : ckptrec_decode (val, vl, id, gen, c);
}

/* Write the records of a new checkpoint of vs at gen (in the freeze). */
static int
ckpt_records_put (struct catalog *cat, struct volstate *vs, uint64_t gen,
                  uint64_t ctime, uint64_t written)
{
  uint8_t key[CKPT_KEY_TIME_LEN], val[CKPTREC_LEN], gv[8];
  int r;

  put_le64 (val, ctime);
  put_le64 (val + 8, written);
  put_le64 (val + 16, vs->size);
  put_le64 (val + 24,
            (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED));
  cat_key (key, RK_CKPT, vs->id, gen);
  r = cat_root_put (cat, key, 17, val, sizeof val);
  ckpt_time_key (key, vs->id, ctime, gen);
  put_le64 (gv, gen);
  if (r == 0)
    r = cat_root_put (cat, key, sizeof key, gv, sizeof gv);
  return r;
}

/* Delete the records of checkpoint (id, gen), which must exist. */
int
ckpt_records_del (struct catalog *cat, uint64_t id, uint64_t gen)
{
  uint8_t key[CKPT_KEY_TIME_LEN];
  struct vol_checkpoint c;
  int r = ckpt_read (cat, id, gen, &c);

  if (r < 0)
    return r;
  cat_key (key, RK_CKPT, id, gen);
  r = cat_root_del (cat, key, 17);
  ckpt_time_key (key, id, c.ctime, gen);
  if (r == 0)
    r = cat_root_del (cat, key, sizeof key);
  return r;
}

/* ---------------------------------------------------------------- settings */

/* The root-tree key of setting name of volume id (0: the pool's default):
 * a property without ':' of the volume, or the pool's RK_CONFIG
 * "ckpt.NAME"; returns its length.
 */
static size_t
setting_key (uint8_t key[1 + 8 + 32], uint64_t id, const char *name)
{
  size_t nlen = strlen (name);

  if (id) {
    key[0] = RK_PROP;
    put_be64 (key + 1, id);
    memcpy (key + 9, name, nlen);
    return 9 + nlen;
  }
  key[0] = RK_CONFIG;
  memcpy (key + 1, "ckpt.", 5);
  memcpy (key + 6, name, nlen);
  return 6 + nlen;
}

/* Read a setting of volume id (id 0: the pool's default) into buf; -ENOENT
 * when it is not set.
 */
static int
setting_get (struct catalog *cat, uint64_t id, const char *name, char *buf,
             size_t bufsz)
{
  uint8_t key[1 + 8 + 32];
  size_t klen = setting_key (key, id, name), vl;
  int r;

  r = cat_root_get (cat, key, klen, buf, bufsz - 1, &vl);
  if (r == 0)
    buf[vl] = '\0';
  return r;
}

/* Store (value non-NULL) or remove a setting of volume id (0: the pool's
 * default), in the freeze.
 */
int
setting_put (struct catalog *cat, uint64_t id, const char *name,
             const char *value)
{
  uint8_t key[1 + 8 + 32];
  size_t klen = setting_key (key, id, name);
  int r;

  if (value)
    return cat_root_put (cat, key, klen, value, strlen (value));
  r = cat_root_del (cat, key, klen);
  return r == -ENOENT ? 0 : r;
}

/* Parse "on" / "off". */
int
parse_onoff (const char *value, int *on)
{
  if (strcmp (value, "on") == 0)
    *on = 1;
  else if (strcmp (value, "off") == 0)
    *on = 0;
  else
    return cairn_fail (-EINVAL, "checkpoints=%s: give on or off", value);
  return 0;
}

/* The "checkpoints" setting of volume id (0: the pool) as 1, 0 or -1
 * (not set); a stored value that does not parse counts as not set.
 */
static int
onoff_get (struct catalog *cat, uint64_t id, int *on)
{
  char buf[16];
  int r = setting_get (cat, id, "checkpoints", buf, sizeof buf);

  *on = -1;
  if (r == -ENOENT)
    return 0;
  if (r < 0)
    return r;
  if (parse_onoff (buf, on) < 0)
    *on = -1;
  return 0;
}

/* The retention policy of volume id (0: the pool's default), with its own
 * setting, the pool's, or the default; *own says whether it has its own.
 */
int
policy_get (struct catalog *cat, uint64_t id, struct ret_policy *p, bool *own)
{
  char buf[RET_POLICY_TEXT_MAX + 1];
  int r = -ENOENT;

  *own = false;
  *p = RET_POLICY_DEFAULT;
  if (id) {
    r = setting_get (cat, id, "retention", buf, sizeof buf);
    *own = r == 0;
  }
  if (r == -ENOENT)
    r = setting_get (cat, 0, "retention", buf, sizeof buf);
  if (r == -ENOENT)
    return 0;
  if (r == 0)
    r = retention_decode (p, buf, strlen (buf));
  return r;
}

/* The pool's default "checkpoints" when none is stored: on in a pool
 * made to take them (FEATURE_COMPAT_CKPT_NEW), off in one made before.
 */
int
pool_default (struct catalog *cat)
{
  return pool_has_compat (cat->pool, FEATURE_COMPAT_CKPT_NEW) ? 1 : 0;
}

int
parse_interval (const char *value, uint64_t *secsp)
{
  int r = retention_parse_duration (value, secsp);

  if (r == 0 && *secsp >= 1 && *secsp <= CKPT_INTERVAL_MAX)
    return 0;
  return cairn_fail (-EINVAL, "commit-interval '%s': give a duration from "
                     "1s to %us (\"5s\", \"30s\", \"2m\")", value,
                     CKPT_INTERVAL_MAX);
}

int
interval_get (struct catalog *cat, uint64_t *secsp, bool *own)
{
  char buf[RET_DURATION_MAX + 1];
  int r = setting_get (cat, 0, "commit-interval", buf, sizeof buf);

  *own = r == 0 && parse_interval (buf, secsp) == 0;
  if (!*own)
    *secsp = POOL_COMMIT_INTERVAL_MS / 1000;
  return r == -ENOENT ? 0 : r;
}

int
parse_threshold (const char *value, unsigned *pctp)
{
  size_t len = strlen (value), i;
  unsigned v = 0;

  if (len > 0 && value[len - 1] == '%')
    len--;
  for (i = 0; i < len && i < 3 && value[i] >= '0' && value[i] <= '9'; i++)
    v = v * 10 + (unsigned) (value[i] - '0');
  if (len > 0 && i == len && v >= 1 && v <= CKPT_PRESSURE_MAX) {
    *pctp = v;
    return 0;
  }
  return cairn_fail (-EINVAL, "space-threshold '%s': give a share of the "
                     "pool's space from 1%% to %u%% (\"5%%\")", value,
                     CKPT_PRESSURE_MAX);
}

int
threshold_get (struct catalog *cat, unsigned *pctp, bool *own)
{
  char buf[16];
  int r = setting_get (cat, 0, "space-threshold", buf, sizeof buf);

  *own = r == 0 && parse_threshold (buf, pctp) == 0;
  if (!*own)
    *pctp = CKPT_PRESSURE;
  return r == -ENOENT ? 0 : r;
}

int
pool_settings_apply (struct catalog *cat)
{
  uint64_t secs;
  unsigned pct;
  bool own;
  int r = interval_get (cat, &secs, &own);

  if (r == 0) {
    pool_set_commit_interval (cat->pool, (unsigned) secs * 1000);
    r = threshold_get (cat, &pct, &own);
  }
  if (r == 0)
    __atomic_store_n (&cat->ckpt_threshold, pct, __ATOMIC_RELAXED);
  return r;
}

/* Load the checkpoint settings when the catalog loads. */
int
ckpt_load (struct catalog *cat)
{
  int r = pool_settings_apply (cat);

  if (r == 0)
    r = onoff_get (cat, 0, &cat->ckpt_default);

  if (cat->ckpt_default < 0)
    cat->ckpt_default = pool_default (cat);

  for (size_t i = 0; r == 0 && i < cat->nvols; i++)
    r = onoff_get (cat, cat->vols[i]->id, &cat->vols[i]->ckpt_setting);
  return r;
}

/* Does volume vs take checkpoints? */
bool
ckpt_enabled (const struct catalog *cat, const struct volstate *vs)
{
  int on = vs->ckpt_setting >= 0 ? vs->ckpt_setting : cat->ckpt_default;

  return on > 0;
}

/* ---------------------------------------------------------------- taking */

/* Take the checkpoints of generation gen (CK-2; in the freeze). */
int
ckpt_take (struct catalog *cat, uint64_t gen)
{
  int64_t now = pool_now (cat->pool);
  int r = 0;

  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < cat->nvols && r == 0; i++) {
    struct volstate *vs = cat->vols[i];
    uint64_t written = __atomic_exchange_n (&vs->gen_written, 0,
                                            __ATOMIC_RELAXED);
    struct btree_root root;

    if (!vs_visible (vs) || !ckpt_enabled (cat, vs) || vs->tree == NULL)
      continue;
    btree_get_root (vs->tree, &root);
    if (btree_is_dirty (vs->tree) || root.bp.birth != gen)
      continue;
    r = ckpt_records_put (cat, vs, gen, now < 0 ? 0 : (uint64_t) now, written);
    if (r == 0)
      r = pin_add (cat, vs, gen, &root, PIN_CKPT);
    if (r == 0) {
      cat->ckpt_any = true;
      pool_need_feature (cat->pool, FEATURE_INCOMPAT_CKPT);
    }
  }
  pthread_mutex_unlock (&cat->tlock);
  if (r == 0 && cat->ckpt_any &&
      (now - cat->ckpt_collected >= CKPT_COLLECT_PERIOD ||
       ckpt_space_low (cat))) {
    __atomic_store_n (&cat->ckpt_due, true, __ATOMIC_RELEASE);
    cat->kick = true;
  }
  return r;
}

/* ---------------------------------------------------------------- dropping */

/* Drop checkpoint (vs, gen) unless a handle has it open (CK-3: tlock held,
 * in the freeze); *dropped says whether it went.  -ENOENT: no such
 * checkpoint.
 */
static int
ckpt_drop_locked (struct catalog *cat, struct volstate *vs, uint64_t gen,
                  bool *dropped)
{
  struct open_pin *op = cat_open_pin (cat, vs->id, gen);
  struct pinrec pr;
  int r;

  *dropped = false;
  if (op && op->opens > 0)
    return 0;
  r = cat_read_pin (cat, vs->id, gen, &pr);
  if (r == 0 && !pr.ckpt)
    r = -ENOENT;
  if (r == 0)
    r = ckpt_records_del (cat, vs->id, gen);
  if (r == 0)
    r = pin_release (cat, vs, gen, PIN_CKPT);
  *dropped = r == 0;
  return r;
}


/* cat_foreach_prefix callback: collect a checkpoint's generation. */
int
genvec_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
             size_t vl)
{
  struct genvec *gv = opaque;
  struct vol_checkpoint c;
  int r;

  if (kl != 17)
    return cairn_fail (-EIO, "corrupt checkpoint key (%zu bytes)", kl);
  r = ckptrec_decode (v, vl, get_be64 (k + 1), get_be64 (k + 9), &c);
  if (r < 0)
    return r;
  if (c.ctime < gv->since || c.ctime > gv->until)
    return 0;
  if (gv->n == gv->cap) {
    size_t cap = gv->cap ? gv->cap * 2 : 64;
    uint64_t *ng = realloc (gv->gen, cap * sizeof *ng);
    int64_t *nt;

    if (ng == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing checkpoints");
    gv->gen = ng;
    nt = realloc (gv->time, cap * sizeof *nt);
    if (nt == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing checkpoints");
    gv->time = nt;
    gv->cap = cap;
  }
  gv->gen[gv->n] = c.gen;
  gv->time[gv->n++] = (int64_t) c.ctime;
  return 0;
}

/* Read the checkpoints of volume id with a time in [since, until]. */
int
genvec_read (struct catalog *cat, uint64_t id, struct genvec *gv)
{
  uint8_t key[9];

  key[0] = RK_CKPT;
  put_be64 (key + 1, id);
  return cat_foreach_prefix (cat, key, 9, genvec_item, gv);
}

/* Free what genvec_read gathered. */
void
genvec_free (struct genvec *gv)
{
  free (gv->gen);
  free (gv->time);
}

/* Drop every checkpoint of vs that no handle has open (CK-5; in the
 * freeze).  The ones open stay, and go when their last handle closes
 * (cat_settle calls this again for a hidden volume).
 */
int
ckpt_drop_all (struct catalog *cat, struct volstate *vs)
{
  struct genvec gv = { .until = UINT64_MAX };
  int r = genvec_read (cat, vs->id, &gv);

  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; r == 0 && i < gv.n; i++) {
    bool dropped;

    r = ckpt_drop_locked (cat, vs, gv.gen[i], &dropped);
  }
  pthread_mutex_unlock (&cat->tlock);
  genvec_free (&gv);
  return r;
}

/* Apply a REQ_CKPT_DROP: drop the checkpoints req->data names of volume id
 * req->size, passing over those that went meanwhile or are open (CK-3).
 */
int
apply_ckpt_drop (struct catalog *cat, struct cat_request *req)
{
  const uint64_t *gens = req->data;
  struct volstate *vs;
  int r = 0;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, req->size);
  req->out_id = 0;
  for (size_t i = 0; vs && r == 0 && i < req->nvols; i++) {
    bool dropped = false;

    r = ckpt_drop_locked (cat, vs, gens[i], &dropped);
    if (r == -ENOENT)
      r = 0;
    req->out_id += dropped;
  }
  pthread_mutex_unlock (&cat->tlock);
  return r;
}

/* Submit the drop of n checkpoints of volume id; *droppedp counts those
 * that went.
 */
int
ckpt_submit_drop (struct cairn_pool *pool, uint64_t id, uint64_t *gens,
                  size_t n, uint64_t *droppedp)
{
  for (size_t i = 0; i < n; i += CKPT_DROP_BATCH) {
    struct cat_request req = {
      .kind = REQ_CKPT_DROP, .size = id, .data = gens + i,
      .nvols = n - i < CKPT_DROP_BATCH ? n - i : CKPT_DROP_BATCH,
    };
    int r = cat_submit (pool, &req);

    if (r < 0)
      return r;
    *droppedp += req.out_id;
  }
  return 0;
}

/* ---------------------------------------------------------------- collecting */

/* Mark the checkpoints of vs by its policy at now into a malloc'd array
 * (protected: a handle open on it, a lease).  A checkpoint whose state a
 * snapshot or a clone also pins follows the policy like any other: when it
 * goes, only its reason does (CK-4), and the state stays for the others.
 */
static int
ckpt_mark (struct catalog *cat, uint64_t id, int64_t now,
           struct ret_item **itemsp, size_t *np)
{
  struct genvec gv = { .until = UINT64_MAX };
  struct ret_policy pol;
  struct ret_item *items = NULL;
  bool own;
  int r = policy_get (cat, id, &pol, &own);

  if (r == 0)
    r = genvec_read (cat, id, &gv);
  if (r == 0 && gv.n && (items = calloc (gv.n, sizeof *items)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory marking checkpoints");
  for (size_t i = 0; r == 0 && i < gv.n; i++) {
    struct open_pin *op;

    items[i].gen = gv.gen[i];
    items[i].time = gv.time[i];
    pthread_mutex_lock (&cat->tlock);
    op = cat_open_pin (cat, id, gv.gen[i]);
    items[i].protect = op && op->opens > 0;
    pthread_mutex_unlock (&cat->tlock);
  }
  if (r == 0)
    r = retention_apply (&pol, now, items, gv.n);
  genvec_free (&gv);
  if (r < 0) {
    free (items);
    return r;
  }
  *itemsp = items;
  *np = gv.n;
  return 0;
}

/* Prune volume id by its policy (the collector's core); fn may be NULL. */
int
ckpt_prune_vs (struct catalog *cat, uint64_t id, bool dry_run,
               int (*fn) (void *opaque, uint64_t gen, int64_t ctime,
                          const char *mark),
               void *opaque, uint64_t *droppedp)
{
  struct ret_item *items = NULL;
  uint64_t *gens = NULL;
  size_t n = 0, ndrop = 0;
  int r = ckpt_mark (cat, id, pool_now (cat->pool), &items, &n);

  if (r == 0 && n && (gens = malloc (n * sizeof *gens)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory pruning checkpoints");
  for (size_t i = 0; r == 0 && i < n; i++) {
    if (fn)
      r = fn (opaque, items[i].gen, items[i].time,
              retention_mark_name (items[i].mark));
    if (items[i].mark == RET_REMOVE)
      gens[ndrop++] = items[i].gen;
  }
  free (items);
  if (r == 0 && !dry_run)
    r = ckpt_submit_drop (cat->pool, id, gens, ndrop, droppedp);
  free (gens);
  return r;
}

/* The ids of the visible volumes (a copy: requests change the table). */
int
visible_ids (struct catalog *cat, uint64_t **idsp, size_t *np)
{
  uint64_t *ids;
  size_t n = 0;

  pthread_mutex_lock (&cat->tlock);
  ids = malloc ((cat->nvols + 1) * sizeof *ids);
  for (size_t i = 0; ids && i < cat->nvols; i++)
    if (vs_visible (cat->vols[i]))
      ids[n++] = cat->vols[i]->id;
  pthread_mutex_unlock (&cat->tlock);
  if (ids == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  *idsp = ids;
  *np = n;
  return 0;
}

/* Run the collector over every volume (the reaper's thread, or a caller):
 * each volume's policy.
 */
int
ckpt_collect (struct catalog *cat)
{
  uint64_t *ids = NULL, dropped = 0;
  size_t n = 0;
  int r = visible_ids (cat, &ids, &n);

  /* Space first, when it is short (the policy may keep what is needed). */
  if (r == 0 && ckpt_space_low (cat))
    r = ckpt_relieve (cat, NULL, false, &dropped);

  cat->ckpt_collected = pool_now (cat->pool);
  /* A volume deleted meanwhile has no checkpoints left (CK-5): its
   * records are simply not found.
   */
  for (size_t i = 0; r == 0 && i < n; i++)
    r = ckpt_prune_vs (cat, ids[i], false, NULL, NULL, &dropped);
  free (ids);
  __atomic_add_fetch (&cat->ckpt_dropped, dropped, __ATOMIC_RELAXED);
  return r;
}

/* ---------------------------------------------------------------- pressure */

/* Is the pool's free space under the collector's threshold (the pool's
 * space-threshold, CKPT_PRESSURE per cent of its data space unless set;
 * ckpt_load sets it before anything can ask), counting what waits for a
 * commit as free?
 */
bool
ckpt_space_low (struct catalog *cat)
{
  struct space_stats ss;
  unsigned pct = __atomic_load_n (&cat->ckpt_threshold, __ATOMIC_RELAXED);

  space_stats (pool_space (cat->pool), &ss);
  return (ss.free + ss.pending) * 100 < ss.total * pct;
}


/* cat_foreach_prefix callback over the time index: collect a batch. */
int
batch_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
            size_t vl)
{
  struct ckbatch *b = opaque;

  (void) v;
  if (kl != CKPT_KEY_TIME_LEN || vl != 8)
    return cairn_fail (-EIO, "corrupt checkpoint time index item (key %zu, "
                       "value %zu bytes)", kl, vl);
  b->ctime[b->n] = get_be64 (k + 9);
  b->gen[b->n++] = get_be64 (k + 17);
  return b->n == CKPT_RELIEVE_BATCH;
}

/* Is checkpoint (id, gen) kept by more than the policy: a snapshot or
 * clone at its generation, or a handle open on it?
 */
static int
ckpt_kept (struct catalog *cat, uint64_t id, uint64_t gen, bool *kept)
{
  struct pinrec pr;
  struct open_pin *op;
  int r = cat_read_pin (cat, id, gen, &pr);

  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  op = cat_open_pin (cat, id, gen);
  *kept = pr.snaps + pr.clones > 0 || (op && op->opens > 0);
  pthread_mutex_unlock (&cat->tlock);
  return 0;
}

/* The oldest checkpoints of volume id that nothing but the policy keeps,
 * up to a batch, into out (oldest first).
 */
static int
oldest_unkept (struct catalog *cat, uint64_t id, struct ckbatch *out)
{
  uint8_t key[CKPT_KEY_TIME_LEN];
  uint64_t from_t = 0, from_g = 0;
  int r = 0;

  out->n = 0;
  while (r == 0 && out->n < CKPT_RELIEVE_BATCH) {
    struct ckbatch b = { .n = 0 };

    ckpt_time_key (key, id, from_t, from_g);
    r = cat_foreach_prefix_from (cat, key, sizeof key, 9, batch_item, &b);
    for (size_t i = 0; r == 0 && i < b.n && out->n < CKPT_RELIEVE_BATCH; i++) {
      bool kept;

      r = ckpt_kept (cat, id, b.gen[i], &kept);
      if (r == 0 && !kept) {
        out->gen[out->n] = b.gen[i];
        out->ctime[out->n++] = b.ctime[i];
      }
    }
    if (b.n < CKPT_RELIEVE_BATCH)
      break;                    /* the end of the index */
    from_t = b.ctime[b.n - 1];
    from_g = b.gen[b.n - 1] + 1;
  }
  return r;
}

/* Give space back under pressure: drop the oldest checkpoints that no
 * snapshot, clone or handle keeps, beyond the policy, oldest first across
 * the volumes (only vs's when only is not NULL: its quota is what is
 * full), until the pool's free space is over the threshold (for a quota:
 * one batch).  With reclaim, what they held is freed at once (a writer
 * waits for it); the reaper's own thread, which holds the step lock, frees
 * it in its next steps instead.  *dropped counts them.
 */
int
ckpt_relieve (struct catalog *cat, struct volstate *only, bool reclaim,
              uint64_t *dropped)
{
  int r = 0;

  *dropped = 0;
  while (r == 0 && (only || ckpt_space_low (cat))) {
    struct ckbatch best = { .n = 0 }, b;
    uint64_t best_id = 0, got = 0, *ids = NULL;
    size_t nids = 0;

    if (only) {
      best_id = only->id;
      r = oldest_unkept (cat, only->id, &best);
    }
    else {
      r = visible_ids (cat, &ids, &nids);
      for (size_t i = 0; r == 0 && i < nids; i++) {
        r = oldest_unkept (cat, ids[i], &b);
        if (r == 0 && b.n && (best.n == 0 || b.ctime[0] < best.ctime[0])) {
          best = b;
          best_id = ids[i];
        }
      }
      free (ids);
    }
    if (r < 0 || best.n == 0)
      break;                  /* nothing left that may go */
    r = ckpt_submit_drop (cat->pool, best_id, best.gen, best.n, &got);
    *dropped += got;
    /* What they kept is free once reclaimed and committed (TX-2). */
    if (r == 0 && reclaim)
      r = vol_reclaim_wait (cat->pool, NULL, NULL);
    if (r == 0)
      r = pool_commit (cat->pool);
    if (only || got == 0 || !reclaim)
      break;
  }
  if (*dropped) {
    __atomic_add_fetch (&cat->ckpt_pressure_dropped, *dropped,
                        __ATOMIC_RELAXED);
    __atomic_add_fetch (&cat->ckpt_pressure_events, 1, __ATOMIC_RELAXED);
    __atomic_store_n (&cat->ckpt_pressure_last, pool_now (cat->pool),
                      __ATOMIC_RELAXED);
  }
  return r;
}

