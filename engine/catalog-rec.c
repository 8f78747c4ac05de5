/* Cairn engine: the catalog's records (catalog.c has the core).  Names
 * and root-tree keys, encoding, decoding and checking volume and snapshot
 * records (a bad field is an -EIO naming the record, as fsck names it),
 * the root-tree helpers, reading a snapshot by name, and listing a
 * volume's snapshots so that a damaged record is listed, not fatal.  The
 * layouts of the records are in catalog-int.h.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Check the length of a volume record's key (RK_VOL + be64 id). */
int
volkey_check (size_t klen)
{
  if (klen == 9)
    return 0;
  return cairn_fail (-EIO, "corrupt volume record key (%zu bytes, not 9)",
                     klen);
}

/* Decode volume id's record into a new volume state. */
int
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
  vs->ckpt_setting = -1;      /* ckpt_load reads the volume's own */
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

/* Encode a snapshot record; returns its length. */
size_t
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
  return cat_foreach_prefix_from (cat, prefix, plen, plen, fn, opaque);
}

/* cat_foreach_prefix from key start (slen bytes) on, for the items whose
 * key starts with start's first plen bytes.
 */
int
cat_foreach_prefix_from (struct catalog *cat, const uint8_t *start,
                         size_t slen, size_t plen,
                         int (*fn) (void *opaque, const uint8_t *key,
                                    size_t klen, const uint8_t *val,
                                    size_t vlen),
                         void *opaque)
{
  struct btree *root = pool_root_tree (cat->pool);
  struct btree_cursor *cur;
  const uint8_t *prefix = start;
  int fr = 0, r = btree_cursor_new (root, &cur);

  if (r < 0)
    return r;
  btree_rdlock (root);
  for (r = btree_cursor_seek (cur, start, slen); r == 0; r = btree_cursor_next (cur)) {
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

/* ---------------------------------------------------------------- snapshot lists */

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

/* ---------------------------------------------------------------- points in time */

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar
 * (Howard Hinnant's days_from_civil).
 */
static int64_t
days_from_civil (int64_t y, unsigned m, unsigned d)
{
  int64_t era;
  unsigned yoe, doy, doe;

  y -= m <= 2;
  era = (y >= 0 ? y : y - 399) / 400;
  yoe = (unsigned) (y - era * 400);
  doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + (int64_t) doe - 719468;
}

/* n decimal digits at s, or -1. */
static int
digits (const char *s, int n)
{
  int v = 0;

  for (int i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

int
cat_parse_time (const char *s, uint64_t *tp)
{
  static const unsigned mdays[12] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
  int y, mo, d, h, mi, sec;
  bool leap;

  if (strlen (s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
      s[13] != ':' || s[16] != ':' || s[19] != 'Z')
    return -1;
  y = digits (s, 4);
  mo = digits (s + 5, 2);
  d = digits (s + 8, 2);
  h = digits (s + 11, 2);
  mi = digits (s + 14, 2);
  sec = digits (s + 17, 2);
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 ||
      mi < 0 || mi > 59 || sec < 0 || sec > 59)
    return -1;
  leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if ((unsigned) d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap))
    return -1;
  *tp = (uint64_t) days_from_civil (y, (unsigned) mo, (unsigned) d) * 86400 +
        (uint64_t) (h * 3600 + mi * 60 + sec);
  return 0;
}

int
cat_no_snapshot (const char *vol, const char *snap)
{
  /* A date begins with a year and a '-'; a name rarely does. */
  bool date = strlen (snap) >= 5 && digits (snap, 4) >= 0 && snap[4] == '-';

  return cairn_fail (-ENOENT, "volume '%s' has no snapshot named '%s'%s", vol,
                     snap, date ? " (a time needs the full form "
                     "YYYY-MM-DDTHH:MM:SSZ, in UTC)" : "");
}

/* State of cat_lookup_point's walk. */
struct time_find {
  uint64_t id, t;             /* the volume, the time asked for */
  bool found;
  uint64_t gen, ctime;        /* the best snapshot so far */
};

/* cat_foreach_prefix callback: a snapshot record taken at or before tf->t,
 * newer than the best so far (the later generation of two taken in the
 * same second).
 */
static int
time_item (void *opaque, const uint8_t *k, size_t kl, const uint8_t *v,
           size_t vl)
{
  struct time_find *tf = opaque;
  struct snaprec sr;
  uint64_t gen;

  if (kl != 17)
    return 0;
  gen = get_be64 (k + 9);
  if (snaprec_decode (v, vl, tf->id, gen, &sr) < 0)
    return 0;           /* damaged: its time is unknown (listings report it) */
  if (sr.ctime <= tf->t &&
      (!tf->found || sr.ctime > tf->ctime ||
       (sr.ctime == tf->ctime && gen > tf->gen))) {
    tf->found = true;
    tf->gen = gen;
    tf->ctime = sr.ctime;
  }
  return 0;
}

int
cat_lookup_point (struct catalog *cat, uint64_t id, const char *vol,
                  const char *spec, uint64_t *genp)
{
  struct time_find tf = { .id = id };
  uint8_t key[17];
  int r;

  /* '#GEN': a generation, which the caller finds kept or not. */
  if (spec[0] == '#') {
    char *end;

    errno = 0;
    *genp = strtoull (spec + 1, &end, 10);
    if (errno || *end || end == spec + 1)
      return cairn_fail (-EINVAL, "'%s@%s': expected a generation number "
                         "after '@#'", vol, spec);
    return 0;
  }
  /* ':' is in no snapshot name (vol_check_name): a time, or a mistake. */
  if (strchr (spec, ':') == NULL) {
    r = cat_lookup_snap (cat, id, spec, genp);
    if (r == -ENOENT)
      r = cat_no_snapshot (vol, spec);
    return r;
  }
  if (cat_parse_time (spec, &tf.t) < 0)
    return cairn_fail (-EINVAL, "'%s@%s': '%s' is neither a snapshot name nor "
                       "a time of the form YYYY-MM-DDTHH:MM:SSZ (UTC)", vol,
                       spec, spec);
  cat_key (key, RK_SNAP, id, 0);
  r = cat_foreach_prefix (cat, key, 9, time_item, &tf);
  if (r < 0)
    return r;
  /* The newest checkpoint at or before it, if newer than that snapshot. */
  {
    uint64_t cgen, ctime;

    r = ckpt_at_time (cat, id, tf.t, &cgen, &ctime);
    if (r < 0 && r != -ENOENT)
      return r;
    if (r == 0 && (!tf.found || ctime > tf.ctime ||
                   (ctime == tf.ctime && cgen > tf.gen))) {
      tf.found = true;
      tf.gen = cgen;
    }
  }
  if (!tf.found)
    return cairn_fail (-ENOENT, "volume '%s' has no snapshot or checkpoint "
                       "taken at or before %s", vol, spec);
  *genp = tf.gen;
  return 0;
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
  return r == -EIO ? cat_snap_unusable (export, why) : r;
}

/* Fail a use of snapshot export whose record does not decode (why). */
int
cat_snap_unusable (const char *export, const char *why)
{
  return cairn_fail (-EIO, "'%s' cannot be used: %s; 'cairn fsck' gives "
                     "details, 'cairn snapshot delete' removes it", export,
                     why);
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
