/* cairn: the command that manages Cairn pools, volumes and snapshots.
 *
 * One table of subcommands.  Offline subcommands open a pool through the
 * engine directly; online ones (arriving with the control server) talk to a
 * running server over its control socket.
 *
 * Exit codes: 0 success, 1 failure reported by the engine or server,
 * 2 usage error, 3 not found.
 */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define EXIT_USAGE 2

struct command {
  const char *name;
  const char *summary;
  int (*run) (int argc, char **argv);
};

static int cmd_help (int argc, char **argv);
static int cmd_version (int argc, char **argv);

static const struct command commands[] = {
  { "help", "show the subcommands", cmd_help },
  { "version", "print the version", cmd_version },
};

/* Print the subcommands. */
static int
cmd_help (int argc, char **argv)
{
  printf ("Usage: cairn [--pool PATH] COMMAND [ARGS]\n\nCommands:\n");
  for (size_t i = 0; i < ARRAY_SIZE (commands); i++)
    printf ("  %-12s %s\n", commands[i].name, commands[i].summary);
  printf ("\nSee cairn(8).\n");
  return 0;
}

/* Print the version. */
static int
cmd_version (int argc, char **argv)
{
  printf ("cairn %s\n", PACKAGE_VERSION);
  return 0;
}

int
main (int argc, char **argv)
{
  if (argc < 2) {
    cmd_help (0, NULL);
    return EXIT_USAGE;
  }
  if (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0)
    return cmd_help (argc - 1, argv + 1);
  if (strcmp (argv[1], "--version") == 0 || strcmp (argv[1], "-V") == 0)
    return cmd_version (argc - 1, argv + 1);
  for (size_t i = 0; i < ARRAY_SIZE (commands); i++)
    if (strcmp (argv[1], commands[i].name) == 0)
      return commands[i].run (argc - 1, argv + 1);
  fprintf (stderr, "cairn: unknown command '%s' (try 'cairn help')\n", argv[1]);
  return EXIT_USAGE;
}
