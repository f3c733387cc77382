#!/usr/bin/env python3
"""The error of narrowed weights against f32 on the zoo's language models.

    bench/narrow_error.py [--moec build/bin/moec] [--moe-run build/bin/moe-run]
                          [--workdir DIR] [--dtypes bf16,int8,int4]

For each whole model (examples/mixtral-tiny.onnx and the zoo's
`*_causal_lm_hf.onnx`) the script compiles an f32 plan and one plan per
--weight-dtype (which narrows the experts and every dense matrix), runs all
of them with moe-run on the same seeded inputs (test/lib/e2e.py's
make_inputs, 1, 7 and 32 tokens) and prints, per narrowed plan, the largest
logit error relative to the f32 logits' scale (max |narrowed - f32| / max
|f32|), the median over token positions of each position's largest error
(the maximum is one position where a router picked another expert), and
the share of token positions whose argmax agrees. For the zoo's
generation pair it compiles generation plans and compares the greedy ids of
the reference prompts (examples/zoo/v5/mixtral_generation_greedy.json) with
the f32 plan's and with transformers': ids matching in full, and the first
new token that differs. Prints a Markdown table (bench/README.md).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "lib"))
import e2e  # noqa: E402

MODELS = ["examples/mixtral-tiny.onnx",
          "examples/zoo/v5/mixtral_causal_lm_hf.onnx",
          "examples/zoo/v5/olmoe_causal_lm_hf.onnx",
          "examples/zoo/v5/qwen3_moe_causal_lm_hf.onnx"]
PAIR = ("examples/zoo/v5/mixtral_generation_decode.onnx",
        "examples/zoo/v5/mixtral_generation_prefill.onnx",
        "examples/zoo/v5/mixtral_generation_greedy.json")


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


def compile_plan(args, model, dtype, out, extra=()):
    cmd = [args.moec, "compile", model, "-o", out, "--max-tokens=32",
           "--report", out + ".json"] + list(extra)
    if dtype != "f32":
        cmd.append(f"--weight-dtype={dtype}")
    run(cmd)
    with open(out + ".json") as f:
        report = json.load(f)
    return report.get("narrowed_dense_matrices",
                      report.get("int4", {}).get("dense_matrices", 0))


def logits_of(args, plan, feeds, workdir):
    inputs = []
    for name, value in feeds.items():
        path = os.path.join(workdir, f"in_{name.replace('/', '_')}.npy")
        np.save(path, value)
        inputs += ["--input", f"{name}={path}"]
    out = os.path.join(workdir, "out")
    run([args.moe_run, plan, "--threads", "1", "--output-dir", out] + inputs)
    return np.load(os.path.join(out, "logits.npy"))


def model_rows(args):
    rows = []
    for rel in MODELS:
        model_path = os.path.join(ROOT, rel)
        name = os.path.basename(rel)[:-5]
        workdir = os.path.join(args.workdir, name)
        os.makedirs(workdir, exist_ok=True)
        model = onnx.load(model_path, load_external_data=False)
        plans = {}
        for dtype in ["f32"] + args.dtypes:
            plan = os.path.join(workdir, f"{dtype}.plan")
            dense = compile_plan(args, model_path, dtype, plan)
            plans[dtype] = (plan, dense)
        errors = {d: [0.0, 0, 0, []] for d in args.dtypes}
        for tokens in (1, 7, 32):
            rng = np.random.default_rng([0, tokens])
            feeds = e2e.make_inputs(model, tokens, 1, 64, rng)
            want = logits_of(args, plans["f32"][0], feeds, workdir)
            scale = float(np.max(np.abs(want)))
            for dtype in args.dtypes:
                got = logits_of(args, plans[dtype][0], feeds, workdir)
                error = float(np.max(np.abs(got.astype(np.float64) - want)))
                e = errors[dtype]
                e[0] = max(e[0], error / scale)
                e[3] += list(np.max(np.abs(got.astype(np.float64) - want),
                                    axis=-1).ravel() / scale)
                e[1] += int(np.sum(np.argmax(got, -1) == np.argmax(want, -1)))
                e[2] += int(np.prod(want.shape[:-1]))
        for dtype in args.dtypes:
            e = errors[dtype]
            rows.append(f"| {name} | {dtype} | {plans[dtype][1]} | "
                        f"{e[0]:.2e} | {np.median(e[3]):.2e} | "
                        f"{e[1]}/{e[2]} | - |")
    return rows


def greedy_ids(args, plan, prompt, steps):
    out = run([args.moe_run, plan, "--threads", "1", "--prompt-ids",
               ",".join(map(str, prompt)), "--max-new-tokens", str(steps)])
    return [int(t) for t in out.split()]


def pair_rows(args):
    decode, prefill, greedy = (os.path.join(ROOT, p) for p in PAIR)
    with open(greedy) as f:
        cases = json.load(f)["cases"]
    workdir = os.path.join(args.workdir, "generation")
    os.makedirs(workdir, exist_ok=True)
    ids = {}
    dense = {}
    for dtype in ["f32"] + args.dtypes:
        plan = os.path.join(workdir, f"{dtype}.plan")
        cmd = [args.moec, "compile", decode, "--prefill", prefill,
               "--max-seq", "48", "-o", plan, "--report", plan + ".json"]
        if dtype != "f32":
            cmd.append(f"--weight-dtype={dtype}")
        run(cmd)
        with open(plan + ".json") as f:
            dense[dtype] = json.load(f).get("narrowed_dense_matrices", 0)
        ids[dtype] = [greedy_ids(args, plan, c["prompt"], len(c["new_ids"]))
                      for c in cases]
    if ids["f32"] != [c["new_ids"] for c in cases]:
        print("note: the f32 plan's greedy ids differ from transformers'")
    rows = []
    for dtype in args.dtypes:
        same = sum(a == b for a, b in zip(ids[dtype], ids["f32"]))
        first = []
        for a, b in zip(ids[dtype], ids["f32"]):
            diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
            first.append(str(diff[0]) if diff else "-")
        rows.append(f"| mixtral_generation (pair) | {dtype} | {dense[dtype]} "
                    f"| - | - | - | {same}/{len(cases)} prompts identical "
                    f"(first differing new id: {', '.join(first)}) |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", default="moe-run")
    parser.add_argument("--workdir", default="/tmp/narrow_error")
    parser.add_argument("--dtypes", default="bf16,int8")
    args = parser.parse_args()
    args.dtypes = args.dtypes.split(",")
    print("| model | weights | dense matrices narrowed | max logit error / "
          "max abs f32 logit | median over positions | argmax agrees | "
          "greedy ids vs f32 |")
    print("|---|---|---:|---:|---:|---:|---|")
    for row in model_rows(args) + pair_rows(args):
        print(row)


if __name__ == "__main__":
    main()
