#!/usr/bin/env bash
# The plugin loads into real nbdkit, describes itself, and rejects bad
# parameters with messages that say what to do.
. "$top_srcdir/tests/integration/functions.sh"

out=$(nbdkit_env "$NBDKIT" --dump-plugin "$PLUGIN")
echo "$out"
grep -qx "name=cairn" <<<"$out" || fail "no name=cairn"
grep -qx "thread_model=parallel" <<<"$out" || fail "plugin is not PARALLEL"
grep -qx "cairn_checksum=sha256" <<<"$out" || fail "no cairn_checksum"
# The fastest SHA-256 the CPU runs is used (x86-64 only): AVX-512 sixteen
# blocks at a time, the rest with the SHA extensions or OpenSSL.
impl=$(sed -n 's/^cairn_checksum_impl=//p' <<<"$out")
want=openssl
if [ "$(uname -m)" = x86_64 ]; then
  grep -qw sha_ni /proc/cpuinfo && want=sha-ni-x2
  grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
    want=avx512-x16+$want
fi
[ "$impl" = "$want" ] || fail "cairn_checksum_impl is '$impl', expected '$want' on this CPU"
version=$(sed -n 's/^cairn_version=//p' <<<"$out")
[ "$version" = "$("$CAIRN" version | awk '{print $2}')" ] || fail "plugin version '$version' differs from cairn's"

# No pool= parameter: a clear error, non-zero exit.
if err=$(nbdkit_env "$NBDKIT" --run true "$PLUGIN" 2>&1); then
  fail "nbdkit started without pool="
fi
grep -q "pool= parameter is required" <<<"$err" || fail "unhelpful message: $err"

# An unknown parameter is named.
touch "$TMPDIR_TEST/p"
if err=$(nbdkit_env "$NBDKIT" --run true "$PLUGIN" pool="$TMPDIR_TEST/p" frobnicate=1 2>&1); then
  fail "nbdkit accepted an unknown parameter"
fi
grep -q "unknown parameter 'frobnicate'" <<<"$err" || fail "unhelpful message: $err"
echo PASS
