/* Cairn engine: internals shared by the catalog, volume and reclaim layers
 * (catalog.c and its parts catalog-*.c, volume.c, reclaim.c).
 *
 * The catalog lives in the root tree.  Keys start with a type byte:
 *
 *   RK_VOL      + be64 id               volume record (below)
 *   RK_NAME     + name                  be64 id of the visible volume
 *   RK_SNAP     + be64 id + be64 gen    snapshot record
 *   RK_SNAPNAME + be64 id + name        be64 gen of the snapshot
 *   RK_PIN      + be64 id + be64 gen    pin record: why the volume's state
 *                                       at gen must stay readable
 *   RK_CONFIG   + text                  pool-wide settings
 *   RK_CKPT     + be64 id + be64 gen    checkpoint record (checkpoint.c)
 *   RK_CKPTTIME + be64 id + be64 time + be64 gen
 *                                       the checkpoints of a volume by time
 *
 * A volume's id is the id of its tree.  Deadlists live in a tree of their
 * own (reclaim.c).
 */
#ifndef CAIRN_CATALOG_INT_H
#define CAIRN_CATALOG_INT_H

#include <pthread.h>

#include "btree.h"
#include "volume.h"

#define RK_VOL 2u
#define RK_NAME 3u
#define RK_SNAP 4u
#define RK_SNAPNAME 5u
#define RK_PIN 6u
#define RK_CONFIG 7u
#define RK_PROP 8u            /* + be64 id + key -> value (user property) */
#define RK_DESTROY 9u         /* + be64 id -> destroy record (reaper.c) */
#define RK_FREE 11u           /* + be64 id + be64 lo_d + be64 lo_b ->
                                 u64 hi_d, u64 hi_b: deadlist entries of a
                                 removed pin left to free (reaper.c) */
#define RK_CKPT 12u           /* + be64 id + be64 gen -> checkpoint record */
#define RK_CKPTTIME 13u       /* + be64 id + be64 ctime + be64 gen -> le64
                                 gen: the same checkpoints by time, so that
                                 VOL@TIME is one seek (checkpoint.c) */
#define RK_DEFER 10u          /* + be64 id + be64 gen -> u32 snapshots
                                 deleted while open: pin reasons to drop
                                 when no handle has the state open */

#define VOLF_READONLY 1u
#define VOLF_HIDDEN 2u        /* deleted, kept while clones depend on it */
#define VOLF_PARTIAL 4u       /* a receive in progress: found by no name
                                 lookup, only by the receive calls; it has
                                 no RK_NAME item (see "partial volumes" in
                                 catalog-recv.c) */

/* Volume record (little-endian):
 *   0  u64 tree id      8  u64 size (bytes)     16 u64 ctime
 *   24 u64 create gen   32 u64 flags            40 u64 origin id
 *   48 u64 origin gen   56 u64 referenced (blocks)
 *   64 u64 quota (bytes, 0: none)               72 u16 name length, name
 *   then, with FEATURE_INCOMPAT_VOLHELD, after the name:
 *      u64 held (blocks on the volume's deadlist once the record's
 *      generation is durable)
 * A record without the trailing field (written before the feature) has its
 * held count rebuilt by walking the deadlist when the catalog loads; every
 * record the catalog writes has it, and writing one sets the feature.
 */
#define VOLREC_FIXED 74u
#define VOLREC_HELD 8u

/* Check the record of volume id (its key's): -EIO with a message naming
 * it "(volume ID)" and saying what is wrong (the catalog and fsck).
 */
int volrec_check (const uint8_t *p, size_t len, uint64_t id) CAIRN_WUR;

/* The held count of a volume record of len bytes, or -1 when the record
 * has no such field (the catalog and fsck read it alike).
 */
static inline int64_t
volrec_held (const uint8_t *p, size_t len)
{
  size_t nlen = len >= VOLREC_FIXED ? get_le16 (p + 72) : 0;

  return len >= VOLREC_FIXED && len == VOLREC_FIXED + nlen + VOLREC_HELD
         ? (int64_t) get_le64 (p + VOLREC_FIXED + nlen) : -1;
}

/* Snapshot record:
 *   0  u64 ctime (seconds since 1970; a received snapshot keeps the
 *      sender's)
 *   8  u64 referenced (blocks)
 *   16 u64 size (bytes)
 *   24 u64 GUID: random and non-zero, given when the snapshot is taken and
 *      kept by every copy a receive makes, so that it names the same state
 *      in every pool (cairn-stream(5))
 *   32 u16 name length, then the name
 */
#define SNAPREC_FIXED 34u

/* A snapshot record, decoded. */
struct snaprec {
  uint64_t ctime, referenced, size, guid;   /* referenced in blocks */
  char name[VOL_NAME_MAX + 1];
};
/* Decode the snapshot record of (id, gen): -EIO with a message that names
 * the record "(volume ID, generation GEN)" and says what is wrong (the
 * catalog, the listings and fsck report it alike).
 */
int snaprec_decode (const uint8_t *p, size_t len, uint64_t id, uint64_t gen,
                    struct snaprec *sr) CAIRN_WUR;

/* The property (RK_PROP, key without ':', so no user property can clash)
 * that holds a partial volume's state string: its receive's resume token.
 */
#define PARTIAL_STATE_KEY "receive-state"

/* Pin record:
 *   0 u32 snapshots   4 u32 clones   8 root pointer (48)   56 u8 root level
 *   57 u8 flags (PINF_*)   58 6 reserved
 * A pin has at least one reason: a snapshot, a clone or a checkpoint.
 */
#define PINREC_LEN 64u
#define PINREC_FLAGS 57u
#define PINF_CKPT 1u          /* a checkpoint keeps the state (checkpoint.c);
                                 written with FEATURE_INCOMPAT_CKPT */
#define PINF_ALL PINF_CKPT

/* A pin record, decoded. */
struct pinrec {
  uint32_t snaps, clones;
  bool ckpt;
  struct btree_root root;
};

/* Why a state is pinned: the reasons a pin record counts. */
enum pin_why { PIN_SNAP, PIN_CLONE, PIN_CKPT };

/* Checkpoint record (RK_CKPT, little-endian):
 *   0  u64 ctime: when its commit was frozen (seconds since 1970, the
 *      pool's clock)
 *   8  u64 written: bytes of data the volume wrote in the generation
 *   16 u64 size: the volume's size then (bytes)
 *   24 u64 reserved (0)
 */
#define CKPTREC_LEN 32u

/* Destroy record: a deleted volume that nothing needs any more, being taken
 * apart in the background (reaper.c).  The volume's record, name, tree
 * item and properties are gone; what is left of it is this record and its
 * deadlist entries.
 *   0  root pointer (48)    48 u8 root level    49 u8 flags (DESTF_*)
 *   50 6 reserved
 *   56 u64 since: the volume's origin generation; blocks born at or before
 *      it are the origin's, never freed here (RC-1)
 *   64 u64 blocks freed so far (progress)
 *   72 u16 point length, then the point: every node whose key range lies
 *      below it, and every item with a smaller key, is freed (btree_reap);
 *      length 0 when the walk has not started
 */
#define DESTREC_FIXED 74u
#define DESTF_TREE_DONE 1u    /* the tree is all freed: only the deadlist
                                 entries may be left */

/* Extent item in a volume tree, keyed by be64 first logical block:
 *   0 u32 length (blocks)   4 u32 flags (0)   8 u64 first data block
 *   16 u64 birth generation   24 SHA-256 of each block, in order
 */
#define EXT_HDR 24u

/* A block range a volume stopped referencing while a pin still needs it. */
struct dl_entry {
  uint64_t addr, len;         /* blocks */
  uint64_t birth, death;
};

struct catalog;

/* A volume's in-memory state, shared by its open handles. */
struct volstate {
  struct catalog *cat;
  uint64_t id;                /* = tree id */
  struct btree *tree;         /* the live tree (pool registry) */
  char name[VOL_NAME_MAX + 1];
  uint64_t size, ctime, create_gen, flags, origin_id, origin_gen, quota;
  uint64_t max_pin;           /* newest pin, 0: none (changed in freeze) */
  int64_t referenced;         /* mapped data blocks (atomic) */
  int64_t held;               /* blocks on the deadlist: kept for pins (atomic) */
  bool rec_dirty;             /* referenced changed since the record (atomic) */
  int64_t held_stored;        /* held as the record has it, -1: no field */
  int opens;                  /* open handles (catalog tlock) */
  pthread_mutex_t pend_lock;  /* pending deadlist entries */
  struct dl_entry *pending;
  size_t npending, pending_cap;
  pthread_mutex_t rmw_lock;   /* serialises partial-block writes */
  uint64_t alloc_hint;        /* next-fit hint for data, blocks (atomic:
                                 concurrent writers share it) */
  uint64_t reuse_seen;        /* the space_reuse_hint the hint last
                                 followed (atomic) */
  uint64_t gen_written;       /* data bytes written in the open generation
                                 (atomic; a checkpoint's "written") */
  int ckpt_setting;           /* the volume's "checkpoints" setting: 1 on,
                                 0 off, -1 the pool's default */
};

enum cat_req_kind {
  REQ_CREATE, REQ_DELETE, REQ_RENAME, REQ_RESIZE, REQ_READONLY,
  REQ_SNAP, REQ_SNAP_DELETE, REQ_SNAP_RENAME, REQ_CLONE, REQ_PROP, REQ_QUOTA, REQ_ROLLBACK,
  REQ_PARTIAL_CREATE, REQ_PARTIAL_SAVE, REQ_PARTIAL_PUBLISH, REQ_PARTIAL_ABORT,
  REQ_REAP, REQ_CKPT_DROP, REQ_CKPT_SET, REQ_CKPT_PROMOTE, REQ_SCRUB_SAVE,
};

/* REQ_CREATE and REQ_CLONE flag: make a partial volume (VOLF_PARTIAL). */
#define REQF_PARTIAL 0x100u

/* A catalog change, applied inside a commit's freeze. */
struct cat_request {
  enum cat_req_kind kind;
  const char *name, *name2, *snap;
  const char *const *vols;
  size_t nvols;
  uint64_t size;
  uint64_t guid, ctime;       /* REQ_PARTIAL_PUBLISH: the snapshot's */
  unsigned flags;
  bool flag;
  int result;
  char errmsg[1024];
  uint64_t out_id;
  bool done;
  void *data;                 /* REQ_REAP: the step (reaper.c) */
  struct vol_discarded *discarded; /* REQ_PARTIAL_PUBLISH with a rollback:
                                      what it destroyed, or NULL */
  /* REQ_SNAP, and REQ_CLONE of a live volume: the volumes whose writers
   * wait for the freeze (snapshot barrier, catalog-snap.c); the freeze
   * that applies the request lowers it.
   */
  uint64_t *barrier;
  size_t nbarrier;
};

/* A pinned state (snapshot or generation) that a handle has open. */
struct open_pin {
  uint64_t id, gen;
  int opens;
  bool deferred;              /* a snapshot of it was deleted while open */
};

/* A volume record that did not decode when the catalog loaded
 * (catalog-damage.c): the volume is in no table, and nothing may use it or
 * take its name.
 */
struct vol_damaged {
  uint64_t id;                /* from its key; 0: a key of the wrong length */
  char name[VOL_NAME_MAX + 1]; /* from the name index, "" if none */
  char what[512];             /* the decoder's message */
};

struct catalog {
  struct cairn_pool *pool;
  struct open_pin *open_pins;   /* the pinned states open now, under
                                   tlock */
  size_t nopen_pins, open_pins_cap;
  pthread_mutex_t oplock;     /* one catalog change at a time */
  pthread_mutex_t tlock;      /* the table below */
  struct volstate **vols;
  size_t nvols, cap;
  struct vol_damaged *damaged; /* sorted by name; fixed once loaded (DV-1),
                                  so read without a lock */
  size_t ndamaged;
  struct btree *deadlist;
  struct cat_request *req;    /* the change for the next freeze (atomic:
                                 the freeze takes it, cat_submit clears it
                                 if no freeze did) */
  struct cat_request *applying; /* the request the running freeze applies,
                                   or NULL (freeze only) */
  uint64_t reclaimed;         /* blocks freed by deletions (atomic) */
  struct reaper *reaper;      /* background deletes (reaper.c) */
  struct reap_jobs *reap_jobs; /* the same, as jobs (reaper-jobs.c) */
  struct scrub *scrub;        /* online scrub (scrub.c) */
  bool settle;                /* deletes deferred while open may be due:
                                 look at the next freeze (atomic) */
  bool kick;                  /* this freeze left background work: start
                                 the reaper at its end */
  struct xstats *xstats;      /* I/O statistics per export (volstats.c;
                                 the pointer under tlock) */
  /* Checkpoints (checkpoint.c). */
  int ckpt_default;           /* the pool's "checkpoints": 1 on, 0 off */
  bool ckpt_any;              /* some checkpoint may exist (freeze only) */
  bool ckpt_due;              /* the collector should run (atomic) */
  int64_t ckpt_collected;     /* when it last started (pool clock) */
  uint64_t ckpt_dropped;      /* checkpoints it dropped since the pool
                                 opened (atomic) */
  uint64_t ckpt_pressure_dropped; /* of those, beyond the policy because
                                 space ran short (atomic) */
  uint64_t ckpt_pressure_events;  /* times that happened (atomic) */
  int64_t ckpt_pressure_last; /* when it last did (pool clock, atomic) */
  unsigned ckpt_threshold;    /* per cent of the data space: below it the
                                 collector gives space back (atomic) */
  /* Snapshot barriers (catalog-snap.c): ids of volumes with a snapshot
   * requested and not yet frozen, one entry per request.
   */
  pthread_mutex_t barrier_lock;
  pthread_cond_t barrier_cond;
  uint64_t *barrier_ids;      /* under barrier_lock */
  size_t nbarrier;            /* changed under barrier_lock, read unlocked
                                 (atomic) */
  size_t barrier_cap;
};

/* catalog.c and its parts (catalog-rec.c, catalog-snap.c) */
/* Snapshot barriers (catalog-snap.c, SB-1): raise one for each of n
 * volume ids (-ENOMEM only); lower the ones a request raised (req->barrier,
 * req->nbarrier), once, by whichever of its freeze and its submitter comes
 * first; and wait, before a write to volume id, while one is raised for it.
 */
int snap_barrier_raise (struct catalog *cat, const uint64_t *ids, size_t n)
  CAIRN_WUR;
void snap_barrier_lower (struct catalog *cat, struct cat_request *req);
void snap_barrier_wait (struct catalog *cat, uint64_t id);
/* A handle closed on a hidden volume or a deferred pin: let the next
 * commit finish what its delete left (volume.c).
 */
void cat_settle_soon (struct catalog *cat);
/* Handles open on the pinned state (id, gen), or NULL (tlock held). */
struct open_pin *cat_open_pin (struct catalog *cat, uint64_t id, uint64_t gen);
int catalog_get (struct cairn_pool *pool, struct catalog **catp) CAIRN_WUR;
struct volstate *cat_find_name (struct catalog *cat, const char *name);
/* The partial volume of a receive into name, or NULL (tlock held). */
struct volstate *cat_find_partial (struct catalog *cat, const char *name);
int cat_lookup_pin (struct catalog *cat, uint64_t id, uint64_t gen,
                    uint32_t *snaps, uint32_t *clones, struct btree_root *root)
  CAIRN_WUR;
/* Read pin record (id, gen): -ENOENT when none, -EIO when corrupt. */
int cat_read_pin (struct catalog *cat, uint64_t id, uint64_t gen,
                  struct pinrec *pr) CAIRN_WUR;
int cat_lookup_snap (struct catalog *cat, uint64_t id, const char *snap,
                     uint64_t *genp) CAIRN_WUR;
/* The generation that "VOL@SPEC" names for reading: GEN for "#GEN" (-EINVAL
 * when GEN is no number; whether it is kept is the caller's to check), the
 * snapshot named SPEC, or, when SPEC is a time "YYYY-MM-DDTHH:MM:SSZ"
 * (DESIGN §3), the newest kept state taken at or before it.  The kept
 * states with a time are the snapshots and the checkpoints (a generation
 * only a clone pins has none), so that is the newest of volume id's
 * snapshots and checkpoints whose time is at or before SPEC (the later
 * generation of two in the same second); a snapshot record that does not
 * decode has no time and is passed over.  -ENOENT with a message naming vol when nothing matches,
 * -EINVAL for a malformed time.
 */
int cat_lookup_point (struct catalog *cat, uint64_t id, const char *vol,
                      const char *spec, uint64_t *genp) CAIRN_WUR;
/* Parse "YYYY-MM-DDTHH:MM:SSZ" into seconds since 1970: 0, or -1 when s
 * is not such a time (exposed for the tests).
 */
int cat_parse_time (const char *s, uint64_t *tp) CAIRN_WUR;
/* Fail a lookup of snapshot snap of volume vol that found none: -ENOENT,
 * saying so, and, when snap looks like a date or a time ("2026-12-07"),
 * that a time needs the full form.
 */
int cat_no_snapshot (const char *vol, const char *snap) CAIRN_WUR;
int cat_read_snap (struct catalog *cat, uint64_t id, uint64_t gen,
                   struct vol_info *info) CAIRN_WUR;
/* Fail a use of snapshot export "VOL@SNAP" whose record cat_read_snap
 * could not read (r, with its message): a damaged one (-EIO) gets a
 * message saying what to do.  Returns r.
 */
int cat_snap_unreadable (int r, const char *export) CAIRN_WUR;
/* The same for a snapshot whose record's decoder said why: -EIO. */
int cat_snap_unusable (const char *export, const char *why) CAIRN_WUR;
/* Check the key length of a volume record: -EIO naming it (the catalog
 * and fsck).
 */
int volkey_check (size_t klen) CAIRN_WUR;
void cat_key (uint8_t *key, unsigned type, uint64_t id, uint64_t gen);
/* Call fn for each root-tree item whose key starts with prefix, in key
 * order, under the root tree's read lock (fn must not change the tree):
 * fn returns 0 to go on, > 0 to stop (not an error), < 0 to fail.
 */
int cat_foreach_prefix_from (struct catalog *cat, const uint8_t *start,
                             size_t slen, size_t plen,
                             int (*fn) (void *opaque, const uint8_t *key,
                                        size_t klen, const uint8_t *val,
                                        size_t vlen),
                             void *opaque) CAIRN_WUR;
int cat_foreach_prefix (struct catalog *cat, const uint8_t *prefix,
                        size_t plen,
                        int (*fn) (void *opaque, const uint8_t *key,
                                   size_t klen, const uint8_t *val,
                                   size_t vlen),
                        void *opaque) CAIRN_WUR;
/* Call fn for each pin record of volume id, oldest first; fn returning
 * non-zero stops the walk.
 */
int cat_foreach_pin (struct catalog *cat, uint64_t id,
                     int (*fn) (void *opaque, uint64_t gen,
                                const uint8_t *rec, size_t len),
                     void *opaque) CAIRN_WUR;

/* scrub.c: the online scrub's state, loaded with the catalog; its record
 * saved in the freeze (REQ_SCRUB_SAVE); its thread stopped before the
 * pool's last commit, and freed with the catalog.
 */
int scrub_load (struct catalog *cat) CAIRN_WUR;
int scrub_apply_save (struct catalog *cat, struct cat_request *req)
  CAIRN_WUR;
void scrub_stop (struct catalog *cat);
void scrub_free (struct catalog *cat);

/* catalog-damage.c: volume records that do not decode (DV-n) */
/* Keep the damaged record of key (klen bytes), the decoder's message in
 * cairn_errmsg; then, once every record is read, name them from the name
 * index and sort them.
 */
int cat_damaged_add (struct catalog *cat, const uint8_t *key, size_t klen)
  CAIRN_WUR;
int cat_damaged_names (struct catalog *cat) CAIRN_WUR;
/* The damaged volume that name names, or NULL; is id damaged? */
const struct vol_damaged *cat_find_damaged (struct catalog *cat,
                                            const char *name);
bool cat_damaged_id (struct catalog *cat, uint64_t id);
/* The error for a volume name that the table does not have, used as
 * export: -EIO naming the record of a damaged volume, else -ENOENT.
 */
int cat_no_volume (struct catalog *cat, const char *name, const char *export)
  CAIRN_WUR;
/* -EIO refusing to delete volume name if its record is damaged, else 0. */
int cat_undeletable (struct catalog *cat, const char *name) CAIRN_WUR;
/* 0 when no volume has name (a visible, damaged or index-only one), else
 * -EEXIST saying which (in the freeze).
 */
int cat_name_free (struct catalog *cat, const char *name) CAIRN_WUR;
/* Report a damaged volume to a listing's damage callback. */
int cat_damaged_report (const struct vol_damaged *dv,
                        int (*damage) (void *opaque,
                                       const struct vol_damage *d),
                        void *opaque) CAIRN_WUR;

/* reclaim.c */
void reclaim_free_fn (void *opaque, uint64_t addr, uint64_t len,
                      uint64_t birth);
/* Returns true when the blocks stay, held for the volume's own snapshots
 * or checkpoints (its deadlist), false when they were freed or belong to
 * the origin of a clone.
 */
bool reclaim_free_blocks (struct volstate *vs, uint64_t addr, uint64_t len,
                          uint64_t birth);
int reclaim_flush_pending (struct catalog *cat) CAIRN_WUR;
int reclaim_pin_removed (struct catalog *cat, struct volstate *vs,
                         uint64_t gen) CAIRN_WUR;
/* Remove the deadlist entries of volume id with D in (lo_d, hi_d] and B in
 * (lo_b, hi_b], at most limit: those born after keep_upto are freed, the
 * others only forgotten (RC-5); *held (may be NULL) drops by the blocks
 * removed, *removedp (may be NULL) gets how many entries went.
 */
int reclaim_free_entries (struct catalog *cat, uint64_t id, int64_t *held,
                          uint64_t lo_d, uint64_t hi_d, uint64_t lo_b,
                          uint64_t hi_b, uint64_t keep_upto, size_t limit,
                          size_t *removedp) CAIRN_WUR;
/* Forget up to limit deadlist entries of volume id (being destroyed),
 * freeing those born after since; *removedp gets how many went.
 */
int reclaim_drain_deadlist (struct catalog *cat, uint64_t id, uint64_t since,
                            size_t limit, size_t *removedp) CAIRN_WUR;
/* Free the deadlist entries of volume vs with D in (lo_d, hi_d] and B in
 * (lo_b, hi_b] (a removed pin's, RC-3): a step now, the rest in the
 * background.  vs->held drops by what goes.
 */
int reclaim_free_range (struct catalog *cat, struct volstate *vs,
                        uint64_t lo_d, uint64_t hi_d, uint64_t lo_b,
                        uint64_t hi_b) CAIRN_WUR;
/* The blocks of volume id's deadlist entries with D in (lo_d, hi_d] and
 * B in (lo_b, hi_b], without freeing them.
 */
int reclaim_range_blocks (struct catalog *cat, uint64_t id, uint64_t lo_d,
                          uint64_t hi_d, uint64_t lo_b, uint64_t hi_b,
                          uint64_t *blocksp) CAIRN_WUR;
/* Call fn for every deadlist entry of vs (written and queued) with a
 * death in (lo_d, hi_d], len in blocks; a non-zero return from fn stops
 * the walk.
 */
int reclaim_foreach_entry (struct catalog *cat, struct volstate *vs,
                           uint64_t lo_d, uint64_t hi_d,
                           int (*fn) (void *opaque, uint64_t len,
                                      uint64_t birth, uint64_t death),
                           void *opaque) CAIRN_WUR;
/* The pins of volume id around gen: the newest below and the oldest above
 * (0 and UINT64_MAX when none); two seeks.
 */
int reclaim_pin_neighbours (struct catalog *cat, uint64_t id, uint64_t gen,
                            uint64_t *below, uint64_t *above) CAIRN_WUR;
/* Blocks that removing pin gen of vs would free (a dry run of RC-3). */
int reclaim_unique_blocks (struct catalog *cat, struct volstate *vs,
                           uint64_t gen, uint64_t *blocksp) CAIRN_WUR;
/* Move the deadlist entries of a published partial volume to the volume
 * it was published into (RC-5).
 */
int reclaim_adopt_deadlist (struct catalog *cat, struct volstate *from,
                            struct volstate *to) CAIRN_WUR;
/* A rollback of from to its pin at gen (catalog-rollback.c VR-4): from's
 * deadlist entries that died after gen move to to when born after gen,
 * and are forgotten (not freed) when born at or before it.  The held
 * counts of both follow.
 */
int reclaim_move_deadlist (struct catalog *cat, struct volstate *from,
                           struct volstate *to, uint64_t gen) CAIRN_WUR;
/* Count the blocks on a volume's deadlist into vs->held. */
int reclaim_count_held (struct catalog *cat, struct volstate *vs) CAIRN_WUR;
/* The end of the deaths a free record from lo_d may still free (RC-3). */
int reclaim_record_end (struct catalog *cat, uint64_t id, uint64_t lo_d,
                        uint64_t hi_d, uint64_t *endp) CAIRN_WUR;
/* The newest pin of a volume, from its pin records (0: none). */
int reclaim_max_pin (struct catalog *cat, uint64_t id, uint64_t *maxp)
  CAIRN_WUR;

/* checkpoint.c: continuous checkpoints (design note CK-n there) */
/* Load the settings (catalog_get); take the checkpoints of generation gen
 * (in its freeze, before the request: CK-2).
 */
int ckpt_load (struct catalog *cat) CAIRN_WUR;
int ckpt_take (struct catalog *cat, uint64_t gen) CAIRN_WUR;
/* Read checkpoint (id, gen)'s record: -ENOENT when there is none. */
int ckpt_read (struct catalog *cat, uint64_t id, uint64_t gen,
               struct vol_checkpoint *c) CAIRN_WUR;
/* Describe checkpoint (id, gen) as a state (vol_stat): its time, size and
 * data, and its GUID (ckpt_guid).  -ENOENT when there is none.
 */
int ckpt_stat (struct catalog *cat, uint64_t id, uint64_t gen,
               struct vol_info *info) CAIRN_WUR;
/* The GUID of checkpoint (id, gen): derived from the pool's UUID, the
 * volume and the generation, so that the same checkpoint has the same
 * GUID whenever it is sent, and a snapshot promoted from it too.
 */
uint64_t ckpt_guid (struct catalog *cat, uint64_t id, uint64_t gen);
/* Delete the records of checkpoint (id, gen), leaving its pin as it is
 * (a caller that removes the pin itself: a rollback's RB-2).
 */
int ckpt_records_del (struct catalog *cat, uint64_t id, uint64_t gen)
  CAIRN_WUR;
/* The newest checkpoint of volume id at or before time t: -ENOENT when
 * none.
 */
int ckpt_at_time (struct catalog *cat, uint64_t id, uint64_t t,
                  uint64_t *genp, uint64_t *ctimep) CAIRN_WUR;
/* Drop every checkpoint of vs that no handle has open (CK-5, freeze). */
int ckpt_drop_all (struct catalog *cat, struct volstate *vs) CAIRN_WUR;
/* Requests: drop checkpoints, change a setting (freeze). */
int apply_ckpt_drop (struct catalog *cat, struct cat_request *req) CAIRN_WUR;
int apply_ckpt_set (struct catalog *cat, struct cat_request *req) CAIRN_WUR;
/* Promote a checkpoint to a snapshot (catalog-snap.c, freeze). */
int apply_ckpt_promote (struct catalog *cat, struct cat_request *req,
                        uint64_t gen) CAIRN_WUR;
/* Run the collector over every volume (the reaper's thread). */
int ckpt_collect (struct catalog *cat) CAIRN_WUR;
/* Is the pool's free space under the collector's threshold?  Drop the
 * oldest checkpoints nothing else keeps until it is not (only: of that
 * volume, for its quota), freeing what they held at once with reclaim.
 */
bool ckpt_space_low (struct catalog *cat);
int ckpt_relieve (struct catalog *cat, struct volstate *only, bool reclaim,
                  uint64_t *dropped) CAIRN_WUR;

/* reaper.c: deletes that run in the background and survive restarts */
/* Start taking apart volume vs, which nothing needs any more (no pins, no
 * handles), in a freeze: a destroy record with its tree's root takes the
 * place of its tree item.  The caller (destroy_volume) removes its other
 * records and its table entry.
 */
int reaper_begin (struct catalog *cat, struct volstate *vs) CAIRN_WUR;
/* Apply a step gathered by the reaper (REQ_REAP, in the freeze). */
int reaper_apply (struct catalog *cat, struct cat_request *req, uint64_t gen)
  CAIRN_WUR;
/* Make the reaper state of a catalog (loading it), start it when there is
 * work, stop it and free it (closing the pool).
 */
int reaper_new (struct catalog *cat) CAIRN_WUR;
/* Entries a step frees at most. */
size_t reaper_budget (struct catalog *cat);
/* Drop volume id's free records whose deaths all lie after generation
 * after: a rollback settled their entries (in the freeze).
 */
int reaper_drop_ranges (struct catalog *cat, uint64_t id, uint64_t after)
  CAIRN_WUR;
/* Leave the rest of a removed pin's deadlist range to the background
 * (its held blocks are vs's).
 */
int reaper_defer_range (struct catalog *cat, struct volstate *vs,
                        uint64_t lo_d, uint64_t hi_d, uint64_t lo_b,
                        uint64_t hi_b) CAIRN_WUR;

/* reaper-jobs.c: the destroy and free records as jobs people can list
 * (vol_reclaim_jobs).  A record is named by is_free, its volume id and,
 * for a free record, lo_d and lo_b.
 */
int reap_jobs_new (struct catalog *cat) CAIRN_WUR;
void reap_jobs_free (struct catalog *cat);
/* List a record as a job (total_blocks 0: unknown). */
void reap_jobs_add (struct catalog *cat, bool is_free, uint64_t id,
                    uint64_t lo_d, uint64_t lo_b, const char *what,
                    uint64_t total_blocks);
/* Credit a record's job with blocks freed; gone: the record went. */
void reap_jobs_update (struct catalog *cat, bool is_free, uint64_t id,
                       uint64_t lo_d, uint64_t lo_b, uint64_t blocks,
                       bool gone);
/* The newest job's number, and forgetting the jobs up to one when no
 * record is left.
 */
uint64_t reap_jobs_seq (struct catalog *cat);
void reap_jobs_prune (struct catalog *cat, uint64_t seq);
/* Count a free record's total before its first step (step lock held). */
int reap_jobs_count (struct catalog *cat, uint64_t id, uint64_t lo_d,
                     uint64_t hi_d, uint64_t lo_b, uint64_t hi_b) CAIRN_WUR;
/* List the destroy and free records a restart left as jobs. */
int reaper_load_jobs (struct catalog *cat) CAIRN_WUR;
void reaper_kick (struct catalog *cat);
void reaper_stop (struct catalog *cat);
void reaper_free (struct catalog *cat);
/* Decode a destroy record (also used by fsck). */
struct destrec {
  struct btree_root root;
  unsigned flags;
  uint64_t since, freed;
  uint8_t point[BTREE_MAX_KEY];
  size_t pointlen;
};
int destrec_decode (const uint8_t *val, size_t vlen, struct destrec *d)
  CAIRN_WUR;
/* Decode a free record: volume id, range = lo_d, hi_d, lo_b, hi_b. */
int freerec_decode (const uint8_t *key, size_t klen, const uint8_t *val,
                    size_t vlen, uint64_t *id, uint64_t range[4]) CAIRN_WUR;
/* Replay the pool's intent log into the volumes (volume.c): *applied
 * records re-made in the open generation, which the caller commits.
 */
int vol_log_replay (struct catalog *cat, uint64_t *applied) CAIRN_WUR;
/* Find a volume by id, hidden ones included (tlock held). */
struct volstate *cat_find_id_locked (struct catalog *cat, uint64_t id);
/* Submit a catalog change and wait until it is durable (catalog.c). */
int cat_submit (struct cairn_pool *pool, struct cat_request *req) CAIRN_WUR;
/* Put / delete an item of the root tree (catalog-rec.c, in the freeze). */
int cat_root_put (struct catalog *cat, const uint8_t *key, size_t klen,
                  const void *val, size_t vlen) CAIRN_WUR;
int cat_root_del (struct catalog *cat, const uint8_t *key, size_t klen)
  CAIRN_WUR;
int cat_root_get (struct catalog *cat, const uint8_t *key, size_t klen,
                  void *val, size_t vmax, size_t *vlen) CAIRN_WUR;
/* volstats.c */
struct xstats;
void xstats_free (struct xstats *xs);
/* Fold a closing handle's counters into its export's (vol_close). */
void xstats_close (struct cairn_volume *v);
/* The request latencies an open volume recorded (volume.c). */
void vol_latency (struct cairn_volume *v, struct vol_latency *lat);

/* volume.c */
/* A run of mapped blocks, copied out of a volume tree. */
struct mapping {
  uint64_t lbn, n, addr, birth;
  uint8_t *sha;               /* n digests */
};
struct map_vec {
  struct mapping *m;
  size_t n, cap;
};
void map_vec_free (struct map_vec *mv);
/* Append the mapping of blocks [lbn, lbn + n) of tree, clipped to the
 * range, in order (tree read-locked by the caller).
 */
int map_range_locked (struct catalog *cat, struct btree *tree, uint64_t lbn,
                      uint64_t n, struct map_vec *mv) CAIRN_WUR;
uint64_t max_ext_blocks (struct catalog *cat);
/* What a handle is open on. */
struct btree *vol_tree (struct cairn_volume *v);
struct volstate *vol_state (struct cairn_volume *v);
/* The generation of a pinned state; 0 for a live volume. */
uint64_t vol_pin_gen (struct cairn_volume *v);
/* Remove the mapping of [lbn, lbn + n) from a volume's tree. */
int vol_punch (struct volstate *vs, uint64_t lbn, uint64_t n) CAIRN_WUR;
static inline uint32_t
ext_len (const uint8_t *v)
{
  return get_le32 (v);
}
static inline uint64_t
ext_addr (const uint8_t *v)
{
  return get_le64 (v + 8);
}
static inline uint64_t
ext_birth (const uint8_t *v)
{
  return get_le64 (v + 16);
}

/* ---- shared by the catalog's files: catalog.c (the core), catalog-rec.c
 * (records), catalog-snap.c (pins, snapshots, deletes), catalog-api.c (the
 * public calls) and catalog-recv.c (the receive's requests)
 */

/* Is a volume found by name and listed?  Not when hidden or partial. */
static inline bool
vs_visible (const struct volstate *vs)
{
  return !(vs->flags & (VOLF_HIDDEN | VOLF_PARTIAL));
}

/* A volume's snapshots: generations and names, in generation order.  A
 * record that does not decode is listed with bad set and the name its
 * name index gives ("" if none does), so that deleting the snapshot or its
 * volume still works; reading it (cat_read_snap) fails.
 */
struct snaplist {
  uint64_t *gen;
  char (*name)[VOL_NAME_MAX + 1];
  bool *bad;
  size_t n, cap;
};
int list_snaps (struct catalog *cat, uint64_t id, struct snaplist *sl)
  CAIRN_WUR;
void snaplist_free (struct snaplist *sl);
/* A key of a type byte, an optional big-endian id and a name. */
size_t name_key (uint8_t *key, unsigned type, const uint64_t *id,
                 const char *name);
int need_volume (struct catalog *cat, const char *name, struct volstate **vsp)
  CAIRN_WUR;
int volrec_store (struct catalog *cat, struct volstate *vs) CAIRN_WUR;
int snap_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
              const char *name, uint64_t guid, uint64_t ctime) CAIRN_WUR;
int snap_name_free (struct catalog *cat, struct volstate *vs,
                    const char *name) CAIRN_WUR;
int destroy_volume (struct catalog *cat, struct volstate *vs, uint64_t gen)
  CAIRN_WUR;
void info_from_state (const struct volstate *vs, struct vol_info *info);
int apply_create (struct catalog *cat, struct cat_request *req, uint64_t gen)
  CAIRN_WUR;
int apply_clone (struct catalog *cat, struct cat_request *req, uint64_t gen)
  CAIRN_WUR;
/* A new volume state for tree t (the request fills in the rest), NULL
 * without memory; give it its records, name item and place in the table
 * (it is freed on failure); copy from_id's user properties to to_id.
 */
struct volstate *volstate_new (uint64_t id, struct btree *t, const char *name,
                               uint64_t size, uint64_t gen);
int publish_volume (struct catalog *cat, struct volstate *vs) CAIRN_WUR;
int copy_props (struct catalog *cat, uint64_t from_id, uint64_t to_id)
  CAIRN_WUR;
/* Roll a volume back to one of its snapshots (catalog-rollback.c). */
int apply_rollback (struct catalog *cat, struct cat_request *req,
                    uint64_t gen) CAIRN_WUR;
/* Remove a volume state from the table and free it (tlock held). */
void table_remove (struct catalog *cat, struct volstate *vs);
/* Delete every property of a volume (it is being destroyed). */
int drop_props (struct catalog *cat, uint64_t id) CAIRN_WUR;
/* Records (catalog-rec.c): decode volume id's record into a new volume
 * state; encode a snapshot record, returning its length.
 */
int volrec_decode (const uint8_t *p, size_t len, uint64_t id,
                   struct volstate **vsp) CAIRN_WUR;
size_t snaprec_encode (const struct snaprec *sr, uint8_t *p);
/* Pins, snapshots and deletes (catalog-snap.c).  Add a reason to pin
 * (vs, gen) at root; drop one (the last frees what only it kept, RC-3).
 */
int pin_add (struct catalog *cat, struct volstate *vs, uint64_t gen,
             const struct btree_root *root, enum pin_why why) CAIRN_WUR;
int pin_release (struct catalog *cat, struct volstate *vs, uint64_t gen,
                 enum pin_why why) CAIRN_WUR;
/* Finish the deletes that waited for handles to close (in the freeze). */
int cat_settle (struct catalog *cat, uint64_t gen) CAIRN_WUR;
/* The requests that delete a volume, take snapshots and delete or rename
 * one.
 */
int apply_delete (struct catalog *cat, struct cat_request *req, uint64_t gen)
  CAIRN_WUR;
int apply_snap (struct catalog *cat, struct cat_request *req, uint64_t gen)
  CAIRN_WUR;
int apply_snap_change (struct catalog *cat, struct cat_request *req)
  CAIRN_WUR;
/* The receive's requests (catalog-recv.c). */
int apply_partial_create (struct catalog *cat, struct cat_request *req,
                          uint64_t gen) CAIRN_WUR;
int apply_partial_save (struct catalog *cat, struct cat_request *req) CAIRN_WUR;
int apply_partial_publish (struct catalog *cat, struct cat_request *req,
                           uint64_t gen) CAIRN_WUR;
int apply_partial_abort (struct catalog *cat, struct cat_request *req,
                         uint64_t gen) CAIRN_WUR;

#endif /* CAIRN_CATALOG_INT_H */
