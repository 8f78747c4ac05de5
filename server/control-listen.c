/* Cairn control server: binding its sockets (see control.c).
 *
 * The Unix socket is made mode 0660 (and given its group) before it
 * listens, so nobody connects through looser permissions; a stale socket
 * left by a dead server is replaced, a live server's is refused.  TCP
 * listens only when configured.
 */
#include <config.h>

#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control-int.h"
#include "sockpath.h"

/* Pending connections the kernel queues for us. */
#define CONTROL_BACKLOG 128

/* Look a group up by name. */
static int
lookup_group (const char *name, gid_t *gid)
{
  size_t size = 4096;

  for (;;) {
    struct group grp, *res = NULL;
    char *buf = malloc (size);
    int r;

    if (buf == NULL)
      return cairn_fail (-ENOMEM, "out of memory");
    r = getgrnam_r (name, &grp, buf, size, &res);
    if (r == 0 && res)
      *gid = res->gr_gid;
    free (buf);
    if (r == ERANGE && size < 1024 * 1024) {
      size *= 2;
      continue;
    }
    if (r != 0)
      return cairn_fail (-r, "looking up group %s: %s", name, strerror (r));
    if (res == NULL)
      return cairn_fail (-ENOENT, "control socket group %s does not exist: "
                         "create it (groupadd %s) or name another", name,
                         name);
    return 0;
  }
}

/* Create the Unix socket: mode 0660 (and the group) are set before
 * listening, so nobody can connect through looser permissions.
 */
int
control_listen_unix (uv_loop_t *loop, uv_pipe_t *listener, bool *inited,
                     const struct control_config *cfg, void *data,
                     uv_connection_cb cb)
{
  const char *path = cfg->unix_path;
  struct sockaddr_un sa;
  gid_t gid = (gid_t) -1;
  bool removed;
  int r;

  if (strlen (path) >= sizeof sa.sun_path)
    return cairn_fail (-ENAMETOOLONG, "control socket %s: the path is longer "
                       "than %zu bytes: choose a shorter path", path,
                       sizeof sa.sun_path - 1);
  if (cfg->unix_group) {
    r = lookup_group (cfg->unix_group, &gid);
    if (r < 0)
      return r;
  }
  r = sockpath_reclaim ("control socket", path, &removed);
  if (r < 0)
    return r;

  r = uv_pipe_init (loop, listener, 0);
  if (r < 0)
    return cairn_fail (-EIO, "uv_pipe_init: %s", uv_strerror (r));
  *inited = true;
  listener->data = data;
  r = uv_pipe_bind (listener, path);
  if (r < 0)
    return cairn_fail (r, "control socket %s: bind: %s", path,
                       uv_strerror (r));
  if (chmod (path, 0660) == -1)
    return cairn_fail (-errno, "control socket %s: chmod: %s", path,
                       strerror (errno));
  if (cfg->unix_group && chown (path, (uid_t) -1, gid) == -1)
    return cairn_fail (-errno, "control socket %s: cannot give it to group "
                       "%s: %s", path, cfg->unix_group, strerror (errno));
  r = uv_listen ((uv_stream_t *) listener, CONTROL_BACKLOG, cb);
  if (r < 0)
    return cairn_fail (r, "control socket %s: listen: %s", path,
                       uv_strerror (r));
  return 0;
}

/* Listen on TCP (only when configured: there is no TLS or authentication
 * on it yet, so bind it to a trusted address).
 */
int
control_listen_tcp (uv_loop_t *loop, uv_tcp_t *listener, bool *inited,
                    const struct control_config *cfg, void *data,
                    uv_connection_cb cb, unsigned *port_out)
{
  struct addrinfo hints = {
    .ai_family = AF_UNSPEC,
    .ai_socktype = SOCK_STREAM,
    .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
  };
  struct addrinfo *res;
  struct sockaddr_storage ss;
  int sslen = sizeof ss;
  char port[16];
  int r;

  snprintf (port, sizeof port, "%u", cfg->tcp_port);
  r = getaddrinfo (cfg->tcp_address, port, &hints, &res);
  if (r != 0)
    return cairn_fail (-EINVAL, "control address %s: %s", cfg->tcp_address,
                       gai_strerror (r));
  r = uv_tcp_init (loop, listener);
  if (r < 0) {
    freeaddrinfo (res);
    return cairn_fail (-EIO, "uv_tcp_init: %s", uv_strerror (r));
  }
  *inited = true;
  listener->data = data;
  r = uv_tcp_bind (listener, res->ai_addr, 0);
  freeaddrinfo (res);
  if (r == 0)
    r = uv_listen ((uv_stream_t *) listener, CONTROL_BACKLOG, cb);
  if (r < 0)
    return cairn_fail (r, "control address %s port %u: %s",
                       cfg->tcp_address, cfg->tcp_port, uv_strerror (r));
  r = uv_tcp_getsockname (listener, (struct sockaddr *) &ss, &sslen);
  if (r < 0)
    return cairn_fail (r, "control address %s: getsockname: %s",
                       cfg->tcp_address, uv_strerror (r));
  *port_out = ntohs (ss.ss_family == AF_INET6
                         ? ((struct sockaddr_in6 *) &ss)->sin6_port
                         : ((struct sockaddr_in *) &ss)->sin_port);
  return 0;
}

int
listen_parse (const char *what, const char *value, char **addr,
              unsigned *port)
{
  const char *colon = strrchr (value, ':');
  const char *p = colon ? colon + 1 : value;
  size_t alen = colon ? (size_t) (colon - value) : 0;
  const char *a = value;
  char *end;
  unsigned long n;

  if (colon && value[0] == '[' && alen >= 2 && value[alen - 1] == ']') {
    a++;
    alen -= 2;
  }
  errno = 0;
  n = strtoul (p, &end, 10);
  if (*p < '0' || *p > '9' || *end != '\0' || errno || n > 65535 ||
      (colon && alen == 0))
    return cairn_fail (-EINVAL, "%s=%s: give [ADDRESS:]PORT (PORT 0 to "
                       "65535, [ADDRESS]:PORT for IPv6; the address "
                       "defaults to 127.0.0.1)", what, value);
  *addr = alen ? strndup (a, alen) : strdup ("127.0.0.1");
  if (*addr == NULL)
    return cairn_fail (-ENOMEM, "out of memory");
  *port = (unsigned) n;
  return 0;
}
