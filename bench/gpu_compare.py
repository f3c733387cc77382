#!/usr/bin/env python3
"""GPU check, part 1: every zoo plan on the CUDA backend against the CPU one.

    python3 bench/gpu_compare.py --plans DIR --moe-run BIN [--tokens 1,7,32]
                                 [--cuda-suffix S --cuda-args "ARGS"]

DIR holds NAME.cpu.bin and NAME.cuda.bin per zoo model (bench/gpu_check.sh
--prepare makes them). For each plan and token count, moe-run generates the
same seeded inputs for both backends (inputs depend only on the plan's
signature and --seed), and each output is compared as
max|cuda - cpu| / max(1, max|cpu|) against the tolerance of its weights'
dtype: 1e-4 for fp32 (IEEE kernels; summation order and libm ulps differ),
2e-2 for bf16/fp16 weights (bf16 operands, fp32 accumulation). NaN never
passes. The GPU side runs twice: once (eager), and three times in a row
(--warmup 1 --bench 2), whose last run replays a CUDA graph; both must
match. Prints one row per (model, tokens) and exits 1 on any mismatch.
With --cuda-suffix, the GPU side is NAME.S (e.g. an expert-parallel plan,
ep2.cuda.bin) run with the extra moe-run arguments --cuda-args (e.g.
"--devices 2 --comm host"); models without such a plan are skipped.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

TOLERANCE = {"f32": 1e-4, "bf16": 2e-2, "f16": 2e-2}


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", required=True)
    parser.add_argument("--moe-run", dest="moe_run", required=True)
    parser.add_argument("--tokens", default="1,7,32")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dtype", default="f32", choices=sorted(TOLERANCE))
    parser.add_argument("--cuda-suffix", dest="cuda_suffix",
                        default="cuda.bin")
    parser.add_argument("--cuda-args", dest="cuda_args", default="")
    parser.add_argument("--gpu-backend", dest="gpu_backend", default="cuda",
                        help="the backend of the second side (cpu: test the "
                        "script without a GPU)")
    args = parser.parse_args()
    tolerance = TOLERANCE[args.dtype]
    failures = 0
    rows = 0
    work = tempfile.mkdtemp(prefix="gpu-compare-")
    for cpu_plan in sorted(glob.glob(os.path.join(args.plans, "*.cpu.bin"))):
        name = os.path.basename(cpu_plan)[:-len(".cpu.bin")]
        cuda_plan = os.path.join(args.plans, name + "." + args.cuda_suffix)
        if not os.path.exists(cuda_plan):
            continue
        for tokens in [int(t) for t in args.tokens.split(",")]:
            outs = {}
            # The GPU side twice: one run (eager), and three runs whose
            # last is a CUDA graph replay (eager, captured, replayed).
            for side, backend, plan in (("cpu", "cpu", cpu_plan),
                                        ("cuda", args.gpu_backend, cuda_plan),
                                        ("graph", args.gpu_backend, cuda_plan)):
                out = os.path.join(work, name, str(tokens), side)
                os.makedirs(out, exist_ok=True)
                extra = args.cuda_args.split() if side != "cpu" else []
                if side == "graph":
                    extra += ["--warmup", "1", "--bench", "2"]
                code, log = run([args.moe_run, plan, "--backend", backend,
                                 "--seed", str(args.seed), "--tokens",
                                 str(tokens), "--output-dir", out] + extra)
                if code != 0:
                    print(f"FAIL {name} tokens={tokens} {backend}: exit "
                          f"{code}\n{log}")
                    failures += 1
                    break
                outs[side] = out
            rows += 1
            if len(outs) != 3:
                continue
            worst = 0.0
            for path in sorted(glob.glob(os.path.join(outs["cpu"], "*.npy"))):
                want = np.load(path).astype(np.float64)
                for side in ("cuda", "graph"):
                    got = np.load(os.path.join(outs[side],
                                               os.path.basename(path)))
                    got = got.astype(np.float64)
                    if got.shape != want.shape or not np.all(np.isfinite(got)):
                        worst = float("inf")
                        break
                    if want.size:
                        scale = max(1.0, float(np.max(np.abs(want))))
                        worst = max(worst,
                                    float(np.max(np.abs(got - want))) / scale)
            ok = worst <= tolerance
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name:32s} tokens={tokens:<5d}"
                  f" max rel err {worst:.3g} (tol {tolerance:g})")
    print(f"gpu_compare: {rows} runs, {failures} failures")
    sys.exit(1 if failures or rows == 0 else 0)


if __name__ == "__main__":
    main()
