#!/usr/bin/env bash
# cairnd as an operator starts, stops and restarts it (issue #33): every
# option of --help is in cairnd(8); a missing plugin or pool is reported by
# cairnd with what to do; relative paths in a config file resolve against
# the file's directory; a pool in use names the live server's pid (not the
# pid of the process that took the lock before nbdkit forked); sockets left
# by a killed or stopped server do not stop the next start, while a live
# server's are refused; and SIGTERM stops a server with an idle NBD client
# connected within a bound, keeping what the client wrote and flushed.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
PIDFILE="$TMPDIR_TEST/cairnd.pid"
# run and expect (functions.sh) run cairnd with the sanitizers' settings:
# the nbdkit it execs loads the plugin (an ASan build's needs them).
cairnd () { nbdkit_env "$CAIRND" "$@"; }
RUN_CMD=cairnd

# Start cairnd in the foreground on $POOL with the arguments; wait for its
# sockets.  Unlike test-cairnd.sh it leaves old sockets where they are.
start_cairnd () {
  echo "=== cairnd $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$CAIRND" --foreground --pool "$POOL" --socket "$SOCK" \
    --control "$CTL" --plugin "$PLUGIN" --pidfile "$PIDFILE" "$@" \
    >>"$NBDKIT_LOG" 2>&1 &
  NBDKIT_PID=$!
  wait_for_sockets "$NBDKIT_PID" cairnd "$NBDKIT_LOG" "$SOCK" "$CTL"
  # The stale sockets of the server before pass that at once, before
  # cairnd removes them: wait until both accept a connection, which only
  # the new server's do.
  for _ in $(seq 300); do
    python3 - "$SOCK" "$CTL" <<'PY' 2>/dev/null && return 0
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    s.connect(p)
    s.close()
PY
    kill -0 "$NBDKIT_PID" 2>/dev/null || fail "cairnd exited during start-up: $(tail -n 20 "$NBDKIT_LOG")"
    sleep 0.1
  done
  fail "cairnd's sockets accept no connection after 30 s"
}

make_pool 256M
testctl create v 64M

# ------------------------------------------- every option is in cairnd(8)
help_opts=$("$CAIRND" --help | grep -oE '^ +(-[a-zA-Z], )?--[a-z-]+' |
            grep -oE -- '--[a-z-]+' | sort -u)
[ "$(wc -l <<<"$help_opts")" -ge 20 ] || fail "cairnd --help lists too few options: $help_opts"
for o in $help_opts; do
  grep -qE "^=item .*B<$o>" "$top_srcdir/man/cairnd.8.pod" ||
    fail "cairnd --help has $o, cairnd(8) has no =item for it"
done

# --------------------------------------------- a missing plugin or pool
run --pool "$POOL" --control "$CTL" --plugin "$TMPDIR_TEST/no-plugin.so"
expect 1 "^cairnd: plugin $TMPDIR_TEST/no-plugin.so: No such file or directory.*make install.*--plugin PATH"
run --pool "$TMPDIR_TEST/missing.pool" --control "$CTL" --plugin "$PLUGIN"
expect 1 "^cairnd: pool $TMPDIR_TEST/missing.pool does not exist: .*--create SIZE.*cairn mkpool"
[ ! -e "$CTL" ] || fail "a refused start left $CTL"

# ------------------------------ relative paths in a config file
mkdir "$TMPDIR_TEST/etc" "$TMPDIR_TEST/elsewhere"
echo "alice:$(python3 -c 'import secrets; print(secrets.token_hex(32))')" \
  >"$TMPDIR_TEST/etc/keys.psk"
cp "$TMPDIR_TEST/etc/keys.psk" "$TMPDIR_TEST/elsewhere/cli.psk"
cat >"$TMPDIR_TEST/etc/cairnd.conf" <<EOF
pool = ../pool
socket = run/nbd.sock
tls-psk = keys.psk
pidfile = run/cairnd.pid
EOF
rc=0
out=$(cd "$TMPDIR_TEST/elsewhere" && "$CAIRND" --config ../etc/cairnd.conf -n 2>&1) || rc=$?
args=(cairnd --config ../etc/cairnd.conf -n, from another directory)
expect 0 " --unix $TMPDIR_TEST/etc/run/nbd.sock .*--tls-psk=$TMPDIR_TEST/etc/keys.psk --pidfile $TMPDIR_TEST/etc/run/cairnd.pid .*pool=$TMPDIR_TEST/etc/../pool "
# The command line's relative paths stay relative to the current directory.
rc=0
out=$(cd "$TMPDIR_TEST/elsewhere" && "$CAIRND" --config ../etc/cairnd.conf --tls-psk cli.psk -n 2>&1) || rc=$?
expect 0 " --tls-psk=$TMPDIR_TEST/elsewhere/cli.psk "

# -------------------------- a pool in use names the server that holds it
# In the background nbdkit forks after taking the lock: the process that
# took it has exited, its child holds it.
rc=0
nbdkit_env "$CAIRND" --pool "$POOL" --socket "$SOCK" --control "$CTL" \
  --plugin "$PLUGIN" --pidfile "$PIDFILE" >>"$NBDKIT_LOG" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "cairnd in the background exited $rc"
for _ in $(seq 300); do [ -s "$PIDFILE" ] && break; sleep 0.1; done
server=$(cat "$PIDFILE")
[ -n "$server" ] && kill -0 "$server" || fail "no server pid in $PIDFILE"
NBDKIT_PID=$server                    # for cleanup (functions.sh)
for cmd in "fsck $POOL" "info $POOL" "--pool $POOL volume list"; do
  # shellcheck disable=SC2086
  rc=0; out=$("$CAIRN" $cmd 2>&1) || rc=$?
  args=(cairn "$cmd")
  expect 1 "pool $POOL is in use by process $server \(.*nbdkit.*\)"
done
run --pool "$POOL" --socket "$TMPDIR_TEST/other.sock" \
  --control "$TMPDIR_TEST/other-control.sock" --plugin "$PLUGIN" --foreground
expect 1 "pool $POOL is in use by process $server "
# Its sockets are live: a second server on them is refused, and says so.
run --pool "$TMPDIR_TEST/other.pool" --create 64M --socket "$SOCK" \
  --control "$TMPDIR_TEST/other-control.sock" --plugin "$PLUGIN"
expect 1 "^cairnd: NBD socket $SOCK: another server is already listening on it: stop that server first"
[ -S "$SOCK" ] || fail "a refused start removed a live server's socket"
kill "$server"
wait_gone "$server" 300 "the server in the background"
NBDKIT_PID=

# ----------------- stale sockets and pidfile: the next start removes them
[ -S "$SOCK" ] || fail "nbdkit removed its socket on exit; the test below tests nothing"
start_cairnd
grep -q "cairnd: removed the stale NBD socket $SOCK" "$NBDKIT_LOG" ||
  fail "cairnd did not say it removed the stale socket"
kill -9 "$NBDKIT_PID"
wait "$NBDKIT_PID" 2>/dev/null || true
NBDKIT_PID=
[ -S "$SOCK" ] && [ -S "$CTL" ] && [ -f "$PIDFILE" ] ||
  fail "a killed server left no stale files to test with"
start_cairnd

# ------------------------ SIGTERM with an idle client: bounded, nothing lost
# The client writes, flushes, then waits, idle, for a line on its fifo;
# then tries one more read, which must fail: the server closed it.
start_idle_client "$(uri v)" 8192
kill -TERM "$NBDKIT_PID"
wait_gone "$NBDKIT_PID" 100 "the server with an idle client, after SIGTERM,"
echo "the server stopped $waited tenths of a second after SIGTERM"
rc=0; wait "$NBDKIT_PID" || rc=$?
[ $rc -eq 0 ] || fail "the server exited $rc after SIGTERM"
NBDKIT_PID=
check_idle_client_closed
# Restarted on the same paths, the data the client flushed is there.
start_cairnd
nbdsh -u "$(uri v)" -c 'assert h.pread(4096, 8192) == b"kept" * 1024' ||
  fail "the data flushed before the stop is not there after a restart"
stop_plugin
