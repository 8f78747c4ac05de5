/* Cairn engine, layer "volume": online scrub (scrub.c has the design note).
 *
 * A scrub reads every copy of every block that the pool's volumes,
 * snapshots and kept checkpoints reference, checks each against the
 * SHA-256 its pointer carries, and rewrites a damaged copy from a good
 * one, on a thread of its own while the pool is served.  Its state (the
 * cursor, the counts) is a record in the pool, so that a pause, a cancel
 * or a restart does not lose the work done.
 */
#ifndef CAIRN_SCRUB_H
#define CAIRN_SCRUB_H

#include <stdbool.h>
#include <stdint.h>

#include "dev.h"
#include "pool.h"
#include "util.h"

enum scrub_state {
  SCRUB_NONE,                 /* never run on this pool */
  SCRUB_RUNNING,
  SCRUB_PAUSED,               /* scrub_pause, or a server stopped while it
                                 ran (interrupted) */
  SCRUB_FINISHED,
  SCRUB_CANCELLED,
};

/* The most members whose own counts a scrub keeps. */
#define SCRUB_MEMBERS DEV_CHUNK_MAX_MEMBERS
/* The most unrepairable ranges a status names (the count has them all). */
#define SCRUB_DAMAGE_MAX 64

struct scrub_opts {
  uint64_t rate;              /* bytes read from the devices a second; 0:
                                 as fast as they go */
  bool since_last;            /* only blocks born since the last complete
                                 pass started */
  unsigned save_ms;           /* save the cursor after a batch at most this
                                 often (0: every 5 s; tests use less) */
};

/* A block range with no good copy left. */
struct scrub_damage {
  char state[2 * 256 + 32];   /* "VOL", "VOL@SNAP" or "VOL@#GEN" */
  bool metadata;              /* a node of the state's tree */
  uint64_t offset, length;    /* bytes in the volume; for a node, in the
                                 pool's address space */
};

struct scrub_status {
  enum scrub_state state;
  bool interrupted;           /* paused because its server stopped */
  bool since_last;
  uint64_t rate;              /* the limit, 0: none */
  uint64_t pass_gen;          /* the durable generation the pass began at */
  uint64_t since_gen;         /* checks blocks born after this (0: all) */
  uint64_t last_complete_gen; /* pass_gen of the last pass that ended (0:
                                 none): what --since-last starts after */
  uint64_t bytes_done, bytes_total;  /* logical bytes checked, and the
                                 pool's allocated bytes when it began */
  uint64_t bytes_read;        /* from the devices, every copy */
  uint64_t blocks;            /* blocks and nodes checked */
  uint64_t bad_copies, repaired, lost;
  int64_t started;            /* wall clock, seconds since 1970 */
  uint64_t elapsed_ms;        /* running time, pauses left out */
  uint64_t cursor_id, cursor_gen;  /* where it is: volume id and state */
  unsigned nmembers;          /* 0 on a pool of one device */
  uint64_t member_bad[SCRUB_MEMBERS], member_repaired[SCRUB_MEMBERS];
  size_t ndamage;             /* named below (at most SCRUB_DAMAGE_MAX) */
  struct scrub_damage damage[SCRUB_DAMAGE_MAX];
  /* Volumes whose catalog record does not decode (catalog-damage.c): no
   * scrub reads them, as nothing else may (their names, at most
   * SCRUB_DAMAGE_MAX; "" when the name index has none).
   */
  size_t nunread;
  char unread[SCRUB_DAMAGE_MAX][256];
};

/* Start a pass: -EBUSY when one runs or is paused (resume or cancel it),
 * -EROFS on a pool that cannot be written (a degraded or read-only one).
 */
int scrub_start (struct cairn_pool *pool, const struct scrub_opts *opts)
  CAIRN_WUR;
/* Pause a running pass (its cursor saved): -ENOENT when none runs. */
int scrub_pause (struct cairn_pool *pool) CAIRN_WUR;
/* Resume a paused or interrupted pass from its cursor: -ENOENT when none
 * is paused.  rate: a new limit, or UINT64_MAX to keep the pass's.
 */
int scrub_resume (struct cairn_pool *pool, uint64_t rate) CAIRN_WUR;
/* Cancel a running or paused pass: -ENOENT when there is none. */
int scrub_cancel (struct cairn_pool *pool) CAIRN_WUR;
/* Wait until the thread stops running a pass (it ended, was paused or
 * cancelled, or met an error): 0, or -ECANCELED when stop (called every
 * 200 ms; may be NULL) said to stop waiting.
 */
int scrub_wait (struct cairn_pool *pool, bool (*stop) (void *opaque),
                void *opaque) CAIRN_WUR;
/* The state of the last pass, whatever it is. */
int scrub_status (struct cairn_pool *pool, struct scrub_status *st)
  CAIRN_WUR;
/* The word for a state ("none", "running", "paused", "finished",
 * "cancelled").
 */
const char *scrub_state_name (enum scrub_state s);

#endif /* CAIRN_SCRUB_H */
