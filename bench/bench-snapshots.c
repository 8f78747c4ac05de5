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
 * Build with `make -C build bench/bench-snapshots`; run
 * `build/bench/bench-snapshots [--count N] [--path engine|method] [--dir
 * DIR]` (N at least 2,000; default 10,000).
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
#include "control.h"
#include "methods.h"
#include "rpc.h"

#define WINDOW 1000

/* Seconds on the monotonic clock. */
static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Report what failed with the engine's message and exit. */
static void __attribute__ ((noreturn))
die (const char *what)
{
  fprintf (stderr, "bench-snapshots: %s: %s\n", what, cairn_errmsg ());
  exit (1);
}

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
      die ("snap_create");
    return;
  }
  id = json_integer (1);
  params = json_pack ("{s:s, s:s}", "volume", vol, "name", snap);
  line = control_format_request (id, "snapshot.create", params, &len);
  if (line == NULL)
    die ("format the request");
  if (control_call_local (&cfg, line, len - 1, &reply, &reply_len) < 0 ||
      reply == NULL || control_parse_reply (reply, reply_len - 1, &rep) < 0)
    die ("snapshot.create");
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

/* Take snapshots first..first+n-1 of vol; the average ms per snapshot. */
static double
take_many (struct cairn_pool *pool, bool method, const char *vol,
           unsigned first, unsigned n)
{
  double t0 = now ();
  char snap[32];

  for (unsigned i = first; i < first + n; i++) {
    snprintf (snap, sizeof snap, "s%u", i);
    take (pool, method, vol, snap);
  }
  return (now () - t0) * 1000 / n;
}

int
main (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "count", required_argument, NULL, 'n' },
    { "path", required_argument, NULL, 'p' },
    { "dir", required_argument, NULL, 'd' },
    { NULL, 0, NULL, 0 },
  };
  const char *dir = "/var/tmp";
  unsigned count = 10000;
  bool method = false;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  double first, last, fresh;
  char path[4096];
  int c;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1) {
    if (c == 'n')
      count = (unsigned) strtoul (optarg, NULL, 10);
    else if (c == 'p' && (!strcmp (optarg, "engine") || !strcmp (optarg, "method")))
      method = !strcmp (optarg, "method");
    else if (c == 'd')
      dir = optarg;
    else
      count = 0;
  }
  if (count < 2 * WINDOW || optind != argc) {
    fprintf (stderr, "usage: bench-snapshots [--count N (>= %u)] "
             "[--path engine|method] [--dir DIR]\n", 2 * WINDOW);
    return 2;
  }
  snprintf (path, sizeof path, "%s/bench-snapshots-%d.pool", dir, (int) getpid ());
  if (dev_file_open (path, DEV_CREATE, 4ull << 30, &dev) < 0)
    die ("create the pool file");
  if (pool_format (dev, NULL, NULL) < 0 || pool_open (dev, NULL, &pool) < 0)
    die ("pool");
  if (vol_create (pool, "a", 1ull << 30, NULL) < 0)
    die ("vol_create");
  first = take_many (pool, method, "a", 0, WINDOW);
  take_many (pool, method, "a", WINDOW, count - 2 * WINDOW);
  last = take_many (pool, method, "a", count - WINDOW, WINDOW);
  if (vol_create (pool, "b", 1ull << 30, NULL) < 0)
    die ("vol_create");
  fresh = take_many (pool, method, "b", 0, WINDOW);
  if (pool_close (pool) < 0)
    die ("close");
  dev_close (dev);
  unlink (path);

  printf ("%s: %u snapshots of one volume: %.3f ms per snapshot over the "
          "first %u, %.3f ms over the last %u (%.2fx); %u of a new volume "
          "then: %.3f ms\n", method ? "method snapshot.create" : "engine snap_create",
          count, first, WINDOW, last, WINDOW, last / first, WINDOW, fresh);
  return 0;
}
