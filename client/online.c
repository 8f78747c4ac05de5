/* cairn: the online subcommands, which call control methods.
 *
 * Each subcommand turns its words into the params of one method (sizes are
 * parsed here, so that a bad one is a usage error), calls it through
 * cli_call (a running server, or the pool of --pool in-process), and
 * prints the result: as a table or a list of fields for people, or with
 * --json as the method's result itself, for scripts.  Sizes print in
 * units (units.h), times in local time; the JSON keeps bytes and UTC.
 *
 * This file holds what they share (options, output) and the single
 * subcommands clone, diff and status; the volume group is in
 * online-volume.c, the snapshot group in online-snapshot.c.
 */
#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "units.h"

/* ---------------------------------------------------------------- options */

static const struct option all_options[] = {
  { "json", no_argument, NULL, 'j' },
  { "recursive", no_argument, NULL, 'r' },
  { "force", no_argument, NULL, 'f' },
  { "snapshots", no_argument, NULL, 's' },
  { "since", required_argument, NULL, 'S' },
  { "until", required_argument, NULL, 'U' },
  { "dry-run", no_argument, NULL, 'n' },
  { "default", no_argument, NULL, 'D' },
  { "help", no_argument, NULL, 'h' },
};

/* Parse the options of a subcommand: --json and --help, and those of the
 * letters in extra ("r", "f", "s", "S", "U", "n", "D"); then check that
 * from min to max words are left (names: what they are, for the message).
 * Returns -1 to go on with the words from optind, or the exit code to stop
 * with.
 */
int
parse_opts (const struct cli *cli, int argc, char **argv, const char *extra,
            int min, int max, const char *const *names, struct opts *o)
{
  struct option longs[ARRAY_SIZE (all_options) + 1];
  char shorts[32];
  size_t n = 0, k = 0;
  int c, npos;

  shorts[k++] = 'j';
  shorts[k++] = 'h';
  for (size_t i = 0; i < ARRAY_SIZE (all_options); i++) {
    int v = all_options[i].val;

    if (v == 'j' || v == 'h' || strchr (extra, v)) {
      longs[n++] = all_options[i];
      if (v != 'j' && v != 'h') {
        shorts[k++] = (char) v;
        if (all_options[i].has_arg)
          shorts[k++] = ':';
      }
    }
  }
  shorts[k] = '\0';
  memset (&longs[n], 0, sizeof longs[n]);
  memset (o, 0, sizeof *o);
  while ((c = getopt_long (argc, argv, shorts, longs, NULL)) != -1) {
    switch (c) {
    case 'j': o->json = true; break;
    case 'r': o->recursive = true; break;
    case 'f': o->force = true; break;
    case 's': o->snapshots = true; break;
    case 'S': o->since = optarg; break;
    case 'U': o->until = optarg; break;
    case 'n': o->dry_run = true; break;
    case 'D': o->pool_default = true; break;
    case 'h':
      cli_usage (cli->cmd);
      return EXIT_OK;
    default:
      return cli_try_help (cli);
    }
  }
  npos = argc - optind;
  if (npos < min)
    return cli_usage_error (cli, "missing %s", names[npos]);
  if (npos > max)
    return cli_usage_error (cli, "unexpected argument '%s'",
                            argv[optind + max]);
  return -1;
}

/* Parse a size argument (what) into bytes: a usage error if it is not
 * one.
 */
int
parse_size (const struct cli *cli, const char *what, const char *arg,
            uint64_t *bytesp)
{
  if (units_parse_size (arg, bytesp) < 0)
    return cli_usage_error (cli, "%s: %s", what, cairn_errmsg ());
  if (*bytesp > (uint64_t) INT64_MAX)
    return cli_usage_error (cli, "%s: '%s' is too large", what, arg);
  return 0;
}

/* ---------------------------------------------------------------- output */

/* A string member, or "-". */
const char *
jstr (json_t *obj, const char *key)
{
  const char *s = json_string_value (json_object_get (obj, key));

  return s ? s : "-";
}

/* A number member (0 if absent). */
uint64_t
jnum (json_t *obj, const char *key)
{
  json_int_t v = json_integer_value (json_object_get (obj, key));

  return v > 0 ? (uint64_t) v : 0;
}

/* A size member in units. */
const char *
jsize (json_t *obj, const char *key, char buf[UNITS_FORMAT_MAX])
{
  return units_format (jnum (obj, key), buf);
}

/* An ISO 8601 UTC time member ("2026-12-02T10:00:00Z") in local time. */
const char *
jtime (json_t *obj, const char *key, char buf[32])
{
  const char *iso = jstr (obj, key);
  struct tm tm = { 0 };
  const char *end = strptime (iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  time_t t;

  if (end == NULL || *end != '\0')
    return iso;
  t = timegm (&tm);
  if (localtime_r (&t, &tm) == NULL ||
      strftime (buf, 32, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    return iso;
  return buf;
}

/* Print a result as JSON (null for none). */
int
print_json (const struct cli *cli, json_t *result)
{
  if (result == NULL)
    printf ("null\n");
  else if (json_dumpf (result, stdout, JSON_INDENT (2) | JSON_ENCODE_ANY) < 0)
    return cli_error (cli, EXIT_FAIL, "writing the JSON output failed");
  else
    printf ("\n");
  return EXIT_OK;
}

/* Add a row of t->ncols cells.  Returns 0 or -1 (out of memory). */
int
table_add (struct table *t, const char *const *row)
{
  if (t->nrows == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 16;
    char **cells = realloc (t->cells, cap * t->ncols * sizeof *cells);

    if (cells == NULL)
      return -1;
    t->cells = cells;
    t->cap = cap;
  }
  for (size_t c = 0; c < t->ncols; c++) {
    char *s = strdup (row[c]);
    int w = (int) strlen (row[c]);

    if (s == NULL) {
      for (size_t d = 0; d < c; d++)
        free (t->cells[t->nrows * t->ncols + d]);
      return -1;
    }
    t->cells[t->nrows * t->ncols + c] = s;
    t->width[c] = MAX (t->width[c], w);
  }
  t->nrows++;
  return 0;
}

/* Print the table (the last column is not padded). */
void
table_print (const struct table *t)
{
  for (size_t r = 0; r < t->nrows; r++)
    for (size_t c = 0; c < t->ncols; c++) {
      const char *s = t->cells[r * t->ncols + c];

      if (c + 1 < t->ncols)
        printf ("%-*s  ", t->width[c], s);
      else
        printf ("%s\n", s);
    }
}

/* Free the table's cells. */
void
table_free (struct table *t)
{
  for (size_t i = 0; i < t->nrows * t->ncols; i++)
    free (t->cells[i]);
  free (t->cells);
}

/* Print an array of volume or snapshot objects as a table. */
int
print_volume_table (const struct cli *cli, json_t *arr)
{
  static const char *const head[] = {
    "NAME", "SIZE", "REFER", "CREATED", "RO", "ORIGIN",
  };
  struct table t = { .ncols = ARRAY_SIZE (head) };
  size_t i;
  json_t *v;
  int r = table_add (&t, head);

  json_array_foreach (arr, i, v) {
    char size[UNITS_FORMAT_MAX], refer[UNITS_FORMAT_MAX], ctime[32];
    const char *row[] = {
      jstr (v, "name"), jsize (v, "size", size), jsize (v, "referenced", refer),
      jtime (v, "ctime", ctime),
      json_is_true (json_object_get (v, "readonly")) ? "yes" : "no",
      jstr (v, "origin"),
    };

    if (r == 0)
      r = table_add (&t, row);
  }
  table_print (&t);
  table_free (&t);
  return r == 0 ? EXIT_OK : cli_error (cli, EXIT_FAIL, "out of memory");
}

/* Print "label  value" with the labels aligned. */
void
field (const char *label, const char *value)
{
  printf ("%-13s %s\n", label, value);
}

/* Print one "label  SIZE (N bytes)" line. */
void
field_size (const char *label, json_t *obj, const char *key)
{
  char s[UNITS_FORMAT_MAX], line[80];

  snprintf (line, sizeof line, "%s (%" PRIu64 " bytes)", jsize (obj, key, s),
            jnum (obj, key));
  field (label, line);
}

/* "N (SIZE of memory)": the free space's runs (fragmentation) and what the
 * server's space map takes for them.
 */
static const char *
free_runs (json_t *res, char *buf, size_t len)
{
  char s[UNITS_FORMAT_MAX];

  snprintf (buf, len, "%" PRIu64 " (space map: %s of memory)",
            jnum (res, "free_runs"), jsize (res, "space_map_bytes", s));
  return buf;
}

/* Warn on stderr about the "damaged" records of a listing's result (left
 * out of it), one per line; returns how many there were.
 */
size_t
warn_damaged (const struct cli *cli, json_t *res)
{
  json_t *arr = json_object_get (res, "damaged"), *d;
  size_t i, n = json_array_size (arr);

  if (n == 0)
    return 0;
  cli_error (cli, 0, "warning: %zu damaged catalog record%s left out:", n,
             n == 1 ? "" : "s");
  json_array_foreach (arr, i, d)
    fprintf (stderr, "  %s: %s\n", jstr (d, "name"), jstr (d, "error"));
  fprintf (stderr, "  %s\n", DAMAGE_HINT);
  return n;
}

/* Print the "damaged" records of res as fields, one per line. */
void
field_damaged (json_t *res)
{
  json_t *d;
  size_t i;

  json_array_foreach (json_object_get (res, "damaged"), i, d) {
    char line[1024];

    snprintf (line, sizeof line, "%s: %s", jstr (d, "name"), jstr (d, "error"));
    field (i == 0 ? "damaged" : "", line);
  }
}

/* ---------------------------------------------------------------- others */

/* cairn audit: the server's audit trail, oldest first. */
int
cmd_audit (const struct cli *cli, int argc, char **argv)
{
  struct opts o;
  json_t *res, *e;
  size_t i;
  int r = parse_opts (cli, argc, argv, "", 0, 0, NULL, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, true, "audit.list", json_object (), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK) {
    json_array_foreach (json_object_get (res, "entries"), i, e)
      printf ("%s %s %s %s: %s\n", jstr (e, "time"), jstr (e, "principal"),
              jstr (e, "method"), *jstr (e, "target") ? jstr (e, "target")
                                                      : "-",
              jstr (e, "outcome"));
    if (json_integer_value (json_object_get (res, "dropped")) > 0)
      printf ("(%" JSON_INTEGER_FORMAT " older records dropped)\n",
              json_integer_value (json_object_get (res, "dropped")));
  }
  json_decref (res);
  return r;
}

/* cairn grants reload: read the server's grants file again. */
int
cmd_grants (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "reload" };
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 1, 1, names, &o);

  if (r >= 0)
    return r;
  if (strcmp (argv[optind], "reload") != 0) {
    fprintf (stderr, "cairn grants: unknown action '%s': the action is "
             "'reload' (cairn grants reload)\n", argv[optind]);
    return EXIT_USAGE;
  }
  r = cli_call (cli, true, "grants.reload", json_object (), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("reloaded %s: %" JSON_INTEGER_FORMAT " rules in force\n",
            jstr (res, "file"), json_integer_value (json_object_get (res,
                                                                     "rules")));
  json_decref (res);
  return r;
}

/* cairn clone SOURCE NAME */
int
cmd_clone (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "SOURCE", "NAME" };
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, true, "volume.clone",
                json_pack ("{s:s, s:s}", "source", argv[optind],
                           "name", argv[optind + 1]), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("created volume %s, a clone of %s\n", jstr (res, "name"),
            argv[optind]);
  json_decref (res);
  return r;
}

/* cairn diff FROM TO */
int
cmd_diff (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "FROM", "TO" };
  static const char *const head[] = { "OFFSET", "LENGTH", "TYPE" };
  struct table t = { .ncols = ARRAY_SIZE (head) };
  char data[UNITS_FORMAT_MAX], holes[UNITS_FORMAT_MAX];
  struct opts o;
  json_t *res, *runs, *v;
  size_t i;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "volume.diff",
                json_pack ("{s:s, s:s}", "from", argv[optind],
                           "to", argv[optind + 1]), &res);
  if (r != EXIT_OK)
    return r;
  runs = json_object_get (res, "runs");
  if (json_is_true (json_object_get (res, "truncated")))
    fprintf (stderr, "cairn diff: warning: the diff has more runs than the "
             "%zu shown\n", json_array_size (runs));
  if (o.json) {
    r = print_json (cli, res);
    json_decref (res);
    return r;
  }
  r = table_add (&t, head);
  json_array_foreach (runs, i, v) {
    char off[24], len[24];
    const char *row[] = { off, len, jstr (v, "type") };

    snprintf (off, sizeof off, "%" PRIu64, jnum (v, "offset"));
    snprintf (len, sizeof len, "%" PRIu64, jnum (v, "length"));
    if (r == 0)
      r = table_add (&t, row);
  }
  if (json_array_size (runs) > 0)
    table_print (&t);
  table_free (&t);
  printf ("%zu %s: %s of data, %s of holes\n", json_array_size (runs),
          json_array_size (runs) == 1 ? "run" : "runs",
          jsize (res, "data_bytes", data), jsize (res, "hole_bytes", holes));
  json_decref (res);
  return r == 0 ? EXIT_OK : cli_error (cli, EXIT_FAIL, "out of memory");
}

/* The devices of a pool of several (pool.status's "devices"): a profile
 * line and a table of the devices with their state and error counters.
 * Whether redundancy is lost (a device missing).
 */
static bool
print_devices (json_t *res)
{
  static const char *const head[] = {
    "  DEVICE", "STATE", "SIZE", "USED", "READ", "WRITE", "CKSUM", "REPAIRED",
    "PATH",
  };
  json_t *devs = json_object_get (res, "devices"), *v;
  struct table t = { .ncols = ARRAY_SIZE (head) };
  char buf[320];
  size_t i, n;

  if (devs == NULL)
    return false;
  n = json_array_size (json_object_get (devs, "members"));
  snprintf (buf, sizeof buf, "%s, %" PRIu64 " cop%s of every block, %zu "
            "device%s", jstr (devs, "profile"), jnum (devs, "copies"),
            jnum (devs, "copies") == 1 ? "y" : "ies", n, n == 1 ? "" : "s");
  field ("profile", buf);
  if (table_add (&t, head) == 0)
    json_array_foreach (json_object_get (devs, "members"), i, v) {
      char idx[24], size[UNITS_FORMAT_MAX], used[UNITS_FORMAT_MAX];
      char rd[24], wr[24], ck[24], rep[24];
      const char *path = json_string_value (json_object_get (v, "path"));
      const char *row[] = { idx, jstr (v, "state"), size, used, rd, wr, ck,
                            rep, path ? path : jstr (v, "uuid") };

      snprintf (idx, sizeof idx, "  %" PRIu64, jnum (v, "index"));
      jsize (v, "size", size);
      jsize (v, "used", used);
      snprintf (rd, sizeof rd, "%" PRIu64, jnum (v, "read_errors"));
      snprintf (wr, sizeof wr, "%" PRIu64, jnum (v, "write_errors"));
      snprintf (ck, sizeof ck, "%" PRIu64, jnum (v, "cksum_errors"));
      snprintf (rep, sizeof rep, "%" PRIu64, jnum (v, "repaired"));
      if (table_add (&t, row) < 0)
        break;
    }
  table_print (&t);
  table_free (&t);
  return json_is_true (json_object_get (devs, "degraded"));
}

/* The RBD images of a pool on Ceph (pool.status's and a standby's
 * "rbd"): where each lives and who holds its lock.
 */
static void
print_rbd (json_t *res)
{
  json_t *v;
  size_t i;
  char buf[640];

  json_array_foreach (json_object_get (res, "rbd"), i, v) {
    const char *fsid = json_string_value (json_object_get (v, "fsid"));
    const char *mon = json_string_value (json_object_get (v, "mon_host"));
    const char *owner = json_string_value (json_object_get (v, "lock_owner"));
    const char *who = json_string_value (json_object_get (v,
                                                          "lock_owner_name"));

    field ("rbd image", jstr (v, "device"));
    snprintf (buf, sizeof buf, "fsid %s, monitors %s", fsid ? fsid : "?",
              mon ? mon : "?");
    field ("  cluster", buf);
    if (owner == NULL)
      snprintf (buf, sizeof buf, "not held");
    else if (json_is_true (json_object_get (v, "lock_ours")))
      snprintf (buf, sizeof buf, "held by this server (%s)", owner);
    else
      snprintf (buf, sizeof buf, "held by %s%s", who ? who : owner,
                json_is_true (json_object_get (v, "lock_owner_alive"))
                ? "" : ", whose watch on the image has expired");
    field ("  lock", buf);
  }
}

/* A standby's status: what it waits for. */
static void
print_standby (json_t *sb)
{
  char buf[320];

  field ("standby", jstr (sb, "state"));
  field ("pool", jstr (sb, "pool"));
  field ("waiting for", jstr (sb, "waiting_for"));
  snprintf (buf, sizeof buf, "%.0f s, %" PRIu64 " polls of the lock, one "
            "every %" PRIu64 " ms",
            json_number_value (json_object_get (sb, "waited_s")),
            jnum (sb, "polls"), jnum (sb, "poll_interval_ms"));
  field ("waited", buf);
  print_rbd (sb);
}

/* cairn status */
int
cmd_status (const struct cli *cli, int argc, char **argv)
{
  char buf[320], s[UNITS_FORMAT_MAX];
  struct opts o;
  json_t *res, *cache;
  uint64_t hits, misses;
  size_t ndamaged;
  bool failed, degraded, replacing = false;
  json_t *replace;
  const char *state;
  int r = parse_opts (cli, argc, argv, "", 0, 0, NULL, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "pool.status", json_object (), &res);
  if (r != EXIT_OK)
    return r;
  /* Damaged records and a failed pool make the status fail, so that
   * scripts and monitoring notice.
   */
  ndamaged = json_array_size (json_object_get (res, "damaged"));
  failed = json_is_true (json_object_get (res, "failed"));
  /* So does a pool of several devices that lost redundancy: a device
   * missing, or being replaced while missing.
   */
  degraded = json_is_false (json_object_get (json_object_get (res, "devices"),
                                             "redundant"));
  if (o.json) {
    r = print_json (cli, res);
    json_decref (res);
    return r == EXIT_OK && (ndamaged || failed || degraded) ? EXIT_FAIL : r;
  }
  if (json_object_get (res, "standby")) {
    print_standby (json_object_get (res, "standby"));
    json_decref (res);
    return EXIT_OK;
  }
  cache = json_object_get (res, "cache");
  field ("uuid", jstr (res, "uuid"));
  snprintf (buf, sizeof buf, "%" PRIu64, jnum (res, "generation"));
  field ("generation", buf);
  snprintf (buf, sizeof buf, "%" PRIu64, jnum (res, "volumes"));
  field ("volumes", buf);
  snprintf (buf, sizeof buf, "%" PRIu64, jnum (res, "snapshots"));
  field ("snapshots", buf);
  field ("node size", jsize (res, "node_size", s));
  field_size ("size", res, "size");
  field_size ("used", res, "used");
  field_size ("free", res, "free");
  field ("free runs", free_runs (res, buf, sizeof buf));
  field_size ("high water", res, "high_water");
  field_size ("reserve", res, "reserve");
  hits = jnum (cache, "hits");
  misses = jnum (cache, "misses");
  if (hits + misses)
    snprintf (buf, sizeof buf, "%s in %" PRIu64 " %s, %" PRIu64 "%% hits",
              jsize (cache, "bytes", s), jnum (cache, "nodes"),
              jnum (cache, "nodes") == 1 ? "node" : "nodes",
              hits * 100 / (hits + misses));
  else      /* a percentage of nothing would say 100% */
    snprintf (buf, sizeof buf, "%s in %" PRIu64 " %s, no reads yet",
              jsize (cache, "bytes", s), jnum (cache, "nodes"),
              jnum (cache, "nodes") == 1 ? "node" : "nodes");
  field ("cache", buf);
  if (strcmp (jstr (res, "verify"), "disk") == 0)
    snprintf (buf, sizeof buf, "data from the disk (%" PRIu64 " blocks read "
              "from checked copies in the page cache, %s read ahead)",
              jnum (res, "blocks_trusted"), jsize (res, "read_ahead", s));
  else
    snprintf (buf, sizeof buf, "every block read");
  field ("checks", buf);
  {
    json_t *rc = json_object_get (res, "reclaim");
    const char *err = json_string_value (json_object_get (rc, "error"));

    if (jnum (rc, "volumes") + jnum (rc, "snapshots") > 0 || (err && *err)) {
      snprintf (buf, sizeof buf, "%" PRIu64 " deleted volume%s and %" PRIu64
                " snapshot%s giving space back, %s freed so far%s%s",
                jnum (rc, "volumes"), jnum (rc, "volumes") == 1 ? "" : "s",
                jnum (rc, "snapshots"), jnum (rc, "snapshots") == 1 ? "" : "s",
                jsize (rc, "freed", s), err && *err ? "; stopped: " : "",
                err ? err : "");
      field ("reclaim", buf);
    }
  }
  {
    json_t *ck = json_object_get (res, "checkpoints");
    const char *oldest = json_string_value (json_object_get (ck, "oldest"));
    const char *last = json_string_value (json_object_get (ck, "space_last"));
    uint64_t ms = jnum (ck, "commit_interval_ms");
    char every[64];
    int n = 0;

    /* How far apart checkpoints are at most, and whose setting says so. */
    snprintf (every, sizeof every, "a commit every %" PRIu64 "%s (%s)",
              ms % 1000 ? ms : ms / 1000, ms % 1000 ? " ms" : " s",
              jstr (ck, "commit_interval_from"));
    if (oldest)
      n = snprintf (buf, sizeof buf, "default %s, %s; %" PRIu64 " volume%s, "
                    "the oldest kept %s (%" PRIu64 " s ago); %" PRIu64
                    " collected", jstr (ck, "default"), every,
                    jnum (ck, "volumes"), jnum (ck, "volumes") == 1 ? "" : "s",
                    oldest, jnum (ck, "oldest_age"), jnum (ck, "collected"));
    else
      n = snprintf (buf, sizeof buf, "default %s, %s; none kept; %" PRIu64
                    " collected", jstr (ck, "default"), every,
                    jnum (ck, "collected"));
    if (last && n > 0 && (size_t) n < sizeof buf)
      snprintf (buf + n, sizeof buf - (size_t) n, "; space ran short %" PRIu64
                " time%s, last at %s: %" PRIu64 " dropped beyond the policy",
                jnum (ck, "space_events"),
                jnum (ck, "space_events") == 1 ? "" : "s", last,
                jnum (ck, "space_dropped"));
    field ("checkpoints", buf);
  }
  {
    /* The intent log (cairnd --intent-log): said only where the pool has
     * one or the server uses one.
     */
    json_t *il = json_object_get (res, "intent_log");
    char ring[UNITS_FORMAT_MAX];

    units_format (jnum (il, "ring_blocks") * jnum (res, "block_size"), ring);
    if (jnum (il, "live_records"))
      snprintf (buf, sizeof buf, "%" PRIu64 " flushed write%s not yet in a "
                "commit (a read-write open replays them)",
                jnum (il, "live_records"),
                jnum (il, "live_records") == 1 ? "" : "s");
    else if (json_is_true (json_object_get (il, "active")))
      snprintf (buf, sizeof buf, "on: a flush is a log write (%s ring); %"
                PRIu64 " flushes in %" PRIu64 " log blocks since the open",
                ring, jnum (il, "flushes"), jnum (il, "blocks_written"));
    else if (jnum (il, "ring_blocks"))
      snprintf (buf, sizeof buf, "off: a flush commits (the pool keeps its "
                "%s ring)", ring);
    else
      buf[0] = '\0';
    if (buf[0])
      field ("intent log", buf);
  }
  /* I/O statistics exist only in a running server (cairn stats). */
  if (!cli->pool) {
    json_t *io = json_object_get (res, "io");
    char w[UNITS_FORMAT_MAX];

    snprintf (buf, sizeof buf, "%s read, %s written, %" PRIu64 " failed "
              "requests (%" PRIu64 " checksum)", jsize (io, "bytes_read", s),
              jsize (io, "bytes_written", w), jnum (io, "errors"),
              jnum (io, "checksum_errors"));
    field ("io", buf);
  }
  print_devices (res);
  print_rbd (res);
  replace = json_object_get (json_object_get (res, "devices"), "replace");
  if (replace) {
    uint64_t done = jnum (replace, "done"), total = jnum (replace, "total");

    state = jstr (replace, "state");
    replacing = strcmp (state, "running") == 0 ||
                strcmp (state, "stopped") == 0 ||
                strcmp (state, "failed") == 0;
    snprintf (buf, sizeof buf, "device %" PRIu64 " by %s: %s, %.1f%% "
              "copied%s%s", jnum (replace, "index"),
              json_is_string (json_object_get (replace, "target"))
              ? jstr (replace, "target") : "(not named)", state,
              total ? 100.0 * (double) MIN (done, total) / (double) total : 0,
              json_is_string (json_object_get (replace, "error")) ? ": " : "",
              json_is_string (json_object_get (replace, "error"))
              ? jstr (replace, "error") : "");
    field ("replace", buf);
  }
  field_damaged (res);
  if (failed) {
    field ("state", "FAILED: writes fail until the pool is reopened (restart "
           "the server); check the device");
    if (jstr (res, "failure"))
      field ("failure", jstr (res, "failure"));
  }
  else if (ndamaged) {
    snprintf (buf, sizeof buf, "DEGRADED: %zu damaged catalog record%s "
              "(above)", ndamaged, ndamaged == 1 ? "" : "s");
    field ("state", buf);
    field ("", DAMAGE_HINT);
  }
  else if (degraded && replacing) {
    snprintf (buf, sizeof buf, "DEGRADED: device %" PRIu64 " is missing and "
              "being replaced (%s): redundancy comes back when the replace "
              "ends", jnum (replace, "index"), jstr (replace, "state"));
    field ("state", buf);
  }
  else if (degraded) {
    snprintf (buf, sizeof buf, "DEGRADED: %" PRIu64 " device%s missing "
              "(above): redundancy is lost and the pool is read-only; bring "
              "the device back and reopen the pool, or replace it ('cairn "
              "device replace')",
              jnum (json_object_get (res, "devices"), "missing"),
              jnum (json_object_get (res, "devices"), "missing") == 1 ? ""
              : "s");
    field ("state", buf);
  }
  else if (replacing) {
    snprintf (buf, sizeof buf, "ok, device %" PRIu64 " being replaced (%s)",
              jnum (replace, "index"), jstr (replace, "state"));
    field ("state", buf);
  }
  /* With --pool this command itself opened the pool read-only. */
  else if (json_is_true (json_object_get (res, "readonly")) && !cli->pool)
    field ("state", "ok, served read-only");
  else
    field ("state", "ok");
  json_decref (res);
  return ndamaged || failed || degraded ? EXIT_FAIL : EXIT_OK;
}
