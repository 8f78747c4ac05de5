/* Cairn engine: internals of the txn layer (pool.c, super.c, spacemap.c,
 * txn.c).  Nothing outside the layer includes this.
 */
#ifndef CAIRN_TXN_INT_H
#define CAIRN_TXN_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "pool.h"

/* The superblock (one slot, 4 KiB, little-endian):
 *
 *   offset size field
 *   0      8    magic            "CAIRNSB1"
 *   8      4    version          POOL_FORMAT_VERSION
 *   12     4    block_size       4096
 *   16     8    compat           feature flags that may be ignored
 *   24     8    ro_compat        unknown ones: open read-only
 *   32     8    incompat         unknown ones: refuse to open
 *   40     16   uuid             pool UUID
 *   56     8    generation       the generation this slot describes
 *   64     4    node_size        metadata node size in bytes
 *   68     4    slot             index of this slot in the ring
 *   72     8    total_blocks     device size the pool uses, in blocks
 *   80     8    data_start       first allocatable block
 *   88     48   root.bp          block pointer of the root tree
 *   136    1    root.level       level of the root tree's root node
 *   137    7    reserved         zero
 *   144    48   spacemap         block pointer of the first space map base block
 *   192    8    spacemap_blocks  blocks in the space map base chain
 *   200    8    spacemap_ranges  free ranges it lists
 *   208    8    next_tree_id     next tree id to hand out
 *   216    8    reserve_blocks   blocks kept back for deletes and commits
 *   224    8    ctime            pool creation time (seconds since 1970)
 *   232    8    mtime            time of this commit (seconds since 1970)
 *   With FEATURE_INCOMPAT_SPACELOG (spacemap.c; zero without it):
 *   240    48   smlog            block pointer of the newest space map log
 *                                block (addr 0: the log is empty)
 *   288    8    smlog_blocks     blocks in the log
 *   296    8    smlog_records    records in the log
 *   304    8    smbase_gen       generation whose free set the base lists
 *   With FEATURE_INCOMPAT_INTENTLOG (txn-log.c; zero without it):
 *   312    8    log_start        first block of the intent log's ring
 *   320    8    log_blocks       blocks in the ring
 *   328    8    log_seq          sequence number of the first live log
 *                                block (at ring position log_seq %
 *                                log_blocks)
 *   336    8    log_gen          generation the live log extends: replay
 *                                skips records of it and older ones
 *   344    3720 reserved         zero
 *   4064   32   sha256           of bytes 0..4063
 */
#define SB_MAGIC "CAIRNSB1"
#define SB_SIZE 4096u
#define SB_CSUM_OFF 4064u

struct superblock {
  uint32_t version;
  uint64_t compat, ro_compat, incompat;
  uint8_t uuid[16];
  uint64_t generation;
  uint32_t node_size;
  uint32_t slot;
  uint64_t total_blocks, data_start;
  struct btree_root root;
  struct blkptr spacemap;
  uint64_t spacemap_blocks, spacemap_ranges;
  uint64_t next_tree_id;
  uint64_t reserve_blocks;
  uint64_t ctime, mtime;
  struct blkptr smlog;
  uint64_t smlog_blocks, smlog_records, smbase_gen;
  uint64_t log_start, log_blocks, log_seq, log_gen;
};

void sb_encode (const struct superblock *sb, uint8_t buf[SB_SIZE]);
/* Decode and check one slot; -EINVAL with a message saying what is wrong,
 * -ENODATA when the slot holds no superblock at all (no magic).
 */
int sb_decode (const uint8_t buf[SB_SIZE], uint64_t dev_size, unsigned slot,
               struct superblock *sb) CAIRN_WUR;
/* Read the ring and pick the newest valid slot. */
int sb_read_newest (struct cairn_dev *dev, const uint8_t *expect_uuid,
                    struct superblock *sb) CAIRN_WUR;
int sb_write (struct cairn_dev *dev, const struct superblock *sb) CAIRN_WUR;

/* The persistent space map: a compact base and a log of per-generation
 * records (spacemap.c has the design note and the layouts).
 */
struct spacemap {
  uint64_t *base;                 /* base blocks, in chain order */
  size_t nbase;
  uint64_t *log;                  /* log blocks, oldest first */
  size_t nlog, log_cap;
  uint64_t log_records;           /* records in the log */
  uint8_t *tail;                  /* image of the newest log block, or NULL */
  bool has_tail;                  /* tail holds it (the log is not empty) */
  bool legacy;                    /* a version-1 chain: convert at the next commit */
  uint64_t log_min;               /* condense bound floor in records (0: default) */
};
/* What one commit writes into the map. */
struct spacemap_write {
  bool condense;                  /* a new base (else log blocks) */
  uint64_t *blocks;               /* the blocks, allocated in the commit's generation */
  size_t n;
  uint8_t *images;                /* n * 4096 bytes */
  uint64_t nrec;                  /* ranges (base) or records (log) */
  struct blkptr head;
  const uint8_t *tail;            /* the old newest log block, rewritten
                                     with its records first; NULL: none */
};
/* Load the map of sb into sp (every block free before) and its block lists
 * into sm.  -EIO naming the block when it is damaged.
 */
int spacemap_load (struct cairn_dev *dev, struct space *sp,
                   const struct superblock *sb, struct spacemap *sm)
  CAIRN_WUR;
/* Write sp's free set (pending frees counted free) as a base of generation
 * gen, in blocks allocated from sp in its open generation gen; with old,
 * free that map's blocks (with birth durable_gen) once they are allocated.
 */
int spacemap_condense (struct space *sp, uint64_t gen,
                       const struct spacemap *old, uint64_t durable_gen,
                       struct spacemap_write *w) CAIRN_WUR;
/* The commit of gen, before the space freeze: append or condense, and
 * allocate the blocks in gen.
 */
int spacemap_prepare (struct spacemap *sm, struct space *sp,
                      uint64_t durable_gen, uint64_t gen,
                      struct spacemap_write *w) CAIRN_WUR;
/* After the freeze: encode the delta, update sb's space map fields. */
int spacemap_finish (struct spacemap_write *w, const struct space_delta *d,
                     struct superblock *sb) CAIRN_WUR;
int spacemap_write (struct cairn_dev *dev, const struct spacemap_write *w)
  CAIRN_WUR;
/* The commit is frozen: sm becomes the map its superblock points to, which
 * the next commit builds on; w keeps its blocks and images for the
 * writing.  -ENOMEM only.
 */
int spacemap_advance (struct spacemap *sm, const struct spacemap_write *w)
  CAIRN_WUR;
void spacemap_write_free (struct spacemap_write *w);
void spacemap_free (struct spacemap *sm);

/* The intent log (txn-log.c has the design note and the layouts). */
struct intentlog {
  pthread_mutex_t lock;           /* everything below but what io guards */
  pthread_mutex_t io;             /* one log writer at a time */
  bool want;                      /* pool_open_opts.intent_log */
  bool ready;                     /* records are appended (atomic) */
  uint64_t ready_gen;             /* ... since this generation: flushes log
                                     once it is durable (IL-8) */
  bool must_commit;               /* a record was lost: the next flush
                                     commits (IL-8) */
  bool replay_done;               /* the chain was replayed (or found
                                     empty): commits move the head on */
  bool replaying;                 /* commits wait: pool_commit returns 0 */
  uint64_t start, nblocks;        /* the ring, 0 blocks: none */
  uint64_t next_seq;              /* sequence number of the next block */
  uint64_t durable_seq;           /* the head the durable superblock names */
  uint8_t *pend;                  /* encoded records not in the log yet */
  size_t pend_len, pend_cap;
  uint64_t appended;              /* records appended so far */
  uint64_t logged;                /* ... of which durable (log or commit) */
  uint64_t blocks_written, flushes;  /* counters (pool_log_info) */
};
int pool_log_init (struct cairn_pool *pool, bool want) CAIRN_WUR;
void pool_log_free (struct cairn_pool *pool);
/* In the freeze (txn_lock exclusive): the head sb is to name. */
void pool_log_freeze (struct cairn_pool *pool, struct superblock *sb);
/* After sb is durable: the log before its head is obsolete. */
void pool_log_durable (struct cairn_pool *pool, const struct superblock *sb);
/* Wake the commit thread (or commit here when there is none). */
void txn_kick_commit (struct cairn_pool *pool);

/* An open tree in the pool's registry. */
struct pool_tree {
  uint64_t id;
  struct btree *tree;
};

struct cairn_pool {
  struct cairn_dev *dev;
  struct space *space;
  struct nodecache *cache;
  struct superblock sb;           /* newest durable */
  bool readonly;
  bool no_background;         /* pool_open_opts.no_background */
  uint64_t dirty_limit;
  uint64_t data_limit;            /* pool_open_opts.data_limit_bytes */
  uint64_t data_written;          /* txn_note_data since the last freeze
                                     (atomic) */

  /* Mutations hold txn_lock shared; a commit's freeze holds it exclusive. */
  pthread_rwlock_t txn_lock;
  uint64_t open_gen;              /* atomic */
  bool dirty;                     /* the open generation has changes (atomic) */
  bool failed;                    /* latched after a failed commit (atomic) */
  char failed_why[512];           /* the first failure's message: written
                                     before failed is set, then never */
  uint64_t next_tree_id;          /* changed inside txn_begin..txn_end */
  uint64_t need_incompat;         /* pool_need_feature, under the freeze */
  struct intentlog log;           /* txn-log.c */
  int64_t (*clock) (void *opaque);  /* pool_set_clock; NULL: time (NULL) */
  void *clock_opaque;

  /* The space map is loaded after pool_open returns (pool.c, "loading
   * the space map"): space_ensure waits for it.
   */
  pthread_mutex_t space_lock;
  pthread_cond_t space_cond;
  bool space_lazy;                /* read-only: not loaded yet */
  bool space_loading;             /* read-write: the loader thread runs */
  bool space_ready;               /* loaded, or failed (atomic) */
  bool space_thread;              /* space_loader is to be joined */
  pthread_t space_loader;
  uint64_t space_log_min;         /* pool_open_opts.spacemap_log_min */
  int space_err;                  /* the load failed: -errno */
  char space_msg[400];            /* and why */

  /* Group commit state, under commit_lock (txn.c, TX-7). */
  pthread_mutex_t commit_lock;
  pthread_cond_t commit_cond;
  bool freezing;                  /* a freeze runs */
  uint64_t durable_gen;
  uint64_t commits;
  struct lat_hist commit_time;    /* freeze to durable superblock, of each
                                   * commit that wrote one (commit_lock) */

  /* The superblock and space map of the newest frozen generation, which
   * the next freeze builds on: ahead of sb while a commit writes.  Changed
   * under txn_lock exclusive (the freeze), sm also under commit_lock
   * (pool_info reads it).
   */
  struct superblock frozen_sb;
  struct spacemap sm;

  /* Tree registry, under trees_lock. */
  pthread_mutex_t trees_lock;
  struct pool_tree *trees;
  size_t ntrees, trees_cap;
  struct btree *root;             /* the root tree, also in the registry */

  /* The layer above (pool_attach). */
  pthread_mutex_t attach_lock;
  void *attached;
  void (*attached_destroy) (void *);
  void (*attached_quiesce) (void *);
  pool_freeze_hook freeze_hook;

  /* The commit thread. */
  pthread_t committer;
  bool committer_running;         /* atomic: txn_end reads it unlocked */
  bool committer_stop;
  bool committer_kick;
  /* The timer's period (under committer_lock): the server's own when it
   * gave one (fixed), else the pool's setting (pool_set_commit_interval).
   */
  unsigned commit_interval_ms;
  bool commit_interval_fixed;
  pthread_mutex_t committer_lock;
  pthread_cond_t committer_cond;
};


/* Latch the pool failed (TX-4) for the reason msg, kept for every later
 * refusal and for pool_info; the first latch's reason stays.
 */
void pool_latch_failed (struct cairn_pool *pool, const char *msg);

#endif /* CAIRN_TXN_INT_H */
