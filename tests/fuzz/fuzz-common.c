/* Cairn fuzz harnesses: the pool image they start from (fuzz.h). */
#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsck.h"
#include "fuzz.h"
#include "volume.h"

static const uint8_t fuzz_uuid[16] = {
  0xca, 0x12, 0x0f, 0x22, 0x00, 0x00, 0x40, 0x00,
  0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
};


void
fuzz_die (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  fprintf (stderr, "fuzz: ");
  vfprintf (stderr, fmt, ap);
  fprintf (stderr, "\n");
  va_end (ap);
  abort ();
}

/* A fixed clock, so that times in the pool do not depend on the run. */
static int64_t
fixed_clock (void *opaque)
{
  return 1796083200;   /* 2026-12-01T00:00:00Z */
}

int
fuzz_pool_open (struct cairn_dev *dev, bool readonly,
                struct cairn_pool **poolp)
{
  struct pool_open_opts o = {
    .cache_bytes = 4u << 20,
    .no_background = true,
    .readonly = readonly,
  };
  int r = pool_open (dev, &o, poolp);

  if (r == 0)
    pool_set_clock (*poolp, fixed_clock, NULL);
  return r;
}

/* Print one of fsck's problems. */
static void
print_problem (void *opaque, const char *msg)
{
  if (*(bool *) opaque)
    fprintf (stderr, "fsck: %s\n", msg);
}

int64_t
fuzz_fsck (struct cairn_dev *dev, bool verbose)
{
  struct fsck_opts o = {
    .cache_bytes = 4u << 20,
    .problem = print_problem,
    .opaque = &verbose,
  };
  struct fsck_report rep;

  if (fsck_pool (dev, &o, &rep) < 0)
    return -1;
  return (int64_t) rep.errors;
}

void
fuzz_image_build (struct fuzz_image *img, int (*fill) (struct cairn_pool *pool))
{
  struct pool_format_opts fo = { .uuid = fuzz_uuid };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  uint8_t *buf;

  if (dev_mem_create (FUZZ_POOL_SIZE, &dev) < 0 ||
      pool_format (dev, &fo, NULL) < 0 ||
      fuzz_pool_open (dev, false, &pool) < 0)
    fuzz_die ("making the pool: %s", cairn_errmsg ());
  if (fill && fill (pool) < 0)
    fuzz_die ("filling the pool: %s", cairn_errmsg ());
  if (pool_close (pool) < 0)
    fuzz_die ("closing the pool: %s", cairn_errmsg ());

  memset (img, 0, sizeof *img);
  img->blocks = malloc (FUZZ_POOL_BLOCKS * sizeof *img->blocks);
  img->data = malloc ((size_t) FUZZ_POOL_SIZE);
  buf = malloc (FUZZ_BLOCK);
  if (img->blocks == NULL || img->data == NULL || buf == NULL)
    fuzz_die ("out of memory");
  for (uint32_t b = 0; b < FUZZ_POOL_BLOCKS; b++) {
    bool zero = true;

    if (dev_pread (dev, buf, FUZZ_BLOCK, (uint64_t) b * FUZZ_BLOCK) < 0)
      fuzz_die ("reading the pool: %s", cairn_errmsg ());
    for (size_t i = 0; zero && i < FUZZ_BLOCK; i++)
      zero = buf[i] == 0;
    if (zero)
      continue;
    img->blocks[img->n] = b;
    memcpy (img->data + img->n * FUZZ_BLOCK, buf, FUZZ_BLOCK);
    img->n++;
  }
  free (buf);
  dev_close (dev);
}

struct cairn_dev *
fuzz_image_dev (const struct fuzz_image *img)
{
  struct cairn_dev *dev;

  if (dev_mem_create (FUZZ_POOL_SIZE, &dev) < 0)
    fuzz_die ("memory device: %s", cairn_errmsg ());
  for (size_t i = 0; i < img->n; i++)
    if (dev_pwrite (dev, img->data + i * FUZZ_BLOCK, FUZZ_BLOCK,
                    (uint64_t) img->blocks[i] * FUZZ_BLOCK) < 0)
      fuzz_die ("writing the pool: %s", cairn_errmsg ());
  return dev;
}

uint8_t
fuzz_pattern_byte (char tag, uint64_t off)
{
  uint64_t x = (off / 8) * 0x9e3779b97f4a7c15ull + (uint8_t) tag;

  return (uint8_t) (x >> (8 * (off % 8)));
}

int
fuzz_fill_volume (struct cairn_pool *pool, const char *name, char tag,
                  uint64_t off, uint64_t len)
{
  struct cairn_volume *v;
  uint8_t *buf = malloc (len);
  int r;

  if (buf == NULL)
    return -ENOMEM;
  for (uint64_t i = 0; i < len; i++)
    buf[i] = fuzz_pattern_byte (tag, off + i);
  r = vol_open (pool, name, &v);
  if (r == 0) {
    r = vol_pwrite (v, buf, len, off, 0);
    vol_close (v);
  }
  free (buf);
  return r;
}
