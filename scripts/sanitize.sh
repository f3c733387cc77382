#!/usr/bin/env bash
# Builds the runtime alone (MOEC_BUILD_COMPILER=OFF: no LLVM) with GCC,
# AddressSanitizer and UndefinedBehaviorSanitizer into build-asan/ (Ninja +
# ccache) and runs its unit tests and moe-run's CLI tests (ctest) there. Any
# sanitizer report fails the test it occurs in. MOERT_CUDA is detected as in
# the ordinary build.
#
#   scripts/sanitize.sh [ctest arguments...]
#
# Environment: MOEC_ASAN_BUILD_DIR (default build-asan), MOEC_ASAN_NO_SETUP=1
# (skip scripts/setup.sh). Ends with one "sanitize: N passed, N failed" line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_ASAN_BUILD_DIR:-$root/build-asan}"
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

[ "${MOEC_ASAN_NO_SETUP:-0}" = 1 ] || bash "$root/scripts/setup.sh"

start=$SECONDS
# shellcheck source=sanitizer-build.sh
source "$root/scripts/sanitizer-build.sh"
# GCC, as the ordinary build: the runtime's tests use _Float16, which clang
# 14 lacks on x86. nvcc's flags are those of the ordinary Release build, so
# that ccache shares its CUDA objects.
configure_sanitizer_build "$root" "$build" gcc -DMOEC_BUILD_COMPILER=OFF \
  -DMOEC_SANITIZE=address,undefined -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O3 -DNDEBUG"
cmake --build "$build"
echo "sanitize: built in $((SECONDS - start)) s"

start=$SECONDS
# Reports abort the process (-fno-sanitize-recover), so ctest sees a failure.
# allocator_may_return_null: an allocation too large for the machine fails
# as it does without ASan (the loader's and sessions' error paths are what
# the corruption tests check), instead of ASan aborting.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1:strict_string_checks=1:allocator_may_return_null=1"
export LSAN_OPTIONS="${LSAN_OPTIONS:-}:suppressions=$root/scripts/lsan-suppressions.txt"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:print_stacktrace=1"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
passed=0
failed=0
# Runs ctest with "$@" and adds its counts.
run_ctest() {
  ctest --test-dir "$build" --output-on-failure "$@" 2>&1 | tee "$log" || status=1
  local total bad
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log")
  bad=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log")
  passed=$((passed + ${total:-0} - ${bad:-0}))
  failed=$((failed + ${bad:-0}))
}
run_ctest -E moe_run_expert_parallel "$@"
# Open MPI keeps allocations until exit, in plugins it has unloaded by then
# (LeakSanitizer sees "<unknown module>", which no suppression can name):
# under mpirun, memory errors are checked, leaks are not.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" run_ctest -R moe_run_expert_parallel "$@"
echo "sanitize: tests in $((SECONDS - start)) s"
echo "sanitize: $passed passed, $failed failed"
exit $status
