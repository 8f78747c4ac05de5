/* Cairn engine, layer "catalog": volumes, snapshots and clones.  This file
 * is its core: loading and freeing the catalog, the table of volume
 * states, the freeze hook that applies requests, and the requests that
 * create, rename, resize and clone volumes, roll them back and set their
 * properties and quotas.
 *
 * Every change to the catalog is a request applied inside the freeze of a
 * commit (the pool's freeze hook), with all mutations held out: so each
 * change is atomic with one generation, a snapshot is exactly the state at
 * the end of the generation its request ends, and a clone of a live
 * volume starts from a consistent point.  A change is durable when its
 * function returns.  Requests are serialised (oplock); the table of
 * in-memory volume states has its own short lock (tlock).
 *
 * CAT-1  A change is all or nothing.  A request makes every check that can
 *        refuse it before its first tree change; a failure after that (no
 *        memory, an I/O error) fails the commit and latches the pool
 *        failed (catalog_freeze), so no half made change reaches the disk.
 *
 * The rest of the catalog, sharing catalog-int.h:
 *   catalog-rec.c   names, root-tree keys and helpers, the volume and
 *                   snapshot records (encode, decode, check) and listing a
 *                   volume's snapshots, damaged records included
 *   catalog-snap.c  pins, snapshots and deletes, with the design note on
 *                   deletes deferred while clients have the state open
 *   catalog-api.c   the public calls: argument checks, listings and stat
 *   catalog-recv.c  the requests of a receive (partial volumes, and
 *                   publishing with or without a rollback), with their
 *                   design note
 *   catalog-rollback.c  rolling a volume back to one of its snapshots
 *                   (reverse promotion, design note VR-n there)
 *   catalog-damage.c  volume records that do not decode: the catalog
 *                   loads every other volume, and that one is listed as
 *                   damaged, cannot be used or deleted, and keeps its name
 *                   and its data (design note DV-n there)
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "catalog-int.h"

/* ---------------------------------------------------------------- table */

/* Free a volume state. */
static void
volstate_free (struct volstate *vs)
{
  if (vs == NULL)
    return;
  pthread_mutex_destroy (&vs->pend_lock);
  pthread_mutex_destroy (&vs->rmw_lock);
  free (vs->pending);
  free (vs);
}

/* Add a volume state to the table (tlock held). */
static int
table_add (struct catalog *cat, struct volstate *vs)
{
  if (cat->nvols == cat->cap) {
    size_t cap = cat->cap ? cat->cap * 2 : 16;
    struct volstate **nv = realloc (cat->vols, cap * sizeof *nv);

    if (nv == NULL)
      return cairn_fail (-ENOMEM, "out of memory in the catalog");
    cat->vols = nv;
    cat->cap = cap;
  }
  vs->cat = cat;
  cat->vols[cat->nvols++] = vs;
  return 0;
}

/* Remove a volume state from the table and free it (tlock held). */
void
table_remove (struct catalog *cat, struct volstate *vs)
{
  for (size_t i = 0; i < cat->nvols; i++)
    if (cat->vols[i] == vs) {
      cat->vols[i] = cat->vols[--cat->nvols];
      break;
    }
  volstate_free (vs);
}


/* Find a visible volume by name (tlock held). */
struct volstate *
cat_find_name (struct catalog *cat, const char *name)
{
  for (size_t i = 0; i < cat->nvols; i++)
    if (vs_visible (cat->vols[i]) && strcmp (cat->vols[i]->name, name) == 0)
      return cat->vols[i];
  return NULL;
}

/* Find the partial volume of a receive into name (tlock held). */
struct volstate *
cat_find_partial (struct catalog *cat, const char *name)
{
  for (size_t i = 0; i < cat->nvols; i++)
    if ((cat->vols[i]->flags & (VOLF_PARTIAL | VOLF_HIDDEN)) == VOLF_PARTIAL &&
        strcmp (cat->vols[i]->name, name) == 0)
      return cat->vols[i];
  return NULL;
}

/* Find a volume by id, hidden ones included (tlock held). */
struct volstate *
cat_find_id_locked (struct catalog *cat, uint64_t id)
{
  for (size_t i = 0; i < cat->nvols; i++)
    if (cat->vols[i]->id == id)
      return cat->vols[i];
  return NULL;
}

/* ---------------------------------------------------------------- requests */

static int apply (struct catalog *cat, struct cat_request *req, uint64_t gen);

/* Fail the commit being frozen because what failed (the message says
 * why): the pool latches failed (TX-4).
 */
static int
freeze_fails (const char *what)
{
  char msg[512];

  snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
  return cairn_fail (-EIO, "%s (%s): nothing since the last commit is "
                     "committed, and the pool is read-only until it is "
                     "reopened, which brings back its last committed state",
                     what, msg);
}

/* The freeze hook: deadlists, the pending request, settled deletes,
 * changed records.
 *
 * A request checks everything it can before it changes anything, so that
 * a refusal leaves the catalog as it was.  What can still fail after the
 * first change is a lack of memory or an I/O error; the change is then
 * half made, and committing it could leave, say, a volume without its
 * name.  So when a request fails after one of its tree changes began
 * (nodecache_changes moved), the hook fails the commit: the pool latches
 * failed (TX-4), nothing of the change reaches the disk, and reopening
 * the pool brings back its last committed state (CAT-1).  The same holds
 * for the hook's own work: deadlist entries taken off their queue (their
 * blocks would leak), a settle that released some pins and not others
 * (the next one would release them twice), and a volume record that
 * would keep a held count its deadlist no longer matches.  Only a settle
 * that failed before changing anything is left for the next commit.
 */
static int
catalog_freeze (struct cairn_pool *pool, void *opaque, uint64_t gen)
{
  struct catalog *cat = opaque;
  /* Take the request: once the freeze is over, its submitter may return
   * and the request (on its stack) be gone.
   */
  struct cat_request *req = __atomic_exchange_n (&cat->req, NULL,
                                                 __ATOMIC_ACQ_REL);
  uint64_t changes;
  int r;

  if (req && req->done)
    req = NULL;
  cat->applying = req;
  r = reclaim_flush_pending (cat);

  if (r < 0) {
    r = freeze_fails ("the blocks that recent writes freed under snapshots "
                      "could not be recorded");
    if (req)
      req->result = r;
  }
  else if (req) {
    changes = nodecache_changes (pool_cache (pool));
    cairn_error_clear ();
    req->result = apply (cat, req, gen);
    if (req->result < 0 && nodecache_changes (pool_cache (pool)) != changes)
      r = req->result = freeze_fails ("a catalog change failed half-way");
  }
  /* The snapshot is in this generation: its volumes' writers may go on,
   * into the next one (they wait for txn_lock until this freeze ends).
   */
  if (req) {
    snap_barrier_lower (cat, req);
    if (req->result < 0)
      snprintf (req->errmsg, sizeof req->errmsg, "%s", cairn_errmsg ());
    req->done = true;
  }
  if (r < 0)
    goto out;
  if (__atomic_exchange_n (&cat->settle, false, __ATOMIC_ACQ_REL)) {
    changes = nodecache_changes (pool_cache (pool));
    if (cat_settle (cat, gen) < 0) {
      if (nodecache_changes (pool_cache (pool)) != changes) {
        r = freeze_fails ("finishing the deletes that waited for their "
                          "last client failed half-way");
        goto out;
      }
      __atomic_store_n (&cat->settle, true, __ATOMIC_RELEASE); /* next time */
    }
  }
  /* What the request and the settle took out of trees under pins (a
   * shrink's punch) joins the deadlists in this generation too: nothing
   * else would commit it.
   */
  if (reclaim_flush_pending (cat) < 0) {
    r = freeze_fails ("the blocks that this commit's catalog change freed "
                      "under snapshots could not be recorded");
    goto out;
  }
  /* The checkpoints of this generation: after the request and the
   * settle, so that each pins a root no later change of this freeze
   * frees (CK-2).
   */
  if (ckpt_take (cat, gen) < 0) {
    r = freeze_fails ("the checkpoints of this commit could not be "
                      "recorded");
    goto out;
  }
  /* Work this freeze left for the background (a commit by the timer may
   * settle a delete: no request follows to start the reaper).  It starts
   * now and waits for the commit before its first step.
   */
  if (cat->kick) {
    cat->kick = false;
    reaper_kick (cat);
  }
  pthread_mutex_lock (&cat->tlock);
  /* Last, so that every change this freeze made to the deadlists is in the
   * held counts the records keep.
   */
  for (size_t i = 0; i < cat->nvols && r == 0; i++) {
    struct volstate *vs = cat->vols[i];
    char what[128 + VOL_NAME_MAX];

    if ((__atomic_load_n (&vs->rec_dirty, __ATOMIC_RELAXED) ||
         __atomic_load_n (&vs->held, __ATOMIC_RELAXED) != vs->held_stored) &&
        volrec_store (cat, vs) < 0) {
      snprintf (what, sizeof what, "the record of volume '%s' could not be "
                "updated", vs->name);
      r = freeze_fails (what);
    }
  }
  pthread_mutex_unlock (&cat->tlock);
 out:
  cat->applying = NULL;
  return r;
}

/* Apply a catalog change in the next commit and wait until it is durable. */
int
cat_submit (struct cairn_pool *pool, struct cat_request *req)
{
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->oplock);
  r = txn_begin (pool);
  if (r < 0)
    goto out;
  req->done = false;
  __atomic_store_n (&cat->req, req, __ATOMIC_RELEASE);
  txn_mark_dirty (pool);
  txn_end (pool);
  r = pool_commit (pool);
  /* A commit that failed before its freeze left the request there. */
  __atomic_store_n (&cat->req, NULL, __ATOMIC_RELEASE);
  /* The request's own failure says more than the commit's (which another
   * thread may have run).
   */
  if (req->done && req->result < 0)
    r = cairn_fail (req->result, "%s", req->errmsg);
  else if (r == 0 && !req->done)
    r = cairn_fail (-EIO, "internal error: the catalog change was not applied");
 out:
  pthread_mutex_unlock (&cat->oplock);
  return r;
}

/* Free the catalog (pool_attach destructor). */
static void
catalog_destroy (void *opaque)
{
  struct catalog *cat = opaque;

  if (cat == NULL)
    return;
  scrub_free (cat);
  reaper_stop (cat);
  reaper_free (cat);
  for (size_t i = 0; i < cat->nvols; i++)
    volstate_free (cat->vols[i]);
  free (cat->vols);
  free (cat->damaged);
  free (cat->open_pins);
  xstats_free (cat->xstats);
  pthread_mutex_destroy (&cat->oplock);
  pthread_mutex_destroy (&cat->tlock);
  pthread_mutex_destroy (&cat->barrier_lock);
  pthread_cond_destroy (&cat->barrier_cond);
  free (cat->barrier_ids);
  free (cat);
}

/* Stop background work before the pool's last commit (pool_attach). */
static void
catalog_quiesce (void *opaque)
{
  scrub_stop (opaque);
  reaper_stop (opaque);
}

/* Load the catalog of a pool (once), with the state of every volume whose
 * record decodes; the others are kept as damaged (catalog-damage.c).
 */
int
catalog_get (struct cairn_pool *pool, struct catalog **catp)
{
  struct btree *root = pool_root_tree (pool);
  struct btree_cursor *cur = NULL;
  struct catalog *cat;
  uint8_t key[9], val[8];
  uint64_t replayed = 0;
  size_t vlen;
  int r;

  pool_attach_lock (pool);
  cat = pool_attached (pool);
  if (cat) {
    pool_attach_unlock (pool);
    *catp = cat;
    return 0;
  }
  cat = calloc (1, sizeof *cat);
  if (cat == NULL) {
    pool_attach_unlock (pool);
    return cairn_fail (-ENOMEM, "out of memory loading the catalog");
  }
  cat->pool = pool;
  pthread_mutex_init (&cat->oplock, NULL);
  pthread_mutex_init (&cat->tlock, NULL);
  pthread_mutex_init (&cat->barrier_lock, NULL);
  pthread_cond_init (&cat->barrier_cond, NULL);
  r = reaper_new (cat);
  if (r < 0) {
    pool_attach_unlock (pool);
    catalog_destroy (cat);
    return r;
  }

  /* Every volume record, in id order. */
  r = btree_cursor_new (root, &cur);
  if (r < 0)
    goto fail;
  btree_rdlock (root);
  key[0] = RK_VOL;
  for (r = btree_cursor_seek (cur, key, 1); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;
    struct volstate *vs = NULL;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl < 1 || k[0] != RK_VOL)
      break;
    r = volkey_check (kl);
    if (r == 0)
      r = volrec_decode (v, vl, get_be64 (k + 1), &vs);
    if (r == 0 && (r = table_add (cat, vs)) < 0)
      volstate_free (vs);
    /* Without its record a volume's name, size and origin are unknown:
     * that volume is out of service, the others are not (DV-1).
     */
    if (r == -EIO)
      r = cat_damaged_add (cat, k, kl);
    if (r < 0)
      break;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  if (r == 0 || r == -ENOENT)   /* past the last record */
    r = cat_damaged_names (cat);
  if (r < 0)
    goto fail;
  for (size_t i = 0; i < cat->nvols; i++) {
    struct volstate *vs = cat->vols[i];

    r = pool_tree_open (pool, vs->id, &vs->tree);
    if (r == 0)
      r = reclaim_max_pin (cat, vs->id, &vs->max_pin);
    if (r < 0)
      goto fail;
    btree_set_free_fn (vs->tree, reclaim_free_fn, vs);
  }

  /* The deadlist tree, created with the first volume's commit. */
  key[0] = RK_CONFIG;
  memcpy (key + 1, "deadlist", 8);
  r = cat_root_get (cat, key, 9, val, sizeof val, &vlen);
  if (r == 0)
    r = pool_tree_open (pool, get_le64 (val), &cat->deadlist);
  if (r < 0 && r != -ENOENT)
    goto fail;
  for (size_t i = 0; i < cat->nvols; i++) {
    if (cat->vols[i]->held_stored >= 0)
      continue;                 /* the record has it (VOLREC_HELD) */
    r = reclaim_count_held (cat, cat->vols[i]);
    if (r < 0)
      goto fail;
  }
  r = reaper_load_jobs (cat);
  if (r == 0)
    r = ckpt_load (cat);
  if (r == 0)
    r = scrub_load (cat);
  if (r < 0)
    goto fail;
  /* Flushed writes the last commit did not hold, before anyone else can
   * write (txn-log.c, IL-6); committed once the catalog is attached.
   */
  r = vol_log_replay (cat, &replayed);
  if (r < 0)
    goto fail;
  pool_attach (pool, cat, catalog_destroy, catalog_freeze, catalog_quiesce);
  pool_attach_unlock (pool);
  *catp = cat;
  if (replayed && (r = pool_commit (pool)) < 0)
    return r;
  reaper_kick (cat);          /* deletes a restart interrupted go on */
  cat_settle_soon (cat);      /* nothing is open after a restart */
  return 0;

 fail:
  pool_attach_unlock (pool);
  catalog_destroy (cat);
  return r;
}

/* The deadlist tree, created on first use (inside the freeze). */
static int
ensure_deadlist (struct catalog *cat)
{
  uint8_t key[9], val[8];
  uint64_t id;
  int r;

  if (cat->deadlist)
    return 0;
  r = pool_tree_create (cat->pool, &id, &cat->deadlist);
  if (r < 0)
    return r;
  key[0] = RK_CONFIG;
  memcpy (key + 1, "deadlist", 8);
  put_le64 (val, id);
  return cat_root_put (cat, key, 9, val, 8);
}

/* ---------------------------------------------------------------- apply */

/* Look a visible volume up by name, with a message when absent (or
 * damaged, DV-3).
 */
int
need_volume (struct catalog *cat, const char *name, struct volstate **vsp)
{
  struct volstate *vs = NULL;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, name);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cat_no_volume (cat, name, name);
  *vsp = vs;
  return 0;
}

/* A new volume state for tree t (the request fills in the rest). */
struct volstate *
volstate_new (uint64_t id, struct btree *t, const char *name, uint64_t size,
              uint64_t gen)
{
  struct volstate *vs = calloc (1, sizeof *vs);

  if (vs == NULL)
    return NULL;
  pthread_mutex_init (&vs->pend_lock, NULL);
  pthread_mutex_init (&vs->rmw_lock, NULL);
  vs->id = id;
  vs->tree = t;
  snprintf (vs->name, sizeof vs->name, "%s", name);
  vs->size = size;
  vs->ctime = (uint64_t) time (NULL);
  vs->create_gen = gen;
  vs->held_stored = -1;
  vs->ckpt_setting = -1;      /* the pool's default */
  return vs;
}

/* Give a new volume its records and its place in the table (it is freed
 * on failure).  A partial volume gets no name item.
 */
int
publish_volume (struct catalog *cat, struct volstate *vs)
{
  uint8_t key[1 + VOL_NAME_MAX], idv[8];
  int r;

  btree_set_free_fn (vs->tree, reclaim_free_fn, vs);
  put_be64 (idv, vs->id);
  r = volrec_store (cat, vs);
  if (r == 0 && !(vs->flags & VOLF_PARTIAL))
    r = cat_root_put (cat, key, name_key (key, RK_NAME, NULL, vs->name), idv, 8);
  if (r < 0) {
    volstate_free (vs);
    return r;
  }
  pthread_mutex_lock (&cat->tlock);
  r = table_add (cat, vs);
  pthread_mutex_unlock (&cat->tlock);
  return r;
}

/* Create a volume. */
int
apply_create (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  struct volstate *vs;
  struct btree *t;
  uint64_t id;
  int r = cat_name_free (cat, req->name);

  if (r == 0)
    r = ensure_deadlist (cat);
  if (r == 0)
    r = pool_tree_create (cat->pool, &id, &t);
  if (r < 0)
    return r;
  vs = volstate_new (id, t, req->name, req->size, gen);
  if (vs == NULL)
    return cairn_fail (-ENOMEM, "out of memory creating a volume");
  if (req->flags & REQF_PARTIAL)
    vs->flags |= VOLF_PARTIAL;
  req->out_id = id;
  return publish_volume (cat, vs);
}

/* Rename a volume. */
static int
apply_rename (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[1 + VOL_NAME_MAX], idv[8];
  struct volstate *vs = NULL;
  int r = need_volume (cat, req->name, &vs);

  if (r == 0)
    r = cat_name_free (cat, req->name2);
  if (r < 0)
    return r;
  r = cat_root_del (cat, key, name_key (key, RK_NAME, NULL, vs->name));
  put_be64 (idv, vs->id);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_NAME, NULL, req->name2), idv, 8);
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  snprintf (vs->name, sizeof vs->name, "%s", req->name2);
  pthread_mutex_unlock (&cat->tlock);
  return volrec_store (cat, vs);
}

/* Resize a volume; shrinking discards the mapping past the new end. */
static int
apply_resize (struct catalog *cat, struct cat_request *req)
{
  struct volstate *vs = NULL;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (req->size < vs->size) {
    uint64_t first = DIV_ROUND_UP (req->size, BLOCK_SIZE);
    uint64_t end = DIV_ROUND_UP (vs->size, BLOCK_SIZE);

    if (!req->flag)
      return cairn_fail (-EINVAL, "shrinking '%s' from %" PRIu64 " to %" PRIu64
                         " bytes discards the data past the new end: use "
                         "--force", vs->name, vs->size, req->size);
    if (vs->opens > 0)
      return cairn_fail (-EBUSY, "volume '%s' is open: disconnect its clients "
                         "before shrinking it", vs->name);
    if (end > first) {
      r = vol_punch (vs, first, end - first);
      if (r < 0)
        return r;
    }
  }
  vs->size = req->size;
  return volrec_store (cat, vs);
}

/* Set or clear the read-only flag. */
static int
apply_readonly (struct catalog *cat, struct cat_request *req)
{
  struct volstate *vs = NULL;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (req->flag)
    vs->flags |= VOLF_READONLY;
  else
    vs->flags &= ~(uint64_t) VOLF_READONLY;
  return volrec_store (cat, vs);
}

/* Set or remove a user property. */
static int
apply_prop (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[1 + 8 + VOL_PROP_KEY_MAX];
  struct volstate *vs = NULL;
  size_t klen;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  key[0] = RK_PROP;
  put_be64 (key + 1, vs->id);
  klen = strlen (req->name2);
  memcpy (key + 9, req->name2, klen);
  if (req->snap == NULL) {
    r = cat_root_del (cat, key, 9 + klen);
    if (r == -ENOENT)
      r = cairn_fail (-ENOENT, "volume '%s' has no property '%s'", vs->name,
                      req->name2);
    return r;
  }
  return cat_root_put (cat, key, 9 + klen, req->snap, strlen (req->snap));
}

/* Delete every property of a volume (it is being destroyed). */
int
drop_props (struct catalog *cat, uint64_t id)
{
  struct btree *root = pool_root_tree (cat->pool);

  for (;;) {
    uint8_t key[1 + 8 + VOL_PROP_KEY_MAX], found[1 + 8 + VOL_PROP_KEY_MAX];
    struct btree_cursor *cur;
    size_t flen = 0;
    int r;

    key[0] = RK_PROP;
    put_be64 (key + 1, id);
    r = btree_cursor_new (root, &cur);
    if (r < 0)
      return r;
    btree_rdlock (root);
    r = btree_cursor_seek (cur, key, 9);
    if (r == 0) {
      const uint8_t *k, *v;
      size_t kl, vl;

      btree_cursor_item (cur, &k, &kl, &v, &vl);
      if (kl >= 9 && kl <= sizeof found && k[0] == RK_PROP && get_be64 (k + 1) == id) {
        memcpy (found, k, kl);
        flen = kl;
      }
    }
    btree_unlock (root);
    btree_cursor_free (cur);
    if (r < 0 && r != -ENOENT)
      return r;
    if (flen == 0)
      return 0;
    r = cat_root_del (cat, found, flen);
    if (r < 0)
      return r;
  }
}

/* User properties gathered by copy_props. */
struct prop_copy {
  struct prop {
    uint8_t key[1 + 8 + VOL_PROP_KEY_MAX], val[VOL_PROP_VALUE_MAX];
    size_t klen, vlen;
  } *p;
  size_t n, cap;
};

static int
prop_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
           size_t vl)
{
  struct prop_copy *pc = opaque;

  if (kl > sizeof pc->p->key || vl > sizeof pc->p->val ||
      !memchr (k + 9, ':', kl - 9))
    return 0;                 /* internal (or malformed): not copied */
  if (pc->n == pc->cap) {
    size_t cap = pc->cap ? pc->cap * 2 : 8;
    struct prop *np = realloc (pc->p, cap * sizeof *np);

    if (np == NULL)
      return cairn_fail (-ENOMEM, "out of memory copying properties");
    pc->p = np;
    pc->cap = cap;
  }
  memcpy (pc->p[pc->n].key, k, kl);
  memcpy (pc->p[pc->n].val, v, vl);
  pc->p[pc->n].klen = kl;
  pc->p[pc->n++].vlen = vl;
  return 0;
}

/* Give volume to_id a copy of from_id's user properties (not the internal
 * ones, whose keys have no ':').
 */
int
copy_props (struct catalog *cat, uint64_t from_id, uint64_t to_id)
{
  struct prop_copy pc = { NULL, 0, 0 };
  uint8_t key[9];
  int r;

  key[0] = RK_PROP;
  put_be64 (key + 1, from_id);
  r = cat_foreach_prefix (cat, key, 9, prop_item, &pc);
  for (size_t i = 0; i < pc.n && r == 0; i++) {
    put_be64 (pc.p[i].key + 1, to_id);
    r = cat_root_put (cat, pc.p[i].key, pc.p[i].klen, pc.p[i].val,
                      pc.p[i].vlen);
  }
  free (pc.p);
  return r;
}

/* Set a volume's quota. */
static int
apply_quota (struct catalog *cat, struct cat_request *req)
{
  struct volstate *vs = NULL;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  vs->quota = req->size;
  return volrec_store (cat, vs);
}

/* Split "VOL@SNAP", "VOL@TIME" or "VOL@#GEN" into its volume and the
 * pinned state.
 */
static int
resolve_point (struct catalog *cat, const char *src, uint64_t gen,
               struct volstate **vsp, uint64_t *pgen, struct btree_root *root,
               uint64_t *referenced)
{
  char vol[VOL_NAME_MAX + 1];
  const char *at = strchr (src, '@');
  struct volstate *vs = NULL;
  int r;

  if (at == NULL || (size_t) (at - src) > VOL_NAME_MAX) {
    r = need_volume (cat, src, &vs);
    if (r < 0)
      return r;
    btree_get_root (vs->tree, root);
    *pgen = gen;
    *referenced = (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED);
    *vsp = vs;
    return 0;
  }
  memcpy (vol, src, (size_t) (at - src));
  vol[at - src] = '\0';
  r = need_volume (cat, vol, &vs);
  if (r < 0)
    return r;
  r = cat_lookup_point (cat, vs->id, vol, at + 1, pgen);
  if (r < 0)
    return r;
  r = cat_lookup_pin (cat, vs->id, *pgen, NULL, NULL, root);
  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "generation %" PRIu64 " of volume '%s' is not "
                       "kept (no snapshot or clone pins it)", *pgen, vol);
  if (r < 0)
    return r;
  {
    /* No record: a generation only clones pin. */
    struct vol_info info;

    r = cat_read_snap (cat, vs->id, *pgen, &info);
    if (r < 0 && r != -ENOENT)
      return cat_snap_unreadable (r, src);
    *referenced = r == 0 ? info.referenced / BLOCK_SIZE : 0;
  }
  *vsp = vs;
  return 0;
}

/* Clone a volume or a pinned state of it. */
int
apply_clone (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  struct btree_root root;
  struct volstate *src = NULL, *vs;
  uint64_t pgen = 0, referenced = 0, id;
  struct btree *t;
  int r = req->flags & REQF_PARTIAL ? 0 : cat_name_free (cat, req->name2);

  if (r == 0)
    r = resolve_point (cat, req->name, gen, &src, &pgen, &root, &referenced);
  if (r < 0)
    return r;
  r = pool_tree_create_from (cat->pool, &root, &id, &t);
  if (r < 0)
    return r;
  r = pin_add (cat, src, pgen, &root, PIN_CLONE);
  if (r < 0)
    return r;
  vs = volstate_new (id, t, req->name2, src->size, gen);
  if (vs == NULL)
    return cairn_fail (-ENOMEM, "out of memory creating a clone");
  if (strchr (req->name, '@')) {
    struct vol_info info;
    if (cat_read_snap (cat, src->id, pgen, &info) == 0)
      vs->size = info.size;
  }
  vs->origin_id = src->id;
  vs->origin_gen = pgen;
  vs->referenced = (int64_t) referenced;
  if (req->flags & REQF_PARTIAL)
    vs->flags |= VOLF_PARTIAL;
  req->out_id = id;
  return publish_volume (cat, vs);
}

/* Apply a request inside the freeze of generation gen. */
static int
apply (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  switch (req->kind) {
  case REQ_CREATE: return apply_create (cat, req, gen);
  case REQ_DELETE: return apply_delete (cat, req, gen);
  case REQ_RENAME: return apply_rename (cat, req);
  case REQ_RESIZE: return apply_resize (cat, req);
  case REQ_READONLY: return apply_readonly (cat, req);
  case REQ_SNAP: return apply_snap (cat, req, gen);
  case REQ_SNAP_DELETE:
  case REQ_SNAP_RENAME: return apply_snap_change (cat, req);
  case REQ_CLONE: return apply_clone (cat, req, gen);
  case REQ_PROP: return apply_prop (cat, req);
  case REQ_QUOTA: return apply_quota (cat, req);
  case REQ_ROLLBACK: return apply_rollback (cat, req, gen);
  case REQ_PARTIAL_CREATE: return apply_partial_create (cat, req, gen);
  case REQ_PARTIAL_SAVE: return apply_partial_save (cat, req);
  case REQ_PARTIAL_PUBLISH: return apply_partial_publish (cat, req, gen);
  case REQ_PARTIAL_ABORT: return apply_partial_abort (cat, req, gen);
  case REQ_REAP: return reaper_apply (cat, req, gen);
  case REQ_CKPT_DROP: return apply_ckpt_drop (cat, req);
  case REQ_CKPT_SET: return apply_ckpt_set (cat, req);
  case REQ_CKPT_PROMOTE: return apply_ckpt_promote (cat, req, gen);
  case REQ_SCRUB_SAVE: return scrub_apply_save (cat, req);
  }
  return cairn_fail (-EINVAL, "unknown catalog request %d", req->kind);
}
