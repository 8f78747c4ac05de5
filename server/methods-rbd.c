/* Cairn control server: what pool.status says of RBD images (the
 * "rbd" array of a pool on Ceph), and the one method a standby server
 * answers while it waits for its pool (cairnd(8), TAKEOVER BY A STANDBY;
 * cairn-protocol(7) documents both).
 */
#include <config.h>

#include <errno.h>
#include <string.h>

#include "dev-rbd.h"
#include "methods-int.h"

/* One RBD device as JSON: where it lives and who holds its lock. */
json_t *
rbd_info_json (const struct dev_rbd_info *ri)
{
  return json_pack ("{s:s, s:s, s:s, s:s?, s:s?, s:s?, s:s?, s:s?, s:b, "
                    "s:b}",
                    "device", ri->name,
                    "pool", ri->pool,
                    "image", ri->image,
                    "fsid", ri->fsid[0] ? ri->fsid : NULL,
                    "mon_host", ri->mon_host[0] ? ri->mon_host : NULL,
                    "client", ri->client[0] ? ri->client : NULL,
                    "lock_owner", ri->owner[0] ? ri->owner : NULL,
                    "lock_owner_name", ri->owner_who[0] ? ri->owner_who
                                                        : NULL,
                    "lock_ours", (int) ri->ours,
                    "lock_owner_alive", (int) (ri->owner[0] &&
                                               ri->owner_alive));
}

/* Append dev's object to arr if dev is an RBD image. */
static int
append_rbd (json_t *arr, struct cairn_dev *dev)
{
  struct dev_rbd_info ri;
  int r;

  if (dev == NULL || !dev_is_rbd (dev))
    return 0;
  /* A cluster that cannot say who holds the lock leaves lock_owner out;
   * the rest is still worth showing.
   */
  r = dev_rbd_info (dev, &ri);
  if (r < 0)
    cairn_error_clear ();
  if (json_array_append_new (arr, rbd_info_json (&ri)) < 0)
    return oom ();
  return 0;
}

/* pool.status's "rbd": every RBD image of the pool, nothing when it has
 * none.
 */
int
rbd_status (struct cairn_pool *pool, json_t *status)
{
  struct cairn_dev *dev = pool_dev (pool);
  json_t *arr = json_array ();
  int r = 0;

  if (arr == NULL)
    return oom ();
  if (dev_is_chunked (dev)) {
    struct dev_chunk_info ci;

    dev_chunk_info (dev, &ci);
    for (unsigned i = 0; r == 0 && i < ci.nmembers; i++)
      r = append_rbd (arr, dev_chunk_member_dev (dev, i));
  }
  else
    r = append_rbd (arr, dev);
  if (r == 0 && json_array_size (arr) > 0 &&
      json_object_set (status, "rbd", arr) < 0)
    r = oom ();
  json_decref (arr);
  return r;
}

/* pool.status {} on a standby → {"standby": {...}}: what it waits for, as
 * the server's standby_status says.
 */
static int
standby_pool_status (struct control_ctx *ctx, json_t *params, json_t **result)
{
  const struct cairn_methods_ctx *m = control_ctx_opaque (ctx);
  json_t *st;
  int r = check_params (ctx, "pool.status", params, NULL, 0);

  if (r < 0)
    return r;
  st = m->standby_status ? m->standby_status (m->standby_opaque) : NULL;
  if (st == NULL)
    return oom ();
  *result = json_pack ("{s:o}", "standby", st);
  return *result ? 0 : oom ();
}

static const struct control_method standby_methods[] = {
  { .name = "pool.status", .handler = standby_pool_status },
};

const struct control_method_table cairn_standby_methods = {
  .methods = standby_methods,
  .n = ARRAY_SIZE (standby_methods),
};
