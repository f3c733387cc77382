#!/usr/bin/env bash
# Installs everything moec needs on a fresh Debian 12 machine: the Debian packages
# (LLVM/MLIR 22, ONNX, protobuf, Abseil, FlatBuffers, oneDNN, Open MPI, zlib and
# libdeflate for the plans' CRC-32, Ninja, ccache,
# clang 14 with its sanitizer and libFuzzer runtimes for scripts/fuzz.sh and sanitize.sh,
# Chromium, which renders `moe-run --report-html` pages headless in test/Report,
# pybind11 and the Python headers for `import moert`, pkg-config for the embedding test,
# curl for moe-serve's tests, libpng and libjpeg for moe-run --image) and the pinned Python requirements in .venv (requirements.txt
# and moe-serve's, tools/moe-serve/requirements.txt). Idempotent and quiet when already done.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

packages=(
  cmake ninja-build ccache g++ python3-venv
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  libabsl-dev libflatbuffers-dev flatbuffers-compiler
  libdnnl-dev openmpi-bin libopenmpi-dev
  libgtest-dev libgmock-dev zlib1g-dev libdeflate-dev libzstd-dev
  clang libclang-rt-14-dev
  chromium pybind11-dev python3-dev pkg-config curl
  libpng-dev libjpeg62-turbo-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
stamp="$venv/.requirements.sha256"
want=$(cat "$root/requirements.txt" "$root/tools/moe-serve/requirements.txt" |
  sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing Python requirements into .venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/requirements.txt" \
    -r "$root/tools/moe-serve/requirements.txt"
  echo "$want" >"$stamp"
fi

# moec-verify (tools/verify: `moec verify`, `moe-run --compare`), the
# accuracy check against onnxruntime, as a console entry point in .venv/bin.
verify_stamp="$venv/.moec-verify.sha256"
want_verify=$(cat "$root/tools/verify/pyproject.toml" "$root/tools/verify/moec_verify.py" |
  sha256sum | cut -d' ' -f1)
if [ ! -x "$venv/bin/moec-verify" ] || [ ! -f "$verify_stamp" ] ||
  [ "$(cat "$verify_stamp")" != "$want_verify" ]; then
  echo "setup: installing moec-verify into .venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "$root/tools/verify"
  echo "$want_verify" >"$verify_stamp"
fi
