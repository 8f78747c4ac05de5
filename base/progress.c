/* Cairn base: progress of long commands (see progress.h). */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "progress.h"
#include "units.h"

int
progress_parse (const char *arg, enum progress_mode *mode)
{
  static const char *const words[] = {
    [PROGRESS_AUTO] = "auto", [PROGRESS_NONE] = "none",
    [PROGRESS_TEXT] = "text", [PROGRESS_JSON] = "json",
  };

  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strcmp (arg, words[i]) == 0) {
      *mode = (enum progress_mode) i;
      return 0;
    }
  return -1;
}

void
progress_init (struct progress *p, enum progress_mode mode, const char *what)
{
  memset (p, 0, sizeof *p);
  if (mode == PROGRESS_AUTO)
    mode = isatty (STDERR_FILENO) ? PROGRESS_TEXT : PROGRESS_NONE;
  p->mode = mode;
  p->what = what;
  clock_gettime (CLOCK_MONOTONIC, &p->start);
}

static double
seconds_between (const struct timespec *a, const struct timespec *b)
{
  return (double) (b->tv_sec - a->tv_sec) +
         (double) (b->tv_nsec - a->tv_nsec) / 1e9;
}

/* Print the current state. */
static void
show (struct progress *p, bool final)
{
  struct timespec now;
  double elapsed, rate, eta = -1;

  clock_gettime (CLOCK_MONOTONIC, &now);
  elapsed = seconds_between (&p->start, &now);
  rate = elapsed > 0 ? (double) p->done / elapsed : 0;
  if (p->total && rate > 0 && p->done <= p->total)
    eta = (double) (p->total - p->done) / rate;
  if (p->mode == PROGRESS_JSON) {
    fprintf (stderr, "{\"event\":\"%s\",\"what\":\"%s\",\"done\":%" PRIu64,
             final ? "done" : "progress", p->what, p->done);
    if (p->total)
      fprintf (stderr, ",\"total\":%" PRIu64, p->total);
    else
      fprintf (stderr, ",\"total\":null");
    fprintf (stderr, ",\"rate\":%.0f,\"elapsed\":%.3f", rate, elapsed);
    if (eta >= 0 && !final)
      fprintf (stderr, ",\"eta\":%.1f}\n", eta);
    else
      fprintf (stderr, ",\"eta\":null}\n");
  }
  else {
    char d[UNITS_FORMAT_MAX], t[UNITS_FORMAT_MAX], r[UNITS_FORMAT_MAX];

    fprintf (stderr, "\r%s %s", p->what, units_format (p->done, d));
    if (p->total)
      fprintf (stderr, " of %s (%" PRIu64 "%%)", units_format (p->total, t),
               p->done >= p->total ? 100 : p->done * 100 / p->total);
    fprintf (stderr, ", %s/s", units_format ((uint64_t) rate, r));
    if (eta >= 0 && !final)
      fprintf (stderr, ", %d:%02d left", (int) eta / 60, (int) eta % 60);
    fprintf (stderr, "   ");
    if (final)
      fprintf (stderr, "\n");
  }
  fflush (stderr);
}

void
progress_update (struct progress *p, uint64_t done, uint64_t total)
{
  struct timespec now;
  long interval_ns = p->mode == PROGRESS_JSON ? 500000000L : 250000000L;

  p->done = done;
  p->total = total;
  if (p->mode == PROGRESS_NONE)
    return;
  clock_gettime (CLOCK_MONOTONIC, &now);
  if (p->shown && (now.tv_sec - p->last.tv_sec) * 1000000000L +
      (now.tv_nsec - p->last.tv_nsec) < interval_ns)
    return;
  p->last = now;
  p->shown = true;
  show (p, false);
}

void
progress_end (struct progress *p)
{
  if (p->mode == PROGRESS_JSON || (p->mode == PROGRESS_TEXT && p->shown))
    show (p, true);
}

void
progress_fn (void *opaque, uint64_t done, uint64_t total)
{
  progress_update (opaque, done, total);
}
