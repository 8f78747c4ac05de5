/* Cairn server: a Prometheus metrics endpoint (metrics.c).
 *
 * An HTTP server (libmicrohttpd, on a thread of its own) answers
 * GET /metrics with the text exposition format 0.0.4: per-export I/O
 * counters and latency histograms, pool space, the node cache, commits,
 * jobs, damage and device errors.  nbdkit-cairn-plugin(1) lists every
 * metric with its unit.  It reads only atomics and copies taken under
 * short leaf locks (metrics.c says which), so a scrape never holds up the
 * data path or the control loop.
 *
 * Without libmicrohttpd at configure time, metrics_start fails with
 * "built without metrics support"; metrics_render works in every build.
 */
#ifndef CAIRN_METRICS_H
#define CAIRN_METRICS_H

#include <stddef.h>

#include "pool.h"
#include "control.h"

/* What the endpoint reports on. */
struct metrics_source {
  struct cairn_pool *pool;
  /* The control server whose request jobs (send, receive, replicate) are
   * reported, or NULL.
   */
  struct control_server *control;
  /* Background work as control_config's background_jobs lists it (may be
   * NULL), with its opaque.
   */
  int (*background_jobs) (void *opaque, struct control_bg_job **jobs,
                          size_t *n);
  void *opaque;
};

struct metrics_server;

/* Whether this build can serve metrics. */
bool metrics_supported (void);

/* Listen on address (a numeric IPv4 or IPv6 address, or a host name that
 * resolves to one) and port (0: any free one) and start serving src, which
 * must stay valid until metrics_stop.  Fails with a message: an address
 * that does not resolve, one in use, a build without libmicrohttpd.
 */
int metrics_start (const char *address, unsigned port,
                   const struct metrics_source *src,
                   struct metrics_server **out) CAIRN_WUR;
/* The port it listens on (the one chosen for port 0). */
unsigned metrics_port (const struct metrics_server *ms);
/* Stop serving (waits for a scrape in progress) and free ms; NULL is
 * nothing.
 */
void metrics_stop (struct metrics_server *ms);

/* The exposition of src now: *text malloc'd, *len its length. */
int metrics_render (const struct metrics_source *src, char **text,
                    size_t *len) CAIRN_WUR;

#endif /* CAIRN_METRICS_H */
