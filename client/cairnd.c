/* cairnd: start the Cairn service.
 *
 * Turns a few options (or a config file of the same keys) into an nbdkit
 * command line that loads the Cairn plugin, and execs nbdkit, so that users
 * never need nbdkit's own flags.  It creates the pool first when asked
 * (--create SIZE and the pool does not exist), and the directory of the
 * control socket.  `cairnd --dry-run` prints the command instead of
 * running it.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev.h"
#include "pool.h"
#include "units.h"

#define MAX_ARGS 64
#define DEFAULT_CONTROL "/run/cairn/control.sock"

/* Options, from the config file first and the command line second. */
struct cairnd_opts {
  char *pool;
  char *socket;       /* NBD Unix socket */
  char *listen;       /* NBD TCP address */
  char *port;
  char *control;      /* control socket */
  char *tls_certs;    /* directory for nbdkit --tls-certificates */
  char *threads;
  char *cache;
  char *plugin;       /* path of the plugin .so */
  char *create;       /* size of the pool to create when it is missing */
  char *pidfile;
  char *control_group;
  char *control_tcp;  /* [ADDR:]PORT: the control protocol on TCP */
  bool foreground;
  bool dry_run;
  bool verbose;
};

/* Print usage and exit with status. */
static void __attribute__ ((noreturn))
usage (int status)
{
  fprintf (status ? stderr : stdout,
"Usage: cairnd [OPTIONS]\n"
"Start the Cairn storage server (nbdkit with the Cairn plugin).\n"
"\n"
"  -c, --config FILE     read options from FILE (lines: key = value)\n"
"  -p, --pool PATH       the pool to serve (required)\n"
"  -U, --socket PATH     serve NBD on a Unix socket\n"
"  -l, --listen ADDR     serve NBD on TCP address ADDR\n"
"  -P, --port PORT       TCP port (default 10809)\n"
"      --control PATH    control socket (default " DEFAULT_CONTROL ")\n"
"      --control-group G group allowed to use the control socket\n"
"      --control-tcp [ADDR:]PORT  also serve the control protocol on TCP\n"
"                        (ADDR defaults to 127.0.0.1), for other servers\n"
"      --create SIZE     create the pool (SIZE bytes, sparse) if it is missing\n"
"      --pidfile PATH    write nbdkit's pid to PATH\n"
"      --tls-certs DIR   enable TLS with the certificates in DIR\n"
"  -t, --threads N       NBD worker threads\n"
"      --cache SIZE      metadata node cache (e.g. 256M)\n"
"      --plugin PATH     plugin to load (default: the installed one)\n"
"  -f, --foreground      do not fork into the background\n"
"  -v, --verbose         nbdkit debug messages\n"
"  -n, --dry-run         print the nbdkit command and exit\n"
"  -V, --version         print the version\n"
"See cairnd(8).\n");
  exit (status);
}

/* Set a string option, replacing an earlier value. */
static void
set_opt (char **dst, const char *value)
{
  free (*dst);
  *dst = strdup (value);
  if (*dst == NULL) {
    perror ("cairnd: strdup");
    exit (1);
  }
}

/* Apply one key = value setting from the config file. */
static int
apply_setting (struct cairnd_opts *o, const char *key, const char *value)
{
  struct { const char *key; char **dst; } strs[] = {
    { "pool", &o->pool }, { "socket", &o->socket }, { "listen", &o->listen },
    { "port", &o->port }, { "control", &o->control },
    { "tls-certs", &o->tls_certs }, { "threads", &o->threads },
    { "cache", &o->cache }, { "plugin", &o->plugin },
    { "create", &o->create }, { "pidfile", &o->pidfile },
    { "control-group", &o->control_group },
    { "control-tcp", &o->control_tcp },
  };

  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (strcmp (key, strs[i].key) == 0) {
      set_opt (strs[i].dst, value);
      return 0;
    }
  if (strcmp (key, "foreground") == 0) {
    o->foreground = strcmp (value, "yes") == 0 || strcmp (value, "true") == 0 ||
                    strcmp (value, "1") == 0;
    return 0;
  }
  return -1;
}

/* Trim leading and trailing white space in place. */
static char *
trim (char *s)
{
  char *e;

  while (*s == ' ' || *s == '\t')
    s++;
  e = s + strlen (s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
    *--e = '\0';
  return s;
}

/* Read a config file of `key = value` lines ('#' starts a comment). */
static void
read_config (struct cairnd_opts *o, const char *path)
{
  FILE *fp = fopen (path, "r");
  char line[4096];
  unsigned lineno = 0;

  if (fp == NULL) {
    fprintf (stderr, "cairnd: %s: %s\n", path, strerror (errno));
    exit (1);
  }
  while (fgets (line, sizeof line, fp)) {
    char *s = trim (line), *eq;

    lineno++;
    if (*s == '\0' || *s == '#')
      continue;
    eq = strchr (s, '=');
    if (eq == NULL) {
      fprintf (stderr, "cairnd: %s:%u: expected 'key = value'\n", path, lineno);
      exit (1);
    }
    *eq = '\0';
    if (apply_setting (o, trim (s), trim (eq + 1)) == -1) {
      fprintf (stderr, "cairnd: %s:%u: unknown setting '%s' (see cairnd(8))\n",
               path, lineno, trim (s));
      exit (1);
    }
  }
  fclose (fp);
}

/* Append one argument, or die if the command line is full. */
static void
add_arg (char **argv, int *argc, char *arg)
{
  if (*argc >= MAX_ARGS - 1) {
    fprintf (stderr, "cairnd: too many arguments\n");
    exit (1);
  }
  argv[(*argc)++] = arg;
  argv[*argc] = NULL;
}

/* Format "key=value" into a new string. */
static char *
kv (const char *key, const char *value)
{
  char *s;

  if (asprintf (&s, "%s=%s", key, value) == -1) {
    perror ("cairnd: asprintf");
    exit (1);
  }
  return s;
}

/* Make the directory a socket will live in (one level, like /run/cairn). */
static int
make_parent_dir (const char *path)
{
  char dir[4096];
  char *slash;

  snprintf (dir, sizeof dir, "%s", path);
  slash = strrchr (dir, '/');
  if (slash == NULL || slash == dir)
    return 0;
  *slash = '\0';
  if (mkdir (dir, 0755) == -1 && errno != EEXIST) {
    fprintf (stderr, "cairnd: cannot create %s: %s\n", dir, strerror (errno));
    return -1;
  }
  return 0;
}

/* Create the pool when it does not exist yet (--create SIZE). */
static int
create_pool (const char *path, const char *size_text)
{
  struct cairn_dev *dev;
  uint64_t size;
  uint8_t uuid[16];
  char uuid_text[37];
  struct stat st;

  if (stat (path, &st) == 0)
    return 0;
  if (units_parse_size (size_text, &size) < 0) {
    fprintf (stderr, "cairnd: --create %s: not a size (e.g. 8G)\n", size_text);
    return -1;
  }
  if (make_parent_dir (path) < 0)
    return -1;
  if (dev_file_open (path, DEV_CREATE, size, &dev) < 0) {
    fprintf (stderr, "cairnd: %s\n", cairn_errmsg ());
    return -1;
  }
  if (pool_format (dev, NULL, uuid) < 0) {
    fprintf (stderr, "cairnd: %s\n", cairn_errmsg ());
    dev_close (dev);
    unlink (path);
    return -1;
  }
  dev_close (dev);
  uuid_format (uuid, uuid_text);
  fprintf (stderr, "cairnd: created pool %s (%s, %s)\n", path, size_text, uuid_text);
  return 0;
}

int
main (int argc, char **argv)
{
  enum { OPT_CONTROL = 256, OPT_TLS, OPT_CACHE, OPT_PLUGIN, OPT_CREATE,
         OPT_PIDFILE, OPT_GROUP, OPT_CONTROL_TCP };
  static const struct option long_opts[] = {
    { "config", required_argument, NULL, 'c' },
    { "pool", required_argument, NULL, 'p' },
    { "socket", required_argument, NULL, 'U' },
    { "listen", required_argument, NULL, 'l' },
    { "port", required_argument, NULL, 'P' },
    { "control", required_argument, NULL, OPT_CONTROL },
    { "tls-certs", required_argument, NULL, OPT_TLS },
    { "threads", required_argument, NULL, 't' },
    { "cache", required_argument, NULL, OPT_CACHE },
    { "plugin", required_argument, NULL, OPT_PLUGIN },
    { "create", required_argument, NULL, OPT_CREATE },
    { "pidfile", required_argument, NULL, OPT_PIDFILE },
    { "control-group", required_argument, NULL, OPT_GROUP },
    { "control-tcp", required_argument, NULL, OPT_CONTROL_TCP },
    { "foreground", no_argument, NULL, 'f' },
    { "verbose", no_argument, NULL, 'v' },
    { "dry-run", no_argument, NULL, 'n' },
    { "version", no_argument, NULL, 'V' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct cairnd_opts o = { 0 };
  char *nargv[MAX_ARGS];
  int nargc = 0, c;

  /* The config file is read first so that options override it. */
  for (int i = 1; i < argc - 1; i++)
    if (strcmp (argv[i], "-c") == 0 || strcmp (argv[i], "--config") == 0)
      read_config (&o, argv[i + 1]);

  while ((c = getopt_long (argc, argv, "c:p:U:l:P:t:fvnVh", long_opts, NULL)) != -1) {
    switch (c) {
    case 'c': break;
    case 'p': set_opt (&o.pool, optarg); break;
    case 'U': set_opt (&o.socket, optarg); break;
    case 'l': set_opt (&o.listen, optarg); break;
    case 'P': set_opt (&o.port, optarg); break;
    case OPT_CONTROL: set_opt (&o.control, optarg); break;
    case OPT_TLS: set_opt (&o.tls_certs, optarg); break;
    case 't': set_opt (&o.threads, optarg); break;
    case OPT_CACHE: set_opt (&o.cache, optarg); break;
    case OPT_PLUGIN: set_opt (&o.plugin, optarg); break;
    case OPT_CREATE: set_opt (&o.create, optarg); break;
    case OPT_PIDFILE: set_opt (&o.pidfile, optarg); break;
    case OPT_GROUP: set_opt (&o.control_group, optarg); break;
    case OPT_CONTROL_TCP: set_opt (&o.control_tcp, optarg); break;
    case 'f': o.foreground = true; break;
    case 'v': o.verbose = true; break;
    case 'n': o.dry_run = true; break;
    case 'V': printf ("cairnd %s\n", PACKAGE_VERSION); return 0;
    case 'h': usage (0);
    default: usage (2);
    }
  }
  if (optind != argc) {
    fprintf (stderr, "cairnd: unexpected argument '%s'\n", argv[optind]);
    usage (2);
  }
  if (o.pool == NULL) {
    fprintf (stderr, "cairnd: no pool given: use --pool PATH "
             "(create one with 'cairn mkpool PATH --size SIZE')\n");
    return 2;
  }
  if (o.plugin == NULL)
    set_opt (&o.plugin, PLUGINDIR "/nbdkit-cairn-plugin.so");
  if (o.control == NULL)
    set_opt (&o.control, DEFAULT_CONTROL);
  if (!o.dry_run && (make_parent_dir (o.control) < 0 ||
                     (o.create && create_pool (o.pool, o.create) < 0)))
    return 1;

  add_arg (nargv, &nargc, NBDKIT);
  if (o.foreground)
    add_arg (nargv, &nargc, "--foreground");
  if (o.verbose)
    add_arg (nargv, &nargc, "--verbose");
  if (o.socket) {
    add_arg (nargv, &nargc, "--unix");
    add_arg (nargv, &nargc, o.socket);
  }
  else {
    if (o.listen) {
      add_arg (nargv, &nargc, "--ipaddr");
      add_arg (nargv, &nargc, o.listen);
    }
    if (o.port) {
      add_arg (nargv, &nargc, "--port");
      add_arg (nargv, &nargc, o.port);
    }
  }
  if (o.tls_certs) {
    add_arg (nargv, &nargc, "--tls=require");
    add_arg (nargv, &nargc, kv ("--tls-certificates", o.tls_certs));
  }
  if (o.pidfile) {
    add_arg (nargv, &nargc, "--pidfile");
    add_arg (nargv, &nargc, o.pidfile);
  }
  if (o.threads) {
    add_arg (nargv, &nargc, "--threads");
    add_arg (nargv, &nargc, o.threads);
  }
  add_arg (nargv, &nargc, o.plugin);
  add_arg (nargv, &nargc, kv ("pool", o.pool));
  add_arg (nargv, &nargc, kv ("control", o.control));
  if (o.control_group)
    add_arg (nargv, &nargc, kv ("control-group", o.control_group));
  if (o.control_tcp)
    add_arg (nargv, &nargc, kv ("control-tcp", o.control_tcp));
  if (o.cache)
    add_arg (nargv, &nargc, kv ("cache", o.cache));

  if (o.dry_run) {
    for (int i = 0; i < nargc; i++)
      printf ("%s%s", i ? " " : "", nargv[i]);
    printf ("\n");
    return 0;
  }
  execv (NBDKIT, nargv);
  fprintf (stderr, "cairnd: cannot run %s: %s (install the Debian package 'nbdkit')\n",
           NBDKIT, strerror (errno));
  return 1;
}
