/* Cairn send streams: the decoder (see stream.h for its interface and the
 * decoder's invariants, cairn-stream(5) for the specification).  The rules
 * it applies, HEADER decoding and resume tokens are in stream.c (shared
 * through stream-int.h), the encoder in stream-enc.c.
 *
 * The decoder treats its input as hostile: every length is bounded before
 * anything is buffered, every record is hashed before any of its fields is
 * used, and any byte string gives events or an error, never a crash
 * (tests/unit/test-stream.c fuzzes it).  In a BLOCKSUMS stream a WRITE
 * record's pieces are hashed first (the record's SHA-256 covers their
 * digests), and the event hands those checked digests to the receiver.
 *
 * Decoder states and the record that moves each one on (dec_frame checks
 * a record's type against the state, dec_record moves it on):
 *
 *   MAGIC --8 bytes--> HEADER --H--> BODY --E--> DONE
 *                         \--H (resuming)--> RESUME --R--> BODY
 *   BODY --W, Z, P, ancillary--> BODY
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sha256.h"
#include "stream-int.h"

/* The chain value before a HEADER record: it starts a new chain. */
static const uint8_t zero_sha[STREAM_SHA_LEN];

enum dec_state { DEC_MAGIC, DEC_HEADER, DEC_RESUME, DEC_BODY, DEC_DONE };

/* The decoder keeps this much buffer before a large WRITE needs more. */
#define DEC_INITIAL_BUF 4096

struct stream_dec {
  enum dec_state state;
  bool resuming;
  struct stream_token tok;      /* resuming: the token it continues */
  struct stream_header hdr;     /* once the HEADER was verified */
  uint8_t header_sha[STREAM_SHA_LEN];
  struct sha256_ctx *sha;
  uint8_t chain[STREAM_SHA_LEN];  /* SHA-256 of the last record */
  uint64_t records, bytes;      /* logical index and offset of the next */
  uint64_t pos;                 /* this input's offset of the next record */
  uint64_t next_offset;         /* invariant 2 */
  unsigned type;                /* type of the record being read, or 0 */
  uint8_t *buf;                 /* a record split across calls */
  size_t cap, have, need;       /* need: its length, once framed */
  int err;
  int64_t err_pos;
  char msg[640];
  uint8_t sums[STREAM_MAX_PIECES * STREAM_SHA_LEN];  /* a BLOCKSUMS WRITE's */
};

/* Record an error at the record being read and return err. */
static int CAIRN_PRINTF (3, 4)
dec_fail (struct stream_dec *dec, int err, const char *fmt, ...)
{
  char what[80], detail[512];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (detail, sizeof detail, fmt, ap);
  va_end (ap);
  if (dec->state == DEC_MAGIC)
    snprintf (what, sizeof what, " (magic)");
  else if (dec->state == DEC_DONE)
    snprintf (what, sizeof what, " (after the END record)");
  else if (dec->type >= 'A' && dec->type <= 'Z' &&
           strcmp (stream_record_name (dec->type), "unknown") != 0)
    snprintf (what, sizeof what, " (record %" PRIu64 ", %s)", dec->records,
              stream_record_name (dec->type));
  else if (dec->type)
    snprintf (what, sizeof what, " (record %" PRIu64 ", type 0x%02x)",
              dec->records, dec->type);
  else
    what[0] = '\0';
  snprintf (dec->msg, sizeof dec->msg, "stream byte %" PRIu64 "%s: %s",
            dec->pos, what, detail);
  cairn_error ("%s", dec->msg);
  dec->err = err;
  dec->err_pos = (int64_t) dec->pos;
  return err;
}

/* Make a decoder. */
int
stream_dec_new (const struct stream_token *resume, struct stream_dec **decp)
{
  struct stream_dec *dec = calloc (1, sizeof *dec);

  if (dec == NULL || (dec->buf = malloc (DEC_INITIAL_BUF)) == NULL) {
    free (dec);
    return cairn_fail (-ENOMEM, "stream decoder: out of memory");
  }
  dec->cap = DEC_INITIAL_BUF;
  dec->err_pos = -1;
  dec->sha = sha256_new ();
  if (resume) {
    dec->resuming = true;
    dec->tok = *resume;
  }
  *decp = dec;
  return 0;
}

/* Free a decoder. */
void
stream_dec_free (struct stream_dec *dec)
{
  if (dec) {
    sha256_free (dec->sha);
    free (dec->buf);
    free (dec);
  }
}

/* Check a record's framing against the state; set *total to its length. */
static int
dec_frame (struct stream_dec *dec, const uint8_t *f, size_t *total)
{
  unsigned type = f[0];
  uint32_t blen = get_le32 (f + 4);
  uint32_t min = 0, max = STREAM_MAX_BODY;

  dec->type = type;
  if (!((type >= 'A' && type <= 'Z') || (type >= 'a' && type <= 'z')))
    return dec_fail (dec, -EBADMSG, "0x%02x is not a record type (the stream "
                     "is corrupt, or not aligned on a record here)", type);
  if (type <= 'Z' && strcmp (stream_record_name (type), "unknown") == 0)
    return dec_fail (dec, -ENOTSUP, "unknown record type '%c': the stream was "
                     "written by a newer cairn; upgrade this one", type);
  if (f[1] != 0 || get_le16 (f + 2) != 0)
    return dec_fail (dec, -EBADMSG, "flags 0x%02x and reserved 0x%04x must be "
                     "0 in version 1", f[1], get_le16 (f + 2));
  switch (dec->state) {
  case DEC_HEADER:
    if (type != STREAM_REC_HEADER)
      return dec_fail (dec, -EBADMSG, "a stream must begin with a HEADER "
                       "record");
    break;
  case DEC_RESUME:
    if (type != STREAM_REC_RESUME)
      return dec_fail (dec, -EBADMSG, "this is not a resumed stream: its "
                       "HEADER must be followed by a RESUME record when "
                       "receiving with a resume token");
    break;
  default:
    if (type == STREAM_REC_HEADER)
      return dec_fail (dec, -EBADMSG, "a second HEADER record");
    if (type == STREAM_REC_RESUME)
      return dec_fail (dec, -EBADMSG, dec->resuming ?
                       "a second RESUME record" :
                       "a RESUME record: this stream continues an interrupted "
                       "one; receive it with the resume token");
    break;
  }
  switch (type) {
  case STREAM_REC_HEADER:
    min = 4, max = STREAM_HEADER_MAX_BODY; break;
  case STREAM_REC_WRITE:
    min = STREAM_WRITE_FIXED + 1; break;
  case STREAM_REC_ZERO:
    min = max = STREAM_ZERO_BODY; break;
  case STREAM_REC_PROGRESS: case STREAM_REC_RESUME:
    min = max = STREAM_PROGRESS_BODY; break;
  case STREAM_REC_END:
    min = max = STREAM_END_BODY; break;
  }
  if (blen < min || blen > max)
    return dec_fail (dec, -EBADMSG, "body length %" PRIu32 " is outside %"
                     PRIu32 "..%" PRIu32, blen, min, max);
  *total = STREAM_OVERHEAD + blen;
  return 0;
}

/* Check a PROGRESS, RESUME or END record's statement of the position
 * before it.
 */
static int
dec_position (struct stream_dec *dec, const uint8_t *b)
{
  uint64_t records = get_le64 (b), bytes = get_le64 (b + 8);

  if (records != dec->records || bytes != dec->bytes)
    return dec_fail (dec, -EBADMSG, "it says it is record %" PRIu64 " at "
                     "byte %" PRIu64 " of the stream, but it is record %"
                     PRIu64 " at byte %" PRIu64, records, bytes,
                     dec->records, dec->bytes);
  if (memcmp (b + 16, dec->chain, STREAM_SHA_LEN) != 0)
    return dec_fail (dec, -EBADMSG, "the chained digest it states differs "
                     "from the SHA-256 of the record before it");
  return 0;
}

/* Verify and apply one complete record; 1 with an event, 0 for a skipped
 * ancillary record, or an error.
 */
static int
dec_record (struct stream_dec *dec, const uint8_t *rec, size_t total,
            struct stream_event *ev)
{
  unsigned type = rec[0];
  size_t blen = total - STREAM_OVERHEAD;
  const uint8_t *b = rec + STREAM_FRAME_LEN;
  uint8_t sha[STREAM_SHA_LEN];
  struct stream_header h;
  uint64_t off, len, index = dec->records;
  bool skip = false;
  char msg[512];
  int r;

  sha256_update (dec->sha, type == STREAM_REC_HEADER ? zero_sha : dec->chain,
                 STREAM_SHA_LEN);
  if (type == STREAM_REC_WRITE &&
      (dec->hdr.incompat & STREAM_INCOMPAT_BLOCKSUMS)) {
    /* The record's SHA-256 covers its data's piece digests, computed here
     * from the data: the receiver may then store them as its own.
     */
    stream_piece_sums (b + STREAM_WRITE_FIXED, blen - STREAM_WRITE_FIXED,
                       dec->sums);
    sha256_update (dec->sha, rec, STREAM_FRAME_LEN + STREAM_WRITE_FIXED);
    sha256_update (dec->sha, dec->sums,
                   stream_pieces (blen - STREAM_WRITE_FIXED) * STREAM_SHA_LEN);
  }
  else
    sha256_update (dec->sha, rec, STREAM_FRAME_LEN + blen);
  sha256_final (dec->sha, sha);
  if (memcmp (sha, rec + STREAM_FRAME_LEN + blen, STREAM_SHA_LEN) != 0)
    return dec_fail (dec, -EBADMSG, "SHA-256 mismatch: the record is "
                     "corrupt, or the stream was changed before it (a record "
                     "dropped, duplicated, reordered or altered)");

  memset (ev, 0, sizeof *ev);
  switch (type) {
  case STREAM_REC_HEADER:
    if (get_le32 (b) != STREAM_VERSION)
      return dec_fail (dec, get_le32 (b) > STREAM_VERSION ? -ENOTSUP :
                       -EBADMSG, "format version %" PRIu32 " is not supported "
                       "(this cairn reads version %d)", get_le32 (b),
                       STREAM_VERSION);
    if ((r = header_decode (b, blen, &h, msg, sizeof msg)) < 0)
      return dec_fail (dec, r, "%s", msg);
    if (dec->resuming &&
        (r = token_problem (&dec->tok, &h, sha, msg, sizeof msg)) < 0)
      return dec_fail (dec, r, "%s", msg);
    dec->hdr = h;
    memcpy (dec->header_sha, sha, STREAM_SHA_LEN);
    ev->type = STREAM_EV_HEADER;
    ev->header = &dec->hdr;
    if (dec->resuming) {
      /* The RESUME record continues the interrupted stream. */
      memcpy (dec->chain, dec->tok.chain, STREAM_SHA_LEN);
      dec->records = dec->tok.records;
      dec->bytes = dec->tok.bytes;
      dec->next_offset = dec->tok.next_offset;
      dec->state = DEC_RESUME;
      ev->pos = dec->pos;
      dec->pos += total;
      dec->type = 0;
      return 1;
    }
    dec->state = DEC_BODY;
    break;
  case STREAM_REC_WRITE:
    off = get_le64 (b);
    len = blen - STREAM_WRITE_FIXED;
    if ((r = range_problem (&dec->hdr, dec->next_offset, off, len, msg,
                            sizeof msg)) < 0)
      return dec_fail (dec, -EBADMSG, "%s", msg);
    ev->type = STREAM_EV_WRITE;
    ev->offset = off;
    ev->length = len;
    ev->data = b + STREAM_WRITE_FIXED;
    if (dec->hdr.incompat & STREAM_INCOMPAT_BLOCKSUMS)
      ev->sums = dec->sums;
    dec->next_offset = off + len;
    break;
  case STREAM_REC_ZERO:
    off = get_le64 (b);
    len = get_le64 (b + 8);
    if ((r = range_problem (&dec->hdr, dec->next_offset, off, len, msg,
                            sizeof msg)) < 0)
      return dec_fail (dec, -EBADMSG, "%s", msg);
    ev->type = STREAM_EV_ZERO;
    ev->offset = off;
    ev->length = len;
    dec->next_offset = off + len;
    break;
  case STREAM_REC_PROGRESS:
  case STREAM_REC_RESUME:
    off = get_le64 (b);
    if ((r = dec_position (dec, b + 8)) < 0)
      return r;
    if (type == STREAM_REC_RESUME && off != dec->tok.next_offset)
      return dec_fail (dec, -EBADMSG, "it resumes at offset %" PRIu64 ", the "
                       "token at %" PRIu64, off, dec->tok.next_offset);
    if ((r = next_problem (&dec->hdr, dec->next_offset, off, msg,
                           sizeof msg)) < 0)
      return dec_fail (dec, -EBADMSG, "%s", msg);
    ev->type = type == STREAM_REC_RESUME ? STREAM_EV_RESUME
      : STREAM_EV_PROGRESS;
    ev->offset = off;
    dec->next_offset = off;
    dec->state = DEC_BODY;
    break;
  case STREAM_REC_END:
    if ((r = dec_position (dec, b)) < 0)
      return r;
    ev->type = STREAM_EV_END;
    memcpy (ev->digest, sha, STREAM_SHA_LEN);
    dec->state = DEC_DONE;
    break;
  default:
    /* An ancillary record that version 1 does not define: checked and
     * skipped.
     */
    skip = true;
    break;
  }
  ev->pos = dec->pos;
  ev->record = index;
  memcpy (dec->chain, sha, STREAM_SHA_LEN);
  dec->records++;
  dec->bytes += total;
  dec->pos += total;
  dec->type = 0;
  return skip ? 0 : 1;
}

/* Make room for a record of total bytes. */
static int
dec_reserve (struct stream_dec *dec, size_t total)
{
  uint8_t *p;

  if (total <= dec->cap)
    return 0;
  p = realloc (dec->buf, total);
  if (p == NULL)
    return dec_fail (dec, -ENOMEM, "out of memory for a record of %zu bytes",
                     total);
  dec->buf = p;
  dec->cap = total;
  return 0;
}

/* Decode the next record from the input. */
int
stream_dec_next (struct stream_dec *dec, const void *buf, size_t len,
                 size_t *used, struct stream_event *ev)
{
  const uint8_t *in = buf;
  size_t n = 0, total = 0, k;
  const uint8_t *rec;
  int r;

  *used = 0;
  if (dec->err)
    return dec->err;
  for (;;) {
    *used = n;
    if (dec->state == DEC_DONE) {
      if (n < len)
        return dec_fail (dec, -EBADMSG, "bytes follow the END record");
      return 0;
    }
    if (dec->state == DEC_MAGIC) {
      k = MIN (len - n, STREAM_MAGIC_LEN - dec->have);
      memcpy (dec->buf + dec->have, in + n, k);
      dec->have += k;
      n += k;
      *used = n;
      if (dec->have < STREAM_MAGIC_LEN)
        return 0;
      if (memcmp (dec->buf, STREAM_MAGIC, STREAM_MAGIC_LEN) != 0)
        return dec_fail (dec, -EBADMSG, "not a Cairn send stream: it does not "
                         "begin with \"%s\"", STREAM_MAGIC);
      dec->have = 0;
      dec->pos = dec->bytes = STREAM_MAGIC_LEN;
      dec->state = DEC_HEADER;
      continue;
    }

    /* The whole record is in the input: use it in place. */
    if (dec->have == 0 && len - n >= STREAM_FRAME_LEN) {
      if ((r = dec_frame (dec, in + n, &total)) < 0)
        return r;
      if (len - n >= total) {
        rec = in + n;
        n += total;
        goto record;
      }
    }
    /* Otherwise gather it in the buffer, framing first. */
    if (dec->have < STREAM_FRAME_LEN) {
      k = MIN (len - n, STREAM_FRAME_LEN - dec->have);
      memcpy (dec->buf + dec->have, in + n, k);
      dec->have += k;
      n += k;
      *used = n;
      if (dec->have < STREAM_FRAME_LEN)
        return 0;
      if ((r = dec_frame (dec, dec->buf, &dec->need)) < 0 ||
          (r = dec_reserve (dec, dec->need)) < 0)
        return r;
    }
    k = MIN (len - n, dec->need - dec->have);
    memcpy (dec->buf + dec->have, in + n, k);
    dec->have += k;
    n += k;
    *used = n;
    if (dec->have < dec->need)
      return 0;
    rec = dec->buf;
    total = dec->need;
    dec->have = dec->need = 0;
  record:
    *used = n;
    r = dec_record (dec, rec, total, ev);
    if (r != 0)
      return r;
  }
}

/* Check that the stream was complete. */
int
stream_dec_finish (struct stream_dec *dec)
{
  uint64_t end = dec->pos + dec->have;

  if (dec->err)
    return dec->err;
  if (dec->state == DEC_DONE)
    return 0;
  if (end == 0)
    return dec_fail (dec, -EPIPE, "the stream is empty");
  if (dec->state == DEC_MAGIC)
    return dec_fail (dec, -EPIPE, "stream truncated at byte %" PRIu64
                     ", inside the magic", end);
  if (dec->have >= STREAM_FRAME_LEN)
    return dec_fail (dec, -EPIPE, "stream truncated at byte %" PRIu64 ": the "
                     "record has %zu of its %zu bytes", end, dec->have,
                     dec->need);
  if (dec->have > 0) {
    dec->type = 0;
    return dec_fail (dec, -EPIPE, "stream truncated at byte %" PRIu64 ", "
                     "inside the framing of a record", end);
  }
  return dec_fail (dec, -EPIPE, "stream truncated at byte %" PRIu64 ": %s",
                   end, dec->state == DEC_HEADER ? "no HEADER record" :
                   "it ends after a complete record, without an END record");
}

/* A resume token for what was verified. */
int
stream_dec_token (const struct stream_dec *dec, struct stream_token *tok)
{
  if (dec->state == DEC_DONE)
    return cairn_fail (-EINVAL, "the stream is complete: there is nothing "
                       "to resume");
  if (dec->resuming) {
    /* Before its RESUME record, a resumed stream is still where the token
     * left it.
     */
    if (dec->state != DEC_BODY) {
      *tok = dec->tok;
      return 0;
    }
  }
  else if (dec->state == DEC_MAGIC || dec->state == DEC_HEADER)
    return cairn_fail (-ENOENT, "no resume point: the stream's HEADER was "
                       "not received; send the whole stream again");
  memset (tok, 0, sizeof *tok);
  memcpy (tok->pool_uuid, dec->hdr.pool_uuid, 16);
  tok->vol_id = dec->hdr.vol_id;
  tok->from_guid = dec->hdr.from_guid;
  tok->from_gen = dec->hdr.from_gen;
  tok->to_guid = dec->hdr.to_guid;
  tok->to_gen = dec->hdr.to_gen;
  memcpy (tok->header_digest, dec->header_sha, STREAM_SHA_LEN);
  tok->next_offset = dec->next_offset;
  tok->records = dec->records;
  tok->bytes = dec->bytes;
  memcpy (tok->chain, dec->chain, STREAM_SHA_LEN);
  return 0;
}

/* Bytes consumed. */
uint64_t
stream_dec_pos (const struct stream_dec *dec)
{
  return dec->pos + dec->have;
}

/* The error message. */
const char *
stream_dec_error (const struct stream_dec *dec)
{
  return dec->msg;
}

/* The offset of the record that failed. */
int64_t
stream_dec_error_pos (const struct stream_dec *dec)
{
  return dec->err_pos;
}

/* Has the END record been verified? */
bool
stream_dec_done (const struct stream_dec *dec)
{
  return dec->state == DEC_DONE;
}
