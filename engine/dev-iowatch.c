/* Cairn engine, layer "dev": whether a thread read from storage during a
 * call (dev-iowatch.h).
 *
 * A cached read (dev-file.c) is preadv2 with RWF_NOWAIT, which returns what
 * the page cache holds; but where a page is missing it first asks the
 * kernel to read it, and when that read ends before the call looks again
 * (a fast disk, a thread descheduled in between: on this project's test
 * machine, one cold read in a few dozen), the call returns data that has
 * just come from the disk.  T1 (dev.h) must not trust that data, so the
 * caller asks whether the thread brought anything in from storage during
 * the call.  Two watches answer:
 *
 *  - perf: a perf event on the tracepoint filemap:mm_filemap_add_to_page_cache
 *    for the calling thread alone, sampling every hit into a ring that the
 *    thread maps read-only.  Every page the kernel reads for a buffered
 *    read enters the cache through that tracepoint, in the thread whose
 *    call asked for it and before the call returns, and every hit writes a
 *    record and moves the ring's head; so a head that did not move across
 *    the call means the call brought nothing in.  Reading the head is a
 *    load, not a system call: that is the point (one system call is about
 *    a microsecond on a virtual machine, a sixth of a cached read).  The
 *    ring is mapped read-only, so the kernel overwrites it and its head
 *    moves whether or not anyone reads the records; a software event with
 *    a period of 1 is not throttled (perf_swevent_overflow throttles only
 *    the second and later overflows of one hit; 65,536 pages written in a
 *    tight loop here gave 65,536 records).  A page added for another file,
 *    or a page of a hole that no read filled, also moves the head: the
 *    watch can only err towards checking.  The price is paid where pages
 *    enter the cache: each one a thread with a ring adds (a read from the
 *    disk, a write to a new place) writes a record, about 0.6 us here.
 *  - getrusage: the thread's count of blocks read from storage (ru_inblock,
 *    counted as each read is issued), taken once after each call and
 *    compared with what the thread's previous call saw; so when the thread
 *    read anything from storage since then, this call's read included, the
 *    call is not quiet.  (One getrusage per call, not one before and one
 *    after, but for a thread's first call: the price is that after a read
 *    of its own from the disk, a thread's next cached read is checked when
 *    it need not be.)
 *
 * The perf watch needs the tracepoint's id from tracefs (mounted at
 * /sys/kernel/tracing by systemd; the project's scripts mount it where
 * nothing did), perf_event_open allowed to the process (root, CAP_PERFMON,
 * or perf_event_paranoid at most 1), and two pages of locked memory per
 * thread (no descriptor: the mapping keeps the event, so the descriptor is
 * closed as soon as the ring is mapped).  A thread that cannot have one
 * uses getrusage.  A thread's ring is unmapped when the thread exits, which
 * ends its event; after a fork the child's threads make their own (the
 * inherited ring watches the parent's thread).
 *
 * A build with ThreadSanitizer watches with getrusage alone.  The sanitizer
 * cannot see a descriptor made by a raw system call (perf_event_open has
 * no libc wrapper), and its record of the number is then that of whatever
 * it last saw there: often a libuv socket, which libuv closes with a raw
 * call too, so the mmap and close of the ring's descriptor were reported
 * as races with that socket's last use.
 */
#include <config.h>

#include <linux/perf_event.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dev-iowatch.h"
#include "util.h"

/* The calling thread's watches. */
struct watcher {
  unsigned forks;             /* `forks` when these watches began */
  bool tried;                 /* a ring was asked for since then */
  struct perf_event_mmap_page *ring;  /* the event's ring, or NULL */
  size_t ring_len;
  long inblock;               /* ru_inblock after the last call; -1 unknown */
};

static __thread struct watcher me = { .inblock = -1 };

/* Set up once per process: the tracepoint's id (-1: none), the key whose
 * destructor closes a thread's ring, and the fork handler.
 */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static long tracepoint = -1;
static pthread_key_t ring_key;
static bool have_key;
/* Forks this process's child has been through (written in the child by
 * the fork handler, before it has other threads).
 */
static unsigned forks;

/* The fork handler, in the child. */
static void
count_fork (void)
{
  forks++;
}

/* Unmap a thread's ring, which ends its event. */
static void
ring_close (struct watcher *w)
{
  if (w->ring)
    munmap (w->ring, w->ring_len);
  w->ring = NULL;
}

/* The key's destructor, as a thread with a ring ends. */
static void
ring_destroy (void *arg)
{
  ring_close (arg);
}

/* Find the tracepoint, make the key, install the fork handler. */
static void
setup_once (void)
{
  static const char *const paths[] = {
    "/sys/kernel/tracing/events/filemap/mm_filemap_add_to_page_cache/id",
    "/sys/kernel/debug/tracing/events/filemap/mm_filemap_add_to_page_cache/id",
  };

  for (size_t i = 0; i < ARRAY_SIZE (paths) && tracepoint < 0; i++) {
    FILE *fp = fopen (paths[i], "re");
    long id;

    if (fp == NULL)
      continue;
    if (fscanf (fp, "%ld", &id) == 1 && id >= 0)
      tracepoint = id;
    fclose (fp);
  }
  have_key = pthread_key_create (&ring_key, ring_destroy) == 0;
  pthread_atfork (NULL, NULL, count_fork);
}

/* A library unloaded while threads live must not leave them a destructor
 * in code that is gone.
 */
__attribute__ ((destructor)) static void
unload (void)
{
  if (have_key)
    pthread_key_delete (ring_key);
}

/* Start the calling thread's watches again if they came through a fork:
 * its ring watches the parent's thread, and its count is the parent's.
 */
static void
after_fork (struct watcher *w)
{
  if (w->forks != forks) {
    ring_close (w);
    w->forks = forks;
    w->tried = false;
    w->inblock = -1;
  }
}

/* Make the calling thread's ring, once per thread and fork; false if the
 * host will not have one.
 */
static bool
ring_open (struct watcher *w)
{
  struct perf_event_attr attr;
  size_t page = (size_t) sysconf (_SC_PAGESIZE);
  void *ring;
  int fd;

  after_fork (w);
  if (w->ring)
    return true;
  if (w->tried)
    return false;
  w->tried = true;
#ifdef __SANITIZE_THREAD__
  return false;
#endif
  pthread_once (&once, setup_once);
  if (tracepoint < 0 || !have_key)
    return false;

  memset (&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = (uint64_t) tracepoint;
  attr.sample_period = 1;     /* a record every hit, never throttled */
  attr.sample_type = 0;       /* the header alone: 8 bytes a hit */
  fd = (int) syscall (SYS_perf_event_open, &attr, 0, -1, -1,
                      PERF_FLAG_FD_CLOEXEC);
  if (fd < 0)
    return false;
  /* The header page and one page of records, read-only: overwritten. */
  ring = mmap (NULL, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
  close (fd);
  if (ring == MAP_FAILED)
    return false;
  w->ring = ring;
  w->ring_len = 2 * page;
  if (pthread_setspecific (ring_key, w) != 0) {
    ring_close (w);
    return false;
  }
  return true;
}

/* The ring's head: where the kernel will write the next record. */
static uint64_t
ring_head (const struct watcher *w)
{
  return __atomic_load_n (&w->ring->data_head, __ATOMIC_ACQUIRE);
}

/* The thread's ru_inblock, or -1. */
static long
inblock_now (void)
{
  struct rusage ru;

  return getrusage (RUSAGE_THREAD, &ru) == 0 ? ru.ru_inblock : -1;
}

/* Take the count a call starts from. */
void
iowatch_start (struct iowatch *w, bool use_perf)
{
  if (use_perf && ring_open (&me)) {
    w->how = IOWATCH_PERF;
    w->at = ring_head (&me);
    return;
  }
  after_fork (&me);
  if (me.inblock == -1)
    me.inblock = inblock_now ();      /* the thread's first call */
  w->how = me.inblock == -1 ? IOWATCH_BLIND : IOWATCH_RUSAGE;
  w->at = (uint64_t) me.inblock;
}

/* Compare the count with where the call started. */
bool
iowatch_quiet (const struct iowatch *w)
{
  switch (w->how) {
  case IOWATCH_PERF:
    return ring_head (&me) == w->at;
  case IOWATCH_RUSAGE:
    me.inblock = inblock_now ();
    return me.inblock != -1 && (uint64_t) me.inblock == w->at;
  default:
    me.inblock = inblock_now ();
    return false;
  }
}

/* Take the getrusage watch's count again. */
void
iowatch_rebase (void)
{
  if (me.inblock != -1)
    me.inblock = inblock_now ();
}

/* Which watch the calling thread has. */
const char *
iowatch_method (bool use_perf)
{
  return use_perf && ring_open (&me) ? "perf" : "getrusage";
}
