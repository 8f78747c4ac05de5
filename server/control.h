/* Cairn control server (DESIGN §1, §4).
 *
 * The control server answers the control protocol (proto/rpc.h) on a
 * Unix socket and, when configured, on TCP.  It runs a libuv loop on a
 * thread of its own, started from the plugin's .after_fork, and owns
 * nothing global: every handle hangs off struct control_server.
 *
 * Every management operation is a method: a name and a handler in a
 * method table.  The server's own methods ("server.*") are built in; other
 * modules hand their tables in through control_config.  A handler either
 * runs on the loop thread (it must then be quick and never block: no disk,
 * no locks held for long) or, when the method is marked blocking, on
 * libuv's threadpool, which is where all engine work goes.  The same
 * tables serve `cairn --pool PATH` without a server, through
 * control_call_local.
 *
 * Requests on one connection run one at a time, in order, and are answered
 * in order; connections run in parallel.  Long requests (send, receive)
 * register as jobs (job.list, job.cancel) and report progress as
 * notifications to their connection while they run; the stream methods
 * switch their connection to stream mode (see the end of this file).
 */
#ifndef CAIRN_SERVER_CONTROL_H
#define CAIRN_SERVER_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "grants.h"
#include "tls.h"
#include "util.h"

/* Queued replies a client may leave unread before it is disconnected. */
#define CONTROL_DEFAULT_MAX_OUTPUT (4 * 1024 * 1024)
/* Connections served at once; more are told "busy" and closed. */
#define CONTROL_DEFAULT_MAX_CLIENTS 128
/* Seconds a TCP client of a TLS-enabled port has to finish setting up its
 * session (control_config.handshake_timeout_ms).
 */
#define CONTROL_DEFAULT_HANDSHAKE_TIMEOUT_S 10
/* Longest delay "server.ping" accepts, in milliseconds. */
#define CONTROL_PING_MAX_DELAY_MS 10000

/* Why a control port on TCP without TLS does not start, and what to do. */
#define CONTROL_INSECURE_ADVICE                                            \
  "the control port on TCP has no TLS keys, so anyone who reaches it "     \
  "could manage the pool: give it keys (control-tls-psk=FILE or "          \
  "control-tls-certificates=DIR; cairnd --tls-psk FILE or --tls-certs "    \
  "DIR), or, on a trusted host or network only, say so with "              \
  "control-insecure=true (cairnd --control-insecure), which listens on "   \
  "127.0.0.1 unless control-tcp= names another address"

/* What a handler sees of its request: opaque, see the accessors below. */
struct control_ctx;

/* A method.  The handler gets params (an object, an array, or NULL when
 * the request had none) and returns 0 with a new reference in *result
 * (NULL means null), or a negative errno after setting a message with
 * cairn_error; the errno picks the error code (control_error_code).
 */
struct control_method {
  const char *name;          /* "module.verb" */
  int (*handler) (struct control_ctx *ctx, json_t *params, json_t **result);
  bool blocking;             /* run on the threadpool, not the loop */
  bool long_running;         /* with blocking: on a thread of its own (a
                                stream, a job that may last hours) */
};

/* A method table handed in by a module. */
struct control_method_table {
  const struct control_method *methods;
  size_t n;
};

/* Work a server's modules do by themselves, not for a request (the
 * engine reclaiming deleted snapshots' space), shown among the jobs.
 */
struct control_bg_job {
  uint64_t key;              /* > 0, stable while it runs, unique */
  char method[48];           /* what kind of work ("reclaim") */
  char what[640];            /* what it works on, for people */
  uint64_t done, total;      /* bytes; total 0 when unknown */
  int64_t started;           /* wall clock (seconds since the epoch) */
  /* job.cancel refuses with this (borrowed, static), or NULL: the job
   * cannot be cancelled then either, and nothing says why.
   */
  const char *no_cancel;
};

/* How to run a server.  Only unix_path is required. */
struct control_config {
  const char *unix_path;     /* control socket; made mode 0660 */
  const char *unix_group;    /* if set, the socket's group (by name) */
  const char *tcp_address;   /* if set, also listen on TCP here */
  unsigned tcp_port;         /* with tcp_address; 0 picks a free port */
  /* TCP with tls_mode TLS_OFF has no authentication at all: the server
   * refuses to start it unless this says the operator asked for exactly
   * that (control-insecure=true).
   */
  bool tcp_insecure;
  /* TLS on the TCP port (tls.c): off, on (each client chooses) or require;
   * with on or require, tls holds the server's credentials (borrowed: it
   * must outlive the server).  The Unix socket is always plain.
   */
  enum tls_mode tls_mode;
  struct tls_ctx *tls;
  /* With TLS on or require: a TCP client that has not finished its TLS
   * handshake (or, plain, been accepted by its first byte) this long after
   * connecting is closed and logged (warn), so that idle or stalled
   * connections cannot hold the server's connection slots.  Includes a
   * plain client that control-tls=require refused and that stays
   * connected.  0: CONTROL_DEFAULT_HANDSHAKE_TIMEOUT_S.
   */
  unsigned handshake_timeout_ms;
  /* If set, every request is checked against these grants (borrowed:
   * must outlive the server; cairn-grants(5)).  NULL: no grants file,
   * every client is the administrator.
   */
  struct grants_store *grants;
  size_t max_output;         /* 0: CONTROL_DEFAULT_MAX_OUTPUT */
  unsigned max_clients;      /* 0: CONTROL_DEFAULT_MAX_CLIENTS */
  const struct control_method_table *tables;   /* besides "server.*" */
  size_t n_tables;
  void *opaque;              /* handed to handlers: control_ctx_opaque */
  /* If set, told about events worth a log line (a client dropped for not
   * reading its replies, ...).  Called on the loop thread.
   */
  void (*log) (void *opaque, const char *msg);
  /* If set, told instead of log about what an operator should see without
   * debugging on: TCP clients refused or failing TLS.  Loop thread.
   */
  void (*warn) (void *opaque, const char *msg);
  /* If set, given each audit record (audit.c) as a line for the server
   * log: "TIME PRINCIPAL METHOD TARGET: OUTCOME".  Any thread.
   */
  void (*audit) (void *opaque, const char *line);
  /* If set, lists the work done by itself (control_bg_job) for job.*:
   * *jobs malloc'd (NULL when *n is 0), or a negative errno with a
   * message.  Called on the loop thread: it must be quick (memory only).
   */
  int (*background_jobs) (void *opaque, struct control_bg_job **jobs,
                          size_t *n);
};

struct control_server;

/* Where a server listens on TCP (control-tcp=, metrics=): split
 * "[ADDR:]PORT" ("[V6ADDR]:PORT" for IPv6) into *addr (malloc'd;
 * 127.0.0.1 when not given: loopback unless asked) and *port, 0 to 65535.
 * -EINVAL with a message naming what, for bad input.
 */
int listen_parse (const char *what, const char *value, char **addr,
                  unsigned *port) CAIRN_WUR;

/* Bind the sockets and start the loop thread.  Fails (with a message) if
 * another server is live on the socket path; a stale socket is replaced.
 */
int control_server_start (const struct control_config *cfg,
                          struct control_server **out) CAIRN_WUR;
/* Stop the server: cancel running requests, close every connection, join
 * the thread, remove the socket, free everything.  NULL is allowed.
 */
void control_server_stop (struct control_server *srv);
/* The TCP port the server listens on, or 0 if it has no TCP listener. */
unsigned control_server_tcp_port (const struct control_server *srv);

/* Run one request line through the method tables of cfg on this thread,
 * without a server (`cairn --pool PATH` on a stopped pool).  Sets *reply to
 * the reply line (malloc'd, '\n'-terminated), or NULL for a notification.
 * Returns 0 or a negative errno (out of memory, a method named twice).
 */
int control_call_local (const struct control_config *cfg, const char *line,
                        size_t len, char **reply, size_t *reply_len)
  CAIRN_WUR;

/* The opaque pointer of the config the request came through. */
void *control_ctx_opaque (const struct control_ctx *ctx);
/* True once the request should stop early: the server is stopping or the
 * client is gone.  Long blocking handlers poll this and return -ECANCELED.
 */
bool control_ctx_cancelled (const struct control_ctx *ctx);
/* True when the request's caller may see the volume, snapshot or export
 * called name (cairn-grants(5): some operation or NBD access on it);
 * always without grants.  For handlers whose result sums over what the
 * caller may see (stats.list's total).
 */
bool control_ctx_may_see (struct control_ctx *ctx, const char *name);
/* Refuse the params: sets the message, makes the reply -32602
 * "invalid-params", and returns -EINVAL for the handler to return.
 */
int control_invalid_params (struct control_ctx *ctx, const char *fmt, ...)
  CAIRN_PRINTF (2, 3) CAIRN_WUR;

/* ------------------------------------------------------------ jobs
 *
 * A blocking handler that may run long makes itself a job: it shows in
 * "job.list" with its progress, "job.cancel" makes control_ctx_cancelled
 * true for it, and progress goes to the requesting connection as
 * "job.progress" notifications (at most twice a second).  The job leaves
 * the list when the handler returns.  Without a connection (in-process
 * calls) these do nothing and report no job.
 */

/* Besides, the background work of control_config's background_jobs is
 * listed with ids from the same counter, kept as long as it runs; job.show
 * shows it and job.cancel refuses it with its no_cancel message.
 */
/* Register the request as a job, described by what ("tank/db@monday").
 * Returns its id (> 0), or 0 when there is no server to register with.
 */
uint64_t control_job_start (struct control_ctx *ctx, const char *what);
/* Report progress (bytes done of total; total 0 when unknown). */
void control_job_progress (struct control_ctx *ctx, uint64_t done,
                           uint64_t total);
/* Copy the jobs of the requests running now (sends, receives,
 * replications) for a reader on another thread, the metrics endpoint:
 * key is the job's id; background work is not among them (the
 * background_jobs callback lists it).  *jobs malloc'd, NULL when *n is 0;
 * only -ENOMEM fails.  Takes the registry's mutex for the copy alone.
 */
int control_server_jobs (struct control_server *srv,
                         struct control_bg_job **jobs, size_t *n) CAIRN_WUR;

/* ------------------------------------------------------------ stream mode
 *
 * A blocking handler switches its connection to stream mode with
 * control_stream_begin: the client gets a "stream.ready" notification
 * (params: info, plus "id": the request's id and "direction"), then the
 * stream's frames (proto/rpc.h, cairn-protocol(7) STREAM MODE), and when
 * the handler returns, its reply as usual.  control.c and
 * control-request.c do the framing, the backpressure and the end frame.
 * Only over a connection: an in-process call gets -ENOTSUP.
 */

/* Start stream mode: send is true when the server sends the stream, false
 * when it receives one.  info (may be NULL) is borrowed.
 */
int control_stream_begin (struct control_ctx *ctx, bool send, json_t *info)
  CAIRN_WUR;
/* Send stream bytes (after begin with send): blocks while the client is
 * slow to read.  -EPIPE if it went away, -ECANCELED if cancelled.
 */
int control_stream_write (struct control_ctx *ctx, const void *buf,
                          size_t len) CAIRN_WUR;
/* Receive stream bytes (after begin with !send): 0 with *n > 0, 0 with
 * *n == 0 at the end of the stream, -EPIPE if the client went away first,
 * -ECANCELED if cancelled.
 */
int control_stream_read (struct control_ctx *ctx, void *buf, size_t cap,
                         size_t *n) CAIRN_WUR;
/* Add members to the "data" of the error reply (taking data), e.g. the
 * resume token of an interrupted receive.
 */
void control_ctx_error_data (struct control_ctx *ctx, json_t *data);

#endif /* CAIRN_SERVER_CONTROL_H */
