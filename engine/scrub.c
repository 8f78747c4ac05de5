/* Cairn engine, layer "volume": online scrub (scrub.h).
 *
 * Design note.
 *
 * What a pass reads.  The states of every volume, in volume id order:
 * its pins oldest first (snapshots, kept checkpoints, clone origins),
 * then its live tree.  Of each state only what is born after `since` is
 * read, since = the state's previous pin (its first: the clone's origin
 * generation, when the origin is visible), or the start of the last
 * complete pass with --since-last, whichever is newer: a block that a
 * state shares with the one before it was born at or before that one
 * (births only grow), so each block is read once, and the birth-pruned
 * walk (btree_reap) passes over shared subtrees unread.  Of a pinned
 * state, its tree's nodes and its data; of a live tree, its data (its
 * nodes change under every write: they are read as the checkpoint the
 * next commit makes of them, by the next pass, as blocks born after this
 * one started).  Not read online: the root (catalog) tree, the deadlist
 * tree, the space map and the superblocks, which `cairn fsck --scrub`
 * reads on a stopped pool; and the volumes whose record does not decode
 * (catalog-damage.c, DV-2: nothing may open their trees), which the
 * status names.
 *
 * Order.  Blocks are gathered from the trees in batches of at most
 * BATCH_MAX blocks (SC-4), sorted by where
 * their first copy lies on the devices (member, then offset), and then
 * every copy is read and checked, as ZFS's sorted scrub does: the trees
 * are walked in key order, the devices in address order.  Blocks that
 * lie one after the other are read together (a copy at a time, up to
 * DEV_SCRUB_MAX bytes) and checked quietly; a run in which a copy fails is
 * checked again block by block, which counts and repairs.  A batch is
 * sized to take about two seconds at the rate limit, so a pause waits
 * for at most one batch.
 *
 * Invariants:
 *  SC-1  A copy is rewritten only with another copy that passed the same
 *        check (dev_repair_copies, H1).
 *  SC-2  A copy is rewritten only while what references the block is
 *        held (H2): a pinned state is opened (vol_open, a lease: CK-3 and
 *        the deferred deletes of catalog-snap.c keep it) before its tree
 *        is walked and closed only once its batch is checked, so its
 *        blocks cannot be freed and reused meanwhile; a block of a live
 *        tree, which writers change, is checked without repair, and a
 *        bad one is repaired under the tree's read lock after its mapping
 *        is looked up again and still maps the same address with the same
 *        digest (the rule of volume-read.c's heal_block).  A block freed
 *        and reused since the batch was gathered is not found so and is
 *        left alone: the next pass reads it in its new state.
 *  SC-3  The cursor (volume id, state, key in its tree) saved in the pool
 *        is where the next batch starts: everything before it was checked
 *        in this pass.  It is saved with the counts, in a normal commit
 *        (REQ_SCRUB_SAVE), after a batch at most every SAVE_INTERVAL_MS,
 *        and at every pause, cancel and end; a server that stops between
 *        two saves resumes from the last one and reads again what it read
 *        since (its counts are the saved ones: nothing counts twice).
 *  SC-4  Memory: one batch (at most BATCH_MAX entries of 72 bytes, plus
 *        what the last step of a tree walk adds, about 2,000 more: 2.5 MiB
 *        in all, and the handles of at most BATCH_STATES states), never
 *        the pool's size.
 *  SC-5  What changed between a pause and its resume: states added or
 *        changed behind the cursor hold blocks born after the pass began
 *        (pass_gen), which the next --since-last pass reads; states ahead
 *        of it are read as they are when the cursor reaches them; a state
 *        dropped meanwhile is passed over.
 *
 * States that only a deleted volume kept for its clones holds (hidden: it
 * has no name to open them by) are read through the clones, as far as
 * they reference them: a clone whose origin is hidden reads all its
 * blocks, not only those born after its origin.
 *
 * State machine (s->state, under s->lock; the record follows it):
 *   none|finished|cancelled → running   scrub_start
 *   running → paused                    scrub_pause (thread saves, exits)
 *   running → cancelled                 scrub_cancel
 *   paused → running                    scrub_resume
 *   paused → cancelled                  scrub_cancel
 *   running → finished                  the thread, at the end of a pass
 *   running → (running, interrupted)    the pool closes (the record keeps
 *                                       "running"; the next open shows it
 *                                       paused and interrupted)
 *
 * Record (RK_CONFIG "scrub", little-endian, SCRUB_REC_FIXED + 16 bytes a
 * member):
 *     0 u32 version (1)          4 u32 state (enum scrub_state)
 *     8 u64 pass_gen            16 u64 since_gen
 *    24 u64 last_complete_gen   32 u64 rate (bytes/s, 0: none)
 *    40 u64 cursor volume id    48 u64 cursor state (generation of a pin,
 *                                      SCRUB_LIVE: the live tree)
 *    56 u64 bytes_done          64 u64 bytes_total
 *    72 u64 blocks              80 u64 bad copies
 *    88 u64 repaired            96 u64 lost
 *   104 i64 started            112 u64 elapsed_ms
 *   120 u64 bytes_read         128 u32 members counted   132 u32 flags
 *                                      (1: since_last, 2: cursor's state
 *                                      finished)
 *   136 u16 point length, 138 the point (BTREE_MAX_KEY bytes)
 *   SCRUB_REC_FIXED: for each member, u64 bad copies, u64 repaired
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "catalog-int.h"
#include "scrub.h"
#include "volume-int.h"

#define SCRUB_LIVE UINT64_MAX
#define SCRUB_REC_VERSION 1u
#define SCRUB_REC_FIXED (138u + BTREE_MAX_KEY)
#define SCRUB_REC_MAX (SCRUB_REC_FIXED + 16u * SCRUB_MEMBERS)
#define RECF_SINCE_LAST 1u
#define RECF_STATE_DONE 2u
#define BATCH_MAX 32768u            /* blocks (SC-4) */
#define BATCH_MIN 64u
#define BATCH_STATES 64u
#define LIVE_WINDOW 4096u           /* blocks of a live tree mapped at once */
#define SAVE_INTERVAL_MS 5000

static const char config_key[] = "scrub";

enum scrub_cmd { CMD_NONE, CMD_PAUSE, CMD_CANCEL, CMD_STOP };

/* Where the pass is (SC-3). */
struct cursor {
  uint64_t id, gen;
  bool state_done;            /* the state (id, gen) is all read */
  size_t pointlen;
  uint8_t point[BTREE_MAX_KEY];
};

struct scrub {
  struct catalog *cat;
  pthread_mutex_t oplock;     /* one start/pause/resume/cancel/stop */
  pthread_mutex_t lock;       /* what follows */
  pthread_cond_t cond;        /* commands, for the thread's rate waits */
  bool thread_live;
  bool exited;                /* the thread is not running a pass */
  pthread_t thread;
  enum scrub_cmd cmd;
  struct scrub_status st;     /* counts at the last checked batch */
  struct cursor cur;
  int64_t run_start_ms;       /* this run of the thread */
  uint64_t run_start_elapsed; /* st.elapsed_ms when it began */
  uint64_t run_bytes_read;    /* for the rate limit */
  unsigned save_ms;           /* scrub_opts.save_ms */
};

/* A state open for one batch. */
struct bstate {
  struct cairn_volume *v;
  uint64_t id, gen;
  char name[sizeof ((struct scrub_damage *) 0)->state];
};

/* One block (or node) to check. */
struct entry {
  uint64_t sortkey;           /* member << 48 | device block */
  uint64_t off;               /* pool byte address */
  uint64_t lbn;               /* block in its state; UINT64_MAX: a node */
  uint32_t len, state;
  uint8_t sha[SHA256_LEN];
};

struct batch {
  struct scrub *s;
  struct entry *e;
  size_t n, cap, limit;
  struct bstate states[BATCH_STATES];
  unsigned nstates;
  uint64_t since;             /* of the state being gathered */
  unsigned cur_state;
  uint32_t node_len;
  int err;
};

static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The CLOCK_REALTIME time ms milliseconds from now, for
 * pthread_cond_timedwait.
 */
static struct timespec
deadline_in (int64_t ms)
{
  struct timespec ts;

  clock_gettime (CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000;
  }
  return ts;
}

const char *
scrub_state_name (enum scrub_state s)
{
  static const char *const names[] = {
    "none", "running", "paused", "finished", "cancelled",
  };

  return (unsigned) s < ARRAY_SIZE (names) ? names[s] : "unknown";
}

/* ---------------------------------------------------------------- record */

static void
rec_key (uint8_t *key, size_t *klen)
{
  key[0] = RK_CONFIG;
  memcpy (key + 1, config_key, sizeof config_key - 1);
  *klen = sizeof config_key;
}

/* Encode the state and cursor (lock held); its length. */
static size_t
rec_encode (const struct scrub *s, uint8_t *p)
{
  const struct scrub_status *st = &s->st;
  size_t n = SCRUB_REC_FIXED + 16u * st->nmembers;

  memset (p, 0, n);
  put_le32 (p, SCRUB_REC_VERSION);
  put_le32 (p + 4, st->state);
  put_le64 (p + 8, st->pass_gen);
  put_le64 (p + 16, st->since_gen);
  put_le64 (p + 24, st->last_complete_gen);
  put_le64 (p + 32, st->rate);
  put_le64 (p + 40, s->cur.id);
  put_le64 (p + 48, s->cur.gen);
  put_le64 (p + 56, st->bytes_done);
  put_le64 (p + 64, st->bytes_total);
  put_le64 (p + 72, st->blocks);
  put_le64 (p + 80, st->bad_copies);
  put_le64 (p + 88, st->repaired);
  put_le64 (p + 96, st->lost);
  put_le64 (p + 104, (uint64_t) st->started);
  put_le64 (p + 112, st->elapsed_ms);
  put_le64 (p + 120, st->bytes_read);
  put_le32 (p + 128, st->nmembers);
  put_le32 (p + 132, (st->since_last ? RECF_SINCE_LAST : 0) |
                     (s->cur.state_done ? RECF_STATE_DONE : 0));
  put_le16 (p + 136, (uint16_t) s->cur.pointlen);
  memcpy (p + 138, s->cur.point, s->cur.pointlen);
  for (unsigned i = 0; i < st->nmembers; i++) {
    put_le64 (p + SCRUB_REC_FIXED + 16 * i, st->member_bad[i]);
    put_le64 (p + SCRUB_REC_FIXED + 16 * i + 8, st->member_repaired[i]);
  }
  return n;
}

/* Decode a record into s, checking every field. */
static int
rec_decode (struct scrub *s, const uint8_t *p, size_t n)
{
  struct scrub_status *st = &s->st;
  unsigned members;
  uint32_t flags;

  if (n < SCRUB_REC_FIXED || get_le32 (p) != SCRUB_REC_VERSION ||
      get_le32 (p + 4) > SCRUB_CANCELLED || get_le16 (p + 136) > BTREE_MAX_KEY ||
      (members = get_le32 (p + 128)) > SCRUB_MEMBERS ||
      n != SCRUB_REC_FIXED + 16u * members)
    return cairn_fail (-EIO, "root tree: the scrub record (%zu bytes) does "
                       "not decode", n);
  st->state = (enum scrub_state) get_le32 (p + 4);
  st->pass_gen = get_le64 (p + 8);
  st->since_gen = get_le64 (p + 16);
  st->last_complete_gen = get_le64 (p + 24);
  st->rate = get_le64 (p + 32);
  s->cur.id = get_le64 (p + 40);
  s->cur.gen = get_le64 (p + 48);
  st->bytes_done = get_le64 (p + 56);
  st->bytes_total = get_le64 (p + 64);
  st->blocks = get_le64 (p + 72);
  st->bad_copies = get_le64 (p + 80);
  st->repaired = get_le64 (p + 88);
  st->lost = get_le64 (p + 96);
  st->started = (int64_t) get_le64 (p + 104);
  st->elapsed_ms = get_le64 (p + 112);
  st->bytes_read = get_le64 (p + 120);
  st->nmembers = members;
  flags = get_le32 (p + 132);
  st->since_last = flags & RECF_SINCE_LAST;
  s->cur.state_done = flags & RECF_STATE_DONE;
  s->cur.pointlen = get_le16 (p + 136);
  memcpy (s->cur.point, p + 138, s->cur.pointlen);
  for (unsigned i = 0; i < members; i++) {
    st->member_bad[i] = get_le64 (p + SCRUB_REC_FIXED + 16 * i);
    st->member_repaired[i] = get_le64 (p + SCRUB_REC_FIXED + 16 * i + 8);
  }
  /* A pass that was running when its server stopped (SC-3). */
  if (st->state == SCRUB_RUNNING) {
    st->state = SCRUB_PAUSED;
    st->interrupted = true;
  }
  return 0;
}

/* REQ_SCRUB_SAVE, in the freeze: put the record req->data (req->size
 * bytes).
 */
int
scrub_apply_save (struct catalog *cat, struct cat_request *req)
{
  uint8_t key[16];
  size_t klen;

  rec_key (key, &klen);
  return cat_root_put (cat, key, klen, req->data, req->size);
}

/* Save the state and cursor in a commit (SC-3). */
static int
save (struct scrub *s)
{
  uint8_t rec[SCRUB_REC_MAX];
  struct cat_request req = { .kind = REQ_SCRUB_SAVE, .name = "" };

  pthread_mutex_lock (&s->lock);
  req.size = rec_encode (s, rec);
  pthread_mutex_unlock (&s->lock);
  req.data = rec;
  return cat_submit (s->cat->pool, &req);
}

/* ---------------------------------------------------------------- states */

/* The volume state of id, copied under tlock: false when it is not one a
 * scrub reads (gone, damaged, a receive in progress).
 */
static bool
vol_lookup (struct catalog *cat, uint64_t id, char *name, size_t namelen,
            uint64_t *origin_since, bool *hidden)
{
  struct volstate *vs;
  bool ok = false;

  pthread_mutex_lock (&cat->tlock);
  vs = cat_find_id_locked (cat, id);
  if (vs && !(vs->flags & VOLF_PARTIAL)) {
    struct volstate *o = vs->origin_id ? cat_find_id_locked (cat, vs->origin_id)
                                       : NULL;

    snprintf (name, namelen, "%s", vs->name);
    *hidden = vs->flags & VOLF_HIDDEN;
    /* A hidden origin's states cannot be opened by name: its blocks are
     * read through the clone then.
     */
    *origin_since = o && !(o->flags & (VOLF_HIDDEN | VOLF_PARTIAL))
                    ? vs->origin_gen : 0;
    ok = true;
  }
  pthread_mutex_unlock (&cat->tlock);
  return ok;
}

/* The smallest volume id above id, 0 when none. */
static uint64_t
next_volume (struct catalog *cat, uint64_t id)
{
  uint64_t best = 0;

  pthread_mutex_lock (&cat->tlock);
  for (size_t i = 0; i < cat->nvols; i++) {
    uint64_t x = cat->vols[i]->id;

    if (x > id && (best == 0 || x < best))
      best = x;
  }
  pthread_mutex_unlock (&cat->tlock);
  return best;
}

struct pin_find {
  uint64_t after, found, prev;
};

/* cat_foreach_pin callback: the first pin after `after`, and the one
 * before it.
 */
static int
pin_after (void *opaque, uint64_t gen, const uint8_t *rec, size_t len)
{
  struct pin_find *pf = opaque;

  (void) rec;
  (void) len;
  if (gen > pf->after) {
    pf->found = gen;
    return 1;
  }
  pf->prev = gen;
  return 0;
}

/* The state after the cursor's in scrub order (see the note at the top),
 * with the generation its walk starts after: 1 when there is one (the
 * cursor moved to its start), 0 at the end of the pass.
 */
static int
next_state (struct scrub *s, uint64_t *sincep)
{
  struct catalog *cat = s->cat;
  struct cursor *c = &s->cur;

  for (;;) {
    char name[VOL_NAME_MAX + 1];
    struct pin_find pf = { .after = c->gen };
    uint64_t origin_since;
    bool hidden;
    int r;

    if (c->id != 0 && c->gen != SCRUB_LIVE &&
        vol_lookup (cat, c->id, name, sizeof name, &origin_since, &hidden)) {
      r = cat_foreach_pin (cat, c->id, pin_after, &pf);
      if (r < 0)
        return r;
      if (pf.found && !hidden) {
        c->gen = pf.found;
        *sincep = pf.prev ? pf.prev : origin_since;
        goto found;
      }
      if (!hidden) {
        c->gen = SCRUB_LIVE;
        *sincep = pf.prev ? pf.prev : origin_since;
        goto found;
      }
    }
    c->id = next_volume (cat, c->id);
    c->gen = 0;
    if (c->id == 0)
      return 0;
  }
 found:
  c->state_done = false;
  c->pointlen = 0;
  return 1;
}

/* Open the cursor's state for a batch (SC-2): -ENOENT when it is gone. */
static int
open_state (struct batch *b, struct bstate **bsp)
{
  struct scrub *s = b->s;
  char name[VOL_NAME_MAX + 1], snap[VOL_NAME_MAX + 1];
  uint64_t origin_since;
  struct bstate *bs;
  bool hidden;
  int r;

  if (!vol_lookup (s->cat, s->cur.id, name, sizeof name, &origin_since,
                   &hidden) || hidden)
    return -ENOENT;
  bs = &b->states[b->nstates];
  memset (bs, 0, sizeof *bs);
  bs->id = s->cur.id;
  bs->gen = s->cur.gen;
  if (bs->gen == SCRUB_LIVE)
    snprintf (bs->name, sizeof bs->name, "%s", name);
  else if (vol_state_name (s->cat->pool, bs->id, bs->gen, name, snap) == 0 &&
           snap[0])
    snprintf (bs->name, sizeof bs->name, "%s@%s", name, snap);
  else
    snprintf (bs->name, sizeof bs->name, "%s@#%" PRIu64, name, bs->gen);
  if (bs->gen == SCRUB_LIVE)
    r = vol_open (s->cat->pool, name, &bs->v);
  else {
    char exp[VOL_NAME_MAX + 32];

    snprintf (exp, sizeof exp, "%s@#%" PRIu64, name, bs->gen);
    r = vol_open (s->cat->pool, exp, &bs->v);
  }
  cairn_error_clear ();
  if (r < 0)
    return r == -ENOMEM ? r : -ENOENT;
  b->nstates++;
  *bsp = bs;
  return 0;
}

/* ---------------------------------------------------------------- gather */

/* Add one block or node to the batch. */
static int
add_entry (struct batch *b, uint64_t off, uint32_t len, uint64_t lbn,
           const uint8_t *sha)
{
  struct cairn_dev *dev = pool_dev (b->s->cat->pool);
  struct entry *e;

  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 1024;
    struct entry *ne = realloc (b->e, cap * sizeof *ne);

    if (ne == NULL)
      return cairn_fail (-ENOMEM, "out of memory gathering blocks to scrub");
    b->e = ne;
    b->cap = cap;
  }
  e = &b->e[b->n++];
  e->off = off;
  e->len = len;
  e->lbn = lbn;
  e->state = b->cur_state;
  memcpy (e->sha, sha, SHA256_LEN);
  e->sortkey = off / BLOCK_SIZE;
  if (dev_is_chunked (dev)) {
    unsigned m;
    uint64_t phys, run;

    if (dev_chunk_locate (dev, off, 0, &m, &phys, &run) == 0)
      e->sortkey = (uint64_t) m << 48 | phys / BLOCK_SIZE;
  }
  return 0;
}

/* Visitor: a node of a pinned state born after since. */
static int
on_node (void *opaque, const struct blkptr *bp, unsigned level)
{
  struct batch *b = opaque;

  (void) level;
  if (bp->birth <= b->since)
    return 1;
  b->err = add_entry (b, bp->addr, b->node_len, UINT64_MAX, bp->sha);
  return b->err;
}

/* Visitor: an extent item of a pinned state; its blocks if born after
 * since.
 */
static int
on_item (void *opaque, const uint8_t *key, size_t klen, const uint8_t *val,
         size_t vlen)
{
  struct batch *b = opaque;
  uint64_t len;

  if (klen != 8 || vlen < EXT_HDR ||
      vlen != EXT_HDR + (len = ext_len (val)) * (uint64_t) SHA256_LEN)
    return cairn_fail (-EIO, "scrub: malformed extent item in volume tree");
  if (ext_birth (val) <= b->since)
    return 0;
  for (uint64_t i = 0; i < len && b->err == 0; i++)
    b->err = add_entry (b, (ext_addr (val) + i) * BLOCK_SIZE, BLOCK_SIZE,
                        get_be64 (key) + i,
                        val + EXT_HDR + i * SHA256_LEN);
  return b->err;
}

/* Gather from a pinned state until the batch is full or the state is
 * read (btree_reap over its unchanging tree: SC-2).
 */
static int
gather_pinned (struct batch *b, struct bstate *bs)
{
  struct scrub *s = b->s;
  struct btree_visitor v = { .on_node = on_node, .on_item = on_item,
                             .opaque = b };
  struct btree_root root;
  uint8_t next[BTREE_MAX_KEY];
  size_t nextlen = 0;
  bool done = false;
  int r = 0;

  btree_get_root (vol_tree (bs->v), &root);
  while (!done && b->n < b->limit) {
    /* An item adds at most a node's worth of blocks (about 511). */
    size_t budget = MAX (4, (b->limit - b->n) / 512);

    r = btree_reap (pool_cache (s->cat->pool), &root, b->since,
                    s->cur.pointlen ? s->cur.point : NULL, s->cur.pointlen,
                    budget, &v, next, &nextlen, &done);
    if (r == 0 && b->err)
      r = b->err;
    if (r < 0)
      return r;
    if (!done) {
      memcpy (s->cur.point, next, nextlen);
      s->cur.pointlen = nextlen;
    }
  }
  s->cur.state_done = done;
  return 0;
}

/* Gather the data of a live tree born after since, a window of blocks
 * under its read lock at a time (map_range).
 */
static int
gather_live (struct batch *b, struct bstate *bs)
{
  struct scrub *s = b->s;
  uint64_t nblocks = DIV_ROUND_UP (vol_size (bs->v), BLOCK_SIZE);
  uint64_t lbn = s->cur.pointlen == 8 ? get_be64 (s->cur.point) : 0;

  while (lbn < nblocks && b->n < b->limit) {
    uint64_t n = MIN (nblocks - lbn, LIVE_WINDOW);
    struct map_vec mv = { NULL, 0, 0 };
    int r = map_range (bs->v, lbn, n, &mv, NULL);

    for (size_t i = 0; r == 0 && i < mv.n; i++) {
      const struct mapping *m = &mv.m[i];

      if (m->birth <= b->since)
        continue;
      for (uint64_t j = 0; j < m->n && r == 0; j++)
        r = add_entry (b, (m->addr + j) * BLOCK_SIZE, BLOCK_SIZE, m->lbn + j,
                       m->sha + j * SHA256_LEN);
    }
    map_vec_free (&mv);
    if (r < 0)
      return r;
    lbn += n;
  }
  put_be64 (s->cur.point, lbn);
  s->cur.pointlen = 8;
  s->cur.state_done = lbn >= nblocks;
  return 0;
}

/* Fill the batch from the cursor: 0, with *endp when the pass has no
 * state left.
 */
static int
gather (struct batch *b, bool *endp)
{
  struct scrub *s = b->s;

  *endp = false;
  while (b->n < b->limit && b->nstates < BATCH_STATES) {
    struct bstate *bs;
    uint64_t since;
    int r;

    if (s->cur.state_done) {
      r = next_state (s, &since);
      if (r < 0)
        return r;
      if (r == 0) {
        *endp = true;
        return 0;
      }
      since = MAX (since, s->st.since_gen);
      s->cur.pointlen = 0;
      /* The since of a state is not saved: it follows from the cursor. */
      b->since = since;
    }
    else {
      struct pin_find pf = { .after = s->cur.gen == SCRUB_LIVE ? UINT64_MAX - 1
                                                               : s->cur.gen - 1 };
      char name[VOL_NAME_MAX + 1];
      uint64_t origin_since = 0;
      bool hidden;

      /* Resuming inside a state: its since again. */
      if (vol_lookup (s->cat, s->cur.id, name, sizeof name, &origin_since,
                      &hidden) &&
          cat_foreach_pin (s->cat, s->cur.id, pin_after, &pf) < 0)
        return -EIO;
      b->since = MAX (pf.prev ? pf.prev : origin_since, s->st.since_gen);
    }
    r = open_state (b, &bs);
    if (r == -ENOENT) {         /* gone meanwhile (SC-5) */
      s->cur.state_done = true;
      continue;
    }
    if (r < 0)
      return r;
    b->cur_state = b->nstates - 1;
    r = bs->gen == SCRUB_LIVE ? gather_live (b, bs) : gather_pinned (b, bs);
    if (r < 0)
      return r;
  }
  return 0;
}

/* ---------------------------------------------------------------- check */

static int
entry_cmp (const void *a, const void *b)
{
  const struct entry *x = a, *y = b;

  return x->sortkey < y->sortkey ? -1 : x->sortkey > y->sortkey;
}

/* Name a range with no good copy left (lock held); adjacent blocks of one
 * state make one range.
 */
static void
note_lost (struct scrub *s, const struct bstate *bs, const struct entry *e)
{
  struct scrub_status *st = &s->st;
  bool node = e->lbn == UINT64_MAX;
  uint64_t off = node ? e->off : e->lbn * BLOCK_SIZE;

  if (st->ndamage) {
    struct scrub_damage *d = &st->damage[st->ndamage - 1];

    if (!node && !d->metadata && strcmp (d->state, bs->name) == 0 &&
        d->offset + d->length == off) {
      d->length += e->len;
      return;
    }
  }
  if (st->ndamage == SCRUB_DAMAGE_MAX)
    return;
  st->damage[st->ndamage++] = (struct scrub_damage) {
    .metadata = node, .offset = off, .length = e->len,
  };
  snprintf (st->damage[st->ndamage - 1].state,
            sizeof st->damage[0].state, "%s", bs->name);
}

/* Check a live tree's block again, counting, and repair it, under the
 * tree's read lock, if it still maps where it did with the same digest
 * (SC-2); a block freed and reused meanwhile is left alone (*gonep).
 */
static int
recheck_live (struct bstate *bs, const struct entry *e,
              struct dev_scrub_stats *ds, uint32_t *failedp,
              unsigned *repairedp, bool *gonep)
{
  struct cairn_volume *v = bs->v;
  struct cairn_dev *dev = pool_dev (v->cat->pool);
  struct map_vec mv = { NULL, 0, 0 };
  int r;

  *repairedp = 0;
  btree_rdlock (vol_tree (v));
  r = map_range_locked (v->cat, vol_tree (v), e->lbn, 1, &mv);
  *gonep = r == 0 && (mv.n != 1 || mv.m[0].addr * BLOCK_SIZE != e->off ||
                      memcmp (mv.m[0].sha, e->sha, SHA256_LEN) != 0);
  if (r == 0 && !*gonep)
    r = dev_scrub_copies (dev, e->len, e->off, dev_check_sha256,
                          (void *) e->sha, 0, ds, failedp);
  if (r == 0 && !*gonep && *failedp && ds->lost == 0)
    r = dev_repair_copies (dev, e->len, e->off, dev_check_sha256,
                           (void *) e->sha, *failedp, repairedp);
  btree_unlock (vol_tree (v));
  map_vec_free (&mv);
  return r;
}

/* Wait for the rate limit, or a command (lock not held): true when a
 * command came.
 */
static bool
rate_wait (struct scrub *s)
{
  bool cmd;

  pthread_mutex_lock (&s->lock);
  if (s->st.rate && s->cmd == CMD_NONE) {
    int64_t due = s->run_start_ms +
                  (int64_t) (s->run_bytes_read * 1000 / s->st.rate);
    int64_t now = now_ms ();

    if (due > now) {
      struct timespec ts = deadline_in (due - now);

      pthread_cond_timedwait (&s->cond, &s->lock, &ts);
    }
  }
  cmd = s->cmd == CMD_STOP;
  pthread_mutex_unlock (&s->lock);
  return cmd;
}

/* Count a checked entry, and what was found in it (lock not held). */
static void
account (struct scrub *s, const struct bstate *bs, const struct entry *e,
         const struct dev_scrub_stats *ds, uint32_t failed, unsigned repaired)
{
  struct cairn_dev *dev = pool_dev (s->cat->pool);
  unsigned copies = dev_copies (dev);

  pthread_mutex_lock (&s->lock);
  s->st.blocks++;
  s->st.bytes_done += e->len;
  s->st.bytes_read += (uint64_t) e->len * copies;
  s->run_bytes_read += (uint64_t) e->len * copies;
  s->st.bad_copies += ds->bad_copies;
  s->st.repaired += repaired;
  s->st.lost += ds->lost;
  if (ds->lost)
    note_lost (s, bs, e);
  for (unsigned k = 0; dev_is_chunked (dev) && failed >> k; k++) {
    unsigned m;
    uint64_t phys, run;

    if (!(failed & (1u << k)) ||
        dev_chunk_locate (dev, e->off, k, &m, &phys, &run) < 0 ||
        m >= SCRUB_MEMBERS)
      continue;
    s->st.member_bad[m]++;
    /* Every failed copy was rewritten, or none counts as repaired. */
    if (repaired == (unsigned) __builtin_popcount (failed))
      s->st.member_repaired[m]++;
  }
  pthread_mutex_unlock (&s->lock);
}

/* Check every copy of one entry, count what is found, and repair the bad
 * ones (SC-1, SC-2).
 */
static int
check_one (struct batch *b, const struct entry *e)
{
  struct cairn_dev *dev = pool_dev (b->s->cat->pool);
  struct bstate *bs = &b->states[e->state];
  struct dev_scrub_stats ds = { 0 };
  unsigned repaired = 0;
  uint32_t failed = 0;
  int r;

  /* A live tree's block is first checked quietly, outside its lock: a
   * failure may be a block freed and reused since it was gathered.
   */
  r = dev_scrub_copies (dev, e->len, e->off, dev_check_sha256,
                        (void *) e->sha,
                        bs->gen == SCRUB_LIVE ? DEV_SCRUB_QUIET : 0, &ds,
                        &failed);
  if (r == 0 && failed && bs->gen == SCRUB_LIVE) {
    bool gone;

    r = recheck_live (bs, e, &ds, &failed, &repaired, &gone);
    if (r == 0 && gone)
      return 0;                 /* not checked: the next pass reads it */
  }
  else if (r == 0 && failed && ds.lost == 0)
    r = dev_repair_copies (dev, e->len, e->off, dev_check_sha256,
                           (void *) e->sha, failed, &repaired);
  if (r < 0 && r != -EBADMSG)
    return r;
  cairn_error_clear ();
  account (b->s, bs, e, &ds, failed, repaired);
  return 0;
}

/* A run of entries that lie one after the other in the pool. */
struct run {
  const struct entry *e;
  size_t n;
};

/* dev_check_fn of a run: every entry's piece matches its digest. */
static bool
check_run (const void *buf, size_t len, void *opaque)
{
  const struct run *run = opaque;
  const uint8_t *p = buf;

  (void) len;
  for (size_t i = 0; i < run->n; i++) {
    const struct entry *e = &run->e[i];

    if (!dev_check_sha256 (p + (e->off - run->e[0].off), e->len,
                           (void *) e->sha))
      return false;
  }
  return true;
}

/* Check every copy of every entry, in device order, and repair the bad
 * ones.  Entries that lie one after the other are read together, each
 * copy at once, and checked quietly; only a run with a copy that fails is
 * checked again entry by entry (check_one), which counts and repairs.
 * Stops early only for a pool that closes.
 */
static int
check_batch (struct batch *b)
{
  struct scrub *s = b->s;
  struct cairn_dev *dev = pool_dev (s->cat->pool);
  size_t i = 0;

  if (b->n > 1)                 /* b->e is NULL in an empty batch */
    qsort (b->e, b->n, sizeof *b->e, entry_cmp);
  while (i < b->n) {
    struct run run = { &b->e[i], 1 };
    uint64_t len = b->e[i].len;
    struct dev_scrub_stats ds = { 0 };
    uint32_t failed = 0;
    int r;

    while (i + run.n < b->n &&
           b->e[i + run.n].off == b->e[i].off + len &&
           len + b->e[i + run.n].len <= DEV_SCRUB_MAX) {
      len += b->e[i + run.n].len;
      run.n++;
    }
    if (rate_wait (s))
      return -ECANCELED;
    r = dev_scrub_copies (dev, len, b->e[i].off, check_run, &run,
                          DEV_SCRUB_QUIET, &ds, &failed);
    for (size_t j = 0; r == 0 && j < run.n; j++) {
      const struct entry *e = &run.e[j];

      if (failed)
        r = check_one (b, e);
      else
        account (s, &b->states[e->state], e, &ds, 0, 0);
    }
    if (r < 0)
      return r;
    i += run.n;
  }
  return 0;
}

/* Close the batch's states and empty it. */
static void
batch_reset (struct batch *b)
{
  for (unsigned i = 0; i < b->nstates; i++)
    vol_close (b->states[i].v);
  b->nstates = 0;
  b->n = 0;
  b->err = 0;
}

/* ---------------------------------------------------------------- thread */

/* The blocks a batch may hold: about two seconds of reading at the rate
 * limit (so a pause waits that long at most), BATCH_MAX without one.
 */
static size_t
batch_limit (const struct scrub *s, unsigned copies)
{
  uint64_t n;

  if (s->st.rate == 0)
    return BATCH_MAX;
  n = s->st.rate * 2 / ((uint64_t) BLOCK_SIZE * copies);
  return (size_t) MAX (BATCH_MIN, MIN (n, BATCH_MAX));
}

/* The scrub thread: batches until the pass ends or a command comes. */
static void *
scrub_thread (void *arg)
{
  struct scrub *s = arg;
  struct cairn_dev *dev = pool_dev (s->cat->pool);
  struct pool_info pi;
  struct batch b = { .s = s };
  struct scrub_status *counts = malloc (sizeof *counts);
  int64_t saved = now_ms ();
  enum scrub_cmd cmd = CMD_NONE;
  bool end = false;
  int r = 0;

  pool_info (s->cat->pool, &pi);
  b.node_len = pi.node_size;
  if (counts == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory starting the scrub");
    end = true;
  }
  while (!end) {
    struct cursor before;

    pthread_mutex_lock (&s->lock);
    cmd = s->cmd;
    b.limit = batch_limit (s, dev_copies (dev));
    before = s->cur;
    *counts = s->st;
    pthread_mutex_unlock (&s->lock);
    if (cmd != CMD_NONE)
      break;
    r = gather (&b, &end);
    if (r == 0)
      r = check_batch (&b);
    batch_reset (&b);
    if (r < 0) {
      /* Keep the cursor and counts of the last batch checked whole: a
       * resume checks this one again (SC-3).  Repairs it made stay made.
       */
      pthread_mutex_lock (&s->lock);
      s->cur = before;
      counts->state = s->st.state;
      counts->elapsed_ms = s->st.elapsed_ms;
      s->st = *counts;
      pthread_mutex_unlock (&s->lock);
      break;
    }
    pthread_mutex_lock (&s->lock);
    s->st.elapsed_ms = s->run_start_elapsed +
                       (uint64_t) (now_ms () - s->run_start_ms);
    s->st.cursor_id = s->cur.id;
    s->st.cursor_gen = s->cur.gen;
    if (end) {
      s->st.state = SCRUB_FINISHED;
      s->st.last_complete_gen = s->st.pass_gen;
    }
    pthread_mutex_unlock (&s->lock);
    if (!end && now_ms () - saved >= (s->save_ms ? s->save_ms
                                                 : SAVE_INTERVAL_MS)) {
      if (save (s) < 0)
        cairn_error_clear ();   /* the next save, or the cursor before */
      saved = now_ms ();
    }
  }
  free (b.e);
  free (counts);
  pthread_mutex_lock (&s->lock);
  cmd = s->cmd;
  s->st.elapsed_ms = s->run_start_elapsed +
                     (uint64_t) (now_ms () - s->run_start_ms);
  if (cmd == CMD_PAUSE)
    s->st.state = SCRUB_PAUSED;
  else if (cmd == CMD_CANCEL)
    s->st.state = SCRUB_CANCELLED;
  else if (r < 0 && cmd != CMD_STOP) {
    /* An error the scrub cannot go past (the pool failed, out of memory):
     * it stops where it was, to be resumed.
     */
    s->st.state = SCRUB_PAUSED;
    s->st.interrupted = true;
  }
  pthread_mutex_unlock (&s->lock);
  /* A pool that closes keeps the last save (SC-3): its commit is over. */
  if (cmd != CMD_STOP && save (s) < 0)
    cairn_error_clear ();
  pthread_mutex_lock (&s->lock);
  s->exited = true;
  pthread_cond_broadcast (&s->cond);
  pthread_mutex_unlock (&s->lock);
  return NULL;
}

/* ---------------------------------------------------------------- control */

/* The scrub of a pool, loaded from its record the first time (catalog
 * load).
 */
int
scrub_load (struct catalog *cat)
{
  struct scrub *s = calloc (1, sizeof *s);
  uint8_t key[16], rec[SCRUB_REC_MAX];
  size_t klen, vlen;
  int r;

  if (s == NULL)
    return cairn_fail (-ENOMEM, "out of memory loading the scrub state");
  s->cat = cat;
  pthread_mutex_init (&s->oplock, NULL);
  pthread_mutex_init (&s->lock, NULL);
  pthread_cond_init (&s->cond, NULL);
  s->cur.state_done = true;
  s->exited = true;
  rec_key (key, &klen);
  r = cat_root_get (cat, key, klen, rec, sizeof rec, &vlen);
  if (r == 0)
    r = rec_decode (s, rec, vlen);
  else if (r == -ENOENT || r == -ENOSPC)
    r = 0;
  if (r < 0) {
    /* A record that does not decode is not kept: the next pass starts a
     * new one.  Said where status is asked for? It is: state none.
     */
    memset (&s->st, 0, sizeof s->st);
    cairn_error_clear ();
    r = 0;
  }
  cat->scrub = s;
  return r;
}

/* Start the thread on the current state (oplock held). */
static int
run (struct scrub *s)
{
  int r;

  pthread_mutex_lock (&s->lock);
  s->cmd = CMD_NONE;
  s->st.state = SCRUB_RUNNING;
  s->st.interrupted = false;
  s->run_start_ms = now_ms ();
  s->run_start_elapsed = s->st.elapsed_ms;
  s->run_bytes_read = 0;
  s->exited = false;
  pthread_mutex_unlock (&s->lock);
  r = pthread_create (&s->thread, NULL, scrub_thread, s);
  if (r != 0)
    return cairn_fail (-r, "cannot start the scrub thread");
  s->thread_live = true;
  return 0;
}

/* Send the thread a command and wait for it to end (oplock held). */
static void
halt (struct scrub *s, enum scrub_cmd cmd)
{
  if (!s->thread_live)
    return;
  pthread_mutex_lock (&s->lock);
  s->cmd = cmd;
  pthread_cond_broadcast (&s->cond);
  pthread_mutex_unlock (&s->lock);
  pthread_join (s->thread, NULL);
  s->thread_live = false;
}

/* Is the thread still running a pass?  A finished one is joined. */
static bool
running (struct scrub *s)
{
  enum scrub_state st;

  pthread_mutex_lock (&s->lock);
  st = s->st.state;
  pthread_mutex_unlock (&s->lock);
  if (st != SCRUB_RUNNING && s->thread_live) {
    pthread_join (s->thread, NULL);
    s->thread_live = false;
  }
  return st == SCRUB_RUNNING && s->thread_live;
}

static int
get (struct cairn_pool *pool, struct scrub **sp)
{
  struct catalog *cat;
  int r = catalog_get (pool, &cat);

  if (r < 0)
    return r;
  *sp = cat->scrub;
  return 0;
}

int
scrub_start (struct cairn_pool *pool, const struct scrub_opts *o)
{
  struct cairn_dev *dev = pool_dev (pool);
  struct pool_info pi;
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  if (pool_is_readonly (pool))
    return cairn_fail (-EROFS, "the pool is open read-only: a scrub saves its "
                       "progress in the pool and repairs what it finds, so it "
                       "needs a pool open for writing%s",
                       dev_is_chunked (dev) ? " (a pool opened degraded is "
                       "read-only: bring its missing devices back first)" : "");
  pthread_mutex_lock (&s->oplock);
  if (running (s))
    r = cairn_fail (-EBUSY, "a scrub is running: 'cairn scrub status' shows "
                    "it; pause or cancel it first");
  else if (s->st.state == SCRUB_PAUSED)
    r = cairn_fail (-EBUSY, "a scrub is paused%s: 'cairn scrub resume' "
                    "continues it, 'cairn scrub cancel' ends it",
                    s->st.interrupted ? " (interrupted by a restart)" : "");
  if (r == 0) {
    struct scrub_status *st = &s->st;
    uint64_t last = st->last_complete_gen;

    if (o->since_last && last == 0)
      r = cairn_fail (-ENOENT, "no scrub pass has completed on this pool: "
                      "run 'cairn scrub start' without --since-last first");
    if (r == 0) {
      pool_info (pool, &pi);
      memset (st, 0, sizeof *st);
      memset (&s->cur, 0, sizeof s->cur);
      s->cur.state_done = true;
      st->last_complete_gen = last;
      st->since_last = o->since_last;
      st->since_gen = o->since_last ? last : 0;
      st->pass_gen = pi.generation;
      st->rate = o->rate;
      s->save_ms = o->save_ms;
      st->bytes_total = pi.space.allocated * BLOCK_SIZE;
      st->started = (int64_t) time (NULL);
      if (dev_is_chunked (dev)) {
        struct dev_chunk_info ci;

        dev_chunk_info (dev, &ci);
        st->nmembers = MIN (ci.nmembers, SCRUB_MEMBERS);
      }
      st->state = SCRUB_RUNNING;
      r = save (s);             /* durable before it runs (SC-3) */
      if (r == 0)
        r = run (s);
    }
  }
  pthread_mutex_unlock (&s->oplock);
  return r;
}

int
scrub_pause (struct cairn_pool *pool)
{
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  pthread_mutex_lock (&s->oplock);
  if (!running (s))
    r = cairn_fail (-ENOENT, "no scrub is running (%s)",
                    scrub_state_name (s->st.state));
  else
    halt (s, CMD_PAUSE);
  pthread_mutex_unlock (&s->oplock);
  return r;
}

int
scrub_resume (struct cairn_pool *pool, uint64_t rate)
{
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  if (pool_is_readonly (pool))
    return cairn_fail (-EROFS, "the pool is open read-only: a scrub cannot "
                       "resume on it");
  pthread_mutex_lock (&s->oplock);
  if (running (s) || s->st.state != SCRUB_PAUSED)
    r = cairn_fail (-ENOENT, "no scrub is paused (%s): 'cairn scrub start' "
                    "begins a pass", running (s) ? "one is running"
                    : scrub_state_name (s->st.state));
  else {
    if (rate != UINT64_MAX)
      s->st.rate = rate;
    /* Running, in the record too: a restart from now on shows it
     * interrupted (SC-3).
     */
    s->st.state = SCRUB_RUNNING;
    s->st.interrupted = false;
    r = save (s);
    if (r == 0)
      r = run (s);
    else
      s->st.state = SCRUB_PAUSED;
  }
  pthread_mutex_unlock (&s->oplock);
  return r;
}

int
scrub_cancel (struct cairn_pool *pool)
{
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  pthread_mutex_lock (&s->oplock);
  if (running (s))
    halt (s, CMD_CANCEL);
  else if (s->st.state == SCRUB_PAUSED) {
    if (pool_is_readonly (pool))
      r = cairn_fail (-EROFS, "the pool is open read-only: the paused scrub "
                      "cannot be cancelled on it");
    else {
      s->st.state = SCRUB_CANCELLED;
      s->st.interrupted = false;
      r = save (s);
    }
  }
  else
    r = cairn_fail (-ENOENT, "no scrub is running or paused (%s)",
                    scrub_state_name (s->st.state));
  pthread_mutex_unlock (&s->oplock);
  return r;
}

int
scrub_status (struct cairn_pool *pool, struct scrub_status *st)
{
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  pthread_mutex_lock (&s->lock);
  *st = s->st;
  if (st->state == SCRUB_RUNNING)
    st->elapsed_ms = s->run_start_elapsed +
                     (uint64_t) (now_ms () - s->run_start_ms);
  st->cursor_id = s->cur.id;
  st->cursor_gen = s->cur.gen;
  pthread_mutex_unlock (&s->lock);
  /* The damaged records are fixed once loaded (DV-1). */
  st->nunread = MIN (s->cat->ndamaged, SCRUB_DAMAGE_MAX);
  for (size_t i = 0; i < st->nunread; i++)
    snprintf (st->unread[i], sizeof st->unread[i], "%s",
              s->cat->damaged[i].name);
  return 0;
}

int
scrub_wait (struct cairn_pool *pool, bool (*stop) (void *opaque),
            void *opaque)
{
  struct scrub *s;
  int r = get (pool, &s);

  if (r < 0)
    return r;
  pthread_mutex_lock (&s->lock);
  while (!s->exited) {
    struct timespec ts = deadline_in (200);

    if (stop && stop (opaque)) {
      r = cairn_fail (-ECANCELED, "stopped waiting for the scrub (it goes "
                      "on)");
      break;
    }
    pthread_cond_timedwait (&s->cond, &s->lock, &ts);
  }
  pthread_mutex_unlock (&s->lock);
  return r;
}

/* Stop the thread without saving (the pool closes: SC-3); and free. */
void
scrub_stop (struct catalog *cat)
{
  struct scrub *s = cat->scrub;

  if (s == NULL)
    return;
  pthread_mutex_lock (&s->oplock);
  halt (s, CMD_STOP);
  pthread_mutex_unlock (&s->oplock);
}

void
scrub_free (struct catalog *cat)
{
  struct scrub *s = cat->scrub;

  if (s == NULL)
    return;
  scrub_stop (cat);
  pthread_mutex_destroy (&s->oplock);
  pthread_mutex_destroy (&s->lock);
  pthread_cond_destroy (&s->cond);
  free (s);
  cat->scrub = NULL;
}
