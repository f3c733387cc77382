#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), builds, and runs the whole test suite:
# the lit suite (dialect, passes, importer, end-to-end against onnxruntime) and the
# runtime's C++ unit tests (ctest). Ends with one "N passed, N failed" line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_BUILD_DIR:-$root/build}"

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
/usr/lib/llvm-22/bin/lit -sv "$build/test" 2>&1 | tee "$log" ||
  status=1
lit_passed=$(sed -n 's/^ *Passed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)
lit_failed=$(sed -n 's/^ *Failed *: *\([0-9]*\).*/\1/p' "$log" | tail -1)

ctest --test-dir "$build" --output-on-failure 2>&1 | tee "$log" || status=1
ct_total=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$log")
ct_failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log")

passed=$((${lit_passed:-0} + ${ct_total:-0} - ${ct_failed:-0}))
failed=$((${lit_failed:-0} + ${ct_failed:-0}))
echo "moec tests: $passed passed, $failed failed"
exit $status
