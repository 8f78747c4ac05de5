/* Unit tests for the dev layer (engine/dev.h): the memory and file backends,
 * the bounds checks and counters of the wrappers, the pool lock, the fault
 * device and the power-cut device.
 *
 * The power-cut tests take their seed from CAIRN_TEST_SEED when it is set
 * (to replay a failure) and print the seed they use.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "dev.h"

#define KiB 1024
#define MiB (1024 * 1024)

/* ------------------------------------------------------------ helpers */

/* The device's counters, summed. */
static struct dev_counts
counts (const struct cairn_dev *dev)
{
  struct dev_counts dc;

  dev_counts (dev, &dc);
  return dc;
}

/* The seed for randomised tests: CAIRN_TEST_SEED, or a fixed default. */
static uint64_t
test_seed (const char *test, uint64_t dflt)
{
  const char *s = getenv ("CAIRN_TEST_SEED");
  uint64_t seed = s ? strtoull (s, NULL, 0) : dflt;

  fprintf (stderr, "%s: seed %" PRIu64 " (set CAIRN_TEST_SEED to replay)\n",
           test, seed);
  return seed;
}

/* A test-side splitmix64, independent of the device's. */
static uint64_t
test_random (uint64_t *state)
{
  uint64_t z = (*state += UINT64_C (0x9e3779b97f4a7c15));

  z = (z ^ (z >> 30)) * UINT64_C (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

/* Fill buf with the pattern of write number tag; bytes are never 0. */
static void
fill (uint8_t *buf, size_t len, uint64_t tag)
{
  for (size_t i = 0; i < len; i++)
    buf[i] = (uint8_t) (1 + (tag * 131 + i * 7 + (i >> 9)) % 255);
}

/* Does buf hold the pattern of tag? */
static bool
is_filled (const uint8_t *buf, size_t len, uint64_t tag)
{
  CLEANUP_FREE uint8_t *want = malloc (len ? len : 1);

  cr_assert_not_null (want);
  fill (want, len, tag);
  return memcmp (buf, want, len) == 0;
}

/* Does buf hold only byte c? */
static bool
is_all (const uint8_t *buf, size_t len, uint8_t c)
{
  for (size_t i = 0; i < len; i++)
    if (buf[i] != c)
      return false;
  return true;
}

/* Create a memory device or fail the test. */
static struct cairn_dev *
mem (uint64_t size)
{
  struct cairn_dev *dev;

  cr_assert_eq (dev_mem_create (size, &dev), 0, "%s", cairn_errmsg ());
  return dev;
}

/* Write a pattern through dev or fail the test. */
static void
write_tag (struct cairn_dev *dev, uint64_t off, size_t len, uint64_t tag)
{
  CLEANUP_FREE uint8_t *buf = malloc (len);

  cr_assert_not_null (buf);
  fill (buf, len, tag);
  cr_assert_eq (dev_pwrite (dev, buf, len, off), 0, "%s", cairn_errmsg ());
}

/* Read len bytes at off from dev into a new buffer, or fail the test. */
static uint8_t *
read_all (struct cairn_dev *dev, uint64_t off, size_t len)
{
  uint8_t *buf = malloc (len ? len : 1);

  cr_assert_not_null (buf);
  cr_assert_eq (dev_pread (dev, buf, len, off), 0, "%s", cairn_errmsg ());
  return buf;
}

/* ------------------------------------------------------------ memory */

/* Round-trip data on dev, checking reads against a model of its start. */
static void
check_round_trip (struct cairn_dev *dev)
{
  struct { uint64_t off; size_t len; } w[] = {
    { 0, 4096 }, { 4608, 4096 }, { 2048, 4096 }, { 12288, 512 },
    { 12800, 3072 }, { 20000, 100 },
  };
  const size_t mlen = 32 * KiB;
  CLEANUP_FREE uint8_t *model = calloc (1, mlen);
  CLEANUP_FREE uint8_t *zero = read_all (dev, 0, mlen);
  CLEANUP_FREE uint8_t *got = NULL;

  cr_assert_not_null (model);
  cr_assert (is_all (zero, mlen, 0), "a new device reads as zeros");
  for (size_t i = 0; i < ARRAY_SIZE (w); i++) {
    write_tag (dev, w[i].off, w[i].len, i + 1);
    fill (model + w[i].off, w[i].len, i + 1);
  }
  /* Later writes win where they overlap. */
  got = read_all (dev, 0, mlen);
  cr_assert (memcmp (got, model, mlen) == 0, "data read back");
  /* Unaligned reads inside and across writes. */
  for (uint64_t off = 1; off < mlen - 5000; off += 1237) {
    CLEANUP_FREE uint8_t *part = read_all (dev, off, 5000);
    cr_assert (memcmp (part, model + off, 5000) == 0, "read at %" PRIu64, off);
  }
  /* The very end of the device. */
  write_tag (dev, dev->size - 8192, 8192, 99);
  CLEANUP_FREE uint8_t *end = read_all (dev, dev->size - 8192, 8192);
  cr_assert (is_filled (end, 8192, 99));
  cr_assert_eq (dev_flush (dev), 0, "%s", cairn_errmsg ());
}

Test (mem, round_trip_small)
{
  struct cairn_dev *dev = mem (64 * KiB);

  cr_assert_str_eq (dev->ops->kind, "mem");
  cr_assert_eq (dev->size, 64 * KiB);
  check_round_trip (dev);
  dev_close (dev);
}

Test (mem, round_trip_mapped)
{
  struct cairn_dev *dev = mem (8 * MiB);

  check_round_trip (dev);
  dev_close (dev);
}

Test (mem, sparse_16_gib)
{
  uint64_t size = UINT64_C (16) << 30;
  struct cairn_dev *dev = mem (size);

  write_tag (dev, size - 4096, 4096, 7);
  write_tag (dev, 0, 4096, 8);
  CLEANUP_FREE uint8_t *a = read_all (dev, size - 4096, 4096);
  CLEANUP_FREE uint8_t *b = read_all (dev, size / 2, 4096);
  cr_assert (is_filled (a, 4096, 7));
  cr_assert (is_all (b, 4096, 0));
  dev_close (dev);
}

Test (mem, discard_zeroes)
{
  /* Unaligned edges on a mapping: pages in the middle, bytes at the ends. */
  struct cairn_dev *dev = mem (4 * MiB);

  write_tag (dev, 0, 64 * KiB, 3);
  cr_assert_eq (dev_discard (dev, 512, 40 * KiB), 0);
  CLEANUP_FREE uint8_t *buf = read_all (dev, 0, 64 * KiB);
  {
    CLEANUP_FREE uint8_t *want = malloc (64 * KiB);
    cr_assert_not_null (want);
    fill (want, 64 * KiB, 3);
    memset (want + 512, 0, 40 * KiB);
    cr_assert (memcmp (buf, want, 64 * KiB) == 0);
  }
  dev_close (dev);
}

Test (mem, zero_size)
{
  struct cairn_dev *dev = mem (0);
  uint8_t b = 0;

  cr_assert_eq (dev_pread (dev, &b, 0, 0), 0);
  cr_assert_eq (dev_pread (dev, &b, 1, 0), -EINVAL);
  dev_close (dev);
}

/* ------------------------------------------------------------ wrappers */

Test (wrappers, bounds)
{
  struct cairn_dev *dev = mem (64 * KiB);
  uint8_t buf[1024] = { 0 };

  cairn_error_clear ();
  cr_assert_eq (dev_pread (dev, buf, 1024, 64 * KiB - 512), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "beyond the end") != NULL,
             "message: %s", cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), dev->name) != NULL);
  cr_assert_eq (dev_pwrite (dev, buf, 1024, 64 * KiB - 512), -EINVAL);
  cr_assert_eq (dev_pwrite (dev, buf, 512, 64 * KiB), -EINVAL);
  cr_assert_eq (dev_pwrite (dev, buf, 512, UINT64_MAX - 100), -EINVAL);
  cr_assert_eq (dev_pread (dev, buf, 512, UINT64_MAX), -EINVAL);
  cr_assert_eq (dev_discard (dev, 0, 64 * KiB + 1), -EINVAL);
  cr_assert_eq (dev_discard (dev, UINT64_MAX, 2), -EINVAL);
  /* Exactly up to the end is fine. */
  cr_assert_eq (dev_pwrite (dev, buf, 1024, 64 * KiB - 1024), 0);
  cr_assert_eq (dev_pread (dev, buf, 0, 64 * KiB), 0);
  dev_close (dev);
}

Test (wrappers, counters)
{
  struct cairn_dev *dev = mem (64 * KiB);
  uint8_t buf[4096] = { 0 };

  cr_assert_eq (dev_pwrite (dev, buf, 4096, 0), 0);
  cr_assert_eq (dev_pwrite (dev, buf, 512, 8192), 0);
  cr_assert_eq (dev_pread (dev, buf, 1024, 0), 0);
  cr_assert_eq (dev_pwrite (dev, buf, 512, 64 * KiB), -EINVAL);
  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (counts (dev).bytes_written, 4608);
  cr_assert_eq (counts (dev).bytes_read, 1024);
  cr_assert_eq (counts (dev).flushes, 2);
  dev_close (dev);
  dev_close (NULL);
}

/* Counters are kept per CPU (util.h): what every CPU added is summed. */
Test (wrappers, counters_of_every_cpu)
{
  struct cairn_dev *dev = mem (64 * KiB);
  uint8_t buf[512] = { 0 };
  cpu_set_t allowed, one;
  unsigned cpus = 0, shards[COUNTER_SHARDS] = { 0 };

  cr_assert_eq (sched_getaffinity (0, sizeof allowed, &allowed), 0);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET (cpu, &allowed))
      continue;
    CPU_ZERO (&one);
    CPU_SET (cpu, &one);
    cr_assert_eq (sched_setaffinity (0, sizeof one, &one), 0);
    cr_assert_eq (dev_pwrite (dev, buf, 512, 0), 0);
    shards[counter_shard ()]++;
    cpus++;
  }
  cr_assert_eq (sched_setaffinity (0, sizeof allowed, &allowed), 0);
  cr_assert_eq (counts (dev).bytes_written, cpus * 512ull);
  if (cpus > 1)
    for (unsigned s = 0; s < COUNTER_SHARDS; s++)
      cr_assert_lt (shards[s], cpus, "all %u CPUs fell in shard %u: the sum "
                    "of several shards went untested", cpus, s);
  dev_close (dev);
}

/* ------------------------------------------------------------ file */

static char tmpdir[64];

/* Make a private temporary directory for one test. */
static void
file_setup (void)
{
  strcpy (tmpdir, "/tmp/cairn-test-dev.XXXXXX");
  cr_assert_not_null (mkdtemp (tmpdir), "mkdtemp: %s", strerror (errno));
}

/* Remove the temporary directory and everything in it. */
static void
file_teardown (void)
{
  DIR *d = opendir (tmpdir);
  struct dirent *e;
  char path[512];

  if (d == NULL)
    return;
  while ((e = readdir (d)) != NULL) {
    if (strcmp (e->d_name, ".") == 0 || strcmp (e->d_name, "..") == 0)
      continue;
    snprintf (path, sizeof path, "%s/%s", tmpdir, e->d_name);
    unlink (path);
  }
  closedir (d);
  rmdir (tmpdir);
}

TestSuite (file, .init = file_setup, .fini = file_teardown);

/* Put the path of name inside the test's directory into out. */
static void
tmp_path (char *out, size_t n, const char *name)
{
  snprintf (out, n, "%s/%s", tmpdir, name);
}

Test (file, create_round_trip_reopen)
{
  char path[256];
  struct cairn_dev *dev;
  struct stat st;

  tmp_path (path, sizeof path, "a.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, 4 * MiB, &dev), 0,
                "%s", cairn_errmsg ());
  cr_assert_str_eq (dev->ops->kind, "file");
  cr_assert_eq (dev->size, 4 * MiB);
  cr_assert_str_eq (dev->name, path);
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_eq (st.st_size, 4 * MiB);
  cr_assert_lt ((uint64_t) st.st_blocks * 512, 4 * MiB, "created sparse");

  check_round_trip (dev);
  write_tag (dev, MiB, 64 * KiB, 42);
  cr_assert_eq (dev_flush (dev), 0, "%s", cairn_errmsg ());
  /* Discard punches a hole (or does nothing where unsupported). */
  cr_assert_eq (dev_discard (dev, 2 * MiB, 64 * KiB), 0, "%s",
                cairn_errmsg ());
  dev_close (dev);

  cr_assert_eq (dev_file_open (path, 0, 0, &dev), 0, "%s", cairn_errmsg ());
  cr_assert_eq (dev->size, 4 * MiB);
  CLEANUP_FREE uint8_t *buf = read_all (dev, MiB, 64 * KiB);
  cr_assert (is_filled (buf, 64 * KiB, 42), "data survives a reopen");
  dev_close (dev);
}

Test (file, create_exists)
{
  char path[256];
  struct cairn_dev *dev;

  tmp_path (path, sizeof path, "b.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &dev), 0);
  write_tag (dev, 0, 4096, 5);
  dev_close (dev);
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &dev), -EEXIST);
  cr_assert_null (dev);
  cr_assert (strstr (cairn_errmsg (), path) != NULL, "message: %s",
             cairn_errmsg ());
  /* The existing file was not touched. */
  cr_assert_eq (dev_file_open (path, 0, 0, &dev), 0);
  CLEANUP_FREE uint8_t *buf = read_all (dev, 0, 4096);
  cr_assert (is_filled (buf, 4096, 5));
  dev_close (dev);
}

Test (file, open_errors)
{
  char path[256];
  struct cairn_dev *dev;

  tmp_path (path, sizeof path, "missing.pool");
  cr_assert_eq (dev_file_open (path, 0, 0, &dev), -ENOENT);
  cr_assert (strstr (cairn_errmsg (), path) != NULL);
  cr_assert_eq (dev_file_open (tmpdir, DEV_RDONLY, 0, &dev), -EINVAL,
                "a directory is not a device");
  cr_assert_eq (dev_file_open (path, DEV_CREATE | DEV_RDONLY, MiB, &dev),
                -EINVAL);
  cr_assert_eq (dev_file_open (path, 0x100, 0, &dev), -EINVAL);
  cr_assert_eq (access (path, F_OK), -1, "failed opens create nothing");
}

Test (file, lock_conflicts_name_pid)
{
  char path[256], want[64];
  struct cairn_dev *a, *b;

  tmp_path (path, sizeof path, "c.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &a), 0);

  /* flock belongs to the open file description: a second open conflicts
   * even in the same process.
   */
  cr_assert_eq (dev_file_open (path, 0, 0, &b), -EBUSY);
  cr_assert_null (b);
  snprintf (want, sizeof want, "in use by process %d ", (int) getpid ());
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "message: %s",
             cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), path) != NULL);
  cr_assert_eq (dev_file_open (path, DEV_RDONLY, 0, &b), -EBUSY,
                "read-only opens wait for the writer too");
  dev_close (a);

  /* The lock goes with the close. */
  cr_assert_eq (dev_file_open (path, 0, 0, &a), 0, "%s", cairn_errmsg ());
  dev_close (a);
}

/* nbdkit takes the lock before it forks into the background: the taker
 * exits, its child holds the lock, and /proc/locks still names the taker.
 * The message must name the child, the process that holds it now, and
 * show its command line.
 */
Test (file, lock_held_by_a_forked_child_names_the_child)
{
  char path[256], want[64];
  struct cairn_dev *a;
  int report[2], release[2], status;
  pid_t taker, holder = 0;

  tmp_path (path, sizeof path, "f.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &a), 0);
  dev_close (a);
  cr_assert_eq (pipe (report), 0);
  cr_assert_eq (pipe (release), 0);
  taker = fork ();
  cr_assert_neq (taker, -1);
  if (taker == 0) {
    struct cairn_dev *d;
    pid_t h;
    char c;

    if (dev_file_open (path, 0, 0, &d) < 0)
      _exit (1);
    h = fork ();
    if (h == 0) {             /* the holder: until release closes */
      close (release[1]);
      while (read (release[0], &c, 1) > 0)
        ;
      _exit (0);
    }
    _exit (write (report[1], &h, sizeof h) == sizeof h ? 0 : 1);
  }
  close (release[0]);
  close (report[1]);
  cr_assert_eq (read (report[0], &holder, sizeof holder), sizeof holder);
  cr_assert_eq (waitpid (taker, &status, 0), taker);
  cr_assert (WIFEXITED (status) && WEXITSTATUS (status) == 0);

  cr_assert_eq (dev_file_open (path, 0, 0, &a), -EBUSY);
  snprintf (want, sizeof want, "in use by process %d (", (int) holder);
  cr_assert (strstr (cairn_errmsg (), want) != NULL, "want '%s' in: %s",
             want, cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), "test-dev") != NULL,
             "the holder's command line is not shown: %s", cairn_errmsg ());
  close (release[1]);
  close (report[0]);
}

Test (file, read_only_shares)
{
  char path[256];
  struct cairn_dev *a, *b, *c;
  uint8_t buf[512] = { 0 };

  tmp_path (path, sizeof path, "d.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &a), 0);
  write_tag (a, 0, 4096, 9);
  dev_close (a);

  cr_assert_eq (dev_file_open (path, DEV_RDONLY, 0, &a), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (dev_file_open (path, DEV_RDONLY, 0, &b), 0, "%s",
                cairn_errmsg ());
  CLEANUP_FREE uint8_t *data = read_all (b, 0, 4096);
  cr_assert (is_filled (data, 4096, 9));
  cr_assert_eq (dev_pwrite (b, buf, 512, 0), -EROFS);
  cr_assert_eq (dev_discard (b, 0, 512), -EROFS);
  cr_assert_eq (dev_flush (b), 0);
  cr_assert_eq (dev_file_open (path, 0, 0, &c), -EBUSY,
                "a writer waits for the readers");
  cr_assert (strstr (cairn_errmsg (), "in use by process") != NULL,
             "message: %s", cairn_errmsg ());
  dev_close (a);
  dev_close (b);
}

Test (file, read_past_eof_is_zero)
{
  char path[256];
  struct cairn_dev *dev;

  tmp_path (path, sizeof path, "e.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &dev), 0);
  write_tag (dev, 0, 64 * KiB, 11);
  /* Someone shrinks the file under us: the tail reads as zeros. */
  cr_assert_eq (truncate (path, 6000), 0);
  CLEANUP_FREE uint8_t *buf = read_all (dev, 4096, 8192);
  CLEANUP_FREE uint8_t *want = malloc (64 * KiB);
  cr_assert_not_null (want);
  fill (want, 64 * KiB, 11);
  cr_assert (memcmp (buf, want + 4096, 6000 - 4096) == 0);
  cr_assert (is_all (buf + (6000 - 4096), 8192 - (6000 - 4096), 0));
  dev_close (dev);
}

/* What preallocation's progress callback saw. */
struct seen_progress {
  unsigned calls;
  uint64_t last_done, total;
  bool backwards;
};

static void
note_progress (void *opaque, uint64_t done, uint64_t total)
{
  struct seen_progress *s = opaque;

  s->backwards |= done < s->last_done;
  s->calls++;
  s->last_done = done;
  s->total = total;
}

Test (file, preallocate_space_and_full)
{
  char path[256];
  struct cairn_dev *dev;
  struct stat st;
  /* Not a multiple of the 8 MiB chunk nor of the 256 MiB window. */
  const uint64_t size = 20 * MiB + 4096;

  tmp_path (path, sizeof path, "p.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, size, &dev), 0);
  /* Off: nothing changes. */
  cr_assert_eq (dev_file_preallocate (dev, DEV_PREALLOC_OFF, NULL, NULL), 0);
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_lt ((uint64_t) st.st_blocks * 512, MiB, "still sparse");

  /* Space: the whole size is allocated, the contents are still zeros. */
  cr_assert_eq (dev_file_preallocate (dev, DEV_PREALLOC_SPACE, NULL, NULL), 0,
                "%s", cairn_errmsg ());
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_geq ((uint64_t) st.st_blocks * 512, size, "space reserved");
  cr_assert_eq ((uint64_t) st.st_size, size, "the size is kept");

  /* Full overwrites everything with zeros, to the last byte, and shows
   * its progress up to the whole size.
   */
  write_tag (dev, 3 * MiB, 64 * KiB, 7);
  write_tag (dev, size - 4096, 4096, 9);
  struct seen_progress seen = { 0 };
  cr_assert_eq (dev_file_preallocate (dev, DEV_PREALLOC_FULL, note_progress,
                                      &seen), 0, "%s", cairn_errmsg ());
  cr_assert_geq (seen.calls, 3u, "progress was shown along the way");
  cr_assert_not (seen.backwards);
  cr_assert_eq (seen.last_done, size);
  cr_assert_eq (seen.total, size);
  CLEANUP_FREE uint8_t *a = read_all (dev, 3 * MiB, 64 * KiB);
  CLEANUP_FREE uint8_t *b = read_all (dev, size - 4096, 4096);
  cr_assert (is_all (a, 64 * KiB, 0) && is_all (b, 4096, 0),
             "full preallocation writes zeros over everything");
  cr_assert_eq (stat (path, &st), 0);
  cr_assert_eq ((uint64_t) st.st_size, size, "the size is kept");
  dev_close (dev);
}

Test (file, preallocate_refused)
{
  char path[256];
  struct cairn_dev *dev, *mem;

  /* Only a file can be preallocated. */
  cr_assert_eq (dev_mem_create (MiB, &mem), 0);
  cr_assert_eq (dev_file_preallocate (mem, DEV_PREALLOC_FULL, NULL, NULL),
                -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "only a file") != NULL, "message: %s",
             cairn_errmsg ());
  dev_close (mem);

  /* Nor a file opened read-only. */
  tmp_path (path, sizeof path, "r.pool");
  cr_assert_eq (dev_file_open (path, DEV_CREATE, MiB, &dev), 0);
  dev_close (dev);
  cr_assert_eq (dev_file_open (path, DEV_RDONLY, 0, &dev), 0);
  cr_assert_eq (dev_file_preallocate (dev, DEV_PREALLOC_SPACE, NULL, NULL),
                -EROFS);
  cr_assert (strstr (cairn_errmsg (), "read-only") != NULL, "message: %s",
             cairn_errmsg ());
  dev_close (dev);
}

/* ------------------------------------------------------------ fault */

Test (fault, nth_read_once)
{
  struct cairn_dev *lower = mem (64 * KiB), *dev;
  uint8_t buf[512];

  cr_assert_eq (dev_fault_create (lower, &dev), 0);
  cr_assert_str_eq (dev->ops->kind, "fault");
  cr_assert_eq (dev->size, lower->size);
  dev_fault_set (dev, DEV_FAULT_READ, 3, false, -EIO);
  cr_assert_eq (dev_pread (dev, buf, 512, 0), 0);
  cr_assert_eq (dev_pwrite (dev, buf, 512, 0), 0, "writes do not count");
  cr_assert_eq (dev_pread (dev, buf, 512, 0), 0);
  cr_assert_eq (dev_pread (dev, buf, 512, 0), -EIO);
  cr_assert (strstr (cairn_errmsg (), "injected read fault") != NULL,
             "message: %s", cairn_errmsg ());
  for (int i = 0; i < 10; i++)
    cr_assert_eq (dev_pread (dev, buf, 512, 0), 0, "not sticky");
  dev_close (dev);
  dev_close (lower);
}

Test (fault, sticky_write_never_reaches_lower)
{
  struct cairn_dev *lower = mem (64 * KiB), *dev;

  cr_assert_eq (dev_fault_create (lower, &dev), 0);
  dev_fault_set (dev, DEV_FAULT_WRITE, 2, true, ENOSPC);
  write_tag (dev, 0, 4096, 1);
  for (int i = 0; i < 5; i++) {
    uint8_t buf[4096];

    fill (buf, sizeof buf, 2);
    cr_assert_eq (dev_pwrite (dev, buf, sizeof buf, 4096), -ENOSPC,
                  "write %d", i + 2);
  }
  CLEANUP_FREE uint8_t *a = read_all (lower, 0, 4096);
  CLEANUP_FREE uint8_t *b = read_all (lower, 4096, 4096);
  cr_assert (is_filled (a, 4096, 1));
  cr_assert (is_all (b, 4096, 0), "failed writes did not reach lower");
  cr_assert_eq (dev_flush (dev), 0, "flushes are not affected");
  dev_fault_clear (dev);
  write_tag (dev, 4096, 4096, 2);
  dev_close (dev);
  dev_close (lower);
}

Test (fault, flush_and_rearm)
{
  struct cairn_dev *lower = mem (64 * KiB), *dev;

  cr_assert_eq (dev_fault_create (lower, &dev), 0);
  dev_fault_set (dev, DEV_FAULT_FLUSH, 1, false, -EIO);
  cr_assert_eq (dev_flush (dev), -EIO);
  cr_assert_eq (counts (lower).flushes, 0);
  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (counts (lower).flushes, 1);

  /* Re-arming counts from the moment it is armed. */
  dev_fault_set (dev, DEV_FAULT_FLUSH, 2, true, -EROFS);
  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (dev_flush (dev), -EROFS);
  cr_assert_eq (dev_flush (dev), -EROFS);
  dev_fault_set (dev, DEV_FAULT_FLUSH, 0, false, -EIO);
  cr_assert_eq (dev_flush (dev), 0, "nth 0 disarms");
  dev_fault_set (dev, DEV_FAULT_READ, 1, true, -EIO);
  dev_fault_clear (dev);
  CLEANUP_FREE uint8_t *buf = read_all (dev, 0, 512);
  cr_assert (is_all (buf, 512, 0), "cleared: reads pass again");
  dev_close (dev);
  dev_close (lower);
}

/* ------------------------------------------------------------ power cut */

Test (powercut, unflushed_writes_stay_above_lower)
{
  struct cairn_dev *lower = mem (MiB), *dev;

  cr_assert_eq (dev_powercut_create (lower, 1, &dev), 0);
  cr_assert_str_eq (dev->ops->kind, "powercut");
  cr_assert_eq (dev->size, lower->size);
  write_tag (dev, 0, 8192, 1);
  write_tag (dev, 4096, 8192, 2);       /* overlaps the first */
  cr_assert_eq (dev_powercut_writes (dev), 2);

  CLEANUP_FREE uint8_t *via = read_all (dev, 0, 12288);
  CLEANUP_FREE uint8_t *low = read_all (lower, 0, 12288);
  cr_assert (is_filled (via, 4096, 1), "first write, not overlapped");
  cr_assert (is_filled (via + 4096, 8192, 2), "later write wins");
  cr_assert (is_all (low, 12288, 0), "nothing reached lower");
  cr_assert_eq (counts (lower).bytes_written, 0);

  /* A read that covers only part of a pending write. */
  CLEANUP_FREE uint8_t *part = read_all (dev, 2048, 1024);
  cr_assert (memcmp (part, via + 2048, 1024) == 0);

  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (counts (lower).flushes, 1);
  CLEANUP_FREE uint8_t *low2 = read_all (lower, 0, 12288);
  cr_assert (memcmp (low2, via, 12288) == 0, "flush applied in order");

  /* After a flush a cut loses nothing. */
  dev_powercut_cut (dev, true);
  cr_assert (dev_powercut_is_cut (dev));
  CLEANUP_FREE uint8_t *low3 = read_all (lower, 0, 12288);
  cr_assert (memcmp (low3, via, 12288) == 0);
  dev_close (dev);
  dev_close (lower);
}

Test (powercut, discard_is_pending)
{
  struct cairn_dev *lower = mem (MiB), *dev;

  cr_assert_eq (dev_powercut_create (lower, 1, &dev), 0);
  write_tag (dev, 0, 16 * KiB, 4);
  cr_assert_eq (dev_flush (dev), 0);
  cr_assert_eq (dev_discard (dev, 4096, 4096), 0);
  CLEANUP_FREE uint8_t *via = read_all (dev, 4096, 4096);
  CLEANUP_FREE uint8_t *low = read_all (lower, 0, 16 * KiB);
  cr_assert (is_all (via, 4096, 0), "a pending discard reads as zeros");
  cr_assert (is_filled (low, 16 * KiB, 4), "lower untouched before flush");
  cr_assert_eq (dev_flush (dev), 0);
  CLEANUP_FREE uint8_t *low2 = read_all (lower, 4096, 4096);
  cr_assert (is_all (low2, 4096, 0), "the mem lower zeroed it at flush");
  dev_close (dev);
  dev_close (lower);
}

/* After a cut every operation fails with -EIO and the cut's message. */
static void
check_dead (struct cairn_dev *dev)
{
  uint8_t buf[512] = { 0 };
  const char *msg = "device lost power (simulated power cut)";

  cr_assert (dev_powercut_is_cut (dev));
  cairn_error_clear ();
  cr_assert_eq (dev_pread (dev, buf, 512, 0), -EIO);
  cr_assert_str_eq (cairn_errmsg (), msg);
  cairn_error_clear ();
  cr_assert_eq (dev_pwrite (dev, buf, 512, 0), -EIO);
  cr_assert_str_eq (cairn_errmsg (), msg);
  cairn_error_clear ();
  cr_assert_eq (dev_flush (dev), -EIO);
  cr_assert_str_eq (cairn_errmsg (), msg);
  cairn_error_clear ();
  cr_assert_eq (dev_discard (dev, 0, 512), -EIO);
  cr_assert_str_eq (cairn_errmsg (), msg);
}

Test (powercut, arm_cuts_at_nth_write)
{
  struct cairn_dev *lower = mem (MiB), *dev;
  uint8_t buf[4096];
  uint64_t seed = test_seed ("powercut/arm_cuts_at_nth_write", 77);

  cr_assert_eq (dev_powercut_create (lower, seed, &dev), 0);
  write_tag (dev, 0, 4096, 1);
  write_tag (dev, 4096, 4096, 2);
  cr_assert_eq (dev_flush (dev), 0);
  dev_powercut_arm (dev, 3);
  write_tag (dev, 8192, 4096, 3);
  write_tag (dev, 12288, 4096, 4);
  cr_assert (!dev_powercut_is_cut (dev));
  fill (buf, sizeof buf, 5);
  cr_assert_eq (dev_pwrite (dev, buf, sizeof buf, 16384), -EIO,
                "the third write after arming is cut");
  cr_assert_eq (dev_powercut_writes (dev), 4, "the cut write is not counted");
  check_dead (dev);

  /* Flushed writes survive; the cut write never reaches lower. */
  CLEANUP_FREE uint8_t *low = read_all (lower, 0, 20480);
  cr_assert (is_filled (low, 4096, 1));
  cr_assert (is_filled (low + 4096, 4096, 2));
  cr_assert (is_all (low + 16384, 4096, 0));
  dev_close (dev);
  dev_close (lower);
}

Test (powercut, arm_zero_disarms)
{
  struct cairn_dev *lower = mem (MiB), *dev;

  cr_assert_eq (dev_powercut_create (lower, 5, &dev), 0);
  dev_powercut_arm (dev, 1);
  dev_powercut_arm (dev, 0);
  for (int i = 0; i < 10; i++)
    write_tag (dev, (uint64_t) i * 4096, 4096, (uint64_t) i);
  cr_assert (!dev_powercut_is_cut (dev));
  dev_close (dev);
  dev_close (lower);
}

/* The outcome of one cut over disjoint writes, as seen on lower. */
struct cut_outcome {
  unsigned applied, lost, torn;
};

/* Write n disjoint regions (4..16 KiB) over flushed 0xAA, cut, and check
 * that each region on lower is old, new, or (for at most one region) a
 * sector-aligned prefix of new over old.
 */
static struct cut_outcome
cut_disjoint (uint64_t seed, unsigned n, bool allow_tear, uint8_t *image,
              size_t image_len)
{
  struct cairn_dev *lower = mem (image_len), *dev;
  struct cut_outcome o = { 0, 0, 0 };
  uint64_t rng = seed ^ 0x5eed, off = 0;
  uint64_t *offs = calloc (n, sizeof *offs), *lens = calloc (n, sizeof *lens);
  uint8_t *base = malloc (image_len);

  cr_assert (offs && lens && base);
  memset (base, 0xaa, image_len);
  cr_assert_eq (dev_pwrite (lower, base, image_len, 0), 0);
  cr_assert_eq (dev_powercut_create (lower, seed, &dev), 0);

  for (unsigned i = 0; i < n; i++) {
    lens[i] = (4 + test_random (&rng) % 13) * KiB;
    offs[i] = off;
    off += lens[i];
    cr_assert_leq (off, image_len);
    write_tag (dev, offs[i], lens[i], i + 1);
  }
  /* Reads through the device see every write before the cut. */
  for (unsigned i = 0; i < n; i += 97) {
    CLEANUP_FREE uint8_t *via = read_all (dev, offs[i], lens[i]);
    cr_assert (is_filled (via, lens[i], i + 1));
  }
  dev_powercut_cut (dev, allow_tear);
  check_dead (dev);

  cr_assert_eq (dev_pread (lower, image, image_len, 0), 0);
  for (unsigned i = 0; i < n; i++) {
    const uint8_t *r = image + offs[i];
    CLEANUP_FREE uint8_t *want = malloc (lens[i]);
    uint64_t s;

    cr_assert_not_null (want);
    fill (want, lens[i], i + 1);
    if (is_all (r, lens[i], 0xaa))
      o.lost++;
    else if (memcmp (r, want, lens[i]) == 0)
      o.applied++;
    else {
      /* Torn: whole sectors of new, then whole sectors of old. */
      for (s = 0; s < lens[i] && memcmp (r + s, want + s, 512) == 0; s += 512)
        ;
      cr_assert_eq (s % 512, 0);
      cr_assert (is_all (r + s, lens[i] - s, 0xaa),
                 "seed %" PRIu64 ": region %u is neither old, new nor a "
                 "sector prefix of new", seed, i);
      o.torn++;
    }
  }
  cr_assert (is_all (image + off, image_len - off, 0xaa),
             "nothing outside the writes changed");
  cr_assert_leq (o.torn, allow_tear ? 1 : 0, "seed %" PRIu64, seed);
  free (offs);
  free (lens);
  free (base);
  dev_close (dev);
  dev_close (lower);
  return o;
}

Test (powercut, cut_applies_a_subset_disjoint)
{
  uint64_t seed = test_seed ("powercut/cut_applies_a_subset_disjoint", 1234);
  size_t image_len = 2000 * 16 * KiB;
  CLEANUP_FREE uint8_t *image = malloc (image_len);
  unsigned applied = 0, total = 0, torn = 0;

  cr_assert_not_null (image);
  /* One big cut with ~2000 pending writes, then many small ones. */
  {
    struct cut_outcome o = cut_disjoint (seed, 2000, true, image, image_len);

    cr_assert_gt (o.applied, 800, "about half applied: %u", o.applied);
    cr_assert_gt (o.lost, 800, "about half lost: %u", o.lost);
  }
  for (uint64_t s = seed + 1; s < seed + 101; s++) {
    struct cut_outcome o = cut_disjoint (s, 8, true, image, 8 * 16 * KiB);

    applied += o.applied;
    torn += o.torn;
    total += 8;
  }
  cr_assert_gt (torn, 5, "tears happen (%u in 100 cuts)", torn);
  cr_assert_gt (applied, total / 4);
  cr_assert_lt (applied, total * 3 / 4);
  for (uint64_t s = seed + 101; s < seed + 151; s++)
    cut_disjoint (s, 8, false, image, 8 * 16 * KiB);
}

/* Could lower's region [0, len) come from applying a subset of the writes
 * in order over base, with at most one of them cut to a sector prefix?
 */
static bool
explainable (const uint8_t *got, const uint8_t *base, size_t len,
             uint8_t *const *data, const uint64_t *offs, const uint64_t *lens,
             unsigned n)
{
  uint8_t sim[4096];

  cr_assert_leq (len, sizeof sim);
  for (uint32_t mask = 0; mask < (1u << n); mask++) {
    /* torn == n means no tear; otherwise tear write torn to k sectors. */
    for (unsigned torn = 0; torn <= n; torn++) {
      uint64_t nk = 1;

      if (torn < n) {
        if (!(mask & (1u << torn)))
          continue;
        nk = lens[torn] / 512;
      }
      for (uint64_t k = 0; k < nk; k++) {
        memcpy (sim, base, len);
        for (unsigned i = 0; i < n; i++) {
          if (mask & (1u << i))
            memcpy (sim + offs[i], data[i], i == torn ? k * 512 : lens[i]);
        }
        if (memcmp (sim, got, len) == 0)
          return true;
      }
    }
  }
  return false;
}

Test (powercut, cut_overlapping_is_an_ordered_subset)
{
  uint64_t seed0 = test_seed ("powercut/cut_overlapping_is_an_ordered_subset",
                              99);
  const size_t len = 4096;
  const unsigned n = 8;

  for (uint64_t seed = seed0; seed < seed0 + 60; seed++) {
    struct cairn_dev *lower = mem (64 * KiB), *dev;
    uint8_t *data[8], base[4096], got[4096];
    uint64_t offs[8], lens[8], rng = seed;

    memset (base, 0x5a, len);
    cr_assert_eq (dev_pwrite (lower, base, len, 0), 0);
    cr_assert_eq (dev_powercut_create (lower, seed, &dev), 0);
    for (unsigned i = 0; i < n; i++) {
      uint64_t first = test_random (&rng) % 8;

      lens[i] = (1 + test_random (&rng) % (8 - first)) * 512;
      offs[i] = first * 512;
      data[i] = malloc (lens[i]);
      cr_assert_not_null (data[i]);
      fill (data[i], lens[i], seed * 16 + i);
      cr_assert_eq (dev_pwrite (dev, data[i], lens[i], offs[i]), 0);
    }
    dev_powercut_cut (dev, true);
    cr_assert_eq (dev_pread (lower, got, len, 0), 0);
    cr_assert (explainable (got, base, len, data, offs, lens, n),
               "seed %" PRIu64 ": lower is not an ordered subset of the "
               "pending writes with at most one torn", seed);
    for (unsigned i = 0; i < n; i++)
      free (data[i]);
    dev_close (dev);
    dev_close (lower);
  }
}

/* Run a fixed workload with flushes on a fresh device, cut, and return
 * lower's image (the caller frees it).
 */
static uint8_t *
workload_image (uint64_t seed, uint64_t arm_at)
{
  struct cairn_dev *lower = mem (MiB), *dev;
  uint64_t rng = 4242;
  uint8_t *image = malloc (MiB);

  cr_assert_not_null (image);
  cr_assert_eq (dev_powercut_create (lower, seed, &dev), 0);
  dev_powercut_arm (dev, arm_at);
  /* 320 writes: the last 20 are still pending at the final cut. */
  for (unsigned i = 0; i < 320; i++) {
    uint64_t off = test_random (&rng) % (MiB / 512 - 32) * 512;
    size_t len = (1 + test_random (&rng) % 32) * 512;
    CLEANUP_FREE uint8_t *buf = malloc (len);

    cr_assert_not_null (buf);
    fill (buf, len, i);
    if (dev_pwrite (dev, buf, len, off) < 0)
      break;
    if (i % 50 == 49)
      cr_assert_eq (dev_flush (dev), 0);
  }
  dev_powercut_cut (dev, true);
  cr_assert_eq (dev_pread (lower, image, MiB, 0), 0);
  dev_close (dev);
  dev_close (lower);
  return image;
}

Test (powercut, same_seed_same_outcome)
{
  uint64_t seed = test_seed ("powercut/same_seed_same_outcome", 31337);
  CLEANUP_FREE uint8_t *a = workload_image (seed, 0);
  CLEANUP_FREE uint8_t *b = workload_image (seed, 0);
  CLEANUP_FREE uint8_t *c = workload_image (seed, 130);
  CLEANUP_FREE uint8_t *d = workload_image (seed, 130);
  bool differs = false;

  cr_assert (memcmp (a, b, MiB) == 0, "seed %" PRIu64 " replays", seed);
  cr_assert (memcmp (c, d, MiB) == 0, "armed cut replays");
  for (uint64_t s = seed + 1; s < seed + 4 && !differs; s++) {
    CLEANUP_FREE uint8_t *e = workload_image (s, 0);
    differs = memcmp (a, e, MiB) != 0;
  }
  cr_assert (differs, "other seeds give other outcomes");
}

Test (powercut, flush_failure_keeps_the_rest_pending)
{
  struct cairn_dev *lower = mem (MiB), *fault, *dev;

  cr_assert_eq (dev_fault_create (lower, &fault), 0);
  cr_assert_eq (dev_powercut_create (fault, 3, &dev), 0);
  for (unsigned i = 0; i < 4; i++)
    write_tag (dev, i * 4096, 4096, i + 1);
  dev_fault_set (fault, DEV_FAULT_WRITE, 3, false, -EIO);
  cr_assert_eq (dev_flush (dev), -EIO);
  CLEANUP_FREE uint8_t *low = read_all (lower, 0, 16 * KiB);
  cr_assert (is_filled (low, 4096, 1));
  cr_assert (is_filled (low + 4096, 4096, 2));
  cr_assert (is_all (low + 8192, 8192, 0));
  CLEANUP_FREE uint8_t *via = read_all (dev, 8192, 8192);
  cr_assert (is_filled (via, 4096, 3), "still pending, still visible");
  cr_assert_eq (dev_flush (dev), 0);
  CLEANUP_FREE uint8_t *low2 = read_all (lower, 8192, 8192);
  cr_assert (is_filled (low2, 4096, 3));
  cr_assert (is_filled (low2 + 4096, 4096, 4));
  dev_close (dev);
  dev_close (fault);
  dev_close (lower);
}

/* One writer thread of the concurrency test. */
struct writer {
  struct cairn_dev *dev;
  unsigned id;
};

/* Write this thread's own 64 regions, flushing now and then. */
static void *
writer_thread (void *arg)
{
  struct writer *w = arg;
  uint8_t buf[4096];

  for (unsigned i = 0; i < 64; i++) {
    fill (buf, sizeof buf, w->id * 1000 + i);
    if (dev_pwrite (w->dev, buf, sizeof buf,
                    ((uint64_t) w->id * 64 + i) * 4096) < 0)
      return (void *) 1;
    if (i % 16 == 15 && dev_flush (w->dev) < 0)
      return (void *) 1;
  }
  return NULL;
}

Test (powercut, threads)
{
  struct cairn_dev *lower = mem (4 * MiB), *dev;
  pthread_t th[4];
  struct writer w[4];
  void *ret;

  cr_assert_eq (dev_powercut_create (lower, 8, &dev), 0);
  for (unsigned t = 0; t < 4; t++) {
    w[t] = (struct writer) { .dev = dev, .id = t };
    cr_assert_eq (pthread_create (&th[t], NULL, writer_thread, &w[t]), 0);
  }
  for (unsigned t = 0; t < 4; t++) {
    cr_assert_eq (pthread_join (th[t], &ret), 0);
    cr_assert_null (ret);
  }
  cr_assert_eq (dev_powercut_writes (dev), 256);
  cr_assert_eq (counts (dev).bytes_written, 256 * 4096);
  for (unsigned t = 0; t < 4; t++) {
    for (unsigned i = 0; i < 64; i++) {
      CLEANUP_FREE uint8_t *low =
        read_all (lower, ((uint64_t) t * 64 + i) * 4096, 4096);
      cr_assert (is_filled (low, 4096, t * 1000 + i));
    }
  }
  dev_close (dev);
  dev_close (lower);
}

/* ---------------------------------------------------------------- cut policies and shared power */

/* n pending 4 KiB writes, write i at block i filled with 10 + i, over a
 * lower device of zeros; cut with keep (no tear); which blocks reached
 * lower, one bool each.
 */
static void
policy_outcome (enum dev_powercut_keep keep, uint64_t seed, unsigned n,
                bool *kept)
{
  struct cairn_dev *lower = mem (MiB), *dev;

  cr_assert_eq (dev_powercut_create (lower, seed, &dev), 0);
  dev_powercut_set_policy (dev, keep, DEV_POWERCUT_TEAR_PREFIX);
  for (unsigned i = 0; i < n; i++)
    write_tag (dev, (uint64_t) i * 4096, 4096, 10 + i);
  cr_assert_eq (dev_powercut_pending (dev), n);
  dev_powercut_cut (dev, false);
  cr_assert_eq (dev_powercut_pending (dev), 0);
  for (unsigned i = 0; i < n; i++) {
    CLEANUP_FREE uint8_t *low = read_all (lower, (uint64_t) i * 4096, 4096);

    kept[i] = is_filled (low, 4096, 10 + i);
    cr_assert (kept[i] || is_all (low, 4096, 0), "block %u is neither the "
               "write nor the old contents", i);
  }
  dev_close (dev);
  dev_close (lower);
}

/* Each policy gives the subsets it names, and over seeds all of them. */
Test (powercut, keep_policies)
{
  uint64_t seed = test_seed ("powercut/keep_policies", 404);
  enum { N = 12, SEEDS = 64 };
  bool kept[N];

  for (uint64_t s = seed; s < seed + SEEDS; s++) {
    unsigned n, first_lost;

    policy_outcome (DEV_POWERCUT_KEEP_NONE, s, N, kept);
    for (unsigned i = 0; i < N; i++)
      cr_assert (!kept[i], "none: block %u kept", i);
    policy_outcome (DEV_POWERCUT_KEEP_ALL, s, N, kept);
    for (unsigned i = 0; i < N; i++)
      cr_assert (kept[i], "all: block %u lost", i);
    policy_outcome (DEV_POWERCUT_KEEP_ALL_BUT_ONE, s, N, kept);
    n = 0;
    for (unsigned i = 0; i < N; i++)
      n += kept[i];
    cr_assert_eq (n, N - 1, "all-but-one kept %u of %u", n, N);
    policy_outcome (DEV_POWERCUT_KEEP_ONE, s, N, kept);
    n = 0;
    for (unsigned i = 0; i < N; i++)
      n += kept[i];
    cr_assert_eq (n, 1, "one kept %u", n);
    policy_outcome (DEV_POWERCUT_KEEP_PREFIX, s, N, kept);
    for (first_lost = 0; first_lost < N && kept[first_lost]; first_lost++)
      ;
    for (unsigned i = first_lost; i < N; i++)
      cr_assert (!kept[i], "prefix: block %u kept after %u was lost", i,
                 first_lost);
  }

  /* A drawn p reaches both ends and the middle over the seeds. */
  unsigned none = 0, all = 0, some = 0;
  for (uint64_t s = seed; s < seed + 4 * SEEDS; s++) {
    unsigned n = 0;

    policy_outcome (DEV_POWERCUT_KEEP_RANDOM, s, N, kept);
    for (unsigned i = 0; i < N; i++)
      n += kept[i];
    none += n == 0;
    all += n == N;
    some += n > 0 && n < N;
  }
  cr_assert (none > 0 && all > 0 && some > 0, "random: none %u, all %u, "
             "some %u", none, all, some);
}

/* A torn write under the sectors policy keeps a proper subset of its
 * sectors, each either new or old, and not only prefixes.
 */
Test (powercut, tear_sectors)
{
  uint64_t seed = test_seed ("powercut/tear_sectors", 505);
  const unsigned sectors = 64 * KiB / 512;
  unsigned torn = 0, not_prefix = 0;

  for (uint64_t s = seed; s < seed + 200; s++) {
    struct cairn_dev *lower = mem (MiB), *dev;
    bool seen_old = false, prefix = true;
    unsigned nnew = 0;

    cr_assert_eq (dev_powercut_create (lower, s, &dev), 0);
    dev_powercut_set_policy (dev, DEV_POWERCUT_KEEP_ALL,
                             DEV_POWERCUT_TEAR_SECTORS);
    write_tag (dev, 0, 64 * KiB, 7);
    dev_powercut_cut (dev, true);
    CLEANUP_FREE uint8_t *low = read_all (lower, 0, 64 * KiB);
    CLEANUP_FREE uint8_t *want = malloc (64 * KiB);
    cr_assert_not_null (want);
    fill (want, 64 * KiB, 7);
    for (unsigned i = 0; i < sectors; i++) {
      bool isnew = memcmp (low + i * 512, want + i * 512, 512) == 0;

      cr_assert (isnew || is_all (low + i * 512, 512, 0), "seed %" PRIu64
                 ": sector %u is neither old nor new", s, i);
      nnew += isnew;
      if (isnew && seen_old)
        prefix = false;
      seen_old |= !isnew;
    }
    if (nnew < sectors) {
      torn++;
      not_prefix += !prefix;
    }
    dev_close (dev);
    dev_close (lower);
  }
  cr_assert_gt (torn, 50, "%u of 200 cuts tore the write", torn);
  cr_assert_gt (not_prefix, 25, "%u torn writes were not prefixes",
                not_prefix);
}

/* Two devices on one power supply: one count, one cut for both. */
Test (powercut, shared_power)
{
  uint64_t seed = test_seed ("powercut/shared_power", 606);
  struct cairn_dev *la = mem (MiB), *lb = mem (MiB), *a, *b;

  cr_assert_eq (dev_powercut_create (la, seed, &a), 0);
  cr_assert_eq (dev_powercut_create_shared (lb, la, &b), -EINVAL,
                "a lower device is no power supply");
  cr_assert_null (b);
  cr_assert_eq (dev_powercut_create_shared (lb, a, &b), 0);
  dev_powercut_set_policy (b, DEV_POWERCUT_KEEP_NONE,
                           DEV_POWERCUT_TEAR_PREFIX);
  write_tag (a, 0, 4096, 1);
  write_tag (b, 0, 4096, 2);
  cr_assert_eq (dev_powercut_ops (a), 2);
  cr_assert_eq (dev_powercut_ops (b), 2);
  cr_assert_eq (dev_powercut_pending (a), 2);
  /* A flush of one member makes only that member's writes durable. */
  cr_assert_eq (dev_flush (a), 0);
  cr_assert_eq (dev_powercut_pending (b), 1);
  /* Armed on a, the cut comes at b's write and kills both. */
  dev_powercut_arm (a, 2);
  write_tag (b, 4096, 4096, 3);
  cr_assert (!dev_powercut_is_cut (a));
  uint8_t buf[4096] = { 0 };
  cr_assert_eq (dev_pwrite (b, buf, 4096, 8192), -EIO);
  cr_assert (dev_powercut_is_cut (a) && dev_powercut_is_cut (b));
  cr_assert_eq (dev_pwrite (a, buf, 4096, 8192), -EIO);
  check_dead (a);
  check_dead (b);
  CLEANUP_FREE uint8_t *low_a = read_all (la, 0, 4096);
  CLEANUP_FREE uint8_t *low_b = read_all (lb, 0, 8192);
  cr_assert (is_filled (low_a, 4096, 1), "a's flushed write survives");
  cr_assert (is_all (low_b, 8192, 0), "b's unflushed writes are lost");
  /* Members close in any order; the supply goes with the last. */
  dev_close (a);
  dev_close (b);
  dev_close (la);
  dev_close (lb);
}
