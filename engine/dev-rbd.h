/* Cairn engine, layer "dev": what a standby server asks of an RBD image
 * (dev-rbd.c).  Apart from dev.h so that only its users see it.
 */
#ifndef CAIRN_DEV_RBD_H
#define CAIRN_DEV_RBD_H

#include <stddef.h>

#include "util.h"

/* For a standby server: if the holder of the image's lock is gone (its
 * watch on the image expired: killed, or cut off from the cluster for the
 * watch timeout), break its lock, which makes the cluster blocklist it so
 * that nothing it still sends can land.  1 when the lock is free now (the
 * caller may open the image), 0 when its holder is alive, or a negative
 * errno; who the holder is goes to who.
 */
int dev_rbd_break_dead_owner (const char *name, char *who, size_t len)
  CAIRN_WUR;
#endif /* CAIRN_DEV_RBD_H */
