#!/usr/bin/env python3
"""Checks moe-run's com.microsoft.MRotaryEmbedding against its op schema.

  check_mrotary.py MODEL.onnx WORKDIR

MODEL is one MRotaryEmbedding node of gen_contrib_attention.py ("mrotary",
"mrotary-sectioned"). For batch 2 at 1, 7 and 32 tokens, with three distinct
random position streams (temporal, height, width: a text-only prompt has
three equal ones and would not tell the sections apart), moe-run's output
must match, within 1e-5, a numpy reference written from onnxruntime's op
schema: frequency i of the half rotary dimension R/2 takes cos_cache and
sin_cache at the position of one stream, given by mrope_section in
contiguous sections (mrope_layout 0) or interleaved (1: T, but H at
i % 3 == 1 below 3 * section[1] and W at i % 3 == 2 below 3 * section[2]),
then each head's first R features rotate as RotaryEmbedding's do (halves, or
pairs with interleaved 1). Where onnxruntime has the op (1.32 does, 1.23
does not) its output must match too.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

BATCH = 2


def attributes(model):
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return node, attrs


def initializer(model, name):
    for tensor in model.graph.initializer:
        if tensor.name == name:
            return onnx.numpy_helper.to_array(tensor)
    raise SystemExit(f"no initializer {name}")


def stream(section, layout, i):
    if layout == 0:
        return 0 if i < section[0] else 1 if i < section[0] + section[1] else 2
    if i % 3 == 1 and i < 3 * section[1]:
        return 1
    if i % 3 == 2 and i < 3 * section[2]:
        return 2
    return 0


def reference(x, positions, cos_cache, sin_cache, attrs):
    half = cos_cache.shape[1]
    rotary = 2 * half
    streams = [stream(attrs["mrope_section"], attrs.get("mrope_layout", 0), i)
               for i in range(half)]
    # [B, S, R/2]: frequency i at the position of its stream.
    cos = np.stack([cos_cache[positions[a], i]
                    for i, a in enumerate(streams)], -1).astype(np.float64)
    sin = np.stack([sin_cache[positions[a], i]
                    for i, a in enumerate(streams)], -1).astype(np.float64)
    four_d = x.ndim == 4
    if four_d:
        heads = x.transpose(0, 2, 1, 3).astype(np.float64)
    else:
        num_heads = attrs.get("num_heads", 0)
        head = x.shape[2] // num_heads if num_heads else rotary
        heads = x.reshape(x.shape[0], x.shape[1], -1, head).astype(np.float64)
    y = heads.copy()
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    if attrs.get("interleaved", 0):
        x1, x2 = heads[..., 0:rotary:2], heads[..., 1:rotary:2]
        y[..., 0:rotary:2] = x1 * c - x2 * s
        y[..., 1:rotary:2] = x2 * c + x1 * s
    else:
        x1, x2 = heads[..., :half], heads[..., half:rotary]
        y[..., :half] = x1 * c - x2 * s
        y[..., half:rotary] = x2 * c + x1 * s
    if four_d:
        return y.transpose(0, 2, 1, 3)
    return y.reshape(x.shape)


def onnxruntime_output(path, feeds):
    """onnxruntime's output, or None where it lacks the op."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(path,
                                       providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime raises its own types
        if "MRotaryEmbedding" in str(error):
            return None
        raise
    return session.run(["y"], feeds)[0]


def main():
    path, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    model = onnx.load(path)
    node, attrs = attributes(model)
    cos_cache = initializer(model, node.input[2])
    sin_cache = initializer(model, node.input[3])
    plan = os.path.join(workdir, "plan.bin")
    subprocess.run(["moec", "compile", path, "-o", plan,
                    "--max-tokens=32"], check=True)
    shape = [d.dim_value or d.dim_param
             for d in model.graph.input[0].type.tensor_type.shape.dim]
    failures = 0
    with_onnxruntime = False
    for tokens in (1, 7, 32):
        rng = np.random.default_rng(tokens)
        x_shape = [BATCH if d == "batch" else tokens if d == "seq" else d
                   for d in shape]
        x = rng.standard_normal(x_shape).astype(np.float32)
        positions = rng.integers(0, cos_cache.shape[0],
                                 size=(3, BATCH, tokens)).astype(np.int64)
        step = os.path.join(workdir, f"t{tokens}")
        os.makedirs(step, exist_ok=True)
        np.save(os.path.join(step, "x.npy"), x)
        np.save(os.path.join(step, "positions.npy"), positions)
        subprocess.run(["moe-run", plan, "--output-dir", step,
                        "--input", f"x={os.path.join(step, 'x.npy')}",
                        "--input",
                        f"position_ids={os.path.join(step, 'positions.npy')}"],
                       check=True, stdout=subprocess.DEVNULL)
        got = np.load(os.path.join(step, "y.npy"))
        want = reference(x, positions, cos_cache, sin_cache, attrs)
        error = float(np.abs(got - want).max())
        ok = error <= 1e-5 * max(1.0, float(np.abs(want).max()))
        theirs = onnxruntime_output(path, {"x": x, "position_ids": positions})
        if theirs is not None:
            with_onnxruntime = True
            ort_error = float(np.abs(got - theirs).max())
            ok &= ort_error <= 1e-5 * max(1.0, float(np.abs(theirs).max()))
            error = max(error, ort_error)
        failures += not ok
        print(("ok" if ok else "FAIL") + f" tokens={tokens}: max abs error "
              f"{error:.2e}")
    if failures:
        sys.exit(f"mrotary: {failures} case(s) differ")
    print("mrotary: matches the op schema" +
          (" and onnxruntime" if with_onnxruntime else ""))


if __name__ == "__main__":
    main()
