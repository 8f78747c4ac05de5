/* Unit tests for the read path (engine/volume.c): every block a read
 * returns is checked against its SHA-256, however the request falls on
 * extents, holes and device runs.
 *
 * The read path joins mappings that follow each other on the device into
 * one device read and checks runs that are contiguous in the volume two
 * blocks at a time (sha256_blocks); these tests build volumes whose extents
 * are split by the extent item's size, by holes and by overwrites, read
 * them at random byte ranges against a model, then damage one block on the
 * device and check that exactly the reads covering it fail, naming it.  Both
 * digest implementations (SHA extensions and OpenSSL) are run.
 */
#include <config.h>

#include <errno.h>

#include <criterion/criterion.h>

#include "sha256.h"
#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define VOL_SIZE (8u << 20)
#define BLK 4096u

/* Fill the model range with fresh random blocks, one in eight left zero
 * (a hole: zero blocks store nothing), and write it.
 */
static void
write_random (struct cairn_volume *v, uint8_t *model, struct rng *r,
              uint64_t off, uint64_t len)
{
  fill_pattern (model + off, len, rng_next (r));
  for (uint64_t b = 0; b < len; b += BLK)
    if (rng_below (r, 8) == 0)
      memset (model + off + b, 0, BLK);
  cr_assert_eq (vol_pwrite (v, model + off, (uint32_t) len, off, 0), 0, "%s",
                cairn_errmsg ());
}

/* Read [off, off + len) and compare with the model. */
static void
check_read (struct cairn_volume *v, const uint8_t *model, uint8_t *buf,
            uint64_t off, uint32_t len)
{
  memset (buf, 0xee, len);
  cr_assert_eq (vol_pread (v, buf, len, off), 0, "read [%" PRIu64 ", +%" PRIu32
                "): %s", off, len, cairn_errmsg ());
  cr_assert (memcmp (buf, model + off, len) == 0, "read [%" PRIu64 ", +%" PRIu32
             ") differs from what was written", off, len);
}

/* A random byte range: mostly block-aligned, sometimes not, up to 3 MiB. */
static void
random_range (struct rng *r, uint64_t *offp, uint32_t *lenp)
{
  uint64_t off = rng_below (r, VOL_SIZE / BLK) * BLK;
  uint64_t len = (1 + rng_below (r, 768)) * BLK;

  if (rng_below (r, 4) == 0) {
    off += rng_below (r, BLK);
    len -= rng_below (r, BLK);
  }
  if (off >= VOL_SIZE)
    off = VOL_SIZE - 1;
  if (len > VOL_SIZE - off)
    len = VOL_SIZE - off;
  *offp = off;
  *lenp = (uint32_t) len;
}

/* The device address of the block holding data (blocks are random, so
 * unique), 0 if none.
 */
static uint64_t
find_on_device (struct cairn_dev *dev, const uint8_t *data)
{
  uint8_t blk[BLK];

  for (uint64_t a = POOL_DATA_START; a + BLK <= dev->size; a += BLK) {
    cr_assert_eq (dev_pread (dev, blk, BLK, a), 0);
    if (memcmp (blk, data, BLK) == 0)
      return a;
  }
  return 0;
}

static void
reads_across_extents (enum sha256_blocks_level level, uint64_t seed)
{
  struct rng r = { seed };
  struct cairn_dev *dev = mem_pool (64u << 20, NULL);
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct vol_stats st;
  uint8_t *model = calloc (1, VOL_SIZE), *buf = malloc (VOL_SIZE);
  uint8_t bad[BLK];
  uint64_t off, blk, addr;
  uint32_t len;
  unsigned failed = 0;

  cr_assert (model && buf);
  if (!sha256_blocks_limit (level)) {
    sha256_blocks_limit (SHA256_BLOCKS_BEST);
    free (model);
    free (buf);
    cr_skip_test ("this CPU cannot run that SHA-256 implementation");
  }
  fprintf (stderr, "read path with %s\n", sha256_blocks_impl ());
  cr_assert_eq (pool_open (dev, NULL, &pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_create (pool, "v", VOL_SIZE, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "v", &v), 0, "%s", cairn_errmsg ());

  /* Long writes (several extent items each, contiguous on the device),
   * then overwrites and trims that split them, some committed.
   */
  for (uint64_t o = 0; o < VOL_SIZE / 2; o += 2u << 20)
    write_random (v, model, &r, o, 2u << 20);
  for (int i = 0; i < 60; i++) {
    uint64_t b = rng_below (&r, VOL_SIZE / BLK - 64), n = 1 + rng_below (&r, 64);

    if (rng_below (&r, 5) == 0) {
      memset (model + b * BLK, 0, n * BLK);
      cr_assert_eq (vol_trim (v, (uint32_t) (n * BLK), b * BLK, 0), 0);
    }
    else
      write_random (v, model, &r, b * BLK, n * BLK);
    if (rng_below (&r, 10) == 0)
      cr_assert_eq (vol_flush (v), 0, "%s", cairn_errmsg ());
  }
  for (int i = 0; i < 150; i++) {
    random_range (&r, &off, &len);
    check_read (v, model, buf, off, len);
  }
  check_read (v, model, buf, 0, VOL_SIZE);

  /* Damage one written (non-zero) block on the device. */
  memset (bad, 0, BLK);
  do
    blk = rng_below (&r, VOL_SIZE / BLK);
  while (memcmp (model + blk * BLK, bad, BLK) == 0);
  addr = find_on_device (dev, model + blk * BLK);
  cr_assert_neq (addr, 0, "block %" PRIu64 " is not on the device", blk);
  memcpy (bad, model + blk * BLK, BLK);
  bad[rng_below (&r, BLK)] ^= (uint8_t) (1u << rng_below (&r, 8));
  cr_assert_eq (dev_pwrite (dev, bad, BLK, addr), 0);

  for (int i = 0; i < 150; i++) {
    random_range (&r, &off, &len);
    if (i % 3 == 0) {
      /* Make sure the damaged block is in some of the reads. */
      off = blk * BLK > off ? off : blk * BLK;
      if (len > VOL_SIZE - off)
        len = (uint32_t) (VOL_SIZE - off);
    }
    if (off < (blk + 1) * BLK && off + len > blk * BLK) {
      char want[64];

      cr_assert_eq (vol_pread (v, buf, len, off), -EIO, "read [%" PRIu64 ", +%"
                    PRIu32 ") covers damaged block %" PRIu64, off, len, blk);
      snprintf (want, sizeof want, "checksum mismatch reading block %" PRIu64 " ", blk);
      cr_assert (strstr (cairn_errmsg (), want) != NULL, "%s", cairn_errmsg ());
      failed++;
    }
    else
      check_read (v, model, buf, off, len);
  }
  cr_assert_gt (failed, 0);
  vol_stats (v, &st);
  cr_assert_eq (st.csum_errors, failed);

  /* Repaired, it reads again: nothing remembered the failure. */
  cr_assert_eq (dev_pwrite (dev, model + blk * BLK, BLK, addr), 0);
  check_read (v, model, buf, 0, VOL_SIZE);

  vol_close (v);
  cr_assert_eq (pool_close (pool), 0);
  assert_clean (dev);
  dev_close (dev);
  sha256_blocks_limit (SHA256_BLOCKS_BEST);
  free (model);
  free (buf);
}

Test (read, every_block_checked_across_extents_avx512)
{
  reads_across_extents (SHA256_BLOCKS_X16,
                        test_seed ("read.across_extents_avx512", 7));
}

Test (read, every_block_checked_across_extents_sha_ni)
{
  reads_across_extents (SHA256_BLOCKS_NI,
                        test_seed ("read.across_extents_sha_ni", 5));
}

Test (read, every_block_checked_across_extents_openssl)
{
  reads_across_extents (SHA256_BLOCKS_OPENSSL,
                        test_seed ("read.across_extents_openssl", 6));
}
