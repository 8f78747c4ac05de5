/* Cairn control client: what control-client.c (calls, streams) and
 * control-client-tcp.c (TCP, TLS) share; private to the client.
 */
#ifndef CAIRN_NET_CONTROL_CLIENT_INT_H
#define CAIRN_NET_CONTROL_CLIENT_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <openssl/ssl.h>

#include "control-client.h"
#include "rpc.h"
#include "tls.h"

struct control_client {
  int fd;
  char *path;                   /* the socket, or "HOST:PORT" */
  /* TCP (check_alive connects the same way): */
  char *host;                   /* NULL on a Unix socket */
  unsigned port;
  struct tls_ctx *tls;          /* borrowed; NULL: plain */
  SSL *ssl;                     /* the TLS session on fd, or NULL */
  char tls_why[512];            /* why the session failed */
  bool tls_confirmed;           /* the server sent data: it took us */
  int timeout_ms;
  int liveness_ms;              /* 0: no liveness checks */
  bool broken;                  /* a call failed mid-way: reconnect */
  json_int_t next_id;
  struct control_lines lines;
  int last_code;
  char last_name[32];
  json_t *last_data;            /* the last error reply's data, or NULL */
  bool (*cancelled) (void *opaque);   /* polled while waiting */
  void *cancel_opaque;
  control_client_notify_fn notify;
  void *notify_opaque;
  /* Stream mode (the client's half of cairn-protocol(7) STREAM MODE): */
  json_t *stream_id;            /* the stream request's id, or NULL */
  struct control_frames frames; /* frames from the server (send) */
  char *rbuf;                   /* raw bytes read: rbuf[rpos, rlen) */
  size_t rpos, rlen;
  char *msg;                    /* a message frame being read */
  size_t msg_len;
  bool replied;                 /* the final reply came during the stream */
  char *reply_line;             /* ... this one */
  size_t reply_len;
};

/* The deadline for timeout_ms from now (-1: none). */
int64_t client_deadline_after (int timeout_ms);
/* Wait until fd is ready for events or the deadline passes: 0 or
 * -ETIMEDOUT, or -ECANCELED (with a message) when c (may be NULL) is
 * cancelled.  Plaintext TLS holds already counts as readable.
 */
int client_wait_fd (const struct control_client *c, int fd, short events,
                    int64_t deadline);
/* Connect a non-blocking socket with a deadline: 0 or a negative errno. */
int client_connect_addr (int fd, const struct sockaddr *sa, socklen_t salen,
                         int64_t deadline);
/* send (2) and recv (2) on the connection, through TLS if it has it
 * (control-client-tcp.c); client_io_why says why one failed.
 */
ssize_t client_send (struct control_client *c, const void *buf, size_t len);
ssize_t client_recv (struct control_client *c, void *buf, size_t len);
const char *client_io_why (const struct control_client *c);

#endif /* CAIRN_NET_CONTROL_CLIENT_INT_H */
