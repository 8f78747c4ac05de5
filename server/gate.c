/* Cairn control server: the grants gate every request goes through
 * (cairn-grants(5); grants.c decides, this file applies it to methods).
 *
 * Before a handler runs, each parameter of its method that names a volume,
 * snapshot or export is judged against the caller's grants:
 *
 *  1. A name the caller may not use at all (no operation, no NBD access)
 *     is "not found" (-ENOENT, the catalog's own words), exactly as for a
 *     name that does not exist: names never leak through a refusal.
 *  2. A name it may see but not use this way is refused (-EPERM), saying
 *     which operation the grants lack.
 *  3. A name being created (volume.create, a clone's or a receive's new
 *     name, rename's target) needs the operation on its prefix; refused
 *     with -EPERM whether or not it exists, so that says nothing either.
 *
 * After a listing method ran, its result is filtered: array elements that
 * name something invisible are dropped, and a clone's origin that is
 * invisible becomes null.  A method the table does not know is for the
 * server's administrator only (default deny), so a method added later is
 * closed until someone decides who may call it.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "control-int.h"

/* How a method is gated. */
enum {
  G_ANYONE = 1,   /* no names, nothing secret (server.ping) */
  G_ADMIN = 2,    /* the server's administrator only */
  G_FILTER = 4,   /* filter the result (listings) */
  G_AUDIT = 8,    /* a change: recorded in the audit trail (audit.c) */
};

/* A parameter naming a volume: any of ops lets it through. */
struct gate_arg {
  const char *param;
  unsigned ops;
  enum {
    A_NAME,       /* an existing name */
    A_CREATES,    /* a new name (rule 3) */
    A_BASE,       /* a stream's base: "SNAP" is a snapshot of the first
                     parameter's volume, "VOL@SNAP" names its own */
  } kind;
};

struct gate {
  const char *method;
  unsigned flags;
  struct gate_arg args[3];
};

#define LIST GRANT_OP_LIST
#define SNAP GRANT_OP_SNAPSHOT
static const struct gate gates[] = {
  { "server.ping", G_ANYONE, { { 0 } } },
  { "server.version", G_ANYONE, { { 0 } } },
  { "server.methods", G_ANYONE, { { 0 } } },
  { "volume.list", G_FILTER, { { 0 } } },
  { "stats.list", G_FILTER, { { 0 } } },
  { "job.list", G_FILTER, { { 0 } } },
  { "job.show", G_FILTER, { { 0 } } },
  { "volume.show", G_FILTER, { { "name", ~0u, A_NAME } } },
  { "volume.create", G_AUDIT, { { "name", GRANT_OP_CREATE, A_CREATES } } },
  { "volume.delete", G_AUDIT, { { "name", GRANT_OP_DELETE, A_NAME } } },
  { "volume.rename", G_AUDIT, { { "name", GRANT_OP_CREATE, A_NAME },
                          { "to", GRANT_OP_CREATE, A_CREATES } } },
  { "volume.resize", G_AUDIT, { { "name", GRANT_OP_CREATE, A_NAME } } },
  { "volume.set", G_AUDIT, { { "name", GRANT_OP_CREATE, A_NAME } } },
  { "volume.rollback", G_AUDIT, { { "name", SNAP, A_NAME },
                            { "keep_as", GRANT_OP_CREATE | SNAP, A_CREATES } } },
  { "volume.clone", G_AUDIT, { { "source", GRANT_OP_CLONE, A_NAME },
                         { "name", GRANT_OP_CREATE | GRANT_OP_CLONE, A_CREATES } } },
  { "volume.diff", 0, { { "from", GRANT_OP_SEND, A_NAME },
                        { "to", GRANT_OP_SEND, A_NAME } } },
  { "snapshot.create", G_AUDIT, { { "volume", SNAP, A_NAME },
                            { "volumes", SNAP, A_NAME } } },
  { "snapshot.list", G_FILTER, { { "volume", ~0u, A_NAME } } },
  { "snapshot.delete", G_AUDIT, { { "volume", GRANT_OP_DELETE, A_NAME } } },
  { "snapshot.rename", G_AUDIT, { { "volume", SNAP, A_NAME } } },
  { "snapshot.space", 0, { { "volume", ~0u, A_NAME } } },
  { "checkpoint.list", 0, { { "volume", ~0u, A_NAME } } },
  { "checkpoint.promote", G_AUDIT, { { "checkpoint", SNAP, A_NAME } } },
  { "checkpoint.prune", G_AUDIT, { { "volume", SNAP, A_NAME } } },
  { "stats.show", 0, { { "export", ~0u, A_NAME } } },
  { "stream.send", 0, { { "snapshot", GRANT_OP_SEND, A_NAME },
                        { "from", GRANT_OP_SEND, A_BASE } } },
  { "stream.size", 0, { { "snapshot", GRANT_OP_SEND, A_NAME },
                        { "from", GRANT_OP_SEND, A_BASE } } },
  { "stream.receive", G_AUDIT, { { "volume", GRANT_OP_RECEIVE, A_CREATES } } },
  { "stream.token", 0, { { "volume", GRANT_OP_RECEIVE, A_CREATES } } },
  { "grants.reload", G_ADMIN | G_AUDIT, { { 0 } } },
  { "job.cancel", G_ADMIN | G_AUDIT, { { 0 } } },
  { "checkpoint.set", G_ADMIN | G_AUDIT, { { 0 } } },
  { "device.replace", G_ADMIN | G_AUDIT, { { 0 } } },
  { "device.replace_cancel", G_ADMIN | G_AUDIT, { { 0 } } },
  { "device.replace_status", G_ADMIN, { { 0 } } },
  { "scrub.start", G_ADMIN | G_AUDIT, { { 0 } } },
  { "scrub.pause", G_ADMIN | G_AUDIT, { { 0 } } },
  { "scrub.resume", G_ADMIN | G_AUDIT, { { 0 } } },
  { "scrub.cancel", G_ADMIN | G_AUDIT, { { 0 } } },
  { "scrub.status", G_ADMIN, { { 0 } } },
  { "replicate.push", G_AUDIT,
    { { "snapshot", GRANT_OP_REPLICATE, A_NAME } } },
  { "replicate.pull", G_AUDIT,
    { { "volume", GRANT_OP_REPLICATE, A_CREATES } } },
  { "stream.abort", G_AUDIT, { { "volume", GRANT_OP_RECEIVE, A_CREATES } } },
};
#undef LIST
#undef SNAP

/* Give a request its caller and the grants in force (before it runs). */
void
control_ctx_set_peer (struct control_ctx *ctx, struct grants_store *grants,
                      const struct grant_peer *who)
{
  ctx->grants = grants;
  ctx->peer = *who;
  if (who->psk_identity || who->x509_name) {
    snprintf (ctx->peer_ident, sizeof ctx->peer_ident, "%s",
              who->psk_identity ? who->psk_identity : who->x509_name);
    if (who->psk_identity)
      ctx->peer.psk_identity = ctx->peer_ident;
    else
      ctx->peer.x509_name = ctx->peer_ident;
  }
}

/* Is the request's caller the server's administrator? */
bool
control_ctx_is_admin (struct control_ctx *ctx)
{
  return ctx->grants == NULL || grants_store_is_admin (ctx->grants, &ctx->peer);
}

/* May the caller see name at all (any operation, or NBD access)? */
static bool
visible (struct control_ctx *ctx, const char *name)
{
  return grants_store_ops (ctx->grants, &ctx->peer, name) != 0 ||
    grants_store_nbd (ctx->grants, &ctx->peer, name) != GRANT_NBD_NONE;
}

/* visible () for handlers (control.h). */
bool
control_ctx_may_see (struct control_ctx *ctx, const char *name)
{
  return ctx->grants == NULL || visible (ctx, name);
}

/* The name of the first operation in ops, for messages. */
static const char *
op_name (unsigned ops)
{
  static const char *const names[] = {
    "list", "create", "snapshot", "clone", "delete", "send", "receive",
    "replicate", "admin",
  };

  for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
    if (ops & (1u << i))
      return names[i];
  return "admin";
}

/* Judge one name against one argument's rule (1 to 3 above). */
static int
judge (struct control_ctx *ctx, const struct gate_arg *a, const char *name)
{
  unsigned have = grants_store_ops (ctx->grants, &ctx->peer, name);
  char who[300];

  if (have & a->ops)
    return 0;
  grants_peer_name (&ctx->peer, who, sizeof who);
  if (a->kind != A_CREATES && !visible (ctx, name))
    return cairn_fail (-ENOENT, "no volume named '%.*s'",
                       (int) strcspn (name, "@"), name);
  return cairn_fail (-EPERM, "not permitted: the grants give %s no '%s' "
                     "on '%s' (cairn-grants(5))", who, op_name (a->ops),
                     name);
}

/* Find the gate of a method, or NULL. */
static const struct gate *
find_gate (const char *method)
{
  for (size_t i = 0; i < sizeof gates / sizeof gates[0]; i++)
    if (strcmp (gates[i].method, method) == 0)
      return &gates[i];
  return NULL;
}

/* Judge a stream's base (A_BASE): "SNAP" is a snapshot of the
 * volume that first (the first parameter's value, or NULL) names, so it
 * is judged as that volume.
 */
static int
judge_relative (struct control_ctx *ctx, const struct gate_arg *a,
                const char *first, const char *name)
{
  return judge (ctx, a, first && !strchr (name, '@') ? first : name);
}

/* Before the handler: may the caller make this request? */
int
control_gate_check (struct control_ctx *ctx)
{
  const struct gate *g;
  json_t *params = ctx->req.params;

  if (ctx->grants == NULL)
    return 0;
  g = find_gate (ctx->method->name);
  if (g && (g->flags & G_ANYONE))
    return 0;
  if (control_ctx_is_admin (ctx))
    return 0;
  if (g == NULL || (g->flags & G_ADMIN)) {
    char who[300];

    grants_peer_name (&ctx->peer, who, sizeof who);
    return cairn_fail (-EPERM, "not permitted: %s is for the server's "
                       "administrator, and the grants do not make %s one "
                       "(cairn-grants(5))", ctx->method->name, who);
  }
  for (size_t i = 0; i < 3 && g->args[i].param; i++) {
    json_t *v = json_is_object (params)
      ? json_object_get (params, g->args[i].param) : NULL;
    size_t k;
    json_t *e;
    int r;

    if (json_is_string (v) && g->args[i].kind == A_BASE) {
      r = judge_relative (ctx, &g->args[i], json_string_value
                          (json_object_get (params, g->args[0].param)),
                          json_string_value (v));
      if (r < 0)
        return r;
    }
    else if (json_is_string (v)) {
      r = judge (ctx, &g->args[i], json_string_value (v));
      if (r < 0)
        return r;
    }
    else if (json_is_array (v))
      json_array_foreach (v, k, e)
        if (json_is_string (e) &&
            (r = judge (ctx, &g->args[i], json_string_value (e))) < 0)
          return r;
  }
  return 0;
}

/* Does element e of a listing name something invisible? */
static bool
names_invisible (struct control_ctx *ctx, json_t *e)
{
  static const char *const keys[] = { "name", "export", "volume", "what" };

  if (json_is_string (e))
    return !visible (ctx, json_string_value (e));
  if (!json_is_object (e))
    return false;
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *v = json_object_get (e, keys[i]);

    if (json_is_string (v))
      return !visible (ctx, json_string_value (v));
  }
  return false;
}

/* Filter v in place: drop invisible elements of arrays, null invisible
 * origins.
 */
static void
filter (struct control_ctx *ctx, json_t *v)
{
  const char *key;
  json_t *m;
  size_t i;

  if (json_is_array (v)) {
    for (i = json_array_size (v); i-- > 0;) {
      if (names_invisible (ctx, json_array_get (v, i)))
        json_array_remove (v, i);
      else
        filter (ctx, json_array_get (v, i));
    }
  }
  else if (json_is_object (v)) {
    json_object_foreach (v, key, m) {
      if (strcmp (key, "origin") == 0 && json_is_string (m) &&
          !visible (ctx, json_string_value (m)))
        json_object_set_new (v, key, json_null ());
      else
        filter (ctx, m);
    }
  }
}

/* After the handler: filter a listing's result; a single object (job.show)
 * about something invisible is "not found".
 */
int
control_gate_filter (struct control_ctx *ctx, json_t *result)
{
  const struct gate *g;

  if (ctx->grants == NULL || result == NULL || control_ctx_is_admin (ctx))
    return 0;
  g = find_gate (ctx->method->name);
  if (g && (g->flags & G_FILTER)) {
    if (strcmp (g->method, "job.show") == 0 && names_invisible (ctx, result))
      return cairn_fail (-ENOENT, "no job with that id: job.list shows the "
                         "jobs");
    filter (ctx, result);
  }
  if (json_is_object (result) && json_is_array (json_object_get (result,
                                                                 "damaged")))
    json_array_clear (json_object_get (result, "damaged"));
  return 0;
}

/* Record a change in the audit trail: the first name it was about (the
 * first string among the gate's parameters), and how it ended.
 */
void
control_gate_audit (struct control_ctx *ctx, int err, const char *message)
{
  const struct gate *g = find_gate (ctx->method->name);
  json_t *params = ctx->req.params;
  const char *target = NULL;

  if (g == NULL || !(g->flags & G_AUDIT))
    return;
  for (size_t i = 0; target == NULL && i < 3 && g->args[i].param; i++) {
    json_t *v = json_is_object (params)
      ? json_object_get (params, g->args[i].param) : NULL;

    if (json_is_string (v))
      target = json_string_value (v);
    else if (json_is_array (v) && json_is_string (json_array_get (v, 0)))
      target = json_string_value (json_array_get (v, 0));
  }
  control_audit_record (ctx, target, err, message);
}

/* grants.reload → {"file": PATH, "rules": N}: read the grants file again;
 * a file that does not parse leaves the grants in force.
 */
static int
grants_reload (struct control_ctx *ctx, json_t *params, json_t **result)
{
  size_t n;
  int r;

  (void) params;
  if (ctx->grants == NULL)
    return cairn_fail (-EINVAL, "this server has no grants file to reload: "
                       "start it with grants=FILE (cairnd --grants FILE)");
  r = grants_store_reload (ctx->grants, &n);
  if (r < 0) {
    char why[800];

    snprintf (why, sizeof why, "%s", cairn_errmsg ());
    return cairn_fail (r, "%s; the grants in force are unchanged", why);
  }
  *result = json_pack ("{s:s, s:I}", "file", grants_store_path (ctx->grants),
                       "rules", (json_int_t) n);
  return *result ? 0 : cairn_fail (-ENOMEM, "out of memory");
}

static const struct control_method grants_methods[] = {
  { .name = "grants.reload", .handler = grants_reload, .blocking = true },
};

const struct control_method_table control_grants_methods = {
  .methods = grants_methods,
  .n = sizeof grants_methods / sizeof grants_methods[0],
};
