#!/usr/bin/env python3
"""Builds int4/int8 com.microsoft test models, checked against onnxruntime.

    gen_contrib_quant.py VARIANT OUT.onnx

Writes a one-node model of onnxruntime's MatMulNBits, GatherBlockQuantized
or QMoE for VARIANT (random quantized weights as initializers) to OUT.onnx,
and, except for invalid variants, OUT.ref.onnx: the same graph in float ops
on the weights dequantized here in NumPy (MatMul, Gather, or
com.microsoft.MoE), written independently of moec's C++ dequantization.

Kinds of variant:
  ort        onnxruntime 1.23's kernel computes the op's spec on it: the script
             runs the model and its reference on random inputs and exits
             non-zero unless they agree, so that the fixture exists only if
             the reference (hence the dequantization) is onnxruntime's.
  ref        onnxruntime 1.23's CPU kernel departs from the spec or cannot
             run it (QMoE always renormalises the routing weights, requires
             fused SwiGLU and misreads blockwise fc2 scales where hidden and
             inter sizes differ; GatherBlockQuantized reads 4-bit zero points
             without each row's padding): tests compare with OUT.ref.onnx.
  structure  valid, but neither onnxruntime kernel on CPU runs the reference
             (fc3): onnx's checker only.
  invalid    malformed on purpose, for the import error tests.
"""

import argparse
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
MS = "com.microsoft"

# MatMulNBits: K not a multiple of 32 where a variant says so.
M_K, M_N = 100, 24
# GatherBlockQuantized: a table of V rows of H values.
G_V, G_H = 40, 64
# QMoE: hidden 32, intermediate 64 (they differ on purpose), 4 experts.
Q_H, Q_I, Q_E = 32, 64, 4

VARIANTS = {
    # MatMulNBits (A [tokens, K] float32, accuracy_level 0: float32 exact).
    "mnb-4bit-b32": ("ort", dict(op="mnb", bits=4, block=32)),
    "mnb-4bit-b16-k64": ("ort", dict(op="mnb", bits=4, block=16, k=64)),
    "mnb-4bit-b32-zp-bias": ("ort", dict(op="mnb", bits=4, block=32,
                                         zp="uint8", bias=True)),
    "mnb-4bit-b128-zp-k300": ("ort", dict(op="mnb", bits=4, block=128,
                                          k=300, zp="uint8", bias=True)),
    "mnb-4bit-b32-fzp": ("ort", dict(op="mnb", bits=4, block=32,
                                     zp="float")),
    "mnb-8bit-b32": ("ort", dict(op="mnb", bits=8, block=32)),
    "mnb-8bit-b32-zp-bias": ("ort", dict(op="mnb", bits=8, block=32,
                                         zp="uint8", bias=True)),
    "mnb-8bit-b16-1d": ("ort", dict(op="mnb", bits=8, block=16, flat=True)),
    "mnb-4bit-gidx": ("ort", dict(op="mnb", bits=4, block=32, k=64,
                                  gidx="identity")),
    "mnb-4bit-acc4": ("ort", dict(op="mnb", bits=4, block=32, zp="uint8",
                                  accuracy=4)),
    "mnb-8bit-b32-acc4": ("ort", dict(op="mnb", bits=8, block=32, bias=True,
                                      accuracy=4)),
    # GatherBlockQuantized (uint8 data, ids [tokens]).
    "gbq-4bit-b16": ("ort", dict(op="gbq", bits=4, block=16)),
    "gbq-4bit-b16-zp": ("ort", dict(op="gbq", bits=4, block=16, zp="uint8")),
    "gbq-4bit-b32-int32": ("ort", dict(op="gbq", bits=4, block=32,
                                       index_type=np.int32)),
    "gbq-8bit-b32-zp": ("ort", dict(op="gbq", bits=8, block=32, zp="uint8")),
    "gbq-8bit-b128-h100": ("ort", dict(op="gbq", bits=8, block=128, h=100)),
    "gbq-4bit-b16-zp-odd": ("ref", dict(op="gbq", bits=4, block=16, h=48,
                                        zp="uint8", lead=3)),
    # onnxruntime-genai's tied embeddings: the lm_head's MatMulNBits weight,
    # reshaped to [V, H / 2], is GatherBlockQuantized's data too.
    "tied-embeddings-4bit": ("ort", dict(op="tied", bits=4, block=32)),
    # QMoE (E 4, hidden 32, inter 64, k 2; router logits as an input).
    # 4 bits per row: onnxruntime 1.23.2 is exact on AVX2 CPUs but not on
    # AVX-512 ones (an AMD EPYC with AVX-512: a median relative error of
    # 0.47), so the reference model decides.
    "qmoe-swiglu-4bit": ("ref", dict(op="qmoe", bits=4, act="swiglu",
                                     fusion=1, normalize=1)),
    "qmoe-swiglu-8bit": ("ort", dict(op="qmoe", bits=8, act="swiglu",
                                     fusion=1, normalize=1)),
    "qmoe-swiglu-4bit-b16": ("ort", dict(op="qmoe", bits=4, block=16,
                                         act="swiglu", fusion=1,
                                         normalize=1)),
    "qmoe-swiglu-8bit-b32": ("ref", dict(op="qmoe", bits=8, block=32,
                                         act="swiglu", fusion=1,
                                         normalize=1)),
    "qmoe-relu-4bit": ("ref", dict(op="qmoe", bits=4, act="relu")),
    "qmoe-relu-4bit-zp": ("ref", dict(op="qmoe", bits=4, act="relu",
                                      zp=True)),
    "qmoe-silu-8bit-b32-zp": ("ref", dict(op="qmoe", bits=8, block=32,
                                          act="silu", zp=True, bias=False,
                                          normalize=1)),
    "qmoe-gptoss-4bit-b32-zp": ("ref", dict(op="qmoe", bits=4, block=32,
                                            act="swiglu", fusion=1, k=4,
                                            zp=True, alpha=1.702, beta=1.0,
                                            limit=7.0)),
    # As onnxruntime-genai's builder writes it: empty zero point inputs up to
    # #13, which onnxruntime 1.23's schema (11 inputs) refuses.
    "qmoe-builder-inputs": ("ref", dict(op="qmoe", bits=4, block=32,
                                        act="swiglu", fusion=1, normalize=1,
                                        alpha=1.702, beta=1.0, limit=7.0,
                                        pad_inputs=14)),
    "qmoe-swiglu-4bit-3d": ("ref", dict(op="qmoe", bits=4, act="swiglu",
                                        fusion=1, normalize=1, rank=3)),
    "qmoe-swiglu-fc3-8bit": ("structure", dict(op="qmoe", bits=8,
                                               act="swiglu", fusion=0,
                                               fc3=True)),
    # Malformed, one defect each.
    "mnb-bits3": ("invalid", dict(op="mnb", bits=3, block=32, blob=12)),
    "mnb-bad-b-shape": ("invalid", dict(op="mnb", bits=4, block=32,
                                        blob=17)),
    "mnb-bad-scales": ("invalid", dict(op="mnb", bits=4, block=32,
                                       scale_blocks=3)),
    "mnb-bad-zp": ("invalid", dict(op="mnb", bits=4, block=32, zp="uint8",
                                   zp_cols=4)),
    "mnb-block24": ("invalid", dict(op="mnb", bits=4, block=24, blob=12)),
    "mnb-no-k": ("invalid", dict(op="mnb", bits=4, block=32, drop="K")),
    "mnb-computed-b": ("invalid", dict(op="mnb", bits=4, block=32,
                                       b_input=True)),
    "mnb-gidx-reordered": ("invalid", dict(op="mnb", bits=4, block=32, k=64,
                                           gidx="reordered")),
    "mnb-gidx-zp": ("invalid", dict(op="mnb", bits=4, block=32, k=64,
                                    gidx="identity", zp="uint8")),
    "mnb-unknown-attr": ("invalid", dict(op="mnb", bits=4, block=32,
                                         extra=dict(transB=1))),
    "gbq-gather-axis-1": ("invalid", dict(op="gbq", bits=4, block=16,
                                          extra=dict(gather_axis=1))),
    "gbq-bad-zp": ("invalid", dict(op="gbq", bits=4, block=16, zp="uint8",
                                   zp_cols=3)),
    "gbq-int8-data": ("invalid", dict(op="gbq", bits=8, block=32,
                                      data_type=np.int8)),
    "qmoe-bits2": ("invalid", dict(op="qmoe", bits=4, act="swiglu", fusion=1,
                                   extra=dict(expert_weight_bits=2))),
    "qmoe-fp4": ("invalid", dict(op="qmoe", bits=4, act="swiglu", fusion=1,
                                 extra=dict(quant_type="fp4"))),
    "qmoe-router-weights": ("invalid", dict(op="qmoe", bits=4, act="swiglu",
                                            fusion=1, router_weights=True)),
    "qmoe-bad-fc2-scales": ("invalid", dict(op="qmoe", bits=4, block=16,
                                            act="swiglu", fusion=1,
                                            fc2_scale_blocks=2)),
    "qmoe-block64": ("invalid", dict(op="qmoe", bits=4, block=64,
                                     act="swiglu", fusion=1)),
    "qmoe-missing-scales": ("invalid", dict(op="qmoe", bits=4, act="swiglu",
                                            fusion=1, drop_fc2_scales=True)),
}


def pack(codes, bits):
    """Packs unsigned codes along the last axis, low bits first (padding the
    axis with zero codes to whole bytes)."""
    per_byte = 8 // bits
    pad = (-codes.shape[-1]) % per_byte
    codes = np.concatenate(
        [codes, np.zeros(codes.shape[:-1] + (pad,), codes.dtype)], axis=-1)
    packed = np.zeros(codes.shape[:-1] + (codes.shape[-1] // per_byte,),
                      np.uint8)
    for i in range(per_byte):
        packed |= (codes[..., i::per_byte].astype(np.uint8) << (i * bits))
    return packed


def dequantize(codes, scales, zero_points, block):
    """(code - zero_point) * scale in float32, blocks of `block` along the
    last axis of codes [..., cols] (scales, zero_points [..., blocks])."""
    cols = codes.shape[-1]
    s = np.repeat(scales, block, axis=-1)[..., :cols]
    z = np.repeat(zero_points, block, axis=-1)[..., :cols]
    return ((codes.astype(np.float32) - z.astype(np.float32)) *
            s).astype(np.float32)


def model(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "quant", inputs, outputs, initializers)
    return helper.make_model(
        graph, ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET),
                       helper.make_opsetid(MS, 1)])


def init(name, value):
    return numpy_helper.from_array(np.ascontiguousarray(value), name)


def make_matmul_nbits(cfg, rng):
    k, n, bits, block = cfg.get("k", M_K), M_N, cfg["bits"], cfg["block"]
    blocks = -(-k // block)
    blob = cfg.get("blob", block * bits // 8)
    levels = 2 ** min(bits, 8)
    codes = rng.integers(0, levels, (n, blocks * block))
    if bits in (2, 4, 8) and blob == block * bits // 8:
        b = pack(codes, bits).reshape(n, blocks, blob)
    else:
        b = rng.integers(0, 256, (n, blocks, blob)).astype(np.uint8)
    # Scales keep dequantized sums of K products near 1.
    scale_blocks = cfg.get("scale_blocks", blocks)
    scales = (rng.uniform(0.5, 1.5, (n, scale_blocks)) /
              (levels / 2 * np.sqrt(k))).astype(np.float32)
    zp_float = np.full((n, blocks), levels // 2, np.float32)
    inputs = ["A", "B", "scales"]
    inits = [init("scales", scales.reshape(-1) if cfg.get("flat") else
                  scales)]
    if cfg.get("zp") == "uint8":
        zp_codes = rng.integers(0, levels, (n, blocks))
        zp_float = zp_codes.astype(np.float32)
        zp = pack(zp_codes, bits)
        if "zp_cols" in cfg:
            zp = rng.integers(0, 256, (n, cfg["zp_cols"])).astype(np.uint8)
        inputs.append("zero_points")
        inits.append(init("zero_points", zp))
    elif cfg.get("zp") == "float":
        zp_float = rng.uniform(0, levels - 1, (n, blocks)).astype(np.float32)
        inputs.append("zero_points")
        inits.append(init("zero_points", zp_float))
    if cfg.get("gidx"):
        inputs += [""] * (4 - len(inputs)) + ["g_idx"]
        g_idx = (np.arange(k) // block).astype(np.int32)
        if cfg["gidx"] == "reordered":
            g_idx = g_idx[::-1].copy()
        inits.append(init("g_idx", g_idx))
    bias = None
    if cfg.get("bias"):
        bias = rng.standard_normal(n).astype(np.float32)
        inputs += [""] * (5 - len(inputs)) + ["bias"]
        inits.append(init("bias", bias))
    graph_inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT,
                                                  ["tokens", k])]
    if cfg.get("b_input"):
        graph_inputs.append(helper.make_tensor_value_info(
            "B", TensorProto.UINT8, list(b.shape)))
    else:
        inits.append(init("B", b))
    attrs = dict(K=k, N=n, bits=bits, block_size=block,
                 accuracy_level=cfg.get("accuracy", 0))
    if cfg.get("drop"):
        del attrs[cfg["drop"]]
    attrs.update(cfg.get("extra", {}))
    outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT,
                                             ["tokens", n])]
    node = helper.make_node("MatMulNBits", inputs, ["Y"], name="matmul",
                            domain=MS, **attrs)
    quant = model([node], graph_inputs, outputs, inits)
    if cfg["invalid"]:
        return quant, None

    # Reference: MatMul by the [K, N] dequantized weight (+ Add).
    w = dequantize(codes, scales.reshape(n, -1)[:, :blocks], zp_float,
                   block)[:, :k]
    ref_inits = [init("W", w.T)]
    ref_nodes = [helper.make_node("MatMul", ["A", "W"],
                                  ["Y" if bias is None else "AW"])]
    if bias is not None:
        ref_inits.append(init("bias", bias))
        ref_nodes.append(helper.make_node("Add", ["AW", "bias"], ["Y"]))
    return quant, model(ref_nodes, graph_inputs[:1], outputs, ref_inits)


def make_gather_block_quantized(cfg, rng):
    bits, block = cfg["bits"], cfg["block"]
    h, lead = cfg.get("h", G_H), cfg.get("lead")
    shape = (G_V, h) if lead is None else (G_V, lead, h)
    blocks = -(-h // block)
    levels = 2 ** bits
    codes = rng.integers(0, levels, shape)
    data = pack(codes, bits).astype(cfg.get("data_type", np.uint8))
    scales = rng.uniform(0.01, 0.02, shape[:-1] + (blocks,)).astype(
        np.float32)
    zp_float = np.full(scales.shape, levels // 2, np.float32)
    inputs = ["data", "ids", "scales"]
    inits = [init("data", data), init("scales", scales)]
    if cfg.get("zp"):
        zp_codes = rng.integers(0, levels, scales.shape)
        zp_float = zp_codes.astype(np.float32)
        zp = pack(zp_codes, bits)  # each row padded to whole bytes
        if "zp_cols" in cfg:
            zp = rng.integers(0, 256, shape[:-1] + (cfg["zp_cols"],)).astype(
                np.uint8)
        inputs.append("zero_points")
        inits.append(init("zero_points", zp))
    attrs = dict(bits=bits, block_size=block, gather_axis=0,
                 quantize_axis=len(shape) - 1)
    attrs.update(cfg.get("extra", {}))
    index_type = cfg.get("index_type", np.int64)
    ids = helper.make_tensor_value_info(
        "ids", helper.np_dtype_to_tensor_dtype(np.dtype(index_type)),
        ["tokens"])
    outputs = [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["tokens"] + list(shape[1:]))]
    node = helper.make_node("GatherBlockQuantized", inputs, ["y"],
                            name="embed", domain=MS, **attrs)
    quant = model([node], [ids], outputs, inits)
    if cfg["invalid"]:
        return quant, None
    table = dequantize(codes, scales, zp_float, block)
    ref = model([helper.make_node("Gather", ["table", "ids"], ["y"])], [ids],
                outputs, [init("table", table)])
    return quant, ref


def make_tied_embeddings(cfg, rng):
    bits, block = cfg["bits"], cfg["block"]
    vocab, hidden = G_V, G_H
    blocks, blob = hidden // block, block * bits // 8
    codes = rng.integers(0, 2 ** bits, (vocab, hidden))
    b = pack(codes, bits).reshape(vocab, blocks, blob)
    scales = rng.uniform(0.01, 0.02, (vocab, blocks)).astype(np.float32)
    shape = np.array([vocab, blocks * blob], np.int64)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["tokens"])
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                             ["tokens", vocab])]
    nodes = [
        helper.make_node("Reshape", ["B", "shape"], ["data"], name="reshape"),
        helper.make_node("GatherBlockQuantized", ["data", "ids", "scales"],
                         ["hidden"], name="embed", domain=MS, bits=bits,
                         block_size=block, gather_axis=0, quantize_axis=1),
        helper.make_node("MatMulNBits", ["hidden", "B", "scales"], ["logits"],
                         name="lm_head", domain=MS, K=hidden, N=vocab,
                         bits=bits, block_size=block, accuracy_level=0)]
    quant = model(nodes, [ids], outputs,
                  [init("B", b), init("shape", shape), init("scales", scales)])
    table = dequantize(codes, scales, np.full(scales.shape, 2 ** (bits - 1)),
                       block)
    ref = model([helper.make_node("Gather", ["table", "ids"], ["hidden"]),
                 helper.make_node("MatMul", ["hidden", "table_t"],
                                  ["logits"])],
                [ids], outputs,
                [init("table", table), init("table_t", table.T)])
    return quant, ref


def quantize_experts(cfg, rng, experts, rows, cols):
    """Random QMoE weight of [experts, rows, cols] codes: the packed input,
    its scales and zero points (or None) and the dequantized weights."""
    bits, block = cfg["bits"], cfg.get("block", 0)
    levels = 2 ** bits
    blocks = max(cols // block, 1) if block else 1
    codes = rng.integers(0, levels, (experts, rows, cols))
    scales = (rng.uniform(0.5, 1.5, (experts, rows, blocks)) /
              (levels / 2 * np.sqrt(cols))).astype(np.float32)
    zp_codes = np.full(scales.shape, levels // 2)
    zero_points = None
    if cfg.get("zp"):
        zp_codes = rng.integers(0, levels, scales.shape)
        # Per row the zero points pack along the rows, with blocks along each
        # row's blocks.
        zero_points = (pack(zp_codes, bits) if block else
                       pack(zp_codes[:, :, 0], bits))
    w = dequantize(codes, scales, zp_codes, block or cols)
    return (pack(codes, bits), scales if block else scales[:, :, 0],
            zero_points, w)


def make_qmoe(cfg, rng):
    act, fusion = cfg["act"], cfg.get("fusion")
    fused = act == "swiglu" and fusion in (1, 2)
    fc1_rows = (2 if fused else 1) * Q_I
    projections = {"fc1": (fc1_rows, Q_H), "fc2": (Q_H, Q_I)}
    if cfg.get("fc3"):
        projections["fc3"] = (Q_I, Q_H)
    quant_inits, ref_inits, q_in, ref_in = [], [], {}, {}
    for fc, (rows, cols) in projections.items():
        packed, scales, zp, w = quantize_experts(cfg, rng, Q_E, rows, cols)
        if fc == "fc2" and "fc2_scale_blocks" in cfg:
            scales = scales[:, :, :cfg["fc2_scale_blocks"]].copy()
        quant_inits += [init(f"{fc}_w", packed), init(f"{fc}_s", scales)]
        q_in[f"{fc}_experts_weights"] = f"{fc}_w"
        if not (fc == "fc2" and cfg.get("drop_fc2_scales")):
            q_in[f"{fc}_scales"] = f"{fc}_s"
        if zp is not None:
            quant_inits.append(init(f"{fc}_zp", zp))
            q_in[f"{fc}_zero_points"] = f"{fc}_zp"
        ref_inits.append(init(f"{fc}_W", w))
        ref_in[f"{fc}_experts_weights"] = f"{fc}_W"
        if cfg.get("bias", True):
            bias = (0.1 * rng.standard_normal((Q_E, rows))).astype(np.float32)
            quant_inits.append(init(f"{fc}_b", bias))
            ref_inits.append(init(f"{fc}_b", bias))
            q_in[f"{fc}_experts_bias"] = ref_in[f"{fc}_experts_bias"] = \
                f"{fc}_b"
    if cfg.get("router_weights"):
        q_in["router_weights"] = "router_probs"

    def inputs(order, given, pad=0):
        names = ["input", "router_probs"] + [given.get(n, "") for n in order]
        while names[-1] == "" and len(names) > pad:
            names.pop()
        return names

    q_order = ["fc1_experts_weights", "fc1_scales", "fc1_experts_bias",
               "fc2_experts_weights", "fc2_scales", "fc2_experts_bias",
               "fc3_experts_weights", "fc3_scales", "fc3_experts_bias",
               "fc1_zero_points", "fc2_zero_points", "fc3_zero_points",
               "router_weights"]
    ref_order = ["fc1_experts_weights", "fc1_experts_bias",
                 "fc2_experts_weights", "fc2_experts_bias",
                 "fc3_experts_weights", "fc3_experts_bias"]
    attrs = dict(activation_type=act, k=cfg.get("k", 2),
                 normalize_routing_weights=cfg.get("normalize", 0))
    if fusion is not None:
        attrs["swiglu_fusion"] = fusion
    for name in ("alpha", "beta", "limit"):
        if cfg.get(name) is not None:
            attrs[{"limit": "swiglu_limit"}.get(
                name, "activation_" + name)] = cfg[name]
    q_attrs = dict(attrs, expert_weight_bits=cfg["bits"])
    if cfg.get("block"):
        q_attrs["block_size"] = cfg["block"]
    q_attrs.update(cfg.get("extra", {}))
    shape = (["batch", "sequence", Q_H] if cfg.get("rank") == 3 else
             ["tokens", Q_H])
    graph_inputs = [
        helper.make_tensor_value_info("input", TensorProto.FLOAT, shape),
        helper.make_tensor_value_info("router_probs", TensorProto.FLOAT,
                                      ["tokens", Q_E])]
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                             shape)]
    quant = model([helper.make_node("QMoE",
                                    inputs(q_order, q_in,
                                           cfg.get("pad_inputs", 0)),
                                    ["output"],
                                    name="moe", domain=MS, **q_attrs)],
                  graph_inputs, outputs, quant_inits)
    ref = model([helper.make_node("MoE", inputs(ref_order, ref_in),
                                  ["output"], name="moe", domain=MS,
                                  **attrs)],
                graph_inputs, outputs, ref_inits)
    return quant, ref


def random_feeds(m, rng, tokens=7):
    feeds = {}
    for value in m.graph.input:
        t = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else
                 (1 if d.dim_param == "batch" else tokens)
                 for d in t.shape.dim]
        if t.elem_type == TensorProto.FLOAT:
            feeds[value.name] = rng.uniform(-1, 1, shape).astype(np.float32)
        else:
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[value.name] = rng.integers(0, G_V, shape).astype(dtype)
    return feeds


def check_with_onnxruntime(name, quant, ref, tolerance, rng):
    """Runs the quantized model and its float reference in onnxruntime on the
    same random inputs; exits unless they agree within `tolerance` of the
    output's scale."""
    import onnxruntime as ort

    def run(m):
        session = ort.InferenceSession(m.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return session.run(None, feeds)[0]

    feeds = random_feeds(quant, rng)
    actual, expected = run(quant), run(ref)
    error = np.abs(actual - expected).max()
    if error > tolerance * max(1.0, np.abs(expected).max()):
        sys.exit(f"gen_contrib_quant.py: {name}: onnxruntime {ort.__version__}"
                 f" disagrees with the dequantized reference (max error "
                 f"{error:.3g})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("output")
    args = parser.parse_args()

    kind, cfg = VARIANTS[args.variant]
    cfg = dict(cfg, invalid=kind == "invalid")
    rng = np.random.default_rng(zlib.crc32(args.variant.encode()))
    make = {"mnb": make_matmul_nbits, "gbq": make_gather_block_quantized,
            "tied": make_tied_embeddings, "qmoe": make_qmoe}[cfg["op"]]
    quant, ref = make(cfg, rng)
    if kind == "ort":
        # accuracy_level 4 lets onnxruntime quantize A to int8 per block.
        tolerance = 2e-2 if cfg.get("accuracy") == 4 else 1e-5
        check_with_onnxruntime(args.variant, quant, ref, tolerance, rng)
    if kind != "invalid":
        onnx.checker.check_model(ref)
        onnx.save(ref, args.output[:-len(".onnx")] + ".ref.onnx"
                  if args.output.endswith(".onnx") else args.output + ".ref")
    onnx.save(quant, args.output)


if __name__ == "__main__":
    main()
