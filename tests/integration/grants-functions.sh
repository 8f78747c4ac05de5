# Helpers for the grants tests (test-grants-*.sh), on top of
# plugin-functions.sh: the check that a refusal names nothing.

. "$top_srcdir/tests/integration/plugin-functions.sh"

# same_as_missing NAME GHOST CMD ARGS...: the last command (run by a
# function that sets rc, out and args, as run does) failed on NAME, which
# the caller may not see; running CMD ARGS... (the same request about
# GHOST, a name that does not exist) fails with the same words, NAME in
# the one and GHOST in the other.
same_as_missing () {
  local name=$1 ghost=$2 first=$out
  shift 2
  [ "$rc" -ne 0 ] || fail "${args[*]}: succeeded on $name, which it may not see"
  "$@"
  [ "$rc" -ne 0 ] || fail "${args[*]}: succeeded"
  [ "${first//$name/X}" = "${out//$ghost/X}" ] ||
    fail "$name, which it may not see, and $ghost, which does not exist, differ: '$first' vs '$out'"
}

# audit_has SOCKET "PRINCIPAL METHOD TARGET OUTCOME"...: the audit trail
# of the server at control socket SOCKET has each of these records
# (OUTCOME up to its first colon: "ok", "failed (permission)").
audit_has () {
  local ctl=$1 json
  shift
  json=$("$CAIRN" --socket "$ctl" audit --json) || fail "cairn audit on $ctl"
  python3 -c 'import json, sys
e = [(x["principal"], x["method"], x["target"], x["outcome"].split(":")[0])
     for x in json.loads(sys.argv[1])["entries"]]
for w in sys.argv[2:]:
    assert tuple(w.split(" ", 3)) in e, (w, e)' "$json" "$@" ||
    fail "the audit trail of $ctl lacks a record"
}
