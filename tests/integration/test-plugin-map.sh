#!/usr/bin/env bash
# Block status (base:allocation): `nbdinfo --map` shows holes where nothing
# was written and data where something was, at the engine's 4 KiB block
# granularity; zeroed and trimmed ranges turn back into holes, also after
# a restart; a snapshot keeps the map of its time.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require_nbdsh
require nbdinfo

M=$((1024 * 1024))
G=$((1024 * M))
make_pool 256M
testctl create vol1 16M
testctl create big 3G
start_plugin

# check_map EXPORT RUNS...: the merged map of EXPORT is exactly RUNS, each
# OFFSET:LENGTH:data|hole, covering the whole export.
check_map () {
  local export=$1
  shift
  nbdinfo --map --json "$(uri "$export")" >"$TMPDIR_TEST/map.json" || fail "nbdinfo --map $export"
  /usr/bin/env python3 - "$TMPDIR_TEST/map.json" "$@" <<'EOF' || { cat "$TMPDIR_TEST/map.json"; fail "map of $export"; }
import json, sys
runs = []
for e in json.load(open(sys.argv[1])):
    kind = {0: "data", 3: "hole"}.get(e["type"], "type%d" % e["type"])
    if runs and runs[-1][2] == kind and runs[-1][0] + runs[-1][1] == e["offset"]:
        runs[-1][1] += e["length"]
    else:
        runs.append([e["offset"], e["length"], kind])
want = [[int(o), int(l), k] for o, l, k in (a.split(":") for a in sys.argv[2:])]
if runs != want:
    sys.exit("map %s, want %s" % (runs, want))
print("map ok:", runs)
EOF
}

# A new volume is one hole.
check_map vol1 "0:$((16 * M)):hole"

# Writes make data, rounded out to whole 4 KiB blocks.
nbdsh -u "$(uri vol1)" -c "
h.pwrite(b'a' * 65536, $M)
h.pwrite(b'b' * 4096, 8 * $M + 100)     # spans two blocks
h.pwrite(b'c', 16 * $M - 1)             # the last byte
h.flush()
" || fail "writing vol1"
written=(
  "0:$M:hole" "$M:65536:data" "$((M + 65536)):$((7 * M - 65536)):hole"
  "$((8 * M)):8192:data" "$((8 * M + 8192)):$((8 * M - 8192 - 4096)):hole"
  "$((16 * M - 4096)):4096:data"
)
check_map vol1 "${written[@]}"

# The same map after a restart (it comes from the committed trees).
stop_plugin
testctl snapshot vol1 s1
start_plugin
check_map vol1 "${written[@]}"

# Zero and trim (aligned) punch holes again; the snapshot keeps its map.
nbdsh -u "$(uri vol1)" -c "
h.zero(65536, $M)
h.trim(4096, 8 * $M)
h.trim(4096, 16 * $M - 4096)
assert h.pread(65536, $M) == bytes(65536)
assert h.pread(4096, 8 * $M) == bytes(4096)
assert h.pread(200, 8 * $M + 4000) == bytes(96) + b'b' * 100 + bytes(4)
" || fail "zeroing and trimming vol1"
check_map vol1 \
  "0:$((8 * M + 4096)):hole" "$((8 * M + 4096)):4096:data" \
  "$((8 * M + 8192)):$((8 * M - 8192)):hole"
check_map vol1@s1 "${written[@]}"

# Trimming everything leaves one hole, and it stays one after a restart.
nbdsh -u "$(uri vol1)" -c "h.trim(16 * $M, 0, nbd.CMD_FLAG_FUA)" || fail "trimming all of vol1"
check_map vol1 "0:$((16 * M)):hole"
stop_plugin
start_plugin
check_map vol1 "0:$((16 * M)):hole"
nbdsh -u "$(uri vol1)" -c "assert h.pread(16 * $M, 0) == bytes(16 * $M)" || fail "vol1 reads as zeroes"

# A request for one extent (REQ_ONE) in the middle of a data run.
nbdsh --base-allocation -u "$(uri vol1@s1)" -c "
seen = []
def f(meta, off, entries, err):
    seen.append((off, list(entries)))
    return 0
h.block_status(4096, $M + 8192, f, nbd.CMD_FLAG_REQ_ONE)
off, entries = seen[0]
assert off == $M + 8192 and entries[1] == 0, seen
print('req_one:', seen)
" || fail "block status with REQ_ONE"

# A volume larger than one block status request the engine answers: the
# client sees the whole map all the same.
nbdsh -u "$(uri big)" -c "h.pwrite(b'x' * 8192, 2 * $G + 4096)" || fail "writing big"
check_map big "0:$((2 * G + 4096)):hole" "$((2 * G + 4096)):8192:data" \
  "$((2 * G + 12288)):$((G - 12288)):hole"
stop_plugin
echo PASS
