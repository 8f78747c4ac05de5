/* What the small engine benchmarks (bench-snapshots, bench-checkpoints)
 * share: a monotonic clock, the way they fail, and a fake pool clock
 * (pool_set_clock) that they move themselves.
 */
#ifndef CAIRN_BENCH_UTIL_H
#define CAIRN_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

/* 2026-12-07T00:00:00Z: where the fake clock starts. */
#define BENCH_T0 1796601600

/* Seconds on the monotonic clock. */
static inline double
bench_now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The calling thread's CPU time (s): what a step costs when the machine
 * is too busy for its wall time to mean much.
 */
static inline double
bench_cpu (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Report what failed, with the engine's message, and exit. */
static inline void __attribute__ ((noreturn))
bench_die (const char *prog, const char *what)
{
  fprintf (stderr, "%s: %s: %s\n", prog, what, cairn_errmsg ());
  exit (1);
}

/* A fake clock for pool_set_clock: opaque points at its int64_t seconds. */
static inline int64_t
bench_fake_clock (void *opaque)
{
  return *(int64_t *) opaque;
}

#endif /* CAIRN_BENCH_UTIL_H */
