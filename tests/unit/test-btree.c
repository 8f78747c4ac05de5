/* Unit tests for the copy-on-write B-tree (engine/btree*.c) on a real pool
 * in memory: operations, cursors, limits, corruption detection, and a
 * randomised model test of a million operations with commits and reopens.
 * test-btree-shapes.c has the histories that build tree shapes in bulk.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "btree-int.h"
#include "test-btree.h"

Test (btree, empty_tree)
{
  struct env e;
  uint8_t k[8];

  env_open (&e, 64 << 20, 0, 8 << 20);
  k64 (k, 1);
  cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), -ENOENT);
  cr_assert_eq (del (&e, k, 8), -ENOENT);
  cr_assert (strstr (cairn_errmsg (), "not found") != NULL);
  env_reopen (&e);
  cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), -ENOENT);
  env_close (&e);
}

Test (btree, insert_lookup_replace_delete)
{
  struct env e;
  uint8_t k[8], v[64];
  size_t vl;

  env_open (&e, 64 << 20, 0, 8 << 20);
  k64 (k, 42);
  cr_assert_eq (put (&e, k, 8, "hello", 5, 0), 0);
  cr_assert_eq (get (&e, k, 8, v, sizeof v, &vl), 0);
  cr_assert_eq (vl, 5);
  cr_assert_arr_eq (v, "hello", 5);
  cr_assert_eq (put (&e, k, 8, "bye", 3, BTREE_NOOVERWRITE), -EEXIST);
  cr_assert_eq (put (&e, k, 8, "world!", 6, 0), 0);
  cr_assert_eq (get (&e, k, 8, v, sizeof v, &vl), 0);
  cr_assert_eq (vl, 6);
  cr_assert_arr_eq (v, "world!", 6);
  /* A short buffer gets a prefix and the full length. */
  cr_assert_eq (get (&e, k, 8, v, 2, &vl), 0);
  cr_assert_eq (vl, 6);
  cr_assert_eq (del (&e, k, 8), 0);
  cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), -ENOENT);
  env_close (&e);
}

Test (btree, limits)
{
  struct env e;
  uint8_t big[70000] = { 0 };
  size_t maxv;

  env_open (&e, 64 << 20, 4096, 8 << 20);
  maxv = btree_max_value (pool_cache (e.pool), 8);
  cr_assert_gt (maxv, 800);
  cr_assert_eq (put (&e, big, 8, big, maxv, 0), 0);
  cr_assert_eq (put (&e, big, 8, big, maxv + 1, 0), -E2BIG);
  cr_assert (strstr (cairn_errmsg (), "too large") != NULL);
  cr_assert_eq (put (&e, big, BTREE_MAX_KEY + 1, "", 0, 0), -E2BIG);
  /* The empty key is a key like any other. */
  cr_assert_eq (put (&e, "", 0, "e", 1, 0), 0);
  cr_assert_eq (get (&e, "", 0, NULL, 0, NULL), 0);
  env_close (&e);
}

/* Fill a tree in random order, check order through a cursor, delete it
 * all; every node block comes back (BT-5, BT-3 through the allocator).
 */
Test (btree, fill_iterate_and_empty)
{
  const uint64_t n = 30000;
  struct pool_info before, after;
  struct btree_cursor *cur;
  uint64_t *perm = malloc (n * sizeof *perm), expect;
  struct rng r = { test_seed ("btree.fill_iterate_and_empty", 7) };
  struct env e;
  uint8_t k[8];
  int rc;

  env_open (&e, 128 << 20, 4096, 2 << 20);
  cr_assert_eq (pool_commit (e.pool), 0);
  pool_info (e.pool, &before);
  for (uint64_t i = 0; i < n; i++)
    perm[i] = i;
  for (uint64_t i = n - 1; i > 0; i--) {
    uint64_t j = rng_below (&r, i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint8_t v[40];
    k64 (k, perm[i] * 2);
    fill_pattern (v, sizeof v, perm[i]);
    cr_assert_eq (put (&e, k, 8, v, 1 + perm[i] % 40, 0), 0, "%s", cairn_errmsg ());
    if (i % 5000 == 0)
      cr_assert_eq (pool_commit (e.pool), 0, "%s", cairn_errmsg ());
  }
  env_reopen (&e);

  /* Every key, in order, with the right value. */
  cr_assert_eq (btree_cursor_new (e.t, &cur), 0);
  expect = 0;
  for (rc = btree_cursor_seek (cur, NULL, 0); rc == 0; rc = btree_cursor_next (cur)) {
    const uint8_t *key, *val;
    size_t kl, vl;
    uint8_t v[40];

    btree_cursor_item (cur, &key, &kl, &val, &vl);
    cr_assert_eq (kl, 8);
    cr_assert_eq (get_be64 (key), expect * 2);
    fill_pattern (v, sizeof v, expect);
    cr_assert_eq (vl, 1 + expect % 40);
    cr_assert_arr_eq (val, v, vl);
    expect++;
  }
  cr_assert_eq (rc, -ENOENT);
  cr_assert_eq (expect, n);
  /* Seek lands on the first key >= the target, odd targets included. */
  k64 (k, 1001);
  cr_assert_eq (btree_cursor_seek (cur, k, 8), 0);
  {
    const uint8_t *key, *val;
    size_t kl, vl;
    btree_cursor_item (cur, &key, &kl, &val, &vl);
    cr_assert_eq (get_be64 (key), 1002);
  }
  k64 (k, n * 2);
  cr_assert_eq (btree_cursor_seek (cur, k, 8), -ENOENT);
  btree_cursor_free (cur);

  for (uint64_t i = 0; i < n; i++) {
    k64 (k, perm[(i * 7) % n] * 2);
    cr_assert_eq (del (&e, k, 8), 0, "delete %" PRIu64 ": %s", i, cairn_errmsg ());
  }
  {
    struct btree_root root;
    btree_get_root (e.t, &root);
    cr_assert_eq (root.bp.addr, 0, "an emptied tree has no root node");
  }
  /* Two commits: the second releases the first's deferred frees. */
  cr_assert_eq (pool_commit (e.pool), 0);
  env_reopen (&e);
  pool_info (e.pool, &after);
  /* The space map's log grew meanwhile: its blocks are not leaks. */
  cr_assert_eq (after.space.allocated - after.spacemap_blocks,
                before.space.allocated - before.spacemap_blocks,
                "allocated %" PRIu64 " blocks (%" PRIu64 " of them the space "
                "map) after emptying, %" PRIu64 " (%" PRIu64 ") before",
                after.space.allocated, after.spacemap_blocks,
                before.space.allocated, before.spacemap_blocks);
  env_close (&e);
  free (perm);
}

/* seek_le lands on the last key <= the target (the extent map's lookup of
 * the extent that may cover a block), across leaves and after deletes
 * that empty whole runs of leaves, else on the first key; next goes on
 * from there in order.  Against a model, with a cache smaller than the
 * tree after a reopen.
 */
Test (btree, seek_le_against_a_model)
{
  enum { SPACE = 40000 };
  struct rng r = { test_seed ("btree.seek_le_against_a_model", 11) };
  bool *present = calloc (SPACE, sizeof *present);
  struct btree_cursor *cur;
  struct env e;
  uint8_t k[8], v[24];

  cr_assert (present);
  env_open (&e, 128 << 20, 4096, 256 << 10);
  for (uint64_t i = 0; i < 12000; i++) {
    uint64_t key = 1 + rng_below (&r, SPACE - 1);   /* key 0 stays absent */
    k64 (k, key);
    fill_pattern (v, sizeof v, key);
    cr_assert_eq (put (&e, k, 8, v, sizeof v, 0), 0, "%s", cairn_errmsg ());
    present[key] = true;
  }
  /* Empty a few long runs, whole leaves included. */
  for (int run = 0; run < 6; run++) {
    uint64_t from = rng_below (&r, SPACE - 2000), len = 200 + rng_below (&r, 1800);
    for (uint64_t key = from; key < from + len; key++)
      if (present[key]) {
        k64 (k, key);
        cr_assert_eq (del (&e, k, 8), 0, "%s", cairn_errmsg ());
        present[key] = false;
      }
  }
  cr_assert_eq (pool_commit (e.pool), 0, "%s", cairn_errmsg ());
  env_reopen (&e);

  cr_assert_eq (btree_cursor_new (e.t, &cur), 0);
  btree_rdlock (e.t);
  for (int i = 0; i < 4000; i++) {
    uint64_t target = i < 2 ? (uint64_t) i * (SPACE + 5) : rng_below (&r, SPACE + 10);
    int64_t want = -1, first = -1, next = -1;
    const uint8_t *key, *val;
    size_t kl, vl;

    for (int64_t j = MIN (target, (uint64_t) SPACE - 1); j >= 0; j--)
      if (present[j]) {
        want = j;
        break;
      }
    for (uint64_t j = 0; j < SPACE && first < 0; j++)
      if (present[j])
        first = (int64_t) j;
    if (want < 0)
      want = first;
    for (uint64_t j = (uint64_t) want + 1; j < SPACE && next < 0; j++)
      if (present[j])
        next = (int64_t) j;
    k64 (k, target);
    cr_assert_eq (btree_cursor_seek_le (cur, k, 8), 0, "%s", cairn_errmsg ());
    btree_cursor_item (cur, &key, &kl, &val, &vl);
    cr_assert_eq (get_be64 (key), (uint64_t) want, "seek_le %" PRIu64 " gave %"
                  PRIu64 ", want %" PRId64, target, get_be64 (key), want);
    fill_pattern (v, sizeof v, (uint64_t) want);
    cr_assert_arr_eq (val, v, sizeof v);
    if (next < 0)
      cr_assert_eq (btree_cursor_next (cur), -ENOENT);
    else {
      cr_assert_eq (btree_cursor_next (cur), 0);
      btree_cursor_item (cur, &key, &kl, &val, &vl);
      cr_assert_eq (get_be64 (key), (uint64_t) next, "next after %" PRId64, want);
    }
  }
  btree_unlock (e.t);
  btree_cursor_free (cur);
  env_close (&e);
  free (present);
}

/* A bit flipped in a committed node is caught by its checksum, with a
 * message naming the block, and the pool's other data is unaffected.
 */
Test (btree, bitflip_in_node_detected)
{
  struct nodecache_stats st;
  struct btree_root root;
  struct env e;
  uint8_t k[8], byte;
  char want[64];

  env_open (&e, 64 << 20, 0, 8 << 20);
  for (uint64_t i = 0; i < 10; i++) {
    k64 (k, i);
    cr_assert_eq (put (&e, k, 8, "v", 1, 0), 0);
  }
  env_reopen (&e);
  btree_get_root (e.t, &root);
  cr_assert_eq (dev_pread (e.dev, &byte, 1, root.bp.addr + 100), 0);
  byte ^= 0x04;
  cr_assert_eq (dev_pwrite (e.dev, &byte, 1, root.bp.addr + 100), 0);
  nodecache_drop_clean (pool_cache (e.pool));
  k64 (k, 3);
  cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), -EIO);
  snprintf (want, sizeof want, "block %" PRIu64, root.bp.addr >> BLOCK_SHIFT);
  cr_assert (strstr (cairn_errmsg (), "checksum mismatch") != NULL, "%s", cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "%s", cairn_errmsg ());
  nodecache_stats (pool_cache (e.pool), &st);
  cr_assert_geq (st.csum_errors, 1);
  /* Writing fails too, and changes nothing. */
  cr_assert_eq (put (&e, k, 8, "w", 1, 0), -EIO);
  {
    struct fsck_report rep;
    cr_assert_eq (pool_close (e.pool), 0);
    cr_assert_eq (fsck_pool (e.dev, NULL, &rep), 0);
    cr_assert_gt (rep.errors, 0, "fsck must report the damaged node");
  }
  dev_close (e.dev);
}

/* A clean parent remembers which children it found inside their ranges
 * (BT-2), and a child found outside its range is found there on every
 * walk.  The root's children 1 and 2 are swapped in the cached root before
 * any walk, as a node forged with good checksums would come from the disk.
 */
Test (btree, a_child_outside_its_range_is_found_on_every_walk)
{
  struct nodecache *c;
  struct btree_root root;
  struct blkptr a, b;
  struct node *n;
  struct env e;
  uint8_t k[8], v[100] = { 0 };
  const uint8_t *sep;
  size_t seplen;

  env_open (&e, 64 << 20, 4096, 8 << 20);
  for (uint64_t i = 0; i < 2000; i++) {
    k64 (k, i);
    cr_assert_eq (put (&e, k, 8, v, sizeof v, 0), 0, "%s", cairn_errmsg ());
  }
  env_reopen (&e);
  c = pool_cache (e.pool);
  btree_get_root (e.t, &root);
  cr_assert_eq (cache_get (c, &root.bp, &n), 0, "%s", cairn_errmsg ());
  cr_assert_eq (node_level (n), 1, "the tree should have leaves under its root");
  cr_assert_geq (node_nitems (n), 3);
  node_get_child (n, 1, &a);
  node_get_child (n, 2, &b);
  node_set_child (n, 1, &b);
  node_set_child (n, 2, &a);
  sep = node_key (n, 1, &seplen);
  cr_assert_eq (seplen, 8);
  memcpy (k, sep, 8);

  /* Child 0 is where it belongs: its bit is set, and is child 1's not. */
  cr_assert_eq (get (&e, (uint8_t[8]) { 0 }, 8, NULL, 0, NULL), 0,
                "%s", cairn_errmsg ());
  for (int walk = 0; walk < 3; walk++) {
    cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), -EIO, "walk %d", walk);
    cr_assert (strstr (cairn_errmsg (), "holds a key above its range") != NULL,
               "walk %d: %s", walk, cairn_errmsg ());
  }
  node_set_child (n, 1, &a);
  node_set_child (n, 2, &b);
  for (int walk = 0; walk < 2; walk++)
    cr_assert_eq (get (&e, k, 8, NULL, 0, NULL), 0, "%s", cairn_errmsg ());
  cache_put (c, n);
  env_close (&e);
}

/* ---------------------------------------------------------------- model */

#define MODEL_KEYS 20000u
#define MODEL_MAXV 300u

struct model {
  bool present[MODEL_KEYS];
  uint64_t ver[MODEL_KEYS];
  uint16_t vlen[MODEL_KEYS];
};

/* The key of model slot id: a 4-byte big-endian id, then 0..36 bytes, so
 * keys vary in length and memcmp order is id order.
 */
static size_t
model_key (uint32_t id, uint8_t k[64])
{
  size_t len = 4 + (id * 7919u) % 37u;

  k[0] = id >> 24;
  k[1] = id >> 16;
  k[2] = id >> 8;
  k[3] = id;
  for (size_t i = 4; i < len; i++)
    k[i] = (uint8_t) (id * 31u + i);
  return len;
}

/* Compare the whole tree with the model through a cursor. */
static void
model_compare (struct env *e, const struct model *m)
{
  struct btree_cursor *cur;
  uint32_t id = 0;
  int rc;

  cr_assert_eq (btree_cursor_new (e->t, &cur), 0);
  btree_rdlock (e->t);
  for (rc = btree_cursor_seek (cur, NULL, 0); rc == 0; rc = btree_cursor_next (cur)) {
    const uint8_t *key, *val;
    uint8_t want[MODEL_MAXV], wk[64];
    size_t kl, vl, wkl;

    btree_cursor_item (cur, &key, &kl, &val, &vl);
    while (id < MODEL_KEYS && !m->present[id])
      id++;
    cr_assert_lt (id, MODEL_KEYS, "tree has an item the model does not");
    wkl = model_key (id, wk);
    cr_assert_eq (kl, wkl, "key of slot %" PRIu32, id);
    cr_assert_arr_eq (key, wk, kl, "key of slot %" PRIu32, id);
    cr_assert_eq (vl, m->vlen[id], "value length of slot %" PRIu32, id);
    fill_pattern (want, vl, m->ver[id]);
    cr_assert_arr_eq (val, want, vl, "value of slot %" PRIu32, id);
    id++;
  }
  btree_unlock (e->t);
  cr_assert_eq (rc, -ENOENT, "%s", cairn_errmsg ());
  while (id < MODEL_KEYS)
    cr_assert (!m->present[id++], "the model has an item the tree lacks");
  btree_cursor_free (cur);
}

/* A million random inserts, updates, deletes and lookups (test_work: a
 * quarter of that under the sanitizers) with keys and values of varying
 * size, against a model; commits every few thousand operations, a reopen
 * (and a full comparison) every 100,000, and a metadata cache far smaller
 * than the tree.
 */
Test (btree, model_million_ops, .timeout = 600)
{
  const uint64_t ops = test_work (1000000);
  struct model *m = calloc (1, sizeof *m);
  struct rng r = { test_seed ("btree.model_million_ops", 20261202) };
  uint64_t ver = 1, inserts = 0, deletes = 0, lookups = 0;
  struct nodecache_stats st;
  struct env e;

  /* 4 KiB nodes make a deep tree; the cache holds a fraction of it. */
  env_open (&e, 256 << 20, 4096, 1 << 20);
  for (uint64_t op = 1; op <= ops; op++) {
    uint32_t id = (uint32_t) rng_below (&r, MODEL_KEYS);
    uint64_t dice = rng_below (&r, 100);
    uint8_t k[64], v[MODEL_MAXV];
    size_t kl = model_key (id, k), vl;

    if (dice < 45) {
      uint16_t len = (uint16_t) rng_below (&r, MODEL_MAXV);
      fill_pattern (v, len, ver);
      cr_assert_eq (put (&e, k, kl, v, len, 0), 0, "op %" PRIu64 ": %s", op, cairn_errmsg ());
      m->present[id] = true;
      m->ver[id] = ver++;
      m->vlen[id] = len;
      inserts++;
    }
    else if (dice < 70) {
      int rc = del (&e, k, kl);
      cr_assert_eq (rc, m->present[id] ? 0 : -ENOENT, "op %" PRIu64 " delete slot %"
                    PRIu32 ": %d %s", op, id, rc, cairn_errmsg ());
      m->present[id] = false;
      deletes++;
    }
    else {
      uint8_t want[MODEL_MAXV];
      int rc = get (&e, k, kl, v, sizeof v, &vl);
      cr_assert_eq (rc, m->present[id] ? 0 : -ENOENT, "op %" PRIu64 " lookup slot %"
                    PRIu32 ": %s", op, id, cairn_errmsg ());
      if (rc == 0) {
        cr_assert_eq (vl, m->vlen[id]);
        fill_pattern (want, vl, m->ver[id]);
        cr_assert_arr_eq (v, want, vl, "op %" PRIu64 " value of slot %" PRIu32, op, id);
      }
      lookups++;
    }
    if (op % 4096 == 0)
      cr_assert_eq (pool_commit (e.pool), 0, "%s", cairn_errmsg ());
    if (op % 100000 == 0) {
      /* Every node in memory is accounted for by the cache's limit: none
       * is held by a forgotten reference (regression: the commit kept one
       * on every frozen child).
       */
      cr_assert_eq (pool_commit (e.pool), 0);
      nodecache_stats (pool_cache (e.pool), &st);
      cr_assert_leq (st.bytes, 1 << 20, "the cache stays within its limit");
      cr_assert_leq (st.alive * 4096, (1 << 20) + 16 * 4096, "%" PRIu64
                     " nodes alive for a cache of %u", st.alive,
                     (1 << 20) / 4096);
      env_reopen (&e);
      model_compare (&e, m);
    }
  }
  nodecache_stats (pool_cache (e.pool), &st);
  cr_assert_gt (st.evictions + st.misses, 0);
  fprintf (stderr, "btree.model_million_ops: %" PRIu64 " inserts, %" PRIu64
           " deletes, %" PRIu64 " lookups\n", inserts, deletes, lookups);
  cr_assert_eq (pool_close (e.pool), 0);
  assert_fsck_clean (e.dev, "after the last operation");
  dev_close (e.dev);
  free (m);
}

/* Sequential inserts leave every node but the last of each level full (the
 * append policy) and start each new internal node with one child.  Keys
 * deleted from the end then empty such a lone child while its parent's
 * only sibling is full: the two cannot merge, and the empty child used to
 * stay in the tree, so the next descent there failed with "is empty"
 * (BT-5).  After every delete the last key left must be found and the
 * deleted one not; fsck checks the pool at the end.
 */
Test (btree, deletes_from_the_end_of_a_sequential_tree)
{
  enum { KEYS = 40000 };
  uint8_t k[8], v[8];
  struct env e;

  env_open (&e, 64 << 20, 4096, 4 << 20);
  for (uint64_t i = 0; i < KEYS; i++) {
    k64 (k, i);
    cr_assert_eq (put (&e, k, 8, k, 8, 0), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (pool_commit (e.pool), 0, "%s", cairn_errmsg ());
  for (uint64_t i = KEYS; i-- > 1;) {
    size_t vl;
    int rc;

    k64 (k, i);
    cr_assert_eq (del (&e, k, 8), 0, "delete %" PRIu64 ": %s", i,
                  cairn_errmsg ());
    rc = get (&e, k, 8, v, sizeof v, &vl);
    cr_assert_eq (rc, -ENOENT, "lookup of deleted %" PRIu64 ": %d %s", i, rc,
                  cairn_errmsg ());
    k64 (k, i - 1);
    rc = get (&e, k, 8, v, sizeof v, &vl);
    cr_assert_eq (rc, 0, "lookup of %" PRIu64 ": %d %s", i - 1, rc,
                  cairn_errmsg ());
    if (i % 5000 == 0)
      cr_assert_eq (pool_commit (e.pool), 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (pool_close (e.pool), 0);
  assert_fsck_clean (e.dev, "after the deletes from the end");
  dev_close (e.dev);
}
