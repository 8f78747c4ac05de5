/* Cairn control server: from a request line to a reply line.
 *
 * This is the one code path every method goes through, whether the
 * request came over a socket (control.c) or from `cairn --pool PATH` in
 * the same process (control_call_local).  It knows nothing of sockets,
 * threads or libuv.
 */
#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control-int.h"

/* ------------------------------------------------------------ registry */

/* Order methods by name, for qsort and bsearch. */
static int
method_cmp (const void *a, const void *b)
{
  const struct control_method *const *ma = a;
  const struct control_method *const *mb = b;

  return strcmp ((*ma)->name, (*mb)->name);
}

/* Add one table's methods to the array being built. */
static int
registry_add (struct control_registry *reg,
              const struct control_method_table *t)
{
  for (size_t i = 0; i < t->n; i++) {
    const struct control_method *m = &t->methods[i];

    if (m->name == NULL || m->name[0] == '\0' || m->handler == NULL)
      return cairn_fail (-EINVAL, "control method table entry %zu has no "
                         "name or no handler", i);
    reg->methods[reg->n++] = m;
  }
  return 0;
}

/* Build the registry: built-ins first, then each table, sorted. */
int
control_registry_new (const struct control_method_table *tables,
                      size_t n_tables, struct control_registry **out)
{
  struct control_registry *reg;
  size_t total = control_builtin_methods.n + control_job_methods.n +
    control_grants_methods.n + control_audit_methods.n;
  int r;

  for (size_t i = 0; i < n_tables; i++)
    total += tables[i].n;
  reg = calloc (1, sizeof *reg);
  if (reg == NULL)
    return cairn_fail (-ENOMEM, "out of memory for the control methods");
  reg->methods = calloc (total, sizeof *reg->methods);
  if (reg->methods == NULL && total > 0) {
    free (reg);
    return cairn_fail (-ENOMEM, "out of memory for the control methods");
  }

  r = registry_add (reg, &control_builtin_methods);
  if (r == 0)
    r = registry_add (reg, &control_job_methods);
  if (r == 0)
    r = registry_add (reg, &control_grants_methods);
  if (r == 0)
    r = registry_add (reg, &control_audit_methods);
  for (size_t i = 0; r == 0 && i < n_tables; i++)
    r = registry_add (reg, &tables[i]);
  if (r == 0) {
    qsort (reg->methods, reg->n, sizeof *reg->methods, method_cmp);
    for (size_t i = 1; i < reg->n; i++)
      if (strcmp (reg->methods[i - 1]->name, reg->methods[i]->name) == 0) {
        r = cairn_fail (-EEXIST, "control method \"%s\" is defined twice",
                        reg->methods[i]->name);
        break;
      }
  }
  if (r < 0) {
    control_registry_free (reg);
    return r;
  }
  *out = reg;
  return 0;
}

/* Free the registry (the methods belong to their modules). */
void
control_registry_free (struct control_registry *reg)
{
  if (reg == NULL)
    return;
  free (reg->methods);
  free (reg);
}

/* Look a method up by name. */
const struct control_method *
control_registry_find (const struct control_registry *reg, const char *name)
{
  struct control_method key = { .name = name };
  const struct control_method *kp = &key;
  const struct control_method **m;

  m = bsearch (&kp, reg->methods, reg->n, sizeof *reg->methods, method_cmp);
  return m ? *m : NULL;
}

/* ------------------------------------------------------------ requests */

/* True if the line holds only whitespace (blank lines are ignored, so that
 * people can type at the socket).
 */
static bool
blank_line (const char *line, size_t len)
{
  for (size_t i = 0; i < len; i++)
    if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
      return false;
  return true;
}

/* Parse a line and find its method. */
int
control_prepare (const struct control_registry *reg, void *opaque,
                 const char *line, size_t len, struct control_ctx **ctxp,
                 char **reply, size_t *reply_len)
{
  struct control_ctx *ctx;
  char msg[256];

  *ctxp = NULL;
  *reply = NULL;
  if (blank_line (line, len))
    return 0;

  ctx = calloc (1, sizeof *ctx);
  if (ctx == NULL)
    return -ENOMEM;
  ctx->reg = reg;
  ctx->opaque = opaque;

  if (control_parse_request (line, len, &ctx->req) < 0) {
    *reply = control_format_error (ctx->req.id, ctx->req.code,
                                   ctx->req.message, reply_len);
    control_ctx_free (ctx);
    return *reply ? 0 : -ENOMEM;
  }

  ctx->method = control_registry_find (reg, ctx->req.method);
  if (ctx->method == NULL) {
    /* A notification never gets a reply, not even an error. */
    if (ctx->req.id != NULL) {
      snprintf (msg, sizeof msg, "no method \"%.64s\": \"server.methods\" "
                "lists the methods of this server", ctx->req.method);
      *reply = control_format_error (ctx->req.id, CONTROL_E_METHOD_NOT_FOUND,
                                     msg, reply_len);
      if (*reply == NULL) {
        control_ctx_free (ctx);
        return -ENOMEM;
      }
    }
    control_ctx_free (ctx);
    return 0;
  }

  *ctxp = ctx;
  return 0;
}

/* Call the handler. */
void
control_ctx_run (struct control_ctx *ctx)
{
  json_t *result = NULL;
  int r;

  cairn_error_clear ();
  r = control_gate_check (ctx);
  if (r == 0)
    r = ctx->method->handler (ctx, ctx->req.params, &result);
  if (r == 0)
    r = control_gate_filter (ctx, result);
  control_gate_audit (ctx, r, r < 0 ? cairn_errmsg () : NULL);
  control_ctx_end (ctx);
  if (r < 0) {
    json_decref (result);
    control_ctx_fail (ctx, r, cairn_errmsg ());
  }
  else
    ctx->result = result;
}

/* Record an error for the reply. */
void
control_ctx_fail (struct control_ctx *ctx, int err, const char *message)
{
  ctx->err = err;
  snprintf (ctx->message, sizeof ctx->message, "%s", message ? message : "");
}

/* Format the reply to a request that ran. */
int
control_ctx_reply (struct control_ctx *ctx, char **reply, size_t *len)
{
  int code;

  *reply = NULL;
  if (ctx->req.id == NULL)
    return 0;

  if (ctx->err == 0) {
    *reply = control_format_result (ctx->req.id, ctx->result, len);
    if (*reply)
      return 0;
    /* Out of memory, or a result jansson cannot encode: a bug either way. */
    control_ctx_fail (ctx, -ENOMEM, "the reply of the method could not be "
                      "encoded (out of memory?)");
  }

  code = ctx->code ? ctx->code : control_error_code (ctx->err);
  if (code == CONTROL_E_INTERNAL && ctx->message[0] == '\0')
    snprintf (ctx->message, sizeof ctx->message, "internal error in the "
              "Cairn server (%s): please report it with the server log",
              strerror (-ctx->err));
  *reply = control_format_error_data (ctx->req.id, code, ctx->message,
                                      ctx->error_data, len);
  return *reply ? 0 : -ENOMEM;
}

/* Free the request and its result. */
void
control_ctx_free (struct control_ctx *ctx)
{
  if (ctx == NULL)
    return;
  control_request_free (&ctx->req);
  json_decref (ctx->result);
  json_decref (ctx->error_data);
  free (ctx->sbuf);
  free (ctx);
}

/* ------------------------------------------------------------ handler API */

/* The config's opaque pointer. */
void *
control_ctx_opaque (const struct control_ctx *ctx)
{
  return ctx->opaque;
}

/* Whether the server or the client has gone away. */
bool
control_ctx_cancelled (const struct control_ctx *ctx)
{
  for (size_t i = 0; i < ARRAY_SIZE (ctx->cancel); i++)
    if (ctx->cancel[i] && atomic_load (ctx->cancel[i]))
      return true;
  return false;
}

/* Refuse the params with -32602. */
int
control_invalid_params (struct control_ctx *ctx, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  cairn_verror (fmt, ap);
  va_end (ap);
  ctx->code = CONTROL_E_INVALID_PARAMS;
  return -EINVAL;
}

/* ------------------------------------------------------------ in-process */

/* Answer one request line without a server. */
int
control_call_local (const struct control_config *cfg, const char *line,
                    size_t len, char **reply, size_t *reply_len)
{
  struct control_registry *reg;
  struct control_ctx *ctx;
  int r;

  *reply = NULL;
  r = control_registry_new (cfg->tables, cfg->n_tables, &reg);
  if (r < 0)
    return r;
  r = control_prepare (reg, cfg->opaque, line, len, &ctx, reply, reply_len);
  if (r == 0 && ctx) {
    control_ctx_run (ctx);
    r = control_ctx_reply (ctx, reply, reply_len);
    control_ctx_free (ctx);
  }
  control_registry_free (reg);
  if (r == -ENOMEM)
    cairn_error ("out of memory answering a control request");
  return r;
}
