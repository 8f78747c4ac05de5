#!/usr/bin/env bash
# Exports: `nbdinfo --list` shows every volume and snapshot with its
# description and capabilities; a snapshot serves the volume's old state
# read-only and refuses writes; a volume flagged read-only, readonly=true
# and nbdkit -r serve read-only too; VOL@TIME names the newest snapshot
# or checkpoint taken at or before TIME; unknown and malformed names are
# refused and logged; the empty name is refused unless default-export= is
# set; -D cairn.verbose=1 logs requests.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh
require nbdinfo

nbdkit_env "$NBDKIT" --dump-plugin "$PLUGIN" | grep -qx "cairn_exports=yes" ||
  fail "--dump-plugin does not say cairn_exports=yes"

make_pool 256M
testctl create vol1 64M
testctl create tenant/db 1G
testctl create ro1 16M
testctl readonly ro1 on

# Write a pattern to vol1, snapshot it offline, then overwrite the start.
start_plugin
nbdsh -u "$(uri vol1)" -c 'h.pwrite(b"old!" * 1024, 0); h.pwrite(b"tail", 64 * 1024 * 1024 - 4)' ||
  fail "writing vol1"
stop_plugin
testctl snapshot vol1 s1
testctl clone vol1 c1
gen=$("$TESTCTL" list "$POOL" | awk '$1 == "vol1@s1" { print $4 }')
origin=$("$TESTCTL" list "$POOL" | awk '$1 == "c1" { print $5 }')
[ -n "$gen" ] && [ -n "$origin" ] || fail "no generations for vol1@s1 and c1"
start_plugin
nbdsh -u "$(uri vol1)" -c 'h.pwrite(b"new!" * 1024, 0, nbd.CMD_FLAG_FUA)' || fail "overwriting vol1"

# The list: names, descriptions, read-only flags, sizes.
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list.json" || fail "nbdinfo --list"
cat "$TMPDIR_TEST/list.json"
/usr/bin/env python3 - "$TMPDIR_TEST/list.json" <<'EOF' || fail "the export list is wrong"
import json, re, sys
exports = {e["export-name"]: e for e in json.load(open(sys.argv[1]))["exports"]}
assert sorted(exports) == ["c1", "ro1", "tenant/db", "vol1", "vol1@s1"], sorted(exports)
when = r"created \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$"
want = {
    "vol1": (r"^volume, 64M, " + when, False, 64 << 20),
    "c1": (r"^volume, 64M, " + when, False, 64 << 20),
    "tenant/db": (r"^volume, 1G, " + when, False, 1 << 30),
    "ro1": (r"^volume, read-only, 16M, " + when, True, 16 << 20),
    "vol1@s1": (r"^snapshot of vol1, read-only, 64M, " + when, True, 64 << 20),
}
for name, (desc, ro, size) in want.items():
    e = exports[name]
    assert re.match(desc, e["description"]), (name, e["description"])
    assert e["is_read_only"] == ro, (name, e["is_read_only"])
    assert e["export-size"] == size, (name, e["export-size"])
    assert "base:allocation" in e["contexts"], name
    # Read-only exports advertise no write, trim, zero or FUA (DESIGN 3).
    for cap in ("can_trim", "can_zero", "can_fua", "can_fast_zero"):
        assert e[cap] == (not ro), (name, cap, e[cap])
    for cap in ("can_flush", "can_multi_conn", "can_cache"):
        assert e[cap], (name, cap)
print("list ok")
EOF

# The snapshot holds vol1's state when it was taken, and refuses writes.
# (libnbd would refuse the write itself; it is told to send it.)
nbdsh -u "$(uri vol1@s1)" -c '
assert h.is_read_only()
assert h.pread(4096, 0) == b"old!" * 1024
assert h.pread(4, 64 * 1024 * 1024 - 4) == b"tail"
h.set_strict_mode(0)
for op in (lambda: h.pwrite(b"x" * 512, 0), lambda: h.zero(4096, 0),
           lambda: h.trim(4096, 0)):
    try:
        op()
    except nbd.Error as e:
        print("refused:", e)
        assert e.errno in ("EPERM", "EROFS"), e.errno
    else:
        raise SystemExit("a snapshot accepted a write")
assert h.pread(4096, 0) == b"old!" * 1024
h.flush()
' || fail "the snapshot export"
nbdsh -u "$(uri vol1)" -c 'assert h.pread(4096, 0) == b"new!" * 1024' || fail "vol1 after the snapshot"
# The same state by generation, VOL@#GEN ('#' is a URI fragment, so the
# name is set directly), read-only as well; and the generation a clone
# started from (a pin that is no snapshot).  The clone itself is writable
# and apart from vol1.
for g in "$gen" "$origin"; do
  nbdsh -c "
h.set_export_name('vol1@#$g')
h.connect_unix('$SOCK')
assert h.is_read_only()
assert h.pread(4096, 0) == b'old!' * 1024
" || fail "export vol1@#$g"
done
# A point in time, VOL@TIME: the newest snapshot or checkpoint taken at or
# before it (for any time from now on, the checkpoint of the commit that
# the FUA write above made: a new pool takes checkpoints); a time before
# every kept state, or one that is no date, is an unknown export.
nbdsh -c "
h.set_export_name('vol1@2099-12-31T23:59:59Z')
h.connect_unix('$SOCK')
assert h.is_read_only()
assert h.pread(4096, 0) == b'new!' * 1024
" || fail "export vol1@2099-12-31T23:59:59Z"
for bad in vol1@2000-01-01T00:00:00Z vol1@2026-02-30T00:00:00Z vol1@2026-12-01T00:00; do
  nbdsh -c "
h.set_export_name('$bad')
try:
    h.connect_unix('$SOCK')
except nbd.Error as e:
    print('refused:', e)
else:
    raise SystemExit('served')
" || fail "export '$bad' was served"
done
grep -q "volume 'vol1' has no snapshot or checkpoint taken at or before 2000-01-01T00:00:00Z" \
  "$NBDKIT_LOG" || fail "no 'no snapshot taken at or before' in the log"
nbdsh -u "$(uri c1)" -c '
assert not h.is_read_only()
assert h.pread(4096, 0) == b"old!" * 1024
h.pwrite(b"c1c1" * 1024, 0)
' || fail "the clone c1"
nbdsh -u "$(uri vol1)" -c 'assert h.pread(4096, 0) == b"new!" * 1024' || fail "vol1 after writing its clone"
nbdsh -u "$(uri ro1)" -c 'assert h.is_read_only()' || fail "ro1 is not read-only"
# Each export describes itself (NBD_INFO_DESCRIPTION) as the list does.
for e in vol1 vol1@s1 ro1 c1; do
  listed=$(/usr/bin/env python3 -c '
import json, sys
print(next(e["description"] for e in json.load(open(sys.argv[1]))["exports"]
           if e["export-name"] == sys.argv[2]))' "$TMPDIR_TEST/list.json" "$e")
  nbdinfo --json "$(uri "$e")" | grep -qF "\"description\": \"$listed\"" ||
    fail "$e describes itself other than as listed ('$listed'): $(nbdinfo "$(uri "$e")" | grep description)"
done

# Unknown and malformed names are refused, and the log says which.
for bad in nosuch vol1@nosuch 'vol1@@x' '/abs' 'a//b' "$(printf 'x%.0s' $(seq 300))"; do
  if nbdinfo "$(uri "$bad")" >/dev/null 2>&1; then
    fail "export '$bad' was served"
  fi
done
grep -q "unknown export 'nosuch'" "$NBDKIT_LOG" || fail "no 'unknown export' in the log"

# The empty name: refused without default-export=, with a helpful log.
if nbdinfo "nbd+unix:///?socket=$SOCK" >/dev/null 2>&1; then
  fail "the empty export name was served without default-export="
fi
grep -q "no default export: use one of 'c1', 'ro1', 'tenant/db', 'vol1'" "$NBDKIT_LOG" ||
  fail "no helpful 'no default export' message in the log"
stop_plugin

# default-export= serves that export for the empty name.
start_plugin default-export=vol1
nbdsh -u "nbd+unix:///?socket=$SOCK" -c '
assert h.get_size() == 64 * 1024 * 1024
assert not h.is_read_only()
assert h.pread(4096, 0) == b"new!" * 1024
' || fail "the default export vol1"
stop_plugin
start_plugin default-export=vol1@s1
nbdsh -u "nbd+unix:///?socket=$SOCK" -c '
assert h.is_read_only()
assert h.pread(4096, 0) == b"old!" * 1024
' || fail "the default export vol1@s1"
stop_plugin

# readonly=true and nbdkit -r: everything read-only, listed as such.
start_plugin readonly=true
nbdinfo --list --json "nbd+unix:///?socket=$SOCK" >"$TMPDIR_TEST/list-ro.json" || fail "nbdinfo --list (readonly=true)"
/usr/bin/env python3 - "$TMPDIR_TEST/list-ro.json" <<'EOF' || fail "readonly=true: the list is wrong"
import json, sys
for e in json.load(open(sys.argv[1]))["exports"]:
    assert e["is_read_only"], e["export-name"]
    assert "read-only" in e["description"], e
print("read-only list ok")
EOF
nbdsh -u "$(uri vol1)" -c '
assert h.is_read_only()
assert h.pread(4096, 0) == b"new!" * 1024
h.flush()
' || fail "vol1 with readonly=true"
stop_plugin
NBDKIT_OPTS=(-r)
start_plugin
nbdsh -u "$(uri vol1)" -c 'assert h.is_read_only()' || fail "vol1 with nbdkit -r"
stop_plugin

# -D cairn.verbose=1 logs each request.
NBDKIT_OPTS=(-v -D cairn.verbose=1)
start_plugin
nbdsh -u "$(uri vol1)" -c 'h.pread(512, 4096); h.pwrite(b"v" * 512, 8192, nbd.CMD_FLAG_FUA)' ||
  fail "vol1 with -D cairn.verbose=1"
grep -q "vol1: pread count=512 offset=4096" "$NBDKIT_LOG" || fail "no pread in the debug log"
grep -q "vol1: pwrite count=512 offset=8192 fua" "$NBDKIT_LOG" || fail "no pwrite in the debug log"
stop_plugin
echo PASS
