/* Cairn fuzz harness: what a client reads from a server
 * (tests/fuzz/README.md).
 *
 * The `cairn` CLI and replication jobs read a server's bytes through
 * proto/'s line splitter, reply parser and stream-mode frame reader.  The
 * first byte of the input picks how the rest is cut into feeds (bits
 * 0-3: 0 one feed, k pieces of 2^(k-1) bytes); the rest goes through
 * control_lines_feed and every line that comes out through
 * control_parse_reply; then the same bytes go through a frame reader.
 *
 * What must hold, beyond no crash, leak or undefined behaviour:
 *  1. the lines that come out are the input's lines, in order, none
 *     longer than the limit, and the splitter gives every byte back once
 *     (as a line or as what is pending);
 *  2. a parsed reply is one of the three kinds with the members of its
 *     kind (an error's message is a string, a notification's method too);
 *  3. the frame reader consumes every byte it is given until the end
 *     frame or an error, and never hands out more than its header said.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "rpc.h"

/* Small, so that overlong lines are cheap to reach. */
#define FUZZ_LINE_MAX 4096

/* Parse one line as a reply (invariant 2). */
static void
parse_line (const char *line, size_t len)
{
  struct control_reply rep;

  if (control_parse_reply (line, len, &rep) == 0) {
    switch (rep.kind) {
    case CONTROL_REPLY_RESULT:
      if (rep.id == NULL || rep.result == NULL)
        fuzz_die ("a result without id or result");
      break;
    case CONTROL_REPLY_ERROR:
      if (rep.id == NULL || rep.message == NULL)
        fuzz_die ("an error without id or message");
      (void) strlen (rep.message);
      if (rep.name)
        (void) strlen (rep.name);
      break;
    case CONTROL_REPLY_NOTIFICATION:
      if (rep.method == NULL)
        fuzz_die ("a notification without a method");
      (void) strlen (rep.method);
      break;
    default:
      fuzz_die ("a reply of kind %d", (int) rep.kind);
    }
  }
  control_reply_free (&rep);
}

/* Split into lines (invariant 1). */
static void
split (const uint8_t *s, size_t len, size_t chunk)
{
  struct control_lines l;
  size_t off = 0, seen = 0;
  bool dead = false;

  control_lines_init (&l, FUZZ_LINE_MAX);
  while (off < len && !dead) {
    size_t n = len - off < chunk ? len - off : chunk;
    char *line;
    size_t llen;
    int r = control_lines_feed (&l, s + off, n);

    if (r == -ENOMEM)
      fuzz_die ("out of memory");
    dead = r == -E2BIG;
    off += n;
    while ((r = control_lines_next (&l, &line, &llen)) == 1) {
      if (llen > FUZZ_LINE_MAX)
        fuzz_die ("a line of %zu bytes passed the limit", llen);
      if (seen + llen >= len || memcmp (line, s + seen, llen) != 0 ||
          s[seen + llen] != '\n' || line[llen] != '\0')
        fuzz_die ("line at byte %zu is not the input's", seen);
      seen += llen + 1;
      parse_line (line, llen);
    }
    if (r == -E2BIG)
      dead = true;
    else if (r != 0)
      fuzz_die ("control_lines_next: %d", r);
  }
  if (!dead && seen + control_lines_pending (&l) != len)
    fuzz_die ("the splitter returned %zu bytes and holds %zu of %zu", seen,
              control_lines_pending (&l), len);
  control_lines_free (&l);
}

/* Where a reader of the frames in s must stop, found the simplest way:
 * the byte after the header of the end frame (*end) or of the first frame
 * that is empty or larger than CONTROL_FRAME_MAX (*bad); SIZE_MAX when
 * there is none.
 */
static void
frames_expected (const uint8_t *s, size_t len, size_t *end, size_t *bad)
{
  size_t pos = 0;

  *end = *bad = SIZE_MAX;
  while (len - pos >= CONTROL_FRAME_HEADER) {
    uint32_t v = (uint32_t) s[pos] << 24 | (uint32_t) s[pos + 1] << 16 |
                 (uint32_t) s[pos + 2] << 8 | s[pos + 3];
    uint32_t size = v & ~CONTROL_FRAME_MESSAGE;

    pos += CONTROL_FRAME_HEADER;
    if (v == 0) {
      *end = pos;
      return;
    }
    if (size == 0 || size > CONTROL_FRAME_MAX) {
      *bad = pos;
      return;
    }
    if (size > len - pos)
      return;
    pos += size;
  }
}

/* Read frames (invariant 3): the reader stops where frames_expected says,
 * and its pieces are the input's bytes.
 */
static void
frames (const uint8_t *s, size_t len, size_t chunk)
{
  struct control_frames f = { 0 };
  size_t off = 0, end, bad;

  frames_expected (s, len, &end, &bad);
  while (off < len) {
    size_t n = len - off < chunk ? len - off : chunk;
    size_t pos = 0;

    while (pos < n) {
      const void *d = NULL;
      size_t used = 0, dlen = 0;
      bool last;
      int r = control_frames_next (&f, s + off + pos, n - pos, &used, &d,
                                   &dlen, &last);

      if (used > n - pos)
        fuzz_die ("the frame reader used more than it was given");
      if (r < 0 || r == CONTROL_FRAME_END) {
        size_t at = off + pos + used;

        if (r < 0 && at != bad)
          fuzz_die ("the frame reader failed at byte %zu, not %zu", at, bad);
        if (r == CONTROL_FRAME_END && at != end)
          fuzz_die ("the frame reader ended at byte %zu, not %zu", at, end);
        return;
      }
      if ((r == CONTROL_FRAME_DATA || r == CONTROL_FRAME_MSG) &&
          (dlen == 0 || dlen > used ||
           (const uint8_t *) d != s + off + pos + used - dlen))
        fuzz_die ("a frame piece of %zu bytes out of %zu used", dlen, used);
      if (used == 0)
        break;
      pos += used;
    }
    off += n;
  }
  if (bad != SIZE_MAX || end != SIZE_MAX)
    fuzz_die ("the frame reader read past byte %zu", bad < end ? bad : end);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  size_t chunk;

  if (size < 1)
    return 0;
  chunk = data[0] & 15 ? (size_t) 1 << ((data[0] & 15) - 1) : size;
  split (data + 1, size - 1, chunk);
  frames (data + 1, size - 1, chunk);
  return 0;
}
