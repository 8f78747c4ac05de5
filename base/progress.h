/* Cairn base: progress of long commands (send, receive, replicate, pull).
 *
 * Text: one line on standard error, redrawn at most 4 times a second:
 * bytes done (of the total when known, with a percentage), the rate, and
 * the time left when the total is known.  JSON: one object per line on
 * standard error, at most twice a second and once at the end, for
 * scripts:
 *
 *   {"event": "progress" | "done", "what": "sent", "done": BYTES,
 *    "total": BYTES | null, "rate": BYTES_PER_SECOND, "elapsed": SECONDS,
 *    "eta": SECONDS | null}
 */
#ifndef CAIRN_BASE_PROGRESS_H
#define CAIRN_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

enum progress_mode {
  PROGRESS_AUTO,                /* text when stderr is a terminal */
  PROGRESS_NONE,
  PROGRESS_TEXT,
  PROGRESS_JSON,
};

struct progress {
  enum progress_mode mode;      /* never AUTO after progress_init */
  const char *what;             /* "sent", "received" */
  struct timespec start, last;
  bool shown;
  uint64_t done, total;
};

/* Parse --progress=WHEN ("auto", "none", "text", "json"): 0 or -1. */
int progress_parse (const char *arg, enum progress_mode *mode);
void progress_init (struct progress *p, enum progress_mode mode,
                    const char *what);
/* Bytes done of total (0: unknown); shown when due. */
void progress_update (struct progress *p, uint64_t done, uint64_t total);
/* Show the last state and end the line. */
void progress_end (struct progress *p);
/* cairn's --progress option (send-receive.c): 0, or EXIT_USAGE after
 * saying what is wrong.
 */
struct cli;
int cli_progress_option (const struct cli *cli, const char *arg,
                         enum progress_mode *mode);
/* A repl_progress_fn: opaque is a struct progress. */
void progress_fn (void *opaque, uint64_t done, uint64_t total);

#endif /* CAIRN_BASE_PROGRESS_H */
