# Sourced by scripts/fuzz.sh and scripts/sanitize.sh: configures (once) a
# build of the tree for the sanitizers.
#
#   configure_sanitizer_build ROOT BUILD_DIR clang|gcc [CMAKE ARGS...]
#
# -O1 with line tables: quick to build, fast enough to run, readable stacks.
# No NDEBUG: assertions (ours and LLVM's header checks, cast<> and ArrayRef
# bounds) report misuse that a release build would run into silently.
configure_sanitizer_build() {
  local root=$1 build=$2 compiler=$3 cc cxx flags
  shift 3
  [ -f "$build/build.ninja" ] && return 0
  case $compiler in
  clang) cc=clang cxx=clang++ flags="-O1 -gline-tables-only" ;;
  *) cc=gcc cxx=g++ flags="-O1 -g1" ;;
  esac
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" "$@" >/dev/null
}
