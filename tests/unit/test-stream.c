/* Unit tests for the send stream codec (proto/stream.c): random round trips
 * with random chunking, truncation at every byte, every single-byte change,
 * dropped, duplicated and swapped records, resume tokens and resumed
 * streams, tokens of other streams, hand-made streams that break each rule,
 * the stream's size overhead, a known-answer stream (the example of
 * cairn-stream(5)), and a fuzz loop.
 *
 * Hand-made streams are written by rechain() below, an independent writer
 * of the chain rules of cairn-stream(5), so these tests also check that the
 * page describes what the code does.
 *
 * Randomised tests print their seed; set CAIRN_TEST_SEED to replay one.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "sha256.h"
#include "stream.h"
#include "test-util.h"

/* ------------------------------------------------------------ helpers */

/* A growing byte buffer, and the encoder sink that appends to it. */
struct sbuf {
  uint8_t *p;
  size_t len, cap;
  int fail_after;               /* > 0: the sink fails on that call */
};

static void
sbuf_add (struct sbuf *s, const void *buf, size_t len)
{
  if (s->cap - s->len < len) {
    s->cap = MAX (s->cap * 2, s->len + len + 4096);
    s->p = realloc (s->p, s->cap);
    cr_assert_not_null (s->p);
  }
  memcpy (s->p + s->len, buf, len);
  s->len += len;
}

static int
sbuf_sink (void *opaque, const void *buf, size_t len)
{
  struct sbuf *s = opaque;

  if (s->fail_after > 0 && --s->fail_after == 0)
    return -ENOSPC;
  sbuf_add (s, buf, len);
  return 0;
}

/* A sink that only counts. */
static int
count_sink (void *opaque, const void *buf, size_t len)
{
  (void) buf;
  *(uint64_t *) opaque += len;
  return 0;
}

/* A header for tests. */
static void
test_header (struct stream_header *h, uint64_t vol_size, uint32_t bs,
             uint64_t to_guid)
{
  memset (h, 0, sizeof *h);
  h->block_size = bs;
  for (int i = 0; i < 16; i++)
    h->pool_uuid[i] = (uint8_t) (0xa0 + i);
  h->vol_id = 42;
  h->vol_size = vol_size;
  h->to_guid = to_guid;
  h->to_gen = 100;
  h->ctime = 1764547200;
  strcpy (h->vol_name, "tenant/db");
  strcpy (h->snap_name, "snap1");
}

/* What a sender sends: a list of operations in volume order. */
enum { OP_WRITE, OP_ZERO, OP_PROGRESS };
struct op {
  int kind;
  uint64_t off, len, tag;
};

/* Random operations that follow the ordering rules. */
static size_t
gen_ops (struct rng *r, const struct stream_header *h, struct op *ops,
         size_t max, uint64_t max_len)
{
  uint64_t pos = 0, bs = h->block_size;
  size_t n = 0;

  while (n < max) {
    unsigned k = (unsigned) rng_below (r, 20);

    if (rng_below (r, 3))
      pos += rng_below (r, 8) * bs;
    if (pos >= h->vol_size)
      break;
    if (k < 3) {
      ops[n++] = (struct op) { OP_PROGRESS, pos, 0, 0 };
      continue;
    }
    uint64_t len = (1 + rng_below (r, max_len / bs)) * bs;

    if (len > h->vol_size - pos)
      len = h->vol_size - pos;
    ops[n++] = (struct op) { k < 8 ? OP_ZERO : OP_WRITE, pos, len,
                             rng_next (r) };
    pos += len;
  }
  return n;
}

/* The BLOCKSUMS digests of len bytes, one sha256() per piece: written
 * independently of stream_piece_sums (which uses sha256_blocks).
 */
static uint8_t *
piece_sums (const uint8_t *data, uint64_t len)
{
  uint64_t n = (len + 4095) / 4096;
  uint8_t *sums = malloc (n * STREAM_SHA_LEN + 1);

  cr_assert_not_null (sums);
  for (uint64_t i = 0; i < n; i++)
    sha256 (data + i * 4096, MIN (4096, len - i * 4096),
            sums + i * STREAM_SHA_LEN);
  return sums;
}

/* Encode ops; with a token, resume from it and send only what lies at or
 * after its next_offset.  In a BLOCKSUMS stream, WRITEs with an odd tag go
 * through stream_enc_write_sums (when max_data does not split a piece).
 */
static void
encode_ops (const struct stream_header *h, const struct stream_enc_opts *o,
            const struct op *ops, size_t n, const struct stream_token *tok,
            struct sbuf *out, uint8_t digest[STREAM_SHA_LEN])
{
  struct stream_enc *enc;
  uint64_t from = tok ? tok->next_offset : 0;
  uint8_t *data = NULL;

  cr_assert_eq (stream_enc_new (h, o, sbuf_sink, out, &enc), 0, "%s",
                cairn_errmsg ());
  if (tok)
    cr_assert_eq (stream_enc_resume (enc, tok), 0, "%s", cairn_errmsg ());
  else
    cr_assert_eq (stream_enc_begin (enc), 0, "%s", cairn_errmsg ());
  for (size_t i = 0; i < n; i++) {
    uint64_t off = ops[i].off, len = ops[i].len, skip = 0;

    if (ops[i].kind == OP_PROGRESS) {
      if (off >= from)
        cr_assert_eq (stream_enc_progress (enc, off), 0, "%s",
                      cairn_errmsg ());
      continue;
    }
    if (off + len <= from)
      continue;
    if (off < from)
      skip = from - off;
    if (ops[i].kind == OP_ZERO) {
      cr_assert_eq (stream_enc_zero (enc, off + skip, len - skip), 0, "%s",
                    cairn_errmsg ());
      continue;
    }
    data = realloc (data, len);
    fill_pattern (data, len, ops[i].tag);
    if ((h->incompat & STREAM_INCOMPAT_BLOCKSUMS) && ops[i].tag % 2 &&
        (o == NULL || o->max_data % 4096 == 0)) {
      uint8_t *sums = piece_sums (data + skip, len - skip);

      cr_assert_eq (stream_enc_write_sums (enc, off + skip, data + skip,
                                           len - skip, sums), 0, "%s",
                    cairn_errmsg ());
      free (sums);
      continue;
    }
    cr_assert_eq (stream_enc_write (enc, off + skip, data + skip, len - skip),
                  0, "%s", cairn_errmsg ());
  }
  cr_assert_eq (stream_enc_end (enc), 0, "%s", cairn_errmsg ());
  cr_assert_eq (stream_enc_bytes (enc), out->len);
  if (digest)
    stream_enc_digest (enc, digest);
  stream_enc_free (enc);
  free (data);
}

/* Apply ops to an image, as the receiver should end up. */
static void
apply_ops (uint8_t *img, const struct op *ops, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (ops[i].kind == OP_WRITE)
      fill_pattern (img + ops[i].off, ops[i].len, ops[i].tag);
    else if (ops[i].kind == OP_ZERO)
      memset (img + ops[i].off, 0, ops[i].len);
  }
}

/* A receiver: applies verified events to an image, checking that every
 * event keeps the decoder's promises.
 */
struct model {
  uint8_t *img;
  uint64_t size, next;
  unsigned nev[STREAM_EV_END + 1];
  uint8_t digest[STREAM_SHA_LEN];
  struct stream_header hdr;
  int last;                     /* type of the last event, -1 none */
};

static void
model_apply (struct model *m, const struct stream_event *ev)
{
  cr_assert (ev->type <= STREAM_EV_END);
  cr_assert (m->last != STREAM_EV_END, "an event after END");
  if (m->last == -1)
    cr_assert_eq (ev->type, STREAM_EV_HEADER);
  m->nev[ev->type]++;
  m->last = (int) ev->type;
  switch (ev->type) {
  case STREAM_EV_HEADER:
    m->hdr = *ev->header;
    if (m->size == 0)
      m->size = m->hdr.vol_size;
    cr_assert_eq (m->hdr.vol_size, m->size);
    break;
  case STREAM_EV_WRITE:
  case STREAM_EV_ZERO:
    cr_assert (ev->length > 0 && ev->offset >= m->next &&
               ev->offset <= m->size && ev->length <= m->size - ev->offset &&
               ev->offset % m->hdr.block_size == 0);
    if (ev->type == STREAM_EV_WRITE) {
      cr_assert (ev->length <= STREAM_MAX_DATA);
      if (m->hdr.incompat & STREAM_INCOMPAT_BLOCKSUMS) {
        uint8_t *want = piece_sums (ev->data, ev->length);

        cr_assert_not_null (ev->sums, "a BLOCKSUMS WRITE without sums");
        cr_assert_eq (memcmp (ev->sums, want, stream_pieces (ev->length) *
                              STREAM_SHA_LEN), 0, "the sums of a WRITE at %"
                      PRIu64 " are not its pieces' SHA-256s", ev->offset);
        free (want);
      }
      else
        cr_assert_null (ev->sums);
      if (m->img)
        memcpy (m->img + ev->offset, ev->data, ev->length);
    }
    else if (m->img)
      memset (m->img + ev->offset, 0, ev->length);
    m->next = ev->offset + ev->length;
    break;
  case STREAM_EV_PROGRESS:
  case STREAM_EV_RESUME:
    cr_assert (ev->offset >= m->next && ev->offset <= m->size);
    m->next = ev->offset;
    break;
  case STREAM_EV_END:
    memcpy (m->digest, ev->digest, STREAM_SHA_LEN);
    break;
  }
}

static void
model_init (struct model *m, uint8_t *img, uint64_t size)
{
  memset (m, 0, sizeof *m);
  m->img = img;
  m->size = size;
  m->last = -1;
}

/* A chunk size to feed: single bytes, small pieces, big ones or all. */
static size_t
pick_chunk (struct rng *r, size_t left)
{
  size_t n;

  switch (rng_below (r, 4)) {
  case 0: n = 1 + rng_below (r, 16); break;
  case 1: n = 1 + rng_below (r, 5000); break;
  case 2: n = 1 + rng_below (r, 3 * STREAM_MAX_RECORD); break;
  default: n = left; break;
  }
  return MIN (n, left);
}

/* Feed len bytes to dec in chunks (r NULL: in one piece), applying events
 * to m.  Returns the first error, or 0 when all bytes were consumed (the
 * stream need not be complete: see stream_dec_finish).
 */
static int
feed (struct stream_dec *dec, const uint8_t *p, size_t len, struct rng *r,
      struct model *m)
{
  size_t off = 0;

  while (off < len) {
    size_t chunk = r ? pick_chunk (r, len - off) : len - off;
    const uint8_t *q = p + off;
    size_t left = chunk;

    while (left > 0) {
      struct stream_event ev;
      size_t used;
      int ret = stream_dec_next (dec, q, left, &used, &ev);

      if (ret < 0) {
        cr_assert_neq (stream_dec_error (dec)[0], '\0');
        cr_assert (stream_dec_error_pos (dec) >= 0 &&
                   (uint64_t) stream_dec_error_pos (dec) <= len);
        return ret;
      }
      cr_assert (used <= left);
      q += used;
      left -= used;
      if (ret == 1)
        model_apply (m, &ev);
      else
        cr_assert_eq (left, 0, "returned 0 with input left");
    }
    off += chunk;
  }
  return 0;
}

/* Decode a whole stream: 0 or the error. */
static int
decode (const uint8_t *p, size_t len, struct rng *r, struct model *m,
        const struct stream_token *tok, struct stream_dec **decp)
{
  struct stream_dec *dec;
  int ret;

  cr_assert_eq (stream_dec_new (tok, &dec), 0);
  ret = feed (dec, p, len, r, m);
  if (ret == 0)
    ret = stream_dec_finish (dec);
  if (decp)
    *decp = dec;
  else
    stream_dec_free (dec);
  return ret;
}

/* The starts of a well-formed stream's records; starts[n] = len. */
static size_t
record_starts (const uint8_t *p, size_t len, size_t *starts, size_t max)
{
  size_t pos = STREAM_MAGIC_LEN, n = 0;

  while (pos < len) {
    cr_assert (n < max);
    starts[n++] = pos;
    pos += STREAM_OVERHEAD + get_le32 (p + pos + 4);
  }
  cr_assert_eq (pos, len);
  starts[n] = len;
  return n;
}

/* An independent writer of the chain rules of cairn-stream(5): recompute
 * every record's SHA-256 and, if fix, the position that PROGRESS, RESUME
 * and END records state.  Returns false if the records do not end exactly
 * at len.
 */
static bool
rechain (uint8_t *p, size_t len, bool fix)
{
  uint8_t chain[STREAM_SHA_LEN] = { 0 }, buf[STREAM_SHA_LEN + 4096];
  size_t pos = STREAM_MAGIC_LEN;
  uint64_t index = 0;
  bool blocksums = false;

  if (len < pos)                /* cut inside the magic: nothing to chain */
    return false;
  while (len - pos >= STREAM_OVERHEAD) {
    uint32_t blen = get_le32 (p + pos + 4);
    uint8_t *b = p + pos + STREAM_FRAME_LEN, type = p[pos];
    struct sha256_ctx *ctx;

    if (blen > len - pos - STREAM_OVERHEAD)
      return false;
    if (fix && (type == 'P' || type == 'R') && blen == 56) {
      put_le64 (b + 8, index);
      put_le64 (b + 16, pos);
      memcpy (b + 24, chain, 32);
    }
    if (fix && type == 'E' && blen == 48) {
      put_le64 (b, index);
      put_le64 (b + 8, pos);
      memcpy (b + 16, chain, 32);
    }
    ctx = sha256_new ();
    if (type == 'H')
      memset (buf, 0, STREAM_SHA_LEN);
    else
      memcpy (buf, chain, STREAM_SHA_LEN);
    sha256_update (ctx, buf, STREAM_SHA_LEN);
    if (type == 'H' && blen >= 8)
      blocksums = get_le32 (b + 4) & 1;
    if (type == 'W' && blocksums && blen > 8) {
      /* BLOCKSUMS: the offset, then each 4 KiB piece's SHA-256. */
      uint8_t *sums = piece_sums (b + 8, blen - 8);

      sha256_update (ctx, p + pos, STREAM_FRAME_LEN + 8);
      sha256_update (ctx, sums, (blen - 8 + 4095) / 4096 * STREAM_SHA_LEN);
      free (sums);
    }
    else
      sha256_update (ctx, p + pos, STREAM_FRAME_LEN + blen);
    sha256_final (ctx, chain);
    sha256_free (ctx);
    memcpy (b + blen, chain, STREAM_SHA_LEN);
    pos += STREAM_OVERHEAD + blen;
    index++;
  }
  return pos == len;
}

/* A small stream for the exhaustive tests: block size 512, a few records
 * of each kind.
 */
static void
small_stream_features (struct sbuf *out, struct stream_header *h,
                       uint32_t incompat)
{
  static const struct op ops[] = {
    { OP_WRITE, 0, 1024, 1 },
    { OP_ZERO, 1024, 2048, 0 },
    { OP_PROGRESS, 4096, 0, 0 },
    { OP_WRITE, 4096, 512, 2 },
    { OP_WRITE, 5120, 1536, 3 },   /* two records: max_data is 1024 */
    { OP_ZERO, 8192, 64000, 0 },
    { OP_WRITE, 72192, 2560, 4 },  /* ends at the volume's end */
  };
  struct stream_enc_opts o = { .progress_interval = 0, .max_data = 1024 };

  test_header (h, 74752, 512, 7);
  h->incompat = incompat;
  memset (out, 0, sizeof *out);
  encode_ops (h, &o, ops, ARRAY_SIZE (ops), NULL, out, NULL);
}

static void
small_stream (struct sbuf *out, struct stream_header *h)
{
  small_stream_features (out, h, 0);
}

/* ------------------------------------------------------------ round trips */

/* Random streams decode, in random chunks, to what was sent. */
Test (stream, roundtrip_random)
{
  struct rng r = { test_seed ("stream/roundtrip_random", 1) };
  static const uint32_t bss[] = { 512, 4096, 4096, 65536 };

  for (int iter = 0; iter < 60; iter++) {
    uint32_t bs = bss[rng_below (&r, ARRAY_SIZE (bss))];
    uint64_t size = (1 + rng_below (&r, 16 * 1024 * 1024 / bs)) * bs;
    struct stream_enc_opts o = {
      .progress_interval = rng_below (&r, 2) ? 0 : 1 + rng_below (&r, 1 << 20),
      .max_data = (uint32_t) ((1 + rng_below (&r, STREAM_MAX_DATA / bs)) * bs),
    };
    struct stream_header h;
    struct op ops[200];
    struct sbuf s = { 0 };
    struct model m;
    uint8_t digest[STREAM_SHA_LEN];
    uint8_t *want, *got;
    size_t n;

    if (rng_below (&r, 3) == 0)       /* a size that is not a block multiple */
      size += 512 * (1 + rng_below (&r, bs / 512 - (bs > 512)));
    test_header (&h, size, bs, 1000 + iter);
    if (iter % 3 != 0)
      h.incompat = STREAM_INCOMPAT_BLOCKSUMS;
    if (iter % 2) {
      h.from_guid = 999;
      h.from_gen = 50;
    }
    n = gen_ops (&r, &h, ops, ARRAY_SIZE (ops), 3 * 1024 * 1024);
    encode_ops (&h, &o, ops, n, NULL, &s, digest);

    want = malloc (size);
    got = malloc (size);
    fill_pattern (want, size, iter);  /* the receiver's base state */
    memcpy (got, want, size);
    apply_ops (want, ops, n);
    model_init (&m, got, size);
    cr_assert_eq (decode (s.p, s.len, &r, &m, NULL, NULL), 0,
                  "iteration %d: %s", iter, cairn_errmsg ());
    cr_assert_eq (m.last, STREAM_EV_END);
    cr_assert_eq (memcmp (want, got, size), 0, "iteration %d: image differs",
                  iter);
    cr_assert_eq (memcmp (m.digest, digest, STREAM_SHA_LEN), 0);
    cr_assert_eq (m.hdr.vol_size, size);
    cr_assert_eq (m.hdr.from_guid, h.from_guid);
    cr_assert_str_eq (m.hdr.vol_name, "tenant/db");
    cr_assert_str_eq (m.hdr.snap_name, "snap1");
    free (want);
    free (got);
    free (s.p);
  }
}

/* An empty full stream (nothing written) and a one-byte chunked decode. */
Test (stream, roundtrip_empty)
{
  struct stream_header h;
  struct sbuf s = { 0 };
  struct model m;
  struct rng r = { 5 };

  test_header (&h, 1 << 20, 4096, 9);
  h.snap_name[0] = '\0';                /* an unnamed state */
  encode_ops (&h, NULL, NULL, 0, NULL, &s, NULL);
  cr_assert_eq (s.len, 8 + (40 + 96 + 9) + (40 + 48));
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (s.p, s.len, &r, &m, NULL, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (m.nev[STREAM_EV_HEADER], 1);
  cr_assert_eq (m.nev[STREAM_EV_END], 1);
  cr_assert_str_eq (m.hdr.snap_name, "");
  free (s.p);
}

/* A record that arrives whole is used in place, not copied. */
Test (stream, zero_copy)
{
  struct stream_header h;
  struct sbuf s;
  struct stream_dec *dec;
  struct stream_event ev;
  size_t off = 0, used, writes = 0;
  int ret;

  small_stream (&s, &h);
  cr_assert_eq (stream_dec_new (NULL, &dec), 0);
  while ((ret = stream_dec_next (dec, s.p + off, s.len - off, &used,
                                 &ev)) == 1) {
    off += used;
    if (ev.type == STREAM_EV_WRITE) {
      cr_assert ((const uint8_t *) ev.data > s.p &&
                 (const uint8_t *) ev.data + ev.length < s.p + s.len);
      writes++;
    }
  }
  cr_assert_eq (ret, 0);
  cr_assert_eq (off, s.len);
  cr_assert_eq (writes, 7);
  cr_assert_eq (stream_dec_finish (dec), 0);
  stream_dec_free (dec);
  free (s.p);
}

/* ------------------------------------------------------------ damage */

/* Cut anywhere, a stream is never complete, and the error says where. */
Test (stream, truncated_every_byte)
{
  struct stream_header h;
  struct sbuf s;
  struct rng r = { test_seed ("stream/truncated_every_byte", 2) };

  small_stream (&s, &h);
  for (size_t cut = 0; cut < s.len; cut++) {
    struct model m;
    struct stream_dec *dec;
    char where[64];
    int ret;

    model_init (&m, NULL, 0);
    ret = decode (s.p, cut, cut % 2 ? &r : NULL, &m, NULL, &dec);
    cr_assert_eq (ret, -EPIPE, "cut at %zu: %d %s", cut, ret,
                  stream_dec_error (dec));
    cr_assert (!stream_dec_done (dec));
    cr_assert_neq (m.last, STREAM_EV_END);
    snprintf (where, sizeof where, "truncated at byte %zu", cut);
    if (cut > 0)
      cr_assert (strstr (stream_dec_error (dec), where), "cut at %zu: %s",
                 cut, stream_dec_error (dec));
    else
      cr_assert (strstr (stream_dec_error (dec), "empty"));
    stream_dec_free (dec);
  }
  free (s.p);
}

/* The same at random places of a larger stream. */
Test (stream, truncated_random)
{
  struct rng r = { test_seed ("stream/truncated_random", 3) };
  struct stream_header h;
  struct op ops[300];
  struct sbuf s = { 0 };
  size_t n;

  test_header (&h, 64 << 20, 4096, 11);
  n = gen_ops (&r, &h, ops, ARRAY_SIZE (ops), 2 << 20);
  encode_ops (&h, NULL, ops, n, NULL, &s, NULL);
  for (int i = 0; i < 200; i++) {
    size_t cut = rng_below (&r, s.len);
    struct model m;
    struct stream_dec *dec;
    char where[64];

    model_init (&m, NULL, 0);
    cr_assert_eq (decode (s.p, cut, &r, &m, NULL, &dec), -EPIPE);
    snprintf (where, sizeof where, "truncated at byte %zu", cut);
    cr_assert (cut == 0 || strstr (stream_dec_error (dec), where), "%s",
               stream_dec_error (dec));
    stream_dec_free (dec);
  }
  free (s.p);
}

/* The start of the record holding byte i (0 for the magic). */
static size_t
record_of (const size_t *starts, size_t n, size_t i)
{
  size_t at = 0;

  for (size_t k = 0; k < n; k++)
    if (starts[k] <= i)
      at = starts[k];
  return at;
}

/* Any single changed byte is refused, at the record that holds it. */
static void
every_byte_changed (uint32_t incompat)
{
  struct stream_header h;
  struct sbuf s;
  struct rng r = { test_seed ("stream/every_byte_changed", 4) };
  size_t starts[64], n;
  uint8_t *copy;

  small_stream_features (&s, &h, incompat);
  n = record_starts (s.p, s.len, starts, 63);
  copy = malloc (s.len);
  for (size_t i = 0; i < s.len; i++) {
    const uint8_t flips[] = { 0x01, 0x80, (uint8_t) (1 + rng_below (&r, 255)) };

    for (size_t f = 0; f < ARRAY_SIZE (flips); f++) {
      struct model m;
      struct stream_dec *dec;
      int ret;

      memcpy (copy, s.p, s.len);
      copy[i] ^= flips[f];
      model_init (&m, NULL, 0);
      ret = decode (copy, s.len, f == 2 ? &r : NULL, &m, NULL, &dec);
      cr_assert_lt (ret, 0, "byte %zu ^ 0x%02x accepted", i, flips[f]);
      cr_assert_neq (m.last, STREAM_EV_END);
      cr_assert_eq ((size_t) stream_dec_error_pos (dec),
                    record_of (starts, n, i),
                    "byte %zu ^ 0x%02x: error at %" PRId64 " (%s), expected "
                    "%zu", i, flips[f], stream_dec_error_pos (dec),
                    stream_dec_error (dec), record_of (starts, n, i));
      stream_dec_free (dec);
    }
  }
  free (copy);
  free (s.p);
}

Test (stream, every_byte_changed)
{
  every_byte_changed (0);
}

/* ... and in a BLOCKSUMS stream, where a WRITE's data is covered through
 * its pieces' digests.
 */
Test (stream, every_byte_changed_blocksums)
{
  every_byte_changed (STREAM_INCOMPAT_BLOCKSUMS);
}

/* Decode a rearranged stream and check where it fails. */
static void
expect_fail_at (const struct sbuf *t, size_t at, const char *what)
{
  struct model m;
  struct stream_dec *dec;
  int ret;

  model_init (&m, NULL, 0);
  ret = decode (t->p, t->len, NULL, &m, NULL, &dec);
  cr_assert_lt (ret, 0, "%s: accepted", what);
  cr_assert_eq ((size_t) stream_dec_error_pos (dec), at,
                "%s: error at %" PRId64 " (%s), expected %zu", what,
                stream_dec_error_pos (dec), stream_dec_error (dec), at);
  stream_dec_free (dec);
}

/* Swapped, dropped and duplicated records are refused where they are. */
Test (stream, records_rearranged)
{
  struct stream_header h;
  struct sbuf s, t;
  size_t st[64], n;
  char what[64];

  small_stream (&s, &h);
  n = record_starts (s.p, s.len, st, 63);
  cr_assert_geq (n, 8);
  for (size_t i = 0; i < n; i++) {
    size_t li = st[i + 1] - st[i];

    /* Dropped. */
    memset (&t, 0, sizeof t);
    sbuf_add (&t, s.p, st[i]);
    sbuf_add (&t, s.p + st[i + 1], s.len - st[i + 1]);
    snprintf (what, sizeof what, "record %zu dropped", i);
    expect_fail_at (&t, st[i], what);
    free (t.p);

    /* Duplicated. */
    memset (&t, 0, sizeof t);
    sbuf_add (&t, s.p, st[i + 1]);
    sbuf_add (&t, s.p + st[i], li);
    sbuf_add (&t, s.p + st[i + 1], s.len - st[i + 1]);
    snprintf (what, sizeof what, "record %zu duplicated", i);
    expect_fail_at (&t, st[i + 1], what);
    free (t.p);

    /* Swapped with every later one. */
    for (size_t j = i + 1; j < n; j++) {
      memset (&t, 0, sizeof t);
      sbuf_add (&t, s.p, st[i]);
      sbuf_add (&t, s.p + st[j], st[j + 1] - st[j]);
      sbuf_add (&t, s.p + st[i + 1], st[j] - st[i + 1]);
      sbuf_add (&t, s.p + st[i], li);
      sbuf_add (&t, s.p + st[j + 1], s.len - st[j + 1]);
      snprintf (what, sizeof what, "records %zu and %zu swapped", i, j);
      expect_fail_at (&t, st[i], what);
      free (t.p);
    }
  }
  free (s.p);
}

/* ------------------------------------------------------------ resume */

/* Receive a stream cut (or damaged) at a random place, take the token,
 * resume from it (perhaps more than once), and end with what an
 * uninterrupted receive gives.
 */
Test (stream, resume_random)
{
  struct rng r = { test_seed ("stream/resume_random", 6) };

  for (int iter = 0; iter < 40; iter++) {
    uint32_t bs = rng_below (&r, 2) ? 4096 : 512;
    uint64_t size = (1 + rng_below (&r, 8 * 1024 * 1024 / bs)) * bs + 512;
    struct stream_enc_opts o = {
      .progress_interval = rng_below (&r, 2) ? 0 : 1 + rng_below (&r, 1 << 19),
      .max_data = (uint32_t) ((1 + rng_below (&r, 256 * 1024 / bs)) * bs),
    };
    struct stream_header h;
    struct op ops[200];
    struct sbuf s = { 0 };
    struct stream_token tok, *tokp = NULL;
    uint8_t *want, *got;
    struct model m;
    size_t n;
    int rounds = 0, ret;

    test_header (&h, size, bs, 5000 + iter);
    if (iter % 2)
      h.incompat = STREAM_INCOMPAT_BLOCKSUMS;
    n = gen_ops (&r, &h, ops, ARRAY_SIZE (ops), 1 << 20);
    want = malloc (size);
    got = malloc (size);
    fill_pattern (want, size, iter);
    memcpy (got, want, size);
    apply_ops (want, ops, n);
    model_init (&m, got, size);

    for (;;) {
      struct stream_dec *dec;
      char text[STREAM_TOKEN_MAX];
      struct stream_token parsed;
      size_t cut;

      s.len = 0;
      encode_ops (&h, &o, ops, n, tokp, &s, NULL);
      if (rounds++ == 3) {
        /* Enough interruptions: this time it goes through. */
        ret = decode (s.p, s.len, &r, &m, tokp, NULL);
        cr_assert_eq (ret, 0, "iteration %d: %s", iter, cairn_errmsg ());
        break;
      }
      cut = rng_below (&r, s.len + 1);
      cr_assert_eq (stream_dec_new (tokp, &dec), 0);
      if (rng_below (&r, 3) == 0 && cut < s.len) {
        /* Damage instead of a cut: the verified part still counts. */
        s.p[cut] ^= 0x20;
        ret = feed (dec, s.p, s.len, &r, &m);
        cr_assert_lt (ret, 0, "damage at %zu accepted", cut);
      }
      else {
        ret = feed (dec, s.p, cut, &r, &m);
        if (ret == 0)
          ret = stream_dec_finish (dec);
        if (cut == s.len) {
          cr_assert_eq (ret, 0, "%s", stream_dec_error (dec));
          stream_dec_free (dec);
          break;
        }
        cr_assert_eq (ret, -EPIPE, "cut at %zu: %s", cut,
                      stream_dec_error (dec));
      }
      ret = stream_dec_token (dec, &tok);
      stream_dec_free (dec);
      if (ret == -ENOENT) {
        /* The HEADER did not arrive: start over. */
        cr_assert_null (tokp);
        m.last = -1;
        continue;
      }
      cr_assert_eq (ret, 0, "%s", cairn_errmsg ());
      /* The receiver has applied exactly everything below next_offset. */
      cr_assert_geq (tok.next_offset, m.next);
      stream_token_format (&tok, text);
      cr_assert_eq (strlen (text), STREAM_TOKEN_TEXT_LEN);
      cr_assert_eq (stream_token_parse (text, &parsed), 0, "%s",
                    cairn_errmsg ());
      cr_assert_eq (memcmp (&parsed, &tok, sizeof tok), 0);
      tokp = &tok;
      m.last = -1;              /* the resumed stream starts with a HEADER */
      m.next = 0;
      /* The sender may cut its records differently this time. */
      o.max_data = (uint32_t) ((1 + rng_below (&r, 256 * 1024 / bs)) * bs);
    }
    cr_assert_eq (memcmp (want, got, size), 0, "iteration %d: image differs",
                  iter);
    free (want);
    free (got);
    free (s.p);
  }
}

/* A resumed stream of a known cut, event by event. */
Test (stream, resume_events)
{
  struct stream_header h;
  struct sbuf s, t = { 0 };
  struct stream_dec *dec;
  struct stream_token tok;
  struct model m;
  size_t st[64];

  small_stream (&s, &h);
  record_starts (s.p, s.len, st, 63);
  /* Cut inside record 4 (the WRITE at 4096): records 0..3 were received. */
  model_init (&m, NULL, 0);
  cr_assert_eq (stream_dec_new (NULL, &dec), 0);
  cr_assert_eq (feed (dec, s.p, st[4] + 10, NULL, &m), 0);
  cr_assert_eq (stream_dec_token (dec, &tok), 0);
  stream_dec_free (dec);
  cr_assert_eq (tok.records, 4);
  cr_assert_eq (tok.bytes, st[4]);
  cr_assert_eq (tok.next_offset, 4096);   /* the PROGRESS record said so */
  cr_assert_eq (memcmp (tok.chain, s.p + st[4] - 32, 32), 0);

  /* Before its RESUME record a resumed receive is still at the token. */
  {
    struct stream_token again;

    cr_assert_eq (stream_dec_new (&tok, &dec), 0);
    cr_assert_eq (stream_dec_token (dec, &again), 0);
    cr_assert_eq (memcmp (&again, &tok, sizeof tok), 0);
    stream_dec_free (dec);
  }

  /* The sender resumes: magic, HEADER, RESUME, the rest, END. */
  {
    struct stream_enc *enc;
    uint8_t data[3000];

    cr_assert_eq (stream_enc_new (&h, NULL, sbuf_sink, &t, &enc), 0);
    cr_assert_eq (stream_enc_resume (enc, &tok), 0, "%s", cairn_errmsg ());
    cr_assert_eq (t.len, st[1] + STREAM_OVERHEAD + STREAM_PROGRESS_BODY);
    cr_assert_eq (memcmp (t.p, s.p, st[1]), 0, "the HEADER is the same");
    cr_assert_eq (t.p[st[1]], 'R');
    /* Nothing below next_offset may be sent again. */
    cr_assert_eq (stream_enc_write (enc, 0, data, 512), -EINVAL);
    fill_pattern (data, 512, 2);
    cr_assert_eq (stream_enc_write (enc, 4096, data, 512), 0);
    cr_assert_eq (stream_enc_end (enc), 0);
    stream_enc_free (enc);
  }
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (t.p, t.len, NULL, &m, &tok, NULL), 0, "%s",
                cairn_errmsg ());
  cr_assert_eq (m.nev[STREAM_EV_HEADER], 1);
  cr_assert_eq (m.nev[STREAM_EV_RESUME], 1);
  cr_assert_eq (m.nev[STREAM_EV_WRITE], 1);

  /* A resumed stream needs its token; a token needs a resumed stream. */
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (t.p, t.len, NULL, &m, NULL, &dec), -EBADMSG);
  cr_assert_eq ((size_t) stream_dec_error_pos (dec), st[1]);
  cr_assert (strstr (stream_dec_error (dec), "resume token"), "%s",
             stream_dec_error (dec));
  stream_dec_free (dec);
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (s.p, s.len, NULL, &m, &tok, &dec), -EBADMSG);
  cr_assert_eq ((size_t) stream_dec_error_pos (dec), st[1]);
  cr_assert (strstr (stream_dec_error (dec), "not a resumed stream"));
  stream_dec_free (dec);

  /* A RESUME record at another offset than the token's is refused, even
   * with a valid SHA-256: the sender would skip or repeat data.
   */
  {
    struct sbuf u = { 0 };
    uint8_t *rr;
    struct sha256_ctx *ctx = sha256_new ();

    sbuf_add (&u, t.p, t.len);
    rr = u.p + st[1];
    put_le64 (rr + 8, 4608);
    sha256_update (ctx, tok.chain, 32);
    sha256_update (ctx, rr, 8 + STREAM_PROGRESS_BODY);
    sha256_final (ctx, rr + 8 + STREAM_PROGRESS_BODY);
    sha256_free (ctx);
    model_init (&m, NULL, 0);
    cr_assert_eq (decode (u.p, u.len, NULL, &m, &tok, &dec), -EBADMSG);
    cr_assert_eq ((size_t) stream_dec_error_pos (dec), st[1]);
    cr_assert (strstr (stream_dec_error (dec), "resumes at offset 4608"),
               "%s", stream_dec_error (dec));
    stream_dec_free (dec);
    free (u.p);
  }

  /* A RESUME record whose chain is not the receiver's is refused. */
  {
    struct stream_token other = tok;

    other.chain[0] ^= 1;
    model_init (&m, NULL, 0);
    cr_assert_eq (decode (t.p, t.len, NULL, &m, &other, &dec), -EBADMSG);
    cr_assert_eq ((size_t) stream_dec_error_pos (dec), st[1]);
    stream_dec_free (dec);
  }

  /* Tokens: none before the HEADER, none after END. */
  model_init (&m, NULL, 0);
  cr_assert_eq (stream_dec_new (NULL, &dec), 0);
  cr_assert_eq (feed (dec, s.p, st[1] - 5, NULL, &m), 0);
  cr_assert_eq (stream_dec_token (dec, &tok), -ENOENT);
  stream_dec_free (dec);
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (s.p, s.len, NULL, &m, NULL, &dec), 0);
  cr_assert_eq (stream_dec_token (dec, &tok), -EINVAL);
  stream_dec_free (dec);
  free (s.p);
  free (t.p);
}

/* A token of another stream is refused, by the sender and the receiver,
 * with the reason.
 */
Test (stream, token_other_stream)
{
  struct stream_header a, b;
  struct sbuf s = { 0 }, t = { 0 };
  struct stream_dec *dec;
  struct stream_enc *enc;
  struct stream_token tok;
  struct model m;
  static const struct {
    const char *what;
    const char *reason;
  } cases[] = {
    { "to_guid", "is for snapshot guid" },
    { "pool", "from pool" },
    { "from", "based on guid" },
    { "vol_id", "volume id" },
    { "size", "another header" },
    { "name", "another header" },
  };

  test_header (&a, 1 << 20, 4096, 77);
  encode_ops (&a, NULL, NULL, 0, NULL, &s, NULL);
  cr_assert_eq (stream_dec_new (NULL, &dec), 0);
  model_init (&m, NULL, 0);
  cr_assert_eq (feed (dec, s.p, s.len - 10, NULL, &m), 0);
  cr_assert_eq (stream_dec_token (dec, &tok), 0);
  stream_dec_free (dec);
  cr_assert_eq (stream_token_check (&tok, &a), 0);

  for (size_t i = 0; i < ARRAY_SIZE (cases); i++) {
    b = a;
    switch (i) {
    case 0: b.to_guid++; break;
    case 1: b.pool_uuid[3] ^= 1; break;
    case 2: b.from_guid = 1, b.from_gen = 1; break;
    case 3: b.vol_id++; break;
    case 4: b.vol_size += 4096; break;
    case 5: strcpy (b.snap_name, "snap2"); break;
    }
    /* The sender. */
    cr_assert_eq (stream_enc_new (&b, NULL, sbuf_sink, &t, &enc), 0);
    cr_assert_eq (stream_enc_resume (enc, &tok), -ESTALE, "%s", cases[i].what);
    cr_assert (strstr (cairn_errmsg (), cases[i].reason), "%s: %s",
               cases[i].what, cairn_errmsg ());
    cr_assert_eq (t.len, 0, "nothing was sent");
    stream_enc_free (enc);
    /* The receiver, given a stream of b. */
    t.len = 0;
    encode_ops (&b, NULL, NULL, 0, NULL, &t, NULL);
    model_init (&m, NULL, 0);
    cr_assert_eq (decode (t.p, t.len, NULL, &m, &tok, &dec), -ESTALE);
    cr_assert_eq (stream_dec_error_pos (dec), 8);
    cr_assert (strstr (stream_dec_error (dec), cases[i].reason), "%s",
               stream_dec_error (dec));
    cr_assert_eq (m.last, -1, "no event from a stream the token refuses");
    stream_dec_free (dec);
    t.len = 0;
  }
  /* A token beyond the volume. */
  tok.next_offset = (1 << 20) + 4096;
  cr_assert_eq (stream_token_check (&tok, &a), -EINVAL);
  free (s.p);
  free (t.p);
}

/* Malformed and mistyped token texts are refused. */
Test (stream, token_text)
{
  struct stream_token tok, out;
  char text[STREAM_TOKEN_MAX], bad[STREAM_TOKEN_MAX + 8];
  size_t plen = strlen (STREAM_TOKEN_PREFIX);

  memset (&tok, 0, sizeof tok);
  for (int i = 0; i < 16; i++)
    tok.pool_uuid[i] = (uint8_t) i;
  tok.vol_id = 3;
  tok.to_guid = 0x1122334455667788;
  tok.to_gen = 9;
  tok.next_offset = 1 << 20;
  tok.records = 30;
  tok.bytes = 123456;
  memset (tok.chain, 0xcd, 32);
  memset (tok.header_digest, 0xab, 32);
  stream_token_format (&tok, text);
  cr_assert_eq (strncmp (text, STREAM_TOKEN_PREFIX, plen), 0);
  cr_assert_eq (stream_token_parse (text, &out), 0, "%s", cairn_errmsg ());
  cr_assert_eq (memcmp (&out, &tok, sizeof tok), 0);
  for (size_t i = 0; i < STREAM_TOKEN_TEXT_LEN; i++) {
    strcpy (bad, text);
    bad[i] = bad[i] == 'A' ? 'B' : 'A';
    cr_assert_eq (stream_token_parse (bad, &out), -EINVAL, "char %zu", i);
  }
  strcpy (bad, text);
  bad[100] = '\0';
  cr_assert_eq (stream_token_parse (bad, &out), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "cut"));
  strcpy (bad, text);
  strcat (bad, "AAAA");
  cr_assert_eq (stream_token_parse (bad, &out), -EINVAL);
  strcpy (bad, text);
  bad[plen + 5] = '=';
  cr_assert_eq (stream_token_parse (bad, &out), -EINVAL);
  cr_assert_eq (stream_token_parse ("", &out), -EINVAL);
  /* A well-formed token of an impossible position. */
  tok.to_gen = 0;
  stream_token_format (&tok, text);
  cr_assert_eq (stream_token_parse (text, &out), -EINVAL);
}

/* ------------------------------------------------------------ rules */

/* Offsets in a stream with one 512-byte WRITE at 4096, for patching. */
#define H_POS 8                 /* HEADER record */
#define H_BODY (H_POS + 8)      /* its body: fields at H_BODY + offset */

/* Rechain a patched stream (fix: the stated positions too) and expect the
 * decoder's verdict.
 */
static void
expect_verdict (struct sbuf *t, bool fix, int want, size_t at,
                const char *needle)
{
  struct model m;
  struct stream_dec *dec;
  int ret;

  rechain (t->p, t->len, fix);
  model_init (&m, NULL, 0);
  ret = decode (t->p, t->len, NULL, &m, NULL, &dec);
  cr_assert_eq (ret, want, "%s: got %d (%s)", needle, ret,
                stream_dec_error (dec));
  if (want < 0) {
    cr_assert_eq ((size_t) stream_dec_error_pos (dec), at, "%s: at %" PRId64
                  " (%s)", needle, stream_dec_error_pos (dec),
                  stream_dec_error (dec));
    cr_assert (strstr (stream_dec_error (dec), needle), "wanted '%s' in: %s",
               needle, stream_dec_error (dec));
  }
  stream_dec_free (dec);
}

/* Hand-made streams that break one rule each, with valid SHA-256s. */
Test (stream, rules)
{
  struct stream_header h;
  struct sbuf s = { 0 }, t = { 0 };
  size_t st[16], n, w, z, p, e;
  static const struct op ops[] = {
    { OP_WRITE, 4096, 512, 1 },
    { OP_ZERO, 8192, 4096, 0 },
    { OP_PROGRESS, 16384, 0, 0 },
  };

  test_header (&h, 1 << 20, 512, 3);
  encode_ops (&h, NULL, ops, ARRAY_SIZE (ops), NULL, &s, NULL);
  n = record_starts (s.p, s.len, st, 15);
  cr_assert_eq (n, 5);
  w = st[1], z = st[2], p = st[3], e = st[4];
  cr_assert_eq (s.p[w], 'W');
  cr_assert_eq (s.p[z], 'Z');
  cr_assert_eq (s.p[p], 'P');
  cr_assert_eq (s.p[e], 'E');

#define PATCH(stmt, fix, want, at, needle)      \
  do {                                          \
    t.len = 0;                                  \
    sbuf_add (&t, s.p, s.len);                  \
    stmt;                                       \
    expect_verdict (&t, fix, want, at, needle); \
  } while (0)

  /* The documented layout: an untouched rechain changes nothing. */
  PATCH ((void) 0, true, 0, 0, "");
  cr_assert_eq (memcmp (t.p, s.p, s.len), 0, "rechain disagrees with the "
                "encoder: the documented chain rule is wrong");
  cr_assert_eq (get_le32 (s.p + H_BODY + 12), 512);
  cr_assert_eq (get_le64 (s.p + H_BODY + 40), 1 << 20);

  /* HEADER fields. */
  PATCH (put_le32 (t.p + H_BODY, 2), true, -ENOTSUP, H_POS, "version 2");
  PATCH (put_le32 (t.p + H_BODY, 0), true, -EBADMSG, H_POS, "version 0");
  /* BLOCKSUMS is known: rechained by its rule (rechain() follows the
   * page), the stream is valid.  Any other bit is refused, as BLOCKSUMS
   * is by the readers before it (STREAM_INCOMPAT_KNOWN was 0).
   */
  PATCH (put_le32 (t.p + H_BODY + 4, 1), true, 0, 0, "blocksums");
  PATCH (put_le32 (t.p + H_BODY + 4, 2), true, -ENOTSUP, H_POS,
         "incompatible features 0x00000002");
  PATCH (put_le32 (t.p + H_BODY + 4, 0x80000001), true, -ENOTSUP, H_POS,
         "incompatible features 0x80000000");
  PATCH (put_le32 (t.p + H_BODY + 8, 0x80), true, 0, 0, "compat ignored");
  PATCH (put_le32 (t.p + H_BODY + 12, 3000), true, -EBADMSG, H_POS,
         "block size 3000");
  PATCH (put_le32 (t.p + H_BODY + 12, 131072), true, -EBADMSG, H_POS,
         "block size 131072");
  PATCH (put_le64 (t.p + H_BODY + 40, 1000), true, -EBADMSG, H_POS,
         "volume size 1000");
  PATCH (put_le64 (t.p + H_BODY + 48, 5), true, -EBADMSG, H_POS,
         "must both be 0");
  PATCH ((put_le64 (t.p + H_BODY + 48, 5), put_le64 (t.p + H_BODY + 56, 100)),
         true, -EBADMSG, H_POS, "not older");
  PATCH (put_le64 (t.p + H_BODY + 64, 0), true, -EBADMSG, H_POS,
         "nonzero guid");
  PATCH (put_le32 (t.p + H_BODY + 92, 1), true, -EBADMSG, H_POS,
         "reserved field");
  PATCH (put_le16 (t.p + H_BODY + 88, 8), true, -EBADMSG, H_POS,
         "name lengths");
  PATCH (t.p[H_BODY + 96 + 6] = '@', true, -EBADMSG, H_POS,
         "volume name 'tenant@db'");
  PATCH (t.p[H_BODY + 96 + 7] = '/', true, -EBADMSG, H_POS, "empty component");
  PATCH (t.p[H_BODY + 96 + 7] = 0, true, -EBADMSG, H_POS, "NUL");
  PATCH (t.p[H_BODY + 96 + 9] = '/', true, -EBADMSG, H_POS, "contains '/'");
  PATCH ((t.p[H_BODY + 96] = '.', t.p[H_BODY + 97] = '.',
          t.p[H_BODY + 98] = '/'), true, -EBADMSG, H_POS, "'..' component");

  /* Framing. */
  PATCH (t.p[w + 1] = 1, true, -EBADMSG, w, "flags");
  PATCH (t.p[w + 3] = 1, true, -EBADMSG, w, "reserved");
  PATCH (t.p[w] = 'Q', true, -ENOTSUP, w, "unknown record type 'Q'");
  PATCH (t.p[w] = 0x01, true, -EBADMSG, w, "not a record type");
  PATCH (t.p[w] = 'H', true, -EBADMSG, w, "second HEADER");
  PATCH (t.p[H_POS] = 'W', true, -EBADMSG, H_POS, "must begin with a HEADER");
  PATCH (t.p[3] = 'x', true, -EBADMSG, 0, "not a Cairn send stream");

  /* WRITE and ZERO ranges. */
  PATCH (put_le64 (t.p + w + 8, 4097), true, -EBADMSG, w, "not a multiple");
  PATCH (put_le64 (t.p + w + 8, 1 << 20), true, -EBADMSG, w, "passes the end");
  PATCH (put_le64 (t.p + z + 8, 4096), true, -EBADMSG, z, "starts before");
  PATCH (put_le64 (t.p + z + 16, 0), true, -EBADMSG, z, "empty range");
  PATCH (put_le64 (t.p + z + 16, 100), true, -EBADMSG, z, "not a multiple");
  PATCH (put_le64 (t.p + z + 16, UINT64_MAX - 4096), true, -EBADMSG, z,
         "passes the end");
  PATCH (put_le64 (t.p + z + 16, (1 << 20) - 8192), true, -EBADMSG, p,
         "goes back");            /* the ZERO now covers what PROGRESS says */

  /* PROGRESS and END statements. */
  PATCH (put_le64 (t.p + p + 8, 8192), true, -EBADMSG, p, "goes back");
  PATCH (put_le64 (t.p + p + 8, (1 << 20) + 512), true, -EBADMSG, p,
         "beyond the volume");
  PATCH (put_le64 (t.p + p + 16, 2), false, -EBADMSG, p, "it says it is");
  PATCH (put_le64 (t.p + p + 24, 9), false, -EBADMSG, p, "it says it is");
  PATCH (t.p[p + 40] ^= 1, false, -EBADMSG, p, "chained digest");
  PATCH (put_le64 (t.p + e + 8, 1), false, -EBADMSG, e, "it says it is");
  PATCH (t.p[e + 30] ^= 1, false, -EBADMSG, e, "chained digest");
#undef PATCH

  /* An ancillary record is checked and skipped; an unknown critical one
   * is refused.
   */
  for (int crit = 0; crit < 2; crit++) {
    uint8_t rec[8 + 5 + 32] = { crit ? 'Q' : 'q', 0, 0, 0, 5, 0, 0, 0,
                                'h', 'e', 'l', 'l', 'o' };

    t.len = 0;
    sbuf_add (&t, s.p, z);
    sbuf_add (&t, rec, sizeof rec);
    sbuf_add (&t, s.p + z, s.len - z);
    expect_verdict (&t, true, crit ? -ENOTSUP : 0, z, "unknown record type");
  }

  /* Bytes after END. */
  t.len = 0;
  sbuf_add (&t, s.p, s.len);
  sbuf_add (&t, "x", 1);
  expect_verdict (&t, true, -EBADMSG, s.len, "after the END");

  /* A record too large for the decoder is refused from its framing alone,
   * before anything is buffered.
   */
  {
    struct stream_dec *dec;
    struct stream_event ev;
    size_t used;
    uint8_t f[8] = { 'W', 0, 0, 0 };

    put_le32 (f + 4, STREAM_MAX_BODY + 1);
    cr_assert_eq (stream_dec_new (NULL, &dec), 0);
    cr_assert_eq (stream_dec_next (dec, s.p, w, &used, &ev), 1);
    cr_assert_eq (stream_dec_next (dec, s.p + used, w - used, &used, &ev), 0);
    cr_assert_eq (stream_dec_next (dec, f, 8, &used, &ev), -EBADMSG);
    cr_assert (strstr (stream_dec_error (dec), "body length"));
    /* Dead after an error (invariant 5). */
    cr_assert_eq (stream_dec_next (dec, s.p + w, 8, &used, &ev), -EBADMSG);
    cr_assert_eq (stream_dec_finish (dec), -EBADMSG);
    stream_dec_free (dec);
  }
  free (s.p);
  free (t.p);
}

/* The encoder refuses what the decoder would, and a failing sink sticks. */
Test (stream, encoder_rules)
{
  struct stream_header h, bad;
  struct stream_enc *enc;
  struct stream_enc_opts o = { 0, 1000 };
  struct sbuf s = { 0 };
  uint8_t data[8192] = { 0 };

  test_header (&h, (1 << 20) + 512, 4096, 3);
  bad = h;
  strcpy (bad.vol_name, "a/../b");
  cr_assert_eq (stream_enc_new (&bad, NULL, sbuf_sink, &s, &enc), -EINVAL);
  bad = h;
  bad.to_guid = 0;
  cr_assert_eq (stream_enc_new (&bad, NULL, sbuf_sink, &s, &enc), -EINVAL);
  bad = h;
  bad.incompat = 4;
  cr_assert_eq (stream_enc_new (&bad, NULL, sbuf_sink, &s, &enc), -ENOTSUP);
  memset (bad.vol_name, 'a', sizeof bad.vol_name);   /* no NUL */
  cr_assert_eq (stream_header_check (&bad), -ENOTSUP);
  bad.incompat = 0;
  cr_assert_eq (stream_header_check (&bad), -EINVAL);
  cr_assert_eq (stream_enc_new (&h, &o, sbuf_sink, &s, &enc), -EINVAL);

  cr_assert_eq (stream_enc_new (&h, NULL, sbuf_sink, &s, &enc), 0);
  cr_assert_eq (stream_enc_write (enc, 0, data, 4096), -EINVAL, "not begun");
  cr_assert_eq (stream_enc_begin (enc), 0);
  cr_assert_eq (stream_enc_begin (enc), -EINVAL);
  cr_assert_eq (stream_enc_write (enc, 512, data, 4096), -EINVAL);
  cr_assert_eq (stream_enc_write (enc, 0, data, 1000), -EINVAL);
  cr_assert_eq (stream_enc_write (enc, 0, data, 0), -EINVAL);
  cr_assert_eq (stream_enc_write (enc, 1 << 20, data, 4096), -EINVAL);
  cr_assert_eq (stream_enc_write (enc, 1 << 20, data, 512), 0, "the tail");
  cr_assert_eq (stream_enc_write (enc, 0, data, 4096), -EINVAL, "backwards");
  cr_assert_eq (stream_enc_zero (enc, 0, 4096), -EINVAL, "backwards");
  cr_assert_eq (stream_enc_progress (enc, 4096), -EINVAL, "backwards");
  cr_assert_eq (stream_enc_progress (enc, (1 << 20) + 512), 0);
  cr_assert_eq (stream_enc_end (enc), 0);
  cr_assert_eq (stream_enc_end (enc), -EINVAL);
  cr_assert_eq (stream_enc_zero (enc, 0, 4096), -EINVAL);
  stream_enc_free (enc);

  /* The sink fails on its 4th call (the WRITE's data): then for ever. */
  s.len = 0;
  s.fail_after = 4;
  cr_assert_eq (stream_enc_new (&h, NULL, sbuf_sink, &s, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  cr_assert_eq (stream_enc_write (enc, 0, data, 8192), -ENOSPC);
  cr_assert_eq (stream_enc_zero (enc, 1 << 19, 4096), -ENOSPC);
  cr_assert_eq (stream_enc_end (enc), -ENOSPC);
  stream_enc_free (enc);
  free (s.p);
}

/* ------------------------------------------------------------ blocksums */

/* Encode three 1 MiB WRITEs through stream_enc_write_sums (or, without
 * sums_ok, stream_enc_write), the second with piece bad's digest wrong
 * (bad < 0: none).
 */
static void
blocksums_stream (struct sbuf *s, uint32_t incompat, bool with_sums, int bad)
{
  struct stream_header h;
  struct stream_enc *enc;
  uint8_t *data = malloc (STREAM_MAX_DATA);

  test_header (&h, 16 << 20, 4096, 77);
  h.incompat = incompat;
  memset (s, 0, sizeof *s);
  cr_assert_eq (stream_enc_new (&h, NULL, sbuf_sink, s, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  for (int i = 0; i < 3; i++) {
    uint64_t off = (uint64_t) (2 * i + 1) * STREAM_MAX_DATA;
    uint8_t *sums;

    fill_pattern (data, STREAM_MAX_DATA, 100 + i);
    sums = piece_sums (data, STREAM_MAX_DATA);
    if (i == 1 && bad >= 0)
      sums[bad * STREAM_SHA_LEN + 5] ^= 0x10;
    if (with_sums)
      cr_assert_eq (stream_enc_write_sums (enc, off, data, STREAM_MAX_DATA,
                                           sums), 0, "%s", cairn_errmsg ());
    else
      cr_assert_eq (stream_enc_write (enc, off, data, STREAM_MAX_DATA), 0);
    free (sums);
  }
  cr_assert_eq (stream_enc_end (enc), 0);
  stream_enc_free (enc);
  free (data);
}

/* The encoder's own digests and the caller's make the same stream; a
 * stream without the feature ignores the caller's.
 */
Test (stream, blocksums_encoders_agree)
{
  struct sbuf a, b;

  blocksums_stream (&a, STREAM_INCOMPAT_BLOCKSUMS, false, -1);
  blocksums_stream (&b, STREAM_INCOMPAT_BLOCKSUMS, true, -1);
  cr_assert_eq (a.len, b.len);
  cr_assert_eq (memcmp (a.p, b.p, a.len), 0);
  free (b.p);
  /* Not BLOCKSUMS: even wrong sums do not matter. */
  blocksums_stream (&b, 0, true, 3);
  cr_assert_eq (a.len, b.len);
  cr_assert_neq (memcmp (a.p, b.p, a.len), 0, "the feature changed nothing");
  free (a.p);
  blocksums_stream (&a, 0, false, -1);
  cr_assert_eq (memcmp (a.p, b.p, a.len), 0);
  free (a.p);
  free (b.p);
}

/* A wrong digest given to stream_enc_write_sums is caught by the decoder
 * at that record (which it names), after the records before it.
 */
Test (stream, blocksums_wrong_digest)
{
  int pieces[] = { 0, 17, STREAM_MAX_PIECES - 1 };

  for (size_t k = 0; k < ARRAY_SIZE (pieces); k++) {
    struct sbuf s;
    struct model m;
    struct stream_dec *dec;
    size_t st[16];
    int ret;

    blocksums_stream (&s, STREAM_INCOMPAT_BLOCKSUMS, true, pieces[k]);
    cr_assert_eq (record_starts (s.p, s.len, st, 15), 5);
    model_init (&m, NULL, 0);
    ret = decode (s.p, s.len, NULL, &m, NULL, &dec);
    cr_assert_eq (ret, -EBADMSG, "piece %d: %d", pieces[k], ret);
    cr_assert_eq ((size_t) stream_dec_error_pos (dec), st[2]);
    cr_assert (strstr (stream_dec_error (dec), "(record 2, WRITE)") &&
               strstr (stream_dec_error (dec), "SHA-256 mismatch"),
               "%s", stream_dec_error (dec));
    cr_assert_eq (m.nev[STREAM_EV_WRITE], 1, "the WRITE before it applies");
    stream_dec_free (dec);
    free (s.p);
  }
}

/* The caller's digests must not straddle records. */
Test (stream, blocksums_encoder_rules)
{
  struct stream_header h;
  struct stream_enc *enc;
  struct stream_enc_opts o = { 0, 6144 };
  struct sbuf s = { 0 };
  uint8_t data[16384] = { 0 }, sums[4 * STREAM_SHA_LEN];

  test_header (&h, 1 << 20, 512, 3);
  h.incompat = STREAM_INCOMPAT_BLOCKSUMS;
  stream_piece_sums (data, sizeof data, sums);
  cr_assert_eq (stream_enc_new (&h, &o, sbuf_sink, &s, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  cr_assert_eq (stream_enc_write_sums (enc, 0, data, 16384, sums), -EINVAL);
  cr_assert (strstr (cairn_errmsg (), "split"), "%s", cairn_errmsg ());
  cr_assert_eq (stream_enc_write_sums (enc, 0, data, 6144, sums), 0);
  cr_assert_eq (stream_enc_write (enc, 8192, data, 16384), 0);
  cr_assert_eq (stream_enc_end (enc), 0);
  stream_enc_free (enc);
  free (s.p);
}

/* ------------------------------------------------------------ size */

/* The stream's size over the data it carries. */
Test (stream, overhead)
{
  struct rng r = { 8 };
  struct stream_header h;
  struct stream_enc *enc;
  uint64_t bytes = 0, data = 0, off;
  uint8_t *buf = malloc (STREAM_MAX_DATA * 8);
  double scattered, sequential;

  fill_pattern (buf, STREAM_MAX_DATA * 8, 1);

  /* 1,000 scattered 4 KiB writes (no two adjacent) in a 1 TiB volume. */
  test_header (&h, 1ull << 40, 4096, 1);
  cr_assert_eq (stream_enc_new (&h, NULL, count_sink, &bytes, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  off = 0;
  for (int i = 0; i < 1000; i++) {
    off += 4096 * (2 + rng_below (&r, 100000));
    cr_assert_eq (stream_enc_write (enc, off, buf + 4096 * (i % 8), 4096), 0);
    off += 4096;
    data += 4096;
  }
  cr_assert_eq (stream_enc_end (enc), 0);
  stream_enc_free (enc);
  scattered = (double) (bytes - data) / (double) data;

  /* One sequential 1 GiB write, 8 MiB at a time. */
  bytes = data = 0;
  cr_assert_eq (stream_enc_new (&h, NULL, count_sink, &bytes, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  for (off = 0; off < (1ull << 30); off += STREAM_MAX_DATA * 8) {
    cr_assert_eq (stream_enc_write (enc, off, buf, STREAM_MAX_DATA * 8), 0);
    data += STREAM_MAX_DATA * 8;
  }
  cr_assert_eq (stream_enc_end (enc), 0);
  stream_enc_free (enc);
  sequential = (double) (bytes - data) / (double) data;

  fprintf (stderr, "stream/overhead: 1000 scattered 4 KiB writes: %.3f%% "
           "(%d bytes a record); 1 GiB sequential: %.4f%%\n",
           100 * scattered, STREAM_OVERHEAD + STREAM_WRITE_FIXED,
           100 * sequential);
  cr_assert_leq (scattered, 0.02);
  cr_assert_leq (sequential, 0.0001);
  free (buf);
}

/* ------------------------------------------------------------ example */

/* The example of cairn-stream(5), byte for byte (its SHA-256s are printed
 * there too).
 */
/* cairn-stream(5)'s example stream with header h, into s: 4 KiB of 'C'
 * at 4096, then 8 KiB of zeros; its digest.
 */
static void
encode_example (const struct stream_header *h, struct sbuf *s,
                uint8_t digest[32])
{
  struct stream_enc *enc;
  uint8_t data[4096];

  memset (data, 'C', sizeof data);
  cr_assert_eq (stream_enc_new (h, NULL, sbuf_sink, s, &enc), 0);
  cr_assert_eq (stream_enc_begin (enc), 0);
  cr_assert_eq (stream_enc_write (enc, 4096, data, 4096), 0);
  cr_assert_eq (stream_enc_zero (enc, 8192, 8192), 0);
  cr_assert_eq (stream_enc_end (enc), 0);
  stream_enc_digest (enc, digest);
  stream_enc_free (enc);
}

/* The example stream s, as the page gives it: the SHA-256 of its bytes
 * and its END digest are the page's, and it decodes; s is freed.
 */
static void
check_example (struct sbuf *s, const uint8_t digest[32],
               const char *whole_hex, const char *digest_hex)
{
  uint8_t whole[32];
  char hex[65];
  struct model m;

  sha256 (s->p, s->len, whole);
  sha256_hex (whole, hex);
  cr_assert_str_eq (hex, whole_hex);
  sha256_hex (digest, hex);
  cr_assert_str_eq (hex, digest_hex);
  model_init (&m, NULL, 0);
  cr_assert_eq (decode (s->p, s->len, NULL, &m, NULL, NULL), 0);
  free (s->p);
}

Test (stream, man_page_example)
{
  struct stream_header h;
  struct sbuf s = { 0 };
  uint8_t digest[32];
  char hex[65];

  memset (&h, 0, sizeof h);
  h.block_size = 4096;
  for (int i = 0; i < 16; i++)
    h.pool_uuid[i] = (uint8_t) (0x10 * (i % 16) + i);
  h.vol_id = 1;
  h.vol_size = 16384;
  h.to_guid = 0x0123456789abcdefull;
  h.to_gen = 7;
  h.ctime = 1764547200;
  strcpy (h.vol_name, "vm1");
  strcpy (h.snap_name, "s1");
  encode_example (&h, &s, digest);

  if (getenv ("CAIRN_STREAM_EXAMPLE")) {
    FILE *f = fopen (getenv ("CAIRN_STREAM_EXAMPLE"), "w");

    cr_assert_not_null (f);
    cr_assert_eq (fwrite (s.p, 1, s.len, f), s.len);
    fclose (f);
  }
  cr_assert_eq (s.len, 4437);
  check_example (&s, digest,
                 "5ba4e2026439fb61323f880bb93f2ffb"
                 "6dd22adc812278eda6a50dc092c8b4a5",
                 "dfd5441fc00f8dc07edcc69d1c2e7ab7"
                 "c040cd4b44deda3cec0d2177c6584f05");

  /* The same with BLOCKSUMS, as the page gives it too: the same bytes but
   * the HEADER's incompat and every sha from the HEADER's on.
   */
  memset (&s, 0, sizeof s);
  h.incompat = STREAM_INCOMPAT_BLOCKSUMS;
  encode_example (&h, &s, digest);
  cr_assert_eq (s.len, 4437);
  sha256_hex (s.p + 0x75, hex);
  cr_assert_str_eq (hex, "98ecd2fe047971c4bba038b092045e44"
                    "a66a557e4214dc3b818af718286891df");
  sha256_hex (s.p + 0x10a5, hex);
  cr_assert_str_eq (hex, "86c98e1f8f94b141636b476b2224e021"
                    "36ef8da12483a08c206ae1b6f6a9d5ad");
  sha256_hex (s.p + 0x10dd, hex);
  cr_assert_str_eq (hex, "f4ac289940bdfe07e71f7739c3603460"
                    "f98b0554bf8a4a1daa87175c27619b76");
  cr_assert_eq (memcmp (s.p + 0x1115, s.p + 0x10dd, 32), 0);
  cr_assert_eq (s.p[0x14], 1);
  check_example (&s, digest,
                 "72f03a7789e8aa66b1904bd048651cbd"
                 "76ff44078f3b7cb030f7439b47721639",
                 "3ef08549bf9a3588324719257118bfa1"
                 "94c04f7bcb7e79159fae330ea925aad7");
}

/* ------------------------------------------------------------ fuzz */

/* Random damage: never a crash, always an error or events that keep the
 * decoder's promises; damage without rechaining is always an error.
 */
Test (stream, fuzz)
{
  struct rng r = { test_seed ("stream/fuzz", 9) };
  struct stream_header h;
  struct op ops[60];
  struct sbuf s = { 0 }, t = { 0 };
  size_t n, accepted = 0;

  test_header (&h, 4 << 20, 512, 21);
  n = gen_ops (&r, &h, ops, ARRAY_SIZE (ops), 16384);
  {
    struct stream_enc_opts o = { 8192, 4096 };

    encode_ops (&h, &o, ops, n, NULL, &s, NULL);
  }
  for (int iter = 0; iter < 3000; iter++) {
    int nmut = 1 + (int) rng_below (&r, 4);
    bool rechained = rng_below (&r, 2);
    struct model m;
    int ret;

    t.len = 0;
    sbuf_add (&t, s.p, s.len);
    for (int k = 0; k < nmut; k++) {
      size_t at = rng_below (&r, t.len), len = 1 + rng_below (&r, 64);
      uint8_t junk[64];

      len = MIN (len, t.len - at);
      switch (rng_below (&r, 7)) {
      case 0:                   /* flip a bit */
        t.p[at] ^= (uint8_t) (1 << rng_below (&r, 8));
        break;
      case 1:                   /* a random byte */
        t.p[at] = (uint8_t) rng_next (&r);
        break;
      case 2:                   /* a small field set to a random value */
        for (size_t i = 0; i < MIN (len, (size_t) 8); i++)
          t.p[at + i] = (uint8_t) rng_next (&r);
        break;
      case 3:                   /* delete a range */
        memmove (t.p + at, t.p + at + len, t.len - at - len);
        t.len -= len;
        break;
      case 4:                   /* insert random bytes */
        fill_pattern (junk, sizeof junk, rng_next (&r));
        sbuf_add (&t, junk, len);
        memmove (t.p + at + len, t.p + at, t.len - at - len);
        memcpy (t.p + at, junk, len);
        break;
      case 5:                   /* truncate */
        t.len = at;
        break;
      default:                  /* copy a range over another */
        memmove (t.p + rng_below (&r, t.len - len + 1), t.p + at, len);
        break;
      }
      if (t.len == 0)
        break;
    }
    if (rechained)
      rechain (t.p, t.len, rng_below (&r, 2));
    model_init (&m, NULL, 0);
    ret = decode (t.p, t.len, &r, &m, NULL, NULL);
    if (ret == 0) {
      accepted++;
      cr_assert_eq (m.last, STREAM_EV_END);
      if (!rechained)
        cr_assert (t.len == s.len && memcmp (t.p, s.p, s.len) == 0,
                   "iteration %d: damaged stream accepted", iter);
    }
    else
      cr_assert (ret == -EBADMSG || ret == -EPIPE || ret == -ENOTSUP,
                 "iteration %d: %d", iter, ret);
  }
  fprintf (stderr, "stream/fuzz: %zu of 3000 mutated streams passed, all "
           "rechained ones (valid SHA-256s, fields within the rules)\n",
           accepted);
  free (s.p);
  free (t.p);
}
