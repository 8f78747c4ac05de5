/* Cairn engine, layers "catalog" and "volume": what users manage.
 *
 * Volumes are thin virtual disks, each one B-tree mapping logical block
 * number to extents of checksummed data.  Snapshots are read-only pins of a
 * volume at the end of a generation; clones are writable volumes that start
 * as another volume's state (live or a snapshot).  Names follow DESIGN §3:
 * components [A-Za-z0-9._-]+ joined by '/', up to 255 bytes; '@' and '#'
 * are reserved for export names:
 *
 *   VOL            the live volume
 *   VOL@SNAP       a snapshot (read-only)
 *   VOL@#GEN       the volume's state at generation GEN, while a snapshot
 *                  or retained checkpoint pins it (read-only)
 *   VOL@TIME       TIME = YYYY-MM-DDTHH:MM:SSZ (UTC): the newest kept state
 *                  taken at or before TIME (read-only); until checkpoints
 *                  are kept, the newest such snapshot (cat_lookup_point)
 *
 * Every function that changes the catalog is atomic: it takes effect in
 * one generation or not at all.  Errors are negative errnos with a message
 * (util.h): -ENOENT unknown name, -EEXIST name taken, -EINVAL bad name or
 * argument, -EROFS read-only target, -ENOSPC pool or quota full, -EBUSY
 * still in use (a volume with snapshots or clones), -EIO damaged data.
 */
#ifndef CAIRN_VOLUME_H
#define CAIRN_VOLUME_H

#include <stdbool.h>
#include <stdint.h>

#include "pool.h"
#include "util.h"

#define VOL_NAME_MAX 255
#define VOL_MAX_IO (64u * 1024 * 1024)

struct cairn_volume;

/* A volume or snapshot as listed. */
struct vol_info {
  uint64_t id;
  char name[VOL_NAME_MAX + 1];      /* volume name */
  char snap[VOL_NAME_MAX + 1];      /* snapshot name, "" for a volume */
  uint64_t size;                    /* bytes */
  uint64_t ctime;                   /* creation, seconds since 1970 */
  uint64_t gen;                     /* creation generation; snapshot: its gen */
  uint64_t guid;                    /* snapshot: its GUID (random, non-zero,
                                       kept by received copies); volume: 0 */
  bool readonly;
  bool is_snapshot;
  uint64_t origin_id, origin_gen;   /* a clone's origin; 0: none */
  uint64_t referenced;              /* bytes of data the state maps */
  uint64_t held;                    /* volume: bytes its snapshots keep */
  uint64_t quota;                   /* volume: 0 for none */
};

/* ---- catalog: volumes */

/* Check a volume or snapshot name (-EINVAL with the reason). */
int vol_check_name (const char *name) CAIRN_WUR;

int vol_create (struct cairn_pool *pool, const char *name, uint64_t size,
                uint64_t *idp) CAIRN_WUR;
/* Delete a volume: -EBUSY while it has snapshots (unless recursive, which
 * deletes them too).  A volume whose state a clone started from is hidden
 * and reclaimed when its last clone goes.
 */
#define VOL_DELETE_RECURSIVE 1u
int vol_delete (struct cairn_pool *pool, const char *name, unsigned flags)
  CAIRN_WUR;
int vol_rename (struct cairn_pool *pool, const char *from, const char *to)
  CAIRN_WUR;
/* Grow; shrinking needs force and discards the data past the new end. */
int vol_resize (struct cairn_pool *pool, const char *name, uint64_t size,
                bool force) CAIRN_WUR;
int vol_set_readonly (struct cairn_pool *pool, const char *name, bool ro)
  CAIRN_WUR;
/* User properties (as ZFS's): KEY is [a-z0-9._:-], 1 to 64 bytes, and must
 * contain ':' (so that Cairn's own settings never clash with them); VALUE
 * is up to 1024 bytes of text.  A NULL value removes the property.
 */
#define VOL_PROP_KEY_MAX 64
#define VOL_PROP_VALUE_MAX 1024
int vol_set_prop (struct cairn_pool *pool, const char *name, const char *key,
                  const char *value) CAIRN_WUR;
/* Call fn for every property of a volume, in key order. */
int vol_list_props (struct cairn_pool *pool, const char *name,
                    int (*fn) (void *opaque, const char *key,
                               const char *value),
                    void *opaque) CAIRN_WUR;
/* A quota on the space a volume's lineage holds (its referenced data plus
 * what its snapshots keep); writes past it fail with -ENOSPC.  0: none.
 */
int vol_set_quota (struct cairn_pool *pool, const char *name, uint64_t bytes)
  CAIRN_WUR;

/* Describe one volume, or one snapshot (VOL@SNAP, or VOL@TIME: the newest
 * snapshot taken at or before TIME, see cat_lookup_point). */
int vol_stat (struct cairn_pool *pool, const char *name, struct vol_info *info)
  CAIRN_WUR;
/* Name the state of volume id at generation gen (a clone's origin) in
 * O(log n): vol gets the volume's name and snap the name of its snapshot
 * at gen, or "" when no snapshot with a readable record is there (then the
 * state is "VOL@#GEN").  A volume whose record is damaged keeps the name
 * its name index gives, with snap "".  -ENOENT when the volume has no name
 * (hidden: deleted while clones depend on it).
 */
int vol_state_name (struct cairn_pool *pool, uint64_t id, uint64_t gen,
                    char vol[VOL_NAME_MAX + 1], char snap[VOL_NAME_MAX + 1])
  CAIRN_WUR;
/* Call fn for every visible volume, in name order, then (with_snapshots)
 * each volume's snapshots after it, oldest first.  A damaged record (see
 * vol_list_tolerant) fails the listing with -EIO and a message naming it
 * (vol_damage_error): for callers that must see everything, such as a
 * receive checking its base.
 */
int vol_list (struct cairn_pool *pool, bool with_snapshots,
              int (*fn) (void *opaque, const struct vol_info *info),
              void *opaque) CAIRN_WUR;

/* A catalog record that does not decode, as a listing reports it: a
 * snapshot's record (kind VOL_DAMAGE_SNAPSHOT) or a volume's
 * (VOL_DAMAGE_VOLUME: then snap is "" and gen 0).
 */
#define VOL_DAMAGE_SNAPSHOT 0u
#define VOL_DAMAGE_VOLUME 1u
struct vol_damage {
  unsigned kind;                    /* VOL_DAMAGE_SNAPSHOT or _VOLUME */
  uint64_t id;                      /* the volume's id; 0 for a volume record
                                       whose key has the wrong length */
  uint64_t gen;                     /* the snapshot's generation */
  char name[VOL_NAME_MAX + 1];      /* the volume's name (a damaged volume's
                                       from the name index, "" when no name
                                       is left) */
  char snap[VOL_NAME_MAX + 1];      /* the snapshot's name from the name
                                       index, "" when no name is left */
  char what[512];                   /* what is wrong, naming the record
                                       "(volume ID, generation GEN)" or
                                       "(volume ID)" as fsck does */
};

/* vol_list, but a record that does not decode is passed to damage (in its
 * place in the listing) and the listing goes on, so that one damaged
 * record does not hide the rest of the pool (listings and status for
 * people, the NBD export list):
 *
 *   - a snapshot record, after its volume among its snapshots.  Reading
 *     that snapshot (open, stat, clone, send) fails; deleting it works.
 *   - a volume record, once, in name order among the volumes (its
 *     snapshots are not listed).  The volume's name, size and origin are
 *     unknown, so every use of it fails with -EIO naming the record
 *     (opening VOL, VOL@SNAP or VOL@#GEN, stat, snapshot, clone, send,
 *     diff, rename, resize, receive), its name stays taken, and deleting it
 *     is refused: without its origin, the blocks it owns cannot be told
 *     from its origin's.  Its data, pins and deadlist stay as they are;
 *     the other volumes, its clones included, work as before.
 *
 * damage NULL makes the listing strict (vol_list).
 */
int vol_list_tolerant (struct cairn_pool *pool, bool with_snapshots,
                       int (*fn) (void *opaque, const struct vol_info *info),
                       int (*damage) (void *opaque,
                                      const struct vol_damage *d),
                       void *opaque) CAIRN_WUR;
/* The error that using damaged record d meets, as the strict listing
 * fails: -EIO with a message naming it ("'VOL@SNAP' cannot be used: ...").
 * A damage callback returns it to stop a listing at the records it
 * cannot do without.
 */
int vol_damage_error (const struct vol_damage *d) CAIRN_WUR;
/* The number of volume records that did not decode when the catalog
 * loaded (DV-1 in catalog-damage.c): a count, without a listing.
 */
int vol_damaged_volumes (struct cairn_pool *pool, uint64_t *np) CAIRN_WUR;

/* ---- catalog: snapshots and clones */

/* Snapshot one volume: the state at the end of the generation that the
 * call ends; durable when it returns.  It holds exactly the writes that
 * began before the call (DESIGN.md §2.3): each write that began before it
 * whole, none that began after it.  A write to the volume that begins
 * during the call waits for the freeze that takes the snapshot (SB-1 in
 * catalog-snap.c), which since TX-7 (txn.c) does not wait for a running
 * commit's I/O: the wait is a freeze's, unless two generations are in
 * flight already.  tests/unit/test-volume-concurrent.c checks both the
 * bounds and the barrier, tests/integration/test-plugin-snapshot-load.sh
 * the bounds through NBD.
 */
int snap_create (struct cairn_pool *pool, const char *vol, const char *snap)
  CAIRN_WUR;
/* Snapshot several volumes (all or none) in one generation. */
int snap_create_many (struct cairn_pool *pool, const char *const *vols,
                      size_t nvols, const char *snap) CAIRN_WUR;
/* Snapshot every visible volume named PREFIX or PREFIX/..., atomically. */
int snap_create_prefix (struct cairn_pool *pool, const char *prefix,
                        const char *snap) CAIRN_WUR;
int snap_delete (struct cairn_pool *pool, const char *vol, const char *snap)
  CAIRN_WUR;
int snap_rename (struct cairn_pool *pool, const char *vol, const char *from,
                 const char *to) CAIRN_WUR;
/* Roll VOL back to its snapshot SNAP, keeping every later state valid
 * (DESIGN §2.4, catalog-rollback.c): VOL stays the same volume (id,
 * properties, quota) with its snapshots up to and including SNAP, and its
 * live state becomes SNAP's again, so that incremental sends, replication
 * and diffs from those snapshots go on.  What came after SNAP -- the live
 * state as it was and the snapshots taken after SNAP, with their clones --
 * becomes KEEP_AS, a writable clone of VOL@SNAP.  Nothing is copied and
 * nothing is lost; delete KEEP_AS (recursively) when its states are no
 * longer wanted.  Space of deleted snapshots still being reclaimed is
 * waited for first.  -EBUSY while VOL or one of its snapshots is open or
 * a receive into VOL is in progress.
 */
int vol_rollback (struct cairn_pool *pool, const char *vol, const char *snap,
                  const char *keep_as) CAIRN_WUR;

/* A writable clone named newname of src (VOL, VOL@SNAP or VOL@#GEN).  A
 * clone of the live VOL holds exactly the writes that began before the
 * call, as snap_create's snapshot does.
 */
int vol_clone (struct cairn_pool *pool, const char *src, const char *newname)
  CAIRN_WUR;

/* ---- continuous checkpoints (checkpoint.c)
 *
 * Every commit that changed a volume is a checkpoint of it (unless the
 * volume's "checkpoints" setting, or the pool's default, is off): its
 * state at the end of that generation, exported read-only as VOL@#GEN and
 * found by VOL@TIME.  A retention policy per volume (or the pool's) says
 * which the collector keeps (retention.h); a checkpoint with a snapshot or
 * clone at its generation, or open by a client, is never collected.
 */
struct vol_checkpoint {
  uint64_t gen;
  uint64_t ctime;             /* its commit, seconds since 1970 */
  uint64_t written;           /* bytes of data written in its generation */
  uint64_t size;              /* the volume's size then (bytes) */
  uint64_t referenced;        /* bytes of data its state maps */
  /* Filled in by vol_checkpoint_list only: */
  char snapshot[VOL_NAME_MAX + 1]; /* the snapshot at its generation, "" */
  uint32_t clones;            /* clones that started from it */
  unsigned opens;             /* handles open on it (a lease) */
  uint64_t unique;            /* bytes dropping it would free now (0 while
                                 a snapshot or clone keeps the state) */
};
/* Call fn for the checkpoints of vol taken in [since, until] (seconds),
 * oldest first; a non-zero return from fn stops the walk (> 0 is not an
 * error).  Costs a few seeks, then walks of the time index, the pins and
 * the checkpoint records over the window listed, and of what died in it
 * until the next kept state: in the order of their keys, with no lookup
 * per checkpoint (unless the clock went back within the window).
 */
int vol_checkpoint_list (struct cairn_pool *pool, const char *vol,
                         uint64_t since, uint64_t until,
                         int (*fn) (void *opaque,
                                    const struct vol_checkpoint *c),
                         void *opaque) CAIRN_WUR;
/* Make the checkpoint that export (VOL@#GEN or VOL@TIME) names a snapshot
 * VOL@snap, with the checkpoint's time; the checkpoint stays a checkpoint
 * too (the collector may drop that reason, never the snapshot).
 */
int vol_checkpoint_promote (struct cairn_pool *pool, const char *export,
                            const char *snap) CAIRN_WUR;
/* Apply vol's retention policy now: fn (may be NULL) gets every
 * checkpoint with its mark ("remove", "keep-within", ..., "protected");
 * unless dry_run, the ones marked remove are dropped (*droppedp counts
 * them; NULL allowed).
 */
int vol_checkpoint_prune (struct cairn_pool *pool, const char *vol,
                          bool dry_run,
                          int (*fn) (void *opaque, uint64_t gen,
                                     int64_t ctime, const char *mark),
                          void *opaque, uint64_t *droppedp) CAIRN_WUR;
/* Run the collector over every volume now (it also runs in the
 * background once a minute while checkpoints exist).
 */
int vol_checkpoint_collect (struct cairn_pool *pool) CAIRN_WUR;
/* Change a checkpoint setting of vol (NULL: the pool's default):
 * "checkpoints" (on | off; value NULL: back to the pool's), "retention"
 * ("inherit" or NULL: back to the pool's policy) or one option of the
 * policy ("keep-within", "keep-last", "keep-minutely", "keep-hourly",
 * "keep-daily", "keep-weekly", "keep-monthly": retention_parse), or the
 * pool's alone, "commit-interval" (a duration from 1 s to 1 h; "inherit"
 * or NULL: back to 5 s), which the commit timer follows at once unless
 * its server gave it a period of its own (pool_start_committer), and
 * "space-threshold" ("5%": 1% to 50%; "inherit" or NULL: back to 5%), the
 * free space under which the collector drops checkpoints beyond the
 * policy.
 */
int vol_checkpoint_set (struct cairn_pool *pool, const char *vol,
                        const char *key, const char *value) CAIRN_WUR;
/* What a volume's snapshots and clones keep of the data it no longer
 * maps, and what only its checkpoints keep (bytes, metadata included):
 * their sum is the volume's held bytes.  Walks the volume's deadlist.
 */
int vol_held_split (struct cairn_pool *pool, const char *vol,
                    uint64_t *snaps, uint64_t *ckpts) CAIRN_WUR;
/* The collector's state, for `cairn status`. */
struct vol_ckpt_status {
  bool default_on;            /* the pool's default */
  uint64_t count_volumes;     /* volumes with a checkpoint kept */
  uint64_t oldest;            /* the oldest kept, seconds since 1970; 0:
                                 none */
  int64_t now;                /* the pool's clock */
  uint64_t collected;         /* dropped since the pool opened */
  uint64_t pressure_dropped;  /* of those, beyond the policy for space */
  uint64_t pressure_events;   /* times space ran short */
  int64_t pressure_last;      /* when it last did (0: never) */
  unsigned commit_interval_ms; /* the commit timer's period now */
  const char *interval_from;  /* whose it is: "server" (its own option),
                                 "pool" (the setting) or "default" */
};
int vol_checkpoint_status (struct cairn_pool *pool,
                           struct vol_ckpt_status *st) CAIRN_WUR;
/* Parse "YYYY-MM-DDTHH:MM:SSZ" (UTC) into seconds since 1970: 0, or
 * -EINVAL with a message saying the form expected.
 */
int vol_parse_time (const char *s, uint64_t *tp) CAIRN_WUR;
struct vol_ckpt_settings {
  bool checkpoints;           /* taken */
  bool own_checkpoints;       /* the volume's own setting, not the pool's */
  char retention[192];        /* the policy, as text */
  bool own_retention;
  uint64_t dropped;           /* checkpoints collected since the pool
                                 opened */
  uint64_t commit_interval;   /* the pool's commit-interval (seconds) */
  bool own_interval;          /* set, not the default */
  unsigned commit_interval_ms; /* what the commit timer uses now */
  bool server_interval;       /* that is the server's own, not the pool's */
  unsigned space_threshold;   /* the pool's space-threshold (per cent) */
  bool own_threshold;         /* set, not the default */
};
int vol_checkpoint_settings (struct cairn_pool *pool, const char *vol,
                             struct vol_ckpt_settings *st) CAIRN_WUR;

/* ---- receiving (for server/receive.c)
 *
 * A receive builds the state it receives in a partial volume: a volume
 * that carries its target's name but that no lookup by name finds (it is
 * not listed, opened, changed or exported) until publishing makes it a
 * snapshot of the target, in one generation.  A name has at most one
 * partial.  With it the engine keeps a state string that it does not
 * interpret (the receive's resume token), so that an interrupted receive
 * can go on, even after a crash, from its last save.
 *
 * An incremental receive starts the partial as a clone of its base, the
 * target's newest snapshot, and publishing swaps the two trees: the target
 * keeps its id, snapshots and clones, and its live state becomes the
 * received one, snapshotted.  That is correct only while the target is
 * exactly its base, so creating and publishing both refuse a target that
 * was written after the base (tree-level: even a write that left the same
 * bytes), or that has a newer snapshot or clone than the base.
 *
 * Unless the receive asks for a rollback (VOL_RECV_ROLLBACK, as `zfs
 * receive -F`): then creating only needs the base snapshot to exist, and
 * publishing first rolls the target back to its base in the same
 * generation: the live volume's writes since the base are discarded and
 * every snapshot newer than the base is destroyed, its space freed (the
 * target mirrors its source).  Older snapshots, the target's id, settings
 * and properties stay.  A rollback is refused (-EBUSY, nothing changed)
 * while a client has the target or any of its snapshots open, or while a
 * clone starts from a state newer than the base.  As the rollback happens
 * only when publishing, a receive that fails or is cut short has destroyed
 * nothing.
 */
#define VOL_RECV_ROLLBACK 1u
#define VOL_PARTIAL_STATE_MAX 1024
/* How many destroyed snapshots a vol_discarded names (it counts them all). */
#define VOL_DISCARD_NAMES 16
/* What a publish with VOL_RECV_ROLLBACK discarded (issue 33, item 8):
 * nothing when snaps is 0 and writes is false.
 */
struct vol_discarded {
  char base[VOL_NAME_MAX + 1];      /* the snapshot rolled back to; "#GEN"
                                       when its record is damaged */
  uint64_t snaps;                   /* snapshots destroyed, all of them */
  char snap[VOL_DISCARD_NAMES][VOL_NAME_MAX + 1]; /* the first ones, oldest
                                       first ("#GEN": a damaged record) */
  bool writes;                      /* the live state was not the newest
                                       snapshot's: writes that no snapshot
                                       kept went */
  char since[VOL_NAME_MAX + 1];     /* that newest snapshot (the base or
                                       a destroyed one) */
};
/* Start a receive into name: from an empty volume of size bytes when base
 * is NULL (name must not exist), else from base, "NAME@SNAP", which must be
 * name's newest state (see above); the partial then gets size bytes (a
 * smaller size discards what lies beyond).  -EEXIST when name exists (full)
 * or has a partial already.  Durable when it returns.
 */
int vol_partial_create (struct cairn_pool *pool, const char *name,
                        const char *base, uint64_t size, const char *state,
                        unsigned flags) CAIRN_WUR;
/* The state string of name's partial (state may be NULL) and a description
 * of it (info may be NULL; origin_id/origin_gen name the base of an
 * incremental receive).  -ENOENT when name has no partial.
 */
int vol_partial_get (struct cairn_pool *pool, const char *name,
                     char state[VOL_PARTIAL_STATE_MAX], struct vol_info *info)
  CAIRN_WUR;
/* Open name's partial for writing (its handle acts as a live volume's);
 * -EBUSY while another handle has it open: one receive at a time.
 */
int vol_partial_open (struct cairn_pool *pool, const char *name,
                      struct cairn_volume **volp) CAIRN_WUR;
/* Replace the state string; every write acknowledged before the call is
 * durable with it.
 */
int vol_partial_save (struct cairn_pool *pool, const char *name,
                      const char *state) CAIRN_WUR;
/* Publish name's partial (closed) as snapshot name@snap with this GUID
 * and creation time, and as name's live state; its state string goes.
 * A full receive makes volume name appear (-EEXIST if one was created
 * meanwhile); an incremental one replaces name's live state (-EBUSY while
 * name or one of its snapshots is open, -EEXIST if name@snap exists,
 * -ESTALE if name is no longer exactly the base), or with
 * VOL_RECV_ROLLBACK first rolls name back to the base (see above; then
 * only a snapshot at or before the base can clash with snap), saying in
 * *discarded (may be NULL; zeroed without a rollback) what that
 * destroyed.  On failure the partial is kept and nothing changed.
 */
int vol_partial_publish (struct cairn_pool *pool, const char *name,
                         const char *snap, uint64_t guid, uint64_t ctime,
                         unsigned flags, struct vol_discarded *discarded)
  CAIRN_WUR;
/* Discard name's partial (closed) and free what only it holds. */
int vol_partial_abort (struct cairn_pool *pool, const char *name) CAIRN_WUR;

/* ---- diff and accounting */

/* The changes between two states of one volume lineage: from is older
 * (VOL@SNAP or VOL@#GEN), to is newer (VOL@SNAP, VOL@#GEN, or VOL for the
 * live state).  fn gets, in order, block-aligned runs of bytes that differ:
 * VOL_DIFF_DATA where `to` holds data, VOL_DIFF_HOLE where it reads zeros.
 * The walk descends only into what was written after `from` (DESIGN §2.5):
 * its cost follows the change, not the volume's size.
 */
#define VOL_DIFF_DATA 0u
#define VOL_DIFF_HOLE 1u
int vol_diff (struct cairn_pool *pool, const char *from, const char *to,
              int (*fn) (void *opaque, uint64_t off, uint64_t len,
                         unsigned type),
              void *opaque) CAIRN_WUR;

/* Space held by a snapshot (DESIGN §2.4), in bytes. */
struct snap_space {
  uint64_t referenced;        /* data the snapshot maps */
  uint64_t unique;            /* what deleting it would free (a dry run) */
  uint64_t written_since;     /* data the live volume wrote after it */
};
int snap_space (struct cairn_pool *pool, const char *vol, const char *snap,
                struct snap_space *sp) CAIRN_WUR;
/* Bytes deletions have freed since the pool was opened (statistics). */
uint64_t vol_reclaimed_bytes (struct cairn_pool *pool);

/* Background deletes (DESIGN §2.4).  Deleting a volume that nothing needs
 * any more takes effect at once (name, record and properties go in one
 * commit); its space comes back in the background, a bounded step per
 * commit, and the work resumes after a restart.
 */
struct vol_reclaim_info {
  uint64_t volumes;           /* deleted volumes whose space is coming back */
  uint64_t ranges;            /* deleted snapshots' held data still being
                                 freed */
  uint64_t freed_bytes;       /* freed by deletions since the pool opened */
  bool running;               /* the background thread is at work */
  char error[512];            /* why it stopped early, "" if it did not */
};
int vol_reclaim_status (struct cairn_pool *pool, struct vol_reclaim_info *info)
  CAIRN_WUR;
/* Reclaim every deleted volume now, in the calling thread; progress (may
 * be NULL) gets the bytes freed so far after each step.
 */
int vol_reclaim_wait (struct cairn_pool *pool,
                      void (*progress) (void *opaque, uint64_t freed_bytes),
                      void *opaque) CAIRN_WUR;
/* One background reclaim in progress: the space of one deleted volume,
 * or the data one deleted snapshot held (reaper.c).  It is listed from
 * the commit that starts it until the one that frees its last block.
 */
struct vol_reclaim_job {
  uint64_t seq;               /* its number, unique while the pool is open */
  bool snapshot;              /* a deleted snapshot's data (else a volume) */
  char what[2 * VOL_NAME_MAX + 48]; /* "VOL", "VOL@SNAP", "VOL, generation
                                 G", or "volume #ID" after a restart */
  uint64_t done_bytes;        /* data freed by it since it was listed */
  uint64_t total_bytes;       /* done_bytes + what is left, 0: unknown */
  int64_t started;            /* when it was listed (seconds since the
                                 epoch) */
};
/* The reclaims in progress, oldest first, in a malloc'd array (*jobsp
 * NULL when *np is 0).  Reads memory only (one short lock): callable from
 * an event loop.
 */
int vol_reclaim_jobs (struct cairn_pool *pool, struct vol_reclaim_job **jobsp,
                      size_t *np) CAIRN_WUR;
/* One bounded step of that work; *more when some is left. */
int vol_reclaim_step (struct cairn_pool *pool, bool *more) CAIRN_WUR;
/* Visits per background step (0: the default); tests use small steps. */
void vol_reclaim_set_budget (struct cairn_pool *pool, size_t visits);

/* ---- volume I/O */

/* Open an export name (see the top of this file).  A snapshot, a pinned
 * generation or a read-only volume opens read-only.
 */
int vol_open (struct cairn_pool *pool, const char *export_name,
              struct cairn_volume **volp) CAIRN_WUR;
void vol_close (struct cairn_volume *vol);
void vol_get_info (struct cairn_volume *vol, struct vol_info *info);
bool vol_is_readonly (struct cairn_volume *vol);
uint64_t vol_size (struct cairn_volume *vol);

/* Byte-granular I/O within the volume's size (-EINVAL beyond it, at most
 * VOL_MAX_IO bytes).  A block that fails its checksum fails the read with
 * -EIO and is counted; it is never returned.
 */
#define VOL_FUA 1u          /* durable before returning */
int vol_pread (struct cairn_volume *vol, void *buf, uint32_t count,
               uint64_t off) CAIRN_WUR;
int vol_pwrite (struct cairn_volume *vol, const void *buf, uint32_t count,
                uint64_t off, unsigned flags) CAIRN_WUR;
/* Write whole blocks (off and count multiples of 4096, -EINVAL otherwise)
 * whose SHA-256s the caller already has, in sums (count / 4096 of them):
 * they are stored as the blocks' checksums instead of being computed
 * again.  They must be the SHA-256s of this data, computed from it (as a
 * stream decoder does with a BLOCKSUMS WRITE it has just verified): a wrong
 * one makes the block unreadable (-EIO) once written.  All-zero blocks
 * still become holes.
 */
int vol_pwrite_sums (struct cairn_volume *vol, const void *buf,
                     uint32_t count, uint64_t off, const uint8_t *sums,
                     unsigned flags) CAIRN_WUR;
/* Read whole blocks (as vol_pwrite_sums) and their verified SHA-256s into
 * sums (count / 4096 of them), a hole's being the SHA-256 of a block of
 * zeros: what a BLOCKSUMS stream's sender needs, at no cost beyond the
 * read's own checks.
 */
int vol_pread_sums (struct cairn_volume *vol, void *buf, uint32_t count,
                    uint64_t off, uint8_t *sums) CAIRN_WUR;
/* Zero and trim both leave holes (no data is stored). */
int vol_zero (struct cairn_volume *vol, uint32_t count, uint64_t off,
              unsigned flags) CAIRN_WUR;
int vol_trim (struct cairn_volume *vol, uint32_t count, uint64_t off,
              unsigned flags) CAIRN_WUR;
/* Zero the bytes past the end of a volume in its last block, when its size
 * is not a whole number of blocks.  A shrink to such a size keeps that
 * block whole; vol_resize calls this before it grows the volume, so that
 * what a shrink discarded does not come back.
 */
int vol_zero_tail (struct cairn_volume *vol) CAIRN_WUR;
/* Make every acknowledged write of the pool durable (a group commit). */
int vol_flush (struct cairn_volume *vol) CAIRN_WUR;

/* Block status: runs of data and holes covering [off, off + count). */
#define VOL_EXTENT_HOLE 1u  /* reads as zeros, stores nothing */
int vol_extents (struct cairn_volume *vol, uint32_t count, uint64_t off,
                 int (*fn) (void *opaque, uint64_t off, uint64_t len,
                            unsigned type),
                 void *opaque) CAIRN_WUR;

/* Read [off, off + count) and check its checksums without returning the
 * data (NBD's cache request): it warms the node cache along the path later
 * reads take.  -EIO for a damaged block, as vol_pread.
 */
int vol_cache (struct cairn_volume *vol, uint32_t count, uint64_t off,
               unsigned flags) CAIRN_WUR;

/* ---- statistics (volstats.c)
 *
 * Every handle counts its own I/O, lock-free.  An operation is counted once
 * when it succeeds, in errors when it fails; a failed read whose data did
 * not match its checksum also counts in csum_errors.  A request that the
 * caller splits into pieces of at most VOL_MAX_IO (a long zero, trim or
 * cache) passes VOL_MORE on every piece but the last, so that it counts as
 * the one operation it was.
 */
#define VOL_MORE 2u         /* a piece of a longer request, not its last */

/* I/O counters of an open volume (for statistics).  bytes_trimmed and
 * bytes_zeroed count every piece of a request, as its bytes.
 */
struct vol_stats {
  uint64_t bytes_read, bytes_written, reads, writes, trims, zeros, flushes;
  uint64_t errors, csum_errors;
  uint64_t extents, caches;
  uint64_t bytes_trimmed, bytes_zeroed;
};
void vol_stats (struct cairn_volume *vol, struct vol_stats *st);

/* How long requests took, per kind (latency.h): the server times each
 * request it serves and records it with vol_stats_time, lock-free.  Only
 * a request that succeeded is recorded, so that a histogram's count is
 * the matching counter of struct vol_stats (reads, writes, ...).
 */
enum vol_op {
  VOL_OP_READ, VOL_OP_WRITE, VOL_OP_FLUSH, VOL_OP_TRIM, VOL_OP_ZERO,
  VOL_OPS
};
struct vol_latency {
  struct lat_hist op[VOL_OPS];
};
void vol_stats_time (struct cairn_volume *vol, enum vol_op op, uint64_t ns);

/* Statistics per export, since the pool was opened: a handle registered
 * with vol_stats_track (the plugin does it for every NBD connection) adds
 * its counters to its export's, both while it is open and after it closed.
 * Exports are named from the catalog as it is when listed (a renamed
 * volume's statistics follow it); one whose volume or snapshot was deleted
 * keeps its last name and is marked gone.  See volstats.c.
 */
#define VOL_EXPORT_NAME_MAX (2 * VOL_NAME_MAX + 2)
struct vol_export_stats {
  char name[VOL_EXPORT_NAME_MAX];   /* VOL, VOL@SNAP or VOL@#GEN */
  uint64_t id;                      /* the volume's id */
  uint64_t gen;                     /* a pinned state's generation; 0: live */
  bool gone;                        /* deleted since */
  unsigned opens;                   /* handles counting now */
  struct vol_stats st;
  struct vol_latency lat;
  /* vol_stats_peek only: the state's part of the name ("daily", "#42";
   * "" for the live volume) and the volume's part.
   */
  char vol[VOL_NAME_MAX + 1], state[VOL_NAME_MAX + 2];
};
int vol_stats_track (struct cairn_volume *vol, const char *export_name)
  CAIRN_WUR;
/* Call fn for each export with statistics, in name order. */
int vol_stats_list (struct cairn_pool *pool,
                    int (*fn) (void *opaque, const struct vol_export_stats *x),
                    void *opaque) CAIRN_WUR;
/* The statistics of one export (zero if it has done no I/O); -ENOENT when
 * no such export exists now.
 */
int vol_stats_export (struct cairn_pool *pool, const char *export_name,
                      struct vol_export_stats *out) CAIRN_WUR;
/* Every export's statistics, as vol_stats_list, for a reader that must
 * not wait on the catalog's trees (the metrics endpoint): it takes only
 * the statistics table's mutex and the catalog's table lock, each for a
 * copy.  A live volume is named as it is now (a renamed volume's
 * statistics follow it); a pinned state by its volume's current name and
 * the state's name when it was last opened ("daily", or "#GEN"): a
 * snapshot renamed since keeps its old name here until it is opened
 * again.  A state is gone only when its volume is.  In no particular order.
 */
int vol_stats_peek (struct cairn_pool *pool,
                    int (*fn) (void *opaque, const struct vol_export_stats *x),
                    void *opaque) CAIRN_WUR;

#endif /* CAIRN_VOLUME_H */
