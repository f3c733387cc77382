#!/usr/bin/env bash
# One regression input through the tools a user runs, as replay.sh's
# COMMAND (the lit test regressions.test):
#
#   replay_tool.sh onnx MODEL   moec compile MODEL --max-tokens 64, then
#                               moe-run on the plan when it compiled
#   replay_tool.sh plan PLAN    moe-run PLAN
#
# Succeeds when every tool exited 0 or 1 (an answer or one clear error);
# any other status (a signal, an abort, a usage error) is a failure.
set -uo pipefail
kind=$1
input=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
  "$@" >"$work/out" 2>&1
  local status=$?
  if [ "$status" -gt 1 ]; then
    echo "replay_tool: exit $status from: $*"
    tail -20 "$work/out"
    exit 1
  fi
  return "$status"
}

plan=$input
if [ "$kind" = onnx ]; then
  plan="$work/plan.bin"
  run timeout 300 moec compile "$input" -o "$plan" --max-tokens 64 || exit 0
fi
run timeout 300 moe-run "$plan" --threads 1 \
  --output-dir "$work/out.d" || true
exit 0
