/* Cairn engine, layer "volume": the read path (see volume.c's notes).
 *
 * A read copies the mapping of its blocks under the tree's read lock, then
 * reads and checks the data outside it: one device read per run of
 * mappings contiguous on the device, and every block checked against its
 * SHA-256, runs contiguous in the volume at a time.  A block can be freed
 * and reused between the mapping and the read, so a mismatch is retried
 * with a fresh mapping; only a block that fails twice at the same place,
 * expected to hold the same data, counts as damage.  A block that the
 * device trusts (dev.h: a checked copy the host's page cache still holds)
 * is not checked again.
 *
 * On a device that keeps several copies (a pool of several devices), a
 * block that fails its check or whose run the device could not read is
 * healed before it counts as damage: under the tree's read lock its
 * mapping is looked up again, and if it still maps there with the same
 * digest (so nothing can free and reuse the block meanwhile: dev.h, H2),
 * the other copies are read until one matches, and the bad ones are
 * rewritten with it.  A pool opened read-only repairs too, when its device
 * is writable (fsck --scrub): the copies below the pool change, not the
 * pool.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "volume-int.h"

/* ---------------------------------------------------------------- mapping */

/* Copy the mapping of blocks [lbn, lbn + n) (tree locked by the caller).
 * The digests of each mapping go to a new m->sha, or, when shas is not
 * NULL, to shas + (block - lbn) * SHA256_LEN (the read path: one array for
 * the request, no allocation per mapping).
 */
static int
map_range_into (struct catalog *cat, struct btree *tree, uint64_t lbn,
                uint64_t n, struct map_vec *mv, uint8_t *shas)
{
  uint64_t maxe = max_ext_blocks (cat), end = lbn + n;
  struct btree_cursor *cur;
  uint8_t key[8];
  int r;

  r = btree_cursor_new (tree, &cur);
  if (r < 0)
    return r;
  /* The item that may cover lbn starts at or before it. */
  put_be64 (key, lbn);
  for (r = btree_cursor_seek_le (cur, key, 8); r == 0; r = btree_cursor_next (cur)) {
    const uint8_t *k, *v;
    size_t kl, vl;
    uint64_t s, len, from, to;
    struct mapping *m;

    btree_cursor_item (cur, &k, &kl, &v, &vl);
    if (kl != 8 || vl < EXT_HDR)
      goto corrupt;
    s = get_be64 (k);
    len = ext_len (v);
    if (len == 0 || len > maxe || vl != EXT_HDR + len * SHA256_LEN)
      goto corrupt;
    if (s >= end)
      break;
    if (s + len <= lbn)
      continue;
    from = MAX (s, lbn);
    to = MIN (s + len, end);
    if (mv->n == mv->cap) {
      size_t cap = mv->cap ? mv->cap * 2 : 16;
      struct mapping *nm = realloc (mv->m, cap * sizeof *nm);
      if (nm == NULL) {
        r = cairn_fail (-ENOMEM, "out of memory reading a volume");
        break;
      }
      mv->m = nm;
      mv->cap = cap;
    }
    m = &mv->m[mv->n];
    m->lbn = from;
    m->n = to - from;
    m->addr = ext_addr (v) + (from - s);
    m->birth = ext_birth (v);
    m->sha = shas ? NULL : malloc (m->n * SHA256_LEN);
    if (shas == NULL && m->sha == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory reading a volume");
      break;
    }
    memcpy (shas ? shas + (from - lbn) * SHA256_LEN : m->sha,
            v + EXT_HDR + (from - s) * SHA256_LEN, m->n * SHA256_LEN);
    mv->n++;
    /* Items do not overlap: none after this one starts before end.  Not
     * stepping to the next item saves a leaf visit when this is a leaf's
     * last item (a small read's usual case, with a few extents a leaf).
     */
    if (to == end)
      break;
  }
  btree_cursor_free (cur);
  return r == -ENOENT ? 0 : r;

 corrupt:
  btree_cursor_free (cur);
  return cairn_fail (-EIO, "corrupt extent item in volume tree %" PRIu64,
                     btree_id (tree));
}

int
map_range_locked (struct catalog *cat, struct btree *tree, uint64_t lbn,
                  uint64_t n, struct map_vec *mv)
{
  return map_range_into (cat, tree, lbn, n, mv, NULL);
}

/* Copy the mapping of blocks [lbn, lbn + n) under the read lock. */
int
map_range (struct cairn_volume *v, uint64_t lbn, uint64_t n, struct map_vec *mv,
           uint8_t *shas)
{
  int r;

  btree_rdlock (v->tree);
  r = map_range_into (v->cat, v->tree, lbn, n, mv, shas);
  btree_unlock (v->tree);
  return r;
}

/* ---------------------------------------------------------------- reading */

_Static_assert (BLOCK_SIZE == DEV_TRUST_BLOCK,
                "the device trusts whole blocks of the volume");

/* What a read keeps per block of the request (the stack holds a small
 * request's; a large one's are allocated).
 */
struct read_scratch {
  uint8_t *shas;              /* the digest each block must have */
  uint64_t *seen;             /* its trust entry before the read (dev.h, T3) */
  bool *trusted;              /* read from the cache and trusted (T1) */
};

/* Read blocks [addr, addr + len) of the device into buf: first what the
 * host's cache holds of them, marking those the device trusts, then the
 * rest from the disk.
 */
static int
read_run (struct cairn_dev *dev, uint8_t *buf, uint64_t addr, uint64_t len,
          const uint8_t *shas, uint64_t *seen, bool *trusted, bool *missed)
{
  size_t got = 0;
  uint64_t k = 0, ntrusted = 0;
  int r;

  if (dev_trusting (dev)) {
    for (uint64_t i = 0; i < len; i++)
      seen[i] = dev_trust_peek (dev, addr + i);
    r = dev_pread_cached (dev, buf, len * BLOCK_SIZE, addr * BLOCK_SIZE, &got);
    if (r < 0)
      return r;
    k = got / BLOCK_SIZE;
    for (uint64_t i = 0; i < k; i++) {
      trusted[i] = dev_trust_holds (dev, addr + i, shas + i * SHA256_LEN);
      ntrusted += trusted[i];
    }
    if (ntrusted)
      DEV_COUNT (dev, blocks_trusted, ntrusted);
    /* The rest comes from the disk: claim it first (T5). */
    for (uint64_t i = k; i < len; i++)
      seen[i] = dev_trust_claim (dev, addr + i);
  }
  memset (trusted + k, 0, (len - k) * sizeof *trusted);
  if (k == len)
    return 0;
  *missed = true;
  return dev_pread (dev, buf + k * BLOCK_SIZE, (len - k) * BLOCK_SIZE,
                    (addr + k) * BLOCK_SIZE);
}

/* Check blocks [first, first + len) of the request that are not trusted;
 * the first that does not match its digest, or UINT64_MAX.
 */
static uint64_t
check_blocks (const uint8_t *buf, const struct read_scratch *rs, uint64_t first,
              uint64_t len)
{
  uint64_t a = first, end = first + len;

  while (a < end) {
    uint64_t b;
    size_t k;

    if (rs->trusted[a]) {
      a++;
      continue;
    }
    for (b = a + 1; b < end && !rs->trusted[b]; b++)
      ;
    k = sha256_blocks_check (buf + a * BLOCK_SIZE, b - a,
                             rs->shas + a * SHA256_LEN);
    if (k < b - a)
      return a + k;
    a = b;
  }
  return UINT64_MAX;
}

/* The device block that maps volume block lbn in mv (lbn mapped). */
static uint64_t
mapped_addr (const struct map_vec *mv, uint64_t lbn)
{
  for (size_t i = 0; i < mv->n; i++)
    if (lbn >= mv->m[i].lbn && lbn < mv->m[i].lbn + mv->m[i].n)
      return mv->m[i].addr + (lbn - mv->m[i].lbn);
  return 0;
}

/* Heal block lbn, read from device block addr and expected to hash to sha,
 * from another copy into out (see the note at the top): 0 when a good copy
 * was found, -EAGAIN when the block no longer maps there with that digest
 * (the caller maps again), -EBADMSG when no copy matches, or the read's
 * error.
 */
static int
heal_block (struct cairn_volume *v, uint64_t lbn, uint64_t addr,
            const uint8_t *sha, uint8_t *out)
{
  struct cairn_dev *dev = pool_dev (v->cat->pool);
  struct map_vec mv = { NULL, 0, 0 };
  uint8_t now[SHA256_LEN];
  int r;

  btree_rdlock (v->tree);
  r = map_range_into (v->cat, v->tree, lbn, 1, &mv, now);
  if (r == 0 && (mv.n != 1 || mv.m[0].addr != addr ||
                 memcmp (now, sha, SHA256_LEN) != 0))
    r = -EAGAIN;
  if (r == 0)
    r = dev_pread_checked (dev, out, BLOCK_SIZE, addr * BLOCK_SIZE, true,
                           dev_check_sha256, now);
  btree_unlock (v->tree);
  map_vec_free (&mv);
  return r;
}

/* Heal every block of a run that the device could not read (see the note
 * at the top); a block that cannot be healed is left zero, so that the
 * check finds it bad and the read maps it again.
 */
static int
heal_run (struct cairn_volume *v, uint64_t lbn, uint64_t addr, uint64_t len,
          uint8_t *buf, const uint8_t *shas, bool *trusted)
{
  for (uint64_t i = 0; i < len; i++) {
    int r = heal_block (v, lbn + i, addr + i, shas + i * SHA256_LEN,
                        buf + i * BLOCK_SIZE);

    trusted[i] = false;
    if (r < 0 && r != -EAGAIN && r != -EBADMSG)
      return r;
    if (r < 0)
      memset (buf + i * BLOCK_SIZE, 0, BLOCK_SIZE);
  }
  return 0;
}

/* Read whole blocks [lbn, lbn + n) into buf under one mapping, with their
 * digests into rs->shas; return the first block (from lbn) whose data does
 * not match its digest, or UINT64_MAX, and where it was read on the device.
 *
 * One device read per run of mappings that follow each other both in the
 * volume and on the device (a sequential write's extents, split only by
 * the extent item's size, usually are), and the checks over runs
 * contiguous in the volume: sha256_blocks hashes two blocks at a time, so
 * a run should be as long as it can.  A block the device trusts (dev.h) is
 * not checked; one that was checked is noted as trusted once all passed.
 */
static int
read_mapped (struct cairn_volume *v, uint64_t lbn, uint64_t n, uint8_t *buf,
             const struct read_scratch *rs, uint64_t *badp, uint64_t *bad_addrp,
             bool *missed)
{
  struct cairn_dev *dev = pool_dev (v->cat->pool);
  struct map_vec mv = { NULL, 0, 0 };
  uint64_t next = lbn;
  size_t i, j;
  int r;

  *badp = UINT64_MAX;
  r = map_range (v, lbn, n, &mv, rs->shas);
  for (i = 0; r == 0 && i < mv.n; i = j) {
    const struct mapping *m = &mv.m[i];
    uint64_t len = m->n, at = m->lbn - lbn;

    for (j = i + 1; j < mv.n && mv.m[j].lbn == m->lbn + len &&
         mv.m[j].addr == m->addr + len; j++)
      len += mv.m[j].n;
    memset (buf + (next - lbn) * BLOCK_SIZE, 0, (m->lbn - next) * BLOCK_SIZE);
    r = read_run (dev, buf + at * BLOCK_SIZE, m->addr, len,
                  rs->shas + at * SHA256_LEN, rs->seen + at, rs->trusted + at,
                  missed);
    if (r == -EIO && dev_copies (dev) > 1)
      r = heal_run (v, m->lbn, m->addr, len, buf + at * BLOCK_SIZE,
                    rs->shas + at * SHA256_LEN, rs->trusted + at);
    next = m->lbn + len;
  }
  if (r == 0)
    memset (buf + (next - lbn) * BLOCK_SIZE, 0, (lbn + n - next) * BLOCK_SIZE);
  for (i = 0; r == 0 && i < mv.n && *badp == UINT64_MAX; i = j) {
    uint64_t first = mv.m[i].lbn - lbn, len = mv.m[i].n, from = first;

    for (j = i + 1; j < mv.n && mv.m[j].lbn == lbn + first + len; j++)
      len += mv.m[j].n;
    /* A bad block that another copy heals is good now: check on after it. */
    while ((*badp = check_blocks (buf, rs, from, first + len - from))
           != UINT64_MAX) {
      *bad_addrp = mapped_addr (&mv, lbn + *badp);
      if (dev_copies (dev) == 1 ||
          heal_block (v, lbn + *badp, *bad_addrp, rs->shas + *badp * SHA256_LEN,
                      buf + *badp * BLOCK_SIZE) != 0)
        break;
      from = *badp + 1;
      *badp = UINT64_MAX;
    }
  }
  for (i = 0; r == 0 && *badp == UINT64_MAX && dev_trusting (dev) && i < mv.n;
       i++) {
    const struct mapping *m = &mv.m[i];
    uint64_t at = m->lbn - lbn;

    for (uint64_t b = 0; b < m->n; b++) {
      if (!rs->trusted[at + b])
        dev_trust_note (dev, m->addr + b, rs->shas + (at + b) * SHA256_LEN,
                        rs->seen[at + b]);
    }
  }
  map_vec_free (&mv);
  return r;
}

/* The digests of blocks that are holes: the SHA-256 of a block of zeros
 * (a constant: test-volume's pwrite_pread_sums checks it against a hole),
 * written into each of n slots of shas before the mapping overwrites the
 * mapped ones.
 */
static void
fill_hole_sums (uint8_t *shas, uint64_t n)
{
  static const uint8_t zsha[SHA256_LEN] = {
    0xad, 0x7f, 0xac, 0xb2, 0x58, 0x6f, 0xc6, 0xe9, 0x66, 0xc0, 0x04, 0xd7,
    0xd1, 0xd1, 0x6b, 0x02, 0x4f, 0x58, 0x05, 0xff, 0x7c, 0xb4, 0x7c, 0x7a,
    0x85, 0xda, 0xbd, 0x8b, 0x48, 0x89, 0x2c, 0xa7
  };

  for (uint64_t i = 0; i < n; i++)
    memcpy (shas + i * SHA256_LEN, zsha, SHA256_LEN);
}

/* ---------------------------------------------------------- reading ahead
 *
 * The device reads ahead nothing of its own (dev.h, T4), so a sequential
 * reader of blocks that are not in the host's cache would wait for the
 * disk at every request.  A handle follows up to RA_STREAMS sequential
 * readers, as the kernel does for a file: a read that had to go to the
 * disk and continues where an earlier one of the handle ended (give or
 * take a window: requests in flight together end out of order) starts
 * reading ahead, a window of blocks past where the stream stands, and
 * the window doubles up to RA_MAX each time the stream has read half of
 * what was asked for.  The window is mapped through the handle's tree and
 * handed to dev_prefetch, which claims the blocks it asks the disk for:
 * the reads that later find them in the cache check them and note them
 * as trusted.  A stream whose window the cache already held stops
 * reading ahead until it misses again, so a reader of cached data pays
 * one atomic load a request, and a random reader that misses never
 * matches a stream.
 */
#define RA_MIN 64u                  /* blocks: the first window, 256 KiB */
#define RA_MAX 512u                 /* blocks: the largest, 2 MiB */

/* Held for a few comparisons; a holder descheduled on a busy machine is
 * waited for by yielding, not by spinning on its CPU.
 */
static void
ra_lock (struct readahead *ra)
{
  while (__atomic_test_and_set (&ra->lock, __ATOMIC_ACQUIRE))
    for (int spins = 0; __atomic_load_n (&ra->lock, __ATOMIC_RELAXED); spins++)
      if (spins >= 64)
        sched_yield ();
}

static void
ra_unlock (struct readahead *ra)
{
  __atomic_clear (&ra->lock, __ATOMIC_RELEASE);
}

/* Stop stream s reading ahead (lock held). */
static void
ra_stop (struct readahead *ra, struct ra_stream *s)
{
  if (s->ahead) {
    s->ahead = 0;
    __atomic_sub_fetch (&ra->active, 1, __ATOMIC_RELAXED);
  }
}

/* Follow a read of [lbn, lbn + n) that went to the disk (missed) or not,
 * of a handle with an active stream if not: the blocks to read ahead into
 * [*ap, *bp), or false.
 */
static bool
ra_follow (struct readahead *ra, uint64_t lbn, uint64_t n, bool missed,
           uint64_t blocks, uint64_t *ap, uint64_t *bp)
{
  struct ra_stream *s = NULL;
  bool go = false;

  ra_lock (ra);
  ra->clock++;
  for (int i = 0; i < RA_STREAMS && s == NULL; i++) {
    struct ra_stream *t = &ra->s[i];
    uint64_t slack = MAX (t->window, n);

    if (t->used && lbn + slack >= t->next && lbn <= t->next + slack)
      s = t;
  }
  if (s == NULL) {
    /* A new place: the least recently continued stream gives way. */
    if (missed) {
      s = &ra->s[0];
      for (int i = 1; i < RA_STREAMS; i++)
        if (ra->s[i].used < s->used)
          s = &ra->s[i];
      ra_stop (ra, s);
      *s = (struct ra_stream) { lbn + n, 0, 0, ra->clock };
    }
    ra_unlock (ra);
    return false;
  }
  s->used = ra->clock;
  s->next = MAX (s->next, lbn + n);
  if (s->ahead == 0 && missed) {
    s->window = MIN (MAX (4 * n, RA_MIN), RA_MAX);
    s->ahead = s->next;
    __atomic_add_fetch (&ra->active, 1, __ATOMIC_RELAXED);
    go = true;
  }
  else if (s->ahead && s->ahead < s->next + s->window / 2) {
    s->window = MIN (2 * s->window, RA_MAX);
    go = true;
  }
  if (go) {
    *ap = MAX (s->ahead, s->next);
    *bp = MIN (s->next + s->window, blocks);
    if (*ap >= *bp)
      go = false;
    else
      s->ahead = *bp;
  }
  ra_unlock (ra);
  return go;
}

/* A window the cache held all of: stop the stream that asked for it. */
static void
ra_held (struct readahead *ra, uint64_t b)
{
  ra_lock (ra);
  for (int i = 0; i < RA_STREAMS; i++)
    if (ra->s[i].ahead == b)
      ra_stop (ra, &ra->s[i]);
  ra_unlock (ra);
}

/* After a read of [lbn, lbn + n): read ahead of its stream, if it has one
 * that should.  Advice: nothing here can fail the read.
 */
static void
read_ahead (struct cairn_volume *v, uint64_t lbn, uint64_t n, bool missed)
{
  struct cairn_dev *dev = pool_dev (v->cat->pool);
  struct map_vec mv = { NULL, 0, 0 };
  uint64_t a, b, asked = 0;
  uint8_t *shas;

  /* A read from the cache with no stream reading ahead: the usual case. */
  if (!missed && __atomic_load_n (&v->ra.active, __ATOMIC_RELAXED) == 0)
    return;
  if (!dev_trusting (dev) ||
      !ra_follow (&v->ra, lbn, n, missed, vol_size (v) / BLOCK_SIZE, &a, &b))
    return;
  shas = malloc ((b - a) * SHA256_LEN);
  if (shas && map_range (v, a, b - a, &mv, shas) == 0) {
    for (size_t i = 0, j; i < mv.n; i = j) {
      uint64_t len = mv.m[i].n;

      for (j = i + 1; j < mv.n && mv.m[j].addr == mv.m[i].addr + len; j++)
        len += mv.m[j].n;
      asked += dev_prefetch (dev, mv.m[i].addr * BLOCK_SIZE, len * BLOCK_SIZE);
    }
  }
  map_vec_free (&mv);
  free (shas);
  if (asked == 0)
    ra_held (&v->ra, b);
}

/* How often a read maps and reads again when a block fails its check at a
 * new place each time (freed and reused between its mapping and its read,
 * again and again under a fast rewrite): a bound, not an expectation.
 */
#define READ_ATTEMPTS 8

/* Read whole blocks [lbn, lbn + n) into buf, checking every block that
 * the device does not trust; with their digests into sums (holes' too)
 * when it is not NULL.
 */
static int
read_blocks_sums (struct cairn_volume *v, uint64_t lbn, uint64_t n,
                  uint8_t *buf, uint8_t *sums)
{
  enum { STACK_BLOCKS = 16 };
  uint8_t stack_shas[STACK_BLOCKS * SHA256_LEN];
  uint64_t stack_seen[STACK_BLOCKS];
  bool stack_trusted[STACK_BLOCKS];
  struct read_scratch rs = { stack_shas, stack_seen, stack_trusted };
  void *heap = NULL;
  uint64_t bad = UINT64_MAX, bad_addr = 0, last_bad = UINT64_MAX, last_addr = 0;
  uint8_t last_sha[SHA256_LEN];
  bool missed = false;
  int r = 0;

  if (n > STACK_BLOCKS) {
    /* One allocation: digests (unless the caller's), entries, flags. */
    heap = malloc (n * ((sums ? 0 : SHA256_LEN) + sizeof *rs.seen +
                        sizeof *rs.trusted));
    if (heap == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory reading '%s'", v->info.name);
      goto out;
    }
    rs.seen = heap;
    rs.trusted = (bool *) (rs.seen + n);
    rs.shas = (uint8_t *) (rs.trusted + n);
  }
  if (sums)
    rs.shas = sums;
  for (int attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
    /* Again on a retry: a block mapped the first time may be a hole now. */
    if (sums)
      fill_hole_sums (sums, n);
    r = read_mapped (v, lbn, n, buf, &rs, &bad, &bad_addr, &missed);
    if (r < 0 || bad == UINT64_MAX)
      break;
    r = -EIO;
    /* The same block failing twice at the same place with the same digest:
     * it was still mapped there, so nothing reused the place in between.
     * That is damage.
     */
    if (bad == last_bad && bad_addr == last_addr &&
        memcmp (last_sha, rs.shas + bad * SHA256_LEN, SHA256_LEN) == 0)
      break;
    last_bad = bad;
    last_addr = bad_addr;
    memcpy (last_sha, rs.shas + bad * SHA256_LEN, SHA256_LEN);
  }
  if (r == -EIO && bad != UINT64_MAX) {
    uint64_t blk = lbn + bad;
    r = cairn_fail (-EIO, "checksum mismatch reading block %" PRIu64 " (byte %"
                    PRIu64 ") of volume '%s': the data is damaged on disk",
                    blk, blk * BLOCK_SIZE, v->info.name);
  }
  free (heap);
  if (r == 0)
    read_ahead (v, lbn, n, missed);
 out:
  if (r == -EIO)
    COUNT (v, csum_errors, 1);
  return r;
}

/* Read whole blocks [lbn, lbn + n) into buf, checking every block. */
int
read_blocks (struct cairn_volume *v, uint64_t lbn, uint64_t n, uint8_t *buf)
{
  return read_blocks_sums (v, lbn, n, buf, NULL);
}

/* Check a request against the volume's size. */
int
check_range (struct cairn_volume *v, uint32_t count, uint64_t off)
{
  uint64_t size = vol_size (v);

  if (count > VOL_MAX_IO)
    return cairn_fail (-EINVAL, "request of %" PRIu32 " bytes is larger than "
                       "%u", count, VOL_MAX_IO);
  if (off > size || count > size - off)
    return cairn_fail (-EINVAL, "request [%" PRIu64 ", +%" PRIu32 ") is beyond "
                       "the end of '%s' (%" PRIu64 " bytes)", off, count,
                       v->info.name, size);
  return 0;
}

/* Count a read's outcome. */
static void
count_read (struct cairn_volume *v, int r, uint32_t count)
{
  if (r < 0)
    COUNT (v, errors, 1);
  else {
    COUNT (v, reads, 1);
    COUNT (v, bytes_read, count);
  }
}

/* Read whole blocks and their digests. */
int
vol_pread_sums (struct cairn_volume *v, void *buf, uint32_t count,
                uint64_t off, uint8_t *sums)
{
  int r = check_range (v, count, off);

  if (r == 0 && (off % BLOCK_SIZE || count % BLOCK_SIZE))
    r = cairn_fail (-EINVAL, "read with digests at [%" PRIu64 ", +%" PRIu32
                    ") of '%s' is not in whole %d-byte blocks: use vol_pread",
                    off, count, v->info.name, BLOCK_SIZE);
  if (r == 0 && count > 0)
    r = read_blocks_sums (v, off / BLOCK_SIZE, count / BLOCK_SIZE, buf, sums);
  count_read (v, r, count);
  return r;
}

/* Read bytes. */
int
vol_pread (struct cairn_volume *v, void *buf, uint32_t count, uint64_t off)
{
  uint64_t lbn = off / BLOCK_SIZE, end = DIV_ROUND_UP (off + count, BLOCK_SIZE);
  uint8_t *tmp = NULL;
  int r = check_range (v, count, off);

  if (r < 0 || count == 0)
    goto out;
  if (off % BLOCK_SIZE == 0 && count % BLOCK_SIZE == 0)
    r = read_blocks (v, lbn, end - lbn, buf);
  else {
    tmp = malloc ((end - lbn) * BLOCK_SIZE);
    if (tmp == NULL) {
      r = cairn_fail (-ENOMEM, "out of memory reading '%s'", v->info.name);
      goto out;
    }
    r = read_blocks (v, lbn, end - lbn, tmp);
    if (r == 0)
      memcpy (buf, tmp + off % BLOCK_SIZE, count);
  }
 out:
  free (tmp);
  count_read (v, r, count);
  return r;
}
