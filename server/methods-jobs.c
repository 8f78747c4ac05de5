/* Cairn control server: the engine's background work as jobs.
 *
 * Deleting a volume or a snapshot that held much data commits at once; the
 * engine frees the space afterwards, a bounded step per commit
 * (engine/reaper.c).  Users look for long work in `cairn job list`, so
 * each reclaim in progress is handed to the control server's job registry
 * (control_config.background_jobs, jobs.c) as a "reclaim" job: what it
 * frees ("VOL" for a deleted volume, "VOL@SNAP" for a deleted snapshot),
 * bytes freed so far and in all (0 when the engine does not know, e.g.
 * for a volume whose delete began before a restart).  A scrub that runs or
 * is paused is a "scrub" job too (methods-scrub.c), which job.cancel
 * leaves to scrub.cancel; so is a device replace in progress
 * (methods-device.c), left to device.replace_cancel.
 *
 * job.cancel refuses them: the delete is committed, its name is gone, and
 * the steps already taken are durable; stopping would not give anything
 * back, it would only leave the space unusable until the next start,
 * when the work resumes anyway.  Nothing would leak either way (the
 * engine's records survive restarts), so refusing is a choice for
 * clarity, not a safety net.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "methods-int.h"
#include "volume.h"

/* Why a reclaim cannot be cancelled, and what to do instead. */
static const char reclaim_no_cancel[] =
  "the delete is already committed and reclaiming its space cannot be "
  "undone or paused; it ends by itself ('cairn job list' shows its "
  "progress), and resumes after a restart if the server stops first";

/* control_config.background_jobs: the engine's reclaims in progress. */
int
cairn_background_jobs (void *opaque, struct control_bg_job **jobsp,
                       size_t *np)
{
  const struct cairn_methods_ctx *m = opaque;
  struct vol_reclaim_job *rj;
  struct control_bg_job *bg;
  size_t n;
  int r;

  *jobsp = NULL;
  *np = 0;
  if (m == NULL || m->pool == NULL)
    return 0;
  r = vol_reclaim_jobs (m->pool, &rj, &n);
  if (r < 0)
    return r;
  /* Room for the scrub and a device replace, as the last entries. */
  bg = calloc (n + 2, sizeof *bg);
  if (bg == NULL) {
    free (rj);
    return cairn_fail (-ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    bg[i].key = rj[i].seq;
    snprintf (bg[i].method, sizeof bg[i].method, "reclaim");
    snprintf (bg[i].what, sizeof bg[i].what, "%s (deleted %s)",
              rj[i].what, rj[i].snapshot ? "snapshot" : "volume");
    bg[i].done = rj[i].done_bytes;
    bg[i].total = rj[i].total_bytes;
    bg[i].started = rj[i].started;
    bg[i].no_cancel = reclaim_no_cancel;
  }
  free (rj);
  n += scrub_bg_job (m->pool, &bg[n]);
  n += device_replace_bg_job (m->pool, &bg[n]);
  if (n == 0) {
    free (bg);
    bg = NULL;
  }
  *jobsp = bg;
  *np = n;
  return 0;
}
