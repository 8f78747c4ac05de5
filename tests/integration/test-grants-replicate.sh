#!/usr/bin/env bash
# Replication between two servers with grants (cairn-grants(5), REPLICATION
# BETWEEN SERVERS).  Server A's jobs connect to server B as A's own TLS PSK
# identity (control-tls-username=), and B judges that identity by its own
# grants, which give it send and receive on tenant-a/ only:
#  - a push and a pull of volumes under tenant-a/ work, full and
#    incremental, and the copies equal their sources;
#  - a push or pull of a volume outside tenant-a/ fails exactly as for a
#    name B does not have (names nothing), and changes nothing on B;
#  - the identity can do nothing else on B (no delete, no snapshot, sees
#    only tenant-a/);
#  - an identity with send but not receive pulls but cannot push;
#  - on A, a tenant replicates only what A's grants let it.
# B's audit trail names the identity of each job.
. "$top_srcdir/tests/integration/grants-functions.sh"
require openssl
require qemu-io
require qemu-img
require python3

POOL_A="$TMPDIR_TEST/pool-a" POOL_B="$TMPDIR_TEST/pool-b"
NBD_A="$TMPDIR_TEST/a.nbd" NBD_B="$TMPDIR_TEST/b.nbd"
CTL_A="$TMPDIR_TEST/a.ctl" CTL_B="$TMPDIR_TEST/b.ctl"
KEYS="$TMPDIR_TEST/keys.psk" ALICE="$TMPDIR_TEST/alice.psk"
GRANTS_A="$TMPDIR_TEST/grants-a" GRANTS_B="$TMPDIR_TEST/grants-b"
trap 'rc=$?; for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done; (exit $rc); cleanup' EXIT
PORT_A=$(free_port) PORT_B=$(free_port)

# One PSK file for both servers: each knows every identity's key, and A
# connects as the one control-tls-username= names.
for who in repl-a sendonly alice; do
  echo "$who:$(openssl rand -hex 32)"
done >"$KEYS"
grep "^alice:" "$KEYS" >"$ALICE"
cat >"$GRANTS_A" <<'EOF'
psk:alice tenant-a/ control=list,snapshot,replicate
EOF
cat >"$GRANTS_B" <<'EOF'
psk:repl-a   tenant-a/ control=send,receive
psk:sendonly tenant-a/ control=send
EOF

# server NAME POOL NBD CTL GRANTS PARAMS...: nbdkit with the plugin and
# the PSK file, its pid in PID_<NAME>; returns once both sockets are there.
server () {
  local name=$1 pool=$2 nbd=$3 ctl=$4 grants=$5
  shift 5
  rm -f "$nbd" "$ctl"
  echo "=== server $name $*" >>"$NBDKIT_LOG"
  nbdkit_exec "$NBDKIT" --foreground --unix "$nbd" "$PLUGIN" pool="$pool" \
    control="$ctl" control-tls-psk="$KEYS" grants="$grants" "$@" \
    >>"$NBDKIT_LOG" 2>&1 &
  printf -v "PID_$name" %s "$!"
  wait_for_sockets "$!" "nbdkit $name" "$NBDKIT_LOG" "$nbd" "$ctl"
}
start_a () {
  server A "$POOL_A" "$NBD_A" "$CTL_A" "$GRANTS_A" \
    control-tcp="127.0.0.1:$PORT_A" control-tls-username="$1"
}
# Run cairn, bounded; status in rc, stdout+stderr in out.
run () {
  args=("$@")
  rc=0
  out=$(timeout -s KILL 120 "$CAIRN" "$@" 2>&1) || rc=$?
}
a () { "$CAIRN" --socket "$CTL_A" "$@" >/dev/null || fail "on A: cairn $*"; }
b () { "$CAIRN" --socket "$CTL_B" "$@" >/dev/null || fail "on B: cairn $*"; }
# Write $3 MiB of byte $4 at MiB $2 of export $1 on NBD socket $5.
fill () {
  qemu-io -f raw -c "write -P $4 $(( $2 * 1048576 )) $(( $3 * 1048576 ))" \
    "nbd+unix:///$1?socket=$5" >/dev/null || fail "writing to $1"
}
same () {
  qemu-img compare -f raw -F raw "nbd+unix:///$1?socket=$NBD_A" \
    "nbd+unix:///$1?socket=$NBD_B" >/dev/null || fail "$1 differs between A and B"
}
snapshots_on_b () {
  "$CAIRN" --socket "$CTL_B" snapshot list "$1" 2>/dev/null | awk 'NR > 1 {print $1}' | sort | tr '\n' ' '
}

"$CAIRN" mkpool "$POOL_A" --size 512M >/dev/null || fail "mkpool A"
"$CAIRN" mkpool "$POOL_B" --size 512M >/dev/null || fail "mkpool B"
start_a repl-a
server B "$POOL_B" "$NBD_B" "$CTL_B" "$GRANTS_B" control-tcp="127.0.0.1:$PORT_B"

# The operators (this user on each Unix socket) set up both servers.
a volume create tenant-a/v 32M
fill tenant-a/v 0 8 0x61 "$NBD_A"
a snapshot create tenant-a/v@s1
# snapped a|b VOL...: empty volumes with a snapshot s1, on A or B.
snapped () {
  local on=$1 v
  shift
  for v; do "$on" volume create "$v" 16M; "$on" snapshot create "$v@s1"; done
}
snapped a tenant-b/v tenant-b/u
b volume create tenant-a/w 16M
fill tenant-a/w 2 4 0x77 "$NBD_B"
b snapshot create tenant-a/w@s1
snapped b tenant-b/v tenant-b/x

# Within the prefix: a full push, an incremental one, a pull.
run --socket "$CTL_A" replicate tenant-a/v@s1 --to "127.0.0.1:$PORT_B" --progress none
[ "$rc" -eq 0 ] || fail "push of tenant-a/v@s1: $out"
same tenant-a/v@s1
fill tenant-a/v 16 4 0x62 "$NBD_A"
a snapshot create tenant-a/v@s2
run --socket "$CTL_A" replicate tenant-a/v@s2 --to "127.0.0.1:$PORT_B" --progress none
[ "$rc" -eq 0 ] || fail "push of tenant-a/v@s2: $out"
grep -q "incremental" <<<"$out" || fail "the second push was not incremental: $out"
same tenant-a/v@s2
run --socket "$CTL_A" pull "127.0.0.1:$PORT_B" tenant-a/w --progress none
[ "$rc" -eq 0 ] || fail "pull of tenant-a/w: $out"
same tenant-a/w@s1

# Outside the prefix: B has tenant-b/v, not tenant-b/u; both pushes fail
# alike, and B is unchanged.
before=$(snapshots_on_b tenant-b/v)
run --socket "$CTL_A" replicate tenant-b/v@s1 --to "127.0.0.1:$PORT_B" --progress none
same_as_missing tenant-b/v tenant-b/u \
  run --socket "$CTL_A" replicate tenant-b/u@s1 --to "127.0.0.1:$PORT_B" --progress none
grep -qi "forbidden" <<<"$out" && fail "the refusal says forbidden: $out"
[ "$(snapshots_on_b tenant-b/v)" = "$before" ] || fail "B's tenant-b/v changed"
"$CAIRN" --socket "$CTL_B" volume show tenant-b/u >/dev/null 2>&1 &&
  fail "a refused push made tenant-b/u on B"
# B has tenant-b/x, not tenant-b/ghost; both pulls fail alike, and A
# makes nothing.
run --socket "$CTL_A" pull "127.0.0.1:$PORT_B" tenant-b/x --progress none
same_as_missing tenant-b/x tenant-b/ghost \
  run --socket "$CTL_A" pull "127.0.0.1:$PORT_B" tenant-b/ghost --progress none
"$CAIRN" --socket "$CTL_A" volume show tenant-b/x >/dev/null 2>&1 &&
  fail "a refused pull made tenant-b/x on A"

# The identity may send and receive under tenant-a/ on B, and nothing more.
as_repl () {
  run --connect "127.0.0.1:$PORT_B" --tls-psk "$KEYS" --tls-username repl-a "$@"
}
as_repl volume list
[ "$rc" -eq 0 ] || fail "repl-a cannot list on B: $out"
grep -q "tenant-b" <<<"$out" && fail "repl-a sees outside its prefix: $out"
as_repl volume delete tenant-a/v
[ "$rc" -ne 0 ] || fail "repl-a deleted a volume on B"
grep -q "not permitted.*psk:repl-a.*'delete'" <<<"$out" || fail "delete as repl-a: $out"
as_repl snapshot create tenant-a/v@mine
[ "$rc" -ne 0 ] || fail "repl-a made a snapshot on B"
b volume show tenant-a/v

# B's audit trail names the job's identity.
audit_has "$CTL_B" "psk:repl-a stream.receive tenant-a/v ok" \
  "psk:repl-a stream.receive tenant-b/v failed (permission)" \
  "psk:repl-a volume.delete tenant-a/v failed (permission)"

# On A, alice may replicate her own volumes only (A's grants).
run --connect "127.0.0.1:$PORT_A" --tls-psk "$ALICE" replicate tenant-b/v@s1 \
  --to "127.0.0.1:$PORT_B" --progress none
[ "$rc" -ne 0 ] || fail "alice replicated tenant-b/v from A"
grep -q "no volume named 'tenant-b/v'" <<<"$out" || fail "alice, tenant-b/v: $out"
a snapshot create tenant-a/v@s3
run --connect "127.0.0.1:$PORT_A" --tls-psk "$ALICE" replicate tenant-a/v@s3 \
  --to "127.0.0.1:$PORT_B" --progress none
[ "$rc" -eq 0 ] || fail "alice's push of tenant-a/v@s3: $out"
same tenant-a/v@s3

# An identity with send but not receive: A restarted as sendonly pulls,
# and cannot push.
stop_server "$PID_A"
start_a sendonly
fill tenant-a/v 20 1 0x63 "$NBD_A"
a snapshot create tenant-a/v@s4
run --socket "$CTL_A" replicate tenant-a/v@s4 --to "127.0.0.1:$PORT_B" --progress none
[ "$rc" -ne 0 ] || fail "sendonly pushed"
grep -q "not permitted: the grants give psk:sendonly no 'receive' on 'tenant-a/v'" <<<"$out" ||
  fail "push as sendonly: $out"
[ "$(snapshots_on_b tenant-a/v)" = "$(echo tenant-a/v@s1 tenant-a/v@s2 tenant-a/v@s3) " ] ||
  fail "B's tenant-a/v has $(snapshots_on_b tenant-a/v)"
fill tenant-a/w 8 2 0x78 "$NBD_B"
b snapshot create tenant-a/w@s2
run --socket "$CTL_A" pull "127.0.0.1:$PORT_B" tenant-a/w --progress none
[ "$rc" -eq 0 ] || fail "pull as sendonly: $out"
same tenant-a/w@s2
stop_server "$PID_A"

# The identity must be in the PSK file, and needs one.
msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground --unix "$NBD_A" \
      "$PLUGIN" pool="$POOL_A" control="$CTL_A" control-tls-psk="$KEYS" \
      control-tls-username=nobody 2>&1) && fail "nbdkit started as an unknown identity"
grep -q "control-tls-username=nobody: PSK file .* has no key for user 'nobody'" <<<"$msg" ||
  fail "unknown identity: $msg"
msg=$(nbdkit_env timeout -s KILL 20 "$NBDKIT" --foreground --unix "$NBD_A" \
      "$PLUGIN" pool="$POOL_A" control="$CTL_A" control-tls-username=x 2>&1) &&
  fail "nbdkit took control-tls-username= without a PSK file"
grep -q "needs control-tls-psk=FILE" <<<"$msg" || fail "username without PSK file: $msg"
run_d () { args=(cairnd "$@"); rc=0; out=$("$CAIRND" "$@" 2>&1) || rc=$?; }
run_d --pool "$POOL_A" --tls-psk "$KEYS" --tls-username repl-a --control-tcp "$PORT_A" -n
[ "$rc" -eq 0 ] && grep -q " control-tls-psk=$KEYS control-tls-username=repl-a\$" <<<"$out" ||
  fail "cairnd --tls-username: $out"
run_d --pool "$POOL_A" --tls-username repl-a -n
[ "$rc" -eq 2 ] && grep -q "needs --tls-psk" <<<"$out" || fail "cairnd --tls-username alone: $out"
stop_server "$PID_B"
echo "PASS"
