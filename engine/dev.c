/* Cairn engine, layer "dev": the wrappers every caller goes through.
 *
 * They check that a request lies inside the device, call the backend and
 * count the bytes moved and the flushes, so that no backend repeats those
 * checks and every device, stacked or not, is counted the same way.  The
 * counters are updated with atomic builtins because nbdkit calls the engine
 * from many threads at once.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>

#include "dev.h"

/* Check that [off, off + len) lies inside the device. */
static int CAIRN_WUR
dev_check_range (struct cairn_dev *dev, const char *what, uint64_t len,
                 uint64_t off)
{
  if (len > dev->size || off > dev->size - len)
    return cairn_fail (-EINVAL,
                       "%s: %s of %" PRIu64 " bytes at offset %" PRIu64
                       " is beyond the end of the device (%" PRIu64 " bytes)",
                       dev->name, what, len, off, dev->size);
  return 0;
}

/* Read len bytes at off, all or nothing. */
int
dev_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  int r;

  r = dev_check_range (dev, "read", len, off);
  if (r < 0)
    return r;
  r = dev->ops->pread (dev, buf, len, off);
  if (r < 0)
    return r;
  __atomic_fetch_add (&dev->bytes_read, (uint64_t) len, __ATOMIC_RELAXED);
  return 0;
}

/* Write len bytes at off, all or nothing. */
int
dev_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  int r;

  r = dev_check_range (dev, "write", len, off);
  if (r < 0)
    return r;
  r = dev->ops->pwrite (dev, buf, len, off);
  if (r < 0)
    return r;
  __atomic_fetch_add (&dev->bytes_written, (uint64_t) len, __ATOMIC_RELAXED);
  return 0;
}

/* Make every completed write durable. */
int
dev_flush (struct cairn_dev *dev)
{
  int r;

  r = dev->ops->flush (dev);
  if (r < 0)
    return r;
  __atomic_fetch_add (&dev->flushes, (uint64_t) 1, __ATOMIC_RELAXED);
  return 0;
}

/* Tell the device that [off, off + len) holds no data. */
int
dev_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  int r;

  r = dev_check_range (dev, "discard", len, off);
  if (r < 0)
    return r;
  return dev->ops->discard (dev, off, len);
}

/* Close the device; a NULL device is ignored. */
void
dev_close (struct cairn_dev *dev)
{
  if (dev)
    dev->ops->close (dev);
}
