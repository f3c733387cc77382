#!/usr/bin/env bash
# Configures (once) and builds moec into build/ with Ninja and ccache.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_BUILD_DIR:-$root/build}"
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
if [ ! -f "$build/build.ninja" ]; then
  cmake -G Ninja -S "$root" -B "$build" \
    -DCMAKE_BUILD_TYPE="${MOEC_BUILD_TYPE:-Release}" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" >/dev/null
fi
cmake --build "$build" "$@"
