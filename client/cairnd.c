/* cairnd: start the Cairn service.
 *
 * Turns a few options (or a config file of the same keys) into an nbdkit
 * command line that loads the Cairn plugin, and execs nbdkit, so that users
 * never need nbdkit's own flags.  It creates the pool first when asked
 * (--create SIZE and the pool does not exist), and the directory of the
 * control socket.  `cairnd --dry-run` prints the command instead of
 * running it, quoted for a shell.
 *
 * TLS is nbdkit's: cairnd checks that the options make sense together
 * (--tls on or require needs certificates or a PSK file, and turns itself
 * on when one is given; --tls-verify-peer needs certificates) and that the
 * files are there, then hands them to nbdkit (--tls, --tls-certificates,
 * --tls-psk, --tls-verify-peer).  The control socket is not affected: it
 * is a local Unix socket guarded by its mode.  The control protocol's TCP
 * port (--control-tcp) gets the same keys and, unless --control-tls says
 * otherwise, the same mode (control-tls=, control-tls-certificates=,
 * control-tls-psk=, control-tls-verify-peer=), so one setting secures
 * both; the server's replication jobs connect with those keys too.
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
#include "progress.h"
#include "sockpath.h"
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
  char *tls;          /* off, on or require (NULL: require with files) */
  char *tls_certs;    /* directory for nbdkit --tls-certificates */
  char *tls_psk;      /* PSK file for nbdkit --tls-psk */
  char *tls_username; /* the PSK user replication jobs connect as */
  bool tls_verify_peer;
  char *threads;
  char *cache;
  char *verify;       /* disk or always: the plugin's verify= */
  bool list_checkpoints;  /* the plugin's list-checkpoints=true */
  bool intent_log;        /* the plugin's intent-log=true */
  bool degraded;          /* the plugin's degraded=true */
  bool control_insecure;  /* the plugin's control-insecure=true */
  bool standby;           /* the plugin's standby=true */
  char *plugin;       /* path of the plugin .so */
  char *create;       /* size of the pool to create when it is missing */
  char *preallocate;  /* how to preallocate a pool file it creates */
  char *pidfile;
  char *control_group;
  char *control_tcp;  /* [ADDR:]PORT: the control protocol on TCP */
  char *control_tls;  /* off, on or require (NULL: as --tls) */
  char *metrics;      /* [ADDR:]PORT: the plugin's metrics= */
  char *ceph_conf;    /* rbd: pools: the plugin's ceph-conf=, ceph-id=, */
  char *ceph_id;      /* ceph-keyring= */
  char *ceph_keyring;
  char *grants;       /* the plugin's grants=FILE (cairn-grants(5)) */
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
"  -p, --pool PATH       the pool to serve (required); PATH,PATH,... for\n"
"                        the devices of a pool of several\n"
"      --degraded        serve a pool of several devices with some\n"
"                        missing, read-only\n"
"      --standby         for rbd:POOL/IMAGE pools: wait while another\n"
"                        server holds the pool, take it over when that\n"
"                        one is gone\n"
"      --ceph-conf FILE  for rbd:POOL/IMAGE pools: the Ceph configuration\n"
"                        (default: $CEPH_CONF, else /etc/ceph/ceph.conf)\n"
"      --ceph-id ID      ... the Ceph client id (default admin)\n"
"      --ceph-keyring FILE  ... the keyring (default: the configuration's)\n"
"  -U, --socket PATH     serve NBD on a Unix socket\n"
"  -l, --listen ADDR     serve NBD on TCP address ADDR\n"
"  -P, --port PORT       TCP port (default 10809)\n"
"      --control PATH    control socket (default " DEFAULT_CONTROL ")\n"
"      --control-group G group allowed to use the control socket\n"
"      --control-tcp [ADDR:]PORT  also serve the control protocol on TCP\n"
"                        (ADDR defaults to 127.0.0.1), for other servers\n"
"      --control-tls MODE  TLS on the control port: off, on or require\n"
"                        (default: as --tls, with the same keys)\n"
"      --grants FILE     who may do what (cairn-grants(5))\n"
"      --control-insecure  allow --control-tcp without TLS (trusted\n"
"                        networks only)\n"
"      --create SIZE     create the pool (SIZE bytes) if it is missing\n"
"      --preallocate MODE  a pool file --create makes: space (reserved,\n"
"                        the default), full (written with zeros) or off\n"
"                        (sparse)\n"
"      --pidfile PATH    write nbdkit's pid to PATH\n"
"      --tls MODE        NBD over TLS: off, on (TLS or plain), require\n"
"                        (default: require when certificates or a PSK\n"
"                        file are given, else off)\n"
"      --tls-certs DIR   X.509 certificates for TLS (ca-cert.pem,\n"
"                        server-cert.pem, server-key.pem)\n"
"      --tls-psk FILE    pre-shared keys for TLS (lines: username:hexkey)\n"
"      --tls-username NAME  the PSK user this server's replication jobs\n"
"                        connect as (default: FILE's first line)\n"
"      --tls-verify-peer require client certificates signed by the CA\n"
"  -t, --threads N       NBD worker threads\n"
"      --cache SIZE      metadata node cache (e.g. 256M)\n"
"      --verify WHEN     check data as it comes from the disk (disk, the\n"
"                        default) or on every read (always)\n"
"      --list-checkpoints  list every volume's checkpoints as exports too\n"
"      --intent-log      make a flush one write to the pool's intent log\n"
"                        instead of a commit (off by default)\n"
"      --metrics [ADDR:]PORT  serve Prometheus metrics over HTTP at\n"
"                        /metrics (ADDR defaults to 127.0.0.1)\n"
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

/* A config file's boolean: yes, true or 1. */
static bool
is_yes (const char *value)
{
  return strcmp (value, "yes") == 0 || strcmp (value, "true") == 0 ||
         strcmp (value, "1") == 0;
}

/* Take each relative path of a comma-separated list (the devices of a
 * pool; one path for the other settings) relative to dir.
 */
static void
resolve_paths (char **paths, const char *dir)
{
  char *list = *paths, *out = NULL, *save = NULL;
  const char *sep = "";
  size_t len = 0;
  FILE *f = open_memstream (&out, &len);

  if (f == NULL) {
    perror ("cairnd: open_memstream");
    exit (1);
  }
  for (char *p = strtok_r (list, ",", &save); p;
       p = strtok_r (NULL, ",", &save), sep = ",") {
    bool as_is = p[0] == '/' || dev_is_rbd_name (p);

    fprintf (f, "%s%s%s%s", sep, as_is ? "" : dir, as_is ? "" : "/", p);
  }
  if (fclose (f) != 0) {
    perror ("cairnd: fclose");
    exit (1);
  }
  free (list);
  *paths = out;
}

/* Apply one key = value setting from the config file; a relative path is
 * taken relative to dir, the config file's directory.
 */
static int
apply_setting (struct cairnd_opts *o, const char *key, const char *value,
               const char *dir)
{
  struct { const char *key; char **dst; bool path; } strs[] = {
    { "pool", &o->pool, true }, { "socket", &o->socket, true },
    { "listen", &o->listen, false }, { "port", &o->port, false },
    { "control", &o->control, true },
    { "tls", &o->tls, false }, { "tls-certs", &o->tls_certs, true },
    { "tls-psk", &o->tls_psk, true }, { "threads", &o->threads, false },
    { "tls-username", &o->tls_username, false },
    { "cache", &o->cache, false }, { "verify", &o->verify, false },
    { "plugin", &o->plugin, true },
    { "create", &o->create, false }, { "pidfile", &o->pidfile, true },
    { "preallocate", &o->preallocate, false },
    { "control-group", &o->control_group, false },
    { "control-tcp", &o->control_tcp, false },
    { "control-tls", &o->control_tls, false },
    { "metrics", &o->metrics, false },
    { "ceph-conf", &o->ceph_conf, true },
    { "ceph-id", &o->ceph_id, false },
    { "ceph-keyring", &o->ceph_keyring, true },
    { "grants", &o->grants, true },
  };

  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
    if (strcmp (key, strs[i].key) == 0) {
      set_opt (strs[i].dst, value);
      if (strs[i].path)
        resolve_paths (strs[i].dst, dir);
      return 0;
    }
  if (strcmp (key, "foreground") == 0) {
    o->foreground = is_yes (value);
    return 0;
  }
  if (strcmp (key, "tls-verify-peer") == 0) {
    o->tls_verify_peer = is_yes (value);
    return 0;
  }
  if (strcmp (key, "intent-log") == 0) {
    o->intent_log = is_yes (value);
    return 0;
  }
  if (strcmp (key, "list-checkpoints") == 0) {
    o->list_checkpoints = is_yes (value);
    return 0;
  }
  if (strcmp (key, "control-insecure") == 0) {
    o->control_insecure = is_yes (value);
    return 0;
  }
  if (strcmp (key, "degraded") == 0) {
    o->degraded = is_yes (value);
    return 0;
  }
  if (strcmp (key, "standby") == 0) {
    o->standby = is_yes (value);
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

/* The absolute directory of the file at path (which exists), or exit. */
static char *
file_dir (const char *path)
{
  char *abs = realpath (path, NULL), *slash;

  if (abs == NULL) {
    fprintf (stderr, "cairnd: %s: %s\n", path, strerror (errno));
    exit (1);
  }
  slash = strrchr (abs, '/');
  if (slash == abs)
    slash[1] = '\0';           /* a file in / */
  else
    *slash = '\0';
  return abs;
}

/* Read a config file of `key = value` lines ('#' starts a comment).
 * Relative paths in it are relative to its own directory, so that the
 * file means the same whatever the current directory (under systemd, /).
 */
static void
read_config (struct cairnd_opts *o, const char *path)
{
  FILE *fp = fopen (path, "r");
  char line[4096];
  unsigned lineno = 0;
  char *dir;

  if (fp == NULL) {
    fprintf (stderr, "cairnd: %s: %s\n", path, strerror (errno));
    exit (1);
  }
  dir = file_dir (path);
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
    if (apply_setting (o, trim (s), trim (eq + 1),
                       strcmp (dir, "/") == 0 ? "" : dir) == -1) {
      fprintf (stderr, "cairnd: %s:%u: unknown setting '%s' (see cairnd(8))\n",
               path, lineno, trim (s));
      exit (1);
    }
  }
  free (dir);
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

/* The strings kv made, freed by finish. */
static char *kv_strings[MAX_ARGS];
static int n_kv_strings;

/* Format "key=value" into a new string. */
static char *
kv (const char *key, const char *value)
{
  char *s;

  if (n_kv_strings == MAX_ARGS || asprintf (&s, "%s=%s", key, value) == -1) {
    perror ("cairnd: asprintf");
    exit (1);
  }
  kv_strings[n_kv_strings++] = s;
  return s;
}

/* Free the options and the strings of the command line; returns status. */
static int
finish (struct cairnd_opts *o, int status)
{
  char **strs[] = {
    &o->pool, &o->socket, &o->listen, &o->port, &o->control, &o->tls,
    &o->tls_certs, &o->tls_psk, &o->threads, &o->cache, &o->verify, &o->plugin,
    &o->create, &o->preallocate, &o->pidfile, &o->control_group,
    &o->control_tcp, &o->control_tls, &o->metrics, &o->ceph_conf,
    &o->ceph_id, &o->ceph_keyring, &o->grants, &o->tls_username,
  };

  for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
    free (*strs[i]);
    *strs[i] = NULL;
  }
  while (n_kv_strings > 0)
    free (kv_strings[--n_kv_strings]);
  return status;
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

/* How a pool file that --create makes gets its space when --preallocate
 * does not say: reserved (fallocate), not sparse.  On a sparse file every
 * first write of a place also costs the host filesystem an allocation, and
 * a copy-on-write pool writes new places until the whole file has been used
 * once: 4 KiB random writes after a snapshot ran at 0.39-0.69x the file
 * plugin there against 1.45x on a written file (issue #32).  A reserved
 * file was as fast as a written one in bench/run's three runs of the three
 * (bench/README.md, "The default pool") and costs nothing to make, where
 * writing it costs its whole size in zeros.  A filesystem that cannot
 * reserve space gets the file written instead (create_pool).
 */
#define CREATE_PREALLOC DEV_PREALLOC_SPACE

/* Create the pool when it does not exist yet (--create SIZE), preallocated
 * as prealloc_text says (NULL: CREATE_PREALLOC).
 */
static int
create_pool (const char *path, const char *size_text, const char *prealloc_text)
{
  enum dev_prealloc prealloc = CREATE_PREALLOC;
  const char *said;
  struct cairn_dev *dev;
  struct progress progress;
  uint64_t size;
  uint8_t uuid[16];
  char uuid_text[37];
  struct stat st;
  int r;

  if (dev_is_rbd_name (path)) {
    fprintf (stderr, "cairnd: --create makes pool files: make a pool on an "
             "RBD image with 'cairn mkpool %s --size SIZE'\n", path);
    return -1;
  }
  if (stat (path, &st) == 0)
    return 0;
  if (units_parse_size (size_text, &size) < 0) {
    fprintf (stderr, "cairnd: --create %s: not a size (e.g. 8G)\n", size_text);
    return -1;
  }
  if (prealloc_text && dev_prealloc_parse (prealloc_text, &prealloc) < 0) {
    fprintf (stderr, "cairnd: --preallocate %s: say off, space or full\n",
             prealloc_text);
    return -1;
  }
  if (make_parent_dir (path) < 0)
    return -1;
  if (dev_file_open (path, DEV_CREATE, size, &dev) < 0) {
    fprintf (stderr, "cairnd: %s\n", cairn_errmsg ());
    return -1;
  }
  progress_init (&progress, PROGRESS_AUTO, "preallocated");
  r = dev_file_preallocate (dev, prealloc, progress_fn, &progress);
  if (r == -EOPNOTSUPP && prealloc_text == NULL) {
    /* The default, on a filesystem that cannot reserve: write it. */
    prealloc = DEV_PREALLOC_FULL;
    r = dev_file_preallocate (dev, prealloc, progress_fn, &progress);
  }
  progress_end (&progress);
  if (r == 0)
    r = pool_format (dev, &(struct pool_format_opts) { .checkpoints = true },
                     uuid);
  if (r < 0) {
    fprintf (stderr, "cairnd: %s%s\n", cairn_errmsg (),
             r == -ENOSPC && prealloc != DEV_PREALLOC_OFF
             ? " (--preallocate off makes a sparse pool file instead, whose "
               "writes are slower)" : "");
    dev_close (dev);
    unlink (path);
    return -1;
  }
  dev_close (dev);
  uuid_format (uuid, uuid_text);
  said = dev_prealloc_done (prealloc);
  fprintf (stderr, "cairnd: created pool %s (%s, %s%s%s)\n", path, size_text,
           uuid_text, said ? ", " : "", said ? said : "");
  return 0;
}

/* Replace a path that exists (or NULL) by its absolute form. */
static void
make_absolute (char **path)
{
  char *abs = *path ? realpath (*path, NULL) : NULL;

  if (abs) {
    free (*path);
    *path = abs;
  }
}

/* Exit with status 2 unless mode is off, on or require. */
static void
check_mode (const char *opt, const char *mode)
{
  if (strcmp (mode, "off") != 0 && strcmp (mode, "on") != 0 &&
      strcmp (mode, "require") != 0) {
    fprintf (stderr, "cairnd: %s %s: expected off, on or require\n", opt,
             mode);
    exit (2);
  }
}

/* Check the TLS options (see the top) and return the mode: "off", "on" or
 * "require"; exit with status 2 on a contradiction, and (check_files) 1
 * when a file is missing.  Paths that exist are made absolute, since
 * nbdkit may change directory before it reads them.
 */
static const char *
tls_mode (struct cairnd_opts *o, bool check_files)
{
  const char *mode = o->tls;
  struct stat st;
  bool ctl_on = o->control_tls && strcmp (o->control_tls, "off") != 0;

  if (mode == NULL)
    mode = o->tls_certs || o->tls_psk ? "require" : "off";
  check_mode ("--tls", mode);
  if (o->control_tls)
    check_mode ("--control-tls", o->control_tls);
  if (strcmp (mode, "off") == 0 && !ctl_on &&
      (o->tls_certs || o->tls_psk || o->tls_verify_peer)) {
    fprintf (stderr, "cairnd: --tls off contradicts --tls-certs, --tls-psk "
             "and --tls-verify-peer: drop one or the other\n");
    exit (2);
  }
  if ((strcmp (mode, "off") != 0 || ctl_on) && !o->tls_certs && !o->tls_psk) {
    fprintf (stderr, "cairnd: %s %s needs keys: --tls-certs DIR (X.509 "
             "certificates) or --tls-psk FILE (pre-shared keys)\n",
             ctl_on ? "--control-tls" : "--tls",
             ctl_on ? o->control_tls : mode);
    exit (2);
  }
  if (o->tls_certs && o->tls_psk) {
    fprintf (stderr, "cairnd: give --tls-certs or --tls-psk, not both (nbdkit "
             "serves TLS with one kind of key)\n");
    exit (2);
  }
  if (o->tls_username && !o->tls_psk) {
    fprintf (stderr, "cairnd: --tls-username names a user of --tls-psk FILE: "
             "it needs --tls-psk\n");
    exit (2);
  }
  if (o->tls_verify_peer && !o->tls_certs) {
    fprintf (stderr, "cairnd: --tls-verify-peer checks client certificates: "
             "it needs --tls-certs DIR\n");
    exit (2);
  }
  errno = 0;
  if (o->tls_certs && check_files &&
      (stat (o->tls_certs, &st) == -1 || !S_ISDIR (st.st_mode))) {
    fprintf (stderr, "cairnd: --tls-certs %s: %s (give the directory holding "
             "ca-cert.pem, server-cert.pem and server-key.pem)\n",
             o->tls_certs, errno ? strerror (errno) : "not a directory");
    exit (1);
  }
  if (o->tls_psk && check_files && access (o->tls_psk, R_OK) == -1) {
    fprintf (stderr, "cairnd: --tls-psk %s: %s (a file of username:hexkey "
             "lines, readable by the server)\n", o->tls_psk, strerror (errno));
    exit (1);
  }
  make_absolute (&o->tls_certs);
  make_absolute (&o->tls_psk);
  return mode;
}

/* Check what nbdkit would fail on with a message that does not say what
 * to do: the pool and the plugin must be there, and a Unix socket that a
 * stopped or killed server left behind is removed (a live server's is
 * refused).  Returns 0, or -1 after saying what is wrong.
 */
static int
check_start (const struct cairnd_opts *o)
{
  struct { const char *what, *path; } socks[] = {
    { "NBD socket", o->socket }, { "control socket", o->control },
  };
  struct stat st;
  char *list = strdup (o->pool), *save = NULL;

  if (list == NULL) {
    perror ("cairnd: strdup");
    return -1;
  }
  for (char *p = strtok_r (list, ",", &save); p; p = strtok_r (NULL, ",", &save))
    if (!dev_is_rbd_name (p) && stat (p, &st) == -1) {
      if (errno == ENOENT && strchr (o->pool, ','))
        fprintf (stderr, "cairnd: device %s of the pool does not exist (with "
                 "--degraded, leave out a missing device)\n", p);
      else if (errno == ENOENT)
        fprintf (stderr, "cairnd: pool %s does not exist: create it with "
                 "--create SIZE (e.g. --create 100G), or with 'cairn mkpool "
                 "%s --size SIZE', or give the path of an existing pool\n",
                 p, p);
      else
        fprintf (stderr, "cairnd: pool %s: %s\n", p, strerror (errno));
      free (list);
      return -1;
    }
  free (list);
  if (access (o->plugin, R_OK) == -1) {
    fprintf (stderr, "cairnd: plugin %s: %s (run 'make install', or give "
             "--plugin PATH, such as BUILD/.libs/nbdkit-cairn-plugin.so "
             "in a build tree)\n", o->plugin, strerror (errno));
    return -1;
  }
  for (size_t i = 0; i < sizeof socks / sizeof socks[0]; i++) {
    bool removed;

    if (socks[i].path == NULL)
      continue;
    if (sockpath_reclaim (socks[i].what, socks[i].path, &removed) < 0) {
      fprintf (stderr, "cairnd: %s\n", cairn_errmsg ());
      return -1;
    }
    if (removed)
      fprintf (stderr, "cairnd: removed the stale %s %s (no server listens "
               "on it: one stopped or was killed)\n", socks[i].what,
               socks[i].path);
  }
  return 0;
}

/* Print an argument so that a shell reads it back as it is. */
static void
print_quoted (const char *arg)
{
  if (*arg && strspn (arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                      "0123456789_-+=/.,:@%") == strlen (arg)) {
    fputs (arg, stdout);
    return;
  }
  putchar ('\'');
  for (const char *p = arg; *p; p++)
    if (*p == '\'')
      fputs ("'\\''", stdout);
    else
      putchar (*p);
  putchar ('\'');
}

int
main (int argc, char **argv)
{
  enum { OPT_CONTROL = 256, OPT_TLS, OPT_CACHE, OPT_PLUGIN, OPT_CREATE,
         OPT_PIDFILE, OPT_GROUP, OPT_TLS_MODE, OPT_TLS_PSK, OPT_TLS_VERIFY,
         OPT_CONTROL_TCP, OPT_CONTROL_TLS, OPT_CEPH_CONF, OPT_CEPH_ID,
         OPT_CEPH_KEYRING, OPT_PREALLOC, OPT_VERIFY,
         OPT_LIST_CKPT, OPT_INTENT_LOG, OPT_DEGRADED, OPT_METRICS, OPT_INSECURE, OPT_GRANTS,
         OPT_STANDBY, OPT_TLS_USER };
  static const struct option long_opts[] = {
    { "config", required_argument, NULL, 'c' },
    { "pool", required_argument, NULL, 'p' },
    { "socket", required_argument, NULL, 'U' },
    { "listen", required_argument, NULL, 'l' },
    { "port", required_argument, NULL, 'P' },
    { "control", required_argument, NULL, OPT_CONTROL },
    { "tls", required_argument, NULL, OPT_TLS_MODE },
    { "tls-certs", required_argument, NULL, OPT_TLS },
    { "tls-psk", required_argument, NULL, OPT_TLS_PSK },
    { "tls-verify-peer", no_argument, NULL, OPT_TLS_VERIFY },
    { "tls-username", required_argument, NULL, OPT_TLS_USER },
    { "threads", required_argument, NULL, 't' },
    { "cache", required_argument, NULL, OPT_CACHE },
    { "verify", required_argument, NULL, OPT_VERIFY },
    { "list-checkpoints", no_argument, NULL, OPT_LIST_CKPT },
    { "intent-log", no_argument, NULL, OPT_INTENT_LOG },
    { "degraded", no_argument, NULL, OPT_DEGRADED },
    { "standby", no_argument, NULL, OPT_STANDBY },
    { "plugin", required_argument, NULL, OPT_PLUGIN },
    { "create", required_argument, NULL, OPT_CREATE },
    { "preallocate", required_argument, NULL, OPT_PREALLOC },
    { "pidfile", required_argument, NULL, OPT_PIDFILE },
    { "control-group", required_argument, NULL, OPT_GROUP },
    { "control-tcp", required_argument, NULL, OPT_CONTROL_TCP },
    { "control-tls", required_argument, NULL, OPT_CONTROL_TLS },
    { "metrics", required_argument, NULL, OPT_METRICS },
    { "ceph-conf", required_argument, NULL, OPT_CEPH_CONF },
    { "ceph-id", required_argument, NULL, OPT_CEPH_ID },
    { "ceph-keyring", required_argument, NULL, OPT_CEPH_KEYRING },
    { "control-insecure", no_argument, NULL, OPT_INSECURE },
    { "grants", required_argument, NULL, OPT_GRANTS },
    { "foreground", no_argument, NULL, 'f' },
    { "verbose", no_argument, NULL, 'v' },
    { "dry-run", no_argument, NULL, 'n' },
    { "version", no_argument, NULL, 'V' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct cairnd_opts o = { 0 };
  const char *tls, *ctl_tls;
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
    case OPT_TLS_MODE: set_opt (&o.tls, optarg); break;
    case OPT_TLS_PSK: set_opt (&o.tls_psk, optarg); break;
    case OPT_TLS_VERIFY: o.tls_verify_peer = true; break;
    case OPT_TLS_USER: set_opt (&o.tls_username, optarg); break;
    case 't': set_opt (&o.threads, optarg); break;
    case OPT_CACHE: set_opt (&o.cache, optarg); break;
    case OPT_VERIFY: set_opt (&o.verify, optarg); break;
    case OPT_LIST_CKPT: o.list_checkpoints = true; break;
    case OPT_INTENT_LOG: o.intent_log = true; break;
    case OPT_DEGRADED: o.degraded = true; break;
    case OPT_STANDBY: o.standby = true; break;
    case OPT_PLUGIN: set_opt (&o.plugin, optarg); break;
    case OPT_CREATE: set_opt (&o.create, optarg); break;
    case OPT_PREALLOC: set_opt (&o.preallocate, optarg); break;
    case OPT_PIDFILE: set_opt (&o.pidfile, optarg); break;
    case OPT_GROUP: set_opt (&o.control_group, optarg); break;
    case OPT_CONTROL_TCP: set_opt (&o.control_tcp, optarg); break;
    case OPT_CONTROL_TLS: set_opt (&o.control_tls, optarg); break;
    case OPT_METRICS: set_opt (&o.metrics, optarg); break;
    case OPT_CEPH_CONF: set_opt (&o.ceph_conf, optarg); break;
    case OPT_CEPH_ID: set_opt (&o.ceph_id, optarg); break;
    case OPT_CEPH_KEYRING: set_opt (&o.ceph_keyring, optarg); break;
    case OPT_INSECURE: o.control_insecure = true; break;
    case OPT_GRANTS: set_opt (&o.grants, optarg); break;
    case 'f': o.foreground = true; break;
    case 'v': o.verbose = true; break;
    case 'n': o.dry_run = true; break;
    case 'V': printf ("cairnd %s\n", PACKAGE_VERSION); return finish (&o, 0);
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
    return finish (&o, 2);
  }
  if (o.create && strchr (o.pool, ',')) {
    fprintf (stderr, "cairnd: --create makes a pool of one device: make a "
             "pool of several with 'cairn mkpool PATH... --size SIZE'\n");
    return finish (&o, 2);
  }
#ifndef HAVE_LIBMICROHTTPD
  if (o.metrics) {
    fprintf (stderr, "cairnd: --metrics %s: this Cairn was built without "
             "metrics support (configure found no libmicrohttpd: install "
             "libmicrohttpd-dev and build again)\n", o.metrics);
    return finish (&o, 2);
  }
#endif
  if (o.verify && strcmp (o.verify, "disk") != 0 &&
      strcmp (o.verify, "always") != 0) {
    fprintf (stderr, "cairnd: --verify %s: expected disk or always\n",
             o.verify);
    return finish (&o, 2);
  }
  if (o.plugin == NULL)
    set_opt (&o.plugin, PLUGINDIR "/nbdkit-cairn-plugin.so");
  if (o.control == NULL)
    set_opt (&o.control, DEFAULT_CONTROL);
  tls = tls_mode (&o, !o.dry_run);
  ctl_tls = o.control_tls ? o.control_tls : tls;
  if (o.control_tcp && strcmp (ctl_tls, "off") == 0 && !o.control_insecure) {
    fprintf (stderr, "cairnd: --control-tcp without TLS would let anyone who "
             "reaches the port manage the pool: give keys (--tls-psk FILE "
             "or --tls-certs DIR), or, on a trusted host or network only, "
             "add --control-insecure (the port then stays on 127.0.0.1 "
             "unless --control-tcp names another address)\n");
    return finish (&o, 2);
  }
  if (!o.dry_run && (make_parent_dir (o.control) < 0 ||
                     (o.create && create_pool (o.pool, o.create,
                                                o.preallocate) < 0) ||
                     check_start (&o) < 0))
    return finish (&o, 1);

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
  if (strcmp (tls, "off") != 0) {
    add_arg (nargv, &nargc, kv ("--tls", tls));
    if (o.tls_certs)
      add_arg (nargv, &nargc, kv ("--tls-certificates", o.tls_certs));
    if (o.tls_psk)
      add_arg (nargv, &nargc, kv ("--tls-psk", o.tls_psk));
    if (o.tls_verify_peer)
      add_arg (nargv, &nargc, "--tls-verify-peer");
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
  {
    char *list = strdup (o.pool), *save = NULL;

    if (list == NULL) {
      perror ("cairnd: strdup");
      return finish (&o, 1);
    }
    for (char *p = strtok_r (list, ",", &save); p;
         p = strtok_r (NULL, ",", &save))
      add_arg (nargv, &nargc, kv ("pool", p));
    free (list);
  }
  if (o.degraded)
    add_arg (nargv, &nargc, "degraded=true");
  if (o.standby)
    add_arg (nargv, &nargc, "standby=true");
  if (o.ceph_conf)
    add_arg (nargv, &nargc, kv ("ceph-conf", o.ceph_conf));
  if (o.ceph_id)
    add_arg (nargv, &nargc, kv ("ceph-id", o.ceph_id));
  if (o.ceph_keyring)
    add_arg (nargv, &nargc, kv ("ceph-keyring", o.ceph_keyring));
  add_arg (nargv, &nargc, kv ("control", o.control));
  if (o.control_group)
    add_arg (nargv, &nargc, kv ("control-group", o.control_group));
  if (o.control_tcp)
    add_arg (nargv, &nargc, kv ("control-tcp", o.control_tcp));
  if (o.grants)
    add_arg (nargv, &nargc, kv ("grants", o.grants));
  if (o.control_tcp && o.control_insecure && strcmp (ctl_tls, "off") == 0)
    add_arg (nargv, &nargc, "control-insecure=true");
  if (strcmp (ctl_tls, "off") != 0) {
    add_arg (nargv, &nargc, kv ("control-tls", ctl_tls));
    if (o.tls_certs)
      add_arg (nargv, &nargc, kv ("control-tls-certificates", o.tls_certs));
    if (o.tls_psk)
      add_arg (nargv, &nargc, kv ("control-tls-psk", o.tls_psk));
    if (o.tls_username)
      add_arg (nargv, &nargc, kv ("control-tls-username", o.tls_username));
    if (o.tls_verify_peer)
      add_arg (nargv, &nargc, "control-tls-verify-peer=true");
  }
  if (o.cache)
    add_arg (nargv, &nargc, kv ("cache", o.cache));
  if (o.verify)
    add_arg (nargv, &nargc, kv ("verify", o.verify));
  if (o.list_checkpoints)
    add_arg (nargv, &nargc, "list-checkpoints=true");
  if (o.intent_log)
    add_arg (nargv, &nargc, "intent-log=true");
  if (o.metrics)
    add_arg (nargv, &nargc, kv ("metrics", o.metrics));

  if (o.dry_run) {
    for (int i = 0; i < nargc; i++) {
      if (i)
        putchar (' ');
      print_quoted (nargv[i]);
    }
    printf ("\n");
    return finish (&o, 0);
  }
  execv (NBDKIT, nargv);
  fprintf (stderr, "cairnd: cannot run %s: %s (install the Debian package 'nbdkit')\n",
           NBDKIT, strerror (errno));
  return finish (&o, 1);
}
