/* cairn: the command that manages Cairn pools, volumes and snapshots.
 *
 * One table of subcommands.  Offline subcommands open a pool through the
 * engine directly.  Online ones call control methods: on a running server
 * over its control socket, or, with --pool PATH, in-process on a stopped
 * pool through the very same method tables (call.c).  `volume` and
 * `snapshot` are groups whose first word names a subcommand of their own
 * table.
 *
 * The command line is `cairn [GLOBAL OPTIONS] COMMAND [ARGS]`: global
 * options stop at the first word that is not one, which names the command;
 * the command parses the rest itself, getopt style, with argv[0] set to
 * "cairn COMMAND" (or "cairn GROUP SUBCOMMAND") so that getopt's own
 * messages name it.
 *
 * Exit codes: 0 success, 1 failure reported by the engine or server,
 * 2 usage error, 3 not found (cli.h).
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int cmd_help (const struct cli *cli, int argc, char **argv);
static int cmd_version (const struct cli *cli, int argc, char **argv);

static const struct command commands[] = {
  { "help", "show the subcommands, or how to use one", "[COMMAND]",
    "Without COMMAND, list the subcommands; with it, show its usage.\n",
    cmd_help, NULL, CMD_OTHER },
  { "version", "print the version", "", "Print the version of cairn.\n",
    cmd_version, NULL, CMD_OTHER },
  { "mkpool", "create a pool on a file or a block device",
    "PATH... --size SIZE [--data PROFILE] [--metadata PROFILE]\n"
"       [--node-size SIZE] [--preallocate MODE] [--force]",
"Create a new, empty pool.  A missing PATH is created as a sparse file of\n"
"SIZE; an existing block device is formatted whole; an existing file is\n"
"only overwritten with --force.  Several PATHs (or a profile) make a pool\n"
"of several devices, whose copies of each block the profile places: open\n"
"it later with --pool PATH,PATH,...\n"
"\n"
"  -s, --size SIZE         pool size, e.g. 64M, 8G, 1T (bytes without a unit);\n"
"                          with several PATHs, the size of each new file\n"
"      --data PROFILE      single, dup, mirror, mirror3, stripe or\n"
"                          stripe-mirror (default: mirror on two or more\n"
"                          devices, dup on one)\n"
"      --metadata PROFILE  the same; data and metadata share one profile\n"
"                          for now, so the two must agree\n"
"  -n, --node-size SIZE    metadata node size: 4K, 8K, 16K (default), 32K, 64K\n"
"  -p, --preallocate MODE  a file's space in its filesystem: off (sparse,\n"
"                          the default), space (reserved: no write can fail\n"
"                          for want of host space), full (reserved and\n"
"                          written with zeros: first writes cost no more\n"
"                          than overwrites, as on a block device)\n"
"  -f, --force             overwrite an existing file or pool; with --size,\n"
"                          resize an existing file first\n",
    cmd_mkpool, NULL, CMD_OFFLINE },
  { "fsck", "check a stopped pool", "PATH [--quiet] [--scrub]",
"Check every tree and node of the pool and audit its space.  The pool must\n"
"not be in use by a server.  Exits 0 when the pool is clean, 1 when it is\n"
"not.\n"
"\n"
"  -q, --quiet           print only the problems found\n"
"  -s, --scrub           also read every copy of every superblock, node and\n"
"                        data block, and rewrite damaged copies from good\n"
"                        ones (opens the pool writable)\n",
    cmd_fsck, NULL, CMD_OFFLINE },
  { "info", "describe a stopped pool", "PATH [--json]",
"Show the pool's UUID, generation, node size, size and space use.\n"
"\n"
"  -j, --json            print one JSON object\n",
    cmd_info, NULL, CMD_OFFLINE },
  { "send", "write a snapshot to standard output as a stream",
    "VOL@SNAP [--from SNAP] [--resume TOKEN] [--dry-run] [--progress WHEN]",
"Write snapshot VOL@SNAP (or checkpoint VOL@#GEN) as a send stream\n"
"(cairn-stream(5)) to standard output, which must not be a terminal: all of\n"
"its data, or with --from the changes since an older snapshot or checkpoint\n"
"of the same volume.  Through the running server, or with --pool PATH\n"
"in-process on a stopped pool.\n"
"\n"
"  -f, --from SNAP       send the changes since SNAP (or VOL@SNAP): an\n"
"                        incremental stream\n"
"  -r, --resume TOKEN    continue the stream whose receive was interrupted\n"
"                        and gave out TOKEN\n"
"  -n, --dry-run         write nothing: print the size the stream would have\n"
"      --progress WHEN   auto (text on a terminal), text, json or none:\n"
"                        progress on standard error\n",
    cmd_send, NULL, CMD_ONLINE },
  { "receive", "make a snapshot from a stream on standard input",
    "VOL [--rollback] [--abort | --token] [--progress WHEN] [--json]",
"Read a send stream from standard input into volume VOL: a full stream\n"
"creates VOL (which must not exist); an incremental one applies to VOL,\n"
"whose newest snapshot must be the stream's base and which must not have\n"
"been written since (unless --rollback).  Nothing changes until the whole\n"
"stream has been verified; then VOL@SNAP appears (named as on the sender)\n"
"and VOL holds it.  A receive cut short keeps its progress and prints a\n"
"token: 'cairn send --resume TOKEN' continues it.  Through the running\n"
"server, or with --pool PATH in-process on a stopped pool.\n"
"\n"
"      --rollback        the base may be any snapshot of VOL: when the\n"
"                        stream has been verified, VOL is rolled back to it\n"
"                        first, discarding VOL's writes since the base and\n"
"                        destroying its snapshots newer than the base (it\n"
"                        says which, on a line 'rolled back VOL to ...')\n"
"  -a, --abort           discard VOL's interrupted receive\n"
"  -t, --token           print the token of VOL's interrupted receive\n"
"      --progress WHEN   auto (text on a terminal), text, json or none\n"
"  -j, --json            print the result (what was received, what a\n"
"                        rollback discarded) as JSON\n",
    cmd_receive, NULL, CMD_ONLINE },
  { "replicate", "send a snapshot to another server",
    "VOL@SNAP --to HOST[:PORT] [--from SNAP] [--rollback] [--tls | --no-tls] "
    "[--progress WHEN] [--json]",
"Send snapshot VOL@SNAP from this server to the server at HOST (its\n"
"control port, control-tcp=; default port 10810) into its volume VOL,\n"
"with every snapshot of VOL between the newest one HOST has (or --from)\n"
"and SNAP, oldest first, as a chain of incremental streams (a full stream\n"
"of VOL's oldest snapshot first when HOST has no VOL).  Run it again after\n"
"an interruption: it resumes where the receiver stopped.\n"
"\n"
"  -t, --to HOST[:PORT]  the receiving server ([ADDR]:PORT for IPv6)\n"
"  -f, --from SNAP       the base snapshot (default: the newest on HOST)\n"
"      --rollback        start from the newest snapshot both servers have,\n"
"                        rolling HOST's VOL back to it (its newer snapshots\n"
"                        and writes since are discarded, and it says which)\n"
"      --tls, --no-tls   connect to HOST with TLS or without (default: TLS\n"
"                        when this server has control TLS keys)\n"
"      --progress WHEN   auto (text on a terminal), text, json or none\n"
"  -j, --json            print the result as JSON\n",
    cmd_replicate, NULL, CMD_ONLINE },
  { "pull", "bring a volume's new snapshots from another server",
    "HOST[:PORT] VOL [--rollback] [--tls | --no-tls] [--progress WHEN] "
    "[--json]",
"Bring every snapshot of VOL on the server at HOST (its control port,\n"
"control-tcp=; default port 10810) that is newer than the newest one both\n"
"servers have, as a chain of incremental streams (or a full stream of the\n"
"oldest first, when this server has no VOL).  Run it again after an\n"
"interruption: it resumes where this server stopped.\n"
"\n"
"      --rollback        roll VOL here back to the newest snapshot both\n"
"                        servers have, discarding its newer snapshots and\n"
"                        its writes since (VOL mirrors HOST's; it says\n"
"                        which)\n"
"      --tls, --no-tls   connect to HOST with TLS or without (default: TLS\n"
"                        when this server has control TLS keys)\n"
"      --progress WHEN   auto (text on a terminal), text, json or none\n"
"  -j, --json            print the result as JSON\n",
    cmd_pull, NULL, CMD_ONLINE },
  { "job", "list and cancel the server's running jobs", "SUBCOMMAND [ARGS]",
    "", cli_run_group, cli_job_commands, CMD_ONLINE },
  { "volume", "create, list, show, change and delete volumes",
    "SUBCOMMAND [ARGS]", "", cli_run_group, cli_volume_commands, CMD_ONLINE },
  { "snapshot", "create, list, rename and delete snapshots",
    "SUBCOMMAND [ARGS]", "", cli_run_group, cli_snapshot_commands, CMD_ONLINE },
  { "checkpoint", "list, promote and prune continuous checkpoints",
    "SUBCOMMAND [ARGS]", "", cli_run_group, cli_checkpoint_commands,
    CMD_ONLINE },
  { "scrub", "check every copy of every block online, and repair",
    "SUBCOMMAND [ARGS]", "", cli_run_group, cli_scrub_commands, CMD_ONLINE },
  { "device", "replace a device of a pool of several",
    "SUBCOMMAND [ARGS]", "", cli_run_group, cli_device_commands, CMD_ONLINE },
  { "clone", "make a writable volume from a volume or a snapshot",
    "SOURCE NAME [--json]",
"Create volume NAME as a writable clone of SOURCE: a volume (its state\n"
"now), a snapshot VOL@SNAP, or a kept generation VOL@#GEN.  The clone\n"
"shares every block with SOURCE until either is written.\n"
"\n"
"  -j, --json            print the new volume as JSON\n",
    cmd_clone, NULL, CMD_ONLINE },
  { "diff", "list the byte ranges that changed between two states",
    "FROM TO [--json]",
"List the runs of bytes that differ between FROM, a snapshot (VOL@SNAP) or\n"
"a kept generation (VOL@#GEN), and TO, a newer state of the same volume\n"
"(VOL@SNAP, VOL@#GEN, or VOL for the live volume).  Each run is data\n"
"(TO holds data there) or a hole (TO reads zeros there).  At most 100000\n"
"runs are listed; a longer diff is cut short with a warning.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_diff, NULL, CMD_ONLINE },
  { "status", "show the pool's state, space and cache", "[--json]",
"Show the pool of the server (or of --pool PATH): UUID, generation,\n"
"volumes, space and node cache, and whether it has failed; for a pool of\n"
"several devices, each device's state and READ / WRITE / CKSUM errors.\n"
"Exits 1 when the pool has failed, records are damaged, or a device is\n"
"missing (also while it is being replaced: redundancy is lost until the\n"
"replace ends).\n"
"\n"
"  -j, --json            print one JSON object\n",
    cmd_status, NULL, CMD_ONLINE },
  { "stats", "show the I/O statistics of the server's exports",
    "[EXPORT] [--json]",
"Without EXPORT, list every export (VOL, VOL@SNAP, VOL@#GEN) that NBD\n"
"clients used since the server started, with its bytes read and written,\n"
"its requests by kind, its errors and its checksum failures, and a total.\n"
"With EXPORT, show that export alone.  Statistics live in the running\n"
"server only: there are none with --pool.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_stats, NULL, CMD_ONLINE },
  { "grants", "reload the server's grants file", "reload [--json]",
"Make the server read its grants file (grants=, cairnd --grants) again,\n"
"without a restart.  A file that does not parse leaves the grants in\n"
"force, and the message names the line.  For the server's administrator.\n"
"See cairn-grants(5).\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_grants, NULL, CMD_ONLINE },
  { "audit", "show the changes made through control", "[--json]",
"List the server's audit trail, oldest first: every change made through\n"
"control (create, delete, rename, resize, set, rollback, clone,\n"
"snapshots, checkpoints, receive, replication, job cancel, grants reload),\n"
"refused or not, with its time, principal, target and outcome.  The\n"
"server keeps the newest 1024 in memory; its log has them all.  For the\n"
"server's administrator.\n"
"\n"
"  -j, --json            print the method's result as JSON\n",
    cmd_audit, NULL, CMD_ONLINE },
};

/* The table entry named name, or NULL. */
static const struct command *
find_command (const char *name)
{
  for (size_t i = 0; i < ARRAY_SIZE (commands); i++)
    if (strcmp (name, commands[i].name) == 0)
      return &commands[i];
  return NULL;
}

/* The word that names a subcommand in its group ("create"). */
static const char *
sub_word (const struct command *sub)
{
  const char *sp = strrchr (sub->name, ' ');

  return sp ? sp + 1 : sub->name;
}

/* A group's subcommand named word, or NULL. */
static const struct command *
find_sub (const struct command *group, const char *word)
{
  for (const struct command *sub = group->subs; sub->name; sub++)
    if (strcmp (word, sub_word (sub)) == 0)
      return sub;
  return NULL;
}

/* Print the global usage and the subcommands to fp. */
static void
global_usage (FILE *fp)
{
  static const struct {
    enum command_kind kind;
    const char *title;
  } sections[] = {
    { CMD_OFFLINE, "Commands on a stopped pool (PATH, or --pool PATH):" },
    { CMD_ONLINE, "Commands on a running server, or in-process on a stopped "
      "pool with\n--pool PATH:" },
    { CMD_OTHER, "Other commands:" },
  };

  fprintf (fp,
"Usage: cairn [--pool PATH[,PATH...] [--degraded] | --socket PATH |\n"
"             --connect HOST[:PORT] [TLS]]\n"
"             [--timeout SECONDS] COMMAND [ARGS]\n"
"\n"
"  -p, --pool PATH       the pool: work on it in-process (it must not be in\n"
"                        use), or the PATH of offline commands; a pool of\n"
"                        several devices is PATH,PATH,... (all of them)\n"
"      --degraded        open a pool of several devices with some missing,\n"
"                        read-only, where the others hold a copy of all\n"
"  -S, --socket PATH     the control socket of the server (default\n"
"                        $CAIRN_SOCKET, else " CLI_DEFAULT_SOCKET ")\n"
"  -C, --connect HOST[:PORT]  the server's control port on TCP\n"
"                        (control-tcp=; default port 10810)\n"
"      --tls             with --connect: use TLS, checking the server's\n"
"                        certificate against the system's CAs\n"
"      --tls-certificates DIR  ... against DIR/ca-cert.pem instead (and\n"
"                        present DIR/client-cert.pem if there); implies --tls\n"
"      --tls-psk FILE    TLS with a pre-shared key of FILE (lines\n"
"                        username:hexkey); implies --tls\n"
"      --tls-username NAME  the PSK user (default: FILE's first line)\n"
"  -T, --timeout SECONDS give up on the server's reply after SECONDS\n"
"                        (default: wait as long as the server works on it)\n"
"      --ceph-conf FILE  for rbd:POOL/IMAGE devices: the Ceph configuration\n"
"                        (default: $CEPH_CONF, else /etc/ceph/ceph.conf)\n"
"      --ceph-id ID      ... the Ceph client id (default admin)\n"
"      --ceph-keyring FILE  ... the keyring (default: the configuration's)\n"
"  -h, --help            show this help\n"
"  -V, --version         print the version\n");
  for (size_t s = 0; s < ARRAY_SIZE (sections); s++) {
    fprintf (fp, "\n%s\n", sections[s].title);
    for (size_t i = 0; i < ARRAY_SIZE (commands); i++)
      if (commands[i].kind == sections[s].kind)
        fprintf (fp, "  %-12s %s\n", commands[i].name, commands[i].summary);
  }
  fprintf (fp, "\n'cairn COMMAND --help' shows how to use a command.  "
           "See cairn(8).\n");
}

/* Print a command's usage to stdout. */
void
cli_usage (const struct command *cmd)
{
  printf ("Usage: cairn %s%s%s\n\n", cmd->name, *cmd->args ? " " : "",
          cmd->args);
  if (cmd->subs) {
    printf ("Subcommands:\n");
    for (const struct command *sub = cmd->subs; sub->name; sub++)
      printf ("  %-10s %s\n", sub_word (sub), sub->summary);
    printf ("\n'cairn %s SUBCOMMAND --help' shows how to use one.\n",
            cmd->name);
  }
  else
    printf ("%s\n  -h, --help            show this help\n", cmd->help);
  printf ("\nSee cairn(8).\n");
}

/* Say how to get help; returns EXIT_USAGE. */
int
cli_try_help (const struct cli *cli)
{
  fprintf (stderr, "Try 'cairn %s --help'.\n", cli->cmd->name);
  return EXIT_USAGE;
}

/* Report a usage error. */
int
cli_usage_error (const struct cli *cli, const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "cairn %s: ", cli->cmd->name);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\n");
  return cli_try_help (cli);
}

/* Report a failure (keeping errno for a %m in fmt). */
int
cli_error (const struct cli *cli, int code, const char *fmt, ...)
{
  int saved_errno = errno;
  va_list ap;

  fprintf (stderr, "cairn %s: ", cli->cmd->name);
  errno = saved_errno;
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\n");
  return code;
}

/* Parse the options of a command that has none but --help. */
int
cli_parse_no_options (const struct cli *cli, int argc, char **argv)
{
  static const struct option opts[] = {
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  int c;

  while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
    if (c == 'h') {
      cli_usage (cli->cmd);
      return EXIT_OK;
    }
    return cli_try_help (cli);
  }
  return -1;
}

/* Take the pool path from the words left after the options. */
int
cli_pool_path (const struct cli *cli, int argc, char **argv,
               const char **pathp)
{
  int npos = argc - optind;

  if (npos > 1)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind + 1]);
  if (npos == 1 && cli->pool && strcmp (cli->pool, argv[optind]) != 0)
    return cli_usage_error (cli, "two pools given: --pool %s and %s",
                            cli->pool, argv[optind]);
  if (npos == 1)
    *pathp = argv[optind];
  else if (cli->pool)
    *pathp = cli->pool;
  else
    return cli_usage_error (cli, "missing PATH (the pool's file or block "
                            "device)");
  return 0;
}

/* List the subcommands, or show one's usage. */
static int
cmd_help (const struct cli *cli, int argc, char **argv)
{
  const struct command *cmd;
  int r = cli_parse_no_options (cli, argc, argv);

  if (r >= 0)
    return r;
  if (argc - optind == 0) {
    global_usage (stdout);
    return EXIT_OK;
  }
  cmd = find_command (argv[optind]);
  if (cmd == NULL)
    return cli_usage_error (cli, "unknown command '%s'", argv[optind]);
  if (cmd->subs && argc - optind == 2) {
    const struct command *sub = find_sub (cmd, argv[optind + 1]);

    if (sub == NULL)
      return cli_usage_error (cli, "'%s' has no subcommand '%s'", cmd->name,
                              argv[optind + 1]);
    cmd = sub;
  }
  else if (argc - optind > 1)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind + 1]);
  cli_usage (cmd);
  return EXIT_OK;
}

/* Run a group's subcommand. */
int
cli_run_group (const struct cli *cli, int argc, char **argv)
{
  struct cli sub_cli = *cli;
  char prog[64];

  if (argc < 2) {
    fprintf (stderr, "cairn %s: missing SUBCOMMAND\n", cli->cmd->name);
    return cli_try_help (cli);
  }
  if (strcmp (argv[1], "-h") == 0 || strcmp (argv[1], "--help") == 0) {
    cli_usage (cli->cmd);
    return EXIT_OK;
  }
  sub_cli.cmd = find_sub (cli->cmd, argv[1]);
  if (sub_cli.cmd == NULL)
    return cli_usage_error (cli, "unknown subcommand '%s'", argv[1]);
  snprintf (prog, sizeof prog, "cairn %s", sub_cli.cmd->name);
  argv[1] = prog;
  optind = 0;           /* the subcommand's getopt starts afresh */
  return sub_cli.cmd->run (&sub_cli, argc - 1, argv + 1);
}

/* Print the version. */
static int
cmd_version (const struct cli *cli, int argc, char **argv)
{
  int r = cli_parse_no_options (cli, argc, argv);

  if (r >= 0)
    return r;
  if (optind < argc)
    return cli_usage_error (cli, "unexpected argument '%s'", argv[optind]);
  printf ("cairn %s\n", PACKAGE_VERSION);
  return EXIT_OK;
}

/* Parse --timeout SECONDS into milliseconds (0: none, -1).  -1 if it is
 * not a number of seconds.
 */
static int
parse_timeout (const char *arg, int *msp)
{
  char *end;
  long secs;

  errno = 0;
  secs = strtol (arg, &end, 10);
  if (errno || end == arg || *end || secs < 0 || secs > INT_MAX / 1000)
    return -1;
  *msp = secs == 0 ? -1 : (int) secs * 1000;
  return 0;
}

int
main (int argc, char **argv)
{
  enum { OPT_TLS = 256, OPT_TLS_CERTS, OPT_TLS_PSK, OPT_TLS_USER,
         OPT_CEPH_CONF, OPT_CEPH_ID, OPT_CEPH_KEYRING };
  static const struct option opts[] = {
    { "pool", required_argument, NULL, 'p' },
    { "degraded", no_argument, NULL, 'D' },
    { "socket", required_argument, NULL, 'S' },
    { "connect", required_argument, NULL, 'C' },
    { "tls", no_argument, NULL, OPT_TLS },
    { "tls-certificates", required_argument, NULL, OPT_TLS_CERTS },
    { "tls-psk", required_argument, NULL, OPT_TLS_PSK },
    { "tls-username", required_argument, NULL, OPT_TLS_USER },
    { "timeout", required_argument, NULL, 'T' },
    { "ceph-conf", required_argument, NULL, OPT_CEPH_CONF },
    { "ceph-id", required_argument, NULL, OPT_CEPH_ID },
    { "ceph-keyring", required_argument, NULL, OPT_CEPH_KEYRING },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  static char name[] = "cairn";
  struct cli cli = { .timeout_ms = -1 };
  char prog[64];
  int c, r;

  argv[0] = name;       /* getopt's messages start with it */
  /* "+": stop at the command name, whose options are its own. */
  while ((c = getopt_long (argc, argv, "+p:S:C:T:hV", opts, NULL)) != -1) {
    switch (c) {
    case 'C':
      cli.connect = optarg;
      break;
    case OPT_TLS:
      cli.tls = true;
      break;
    case OPT_TLS_CERTS:
      cli.tls_certs = optarg;
      cli.tls = true;
      break;
    case OPT_TLS_PSK:
      cli.tls_psk = optarg;
      cli.tls = true;
      break;
    case OPT_TLS_USER:
      cli.tls_username = optarg;
      break;
    case 'p':
      cli.pool = optarg;
      break;
    case OPT_CEPH_CONF:
      cli.ceph_conf = optarg;
      break;
    case OPT_CEPH_ID:
      cli.ceph_id = optarg;
      break;
    case OPT_CEPH_KEYRING:
      cli.ceph_keyring = optarg;
      break;
    case 'D':
      cli.degraded = true;
      break;
    case 'S':
      cli.socket = optarg;
      break;
    case 'T':
      if (parse_timeout (optarg, &cli.timeout_ms) < 0) {
        fprintf (stderr, "cairn: --timeout %s: expected a whole number of "
                 "seconds from 1 to %d, or 0 for no limit\n", optarg,
                 INT_MAX / 1000);
        return EXIT_USAGE;
      }
      break;
    case 'h':
      global_usage (stdout);
      return EXIT_OK;
    case 'V':
      printf ("cairn %s\n", PACKAGE_VERSION);
      return EXIT_OK;
    default:
      fprintf (stderr, "Try 'cairn help'.\n");
      return EXIT_USAGE;
    }
  }
  if (optind == argc) {
    global_usage (stderr);
    return EXIT_USAGE;
  }
  cli.cmd = find_command (argv[optind]);
  if (cli.cmd == NULL) {
    fprintf (stderr, "cairn: unknown command '%s' (try 'cairn help')\n",
             argv[optind]);
    return EXIT_USAGE;
  }
  if (cli.pool && cli.socket) {
    fprintf (stderr, "cairn: --pool and --socket exclude each other: --pool "
             "works on a stopped pool in-process, --socket talks to a "
             "server\n");
    return EXIT_USAGE;
  }
  if (cli.connect && (cli.pool || cli.socket)) {
    fprintf (stderr, "cairn: --connect excludes --pool and --socket: it "
             "talks to a server's TCP control port\n");
    return EXIT_USAGE;
  }
  if ((cli.tls || cli.tls_username) && !cli.connect &&
      (strcmp (cli.cmd->name, "replicate") == 0 ||
       strcmp (cli.cmd->name, "pull") == 0)) {
    fprintf (stderr, "cairn: --tls and the --tls-* options secure --connect "
             "HOST[:PORT]; for '%s' the server connects to the other one "
             "itself, with its own control TLS keys: start that server with "
             "'cairnd --tls-psk FILE' or 'cairnd --tls-certs DIR' (see "
             "cairn(8), REPLICATION AND TLS)\n", cli.cmd->name);
    return EXIT_USAGE;
  }
  if ((cli.tls || cli.tls_username) && !cli.connect) {
    fprintf (stderr, "cairn: --tls and the --tls-* options secure --connect "
             "HOST[:PORT] (the control socket is local and plain)\n");
    return EXIT_USAGE;
  }
  if (cli.tls_username && !cli.tls_psk) {
    fprintf (stderr, "cairn: --tls-username names a user of --tls-psk FILE\n");
    return EXIT_USAGE;
  }
  if (cli.connect && cli.cmd->kind != CMD_ONLINE) {
    fprintf (stderr, "cairn: --connect is for the commands that talk to a "
             "server; '%s' works on a stopped pool (see 'cairn help')\n",
             cli.cmd->name);
    return EXIT_USAGE;
  }
  if (cli.socket && cli.cmd->kind != CMD_ONLINE) {
    fprintf (stderr, "cairn: --socket is for the commands that talk to a "
             "server; '%s' works on a stopped pool (see 'cairn help')\n",
             cli.cmd->name);
    return EXIT_USAGE;
  }

  snprintf (prog, sizeof prog, "cairn %s", cli.cmd->name);
  argv[optind] = prog;
  argc -= optind;
  argv += optind;
  optind = 0;           /* the command's getopt starts afresh */
  r = cli.cmd->run (&cli, argc, argv);

  if (fflush (stdout) == EOF || ferror (stdout)) {
    perror ("cairn: writing the output");
    return EXIT_FAIL;
  }
  return r;
}
