/* cairn: the "checkpoint" subcommands (cairn checkpoint list, promote,
 * prune, set), which call the checkpoint.* control methods.  A checkpoint
 * is named VOL@#GEN, or found by time as VOL@YYYY-MM-DDTHH:MM:SSZ (UTC):
 * the listings print times in that form so that they can be pasted.
 */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* A byte count as "12.0M (12582912)" into buf. */
static const char *
bytes (json_t *obj, const char *key, char buf[UNITS_FORMAT_MAX])
{
  json_int_t v = json_integer_value (json_object_get (obj, key));

  return units_format ((uint64_t) (v < 0 ? 0 : v), buf);
}

/* cairn checkpoint list VOL [--since TIME] [--until TIME] */
static int
cmd_checkpoint_list (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL" };
  struct opts o;
  json_t *params, *res = NULL, *arr, *v, *st;
  size_t i;
  int r = parse_opts (cli, argc, argv, "SU", 1, 1, names, &o);

  if (r >= 0)
    return r;
  params = json_pack ("{s:s}", "volume", argv[optind]);
  if (params && o.since)
    json_object_set_new (params, "since", json_string (o.since));
  if (params && o.until)
    json_object_set_new (params, "until", json_string (o.until));
  r = cli_call (cli, false, "checkpoint.list", params, &res);
  if (r != EXIT_OK || o.json) {
    if (r == EXIT_OK)
      r = print_json (cli, res);
    json_decref (res);
    return r;
  }
  arr = json_object_get (res, "checkpoints");
  st = json_object_get (res, "settings");
  printf ("%-28s %-20s %10s %10s  %s\n", "CHECKPOINT", "TIME (UTC)",
          "WRITTEN", "FREES", "KEPT BY");
  json_array_foreach (arr, i, v) {
    char w[UNITS_FORMAT_MAX], u[UNITS_FORMAT_MAX], why[64] = "";
    json_t *k;
    size_t j;

    json_array_foreach (json_object_get (v, "kept_by"), j, k) {
      if (why[0])
        strcat (why, ",");
      strncat (why, json_string_value (k), sizeof why - strlen (why) - 8);
    }
    if (json_is_string (json_object_get (v, "snapshot"))) {
      size_t len = strlen (why);

      snprintf (why + len, sizeof why - len, " (@%s)",
                jstr (v, "snapshot"));
    }
    printf ("%-28s %-20s %10s %10s  %s\n", jstr (v, "name"), jstr (v, "ctime"),
            bytes (v, "written", w), bytes (v, "unique", u),
            why[0] ? why : "policy");
  }
  {
    char u[UNITS_FORMAT_MAX];

    printf ("%zu checkpoint%s holding %s; checkpoints=%s (%s), retention %s "
            "(%s)\n", json_array_size (arr),
            json_array_size (arr) == 1 ? "" : "s", bytes (res, "unique", u),
            jstr (st, "checkpoints"), jstr (st, "checkpoints_from"),
            jstr (st, "retention"), jstr (st, "retention_from"));
  }
  json_decref (res);
  return EXIT_OK;
}

/* cairn checkpoint promote VOL@#GEN|VOL@TIME NAME */
static int
cmd_checkpoint_promote (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL@#GEN (or VOL@TIME)", "NAME" };
  struct opts o;
  json_t *res = NULL;
  int r = parse_opts (cli, argc, argv, "", 2, 2, names, &o);

  if (r >= 0)
    return r;
  if (strchr (argv[optind], '@') == NULL)
    return cli_usage_error (cli, "'%s' is not a checkpoint: write VOL@#GEN "
                            "or VOL@YYYY-MM-DDTHH:MM:SSZ", argv[optind]);
  r = cli_call (cli, true, "checkpoint.promote",
                json_pack ("{s:s, s:s}", "checkpoint", argv[optind],
                           "name", argv[optind + 1]), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    printf ("promoted %s to snapshot %s (generation %lld)\n", argv[optind],
            jstr (res, "name"),
            (long long) json_integer_value (json_object_get (res,
                                                            "generation")));
  json_decref (res);
  return r;
}

/* cairn checkpoint prune VOL [--dry-run] */
static int
cmd_checkpoint_prune (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL" };
  struct opts o;
  json_t *res = NULL, *v;
  size_t i, kept = 0;
  int r = parse_opts (cli, argc, argv, "n", 1, 1, names, &o);

  if (r >= 0)
    return r;
  r = cli_call (cli, !o.dry_run, "checkpoint.prune",
                json_pack ("{s:s, s:b}", "volume", argv[optind],
                           "dry_run", (int) o.dry_run), &res);
  if (r != EXIT_OK || o.json) {
    if (r == EXIT_OK)
      r = print_json (cli, res);
    json_decref (res);
    return r;
  }
  json_array_foreach (json_object_get (res, "checkpoints"), i, v) {
    printf ("%-28s %-20s %s\n", jstr (v, "name"), jstr (v, "ctime"),
            jstr (v, "mark"));
    kept += json_is_true (json_object_get (v, "keep"));
  }
  printf ("%s %lld checkpoint%s, kept %zu\n",
          o.dry_run ? "would remove" : "removed",
          (long long) json_integer_value (json_object_get (res, "removed")),
          json_integer_value (json_object_get (res, "removed")) == 1 ? "" : "s",
          kept);
  json_decref (res);
  return EXIT_OK;
}

/* Is key a checkpoint setting (for `cairn volume set` too)? */
bool
cli_checkpoint_key (const char *key, size_t klen)
{
  static const char *const keys[] = {
    "checkpoints", "retention", "keep-within", "keep-last", "keep-minutely",
    "keep-hourly", "keep-daily", "keep-weekly", "keep-monthly",
    "commit-interval", "space-threshold",
  };

  for (size_t i = 0; i < ARRAY_SIZE (keys); i++)
    if (strlen (keys[i]) == klen && memcmp (keys[i], key, klen) == 0)
      return true;
  return false;
}

/* Print the settings object a checkpoint.set returns. */
void
cli_print_checkpoint_settings (const char *what, json_t *st)
{
  printf ("%s: checkpoints=%s (%s), retention %s (%s)", what,
          jstr (st, "checkpoints"), jstr (st, "checkpoints_from"),
          jstr (st, "retention"), jstr (st, "retention_from"));
  if (json_is_string (json_object_get (st, "commit_interval")))
    printf (", commit-interval=%s (%s), space-threshold=%s (%s)",
            jstr (st, "commit_interval"), jstr (st, "commit_interval_from"),
            jstr (st, "space_threshold"), jstr (st, "space_threshold_from"));
  putchar ('\n');
}

/* cairn checkpoint set VOL|--default KEY=VALUE... */
static int
cmd_checkpoint_set (const struct cli *cli, int argc, char **argv)
{
  static const char *const names[] = { "VOL (or --default)", "KEY=VALUE" };
  struct opts o;
  json_t *settings, *res = NULL;
  int first, r = parse_opts (cli, argc, argv, "D", 1, 64, names, &o);

  if (r >= 0)
    return r;
  first = o.pool_default ? optind : optind + 1;
  if (first >= argc)
    return cli_usage_error (cli, "missing KEY=VALUE");
  settings = json_object ();
  for (int i = first; settings && i < argc; i++) {
    const char *eq = strchr (argv[i], '=');
    char key[32];

    if (eq == NULL || !cli_checkpoint_key (argv[i], (size_t) (eq - argv[i]))) {
      json_decref (settings);
      return cli_usage_error (cli, "'%s' is not a checkpoint setting: give "
                              "checkpoints=on|off|inherit, retention=inherit, "
                              "keep-within|keep-last|keep-minutely|"
                              "keep-hourly|keep-daily|keep-weekly|"
                              "keep-monthly=VALUE, or for the pool "
                              "commit-interval=DURATION|inherit or "
                              "space-threshold=PERCENT|inherit", argv[i]);
    }
    snprintf (key, sizeof key, "%.*s", (int) (eq - argv[i]), argv[i]);
    json_object_set_new (settings, key, strcmp (eq + 1, "inherit") == 0
                         ? json_null () : json_string (eq + 1));
  }
  r = cli_call (cli, true, "checkpoint.set",
                o.pool_default
                ? json_pack ("{s:o}", "settings", settings)
                : json_pack ("{s:s, s:o}", "volume", argv[optind],
                             "settings", settings), &res);
  if (r == EXIT_OK && o.json)
    r = print_json (cli, res);
  else if (r == EXIT_OK)
    cli_print_checkpoint_settings (o.pool_default ? "pool default"
                                   : argv[optind], res);
  json_decref (res);
  return r;
}

const struct command cli_checkpoint_commands[] = {
  { "checkpoint list", "list a volume's checkpoints",
    "VOL [--since TIME] [--until TIME] [--json]",
"List the checkpoints kept of volume VOL, oldest first: every commit that\n"
"changed it is one, kept by the volume's retention policy.  Each is an\n"
"export, VOL@#GEN, found by time too (VOL@YYYY-MM-DDTHH:MM:SSZ, the newest\n"
"at or before it).  WRITTEN is what its generation wrote, FREES what\n"
"dropping it would give back, KEPT BY what keeps it beyond the policy (a\n"
"snapshot, a clone, a client that has it open).  TIME is UTC.\n"
"\n"
"  -S, --since TIME      only checkpoints at or after TIME (UTC)\n"
"  -U, --until TIME      only checkpoints at or before TIME (UTC)\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_checkpoint_list, NULL, CMD_ONLINE },
  { "checkpoint promote", "make a checkpoint a snapshot",
    "VOL@#GEN|VOL@TIME NAME [--json]",
"Make the checkpoint VOL@#GEN (or the newest at or before VOL@TIME) the\n"
"snapshot VOL@NAME, with the checkpoint's time.  A snapshot is never\n"
"collected.\n"
"\n"
"  -j, --json            print the snapshot as JSON\n",
    cmd_checkpoint_promote, NULL, CMD_ONLINE },
  { "checkpoint prune", "apply a volume's retention policy now",
    "VOL [--dry-run] [--json]",
"Mark every checkpoint of VOL with what the retention policy decides\n"
"(remove, keep-within, keep-last, keep-minutely, keep-hourly, keep-daily,\n"
"keep-weekly, keep-monthly, or protected: a snapshot, a clone or an open\n"
"client keeps it), and drop the ones marked remove.  The collector does\n"
"this in the background every minute.\n"
"\n"
"  -n, --dry-run         only show what would be removed\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_checkpoint_prune, NULL, CMD_ONLINE },
  { "checkpoint set", "change checkpoint settings",
    "VOL|--default KEY=VALUE... [--json]",
"Change the checkpoint settings of volume VOL, or with --default the\n"
"pool's, which volumes without their own follow:\n"
"  checkpoints=on|off|inherit   take checkpoints of the volume\n"
"  keep-within=DURATION         keep every checkpoint younger (1h, 90m, 7d)\n"
"  keep-last=N                  keep the N newest\n"
"  keep-minutely|keep-hourly|keep-daily|keep-weekly|keep-monthly=N\n"
"                               keep the newest of each of the N newest\n"
"                               minutes, hours, days, ISO weeks, months (UTC)\n"
"  retention=inherit            drop the volume's policy for the pool's\n"
"  commit-interval=DURATION|inherit\n"
"                               the pool's alone: commit at least this often\n"
"                               while volumes change (1s to 1h, default 5s),\n"
"                               so checkpoints are at most that far apart\n"
"  space-threshold=PERCENT|inherit\n"
"                               the pool's alone: below this share of free\n"
"                               space (1% to 50%, default 5%) checkpoints go\n"
"                               beyond the policy, oldest first\n"
"`cairn volume set VOL KEY=VALUE` takes the same settings.\n"
"\n"
"  -D, --default         change the pool's defaults\n"
"  -j, --json            print the settings as JSON\n",
    cmd_checkpoint_set, NULL, CMD_ONLINE },
  { .name = NULL },
};
