/* Cairn control server: the method tables of the engine's operations.
 *
 * cairn_catalog_methods holds the "volume.*", "snapshot.*" and "pool.*"
 * methods (the protocol is described method by method in
 * cairn-protocol(7)).  Every one of them is blocking: it runs on the
 * threadpool, or on the caller's thread through control_call_local.
 *
 * The opaque pointer of the control_config that carries this table
 * (control_ctx_opaque) must point to a struct cairn_methods_ctx that
 * outlives the server: the pool the methods work on, and room for what
 * later methods need (jobs, export statistics).
 */
#ifndef CAIRN_SERVER_METHODS_H
#define CAIRN_SERVER_METHODS_H

#include "control.h"
#include "pool.h"

/* Most runs one "volume.diff" reply carries; the reply then says
 * "truncated": true.  About 5 MB of JSON.
 */
#define CONTROL_DIFF_MAX_RUNS 100000

/* What the catalog methods work on. */
struct cairn_methods_ctx {
  struct cairn_pool *pool;
  /* The server's control TLS credentials, which replication jobs use as
   * their client credentials (methods-replicate.c); NULL or without files:
   * none.
   */
  const struct tls_config *tls;
  /* A standby server (cairn_standby_methods): what it waits for, as a new
   * JSON object (NULL: out of memory), called on the control thread.
   */
  json_t *(*standby_status) (void *opaque);
  void *standby_opaque;
};

extern const struct control_method_table cairn_catalog_methods;
/* "stream.*": send and receive in stream mode (methods-stream.c); these
 * need a connection, so they answer over a server only.
 */
extern const struct control_method_table cairn_stream_methods;
/* "replicate.*": push and pull to and from another server's control port
 * (methods-replicate.c).
 */
extern const struct control_method_table cairn_replicate_methods;
/* What a standby server answers while it has no pool (methods-rbd.c):
 * pool.status, with {"standby": standby_status ()}.
 */
extern const struct control_method_table cairn_standby_methods;

struct dev_rbd_info;
/* One RBD device as pool.status shows it (methods-rbd.c). */
json_t *rbd_info_json (const struct dev_rbd_info *ri);

/* The engine's background reclaims as jobs (methods-jobs.c): for
 * control_config.background_jobs, with opaque a struct cairn_methods_ctx.
 */
int cairn_background_jobs (void *opaque, struct control_bg_job **jobsp,
                           size_t *np) CAIRN_WUR;

/* One receive per target at a time (methods-stream.c): claim target
 * (waiting a while for a running receive into it to end) and release it.
 * Returns the slot, or -EBUSY.
 */
int stream_recv_claim (const char *target) CAIRN_WUR;
void stream_recv_release (int slot);

struct repl_recv_result;
/* A received snapshot as the replies of stream.receive and replicate.pull
 * give it (methods-stream.c): {"snapshot", "incremental", "resumed",
 * "stream_bytes", "data_bytes", "digest", "discarded"?: {"base",
 * "snapshots", "snapshots_total", "writes", "writes_since"?}}, "discarded"
 * only when a rollback discarded something.  NULL when out of memory.
 */
json_t *repl_recv_result_json (const struct repl_recv_result *res);

#endif /* CAIRN_SERVER_METHODS_H */
