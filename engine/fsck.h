/* Cairn engine, layer "fsck": the offline check of a pool.
 *
 * Opens the pool read-only at its newest durable generation, walks every
 * tree validating every node (checksums, levels, key order and key
 * ranges, births), then audits space: every allocated block must be
 * reachable exactly once and nothing reachable may be free.
 *
 * Memory: two bitmaps of one bit per pool block (32 MiB per TiB of pool)
 * plus the node cache; never proportional to the amount of metadata.
 */
#ifndef CAIRN_FSCK_H
#define CAIRN_FSCK_H

#include <stdint.h>

#include "dev.h"
#include "util.h"

struct fsck_report {
  uint64_t generation;
  uint64_t trees, nodes, items;
  uint64_t blocks_total, blocks_reachable, blocks_free;
  uint64_t blocks_leaked;         /* allocated, not reachable */
  uint64_t blocks_free_but_used;  /* reachable, marked free */
  uint64_t spacemap_base_blocks;  /* the space map's compact base */
  uint64_t spacemap_log_blocks;   /* its log (0 after a condense) */
  uint64_t intentlog_blocks;      /* the intent log's ring (0: none) */
  uint64_t intentlog_live_blocks; /* log blocks a crash left, and ... */
  uint64_t intentlog_records;     /* ... their records, which the next
                                     read-write open replays (txn-log.c) */
  uint64_t errors;                /* problems found (0: clean) */
  struct dev_scrub_stats scrub;   /* with fsck_opts.scrub */
};

struct fsck_opts {
  uint64_t cache_bytes;           /* 0: 64 MiB */
  /* Each problem found, as one line naming the block and the check. */
  void (*problem) (void *opaque, const char *msg);
  /* Progress: nodes checked so far, out of an estimate. */
  void (*progress) (void *opaque, uint64_t done, uint64_t estimate);
  void *opaque;
  /* Also read every copy of every superblock slot, node and data block
   * that the check reaches, and rewrite damaged copies from good ones
   * (dev_scrub; a copy with no good one left is a problem).  Only a pool
   * of several devices has more than one copy; repairs need the device
   * opened writable.
   */
  bool scrub;
};

/* Check the pool on dev.  Returns 0 when the check ran (report->errors
 * says whether the pool is clean), or a negative errno when it could not
 * run at all; a pool that cannot even be opened counts as one error with
 * the reason passed to problem().
 */
int fsck_pool (struct cairn_dev *dev, const struct fsck_opts *opts,
               struct fsck_report *report) CAIRN_WUR;

#endif /* CAIRN_FSCK_H */
