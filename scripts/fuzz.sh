#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz) into build-fuzz/ (clang, ASan +
# UBSan, Ninja + ccache), writes their seed corpora, replays every regression
# input, then fuzzes each target for SECONDS (default 60) and prints its
# executions and coverage. Fails on any crash; a crash found becomes a new
# regression input under test/fuzz/regressions/<target>/ (commit it).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   scripts/fuzz.sh --smoke [TARGET...]
#
# --smoke is the repeatable run that scripts/test.sh (CI) does: a fixed
# seed, a fixed number of inputs per target (about a minute each here), a
# fresh corpus of the seeds alone and one BLAS thread. Every run starts from
# the same inputs with the same mutation sequence and does the same number
# of them; the coverage feedback still varies a little between runs, so the
# later inputs can differ (close, not identical runs).
#
# Environment: MOEC_FUZZ_BUILD_DIR (default build-fuzz), MOEC_FUZZ_ARGS
# (extra libFuzzer flags, e.g. "-fork=1 -ignore_crashes=1" for long runs),
# MOEC_FUZZ_NO_SETUP=1 (skip setup and the tools build: scripts/test.sh has
# done both). Ends with one "fuzz: N passed, N failed" line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_BUILD_DIR:-$root/build}"
fuzz_build="${MOEC_FUZZ_BUILD_DIR:-$root/build-fuzz}"
smoke=0
if [ "${1:-}" = --smoke ]; then
  smoke=1
  seconds=600 # a guard only: the smoke ends on its input count
else
  seconds=${1:-60}
fi
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_onnx_import fuzz_plan)
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1

if [ "${MOEC_FUZZ_NO_SETUP:-0}" != 1 ]; then
  bash "$root/scripts/setup.sh"
  # The seed plans are compiled by the ordinary tools.
  bash "$root/scripts/build.sh" --target moec moert_make_test_plans >/dev/null
fi

start=$SECONDS
# shellcheck source=sanitizer-build.sh
source "$root/scripts/sanitizer-build.sh"
# libFuzzer is clang's. The targets run on the CPU: no CUDA backend.
configure_sanitizer_build "$root" "$fuzz_build" clang -DMOEC_FUZZ=ON \
  -DMOERT_CUDA=OFF
cmake --build "$fuzz_build" --target "${targets[@]}"
echo "fuzz: built in $((SECONDS - start)) s"

start=$SECONDS
seeds="$fuzz_build/seeds"
"$root/.venv/bin/python" "$root/test/fuzz/make_seeds.py" --out "$seeds" \
  --moec "$build/bin/moec" --make-plans "$build/bin/moert_make_test_plans"
echo "fuzz: seeds in $((SECONDS - start)) s"

passed=0
failed=0
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:print_stacktrace=1"
for target in "${targets[@]}"; do
  bin="$fuzz_build/bin/$target"
  regressions="$root/test/fuzz/regressions/$target"
  if bash "$root/test/fuzz/replay.sh" "$regressions" "$bin" -timeout=120 \
    -rss_limit_mb=4096; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi

  case $target in
  fuzz_onnx_import) timeout=60 ;;
  *) timeout=20 ;;
  esac
  corpus="$fuzz_build/corpus/$target"
  bound=(-max_total_time="$seconds")
  if [ "$smoke" = 1 ]; then
    # Inputs per target: about 60 s each on one core of the 2-core machine.
    case $target in
    fuzz_onnx_import) runs=4000 ;;
    *) runs=120000 ;;
    esac
    corpus="$fuzz_build/smoke-corpus/$target"
    rm -rf "$corpus"
    bound+=(-runs="$runs" -seed=1)
    # BLAS threads make coverage depend on scheduling: one keeps the runs
    # closer.
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
  fi
  mkdir -p "$corpus" "$regressions"
  log="$fuzz_build/$target.log"
  before=$(ls "$regressions" | wc -l)
  status=0
  # New inputs go to the working corpus (kept between runs); crashes,
  # timeouts, leaks and OOMs straight to the regression inputs.
  # shellcheck disable=SC2086
  "$bin" "$corpus" "$seeds/$target" "${bound[@]}" \
    -timeout="$timeout" -rss_limit_mb=4096 -max_len=262144 \
    -print_final_stats=1 -print_funcs=0 -artifact_prefix="$regressions/" \
    ${MOEC_FUZZ_ARGS:-} >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # -fork mode prints no final stats, only "#EXECS: cov: ..." lines.
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  stats=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1)
  time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
  echo "fuzz: $target: ${execs:-?} execs (${rate:-?}/s) in ${time:-$seconds} s, ${stats:-no stats}"
  after=$(ls "$regressions" | wc -l)
  if [ "$status" != 0 ] || [ "$after" != "$before" ]; then
    failed=$((failed + 1))
    echo "fuzz: $target FAILED (exit $status); the log is $log:"
    grep -E "ERROR|SUMMARY|runtime error|LLVM ERROR|Test unit written|#[0-9]+ 0x|^fuzz_" \
      "$log" | head -40
    echo "fuzz: new regression inputs in $regressions: commit them"
  else
    passed=$((passed + 1))
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
