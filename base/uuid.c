/* Cairn base: UUIDs, for pools and their devices (see util.h). */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <sys/random.h>

#include "util.h"

/* Format a UUID in the usual 8-4-4-4-12 form. */
void
uuid_format (const uint8_t u[16], char out[37])
{
  snprintf (out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
            "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
            u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* A random (version 4) UUID. */
int
uuid_generate (uint8_t u[16])
{
  if (getrandom (u, 16, 0) != 16)
    return cairn_fail (-errno, "getrandom: %m");
  u[6] = (uint8_t) ((u[6] & 0x0f) | 0x40);
  u[8] = (uint8_t) ((u[8] & 0x3f) | 0x80);
  return 0;
}
