/* Cairn base: sizes in human units (see units.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "units.h"

static const char unit_letters[] = "BKMGTPE";
#define UNIT_MAX 6                /* E: 2^60 */
#define DECIMALS_MAX 6

/* The unit for letter c (either case): its power of 1024, or -1. */
static int
unit_power (char c)
{
  if (c >= 'a' && c <= 'z')
    c = (char) (c - 'a' + 'A');
  for (int i = 1; i <= UNIT_MAX; i++)
    if (unit_letters[i] == c)
      return i;
  return -1;
}

/* Parse a size in bytes. */
int
units_parse_size (const char *s, uint64_t *bytesp)
{
  const char *p = s;
  uint64_t whole = 0, frac = 0, scale = 1, mult = 1, bytes;
  unsigned ndecimals = 0;
  int power = 0;

  if (*p < '0' || *p > '9')
    goto invalid;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (whole > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
      goto range;
    whole = whole * 10 + (uint64_t) (*p - '0');
  }
  if (*p == '.') {
    p++;
    if (*p < '0' || *p > '9')
      goto invalid;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (++ndecimals > DECIMALS_MAX)
        return cairn_fail (-EINVAL, "invalid size '%s': at most %d decimals",
                           s, DECIMALS_MAX);
      frac = frac * 10 + (uint64_t) (*p - '0');
      scale *= 10;
    }
  }
  if (*p != '\0' && *p != 'B' && *p != 'b') {
    power = unit_power (*p);
    if (power < 0)
      goto invalid;
    p++;
    if (*p == 'i' && (p[1] == 'B' || p[1] == 'b'))
      p++;
  }
  if (*p == 'B' || *p == 'b')
    p++;
  if (*p != '\0')
    goto invalid;

  mult = 1ull << (10 * power);
  if (whole > UINT64_MAX / mult)
    goto range;
  bytes = whole * mult;
  if (frac) {
    /* frac / scale * mult, exactly: mult = q * scale + r, so the product is
     * frac * q plus frac * r / scale, which must leave no remainder.  Every
     * intermediate fits: frac and r are below scale <= 10^6.
     */
    uint64_t q = mult / scale, r = mult % scale;

    if ((frac * r) % scale != 0)
      return cairn_fail (-EINVAL, "invalid size '%s': not a whole number of "
                         "bytes", s);
    if (bytes > UINT64_MAX - (frac * q + frac * r / scale))
      goto range;
    bytes += frac * q + frac * r / scale;
  }
  *bytesp = bytes;
  return 0;

 invalid:
  return cairn_fail (-EINVAL, "invalid size '%s': use a number with an "
                     "optional unit K, M, G, T, P or E (powers of 1024), "
                     "e.g. 512K, 64M or 1.5G", s);
 range:
  return cairn_fail (-ERANGE, "invalid size '%s': too large", s);
}

/* Format bytes in human units. */
const char *
units_format (uint64_t bytes, char buf[UNITS_FORMAT_MAX])
{
  if (bytes < 1024) {
    snprintf (buf, UNITS_FORMAT_MAX, "%" PRIu64 "B", bytes);
    return buf;
  }
  for (int power = 1; power <= UNIT_MAX; power++) {
    uint64_t mult = 1ull << (10 * power);
    uint64_t whole = bytes / mult, rem = bytes % mult;
    /* rem * 10 + mult / 2 < 10.5 * 2^60 < 2^64: no overflow. */
    unsigned tenths = (unsigned) ((rem * 10 + mult / 2) / mult);

    if (tenths == 10) {
      whole++;
      tenths = 0;
    }
    if (whole >= 1024 && power < UNIT_MAX)
      continue;           /* rounds to 1024 or more of this unit */
    if (tenths)
      snprintf (buf, UNITS_FORMAT_MAX, "%" PRIu64 ".%c%c", whole,
                (char) ('0' + tenths), unit_letters[power]);
    else
      snprintf (buf, UNITS_FORMAT_MAX, "%" PRIu64 "%c", whole,
                unit_letters[power]);
    break;
  }
  return buf;
}
