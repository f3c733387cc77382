#!/usr/bin/env python3
"""The MoE benchmark of issue 4: moe-run against onnxruntime on real exports.

    .venv/bin/python bench/moe_layer.py --configs 8x2,64x4 --threads 16

Needs the models of bench/export_models.py in --models (default bench/models)
and a build (--build, default build/). For each configuration (E experts,
top-k) and token count it prints a row per --kinds entry: `layer` (the
MoE layer's loop-form export), `contrib` (the same layer as onnxruntime's
com.microsoft.MoE, which moec imports straight into its MoE ops) and `whole`
(the two-layer model):

  moe-run ms   median of `moe-run --bench` on the plan of the row's file
               (compiled once, --max-tokens = the largest count)
  ort ms       onnxruntime (CPU, same threads) on the same file
  moe-op ms    onnxruntime's fused com.microsoft.MoE on the same weights
               (layer and contrib rows)
  x ort        ort ms / moe-run ms (> 1: moe-run is faster)
  x moe-op     moe-op ms / moe-run ms
  active MB    weight bytes the run must read: every weight outside the
               experts, plus each expert that received a token (from
               `moe-run --stats`: experts with a non-zero count), counted once
  bw %         active bytes / moe-run time, over the measured read bandwidth
               (the figure of merit at 1 token: bound by reading weights)
  gemm %       FLOPs done / moe-run time, over the measured SGEMM rate (the
               figure of merit at 256 tokens): the static-shape MatMuls plus
               2 x rows x weights of each expert's network
  max err      max |moe-run - ort| / max(1, max |ort|) on the output

`layers` says how many MoE layers moec detected (0: the plan runs the generic
graph, see `moec compile --verbose`; its active bytes then count every
expert). This is a benchmark,
never a test: run it on a quiet machine (bench/README.md).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ort import (ROOT, add_common_arguments, default_bounds,  # noqa: E402
                         make_inputs, measure_machine, ort_session,
                         static_flops, time_moe_run, time_ort, tools,
                         weight_bytes)

GATED = ("silu_glu", "gelu_glu", "gelu_tanh_glu", "clamped_swiglu")


def compile_plan(moec, path, plan, max_tokens, extra=()):
    """Compiles `path` (with the moec options `extra`); returns the report's
    MoE layers, or raises CalledProcessError holding moec's stderr."""
    report = plan + ".json"
    subprocess.run([moec, "compile", path, "-o", plan,
                    f"--max-tokens={max_tokens}", *default_bounds(path),
                    "--report", report, *extra], check=True,
                   capture_output=True, text=True)
    with open(report) as f:
        return json.load(f)["moe_layers"]


def expert_weights(layer):
    """Weight elements of one expert network of a reported MoE layer."""
    matrices = 3 if layer["activation"] in GATED else 2
    return matrices * layer["hidden"] * layer["ffn"]


def routed_work(report_layers, stats_path):
    """(expert bytes read, expert FLOPs, experts hit per layer) of one run,
    from moe-run --stats (counts summed over its runs, same input each run).
    """
    with open(stats_path) as f:
        layers = json.load(f)["moe_layers"]
    read = flops = 0
    hits = []
    for stats, layer in zip(layers, report_layers):
        runs = max(1, stats["runs"])
        size = expert_weights(layer)
        hit = sum(1 for n in stats["tokens_per_expert"] if n)
        hits.append(hit)
        read += hit * size * 4
        flops += 2 * size * sum(stats["tokens_per_expert"]) / runs
    return read, flops, hits


def relative_error(got, want):
    scale = max(1.0, float(np.max(np.abs(want))))
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="8x2,64x4",
                        help="comma-separated EXPERTSxTOP_K")
    add_common_arguments(parser, runs=20)
    parser.add_argument("--models", default=os.path.join(ROOT, "bench",
                                                         "models"))
    parser.add_argument("--kinds", default="layer,contrib,whole",
                        help="rows to print: layer, contrib, whole")
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    moec, moe_run = tools(args.build)

    bandwidth, gemm = measure_machine(args.threads)
    print(f"{'model':22} {'layers':>6} {'tokens':>6} {'moe-run ms':>10} "
          f"{'ort ms':>9} {'moe-op ms':>9} {'x ort':>6} {'x moe-op':>8} "
          f"{'active MB':>9} {'bw %':>6} {'gemm %':>6} {'max err':>8}")
    # Plans are the size of the weights: removed when the script ends.
    scratch = tempfile.TemporaryDirectory(prefix="moec-bench-")
    work = scratch.name
    for config in args.configs.split(","):
        experts, top_k = config.split("x")
        suffix = f"e{experts}k{top_k}"
        for kind in args.kinds.split(","):
            prefix = {"layer": "mixtral_layer", "contrib": "contrib_moe",
                      "whole": "mixtral_model"}[kind]
            name = f"{prefix}_{suffix}"
            path = os.path.join(args.models, name + ".onnx")
            if not os.path.exists(path):
                print(f"{name}: {path} is missing; run bench/export_models.py")
                continue
            model = onnx.load(path, load_external_data=False)
            plan = os.path.join(work, name + ".bin")
            report_layers = compile_plan(moec, path, plan, max(tokens))
            session = ort_session(path, args.threads)
            contrib = None
            if kind == "contrib":
                contrib = session
            elif kind == "layer":
                contrib_path = os.path.join(args.models,
                                            f"contrib_moe_{suffix}.onnx")
                if os.path.exists(contrib_path):
                    contrib = ort_session(contrib_path, args.threads)
            all_weights = weight_bytes(model)
            expert_total = sum(int(layer["experts"]) * expert_weights(layer)
                               * 4 for layer in report_layers)
            for t in tokens:
                rng = np.random.default_rng([0, t])
                feeds = make_inputs(model, t, 1, 1024, rng)
                stats = os.path.join(work, f"{name}_{t}.json")
                ours = time_moe_run(moe_run, plan, feeds, args.threads,
                                    args.runs, work, f"{name}_{t}", stats)
                theirs, outputs = time_ort(session, feeds, args.runs)
                op = float("nan")
                if contrib is session:
                    op = theirs
                elif contrib is not None:
                    hidden = next(iter(feeds.values()))
                    op, _ = time_ort(contrib, {
                        "hidden_states": hidden.reshape(-1, hidden.shape[-1])
                    }, args.runs)
                read, flops, _ = routed_work(report_layers, stats)
                active = all_weights - expert_total + read
                flops += static_flops(model, feeds)
                out_name = session.get_outputs()[0].name
                safe = "".join(c if c.isalnum() or c in "._-" else "_"
                               for c in out_name)
                got = np.load(os.path.join(work, f"{name}_{t}", safe + ".npy"))
                error = relative_error(got, outputs[0])
                print(f"{name:22} {len(report_layers):>6} {t:>6} "
                      f"{ours * 1e3:>10.3f} {theirs * 1e3:>9.3f} "
                      f"{op * 1e3:>9.3f} {theirs / ours:>6.2f} "
                      f"{op / ours:>8.2f} {active / 1e6:>9.1f} "
                      f"{100 * active / bandwidth / ours:>6.1f} "
                      f"{100 * flops / gemm / ours:>6.1f} {error:>8.1e}",
                      flush=True)


if __name__ == "__main__":
    main()
