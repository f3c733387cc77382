#!/usr/bin/env bash
# The GPU check of the CUDA backend (docs/cuda.md; issue #6). One call of at
# most 8 minutes on a lent H200, shaped by the device tool's METHOD.md:
# correctness first (every zoo model and the v5 generic gates, GPU against
# the CPU backend), then timings (one MoE layer at 1/16/256/4096 tokens).
#
#   bash bench/gpu_check.sh --dry-run          check this machine; exit 1 with
#                                              the reasons if it cannot run
#   bash bench/gpu_check.sh --prepare DIR      on the build machine: build with
#                                              CUDA, compile every zoo model for
#                                              cpu and cuda, bundle moe-run and
#                                              the libraries the GPU machine
#                                              lacks (it has no LLVM or abseil)
#   bash bench/gpu_check.sh [--bundle DIR]     on the GPU machine: the checks
#
# Environment: MOEC_BUILD_DIR (default build-gpu, configured with
# -DMOERT_CUDA=ON), PYTHON (default python3). The bundle (default
# bench/gpu-bundle, git-ignored) is small: plans of the tiny zoo models, the
# binaries, and the .so files as one xz archive; name it in the device
# tool's `carry`. The layer's
# 22 GB of weights are made on the GPU.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${MOEC_BUILD_DIR:-$root/build-gpu}"
python="${PYTHON:-python3}"
mode=run
bundle="$root/bench/gpu-bundle"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) mode=dry ;;
    --prepare) mode=prepare; bundle="${2:?--prepare needs a directory}"; shift ;;
    --bundle) bundle="${2:?--bundle needs a directory}"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { printf 'gpu_check: %s\n' "$*"; }
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("$1 ($2)"); }

# The bundle's libraries travel compressed (--prepare); unpack them once.
if [ "$mode" != prepare ] && [ -f "$bundle/lib.tar.xz" ] && [ ! -d "$bundle/lib" ]; then
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$bundle/lib.tar.xz" | tar -C "$bundle" -xf -
  else
    "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$bundle/lib.tar.xz" "$bundle"
  fi
fi

# The moe-run to use: the bundle's, else the build's (not for --prepare,
# which makes the bundle from the build).
moe_run=""
if [ "$mode" != prepare ] && [ -x "$bundle/bin/moe-run" ]; then
  moe_run="$bundle/bin/moe-run"
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
elif [ -x "$build/bin/moe-run" ]; then
  moe_run="$build/bin/moe-run"
fi

# Whether a CUDA device is usable, asked the way the backend asks.
gpu_status() {
  if [ -n "$moe_run" ]; then
    "$moe_run" /nonexistent.bin --backend cuda 2>&1 | head -1 || true
  elif command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>&1 | head -1
  else
    echo "no CUDA device: neither moe-run nor nvidia-smi is available"
  fi
}

if [ "$mode" = prepare ]; then
  need cmake "configures the build"
  need ninja "builds"
  need nvcc "compiles the CUDA backend"
  if [ ${#missing[@]} -gt 0 ]; then
    say "cannot prepare; missing: ${missing[*]}"; exit 1
  fi
  if [ ! -f "$build/build.ninja" ]; then
    cmake -G Ninja -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DMOERT_CUDA=ON -DPython3_EXECUTABLE="$(command -v "$python")" >/dev/null
  fi
  grep -q '^MOERT_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    { say "$build is configured with MOERT_CUDA=OFF"; exit 1; }
  ninja -C "$build" moec moe-run moe-layer-plan moert_tests
  rm -rf "$bundle/plans" "$bundle/bin" "$bundle/lib" "$bundle/lib.tar.xz"
  mkdir -p "$bundle/plans" "$bundle/bin" "$bundle/lib"
  # The zoo's valid models (the manifest's `any_input` entries).
  models=$("$python" -c 'import json, sys
m = json.load(open(sys.argv[1]))
print("\n".join(e["file"] for e in m["models"].values()
                if e.get("validity") == "any_input"))' \
    "$root/examples/zoo/manifest.json")
  for model in $models; do
    model="$root/$model"
    name=$(basename "$model" .onnx)
    "$build/bin/moec" compile "$model" -o "$bundle/plans/$name.cpu.bin" \
      --max-tokens 64
    "$build/bin/moec" compile "$model" -o "$bundle/plans/$name.cuda.bin" \
      --max-tokens 64 --target cuda --cuda-arch sm_90
  done
  # The v5 zoo's generic gates (`score: generic`: llama4's TopK and
  # ScatterElements, phimoe's ArgMax and GatherElements run as GPU steps,
  # select_ops.cpp), one plan per exporter form.
  for name in llama4_block_hf llama4_block_dynamo llama4_block_torchscript \
      phimoe_block_hf phimoe_block_dynamo_batched_mm \
      phimoe_block_torchscript_batched_mm; do
    "$build/bin/moec" compile "$root/examples/zoo/v5/$name.onnx" \
      -o "$bundle/plans/v5_$name.cpu.bin" --max-tokens 64
    "$build/bin/moec" compile "$root/examples/zoo/v5/$name.onnx" \
      -o "$bundle/plans/v5_$name.cuda.bin" --max-tokens 64 --target cuda \
      --cuda-arch sm_90
  done
  # bf16 expert weights through the zoo's activations and layouts (the
  # tensor-core tiles take experts with more than 8 rows): same plan on
  # both backends, so the fp32 tolerance holds.
  for name in mixtral_block qwen2_moe_block gpt_oss_block; do
    for target in cpu cuda; do
      "$build/bin/moec" compile "$root/examples/zoo/$name.onnx" \
        -o "$bundle/plans/${name}_bf16.$target.bin" --max-tokens 64 \
        --weight-dtype bf16 --target "$target" \
        $([ "$target" = cuda ] && echo --cuda-arch sm_90)
    done
  done
  # Expert parallel on the GPU: 2-device plans (both devices on one GPU with
  # the host communicator; over NCCL where the machine has two GPUs).
  for name in mixtral_block qwen2_moe_block deepseek_v3_block; do
    "$build/bin/moec" compile "$root/examples/zoo/$name.onnx" \
      -o "$bundle/plans/$name.ep2.cuda.bin" --max-tokens 64 --devices 2 \
      --target cuda --cuda-arch sm_90
  done
  # Tiered experts on the GPU (docs/tiered-experts.md, "On the GPU"): a
  # 4-layer stack of 16 experts, all hot in the plan; the check runs it at
  # the budgets listed beside it (the least cache, a quarter and half of the
  # experts hot) against the same plan all hot.
  stack=$(mktemp -d)
  "$python" "$root/test/lib/gen_stacked_moe.py" "$stack/stack.onnx" \
    --layers 4 --experts 16 --hidden 64 --ffn 128 --skew 1
  "$build/bin/moec" compile "$stack/stack.onnx" \
    -o "$bundle/plans/stack.tiered.cuda.bin" --max-tokens 64 --target cuda \
    --cuda-arch sm_90 --device-memory 1T --report "$stack/report.json"
  "$python" -c 'import json, sys
t = json.load(open(sys.argv[1]))["tiers"][0]
least = t["resident_bytes"] + t["window_bytes"]
print(least, least + t["hot_bytes"] // 4, least + t["hot_bytes"] // 2)' \
    "$stack/report.json" >"$bundle/plans/stack.tiered.budgets"
  rm -rf "$stack"
  cp "$build/bin/moe-run" "$build/bin/moe-layer-plan" "$build/bin/moert_tests" \
    "$bundle/bin/"
  # The carry limit is 64 MiB for the tree and the bundle together.
  strip --strip-unneeded "$bundle"/bin/* 2>/dev/null || true
  # Shared libraries outside the CUDA toolkit and libc, which the GPU
  # machine's image does not have (abseil, OpenBLAS, MPI, gfortran, ...).
  ldd "$build/bin/moe-run" "$build/bin/moe-layer-plan" "$build/bin/moert_tests" | awk '/=> \//{print $3}' |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/usr/local/cuda' |
    sort -u | while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
  # The libraries are most of the bundle (oneDNN alone is 40 MB): they
  # travel as one xz archive (about a fifth of the size), unpacked on the
  # GPU machine before the first run.
  strip --strip-unneeded "$bundle"/lib/* 2>/dev/null || true
  tar -C "$bundle" -cf - lib | xz -T0 -6 >"$bundle/lib.tar.xz"
  rm -rf "$bundle/lib"
  du -sh "$bundle"
  size=$(du -sm "$bundle" | cut -f1)
  if [ "$size" -ge 56 ]; then
    say "the bundle is $size MiB; with the tree it must stay under the device tool's 64 MiB carry" >&2
    exit 1
  fi
  say "bundle ready in $bundle; on the GPU machine: bash bench/gpu_check.sh --bundle $bundle"
  exit 0
fi

# cuBLAS and NCCL are opened at run time: the toolkit's first, else the
# loader's path. Where the GPU machine's toolkit lacks them, PyTorch's wheels
# (site-packages/nvidia/*/lib) usually have them.
if [ "$mode" != prepare ] && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  wheels=$("$python" -c 'import glob, site
dirs = {p.rsplit("/", 1)[0] for s in site.getsitepackages()
        for p in glob.glob(s + "/nvidia/*/lib/lib*.so*")}
print(":".join(sorted(dirs)))' 2>/dev/null || true)
  [ -n "$wheels" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheels"
fi

# --dry-run and the checks share the environment check.
need "$python" "runs the comparisons"
"$python" -c 'import numpy' 2>/dev/null || missing+=("numpy (for $python)")
[ -n "$moe_run" ] || missing+=("moe-run (run --prepare, or build $build)")
if [ -n "$moe_run" ] && "$moe_run" --help 2>&1 | grep -q -- '--backend'; then :
elif [ -n "$moe_run" ]; then missing+=("a moe-run with --backend"); fi
ls "$bundle"/plans/*.cuda.bin >/dev/null 2>&1 ||
  missing+=("compiled plans in $bundle/plans (run --prepare)")
gpu=$(gpu_status)
case "$gpu" in
  *"no CUDA device"*|*"failed"*|*"NVIDIA-SMI has failed"*|"")
    missing+=("a GPU: ${gpu:-nvidia-smi printed nothing}") ;;
esac
has_torch=no
"$python" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null &&
  has_torch=yes
say "moe-run: ${moe_run:-none}; GPU: ${gpu:-none}; PyTorch with CUDA: $has_torch"
if [ ${#missing[@]} -gt 0 ]; then
  say "cannot run the GPU check; missing:"
  printf '  - %s\n' "${missing[@]}"
  exit 1
fi
if [ "$mode" = dry ]; then
  say "environment ok"
  exit 0
fi

# Each part runs under the time left of the call's budget (GPU_CHECK_BUDGET
# seconds, default 520: the device tool's 600 s limit minus start-up), so a
# part that hangs cannot take the later ones with it; each part's output also
# goes to $OUT/<part>.log when the device tool provides $OUT.
budget="${GPU_CHECK_BUDGET:-520}"
started=$(date +%s)
status=0
logs="${OUT:-}"
part() { # part NAME MAX_SECONDS COMMAND...
  local name=$1 limit=$2 left
  shift 2
  left=$((budget - ($(date +%s) - started)))
  if [ "$left" -lt 20 ]; then
    say "$name: skipped, ${left}s left of the ${budget}s budget"
    status=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name (at most ${limit}s)"
  if [ -n "$logs" ]; then
    timeout "$limit" "$@" 2>&1 | tee "$logs/$name.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { say "$name: FAILED"; status=1; }
  else
    timeout "$limit" "$@" || { say "$name: FAILED"; status=1; }
  fi
}

# 1. Correctness (about 2 minutes): the runtime's GPU unit tests (whole
#    steps on the device against the CPU backend, graphs, data errors), the
#    same under compute-sanitizer's memcheck where it works, then every zoo
#    model, the generated layers and the expert-parallel plans, cuda against
#    cpu.
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem \
  --format=csv,noheader 2>/dev/null || true
bin="$(dirname "$moe_run")"
if [ -x "$bin/moert_tests" ]; then
  part unit-tests 90 "$bin/moert_tests" --gtest_filter='Cuda*' --gtest_brief=1
  if command -v compute-sanitizer >/dev/null 2>&1; then
    part memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$bin/moert_tests" --gtest_filter='Cuda*Device*' --gtest_brief=1
  fi
fi
part zoo 150 "$python" "$root/bench/gpu_compare.py" --plans "$bundle/plans" \
  --moe-run "$moe_run" --tokens 1,7,32
# A generated MoE layer per expert weight dtype (bench/layer_plan), made
# here (100 MB at f32: too large to carry): the same plan on both backends,
# so that bf16/f16 weights compare at the fp32 tolerance too.
layers=$(mktemp -d)
for dtype in f32 bf16 f16; do
  for backend in cpu cuda; do
    "$bin/moe-layer-plan" \
      -o "$layers/layer_e16_$dtype.$backend.bin" --experts 16 --top-k 4 \
      --hidden 512 --ffn 1024 --max-tokens 256 --weight-dtype "$dtype" \
      --backend "$backend" >/dev/null || status=1
  done
done
part layers 60 "$python" "$root/bench/gpu_compare.py" --plans "$layers" \
  --moe-run "$moe_run" --tokens 1,16,256
# moe-run --trace of a CUDA run: the host's launches, copies and syncs, and
# the GPU stream's steps between their events (docs/cli.md, "--trace").
part trace 30 bash -c '"$1" "$2" --backend cuda --bench 3 --tokens 16 \
  --trace "$3/trace.json" --output-dir "$3" >/dev/null &&
  "$4" -c "import json, sys
x = [e for e in json.load(open(sys.argv[1]))[\"traceEvents\"] if e[\"ph\"] == \"X\"]
gpu = [e for e in x if e[\"tid\"] >= 100]
host = [e for e in x if e[\"name\"].startswith(\"launch \") or e[\"name\"] == \"graph launch\"]
assert gpu and host and all(e[\"dur\"] >= 0 for e in x), (len(gpu), len(host))
print(\"trace: ok,\", len(gpu), \"GPU spans,\", len(host), \"launches\")" "$3/trace.json"' \
  _ "$moe_run" "$layers/layer_e16_f32.cuda.bin" "$layers" "$python"
rm -rf "$layers"
# Tiered experts: the stack at each budget, with and without pre-gating,
# gives the all-hot plan's outputs bit for bit; the stats show the misses
# and the reads ahead.
part tiered 45 bash -c 'set -e
plan=$1/plans/stack.tiered.cuda.bin
for tokens in 1 16 64; do
  "$2" "$plan" --backend cuda --dim tokens=$tokens --seed 7 --bench 3 \
    --output-dir "$3/all$tokens" >/dev/null
  for budget in $(cat "$1/plans/stack.tiered.budgets"); do
   for ahead in none next-layer; do
    out=$3/b$budget.$tokens.$ahead
    "$2" "$plan" --backend cuda --dim tokens=$tokens --seed 7 --bench 3 \
      --device-memory $budget --prefetch $ahead --output-dir "$out" \
      --stats "$out.json" >/dev/null
    for f in "$3/all$tokens"/*.npy; do cmp "$f" "$out/$(basename "$f")"; done
    "$4" -c "import json, sys
s = json.load(open(sys.argv[1]))
c = [l[\"expert_cache\"] for l in s[\"moe_layers\"]]
print(\"tiered: tokens\", sys.argv[2], \"budget\", sys.argv[3], sys.argv[4],
      \"hits\", sum(x[\"hits\"] for x in c), \"misses\",
      sum(x[\"misses\"] for x in c), \"ahead\",
      sum(x[\"prefetch\"][\"issued\"] for x in c), \"used\",
      sum(x[\"prefetch\"][\"used\"] for x in c), \"identical\")" \
      "$out.json" $tokens $budget $ahead
   done
  done
done' _ "$bundle" "$moe_run" "$(mktemp -d)" "$python"
part ep-host 45 "$python" "$root/bench/gpu_compare.py" --plans "$bundle/plans" \
  --moe-run "$moe_run" --tokens 7,32 --cuda-suffix ep2.cuda.bin \
  --cuda-args "--devices 2 --comm host"
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  part ep-nccl 45 "$python" "$root/bench/gpu_compare.py" \
    --plans "$bundle/plans" --moe-run "$moe_run" --tokens 7,32 \
    --cuda-suffix ep2.cuda.bin --cuda-args "--devices 2 --comm nccl"
fi
# 2. Timing (about 3 minutes, most of it making and loading 22 GB of
#    weights twice): the MoE layer against its rooflines, PyTorch and moe-run.
if [ "$has_torch" = yes ]; then
  part layer-timing 300 "$python" "$root/bench/gpu_layer.py" \
    --moe-run "$moe_run" --layer-plan "$bin/moe-layer-plan" \
    --work "$(mktemp -d)"
else
  say "PyTorch with CUDA is missing: no layer timings"
fi
say "done in $(($(date +%s) - started))s; $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
