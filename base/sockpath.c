/* Cairn base: Unix socket paths that a server is about to bind (sockpath.h).
 *
 * The test is connect(2), non-blocking: accepted (or EAGAIN, a live
 * server with a full backlog) means a server listens there; ECONNREFUSED
 * means the socket has no listener, and so is stale.  Anything else
 * (EACCES, say) leaves the path alone and says why.
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sockpath.h"

/* Make path free to bind, removing a stale socket (see sockpath.h). */
int
sockpath_reclaim (const char *what, const char *path, bool *removed)
{
  struct sockaddr_un sa = { .sun_family = AF_UNIX };
  struct stat st;
  int fd, r;

  *removed = false;
  if (strlen (path) >= sizeof sa.sun_path)
    return cairn_fail (-ENAMETOOLONG, "%s %s: the path is too long for a "
                       "Unix socket (at most %zu bytes): choose a shorter "
                       "one", what, path, sizeof sa.sun_path - 1);
  if (lstat (path, &st) == -1) {
    if (errno == ENOENT)
      return 0;
    return cairn_fail (-errno, "%s %s: %m", what, path);
  }
  if (!S_ISSOCK (st.st_mode))
    return cairn_fail (-EEXIST, "%s %s: the path exists and is not a "
                       "socket: remove it or choose another path", what, path);

  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd == -1)
    return cairn_fail (-errno, "socket: %m");
  memcpy (sa.sun_path, path, strlen (path) + 1);
  r = connect (fd, (struct sockaddr *) &sa, sizeof sa);
  if (r == 0 || errno == EAGAIN) {
    close (fd);
    return cairn_fail (-EADDRINUSE, "%s %s: another server is already "
                       "listening on it: stop that server first, or choose "
                       "another path", what, path);
  }
  r = -errno;
  close (fd);
  if (r != -ECONNREFUSED)
    return cairn_fail (r, "%s %s: cannot tell whether a server is using it: "
                       "%s", what, path, strerror (-r));
  /* Nobody listens: a server died or stopped without removing it. */
  if (unlink (path) == -1 && errno != ENOENT)
    return cairn_fail (-errno, "%s %s: cannot remove the stale socket: %m",
                       what, path);
  *removed = true;
  return 0;
}
