#!/usr/bin/env bash
# The user's case of continuous checkpoints (issue #27), end to end with
# real clients: ext4 on a volume attached with nbdfuse, files written and
# synced, the time noted after a commit that holds them, then `rm -rf` of
# a directory and a sync; the export VOL@TIME from before the removal,
# attached read-only through a second nbdfuse, checks clean with e2fsck
# and holds the files as written.  `cairn checkpoint list` shows that
# checkpoint (kept by the open client), `prune --dry-run` keeps it,
# `checkpoint promote VOL@TIME NAME` makes it a snapshot, and after a
# restart the snapshot holds the same files.  Needs root, /dev/fuse and
# loop devices; skipped where the machine does not allow them (as
# test-plugin-fs.sh).
#
# The filesystem is frozen (fsfreeze) for the commit whose time is noted,
# as a guest agent freezes it for a backup: ext4 then writes its journal
# home and marks itself clean, so that the read-only checkpoint needs no
# journal replay (a read-only export cannot replay one; a checkpoint taken
# while ext4 runs is crash-consistent, and mounting it needs a writable
# overlay).
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdfuse
require nbdinfo
require mkfs.ext4
require e2fsck
require fusermount3
require losetup
require fsfreeze
require python3
[ "$(id -u)" -eq 0 ] || skip "mounting needs root"
[ -c /dev/fuse ] || skip "no /dev/fuse"
losetup -f >/dev/null 2>&1 || skip "no free loop device"

FUSE="$TMPDIR_TEST/fuse"          # the live volume
MNT="$TMPDIR_TEST/mnt"
OLD="$TMPDIR_TEST/fuse-old"       # the checkpoint, then the snapshot
OLDMNT="$TMPDIR_TEST/mnt-old"
CTL="$TMPDIR_TEST/control.sock"
mkdir -p "$FUSE" "$MNT" "$OLD" "$OLDMNT"

# Unmount whatever is mounted (filesystems first), then functions.sh's
# cleanup with the test's exit status.
fs_cleanup () {
  local m
  fsfreeze -u "$MNT" 2>/dev/null
  for m in "$MNT" "$OLDMNT"; do
    if mountpoint -q "$m"; then umount "$m" || umount -l "$m"; fi
  done
  for m in "$FUSE" "$OLD"; do
    if mountpoint -q "$m"; then fusermount3 -u "$m" || fusermount3 -uz "$m"; fi
  done
}
trap 'rc=$?; set +e; fs_cleanup; (exit $rc); cleanup' EXIT

# cairn on the running server.
cairnc () {
  "$CAIRN" --socket "$CTL" "$@"
}

# The generation of vol1's newest checkpoint (0: none).
newest_checkpoint () {
  cairnc checkpoint list vol1 --json |
    python3 -c 'import json, sys
print(max([c["generation"] for c in json.load(sys.stdin)["checkpoints"]], default=0))' ||
    fail "cairn checkpoint list vol1 --json"
}

make_pool 1G
testctl create vol1 128M
start_plugin control="$CTL" commit-interval=200
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"

# Format, mount, fill: a directory to keep and one to lose.
fuse_attach "$FUSE" vol1
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$FUSE/nbd" ||
  fail "mkfs.ext4 on vol1"
mount -o loop "$FUSE/nbd" "$MNT" || skip "cannot mount through a loop device here"
mkdir "$MNT/keep" "$MNT/doomed"
cp -r "$top_srcdir/man" "$MNT/keep/man"
cp -r "$top_srcdir/engine" "$MNT/doomed/engine"
head -c 8M /dev/urandom >"$TMPDIR_TEST/random.bin"
cp "$TMPDIR_TEST/random.bin" "$MNT/doomed/random.bin"
(cd "$MNT" && find keep doomed -type f -print0 | sort -z | xargs -0 sha256sum) >"$TMPDIR_TEST/before.sums"
[ "$(wc -l <"$TMPDIR_TEST/before.sums")" -gt 50 ] || fail "too few files written"
sync -f "$MNT"

# Freeze: the flush at its end reaches the plugin, whose commit is a
# checkpoint of the clean filesystem.  The time is noted once that
# checkpoint exists; the filesystem thaws only in the next second, so
# that every later checkpoint is after the noted time.
before=$(newest_checkpoint)
fsfreeze -f "$MNT"
frozen=$(newest_checkpoint)
[ "$frozen" -gt "$before" ] || fail "the freeze made no checkpoint (newest $before, then $frozen)"
T=$(date -u +%Y-%m-%dT%H:%M:%SZ)
while [ "$(date -u +%Y-%m-%dT%H:%M:%SZ)" = "$T" ]; do sleep 0.05; done
fsfreeze -u "$MNT"
echo "checkpoint vol1@#$frozen, noted time $T"

# The accident, synced: a newer checkpoint holds it.
rm -rf "$MNT/doomed"
sync -f "$MNT"
after=$(newest_checkpoint)
[ "$after" -gt "$frozen" ] || fail "the removal made no checkpoint after vol1@#$frozen"
[ ! -e "$MNT/doomed" ] || fail "rm -rf left the directory"

# VOL@TIME is the frozen checkpoint: the newest at or before T.
nbdinfo --json "$(uri "vol1@$T")" >"$TMPDIR_TEST/info.json" || fail "nbdinfo vol1@$T"
python3 - "$TMPDIR_TEST/info.json" "$frozen" <<'PY' || fail "vol1@$T is not vol1@#$frozen"
import json, sys
e = json.load(open(sys.argv[1]))["exports"][0]
assert e["is_read_only"], e
assert e["export-size"] == 128 << 20, e
assert e["description"].startswith("checkpoint #%s of vol1, read-only, 128M, taken " % sys.argv[2]), e["description"]
PY

# Attached read-only beside the live one: clean, and the files are there.
fuse_attach "$OLD" "vol1@$T" -r
e2fsck -fn "$OLD/nbd" || fail "e2fsck -fn on vol1@$T"
mount -o loop,ro,noload "$OLD/nbd" "$OLDMNT" || fail "mounting vol1@$T"
(cd "$OLDMNT" && sha256sum --quiet -c "$TMPDIR_TEST/before.sums") ||
  fail "vol1@$T does not hold the files as written"
cmp "$OLDMNT/doomed/random.bin" "$TMPDIR_TEST/random.bin" || fail "random.bin differs in vol1@$T"
[ ! -e "$MNT/doomed" ] || fail "the live volume has the directory back"

# The listing shows it, kept by the open client.
cairnc checkpoint list vol1 >"$TMPDIR_TEST/list.txt" || fail "cairn checkpoint list vol1"
cat "$TMPDIR_TEST/list.txt"
grep -qE "^vol1@#$frozen +[0-9T:Z-]+ +[0-9.]+[KMG]? +[0-9.]+[KMG]? +open$" "$TMPDIR_TEST/list.txt" ||
  fail "checkpoint list does not show vol1@#$frozen kept by an open client"
grep -qE "^[0-9]+ checkpoints holding [0-9.]+[KMG]?; checkpoints=on \(pool\), retention keep-within=1h \(pool\)$" \
  "$TMPDIR_TEST/list.txt" || fail "checkpoint list: no summary line"
cairnc checkpoint list vol1 --json >"$TMPDIR_TEST/list.json" || fail "cairn checkpoint list vol1 --json"
python3 - "$TMPDIR_TEST/list.json" "$frozen" "$after" "$T" <<'PY' || fail "checkpoint list --json is wrong"
import json, sys
j = json.load(open(sys.argv[1]))
frozen, after, t = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
assert set(j) == {"volume", "checkpoints", "unique", "settings"}, set(j)
assert j["volume"] == "vol1"
assert j["settings"] == {"checkpoints": "on", "checkpoints_from": "pool",
                         "retention": "keep-within=1h",
                         "retention_from": "pool",
                         "collected": j["settings"]["collected"]}, j["settings"]
cs = j["checkpoints"]
gens = [c["generation"] for c in cs]
assert gens == sorted(gens) and len(set(gens)) == len(gens), gens
assert [c["ctime"] for c in cs] == sorted(c["ctime"] for c in cs)
keys = {"name", "generation", "ctime", "written", "size", "referenced",
        "unique", "snapshot", "clones", "opens", "kept_by"}
for c in cs:
    assert set(c) == keys, set(c) ^ keys
    assert c["name"] == "vol1@#%d" % c["generation"], c
    assert c["size"] == 128 << 20 and c["written"] >= 0, c
    assert 0 < c["referenced"] <= 128 << 20 and c["unique"] >= 0, c
    assert c["snapshot"] is None and c["clones"] == 0, c
assert sum(c["unique"] for c in cs) == j["unique"], j["unique"]
assert sum(c["written"] for c in cs) > 8 << 20, cs
f = next(c for c in cs if c["generation"] == frozen)
assert f["ctime"] <= t, (f["ctime"], t)
assert f["opens"] >= 1 and f["kept_by"] == ["open"], f
# Every later checkpoint is after the noted time; the removal's is one.
assert all(c["ctime"] > t for c in cs if c["generation"] > frozen), cs
assert gens[-1] >= after
# The removal freed nothing yet: the frozen state keeps the files.
assert f["referenced"] > 8 << 20, f
print("list --json ok:", len(cs), "checkpoints")
PY

# The policy keeps all of them within the hour; the open one is protected.
cairnc checkpoint prune vol1 --dry-run >"$TMPDIR_TEST/prune.txt" || fail "checkpoint prune --dry-run"
n=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["checkpoints"]))' "$TMPDIR_TEST/list.json")
python3 - "$TMPDIR_TEST/prune.txt" "$frozen" "$n" <<'PY' || fail "prune --dry-run is wrong: $(cat "$TMPDIR_TEST/prune.txt")"
import re, sys
lines = open(sys.argv[1]).read().splitlines()
frozen, n = sys.argv[2], int(sys.argv[3])
assert lines[-1] == "would remove 0 checkpoints, kept %d" % n, lines[-1]
marks = {}
for l in lines[:-1]:
    m = re.match(r"^vol1@#(\d+) +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +(\S+)$", l)
    assert m, l
    marks[m.group(1)] = m.group(2)
assert len(marks) == n, (len(marks), n)
assert marks.pop(frozen) == "protected", frozen
assert set(marks.values()) == {"keep-within"}, marks
PY
[ "$(newest_checkpoint)" -ge "$after" ] || fail "a dry run removed checkpoints"

# Promote it by its time; the old files come back as a snapshot.
cairnc checkpoint promote "vol1@$T" before-rm >"$TMPDIR_TEST/promote.txt" || fail "checkpoint promote"
grep -qx "promoted vol1@$T to snapshot vol1@before-rm (generation $frozen)" "$TMPDIR_TEST/promote.txt" ||
  fail "promote said: $(cat "$TMPDIR_TEST/promote.txt")"
fuse_detach "$OLDMNT" "$OLD"
fuse_detach "$MNT" "$FUSE"
stop_plugin

# After a restart the snapshot is there with the same files.
start_plugin control="$CTL" commit-interval=200
wait_for_sockets "$NBDKIT_PID" nbdkit "$NBDKIT_LOG" "$CTL"
cairnc checkpoint list vol1 --json | python3 -c '
import json, sys
f = [c for c in json.load(sys.stdin)["checkpoints"] if c["generation"] == int(sys.argv[1])]
assert f and f[0]["snapshot"] == "before-rm" and f[0]["kept_by"] == ["snapshot"], f
' "$frozen" || fail "after the restart, vol1@#$frozen is not kept by snapshot before-rm"
fuse_attach "$OLD" vol1@before-rm -r
e2fsck -fn "$OLD/nbd" || fail "e2fsck -fn on vol1@before-rm"
mount -o loop,ro,noload "$OLD/nbd" "$OLDMNT" || fail "mounting vol1@before-rm"
(cd "$OLDMNT" && sha256sum --quiet -c "$TMPDIR_TEST/before.sums") ||
  fail "vol1@before-rm does not hold the files as written"
cmp "$OLDMNT/doomed/random.bin" "$TMPDIR_TEST/random.bin" || fail "random.bin differs in vol1@before-rm"
fuse_detach "$OLDMNT" "$OLD"
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "cairn fsck"
echo PASS
