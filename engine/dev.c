/* Cairn engine, layer "dev": the wrappers every caller goes through, and
 * the table of checked blocks (dev.h, "Blocks whose copy...").
 *
 * They check that a request lies inside the device, call the backend and
 * count the bytes moved and the flushes, so that no backend repeats those
 * checks and every device, stacked or not, is counted the same way.  The
 * counters are updated with atomic builtins because nbdkit calls the engine
 * from many threads at once.
 *
 * A write ends its blocks' busy marks with their keys when its caller
 * hashed the data (dev_pwrite_hashed), and otherwise with a number never
 * used before (metadata, data written with digests it came with, a
 * discard): the first read checks such a block, as it would one claimed
 * for a read from the disk, and then notes it.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dev.h"
#include "sha256.h"

/* The table of checked blocks (dev.h, T1-T5): one 64-bit word an entry,
 * the entry of block blk at blk & mask.  An entry is
 *
 *   TRUST_EMPTY                  nothing known;
 *   a key (even)                 trust_key (blk, digest): trusted;
 *   busy (odd, < TRUST_NUMBERS)  2n - 1 while n writes are under way in
 *                                blocks of this entry (T2);
 *   a number (odd, above)        a read from the disk is under way, or a
 *                                write without digests ended: unique,
 *                                from next_number (T3, T5).
 *
 * One word, so that a reader never sees half of an entry; read and written
 * with atomic builtins, no lock.
 */
struct dev_trust {
  uint64_t mask;
  uint64_t *entry;
  uint64_t next_number;       /* odd; the next number handed out */
};

enum { TRUST_EMPTY = 0, TRUST_BUSY = 1 };
/* Busy marks count up to this many writes at once in one entry (far
 * more than nbdkit has threads); a mark at the limit stays, which only
 * keeps the entry from being trusted.
 */
#define TRUST_BUSY_MAX (UINT64_C (1) << 20)
#define TRUST_NUMBERS (2 * TRUST_BUSY_MAX + 1)
#define TRUST_ALIGN (2u << 20)          /* a huge page */

static inline bool
trust_is_busy (uint64_t v)
{
  return (v & 1) && v < TRUST_NUMBERS;
}

/* The key for block blk holding digest sha: the digest's first 8 bytes
 * mixed with the address, even, so that another block's entry in the same
 * slot, or this block with other data, matches only by a 2^-63 chance.
 */
static inline uint64_t
trust_key (uint64_t blk, const uint8_t *sha)
{
  uint64_t k;

  memcpy (&k, sha, sizeof k);
  k = (k ^ (blk + 1) * UINT64_C (0x9e3779b97f4a7c15)) & ~UINT64_C (1);
  return k ? k : 2;
}

/* A number no entry has held (odd, above the busy marks). */
static inline uint64_t
trust_number (struct dev_trust *t)
{
  return __atomic_fetch_add (&t->next_number, 2, __ATOMIC_RELAXED);
}

/* The entries of the blocks that [off, off + len) touches, each once: the
 * first block and how many.
 */
static uint64_t
trust_span (const struct dev_trust *t, uint64_t off, uint64_t len,
            uint64_t *firstp)
{
  uint64_t first = off / DEV_TRUST_BLOCK;
  uint64_t end = (off + len + DEV_TRUST_BLOCK - 1) / DEV_TRUST_BLOCK;

  *firstp = first;
  if (len == 0)
    return 0;
  return end - first > t->mask ? t->mask + 1 : end - first;
}

/* Mark busy every block that [off, off + len) touches (T2): one more
 * write under way in each entry.
 */
static void
trust_mark (struct dev_trust *t, uint64_t off, uint64_t len)
{
  uint64_t first, n = trust_span (t, off, len, &first);

  for (uint64_t b = first; b < first + n; b++) {
    uint64_t *e = &t->entry[b & t->mask];
    uint64_t v = __atomic_load_n (e, __ATOMIC_SEQ_CST), nv;

    do
      nv = !trust_is_busy (v) ? TRUST_BUSY
           : v + 2 < TRUST_NUMBERS ? v + 2 : v;
    while (!__atomic_compare_exchange_n (e, &v, nv, false, __ATOMIC_SEQ_CST,
                                         __ATOMIC_SEQ_CST));
  }
}

/* End a write's busy marks (T2, T3): one write fewer under way in each
 * entry; the last one leaves the block's key (digests in shas, one a
 * block, when the range is whole blocks) or a new number.
 */
static void
trust_release (struct dev_trust *t, uint64_t off, uint64_t len,
               const uint8_t *shas)
{
  uint64_t first, n = trust_span (t, off, len, &first);

  if (off % DEV_TRUST_BLOCK || len % DEV_TRUST_BLOCK ||
      len / DEV_TRUST_BLOCK != n)
    shas = NULL;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t b = first + i, *e = &t->entry[b & t->mask];
    uint64_t v = __atomic_load_n (e, __ATOMIC_SEQ_CST), nv;

    do {
      if (!trust_is_busy (v))
        break;                  /* not ours to end: cannot happen */
      if (v + 2 >= TRUST_NUMBERS)
        break;                  /* a mark at the limit stays */
      nv = v != TRUST_BUSY ? v - 2
           : shas ? trust_key (b, shas + i * 32) : trust_number (t);
    } while (!__atomic_compare_exchange_n (e, &v, nv, false, __ATOMIC_SEQ_CST,
                                           __ATOMIC_SEQ_CST));
  }
}

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

/* Sum the counters of every CPU. */
void
dev_counts (const struct cairn_dev *dev, struct dev_counts *out)
{
  COUNTERS_SUM (dev->counts, out);
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
  DEV_COUNT (dev, bytes_read, len);
  return 0;
}

/* Write len bytes at off, all or nothing; trust the blocks with shas when
 * it is not NULL and the write succeeded.
 */
int
dev_pwrite_hashed (struct cairn_dev *dev, const void *buf, size_t len,
                   uint64_t off, const uint8_t *shas)
{
  int r;

  r = dev_check_range (dev, "write", len, off);
  if (r < 0)
    return r;
  if (dev->trust)
    trust_mark (dev->trust, off, len);
  r = dev->ops->pwrite (dev, buf, len, off);
  if (dev->trust)
    trust_release (dev->trust, off, len, r == 0 ? shas : NULL);
  if (r < 0)
    return r;
  DEV_COUNT (dev, bytes_written, len);
  return 0;
}

int
dev_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  return dev_pwrite_hashed (dev, buf, len, off, NULL);
}

/* Make every completed write durable. */
int
dev_flush (struct cairn_dev *dev)
{
  int r;

  r = dev->ops->flush (dev);
  if (r < 0)
    return r;
  DEV_COUNT (dev, flushes, 1);
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
  if (dev->trust)
    trust_mark (dev->trust, off, len);
  r = dev->ops->discard (dev, off, len);
  if (dev->trust)
    trust_release (dev->trust, off, len, NULL);
  return r;
}

/* Let the host's cache drop the clean pages of a range (dev.h). */
void
dev_drop_cached (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  if (dev->ops->drop_cached && len <= dev->size && off <= dev->size - len)
    dev->ops->drop_cached (dev, off, len);
}

/* How many copies the device keeps (dev.h). */
unsigned
dev_copies (struct cairn_dev *dev)
{
  return dev->ops->copies ? dev->ops->copies (dev) : 1;
}

/* Does buf hash to the digest sha (a dev_check_fn)? */
bool
dev_check_sha256 (const void *buf, size_t len, void *sha)
{
  uint8_t got[SHA256_LEN];

  sha256 (buf, len, got);
  return memcmp (got, sha, SHA256_LEN) == 0;
}

/* Rewrite the copies in `failed` with buf, which passed its check (H1);
 * how many were rewritten.  A failed rewrite is counted by the member
 * (WRITE) and not fatal: the caller has its good copy.
 */
static unsigned
repair_copies (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off,
               uint32_t failed)
{
  unsigned done = 0;

  for (unsigned k = 0; failed >> k; k++)
    if ((failed & (1u << k)) &&
        dev->ops->pwrite_copy (dev, buf, len, off, k) == 0) {
      dev->ops->note_damage (dev, off, len, k, true);
      done++;
    }
  return done;
}

/* Read a range, check it, and heal it from another copy (dev.h, H1, H2). */
int
dev_pread_checked (struct cairn_dev *dev, void *buf, size_t len, uint64_t off,
                   bool repair, dev_check_fn check, void *opaque)
{
  unsigned n = dev_copies (dev), good = n;
  uint32_t failed = 0;          /* copies read and found damaged */
  int r, err = -EBADMSG;

  if (n == 1) {
    r = dev_pread (dev, buf, len, off);
    if (r < 0)
      return r;
    return check (buf, len, opaque) ? 0 : -EBADMSG;
  }
  r = dev_check_range (dev, "read", len, off);
  if (r < 0)
    return r;
  for (unsigned k = 0; k < n && good == n; k++) {
    r = dev->ops->pread_copy (dev, buf, len, off, k);
    if (r == 0 && check (buf, len, opaque))
      good = k;
    else if (r == 0) {
      failed |= 1u << k;
      dev->ops->note_damage (dev, off, len, k, false);
    }
    else if (r != -ENXIO) {
      failed |= 1u << k;          /* the member counted the read error */
      if (err == -EBADMSG)
        err = r;
    }
  }
  if (good == n) {
    if (failed == 0)
      return cairn_fail (-EIO, "%s: no copy of [%" PRIu64 ", +%zu) can be "
                         "read: the devices holding it are missing", dev->name,
                         off, len);
    return cairn_fail (err == -EBADMSG ? -EBADMSG : -EIO,
                       "%s: every copy of [%" PRIu64 ", +%zu) is damaged",
                       dev->name, off, len);
  }
  DEV_COUNT (dev, bytes_read, len);
  if (repair)
    repair_copies (dev, buf, len, off, failed);
  cairn_error_clear ();
  return 0;
}

/* Rewrite the copies in `failed` from one outside it that passes the check
 * (dev.h).
 */
int
dev_repair_copies (struct cairn_dev *dev, size_t len, uint64_t off,
                   dev_check_fn check, void *opaque, uint32_t failed,
                   unsigned *repairedp)
{
  unsigned n = dev_copies (dev);
  uint8_t *buf;
  int r = -EBADMSG;

  *repairedp = 0;
  if (n == 1 || failed == 0)
    return 0;
  buf = malloc (len);
  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory repairing %s", dev->name);
  for (unsigned k = 0; k < n && r < 0; k++)
    if (!(failed & (1u << k)) &&
        dev->ops->pread_copy (dev, buf, len, off, k) == 0 &&
        check (buf, len, opaque))
      r = 0;
  if (r == 0)
    *repairedp = repair_copies (dev, buf, len, off, failed);
  else
    r = cairn_fail (-EBADMSG, "%s: no good copy of [%" PRIu64 ", +%zu) is "
                    "left to repair from", dev->name, off, len);
  free (buf);
  return r;
}

/* Read every copy of a range, check each, and heal the bad ones when asked
 * (dev.h).
 */
int
dev_scrub_copies (struct cairn_dev *dev, size_t len, uint64_t off,
                  dev_check_fn check, void *opaque, unsigned flags,
                  struct dev_scrub_stats *st, uint32_t *failedp)
{
  bool repair = flags & DEV_SCRUB_REPAIR, quiet = flags & DEV_SCRUB_QUIET;
  unsigned n = dev_copies (dev);
  uint8_t *good = NULL, *buf;
  uint32_t failed = 0;
  int r;

  assert (len <= DEV_SCRUB_MAX);
  if (failedp)
    *failedp = 0;
  buf = malloc (2 * len);
  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory scrubbing %s", dev->name);
  st->ranges += !quiet;
  for (unsigned k = 0; k < n; k++) {
    uint8_t *p = good ? buf + len : buf;

    r = n == 1 ? dev_pread (dev, p, len, off)
               : dev->ops->pread_copy (dev, p, len, off, k);
    if (r == -ENXIO)
      continue;                   /* on a missing device: not damage */
    if (r == 0 && check (p, len, opaque)) {
      good = good ? good : p;
      continue;
    }
    failed |= 1u << k;
    if (quiet)
      continue;
    st->bad_copies++;
    if (r == 0 && n > 1)
      dev->ops->note_damage (dev, off, len, k, false);
  }
  if (good == NULL && failed && !quiet)
    st->lost++;
  else if (failed && good && repair)
    st->repaired += repair_copies (dev, good, len, off, failed);
  if (failedp)
    *failedp = failed;
  free (buf);
  cairn_error_clear ();
  return 0;
}

/* Read every copy of a range, check each, and heal the bad ones (dev.h). */
int
dev_scrub (struct cairn_dev *dev, size_t len, uint64_t off, dev_check_fn check,
           void *opaque, struct dev_scrub_stats *st)
{
  return dev_scrub_copies (dev, len, off, check, opaque, DEV_SCRUB_REPAIR, st,
                           NULL);
}

/* Close the device; a NULL device is ignored. */
void
dev_close (struct cairn_dev *dev)
{
  if (dev) {
    dev_trust_disable (dev);
    dev->ops->close (dev);
  }
}

/* ---------------------------------------------------------------- trust */

/* Start trusting checked copies in the host's cache (dev.h). */
int
dev_trust_enable (struct cairn_dev *dev, size_t entries)
{
  uint64_t blocks = (dev->size + DEV_TRUST_BLOCK - 1) / DEV_TRUST_BLOCK;
  size_t n = 1;
  struct dev_trust *t;

  if (dev->ops->pread_cached == NULL)
    return cairn_fail (-EOPNOTSUPP, "%s: a %s device cannot tell a cached read",
                       dev->name, dev->ops->kind);
  while (n < entries && n < blocks)
    n *= 2;
  t = malloc (sizeof *t);
  if (t == NULL || posix_memalign ((void **) &t->entry, TRUST_ALIGN,
                                   n * sizeof *t->entry) != 0) {
    free (t);
    return cairn_fail (-ENOMEM, "%s: out of memory for the table of checked "
                       "blocks (%zu entries)", dev->name, n);
  }
  /* Every read looks up one entry at random: in huge pages that is a
   * cache miss and not a page walk as well (with 4 KiB pages the lookup
   * was 3.7% of a cached random read's time).  Only a hint.
   */
  madvise (t->entry, n * sizeof *t->entry, MADV_HUGEPAGE);
  memset (t->entry, 0, n * sizeof *t->entry);
  t->mask = n - 1;
  t->next_number = TRUST_NUMBERS;
  if (dev->ops->no_readahead)
    dev->ops->no_readahead (dev);
  dev_trust_disable (dev);
  dev->trust = t;
  return 0;
}

/* Check every read again from now on. */
void
dev_trust_disable (struct cairn_dev *dev)
{
  if (dev->trust) {
    free (dev->trust->entry);
    free (dev->trust);
    dev->trust = NULL;
  }
}

/* Read what the host's cache holds of a range, without I/O (T1). */
int
dev_pread_cached (struct cairn_dev *dev, void *buf, size_t len, uint64_t off,
                  size_t *gotp)
{
  int r;

  *gotp = 0;
  if (dev->ops->pread_cached == NULL)
    return 0;
  r = dev_check_range (dev, "read", len, off);
  if (r < 0)
    return r;
  r = dev->ops->pread_cached (dev, buf, len, off, gotp);
  if (r < 0)
    return r;
  DEV_COUNT (dev, bytes_read, *gotp);
  return 0;
}

/* How the calling thread's cached reads are watched (T1). */
const char *
dev_cache_watch (struct cairn_dev *dev)
{
  return dev->ops->cache_watch ? dev->ops->cache_watch (dev) : NULL;
}

/* The entry of block blk as it is now (T3). */
uint64_t
dev_trust_peek (struct cairn_dev *dev, uint64_t blk)
{
  struct dev_trust *t = dev->trust;

  return t ? __atomic_load_n (&t->entry[blk & t->mask], __ATOMIC_SEQ_CST)
           : TRUST_BUSY;
}

/* Claim block blk's entry for a read that may come from the disk (T5),
 * unless a write holds it (T2).
 */
uint64_t
dev_trust_claim (struct cairn_dev *dev, uint64_t blk)
{
  struct dev_trust *t = dev->trust;
  uint64_t *e, v, c;

  if (t == NULL)
    return TRUST_BUSY;
  e = &t->entry[blk & t->mask];
  v = __atomic_load_n (e, __ATOMIC_SEQ_CST);
  c = trust_number (t);
  do
    if (trust_is_busy (v))
      return TRUST_BUSY;
  while (!__atomic_compare_exchange_n (e, &v, c, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST));
  return c;
}

/* Read a range into the host's cache ahead of its readers (dev.h, T4). */
uint64_t
dev_prefetch (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  unsigned char held[DEV_RESIDENT_MAX];
  uint64_t asked = 0;

  if (dev->trust == NULL || dev->ops->prefetch == NULL ||
      dev->ops->resident == NULL || off % DEV_TRUST_BLOCK ||
      len % DEV_TRUST_BLOCK || len > dev->size || off > dev->size - len)
    return 0;
  while (len > 0) {
    uint64_t n = MIN (len / DEV_TRUST_BLOCK, DEV_RESIDENT_MAX);
    uint64_t blk = off / DEV_TRUST_BLOCK;

    if (dev->ops->resident (dev, off, n * DEV_TRUST_BLOCK, held) < 0)
      memset (held, 0, n);
    for (uint64_t i = 0, j; i < n; i = j) {
      if (held[i]) {
        j = i + 1;
        continue;
      }
      for (j = i; j < n && !held[j]; j++)
        dev_trust_claim (dev, blk + j);
      dev->ops->prefetch (dev, off + i * DEV_TRUST_BLOCK,
                          (j - i) * DEV_TRUST_BLOCK);
      asked += (j - i) * DEV_TRUST_BLOCK;
    }
    off += n * DEV_TRUST_BLOCK;
    len -= n * DEV_TRUST_BLOCK;
  }
  if (asked)
    DEV_COUNT (dev, bytes_prefetched, asked);
  return asked;
}

/* Whether block blk is held with digest sha (T1). */
bool
dev_trust_holds (struct cairn_dev *dev, uint64_t blk, const uint8_t sha[32])
{
  struct dev_trust *t = dev->trust;

  return t && __atomic_load_n (&t->entry[blk & t->mask], __ATOMIC_SEQ_CST) ==
              trust_key (blk, sha);
}

/* Replace an entry that is still `seen` by block blk with digest sha. */
static void
trust_swap (struct dev_trust *t, uint64_t blk, const uint8_t *sha,
            uint64_t seen)
{
  __atomic_compare_exchange_n (&t->entry[blk & t->mask], &seen,
                               trust_key (blk, sha), false, __ATOMIC_SEQ_CST,
                               __ATOMIC_SEQ_CST);
}

/* Add a checked block unless its entry changed or a write held it (T3). */
void
dev_trust_note (struct cairn_dev *dev, uint64_t blk, const uint8_t sha[32],
                uint64_t seen)
{
  if (dev->trust && !trust_is_busy (seen))
    trust_swap (dev->trust, blk, sha, seen);
}

/* The table's half of a write made around the device (dev.h). */
void
dev_trust_begin_write (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  if (dev->trust)
    trust_mark (dev->trust, off, len);
}

void
dev_trust_end_write (struct cairn_dev *dev, uint64_t off, uint64_t len,
                     const uint8_t *shas)
{
  if (dev->trust)
    trust_release (dev->trust, off, len, shas);
}
