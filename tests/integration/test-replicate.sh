#!/usr/bin/env bash
# Send, receive, replicate and pull through two running servers (nbdkit
# with the plugin, each with a control socket and a control port on
# loopback TCP): `cairn send | cairn receive` through the servers, a push
# (full, then incremental after random writes, zeros and trims), a pull of a
# chain of snapshots, every received snapshot compared with its source over
# NBD (qemu-img compare); then transfers interrupted mid-stream (the cairn
# client killed with SIGKILL, the receiving nbdkit killed with SIGKILL and
# restarted) and the same command run again, which resumes (it says so) to
# an identical result; progress as JSON; a job listed and cancelled.
# Receive, pull and push with --rollback onto a volume of B's that diverged
# (a snapshot of its own, writes): refused without, mirrored with, each
# saying what it discarded (text and JSON; nothing when nothing was); a
# push of a chain of three snapshots, each compared.
#
# replicate and pull are jobs of the servers (replicate.push/pull): to
# interrupt one at a known point however fast the machine is, the other
# server is paced with SIGSTOP/SIGCONT while the job's progress is polled.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require qemu-img
require qemu-io
require nbdcopy
require python3

POOL_A="$TMPDIR_TEST/pool-a" POOL_B="$TMPDIR_TEST/pool-b"
NBD_A="$TMPDIR_TEST/a.nbd" NBD_B="$TMPDIR_TEST/b.nbd"
CTL_A="$TMPDIR_TEST/a.ctl" CTL_B="$TMPDIR_TEST/b.ctl"
PID_A= PID_B= CLIENT=

# At exit, kill what is still running of what this shell started (jobs -p,
# never a remembered pid: one stopped and reaped may since belong to
# another test's process).
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done; (exit $rc); cleanup' EXIT

PORT_A=$(free_port) PORT_B=$(free_port)

# Start the server of pool $1 (a or b).
start_server () {
  local pool nbd ctl port pid
  if [ "$1" = a ]; then pool=$POOL_A nbd=$NBD_A ctl=$CTL_A port=$PORT_A
  else pool=$POOL_B nbd=$NBD_B ctl=$CTL_B port=$PORT_B; fi
  rm -f "$nbd" "$ctl"
  nbdkit_exec "$NBDKIT" --foreground --unix "$nbd" "$PLUGIN" pool="$pool" \
    control="$ctl" control-tcp="127.0.0.1:$port" control-insecure=true \
    >>"$NBDKIT_LOG" 2>&1 &
  pid=$!
  if [ "$1" = a ]; then PID_A=$pid; else PID_B=$pid; fi
  wait_for_sockets "$pid" "nbdkit on pool $1" "" "$nbd" "$ctl"
}

# cairn on server A or B: ca ARGS, cb ARGS.
ca () { "$CAIRN" --socket "$CTL_A" "$@"; }
cb () { "$CAIRN" --socket "$CTL_B" "$@"; }

# The last run's JSON progress covered the chain of A's volume v from
# snapshot $1 through the rest ($2 ...): one total for all of it, more than
# any one of its streams carries (so not a stream's own total, however few
# events came), done never went back, and the last event has all of it.
progress_covers_chain () {
  local base=$1 s most=0 n
  shift
  for s in "$@"; do
    n=$(ca send "v@$s" --from "$base" --dry-run |
        sed -E 's/.*\(([0-9]+) bytes\).*/\1/')
    [ "$n" -gt "$most" ] && most=$n
    base=$s
  done
  python3 - "$out" "$most" <<'PY' || fail "progress does not cover the chain: $out"
import json, sys
ev = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
prog = [e for e in ev if e.get("event") in ("progress", "done")]
tot = {e.get("total") for e in prog}
done = [e["done"] for e in prog]
sys.exit(0 if prog and len(tot) == 1 and None not in tot
         and min(tot) > int(sys.argv[2]) and done == sorted(done)
         and prog[-1]["event"] == "done" and done[-1] == min(tot) else 1)
PY
}

# The last run's transfer carried less than $1 MiB of data (it resumed
# without resending what had arrived).
less_than_mib () {
  python3 - "$out" "$1" <<'PY' || fail "the resumed transfer resent data: $out"
import re, sys
m = re.search(r"([0-9.]+)([KMG]?) of data", sys.argv[1])
n = float(m.group(1)) * {"": 1 / 2**20, "K": 1 / 1024, "M": 1, "G": 1024}[m.group(2)]
sys.exit(0 if n < float(sys.argv[2]) else 1)
PY
}

# Compare export $1 on both servers.
same () {
  qemu-img compare -f raw -F raw "nbd+unix:///$1?socket=$NBD_A" \
    "nbd+unix:///$1?socket=$NBD_B" >/dev/null ||
    fail "$1 differs between the servers"
}

# Random writes, zeros and trims on A's volume $1 (seeded by $2).
scribble () {
  local cmds=() size=$3 i off len
  RANDOM=$2
  for i in $(seq 40); do
    off=$(( (RANDOM * 32768 + RANDOM) % (size - 2097152) ))
    len=$(( 512 + RANDOM * 32 ))
    case $(( RANDOM % 4 )) in
      0|1) cmds+=(-c "write -P $((RANDOM % 250 + 1)) $off $len") ;;
      2) cmds+=(-c "write -z $off $len") ;;
      3) cmds+=(-c "discard $((off / 4096 * 4096)) $(( (len + 4095) / 4096 * 4096 ))") ;;
    esac
  done
  qemu-io -f raw "${cmds[@]}" "nbd+unix:///$1?socket=$NBD_A" >/dev/null ||
    fail "qemu-io on $1"
}

# Bytes done by the (first) job of the server at socket $1, 0 if none.
job_done () {
  "$CAIRN" --socket "$1" job list --json | python3 -c 'import json, sys
j = json.load(sys.stdin)["jobs"]
print(j[0]["done"] if j else 0)'
}

# Pace the server with pid $1 (the other end of the job) until the job of
# the server at socket $2 has done $3 bytes; leaves the paced server
# stopped.  Fails if the client $CLIENT finished first.
pace_until () {
  local pid=$1 sock=$2 want=$3
  for _ in $(seq 3000); do
    kill -STOP "$pid"
    if ! kill -0 "$CLIENT" 2>/dev/null; then
      kill -CONT "$pid"
      local rc=0; wait "$CLIENT" || rc=$?
      fail "the transfer ended (exit status $rc) at byte $(job_done "$sock"), before byte $want"
    fi
    [ "$(job_done "$sock")" -ge "$want" ] && return 0
    kill -CONT "$pid"
    sleep 0.02
  done
  fail "the transfer did not reach byte $want"
}

"$CAIRN" mkpool "$POOL_A" --size 768M >/dev/null || fail "mkpool A"
"$CAIRN" mkpool "$POOL_B" --size 768M >/dev/null || fail "mkpool B"

# cairnd passes --control-tcp (or the config key) to the plugin.
"$CAIRND" --pool "$POOL_A" --control-tcp "127.0.0.1:$PORT_A" --control-insecure \
  --dry-run | grep -q " control-tcp=127.0.0.1:$PORT_A control-insecure=true" ||
  fail "cairnd --control-tcp"
printf 'pool = %s\ncontrol-tcp = %s\ncontrol-insecure = yes\n' "$POOL_A" "$PORT_A" \
  >"$TMPDIR_TEST/cairnd.conf"
"$CAIRND" --config "$TMPDIR_TEST/cairnd.conf" --dry-run |
  grep -q " control-tcp=$PORT_A control-insecure=true\$" ||
  fail "cairnd: control-tcp in the config file"

# control-tcp= needs control=, and a port that is one.  (timeout: a
# sanitizer build of nbdkit can hang in its exit handlers.)
for params in "control-tcp=$PORT_A control-insecure=true" \
              "control=$CTL_A control-tcp=127.0.0.1:70000 control-insecure=true"; do
  # shellcheck disable=SC2086
  msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground \
        --unix "$NBD_A" "$PLUGIN" pool="$POOL_A" $params 2>&1) &&
    fail "nbdkit accepted $params"
  grep -qE "needs control=|0 to 65535" <<<"$msg" || fail "nbdkit $params said: $msg"
done
start_server a
start_server b

# ---------------------------------------------------------------- send | receive
ca volume create v 64M >/dev/null || fail "volume create"
head -c 20M /dev/urandom >"$TMPDIR_TEST/rnd"
nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///v?socket=$NBD_A" || fail "nbdcopy"
scribble v 1 $((64 * 1024 * 1024))
ca snapshot create v@s1 >/dev/null
run --socket "$CTL_A" send v@s1 --dry-run
expect 0 "a full stream of v@s1: .* bytes"
ca send v@s1 | cb receive v >"$TMPDIR_TEST/out" || fail "send | receive: $(cat "$TMPDIR_TEST/out")"
grep -q "received v@s1 (full stream" "$TMPDIR_TEST/out" || fail "receive said: $(cat "$TMPDIR_TEST/out")"
same v@s1
same v

# A stream that is not one: refused, nothing visible changes on B.
before=$(cb volume list --snapshots --json)
rc=0; head -c 100000 /dev/urandom | cb receive x 2>"$TMPDIR_TEST/err" || rc=$?
[ $rc -eq 1 ] || fail "receiving garbage: exit $rc"
grep -q "byte" "$TMPDIR_TEST/err" || fail "the refusal does not say where: $(cat "$TMPDIR_TEST/err")"
[ "$before" = "$(cb volume list --snapshots --json)" ] || fail "a refused stream changed B"

# ---------------------------------------------------------------- push
scribble v 2 $((64 * 1024 * 1024))
ca snapshot create v@s2 >/dev/null
run --socket "$CTL_A" replicate v@s2 --to "127.0.0.1:$PORT_B" --progress=json
expect 0 "sent v@s2 to 127.0.0.1:$PORT_B \(incremental"
grep -q '"event":"done"' <<<"$out" || fail "no JSON progress: $out"
grep -q '"event":"progress"' <<<"$out" || fail "no JSON progress event: $out"
same v@s2
run --socket "$CTL_A" replicate v@s2 --to "127.0.0.1:$PORT_B"
expect 0 "has v@s2 already"

# ---------------------------------------------------------------- pull
for s in s3 s4 s5; do
  scribble v "${s#s}3" $((64 * 1024 * 1024))
  ca snapshot create "v@$s" >/dev/null
done
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" v --progress=json
expect 0 "received v@s5 from 127.0.0.1:$PORT_A \(incremental"
grep -q "received v@s3" <<<"$out" || fail "pull did not bring s3: $out"
progress_covers_chain s2 s3 s4 s5
for s in s1 s2 s3 s4 s5; do same "v@$s"; done
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" v
expect 0 "up to date"
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" nosuch
expect 3 "nothing to pull"

# ---------------------------------------------------------------- rollback
# Write B's export $1 with byte $2 (1 MiB at 8 MiB), then wait until
# nbdkit has closed the handle (a publish waits for open handles).
write_b () {
  qemu-io -f raw -c "write -P $2 8M 1M" "nbd+unix:///$1?socket=$NBD_B" >/dev/null ||
    fail "writing B's $1"
  for _ in $(seq 50); do
    [ "$(cb stats "$1" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["connections"])')" = 0 ] && return 0
    sleep 0.1
  done
  fail "nbdkit B did not close its handle on $1"
}
# B's v diverges: a snapshot of its own and writes after it.
diverge_b () {
  cb snapshot create "v@$1" >/dev/null || fail "snapshot v@$1 on B"
  write_b v 0x7$2
}

# Online receive: refused, then applied with --rollback.
diverge_b b1 1
scribble v 61 $((64 * 1024 * 1024))
ca snapshot create v@s6 >/dev/null
rc=0; ca send v@s6 --from s5 | cb receive v >"$TMPDIR_TEST/out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "an incremental onto a diverged v: exit $rc: $(cat "$TMPDIR_TEST/out")"
grep -q "has newer snapshots ('b1' is the newest).*--rollback" "$TMPDIR_TEST/out" ||
  fail "the refusal said: $(cat "$TMPDIR_TEST/out")"
cb receive v --abort >/dev/null 2>&1 || true
ca send v@s6 --from s5 | cb receive v --rollback >"$TMPDIR_TEST/out" 2>&1 ||
  fail "receive --rollback: $(cat "$TMPDIR_TEST/out")"
grep -q "received v@s6 (incremental stream" "$TMPDIR_TEST/out" ||
  fail "receive --rollback said: $(cat "$TMPDIR_TEST/out")"
# It says what it discarded (issue 33, item 8): b1, and the writes after it.
grep -qx "rolled back v to v@s5: destroyed 1 snapshot (v@b1); discarded the writes made since v@b1" \
  "$TMPDIR_TEST/out" || fail "receive --rollback did not say what it discarded: $(cat "$TMPDIR_TEST/out")"
cb snapshot list v | grep -qw b1 && fail "v@b1 survived the rollback"
same v@s6
same v

# Pull: refused onto a diverged v, then --rollback mirrors A.
diverge_b b2 2
scribble v 71 $((64 * 1024 * 1024))
ca snapshot create v@s7 >/dev/null
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" v
expect 1 "has newer snapshots \('b2' is the newest\).*or run 'cairn pull 127.0.0.1:$PORT_A v --rollback' to discard them"
grep -q "receive with" <<<"$out" && fail "a refused pull names another command: $out"
cb receive v --abort >/dev/null 2>&1 || true
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" v --rollback --json
expect 0 '"snapshot": "v@s7"'
python3 - "$out" <<'PY' || fail "pull --rollback --json did not say what it discarded: $out"
import json, sys
r = json.loads(sys.argv[1])["received"]
sys.exit(0 if len(r) == 1 and r[0]["discarded"] == {
    "base": "v@s6", "snapshots": ["v@b2"], "snapshots_total": 1,
    "writes": True, "writes_since": "v@b2"} else 1)
PY
cb snapshot list v | grep -qw b2 && fail "v@b2 survived pull --rollback"
same v@s7
same v

# Push of a chain: every snapshot between the newest one B has and s10,
# each one checked on B.
for s in s8 s9 s10; do
  scribble v "${s#s}1" $((64 * 1024 * 1024))
  ca snapshot create "v@$s" >/dev/null
done
run --socket "$CTL_A" replicate v@s10 --to "127.0.0.1:$PORT_B" --progress=json \
  --rollback
expect 0 "sent v@s10 to 127.0.0.1:$PORT_B \(incremental"
# --rollback onto a v that did not diverge discards nothing, and says
# nothing of it.
grep -q "rolled back" <<<"$out" && fail "a push that discarded nothing said: $out"
for s in s8 s9; do
  grep -q "sent v@$s to" <<<"$out" || fail "the push did not send v@$s: $out"
done
progress_covers_chain s7 s8 s9 s10
for s in s8 s9 s10; do same "v@$s"; done
same v@s7

# Push onto a diverged v: refused, then --rollback from the newest common.
diverge_b b3 3
scribble v 111 $((64 * 1024 * 1024))
ca snapshot create v@s11 >/dev/null
run --socket "$CTL_A" replicate v@s11 --to "127.0.0.1:$PORT_B"
expect 1 "\('b3'\) is not one of this server's.*name a base with --from, roll it back to the newest snapshot both have with --rollback"
run --socket "$CTL_A" replicate v@s11 --to "127.0.0.1:$PORT_B" --rollback
expect 0 "sent v@s11 to 127.0.0.1:$PORT_B \(incremental"
grep -qx "rolled back v on 127.0.0.1:$PORT_B to v@s10: destroyed 1 snapshot (v@b3); discarded the writes made since v@b3" <<<"$out" ||
  fail "replicate --rollback did not say what it discarded: $out"
cb snapshot list v | grep -qw b3 && fail "v@b3 survived replicate --rollback"
same v@s11
same v

# ---------------------------------------------------------------- interruptions
# The interrupted transfers below move 568 MiB, to get past the some 30 MiB
# the sockets and channels buffer and the 16 MiB between resume points, so
# they cannot be made smaller; under the sanitizers they took 4 minutes of
# CI's budget.  They run in the normal build; the sanitizer build runs the
# code they reach on its own (partial receives kept and resumed, cancelled
# sends and receives, a server stopped mid-stream) in test-control-stream's
# unit tests.  (The section is not indented: it holds Python programs.)
if [ "$ENABLE_SANITIZERS" != yes ]; then

# ---------------------------------------------------------------- interrupted push
# 160 MiB of data: 10 resume points (one every 16 MiB of stream).
ca volume create w 256M >/dev/null
head -c 160M /dev/urandom >"$TMPDIR_TEST/rnd"
nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///w?socket=$NBD_A" || fail "nbdcopy"
ca snapshot create w@f1 >/dev/null
# Killing the cairn client cancels A's job; B keeps what it received.
"$CAIRN" --socket "$CTL_A" replicate w@f1 --to "127.0.0.1:$PORT_B" \
  --progress=none >/dev/null 2>&1 &
CLIENT=$!
pace_until "$PID_B" "$CTL_A" $((60 * 1024 * 1024))
kill -9 "$CLIENT"; wait "$CLIENT" 2>/dev/null || true; CLIENT=
# A cancels its job (it notices within its 200 ms wait slices) before B
# runs again: otherwise A could finish the stream first on a fast machine.
for _ in $(seq 100); do [ "$(job_done "$CTL_A")" = 0 ] && break; sleep 0.1; done
[ "$(job_done "$CTL_A")" = 0 ] || fail "A's job outlived its client"
kill -CONT "$PID_B"
for _ in $(seq 100); do [ "$(job_done "$CTL_B")" = 0 ] && break; sleep 0.1; done
cb volume list | grep -qw w && fail "the interrupted receive made w visible"
cb receive --token w | grep -q cairn-resume || fail "no resume token on B"
run --socket "$CTL_A" replicate w@f1 --to "127.0.0.1:$PORT_B"
expect 0 "sent w@f1 to 127.0.0.1:$PORT_B \(full, resumed"
less_than_mib 120
same w@f1

# ---------------------------------------------------------------- interrupted pull
# 120 MiB changed; B's server is killed mid-stream and restarted.
head -c 120M /dev/urandom >"$TMPDIR_TEST/rnd"
nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///w?socket=$NBD_A" || fail "nbdcopy"
ca snapshot create w@f2 >/dev/null
"$CAIRN" --socket "$CTL_B" pull "127.0.0.1:$PORT_A" w --progress=none \
  >/dev/null 2>&1 &
CLIENT=$!
pace_until "$PID_A" "$CTL_B" $((50 * 1024 * 1024))
kill -9 "$PID_B"; wait "$PID_B" 2>/dev/null || true; PID_B=
kill -CONT "$PID_A"
rc=0; wait "$CLIENT" || rc=$?; CLIENT=
[ $rc -ne 0 ] || fail "the pull succeeded although B was killed"
start_server b
cb snapshot list w | grep -q f2 && fail "the interrupted pull made w@f2 visible"
cb receive --token w | grep -q cairn-resume || fail "no resume token on B after the restart"
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" w
expect 0 "received w@f2 from 127.0.0.1:$PORT_A \(incremental, resumed"
less_than_mib 90
same w@f2
same w@f1

# ---------------------------------------------------------------- jobs
# A send whose reader does not read until told (so that the send cannot
# finish, however slowly this machine finds the job): listed as a job,
# then cancelled.
( ca send w@f2 --from f1 |
  (while [ ! -e "$TMPDIR_TEST/drain" ]; do sleep 0.05; done; cat >/dev/null) ) \
  2>"$TMPDIR_TEST/err" &
CLIENT=$!
id=
for _ in $(seq 100); do
  id=$(ca job list --json | python3 -c 'import json, sys
j = [x for x in json.load(sys.stdin)["jobs"] if x["method"] == "stream.send"]
print(j[0]["job"] if j else "")')
  [ -n "$id" ] && break
  sleep 0.05
done
[ -n "$id" ] || fail "the send is not listed as a job"
run --socket "$CTL_A" job show "$id"
expect 0 "stream.send +w@f2"
run --socket "$CTL_A" job cancel "$id"
expect 0 "cancelling job $id"
touch "$TMPDIR_TEST/drain"
rc=0; wait "$CLIENT" || rc=$?; CLIENT=
grep -q "cancelled" "$TMPDIR_TEST/err" || fail "the cancelled send said: $(cat "$TMPDIR_TEST/err")"
run --socket "$CTL_A" job cancel "$id"
expect 3 "no job $id"
run --socket "$CTL_A" job list
expect 0 "no jobs are running"

# A pull whose source has stalled (stopped) is still cancelled at once;
# the same pull then resumes.  (Well over what the sockets and channels
# between the two can hold, some 30 MiB: B must not finish from buffers
# while A is stopped.)
head -c 160M /dev/urandom >"$TMPDIR_TEST/rnd"
nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///w?socket=$NBD_A" || fail "nbdcopy"
ca snapshot create w@f3 >/dev/null
"$CAIRN" --socket "$CTL_B" pull "127.0.0.1:$PORT_A" w --progress=none \
  >/dev/null 2>"$TMPDIR_TEST/err" &
CLIENT=$!
pace_until "$PID_A" "$CTL_B" $((20 * 1024 * 1024))
id=$(cb job list --json | python3 -c 'import json, sys
j = json.load(sys.stdin)["jobs"]
print(j[0]["job"] if j else "")')
[ -n "$id" ] || fail "the pull is no longer a job of B: $(cat "$TMPDIR_TEST/err"; kill -0 "$CLIENT" 2>/dev/null && echo "(its client still runs)")"
run --socket "$CTL_B" job cancel "$id"
expect 0 "cancelling job $id \(replicate.pull w\)"
for _ in $(seq 50); do kill -0 "$CLIENT" 2>/dev/null || break; sleep 0.1; done
kill -0 "$CLIENT" 2>/dev/null && fail "the cancelled pull still runs after 5 s"
rc=0; wait "$CLIENT" || rc=$?; CLIENT=
kill -CONT "$PID_A"
[ $rc -eq 1 ] || fail "the cancelled pull exited $rc"
grep -q "cancelled" "$TMPDIR_TEST/err" || fail "the cancelled pull said: $(cat "$TMPDIR_TEST/err")"
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" w
expect 0 "received w@f3 from .* \(incremental, resumed"
same w@f3

# ---------------------------------------------------------------- interrupted chain
# A push of two snapshots (64 MiB of changes each) killed in the second:
# run again, it sends only the rest of the second.
for s in f4 f5; do
  head -c 64M /dev/urandom >"$TMPDIR_TEST/rnd"
  nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///w?socket=$NBD_A" || fail "nbdcopy"
  ca snapshot create "w@$s" >/dev/null
done
"$CAIRN" --socket "$CTL_A" replicate w@f5 --to "127.0.0.1:$PORT_B" \
  --progress=none >/dev/null 2>&1 &
CLIENT=$!
pace_until "$PID_B" "$CTL_A" $((100 * 1024 * 1024))
kill -9 "$CLIENT"; wait "$CLIENT" 2>/dev/null || true; CLIENT=
for _ in $(seq 100); do [ "$(job_done "$CTL_A")" = 0 ] && break; sleep 0.1; done
[ "$(job_done "$CTL_A")" = 0 ] || fail "A's job outlived its client"
kill -CONT "$PID_B"
for _ in $(seq 100); do [ "$(job_done "$CTL_B")" = 0 ] && break; sleep 0.1; done
cb snapshot list w | grep -qw f4 || fail "the interrupted chain did not leave w@f4 on B"
cb snapshot list w | grep -qw f5 && fail "the interrupted chain made w@f5 visible"
run --socket "$CTL_A" replicate w@f5 --to "127.0.0.1:$PORT_B"
expect 0 "sent w@f5 to 127.0.0.1:$PORT_B \(incremental, resumed"
grep -q "sent w@f4" <<<"$out" && fail "the resumed chain sent w@f4 again: $out"
less_than_mib 56
same w@f4
same w@f5

fi   # interruptions

# ---------------------------------------------------------------- rollback
# A rollback keeps the volume's snapshots up to the one rolled back to, so
# replication goes on incrementally after it (issue #33).  On A: r@mon,
# r@tue, r@wed replicated to B; r rolled back to tue (wed and the old data
# kept as r-bad), written (256 KiB), snapshotted as thu.  The push of thu
# rolls B back from wed to tue (--rollback: B has a snapshot A set aside)
# and sends only the change, not the volume's 20 MiB.  Then B rolls back
# too, and a pull brings the next snapshot from the common one.
ca volume create r 64M >/dev/null || fail "volume create r"
head -c 20M /dev/urandom >"$TMPDIR_TEST/rnd"
nbdcopy "$TMPDIR_TEST/rnd" "nbd+unix:///r?socket=$NBD_A" || fail "nbdcopy r"
ca snapshot create r@mon >/dev/null
for s in tue:21 wed:22; do
  scribble r "${s#*:}" $((64 * 1024 * 1024))
  s=${s%:*}
  ca snapshot create "r@$s" >/dev/null
done
run --socket "$CTL_A" replicate r@wed --to "127.0.0.1:$PORT_B"
expect 0 "sent r@wed to 127.0.0.1:$PORT_B \(incremental"
run --socket "$CTL_A" volume rollback r@tue r-bad
expect 0
snaps=$(ca snapshot list r)
grep -qw tue <<<"$snaps" && grep -qw mon <<<"$snaps" ||
  fail "r lost its snapshots up to tue in the rollback: $snaps"
grep -qw wed <<<"$snaps" && fail "r kept wed, taken after tue: $snaps"
ca snapshot list r-bad | grep -qw wed || fail "r-bad does not have wed"
qemu-img compare -f raw -F raw "nbd+unix:///r@tue?socket=$NBD_A" \
  "nbd+unix:///r?socket=$NBD_A" >/dev/null || fail "r is not r@tue after the rollback"
qemu-img compare -f raw -F raw "nbd+unix:///r@wed?socket=$NBD_B" \
  "nbd+unix:///r-bad?socket=$NBD_A" >/dev/null || fail "r-bad is not what r was"
run --socket "$CTL_A" diff r@tue r-bad
expect 0 "of data"
qemu-io -f raw -c "write -P 0x5a 1M 256K" "nbd+unix:///r?socket=$NBD_A" \
  >/dev/null || fail "qemu-io on r"
ca snapshot create r@thu >/dev/null
run --socket "$CTL_A" replicate r@thu --to "127.0.0.1:$PORT_B"
expect 1 "\('wed'\) is not one of this server's"
run --socket "$CTL_A" replicate r@thu --to "127.0.0.1:$PORT_B" --rollback --json
expect 0 '"snapshot": "r@thu"'
python3 - "$out" <<'PY' || fail "replicate --rollback --json: $out"
import json, sys
s = json.loads(sys.argv[1])["sent"]
sys.exit(0 if len(s) == 1 and s[0]["data_bytes"] == 256 * 1024 and
         s[0]["discarded"] == {"base": "r@tue", "snapshots": ["r@wed"],
                               "snapshots_total": 1, "writes": False} else 1)
PY
snaps=$(cb snapshot list r)
grep -qw wed <<<"$snaps" && fail "B's r kept wed after the push with --rollback: $snaps"
same r@mon
same r@tue
same r@thu
same r
# The other side: B rolls back to tue (keeping thu as r-was), A takes fri;
# a pull brings fri from tue, incrementally, without --rollback.
run --socket "$CTL_B" volume rollback r@tue r-was
expect 0
qemu-io -f raw -c "write -P 0x6b 8M 128K" "nbd+unix:///r?socket=$NBD_A" \
  >/dev/null || fail "qemu-io on r"
ca snapshot create r@fri >/dev/null
run --socket "$CTL_B" pull "127.0.0.1:$PORT_A" r
expect 0 "received r@thu from 127.0.0.1:$PORT_A \(incremental stream, 256K of data\)"
expect 0 "received r@fri from 127.0.0.1:$PORT_A \(incremental stream, 128K of data\)"
grep -q "rolled back" <<<"$out" && fail "a pull without a rollback said: $out"
same r@thu
same r@fri
same r

# Both pools are clean after all this.
kill "$PID_A"; wait "$PID_A" || fail "nbdkit A did not exit cleanly"; PID_A=
kill "$PID_B"; wait "$PID_B" || fail "nbdkit B did not exit cleanly"; PID_B=
"$CAIRN" fsck "$POOL_A" --quiet || fail "fsck A"
"$CAIRN" fsck "$POOL_B" --quiet || fail "fsck B"
