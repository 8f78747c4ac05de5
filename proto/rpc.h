/* Cairn control protocol codec (DESIGN §4).
 *
 * The control protocol is JSON-RPC 2.0 (https://www.jsonrpc.org/specification)
 * with one message per line: every message is a single JSON object encoded
 * without newlines and terminated by '\n'.  This module is the whole wire
 * format and nothing else: pure functions over byte buffers, with no sockets
 * and no event loop, so that the server, the CLI and the fuzz tests share one
 * codec.
 *
 * Choices made here, on top of JSON-RPC 2.0:
 *
 *  1. A line may hold at most CONTROL_MAX_LINE bytes (not counting the '\n').
 *     A longer line is a protocol error: the server answers with a
 *     "too-large" error and closes the connection, because it cannot know
 *     where the next message starts.  Bulk data never travels in a line:
 *     send/receive switch the connection to stream mode (DESIGN §4).
 *  2. Batches (a JSON array of requests) are not supported: they are
 *     answered with -32600 "invalid request".  Send one request per line;
 *     pipelining several lines gives the same effect.
 *  3. An id is a string or a number.  A null id is refused (-32600): null is
 *     what error replies carry when the request's id could not be read, so a
 *     client using it could not tell its own replies from those.
 *  4. Duplicate keys, and request members other than jsonrpc, id, method
 *     and params, are refused (-32600): a typo ("param") is an error, not
 *     an argument silently ignored.
 *  5. Every error carries a stable numeric code, the symbolic name of that
 *     code in "data": {"name": ...}, and a message that says what to do.
 *     Codes and names are part of the protocol: they never change meaning,
 *     and new ones are only ever added (see control_errors in control.c).
 *
 * Functions that fail return a negative errno (CAIRN_WUR).  Malformed
 * messages are not failures of the function: they are reported as a JSON-RPC
 * error code in the parse result.
 */
#ifndef CAIRN_PROTO_RPC_H
#define CAIRN_PROTO_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util.h"

/* Version of the control protocol, reported by "server.version". */
#define CONTROL_PROTOCOL_VERSION 1

/* Longest request line in bytes, without its '\n' (1 MiB). */
#define CONTROL_MAX_LINE (1024 * 1024)
/* The TCP port of another server's control protocol when none is given
 * (replicate.push/pull, cairn replicate/pull).
 */
#define CONTROL_DEFAULT_TCP_PORT 10810

/* The JSON-RPC 2.0 error codes. */
#define CONTROL_E_PARSE            (-32700) /* "parse-error": not JSON */
#define CONTROL_E_INVALID_REQUEST  (-32600) /* "invalid-request" */
#define CONTROL_E_METHOD_NOT_FOUND (-32601) /* "method-not-found" */
#define CONTROL_E_INVALID_PARAMS   (-32602) /* "invalid-params" */
#define CONTROL_E_INTERNAL         (-32603) /* "internal": a server bug */

/* Cairn's application error codes, each the image of an errno (in
 * parentheses) that engine and handlers return.  Stable: never renumbered.
 * They lie in JSON-RPC's range for server errors, CAIRN_E_MIN..CAIRN_E_MAX.
 */
#define CAIRN_E_MIN (-32099)
#define CAIRN_E_MAX (-32000)
#define CAIRN_E_NOT_FOUND     (-32001) /* "not-found" (ENOENT) */
#define CAIRN_E_EXISTS        (-32002) /* "exists" (EEXIST) */
#define CAIRN_E_BUSY          (-32003) /* "busy" (EBUSY, EAGAIN) */
#define CAIRN_E_NOSPC         (-32004) /* "no-space" (ENOSPC, EDQUOT) */
#define CAIRN_E_IO            (-32005) /* "io" (EIO) */
#define CAIRN_E_READONLY      (-32006) /* "read-only" (EROFS) */
#define CAIRN_E_INVALID       (-32007) /* "invalid" (EINVAL, ENAMETOOLONG) */
#define CAIRN_E_CANCELLED     (-32008) /* "cancelled" (ECANCELED) */
#define CAIRN_E_TOO_LARGE     (-32009) /* "too-large" (E2BIG, EFBIG) */
#define CAIRN_E_PERMISSION    (-32010) /* "permission" (EPERM, EACCES) */
#define CAIRN_E_UNSUPPORTED   (-32011) /* "unsupported" (ENOTSUP) */
#define CAIRN_E_TIMEOUT       (-32012) /* "timeout" (ETIMEDOUT) */
#define CAIRN_E_NOMEM         (-32013) /* "no-memory" (ENOMEM) */
#define CAIRN_E_SHUTDOWN      (-32014) /* "shutting-down" (ESHUTDOWN) */

/* The JSON-RPC code for a negative (or positive) errno.  An errno with no
 * code of its own gives CONTROL_E_INTERNAL.
 */
int control_error_code (int err);
/* The negative errno for an error code, for clients that turn replies back
 * into errno values: -EPROTO for the protocol errors (-32700, -32600),
 * -ENOSYS for -32601, -EINVAL for -32602, -EIO for unknown codes.
 */
int control_error_errno (int code);
/* The symbolic name of a code ("not-found"), or NULL if the code is not
 * one of ours.
 */
const char *control_error_name (int code);
/* A generic message for a code, used when a handler set none. */
const char *control_error_message (int code);

/* ------------------------------------------------------------ framing */

/* A line splitter: bytes go in as they arrive from a socket, complete
 * lines come out.
 *
 * Invariants: buf[start, len) holds the bytes not yet returned; the last
 * `tail` bytes of it contain no '\n'; tail <= max unless overflow is set.
 * After an overflow the splitter is dead: it returns the complete lines
 * that came before the long one, then -E2BIG for ever.
 */
struct control_lines {
  char *buf;
  size_t start;        /* first byte not yet returned */
  size_t len;          /* bytes in buf */
  size_t cap;          /* allocated size of buf */
  size_t scan;         /* buf[scan, len) not yet searched for '\n' */
  size_t tail;         /* bytes after the last '\n' in buf */
  size_t max;          /* longest line, without its '\n' */
  bool overflow;       /* a line longer than max was seen */
};

/* Initialise a splitter that accepts lines of up to max bytes. */
void control_lines_init (struct control_lines *l, size_t max);
/* Free a splitter's buffer (it may be initialised again). */
void control_lines_free (struct control_lines *l);
/* Append n bytes.  Returns 0, -ENOMEM, or -E2BIG when the bytes make a
 * line longer than max (the complete lines before it are still returned
 * by control_lines_next).
 */
int control_lines_feed (struct control_lines *l, const void *data, size_t n)
  CAIRN_WUR;
/* At end of input, make an unterminated last line a complete one. */
int control_lines_finish (struct control_lines *l) CAIRN_WUR;
/* Get the next complete line: returns 1 and sets *line (NUL-terminated in
 * place of its '\n', valid until the next call on l) and *len; 0 if no
 * complete line is buffered; -E2BIG after an overlong line.
 */
int control_lines_next (struct control_lines *l, char **line, size_t *len)
  CAIRN_WUR;
/* Bytes buffered and not yet returned as lines. */
size_t control_lines_pending (const struct control_lines *l);
/* Take up to cap of the bytes buffered after the lines returned so far,
 * raw (the connection switched to stream mode after a line).  Returns how
 * many were copied to buf.
 */
size_t control_lines_take (struct control_lines *l, void *buf, size_t cap);

/* ------------------------------------------------------------ stream mode
 *
 * After a stream method is accepted (DESIGN §4, cairn-protocol(7) "STREAM
 * MODE") the bytes of the stream travel as frames, each a 4-byte
 * big-endian header and a payload:
 *
 *   header 0                       the end of the stream (no payload)
 *   header N, 1 <= N <= MAX        N bytes of stream data
 *   header 0x80000000 | N          a JSON-RPC notification of N bytes
 *                                  (server to client only; no '\n')
 *
 * Framing lets the sender end the stream (or fail) cleanly, and lets
 * progress notifications travel inside it.
 */
#define CONTROL_FRAME_MAX (1024 * 1024)      /* largest data payload */
#define CONTROL_FRAME_MESSAGE 0x80000000u    /* header flag: a notification */
#define CONTROL_FRAME_HEADER 4

/* Encode a frame header. */
void control_frame_header (uint32_t value, uint8_t out[CONTROL_FRAME_HEADER]);

/* A frame reader: bytes in as they arrive, payload pieces out. */
struct control_frames {
  uint8_t hdr[CONTROL_FRAME_HEADER];
  unsigned got;        /* header bytes read of the frame being read */
  uint32_t left;       /* payload bytes of the current frame still to come */
  bool message;        /* the current frame is a notification */
  bool ended;          /* the end frame was read */
};

enum control_frame_kind {
  CONTROL_FRAME_NONE,  /* more bytes are needed */
  CONTROL_FRAME_DATA,  /* *data, *dlen: a piece of stream data */
  CONTROL_FRAME_MSG,   /* *data, *dlen: a piece of a notification; *last
                          when it is the notification's last piece */
  CONTROL_FRAME_END,   /* the end frame */
};

/* Read from in[0, n): sets *used (bytes consumed) and returns the kind of
 * what was found, or -EPROTO (with a message) for a frame larger than
 * CONTROL_FRAME_MAX.  After the end frame nothing more is consumed.
 */
int control_frames_next (struct control_frames *f, const void *in, size_t n,
                         size_t *used, const void **data, size_t *dlen,
                         bool *last);

/* ------------------------------------------------------------ requests */

/* A request as parsed from a line.  On success, id is NULL for a
 * notification; params is NULL when absent, else an object or an array.
 * On failure, code and message say why, and id is the request's id when it
 * could still be read (so the error reply can carry it), else NULL.  id,
 * method and params point into root.
 */
struct control_request {
  json_t *root;
  json_t *id;
  const char *method;
  json_t *params;
  int code;
  char message[256];
};

/* Parse one request line (without its '\n').  Returns 0 with a request,
 * or -EBADMSG with req->code and req->message set.  Either way, call
 * control_request_free.
 */
int control_parse_request (const char *line, size_t len,
                           struct control_request *req) CAIRN_WUR;
/* Free what control_parse_request kept. */
void control_request_free (struct control_request *req);

/* ------------------------------------------------------------ messages */

/* Each formatter returns a malloc'd line ending in "\n" (and then a NUL not
 * counted in *len), or NULL when out of memory.  An id of NULL is encoded
 * as null.  The JSON arguments are borrowed.
 */

/* A request (params may be NULL: then it is left out). */
char *control_format_request (json_t *id, const char *method, json_t *params,
                              size_t *len);
/* A notification: a request without an id, e.g. "job.progress". */
char *control_format_notification (const char *method, json_t *params,
                                   size_t *len);
/* A success reply. */
char *control_format_result (json_t *id, json_t *result, size_t *len);
/* An error reply: {"code", "message", "data": {"name"}}.  A NULL or empty
 * message is replaced by the code's generic message.
 */
char *control_format_error (json_t *id, int code, const char *message,
                            size_t *len);
/* The same with more members in "data" besides "name" (data may be NULL;
 * borrowed), e.g. the resume token of an interrupted receive.
 */
char *control_format_error_data (json_t *id, int code, const char *message,
                                 json_t *data, size_t *len);

/* ------------------------------------------------------------ replies */

enum control_reply_kind {
  CONTROL_REPLY_RESULT,
  CONTROL_REPLY_ERROR,
  CONTROL_REPLY_NOTIFICATION,  /* a message from the server, e.g. progress */
};

/* A message received by a client.  All pointers point into root. */
struct control_reply {
  json_t *root;
  enum control_reply_kind kind;
  json_t *id;            /* RESULT, ERROR: the id (json null if unknown) */
  json_t *result;        /* RESULT */
  int code;              /* ERROR */
  const char *message;   /* ERROR */
  const char *name;      /* ERROR: data.name, or NULL if the server gave none */
  json_t *data;          /* ERROR: the data object, or NULL */
  const char *method;    /* NOTIFICATION */
  json_t *params;        /* NOTIFICATION: may be NULL */
};

/* Parse one line received from a server.  Returns 0, or -EBADMSG with a
 * message (cairn_error) saying what is wrong with the line.  Either way,
 * call control_reply_free.
 */
int control_parse_reply (const char *line, size_t len,
                         struct control_reply *rep) CAIRN_WUR;
/* Free what control_parse_reply kept. */
void control_reply_free (struct control_reply *rep);

#endif /* CAIRN_PROTO_RPC_H */
