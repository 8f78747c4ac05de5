#!/usr/bin/env bash
# How long cairn waits for a running server: --timeout and its mistakes;
# no time limit by default, yet a stopped (hung) server fails the command
# through the liveness check, a server killed mid-request fails it at
# once, and --timeout bounds the wait; each with a message that says what
# happened.
. "$top_srcdir/tests/integration/plugin-functions.sh"

CTL="$TMPDIR_TEST/control.sock"

make_pool 64M
start_plugin control="$CTL"
for _ in $(seq 100); do [ -S "$CTL" ] && break; sleep 0.1; done
[ -S "$CTL" ] || fail "no control socket at $CTL"

for bad in abc -1 1.5 ""; do
  run --timeout "$bad" --socket "$CTL" status
  expect 2 "--timeout $bad: expected a whole number of seconds"
done
run --timeout 0 --socket "$CTL" status
expect 0 "^state +ok"
run --timeout 30 --socket "$CTL" status
expect 0 "^state +ok"
run --help
expect 0 "--timeout SECONDS"

# A stopped server: --timeout gives up after its seconds.
kill -STOP "$NBDKIT_PID"
t0=$(date +%s)
run --timeout 1 --socket "$CTL" status
expect 1 "no reply from the Cairn server at $CTL within 1000 ms"
[ $(( $(date +%s) - t0 )) -le 5 ] || fail "--timeout 1 took $(( $(date +%s) - t0 )) s"

# Without --timeout the liveness check finds it hung (after at most two
# intervals of 10 s).
t0=$(date +%s)
run --socket "$CTL" status
expect 1 "server at $CTL stopped answering while it worked on the request"
[ $(( $(date +%s) - t0 )) -le 25 ] || fail "the liveness check took $(( $(date +%s) - t0 )) s"
kill -CONT "$NBDKIT_PID"
run --socket "$CTL" status
expect 0 "^state +ok"

# A server killed while a command waits: the command fails at once.
kill -STOP "$NBDKIT_PID"
"$CAIRN" --socket "$CTL" status >"$TMPDIR_TEST/out" 2>&1 &
waiter=$!
# It waits for the reply once its connection is in the stopped server's
# listen queue (ss) and it sleeps: between connecting and sleeping in
# poll it only sends its request, which does not block.  Killed sooner,
# the server would refuse the connection, a different case.
waiting () {
  [ "$(ss -xlnH src "$CTL" | awk '{ print $3 }')" = 1 ] &&
    [ "$(awk '{ print $3 }' "/proc/$waiter/stat" 2>/dev/null)" = S ]
}
if command -v ss >/dev/null; then
  wait_for waiting || fail "cairn status did not connect to the stopped server: $(cat "$TMPDIR_TEST/out")"
else
  sleep 2                       # no ss: a guess, which a loaded machine may beat
fi
kill -9 "$NBDKIT_PID"
wait "$NBDKIT_PID" 2>/dev/null || true
NBDKIT_PID=
t0=$(date +%s)
rc=0
wait "$waiter" || rc=$?
[ "$rc" -eq 1 ] || fail "cairn status on a killed server: exit $rc: $(cat "$TMPDIR_TEST/out")"
grep -q "closed the connection before replying" "$TMPDIR_TEST/out" ||
  fail "no clear message for a killed server: $(cat "$TMPDIR_TEST/out")"
[ $(( $(date +%s) - t0 )) -le 2 ] || fail "cairn waited after the server was killed"
run --socket "$CTL" status
expect 1 "no (Cairn )?server at $CTL"
