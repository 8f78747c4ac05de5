#!/usr/bin/env bash
# `cairn device replace` on a mirrored pool served by the plugin.  fio
# writes with verify from two NBD connections while device 1 (B) is
# replaced by a new file C online; then C alone, opened degraded, holds
# everything fio wrote (fio --verify_only passes on it).  Then A dies (its
# file is gone): the pool opens degraded from C, `cairn status` says
# DEGRADED and exits 1, and device 0 is replaced by D on the degraded
# server; the pool then opens whole from C and D (writable, status 0),
# fio's data verifies, a scrub finds nothing and fsck is clean.  Bad
# requests (a device too small, no such device, no such file, nothing to
# cancel) are refused with their reason and change nothing.  About 25 s
# at a load average of 12.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require fio
fio --enghelp=nbd >/dev/null 2>&1 || skip "this fio has no nbd ioengine"
require_nbdsh

A="$TMPDIR_TEST/devA"
B="$TMPDIR_TEST/devB"
C="$TMPDIR_TEST/devC"
D="$TMPDIR_TEST/devD"
CTL="$TMPDIR_TEST/control.sock"

run mkpool "$A" "$B" --size 48M --data mirror --metadata mirror
expect 0 "created pool .*: 2 devices, profile mirror"
run --pool "$A,$B" volume create v 16M
expect 0
truncate -s 48M "$C" "$D"
truncate -s 8M "$TMPDIR_TEST/small"

# run_fio [FIO-OPTIONS...]: two jobs, two NBD connections, each on its
# own 8 MiB of v.
run_fio () {
  fio_verify v 2 8 8M "$@"
}

# B by C online, while fio writes.
POOL=$A
start_plugin pool="$B" control="$CTL"
run --socket "$CTL" device replace 1 "$TMPDIR_TEST/small"
expect 1 "small is [0-9]+ bytes: replacing device 1 takes at least"
run --socket "$CTL" device replace 7 "$C"
expect 3 "the pool has no device 7 \\(devices 0 to 1\\)"
run --socket "$CTL" device replace 1 "$TMPDIR_TEST/nothere"
expect 3 "nothere: No such file"
run --socket "$CTL" device replace --cancel
expect 3 "no device is being replaced"
run --socket "$CTL" device replace --status
expect 0 "no device is being replaced"
run_fio &
fio_pid=$!
run --socket "$CTL" device replace "$B" "$C" --wait
expect 0 "state +finished"
wait $fio_pid || fail "fio reported errors during the replace"
jcheck_rc '([(m["index"], m["state"], m["path"]) for m in j["devices"]["members"]] ==
  [(0, "online", "'"$A"'"), (1, "online", "'"$C"'")] and
  j["devices"]["redundant"] and j["devices"]["replace"]["state"] == "finished")' \
  0 --socket "$CTL" status
run --socket "$CTL" status
expect 0 "replace +device 1 by .*devC: finished, 100.0% copied"
stop_plugin
# B is no longer a device of the pool: its labels are wiped.
run fsck "$B"
expect 1 "devB is not a Cairn pool"

# C alone holds everything.
POOL=$C
start_plugin degraded=true
run_fio --verify_only || fail "C alone does not hold what fio wrote"
stop_plugin

# A dies: the pool opens degraded from C alone; A is replaced by D.
rm -f "$A"
start_plugin degraded=true control="$CTL"
run --socket "$CTL" status
expect 1 "DEGRADED: 1 device missing.*replace it"
run --socket "$CTL" device replace 0 "$D" --wait
expect 0 "state +finished"
run --socket "$CTL" status
expect 0 "^  0 +online .*devD$"
stop_plugin

# Whole again, from C and D: writable, fio's data there, nothing to scrub.
start_plugin pool="$D" control="$CTL"
run --socket "$CTL" status
expect 0 "state +ok$"
run_fio --verify_only || fail "C and D do not hold what fio wrote"
nbdsh -u "$(uri v)" -c 'h.pwrite(b"\x5c" * 4096, 0)' ||
  fail "the pool of C and D is not writable"
run --socket "$CTL" scrub start --wait
expect 0 "0 bad copies, 0 repaired, 0 unrepairable"
stop_plugin
run fsck "$C,$D"
expect 0
run --pool "$C,$D" device replace --status
expect 0 "no device is being replaced"
echo PASS
