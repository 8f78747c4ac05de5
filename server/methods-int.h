/* Cairn control server: what the files of the method tables share
 * (methods-catalog.c, methods-stats.c); private to server/.
 */
#ifndef CAIRN_SERVER_METHODS_INT_H
#define CAIRN_SERVER_METHODS_INT_H

#include <stdbool.h>

#include "methods.h"

enum param_type {
  PARAM_STRING,             /* a string */
  PARAM_BOOL,               /* true or false */
  PARAM_SIZE,               /* bytes, or a string with a unit ("10G") */
  PARAM_STRINGS,            /* a non-empty array of strings */
  PARAM_COUNT,              /* a positive integer */
  PARAM_OBJECT,             /* an object */
};

/* A member a method takes. */
struct param {
  const char *name;
  enum param_type type;
  bool required;
};

/* Check params against the members a method takes (spec, n), so that the
 * handler can then read them without further checks: an unknown member, a
 * missing one or a wrong type is "invalid-params", naming the member.
 * NULL params are an empty object.
 */
int check_params (struct control_ctx *ctx, const char *method, json_t *params,
                  const struct param *spec, size_t n) CAIRN_WUR;
/* A string member (checked), or NULL when absent. */
const char *param_str (json_t *params, const char *name);
/* The pool of the request. */
struct cairn_pool *ctx_pool (struct control_ctx *ctx);
/* The error for a result that could not be built (-ENOMEM). */
int oom (void);

/* methods-stats.c: "stats.list" and "stats.show" (cairn-protocol(7)). */
int stats_list (struct control_ctx *ctx, json_t *params, json_t **result)
  CAIRN_WUR;
int stats_show (struct control_ctx *ctx, json_t *params, json_t **result)
  CAIRN_WUR;
/* The pool's I/O totals over every export, as in stats.list's "total",
 * into *out (a new reference).
 */
int stats_pool_totals (struct cairn_pool *pool, json_t **out) CAIRN_WUR;

#endif /* CAIRN_SERVER_METHODS_INT_H */
