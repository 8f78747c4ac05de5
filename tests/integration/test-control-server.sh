#!/usr/bin/env bash
# The control server inside the running plugin: the cairn CLI manages
# volumes and snapshots over the control socket while NBD clients write;
# new volumes and snapshots are exports at once; a snapshot taken while a
# client writes holds what was written before it; the socket is 0660;
# many control clients at once, and bad messages, leave it serving.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdinfo
require python3
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
cairn_s () { "$CAIRN" --socket "$CTL" "$@"; }

make_pool 256M
start_plugin control="$CTL" commit-interval=200
for _ in $(seq 100); do [ -S "$CTL" ] && break; sleep 0.1; done
[ -S "$CTL" ] || fail "no control socket at $CTL"
[ "$(stat -c %a "$CTL")" = 660 ] || fail "control socket mode is $(stat -c %a "$CTL"), not 660"

# Create a volume online: it is an export at once.
cairn_s volume create vm/disk0 64M || fail "volume create over the socket"
nbdinfo --list "nbd+unix://?socket=$SOCK" | grep -q 'export="vm/disk0"' ||
  fail "the new volume is not listed"

# Block 0 is written before the snapshot, then a writer keeps rewriting
# blocks 1..99 with increasing numbers while the snapshot is taken: it
# says when it has written them all once and goes on until told to stop
# (or for 120 s), so that however slow this machine is, the snapshot is
# taken while it writes.
nbdsh -u "$(uri vm/disk0)" -c 'h.pwrite(b"\x01" * 4096, 0); h.flush()'
started="$TMPDIR_TEST/writer.started" stop="$TMPDIR_TEST/writer.stop"
STARTED=$started STOP=$stop nbdsh -u "$(uri vm/disk0)" -c '
import os, time
end = time.time() + 120
n = 0
while not os.path.exists(os.environ["STOP"]) and time.time() < end:
    n += 1
    for b in range(1, 100):
        h.pwrite(n.to_bytes(8, "little") * 512, b * 4096)
    if n == 1:
        open(os.environ["STARTED"], "w").close()
assert os.path.exists(os.environ["STOP"]), "not told to stop within 120 s"
' &
writer=$!
wait_for test -e "$started" || fail "the writer did not write its first round"
cairn_s snapshot create vm/disk0@s1 || fail "snapshot create while writing"
kill -0 $writer 2>/dev/null || fail "the writer stopped before the snapshot was taken"
touch "$stop"
wait $writer || fail "the writer failed during the snapshot"
nbdinfo --list "nbd+unix://?socket=$SOCK" | grep -q 'export="vm/disk0@s1"' ||
  fail "the snapshot is not listed at once"

# The snapshot holds block 0 and, for every other block, one whole version
# (a snapshot never sees half a write), and it never changes.
nbdsh -u "$(uri vm/disk0@s1)" -c '
assert h.is_read_only()
assert h.pread(4096, 0) == b"\x01" * 4096
for b in range(1, 100):
    d = h.pread(4096, b * 4096)
    assert d == d[:8] * 512, "block %d is torn" % b
' || fail "the snapshot's contents are wrong"
sum1=$(nbdsh -u "$(uri vm/disk0@s1)" -c 'import hashlib; print(hashlib.sha256(h.pread(1 << 20, 0)).hexdigest())')
nbdsh -u "$(uri vm/disk0)" -c 'h.pwrite(b"\x02" * 4096, 0); h.flush()'
sum2=$(nbdsh -u "$(uri vm/disk0@s1)" -c 'import hashlib; print(hashlib.sha256(h.pread(1 << 20, 0)).hexdigest())')
[ "$sum1" = "$sum2" ] || fail "the snapshot changed after a write to the volume"
if nbdsh -u "$(uri vm/disk0@s1)" -c 'h.pwrite(b"x" * 512, 0)' 2>/dev/null; then
  fail "writing to a snapshot export succeeded"
fi

# Diff, space and status answer over the socket.
cairn_s diff vm/disk0@s1 vm/disk0 --json | python3 -c '
import json, sys
runs = json.load(sys.stdin)["runs"]
assert any(r["offset"] == 0 for r in runs), runs' || fail "diff over the socket"
cairn_s status --json | python3 -c 'import json, sys; j = json.load(sys.stdin); assert j["generation"] > 0' ||
  fail "status over the socket"

# Many control clients at once.
pids=()
for i in $(seq 20); do
  cairn_s volume list --json >"$TMPDIR_TEST/list.$i" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent control client failed"; done
for i in $(seq 20); do grep -q vm/disk0 "$TMPDIR_TEST/list.$i" || fail "client $i got no list"; done

# Bad messages get error replies, then the server still serves.
python3 - "$CTL" <<'PY' || fail "bad messages"
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rwb")
def ask(line):
    f.write(line + b"\n"); f.flush()
    return json.loads(f.readline())
assert ask(b"this is not json")["error"]["code"] == -32700
assert ask(b'{"jsonrpc":"2.0","id":1,"method":42}')["error"]["code"] == -32600
assert ask(b'{"jsonrpc":"2.0","id":2,"method":"no.such"}')["error"]["code"] == -32601
r = ask(b'{"jsonrpc":"2.0","id":3,"method":"volume.create","params":{"name":"x","size":"lots"}}')
assert r["error"]["code"] == -32602, r
r = ask(b'{"jsonrpc":"2.0","id":4,"method":"volume.show","params":{"name":"vm/disk0"}}')
assert r["result"]["name"] == "vm/disk0", r
PY
# A client that vanishes mid-request harms nothing.
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.send(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"volume.li"); s.close()' "$CTL"
cairn_s volume show vm/disk0 >/dev/null || fail "the server stopped serving"

# Deleting a volume and a snapshot that clients have open: the names go at
# once, the clients keep reading the same data (and writing the volume)
# until they disconnect, then the space comes back by itself.  Each client
# says when it is connected (nbdkit has opened the export for it by then),
# and the delete waits for both.
cairn_s snapshot create vm/disk0@held || fail "snapshot for the delete test"
go="$TMPDIR_TEST/deleted"
GO=$go READY="$TMPDIR_TEST/held-snap.ready" nbdsh -u "$(uri vm/disk0@held)" -c '
import hashlib, os, time
before = hashlib.sha256(h.pread(1 << 20, 0)).hexdigest()
open(os.environ["READY"], "w").close()
while not os.path.exists(os.environ["GO"]): time.sleep(0.05)
assert hashlib.sha256(h.pread(1 << 20, 0)).hexdigest() == before, "the snapshot changed"
print("snapshot-ok")' > "$TMPDIR_TEST/held-snap.out" &
snap_reader=$!
GO=$go READY="$TMPDIR_TEST/held-vol.ready" nbdsh -u "$(uri vm/disk0)" -c '
import os, time
open(os.environ["READY"], "w").close()
while not os.path.exists(os.environ["GO"]): time.sleep(0.05)
h.pwrite(b"\x5a" * 4096, 8 << 20); h.flush()
assert h.pread(4096, 8 << 20) == b"\x5a" * 4096, "the write did not stick"
print("volume-ok")' > "$TMPDIR_TEST/held-vol.out" &
vol_writer=$!
for who in snap vol; do
  wait_for test -e "$TMPDIR_TEST/held-$who.ready" ||
    fail "the open $who's client did not connect: $(cat "$TMPDIR_TEST/held-$who.out")"
done
cairn_s volume delete vm/disk0 --recursive || fail "deleting an open volume"
cairn_s volume show vm/disk0 >/dev/null 2>&1 && fail "the deleted volume is still shown"
nbdinfo --list "nbd+unix://?socket=$SOCK" | grep -q 'export="vm/disk0' &&
  fail "the deleted volume or its snapshot is still listed"
touch "$go"
wait $snap_reader || fail "the open snapshot's client failed"
wait $vol_writer || fail "the open volume's client failed"
grep -q snapshot-ok "$TMPDIR_TEST/held-snap.out" || fail "snapshot client: $(cat "$TMPDIR_TEST/held-snap.out")"
grep -q volume-ok "$TMPDIR_TEST/held-vol.out" || fail "volume client: $(cat "$TMPDIR_TEST/held-vol.out")"
# Disconnected: within a few commits the volume's blocks (at least the
# hundred written above) are freed and nothing is left to reclaim.  A few
# commits take well under a second alone; under ASan on a busy two-CPU CI
# machine they once took just over the 10 s this loop allowed, hence 60 s
# (the loop ends as soon as the space is back).
reclaimed () {
  cairn_s status --json | python3 -c '
import json, sys
r = json.load(sys.stdin)["reclaim"]
print("yes" if r["volumes"] == 0 and r["freed"] >= 100 * 4096 and not r["error"] else "no")'
}
for _ in $(seq 600); do
  [ "$(reclaimed)" = yes ] && break
  sleep 0.1
done
[ "$(reclaimed)" = yes ] || fail "the deleted volume was not reclaimed after its clients left: $(cairn_s status --json)"

stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "fsck after the session"
echo PASS
