/* Cairn control server: the audit trail of changes made through control.
 *
 * Every request of a method that changes something (gate.c marks them:
 * create, delete, rename, resize, set, rollback, clone, snapshots,
 * checkpoints, receive, replication, job.cancel, grants.reload) is
 * recorded when it ends, refused or not: the time, the principal (as
 * grants_peer_name names it), the method, the name it was about and the
 * outcome.  A record goes to the server log (control_config.audit) and
 * to a bounded ring in memory (CONTROL_AUDIT_RING records; the oldest
 * are dropped and counted), which "audit.list" returns to the
 * administrator.  Workers record from their threads: the ring has a lock.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control-int.h"

void
control_audit_init (struct control_audit *a)
{
  pthread_mutex_init (&a->lock, NULL);
  a->head = a->n = 0;
  a->dropped = 0;
}

void
control_audit_destroy (struct control_audit *a)
{
  pthread_mutex_destroy (&a->lock);
}

/* Record how a request ended (err 0, or a negative errno with message)
 * and log it.
 */
void
control_audit_record (struct control_ctx *ctx, const char *target, int err,
                      const char *message)
{
  struct control_audit *a = ctx->audit;
  struct control_audit_entry e = { .time = time (NULL) };
  char line[sizeof e.principal + sizeof e.method + sizeof e.target +
            sizeof e.outcome + 64];
  struct tm tm;
  char when[32];

  if (a == NULL)
    return;
  grants_peer_name (&ctx->peer, e.principal, sizeof e.principal);
  snprintf (e.method, sizeof e.method, "%s", ctx->method->name);
  snprintf (e.target, sizeof e.target, "%s", target ? target : "");
  if (err == 0)
    snprintf (e.outcome, sizeof e.outcome, "ok");
  else
    snprintf (e.outcome, sizeof e.outcome, "failed (%s): %s",
              control_error_name (control_error_code (err)),
              message ? message : "");
  pthread_mutex_lock (&a->lock);
  a->ring[(a->head + a->n) % CONTROL_AUDIT_RING] = e;
  if (a->n < CONTROL_AUDIT_RING)
    a->n++;
  else {
    a->head = (a->head + 1) % CONTROL_AUDIT_RING;
    a->dropped++;
  }
  pthread_mutex_unlock (&a->lock);
  if (a->log) {
    gmtime_r (&e.time, &tm);
    strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf (line, sizeof line, "%s %s %s %s: %s", when, e.principal,
              e.method, e.target[0] ? e.target : "-", e.outcome);
    a->log (a->opaque, line);
  }
}

/* audit.list → {"entries": [{"time", "principal", "method", "target",
 * "outcome"}, ...] oldest first, "dropped": N}
 */
static int
audit_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  struct control_audit *a = ctx->audit;
  json_t *arr = json_array ();
  uint64_t dropped;
  int r = 0;

  (void) params;
  if (arr == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  if (a == NULL) {
    json_decref (arr);
    return cairn_fail (-ENOTSUP, "the audit trail lives in a running server: "
                       "there is none with --pool");
  }
  pthread_mutex_lock (&a->lock);
  for (size_t i = 0; r == 0 && i < a->n; i++) {
    const struct control_audit_entry *e =
      &a->ring[(a->head + i) % CONTROL_AUDIT_RING];
    char when[32];
    struct tm tm;

    gmtime_r (&e->time, &tm);
    strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (json_array_append_new (arr, json_pack ("{s:s, s:s, s:s, s:s, s:s}",
                                               "time", when,
                                               "principal", e->principal,
                                               "method", e->method,
                                               "target", e->target,
                                               "outcome", e->outcome)) < 0)
      r = cairn_fail (-ENOMEM, "out of memory");
  }
  dropped = a->dropped;
  pthread_mutex_unlock (&a->lock);
  if (r == 0)
    *result = json_pack ("{s:o, s:I}", "entries", arr,
                         "dropped", (json_int_t) dropped);
  else
    json_decref (arr);
  if (r == 0 && *result == NULL)
    r = cairn_fail (-ENOMEM, "out of memory");
  return r;
}

static const struct control_method audit_methods[] = {
  { .name = "audit.list", .handler = audit_list },
};

const struct control_method_table control_audit_methods = {
  .methods = audit_methods,
  .n = sizeof audit_methods / sizeof audit_methods[0],
};
