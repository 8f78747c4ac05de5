/* Cairn base: Unix socket paths that a server is about to bind.
 *
 * A server that dies (SIGKILL, a crash) or that nbdkit stops leaves its
 * Unix socket behind, and bind(2) on the path then fails with EADDRINUSE.
 * Such a socket is stale when connect(2) to it is refused: nobody listens.
 * The control server (server/control-listen.c) and cairnd (for nbdkit's
 * NBD socket) both check a path this way before they bind it.
 */
#ifndef CAIRN_SOCKPATH_H
#define CAIRN_SOCKPATH_H

#include <stdbool.h>

#include "util.h"

/* Make path free for a server to bind: nothing there is fine, a socket
 * that nobody listens on is removed (*removed set), a live one fails with
 * -EADDRINUSE, anything that is not a socket with -EEXIST, each with a
 * message that starts "WHAT PATH: " and says what to do.
 */
int sockpath_reclaim (const char *what, const char *path, bool *removed)
  CAIRN_WUR;

#endif /* CAIRN_SOCKPATH_H */
