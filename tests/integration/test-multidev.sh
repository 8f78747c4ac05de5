#!/usr/bin/env bash
# A pool of two mirrored devices end to end: `cairn mkpool A B --data
# mirror --metadata mirror` labels both and formats the pool over them;
# the plugin opens it from pool=A pool=B and serves what was written; fsck
# checks it from A,B.  With B gone, opening from A alone is refused, naming
# the missing device and the way on (degraded=true), and a degraded open
# serves the export read-only with the same data, and status says DEGRADED
# and exits 1.  A byte rotted in one copy reads right, is rewritten from
# the other, and counted on its device (cairn status); one in a copy that
# reads do not reach is found and rewritten by fsck --scrub.  Profiles that
# cannot be placed are refused before anything is written; cairnd passes
# the devices and degraded on to nbdkit.  About 4 s.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdcopy
require_nbdsh

A="$TMPDIR_TEST/devA"
B="$TMPDIR_TEST/devB"

run mkpool "$A" "$B" --size 40M --data mirror --metadata stripe
expect 2 "differ: this version keeps data and metadata in one profile"
[ -e "$A" ] && fail "a refused mkpool left $A behind"
run mkpool "$A" "$B" --size 40M --data mirror3
expect 1 "profile mirror3 needs at least 3 devices, not 2"
[ -e "$A" ] && fail "a failed mkpool left $A behind"

run mkpool "$A" "$B" --size 40M --data mirror --metadata mirror
expect 0 "created pool .*: 2 devices, profile mirror"
run --pool "$A,$B" volume create v 8M
expect 0

# Served from both devices: write, then read back.
head -c 4M /dev/urandom >"$TMPDIR_TEST/data"
POOL=$A
start_plugin pool="$B"
nbdcopy "$TMPDIR_TEST/data" "$(uri v)" || fail "nbdcopy into v failed"
nbdsh -u "$(uri v)" -c 'h.pwrite(b"\x5a" * 4096, 4 << 20)
h.pwrite(b"\x5b" * 4096, 5 << 20)' || fail "writing blocks of 0x5a, 0x5b failed"
stop_plugin

# A rotted copy on A (the first copy, which reads try first) is read from
# B, rewritten, and counted on A: CKSUM 1, REPAIRED 1.
damage_pool_block 90
# And the second copy of another, on B, which reads do not reach.
POOL=$B damage_pool_block 91
CTL="$TMPDIR_TEST/control.sock"
start_plugin pool="$B" control="$CTL"
nbdsh -u "$(uri v)" -c 'assert h.pread(4096, 4 << 20) == b"\x5a" * 4096' ||
  fail "the damaged block did not read back right"
nbdcopy "$(uri v)" "$TMPDIR_TEST/back" || fail "nbdcopy out of v failed"
cmp -n 4194304 "$TMPDIR_TEST/data" "$TMPDIR_TEST/back" || fail "v reads back other data"
jcheck_rc '([(m["index"], m["state"], m["read_errors"], m["write_errors"],
  m["cksum_errors"], m["repaired"]) for m in j["devices"]["members"]] ==
  [(0, "online", 0, 0, 1, 1), (1, "online", 0, 0, 0, 0)] and
  j["devices"]["profile"] == "mirror")' 0 --socket "$CTL" status
run --socket "$CTL" status
expect 0 "^  0 +online +.* +0 +0 +1 +1 +$A\$"
stop_plugin
python3 - "$A" <<'PY' || fail "the damaged copy on A was not rewritten"
import sys
data = open(sys.argv[1], "rb").read()
assert data.find(b"\x5a" * 4096, 1 << 20) >= 0
PY
# fsck --scrub reads every copy: it finds the one on B and rewrites it.
run fsck "$A,$B"
expect 0
run fsck --scrub "$A,$B"
expect 0 "scrub: .* 1 damaged copy, 1 repaired, 0 with no good copy"
python3 - "$B" <<'PY' || fail "the damaged copy on B was not rewritten"
import sys
data = open(sys.argv[1], "rb").read()
assert data.find(b"\x5b" * 4096, 1 << 20) >= 0
PY
run fsck --scrub "$A,$B"
expect 0 "scrub: .* 0 damaged copies, 0 repaired"

# B is gone: refused without degraded=, and said why.
mv "$B" "$B.away"
rc=0
nbdkit_env "$NBDKIT" --foreground --unix "$SOCK" "$PLUGIN" pool="$A" \
  >"$TMPDIR_TEST/refused.log" 2>&1 || rc=$?
[ $rc -ne 0 ] || fail "nbdkit opened a mirror with a device missing"
grep -q "device 1 (UUID .*) is missing: found 1 of its 2 devices.*degraded" \
  "$TMPDIR_TEST/refused.log" || fail "no reason given: $(cat "$TMPDIR_TEST/refused.log")"
run --pool "$A" volume list
expect 1 "is missing"

# Degraded: every block served from A, read-only.
start_plugin degraded=true
nbdcopy "$(uri v)" "$TMPDIR_TEST/back" || fail "nbdcopy out of degraded v failed"
cmp -n 4194304 "$TMPDIR_TEST/data" "$TMPDIR_TEST/back" ||
  fail "degraded v reads back other data"
nbdsh -u "$(uri v)" -c 'assert h.is_read_only()' ||
  fail "a degraded pool's export is writable"
stop_plugin
run --pool "$A" --degraded volume list
expect 0 "^v +8M"
run --pool "$A" --degraded status
expect 1 "^  1 +missing .*"
grep -qE "^state +DEGRADED: 1 device missing" <<<"$out" || fail "status is not DEGRADED: $out"

# cairnd hands nbdkit one pool= per device, and degraded=true.
printf 'pool = devA,%s\ndegraded = yes\n' "$B" >"$TMPDIR_TEST/cairnd.conf"
RUN_CMD=$CAIRND run --config "$TMPDIR_TEST/cairnd.conf" --dry-run
expect 0 " pool=$A pool=$B degraded=true "
RUN_CMD=$CAIRND run --pool "$A,$B" --create 1G --dry-run
expect 2 "--create makes a pool of one device"

# Back together, it opens whole again.
mv "$B.away" "$B"
run --pool "$B,$A" volume list
expect 0 "^v +8M"
