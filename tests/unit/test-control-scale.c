/* Unit tests for what the catalog methods cost against the pool's
 * snapshot count (issue #27): describing one object, as every
 * snapshot.create reply does, must look up what it names, not walk every
 * snapshot of the pool.  The measure is the node cache's hits plus misses
 * (nodes read), which does not depend on the machine's speed.
 */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "btree.h"
#include "control.h"
#include "methods.h"
#include "rpc.h"
#include "volume.h"

#define POOL_SIZE (64ull * 1024 * 1024)
#define MANY 2000

static struct cairn_dev *dev;
static struct cairn_pool *pool;
static struct cairn_methods_ctx mctx;
static const struct control_config cfg = {
  .tables = &cairn_catalog_methods, .n_tables = 1, .opaque = &mctx,
};

/* Open a pool on a memory device. */
static void
setup (void)
{
  cr_assert_eq (dev_mem_create (POOL_SIZE, &dev), 0);
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_open (dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  mctx.pool = pool;
}

/* Close it. */
static void
teardown (void)
{
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
}

TestSuite (scale, .init = setup, .fini = teardown);

/* Nodes the pool's cache has handed out so far. */
static uint64_t
nodes_read (void)
{
  struct nodecache_stats st;

  nodecache_stats (pool_cache (pool), &st);
  return st.hits + st.misses;
}

/* Take snapshot vol@snap through the snapshot.create method; the nodes
 * that cost, and the reply's "origin" in origin.
 */
static uint64_t
create (const char *vol, const char *snap, char origin[64])
{
  struct control_reply rep;
  char *line, *reply, full[64];
  size_t len;
  uint64_t before;
  json_t *obj;

  cr_assert_geq (asprintf (&line, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":"
                           "\"snapshot.create\",\"params\":{\"volume\":\"%s\","
                           "\"name\":\"%s\"}}", vol, snap), 0);
  before = nodes_read ();
  cr_assert_eq (control_call_local (&cfg, line, strlen (line), &reply, &len),
                0, "%s", cairn_errmsg ());
  before = nodes_read () - before;
  cr_assert_eq (control_parse_reply (reply, len - 1, &rep), 0, "%s", reply);
  cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT, "%s", reply);
  obj = json_array_get (json_object_get (rep.result, "snapshots"), 0);
  snprintf (full, sizeof full, "%s@%s", vol, snap);
  cr_assert_str_eq (json_string_value (json_object_get (obj, "name")), full,
                    "%s", reply);
  snprintf (origin, 64, "%s", json_is_string (json_object_get (obj, "origin"))
            ? json_string_value (json_object_get (obj, "origin")) : "null");
  control_reply_free (&rep);
  free (reply);
  free (line);
  return before;
}

/* snapshot.create reads about as many nodes with MANY snapshots in the
 * pool as with one, and still names a clone's origin.
 */
Test (scale, snapshot_create_reads_no_other_snapshot)
{
  char origin[64], snap[32];
  uint64_t few, many_same, many_other;

  cr_assert_eq (vol_create (pool, "a", 1 << 20, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (snap_create (pool, "a", "gold"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_clone (pool, "a@gold", "c"), 0, "%s", cairn_errmsg ());
  few = create ("c", "first", origin);
  cr_assert_str_eq (origin, "a@gold");

  for (unsigned i = 0; i < MANY; i++) {
    snprintf (snap, sizeof snap, "s%u", i);
    cr_assert_eq (snap_create (pool, "a", snap), 0, "%s", cairn_errmsg ());
  }
  many_other = create ("c", "second", origin);
  cr_assert_str_eq (origin, "a@gold");
  many_same = create ("a", "last", origin);
  cr_assert_str_eq (origin, "null");
  fprintf (stderr, "nodes read by snapshot.create: %" PRIu64 " with 2 "
           "snapshots in the pool, %" PRIu64 " (another volume) and %"
           PRIu64 " (the same) with %d\n", few, many_other, many_same,
           MANY + 3);
  /* The catalog tree grows a level or two; a walk reads every record. */
  cr_assert_leq (many_other, 2 * few + 20, "%" PRIu64 " nodes, %" PRIu64
                 " with few snapshots", many_other, few);
  cr_assert_leq (many_same, 2 * few + 20, "%" PRIu64 " nodes, %" PRIu64
                 " with few snapshots", many_same, few);
}
