/* Cairn fuzz harness: the control protocol (tests/fuzz/README.md).
 *
 * The input is up to FUZZ_MAX_LINES request lines ('\n' between them),
 * each parsed and dispatched by control_call_local, in order, against
 * one in-memory pool that holds volumes, a snapshot and a clone: every
 * method of the catalog, stream and job tables and the built-ins, with
 * whatever parameters the input has.  The replicate.* methods are left
 * out: they connect to the host they are given.
 *
 * What must hold, beyond "no crash, no leak, no undefined behaviour":
 *  1. every request gets one reply line, a notification none, and the
 *     reply parses as a JSON-RPC result or error;
 *  2. every error carries its code's symbolic name (rpc.h, choice 5);
 *  3. whatever the requests did, the pool closes and fsck finds it clean.
 *
 * In a libFuzzer build a custom mutator (retype_member) puts values of
 * every JSON type where a request's members were: byte mutations seldom
 * turn a valid request's string into a number, a null or an array (the
 * quotes must go and the new value come in one step, and a member added
 * beside the old one is a duplicate, which the decoder refuses), so
 * without it the type checks of the methods' parameters went untested
 * (tests/fuzz/README.md, "Planted bugs").
 */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "control.h"
#include "fuzz.h"
#include "methods.h"
#include "rpc.h"
#include "volume.h"

#define FUZZ_MAX_LINES 8

static struct fuzz_image image;
static bool ready;

/* The pool every input starts from. */
static int
fill (struct cairn_pool *pool)
{
  int r;

  if ((r = vol_create (pool, "vm/a", 1 << 20, NULL)) < 0 ||
      (r = fuzz_fill_volume (pool, "vm/a", 'a', 0, 256 << 10)) < 0 ||
      (r = snap_create (pool, "vm/a", "s1")) < 0 ||
      (r = fuzz_fill_volume (pool, "vm/a", 'b', 64 << 10, 64 << 10)) < 0 ||
      (r = snap_create (pool, "vm/a", "s2")) < 0 ||
      (r = vol_clone (pool, "vm/a@s1", "c")) < 0 ||
      (r = fuzz_fill_volume (pool, "c", 'c', 0, 8 << 10)) < 0 ||
      (r = vol_create (pool, "empty", 4096, NULL)) < 0 ||
      (r = pool_commit (pool)) < 0)
    return r;
  return 0;
}

/* Check one reply (invariants 1 and 2). */
static void
check_reply (const char *line, size_t len, const char *reply, size_t rlen)
{
  struct control_reply rep;

  if (rlen == 0 || reply[rlen - 1] != '\n' || memchr (reply, '\n', rlen - 1))
    fuzz_die ("reply is not one line: %.*s", (int) rlen, reply);
  if (control_parse_reply (reply, rlen - 1, &rep) < 0)
    fuzz_die ("reply does not parse (%s): %s", cairn_errmsg (), reply);
  if (rep.kind == CONTROL_REPLY_NOTIFICATION)
    fuzz_die ("a notification in reply: %s", reply);
  if (rep.kind == CONTROL_REPLY_ERROR &&
      (rep.name == NULL || control_error_name (rep.code) == NULL ||
       strcmp (rep.name, control_error_name (rep.code)) != 0))
    fuzz_die ("error reply without its code's name: %s", reply);
  control_reply_free (&rep);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static struct control_method_table tables[2];
  struct cairn_methods_ctx mctx = { 0 };
  struct control_config cfg = {
    .tables = tables, .n_tables = 2, .opaque = &mctx,
  };
  struct cairn_dev *dev;
  const uint8_t *p = data, *end = data + size;
  int64_t problems;

  if (!ready) {
    tables[0] = cairn_catalog_methods;
    tables[1] = cairn_stream_methods;
    fuzz_image_build (&image, fill);
    ready = true;
  }
  dev = fuzz_image_dev (&image);
  if (fuzz_pool_open (dev, false, &mctx.pool) < 0)
    fuzz_die ("opening the pool: %s", cairn_errmsg ());

  for (int i = 0; i < FUZZ_MAX_LINES && p < end; i++) {
    const uint8_t *nl = memchr (p, '\n', end - p);
    size_t len = (nl ? nl : end) - p;
    char *reply = NULL;
    size_t rlen = 0;

    if (control_call_local (&cfg, (const char *) p, len, &reply, &rlen) < 0)
      fuzz_die ("control_call_local failed: %s", cairn_errmsg ());
    if (reply && getenv ("CAIRN_FUZZ_VERBOSE"))
      fprintf (stderr, "fuzz-control: %s", reply);
    if (reply)
      check_reply ((const char *) p, len, reply, rlen);
    free (reply);
    p += len + (nl != NULL);
  }

  if (pool_close (mctx.pool) < 0)
    fuzz_die ("closing the pool: %s", cairn_errmsg ());
  problems = fuzz_fsck (dev, true);
  if (problems != 0)
    fuzz_die ("fsck after the requests: %" PRId64 " problems (%s)", problems,
              problems < 0 ? cairn_errmsg () : "printed above");
  dev_close (dev);
  return 0;
}

#ifdef CAIRN_LIBFUZZER

size_t LLVMFuzzerMutate (uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator (uint8_t *data, size_t size, size_t max_size,
                                unsigned int seed);

/* Values of every JSON type (and the edges of some), for a member of
 * another type or of the same.
 */
static const char *const retype_values[] = {
  "0", "-1", "1", "4096", "1.5", "1e999", "18446744073709551616", "null",
  "true", "false", "\"\"", "\"x\"", "\"10G\"", "\"-1\"", "[]", "[\"vm/a\"]",
  "[1]", "{}", "{\"a\":1}",
};

/* A step of xorshift64: the mutator's choices, all drawn from its seed. */
static uint64_t
retype_rand (uint64_t *x)
{
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Replace one member of one request line (a member of its params when
 * they are an object with members, else of the request itself) by one of
 * retype_values, in data[0..size): the new size, or 0 when the line
 * chosen is no JSON object or the result would not fit in max_size.
 */
static size_t
retype_member (uint8_t *data, size_t size, size_t max_size, uint64_t x)
{
  const uint8_t *line = data, *end = data + size, *nl;
  size_t lines = 1, len, out_len = 0;
  json_t *root, *obj, *params, *value;
  void *iter;
  char *enc = NULL;

  for (const uint8_t *p = data; p < end && lines < FUZZ_MAX_LINES; p++)
    lines += *p == '\n';
  for (size_t k = retype_rand (&x) % lines; k > 0; k--)
    line = memchr (line, '\n', end - line) + 1;
  nl = memchr (line, '\n', end - line);
  len = (nl ? nl : end) - line;
  root = json_loadb ((const char *) line, len, JSON_REJECT_DUPLICATES, NULL);
  if (root == NULL || !json_is_object (root))
    goto out;
  params = json_object_get (root, "params");
  obj = json_is_object (params) && json_object_size (params) ? params : root;
  if (json_object_size (obj) == 0)
    goto out;
  iter = json_object_iter (obj);
  for (size_t k = retype_rand (&x) % json_object_size (obj); k > 0; k--)
    iter = json_object_iter_next (obj, iter);
  value = json_loads (retype_values[retype_rand (&x) %
                                    (sizeof retype_values /
                                     sizeof retype_values[0])],
                      JSON_DECODE_ANY, NULL);
  if (value == NULL || json_object_iter_set_new (obj, iter, value) < 0)
    goto out;
  enc = json_dumps (root, JSON_COMPACT);
  if (enc == NULL || size - len + strlen (enc) > max_size)
    goto out;
  out_len = size - len + strlen (enc);
  memmove ((uint8_t *) line + strlen (enc), line + len, end - line - len);
  memcpy ((uint8_t *) line, enc, strlen (enc));
 out:
  free (enc);
  json_decref (root);
  return out_len;
}

/* libFuzzer's mutations, and one time in four a member retyped. */
size_t
LLVMFuzzerCustomMutator (uint8_t *data, size_t size, size_t max_size,
                         unsigned int seed)
{
  uint64_t x = seed | (uint64_t) 1 << 32;
  size_t n;

  if (retype_rand (&x) % 4 == 0 &&
      (n = retype_member (data, size, max_size, x)) > 0)
    return n;
  return LLVMFuzzerMutate (data, size, max_size);
}

#endif /* CAIRN_LIBFUZZER */
