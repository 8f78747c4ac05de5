/* Cairn fuzz harness: damaged pool images (tests/fuzz/README.md).
 *
 * A small pool (volume "a" with snapshot s1, a clone "c" of it, each with
 * data of its own) is built once; its blocks are classified from the
 * pristine image: SUPER (before the data area: the superblock ring),
 * DATA (allocated, holding a volume's data), META (allocated, not data:
 * nodes and the space map) and FREE.  The input is a list of mutations,
 * each sel u16, off u16, n u8 (little-endian), then (n & 15) + 1 bytes
 * XORed into the image at byte off % 4096 of block sel % (number of
 * nonzero blocks) of the pristine image, or of any block when sel's top bit
 * is set.  The damaged pool is then opened read-only, listed, every export
 * read whole, and fsck run on it.
 *
 * What must hold, beyond no crash, hang, leak or undefined behaviour (and
 * only where it is decidable):
 *  1. no wrong read: when the pool opens at the generation it was built
 *     at, a read that succeeds returns the export's bytes;
 *  2. damage in FREE blocks only is no damage: the pool opens at its
 *     generation, lists and reads every export exactly, and fsck is
 *     clean;
 *  3. damage to a META block is never called clean: when the pool opens at
 *     its generation, fsck reports problems (every node and space map
 *     block sits under a SHA-256 that the newest superblock reaches).
 * DATA damage must make reads fail (1) but fsck does not read data, and
 * SUPER damage may legitimately make the pool open at an older
 * generation, where this harness knows no expected contents.
 */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "space.h"
#include "volume.h"

#define VOL_BYTES (128u << 10)

enum kind { FREE, SUPER, DATA, META };
static const char *const kind_name[] = { "free", "super", "data", "meta" };

static const char *const exports[] = { "a", "a@s1", "c" };
#define NEXPORTS (sizeof exports / sizeof exports[0])

static struct fuzz_image image;
static uint8_t truth[NEXPORTS][VOL_BYTES];
static uint8_t kind[FUZZ_POOL_BLOCKS];
static uint64_t generation;
static bool ready;

static int
fill (struct cairn_pool *pool)
{
  int r;

  if ((r = vol_create (pool, "a", VOL_BYTES, NULL)) < 0 ||
      (r = fuzz_fill_volume (pool, "a", 'a', 0, 64 << 10)) < 0 ||
      (r = snap_create (pool, "a", "s1")) < 0 ||
      (r = fuzz_fill_volume (pool, "a", 'b', 16 << 10, 8 << 10)) < 0 ||
      (r = vol_clone (pool, "a@s1", "c")) < 0 ||
      (r = fuzz_fill_volume (pool, "c", 'c', 96 << 10, 8 << 10)) < 0)
    return r;
  return pool_commit (pool);
}

/* Mark free blocks. */
static int
mark_free (void *opaque, uint64_t start, uint64_t len)
{
  for (uint64_t b = start; b < start + len && b < FUZZ_POOL_BLOCKS; b++)
    kind[b] = FREE;
  return 0;
}

/* Read the pristine pool: the truth of each export and each block's kind. */
static void
setup (void)
{
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct pool_info info;

  fuzz_image_build (&image, fill);
  dev = fuzz_image_dev (&image);
  if (fuzz_pool_open (dev, true, &pool) < 0)
    fuzz_die ("opening the pristine pool: %s", cairn_errmsg ());
  pool_info (pool, &info);
  generation = info.generation;
  for (size_t e = 0; e < NEXPORTS; e++) {
    struct cairn_volume *v;

    if (vol_open (pool, exports[e], &v) < 0 ||
        vol_pread (v, truth[e], VOL_BYTES, 0) < 0)
      fuzz_die ("reading the pristine %s: %s", exports[e], cairn_errmsg ());
    vol_close (v);
  }
  for (uint64_t b = 0; b < FUZZ_POOL_BLOCKS; b++)
    kind[b] = b < info.data_start_block ? SUPER : META;
  if (space_foreach_free (pool_space (pool), true, mark_free, NULL) < 0)
    fuzz_die ("listing free space: %s", cairn_errmsg ());
  /* Allocated blocks that hold an export's data block are DATA. */
  for (size_t i = 0; i < image.n; i++) {
    uint32_t b = image.blocks[i];

    for (size_t e = 0; kind[b] == META && e < NEXPORTS; e++)
      for (size_t o = 0; o < VOL_BYTES; o += FUZZ_BLOCK)
        if (memcmp (image.data + i * FUZZ_BLOCK, truth[e] + o,
                    FUZZ_BLOCK) == 0) {
          kind[b] = DATA;
          break;
        }
  }
  /* An allocated block that is all zeros holds no node (nodes have a
   * header): it is data of zeros, which the image does not keep.
   */
  for (uint64_t b = info.data_start_block, i = 0; b < FUZZ_POOL_BLOCKS; b++) {
    while (i < image.n && image.blocks[i] < b)
      i++;
    if (kind[b] == META && (i == image.n || image.blocks[i] != b))
      kind[b] = DATA;
  }
  if (getenv ("CAIRN_FUZZ_VERBOSE"))
    for (size_t i = 0; i < image.n; i++)
      fprintf (stderr, "fuzz-pool: image block %zu is block %" PRIu32
               ", %s\n", i, image.blocks[i],
               kind_name[kind[image.blocks[i]]]);
  (void) pool_close (pool);
  dev_close (dev);
}

/* The pristine content of block b: its image copy, or NULL for zeros. */
static const uint8_t *
pristine (uint64_t b)
{
  size_t lo = 0, hi = image.n;

  while (lo < hi) {
    size_t mid = (lo + hi) / 2;

    if (image.blocks[mid] < b)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < image.n && image.blocks[lo] == b
    ? image.data + lo * FUZZ_BLOCK : NULL;
}

/* Apply the input's mutations; say which kinds of block differ from the
 * pristine image afterwards (two mutations may undo each other).
 */
static unsigned
mutate (struct cairn_dev *dev, const uint8_t *p, const uint8_t *end)
{
  static uint8_t touched[FUZZ_POOL_BLOCKS];
  uint8_t block[FUZZ_BLOCK];
  unsigned kinds = 0;

  memset (touched, 0, sizeof touched);
  while (end - p >= 5) {
    unsigned sel = p[0] | p[1] << 8, off = (p[2] | p[3] << 8) % FUZZ_BLOCK;
    size_t n = (p[4] & 15) + 1;
    uint64_t b;

    p += 5;
    if (n > (size_t) (end - p))
      n = end - p;
    if (n > FUZZ_BLOCK - off)
      n = FUZZ_BLOCK - off;
    b = sel & 0x8000 ? (sel & 0x7fff) % FUZZ_POOL_BLOCKS
                     : image.blocks[sel % image.n];
    if (dev_pread (dev, block, FUZZ_BLOCK, b * FUZZ_BLOCK) < 0)
      fuzz_die ("dev_pread: %s", cairn_errmsg ());
    for (size_t i = 0; i < n; i++)
      block[off + i] ^= p[i];
    if (dev_pwrite (dev, block, FUZZ_BLOCK, b * FUZZ_BLOCK) < 0)
      fuzz_die ("dev_pwrite: %s", cairn_errmsg ());
    touched[b] = 1;
    p += n;
  }
  for (uint64_t b = 0; b < FUZZ_POOL_BLOCKS; b++) {
    const uint8_t *orig;
    bool changed = false;

    if (!touched[b])
      continue;
    if (dev_pread (dev, block, FUZZ_BLOCK, b * FUZZ_BLOCK) < 0)
      fuzz_die ("dev_pread: %s", cairn_errmsg ());
    orig = pristine (b);
    for (size_t i = 0; !changed && i < FUZZ_BLOCK; i++)
      changed = block[i] != (orig ? orig[i] : 0);
    if (!changed)
      continue;
    kinds |= 1u << kind[b];
    if (getenv ("CAIRN_FUZZ_VERBOSE"))
      fprintf (stderr, "fuzz-pool: block %" PRIu64 " (%s) is damaged\n", b,
               kind_name[kind[b]]);
  }
  return kinds;
}

/* What a listing gave. */
struct listed {
  size_t entries, damaged;
};

/* Count a listed entry. */
static int
count (void *opaque, const struct vol_info *info)
{
  ((struct listed *) opaque)->entries++;
  return 0;
}

/* Count a damaged record. */
static int
count_damage (void *opaque, const struct vol_damage *d)
{
  ((struct listed *) opaque)->damaged++;
  return 0;
}

/* Open, list and read every export (invariants 1 and 2). */
static bool
use_pool (struct cairn_dev *dev, bool exact)
{
  static uint8_t got[VOL_BYTES];
  struct cairn_pool *pool;
  struct pool_info info;
  struct listed listed = { 0 };
  bool newest;

  if (fuzz_pool_open (dev, true, &pool) < 0) {
    if (exact)
      fuzz_die ("undamaged pool does not open: %s", cairn_errmsg ());
    return false;
  }
  pool_info (pool, &info);
  newest = info.generation == generation;
  if (exact && !newest)
    fuzz_die ("undamaged pool opens at generation %" PRIu64 ", not %" PRIu64,
              info.generation, generation);
  if (vol_list_tolerant (pool, true, count, count_damage, &listed) < 0 &&
      exact)
    fuzz_die ("undamaged pool does not list: %s", cairn_errmsg ());
  if (exact && (listed.entries != NEXPORTS || listed.damaged))
    fuzz_die ("undamaged pool lists %zu exports (%zu damaged), not %zu",
              listed.entries, listed.damaged,
              (size_t) NEXPORTS);
  for (size_t e = 0; e < NEXPORTS; e++) {
    struct cairn_volume *v;

    if (vol_open (pool, exports[e], &v) < 0) {
      if (exact)
        fuzz_die ("%s of an undamaged pool does not open: %s", exports[e],
                  cairn_errmsg ());
      continue;
    }
    if (newest && vol_size (v) != VOL_BYTES)
      fuzz_die ("%s has %" PRIu64 " bytes, not %u", exports[e], vol_size (v),
                VOL_BYTES);
    for (size_t o = 0; o < vol_size (v) && o < VOL_BYTES; o += 16384) {
      if (vol_pread (v, got + o, 16384, o) < 0) {
        if (exact)
          fuzz_die ("%s of an undamaged pool fails a read at %zu: %s",
                    exports[e], o, cairn_errmsg ());
        continue;
      }
      if (newest && memcmp (got + o, truth[e] + o, 16384) != 0)
        fuzz_die ("wrong read: %s at %zu..%zu is neither its data nor an "
                  "error", exports[e], o, o + 16384);
    }
    vol_close (v);
  }
  (void) pool_close (pool);
  return newest;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct cairn_dev *dev;
  unsigned kinds;
  bool newest;
  int64_t problems;

  if (!ready) {
    setup ();
    ready = true;
  }
  dev = fuzz_image_dev (&image);
  kinds = mutate (dev, data, data + size);
  newest = use_pool (dev, (kinds & ~(1u << FREE)) == 0);
  problems = fuzz_fsck (dev, getenv ("CAIRN_FUZZ_VERBOSE") != NULL);
  if (getenv ("CAIRN_FUZZ_VERBOSE"))
    fprintf (stderr, "fuzz-pool: damaged kinds %#x, newest %d, fsck %" PRId64
             "\n", kinds, newest, problems);
  if ((kinds & ~(1u << FREE)) == 0 && problems != 0)
    fuzz_die ("fsck calls free-space damage a problem (%" PRId64 ")",
              problems);
  if ((kinds & (1u << META)) && newest && problems == 0)
    fuzz_die ("fsck calls a pool with a damaged metadata block clean");
  dev_close (dev);
  return 0;
}
