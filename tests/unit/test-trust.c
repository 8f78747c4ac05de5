/* Unit tests for the table of checked blocks (engine/dev.h, T1-T5) and the
 * read path that uses it (engine/volume-read.c): a copy of a block that the
 * host's page cache holds and that was checked, or written from hashed
 * data, is not checked again; a block that comes from the disk always is.
 *
 * These tests need a real file in a real filesystem (the memory device has
 * no page cache and checks every read).  "The page leaves the cache" is
 * made with fsync and POSIX_FADV_DONTNEED on the whole file; "the disk rots
 * a block" is a write through another descriptor followed by the same.
 * The last test checks which pages a write lets go (volume.c, struct held),
 * with mincore (cached_pages_in).
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "dev.h"
#include "sha256.h"
#include "volume.h"
#include "test-pool.h"
#include "test-util.h"

#define BLK 4096u
#define VOL_SIZE (8u << 20)

static char tmpdir[64];
static char pool_path[128];

static void
make_tmpdir (void)
{
  strcpy (tmpdir, "/tmp/cairn-test-trust.XXXXXX");
  cr_assert_not_null (mkdtemp (tmpdir), "mkdtemp: %s", strerror (errno));
  snprintf (pool_path, sizeof pool_path, "%s/pool", tmpdir);
}

static void
remove_tmpdir (void)
{
  unlink (pool_path);
  rmdir (tmpdir);
}

TestSuite (trust, .init = make_tmpdir, .fini = remove_tmpdir);

/* A new pool in a file of size bytes. */
static struct cairn_dev *
file_pool (uint64_t size)
{
  struct cairn_dev *dev;

  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE, size, &dev), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (pool_format (dev, NULL, NULL), 0, "%s", cairn_errmsg ());
  return dev;
}

/* Write back the pool file and drop its pages from the cache. */
static void
evict (void)
{
  int fd = open (pool_path, O_RDONLY | O_CLOEXEC);

  cr_assert_geq (fd, 0, "%s: %s", pool_path, strerror (errno));
  cr_assert_eq (fsync (fd), 0);
  cr_assert_eq (posix_fadvise (fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  close (fd);
}

/* How many pages of [off, off + len) of the pool file are in the cache
 * (mincore on a mapping of the range, which brings nothing in); len 0:
 * to the end of the file.  off is a multiple of the page size.
 */
static size_t
cached_pages_in (uint64_t off, uint64_t len)
{
  int fd = open (pool_path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  unsigned char *vec;
  size_t pages, n = 0;
  void *p;

  cr_assert_geq (fd, 0);
  if (len == 0) {
    cr_assert_eq (fstat (fd, &st), 0);
    len = (uint64_t) st.st_size - off;
  }
  pages = (size_t) (len + BLK - 1) / BLK;
  vec = malloc (pages);
  cr_assert_not_null (vec);
  p = mmap (NULL, (size_t) len, PROT_READ, MAP_SHARED, fd, (off_t) off);
  cr_assert_neq (p, MAP_FAILED, "mmap: %s", strerror (errno));
  cr_assert_eq (mincore (p, (size_t) len, vec), 0, "mincore: %s",
                strerror (errno));
  for (size_t i = 0; i < pages; i++)
    n += vec[i] & 1;
  munmap (p, (size_t) len);
  close (fd);
  free (vec);
  return n;
}

/* How many pages of the whole pool file are in the cache. */
static size_t
cached_pages (void)
{
  return cached_pages_in (0, 0);
}

/* Evict until no page of the pool file is in the cache (nothing else may
 * use the pool meanwhile): the kernel skips a page that something holds
 * for a moment (reclaim, compaction), which on a busy machine happens.
 */
static void
evict_all (void)
{
  size_t left = 0;

  for (int i = 0; i < 200; i++) {
    evict ();
    left = cached_pages ();
    if (left == 0)
      return;
    usleep (10000);
  }
  cr_assert_fail ("%zu pages of the pool file stay in the cache", left);
}

/* Flip one bit of the block at byte addr of the pool file, from outside
 * the engine, through the page cache (a second flip mends it).
 */
static void
flip (uint64_t addr)
{
  uint8_t b[BLK];
  int fd = open (pool_path, O_RDWR | O_CLOEXEC);

  cr_assert_geq (fd, 0, "%s: %s", pool_path, strerror (errno));
  cr_assert_eq (pread (fd, b, BLK, (off_t) addr), BLK);
  b[100] ^= 0x10;
  cr_assert_eq (pwrite (fd, b, BLK, (off_t) addr), BLK);
  close (fd);
}

/* flip, then let the page leave the cache: what a rotting disk does. */
static void
rot (uint64_t addr)
{
  flip (addr);
  evict_all ();
}

/* The byte address of the block of the pool file holding data, or 0. */
static uint64_t
find_block (const uint8_t *data)
{
  uint8_t b[BLK];
  uint64_t found = 0;
  int fd = open (pool_path, O_RDONLY | O_CLOEXEC);

  cr_assert_geq (fd, 0);
  for (uint64_t a = POOL_DATA_START; found == 0; a += BLK) {
    ssize_t n = pread (fd, b, BLK, (off_t) a);
    if (n != BLK)
      break;
    if (memcmp (b, data, BLK) == 0)
      found = a;
  }
  close (fd);
  return found;
}

static uint64_t
trusted (struct cairn_dev *dev)
{
  struct dev_counts dc;

  dev_counts (dev, &dc);
  return dc.blocks_trusted;
}

/* Read [off, off + len) and compare it with want. */
static void
read_equal (struct cairn_volume *v, const uint8_t *want, uint64_t off,
            uint32_t len)
{
  uint8_t *buf = malloc (len);

  cr_assert_not_null (buf);
  cr_assert_eq (vol_pread (v, buf, len, off), 0, "%s", cairn_errmsg ());
  cr_assert (memcmp (buf, want, len) == 0, "read at %" PRIu64 " differs", off);
  free (buf);
}

/* ------------------------------------------------------ the table itself */

Test (trust, memory_devices_check_every_read)
{
  struct cairn_dev *dev = mem_pool (64u << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);

  cr_assert (!dev_trusting (dev));
  cr_assert_eq (dev_trust_enable (dev, 64), -EOPNOTSUPP);
  cr_assert (strstr (cairn_errmsg (), "cannot tell a cached read") != NULL,
             "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* A read-only pool shares its file with other read-only openers: their
 * reads bring pages in that this process did not check.
 */
Test (trust, a_read_only_pool_checks_every_read)
{
  struct cairn_dev *dev = file_pool (8u << 20), *ro;
  struct pool_open_opts o = { .readonly = true };
  struct cairn_pool *pool;

  dev_close (dev);
  cr_assert_eq (dev_file_open (pool_path, DEV_RDONLY, 0, &ro), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (pool_open (ro, &o, &pool), 0, "%s", cairn_errmsg ());
  cr_assert (!dev_trusting (ro), "a read-only pool trusts cached copies");
  cr_assert_eq (pool_close (pool), 0);
  dev_close (ro);
}

Test (trust, a_block_is_trusted_only_with_its_own_digest)
{
  struct cairn_dev *dev = file_pool (8u << 20);
  uint8_t data[BLK], other_data[BLK], sha[SHA256_LEN], other[SHA256_LEN];

  /* 16 entries: blocks 3 and 19 share one. */
  cr_assert_eq (dev_trust_enable (dev, 16), 0, "%s", cairn_errmsg ());
  fill_pattern (data, BLK, 1);
  sha256 (data, BLK, sha);
  fill_pattern (other_data, BLK, 2);
  sha256 (other_data, BLK, other);

  cr_assert (!dev_trust_holds (dev, 3, sha), "an empty table trusts nothing");
  cr_assert_eq (dev_pwrite_hashed (dev, data, BLK, 3 * BLK, sha), 0);
  cr_assert (dev_trust_holds (dev, 3, sha));
  cr_assert (!dev_trust_holds (dev, 3, other), "another digest matched");
  cr_assert (!dev_trust_holds (dev, 19, sha), "another block matched");

  /* The block that shares the entry takes it. */
  cr_assert_eq (dev_pwrite_hashed (dev, other_data, BLK, 19 * BLK, other), 0);
  cr_assert (dev_trust_holds (dev, 19, other));
  cr_assert (!dev_trust_holds (dev, 3, sha), "evicted entry still trusted");
  dev_close (dev);
}

/* T2 and T3: a write or discard through the device ends the trust in a
 * block, and a reader that looked before it cannot put it back; one that
 * looked after a write without digests can, once it has checked.
 */
Test (trust, a_write_ends_trust_and_a_late_reader_cannot_restore_it)
{
  struct cairn_dev *dev = file_pool (8u << 20);
  uint8_t data[BLK], sha[SHA256_LEN], sha2[SHA256_LEN];
  uint64_t seen;

  cr_assert_eq (dev_trust_enable (dev, DEV_TRUST_ENTRIES), 0);
  fill_pattern (data, BLK, 1);
  sha256 (data, BLK, sha);
  cr_assert_eq (dev_pwrite_hashed (dev, data, BLK, 5 * BLK, sha), 0);
  cr_assert (dev_trust_holds (dev, 5, sha));
  seen = dev_trust_peek (dev, 5);       /* a reader looks ... */

  fill_pattern (data, BLK, 2);          /* ... the block is reused ... */
  sha256 (data, BLK, sha2);
  cr_assert_eq (dev_pwrite (dev, data, BLK, 5 * BLK), 0);
  cr_assert (!dev_trust_holds (dev, 5, sha), "trusted after a write");
  cr_assert (!dev_trust_holds (dev, 5, sha2), "trusted before it was noted");
  dev_trust_note (dev, 5, sha, seen);   /* ... the reader notes late */
  cr_assert (!dev_trust_holds (dev, 5, sha), "a late note restored trust");
  dev_trust_note (dev, 5, sha2, seen);
  cr_assert (!dev_trust_holds (dev, 5, sha2), "a note older than the write won");

  /* A reader that looks after that write, then checks, may note. */
  seen = dev_trust_peek (dev, 5);
  dev_trust_note (dev, 5, sha2, seen);
  cr_assert (dev_trust_holds (dev, 5, sha2));

  /* A discard ends it too; a reader that looks while a write is under
   * way notes nothing, before or after the write ends.
   */
  cr_assert_eq (dev_discard (dev, 5 * BLK, BLK), 0);
  cr_assert (!dev_trust_holds (dev, 5, sha2), "trusted after a discard");
  dev_trust_begin_write (dev, 5 * BLK, BLK);
  seen = dev_trust_peek (dev, 5);
  dev_trust_note (dev, 5, sha2, seen);
  cr_assert (!dev_trust_holds (dev, 5, sha2), "noted over a busy entry");
  dev_trust_end_write (dev, 5 * BLK, BLK, NULL);
  dev_trust_note (dev, 5, sha2, seen);
  cr_assert (!dev_trust_holds (dev, 5, sha2), "a note from a busy entry won");
  dev_close (dev);
}

/* T2: two blocks share an entry; the end of a write to one leaves the
 * entry busy while a write to the other is under way, so no reader can
 * trust the other's old copy in between (the old copy would then stand
 * for what the write puts there).  Nor can a read from the disk claim it.
 */
Test (trust, a_shared_entry_stays_busy_until_the_last_write_ends)
{
  struct cairn_dev *dev = file_pool (8u << 20);
  uint8_t a[BLK], b[BLK], sha_a[SHA256_LEN], sha_b[SHA256_LEN];
  uint64_t seen;

  cr_assert_eq (dev_trust_enable (dev, 16), 0, "%s", cairn_errmsg ());
  fill_pattern (a, BLK, 21);
  sha256 (a, BLK, sha_a);
  fill_pattern (b, BLK, 22);
  sha256 (b, BLK, sha_b);
  cr_assert_eq (dev_pwrite_hashed (dev, b, BLK, 19 * BLK, sha_b), 0);
  cr_assert (dev_trust_holds (dev, 19, sha_b));

  dev_trust_begin_write (dev, 19 * BLK, BLK);   /* block 19 is rewritten */
  cr_assert (!dev_trust_holds (dev, 19, sha_b), "trusted while written");
  cr_assert_eq (dev_pwrite_hashed (dev, a, BLK, 3 * BLK, sha_a), 0);
  cr_assert (!dev_trust_holds (dev, 3, sha_a),
             "a write ended another write's mark");
  seen = dev_trust_peek (dev, 19);              /* 19's old copy, checked */
  dev_trust_note (dev, 19, sha_b, seen);
  cr_assert (!dev_trust_holds (dev, 19, sha_b),
             "a block under a write was trusted with its old digest");
  seen = dev_trust_claim (dev, 19);
  dev_trust_note (dev, 19, sha_b, seen);
  cr_assert (!dev_trust_holds (dev, 19, sha_b), "a claim took a busy entry");

  dev_trust_end_write (dev, 19 * BLK, BLK, NULL);   /* the last write ends */
  cr_assert (!dev_trust_holds (dev, 19, sha_b));
  seen = dev_trust_peek (dev, 19);
  dev_trust_note (dev, 19, sha_a, seen);
  cr_assert (dev_trust_holds (dev, 19, sha_a), "the entry stayed busy");
  dev_close (dev);
}

/* T5: a read from the disk claims the entry; a note made with what was
 * seen before the claim fails, the claimer's own succeeds.
 */
Test (trust, a_claim_keeps_out_an_older_note)
{
  struct cairn_dev *dev = file_pool (8u << 20);
  uint8_t data[BLK], sha[SHA256_LEN];
  uint64_t before, claim;

  cr_assert_eq (dev_trust_enable (dev, DEV_TRUST_ENTRIES), 0);
  fill_pattern (data, BLK, 7);
  sha256 (data, BLK, sha);
  before = dev_trust_peek (dev, 9);
  claim = dev_trust_claim (dev, 9);
  cr_assert_neq (claim, before);
  cr_assert_neq (dev_trust_claim (dev, 9), claim, "two claims were equal");
  claim = dev_trust_peek (dev, 9);
  dev_trust_note (dev, 9, sha, before);
  cr_assert (!dev_trust_holds (dev, 9, sha), "a note older than the claim won");
  dev_trust_note (dev, 9, sha, claim);
  cr_assert (dev_trust_holds (dev, 9, sha));
  dev_close (dev);
}

Test (trust, a_cached_read_returns_what_the_cache_holds)
{
  struct cairn_dev *dev = file_pool (8u << 20);
  uint8_t data[4 * BLK], buf[4 * BLK];
  size_t got;

  fill_pattern (data, sizeof data, 3);
  cr_assert_eq (dev_pwrite (dev, data, sizeof data, 64 * BLK), 0);
  cr_assert_eq (dev_pread_cached (dev, buf, sizeof buf, 64 * BLK, &got), 0,
                "%s", cairn_errmsg ());
  cr_assert_eq (got, sizeof buf, "a page just written was not in the cache");
  cr_assert (memcmp (buf, data, sizeof data) == 0);
  cr_assert_eq (dev_pread_cached (dev, buf, BLK, 8u << 20, &got), -EINVAL,
                "a read beyond the end was not refused");
  dev_close (dev);
}

/* Cached reads of blocks that are not in the cache, rounds of them, in a
 * pool opened with flags: the read finds its page missing and asks the
 * kernel for it, and when the disk answers before the call looks again
 * (here, once in a few dozen such reads) the call has data that just
 * came from the disk.  None of it may count as cached (T1).  0, or the
 * first round that failed (a message in why).
 */
static unsigned
cold_reads (unsigned flags, unsigned rounds, char *why, size_t whylen)
{
  struct cairn_dev *dev = NULL;
  uint8_t data[64 * BLK], buf[BLK];
  size_t got;
  unsigned failed = 0;

  if (dev_file_open (pool_path, flags, 8u << 20, &dev) < 0) {
    snprintf (why, whylen, "%s", cairn_errmsg ());
    return UINT_MAX;
  }
  fill_pattern (data, sizeof data, 5);
  if (dev_pwrite (dev, data, sizeof data, 0) < 0 || dev_flush (dev) < 0) {
    snprintf (why, whylen, "%s", cairn_errmsg ());
    failed = UINT_MAX;
  }
  for (unsigned i = 0; failed == 0 && i < rounds; i++) {
    uint64_t off = (uint64_t) (i % 64) * BLK;

    evict_all ();
    if (dev_pread_cached (dev, buf, BLK, off, &got) < 0) {
      snprintf (why, whylen, "%s", cairn_errmsg ());
      failed = i + 1;
    }
    else if (got != 0) {
      snprintf (why, whylen, "round %u: a read that found its page missing "
                "returned %zu bytes as cached (watched by %s)", i, got,
                dev_cache_watch (dev));
      failed = i + 1;
    }
  }
  dev_close (dev);
  unlink (pool_path);
  return failed;
}

Test (trust, a_read_that_brought_its_page_in_returns_nothing_cached)
{
  char why[256] = "";
  struct cairn_dev *dev;

  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE, 1u << 20, &dev), 0);
  cr_log_info ("cached reads watched by %s", dev_cache_watch (dev));
  dev_close (dev);
  unlink (pool_path);
  cr_assert_eq (cold_reads (DEV_CREATE, 600, why, sizeof why), 0, "%s", why);
}

Test (trust, a_read_that_brought_its_page_in_returns_nothing_cached_rusage)
{
  char why[256] = "";
  struct cairn_dev *dev;

  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE | DEV_WATCH_RUSAGE,
                               1u << 20, &dev), 0);
  cr_assert_str_eq (dev_cache_watch (dev), "getrusage");
  dev_close (dev);
  unlink (pool_path);
  cr_assert_eq (cold_reads (DEV_CREATE | DEV_WATCH_RUSAGE, 600, why,
                            sizeof why), 0, "%s", why);
}

/* Whether this host gives the process a perf ring: tracefs names the
 * tracepoint and the process may open it (root here), in a build without
 * ThreadSanitizer.
 */
static bool
perf_watch_expected (void)
{
#ifdef __SANITIZE_THREAD__
  return false;               /* dev-iowatch.c: getrusage alone */
#endif
  return geteuid () == 0 &&
         access ("/sys/kernel/tracing/events/filemap/"
                 "mm_filemap_add_to_page_cache/id", R_OK) == 0;
}

Test (trust, the_perf_watch_is_used_where_the_host_allows)
{
  struct cairn_dev *dev;

  if (!perf_watch_expected ())
    cr_skip_test ("needs root and tracefs at /sys/kernel/tracing");
  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE, 1u << 20, &dev), 0);
  cr_assert_str_eq (dev_cache_watch (dev), "perf");
  dev_close (dev);
}

/* A forked child's reads are its own: the ring it inherits watches the
 * parent's thread, and must not answer for the child.
 */
Test (trust, a_forked_child_watches_its_own_reads)
{
  char why[256] = "";
  struct cairn_dev *dev;
  int status;
  pid_t pid;

  if (!perf_watch_expected ())
    cr_skip_test ("needs root and tracefs at /sys/kernel/tracing");
  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE, 1u << 20, &dev), 0);
  cr_assert_str_eq (dev_cache_watch (dev), "perf");   /* the parent's ring */
  dev_close (dev);
  unlink (pool_path);
  pid = fork ();
  cr_assert_geq (pid, 0);
  if (pid == 0) {
    unsigned failed = cold_reads (DEV_CREATE, 600, why, sizeof why);

    if (failed)
      fprintf (stderr, "child: %s\n", why);
    _exit (failed ? 1 : 0);
  }
  cr_assert_eq (waitpid (pid, &status, 0), pid);
  cr_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0,
             "the child's cached reads were watched by its parent's ring");
}

/* How many perf rings the process has mapped. */
static unsigned
perf_rings (void)
{
  FILE *fp = fopen ("/proc/self/maps", "re");
  char line[512];
  unsigned n = 0;

  cr_assert_not_null (fp);
  while (fgets (line, sizeof line, fp) != NULL)
    n += strstr (line, "perf_event") != NULL;
  fclose (fp);
  return n;
}

static void *
one_cached_read (void *arg)
{
  uint8_t buf[BLK];
  size_t got;

  cr_assert_eq (dev_pread_cached (arg, buf, BLK, 0, &got), 0);
  return NULL;
}

Test (trust, a_threads_ring_ends_with_it)
{
  struct cairn_dev *dev;
  unsigned before;

  if (!perf_watch_expected ())
    cr_skip_test ("needs root and tracefs at /sys/kernel/tracing");
  cr_assert_eq (dev_file_open (pool_path, DEV_CREATE, 1u << 20, &dev), 0);
  one_cached_read (dev);
  before = perf_rings ();
  cr_assert_geq (before, 1, "this thread's ring is not in /proc/self/maps");
  for (int i = 0; i < 32; i++) {
    pthread_t t;

    cr_assert_eq (pthread_create (&t, NULL, one_cached_read, dev), 0);
    cr_assert_eq (pthread_join (t, NULL), 0);
  }
  cr_assert_eq (perf_rings (), before, "threads that ended left their rings");
  dev_close (dev);
}

/* ----------------------------------------------------- the read path */

/* Open a volume "v" in a new pool in a file; check_every_read as given. */
static void
open_volume (bool check_every_read, struct cairn_dev **devp,
             struct cairn_pool **poolp, struct cairn_volume **vp)
{
  struct pool_open_opts o = { .check_every_read = check_every_read };

  *devp = file_pool (64u << 20);
  cr_assert_eq (pool_open (*devp, &o, poolp), 0, "%s", cairn_errmsg ());
  cr_assert_eq (dev_trusting (*devp), !check_every_read);
  cr_assert_eq (vol_create (*poolp, "v", VOL_SIZE, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (vol_open (*poolp, "v", vp), 0, "%s", cairn_errmsg ());
}

/* open_volume, then n blocks of a pattern (tag) written at its start: the
 * data, to free.
 */
static uint8_t *
written_volume (bool check_every_read, size_t n, uint64_t tag,
                struct cairn_dev **devp, struct cairn_pool **poolp,
                struct cairn_volume **vp)
{
  uint8_t *data = malloc (n * BLK);

  cr_assert_not_null (data);
  open_volume (check_every_read, devp, poolp, vp);
  fill_pattern (data, n * BLK, tag);
  cr_assert_eq (vol_pwrite (*vp, data, (uint32_t) (n * BLK), 0, 0), 0, "%s",
                cairn_errmsg ());
  return data;
}

static void
close_volume (struct cairn_dev *dev, struct cairn_pool *pool,
              struct cairn_volume *v)
{
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  cr_assert (!dev_trusting (dev), "the pool left the device trusting");
  assert_clean (dev);
  dev_close (dev);
}

Test (trust, a_cached_copy_is_checked_once)
{
  enum { N = 512 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data;
  uint64_t t0;

  data = written_volume (false, N, 11, &dev, &pool, &v);

  /* Written from data the engine hashed: trusted while cached. */
  t0 = trusted (dev);
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, N);

  /* From the disk: all checked, none trusted; then cached and trusted. */
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  evict_all ();
  t0 = trusted (dev);
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, 0, "blocks read from the disk were trusted");
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, N, "checked blocks were not trusted");
  close_volume (dev, pool, v);
  free (data);
}

/* Data written with digests it came with (a received stream) is checked
 * by its first read, then trusted while cached; a block whose digest is
 * wrong is never trusted: every read of it fails.
 */
Test (trust, received_data_is_trusted_once_checked)
{
  enum { N = 64, BAD = 10 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data = malloc (N * BLK), *sums = malloc (N * SHA256_LEN);
  uint8_t buf[BLK];
  uint64_t t0;

  cr_assert_not_null (data);
  cr_assert_not_null (sums);
  open_volume (false, &dev, &pool, &v);
  fill_pattern (data, N * BLK, 31);
  for (size_t i = 0; i < N; i++)
    sha256 (data + i * BLK, BLK, sums + i * SHA256_LEN);
  cr_assert_eq (vol_pwrite_sums (v, data, N * BLK, 0, sums, 0), 0, "%s",
                cairn_errmsg ());

  t0 = trusted (dev);
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, 0, "digests that came with the data "
                "were trusted before a read checked them");
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, N, "checked blocks were not trusted");

  /* One block with another block's digest: unreadable, every time. */
  memcpy (sums + BAD * SHA256_LEN, sums, SHA256_LEN);
  cr_assert_eq (vol_pwrite_sums (v, data, N * BLK, N * BLK, sums, 0), 0,
                "%s", cairn_errmsg ());
  t0 = trusted (dev);
  for (int i = 0; i < 3; i++)
    cr_assert_eq (vol_pread (v, buf, BLK, (N + BAD) * BLK), -EIO,
                  "read %d of a block with a wrong digest did not fail", i);
  read_equal (v, data + (BAD + 1) * BLK, (N + BAD + 1) * BLK, BLK);
  read_equal (v, data + (BAD + 1) * BLK, (N + BAD + 1) * BLK, BLK);
  cr_assert_eq (trusted (dev) - t0, 1);
  vol_close (v);
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  dev_close (dev);
  free (sums);
  free (data);
}

Test (trust, damage_on_disk_is_found_once_the_page_left_the_cache)
{
  enum { N = 64 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  struct vol_stats st;
  uint8_t *data, buf[BLK];
  uint64_t addr;

  data = written_volume (false, N, 12, &dev, &pool, &v);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  read_equal (v, data, 0, N * BLK);     /* trusted, cached */

  addr = find_block (data + 17 * BLK);
  cr_assert_neq (addr, 0, "block 17 is not in the pool file");
  rot (addr);
  cr_assert_eq (vol_pread (v, buf, BLK, 17 * BLK), -EIO,
                "a block that rotted on the disk was returned");
  cr_assert (strstr (cairn_errmsg (), "checksum mismatch reading block 17 ")
             != NULL, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pread (v, buf, BLK, 17 * BLK), -EIO,
                "the damaged copy was trusted once in the cache");
  read_equal (v, data + 16 * BLK, 16 * BLK, BLK);
  vol_stats (v, &st);
  cr_assert_eq (st.csum_errors, 2);

  /* Mended on the disk, it reads again. */
  rot (addr);
  read_equal (v, data, 0, N * BLK);
  close_volume (dev, pool, v);
  free (data);
}

/* verify=always: every read is checked, so damage made through the page
 * cache (which the table cannot see) is found as well.
 */
Test (trust, check_every_read_finds_damage_in_the_cache)
{
  enum { N = 64 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data, buf[BLK];
  uint64_t addr, t0;

  data = written_volume (true, N, 13, &dev, &pool, &v);
  t0 = trusted (dev);
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev), t0, "a block was trusted with check_every_read");

  addr = find_block (data + 5 * BLK);
  cr_assert_neq (addr, 0);
  flip (addr);                          /* in the page cache only */
  cr_assert_eq (vol_pread (v, buf, BLK, 5 * BLK), -EIO,
                "damage in the page cache was returned");
  flip (addr);
  close_volume (dev, pool, v);
  free (data);
}

/* ------------------------------------------- reuse under concurrent reads */

/* Writers rewrite the blocks of a small volume while the commit thread
 * makes what they free reusable at once; readers read them, half of the
 * time after the pages were dropped, and check that every block they get
 * is one version of that very block (its header names it).  A reader whose
 * mapping went stale reads a reused block: it must check it, fail, and
 * map again (T2, T3), never return another block's data, and never fail
 * with EIO: nothing is damaged (with eight blocks, a read meets two reuses
 * in a row a few times in a run, which a read path that maps again only
 * once reports as damage).
 */
enum { RB = 8 };                       /* blocks in the volume */

struct reuse {
  struct cairn_volume *v;
  struct cairn_pool *pool;
  int stop;
  uint64_t reads, eio;
  int bad;                              /* a reader saw another block */
  char why[160];
};

/* One thread's share: the test's state and its own seed. */
struct reuse_thread {
  struct reuse *s;
  uint64_t seed;
};

/* Block lbn, version ver: a header of both, then a pattern of both. */
static void
versioned (uint8_t *b, uint64_t lbn, uint64_t ver)
{
  fill_pattern (b, BLK, lbn << 32 | ver);
  memcpy (b, &lbn, 8);
  memcpy (b + 8, &ver, 8);
}

static void *
reuse_writer (void *arg)
{
  struct reuse_thread *t = arg;
  struct reuse *s = t->s;
  struct rng r = { t->seed };
  uint8_t b[BLK];

  for (uint64_t ver = 1; !__atomic_load_n (&s->stop, __ATOMIC_RELAXED); ver++) {
    uint64_t lbn = rng_below (&r, RB);

    versioned (b, lbn, ver);
    if (vol_pwrite (s->v, b, BLK, lbn * BLK, 0) != 0)
      break;
  }
  return NULL;
}

static void *
reuse_reader (void *arg)
{
  struct reuse_thread *t = arg;
  struct reuse *s = t->s;
  struct rng r = { t->seed };
  uint8_t b[BLK], want[BLK];

  while (!__atomic_load_n (&s->stop, __ATOMIC_RELAXED)) {
    uint64_t lbn = rng_below (&r, RB), hl, ver;
    int e = vol_pread (s->v, b, BLK, lbn * BLK);

    __atomic_add_fetch (&s->reads, 1, __ATOMIC_RELAXED);
    if (e == -EIO) {
      __atomic_add_fetch (&s->eio, 1, __ATOMIC_RELAXED);
      continue;
    }
    memcpy (&hl, b, 8);
    memcpy (&ver, b + 8, 8);
    if (e == 0 && ver == 0 && hl == 0)
      continue;                         /* not written yet: a hole */
    if (e == 0)
      versioned (want, lbn, ver);
    if (e != 0 || hl != lbn || memcmp (b, want, BLK) != 0) {
      snprintf (s->why, sizeof s->why, "read of block %" PRIu64 " returned %d "
                "with block %" PRIu64 " version %" PRIu64 " in it", lbn, e, hl,
                ver);
      __atomic_store_n (&s->bad, 1, __ATOMIC_RELAXED);
      __atomic_store_n (&s->stop, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

Test (trust, a_reused_block_is_never_returned_for_another, .timeout = 60)
{
  struct cairn_dev *dev;
  struct reuse s = { 0 };
  struct reuse_thread tw[2], tr[2];
  pthread_t w[2], rd[2];
  uint64_t seed = test_seed ("trust.reuse", 42);
  unsigned commits = test_work (1500);

  open_volume (false, &dev, &s.pool, &s.v);
  for (int i = 0; i < 2; i++) {
    tw[i] = (struct reuse_thread) { &s, seed + (uint64_t) i };
    tr[i] = (struct reuse_thread) { &s, seed + 10 + (uint64_t) i };
    cr_assert_eq (pthread_create (&w[i], NULL, reuse_writer, &tw[i]), 0);
    cr_assert_eq (pthread_create (&rd[i], NULL, reuse_reader, &tr[i]), 0);
  }
  for (unsigned i = 0; i < commits && !__atomic_load_n (&s.stop, __ATOMIC_RELAXED); i++) {
    cr_assert_eq (pool_commit (s.pool), 0, "%s", cairn_errmsg ());
    if (i % 2)
      evict ();
  }
  __atomic_store_n (&s.stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 2; i++) {
    pthread_join (w[i], NULL);
    pthread_join (rd[i], NULL);
  }
  fprintf (stderr, "trust.reuse: %" PRIu64 " reads, %" PRIu64 " failed with "
           "EIO, %" PRIu64 " blocks trusted\n", s.reads, s.eio,
           trusted (dev));
  cr_assert (!s.bad, "%s", s.why);
  cr_assert_eq (s.eio, 0, "reads of undamaged blocks failed with EIO");
  cr_assert_gt (trusted (dev), 0, "nothing was trusted: the test tests nothing");
  close_volume (dev, s.pool, s.v);
}

/* ------------------------------------------ pages only snapshots hold */

/* Are the pages of [addr, addr + n blocks) in the cache (want true) or
 * gone (want false)?  A quarter may be otherwise: the kernel skips a page
 * that something holds for a moment when it drops pages, and may evict
 * any page under memory pressure.
 */
static void
assert_pages (uint64_t addr, size_t n, bool want, const char *what)
{
  size_t cached = cached_pages_in (addr, n * BLK);

  if (want)
    cr_assert_geq (cached, n - n / 4, "%s: only %zu of %zu pages are cached",
                   what, cached, n);
  else
    cr_assert_leq (cached, n / 4, "%s: %zu of %zu pages are still cached",
                   what, cached, n);
}

/* A write or trim that takes data out of a volume while its snapshot
 * keeps it lets the data's pages go (volume.c, struct held); the
 * snapshot still reads it, from the disk, checked.  A clone's write over
 * data it shares with its origin lets nothing go, and neither does a
 * write over data no snapshot holds (those blocks are free for reuse).
 */
Test (trust, pages_that_only_snapshots_hold_leave_the_cache)
{
  enum { N = 32 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v, *snap, *clone;
  uint8_t *a, *b = malloc (N * BLK), *c = malloc (N * BLK);
  uint8_t *d = malloc (N * BLK);
  uint64_t at_a, at_b, at_d, t0;

  cr_assert (b && c && d);
  fill_pattern (b, N * BLK, 32);
  fill_pattern (c, N * BLK, 33);
  fill_pattern (d, N * BLK, 34);
  a = written_volume (false, N, 31, &dev, &pool, &v);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (snap_create (pool, "v", "s1"), 0, "%s", cairn_errmsg ());
  at_a = find_block (a);
  cr_assert_neq (at_a, 0);
  cr_assert_eq (find_block (a + (N - 1) * BLK), at_a + (N - 1) * BLK,
                "the test wants the blocks in one run");
  /* The pages as the engine's reads leave them (find_block's reads ahead
   * may have put them in larger folios, which a drop of part of one skips).
   */
  evict_all ();
  read_equal (v, a, 0, N * BLK);
  assert_pages (at_a, N, true, "before the overwrite");

  /* The live volume leaves a's blocks to s1: their pages go. */
  cr_assert_eq (vol_pwrite (v, b, N * BLK, 0, 0), 0, "%s", cairn_errmsg ());
  assert_pages (at_a, N, false, "after the overwrite");
  read_equal (v, b, 0, N * BLK);
  cr_assert_eq (vol_open (pool, "v@s1", &snap), 0, "%s", cairn_errmsg ());
  t0 = trusted (dev);
  read_equal (snap, a, 0, N * BLK);
  cr_assert_eq (trusted (dev), t0, "blocks read from the disk were trusted");
  assert_pages (at_a, N, true, "after reading the snapshot");

  /* A clone of s1 writes over what it shares with s1: nothing goes. */
  cr_assert_eq (vol_clone (pool, "v@s1", "c"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "c", &clone), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (clone, c, N * BLK, 0, 0), 0, "%s",
                cairn_errmsg ());
  assert_pages (at_a, N, true, "after a clone's overwrite");
  read_equal (snap, a, 0, N * BLK);
  vol_close (clone);

  /* Nothing holds b's blocks: overwriting them frees them, cached. */
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  at_b = find_block (b);
  cr_assert_neq (at_b, 0);
  evict_all ();
  read_equal (v, b, 0, N * BLK);
  cr_assert_eq (vol_pwrite (v, d, N * BLK, 0, 0), 0, "%s", cairn_errmsg ());
  assert_pages (at_b, N, true, "after overwriting unshared blocks");

  /* A trim of data a snapshot holds lets it go too. */
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  cr_assert_eq (snap_create (pool, "v", "s2"), 0, "%s", cairn_errmsg ());
  at_d = find_block (d);
  cr_assert_neq (at_d, 0);
  evict_all ();
  read_equal (v, d, 0, N * BLK);
  assert_pages (at_d, N, true, "before the trim");
  cr_assert_eq (vol_trim (v, N * BLK, 0, 0), 0, "%s", cairn_errmsg ());
  assert_pages (at_d, N, false, "after the trim");

  vol_close (snap);
  free (a);
  free (b);
  free (c);
  free (d);
  close_volume (dev, pool, v);
}

/* ------------------------------------------------------- reading ahead */

static uint64_t
read_ahead_bytes (struct cairn_dev *dev)
{
  struct dev_counts dc;

  dev_counts (dev, &dc);
  return dc.bytes_prefetched;
}

/* Wait (5 s at most) until n pages from byte addr of the pool file are in
 * the cache: a read ahead is asked for and not waited for.
 */
static void
wait_cached (uint64_t addr, size_t n, const char *what)
{
  size_t cached = 0;

  for (int i = 0; i < 500; i++) {
    cached = cached_pages_in (addr, n * BLK);
    if (cached == n)
      return;
    usleep (10000);
  }
  cr_assert_fail ("%s: %zu of %zu pages read ahead are in the cache", what,
                  cached, n);
}

/* Read [lbn, lbn + n) of v in requests of step blocks, comparing with
 * data (which starts at block 0).
 */
static void
read_steps (struct cairn_volume *v, const uint8_t *data, uint64_t lbn,
            uint64_t n, uint64_t step)
{
  for (uint64_t b = lbn; b < lbn + n; b += step)
    read_equal (v, data + b * BLK, b * BLK, (uint32_t) (step * BLK));
}

/* A sequential reader of blocks that are not in the cache gets them read
 * ahead from its second read on, and none of them is trusted before a read
 * has checked it; once checked, they are.  Reads of what the cache holds
 * read nothing ahead.
 */
Test (trust, a_sequential_reader_gets_blocks_read_ahead_and_checks_them)
{
  enum { N = 1024, STEP = 16 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data;
  uint64_t at, t0, ra0;

  data = written_volume (false, N, 41, &dev, &pool, &v);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  at = find_block (data);
  cr_assert_neq (at, 0);
  cr_assert_eq (find_block (data + (N - 1) * BLK), at + (N - 1) * BLK,
                "the test wants the blocks in one run");
  evict_all ();

  t0 = trusted (dev);
  ra0 = read_ahead_bytes (dev);
  read_steps (v, data, 0, STEP, STEP);
  cr_assert_eq (read_ahead_bytes (dev), ra0, "one read started a stream");
  read_steps (v, data, STEP, STEP, STEP);
  cr_assert_gt (read_ahead_bytes (dev), ra0,
                "the second sequential read read nothing ahead");
  /* The first window: four requests' worth at least, past the second. */
  wait_cached (at + 2 * STEP * BLK, 4 * STEP, "the first window");
  read_steps (v, data, 2 * STEP, N - 2 * STEP, STEP);
  cr_assert_eq (trusted (dev), t0,
                "blocks read ahead were trusted before they were checked");
  cr_assert_geq (read_ahead_bytes (dev) - ra0, (N / 2) * BLK,
                 "the window did not follow the reader: %" PRIu64 " bytes",
                 read_ahead_bytes (dev) - ra0);
  cr_assert_leq (read_ahead_bytes (dev) - ra0, (N - 2 * STEP) * BLK,
                 "blocks were read ahead twice, or past the data");

  /* All checked now: trusted, and cached reads read nothing ahead. */
  ra0 = read_ahead_bytes (dev);
  read_steps (v, data, 0, N, STEP);
  cr_assert_eq (trusted (dev) - t0, N, "checked blocks were not trusted");
  cr_assert_eq (read_ahead_bytes (dev), ra0,
                "a reader of cached blocks read ahead");
  close_volume (dev, pool, v);
  free (data);
}

/* A block that was checked, trusted, then left the cache and rotted on
 * the disk, and that comes back through a read ahead, is checked by the
 * read that finds it in the cache (dev_prefetch claims it, T4): the read
 * fails, and keeps failing.
 */
Test (trust, damage_brought_in_by_a_read_ahead_is_found)
{
  enum { N = 256, STEP = 16, BAD = 60 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data, buf[STEP * BLK];
  uint64_t at, t0;

  data = written_volume (false, N, 42, &dev, &pool, &v);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  t0 = trusted (dev);
  read_equal (v, data, 0, N * BLK);
  cr_assert_eq (trusted (dev) - t0, N, "the written blocks were not trusted");
  at = find_block (data);
  cr_assert_neq (at, 0);
  cr_assert_eq (find_block (data + (N - 1) * BLK), at + (N - 1) * BLK,
                "the test wants the blocks in one run");
  rot (at + BAD * BLK);

  /* Two reads from the disk start a stream; wait for its window. */
  read_steps (v, data, 0, 2 * STEP, STEP);
  wait_cached (at + 2 * STEP * BLK, 4 * STEP, "the first window");
  read_steps (v, data, 2 * STEP, STEP, STEP);
  for (int i = 0; i < 2; i++) {
    cr_assert_eq (vol_pread (v, buf, STEP * BLK, (BAD / STEP) * STEP * BLK),
                  -EIO, "read %d: a block that rotted on the disk and came "
                  "back by a read ahead was returned", i);
    cr_assert (strstr (cairn_errmsg (), "checksum mismatch reading block 60 ")
               != NULL, "%s", cairn_errmsg ());
  }
  rot (at + BAD * BLK);
  read_equal (v, data, 0, N * BLK);
  close_volume (dev, pool, v);
  free (data);
}

/* Random reads from the disk read nothing ahead: no read continues the
 * one before it.
 */
Test (trust, random_reads_read_nothing_ahead)
{
  enum { N = 1024, READS = 128 };
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct cairn_volume *v;
  uint8_t *data;
  uint64_t ra0, lbn = 0;

  data = written_volume (false, N, 43, &dev, &pool, &v);
  cr_assert_eq (pool_commit (pool), 0, "%s", cairn_errmsg ());
  evict_all ();
  ra0 = read_ahead_bytes (dev);
  /* 389 is prime to 1023: READS distinct places, none near the last. */
  for (int i = 0; i < READS; i++) {
    lbn = (lbn + 389) % (N - 1);
    read_equal (v, data + lbn * BLK, lbn * BLK, 2 * BLK);
  }
  cr_assert_eq (read_ahead_bytes (dev), ra0, "random reads read %" PRIu64
                " bytes ahead", read_ahead_bytes (dev) - ra0);
  close_volume (dev, pool, v);
  free (data);
}
