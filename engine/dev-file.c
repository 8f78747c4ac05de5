/* Cairn engine, layer "dev": the file and block device backend.
 *
 * A pool lives in a regular file or on a whole block device.  The device is
 * opened O_CLOEXEC and locked with flock, which belongs to the open file
 * description and so survives nbdkit's fork (an fcntl lock would not); the
 * lock is released when the descriptor is closed.  A second opener, in this
 * process or another, gets -EBUSY and a message naming the process that
 * holds the lock now and its command line: /proc/locks names the process
 * that took it, which nbdkit's fork leaves dead, so the holder is found
 * by the lock its descriptor shows in /proc/PID/fdinfo.
 *
 * pread and pwrite are positional, so the backend needs no lock for its
 * own sake.  It takes one around each pwrite to a regular file all the
 * same: the kernel holds the file's inode lock through every buffered write
 * to it, and threads that wait for that lock spin on the CPU while its
 * holder copies, a CPU that the writer's other threads want for hashing
 * (bench/README.md, "Buffered writes to one file wait for its inode
 * lock").  Waiting on our mutex sleeps instead.  Block devices take no
 * such lock.  This is the only file of the engine that knows Linux ioctls
 * (BLKGETSIZE64, BLKDISCARD).
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <linux/fs.h>

#include "dev.h"
#include "dev-iowatch.h"

struct file_dev {
  struct cairn_dev dev;       /* must be first */
  int fd;
  bool is_block;              /* a block device, not a regular file */
  bool rdonly;
  pthread_mutex_t write_lock; /* held through a pwrite to a regular file */
  bool watch_perf;            /* cached reads watched by perf where it can */
  /* A read-only shared mapping of the whole device, made at the first
   * file_resident and only ever given to mincore: MAP_FAILED before, NULL
   * when it could not be made.  Set once, by compare-and-swap.
   */
  void *view;
};

/* The file backend of a device. */
static inline struct file_dev *
to_file_dev (struct cairn_dev *dev)
{
  return (struct file_dev *) dev;
}

/* Read len bytes at off, retrying short reads; zeros beyond end of file. */
static int
file_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct file_dev *f = to_file_dev (dev);
  uint8_t *p = buf;
  ssize_t n;

  while (len > 0) {
    n = pread (f->fd, p, len, (off_t) off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return cairn_fail (-errno, "%s: read at offset %" PRIu64 ": %m",
                         dev->name, off);
    }
    if (n == 0) {
      /* End of file: a file shorter than the device reads as zeros. */
      memset (p, 0, len);
      break;
    }
    p += n;
    len -= (size_t) n;
    off += (uint64_t) n;
  }
  return 0;
}

/* Read what the page cache held of [off, off + len).
 *
 * preadv2 with RWF_NOWAIT returns what is in the cache and fails with
 * EAGAIN, or returns short, where it would wait for the disk; but a call
 * can also return data that it has just brought in from the disk, so the
 * thread is watched across the call (dev-iowatch.c), and when it brought
 * anything in, nothing the call returned counts as cached and the caller
 * reads and checks it all.
 */
static int
file_pread_cached (struct cairn_dev *dev, void *buf, size_t len, uint64_t off,
                   size_t *gotp)
{
  struct file_dev *f = to_file_dev (dev);
  struct iovec iov = { .iov_base = buf, .iov_len = len };
  struct iowatch w;
  ssize_t n;

  *gotp = 0;
  iowatch_start (&w, f->watch_perf);
  do
    n = preadv2 (f->fd, &iov, 1, (off_t) off, RWF_NOWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno != EAGAIN && errno != EOPNOTSUPP)
    return cairn_fail (-errno, "%s: read at offset %" PRIu64 ": %m",
                       dev->name, off);
  if (iowatch_quiet (&w) && n > 0)
    *gotp = (size_t) n;
  return 0;
}

/* How this thread's cached reads are watched. */
static const char *
file_cache_watch (struct cairn_dev *dev)
{
  return iowatch_method (to_file_dev (dev)->watch_perf);
}

/* Read ahead nothing: every page comes into the cache through a read of
 * its own (dev.h, T4).
 */
static void
file_no_readahead (struct cairn_dev *dev)
{
  posix_fadvise (to_file_dev (dev)->fd, 0, 0, POSIX_FADV_RANDOM);
}

/* Write len bytes at off, retrying short writes. */
static int
file_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  struct file_dev *f = to_file_dev (dev);
  const uint8_t *p = buf;
  ssize_t n;

  if (f->rdonly)
    return cairn_fail (-EROFS, "%s: write: the device was opened read-only",
                       dev->name);
  while (len > 0) {
    if (!f->is_block)
      pthread_mutex_lock (&f->write_lock);
    n = pwrite (f->fd, p, len, (off_t) off);
    if (!f->is_block)
      pthread_mutex_unlock (&f->write_lock);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return cairn_fail (-errno, "%s: write at offset %" PRIu64 ": %m",
                         dev->name, off);
    }
    if (n == 0)
      return cairn_fail (-EIO,
                         "%s: write at offset %" PRIu64 " made no progress",
                         dev->name, off);
    p += n;
    len -= (size_t) n;
    off += (uint64_t) n;
  }
  return 0;
}

/* Make completed writes durable with fdatasync. */
static int
file_flush (struct cairn_dev *dev)
{
  struct file_dev *f = to_file_dev (dev);

  if (f->rdonly)
    return 0;
  if (fdatasync (f->fd) == -1)
    return cairn_fail (-errno, "%s: fdatasync: %m", dev->name);
  return 0;
}

/* Punch a hole in a file, or discard on a block device; best effort. */
static int
file_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct file_dev *f = to_file_dev (dev);

  if (f->rdonly)
    return cairn_fail (-EROFS, "%s: discard: the device was opened read-only",
                       dev->name);
  if (len == 0)
    return 0;

  if (f->is_block) {
    uint64_t range[2] = { off, len };

    /* Discard is a hint: a device that cannot do it is not an error. */
    ioctl (f->fd, BLKDISCARD, range);
    return 0;
  }

  if (fallocate (f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                 (off_t) off, (off_t) len) == -1) {
    if (errno == EOPNOTSUPP || errno == ENOSYS)
      return 0;
    return cairn_fail (-errno,
                       "%s: punching a hole of %" PRIu64 " bytes at offset %"
                       PRIu64 ": %m", dev->name, len, off);
  }
  return 0;
}

/* Close the descriptor, which also drops the lock. */
static void
file_close (struct cairn_dev *dev)
{
  struct file_dev *f = to_file_dev (dev);

  if (f->view != MAP_FAILED && f->view != NULL)
    munmap (f->view, dev->size);
  close (f->fd);
  pthread_mutex_destroy (&f->write_lock);
  free (f);
}

/* The kernel drops only clean, unlocked, unmapped pages wholly inside the
 * range; a dirty one is left alone (its writeback may start sooner).
 */
static void
file_drop_cached (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  posix_fadvise (to_file_dev (dev)->fd, (off_t) off, (off_t) len,
                 POSIX_FADV_DONTNEED);
}

/* Which blocks of [off, off + len) the page cache holds: mincore on a
 * mapping of the device that nothing reads through, so it only asks the
 * page cache (mincore reports a file mapping's pages whether or not they
 * are mapped into this process).  Pages are DEV_TRUST_BLOCK or a multiple
 * of it, as on every Linux port.
 */
static int
file_resident (struct cairn_dev *dev, uint64_t off, uint64_t len,
               unsigned char *vec)
{
  struct file_dev *f = to_file_dev (dev);
  uint64_t page = (uint64_t) sysconf (_SC_PAGESIZE), first, last, bpp;
  void *view = __atomic_load_n (&f->view, __ATOMIC_ACQUIRE);
  unsigned char pages[DEV_RESIDENT_MAX];   /* pages are no smaller */

  if (view == MAP_FAILED) {
    void *expect = MAP_FAILED;
    view = mmap (NULL, dev->size, PROT_READ, MAP_SHARED, f->fd, 0);
    if (view == MAP_FAILED)
      view = NULL;
    if (!__atomic_compare_exchange_n (&f->view, &expect, view, false,
                                      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      if (view)
        munmap (view, dev->size);
      view = expect;
    }
  }
  if (view == NULL || page % DEV_TRUST_BLOCK || len == 0)
    return -EOPNOTSUPP;
  bpp = page / DEV_TRUST_BLOCK;
  first = off / page;
  last = (off + len - 1) / page;
  if (last - first + 1 > sizeof pages)
    return -EINVAL;
  if (mincore ((uint8_t *) view + first * page, (last - first + 1) * page,
               pages) == -1)
    return -errno;
  for (uint64_t b = 0; b < len / DEV_TRUST_BLOCK; b++)
    vec[b] = pages[(off / DEV_TRUST_BLOCK + b) / bpp - first] & 1;
  return 0;
}

/* Ask the kernel to read [off, off + len) into the page cache and return
 * without waiting.  POSIX_FADV_WILLNEED reads at most the larger of the
 * file's read-ahead window and the device's largest request per call, so
 * it goes in steps no window is smaller than.  The reads asked for here
 * are not the next cached read's own (iowatch_rebase).
 */
static void
file_prefetch (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  enum { STEP = 128 * 1024 };
  struct file_dev *f = to_file_dev (dev);

  for (uint64_t at = 0; at < len; at += STEP)
    posix_fadvise (f->fd, (off_t) (off + at),
                   (off_t) (len - at < STEP ? len - at : STEP),
                   POSIX_FADV_WILLNEED);
  iowatch_rebase ();
}

static const struct cairn_dev_ops file_ops = {
  .kind = "file",
  .pread = file_pread,
  .pwrite = file_pwrite,
  .flush = file_flush,
  .discard = file_discard,
  .close = file_close,
  .pread_cached = file_pread_cached,
  .cache_watch = file_cache_watch,
  .no_readahead = file_no_readahead,
  .drop_cached = file_drop_cached,
  .resident = file_resident,
  .prefetch = file_prefetch,
};

/* Find in /proc/locks the pid holding a flock on st's file; 0 if unknown.
 *
 * Lines look like "1: FLOCK  ADVISORY  WRITE 1234 08:02:12345 0 EOF", with
 * the device as hexadecimal major:minor of the inode's superblock.  Lines
 * of blocked waiters ("1: -> FLOCK ...") are skipped.  On some filesystems
 * (btrfs subvolumes, overlayfs) st_dev is not the superblock's device, so
 * when no line matches device and inode, a pid is still named if every
 * FLOCK line on that inode number names the same one.
 */
static int
file_lock_holder (const struct stat *st)
{
  FILE *fp;
  char line[256];
  char type[32];
  int pid, inode_pid = 0, exact_pid = 0;
  unsigned int maj, min;
  unsigned long long ino;
  bool inode_ambiguous = false;

  fp = fopen ("/proc/locks", "re");
  if (fp == NULL)
    return 0;
  while (exact_pid == 0 && fgets (line, sizeof line, fp) != NULL) {
    if (strstr (line, "->") != NULL)
      continue;
    if (sscanf (line, "%*d: %31s %*s %*s %d %x:%x:%llu",
                type, &pid, &maj, &min, &ino) != 5)
      continue;
    if (strcmp (type, "FLOCK") != 0 || pid <= 0 || ino != st->st_ino)
      continue;
    if (maj == major (st->st_dev) && min == minor (st->st_dev))
      exact_pid = pid;
    else if (inode_pid == 0)
      inode_pid = pid;
    else if (inode_pid != pid)
      inode_ambiguous = true;
  }
  fclose (fp);
  if (exact_pid > 0)
    return exact_pid;
  return inode_ambiguous ? 0 : inode_pid;
}

/* Whether process pid holds a flock on st's file: 1 if one of its
 * descriptors is open on the file and its fdinfo shows the lock, 0 if
 * none does (or it is gone), -1 if its descriptors cannot be read (another
 * user's).
 */
static int
pid_holds_flock (int pid, const struct stat *st)
{
  char path[320], line[256];
  struct dirent *d;
  struct stat fst;
  bool held = false;
  DIR *dir;

  snprintf (path, sizeof path, "/proc/%d/fd", pid);
  dir = opendir (path);
  if (dir == NULL)
    return errno == EACCES || errno == EPERM ? -1 : 0;   /* or gone */
  while (!held && (d = readdir (dir)) != NULL) {
    FILE *fp;

    if (d->d_name[0] == '.')
      continue;
    snprintf (path, sizeof path, "/proc/%d/fd/%s", pid, d->d_name);
    if (stat (path, &fst) == -1 || fst.st_dev != st->st_dev ||
        fst.st_ino != st->st_ino)
      continue;
    snprintf (path, sizeof path, "/proc/%d/fdinfo/%s", pid, d->d_name);
    fp = fopen (path, "re");
    if (fp == NULL)
      continue;
    while (!held && fgets (line, sizeof line, fp) != NULL)
      held = strncmp (line, "lock:", 5) == 0 && strstr (line, " FLOCK ");
    fclose (fp);
  }
  closedir (dir);
  return held;
}

/* The process holding the flock on st's file now; 0 if unknown.
 *
 * /proc/locks names the process that took the lock, but a flock belongs
 * to the open file description: nbdkit takes it before it forks into the
 * background and its child holds it after the taker has exited.  So the
 * taker is named only if it still holds the lock; otherwise the process
 * whose descriptor shows the lock in its fdinfo is looked for.
 */
static int
file_lock_owner (const struct stat *st)
{
  int taker = file_lock_holder (st), pid, r;
  struct dirent *d;
  DIR *dir;

  r = taker > 0 ? pid_holds_flock (taker, st) : 0;
  if (r != 0)
    return taker;             /* holds it, or is there but unreadable */
  dir = opendir ("/proc");
  if (dir == NULL)
    return 0;
  pid = 0;
  while (pid == 0 && (d = readdir (dir)) != NULL) {
    int p = atoi (d->d_name);

    if (p > 0 && p != taker && pid_holds_flock (p, st) == 1)
      pid = p;
  }
  closedir (dir);
  return pid;
}

/* Write process pid's command line into buf (arguments joined by spaces,
 * cut with "..." when long); "" if it cannot be read.
 */
static void
describe_process (int pid, char *buf, size_t len)
{
  char path[64];
  size_t n = 0;
  FILE *fp;

  buf[0] = '\0';
  snprintf (path, sizeof path, "/proc/%d/cmdline", pid);
  fp = fopen (path, "re");
  if (fp == NULL)
    return;
  n = fread (buf, 1, len - 1, fp);
  if (n == len - 1 && fgetc (fp) != EOF && len > 4)
    memcpy (buf + len - 4, "...", 3);        /* cut: say so */
  fclose (fp);
  while (n > 0 && buf[n - 1] == '\0')
    n--;
  buf[n] = '\0';
  for (size_t i = 0; i < n; i++)
    if (buf[i] == '\0')
      buf[i] = ' ';
}

/* Take the pool lock on fd, or fail with -EBUSY naming the holder: its
 * pid and command line (a server's shows its sockets and pidfile).
 */
static int CAIRN_WUR
file_lock (int fd, const char *path, bool rdonly)
{
  struct stat st;
  char cmd[512];
  int pid;

  while (flock (fd, (rdonly ? LOCK_SH : LOCK_EX) | LOCK_NB) == -1) {
    if (errno == EINTR)
      continue;
    if (errno != EWOULDBLOCK)
      return cairn_fail (-errno, "%s: flock: %m", path);
    pid = fstat (fd, &st) == 0 ? file_lock_owner (&st) : 0;
    if (pid > 0)
      describe_process (pid, cmd, sizeof cmd);
    if (pid > 0 && cmd[0])
      return cairn_fail (-EBUSY, "pool %s is in use by process %d (%s)",
                         path, pid, cmd);
    if (pid > 0)
      return cairn_fail (-EBUSY,
                         "pool %s is in use by process %d (another cairn or "
                         "nbdkit holds its lock)", path, pid);
    return cairn_fail (-EBUSY,
                       "pool %s is in use by another process (another cairn "
                       "or nbdkit holds its lock)", path);
  }
  return 0;
}

/* Open (or create) a file or block device as a locked device. */
int
dev_file_open (const char *path, unsigned flags, uint64_t create_size,
               struct cairn_dev **devp)
{
  struct file_dev *f = NULL;
  struct stat st;
  bool create = flags & DEV_CREATE;
  bool rdonly = flags & DEV_RDONLY;
  bool created = false;
  int fd = -1;
  int r;

  *devp = NULL;
  if (flags & ~(DEV_CREATE | DEV_RDONLY | DEV_WATCH_RUSAGE))
    return cairn_fail (-EINVAL, "%s: unknown device flags 0x%x", path, flags);
  if (create && rdonly)
    return cairn_fail (-EINVAL, "%s: cannot create a device read-only", path);
  if (create && create_size > (uint64_t) INT64_MAX)
    return cairn_fail (-EFBIG, "%s: size %" PRIu64 " is too large",
                       path, create_size);

  if (create)
    fd = open (path, O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
  else
    fd = open (path, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd == -1) {
    if (errno == EEXIST)
      r = cairn_fail (-EEXIST, "%s already exists: refusing to overwrite it "
                      "(remove it first to make a new pool)", path);
    else
      r = cairn_fail (-errno, "%s: open: %m", path);
    goto out;
  }
  created = create;

  r = file_lock (fd, path, rdonly);
  if (r < 0)
    goto out;

  if (create && ftruncate (fd, (off_t) create_size) == -1) {
    r = cairn_fail (-errno, "%s: setting the size to %" PRIu64 " bytes: %m",
                    path, create_size);
    goto out;
  }

  if (fstat (fd, &st) == -1) {
    r = cairn_fail (-errno, "%s: fstat: %m", path);
    goto out;
  }

  f = calloc (1, sizeof *f);
  if (f == NULL) {
    r = cairn_fail (-errno, "%s: calloc: %m", path);
    goto out;
  }
  f->fd = fd;
  f->view = MAP_FAILED;
  f->rdonly = rdonly;
  f->watch_perf = !(flags & DEV_WATCH_RUSAGE);
  pthread_mutex_init (&f->write_lock, NULL);
  f->dev.ops = &file_ops;
  snprintf (f->dev.name, sizeof f->dev.name, "%s", path);

  if (S_ISBLK (st.st_mode)) {
    f->is_block = true;
    if (ioctl (fd, BLKGETSIZE64, &f->dev.size) == -1) {
      r = cairn_fail (-errno, "%s: ioctl BLKGETSIZE64: %m", path);
      goto out;
    }
  }
  else if (S_ISREG (st.st_mode))
    f->dev.size = (uint64_t) st.st_size;
  else {
    r = cairn_fail (-EINVAL, "%s: not a regular file or a block device", path);
    goto out;
  }

  *devp = &f->dev;
  f = NULL;
  fd = -1;
  r = 0;

 out:
  if (r < 0 && created)
    unlink (path);
  if (fd >= 0)
    close (fd);
  if (f != NULL)
    pthread_mutex_destroy (&f->write_lock);
  free (f);
  return r;
}

/* Zeros are written in chunks of this size; writeback of each window of
 * PREALLOC_WINDOW bytes is started as soon as it is written and waited for
 * (and its pages dropped) one window later, so that writing a large pool
 * neither fills the page cache nor leaves all the writeback to the end.
 */
#define PREALLOC_CHUNK  (8u << 20)
#define PREALLOC_WINDOW (256u << 20)

/* Write zeros over the whole file, calling progress as it goes. */
static int
prealloc_zeros (struct file_dev *f, dev_progress_fn progress, void *opaque)
{
  uint64_t size = f->dev.size, off = 0, synced = 0;
  uint8_t *zero = calloc (1, PREALLOC_CHUNK);
  int r = 0;

  if (zero == NULL)
    return cairn_fail (-ENOMEM, "%s: out of memory", f->dev.name);
  while (off < size && r == 0) {
    size_t len = size - off < PREALLOC_CHUNK ? (size_t) (size - off)
                                             : PREALLOC_CHUNK;

    r = file_pwrite (&f->dev, zero, len, off);
    off += len;
    if (r == 0 && (off % PREALLOC_WINDOW == 0 || off == size)) {
      uint64_t from = off - (off - 1) % PREALLOC_WINDOW - 1;

      /* Start this window's writeback; finish the one before. */
      sync_file_range (f->fd, (off_t) from, (off_t) (off - from),
                       SYNC_FILE_RANGE_WRITE);
      if (from > synced) {
        sync_file_range (f->fd, (off_t) synced, (off_t) (from - synced),
                         SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                         SYNC_FILE_RANGE_WAIT_AFTER);
        posix_fadvise (f->fd, (off_t) synced, (off_t) (from - synced),
                       POSIX_FADV_DONTNEED);
        synced = from;
      }
    }
    if (r == 0 && progress)
      progress (opaque, off, size);
  }
  free (zero);
  if (r == 0 && fdatasync (f->fd) == -1)
    r = cairn_fail (-errno, "%s: fdatasync: %m", f->dev.name);
  if (r == 0)
    posix_fadvise (f->fd, (off_t) synced, 0, POSIX_FADV_DONTNEED);
  return r;
}

int
dev_prealloc_parse (const char *word, enum dev_prealloc *mode)
{
  static const char *const words[] = {
    [DEV_PREALLOC_OFF] = "off", [DEV_PREALLOC_SPACE] = "space",
    [DEV_PREALLOC_FULL] = "full",
  };

  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strcmp (word, words[i]) == 0) {
      *mode = (enum dev_prealloc) i;
      return 0;
    }
  return -EINVAL;
}

const char *
dev_prealloc_done (enum dev_prealloc mode)
{
  switch (mode) {
  case DEV_PREALLOC_SPACE: return "space reserved";
  case DEV_PREALLOC_FULL: return "space written";
  default: return NULL;
  }
}

int
dev_file_preallocate (struct cairn_dev *dev, enum dev_prealloc mode,
                      dev_progress_fn progress, void *opaque)
{
  struct file_dev *f = to_file_dev (dev);

  if (dev->ops != &file_ops)
    return cairn_fail (-EINVAL, "%s: only a file can be preallocated",
                       dev->name);
  if (mode == DEV_PREALLOC_OFF || f->is_block || dev->size == 0)
    return 0;
  if (f->rdonly)
    return cairn_fail (-EROFS, "%s: preallocate: the device was opened "
                       "read-only", dev->name);

  /* Reserve first: a host filesystem without the room fails here, at
   * once, before anything is written.  One that cannot reserve (EOPNOTSUPP)
   * can still be written full of zeros.
   */
  if (fallocate (f->fd, 0, 0, (off_t) dev->size) == -1) {
    bool unsupported = errno == EOPNOTSUPP || errno == ENOSYS;

    if (errno == ENOSPC)
      return cairn_fail (-ENOSPC, "%s: the filesystem holding it has no room "
                         "for %" PRIu64 " bytes: make the pool smaller or "
                         "free space there", dev->name, dev->size);
    if (!unsupported)
      return cairn_fail (-errno, "%s: reserving %" PRIu64 " bytes: %m",
                         dev->name, dev->size);
    if (mode == DEV_PREALLOC_SPACE)
      return cairn_fail (-EOPNOTSUPP, "%s: the filesystem holding it cannot "
                         "reserve space: preallocate fully (which writes "
                         "zeros) or not at all", dev->name);
  }
  if (mode == DEV_PREALLOC_FULL)
    return prealloc_zeros (f, progress, opaque);
  return 0;
}
