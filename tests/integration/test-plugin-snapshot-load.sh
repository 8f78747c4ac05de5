#!/usr/bin/env bash
# Snapshots taken while writes stream in, from two connections with many
# requests in flight: every block of every snapshot holds exactly one
# version of it that a writer wrote (never torn, never another block's),
# at least the newest version acknowledged before the snapshot was
# requested, and none whose write was sent after the snapshot command
# returned; each snapshot reads the same during the writes and after
# them, refuses writes, and the pool checks clean.
#
# Each writer writes its blocks in rounds: round V writes version V of
# every block (up to 32 in flight, the next round only once the last
# completed), logging when the round started and when its last write was
# acknowledged (CLOCK_MONOTONIC, shared by every process here).  So a
# block's version V was sent no earlier than round V's start and
# acknowledged no later than its end, and the checks use only those bounds.
#
# A snapshot holds exactly the writes that began before the server took
# the request (engine/volume.h, snap_create; DESIGN.md §2.3), but a client
# cannot tell when that was: writes sent after the command started and
# before the server read it may be in it.  The test counts such blocks
# and prints them.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh

SNAPS=${CAIRN_TEST_SNAPS:-6}   # test-rbd.sh takes fewer: RBD reads are slow
BLOCKS=2048                     # per writer; two writers
CTL="$TMPDIR_TEST/control.sock"
make_pool 1G
testctl create v 16M
start_plugin control="$CTL" commit-interval=40
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"

cat >"$TMPDIR_TEST/blocks.py" <<'EOF'
import hashlib, struct
BLOCKS = int(__import__("os").environ["BLOCKS"])

def content(i, v):
    """Version v of block i: its number and version, then filler of both."""
    head = struct.pack("<QQ", i, v)
    fill = hashlib.sha256(head).digest() * 128
    return head + fill[:4096 - len(head)]

def parse(data):
    """(block, version) that data is, or None: zeroes are (None, 0)."""
    if data == bytes(4096):
        return (None, 0)
    i, v = struct.unpack("<QQ", data[:16])
    if v == 0 or data != content(i, v):
        return None
    return (i, v)
EOF
export TMPDIR_TEST BLOCKS BLOCKS_PY="$TMPDIR_TEST/blocks.py"

# The writer: blocks [W * BLOCKS, (W + 1) * BLOCKS), rounds until STOP
# exists; one line per round: version, start, end.
cat >"$TMPDIR_TEST/writer.py" <<'EOF'
import os, time
exec(open(os.environ["BLOCKS_PY"]).read())
w = int(os.environ["WRITER"])
stop = os.environ["STOP"]
first = w * BLOCKS
v = 0
while not os.path.exists(stop):
    v += 1
    start = time.monotonic()
    cookies = []
    for i in range(first, first + BLOCKS):
        while h.aio_in_flight() >= 32:
            h.poll(-1)
        cookies.append(h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(content(i, v))),
                                    i * 4096))
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c in cookies:
        h.aio_command_completed(c)    # raises if the write failed
    print(v, start, time.monotonic(), flush=True)
EOF

# The checker: snapshot NAME requested at T0, returned at T1, against
# both writers' logs; its contents go to NAME.img to compare later.
cat >"$TMPDIR_TEST/check.py" <<'EOF'
import os, sys
exec(open(os.environ["BLOCKS_PY"]).read())
name, t0, t1 = os.environ["SNAP"], float(os.environ["T0"]), float(os.environ["T1"])
rounds = []                           # per writer: {version: (start, end)}
for w in range(2):
    r = {}
    for line in open(os.environ["TMPDIR_TEST"] + "/writer-%d.out" % w):
        v, s, e = line.split()
        r[int(v)] = (float(s), float(e))
    rounds.append(r)
late = 0
img = bytearray()
for i in range(2 * BLOCKS):
    data = h.pread(4096, i * 4096)
    img += data
    got = parse(data)
    if got is None or got[0] not in (None, i):
        sys.exit("%s: block %d holds no version of itself: %r..."
                 % (name, i, data[:16]))
    v = got[1]
    r = rounds[i // BLOCKS]
    acked = max([u for u, (s, e) in r.items() if e < t0], default=0)
    if v < acked:
        sys.exit("%s: block %d holds version %d, but version %d was "
                 "acknowledged before the snapshot was requested"
                 % (name, i, v, acked))
    if v > 0:
        if v not in r:
            sys.exit("%s: block %d holds version %d, which no round wrote"
                     % (name, i, v))
        if r[v][0] >= t1:
            sys.exit("%s: block %d holds version %d, sent after the snapshot "
                     "command returned" % (name, i, v))
        if r[v][0] >= t0:
            late += 1
open(os.environ["TMPDIR_TEST"] + "/" + name + ".img", "wb").write(img)
print("%s: every block checked; %d hold writes sent while the command ran "
      "(%.0f ms)" % (name, late, (t1 - t0) * 1000))
EOF

STOP="$TMPDIR_TEST/stop"
export STOP
pids=()
for w in 0 1; do
  WRITER=$w nbdsh -u "$(uri v)" -c "exec(open('$TMPDIR_TEST/writer.py').read())" \
    >"$TMPDIR_TEST/writer-$w.out" 2>"$TMPDIR_TEST/writer-$w.err" &
  pids+=($!)
done
# Let both writers get going.
for _ in $(seq 200); do
  [ -s "$TMPDIR_TEST/writer-0.out" ] && [ -s "$TMPDIR_TEST/writer-1.out" ] && break
  sleep 0.05
done
[ -s "$TMPDIR_TEST/writer-0.out" ] && [ -s "$TMPDIR_TEST/writer-1.out" ] ||
  fail "the writers wrote no round: $(cat "$TMPDIR_TEST"/writer-*.err)"

now () { python3 -c 'import time; print(time.monotonic())'; }
for s in $(seq "$SNAPS"); do
  sleep "0.$((RANDOM % 3 + 1))"
  t0=$(now)
  "$CAIRN" --socket "$CTL" snapshot create "v@s$s" >/dev/null ||
    fail "snapshot v@s$s failed"
  t1=$(now)
  echo "v@s$s $t0 $t1" >>"$TMPDIR_TEST/snaps"
done
# Check each snapshot while the writers still write (each writer has
# finished at least one more round since the last snapshot).
while read -r snap t0 t1; do
  SNAP=${snap#v@} T0=$t0 T1=$t1 nbdsh -u "$(uri "$snap")" \
    -c "exec(open('$TMPDIR_TEST/check.py').read())" || fail "$snap is wrong"
done <"$TMPDIR_TEST/snaps"
touch "$STOP"
for p in "${pids[@]}"; do
  wait "$p" || fail "a writer failed: $(cat "$TMPDIR_TEST"/writer-*.err)"
done
echo "writers: $(wc -l <"$TMPDIR_TEST/writer-0.out") and" \
  "$(wc -l <"$TMPDIR_TEST/writer-1.out") rounds"

# A snapshot never changes, and refuses writes.
for s in $(seq "$SNAPS"); do
  nbdcopy "$(uri "v@s$s")" "$TMPDIR_TEST/again.img" ||
    fail "reading v@s$s again failed"
  cmp -s "$TMPDIR_TEST/s$s.img" "$TMPDIR_TEST/again.img" ||
    fail "v@s$s changed after the writes"
done
nbdsh -u "$(uri v@s1)" -c 'h.pwrite(b"x" * 4096, 0)' 2>"$TMPDIR_TEST/ro.err" &&
  fail "a write to snapshot v@s1 succeeded"
grep -qi "read-only\|EPERM\|EROFS\|not permitted" "$TMPDIR_TEST/ro.err" ||
  fail "a write to a snapshot failed for another reason: $(cat "$TMPDIR_TEST/ro.err")"

stop_plugin
"$CAIRN" fsck "$POOL" || fail "fsck at the end"
echo PASS
