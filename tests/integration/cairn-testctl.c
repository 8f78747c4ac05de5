/* cairn-testctl: a TEST FIXTURE, not a user command.
 *
 * The integration tests need volumes and snapshots in a pool before they
 * start nbdkit, and until the control server and `cairn` grow volume
 * commands nothing else makes them.  This program calls the engine's
 * catalog API (engine/volume.h) directly on a stopped pool, one operation
 * per run, and commits it by closing the pool.  It is built by `make check`
 * only, never installed, and has no options beyond what the tests use;
 * once `cairn --pool PATH vol create ...` exists, tests should move to it.
 *
 *   cairn-testctl create   POOL VOL SIZE      (SIZE: bytes or 64M, 1G, ...)
 *   cairn-testctl snapshot POOL VOL SNAP
 *   cairn-testctl clone    POOL SRC NEW       (SRC: VOL or VOL@SNAP)
 *   cairn-testctl readonly POOL VOL on|off
 *   cairn-testctl delete   POOL VOL           (with its snapshots)
 *   cairn-testctl list     POOL               (one line per export:
 *                                              NAME SIZE ro|rw GEN ORIGIN,
 *                                              ORIGIN: a clone's origin
 *                                              generation, else 0)
 *   cairn-testctl damage-snapshot POOL VOL SNAP
 *                                             (rewrite VOL@SNAP's catalog
 *                                              record with GUID 0, through
 *                                              the engine's B-tree: checksums
 *                                              stay valid, the record does
 *                                              not decode)
 *   cairn-testctl damage-volume POOL VOL
 *                                             (rewrite VOL's catalog record
 *                                              with a name length past its
 *                                              end, the same way)
 *   cairn-testctl many POOL PREFIX NVOLS NSNAPS
 *                                             (volumes PREFIX/v00000... of
 *                                              1 MiB, then NSNAPS snapshots
 *                                              s00000... of all of them at
 *                                              once: NVOLS x NSNAPS states
 *                                              in NVOLS + NSNAPS commits)
 *
 * Exit status: 0 done, 1 the engine refused (its message on stderr),
 * 2 usage error.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog-int.h"
#include "dev.h"
#include "pool.h"
#include "volume.h"
#include "units.h"

/* Print the usage on stderr; returns 2. */
static int
usage (void)
{
  fprintf (stderr,
           "usage: cairn-testctl create POOL VOL SIZE\n"
           "       cairn-testctl snapshot POOL VOL SNAP\n"
           "       cairn-testctl clone POOL SRC NEW\n"
           "       cairn-testctl readonly POOL VOL on|off\n"
           "       cairn-testctl delete POOL VOL\n"
           "       cairn-testctl list POOL\n"
           "       cairn-testctl damage-snapshot POOL VOL SNAP\n"
           "       cairn-testctl damage-volume POOL VOL\n"
           "       cairn-testctl many POOL PREFIX NVOLS NSNAPS\n"
           "(a test fixture: see tests/integration/cairn-testctl.c)\n");
  return 2;
}

/* vol_list callback: print one export. */
static int
print_export (void *opaque, const struct vol_info *info)
{
  if (info->is_snapshot)
    printf ("%s@%s %" PRIu64 " ro %" PRIu64 " 0\n", info->name, info->snap,
            info->size, info->gen);
  else
    printf ("%s %" PRIu64 " %s %" PRIu64 " %" PRIu64 "\n", info->name,
            info->size, info->readonly ? "ro" : "rw", info->gen,
            info->origin_gen);
  return 0;
}

/* Rewrite the root tree item key (klen bytes, a value of at least min
 * bytes) with edit applied, committed with the pool's close.
 */
static int
damage_item (struct cairn_pool *pool, const uint8_t *key, size_t klen,
             size_t min, void (*edit) (uint8_t *val))
{
  struct btree *root = pool_root_tree (pool);
  uint8_t val[VOLREC_FIXED + VOL_NAME_MAX + VOLREC_HELD];
  size_t len;
  int r = txn_begin (pool);

  if (r < 0)
    return r;
  btree_wrlock (root);
  r = btree_lookup (root, key, klen, val, sizeof val, &len);
  if (r == 0 && len < min)
    r = cairn_fail (-EIO, "the record is damaged already");
  if (r == 0) {
    edit (val);
    r = btree_insert (root, key, klen, val, len, BTREE_RESERVE);
  }
  btree_unlock (root);
  if (r == 0)
    txn_mark_dirty (pool);
  txn_end (pool);
  return r;
}

/* A snapshot record with GUID 0. */
static void
zero_guid (uint8_t *val)
{
  put_le64 (val + 24, 0);
}

/* A volume record whose name length runs past its end. */
static void
bad_name_length (uint8_t *val)
{
  put_le16 (val + 72, 200);
}

/* Make snapshot vol@snap's record undecodable. */
static int
damage_snapshot (struct cairn_pool *pool, const char *vol, const char *snap)
{
  char name[2 * VOL_NAME_MAX + 2];
  struct vol_info info;
  uint8_t key[17];
  int r;

  snprintf (name, sizeof name, "%s@%s", vol, snap);
  r = vol_stat (pool, name, &info);
  if (r < 0)
    return r;
  cat_key (key, RK_SNAP, info.id, info.gen);
  return damage_item (pool, key, 17, SNAPREC_FIXED, zero_guid);
}

/* Make volume vol's record undecodable. */
static int
damage_volume (struct cairn_pool *pool, const char *vol)
{
  struct vol_info info;
  uint8_t key[17];
  int r = vol_stat (pool, vol, &info);

  if (r < 0)
    return r;
  cat_key (key, RK_VOL, info.id, 0);
  return damage_item (pool, key, 9, VOLREC_FIXED, bad_name_length);
}

/* NVOLS volumes under prefix, then NSNAPS snapshots of each, all volumes
 * at once (snap_create_prefix).
 */
static int
many (struct cairn_pool *pool, const char *prefix, const char *nvols_s,
      const char *nsnaps_s)
{
  unsigned long nvols = strtoul (nvols_s, NULL, 10);
  unsigned long nsnaps = strtoul (nsnaps_s, NULL, 10);
  char name[VOL_NAME_MAX + 1];
  uint64_t id;
  int r = 0;

  if (nvols == 0 || nvols > 99999 || nsnaps > 99999)
    return 1;
  for (unsigned long i = 0; r == 0 && i < nvols; i++) {
    snprintf (name, sizeof name, "%s/v%05lu", prefix, i);
    r = vol_create (pool, name, 1 << 20, &id);
  }
  for (unsigned long i = 0; r == 0 && i < nsnaps; i++) {
    snprintf (name, sizeof name, "s%05lu", i);
    r = snap_create_prefix (pool, prefix, name);
  }
  return r;
}

/* Run one operation on an open pool. */
static int
run (struct cairn_pool *pool, const char *cmd, int argc, char **argv)
{
  uint64_t size, id;

  if (strcmp (cmd, "create") == 0 && argc == 2) {
    if (units_parse_size (argv[1], &size) < 0)
      return -EINVAL;
    return vol_create (pool, argv[0], size, &id);
  }
  if (strcmp (cmd, "snapshot") == 0 && argc == 2)
    return snap_create (pool, argv[0], argv[1]);
  if (strcmp (cmd, "clone") == 0 && argc == 2)
    return vol_clone (pool, argv[0], argv[1]);
  if (strcmp (cmd, "readonly") == 0 && argc == 2)
    return vol_set_readonly (pool, argv[0], strcmp (argv[1], "on") == 0);
  if (strcmp (cmd, "delete") == 0 && argc == 1)
    return vol_delete (pool, argv[0], VOL_DELETE_RECURSIVE);
  if (strcmp (cmd, "list") == 0 && argc == 0)
    return vol_list (pool, true, print_export, NULL);
  if (strcmp (cmd, "damage-snapshot") == 0 && argc == 2)
    return damage_snapshot (pool, argv[0], argv[1]);
  if (strcmp (cmd, "damage-volume") == 0 && argc == 1)
    return damage_volume (pool, argv[0]);
  if (strcmp (cmd, "many") == 0 && argc == 3)
    return many (pool, argv[0], argv[1], argv[2]);
  return 1;                     /* usage */
}

int
main (int argc, char **argv)
{
  struct pool_open_opts opts = { .readonly = false };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  int r;

  if (argc < 3)
    return usage ();
  opts.readonly = strcmp (argv[1], "list") == 0;
  r = dev_open (argv[2], opts.readonly ? DEV_RDONLY : 0, 0, &dev);
  if (r < 0)
    goto engine_failed;
  r = pool_open (dev, &opts, &pool);
  if (r < 0) {
    dev_close (dev);
    goto engine_failed;
  }
  r = run (pool, argv[1], argc - 3, argv + 3);
  if (r == 1) {
    pool_close (pool);
    dev_close (dev);
    return usage ();
  }
  if (r < 0) {
    fprintf (stderr, "cairn-testctl %s: %s\n", argv[1], cairn_errmsg ());
    pool_close (pool);
    dev_close (dev);
    return 1;
  }
  r = pool_close (pool);
  dev_close (dev);
  if (r < 0)
    goto engine_failed;
  return 0;

 engine_failed:
  fprintf (stderr, "cairn-testctl %s: %s\n", argv[1], cairn_errmsg ());
  return 1;
}
