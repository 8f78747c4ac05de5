/* Cairn engine, layer "dev": a pool of several devices (DESIGN §2.7).
 *
 * A chunked device is a logical device over n member devices.  Its byte
 * addresses are the pool's logical addresses, so the layers above (space
 * map, B-trees, superblock ring, volumes) run on it unchanged: a chunk
 * map sends each logical range to stripes on the members, as btrfs's does.
 *
 * Layout.  Each member keeps its first MEMBER_DATA_START bytes for two
 * copies of its label (at 0 and LABEL_SIZE); chunks' stripes follow.  The
 * logical address space is a run of chunks, each stripe_size * width
 * bytes long.  Inside a chunk, logical offset o falls in stripe unit
 * u = o / stripe_len, column u % width, row u / width, at byte
 * row * stripe_len + o % stripe_len of that column's stripes; column c's
 * copy k is stripe c * ncopies + k.  So:
 *
 *   profile        ncopies  width   stripes of a chunk on
 *   single            1       1     the member with the most room
 *   dup               2       1     one member, two places
 *   mirror            2       1     two distinct members
 *   mirror3           3       1     three distinct members
 *   stripe            1       n     every member (btrfs's raid0)
 *   stripe-mirror     2      n/2    every member, pairs mirrored (raid10)
 *
 * Label (LABEL_SIZE bytes, little-endian, two copies a member):
 *
 *     0  magic "CAIRNDEV"
 *     8  u32 label format version (1)
 *    12  u32 replace flags: 1 a replace is in progress, 2 the member
 *        replaced missed writes (dev-replace.c, C7); 0 otherwise
 *    16  pool UUID (the pool's superblocks carry the same)
 *    32  this member's UUID
 *    48  u32 this member's index in the member table
 *    52  u32 number of members
 *    56  u64 label generation (1: written by format; + 1 a label update)
 *    64  u32 profile (enum dev_profile)
 *    68  u32 copies of each byte (ncopies)
 *    72  u32 columns a chunk is striped over (width)
 *    76  u32 stripe unit in bytes (stripe_len)
 *    80  u64 bytes of one stripe (stripe_size)
 *    88  u32 number of chunks
 *    92  u32 during a replace: the index of the member replaced
 *    96  u64 logical size in bytes (the sum of the chunks' lengths)
 *   104  during a replace: the new member's UUID (16 bytes), then u64 the
 *        logical bytes below which its copy is durable (the cursor)
 *   128  member table, 32 bytes a member: UUID, u64 size in bytes (as
 *        labelled), u64 reserved zero
 *   128 + 32 * members: chunk table, a chunk each: u64 logical start, u64
 *        length, then ncopies * width stripes of u32 member index, u32
 *        reserved zero, u64 byte offset on that member
 *   LABEL_SIZE - 32: SHA-256 of the bytes before it
 *
 * Every member's label holds the whole chunk map and member table, so any
 * one member bootstraps the pool, and a member that is missing is named
 * by its UUID and index.  This first step fixes the chunk map at format
 * time, mapping the members whole, with one profile for data and
 * metadata alike: no copy-on-write chunk tree, no conversion, no device
 * add or remove yet; a member can be replaced (dev-replace.c).  Chunks are
 * placed while enough members have room for one more (every member, for a
 * stripe); what is left on the others stays unused.  The logical device
 * cannot tell a cached read (no pread_cached), so a pool on it checks
 * every read (dev.h, "Blocks whose copy..."): the members' caches are not
 * trusted.
 *
 * Label generations.  A label update (labels_update: a replace's start,
 * cursor saves, end or cancel) writes generation g + 1 to every member
 * that is read, and to a replace's target first; on each device both
 * copies, one after the other, each flushed before the next, so a cut
 * leaves at least one copy whole.  A device's label is its valid copy of
 * the higher generation.  The open takes the newest label among the
 * devices named (highest generation that validates) as the truth, and
 * places every other device by it: its UUID at its index in the member
 * table, a member; the UUID of a replace's target at the index replaced,
 * the target; a UUID the table no longer has, a device that left the pool
 * (replaced), not used; anything else, an error.  A cut between two
 * label writes so leaves a set that opens: the generations differ in the
 * replace fields and at most one member table entry, and each device is
 * placed the same whichever label wins.  The layout (shape and chunk
 * table) never changes between generations and must agree bytewise.
 *
 * Invariants:
 *  C1. Copies of a column are on distinct members (mirror, mirror3,
 *      stripe-mirror), and a chunk's columns are on distinct members
 *      (stripe, stripe-mirror); dup's two copies are on one member at
 *      offsets that do not overlap.
 *  C2. A write reaches every copy or fails (a failed member write counts
 *      WRITE on it); the pool above latches failed on that (§2.3).
 *  C3. A plain read reads the first copy whose member is present; reads
 *      that check retry the others (dev.c, dev_pread_checked).
 *  C4. A device opened degraded (members missing) is read-only: writes
 *      that skipped the missing copies would leave them stale, and a stale
 *      superblock slot on a returning member validates by itself.  A
 *      missing member that a replace's target stands in for is not
 *      missing (dev-replace.c, C5-C8 for the replace's own invariants).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "dev-chunk-int.h"
#include "sha256.h"

static const char *const profile_names[DEV_PROFILE_COUNT] = {
  [DEV_PROFILE_SINGLE] = "single",
  [DEV_PROFILE_DUP] = "dup",
  [DEV_PROFILE_MIRROR] = "mirror",
  [DEV_PROFILE_MIRROR3] = "mirror3",
  [DEV_PROFILE_STRIPE] = "stripe",
  [DEV_PROFILE_STRIPE_MIRROR] = "stripe-mirror",
};

static const struct cairn_dev_ops chunk_ops;

/* The profile a word names. */
int
dev_profile_parse (const char *word, enum dev_profile *p)
{
  for (unsigned i = 0; i < DEV_PROFILE_COUNT; i++)
    if (strcmp (word, profile_names[i]) == 0) {
      *p = (enum dev_profile) i;
      return 0;
    }
  return cairn_fail (-EINVAL, "unknown profile '%s': use single, dup, mirror, "
                     "mirror3, stripe or stripe-mirror", word);
}

/* The word for a profile. */
const char *
dev_profile_name (enum dev_profile p)
{
  return (unsigned) p < DEV_PROFILE_COUNT ? profile_names[p] : "unknown";
}

/* Copies and columns of a profile over n members; -EINVAL with the reason
 * when n members cannot hold it.
 */
static int
profile_shape (enum dev_profile p, unsigned n, unsigned *ncopies,
               unsigned *width)
{
  static const unsigned need[DEV_PROFILE_COUNT] = { 1, 1, 2, 3, 1, 4 };

  if ((unsigned) p >= DEV_PROFILE_COUNT)
    return cairn_fail (-EINVAL, "unknown profile %u", (unsigned) p);
  if (n < need[p])
    return cairn_fail (-EINVAL, "profile %s needs at least %u devices, "
                       "not %u", profile_names[p], need[p], n);
  *ncopies = p == DEV_PROFILE_DUP || p == DEV_PROFILE_MIRROR ||
             p == DEV_PROFILE_STRIPE_MIRROR ? 2 : p == DEV_PROFILE_MIRROR3 ? 3 : 1;
  *width = p == DEV_PROFILE_STRIPE ? MIN (n, STRIPES_MAX)
         : p == DEV_PROFILE_STRIPE_MIRROR ? MIN (n / 2, STRIPES_MAX / 2) : 1;
  return 0;
}

/* Bytes of a label's chunk entry. */
static inline size_t
chunk_entry_size (unsigned nstripes)
{
  return 16 + 16 * (size_t) nstripes;
}

/* Where the chunk table starts in a label. */
static inline size_t
chunk_table_off (unsigned nmembers)
{
  return LABEL_MEMBERS_OFF + LABEL_MEMBER_SIZE * (size_t) nmembers;
}

/* ---------------------------------------------------------------- mapping */

/* The chunk holding logical byte off (off < dev.size). */
const struct chunk *
chunk_find (const struct chunk_dev *c, uint64_t off)
{
  unsigned lo = 0, hi = c->nchunks;

  while (hi - lo > 1) {
    unsigned mid = lo + (hi - lo) / 2;

    if (c->chunk[mid].logical <= off)
      lo = mid;
    else
      hi = mid;
  }
  return &c->chunk[lo];
}

/* Where copy k of logical byte off lies, and how many bytes stay on that
 * stripe from there.
 */
void
chunk_map (const struct chunk_dev *c, uint64_t off, unsigned k,
           const struct stripe **sp, uint64_t *physp, uint64_t *runp)
{
  const struct chunk *ch = chunk_find (c, off);
  uint64_t o = off - ch->logical, unit = o / c->stripe_len;
  uint64_t col = unit % c->width, row = unit / c->width;
  uint64_t in = o % c->stripe_len;

  *sp = &ch->stripe[col * c->ncopies + k];
  *physp = (*sp)->phys + row * c->stripe_len + in;
  /* Unstriped, a stripe is one run to the chunk's end. */
  *runp = c->width == 1 ? ch->length - o : c->stripe_len - in;
}

/* The device that member i's copies are read from: NULL when it is
 * missing, or when it is a replace's source that missed writes (C5).
 */
struct cairn_dev *
member_dev (struct chunk_dev *c, unsigned i)
{
  if (__atomic_load_n (&c->rep.active, __ATOMIC_ACQUIRE) &&
      i == c->rep.index &&
      __atomic_load_n (&c->rep.source_stale, __ATOMIC_RELAXED))
    return NULL;
  return __atomic_load_n (&c->member[i].dev, __ATOMIC_ACQUIRE);
}

/* Write a run of member i at phys: on the member, and on a replace's
 * target when i is being replaced (C5; io_lock held for reading).
 */
static int
member_write (struct chunk_dev *c, unsigned i, const void *p, size_t run,
              uint64_t phys, uint64_t off, unsigned k)
{
  struct member *m = &c->member[i];
  struct cairn_dev *d = member_dev (c, i);
  struct cairn_dev *t = c->rep.active && i == c->rep.index ? c->rep.target
                                                            : NULL;
  int r = 0;

  if (d == NULL && t == NULL)
    return cairn_fail (-ENXIO, "%s: copy %u of byte %" PRIu64 " is on "
                       "missing device %u", c->dev.name, k, off, i);
  if (t)
    r = dev_pwrite (t, p, run, phys);
  if (r == 0 && d)
    r = dev_pwrite (d, p, run, phys);
  if (r < 0)
    __atomic_add_fetch (&m->write_errors, 1, __ATOMIC_RELAXED);
  return r;
}

/* Read (write) copy k of [off, off + len), a run on one member at a time:
 * -ENXIO when a piece of it is on a missing member; a member's failure
 * counts READ (WRITE) on it.  Writes hold io_lock for reading.
 */
static int
chunk_io_copy (struct chunk_dev *c, uint8_t *p, size_t len, uint64_t off,
               unsigned k, bool write)
{
  while (len > 0) {
    const struct stripe *s;
    uint64_t phys, run;
    struct cairn_dev *d;
    int r;

    chunk_map (c, off, k, &s, &phys, &run);
    run = MIN (run, len);
    if (write)
      r = member_write (c, s->member, p, run, phys, off, k);
    else if ((d = member_dev (c, s->member)) == NULL)
      return cairn_fail (-ENXIO, "%s: copy %u of byte %" PRIu64 " is on "
                         "missing device %" PRIu32, c->dev.name, k, off,
                         s->member);
    else if ((r = dev_pread (d, p, run, phys)) < 0)
      __atomic_add_fetch (&c->member[s->member].read_errors, 1,
                          __ATOMIC_RELAXED);
    if (r < 0)
      return r;
    p += run;
    off += run;
    len -= run;
  }
  return 0;
}

/* Read copy k of [off, off + len) (dev-replace.c reads so too). */
int
chunk_read_copy (struct chunk_dev *c, void *buf, size_t len, uint64_t off,
                 unsigned k)
{
  return chunk_io_copy (c, buf, len, off, k, false);
}

/* Read copy k of [off, off + len). */
static int
chunk_pread_copy (struct cairn_dev *dev, void *buf, size_t len, uint64_t off,
                  unsigned k)
{
  return chunk_io_copy (to_chunk_dev (dev), buf, len, off, k, false);
}

/* Write copies [k0, k1) of [off, off + len) (never on a read-only device:
 * C4), with io_lock held for reading.
 */
static int
chunk_write_copies (struct chunk_dev *c, const void *buf, size_t len,
                    uint64_t off, unsigned k0, unsigned k1)
{
  int r = 0;

  pthread_rwlock_rdlock (&c->io_lock);
  if (c->readonly)
    r = cairn_fail (-EROFS, "%s is read-only%s", c->dev.name,
                    c->missing ? " (opened without all its devices)" : "");
  /* The buffer is only read: chunk_io_copy takes one pointer for both. */
  for (unsigned k = k0; k < k1 && r == 0; k++)
    r = chunk_io_copy (c, (uint8_t *) buf, len, off, k, true);
  pthread_rwlock_unlock (&c->io_lock);
  return r;
}

/* Write copy k of [off, off + len). */
static int
chunk_pwrite_copy (struct cairn_dev *dev, const void *buf, size_t len,
                   uint64_t off, unsigned k)
{
  return chunk_write_copies (to_chunk_dev (dev), buf, len, off, k, k + 1);
}

/* Read the first copy that is on present members (C3). */
static int
chunk_pread (struct cairn_dev *dev, void *buf, size_t len, uint64_t off)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  int r = -ENXIO;

  for (unsigned k = 0; k < c->ncopies && r == -ENXIO; k++)
    r = chunk_pread_copy (dev, buf, len, off, k);
  return r;
}

/* Write every copy (C2), under one hold of io_lock: a replace's copy
 * step never sees some copies written and others not (C5).
 */
static int
chunk_pwrite (struct cairn_dev *dev, const void *buf, size_t len, uint64_t off)
{
  struct chunk_dev *c = to_chunk_dev (dev);

  return chunk_write_copies (c, buf, len, off, 0, c->ncopies);
}

/* Flush every present member, and a replace's target. */
static int
chunk_flush (struct cairn_dev *dev)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  int r = 0;

  pthread_rwlock_rdlock (&c->io_lock);
  for (unsigned i = 0; i < c->nmembers && r == 0; i++) {
    struct member *m = &c->member[i];
    struct cairn_dev *d = member_dev (c, i);

    if (c->rep.active && i == c->rep.index && c->rep.target &&
        (r = dev_flush (c->rep.target)) < 0)
      __atomic_add_fetch (&m->write_errors, 1, __ATOMIC_RELAXED);
    if (r == 0 && d && (r = dev_flush (d)) < 0)
      __atomic_add_fetch (&m->write_errors, 1, __ATOMIC_RELAXED);
  }
  pthread_rwlock_unlock (&c->io_lock);
  return r;
}

/* Discard every copy of a range (advice to the members, and to a
 * replace's target).
 */
static int
chunk_discard (struct cairn_dev *dev, uint64_t off, uint64_t len)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  int r = 0;

  pthread_rwlock_rdlock (&c->io_lock);
  while (len > 0 && !c->readonly && r == 0) {
    uint64_t run = len;

    for (unsigned k = 0; k < c->ncopies && r == 0; k++) {
      const struct stripe *s;
      uint64_t phys;
      struct cairn_dev *d;

      chunk_map (c, off, k, &s, &phys, &run);
      run = MIN (run, len);
      if ((d = member_dev (c, s->member)) != NULL)
        r = dev_discard (d, phys, run);
      if (r == 0 && c->rep.active && s->member == c->rep.index &&
          c->rep.target)
        r = dev_discard (c->rep.target, phys, run);
    }
    off += run;
    len -= run;
  }
  pthread_rwlock_unlock (&c->io_lock);
  return r;
}

/* How many copies each range has. */
static unsigned
chunk_copies (struct cairn_dev *dev)
{
  return to_chunk_dev (dev)->ncopies;
}

/* Count a damaged copy (CKSUM) or its repair on the members holding it. */
static void
chunk_note_damage (struct cairn_dev *dev, uint64_t off, uint64_t len,
                   unsigned k, bool repaired)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  uint64_t end = off + len;
  unsigned last = UINT32_MAX;

  /* Once a member for each piece of the copy; pieces on one member in a
   * row count once.
   */
  while (off < end) {
    const struct stripe *s;
    uint64_t phys, run;
    struct member *m;

    chunk_map (c, off, k, &s, &phys, &run);
    m = &c->member[s->member];
    if (s->member != last)
      __atomic_add_fetch (repaired ? &m->repaired : &m->cksum_errors, 1,
                          __ATOMIC_RELAXED);
    last = s->member;
    off += MIN (run, end - off);
  }
}

/* Free the logical device (stopping a replace's thread first), and its
 * members if it opened them.
 */
static void
chunk_close (struct cairn_dev *dev)
{
  struct chunk_dev *c = to_chunk_dev (dev);

  replace_fini (c);
  for (unsigned i = 0; i < c->nmembers; i++)
    if (c->own_members || c->member[i].own)
      dev_close (c->member[i].dev);
  if (c->rep.own_target)
    dev_close (c->rep.target);
  for (unsigned i = 0; i < c->nothers; i++)
    if (c->own_members || c->others_own[i])
      dev_close (c->others[i]);
  pthread_rwlock_destroy (&c->io_lock);
  free (c->stripes);
  free (c->chunk);
  free (c);
}

/* A new logical device, its locks ready; NULL when out of memory. */
static struct chunk_dev *
chunk_alloc (void)
{
  struct chunk_dev *c = calloc (1, sizeof *c);

  if (c == NULL)
    return NULL;
  c->dev.ops = &chunk_ops;
  pthread_rwlock_init (&c->io_lock, NULL);
  replace_init (c);
  return c;
}

static const struct cairn_dev_ops chunk_ops = {
  .kind = "chunk",
  .pread = chunk_pread,
  .pwrite = chunk_pwrite,
  .flush = chunk_flush,
  .discard = chunk_discard,
  .close = chunk_close,
  .copies = chunk_copies,
  .pread_copy = chunk_pread_copy,
  .pwrite_copy = chunk_pwrite_copy,
  .note_damage = chunk_note_damage,
};

/* ---------------------------------------------------------------- format */

/* The stripe size for members whose smallest has `smallest` usable bytes:
 * a quarter of it, a power of two from 1 MiB to 1 GiB, doubled until the
 * chunks that `total` usable bytes can make fit in a label.
 */
static uint64_t
pick_stripe_size (uint64_t smallest, uint64_t total, size_t max_chunks)
{
  uint64_t s = 1024 * 1024;

  while (s * 2 <= smallest / 4 && s < (1ull << 30))
    s *= 2;
  while (total / s > max_chunks)
    s *= 2;
  return s;
}

/* Place chunks on members of the given sizes until one more does not fit
 * (or the label is full), into c->chunk and c->stripes.  A chunk's stripes
 * go to the members with the most room left, each stripe on a distinct
 * member but for dup's two on one (C1); each member fills from
 * MEMBER_DATA_START up.
 */
static int
place_chunks (struct chunk_dev *c, const uint64_t *sizes, size_t max_chunks)
{
  unsigned nstripes = c->ncopies * c->width;
  unsigned need = c->profile == DEV_PROFILE_DUP ? 1 : nstripes;
  uint64_t per = c->stripe_size * (nstripes / need);   /* taken from each */
  uint64_t next[DEV_CHUNK_MAX_MEMBERS];

  c->chunk = calloc (max_chunks, sizeof *c->chunk);
  c->stripes = calloc (max_chunks * nstripes, sizeof *c->stripes);
  if (c->chunk == NULL || c->stripes == NULL)
    return cairn_fail (-ENOMEM, "out of memory placing chunks");
  for (unsigned i = 0; i < c->nmembers; i++)
    next[i] = MEMBER_DATA_START;
  for (c->nchunks = 0; c->nchunks < max_chunks; c->nchunks++) {
    struct chunk *ch = &c->chunk[c->nchunks];
    unsigned pick[STRIPES_MAX], got = 0;
    bool taken[DEV_CHUNK_MAX_MEMBERS] = { false };

    while (got < need) {
      unsigned best = UINT32_MAX;

      for (unsigned i = 0; i < c->nmembers; i++)
        if (!taken[i] && (best == UINT32_MAX ||
                          sizes[i] - next[i] > sizes[best] - next[best]))
          best = i;
      if (best == UINT32_MAX || sizes[best] - next[best] < per)
        return 0;
      taken[best] = true;
      pick[got++] = best;
    }
    ch->logical = (uint64_t) c->nchunks * c->stripe_size * c->width;
    ch->length = c->stripe_size * c->width;
    ch->stripe = c->stripes + (size_t) c->nchunks * nstripes;
    for (unsigned s = 0; s < nstripes; s++) {
      unsigned m = pick[need == 1 ? 0 : s];

      ch->stripe[s].member = m;
      ch->stripe[s].phys = next[m];
      next[m] += c->stripe_size;
    }
  }
  return 0;
}

/* Encode the label at generation gen of member i, whose UUID is uuid
 * (member i's, or a replace's target's).
 */
static void
label_encode (const struct chunk_dev *c, unsigned i, const uint8_t *uuid,
              uint64_t gen, uint8_t *p)
{
  unsigned nstripes = c->ncopies * c->width;
  size_t at = chunk_table_off (c->nmembers);

  memset (p, 0, LABEL_SIZE);
  memcpy (p, LABEL_MAGIC, 8);
  put_le32 (p + 8, LABEL_VERSION);
  memcpy (p + 16, c->pool_uuid, 16);
  memcpy (p + 32, uuid, 16);
  put_le32 (p + 48, i);
  put_le32 (p + 52, c->nmembers);
  put_le64 (p + 56, gen);
  put_le32 (p + 64, c->profile);
  put_le32 (p + 68, c->ncopies);
  put_le32 (p + 72, c->width);
  put_le32 (p + 76, (uint32_t) c->stripe_len);
  put_le64 (p + 80, c->stripe_size);
  put_le32 (p + 88, c->nchunks);
  put_le64 (p + 96, c->dev.size);
  if (c->rep.active) {
    put_le32 (p + 12, LABEL_REPLACING |
                      (c->rep.source_stale ? LABEL_SOURCE_STALE : 0));
    put_le32 (p + 92, c->rep.index);
    memcpy (p + 104, c->rep.uuid, 16);
    put_le64 (p + 120, c->rep.cursor);
  }
  for (unsigned m = 0; m < c->nmembers; m++) {
    uint8_t *e = p + LABEL_MEMBERS_OFF + LABEL_MEMBER_SIZE * m;

    memcpy (e, c->member[m].uuid, 16);
    put_le64 (e + 16, c->member[m].size);
  }
  for (unsigned k = 0; k < c->nchunks; k++, at += chunk_entry_size (nstripes)) {
    const struct chunk *ch = &c->chunk[k];

    put_le64 (p + at, ch->logical);
    put_le64 (p + at + 8, ch->length);
    for (unsigned s = 0; s < nstripes; s++) {
      put_le32 (p + at + 16 + 16 * s, ch->stripe[s].member);
      put_le64 (p + at + 24 + 16 * s, ch->stripe[s].phys);
    }
  }
  sha256 (p, LABEL_CSUM_OFF, p + LABEL_CSUM_OFF);
}

/* Write both copies of a label on dev, one after the other, each
 * flushed before the next: a cut leaves at least one of them whole.
 */
static int
label_write (struct cairn_dev *dev, const uint8_t *label)
{
  int r = 0;

  for (unsigned copy = 0; copy < 2 && r == 0; copy++) {
    r = dev_pwrite (dev, label, LABEL_SIZE, (uint64_t) copy * LABEL_SIZE);
    if (r == 0)
      r = dev_flush (dev);
  }
  return r;
}

/* Label updates: see "Label generations" above.  A replace's target is
 * flushed and labelled first (what the cursor says is copied is then
 * durable on it), then every member that is read, in index order.
 */
int
labels_update (struct chunk_dev *c)
{
  CLEANUP_FREE uint8_t *label = malloc (LABEL_SIZE);
  struct cairn_dev *t = c->rep.active ? c->rep.target : NULL;
  uint64_t gen = c->gen + 1;
  int r = 0;

  if (label == NULL)
    return cairn_fail (-ENOMEM, "out of memory writing device labels");
  c->gen = gen;
  if (t) {
    label_encode (c, c->rep.index, c->rep.uuid, gen, label);
    r = dev_flush (t);
    if (r == 0)
      r = label_write (t, label);
    if (r < 0)
      return cairn_fail (r, "%s: writing the label of the replacing device "
                         "%s: %s", c->dev.name, t->name, cairn_errmsg ());
  }
  for (unsigned i = 0; i < c->nmembers; i++) {
    struct cairn_dev *d = member_dev (c, i);

    if (d == NULL)
      continue;
    label_encode (c, i, c->member[i].uuid, gen, label);
    r = label_write (d, label);
    if (r < 0) {
      __atomic_add_fetch (&c->member[i].write_errors, 1, __ATOMIC_RELAXED);
      return cairn_fail (r, "%s: writing the label of device %u (%s): %s",
                         c->dev.name, i, d->name, cairn_errmsg ());
    }
  }
  c->rep.saved = c->rep.cursor;
  return 0;
}

/* Zero the magic of both of dev's labels. */
int
label_wipe (struct cairn_dev *dev)
{
  static const uint8_t zero[8];
  int r = 0;

  for (unsigned copy = 0; copy < 2 && r == 0; copy++)
    r = dev_pwrite (dev, zero, sizeof zero, (uint64_t) copy * LABEL_SIZE);
  if (r == 0)
    r = dev_flush (dev);
  return r;
}

/* The bytes a device must have to hold member i's stripes where they lie. */
uint64_t
member_bytes_needed (const struct chunk_dev *c, unsigned i)
{
  uint64_t need = MEMBER_DATA_START + STRIPE_LEN * 16;

  for (unsigned k = 0; k < c->nchunks; k++)
    for (unsigned s = 0; s < c->ncopies * c->width; s++)
      if (c->chunk[k].stripe[s].member == i)
        need = c->chunk[k].stripe[s].phys + c->stripe_size > need
               ? c->chunk[k].stripe[s].phys + c->stripe_size : need;
  return need;
}

/* Write labels that make members one logical device. */
int
dev_chunk_format (struct cairn_dev *const *members, unsigned n,
                  const struct dev_chunk_format_opts *opts,
                  uint8_t pool_uuid_out[16])
{
  struct dev_chunk_format_opts o = opts ? *opts : (struct dev_chunk_format_opts) { 0 };
  uint64_t sizes[DEV_CHUNK_MAX_MEMBERS], smallest = UINT64_MAX, total = 0;
  size_t max_chunks;
  CLEANUP_FREE uint8_t *label = NULL;
  struct chunk_dev *c;
  int r;

  if (n == 0 || n > DEV_CHUNK_MAX_MEMBERS)
    return cairn_fail (-EINVAL, "a pool takes 1 to %u devices, not %u",
                       DEV_CHUNK_MAX_MEMBERS, n);
  c = chunk_alloc ();
  if (c == NULL)
    return cairn_fail (-ENOMEM, "out of memory formatting devices");
  c->nmembers = n;
  c->profile = o.profile;
  c->stripe_len = STRIPE_LEN;
  r = profile_shape (o.profile, n, &c->ncopies, &c->width);
  if (r < 0)
    goto out;
  if (o.pool_uuid)
    memcpy (c->pool_uuid, o.pool_uuid, 16);
  else if ((r = uuid_generate (c->pool_uuid)) < 0)
    goto out;
  for (unsigned i = 0; i < n; i++) {
    /* Whole stripe units only, so stripes never end mid-unit. */
    sizes[i] = members[i]->size / STRIPE_LEN * STRIPE_LEN;
    if (sizes[i] < MEMBER_DATA_START + STRIPE_LEN * 16) {
      r = cairn_fail (-EINVAL, "%s is too small to be a pool's device",
                      members[i]->name);
      goto out;
    }
    for (unsigned j = 0; j < i; j++)
      if (members[j] == members[i]) {
        r = cairn_fail (-EINVAL, "%s is named twice", members[i]->name);
        goto out;
      }
    c->member[i].size = sizes[i];
    if ((r = uuid_generate (c->member[i].uuid)) < 0)
      goto out;
    smallest = MIN (smallest, sizes[i] - MEMBER_DATA_START);
    total += sizes[i] - MEMBER_DATA_START;
  }
  max_chunks = (LABEL_CSUM_OFF - chunk_table_off (n)) /
               chunk_entry_size (c->ncopies * c->width);
  c->stripe_size = o.stripe_size ? o.stripe_size
                   : pick_stripe_size (smallest, total, max_chunks);
  if (c->stripe_size % STRIPE_LEN) {
    r = cairn_fail (-EINVAL, "stripe size %" PRIu64 " is not a multiple of "
                    "%u", c->stripe_size, STRIPE_LEN);
    goto out;
  }
  r = place_chunks (c, sizes, max_chunks);
  if (r < 0)
    goto out;
  if (c->nchunks == 0) {
    r = cairn_fail (-EINVAL, "the devices have no room for one chunk of "
                    "profile %s", profile_names[c->profile]);
    goto out;
  }
  c->dev.size = (uint64_t) c->nchunks * c->stripe_size * c->width;
  label = malloc (LABEL_SIZE);
  if (label == NULL) {
    r = cairn_fail (-ENOMEM, "out of memory formatting devices");
    goto out;
  }
  for (unsigned i = 0; i < n && r == 0; i++) {
    label_encode (c, i, c->member[i].uuid, 1, label);
    r = label_write (members[i], label);
  }
  if (r == 0 && pool_uuid_out)
    memcpy (pool_uuid_out, c->pool_uuid, 16);
 out:
  chunk_close (&c->dev);
  return r;
}

/* ---------------------------------------------------------------- open */

/* What one member's label says, decoded and checked. */
struct label {
  uint8_t pool_uuid[16], uuid[16];
  unsigned index, nmembers;
  uint64_t gen;
  uint8_t *raw;               /* LABEL_SIZE bytes */
};

/* Read and check the label of dev: of its two copies, the valid one with
 * the higher generation.
 */
static int
label_read (struct cairn_dev *dev, struct label *l)
{
  const char *why = "no Cairn device label";
  uint8_t sha[SHA256_LEN];
  CLEANUP_FREE uint8_t *raw = malloc (LABEL_SIZE);
  bool found = false;

  l->raw = malloc (LABEL_SIZE);
  if (l->raw == NULL || raw == NULL)
    return cairn_fail (-ENOMEM, "out of memory reading a device label");
  for (unsigned copy = 0; copy < 2; copy++) {
    int r;

    if (dev->size < MEMBER_DATA_START)
      break;
    r = dev_pread (dev, raw, LABEL_SIZE, (uint64_t) copy * LABEL_SIZE);
    if (r < 0)
      return r;
    if (memcmp (raw, LABEL_MAGIC, 8) != 0)
      continue;
    sha256 (raw, LABEL_CSUM_OFF, sha);
    if (memcmp (sha, raw + LABEL_CSUM_OFF, SHA256_LEN) != 0) {
      why = "its label fails its checksum";
      continue;
    }
    if (get_le32 (raw + 8) != LABEL_VERSION) {
      why = "its label has an unknown version";
      continue;
    }
    if (get_le32 (raw + 52) == 0 ||
        get_le32 (raw + 52) > DEV_CHUNK_MAX_MEMBERS ||
        get_le32 (raw + 48) >= get_le32 (raw + 52)) {
      why = "its label has a bad member count or index";
      continue;
    }
    if (found && get_le64 (raw + 56) <= l->gen)
      continue;
    found = true;
    memcpy (l->raw, raw, LABEL_SIZE);
    memcpy (l->pool_uuid, raw + 16, 16);
    memcpy (l->uuid, raw + 32, 16);
    l->index = get_le32 (raw + 48);
    l->nmembers = get_le32 (raw + 52);
    l->gen = get_le64 (raw + 56);
  }
  if (found)
    return 0;
  return cairn_fail (-EINVAL, "%s is not a device of a Cairn pool: %s",
                     dev->name, why);
}

/* Decode the layout (everything but the member's own fields) from a label
 * into c, checking every field (corruption is data, not a crash).
 */
static int
layout_decode (struct chunk_dev *c, const uint8_t *p, const char *name)
{
  unsigned nstripes, ncopies, width;
  size_t at;
  int r;

  memcpy (c->pool_uuid, p + 16, 16);
  c->nmembers = get_le32 (p + 52);
  c->profile = (enum dev_profile) get_le32 (p + 64);
  c->ncopies = get_le32 (p + 68);
  c->width = get_le32 (p + 72);
  c->stripe_len = get_le32 (p + 76);
  c->stripe_size = get_le64 (p + 80);
  c->nchunks = get_le32 (p + 88);
  c->dev.size = get_le64 (p + 96);
  c->gen = get_le64 (p + 56);
  r = profile_shape (c->profile, c->nmembers, &ncopies, &width);
  if (r < 0)
    return cairn_fail (-EIO, "%s: label: %s", name, cairn_errmsg ());
  nstripes = c->ncopies * c->width;
  if (c->ncopies != ncopies || c->width != width || c->stripe_len == 0 ||
      c->stripe_len % 4096 || c->stripe_size == 0 ||
      c->stripe_size % c->stripe_len || c->nchunks == 0 ||
      chunk_table_off (c->nmembers) + (size_t) c->nchunks *
      chunk_entry_size (nstripes) > LABEL_CSUM_OFF ||
      c->dev.size != (uint64_t) c->nchunks * c->stripe_size * c->width)
    return cairn_fail (-EIO, "%s: label: bad layout fields", name);
  if (get_le32 (p + 12) & LABEL_REPLACING) {
    c->rep.active = true;
    c->rep.source_stale = (get_le32 (p + 12) & LABEL_SOURCE_STALE) != 0;
    c->rep.index = get_le32 (p + 92);
    memcpy (c->rep.uuid, p + 104, 16);
    c->rep.cursor = c->rep.saved = get_le64 (p + 120);
    if (c->rep.index >= c->nmembers || c->rep.cursor > c->dev.size)
      return cairn_fail (-EIO, "%s: label: bad replace fields", name);
  }
  for (unsigned m = 0; m < c->nmembers; m++) {
    const uint8_t *e = p + LABEL_MEMBERS_OFF + LABEL_MEMBER_SIZE * m;

    memcpy (c->member[m].uuid, e, 16);
    c->member[m].size = get_le64 (e + 16);
  }
  c->chunk = calloc (c->nchunks, sizeof *c->chunk);
  c->stripes = calloc ((size_t) c->nchunks * nstripes, sizeof *c->stripes);
  if (c->chunk == NULL || c->stripes == NULL)
    return cairn_fail (-ENOMEM, "out of memory reading the chunk map");
  at = chunk_table_off (c->nmembers);
  for (unsigned k = 0; k < c->nchunks; k++, at += chunk_entry_size (nstripes)) {
    struct chunk *ch = &c->chunk[k];

    ch->logical = get_le64 (p + at);
    ch->length = get_le64 (p + at + 8);
    ch->stripe = c->stripes + (size_t) k * nstripes;
    if (ch->logical != (uint64_t) k * c->stripe_size * c->width ||
        ch->length != c->stripe_size * c->width)
      return cairn_fail (-EIO, "%s: label: chunk %u has a bad logical range",
                         name, k);
    for (unsigned s = 0; s < nstripes; s++) {
      struct stripe *st = &ch->stripe[s];

      st->member = get_le32 (p + at + 16 + 16 * s);
      st->phys = get_le64 (p + at + 24 + 16 * s);
      if (st->member >= c->nmembers || st->phys < MEMBER_DATA_START ||
          st->phys > c->member[st->member].size ||
          c->member[st->member].size - st->phys < c->stripe_size)
        return cairn_fail (-EIO, "%s: label: chunk %u stripe %u lies outside "
                           "its device", name, k, s);
    }
  }
  return 0;
}

/* Does member i's data have a current copy: on the member, or on a
 * replace's target?
 */
static bool
member_covered (struct chunk_dev *c, unsigned i)
{
  return member_dev (c, i) != NULL ||
         (c->rep.active && i == c->rep.index && c->rep.target != NULL);
}

/* Count the members whose data has no current copy. */
void
count_missing (struct chunk_dev *c)
{
  c->missing = 0;
  for (unsigned i = 0; i < c->nmembers; i++)
    c->missing += !member_covered (c, i);
}

/* Is every column of every chunk left with a copy on a present member? */
static bool
all_data_present (struct chunk_dev *c)
{
  for (unsigned k = 0; k < c->nchunks; k++)
    for (unsigned col = 0; col < c->width; col++) {
      bool any = false;

      for (unsigned j = 0; j < c->ncopies; j++)
        any |= member_covered (c, c->chunk[k].stripe[col * c->ncopies + j].
                                  member);
      if (!any)
        return false;
    }
  return true;
}

/* Do two labels describe one layout of one pool?  The pool UUID, the
 * member count, the shape and the chunk table must match; generation,
 * member table and replace fields may differ between generations.
 */
static bool
labels_agree (const uint8_t *a, const uint8_t *b)
{
  size_t table = chunk_table_off (get_le32 (a + 52));

  return memcmp (a + 16, b + 16, 16) == 0 && memcmp (a + 52, b + 52, 4) == 0 &&
         memcmp (a + 64, b + 64, 28) == 0 && memcmp (a + 96, b + 96, 8) == 0 &&
         memcmp (a + table, b + table, LABEL_CSUM_OFF - table) == 0;
}

/* Which member's UUID is uuid in the newest label: its index, or -1. */
static int
member_by_uuid (const struct chunk_dev *c, const uint8_t *uuid)
{
  for (unsigned i = 0; i < c->nmembers; i++)
    if (memcmp (c->member[i].uuid, uuid, 16) == 0)
      return (int) i;
  return -1;
}

/* Place the device whose label is l: as a member, as a replace's target,
 * or among the devices no longer in the pool (see "Label generations").
 */
static int
place_member (struct chunk_dev *c, struct cairn_dev *d, const struct label *l)
{
  struct member *m = &c->member[l->index];

  if (memcmp (m->uuid, l->uuid, 16) == 0) {
    if (m->dev)
      return cairn_fail (-EINVAL, "%s and %s are both device %u of the pool",
                         m->dev->name, d->name, l->index);
    if (d->size < m->size)
      return cairn_fail (-EIO, "%s is %" PRIu64 " bytes, smaller than the %"
                         PRIu64 " its label says", d->name, d->size, m->size);
    m->dev = d;
    return 0;
  }
  if (c->rep.active && l->index == c->rep.index &&
      memcmp (c->rep.uuid, l->uuid, 16) == 0) {
    if (c->rep.target)
      return cairn_fail (-EINVAL, "%s and %s are both the device replacing "
                         "device %u", c->rep.target->name, d->name, l->index);
    if (d->size < member_bytes_needed (c, l->index))
      return cairn_fail (-EIO, "%s is %" PRIu64 " bytes, too small to replace "
                         "device %u", d->name, d->size, l->index);
    c->rep.target = d;
    return 0;
  }
  if (member_by_uuid (c, l->uuid) < 0) {
    /* Replaced, or the target of a cancelled replace: not used. */
    c->others[c->nothers++] = d;
    return 0;
  }
  return cairn_fail (-EIO, "%s: its label's UUID is not the pool's device %u",
                     d->name, l->index);
}

/* Open the logical device from its members (dev.h). */
int
dev_chunk_open (struct cairn_dev *const *members, unsigned n, unsigned flags,
                struct cairn_dev **devp)
{
  struct label l[DEV_CHUNK_MAX_MEMBERS] = { 0 };
  struct chunk_dev *c;
  unsigned newest = 0;
  char uuid[37];
  int r = 0;

  *devp = NULL;
  if (n == 0 || n > DEV_CHUNK_MAX_MEMBERS)
    return cairn_fail (-EINVAL, "a pool is opened from 1 to %u devices, not "
                       "%u", DEV_CHUNK_MAX_MEMBERS, n);
  c = chunk_alloc ();
  if (c == NULL)
    return cairn_fail (-ENOMEM, "out of memory opening devices");
  for (unsigned i = 0; i < n && r == 0; i++) {
    r = label_read (members[i], &l[i]);
    if (r == 0 && l[i].gen > l[newest].gen)
      newest = i;
  }
  if (r < 0)
    goto out;
  r = layout_decode (c, l[newest].raw, members[newest]->name);
  for (unsigned i = 0; i < n && r == 0; i++) {
    if (!labels_agree (l[newest].raw, l[i].raw)) {
      r = cairn_fail (-EINVAL, "%s and %s are not devices of one pool (their "
                      "labels differ)", members[newest]->name,
                      members[i]->name);
      goto out;
    }
    r = place_member (c, members[i], &l[i]);
  }
  if (r < 0)
    goto out;
  uuid_format (c->pool_uuid, uuid);
  if (c->rep.active && c->rep.target == NULL && !(flags & DEV_CHUNK_DEGRADED)) {
    char new_uuid[37];

    uuid_format (c->rep.uuid, new_uuid);
    r = cairn_fail (-ENODEV, "pool %s: device %u is being replaced by the "
                    "device with UUID %s, which is not named: name it with "
                    "the others, or open the pool degraded (read-only) to "
                    "start the replace again onto another device", uuid,
                    c->rep.index, new_uuid);
    goto out;
  }
  for (unsigned i = 0; i < c->nmembers; i++)
    if (!member_covered (c, i)) {
      char dev_uuid[37];

      uuid_format (c->member[i].uuid, dev_uuid);
      if (!(flags & DEV_CHUNK_DEGRADED)) {
        r = cairn_fail (-ENODEV, "pool %s: device %u (UUID %s) is missing: "
                        "found %u of its %u devices; name every device, or "
                        "open it degraded (read-only) to read what the others "
                        "hold", uuid, i, dev_uuid, n - c->nothers,
                        c->nmembers);
        goto out;
      }
    }
  count_missing (c);
  if (c->missing && !all_data_present (c)) {
    r = cairn_fail (-ENODEV, "pool %s: %u of its %u devices are missing and "
                    "profile %s keeps no other copy of what they hold: it "
                    "cannot be opened, even degraded", uuid, c->missing,
                    c->nmembers, profile_names[c->profile]);
    goto out;
  }
  c->members_rdonly = (flags & DEV_CHUNK_RDONLY) != 0;
  c->readonly = c->members_rdonly || c->missing > 0;   /* C4 */
  /* A replace whose source is gone writes to its target alone from now
   * on: the labels must say so before any write (C5).
   */
  if (c->rep.active && c->rep.target && !c->rep.source_stale &&
      c->member[c->rep.index].dev == NULL && !c->readonly) {
    c->rep.source_stale = true;
    r = labels_update (c);
    if (r < 0)
      goto out;
  }
  snprintf (c->dev.name, sizeof c->dev.name, "pool %s (%u devices, %s%s)",
            uuid, c->nmembers, profile_names[c->profile],
            c->missing ? ", degraded" : "");
  if (c->rep.active)
    c->rep.state = DEV_REPLACE_STOPPED;
  *devp = &c->dev;
  c = NULL;
 out:
  for (unsigned i = 0; i < n; i++)
    free (l[i].raw);
  if (c) {
    c->own_members = false;
    c->rep.target = NULL;
    chunk_close (&c->dev);
  }
  return r;
}

/* Open devices by name (dev_open) as members and the logical device over
 * them.
 */
int
dev_chunk_open_paths (const char *const *paths, unsigned n, unsigned flags,
                      struct cairn_dev **devp)
{
  struct cairn_dev *m[DEV_CHUNK_MAX_MEMBERS] = { NULL };
  int r = 0;

  *devp = NULL;
  if (n == 0 || n > DEV_CHUNK_MAX_MEMBERS)
    return cairn_fail (-EINVAL, "a pool is opened from 1 to %u devices, not "
                       "%u", DEV_CHUNK_MAX_MEMBERS, n);
  for (unsigned i = 0; i < n && r == 0; i++)
    r = dev_open (paths[i], flags & DEV_CHUNK_RDONLY ? DEV_RDONLY : 0, 0,
                       &m[i]);
  if (r == 0)
    r = dev_chunk_open (m, n, flags, devp);
  if (r < 0) {
    for (unsigned i = 0; i < n; i++)
      dev_close (m[i]);
    return r;
  }
  to_chunk_dev (*devp)->own_members = true;
  to_chunk_dev (*devp)->rep.own_target = true;
  return 0;
}

/* Open a single-device pool's device, or a pool's members (dev.h). */
int
dev_pool_open (const char *const *paths, unsigned n, unsigned flags,
               struct cairn_dev **devp)
{
  char magic[8];
  int r;

  *devp = NULL;
  if (n != 1)
    return dev_chunk_open_paths (paths, n, flags, devp);
  r = dev_open (paths[0], flags & DEV_CHUNK_RDONLY ? DEV_RDONLY : 0, 0,
                     devp);
  if (r < 0)
    return r;
  /* A device's label is where a single-device pool has nothing (its first
   * superblock slot is at 64 KiB).
   */
  if ((*devp)->size < sizeof magic ||
      dev_pread (*devp, magic, sizeof magic, 0) < 0 ||
      memcmp (magic, LABEL_MAGIC, sizeof magic) != 0) {
    cairn_error_clear ();
    return 0;
  }
  dev_close (*devp);
  *devp = NULL;
  return dev_chunk_open_paths (paths, n, flags, devp);
}

/* ---------------------------------------------------------------- queries */

bool
dev_is_chunked (const struct cairn_dev *dev)
{
  return dev->ops == &chunk_ops;
}

void
dev_chunk_pool_uuid (const struct cairn_dev *dev, uint8_t uuid[16])
{
  memcpy (uuid, ((const struct chunk_dev *) dev)->pool_uuid, 16);
}

/* The layout and state of a chunked device. */
void
dev_chunk_info (struct cairn_dev *dev, struct dev_chunk_info *info)
{
  struct chunk_dev *c = to_chunk_dev (dev);

  /* A replace's start and end change missing and readonly. */
  pthread_rwlock_rdlock (&c->io_lock);
  *info = (struct dev_chunk_info) {
    .profile = c->profile, .ncopies = c->ncopies, .width = c->width,
    .nmembers = c->nmembers, .nchunks = c->nchunks, .missing = c->missing,
    .stripe_size = c->stripe_size, .stripe_len = c->stripe_len,
    .logical_size = dev->size, .degraded = c->missing > 0,
    .readonly = c->readonly,
  };
  pthread_rwlock_unlock (&c->io_lock);
}

/* Member i's state and counters. */
void
dev_chunk_member (struct cairn_dev *dev, unsigned i,
                  struct dev_member_info *info)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  struct member *m = &c->member[i];
  struct cairn_dev *d;

  memset (info, 0, sizeof *info);
  /* A replace's end changes the member's UUID, size and device. */
  pthread_rwlock_rdlock (&c->io_lock);
  d = member_dev (c, i);
  info->index = i;

  info->state = c->rep.active && i == c->rep.index ? DEV_MEMBER_REPLACING
              : d ? DEV_MEMBER_ONLINE : DEV_MEMBER_MISSING;
  memcpy (info->uuid, m->uuid, 16);
  if (d)
    snprintf (info->name, sizeof info->name, "%s", d->name);
  info->size = m->size;
  for (unsigned k = 0; k < c->nchunks; k++)
    for (unsigned s = 0; s < c->ncopies * c->width; s++)
      info->used += c->chunk[k].stripe[s].member == i ? c->stripe_size : 0;
  info->read_errors = __atomic_load_n (&m->read_errors, __ATOMIC_RELAXED);
  info->write_errors = __atomic_load_n (&m->write_errors, __ATOMIC_RELAXED);
  info->cksum_errors = __atomic_load_n (&m->cksum_errors, __ATOMIC_RELAXED);
  info->repaired = __atomic_load_n (&m->repaired, __ATOMIC_RELAXED);
  pthread_rwlock_unlock (&c->io_lock);
}

/* Member i's device (NULL when missing). */
struct cairn_dev *
dev_chunk_member_dev (struct cairn_dev *dev, unsigned i)
{
  return to_chunk_dev (dev)->member[i].dev;
}

/* Where copy k of logical byte off lies. */
int
dev_chunk_locate (struct cairn_dev *dev, uint64_t off, unsigned k,
                  unsigned *memberp, uint64_t *physp, uint64_t *runp)
{
  struct chunk_dev *c = to_chunk_dev (dev);
  const struct stripe *s;

  if (off >= dev->size || k >= c->ncopies)
    return cairn_fail (-EINVAL, "%s: no copy %u of byte %" PRIu64, dev->name,
                       k, off);
  chunk_map (c, off, k, &s, physp, runp);
  *memberp = s->member;
  return 0;
}
