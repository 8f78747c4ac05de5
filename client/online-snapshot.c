/* cairn: the "snapshot" subcommands (cairn snapshot create, list, delete,
 * rename, space), which call the snapshot.* control methods and name a
 * snapshot VOL@NAME.  How an online subcommand parses its words and prints
 * its result is in online.c.
 */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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
