#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), builds, and runs the whole test suite:
# the lit suite (dialect, passes, importer, end-to-end against onnxruntime), the
# runtime's C++ unit tests (ctest), the same under ASan + UBSan
# (scripts/sanitize.sh) and a repeatable fuzz smoke (scripts/fuzz.sh --smoke).
# Ends with one
# "N passed, N failed" line.
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

# The runtime's unit tests again under ASan + UBSan (build-asan/), then the
# fuzz smoke (build-fuzz/). A script that fails before its summary line (a
# build error) counts as one failure.
asan_status=0
MOEC_ASAN_NO_SETUP=1 bash "$root/scripts/sanitize.sh" 2>&1 | tee "$log" || asan_status=$?
as_passed=$(sed -n 's/^sanitize: \([0-9]*\) passed, [0-9]* failed$/\1/p' "$log")
as_failed=$(sed -n 's/^sanitize: [0-9]* passed, \([0-9]*\) failed$/\1/p' "$log")
if [ "$asan_status" != 0 ]; then
  status=1
  [ -n "$as_failed" ] && [ "$as_failed" != 0 ] || as_failed=$((${as_failed:-0} + 1))
fi

# The fuzz smoke: every regression input replayed, then each target fuzzed
# from its seeds with a fixed seed and input count (repeatable, about a
# minute each). MOEC_FUZZ_SECONDS=N fuzzes for N s instead (not repeatable);
# MOEC_FUZZ=0 skips it.
fuzz_status=0
if [ "${MOEC_FUZZ:-1}" = 0 ]; then
  : >"$log"
else
  fuzz_args=(--smoke)
  [ -z "${MOEC_FUZZ_SECONDS:-}" ] || fuzz_args=("$MOEC_FUZZ_SECONDS")
  MOEC_FUZZ_NO_SETUP=1 bash "$root/scripts/fuzz.sh" "${fuzz_args[@]}" 2>&1 |
    tee "$log" || fuzz_status=$?
fi
fz_passed=$(sed -n 's/^fuzz: \([0-9]*\) passed, [0-9]* failed$/\1/p' "$log")
fz_failed=$(sed -n 's/^fuzz: [0-9]* passed, \([0-9]*\) failed$/\1/p' "$log")
if [ "$fuzz_status" != 0 ]; then
  status=1
  [ -n "$fz_failed" ] && [ "$fz_failed" != 0 ] || fz_failed=$((${fz_failed:-0} + 1))
fi

passed=$((${lit_passed:-0} + ${ct_total:-0} - ${ct_failed:-0} + ${as_passed:-0} + \
  ${fz_passed:-0}))
failed=$((${lit_failed:-0} + ${ct_failed:-0} + ${as_failed:-0} + ${fz_failed:-0}))
echo "moec tests: $passed passed, $failed failed"
exit $status
