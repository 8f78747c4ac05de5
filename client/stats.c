/* cairn stats: the I/O statistics of a running server's exports.
 *
 * `cairn stats` lists every export that NBD clients used since the server
 * started (stats.list), one row each and a total; `cairn stats EXPORT`
 * shows one export (stats.show), even one not used yet.  The counters live
 * in the server's memory only (engine/volstats.c), so with --pool, which
 * opens a stopped pool in-process, there is nothing to show: the command
 * says so instead of printing zeros.
 */
#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "units.h"

/* A counter member as a decimal string. */
static const char *
jcount (json_t *obj, const char *key, char buf[24])
{
  snprintf (buf, 24, "%" PRIu64, jnum (obj, key));
  return buf;
}

/* Add the row of one export (or of the total, named name) to t. */
static int
add_row (struct table *t, json_t *x, const char *name)
{
  char read[UNITS_FORMAT_MAX], written[UNITS_FORMAT_MAX];
  char n[9][24];
  const char *row[] = {
    name, jsize (x, "bytes_read", read), jsize (x, "bytes_written", written),
    jcount (x, "reads", n[0]), jcount (x, "writes", n[1]),
    jcount (x, "trims", n[2]), jcount (x, "zeros", n[3]),
    jcount (x, "flushes", n[4]), jcount (x, "extents", n[5]),
    jcount (x, "caches", n[6]), jcount (x, "errors", n[7]),
    jcount (x, "checksum_errors", n[8]),
  };

  return table_add (t, row);
}

/* Print stats.list's result as a table with a total row. */
static int
print_list (const struct cli *cli, json_t *res)
{
  static const char *const head[] = {
    "EXPORT", "READ", "WRITTEN", "READS", "WRITES", "TRIMS", "ZEROS",
    "FLUSHES", "EXTENTS", "CACHES", "ERRORS", "CSUM-ERR",
  };
  json_t *exports = json_object_get (res, "exports"), *x;
  struct table t = { .ncols = ARRAY_SIZE (head) };
  size_t i;
  int r = table_add (&t, head);

  if (json_array_size (exports) == 0) {
    table_free (&t);
    printf ("no NBD client has used an export since the server started\n");
    return EXIT_OK;
  }
  json_array_foreach (exports, i, x) {
    char name[600];

    snprintf (name, sizeof name, "%s%s", json_string_value (json_object_get (x, "name")),
              json_is_true (json_object_get (x, "gone")) ? " (deleted)" : "");
    if (r == 0)
      r = add_row (&t, x, name);
  }
  if (r == 0)
    r = add_row (&t, json_object_get (res, "total"), "TOTAL");
  table_print (&t);
  table_free (&t);
  return r == 0 ? EXIT_OK : cli_error (cli, EXIT_FAIL, "out of memory");
}

/* Print "label  SIZE in N requests". */
static void
field_io (const char *label, json_t *x, const char *bytes_key,
          const char *ops_key)
{
  char s[UNITS_FORMAT_MAX], line[96];
  uint64_t ops = jnum (x, ops_key);

  snprintf (line, sizeof line, "%s (%" PRIu64 " bytes) in %" PRIu64 " %s",
            jsize (x, bytes_key, s), jnum (x, bytes_key), ops,
            ops == 1 ? "request" : "requests");
  field (label, line);
}

/* Print stats.show's result as fields. */
static void
print_one (json_t *x)
{
  static const struct { const char *label, *key; } counts[] = {
    { "trims", "trims" }, { "zeros", "zeros" }, { "flushes", "flushes" },
    { "extents", "extents" }, { "caches", "caches" }, { "errors", "errors" },
    { "checksum err", "checksum_errors" },
  };
  char buf[24];

  field ("export", json_string_value (json_object_get (x, "name")));
  if (json_is_true (json_object_get (x, "gone")))
    field ("state", "deleted");
  field ("connections", jcount (x, "connections", buf));
  field_io ("read", x, "bytes_read", "reads");
  field_io ("written", x, "bytes_written", "writes");
  for (size_t i = 0; i < ARRAY_SIZE (counts); i++)
    field (counts[i].label, jcount (x, counts[i].key, buf));
}

/* cairn stats [EXPORT] [--json] */
int
cmd_stats (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  const char *export = NULL;
  bool json = false;
  json_t *res;
  int c, r;

  while ((c = getopt_long (argc, argv, "jh", opts, NULL)) != -1) {
    if (c == 'j')
      json = true;
    else if (c == 'h') {
      cli_usage (cli->cmd);
      return EXIT_OK;
    }
    else
      return cli_try_help (cli);
  }
  if (argc - optind > 1)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind + 1]);
  if (argc - optind == 1)
    export = argv[optind];
  if (cli->pool)
    return cli_usage_error (cli, "I/O statistics exist only in a running "
                            "server (they count what NBD clients did since "
                            "it started): leave out --pool to ask the server "
                            "at the control socket");
  if (export)
    r = cli_call (cli, false, "stats.show",
                  json_pack ("{s:s}", "export", export), &res);
  else
    r = cli_call (cli, false, "stats.list", json_object (), &res);
  if (r != EXIT_OK)
    return r;
  if (json)
    r = print_json (cli, res);
  else if (export)
    print_one (res);
  else
    r = print_list (cli, res);
  json_decref (res);
  return r;
}
