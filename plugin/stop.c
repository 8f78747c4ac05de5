/* nbdkit-cairn-plugin: ending idle NBD connections when nbdkit quits.
 *
 * nbdkit 1.32 stops on SIGTERM (or SIGINT, SIGQUIT, SIGHUP) by setting a
 * quit flag and waking its accept loop; it then waits for every
 * connection thread to return before it calls .cleanup and exits.  A
 * connection thread checks the flag only between requests: between them
 * it sits in read(2) on the client's socket, so a client that is
 * connected and idle (a VM's disk that nobody writes) held the whole
 * server up until its next request, for ever if none came (issue #33).
 *
 * The plugin must not install signal handlers (DESIGN §3), but
 * nbdkit_nanosleep, nbdkit's public sleep, returns early with ESHUTDOWN
 * once the quit flag is set (it polls nbdkit's quit pipe).  So a thread
 * of ours sleeps in it in short slices; when it returns ESHUTDOWN, the
 * thread shuts down reading on every NBD client socket (shutdown(2),
 * SHUT_RD).  A connection thread blocked in read(2) then reads end of
 * file, as if the client had disconnected, and returns; a request being
 * served still sends its reply, since writing stays open.  nbdkit then
 * calls .close for each connection and .cleanup, which commits the pool.
 *
 * Which sockets are NBD clients': nbdkit's listening sockets are the only
 * ones open in .after_fork (the control server starts after), so their
 * addresses are recorded then; a client socket is a connected stream
 * socket whose local address is one of theirs (the path of a Unix
 * socket; the port, and the address unless the listener's is a wildcard,
 * for TCP).  The control server's sockets have other addresses and are
 * closed by .cleanup as before.  The descriptors are found in
 * /proc/self/fd, and the pass repeats every 100 ms until .cleanup, for a
 * connection accepted while quitting.
 *
 * Invariants:
 *  1. Only sockets accepted on a listener recorded in .after_fork are
 *     shut down, and only for reading.
 *  2. Nothing is done before nbdkit sets its quit flag.
 *  3. stop_watch_end returns only after the thread has exited.
 */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include "stop.h"

/* nbdkit listens on few sockets (one Unix path, or TCP on a handful of
 * addresses).
 */
#define MAX_LISTENERS 16
/* A slice of nbdkit_nanosleep (it ends at once when nbdkit quits; this
 * bounds how long .cleanup waits for the thread when nbdkit ends without
 * quitting, as with -s), and how often the shutdown pass repeats once
 * quitting.
 */
#define SLEEP_SLICE_S 1
#define PASS_NS (100 * 1000 * 1000)

/* One listening socket's local address. */
struct listener {
  struct sockaddr_storage addr;
  socklen_t len;
};

/* The watch: from stop_watch_start to stop_watch_end. */
static struct listener listeners[MAX_LISTENERS];
static size_t n_listeners;
static pthread_t watch_thread;
static bool watching;
static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cond = PTHREAD_COND_INITIALIZER;
static bool watch_stop;         /* under watch_lock */

/* The calls below look at descriptors that other threads made and own
 * (nbdkit's accepted sockets, libuv's).  They only ask the kernel about
 * them, and a descriptor closed meanwhile gives EBADF; but
 * ThreadSanitizer models every descriptor as a synchronisation object and
 * reports such a look as a race with the thread that made it (the test
 * suite's race test failed so).  Made as plain system calls, which it
 * does not intercept, they are what they are: kernel queries.
 */
static int
sys_fstat (int fd, struct stat *st)
{
  return (int) syscall (SYS_fstat, fd, st);
}

static int
sys_getsockopt (int fd, int level, int name, void *val, socklen_t *len)
{
  return (int) syscall (SYS_getsockopt, fd, level, name, val, len);
}

static int
sys_getsockname (int fd, struct sockaddr *addr, socklen_t *len)
{
  return (int) syscall (SYS_getsockname, fd, addr, len);
}

static int
sys_shutdown (int fd, int how)
{
  return (int) syscall (SYS_shutdown, fd, how);
}

/* Call fn on each socket descriptor of this process. */
static void
each_socket (void (*fn) (int fd, void *opaque), void *opaque)
{
  DIR *dir = opendir ("/proc/self/fd");
  struct dirent *d;

  if (dir == NULL) {
    nbdkit_debug ("cairn: /proc/self/fd: %m");
    return;
  }
  while ((d = readdir (dir)) != NULL) {
    struct stat st;
    int fd;

    if (d->d_name[0] == '.')
      continue;
    fd = atoi (d->d_name);
    if (fd != dirfd (dir) && sys_fstat (fd, &st) == 0 && S_ISSOCK (st.st_mode))
      fn (fd, opaque);
  }
  closedir (dir);
}

/* Whether fd is a stream socket, and whether it listens. */
static bool
stream_socket (int fd, bool *listening)
{
  int type = 0, acc = 0;
  socklen_t len = sizeof type;

  if (sys_getsockopt (fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1 ||
      type != SOCK_STREAM)
    return false;
  len = sizeof acc;
  if (sys_getsockopt (fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) == -1)
    return false;
  *listening = acc != 0;
  return true;
}

/* Record fd's local address if it is a listening stream socket. */
static void
record_listener (int fd, void *opaque)
{
  struct listener *l = &listeners[n_listeners];
  bool listening;

  if (n_listeners == MAX_LISTENERS || !stream_socket (fd, &listening) ||
      !listening)
    return;
  l->len = sizeof l->addr;
  if (sys_getsockname (fd, (struct sockaddr *) &l->addr, &l->len) == 0)
    n_listeners++;
}

/* Whether a socket with local address a was accepted on listener l. */
static bool
accepted_on (const struct sockaddr_storage *a, socklen_t len,
             const struct listener *l)
{
  const struct sockaddr_in *a4 = (const void *) a, *l4 = (const void *) &l->addr;
  const struct sockaddr_in6 *a6 = (const void *) a, *l6 = (const void *) &l->addr;
  const struct sockaddr_un *au = (const void *) a, *lu = (const void *) &l->addr;

  if (a->ss_family != l->addr.ss_family)
    return false;
  switch (a->ss_family) {
  case AF_UNIX:
    return len > offsetof (struct sockaddr_un, sun_path) &&
           au->sun_path[0] != '\0' &&
           strncmp (au->sun_path, lu->sun_path, sizeof au->sun_path) == 0;
  case AF_INET:
    return a4->sin_port == l4->sin_port &&
           (l4->sin_addr.s_addr == htonl (INADDR_ANY) ||
            a4->sin_addr.s_addr == l4->sin_addr.s_addr);
  case AF_INET6:
    return a6->sin6_port == l6->sin6_port &&
           (IN6_IS_ADDR_UNSPECIFIED (&l6->sin6_addr) ||
            IN6_ARE_ADDR_EQUAL (&a6->sin6_addr, &l6->sin6_addr));
  default:
    return len == l->len && memcmp (a, &l->addr, len) == 0;
  }
}

/* Shut down reading on fd if it is an NBD client's socket (invariant 1);
 * opaque counts them.
 */
static void
end_client (int fd, void *opaque)
{
  struct sockaddr_storage addr;
  socklen_t len = sizeof addr;
  bool listening;
  unsigned *n = opaque;

  if (!stream_socket (fd, &listening) || listening ||
      sys_getsockname (fd, (struct sockaddr *) &addr, &len) == -1)
    return;
  for (size_t i = 0; i < n_listeners; i++)
    if (accepted_on (&addr, len, &listeners[i])) {
      if (sys_shutdown (fd, SHUT_RD) == 0)
        (*n)++;
      return;
    }
}

/* Wait for nbdkit's quit, then end the client connections until told to
 * stop.
 */
static void *
watch (void *arg)
{
  bool quitting = false, said = false;

  for (;;) {
    struct timespec until;
    unsigned n = 0;

    pthread_mutex_lock (&watch_lock);
    if (quitting && !watch_stop) {
      clock_gettime (CLOCK_REALTIME, &until);
      until.tv_nsec += PASS_NS;
      if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait (&watch_cond, &watch_lock, &until);
    }
    if (watch_stop) {
      pthread_mutex_unlock (&watch_lock);
      return NULL;
    }
    pthread_mutex_unlock (&watch_lock);

    if (!quitting) {
      /* Returns -1 with ESHUTDOWN (and logs that it ended early) once
       * nbdkit quits (invariant 2).
       */
      if (nbdkit_nanosleep (SLEEP_SLICE_S, 0) == 0)
        continue;
      if (errno != ESHUTDOWN) {
        nbdkit_error ("cairn: watching for the server's stop: %m; idle "
                      "clients will hold a stop until they disconnect");
        return NULL;
      }
      quitting = true;
    }
    each_socket (end_client, &n);
    if (!said || n > 0)
      nbdkit_debug ("cairn: stopping: closed %u client connection(s)", n);
    said = true;
  }
}

/* Record nbdkit's listeners and start the watch thread, with every
 * signal blocked so that signals go to nbdkit's threads.
 */
int
stop_watch_start (void)
{
  sigset_t all, old;
  int r;

  n_listeners = 0;
  each_socket (record_listener, NULL);
  nbdkit_debug ("cairn: %zu listening socket(s) whose clients a stop ends",
                n_listeners);
  watch_stop = false;
  sigfillset (&all);
  pthread_sigmask (SIG_SETMASK, &all, &old);
  r = pthread_create (&watch_thread, NULL, watch, NULL);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  if (r != 0) {
    errno = r;
    nbdkit_error ("cairn: starting the stop watch: %m");
    return -1;
  }
  watching = true;
  return 0;
}

/* Tell the watch thread to stop and wait for it (invariant 3). */
void
stop_watch_end (void)
{
  if (!watching)
    return;
  pthread_mutex_lock (&watch_lock);
  watch_stop = true;
  pthread_cond_signal (&watch_cond);
  pthread_mutex_unlock (&watch_lock);
  pthread_join (watch_thread, NULL);
  watching = false;
}
