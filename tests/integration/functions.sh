# Shared harness for Cairn's integration tests (sourced by each test).
#
# Gives each test a private temporary directory, the paths of the built
# plugin and commands, a way to start real nbdkit with the plugin on a Unix
# socket and wait for it, and cleanup that runs however the test ends.
# Tests exit 0 (pass), 1 (fail) or 77 (skip: a requirement is missing).

set -euo pipefail

: "${top_builddir:?run integration tests through make check}"
: "${top_srcdir:?run integration tests through make check}"
. "$top_builddir/tests/integration/env.sh"

PLUGIN="$top_builddir/.libs/nbdkit-cairn-plugin.so"
CAIRN="$top_builddir/cairn"
CAIRND="$top_builddir/cairnd"
TEST_NAME=$(basename "$0" .sh)
TMPDIR_TEST=$(mktemp -d "${TMPDIR:-/tmp}/cairn-$TEST_NAME.XXXXXX")
NBDKIT_PID=

# Stop whatever the test started and remove its files.
cleanup () {
  local rc=$?
  if [ -n "$NBDKIT_PID" ] && kill -0 "$NBDKIT_PID" 2>/dev/null; then
    kill "$NBDKIT_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$NBDKIT_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$NBDKIT_PID" 2>/dev/null || true
  fi
  if [ $rc -ne 0 ] && [ -f "$TMPDIR_TEST/nbdkit.log" ]; then
    echo "--- nbdkit log:"; tail -n 50 "$TMPDIR_TEST/nbdkit.log"
  fi
  rm -rf "$TMPDIR_TEST"
  exit $rc
}
trap cleanup EXIT

fail () { echo "FAIL: $*" >&2; exit 1; }
skip () { echo "SKIP: $*" >&2; exit 77; }
require () { command -v "$1" >/dev/null 2>&1 || skip "$1 is not installed"; }

# Under the sanitizers the plugin is built with ASan but nbdkit is not, so
# the runtime is preloaded, and it initialises itself lazily, on the first
# call it intercepts.  Left alone, that call is the malloc inside glibc's
# newlocale (locale/newlocale.c:199), made by libp11-kit's constructor
# (gnutls needs p11-kit, nbdkit links gnutls) while newlocale holds
# __libc_setlocale_lock for writing.  ASan's start-up calls dlerror
# (Symbolizer::LateInitialize, looking for swift_demangle), which
# translates its message with dcgettext; dcgettext's read lock fails with
# EDEADLK (this thread is the writer) unchecked, and its unlock releases
# newlocale's write lock; newlocale's own unlock then drops the reader
# count to -1.  The first later dcgettext (a gnutls alert or error
# string, any strerror or %m) turns the lock to its read phase with that
# phantom reader, and at exit libp11-kit's destructor (freelocale) waits
# for it forever: nbdkit hung after SIGTERM with TLS.  P11_KIT_DEBUG set to
# no known flag prints nothing, but p11-kit's constructor then compares it
# (an intercepted strcmp) before newlocale, so ASan starts outside the
# lock and the lock stays balanced.
sanitizer_env=()

# LeakSanitizer's check at exit costs a sanitizer build's cairn about
# 0.6 s of CPU however little it did (measured: 0.74 s of user and system
# time for `cairn --help` with it, 0.17 s without), and the integration
# tests run cairn a few thousand times: some 10 minutes of CI's two
# cores, for leaks of short-lived commands.  So cairn, cairnd and the
# other commands run without it here, and the leak check stays where it
# finds what matters: the unit tests, which run the engine, codecs and
# servers in-process under LeakSanitizer, the fuzz harnesses, and the
# tests that set CAIRN_TEST_LEAKS=yes before sourcing this file (the
# CLI's own paths: test-cli-offline.sh and test-cli-errors.sh).
if [ "$ENABLE_SANITIZERS" = yes ] && [ "${CAIRN_TEST_LEAKS:-no}" != yes ]; then
  export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
if [ "$ENABLE_SANITIZERS" = yes ]; then
  sanitizer_env=(
    LD_PRELOAD="$($CC -print-file-name=libasan.so)"
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    P11_KIT_DEBUG=none
  )
fi
# ThreadSanitizer the same way; the first data race stops the server, with
# the report in its log (test-plugin-race.sh looks for it).
if [ "$ENABLE_TSAN" = yes ]; then
  sanitizer_env=(
    LD_PRELOAD="$($CC -print-file-name=libtsan.so)"
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
  )
fi

# Run nbdkit (or cairnd, which execs it) with the environment a sanitizer
# build needs (above).
nbdkit_env () {
  env "${sanitizer_env[@]}" "$@"
}

# The same, replacing the calling (sub)shell: `nbdkit_exec nbdkit ... &`
# makes $! nbdkit's own pid, so that it can be signalled and waited for.
nbdkit_exec () {
  exec env "${sanitizer_env[@]}" "$@"
}

# wait_for CMD...: run CMD every 0.1 s until it succeeds, at most 300 times
# (30 s, however long each try takes); its status is CMD's last.  For a
# test that must wait until something has happened instead of sleeping a
# guess: `wait_for test -e "$f" || fail "..."`.
wait_for () {
  for _ in $(seq 299); do "$@" && return 0; sleep 0.1; done
  "$@"
}

# wait_for_sockets PID WHAT LOG SOCKET...: wait until server PID (WHAT, for
# the messages) has created every SOCKET; fail, showing LOG (when not ""),
# if it exits first or 30 s pass.
wait_for_sockets () {
  local pid=$1 what=$2 log=$3 s missing
  shift 3
  for _ in $(seq 300); do
    missing=
    for s in "$@"; do [ -S "$s" ] || missing=$s; done
    [ -z "$missing" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      [ -z "$log" ] || cat "$log"
      fail "$what exited during start-up"
    fi
    sleep 0.1
  done
  fail "$what did not create $missing within 30 s"
}

# Start nbdkit with the plugin and the given parameters on a Unix socket in
# the test directory; wait until it accepts connections.  Sets SOCK.
start_nbdkit () {
  SOCK="$TMPDIR_TEST/nbd.sock"
  rm -f "$SOCK"                       # left behind by a killed server
  nbdkit_exec "$NBDKIT" --foreground --unix "$SOCK" "$PLUGIN" "$@" \
    >"$TMPDIR_TEST/nbdkit.log" 2>&1 &
  NBDKIT_PID=$!
  wait_for_sockets "$NBDKIT_PID" nbdkit "$TMPDIR_TEST/nbdkit.log" "$SOCK"
}

# Run cairn (or $RUN_CMD, such as $CAIRND) with the arguments; its exit
# status goes to rc, stdout and stderr together to out (for the CLI tests).
run () {
  args=("$(basename "${RUN_CMD:-$CAIRN}")" "$@")
  rc=0
  out=$("${RUN_CMD:-$CAIRN}" "$@" 2>&1) || rc=$?
}

# The last run exited with status $1 and printed something matching the
# extended regular expression $2 (if given).
expect () {
  [ "$rc" -eq "$1" ] || fail "${args[*]}: exit $rc, expected $1; it said: $out"
  if [ $# -ge 2 ]; then
    grep -qE -- "$2" <<<"$out" || fail "${args[*]}: no '$2' in: $out"
  fi
}
