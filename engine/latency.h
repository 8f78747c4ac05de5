/* Cairn engine: latency histograms with a fixed set of buckets.
 *
 * The I/O path and the commit record how long each request or commit took
 * into a struct lat_hist: one relaxed atomic add to its bucket and one to
 * the sum, no lock (the caller shards them as it shards its counters,
 * util.h).  The buckets are fixed, so histograms add up bucket by bucket
 * (handles into their export, shards into a handle) and Prometheus can
 * aggregate them across servers: their upper bounds are the 1-2.5-5
 * series from 10 us to 10 s, then +Inf (LAT_BOUNDS_NS lists them;
 * nbdkit-cairn-plugin(1) documents them).  A bucket counts the
 * observations above the previous bound and at or below its own: it is
 * not cumulative; an exposition adds them up.
 */
#ifndef CAIRN_LATENCY_H
#define CAIRN_LATENCY_H

#include <stdint.h>

/* Finite upper bounds, nanoseconds; one more bucket is +Inf. */
#define LAT_BOUNDS 19u
#define LAT_BUCKETS (LAT_BOUNDS + 1u)
#define LAT_BOUNDS_NS {                                                  \
    10000, 25000, 50000, 100000, 250000, 500000,                         \
    1000000, 2500000, 5000000, 10000000, 25000000, 50000000,             \
    100000000, 250000000, 500000000,                                     \
    1000000000, 2500000000, 5000000000, 10000000000 }

extern const uint64_t lat_bounds_ns[LAT_BOUNDS];

/* A histogram: uint64_t counters only (COUNTERS_SUM sums its shards). */
struct lat_hist {
  uint64_t bucket[LAT_BUCKETS];   /* observations in this bucket alone */
  uint64_t sum_ns;                /* of every observation */
};

/* The bucket of an observation of ns nanoseconds. */
static inline unsigned
lat_bucket (uint64_t ns)
{
  unsigned i = 0;

  while (i < LAT_BOUNDS && ns > lat_bounds_ns[i])
    i++;
  return i;
}

/* Record one observation of ns nanoseconds (other threads may record into
 * h at the same time).
 */
static inline void
lat_record (struct lat_hist *h, uint64_t ns)
{
  __atomic_add_fetch (&h->bucket[lat_bucket (ns)], 1, __ATOMIC_RELAXED);
  __atomic_add_fetch (&h->sum_ns, ns, __ATOMIC_RELAXED);
}

/* Add every bucket and the sum of b into a (a is the caller's alone). */
static inline void
lat_add (struct lat_hist *a, const struct lat_hist *b)
{
  for (unsigned i = 0; i < LAT_BUCKETS; i++)
    a->bucket[i] += b->bucket[i];
  a->sum_ns += b->sum_ns;
}

/* The number of observations. */
static inline uint64_t
lat_count (const struct lat_hist *h)
{
  uint64_t n = 0;

  for (unsigned i = 0; i < LAT_BUCKETS; i++)
    n += h->bucket[i];
  return n;
}

/* Nanoseconds on the monotonic clock, for timing. */
uint64_t lat_now_ns (void);

#endif /* CAIRN_LATENCY_H */
