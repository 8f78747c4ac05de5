#!/usr/bin/env bash
# The online subcommands of cairn, run in-process on a stopped pool with
# --pool (the same method tables a server answers with): every subcommand
# as text and as --json, its mistakes and their exit codes (0 ok, 1
# failure, 2 usage, 3 not found), and what cairn says when no server
# answers on the control socket.  Data for diff and snapshot space is
# written through the plugin with nbdsh when it is available.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3

# Run cairn --pool $POOL with the arguments.
runp () {
  run --pool "$POOL" "$@"
}

# Run cairn --pool $POOL ARGS --json (stdout only) and check the Python
# expression $1 on its result, bound to j.
jcheck () {
  local expr=$1 json
  shift
  json=$("$CAIRN" --pool "$POOL" "$@" --json) || fail "cairn $* --json failed"
  python3 -c 'import json, sys
j = json.loads(sys.argv[1])
assert eval(sys.argv[2]), j' "$json" "$expr" || fail "cairn $* --json: not ($expr): $json"
}

# The catalog as JSON, to compare before and after a failed command.
catalog () {
  "$CAIRN" --pool "$POOL" volume list --snapshots --json
}

# A failed command ($@, run by runp) changed nothing.
unchanged () {
  local before after
  before=$(catalog)
  runp "$@"
  after=$(catalog)
  [ "$before" = "$after" ] || fail "the failed cairn $* changed the catalog"
}

make_pool 256M

# A pool nobody has read from yet: its cache has no hit rate to show (it
# said "100% hits" of nothing).
runp status
expect 0 "^cache +0B in 0 nodes, no reads yet$"

# ---------------------------------------------------------------- help
run help
expect 0
help=$out
for c in volume snapshot clone diff status; do
  grep -qE "^  $c +[a-z]" <<<"$help" || fail "cairn help does not list $c: $help"
done
run volume --help
expect 0 "^Usage: cairn volume SUBCOMMAND"
help=$out
for s in create list show delete rename resize set; do
  grep -qE "^  $s +[a-z]" <<<"$help" || fail "cairn volume --help does not list $s: $help"
  run volume "$s" --help
  expect 0 "^Usage: cairn volume $s"
done
run snapshot --help
expect 0 "^Usage: cairn snapshot SUBCOMMAND"
help=$out
for s in create list delete rename space; do
  grep -qE "^  $s +[a-z]" <<<"$help" || fail "cairn snapshot --help does not list $s: $help"
  run snapshot "$s" --help
  expect 0 "^Usage: cairn snapshot $s"
done
run help volume create
expect 0 "^Usage: cairn volume create NAME SIZE"
run help volume frob
expect 2 "'volume' has no subcommand 'frob'"
run volume
expect 2 "missing SUBCOMMAND"
run volume frob
expect 2 "unknown subcommand 'frob'"
for c in clone diff status; do
  run "$c" --help
  expect 0 "^Usage: cairn $c"
done

# ---------------------------------------------------------------- volume create / list / show
runp volume list
expect 0 "^no volumes"
jcheck 'j == {"volumes": [], "damaged": []}' volume list

runp volume create db 1G
expect 0 "^created volume db: 1G$"
jcheck 'j["name"] == "vm/disk0" and j["size"] == 10 << 30 and j["snapshot"] is None and j["origin"] is None and not j["readonly"] and j["ctime"].endswith("Z")' \
  volume create vm/disk0 10G
runp volume create vm/disk1 1.5G
expect 0 "^created volume vm/disk1: 1.5G$"

runp volume list
expect 0 "^NAME +SIZE +REFER +CREATED +RO +ORIGIN$"
grep -qE "^db +1G +0B +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +no +-$" <<<"$out" || fail "no row for db: $out"
grep -qE "^vm/disk0 +10G " <<<"$out" || fail "no row for vm/disk0: $out"
jcheck '[v["name"] for v in j["volumes"]] == ["db", "vm/disk0", "vm/disk1"]' volume list

runp volume show db
expect 0 "^name +db$"
grep -qE "^size +1G \(1073741824 bytes\)$" <<<"$out" || fail "no size in: $out"
grep -qE "^snapshots +-$" <<<"$out" || fail "no snapshots line in: $out"
jcheck 'j["name"] == "db" and j["snapshots"] == [] and j["clones"] == []' volume show db

# Mistakes: usage (2), engine refusals (1), not found (3); none changes
# anything.
unchanged volume create db 1G
expect 1 "cairn volume create: a volume named 'db' exists already"
unchanged volume create 'bad@name' 1G
expect 2 "contains '@'"
unchanged volume create x 1000
expect 2 "multiple of 512"
unchanged volume create x 10X
expect 2 "cairn volume create: SIZE: invalid size '10X'"
unchanged volume create x
expect 2 "cairn volume create: missing SIZE"
unchanged volume create
expect 2 "missing NAME"
unchanged volume create x 1G extra
expect 2 "unexpected argument 'extra'"
unchanged volume create x 1G --frobnicate
expect 2 "unrecognized option '--frobnicate'"
unchanged volume list --force
expect 2 "unrecognized option '--force'"
runp volume show nope
expect 3 "cairn volume show: no volume named 'nope'"

# ---------------------------------------------------------------- volume rename / resize / set
runp volume rename vm/disk1 vm/disk2
expect 0 "^renamed volume vm/disk1 to vm/disk2$"
jcheck 'j["name"] == "vm/disk1"' volume rename vm/disk2 vm/disk1
unchanged volume rename vm/disk1 db
expect 1 "exists already"
unchanged volume rename nope x
expect 3 "no volume named 'nope'"

runp volume resize db 2G
expect 0 "^resized volume db to 2G$"
unchanged volume resize db 1G
expect 2 "shrinking .* use --force$"
jcheck 'j["size"] == 1 << 30' volume resize db 1G --force
unchanged volume resize nope 1G
expect 3 "no volume named 'nope'"
unchanged volume resize db lots
expect 2 "invalid size 'lots'"

runp volume set db readonly=on
expect 0 "^volume db: readonly=on quota=none$"
runp volume list
grep -qE "^db +1G +0B +.* yes +-$" <<<"$out" || fail "db is not read-only: $out"
jcheck 'j["readonly"] is False' volume set db readonly=off
unchanged volume set db readonly=maybe
expect 2 "readonly must be 'on' or 'off', not 'maybe'"
unchanged volume set db compression=on
expect 2 "unknown property 'compression': set readonly, quota, a checkpoint setting"
unchanged volume set db readonly
expect 2 "'readonly' is not PROPERTY=VALUE"
unchanged volume set db
expect 2 "missing PROPERTY=VALUE"
unchanged volume set nope readonly=on
expect 3 "no volume named 'nope'"

# ---------------------------------------------------------------- data, through the plugin
have_data=no
if command -v nbdsh >/dev/null 2>&1; then
  PATH=/usr/bin:$PATH
  if nbdsh -c pass 2>/dev/null; then
    have_data=yes
  fi
fi
if [ $have_data = yes ]; then
  start_plugin
  nbdsh -u "$(uri db)" -c 'h.pwrite(b"\x01" * 12288, 0)' || fail "writing db"
  stop_plugin
fi

# ---------------------------------------------------------------- snapshots
runp snapshot create db@s1
expect 0 "^created snapshot db@s1$"
if [ $have_data = yes ]; then
  start_plugin
  nbdsh -u "$(uri db)" -c 'h.pwrite(b"\x02" * 4096, 4096); h.pwrite(b"\x03" * 4096, 65536); h.trim(4096, 8192)' || fail "writing db"
  stop_plugin
fi
# Several volumes at once: one generation.
jcheck '[s["name"] for s in j["snapshots"]] == ["db@s2", "vm/disk0@s2"] and j["snapshots"][0]["generation"] == j["snapshots"][1]["generation"]' \
  snapshot create db,vm/disk0 s2
runp snapshot list db
expect 0 "^NAME +SIZE +REFER +CREATED +RO +ORIGIN$"
grep -qE "^db@s1 +1G +.* yes +-$" <<<"$out" || fail "no db@s1 in: $out"
grep -qE "^db@s2 " <<<"$out" || fail "no db@s2 in: $out"
jcheck '[s["name"] for s in j["snapshots"]] == ["db@s1", "db@s2"] and all(s["readonly"] for s in j["snapshots"])' \
  snapshot list db
runp snapshot list vm/disk1
expect 0 "^volume vm/disk1 has no snapshots$"
runp volume list --snapshots
grep -qE "^vm/disk0@s2 " <<<"$out" || fail "no vm/disk0@s2 in: $out"
jcheck '[v["name"] for v in j["volumes"]] == ["db", "db@s1", "db@s2", "vm/disk0", "vm/disk0@s2", "vm/disk1"]' \
  volume list --snapshots
runp volume show db@s1
expect 0 "^name +db@s1$"
jcheck 'j["snapshots"] == ["db@s1", "db@s2"]' volume show db

unchanged snapshot create db@s1
expect 1 "has a snapshot named 's1' already"
unchanged snapshot create db,nope s3
expect 3 "no volume named 'nope'"
unchanged snapshot create db,,vm/disk0 s3
expect 2 "an empty volume name"
unchanged snapshot create db
expect 2 "'db' is not a snapshot: write VOL@SNAP"
unchanged snapshot create db s/3
expect 2 "may not contain '/'"
unchanged snapshot list nope
expect 3 "no volume named 'nope'"

runp snapshot rename db@s2 second
expect 0 "^renamed snapshot db@s2 to db@second$"
jcheck 'j["name"] == "db@s2"' snapshot rename db@second db@s2
unchanged snapshot rename db@s2 other@x
expect 2 "a snapshot stays with its volume"
unchanged snapshot rename db@s2 s1
expect 1 "already"
unchanged snapshot rename db@nope x
expect 3 "no snapshot named 'nope'"

# A new pool takes checkpoints: the one of s1's commit keeps s1's state
# while the policy keeps it (an hour), so deleting s1 alone would free
# nothing.  A policy of no checkpoints drops it; then s1's unique data is
# its own.
runp checkpoint set db keep-within=0
expect 0 "^db: checkpoints=on \(pool\), retention keep-within=0 \(volume\)$"
# How often the pool commits is the pool's setting, kept in the pool.
runp checkpoint set --default commit-interval=120
expect 0 ", commit-interval=2m \(pool\), space-threshold=5% \(default\)$"
runp checkpoint set --default space-threshold=12
expect 0 ", space-threshold=12% \(pool\)$"
runp checkpoint set --default space-threshold=60%
expect 2 "space-threshold '60%': give a share of the pool's space from 1% to 50%"
jcheck 'j["checkpoints"]["commit_interval_ms"] == 120000 and j["checkpoints"]["commit_interval_from"] == "pool"' status
runp status
grep -qE "^checkpoints +default on, a commit every 120 s \(pool\); " <<<"$out" ||
  fail "no commit interval in status: $out"
runp checkpoint set db commit-interval=10s
expect 2 "commit-interval is the pool's setting"
runp checkpoint set --default commit-interval=0
expect 2 "give a duration from 1s to 3600s"
runp checkpoint set --default commit-interval=inherit space-threshold=inherit
expect 0 ", commit-interval=5s \(default\), space-threshold=5% \(default\)$"
runp checkpoint prune db
expect 0 "^removed [0-9]+ checkpoints?, kept 0$"
runp snapshot space db@s1
expect 0 "^snapshot +db@s1$"
grep -qE "^unique +" <<<"$out" || fail "no unique in: $out"
jcheck 'set(j) == {"name", "referenced", "unique", "written_since"}' snapshot space db@s1
if [ $have_data = yes ]; then
  jcheck 'j["referenced"] == 12288 and j["written_since"] == 8192 and j["unique"] >= 4096' \
    snapshot space db@s1
fi
runp snapshot space db@nope
expect 3 "no snapshot named 'nope'"
runp snapshot space db
expect 2 "not a snapshot"

# ---------------------------------------------------------------- clone and diff
runp clone db@s1 dbclone
expect 0 "^created volume dbclone, a clone of db@s1$"
jcheck 'j["origin"] == "db@s1" and j["clones"] == []' volume show dbclone
jcheck 'j["clones"] == ["dbclone"]' volume show db@s1
jcheck 'j["name"] == "live" and j["origin"].startswith("db@#")' clone db live
unchanged clone db@nope x
expect 3 "no snapshot named 'nope'"
unchanged clone db dbclone
expect 1 "exists already"
runp volume list
grep -qE "^dbclone +1G .* no +db@s1$" <<<"$out" || fail "no origin for dbclone: $out"

runp diff db@s1 db@s2
expect 0
if [ $have_data = yes ]; then
  grep -qE "^OFFSET +LENGTH +TYPE$" <<<"$out" || fail "no diff header: $out"
  grep -qE "^4096 +4096 +data$" <<<"$out" || fail "no run at 4096: $out"
  grep -qE "^8192 +4096 +hole$" <<<"$out" || fail "no hole at 8192: $out"
  grep -qE "^65536 +4096 +data$" <<<"$out" || fail "no run at 65536: $out"
  grep -qE "^3 runs: 8K of data, 4K of holes$" <<<"$out" || fail "no summary: $out"
  jcheck 'j["runs"] == [{"offset": 4096, "length": 4096, "type": "data"}, {"offset": 8192, "length": 4096, "type": "hole"}, {"offset": 65536, "length": 4096, "type": "data"}] and j["truncated"] is False and j["data_bytes"] == 8192 and j["hole_bytes"] == 4096' \
    diff db@s1 db@s2
fi
runp diff db@s2 db
expect 0 "^0 runs: 0B of data, 0B of holes$"
runp diff db db@s1
expect 2 "live volume"
runp diff db@nope db
expect 3 "no snapshot named 'nope'"
runp diff db@s1
expect 2 "missing TO"

# ---------------------------------------------------------------- status
runp status
expect 0 "^uuid +[0-9a-f-]{36}$"
grep -qE "^volumes +5$" <<<"$out" || fail "not 5 volumes: $out"
grep -qE "^state +ok$" <<<"$out" || fail "not ok: $out"
grep -qE "^free runs +[1-9][0-9]* \(space map: [0-9.]+[BKMG] of memory\)$" <<<"$out" ||
  fail "no free runs line: $out"
grep -qE "^high water +[^ ]+ \([0-9]+ bytes\)$" <<<"$out" || fail "no high water line: $out"
jcheck 'j["volumes"] == 5 and j["snapshots"] == 3 and j["failed"] is False and j["size"] == 256 << 20 and j["used"] > 0' status
jcheck 'j["free_runs"] >= 1 and j["space_map_bytes"] >= 32 * j["free_runs"]' status
jcheck 'j["used"] <= j["high_water"] <= j["data_size"]' status
grep -qE "^cache +[^ ]+ in [0-9]+ nodes?, [0-9]+% hits$" <<<"$out" ||
  fail "no hit rate once the cache was used: $out"
runp status extra
expect 2 "unexpected argument 'extra'"

# ---------------------------------------------------------------- delete
unchanged volume delete db
expect 1 "has 2 snapshots: delete them first or use --recursive"
runp snapshot delete db@s2
expect 0 "^deleted snapshot db@s2$"
jcheck 'j is None' snapshot delete vm/disk0@s2
unchanged snapshot delete db@s2
expect 3 "no snapshot named 's2'"
unchanged snapshot delete db
expect 2 "not a snapshot"
runp volume delete db --recursive
expect 0 "^deleted volume db and its snapshots$"
# db's snapshot still feeds dbclone: db is gone, and dbclone's origin with
# it, but the clone's data is intact.
jcheck '[v["name"] for v in j["volumes"]] == ["dbclone", "live", "vm/disk0", "vm/disk1"]' volume list --snapshots
jcheck 'j["origin"] is None' volume show dbclone
runp volume delete db
expect 3 "no volume named 'db'"
runp volume delete db@s1
expect 2 "names a snapshot"
for v in dbclone live vm/disk0 vm/disk1; do
  runp volume delete "$v"
  expect 0 "^deleted volume $v$"
done
jcheck 'j["volumes"] == []' volume list --snapshots
run fsck "$POOL"
expect 0 "clean$"

# ---------------------------------------------------------------- where the pool is
run --pool "$TMPDIR_TEST/missing" volume list
expect 3 "$TMPDIR_TEST/missing: No such file or directory"
run --pool "$POOL" --socket "$TMPDIR_TEST/s" volume list
expect 2 "--pool and --socket exclude each other"
run --socket "$TMPDIR_TEST/s" info "$POOL"
expect 2 "--socket is for the commands that talk to a server"
if command -v flock >/dev/null 2>&1; then
  # A pool in use is not changed; reading needs only a shared lock.
  rc=0
  out=$(flock --exclusive "$POOL" "$CAIRN" --pool "$POOL" volume create x 1G 2>&1) || rc=$?
  args=(volume create, while locked)
  expect 1 "is in use by .*leave out --pool"
  rc=0
  out=$(flock --shared "$POOL" "$CAIRN" --pool "$POOL" volume list 2>&1) || rc=$?
  args=(volume list, while share-locked)
  expect 0 "^no volumes"
fi

# Properties, quota and rollback.
runp volume create props 16M
expect 0
runp volume set props quota=8M com.example:owner=alice readonly=on
expect 0 "^volume props: readonly=on quota=8M com.example:owner=alice$"
jcheck 'j["quota"] == 8 << 20 and j["properties"] == {"com.example:owner": "alice"} and j["readonly"]' volume show props
runp volume set props owner=bob
expect 2 "unknown property 'owner'"
runp volume set props quota=lots
expect 2 "quota must be a size"
runp volume set props com.example:owner= quota=none readonly=off
expect 0 "^volume props: readonly=off quota=none$"
runp volume set props com.example:owner=
expect 3 "has no property 'com.example:owner'"
runp snapshot create props@s1
expect 0
runp volume rollback props@s1 props-old
expect 0 "^rolled props back to props@s1; its previous state and later snapshots are now props-old$"
jcheck 'j["snapshots"] == ["props@s1"]' volume show props
jcheck 'j["origin"] == "props@s1" and j["snapshots"] == []' volume show props-old
runp volume rollback props@nope props-older
expect 3 "no snapshot named 'nope'"
runp volume rollback props props-older
expect 2 "is not VOL@SNAP"
runp volume rollback props@s1 props-old
expect 1 "exists already"
runp volume delete props-old
expect 0
runp volume delete props --recursive
expect 0

# No server: the message says how to start one, or to use --pool.
run --socket "$TMPDIR_TEST/nope.sock" volume list
expect 1 "^cairn: no server at $TMPDIR_TEST/nope.sock: start one with 'cairnd --pool PATH --control $TMPDIR_TEST/nope.sock' or use --pool PATH for a stopped pool$"
rc=0
out=$(CAIRN_SOCKET="$TMPDIR_TEST/env.sock" "$CAIRN" status 2>&1) || rc=$?
args=(status, with CAIRN_SOCKET)
expect 1 "^cairn: no server at $TMPDIR_TEST/env.sock: "
touch "$TMPDIR_TEST/not-a-socket"
run --socket "$TMPDIR_TEST/not-a-socket" volume list
expect 1 "^cairn: no server at $TMPDIR_TEST/not-a-socket"
if [ ! -e /run/cairn/control.sock ]; then
  rc=0
  out=$(env -u CAIRN_SOCKET "$CAIRN" volume list 2>&1) || rc=$?
  args=(volume list, default socket)
  expect 1 "^cairn: no server at /run/cairn/control.sock: start one with 'cairnd --pool PATH' or use --pool PATH for a stopped pool$"
fi
# ---------------------------------------------------------------- receive
# A received volume is as old as the snapshot it was made from: the
# receive starts a second (or more) after the snapshot was taken, and the
# volume's creation time was the receive's.
POOL_R="$TMPDIR_TEST/pool-r"
"$CAIRN" mkpool "$POOL_R" --size 64M >/dev/null || fail "mkpool $POOL_R"
runp volume create rv 1M
expect 0
runp snapshot create rv@s
expect 0
then=$(date +%s)
while [ "$(date +%s)" = "$then" ]; do sleep 0.05; done
"$CAIRN" --pool "$POOL" send rv@s | "$CAIRN" --pool "$POOL_R" receive rv >/dev/null ||
  fail "send rv@s | receive rv"
vtime=$("$CAIRN" --pool "$POOL_R" volume show rv --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["ctime"])')
stime=$("$CAIRN" --pool "$POOL_R" volume show rv@s --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["ctime"])')
[ "$vtime" = "$stime" ] || fail "received rv created at $vtime, its snapshot rv@s at $stime"
echo PASS
