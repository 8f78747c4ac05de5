/* Cairn engine: the persistent space map.
 *
 * Each commit writes the free ranges of its generation as a chain of 4 KiB
 * blocks, referenced from the superblock.  The ranges are taken while the
 * generation is frozen (pending frees of that generation count as free,
 * since they are free once it is durable); the chain itself goes into
 * blocks allocated afterwards, in the next generation, which therefore
 * appear free in the list: opening a pool loads the list and then marks
 * the chain's own blocks allocated.  The previous chain is freed in the
 * next commit with the birth of the generation that referenced it, so it
 * is not reused before that generation is superseded durably.
 *
 * Writing the whole list each commit costs one block per 250 free ranges;
 * a log of per-generation deltas with periodic condensing (ZFS space maps)
 * would cost less on a badly fragmented pool and is the planned successor
 * (a new incompat feature flag).
 *
 * Block layout (little-endian):
 *   0   4   magic   "CSPM"
 *   4   4   count   ranges in this block (at most SPACEMAP_PER_BLOCK)
 *   8   8   gen     generation whose free set the chain lists
 *   16  8   index   position of this block in the chain
 *   24  8   total   ranges in the whole chain
 *   32  48  next    block pointer to the next block (addr 0: last)
 *   80  16  reserved, zero
 *   96  16*count    ranges: u64 start block, u64 length in blocks,
 *                   ascending, not overlapping, not adjacent
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "txn-int.h"

#define SPACEMAP_MAGIC 0x4d505343u     /* "CSPM" */
#define SPACEMAP_HDR 96u
#define SPACEMAP_PER_BLOCK ((BLOCK_SIZE - SPACEMAP_HDR) / 16u)

/* Release a chain's block list. */
void
spacemap_chain_free (struct spacemap_chain *chain)
{
  free (chain->blocks);
  chain->blocks = NULL;
  chain->n = 0;
}

/* Report a damaged space map block. */
static int CAIRN_PRINTF (2, 3)
sm_corrupt (uint64_t block, const char *fmt, ...)
{
  char what[256];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (what, sizeof what, fmt, ap);
  va_end (ap);
  return cairn_fail (-EIO, "corrupt space map block %" PRIu64 ": %s", block, what);
}

/* Load the free ranges of sb's generation into sp. */
int
spacemap_load (struct cairn_dev *dev, struct space *sp,
               const struct superblock *sb, struct spacemap_chain *chain)
{
  uint8_t buf[BLOCK_SIZE], sha[SHA256_LEN];
  struct blkptr bp = sb->spacemap;
  uint64_t seen = 0, prev_end = 0;
  int r;

  chain->n = 0;
  chain->blocks = calloc (sb->spacemap_blocks ? sb->spacemap_blocks : 1,
                          sizeof *chain->blocks);
  if (chain->blocks == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the space map");
  r = space_load_alloc (sp, sb->data_start, sb->total_blocks - sb->data_start);
  if (r < 0)
    return r;

  for (uint64_t i = 0; bp.addr != 0; i++) {
    uint64_t blk = bp.addr / BLOCK_SIZE, count;

    if (i >= sb->spacemap_blocks)
      return sm_corrupt (blk, "chain longer than the %" PRIu64 " blocks the "
                         "superblock records", sb->spacemap_blocks);
    if (bp.addr % BLOCK_SIZE || blk < sb->data_start || blk >= sb->total_blocks)
      return sm_corrupt (blk, "pointer outside the data area");
    r = dev_pread (dev, buf, BLOCK_SIZE, bp.addr);
    if (r < 0)
      return r;
    sha256 (buf, BLOCK_SIZE, sha);
    if (memcmp (sha, bp.sha, SHA256_LEN) != 0)
      return sm_corrupt (blk, "checksum mismatch");
    count = get_le32 (buf + 4);
    if (get_le32 (buf) != SPACEMAP_MAGIC)
      return sm_corrupt (blk, "bad magic");
    if (count > SPACEMAP_PER_BLOCK)
      return sm_corrupt (blk, "%" PRIu64 " ranges cannot fit", count);
    if (get_le64 (buf + 8) != sb->generation || get_le64 (buf + 16) != i ||
        get_le64 (buf + 24) != sb->spacemap_ranges)
      return sm_corrupt (blk, "header does not match the superblock "
                         "(generation %" PRIu64 ", index %" PRIu64 ")",
                         get_le64 (buf + 8), get_le64 (buf + 16));
    for (uint64_t j = 0; j < count; j++) {
      uint64_t start = get_le64 (buf + SPACEMAP_HDR + 16 * j);
      uint64_t len = get_le64 (buf + SPACEMAP_HDR + 16 * j + 8);

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
    chain->blocks[chain->n++] = blk;
    blkptr_decode (buf + 32, &bp);
  }
  if (seen != sb->spacemap_ranges || chain->n != sb->spacemap_blocks)
    return cairn_fail (-EIO, "corrupt space map: %" PRIu64 " ranges in %zu "
                       "blocks where the superblock records %" PRIu64 " in %"
                       PRIu64, seen, chain->n, sb->spacemap_ranges,
                       sb->spacemap_blocks);
  /* The chain was written into blocks that its own list shows free. */
  for (size_t i = 0; i < chain->n; i++) {
    r = space_load_alloc (sp, chain->blocks[i], 1);
    if (r < 0)
      return sm_corrupt (chain->blocks[i], "the chain's own block is not free "
                         "in its list: %s", cairn_errmsg ());
  }
  return 0;
}

/* Encode ranges into a new chain of blocks allocated from sp. */
int
spacemap_build (struct space *sp, uint64_t gen, const struct space_range *ranges,
                size_t nranges, struct spacemap_chain *chain,
                uint8_t **imagesp, struct blkptr *head)
{
  size_t nblocks = nranges ? DIV_ROUND_UP (nranges, SPACEMAP_PER_BLOCK) : 1;
  uint8_t *img = calloc (nblocks, BLOCK_SIZE);
  struct blkptr next = { 0 };
  uint64_t hint = 0;
  int r;

  chain->blocks = calloc (nblocks, sizeof *chain->blocks);
  chain->n = 0;
  if (img == NULL || chain->blocks == NULL) {
    free (img);
    spacemap_chain_free (chain);
    return cairn_fail (-ENOMEM, "out of memory writing the space map");
  }
  for (size_t i = 0; i < nblocks; i++) {
    r = space_alloc (sp, 1, hint, SPACE_RESERVE, &chain->blocks[i]);
    if (r < 0) {
      for (size_t j = 0; j < i; j++)
        space_free (sp, chain->blocks[j], 1, space_open_gen (sp));
      free (img);
      spacemap_chain_free (chain);
      return cairn_fail (r, "no space left even in the reserve for the space "
                         "map: the pool is full");
    }
    hint = chain->blocks[i] + 1;
    chain->n++;
  }
  /* Encode back to front so each block can carry its successor's checksum. */
  for (size_t i = nblocks; i-- > 0;) {
    uint8_t *b = img + i * BLOCK_SIZE;
    size_t first = i * SPACEMAP_PER_BLOCK;
    size_t count = nranges > first ? MIN (nranges - first, SPACEMAP_PER_BLOCK) : 0;

    put_le32 (b, SPACEMAP_MAGIC);
    put_le32 (b + 4, (uint32_t) count);
    put_le64 (b + 8, gen);
    put_le64 (b + 16, i);
    put_le64 (b + 24, nranges);
    blkptr_encode (&next, b + 32);
    for (size_t j = 0; j < count; j++) {
      put_le64 (b + SPACEMAP_HDR + 16 * j, ranges[first + j].start);
      put_le64 (b + SPACEMAP_HDR + 16 * j + 8, ranges[first + j].len);
    }
    next.addr = chain->blocks[i] * BLOCK_SIZE;
    next.birth = gen;
    sha256 (b, BLOCK_SIZE, next.sha);
  }
  *head = next;
  *imagesp = img;
  return 0;
}
