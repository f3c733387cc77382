# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures (once) a
# clang build of the tree for the sanitizers.
#
#   configure_clang_build ROOT BUILD_DIR [CMAKE ARGS...]
#
# -O1 with line tables: quick to build, fast enough to run, readable stacks.
# No NDEBUG: assertions (ours and LLVM's header checks, cast<> and ArrayRef
# bounds) report misuse that a release build would run into silently.
configure_clang_build() {
  local root=$1 build=$2
  shift 2
  [ -f "$build/build.ninja" ] && return 0
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" "$@" >/dev/null
}
