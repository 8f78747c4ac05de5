#!/usr/bin/env bash
# A sparse pool whose own filesystem fills up under NBD writes (a 48M
# tmpfs, a 128M pool): the write that finds no room fails with ENOSPC, the
# pool then refuses changes as FAILED, and `cairn status` says so, naming
# the cause, and exits 1; what was flushed still reads back, also after
# room is made and the server restarted, when the pool checks clean and
# takes writes again.  Needs root and tmpfs; skipped otherwise.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh

[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small filesystem"
mnt="$TMPDIR_TEST/mnt"
mkdir -p "$mnt"
mount -t tmpfs -o size=48M tmpfs "$mnt" 2>/dev/null ||
  skip "cannot mount a tmpfs here"
# Unmount it (after the server is gone) before cleanup removes the
# directory, keeping the test's exit status.
trap 'rc=$?; if [ -n "$NBDKIT_PID" ]; then kill -9 "$NBDKIT_PID"; wait "$NBDKIT_PID"; fi 2>/dev/null; NBDKIT_PID=; umount "$mnt" 2>/dev/null; (exit $rc); cleanup' EXIT

# Room to give back later.
head -c 8M /dev/zero >"$mnt/ballast"
POOL="$mnt/p.pool"
"$CAIRN" mkpool "$POOL" --size 128M >/dev/null || fail "mkpool"
testctl create v 112M
CTL="$TMPDIR_TEST/control.sock"
start_plugin control="$CTL"
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"

cat >"$TMPDIR_TEST/mib.py" <<'EOF'
import hashlib
def mib(i):
    return hashlib.sha256(b"%d" % i).digest() * 32768
EOF
export MIB_PY="$TMPDIR_TEST/mib.py"

# Write MiB after MiB, a flush after every fourth, until a request fails.
nbdsh -u "$(uri v)" -c '
import os
exec(open(os.environ["MIB_PY"]).read())
flushed = 0
for i in range(112):
    try:
        h.pwrite(mib(i), i << 20)
        if i % 4 == 3:
            h.flush()
            flushed = i + 1
    except nbd.Error as e:
        print("failed", i, e.errnum, e.string.replace(" ", "_"))
        break
print("flushed", flushed)
' >"$TMPDIR_TEST/fill.out" || fail "the writer failed: $(cat "$TMPDIR_TEST/fill.out")"
cat "$TMPDIR_TEST/fill.out"
read -r _ at errnum _ < <(grep '^failed' "$TMPDIR_TEST/fill.out") ||
  fail "112 MiB fit in a 48M filesystem"
flushed=$(sed -n 's/^flushed //p' "$TMPDIR_TEST/fill.out")
[ "$flushed" -ge 4 ] || fail "nothing was flushed before the filesystem filled"
[ "$errnum" -eq 28 ] || fail "the first failure was errno $errnum, not ENOSPC"
grep -q "No space left on device" "$NBDKIT_LOG" ||
  fail "the log does not say why the write failed"

# The pool is failed now: a flush cannot commit, the status says so.
nbdsh -u "$(uri v)" -c 'h.flush()' 2>"$TMPDIR_TEST/flush.err" &&
  fail "a flush succeeded on a filesystem without room"
rc=0
"$CAIRN" --socket "$CTL" status >"$TMPDIR_TEST/status.out" 2>&1 || rc=$?
cat "$TMPDIR_TEST/status.out"
[ $rc -eq 1 ] || fail "cairn status exited $rc on a failed pool, not 1"
grep -q "^state  *FAILED" "$TMPDIR_TEST/status.out" || fail "status does not say FAILED"
grep -q "^failure .*No space left on device" "$TMPDIR_TEST/status.out" ||
  fail "status does not name the cause"
rc=0
"$CAIRN" --socket "$CTL" status --json >"$TMPDIR_TEST/status.json" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "cairn status --json exited $rc on a failed pool, not 1"
grep -q '"failed": *true' "$TMPDIR_TEST/status.json" || fail "the JSON status does not say failed"

# What was flushed reads back while the pool is failed, and after.
check_flushed () {
  FLUSHED=$flushed nbdsh -u "$(uri v)" -c '
import os, sys
exec(open(os.environ["MIB_PY"]).read())
for i in range(int(os.environ["FLUSHED"])):
    if h.pread(1 << 20, i << 20) != mib(i):
        sys.exit("MiB %d, flushed, reads back wrong" % i)
' || fail "flushed data is lost ($1)"
}
check_flushed "while the pool is failed"

# Room again, a restart: clean, intact, writable.
rm "$mnt/ballast"
stop_plugin
"$CAIRN" fsck "$POOL" || fail "fsck after the failure"
start_plugin
check_flushed "after the restart"
nbdsh -u "$(uri v)" -c '
h.pwrite(b"\x5a" * (1 << 20), 100 << 20)
h.flush()
assert h.pread(1 << 20, 100 << 20) == b"\x5a" * (1 << 20)
' || fail "the pool takes no write after room was made"
stop_plugin
"$CAIRN" fsck "$POOL" || fail "fsck at the end"
echo PASS
