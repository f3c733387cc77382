#!/usr/bin/env python3
"""How far moe-run and onnxruntime (float32) are from a float64 reference.

    .venv/bin/python bench/f64_reference.py bench/models/mixtral_model_e8k2.onnx \
        --tokens 16,256

A moe-run output that differs from onnxruntime's by more than expected is a
bug only if moe-run is the one far from the exact result. This script runs
the same graph in float64 (onnxruntime, graph optimizations off: its fused
ops are float32-only; Cos and Sin, which have no double kernels, run in
float32 between casts, identically in every run), then prints, per token
count, each float32 result's max |difference| from the float64 one relative
to max(1, max |float64 output|), as bench/moe_layer.py measures `max err`.

Measured on the two-layer MixtralForCausalLM of export_models.py (E=8, top-2,
logits up to 29): at 256 tokens onnxruntime is 2.3e-4 from float64 and
moe-run 2.2e-4 (1.4e-4 from each other); at 16 tokens 0.8e-5 and 1.6e-5.
Float32 rounding through two layers of random weights, not a moe-run bug.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_ort import (ROOT, default_bounds, make_inputs, ort_session,  # noqa: E402
                         save_inputs, tools)

FLOAT, DOUBLE = TensorProto.FLOAT, TensorProto.DOUBLE
# Ops that onnxruntime's CPU provider implements in float32 only.
FLOAT_ONLY = ("Cos", "Sin")


def to_double(model):
    """Rewrites `model` in place to compute in float64."""
    def convert(tensor):
        if tensor.data_type == FLOAT:
            array = numpy_helper.to_array(tensor).astype(np.float64)
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))

    for tensor in model.graph.initializer:
        convert(tensor)
    nodes = []
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                convert(attr.t)
            if node.op_type == "Cast" and attr.name == "to" and attr.i == FLOAT:
                attr.i = DOUBLE
        if node.op_type not in FLOAT_ONLY:
            nodes.append(node)
            continue
        source, result = node.input[0], node.output[0]
        narrow = f"{source}_{node.op_type}_f32"
        nodes.append(onnx.helper.make_node("Cast", [source], [narrow],
                                           to=FLOAT))
        node.input[0] = narrow
        node.output[0] = result + "_f32"
        nodes.append(node)
        nodes.append(onnx.helper.make_node("Cast", [result + "_f32"],
                                           [result], to=DOUBLE))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for info in (list(model.graph.input) + list(model.graph.output) +
                 list(model.graph.value_info)):
        if info.type.tensor_type.elem_type == FLOAT:
            info.type.tensor_type.elem_type = DOUBLE


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--tokens", default="16,256")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = parser.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    moec, moe_run = tools(args.build)
    with tempfile.TemporaryDirectory(prefix="moec-f64-") as work:
        compare(args, tokens, moec, moe_run, work)


def compare(args, tokens, moec, moe_run, work):
    """Prints the table, with the float64 model and plan under `work`."""

    model = onnx.load(args.model)
    to_double(model)
    wide_path = os.path.join(work, "model_f64.onnx")
    onnx.save(model, wide_path, save_as_external_data=True)
    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    options.intra_op_num_threads = args.threads
    wide = ort.InferenceSession(wide_path, options,
                                providers=["CPUExecutionProvider"])
    narrow = ort_session(args.model, args.threads)
    plan = os.path.join(work, "plan.bin")
    subprocess.run([moec, "compile", args.model, "-o", plan,
                    f"--max-tokens={max(tokens)}",
                    *default_bounds(args.model)],
                   check=True)

    header = onnx.load(args.model, load_external_data=False)
    out_name = narrow.get_outputs()[0].name
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in out_name)
    print(f"{'tokens':>6} {'max |f64|':>9} {'ort-f64':>8} {'moe-f64':>8} "
          f"{'moe-ort':>8}")
    for t in tokens:
        feeds = make_inputs(header, t, 1, 1024, np.random.default_rng([0, t]))
        reference = wide.run(None, feeds)[0]
        theirs = narrow.run(None, feeds)[0]
        out_dir = os.path.join(work, f"out_{t}")
        subprocess.run([moe_run, plan, f"--threads={args.threads}",
                        "--output-dir", out_dir] +
                       save_inputs(feeds, work, f"in_{t}"),
                       check=True, capture_output=True)
        ours = np.load(os.path.join(out_dir, safe + ".npy"))
        scale = max(1.0, float(np.max(np.abs(reference))))

        def error(a, b):
            return float(np.max(np.abs(a.astype(np.float64) - b))) / scale

        print(f"{t:>6} {scale:>9.3g} {error(theirs, reference):>8.1e} "
              f"{error(ours, reference):>8.1e} {error(ours, theirs):>8.1e}",
              flush=True)


if __name__ == "__main__":
    main()
