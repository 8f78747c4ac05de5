# Helpers for the plugin's integration tests (test-plugin-*.sh), on top of
# functions.sh: a pool in the test directory, volumes made offline with the
# cairn-testctl fixture, and an nbdkit that can be stopped, killed and
# restarted on the same pool and socket.

. "$top_srcdir/tests/integration/functions.sh"

TESTCTL="$top_builddir/tests/integration/cairn-testctl"
POOL="$TMPDIR_TEST/pool"
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

# The NBD URI of export $1 on the test socket.
uri () {
  echo "nbd+unix:///$1?socket=$SOCK"
}

# A fresh pool of size $1 at $POOL.
make_pool () {
  "$CAIRN" mkpool "$POOL" --size "$1" >/dev/null || fail "cairn mkpool $POOL --size $1 failed"
}

# Check the Python expression $1 (j bound to the JSON) on cairn ARGS --json,
# which must exit with status $2 (python3 required).
jcheck_rc () {
  local expr=$1 want=$2 json rc=0
  shift 2
  json=$("$CAIRN" "$@" --json) || rc=$?
  [ $rc -eq "$want" ] || fail "cairn $* --json: exit $rc, expected $want: $json"
  python3 -c 'import json, sys
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
