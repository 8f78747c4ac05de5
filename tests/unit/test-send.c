/* Unit tests for send and receive_buf (server/send.c, server/receive.c) and the
 * engine calls under them (snapshot GUIDs, partial volumes): streams go
 * from one in-memory pool to another and every received state is compared
 * byte for byte with the state sent; broken streams (cut anywhere, a byte
 * flipped) and refused bases change nothing that vol_list shows and leave
 * fsck clean; interrupted receives resume from their token, even after the
 * pool was closed.  Randomised tests print their seed (test-util.h).
 */
#include <config.h>

#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fsck.h"
#include "replicate.h"
#include "volume.h"
#include "test-util.h"
#include "test-send.h"

/* ---------------------------------------------------------------- helpers */

/* Close the pool, check it, and open it again. */
struct cairn_pool *
fsck_reopen (struct cairn_dev *dev, struct cairn_pool *pool, const char *when)
{
  cr_assert_eq (pool_close (pool), 0, "%s", cairn_errmsg ());
  assert_fsck_clean (dev, when);
  return pool_open_ok (dev);
}

int
buf_sink (void *opaque, const void *data, size_t len)
{
  struct buf *b = opaque;

  if (b->len + len > b->cap) {
    size_t cap = MAX (b->cap * 2, b->len + len + 65536);
    uint8_t *p = realloc (b->p, cap);

    if (p == NULL)
      return -ENOMEM;
    b->p = p;
    b->cap = cap;
  }
  memcpy (b->p + b->len, data, len);
  b->len += len;
  return 0;
}

/* Send snap (from: NULL or the base; resume: NULL or a token) into a new
 * buffer.
 */
struct buf
send_to_buf (struct cairn_pool *pool, const char *snap, const char *from,
      const char *resume)
{
  struct buf b = { NULL, 0, 0 };
  struct repl_send_opts o = { .from = from, .resume = resume, .sink = buf_sink,
                              .sink_opaque = &b };
  struct repl_send_result res;

  cr_assert_eq (repl_send (pool, snap, &o, &res), 0, "send %s: %s", snap,
                cairn_errmsg ());
  cr_assert_eq (res.stream_bytes, b.len);
  return b;
}

/* Receive len bytes of a stream into target, fed in pieces of random
 * sizes; returns what repl_recv_finish returned (res may be NULL).
 */
int
receive_opts (struct cairn_pool *pool, const char *target, const uint8_t *p,
              size_t len, struct rng *rng, const struct repl_recv_opts *opts,
              struct repl_recv_result *res)
{
  struct repl_recv_result local;
  struct repl_recv *rr;
  size_t off = 0;
  int r;

  if (res == NULL)
    res = &local;
  r = repl_recv_new (pool, target, opts, &rr);
  if (r < 0)
    return r;
  while (off < len) {
    size_t n = 1 + rng_below (rng, 3 * MIB / 2), used;

    n = MIN (n, len - off);           /* MIN evaluates its arguments twice */

    r = repl_recv_feed (rr, p + off, n, &used);
    off += used;
    if (r != 0)
      break;
  }
  r = repl_recv_finish (rr, res);
  repl_recv_free (rr);
  return r;
}

/* receive_opts without options. */
int
receive_buf (struct cairn_pool *pool, const char *target, const uint8_t *p,
             size_t len, struct rng *rng, struct repl_recv_result *res)
{
  return receive_opts (pool, target, p, len, rng, NULL, res);
}

/* Assert that two states (in two pools) read the same, byte for byte. */
void
assert_same (struct cairn_pool *pa, const char *a, struct cairn_pool *pb,
             const char *b)
{
  static uint8_t x[MIB], y[MIB];
  struct cairn_volume *va, *vb;
  uint64_t size;

  cr_assert_eq (vol_open (pa, a, &va), 0, "%s: %s", a, cairn_errmsg ());
  cr_assert_eq (vol_open (pb, b, &vb), 0, "%s: %s", b, cairn_errmsg ());
  size = vol_size (va);
  cr_assert_eq (size, vol_size (vb), "%s is %" PRIu64 " bytes, %s %" PRIu64,
                a, size, b, vol_size (vb));
  for (uint64_t off = 0; off < size; off += MIB) {
    uint32_t n = (uint32_t) MIN ((uint64_t) MIB, size - off);

    cr_assert_eq (vol_pread (va, x, n, off), 0, "%s", cairn_errmsg ());
    cr_assert_eq (vol_pread (vb, y, n, off), 0, "%s", cairn_errmsg ());
    if (memcmp (x, y, n) != 0) {
      size_t i = 0;

      while (x[i] == y[i])
        i++;
      cr_assert_fail ("%s and %s differ at byte %" PRIu64, a, b, off + i);
    }
  }
  vol_close (va);
  vol_close (vb);
}

/* vol_list as text: everything it shows of every volume and snapshot. */
static int
list_line (void *opaque, const struct vol_info *vi)
{
  struct buf *b = opaque;
  char line[1024];
  int n = snprintf (line, sizeof line, "%s@%s size=%" PRIu64 " gen=%" PRIu64
                    " guid=%" PRIx64 " ref=%" PRIu64 " ctime=%" PRIu64
                    " origin=%" PRIu64 "/%" PRIu64 " ro=%d\n", vi->name,
                    vi->snap, vi->size, vi->gen, vi->guid, vi->referenced,
                    vi->ctime, vi->origin_id, vi->origin_gen, vi->readonly);

  return buf_sink (b, line, (size_t) n);
}

char *
listing (struct cairn_pool *pool)
{
  struct buf b = { NULL, 0, 0 };

  cr_assert_eq (vol_list (pool, true, list_line, &b), 0, "%s", cairn_errmsg ());
  cr_assert_eq (buf_sink (&b, "", 1), 0);
  return (char *) b.p;
}

/* Random writes, zeros and trims on a live volume. */
void
scribble (struct cairn_pool *pool, const char *name, struct rng *rng,
          unsigned ops)
{
  static uint8_t data[256 * 1024];
  struct cairn_volume *v;
  uint64_t size;

  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  size = vol_size (v);
  for (unsigned i = 0; i < ops; i++) {
    uint64_t k = rng_below (rng, 10);
    uint64_t len = 1 + rng_below (rng, sizeof data);
    uint64_t off = rng_below (rng, size - len);

    /* Mostly whole blocks, sometimes not. */
    if (rng_below (rng, 4)) {
      off &= ~(uint64_t) 4095;
      len = (len + 4095) & ~(uint64_t) 4095;
      /* A size not in whole blocks (after a shrink) ends inside one. */
      len = MIN (len, size - off);
    }
    if (k < 6) {
      fill_pattern (data, len, rng_next (rng));
      cr_assert_eq (vol_pwrite (v, data, (uint32_t) len, off, 0), 0, "%s",
                    cairn_errmsg ());
    }
    else if (k < 8)
      cr_assert_eq (vol_zero (v, (uint32_t) len, off, 0), 0, "%s", cairn_errmsg ());
    else
      cr_assert_eq (vol_trim (v, (uint32_t) len, off, 0), 0, "%s", cairn_errmsg ());
  }
  vol_close (v);
}

/* Write blocks of one volume. */
void
write_block (struct cairn_pool *pool, const char *name, uint64_t block,
             uint64_t tag)
{
  uint8_t data[4096];
  struct cairn_volume *v;

  fill_pattern (data, sizeof data, tag);
  cr_assert_eq (vol_open (pool, name, &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_pwrite (v, data, sizeof data, block * 4096, 0), 0, "%s",
                cairn_errmsg ());
  vol_close (v);
}

/* ---------------------------------------------------------------- GUIDs */

static int
collect_guids (void *opaque, const struct vol_info *vi)
{
  uint64_t *g = opaque;

  if (!vi->is_snapshot)
    cr_assert_eq (vi->guid, 0, "volume %s has a GUID", vi->name);
  else {
    cr_assert_neq (vi->guid, 0, "snapshot %s@%s has no GUID", vi->name, vi->snap);
    for (size_t i = 1; i <= g[0]; i++)
      cr_assert_neq (g[i], vi->guid, "two snapshots share GUID %" PRIx64, vi->guid);
    g[++g[0]] = vi->guid;
  }
  return 0;
}

Test (send, snapshot_guids)
{
  struct cairn_dev *dev = mem_pool (64 * MIB, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  const char *vols[] = { "a", "b" };
  uint64_t g[16] = { 0 }, guid;
  struct vol_info info;

  cr_assert_eq (vol_create (pool, "a", MIB, NULL), 0);
  cr_assert_eq (vol_create (pool, "b", MIB, NULL), 0);
  cr_assert_eq (snap_create (pool, "a", "s1"), 0);
  cr_assert_eq (snap_create (pool, "a", "s2"), 0);
  cr_assert_eq (snap_create_many (pool, vols, 2, "both"), 0);
  cr_assert_eq (vol_list (pool, true, collect_guids, g), 0);
  cr_assert_eq (g[0], 4);
  /* Kept across a rename and a reopen. */
  cr_assert_eq (vol_stat (pool, "a@s1", &info), 0);
  guid = info.guid;
  cr_assert_eq (snap_rename (pool, "a", "s1", "first"), 0);
  pool = fsck_reopen (dev, pool, "guids");
  cr_assert_eq (vol_stat (pool, "a@first", &info), 0);
  cr_assert_eq (info.guid, guid);
  cr_assert_eq (vol_stat (pool, "a", &info), 0);
  cr_assert_eq (info.guid, 0);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* ---------------------------------------------------------------- round trips */

Test (send, full_stream_round_trip)
{
  struct rng rng = { test_seed ("send.full_stream_round_trip", 1) };
  struct cairn_dev *da = mem_pool (64 * MIB, NULL), *db = mem_pool (64 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da), *b = pool_open_ok (db);
  struct repl_recv_result res;
  struct vol_info ia, ib;
  struct buf s;

  cr_assert_eq (vol_create (a, "tenant/v", VOL_SIZE, NULL), 0);
  scribble (a, "tenant/v", &rng, 60);
  cr_assert_eq (snap_create (a, "tenant/v", "s1"), 0);
  scribble (a, "tenant/v", &rng, 20);      /* after the snapshot: not sent */
  s = send_to_buf (a, "tenant/v@s1", NULL, NULL);
  cr_assert_eq (receive_buf (b, "copy", s.p, s.len, &rng, &res), 0, "%s",
                cairn_errmsg ());
  cr_assert_str_eq (res.name, "copy@s1");
  cr_assert (!res.incremental && !res.kept);
  cr_assert_eq (res.stream_bytes, s.len);
  assert_same (a, "tenant/v@s1", b, "copy@s1");
  assert_same (a, "tenant/v@s1", b, "copy");
  cr_assert_eq (vol_stat (a, "tenant/v@s1", &ia), 0);
  cr_assert_eq (vol_stat (b, "copy@s1", &ib), 0);
  cr_assert_eq (ib.guid, ia.guid);
  cr_assert_eq (ib.ctime, ia.ctime);
  cr_assert_eq (ib.referenced, ia.referenced);
  /* A full stream does not overwrite a volume. */
  cr_assert_eq (receive_buf (b, "copy", s.p, s.len, &rng, NULL), -EEXIST);
  cr_assert (strstr (cairn_errmsg (), "exists") != NULL, "%s", cairn_errmsg ());
  b = fsck_reopen (db, b, "after a full receive");
  assert_same (a, "tenant/v@s1", b, "copy@s1");
  /* The received volume is an ordinary one: it takes writes. */
  write_block (b, "copy", 3, 99);
  free (s.p);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (db);
}

Test (send, chain_of_incrementals)
{
  struct rng rng = { test_seed ("send.chain_of_incrementals", 2) };
  struct cairn_dev *da = mem_pool (128 * MIB, NULL), *db = mem_pool (128 * MIB, NULL);
  struct cairn_pool *a = pool_open_ok (da), *b = pool_open_ok (db);
  enum { ROUNDS = 8 };
  uint64_t base = empty_pool_blocks (db, &b), used;
  struct buf s;

  cr_assert_eq (vol_create (a, "v", VOL_SIZE, NULL), 0);
  scribble (a, "v", &rng, 40);
  cr_assert_eq (snap_create (a, "v", "s0"), 0);
  s = send_to_buf (a, "v@s0", NULL, NULL);
  cr_assert_eq (receive_buf (b, "v", s.p, s.len, &rng, NULL), 0, "%s", cairn_errmsg ());
  free (s.p);
  for (unsigned i = 1; i <= ROUNDS; i++) {
    char snap[16], prev[32], name[32];
    struct repl_recv_result res;

    scribble (a, "v", &rng, 10 + rng_below (&rng, 40));
    if (i == 3)
      cr_assert_eq (vol_resize (a, "v", VOL_SIZE + 3 * MIB, false), 0);
    if (i == 6) {
      /* Shrink in a generation of its own (a shrink in the generation
       * of a write has its own test: volume::shrink_in_the_generation_
       * of_a_write).
       */
      cr_assert_eq (pool_commit (a), 0);
      cr_assert_eq (vol_resize (a, "v", VOL_SIZE + 2 * MIB - 512, true), 0,
                    "%s", cairn_errmsg ());
    }
    snprintf (snap, sizeof snap, "s%u", i);
    snprintf (name, sizeof name, "v@s%u", i);
    /* The base as SNAP or as VOL@SNAP. */
    snprintf (prev, sizeof prev, i % 2 ? "s%u" : "v@s%u", i - 1);
    cr_assert_eq (snap_create (a, "v", snap), 0);
    s = send_to_buf (a, name, prev, NULL);
    cr_assert_eq (receive_buf (b, "v", s.p, s.len, &rng, &res), 0, "round %u: %s",
                  i, cairn_errmsg ());
    cr_assert (res.incremental);
    cr_assert_str_eq (res.name, name);
    free (s.p);
    assert_same (a, name, b, name);
    assert_same (a, name, b, "v");
    if (i == 4)
      b = fsck_reopen (db, b, "in the chain");
  }
  /* Every older snapshot is still there and intact. */
  for (unsigned i = 0; i <= ROUNDS; i++) {
    char name[32];

    snprintf (name, sizeof name, "v@s%u", i);
    assert_same (a, name, b, name);
  }
  b = fsck_reopen (db, b, "after the chain");
  /* Deleting what was received gives every block back. */
  cr_assert_eq (vol_delete (b, "v", VOL_DELETE_RECURSIVE), 0, "%s", cairn_errmsg ());
  b = fsck_reopen (db, b, "after deleting the received volume");
  cr_assert_eq (vol_reclaim_wait (b, NULL, NULL), 0, "%s", cairn_errmsg ());
  used = pool_blocks_in_use (b);
  cr_assert_eq (used, base, "%" PRIu64 " blocks allocated (besides the "
                "space map's) after deleting everything, %" PRIu64 " in the "
                "empty pool", used, base);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (db);
}

/* ---------------------------------------------------------------- broken streams */

void
source_make (struct source *src, struct rng *rng)
{
  src->dev = mem_pool (64 * MIB, NULL);
  src->pool = pool_open_ok (src->dev);
  cr_assert_eq (vol_create (src->pool, "v", VOL_SIZE, NULL), 0);
  scribble (src->pool, "v", rng, 50);
  cr_assert_eq (snap_create (src->pool, "v", "s1"), 0);
  scribble (src->pool, "v", rng, 30);
  cr_assert_eq (snap_create (src->pool, "v", "s2"), 0);
  src->full = send_to_buf (src->pool, "v@s1", NULL, NULL);
  src->incr = send_to_buf (src->pool, "v@s2", "s1", NULL);
}

void
source_free (struct source *src)
{
  free (src->full.p);
  free (src->incr.p);
  cr_assert_eq (pool_close (src->pool), 0);
  dev_close (src->dev);
}

/* A receiving pool; with base, v@s1 received into it already. */
struct cairn_pool *
target_make (struct cairn_dev **devp, struct source *src, bool base,
             struct rng *rng)
{
  struct cairn_pool *pool;

  *devp = mem_pool (64 * MIB, NULL);
  pool = pool_open_ok (*devp);
  if (base)
    cr_assert_eq (receive_buf (pool, "v", src->full.p, src->full.len, rng, NULL), 0,
                  "%s", cairn_errmsg ());
  return pool;
}

/* Check that a failed receive changed nothing vol_list shows, before and
 * after a reopen with fsck.
 */
struct cairn_pool *
assert_unchanged (struct cairn_dev *dev, struct cairn_pool *pool,
                  const char *before, const char *when)
{
  char *now = listing (pool);

  cr_assert_str_eq (now, before, "%s changed the catalog", when);
  free (now);
  pool = fsck_reopen (dev, pool, when);
  now = listing (pool);
  cr_assert_str_eq (now, before, "%s changed the catalog (after a reopen)", when);
  free (now);
  return pool;
}

/* Resume an interrupted receive into v: the sender continues from the
 * token; the result must be v@snap, equal to the source's.
 */
static void
resume (struct source *src, struct cairn_pool *pool, const char *token,
        bool incr, struct rng *rng)
{
  const char *snap = incr ? "v@s2" : "v@s1";
  struct buf s = send_to_buf (src->pool, snap, incr ? "s1" : NULL, token);
  struct repl_recv_result res;

  cr_assert_eq (receive_buf (pool, "v", s.p, s.len, rng, &res), 0, "resuming: %s",
                cairn_errmsg ());
  cr_assert (res.resumed);
  cr_assert_str_eq (res.name, snap);
  assert_same (src->pool, snap, pool, snap);
  assert_same (src->pool, snap, pool, "v");
  free (s.p);
}

Test (send, truncated_streams_change_nothing_and_resume)
{
  struct rng rng = { test_seed ("send.truncated_streams", 3) };
  struct source src;
  unsigned kept = 0, resumed = 0;

  source_make (&src, &rng);
  for (int incr = 0; incr <= 1; incr++) {
    const struct buf *s = incr ? &src.incr : &src.full;

    for (unsigned k = 0; k < 12; k++) {
      struct cairn_dev *dev;
      struct cairn_pool *pool = target_make (&dev, &src, incr, &rng);
      struct repl_recv_result res;
      size_t cut = k == 0 ? 0 : k == 1 ? 7 : k == 2 ? 100 : k == 3 ? s->len - 1
        : rng_below (&rng, s->len);
      char *before = listing (pool), token[STREAM_TOKEN_MAX];
      int r = receive_buf (pool, "v", s->p, cut, &rng, &res);

      cr_assert_lt (r, 0, "a stream cut at byte %zu of %zu was accepted", cut,
                    s->len);
      cr_assert_eq (r, -EPIPE, "cut at %zu: %s", cut, cairn_errmsg ());
      pool = assert_unchanged (dev, pool, before, "a truncated stream");
      if (!res.kept)
        cr_assert_eq (repl_recv_token (pool, "v", token), -ENOENT);
      else {
        kept++;
        /* The token survived the reopen. */
        cr_assert_eq (repl_recv_token (pool, "v", token), 0);
        cr_assert_str_eq (token, res.token);
        /* Without the resumed stream, the receive refuses and keeps it. */
        cr_assert_lt (receive_buf (pool, "v", s->p, s->len, &rng, NULL), 0);
        cr_assert (strstr (cairn_errmsg (), "resume") != NULL, "%s",
                   cairn_errmsg ());
        if (k % 2) {
          resume (&src, pool, token, incr, &rng);
          resumed++;
        }
        else {
          cr_assert_eq (repl_recv_abort (pool, "v"), 0, "%s", cairn_errmsg ());
          cr_assert_eq (repl_recv_token (pool, "v", token), -ENOENT);
          pool = assert_unchanged (dev, pool, before, "an aborted receive");
        }
      }
      free (before);
      pool = fsck_reopen (dev, pool, "the end of a cut");
      cr_assert_eq (pool_close (pool), 0);
      dev_close (dev);
    }
  }
  fprintf (stderr, "send.truncated_streams: %u of 24 cuts kept their progress, "
           "%u resumed\n", kept, resumed);
  cr_assert_gt (resumed, 4);
  source_free (&src);
}

Test (send, resumed_stream_cut_again)
{
  struct rng rng = { test_seed ("send.resumed_stream_cut_again", 4) };
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct repl_recv_result res;
  struct buf s;
  char token[STREAM_TOKEN_MAX];

  source_make (&src, &rng);
  pool = target_make (&dev, &src, true, &rng);
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len / 3, &rng, &res),
                -EPIPE);
  cr_assert (res.kept);
  snprintf (token, sizeof token, "%s", res.token);
  s = send_to_buf (src.pool, "v@s2", "s1", token);
  cr_assert_eq (receive_buf (pool, "v", s.p, s.len / 2, &rng, &res), -EPIPE);
  cr_assert (res.kept && res.resumed);
  cr_assert_str_neq (res.token, token, "no progress was kept");
  free (s.p);
  pool = fsck_reopen (dev, pool, "a resumed stream cut again");
  resume (&src, pool, res.token, true, &rng);
  pool = fsck_reopen (dev, pool, "after resuming twice");
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  source_free (&src);
}

/* ---------------------------------------------------------------- BLOCKSUMS */

/* The incompatible features in a stream's HEADER (after the magic and the
 * record's framing).
 */
static uint32_t
stream_incompat (const struct buf *s)
{
  cr_assert_gt (s->len, STREAM_MAGIC_LEN + STREAM_FRAME_LEN + 8);
  return get_le32 (s->p + STREAM_MAGIC_LEN + STREAM_FRAME_LEN + 4);
}

/* The same stream with other incompatible features: with 0, the stream a
 * sender before BLOCKSUMS sent (same records, PROGRESS in the same
 * places, WRITEs hashed over their data).
 */
static struct buf
reencode (const struct buf *in, uint32_t incompat)
{
  struct stream_enc_opts o = { .progress_interval = 0,
                               .max_data = STREAM_MAX_DATA };
  struct buf out = { NULL, 0, 0 };
  struct stream_enc *enc = NULL;
  struct stream_dec *dec;
  struct stream_header h;
  size_t pos = 0, used;
  int r = 0;

  cr_assert_eq (stream_dec_new (NULL, &dec), 0);
  while (r == 0 && pos < in->len) {
    struct stream_event ev;

    r = stream_dec_next (dec, in->p + pos, in->len - pos, &used, &ev);
    cr_assert_geq (r, 0, "%s", stream_dec_error (dec));
    pos += used;
    if (r == 0)
      break;
    r = 0;
    switch (ev.type) {
    case STREAM_EV_HEADER:
      h = *ev.header;
      h.incompat = incompat;
      cr_assert_eq (stream_enc_new (&h, &o, buf_sink, &out, &enc), 0);
      r = stream_enc_begin (enc);
      break;
    case STREAM_EV_WRITE:
      r = stream_enc_write (enc, ev.offset, ev.data, ev.length);
      break;
    case STREAM_EV_ZERO:
      r = stream_enc_zero (enc, ev.offset, ev.length);
      break;
    case STREAM_EV_PROGRESS:
      r = stream_enc_progress (enc, ev.offset);
      break;
    case STREAM_EV_RESUME:
      cr_assert_fail ("a resumed stream");
      break;
    case STREAM_EV_END:
      r = stream_enc_end (enc);
      break;
    }
    cr_assert_eq (r, 0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (stream_dec_finish (dec), 0);
  stream_dec_free (dec);
  stream_enc_free (enc);
  cr_assert_eq (out.len, in->len);
  return out;
}

/* New streams have BLOCKSUMS; streams without it (kept from an older
 * sender) still receive, into the same volume, before or after flagged
 * ones, and a receiver's resume token of such a stream makes today's
 * sender resume it without the feature: resuming works across an
 * upgrade of the sender.
 */
Test (send, blocksums_and_older_streams)
{
  struct rng rng = { test_seed ("send.blocksums_and_older_streams", 11) };
  struct source src;
  struct buf old_full, old_incr;

  source_make (&src, &rng);
  cr_assert_eq (stream_incompat (&src.full), STREAM_INCOMPAT_BLOCKSUMS);
  cr_assert_eq (stream_incompat (&src.incr), STREAM_INCOMPAT_BLOCKSUMS);
  old_full = reencode (&src.full, 0);
  old_incr = reencode (&src.incr, 0);
  cr_assert_eq (stream_incompat (&old_full), 0);
  cr_assert_neq (memcmp (old_full.p, src.full.p, old_full.len), 0);

  /* Old full then new incremental, and new full then old incremental. */
  for (int mix = 0; mix < 2; mix++) {
    struct cairn_dev *dev;
    struct cairn_pool *pool = target_make (&dev, &src, false, &rng);
    const struct buf *f = mix ? &src.full : &old_full;
    const struct buf *i = mix ? &old_incr : &src.incr;

    cr_assert_eq (receive_buf (pool, "v", f->p, f->len, &rng, NULL), 0, "%s",
                  cairn_errmsg ());
    assert_same (src.pool, "v@s1", pool, "v@s1");
    cr_assert_eq (receive_buf (pool, "v", i->p, i->len, &rng, NULL), 0, "%s",
                  cairn_errmsg ());
    assert_same (src.pool, "v@s2", pool, "v");
    pool = fsck_reopen (dev, pool, "older and newer streams");
    assert_same (src.pool, "v@s2", pool, "v@s2");
    cr_assert_eq (pool_close (pool), 0);
    dev_close (dev);
  }

  /* Cut streams of each kind, resumed by this sender. */
  for (int k = 0; k < 4; k++) {
    bool incr = k % 2, old = k < 2;
    const struct buf *in = incr ? (old ? &old_incr : &src.incr)
      : (old ? &old_full : &src.full);
    struct cairn_dev *dev;
    struct cairn_pool *pool = target_make (&dev, &src, incr, &rng);
    struct repl_recv_result res;
    char token[STREAM_TOKEN_MAX];
    struct buf s;

    cr_assert_eq (receive_buf (pool, "v", in->p, in->len / 2, &rng, &res),
                  -EPIPE);
    cr_assert (res.kept, "no progress kept at half the stream");
    snprintf (token, sizeof token, "%s", res.token);
    s = send_to_buf (src.pool, incr ? "v@s2" : "v@s1", incr ? "s1" : NULL,
                     token);
    cr_assert_eq (stream_incompat (&s), old ? 0 : STREAM_INCOMPAT_BLOCKSUMS,
                  "a resumed stream must keep the features of the stream "
                  "it continues");
    free (s.p);
    pool = fsck_reopen (dev, pool, "a cut older stream");
    resume (&src, pool, token, incr, &rng);
    pool = fsck_reopen (dev, pool, "resumed across the upgrade");
    cr_assert_eq (pool_close (pool), 0);
    dev_close (dev);
  }
  free (old_full.p);
  free (old_incr.p);
  source_free (&src);
}

Test (send, flipped_bytes_change_nothing)
{
  struct rng rng = { test_seed ("send.flipped_bytes", 5) };
  struct source src;

  source_make (&src, &rng);
  for (int incr = 0; incr <= 1; incr++) {
    const struct buf *s = incr ? &src.incr : &src.full;
    struct cairn_dev *dev;
    struct cairn_pool *pool = target_make (&dev, &src, incr, &rng);
    char *before = listing (pool);
    uint8_t *copy = malloc (s->len);

    for (unsigned k = 0; k < 10; k++) {
      struct repl_recv_result res;
      size_t at = k < 2 ? k * 20 + 3 : rng_below (&rng, s->len);
      int r;

      memcpy (copy, s->p, s->len);
      copy[at] ^= (uint8_t) (1u << rng_below (&rng, 8));
      r = receive_buf (pool, "v", copy, s->len, &rng, &res);
      cr_assert_lt (r, 0, "a stream with byte %zu of %zu flipped was accepted",
                    at, s->len);
      pool = assert_unchanged (dev, pool, before, "a corrupted stream");
      if (res.kept) {
        if (k % 2)
          cr_assert_eq (repl_recv_abort (pool, "v"), 0, "%s", cairn_errmsg ());
        else {
          /* The records before the flipped one were good: resume. */
          resume (&src, pool, res.token, incr, &rng);
          free (before);
          cr_assert_eq (pool_close (pool), 0);
          dev_close (dev);
          pool = target_make (&dev, &src, incr, &rng);
          before = listing (pool);
        }
      }
    }
    free (copy);
    free (before);
    pool = fsck_reopen (dev, pool, "after the corrupted streams");
    cr_assert_eq (receive_buf (pool, "v", s->p, s->len, &rng, NULL), 0, "%s",
                  cairn_errmsg ());
    cr_assert_eq (pool_close (pool), 0);
    dev_close (dev);
  }
  source_free (&src);
}

/* ---------------------------------------------------------------- refused bases */

/* Receive src's incremental stream into pool, expecting err and msg. */
static struct cairn_pool *
refused (struct source *src, struct cairn_dev *dev, struct cairn_pool *pool,
         int err, const char *msg, struct rng *rng)
{
  char *before = listing (pool);
  int r = receive_buf (pool, "v", src->incr.p, src->incr.len, rng, NULL);

  cr_assert_eq (r, err, "expected %d, got %d: %s", err, r, cairn_errmsg ());
  cr_assert (strstr (cairn_errmsg (), msg) != NULL, "no '%s' in: %s", msg,
             cairn_errmsg ());
  fprintf (stderr, "send.refused_bases: %s\n", cairn_errmsg ());
  pool = assert_unchanged (dev, pool, before, msg);
  free (before);
  return pool;
}

Test (send, refused_bases)
{
  struct rng rng = { test_seed ("send.refused_bases", 6) };
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct buf s3;

  source_make (&src, &rng);

  /* No target at all. */
  pool = target_make (&dev, &src, false, &rng);
  pool = refused (&src, dev, pool, -ENOENT, "does not exist", &rng);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);

  /* A target written after its newest snapshot. */
  pool = target_make (&dev, &src, true, &rng);
  write_block (pool, "v", 5, 7);
  pool = refused (&src, dev, pool, -ESTALE, "was written after its snapshot 's1'",
                  &rng);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);

  /* A newer snapshot: refused; once it is gone, the stream applies. */
  pool = target_make (&dev, &src, true, &rng);
  cr_assert_eq (snap_create (pool, "v", "extra"), 0);
  pool = refused (&src, dev, pool, -ESTALE, "has newer snapshots ('extra'", &rng);
  cr_assert_eq (snap_delete (pool, "v", "extra"), 0);
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len, &rng, NULL), 0,
                "%s", cairn_errmsg ());
  assert_same (src.pool, "v@s2", pool, "v@s2");
  /* The same stream again: its snapshot is there already. */
  pool = refused (&src, dev, pool, -EEXIST, "received already", &rng);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);

  /* A clone of the live target, newer than the base: its state is pinned
   * after the base, so the target is no longer exactly the base.
   */
  pool = target_make (&dev, &src, true, &rng);
  cr_assert_eq (vol_clone (pool, "v", "c"), 0);
  pool = refused (&src, dev, pool, -ESTALE, "newer than 'v@s1'", &rng);
  cr_assert_eq (vol_delete (pool, "c", 0), 0);
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len, &rng, NULL), 0,
                "%s", cairn_errmsg ());
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);

  /* A base the target does not have. */
  scribble (src.pool, "v", &rng, 5);
  cr_assert_eq (snap_create (src.pool, "v", "s3"), 0);
  s3 = send_to_buf (src.pool, "v@s3", "s2", NULL);
  pool = target_make (&dev, &src, true, &rng);
  {
    char *before = listing (pool);

    cr_assert_eq (receive_buf (pool, "v", s3.p, s3.len, &rng, NULL), -ESTALE);
    cr_assert (strstr (cairn_errmsg (), "does not have") != NULL, "%s",
               cairn_errmsg ());
    pool = assert_unchanged (dev, pool, before, "a missing base");
    free (before);
  }
  free (s3.p);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  source_free (&src);
}

/* Feed the first half of src's incremental stream into pool; returns the
 * receive, to be finished.
 */
static struct repl_recv *
half_received (struct source *src, struct cairn_pool *pool)
{
  struct repl_recv *rr;
  size_t used;

  cr_assert_eq (repl_recv_new (pool, "v", NULL, &rr), 0);
  cr_assert_eq (repl_recv_feed (rr, src->incr.p, src->incr.len / 2, &used), 0,
                "%s", cairn_errmsg ());
  cr_assert_eq (used, src->incr.len / 2);
  return rr;
}

Test (send, target_changed_during_the_receive)
{
  struct rng rng = { test_seed ("send.target_changed", 7) };
  struct source src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct repl_recv_result res;
  struct repl_recv *rr;
  struct cairn_volume *v;
  char *before;
  size_t used;

  source_make (&src, &rng);

  /* Written while the stream comes: publishing refuses, the partial stays
   * (hidden), and aborting it gives everything back.
   */
  pool = target_make (&dev, &src, true, &rng);
  rr = half_received (&src, pool);
  /* One receive at a time into a volume. */
  cr_assert_eq (receive_buf (pool, "v", src.incr.p, src.incr.len, &rng, NULL),
                -EBUSY);
  cr_assert (strstr (cairn_errmsg (), "another receive") != NULL, "%s",
             cairn_errmsg ());
  write_block (pool, "v", 9, 1);
  before = listing (pool);
  cr_assert_eq (repl_recv_feed (rr, src.incr.p + src.incr.len / 2,
                                src.incr.len - src.incr.len / 2, &used), -ESTALE);
  cr_assert (strstr (cairn_errmsg (), "was written after") != NULL, "%s",
             cairn_errmsg ());
  cr_assert_eq (repl_recv_finish (rr, &res), -ESTALE);
  cr_assert (res.kept);
  repl_recv_free (rr);
  pool = assert_unchanged (dev, pool, before, "a refused publish");
  cr_assert_eq (repl_recv_abort (pool, "v"), 0);
  pool = assert_unchanged (dev, pool, before, "an aborted receive");
  free (before);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);

  /* Open while the stream comes: publishing waits for it to close; the
   * sender resumes from the token, and then it applies.
   */
  pool = target_make (&dev, &src, true, &rng);
  rr = half_received (&src, pool);
  cr_assert_eq (vol_open (pool, "v", &v), 0);
  cr_assert_eq (repl_recv_feed (rr, src.incr.p + src.incr.len / 2,
                                src.incr.len - src.incr.len / 2, &used), -EBUSY);
  cr_assert_eq (repl_recv_finish (rr, &res), -EBUSY);
  cr_assert (res.kept);
  repl_recv_free (rr);
  vol_close (v);
  pool = fsck_reopen (dev, pool, "a publish that waited");
  resume (&src, pool, res.token, true, &rng);
  pool = fsck_reopen (dev, pool, "after a publish that waited");
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
  source_free (&src);
}

/* ---------------------------------------------------------------- size */

Test (send, overhead_of_scattered_blocks)
{
  struct cairn_dev *dev = mem_pool (128 * MIB, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct repl_send_opts o = { .from = "s1", .dry_run = true, .sink = buf_sink };
  struct repl_send_result res;
  const uint64_t data = 1000 * 4096;
  struct buf s;
  double overhead;

  cr_assert_eq (vol_create (pool, "v", 64 * MIB, NULL), 0);
  for (uint64_t i = 0; i < 2000; i++)
    write_block (pool, "v", i * 3, i);
  cr_assert_eq (snap_create (pool, "v", "s1"), 0);
  for (uint64_t i = 0; i < 1000; i++)
    write_block (pool, "v", i * 5 + 1, 10000 + i);      /* none adjacent */
  cr_assert_eq (snap_create (pool, "v", "s2"), 0);
  s = send_to_buf (pool, "v@s2", "s1", NULL);
  overhead = (double) (s.len - data) / (double) data * 100;
  fprintf (stderr, "send.overhead: 1000 scattered 4 KiB blocks make a stream of "
           "%zu bytes: %.3f%% over the data\n", s.len, overhead);
  cr_assert_leq (overhead, 2.0);
  /* A dry run gives the same size, without the data. */
  o.sink_opaque = &(struct buf) { NULL, 0, 0 };
  cr_assert_eq (repl_send (pool, "v@s2", &o, &res), 0, "%s", cairn_errmsg ());
  cr_assert_eq (res.stream_bytes, s.len);
  cr_assert_eq (res.data_bytes, data);
  free (((struct buf *) o.sink_opaque)->p);
  free (s.p);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

/* ---------------------------------------------------------------- crash */

Test (send, receive_resumes_after_a_power_cut)
{
  struct rng rng = { test_seed ("send.power_cut", 8) };
  struct cairn_dev *da = mem_pool (96 * MIB, NULL), *lower = mem_pool (96 * MIB, NULL), *pc;
  struct cairn_pool *a = pool_open_ok (da), *b;
  struct repl_recv *rr;
  struct cairn_volume *v;
  char *before, token[STREAM_TOKEN_MAX];
  static uint8_t data[MIB];
  struct stream_token tok;
  struct buf s;
  size_t used;

  /* 40 MiB of data: the stream has PROGRESS records at 16 and 32 MiB,
   * where the receive saves its token.
   */
  cr_assert_eq (vol_create (a, "v", 48 * MIB, NULL), 0);
  cr_assert_eq (vol_open (a, "v", &v), 0);
  for (unsigned i = 0; i < 40; i++) {
    fill_pattern (data, sizeof data, rng_next (&rng));
    cr_assert_eq (vol_pwrite (v, data, MIB, (uint64_t) i * MIB, 0), 0);
  }
  vol_close (v);
  cr_assert_eq (snap_create (a, "v", "s1"), 0);
  s = send_to_buf (a, "v@s1", NULL, NULL);

  b = pool_open_ok (lower);
  before = listing (b);
  cr_assert_eq (pool_close (b), 0);
  cr_assert_eq (dev_powercut_create (lower, 42, &pc), 0);
  b = pool_open_ok (pc);
  cr_assert_eq (repl_recv_new (b, "v", NULL, &rr), 0);
  cr_assert_eq (repl_recv_feed (rr, s.p, s.len * 7 / 8, &used), 0, "%s",
                cairn_errmsg ());
  /* The power goes: nothing after the last save is kept. */
  dev_powercut_cut (pc, true);
  repl_recv_free (rr);
  (void) pool_close (b);
  dev_close (pc);

  b = pool_open_ok (lower);
  b = assert_unchanged (lower, b, before, "a receive cut by a power failure");
  cr_assert_eq (repl_recv_token (b, "v", token), 0, "%s", cairn_errmsg ());
  cr_assert_eq (stream_token_parse (token, &tok), 0);
  fprintf (stderr, "send.power_cut: resuming from byte %" PRIu64 " of the volume"
           " (%" PRIu64 " of %zu stream bytes were verified)\n",
           tok.next_offset, tok.bytes, s.len);
  cr_assert_geq (tok.next_offset, 16 * MIB, "the receive saved no progress");
  free (s.p);
  s = send_to_buf (a, "v@s1", NULL, token);
  cr_assert_lt (s.len, 30 * MIB, "the resumed stream is %zu bytes", s.len);
  cr_assert_eq (receive_buf (b, "v", s.p, s.len, &rng, NULL), 0, "%s", cairn_errmsg ());
  assert_same (a, "v@s1", b, "v@s1");
  b = fsck_reopen (lower, b, "after resuming past a power cut");
  free (s.p);
  free (before);
  cr_assert_eq (pool_close (a), 0);
  cr_assert_eq (pool_close (b), 0);
  dev_close (da);
  dev_close (lower);
}
