/* Cairn engine, layer "volume" (private header): what volume.c and
 * volume-read.c share: the handle of an open volume or pinned state, its
 * counters, and the mapping and read helpers the write path also uses.
 */
#ifndef CAIRN_VOLUME_INT_H
#define CAIRN_VOLUME_INT_H

#include "catalog-int.h"

/* A handle's sequential readers (volume-read.c, "Reading ahead"). */
#define RA_STREAMS 4
struct ra_stream {
  uint64_t next;              /* where the stream's next read should start */
  uint64_t ahead;             /* blocks before this were asked for; 0: not
                               * reading ahead */
  uint64_t window;            /* blocks asked for ahead of next */
  uint64_t used;              /* when a read last continued it */
};
struct readahead {
  bool lock;                  /* a spin lock, held for a few comparisons:
                               * zero is unlocked, so the handle's calloc
                               * makes it and nothing destroys it */
  uint32_t active;            /* streams reading ahead (read unlocked) */
  uint64_t clock;
  struct ra_stream s[RA_STREAMS];
};

struct cairn_volume {
  struct catalog *cat;
  struct volstate *vs;
  struct btree *tree;
  bool own_tree;              /* a pinned state's private handle */
  bool readonly;
  uint64_t gen;               /* pinned state: its generation */
  uint64_t size;              /* pinned state: its size */
  struct vol_info info;
  SHARDED (struct vol_stats) stats[COUNTER_SHARDS]; /* COUNT, vol_stats */
  SHARDED (struct vol_latency) lat[COUNTER_SHARDS]; /* vol_stats_time */
  struct readahead ra;        /* zeroed at open */
};

#define COUNT(v, field, amount) \
  __atomic_add_fetch (&(v)->stats[counter_shard ()].c.field, (amount), \
                      __ATOMIC_RELAXED)

/* Copy the mapping of blocks [lbn, lbn + n) under the tree's read lock
 * (digests as map_range_locked, or into shas when not NULL).
 */
int map_range (struct cairn_volume *v, uint64_t lbn, uint64_t n,
               struct map_vec *mv, uint8_t *shas) CAIRN_WUR;
/* Read whole blocks [lbn, lbn + n) into buf, checking every block. */
int read_blocks (struct cairn_volume *v, uint64_t lbn, uint64_t n,
                 uint8_t *buf) CAIRN_WUR;
/* Check a request against the volume's size. */
int check_range (struct cairn_volume *v, uint32_t count,
                 uint64_t off) CAIRN_WUR;

#endif /* CAIRN_VOLUME_INT_H */
