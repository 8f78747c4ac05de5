/* Cairn engine: the superblock ring (layout in txn-int.h).
 *
 * SB_SLOTS slots at fixed offsets; generation G is written to slot
 * G % SB_SLOTS, so a commit never overwrites the slot holding the newest
 * durable generation.  Opening reads every slot and takes the newest one
 * that passes its checksum and every field check.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#include "txn-int.h"

/* Encode a superblock slot, checksum included. */
void
sb_encode (const struct superblock *sb, uint8_t buf[SB_SIZE])
{
  memset (buf, 0, SB_SIZE);
  memcpy (buf, SB_MAGIC, 8);
  put_le32 (buf + 8, sb->version);
  put_le32 (buf + 12, BLOCK_SIZE);
  put_le64 (buf + 16, sb->compat);
  put_le64 (buf + 24, sb->ro_compat);
  put_le64 (buf + 32, sb->incompat);
  memcpy (buf + 40, sb->uuid, 16);
  put_le64 (buf + 56, sb->generation);
  put_le32 (buf + 64, sb->node_size);
  put_le32 (buf + 68, sb->slot);
  put_le64 (buf + 72, sb->total_blocks);
  put_le64 (buf + 80, sb->data_start);
  blkptr_encode (&sb->root.bp, buf + 88);
  buf[136] = sb->root.level;
  blkptr_encode (&sb->spacemap, buf + 144);
  put_le64 (buf + 192, sb->spacemap_blocks);
  put_le64 (buf + 200, sb->spacemap_ranges);
  put_le64 (buf + 208, sb->next_tree_id);
  put_le64 (buf + 216, sb->reserve_blocks);
  put_le64 (buf + 224, sb->ctime);
  put_le64 (buf + 232, sb->mtime);
  blkptr_encode (&sb->smlog, buf + 240);
  put_le64 (buf + 288, sb->smlog_blocks);
  put_le64 (buf + 296, sb->smlog_records);
  put_le64 (buf + 304, sb->smbase_gen);
  put_le64 (buf + 312, sb->log_start);
  put_le64 (buf + 320, sb->log_blocks);
  put_le64 (buf + 328, sb->log_seq);
  put_le64 (buf + 336, sb->log_gen);
  sha256 (buf, SB_CSUM_OFF, buf + SB_CSUM_OFF);
}

/* Is every byte of a range zero? */
static bool
all_zero (const uint8_t *p, size_t len)
{
  for (size_t i = 0; i < len; i++)
    if (p[i])
      return false;
  return true;
}

/* Decode and check one slot. */
int
sb_decode (const uint8_t buf[SB_SIZE], uint64_t dev_size, unsigned slot,
           struct superblock *sb)
{
  uint8_t sha[SHA256_LEN];
  uint64_t unknown, reserved_from;
  bool spacelog, intentlog;

  if (memcmp (buf, SB_MAGIC, 8) != 0)
    return -ENODATA;
  sha256 (buf, SB_CSUM_OFF, sha);
  if (memcmp (sha, buf + SB_CSUM_OFF, SHA256_LEN) != 0)
    return cairn_fail (-EINVAL, "superblock slot %u: checksum mismatch", slot);
  memset (sb, 0, sizeof *sb);
  sb->version = get_le32 (buf + 8);
  if (sb->version != POOL_FORMAT_VERSION)
    return cairn_fail (-EINVAL, "superblock slot %u: format version %" PRIu32
                       " (this cairn reads version %u): use a newer cairn",
                       slot, sb->version, POOL_FORMAT_VERSION);
  if (get_le32 (buf + 12) != BLOCK_SIZE)
    return cairn_fail (-EINVAL, "superblock slot %u: block size %" PRIu32
                       " is not %u", slot, get_le32 (buf + 12), BLOCK_SIZE);
  sb->compat = get_le64 (buf + 16);
  sb->ro_compat = get_le64 (buf + 24);
  sb->incompat = get_le64 (buf + 32);
  unknown = sb->incompat & ~FEATURE_INCOMPAT_SUPPORTED;
  if (unknown)
    return cairn_fail (-EINVAL, "superblock slot %u: the pool uses incompatible "
                       "features this cairn does not know (flags 0x%" PRIx64
                       "): use a newer cairn", slot, unknown);
  if (!(sb->incompat & FEATURE_INCOMPAT_SHA256))
    return cairn_fail (-EINVAL, "superblock slot %u: no checksum algorithm "
                       "feature is set", slot);
  memcpy (sb->uuid, buf + 40, 16);
  sb->generation = get_le64 (buf + 56);
  sb->node_size = get_le32 (buf + 64);
  sb->slot = get_le32 (buf + 68);
  sb->total_blocks = get_le64 (buf + 72);
  sb->data_start = get_le64 (buf + 80);
  blkptr_decode (buf + 88, &sb->root.bp);
  sb->root.level = buf[136];
  blkptr_decode (buf + 144, &sb->spacemap);
  sb->spacemap_blocks = get_le64 (buf + 192);
  sb->spacemap_ranges = get_le64 (buf + 200);
  sb->next_tree_id = get_le64 (buf + 208);
  sb->reserve_blocks = get_le64 (buf + 216);
  sb->ctime = get_le64 (buf + 224);
  sb->mtime = get_le64 (buf + 232);
  spacelog = sb->incompat & FEATURE_INCOMPAT_SPACELOG;
  reserved_from = spacelog ? 312 : 240;
  if (spacelog) {
    blkptr_decode (buf + 240, &sb->smlog);
    sb->smlog_blocks = get_le64 (buf + 288);
    sb->smlog_records = get_le64 (buf + 296);
    sb->smbase_gen = get_le64 (buf + 304);
  }
  intentlog = sb->incompat & FEATURE_INCOMPAT_INTENTLOG;
  if (intentlog && !spacelog)
    return cairn_fail (-EINVAL, "superblock slot %u: an intent log needs the "
                       "space map log feature", slot);
  if (intentlog) {
    reserved_from = 344;
    sb->log_start = get_le64 (buf + 312);
    sb->log_blocks = get_le64 (buf + 320);
    sb->log_seq = get_le64 (buf + 328);
    sb->log_gen = get_le64 (buf + 336);
  }

  if (sb->slot != slot || sb->generation % SB_SLOTS != slot)
    return cairn_fail (-EINVAL, "superblock slot %u: holds slot %" PRIu32
                       " of generation %" PRIu64, slot, sb->slot, sb->generation);
  if (sb->node_size < NODE_SIZE_MIN || sb->node_size > NODE_SIZE_MAX ||
      (sb->node_size & (sb->node_size - 1)))
    return cairn_fail (-EINVAL, "superblock slot %u: bad node size %" PRIu32,
                       slot, sb->node_size);
  if (sb->total_blocks > dev_size / BLOCK_SIZE)
    return cairn_fail (-EINVAL, "superblock slot %u: the pool is %" PRIu64
                       " bytes but the device only %" PRIu64 ": was the device "
                       "truncated?", slot, sb->total_blocks * BLOCK_SIZE, dev_size);
  if (sb->data_start != POOL_DATA_START / BLOCK_SIZE ||
      sb->data_start >= sb->total_blocks)
    return cairn_fail (-EINVAL, "superblock slot %u: bad data start %" PRIu64,
                       slot, sb->data_start);
  /* A version-1 space map chain is born in the generation after the one
   * it describes; a base or log block in its own (spacemap.c).
   */
  if (sb->root.level >= 32 || (sb->root.bp.birth > sb->generation) ||
      (sb->spacemap.birth > sb->generation + !spacelog) ||
      sb->smlog.birth > sb->generation || sb->smbase_gen > sb->generation)
    return cairn_fail (-EINVAL, "superblock slot %u: root pointers are newer "
                       "than the superblock", slot);
  if (intentlog && (sb->log_blocks == 0 || sb->log_start < sb->data_start ||
                    sb->log_start >= sb->total_blocks ||
                    sb->log_blocks > sb->total_blocks - sb->log_start ||
                    sb->log_gen > sb->generation))
    return cairn_fail (-EINVAL, "superblock slot %u: the intent log's ring "
                       "[%" PRIu64 ", +%" PRIu64 ") or its generation %" PRIu64
                       " is out of range", slot, sb->log_start, sb->log_blocks,
                       sb->log_gen);
  if (sb->next_tree_id < TREE_ID_FIRST_USER || sb->reserve_blocks >= sb->total_blocks)
    return cairn_fail (-EINVAL, "superblock slot %u: bad tree id or reserve", slot);
  if (buf[137] || buf[138] || buf[139] || buf[140] || buf[141] || buf[142] ||
      buf[143] || !all_zero (buf + reserved_from, SB_CSUM_OFF - reserved_from))
    return cairn_fail (-EINVAL, "superblock slot %u: reserved bytes are not zero",
                       slot);
  return 0;
}

/* What slot_valid checks a slot's copy against. */
struct slot_check {
  uint64_t dev_size;
  unsigned slot;
};

/* Is a copy of a slot one that opening can take (dev_check_fn): one that
 * decodes, or one never written (all zeros, as mkpool leaves the slots
 * it has not used yet)?
 */
static bool
slot_valid (const void *buf, size_t len, void *opaque)
{
  const struct slot_check *sc = opaque;
  struct superblock sb;

  return len == SB_SIZE && (all_zero (buf, len) ||
                            sb_decode (buf, sc->dev_size, sc->slot, &sb) == 0);
}

/* Scrub every copy of every slot (pool.h). */
int
pool_scrub_superblocks (struct cairn_dev *dev, struct dev_scrub_stats *st)
{
  for (unsigned i = 0; i < SB_SLOTS; i++) {
    int r = dev_scrub (dev, SB_SIZE, SB_SLOT_OFFSET (i), slot_valid,
                       &(struct slot_check) { dev->size, i }, st);
    if (r < 0)
      return r;
  }
  return 0;
}

/* Read every slot and pick the newest valid one. */
int
sb_read_newest (struct cairn_dev *dev, const uint8_t *expect_uuid,
                struct superblock *best)
{
  uint8_t buf[SB_SIZE];
  char bad[SB_SLOTS][256];
  unsigned nvalid = 0, nmagic = 0;
  struct superblock sb;
  int r;

  if (dev->size < POOL_MIN_SIZE)
    return cairn_fail (-EINVAL, "%s is %" PRIu64 " bytes, too small to be a "
                       "Cairn pool", dev->name, dev->size);
  for (unsigned i = 0; i < SB_SLOTS; i++) {
    bad[i][0] = '\0';
    /* A damaged copy is healed from another copy that is valid (dev.h);
     * when none is, the first copy is what the slot is found to hold.
     */
    r = dev_pread_checked (dev, buf, SB_SIZE, SB_SLOT_OFFSET (i), true,
                           slot_valid, &(struct slot_check) { dev->size, i });
    if (r < 0 && r != -EBADMSG)
      return r;
    r = sb_decode (buf, dev->size, i, &sb);
    if (r == -ENODATA)
      continue;
    nmagic++;
    if (r < 0) {
      snprintf (bad[i], sizeof bad[i], "%s", cairn_errmsg ());
      continue;
    }
    if (nvalid > 0 && memcmp (sb.uuid, best->uuid, 16) != 0) {
      char a[37], b[37];
      uuid_format (sb.uuid, a);
      uuid_format (best->uuid, b);
      return cairn_fail (-EINVAL, "%s: superblock slots belong to two pools "
                         "(%s and %s): refusing to guess", dev->name, a, b);
    }
    if (nvalid == 0 || sb.generation > best->generation)
      *best = sb;
    nvalid++;
  }
  if (nmagic == 0)
    return cairn_fail (-EINVAL, "%s is not a Cairn pool (no superblock magic "
                       "found): create one with 'cairn mkpool'", dev->name);
  if (nvalid == 0) {
    char msg[1024] = "";
    for (unsigned i = 0; i < SB_SLOTS; i++)
      if (bad[i][0]) {
        strncat (msg, bad[i], sizeof msg - strlen (msg) - 3);
        strncat (msg, "; ", sizeof msg - strlen (msg) - 1);
      }
    return cairn_fail (-EIO, "%s: no valid superblock: %s", dev->name, msg);
  }
  if (expect_uuid && memcmp (expect_uuid, best->uuid, 16) != 0) {
    char a[37], b[37];
    uuid_format (best->uuid, a);
    uuid_format (expect_uuid, b);
    return cairn_fail (-EINVAL, "%s belongs to pool %s, not to pool %s",
                       dev->name, a, b);
  }
  return 0;
}

/* Write one superblock slot (the caller flushes around it). */
int
sb_write (struct cairn_dev *dev, const struct superblock *sb)
{
  uint8_t buf[SB_SIZE];

  sb_encode (sb, buf);
  return dev_pwrite (dev, buf, SB_SIZE, SB_SLOT_OFFSET (sb->slot));
}
