/* Cairn engine, layer "txn": pools, generations and commits.
 *
 * A pool is one device holding a ring of superblocks, a space map and a
 * root tree that names every other tree.  All changes land in the open
 * generation in memory; a commit makes them durable at once, atomically
 * (design note at the top of txn.c).
 *
 * Mutations are bracketed by txn_begin / txn_end, which hold the commit
 * out only while a tree is being changed; a commit holds mutations out only
 * while it freezes the open generation, and does its I/O while the next
 * generation fills.
 */
#ifndef CAIRN_POOL_H
#define CAIRN_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "btree.h"
#include "dev.h"
#include "latency.h"
#include "space.h"
#include "util.h"

struct cairn_pool;

/* On-disk format constants. */
#define POOL_FORMAT_VERSION 1u
#define SB_SLOTS 4u
#define SB_SLOT_OFFSET(i) ((uint64_t) (64 + 64 * (i)) * 1024)  /* 64K, 128K, ... */
#define POOL_DATA_START (1024 * 1024)                          /* first data byte */
#define POOL_MIN_SIZE (8ull * 1024 * 1024)

/* Feature flags.  A pool with an unknown incompat flag is not opened; with
 * an unknown ro_compat flag it is opened read-only; compat flags can be
 * ignored.
 */
#define FEATURE_INCOMPAT_SHA256 (1ull << 0)     /* checksums are SHA-256 */
#define FEATURE_INCOMPAT_SPACELOG (1ull << 1)   /* space map: base + log */
#define FEATURE_INCOMPAT_VOLHELD (1ull << 2)    /* volume records keep held */
#define FEATURE_INCOMPAT_CKPT (1ull << 3)       /* pins a checkpoint keeps
                                                   (an older reader would
                                                   take them for reasonless
                                                   pins) */
#define FEATURE_INCOMPAT_MULTIDEV (1ull << 4)   /* the pool's addresses are
                                                   a chunked device's over
                                                   several devices
                                                   (dev-chunk.c) */
#define FEATURE_INCOMPAT_INTENTLOG (1ull << 5)  /* the pool has an intent
                                                   log, which may hold
                                                   flushed writes that only
                                                   replaying it brings back
                                                   (txn-log.c) */
#define FEATURE_INCOMPAT_SUPPORTED \
  (FEATURE_INCOMPAT_SHA256 | FEATURE_INCOMPAT_SPACELOG | \
   FEATURE_INCOMPAT_VOLHELD | FEATURE_INCOMPAT_CKPT | \
   FEATURE_INCOMPAT_MULTIDEV | FEATURE_INCOMPAT_INTENTLOG)
#define FEATURE_RO_COMPAT_SUPPORTED 0ull
#define FEATURE_COMPAT_CKPT_NEW (1ull << 0)     /* made to take checkpoints:
                                                   the pool's default
                                                   "checkpoints" is on until
                                                   set (checkpoint.c) */
#define FEATURE_COMPAT_SUPPORTED FEATURE_COMPAT_CKPT_NEW

/* Tree ids.  The root tree is the catalog of everything else. */
#define TREE_ID_ROOT 1ull
#define TREE_ID_FIRST_USER 256ull

struct pool_format_opts {
  uint32_t node_size;             /* 0: NODE_SIZE_DEFAULT */
  const uint8_t *uuid;            /* NULL: a random one */
  bool checkpoints;               /* volumes take checkpoints unless told
                                     otherwise (FEATURE_COMPAT_CKPT_NEW) */
};

struct pool_open_opts {
  uint64_t cache_bytes;           /* 0: 128 MiB */
  uint64_t dirty_limit_bytes;     /* commit when dirty nodes pass it; 0: cache/4 */
  uint64_t data_limit_bytes;      /* wake the commit thread once this much
                                     data was written in the open
                                     generation; 0: POOL_DATA_LIMIT */
  bool readonly;
  const uint8_t *expect_uuid;     /* refuse a device of another pool */
  bool no_background;             /* start no background work (reclaiming
                                     deleted volumes): tests step it */
  uint64_t spacemap_log_min;      /* condense the space map log once it has
                                     at least this many records (and twice
                                     as many as free runs); 0: 16,000 */  bool check_every_read;          /* check every data block read against its
                                     digest, even a checked copy that the
                                     host's page cache still holds (dev.h,
                                     "Blocks whose copy..."); false: only
                                     what comes from the disk, unless
                                     readonly (other readers share the
                                     file then) */
  bool intent_log;                /* make flushes log writes instead of
                                     committing (txn-log.c); a pool whose
                                     log holds records replays them either
                                     way */
};

/* Write a new, empty pool on dev (every superblock slot is overwritten).
 * On a chunked device (dev_chunk_format) the pool takes the UUID of the
 * devices' labels and FEATURE_INCOMPAT_MULTIDEV.
 */
int pool_format (struct cairn_dev *dev, const struct pool_format_opts *opts,
                 uint8_t uuid_out[16]) CAIRN_WUR;

/* Open the pool on dev at its newest durable generation.  The device stays
 * the caller's; close the pool before it.
 */
int pool_open (struct cairn_dev *dev, const struct pool_open_opts *opts,
               struct cairn_pool **poolp) CAIRN_WUR;

/* Scrub every copy of every superblock slot of the pool on dev
 * (dev_scrub): a copy that is neither valid nor never written is rewritten
 * from one that is.  Offline, or from fsck.
 */
int pool_scrub_superblocks (struct cairn_dev *dev, struct dev_scrub_stats *st)
  CAIRN_WUR;

/* Commit what is pending (unless read-only or failed) and free the pool.
 * Returns the commit's error, if any; the pool is freed either way.
 */
int pool_close (struct cairn_pool *pool);

/* Make every change made before the call durable (group commit: callers
 * that arrive during a commit share the next one).  -EIO once the pool has
 * failed.
 */
int pool_commit (struct cairn_pool *pool) CAIRN_WUR;

/* Start / stop the commit thread: commits every interval_ms (0: the
 * pool's commit-interval setting, POOL_COMMIT_INTERVAL_MS unless set), as
 * soon as dirty metadata passes the limit, and once the open generation
 * holds data_limit_bytes of written data.  Without it, txn_end commits
 * inline when the metadata limit is passed.
 */
int pool_start_committer (struct cairn_pool *pool, unsigned interval_ms)
  CAIRN_WUR;
void pool_stop_committer (struct cairn_pool *pool);
#define POOL_COMMIT_INTERVAL_MS 5000u
/* The pool's commit-interval setting (the catalog calls it when it loads
 * the setting and when it changes): the timer's period from its next
 * round on, unless the server gave pool_start_committer one of its own.
 */
void pool_set_commit_interval (struct cairn_pool *pool, unsigned ms);
/* The period the timer uses now (ms), and whether it is the server's own. */
unsigned pool_commit_interval (struct cairn_pool *pool, bool *fixed);

/* The default data_limit_bytes.  What overwrites free comes back only when
 * their generation is durable, so the data written between two commits is
 * space a rewrite cannot reuse yet (volume.c, data_hint), page cache the
 * next flush must write out, and work for that flush.  A commit per this
 * much data keeps all three bounded under fast writes, as ZFS starts a txg
 * sync on dirty data as well as on time.  64 MiB: measured against 256 and
 * 32 MiB (same VM, 4 GiB volume, bench's write workloads), 64 wrote 1 MiB
 * sequential first writes 35% faster than 256 (747-799 against 525-600
 * MiB/s: more of them land in space the last commit freed, whose pages
 * the cache still holds), rewrites after a snapshot 75% faster, 4 KiB
 * random writes 5-25% faster; 32 was slower than 64 at all three.
 * Random writes commit on their dirty metadata long before this.
 */
#define POOL_DATA_LIMIT (64ull << 20)

/* Count bytes of data written into new blocks in the open generation
 * (inside txn_begin); txn_end wakes the commit thread past the limit.
 */
void txn_note_data (struct cairn_pool *pool, uint64_t bytes);

/* Bracket a mutation of any tree of the pool: -EROFS on a read-only pool,
 * -EIO on a failed one (then txn_end must not be called).  Never nested,
 * and never waiting inside for a thread that is about to call txn_begin:
 * once a commit waits to freeze, new mutations wait behind it (TX-6 in
 * txn.c), so either would deadlock.
 */
int txn_begin (struct cairn_pool *pool) CAIRN_WUR;
void txn_end (struct cairn_pool *pool);

/* Trees.  The pool owns tree handles: pool_tree_open returns the same
 * handle for an id until the pool closes.  pool_tree_create must be called
 * inside txn_begin / txn_end.
 */
int pool_tree_create (struct cairn_pool *pool, uint64_t *idp,
                      struct btree **treep) CAIRN_WUR;
/* The same, starting from an existing root (a clone shares its nodes). */
int pool_tree_create_from (struct cairn_pool *pool,
                           const struct btree_root *root, uint64_t *idp,
                           struct btree **treep) CAIRN_WUR;
/* Forget a tree: its root item goes and its handle is closed.  The caller
 * has freed (or handed on) its blocks.  Inside txn_begin / txn_end or a
 * freeze hook.
 */
int pool_tree_remove (struct cairn_pool *pool, uint64_t id) CAIRN_WUR;
int pool_tree_open (struct cairn_pool *pool, uint64_t id, struct btree **treep)
  CAIRN_WUR;
/* Exchange the contents of two open trees, which must have no unfrozen
 * change: in a freeze hook (the catalog publishes a received state so).
 * The handles stay with their ids; their roots and root items swap.
 */
int pool_tree_swap (struct cairn_pool *pool, uint64_t a, uint64_t b)
  CAIRN_WUR;

/* The layer above (the catalog) hangs its state on the pool and is called
 * in every commit's freeze, with mutations held out: after the trees that
 * changed are frozen (their roots are final for the generation) and before
 * the root tree is, so it may read frozen roots and change any tree.
 * Blocks it frees that were born in the freezing generation must be freed
 * with an older birth: they are being written by this very commit.  A
 * negative return fails the commit and latches the pool failed (TX-4): the
 * hook's way to keep a change it could not finish off the disk.
 */
typedef int (*pool_freeze_hook) (struct cairn_pool *pool, void *opaque,
                                 uint64_t gen);
/* quiesce (may be NULL) is called first thing in pool_close, so that the
 * layer above stops its threads before the last commit; destroy last.
 */
void pool_attach (struct cairn_pool *pool, void *obj, void (*destroy) (void *),
                  pool_freeze_hook hook, void (*quiesce) (void *));
void *pool_attached (struct cairn_pool *pool);
/* May the layers above run background work: opened read-write, not
 * failed, and not told otherwise (pool_open_opts.no_background)?
 */
bool pool_background_allowed (struct cairn_pool *pool);
/* Has the pool every compat feature flag of bits? */
bool pool_has_compat (struct cairn_pool *pool, uint64_t bits);
/* The pool's clock, in seconds since 1970: what checkpoints record and
 * retention measures against.  Tests set a fake one (before any commit
 * that should use it); NULL brings back the real one, time (2).
 */
void pool_set_clock (struct cairn_pool *pool, int64_t (*clock) (void *opaque),
                     void *opaque);
int64_t pool_now (struct cairn_pool *pool);
/* Serialises pool_attach callers (lazy creation of the attached object). */
void pool_attach_lock (struct cairn_pool *pool);
void pool_attach_unlock (struct cairn_pool *pool);
/* Mark the open generation changed, so that the next pool_commit runs a
 * commit (and its freeze hook) even if no tree changed.  Inside
 * txn_begin / txn_end, or outside when the change is the freeze hook's
 * own (it then lands in whichever commit comes next).
 */
void txn_mark_dirty (struct cairn_pool *pool);
uint64_t pool_open_gen (struct cairn_pool *pool);
/* The commit being frozen writes a structure that needs incompat feature
 * flags bits: its superblock gets them.  Only from a freeze hook.
 */
void pool_need_feature (struct cairn_pool *pool, uint64_t bits);
/* Read the space map now if the pool has not yet (a pool reads it on
 * first use, pool.c); -EIO with the reason when it is damaged, after which
 * the pool counts as failed.  pool_info, pool_space and pool_spacemap load
 * it too but cannot say why it failed.
 */
int pool_space_load (struct cairn_pool *pool) CAIRN_WUR;
/* Start loading the space map in a thread now, so that the first change
 * need not wait for all of it (a server, once it may start threads).
 */
void pool_preload_space (struct cairn_pool *pool);
/* Was the pool opened read-only (asked, or a feature this version cannot
 * write)?
 */
bool pool_is_readonly (struct cairn_pool *pool);

struct pool_info {
  uint8_t uuid[16];
  uint64_t generation;            /* newest durable */
  uint64_t open_generation;
  uint32_t node_size;
  uint64_t total_blocks, data_start_block;
  uint64_t commits;
  struct lat_hist commit_time;    /* how long commits took (latency.h) */
  bool readonly, failed;
  char failed_why[512];           /* why failed, or "" */
  uint64_t spacemap_blocks;       /* allocated blocks holding the space map */
  struct space_stats space;
  struct nodecache_stats cache;
  bool check_every_read;          /* the device trusts no cached copy */
  uint64_t blocks_trusted;        /* cached checked copies not checked again */
  uint64_t bytes_read_ahead;      /* asked of the disk ahead of sequential
                                   * readers (volume-read.c) */
};
void pool_info (struct cairn_pool *pool, struct pool_info *info);
/* The pool's UUID (cheaper than pool_info: no space map is read). */
void pool_uuid (struct cairn_pool *pool, uint8_t uuid[16]);
struct nodecache *pool_cache (struct cairn_pool *pool);
struct space *pool_space (struct cairn_pool *pool);
struct cairn_dev *pool_dev (struct cairn_pool *pool);

/* For checking tools (fsck): the root tree, and the blocks of the space
 * map (base and log) that the newest durable superblock references.
 */
struct btree *pool_root_tree (struct cairn_pool *pool);
struct pool_spacemap_info {
  const uint64_t *base, *log;     /* block numbers (valid until a commit) */
  size_t nbase, nlog;
  uint64_t log_records;           /* records in the log */
  bool legacy;                    /* the version-1 chain, not converted yet */
};
void pool_spacemap (struct cairn_pool *pool, struct pool_spacemap_info *info);

/* The intent log (txn-log.c).
 *
 * A record is one write or one punch (trim, zero) of a volume tree, as
 * the volume layer made it in the open generation: the tree, the range of
 * logical blocks, and for a write the data's address and the SHA-256 of
 * every block.
 */
#define POOL_LOG_WRITE 1u
#define POOL_LOG_PUNCH 2u
struct pool_log_rec {
  unsigned type;                  /* POOL_LOG_WRITE or POOL_LOG_PUNCH */
  uint64_t tree;                  /* the volume tree's id */
  uint64_t lbn, n;                /* logical blocks [lbn, lbn + n) */
  uint64_t addr;                  /* WRITE: the data's first block */
  const uint8_t *shas;            /* WRITE: n digests */
};
/* Does the pool log flushed writes now (so the volume layer must append
 * its records)?
 */
bool pool_log_active (struct cairn_pool *pool);
/* Append a record made in the open generation (inside txn_begin, under
 * the tree's lock, so that records of one block are in the order their
 * changes were made); nothing when the pool logs nothing.  Without memory
 * for it, the next flush commits instead.
 */
void pool_log_append (struct cairn_pool *pool, const struct pool_log_rec *rec);
/* Make every change acknowledged before the call durable: the records
 * appended so far go to the log, then one device flush; a full commit
 * instead when the pool logs nothing, has no room left in its ring or
 * has no ring yet (the first such flush makes one).  -EIO once failed.
 */
int pool_log_flush (struct cairn_pool *pool) CAIRN_WUR;
/* Replay the live log (the caller holds every other writer out): each
 * record whose data is on the disk as it names it, in order, is claimed
 * in the space map and handed to apply, which re-makes the change in the
 * open generation; the first record that does not verify ends the replay
 * (its write was never acknowledged as flushed).  *applied counts the
 * records applied.  The caller commits next.  A read-only pool replays
 * nothing.
 */
int pool_log_replay (struct cairn_pool *pool,
                     int (*apply) (void *opaque, const struct pool_log_rec *rec),
                     void *opaque, uint64_t *applied) CAIRN_WUR;
struct pool_log_info {
  uint64_t start, nblocks;        /* the ring (0 blocks: the pool has none) */
  uint64_t live_blocks;           /* before replay (read-only opens, fsck):
                                     valid blocks from the durable head on */
  uint64_t live_records;          /* ... and their records that a
                                     read-write open would replay */
  uint64_t blocks_written;        /* log blocks written since the open */
  uint64_t flushes;               /* flushes the log served since the open */
};
/* What the log holds on the disk now (reads the live blocks). */
int pool_log_info (struct cairn_pool *pool, struct pool_log_info *info)
  CAIRN_WUR;

/* The root tree's items.  Keys are a type byte and a big-endian id. */
#define ROOTKEY_TREE 1u           /* a tree's root: value is a tree item */
#define ROOTKEY_LEN 9u
#define TREE_ITEM_LEN (BLKPTR_SIZE + 8)
void rootkey_tree (uint64_t id, uint8_t key[ROOTKEY_LEN]);
/* A tree item: the root pointer, the root's level, 7 reserved zero bytes. */
void tree_item_encode (const struct btree_root *root, uint8_t *p);
int tree_item_decode (const uint8_t *p, size_t len, struct btree_root *root)
  CAIRN_WUR;

#endif /* CAIRN_POOL_H */
