/* Cairn base: sizes in human units, for options and for output.
 *
 * Units are powers of 1024, written as one letter: K, M, G, T, P, E
 * (lower case accepted, an optional "iB" or "B" after it too: 64M, 64m,
 * 64MiB).  A number without a unit is bytes.  Output uses the same letters
 * with at most one decimal ("1.5G", "64M", "512K", "100B"), and parsing
 * accepts what output prints.
 */
#ifndef CAIRN_UNITS_H
#define CAIRN_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* Room for what units_format writes, with its NUL ("1023.9E"; sized for
 * any uint64_t so that the compiler can prove nothing is truncated).
 */
#define UNITS_FORMAT_MAX 24

/* Parse a size such as "64M", "1.5G" or "4096" into bytes.  Returns 0, or
 * -EINVAL (not a size, or not a whole number of bytes) or -ERANGE (more than
 * 2^64 - 1 bytes), with a message naming the string (cairn_errmsg).
 */
int units_parse_size (const char *s, uint64_t *bytesp) CAIRN_WUR;

/* Format bytes in the largest unit that keeps the number at least 1, with
 * one decimal when it is not whole ("1.5G"; "16K"; "100B").  Rounds to the
 * nearest tenth.  Returns buf.
 */
const char *units_format (uint64_t bytes, char buf[UNITS_FORMAT_MAX]);

#endif /* CAIRN_UNITS_H */
