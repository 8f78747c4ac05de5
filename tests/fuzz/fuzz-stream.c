/* Cairn fuzz harness: send streams, decoded and received
 * (tests/fuzz/README.md).
 *
 * The pool every input goes into holds "vm/a" with snapshot s1, received
 * from a sending pool (so that an incremental stream from s1 applies to
 * it), and "c", a clone of vm/a@s1 with its own write.  The first byte of
 * the input says how the rest is used:
 *
 *   bit 0      0: the rest is stream bytes, fed as they are;
 *              1: the rest is records, each type u8, flags u8, body
 *              length u32 (little-endian, cut to what is left) and the
 *              body, which the harness frames behind the magic with a
 *              correct SHA-256 chain (BLOCKSUMS when the HEADER body asks
 *              for it), so that the fuzzer reaches what lies behind the
 *              checksums: the fields, the ranges, the receiver;
 *   bits 1-2   the target: a new volume, vm/a (incremental), c (diverged
 *              from vm/a@s1), or vm/a with --rollback;
 *   bits 4-7   0: one feed; k: feeds of 2^(k-1) bytes.
 *
 * What must hold, beyond no crash, leak or undefined behaviour:
 *  1. a receive that publishes a snapshot published what the stream says:
 *     the stream decoded on its own gives the same volume size, and every
 *     WRITE and ZERO range reads back as the stream carried it;
 *  2. whatever the stream, the pool closes and fsck finds it clean.
 *
 * CAIRN_FUZZ_WRITE_SEEDS=DIR in the environment makes the harness write
 * its seed inputs (the real streams, raw and as records) into DIR.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "replicate.h"
#include "sha256.h"
#include "stream.h"
#include "volume.h"

/* A growing byte buffer. */
struct buf {
  uint8_t *p;
  size_t len, cap;
};

static int
buf_add (struct buf *b, const void *data, size_t len)
{
  if (b->len + len > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;

    while (cap < b->len + len)
      cap *= 2;
    b->p = realloc (b->p, cap);
    if (b->p == NULL)
      fuzz_die ("out of memory");
    b->cap = cap;
  }
  memcpy (b->p + b->len, data, len);
  b->len += len;
  return 0;
}

static int
buf_sink (void *opaque, const void *data, size_t len)
{
  return buf_add (opaque, data, len);
}

static struct fuzz_image image;
static struct buf full_stream, inc_stream;
static bool ready;

/* The sending pool: vm/a with snapshots s1 and s2. */
static int
fill_src (struct cairn_pool *pool)
{
  int r;

  if ((r = vol_create (pool, "vm/a", 1 << 20, NULL)) < 0 ||
      (r = fuzz_fill_volume (pool, "vm/a", 'a', 0, 16 << 10)) < 0 ||
      (r = fuzz_fill_volume (pool, "vm/a", 'a', 512 << 10, 4 << 10)) < 0 ||
      (r = snap_create (pool, "vm/a", "s1")) < 0 ||
      (r = fuzz_fill_volume (pool, "vm/a", 'b', 4 << 10, 8 << 10)) < 0)
    return r;
  /* A hole where there was data: an incremental ZERO record. */
  {
    struct cairn_volume *v;

    if ((r = vol_open (pool, "vm/a", &v)) < 0)
      return r;
    r = vol_trim (v, 4096, 512 << 10, 0);
    vol_close (v);
    if (r < 0)
      return r;
  }
  return snap_create (pool, "vm/a", "s2");
}

/* Receive a whole stream into target. */
static int
receive (struct cairn_pool *pool, const char *target, const struct buf *s)
{
  struct repl_recv *rr;
  struct repl_recv_result res;
  size_t used;
  int r;

  if ((r = repl_recv_new (pool, target, NULL, &rr)) < 0)
    return r;
  r = repl_recv_feed (rr, s->p, s->len, &used);
  if (r >= 0)
    r = repl_recv_finish (rr, &res);
  repl_recv_free (rr);
  return r;
}

/* The receiving pool: vm/a@s1 from the sender, and a clone of it. */
static int
fill_dst (struct cairn_pool *pool)
{
  int r;

  if ((r = receive (pool, "vm/a", &full_stream)) < 0 ||
      (r = vol_clone (pool, "vm/a@s1", "c")) < 0 ||
      (r = fuzz_fill_volume (pool, "c", 'c', 0, 4 << 10)) < 0)
    return r;
  return pool_commit (pool);
}

/* A real stream as records (mode bit 0), after the mode byte. */
static void
to_records (const struct buf *s, uint8_t mode, struct buf *out)
{
  size_t off = STREAM_MAGIC_LEN;

  buf_add (out, &mode, 1);
  while (off + STREAM_OVERHEAD <= s->len) {
    uint32_t blen = s->p[off + 4] | s->p[off + 5] << 8 |
                    s->p[off + 6] << 16 | (uint32_t) s->p[off + 7] << 24;

    buf_add (out, s->p + off, 2);
    buf_add (out, s->p + off + 4, 4);
    buf_add (out, s->p + off + STREAM_FRAME_LEN, blen);
    off += STREAM_OVERHEAD + blen;
  }
}

/* Write one seed file. */
static void
write_seed (const char *dir, const char *name, const struct buf *b)
{
  char path[4096];
  FILE *fp;

  snprintf (path, sizeof path, "%s/%s", dir, name);
  fp = fopen (path, "wb");
  if (fp == NULL || fwrite (b->p, 1, b->len, fp) != b->len || fclose (fp))
    fuzz_die ("writing %s: %m", path);
}

/* The seeds: each real stream raw and as records, to each target. */
static void
write_seeds (const char *dir)
{
  static const struct { const char *name; const struct buf *s; uint8_t mode; }
  seeds[] = {
    { "full-new-raw", &full_stream, 0x00 },
    { "full-new-records", &full_stream, 0x01 },
    { "full-new-records-split", &full_stream, 0x51 },
    { "inc-a-raw", &inc_stream, 0x02 },
    { "inc-a-records", &inc_stream, 0x03 },
    { "inc-a-records-split", &inc_stream, 0x33 },
    { "inc-c-records", &inc_stream, 0x05 },
    { "inc-c-rollback-records", &inc_stream, 0x07 },
  };

  for (size_t i = 0; i < ARRAY_SIZE (seeds); i++) {
    struct buf b = { 0 };

    if (seeds[i].mode & 1)
      to_records (seeds[i].s, seeds[i].mode, &b);
    else {
      buf_add (&b, &seeds[i].mode, 1);
      buf_add (&b, seeds[i].s->p, seeds[i].s->len);
    }
    write_seed (dir, seeds[i].name, &b);
    free (b.p);
  }
}

/* Snapshot GUIDs are random (catalog-snap.c): the streams get fixed ones,
 * so that the seeds fit the pool that every run of the harness builds.
 */
#define GUID_S1 0x5331533153315331ull
#define GUID_S2 0x5332533253325332ull
#define FIXED_CTIME 1796083200ull

/* Re-encode stream s with the fixed GUIDs and time. */
static void
normalise (struct buf *s)
{
  struct stream_enc_opts eo = { .progress_interval = 0,
                                .max_data = STREAM_MAX_DATA };
  struct buf out = { 0 };
  struct stream_dec *dec;
  struct stream_enc *enc = NULL;
  struct stream_event ev;
  struct stream_header h;
  size_t off = 0, used;
  int r = stream_dec_new (NULL, &dec);

  while (r >= 0 && (r = stream_dec_next (dec, s->p + off, s->len - off,
                                         &used, &ev)) == 1) {
    off += used;
    switch (ev.type) {
    case STREAM_EV_HEADER:
      h = *ev.header;
      h.from_guid = h.from_guid ? GUID_S1 : 0;
      h.to_guid = h.from_guid ? GUID_S2 : GUID_S1;
      h.ctime = FIXED_CTIME;
      r = stream_enc_new (&h, &eo, buf_sink, &out, &enc);
      if (r == 0)
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
    case STREAM_EV_END:
      r = stream_enc_end (enc);
      break;
    default:
      r = -EINVAL;
    }
  }
  if (r < 0 || !stream_dec_done (dec))
    fuzz_die ("re-encoding a stream: %s", cairn_errmsg ());
  stream_enc_free (enc);
  stream_dec_free (dec);
  free (s->p);
  *s = out;
}

/* Build the pools and the real streams, once. */
static void
setup (void)
{
  struct fuzz_image src;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct repl_send_opts so = { .sink = buf_sink };
  struct repl_send_result res;
  const char *dir;

  fuzz_image_build (&src, fill_src);
  dev = fuzz_image_dev (&src);
  if (fuzz_pool_open (dev, true, &pool) < 0)
    fuzz_die ("opening the sending pool: %s", cairn_errmsg ());
  so.sink_opaque = &full_stream;
  if (repl_send (pool, "vm/a@s1", &so, &res) < 0)
    fuzz_die ("sending vm/a@s1: %s", cairn_errmsg ());
  so.sink_opaque = &inc_stream;
  so.from = "s1";
  if (repl_send (pool, "vm/a@s2", &so, &res) < 0)
    fuzz_die ("sending vm/a@s2 from s1: %s", cairn_errmsg ());
  (void) pool_close (pool);
  dev_close (dev);
  normalise (&full_stream);
  normalise (&inc_stream);
  free (src.blocks);
  free (src.data);

  fuzz_image_build (&image, fill_dst);
  dir = getenv ("CAIRN_FUZZ_WRITE_SEEDS");
  if (dir)
    write_seeds (dir);
}

/* Frame records (mode bit 0) behind the magic, with their SHA-256 chain. */
static void
seal (const uint8_t *p, const uint8_t *end, struct buf *out)
{
  static const uint8_t zero[STREAM_SHA_LEN];
  uint8_t chain[STREAM_SHA_LEN], frame[STREAM_FRAME_LEN];
  static uint8_t sums[STREAM_MAX_PIECES * STREAM_SHA_LEN];
  struct sha256_ctx *sha = sha256_new ();
  bool blocksums = false;

  if (sha == NULL)
    fuzz_die ("out of memory");
  buf_add (out, STREAM_MAGIC, STREAM_MAGIC_LEN);
  memcpy (chain, zero, sizeof chain);
  while (end - p >= 6) {
    uint8_t type = p[0], flags = p[1];
    uint32_t blen = p[2] | p[3] << 8 | p[4] << 16 | (uint32_t) p[5] << 24;

    p += 6;
    if (blen > (size_t) (end - p))
      blen = end - p;
    frame[0] = type;
    frame[1] = flags;
    frame[2] = frame[3] = 0;
    frame[4] = blen & 0xff;
    frame[5] = (blen >> 8) & 0xff;
    frame[6] = (blen >> 16) & 0xff;
    frame[7] = blen >> 24;
    if (type == STREAM_REC_HEADER && blen >= 8)
      blocksums = (p[4] & STREAM_INCOMPAT_BLOCKSUMS) != 0;
    sha256_update (sha, type == STREAM_REC_HEADER ? zero : chain,
                   STREAM_SHA_LEN);
    sha256_update (sha, frame, STREAM_FRAME_LEN);
    if (type == STREAM_REC_WRITE && blocksums && blen >= STREAM_WRITE_FIXED &&
        blen - STREAM_WRITE_FIXED <= STREAM_MAX_DATA) {
      uint32_t dlen = blen - STREAM_WRITE_FIXED;

      stream_piece_sums (p + STREAM_WRITE_FIXED, dlen, sums);
      sha256_update (sha, p, STREAM_WRITE_FIXED);
      sha256_update (sha, sums, stream_pieces (dlen) * STREAM_SHA_LEN);
    }
    else
      sha256_update (sha, p, blen);
    sha256_final (sha, chain);
    buf_add (out, frame, STREAM_FRAME_LEN);
    buf_add (out, p, blen);
    buf_add (out, chain, STREAM_SHA_LEN);
    p += blen;
  }
  sha256_free (sha);
}

/* Check a published snapshot against the stream decoded on its own
 * (invariant 1).
 */
static void
check_published (struct cairn_pool *pool, const char *name,
                 const uint8_t *s, size_t len)
{
  struct stream_dec *dec;
  struct cairn_volume *v;
  struct stream_event ev;
  uint8_t *got = NULL;
  size_t off = 0, used;
  int r;

  if (stream_dec_new (NULL, &dec) < 0)
    fuzz_die ("stream_dec_new: %s", cairn_errmsg ());
  if (vol_open (pool, name, &v) < 0)
    fuzz_die ("the published %s does not open: %s", name, cairn_errmsg ());
  while ((r = stream_dec_next (dec, s + off, len - off, &used, &ev)) == 1) {
    off += used;
    if (ev.type == STREAM_EV_HEADER && vol_size (v) != ev.header->vol_size)
      fuzz_die ("%s has %" PRIu64 " bytes, its stream said %" PRIu64, name,
                vol_size (v), ev.header->vol_size);
    if (ev.type != STREAM_EV_WRITE && ev.type != STREAM_EV_ZERO)
      continue;
    got = realloc (got, ev.length);
    if (got == NULL)
      fuzz_die ("out of memory");
    if (vol_pread (v, got, ev.length, ev.offset) < 0)
      fuzz_die ("reading %s at %" PRIu64 ": %s", name, ev.offset,
                cairn_errmsg ());
    for (uint64_t i = 0; i < ev.length; i++)
      if (got[i] != (ev.type == STREAM_EV_WRITE
                     ? ((const uint8_t *) ev.data)[i] : 0))
        fuzz_die ("%s at %" PRIu64 " is not what its stream wrote there",
                  name, ev.offset + i);
  }
  off += used;
  if (r < 0 || !stream_dec_done (dec))
    fuzz_die ("%s was published from a stream that does not decode: %s",
              name, r < 0 ? stream_dec_error (dec) : "it has no END");
  free (got);
  vol_close (v);
  stream_dec_free (dec);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static const char *const targets[] = { "new", "vm/a", "c", "vm/a" };
  struct repl_recv_opts opts = { 0 };
  struct repl_recv_result res;
  struct repl_recv *rr;
  struct cairn_dev *dev;
  struct cairn_pool *pool;
  struct buf sealed = { 0 };
  const uint8_t *s;
  size_t len, chunk, off = 0, used;
  uint8_t mode;
  int64_t problems;
  int r;

  if (!ready) {
    setup ();
    ready = true;
  }
  if (size < 1)
    return 0;
  mode = data[0];
  if (mode & 1) {
    seal (data + 1, data + size, &sealed);
    s = sealed.p;
    len = sealed.len;
  }
  else {
    s = data + 1;
    len = size - 1;
  }
  chunk = mode >> 4 ? (size_t) 1 << ((mode >> 4) - 1) : len;
  opts.rollback = ((mode >> 1) & 3) == 3;

  dev = fuzz_image_dev (&image);
  if (fuzz_pool_open (dev, false, &pool) < 0)
    fuzz_die ("opening the pool: %s", cairn_errmsg ());
  r = repl_recv_new (pool, targets[(mode >> 1) & 3], &opts, &rr);
  if (r < 0)
    fuzz_die ("repl_recv_new: %s", cairn_errmsg ());
  r = 0;
  while (r == 0 && off < len) {
    size_t n = len - off < chunk ? len - off : chunk;

    r = repl_recv_feed (rr, s + off, n, &used);
    if (used > n)
      fuzz_die ("repl_recv_feed used %zu of %zu bytes", used, n);
    off += used;
    if (r == 0 && used < n)
      fuzz_die ("repl_recv_feed left %zu bytes without an error",
                n - used);
  }
  r = repl_recv_finish (rr, &res);
  repl_recv_free (rr);
  if (getenv ("CAIRN_FUZZ_VERBOSE"))
    fprintf (stderr, "fuzz-stream: into %s: %s\n", targets[(mode >> 1) & 3],
             r == 0 ? res.name : cairn_errmsg ());
  if (r == 0)
    check_published (pool, res.name, s, off);

  if (pool_close (pool) < 0)
    fuzz_die ("closing the pool: %s", cairn_errmsg ());
  problems = fuzz_fsck (dev, true);
  if (problems != 0)
    fuzz_die ("fsck after the receive: %" PRId64 " problems (%s)", problems,
              problems < 0 ? cairn_errmsg () : "printed above");
  dev_close (dev);
  free (sealed.p);
  return 0;
}
