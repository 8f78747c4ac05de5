#!/usr/bin/env bash
# I/O statistics per export (stats.list, stats.show, `cairn stats`, the
# "io" of pool.status) on a running server: every counter goes up by
# exactly what an NBD client did, for a volume, a snapshot (by name and by
# generation: one export), while the connection is open and after it
# closed; a checksum failure counts as an error and a checksum error; a
# renamed volume keeps its statistics, a deleted one is marked; unknown
# exports, --pool and bad params fail with the documented exit codes.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require python3
require_nbdsh

CTL="$TMPDIR_TEST/control.sock"
cairn_s () { "$CAIRN" --socket "$CTL" "$@"; }

# Check the Python expression $1 (j bound to the JSON) on cairn ARGS --json.
jcheck () {
  local expr=$1 json
  shift
  json=$(cairn_s "$@" --json) || fail "cairn $* --json failed"
  python3 -c 'import json, sys
j = json.loads(sys.argv[1])
assert eval(sys.argv[2]), j' "$json" "$expr" || fail "cairn $* --json: not ($expr): $json"
}

# Counters of stats.show $1, as "key=value ..." for the keys after it.
counters () {
  local export=$1
  shift
  cairn_s stats "$export" --json | python3 -c 'import json, sys
j = json.load(sys.stdin)
print(" ".join("%s=%d" % (k, j[k]) for k in sys.argv[1:]))' "$@"
}

make_pool 512M
testctl create v 256M
start_plugin control="$CTL"
for _ in $(seq 100); do [ -S "$CTL" ] && break; sleep 0.1; done
[ -S "$CTL" ] || fail "no control socket at $CTL"

# ---------------------------------------------------------------- nothing yet
run --socket "$CTL" stats
expect 0 "no NBD client has used an export since the server started"
jcheck 'j["exports"] == [] and all(v == 0 for v in j["total"].values())' stats
jcheck 'j["name"] == "v" and j["connections"] == 0 and j["reads"] == 0 and not j["gone"]' stats v
jcheck 'j["io"]["bytes_written"] == 0 and j["io"]["reads"] == 0' status

# ---------------------------------------------------------------- errors
run --socket "$CTL" stats nosuch
expect 3 "no volume named 'nosuch'"
run --socket "$CTL" stats v@nosnap
expect 3 "has no snapshot named 'nosnap'"
run --socket "$CTL" stats v w
expect 2 "unexpected argument 'w'"
run --socket "$CTL" stats --bogus
expect 2
run --pool "$POOL" stats
expect 2 "exist only in a running server.*leave out --pool"
run --socket "$CTL" stats --help
expect 0 "^Usage: cairn stats \[EXPORT\]"

# ---------------------------------------------------------------- exact counts
# Every kind of request, counted while the connection is still open (the
# live counters) and again after it closed (the folded ones).  The zero of
# 128 MiB is more than one engine call: it still counts as one request.
URI=$(uri v) CAIRN_BIN="$CAIRN" CTL="$CTL" nbdsh -c '
import json, os, subprocess
h.add_meta_context("base:allocation")
h.connect_uri(os.environ["URI"])
h.pwrite(b"\x11" * 4096, 0)
h.pwrite(b"\x22" * 8192, 4096)
h.pwrite(b"\x33" * 100, 20000)
h.pread(8192, 0)
h.pread(4096, 12288)
h.pread(10, 20000)
h.trim(4096, 65536)
h.zero(4096, 131072)
h.zero(128 << 20, 64 << 20)
h.flush()
h.block_status(1 << 20, 0, lambda *a: 0)
h.cache(8192, 0)
s = json.loads(subprocess.check_output(
    [os.environ["CAIRN_BIN"], "--socket", os.environ["CTL"], "stats", "v", "--json"]))
want = dict(connections=1, bytes_written=4096 + 8192 + 100, writes=3,
            bytes_read=8192 + 4096 + 10, reads=3, trims=1, zeros=2, flushes=1,
            extents=1, caches=1, errors=0, checksum_errors=0)
bad = {k: (s[k], v) for k, v in want.items() if s[k] != v}
assert not bad, "live counters (got, want): %r" % bad
' || fail "the live counters of v are not what the client did"
# nbdkit closes the handle a moment after the client has gone.
want_closed="connections=0 bytes_written=12388 writes=3 bytes_read=12298 reads=3 trims=1 zeros=2 flushes=1 extents=1 caches=1 errors=0 checksum_errors=0"
for _ in $(seq 50); do
  [ "$(counters v connections bytes_written writes bytes_read reads trims zeros flushes extents caches errors checksum_errors)" = "$want_closed" ] && break
  sleep 0.1
done
[ "$(counters v connections bytes_written writes bytes_read reads trims zeros flushes extents caches errors checksum_errors)" = "$want_closed" ] ||
  fail "the counters of v after the connection closed: $(cairn_s stats v --json)"

# A second connection adds to the same export.
nbdsh -u "$(uri v)" -c 'h.pread(4096, 0); h.pwrite(b"\x44" * 4096, 1 << 20)'
[ "$(counters v reads bytes_read writes bytes_written)" = \
  "reads=4 bytes_read=16394 writes=4 bytes_written=16484" ] ||
  fail "a second connection did not add up: $(cairn_s stats v --json)"

# ---------------------------------------------------------------- snapshots
cairn_s snapshot create v@s1 >/dev/null || fail "snapshot create"
gen=$(cairn_s volume show v@s1 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["generation"])')
nbdsh -u "$(uri v@s1)" -c 'h.pread(4096, 0); h.pread(4096, 4096)'
nbdsh -u "$(uri "v@%23$gen")" -c 'h.pread(8192, 0)'
[ "$(counters v@s1 reads bytes_read writes)" = "reads=3 bytes_read=16384 writes=0" ] ||
  fail "the snapshot's counters (by name and by generation): $(cairn_s stats v@s1 --json)"
[ "$(counters "v@#$gen" reads)" = "reads=3" ] || fail "stats.show v@#$gen is not the snapshot's"
jcheck '[x["name"] for x in j["exports"]] == ["v", "v@s1"]' stats
[ "$(counters v reads)" = "reads=4" ] || fail "reads of the snapshot counted on the volume"

# ---------------------------------------------------------------- checksums
# Damage the data of block 256 (1 MiB) on disk: the read fails with EIO and
# counts one error and one checksum error, and nothing else.  The damage is
# made on the disk and the page leaves the host's cache, as when a disk rots
# a block: a copy the cache holds and the server checked is not checked
# again (nbdkit-cairn-plugin(1), verify=).
damage_pool_block $((0x44))
drop_page_cache "$POOL"
before=$(counters v reads bytes_read)
if nbdsh -u "$(uri v)" -c 'h.pread(4096, 1 << 20)' 2>/dev/null; then
  fail "reading a damaged block succeeded"
fi
[ "$(counters v errors checksum_errors)" = "errors=1 checksum_errors=1" ] ||
  fail "a checksum failure was not counted: $(cairn_s stats v --json)"
[ "$(counters v reads bytes_read)" = "$before" ] || fail "a failed read counted as a read"

# ---------------------------------------------------------------- totals
json=$(cairn_s stats --json)
status=$(cairn_s status --json)
python3 -c 'import json, sys
s, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for k, v in s["total"].items():
    assert v == sum(x[k] for x in s["exports"]), k
assert p["io"] == s["total"], (p["io"], s["total"])
assert s["total"]["checksum_errors"] == 1' "$json" "$status" ||
  fail "totals do not add up: $json / $status"

# The table: sizes in units, a row per export and a total.
run --socket "$CTL" stats
expect 0 "^EXPORT +READ +WRITTEN +READS +WRITES"
grep -qE '^v +16K +16\.1K +4 +4 +1 +2 +1 +1 +1 +1 +1$' <<<"$out" || fail "no row for v: $out"
grep -qE '^v@s1 +16K +0B +3 ' <<<"$out" || fail "no row for v@s1: $out"
grep -qE '^TOTAL +32K +16\.1K +7 +4 ' <<<"$out" || fail "no total row: $out"
run --socket "$CTL" status
expect 0 "^io +32K read, 16\.1K written, 1 failed requests \(1 checksum\)"
run --socket "$CTL" stats v
expect 0 "^read +16K \(16394 bytes\) in 4 requests"
grep -qE '^checksum err +1$' <<<"$out" || fail "no checksum line: $out"

# ---------------------------------------------------------------- rename, delete
cairn_s volume rename v w >/dev/null || fail "volume rename"
jcheck '[x["name"] for x in j["exports"]] == ["w", "w@s1"] and j["exports"][0]["reads"] == 4' stats
cairn_s volume delete w --recursive >/dev/null || fail "volume delete"
jcheck '[(x["name"], x["gone"]) for x in j["exports"]] == [("w", True), ("w@s1", True)]' stats
jcheck 'j["total"]["reads"] == 7' stats
run --socket "$CTL" stats
expect 0 "^w \(deleted\) "
run --socket "$CTL" stats w
expect 3 "no volume named 'w'"

# Bad params over the socket: invalid-params, and the server keeps serving.
python3 - "$CTL" <<'EOF' || fail "bad stats params were not refused"
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
f = s.makefile("rw")
for params in ({"export": 5}, {}, {"nope": "v"}):
    f.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stats.show", "params": params}) + "\n")
    f.flush()
    r = json.loads(f.readline())
    assert r["error"]["code"] == -32602, r
f.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "stats.list", "params": {"x": 1}}) + "\n")
f.flush()
r = json.loads(f.readline())
assert r["error"]["code"] == -32602, r
EOF
cairn_s stats >/dev/null || fail "the server stopped answering after bad params"
stop_plugin
