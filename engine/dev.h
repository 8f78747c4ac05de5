/* Cairn engine, layer "dev": block devices under a pool.
 *
 * A device is a byte-addressed store with positional reads and writes and a
 * durability barrier (flush).  Backends: a file or block device, memory, and
 * stackable test devices that sit on another device: a fault device (fail
 * chosen operations) and a power-cut device (keep unflushed writes apart and
 * lose any subset of them at a cut).  Upper layers see only this header.
 *
 * All offsets and lengths handed to a device by the engine are multiples of
 * 512 bytes; the devices themselves accept any.  Every function returns 0 or
 * a negative errno and sets the engine error message (util.h).
 */
#ifndef CAIRN_DEV_H
#define CAIRN_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct cairn_dev;

/* The most blocks one resident call (below) is asked about. */
#define DEV_RESIDENT_MAX 256u

struct cairn_dev_ops {
  const char *kind;    /* "file", "mem", "fault", "powercut" */
  int (*pread) (struct cairn_dev *dev, void *buf, size_t len, uint64_t off);
  int (*pwrite) (struct cairn_dev *dev, const void *buf, size_t len,
                 uint64_t off);
  /* Make every completed write durable. */
  int (*flush) (struct cairn_dev *dev);
  /* Tell the device that a range holds no data (may do nothing). */
  int (*discard) (struct cairn_dev *dev, uint64_t off, uint64_t len);
  void (*close) (struct cairn_dev *dev);
  /* Optional (NULL: the device cannot tell).  Read the longest prefix of
   * [off, off + len) that the host's page cache holds, without I/O, into
   * buf; its length to *gotp (0 when none).
   */
  int (*pread_cached) (struct cairn_dev *dev, void *buf, size_t len,
                       uint64_t off, size_t *gotp);
  /* Optional, with pread_cached: how the calling thread's cached reads
   * are watched for reads from the disk ("perf", "getrusage").
   */
  const char *(*cache_watch) (struct cairn_dev *dev);
  /* Optional: bring nothing into the host's cache but what is read. */
  void (*no_readahead) (struct cairn_dev *dev);
  /* Optional: let the host's cache drop the clean pages of
   * [off, off + len); advice, so it cannot fail.
   */
  void (*drop_cached) (struct cairn_dev *dev, uint64_t off, uint64_t len);
  /* Optional, both or neither: which DEV_TRUST_BLOCKs of [off, off + len)
   * (at most DEV_RESIDENT_MAX of them, aligned) the host's cache holds,
   * one byte each into vec, 1 when held; and ask the host's cache to read
   * a range in without waiting for it (advice, so it cannot fail).  Only
   * dev_prefetch calls them.
   */
  int (*resident) (struct cairn_dev *dev, uint64_t off, uint64_t len,
                   unsigned char *vec);
  void (*prefetch) (struct cairn_dev *dev, uint64_t off, uint64_t len);
  /* Optional, all or none: a device that keeps several copies of what is
   * written to it (dev-chunk.c).  How many copies each range has; read or
   * write only copy k of [off, off + len) (-ENXIO: that copy is on a
   * missing device); and count a copy that its reader found damaged.
   * Only dev_pread_checked calls them.
   */
  unsigned (*copies) (struct cairn_dev *dev);
  int (*pread_copy) (struct cairn_dev *dev, void *buf, size_t len,
                     uint64_t off, unsigned k);
  int (*pwrite_copy) (struct cairn_dev *dev, const void *buf, size_t len,
                      uint64_t off, unsigned k);
  void (*note_damage) (struct cairn_dev *dev, uint64_t off, uint64_t len,
                       unsigned k, bool repaired);
};

struct dev_trust;

/* What a device counts (dev_counts). */
struct dev_counts {
  uint64_t bytes_read, bytes_written, flushes;
  uint64_t blocks_trusted;    /* read from the cache and not checked again */
  uint64_t bytes_prefetched;  /* asked for by dev_prefetch */
};

/* The common head of every device; backends embed it first. */
struct cairn_dev {
  const struct cairn_dev_ops *ops;
  uint64_t size;              /* bytes */
  char name[256];             /* path or description, for messages */
  /* Counters, added to by the dev_* wrappers below (DEV_COUNT), per CPU
   * (util.h): dev_counts sums them.
   */
  SHARDED (struct dev_counts) counts[COUNTER_SHARDS];
  struct dev_trust *trust;    /* dev_trust_enable; NULL: check every read */
};

#define DEV_COUNT(dev, field, n) \
  __atomic_add_fetch (&(dev)->counts[counter_shard ()].c.field, \
                      (uint64_t) (n), __ATOMIC_RELAXED)

/* The device's counters. */
void dev_counts (const struct cairn_dev *dev, struct dev_counts *out);

/* Wrappers that check bounds, count and call the backend.  A read or
 * write past dev->size fails with -EINVAL.  Short reads and writes are
 * retried inside the backend; the wrappers see all or an error.
 */
int dev_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
  CAIRN_WUR;
int dev_pwrite (struct cairn_dev *dev, const void *buf, size_t len,
                uint64_t off) CAIRN_WUR;
/* dev_pwrite of data whose digests the caller computed from buf itself:
 * shas holds one SHA-256 for each DEV_TRUST_BLOCK of the range (off and
 * len aligned to it), and the written blocks are trusted while cached
 * (T3).  Never pass digests that came with the data: those are checked at
 * the first read.
 */
int dev_pwrite_hashed (struct cairn_dev *dev, const void *buf, size_t len,
                       uint64_t off, const uint8_t *shas) CAIRN_WUR;
int dev_flush (struct cairn_dev *dev) CAIRN_WUR;
int dev_discard (struct cairn_dev *dev, uint64_t off, uint64_t len) CAIRN_WUR;
/* Close the device (and, for stacked devices, not the lower one). */
void dev_close (struct cairn_dev *dev);
/* Let the host's cache drop the clean pages of [off, off + len), where the
 * device has such a cache (advice: a range outside the device, or a device
 * without a cache, does nothing).  A block read after that comes from the
 * disk and is checked (T1).
 */
void dev_drop_cached (struct cairn_dev *dev, uint64_t off, uint64_t len);

/* Reading with a check, and healing from other copies (dev.c).
 *
 * Every place that checks what it reads against a digest (metadata nodes,
 * space map blocks, superblocks, data blocks) reads through
 * dev_pread_checked with its check.  On a device with one copy that is a
 * read and the check.  On a device with several (dev-chunk.c) it reads
 * copy 0, 1, ... until one passes, hands that one to the caller, and
 * rewrites with it every copy that failed the check or the read (unless
 * the device is read-only), counting each on the member device that holds
 * it (CKSUM, READ; a failed rewrite counts WRITE).
 *
 *  H1. A copy is rewritten only with data that passed the caller's check,
 *      so a repair never spreads damage.
 *  H2. The caller must hold what keeps the range referenced for the whole
 *      call (a tree's lock, the volume's mapping under its lock, the pool
 *      not yet open for writes): a range freed and written again meanwhile
 *      would be overwritten with its old contents.  Callers that cannot
 *      (the volume read path reads outside its tree lock) call it with
 *      repair false first and heal under their lock once they know the
 *      damage is real.
 *
 * The check returns true when buf holds what the caller expects.  The call
 * returns 0 with a good copy in buf, -EBADMSG (message set by the caller's
 * own words later; cairn_errmsg names the range) when no copy passes, or
 * the read's error when no copy could be read at all.
 */
typedef bool (*dev_check_fn) (const void *buf, size_t len, void *opaque);
/* The check of a range whose SHA-256 is known: opaque is the digest. */
bool dev_check_sha256 (const void *buf, size_t len, void *sha);
int dev_pread_checked (struct cairn_dev *dev, void *buf, size_t len,
                       uint64_t off, bool repair, dev_check_fn check,
                       void *opaque) CAIRN_WUR;
/* How many copies the device keeps of what is written to it (1 for every
 * device but a pool of several devices).
 */
unsigned dev_copies (struct cairn_dev *dev);
/* What dev_scrub found, added up over the ranges it was given. */
struct dev_scrub_stats {
  uint64_t ranges;            /* ranges scrubbed */
  uint64_t bad_copies;        /* copies that failed the check or the read */
  uint64_t repaired;          /* of those, rewritten from a good copy */
  uint64_t lost;              /* ranges with no good copy at all */
};
/* Read every copy of [off, off + len) (at most DEV_SCRUB_MAX bytes), check
 * each, and rewrite those that fail with one that passes (unless the
 * device is read-only), counting as dev_pread_checked does.  The caller
 * holds what keeps the range referenced (H2).  0, or -ENOMEM; what was
 * found goes to st.
 */
#define DEV_SCRUB_MAX (64u * 1024)
int dev_scrub (struct cairn_dev *dev, size_t len, uint64_t off,
               dev_check_fn check, void *opaque, struct dev_scrub_stats *st)
  CAIRN_WUR;
/* dev_scrub, rewriting the bad copies only with DEV_SCRUB_REPAIR, and with
 * DEV_SCRUB_QUIET counting nothing (neither in st nor on the members);
 * which copies failed the check or the read goes to *failedp (bit k: copy
 * k; failedp may be NULL).  A caller that cannot hold what keeps the range
 * referenced for the whole call (H2) checks quietly first, and once it
 * knows of a failure checks again, counting, and repairs under its lock.
 */
#define DEV_SCRUB_REPAIR 1u
#define DEV_SCRUB_QUIET 2u
int dev_scrub_copies (struct cairn_dev *dev, size_t len, uint64_t off,
                      dev_check_fn check, void *opaque, unsigned flags,
                      struct dev_scrub_stats *st, uint32_t *failedp)
  CAIRN_WUR;
/* Rewrite the copies of [off, off + len) named in failed (bit k: copy k)
 * with the first other copy that passes the check (H1), counting each
 * rewrite as REPAIRED on its member; how many were rewritten to
 * *repairedp.  -EBADMSG when no other copy passes.  The caller holds what
 * keeps the range referenced (H2).
 */
int dev_repair_copies (struct cairn_dev *dev, size_t len, uint64_t off,
                       dev_check_fn check, void *opaque, uint32_t failed,
                       unsigned *repairedp) CAIRN_WUR;

/* Blocks whose copy in the host's cache has been checked (dev.c).
 *
 * A pool checks a data block against its SHA-256 when the block comes from
 * the disk; a copy that the host's page cache holds and that was checked,
 * or written from a buffer the engine hashed, is not checked again while
 * it stays there.  That is what btrfs and ZFS do (btrfs checks at the end
 * of a read bio, ZFS when a block enters the ARC); a file or block device
 * under Cairn has the host's page cache for its ARC.  The device keeps a
 * bounded table of such blocks, each entry bound to the block's address
 * and its digest:
 *
 *  T1. A read may skip the check of a block only if the block came from
 *      dev_pread_cached (the copy was in the cache and the call read
 *      nothing from the disk: dev-iowatch.c says how it knows) and, after
 *      that read, the table holds the block with the digest the reader
 *      expects.
 *  T2. Every write and discard through the device marks the blocks it
 *      covers busy before it starts (dev_pwrite, dev_discard), so a block
 *      reused between a reader's mapping and its read is never trusted for
 *      the reader's old digest: the reader checks, fails, and maps again.
 *      The mark counts the writes under way in the entry, and the entry
 *      stays busy until the last of them ends: two blocks share an entry,
 *      and the end of a write to one must not let a reader trust the
 *      other while it is being written.  Nothing but the end of a write
 *      takes a busy mark away (a claim, T5, leaves it).
 *  T3. An entry is added (dev_trust_note) only after a check or a write
 *      from hashed data, and only if the entry is what it was before that
 *      read or write began (compare-and-swap), so a late reader cannot put
 *      back what a write since then replaced.  A write that ends without
 *      digests of its own (metadata, data that came with its digests, a
 *      discard) leaves a number never used before in the entry, as a
 *      claim does: the first read checks the block and may then note it,
 *      and a reader that looked before that write cannot.
 *  T4. The device reads ahead nothing of its own (no_readahead): a page
 *      enters the cache only as the engine reads or writes it, or through
 *      dev_prefetch, which claims (T5) the entry of every block it asks
 *      for before it asks, so a block that left the cache comes back
 *      through a read that checks it.  (This takes the host at its word
 *      that it reads what it is asked for and no more: Linux's
 *      POSIX_FADV_WILLNEED reads the missing pages of the range, one
 *      folio of the mapping's smallest order at a time, and no others.)
 *  T5. A read that the cache could not serve claims the entries of the
 *      blocks it reads from the disk (dev_trust_claim) before it reads
 *      them, so that another thread's cached read of a page that this
 *      read brings in is checked, not trusted, until this read has checked
 *      it.  (The cached read that found the page missing has already asked
 *      the kernel for it: a thread that finds that page in the cache in
 *      the moment before the claim trusts it.  That takes two threads
 *      reading the same block that has left the cache, the first
 *      descheduled between its cached read and its claim for longer than
 *      the disk takes to read, and a block that rotted since it was last
 *      checked.)
 *
 * What the table cannot see is a page brought back by another process
 * reading the pool file, or changed by one writing it: the pool file is
 * locked against other Cairn processes, not against those.  (A pool
 * opened read-only shares its lock with other read-only Cairn processes,
 * so pool_open trusts nothing then.)
 *
 * Memory is the table's (8 bytes an entry), never the pool's size: two
 * blocks whose addresses share an entry evict each other, and the loser is
 * checked again.  Devices that cannot tell a cached read (memory, the test
 * devices) do not trust: every read is checked.
 */
#define DEV_TRUST_BLOCK 4096u
#define DEV_TRUST_ENTRIES (1u << 21)   /* 16 MiB, 8 GiB of cached blocks */
/* Start trusting checked copies, with a table of at most `entries` (a
 * power of two; fewer for a smaller device).  -EOPNOTSUPP when the device
 * cannot tell a cached read.  Not while I/O is in flight.
 */
int dev_trust_enable (struct cairn_dev *dev, size_t entries) CAIRN_WUR;
void dev_trust_disable (struct cairn_dev *dev);
static inline bool
dev_trusting (const struct cairn_dev *dev)
{
  return dev->trust != NULL;
}
/* Read what the cache holds of [off, off + len) into buf, without I/O:
 * the length read to *gotp, 0 when the device cannot tell (T1).
 */
int dev_pread_cached (struct cairn_dev *dev, void *buf, size_t len,
                      uint64_t off, size_t *gotp) CAIRN_WUR;
/* How the calling thread's cached reads are known not to have read from
 * the disk (dev-iowatch.c): "perf" or "getrusage"; NULL for a device
 * without cached reads.
 */
const char *dev_cache_watch (struct cairn_dev *dev);
/* The entry for block blk (in DEV_TRUST_BLOCK units) as it is now: what
 * dev_trust_note compares against (T3).
 */
uint64_t dev_trust_peek (struct cairn_dev *dev, uint64_t blk);
/* Claim block blk's entry before reading it from the disk: the value to
 * hand dev_trust_note once the block is checked (T5); a busy entry stays
 * so, and the note then adds nothing.
 */
uint64_t dev_trust_claim (struct cairn_dev *dev, uint64_t blk);
/* Read [off, off + len) (whole DEV_TRUST_BLOCKs) into the host's cache
 * ahead of the reads that will want it, without waiting: the blocks the
 * cache does not hold have their entries claimed (T4, T5), then the
 * device is asked for them.  The bytes asked for: 0 when the cache held
 * all of it, or the device cannot read ahead, or does not trust.
 */
uint64_t dev_prefetch (struct cairn_dev *dev, uint64_t off, uint64_t len);
/* Whether the table holds block blk with digest sha (T1). */
bool dev_trust_holds (struct cairn_dev *dev, uint64_t blk,
                      const uint8_t sha[32]);
/* Add block blk, checked with digest sha, if its entry is still `seen`
 * (from dev_trust_peek or dev_trust_claim) and no write held it (T3).
 */
void dev_trust_note (struct cairn_dev *dev, uint64_t blk,
                     const uint8_t sha[32], uint64_t seen);
/* The two halves of what a write through the device does to the table
 * (T2, T3), for a write made around it: mark the blocks that
 * [off, off + len) touches busy, and end that mark, trusting the blocks
 * with shas (as dev_pwrite_hashed) or, NULL, leaving them to be checked.
 * dev_pwrite and dev_discard call them; so do the tests.
 */
void dev_trust_begin_write (struct cairn_dev *dev, uint64_t off, uint64_t len);
void dev_trust_end_write (struct cairn_dev *dev, uint64_t off, uint64_t len,
                          const uint8_t *shas);

/* File or block device backend.
 *
 * flags: DEV_CREATE creates a regular file of create_size bytes (sparse;
 * fails with -EEXIST if it exists), DEV_RDONLY opens read-only,
 * DEV_WATCH_RUSAGE watches cached reads with getrusage even where a perf
 * ring could (dev-iowatch.c; for tests of that watch).  The file is
 * opened O_CLOEXEC and locked with flock (LOCK_EX, or LOCK_SH when read-only,
 * non-blocking): flock and not fcntl because the lock must survive nbdkit's
 * fork.  When another process holds the lock the open fails with -EBUSY and
 * a message naming the holder's pid when /proc/locks shows it.  Block
 * devices are sized with BLKGETSIZE64.
 */
#define DEV_CREATE  1u
#define DEV_RDONLY  2u
#define DEV_WATCH_RUSAGE 4u
int dev_file_open (const char *path, unsigned flags, uint64_t create_size,
                   struct cairn_dev **devp) CAIRN_WUR;

/* RBD image backend (dev-rbd.c, notes at its top).
 *
 * A name "rbd:POOL/IMAGE[:conf=PATH][:id=ID][:keyring=PATH]" is an image
 * of a Ceph pool, reached through librbd with that configuration file,
 * client id and keyring (Ceph's own defaults, CEPH_CONF among them, for
 * those not given).  Flags as dev_file_open: DEV_CREATE creates the image
 * (-EEXIST if it exists), DEV_RDONLY opens it read-only.  Opened for
 * writing, the device holds the image's exclusive lock; another holder
 * makes the open fail with -EBUSY and a message naming it.  Without
 * librbd at build time every open fails with -ENOTSUP saying so.
 */
#define DEV_RBD_PREFIX "rbd:"
/* The image metadata key where the lock's holder says who it is. */
#define DEV_RBD_OWNER_KEY "cairn.owner"
bool dev_is_rbd_name (const char *name);
/* Remove the image an "rbd:" name names (what undoes DEV_CREATE). */
int dev_rbd_remove (const char *name) CAIRN_WUR;
int dev_rbd_open (const char *name, unsigned flags, uint64_t create_size,
                  struct cairn_dev **devp) CAIRN_WUR;
/* name with the Ceph options that are not NULL appended (an "rbd:" name;
 * any other is copied as it is): a new string, NULL when out of memory.
 */
char *dev_rbd_name_opts (const char *name, const char *conf, const char *id,
                         const char *keyring);
/* Open a device by name: dev_rbd_open for an "rbd:" name, dev_file_open
 * for any other.
 */
int dev_open (const char *name, unsigned flags, uint64_t create_size,
              struct cairn_dev **devp) CAIRN_WUR;

/* Give a file device's whole size real space in its host filesystem.
 *
 * A pool file made sparse gets its space from the host filesystem only as
 * it is first written: a write can then fail for lack of host space (when
 * the data reaches the disk, at a flush), and a first write to a place in
 * the file costs the host filesystem an allocation that an overwrite does
 * not (about twice the time to write back, measured on ext4).  A
 * copy-on-write pool writes new places all the time until every block has
 * been used once.
 *
 * DEV_PREALLOC_SPACE reserves the space (fallocate): no write can fail for
 * lack of host space any more.  DEV_PREALLOC_FULL also writes zeros over
 * it, so that the host filesystem holds written blocks and every later
 * write is an overwrite, as on a block device; this writes the whole size
 * once and calls progress (when not NULL) as it goes.  A block device has
 * its space already: nothing is done.  The device must be open read-write
 * and hold nothing yet (the zeros overwrite everything).
 */
enum dev_prealloc {
  DEV_PREALLOC_OFF,
  DEV_PREALLOC_SPACE,
  DEV_PREALLOC_FULL,
};
/* The mode a word names ("off", "space", "full"): 0, or -EINVAL. */
int dev_prealloc_parse (const char *word, enum dev_prealloc *mode) CAIRN_WUR;
/* What a mode did to a file, for messages: "space reserved", "space
 * written", or NULL for DEV_PREALLOC_OFF.
 */
const char *dev_prealloc_done (enum dev_prealloc mode);
typedef void (*dev_progress_fn) (void *opaque, uint64_t done, uint64_t total);
int dev_file_preallocate (struct cairn_dev *dev, enum dev_prealloc mode,
                          dev_progress_fn progress, void *opaque) CAIRN_WUR;

/* Memory backend of size bytes, zero-filled.  Contents go with close. */
int dev_mem_create (uint64_t size, struct cairn_dev **devp) CAIRN_WUR;

/* Fault device stacked on lower (which the caller keeps and closes).
 *
 * dev_fault_set arms a fault: the nth next operation of kind op (counting
 * from 1 from the moment it is armed) fails with err; with `sticky` every
 * later operation of that kind fails too.  err is a negative errno (a
 * positive one is negated, 0 means -EIO); nth 0 disarms that kind.  A
 * failing operation does not reach lower; discards are never failed.
 * dev_fault_clear disarms all.
 */
enum dev_fault_op { DEV_FAULT_READ, DEV_FAULT_WRITE, DEV_FAULT_FLUSH };
int dev_fault_create (struct cairn_dev *lower, struct cairn_dev **devp)
  CAIRN_WUR;
void dev_fault_set (struct cairn_dev *dev, enum dev_fault_op op,
                    uint64_t nth, bool sticky, int err);
void dev_fault_clear (struct cairn_dev *dev);
/* Hold every operation of kind op until released (a slow disk), and how
 * many are waiting so.
 */
void dev_fault_hold (struct cairn_dev *dev, enum dev_fault_op op, bool hold);
unsigned dev_fault_waiting (struct cairn_dev *dev, enum dev_fault_op op);
/* Make every operation of kind op sleep us microseconds first (0: not). */
void dev_fault_delay (struct cairn_dev *dev, enum dev_fault_op op, unsigned us);
/* Bit-flip mode: flip bit `bit` (0-7) of the byte at off in what the
 * lower device stores, as a disk's silent rot would (the next read of that
 * block returns it flipped, until a write replaces it); and the number of
 * bits flipped so far.  Under a pool of several devices, flip in a member
 * (dev_chunk_locate says where a copy lies).
 */
int dev_fault_flip (struct cairn_dev *dev, uint64_t off, unsigned bit)
  CAIRN_WUR;
uint64_t dev_fault_flips (struct cairn_dev *dev);

/* Power-cut device stacked on lower (which the caller keeps and closes).
 *
 * Writes are kept in memory, not applied to lower, until a flush: reads see
 * them; a flush applies them all in order to lower and flushes lower.  At a
 * cut, a random subset of the pending writes (chosen with the seed) is
 * applied in order to lower, optionally one of them torn (only a random
 * 512-byte-aligned prefix applied), the rest are lost, and from then on
 * every operation on the power-cut device fails with -EIO.  Discards are
 * kept pending like writes (they read back as zeros until then) and reach
 * lower's discard when applied.  The same seed and the same operations give
 * the same cut.
 *
 * dev_powercut_arm(dev, n) makes the cut happen by itself just before the
 * nth next write or flush (that operation and everything after fail): this
 * is how tests place cut points inside a workload, including between a
 * commit's superblock write and its flush.  An armed cut may tear a write.
 * 0 disarms.
 */
int dev_powercut_create (struct cairn_dev *lower, uint64_t seed,
                         struct cairn_dev **devp) CAIRN_WUR;
void dev_powercut_arm (struct cairn_dev *dev, uint64_t nth_op);
/* Cut now; allow_tear lets one applied write be torn. */
void dev_powercut_cut (struct cairn_dev *dev, bool allow_tear);
bool dev_powercut_is_cut (struct cairn_dev *dev);
/* Number of writes acknowledged so far, not counting the ones that failed
 * because of the cut (to size cut-point ranges in tests).
 */
uint64_t dev_powercut_writes (struct cairn_dev *dev);
/* Number of writes and flushes seen so far (what dev_powercut_arm counts). */
uint64_t dev_powercut_ops (struct cairn_dev *dev);

/* A power-cut device on lower that shares peer's power supply (peer is a
 * power-cut device): the members of a pool of several devices under one
 * power.  The op count, arming, the seed's generator, the policy and the
 * cut are the supply's: a cut armed or asked on any member cuts them all
 * at one moment, each member losing its own pending writes as above.  At
 * most 8 devices share a supply.
 */
int dev_powercut_create_shared (struct cairn_dev *lower,
                                struct cairn_dev *peer,
                                struct cairn_dev **devp) CAIRN_WUR;
/* Which pending entries (writes and discards since the last completed
 * flush) reach lower at a cut: each with p = 1/2 (the default); each with
 * a p drawn for the cut from 0 to 1; none; all; all but one; just one; the
 * first k in order, k drawn from 0 to all (a dm-log-writes replay up to an
 * entry).  Chosen at random with the seed, as is k or the one.
 */
enum dev_powercut_keep {
  DEV_POWERCUT_KEEP_HALF,
  DEV_POWERCUT_KEEP_RANDOM,
  DEV_POWERCUT_KEEP_NONE,
  DEV_POWERCUT_KEEP_ALL,
  DEV_POWERCUT_KEEP_ALL_BUT_ONE,
  DEV_POWERCUT_KEEP_ONE,
  DEV_POWERCUT_KEEP_PREFIX,
  DEV_POWERCUT_KEEP_COUNT
};
/* What of a torn write reaches lower: a 512-byte-aligned prefix of it,
 * possibly nothing (the default); or any subset of its 512-byte sectors
 * but all of them (a write of several blocks cut part-way, its sectors
 * written in any order).
 */
enum dev_powercut_tear {
  DEV_POWERCUT_TEAR_PREFIX,
  DEV_POWERCUT_TEAR_SECTORS,
  DEV_POWERCUT_TEAR_COUNT
};
void dev_powercut_set_policy (struct cairn_dev *dev,
                              enum dev_powercut_keep keep,
                              enum dev_powercut_tear tear);
const char *dev_powercut_keep_name (enum dev_powercut_keep keep);
/* Entries a cut could lose now (pending on every member of the supply):
 * 0 right after a completed flush, so after anything that the engine says
 * is durable when it returns (a FUA write, a commit).
 */
size_t dev_powercut_pending (struct cairn_dev *dev);

/* A pool of several devices (dev-chunk.c, design note at its top).
 *
 * dev_chunk_format writes a label on each of n member devices that makes
 * them one logical device of the layout asked for; dev_chunk_open reads
 * the labels back and returns that logical device, whose addresses a pool
 * is formatted and opened on as on any device.  Members are the caller's
 * and must outlive the logical device (as the lower device of a stacked
 * one), except with dev_chunk_open_paths, which opens files and closes
 * them with the logical device.
 */
enum dev_profile {
  DEV_PROFILE_SINGLE,         /* one copy */
  DEV_PROFILE_DUP,            /* two copies on one device */
  DEV_PROFILE_MIRROR,         /* two copies on distinct devices */
  DEV_PROFILE_MIRROR3,        /* three copies on distinct devices */
  DEV_PROFILE_STRIPE,         /* one copy striped over every device */
  DEV_PROFILE_STRIPE_MIRROR,  /* two copies, each striped (raid10) */
  DEV_PROFILE_COUNT
};
/* The profile a word names ("single", "dup", "mirror", "mirror3",
 * "stripe", "stripe-mirror"), and the word for a profile.
 */
int dev_profile_parse (const char *word, enum dev_profile *p) CAIRN_WUR;
const char *dev_profile_name (enum dev_profile p);

#define DEV_CHUNK_MAX_MEMBERS 64u
#define DEV_CHUNK_DEGRADED 1u     /* open without missing members */
#define DEV_CHUNK_RDONLY 2u       /* never write (no repairs either) */

struct dev_chunk_format_opts {
  enum dev_profile profile;
  const uint8_t *pool_uuid;       /* NULL: a random one */
  uint64_t stripe_size;           /* bytes of a chunk on one device; 0: by
                                     the members' sizes */
};
int dev_chunk_format (struct cairn_dev *const *members, unsigned n,
                      const struct dev_chunk_format_opts *opts,
                      uint8_t pool_uuid_out[16]) CAIRN_WUR;
/* Open the logical device from members (any order; with
 * DEV_CHUNK_DEGRADED some may be missing, and the device is read-only).
 * -ENODEV, naming the missing devices, when one is missing and
 * DEV_CHUNK_DEGRADED is not given, or when data has no copy left.
 */
int dev_chunk_open (struct cairn_dev *const *members, unsigned n,
                    unsigned flags, struct cairn_dev **devp) CAIRN_WUR;
int dev_chunk_open_paths (const char *const *paths, unsigned n,
                          unsigned flags, struct cairn_dev **devp) CAIRN_WUR;
/* Open what a pool lives on: the one file or block device of a
 * single-device pool, or the devices of a pool of several (a single path
 * whose device carries a label opens as a pool of one device, or
 * degraded).  flags: DEV_CHUNK_RDONLY, DEV_CHUNK_DEGRADED.
 */
int dev_pool_open (const char *const *paths, unsigned n, unsigned flags,
                   struct cairn_dev **devp) CAIRN_WUR;
/* Is dev a logical device of several members? */
bool dev_is_chunked (const struct cairn_dev *dev);
/* The pool UUID that a chunked device's labels carry. */
void dev_chunk_pool_uuid (const struct cairn_dev *dev, uint8_t uuid[16]);

/* What a member device is and has counted since the logical device was
 * opened (ZFS's READ / WRITE / CKSUM columns).
 */
enum dev_member_state {
  DEV_MEMBER_ONLINE,
  DEV_MEMBER_MISSING,
  DEV_MEMBER_REPLACING,       /* being replaced (present or not): see
                                 dev_chunk_replace_status */
};
struct dev_member_info {
  unsigned index;
  enum dev_member_state state;
  uint8_t uuid[16];
  char name[256];             /* "" when missing */
  uint64_t size;              /* bytes, as labelled */
  uint64_t used;              /* bytes its chunks take */
  uint64_t read_errors, write_errors, cksum_errors, repaired;
};
struct dev_chunk_info {
  enum dev_profile profile;
  unsigned ncopies, width, nmembers, nchunks, missing;
  uint64_t stripe_size, stripe_len, logical_size;
  bool degraded, readonly;
};
void dev_chunk_info (struct cairn_dev *dev, struct dev_chunk_info *info);
/* Member i's state and counters (i < info.nmembers). */
void dev_chunk_member (struct cairn_dev *dev, unsigned i,
                       struct dev_member_info *info);
/* Member i's own device, or NULL when it is missing. */
struct cairn_dev *dev_chunk_member_dev (struct cairn_dev *dev, unsigned i);
/* Where copy k of the byte at logical offset off lies: the member's index
 * and the offset on it, and how many bytes from there stay contiguous on
 * it (to the end of the stripe unit, or of the chunk when unstriped).
 * -EINVAL past the end or k too big.  For tests and for checking
 * placement.
 */
int dev_chunk_locate (struct cairn_dev *dev, uint64_t off, unsigned k,
                      unsigned *memberp, uint64_t *physp, uint64_t *runp)
  CAIRN_WUR;

/* Replacing a member (dev-replace.c has the design note): every stripe of
 * member `old` is copied onto target, read from another member's copy
 * where there is one and from old only where there is none, on a thread
 * of the device's, while writes reach target too; at the end target is
 * member `old` in every label.  The state is in the labels, so a device
 * opened with target among its members (dev_chunk_open) carries on from
 * the saved cursor once dev_chunk_replace_resume is called.
 */
enum dev_replace_state {
  DEV_REPLACE_NONE,           /* none since the device was opened */
  DEV_REPLACE_RUNNING,
  DEV_REPLACE_STOPPED,        /* in progress, no thread copying: opened so
                                 (resume it), or stopped by a close */
  DEV_REPLACE_FAILED,         /* in progress, the copy met an error */
  DEV_REPLACE_FINISHED,
  DEV_REPLACE_CANCELLED,
};
struct dev_replace_status {
  enum dev_replace_state state;
  unsigned index;             /* the member replaced */
  uint8_t uuid[16];           /* the new member's UUID */
  char target[256];           /* its name; "" when not named at open */
  bool source_missing;        /* the member replaced is not read */
  uint64_t done, total;       /* logical bytes the copy has passed */
  int64_t started;            /* wall clock, seconds since 1970 (0: before
                                 this open) */
  char error[512];            /* what stopped a FAILED replace */
};
/* Start replacing member old by target (owned by dev when own_target, on
 * success).  -EBUSY when a replace is in progress, -ENOSPC when target is
 * smaller than old's stripes, -EROFS when the members were opened
 * read-only, -EINVAL for a bad index or a target that is a member.
 */
int dev_chunk_replace_start (struct cairn_dev *dev, unsigned old,
                             struct cairn_dev *target, bool own_target)
  CAIRN_WUR;
/* dev_chunk_replace_start without the thread: the replace is in progress
 * (STOPPED) for dev_chunk_replace_step or dev_chunk_replace_resume.
 */
int dev_chunk_replace_begin (struct cairn_dev *dev, unsigned old,
                             struct cairn_dev *target, bool own_target)
  CAIRN_WUR;
/* Start the thread of a replace the labels say is in progress (after an
 * open, a failure or a stop): 0 when it runs or there is none; -ENODEV
 * when its target was not named at open.
 */
int dev_chunk_replace_resume (struct cairn_dev *dev) CAIRN_WUR;
/* Copy at most max_bytes further (the thread's step; tests call it with
 * no thread running), ending the replace when the copy is complete;
 * *donep says whether it has ended.
 */
int dev_chunk_replace_step (struct cairn_dev *dev, uint64_t max_bytes,
                            bool *donep) CAIRN_WUR;
/* Cancel the replace in progress: the labels forget target.  -ENOENT
 * when there is none; -EBUSY when the member replaced missed writes and
 * target is the only current copy of its data.
 */
int dev_chunk_replace_cancel (struct cairn_dev *dev) CAIRN_WUR;
/* Wait until the thread stops (the replace ended, failed or was
 * cancelled): 0, or -ECANCELED when stop (called every 200 ms; may be
 * NULL) said to stop waiting.
 */
int dev_chunk_replace_wait (struct cairn_dev *dev,
                            bool (*stop) (void *opaque), void *opaque)
  CAIRN_WUR;
void dev_chunk_replace_status (struct cairn_dev *dev,
                               struct dev_replace_status *st);
/* Save the cursor in the labels after this many bytes copied (default
 * 64 MiB; tests use less).
 */
void dev_chunk_replace_set_save (struct cairn_dev *dev, uint64_t bytes);
/* The word for a state: "none", "running", "stopped", "failed",
 * "finished", "cancelled".
 */
const char *dev_replace_state_name (enum dev_replace_state s);

#endif /* CAIRN_DEV_H */
