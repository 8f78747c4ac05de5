/* Cairn engine, layer "dev": a pool device on a Ceph RBD image (librbd).
 *
 * Names: "rbd:POOL/IMAGE", optionally followed by ":KEY=VALUE" options in
 * qemu's spelling: conf= (the Ceph configuration file; Ceph's own search
 * otherwise: $CEPH_CONF, /etc/ceph/ceph.conf, ...), id= (the client id,
 * "admin" by default) and keyring=.  `cairn --ceph-conf ...`, cairnd's
 * options and the plugin's ceph-conf=... parameters add them to the name
 * (dev_rbd_name_opts); messages show the name without them.
 *
 * I/O.  The device interface (dev.h) is synchronous: the engine calls
 * pread, pwrite and flush from the thread that needs the result (an
 * nbdkit worker, the commit thread, a reclaim job) and uses the result at
 * once.  Each call is therefore one librbd asynchronous request
 * (rbd_aio_read, rbd_aio_write, rbd_aio_discard, rbd_aio_flush) whose
 * completion the calling thread waits for; librbd's own threads do the
 * work, and no thread of ours exists beside the caller: many engine
 * threads keep many requests in flight at once, as many as they would
 * have on a file.  Errors from the cluster come back as the negative
 * errno of the completion and reach the engine as I/O errors with
 * librbd's errno and what failed in the message.
 *
 * One writer (DESIGN §2.7).  A device opened for writing holds the
 * image's exclusive lock, taken with rbd_lock_acquire(EXCLUSIVE): that
 * turns off librbd's cooperative hand-off, so another client's write can
 * never make this one give the lock up.  While the lock is held, another
 * opener fails at once (-EBUSY), and the message names the holder: the
 * holder writes who it is (host, pid, program) into the image's metadata
 * key "cairn.owner" after it takes the lock.  If the cluster breaks the
 * lock of a live owner (a standby took over) it blocklists that owner,
 * and its next write fails with -ESHUTDOWN: the message says so.  A
 * device opened read-only takes no lock, and refuses an image whose lock
 * is held.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev.h"
#include "dev-rbd.h"

bool
dev_is_rbd_name (const char *name)
{
  return strncmp (name, DEV_RBD_PREFIX, strlen (DEV_RBD_PREFIX)) == 0;
}

/* The parts of an "rbd:POOL/IMAGE[:KEY=VALUE]..." name. */
struct rbd_spec {
  char buf[1024];             /* the name, cut into the strings below */
  const char *pool, *image;
  const char *conf, *id, *keyring;
};

/* Split name into spec; -EINVAL with a message that shows the form. */
static int CAIRN_WUR
rbdev_parse (const char *name, struct rbd_spec *spec)
{
  char *p, *opt, *slash;

  memset (spec, 0, sizeof *spec);
  if (!dev_is_rbd_name (name) ||
      strlen (name) >= sizeof spec->buf)
    return cairn_fail (-EINVAL, "%s: not an RBD image name", name);
  strcpy (spec->buf, name + strlen (DEV_RBD_PREFIX));
  p = spec->buf;
  opt = strchr (p, ':');
  if (opt)
    *opt++ = '\0';
  slash = strchr (p, '/');
  if (slash == NULL || slash == p || slash[1] == '\0' ||
      strchr (slash + 1, '/') != NULL)
    return cairn_fail (-EINVAL, "%s: an RBD pool device is named "
                       "rbd:POOL/IMAGE (e.g. rbd:rbd/cairn)", name);
  *slash = '\0';
  spec->pool = p;
  spec->image = slash + 1;
  while (opt) {
    char *next = strchr (opt, ':'), *eq;

    if (next)
      *next++ = '\0';
    eq = strchr (opt, '=');
    if (eq == NULL || eq[1] == '\0')
      return cairn_fail (-EINVAL, "%s: option '%s' is not KEY=VALUE", name,
                         opt);
    *eq = '\0';
    if (strcmp (opt, "conf") == 0)
      spec->conf = eq + 1;
    else if (strcmp (opt, "id") == 0)
      spec->id = eq + 1;
    else if (strcmp (opt, "keyring") == 0)
      spec->keyring = eq + 1;
    else
      return cairn_fail (-EINVAL, "%s: unknown option '%s' (conf=, id= and "
                         "keyring= are known)", name, opt);
    opt = next;
  }
  return 0;
}

/* Append the Ceph options that are set to an "rbd:" name (dev.h). */
char *
dev_rbd_name_opts (const char *name, const char *conf, const char *id,
                   const char *keyring)
{
  char *out = NULL;

  if (!dev_is_rbd_name (name) || (!conf && !id && !keyring))
    return strdup (name);
  if (asprintf (&out, "%s%s%s%s%s%s%s", name,
                conf ? ":conf=" : "", conf ? conf : "",
                id ? ":id=" : "", id ? id : "",
                keyring ? ":keyring=" : "", keyring ? keyring : "") < 0)
    return NULL;
  return out;
}

#ifdef HAVE_LIBRBD

#include <rados/librados.h>
#include <rbd/librbd.h>

struct rbd_dev {
  struct cairn_dev dev;       /* must be first */
  rados_t cluster;
  rados_ioctx_t ioctx;
  rbd_image_t image;
  bool rdonly;
};

static inline struct rbd_dev *
to_rbd_dev (struct cairn_dev *dev)
{
  return (struct rbd_dev *) dev;
}

/* The error of a failed request at off, for the engine (errno kept). */
static int
rbdev_io_error (struct cairn_dev *dev, const char *what, uint64_t off, int r)
{
  if (r == -ESHUTDOWN)
    return cairn_fail (-ESHUTDOWN, "%s: %s at offset %" PRIu64 ": the "
                       "cluster has blocklisted this client (another server "
                       "broke its lock and took the pool over): this server "
                       "must stop serving", dev->name, what, off);
  return cairn_fail (r, "%s: %s at offset %" PRIu64 ": librbd: %s",
                     dev->name, what, off, strerror (-r));
}

/* The requests a device makes of librbd. */
enum rbdev_op { OP_READ, OP_WRITE, OP_DISCARD, OP_FLUSH };

/* Make one asynchronous request of librbd and wait for its completion
 * (the notes at the top say why waiting is the caller's).
 */
static int
rbdev_request (struct cairn_dev *dev, enum rbdev_op op, void *buf, size_t len,
               uint64_t off)
{
  static const char *const what[] = {
    [OP_READ] = "read", [OP_WRITE] = "write", [OP_DISCARD] = "discard",
    [OP_FLUSH] = "flush",
  };
  struct rbd_dev *d = to_rbd_dev (dev);
  rbd_completion_t c;
  ssize_t ret;
  int r;

  if (d->rdonly && op != OP_READ) {
    if (op == OP_FLUSH)
      return 0;
    return cairn_fail (-EROFS, "%s: %s: the device was opened read-only",
                       dev->name, what[op]);
  }
  r = rbd_aio_create_completion (NULL, NULL, &c);
  if (r < 0)
    return cairn_fail (r, "%s: rbd_aio_create_completion: %s", dev->name,
                       strerror (-r));
  switch (op) {
  case OP_READ: r = rbd_aio_read (d->image, off, len, buf, c); break;
  case OP_WRITE: r = rbd_aio_write (d->image, off, len, buf, c); break;
  case OP_DISCARD: r = rbd_aio_discard (d->image, off, len, c); break;
  case OP_FLUSH: r = rbd_aio_flush (d->image, c); break;
  }
  if (r == 0) {
    rbd_aio_wait_for_complete (c);
    ret = rbd_aio_get_return_value (c);
    r = ret < 0 ? (int) ret : 0;
  }
  rbd_aio_release (c);
  return r < 0 ? rbdev_io_error (dev, what[op], off, r) : 0;
}

static int
rbdev_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  return rbdev_request (dev, OP_READ, buf, len, off);
}

static int
rbdev_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  return rbdev_request (dev, OP_WRITE, (void *) buf, len, off);
}

/* rbd_aio_flush: every write completed before it is durable in RADOS. */
static int
rbdev_flush (struct cairn_dev *dev)
{
  return rbdev_request (dev, OP_FLUSH, NULL, 0, 0);
}

/* Free the range's objects in the cluster; reads give zeros after. */
static int
rbdev_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  return len ? rbdev_request (dev, OP_DISCARD, NULL, len, off) : 0;
}

/* Close the image (which lets its lock go) and the cluster handle. */
static void
rbdev_dev_close (struct cairn_dev *dev)
{
  struct rbd_dev *d = to_rbd_dev (dev);

  if (d->image)
    rbd_close (d->image);
  if (d->ioctx)
    rados_ioctx_destroy (d->ioctx);
  if (d->cluster)
    rados_shutdown (d->cluster);
  free (d);
}

static const struct cairn_dev_ops rbd_ops = {
  .kind = "rbd",
  .pread = rbdev_pread,
  .pwrite = rbdev_pwrite,
  .flush = rbdev_flush,
  .discard = rbdev_discard,
  .close = rbdev_dev_close,
};

/* A device for name, not connected yet, and the parts of its name. */
static int CAIRN_WUR
rbdev_new (const char *name, struct rbd_spec *spec, struct rbd_dev **dp)
{
  struct rbd_dev *d;
  int r;

  r = rbdev_parse (name, spec);
  if (r < 0)
    return r;
  d = calloc (1, sizeof *d);
  if (d == NULL)
    return cairn_fail (-ENOMEM, "%s: out of memory", name);
  d->dev.ops = &rbd_ops;
  snprintf (d->dev.name, sizeof d->dev.name, "%s%s/%s", DEV_RBD_PREFIX,
            spec->pool, spec->image);
  *dp = d;
  return 0;
}

/* Connect d->cluster as spec says: its config, client id and keyring. */
static int CAIRN_WUR
rbdev_connect (struct rbd_dev *d, const struct rbd_spec *spec)
{
  const char *name = d->dev.name;
  int r;

  r = rados_create (&d->cluster, spec->id);
  if (r < 0)
    return cairn_fail (r, "%s: rados_create: %s", name, strerror (-r));
  /* Give up on an unreachable cluster in 30 s, not librados's 300, unless
   * the configuration says otherwise (it is read after this).
   */
  rados_conf_set (d->cluster, "client_mount_timeout", "30");
  r = rados_conf_read_file (d->cluster, spec->conf);
  if (r < 0 && (spec->conf || r != -ENOENT))
    return cairn_fail (r, "%s: reading the Ceph configuration %s: %s", name,
                       spec->conf ? spec->conf : "(CEPH_CONF or "
                       "/etc/ceph/ceph.conf)", strerror (-r));
  rados_conf_parse_env (d->cluster, NULL);
  if (spec->keyring) {
    r = rados_conf_set (d->cluster, "keyring", spec->keyring);
    if (r < 0)
      return cairn_fail (r, "%s: keyring %s: %s", name, spec->keyring,
                         strerror (-r));
  }
  r = rados_connect (d->cluster);
  if (r < 0)
    return cairn_fail (r == -ETIMEDOUT ? -EHOSTUNREACH : r,
                       "%s: connecting to the Ceph cluster as client.%s: %s "
                       "(check --ceph-conf, --ceph-id and --ceph-keyring)",
                       name, spec->id ? spec->id : "admin", strerror (-r));
  r = rados_ioctx_create (d->cluster, spec->pool, &d->ioctx);
  if (r < 0)
    return cairn_fail (r, "%s: Ceph pool %s: %s", name, spec->pool,
                       r == -ENOENT ? "no such pool" : strerror (-r));
  return 0;
}

/* Create the image, with the exclusive-lock feature that one writer
 * needs, 4 MiB objects, and the object map that lets reads of unwritten
 * ranges skip the cluster.
 */
static int CAIRN_WUR
rbdev_make_image (struct rbd_dev *d, const char *image, uint64_t size)
{
  uint64_t features = RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK |
                      RBD_FEATURE_OBJECT_MAP | RBD_FEATURE_FAST_DIFF |
                      RBD_FEATURE_DEEP_FLATTEN;
  int order = 22;
  int r;

  r = rbd_create2 (d->ioctx, image, size, features, &order);
  if (r == -EEXIST)
    return cairn_fail (-EEXIST, "%s already exists: refusing to overwrite it "
                       "(remove it first with `rbd rm` to make a new pool)",
                       d->dev.name);
  if (r < 0)
    return cairn_fail (r, "%s: creating the image: %s", d->dev.name,
                       strerror (-r));
  return 0;
}

/* Who holds the image's lock, into buf: the owner's own words (metadata
 * "cairn.owner") and librbd's name for it.
 */
static void
rbdev_describe_owner (struct rbd_dev *d, char *buf, size_t len)
{
  char who[256] = "", *owners[4];
  size_t nowners = ARRAY_SIZE (owners), wlen = sizeof who;
  rbd_lock_mode_t mode;

  if (rbd_metadata_get (d->image, DEV_RBD_OWNER_KEY, who, &wlen) < 0)
    who[0] = '\0';
  if (rbd_lock_get_owners (d->image, &mode, owners, &nowners) < 0)
    nowners = 0;
  snprintf (buf, len, "%s%s%s%s", who[0] ? who : "another client",
            nowners ? " (lock owner " : "", nowners ? owners[0] : "",
            nowners ? ")" : "");
  if (nowners)
    rbd_lock_get_owners_cleanup (owners, nowners);
}

/* Refuse to read an image that a writer holds (-EBUSY naming it): what it
 * writes meanwhile would show through half-made (a pool file's readers
 * share a lock that a writer's excludes, the same rule).
 */
static int CAIRN_WUR
rbdev_check_unowned (struct rbd_dev *d)
{
  char *owners[4], who[512];
  size_t nowners = ARRAY_SIZE (owners);
  rbd_lock_mode_t mode;
  int r;

  r = rbd_lock_get_owners (d->image, &mode, owners, &nowners);
  if (r == -ENOENT || (r == 0 && nowners == 0))
    return 0;
  if (r < 0)
    return cairn_fail (r, "%s: asking for the image's lock owner: %s",
                       d->dev.name, strerror (-r));
  rbd_lock_get_owners_cleanup (owners, nowners);
  rbdev_describe_owner (d, who, sizeof who);
  return cairn_fail (-EBUSY, "pool %s is in use by %s", d->dev.name, who);
}

/* Take the image's exclusive lock, or -EBUSY naming its holder; then say
 * who we are in the image's metadata.
 */
static int CAIRN_WUR
rbdev_lock (struct rbd_dev *d)
{
  char who[512], host[128] = "?", cmd[256] = "";
  uint64_t features = 0;
  FILE *fp;
  int r;

  r = rbd_get_features (d->image, &features);
  if (r == 0 && !(features & RBD_FEATURE_EXCLUSIVE_LOCK))
    return cairn_fail (-EINVAL, "%s: the image has no exclusive-lock "
                       "feature, which keeps a pool to one server: `rbd "
                       "feature enable %s exclusive-lock`", d->dev.name,
                       d->dev.name + strlen (DEV_RBD_PREFIX));
  r = rbd_lock_acquire (d->image, RBD_LOCK_MODE_EXCLUSIVE);
  if (r == -EROFS || r == -EBUSY) {
    rbdev_describe_owner (d, who, sizeof who);
    return cairn_fail (-EBUSY, "pool %s is in use by %s", d->dev.name, who);
  }
  if (r < 0)
    return cairn_fail (r, "%s: taking the image's exclusive lock: %s",
                       d->dev.name, strerror (-r));
  gethostname (host, sizeof host - 1);
  fp = fopen ("/proc/self/comm", "re");
  if (fp) {
    if (fgets (cmd, sizeof cmd, fp) == NULL)
      cmd[0] = '\0';
    cmd[strcspn (cmd, "\n")] = '\0';
    fclose (fp);
  }
  snprintf (who, sizeof who, "%s (pid %d on %s)", cmd[0] ? cmd : "process",
            (int) getpid (), host);
  r = rbd_metadata_set (d->image, DEV_RBD_OWNER_KEY, who);
  if (r < 0)
    return cairn_fail (r, "%s: writing the owner into the image's metadata: "
                       "%s", d->dev.name, strerror (-r));
  return 0;
}

int
dev_rbd_open (const char *name, unsigned flags, uint64_t create_size,
              struct cairn_dev **devp)
{
  struct rbd_spec spec;
  struct rbd_dev *d;
  bool create = flags & DEV_CREATE, rdonly = flags & DEV_RDONLY;
  bool created = false;
  int r;

  *devp = NULL;
  if (flags & ~(DEV_CREATE | DEV_RDONLY | DEV_WATCH_RUSAGE))
    return cairn_fail (-EINVAL, "%s: unknown device flags 0x%x", name, flags);
  if (create && rdonly)
    return cairn_fail (-EINVAL, "%s: cannot create a device read-only", name);
  r = rbdev_new (name, &spec, &d);
  if (r < 0)
    return r;
  d->rdonly = rdonly;
  r = rbdev_connect (d, &spec);
  if (r < 0)
    goto out;
  if (create) {
    r = rbdev_make_image (d, spec.image, create_size);
    if (r < 0)
      goto out;
    created = true;
  }
  /* Opened read-write even for reading: librbd answers who owns the lock
   * only there (-EINVAL on a read-only image), and nothing is written
   * through it (rbdev_pwrite refuses).
   */
  r = rbd_open (d->ioctx, spec.image, &d->image, NULL);
  if (r < 0) {
    d->image = NULL;
    r = cairn_fail (r, "%s: opening the image: %s", d->dev.name,
                    r == -ENOENT ? "no such image (make one with `cairn "
                    "mkpool`)" : strerror (-r));
    goto out;
  }
  r = rdonly ? rbdev_check_unowned (d) : rbdev_lock (d);
  if (r < 0)
    goto out;
  r = rbd_get_size (d->image, &d->dev.size);
  if (r < 0) {
    r = cairn_fail (r, "%s: rbd_get_size: %s", d->dev.name, strerror (-r));
    goto out;
  }
  *devp = &d->dev;
  return 0;

 out:
  if (created) {
    if (d->image)
      rbd_close (d->image);
    d->image = NULL;
    rbd_remove (d->ioctx, spec.image);
  }
  rbdev_dev_close (&d->dev);
  return r;
}

/* Remove the image a name names (dev.h). */
int
dev_rbd_remove (const char *name)
{
  struct rbd_spec spec;
  struct rbd_dev *d;
  int r;

  r = rbdev_new (name, &spec, &d);
  if (r < 0)
    return r;
  r = rbdev_connect (d, &spec);
  if (r == 0) {
    r = rbd_remove (d->ioctx, spec.image);
    if (r == -EBUSY)
      r = cairn_fail (r, "%s: the image is in use (a server or another "
                      "client has it open): not removing it", d->dev.name);
    else if (r < 0)
      r = cairn_fail (r, "%s: removing the image: %s", d->dev.name,
                      strerror (-r));
  }
  rbdev_dev_close (&d->dev);
  return r;
}

/* Whether the holder of the lock that a standby waits for is gone (dev.h):
 * its lock is held but its watch on the image has expired.  Every client
 * that has the image open keeps a watch on its header, which the OSD
 * drops when the client has not renewed it for the watch timeout (30 s
 * by default): a killed holder, or one cut off or frozen that long.
 */
static bool
rbdev_owner_watching (struct rbd_dev *d, const char *owner)
{
  rbd_image_watcher_t w[32];
  size_t n = ARRAY_SIZE (w);
  bool seen = false;

  if (rbd_watchers_list (d->image, w, &n) < 0)
    return true;                /* cannot tell: take it as alive */
  for (size_t i = 0; i < n && !seen; i++)
    seen = strcmp (w[i].addr, owner) == 0 || strstr (w[i].addr, owner) ||
           strstr (owner, w[i].addr);
  rbd_watchers_list_cleanup (w, n);
  return seen;
}

/* The parts of info that the cluster's handle and the name tell. */
static void
rbdev_info_cluster (struct rbd_dev *d, const struct rbd_spec *spec,
                    struct dev_rbd_info *info)
{
  char *addrs = NULL;

  memset (info, 0, sizeof *info);
  snprintf (info->name, sizeof info->name, "%s", d->dev.name);
  snprintf (info->pool, sizeof info->pool, "%s", spec->pool);
  snprintf (info->image, sizeof info->image, "%s", spec->image);
  if (rados_cluster_fsid (d->cluster, info->fsid, sizeof info->fsid) < 0)
    info->fsid[0] = '\0';
  if (rados_conf_get (d->cluster, "mon_host", info->mon_host,
                      sizeof info->mon_host) < 0)
    info->mon_host[0] = '\0';
  if (rados_getaddrs (d->cluster, &addrs) == 0 && addrs) {
    snprintf (info->client, sizeof info->client, "%s", addrs);
    free (addrs);
  }
}

/* The lock's holder into info: -errno when the cluster cannot say. */
static int
rbdev_info_owner (struct rbd_dev *d, struct dev_rbd_info *info)
{
  char *owners[4];
  size_t nowners = ARRAY_SIZE (owners);
  rbd_lock_mode_t mode;
  int is_owner = 0, r;

  r = rbd_lock_get_owners (d->image, &mode, owners, &nowners);
  if (r == -ENOENT || (r == 0 && nowners == 0))
    return 0;                   /* nobody holds it */
  if (r < 0)
    return cairn_fail (r, "%s: asking for the image's lock owner: %s",
                       d->dev.name, strerror (-r));
  snprintf (info->owner, sizeof info->owner, "%s", owners[0]);
  info->owner_alive = rbdev_owner_watching (d, owners[0]);
  rbd_lock_get_owners_cleanup (owners, nowners);
  rbdev_describe_owner (d, info->owner_who, sizeof info->owner_who);
  if (rbd_is_exclusive_lock_owner (d->image, &is_owner) == 0)
    info->ours = is_owner;
  return 0;
}

bool
dev_is_rbd (const struct cairn_dev *dev)
{
  return dev->ops == &rbd_ops;
}

int
dev_rbd_info (struct cairn_dev *dev, struct dev_rbd_info *info)
{
  struct rbd_spec spec;
  int r;

  if (!dev_is_rbd (dev))
    return cairn_fail (-EINVAL, "%s is not an RBD image", dev->name);
  r = rbdev_parse (dev->name, &spec);
  if (r < 0)
    return r;
  rbdev_info_cluster (to_rbd_dev (dev), &spec, info);
  return rbdev_info_owner (to_rbd_dev (dev), info);
}

int
dev_rbd_break_dead_owner (const char *name, struct dev_rbd_info *info)
{
  struct rbd_spec spec;
  struct rbd_dev *d;
  int r;

  memset (info, 0, sizeof *info);
  r = rbdev_new (name, &spec, &d);
  if (r < 0)
    return r;
  r = rbdev_connect (d, &spec);
  if (r == 0) {
    rbdev_info_cluster (d, &spec, info);
    r = rbd_open (d->ioctx, spec.image, &d->image, NULL);
    if (r < 0) {
      d->image = NULL;
      r = cairn_fail (r, "%s: opening the image: %s", d->dev.name,
                      strerror (-r));
    }
  }
  if (r == 0)
    r = rbdev_info_owner (d, info);
  if (r == 0 && info->owner[0] == '\0')
    r = 1;                      /* nobody holds it now */
  else if (r == 0 && !info->owner_alive) {
    r = rbd_lock_break (d->image, RBD_LOCK_MODE_EXCLUSIVE, info->owner);
    if (r == -ENOENT || r == -EBUSY)
      r = 0;                    /* the lock changed hands meanwhile: ask again */
    else
      r = r < 0 ? cairn_fail (r, "%s: breaking the lock of %s: %s",
                              d->dev.name, info->owner_who, strerror (-r)) : 1;
  }
  rbdev_dev_close (&d->dev);
  return r;
}

#else /* !HAVE_LIBRBD */

bool
dev_is_rbd (const struct cairn_dev *dev)
{
  return false;
}

int
dev_rbd_info (struct cairn_dev *dev, struct dev_rbd_info *info)
{
  memset (info, 0, sizeof *info);
  return cairn_fail (-EINVAL, "%s is not an RBD image", dev->name);
}

int
dev_rbd_break_dead_owner (const char *name, struct dev_rbd_info *info)
{
  memset (info, 0, sizeof *info);
  return dev_rbd_remove (name);
}

int
dev_rbd_remove (const char *name)
{
  return dev_rbd_open (name, 0, 0, &(struct cairn_dev *) { NULL });
}

int
dev_rbd_open (const char *name, unsigned flags, uint64_t create_size,
              struct cairn_dev **devp)
{
  *devp = NULL;
  return cairn_fail (-ENOTSUP, "%s: this Cairn was built without RBD "
                     "support (configure found no librbd: install librbd-dev "
                     "and librados-dev and build again)", name);
}

#endif /* HAVE_LIBRBD */

/* Open a device by name: an RBD image or a file or block device. */
int
dev_open (const char *name, unsigned flags, uint64_t create_size,
          struct cairn_dev **devp)
{
  if (dev_is_rbd_name (name))
    return dev_rbd_open (name, flags, create_size, devp);
  return dev_file_open (name, flags, create_size, devp);
}
