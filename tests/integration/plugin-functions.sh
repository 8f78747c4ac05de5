# Helpers for the plugin's integration tests (test-plugin-*.sh), on top of
# functions.sh: a pool in the test directory, volumes made offline with the
# cairn-testctl fixture, and an nbdkit that can be stopped, killed and
# restarted on the same pool and socket.

. "$top_srcdir/tests/integration/functions.sh"

TESTCTL="$top_builddir/tests/integration/cairn-testctl"
POOL="$TMPDIR_TEST/pool"
# CAIRN_TEST_RBD_POOL=CEPHPOOL: the pool is an RBD image in that Ceph pool
# instead, of this test's own name (test-rbd.sh runs plugin tests so, on
# its cluster).
if [ -n "${CAIRN_TEST_RBD_POOL:-}" ]; then
  POOL="rbd:$CAIRN_TEST_RBD_POOL/$(basename "$TMPDIR_TEST")"
fi
SOCK="$TMPDIR_TEST/nbd.sock"
NBDKIT_LOG="$TMPDIR_TEST/nbdkit.log"
# nbdkit options (before the plugin) for the next start_plugin.
NBDKIT_OPTS=()

# nbdsh runs the first python3 on PATH, which (pyenv, a virtualenv) may be
# one without libnbd's Python module; Debian's is in /usr/bin.
require_nbdsh () {
  require nbdsh
  nbdsh -c pass 2>/dev/null && return 0
  PATH=/usr/bin:$PATH
  nbdsh -c pass 2>/dev/null || skip "nbdsh cannot import libnbd's Python module (python3-libnbd)"
}

# Damage the first block of the pool file at or after byte 1 MiB that holds
# 4096 bytes $1 (a number): one byte of it changes, from outside the server.
# The change is in the host's page cache; drop_page_cache puts it on the
# disk alone, as when a disk rots a block.
damage_pool_block () {
  python3 - "$POOL" "$1" <<'PY' || fail "could not find a block of bytes $1 to damage in $POOL"
import sys
want = bytes([int(sys.argv[2])]) * 4096
with open(sys.argv[1], "r+b") as f:
    data = f.read()
    off = data.find(want, 1 << 20)
    assert off >= 0 and off % 4096 == 0, off
    f.seek(off + 100)
    f.write(bytes([int(sys.argv[2]) ^ 1]))
PY
}

# Write back file $1 and drop its pages from the host's cache, until none
# is left (mincore on a mapping, which brings nothing in): the kernel skips
# a page that something holds for a moment, which on a busy machine
# happens.  Nothing else may use the file meanwhile.
drop_page_cache () {
  python3 - "$1" <<'PY' || fail "could not drop the pages of $1 from the host's cache"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
fd = os.open(sys.argv[1], os.O_RDONLY)
size = os.fstat(fd).st_size
vec = (ctypes.c_ubyte * ((size + 4095) // 4096))()
left = -1
for _ in range(200):
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    p = libc.mmap(None, size, 1, 1, fd, 0)   # PROT_READ, MAP_SHARED
    if p is None or p == ctypes.c_void_p(-1).value:
        sys.exit("mmap: %s" % os.strerror(ctypes.get_errno()))
    rc = libc.mincore(p, size, vec)
    libc.munmap(p, size)
    if rc != 0:
        sys.exit("mincore: %s" % os.strerror(ctypes.get_errno()))
    left = sum(v & 1 for v in vec)
    if left == 0:
        sys.exit(0)
    time.sleep(0.01)
sys.exit("%d pages stay in the cache" % left)
PY
}

# The NBD URI of export $1 on the test socket.
uri () {
  echo "nbd+unix:///$1?socket=$SOCK"
}

# fio_verify EXPORT JOBS DEPTH SIZE [FIO-OPTIONS...]: fio through its NBD
# engine, JOBS jobs each on its own connection and its own SIZE of EXPORT,
# random 4 KiB writes with DEPTH requests in flight, every block verified
# (crc32c); fails, showing fio's output, on any error or verify failure.
# fio writes its verify state files (local-*-verify.state) into the
# current directory: it runs in the test's own.
fio_verify () {
  local export=$1 jobs=$2 depth=$3 size=$4 rc=0
  shift 4
  (cd "$TMPDIR_TEST" && fio --name=cairn --ioengine=nbd --uri="$(uri "$export")" \
    --rw=randwrite --bs=4k --iodepth="$depth" --numjobs="$jobs" \
    --size="$size" --offset_increment="$size" \
    --verify=crc32c --verify_fatal=1 --verify_backlog=0 \
    --randrepeat=1 --group_reporting "$@" >"$TMPDIR_TEST/fio.out" 2>&1) || rc=$?
  if [ $rc -ne 0 ] ||
     grep -qiE "verify: bad|bad magic|crc32c: verify failed|err= *[1-9]" \
       "$TMPDIR_TEST/fio.out"; then
    cat "$TMPDIR_TEST/fio.out"
    return 1
  fi
}

# fuse_attach DIR EXPORT [NBDFUSE-OPTIONS]: the export as the file DIR/nbd,
# through nbdfuse in the background; skips the test where FUSE does not
# work.
fuse_attach () {
  nbdfuse "${@:3}" "$1" "$(uri "$2")" &
  for _ in $(seq 100); do
    [ -f "$1/nbd" ] && return 0
    sleep 0.1
  done
  skip "nbdfuse could not mount $1 (no FUSE in this environment?)"
}

# fuse_detach MNT DIR: unmount the filesystem at MNT, then the FUSE file
# in DIR, and wait until nbdfuse has let go of it.
fuse_detach () {
  umount "$1"
  fusermount3 -u "$2"
  for _ in $(seq 100); do mountpoint -q "$2" || return 0; sleep 0.1; done
  fail "nbdfuse did not detach from $2"
}

# A fresh pool of size $1 at $POOL.
make_pool () {
  local force=()
  # An image outlives the test's directory: a test that makes its pool
  # again after rm -f makes it over the old image.
  case "$POOL" in rbd:*) force=(--force) ;; esac
  "$CAIRN" mkpool "$POOL" --size "$1" "${force[@]}" >/dev/null ||
    fail "cairn mkpool $POOL --size $1 failed"
}

# Check the Python expression $1 (j bound to the JSON) on cairn ARGS --json,
# which must exit with status $2 (python3 required).
jcheck_rc () {
  local expr=$1 want=$2 json rc=0
  shift 2
  json=$("$CAIRN" "$@" --json) || rc=$?
  [ $rc -eq "$want" ] || fail "cairn $* --json: exit $rc, expected $want: $json"
  python3 -c 'import json, os, sys
j = json.loads(sys.argv[1])
assert eval(sys.argv[2]), j' "$json" "$expr" || fail "cairn $* --json: not ($expr): $json"
}

# The running server's NBD export list (nbdinfo --list) must be exactly the
# names given, in name order (python3 required).
expect_exports () {
  local json
  json=$(nbdinfo --list --json "nbd+unix:///?socket=$SOCK") ||
    fail "nbdinfo --list failed"
  python3 -c 'import json, sys
names = sorted(e["export-name"] for e in json.loads(sys.argv[1])["exports"])
assert names == sys.argv[2:], names' "$json" "$@" ||
    fail "the export list is not $*"
}

# Run the fixture on the stopped pool: testctl create VOL SIZE, ...
testctl () {
  local cmd=$1
  shift
  "$TESTCTL" "$cmd" "$POOL" "$@" || fail "cairn-testctl $cmd $* failed"
}

# Start nbdkit with the plugin on $POOL and the given plugin parameters
# (NBDKIT_OPTS go before the plugin), appending to $NBDKIT_LOG; wait until
# it accepts connections.
start_plugin () {
  rm -f "$SOCK"                       # left behind by a killed server
  echo "=== start_plugin ${NBDKIT_OPTS[*]} $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$NBDKIT" --foreground --unix "$SOCK" "${NBDKIT_OPTS[@]}" \
    "$PLUGIN" pool="$POOL" "$@" >>"$NBDKIT_LOG" 2>&1 &
  NBDKIT_PID=$!
  wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$SOCK"
}

# Stop nbdkit as an operator would (SIGTERM: connections close, the pool is
# committed and closed) and check that it exited cleanly.
stop_plugin () {
  stop_server "$NBDKIT_PID"
  NBDKIT_PID=
}

# Kill nbdkit with SIGKILL: nothing gets to run, as in a crash.
kill_plugin () {
  kill -9 "$NBDKIT_PID"
  wait "$NBDKIT_PID" 2>/dev/null || true
  NBDKIT_PID=
}

# Stop the server PID with SIGTERM; it must exit cleanly, within 30 s (a
# server that hangs in exit fails the test instead of hanging it; see
# functions.sh's sanitizer_env for the one that did under ASan).
stop_server () {
  local pid=$1 rc=0
  kill "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    fail "nbdkit (pid $pid) did not exit within 30 s of SIGTERM"
  fi
  wait "$pid" || rc=$?
  [ $rc -eq 0 ] || fail "nbdkit exited with status $rc on SIGTERM"
}

# A free TCP port on loopback.
free_port () {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait until process $1 is gone, polling, at most $2 tenths of a second;
# sets waited to the tenths it took, fails naming $3 when it outlives it.
wait_gone () {
  waited=0
  while kill -0 "$1" 2>/dev/null; do
    [ "$waited" -lt "$2" ] || fail "$3 (pid $1) still runs after $(( $2 / 10 )) s"
    sleep 0.1
    waited=$(( waited + 1 ))
  done
}

# An idle NBD client of URI $1: it writes "kept" * 1024 at offset $2,
# flushes, then waits, idle, until check_idle_client_closed lets it try
# one more read, which must fail: the server closed the connection.
# Returns once the client is connected and idle.
start_idle_client () {
  mkfifo "$TMPDIR_TEST/go"
  U="$1" OFF="$2" READY="$TMPDIR_TEST/ready" GO="$TMPDIR_TEST/go" nbdsh -c '
import os, sys
h.connect_uri(os.environ["U"])
h.pwrite(b"kept" * 1024, int(os.environ["OFF"]))
h.flush()
open(os.environ["READY"], "w").close()
with open(os.environ["GO"]) as go:
    go.readline()
try:
    h.pread(4096, 0)
    print("client: the read after the stop worked")
except nbd.Error as e:
    print("client: the server closed the connection:", e)
' >"$TMPDIR_TEST/client.out" 2>&1 &
  IDLE_CLIENT=$!
  exec 7<>"$TMPDIR_TEST/go"            # the fifo stays open for the client
  for _ in $(seq 300); do [ -e "$TMPDIR_TEST/ready" ] && break; sleep 0.1; done
  [ -e "$TMPDIR_TEST/ready" ] ||
    fail "the client did not connect: $(cat "$TMPDIR_TEST/client.out")"
}

# After the server stopped: the idle client's next read found its
# connection closed.
check_idle_client_closed () {
  echo go >&7
  wait "$IDLE_CLIENT" || fail "the client failed: $(cat "$TMPDIR_TEST/client.out")"
  grep -q "client: the server closed the connection" "$TMPDIR_TEST/client.out" ||
    fail "the idle client did not see its connection closed: $(cat "$TMPDIR_TEST/client.out")"
}
