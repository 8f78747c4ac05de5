/* Cairn replication: send and receive (DESIGN §5).
 *
 * This module joins the engine (engine/volume.h: snapshots, vol_diff,
 * partial volumes) and the send-stream codec (proto/stream.h), which know
 * nothing of each other.  It lives in server/ because server/ is the layer
 * allowed to use both, and because the server's stream mode and its
 * replication jobs are where it will run; `cairn send` and `cairn receive`
 * with --pool call it in-process (client/replicate.c).  It uses neither
 * libuv nor jansson: every function blocks on engine I/O, so the server
 * will run it on its threadpool.
 *
 * Sending (send.c) writes one snapshot as a stream, whole or as the changes
 * since an older snapshot of the same volume, through a sink.  Receiving
 * (receive.c) is push-based, so that a socket's event loop and a file's
 * read loop can both drive it: feed it bytes as they come, then finish.
 * What a receive does with the state, and why it is safe, is the design
 * note at the top of receive.c.
 *
 * Functions return 0 or a negative errno (CAIRN_WUR), with a message in
 * cairn_errmsg() that says what to do.
 */
#ifndef CAIRN_SERVER_REPLICATE_H
#define CAIRN_SERVER_REPLICATE_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"
#include "stream.h"
#include "volume.h"

/* Progress: bytes of volume data done so far, and the total when it is
 * known (0 when not).
 */
typedef void (*repl_progress_fn) (void *opaque, uint64_t done, uint64_t total);

/* ---------------------------------------------------------------- send */

struct repl_send_opts {
  const char *from;           /* NULL: a full stream; else the base, an older
                                 snapshot of the same volume: SNAP or
                                 VOL@SNAP */
  const char *resume;         /* NULL, or the resume token a receiver gave
                                 out: continue its interrupted stream */
  bool dry_run;               /* read no data (zeros go in its place): the
                                 stream has the real size, not the data */
  stream_sink_fn sink;        /* where the stream goes */
  void *sink_opaque;
  repl_progress_fn progress;  /* NULL: none */
  void *progress_opaque;
};

struct repl_send_result {
  uint64_t stream_bytes;      /* bytes given to the sink */
  uint64_t data_bytes;        /* volume data in WRITE records */
  uint8_t digest[STREAM_SHA_LEN];   /* the stream digest (END's SHA-256) */
};

/* Send snapshot snap ("VOL@SNAP") as a stream (see repl_send_opts).  A
 * full stream carries the snapshot's data and leaves holes out; an
 * incremental one carries what vol_diff finds between the base and snap,
 * holes as ZERO records.
 */
int repl_send (struct cairn_pool *pool, const char *snap,
               const struct repl_send_opts *opts,
               struct repl_send_result *res) CAIRN_WUR;

/* The volume data bytes a stream of snap from base `from` (NULL: a full
 * stream; SNAP or VOL@SNAP) would carry, from the diff alone; snap and the
 * base are checked as repl_send checks them.
 */
int repl_send_data (struct cairn_pool *pool, const char *snap,
                    const char *from, uint64_t *bytes) CAIRN_WUR;

/* ---------------------------------------------------------------- receive */

struct repl_recv_opts {
  repl_progress_fn progress;  /* NULL: none (total is always 0) */
  void *progress_opaque;
  bool rollback;              /* an incremental stream may roll a target
                                 that diverged from its base back to the
                                 base when it publishes (receive.c) */
  /* The command that asks for rollback, as the user types it, for the
   * advice of a refusal ("cairn pull HOST VOL --rollback"); NULL: the
   * option alone ("--rollback", which receive and replicate share).
   */
  const char *rollback_hint;
};

struct repl_recv_result {
  char name[2 * VOL_NAME_MAX + 2];  /* the snapshot published: VOL@SNAP */
  bool incremental;
  bool resumed;               /* the stream continued an interrupted one */
  uint64_t stream_bytes;      /* stream bytes consumed */
  uint64_t data_bytes;        /* volume data written */
  uint8_t digest[STREAM_SHA_LEN];
  /* With opts.rollback: what rolling the target back to the stream's base
   * discarded (nothing: no snapshots, no writes).
   */
  struct vol_discarded discarded;
  /* After a failure: whether the receive kept its progress, and the token
   * that resumes it (`cairn send --resume TOKEN`).
   */
  bool kept;
  char token[STREAM_TOKEN_MAX];
};

struct repl_recv;

/* Start a receive into volume target.  If an earlier receive into target
 * was interrupted and kept its progress, the stream must be the resumed one
 * (the sender continues from its token); else the stream starts afresh.
 */
int repl_recv_new (struct cairn_pool *pool, const char *target,
                   const struct repl_recv_opts *opts, struct repl_recv **rrp)
  CAIRN_WUR;
/* Apply the next len bytes of the stream.  Returns 0 when all were used,
 * 1 when the stream ended (its END verified and the snapshot published)
 * with *used bytes taken, or the error that stopped the receive (then
 * repl_recv_finish tells what was kept).
 */
int repl_recv_feed (struct repl_recv *rr, const void *buf, size_t len,
                    size_t *used) CAIRN_WUR;
/* At the end of the input: 0 when the stream was received and published,
 * else its error, with res->kept and res->token saying whether and how it
 * can be resumed.  res is filled either way.
 */
int repl_recv_finish (struct repl_recv *rr, struct repl_recv_result *res)
  CAIRN_WUR;
void repl_recv_free (struct repl_recv *rr);

/* The resume token of target's interrupted receive (-ENOENT: none). */
int repl_recv_token (struct cairn_pool *pool, const char *target,
                     char token[STREAM_TOKEN_MAX]) CAIRN_WUR;
/* Discard target's interrupted receive and what it had received. */
int repl_recv_abort (struct cairn_pool *pool, const char *target) CAIRN_WUR;

#endif /* CAIRN_SERVER_REPLICATE_H */
