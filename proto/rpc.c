/* Cairn control protocol codec: error codes, line framing, request and
 * reply parsing, message formatting (see control.h for the wire format).
 *
 * Everything here is a pure function of its arguments: no sockets, no
 * event loop, no global state.  The parsers treat their input as hostile:
 * any byte string gives either a message or a JSON-RPC error, never a
 * crash (tests/unit/test-control-proto.c fuzzes them).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* ------------------------------------------------------------ errors */

/* One error code of the protocol. */
struct control_error_info {
  int code;
  const char *name;     /* symbolic name, sent as data.name */
  int err;              /* the errno it stands for */
  const char *message;  /* generic message, when a handler gave none */
};

/* The error codes.  Append only: codes and names are part of the protocol
 * and scripts test them.
 */
static const struct control_error_info control_errors[] = {
  { CONTROL_E_PARSE, "parse-error", EPROTO,
    "the request is not valid JSON: send one JSON-RPC 2.0 object per line" },
  { CONTROL_E_INVALID_REQUEST, "invalid-request", EPROTO,
    "the request is not a valid JSON-RPC 2.0 request object" },
  { CONTROL_E_METHOD_NOT_FOUND, "method-not-found", ENOSYS,
    "no such method: \"server.methods\" lists the methods of this server" },
  { CONTROL_E_INVALID_PARAMS, "invalid-params", EINVAL,
    "the parameters do not fit the method: see cairn(8)" },
  { CONTROL_E_INTERNAL, "internal", EIO,
    "internal error in the Cairn server: please report it with the server "
    "log" },
  { CAIRN_E_NOT_FOUND, "not-found", ENOENT,
    "no such object: check the name (cairn list shows what exists)" },
  { CAIRN_E_EXISTS, "exists", EEXIST,
    "the name is already in use: choose another name or delete the old "
    "object" },
  { CAIRN_E_BUSY, "busy", EBUSY,
    "the object is in use: wait for the operation using it, or cancel it" },
  { CAIRN_E_NOSPC, "no-space", ENOSPC,
    "the pool is out of space: delete snapshots or volumes, or add a device" },
  { CAIRN_E_IO, "io", EIO,
    "an I/O error or a checksum failure: check the device and run "
    "cairn scrub" },
  { CAIRN_E_READONLY, "read-only", EROFS,
    "the pool or object is read-only" },
  { CAIRN_E_INVALID, "invalid", EINVAL,
    "an argument is not valid for this operation" },
  { CAIRN_E_CANCELLED, "cancelled", ECANCELED,
    "the operation was cancelled" },
  { CAIRN_E_TOO_LARGE, "too-large", E2BIG,
    "the request or an argument is too large" },
  { CAIRN_E_PERMISSION, "permission", EPERM,
    "permission denied" },
  { CAIRN_E_UNSUPPORTED, "unsupported", ENOTSUP,
    "this server or pool does not support the operation" },
  { CAIRN_E_TIMEOUT, "timeout", ETIMEDOUT,
    "the operation timed out: try again later" },
  { CAIRN_E_NOMEM, "no-memory", ENOMEM,
    "the server is out of memory" },
  { CAIRN_E_SHUTDOWN, "shutting-down", ESHUTDOWN,
    "the server is shutting down: retry when it is back" },
};

/* Other errnos that share a code with one above. */
static const struct {
  int err;
  int code;
} control_errno_aliases[] = {
  { EAGAIN, CAIRN_E_BUSY },
  { EDQUOT, CAIRN_E_NOSPC },
  { ENAMETOOLONG, CAIRN_E_INVALID },
  { EFBIG, CAIRN_E_TOO_LARGE },
  { EACCES, CAIRN_E_PERMISSION },
  /* Send streams: a corrupted or refused one, a diverged target. */
  { EBADMSG, CAIRN_E_INVALID },
  { ESTALE, CAIRN_E_INVALID },
  /* A stream cut short, another server out of reach. */
  { EPIPE, CAIRN_E_IO },
  { ECONNRESET, CAIRN_E_IO },
  { ECONNABORTED, CAIRN_E_IO },
  { ECONNREFUSED, CAIRN_E_IO },
  { EHOSTUNREACH, CAIRN_E_IO },
#if EOPNOTSUPP != ENOTSUP
  { EOPNOTSUPP, CAIRN_E_UNSUPPORTED },
#endif
};

/* Find a code in the table, or NULL. */
static const struct control_error_info *
control_error_lookup (int code)
{
  for (size_t i = 0; i < ARRAY_SIZE (control_errors); i++)
    if (control_errors[i].code == code)
      return &control_errors[i];
  return NULL;
}

/* Map an errno (either sign) to its code. */
int
control_error_code (int err)
{
  if (err < 0)
    err = -err;
  /* The protocol errors stand for EPROTO, ENOSYS, EINVAL, EIO too, but an
   * errno from a handler means an application error: start after them.
   */
  for (size_t i = 0; i < ARRAY_SIZE (control_errors); i++)
    if (control_errors[i].code >= CAIRN_E_MIN &&
        control_errors[i].code <= CAIRN_E_MAX && control_errors[i].err == err)
      return control_errors[i].code;
  for (size_t i = 0; i < ARRAY_SIZE (control_errno_aliases); i++)
    if (control_errno_aliases[i].err == err)
      return control_errno_aliases[i].code;
  return CONTROL_E_INTERNAL;
}

/* Map a code back to a negative errno. */
int
control_error_errno (int code)
{
  const struct control_error_info *e = control_error_lookup (code);

  return e ? -e->err : -EIO;
}

/* The symbolic name of a code. */
const char *
control_error_name (int code)
{
  const struct control_error_info *e = control_error_lookup (code);

  return e ? e->name : NULL;
}

/* The generic message of a code. */
const char *
control_error_message (int code)
{
  const struct control_error_info *e = control_error_lookup (code);

  return e ? e->message : "unknown error";
}

/* ------------------------------------------------------------ framing */

/* A splitter keeps at most this much buffer while it holds no bytes. */
#define CONTROL_LINES_KEEP (64 * 1024)

/* Initialise an empty splitter. */
void
control_lines_init (struct control_lines *l, size_t max)
{
  memset (l, 0, sizeof *l);
  l->max = max;
}

/* Free the buffer and forget everything. */
void
control_lines_free (struct control_lines *l)
{
  size_t max = l->max;

  free (l->buf);
  control_lines_init (l, max);
}

/* Move the pending bytes to the front and make room for n more. */
static int
control_lines_reserve (struct control_lines *l, size_t n)
{
  if (l->start > 0) {
    memmove (l->buf, l->buf + l->start, l->len - l->start);
    l->len -= l->start;
    l->scan -= MIN (l->scan, l->start);
    l->start = 0;
  }
  if (l->cap - l->len < n) {
    size_t cap = MAX (MAX (l->cap * 2, l->len + n), (size_t) 4096);
    char *p = realloc (l->buf, cap);

    if (p == NULL)
      return -ENOMEM;
    l->buf = p;
    l->cap = cap;
  }
  return 0;
}

/* Append bytes, refusing to buffer more than max bytes of one line. */
int
control_lines_feed (struct control_lines *l, const void *data, size_t n)
{
  const char *p = data;
  const char *nl;
  size_t keep = n, tail;
  bool overflow = false;
  int r;

  if (l->overflow)
    return -E2BIG;
  if (n == 0)
    return 0;

  nl = memrchr (p, '\n', n);
  tail = nl ? n - (size_t) (nl - p) - 1 : l->tail + n;
  if (tail > l->max) {
    /* Keep the complete lines in front of the long one. */
    keep = nl ? (size_t) (nl - p) + 1 : 0;
    tail = nl ? 0 : l->tail;
    overflow = true;
  }
  if (keep > 0) {
    r = control_lines_reserve (l, keep);
    if (r < 0)
      return r;
    memcpy (l->buf + l->len, p, keep);
    l->len += keep;
  }
  l->tail = tail;
  l->overflow = overflow;
  return overflow ? -E2BIG : 0;
}

/* Terminate a last line that has no '\n'. */
int
control_lines_finish (struct control_lines *l)
{
  if (l->overflow)
    return -E2BIG;
  if (l->tail == 0)
    return 0;
  return control_lines_feed (l, "\n", 1);
}

/* Return the next complete line. */
int
control_lines_next (struct control_lines *l, char **line, size_t *len)
{
  size_t from = MAX (l->scan, l->start);
  char *nl;
  size_t n;

  if (l->start == l->len) {
    l->start = l->len = l->scan = 0;
    if (l->cap > CONTROL_LINES_KEEP) {
      /* Give back the room a big line needed. */
      free (l->buf);
      l->buf = NULL;
      l->cap = 0;
    }
    return l->overflow ? -E2BIG : 0;
  }
  nl = memchr (l->buf + from, '\n', l->len - from);
  if (nl == NULL) {
    l->scan = l->len;
    return l->overflow ? -E2BIG : 0;
  }
  n = (size_t) (nl - (l->buf + l->start));
  if (n > l->max) {
    l->overflow = true;
    return -E2BIG;
  }
  *nl = '\0';
  *line = l->buf + l->start;
  *len = n;
  l->start = l->scan = (size_t) (nl - l->buf) + 1;
  return 1;
}

/* Bytes waiting in the splitter. */
size_t
control_lines_pending (const struct control_lines *l)
{
  return l->len - l->start;
}

/* Take raw bytes after the lines returned. */
size_t
control_lines_take (struct control_lines *l, void *buf, size_t cap)
{
  size_t n = MIN (cap, l->len - l->start);

  memcpy (buf, l->buf + l->start, n);
  l->start += n;
  l->scan = MAX (l->scan, l->start);
  l->tail = MIN (l->tail, l->len - l->start);
  return n;
}

/* ------------------------------------------------------------ stream mode */

/* Encode a frame header (big-endian). */
void
control_frame_header (uint32_t value, uint8_t out[CONTROL_FRAME_HEADER])
{
  out[0] = (uint8_t) (value >> 24);
  out[1] = (uint8_t) (value >> 16);
  out[2] = (uint8_t) (value >> 8);
  out[3] = (uint8_t) value;
}

/* Read the next piece of framed input. */
int
control_frames_next (struct control_frames *f, const void *in, size_t n,
                     size_t *used, const void **data, size_t *dlen, bool *last)
{
  const uint8_t *p = in;
  size_t off = 0;

  *used = 0;
  *last = false;
  if (f->ended)
    return CONTROL_FRAME_END;
  while (f->left == 0) {
    uint32_t v;

    while (f->got < CONTROL_FRAME_HEADER && off < n)
      f->hdr[f->got++] = p[off++];
    *used = off;
    if (f->got < CONTROL_FRAME_HEADER)
      return CONTROL_FRAME_NONE;
    f->got = 0;
    v = (uint32_t) f->hdr[0] << 24 | (uint32_t) f->hdr[1] << 16 |
        (uint32_t) f->hdr[2] << 8 | f->hdr[3];
    if (v == 0) {
      f->ended = true;
      return CONTROL_FRAME_END;
    }
    f->message = (v & CONTROL_FRAME_MESSAGE) != 0;
    f->left = v & ~CONTROL_FRAME_MESSAGE;
    if (f->left == 0 || f->left > CONTROL_FRAME_MAX)
      return cairn_fail (-EPROTO, "stream mode: a frame of %" PRIu32 " bytes "
                         "(the limit is %d, and only the end frame is "
                         "empty): the peer does not speak this protocol",
                         f->left, CONTROL_FRAME_MAX);
  }
  *data = p + off;
  *dlen = MIN (n - off, (size_t) f->left);
  f->left -= (uint32_t) *dlen;
  *used = off + *dlen;
  if (*dlen == 0)
    return CONTROL_FRAME_NONE;
  *last = f->left == 0;
  return f->message ? CONTROL_FRAME_MSG : CONTROL_FRAME_DATA;
}

/* ------------------------------------------------------------ requests */

/* Record why a request is not valid and return -EBADMSG. */
static int CAIRN_PRINTF (3, 4)
request_fault (struct control_request *req, int code, const char *fmt, ...)
{
  va_list ap;

  req->code = code;
  req->method = NULL;
  req->params = NULL;
  va_start (ap, fmt);
  vsnprintf (req->message, sizeof req->message, fmt, ap);
  va_end (ap);
  return -EBADMSG;
}

/* True if v is a JSON value that can be a request id. */
static bool
valid_id (const json_t *v)
{
  return json_is_string (v) || json_is_number (v);
}

/* Parse and validate a request line. */
int
control_parse_request (const char *line, size_t len,
                       struct control_request *req)
{
  json_error_t jerr;
  json_t *v;
  const char *key;

  memset (req, 0, sizeof *req);
  req->root = json_loadb (line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                          &jerr);
  if (req->root == NULL) {
    if (json_error_code (&jerr) == json_error_duplicate_key)
      return request_fault (req, CONTROL_E_INVALID_REQUEST,
                            "a key appears twice in the request (%s)",
                            jerr.text);
    return request_fault (req, CONTROL_E_PARSE,
                          "the request is not valid JSON (%s, at byte %d): "
                          "send one JSON-RPC 2.0 object per line",
                          jerr.text, jerr.position);
  }
  if (json_is_array (req->root))
    return request_fault (req, CONTROL_E_INVALID_REQUEST,
                          "batches (JSON arrays) are not supported: "
                          "send one request object per line");
  if (!json_is_object (req->root))
    return request_fault (req, CONTROL_E_INVALID_REQUEST,
                          "a request must be a JSON object");

  /* Read the id first, so that the error reply can carry it. */
  v = json_object_get (req->root, "id");
  if (v != NULL) {
    if (!valid_id (v))
      return request_fault (req, CONTROL_E_INVALID_REQUEST,
                            "\"id\" must be a string or a number");
    req->id = v;
  }

  v = json_object_get (req->root, "jsonrpc");
  if (!json_is_string (v) || strcmp (json_string_value (v), "2.0") != 0)
    return request_fault (req, CONTROL_E_INVALID_REQUEST,
                          "the request needs \"jsonrpc\": \"2.0\"");

  v = json_object_get (req->root, "method");
  if (!json_is_string (v))
    return request_fault (req, CONTROL_E_INVALID_REQUEST,
                          "the request needs a \"method\" string");
  req->method = json_string_value (v);

  v = json_object_get (req->root, "params");
  if (v != NULL) {
    if (!json_is_object (v) && !json_is_array (v))
      return request_fault (req, CONTROL_E_INVALID_REQUEST,
                            "\"params\" must be an object or an array");
    req->params = v;
  }

  json_object_foreach (req->root, key, v) {
    if (strcmp (key, "jsonrpc") != 0 && strcmp (key, "id") != 0 &&
        strcmp (key, "method") != 0 && strcmp (key, "params") != 0)
      return request_fault (req, CONTROL_E_INVALID_REQUEST,
                            "unknown member \"%.64s\" in the request "
                            "(a request has jsonrpc, id, method and params)",
                            key);
  }
  return 0;
}

/* Release the parsed message. */
void
control_request_free (struct control_request *req)
{
  json_decref (req->root);
  req->root = req->id = req->params = NULL;
  req->method = NULL;
}

/* ------------------------------------------------------------ messages */

/* Encode msg compactly as one line ending in '\n'; consumes msg. */
static char *
dump_line (json_t *msg, size_t *len)
{
  const size_t flags = JSON_COMPACT;
  size_t n;
  char *s = NULL;

  if (msg == NULL)
    return NULL;
  n = json_dumpb (msg, NULL, 0, flags);
  if (n == 0)
    goto out;
  s = malloc (n + 2);
  if (s == NULL)
    goto out;
  if (json_dumpb (msg, s, n, flags) != n) {
    free (s);
    s = NULL;
    goto out;
  }
  s[n] = '\n';
  s[n + 1] = '\0';
  *len = n + 1;
 out:
  json_decref (msg);
  return s;
}

/* Format a request. */
char *
control_format_request (json_t *id, const char *method, json_t *params,
                        size_t *len)
{
  json_t *msg = json_pack ("{s:s, s:O?, s:s}", "jsonrpc", "2.0",
                           "id", id, "method", method);

  if (msg && params && json_object_set (msg, "params", params) == -1) {
    json_decref (msg);
    return NULL;
  }
  return dump_line (msg, len);
}

/* Format a notification. */
char *
control_format_notification (const char *method, json_t *params, size_t *len)
{
  json_t *msg = json_pack ("{s:s, s:s}", "jsonrpc", "2.0", "method", method);

  if (msg && params && json_object_set (msg, "params", params) == -1) {
    json_decref (msg);
    return NULL;
  }
  return dump_line (msg, len);
}

/* Format a success reply. */
char *
control_format_result (json_t *id, json_t *result, size_t *len)
{
  return dump_line (json_pack ("{s:s, s:O?, s:O?}", "jsonrpc", "2.0",
                               "id", id, "result", result), len);
}

/* Format an error reply. */
char *
control_format_error (json_t *id, int code, const char *message, size_t *len)
{
  return control_format_error_data (id, code, message, NULL, len);
}

/* Format an error reply with more data. */
char *
control_format_error_data (json_t *id, int code, const char *message,
                           json_t *data, size_t *len)
{
  const char *name = control_error_name (code);
  json_t *err, *d = NULL, *probe;
  char safe[1024];

  if (message == NULL || message[0] == '\0')
    message = control_error_message (code);
  /* A message quoting the request may hold invalid UTF-8 (a name cut in
   * the middle of a character), which JSON cannot carry: mask the bytes
   * that are not ASCII.
   */
  probe = json_string (message);
  if (probe == NULL) {
    size_t i;

    for (i = 0; message[i] && i < sizeof safe - 1; i++)
      safe[i] = (unsigned char) message[i] < 0x80 ? message[i] : '?';
    safe[i] = '\0';
    message = safe;
  }
  json_decref (probe);
  if (name || data) {
    d = data ? json_deep_copy (data) : json_object ();
    if (d == NULL || (name && json_object_set_new (d, "name",
                                                   json_string (name)) == -1)) {
      json_decref (d);
      return NULL;
    }
    err = json_pack ("{s:i, s:s, s:o}", "code", code, "message", message,
                     "data", d);
  }
  else
    err = json_pack ("{s:i, s:s}", "code", code, "message", message);
  if (err == NULL)
    return NULL;
  return dump_line (json_pack ("{s:s, s:O?, s:o}", "jsonrpc", "2.0",
                               "id", id, "error", err), len);
}

/* ------------------------------------------------------------ replies */

/* Record why a reply line is bad and return -EBADMSG. */
static int CAIRN_PRINTF (1, 2)
reply_fault (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  cairn_verror (fmt, ap);
  va_end (ap);
  return -EBADMSG;
}

/* Parse the error member of a reply. */
static int
parse_reply_error (json_t *err, struct control_reply *rep)
{
  json_t *code = json_object_get (err, "code");
  json_t *message = json_object_get (err, "message");
  json_t *data = json_object_get (err, "data");
  json_t *name;

  if (!json_is_object (err))
    return reply_fault ("the server's \"error\" is not an object");
  if (!json_is_integer (code) || json_integer_value (code) < INT_MIN ||
      json_integer_value (code) > INT_MAX)
    return reply_fault ("the server's error has no integer \"code\"");
  if (!json_is_string (message))
    return reply_fault ("the server's error has no \"message\" string");
  rep->kind = CONTROL_REPLY_ERROR;
  rep->code = (int) json_integer_value (code);
  rep->message = json_string_value (message);
  name = json_is_object (data) ? json_object_get (data, "name") : NULL;
  rep->name = json_is_string (name) ? json_string_value (name) : NULL;
  rep->data = json_is_object (data) ? data : NULL;
  return 0;
}

/* Parse a line received from a server. */
int
control_parse_reply (const char *line, size_t len, struct control_reply *rep)
{
  json_error_t jerr;
  json_t *method, *params, *result, *err;

  memset (rep, 0, sizeof *rep);
  rep->root = json_loadb (line, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                          &jerr);
  if (rep->root == NULL)
    return reply_fault ("the server sent a line that is not valid JSON (%s)",
                        jerr.text);
  if (!json_is_object (rep->root))
    return reply_fault ("the server sent a message that is not an object");
  if (!json_is_string (json_object_get (rep->root, "jsonrpc")) ||
      strcmp (json_string_value (json_object_get (rep->root, "jsonrpc")),
              "2.0") != 0)
    return reply_fault ("the server's message lacks \"jsonrpc\": \"2.0\"");

  method = json_object_get (rep->root, "method");
  if (method != NULL) {
    params = json_object_get (rep->root, "params");
    if (!json_is_string (method))
      return reply_fault ("the server sent a \"method\" that is not a string");
    if (json_object_get (rep->root, "id") != NULL)
      return reply_fault ("the server sent a request, not a notification");
    if (params && !json_is_object (params) && !json_is_array (params))
      return reply_fault ("the server's notification has bad \"params\"");
    rep->kind = CONTROL_REPLY_NOTIFICATION;
    rep->method = json_string_value (method);
    rep->params = params;
    return 0;
  }

  rep->id = json_object_get (rep->root, "id");
  if (rep->id == NULL || !(valid_id (rep->id) || json_is_null (rep->id)))
    return reply_fault ("the server's reply has no valid \"id\"");
  result = json_object_get (rep->root, "result");
  err = json_object_get (rep->root, "error");
  if ((result == NULL) == (err == NULL))
    return reply_fault ("the server's reply must have exactly one of "
                        "\"result\" and \"error\"");
  if (err)
    return parse_reply_error (err, rep);
  rep->kind = CONTROL_REPLY_RESULT;
  rep->result = result;
  return 0;
}

/* Release the parsed message. */
void
control_reply_free (struct control_reply *rep)
{
  json_decref (rep->root);
  memset (rep, 0, sizeof *rep);
}
