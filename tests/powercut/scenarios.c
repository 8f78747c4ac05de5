/* Cairn power-cut campaign: the steps of a workload (each an engine
 * operation, the model's update when it succeeded, and the bookkeeping of
 * what was acknowledged durable) and the scenarios' workloads.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "campaign.h"
#include "replicate.h"
#include "volume.h"

/* ---------------------------------------------------------------- a run of a workload */



/* Whether the workload goes on: not after a step failed. */
bool
step_begin (struct run *run, const char *what)
{
  if (run->reached || run->fail[0])
    return false;
  run->step++;
  run->what = what;
  if (run->step >= MAX_STEPS)
    abort ();
  return true;
}

/* End a step that returned r; durable: it said everything before it is
 * durable when it returned 0.  The model must have been updated already.
 */
void
step_end (struct run *run, int r, bool durable)
{
  if (r < 0) {
    run->reached = run->step;
    run->err = r;
    if (run->dry)
      snprintf (run->fail, sizeof run->fail, "step %u (%s) failed without a "
                "cut: %s", run->step, run->what, cairn_errmsg ());
    return;
  }
  if (durable) {
    if (dev_powercut_is_cut (run->pc))
      snprintf (run->lie, sizeof run->lie, "step %u (%s) returned durable "
                "after the power was cut", run->step, run->what);
    else if (dev_powercut_pending (run->pc) != 0 && run->dry)
      snprintf (run->fail, sizeof run->fail, "step %u (%s) returned durable "
                "with %zu writes still unflushed", run->step, run->what,
                dev_powercut_pending (run->pc));
    else
      run->acked = run->step;
  }
  if (run->dry && run->pool) {
    struct world mw;

    if (world_read (run->pool, &run->worlds[run->step]) < 0) {
      snprintf (run->fail, sizeof run->fail, "step %u (%s): reading the "
                "world: %s", run->step, run->what, cairn_errmsg ());
      return;
    }
    model_world (&run->model, &mw);
    if (!world_eq (&mw, &run->worlds[run->step], false)) {
      snprintf (run->fail, sizeof run->fail, "step %u (%s): the pool is not "
                "what the model says", run->step, run->what);
      world_print (stderr, "model", &mw);
      world_print (stderr, "pool", &run->worlds[run->step]);
    }
  }
}

/* Fill buf with bytes determined by tag. */
void
fill (void *buf, size_t len, uint64_t tag)
{
  struct rng r = { tag * UINT64_C (0x2545f4914f6cdd1d) + 1 };
  uint8_t *p = buf;

  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = rng_next (&r);
    memcpy (p + i, &v, len - i < 8 ? len - i : 8);
  }
}

/* ---------------------------------------------------------------- steps */

/* Write, zero or trim a random range of vol (flags: VOL_FUA or 0). */
static void
do_io (struct run *run, const char *vol, unsigned flags)
{
  struct cairn_volume *v;
  struct entry *e;
  uint64_t size, off, len;
  unsigned kind = rng_below (&run->rng, 8);
  uint8_t *buf;
  int r;

  if (!step_begin (run, flags & VOL_FUA ? "write FUA" : "write"))
    return;
  r = vol_open (run->pool, vol, &v);
  if (r < 0) {
    step_end (run, r, false);
    return;
  }
  size = vol_size (v);
  /* Sizes from a sector to 64 KiB, aligned or not. */
  len = 1 + rng_below (&run->rng, 64 * KiB);
  if (rng_below (&run->rng, 2))
    len = (len + 4095) / 4096 * 4096;
  if (len > size)
    len = size;
  off = rng_below (&run->rng, size - len + 1);
  if (rng_below (&run->rng, 2))
    off &= ~UINT64_C (4095);
  buf = malloc (len);
  if (buf == NULL)
    abort ();
  if (kind == 0) {
    memset (buf, 0, len);
    r = vol_zero (v, (uint32_t) len, off, flags);
  }
  else if (kind == 1) {
    /* A trim reads back as zeros here (volume.h). */
    memset (buf, 0, len);
    r = vol_trim (v, (uint32_t) len, off, flags);
  }
  else {
    fill (buf, len, rng_next (&run->rng));
    r = vol_pwrite (v, buf, (uint32_t) len, off, flags);
  }
  vol_close (v);
  if (r == 0 && run->dry && (e = model_find (&run->model, vol)) != NULL)
    memcpy (e->data + off, buf, len);
  free (buf);
  step_end (run, r, (flags & VOL_FUA) != 0);
}

/* n random writes to vol, every fourth with FUA. */
static void
do_ios (struct run *run, const char *vol, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    do_io (run, vol, rng_below (&run->rng, 4) == 0 ? VOL_FUA : 0);
}

static void
do_flush (struct run *run, const char *vol)
{
  struct cairn_volume *v;
  int r;

  if (!step_begin (run, "flush"))
    return;
  r = vol_open (run->pool, vol, &v);
  if (r == 0) {
    r = vol_flush (v);
    vol_close (v);
  }
  step_end (run, r, true);
}

static void
do_snap (struct run *run, const char *vol, const char *snap)
{
  char name[NAME_MAX_LEN];
  int r;

  if (!step_begin (run, "snapshot"))
    return;
  r = snap_create (run->pool, vol, snap);
  snprintf (name, sizeof name, "%s@%s", vol, snap);
  if (r == 0 && run->dry)
    model_copy (&run->model, name, vol);
  step_end (run, r, true);
}

static void
do_snap_delete (struct run *run, const char *vol, const char *snap)
{
  char name[NAME_MAX_LEN];
  int r;

  if (!step_begin (run, "snapshot delete"))
    return;
  r = snap_delete (run->pool, vol, snap);
  snprintf (name, sizeof name, "%s@%s", vol, snap);
  if (r == 0 && run->dry)
    model_remove (&run->model, name);
  step_end (run, r, true);
}

static void
do_clone (struct run *run, const char *src, const char *dst)
{
  int r;

  if (!step_begin (run, "clone"))
    return;
  r = vol_clone (run->pool, src, dst);
  if (r == 0 && run->dry)
    model_copy (&run->model, dst, src);
  step_end (run, r, true);
}

/* Delete vol and its snapshots. */
static void
do_delete (struct run *run, const char *vol)
{
  size_t len = strlen (vol);
  int r;

  if (!step_begin (run, "delete"))
    return;
  r = vol_delete (run->pool, vol, VOL_DELETE_RECURSIVE);
  if (r == 0 && run->dry) {
    for (unsigned i = 0; i < run->model.n; ) {
      const char *n = run->model.e[i].name;

      if (strncmp (n, vol, len) == 0 && (n[len] == 0 || n[len] == '@'))
        model_remove (&run->model, n);
      else
        i++;
    }
  }
  step_end (run, r, true);
}

/* Reclaim what deletes left, one budgeted step at a time (what the
 * background reaper does), then commit.
 */
static void
do_reclaim (struct run *run)
{
  bool more = true;
  int r = 0;

  for (unsigned i = 0; i < 64 && more && r == 0; i++) {
    if (!step_begin (run, "reclaim step"))
      return;
    r = vol_reclaim_step (run->pool, &more);
    step_end (run, r, false);
  }
  if (!step_begin (run, "commit"))
    return;
  step_end (run, pool_commit (run->pool), true);
}

/* Roll vol back to snap, keeping what came after as keep_as (with the
 * snapshots after snap, listed in later[]).
 */
static void
do_rollback (struct run *run, const char *vol, const char *snap,
             const char *keep_as, const char *const *later)
{
  char name[NAME_MAX_LEN], to[NAME_MAX_LEN];
  int r;

  if (!step_begin (run, "rollback"))
    return;
  r = vol_rollback (run->pool, vol, snap, keep_as);
  if (r == 0 && run->dry) {
    model_rename (&run->model, vol, keep_as);
    snprintf (name, sizeof name, "%s@%s", vol, snap);
    model_copy (&run->model, vol, name);
    for (unsigned i = 0; later && later[i]; i++) {
      snprintf (name, sizeof name, "%s@%s", vol, later[i]);
      snprintf (to, sizeof to, "%s@%s", keep_as, later[i]);
      model_rename (&run->model, name, to);
    }
  }
  step_end (run, r, true);
}

static void
do_resize (struct run *run, const char *vol, uint64_t size)
{
  struct entry *e;
  int r;

  if (!step_begin (run, "resize"))
    return;
  r = vol_resize (run->pool, vol, size, true);
  if (r == 0 && run->dry && (e = model_find (&run->model, vol)) != NULL) {
    uint8_t *data = calloc (1, size);

    if (data == NULL)
      abort ();
    memcpy (data, e->data, MIN (size, e->size));
    model_set (&run->model, vol, size, data);
    free (data);
  }
  step_end (run, r, true);
}

struct streams streams;

/* Receive a stream into target in pieces; published as target@snap with
 * contents state.
 */
static void
do_receive (struct run *run, const char *target, const uint8_t *p,
            size_t len, const char *snap, const uint8_t *state)
{
  struct repl_recv_result res;
  struct repl_recv *rr;
  char name[NAME_MAX_LEN];
  size_t off = 0, used;
  int r;

  if (!step_begin (run, "receive"))
    return;
  r = repl_recv_new (run->pool, target, NULL, &rr);
  if (r < 0) {
    step_end (run, r, false);
    return;
  }
  while (off < len) {
    size_t n = MIN (len - off, 1 + rng_below (&run->rng, 96 * KiB));

    r = repl_recv_feed (rr, p + off, n, &used);
    off += used;
    if (r != 0)
      break;
  }
  r = repl_recv_finish (rr, &res);
  repl_recv_free (rr);
  if (r == 0 && run->dry) {
    snprintf (name, sizeof name, "%s@%s", target, snap);
    model_set (&run->model, name, VSIZE, state);
    model_set (&run->model, target, VSIZE, state);
  }
  step_end (run, r, true);
}

/* Advance the clock and commit. */
static void
do_tick_commit (struct run *run, int64_t seconds)
{
  if (!step_begin (run, "commit"))
    return;
  run->now += seconds;
  step_end (run, pool_commit (run->pool), true);
}

static int
newest_ckpt (void *opaque, const struct vol_checkpoint *c)
{
  *(uint64_t *) opaque = c->gen;
  return 0;
}

/* Promote vol's newest checkpoint (whose state is vol's now) to snap. */
static void
do_promote (struct run *run, const char *vol, const char *snap)
{
  char exp[NAME_MAX_LEN + 32];
  uint64_t gen = 0;
  int r;

  if (!step_begin (run, "promote"))
    return;
  r = vol_checkpoint_list (run->pool, vol, 0, UINT64_MAX, newest_ckpt, &gen);
  if (r == 0) {
    snprintf (exp, sizeof exp, "%s@#%" PRIu64, vol, gen);
    r = vol_checkpoint_promote (run->pool, exp, snap);
  }
  if (r == 0 && run->dry) {
    snprintf (exp, sizeof exp, "%s@%s", vol, snap);
    model_copy (&run->model, exp, vol);
  }
  step_end (run, r, true);
}

static void
do_prune (struct run *run, const char *vol)
{
  if (!step_begin (run, "prune"))
    return;
  step_end (run, vol_checkpoint_prune (run->pool, vol, false, NULL, NULL,
                                       NULL), true);
}

static void
do_collect (struct run *run)
{
  if (!step_begin (run, "collect"))
    return;
  step_end (run, vol_checkpoint_collect (run->pool), true);
}

/* ---------------------------------------------------------------- scenarios */

static void
wl_write (struct run *run)
{
  for (unsigned round = 0; round < 4; round++) {
    do_ios (run, "a", 6);
    do_flush (run, "a");
    do_ios (run, "b", 3);
  }
}

static void
wl_snapshot (struct run *run)
{
  do_ios (run, "a", 3);
  do_snap (run, "a", "s1");
  do_ios (run, "a", 3);
  do_snap (run, "a", "s2");
  do_ios (run, "a", 2);
  do_snap_delete (run, "a", "s1");
  do_snap_delete (run, "a", "s0");
  do_ios (run, "a", 2);
  do_flush (run, "a");
}

static void
wl_clone (struct run *run)
{
  do_clone (run, "a@s0", "c");
  do_ios (run, "c", 3);
  do_ios (run, "a", 2);
  do_clone (run, "a", "d");
  do_ios (run, "d", 3);
  do_snap (run, "c", "cs");
  do_ios (run, "c", 2);
  do_flush (run, "c");
}

static void
wl_rollback (struct run *run)
{
  static const char *const later[] = { "s1", NULL };

  do_ios (run, "a", 3);
  do_snap (run, "a", "s1");
  do_ios (run, "a", 3);
  do_rollback (run, "a", "s0", "a-old", later);
  do_ios (run, "a", 3);
  do_ios (run, "a-old", 2);
  do_flush (run, "a");
}

static void
wl_delete (struct run *run)
{
  do_clone (run, "b", "bc");
  do_ios (run, "bc", 2);
  do_delete (run, "b");
  do_reclaim (run);
  do_delete (run, "a");
  do_ios (run, "bc", 2);
  do_reclaim (run);
  do_delete (run, "bc");
  do_reclaim (run);
}

static void
wl_receive (struct run *run)
{
  do_receive (run, "r", streams.incr, streams.incr_len, "s2", streams.s2);
  do_ios (run, "a", 2);
  do_receive (run, "r2", streams.full, streams.full_len, "s1", streams.s1);
  do_ios (run, "r2", 2);
  do_flush (run, "r2");
}

static void
wl_resize (struct run *run)
{
  do_resize (run, "a", 2 * VSIZE);
  do_ios (run, "a", 3);
  do_resize (run, "b", VSIZE / 2 + 512);
  do_ios (run, "b", 2);
  do_resize (run, "b", VSIZE);
  do_ios (run, "b", 2);
  do_resize (run, "a", VSIZE / 4);
  do_flush (run, "a");
}

static void
wl_checkpoint (struct run *run)
{
  for (unsigned i = 0; i < 5; i++) {
    do_ios (run, "a", 2);
    do_tick_commit (run, 600);
  }
  do_promote (run, "a", "p1");
  do_ios (run, "a", 2);
  do_tick_commit (run, 7200);
  do_prune (run, "a");
  do_reclaim (run);
  do_ios (run, "a", 2);
  do_tick_commit (run, 600);
  do_collect (run);
  do_reclaim (run);
}


const struct scenario scenarios[NSCENARIOS] = {
  { "write", wl_write, false, false, false },
  { "snapshot", wl_snapshot, false, false, false },
  { "clone", wl_clone, false, false, false },
  { "rollback", wl_rollback, false, false, false },
  { "delete", wl_delete, false, false, false },
  { "receive", wl_receive, false, false, false },
  { "resize", wl_resize, false, false, false },
  { "checkpoint", wl_checkpoint, false, true, false },
  { "write/mirror", wl_write, true, false, false },
  { "snapshot/mirror", wl_snapshot, true, false, false },
  { "clone/mirror", wl_clone, true, false, false },
  { "rollback/mirror", wl_rollback, true, false, false },
  { "delete/mirror", wl_delete, true, false, false },
  { "receive/mirror", wl_receive, true, false, false },
  { "resize/mirror", wl_resize, true, false, false },
  { "checkpoint/mirror", wl_checkpoint, true, true, false },
  { "write/log", wl_write, false, false, true },
  { "snapshot/log", wl_snapshot, false, false, true },
  { "clone/log", wl_clone, false, false, true },
  { "rollback/log", wl_rollback, false, false, true },
  { "resize/log", wl_resize, false, false, true },
  { "write/log/mirror", wl_write, true, false, true },
};
