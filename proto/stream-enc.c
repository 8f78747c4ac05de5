/* Cairn send streams: the encoder (see stream.h for its interface and the
 * format's invariants, cairn-stream(5) for the specification).
 *
 * It checks each record with the rules in stream.c (range_problem,
 * next_problem, and stream_token_check for a resumed stream), the ones the
 * decoder applies, so that it cannot write a stream the decoder refuses.
 * The rules, HEADER encoding, framing and resume tokens are in stream.c
 * (shared through stream-int.h), the decoder in stream-dec.c.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"
#include "stream-int.h"

enum enc_state { ENC_NEW, ENC_BODY, ENC_DONE };

struct stream_enc {
  struct stream_header hdr;
  struct stream_enc_opts opts;
  stream_sink_fn sink;
  void *opaque;
  struct sha256_ctx *sha;
  enum enc_state state;
  int err;                      /* a sink error: the stream is broken */
  uint8_t chain[STREAM_SHA_LEN];  /* SHA-256 of the last record */
  uint64_t records, bytes;      /* logical position (see cairn-stream(5)) */
  uint64_t phys;                /* bytes given to the sink */
  uint64_t next_offset;         /* invariant 2 */
  uint64_t last_progress;       /* bytes at the last PROGRESS or RESUME */
  uint8_t sums[STREAM_MAX_PIECES * STREAM_SHA_LEN];  /* stream_enc_write's */
  /* Framing and body of a record without data, plus its SHA-256. */
  uint8_t buf[STREAM_FRAME_LEN + STREAM_HEADER_MAX_BODY + STREAM_SHA_LEN];
};

/* Make an encoder. */
int
stream_enc_new (const struct stream_header *hdr,
                const struct stream_enc_opts *opts,
                stream_sink_fn sink, void *opaque, struct stream_enc **encp)
{
  struct stream_enc_opts o = {
    .progress_interval = STREAM_PROGRESS_INTERVAL,
    .max_data = STREAM_MAX_DATA,
  };
  struct stream_enc *enc;
  int r = stream_header_check (hdr);

  if (r < 0)
    return r;
  if (opts)
    o = *opts;
  if (o.max_data == 0 || o.max_data > STREAM_MAX_DATA ||
      o.max_data % hdr->block_size)
    return cairn_fail (-EINVAL, "stream encoder: max_data %" PRIu32 " is not "
                       "a multiple of the block size up to %u", o.max_data,
                       STREAM_MAX_DATA);
  enc = calloc (1, sizeof *enc);
  if (enc == NULL)
    return cairn_fail (-ENOMEM, "stream encoder: out of memory");
  enc->hdr = *hdr;
  enc->hdr.version = STREAM_VERSION;
  enc->opts = o;
  enc->sink = sink;
  enc->opaque = opaque;
  enc->sha = sha256_new ();
  *encp = enc;
  return 0;
}

/* Free an encoder. */
void
stream_enc_free (struct stream_enc *enc)
{
  if (enc) {
    sha256_free (enc->sha);
    free (enc);
  }
}

/* Give bytes to the sink; a failure kills the encoder. */
static int
enc_sink (struct stream_enc *enc, const void *buf, size_t len)
{
  int r = enc->sink (enc->opaque, buf, len);

  if (r < 0) {
    enc->err = r;
    return r;
  }
  enc->phys += len;
  return 0;
}

/* Write one record: body_len bytes already in enc->buf after the framing,
 * then data_len bytes of data.  Its SHA-256 covers the data, or, when sums
 * is not NULL (a BLOCKSUMS WRITE), the data's piece digests in its place.
 */
static int
enc_record (struct stream_enc *enc, unsigned type, size_t body_len,
            const void *data, size_t data_len, const uint8_t *sums)
{
  size_t head = STREAM_FRAME_LEN + body_len;
  uint8_t *sha = enc->buf + head;
  int r;

  frame_encode (enc->buf, type, (uint32_t) (body_len + data_len));
  sha256_update (enc->sha, enc->chain, STREAM_SHA_LEN);
  sha256_update (enc->sha, enc->buf, head);
  if (sums)
    sha256_update (enc->sha, sums, stream_pieces (data_len) * STREAM_SHA_LEN);
  else if (data_len)
    sha256_update (enc->sha, data, data_len);
  sha256_final (enc->sha, sha);
  if (data_len == 0)
    r = enc_sink (enc, enc->buf, head + STREAM_SHA_LEN);
  else if ((r = enc_sink (enc, enc->buf, head)) == 0 &&
           (r = enc_sink (enc, data, data_len)) == 0)
    r = enc_sink (enc, sha, STREAM_SHA_LEN);
  if (r < 0)
    return r;
  memcpy (enc->chain, sha, STREAM_SHA_LEN);
  enc->records++;
  enc->bytes += head + data_len + STREAM_SHA_LEN;
  return 0;
}

/* Write a PROGRESS or RESUME record stating the position before it. */
static int
enc_position (struct stream_enc *enc, unsigned type, uint64_t next_offset)
{
  uint8_t *b = enc->buf + STREAM_FRAME_LEN;
  int r;

  put_le64 (b + 0, next_offset);
  put_le64 (b + 8, enc->records);
  put_le64 (b + 16, enc->bytes);
  memcpy (b + 24, enc->chain, STREAM_SHA_LEN);
  r = enc_record (enc, type, STREAM_PROGRESS_BODY, NULL, 0, NULL);
  if (r == 0) {
    enc->next_offset = next_offset;
    enc->last_progress = enc->bytes;
  }
  return r;
}

/* Write the magic and the HEADER. */
static int
enc_start (struct stream_enc *enc)
{
  size_t blen = header_encode (&enc->hdr, enc->buf + STREAM_FRAME_LEN);
  int r = enc_sink (enc, STREAM_MAGIC, STREAM_MAGIC_LEN);

  if (r < 0)
    return r;
  enc->bytes = STREAM_MAGIC_LEN;
  return enc_record (enc, STREAM_REC_HEADER, blen, NULL, 0, NULL);
}

/* Can the encoder take a record now? */
static int
enc_ready (struct stream_enc *enc, enum enc_state want, const char *what)
{
  if (enc->err)
    return cairn_fail (enc->err, "stream encoder: %s after a failed write",
                       what);
  if (enc->state != want)
    return cairn_fail (-EINVAL, "stream encoder: %s %s", what,
                       enc->state == ENC_NEW ? "before the stream began" :
                       enc->state == ENC_DONE ? "after the END record" :
                       "after the stream began");
  return 0;
}

/* Begin a stream. */
int
stream_enc_begin (struct stream_enc *enc)
{
  int r = enc_ready (enc, ENC_NEW, "begin");

  if (r == 0 && (r = enc_start (enc)) == 0) {
    enc->state = ENC_BODY;
    enc->last_progress = enc->bytes;
  }
  return r;
}

/* Begin a resumed stream. */
int
stream_enc_resume (struct stream_enc *enc, const struct stream_token *tok)
{
  int r = enc_ready (enc, ENC_NEW, "resume");

  if (r < 0 || (r = stream_token_check (tok, &enc->hdr)) < 0 ||
      (r = enc_start (enc)) < 0)
    return r;
  /* Continue the interrupted stream's position and chain. */
  memcpy (enc->chain, tok->chain, STREAM_SHA_LEN);
  enc->records = tok->records;
  enc->bytes = tok->bytes;
  r = enc_position (enc, STREAM_REC_RESUME, tok->next_offset);
  if (r == 0)
    enc->state = ENC_BODY;
  return r;
}

/* Write a PROGRESS record if progress_interval bytes went by. */
static int
enc_maybe_progress (struct stream_enc *enc)
{
  if (enc->opts.progress_interval == 0 ||
      enc->bytes - enc->last_progress < enc->opts.progress_interval)
    return 0;
  return enc_position (enc, STREAM_REC_PROGRESS, enc->next_offset);
}

/* Check a WRITE or ZERO range for the encoder. */
static int
enc_range (struct stream_enc *enc, uint64_t off, uint64_t len,
           const char *what)
{
  char msg[512];
  int r = enc_ready (enc, ENC_BODY, what);

  if (r == 0 && (r = range_problem (&enc->hdr, enc->next_offset, off, len,
                                    msg, sizeof msg)) < 0)
    cairn_error ("stream encoder: %s: %s", what, msg);
  return r;
}

/* Write data as WRITE records, hashed over sums (one per piece from the
 * start of data) in a BLOCKSUMS stream, or over the pieces' digests
 * computed here when sums is NULL.
 */
static int
enc_write (struct stream_enc *enc, uint64_t offset, const uint8_t *data,
           uint64_t len, const uint8_t *sums)
{
  bool blocksums = enc->hdr.incompat & STREAM_INCOMPAT_BLOCKSUMS;
  int r = enc_range (enc, offset, len, "write");

  while (r == 0 && len > 0) {
    uint32_t n = (uint32_t) MIN (len, (uint64_t) enc->opts.max_data);
    const uint8_t *rs = NULL;

    if (blocksums && sums)
      rs = sums;
    else if (blocksums) {
      stream_piece_sums (data, n, enc->sums);
      rs = enc->sums;
    }
    put_le64 (enc->buf + STREAM_FRAME_LEN, offset);
    r = enc_record (enc, STREAM_REC_WRITE, STREAM_WRITE_FIXED, data, n, rs);
    if (r == 0) {
      offset += n;
      data += n;
      len -= n;
      if (sums)
        sums += stream_pieces (n) * STREAM_SHA_LEN;
      enc->next_offset = offset;
      r = enc_maybe_progress (enc);
    }
  }
  return r;
}

/* Write data as WRITE records. */
int
stream_enc_write (struct stream_enc *enc, uint64_t offset, const void *data,
                  uint64_t len)
{
  return enc_write (enc, offset, data, len, NULL);
}

/* Write data as WRITE records, with the caller's piece digests. */
int
stream_enc_write_sums (struct stream_enc *enc, uint64_t offset,
                       const void *data, uint64_t len, const uint8_t *sums)
{
  if (len > enc->opts.max_data && enc->opts.max_data % STREAM_PIECE)
    return cairn_fail (-EINVAL, "stream encoder: write: records of %" PRIu32
                       " bytes would split a %u-byte piece of the digests "
                       "given", enc->opts.max_data, STREAM_PIECE);
  return enc_write (enc, offset, data, len, sums);
}

/* Write a ZERO record. */
int
stream_enc_zero (struct stream_enc *enc, uint64_t offset, uint64_t len)
{
  int r = enc_range (enc, offset, len, "zero");

  if (r == 0) {
    put_le64 (enc->buf + STREAM_FRAME_LEN, offset);
    put_le64 (enc->buf + STREAM_FRAME_LEN + 8, len);
    r = enc_record (enc, STREAM_REC_ZERO, STREAM_ZERO_BODY, NULL, 0, NULL);
  }
  if (r == 0) {
    enc->next_offset = offset + len;
    r = enc_maybe_progress (enc);
  }
  return r;
}

/* Write a PROGRESS record. */
int
stream_enc_progress (struct stream_enc *enc, uint64_t next_offset)
{
  char msg[512];
  int r = enc_ready (enc, ENC_BODY, "progress");

  if (r < 0)
    return r;
  r = next_problem (&enc->hdr, enc->next_offset, next_offset, msg, sizeof msg);
  if (r < 0)
    return cairn_fail (r, "stream encoder: progress: %s", msg);
  return enc_position (enc, STREAM_REC_PROGRESS, next_offset);
}

/* Write the END record. */
int
stream_enc_end (struct stream_enc *enc)
{
  uint8_t *b = enc->buf + STREAM_FRAME_LEN;
  int r = enc_ready (enc, ENC_BODY, "end");

  if (r < 0)
    return r;
  put_le64 (b + 0, enc->records);
  put_le64 (b + 8, enc->bytes);
  memcpy (b + 16, enc->chain, STREAM_SHA_LEN);
  r = enc_record (enc, STREAM_REC_END, STREAM_END_BODY, NULL, 0, NULL);
  if (r == 0)
    enc->state = ENC_DONE;
  return r;
}

/* Bytes written so far. */
uint64_t
stream_enc_bytes (const struct stream_enc *enc)
{
  return enc->phys;
}

/* The stream's digest. */
void
stream_enc_digest (const struct stream_enc *enc,
                   uint8_t digest[STREAM_SHA_LEN])
{
  memcpy (digest, enc->chain, STREAM_SHA_LEN);
}
