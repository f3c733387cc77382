#!/usr/bin/env bash
# Sets up the machine, builds moec, and runs the main job on the bundled example
# (examples/mixtral-tiny.onnx, a two-layer Mixtral-style MoE language model), or on
# the ONNX model given as the first argument:
#   moec check      the Day-0 coverage check
#   moec compile    ahead of time, into build/example/plan.bin (+ report.json)
#   moe-run         the plan on seeded random token ids, timed
#   e2e.py          the same model in onnxruntime on fresh inputs, compared
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_BUILD_DIR:-$root/build}"
model="${1:-$root/examples/mixtral-tiny.onnx}"
out="${MOEC_EXAMPLE_OUT:-$build/example}"
tokens="${MOEC_EXAMPLE_TOKENS:-16}"

bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
mkdir -p "$out"

echo "== moec check $(basename "$model")"
"$build/bin/moec" check "$model"

echo "== moec compile $(basename "$model") -o $out/plan.bin"
"$build/bin/moec" compile "$model" -o "$out/plan.bin" --max-tokens 64 --bound batch=1 \
  --report "$out/report.json"
"$root/.venv/bin/python" - "$out/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["memory"]
print(f"plan: {r['steps']} steps ({r['fused_elementwise_steps']} fused), "
      f"arena {m['arena_bytes']} B (naive {m['naive_bytes']} B, "
      f"{100 * m['saved_fraction']:.0f}% saved), weights {m['weight_bytes']} B")
PY

echo "== moec inspect plan.bin (its summary)"
"$build/bin/moec" inspect "$out/plan.bin" | sed -n '1,6p'

echo "== moe-run plan.bin --tokens $tokens --bench 20"
"$build/bin/moe-run" "$out/plan.bin" --tokens "$tokens" --dim batch=1 \
  --output-dir "$out" --bench 20 --trace "$out/trace.json" \
  --report-html "$out/report.html"
echo "outputs in $out; trace $out/trace.json (ui.perfetto.dev), report $out/report.html"

echo "== moec verify: the plan against onnxruntime on the same inputs"
"$build/bin/moec" verify "$model" --plan "$out/plan.bin"
