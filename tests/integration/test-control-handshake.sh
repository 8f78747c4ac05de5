#!/usr/bin/env bash
# The control port's setup deadline (control-handshake-timeout=): on a
# TLS port, a TCP client that sends nothing, one that stalls in the middle
# of its TLS handshake, and a plain client that control-tls=require refused
# and that stays connected are all closed once the deadline passes, with a
# log line naming each peer; meanwhile other clients (TLS over TCP, the
# Unix socket) are served; clients that finished setting up (a TLS session,
# a plain client of control-tls=on) may idle past the deadline.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3

CTL="$TMPDIR_TEST/control.sock"
PSK="$TMPDIR_TEST/keys.psk"
python3 -c 'import secrets; print("alice:" + secrets.token_hex(32))' >"$PSK"
PORT=$(free_port)
make_pool 64M

# The parameter is checked.
for bad in 0 3601 x; do
  msg=$(nbdkit_env "$NBDKIT" --foreground --unix "$SOCK" "$PLUGIN" pool="$POOL" \
          control-handshake-timeout=$bad --run true 2>&1) &&
    fail "control-handshake-timeout=$bad was accepted"
  grep -q "control-handshake-timeout" <<<"$msg" || fail "control-handshake-timeout=$bad: unclear error: $msg"
done

# hold KIND...: open one TCP connection per KIND and report, for each, the
# seconds until the server closed it (EOF or reset), or "open" if it is
# still open after 6 s.  KIND: silent (sends nothing), hello (the first
# 40 bytes of a TLS ClientHello, then nothing), plain (a request, whose
# refusal or reply it reads, then nothing).  Prints "ready" once all are
# connected.
hold () {
  python3 - "$PORT" "$@" <<'PY'
import json, select, socket, sys, time
port, kinds = int(sys.argv[1]), sys.argv[2:]
hello = bytes.fromhex("160301012c010001280303") + bytes(29)
socks, start, res = [], time.time(), {}
for k in kinds:
    s = socket.create_connection(("127.0.0.1", port))
    if k == "hello":
        s.sendall(hello)
    elif k == "plain":
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"server.version"}\n')
    socks.append(s)
print("ready", flush=True)
while len(res) < len(socks) and time.time() - start < 6:
    live = [s for i, s in enumerate(socks) if i not in res]
    r, _, _ = select.select(live, [], [], 0.05)
    for s in r:
        i = socks.index(s)
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        if not data:
            res[i] = "%.2f" % (time.time() - start)
for i, k in enumerate(kinds):
    print(k, res.get(i, "open"))
PY
}

# ---------------------------------------------------------------- require
start_plugin control="$CTL" control-tcp="127.0.0.1:$PORT" \
  control-tls=require control-tls-psk="$PSK" control-handshake-timeout=2
out="$TMPDIR_TEST/held"
hold silent hello plain >"$out" &
holder=$!
for _ in $(seq 50); do grep -q ready "$out" && break; sleep 0.1; done
grep -q ready "$out" || fail "the test clients did not connect"
# While they hang, other clients are served, over TLS and the Unix socket.
"$CAIRN" --connect "127.0.0.1:$PORT" --tls-psk "$PSK" volume create a 16M ||
  fail "a TLS client was not served while others stalled"
"$CAIRN" --socket "$CTL" volume list | grep -q "^a " ||
  fail "the Unix socket was not served while TCP clients stalled"
wait $holder || fail "the test clients failed"
cat "$out"
for kind in silent hello plain; do
  t=$(awk -v k=$kind '$1 == k { print $2 }' "$out")
  [ "$t" != open ] || fail "the $kind client was never closed"
  python3 -c "import sys; t = float(sys.argv[1]); sys.exit(not 1.5 <= t <= 4.0)" "$t" ||
    fail "the $kind client was closed after $t s, not at the 2 s deadline"
done
grep -qE "127\.0\.0\.1:[0-9]+ sent nothing within 2 s of connecting" "$NBDKIT_LOG" ||
  fail "no log line for the silent client"
grep -qE "127\.0\.0\.1:[0-9]+ did not finish its TLS handshake within 2 s" "$NBDKIT_LOG" ||
  fail "no log line for the stalled handshake"
grep -qE "127\.0\.0\.1:[0-9]+, a plain client refused by control-tls=require, was still connected after 2 s" "$NBDKIT_LOG" ||
  fail "no log line for the refused plain client"
# A TLS client that finished its handshake may wait past the deadline
# (openssl s_client with the same PSK: a request 3 s after connecting).
if command -v openssl >/dev/null; then
  key=$(cut -d: -f2 "$PSK")
  (sleep 3; echo '{"jsonrpc":"2.0","id":7,"method":"server.version"}'; sleep 1) |
    timeout 20 openssl s_client -connect "127.0.0.1:$PORT" -tls1_3 \
      -psk_identity alice -psk "$key" -brief >"$TMPDIR_TEST/idle.out" 2>&1
  grep -q '"id":7' "$TMPDIR_TEST/idle.out" ||
    fail "a TLS client idle past the deadline was not answered: $(cat "$TMPDIR_TEST/idle.out")"
fi
stop_plugin

# ---------------------------------------------------------------- on
# control-tls=on: a silent client is closed too; a plain client that has
# spoken is served and may then idle.
start_plugin control="$CTL" control-tcp="127.0.0.1:$PORT" \
  control-tls=on control-tls-psk="$PSK" control-handshake-timeout=1
python3 - "$PORT" <<'PY' || fail "a plain client of control-tls=on was cut off after speaking"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = s.makefile("rwb")
for i in range(2):
    f.write(b'{"jsonrpc":"2.0","id":%d,"method":"server.version"}\n' % i)
    f.flush()
    line = f.readline()
    assert b'"version"' in line, line
    time.sleep(2)
PY
hold silent >"$out" || fail "the test client failed"
cat "$out"
grep -qE "^silent (0\.[7-9]|1\.|2\.)" "$out" || fail "the silent client of control-tls=on was not closed at the 1 s deadline: $(cat "$out")"
stop_plugin
echo PASS
