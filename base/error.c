/* Cairn base: the per-thread error message buffer (see util.h). */
#include <config.h>

#include <stdio.h>

#include "util.h"

static __thread char errbuf[1024];

/* Format a message into this thread's error buffer. */
void
cairn_verror (const char *fmt, va_list ap)
{
  vsnprintf (errbuf, sizeof errbuf, fmt, ap);
}

/* Set this thread's error message. */
void
cairn_error (const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  cairn_verror (fmt, ap);
  va_end (ap);
}

/* Set this thread's error message and return err (a negative errno). */
int
cairn_fail (int err, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  cairn_verror (fmt, ap);
  va_end (ap);
  return err;
}

/* Return this thread's last error message. */
const char *
cairn_errmsg (void)
{
  return errbuf;
}

/* Clear this thread's error message. */
void
cairn_error_clear (void)
{
  errbuf[0] = '\0';
}
