#!/usr/bin/env bash
# cairnd: the nbdkit command it builds (--dry-run) from options and from a
# config file, its TLS options and their mistakes, and a real server it
# starts with a PSK file: a libnbd client with the key reads and writes
# over TLS, one without TLS or with a wrong key is refused under
# --tls=require, and both get in under --tls=on.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdinfo
require python3
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
PSK="$TMPDIR_TEST/keys.psk"
BADPSK="$TMPDIR_TEST/wrong.psk"
CONF="$TMPDIR_TEST/cairnd.conf"

RUN_CMD=$CAIRND                       # run and expect (functions.sh)

# Start cairnd in the foreground with the arguments; wait for its sockets.
start_cairnd () {
  rm -f "$SOCK" "$CTL"
  echo "=== cairnd $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$CAIRND" --foreground --pool "$POOL" --socket "$SOCK" \
    --control "$CTL" --plugin "$PLUGIN" "$@" >>"$NBDKIT_LOG" 2>&1 &
  NBDKIT_PID=$!
  wait_for_sockets "$NBDKIT_PID" cairnd "$NBDKIT_LOG" "$SOCK" "$CTL"
}

python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$PSK"
python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$BADPSK"
make_pool 256M
testctl create v 64M

# ---------------------------------------------------------------- dry run
run --pool "$POOL" --dry-run
expect 0 "^$NBDKIT .*nbdkit-cairn-plugin.so pool=$POOL control=/run/cairn/control.sock\$"
grep -q -- '--tls' <<<"$out" && fail "TLS is on without keys: $out"
run --pool "$POOL" --tls-psk "$PSK" --socket "$SOCK" -n
expect 0 " --unix $SOCK .*--tls=require --tls-psk=$PSK "
run --pool "$POOL" --tls on --tls-certs "$TMPDIR_TEST" --tls-verify-peer -n
expect 0 " --tls=on --tls-certificates=$TMPDIR_TEST --tls-verify-peer "
run --pool "$POOL" --cache 64M --verify always -n
expect 0 " cache=64M verify=always\$"
run --pool "$POOL" --list-checkpoints -n
expect 0 " list-checkpoints=true\$"
run --pool "$POOL" -n
grep -q "list-checkpoints" <<<"$out" && fail "list-checkpoints without --list-checkpoints: $out"
printf 'pool = %s\nlist-checkpoints = yes\n' "$POOL" >"$TMPDIR_TEST/ckpt.conf"
run --config "$TMPDIR_TEST/ckpt.conf" -n
expect 0 " list-checkpoints=true\$"
run --pool "$POOL" --intent-log -n
expect 0 " intent-log=true\$"
run --pool "$POOL" -n
grep -q "intent-log" <<<"$out" && fail "intent-log without --intent-log: $out"
printf 'pool = %s\nintent-log = yes\n' "$POOL" >"$TMPDIR_TEST/log.conf"
run --config "$TMPDIR_TEST/log.conf" -n
expect 0 " intent-log=true\$"
run --pool "$POOL" --verify sometimes -n
expect 2 "^cairnd: --verify sometimes: expected disk or always\$"
# Arguments print quoted for a shell.
run --pool "$TMPDIR_TEST/a pool's file" -n
expect 0 " 'pool=$TMPDIR_TEST/a pool'\\\\''s file' "
# A config file gives the same keys; options override it.
cat >"$CONF" <<EOF
# cairnd test config
pool = $POOL
socket = $SOCK
tls = on
tls-psk = $PSK
threads = 4
verify = always
foreground = yes
EOF
run --config "$CONF" -n
expect 0 "^$NBDKIT --foreground --unix $SOCK --tls=on --tls-psk=$PSK --threads 4 "
grep -q " verify=always\$" <<<"$out" || fail "verify from the config file was not passed on: $out"
run --config "$CONF" --tls require -n
expect 0 " --tls=require "
echo "tls-verify-peer = maybe-not" >>"$CONF"
run --config "$CONF" -n
expect 0
echo "tls-versions = 1.3" >>"$CONF"
run --config "$CONF" -n
expect 1 "cairnd.conf:10: unknown setting 'tls-versions'"

# ---------------------------------------------------------------- mistakes
run --pool "$POOL" --tls maybe -n
expect 2 "--tls maybe: expected off, on or require"
run --pool "$POOL" --tls require -n
expect 2 "--tls require needs keys: --tls-certs DIR .* or --tls-psk FILE"
run --pool "$POOL" --tls off --tls-psk "$PSK" -n
expect 2 "--tls off contradicts"
run --pool "$POOL" --tls-psk "$PSK" --tls-certs "$TMPDIR_TEST" -n
expect 2 "not both"
run --pool "$POOL" --tls-psk "$PSK" --tls-verify-peer -n
expect 2 "--tls-verify-peer checks client certificates: it needs --tls-certs"
run --pool "$POOL" --tls-psk "$TMPDIR_TEST/nosuch.psk" --control "$CTL"
expect 1 "--tls-psk .*nosuch.psk: No such file or directory"
run --pool "$POOL" --tls-certs "$PSK" --control "$CTL"
expect 1 "--tls-certs .*: not a directory"

# ---------------------------------------------------------------- require
start_cairnd --tls-psk "$PSK"
tls_uri="nbds+unix://alice@/v?socket=$SOCK&tls-psk-file=$PSK"
nbdinfo "$tls_uri" | grep -q 'export-size: 67108864' || fail "nbdinfo over TLS: $(nbdinfo "$tls_uri" 2>&1)"
# nbdsh with a URI that names a local file (the PSK file): run code $2.
nbdsh_tls () {
  U=$1 nbdsh -c 'import os
h.set_uri_allow_local_file(True)
h.connect_uri(os.environ["U"])' -c "$2"
}
nbdsh_tls "$tls_uri" '
h.pwrite(b"tls!" * 1024, 4096)
h.flush()
assert h.pread(4096, 4096) == b"tls!" * 1024
' || fail "reading and writing over TLS failed"
if nbdinfo "$(uri v)" >/dev/null 2>&1; then
  fail "a plain connection got in under --tls=require"
fi
if nbdinfo "nbds+unix://alice@/v?socket=$SOCK&tls-psk-file=$BADPSK" >/dev/null 2>&1; then
  fail "a wrong key got in"
fi
# The control socket works as always and counted the TLS client's I/O
# (nbdinfo reads too, as it probes the content).
"$CAIRN" --socket "$CTL" stats v --json | python3 -c 'import json, sys
j = json.load(sys.stdin)
assert j["writes"] == 1 and j["bytes_written"] == 4096 and j["reads"] >= 1, j' || fail "cairn stats over the control socket"
stop_plugin

# ---------------------------------------------------------------- on
start_cairnd --tls on --tls-psk "$PSK"
nbdsh -u "$(uri v)" -c 'assert h.pread(4096, 4096) == b"tls!" * 1024' ||
  fail "a plain connection was refused under --tls=on"
nbdsh_tls "$tls_uri" 'assert h.pread(4096, 4096) == b"tls!" * 1024' ||
  fail "a TLS connection was refused under --tls=on"
stop_plugin
