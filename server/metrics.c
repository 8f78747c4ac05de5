/* Cairn server: the Prometheus metrics endpoint (metrics.h).
 *
 * HTTP is libmicrohttpd's: one daemon with its internal polling thread
 * (MHD_USE_AUTO_INTERNAL_THREAD: epoll on Linux) answers every request
 * on that thread, one at a time.  GET (or HEAD) /metrics gets the text
 * exposition format 0.0.4; another method gets 405 with "Allow: GET,
 * HEAD", another path 404.  The socket is ours (bound here, then handed
 * to the daemon), so that an address in use or not of this host fails
 * with the system's own words, and port 0 picks a free port.
 *
 * What a scrape reads, and the only locks it takes (never a tree lock,
 * never the control loop's, never one held across I/O):
 *
 *  - exports: vol_stats_peek (engine/volstats.c), a copy of the table of
 *    per-export counters and histograms under its mutex (which I/O never
 *    takes: handles count in their own per-CPU atomics, read here with
 *    relaxed loads), then names from the catalog's in-memory table of
 *    volumes under its table lock;
 *  - pool, space, cache, commits: pool_info, which copies a few fields
 *    under the commit lock (held for those copies by commits too, never
 *    across their I/O), the allocator's totals under its lock, and the
 *    node cache's per-CPU atomic counters;
 *  - devices: dev_chunk_member, atomic loads;
 *  - jobs: the control server's job registry copied under its mutex
 *    (control_server_jobs), the engine's reclaims under the reaper's
 *    state mutex (vol_reclaim_jobs, vol_reclaim_status);
 *  - damage: the count of damaged volume records, fixed once the catalog
 *    is loaded.
 *
 * Exports are labelled volume="NAME" and, for a snapshot or checkpoint,
 * state="SNAP" or state="#GEN" (vol_stats_peek says how names are found).
 * Exports deleted since are left out (their counters stop; Prometheus
 * sees a series end); two entries that would carry the same labels (a
 * snapshot deleted and made again under its name) are reported as one,
 * summed.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef HAVE_LIBMICROHTTPD
#include <microhttpd.h>
#endif

#include "metrics.h"
#include "sha256.h"
#include "volume.h"

/* ---------------------------------------------------------------- text */

/* Write s as a label value: backslash, double quote and newline escaped. */
static void
put_label (FILE *f, const char *s)
{
  for (; *s; s++) {
    if (*s == '\\' || *s == '"')
      fprintf (f, "\\%c", *s);
    else if (*s == '\n')
      fputs ("\\n", f);
    else
      fputc (*s, f);
  }
}

/* The HELP and TYPE lines of a metric. */
static void
family (FILE *f, const char *name, const char *type, const char *help)
{
  fprintf (f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample without labels. */
static void
sample (FILE *f, const char *name, uint64_t v)
{
  fprintf (f, "%s %" PRIu64 "\n", name, v);
}

/* Nanoseconds as seconds, exactly (no rounding through a double). */
static void
put_seconds (FILE *f, uint64_t ns)
{
  fprintf (f, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);
}

/* A bucket's bound in seconds, as short as it is exact ("0.00001", "2.5"). */
static void
put_bound (FILE *f, uint64_t ns)
{
  char frac[16];
  int len = snprintf (frac, sizeof frac, "%09" PRIu64, ns % 1000000000u);

  while (len > 0 && frac[len - 1] == '0')
    frac[--len] = '\0';
  fprintf (f, "%" PRIu64 "%s%s", ns / 1000000000u, len ? "." : "", frac);
}

/* The samples of histogram h: cumulative buckets, sum and count.  labels
 * is "" or 'key="value",' pairs with their trailing comma.
 */
static void
histogram (FILE *f, const char *name, const char *labels,
           const struct lat_hist *h)
{
  uint64_t cum = 0;

  for (unsigned i = 0; i < LAT_BUCKETS; i++) {
    cum += h->bucket[i];
    fprintf (f, "%s_bucket{%sle=\"", name, labels);
    if (i < LAT_BOUNDS)
      put_bound (f, lat_bounds_ns[i]);
    else
      fputs ("+Inf", f);
    fprintf (f, "\"} %" PRIu64 "\n", cum);
  }
  fprintf (f, "%s_sum", name);
  if (*labels)
    fprintf (f, "{%.*s}", (int) strlen (labels) - 1, labels);
  fputc (' ', f);
  put_seconds (f, h->sum_ns);
  fprintf (f, "\n%s_count", name);
  if (*labels)
    fprintf (f, "{%.*s}", (int) strlen (labels) - 1, labels);
  fprintf (f, " %" PRIu64 "\n", cum);
}

/* ---------------------------------------------------------------- exports */

/* The exports of a scrape, merged by name. */
struct exports {
  struct vol_export_stats *x;
  size_t n, cap;
};

/* vol_stats_peek callback: keep an export that still exists. */
static int
keep_export (void *opaque, const struct vol_export_stats *x)
{
  struct exports *e = opaque;

  if (x->gone)
    return 0;
  if (e->n == e->cap) {
    size_t cap = e->cap ? 2 * e->cap : 16;
    struct vol_export_stats *nx = realloc (e->x, cap * sizeof *nx);

    if (nx == NULL)
      return cairn_fail (-ENOMEM, "out of memory listing exports");
    e->x = nx;
    e->cap = cap;
  }
  e->x[e->n++] = *x;
  return 0;
}

/* Name order. */
static int
cmp_name (const void *a, const void *b)
{
  const struct vol_export_stats *x = a, *y = b;

  return strcmp (x->name, y->name);
}

/* Sum entries of one name into the first (sorted). */
static void
merge_names (struct exports *e)
{
  size_t k = 0;

  for (size_t i = 0; i < e->n; i++) {
    struct vol_export_stats *into = &e->x[k - (k > 0)];

    if (k > 0 && strcmp (into->name, e->x[i].name) == 0) {
      const uint64_t *from = (const uint64_t *) &e->x[i].st;
      uint64_t *to = (uint64_t *) &into->st;

      for (size_t w = 0; w < sizeof into->st / sizeof (uint64_t); w++)
        to[w] += from[w];
      for (unsigned op = 0; op < VOL_OPS; op++)
        lat_add (&into->lat.op[op], &e->x[i].lat.op[op]);
      into->opens += e->x[i].opens;
    }
    else
      e->x[k++] = e->x[i];
  }
  e->n = k;
}

/* Write the labels of export x into buf: 'volume="v",state="s",'. */
static void
export_labels (const struct vol_export_stats *x, char *buf, size_t len)
{
  FILE *f = fmemopen (buf, len, "w");

  if (f == NULL) {
    buf[0] = '\0';
    return;
  }
  fputs ("volume=\"", f);
  put_label (f, x->vol);
  fputs ("\",", f);
  if (x->state[0]) {
    fputs ("state=\"", f);
    put_label (f, x->state);
    fputs ("\",", f);
  }
  fclose (f);
}

static const char *const op_names[VOL_OPS] = {
  [VOL_OP_READ] = "read", [VOL_OP_WRITE] = "write", [VOL_OP_FLUSH] = "flush",
  [VOL_OP_TRIM] = "trim", [VOL_OP_ZERO] = "zero",
};

/* The counters of one kind of request, by op: requests and bytes. */
static uint64_t
op_requests (const struct vol_stats *st, unsigned op)
{
  switch (op) {
  case VOL_OP_READ: return st->reads;
  case VOL_OP_WRITE: return st->writes;
  case VOL_OP_FLUSH: return st->flushes;
  case VOL_OP_TRIM: return st->trims;
  default: return st->zeros;
  }
}

static uint64_t
op_bytes (const struct vol_stats *st, unsigned op)
{
  switch (op) {
  case VOL_OP_READ: return st->bytes_read;
  case VOL_OP_WRITE: return st->bytes_written;
  case VOL_OP_TRIM: return st->bytes_trimmed;
  case VOL_OP_ZERO: return st->bytes_zeroed;
  default: return 0;
  }
}

/* The exports' families. */
static int
render_exports (FILE *f, struct cairn_pool *pool)
{
  struct exports e = { NULL, 0, 0 };
  char (*labels)[2 * VOL_EXPORT_NAME_MAX + 32];
  int r = vol_stats_peek (pool, keep_export, &e);

  if (r < 0) {
    free (e.x);
    return r;
  }
  if (e.n > 1) {
    qsort (e.x, e.n, sizeof *e.x, cmp_name);
    merge_names (&e);
  }
  labels = calloc (e.n ? e.n : 1, sizeof *labels);
  if (labels == NULL) {
    free (e.x);
    return cairn_fail (-ENOMEM, "out of memory rendering metrics");
  }
  for (size_t i = 0; i < e.n; i++)
    export_labels (&e.x[i], labels[i], sizeof labels[i]);

  family (f, "cairn_export_requests_total", "counter",
          "NBD requests that succeeded, by export and kind.");
  for (size_t i = 0; i < e.n; i++) {
    for (unsigned op = 0; op < VOL_OPS; op++)
      fprintf (f, "cairn_export_requests_total{%sop=\"%s\"} %" PRIu64 "\n",
               labels[i], op_names[op], op_requests (&e.x[i].st, op));
    fprintf (f, "cairn_export_requests_total{%sop=\"cache\"} %" PRIu64 "\n",
             labels[i], e.x[i].st.caches);
    fprintf (f, "cairn_export_requests_total{%sop=\"block_status\"} %"
             PRIu64 "\n", labels[i], e.x[i].st.extents);
  }
  family (f, "cairn_export_bytes_total", "counter",
          "Bytes of the NBD requests that succeeded, by export and kind.");
  for (size_t i = 0; i < e.n; i++)
    for (unsigned op = 0; op < VOL_OPS; op++)
      if (op != VOL_OP_FLUSH)
        fprintf (f, "cairn_export_bytes_total{%sop=\"%s\"} %" PRIu64 "\n",
                 labels[i], op_names[op], op_bytes (&e.x[i].st, op));
  family (f, "cairn_export_errors_total", "counter",
          "NBD requests that failed, by export.");
  for (size_t i = 0; i < e.n; i++)
    fprintf (f, "cairn_export_errors_total{%.*s} %" PRIu64 "\n",
             (int) strlen (labels[i]) - 1, labels[i], e.x[i].st.errors);
  family (f, "cairn_export_checksum_errors_total", "counter",
          "Reads that failed because data did not match its checksum, "
          "by export.");
  for (size_t i = 0; i < e.n; i++)
    fprintf (f, "cairn_export_checksum_errors_total{%.*s} %" PRIu64 "\n",
             (int) strlen (labels[i]) - 1, labels[i], e.x[i].st.csum_errors);
  family (f, "cairn_export_connections", "gauge",
          "NBD connections open on the export now.");
  for (size_t i = 0; i < e.n; i++)
    fprintf (f, "cairn_export_connections{%.*s} %u\n",
             (int) strlen (labels[i]) - 1, labels[i], e.x[i].opens);
  family (f, "cairn_export_request_duration_seconds", "histogram",
          "Time the server took to serve NBD requests that succeeded, "
          "by export and kind.");
  for (size_t i = 0; i < e.n; i++)
    for (unsigned op = 0; op < VOL_OPS; op++) {
      char l[sizeof *labels + 16];

      snprintf (l, sizeof l, "%sop=\"%s\",", labels[i], op_names[op]);
      histogram (f, "cairn_export_request_duration_seconds", l,
                 &e.x[i].lat.op[op]);
    }
  free (labels);
  free (e.x);
  return 0;
}

/* ---------------------------------------------------------------- pool */

/* A family of one sample without labels. */
struct single {
  const char *name, *type, *help;
  uint64_t value;
};

/* Pool, space, cache and commit families. */
static void
render_pool (FILE *f, struct cairn_pool *pool)
{
  struct pool_info pi;
  const uint64_t bs = BLOCK_SIZE;

  pool_info (pool, &pi);
  const struct single singles[] = {
    { "cairn_pool_size_bytes", "gauge",
      "Size of the pool's devices as the engine addresses them.",
      pi.total_blocks * bs },
    { "cairn_pool_data_bytes", "gauge",
      "Bytes of the pool that hold data and metadata "
      "(size less superblocks and labels).",
      pi.space.total * bs },
    { "cairn_pool_used_bytes", "gauge",
      "Bytes allocated to data and metadata.",
      pi.space.allocated * bs },
    { "cairn_pool_free_bytes", "gauge",
      "Bytes allocatable now (the reserve included).",
      pi.space.free * bs },
    { "cairn_pool_pending_free_bytes", "gauge",
      "Bytes freed, allocatable once their generation is durable.",
      pi.space.pending * bs },
    { "cairn_pool_reserved_bytes", "gauge",
      "Free bytes kept back so that deletes and commits succeed on a "
      "full pool.",
      pi.space.reserve * bs },
    { "cairn_pool_high_water_bytes", "gauge",
      "Bytes from the start of the data area to the end of the highest "
      "block ever allocated since the pool opened.",
      pi.space.touched * bs },
    { "cairn_pool_generation", "gauge",
      "The newest durable generation.",
      pi.generation },
    { "cairn_pool_failed", "gauge",
      "1 when the pool latched failed (writes refused until reopened).",
      pi.failed },
    { "cairn_pool_readonly", "gauge",
      "1 when the pool is served read-only.",
      pi.readonly },
    { "cairn_cache_hits_total", "counter",
      "Metadata node lookups found in the node cache.",
      pi.cache.hits },
    { "cairn_cache_misses_total", "counter",
      "Metadata node lookups that read from the disk.",
      pi.cache.misses },
    { "cairn_cache_evictions_total", "counter",
      "Nodes evicted from the node cache.",
      pi.cache.evictions },
    { "cairn_cache_bytes", "gauge",
      "Bytes of metadata nodes resident in the node cache.",
      pi.cache.bytes },
    { "cairn_cache_nodes", "gauge",
      "Nodes resident in the node cache.",
      pi.cache.nodes },
    { "cairn_cache_dirty_nodes", "gauge",
      "Nodes changed and not yet committed.",
      pi.cache.dirty_nodes },
    { "cairn_metadata_checksum_errors_total", "counter",
      "Metadata nodes read whose checksum did not match.",
      pi.cache.csum_errors },
    { "cairn_metadata_corrupt_total", "counter",
      "Metadata nodes read that failed validation.",
      pi.cache.corrupt },
    { "cairn_commits_total", "counter",
      "Commits that made a generation durable.",
      pi.commits },
  };

  for (size_t i = 0; i < ARRAY_SIZE (singles); i++) {
    family (f, singles[i].name, singles[i].type, singles[i].help);
    sample (f, singles[i].name, singles[i].value);
  }
  family (f, "cairn_commit_duration_seconds", "histogram",
          "Time from a commit's freeze to its durable superblock.");
  histogram (f, "cairn_commit_duration_seconds", "", &pi.commit_time);
}

/* Devices of a pool of several (dev-chunk.c); nothing for one device. */
static void
render_devices (FILE *f, struct cairn_pool *pool)
{
  static const struct {
    const char *name, *help;
    size_t off;
  } counters[] = {
    { "cairn_device_read_errors_total", "Reads that failed on the device.",
      offsetof (struct dev_member_info, read_errors) },
    { "cairn_device_write_errors_total", "Writes that failed on the device.",
      offsetof (struct dev_member_info, write_errors) },
    { "cairn_device_checksum_errors_total",
      "Blocks read from the device that did not match their checksum.",
      offsetof (struct dev_member_info, cksum_errors) },
    { "cairn_device_repaired_total",
      "Blocks rewritten on the device from a good copy.",
      offsetof (struct dev_member_info, repaired) },
    { "cairn_device_size_bytes", "Size of the device as labelled.",
      offsetof (struct dev_member_info, size) },
    { "cairn_device_used_bytes", "Bytes of the device that chunks take.",
      offsetof (struct dev_member_info, used) },
  };
  struct cairn_dev *dev = pool_dev (pool);
  struct dev_chunk_info ci;
  struct dev_member_info mi[DEV_CHUNK_MAX_MEMBERS];

  if (!dev_is_chunked (dev))
    return;
  dev_chunk_info (dev, &ci);
  for (unsigned i = 0; i < ci.nmembers && i < DEV_CHUNK_MAX_MEMBERS; i++)
    dev_chunk_member (dev, i, &mi[i]);
  family (f, "cairn_device_online", "gauge",
          "1 when the device of the pool is present, 0 when missing.");
  for (unsigned i = 0; i < ci.nmembers && i < DEV_CHUNK_MAX_MEMBERS; i++) {
    char uuid[37];

    uuid_format (mi[i].uuid, uuid);
    fprintf (f, "cairn_device_online{device=\"%u\",uuid=\"%s\",path=\"",
             i, uuid);
    put_label (f, mi[i].name);
    fprintf (f, "\"} %d\n", mi[i].name[0] != '\0');
  }
  for (size_t c = 0; c < ARRAY_SIZE (counters); c++) {
    bool total = strstr (counters[c].name, "_total") != NULL;

    family (f, counters[c].name, total ? "counter" : "gauge",
            counters[c].help);
    for (unsigned i = 0; i < ci.nmembers && i < DEV_CHUNK_MAX_MEMBERS; i++)
      fprintf (f, "%s{device=\"%u\"} %" PRIu64 "\n", counters[c].name, i,
               *(const uint64_t *) ((const char *) &mi[i] + counters[c].off));
  }
  family (f, "cairn_pool_degraded", "gauge",
          "1 when a device of the pool is missing.");
  sample (f, "cairn_pool_degraded", ci.degraded);
}

/* ---------------------------------------------------------------- jobs */

/* Write the gauges of jobs (done and total bytes) with their labels. */
static void
render_job_list (FILE *f, const char *name, bool total,
                 const struct control_bg_job *jobs, size_t n, bool bg)
{
  for (size_t i = 0; i < n; i++) {
    fprintf (f, "%s{job=\"%s%" PRIu64 "\",method=\"", name,
             bg ? "bg-" : "", jobs[i].key);
    put_label (f, jobs[i].method);
    fputs ("\",what=\"", f);
    put_label (f, jobs[i].what);
    fprintf (f, "\"} %" PRIu64 "\n", total ? jobs[i].total : jobs[i].done);
  }
}

/* Jobs, reclaim and damage families. */
static int
render_jobs (FILE *f, const struct metrics_source *src)
{
  struct control_bg_job *req = NULL, *bg = NULL;
  size_t nreq = 0, nbg = 0;
  struct vol_reclaim_info ri;
  uint64_t damaged;
  int r = 0;

  if (src->control)
    r = control_server_jobs (src->control, &req, &nreq);
  if (r == 0 && src->background_jobs)
    r = src->background_jobs (src->opaque, &bg, &nbg);
  if (r == 0)
    r = vol_reclaim_status (src->pool, &ri);
  if (r == 0)
    r = vol_damaged_volumes (src->pool, &damaged);
  if (r == 0) {
    family (f, "cairn_job_done_bytes", "gauge",
            "Bytes a running job (send, receive, replicate, reclaim) has "
            "done.");
    render_job_list (f, "cairn_job_done_bytes", false, req, nreq, false);
    render_job_list (f, "cairn_job_done_bytes", false, bg, nbg, true);
    family (f, "cairn_job_total_bytes", "gauge",
            "Bytes a running job has to do in all (0: not known).");
    render_job_list (f, "cairn_job_total_bytes", true, req, nreq, false);
    render_job_list (f, "cairn_job_total_bytes", true, bg, nbg, true);
    family (f, "cairn_reclaim_freed_bytes_total", "counter",
            "Bytes deleted volumes and snapshots gave back since the pool "
            "opened.");
    sample (f, "cairn_reclaim_freed_bytes_total", ri.freed_bytes);
    family (f, "cairn_reclaim_pending", "gauge",
            "Deleted volumes and snapshots whose space is still being "
            "reclaimed.");
    fprintf (f, "cairn_reclaim_pending{kind=\"volume\"} %" PRIu64 "\n"
             "cairn_reclaim_pending{kind=\"snapshot\"} %" PRIu64 "\n",
             ri.volumes, ri.ranges);
    family (f, "cairn_damaged_volume_records", "gauge",
            "Volume records that do not decode (cairn status names them).");
    sample (f, "cairn_damaged_volume_records", damaged);
  }
  free (req);
  free (bg);
  return r;
}

/* ---------------------------------------------------------------- render */

int
metrics_render (const struct metrics_source *src, char **text, size_t *len)
{
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream (&buf, &size);
  int r;

  if (f == NULL)
    return cairn_fail (-errno, "metrics: open_memstream: %s",
                       strerror (errno));
  family (f, "cairn_build_info", "gauge",
          "Always 1: the version and features of this server.");
  fprintf (f, "cairn_build_info{version=\"%s\",checksum=\"sha256\","
           "checksum_impl=\"%s\"} 1\n", PACKAGE_VERSION, sha256_blocks_impl ());
  render_pool (f, src->pool);
  render_devices (f, src->pool);
  r = render_jobs (f, src);
  if (r == 0)
    r = render_exports (f, src->pool);
  if (fclose (f) != 0 && r == 0)
    r = cairn_fail (-ENOMEM, "metrics: out of memory");
  if (r < 0) {
    free (buf);
    return r;
  }
  *text = buf;
  *len = size;
  return 0;
}

/* ---------------------------------------------------------------- HTTP */

#ifdef HAVE_LIBMICROHTTPD

struct metrics_server {
  struct MHD_Daemon *daemon;
  struct metrics_source src;
  unsigned port;
};

bool
metrics_supported (void)
{
  return true;
}

/* Queue a plain text reply of status code with body text (copied). */
static enum MHD_Result
reply (struct MHD_Connection *c, unsigned code, const char *text,
       const char *allow)
{
  struct MHD_Response *resp =
    MHD_create_response_from_buffer (strlen (text), (void *) text,
                                     MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret;

  if (resp == NULL)
    return MHD_NO;
  MHD_add_response_header (resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                           "text/plain; charset=utf-8");
  if (allow)
    MHD_add_response_header (resp, MHD_HTTP_HEADER_ALLOW, allow);
  ret = MHD_queue_response (c, code, resp);
  MHD_destroy_response (resp);
  return ret;
}

/* Answer one request (libmicrohttpd's thread). */
static enum MHD_Result
handle (void *cls, struct MHD_Connection *c, const char *url,
        const char *method, const char *version, const char *upload_data,
        size_t *upload_data_size, void **req_cls)
{
  struct metrics_server *ms = cls;
  struct MHD_Response *resp;
  enum MHD_Result ret;
  char *text, msg[640];
  size_t len;

  if (strcmp (method, MHD_HTTP_METHOD_GET) != 0 &&
      strcmp (method, MHD_HTTP_METHOD_HEAD) != 0)
    return reply (c, MHD_HTTP_METHOD_NOT_ALLOWED,
                  "method not allowed: the metrics endpoint answers GET "
                  "/metrics\n", "GET, HEAD");
  if (strcmp (url, "/metrics") != 0)
    return reply (c, MHD_HTTP_NOT_FOUND,
                  "not found: the metrics are at /metrics\n", NULL);
  cairn_error_clear ();
  if (metrics_render (&ms->src, &text, &len) < 0) {
    snprintf (msg, sizeof msg, "cannot collect the metrics: %s\n",
              cairn_errmsg ());
    return reply (c, MHD_HTTP_INTERNAL_SERVER_ERROR, msg, NULL);
  }
  resp = MHD_create_response_from_buffer (len, text, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    free (text);
    return MHD_NO;
  }
  MHD_add_response_header (resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                           "text/plain; version=0.0.4; charset=utf-8");
  ret = MHD_queue_response (c, MHD_HTTP_OK, resp);
  MHD_destroy_response (resp);
  return ret;
}

/* A socket listening on address:port, or -1 with a message. */
static int
listen_on (const char *address, unsigned port, unsigned *bound, bool *v6)
{
  struct addrinfo hints = {
    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
    .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
  };
  struct addrinfo *ai;
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char service[8];
  int fd, one = 1, e;

  snprintf (service, sizeof service, "%u", port);
  e = getaddrinfo (address, service, &hints, &ai);
  if (e != 0)
    return cairn_fail (-EINVAL, "metrics: the address '%s' is not one this "
                       "host can listen on: %s", address, gai_strerror (e));
  fd = socket (ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    e = errno;
    freeaddrinfo (ai);
    return cairn_fail (-e, "metrics: socket: %s", strerror (e));
  }
  setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind (fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen (fd, 32) < 0 ||
      getsockname (fd, (struct sockaddr *) &ss, &sl) < 0) {
    e = errno;
    close (fd);
    freeaddrinfo (ai);
    return cairn_fail (-e, "metrics: cannot listen on %s port %u: %s%s",
                       address, port, strerror (e),
                       e == EADDRINUSE ? " (another server has it: give "
                       "another port)" : "");
  }
  *v6 = ai->ai_family == AF_INET6;
  freeaddrinfo (ai);
  *bound = ntohs (ss.ss_family == AF_INET6 ?
                  ((struct sockaddr_in6 *) &ss)->sin6_port :
                  ((struct sockaddr_in *) &ss)->sin_port);
  return fd;
}

/* libmicrohttpd's own messages go nowhere: every failure it can meet
 * here is answered to the client or reported by metrics_start.
 */
static void
mhd_log (void *cls, const char *fmt, va_list ap)
{
  (void) cls, (void) fmt, (void) ap;
}

int
metrics_start (const char *address, unsigned port,
               const struct metrics_source *src, struct metrics_server **out)
{
  struct metrics_server *ms = calloc (1, sizeof *ms);
  bool v6 = false;
  int fd;

  if (ms == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  ms->src = *src;
  fd = listen_on (address, port, &ms->port, &v6);
  if (fd < 0) {
    free (ms);
    return fd;
  }
  /* One connection at a time is plenty for a scraper; a few more let a
   * person's curl in beside it.  The timeout drops idle keep-alives.
   */
  ms->daemon = MHD_start_daemon (MHD_USE_AUTO_INTERNAL_THREAD |
                                 MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0),
                                 0, NULL, NULL, handle, ms,
                                 MHD_OPTION_LISTEN_SOCKET, fd,
                                 MHD_OPTION_CONNECTION_LIMIT, 16u,
                                 MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, ms,
                                 MHD_OPTION_END);
  if (ms->daemon == NULL) {
    close (fd);
    free (ms);
    return cairn_fail (-EIO, "metrics: libmicrohttpd could not start its "
                       "server on %s port %u", address, port);
  }
  *out = ms;
  return 0;
}

unsigned
metrics_port (const struct metrics_server *ms)
{
  return ms->port;
}

void
metrics_stop (struct metrics_server *ms)
{
  if (ms == NULL)
    return;
  MHD_stop_daemon (ms->daemon);
  free (ms);
}

#else /* !HAVE_LIBMICROHTTPD */

struct metrics_server {
  unsigned port;
};

bool
metrics_supported (void)
{
  return false;
}

int
metrics_start (const char *address, unsigned port,
               const struct metrics_source *src, struct metrics_server **out)
{
  (void) address, (void) port, (void) src, (void) out;
  return cairn_fail (-ENOTSUP, "built without metrics support: configure "
                     "found no libmicrohttpd (install the Debian package "
                     "'libmicrohttpd-dev' and build again)");
}

unsigned
metrics_port (const struct metrics_server *ms)
{
  return ms->port;
}

void
metrics_stop (struct metrics_server *ms)
{
  (void) ms;
}

#endif /* HAVE_LIBMICROHTTPD */
