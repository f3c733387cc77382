#!/usr/bin/env python3
"""Builds com.microsoft.QMoE models with MXFP4 experts (quant_type fp4) and
checks that moec dequantizes them exactly.

  gen_qmoe_mxfp4.py check WORKDIR      compare, exit 1 on a difference
  gen_qmoe_mxfp4.py VARIANT OUT.onnx   write a malformed QMoE model (nan-scale,
                                       overflow, bad-shape, no-global,
                                       block-64), for the errors test

The experts start as a gpt-oss checkpoint stores them (transformers' MXFP4
layout: `blocks` uint8 [E, N, K/32, 16], two E2M1 codes a byte, the even k
in the low nibble; `scales` uint8 [E, N, K/32] E8M0 exponents) and are
packed into QMoE's fp4 inputs the way onnxruntime-genai's builder does for
gpt-oss (codes [E, K, N/2], the even n in the low nibble; the scales as
FLOAT8E8M0; global scales [E]). Two models share everything else: the QMoE
one, and a com.microsoft.MoE one whose f32 weights this script decodes
itself (E2M1 value * 2^(s - 127) * global scale, in float64, exact). `check`
compiles both with moec, runs both plans with moe-run on the same inputs
(1, 7 and 32 tokens), and requires bit-identical outputs (the same f32
weights give the same plan), and the MoE model's outputs to match
onnxruntime's (which has no CPU kernel for fp4) within 1e-5 of the largest.
Exponents span 100 to 140 (weights from 2^-28 to 6 * 2^13), one block holds
s = 0 (subnormal f32 weights), and one expert a global scale of 0.75.
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

E, H, I, TOP_K = 4, 64, 32, 2
FLOAT8E8M0 = 24  # TensorProto.DataType (onnx 1.18)
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def checkpoint(rng, n, k):
    """transformers' MXFP4 tensors of one projection: blocks and scales."""
    blocks = rng.integers(0, 256, size=(E, n, k // 32, 16), dtype=np.uint8)
    scales = rng.integers(100, 141, size=(E, n, k // 32), dtype=np.uint8)
    return blocks, scales


def decode(blocks, scales, global_scales):
    """The [E, N, K] weights, from the checkpoint layout, in float64."""
    codes = np.empty(blocks.shape[:-1] + (32,), np.uint8)
    codes[..., 0::2] = blocks & 0x0F
    codes[..., 1::2] = blocks >> 4
    values = E2M1[codes] * np.exp2(scales.astype(np.float64) - 127)[..., None]
    values = values.reshape(blocks.shape[0], blocks.shape[1], -1)
    return values * global_scales.astype(np.float64)[:, None, None]


def pack_for_qmoe(blocks):
    """[E, N, K/32, 16] checkpoint blocks -> QMoE's fp4 codes [E, K, N/2]:
    byte (e, k, j) holds code (e, 2j, k) low and (e, 2j + 1, k) high."""
    e, n, groups, _ = blocks.shape
    codes = np.empty((e, n, groups * 32), np.uint8)  # code (e, n, k)
    codes[..., 0::2] = (blocks & 0x0F).reshape(e, n, -1)
    codes[..., 1::2] = (blocks >> 4).reshape(e, n, -1)
    by_k = codes.transpose(0, 2, 1)  # [E, K, N]
    return (by_k[..., 0::2] | (by_k[..., 1::2] << 4)).astype(np.uint8)


def e8m0(name, scales):
    tensor = helper.make_tensor(name, TensorProto.UINT8, scales.shape,
                                scales.tobytes(), raw=True)
    tensor.data_type = FLOAT8E8M0
    return tensor


def make_models(variant="ok"):
    rng = np.random.default_rng(0)
    fc1_blocks, fc1_scales = checkpoint(rng, 2 * I, H)
    fc2_blocks, fc2_scales = checkpoint(rng, H, I)
    fc1_scales[1, 3, 0] = 0  # 2^-127: subnormal weights
    global1 = np.array([1.0, 0.75, 2.0, 0.5], np.float32)
    global2 = np.array([1.0, 1.0, 0.25, 4.0], np.float32)
    if variant == "nan-scale":
        fc2_scales[2, 5, 0] = 255
    if variant == "overflow":  # 2^127 * 4 * 4.0 is past float32's range
        fc2_scales[3, 0, 0] = 254
        fc2_blocks[3, 0, 0, 0] = 0x66
    bias1 = rng.standard_normal((E, 2 * I)).astype(np.float32)
    bias2 = rng.standard_normal((E, H)).astype(np.float32)
    attrs = dict(k=TOP_K, activation_type="swiglu", swiglu_fusion=1,
                 activation_alpha=1.702, activation_beta=1.0,
                 swiglu_limit=7.0, normalize_routing_weights=1)
    io = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                        ["tokens", H]),
          helper.make_tensor_value_info("router_probs", TensorProto.FLOAT,
                                        ["tokens", E])]
    out = [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                         ["tokens", H])]
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid(
        "com.microsoft", 1)]

    fc1_codes = pack_for_qmoe(fc1_blocks)
    if variant == "bad-shape":
        fc1_codes = fc1_codes[:, :, :-1].copy()
    inits = [numpy_helper.from_array(fc1_codes, "fc1"),
             e8m0("fc1_scales", fc1_scales),
             numpy_helper.from_array(bias1, "fc1_bias"),
             numpy_helper.from_array(pack_for_qmoe(fc2_blocks), "fc2"),
             e8m0("fc2_scales", fc2_scales),
             numpy_helper.from_array(bias2, "fc2_bias"),
             numpy_helper.from_array(global1, "fc1_global"),
             numpy_helper.from_array(global2, "fc2_global")]
    inputs = ["input", "router_probs", "fc1", "fc1_scales", "fc1_bias", "fc2",
              "fc2_scales", "fc2_bias", "", "", "", "", "", "", "",
              "fc1_global", "" if variant == "no-global" else "fc2_global"]
    quant = dict(quant_type="fp4", expert_weight_bits=4,
                 block_size=64 if variant == "block-64" else 32)
    qmoe = helper.make_model(helper.make_graph(
        [helper.make_node("QMoE", inputs, ["output"], name="qmoe",
                          domain="com.microsoft", **attrs, **quant)],
        "qmoe_mxfp4", io, out, inits), opset_imports=opsets)
    qmoe.ir_version = 10
    if variant != "ok":
        return qmoe, None

    w1 = decode(fc1_blocks, fc1_scales, global1)
    w2 = decode(fc2_blocks, fc2_scales, global2)
    # Every decoded weight is an f32 value: the MoE model holds them exactly.
    for w in (w1, w2):
        assert np.array_equal(w.astype(np.float32).astype(np.float64), w)
    moe_inits = [numpy_helper.from_array(w1.astype(np.float32), "fc1"),
                 numpy_helper.from_array(bias1, "fc1_bias"),
                 numpy_helper.from_array(w2.astype(np.float32), "fc2"),
                 numpy_helper.from_array(bias2, "fc2_bias")]
    moe = helper.make_model(helper.make_graph(
        [helper.make_node("MoE", ["input", "router_probs", "fc1", "fc1_bias",
                                  "fc2", "fc2_bias"], ["output"], name="moe",
                          domain="com.microsoft", **attrs)],
        "moe_decoded", io, out, moe_inits), opset_imports=opsets)
    moe.ir_version = 10
    return qmoe, moe


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"gen_qmoe_mxfp4.py: {' '.join(cmd)} failed:\n"
                 f"{result.stderr}")


def check(workdir):
    import onnxruntime as ort

    os.makedirs(workdir, exist_ok=True)
    qmoe, moe = make_models()
    paths = {}
    for name, model in (("qmoe", qmoe), ("moe", moe)):
        paths[name] = os.path.join(workdir, name + ".onnx")
        onnx.save(model, paths[name])
        run(["moec", "compile", paths[name], "-o",
             os.path.join(workdir, name + ".plan"), "--max-tokens", "32",
             "--quiet"])
    session = ort.InferenceSession(paths["moe"],
                                   providers=["CPUExecutionProvider"])
    ok = True
    for tokens in (1, 7, 32):
        rng = np.random.default_rng(tokens)
        feeds = {"input": rng.standard_normal((tokens, H)).astype(np.float32),
                 "router_probs": rng.standard_normal((tokens, E)).astype(
                     np.float32)}
        outputs = {}
        for name in ("qmoe", "moe"):
            step = os.path.join(workdir, f"{name}{tokens}")
            os.makedirs(step, exist_ok=True)
            cmd = ["moe-run", os.path.join(workdir, name + ".plan"),
                   "--output-dir", step]
            for key, value in feeds.items():
                np.save(os.path.join(step, key + ".npy"), value)
                cmd += ["--input", f"{key}={os.path.join(step, key + '.npy')}"]
            run(cmd)
            outputs[name] = np.load(os.path.join(step, "output.npy"))
        (reference,) = session.run(None, feeds)
        same = np.array_equal(outputs["qmoe"], outputs["moe"])
        error = float(np.abs(outputs["moe"] - reference).max())
        scale = max(1.0, float(np.abs(reference).max()))
        good = same and error <= 1e-5 * scale
        ok &= good
        print(("ok" if good else "FAIL") + f" tokens={tokens}: QMoE fp4 "
              f"{'bit-identical to' if same else 'DIFFERS from'} the decoded "
              f"MoE, which is within {error:.2e} of onnxruntime (scale "
              f"{scale:.3g})")
    print("mxfp4: " + ("exact" if ok else "MISMATCH"))
    return 0 if ok else 1


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    if sys.argv[1] == "check":
        return check(sys.argv[2])
    qmoe, _ = make_models(sys.argv[1])
    onnx.save(qmoe, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
