#!/usr/bin/env bash
# A volume used the way a remote host uses it: attached with nbdfuse,
# formatted with ext4, mounted through a loop device, filled with files;
# then snapshotted, changed, and both the volume and the snapshot mounted
# again after restarts: the snapshot holds the files as they were, both
# filesystems check clean, and so does the pool.  Needs root, /dev/fuse and
# loop devices; skipped where the machine does not allow them.
. "$top_srcdir/tests/integration/plugin-functions.sh"
require nbdfuse
require mkfs.ext4
require fsck.ext4
require fusermount3
require losetup
[ "$(id -u)" -eq 0 ] || skip "mounting needs root"
[ -c /dev/fuse ] || skip "no /dev/fuse"
losetup -f >/dev/null 2>&1 || skip "no free loop device"

FUSE="$TMPDIR_TEST/fuse"
MNT="$TMPDIR_TEST/mnt"
mkdir -p "$FUSE" "$MNT"

# Unmount whatever is mounted, then run functions.sh's cleanup (which
# stops nbdkit and removes the directory) with the test's exit status.
# errexit is off first: the trap must get to the end whatever fails.
fs_cleanup () {
  if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
  if mountpoint -q "$FUSE"; then fusermount3 -u "$FUSE" || fusermount3 -uz "$FUSE"; fi
}
trap 'rc=$?; set +e; fs_cleanup; (exit $rc); cleanup' EXIT

# attach EXPORT [NBDFUSE-OPTIONS]: the export as the file $FUSE/nbd.
attach () {
  fuse_attach "$FUSE" "$@"
}

# detach: unmount the filesystem and the FUSE file.
detach () {
  fuse_detach "$MNT" "$FUSE"
}

make_pool 1G
testctl create vol1 256M
start_plugin

# Format, mount, fill.
attach vol1
mkfs.ext4 -q -F "$FUSE/nbd" || fail "mkfs.ext4 on vol1"
mount -o loop "$FUSE/nbd" "$MNT" || skip "cannot mount through a loop device here"
cp -r "$top_srcdir/engine" "$MNT/engine"
head -c 20M /dev/urandom >"$MNT/random.bin"
(cd "$MNT" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$TMPDIR_TEST/before.sums"
detach
stop_plugin

# Snapshot, then change the volume.
testctl snapshot vol1 s1
start_plugin
attach vol1
mount -o loop "$FUSE/nbd" "$MNT" || fail "mounting vol1 again"
(cd "$MNT" && sha256sum --quiet -c "$TMPDIR_TEST/before.sums") || fail "files changed across a restart"
rm -rf "$MNT/engine"
head -c 5M /dev/urandom >"$MNT/random.bin"
cp -r "$top_srcdir/plugin" "$MNT/plugin"
fstrim "$MNT" 2>/dev/null || true            # trims reach the plugin
(cd "$MNT" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$TMPDIR_TEST/after.sums"
detach
stop_plugin

# After a restart the volume holds the changed files.
start_plugin
attach vol1
fsck.ext4 -fn "$FUSE/nbd" || fail "fsck.ext4 on vol1"
mount -o loop "$FUSE/nbd" "$MNT" || fail "mounting vol1 after the changes"
(cd "$MNT" && sha256sum --quiet -c "$TMPDIR_TEST/after.sums") || fail "vol1 lost the changes"
[ ! -e "$MNT/engine" ] || fail "a deleted directory is back"
detach
stop_plugin

# The snapshot, read-only, still holds the first files.
start_plugin
attach vol1@s1 -r
fsck.ext4 -fn "$FUSE/nbd" || fail "fsck.ext4 on vol1@s1"
mount -o loop,ro,noload "$FUSE/nbd" "$MNT" || fail "mounting vol1@s1"
(cd "$MNT" && sha256sum --quiet -c "$TMPDIR_TEST/before.sums") || fail "the snapshot does not hold the first files"
detach
stop_plugin
"$CAIRN" fsck "$POOL" >/dev/null || fail "cairn fsck"
echo PASS
