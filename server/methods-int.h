/* Cairn control server: what the files of the method tables share
 * (methods-catalog.c, methods-objects.c, methods-snapshot.c,
 * methods-stats.c); private to server/.
 */
#ifndef CAIRN_SERVER_METHODS_INT_H
#define CAIRN_SERVER_METHODS_INT_H

#include <stdbool.h>

#include "methods.h"
#include "volume.h"

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
/* A size member (checked): bytes, or a string in units (units.h). */
int param_size (struct control_ctx *ctx, const char *method, json_t *params,
                const char *name, uint64_t *sizep) CAIRN_WUR;
/* The error for a result that could not be built (-ENOMEM). */
int oom (void);
/* Refuse a snapshot or checkpoint name where a volume is meant, then check
 * the name (-EINVAL, "invalid", with the reason).
 */
int check_volume_name (const char *what, const char *name) CAIRN_WUR;

/* methods-rbd.c: add pool.status's "rbd" array for a pool on RBD images. */
int rbd_status (struct cairn_pool *pool, json_t *status) CAIRN_WUR;

/* "VOL@SNAP" with its NUL. */
#define FULL_NAME_MAX (2 * VOL_NAME_MAX + 2)

/* Every volume and snapshot, for lookups by id (origins, clones), and the
 * snapshot records that did not decode.
 */
struct listing {
  struct vol_info *v;
  size_t n, cap;
  struct vol_damage *d;
  size_t nd;
};

/* methods-objects.c: list every visible volume and its snapshots (damaged
 * records apart).
 */
int listing_load (struct cairn_pool *pool, struct listing *l) CAIRN_WUR;
/* Free what listing_load gathered. */
void listing_free (struct listing *l);
/* The "damaged" array of a listing: every damaged record, or volume id's
 * (id != 0) only.
 */
json_t *damaged_array (const struct listing *l, uint64_t id);
/* Add the "damaged" array (of volume id, or all with 0) to obj. */
int set_damaged (json_t *obj, const struct listing *l, uint64_t id)
  CAIRN_WUR;
/* Append the object of vi to the array arr. */
int append_info (json_t *arr, struct cairn_pool *pool,
                 const struct vol_info *vi) CAIRN_WUR;
/* Describe one volume or snapshot (VOL@SNAP) by name into *result; with
 * related, with its snapshots and clones.
 */
int describe (struct cairn_pool *pool, const char *name, bool related,
              json_t **result) CAIRN_WUR;

/* Seconds since 1970 as ISO 8601 in UTC ("2026-12-02T10:00:00Z"). */
void iso_time (uint64_t t, char buf[32]);

/* methods-device.c: the "device.*" methods (cairn-protocol(7)). */
int device_replace_method (struct control_ctx *ctx, json_t *params,
                           json_t **result) CAIRN_WUR;
int device_replace_cancel_method (struct control_ctx *ctx, json_t *params,
                                  json_t **result) CAIRN_WUR;
int device_replace_status_method (struct control_ctx *ctx, json_t *params,
                                  json_t **result) CAIRN_WUR;
/* pool.status's devices.replace (methods-catalog.c). */
int device_replace_status_json (struct cairn_pool *pool, json_t *devices)
  CAIRN_WUR;
/* A replace in progress as a background job (methods-jobs.c): 1 when
 * there is one, filled in job.
 */
int device_replace_bg_job (struct cairn_pool *pool,
                           struct control_bg_job *job);

/* methods-scrub.c: the "scrub.*" methods (cairn-protocol(7)). */
int scrub_start_method (struct control_ctx *ctx, json_t *params,
                        json_t **result) CAIRN_WUR;
int scrub_pause_method (struct control_ctx *ctx, json_t *params,
                        json_t **result) CAIRN_WUR;
int scrub_resume_method (struct control_ctx *ctx, json_t *params,
                         json_t **result) CAIRN_WUR;
int scrub_cancel_method (struct control_ctx *ctx, json_t *params,
                         json_t **result) CAIRN_WUR;
int scrub_status_method (struct control_ctx *ctx, json_t *params,
                         json_t **result) CAIRN_WUR;
/* A scrub that runs or is paused, as a background job (methods-jobs.c):
 * 1 with *job filled, 0 when there is none.
 */
int scrub_bg_job (struct cairn_pool *pool, struct control_bg_job *job);

/* methods-checkpoint.c: the "checkpoint.*" methods (cairn-protocol(7)). */
int checkpoint_list (struct control_ctx *ctx, json_t *params,
                     json_t **result) CAIRN_WUR;
int checkpoint_promote (struct control_ctx *ctx, json_t *params,
                        json_t **result) CAIRN_WUR;
int checkpoint_prune (struct control_ctx *ctx, json_t *params,
                      json_t **result) CAIRN_WUR;
int checkpoint_set (struct control_ctx *ctx, json_t *params, json_t **result)
  CAIRN_WUR;

/* methods-snapshot.c: the "snapshot.*" methods (cairn-protocol(7)). */
int snapshot_create (struct control_ctx *ctx, json_t *params,
                     json_t **result) CAIRN_WUR;
int snapshot_list (struct control_ctx *ctx, json_t *params, json_t **result)
  CAIRN_WUR;
int snapshot_delete (struct control_ctx *ctx, json_t *params,
                     json_t **result) CAIRN_WUR;
int snapshot_rename (struct control_ctx *ctx, json_t *params,
                     json_t **result) CAIRN_WUR;
int snapshot_space (struct control_ctx *ctx, json_t *params, json_t **result)
  CAIRN_WUR;

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
