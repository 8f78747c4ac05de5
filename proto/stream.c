/* Cairn send streams: rules, resume tokens, encoder and decoder (see
 * stream.h for the format and the decoder's invariants, cairn-stream(5) for
 * the specification).
 *
 * The encoder and the decoder share the rules (header_problem,
 * range_problem, next_problem, token_problem), so that the encoder cannot
 * write a stream the decoder refuses.  The decoder treats its input as
 * hostile: every length is bounded before anything is buffered, every
 * record is hashed before any of its fields is used, and any byte string
 * gives events or an error, never a crash (tests/unit/test-stream.c fuzzes
 * it).
 *
 * Decoder states and the record that moves each one on (process_record):
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
#include "stream.h"

static const uint8_t zero_sha[STREAM_SHA_LEN];

/* ------------------------------------------------------------ rules */

/* The name of a record type. */
const char *
stream_record_name (unsigned type)
{
  switch (type) {
  case STREAM_REC_HEADER: return "HEADER";
  case STREAM_REC_WRITE: return "WRITE";
  case STREAM_REC_ZERO: return "ZERO";
  case STREAM_REC_PROGRESS: return "PROGRESS";
  case STREAM_REC_RESUME: return "RESUME";
  case STREAM_REC_END: return "END";
  default:
    return type >= 'a' && type <= 'z' ? "ancillary" : "unknown";
  }
}

/* Is x a power of two? */
static bool
is_pow2 (uint64_t x)
{
  return x && (x & (x - 1)) == 0;
}

/* What is wrong with a volume name (path, DESIGN §3) or a snapshot name
 * (one component) of len bytes, or NULL.  The same rules as the catalog's
 * vol_check_name, restated here because proto/ does not depend on the
 * engine's catalog.
 */
static const char *
name_problem (const char *s, size_t len, bool path)
{
  size_t comp = 0;

  if (len == 0)
    return "is empty";
  for (size_t i = 0; i <= len; i++) {
    char c = i < len ? s[i] : '/';

    if (c == '/') {
      if (i < len && !path)
        return "contains '/'";
      if (comp == 0)
        return "has an empty component";
      if ((comp == 1 && s[i - 1] == '.') ||
          (comp == 2 && s[i - 1] == '.' && s[i - 2] == '.'))
        return "has a '.' or '..' component";
      comp = 0;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
      return "contains a byte other than letters, digits, '.', '_', '-' "
        "and '/'";
    comp++;
  }
  return NULL;
}

/* Format into msg and return err. */
static int CAIRN_PRINTF (4, 5)
problem (int err, char *msg, size_t n, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, n, fmt, ap);
  va_end (ap);
  return err;
}

/* Check every header field but the version: 0, -EINVAL or -ENOTSUP. */
static int
header_problem (const struct stream_header *h, char *msg, size_t n)
{
  size_t vlen = strnlen (h->vol_name, sizeof h->vol_name);
  size_t slen = strnlen (h->snap_name, sizeof h->snap_name);
  const char *why;

  if (h->incompat & ~STREAM_INCOMPAT_KNOWN)
    return problem (-ENOTSUP, msg, n, "the stream needs incompatible features "
                    "0x%08" PRIx32 " that this version of cairn does not know: "
                    "upgrade cairn", h->incompat & ~STREAM_INCOMPAT_KNOWN);
  if (!is_pow2 (h->block_size) || h->block_size < STREAM_MIN_BLOCK_SIZE ||
      h->block_size > STREAM_MAX_BLOCK_SIZE)
    return problem (-EINVAL, msg, n, "block size %" PRIu32 " is not a power of "
                    "two from %d to %d", h->block_size, STREAM_MIN_BLOCK_SIZE,
                    STREAM_MAX_BLOCK_SIZE);
  if (h->vol_size == 0 || h->vol_size % 512)
    return problem (-EINVAL, msg, n, "volume size %" PRIu64 " is not a "
                    "positive multiple of 512", h->vol_size);
  if ((h->from_guid == 0) != (h->from_gen == 0))
    return problem (-EINVAL, msg, n, "base snapshot guid %016" PRIx64 " and "
                    "generation %" PRIu64 " must both be 0 (a full stream) or "
                    "both be set", h->from_guid, h->from_gen);
  if (h->to_guid == 0 || h->to_gen == 0)
    return problem (-EINVAL, msg, n, "the snapshot sent needs a nonzero guid "
                    "and generation (guid %016" PRIx64 ", generation %" PRIu64
                    ")", h->to_guid, h->to_gen);
  if (h->from_gen && (h->from_gen >= h->to_gen || h->from_guid == h->to_guid))
    return problem (-EINVAL, msg, n, "the base snapshot (guid %016" PRIx64
                    ", generation %" PRIu64 ") is not older than the snapshot "
                    "sent (guid %016" PRIx64 ", generation %" PRIu64 ")",
                    h->from_guid, h->from_gen, h->to_guid, h->to_gen);
  if (vlen > STREAM_NAME_MAX ||
      (why = name_problem (h->vol_name, vlen, true)) != NULL)
    return problem (-EINVAL, msg, n, "volume name '%.*s' %s",
                    (int) MIN (vlen, 64), h->vol_name,
                    vlen > STREAM_NAME_MAX ? "is too long" : why);
  if (slen > STREAM_NAME_MAX ||
      (slen && (why = name_problem (h->snap_name, slen, false)) != NULL))
    return problem (-EINVAL, msg, n, "snapshot name '%.*s' %s",
                    (int) MIN (slen, 64), h->snap_name,
                    slen > STREAM_NAME_MAX ? "is too long" : why);
  return 0;
}

/* Is off a place where a range may start or end (invariant 3)? */
static bool
boundary_ok (const struct stream_header *h, uint64_t off)
{
  return off % h->block_size == 0 || off == h->vol_size;
}

/* Check a WRITE or ZERO range given what the stream covered so far
 * (invariants 2 and 3): 0 or -EINVAL.
 */
static int
range_problem (const struct stream_header *h, uint64_t next, uint64_t off,
               uint64_t len, char *msg, size_t n)
{
  if (len == 0)
    return problem (-EINVAL, msg, n, "empty range at offset %" PRIu64, off);
  if (off % h->block_size)
    return problem (-EINVAL, msg, n, "offset %" PRIu64 " is not a multiple of "
                    "the block size %" PRIu32, off, h->block_size);
  if (off < next)
    return problem (-EINVAL, msg, n, "range %" PRIu64 "+%" PRIu64 " starts "
                    "before offset %" PRIu64 ", which the stream already "
                    "covered (ranges must ascend without overlapping)",
                    off, len, next);
  if (off > h->vol_size || len > h->vol_size - off)
    return problem (-EINVAL, msg, n, "range %" PRIu64 "+%" PRIu64 " passes the "
                    "end of the volume (%" PRIu64 " bytes)", off, len,
                    h->vol_size);
  if (!boundary_ok (h, off + len))
    return problem (-EINVAL, msg, n, "length %" PRIu64 " is not a multiple of "
                    "the block size %" PRIu32 " and the range does not end at "
                    "the end of the volume", len, h->block_size);
  return 0;
}

/* Check a PROGRESS next_offset after cur: 0 or -EINVAL. */
static int
next_problem (const struct stream_header *h, uint64_t cur, uint64_t next,
              char *msg, size_t n)
{
  if (next < cur)
    return problem (-EINVAL, msg, n, "next offset %" PRIu64 " goes back "
                    "before %" PRIu64 ", which the stream already covered",
                    next, cur);
  if (next > h->vol_size || !boundary_ok (h, next))
    return problem (-EINVAL, msg, n, "next offset %" PRIu64 " is beyond the "
                    "volume (%" PRIu64 " bytes) or not a multiple of the block "
                    "size %" PRIu32, next, h->vol_size, h->block_size);
  return 0;
}

/* Check a header for the encoder. */
int
stream_header_check (const struct stream_header *hdr)
{
  char msg[512];
  int r = header_problem (hdr, msg, sizeof msg);

  if (r < 0)
    cairn_error ("stream header: %s", msg);
  return r;
}

/* ------------------------------------------------------------ HEADER */

/* Encode a checked header's body; returns its length. */
static size_t
header_encode (const struct stream_header *h, uint8_t *b)
{
  size_t vlen = strlen (h->vol_name), slen = strlen (h->snap_name);

  memset (b, 0, STREAM_HEADER_FIXED);
  put_le32 (b + 0, STREAM_VERSION);
  put_le32 (b + 4, h->incompat);
  put_le32 (b + 8, h->compat);
  put_le32 (b + 12, h->block_size);
  memcpy (b + 16, h->pool_uuid, 16);
  put_le64 (b + 32, h->vol_id);
  put_le64 (b + 40, h->vol_size);
  put_le64 (b + 48, h->from_guid);
  put_le64 (b + 56, h->from_gen);
  put_le64 (b + 64, h->to_guid);
  put_le64 (b + 72, h->to_gen);
  put_le64 (b + 80, h->ctime);
  put_le16 (b + 88, (uint16_t) vlen);
  put_le16 (b + 90, (uint16_t) slen);
  /* b + 92: u32 reserved, 0 */
  memcpy (b + STREAM_HEADER_FIXED, h->vol_name, vlen);
  memcpy (b + STREAM_HEADER_FIXED + vlen, h->snap_name, slen);
  return STREAM_HEADER_FIXED + vlen + slen;
}

/* Decode a HEADER body whose version is known to be 1: 0, -EBADMSG or
 * -ENOTSUP.
 */
static int
header_decode (const uint8_t *b, size_t len, struct stream_header *h,
               char *msg, size_t n)
{
  size_t vlen, slen;
  int r;

  if (len < STREAM_HEADER_FIXED)
    return problem (-EBADMSG, msg, n, "the body has %zu bytes, a version 1 "
                    "header has at least %d", len, STREAM_HEADER_FIXED);
  memset (h, 0, sizeof *h);
  h->version = get_le32 (b + 0);
  h->incompat = get_le32 (b + 4);
  h->compat = get_le32 (b + 8);
  h->block_size = get_le32 (b + 12);
  memcpy (h->pool_uuid, b + 16, 16);
  h->vol_id = get_le64 (b + 32);
  h->vol_size = get_le64 (b + 40);
  h->from_guid = get_le64 (b + 48);
  h->from_gen = get_le64 (b + 56);
  h->to_guid = get_le64 (b + 64);
  h->to_gen = get_le64 (b + 72);
  h->ctime = get_le64 (b + 80);
  vlen = get_le16 (b + 88);
  slen = get_le16 (b + 90);
  if (get_le32 (b + 92) != 0)
    return problem (-EBADMSG, msg, n, "reserved field 0x%08" PRIx32 " is not 0",
                    get_le32 (b + 92));
  if (vlen > STREAM_NAME_MAX || slen > STREAM_NAME_MAX ||
      len != STREAM_HEADER_FIXED + vlen + slen)
    return problem (-EBADMSG, msg, n, "name lengths %zu and %zu do not fit a "
                    "body of %zu bytes (names have at most %d bytes)",
                    vlen, slen, len, STREAM_NAME_MAX);
  memcpy (h->vol_name, b + STREAM_HEADER_FIXED, vlen);
  memcpy (h->snap_name, b + STREAM_HEADER_FIXED + vlen, slen);
  /* A NUL inside a name would hide the rest of it: refuse it here, where
   * the length is still known.
   */
  if (memchr (h->vol_name, 0, vlen) || memchr (h->snap_name, 0, slen))
    return problem (-EBADMSG, msg, n, "a name contains a NUL byte");
  r = header_problem (h, msg, n);
  return r == -EINVAL ? -EBADMSG : r;
}

/* Put a record's framing into f. */
static void
frame_encode (uint8_t *f, unsigned type, uint32_t body_len)
{
  f[0] = (uint8_t) type;
  f[1] = 0;                     /* flags */
  put_le16 (f + 2, 0);          /* reserved */
  put_le32 (f + 4, body_len);
}

/* The SHA-256 of a header's record. */
void
stream_header_digest (const struct stream_header *hdr,
                      uint8_t digest[STREAM_SHA_LEN])
{
  uint8_t buf[STREAM_SHA_LEN + STREAM_FRAME_LEN + STREAM_HEADER_FIXED +
              2 * STREAM_NAME_MAX];
  size_t blen;

  memset (buf, 0, STREAM_SHA_LEN);
  blen = header_encode (hdr, buf + STREAM_SHA_LEN + STREAM_FRAME_LEN);
  frame_encode (buf + STREAM_SHA_LEN, STREAM_REC_HEADER, (uint32_t) blen);
  sha256 (buf, STREAM_SHA_LEN + STREAM_FRAME_LEN + blen, digest);
}

/* ------------------------------------------------------------ tokens */

static const char b64url[] =
  "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Format 16 bytes as 32 hex digits. */
static void
hex16 (const uint8_t *p, char out[33])
{
  for (int i = 0; i < 16; i++)
    snprintf (out + 2 * i, 3, "%02x", p[i]);
}

/* Is the token for the stream with header h, whose HEADER record hashes to
 * digest?  0, -ESTALE or -EINVAL.
 */
static int
token_problem (const struct stream_token *t, const struct stream_header *h,
               const uint8_t *digest, char *msg, size_t n)
{
  char a[33], b[33];

  if (memcmp (t->pool_uuid, h->pool_uuid, 16) != 0) {
    hex16 (t->pool_uuid, a);
    hex16 (h->pool_uuid, b);
    return problem (-ESTALE, msg, n, "the resume token is for a stream from "
                    "pool %s, this stream is from pool %s", a, b);
  }
  if (t->to_guid != h->to_guid || t->to_gen != h->to_gen)
    return problem (-ESTALE, msg, n, "the resume token is for snapshot guid "
                    "%016" PRIx64 " (generation %" PRIu64 "), this stream "
                    "sends guid %016" PRIx64 " (generation %" PRIu64 ")",
                    t->to_guid, t->to_gen, h->to_guid, h->to_gen);
  if (t->from_guid != h->from_guid || t->from_gen != h->from_gen)
    return problem (-ESTALE, msg, n, "the resume token is for a stream based "
                    "on guid %016" PRIx64 " (generation %" PRIu64 "), this "
                    "stream is based on guid %016" PRIx64 " (generation %"
                    PRIu64 "; 0 for a full stream)", t->from_guid,
                    t->from_gen, h->from_guid, h->from_gen);
  if (t->vol_id != h->vol_id)
    return problem (-ESTALE, msg, n, "the resume token is for volume id %"
                    PRIu64 ", this stream is of volume id %" PRIu64,
                    t->vol_id, h->vol_id);
  if (memcmp (t->header_digest, digest, STREAM_SHA_LEN) != 0)
    return problem (-ESTALE, msg, n, "the resume token is for the same "
                    "snapshots but another header (volume size, names, "
                    "creation time or features differ)");
  if (t->next_offset > h->vol_size || !boundary_ok (h, t->next_offset))
    return problem (-EINVAL, msg, n, "the resume token's offset %" PRIu64
                    " does not fit the volume (%" PRIu64 " bytes, blocks of %"
                    PRIu32 ")", t->next_offset, h->vol_size, h->block_size);
  return 0;
}

/* Check a token against a header. */
int
stream_token_check (const struct stream_token *tok,
                    const struct stream_header *hdr)
{
  uint8_t digest[STREAM_SHA_LEN];
  char msg[512];
  int r;

  stream_header_digest (hdr, digest);
  r = token_problem (tok, hdr, digest, msg, sizeof msg);
  if (r < 0)
    cairn_error ("%s", msg);
  return r;
}

/* Encode a token's binary form (cairn-stream(5), RESUME TOKENS). */
static void
token_encode (const struct stream_token *t, uint8_t b[STREAM_TOKEN_BINARY_LEN])
{
  uint8_t check[STREAM_SHA_LEN];

  memset (b, 0, STREAM_TOKEN_BINARY_LEN);
  b[0] = 1;                     /* token version; b[1] flags, b[2..3] 0 */
  memcpy (b + 4, t->pool_uuid, 16);
  put_le64 (b + 20, t->vol_id);
  put_le64 (b + 28, t->from_guid);
  put_le64 (b + 36, t->from_gen);
  put_le64 (b + 44, t->to_guid);
  put_le64 (b + 52, t->to_gen);
  memcpy (b + 60, t->header_digest, STREAM_SHA_LEN);
  put_le64 (b + 92, t->next_offset);
  put_le64 (b + 100, t->records);
  put_le64 (b + 108, t->bytes);
  memcpy (b + 116, t->chain, STREAM_SHA_LEN);
  sha256 (b, 148, check);
  memcpy (b + 148, check, 8);
}

/* Format a token as text. */
void
stream_token_format (const struct stream_token *tok,
                     char text[STREAM_TOKEN_MAX])
{
  uint8_t b[STREAM_TOKEN_BINARY_LEN];
  char *p = text + sizeof STREAM_TOKEN_PREFIX - 1;

  token_encode (tok, b);
  memcpy (text, STREAM_TOKEN_PREFIX, sizeof STREAM_TOKEN_PREFIX - 1);
  for (size_t i = 0; i < STREAM_TOKEN_BINARY_LEN; i += 3) {
    uint32_t v = (uint32_t) b[i] << 16 | (uint32_t) b[i + 1] << 8 | b[i + 2];

    *p++ = b64url[v >> 18];
    *p++ = b64url[(v >> 12) & 63];
    *p++ = b64url[(v >> 6) & 63];
    *p++ = b64url[v & 63];
  }
  *p = '\0';
}

/* Parse a token's text. */
int
stream_token_parse (const char *text, struct stream_token *tok)
{
  const size_t plen = sizeof STREAM_TOKEN_PREFIX - 1;
  const size_t want = STREAM_TOKEN_TEXT_LEN - plen;
  uint8_t b[STREAM_TOKEN_BINARY_LEN], check[STREAM_SHA_LEN];
  size_t len = strlen (text);
  struct stream_token t;

  if (strncmp (text, STREAM_TOKEN_PREFIX, plen) != 0)
    return cairn_fail (-EINVAL, "not a Cairn resume token: it must start with "
                       "'%s'", STREAM_TOKEN_PREFIX);
  if (len - plen != want)
    return cairn_fail (-EINVAL, "the resume token has %zu characters after "
                       "'%s', not %zu: was it cut or joined when copied?",
                       len - plen, STREAM_TOKEN_PREFIX, want);
  for (size_t i = 0; i < want; i += 4) {
    uint32_t v = 0;

    for (size_t j = 0; j < 4; j++) {
      const char *c = memchr (b64url, text[plen + i + j], 64);

      if (text[plen + i + j] == '\0' || c == NULL)
        return cairn_fail (-EINVAL, "the resume token has '%c' at character "
                           "%zu, which is not base64url", text[plen + i + j],
                           plen + i + j);
      v = v << 6 | (uint32_t) (c - b64url);
    }
    b[i / 4 * 3] = (uint8_t) (v >> 16);
    b[i / 4 * 3 + 1] = (uint8_t) (v >> 8);
    b[i / 4 * 3 + 2] = (uint8_t) v;
  }
  sha256 (b, 148, check);
  if (memcmp (check, b + 148, 8) != 0)
    return cairn_fail (-EINVAL, "the resume token is damaged (its check value "
                       "does not match): copy it again from the receiver");
  if (b[0] != 1 || b[1] != 0 || get_le16 (b + 2) != 0)
    return cairn_fail (-EINVAL, "resume token version %u flags 0x%02x is not "
                       "supported", b[0], b[1]);
  memset (&t, 0, sizeof t);
  memcpy (t.pool_uuid, b + 4, 16);
  t.vol_id = get_le64 (b + 20);
  t.from_guid = get_le64 (b + 28);
  t.from_gen = get_le64 (b + 36);
  t.to_guid = get_le64 (b + 44);
  t.to_gen = get_le64 (b + 52);
  memcpy (t.header_digest, b + 60, STREAM_SHA_LEN);
  t.next_offset = get_le64 (b + 92);
  t.records = get_le64 (b + 100);
  t.bytes = get_le64 (b + 108);
  memcpy (t.chain, b + 116, STREAM_SHA_LEN);
  if (t.to_guid == 0 || t.to_gen == 0 ||
      (t.from_guid == 0) != (t.from_gen == 0) ||
      (t.from_gen && t.from_gen >= t.to_gen) ||
      t.records == 0 ||
      t.bytes < STREAM_MAGIC_LEN + STREAM_OVERHEAD + STREAM_HEADER_FIXED + 1 ||
      t.next_offset % 512)
    return cairn_fail (-EINVAL, "the resume token is well formed but "
                       "describes an impossible stream position");
  *tok = t;
  return 0;
}

/* ------------------------------------------------------------ encoder */

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
 * then data_len bytes of data.
 */
static int
enc_record (struct stream_enc *enc, unsigned type, size_t body_len,
            const void *data, size_t data_len)
{
  size_t head = STREAM_FRAME_LEN + body_len;
  uint8_t *sha = enc->buf + head;
  int r;

  frame_encode (enc->buf, type, (uint32_t) (body_len + data_len));
  sha256_update (enc->sha, enc->chain, STREAM_SHA_LEN);
  sha256_update (enc->sha, enc->buf, head);
  if (data_len)
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
  r = enc_record (enc, type, STREAM_PROGRESS_BODY, NULL, 0);
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
  return enc_record (enc, STREAM_REC_HEADER, blen, NULL, 0);
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

/* Write data as WRITE records. */
int
stream_enc_write (struct stream_enc *enc, uint64_t offset, const void *data,
                  uint64_t len)
{
  const uint8_t *p = data;
  int r = enc_range (enc, offset, len, "write");

  while (r == 0 && len > 0) {
    uint32_t n = (uint32_t) MIN (len, (uint64_t) enc->opts.max_data);

    put_le64 (enc->buf + STREAM_FRAME_LEN, offset);
    r = enc_record (enc, STREAM_REC_WRITE, STREAM_WRITE_FIXED, p, n);
    if (r == 0) {
      offset += n;
      p += n;
      len -= n;
      enc->next_offset = offset;
      r = enc_maybe_progress (enc);
    }
  }
  return r;
}

/* Write a ZERO record. */
int
stream_enc_zero (struct stream_enc *enc, uint64_t offset, uint64_t len)
{
  int r = enc_range (enc, offset, len, "zero");

  if (r == 0) {
    put_le64 (enc->buf + STREAM_FRAME_LEN, offset);
    put_le64 (enc->buf + STREAM_FRAME_LEN + 8, len);
    r = enc_record (enc, STREAM_REC_ZERO, STREAM_ZERO_BODY, NULL, 0);
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
  r = enc_record (enc, STREAM_REC_END, STREAM_END_BODY, NULL, 0);
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

/* ------------------------------------------------------------ decoder */

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
