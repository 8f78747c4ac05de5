/* nbdkit-cairn-plugin: a standby server that waits for its pool's RBD
 * lock and takes the pool over from a server that is gone
 * (plugin/standby.c).
 */
#ifndef CAIRN_PLUGIN_STANDBY_H
#define CAIRN_PLUGIN_STANDBY_H

#include <jansson.h>

/* Wait until the pool of the devices paths (pool_name in messages) can be
 * opened, breaking the lock of a holder that is gone, then open it with
 * try_open (0: opened, -EBUSY: taken meanwhile, -1: failed, said with
 * nbdkit_error).  0 once open; -1 on an error or when nbdkit quits.
 */
int standby_wait (char *const *paths, unsigned n, const char *pool_name,
                  int (*try_open) (void));

/* What the standby waits for, for pool.status (methods.h's
 * standby_status): a new object, NULL when out of memory.
 */
json_t *standby_status (void *opaque);

#endif /* CAIRN_PLUGIN_STANDBY_H */
