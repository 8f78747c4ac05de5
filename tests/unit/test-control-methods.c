/* Unit tests for the catalog methods (server/methods-catalog.c,
 * methods-snapshot.c, methods-objects.c), driven through
 * control_call_local as request lines, on a real pool on a memory device:
 * every method's result, and every error path (wrong types,
 * missing and unknown members, not-found, exists, busy, invalid names and
 * sizes), each checked for its code, its name, a message naming what is
 * wrong, and for having changed nothing (the full listing before and after
 * is the same).  Each test ends with fsck: no method leaks a block.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "control.h"
#include "fsck.h"
#include "methods.h"
#include "rpc.h"
#include "volume.h"

#define POOL_SIZE (64ull * 1024 * 1024)
#define GIB (1024ull * 1024 * 1024)

static struct cairn_dev *dev;
static struct cairn_pool *pool;
static struct cairn_methods_ctx mctx;
static const struct control_config cfg = {
  .tables = &cairn_catalog_methods,
  .n_tables = 1,
  .opaque = &mctx,
};

/* ---------------------------------------------------------------- fixture */

static void
setup (void)
{
  cr_assert_eq (dev_mem_create (POOL_SIZE, &dev), 0);
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (pool_open (dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  mctx.pool = pool;
}

/* Print fsck's problems, so that a failure says what they were. */
static void
print_problem (void *opaque, const char *msg)
{
  fprintf (stderr, "fsck: %s\n", msg);
}

static void
teardown (void)
{
  struct fsck_opts o = { .problem = print_problem };
  struct fsck_report rep;

  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (fsck_pool (dev, &o, &rep), 0, "%s", cairn_errmsg ());
  cr_assert_eq (rep.errors, 0, "fsck found %" PRIu64 " problems", rep.errors);
  dev_close (dev);
}

TestSuite (methods, .init = setup, .fini = teardown);

/* ---------------------------------------------------------------- calls */

/* Run method with params (JSON in which ' stands for ", or NULL for none)
 * and parse the reply into rep.
 */
static void
call (const char *method, const char *params, struct control_reply *rep)
{
  char *line, *reply;
  size_t len;
  int n;

  if (params)
    n = asprintf (&line, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"%s\","
                  "\"params\":%s}", method, params);
  else
    n = asprintf (&line, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"%s\"}",
                  method);
  cr_assert_geq (n, 0);
  for (char *p = line; *p; p++)
    if (*p == '\'')
      *p = '"';
  cr_assert_eq (control_call_local (&cfg, line, strlen (line), &reply, &len),
                0, "%s", cairn_errmsg ());
  cr_assert_not_null (reply, "no reply to %s", line);
  cr_assert_eq (control_parse_reply (reply, len - 1, rep), 0,
                "bad reply to %s: %s", line, reply);
  free (reply);
  free (line);
}

/* Call and expect success: the result (a new reference, json null for a
 * null result).
 */
static json_t *
ok (const char *method, const char *params)
{
  struct control_reply rep;
  json_t *result;

  call (method, params, &rep);
  cr_assert_eq (rep.kind, CONTROL_REPLY_RESULT, "%s %s failed: %d %s: %s",
                method, params ? params : "", rep.code,
                rep.name ? rep.name : "?", rep.message);
  result = json_incref (rep.result);
  control_reply_free (&rep);
  return result;
}

/* Call, expect success and drop the result. */
static void
ok_ (const char *method, const char *params)
{
  json_decref (ok (method, params));
}

/* Everything a client can see of the catalog, as one string. */
static char *
state (void)
{
  json_t *list = ok ("volume.list", "{'snapshots':true}");
  char *s = json_dumps (list, JSON_SORT_KEYS | JSON_COMPACT);

  json_decref (list);
  cr_assert_not_null (s);
  return s;
}

/* Call and expect the error code (with its name) and a message that
 * contains msg; and that the call changed nothing.
 */
static void
fails (const char *method, const char *params, int code, const char *msg)
{
  char *before = state (), *after;
  struct control_reply rep;

  call (method, params, &rep);
  cr_assert_eq (rep.kind, CONTROL_REPLY_ERROR, "%s %s succeeded", method,
                params ? params : "");
  cr_assert_eq (rep.code, code, "%s %s: code %d (%s: %s), expected %d",
                method, params ? params : "", rep.code, rep.name,
                rep.message, code);
  cr_assert_str_eq (rep.name, control_error_name (code));
  cr_assert_not_null (strstr (rep.message, msg), "%s %s: message '%s' does "
                      "not contain '%s'", method, params ? params : "",
                      rep.message, msg);
  control_reply_free (&rep);
  after = state ();
  cr_assert_str_eq (before, after, "the failed %s %s changed the catalog",
                    method, params ? params : "");
  free (before);
  free (after);
}

/* A string member ("" for null). */
static const char *
jstr (json_t *obj, const char *key)
{
  json_t *v = json_object_get (obj, key);

  cr_assert_not_null (v, "no member %s", key);
  return json_is_null (v) ? "" : json_string_value (v);
}

/* An integer member. */
static json_int_t
jint (json_t *obj, const char *key)
{
  json_t *v = json_object_get (obj, key);

  cr_assert (json_is_integer (v), "member %s is not an integer", key);
  return json_integer_value (v);
}

/* A boolean member. */
static bool
jbool (json_t *obj, const char *key)
{
  json_t *v = json_object_get (obj, key);

  cr_assert (json_is_boolean (v), "member %s is not a boolean", key);
  return json_is_true (v);
}

/* The names listed by volume.list (with snapshots or not), joined by ' '. */
static char *
names (bool snapshots)
{
  json_t *res = ok ("volume.list", snapshots ? "{'snapshots':true}" : "{}");
  json_t *arr = json_object_get (res, "volumes"), *v;
  char *s = calloc (1, 4096);
  size_t i;

  json_array_foreach (arr, i, v) {
    if (i)
      strcat (s, " ");
    strcat (s, jstr (v, "name"));
  }
  json_decref (res);
  return s;
}

static void
assert_names (bool snapshots, const char *expect)
{
  char *s = names (snapshots);

  cr_assert_str_eq (s, expect);
  free (s);
}

/* Write len bytes of fill at off of a volume, through the engine. */
static void
write_data (const char *name, uint64_t off, uint32_t len, int fill)
{
  struct cairn_volume *v;
  void *buf = malloc (len);

  memset (buf, fill, len);
  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, buf, len, off, 0), 0, "%s", cairn_errmsg ());
  vol_close (v);
  free (buf);
}

/* ---------------------------------------------------------------- tests */

static const char *const all_methods[] = {
  "checkpoint.list", "checkpoint.promote", "checkpoint.prune",
  "checkpoint.set", "device.replace", "device.replace_cancel",
  "device.replace_status", "pool.status", "scrub.cancel", "scrub.pause",
  "scrub.resume", "scrub.start", "scrub.status",
  "snapshot.create", "snapshot.delete", "snapshot.list",
  "snapshot.rename", "snapshot.space", "stats.list", "stats.show",
  "volume.clone", "volume.create",
  "volume.delete", "volume.diff", "volume.list", "volume.rename",
  "volume.resize", "volume.rollback", "volume.set", "volume.show",
};

Test (methods, listed_and_blocking)
{
  json_t *res = ok ("server.methods", NULL);
  json_t *arr = json_object_get (res, "methods");

  for (size_t i = 0; i < ARRAY_SIZE (all_methods); i++) {
    bool found = false;

    for (size_t j = 0; j < json_array_size (arr); j++)
      found |= strcmp (json_string_value (json_array_get (arr, j)),
                       all_methods[i]) == 0;
    cr_assert (found, "server.methods does not list %s", all_methods[i]);
  }
  json_decref (res);
  for (size_t i = 0; i < cairn_catalog_methods.n; i++)
    cr_assert (cairn_catalog_methods.methods[i].blocking,
               "%s is not blocking: engine work belongs on the threadpool",
               cairn_catalog_methods.methods[i].name);
  cr_assert_eq (cairn_catalog_methods.n, ARRAY_SIZE (all_methods));
}

/* The device.* methods on a pool of one device: nothing to replace, said
 * so (test-device-replace.sh drives them on a pool of several).
 */
Test (methods, device_replace_needs_several_devices)
{
  fails ("device.replace", "{'old':'0','new':'/nonexistent'}",
         CAIRN_E_INVALID, "the pool is on one device");
  fails ("device.replace_status", NULL, CAIRN_E_INVALID,
         "no device to replace");
  fails ("device.replace_cancel", NULL, CAIRN_E_INVALID,
         "the pool is on one device");
  fails ("device.replace", "{'new':'/x'}", CONTROL_E_INVALID_PARAMS, "old");
}

/* The checkpoint.* methods: settings for the pool and a volume, a list
 * with times and sizes, promotion to a snapshot, prune with a dry run,
 * and their refusals.
 */
Test (methods, checkpoints)
{
  json_t *res, *arr;
  char params[256];
  json_int_t g1, g2;

  res = ok ("checkpoint.set", "{'settings':{'checkpoints':'on'}}");
  cr_assert_str_eq (jstr (res, "checkpoints"), "on");
  cr_assert_str_eq (jstr (res, "retention"), "keep-within=1h");
  cr_assert_str_eq (jstr (res, "commit_interval"), "5s");
  cr_assert_str_eq (jstr (res, "commit_interval_from"), "default");
  json_decref (res);
  /* The commit interval: the pool's, in pool.status as the timer's. */
  res = ok ("checkpoint.set", "{'settings':{'commit-interval':'90'}}");
  cr_assert_str_eq (jstr (res, "commit_interval"), "90s");
  cr_assert_str_eq (jstr (res, "commit_interval_from"), "pool");
  json_decref (res);
  res = ok ("pool.status", "{}");
  cr_assert_eq (jint (json_object_get (res, "checkpoints"),
                      "commit_interval_ms"), 90000);
  cr_assert_str_eq (jstr (json_object_get (res, "checkpoints"),
                          "commit_interval_from"), "pool");
  json_decref (res);
  res = ok ("checkpoint.set", "{'settings':{'commit-interval':null}}");
  cr_assert_str_eq (jstr (res, "commit_interval_from"), "default");
  json_decref (res);
  json_decref (ok ("volume.create", "{'name':'db','size':1048576}"));
  write_data ("db", 0, 8192, 1);
  cr_assert_eq (pool_commit (pool), 0);
  write_data ("db", 0, 4096, 2);
  cr_assert_eq (pool_commit (pool), 0);
  res = ok ("checkpoint.list", "{'volume':'db'}");
  arr = json_object_get (res, "checkpoints");
  cr_assert_eq (json_array_size (arr), 2, "two commits wrote db");
  g1 = jint (json_array_get (arr, 0), "generation");
  g2 = jint (json_array_get (arr, 1), "generation");
  cr_assert_eq (jint (json_array_get (arr, 0), "written"), 8192);
  cr_assert_eq (jint (json_array_get (arr, 1), "written"), 4096);
  /* The data block the second commit overwrote, and the volume tree's
   * leaf it copied (one node).
   */
  cr_assert_eq (jint (json_array_get (arr, 0), "unique"),
                4096 + NODE_SIZE_DEFAULT, "unique %lld",
                (long long) jint (json_array_get (arr, 0), "unique"));
  cr_assert_eq (jint (json_array_get (arr, 1), "unique"), 0);
  cr_assert_str_eq (jstr (json_object_get (res, "settings"), "checkpoints_from"),
                    "pool");
  json_decref (res);
  /* A policy that keeps only the newest: a dry run marks, then prune drops. */
  res = ok ("checkpoint.set", "{'volume':'db','settings':{'keep-within':'0',"
            "'keep-last':'1'}}");
  cr_assert_str_eq (jstr (res, "retention"), "keep-within=0,keep-last=1");
  cr_assert_str_eq (jstr (res, "retention_from"), "volume");
  json_decref (res);
  snprintf (params, sizeof params, "{'checkpoint':'db@#%lld','name':'first'}",
            (long long) g1);
  res = ok ("checkpoint.promote", params);
  cr_assert_str_eq (jstr (res, "name"), "db@first");
  cr_assert_eq (jint (res, "generation"), g1);
  json_decref (res);
  fails ("checkpoint.promote", params, CAIRN_E_EXISTS, "is snapshot 'first' "
         "already");
  res = ok ("checkpoint.prune", "{'volume':'db','dry_run':true}");
  arr = json_object_get (res, "checkpoints");
  /* The promoted one follows the policy too: only its checkpoint goes,
   * the snapshot stays.
   */
  cr_assert_str_eq (jstr (json_array_get (arr, 0), "mark"), "remove");
  cr_assert_str_eq (jstr (json_array_get (arr, 1), "mark"), "keep-last");
  cr_assert_eq (jint (res, "removed"), 1);
  json_decref (res);
  res = ok ("checkpoint.prune", "{'volume':'db'}");
  cr_assert_eq (jint (res, "removed"), 1);
  json_decref (res);
  res = ok ("checkpoint.list", "{'volume':'db'}");
  arr = json_object_get (res, "checkpoints");
  cr_assert_eq (json_array_size (arr), 1);
  cr_assert_eq (jint (json_array_get (arr, 0), "generation"), g2);
  json_decref (res);
  res = ok ("snapshot.list", "{'volume':'db'}");
  cr_assert_eq (json_array_size (json_object_get (res, "snapshots")), 1,
                "the snapshot stays");
  json_decref (res);
  fails ("checkpoint.list", "{'volume':'db','since':'yesterday'}",
         CONTROL_E_INVALID_PARAMS, "YYYY-MM-DDTHH:MM:SSZ");
  fails ("checkpoint.set", "{'volume':'db','settings':{'keep-hourly':'lots'}}",
         CAIRN_E_INVALID, "keep-hourly");
  fails ("checkpoint.set", "{'volume':'db','settings':{'checkpoints':'maybe'}}",
         CAIRN_E_INVALID, "give on or off");
  fails ("checkpoint.set", "{'volume':'db','settings':{'commit-interval':'9s'}}",
         CAIRN_E_INVALID, "the pool's setting");
  snprintf (params, sizeof params, "{'checkpoint':'db@#%lld','name':'x'}",
            (long long) g2 + 1000);
  fails ("checkpoint.promote", params, CAIRN_E_NOT_FOUND, "no checkpoint at "
         "generation");
}

Test (methods, params_must_be_an_object_of_known_members)
{
  ok_ ("volume.create", "{'name':'db','size':4096}");
  for (size_t i = 0; i < ARRAY_SIZE (all_methods); i++) {
    fails (all_methods[i], "['db']", CONTROL_E_INVALID_PARAMS,
           "params must be an object");
    fails (all_methods[i], "{'bogus':1}", CONTROL_E_INVALID_PARAMS,
           "unknown member \"bogus\"");
  }
}

Test (methods, volume_create)
{
  json_t *v = ok ("volume.create", "{'name':'db','size':'10G'}");
  const char *ctime;

  cr_assert_str_eq (jstr (v, "name"), "db");
  cr_assert_str_eq (jstr (v, "volume"), "db");
  cr_assert (json_is_null (json_object_get (v, "snapshot")));
  cr_assert_eq (jint (v, "size"), (json_int_t) (10 * GIB));
  cr_assert_eq (jint (v, "referenced"), 0);
  cr_assert_geq (jint (v, "id"), 1);
  cr_assert_geq (jint (v, "generation"), 1);
  cr_assert_not (jbool (v, "readonly"));
  cr_assert (json_is_null (json_object_get (v, "origin")));
  ctime = jstr (v, "ctime");
  cr_assert_eq (strlen (ctime), 20, "ctime %s", ctime);
  cr_assert (ctime[4] == '-' && ctime[10] == 'T' && ctime[19] == 'Z',
             "ctime %s is not ISO 8601 UTC", ctime);
  json_decref (v);

  v = ok ("volume.create", "{'name':'tenant/a.b_c-1','size':1048576}");
  cr_assert_eq (jint (v, "size"), 1048576);
  json_decref (v);
  v = ok ("volume.create", "{'name':'half','size':'1.5G'}");
  cr_assert_eq (jint (v, "size"), (json_int_t) (3 * GIB / 2));
  json_decref (v);
  assert_names (false, "db half tenant/a.b_c-1");

  /* Missing members, wrong types, unknown members. */
  fails ("volume.create", NULL, CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  fails ("volume.create", "{'size':4096}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  fails ("volume.create", "{'name':'x'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"size\"");
  fails ("volume.create", "{'name':7,'size':4096}", CONTROL_E_INVALID_PARAMS,
         "\"name\" must be a string");
  fails ("volume.create", "{'name':'x','size':true}",
         CONTROL_E_INVALID_PARAMS, "\"size\" must be a size");
  fails ("volume.create", "{'name':'x','size':-4096}",
         CONTROL_E_INVALID_PARAMS, "\"size\" must be a size");
  fails ("volume.create", "{'name':'x','size':1.5}",
         CONTROL_E_INVALID_PARAMS, "\"size\" must be a size");
  fails ("volume.create", "{'name':'x','size':'10X'}",
         CONTROL_E_INVALID_PARAMS, "invalid size '10X'");
  fails ("volume.create", "{'name':'x','size':'16E'}",
         CONTROL_E_INVALID_PARAMS, "too large");
  fails ("volume.create", "{'name':'x','size':'8E'}",
         CONTROL_E_INVALID_PARAMS, "\"size\" is too large");
  fails ("volume.create", "{'name':'x','size':4096,'sise':1}",
         CONTROL_E_INVALID_PARAMS, "unknown member \"sise\": the method "
         "takes \"name\", \"size\"");
  fails ("volume.create", "{'name':'x','size':4096,'name':'y'}",
         CONTROL_E_INVALID_REQUEST, "");

  /* The engine's refusals. */
  fails ("volume.create", "{'name':'db','size':4096}", CAIRN_E_EXISTS,
         "exists already");
  fails ("volume.create", "{'name':'a@b','size':4096}", CAIRN_E_INVALID,
         "contains '@'");
  fails ("volume.create", "{'name':'a/../b','size':4096}", CAIRN_E_INVALID,
         "'..' component");
  fails ("volume.create", "{'name':'','size':4096}", CAIRN_E_INVALID,
         "empty name");
  fails ("volume.create", "{'name':'/x','size':4096}", CAIRN_E_INVALID,
         "empty component");
  fails ("volume.create", "{'name':'x','size':0}", CAIRN_E_INVALID,
         "multiple of 512");
  fails ("volume.create", "{'name':'x','size':1000}", CAIRN_E_INVALID,
         "multiple of 512");
  {
    char params[400], name[300];

    memset (name, 'n', 256);
    name[256] = '\0';
    snprintf (params, sizeof params, "{'name':'%s','size':4096}", name);
    fails ("volume.create", params, CAIRN_E_INVALID, "at most 255");
  }
}

Test (methods, volume_list_and_show)
{
  json_t *res, *arr, *v;

  res = ok ("volume.list", NULL);
  cr_assert_eq (json_array_size (json_object_get (res, "volumes")), 0);
  json_decref (res);

  ok_ ("volume.create", "{'name':'b','size':'1M'}");
  ok_ ("volume.create", "{'name':'a','size':'2M'}");
  ok_ ("snapshot.create", "{'volume':'b','name':'s1'}");
  ok_ ("snapshot.create", "{'volume':'b','name':'s0'}");
  ok_ ("volume.clone", "{'source':'b@s1','name':'c'}");
  assert_names (false, "a b c");
  /* Snapshots come after their volume, oldest first. */
  assert_names (true, "a b b@s1 b@s0 c");

  res = ok ("volume.list", "{'snapshots':true}");
  arr = json_object_get (res, "volumes");
  v = json_array_get (arr, 2);
  cr_assert_str_eq (jstr (v, "name"), "b@s1");
  cr_assert_str_eq (jstr (v, "volume"), "b");
  cr_assert_str_eq (jstr (v, "snapshot"), "s1");
  cr_assert (jbool (v, "readonly"));
  cr_assert_eq (jint (v, "size"), 1048576);
  cr_assert_str_eq (jstr (json_array_get (arr, 4), "origin"), "b@s1");
  json_decref (res);

  /* show: a volume with its snapshots and clones, a snapshot with its
   * clones.
   */
  v = ok ("volume.show", "{'name':'b'}");
  cr_assert_eq (json_array_size (json_object_get (v, "snapshots")), 2);
  cr_assert_str_eq (json_string_value (json_array_get (
                      json_object_get (v, "snapshots"), 0)), "b@s1");
  cr_assert_str_eq (json_string_value (json_array_get (
                      json_object_get (v, "snapshots"), 1)), "b@s0");
  cr_assert_eq (json_array_size (json_object_get (v, "clones")), 1);
  cr_assert_str_eq (json_string_value (json_array_get (
                      json_object_get (v, "clones"), 0)), "c");
  json_decref (v);
  v = ok ("volume.show", "{'name':'b@s1'}");
  cr_assert_str_eq (jstr (v, "name"), "b@s1");
  cr_assert_null (json_object_get (v, "snapshots"));
  cr_assert_eq (json_array_size (json_object_get (v, "clones")), 1);
  json_decref (v);
  v = ok ("volume.show", "{'name':'b@s0'}");
  cr_assert_eq (json_array_size (json_object_get (v, "clones")), 0);
  json_decref (v);
  v = ok ("volume.show", "{'name':'c'}");
  cr_assert_str_eq (jstr (v, "origin"), "b@s1");
  json_decref (v);

  fails ("volume.list", "{'snapshots':1}", CONTROL_E_INVALID_PARAMS,
         "\"snapshots\" must be true or false");
  fails ("volume.show", "{}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  fails ("volume.show", "{'name':'nope'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("volume.show", "{'name':'b@nope'}", CAIRN_E_NOT_FOUND,
         "no snapshot named 'nope'");
}

Test (methods, volume_delete)
{
  json_t *v;

  ok_ ("volume.create", "{'name':'db','size':'1M'}");
  ok_ ("snapshot.create", "{'volume':'db','name':'s1'}");
  write_data ("db", 0, 8192, 1);

  /* A volume with snapshots goes only recursively. */
  fails ("volume.delete", "{'name':'db'}", CAIRN_E_BUSY, "1 snapshot");
  fails ("volume.delete", "{'name':'db','recursive':false}", CAIRN_E_BUSY,
         "delete it first or use --recursive");
  fails ("volume.delete", "{'name':'db','recursive':'yes'}",
         CONTROL_E_INVALID_PARAMS, "\"recursive\" must be true or false");
  fails ("volume.delete", "{'name':'nope'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("volume.delete", "{'name':'db@s1'}", CAIRN_E_INVALID,
         "names a snapshot");
  fails ("volume.delete", "{'recursive':true}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  v = ok ("volume.delete", "{'name':'db','recursive':true}");
  cr_assert (json_is_null (v));
  json_decref (v);
  assert_names (true, "");

  /* A volume that a clone started from disappears, and the clone loses
   * its origin's name.
   */
  ok_ ("volume.create", "{'name':'base','size':'1M'}");
  write_data ("base", 0, 4096, 2);
  ok_ ("snapshot.create", "{'volume':'base','name':'gold'}");
  ok_ ("volume.clone", "{'source':'base@gold','name':'vm'}");
  ok_ ("volume.delete", "{'name':'base','recursive':true}");
  assert_names (true, "vm");
  v = ok ("volume.show", "{'name':'vm'}");
  cr_assert (json_is_null (json_object_get (v, "origin")));
  cr_assert_eq (jint (v, "referenced"), 4096);
  json_decref (v);
  ok_ ("volume.delete", "{'name':'vm'}");
  assert_names (true, "");
}

Test (methods, volume_rename_resize_set)
{
  json_t *v;

  ok_ ("volume.create", "{'name':'a','size':'1M'}");
  ok_ ("volume.create", "{'name':'b','size':'1M'}");
  ok_ ("snapshot.create", "{'volume':'a','name':'s'}");

  v = ok ("volume.rename", "{'name':'a','to':'x/a'}");
  cr_assert_str_eq (jstr (v, "name"), "x/a");
  json_decref (v);
  assert_names (true, "b x/a x/a@s");
  fails ("volume.rename", "{'name':'x/a','to':'b'}", CAIRN_E_EXISTS,
         "exists already");
  fails ("volume.rename", "{'name':'nope','to':'c'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("volume.rename", "{'name':'b','to':'c#1'}", CAIRN_E_INVALID,
         "contains '#'");
  fails ("volume.rename", "{'name':'b','to':'b@x'}", CAIRN_E_INVALID,
         "names a snapshot");
  fails ("volume.rename", "{'name':'b'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"to\"");

  v = ok ("volume.resize", "{'name':'b','size':'2M'}");
  cr_assert_eq (jint (v, "size"), 2 * 1048576);
  json_decref (v);
  fails ("volume.resize", "{'name':'b','size':'1M'}", CAIRN_E_INVALID,
         "shrinking");
  fails ("volume.resize", "{'name':'b','size':'1M','force':1}",
         CONTROL_E_INVALID_PARAMS, "\"force\" must be true or false");
  fails ("volume.resize", "{'name':'nope','size':'1M'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("volume.resize", "{'name':'b','size':0}", CAIRN_E_INVALID,
         "multiple of 512");
  fails ("volume.resize", "{'name':'b','size':'x'}", CONTROL_E_INVALID_PARAMS,
         "invalid size 'x'");
  v = ok ("volume.resize", "{'name':'b','size':524288,'force':true}");
  cr_assert_eq (jint (v, "size"), 524288);
  json_decref (v);

  v = ok ("volume.set", "{'name':'b','readonly':true}");
  cr_assert (jbool (v, "readonly"));
  json_decref (v);
  fails ("volume.set", "{'name':'b'}", CONTROL_E_INVALID_PARAMS,
         "nothing to set");
  fails ("volume.set", "{'name':'b','compression':'on'}",
         CONTROL_E_INVALID_PARAMS, "unknown member \"compression\"");
  fails ("volume.set", "{'name':'b','readonly':'on'}",
         CONTROL_E_INVALID_PARAMS, "\"readonly\" must be true or false");
  fails ("volume.set", "{'name':'nope','readonly':true}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  v = ok ("volume.set", "{'name':'b','readonly':false}");
  cr_assert_not (jbool (v, "readonly"));
  json_decref (v);
}

Test (methods, snapshots)
{
  json_t *res, *arr;

  ok_ ("volume.create", "{'name':'vm/d0','size':'1M'}");
  ok_ ("volume.create", "{'name':'vm/d1','size':'1M'}");
  ok_ ("volume.create", "{'name':'other','size':'1M'}");

  /* One volume, then several in one generation. */
  res = ok ("snapshot.create", "{'volume':'vm/d0','name':'a'}");
  arr = json_object_get (res, "snapshots");
  cr_assert_eq (json_array_size (arr), 1);
  cr_assert_str_eq (jstr (json_array_get (arr, 0), "name"), "vm/d0@a");
  json_decref (res);
  res = ok ("snapshot.create", "{'volumes':['vm/d0','vm/d1'],'name':'b'}");
  arr = json_object_get (res, "snapshots");
  cr_assert_eq (json_array_size (arr), 2);
  cr_assert_str_eq (jstr (json_array_get (arr, 1), "name"), "vm/d1@b");
  cr_assert_eq (jint (json_array_get (arr, 0), "generation"),
                jint (json_array_get (arr, 1), "generation"),
                "a multi-volume snapshot spans generations");
  json_decref (res);

  /* All or none. */
  fails ("snapshot.create", "{'volumes':['vm/d0','nope'],'name':'c'}",
         CAIRN_E_NOT_FOUND, "no volume named 'nope'");
  fails ("snapshot.create", "{'volumes':['other','vm/d0'],'name':'a'}",
         CAIRN_E_EXISTS, "has a snapshot named 'a' already");
  fails ("snapshot.create", "{'volumes':['other','other'],'name':'c'}",
         CAIRN_E_INVALID, "named twice");
  fails ("snapshot.create", "{'volume':'other','volumes':['vm/d0'],"
         "'name':'c'}", CONTROL_E_INVALID_PARAMS, "either \"volume\"");
  fails ("snapshot.create", "{'name':'c'}", CONTROL_E_INVALID_PARAMS,
         "either \"volume\"");
  fails ("snapshot.create", "{'volumes':[],'name':'c'}",
         CONTROL_E_INVALID_PARAMS, "\"volumes\" must be a non-empty array");
  fails ("snapshot.create", "{'volumes':['other',3],'name':'c'}",
         CONTROL_E_INVALID_PARAMS, "\"volumes\" must be a non-empty array");
  fails ("snapshot.create", "{'volume':'other'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  fails ("snapshot.create", "{'volume':'other','name':'x/y'}",
         CAIRN_E_INVALID, "may not contain '/'");
  fails ("snapshot.create", "{'volume':'other','name':'x@y'}",
         CAIRN_E_INVALID, "contains '@'");
  fails ("snapshot.create", "{'volume':'other@a','name':'c'}",
         CAIRN_E_INVALID, "names a snapshot");

  /* list, oldest first */
  res = ok ("snapshot.list", "{'volume':'vm/d0'}");
  arr = json_object_get (res, "snapshots");
  cr_assert_eq (json_array_size (arr), 2);
  cr_assert_str_eq (jstr (json_array_get (arr, 0), "name"), "vm/d0@a");
  cr_assert_str_eq (jstr (json_array_get (arr, 1), "name"), "vm/d0@b");
  json_decref (res);
  res = ok ("snapshot.list", "{'volume':'other'}");
  cr_assert_eq (json_array_size (json_object_get (res, "snapshots")), 0);
  json_decref (res);
  fails ("snapshot.list", "{'volume':'nope'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("snapshot.list", "{}", CONTROL_E_INVALID_PARAMS,
         "missing member \"volume\"");

  /* rename */
  res = ok ("snapshot.rename", "{'volume':'vm/d0','name':'a','to':'first'}");
  cr_assert_str_eq (jstr (res, "name"), "vm/d0@first");
  cr_assert_str_eq (jstr (res, "snapshot"), "first");
  json_decref (res);
  fails ("snapshot.rename", "{'volume':'vm/d0','name':'b','to':'first'}",
         CAIRN_E_EXISTS, "already");
  fails ("snapshot.rename", "{'volume':'vm/d0','name':'nope','to':'x'}",
         CAIRN_E_NOT_FOUND, "no snapshot named 'nope'");
  fails ("snapshot.rename", "{'volume':'nope','name':'b','to':'x'}",
         CAIRN_E_NOT_FOUND, "no volume named 'nope'");
  fails ("snapshot.rename", "{'volume':'vm/d0','name':'b','to':'x/y'}",
         CAIRN_E_INVALID, "may not contain '/'");
  fails ("snapshot.rename", "{'volume':'vm/d0','name':'b'}",
         CONTROL_E_INVALID_PARAMS, "missing member \"to\"");

  /* delete */
  fails ("snapshot.delete", "{'volume':'vm/d0','name':'nope'}",
         CAIRN_E_NOT_FOUND, "no snapshot named 'nope'");
  fails ("snapshot.delete", "{'volume':'nope','name':'b'}",
         CAIRN_E_NOT_FOUND, "no volume named 'nope'");
  fails ("snapshot.delete", "{'volume':'vm/d0'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  res = ok ("snapshot.delete", "{'volume':'vm/d0','name':'first'}");
  cr_assert (json_is_null (res));
  json_decref (res);
  assert_names (true, "other vm/d0 vm/d0@b vm/d1 vm/d1@b");
}

Test (methods, clones)
{
  json_t *v, *snap;
  char src[64], origin[64];

  ok_ ("volume.create", "{'name':'base','size':'1M'}");
  write_data ("base", 0, 4096, 3);
  ok_ ("snapshot.create", "{'volume':'base','name':'gold'}");

  v = ok ("volume.clone", "{'source':'base@gold','name':'c1'}");
  cr_assert_str_eq (jstr (v, "origin"), "base@gold");
  cr_assert_eq (jint (v, "referenced"), 4096);
  cr_assert_not (jbool (v, "readonly"));
  json_decref (v);

  /* A clone of the live volume starts from a generation of its own. */
  v = ok ("volume.clone", "{'source':'base','name':'c2'}");
  cr_assert_eq (strncmp (jstr (v, "origin"), "base@#", 6), 0, "origin %s",
                jstr (v, "origin"));
  json_decref (v);

  /* By generation; once the snapshot goes, the origin is a generation. */
  snap = ok ("volume.show", "{'name':'base@gold'}");
  snprintf (src, sizeof src, "{'source':'base@#%" PRId64 "','name':'c3'}",
            (int64_t) jint (snap, "generation"));
  snprintf (origin, sizeof origin, "base@#%" PRId64,
            (int64_t) jint (snap, "generation"));
  json_decref (snap);
  v = ok ("volume.clone", src);
  cr_assert_str_eq (jstr (v, "origin"), "base@gold");
  json_decref (v);
  ok_ ("snapshot.delete", "{'volume':'base','name':'gold'}");
  v = ok ("volume.show", "{'name':'c3'}");
  cr_assert_str_eq (jstr (v, "origin"), origin);
  json_decref (v);

  fails ("volume.clone", "{'source':'base','name':'c1'}", CAIRN_E_EXISTS,
         "exists already");
  fails ("volume.clone", "{'source':'nope','name':'c4'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("volume.clone", "{'source':'base@nope','name':'c4'}",
         CAIRN_E_NOT_FOUND, "no snapshot named 'nope'");
  fails ("volume.clone", "{'source':'base@#999999','name':'c4'}",
         CAIRN_E_NOT_FOUND, "999999");
  fails ("volume.clone", "{'source':'base','name':'c@4'}", CAIRN_E_INVALID,
         "names a snapshot");
  fails ("volume.clone", "{'source':'base'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
  fails ("volume.clone", "{'source':['base'],'name':'c4'}",
         CONTROL_E_INVALID_PARAMS, "\"source\" must be a string");
}

Test (methods, diff)
{
  json_t *res, *runs, *r0;

  ok_ ("volume.create", "{'name':'d','size':'1M'}");
  ok_ ("volume.create", "{'name':'e','size':'1M'}");
  ok_ ("snapshot.create", "{'volumes':['d','e'],'name':'a'}");
  write_data ("d", 0, 8192, 1);
  write_data ("d", 65536, 4096, 2);
  write_data ("d", 131072, 4096, 3);
  ok_ ("snapshot.create", "{'volume':'d','name':'b'}");

  res = ok ("volume.diff", "{'from':'d@a','to':'d@b'}");
  runs = json_object_get (res, "runs");
  cr_assert_eq (json_array_size (runs), 3, "%s",
                json_dumps (res, JSON_COMPACT));
  r0 = json_array_get (runs, 0);
  cr_assert_eq (jint (r0, "offset"), 0);
  cr_assert_eq (jint (r0, "length"), 8192);
  cr_assert_str_eq (jstr (r0, "type"), "data");
  cr_assert_eq (jint (json_array_get (runs, 1), "offset"), 65536);
  cr_assert_eq (jint (json_array_get (runs, 2), "offset"), 131072);
  cr_assert_not (jbool (res, "truncated"));
  cr_assert_eq (jint (res, "data_bytes"), 16384);
  cr_assert_eq (jint (res, "hole_bytes"), 0);
  json_decref (res);

  /* A reply is bounded: the rest is cut off, and it says so. */
  res = ok ("volume.diff", "{'from':'d@a','to':'d@b','max_runs':2}");
  cr_assert_eq (json_array_size (json_object_get (res, "runs")), 2);
  cr_assert (jbool (res, "truncated"));
  cr_assert_eq (jint (res, "data_bytes"), 12288);
  json_decref (res);
  res = ok ("volume.diff", "{'from':'d@a','to':'d@b','max_runs':3}");
  cr_assert_not (jbool (res, "truncated"));
  json_decref (res);

  /* To the live volume, with a trimmed block: a hole. */
  {
    struct cairn_volume *v;

    cr_assert_eq (vol_open (pool, "d", &v), 0);
    cr_assert_eq (vol_trim (v, 4096, 65536, 0), 0, "%s", cairn_errmsg ());
    vol_close (v);
  }
  res = ok ("volume.diff", "{'from':'d@b','to':'d'}");
  runs = json_object_get (res, "runs");
  cr_assert_eq (json_array_size (runs), 1, "%s",
                json_dumps (res, JSON_COMPACT));
  cr_assert_eq (jint (json_array_get (runs, 0), "offset"), 65536);
  cr_assert_str_eq (jstr (json_array_get (runs, 0), "type"), "hole");
  cr_assert_eq (jint (res, "hole_bytes"), 4096);
  json_decref (res);
  res = ok ("volume.diff", "{'from':'e@a','to':'e'}");
  cr_assert_eq (json_array_size (json_object_get (res, "runs")), 0);
  json_decref (res);

  fails ("volume.diff", "{'from':'d','to':'d@a'}", CAIRN_E_INVALID,
         "live volume");
  fails ("volume.diff", "{'from':'d@b','to':'d@a'}", CAIRN_E_INVALID,
         "not older");
  fails ("volume.diff", "{'from':'d@a','to':'e'}", CAIRN_E_INVALID,
         "not states of one volume");
  fails ("volume.diff", "{'from':'d@nope','to':'d'}", CAIRN_E_NOT_FOUND,
         "no snapshot named 'nope'");
  fails ("volume.diff", "{'from':'d@a'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"to\"");
  fails ("volume.diff", "{'from':'d@a','to':'d','max_runs':0}",
         CONTROL_E_INVALID_PARAMS, "\"max_runs\" must be a positive integer");
  fails ("volume.diff", "{'from':'d@a','to':'d','max_runs':100001}",
         CONTROL_E_INVALID_PARAMS, "at most 100000");
}

Test (methods, snapshot_space)
{
  json_t *res;

  ok_ ("volume.create", "{'name':'d','size':'1M'}");
  write_data ("d", 0, 12288, 1);
  ok_ ("snapshot.create", "{'volume':'d','name':'s'}");
  res = ok ("snapshot.space", "{'volume':'d','name':'s'}");
  cr_assert_str_eq (jstr (res, "name"), "d@s");
  cr_assert_eq (jint (res, "referenced"), 12288);
  cr_assert_eq (jint (res, "unique"), 0);
  cr_assert_eq (jint (res, "written_since"), 0);
  json_decref (res);

  /* Overwriting a block leaves the old one to the snapshot alone (and
   * the metadata nodes that map it: the engine counts them in "unique",
   * which is what deleting the snapshot frees).
   */
  write_data ("d", 4096, 4096, 2);
  res = ok ("snapshot.space", "{'volume':'d','name':'s'}");
  cr_assert_eq (jint (res, "referenced"), 12288);
  cr_assert_geq (jint (res, "unique"), 4096);
  cr_assert_eq (jint (res, "unique") % 4096, 0);
  cr_assert_eq (jint (res, "written_since"), 4096);
  json_decref (res);

  fails ("snapshot.space", "{'volume':'d','name':'nope'}", CAIRN_E_NOT_FOUND,
         "no snapshot named 'nope'");
  fails ("snapshot.space", "{'volume':'nope','name':'s'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nope'");
  fails ("snapshot.space", "{'volume':'d'}", CONTROL_E_INVALID_PARAMS,
         "missing member \"name\"");
}

Test (methods, pool_status)
{
  json_t *res, *cache;

  ok_ ("volume.create", "{'name':'a','size':'1M'}");
  ok_ ("volume.create", "{'name':'b','size':'1M'}");
  ok_ ("snapshot.create", "{'volumes':['a','b'],'name':'s'}");
  res = ok ("pool.status", NULL);
  cr_assert_eq (strlen (jstr (res, "uuid")), 36);
  cr_assert_geq (jint (res, "generation"), 2);
  cr_assert_gt (jint (res, "open_generation"), jint (res, "generation"));
  cr_assert_eq (jint (res, "size"), (json_int_t) POOL_SIZE);
  cr_assert_eq (jint (res, "block_size"), 4096);
  cr_assert_eq (jint (res, "node_size"), 16384);
  cr_assert_gt (jint (res, "used"), 0);
  cr_assert_eq (jint (res, "data_size"),
                jint (res, "used") + jint (res, "free") +
                jint (res, "pending"));
  cr_assert_gt (jint (res, "reserve"), 0);
  cr_assert_geq (jint (res, "free_runs"), 1);
  cr_assert_geq (jint (res, "space_map_bytes"),
                 jint (res, "free_runs") * (json_int_t) (4 * sizeof (uint64_t)));
  /* Every used or pending block lies below the high water. */
  cr_assert_geq (jint (res, "high_water"),
                 jint (res, "used") + jint (res, "pending"));
  cr_assert_leq (jint (res, "high_water"), jint (res, "data_size"));
  cr_assert_eq (jint (res, "volumes"), 2);
  cr_assert_eq (jint (res, "snapshots"), 2);
  cr_assert_not (jbool (res, "failed"));
  cr_assert_not (jbool (res, "readonly"));
  /* A memory device has no page cache: every read is checked. */
  cr_assert_str_eq (json_string_value (json_object_get (res, "verify")),
                    "always");
  cr_assert_eq (jint (res, "blocks_trusted"), 0);
  cr_assert_eq (jint (res, "read_ahead"), 0);
  cache = json_object_get (res, "cache");
  cr_assert (json_is_object (cache));
  cr_assert_gt (jint (cache, "nodes"), 0);
  cr_assert_eq (jint (cache, "csum_errors"), 0);
  json_decref (res);
  json_decref (ok ("pool.status", "{}"));
}

/* What a method that fails on the device does: the engine error code, and
 * no change.  A fault device under the pool fails every write.
 */
Test (faults, io_error_changes_nothing)
{
  struct cairn_dev *mem, *fault;
  struct control_reply rep;
  json_t *res;

  cr_assert_eq (dev_mem_create (POOL_SIZE, &mem), 0);
  cr_assert_eq (pool_format (mem, NULL, NULL), 0);
  cr_assert_eq (dev_fault_create (mem, &fault), 0);
  cr_assert_eq (pool_open (fault, NULL, &pool), 0, "%s", cairn_errmsg ());
  mctx.pool = pool;
  ok_ ("volume.create", "{'name':'a','size':'1M'}");

  dev_fault_set (fault, DEV_FAULT_WRITE, 1, true, -EIO);
  call ("volume.create", "{'name':'b','size':'1M'}", &rep);
  cr_assert_eq (rep.kind, CONTROL_REPLY_ERROR);
  cr_assert_eq (rep.code, CAIRN_E_IO, "code %d: %s", rep.code, rep.message);
  cr_assert_str_eq (rep.name, "io");
  control_reply_free (&rep);
  res = ok ("pool.status", NULL);
  cr_assert (jbool (res, "failed"));
  json_decref (res);
  pool_close (pool);
  dev_close (fault);

  /* Reopened, the pool holds what was durable: a, not b. */
  cr_assert_eq (pool_open (mem, NULL, &pool), 0, "%s", cairn_errmsg ());
  mctx.pool = pool;
  assert_names (true, "a");
  cr_assert_eq (pool_close (pool), 0);
  dev_close (mem);
}

/* ---------------------------------------------------------------- stats */

/* vol_extents callback that keeps nothing. */
static int
no_extent (void *opaque, uint64_t off, uint64_t len, unsigned type)
{
  return 0;
}

/* The statistics methods: zeros before any I/O, exactly what tracked
 * handles did (live and after they close), untracked handles (send, diff)
 * not counted, snapshots by either name as one export, pool.status's "io"
 * equal to the total, and their errors.
 */
Test (methods, stats)
{
  struct cairn_volume *v, *s1, *s2, *other;
  uint8_t buf[8192] = { 7 };
  json_t *res, *x, *io;
  char params[128];
  uint64_t gen;

  ok_ ("volume.create", "{'name':'db','size':1048576}");
  res = ok ("stats.list", NULL);
  cr_assert_eq (json_array_size (json_object_get (res, "exports")), 0);
  cr_assert_eq (jint (json_object_get (res, "total"), "writes"), 0);
  json_decref (res);
  res = ok ("stats.show", "{'export':'db'}");
  cr_assert_str_eq (jstr (res, "name"), "db");
  cr_assert_eq (jint (res, "reads"), 0);
  cr_assert_eq (jint (res, "connections"), 0);
  cr_assert (!jbool (res, "gone"));
  json_decref (res);

  cr_assert_eq (vol_open (pool, "db", &v), 0);
  cr_assert_eq (vol_stats_track (v, "db"), 0);
  cr_assert_eq (vol_open (pool, "db", &other), 0);      /* not tracked */
  cr_assert_eq (vol_pwrite (v, buf, 8192, 0, VOL_FUA), 0);
  cr_assert_eq (vol_pwrite (v, buf, 100, 10000, 0), 0);
  cr_assert_eq (vol_pread (v, buf, 4096, 0), 0);
  cr_assert_eq (vol_zero (v, 4096, 65536, VOL_MORE), 0);
  cr_assert_eq (vol_zero (v, 4096, 69632, 0), 0);
  cr_assert_eq (vol_trim (v, 4096, 131072, 0), 0);
  cr_assert_eq (vol_flush (v), 0);
  cr_assert_eq (vol_cache (v, 8192, 0, 0), 0);
  cr_assert_eq (vol_pread (other, buf, 4096, 0), 0);
  cr_assert_eq (vol_pread (v, buf, 4096, 1048576), -EINVAL);

  res = ok ("stats.show", "{'export':'db'}");
  cr_assert_eq (jint (res, "connections"), 1);
  cr_assert_eq (jint (res, "writes"), 2);
  cr_assert_eq (jint (res, "bytes_written"), 8192 + 100);
  cr_assert_eq (jint (res, "reads"), 1);
  cr_assert_eq (jint (res, "bytes_read"), 4096);
  cr_assert_eq (jint (res, "zeros"), 1, "one request in two pieces");
  cr_assert_eq (jint (res, "trims"), 1);
  cr_assert_eq (jint (res, "flushes"), 1, "FUA is no flush request");
  cr_assert_eq (jint (res, "caches"), 1);
  cr_assert_eq (jint (res, "extents"), 0);
  cr_assert_eq (jint (res, "errors"), 1);
  cr_assert_eq (jint (res, "checksum_errors"), 0);
  json_decref (res);
  vol_close (v);
  vol_close (other);
  res = ok ("stats.show", "{'export':'db'}");
  cr_assert_eq (jint (res, "connections"), 0);
  cr_assert_eq (jint (res, "writes"), 2, "folded when the handle closed");
  json_decref (res);

  /* A snapshot opened by its name and by its generation is one export. */
  ok_ ("snapshot.create", "{'volume':'db','name':'s1'}");
  res = ok ("volume.show", "{'name':'db@s1'}");
  gen = (uint64_t) jint (res, "generation");
  json_decref (res);
  snprintf (params, sizeof params, "db@#%" PRIu64, gen);
  cr_assert_eq (vol_open (pool, "db@s1", &s1), 0);
  cr_assert_eq (vol_stats_track (s1, "db@s1"), 0);
  cr_assert_eq (vol_open (pool, params, &s2), 0);
  cr_assert_eq (vol_stats_track (s2, params), 0);
  cr_assert_eq (vol_pread (s1, buf, 4096, 0), 0);
  cr_assert_eq (vol_pread (s2, buf, 8192, 0), 0);
  cr_assert_eq (vol_extents (s2, 8192, 0, no_extent, NULL), 0);
  vol_close (s1);
  res = ok ("stats.list", "{}");
  x = json_array_get (json_object_get (res, "exports"), 1);
  cr_assert_eq (json_array_size (json_object_get (res, "exports")), 2);
  cr_assert_str_eq (jstr (x, "name"), "db@s1");
  cr_assert_eq (jint (x, "generation"), (json_int_t) gen);
  cr_assert_eq (jint (x, "reads"), 2);
  cr_assert_eq (jint (x, "bytes_read"), 4096 + 8192);
  cr_assert_eq (jint (x, "extents"), 1);
  cr_assert_eq (jint (x, "connections"), 1);
  cr_assert_eq (jint (json_object_get (res, "total"), "reads"), 3);
  cr_assert_eq (jint (json_object_get (res, "total"), "writes"), 2);
  io = ok ("pool.status", NULL);
  cr_assert (json_equal (json_object_get (io, "io"),
                         json_object_get (res, "total")),
             "pool.status io is not the total");
  json_decref (io);
  json_decref (res);
  vol_close (s2);

  /* Renamed, it keeps its statistics; deleted, it is marked gone. */
  ok_ ("volume.rename", "{'name':'db','to':'db2'}");
  res = ok ("stats.show", "{'export':'db2'}");
  cr_assert_eq (jint (res, "writes"), 2);
  json_decref (res);
  ok_ ("volume.delete", "{'name':'db2','recursive':true}");
  res = ok ("stats.list", NULL);
  x = json_array_get (json_object_get (res, "exports"), 0);
  cr_assert_str_eq (jstr (x, "name"), "db2");
  cr_assert (jbool (x, "gone"));
  cr_assert_eq (jint (json_object_get (res, "total"), "reads"), 3);
  json_decref (res);

  fails ("stats.show", "{'export':'db2'}", CAIRN_E_NOT_FOUND,
         "no volume named 'db2'");
  fails ("stats.show", "{'export':'nosuch@snap'}", CAIRN_E_NOT_FOUND,
         "no volume named 'nosuch'");
  fails ("stats.show", "{}", CONTROL_E_INVALID_PARAMS,
         "missing member \"export\"");
  fails ("stats.show", "{'export':1}", CONTROL_E_INVALID_PARAMS,
         "\"export\" must be a string");
  fails ("stats.list", "{'export':'x'}", CONTROL_E_INVALID_PARAMS,
         "takes no params");
}

/* A checksum failure counts one error and one checksum error, not a read. */
Test (methods, stats_checksum_failure)
{
  struct cairn_volume *v;
  uint8_t data[4096], buf[4096];
  uint64_t addr = 0;
  json_t *res;

  memset (data, 0x5c, sizeof data);
  ok_ ("volume.create", "{'name':'db','size':1048576}");
  cr_assert_eq (vol_open (pool, "db", &v), 0);
  cr_assert_eq (vol_stats_track (v, "db"), 0);
  cr_assert_eq (vol_pwrite (v, data, 4096, 0, VOL_FUA), 0);
  for (uint64_t off = POOL_DATA_START; off < POOL_SIZE; off += 4096) {
    cr_assert_eq (dev_pread (dev, buf, 4096, off), 0);
    if (memcmp (buf, data, 4096) == 0) {
      addr = off;
      break;
    }
  }
  cr_assert_neq (addr, 0);
  buf[7] ^= 0x80;
  cr_assert_eq (dev_pwrite (dev, buf, 4096, addr), 0);
  cr_assert_eq (vol_pread (v, buf, 4096, 0), -EIO);
  cr_assert_eq (vol_cache (v, 4096, 0, 0), -EIO);
  res = ok ("stats.show", "{'export':'db'}");
  cr_assert_eq (jint (res, "reads"), 0);
  cr_assert_eq (jint (res, "caches"), 0);
  cr_assert_eq (jint (res, "errors"), 2);
  cr_assert_eq (jint (res, "checksum_errors"), 2);
  json_decref (res);
  /* Put the block back so that the pool is clean for fsck. */
  cr_assert_eq (dev_pwrite (dev, data, 4096, addr), 0);
  vol_close (v);
}
