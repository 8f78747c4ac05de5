/* Cairn send streams: what stream.c shares with the encoder (stream-enc.c)
 * and the decoder (stream-dec.c); private to proto/.
 *
 * The "problem" checks fill msg (n bytes) with what is wrong and return a
 * negative errno, or return 0.  Both sides use the same checks, so that the
 * encoder cannot write a stream the decoder refuses.
 */
#ifndef CAIRN_PROTO_STREAM_INT_H
#define CAIRN_PROTO_STREAM_INT_H

#include <stddef.h>
#include <stdint.h>

#include "stream.h"

/* Check a WRITE or ZERO range at off for len bytes, given that the stream
 * covered everything before next (invariants 2 and 3): 0 or -EINVAL.
 */
int range_problem (const struct stream_header *h, uint64_t next, uint64_t off,
                   uint64_t len, char *msg, size_t n) CAIRN_WUR;
/* Check a PROGRESS or RESUME next offset after cur: 0 or -EINVAL. */
int next_problem (const struct stream_header *h, uint64_t cur, uint64_t next,
                  char *msg, size_t n) CAIRN_WUR;
/* Is the token t for the stream with header h, whose HEADER record hashes
 * to digest?  0, -ESTALE or -EINVAL.
 */
int token_problem (const struct stream_token *t, const struct stream_header *h,
                   const uint8_t *digest, char *msg, size_t n) CAIRN_WUR;

/* Encode a checked header's body into b (STREAM_HEADER_MAX_BODY bytes);
 * returns its length.
 */
size_t header_encode (const struct stream_header *h, uint8_t *b);
/* Decode and check a HEADER body of len bytes whose version is known to be
 * 1: 0, -EBADMSG or -ENOTSUP.
 */
int header_decode (const uint8_t *b, size_t len, struct stream_header *h,
                   char *msg, size_t n) CAIRN_WUR;
/* Put a record's framing (STREAM_FRAME_LEN bytes) into f. */
void frame_encode (uint8_t *f, unsigned type, uint32_t body_len);

#endif /* CAIRN_PROTO_STREAM_INT_H */
