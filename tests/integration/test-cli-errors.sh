#!/usr/bin/env bash
# The error paths of cairn, as a user meets them: every exit status that
# cairn(8) documents (0 ok, 1 failure, 2 usage, 3 not found), over many
# commands given the wrong number of words, bad sizes, bad names and
# unknown options, each with the message that says what to do.  Messages
# name the option the user types for the command the user ran (--force,
# --recursive, 'cairn pull --rollback'), never a JSON parameter, and
# count in proper plurals.  Runs in-process on a stopped pool (--pool),
# where the same method tables as a server's answer.
# The CLI under LeakSanitizer too (functions.sh says why others are not).
CAIRN_TEST_LEAKS=yes
. "$top_srcdir/tests/integration/functions.sh"

POOL="$TMPDIR_TEST/pool"

runp () {
  run --pool "$POOL" "$@"
}

# No internal name leaks into what the last run printed.
no_json_names () {
  if grep -qE '"(from|rollback|force|recursive|tls)"|\((force|rollback|recursive)\)' <<<"$out"; then
    fail "${args[*]}: a JSON parameter's name in: $out"
  fi
}

run mkpool "$POOL" --size 64M
expect 0 "^created pool "

# 2: the command line itself.
run
expect 2 "^Usage: cairn "
run frobnicate
expect 2 "unknown command 'frobnicate' \(try 'cairn help'\)"
run --frobnicate volume list
expect 2 "unrecognized option '--frobnicate'"
run --timeout soon volume list
expect 2 "--timeout soon: expected a whole number of seconds"
run --pool "$POOL" --socket "$TMPDIR_TEST/s" volume list
expect 2 "--pool and --socket exclude each other"
run volume
expect 2 "missing SUBCOMMAND"
run volume frobnicate
expect 2 "unknown subcommand 'frobnicate'"
runp volume list --frobnicate
expect 2 "unrecognized option '--frobnicate'"
runp volume create
expect 2 "cairn volume create: "
runp volume create db
expect 2 "cairn volume create: "
runp volume create db 1G extra
expect 2 "unexpected argument 'extra'"
runp volume create db 10Q
expect 2 "cairn volume create: "
# A size that parses but that no volume can have is out of range: 2 too.
runp volume create db 1000
expect 2 "must be a positive multiple of 512 bytes"
runp volume create db 0
expect 2 "must be a positive multiple of 512 bytes"
# A name that breaks the rules is a bad argument, like a bad size.
runp volume create 'bad name' 1G
expect 2 "contains ' ': use letters, digits"
runp volume create db@x 1G
expect 2 "cairn volume create: "
runp snapshot create
expect 2 "cairn snapshot create: "
runp clone onlyone
expect 2 "cairn clone: "
runp diff a
expect 2 "cairn diff: "
run send
expect 2 "cairn send: "
run mkpool "$TMPDIR_TEST/p2"
expect 2 "--size"
run mkpool "$TMPDIR_TEST/p2" --size 10Q
expect 2 "cairn mkpool: "
run fsck
expect 2 "missing PATH"

# The TLS options secure --connect; replication connects from the server,
# with the server's own keys, and the message says how to give them.
run --tls-psk "$TMPDIR_TEST/keys.psk" replicate db@s --to host
expect 2 "start that server with 'cairnd --tls-psk FILE' or 'cairnd --tls-certs DIR'"
run --tls-psk "$TMPDIR_TEST/keys.psk" pull host db
expect 2 "start that server with 'cairnd --tls-psk FILE' or 'cairnd --tls-certs DIR'"
run --tls volume list
expect 2 "--tls and the --tls-\* options secure --connect"

# 3: what the command names does not exist.
run info "$TMPDIR_TEST/missing"
expect 3 "missing"
run --pool "$TMPDIR_TEST/missing" volume list
expect 3 "No such file or directory"
runp volume show nosuch
expect 3 "nosuch"
runp volume create db 1G
expect 0
runp snapshot create db@s1
expect 0
runp volume show db@nosuch
expect 3 "volume 'db' has no snapshot named 'nosuch'$"
# A name that looks like a time, but not the full form, gets told the form.
runp volume show db@2026-12-07
expect 3 "volume 'db' has no snapshot named '2026-12-07' \(a time needs the full form YYYY-MM-DDTHH:MM:SSZ, in UTC\)"
runp clone db@2026-12-07T10:00 c
expect 2 "YYYY-MM-DDTHH:MM:SSZ"
runp snapshot delete db@nosuch
expect 3 "no snapshot named 'nosuch'"

# 1: the server refuses what cannot be done now; it says what to do, with
# the option the user types.
runp volume delete db
expect 1 "volume 'db' has 1 snapshot: delete it first or use --recursive$"
no_json_names
runp snapshot create db@s2
expect 0
runp snapshot create db@s3
expect 0
runp volume delete db
expect 1 "volume 'db' has 3 snapshots: delete them first or use --recursive$"
no_json_names
# Shrinking without --force: a usage the server refuses, so 2.
runp volume resize db 512K
expect 2 "shrinking 'db' from 1073741824 to 524288 bytes discards the data past the new end: use --force"
no_json_names
run mkpool "$POOL" --size 64M
expect 1 "exists: use --force"
run fsck "$POOL"
expect 0 "clean"

# 0 after all that: nothing above changed the pool behind the user's back.
runp volume list --snapshots
expect 0 "db@s3"
runp volume delete db --recursive
expect 0
