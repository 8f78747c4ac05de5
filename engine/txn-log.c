/* Cairn engine: the intent log, so that a FLUSH (or FUA write) costs one
 * small sequential write and a device flush instead of a commit (ZFS's
 * ZIL, btrfs's log tree; DESIGN.md §2.7).
 *
 * Design note.
 *
 * A write's data is on its own freshly allocated blocks before the write
 * is acknowledged (volume.c); what a crash loses is the mapping, which
 * lives in memory until the commit.  So the log holds mappings, not data:
 * for every write and punch (trim, zero) acknowledged since the last
 * commit, a record (volume tree, logical blocks, new address, SHA-256 of
 * every block, its generation).  A flush writes the records not yet in the
 * log into log blocks, then flushes the device once: data and log reach
 * the disk under the same barrier.
 *
 * Where the log lives: a ring of log_blocks contiguous blocks, allocated
 * once (by the first flush of a pool opened with intent_log) and never
 * freed, named by every superblock (FEATURE_INCOMPAT_INTENTLOG).  Block
 * number s of the log (its sequence number) sits at ring position
 * s % log_blocks, so each block "names" the next one's address without
 * storing it, and a block left over from an earlier lap carries an older
 * sequence number.
 *
 * Invariants (tests cite them as IL-n):
 *  IL-1  A superblock of generation G names the log's head: log_seq, the
 *        sequence number the next log block had when G was frozen, and
 *        log_gen = G.  Every record of a generation newer than G is in a
 *        log block numbered log_seq or later: records are appended inside
 *        mutations, which the freeze holds out, and take their block
 *        numbers under the log's lock, which the freeze takes to read the
 *        head.  Records of G and older in those blocks are skipped at
 *        replay: G is durable.
 *  IL-2  The live log is the blocks from the durable head on that carry
 *        the pool's UUID, their own sequence number and a valid SHA-256,
 *        up to the first that does not.  Log blocks are written in
 *        sequence order, one writer at a time (io), and a writer returns
 *        only after its device flush: so a block that is not durable has
 *        no durable successor that was ever acknowledged, and a torn or
 *        missing block ends the chain there -- the writes after it were
 *        never acknowledged as flushed.
 *  IL-3  A ring position is overwritten only once the durable head has
 *        passed it (next_seq - durable_seq <= log_blocks).  A flush that
 *        finds no room commits instead; the commit thread is woken once
 *        half the ring is live, so that this stays rare.
 *  IL-4  The data a live record names is never overwritten before a
 *        durable commit makes the record obsolete: the blocks were
 *        allocated in the record's generation g, and a block freed in
 *        generation h is allocatable only once h is durable (TX-2) --
 *        with the log on, even a block born in the open generation
 *        (space_set_hold_young), which space.c would otherwise free at
 *        once.  h >= g, so once h is durable so is g, and the record is
 *        skipped (IL-1).  The same holds from a replay on: until the
 *        commit after it is durable, a crash replays the same log again,
 *        so the blocks replay frees wait too.
 *  IL-5  One device flush makes a flush durable: a record's data could
 *        reach the disk after its log block (both are written before the
 *        flush, in any order), so replay reads the data a record names
 *        and checks it against the record's SHA-256 before it applies it.
 *        The records one flush wrote are a batch (its last block carries
 *        LOG_F_END), replayed all or none: replay ends before the first
 *        batch with a record that does not check or a block that is
 *        missing (that flush never returned), so a crash leaves the
 *        writes of whole flushes.  Cost: replay reads what the live log
 *        names.
 *  IL-6  Replay re-makes each record's change in the open generation R
 *        of the reopened pool, in log order, through the volume layer's
 *        own tree code (so overwrites free or keep what they took out as
 *        any write would), claiming the record's data blocks in the space
 *        map first; the replayed writes belong to R and the commit of R,
 *        right after replay, makes the whole log obsolete (its head is
 *        where the live log ended).  No commit runs during replay
 *        (pool_commit waits it out by returning at once), and until a
 *        read-write open has replayed, commits keep the durable head and
 *        generation (replay_done), so that a crash in between replays the
 *        same log again.  A read-only open replays nothing: it sees the
 *        pool as of its last commit, and fsck reports the live records.
 *  IL-7  Only writes and punches of volumes that exist at the last commit
 *        are logged.  Snapshots, clones, deletes, rollbacks, resizes and
 *        every other catalog change commit before they return, and so are
 *        in the generation the head extends; writes into a received
 *        partial volume are not logged (a receive commits its progress).
 *        A record whose volume, range or blocks do not fit the pool at
 *        replay ends the replay like a torn block, never applied half.
 *  IL-8  A flush logs only after the generation in which appending began
 *        (ready_gen) is durable: writes of that generation made before
 *        appending began have no record, and only that commit holds them.
 *        Until then, and when a record could not be kept (no memory),
 *        flushes commit.
 *
 * Why incompat: after a crash the live log holds acknowledged writes that
 * only replay brings back; an older cairn would open the pool without
 * them.  So every superblock of a pool with a ring carries
 * FEATURE_INCOMPAT_INTENTLOG, and an older binary refuses the pool.
 *
 * Checkpoints: a replayed write is part of R, the checkpoint the commit
 * after replay makes; generations the crash lost never existed.
 *
 * Several devices: the ring is a range of the pool's logical addresses
 * like any other allocation, so the chunked device (dev-chunk.c) places
 * and mirrors it as it does data.
 *
 * Log block (4 KiB, little-endian):
 *   offset size field
 *   0      8    magic       "CAIRNIL1"
 *   8      16   uuid        the pool's
 *   24     8    seq         this block's sequence number
 *   32     8    gen         the open generation when it was written
 *   40     4    nrec        records in the block
 *   44     4    used        bytes of records from offset 56
 *   48     4    flags       LOG_F_END: the last block of its batch
 *   52     4    zero
 *   56     ...  records
 *   4064   32   sha256      of bytes 0..4063
 * Record:
 *   0      1    type        POOL_LOG_WRITE or POOL_LOG_PUNCH
 *   1      3    zero
 *   4      4    n           logical blocks (1..LOG_REC_MAX for a write)
 *   8      8    tree        the volume tree's id
 *   16     8    lbn         first logical block
 *   24     8    addr        WRITE: first data block; PUNCH: 0
 *   32     8    gen         the generation the change was made in
 *   40     n*32 sha256      WRITE only: of each data block
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "txn-int.h"

#define LOG_MAGIC "CAIRNIL1"
#define LOG_HDR 56u
#define LOG_F_END 1u           /* the last block of a flush's batch */
#define LOG_CSUM_OFF 4064u
#define LOG_PAYLOAD (LOG_CSUM_OFF - LOG_HDR)
#define REC_HDR 40u
/* The most data blocks one record names: one log block's worth. */
#define LOG_REC_MAX ((LOG_PAYLOAD - REC_HDR) / SHA256_LEN)
/* Ring size: 1/64 of the pool, 64 to 2048 blocks (8 MiB): at one block
 * per flush of a few dozen random writes, a ring of 2048 blocks outlasts
 * the 5 s commit timer at 400 flushes a second before the half-way kick.
 */
#define LOG_RING_MIN 64u
#define LOG_RING_MAX 2048u

/* Size of an encoded record. */
static size_t
rec_size (unsigned type, uint64_t n)
{
  return REC_HDR + (type == POOL_LOG_WRITE ? n * SHA256_LEN : 0);
}

int
pool_log_init (struct cairn_pool *pool, bool want)
{
  struct intentlog *l = &pool->log;

  pthread_mutex_init (&l->lock, NULL);
  pthread_mutex_init (&l->io, NULL);
  l->want = want && !pool->readonly;
  if (pool->sb.incompat & FEATURE_INCOMPAT_INTENTLOG) {
    l->start = pool->sb.log_start;
    l->nblocks = pool->sb.log_blocks;
    l->next_seq = l->durable_seq = pool->sb.log_seq;
  }
  /* Nothing to replay without a ring (IL-6). */
  l->replay_done = l->nblocks == 0;
  return 0;
}

void
pool_log_free (struct cairn_pool *pool)
{
  struct intentlog *l = &pool->log;

  free (l->pend);
  pthread_mutex_destroy (&l->lock);
  pthread_mutex_destroy (&l->io);
}

/* Start appending records in the open generation (inside txn_begin):
 * flushes log once it is durable (IL-8), and frees of young blocks wait
 * for durability (IL-4).
 */
static void
start_appending (struct cairn_pool *pool)
{
  struct intentlog *l = &pool->log;

  space_set_hold_young (pool->space, true);
  l->ready_gen = __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
  __atomic_store_n (&l->ready, true, __ATOMIC_RELEASE);
}

bool
pool_log_active (struct cairn_pool *pool)
{
  return __atomic_load_n (&pool->log.ready, __ATOMIC_ACQUIRE);
}

/* Grow the pending buffer by len bytes (lock held); false without memory. */
static bool
pend_reserve (struct intentlog *l, size_t len)
{
  if (l->pend_len + len > l->pend_cap) {
    size_t cap = l->pend_cap ? l->pend_cap * 2 : 64 * 1024;
    uint8_t *p;

    while (cap < l->pend_len + len)
      cap *= 2;
    if ((p = realloc (l->pend, cap)) == NULL)
      return false;
    l->pend = p;
    l->pend_cap = cap;
  }
  return true;
}

/* Append a record, split into pieces that fit a log block (pool.h). */
void
pool_log_append (struct cairn_pool *pool, const struct pool_log_rec *rec)
{
  struct intentlog *l = &pool->log;
  uint64_t gen = __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE);
  uint64_t done = 0;

  if (!pool_log_active (pool))
    return;
  pthread_mutex_lock (&l->lock);
  while (done < rec->n) {
    uint64_t n = MIN (rec->n - done, rec->type == POOL_LOG_WRITE
                                     ? LOG_REC_MAX : UINT32_MAX);
    size_t len = rec_size (rec->type, n);
    uint8_t *p;

    if (!pend_reserve (l, len)) {
      l->must_commit = true;      /* IL-8: the next flush commits */
      break;
    }
    p = l->pend + l->pend_len;
    memset (p, 0, REC_HDR);
    p[0] = (uint8_t) rec->type;
    put_le32 (p + 4, (uint32_t) n);
    put_le64 (p + 8, rec->tree);
    put_le64 (p + 16, rec->lbn + done);
    put_le64 (p + 24, rec->type == POOL_LOG_WRITE ? rec->addr + done : 0);
    put_le64 (p + 32, gen);
    if (rec->type == POOL_LOG_WRITE)
      memcpy (p + REC_HDR, rec->shas + done * SHA256_LEN, n * SHA256_LEN);
    l->pend_len += len;
    l->appended++;
    done += n;
  }
  pthread_mutex_unlock (&l->lock);
}

/* Decode the record at p (avail bytes left in the block): its size, or 0
 * when it does not decode.
 */
static size_t
rec_decode (const uint8_t *p, size_t avail, struct pool_log_rec *rec,
            uint64_t *gen)
{
  size_t len;

  if (avail < REC_HDR || (p[0] != POOL_LOG_WRITE && p[0] != POOL_LOG_PUNCH) ||
      p[1] || p[2] || p[3])
    return 0;
  rec->type = p[0];
  rec->n = get_le32 (p + 4);
  rec->tree = get_le64 (p + 8);
  rec->lbn = get_le64 (p + 16);
  rec->addr = get_le64 (p + 24);
  *gen = get_le64 (p + 32);
  if (rec->n == 0 || (rec->type == POOL_LOG_WRITE && rec->n > LOG_REC_MAX) ||
      (rec->type == POOL_LOG_PUNCH && rec->addr != 0))
    return 0;
  len = rec_size (rec->type, rec->n);
  if (len > avail)
    return 0;
  rec->shas = rec->type == POOL_LOG_WRITE ? p + REC_HDR : NULL;
  return len;
}

/* The generation of the record at p (a well-formed one in pend). */
static uint64_t
pend_rec (const uint8_t *p, size_t *len)
{
  *len = rec_size (p[0], get_le32 (p + 4));
  return get_le64 (p + 32);
}

/* Drop the records of generation gen and older from the front of the
 * pending buffer (lock held): a durable commit holds them.  Records are
 * appended in generation order (the freeze holds appends out).
 */
static void
pend_drop_upto (struct intentlog *l, uint64_t gen)
{
  size_t off = 0, len;

  while (off < l->pend_len && pend_rec (l->pend + off, &len) <= gen)
    off += len;
  if (off == 0)
    return;                       /* pend may be NULL */
  memmove (l->pend, l->pend + off, l->pend_len - off);
  l->pend_len -= off;
}

void
pool_log_freeze (struct cairn_pool *pool, struct superblock *sb)
{
  struct intentlog *l = &pool->log;

  pthread_mutex_lock (&l->lock);
  if (l->nblocks) {
    sb->incompat |= FEATURE_INCOMPAT_INTENTLOG;
    sb->log_start = l->start;
    sb->log_blocks = l->nblocks;
    /* Before replay the durable head stays (IL-6). */
    if (l->replay_done) {
      sb->log_seq = l->next_seq;
      sb->log_gen = sb->generation;
    }
  }
  pthread_mutex_unlock (&l->lock);
}

void
pool_log_durable (struct cairn_pool *pool, const struct superblock *sb)
{
  struct intentlog *l = &pool->log;

  pthread_mutex_lock (&l->lock);
  if (sb->incompat & FEATURE_INCOMPAT_INTENTLOG)
    l->durable_seq = sb->log_seq;
  pend_drop_upto (l, sb->generation);
  pthread_mutex_unlock (&l->lock);
}

/* Make the ring (the first flush of a pool opened with intent_log): its
 * blocks are allocated in the open generation, the superblock of that
 * generation names it, and from then on records are appended.  The
 * caller commits next.
 */
static int
log_create (struct cairn_pool *pool)
{
  struct intentlog *l = &pool->log;
  uint64_t n = pool->sb.total_blocks / 64, start;
  int r = txn_begin (pool);

  if (r < 0)
    return r;
  n = MIN (MAX (n, LOG_RING_MIN), LOG_RING_MAX);
  r = space_alloc (pool->space, n, 0, 0, &start);
  if (r == 0) {
    pthread_mutex_lock (&l->lock);
    l->start = start;
    l->nblocks = n;
    l->next_seq = l->durable_seq = 1;
    pthread_mutex_unlock (&l->lock);
    start_appending (pool);
  }
  txn_end (pool);
  if (r < 0)
    return cairn_fail (r, "no room for the intent log's %" PRIu64 " blocks: "
                       "flushes commit instead", n);
  return 0;
}

/* Encode one log block from the records at recs (len bytes, whole
 * records), returning how many bytes it took.
 */
static size_t
block_encode (struct cairn_pool *pool, uint64_t seq, bool end,
              const uint8_t *recs, size_t len, uint8_t *buf)
{
  size_t used = 0, rlen;
  uint32_t nrec = 0;

  memset (buf, 0, BLOCK_SIZE);
  while (used < len) {
    (void) pend_rec (recs + used, &rlen);
    if (used + rlen > LOG_PAYLOAD)
      break;
    used += rlen;
    nrec++;
  }
  memcpy (buf, LOG_MAGIC, 8);
  memcpy (buf + 8, pool->sb.uuid, 16);
  put_le64 (buf + 24, seq);
  put_le64 (buf + 32, __atomic_load_n (&pool->open_gen, __ATOMIC_ACQUIRE));
  put_le32 (buf + 40, nrec);
  put_le32 (buf + 44, (uint32_t) used);
  put_le32 (buf + 48, end ? LOG_F_END : 0);
  memcpy (buf + LOG_HDR, recs, used);
  sha256 (buf, LOG_CSUM_OFF, buf + LOG_CSUM_OFF);
  return used;
}

/* Blocks that the records at recs (len bytes) fill. */
static uint64_t
blocks_needed (const uint8_t *recs, size_t len)
{
  uint64_t k = 0;
  size_t used = 0, in = 0, rlen;

  while (used < len) {
    (void) pend_rec (recs + used, &rlen);
    if (in == 0 || in + rlen > LOG_PAYLOAD) {
      k++;
      in = 0;
    }
    in += rlen;
    used += rlen;
  }
  return k;
}

/* Write k log blocks from seq on (wrapping round the ring), then flush. */
static int
log_write (struct cairn_pool *pool, uint64_t seq, const uint8_t *recs,
           size_t len, uint64_t k)
{
  struct intentlog *l = &pool->log;
  uint8_t *buf = malloc (k * BLOCK_SIZE);
  uint64_t i = 0;
  size_t off = 0;
  int r = 0;

  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing the intent log");
  for (uint64_t j = 0; j < k; j++)
    off += block_encode (pool, seq + j, j == k - 1, recs + off, len - off,
                         buf + j * BLOCK_SIZE);
  while (r == 0 && i < k) {
    uint64_t pos = (seq + i) % l->nblocks;
    uint64_t run = MIN (k - i, l->nblocks - pos);

    r = dev_pwrite (pool->dev, buf + i * BLOCK_SIZE, run * BLOCK_SIZE,
                    (l->start + pos) * BLOCK_SIZE);
    i += run;
  }
  if (r == 0)
    r = dev_flush (pool->dev);
  free (buf);
  return r;
}

/* A flush (pool.h). */
int
pool_log_flush (struct cairn_pool *pool)
{
  struct intentlog *l = &pool->log;
  uint64_t ticket, durable, k, seq, count;
  uint8_t *recs;
  size_t len;
  bool commit;
  int r;

  if (pool->readonly)
    return 0;
  if (__atomic_load_n (&pool->failed, __ATOMIC_ACQUIRE))
    return pool_commit (pool);      /* the refusal, saying why (TX-4) */
  pthread_mutex_lock (&pool->commit_lock);
  durable = pool->durable_gen;
  pthread_mutex_unlock (&pool->commit_lock);
  pthread_mutex_lock (&l->lock);
  commit = !l->ready || durable < l->ready_gen || l->must_commit;
  ticket = l->appended;
  if (!commit && l->logged >= ticket) {
    pthread_mutex_unlock (&l->lock);
    return 0;
  }
  pthread_mutex_unlock (&l->lock);
  if (commit) {
    pthread_mutex_lock (&l->io);
    if (l->want && !pool_log_active (pool) && l->replay_done &&
        l->nblocks == 0 && log_create (pool) < 0) {
      /* No room for a ring: this flush and later ones commit. */
      l->want = false;
    }
    pthread_mutex_unlock (&l->io);
    pthread_mutex_lock (&l->lock);
    l->must_commit = false;
    pthread_mutex_unlock (&l->lock);
    return pool_commit (pool);
  }

  pthread_mutex_lock (&l->io);
  pthread_mutex_lock (&l->lock);
  if (l->logged >= ticket) {      /* another flush wrote them meanwhile */
    pthread_mutex_unlock (&l->lock);
    pthread_mutex_unlock (&l->io);
    return 0;
  }
  recs = l->pend;
  len = l->pend_len;
  count = l->appended;
  l->pend = NULL;
  l->pend_len = l->pend_cap = 0;
  k = blocks_needed (recs, len);
  seq = l->next_seq;
  if (k > l->nblocks - (l->next_seq - l->durable_seq)) {
    /* No room in the ring (IL-3): a commit holds these records. */
    pthread_mutex_unlock (&l->lock);
    free (recs);
    r = pool_commit (pool);
    pthread_mutex_lock (&l->lock);
  }
  else {
    l->next_seq += k;
    pthread_mutex_unlock (&l->lock);
    r = k ? log_write (pool, seq, recs, len, k) : 0;
    free (recs);
    if (r < 0) {
      char msg[512];

      snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
      r = cairn_fail (-EIO, "writing the intent log failed, the pool is now "
                      "read-only until reopened: %s", msg);
      pool_latch_failed (pool, cairn_errmsg ());
    }
    pthread_mutex_lock (&l->lock);
    l->blocks_written += k;
    l->flushes++;
  }
  if (r == 0 && count > l->logged)
    l->logged = count;
  commit = l->next_seq - l->durable_seq > l->nblocks / 2;
  pthread_mutex_unlock (&l->lock);
  pthread_mutex_unlock (&l->io);
  if (commit)
    txn_kick_commit (pool);
  return r;
}

/* What a live log block must be (dev_check_fn). */
struct block_want {
  const struct superblock *sb;
  uint64_t seq;
};

/* Is buf the live log block of sequence number want->seq (IL-2)? */
static bool
block_checks (const void *buf, size_t len, void *opaque)
{
  const struct block_want *want = opaque;
  const uint8_t *b = buf;
  uint8_t sha[SHA256_LEN];

  if (len != BLOCK_SIZE || memcmp (b, LOG_MAGIC, 8) != 0 ||
      memcmp (b + 8, want->sb->uuid, 16) != 0 ||
      get_le64 (b + 24) != want->seq || get_le32 (b + 44) > LOG_PAYLOAD ||
      (get_le32 (b + 48) & ~LOG_F_END) || get_le32 (b + 52))
    return false;
  sha256 (b, LOG_CSUM_OFF, sha);
  return memcmp (sha, b + LOG_CSUM_OFF, SHA256_LEN) == 0;
}

/* Read and check the log block of sequence number seq into buf: 0, or
 * -ENOENT when it is not the live log's (IL-2).  On a pool of several
 * devices every copy is tried (dev_pread_checked, no repair): one damaged
 * copy of a durable block must not end the log there.
 */
static int
block_read (struct cairn_pool *pool, const struct superblock *sb,
            uint64_t seq, uint8_t *buf)
{
  uint64_t pos = seq % sb->log_blocks;
  struct block_want want = { sb, seq };

  return dev_pread_checked (pool->dev, buf, BLOCK_SIZE,
                            (sb->log_start + pos) * BLOCK_SIZE, false,
                            block_checks, &want) == 0 ? 0 : -ENOENT;
}

/* Does buf hold the data blocks of the write record opaque (their
 * SHA-256s)?  dev_check_fn.
 */
static bool
rec_data_checks (const void *buf, size_t len, void *opaque)
{
  const struct pool_log_rec *rec = opaque;
  uint8_t sha[SHA256_LEN];

  if (len != rec->n * BLOCK_SIZE)
    return false;
  for (uint64_t i = 0; i < rec->n; i++) {
    sha256 ((const uint8_t *) buf + i * BLOCK_SIZE, BLOCK_SIZE, sha);
    if (memcmp (sha, rec->shas + i * SHA256_LEN, SHA256_LEN) != 0)
      return false;
  }
  return true;
}

/* Is the data a write record names on the disk, as it names it (IL-5)?
 * Every copy is tried (dev_pread_checked, no repair), as for log blocks:
 * on a mirror, data whose first copy was damaged is still there.
 */
static bool
data_checks (struct cairn_pool *pool, const struct pool_log_rec *rec)
{
  uint8_t *buf = malloc (rec->n * BLOCK_SIZE);
  bool ok;

  if (buf == NULL)
    return false;
  ok = rec->addr >= pool->sb.data_start && rec->addr < pool->sb.total_blocks &&
       rec->n <= pool->sb.total_blocks - rec->addr &&
       dev_pread_checked (pool->dev, buf, rec->n * BLOCK_SIZE,
                          rec->addr * BLOCK_SIZE, false, rec_data_checks,
                          (void *) rec) == 0;
  free (buf);
  return ok;
}

/* Walk the live log of the durable superblock: for each record newer than
 * its generation call fn (when not NULL), which returns 0 to go on, 1 to
 * stop (the rest of the log is not applied) or an error; call batch (when
 * not NULL) at the end of every batch with whole true, and once more with
 * whole false where the log ends inside a batch (its flush never
 * returned).  *blocks and *records count the live blocks and their
 * records; *end is the sequence number after the last live block.
 */
static int
walk (struct cairn_pool *pool,
      int (*fn) (struct cairn_pool *pool, const struct pool_log_rec *rec,
                 void *opaque),
      void (*batch) (struct cairn_pool *pool, void *opaque, bool whole),
      void *opaque, uint64_t *blocks, uint64_t *records, uint64_t *end)
{
  const struct superblock *sb = &pool->sb;
  uint8_t *buf = malloc (BLOCK_SIZE);
  uint64_t seq = sb->log_seq;
  bool stop = false, in_batch = false;
  int r = 0;

  *blocks = *records = 0;
  if (buf == NULL)
    return cairn_fail (-ENOMEM, "out of memory reading the intent log");
  for (uint64_t i = 0; r == 0 && i < sb->log_blocks; i++, seq++) {
    size_t used, off = 0;

    if (block_read (pool, sb, seq, buf) < 0) {
      if (batch && in_batch && !stop)
        batch (pool, opaque, false);
      in_batch = false;
      break;
    }
    (*blocks)++;
    in_batch = true;
    used = get_le32 (buf + 44);
    for (uint32_t j = 0; r == 0 && j < get_le32 (buf + 40); j++) {
      struct pool_log_rec rec;
      uint64_t gen;
      size_t len = rec_decode (buf + LOG_HDR + off, used - off, &rec, &gen);

      if (len == 0) {             /* checksummed, yet malformed */
        if (batch && !stop)
          batch (pool, opaque, false);
        stop = true;
        break;
      }
      off += len;
      if (gen <= sb->log_gen)
        continue;
      (*records)++;
      if (fn && !stop) {
        r = fn (pool, &rec, opaque);
        if (r == 1) {
          stop = true;
          r = 0;
        }
      }
    }
    if (get_le32 (buf + 48) & LOG_F_END) {
      if (batch && !stop)
        batch (pool, opaque, true);
      in_batch = false;
    }
  }
  if (batch && in_batch && !stop && r == 0)
    batch (pool, opaque, false);      /* the ring ended inside a batch */
  *end = seq;
  free (buf);
  return r;
}

struct replay {
  int (*apply) (void *opaque, const struct pool_log_rec *rec);
  void *opaque;
  uint64_t claimed;             /* records of whole batches the first pass
                                   checked and claimed */
  uint64_t pending;             /* records of the batch it is in */
  struct { uint64_t addr, n; } *held;  /* their claimed blocks */
  size_t nheld, held_cap;
  uint64_t seen;                /* records the second pass reached */
  uint64_t applied;
  bool stopped;                 /* apply ended the replay */
};

/* Give back what the first pass claimed in the batch it is in. */
static void
unclaim_batch (struct cairn_pool *pool, struct replay *rp)
{
  for (size_t i = 0; i < rp->nheld; i++)
    space_free (pool->space, rp->held[i].addr, rp->held[i].n,
                pool_open_gen (pool));
  rp->nheld = 0;
  rp->pending = 0;
}

/* The first pass (walk's fn): check a record's data (IL-5) and claim its
 * blocks, so that nothing the second pass allocates (the trees' nodes)
 * can take blocks a later record names.  A record that does not check,
 * or whose blocks are not free, ends the replay, and so does the batch
 * it is in: the writes of one flush are replayed all or none.
 */
static int
replay_claim (struct cairn_pool *pool, const struct pool_log_rec *rec,
              void *opaque)
{
  struct replay *rp = opaque;

  if (rec->type == POOL_LOG_WRITE) {
    if (rp->nheld == rp->held_cap) {
      size_t cap = rp->held_cap ? rp->held_cap * 2 : 64;
      void *p = realloc (rp->held, cap * sizeof *rp->held);

      if (p == NULL)
        return cairn_fail (-ENOMEM, "out of memory replaying the intent log");
      rp->held = p;
      rp->held_cap = cap;
    }
    if (!data_checks (pool, rec) ||
        space_claim (pool->space, rec->addr, rec->n) < 0) {
      unclaim_batch (pool, rp);
      return 1;
    }
    rp->held[rp->nheld].addr = rec->addr;
    rp->held[rp->nheld].n = rec->n;
    rp->nheld++;
  }
  rp->pending++;
  return 0;
}

/* The end of a batch in the first pass: a whole one is kept. */
static void
replay_batch (struct cairn_pool *pool, void *opaque, bool whole)
{
  struct replay *rp = opaque;

  if (!whole) {
    unclaim_batch (pool, rp);
    return;
  }
  rp->claimed += rp->pending;
  rp->pending = 0;
  rp->nheld = 0;
}

/* The second pass: apply the records the first one claimed, each in a
 * mutation of its own; the blocks of those it does not apply go back.
 */
static int
replay_apply (struct cairn_pool *pool, const struct pool_log_rec *rec,
              void *opaque)
{
  struct replay *rp = opaque;
  int r = 2;

  if (rp->seen++ == rp->claimed)
    return 1;
  if ((r = txn_begin (pool)) < 0)
    return r;
  r = rp->stopped ? 2 : rp->apply (rp->opaque, rec);
  if (r == 1)
    rp->stopped = true;
  if (r > 0 && rec->type == POOL_LOG_WRITE)
    space_free (pool->space, rec->addr, rec->n, pool_open_gen (pool));
  txn_end (pool);
  if (r == 0)
    rp->applied++;
  return r < 0 ? r : 0;
}

int
pool_log_replay (struct cairn_pool *pool,
                 int (*apply) (void *opaque, const struct pool_log_rec *rec),
                 void *opaque, uint64_t *applied)
{
  struct intentlog *l = &pool->log;
  struct replay rp = { .apply = apply, .opaque = opaque };
  uint64_t blocks, records, end;
  int r;

  *applied = 0;
  if (pool->readonly)
    return 0;
  if (!l->replay_done) {
    if ((r = pool_space_load (pool)) < 0)
      return r;
    /* The live log stays live until the commit after replay is durable:
     * what replay frees of the blocks it names waits for that (IL-4).
     */
    space_set_hold_young (pool->space, true);
    __atomic_store_n (&l->replaying, true, __ATOMIC_RELEASE);
    r = txn_begin (pool);
    if (r == 0) {
      r = walk (pool, replay_claim, replay_batch, &rp, &blocks, &records,
                &end);
      txn_end (pool);
    }
    free (rp.held);
    if (r == 0)
      r = walk (pool, replay_apply, NULL, &rp, &blocks, &records, &end);
    __atomic_store_n (&l->replaying, false, __ATOMIC_RELEASE);
    if (r < 0) {
      char msg[512];

      /* Trees hold part of the log: no commit may write them (TX-4). */
      snprintf (msg, sizeof msg, "%s", cairn_errmsg ());
      r = cairn_fail (r, "replaying the intent log failed, the pool is "
                      "read-only until reopened: %s", msg);
      pool_latch_failed (pool, cairn_errmsg ());
      return r;
    }
    pthread_mutex_lock (&l->lock);
    l->next_seq = end;
    l->replay_done = true;
    pthread_mutex_unlock (&l->lock);
    *applied = rp.applied;
  }
  /* A ring and the wish to use it: log from now on (IL-8). */
  if (l->want && l->nblocks && !pool_log_active (pool)) {
    if ((r = txn_begin (pool)) < 0)
      return r;
    start_appending (pool);
    txn_end (pool);
  }
  return 0;
}

int
pool_log_info (struct cairn_pool *pool, struct pool_log_info *info)
{
  struct intentlog *l = &pool->log;
  uint64_t end;
  int r = 0;

  memset (info, 0, sizeof *info);
  pthread_mutex_lock (&pool->commit_lock);
  info->start = pool->sb.log_start;
  info->nblocks = pool->sb.log_blocks;
  pthread_mutex_unlock (&pool->commit_lock);
  pthread_mutex_lock (&l->lock);
  info->blocks_written = l->blocks_written;
  info->flushes = l->flushes;
  pthread_mutex_unlock (&l->lock);
  if (info->nblocks && !l->replay_done)
    r = walk (pool, NULL, NULL, NULL, &info->live_blocks, &info->live_records,
              &end);
  return r;
}
