/* Cairn engine, layer "catalog": volumes, snapshots and clones.
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
 * Pins (DESIGN §2.4): a volume's state at generation g stays readable while
 * a pin record (RK_PIN, id, g) exists; it counts the snapshots and clones
 * that need it and holds the root of that state.  Removing the last reason
 * for a pin hands its unique blocks to reclaim.c.
 *
 * The requests of a receive (partial volumes, and publishing with or
 * without a rollback) are in catalog-recv.c, with their design note.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <sys/random.h>
#include <time.h>

#include "catalog-int.h"

/* ---------------------------------------------------------------- names */

/* Check a volume or snapshot name against DESIGN §3. */
int
vol_check_name (const char *name)
{
  size_t len = strlen (name), comp = 0;

  if (len == 0)
    return cairn_fail (-EINVAL, "empty name");
  if (len > VOL_NAME_MAX)
    return cairn_fail (-EINVAL, "name '%.40s...' is %zu bytes, at most %d are "
                       "allowed", name, len, VOL_NAME_MAX);
  for (size_t i = 0; i <= len; i++) {
    char c = name[i];

    if (c == '/' || c == '\0') {
      if (comp == 0)
        return cairn_fail (-EINVAL, "name '%s' has an empty component "
                           "(leading, trailing or double '/')", name);
      if ((comp == 1 && name[i - 1] == '.') ||
          (comp == 2 && name[i - 1] == '.' && name[i - 2] == '.'))
        return cairn_fail (-EINVAL, "name '%s' has a '.' or '..' component", name);
      comp = 0;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return cairn_fail (-EINVAL, "name '%s' contains '%c': use letters, digits, "
                         "'.', '_' and '-', with '/' between components "
                         "('@' and '#' are reserved)", name, c);
    comp++;
  }
  return 0;
}

/* A root tree key: type, a big-endian id and optionally a generation. */
void
cat_key (uint8_t *key, unsigned type, uint64_t id, uint64_t gen)
{
  key[0] = (uint8_t) type;
  put_be64 (key + 1, id);
  put_be64 (key + 9, gen);
}

/* A key of a type byte followed by an optional id and a name. */
size_t
name_key (uint8_t *key, unsigned type, const uint64_t *id, const char *name)
{
  size_t n = 1, len = strlen (name);

  key[0] = (uint8_t) type;
  if (id) {
    put_be64 (key + 1, *id);
    n += 8;
  }
  memcpy (key + n, name, len);
  return n + len;
}

/* ---------------------------------------------------------------- records */

/* Encode a volume record. */
static size_t
volrec_encode (const struct volstate *vs, uint8_t *p)
{
  size_t len = strlen (vs->name);

  put_le64 (p, vs->id);
  put_le64 (p + 8, vs->size);
  put_le64 (p + 16, vs->ctime);
  put_le64 (p + 24, vs->create_gen);
  put_le64 (p + 32, vs->flags);
  put_le64 (p + 40, vs->origin_id);
  put_le64 (p + 48, vs->origin_gen);
  put_le64 (p + 56, (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED));
  put_le64 (p + 64, vs->quota);
  put_le16 (p + 72, (uint16_t) len);
  memcpy (p + VOLREC_FIXED, vs->name, len);
  put_le64 (p + VOLREC_FIXED + len,
            (uint64_t) __atomic_load_n (&vs->held, __ATOMIC_RELAXED));
  return VOLREC_FIXED + len + VOLREC_HELD;
}

/* The checks that volume and snapshot records share: fixed fields, then a
 * u16 name length (the last two bytes of them) and the name, then
 * optionally tail more bytes.  What is wrong goes in why ("" if nothing).
 */
static void
rec_check_lengths (const uint8_t *p, size_t len, size_t fixed, size_t tail,
                   char *why, size_t size)
{
  size_t nlen = len >= fixed ? get_le16 (p + fixed - 2) : 0;

  *why = '\0';
  if (len < fixed)
    snprintf (why, size, "%zu bytes, shorter than its %zu bytes of fixed "
              "fields", len, fixed);
  else if (nlen == 0 || nlen > VOL_NAME_MAX)
    snprintf (why, size, "name length %zu is not 1 to %d", nlen, VOL_NAME_MAX);
  else if (fixed + nlen != len && tail == 0)
    snprintf (why, size, "%zu bytes, but its name length %zu makes %zu", len,
              nlen, fixed + nlen);
  else if (fixed + nlen != len && fixed + nlen + tail != len)
    snprintf (why, size, "%zu bytes, but its name length %zu makes %zu or %zu",
              len, nlen, fixed + nlen, fixed + nlen + tail);
}

/* Check the volume record of volume id (its key's): -EIO with a message
 * that names it and says what is wrong (loading the catalog, and fsck).
 */
int
volrec_check (const uint8_t *p, size_t len, uint64_t id)
{
  char why[128];

  rec_check_lengths (p, len, VOLREC_FIXED, VOLREC_HELD, why, sizeof why);
  if (*why == '\0' && get_le64 (p) != id)
    snprintf (why, sizeof why, "it names tree %" PRIu64, get_le64 (p));
  if (*why)
    return cairn_fail (-EIO, "corrupt volume record (volume %" PRIu64 "): %s",
                       id, why);
  return 0;
}

/* Decode volume id's record into a new volume state. */
static int
volrec_decode (const uint8_t *p, size_t len, uint64_t id,
               struct volstate **vsp)
{
  struct volstate *vs = NULL;
  size_t nlen;
  int r = volrec_check (p, len, id);

  if (r < 0)
    return r;
  nlen = get_le16 (p + 72);
  vs = calloc (1, sizeof *vs);
  if (vs == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the catalog");
  vs->id = get_le64 (p);
  vs->size = get_le64 (p + 8);
  vs->ctime = get_le64 (p + 16);
  vs->create_gen = get_le64 (p + 24);
  vs->flags = get_le64 (p + 32);
  vs->origin_id = get_le64 (p + 40);
  vs->origin_gen = get_le64 (p + 48);
  vs->referenced = (int64_t) get_le64 (p + 56);
  vs->quota = get_le64 (p + 64);
  memcpy (vs->name, p + VOLREC_FIXED, nlen);
  vs->name[nlen] = '\0';
  vs->held_stored = volrec_held (p, len);
  if (vs->held_stored >= 0)
    vs->held = vs->held_stored;
  pthread_mutex_init (&vs->pend_lock, NULL);
  pthread_mutex_init (&vs->rmw_lock, NULL);
  *vsp = vs;
  return 0;
}

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

/* Encode a snapshot record; returns its length. */
static size_t
snaprec_encode (const struct snaprec *sr, uint8_t *p)
{
  size_t len = strlen (sr->name);

  put_le64 (p, sr->ctime);
  put_le64 (p + 8, sr->referenced);
  put_le64 (p + 16, sr->size);
  put_le64 (p + 24, sr->guid);
  put_le16 (p + 32, (uint16_t) len);
  memcpy (p + SNAPREC_FIXED, sr->name, len);
  return SNAPREC_FIXED + len;
}

/* Decode the snapshot record of (id, gen), checking every field; what is
 * wrong goes in the message, which names the record as fsck does.
 */
int
snaprec_decode (const uint8_t *p, size_t len, uint64_t id, uint64_t gen,
                struct snaprec *sr)
{
  size_t nlen = len >= SNAPREC_FIXED ? get_le16 (p + 32) : 0;
  char why[128];

  rec_check_lengths (p, len, SNAPREC_FIXED, 0, why, sizeof why);
  if (*why == '\0' && get_le64 (p + 24) == 0)
    snprintf (why, sizeof why, "its GUID is 0");
  if (*why == '\0') {
    memcpy (sr->name, p + SNAPREC_FIXED, nlen);
    sr->name[nlen] = '\0';
    if (strlen (sr->name) != nlen || vol_check_name (sr->name) < 0)
      snprintf (why, sizeof why, "its name is not a valid snapshot name");
  }
  if (*why)
    return cairn_fail (-EIO, "corrupt snapshot record (volume %" PRIu64
                       ", generation %" PRIu64 "): %s", id, gen, why);
  sr->ctime = get_le64 (p);
  sr->referenced = get_le64 (p + 8);
  sr->size = get_le64 (p + 16);
  sr->guid = get_le64 (p + 24);
  return 0;
}

/* A new snapshot GUID: random, never 0. */
static int
new_guid (uint64_t *guidp)
{
  do {
    if (getrandom (guidp, sizeof *guidp, 0) != sizeof *guidp)
      return cairn_fail (-errno, "getrandom: %m");
  } while (*guidp == 0);
  return 0;
}

/* Root tree helpers (the caller holds txn or is in the freeze). */
int
cat_root_put (struct catalog *cat, const uint8_t *key, size_t klen,
          const void *val, size_t vlen)
{
  struct btree *root = pool_root_tree (cat->pool);
  int r;

  btree_wrlock (root);
  r = btree_insert (root, key, klen, val, vlen, BTREE_RESERVE);
  btree_unlock (root);
  return r;
}

int
cat_root_del (struct catalog *cat, const uint8_t *key, size_t klen)
{
  struct btree *root = pool_root_tree (cat->pool);
  int r;

  btree_wrlock (root);
  r = btree_delete (root, key, klen);
  btree_unlock (root);
  return r;
}

int
cat_root_get (struct catalog *cat, const uint8_t *key, size_t klen, void *val,
          size_t vmax, size_t *vlen)
{
  struct btree *root = pool_root_tree (cat->pool);
  int r;

  btree_rdlock (root);
  r = btree_lookup (root, key, klen, val, vmax, vlen);
  btree_unlock (root);
  return r;
}

/* Write a volume's record. */
int
volrec_store (struct catalog *cat, struct volstate *vs)
{
  uint8_t key[17], val[VOLREC_FIXED + VOL_NAME_MAX + VOLREC_HELD];
  size_t len = volrec_encode (vs, val);
  int r;

  cat_key (key, RK_VOL, vs->id, 0);
  __atomic_store_n (&vs->rec_dirty, false, __ATOMIC_RELAXED);
  r = cat_root_put (cat, key, 9, val, len);
  if (r == 0) {
    vs->held_stored = (int64_t) get_le64 (val + len - VOLREC_HELD);
    pool_need_feature (cat->pool, FEATURE_INCOMPAT_VOLHELD);
  }
  return r;
}

/* Read a pin record. */
int
cat_lookup_pin (struct catalog *cat, uint64_t id, uint64_t gen,
                uint32_t *snaps, uint32_t *clones, struct btree_root *root)
{
  uint8_t key[17], val[PINREC_LEN];
  size_t len;
  int r;

  cat_key (key, RK_PIN, id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &len);
  if (r < 0)
    return r;
  if (len != PINREC_LEN)
    return cairn_fail (-EIO, "corrupt pin record (volume %" PRIu64 ", generation "
                       "%" PRIu64 ")", id, gen);
  if (snaps)
    *snaps = get_le32 (val);
  if (clones)
    *clones = get_le32 (val + 4);
  if (root) {
    blkptr_decode (val + 8, &root->bp);
    root->level = val[56];
  }
  return 0;
}

/* Add a reason to pin (id, gen) at root. */
static int
pin_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
         const struct btree_root *root, bool clone)
{
  uint8_t key[17], val[PINREC_LEN] = { 0 };
  uint32_t snaps = 0, clones = 0;
  struct btree_root old;
  int r = cat_lookup_pin (cat, vs->id, gen, &snaps, &clones, &old);

  if (r < 0 && r != -ENOENT)
    return r;
  if (r == 0)
    root = &old;
  if (clone)
    clones++;
  else
    snaps++;
  put_le32 (val, snaps);
  put_le32 (val + 4, clones);
  blkptr_encode (&root->bp, val + 8);
  val[56] = root->level;
  cat_key (key, RK_PIN, vs->id, gen);
  r = cat_root_put (cat, key, 17, val, sizeof val);
  if (r == 0 && gen > vs->max_pin)
    vs->max_pin = gen;
  return r;
}

/* Drop a reason to pin (id, gen); the last one frees what was unique. */
static int
pin_release (struct catalog *cat, struct volstate *vs, uint64_t gen, bool clone)
{
  uint8_t key[17], val[PINREC_LEN];
  uint32_t snaps, clones;
  struct btree_root root;
  int r = cat_lookup_pin (cat, vs->id, gen, &snaps, &clones, &root);

  if (r < 0)
    return r;
  if (clone)
    clones--;
  else
    snaps--;
  cat_key (key, RK_PIN, vs->id, gen);
  if (snaps + clones > 0) {
    memset (val, 0, sizeof val);
    put_le32 (val, snaps);
    put_le32 (val + 4, clones);
    blkptr_encode (&root.bp, val + 8);
    val[56] = root.level;
    return cat_root_put (cat, key, 17, val, sizeof val);
  }
  r = reclaim_pin_removed (cat, vs, gen);
  if (r == 0)
    r = cat_root_del (cat, key, 17);
  if (r == 0)
    r = reclaim_max_pin (cat, vs->id, &vs->max_pin);
  return r;
}

/* ---------------------------------------------------------------- table */

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
static void
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
static int settle (struct catalog *cat, uint64_t gen);

/* The freeze hook: deadlists, the pending request, changed records.
 *
 * A request checks everything it can before it changes anything, so that
 * a refusal leaves the catalog as it was.  What can still fail after the
 * first change is a lack of memory or an I/O error; the change is then
 * half made, and committing it could leave, say, a volume without its
 * name.  So when a request fails after one of its tree changes began
 * (nodecache_changes moved), the hook fails the commit: the pool latches
 * failed (TX-4), nothing of the change reaches the disk, and reopening
 * the pool brings back its last committed state (CAT-1).
 */
static int
catalog_freeze (struct cairn_pool *pool, void *opaque, uint64_t gen)
{
  struct catalog *cat = opaque;
  struct cat_request *req = cat->req && !cat->req->done ? cat->req : NULL;
  uint64_t changes;
  int r = reclaim_flush_pending (cat);

  if (r == 0 && req) {
    changes = nodecache_changes (pool_cache (pool));
    cairn_error_clear ();
    req->result = apply (cat, req, gen);
    if (req->result < 0 && nodecache_changes (pool_cache (pool)) != changes)
      r = req->result;        /* half made: CAT-1 */
  }
  if (r < 0) {
    char msg[sizeof req->errmsg / 2];

    snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
    r = cairn_fail (-EIO, "a catalog change failed half-way (%s): none of it "
                    "is committed, and the pool is read-only until it is "
                    "reopened, which brings back its last committed state",
                    msg);
    if (req)
      req->result = r;
  }
  if (req) {
    if (req->result < 0)
      snprintf (req->errmsg, sizeof req->errmsg, "%s", cairn_errmsg ());
    req->done = true;
  }
  if (r < 0)
    return r;
  if (__atomic_exchange_n (&cat->settle, false, __ATOMIC_ACQ_REL) &&
      settle (cat, gen) < 0)
    __atomic_store_n (&cat->settle, true, __ATOMIC_RELEASE);   /* next time */
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
  for (size_t i = 0; i < cat->nvols; i++) {
    struct volstate *vs = cat->vols[i];

    if ((__atomic_load_n (&vs->rec_dirty, __ATOMIC_RELAXED) ||
         __atomic_load_n (&vs->held, __ATOMIC_RELAXED) != vs->held_stored) &&
        volrec_store (cat, vs) < 0)
      break;      /* the record is rewritten at the next commit */
  }
  pthread_mutex_unlock (&cat->tlock);
  return 0;
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
  cat->req = req;
  txn_mark_dirty (pool);
  txn_end (pool);
  r = pool_commit (pool);
  cat->req = NULL;
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
  reaper_stop (cat);
  reaper_free (cat);
  for (size_t i = 0; i < cat->nvols; i++)
    volstate_free (cat->vols[i]);
  free (cat->vols);
  free (cat->open_pins);
  xstats_free (cat->xstats);
  pthread_mutex_destroy (&cat->oplock);
  pthread_mutex_destroy (&cat->tlock);
  free (cat);
}

/* Stop background work before the pool's last commit (pool_attach). */
static void
catalog_quiesce (void *opaque)
{
  reaper_stop (opaque);
}

/* Load the catalog of a pool (once), with every volume's state. */
int
catalog_get (struct cairn_pool *pool, struct catalog **catp)
{
  struct btree *root = pool_root_tree (pool);
  struct btree_cursor *cur = NULL;
  struct catalog *cat;
  uint8_t key[9], val[8];
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
    r = kl == 9 ? volrec_decode (v, vl, get_be64 (k + 1), &vs)
      : cairn_fail (-EIO, "corrupt volume record key (%zu bytes)", kl);
    if (r == 0 && (r = table_add (cat, vs)) < 0)
      volstate_free (vs);
    if (r < 0)
      break;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  if (r == -EIO) {
    /* Without a volume's record its name, size and origin are unknown:
     * nothing can be listed or served safely.
     */
    char why[512];

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    cairn_fail (r, "cannot load the catalog: %s; 'cairn fsck' gives details",
                why);
  }
  if (r < 0 && r != -ENOENT)
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
  if (r < 0)
    goto fail;
  pool_attach (pool, cat, catalog_destroy, catalog_freeze, catalog_quiesce);
  pool_attach_unlock (pool);
  *catp = cat;
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

/* Look a visible volume up by name, with a message when absent. */
int
need_volume (struct catalog *cat, const char *name, struct volstate **vsp)
{
  struct volstate *vs = NULL;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, name);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cairn_fail (-ENOENT, "no volume named '%s'", name);
  *vsp = vs;
  return 0;
}

/* Look a snapshot's generation up by name. */
int
cat_lookup_snap (struct catalog *cat, uint64_t id, const char *snap,
                 uint64_t *genp)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], val[8];
  size_t vlen;
  int r = cat_root_get (cat, key, name_key (key, RK_SNAPNAME, &id, snap), val,
                    sizeof val, &vlen);

  if (r == -ENOENT)
    return -ENOENT;
  if (r == 0 && vlen != 8)
    return cairn_fail (-EIO, "corrupt snapshot name record");
  if (r == 0)
    *genp = get_le64 (val);
  return r;
}

/* Read a snapshot record into info. */
int
cat_read_snap (struct catalog *cat, uint64_t id, uint64_t gen,
               struct vol_info *info)
{
  uint8_t key[17], val[SNAPREC_FIXED + VOL_NAME_MAX];
  struct snaprec sr;
  size_t vlen;
  int r;

  cat_key (key, RK_SNAP, id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &vlen);
  if (r == 0)
    r = snaprec_decode (val, vlen, id, gen, &sr);
  if (r < 0)
    return r;
  info->ctime = sr.ctime;
  info->referenced = sr.referenced * BLOCK_SIZE;
  info->size = sr.size;
  info->guid = sr.guid;
  snprintf (info->snap, sizeof info->snap, "%s", sr.name);
  info->gen = gen;
  info->is_snapshot = true;
  info->readonly = true;
  return 0;
}

/* Fail a use of snapshot export ("VOL@SNAP") whose record cat_read_snap
 * could not read (r, with its message), saying what to do.
 */
int
cat_snap_unreadable (int r, const char *export)
{
  char why[512];

  snprintf (why, sizeof why, "%s", cairn_errmsg ());
  if (r != -EIO)
    return r;
  return cairn_fail (r, "'%s' cannot be used: %s; 'cairn fsck' gives "
                     "details, 'cairn snapshot delete' removes it", export,
                     why);
}

/* A new volume state for tree t (the request fills in the rest). */
static struct volstate *
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
  return vs;
}

/* Give a new volume its records and its place in the table (it is freed
 * on failure).  A partial volume gets no name item.
 */
static int
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
  int r;

  if (cat_find_name (cat, req->name))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already", req->name);
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

/* ---------------------------------------------------------------- deferred deletes
 *
 * Deleting a snapshot or a volume that clients have open takes its name
 * away at once (nothing new can open it, listings no longer show it), but
 * what it holds stays readable, and a live volume writable, for the
 * handles already open until the last one closes:
 *
 *   snapshot  its records go; its pin keeps its reason, and an RK_DEFER
 *             record counts the reasons to drop once no handle has the
 *             pinned state open
 *   volume    its snapshots go as above, its name goes, and it is hidden
 *             (VOLF_HIDDEN) like a volume that clones still start from; it
 *             is destroyed once it has no handle and no pin left
 *
 * settle() does both in a freeze: when a handle closes on such a state
 * (cat_settle_soon) and at the first commit after the catalog loads, since
 * after a restart nothing is open.  Checking that a pin has no handle and
 * releasing it happen under tlock, and vol_open looks a pin up and counts
 * its handle under tlock too, so no handle can open a pin being released.
 */

/* Handles open on the pinned state (id, gen), or NULL (tlock held). */
struct open_pin *
cat_open_pin (struct catalog *cat, uint64_t id, uint64_t gen)
{
  for (size_t i = 0; i < cat->nopen_pins; i++)
    if (cat->open_pins[i].id == id && cat->open_pins[i].gen == gen)
      return &cat->open_pins[i];
  return NULL;
}

/* Count one more snapshot reason of pin (id, gen) to drop later. */
static int
defer_pin (struct catalog *cat, struct volstate *vs, uint64_t gen,
           struct open_pin *op)
{
  uint8_t key[17], val[4];
  size_t vlen;
  uint32_t n = 0;
  int r;

  cat_key (key, RK_DEFER, vs->id, gen);
  r = cat_root_get (cat, key, 17, val, sizeof val, &vlen);
  if (r == 0 && vlen == 4)
    n = get_le32 (val);
  else if (r != -ENOENT)
    return r < 0 ? r : cairn_fail (-EIO, "corrupt deferred-delete record");
  put_le32 (val, n + 1);
  op->deferred = true;
  return cat_root_put (cat, key, 17, val, 4);
}

/* Delete a snapshot by generation: its records, and its pin reason now, or
 * once no handle has it open.
 */
static int
drop_snapshot (struct catalog *cat, struct volstate *vs, uint64_t sgen,
               const char *snap)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX];
  struct open_pin *op;
  int r;

  cat_key (key, RK_SNAP, vs->id, sgen);
  r = cat_root_del (cat, key, 17);
  if (r == 0 && *snap)      /* "": a damaged record that no name names */
    r = cat_root_del (cat, key, name_key (key, RK_SNAPNAME, &vs->id, snap));
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  op = cat_open_pin (cat, vs->id, sgen);
  if (op && op->opens > 0)
    r = defer_pin (cat, vs, sgen, op);
  else
    r = pin_release (cat, vs, sgen, false);
  pthread_mutex_unlock (&cat->tlock);
  return r;
}

/* Free a snapshot list's arrays. */
void
snaplist_free (struct snaplist *sl)
{
  if (sl) {
    free (sl->gen);
    free (sl->name);
    free (sl->bad);
    free (sl);
  }
}

/* State of snap_name_of. */
struct name_find {
  uint64_t gen;
  char *name;
};

/* cat_foreach_prefix callback: the snapshot name item that names gen. */
static int
name_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
           size_t vl)
{
  struct name_find *nf = opaque;

  if (kl <= 9 || kl - 9 > VOL_NAME_MAX || vl != 8 || get_le64 (v) != nf->gen)
    return 0;
  memcpy (nf->name, k + 9, kl - 9);
  nf->name[kl - 9] = '\0';
  return 1;
}

/* The name that volume id's snapshot name index gives generation gen, ""
 * if none does: the name of a snapshot whose record is damaged.
 */
static int
snap_name_of (struct catalog *cat, uint64_t id, uint64_t gen,
              char name[VOL_NAME_MAX + 1])
{
  struct name_find nf = { gen, name };
  uint8_t key[17];

  *name = '\0';
  cat_key (key, RK_SNAPNAME, id, 0);
  return cat_foreach_prefix (cat, key, 9, name_item, &nf);
}

/* Grow a snapshot list to hold one more. */
static int
snaplist_grow (struct snaplist *sl)
{
  size_t cap = sl->cap ? sl->cap * 2 : 16;
  uint64_t *ng;
  char (*nn)[VOL_NAME_MAX + 1];
  bool *nb;

  if (sl->n < sl->cap)
    return 0;
  ng = realloc (sl->gen, cap * sizeof *ng);
  if (ng)
    sl->gen = ng;
  nn = ng ? realloc (sl->name, cap * sizeof *nn) : NULL;
  if (nn)
    sl->name = nn;
  nb = nn ? realloc (sl->bad, cap * sizeof *nb) : NULL;
  if (nb == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing snapshots");
  sl->bad = nb;
  sl->cap = cap;
  return 0;
}

int
list_snaps (struct catalog *cat, uint64_t id, struct snaplist *sl)
{
  struct btree *root = pool_root_tree (cat->pool);
  struct btree_cursor *cur;
  uint8_t key[17];
  int r;

  sl->n = 0;
  r = btree_cursor_new (root, &cur);
  if (r < 0)
    return r;
  cat_key (key, RK_SNAP, id, 0);
  btree_rdlock (root);
  for (r = btree_cursor_seek (cur, key, 17); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;
    struct snaprec sr;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl != 17 || k[0] != RK_SNAP || get_be64 (k + 1) != id)
      break;
    r = snaplist_grow (sl);
    if (r < 0)
      break;
    sl->gen[sl->n] = get_be64 (k + 9);
    sl->bad[sl->n] = snaprec_decode (v, vl, id, sl->gen[sl->n], &sr) < 0;
    if (sl->bad[sl->n])
      sl->name[sl->n][0] = '\0';
    else
      memcpy (sl->name[sl->n], sr.name, sizeof sr.name);
    sl->n++;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  if (r == -ENOENT)
    r = 0;
  /* Names of damaged records from the index, once the walk has let go of
   * the tree.
   */
  for (size_t i = 0; r == 0 && i < sl->n; i++)
    if (sl->bad[i])
      r = snap_name_of (cat, id, sl->gen[i], sl->name[i]);
  return r;
}

/* Call fn for each root-tree item whose key starts with prefix, in key
 * order, under the root tree's read lock (fn must not change the tree):
 * fn returns 0 to go on, > 0 to stop (not an error), < 0 to fail with
 * that error.
 */
int
cat_foreach_prefix (struct catalog *cat, const uint8_t *prefix, size_t plen,
                    int (*fn) (void *opaque, const uint8_t *key, size_t klen,
                               const uint8_t *val, size_t vlen),
                    void *opaque)
{
  struct btree *root = pool_root_tree (cat->pool);
  struct btree_cursor *cur;
  int fr = 0, r = btree_cursor_new (root, &cur);

  if (r < 0)
    return r;
  btree_rdlock (root);
  for (r = btree_cursor_seek (cur, prefix, plen); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl < plen || memcmp (k, prefix, plen) != 0)
      break;
    fr = fn (opaque, k, kl, v, vl);
    if (fr != 0)
      break;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  if (fr != 0)
    return fr < 0 ? fr : 0;
  return r == -ENOENT ? 0 : r;
}

/* State of cat_foreach_pin. */
struct pin_walk {
  int (*fn) (void *opaque, uint64_t gen, const uint8_t *rec, size_t len);
  void *opaque;
};

static int
pin_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
          size_t vl)
{
  struct pin_walk *pw = opaque;

  if (kl != 17)
    return 1;
  return pw->fn (pw->opaque, get_be64 (k + 9), v, vl) != 0;
}

/* Call fn for each pin record of volume id, oldest first, with its
 * generation and record; a non-zero return from fn stops the walk (and is
 * not an error: the walk then returns 0).
 */
int
cat_foreach_pin (struct catalog *cat, uint64_t id,
                 int (*fn) (void *opaque, uint64_t gen, const uint8_t *rec,
                            size_t len),
                 void *opaque)
{
  struct pin_walk pw = { fn, opaque };
  uint8_t key[17];

  cat_key (key, RK_PIN, id, 0);
  return cat_foreach_prefix (cat, key, 9, pin_item, &pw);
}

/* cat_foreach_pin callback: stop at the first pin. */
static int
any_pin (void *opaque, uint64_t gen, const uint8_t *rec, size_t len)
{
  bool *yes = opaque;

  (void) gen, (void) rec, (void) len;
  *yes = true;
  return 1;
}

/* Must some state of this volume stay: a clone's origin, or a snapshot
 * deleted while open?
 */
static int
has_pins (struct catalog *cat, uint64_t id, bool *yes)
{
  *yes = false;
  return cat_foreach_pin (cat, id, any_pin, yes);
}

int destroy_volume (struct catalog *cat, struct volstate *vs,
                           uint64_t gen);
static int drop_props (struct catalog *cat, uint64_t id);

/* Delete a volume nothing needs any more: its blocks are reclaimed in the
 * background (reaper.c); release its origin.
 */
int
destroy_volume (struct catalog *cat, struct volstate *vs, uint64_t gen)
{
  uint8_t key[17];
  uint64_t origin_id = vs->origin_id, origin_gen = vs->origin_gen;
  struct volstate *origin;
  int r;

  r = drop_props (cat, vs->id);
  if (r == 0)
    r = reaper_begin (cat, vs);
  cat_key (key, RK_VOL, vs->id, 0);
  if (r == 0)
    r = cat_root_del (cat, key, 9);
  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  origin = origin_id ? cat_find_id_locked (cat, origin_id) : NULL;
  table_remove (cat, vs);
  pthread_mutex_unlock (&cat->tlock);
  if (origin == NULL)
    return 0;
  r = pin_release (cat, origin, origin_gen, true);
  if (r == 0 && (origin->flags & VOLF_HIDDEN) && origin->opens == 0) {
    bool pins;
    r = has_pins (cat, origin->id, &pins);
    if (r == 0 && !pins)
      r = destroy_volume (cat, origin, gen);
  }
  return r;
}

/* Delete a volume (request). */
static int
apply_delete (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  uint8_t key[1 + VOL_NAME_MAX];
  struct snaplist *sl;
  struct volstate *vs = NULL;
  bool pins;
  int opens, r;

  r = need_volume (cat, req->name, &vs);
  if (r < 0)
    return r;
  sl = calloc (1, sizeof *sl);
  if (sl == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  r = list_snaps (cat, vs->id, sl);
  if (r == 0 && sl->n > 0 && !(req->flags & VOL_DELETE_RECURSIVE))
    r = cairn_fail (-EBUSY, "volume '%s' has %zu snapshot(s): delete them first "
                    "or delete recursively", vs->name, sl->n);
  for (size_t i = 0; r == 0 && i < sl->n; i++)
    r = drop_snapshot (cat, vs, sl->gen[i], sl->name[i]);
  snaplist_free (sl);
  if (r == 0)
    r = cat_root_del (cat, key, name_key (key, RK_NAME, NULL, vs->name));
  if (r == 0)
    r = has_pins (cat, vs->id, &pins);
  if (r < 0)
    return r;
  /* Hidden under tlock: from here no vol_open finds it, so the count of
   * handles read with it can only fall.
   */
  pthread_mutex_lock (&cat->tlock);
  vs->flags |= VOLF_HIDDEN;
  opens = vs->opens;
  pthread_mutex_unlock (&cat->tlock);
  if (pins || opens > 0)
    /* Clones still start from it, or clients have it open: keep it
     * hidden until the last of them goes (settle).
     */
    return volrec_store (cat, vs);
  return destroy_volume (cat, vs, gen);
}

/* An RK_DEFER record, read before acting on it. */
struct deferred {
  uint64_t id, gen;
  uint32_t n;
};

/* State of list_deferred. */
struct deferred_list {
  struct deferred *d;
  size_t max, n;
};

static int
deferred_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
               size_t vl)
{
  struct deferred_list *dl = opaque;

  if (kl != 17 || vl != 4)
    return cairn_fail (-EIO, "corrupt deferred-delete record (key %zu, value "
                       "%zu bytes)", kl, vl);
  dl->d[dl->n++] = (struct deferred) { get_be64 (k + 1), get_be64 (k + 9),
                                       get_le32 (v) };
  return dl->n == dl->max;
}

/* Read up to max RK_DEFER records. */
static int
list_deferred (struct catalog *cat, struct deferred *d, size_t max, size_t *np)
{
  struct deferred_list dl = { d, max, 0 };
  uint8_t key[1] = { RK_DEFER };
  int r = cat_foreach_prefix (cat, key, 1, deferred_item, &dl);

  *np = dl.n;
  return r;
}

/* Finish the deletes that waited for handles to close (see above). */
static int
settle (struct catalog *cat, uint64_t gen)
{
  struct deferred d[64];
  size_t n, kept = 0;
  bool again = true;
  int r;

  /* Snapshot pin reasons whose state nobody has open any more. */
  do {
    r = list_deferred (cat, d, ARRAY_SIZE (d), &n);
    for (size_t i = kept; r == 0 && i < n; i++) {
      struct volstate *vs;
      struct open_pin *op;
      uint8_t key[17];

      pthread_mutex_lock (&cat->tlock);
      vs = cat_find_id_locked (cat, d[i].id);
      op = cat_open_pin (cat, d[i].id, d[i].gen);
      if (vs == NULL)
        r = cairn_fail (-EIO, "deferred-delete record of unknown volume %"
                        PRIu64, d[i].id);
      else if (op && op->opens > 0)
        kept++;               /* still open: its close settles it */
      else {
        for (uint32_t j = 0; j < d[i].n && r == 0; j++)
          r = pin_release (cat, vs, d[i].gen, false);
        cat_key (key, RK_DEFER, d[i].id, d[i].gen);
        if (r == 0)
          r = cat_root_del (cat, key, 17);
        if (op)
          op->deferred = false;
      }
      pthread_mutex_unlock (&cat->tlock);
    }
  } while (r == 0 && n == ARRAY_SIZE (d) && kept < n);

  /* Hidden volumes with neither handles nor pins left. */
  while (r == 0 && again) {
    struct volstate *doomed = NULL;

    again = false;
    pthread_mutex_lock (&cat->tlock);
    for (size_t i = 0; i < cat->nvols && doomed == NULL; i++) {
      struct volstate *vs = cat->vols[i];
      bool pins = true;

      if ((vs->flags & (VOLF_HIDDEN | VOLF_PARTIAL)) == VOLF_HIDDEN &&
          vs->opens == 0 && (r = has_pins (cat, vs->id, &pins)) == 0 && !pins)
        doomed = vs;
      if (r < 0)
        break;
    }
    pthread_mutex_unlock (&cat->tlock);
    if (doomed) {
      r = destroy_volume (cat, doomed, gen);
      again = true;
    }
  }
  return r;
}

/* Let the next commit settle deferred deletes. */
void
cat_settle_soon (struct catalog *cat)
{
  __atomic_store_n (&cat->settle, true, __ATOMIC_RELEASE);
  /* No txn_begin: that waits for the space map, and the catalog loads
   * when a restarted server's first client opens an export.
   */
  txn_mark_dirty (cat->pool);
}

/* Rename a volume. */
static int
apply_rename (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[1 + VOL_NAME_MAX], idv[8];
  struct volstate *vs = NULL;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (cat_find_name (cat, req->name2))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already", req->name2);
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
                         " bytes discards the data past the new end: ask for "
                         "it explicitly (force)", vs->name, vs->size, req->size);
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

/* Check a property key. */
static int
check_prop_key (const char *key)
{
  size_t len = strlen (key);

  if (len == 0 || len > VOL_PROP_KEY_MAX)
    return cairn_fail (-EINVAL, "property name '%s' must be 1 to %d bytes", key,
                       VOL_PROP_KEY_MAX);
  for (size_t i = 0; i < len; i++)
    if (!((key[i] >= 'a' && key[i] <= 'z') || (key[i] >= '0' && key[i] <= '9') ||
          strchr ("._:-", key[i])))
      return cairn_fail (-EINVAL, "property name '%s': use lower-case letters, "
                         "digits, '.', '_', ':' and '-'", key);
  if (strchr (key, ':') == NULL)
    return cairn_fail (-EINVAL, "user property '%s' needs a ':' (module:name, "
                       "as in com.example:backup)", key);
  return 0;
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
static int
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
static int
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

/* Add snapshot vs@name at the end of generation gen: its records and a pin
 * of the tree's (frozen) root.
 */
int
snap_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
          const char *name, uint64_t guid, uint64_t ctime)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], val[SNAPREC_FIXED + VOL_NAME_MAX], gv[8];
  struct snaprec sr = {
    .ctime = ctime, .size = vs->size, .guid = guid,
    .referenced = (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED),
  };
  struct btree_root root;
  int r;

  snprintf (sr.name, sizeof sr.name, "%s", name);
  btree_get_root (vs->tree, &root);
  cat_key (key, RK_SNAP, vs->id, gen);
  r = cat_root_put (cat, key, 17, val, snaprec_encode (&sr, val));
  put_le64 (gv, gen);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_SNAPNAME, &vs->id, name), gv, 8);
  if (r == 0)
    r = pin_add (cat, vs, gen, &root, false);
  return r;
}

/* Refuse a snapshot name that vs has already. */
int
snap_name_free (struct catalog *cat, struct volstate *vs, const char *name)
{
  uint64_t sgen;
  int r = cat_lookup_snap (cat, vs->id, name, &sgen);

  if (r == 0)
    return cairn_fail (-EEXIST, "volume '%s' has a snapshot named '%s' already",
                       vs->name, name);
  return r == -ENOENT ? 0 : r;
}

/* Snapshot volumes, all or none. */
static int
apply_snap (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  struct volstate *vss[64];
  uint64_t guids[64];
  int r;

  if (req->nvols > ARRAY_SIZE (vss))
    return cairn_fail (-E2BIG, "at most %zu volumes in one snapshot",
                       ARRAY_SIZE (vss));
  for (size_t i = 0; i < req->nvols; i++) {
    r = need_volume (cat, req->vols[i], &vss[i]);
    if (r < 0)
      return r;
    for (size_t j = 0; j < i; j++)
      if (vss[j] == vss[i])
        return cairn_fail (-EINVAL, "volume '%s' is named twice", req->vols[i]);
    r = snap_name_free (cat, vss[i], req->snap);
    if (r == 0)
      r = new_guid (&guids[i]);
    if (r < 0)
      return r;
  }
  for (size_t i = 0; i < req->nvols; i++) {
    r = snap_add (cat, vss[i], gen, req->snap, guids[i], (uint64_t) time (NULL));
    if (r < 0)
      return r;
  }
  return 0;
}

/* Delete or rename a snapshot. */
static int
apply_snap_change (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[1 + 8 + VOL_NAME_MAX], gv[8];
  struct volstate *vs = NULL;
  uint64_t sgen;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  r = cat_lookup_snap (cat, vs->id, req->snap, &sgen);
  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'",
                       vs->name, req->snap);
  if (r < 0)
    return r;
  if (req->kind == REQ_SNAP_DELETE)
    return drop_snapshot (cat, vs, sgen, req->snap);

  r = snap_name_free (cat, vs, req->name2);
  if (r < 0)
    return r;
  {
    uint8_t val[SNAPREC_FIXED + VOL_NAME_MAX];
    struct snaprec sr;
    size_t vlen;

    cat_key (key, RK_SNAP, vs->id, sgen);
    r = cat_root_get (cat, key, 17, val, sizeof val, &vlen);
    if (r == 0)
      r = snaprec_decode (val, vlen, vs->id, sgen, &sr);
    if (r < 0)
      return r;
    snprintf (sr.name, sizeof sr.name, "%s", req->name2);
    r = cat_root_put (cat, key, 17, val, snaprec_encode (&sr, val));
  }
  if (r == 0)
    r = cat_root_del (cat, key, name_key (key, RK_SNAPNAME, &vs->id, req->snap));
  put_le64 (gv, sgen);
  if (r == 0)
    r = cat_root_put (cat, key, name_key (key, RK_SNAPNAME, &vs->id, req->name2), gv, 8);
  return r;
}

/* Split "VOL@SNAP" or "VOL@#GEN" into its volume and the pinned state. */
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
  if (at[1] == '#') {
    char *end;
    errno = 0;
    *pgen = strtoull (at + 2, &end, 10);
    if (errno || *end || end == at + 2)
      return cairn_fail (-EINVAL, "'%s': expected a generation number after '@#'",
                         src);
  }
  else {
    r = cat_lookup_snap (cat, vs->id, at + 1, pgen);
    if (r == -ENOENT)
      return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'",
                         vol, at + 1);
    if (r < 0)
      return r;
  }
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
  int r;

  if (!(req->flags & REQF_PARTIAL) && cat_find_name (cat, req->name2))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already", req->name2);
  r = resolve_point (cat, req->name, gen, &src, &pgen, &root, &referenced);
  if (r < 0)
    return r;
  r = pool_tree_create_from (cat->pool, &root, &id, &t);
  if (r < 0)
    return r;
  r = pin_add (cat, src, pgen, &root, true);
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

/* Roll a volume back: rename it, then clone its snapshot under its old
 * name, in one generation.
 */
static int
apply_rollback (struct catalog *cat, struct cat_request *req, uint64_t gen)
{
  char src[2 * VOL_NAME_MAX + 2];
  struct cat_request rn = { .kind = REQ_RENAME, .name = req->name,
                            .name2 = req->name2 };
  struct cat_request cl = { .kind = REQ_CLONE, .name = src, .name2 = req->name };
  struct volstate *vs = NULL;
  uint64_t sgen;
  int r = need_volume (cat, req->name, &vs);

  if (r < 0)
    return r;
  if (vs->opens > 0)
    return cairn_fail (-EBUSY, "volume '%s' is open by %d client(s): disconnect "
                       "them before rolling it back", vs->name, vs->opens);
  r = cat_lookup_snap (cat, vs->id, req->snap, &sgen);
  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'",
                       vs->name, req->snap);
  if (r < 0)
    return r;
  /* A damaged snapshot record fails the clone below: find out before the
   * rename, which a failed request must not leave behind.
   */
  {
    struct vol_info info;

    r = cat_read_snap (cat, vs->id, sgen, &info);
    if (r < 0) {
      snprintf (src, sizeof src, "%s@%s", vs->name, req->snap);
      return cat_snap_unreadable (r, src);
    }
  }
  if (cat_find_name (cat, req->name2))
    return cairn_fail (-EEXIST, "a volume named '%s' exists already: choose "
                       "another name to keep the rolled-back state under",
                       req->name2);
  snprintf (src, sizeof src, "%s@%s", req->name2, req->snap);
  r = apply_rename (cat, &rn);
  if (r == 0)
    r = apply_clone (cat, &cl, gen);
  req->out_id = cl.out_id;
  /* The volume keeps its settings: quota, read-only flag, user
   * properties (the old lineage keeps its own copy).
   */
  if (r == 0)
    r = copy_props (cat, vs->id, cl.out_id);
  if (r == 0) {
    struct volstate *nv;

    pthread_mutex_lock (&cat->tlock);
    nv = cat_find_id_locked (cat, cl.out_id);
    if (nv) {
      nv->quota = vs->quota;
      nv->flags |= vs->flags & VOLF_READONLY;
    }
    pthread_mutex_unlock (&cat->tlock);
    r = nv ? volrec_store (cat, nv) : cairn_fail (-EIO, "internal error: the "
                                                  "rolled-back volume is missing");
  }
  return r;
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
  }
  return cairn_fail (-EINVAL, "unknown catalog request %d", req->kind);
}

/* ---------------------------------------------------------------- API */

int
vol_create (struct cairn_pool *pool, const char *name, uint64_t size,
            uint64_t *idp)
{
  struct cat_request req = { .kind = REQ_CREATE, .name = name, .size = size };
  int r = vol_check_name (name);

  if (r < 0)
    return r;
  if (size == 0 || size % 512)
    return cairn_fail (-EINVAL, "volume size %" PRIu64 " must be a positive "
                       "multiple of 512 bytes", size);
  r = cat_submit (pool, &req);
  if (r == 0 && idp)
    *idp = req.out_id;
  return r;
}

int
vol_delete (struct cairn_pool *pool, const char *name, unsigned flags)
{
  struct cat_request req = { .kind = REQ_DELETE, .name = name, .flags = flags };

  return cat_submit (pool, &req);
}

int
vol_rename (struct cairn_pool *pool, const char *from, const char *to)
{
  struct cat_request req = { .kind = REQ_RENAME, .name = from, .name2 = to };
  int r = vol_check_name (to);

  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_resize (struct cairn_pool *pool, const char *name, uint64_t size, bool force)
{
  struct cat_request req = { .kind = REQ_RESIZE, .name = name, .size = size,
                             .flag = force };

  if (size == 0 || size % 512)
    return cairn_fail (-EINVAL, "volume size %" PRIu64 " must be a positive "
                       "multiple of 512 bytes", size);
  return cat_submit (pool, &req);
}

int
vol_set_readonly (struct cairn_pool *pool, const char *name, bool ro)
{
  struct cat_request req = { .kind = REQ_READONLY, .name = name, .flag = ro };

  return cat_submit (pool, &req);
}

int
snap_create_many (struct cairn_pool *pool, const char *const *vols,
                  size_t nvols, const char *snap)
{
  struct cat_request req = { .kind = REQ_SNAP, .vols = vols, .nvols = nvols,
                             .snap = snap };
  int r = vol_check_name (snap);

  if (r == 0 && strchr (snap, '/'))
    r = cairn_fail (-EINVAL, "snapshot name '%s' may not contain '/'", snap);
  if (r == 0 && nvols == 0)
    r = cairn_fail (-EINVAL, "no volume to snapshot");
  return r < 0 ? r : cat_submit (pool, &req);
}

int
snap_create (struct cairn_pool *pool, const char *vol, const char *snap)
{
  return snap_create_many (pool, &vol, 1, snap);
}

/* Collect the names of the volumes under a prefix. */
struct prefix_names {
  const char *prefix;
  size_t plen;
  char (*names)[VOL_NAME_MAX + 1];
  size_t n, cap;
};

static int
prefix_collect (void *opaque, const struct vol_info *info)
{
  struct prefix_names *pn = opaque;

  if (strncmp (info->name, pn->prefix, pn->plen) != 0 ||
      (info->name[pn->plen] != '\0' && info->name[pn->plen] != '/'))
    return 0;
  if (pn->n == pn->cap) {
    size_t cap = pn->cap ? pn->cap * 2 : 8;
    void *nn = realloc (pn->names, cap * sizeof *pn->names);
    if (nn == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    pn->names = nn;
    pn->cap = cap;
  }
  snprintf (pn->names[pn->n++], VOL_NAME_MAX + 1, "%s", info->name);
  return 0;
}

/* Snapshot every volume under a name prefix in one generation.  The
 * volumes are listed before the request: one created meanwhile is not in
 * the snapshot, one deleted meanwhile fails it (nothing is taken).
 */
int
snap_create_prefix (struct cairn_pool *pool, const char *prefix,
                    const char *snap)
{
  struct prefix_names pn = { .prefix = prefix, .plen = strlen (prefix) };
  const char **vols = NULL;
  int r = vol_check_name (prefix);

  if (r == 0)
    r = vol_list (pool, false, prefix_collect, &pn);
  if (r == 0 && pn.n == 0)
    r = cairn_fail (-ENOENT, "no volume is named '%s' or '%s/...'", prefix, prefix);
  if (r == 0 && (vols = calloc (pn.n, sizeof *vols)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  for (size_t i = 0; r == 0 && i < pn.n; i++)
    vols[i] = pn.names[i];
  if (r == 0)
    r = snap_create_many (pool, vols, pn.n, snap);
  free (vols);
  free (pn.names);
  return r;
}

int
snap_delete (struct cairn_pool *pool, const char *vol, const char *snap)
{
  struct cat_request req = { .kind = REQ_SNAP_DELETE, .name = vol, .snap = snap };

  return cat_submit (pool, &req);
}

int
snap_rename (struct cairn_pool *pool, const char *vol, const char *from,
             const char *to)
{
  struct cat_request req = { .kind = REQ_SNAP_RENAME, .name = vol, .snap = from,
                             .name2 = to };
  int r = vol_check_name (to);

  if (r == 0 && strchr (to, '/'))
    r = cairn_fail (-EINVAL, "snapshot name '%s' may not contain '/'", to);
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_rollback (struct cairn_pool *pool, const char *vol, const char *snap,
              const char *keep_as)
{
  struct cat_request req = { .kind = REQ_ROLLBACK, .name = vol, .snap = snap,
                             .name2 = keep_as };
  int r = vol_check_name (keep_as);

  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_clone (struct cairn_pool *pool, const char *src, const char *newname)
{
  struct cat_request req = { .kind = REQ_CLONE, .name = src, .name2 = newname };
  int r = vol_check_name (newname);

  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_set_prop (struct cairn_pool *pool, const char *name, const char *key,
              const char *value)
{
  struct cat_request req = { .kind = REQ_PROP, .name = name, .name2 = key,
                             .snap = value };
  int r = check_prop_key (key);

  if (r == 0 && value && strlen (value) > VOL_PROP_VALUE_MAX)
    r = cairn_fail (-EINVAL, "the value of '%s' is longer than %d bytes", key,
                    VOL_PROP_VALUE_MAX);
  return r < 0 ? r : cat_submit (pool, &req);
}

int
vol_set_quota (struct cairn_pool *pool, const char *name, uint64_t bytes)
{
  struct cat_request req = { .kind = REQ_QUOTA, .name = name, .size = bytes };

  return cat_submit (pool, &req);
}

int
vol_list_props (struct cairn_pool *pool, const char *name,
                int (*fn) (void *opaque, const char *key, const char *value),
                void *opaque)
{
  struct btree *root = pool_root_tree (pool);
  struct btree_cursor *cur;
  struct catalog *cat;
  struct volstate *vs = NULL;
  uint8_t key[9];
  uint64_t id;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, name);
  id = vs ? vs->id : 0;
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cairn_fail (-ENOENT, "no volume named '%s'", name);
  r = btree_cursor_new (root, &cur);
  if (r < 0)
    return r;
  key[0] = RK_PROP;
  put_be64 (key + 1, id);
  btree_rdlock (root);
  for (r = btree_cursor_seek (cur, key, 9); r == 0; r = btree_cursor_next (cur)) {
    char k[VOL_PROP_KEY_MAX + 1], v[VOL_PROP_VALUE_MAX + 1];
    const uint8_t *kk, *vv;
    size_t kl, vl;

    btree_cursor_item (cur, &kk, &kl, &vv, &vl);
    if (kl < 10 || kk[0] != RK_PROP || get_be64 (kk + 1) != id)
      break;
    if (kl - 9 > VOL_PROP_KEY_MAX || vl > VOL_PROP_VALUE_MAX) {
      r = cairn_fail (-EIO, "corrupt property record of volume '%s'", name);
      break;
    }
    memcpy (k, kk + 9, kl - 9);
    k[kl - 9] = '\0';
    memcpy (v, vv, vl);
    v[vl] = '\0';
    r = fn (opaque, k, v);
    if (r != 0)
      break;
  }
  btree_unlock (root);
  btree_cursor_free (cur);
  return r == -ENOENT ? 0 : r;
}

/* Fill info from a volume state. */
void
info_from_state (const struct volstate *vs, struct vol_info *info)
{
  memset (info, 0, sizeof *info);
  info->id = vs->id;
  snprintf (info->name, sizeof info->name, "%s", vs->name);
  info->size = vs->size;
  info->ctime = vs->ctime;
  info->gen = vs->create_gen;
  info->readonly = (vs->flags & VOLF_READONLY) != 0;
  info->origin_id = vs->origin_id;
  info->origin_gen = vs->origin_gen;
  info->referenced = (uint64_t) __atomic_load_n (&vs->referenced, __ATOMIC_RELAXED)
    * BLOCK_SIZE;
  info->held = (uint64_t) __atomic_load_n (&vs->held, __ATOMIC_RELAXED) * BLOCK_SIZE;
  info->quota = vs->quota;
}

int
vol_stat (struct cairn_pool *pool, const char *name, struct vol_info *info)
{
  char vol[VOL_NAME_MAX + 1];
  const char *at = strchr (name, '@');
  struct catalog *cat;
  struct volstate *vs = NULL;
  uint64_t sgen;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  snprintf (vol, sizeof vol, "%.*s", at ? (int) (at - name) : (int) strlen (name),
            name);
  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_name (cat, vol);
  if (vs)
    info_from_state (vs, info);
  pthread_mutex_unlock (&cat->tlock);
  if (vs == NULL)
    return cairn_fail (-ENOENT, "no volume named '%s'", vol);
  if (at == NULL)
    return 0;
  r = cat_lookup_snap (cat, info->id, at + 1, &sgen);
  if (r == -ENOENT)
    return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'", vol, at + 1);
  if (r == 0 && (r = cat_read_snap (cat, info->id, sgen, info)) < 0)
    r = cat_snap_unreadable (r, name);
  return r;
}

/* Report snapshot j of sl (volume vi), whose record did not decode (the
 * message is cairn_errmsg's), to damage.
 */
static int
snap_damaged (const struct vol_info *vi, const struct snaplist *sl, size_t j,
              int (*damage) (void *opaque, const struct vol_damage *d),
              void *opaque)
{
  struct vol_damage d = { .id = vi->id, .gen = sl->gen[j] };

  snprintf (d.name, sizeof d.name, "%s", vi->name);
  snprintf (d.snap, sizeof d.snap, "%s", sl->name[j]);
  snprintf (d.what, sizeof d.what, "%s", cairn_errmsg ());
  return damage (opaque, &d);
}

int
vol_list_tolerant (struct cairn_pool *pool, bool with_snapshots,
                   int (*fn) (void *opaque, const struct vol_info *info),
                   int (*damage) (void *opaque, const struct vol_damage *d),
                   void *opaque)
{
  struct vol_info *infos = NULL;
  struct snaplist *sl = NULL;
  struct catalog *cat;
  size_t n = 0;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  pthread_mutex_lock (&cat->tlock);
  infos = calloc (cat->nvols + 1, sizeof *infos);
  if (infos)
    for (size_t i = 0; i < cat->nvols; i++)
      if (vs_visible (cat->vols[i]))
        info_from_state (cat->vols[i], &infos[n++]);
  pthread_mutex_unlock (&cat->tlock);
  if (infos == NULL)
    return cairn_fail (-ENOMEM, "out of memory listing volumes");
  /* Name order. */
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && strcmp (infos[j - 1].name, infos[j].name) > 0; j--) {
      struct vol_info t = infos[j];
      infos[j] = infos[j - 1];
      infos[j - 1] = t;
    }
  if (with_snapshots && (sl = calloc (1, sizeof *sl)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory listing snapshots");
  for (size_t i = 0; r == 0 && i < n; i++) {
    r = fn (opaque, &infos[i]);
    if (r != 0 || !with_snapshots)
      continue;
    r = list_snaps (cat, infos[i].id, sl);
    for (size_t j = 0; r == 0 && j < sl->n; j++) {
      struct vol_info si = infos[i];

      /* A damaged record fails to read again, with its message. */
      r = cat_read_snap (cat, si.id, sl->gen[j], &si);
      if (r == 0)
        r = fn (opaque, &si);
      else if (r == -EIO && sl->bad[j] && damage)
        r = snap_damaged (&infos[i], sl, j, damage, opaque);
      else if (r == -EIO && sl->bad[j]) {
        char export[2 * VOL_NAME_MAX + 24];

        if (sl->name[j][0])
          snprintf (export, sizeof export, "%s@%s", infos[i].name,
                    sl->name[j]);
        else
          snprintf (export, sizeof export, "%s@#%" PRIu64, infos[i].name,
                    sl->gen[j]);
        r = cat_snap_unreadable (r, export);
      }
    }
  }
  snaplist_free (sl);
  free (infos);
  return r;
}

int
vol_list (struct cairn_pool *pool, bool with_snapshots,
          int (*fn) (void *opaque, const struct vol_info *info), void *opaque)
{
  return vol_list_tolerant (pool, with_snapshots, fn, NULL, opaque);
}
