/* Cairn control server: what server/ shares inside itself.
 *
 * dispatch.c turns a request line into a reply with no event loop in sight
 * (the method registry, the per-request context, the handler call and the
 * reply); control.c, control-request.c and control-tls.c do sockets and
 * threads around it; methods.c holds the built-in "server.*" methods.
 */
#ifndef CAIRN_SERVER_CONTROL_INT_H
#define CAIRN_SERVER_CONTROL_INT_H

#include <pthread.h>
#include <time.h>
#include <stdatomic.h>

#include "chan.h"
#include "control.h"
#include "grants.h"
#include "rpc.h"

/* A long request that job.list shows and job.cancel stops (jobs.c). */
struct control_job {
  struct control_job *next;
  uint64_t id;
  char method[48];
  char what[640];               /* what it works on, for people */
  atomic_bool cancel;           /* job.cancel */
  int64_t start_ms;             /* monotonic */
  int64_t start_time;           /* wall clock (seconds since the epoch) */
  uint64_t done, total;         /* under the registry's lock */
  int64_t notified_ms;          /* last progress notification */
  bool notified_all;            /* the one with done reaching total went */
  bool background;              /* a control_bg_job, not a request's */
  uint64_t bg_key;              /* with background: its key */
  const char *no_cancel;        /* with background: job.cancel's refusal */
};

/* The jobs of a server. */
struct control_jobs {
  pthread_mutex_t lock;
  struct control_job *head;
  uint64_t next_id;
  /* control_config's background_jobs and opaque (may be NULL) */
  int (*background) (void *opaque, struct control_bg_job **jobs, size_t *n);
  void *opaque;
};

/* Every method a server answers, sorted by name. */
struct control_registry {
  const struct control_method **methods;
  size_t n;
};

/* One request on its way through a handler.
 *
 * It is created on the loop thread, handed to one threadpool thread for a
 * blocking method (uv_queue_work orders the two), and answered and freed
 * back on the loop thread.
 */
/* The audit trail (audit.c): the newest CONTROL_AUDIT_RING records. */
#define CONTROL_AUDIT_RING 1024
struct control_audit_entry {
  time_t time;
  char principal[300];
  char method[48];
  char target[520];
  char outcome[600];
};
struct control_audit {
  pthread_mutex_t lock;
  struct control_audit_entry ring[CONTROL_AUDIT_RING];
  size_t head, n;               /* oldest record, how many */
  uint64_t dropped;             /* overwritten since start */
  void (*log) (void *opaque, const char *line);   /* may be NULL */
  void *opaque;
};

struct control_ctx {
  const struct control_registry *reg;
  const struct control_method *method;
  void *opaque;
  struct control_request req;   /* owns the message; params point into it */
  json_t *result;               /* on success (NULL means null) */
  int err;                      /* 0 or the handler's negative errno */
  int code;                     /* error code forced by the handler, or 0 */
  char message[1024];           /* the handler's error message */
  const atomic_bool *cancel[3]; /* set: stop early (may be NULL) */
  /* Who asked (a copy of its connection's), and the grants in force:
   * gate.c checks and filters with them.  grants NULL: no grants file, or
   * an in-process call (the administrator).
   */
  struct grants_store *grants;
  struct grant_peer peer;
  char peer_ident[256];         /* peer.psk_identity / x509_name point here */
  struct control_audit *audit;  /* the server's, or NULL (in-process) */
  json_t *error_data;           /* more "data" for the error reply */
  /* Set by control-request.c for a blocking request on a connection: */
  struct control_jobs *jobs;    /* the server's jobs (job.*) */
  struct chan *chan;            /* to the loop thread (stream mode) */
  /* Owned by the worker: */
  struct control_job *job;      /* registered by control_job_start */
  char *sbuf;                   /* stream data not yet framed */
  size_t slen;
  bool streaming;               /* control_stream_begin succeeded */
};

/* ------------------------------------------------------------ the server
 *
 * A running server (control-server.c starts and stops it; control.c runs
 * its connections on the loop thread, with control-request.c and
 * control-tls.c).
 */
#include <uv.h>

struct conn;
struct job;

struct control_server {
  uv_loop_t loop;
  uv_pipe_t unix_listener;
  uv_tcp_t tcp_listener;
  uv_async_t stop_async;
  uv_async_t wake_async;           /* a worker queued on a channel */
  uv_timer_t setup_timer;          /* TLS ports: closes clients that do
                                      not finish setting up (control-tls.c) */
  bool loop_inited, unix_inited, tcp_inited, async_inited, wake_inited;
  bool timer_inited;
  pthread_t thread;
  atomic_bool stopping;            /* set by control_server_stop */

  struct control_registry *reg;
  void *opaque;
  void (*log) (void *opaque, const char *msg);
  void (*warn) (void *opaque, const char *msg);
  size_t max_output;
  unsigned max_clients;
  unsigned tcp_port;
  enum tls_mode tls_mode;          /* of the TCP port (tls.c) */
  unsigned handshake_timeout_ms;   /* control_config's (not 0) */
  struct tls_ctx *tls;             /* its credentials (borrowed), or NULL */
  struct grants_store *grants;     /* control_config's (borrowed), or NULL */
  struct control_audit audit;      /* changes made through control */

  struct conn *conns;              /* open connections */
  unsigned nconns;
  struct control_jobs jobs;
  struct job *threads;             /* jobs on threads of their own */
};

/* ------------------------------------------------------------ connections
 *
 * A client's connection and its running request, on the loop thread
 * (design note, invariants and states in control.c): control.c holds
 * their lifecycle, reading and writing; control-request.c runs the
 * requests, the worker's channel and stream mode; control-tls.c does TLS
 * and the setup deadline.
 */

/* Bytes read from a socket at a time. */
#define CONTROL_READ_SIZE (64 * 1024)

struct job {
  uv_work_t work;
  struct conn *conn;
  struct control_ctx *ctx;
  struct chan *chan;               /* to the worker (stream mode, progress) */
  /* A long-running method's job runs on a thread of its own (see
   * conn_dispatch), listed here until the loop has finished it:
   */
  bool own_thread;
  struct job *next_thread;
  atomic_bool finished;            /* the thread's handler returned */
};

struct conn {
  struct control_server *srv;
  union {
    uv_handle_t handle;
    uv_stream_t stream;
    uv_pipe_t pipe;
    uv_tcp_t tcp;
  } h;
  struct conn *prev, *next;        /* in srv->conns while open */
  unsigned refs;
  bool reading, eof, shutting, closing;
  bool tcp;                        /* came through the TCP listener */
  bool sniffed;                    /* TCP: its first byte chose TLS or not */
  bool refused;                    /* a plain client of control-tls=require:
                                      told why, its input is dropped */
  bool busy;                       /* over max_clients: to be refused */
  uint64_t setup_deadline;         /* TLS port: uv_now by which its TLS
                                      handshake must be done (or its first
                                      byte have made it a plain client
                                      that is served); 0: none (invariant
                                      10) */
  struct tls_session *tls;         /* a TLS client's session, or NULL */
  char *pbuf;                      /* TLS: plaintext of one read */
  char peer[64];                   /* TCP: "ADDR:PORT", for messages */
  struct grant_peer who;           /* what grants know of it (gate.c) */
  char who_ident[256];             /* TLS: who.psk_identity / x509_name */
  enum chan_mode smode;            /* stream mode, as the loop sees it */
  bool discarding;                 /* reading a stream nobody takes */
  bool in_paused;                  /* stopped reading: the worker is behind */
  struct control_frames frames;    /* the client's stream frames */
  atomic_bool cancel;              /* the client is gone */
  struct job *job;                 /* the request running, or NULL */
  uv_shutdown_t shutdown_req;
  struct control_lines lines;
  char rbuf[CONTROL_READ_SIZE];
};

/* control.c: tell the host about an event, if it asked to hear. */
void srv_log (struct control_server *srv, const char *fmt, ...)
  CAIRN_PRINTF (2, 3);
/* Warn the host about a refused or failed client (else log it). */
void srv_warn (struct control_server *srv, const char *fmt, ...)
  CAIRN_PRINTF (2, 3);
/* Drop a reference; the last one frees the conn. */
void conn_unref (struct conn *conn);
/* Drop the loop's reference to a channel (loop thread only). */
void chan_unref (struct chan *ch);
/* Close a connection now, dropping unsent replies and cancelling its
 * request.
 */
void conn_close (struct conn *conn);
/* Send what is queued, then close (invariant 5). */
void conn_shutdown (struct conn *conn);
/* Write what TLS made for the peer (handshake, alerts, close_notify):
 * before anything else is queued (tls.c invariant 1).
 */
void conn_tls_flush (struct conn *conn);
/* Write bytes (taking them); ch: a worker's message, counted against its
 * channel's limit until written.
 */
void conn_write (struct conn *conn, char *data, size_t len, struct chan *ch);
/* Queue a reply line (taking ownership of it). */
void conn_send (struct conn *conn, char *line, size_t len);
/* Start or stop reading as the conn wants. */
void conn_set_reading (struct conn *conn, bool want_read);
/* Send an error reply that belongs to no request. */
void conn_send_error (struct conn *conn, int code, const char *message);
/* Process the buffered lines as far as possible, then decide whether to
 * read more (invariants 2, 3 and 5).
 */
void conn_pump (struct conn *conn);
/* The client's input ended (EOF, or a TLS close_notify). */
void conn_eof (struct conn *conn);
/* Plaintext from the client: request lines or stream frames. */
void conn_input (struct conn *conn, const char *data, size_t n);
/* Refuse a client over the connection limit: an error reply, then close. */
void conn_refuse_busy (struct conn *conn);

/* control-request.c: start one request line: answer it, run it here, or
 * queue it.
 */
void conn_dispatch (struct conn *conn, const char *line, size_t len);
/* Stream bytes from the client (stream mode "receive", or discarding the
 * rest of a stream whose request has ended).
 */
void conn_stream_input (struct conn *conn, const char *data, size_t n);

/* control-tls.c: ciphertext from a TLS client, decrypted and handed on
 * (tls.c invariant 2).
 */
void conn_tls_input (struct conn *conn, const char *data, size_t n);
/* The first byte of a TCP client chooses TLS or plain (tls.c).  Returns
 * false when the connection is refused.
 */
bool conn_sniff (struct conn *conn, unsigned char first);

/* Loop callbacks that control-server.c installs (control.c,
 * control-request.c, control-tls.c), and the closing of every connection
 * when the server stops (loop thread).
 */
void control_on_connection (uv_stream_t *listener, int status);
void control_on_wake (uv_async_t *async);
void control_on_setup_timer (uv_timer_t *timer);
void control_conns_close (struct control_server *srv);

/* Bind and listen (control-listen.c): the Unix socket of cfg, or its TCP
 * address (the bound port in *port_out).  *inited is set once the handle
 * needs closing; its data is set to data.
 */
int control_listen_unix (uv_loop_t *loop, uv_pipe_t *listener, bool *inited,
                         const struct control_config *cfg, void *data,
                         uv_connection_cb cb) CAIRN_WUR;
int control_listen_tcp (uv_loop_t *loop, uv_tcp_t *listener, bool *inited,
                        const struct control_config *cfg, void *data,
                        uv_connection_cb cb, unsigned *port_out) CAIRN_WUR;

/* The jobs registry (jobs.c). */
void control_jobs_init (struct control_jobs *jobs);
void control_jobs_destroy (struct control_jobs *jobs);
/* The "job.*" methods (jobs.c). */
extern const struct control_method_table control_job_methods;
/* After the handler returned (worker): flush stream data, leave the job
 * registry.
 */
void control_ctx_end (struct control_ctx *ctx);

/* The grants gate (gate.c): give a request its caller, check it before
 * its handler runs, filter its result after; grants.reload.
 */
void control_ctx_set_peer (struct control_ctx *ctx,
                           struct grants_store *grants,
                           const struct grant_peer *who);
bool control_ctx_is_admin (struct control_ctx *ctx);
int control_gate_check (struct control_ctx *ctx) CAIRN_WUR;
int control_gate_filter (struct control_ctx *ctx, json_t *result) CAIRN_WUR;
extern const struct control_method_table control_grants_methods;

/* The audit trail (audit.c). */
void control_audit_init (struct control_audit *a);
void control_audit_destroy (struct control_audit *a);
void control_audit_record (struct control_ctx *ctx, const char *target,
                           int err, const char *message);
extern const struct control_method_table control_audit_methods;
/* gate.c: record the request in the audit trail if its method changes
 * something (after it ran, refused or not).
 */
void control_gate_audit (struct control_ctx *ctx, int err,
                         const char *message);

/* The built-in "server.*" methods (methods.c). */
extern const struct control_method_table control_builtin_methods;

/* Build a registry of the built-in methods and the given tables.  Fails
 * with -EEXIST if a name appears twice.
 */
int control_registry_new (const struct control_method_table *tables,
                          size_t n_tables, struct control_registry **out)
  CAIRN_WUR;
/* Free a registry (NULL is allowed). */
void control_registry_free (struct control_registry *reg);
/* Find a method by name, or NULL. */
const struct control_method *
control_registry_find (const struct control_registry *reg, const char *name);

/* Read one request line.  Sets at most one of *ctx (a request to run) and
 * *reply (an error to send at once: bad JSON, unknown method); neither
 * for a blank line or a notification of an unknown method.  Returns 0 or
 * -ENOMEM.
 */
int control_prepare (const struct control_registry *reg, void *opaque,
                     const char *line, size_t len, struct control_ctx **ctx,
                     char **reply, size_t *reply_len) CAIRN_WUR;
/* Call the handler and keep its result or its error (any thread). */
void control_ctx_run (struct control_ctx *ctx);
/* Fail a request that could not be run. */
void control_ctx_fail (struct control_ctx *ctx, int err, const char *message);
/* Format the reply: *reply is NULL for a notification.  Returns 0 or
 * -ENOMEM.
 */
int control_ctx_reply (struct control_ctx *ctx, char **reply, size_t *len)
  CAIRN_WUR;
/* Free a request. */
void control_ctx_free (struct control_ctx *ctx);

#endif /* CAIRN_SERVER_CONTROL_INT_H */
