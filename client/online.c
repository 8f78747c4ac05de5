/* cairn: the online subcommands, which call control methods.
 *
 * Each subcommand turns its words into the params of one method (sizes are
 * parsed here, so that a bad one is a usage error), calls it through
 * cli_call (a running server, or the pool of --pool in-process), and
 * prints the result: as a table or a list of fields for people, or with
 * --json as the method's result itself, for scripts.  Sizes print in
 * units (units.h), times in local time; the JSON keeps bytes and UTC.
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
#include "volume.h"

/* ---------------------------------------------------------------- options */

/* The options of an online subcommand. */
struct opts {
  bool json, recursive, force, snapshots;
};

static const struct option all_options[] = {
  { "json", no_argument, NULL, 'j' },
  { "recursive", no_argument, NULL, 'r' },
  { "force", no_argument, NULL, 'f' },
  { "snapshots", no_argument, NULL, 's' },
  { "help", no_argument, NULL, 'h' },
};

/* Parse the options of a subcommand: --json and --help, and those of the
 * letters in extra ("r", "f", "s"); then check that from min to max words
 * are left (names: what they are, for the message).  Returns -1 to go on
 * with the words from optind, or the exit code to stop with.
 */
static int
parse_opts (const struct cli *cli, int argc, char **argv, const char *extra,
            int min, int max, const char *const *names, struct opts *o)
{
  struct option longs[ARRAY_SIZE (all_options) + 1];
  char shorts[16];
  size_t n = 0;
  int c, npos;

  for (size_t i = 0; i < ARRAY_SIZE (all_options); i++) {
    int v = all_options[i].val;

    if (v == 'j' || v == 'h' || strchr (extra, v))
      longs[n++] = all_options[i];
  }
  memset (&longs[n], 0, sizeof longs[n]);
  snprintf (shorts, sizeof shorts, "jh%s", extra);
  memset (o, 0, sizeof *o);
  while ((c = getopt_long (argc, argv, shorts, longs, NULL)) != -1) {
    switch (c) {
    case 'j': o->json = true; break;
    case 'r': o->recursive = true; break;
    case 'f': o->force = true; break;
    case 's': o->snapshots = true; break;
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
static int
parse_size (const struct cli *cli, const char *what, const char *arg,
            uint64_t *bytesp)
{
  if (units_parse_size (arg, bytesp) < 0)
    return cli_usage_error (cli, "%s: %s", what, cairn_errmsg ());
  if (*bytesp > (uint64_t) INT64_MAX)
    return cli_usage_error (cli, "%s: '%s' is too large", what, arg);
  return 0;
}

/* Split "VOL@SNAP" into a new string holding VOL (*volp, to free) and
 * SNAP (*snapp, pointing into it); a usage error if it is not one.
 */
static int
split_snapshot (const struct cli *cli, const char *arg, char **volp,
                const char **snapp)
{
  char *at;

  if (strchr (arg, '@') == NULL)
    return cli_usage_error (cli, "'%s' is not a snapshot: write VOL@SNAP",
                            arg);
  *volp = strdup (arg);
  if (*volp == NULL)
    return cli_error (cli, EXIT_FAIL, "out of memory");
  at = strchr (*volp, '@');
  *at = '\0';
  *snapp = at + 1;
  return 0;
}

/* ---------------------------------------------------------------- output */

/* A string member, or "-". */
static const char *
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
static const char *
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
static int
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
static void
field_size (const char *label, json_t *obj, const char *key)
{
  char s[UNITS_FORMAT_MAX], line[80];

  snprintf (line, sizeof line, "%s (%" PRIu64 " bytes)", jsize (obj, key, s),
            jnum (obj, key));
  field (label, line);
}

/* Print an array of names, one per line, under a label ("-" if empty). */
static void
field_list (const char *label, json_t *arr)
{
  size_t i;
  json_t *v;

  if (json_array_size (arr) == 0)
    field (label, "-");
  json_array_foreach (arr, i, v)
    field (i == 0 ? label : "", json_string_value (v));
}

/* What to do about damaged catalog records, after listing them. */
#define DAMAGE_HINT "run 'cairn fsck' for details; 'cairn snapshot delete " \
  "VOL@SNAP' removes a damaged snapshot (the rest of the pool is usable)"

/* Warn on stderr about the "damaged" records of a listing's result (left
 * out of it), one per line; returns how many there were.
 */
static size_t
warn_damaged (const struct cli *cli, json_t *res)
{
  json_t *arr = json_object_get (res, "damaged"), *d;
  size_t i, n = json_array_size (arr);

  if (n == 0)
    return 0;
  cli_error (cli, 0, "warning: %zu damaged snapshot record%s left out:", n,
             n == 1 ? "" : "s");
  json_array_foreach (arr, i, d)
    fprintf (stderr, "  %s: %s\n", jstr (d, "name"), jstr (d, "error"));
  fprintf (stderr, "  %s\n", DAMAGE_HINT);
  return n;
}

/* Print the "damaged" records of res as fields, one per line. */
static void
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

/* ---------------------------------------------------------------- volume */

/* cairn volume create NAME SIZE */
static int
cmd_volume_create (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME", "SIZE" };
  char s[UNITS_FORMAT_MAX];
  struct opts o;
  json_t *res;
  uint64_t size;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = parse_size (cli, "SIZE", argv[optind + 1], &size);
  if (r != 0)
    return r;
  r = cli_call (cli, true, "volume.create",
                json_pack ("{s:s, s:I}", "name", argv[optind],
                           "size", (json_int_t) size), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("created volume %s: %s\n", jstr (res, "name"),
            jsize (res, "size", s));
  json_decref (res);
  return r;
}

/* cairn volume list [--snapshots] */
static int
cmd_volume_list (const struct cli *cli, int argc, char **argv)
{
  struct opts o;
  json_t *res, *vols;
  int r = parse_opts (cli, argc, argv, "s", 0, 0, NULL, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "volume.list",
                json_pack ("{s:b}", "snapshots", (int) o.snapshots), &res);
  if (r != EXIT_OK)
    return r;
  vols = json_object_get (res, "volumes");
  if (o.json)
    r = print_json (cli, res);
  else if (json_array_size (vols) == 0)
    printf ("no volumes: 'cairn volume create NAME SIZE' makes one\n");
  else
    r = print_volume_table (cli, vols);
  warn_damaged (cli, res);
  json_decref (res);
  return r;
}

/* cairn volume show NAME */
static int
cmd_volume_show (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME" };
  char ctime[32], id[24], gen[24];
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "volume.show",
                json_pack ("{s:s}", "name", argv[optind]), &res);
  if (r != EXIT_OK)
    return r;
  if (o.json) {
    r = print_json (cli, res);
    json_decref (res);
    return r;
  }
  snprintf (id, sizeof id, "%" PRIu64, jnum (res, "id"));
  snprintf (gen, sizeof gen, "%" PRIu64, jnum (res, "generation"));
  field ("name", jstr (res, "name"));
  field ("id", id);
  field ("generation", gen);
  field_size ("size", res, "size");
  field_size ("referenced", res, "referenced");
  field ("created", jtime (res, "ctime", ctime));
  field ("read-only",
         json_is_true (json_object_get (res, "readonly")) ? "yes" : "no");
  field ("origin", jstr (res, "origin"));
  if (json_object_get (res, "snapshots"))
    field_list ("snapshots", json_object_get (res, "snapshots"));
  field_list ("clones", json_object_get (res, "clones"));
  field_damaged (res);
  if (json_array_size (json_object_get (res, "damaged")))
    field ("", DAMAGE_HINT);
  json_decref (res);
  return EXIT_OK;
}

/* cairn volume delete NAME [--recursive] */
static int
cmd_volume_delete (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME" };
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "r", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, true, "volume.delete",
                json_pack ("{s:s, s:b}", "name", argv[optind],
                           "recursive", (int) o.recursive), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("deleted volume %s%s\n", argv[optind],
            o.recursive ? " and its snapshots" : "");
  json_decref (res);
  return r;
}

/* cairn volume rename NAME NEW */
static int
cmd_volume_rename (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME", "NEW" };
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, true, "volume.rename",
                json_pack ("{s:s, s:s}", "name", argv[optind],
                           "to", argv[optind + 1]), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("renamed volume %s to %s\n", argv[optind], jstr (res, "name"));
  json_decref (res);
  return r;
}

/* cairn volume resize NAME SIZE [--force] */
static int
cmd_volume_resize (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME", "SIZE" };
  char s[UNITS_FORMAT_MAX];
  struct opts o;
  json_t *res;
  uint64_t size;
  int r = parse_opts (cli, argc, argv, "f", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = parse_size (cli, "SIZE", argv[optind + 1], &size);
  if (r != 0)
    return r;
  r = cli_call (cli, true, "volume.resize",
                json_pack ("{s:s, s:I, s:b}", "name", argv[optind],
                           "size", (json_int_t) size,
                           "force", (int) o.force), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("resized volume %s to %s\n", jstr (res, "name"),
            jsize (res, "size", s));
  json_decref (res);
  return r;
}

/* cairn volume set NAME PROPERTY=VALUE... */
static int
cmd_volume_set (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "NAME", "PROPERTY=VALUE" };
  struct opts o;
  json_t *params, *props, *res;
  int r = parse_opts (cli, argc, argv, "", 2, 64, names, &o);

  if (r >= 0)
    return r;
  params = json_pack ("{s:s}", "name", argv[optind]);
  props = json_object ();
  for (int i = optind + 1; params && props && i < argc; i++) {
    const char *eq = strchr (argv[i], '=');
    const char *value = eq ? eq + 1 : NULL;
    int klen = eq ? (int) (eq - argv[i]) : 0;
    uint64_t quota;

    if (klen == 0)
      r = cli_usage_error (cli, "'%s' is not PROPERTY=VALUE", argv[i]);
    else if (klen == 8 && memcmp (argv[i], "readonly", 8) == 0) {
      if (strcmp (value, "on") != 0 && strcmp (value, "off") != 0)
        r = cli_usage_error (cli, "readonly must be 'on' or 'off', not '%s'",
                             value);
      else if (json_object_set_new (params, "readonly",
                                    json_boolean (strcmp (value, "on") == 0)))
        r = cli_error (cli, EXIT_FAIL, "out of memory");
    }
    else if (klen == 5 && memcmp (argv[i], "quota", 5) == 0) {
      quota = 0;
      if (strcmp (value, "none") != 0 && units_parse_size (value, &quota) < 0)
        r = cli_usage_error (cli, "quota must be a size (e.g. 100G) or 'none', "
                             "not '%s'", value);
      else if (json_object_set_new (params, "quota",
                                    json_integer ((json_int_t) quota)))
        r = cli_error (cli, EXIT_FAIL, "out of memory");
    }
    else if (memchr (argv[i], ':', (size_t) klen)) {
      char key[VOL_PROP_KEY_MAX + 1];

      snprintf (key, sizeof key, "%.*s", klen, argv[i]);
      /* An empty value removes the property. */
      if (json_object_set_new (props, key, *value ? json_string (value) : json_null ()))
        r = cli_error (cli, EXIT_FAIL, "out of memory");
    }
    else
      r = cli_usage_error (cli, "unknown property '%.*s': set readonly, quota, "
                           "or a user property module:name", klen, argv[i]);
    if (r >= 0) {
      json_decref (params);
      json_decref (props);
      return r;
    }
  }
  if (params && props && json_object_size (props) > 0)
    json_object_set (params, "properties", props);
  json_decref (props);
  r = cli_call (cli, true, "volume.set", params, &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK) {
    const char *key;
    json_t *v;
    char q[UNITS_FORMAT_MAX];
    json_int_t quota = json_integer_value (json_object_get (res, "quota"));

    if (quota > 0)
      units_format ((uint64_t) quota, q);
    printf ("volume %s: readonly=%s quota=%s", jstr (res, "name"),
            json_is_true (json_object_get (res, "readonly")) ? "on" : "off",
            quota > 0 ? q : "none");
    json_object_foreach (json_object_get (res, "properties"), key, v)
      printf (" %s=%s", key, json_string_value (v));
    printf ("\n");
  }
  json_decref (res);
  return r;
}

/* cairn volume rollback VOL@SNAP KEEP_AS */
static int
cmd_volume_rollback (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@SNAP", "KEEP_AS" };
  char vol[VOL_NAME_MAX + 1];
  const char *at;
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  at = strchr (argv[optind], '@');
  if (at == NULL || at == argv[optind] || at[1] == '\0' ||
      (size_t) (at - argv[optind]) > VOL_NAME_MAX)
    return cli_usage_error (cli, "'%s' is not VOL@SNAP", argv[optind]);
  snprintf (vol, sizeof vol, "%.*s", (int) (at - argv[optind]), argv[optind]);
  r = cli_call (cli, true, "volume.rollback",
                json_pack ("{s:s, s:s, s:s}", "name", vol, "snapshot", at + 1,
                           "keep_as", argv[optind + 1]), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("rolled %s back to %s; its previous state and snapshots are now %s\n",
            vol, argv[optind], argv[optind + 1]);
  json_decref (res);
  return r;
}

const struct command cli_volume_commands[] = {
  { "volume create", "create a volume", "NAME SIZE [--json]",
"Create an empty (thin) volume NAME of SIZE bytes: a disk that reads as\n"
"zeros and takes space only as it is written.  NAME is a path of\n"
"components of letters, digits, '.', '_' and '-' joined by '/'\n"
"(tenant/db); SIZE a multiple of 512 bytes, with a unit (10G).\n"
"\n"
"  -j, --json            print the new volume as JSON\n",
    cmd_volume_create, NULL, CMD_ONLINE },
  { "volume list", "list the volumes (and snapshots)",
    "[--snapshots] [--json]",
"List every volume, in name order: its size, the data it references, when\n"
"it was created, whether it is read-only and, for a clone, its origin.\n"
"\n"
"  -s, --snapshots       list each volume's snapshots after it\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_volume_list, NULL, CMD_ONLINE },
  { "volume show", "describe a volume or a snapshot", "NAME [--json]",
"Describe volume NAME, with its snapshots and its clones, or snapshot\n"
"NAME@SNAP, with its clones.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_volume_show, NULL, CMD_ONLINE },
  { "volume delete", "delete a volume", "NAME [--recursive] [--json]",
"Delete volume NAME and free the space only it holds.  A volume that has\n"
"snapshots is deleted only with --recursive, which deletes them too.  A\n"
"volume that clones started from disappears at once, but its blocks stay\n"
"until its last clone is deleted.\n"
"\n"
"  -r, --recursive       delete the volume's snapshots too\n"
"  -j, --json            print the method's result (null) as JSON\n",
    cmd_volume_delete, NULL, CMD_ONLINE },
  { "volume rename", "rename a volume", "NAME NEW [--json]",
"Rename volume NAME to NEW; its snapshots follow it.\n"
"\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_rename, NULL, CMD_ONLINE },
  { "volume resize", "grow or shrink a volume", "NAME SIZE [--force] [--json]",
"Set the size of volume NAME.  Growing adds zeros at the end; shrinking\n"
"discards the data past the new end, so it needs --force.\n"
"\n"
"  -f, --force           allow shrinking\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_resize, NULL, CMD_ONLINE },
  { "volume set", "change a volume's properties",
    "NAME PROPERTY=VALUE... [--json]",
"Change properties of volume NAME:\n"
"  readonly=on|off       a read-only volume is exported read-only\n"
"  quota=SIZE|none       bound on its data plus what its snapshots keep\n"
"  module:name=VALUE     a user property (an empty VALUE removes it)\n"
"Each setting is applied in turn; a failure leaves the earlier ones set.\n"
"\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_set, NULL, CMD_ONLINE },
  { "volume rollback", "roll a volume back to a snapshot",
    "VOL@SNAP KEEP_AS [--json]",
"Make VOL a writable clone of its snapshot SNAP.  Nothing is lost: the\n"
"volume as it was, with all its snapshots, is renamed KEEP_AS (delete it\n"
"recursively when it is no longer wanted).  VOL must not be open.\n"
"\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_rollback, NULL, CMD_ONLINE },
  { .name = NULL },
};

/* ---------------------------------------------------------------- snapshot */

/* cairn snapshot create VOL[,VOL...] NAME | VOL@NAME */
static int
cmd_snapshot_create (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@NAME (or VOL[,VOL...] NAME)" };
  char *vols = NULL;
  const char *name;
  struct opts o;
  json_t *params = NULL, *arr, *res = NULL, *v;
  size_t i;
  int r = parse_opts (cli, argc, argv, "", 1, 2, names, &o);

  if (r >= 0)
    return r;
  if (argc - optind == 1) {
    r = split_snapshot (cli, argv[optind], &vols, &name);
    if (r != 0)
      return r;
  }
  else {
    vols = strdup (argv[optind]);
    name = argv[optind + 1];
    if (vols == NULL)
      return cli_error (cli, EXIT_FAIL, "out of memory");
  }
  arr = json_array ();
  for (char *p = vols, *comma; arr && p; p = comma ? comma + 1 : NULL) {
    comma = strchr (p, ',');
    if (comma)
      *comma = '\0';
    if (*p == '\0') {
      r = cli_usage_error (cli, "an empty volume name in '%s'", argv[optind]);
      goto out;
    }
    if (json_array_append_new (arr, json_string (p)) < 0) {
      json_decref (arr);
      arr = NULL;
    }
  }
  if (arr && json_array_size (arr) == 1)
    params = json_pack ("{s:O, s:s}", "volume", json_array_get (arr, 0),
                        "name", name);
  else if (arr)
    params = json_pack ("{s:O, s:s}", "volumes", arr, "name", name);
  r = cli_call (cli, true, "snapshot.create", params, &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    json_array_foreach (json_object_get (res, "snapshots"), i, v)
      printf ("created snapshot %s\n", jstr (v, "name"));

 out:
  json_decref (res);
  json_decref (arr);
  free (vols);
  return r;
}

/* cairn snapshot list VOL */
static int
cmd_snapshot_list (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL" };
  struct opts o;
  json_t *res, *snaps;
  int r = parse_opts (cli, argc, argv, "", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "snapshot.list",
                json_pack ("{s:s}", "volume", argv[optind]), &res);
  if (r != EXIT_OK)
    return r;
  snaps = json_object_get (res, "snapshots");
  if (o.json)
    r = print_json (cli, res);
  else if (json_array_size (snaps) == 0)
    printf ("volume %s has no %ssnapshots\n", argv[optind],
            json_array_size (json_object_get (res, "damaged")) ? "readable "
            : "");
  else
    r = print_volume_table (cli, snaps);
  warn_damaged (cli, res);
  json_decref (res);
  return r;
}

/* cairn snapshot delete VOL@NAME */
static int
cmd_snapshot_delete (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@NAME" };
  const char *name;
  char *vol;
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = split_snapshot (cli, argv[optind], &vol, &name);
  if (r != 0)
    return r;
  r = cli_call (cli, true, "snapshot.delete",
                json_pack ("{s:s, s:s}", "volume", vol, "name", name), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("deleted snapshot %s\n", argv[optind]);
  json_decref (res);
  free (vol);
  return r;
}

/* cairn snapshot rename VOL@NAME NEW */
static int
cmd_snapshot_rename (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@NAME", "NEW" };
  const char *name, *to;
  char *vol;
  struct opts o;
  json_t *res = NULL;
  size_t vlen;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  r = split_snapshot (cli, argv[optind], &vol, &name);
  if (r != 0)
    return r;
  /* NEW may be written VOL@NEW, for the same VOL. */
  to = argv[optind + 1];
  vlen = strlen (vol);
  if (strncmp (to, vol, vlen) == 0 && to[vlen] == '@')
    to += vlen + 1;
  else if (strchr (to, '@')) {
    r = cli_usage_error (cli, "'%s': a snapshot stays with its volume: give "
                         "NEW or %s@NEW", to, vol);
    goto out;
  }
  r = cli_call (cli, true, "snapshot.rename",
                json_pack ("{s:s, s:s, s:s}", "volume", vol, "name", name,
                           "to", to), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("renamed snapshot %s to %s\n", argv[optind], jstr (res, "name"));

 out:
  json_decref (res);
  free (vol);
  return r;
}

/* cairn snapshot space VOL@NAME */
static int
cmd_snapshot_space (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@NAME" };
  const char *name;
  char *vol;
  struct opts o;
  json_t *res;
  int r = parse_opts (cli, argc, argv, "", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = split_snapshot (cli, argv[optind], &vol, &name);
  if (r != 0)
    return r;
  r = cli_call (cli, false, "snapshot.space",
                json_pack ("{s:s, s:s}", "volume", vol, "name", name), &res);
  free (vol);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK) {
    field ("snapshot", jstr (res, "name"));
    field_size ("referenced", res, "referenced");
    field_size ("unique", res, "unique");
    field_size ("written since", res, "written_since");
  }
  json_decref (res);
  return r;
}

const struct command cli_snapshot_commands[] = {
  { "snapshot create", "snapshot one or several volumes at once",
    "VOL@NAME | VOL[,VOL...] NAME [--json]",
"Snapshot volume VOL as VOL@NAME: its state with every write acknowledged\n"
"before the command, read-only from then on.  Several volumes separated\n"
"by commas are snapshotted together, in one instant (all or none): a\n"
"consistent point of a machine with several disks.\n"
"\n"
"  -j, --json            print the new snapshots as JSON\n",
    cmd_snapshot_create, NULL, CMD_ONLINE },
  { "snapshot list", "list a volume's snapshots", "VOL [--json]",
"List the snapshots of volume VOL, oldest first.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_snapshot_list, NULL, CMD_ONLINE },
  { "snapshot delete", "delete a snapshot", "VOL@NAME [--json]",
"Delete snapshot NAME of volume VOL and free what only it kept ('cairn\n"
"snapshot space' tells how much that is).\n"
"\n"
"  -j, --json            print the method's result (null) as JSON\n",
    cmd_snapshot_delete, NULL, CMD_ONLINE },
  { "snapshot rename", "rename a snapshot", "VOL@NAME NEW [--json]",
"Rename snapshot NAME of volume VOL to NEW (VOL@NEW is accepted too).\n"
"\n"
"  -j, --json            print the snapshot as JSON\n",
    cmd_snapshot_rename, NULL, CMD_ONLINE },
  { "snapshot space", "show the space a snapshot holds", "VOL@NAME [--json]",
"Show the data snapshot VOL@NAME references, the part of it that only it\n"
"keeps (what deleting it would free), and the data the volume has written\n"
"since it was taken.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_snapshot_space, NULL, CMD_ONLINE },
  { .name = NULL },
};

/* ---------------------------------------------------------------- others */

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

/* cairn status */
int
cmd_status (const struct cli *cli, int argc, char **argv)
{
  char buf[128], s[UNITS_FORMAT_MAX];
  struct opts o;
  json_t *res, *cache;
  uint64_t hits, misses;
  size_t ndamaged;
  int r = parse_opts (cli, argc, argv, "", 0, 0, NULL, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, false, "pool.status", json_object (), &res);
  if (r != EXIT_OK)
    return r;
  /* Damaged records make the status fail, so that scripts notice. */
  ndamaged = json_array_size (json_object_get (res, "damaged"));
  if (o.json) {
    r = print_json (cli, res);
    json_decref (res);
    return r == EXIT_OK && ndamaged ? EXIT_FAIL : r;
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
  field_size ("reserve", res, "reserve");
  hits = jnum (cache, "hits");
  misses = jnum (cache, "misses");
  snprintf (buf, sizeof buf, "%s in %" PRIu64 " %s, %" PRIu64 "%% hits",
            jsize (cache, "bytes", s), jnum (cache, "nodes"),
            jnum (cache, "nodes") == 1 ? "node" : "nodes",
            hits + misses ? hits * 100 / (hits + misses) : 100);
  field ("cache", buf);
  {
    json_t *rc = json_object_get (res, "reclaim");
    const char *err = json_string_value (json_object_get (rc, "error"));

    if (jnum (rc, "volumes") + jnum (rc, "snapshots") > 0 || (err && *err)) {
      snprintf (buf, sizeof buf, "%" PRIu64 " deleted volume(s) and %" PRIu64
                " snapshot(s) giving space back, %s freed so far%s%s",
                jnum (rc, "volumes"), jnum (rc, "snapshots"),
                jsize (rc, "freed", s), err && *err ? "; stopped: " : "",
                err ? err : "");
      field ("reclaim", buf);
    }
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
  field_damaged (res);
  if (json_is_true (json_object_get (res, "failed")))
    field ("state", "FAILED: writes fail until the pool is reopened (restart "
           "the server); check the device");
  else if (ndamaged) {
    snprintf (buf, sizeof buf, "DEGRADED: %zu damaged catalog record%s "
              "(above)", ndamaged, ndamaged == 1 ? "" : "s");
    field ("state", buf);
    field ("", DAMAGE_HINT);
  }
  /* With --pool this command itself opened the pool read-only. */
  else if (json_is_true (json_object_get (res, "readonly")) && !cli->pool)
    field ("state", "ok, served read-only");
  else
    field ("state", "ok");
  json_decref (res);
  return ndamaged ? EXIT_FAIL : EXIT_OK;
}
