/* Cairn grants: who may do what on which volumes (cairn-grants(5)).
 *
 * A grants file is a list of rules, one a line:
 *
 *   PRINCIPAL  PREFIX  [nbd=none|ro|rw] [control=OP,OP,...] [tls=required]
 *
 * A caller (struct grant_peer: what the transport knows of it) matches a
 * rule when it is the rule's principal; its rights on a volume are the
 * union of the rights of every matching rule whose prefix covers the
 * volume's name.  Nothing matched, nothing allowed.  Pure functions over
 * memory: no sockets, no threads, no libuv, so the parser and the
 * decision are unit-tested and fuzzable on their own.  The control server
 * (server/) and the plugin's NBD side (plugin/) share them; what they
 * know of a caller differs (cairn-grants(5), PRINCIPALS).
 *
 * Without a grants file there is no struct grants, and callers keep the
 * behaviour from before grants: every caller who can reach a socket is
 * the administrator.
 */
#ifndef CAIRN_SERVER_GRANTS_H
#define CAIRN_SERVER_GRANTS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

/* Most supplementary groups of a caller that gid: rules see (the first
 * ones the kernel reports; a caller in more is judged by these).
 */
#define GRANT_MAX_GROUPS 64

/* Longest grants file line, and most rules, a file may have. */
#define GRANTS_MAX_LINE 4096
#define GRANTS_MAX_RULES 65536

/* NBD access, ordered: a higher level includes the lower ones. */
enum grant_nbd {
  GRANT_NBD_NONE = 0,
  GRANT_NBD_RO = 1,
  GRANT_NBD_RW = 2,
};

/* Control operations, as bits of a mask (cairn-grants(5), OPERATIONS). */
enum grant_op {
  GRANT_OP_LIST = 1u << 0,      /* see the volume: lists, show, stats */
  GRANT_OP_CREATE = 1u << 1,    /* create, resize, set properties */
  GRANT_OP_SNAPSHOT = 1u << 2,  /* snapshots and checkpoints, rollback */
  GRANT_OP_CLONE = 1u << 3,     /* clone from it, into the prefix */
  GRANT_OP_DELETE = 1u << 4,    /* delete volumes and snapshots */
  GRANT_OP_SEND = 1u << 5,      /* send streams, diff */
  GRANT_OP_RECEIVE = 1u << 6,   /* receive streams into it */
  GRANT_OP_REPLICATE = 1u << 7, /* replicate.push/pull jobs */
  GRANT_OP_ADMIN = 1u << 8,     /* all of the above; with prefix '*',
                                   the server itself: grants.reload,
                                   audit.list, settings, every job */
};
#define GRANT_OP_ALL                                                      \
  (GRANT_OP_LIST | GRANT_OP_CREATE | GRANT_OP_SNAPSHOT | GRANT_OP_CLONE | \
   GRANT_OP_DELETE | GRANT_OP_SEND | GRANT_OP_RECEIVE |                    \
   GRANT_OP_REPLICATE | GRANT_OP_ADMIN)

/* What the transport knows of a caller; absent facts are NULL / false. */
struct grant_peer {
  const char *psk_identity;  /* TLS PSK username */
  const char *x509_name;     /* certificate subject CN (control) or DN */
  bool has_cred;             /* a Unix socket peer: uid and gid are set */
  uid_t uid;
  gid_t gid;                 /* its primary group */
  unsigned ngroups;          /* its supplementary groups, where known */
  gid_t groups[GRANT_MAX_GROUPS];
  bool has_addr;             /* a TCP peer: addr is set */
  struct sockaddr_storage addr;
  bool tls;                  /* the connection uses TLS */
  /* A Unix socket peer running as the server's own user or root: always
   * the administrator, so that a bad grants file cannot lock the
   * operator out (cairn-grants(5), WHO IS ADMINISTRATOR).
   */
  bool owner;
};

struct grants;

/* Parse a grants file's text (len bytes; NUL bytes are refused).  name
 * is what messages call it (its path).  On error returns a negative errno
 * with a message that names the line: "FILE line N: ...".
 */
int grants_parse (const char *text, size_t len, const char *name,
                  struct grants **out) CAIRN_WUR;
/* Read and parse the file at path. */
int grants_load (const char *path, struct grants **out) CAIRN_WUR;
void grants_free (struct grants *g);
/* How many rules g has. */
size_t grants_count (const struct grants *g);

/* The control operations peer may use on the volume called name (an
 * export name's volume part; "VOL@SNAP" is judged as VOL).  NULL g: all.
 * GRANT_OP_ADMIN in a rule gives every operation.
 */
unsigned grants_ops (const struct grants *g, const struct grant_peer *peer,
                     const char *name);
/* The NBD access peer has to the export or volume called name. */
enum grant_nbd grants_nbd (const struct grants *g,
                           const struct grant_peer *peer, const char *name);
/* True when peer administers the server: admin on prefix '*' (or no
 * grants at all).
 */
bool grants_is_admin (const struct grants *g, const struct grant_peer *peer);
/* True when some rule could give peer anything on some volume (used to
 * tell "you may see nothing" apart from "this one is not yours").
 */
bool grants_knows (const struct grants *g, const struct grant_peer *peer);

/* Describe peer for logs and the audit trail ("psk:alice",
 * "uid:1000/gid:1000", "addr:192.0.2.7", "unix", ...) into buf.
 */
void grants_peer_name (const struct grant_peer *peer, char *buf, size_t len);
/* The x509:NAME of a certificate whose subject is dn, a Distinguished
 * Name as RFC 4514 writes it ("CN=alice,O=Example\, Inc."): the value of
 * its one CN attribute, unescaped, into buf.  Returns false when dn has
 * no CN, more than one, or one that is empty, longer than len - 1 or
 * badly escaped (such a certificate has no x509 name).
 * The control server reads the CN from the certificate itself; the NBD
 * side, where nbdkit gives only the DN (nbdkit_peer_tls_dn), uses this.
 */
bool grants_dn_common_name (const char *dn, char *buf, size_t len);
/* Parse an operation name ("snapshot") to its bit; 0 if unknown. */
unsigned grants_op_bit (const char *name);

/* ------------------------------------------------------------ the store
 *
 * The grants in force, shared by threads (the control loop, its workers,
 * nbdkit's connection threads) and replaced whole by a reload.  A NULL
 * store means no grants file: everyone is the administrator.
 */
struct grants_store;

/* Load path; fails (with the line) if it does not parse. */
int grants_store_open (const char *path, struct grants_store **out)
  CAIRN_WUR;
void grants_store_free (struct grants_store *s);
/* Read the file again; on error the grants in force stay, and the
 * message says why.  *nrules: how many rules are now in force.
 */
int grants_store_reload (struct grants_store *s, size_t *nrules) CAIRN_WUR;
/* The file's path (borrowed). */
const char *grants_store_path (const struct grants_store *s);
/* grants_ops, grants_nbd, grants_is_admin, grants_knows on the grants in
 * force (all rights with a NULL store, or for an owner peer).
 */
unsigned grants_store_ops (struct grants_store *s,
                           const struct grant_peer *peer, const char *name);
enum grant_nbd grants_store_nbd (struct grants_store *s,
                                 const struct grant_peer *peer,
                                 const char *name);
bool grants_store_is_admin (struct grants_store *s,
                            const struct grant_peer *peer);

#endif /* CAIRN_SERVER_GRANTS_H */
