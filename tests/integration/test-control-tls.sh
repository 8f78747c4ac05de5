#!/usr/bin/env bash
# TLS on the control protocol's TCP port (control-tls=, net/tls.c).
#
# Two servers with control-tls=require and one PSK file: `cairn --connect`
# with the right key lists volumes; a wrong key, an unknown username and a
# plain client are refused with clear messages on both ends.  Then a few
# hundred MiB move through TLS in both stream directions and between the
# servers — `cairn send | cairn receive` through both TCP ports, a push
# (replicate) and a pull, jobs that connect with the server's own keys — and
# every snapshot is compared with its source over NBD (qemu-img compare).
# With the openssl command, X.509 too: a CA, a server certificate for
# 127.0.0.1, a client certificate, control-tls-verify-peer; refused: a
# client without a certificate, a server certificate of another CA or for
# another name, and a job whose keys the other server does not take.
# A job stuck in a handshake with a silent server is cancelled at once.
# Finally control-tls=on takes plain and TLS clients, a TLS client of a
# plain port is told the handshake failed, and cairnd's --tls-psk secures
# its control port too.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require qemu-img
require qemu-io
require python3

POOL_A="$TMPDIR_TEST/pool-a" POOL_B="$TMPDIR_TEST/pool-b"
POOL_C="$TMPDIR_TEST/pool-c"
NBD_A="$TMPDIR_TEST/a.nbd" NBD_B="$TMPDIR_TEST/b.nbd" NBD_C="$TMPDIR_TEST/c.nbd"
CTL_A="$TMPDIR_TEST/a.ctl" CTL_B="$TMPDIR_TEST/b.ctl" CTL_C="$TMPDIR_TEST/c.ctl"
PSK="$TMPDIR_TEST/keys.psk" BADPSK="$TMPDIR_TEST/bad.psk" BOBPSK="$TMPDIR_TEST/bob.psk"
PKI="$TMPDIR_TEST/pki" OTHER="$TMPDIR_TEST/other-ca" CAONLY="$TMPDIR_TEST/ca-only"
# At exit, kill what is still running of what this shell started (jobs -p,
# never a remembered pid: one stopped and reaped may since belong to
# another test's process).
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; (exit $rc); cleanup' EXIT

PORT_A=$(free_port) PORT_B=$(free_port) PORT_C=$(free_port)

# start_cmd NAME NBD CTL COMMAND...: run a server; waits for both sockets;
# the pid goes to $PID_<NAME>.
start_cmd () {
  local name=$1 nbd=$2 ctl=$3 pid
  shift 3
  rm -f "$nbd" "$ctl"
  echo "=== start $name $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$@" >>"$NBDKIT_LOG" 2>&1 &
  pid=$!
  printf -v "PID_$name" %s "$pid"
  wait_for_sockets "$pid" "nbdkit $name" "" "$nbd" "$ctl"
}

# start NAME POOL NBD CTL PARAMS...: nbdkit with the plugin.
start () {
  local name=$1 pool=$2 nbd=$3 ctl=$4
  shift 4
  start_cmd "$name" "$nbd" "$ctl" "$NBDKIT" --foreground --unix "$nbd" \
    "$PLUGIN" pool="$pool" control="$ctl" "$@"
}


# Run cairn (bounded: a TLS mistake must fail, never hang); status in rc,
# stdout+stderr in out.
run () {
  args=("$@")
  rc=0
  out=$(timeout -s KILL 120 "$CAIRN" "$@" 2>&1) || rc=$?
}
expect () {
  [ "$rc" -eq "$1" ] || fail "cairn ${args[*]}: exit $rc, expected $1; it said: $out"
  if [ $# -ge 2 ]; then
    grep -qE -- "$2" <<<"$out" || fail "cairn ${args[*]}: no '$2' in: $out"
  fi
}
# The servers' log has a line matching $1.
logged () {
  for _ in $(seq 50); do grep -qE -- "$1" "$NBDKIT_LOG" && return 0; sleep 0.1; done
  fail "the server log has no '$1'"
}

# Compare snapshot $1 of the server at NBD socket $2 with $3 on socket $4.
same () {
  qemu-img compare -f raw -F raw "nbd+unix:///$1?socket=$2" \
    "nbd+unix:///$3?socket=$4" >/dev/null || fail "$1 and $3 differ"
}

# Fill $2 MiB of volume $1 on server A, from offset $3 MiB, with random data.
fill () {
  head -c "$(( $2 * 1048576 ))" /dev/urandom >"$TMPDIR_TEST/data"
  qemu-io -f raw -c "write -s $TMPDIR_TEST/data $(( $3 * 1048576 )) $(( $2 * 1048576 ))" \
    "nbd+unix:///$1?socket=$NBD_A" >/dev/null || fail "writing $2 MiB to $1"
  rm -f "$TMPDIR_TEST/data"
}

python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$PSK"
python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$BADPSK"
python3 -c 'import secrets; print("bob:" + secrets.token_hex(32))' >"$BOBPSK"
"$CAIRN" mkpool "$POOL_A" --size 1G >/dev/null || fail "mkpool A"
"$CAIRN" mkpool "$POOL_B" --size 1G >/dev/null || fail "mkpool B"

# ---------------------------------------------------------------- parameters
# control-tls= needs keys; a bad key file stops nbdkit with its name.
echo 'alice:xyz' >"$TMPDIR_TEST/junk.psk"
for params in "control-tls=require" "control-tls=maybe" \
              "control-tls-psk=$TMPDIR_TEST/junk.psk" \
              "control-tls-verify-peer=true control-tls-psk=$PSK"; do
  # shellcheck disable=SC2086
  msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground \
        --unix "$TMPDIR_TEST/x.nbd" "$PLUGIN" pool="$POOL_A" control="$CTL_A" \
        control-tcp="127.0.0.1:$PORT_A" $params 2>&1) &&
    fail "nbdkit started with $params"
  grep -qE "control-tls|PSK|TLS" <<<"$msg" || fail "$params: unclear error: $msg"
done
# Secure by default: control-tcp= without keys starts only with
# control-insecure=true, and nothing listens meanwhile.
for params in "" "control-tls=off"; do
  # shellcheck disable=SC2086
  msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground \
        --unix "$TMPDIR_TEST/x.nbd" "$PLUGIN" pool="$POOL_A" control="$CTL_A" \
        control-tcp="127.0.0.1:$PORT_A" $params 2>&1) &&
    fail "nbdkit started a control port without TLS and without control-insecure ($params)"
  grep -q "has no TLS keys.*control-tls-psk=FILE.*control-insecure=true" <<<"$msg" ||
    fail "control-tcp= without keys: unclear error: $msg"
done
[ -e "$CTL_A" ] && fail "a refused server left its control socket"
msg=$("$CAIRND" --pool "$POOL_A" --control-tcp "$PORT_A" -n 2>&1) &&
  fail "cairnd --control-tcp without keys was accepted"
grep -q -- "--tls-psk FILE.*--control-insecure" <<<"$msg" ||
  fail "cairnd --control-tcp without keys: unclear error: $msg"
"$CAIRND" --pool "$POOL_A" --control-tcp "$PORT_A" --control-insecure -n |
  grep -q " control-tcp=$PORT_A control-insecure=true\$" || fail "cairnd --control-insecure"
"$CAIRND" --pool "$POOL_A" --tls-psk "$PSK" --control-tcp "$PORT_A" --control-insecure -n |
  grep -q "control-insecure" && fail "cairnd passes control-insecure to a port with TLS"
# cairnd gives the control port the NBD keys and mode, or --control-tls's.
"$CAIRND" --pool "$POOL_A" --tls-psk "$PSK" --control-tcp "$PORT_A" -n |
  grep -q " control-tcp=$PORT_A control-tls=require control-tls-psk=$PSK\$" ||
  fail "cairnd: the control port does not get --tls-psk"
"$CAIRND" --pool "$POOL_A" --tls-psk "$PSK" --control-tls on --control-tcp "$PORT_A" -n |
  grep -q " control-tls=on control-tls-psk=$PSK\$" || fail "cairnd --control-tls on"
"$CAIRND" --pool "$POOL_A" --tls-psk "$PSK" --control-tls off -n | grep -q " control-tls=" &&
  fail "cairnd --control-tls off still passes control-tls"
"$CAIRND" --pool "$POOL_A" --control-tls require -n 2>/dev/null &&
  fail "cairnd --control-tls require without keys was accepted"

# ---------------------------------------------------------------- PSK
start A "$POOL_A" "$NBD_A" "$CTL_A" control-tcp="127.0.0.1:$PORT_A" \
  control-tls=require control-tls-psk="$PSK"
start B "$POOL_B" "$NBD_B" "$CTL_B" control-tcp="127.0.0.1:$PORT_B" \
  control-tls=require control-tls-psk="$PSK"
"$CAIRN" --socket "$CTL_A" volume create v 384M >/dev/null || fail "volume create"

run --connect "127.0.0.1:$PORT_A" --tls-psk "$PSK" volume list
expect 0 "^v +384M"
run --connect "127.0.0.1:$PORT_A" --tls-psk "$PSK" --tls-username alice status --json
expect 0 '"generation"'
# A wrong key: refused on both ends, saying what to check.
run --connect "127.0.0.1:$PORT_A" --tls-psk "$BADPSK" volume list
expect 1 "TLS handshake with 127.0.0.1:$PORT_A failed: .*PSK username and key"
logged "TLS handshake with 127.0.0.1:[0-9]+ failed: .*not this PSK file's key"
# A user the server does not know.
run --connect "127.0.0.1:$PORT_A" --tls-psk "$BOBPSK" volume list
expect 1 "TLS handshake with 127.0.0.1:$PORT_A failed"
logged "TLS handshake .* failed: .*offered no username"
run --connect "127.0.0.1:$PORT_A" --tls-psk "$PSK" --tls-username bob volume list
expect 1 "has no key for user 'bob'"
# A plain client: told to use TLS, and the server says it refused one.
run --connect "127.0.0.1:$PORT_A" volume list
expect 1 "requires TLS \(control-tls=require\): the cairn command connects with 'cairn --connect HOST --tls-psk FILE' .*a server that replicates here \(cairn replicate, cairn pull\) connects with its own keys: start it with 'cairnd --tls-psk FILE'"
logged "refused the plain \(non-TLS\) client 127.0.0.1:[0-9]+"
# The options are checked.
run --tls-psk "$PSK" volume list
expect 2 "secure --connect"
run --connect "127.0.0.1:0" volume list
expect 2 "port must be 1 to 65535"
# The Unix socket stays plain.
run --socket "$CTL_A" volume list
expect 0 "^v "

# ---------------------------------------------------------------- streams
# A few hundred MiB through TLS: out of A (stream.send) and into B
# (stream.receive), both through the CLI's TLS connections.
fill v 320 0
"$CAIRN" --socket "$CTL_A" snapshot create v@s1 >/dev/null || fail "snapshot s1"
set -o pipefail
timeout -s KILL 600 "$CAIRN" --connect "127.0.0.1:$PORT_A" --tls-psk "$PSK" \
  send v@s1 --progress none |
  timeout -s KILL 600 "$CAIRN" --connect "127.0.0.1:$PORT_B" --tls-psk "$PSK" \
  receive v --progress none >"$TMPDIR_TEST/recv.out" 2>&1 ||
  fail "send | receive through TLS: $(cat "$TMPDIR_TEST/recv.out")"
set +o pipefail
same v@s1 "$NBD_A" v@s1 "$NBD_B"

# A push: A's job connects to B with A's own keys (TLS by default).
fill v 48 100
"$CAIRN" --socket "$CTL_A" snapshot create v@s2 >/dev/null || fail "snapshot s2"
run --socket "$CTL_A" replicate v@s2 --to "127.0.0.1:$PORT_B" --progress none
expect 0 "sent v@s2 to 127.0.0.1:$PORT_B \(incremental stream"
same v@s2 "$NBD_A" v@s2 "$NBD_B"
# ... not without TLS: B requires it.
run --socket "$CTL_A" replicate v@s2 --to "127.0.0.1:$PORT_B" --no-tls --progress none
expect 1 "requires TLS"
# A pull: B's job reads A's stream.send through TLS.
fill v 32 200
"$CAIRN" --socket "$CTL_A" snapshot create v@s3 >/dev/null || fail "snapshot s3"
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" v --tls --progress none
expect 0 "received v@s3 from 127.0.0.1:$PORT_A \(incremental stream"
same v@s3 "$NBD_A" v@s3 "$NBD_B"
same v@s1 "$NBD_A" v@s1 "$NBD_B"
# A job stuck in a handshake (the other end accepts and says nothing) is
# cancelled at once.
HUNG=$(free_port)
python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); open(sys.argv[2], "w").close()
c = s.accept(); open(sys.argv[3], "w").close(); time.sleep(120)' \
  "$HUNG" "$TMPDIR_TEST/hung.ready" "$TMPDIR_TEST/hung.accepted" &
# Listening before the job connects (a refused connection ends the job).
for _ in $(seq 100); do [ -e "$TMPDIR_TEST/hung.ready" ] && break; sleep 0.1; done
[ -e "$TMPDIR_TEST/hung.ready" ] || fail "the silent server did not start listening"
timeout -s KILL 120 "$CAIRN" --socket "$CTL_A" replicate v@s3 --to "127.0.0.1:$HUNG" \
  --progress none >"$TMPDIR_TEST/hung.out" 2>&1 &
CLIENT=$!
id=
for _ in $(seq 100); do
  id=$("$CAIRN" --socket "$CTL_A" job list --json | python3 -c 'import json, sys
j = [x for x in json.load(sys.stdin)["jobs"] if not x.get("background")]
print(j[0]["job"] if j else "")')
  [ -n "$id" ] && break
  sleep 0.1
done
[ -n "$id" ] || fail "the replicate job to a silent server did not start"
# The job is in its handshake once the silent server has its connection.
wait_for test -e "$TMPDIR_TEST/hung.accepted" ||
  fail "the replicate job did not connect to the silent server: $(cat "$TMPDIR_TEST/hung.out")"
"$CAIRN" --socket "$CTL_A" job cancel "$id" >/dev/null || fail "job cancel $id"
t0=$SECONDS
rc=0
wait "$CLIENT" || rc=$?
[ $rc -eq 1 ] || fail "the cancelled job's cairn exited $rc: $(cat "$TMPDIR_TEST/hung.out")"
[ $(( SECONDS - t0 )) -lt 10 ] || fail "cancelling a job in a TLS handshake took $(( SECONDS - t0 )) s"
grep -q "cancel" "$TMPDIR_TEST/hung.out" || fail "no word of the cancel: $(cat "$TMPDIR_TEST/hung.out")"
stop_server "$PID_B"

# ---------------------------------------------------------------- X.509
if ! command -v openssl >/dev/null; then
  echo "SKIP (part): no openssl command: X.509 certificates not tested" >&2
  stop_server "$PID_A"
  exit 0
fi
# make_ca DIR: a CA in DIR/ca-cert.pem (key DIR/ca-key.pem).
make_ca () {
  mkdir -p "$1"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1/ca-key.pem" -out "$1/ca-cert.pem" -days 2 \
    -subj "/CN=Cairn test CA" 2>/dev/null || fail "openssl: CA"
}
# make_cert DIR NAME SAN: DIR/NAME-cert.pem signed by DIR's CA.
make_cert () {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$1/$2-key.pem" -out "$1/$2.csr" -subj "/CN=$2" 2>/dev/null &&
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1/$2.ext" &&
  openssl x509 -req -in "$1/$2.csr" -CA "$1/ca-cert.pem" -CAkey "$1/ca-key.pem" \
    -CAcreateserial -days 2 -extfile "$1/$2.ext" -out "$1/$2-cert.pem" 2>/dev/null ||
    fail "openssl: certificate $2"
}
make_ca "$PKI"
make_cert "$PKI" server "IP:127.0.0.1"
make_cert "$PKI" client "DNS:client.example"
make_ca "$OTHER"
make_cert "$OTHER" client "DNS:client.example"
mkdir -p "$CAONLY"
cp "$PKI/ca-cert.pem" "$CAONLY/"
"$CAIRN" mkpool "$POOL_C" --size 256M >/dev/null || fail "mkpool C"
start C "$POOL_C" "$NBD_C" "$CTL_C" control-tcp="127.0.0.1:$PORT_C" \
  control-tls=require control-tls-certificates="$PKI" control-tls-verify-peer=true

run --connect "127.0.0.1:$PORT_C" --tls-certificates "$PKI" volume list
expect 0 "no volumes"
# No client certificate, with verify-peer.
run --connect "127.0.0.1:$PORT_C" --tls-certificates "$CAONLY" volume list
expect 1 "127.0.0.1:$PORT_C: the TLS handshake failed: .*certificate required: the server wants a client certificate"
logged "TLS handshake with 127.0.0.1:[0-9]+ failed: .*certificate"
# The server's certificate checked: another CA, another name.
run --connect "127.0.0.1:$PORT_C" --tls-certificates "$OTHER" volume list
expect 1 "TLS handshake with 127.0.0.1:$PORT_C failed: certificate verify failed"
run --connect "127.0.0.1:$PORT_C" --tls volume list          # the system's CAs
expect 1 "TLS handshake with 127.0.0.1:$PORT_C failed: certificate verify failed"
run --connect "localhost:$PORT_C" --tls-certificates "$PKI" volume list
expect 1 "TLS handshake with localhost:$PORT_C failed: certificate verify failed.*[Hh]ostname mismatch"
# A job whose keys the other server does not take says so.
run --socket "$CTL_A" pull "127.0.0.1:$PORT_C" v --progress none
expect 1 "TLS handshake with 127.0.0.1:$PORT_C failed"
stop_server "$PID_C"

# ---------------------------------------------------------------- on / off
# control-tls=on: plain and TLS clients both served.
start C "$POOL_C" "$NBD_C" "$CTL_C" control-tcp="127.0.0.1:$PORT_C" \
  control-tls=on control-tls-certificates="$PKI"
run --connect "127.0.0.1:$PORT_C" volume list
expect 0 "no volumes"
run --connect "127.0.0.1:$PORT_C" --tls-certificates "$CAONLY" volume list
expect 0 "no volumes"
stop_server "$PID_C"
# A plain port (asked for; on loopback when no address is given): a TLS
# client is told the handshake failed, not left hanging.
start C "$POOL_C" "$NBD_C" "$CTL_C" control-tcp="$PORT_C" control-insecure=true
ss -ltnH "sport = :$PORT_C" | grep -q "127.0.0.1:$PORT_C" ||
  fail "control-insecure without an address does not listen on 127.0.0.1: $(ss -ltnH "sport = :$PORT_C")"
run --connect "127.0.0.1:$PORT_C" --tls-certificates "$CAONLY" volume list
expect 1 "TLS handshake with 127.0.0.1:$PORT_C failed: the connection was closed"
logged "started a TLS handshake, but this server's control port has control-tls=off"
stop_server "$PID_C"
# cairnd: one --tls-psk secures NBD and the control port.
start_cmd C "$NBD_C" "$CTL_C" "$CAIRND" --foreground --pool "$POOL_C" \
  --socket "$NBD_C" --control "$CTL_C" --plugin "$PLUGIN" \
  --control-tcp "127.0.0.1:$PORT_C" --tls-psk "$PSK"
run --connect "127.0.0.1:$PORT_C" --tls-psk "$PSK" volume list
expect 0 "no volumes"
run --connect "127.0.0.1:$PORT_C" volume list
expect 1 "requires TLS"
stop_server "$PID_C"
stop_server "$PID_A"
