/* Cairn engine: the persistent space map, a compact base and a log.
 *
 * Design note.
 *
 * On disk (pool feature FEATURE_INCOMPAT_SPACELOG), the superblock of
 * generation G points to two chains of checksummed 4 KiB blocks:
 *
 *   base  the free ranges of generation B (smbase_gen, B <= G) as they are
 *         once B is durable (B's deferred frees count as free), written
 *         whole when the map is condensed;
 *   log   for every generation g in (B, G] that changed the space, g's net
 *         allocations and net frees (space_freeze's delta) as records, in
 *         generation order.  The superblock points to the newest log block
 *         and each block to the one before, so appending never overwrites
 *         a block (the newest one is copied, never changed in place).
 *
 * The free set of G is the base with the log's records applied oldest
 * first: loading reads these blocks only, never trees or data (and the
 * pool loads them only when free space is first needed: pool.c, "loading
 * the space map", since replaying a fragmented map dominated the open of
 * a send, a read or a restarted server).  This is
 * ZFS's space map with condensing rather than btrfs's free-space tree: the
 * engine already keeps the whole free set in memory (space.c), so the
 * persistent form only has to be cheap to append and to replay, and a log
 * costs a commit its own changes and nothing else, where a tree would
 * cost a copy-on-write path per changed range plus a tree to keep
 * balanced.
 *
 * A commit of generation G, under txn_lock exclusive after the trees are
 * frozen and before the space freeze (spacemap_prepare), either
 *   appends  allocates, in G itself, blocks for G's records -- the record
 *            of their own allocation included -- which spacemap_finish
 *            fills from G's delta after the freeze.  When the newest log
 *            block has room, it is rewritten into the first new block with
 *            G's records after its own, and its old place is freed in G
 *            (so small commits share blocks and the log stays short); or
 *   condenses (the log passed its bound, or the pool has the version-1
 *            chain): allocates the new base in G, frees the old base and
 *            log blocks in G (deferred: the durable generation still reads
 *            them), lists the free set with G's deferred frees as free and
 *            starts an empty log.  A pool too full for the new base (even
 *            from the reserve) appends instead, past the bound, until
 *            space comes back.
 * The version-1 chain went into blocks of G + 1, after the freeze, and
 * had to be marked allocated by hand on open; here the map's blocks belong
 * to the generation they describe, so the map describes itself.
 *
 * Invariants (tests cite them as SM-n):
 *  SM-1  Base + log of the superblock of G rebuild exactly the free set
 *        the engine had once G was durable: replay equals memory.
 *  SM-2  Every base and log block is allocated in the map that reaches
 *        it: it was allocated in G before G's delta was taken (append) or
 *        before G's free set was listed (condense).
 *  SM-3  A commit writes only blocks allocated in its own generation,
 *        which no durable generation references (TX-1); old base and log
 *        blocks are freed with deferral (TX-2), so a power cut at any
 *        instant finds the durable generation's map intact.
 *  SM-4  The records of one generation are disjoint (space.c invariants
 *        2 and 3), so their order within a generation does not matter;
 *        generations replay oldest first.
 *  SM-5  Nothing read is trusted: each block is checked against the
 *        pointer that reaches it (checksum, birth), its magic, sequence
 *        number, generation and base generation against the superblock,
 *        and each record must turn free blocks allocated or allocated
 *        blocks free.  A failure is -EIO naming the block.
 *  SM-6  The log is bounded: a commit condenses once the log holds
 *        max(log_min, SM_LOG_FACTOR x the free runs) records, that is
 *        twice the compact base (unless the pool has no room for the new
 *        base).  Blocks are nearly full (small commits share them), so
 *        the log's blocks are bounded too.  A commit costs its own
 *        records (plus, amortised, one compact rewrite per bound's worth
 *        of log); an open costs the base plus at most the bound.
 *
 * The state machine of the map, and the function behind each step:
 *
 *   loaded --spacemap_prepare (append)----> blocks reserved in G
 *          --spacemap_prepare (condense)--> base built, old map freed
 *   reserved --spacemap_finish--------------> images, superblock fields
 *   images --spacemap_write (I/O, before the superblock)--> written
 *   (at the freeze, after spacemap_finish: spacemap_advance makes the
 *    lists G's, so that G + 1 can freeze while G writes: txn.c, TX-7)
 *
 * Pools of the old format (no SPACELOG flag, a version-1 chain listing its
 * own blocks as free) open as before and are converted by their first
 * commit, which condenses and sets the flag; opened read-only they stay as
 * they are.
 *
 * Base block layout (the version-1 chain's, little-endian):
 *   0   4   magic   "CSPM"
 *   4   4   count   ranges in this block (at most SM_PER_BLOCK)
 *   8   8   gen     generation whose free set the base lists
 *   16  8   index   position of this block in the chain
 *   24  8   total   ranges in the whole chain
 *   32  48  next    block pointer to the next block (addr 0: last)
 *   80  16  reserved, zero
 *   96  16*count    ranges: u64 start block, u64 length in blocks,
 *                   ascending, not overlapping, not adjacent
 *
 * Log block layout (little-endian):
 *   0   4   magic   "CSML"
 *   4   4   count   records in this block (at most SM_PER_BLOCK)
 *   8   8   gen     newest generation whose changes the records are
 *   16  8   seq     position in the log, 0 = oldest
 *   24  8   base    generation of the base this log extends
 *   32  48  prev    block pointer to the block with seq - 1 (addr 0: none)
 *   80  16  reserved, zero
 *   96  16*count    records: u64 start block with bit 63 set for a free
 *                   (clear: an allocation), u64 length in blocks
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "txn-int.h"

#define SM_BASE_MAGIC 0x4d505343u       /* "CSPM" */
#define SM_LOG_MAGIC 0x4c4d5343u        /* "CSML" */
#define SM_HDR 96u
#define SM_PER_BLOCK ((BLOCK_SIZE - SM_HDR) / 16u)
#define SM_REC_FREE (1ull << 63)
#define SM_LOG_MIN_DEFAULT (64u * SM_PER_BLOCK)  /* records: SM-6's floor */
#define SM_LOG_FACTOR 2u

/* ---------------------------------------------------------------- common */

/* Release the block lists. */
void
spacemap_free (struct spacemap *sm)
{
  free (sm->base);
  free (sm->log);
  free (sm->tail);
  sm->base = sm->log = NULL;
  sm->tail = NULL;
  sm->has_tail = false;
  sm->nbase = sm->nlog = sm->log_cap = 0;
}

/* Release a commit's blocks and images (the blocks stay allocated). */
void
spacemap_write_free (struct spacemap_write *w)
{
  free (w->blocks);
  free (w->images);
  w->blocks = NULL;
  w->images = NULL;
  w->n = 0;
}

/* Report a damaged space map block. */
static int CAIRN_PRINTF (2, 3)
sm_corrupt (uint64_t block, const char *fmt, ...)
{
  char what[512];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (what, sizeof what, fmt, ap);
  va_end (ap);
  return cairn_fail (-EIO, "corrupt space map block %" PRIu64 ": %s", block,
                     what);
}

/* Blocks enough for c ranges or records when allocating the blocks
 * themselves may add one range per block (SM-2).
 */
static size_t
blocks_for (uint64_t c)
{
  return c == 0 ? 1 : DIV_ROUND_UP (c, SM_PER_BLOCK - 1);
}

/* Allocate n blocks in the open generation, contiguous if possible. */
static int
sm_alloc (struct space *sp, size_t n, uint64_t **blocksp)
{
  uint64_t *b = calloc (n, sizeof *b), start;
  size_t i;
  int r;

  if (b == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing the space map");
  /* Hint 0: first fit takes the start of a run, so a base's list grows by
   * at most one range per run allocated (coalesced with pending frees).
   */
  if (space_alloc (sp, n, 0, SPACE_RESERVE, &start) == 0) {
    for (i = 0; i < n; i++)
      b[i] = start + i;
    *blocksp = b;
    return 0;
  }
  for (i = 0; i < n; i++) {
    r = space_alloc (sp, 1, 0, SPACE_RESERVE, &b[i]);
    if (r < 0) {
      uint64_t gen = space_open_gen (sp);

      while (i-- > 0)
        space_free (sp, b[i], 1, gen);
      free (b);
      return cairn_fail (r, "no space left even in the reserve for the "
                         "space map: the pool is full");
    }
  }
  *blocksp = b;
  return 0;
}

/* Is the block pointer inside the data area and block aligned? */
static bool
bp_in_data (const struct superblock *sb, const struct blkptr *bp)
{
  uint64_t blk = bp->addr / BLOCK_SIZE;

  return bp->addr % BLOCK_SIZE == 0 && blk >= sb->data_start
         && blk < sb->total_blocks;
}

/* Read a block and check it against the pointer that reached it. */
static int
read_checked (struct cairn_dev *dev, const struct superblock *sb,
              const struct blkptr *bp, uint8_t buf[BLOCK_SIZE])
{
  uint64_t blk = bp->addr / BLOCK_SIZE;
  int r;

  if (!bp_in_data (sb, bp))
    return sm_corrupt (blk, "pointer outside the data area");
  /* The space map is read before anything can free its blocks (H2). */
  r = dev_pread_checked (dev, buf, BLOCK_SIZE, bp->addr, true,
                         dev_check_sha256, (void *) bp->sha);
  if (r == -EBADMSG)
    return sm_corrupt (blk, "checksum mismatch");
  return r;
}

/* ---------------------------------------------------------------- base */

/* Load the base's free ranges into sp (everything allocated before) and
 * record its blocks in sm.
 */
static int
load_base (struct cairn_dev *dev, struct space *sp,
           const struct superblock *sb, uint64_t base_gen,
           struct spacemap *sm)
{
  uint8_t buf[BLOCK_SIZE];
  struct blkptr bp = sb->spacemap;
  uint64_t seen = 0, prev_end = 0;
  int r;

  sm->base = calloc (sb->spacemap_blocks ? MIN (sb->spacemap_blocks,
                                                sb->total_blocks) : 1,
                     sizeof *sm->base);
  if (sm->base == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the space map");
  r = space_load_alloc (sp, sb->data_start, sb->total_blocks - sb->data_start);
  if (r < 0)
    return r;

  for (uint64_t i = 0; bp.addr != 0; i++) {
    uint64_t blk = bp.addr / BLOCK_SIZE, count;

    if (i >= sb->spacemap_blocks)
      return sm_corrupt (blk, "chain longer than the %" PRIu64 " blocks the "
                         "superblock records", sb->spacemap_blocks);
    r = read_checked (dev, sb, &bp, buf);
    if (r < 0)
      return r;
    count = get_le32 (buf + 4);
    if (get_le32 (buf) != SM_BASE_MAGIC)
      return sm_corrupt (blk, "bad magic");
    if (count > SM_PER_BLOCK)
      return sm_corrupt (blk, "%" PRIu64 " ranges cannot fit", count);
    if (get_le64 (buf + 8) != base_gen || get_le64 (buf + 16) != i ||
        get_le64 (buf + 24) != sb->spacemap_ranges)
      return sm_corrupt (blk, "header does not match the superblock "
                         "(generation %" PRIu64 ", index %" PRIu64 ")",
                         get_le64 (buf + 8), get_le64 (buf + 16));
    for (uint64_t j = 0; j < count; j++) {
      uint64_t start = get_le64 (buf + SM_HDR + 16 * j);
      uint64_t len = get_le64 (buf + SM_HDR + 16 * j + 8);

      if (len == 0 || start < prev_end + (seen > 0) ||
          start > sb->total_blocks || len > sb->total_blocks - start)
        return sm_corrupt (blk, "range %" PRIu64 " (%" PRIu64 "+%" PRIu64
                           ") is empty, out of order or out of bounds", j,
                           start, len);
      r = space_load_free (sp, start, len);
      if (r < 0)
        return sm_corrupt (blk, "range %" PRIu64 ": %s", j, cairn_errmsg ());
      prev_end = start + len;
      seen++;
    }
    sm->base[sm->nbase++] = blk;
    blkptr_decode (buf + 32, &bp);
  }
  if (seen != sb->spacemap_ranges || sm->nbase != sb->spacemap_blocks)
    return cairn_fail (-EIO, "corrupt space map: %" PRIu64 " ranges in %zu "
                       "blocks where the superblock records %" PRIu64 " in %"
                       PRIu64, seen, sm->nbase, sb->spacemap_ranges,
                       sb->spacemap_blocks);
  return 0;
}

/* space_foreach_free callback: count a range. */
static int
count_range (void *opaque, uint64_t start, uint64_t len)
{
  (void) start;
  (void) len;
  (*(uint64_t *) opaque)++;
  return 0;
}

/* Filling a base's images, front to back, during space_foreach_free. */
struct base_fill {
  uint8_t *img;
  size_t nblocks;
  uint64_t n;               /* ranges so far */
};

/* space_foreach_free callback: put one range into the images. */
static int
fill_range (void *opaque, uint64_t start, uint64_t len)
{
  struct base_fill *bf = opaque;
  size_t blk = bf->n / SM_PER_BLOCK, j = bf->n % SM_PER_BLOCK;
  uint8_t *b = bf->img + blk * BLOCK_SIZE;

  if (blk >= bf->nblocks)
    return -ERANGE;           /* more ranges than blocks_for promised */
  put_le64 (b + SM_HDR + 16 * j, start);
  put_le64 (b + SM_HDR + 16 * j + 8, len);
  put_le32 (b + 4, (uint32_t) j + 1);
  bf->n++;
  return 0;
}

/* Free the blocks of the map the durable superblock references, in the
 * open generation (deferred: SM-3).
 */
static void
free_old_map (const struct spacemap *sm, struct space *sp, uint64_t durable_gen)
{
  for (size_t i = 0; i < sm->nbase; i++)
    space_free (sp, sm->base[i], 1, durable_gen);
  for (size_t i = 0; i < sm->nlog; i++)
    space_free (sp, sm->log[i], 1, durable_gen);
}

/* Write the current free set (pending frees counted free) as a new base of
 * generation gen into blocks allocated in gen (SM-2).  With old, the blocks
 * of that map are freed first (once the new blocks are allocated, so that
 * running out of space changes nothing).
 */
int
spacemap_condense (struct space *sp, uint64_t gen, const struct spacemap *old,
                   uint64_t durable_gen, struct spacemap_write *w)
{
  struct base_fill bf = { 0 };
  struct blkptr next = { 0 };
  uint64_t count = 0;
  size_t n;
  int r;

  memset (w, 0, sizeof *w);
  w->condense = true;
  (void) space_foreach_free (sp, true, count_range, &count);
  if (old)
    count += old->nbase + old->nlog;  /* each adds at most one range */
  n = blocks_for (count);
  r = sm_alloc (sp, n, &w->blocks);
  if (r < 0)
    return r;
  w->n = n;
  if (old)
    free_old_map (old, sp, durable_gen);
  bf.img = w->images = calloc (n, BLOCK_SIZE);
  bf.nblocks = n;
  if (w->images == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory writing the space map");
    goto fail;
  }
  if (space_foreach_free (sp, true, fill_range, &bf) != 0) {
    r = cairn_fail (-EIO, "internal error: the free set has more ranges "
                    "than the %zu space map blocks allocated for it", n);
    goto fail;
  }
  /* Headers back to front, so each block carries its successor's
   * checksum.
   */
  for (size_t i = n; i-- > 0;) {
    uint8_t *b = w->images + i * BLOCK_SIZE;

    put_le32 (b, SM_BASE_MAGIC);
    put_le64 (b + 8, gen);
    put_le64 (b + 16, i);
    put_le64 (b + 24, bf.n);
    blkptr_encode (&next, b + 32);
    next.addr = w->blocks[i] * BLOCK_SIZE;
    next.birth = gen;
    sha256 (b, BLOCK_SIZE, next.sha);
  }
  w->head = next;
  w->nrec = bf.n;
  return 0;

 fail:
  for (size_t i = 0; i < n; i++)
    space_free (sp, w->blocks[i], 1, gen);
  spacemap_write_free (w);
  return r;
}

/* ---------------------------------------------------------------- log */

/* Read the log, newest block first, into one buffer (checking each block
 * against its pointer and the superblock, SM-5).
 */
static int
read_log (struct cairn_dev *dev, const struct superblock *sb,
          uint8_t **bufp, uint64_t **blocksp)
{
  uint64_t n = sb->smlog_blocks, gen_after = sb->generation, records = 0;
  size_t cap = MIN (n, 1024u);
  uint8_t *buf = malloc (cap * BLOCK_SIZE);
  uint64_t *blocks = malloc (cap * sizeof *blocks);
  struct blkptr bp = sb->smlog;
  int r = 0;

  if (buf == NULL || blocks == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory loading the space map log");
    goto out;
  }
  for (uint64_t i = 0; i < n; i++) {
    uint64_t seq = n - 1 - i, blk = bp.addr / BLOCK_SIZE, gen, count;
    uint8_t *b;

    if (bp.addr == 0) {
      r = cairn_fail (-EIO, "corrupt space map log: it ends after %" PRIu64
                      " blocks where the superblock records %" PRIu64, i, n);
      goto out;
    }
    if (i == cap) {
      size_t ncap = MIN (n, 2 * cap);
      uint8_t *nb = realloc (buf, ncap * BLOCK_SIZE);
      uint64_t *nk;

      if (nb != NULL)
        buf = nb;
      nk = nb ? realloc (blocks, ncap * sizeof *nk) : NULL;
      if (nk == NULL) {
        r = cairn_fail (-ENOMEM, "out of memory loading the space map log");
        goto out;
      }
      blocks = nk;
      cap = ncap;
    }
    b = buf + i * BLOCK_SIZE;
    r = read_checked (dev, sb, &bp, b);
    if (r < 0)
      goto out;
    gen = get_le64 (b + 8);
    count = get_le32 (b + 4);
    if (get_le32 (b) != SM_LOG_MAGIC)
      r = sm_corrupt (blk, "bad magic for a log block (seq %" PRIu64 ")", seq);
    else if (count > SM_PER_BLOCK)
      r = sm_corrupt (blk, "%" PRIu64 " log records cannot fit", count);
    else if (get_le64 (b + 16) != seq || get_le64 (b + 24) != sb->smbase_gen)
      r = sm_corrupt (blk, "log block header (seq %" PRIu64 ", base "
                      "generation %" PRIu64 ") does not match the superblock "
                      "(seq %" PRIu64 ", base generation %" PRIu64 ")",
                      get_le64 (b + 16), get_le64 (b + 24), seq,
                      sb->smbase_gen);
    else if (gen <= sb->smbase_gen || gen > gen_after || bp.birth != gen)
      r = sm_corrupt (blk, "log block of generation %" PRIu64 " (birth %"
                      PRIu64 ") out of order: it must lie in (%" PRIu64 ", %"
                      PRIu64 "]", gen, bp.birth, sb->smbase_gen, gen_after);
    if (r < 0)
      goto out;
    gen_after = gen;
    records += count;
    blocks[i] = blk;
    blkptr_decode (b + 32, &bp);
  }
  if (bp.addr != 0)
    r = cairn_fail (-EIO, "corrupt space map log: longer than the %" PRIu64
                    " blocks the superblock records", n);
  else if (records != sb->smlog_records)
    r = cairn_fail (-EIO, "corrupt space map log: %" PRIu64 " records where "
                    "the superblock records %" PRIu64, records,
                    sb->smlog_records);
 out:
  if (r < 0) {
    free (buf);
    free (blocks);
    return r;
  }
  *bufp = buf;
  *blocksp = blocks;
  return 0;
}

/* Apply one log block's records to sp (SM-4, SM-5). */
static int
replay_block (struct space *sp, const struct superblock *sb, uint64_t blk,
              const uint8_t *b)
{
  uint32_t count = get_le32 (b + 4);

  for (uint32_t j = 0; j < count; j++) {
    uint64_t raw = get_le64 (b + SM_HDR + 16 * j);
    uint64_t len = get_le64 (b + SM_HDR + 16 * j + 8);
    uint64_t start = raw & ~SM_REC_FREE;
    bool is_free = raw & SM_REC_FREE;
    int r;

    if (len == 0 || start < sb->data_start || start >= sb->total_blocks ||
        len > sb->total_blocks - start)
      return sm_corrupt (blk, "log record %" PRIu32 " (%s of %" PRIu64 "+%"
                         PRIu64 ") is empty or out of bounds", j,
                         is_free ? "free" : "allocation", start, len);
    r = is_free ? space_load_free (sp, start, len)
                : space_load_alloc (sp, start, len);
    if (r < 0)
      return sm_corrupt (blk, "log record %" PRIu32 " (of a generation up "
                         "to %" PRIu64 "): %s", j, get_le64 (b + 8),
                         cairn_errmsg ());
  }
  return 0;
}

/* Replay the log into sp, oldest block first; sm gets the log's blocks. */
static int
load_log (struct cairn_dev *dev, struct space *sp, const struct superblock *sb,
          struct spacemap *sm)
{
  uint64_t n = sb->smlog_blocks, *newest_first = NULL;
  uint8_t *buf = NULL;
  int r;

  if (n == 0) {
    if (sb->smlog.addr != 0 || sb->smlog_records != 0)
      return cairn_fail (-EIO, "corrupt superblock: an empty space map log "
                         "with a head pointer or records");
    return 0;
  }
  r = read_log (dev, sb, &buf, &newest_first);
  if (r < 0)
    return r;
  sm->log = malloc (n * sizeof *sm->log);
  if (sm->log == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory loading the space map log");
    goto out;
  }
  sm->log_cap = n;
  sm->tail = malloc (BLOCK_SIZE);
  if (sm->tail == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory loading the space map log");
    goto out;
  }
  memcpy (sm->tail, buf, BLOCK_SIZE);   /* the newest block */
  sm->has_tail = true;
  sm->log_records = sb->smlog_records;
  for (uint64_t i = n; i-- > 0;) {
    r = replay_block (sp, sb, newest_first[i], buf + i * BLOCK_SIZE);
    if (r < 0)
      goto out;
    sm->log[sm->nlog++] = newest_first[i];
  }
 out:
  free (buf);
  free (newest_first);
  return r;
}

/* Load the map of superblock sb into sp (SM-1); sm gets its blocks. */
int
spacemap_load (struct cairn_dev *dev, struct space *sp,
               const struct superblock *sb, struct spacemap *sm)
{
  bool legacy = !(sb->incompat & FEATURE_INCOMPAT_SPACELOG);
  int r;

  memset (sm, 0, sizeof *sm);
  sm->legacy = legacy;
  r = load_base (dev, sp, sb, legacy ? sb->generation : sb->smbase_gen, sm);
  if (r < 0)
    return r;
  if (legacy) {
    /* The version-1 chain was written into blocks its own list shows free. */
    for (size_t i = 0; i < sm->nbase; i++) {
      r = space_load_alloc (sp, sm->base[i], 1);
      if (r < 0)
        return sm_corrupt (sm->base[i], "the chain's own block is not free "
                           "in its list: %s", cairn_errmsg ());
    }
    return 0;
  }
  r = load_log (dev, sp, sb, sm);
  if (r < 0)
    return r;
  /* SM-2: the map's own blocks are allocated in the map. */
  for (size_t i = 0; i < sm->nbase + sm->nlog; i++) {
    uint64_t blk = i < sm->nbase ? sm->base[i] : sm->log[i - sm->nbase];

    if (!space_is_allocated (sp, blk, 1))
      return sm_corrupt (blk, "the space map's own %s block is free in the "
                         "map", i < sm->nbase ? "base" : "log");
  }
  return 0;
}

/* ---------------------------------------------------------------- commit */

/* Has the log reached its bound (SM-6)?  Records and ranges are the same
 * size, so the log is compared with the compact list of the free runs.
 */
static bool
log_full (const struct spacemap *sm, struct space *sp)
{
  uint64_t min = sm->log_min ? sm->log_min : SM_LOG_MIN_DEFAULT;
  struct space_stats st;

  space_stats (sp, &st);
  return sm->log_records >= MAX (min, SM_LOG_FACTOR * st.extents);
}

/* Make room for n more log blocks in sm, so that adopting cannot fail. */
static int
reserve_log (struct spacemap *sm, size_t n)
{
  uint64_t *nl;
  size_t cap;

  if (sm->nlog + n <= sm->log_cap)
    return 0;
  cap = MAX (2 * sm->log_cap, sm->nlog + n);
  nl = realloc (sm->log, cap * sizeof *nl);
  if (nl == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing the space map");
  sm->log = nl;
  sm->log_cap = cap;
  return 0;
}

/* Before the space freeze of gen: choose append or condense and allocate
 * the map's blocks in gen (SM-2).  durable_gen is the superblock's.
 */
int
spacemap_prepare (struct spacemap *sm, struct space *sp, uint64_t durable_gen,
                  uint64_t gen, struct spacemap_write *w)
{
  uint64_t c;
  int r;

  memset (w, 0, sizeof *w);
  if (sm->legacy || log_full (sm, sp)) {
    r = spacemap_condense (sp, gen, sm, durable_gen, w);
    /* A pool too full for a new base keeps appending: the log is only
     * longer than its bound until space comes back.
     */
    if (r != -ENOSPC || sm->legacy)
      return r;
    memset (w, 0, sizeof *w);
  }
  c = space_delta_ranges (sp);
  if (c == 0)
    return 0;                   /* nothing changed: no record */
  /* Small commits share a block: when the records of the newest block fit
   * with gen's in as many blocks as gen's alone, that block is rewritten
   * into a new place with gen's records after its own (its old place is
   * freed in gen like any block the durable generation uses, SM-3).
   */
  if (sm->has_tail) {
    uint64_t k = get_le32 (sm->tail + 4);

    if (blocks_for (k + c + 1) == blocks_for (c)) {
      w->tail = sm->tail;
      c = k + c + 1;
    }
  }
  w->n = blocks_for (c);
  r = reserve_log (sm, w->n);
  if (r == 0 && sm->tail == NULL && (sm->tail = malloc (BLOCK_SIZE)) == NULL)
    r = cairn_fail (-ENOMEM, "out of memory writing the space map");
  if (r == 0)
    r = sm_alloc (sp, w->n, &w->blocks);
  if (r == 0) {
    w->images = calloc (w->n, BLOCK_SIZE);
    if (w->images == NULL) {
      for (size_t i = 0; i < w->n; i++)
        space_free (sp, w->blocks[i], 1, gen);
      r = cairn_fail (-ENOMEM, "out of memory writing the space map");
    }
  }
  if (r < 0) {
    spacemap_write_free (w);
    return r;
  }
  if (w->tail)
    space_free (sp, sm->log[sm->nlog - 1], 1, durable_gen);
  return 0;
}

/* Put one record into the log images. */
static void
put_record (struct spacemap_write *w, uint64_t k, uint64_t start,
            uint64_t len, uint64_t flag)
{
  uint8_t *b = w->images + (k / SM_PER_BLOCK) * BLOCK_SIZE;
  size_t j = k % SM_PER_BLOCK;

  put_le64 (b + SM_HDR + 16 * j, start | flag);
  put_le64 (b + SM_HDR + 16 * j + 8, len);
  put_le32 (b + 4, (uint32_t) j + 1);
}

/* After the space freeze: encode gen's delta into the log blocks (when
 * appending) and fill in sb's space map fields.  sb holds the durable
 * superblock's fields on entry.
 */
int
spacemap_finish (struct spacemap_write *w, const struct space_delta *d,
                 struct superblock *sb)
{
  uint64_t nrec = d->nalloc + d->nfreed, k = 0, seq = sb->smlog_blocks;
  struct blkptr prev = sb->smlog;

  if (w->condense) {
    sb->incompat |= FEATURE_INCOMPAT_SPACELOG;
    sb->spacemap = w->head;
    sb->spacemap_blocks = w->n;
    sb->spacemap_ranges = w->nrec;
    sb->smbase_gen = d->gen;
    memset (&sb->smlog, 0, sizeof sb->smlog);
    sb->smlog_blocks = sb->smlog_records = 0;
    return 0;
  }
  if (w->tail) {
    /* The rewritten block keeps its place in the log and its records. */
    k = get_le32 (w->tail + 4);
    seq = get_le64 (w->tail + 16);
    blkptr_decode (w->tail + 32, &prev);
    memcpy (w->images + SM_HDR, w->tail + SM_HDR, 16 * k);
    put_le32 (w->images + 4, (uint32_t) k);
  }
  if (k + nrec > (uint64_t) w->n * SM_PER_BLOCK)
    return cairn_fail (-EIO, "internal error: generation %" PRIu64 " has %"
                       PRIu64 " space map records for %zu log blocks",
                       d->gen, k + nrec, w->n);
  for (size_t i = 0; i < d->nalloc; i++, k++)
    put_record (w, k, d->alloc[i].start, d->alloc[i].len, 0);
  for (size_t i = 0; i < d->nfreed; i++, k++)
    put_record (w, k, d->freed[i].start, d->freed[i].len, SM_REC_FREE);
  for (size_t i = 0; i < w->n; i++) {
    uint8_t *b = w->images + i * BLOCK_SIZE;

    put_le32 (b, SM_LOG_MAGIC);
    put_le64 (b + 8, d->gen);
    put_le64 (b + 16, seq + i);
    put_le64 (b + 24, sb->smbase_gen);
    blkptr_encode (&prev, b + 32);
    prev.addr = w->blocks[i] * BLOCK_SIZE;
    prev.birth = d->gen;
    sha256 (b, BLOCK_SIZE, prev.sha);
  }
  w->nrec = nrec;
  w->head = prev;
  sb->smlog = prev;
  sb->smlog_blocks = seq + w->n;
  sb->smlog_records += nrec;
  return 0;
}

/* Write the images (adjacent blocks in one write). */
int
spacemap_write (struct cairn_dev *dev, const struct spacemap_write *w)
{
  size_t i = 0;

  while (i < w->n) {
    size_t j = i + 1;
    int r;

    while (j < w->n && w->blocks[j] == w->blocks[j - 1] + 1)
      j++;
    r = dev_pwrite (dev, w->images + i * BLOCK_SIZE, (j - i) * BLOCK_SIZE,
                    w->blocks[i] * BLOCK_SIZE);
    if (r < 0)
      return r;
    i = j;
  }
  return 0;
}

/* The commit is frozen: the map now is what w writes. */
int
spacemap_advance (struct spacemap *sm, const struct spacemap_write *w)
{
  if (w->condense) {
    uint64_t *base = malloc (MAX (w->n, 1) * sizeof *base);

    if (base == NULL)
      return cairn_fail (-ENOMEM, "out of memory writing the space map");
    memcpy (base, w->blocks, w->n * sizeof *base);
    free (sm->base);
    sm->base = base;
    sm->nbase = w->n;
    sm->nlog = 0;
    sm->log_records = 0;
    sm->has_tail = false;
    sm->legacy = false;
  }
  else if (w->n > 0) {
    /* reserve_log made the room; prepare allocated the tail buffer. */
    if (w->tail)
      sm->nlog--;
    memcpy (sm->log + sm->nlog, w->blocks, w->n * sizeof *w->blocks);
    sm->nlog += w->n;
    sm->log_records += w->nrec;
    memcpy (sm->tail, w->images + (w->n - 1) * BLOCK_SIZE, BLOCK_SIZE);
    sm->has_tail = true;
  }
  return 0;
}
