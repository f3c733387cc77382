#!/usr/bin/env python3
"""End-to-end check of one ONNX model: moec compile -> moe-run vs onnxruntime.

For every token count, makes fresh random inputs (seeded by the token count and
--seed), runs the compiled plan with moe-run and the same ONNX file with
onnxruntime (CPU), and compares every output. Exits 1 with a report on the first
mismatch, 0 when all match.

Shapes: a graph input's dynamic dimensions take the token count, except that
when an input has two or more dynamic dimensions the first is the batch
(--batch, default 1). Integer inputs (token ids) are uniform in [0, --int-high).

Tolerance: float32 outputs must satisfy max|moe-run - ort| <= rtol * max(1,
max|ort|) (default rtol 1e-5): a relative bound on the output's scale, since
elementwise relative error is meaningless near zero. Integer and bool outputs
must be equal.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

NUMPY_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.BOOL: np.bool_,
}


def graph_inputs(model):
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def make_inputs(model, tokens, batch, int_high, rng):
    feeds = {}
    for value in graph_inputs(model):
        tensor = value.type.tensor_type
        dims = list(tensor.shape.dim)
        dynamic = [i for i, d in enumerate(dims) if not d.HasField("dim_value")]
        shape = []
        for i, d in enumerate(dims):
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            elif len(dynamic) >= 2 and i == dynamic[0]:
                shape.append(batch)
            else:
                shape.append(tokens)
        dtype = NUMPY_TYPES.get(tensor.elem_type)
        if dtype is None:
            sys.exit(f"e2e: input {value.name}: unsupported element type "
                     f"{tensor.elem_type}")
        if dtype == np.float32:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        elif dtype == np.bool_:
            feeds[value.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[value.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"e2e: command failed ({result.returncode}): {' '.join(cmd)}\n"
                 f"{result.stdout}{result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--moec", default="moec")
    parser.add_argument("--moe-run", dest="moe_run", default="moe-run")
    parser.add_argument("--tokens", default="1,7,32",
                        help="comma-separated token counts")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--int-high", type=int, default=16)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir")
    args = parser.parse_args()

    model = onnx.load(args.model)
    workdir = args.workdir or tempfile.mkdtemp(prefix="moec-e2e-")
    os.makedirs(workdir, exist_ok=True)
    plan = os.path.join(workdir, "plan.bin")
    run([args.moec, "compile", args.model, "-o", plan,
         f"--max-tokens={args.max_tokens}"])

    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(args.model, options,
                                   providers=["CPUExecutionProvider"])
    output_names = [o.name for o in session.get_outputs()]

    failures = 0
    for tokens in [int(t) for t in args.tokens.split(",")]:
        rng = np.random.default_rng([args.seed, tokens])
        feeds = make_inputs(model, tokens, args.batch, args.int_high, rng)
        expected = session.run(output_names, feeds)

        step = os.path.join(workdir, f"t{tokens}")
        os.makedirs(step, exist_ok=True)
        cmd = [args.moe_run, plan, "--output-dir", step,
               f"--threads={args.threads}"]
        for name, value in feeds.items():
            path = os.path.join(step, f"in_{len(cmd)}.npy")
            np.save(path, value)
            cmd += ["--input", f"{name}={path}"]
        run(cmd)

        for name, want in zip(output_names, expected):
            safe = "".join(c if c.isalnum() or c in "._-" else "_"
                           for c in name)
            got = np.load(os.path.join(step, safe + ".npy"))
            if got.shape != want.shape or got.dtype != want.dtype:
                print(f"MISMATCH tokens={tokens} output {name}: got "
                      f"{got.dtype}{list(got.shape)}, onnxruntime "
                      f"{want.dtype}{list(want.shape)}")
                failures += 1
                continue
            if want.dtype.kind == "f":
                error = float(np.max(np.abs(got.astype(np.float64) - want)))\
                    if want.size else 0.0
                scale = max(1.0, float(np.max(np.abs(want)))) \
                    if want.size else 1.0
                ok = error <= args.rtol * scale
                status = "ok" if ok else "MISMATCH"
                print(f"{status} tokens={tokens} output {name}"
                      f"{list(want.shape)}: max abs error {error:.3g} "
                      f"(scale {scale:.3g}, limit {args.rtol * scale:.3g})")
            else:
                ok = np.array_equal(got, want)
                print(f"{'ok' if ok else 'MISMATCH'} tokens={tokens} output "
                      f"{name}{list(want.shape)}: exact")
            failures += 0 if ok else 1
    if failures:
        sys.exit(f"e2e: {failures} output(s) differ from onnxruntime")
    print(f"e2e: {os.path.basename(args.model)} matches onnxruntime")


if __name__ == "__main__":
    main()
