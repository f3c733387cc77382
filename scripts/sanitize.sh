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
# (skip scripts/setup.sh). Ends with ctest's "N tests failed out of M" line.
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
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:print_stacktrace=1"
status=0
ctest --test-dir "$build" --output-on-failure "$@" || status=$?
echo "sanitize: tests in $((SECONDS - start)) s"
exit $status
