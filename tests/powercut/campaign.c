/* Cairn power-cut campaign (issue 29; README.md next to this file).
 *
 * Every scenario is a scripted workload of steps (writes with and without
 * FUA, flushes, snapshots, clones, rollbacks, deletes and the reclaim
 * behind them, receives, resizes, checkpoints and their collection) that
 * runs on a fresh copy of a prepared pool image, on one device or on a
 * mirror of two, under power-cut devices that share one power supply.
 *
 * A scenario first runs without a cut (the dry run): it counts the
 * device's writes and flushes (the cut points), records the pool's world
 * (every listed volume, snapshot and checkpoint with its size and the
 * SHA-256 of its contents) after every step, and checks that world against
 * a model kept by the workload itself (what the writes, snapshots, clones,
 * rollbacks, deletes, receives and resizes should have made).  Then each
 * cut point i runs the workload again with the power cut just before the
 * device's ((i mod T) + 1)-th write or flush, with a cut policy and seed
 * drawn from (seed, scenario, i).  After the cut:
 *
 *  C1. fsck finds nothing wrong, reading every copy of every block it
 *      reaches against its checksum;
 *  C2. the pool opens, and its world is the world after some step k with
 *      acked <= k <= reached, where acked is the last step that was durable
 *      when it returned (a FUA write, a flush, a catalog change, a close)
 *      and reached the step the cut interrupted: everything acknowledged
 *      durable is there, and every step is there wholly or not at all, in
 *      order;
 *  C3. no step reported durable after the power had gone;
 *  C4. the pool takes a new volume, a FUA write and a snapshot, closes,
 *      fsck is clean again, and it reopens with them.
 *
 * A failure prints the scenario, the cut point, the seed and the command
 * that replays it, and the campaign goes on.  Workers are forked processes
 * (--jobs); a worker that crashes is reported with the cut it was on.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "campaign.h"
#include "fsck.h"
#include "replicate.h"
#include "volume.h"

/* ---------------------------------------------------------------- images */

/* A prepared pool: its member devices (one, or two of a mirror), the
 * model of what it holds, and the dry run's record.
 */
struct image {
  const struct scenario *sc;
  unsigned index;             /* in scenarios[] */
  uint64_t seed;              /* the workload's */
  struct cairn_dev *member[2];
  bool *used[2];              /* chunks_used of each member */
  unsigned nmembers;
  struct model model;
  struct world worlds[MAX_STEPS];
  unsigned steps;             /* the dry run's */
  uint64_t ops;               /* its writes and flushes: the cut points */
};

static int64_t
run_clock (void *opaque)
{
  return *(int64_t *) opaque;
}

#define CLOCK_START INT64_C (1800000000)

/* The logical device over members: the one member, or their mirror. */
static int
logical_open (struct cairn_dev **members, unsigned n, struct cairn_dev **devp)
{
  if (n == 1) {
    *devp = members[0];
    return 0;
  }
  return dev_chunk_open (members, n, 0, devp);
}

static void
logical_close (struct cairn_dev *dev, unsigned n)
{
  if (n > 1)
    dev_close (dev);
}

#define COPY_CHUNK (64u * KiB)

/* Device i of the process's scratch pair, made a copy of member i of img:
 * the image's used chunks copied, every other chunk that holds anything
 * zeroed.  Reusing the same memory for every cut spares the page faults of
 * a fresh device, most of a cut's cost.
 */
static struct cairn_dev *
scratch_dev (unsigned i, struct cairn_dev *src, const bool *used)
{
  static struct cairn_dev *scratch[2];
  static const uint8_t zeros[COPY_CHUNK];
  uint8_t *buf = malloc (COPY_CHUNK);

  if (buf == NULL)
    abort ();
  if (scratch[i] == NULL && dev_mem_create (DEV_SIZE, &scratch[i]) < 0)
    abort ();
  for (uint64_t off = 0; off < DEV_SIZE; off += COPY_CHUNK) {
    if (used[off / COPY_CHUNK]) {
      if (dev_pread (src, buf, COPY_CHUNK, off) < 0 ||
          dev_pwrite (scratch[i], buf, COPY_CHUNK, off) < 0)
        abort ();
      continue;
    }
    if (dev_pread (scratch[i], buf, COPY_CHUNK, off) < 0)
      abort ();
    if (memcmp (buf, zeros, COPY_CHUNK) != 0 &&
        dev_pwrite (scratch[i], zeros, COPY_CHUNK, off) < 0)
      abort ();
  }
  free (buf);
  return scratch[i];
}

/* Which COPY_CHUNKs of a memory device hold anything but zeros. */
static bool *
chunks_used (struct cairn_dev *dev)
{
  static const uint8_t zeros[COPY_CHUNK];
  bool *used = calloc (dev->size / COPY_CHUNK + 1, sizeof *used);
  uint8_t *buf = malloc (COPY_CHUNK);

  if (used == NULL || buf == NULL)
    abort ();
  for (uint64_t off = 0; off < dev->size; off += COPY_CHUNK) {
    if (dev_pread (dev, buf, COPY_CHUNK, off) < 0)
      abort ();
    used[off / COPY_CHUNK] = memcmp (buf, zeros, COPY_CHUNK) != 0;
  }
  free (buf);
  return used;
}

/* Die with the engine's message: the image cannot be made. */
static void
must (int r, const char *what)
{
  if (r < 0) {
    fprintf (stderr, "powercut: preparing the image: %s: %s\n", what,
             cairn_errmsg ());
    exit (2);
  }
}

/* Write a whole volume with the pattern of tag. */
static void
write_whole (struct cairn_pool *pool, const char *name, uint64_t off,
             uint64_t len, uint64_t tag, struct model *m)
{
  struct cairn_volume *v;
  uint8_t *buf = malloc (len);

  if (buf == NULL)
    abort ();
  fill (buf, len, tag);
  must (vol_open (pool, name, &v), name);
  must (vol_pwrite (v, buf, (uint32_t) len, off, 0), name);
  vol_close (v);
  if (m)
    memcpy (model_find (m, name)->data + off, buf, len);
  free (buf);
}

static int
buf_sink (void *opaque, const void *data, size_t len)
{
  struct { uint8_t *p; size_t len; } *b = opaque;
  uint8_t *p = realloc (b->p, b->len + len);

  if (p == NULL)
    return -ENOMEM;
  memcpy (p + b->len, data, len);
  b->p = p;
  b->len += len;
  return 0;
}

/* The source pool and its two streams, once. */
static void
streams_make (void)
{
  struct { uint8_t *p; size_t len; } b = { NULL, 0 };
  struct repl_send_opts o = { .sink = buf_sink, .sink_opaque = &b };
  struct repl_send_result res;
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  struct model m = { .n = 0 };

  if (streams.full)
    return;
  must (dev_mem_create (DEV_SIZE, &dev), "source device");
  must (pool_format (dev, NULL, NULL), "source format");
  must (pool_open (dev, NULL, &pool), "source open");
  must (vol_create (pool, "src", VSIZE, NULL), "source volume");
  model_set (&m, "src", VSIZE, NULL);
  write_whole (pool, "src", 0, VSIZE, 11, &m);
  must (snap_create (pool, "src", "s1"), "source s1");
  streams.s1 = malloc (VSIZE);
  memcpy (streams.s1, model_find (&m, "src")->data, VSIZE);
  write_whole (pool, "src", 16 * KiB, 40 * KiB, 12, &m);
  write_whole (pool, "src", 200 * KiB, 4 * KiB, 13, &m);
  must (snap_create (pool, "src", "s2"), "source s2");
  streams.s2 = malloc (VSIZE);
  memcpy (streams.s2, model_find (&m, "src")->data, VSIZE);
  must (repl_send (pool, "src@s1", &o, &res), "send s1");
  streams.full = b.p;
  streams.full_len = b.len;
  b.p = NULL;
  b.len = 0;
  o.from = "s1";
  must (repl_send (pool, "src@s2", &o, &res), "send s1..s2");
  streams.incr = b.p;
  streams.incr_len = b.len;
  must (pool_close (pool), "source close");
  dev_close (dev);
  model_free (&m);
}

/* Make the image of scenario index: volumes a (with snapshot s0) and b,
 * and r received from the source's s1.
 */
static void
image_make (struct image *img, unsigned index, uint64_t seed)
{
  const struct scenario *sc = &scenarios[index];
  struct pool_format_opts fo = { .checkpoints = sc->checkpoints };
  struct pool_open_opts oo = { .no_background = true,
                               .intent_log = sc->intentlog };
  struct cairn_pool *pool;
  struct cairn_dev *dev;
  int64_t now = CLOCK_START;
  struct rng rng = { 1 };

  memset (img, 0, sizeof *img);
  img->sc = sc;
  img->index = index;
  img->seed = mix (seed, index, UINT64_MAX);
  img->nmembers = sc->mirror ? 2 : 1;
  for (unsigned i = 0; i < img->nmembers; i++)
    must (dev_mem_create (DEV_SIZE, &img->member[i]), "member device");
  if (sc->mirror) {
    struct dev_chunk_format_opts co = { .profile = DEV_PROFILE_MIRROR };

    must (dev_chunk_format (img->member, 2, &co, NULL), "mirror format");
  }
  must (logical_open (img->member, img->nmembers, &dev), "logical device");
  must (pool_format (dev, &fo, NULL), "format");
  must (pool_open (dev, &oo, &pool), "open");
  pool_set_clock (pool, run_clock, &now);
  if (sc->checkpoints)
    must (vol_checkpoint_set (pool, NULL, "keep-last", "3"), "keep-last");
  must (vol_create (pool, "a", VSIZE, NULL), "volume a");
  must (vol_create (pool, "b", VSIZE, NULL), "volume b");
  model_set (&img->model, "a", VSIZE, NULL);
  model_set (&img->model, "b", VSIZE, NULL);
  write_whole (pool, "a", 0, VSIZE, 1, &img->model);
  write_whole (pool, "b", 0, VSIZE / 2, 2, &img->model);
  now += 60;
  must (pool_commit (pool), "commit");
  must (snap_create (pool, "a", "s0"), "snapshot a@s0");
  model_copy (&img->model, "a@s0", "a");
  write_whole (pool, "a", 0, 64 * KiB, 3, &img->model);
  now += 60;
  must (pool_commit (pool), "commit");
  streams_make ();
  {
    struct repl_recv *rr;
    struct repl_recv_result res;
    size_t used;

    must (repl_recv_new (pool, "r", NULL, &rr), "receive r");
    if (repl_recv_feed (rr, streams.full, streams.full_len, &used) < 0)
      must (-EIO, "receive r");
    must (repl_recv_finish (rr, &res), "receive r");
    repl_recv_free (rr);
    model_set (&img->model, "r", VSIZE, streams.s1);
    model_set (&img->model, "r@s1", VSIZE, streams.s1);
  }
  if (sc->intentlog) {
    struct cairn_volume *v;

    /* The first flush makes the log's ring (txn-log.c). */
    must (vol_open (pool, "a", &v), "open a");
    must (vol_flush (v), "flush: the intent log");
    vol_close (v);
  }
  (void) rng;
  must (pool_close (pool), "close");
  logical_close (dev, img->nmembers);
  for (unsigned i = 0; i < img->nmembers; i++)
    img->used[i] = chunks_used (img->member[i]);
}

/* ---------------------------------------------------------------- one run */

/* The cut policy of cut seed cs. */
static void
policy_of (uint64_t cs, enum dev_powercut_keep *keep,
           enum dev_powercut_tear *tear)
{
  *keep = (enum dev_powercut_keep) (cs % DEV_POWERCUT_KEEP_COUNT);
  *tear = (enum dev_powercut_tear) ((cs >> 16) % DEV_POWERCUT_TEAR_COUNT);
}

/* Run the image's workload on copies of its members (put in lowers), cut
 * just before the cut_at-th write or flush (0: no cut, the dry run).
 */
static void
run_workload (struct image *img, struct run *run, uint64_t cut_at,
              uint64_t cut_seed, struct cairn_dev **lowers)
{
  struct pool_open_opts oo = { .no_background = true,
                               .intent_log = img->sc->intentlog };
  struct cairn_dev *pc[2], *dev;
  enum dev_powercut_keep keep;
  enum dev_powercut_tear tear;
  int r;

  run->sc = img->sc;
  run->rng.s = img->seed;
  run->now = CLOCK_START + 3600;
  for (unsigned i = 0; i < img->nmembers; i++)
    lowers[i] = scratch_dev (i, img->member[i], img->used[i]);
  must (dev_powercut_create (lowers[0], cut_seed, &pc[0]), "power-cut device");
  if (img->nmembers > 1)
    must (dev_powercut_create_shared (lowers[1], pc[0], &pc[1]),
          "power-cut device");
  policy_of (cut_seed, &keep, &tear);
  dev_powercut_set_policy (pc[0], keep, tear);
  run->pc = pc[0];
  must (logical_open (pc, img->nmembers, &dev), "logical device");
  must (pool_open (dev, &oo, &run->pool), "open the image");
  pool_set_clock (run->pool, run_clock, &run->now);
  if (run->dry) {
    struct world mw;

    /* Step 0: the image as it opens (the model has no checkpoints). */
    must (world_read (run->pool, &run->worlds[0]), "reading the image");
    model_world (&run->model, &mw);
    if (!world_eq (&mw, &run->worlds[0], false))
      snprintf (run->fail, sizeof run->fail, "the image is not what the "
                "model says");
  }
  if (cut_at)
    dev_powercut_arm (pc[0], cut_at);

  img->sc->workload (run);

  /* Closing commits what is left: the last step. */
  if (step_begin (run, "close")) {
    r = pool_close (run->pool);
    run->pool = NULL;
    if (run->dry)
      run->worlds[run->step] = run->worlds[run->step - 1];
    step_end (run, r, true);
  }
  else {
    (void) pool_close (run->pool);
    run->pool = NULL;
  }
  if (run->dry)
    img->ops = dev_powercut_ops (pc[0]);
  else if (!dev_powercut_is_cut (pc[0]))
    dev_powercut_cut (pc[0], true);
  logical_close (dev, img->nmembers);
  for (unsigned i = img->nmembers; i-- > 0; )
    dev_close (pc[i]);
}

/* fsck's problems, the first few. */
struct problems {
  char text[2048];
  unsigned n;
};

static void
note_problem (void *opaque, const char *msg)
{
  struct problems *p = opaque;
  size_t len = strlen (p->text);

  if (p->n++ < 8 && len + 2 < sizeof p->text)
    snprintf (p->text + len, sizeof p->text - len, "    %.*s\n",
              (int) (sizeof p->text - len - 8), msg);
}

/* fsck on dev, reading and checking every copy of every block it reaches
 * (a copy that a cut left stale on one side of a mirror is repaired; one
 * with no good copy is a problem): 0 when clean, else a message in why.
 */
static int
fsck_clean (struct cairn_dev *dev, char *why, size_t n, const char *when)
{
  struct problems p = { .n = 0 };
  struct fsck_opts o = { .problem = note_problem, .opaque = &p,
                         .scrub = true };
  struct fsck_report rep;

  p.text[0] = 0;
  if (fsck_pool (dev, &o, &rep) < 0) {
    snprintf (why, n, "%s: fsck failed: %s", when, cairn_errmsg ());
    return -1;
  }
  if (rep.errors) {
    snprintf (why, n, "%s: fsck found %" PRIu64 " problems:\n%s", when,
              rep.errors, p.text);
    return -1;
  }
  return 0;
}

/* C1, C2, C4 on the pool that a cut run left on lowers; 0, or -1 with the
 * reason in why.
 */
static int
check_after_cut (struct image *img, struct run *run, struct cairn_dev **lowers,
                 char *why, size_t n)
{
  struct pool_open_opts oo = { .no_background = true,
                               .intent_log = img->sc->intentlog };
  struct cairn_pool *pool = NULL;
  struct cairn_dev *dev;
  struct cairn_volume *v;
  struct world w;
  unsigned last = run->reached ? run->reached : run->step, k;
  uint8_t buf[8192], back[8192];
  int r = -1;

  if (run->lie[0]) {
    snprintf (why, n, "%s", run->lie);
    return -1;
  }
  if (logical_open (lowers, img->nmembers, &dev) < 0) {
    snprintf (why, n, "the devices do not open: %s", cairn_errmsg ());
    return -1;
  }
  if (fsck_clean (dev, why, n, "after the cut") < 0)
    goto out;
  if (pool_open (dev, &oo, &pool) < 0) {
    snprintf (why, n, "the pool does not open: %s", cairn_errmsg ());
    pool = NULL;
    goto out;
  }
  pool_set_clock (pool, run_clock, &run->now);
  if (world_read (pool, &w) < 0) {
    snprintf (why, n, "reading the pool: %s", cairn_errmsg ());
    goto out;
  }
  for (k = last + 1; k-- > run->acked; )
    if (world_eq (&w, &img->worlds[k], true))
      break;
  if (k + 1 == run->acked || k > last) {
    snprintf (why, n, "the pool is at no state between step %u (the last "
              "acknowledged durable) and step %u (%s, cut)", run->acked,
              last, run->what);
    world_print (stderr, "the pool", &w);
    world_print (stderr, "after the acknowledged step", &img->worlds[run->acked]);
    if (last != run->acked)
      world_print (stderr, "after the cut step", &img->worlds[last]);
    goto out;
  }

  /* C4: the pool takes new work and keeps it. */
  fill (buf, sizeof buf, 4242);
  if (vol_create (pool, "pc-after", 64 * KiB, NULL) < 0 ||
      vol_open (pool, "pc-after", &v) < 0) {
    snprintf (why, n, "a new volume after the cut: %s", cairn_errmsg ());
    goto out;
  }
  r = vol_pwrite (v, buf, sizeof buf, 4096, VOL_FUA);
  vol_close (v);
  if (r < 0 || snap_create (pool, "pc-after", "s") < 0) {
    snprintf (why, n, "writing after the cut: %s", cairn_errmsg ());
    r = -1;
    goto out;
  }
  r = pool_close (pool);
  pool = NULL;
  if (r < 0) {
    snprintf (why, n, "closing after new writes: %s", cairn_errmsg ());
    goto out;
  }
  r = -1;
  if (fsck_clean (dev, why, n, "after new writes") < 0)
    goto out;
  if (pool_open (dev, &oo, &pool) < 0) {
    snprintf (why, n, "the pool does not reopen after new writes: %s",
              cairn_errmsg ());
    pool = NULL;
    goto out;
  }
  if (vol_open (pool, "pc-after@s", &v) < 0) {
    snprintf (why, n, "the snapshot made after the cut: %s", cairn_errmsg ());
    goto out;
  }
  r = vol_pread (v, back, sizeof back, 4096);
  vol_close (v);
  if (r < 0 || memcmp (buf, back, sizeof buf) != 0) {
    snprintf (why, n, "the write made after the cut: %s",
              r < 0 ? cairn_errmsg () : "reads back wrong");
    r = -1;
    goto out;
  }
  r = 0;

 out:
  if (pool && pool_close (pool) < 0 && r == 0) {
    snprintf (why, n, "closing: %s", cairn_errmsg ());
    r = -1;
  }
  logical_close (dev, img->nmembers);
  return r;
}

/* The dry run of an image: records its worlds, counts its cut points. */
static int
image_dry_run (struct image *img)
{
  struct cairn_dev *lowers[2];
  struct run *run = calloc (1, sizeof *run);
  int r = 0;

  if (run == NULL)
    abort ();
  run->dry = true;
  run->worlds = img->worlds;
  /* The model is the run's to change: copy the image's. */
  for (unsigned i = 0; i < img->model.n; i++) {
    const struct entry *e = &img->model.e[i];

    model_set (&run->model, e->name, e->size, e->data);
  }
  run_workload (img, run, 0, 1, lowers);
  img->steps = run->step;
  if (run->fail[0]) {
    fprintf (stderr, "powercut: %s: the run without a cut fails: %s\n",
             img->sc->name, run->fail);
    r = -1;
  }
  model_free (&run->model);
  free (run);
  return r;
}

/* Cut i of an image: 0 when every check passed. */
static int
image_cut (struct image *img, uint64_t seed, uint64_t i, bool verbose)
{
  struct cairn_dev *lowers[2];
  struct run *run = calloc (1, sizeof *run);
  uint64_t cut_at = 1 + i % img->ops, cs = mix (seed, img->index, i);
  enum dev_powercut_keep keep;
  enum dev_powercut_tear tear;
  char why[3072];
  int r;

  if (run == NULL)
    abort ();
  policy_of (cs, &keep, &tear);
  run_workload (img, run, cut_at, cs, lowers);
  r = check_after_cut (img, run, lowers, why, sizeof why);
  if (r < 0 || verbose)
    fprintf (stderr, "powercut: %s %s: cut %" PRIu64 " (before write or "
             "flush %" PRIu64 " of %" PRIu64 ", in step %u \"%s\", last "
             "durable step %u; keep %s, tear %s)%s%s\n"
             "  replay: tests/powercut/run --scenario %s --seed %" PRIu64
             " --cut %" PRIu64 "\n",
             r < 0 ? "FAIL" : "ok", img->sc->name, i, cut_at, img->ops,
             run->reached ? run->reached : run->step, run->what
             ? run->what : "", run->acked, dev_powercut_keep_name (keep),
             tear == DEV_POWERCUT_TEAR_PREFIX ? "prefix" : "sectors",
             r < 0 ? ": " : "", r < 0 ? why : "", img->sc->name, seed, i);
  free (run);
  return r;
}

/* ---------------------------------------------------------------- the campaign */

/* What the workers share with the parent (MAP_SHARED). */
struct shared {
  uint64_t done[NSCENARIOS], failed[NSCENARIOS];
  double seconds[NSCENARIOS];   /* CPU seconds of the cuts */
  /* The cut each worker is on: scenario + 1 (0: none) and i. */
  struct { unsigned sc; uint64_t i; } on[64];
};

/* Seconds on clock (CLOCK_MONOTONIC: wall time; CLOCK_PROCESS_CPUTIME_ID:
 * the CPU this process used, which the machine's load does not change).
 */
static double
clock_s (clockid_t clock)
{
  struct timespec ts;

  clock_gettime (clock, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
now_s (void)
{
  return clock_s (CLOCK_MONOTONIC);
}

/* A line of progress: cuts done of total, failures, time. */
static void
progress (const struct shared *sh, uint64_t total, double t0)
{
  uint64_t done = 0, failed = 0;

  for (unsigned s = 0; s < NSCENARIOS; s++) {
    done += __atomic_load_n (&sh->done[s], __ATOMIC_RELAXED);
    failed += __atomic_load_n (&sh->failed[s], __ATOMIC_RELAXED);
  }
  printf ("powercut: %" PRIu64 " of %" PRIu64 " cuts, %" PRIu64 " failed, "
          "%.0f s\n", done, total, failed, now_s () - t0);
  fflush (stdout);
}

static void
usage (FILE *f)
{
  fprintf (f, "usage: campaign [--cuts N] [--jobs J] [--seed S] "
           "[--scenario NAME] [--cut I] [--verbose] [--list]\n"
           "Cut the power at N points spread over every scenario (default "
           "CAIRN_POWERCUT_CUTS, else 2000 x CAIRN_TEST_SCALE) in J worker "
           "processes (default 2); --scenario and --cut replay one.\n");
}

int
main (int argc, char **argv)
{
  static const struct option longopts[] = {
    { "cuts", required_argument, NULL, 'n' },
    { "jobs", required_argument, NULL, 'j' },
    { "seed", required_argument, NULL, 's' },
    { "scenario", required_argument, NULL, 'S' },
    { "cut", required_argument, NULL, 'c' },
    { "verbose", no_argument, NULL, 'v' },
    { "list", no_argument, NULL, 'l' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  const char *env = getenv ("CAIRN_POWERCUT_CUTS"), *only = NULL;
  const char *scale_env = getenv ("CAIRN_TEST_SCALE");
  double scale = scale_env && *scale_env ? strtod (scale_env, NULL)
    : CAIRN_TEST_SCALE_DEFAULT;
  uint64_t cuts = env && *env ? strtoull (env, NULL, 0)
    : (uint64_t) (2000 * (scale > 0 ? scale : CAIRN_TEST_SCALE_DEFAULT));
  uint64_t seed = 29, one_cut = UINT64_MAX;
  unsigned jobs = 2, nsel = 0;
  bool verbose = false;
  struct image *img[NSCENARIOS];
  struct shared *sh;
  double t0;
  int c, status = 0;

  while ((c = getopt_long (argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'n': cuts = strtoull (optarg, NULL, 0); break;
    case 'j': jobs = (unsigned) strtoul (optarg, NULL, 0); break;
    case 's': seed = strtoull (optarg, NULL, 0); break;
    case 'S': only = optarg; break;
    case 'c': one_cut = strtoull (optarg, NULL, 0); break;
    case 'v': verbose = true; break;
    case 'l':
      for (unsigned i = 0; i < NSCENARIOS; i++)
        printf ("%s\n", scenarios[i].name);
      return 0;
    case 'h': usage (stdout); return 0;
    default: usage (stderr); return 2;
    }
  }
  if (optind != argc || jobs == 0 || jobs > 64 || cuts == 0) {
    usage (stderr);
    return 2;
  }

  /* Every cut allocates and frees the same large buffers (reads of whole
   * volumes, fsck's maps): keep them in the heap, not in fresh mappings
   * that fault in page by page each time.
   */
  mallopt (M_MMAP_THRESHOLD, 64 * MiB);
  mallopt (M_TRIM_THRESHOLD, 256 * MiB);

  t0 = now_s ();
  for (unsigned s = 0; s < NSCENARIOS; s++) {
    img[s] = NULL;
    if (only && strcmp (only, scenarios[s].name) != 0)
      continue;
    img[s] = calloc (1, sizeof *img[s]);
    if (img[s] == NULL)
      abort ();
    image_make (img[s], s, seed);
    if (image_dry_run (img[s]) < 0)
      status = 1;
    nsel++;
  }
  if (nsel == 0) {
    fprintf (stderr, "powercut: no scenario is called %s (--list)\n", only);
    return 2;
  }
  printf ("powercut: seed %" PRIu64 ", %" PRIu64 " cuts over %u scenarios, "
          "%u jobs (replay: tests/powercut/run --seed %" PRIu64 " ...)\n",
          seed, one_cut != UINT64_MAX ? 1 : cuts, nsel, jobs, seed);
  fflush (stdout);
  if (status)
    return status;

  sh = mmap (NULL, sizeof *sh, PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror ("mmap");
    return 2;
  }
  memset (sh, 0, sizeof *sh);

  /* Cut i of the campaign is cut i / nsel of the (i mod nsel)-th selected
   * scenario: interleaved, so that the workers share every scenario.
   */
  uint64_t per = one_cut != UINT64_MAX ? 1 : (cuts + nsel - 1) / nsel;
  for (unsigned w = 0; w < jobs; w++) {
    pid_t pid = fork ();

    if (pid < 0) {
      perror ("fork");
      return 2;
    }
    if (pid > 0)
      continue;
    for (uint64_t j = w; j < per * nsel; j += jobs) {
      unsigned k = (unsigned) (j % nsel), s;
      uint64_t i = one_cut != UINT64_MAX ? one_cut : j / nsel;
      double t;

      for (s = 0; s < NSCENARIOS; s++)
        if (img[s] && k-- == 0)
          break;
      sh->on[w].sc = s + 1;
      sh->on[w].i = i;
      t = clock_s (CLOCK_PROCESS_CPUTIME_ID);
      if (image_cut (img[s], seed, i, verbose) < 0)
        __atomic_add_fetch (&sh->failed[s], 1, __ATOMIC_RELAXED);
      __atomic_add_fetch (&sh->done[s], 1, __ATOMIC_RELAXED);
      /* Each worker adds to it: a race loses an addition now and then. */
      sh->seconds[s] += clock_s (CLOCK_PROCESS_CPUTIME_ID) - t;
      if (w == 0 && (j / jobs) % 1000 == 999)
        progress (sh, per * nsel, t0);
    }
    sh->on[w].sc = 0;
    _exit (0);
  }
  for (unsigned w = 0; w < jobs; w++) {
    int ws;
    pid_t pid = wait (&ws);

    if (pid < 0)
      break;
    if (!WIFEXITED (ws) || WEXITSTATUS (ws) != 0) {
      status = 1;
      for (unsigned x = 0; x < jobs; x++) {
        if (sh->on[x].sc)
          fprintf (stderr, "powercut: FAIL a worker died (status 0x%x) on "
                   "%s cut %" PRIu64 "\n  replay: tests/powercut/run "
                   "--scenario %s --seed %" PRIu64 " --cut %" PRIu64 "\n",
                   ws, scenarios[sh->on[x].sc - 1].name, sh->on[x].i,
                   scenarios[sh->on[x].sc - 1].name, seed, sh->on[x].i);
      }
    }
  }

  uint64_t total = 0, failed = 0;
  double cpu = 0;
  printf ("%-20s %6s %6s %8s %8s %9s\n", "scenario", "steps", "points",
          "cuts", "failed", "cpu-s");
  for (unsigned s = 0; s < NSCENARIOS; s++) {
    if (!img[s])
      continue;
    printf ("%-20s %6u %6" PRIu64 " %8" PRIu64 " %8" PRIu64 " %9.1f\n",
            scenarios[s].name, img[s]->steps, img[s]->ops, sh->done[s],
            sh->failed[s], sh->seconds[s]);
    total += sh->done[s];
    failed += sh->failed[s];
    cpu += sh->seconds[s];
  }
  printf ("powercut: %" PRIu64 " cuts, %" PRIu64 " failed, %.1f s (the cuts "
          "took %.1f CPU-s, %.1f ms each)\n", total, failed, now_s () - t0,
          cpu, total ? 1000 * cpu / total : 0.0);
  fflush (stdout);
  if (failed || total < per * nsel)
    status = 1;
  for (unsigned s = 0; s < NSCENARIOS; s++) {
    if (!img[s])
      continue;
    for (unsigned i = 0; i < img[s]->nmembers; i++) {
      dev_close (img[s]->member[i]);
      free (img[s]->used[i]);
    }
    model_free (&img[s]->model);
    free (img[s]);
  }
  free (streams.full);
  free (streams.incr);
  free (streams.s1);
  free (streams.s2);
  munmap (sh, sizeof *sh);
  return status;
}
