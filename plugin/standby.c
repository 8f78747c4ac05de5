/* nbdkit-cairn-plugin: the standby server (standby=true, cairnd
 * --standby; cairnd(8), TAKEOVER BY A STANDBY).
 *
 * A standby polls the pool's RBD images once a second, each poll one
 * connection to the cluster (dev_rbd_break_dead_owner): while the lock's
 * holder still watches its image (it renews its watch every few seconds)
 * the standby waits; once the holder's watch has expired (it was killed,
 * or cut off or frozen for the watch timeout, 30 s by default) the
 * standby breaks its lock, which makes the cluster blocklist the old
 * holder so that nothing it still sends lands, and opens the pool at its
 * last durable commit, as after a crash.  A lock that is free (its holder
 * stopped) is taken at once.  What it waits for goes to stderr (nbdkit's
 * log in the foreground) when it changes, and to pool.status on the
 * control socket (standby_status) at any time.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <nbdkit-plugin.h>

#include "dev.h"
#include "dev-rbd.h"
#include "methods.h"
#include "standby.h"

/* Time between two polls of the lock. */
#define STANDBY_POLL_MS 1000

/* What pool.status shows, written by standby_wait, read on the control
 * thread; under lock.
 */
static struct {
  pthread_mutex_t lock;
  const char *pool;           /* the pool's name for messages */
  const char *state;          /* "waiting", "taking over" */
  struct timespec since;      /* CLOCK_MONOTONIC when waiting began */
  unsigned long polls;
  struct dev_rbd_info held;   /* the image whose lock is held */
  bool have_held;
} st = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Seconds since ts on the monotonic clock. */
static double
since (const struct timespec *ts)
{
  struct timespec now;

  clock_gettime (CLOCK_MONOTONIC, &now);
  return (double) (now.tv_sec - ts->tv_sec) +
         (now.tv_nsec - ts->tv_nsec) / 1e9;
}

json_t *
standby_status (void *opaque)
{
  json_t *o, *rbd = NULL;
  char what[640];

  pthread_mutex_lock (&st.lock);
  if (st.have_held)
    snprintf (what, sizeof what, "pool %s is served by %s: waiting for it "
              "to stop, or for its watch on %s to expire", st.pool,
              st.held.owner_who, st.held.name);
  else
    snprintf (what, sizeof what, "pool %s: opening it", st.pool);
  if (st.have_held)
    rbd = json_pack ("[o]", rbd_info_json (&st.held));
  o = json_pack ("{s:s, s:s, s:s, s:f, s:I, s:I, s:o?}",
                 "pool", st.pool ? st.pool : "",
                 "state", st.state ? st.state : "starting",
                 "waiting_for", what,
                 "waited_s", since (&st.since),
                 "polls", (json_int_t) st.polls,
                 "poll_interval_ms", (json_int_t) STANDBY_POLL_MS,
                 "rbd", rbd);
  pthread_mutex_unlock (&st.lock);
  return o;
}

/* One poll of every RBD device of the pool: breaks the locks of holders
 * that are gone.  1 when no live server holds any of them (open now), 0
 * when one does (its description to held), -1 on an error.
 */
static int
poll_locks (char *const *paths, unsigned n, struct dev_rbd_info *held)
{
  struct dev_rbd_info info;
  int busy = 0;

  for (unsigned i = 0; i < n; i++) {
    int r;

    if (!dev_is_rbd_name (paths[i]))
      continue;
    r = dev_rbd_break_dead_owner (paths[i], &info);
    if (r < 0) {
      nbdkit_error ("standby: %s", cairn_errmsg ());
      return -1;
    }
    if (r == 1 && info.owner[0])
      fprintf (stderr, "nbdkit: cairn standby: broke the lock of %s, which "
               "is gone (the cluster blocklists it): taking the pool "
               "over\n", info.owner_who);
    if (r == 0 && !busy) {
      *held = info;
      busy = 1;
    }
  }
  return !busy;
}

int
standby_wait (char *const *paths, unsigned n, const char *pool_name,
              int (*try_open) (void))
{
  struct dev_rbd_info held;
  char said[256] = "";
  int r;

  pthread_mutex_lock (&st.lock);
  st.pool = pool_name;
  st.state = "waiting";
  clock_gettime (CLOCK_MONOTONIC, &st.since);
  pthread_mutex_unlock (&st.lock);
  for (;;) {
    r = poll_locks (paths, n, &held);
    if (r < 0)
      return -1;
    pthread_mutex_lock (&st.lock);
    st.polls++;
    st.have_held = r == 0;
    if (r == 0)
      st.held = held;
    st.state = r == 0 ? "waiting" : "taking over";
    pthread_mutex_unlock (&st.lock);
    if (r == 1) {
      r = try_open ();
      if (r != -EBUSY)
        break;                  /* opened, or failed */
      /* another server took it first: ask again at the next poll */
    }
    else if (strcmp (held.owner_who, said) != 0) {
      fprintf (stderr, "nbdkit: cairn standby: pool %s is served by %s: "
               "waiting for it to stop or go\n", pool_name, held.owner_who);
      snprintf (said, sizeof said, "%s", held.owner_who);
    }
    if (nbdkit_nanosleep (STANDBY_POLL_MS / 1000,
                          STANDBY_POLL_MS % 1000 * 1000000) == -1)
      return -1;                /* nbdkit is quitting */
  }
  if (r < 0)
    return -1;
  /* Not always after "broke the lock" above: a holder that stopped frees
   * it, and librbd's own acquire breaks it too once the holder's watch
   * is gone (blocklisting it the same way).
   */
  fprintf (stderr, "nbdkit: cairn standby: serving pool %s after %.1f s of "
           "waiting%s%s\n", pool_name, since (&st.since),
           said[0] ? " for " : "", said);
  pthread_mutex_lock (&st.lock);
  st.state = "serving";
  pthread_mutex_unlock (&st.lock);
  return 0;
}
