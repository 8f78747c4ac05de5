#!/usr/bin/env bash
# Grants by X.509 certificate name on the control port (cairn-grants(5),
# x509:NAME): the control server terminates TLS itself and names a client
# by its certificate's subject CN.  With a CA and client certificates made
# by openssl: alice and bob each see and change only their own prefix, and
# the other's names are "not found" as missing ones are; a certificate of
# the same CA that no rule names, and one with two CNs, see nothing; a
# certificate of another CA is refused at the handshake.  A replicating
# server presents its own certificate and is judged by its CN.  The audit
# trail names the x509 principals.
. "$top_srcdir/tests/integration/grants-functions.sh"
require openssl
require python3

POOL_A="$TMPDIR_TEST/pool-a" POOL_B="$TMPDIR_TEST/pool-b"
NBD_A="$TMPDIR_TEST/a.nbd" NBD_B="$TMPDIR_TEST/b.nbd"
CTL_A="$TMPDIR_TEST/a.ctl" CTL_B="$TMPDIR_TEST/b.ctl"
CA="$TMPDIR_TEST/ca" OTHER="$TMPDIR_TEST/other-ca" GRANTS="$TMPDIR_TEST/grants"
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; (exit $rc); cleanup' EXIT
PORT_B=$(free_port)

# make_ca DIR: a CA (DIR/ca-cert.pem, DIR/ca-key.pem).
make_ca () {
  mkdir -p "$1"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1/ca-key.pem" -out "$1/ca-cert.pem" -days 2 \
    -subj "/CN=Cairn test CA $(basename "$1")" 2>/dev/null || fail "openssl: CA $1"
}
# make_cert CA DIR KIND SUBJECT: DIR/KIND-cert.pem and DIR/KIND-key.pem
# (KIND client or server) signed by CA, for 127.0.0.1, with CA's
# certificate beside them as DIR/ca-cert.pem: a directory for cairn
# --tls-certificates or control-tls-certificates=.
make_cert () {
  mkdir -p "$2"
  cp "$1/ca-cert.pem" "$2/"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$2/$3-key.pem" -out "$2/$3.csr" -subj "$4" 2>/dev/null &&
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >"$2/$3.ext" &&
  openssl x509 -req -in "$2/$3.csr" -CA "$1/ca-cert.pem" -CAkey "$1/ca-key.pem" \
    -CAcreateserial -days 2 -extfile "$2/$3.ext" -out "$2/$3-cert.pem" 2>/dev/null ||
    fail "openssl: certificate $4"
}
make_ca "$CA"
make_ca "$OTHER"
make_cert "$CA" "$TMPDIR_TEST/b" server "/CN=server-b"
make_cert "$CA" "$TMPDIR_TEST/a" server "/O=Cairn test/CN=server-a"
for who in alice bob carol; do
  make_cert "$CA" "$TMPDIR_TEST/$who" client "/O=Cairn test/CN=$who"
done
make_cert "$CA" "$TMPDIR_TEST/twocn" client "/CN=alice/CN=mallory"
make_cert "$OTHER" "$TMPDIR_TEST/forged" client "/CN=alice"
cp "$CA/ca-cert.pem" "$TMPDIR_TEST/forged/"   # it trusts the server's CA
cat >"$GRANTS" <<'EOF'
x509:alice    tenant-a/ control=list,snapshot,send
x509:bob      tenant-b/ control=list,snapshot
x509:server-a tenant-a/ control=receive
EOF

# server NAME POOL NBD CTL PARAMS...: nbdkit with the plugin, its pid in
# PID_<NAME>; returns once both sockets are there.
server () {
  local name=$1 pool=$2 nbd=$3 ctl=$4
  shift 4
  rm -f "$nbd" "$ctl"
  echo "=== server $name $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$NBDKIT" --foreground --unix "$nbd" "$PLUGIN" pool="$pool" \
    control="$ctl" "$@" >>"$NBDKIT_LOG" 2>&1 &
  printf -v "PID_$name" %s "$!"
  wait_for_sockets "$!" "nbdkit $name" "$NBDKIT_LOG" "$nbd" "$ctl"
}
# as WHO ARGS...: cairn with WHO's certificate directory; rc, out.
as () {
  local who=$1
  shift
  args=("cairn as $who" "$@")
  rc=0
  out=$(timeout -s KILL 60 "$CAIRN" --connect "127.0.0.1:$PORT_B" \
        --tls-certificates "$TMPDIR_TEST/$who" "$@" 2>&1) || rc=$?
}
b () { "$CAIRN" --socket "$CTL_B" "$@" >/dev/null || fail "on B: cairn $*"; }
# as WHO volume list --snapshots --json lists exactly the names given.
lists () {
  local who=$1
  shift
  as "$who" volume list --snapshots --json
  [ "$rc" -eq 0 ] || fail "$who: volume list: $out"
  python3 -c 'import json, sys
names = sorted(v["name"] for v in json.loads(sys.argv[1])["volumes"])
assert names == sys.argv[2:], names' "$out" "$@" || fail "$who lists: $out"
}

"$CAIRN" mkpool "$POOL_B" --size 256M >/dev/null || fail "mkpool B"
"$CAIRN" mkpool "$POOL_A" --size 256M >/dev/null || fail "mkpool A"
server B "$POOL_B" "$NBD_B" "$CTL_B" control-tcp="127.0.0.1:$PORT_B" \
  control-tls-certificates="$TMPDIR_TEST/b" control-tls-verify-peer=true \
  grants="$GRANTS"
for t in a b; do
  b volume create "tenant-$t/v" 16M
  b snapshot create "tenant-$t/v@s1"
done

# Each sees and changes its own prefix only.
lists alice tenant-a/v tenant-a/v@s1
lists bob tenant-b/v tenant-b/v@s1
as alice snapshot create tenant-a/v@s2
[ "$rc" -eq 0 ] || fail "alice cannot snapshot her own volume: $out"
as alice send tenant-a/v@s2 --from s1 --dry-run
[ "$rc" -eq 0 ] || fail "alice cannot send her own volume: $out"
as alice volume show tenant-b/v
same_as_missing tenant-b/v tenant-b/ghost as alice volume show tenant-b/ghost
as alice snapshot create tenant-b/v@mine
same_as_missing tenant-b/v tenant-b/ghost as alice snapshot create tenant-b/ghost@mine
as bob send tenant-a/v@s1 --dry-run
same_as_missing tenant-a/v tenant-a/ghost as bob send tenant-a/ghost@s1 --dry-run
as bob snapshot create tenant-b/v@s2
[ "$rc" -eq 0 ] || fail "bob cannot snapshot his own volume: $out"
as bob send tenant-b/v@s2 --dry-run
[ "$rc" -eq 1 ] && grep -q "not permitted: the grants give x509:bob no 'send'" <<<"$out" ||
  fail "bob's send without the send operation: $out"
# Known to the CA, unknown to the grants: nothing.  Two CNs: no name, so
# neither alice's rights nor anyone's.
lists carol
as carol volume show tenant-a/v
same_as_missing tenant-a/v tenant-a/ghost as carol volume show tenant-a/ghost
lists twocn
# Another CA's "alice": refused before any request.
as forged volume list
[ "$rc" -ne 0 ] || fail "a certificate of another CA was accepted"
grep -q "127.0.0.1:$PORT_B: the TLS handshake failed: tlsv1 alert unknown ca" <<<"$out" ||
  fail "another CA's certificate: $out"
wait_for grep -qE "TLS handshake with 127.0.0.1:[0-9]+ failed: .*certificate" "$NBDKIT_LOG" ||
  fail "the server did not log the refused certificate"

# A replicating server presents its certificate and is judged by its CN:
# receive on tenant-a/ only.
server A "$POOL_A" "$NBD_A" "$CTL_A" control-tls-certificates="$TMPDIR_TEST/a"
"$CAIRN" --socket "$CTL_A" volume create tenant-a/r 16M >/dev/null || fail "create on A"
"$CAIRN" --socket "$CTL_A" snapshot create tenant-a/r@s1 >/dev/null || fail "snapshot on A"
"$CAIRN" --socket "$CTL_A" volume create tenant-b/r 16M >/dev/null || fail "create on A"
"$CAIRN" --socket "$CTL_A" snapshot create tenant-b/r@s1 >/dev/null || fail "snapshot on A"
run --socket "$CTL_A" replicate tenant-a/r@s1 --to "127.0.0.1:$PORT_B" --progress none
expect 0 "sent tenant-a/r@s1"
run --socket "$CTL_A" replicate tenant-b/r@s1 --to "127.0.0.1:$PORT_B" --progress none
expect 1 "not permitted: the grants give x509:server-a no 'receive' on 'tenant-b/r'"
# ... and may not read what it may only write.
run --socket "$CTL_A" pull "127.0.0.1:$PORT_B" tenant-a/v --progress none
expect 1 "not permitted: the grants give x509:server-a no 'send'"
stop_server "$PID_A"

audit_has "$CTL_B" "x509:alice snapshot.create tenant-a/v ok" \
  "x509:alice snapshot.create tenant-b/v failed (not-found)" \
  "x509:server-a stream.receive tenant-a/r ok" \
  "x509:server-a stream.receive tenant-b/r failed (permission)"
stop_server "$PID_B"
echo "PASS"
