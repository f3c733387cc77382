#!/usr/bin/env python3
"""Checks a vision graph of the multimodal zoo (examples/zoo/vlm/) end to end:
moec compile, then moe-run against onnxruntime and torch.

    check_vision_zoo.py GRAPH.onnx --workdir DIR [--rtol R] [--torch-rtol R]

GRAPH.npz, written by export_vlm.py beside the graph, holds for each image
size g the graph's inputs (`<input>_g<g>`: pixel patches, the grid, patch
positions, interpolation indices and weights, as the exporter's input
preparer computes them from the grid) and torch's outputs. For each size,
two cases run:

- `torch`: the saved inputs; every output must match onnxruntime within
  --rtol and torch's saved output within --torch-rtol;
- `fresh`: the saved integer inputs (they encode the grid and must agree with
  it) with fresh seeded random float inputs (pixels, interpolation weights);
  every output must match onnxruntime within --rtol.

Each size compiles a copy of the graph with static input shapes (those of
its saved inputs): moec's shape bounds do not yet follow the exporter's
symbolic sizes through these graphs (docs/multimodal.md). Inputs the graph
never reads are not the plan's, and only onnxruntime gets them. Tolerance
as test/lib/e2e.py's: max |moe-run - ref| <= rtol * max(1, max |ref|).
Prints one line per case, output and reference; exits 1 if any mismatches.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

from e2e import compare, run
from make_static import make_static


def symbol_bounds(model, cases):
    """The largest size each symbolic input dimension takes in `cases`
    (name -> feeds)."""
    bounds = {}
    for value in model.graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.dim_param and not dim.dim_param.isdigit():
                for feeds in cases.values():
                    size = feeds[value.name].shape[axis]
                    bounds[dim.dim_param] = max(bounds.get(dim.dim_param, 1), size)
    return bounds


def compile_static(args, model, feeds, work):
    """Compiles a copy of the graph whose symbolic input sizes are those of
    `feeds` (make_static.py); returns the plan and its input names."""
    os.makedirs(work, exist_ok=True)
    static = os.path.join(work, "static.onnx")
    # In this process: a Python start per size would be most of the test's
    # time.
    fixed = onnx.load(args.model)
    make_static(fixed, symbol_bounds(model, {"": feeds}))
    onnx.save(fixed, static)
    plan = os.path.join(work, "plan.bin")
    run([args.moec, "compile", static, "-o", plan])
    # Inputs the graph does not read are not the plan's (Qwen's grid_thw
    # and cu_seqlens, with one image).
    inspected = json.loads(run([args.moec, "inspect", plan, "--json"]))
    return plan, {t["name"] for t in inspected["schedules"][0]["tensors"] if t["input"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", dest="moe_run", default="moe-run")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--torch-rtol", dest="torch_rtol", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    reference = os.path.splitext(args.model)[0] + ".npz"
    if not os.path.exists(reference):
        sys.exit(f"check_vision_zoo: {reference}: missing (examples/zoo/vlm/export_vlm.py writes it)")
    model = onnx.load(args.model, load_external_data=False)
    inputs = [i.name for i in model.graph.input]
    outputs = [o.name for o in model.graph.output]
    saved = np.load(reference)
    sizes = sorted({key.rsplit("_g", 1)[1] for key in saved.files})
    cases = {g: {name: saved[f"{name}_g{g}"] for name in inputs} for g in sizes}

    os.makedirs(args.workdir, exist_ok=True)
    session = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    ok = True
    for g in sizes:
        plan, plan_inputs = compile_static(args, model, cases[g], os.path.join(args.workdir, f"g{g}"))
        rng = np.random.default_rng([args.seed, int(g)])
        fresh = {name: (rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v)
                 for name, v in cases[g].items()}
        for label, feeds in (("torch", cases[g]), ("fresh", fresh)):
            work = os.path.join(args.workdir, f"g{g}-{label}")
            os.makedirs(work, exist_ok=True)
            cmd = [args.moe_run, plan, "--output-dir", os.path.join(work, "out"), f"--threads={args.threads}"]
            for name, value in feeds.items():
                if name not in plan_inputs:
                    continue
                path = os.path.join(work, f"in{inputs.index(name)}.npy")
                np.save(path, value)
                cmd += ["--input", f"{name}={path}"]
            run(cmd)
            want = session.run(outputs, feeds)
            for index, name in enumerate(outputs):
                got = np.load(os.path.join(work, "out", f"{name}.npy"))
                ok &= compare(f"size {g} {label}", name, got, want[index], args.rtol, "onnxruntime")
                if label == "torch":
                    ok &= compare(f"size {g} {label}", name, got, saved[f"{name}_g{g}"], args.torch_rtol, "torch")
    if not ok:
        sys.exit(1)
    print(f"check_vision_zoo: {os.path.basename(args.model)} matches onnxruntime and torch")


if __name__ == "__main__":
    main()
