/* Unit tests for the control protocol codec (proto/control.c): line
 * framing, request parsing and every error class, the error code table,
 * message formatting and reply parsing round trips, and a randomised fuzz
 * test of the parsers and the splitter.
 *
 * The fuzz test prints its seed; set CAIRN_TEST_SEED to replay one.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "rpc.h"

/* ------------------------------------------------------------ helpers */

/* A splitmix64 generator: small, fast and seedable. */
struct rng {
  uint64_t s;
};

/* Next 64 random bits. */
static uint64_t
rng_next (struct rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* A random number below n. */
static size_t
rng_below (struct rng *r, size_t n)
{
  return n ? (size_t) (rng_next (r) % n) : 0;
}

/* The seed from CAIRN_TEST_SEED, or a fresh one; printed either way. */
static uint64_t
test_seed (const char *name)
{
  const char *env = getenv ("CAIRN_TEST_SEED");
  uint64_t seed;

  if (env && *env)
    seed = strtoull (env, NULL, 0);
  else
    seed = (uint64_t) time (NULL) ^ ((uint64_t) clock () << 32);
  fprintf (stderr, "%s: CAIRN_TEST_SEED=%" PRIu64 "\n", name, seed);
  return seed;
}

/* Feed a string, which must be accepted. */
static void
feed (struct control_lines *l, const char *s)
{
  cr_assert_eq (control_lines_feed (l, s, strlen (s)), 0, "feed \"%s\"", s);
}

/* The next line must be expect. */
static void
expect_line (struct control_lines *l, const char *expect)
{
  char *line;
  size_t len;

  cr_assert_eq (control_lines_next (l, &line, &len), 1,
                "expected the line \"%s\"", expect);
  cr_assert_eq (len, strlen (expect));
  cr_assert_str_eq (line, expect);
}

/* No complete line must be buffered. */
static void
expect_none (struct control_lines *l)
{
  char *line;
  size_t len;

  cr_assert_eq (control_lines_next (l, &line, &len), 0);
}

/* Parsing s must fail with code; returns the (borrowed) id it recovered. */
static void
expect_bad_request (const char *s, int code, const char *why)
{
  struct control_request req;

  cr_assert_eq (control_parse_request (s, strlen (s), &req), -EBADMSG,
                "%s: parsing %s should fail", why, s);
  cr_assert_eq (req.code, code, "%s: %s gave %d, expected %d (%s)", why, s,
                req.code, code, req.message);
  cr_assert (req.message[0] != '\0', "%s: no message", why);
  control_request_free (&req);
}

/* ------------------------------------------------------------ framing */

Test (lines, split_across_feeds)
{
  struct control_lines l;

  control_lines_init (&l, 100);
  feed (&l, "{\"a\"");
  expect_none (&l);
  feed (&l, ":1");
  expect_none (&l);
  feed (&l, "}\n{\"b\":");
  expect_line (&l, "{\"a\":1}");
  expect_none (&l);
  feed (&l, "2}\n");
  expect_line (&l, "{\"b\":2}");
  expect_none (&l);
  cr_assert_eq (control_lines_pending (&l), 0);
  control_lines_free (&l);
}

Test (lines, many_in_one_feed)
{
  struct control_lines l;

  control_lines_init (&l, 100);
  feed (&l, "one\ntwo\n\nthree\nfour");
  expect_line (&l, "one");
  expect_line (&l, "two");
  expect_line (&l, "");
  expect_line (&l, "three");
  expect_none (&l);
  cr_assert_eq (control_lines_pending (&l), 4);
  feed (&l, "\n");
  expect_line (&l, "four");
  expect_none (&l);
  control_lines_free (&l);
}

Test (lines, byte_at_a_time)
{
  const char *text = "{\"jsonrpc\":\"2.0\"}\nx\n\nyz\n";
  struct control_lines l;
  char *line;
  size_t len;
  int n = 0;

  control_lines_init (&l, 100);
  for (const char *p = text; *p; p++) {
    cr_assert_eq (control_lines_feed (&l, p, 1), 0);
    while (control_lines_next (&l, &line, &len) == 1)
      n++;
  }
  cr_assert_eq (n, 4);
  control_lines_free (&l);
}

Test (lines, exactly_max_is_accepted)
{
  struct control_lines l;

  control_lines_init (&l, 8);
  feed (&l, "12345678\n");
  expect_line (&l, "12345678");
  feed (&l, "1234");
  feed (&l, "5678");
  feed (&l, "\n");
  expect_line (&l, "12345678");
  control_lines_free (&l);
}

Test (lines, oversized_complete_line)
{
  struct control_lines l;
  char *line;
  size_t len;

  control_lines_init (&l, 8);
  /* The long line is complete within the feed: found by next(). */
  feed (&l, "ok\n123456789\nlater\n");
  expect_line (&l, "ok");
  cr_assert_eq (control_lines_next (&l, &line, &len), -E2BIG);
  /* Dead for ever after. */
  cr_assert_eq (control_lines_next (&l, &line, &len), -E2BIG);
  cr_assert_eq (control_lines_feed (&l, "x\n", 2), -E2BIG);
  control_lines_free (&l);
}

Test (lines, oversized_unterminated_tail)
{
  struct control_lines l;
  char *line;
  size_t len;

  control_lines_init (&l, 8);
  feed (&l, "a\nb\n12345");
  /* The tail grows past max: the complete lines still come out first. */
  cr_assert_eq (control_lines_feed (&l, "6789", 4), -E2BIG);
  expect_line (&l, "a");
  expect_line (&l, "b");
  cr_assert_eq (control_lines_next (&l, &line, &len), -E2BIG);
  control_lines_free (&l);

  control_lines_init (&l, 8);
  cr_assert_eq (control_lines_feed (&l, "c\n0123456789abc", 15), -E2BIG);
  expect_line (&l, "c");
  cr_assert_eq (control_lines_next (&l, &line, &len), -E2BIG);
  control_lines_free (&l);
}

Test (lines, real_limit)
{
  struct control_lines l;
  char *big = malloc (CONTROL_MAX_LINE + 2);
  char *line;
  size_t len;

  cr_assert_not_null (big);
  memset (big, ' ', CONTROL_MAX_LINE + 1);
  big[CONTROL_MAX_LINE] = '\n';
  control_lines_init (&l, CONTROL_MAX_LINE);
  cr_assert_eq (control_lines_feed (&l, big, CONTROL_MAX_LINE + 1), 0);
  cr_assert_eq (control_lines_next (&l, &line, &len), 1);
  cr_assert_eq (len, CONTROL_MAX_LINE);
  big[CONTROL_MAX_LINE] = ' ';
  cr_assert_eq (control_lines_feed (&l, big, CONTROL_MAX_LINE + 1), -E2BIG);
  control_lines_free (&l);
  free (big);
}

Test (lines, finish_terminates_last_line)
{
  struct control_lines l;

  control_lines_init (&l, 100);
  feed (&l, "a\npartial");
  cr_assert_eq (control_lines_finish (&l), 0);
  expect_line (&l, "a");
  expect_line (&l, "partial");
  expect_none (&l);
  /* Nothing to finish: no empty line appears. */
  cr_assert_eq (control_lines_finish (&l), 0);
  expect_none (&l);
  control_lines_free (&l);
}

/* ------------------------------------------------------------ requests */

Test (request, valid_with_number_id)
{
  const char *s = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"server.ping\","
                  "\"params\":{\"x\":[1,2]}}";
  struct control_request req;

  cr_assert_eq (control_parse_request (s, strlen (s), &req), 0);
  cr_assert (json_is_integer (req.id));
  cr_assert_eq (json_integer_value (req.id), 7);
  cr_assert_str_eq (req.method, "server.ping");
  cr_assert (json_is_object (req.params));
  cr_assert_eq (json_integer_value (json_array_get (
                  json_object_get (req.params, "x"), 1)), 2);
  control_request_free (&req);
}

Test (request, valid_with_string_id_and_array_params)
{
  const char *s = " { \"method\" : \"a.b\", \"params\": [true], "
                  "\"id\": \"abc\", \"jsonrpc\": \"2.0\" }\r";
  struct control_request req;

  cr_assert_eq (control_parse_request (s, strlen (s), &req), 0);
  cr_assert_str_eq (json_string_value (req.id), "abc");
  cr_assert (json_is_array (req.params));
  control_request_free (&req);
}

Test (request, notification_has_no_id)
{
  const char *s = "{\"jsonrpc\":\"2.0\",\"method\":\"job.cancel\"}";
  struct control_request req;

  cr_assert_eq (control_parse_request (s, strlen (s), &req), 0);
  cr_assert_null (req.id);
  cr_assert_null (req.params);
  cr_assert_str_eq (req.method, "job.cancel");
  control_request_free (&req);
}

Test (request, not_json_is_parse_error)
{
  expect_bad_request ("hello", CONTROL_E_PARSE, "not JSON");
  expect_bad_request ("", CONTROL_E_PARSE, "empty");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"",
                      CONTROL_E_PARSE, "truncated");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}}",
                      CONTROL_E_PARSE, "trailing garbage");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
                      CONTROL_E_PARSE, "invalid UTF-8");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"a\\u0000b\"}",
                      CONTROL_E_PARSE, "NUL inside a string");
  expect_bad_request ("{\"id\":99999999999999999999999}", CONTROL_E_PARSE,
                      "integer overflow");
}

Test (request, deep_nesting_is_refused)
{
  size_t depth = 100000;
  char *s = malloc (2 * depth + 1);

  cr_assert_not_null (s);
  memset (s, '[', depth);
  memset (s + depth, ']', depth);
  s[2 * depth] = '\0';
  expect_bad_request (s, CONTROL_E_PARSE, "deep nesting");
  free (s);
}

Test (request, wrong_shapes_are_invalid_requests)
{
  const int E = CONTROL_E_INVALID_REQUEST;

  expect_bad_request ("[]", E, "empty batch");
  expect_bad_request ("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}]", E,
                      "batch");
  expect_bad_request ("42", E, "number");
  expect_bad_request ("\"x\"", E, "string");
  expect_bad_request ("null", E, "null");
  expect_bad_request ("{\"id\":1,\"method\":\"x\"}", E, "no jsonrpc");
  expect_bad_request ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"x\"}", E,
                      "jsonrpc 1.0");
  expect_bad_request ("{\"jsonrpc\":2.0,\"id\":1,\"method\":\"x\"}", E,
                      "jsonrpc as a number");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1}", E, "no method");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", E,
                      "method number");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":null}", E,
                      "method null");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\","
                      "\"params\":\"s\"}", E, "params string");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\","
                      "\"params\":3}", E, "params number");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\","
                      "\"params\":null}", E, "params null");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"x\"}", E,
                      "id bool");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"x\"}", E,
                      "id null");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}", E,
                      "id object");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"x\"}", E,
                      "id array");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\","
                      "\"method\":\"y\"}", E, "duplicate key");
  expect_bad_request ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\","
                      "\"param\":{}}", E, "unknown member");
}

Test (request, invalid_request_keeps_a_valid_id)
{
  const char *s = "{\"jsonrpc\":\"2.0\",\"id\":\"q1\",\"method\":17}";
  struct control_request req;

  cr_assert_eq (control_parse_request (s, strlen (s), &req), -EBADMSG);
  cr_assert_eq (req.code, CONTROL_E_INVALID_REQUEST);
  cr_assert_str_eq (json_string_value (req.id), "q1");
  cr_assert_null (req.method);
  control_request_free (&req);

  s = "{\"jsonrpc\":\"2.0\",\"id\":false,\"method\":\"x\"}";
  cr_assert_eq (control_parse_request (s, strlen (s), &req), -EBADMSG);
  cr_assert_null (req.id);
  control_request_free (&req);
}

/* ------------------------------------------------------------ error codes */

Test (errors, errno_to_code)
{
  static const struct {
    int err;
    int code;
    const char *name;
  } cases[] = {
    { ENOENT, CAIRN_E_NOT_FOUND, "not-found" },
    { EEXIST, CAIRN_E_EXISTS, "exists" },
    { EBUSY, CAIRN_E_BUSY, "busy" },
    { EAGAIN, CAIRN_E_BUSY, "busy" },
    { ENOSPC, CAIRN_E_NOSPC, "no-space" },
    { EDQUOT, CAIRN_E_NOSPC, "no-space" },
    { EIO, CAIRN_E_IO, "io" },
    { EROFS, CAIRN_E_READONLY, "read-only" },
    { EINVAL, CAIRN_E_INVALID, "invalid" },
    { ENAMETOOLONG, CAIRN_E_INVALID, "invalid" },
    { ECANCELED, CAIRN_E_CANCELLED, "cancelled" },
    { E2BIG, CAIRN_E_TOO_LARGE, "too-large" },
    { EFBIG, CAIRN_E_TOO_LARGE, "too-large" },
    { EPERM, CAIRN_E_PERMISSION, "permission" },
    { EACCES, CAIRN_E_PERMISSION, "permission" },
    { ENOTSUP, CAIRN_E_UNSUPPORTED, "unsupported" },
    { EOPNOTSUPP, CAIRN_E_UNSUPPORTED, "unsupported" },
    { ETIMEDOUT, CAIRN_E_TIMEOUT, "timeout" },
    { ENOMEM, CAIRN_E_NOMEM, "no-memory" },
    { ESHUTDOWN, CAIRN_E_SHUTDOWN, "shutting-down" },
    /* No code of its own: internal. */
    { EXDEV, CONTROL_E_INTERNAL, "internal" },
    { EPROTO, CONTROL_E_INTERNAL, "internal" },
    { 0, CONTROL_E_INTERNAL, "internal" },
  };

  for (size_t i = 0; i < ARRAY_SIZE (cases); i++) {
    int code = control_error_code (-cases[i].err);

    cr_assert_eq (code, cases[i].code, "errno %d gave %d, expected %d",
                  cases[i].err, code, cases[i].code);
    cr_assert_eq (control_error_code (cases[i].err), code,
                  "either sign of errno %d", cases[i].err);
    cr_assert_str_eq (control_error_name (code), cases[i].name);
    cr_assert (strlen (control_error_message (code)) > 5);
  }
}

Test (errors, code_to_errno_round_trips)
{
  static const int errs[] = {
    ENOENT, EEXIST, EBUSY, ENOSPC, EIO, EROFS, EINVAL, ECANCELED, E2BIG,
    EPERM, ENOTSUP, ETIMEDOUT, ENOMEM, ESHUTDOWN,
  };

  for (size_t i = 0; i < ARRAY_SIZE (errs); i++) {
    int code = control_error_code (-errs[i]);

    cr_assert (code >= CAIRN_E_MIN && code <= CAIRN_E_MAX);
    cr_assert_eq (control_error_errno (code), -errs[i], "errno %d", errs[i]);
  }
  cr_assert_eq (control_error_errno (CONTROL_E_PARSE), -EPROTO);
  cr_assert_eq (control_error_errno (CONTROL_E_INVALID_REQUEST), -EPROTO);
  cr_assert_eq (control_error_errno (CONTROL_E_METHOD_NOT_FOUND), -ENOSYS);
  cr_assert_eq (control_error_errno (CONTROL_E_INVALID_PARAMS), -EINVAL);
  cr_assert_eq (control_error_errno (-1), -EIO);
  cr_assert_null (control_error_name (-1));
  cr_assert_str_eq (control_error_name (CONTROL_E_METHOD_NOT_FOUND),
                    "method-not-found");
  cr_assert_str_eq (control_error_name (CONTROL_E_PARSE), "parse-error");
}

/* The codes are protocol: pin their numbers. */
Test (errors, codes_are_stable)
{
  cr_assert_eq (CAIRN_E_NOT_FOUND, -32001);
  cr_assert_eq (CAIRN_E_EXISTS, -32002);
  cr_assert_eq (CAIRN_E_BUSY, -32003);
  cr_assert_eq (CAIRN_E_NOSPC, -32004);
  cr_assert_eq (CAIRN_E_IO, -32005);
  cr_assert_eq (CAIRN_E_READONLY, -32006);
  cr_assert_eq (CAIRN_E_INVALID, -32007);
  cr_assert_eq (CAIRN_E_CANCELLED, -32008);
  cr_assert_eq (CAIRN_E_TOO_LARGE, -32009);
  cr_assert_eq (CAIRN_E_PERMISSION, -32010);
  cr_assert_eq (CAIRN_E_UNSUPPORTED, -32011);
  cr_assert_eq (CAIRN_E_TIMEOUT, -32012);
  cr_assert_eq (CAIRN_E_NOMEM, -32013);
  cr_assert_eq (CAIRN_E_SHUTDOWN, -32014);
}

/* ------------------------------------------------------------ messages */

/* The formatted line must be one line ending in '\n'. */
static void
check_line (const char *s, size_t len)
{
  cr_assert_not_null (s);
  cr_assert_eq (strlen (s), len);
  cr_assert (len >= 2 && s[len - 1] == '\n');
  cr_assert_null (memchr (s, '\n', len - 1), "a newline inside: %s", s);
}

Test (messages, request_round_trip)
{
  json_t *id = json_integer (41);
  json_t *params = json_pack ("{s:s, s:[i,i]}", "name", "tank/a\nb", "v", 1, 2);
  struct control_request req;
  size_t len;
  char *s = control_format_request (id, "volume.create", params, &len);

  check_line (s, len);
  cr_assert_eq (control_parse_request (s, len - 1, &req), 0, "%s", s);
  cr_assert (json_equal (req.id, id));
  cr_assert_str_eq (req.method, "volume.create");
  cr_assert (json_equal (req.params, params));
  control_request_free (&req);
  free (s);

  /* Without params. */
  s = control_format_request (id, "server.version", NULL, &len);
  check_line (s, len);
  cr_assert_eq (control_parse_request (s, len, &req), 0, "%s", s);
  cr_assert_null (req.params);
  control_request_free (&req);
  free (s);
  json_decref (id);
  json_decref (params);
}

Test (messages, result_round_trip)
{
  json_t *ids[] = { json_integer (3), json_string ("x-9"), json_real (1.5),
                    NULL };
  json_t *result = json_pack ("{s:s, s:i}", "version", "0.1.0",
                              "protocol", 1);

  for (size_t i = 0; i < ARRAY_SIZE (ids); i++) {
    struct control_reply rep;
    size_t len;
    char *s = control_format_result (ids[i], result, &len);

    check_line (s, len);
    cr_assert_eq (control_parse_reply (s, len, &rep), 0, "%s: %s", s,
                  cairn_errmsg ());
    cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT);
    if (ids[i])
      cr_assert (json_equal (rep.id, ids[i]), "%s", s);
    else
      cr_assert (json_is_null (rep.id));
    cr_assert (json_equal (rep.result, result));
    control_reply_free (&rep);
    free (s);
    json_decref (ids[i]);
  }
  json_decref (result);

  /* A null result is a result. */
  {
    struct control_reply rep;
    size_t len;
    json_t *id = json_integer (1);
    char *s = control_format_result (id, NULL, &len);

    cr_assert_eq (control_parse_reply (s, len, &rep), 0);
    cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT);
    cr_assert (json_is_null (rep.result));
    control_reply_free (&rep);
    free (s);
    json_decref (id);
  }
}

Test (messages, error_round_trip)
{
  json_t *id = json_string ("req-1");
  struct control_reply rep;
  size_t len;
  char *s = control_format_error (id, CAIRN_E_NOT_FOUND,
                                  "no volume \"tank\": cairn list shows them",
                                  &len);

  check_line (s, len);
  cr_assert_eq (control_parse_reply (s, len, &rep), 0, "%s", s);
  cr_assert_eq (rep.kind, CONTROL_REPLY_ERROR);
  cr_assert_eq (rep.code, -32001);
  cr_assert_str_eq (rep.name, "not-found");
  cr_assert_str_eq (rep.message, "no volume \"tank\": cairn list shows them");
  cr_assert (json_equal (rep.id, id));
  control_reply_free (&rep);
  free (s);

  /* No message: the generic one. */
  s = control_format_error (NULL, CONTROL_E_PARSE, NULL, &len);
  cr_assert_eq (control_parse_reply (s, len, &rep), 0, "%s", s);
  cr_assert (json_is_null (rep.id));
  cr_assert_str_eq (rep.message, control_error_message (CONTROL_E_PARSE));
  cr_assert_str_eq (rep.name, "parse-error");
  control_reply_free (&rep);
  free (s);

  /* A code of nobody's: no name. */
  s = control_format_error (id, -1, "odd", &len);
  cr_assert_eq (control_parse_reply (s, len, &rep), 0, "%s", s);
  cr_assert_null (rep.name);
  cr_assert_eq (rep.code, -1);
  control_reply_free (&rep);
  free (s);
  json_decref (id);
}

Test (messages, notification_round_trip)
{
  json_t *params = json_pack ("{s:i, s:I, s:I}", "job", 4,
                              "done", (json_int_t) 1 << 40,
                              "total", (json_int_t) 1 << 41);
  struct control_reply rep;
  struct control_request req;
  size_t len;
  char *s = control_format_notification ("job.progress", params, &len);

  check_line (s, len);
  cr_assert_eq (control_parse_reply (s, len, &rep), 0, "%s", s);
  cr_assert_eq (rep.kind, CONTROL_REPLY_NOTIFICATION);
  cr_assert_str_eq (rep.method, "job.progress");
  cr_assert (json_equal (rep.params, params));
  cr_assert_null (rep.id);
  control_reply_free (&rep);
  /* It is also a valid request without id. */
  cr_assert_eq (control_parse_request (s, len, &req), 0);
  cr_assert_null (req.id);
  control_request_free (&req);
  free (s);
  json_decref (params);
}

Test (messages, bad_replies)
{
  static const char *bad[] = {
    "", "nope", "[1]", "{}",
    "{\"jsonrpc\":\"2.0\",\"id\":1}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{}}",
    "{\"jsonrpc\":\"2.0\",\"result\":1}",
    "{\"jsonrpc\":\"2.0\",\"id\":true,\"result\":1}",
    "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":1}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":5}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":"
    "{\"code\":\"x\",\"message\":\"m\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":"
    "{\"code\":1.5,\"message\":\"m\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":"
    "{\"code\":9999999999,\"message\":\"m\"}}",
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}",
    "{\"jsonrpc\":\"2.0\",\"method\":1}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"id\":1}",
    "{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":1}",
  };

  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    struct control_reply rep;

    cairn_error_clear ();
    cr_assert_eq (control_parse_reply (bad[i], strlen (bad[i]), &rep),
                  -EBADMSG, "accepted %s", bad[i]);
    cr_assert (cairn_errmsg ()[0] != '\0', "no message for %s", bad[i]);
    control_reply_free (&rep);
  }
}

/* ------------------------------------------------------------ fuzzing */

/* Valid messages for the mutator to start from. */
static const char *fuzz_seeds[] = {
  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server.version\"}",
  "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"method\":\"server.ping\",\"params\":"
  "{\"delay_ms\":5,\"x\":[1,2.5,null,true,{\"y\":\"\\u00e9\"}]}}",
  "{\"jsonrpc\":\"2.0\",\"method\":\"job.progress\",\"params\":[1,2]}",
  "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"methods\":[\"a\",\"b\"]}}",
  "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":"
  "\"m\",\"data\":{\"name\":\"parse-error\"}}}",
};

/* Tokens the mutator splices in. */
static const char *fuzz_tokens[] = {
  "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u", "null", "true", "-",
  "1e999", "\"jsonrpc\"", "\"2.0\"", "\"id\"", "\"method\"", "\"params\"",
  "\"result\"", "\"error\"", "\"code\"", "\xc3", "\xff", "\n", "\0",
  "99999999999999999999", "-32700",
};

/* Make a random message: random bytes, or a mutated valid one. */
static size_t
fuzz_message (struct rng *r, char *buf, size_t cap)
{
  size_t len, n;

  if (rng_below (r, 4) == 0) {
    len = rng_below (r, 64);
    for (size_t i = 0; i < len; i++)
      buf[i] = (char) rng_next (r);
    return len;
  }
  n = rng_below (r, ARRAY_SIZE (fuzz_seeds));
  len = strlen (fuzz_seeds[n]);
  memcpy (buf, fuzz_seeds[n], len);
  for (size_t m = rng_below (r, 4) + 1; m > 0; m--) {
    size_t pos = rng_below (r, len + 1);

    switch (rng_below (r, 5)) {
    case 0:                             /* flip a byte */
      if (len)
        buf[rng_below (r, len)] ^= (char) (1u << rng_below (r, 8));
      break;
    case 1:                             /* truncate */
      len = pos;
      break;
    case 2:                             /* delete a span */
      n = rng_below (r, 8) + 1;         /* not inside MIN: evaluated twice */
      n = MIN (n, len - pos);
      memmove (buf + pos, buf + pos + n, len - pos - n);
      len -= n;
      break;
    case 3: {                           /* splice a token */
      const char *t = fuzz_tokens[rng_below (r, ARRAY_SIZE (fuzz_tokens))];
      size_t tl = t[0] ? strlen (t) : 1;

      if (len + tl <= cap) {
        memmove (buf + pos + tl, buf + pos, len - pos);
        memcpy (buf + pos, t, tl);
        len += tl;
      }
      break;
    }
    default:                            /* duplicate the head */
      if (len + pos <= cap) {
        memmove (buf + pos + pos, buf + pos, len - pos);
        memcpy (buf + pos, buf, pos);
        len += pos;
      }
    }
  }
  return len;
}

/* Check one fuzz message against both parsers. */
static void
fuzz_parse (const char *buf, size_t len, size_t iter)
{
  struct control_request req;
  struct control_reply rep;
  int r;

  r = control_parse_request (buf, len, &req);
  if (r == 0) {
    cr_assert_not_null (req.method, "iteration %zu", iter);
    cr_assert (req.id == NULL || json_is_string (req.id) ||
               json_is_number (req.id), "iteration %zu", iter);
    cr_assert (req.params == NULL || json_is_object (req.params) ||
               json_is_array (req.params), "iteration %zu", iter);
  }
  else {
    cr_assert_eq (r, -EBADMSG, "iteration %zu", iter);
    cr_assert (req.code == CONTROL_E_PARSE ||
               req.code == CONTROL_E_INVALID_REQUEST,
               "iteration %zu: code %d", iter, req.code);
    cr_assert (req.message[0] != '\0', "iteration %zu", iter);
    /* The error reply can always be built. */
    {
      size_t rl;
      char *s = control_format_error (req.id, req.code, req.message, &rl);

      cr_assert_not_null (s, "iteration %zu", iter);
      free (s);
    }
  }
  control_request_free (&req);

  r = control_parse_reply (buf, len, &rep);
  cr_assert (r == 0 || r == -EBADMSG, "iteration %zu", iter);
  if (r == 0 && rep.kind == CONTROL_REPLY_ERROR)
    cr_assert_not_null (rep.message, "iteration %zu", iter);
  control_reply_free (&rep);
}

Test (fuzz, parsers_never_crash, .timeout = 60)
{
  struct rng r = { test_seed ("fuzz.parsers_never_crash") };
  char buf[4096];

  for (size_t iter = 0; iter < 50000; iter++) {
    size_t len = fuzz_message (&r, buf, sizeof buf);

    fuzz_parse (buf, len, iter);
  }
}

Test (fuzz, splitter_reassembles_random_chunks, .timeout = 60)
{
  struct rng r = { test_seed ("fuzz.splitter_reassembles_random_chunks") };

  for (int round = 0; round < 300; round++) {
    const size_t max = rng_below (&r, 40) + 1;
    char stream[2048];
    size_t starts[512], lens[512], nlines = 0, slen = 0, got = 0;
    bool too_long = false;
    struct control_lines l;
    char *line;
    size_t len;
    int ret = 0;

    /* Build a stream of lines, some possibly longer than max. */
    while (slen < sizeof stream - 100 && nlines < ARRAY_SIZE (starts)) {
      size_t n = rng_below (&r, max + (rng_below (&r, 20) == 0 ? 10 : 1));

      starts[nlines] = slen;
      lens[nlines++] = n;
      for (size_t i = 0; i < n; i++)
        stream[slen++] = (char) ('a' + rng_below (&r, 26));
      stream[slen++] = '\n';
    }

    control_lines_init (&l, max);
    for (size_t off = 0; off < slen && ret != -E2BIG;) {
      size_t n = rng_below (&r, 3 * max) + 1;

      n = MIN (n, slen - off);

      ret = control_lines_feed (&l, stream + off, n);
      cr_assert (ret == 0 || ret == -E2BIG);
      off += n;
      while ((ret = control_lines_next (&l, &line, &len)) == 1) {
        cr_assert_lt (got, nlines);
        cr_assert_eq (len, lens[got], "round %d line %zu", round, got);
        cr_assert (memcmp (line, stream + starts[got], len) == 0);
        got++;
      }
      cr_assert (ret == 0 || ret == -E2BIG);
    }
    /* Every line up to the first long one came out, then the error. */
    for (size_t i = 0; i < nlines && !too_long; i++)
      if (lens[i] > max) {
        too_long = true;
        cr_assert_eq (got, i, "round %d: %zu lines before the long one, "
                      "got %zu", round, i, got);
        cr_assert_eq (ret, -E2BIG);
      }
    if (!too_long)
      cr_assert_eq (got, nlines);
    control_lines_free (&l);
  }
}

/* ------------------------------------------------------------ stream mode */

/* Frames fed in random pieces give back the data and the messages, then
 * the end; what follows the end frame is left for the lines.
 */
Test (frames, random_pieces)
{
  uint64_t seed = test_seed ("frames");
  struct rng r = { seed };
  static uint8_t wire[4 * 1024 * 1024], data[2 * 1024 * 1024];
  static uint8_t got[2 * 1024 * 1024];
  size_t wlen = 0, dlen = 0, glen = 0, off = 0, msgs = 0;
  struct control_frames f = { 0 };
  static const char msg[] = "{\"jsonrpc\":\"2.0\",\"method\":\"job.progress\"}";
  char mbuf[128];
  size_t mlen = 0;
  int k = CONTROL_FRAME_NONE;

  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (uint8_t) rng_next (&r);
  while (dlen < sizeof data) {
    size_t n = rng_below (&r, 300000) + 1;   /* MIN evaluates twice */

    n = MIN (n, sizeof data - dlen);

    control_frame_header ((uint32_t) n, wire + wlen);
    memcpy (wire + wlen + 4, data + dlen, n);
    wlen += 4 + n;
    dlen += n;
    if (rng_below (&r, 3) == 0) {
      control_frame_header (CONTROL_FRAME_MESSAGE | (sizeof msg - 1),
                            wire + wlen);
      memcpy (wire + wlen + 4, msg, sizeof msg - 1);
      wlen += 4 + sizeof msg - 1;
      msgs++;
    }
  }
  control_frame_header (0, wire + wlen);
  wlen += 4;
  memcpy (wire + wlen, "next\n", 5);
  wlen += 5;

  while (k != CONTROL_FRAME_END) {
    size_t n = rng_below (&r, 70000) + 1, used;

    n = MIN (n, wlen - off);

    while (n > 0 && k != CONTROL_FRAME_END) {
      const void *d;
      size_t dl;
      bool last;

      k = control_frames_next (&f, wire + off, n, &used, &d, &dl, &last);
      cr_assert_geq (k, 0, "seed %" PRIu64 ": %s", seed, cairn_errmsg ());
      off += used;
      n -= used;
      if (k == CONTROL_FRAME_DATA) {
        memcpy (got + glen, d, dl);
        glen += dl;
      }
      else if (k == CONTROL_FRAME_MSG) {
        memcpy (mbuf + mlen, d, dl);
        mlen += dl;
        if (last) {
          cr_assert_eq (mlen, sizeof msg - 1);
          cr_assert (memcmp (mbuf, msg, mlen) == 0);
          mlen = 0;
          msgs--;
        }
      }
      else if (k == CONTROL_FRAME_NONE)
        cr_assert_eq (n, 0);
    }
  }
  cr_assert_eq (glen, dlen, "seed %" PRIu64, seed);
  cr_assert (memcmp (got, data, dlen) == 0, "seed %" PRIu64, seed);
  cr_assert_eq (msgs, 0);
  cr_assert_eq (wlen - off, 5, "the end frame consumed what follows it");
}

/* Frames the protocol does not allow. */
Test (frames, bad_headers)
{
  static const uint32_t bad[] = { CONTROL_FRAME_MAX + 1, 0x7fffffff,
                                  CONTROL_FRAME_MESSAGE,
                                  CONTROL_FRAME_MESSAGE | (CONTROL_FRAME_MAX + 1) };

  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct control_frames f = { 0 };
    uint8_t h[4];
    const void *d;
    size_t used, dl;
    bool last;

    control_frame_header (bad[i], h);
    cr_assert_eq (control_frames_next (&f, h, 4, &used, &d, &dl, &last),
                  -EPROTO, "header %#x", bad[i]);
  }
}

/* Raw bytes after a line are taken out as they came. */
Test (lines, take_after_a_line)
{
  struct control_lines l;
  char *line, buf[16];
  size_t len;

  control_lines_init (&l, 100);
  cr_assert_eq (control_lines_feed (&l, "req\n\x00\x01\nxy", 9), 0);
  cr_assert_eq (control_lines_next (&l, &line, &len), 1);
  cr_assert_str_eq (line, "req");
  cr_assert_eq (control_lines_take (&l, buf, 3), 3);
  cr_assert (memcmp (buf, "\x00\x01\n", 3) == 0);
  cr_assert_eq (control_lines_take (&l, buf, sizeof buf), 2);
  cr_assert (memcmp (buf, "xy", 2) == 0);
  cr_assert_eq (control_lines_take (&l, buf, sizeof buf), 0);
  cr_assert_eq (control_lines_feed (&l, "after\n", 6), 0);
  cr_assert_eq (control_lines_next (&l, &line, &len), 1);
  cr_assert_str_eq (line, "after");
  control_lines_free (&l);
}

/* A message with invalid UTF-8 (a quoted name cut inside a character)
 * still makes an error reply, with the odd bytes masked.
 */
Test (messages, error_with_invalid_utf8)
{
  struct control_reply rep;
  size_t len;
  char *s = control_format_error (NULL, CONTROL_E_METHOD_NOT_FOUND,
                                  "no method \"caf\xc3\"", &len);

  cr_assert_not_null (s);
  cr_assert_eq (control_parse_reply (s, len - 1, &rep), 0, "%s",
                cairn_errmsg ());
  cr_assert_str_eq (rep.message, "no method \"caf?\"");
  control_reply_free (&rep);
  free (s);
}
