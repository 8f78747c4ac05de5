#!/usr/bin/env bash
# The online scrub through the plugin's control server and the cairn
# command: on a mirror of two files, a copy rotted on each device (one
# that reads never reach) is found and rewritten by `cairn scrub start
# --wait` while the server serves, counted on its device in the scrub's
# summary and in `cairn status`; a rate-limited pass shows in `cairn job
# list`, refuses a second start, survives a server restart as paused and
# interrupted, and resumes to the end; pause, resume and cancel, and their
# errors; --since-last reads only what was written since; a degraded pool
# refuses a scrub and says why; fsck is clean afterwards.  About 6 s.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdcopy
require python3
require_nbdsh

A="$TMPDIR_TEST/devA"
B="$TMPDIR_TEST/devB"
CTL="$TMPDIR_TEST/control.sock"
POOL=$A

run mkpool "$A" "$B" --size 40M --data mirror --metadata mirror
expect 0
run --pool "$A,$B" volume create v 8M
expect 0
start_plugin pool="$B" control="$CTL"
head -c 4M /dev/urandom >"$TMPDIR_TEST/data"
nbdcopy "$TMPDIR_TEST/data" "$(uri v)" || fail "nbdcopy into v failed"
run --socket "$CTL" snapshot create v s1
expect 0
nbdsh -u "$(uri v)" -c 'h.pwrite(b"\x5a" * 4096, 4 << 20)
h.pwrite(b"\x5b" * 4096, 5 << 20)
h.flush()' || fail "writing blocks of 0x5a, 0x5b failed"
stop_plugin

# Rot the second copy of one block (on B: reads never reach it) and the
# first of another (on A).
POOL=$B damage_pool_block 90
POOL=$A damage_pool_block 91
start_plugin pool="$B" control="$CTL"
run --socket "$CTL" scrub status
expect 0 "no scrub has run on this pool"
jcheck_rc '(j["state"] == "finished" and j["errors"] == 2 and
  j["repaired"] == 2 and j["unrepairable"] == 0 and j["damage"] == [] and
  [(d["index"], d["errors"], d["repaired"]) for d in j["devices"]] ==
  [(0, 1, 1), (1, 1, 1)] and j["bytes_done"] >= (4 << 20) + 8192 and
  j["bytes_read"] == 2 * j["bytes_done"])' 0 --socket "$CTL" scrub start --wait
jcheck_rc '([(m["cksum_errors"], m["repaired"]) for m in
  j["devices"]["members"]] == [(1, 1), (1, 1)])' 0 --socket "$CTL" status
FULL=$("$CAIRN" --socket "$CTL" scrub status --json |
       python3 -c 'import json, sys; print(json.load(sys.stdin)["blocks"])')
nbdsh -u "$(uri v)" -c 'assert h.pread(4096, 4 << 20) == b"\x5a" * 4096
assert h.pread(4096, 5 << 20) == b"\x5b" * 4096' ||
  fail "the healed blocks do not read back right"
run --socket "$CTL" scrub start --rate abc
expect 2 "--rate"

# A slow pass: a job, a second start refused; the server stops in the
# middle; after the restart it is paused (interrupted) and resumes.
run --socket "$CTL" scrub start --rate 1M
expect 0 "state +running"
run --socket "$CTL" scrub start
expect 1 "a scrub is running"
run --socket "$CTL" job list
expect 0 "scrub +the pool \(rate-limited\), running"
progressed () {
  "$CAIRN" --socket "$CTL" scrub status --json | python3 -c '
import json, sys; sys.exit(0 if json.load(sys.stdin)["bytes_done"] > 0 else 1)'
}
wait_for progressed || fail "the scrub made no progress"
stop_plugin
start_plugin pool="$B" control="$CTL"
run --socket "$CTL" scrub status
expect 0 "state +paused \(interrupted"
run --socket "$CTL" scrub start
expect 1 "a scrub is paused \(interrupted by a restart\)"
jcheck_rc '(j["state"] == "finished" and j["blocks"] == '"$FULL"' and
  j["errors"] == 0)' 0 --socket "$CTL" scrub resume --rate 1G --wait

# Pause, resume, cancel, and what each refuses.
run --socket "$CTL" scrub pause
expect 3 "no scrub is running \(finished\)"
run --socket "$CTL" scrub start --rate 1M
expect 0
run --socket "$CTL" scrub pause
expect 0 "state +paused"
run --socket "$CTL" scrub resume
expect 0 "state +running"
run --socket "$CTL" scrub cancel
expect 0 "state +cancelled"
run --socket "$CTL" scrub resume
expect 3 "no scrub is paused \(cancelled\)"
run --socket "$CTL" scrub cancel
expect 3 "no scrub is running or paused"

# --since-last: only the 64 KiB written since the last complete pass.
nbdsh -u "$(uri v)" -c 'h.pwrite(b"\x5c" * 65536, 6 << 20)
h.flush()' || fail "writing 64 KiB failed"
jcheck_rc '(j["since_last"] and j["state"] == "finished" and
  16 <= j["blocks"] < 32 and j["errors"] == 0)' 0 \
  --socket "$CTL" scrub start --since-last --wait
stop_plugin

# In process on the stopped pool; and a degraded pool refuses.
run --pool "$A,$B" scrub start
expect 0 "state +finished"
grep -qE "found +0 bad copies, 0 repaired, 0 unrepairable" <<<"$out" ||
  fail "the offline scrub found something: $out"
run --pool "$A" --degraded scrub start
expect 1 "read-only.*degraded"
run fsck --scrub "$A,$B"
expect 0 "scrub: .* 0 damaged copies, 0 repaired"
