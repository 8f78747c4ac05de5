#!/usr/bin/env bash
# test-plugin-crash.sh with the intent log on (engine/txn-log.c): every
# flush the writer sees return is an intent log write, a commit racing it
# every 50 ms; after the kill fsck is clean with the log live (it says
# how many records it holds), and the restart replays it.
CRASH_PLUGIN_PARAMS=intent-log=true
export CRASH_PLUGIN_PARAMS
exec bash "$top_srcdir/tests/integration/test-plugin-crash.sh"
