/* Cairn control server: the I/O statistics methods (see methods-int.h).
 *
 *   stats.list {}                → {"exports": [EXPORT, ...], "total": IO}
 *   stats.show {"export": NAME}  → EXPORT
 *
 * The engine keeps the counters (engine/volstats.c: why there, and how the
 * data path counts without a lock); these handlers only read them.  An
 * export is described by
 *
 *   {"name": "db@daily", "volume_id": 256, "generation": 7 | 0,
 *    "gone": false, "connections": 1, IO members...}
 *
 * and IO is the counters themselves: "bytes_read", "bytes_written",
 * "reads", "writes", "trims", "zeros", "flushes", "extents", "caches",
 * "errors", "checksum_errors", "bytes_trimmed", "bytes_zeroed" (every
 * byte of the trim and zero requests).  "total" sums every export, gone ones too;
 * pool.status carries it as "io".  Under grants a caller's stats.list has
 * the exports it may see, and "total" sums those only: the I/O of others'
 * volumes, even as a sum, is not its to know (cairn-grants(5)).  Counting starts when the pool is opened
 * (the server's start), so `cairn --pool` in-process has none.
 */
#include <config.h>

#include <errno.h>
#include <stddef.h>

#include "methods-int.h"
#include "volume.h"

/* The counters, in the order they are listed. */
static const struct {
  const char *key;
  size_t off;
} counters[] = {
  { "bytes_read", offsetof (struct vol_stats, bytes_read) },
  { "bytes_written", offsetof (struct vol_stats, bytes_written) },
  { "reads", offsetof (struct vol_stats, reads) },
  { "writes", offsetof (struct vol_stats, writes) },
  { "trims", offsetof (struct vol_stats, trims) },
  { "zeros", offsetof (struct vol_stats, zeros) },
  { "flushes", offsetof (struct vol_stats, flushes) },
  { "extents", offsetof (struct vol_stats, extents) },
  { "caches", offsetof (struct vol_stats, caches) },
  { "errors", offsetof (struct vol_stats, errors) },
  { "checksum_errors", offsetof (struct vol_stats, csum_errors) },
  { "bytes_trimmed", offsetof (struct vol_stats, bytes_trimmed) },
  { "bytes_zeroed", offsetof (struct vol_stats, bytes_zeroed) },
};

/* Set the counters of st as members of obj. */
static int
set_counters (json_t *obj, const struct vol_stats *st)
{
  for (size_t i = 0; i < ARRAY_SIZE (counters); i++) {
    uint64_t v = *(const uint64_t *) ((const char *) st + counters[i].off);

    if (json_object_set_new (obj, counters[i].key,
                             json_integer ((json_int_t) v)) == -1)
      return oom ();
  }
  return 0;
}

/* Add every counter of b into a. */
static void
sum_counters (struct vol_stats *a, const struct vol_stats *b)
{
  for (size_t i = 0; i < ARRAY_SIZE (counters); i++)
    *(uint64_t *) ((char *) a + counters[i].off) +=
      *(const uint64_t *) ((const char *) b + counters[i].off);
}

/* The object describing one export's statistics. */
static json_t *
export_object (const struct vol_export_stats *x)
{
  json_t *obj = json_pack ("{s:s, s:I, s:I, s:b, s:I}",
                           "name", x->name,
                           "volume_id", (json_int_t) x->id,
                           "generation", (json_int_t) x->gen,
                           "gone", (int) x->gone,
                           "connections", (json_int_t) x->opens);

  if (obj && set_counters (obj, &x->st) < 0) {
    json_decref (obj);
    obj = NULL;
  }
  return obj;
}

/* What a listing builds: the exports and their sum. */
struct listing_ctx {
  json_t *exports;          /* NULL: totals only */
  struct vol_stats total;
  struct control_ctx *ctx;  /* whose view (stats.list), or NULL: all */
};

/* vol_stats_list callback: add one export. */
static int
add_export (void *opaque, const struct vol_export_stats *x)
{
  struct listing_ctx *l = opaque;

  if (l->ctx && !control_ctx_may_see (l->ctx, x->name))
    return 0;
  sum_counters (&l->total, &x->st);
  if (l->exports &&
      json_array_append_new (l->exports, export_object (x)) == -1)
    return oom ();
  return 0;
}

/* The sum of l's exports as an object. */
static json_t *
total_object (const struct listing_ctx *l)
{
  json_t *obj = json_object ();

  if (obj == NULL || set_counters (obj, &l->total) < 0) {
    json_decref (obj);
    oom ();
    return NULL;
  }
  return obj;
}

/* The pool's totals (pool.status's "io"). */
int
stats_pool_totals (struct cairn_pool *pool, json_t **out)
{
  struct listing_ctx l = { .exports = NULL };
  int r = vol_stats_list (pool, add_export, &l);

  if (r < 0)
    return r;
  *out = total_object (&l);
  return *out ? 0 : -ENOMEM;
}

/* stats.list {} → every export with I/O since the start, and the total */
int
stats_list (struct control_ctx *ctx, json_t *params, json_t **result)
{
  struct listing_ctx l = { .exports = json_array (), .ctx = ctx };
  json_t *total;
  int r = check_params (ctx, "stats.list", params, NULL, 0);

  if (r == 0 && l.exports == NULL)
    r = oom ();
  if (r == 0)
    r = vol_stats_list (ctx_pool (ctx), add_export, &l);
  if (r < 0) {
    json_decref (l.exports);
    return r;
  }
  total = total_object (&l);
  if (total == NULL) {
    json_decref (l.exports);
    return -ENOMEM;
  }
  *result = json_pack ("{s:o, s:o}", "exports", l.exports, "total", total);
  return *result ? 0 : oom ();
}

/* stats.show {"export"} → one export's statistics (zeros before any I/O) */
int
stats_show (struct control_ctx *ctx, json_t *params, json_t **result)
{
  static const struct param spec[] = {
    { "export", PARAM_STRING, true },
  };
  struct vol_export_stats x;
  int r = check_params (ctx, "stats.show", params, spec, ARRAY_SIZE (spec));

  if (r == 0)
    r = vol_stats_export (ctx_pool (ctx), param_str (params, "export"), &x);
  if (r < 0)
    return r;
  *result = export_object (&x);
  return *result ? 0 : oom ();
}
