/* Cairn control client: a small synchronous client of the control protocol
 * (proto/rpc.h) for the `cairn` CLI, the server's replication
 * (server/methods-replicate.c) and the tests.
 *
 * One connection to a server's Unix socket or TCP port (control-client-tcp.c,
 * with or without TLS); each call sends one request and waits for its
 * reply, with a timeout.  Notifications that arrive meanwhile
 * (job progress) go to an optional callback.  Errors are negative errnos
 * with a message (cairn_errmsg) that tells the user what to do; an error
 * reply from the server keeps its code and name for the caller.
 */
#ifndef CAIRN_NET_CONTROL_CLIENT_H
#define CAIRN_NET_CONTROL_CLIENT_H

#include <stdbool.h>

#include <jansson.h>

#include "util.h"

/* Longest reply line the client accepts (replies can list a whole pool). */
#define CONTROL_CLIENT_MAX_REPLY (64 * 1024 * 1024)

struct control_client;

/* Called for each notification received while waiting for a reply. */
typedef void (*control_client_notify_fn) (void *opaque, const char *method,
                                          json_t *params);

/* Connect to the server at a Unix socket path.  timeout_ms bounds the
 * connect and every later call (negative: wait for ever); a notification
 * (job progress) starts the call's time afresh.  When nobody
 * serves the path, the message says how to start a server.
 */
int control_client_connect (const char *path, int timeout_ms,
                            struct control_client **out) CAIRN_WUR;
/* Call a method (params may be NULL) and wait for its reply: returns 0 with
 * a new reference in *result, or a negative errno.  For an error reply the
 * errno is control_error_errno of its code, the message is the server's,
 * and control_client_error_code/name tell the code.  After a timeout or a
 * broken connection the client refuses further calls: reconnect.
 */
int control_client_call (struct control_client *c, const char *method,
                         json_t *params, json_t **result) CAIRN_WUR;
/* Bound every later call by timeout_ms (negative: no bound, for methods
 * that take as long as they need), and, when liveness_ms > 0, check after
 * each liveness_ms without a byte from the server that it still answers
 * (server.version on a second connection, bounded by liveness_ms): a call
 * to a hung or stopped server then fails with -ETIMEDOUT after at most two
 * intervals, while one to a busy server waits.
 */
void control_client_set_timeout (struct control_client *c, int timeout_ms,
                                 int liveness_ms);
/* The code of the last error reply, or 0 if the last call got none. */
int control_client_error_code (const struct control_client *c);
/* The symbolic name of the last error reply ("" if none or not given). */
const char *control_client_error_name (const struct control_client *c);
/* Route notifications to fn (NULL: drop them). */
void control_client_set_notify (struct control_client *c,
                                control_client_notify_fn fn, void *opaque);
/* The "data" object of the last error reply (borrowed; NULL if none):
 * e.g. {"name": "io", "token": "..."} for an interrupted receive.
 */
json_t *control_client_error_data (const struct control_client *c);

/* Connect to a server's control port on TCP (control-tcp=): host is a
 * name or an address.  With tls (client credentials, net/tls.h;
 * borrowed: it must outlive the client), run a TLS handshake first,
 * checking that the server's certificate names host; a failure says
 * "TLS handshake with HOST:PORT failed: why".
 */
struct tls_ctx;
/* Split "HOST[:PORT]" or "[V6ADDR][:PORT]" (the port defaulting to
 * CONTROL_DEFAULT_TCP_PORT of proto/rpc.h) into host (hostlen bytes) and *port.
 * Returns 0 or -EINVAL with a message.
 */
int control_client_parse_address (const char *arg, char *host,
                                  size_t hostlen, unsigned *port) CAIRN_WUR;
int control_client_connect_tcp (const char *host, unsigned port,
                                struct tls_ctx *tls, int timeout_ms,
                                struct control_client **out) CAIRN_WUR;
/* The same in two steps, so that the handshake can be cancelled
 * (control_client_set_cancel in between): connect with tls NULL, then
 * start TLS on the new connection.  On failure, close the client.
 */
int control_client_start_tls (struct control_client *c, struct tls_ctx *tls)
  CAIRN_WUR;

/* Stream mode (cairn-protocol(7) STREAM MODE).
 *
 * Start a stream method (stream.send, stream.receive): returns 0 with the
 * "stream.ready" params in *ready (the connection now streams), 1 with
 * *result when the server replied without a stream (a dry run), or an
 * error (the server's refusal: nothing streams).  Every wait then is
 * bounded by the timeout, counted afresh for each piece.
 */
int control_client_stream_start (struct control_client *c, const char *method,
                                 json_t *params, json_t **ready,
                                 json_t **result) CAIRN_WUR;
/* Server to client: the next piece of stream data (*data valid until the
 * next call): 0 with *n > 0, 0 with *n == 0 at the end of the stream (then
 * call control_client_stream_finish), or an error.  Notifications inside
 * the stream go to the notify callback.
 */
int control_client_stream_read (struct control_client *c, const void **data,
                                size_t *n) CAIRN_WUR;
/* Client to server: send stream bytes.  0, 1 when the server has replied
 * already (it stopped taking the stream: call control_client_stream_finish
 * to get why), or an error.
 */
int control_client_stream_write (struct control_client *c, const void *buf,
                                 size_t len) CAIRN_WUR;
/* End the stream: with send_end, send the end frame first (client to
 * server).  Then wait for the request's reply: 0 with *result, or the
 * error reply's errno (control_client_error_data has its data).
 */
int control_client_stream_finish (struct control_client *c, bool send_end,
                                  json_t **result) CAIRN_WUR;

/* Have every wait check cancelled(opaque) at least 5 times a second, and
 * fail with -ECANCELED once it is true (NULL: never).  For a server job
 * that talks to another server: it must stop soon when cancelled.
 */
void control_client_set_cancel (struct control_client *c,
                                 bool (*cancelled) (void *opaque),
                                 void *opaque);

/* Close the connection and free the client (NULL is allowed). */
void control_client_close (struct control_client *c);

#endif /* CAIRN_NET_CONTROL_CLIENT_H */
