/* Cairn snapshot-count benchmark (issue #27): does taking a snapshot cost
 * more the more snapshots the pool holds?  It takes N snapshots of one
 * volume, one at a time, and prints the average time per snapshot over the
 * first 1,000 and over the last 1,000; then 1,000 of a volume created after
 * them (a new volume in a pool that holds N snapshots already).
 *
 * Two paths, both on a real pool file in --dir (default /var/tmp), removed
 * at the end:
 *   engine   snap_create (engine/volume.h), the catalog's own cost
 *   method   the "snapshot.create" method through control_call_local, the
 *            handler a server runs for a control connection, with its
 *            JSON reply (no socket)
 *
 * With --checkpoints the pool takes continuous checkpoints (as `cairn
 * mkpool` makes it), on a fake clock 5 s a step with keep-within long
 * enough to keep them all, and each snapshot is followed by a checkpoint
 * of a second volume: one 4 KiB write and a pool_commit, timed on its own.
 * So after N steps the pool holds N snapshots and N checkpoints, and the
 * lines say what a snapshot and a checkpoint cost over the first and the
 * last 1,000 of them.
 *
 * Build with `make -C build bench/bench-snapshots`; run
 * `build/bench/bench-snapshots [--count N] [--path engine|method] [--dir
 * DIR] [--checkpoints]` (N at least 2,000; default 10,000).
 */
#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dev.h"
#include "pool.h"
#include "volume.h"
#include "bench-util.h"

#define DIE(what) bench_die ("bench-snapshots", what)
#include "control.h"
#include "methods.h"
#include "rpc.h"

#define WINDOW 1000

/* Take snapshot vol@snap through the engine or the method table. */
static void
take (struct cairn_pool *pool, bool method, const char *vol, const char *snap)
{
  struct cairn_methods_ctx mctx = { .pool = pool };
  struct control_config cfg = {
    .tables = &cairn_catalog_methods, .n_tables = 1, .opaque = &mctx,
  };
  struct control_reply rep = { 0 };
  char *line, *reply = NULL;
  size_t len, reply_len;
  json_t *id, *params;

  if (!method) {
    if (snap_create (pool, vol, snap) < 0)
      DIE ("snap_create");
    return;
  }
  id = json_integer (1);
  params = json_pack ("{s:s, s:s}", "volume", vol, "name", snap);
  line = control_format_request (id, "snapshot.create", params, &len);
  if (line == NULL)
    DIE ("format the request");
  if (control_call_local (&cfg, line, len - 1, &reply, &reply_len) < 0 ||
      reply == NULL || control_parse_reply (reply, reply_len - 1, &rep) < 0)
    DIE ("snapshot.create");
  if (rep.kind != CONTROL_REPLY_RESULT) {
    fprintf (stderr, "bench-snapshots: snapshot.create: %s\n", reply);
    exit (1);
  }
  control_reply_free (&rep);
  free (reply);
  free (line);
  json_decref (params);
  json_decref (id);
}

/* The fake clock of --checkpoints. */
static int64_t fake_now = BENCH_T0;

/* Take one checkpoint of ck: a 4 KiB write and a commit 5 s later. */
static void
checkpoint (struct cairn_pool *pool, struct cairn_volume *ck, unsigned i)
{
  uint64_t buf[512];

  for (size_t j = 0; j < 512; j++)
    buf[j] = (uint64_t) i << 20 | j;
  fake_now += 5;
  if (vol_pwrite (ck, buf, sizeof buf, (uint64_t) (i % 16384) * 4096, 0) < 0 ||
      pool_commit (pool) < 0)
    DIE ("checkpoint");
}

/* Take snapshots first..first+n-1 of vol (each followed by a checkpoint of
 * ck, unless NULL); the average ms per snapshot, and per checkpoint in
 * *ckms.
 */
static double
take_many (struct cairn_pool *pool, bool method, const char *vol,
           unsigned first, unsigned n, struct cairn_volume *ck, double *ckms)
{
  double snaps = 0, ckpts = 0, t;
  char snap[32];

  for (unsigned i = first; i < first + n; i++) {
    snprintf (snap, sizeof snap, "s%u", i);
    t = bench_now ();
    take (pool, method, vol, snap);
    snaps += bench_now () - t;
    if (ck) {
      t = bench_now ();
      checkpoint (pool, ck, i);
      ckpts += bench_now () - t;
    }
  }
  if (ckms)
    *ckms = ckpts * 1000 / n;
  return snaps * 1000 / n;
}

int
main (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "count", required_argument, NULL, 'n' },
    { "path", required_argument, NULL, 'p' },
    { "dir", required_argument, NULL, 'd' },
    { "checkpoints", no_argument, NULL, 'c' },
    { NULL, 0, NULL, 0 },
  };
  const char *dir = "/var/tmp";
  unsigned count = 10000;
  bool method = false, ckpt = false;
  struct pool_format_opts fo = { .checkpoints = false };
  struct cairn_volume *ck = NULL;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  double first, last, fresh, ck_first = 0, ck_last = 0, ck_fresh = 0;
  char path[4096];
  int c;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1) {
    if (c == 'n')
      count = (unsigned) strtoul (optarg, NULL, 10);
    else if (c == 'p' && (!strcmp (optarg, "engine") || !strcmp (optarg, "method")))
      method = !strcmp (optarg, "method");
    else if (c == 'd')
      dir = optarg;
    else if (c == 'c')
      ckpt = true;
    else
      count = 0;
  }
  if (count < 2 * WINDOW || optind != argc) {
    fprintf (stderr, "usage: bench-snapshots [--count N (>= %u)] "
             "[--path engine|method] [--dir DIR] [--checkpoints]\n", 2 * WINDOW);
    return 2;
  }
  snprintf (path, sizeof path, "%s/bench-snapshots-%d.pool", dir, (int) getpid ());
  if (dev_file_open (path, DEV_CREATE, 4ull << 30, &dev) < 0)
    DIE ("create the pool file");
  fo.checkpoints = ckpt;
  if (pool_format (dev, &fo, NULL) < 0 || pool_open (dev, NULL, &pool) < 0)
    DIE ("pool");
  if (ckpt) {
    pool_set_clock (pool, bench_fake_clock, &fake_now);
    if (vol_checkpoint_set (pool, NULL, "keep-within", "10000w") < 0 ||
        vol_create (pool, "c", 64ull << 20, NULL) < 0 ||
        vol_open (pool, "c", &ck) < 0)
      DIE ("the checkpointed volume");
  }
  if (vol_create (pool, "a", 1ull << 30, NULL) < 0)
    DIE ("vol_create");
  first = take_many (pool, method, "a", 0, WINDOW, ck, &ck_first);
  take_many (pool, method, "a", WINDOW, count - 2 * WINDOW, ck, NULL);
  last = take_many (pool, method, "a", count - WINDOW, WINDOW, ck, &ck_last);
  if (vol_create (pool, "b", 1ull << 30, NULL) < 0)
    DIE ("vol_create");
  fresh = take_many (pool, method, "b", 0, WINDOW, ck, &ck_fresh);
  if (ck)
    vol_close (ck);
  if (pool_close (pool) < 0)
    DIE ("close");
  dev_close (dev);
  unlink (path);

  printf ("%s: %u snapshots of one volume: %.3f ms per snapshot over the "
          "first %u, %.3f ms over the last %u (%.2fx); %u of a new volume "
          "then: %.3f ms\n", method ? "method snapshot.create" : "engine snap_create",
          count, first, WINDOW, last, WINDOW, last / first, WINDOW, fresh);
  if (ckpt)
    printf ("checkpoint (4 KiB write + pool_commit) after each: %.3f ms over "
            "the first %u, %.3f ms over the last %u (%.2fx), %.3f ms over "
            "the new volume's %u\n", ck_first, WINDOW, ck_last, WINDOW,
            ck_last / ck_first, ck_fresh, WINDOW);
  return 0;
}
