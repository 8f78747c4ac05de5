/* Unit tests of the metrics endpoint's pieces (server/metrics.c) that need
 * no nbdkit: the [ADDR:]PORT parser, the exposition of an in-memory pool
 * whose volume did known I/O (exact samples, cumulative buckets, label
 * escaping), and starting the server: on a free port, refused on a port
 * in use and on an address that is none, or, in a build without
 * libmicrohttpd (./configure --without-libmicrohttpd), refused with
 * "built without metrics support".  test-metrics.sh scrapes a real server.
 */
#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "control.h"
#include "metrics.h"
#include "test-pool.h"

Test (metrics, parse_listen)
{
  static const char *const bad[] = {
    "", "abc", "70000", "127.0.0.1:", ":9100", "127.0.0.1:-1", "1.2.3.4:x",
    "[::1]:", "9100 ",
  };
  char *addr = NULL;
  unsigned port = 1;

  cr_assert_eq (listen_parse ("metrics", "9100", &addr, &port), 0);
  cr_assert_str_eq (addr, "127.0.0.1");
  cr_assert_eq (port, 9100);
  free (addr);
  cr_assert_eq (listen_parse ("metrics", "0.0.0.0:0", &addr, &port), 0);
  cr_assert_str_eq (addr, "0.0.0.0");
  cr_assert_eq (port, 0);
  free (addr);
  cr_assert_eq (listen_parse ("metrics", "[::1]:65535", &addr, &port), 0);
  cr_assert_str_eq (addr, "::1");
  cr_assert_eq (port, 65535);
  free (addr);
  for (size_t i = 0; i < ARRAY_SIZE (bad); i++) {
    addr = NULL;
    cr_assert_eq (listen_parse ("metrics", bad[i], &addr, &port),
                  -EINVAL, "'%s' was taken", bad[i]);
    cr_assert_null (addr);
    cr_assert (strstr (cairn_errmsg (), "give [ADDRESS:]PORT") != NULL,
               "%s", cairn_errmsg ());
  }
}

/* A background job whose description needs escaping in a label. */
static int
odd_job (void *opaque, struct control_bg_job **jobs, size_t *n)
{
  struct control_bg_job *j = calloc (1, sizeof *j);

  cr_assert_not_null (j);
  j->key = 7;
  snprintf (j->method, sizeof j->method, "reclaim");
  snprintf (j->what, sizeof j->what, "a \"quoted\\\" name\nnext");
  j->done = 4096;
  j->total = 8192;
  *jobs = j;
  *n = 1;
  return 0;
}

/* Whether line (a whole line) is in text. */
static bool
has_line (const char *text, const char *line)
{
  size_t len = strlen (line);

  for (const char *p = text; (p = strstr (p, line)) != NULL; p++)
    if ((p == text || p[-1] == '\n') && p[len] == '\n')
      return true;
  return false;
}

Test (metrics, render)
{
  struct cairn_dev *dev = mem_pool (64 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct metrics_source src = { .pool = pool, .background_jobs = odd_job };
  struct cairn_volume *v;
  char *text, buf[8192];
  size_t len;

  memset (buf, 0x5a, sizeof buf);
  cr_assert_eq (vol_create (pool, "db", 1 << 20, NULL), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_open (pool, "db", &v), 0, "%s", cairn_errmsg ());
  cr_assert_eq (vol_stats_track (v, "db"), 0);
  /* Three writes and a read, timed at 20 us, 20 us, 3 ms and 11 s. */
  for (int i = 0; i < 3; i++)
    cr_assert_eq (vol_pwrite (v, buf, 4096, (uint64_t) i * 4096, 0), 0);
  vol_stats_time (v, VOL_OP_WRITE, 20000);
  vol_stats_time (v, VOL_OP_WRITE, 20000);
  vol_stats_time (v, VOL_OP_WRITE, 3000000);
  cr_assert_eq (vol_pread (v, buf, 8192, 0), 0);
  vol_stats_time (v, VOL_OP_READ, 11000000000u);
  cr_assert_eq (vol_zero (v, 4096, 65536, 0), 0);
  cr_assert_eq (vol_flush (v), 0);

  cr_assert_eq (metrics_render (&src, &text, &len), 0, "%s", cairn_errmsg ());
  cr_assert_eq (strlen (text), len);
  cr_assert (has_line (text, "# TYPE cairn_export_requests_total counter"));
  cr_assert (has_line (text, "cairn_export_requests_total{volume=\"db\",op=\"write\"} 3"), "%s", text);
  cr_assert (has_line (text, "cairn_export_bytes_total{volume=\"db\",op=\"write\"} 12288"));
  cr_assert (has_line (text, "cairn_export_bytes_total{volume=\"db\",op=\"read\"} 8192"));
  cr_assert (has_line (text, "cairn_export_bytes_total{volume=\"db\",op=\"zero\"} 4096"));
  cr_assert (has_line (text, "cairn_export_connections{volume=\"db\"} 1"));
  /* Cumulative buckets; the sum exact, in seconds. */
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"write\",le=\"0.00001\"} 0"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"write\",le=\"0.000025\"} 2"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"write\",le=\"0.0025\"} 2"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"write\",le=\"0.005\"} 3"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"write\",le=\"+Inf\"} 3"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_sum{volume=\"db\",op=\"write\"} 0.003040000"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_count{volume=\"db\",op=\"write\"} 3"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"read\",le=\"10\"} 0"));
  cr_assert (has_line (text, "cairn_export_request_duration_seconds_bucket{volume=\"db\",op=\"read\",le=\"+Inf\"} 1"));
  /* A label value with a quote, a backslash and a newline, escaped. */
  cr_assert (has_line (text, "cairn_job_done_bytes{job=\"bg-7\",method=\"reclaim\",what=\"a \\\"quoted\\\\\\\" name\\nnext\"} 4096"), "%s", text);
  cr_assert (has_line (text, "cairn_job_total_bytes{job=\"bg-7\",method=\"reclaim\",what=\"a \\\"quoted\\\\\\\" name\\nnext\"} 8192"));
  /* The flush's commit at least, each in the histogram. */
  {
    const char *c = strstr (text, "\ncairn_commits_total ");
    const char *h = strstr (text, "\ncairn_commit_duration_seconds_count ");

    cr_assert (c && h, "%s", text);
    cr_assert_geq (strtoull (c + 21, NULL, 10), 1);
    cr_assert_eq (strtoull (c + 21, NULL, 10), strtoull (h + 37, NULL, 10));
  }
  free (text);

  /* Renamed: the series follow the volume; closed: no connection. */
  vol_close (v);
  cr_assert_eq (vol_rename (pool, "db", "db2"), 0, "%s", cairn_errmsg ());
  cr_assert_eq (metrics_render (&src, &text, &len), 0, "%s", cairn_errmsg ());
  cr_assert (has_line (text, "cairn_export_requests_total{volume=\"db2\",op=\"write\"} 3"), "%s", text);
  cr_assert (has_line (text, "cairn_export_connections{volume=\"db2\"} 0"));
  cr_assert_null (strstr (text, "volume=\"db\""));
  free (text);
  /* Deleted: left out. */
  cr_assert_eq (vol_delete (pool, "db2", 0), 0, "%s", cairn_errmsg ());
  cr_assert_eq (metrics_render (&src, &text, &len), 0, "%s", cairn_errmsg ());
  cr_assert_null (strstr (text, "volume=\"db2\""));
  free (text);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}

Test (metrics, start)
{
  struct cairn_dev *dev = mem_pool (16 << 20, NULL);
  struct cairn_pool *pool = pool_open_ok (dev);
  struct metrics_source src = { .pool = pool };
  struct metrics_server *ms = NULL, *ms2 = NULL;
  int r = metrics_start ("127.0.0.1", 0, &src, &ms);

  if (!metrics_supported ()) {
    cr_assert_eq (r, -ENOTSUP);
    cr_assert (strstr (cairn_errmsg (), "built without metrics support") != NULL,
               "%s", cairn_errmsg ());
    cr_assert_null (ms);
  }
  else {
    cr_assert_eq (r, 0, "%s", cairn_errmsg ());
    cr_assert_gt (metrics_port (ms), 0);
    cr_assert_eq (metrics_start ("127.0.0.1", metrics_port (ms), &src, &ms2),
                  -EADDRINUSE);
    cr_assert (strstr (cairn_errmsg (), "Address already in use") != NULL,
               "%s", cairn_errmsg ());
    cr_assert_eq (metrics_start ("999.1.2.3", 0, &src, &ms2), -EINVAL);
    cr_assert (strstr (cairn_errmsg (), "is not one this host can listen on")
               != NULL, "%s", cairn_errmsg ());
    cr_assert_null (ms2);
    metrics_stop (ms);
  }
  metrics_stop (NULL);
  cr_assert_eq (pool_close (pool), 0);
  dev_close (dev);
}
