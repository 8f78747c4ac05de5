/* Cairn engine, layer "dev": what a server and a standby ask of an RBD
 * image (dev-rbd.c).  Apart from dev.h so that only its users see it.
 */
#ifndef CAIRN_DEV_RBD_H
#define CAIRN_DEV_RBD_H

#include <stdbool.h>
#include <stddef.h>

#include "dev.h"
#include "util.h"

/* Where an RBD device lives and who holds its lock (cairn status). */
struct dev_rbd_info {
  char name[256];             /* "rbd:POOL/IMAGE", without options */
  char pool[128], image[128]; /* the Ceph pool and the image */
  char fsid[40];              /* the cluster's fsid; "" if not known */
  char mon_host[256];         /* the configuration's "mon host" */
  char client[128];           /* this client's address in the cluster */
  /* The exclusive lock's holder as librbd names it ("" when nobody holds
   * it), and as it named itself in the image's metadata (cairn.owner).
   */
  char owner[128];
  char owner_who[256];
  bool ours;                  /* the holder is this device's handle */
  bool owner_alive;           /* the holder still watches the image */
};

/* Is dev an RBD image (dev_rbd_open)? */
bool dev_is_rbd (const struct cairn_dev *dev);
/* Fill info for an open RBD device, asking the cluster who holds the
 * lock now.  -EINVAL for another kind of device; a failed question to
 * the cluster leaves owner empty and returns its errno with a message.
 */
int dev_rbd_info (struct cairn_dev *dev, struct dev_rbd_info *info)
  CAIRN_WUR;

/* For a standby server: if the holder of the image's lock is gone (its
 * watch on the image expired: killed, or cut off from the cluster for the
 * watch timeout), break its lock, which makes the cluster blocklist it so
 * that nothing it still sends can land.  1 when the lock is free now (the
 * caller may open the image), 0 when its holder is alive, or a negative
 * errno; what was seen (the cluster, the holder) goes to info.
 */
int dev_rbd_break_dead_owner (const char *name, struct dev_rbd_info *info)
  CAIRN_WUR;
#endif /* CAIRN_DEV_RBD_H */
