/* cairn: what the subcommands share (private to client/cairn).
 *
 * cairn.c holds the command table, the global options and the dispatch;
 * each group of subcommands lives in its own file (offline.c: the ones that
 * open a pool through the engine) and is reached only through the table.
 */
#ifndef CAIRN_CLI_H
#define CAIRN_CLI_H

#include "util.h"

/* Exit codes (cairn(8), EXIT STATUS). */
#define EXIT_OK 0
#define EXIT_FAIL 1               /* the engine or server reported a failure */
#define EXIT_USAGE 2              /* bad command line */
#define EXIT_NOT_FOUND 3          /* the named pool or object does not exist */

struct command;

/* What every subcommand gets: its table entry and the global options. */
struct cli {
  const struct command *cmd;
  const char *pool;               /* --pool PATH, or NULL */
};

struct command {
  const char *name;
  const char *summary;            /* one line for `cairn help` */
  const char *args;               /* "PATH --size SIZE [...]" */
  const char *help;               /* the options, one per line */
  /* Run with argv[0] = "cairn NAME" and the command's arguments after it.
   * Returns the exit code.
   */
  int (*run) (const struct cli *cli, int argc, char **argv);
};

/* Print the command's usage to stdout. */
void cli_usage (const struct command *cmd);
/* Say how to get the command's usage, on stderr; returns EXIT_USAGE (for
 * errors that getopt has already described).
 */
int cli_try_help (const struct cli *cli);
/* Report a usage error ("cairn NAME: message", then how to get help) on
 * stderr; returns EXIT_USAGE.
 */
int cli_usage_error (const struct cli *cli, const char *fmt, ...)
  CAIRN_PRINTF (2, 3);
/* Report a failure ("cairn NAME: message") on stderr and return code. */
int cli_error (const struct cli *cli, int code, const char *fmt, ...)
  CAIRN_PRINTF (3, 4);

/* Parse the options of a command that takes none but --help: returns -1
 * to go on with the words from optind, or the exit code to stop with.
 */
int cli_parse_no_options (const struct cli *cli, int argc, char **argv);

/* After getopt, take the pool's PATH from the one word left, or from the
 * global --pool when none is left.  Returns 0 with *pathp set, or
 * EXIT_USAGE after saying what is wrong.
 */
int cli_pool_path (const struct cli *cli, int argc, char **argv,
                   const char **pathp);

/* The subcommands of offline.c. */
int cmd_mkpool (const struct cli *cli, int argc, char **argv);
int cmd_fsck (const struct cli *cli, int argc, char **argv);
int cmd_info (const struct cli *cli, int argc, char **argv);

#endif /* CAIRN_CLI_H */
