#!/usr/bin/env bash
# Crash safety: nbdkit is killed with SIGKILL while a writer streams
# batches of numbered 4 KiB blocks (many in flight), flushing after each
# batch and saying which batch's flush returned.  After the kill the pool
# is fsck-clean as it lies; after a restart every block of every flushed
# batch reads back exactly, and the blocks of later batches read as either
# nothing (zeroes) or exactly what was written, never anything else.
# Three rounds, each in its own region of the volume, with the commit timer
# running fast so that background commits race the writes and flushes;
# earlier rounds are checked again after later crashes.
# CRASH_PLUGIN_PARAMS adds plugin parameters (test-plugin-crash-log.sh:
# intent-log=true, so that flushes are intent log writes).
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh

ROUNDS=3
make_pool 1G
testctl create vol1 768M

# The blocks: batch B of round R is BLOCKS blocks at region R, batch B.
cat >"$TMPDIR_TEST/blocks.py" <<'EOF'
import hashlib
BLOCKS = 32                           # blocks per batch
REGION = 256 * 1024 * 1024            # bytes per round
BATCHES = REGION // (BLOCKS * 4096)

def offset(r, b, i):
    return r * REGION + (b * BLOCKS + i) * 4096

def content(r, b, i):
    return hashlib.sha256(b"%d:%d:%d" % (r, b, i)).digest() * 128
EOF

# The writer: round $1, until the server goes away.
cat >"$TMPDIR_TEST/writer.py" <<'EOF'
import os, sys, time
exec(open(os.environ["BLOCKS_PY"]).read())
r = int(os.environ["ROUND"])
for b in range(BATCHES):
    cookies = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(content(r, b, i))),
                            offset(r, b, i))
               for i in range(BLOCKS)]
    while h.aio_in_flight() > 0:
        h.poll(-1)
    for c in cookies:
        h.aio_command_completed(c)    # raises if the write failed
    h.flush()
    print(b, flush=True)
while True:                           # the whole region is written: wait
    h.flush()                         # (and fail once the server is gone)
    time.sleep(0.1)
EOF

# The checker: rounds 0..$1, each with its last flushed batch.  It reads a
# batch at a time (one request instead of BLOCKS) and checks each block.
cat >"$TMPDIR_TEST/check.py" <<'EOF'
import os, sys
exec(open(os.environ["BLOCKS_PY"]).read())
flushed = [int(x) for x in os.environ["FLUSHED"].split()]
for r, last in enumerate(flushed):
    kept = 0
    for b in range(BATCHES):
        batch = h.pread(BLOCKS * 4096, offset(r, b, 0))
        for i in range(BLOCKS):
            got = batch[i * 4096:(i + 1) * 4096]
            if got == content(r, b, i):
                if b > last:
                    kept += 1
                continue
            if b <= last:
                sys.exit("round %d batch %d block %d (flushed, last flushed %d) "
                         "is lost: read %r..." % (r, b, i, last, got[:16]))
            if got != bytes(4096):
                sys.exit("round %d batch %d block %d holds garbage: %r..."
                         % (r, b, i, got[:16]))
    print("round %d: batches 0-%d intact, %d later blocks kept" % (r, last, kept))
EOF
export BLOCKS_PY="$TMPDIR_TEST/blocks.py"

flushed=()
for round in $(seq 0 $((ROUNDS - 1))); do
  start_plugin commit-interval=50 ${CRASH_PLUGIN_PARAMS:-}
  log="$TMPDIR_TEST/writer-$round.out"
  ROUND=$round nbdsh -u "$(uri vol1)" -c "exec(open('$TMPDIR_TEST/writer.py').read())" \
    >"$log" 2>"$TMPDIR_TEST/writer-$round.err" &
  writer=$!
  # Let it write for a while: at least a few flushed batches.
  for _ in $(seq 100); do
    [ -f "$log" ] && [ "$(wc -l <"$log")" -ge 20 ] && break
    sleep 0.1
  done
  sleep "0.$((RANDOM % 9 + 1))"
  kill_plugin
  wait "$writer" || true
  last=$(tail -n 1 "$log")
  [ -n "$last" ] || fail "round $round: the writer flushed no batch: $(cat "$TMPDIR_TEST/writer-$round.err")"
  echo "round $round: killed nbdkit after batch $last was flushed"
  flushed+=("$last")

  # The pool as the crash left it: consistent.
  "$CAIRN" fsck "$POOL" || fail "round $round: fsck after the kill"

  start_plugin ${CRASH_PLUGIN_PARAMS:-}
  FLUSHED="${flushed[*]}" nbdsh -u "$(uri vol1)" -c "exec(open('$TMPDIR_TEST/check.py').read())" ||
    fail "round $round: data lost after the crash"
  stop_plugin
done
"$CAIRN" fsck "$POOL" || fail "fsck at the end"

# With the log on, cairn status says so and counts what it served: on
# through the server, and offline (where flushes commit) that the pool
# keeps its ring.
case " ${CRASH_PLUGIN_PARAMS:-} " in
  *" intent-log=true "*)
    start_plugin ${CRASH_PLUGIN_PARAMS:-} control="$TMPDIR_TEST/ctl"
    # (The first flush after an open is a commit: txn-log.c.)
    nbdsh -u "$(uri vol1)" -c 'for i in range(3): h.pwrite(b"\x5a" * 4096, 4096 * i); h.flush()' ||
      fail "flushed writes with the log on"
    run --socket "$TMPDIR_TEST/ctl" status
    expect 0 "^intent log +on: a flush is a log write \([0-9.]+[KMG] ring\); [1-9][0-9]* flushes in [1-9][0-9]* log blocks since the open$"
    json=$("$CAIRN" --socket "$TMPDIR_TEST/ctl" status --json) || fail "status --json"
    python3 -c 'import json, sys
il = json.loads(sys.argv[1])["intent_log"]
assert il["active"] and il["ring_blocks"] > 0 and il["flushes"] >= 1 \
  and il["blocks_written"] >= 1 and il["live_records"] == 0, il' "$json" ||
      fail "status --json: intent_log is not as the flush left it: $json"
    stop_plugin
    run --pool "$POOL" status
    expect 0 "^intent log +off: a flush commits \(the pool keeps its [0-9.]+[KMG] ring\)$"
    ;;
esac
echo PASS
