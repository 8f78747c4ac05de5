/* Cairn control client: a small synchronous client of the control protocol
 * (proto/control.h) for the `cairn` CLI and the tests.
 *
 * One connection to a server's Unix socket; each call sends one request and
 * waits for its reply, with a timeout.  Notifications that arrive meanwhile
 * (job progress) go to an optional callback.  Errors are negative errnos
 * with a message (cairn_errmsg) that tells the user what to do; an error
 * reply from the server keeps its code and name for the caller.
 */
#ifndef CAIRN_CLIENT_CONTROL_CLIENT_H
#define CAIRN_CLIENT_CONTROL_CLIENT_H

#include <jansson.h>

#include "util.h"

/* Longest reply line the client accepts (replies can list a whole pool). */
#define CONTROL_CLIENT_MAX_REPLY (64 * 1024 * 1024)

struct control_client;

/* Called for each notification received while waiting for a reply. */
typedef void (*control_client_notify_fn) (void *opaque, const char *method,
                                          json_t *params);

/* Connect to the server at a Unix socket path.  timeout_ms bounds the
 * connect and every later call (negative: wait for ever).  When nobody
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
/* Close the connection and free the client (NULL is allowed). */
void control_client_close (struct control_client *c);

#endif /* CAIRN_CLIENT_CONTROL_CLIENT_H */
