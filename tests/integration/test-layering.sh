#!/usr/bin/env bash
# The layers of the source tree (README, "Layout"): each directory may
# include headers only from itself and from the layers below it, so that
# proto/'s codecs build, test and fuzz without the engine, and the control
# client serves the CLI and the server's replication alike.  Every quoted
# #include of every .c and .h file is resolved to the directory that holds
# the header; one that reaches upwards (or names no header of the tree)
# fails the test, with the file, the line and the rule it breaks.  Then the
# same check is run on a tree with one bad include planted, which must
# fail: the test can tell.
. "$top_srcdir/tests/integration/functions.sh"

# What each layer may include besides itself.
declare -A allowed=(
  [base]=""
  [engine]="base"
  [proto]="base"
  [net]="base proto"
  [server]="base engine proto net"
  [plugin]="base engine proto net server"
  [client]="base engine proto net server"
)
layers="base engine proto net server plugin client"

# check_tree ROOT: print every include in ROOT's layers that breaks the
# rules; exit status 1 when there is one.
check_tree () {
  local root=$1 bad=0 layer file line hdr home ok dep
  declare -A where=()
  for layer in $layers; do
    for file in "$root/$layer"/*.h; do
      [ -e "$file" ] && where[${file##*/}]=$layer
    done
  done
  # One grep over the whole tree: FILE:LINE:#include "HEADER".
  while IFS=: read -r file line hdr; do
    layer=${file#"$root"/}; layer=${layer%%/*}
    hdr=${hdr#*\"}; hdr=${hdr%%\"*}
    if [ -e "$root/$layer/$hdr" ]; then
      continue
    fi
    home=${where[${hdr##*/}]:-}
    if [ -z "$home" ] || [ "$hdr" != "${hdr##*/}" ]; then
      echo "${file#"$root"/}:$line: \"$hdr\" is no header of a layer (include a layer's header by its name)"
      bad=1
      continue
    fi
    ok=no
    for dep in ${allowed[$layer]}; do
      [ "$dep" = "$home" ] && ok=yes
    done
    if [ $ok = no ]; then
      echo "${file#"$root"/}:$line: $layer/ includes $home/$hdr, but $layer/ may use only: ${allowed[$layer]:-nothing below it}"
      bad=1
    fi
  done < <(for layer in $layers; do printf '%s\n' "$root/$layer"/*.[ch]; done |
           xargs grep -Hn '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' || true)
  return $bad
}

out=$(check_tree "$top_srcdir") || { echo "$out"; fail "an include breaks the layering"; }
n=$(cat "$top_srcdir"/{base,engine,proto,net,server,plugin,client}/*.[ch] |
    grep -c '^[[:space:]]*#[[:space:]]*include[[:space:]]*"')
[ "$n" -gt 100 ] || fail "only $n includes were checked: the tree was not found"
echo "ok: $n includes follow the layers"

# A planted break: proto/ including an engine header must be caught.
copy="$TMPDIR_TEST/tree"
for layer in $layers; do
  mkdir -p "$copy/$layer"
  cp "$top_srcdir/$layer"/*.[ch] "$copy/$layer/"
done
printf '#include "volume.h"\n' >>"$copy/proto/stream.c"
if out=$(check_tree "$copy"); then
  fail "proto/ including engine/volume.h was not caught"
fi
echo "$out" | grep -q 'proto/stream.c:[0-9]*: proto/ includes engine/volume.h' ||
  fail "the planted break was reported as: $out"
echo "ok: a planted break is caught: $out"
