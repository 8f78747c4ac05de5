/* Cairn engine: the buckets of latency histograms (latency.h). */
#include <config.h>

#include <time.h>

#include "latency.h"

const uint64_t lat_bounds_ns[LAT_BOUNDS] = LAT_BOUNDS_NS;

uint64_t
lat_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}
