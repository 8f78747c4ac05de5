/* cairn: the "volume" subcommands (cairn volume create, list, show,
 * delete, rename, resize, set, rollback), which call the volume.* control
 * methods.  How an online subcommand parses its words and prints its
 * result is in online.c.
 */
#include <config.h>

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "units.h"
#include "volume.h"

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
  if (json_object_get (res, "held_by_snapshots")) {
    field_size ("kept by snaps", res, "held_by_snapshots");
    field_size ("kept by ckpts", res, "held_by_checkpoints");
  }
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
  json_t *params, *props, *ckpt, *res;
  int r = parse_opts (cli, argc, argv, "", 2, 64, names, &o);

  if (r >= 0)
    return r;
  params = json_pack ("{s:s}", "name", argv[optind]);
  props = json_object ();
  ckpt = json_object ();
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
    else if (cli_checkpoint_key (argv[i], (size_t) klen)) {
      char key[32];

      snprintf (key, sizeof key, "%.*s", klen, argv[i]);
      if (json_object_set_new (ckpt, key, strcmp (value, "inherit") == 0
                               ? json_null () : json_string (value)))
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
                           "a checkpoint setting (cairn checkpoint set --help) "
                           "or a user property module:name", klen, argv[i]);
    if (r >= 0) {
      json_decref (params);
      json_decref (props);
      json_decref (ckpt);
      return r;
    }
  }
  if (params && props && json_object_size (props) > 0)
    json_object_set (params, "properties", props);
  json_decref (props);
  /* Checkpoint settings go to checkpoint.set first. */
  if (json_object_size (ckpt) > 0) {
    r = cli_call (cli, true, "checkpoint.set",
                  json_pack ("{s:s, s:O}", "volume", argv[optind],
                             "settings", ckpt), &res);
    if (r == EXIT_OK && !o.json)
      cli_print_checkpoint_settings (argv[optind], res);
    json_decref (res);
    if (r != EXIT_OK || (json_object_size (params) == 1 && !o.json)) {
      json_decref (ckpt);
      json_decref (params);
      return r;
    }
  }
  json_decref (ckpt);
  if (json_object_size (params) == 1)
    json_object_set_new (params, "properties", json_object ());
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
    printf ("rolled %s back to %s; its previous state and later snapshots are now %s\n",
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
"  checkpoints=on|off|inherit, keep-within=DURATION, keep-last=N,\n"
"  keep-hourly=N, ...    checkpoint settings (cairn checkpoint set)\n"
"Each setting is applied in turn; a failure leaves the earlier ones set.\n"
"\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_set, NULL, CMD_ONLINE },
  { "volume rollback", "roll a volume back to a snapshot",
    "VOL@SNAP KEEP_AS [--json]",
"Make VOL read as its snapshot SNAP again (or a checkpoint: VOL@#GEN,\n"
"VOL@TIME).  VOL keeps its settings and its snapshots and checkpoints up\n"
"to SNAP, so incremental sends and replication from them go on.  Nothing is\n"
"lost: the volume as it was, with its later snapshots, becomes KEEP_AS, a\n"
"clone of VOL@SNAP (delete it recursively when it is no longer wanted).\n"
"VOL must not be open.\n"
"\n"
"  -j, --json            print the volume as JSON\n",
    cmd_volume_rollback, NULL, CMD_ONLINE },
  { .name = NULL },
};
