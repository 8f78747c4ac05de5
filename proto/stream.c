/* Cairn send streams: the rules, HEADER encoding and framing, and resume
 * tokens (see stream.h for the format and the decoder's invariants,
 * cairn-stream(5) for the specification).  The encoder is in stream-enc.c,
 * the decoder in stream-dec.c; what they use from here is declared in
 * stream-int.h.
 *
 * The encoder and the decoder share the rules (header_problem,
 * range_problem, next_problem, token_problem), so that the encoder cannot
 * write a stream the decoder refuses.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sha256.h"
#include "stream-int.h"

_Static_assert (STREAM_PIECE == SHA256_DATA_BLOCK,
                "BLOCKSUMS pieces are what sha256_blocks hashes");

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
int
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
int
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
size_t
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
int
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
void
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

/* The BLOCKSUMS digests of data. */
void
stream_piece_sums (const void *data, uint64_t len, uint8_t *sums)
{
  uint64_t whole = len / STREAM_PIECE;

  sha256_blocks (data, whole, sums);
  if (len % STREAM_PIECE)
    sha256 ((const uint8_t *) data + whole * STREAM_PIECE, len % STREAM_PIECE,
            sums + whole * STREAM_SHA_LEN);
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
int
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
