#!/usr/bin/env python3
"""Checks moe-run's com.microsoft.MultiHeadAttention against onnxruntime.

  check_mha.py MODEL.onnx WORKDIR

MODEL is one MultiHeadAttention node of gen_contrib_attention.py ("mha",
"mha-cross", "mha-plain"), whose graph inputs name their dimensions: batch,
seq (query rows), past (cached positions), total (past + seq) and kv (key
rows of cross-attention). For batch 2 and each case of (seq, past or kv)
below, fresh random inputs (key_padding_mask: 1 with probability 0.8, key 0
always kept) run through the plan (`moe-run --input`) and onnxruntime's CPU
kernel; every output must match within 1e-5 of its largest value.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

BATCH = 2
# (seq, other): other is the past's length, or the key rows of cross and
# plain attention. A decode step, a prompt with and without a past, and one
# query row against many keys.
CASES = ((1, 9), (7, 5), (7, 7), (32, 3))


def input_arrays(model, seq, other, rng):
    sizes = {"batch": BATCH, "seq": seq, "past": other, "kv": other,
             "total": other + seq}
    feeds = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else sizes[d.dim_param]
                 for d in tensor.shape.dim]
        if tensor.elem_type == onnx.TensorProto.FLOAT:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            mask = (rng.random(shape) < 0.8).astype(np.int32)
            mask[..., 0] = 1
            feeds[value.name] = mask
    return feeds


def main():
    path, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    model = onnx.load(path)
    plan = os.path.join(workdir, "plan.bin")
    subprocess.run(["moec", "compile", path, "-o", plan, "--max-tokens=64"],
                   check=True)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    failures = 0
    for seq, other in CASES:
        rng = np.random.default_rng(seq * 100 + other)
        feeds = input_arrays(model, seq, other, rng)
        step = os.path.join(workdir, f"s{seq}_{other}")
        os.makedirs(step, exist_ok=True)
        command = ["moe-run", plan, "--output-dir", step]
        for name, array in feeds.items():
            np.save(os.path.join(step, f"in_{name}.npy"), array)
            command += ["--input",
                        f"{name}={os.path.join(step, f'in_{name}.npy')}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        theirs = session.run(names, feeds)
        worst = 0.0
        ok = True
        for name, want in zip(names, theirs):
            got = np.load(os.path.join(step, f"{name}.npy"))
            if got.shape != want.shape:
                print(f"FAIL seq={seq} other={other}: {name} has shape "
                      f"{got.shape}, onnxruntime {want.shape}")
                ok = False
                continue
            error = float(np.abs(got - want).max()) / max(
                1.0, float(np.abs(want).max()))
            worst = max(worst, error)
            ok &= error <= 1e-5
        failures += not ok
        print(("ok" if ok else "FAIL") + f" seq={seq} other={other}: "
              f"max relative error {worst:.2e}")
    if failures:
        sys.exit(f"mha: {failures} case(s) differ from onnxruntime")
    print("mha: matches onnxruntime")


if __name__ == "__main__":
    main()
