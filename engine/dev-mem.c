/* Cairn engine, layer "dev": the memory backend.
 *
 * A zero-filled buffer of the device's size, for tests and benchmarks.
 * Small devices are calloc'd; large ones are an anonymous MAP_NORESERVE
 * mapping, so that a 16 GiB device costs only the pages written to it and
 * discarding whole pages gives their memory back.
 *
 * Like a real disk, the backend does not order concurrent requests: reads
 * and writes of the same bytes at the same time leave unspecified contents
 * (the engine never does that; it writes blocks no reader can reach).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dev.h"

/* Devices at least this large are mapped rather than calloc'd. */
#define MEM_MMAP_THRESHOLD (1024 * 1024)

struct mem_dev {
  struct cairn_dev dev;       /* must be first */
  uint8_t *data;
  bool mapped;                /* data is an mmap, not a calloc */
};

/* The memory backend of a device. */
static inline struct mem_dev *
to_mem_dev (struct cairn_dev *dev)
{
  return (struct mem_dev *) dev;
}

/* Copy out of the buffer. */
static int
mem_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  memcpy (buf, to_mem_dev (dev)->data + off, len);
  return 0;
}

/* Copy into the buffer. */
static int
mem_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  memcpy (to_mem_dev (dev)->data + off, buf, len);
  return 0;
}

/* Memory has nothing to make durable. */
static int
mem_flush (struct cairn_dev *dev)
{
  return 0;
}

/* Zero the range, giving whole pages of a mapping back to the kernel. */
static int
mem_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct mem_dev *m = to_mem_dev (dev);
  uint64_t page = (uint64_t) sysconf (_SC_PAGESIZE);
  uint64_t start = DIV_ROUND_UP (off, page) * page;
  uint64_t end = (off + len) / page * page;

  if (!m->mapped || start >= end ||
      madvise (m->data + start, end - start, MADV_DONTNEED) == -1) {
    memset (m->data + off, 0, len);
    return 0;
  }
  /* Anonymous private pages read back as zeros after MADV_DONTNEED. */
  memset (m->data + off, 0, start - off);
  memset (m->data + end, 0, off + len - end);
  return 0;
}

/* Free the buffer and the device. */
static void
mem_close (struct cairn_dev *dev)
{
  struct mem_dev *m = to_mem_dev (dev);

  if (m->mapped)
    munmap (m->data, dev->size);
  else
    free (m->data);
  free (m);
}

static const struct cairn_dev_ops mem_ops = {
  .kind = "mem",
  .pread = mem_pread,
  .pwrite = mem_pwrite,
  .flush = mem_flush,
  .discard = mem_discard,
  .close = mem_close,
};

/* Create a zero-filled memory device of size bytes. */
int
dev_mem_create (uint64_t size, struct cairn_dev **devp)
{
  struct mem_dev *m;
  void *p;
  int r;

  *devp = NULL;
  if (size > SIZE_MAX / 2)
    return cairn_fail (-ENOMEM, "memory device of %" PRIu64 " bytes: "
                       "too large for this machine", size);

  m = calloc (1, sizeof *m);
  if (m == NULL)
    return cairn_fail (-errno, "memory device: calloc: %m");
  m->dev.ops = &mem_ops;
  m->dev.size = size;
  snprintf (m->dev.name, sizeof m->dev.name, "mem:%" PRIu64, size);

  if (size >= MEM_MMAP_THRESHOLD) {
    p = mmap (NULL, size, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      r = cairn_fail (-errno, "memory device of %" PRIu64 " bytes: mmap: %m",
                      size);
      free (m);
      return r;
    }
    m->mapped = true;
  }
  else {
    /* calloc (0) may return NULL; a 1-byte buffer keeps data valid. */
    p = calloc (1, size > 0 ? size : 1);
    if (p == NULL) {
      free (m);
      return cairn_fail (-ENOMEM, "memory device of %" PRIu64 " bytes: "
                         "out of memory", size);
    }
  }
  m->data = p;
  *devp = &m->dev;
  return 0;
}
