/* Cairn fuzz harness: the control server's first bytes
 * (tests/fuzz/README.md).
 *
 * Two control servers run in the process, on loopback TCP with PSK
 * credentials, one with control-tls=on (the first byte chooses TLS or
 * plain: conn_sniff) and one with control-tls=require, both with a setup
 * deadline of FUZZ_DEADLINE_MS.  Each input is sent by a new TCP client:
 * the first byte's bit 0 picks the server, bit 1 whether the client then
 * stops sending and waits ("stall") instead of closing its side; the rest
 * is what it sends.
 *
 * What must hold, beyond no crash, leak or undefined behaviour in the
 * server's thread:
 *  1. a client that closes its side is closed by the server in time (no
 *     hang);
 *  2. a stalled client that has not finished a TLS handshake (its first
 *     byte 0x16, or any client of the require server) is closed once the
 *     deadline has passed;
 *  3. after each input both servers still answer server.ping on their
 *     Unix sockets.
 * The TLS handshakes themselves are OpenSSL's, which this build does not
 * instrument: the harness reaches what Cairn does around them.
 */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "control.h"
#include "fuzz.h"
#include "tls.h"

#define FUZZ_DEADLINE_MS 100
/* What counts as a hang: long, because a niced fuzzer on a busy machine
 * can wait seconds for a CPU (a 5 s wait once failed a ping that 1,860
 * replays of the same corpus on a quieter machine never failed).
 */
#define FUZZ_WAIT_MS 20000

#define KEY "fuzz:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"

static char tmpdir[64];
static struct server {
  struct control_server *srv;
  char path[96];
  unsigned port;
} servers[2];
static bool ready;

/* The servers' warnings (a client closed at its deadline) are expected. */
static void
quiet (void *opaque, const char *msg)
{
}

/* Remove the servers' files at exit (the servers go with the process). */
static void
cleanup (void)
{
  char path[128];

  for (int i = 0; i < 2; i++)
    unlink (servers[i].path);
  snprintf (path, sizeof path, "%s/keys.psk", tmpdir);
  unlink (path);
  rmdir (tmpdir);
}

/* Start the two servers. */
static void
setup (void)
{
  struct tls_config tc = { 0 };
  struct tls_ctx *tls;
  char psk[128];
  FILE *f;

  strcpy (tmpdir, "/tmp/cairn-fuzz-server.XXXXXX");
  if (mkdtemp (tmpdir) == NULL)
    fuzz_die ("mkdtemp: %m");
  snprintf (psk, sizeof psk, "%s/keys.psk", tmpdir);
  f = fopen (psk, "w");
  if (f == NULL || fputs (KEY, f) < 0 || fclose (f) != 0)
    fuzz_die ("writing %s: %m", psk);
  atexit (cleanup);
  tc.psk_file = psk;
  if (tls_ctx_new (&tc, true, &tls) < 0)
    fuzz_die ("tls_ctx_new: %s", cairn_errmsg ());
  for (int i = 0; i < 2; i++) {
    struct control_config cfg = {
      .unix_path = servers[i].path, .tcp_address = "127.0.0.1",
      .tls_mode = i ? TLS_REQUIRE : TLS_ON, .tls = tls,
      .handshake_timeout_ms = FUZZ_DEADLINE_MS, .warn = quiet,
    };

    snprintf (servers[i].path, sizeof servers[i].path, "%s/ctl%d.sock",
              tmpdir, i);
    if (control_server_start (&cfg, &servers[i].srv) < 0)
      fuzz_die ("control_server_start: %s", cairn_errmsg ());
    servers[i].port = control_server_tcp_port (servers[i].srv);
  }
}

/* Read from fd until the peer closes it: true if it did within ms. */
static bool
wait_closed (int fd, int ms)
{
  char buf[4096];

  for (;;) {
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int r = poll (&p, 1, ms);
    ssize_t n;

    if (r == 0)
      return false;
    if (r < 0 && errno != EINTR)
      fuzz_die ("poll: %m");
    if (r < 0)
      continue;
    n = read (fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return true;
    if (n < 0 && errno != EINTR && errno != EAGAIN)
      fuzz_die ("read: %m");
  }
}

/* Invariant 3: a server answers a ping on its Unix socket. */
static void
check_alive (const struct server *s)
{
  static const char ping[] = "{\"jsonrpc\":\"2.0\",\"id\":1,"
                             "\"method\":\"server.ping\"}\n";
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  char buf[512];
  struct pollfd p;
  ssize_t n;
  int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

  snprintf (a.sun_path, sizeof a.sun_path, "%s", s->path);
  if (fd < 0 || connect (fd, (struct sockaddr *) &a, sizeof a) < 0 ||
      write (fd, ping, sizeof ping - 1) != (ssize_t) sizeof ping - 1)
    fuzz_die ("pinging %s: %m", s->path);
  p = (struct pollfd) { .fd = fd, .events = POLLIN };
  if (poll (&p, 1, FUZZ_WAIT_MS) != 1)
    fuzz_die ("the server on %s does not answer a ping in %d ms", s->path,
              FUZZ_WAIT_MS);
  n = read (fd, buf, sizeof buf - 1);
  if (n <= 0)
    fuzz_die ("the server on %s closed a ping's connection without a reply",
              s->path);
  buf[n] = '\0';
  if (strstr (buf, "\"result\"") == NULL)
    fuzz_die ("the server on %s answers a ping with %s", s->path, buf);
  close (fd);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct sockaddr_in a = { .sin_family = AF_INET };
  const struct server *s;
  bool stall, handshaking;
  size_t off = 1;
  int fd;

  if (!ready) {
    setup ();
    ready = true;
  }
  if (size < 1)
    return 0;
  s = &servers[data[0] & 1];
  stall = (data[0] & 2) != 0;
  handshaking = (data[0] & 1) || (size > 1 && data[1] == 0x16);

  a.sin_port = htons (s->port);
  a.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect (fd, (struct sockaddr *) &a, sizeof a) < 0)
    fuzz_die ("connecting to port %u: %m", s->port);
  while (off < size) {
    ssize_t n = send (fd, data + off, size - off, MSG_NOSIGNAL);

    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      break;                    /* the server closed it: allowed */
    if (n < 0 && errno != EINTR)
      fuzz_die ("send: %m");
    if (n > 0)
      off += n;
  }
  if (!stall) {
    shutdown (fd, SHUT_WR);
    if (!wait_closed (fd, FUZZ_WAIT_MS))
      fuzz_die ("the server kept a closed client's connection open %d ms",
                FUZZ_WAIT_MS);
  }
  else if (handshaking && !wait_closed (fd, FUZZ_DEADLINE_MS + FUZZ_WAIT_MS))
    fuzz_die ("the server kept a client that never finished its handshake "
              "past its deadline");
  close (fd);
  check_alive (&servers[0]);
  check_alive (&servers[1]);
  return 0;
}
