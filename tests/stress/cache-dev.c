/* Cairn stress tool: a disk with a volatile write cache that a SIGKILL
 * empties (tests/stress/README.md, "What a kill loses").
 *
 * A SIGKILL alone loses nothing that reached the kernel: a pool file's
 * unflushed writes sit in the page cache and survive the process.  To make
 * a missing flush visible, the stress child writes through this device:
 *
 *  C1. A write is kept in memory, in 4 KiB pages (a partial page is read
 *      from lower first), and acknowledged; a read sees the cached pages
 *      over lower, so the device reads back what was written.
 *  C2. Now and then a write also writes back one dirty page chosen at
 *      random (a disk's cache draining out of order): at a kill, lower
 *      holds an arbitrary subset of the pages written since the last
 *      flush, a multi-page write possibly torn.
 *  C3. A flush writes every dirty page back in a random order, then
 *      forgets the cache.  With `kill_odds` n > 0, one flush in n kills the
 *      process with SIGKILL part-way (after a random number of pages):
 *      the cut lands inside the barrier, where a missing barrier before it
 *      shows.  Lower is not fsync'd: only the process dies, never the host.
 *  C4. A kill loses every page still dirty; nothing else.
 *  C5. An overlay (cache_dev_overlay) never writes back, not even at a
 *      flush: its writes live in memory until it is closed, and lower
 *      (opened read-only) stays as it was.  The check after a kill opens
 *      the pool read-write on overlays, so that the pool replays its
 *      intent log without changing the files a failure keeps.
 *
 * Pages written back keep their order with respect to a page's own later
 * writes (a page holds its newest data), so a flush that completes leaves
 * lower exactly as written.  One mutex guards the device: this is a test
 * device, and simplicity beats concurrency.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"
#include "../unit/test-util.h"

#define PAGE 4096u

struct page {
  uint64_t no;                /* page number; UINT64_MAX: slot unused */
  bool dirty;
  uint8_t *data;
};

struct cache_dev {
  struct cairn_dev dev;       /* must be first */
  struct cairn_dev *lower;
  pthread_mutex_t lock;
  struct page *tab;           /* open addressing on no */
  size_t cap, used;
  size_t *dirty;              /* slots of dirty pages */
  size_t ndirty;
  struct rng rng;
  unsigned kill_odds;
  unsigned writeback_odds;
  bool overlay;               /* C5: never write back */
  struct { uint64_t off, len; } recent[64];   /* the last writes */
  unsigned nrecent;
};

/* The cache device of a device. */
static inline struct cache_dev *
to_cache (struct cairn_dev *dev)
{
  return (struct cache_dev *) dev;
}

/* The device's next random number. */
static uint64_t
cache_rand (struct cache_dev *c)
{
  return rng_next (&c->rng);
}

/* The slot of page no, or the empty slot where it would go. */
static size_t
cache_slot (struct cache_dev *c, uint64_t no)
{
  size_t i = (size_t) (no * 0x9e3779b97f4a7c15ull) & (c->cap - 1);

  while (c->tab[i].no != UINT64_MAX && c->tab[i].no != no)
    i = (i + 1) & (c->cap - 1);
  return i;
}

/* Forget every page (all clean). */
static void
cache_forget (struct cache_dev *c)
{
  for (size_t i = 0; i < c->cap; i++) {
    free (c->tab[i].data);
    c->tab[i].data = NULL;
    c->tab[i].no = UINT64_MAX;
    c->tab[i].dirty = false;
  }
  c->used = 0;
  c->ndirty = 0;
}

/* Double the page table (or make its first). */
static int
cache_grow (struct cache_dev *c)
{
  size_t ncap = c->cap ? c->cap * 2 : 1024;
  struct page *old = c->tab;
  size_t ocap = c->cap;
  size_t *nd;

  c->tab = malloc (ncap * sizeof *c->tab);
  nd = realloc (c->dirty, ncap * sizeof *nd);
  if (c->tab == NULL || nd == NULL) {
    free (c->tab);
    c->tab = old;
    if (nd != NULL)
      c->dirty = nd;
    return cairn_fail (-ENOMEM, "cache device: out of memory");
  }
  c->dirty = nd;
  c->cap = ncap;
  for (size_t i = 0; i < ncap; i++)
    c->tab[i] = (struct page) { .no = UINT64_MAX };
  c->ndirty = 0;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].no != UINT64_MAX) {
      size_t s = cache_slot (c, old[i].no);

      c->tab[s] = old[i];
      if (old[i].dirty)
        c->dirty[c->ndirty++] = s;
    }
  free (old);
  return 0;
}

/* Write back the dirty page at position k of the dirty list. */
static int
cache_writeback (struct cache_dev *c, size_t k)
{
  struct page *p = &c->tab[c->dirty[k]];
  uint64_t off = p->no * PAGE;
  size_t len = MIN ((uint64_t) PAGE, c->dev.size - off);
  int r = dev_pwrite (c->lower, p->data, len, off);

  if (r < 0)
    return r;
  p->dirty = false;
  c->dirty[k] = c->dirty[--c->ndirty];
  return 0;
}

/* The cached page no, read in from lower when missing (lock held). */
static int
cache_page (struct cache_dev *c, uint64_t no, struct page **pp)
{
  size_t s;
  int r;

  if ((c->used + 1) * 2 > c->cap && (r = cache_grow (c)) < 0)
    return r;
  s = cache_slot (c, no);
  if (c->tab[s].no == UINT64_MAX) {
    uint64_t off = no * PAGE;
    uint8_t *d = calloc (1, PAGE);

    if (d == NULL)
      return cairn_fail (-ENOMEM, "cache device: out of memory");
    r = dev_pread (c->lower, d, MIN ((uint64_t) PAGE, c->dev.size - off),
                   off);
    if (r < 0) {
      free (d);
      return r;
    }
    c->tab[s] = (struct page) { .no = no, .data = d };
    c->used++;
  }
  *pp = &c->tab[s];
  return 0;
}

/* Read: cached pages over lower (C1). */
static int
cache_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct cache_dev *c = to_cache (dev);
  uint8_t *b = buf;
  int r = 0;

  pthread_mutex_lock (&c->lock);
  while (len > 0 && r == 0) {
    uint64_t no = off / PAGE, in = off % PAGE;
    size_t n = MIN (len, PAGE - in);
    size_t s = c->cap ? cache_slot (c, no) : 0;

    if (c->cap && c->tab[s].no == no)
      memcpy (b, c->tab[s].data + in, n);
    else
      r = dev_pread (c->lower, b, n, off);
    b += n;
    off += n;
    len -= n;
  }
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* Lay data (NULL: zeros) over the cached pages, dirtying them (C1, C2). */
static int
cache_put (struct cache_dev *c, const void *buf, size_t len, uint64_t off)
{
  const uint8_t *b = buf;
  int r = 0;

  if (b != NULL) {
    c->recent[c->nrecent % 64].off = off;
    c->recent[c->nrecent % 64].len = len;
    c->nrecent++;
  }
  while (len > 0 && r == 0) {
    uint64_t no = off / PAGE, in = off % PAGE;
    size_t n = MIN (len, PAGE - in);
    struct page *p = NULL;

    r = cache_page (c, no, &p);
    if (r < 0)
      break;
    if (b != NULL)
      memcpy (p->data + in, b, n);
    else
      memset (p->data + in, 0, n);
    if (!p->dirty) {
      p->dirty = true;
      c->dirty[c->ndirty++] = (size_t) (p - c->tab);
    }
    if (b != NULL)
      b += n;
    off += n;
    len -= n;
  }
  /* C2: the cache drains a page of its own accord now and then. */
  if (r == 0 && c->ndirty > 0 && c->writeback_odds > 0 &&
      cache_rand (c) % c->writeback_odds == 0)
    r = cache_writeback (c, cache_rand (c) % c->ndirty);
  return r;
}

/* Write into the cache (C1). */
static int
cache_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
              uint64_t off)
{
  struct cache_dev *c = to_cache (dev);
  int r;

  pthread_mutex_lock (&c->lock);
  r = cache_put (c, buf, len, off);
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* A discard reads back as zeros, like the memory device's. */
static int
cache_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct cache_dev *c = to_cache (dev);
  int r;

  pthread_mutex_lock (&c->lock);
  r = cache_put (c, NULL, len, off);
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* Write every dirty page back in a random order, perhaps dying part-way
 * (C3).
 */
static int
cache_flush (struct cairn_dev *dev)
{
  struct cache_dev *c = to_cache (dev);
  size_t kill_after = SIZE_MAX;
  int r = 0;

  if (c->overlay)
    return 0;                 /* C5 */
  pthread_mutex_lock (&c->lock);
  if (c->kill_odds > 0 && cache_rand (c) % c->kill_odds == 0)
    kill_after = c->ndirty ? cache_rand (c) % c->ndirty : 0;
  /* C3: back in a random order, each page its newest data. */
  for (size_t done = 0; c->ndirty > 0 && r == 0; done++) {
    if (done == kill_after)
      kill (getpid (), SIGKILL);
    r = cache_writeback (c, cache_rand (c) % c->ndirty);
  }
  if (kill_after != SIZE_MAX)
    kill (getpid (), SIGKILL);
  if (r == 0)
    cache_forget (c);
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* Free the cache; what is dirty is lost, as at a kill (C4). */
static void
cache_close (struct cairn_dev *dev)
{
  struct cache_dev *c = to_cache (dev);

  cache_forget (c);
  free (c->tab);
  free (c->dirty);
  pthread_mutex_destroy (&c->lock);
  free (c);
}

/* Bit flips land below the cache, on what lower holds (the page cached, if
 * any, gets the same flip).
 */
int
cache_dev_flip (struct cairn_dev *dev, uint64_t off, unsigned bit)
{
  struct cache_dev *c = to_cache (dev);
  uint8_t b;
  int r;

  pthread_mutex_lock (&c->lock);
  r = dev_pread (c->lower, &b, 1, off);
  if (r == 0) {
    b ^= (uint8_t) (1u << (bit & 7));
    r = dev_pwrite (c->lower, &b, 1, off);
  }
  if (r == 0 && c->cap) {
    size_t s = cache_slot (c, off / PAGE);

    if (c->tab[s].no == off / PAGE)
      c->tab[s].data[off % PAGE] ^= (uint8_t) (1u << (bit & 7));
  }
  pthread_mutex_unlock (&c->lock);
  return r;
}

/* A byte that one of the last 64 writes wrote (where faults hurt):
 * false when nothing was written yet.
 */
bool
cache_dev_recent (struct cairn_dev *dev, uint64_t r, uint64_t *offp)
{
  struct cache_dev *c = to_cache (dev);
  bool any;

  pthread_mutex_lock (&c->lock);
  any = c->nrecent > 0;
  if (any) {
    unsigned i = (unsigned) (r % MIN (c->nrecent, 64u));

    *offp = c->recent[i].off + (r >> 8) % c->recent[i].len;
  }
  pthread_mutex_unlock (&c->lock);
  return any;
}

static const struct cairn_dev_ops cache_ops = {
  .kind = "stress-cache",
  .pread = cache_pread,
  .pwrite = cache_pwrite,
  .flush = cache_flush,
  .discard = cache_discard,
  .close = cache_close,
};

/* Stack a volatile cache on lower (which the caller keeps and closes). */
int
cache_dev_create (struct cairn_dev *lower, uint64_t seed, unsigned kill_odds,
                  unsigned writeback_odds, struct cairn_dev **devp)
{
  struct cache_dev *c = calloc (1, sizeof *c);

  *devp = NULL;
  if (c == NULL)
    return cairn_fail (-ENOMEM, "cache device: out of memory");
  pthread_mutex_init (&c->lock, NULL);
  c->lower = lower;
  c->rng.s = seed;
  c->kill_odds = kill_odds;
  c->writeback_odds = writeback_odds;
  c->dev.ops = &cache_ops;
  c->dev.size = lower->size;
  snprintf (c->dev.name, sizeof c->dev.name, "cache(%.240s)", lower->name);
  *devp = &c->dev;
  return 0;
}

/* Stack an overlay on lower (C5). */
int
cache_dev_overlay (struct cairn_dev *lower, struct cairn_dev **devp)
{
  int r = cache_dev_create (lower, 0, 0, 0, devp);

  if (r == 0)
    to_cache (*devp)->overlay = true;
  return r;
}
