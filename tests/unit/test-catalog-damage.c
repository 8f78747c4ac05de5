/* Unit tests of the catalog with one damaged record: a snapshot or volume
 * record whose node checksums are fine but whose content does not decode
 * (written through the engine's own B-tree, as a bug or a bad patch
 * would).  The listing for people goes on without it and reports it, fsck
 * names it the same way, its healthy neighbours stay usable, and what
 * needs the record (open, stat, clone, rollback) fails with a message
 * naming it and changes nothing.  Deleting a damaged snapshot repairs the
 * pool; a damaged volume cannot be deleted (catalog-damage.c, DV-n), but
 * the rest of the pool works around it.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "catalog-int.h"
#include "test-pool.h"
#include "test-util.h"
#include "volume.h"

/* Rewrite the root tree item key (klen bytes) with fn applied and, with
 * drop_name, delete the snapshot name index item of (id, drop_name) too;
 * the catalog is not loaded (the pool is opened for this only) and the
 * change is committed by closing the pool.
 */
static void
edit_item (struct cairn_dev *dev, const uint8_t *key, size_t klen,
           uint64_t id, const char *drop_name,
           size_t (*fn) (uint8_t *val, size_t len))
{
  struct cairn_pool *pool = pool_open_ok (dev);
  struct btree *root = pool_root_tree (pool);
  uint8_t nkey[1 + 8 + VOL_NAME_MAX], val[VOLREC_FIXED + VOL_NAME_MAX + 64];
  size_t len;

  cr_assert_eq (txn_begin (pool), 0);
  btree_wrlock (root);
  cr_assert_eq (btree_lookup (root, key, klen, val, sizeof val, &len), 0);
  len = fn (val, len);
  cr_assert_eq (btree_insert (root, key, klen, val, len, BTREE_RESERVE), 0);
  if (drop_name)
    cr_assert_eq (btree_delete (root, nkey, name_key (nkey, RK_SNAPNAME, &id,
                                                      drop_name)), 0);
  btree_unlock (root);
  txn_mark_dirty (pool);
  txn_end (pool);
  cr_assert_eq (pool_close (pool), 0);
}

/* edit_item on the snapshot record (id, gen). */
static void
edit_snaprec (struct cairn_dev *dev, uint64_t id, uint64_t gen,
              const char *drop_name, size_t (*fn) (uint8_t *val, size_t len))
{
  uint8_t key[17];

  cat_key (key, RK_SNAP, id, gen);
  edit_item (dev, key, 17, id, drop_name, fn);
}

/* A record whose GUID is 0 (no snapshot has that GUID). */
static size_t
zero_guid (uint8_t *val, size_t len)
{
  put_le64 (val + 24, 0);
  return len;
}

/* A record cut short, inside its fixed fields. */
static size_t
truncate_rec (uint8_t *val, size_t len)
{
  (void) val, (void) len;
  return 20;
}

/* What a tolerant listing showed, one line per entry. */
struct seen {
  char text[8192];
  struct vol_damage d[4];
  size_t nd;
};

static int
seen_info (void *opaque, const struct vol_info *info)
{
  struct seen *s = opaque;
  size_t n = strlen (s->text);

  snprintf (s->text + n, sizeof s->text - n, "%s%s%s\n", info->name,
            info->is_snapshot ? "@" : "", info->snap);
  return 0;
}

static int
seen_damage (void *opaque, const struct vol_damage *d)
{
  struct seen *s = opaque;
  size_t n = strlen (s->text);

  cr_assert_lt (s->nd, 4);
  s->d[s->nd++] = *d;
  if (d->kind == VOL_DAMAGE_VOLUME)
    snprintf (s->text + n, sizeof s->text - n, "DAMAGED VOLUME %s\n",
              d->name);
  else
    snprintf (s->text + n, sizeof s->text - n, "DAMAGED %s@%s\n", d->name,
              d->snap);
  return 0;
}

/* Make volumes a (snapshots s1, s2, s3, each after a write) and b (s1);
 * a@s2's id and generation in *id, *gen.
 */
static struct cairn_dev *
make_pool (uint64_t *id, uint64_t *gen)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  static uint8_t data[8192];
  struct cairn_volume *v;
  struct vol_info info;
  const char *snaps[] = { "s1", "s2", "s3" };

  cr_assert_eq (vol_create (pool, "a", 1 << 20, NULL), 0);
  cr_assert_eq (vol_create (pool, "b", 2 << 20, NULL), 0);
  cr_assert_eq (vol_open (pool, "a", &v), 0);
  for (unsigned i = 0; i < 3; i++) {
    fill_pattern (data, sizeof data, i + 1);
    cr_assert_eq (vol_pwrite (v, data, sizeof data, 0, 0), 0);
    cr_assert_eq (snap_create (pool, "a", snaps[i]), 0, "%s", cairn_errmsg ());
  }
  vol_close (v);
  cr_assert_eq (snap_create (pool, "b", "s1"), 0);
  cr_assert_eq (vol_stat (pool, "a@s2", &info), 0);
  *id = info.id;
  *gen = info.gen;
  cr_assert_eq (pool_close (pool), 0);
  return dev;
}

/* The GUID of a@s2 is 0: everything but that snapshot is listed, the
 * damage names it; the other snapshots are read and cloned as before;
 * opening, describing or cloning a@s2 fails naming it; fsck reports it in
 * the same words; deleting it leaves a clean pool.
 */
Test (catalog_damage, snapshot_record_skipped_and_reported)
{
  uint64_t id, gen;
  struct cairn_dev *dev = make_pool (&id, &gen);
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct vol_info info;
  struct seen s = { .nd = 0 };
  struct problems p;
  struct fsck_report rep;
  static uint8_t data[8192], want[8192];
  char rec[128];

  edit_snaprec (dev, id, gen, NULL, zero_guid);
  snprintf (rec, sizeof rec, "corrupt snapshot record (volume %" PRIu64
            ", generation %" PRIu64 "): its GUID is 0", id, gen);

  /* fsck names the record, and only it. */
  rep = run_fsck (dev, &p);
  cr_assert_eq (rep.errors, 1, "fsck: %s", p.text);
  cr_assert (strstr (p.text, rec), "fsck said: %s", p.text);

  pool = pool_open_ok (dev);
  /* The strict listing refuses, naming the record. */
  cr_assert_eq (vol_list (pool, true, seen_info, &s), -EIO);
  cr_assert (strstr (cairn_errmsg (), "'a@s2' cannot be used: ") &&
             strstr (cairn_errmsg (), rec), "%s", cairn_errmsg ());
  /* The tolerant one lists the rest, the damage in its place. */
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "a\na@s1\nDAMAGED a@s2\na@s3\nb\nb@s1\n");
  cr_assert_eq (s.nd, 1);
  cr_assert_eq (s.d[0].id, id);
  cr_assert_eq (s.d[0].gen, gen);
  cr_assert_str_eq (s.d[0].what, rec);
  /* Without snapshots nothing is damaged. */
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list (pool, false, seen_info, &s), 0);
  cr_assert_str_eq (s.text, "a\nb\n");

  /* The neighbours are whole. */
  cr_assert_eq (vol_open (pool, "a@s3", &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pread (v, data, sizeof data, 0), 0);
  fill_pattern (want, sizeof want, 3);
  cr_assert_eq (memcmp (data, want, sizeof data), 0, "a@s3 reads its data");
  vol_close (v);
  cr_assert_eq (vol_clone (pool, "a@s1", "c1"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "b", &v), 0);
  vol_close (v);

  /* What needs the record fails, naming it and what to do. */
  cr_assert_eq (vol_open (pool, "a@s2", &v), -EIO);
  cr_assert (strstr (cairn_errmsg (), "'a@s2'") &&
             strstr (cairn_errmsg (), rec) &&
             strstr (cairn_errmsg (), "cairn fsck"), "%s", cairn_errmsg ());
  cr_assert_eq (vol_stat (pool, "a@s2", &info), -EIO);
  cr_assert (strstr (cairn_errmsg (), rec), "%s", cairn_errmsg ());
  cr_assert_eq (vol_clone (pool, "a@s2", "c2"), -EIO);
  cr_assert (strstr (cairn_errmsg (), "'a@s2'"), "%s", cairn_errmsg ());
  cr_assert_eq (vol_stat (pool, "c2", &info), -ENOENT, "no clone was made");
  cr_assert_eq (vol_rollback (pool, "a", "s2", "a-old"), -EIO);
  cr_assert (strstr (cairn_errmsg (), "'a@s2'"), "%s", cairn_errmsg ());
  cr_assert_eq (vol_stat (pool, "a-old", &info), -ENOENT,
                "the failed rollback renamed nothing");
  cr_assert_eq (vol_stat (pool, "a", &info), 0);
  cr_assert_eq (vol_delete (pool, "a", 0), -EBUSY, "a still has 3 snapshots");

  /* Deleting it repairs the pool. */
  cr_assert_eq (snap_delete (pool, "a", "s2"), 0, "%s", cairn_errmsg ());
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list (pool, true, seen_info, &s), 0, "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "a\na@s1\na@s3\nb\nb@s1\nc1\n");
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
}

/* A record cut short whose name index item is gone too: listed as damaged
 * without a name, and deleting its volume recursively still works.
 */
Test (catalog_damage, unnamed_damaged_record_and_recursive_delete)
{
  uint64_t id, gen;
  struct cairn_dev *dev = make_pool (&id, &gen);
  struct cairn_pool *pool;
  struct seen s = { .nd = 0 };
  struct problems p;
  struct fsck_report rep;
  char rec[128];

  edit_snaprec (dev, id, gen, "s2", truncate_rec);
  snprintf (rec, sizeof rec, "corrupt snapshot record (volume %" PRIu64
            ", generation %" PRIu64 "): 20 bytes, shorter than its 34 bytes "
            "of fixed fields", id, gen);
  rep = run_fsck (dev, &p);
  cr_assert_eq (rep.errors, 1, "fsck: %s", p.text);
  cr_assert (strstr (p.text, rec), "fsck said: %s", p.text);

  pool = pool_open_ok (dev);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "a\na@s1\nDAMAGED a@\na@s3\nb\nb@s1\n");
  cr_assert_str_eq (s.d[0].snap, "");
  cr_assert_str_eq (s.d[0].what, rec);
  cr_assert_eq (vol_delete (pool, "a", VOL_DELETE_RECURSIVE), 0, "%s",
                cairn_errmsg ());
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list (pool, true, seen_info, &s), 0, "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "b\nb@s1\n");
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
}

/* Every way a snapshot record can be malformed is refused by its decoder
 * with a message saying which check failed.
 */
Test (catalog_damage, snapshot_decoder_checks)
{
  static const struct {
    size_t len;
    uint16_t nlen;
    uint64_t guid;
    char name[4];
    const char *why;
  } cases[] = {
    { 33, 1, 1, "x", "33 bytes, shorter than its 34" },
    { 34, 0, 1, "", "name length 0 is not 1 to 255" },
    { 34 + 300, 300, 1, "", "name length 300 is not 1 to 255" },
    { 36, 1, 1, "xy", "36 bytes, but its name length 1 makes 35" },
    { 35, 1, 0, "x", "its GUID is 0" },
    { 36, 2, 1, "a@", "its name is not a valid snapshot name" },
    { 36, 2, 1, "a\0", "its name is not a valid snapshot name" },
    { 36, 2, 1, "ok", NULL },
  };
  uint8_t val[SNAPREC_FIXED + 400];
  struct snaprec sr;

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    memset (val, 0, sizeof val);
    put_le64 (val + 24, cases[i].guid);
    put_le16 (val + 32, cases[i].nlen);
    memcpy (val + SNAPREC_FIXED, cases[i].name, 2);
    if (cases[i].why == NULL) {
      cr_assert_eq (snaprec_decode (val, cases[i].len, 7, 9, &sr), 0,
                    "%s", cairn_errmsg ());
      cr_assert_str_eq (sr.name, "ok");
      continue;
    }
    cr_assert_eq (snaprec_decode (val, cases[i].len, 7, 9, &sr), -EIO,
                  "case %zu", i);
    cr_assert (strstr (cairn_errmsg (), "(volume 7, generation 9): ") &&
               strstr (cairn_errmsg (), cases[i].why), "case %zu: %s", i,
               cairn_errmsg ());
  }
}

/* ---------------------------------------------------------------- damaged volume records */

/* A volume record whose name length runs past its end. */
static size_t
bad_name_length (uint8_t *val, size_t len)
{
  put_le16 (val + 72, 200);
  return len;
}

/* The decoder's message for a one-letter volume's record that
 * bad_name_length damaged.
 */
static void
bad_name_message (char *buf, size_t size, uint64_t id)
{
  snprintf (buf, size, "corrupt volume record (volume %" PRIu64 "): "
            "%zu bytes, but its name length 200 makes %u or %u", id,
            (size_t) VOLREC_FIXED + 1 + VOLREC_HELD, VOLREC_FIXED + 200,
            VOLREC_FIXED + 200 + VOLREC_HELD);
}

/* Write 8 KiB of fill_pattern (tag) at off of export. */
static void
write_tag (struct cairn_pool *pool, const char *export, uint64_t off,
           uint64_t tag)
{
  static uint8_t data[8192];
  struct cairn_volume *v;

  fill_pattern (data, sizeof data, tag);
  cr_assert_eq (vol_open (pool, export, &v), 0, "%s: %s", export,
                cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, data, sizeof data, off, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
}

/* export reads fill_pattern (tag) in the 8 KiB at off. */
static void
expect_tag (struct cairn_pool *pool, const char *export, uint64_t off,
            uint64_t tag)
{
  static uint8_t want[8192], got[8192];
  struct cairn_volume *v;

  fill_pattern (want, sizeof want, tag);
  cr_assert_eq (vol_open (pool, export, &v), 0, "%s: %s", export,
                cairn_errmsg ());
  cr_assert_eq (vol_pread (v, got, sizeof got, off), 0, "%s", cairn_errmsg ());
  cr_assert_arr_eq (got, want, sizeof got, "%s at %" PRIu64 ": not data %"
                    PRIu64, export, off, tag);
  vol_close (v);
}

/* Volumes a (data 1, snapshot s1, data 2, s2, data 3), c (a clone of a@s1,
 * data 5 in its second 8 KiB), b (data 7, s1, data 8) and d (data 9); the
 * ids of a and d in *ida and *idd.
 */
static struct cairn_dev *
make_volume_pool (uint64_t *ida, uint64_t *idd)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);

  cr_assert_eq (vol_create (pool, "a", 1 << 20, ida), 0);
  cr_assert_eq (vol_create (pool, "b", 1 << 20, NULL), 0);
  cr_assert_eq (vol_create (pool, "d", 1 << 20, idd), 0);
  write_tag (pool, "a", 0, 1);
  cr_assert_eq (snap_create (pool, "a", "s1"), 0);
  write_tag (pool, "a", 0, 2);
  cr_assert_eq (snap_create (pool, "a", "s2"), 0);
  write_tag (pool, "a", 0, 3);
  cr_assert_eq (vol_clone (pool, "a@s1", "c"), 0);
  write_tag (pool, "c", 8192, 5);
  write_tag (pool, "b", 0, 7);
  cr_assert_eq (snap_create (pool, "b", "s1"), 0);
  write_tag (pool, "b", 0, 8);
  write_tag (pool, "d", 0, 9);
  cr_assert_eq (pool_close (pool), 0);
  return dev;
}

/* The id the name index gives name, 0 if none. */
static uint64_t
name_index (struct cairn_pool *pool, const char *name)
{
  struct btree *root = pool_root_tree (pool);
  uint8_t key[1 + VOL_NAME_MAX], val[8];
  size_t len;
  int r;

  btree_rdlock (root);
  r = btree_lookup (root, key, name_key (key, RK_NAME, NULL, name), val,
                    sizeof val, &len);
  btree_unlock (root);
  return r == 0 && len == 8 ? get_be64 (val) : 0;
}

/* The last failure was a use of export refused for damaged record rec. */
static void
assert_unusable (const char *export, const char *rec)
{
  char want[2 * VOL_NAME_MAX + 32];
  const char *m = cairn_errmsg ();

  snprintf (want, sizeof want, "'%s' cannot be used: ", export);
  cr_assert (strstr (m, want) && strstr (m, rec) &&
             strstr (m, "'cairn fsck' gives details") &&
             strstr (m, "data is kept"), "%s: %s", export, m);
}

static int
no_diff (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  (void) opaque, (void) off, (void) len, (void) type;
  return 0;
}

/* Every use of volume victim, whose record is damaged (message rec),
 * fails naming the record and changes nothing; its name stays taken.
 */
static void
damaged_volume_refuses (struct cairn_pool *pool, const char *victim,
                        const char *rec)
{
  char name[64], base[64];
  struct cairn_volume *v;
  struct vol_info info;
  const char *m;

  cr_assert_eq (vol_open (pool, victim, &v), -EIO);
  assert_unusable (victim, rec);
  snprintf (name, sizeof name, "%s@s1", victim);
  cr_assert_eq (vol_open (pool, name, &v), -EIO);
  assert_unusable (name, rec);
  cr_assert_eq (vol_stat (pool, name, &info), -EIO);
  assert_unusable (name, rec);
  cr_assert_eq (vol_clone (pool, name, "x"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (vol_diff (pool, name, victim, no_diff, NULL), -EIO);
  assert_unusable (name, rec);
  snprintf (name, sizeof name, "%s@#1", victim);
  cr_assert_eq (vol_open (pool, name, &v), -EIO);
  assert_unusable (name, rec);
  cr_assert_eq (vol_stat (pool, victim, &info), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (snap_create (pool, victim, "s9"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (snap_create_prefix (pool, victim, "s9"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (snap_delete (pool, victim, "s1"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (vol_clone (pool, victim, "x"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (vol_rollback (pool, victim, "s1", "x"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (vol_rename (pool, victim, "x"), -EIO);
  assert_unusable (victim, rec);
  cr_assert_eq (vol_resize (pool, victim, 2 << 20, false), -EIO);
  cr_assert_eq (vol_set_readonly (pool, victim, true), -EIO);
  cr_assert_eq (vol_set_quota (pool, victim, 1 << 20), -EIO);
  cr_assert_eq (vol_set_prop (pool, victim, "t:k", "v"), -EIO);
  assert_unusable (victim, rec);
  snprintf (base, sizeof base, "%s@s1", victim);
  cr_assert_eq (vol_partial_create (pool, victim, base, 1 << 20, "st", 0),
                -EIO);
  assert_unusable (victim, rec);

  /* Deleting it is refused, saying why. */
  for (unsigned flags = 0; flags <= VOL_DELETE_RECURSIVE; flags++) {
    cr_assert_eq (vol_delete (pool, victim, flags), -EIO);
    m = cairn_errmsg ();
    snprintf (name, sizeof name, "volume '%s' cannot be deleted: ", victim);
    cr_assert (strstr (m, name) && strstr (m, rec) &&
               strstr (m, "its origin is unknown") &&
               strstr (m, "could destroy data another volume uses"), "%s", m);
  }

  /* Its name stays taken. */
  cr_assert_eq (vol_create (pool, victim, 1 << 20, NULL), -EEXIST);
  cr_assert (strstr (cairn_errmsg (), rec), "%s", cairn_errmsg ());
  cr_assert_eq (vol_rename (pool, "b", victim), -EEXIST);
  cr_assert (strstr (cairn_errmsg (), rec), "%s", cairn_errmsg ());
  cr_assert_eq (vol_clone (pool, "b@s1", victim), -EEXIST);
  cr_assert_eq (vol_partial_create (pool, victim, NULL, 1 << 20, "st", 0),
                -EEXIST);
  cr_assert_eq (vol_stat (pool, "x", &info), -ENOENT, "nothing was made");
  cr_assert_eq (vol_stat (pool, "b", &info), 0, "b was not renamed");
}

/* fsck finds rec and nothing else: no block leaked or used twice. */
static void
fsck_only (struct cairn_dev *dev, const char *rec)
{
  struct problems p;
  struct fsck_report rep = run_fsck (dev, &p);

  cr_assert_eq (rep.errors, 1, "fsck: %s", p.text);
  cr_assert (strstr (p.text, rec), "fsck said: %s", p.text);
  cr_assert_eq (rep.blocks_leaked, 0);
  cr_assert_eq (rep.blocks_free_but_used, 0);
}

/* Plain volume d's record does not decode: the pool loads without it,
 * the tolerant listing reports it in its place with its name and the
 * decoder's message, the strict one fails naming it; the other volumes
 * read their data, take writes, snapshots, deletes and commits; every use
 * of d fails naming the record; fsck reports only the record, before and
 * after, and its name item survives it all.
 */
Test (catalog_damage, plain_volume_record_damaged)
{
  uint64_t ida, idd;
  struct cairn_dev *dev = make_volume_pool (&ida, &idd);
  struct cairn_pool *pool;
  struct seen s = { .nd = 0 };
  uint8_t key[17];
  char rec[160];

  cat_key (key, RK_VOL, idd, 0);
  edit_item (dev, key, 9, idd, NULL, bad_name_length);
  bad_name_message (rec, sizeof rec, idd);
  fsck_only (dev, rec);

  pool = pool_open_ok (dev);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "a\na@s1\na@s2\nb\nb@s1\nc\nDAMAGED VOLUME d\n");
  cr_assert_eq (s.nd, 1);
  cr_assert_eq (s.d[0].kind, VOL_DAMAGE_VOLUME);
  cr_assert_eq (s.d[0].id, idd);
  cr_assert_eq (s.d[0].gen, 0);
  cr_assert_str_eq (s.d[0].snap, "");
  cr_assert_str_eq (s.d[0].what, rec);
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list (pool, false, seen_info, &s), -EIO);
  assert_unusable ("d", rec);

  /* The others are whole and keep working. */
  expect_tag (pool, "a", 0, 3);
  expect_tag (pool, "a@s1", 0, 1);
  expect_tag (pool, "a@s2", 0, 2);
  expect_tag (pool, "c", 0, 1);
  expect_tag (pool, "c", 8192, 5);
  expect_tag (pool, "b", 0, 8);
  expect_tag (pool, "b@s1", 0, 7);
  write_tag (pool, "b", 0, 11);
  cr_assert_eq (snap_create (pool, "b", "s2"), 0, "%s", cairn_errmsg ());
  write_tag (pool, "b", 8192, 12);
  cr_assert_eq (snap_delete (pool, "b", "s1"), 0, "%s", cairn_errmsg ());
  write_tag (pool, "a", 0, 13);
  cr_assert_eq (snap_delete (pool, "a", "s2"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "c", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "e", 1 << 20, NULL), 0, "%s",
                cairn_errmsg ());
  write_tag (pool, "e", 0, 14);
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0);

  damaged_volume_refuses (pool, "d", rec);
  cr_assert_eq (name_index (pool, "d"), idd);
  cr_assert_eq (pool_close (pool), 0);
  fsck_only (dev, rec);

  /* Nothing of it changed across a restart. */
  pool = pool_open_ok (dev);
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "a\na@s1\nb\nb@s2\nDAMAGED VOLUME d\ne\n");
  cr_assert_str_eq (s.d[0].what, rec);
  cr_assert_eq (name_index (pool, "d"), idd);
  expect_tag (pool, "a", 0, 13);
  expect_tag (pool, "b", 0, 11);
  expect_tag (pool, "b", 8192, 12);
  expect_tag (pool, "b@s2", 0, 11);
  expect_tag (pool, "e", 0, 14);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* Volume a, with snapshots and the origin of clone c, has a damaged
 * record: it is listed once (its snapshots are not), c still reads the
 * data it shares with a's lineage, takes writes, snapshots and clones, and
 * can be deleted (its reason on a's pin stays, DV-2); a cannot be used;
 * fsck reports only the record, with no block leaked or used twice.
 */
Test (catalog_damage, origin_volume_record_damaged)
{
  uint64_t ida, idd;
  struct cairn_dev *dev = make_volume_pool (&ida, &idd);
  struct cairn_pool *pool;
  struct seen s = { .nd = 0 };
  struct vol_info info;
  uint8_t key[17];
  char rec[160];

  cat_key (key, RK_VOL, ida, 0);
  edit_item (dev, key, 9, ida, NULL, bad_name_length);
  bad_name_message (rec, sizeof rec, ida);
  fsck_only (dev, rec);

  pool = pool_open_ok (dev);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "DAMAGED VOLUME a\nb\nb@s1\nc\nd\n");
  cr_assert_eq (s.nd, 1);
  cr_assert_eq (s.d[0].id, ida);
  cr_assert_str_eq (s.d[0].name, "a");
  cr_assert_str_eq (s.d[0].what, rec);
  cr_assert_eq (vol_list (pool, true, seen_info, &s), -EIO);
  assert_unusable ("a", rec);

  /* The clone reads what it shares with a@s1, and works on. */
  cr_assert_eq (vol_stat (pool, "c", &info), 0, "%s", cairn_errmsg ());
  cr_assert_eq (info.origin_id, ida);
  expect_tag (pool, "c", 0, 1);
  expect_tag (pool, "c", 8192, 5);
  write_tag (pool, "c", 0, 21);
  cr_assert_eq (snap_create (pool, "c", "cs1"), 0, "%s", cairn_errmsg ());
  write_tag (pool, "c", 8192, 22);
  cr_assert_eq (vol_clone (pool, "c@cs1", "f"), 0, "%s", cairn_errmsg ());
  expect_tag (pool, "f", 0, 21);
  expect_tag (pool, "f", 8192, 5);
  cr_assert_eq (snap_delete (pool, "c", "cs1"), 0, "%s", cairn_errmsg ());
  write_tag (pool, "d", 0, 23);
  write_tag (pool, "b", 0, 24);
  cr_assert_eq (snap_delete (pool, "b", "s1"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0);
  damaged_volume_refuses (pool, "a", rec);
  cr_assert_eq (vol_delete (pool, "f", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_delete (pool, "c", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_reclaim_wait (pool, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_commit (pool), 0);
  cr_assert_eq (name_index (pool, "a"), ida);
  cr_assert_eq (pool_close (pool), 0);
  fsck_only (dev, rec);

  pool = pool_open_ok (dev);
  memset (&s, 0, sizeof s);
  cr_assert_eq (vol_list_tolerant (pool, true, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "DAMAGED VOLUME a\nb\nd\n");
  expect_tag (pool, "b", 0, 24);
  expect_tag (pool, "d", 0, 23);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* Move volume id's record to a key one byte too long. */
static void
move_volrec (struct cairn_dev *dev, uint64_t id)
{
  struct cairn_pool *pool = pool_open_ok (dev);
  struct btree *root = pool_root_tree (pool);
  uint8_t key[17] = { 0 }, val[VOLREC_FIXED + VOL_NAME_MAX + VOLREC_HELD];
  size_t len;

  cat_key (key, RK_VOL, id, 0);
  cr_assert_eq (txn_begin (pool), 0);
  btree_wrlock (root);
  cr_assert_eq (btree_lookup (root, key, 9, val, sizeof val, &len), 0);
  cr_assert_eq (btree_delete (root, key, 9), 0);
  key[9] = 0;
  cr_assert_eq (btree_insert (root, key, 10, val, len, BTREE_RESERVE), 0);
  btree_unlock (root);
  txn_mark_dirty (pool);
  txn_end (pool);
  cr_assert_eq (pool_close (pool), 0);
}

/* A volume record under a key of the wrong length has no usable id: it is
 * reported without a name, and fsck names it in the same words without
 * calling its volume's blocks leaked; the name its volume had in the index
 * cannot be taken by another.
 */
Test (catalog_damage, volume_record_key_damaged)
{
  uint64_t ida, idd;
  struct cairn_dev *dev = make_volume_pool (&ida, &idd);
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct seen s = { .nd = 0 };
  const char *rec = "corrupt volume record key (10 bytes, not 9)";
  char want[128];

  move_volrec (dev, idd);
  fsck_only (dev, rec);

  pool = pool_open_ok (dev);
  cr_assert_eq (vol_list_tolerant (pool, false, seen_info, seen_damage, &s), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (s.text, "DAMAGED VOLUME \na\nb\nc\n");
  cr_assert_eq (s.d[0].kind, VOL_DAMAGE_VOLUME);
  cr_assert_eq (s.d[0].id, 0);
  cr_assert_str_eq (s.d[0].what, rec);
  cr_assert_eq (vol_list (pool, false, seen_info, &s), -EIO);
  assert_unusable ("#0", rec);
  cr_assert_eq (vol_open (pool, "d", &v), -ENOENT);
  cr_assert_eq (vol_create (pool, "d", 1 << 20, NULL), -EEXIST);
  snprintf (want, sizeof want, "the name index gives 'd' to volume %" PRIu64
            ", which has no readable record", idd);
  cr_assert (strstr (cairn_errmsg (), want), "%s", cairn_errmsg ());
  cr_assert_eq (vol_rename (pool, "b", "d"), -EEXIST);
  expect_tag (pool, "b", 0, 8);
  write_tag (pool, "b", 0, 31);
  cr_assert_eq (pool_close (pool), 0);
  fsck_only (dev, rec);
  dev_close (dev);
}

/* ---------------------------------------------------------------- points in time */

/* Snapshot ctimes for the tests below: a@s1, s2 and s3 an hour apart. */
#define T0 1796083200u          /* 2026-12-01T00:00:00Z */

static uint64_t set_ctime_to;

/* Give a snapshot record the creation time set_ctime_to. */
static size_t
set_ctime (uint8_t *val, size_t len)
{
  put_le64 (val, set_ctime_to);
  return len;
}

/* The snapshot (its name) and the data (fill_pattern's tag, 0: zeros)
 * that export name opens.
 */
static void
expect_point (struct cairn_pool *pool, const char *export, const char *snap,
              uint64_t tag)
{
  static uint8_t want[8192], got[8192];
  struct cairn_volume *v;
  struct vol_info info;

  cr_assert_eq (vol_open (pool, export, &v), 0, "%s: %s", export,
                cairn_errmsg ());
  vol_get_info (v, &info);
  cr_assert_str_eq (info.snap, snap, "%s", export);
  cr_assert (vol_is_readonly (v), "%s", export);
  memset (want, 0, sizeof want);
  if (tag)
    fill_pattern (want, sizeof want, tag);
  cr_assert_eq (vol_pread (v, got, sizeof got, 0), 0);
  cr_assert_arr_eq (got, want, sizeof got, "%s: not the data of %s", export,
                    snap);
  vol_close (v);
  cr_assert_eq (vol_stat (pool, export, &info), 0, "%s", cairn_errmsg ());
  cr_assert_str_eq (info.snap, snap, "vol_stat %s", export);
}

/* "VOL@TIME" (DESIGN §3) opens, describes and clones the newest snapshot
 * taken at or before TIME; an exact creation time is "at"; a time before
 * every snapshot or a malformed one names nothing; a damaged record, whose
 * time is unknown, is passed over.
 */
Test (points_in_time, newest_snapshot_at_or_before)
{
  uint64_t id, gen;
  struct cairn_dev *dev = make_pool (&id, &gen);
  struct cairn_pool *pool;
  struct vol_info info;
  struct cairn_volume *v;
  const char *snaps[] = { "a@s1", "a@s2", "a@s3" };

  pool = pool_open_ok (dev);
  for (unsigned i = 0; i < 3; i++) {
    cr_assert_eq (vol_stat (pool, snaps[i], &info), 0);
    set_ctime_to = T0 + 3600 * i;
    cr_assert_eq (pool_close (pool), 0);
    edit_snaprec (dev, id, info.gen, NULL, set_ctime);
    pool = pool_open_ok (dev);
  }
  expect_point (pool, "a@2026-12-01T00:00:00Z", "s1", 1);
  expect_point (pool, "a@2026-12-01T00:59:59Z", "s1", 1);
  expect_point (pool, "a@2026-12-01T01:00:00Z", "s2", 2);
  expect_point (pool, "a@2026-12-01T01:59:59Z", "s2", 2);
  expect_point (pool, "a@2030-01-01T00:00:00Z", "s3", 3);

  cr_assert_eq (vol_open (pool, "a@2026-11-30T23:59:59Z", &v), -ENOENT);
  cr_assert (strstr (cairn_errmsg (), "volume 'a' has no snapshot or "
                     "checkpoint taken at or before 2026-11-30T23:59:59Z"),
             "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "a@2026-13-01T00:00:00Z", &v), -ENOENT);
  cr_assert_eq (vol_stat (pool, "a@2026-12-01T01:00", &info), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "neither a snapshot name nor a time of "
                     "the form YYYY-MM-DDTHH:MM:SSZ"), "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "b@2026-12-01T00:00:00Z", &v), -ENOENT,
                "b@s1 was taken now, after that time");
  expect_point (pool, "b@2099-01-01T00:00:00Z", "s1", 0);

  /* A clone from a point in time starts as that snapshot. */
  cr_assert_eq (vol_clone (pool, "a@2026-12-01T01:30:00Z", "c"), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_stat (pool, "c", &info), 0);
  cr_assert_eq (info.origin_gen, gen, "the clone is not of a@s2");
  cr_assert_eq (pool_close (pool), 0);

  /* a@s3's record damaged: its time is unknown, the newest readable one
   * before 2030 is s2.
   */
  cr_assert_eq (vol_stat (pool = pool_open_ok (dev), "a@s3", &info), 0);
  cr_assert_eq (pool_close (pool), 0);
  edit_snaprec (dev, id, info.gen, NULL, zero_guid);
  pool = pool_open_ok (dev);
  expect_point (pool, "a@2030-01-01T00:00:00Z", "s2", 2);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* The time parser takes exactly YYYY-MM-DDTHH:MM:SSZ of a real UTC date. */
Test (points_in_time, parse_time)
{
  static const struct { const char *s; int64_t t; } cases[] = {
    { "1970-01-01T00:00:00Z", 0 },
    { "2000-02-29T00:00:00Z", 951782400 },
    { "2026-12-01T00:00:00Z", T0 },
    { "2026-12-02T10:00:00Z", T0 + 86400 + 36000 },
    { "2100-03-01T23:59:59Z", 4107628799 },
    { "1969-12-31T23:59:59Z", -1 },
    { "2001-02-29T00:00:00Z", -1 },
    { "2100-02-29T00:00:00Z", -1 },
    { "2026-04-31T00:00:00Z", -1 },
    { "2026-12-02T24:00:00Z", -1 },
    { "2026-12-02T10:60:00Z", -1 },
    { "2026-12-02T10:00:00", -1 },
    { "2026-12-02 10:00:00Z", -1 },
    { "2026-12-2T10:00:00Z", -1 },
    { "2026-12-02T10:00:00+00:00", -1 },
    { "+026-12-02T10:00:00Z", -1 },
    { "", -1 },
  };

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t t = 12345;
    int r = cat_parse_time (cases[i].s, &t);

    if (cases[i].t < 0)
      cr_assert_eq (r, -1, "'%s' parsed as %" PRIu64, cases[i].s, t);
    else {
      cr_assert_eq (r, 0, "'%s' not parsed", cases[i].s);
      cr_assert_eq (t, (uint64_t) cases[i].t, "'%s': %" PRIu64, cases[i].s, t);
    }
  }
}
