#!/usr/bin/env bash
# Replays every regression input of one fuzz target, each once:
#
#   replay.sh DIR COMMAND [ARGS...]
#
# runs `COMMAND ARGS... INPUT` for every INPUT in DIR (regressions/<target>):
# the fuzz target itself (a libFuzzer binary runs the files it is given), or
# replay_tool.sh for the same input through moec / moe-run. Fails if any
# input fails (a crash), except those listed in pending-fixes.txt (fixes on
# their way by merge; README.md), which are reported either way.
set -uo pipefail
dir=$1
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=$(basename "$dir")
pending="$here/pending-fixes.txt"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

is_pending() {
  [ -f "$pending" ] && grep -qxF "$name/$1" <(sed 's/[[:space:]]*#.*//' "$pending")
}

ran=0 crashed=0 still_pending=0
shopt -s nullglob
for input in "$dir"/*; do
  [ -f "$input" ] || continue
  base=$(basename "$input")
  [ "$base" = README.md ] && continue
  ran=$((ran + 1))
  if "$@" "$input" >"$log" 2>&1; then
    if is_pending "$base"; then
      # Not proof of a fix: an uninitialised read may happen to be benign
      # in one build and crash another.
      echo "replay: $name/$base passes here; once its fix has landed," \
        "remove it from pending-fixes.txt"
    fi
    continue
  fi
  if is_pending "$base"; then
    still_pending=$((still_pending + 1))
    echo "replay: $name/$base crashes (pending: its fix comes by merge)"
    continue
  fi
  crashed=$((crashed + 1))
  echo "replay: $name/$base CRASHES:"
  grep -E "ERROR|SUMMARY|runtime error|LLVM ERROR|#[0-9]+ 0x|replay_tool" "$log" |
    head -30
done
echo "replay: $name: $ran inputs, $crashed crashed, $still_pending pending"
[ "$crashed" = 0 ]
