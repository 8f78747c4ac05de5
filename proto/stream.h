/* Cairn send streams: the format of DESIGN §5 and its codec.
 *
 * A send stream carries one state of a volume (a full stream) or the
 * changes between two states (an incremental stream) from one pool to
 * another.  This module is the format and nothing else: pure functions
 * over byte buffers, with no engine, no files and no sockets, so that
 * `cairn send`, `cairn receive`, the server's stream mode and the fuzz
 * tests share one codec.  cairn-stream(5) is the specification; this
 * summary is for readers of the code.
 *
 *   stream  = magic "CAIRNSTR" (8 bytes), HEADER, [RESUME],
 *             { WRITE | ZERO | PROGRESS | ancillary }, END
 *   record  = type u8, flags u8 (0), reserved u16 (0), body_len u32,
 *             body[body_len], sha[32]                  (little-endian)
 *   sha     = SHA-256 (sha of the previous record || type .. body)
 *
 * except, in a stream with the incompatible feature BLOCKSUMS, for WRITE:
 *
 *   sha     = SHA-256 (sha of the previous record || type .. offset ||
 *                      SHA-256 of each 4096-byte piece of the data)
 *
 * a two-level Merkle tree over the data, as strong as hashing the data
 * (both levels are SHA-256), whose lower level is the per-block digests
 * the engine already stores and checks: the sender reads them with the
 * data and the receiver writes them with it, so neither hashes the data a
 * second time.
 *
 * The SHA-256 of a record covers the SHA-256 of the record before it (32
 * zero bytes for the HEADER, the token's for a RESUME), so every record is
 * checked on its own and in its place: a changed byte, a dropped,
 * duplicated or reordered record fails the check of the record where the
 * stream stops being the one that was sent.  A stream without its END is
 * incomplete.  The END record's SHA-256 is the digest of the whole stream.
 *
 * Invariants the decoder enforces (numbered for the tests):
 *
 *  1. Nothing is returned before it is verified: an event is produced only
 *     after its record's SHA-256, type, flags, lengths and every field have
 *     been checked, and the decoder's state changes only then.
 *  2. WRITE and ZERO ranges are in strictly increasing volume order and do
 *     not overlap: each starts at or after the end of the one before (and
 *     after the next_offset of the last PROGRESS or RESUME).  So everything
 *     below next_offset has been received, which is what a resume token
 *     records.
 *  3. Offsets are multiples of the header's block size; lengths are too,
 *     except that a range may end exactly at the volume's size (a multiple
 *     of 512); no range passes the volume's size.
 *  4. A WRITE carries 1 .. STREAM_MAX_DATA bytes, so the decoder buffers at
 *     most one record of STREAM_MAX_RECORD bytes, whatever it is fed.
 *  5. After the first error the decoder is dead: every later call returns
 *     the same error.  Its state (and so its resume token) stays that of
 *     the last verified record.
 *
 * Functions that fail return a negative errno (CAIRN_WUR) and leave a
 * message (also in cairn_errmsg()):
 *   -EBADMSG   the stream is corrupt, malformed or breaks a rule;
 *   -EPIPE     the stream ends before its END record (truncated);
 *   -ENOTSUP   a newer version, an unknown incompatible feature or record
 *              type: the stream is valid but this reader is too old;
 *   -ESTALE    a resume token that belongs to another stream;
 *   -EINVAL    a bad argument to the encoder, or a malformed token;
 *   -ENOMEM, or whatever the encoder's sink returned.
 * Decoder messages start with the stream byte offset of the record that
 * failed ("stream byte 4168 (record 2, WRITE): ...").
 */
#ifndef CAIRN_PROTO_STREAM_H
#define CAIRN_PROTO_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ------------------------------------------------------------ format */

#define STREAM_MAGIC "CAIRNSTR"
#define STREAM_MAGIC_LEN 8
#define STREAM_VERSION 1

/* Record framing: type, flags, reserved u16, body_len u32; SHA-256 after
 * the body.
 */
#define STREAM_FRAME_LEN 8
#define STREAM_SHA_LEN 32
#define STREAM_OVERHEAD (STREAM_FRAME_LEN + STREAM_SHA_LEN)

/* Record types: critical types are ASCII capitals (a reader that does not
 * know one must refuse the stream), ancillary types are ASCII small letters
 * (a reader that does not know one checks it and skips it).  Version 1 has
 * no ancillary types.
 */
#define STREAM_REC_HEADER   'H'
#define STREAM_REC_WRITE    'W'
#define STREAM_REC_ZERO     'Z'
#define STREAM_REC_PROGRESS 'P'
#define STREAM_REC_RESUME   'R'
#define STREAM_REC_END      'E'

/* Body sizes.  HEADER: fixed part, then the two names. */
#define STREAM_HEADER_FIXED 96
#define STREAM_HEADER_MAX_BODY 4096  /* in every version */
#define STREAM_WRITE_FIXED 8         /* offset, then the data */
#define STREAM_ZERO_BODY 16
#define STREAM_PROGRESS_BODY 56      /* PROGRESS and RESUME */
#define STREAM_END_BODY 48

/* Most data in one WRITE record (1 MiB), and so the largest record. */
#define STREAM_MAX_DATA (1024u * 1024)
#define STREAM_MAX_BODY (STREAM_WRITE_FIXED + STREAM_MAX_DATA)
#define STREAM_MAX_RECORD (STREAM_OVERHEAD + STREAM_MAX_BODY)

/* Names in the header, without a NUL (DESIGN §3). */
#define STREAM_NAME_MAX 255

/* Block sizes a stream may declare; Cairn writes 4096. */
#define STREAM_BLOCK_SIZE 4096
#define STREAM_MIN_BLOCK_SIZE 512
#define STREAM_MAX_BLOCK_SIZE 65536

/* Feature flags.  A reader refuses a stream with an incompatible feature it
 * does not know (-ENOTSUP), and ignores compatible ones.
 *
 * BLOCKSUMS: a WRITE record's SHA-256 covers the SHA-256 of each
 * STREAM_PIECE bytes of its data (the last piece shorter when the data
 * ends within one) instead of the data itself (see the top of this file).
 * Readers before it refuse such a stream, as they must: they would check
 * its WRITE records against the wrong rule.
 */
#define STREAM_INCOMPAT_BLOCKSUMS 1u
#define STREAM_INCOMPAT_KNOWN STREAM_INCOMPAT_BLOCKSUMS
#define STREAM_COMPAT_KNOWN 0u

/* BLOCKSUMS pieces: the engine's data block, so that its digests serve. */
#define STREAM_PIECE 4096u
#define STREAM_MAX_PIECES (STREAM_MAX_DATA / STREAM_PIECE)

/* How many pieces len bytes of data make. */
static inline uint64_t
stream_pieces (uint64_t len)
{
  return (len + STREAM_PIECE - 1) / STREAM_PIECE;
}

/* The BLOCKSUMS digests of len bytes at data: stream_pieces (len) SHA-256s
 * into sums, whole pieces two at a time (sha256_blocks).
 */
void stream_piece_sums (const void *data, uint64_t len, uint8_t *sums);

/* By default the encoder writes a PROGRESS record after every 16 MiB of
 * stream.
 */
#define STREAM_PROGRESS_INTERVAL (16u * 1024 * 1024)

/* The HEADER record: which state of which volume the stream carries. */
struct stream_header {
  uint32_t version;          /* STREAM_VERSION (the encoder sets it) */
  uint32_t incompat;         /* incompatible features: STREAM_INCOMPAT_* */
  uint32_t compat;           /* compatible features: none in version 1 */
  uint32_t block_size;       /* unit of offsets and lengths: 512 .. 65536 */
  uint8_t pool_uuid[16];     /* the sending pool */
  uint64_t vol_id;           /* the volume's id in the sending pool */
  uint64_t vol_size;         /* bytes: positive, a multiple of 512 */
  uint64_t from_guid;        /* base snapshot; 0 (and from_gen 0): full */
  uint64_t from_gen;         /* base's generation in the sending pool */
  uint64_t to_guid;          /* the state sent: nonzero */
  uint64_t to_gen;           /* its generation: > from_gen */
  uint64_t ctime;            /* its creation time, seconds since 1970 */
  char vol_name[STREAM_NAME_MAX + 1];   /* "tenant/db": 1..255 bytes */
  char snap_name[STREAM_NAME_MAX + 1];  /* one component, "" if unnamed */
};

/* Check a header as the encoder would write it.  -EINVAL (or -ENOTSUP for
 * unknown incompatible features) with the reason.
 */
int stream_header_check (const struct stream_header *hdr) CAIRN_WUR;

/* The SHA-256 of a header's HEADER record: the identity of the stream,
 * which a resume token records.  The header must pass the check.
 */
void stream_header_digest (const struct stream_header *hdr,
                           uint8_t digest[STREAM_SHA_LEN]);

/* The name of a record type ("WRITE"), or "unknown". */
const char *stream_record_name (unsigned type);

/* ------------------------------------------------------------ tokens */

/* A resume token: where an interrupted receive stopped.  The receiver makes
 * one from its decoder (stream_dec_token) once everything before it is
 * durable; the sender continues from it (stream_enc_resume).
 */
struct stream_token {
  uint8_t pool_uuid[16];     /* which stream: as in its header */
  uint64_t vol_id;
  uint64_t from_guid, from_gen;
  uint64_t to_guid, to_gen;
  uint8_t header_digest[STREAM_SHA_LEN];  /* stream_header_digest */
  uint64_t next_offset;      /* everything below was received */
  uint64_t records;          /* records received (counting the HEADER) */
  uint64_t bytes;            /* stream bytes received (counting the magic) */
  uint8_t chain[STREAM_SHA_LEN];  /* SHA-256 of the last record received */
};

/* The printable form: "cairn-resume-1-" and 208 base64url characters. */
#define STREAM_TOKEN_PREFIX "cairn-resume-1-"
#define STREAM_TOKEN_BINARY_LEN 156
#define STREAM_TOKEN_TEXT_LEN (sizeof STREAM_TOKEN_PREFIX - 1 + 208)
#define STREAM_TOKEN_MAX (STREAM_TOKEN_TEXT_LEN + 1)

/* Write a token's printable form (NUL-terminated) into text. */
void stream_token_format (const struct stream_token *tok,
                          char text[STREAM_TOKEN_MAX]);
/* Parse and check a printable token: -EINVAL with the reason when it is
 * malformed, mistyped (it carries a check value) or impossible.
 */
int stream_token_parse (const char *text, struct stream_token *tok)
  CAIRN_WUR;
/* Does the token belong to the stream with this header?  0, or -ESTALE
 * saying how they differ, or -EINVAL if its offset does not fit the volume.
 */
int stream_token_check (const struct stream_token *tok,
                        const struct stream_header *hdr) CAIRN_WUR;

/* ------------------------------------------------------------ encoder */

/* Where the encoder's bytes go.  Return 0, or a negative errno that
 * stream_enc_* then return (the encoder is dead after it).
 */
typedef int (*stream_sink_fn) (void *opaque, const void *buf, size_t len);

struct stream_enc_opts {
  uint64_t progress_interval;  /* PROGRESS after this many bytes; 0: never */
  uint32_t max_data;           /* data per WRITE: a multiple of the block
                                  size, at most STREAM_MAX_DATA */
};

struct stream_enc;

/* A new encoder for a stream with this header (copied), writing to sink.
 * opts may be NULL for the defaults (STREAM_PROGRESS_INTERVAL,
 * STREAM_MAX_DATA).  -EINVAL if the header or options are not valid.
 */
int stream_enc_new (const struct stream_header *hdr,
                    const struct stream_enc_opts *opts,
                    stream_sink_fn sink, void *opaque,
                    struct stream_enc **encp) CAIRN_WUR;
void stream_enc_free (struct stream_enc *enc);

/* Start the stream: the magic and the HEADER. */
int stream_enc_begin (struct stream_enc *enc) CAIRN_WUR;
/* Start a resumed stream instead: the magic, the HEADER and a RESUME record
 * that continues the chain of the interrupted stream.  -ESTALE if the token
 * belongs to another stream.  Later records must start at or after
 * tok->next_offset.
 */
int stream_enc_resume (struct stream_enc *enc, const struct stream_token *tok)
  CAIRN_WUR;

/* Data at offset: one WRITE record per max_data bytes.  The range must
 * follow invariants 2 and 3 above (-EINVAL otherwise).  In a BLOCKSUMS
 * stream the encoder hashes each piece of the data itself.
 */
int stream_enc_write (struct stream_enc *enc, uint64_t offset,
                      const void *data, uint64_t len) CAIRN_WUR;
/* The same, with the data's piece digests from the caller: sums holds
 * stream_pieces (len) SHA-256s, of each STREAM_PIECE bytes of data from
 * its start (the engine's block digests, for a 4096-aligned range).  A
 * BLOCKSUMS stream's records are hashed over them and the data is not
 * hashed at all; a stream without the feature ignores them.  The encoder
 * cannot check them: wrong digests make a stream that fails verification
 * at that record.  -EINVAL if max_data would split a piece.
 */
int stream_enc_write_sums (struct stream_enc *enc, uint64_t offset,
                           const void *data, uint64_t len,
                           const uint8_t *sums) CAIRN_WUR;
/* Zeros (or a hole) at offset: one ZERO record. */
int stream_enc_zero (struct stream_enc *enc, uint64_t offset, uint64_t len)
  CAIRN_WUR;
/* A PROGRESS record: nothing below next_offset remains to be sent.  The
 * encoder also writes one by itself every progress_interval bytes.
 */
int stream_enc_progress (struct stream_enc *enc, uint64_t next_offset)
  CAIRN_WUR;
/* Finish the stream with its END record. */
int stream_enc_end (struct stream_enc *enc) CAIRN_WUR;

/* Bytes written to the sink so far. */
uint64_t stream_enc_bytes (const struct stream_enc *enc);
/* After stream_enc_end: the stream's digest (the END record's SHA-256). */
void stream_enc_digest (const struct stream_enc *enc,
                        uint8_t digest[STREAM_SHA_LEN]);

/* ------------------------------------------------------------ decoder */

enum stream_event_type {
  STREAM_EV_HEADER,
  STREAM_EV_WRITE,
  STREAM_EV_ZERO,
  STREAM_EV_PROGRESS,
  STREAM_EV_RESUME,
  STREAM_EV_END,
};

/* A verified record. */
struct stream_event {
  enum stream_event_type type;
  uint64_t pos;          /* stream byte offset of the record (this input) */
  uint64_t record;       /* its index in the stream (HEADER is 0) */
  const struct stream_header *header;  /* HEADER: valid while dec lives */
  uint64_t offset;       /* WRITE, ZERO: the range; PROGRESS, RESUME: */
  uint64_t length;       /*   next_offset in offset, length 0 */
  const void *data;      /* WRITE: the length bytes of data */
  const uint8_t *sums;   /* WRITE of a BLOCKSUMS stream: the SHA-256 of
                            each STREAM_PIECE bytes of data (checked),
                            valid as long as data; else NULL */
  uint8_t digest[STREAM_SHA_LEN];  /* END: the stream's digest */
};

struct stream_dec;

/* A new decoder: for a stream from its start (resume NULL), or for a
 * resumed stream that continues from a token (copied) this receiver gave
 * out.
 */
int stream_dec_new (const struct stream_token *resume,
                    struct stream_dec **decp) CAIRN_WUR;
void stream_dec_free (struct stream_dec *dec);

/* Decode from len bytes at buf, which continue the bytes given before (a
 * record may be split anywhere).  Sets *used to the bytes consumed and
 * returns 1 with one event in *ev, or 0 when all len bytes were consumed
 * without completing a record (feed more), or a negative errno.  Call
 * again with the rest of buf after an event.  An event's data may point
 * into buf or into the decoder; it is valid until the next call.
 *
 * After the END event the decoder consumes nothing more: bytes after it
 * are an error (-EBADMSG) if fed, so a caller whose connection continues
 * after the stream (DESIGN §4) stops feeding at END.
 */
int stream_dec_next (struct stream_dec *dec, const void *buf, size_t len,
                     size_t *used, struct stream_event *ev) CAIRN_WUR;
/* At the end of the input: 0 if the stream was complete (END verified),
 * else -EPIPE saying where it was cut, or the decoder's error.
 */
int stream_dec_finish (struct stream_dec *dec) CAIRN_WUR;

/* The resume token for everything verified so far: 0, or -ENOENT when no
 * HEADER was verified yet (start again from the beginning), -EINVAL when
 * the stream is complete.  Valid after an error too (invariant 5).
 */
int stream_dec_token (const struct stream_dec *dec, struct stream_token *tok)
  CAIRN_WUR;

/* Bytes of this input consumed so far. */
uint64_t stream_dec_pos (const struct stream_dec *dec);
/* The decoder's error message ("" if none). */
const char *stream_dec_error (const struct stream_dec *dec);
/* The stream byte offset of the record that failed, or -1 if none. */
int64_t stream_dec_error_pos (const struct stream_dec *dec);
/* True once the END record was verified. */
bool stream_dec_done (const struct stream_dec *dec);

#endif /* CAIRN_PROTO_STREAM_H */
