#!/usr/bin/env python3
"""Writes small models of onnxruntime-genai's attention and recurrent contrib ops.

  gen_contrib_attention.py VARIANT OUTPUT.onnx

Each model is one com.microsoft node (GroupQueryAttention, MultiHeadAttention,
RotaryEmbedding, MRotaryEmbedding, SkipSimplifiedLayerNormalization,
CausalConvWithState, LinearAttention, LinearAttentionGate, GatedRMSNorm or
GatedAdd) on graph
inputs, the way onnxruntime-genai's builder writes it, with the attributes
the variant names; test/Import/contrib-attention.test checks the IR moec
imports and the errors it gives. Whole builder exports are compared with
onnxruntime-genai in test/E2E/genai-*.test.
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper

H, KV, D, HIDDEN = 4, 2, 16, 64


def gqa(attrs=None, sinks=True, packed=True, extra_inputs=()):
    attributes = dict(num_heads=H, kv_num_heads=KV, scale=0.25,
                      local_window_size=8, softcap=0.0, do_rotary=1,
                      rotary_interleaved=0)
    attributes.update(attrs or {})
    width = (H + 2 * KV) * D if packed else H * D
    inputs = [helper.make_tensor_value_info("qkv", TensorProto.FLOAT,
                                            ["batch", "seq", width]),
              helper.make_tensor_value_info(
                  "past_key", TensorProto.FLOAT, ["batch", KV, "past", D]),
              helper.make_tensor_value_info(
                  "past_value", TensorProto.FLOAT, ["batch", KV, "past", D]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32,
                                            ["batch"]),
              helper.make_tensor_value_info("total", TensorProto.INT32, [])]
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("cos_cache", TensorProto.FLOAT, [64, D // 2],
                                rng.standard_normal((64, D // 2)).ravel()),
             helper.make_tensor("sin_cache", TensorProto.FLOAT, [64, D // 2],
                                rng.standard_normal((64, D // 2)).ravel()),
             helper.make_tensor("sinks", TensorProto.FLOAT, [H],
                                rng.standard_normal(H))]
    node_inputs = ["qkv", "", "", "past_key", "past_value", "seqlens_k",
                   "total", "cos_cache", "sin_cache", "", "",
                   "sinks" if sinks else ""] + list(extra_inputs)
    node = helper.make_node("GroupQueryAttention", node_inputs,
                            ["out", "present_key", "present_value"],
                            domain="com.microsoft", name="gqa", **attributes)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
               for n in ("out", "present_key", "present_value")]
    return [node], inputs, outputs, inits


def mha(attrs=None, form="self", value_width=H * D, outputs=3,
        extra_inputs=None):
    """MultiHeadAttention with H heads of D. form "self": query, key and
    value [batch, seq, ...] with a bias, past_key/past_value [batch, H,
    past, D], a key_padding_mask [batch, total] and unidirectional 1;
    "cross": key and value already as heads [batch, H, kv, D] with an
    attention_bias [1, H, seq, kv]; "plain": no past, a value width of its
    own and a per-query key_padding_mask [batch, seq, kv]."""
    f, i32 = TensorProto.FLOAT, TensorProto.INT32
    attributes = {"num_heads": H}
    if form == "self":
        attributes["unidirectional"] = 1
    attributes.update(attrs or {})
    rng = np.random.default_rng(0)
    inits = []
    query = helper.make_tensor_value_info("query", f, ["batch", "seq", H * D])
    if form == "self":
        inputs = [query,
                  helper.make_tensor_value_info("key", f,
                                                ["batch", "seq", H * D]),
                  helper.make_tensor_value_info("value", f,
                                                ["batch", "seq", H * D]),
                  helper.make_tensor_value_info("key_padding_mask", i32,
                                                ["batch", "total"]),
                  helper.make_tensor_value_info("past_key", f,
                                                ["batch", H, "past", D]),
                  helper.make_tensor_value_info("past_value", f,
                                                ["batch", H, "past", D])]
        inits.append(helper.make_tensor(
            "bias", f, [3 * H * D], rng.standard_normal(3 * H * D)))
        node_inputs = ["query", "key", "value", "bias", "key_padding_mask",
                       "", "past_key", "past_value"]
    elif form == "cross":
        inputs = [query,
                  helper.make_tensor_value_info("key", f, ["batch", H, "kv", D]),
                  helper.make_tensor_value_info("value", f,
                                                ["batch", H, "kv", D]),
                  helper.make_tensor_value_info("attention_bias", f,
                                                [1, H, "seq", "kv"])]
        node_inputs = ["query", "key", "value", "", "", "attention_bias"]
    else:
        inputs = [query,
                  helper.make_tensor_value_info("key", f,
                                                ["batch", "kv", H * D]),
                  helper.make_tensor_value_info("value", f,
                                                ["batch", "kv", value_width]),
                  helper.make_tensor_value_info("key_padding_mask", i32,
                                                ["batch", "seq", "kv"])]
        node_inputs = ["query", "key", "value", "", "key_padding_mask"]
    for name, value in (extra_inputs or {}).items():
        while len(node_inputs) <= value[0]:
            node_inputs.append("")
        node_inputs[value[0]] = name
        inputs.append(helper.make_tensor_value_info(name, value[1], value[2]))
    names = ["out", "present_key", "present_value", "qk"][:outputs]
    if form != "self" and outputs == 1:
        names = ["out"]
    node = helper.make_node("MultiHeadAttention", node_inputs, names,
                            domain="com.microsoft", name="mha", **attributes)
    return [node], inputs, [helper.make_tensor_value_info(n, f, None)
                            for n in names], inits


def rotary(attrs=None, width=H * D, half=D // 2, four_d=False,
           offset=False, op="RotaryEmbedding"):
    """RotaryEmbedding on [batch, seq, width] (or [batch, H, seq, width]) at
    position_ids [batch, seq] (or a [1] offset), with [128, half] caches;
    MRotaryEmbedding at position_ids [3, batch, seq]."""
    f = TensorProto.FLOAT
    shape = ["batch", H, "seq", width] if four_d else ["batch", "seq", width]
    positions = ([3, "batch", "seq"] if op == "MRotaryEmbedding" else
                 [1] if offset else ["batch", "seq"])
    inputs = [helper.make_tensor_value_info("x", f, shape),
              helper.make_tensor_value_info(
                  "position_ids", TensorProto.INT64, positions)]
    rng = np.random.default_rng(1)
    angles = rng.uniform(0, 6.3, (128, half))
    inits = [helper.make_tensor("cos_cache", f, [128, half],
                                np.cos(angles).ravel()),
             helper.make_tensor("sin_cache", f, [128, half],
                                np.sin(angles).ravel())]
    node = helper.make_node(op,
                            ["x", "position_ids", "cos_cache", "sin_cache"],
                            ["y"], domain="com.microsoft", name="rotary",
                            **(attrs or {}))
    return [node], inputs, [helper.make_tensor_value_info("y", f, shape)], inits


def skip_norm(outputs=("y", "", "", "sum")):
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT,
                                            ["tokens", HIDDEN])
              for n in ("x", "skip")]
    inits = [helper.make_tensor("gamma", TensorProto.FLOAT, [HIDDEN],
                                np.ones(HIDDEN))]
    node = helper.make_node("SkipSimplifiedLayerNormalization",
                            ["x", "skip", "gamma"], list(outputs),
                            domain="com.microsoft", name="norm",
                            epsilon=1e-5)
    return [node], inputs, [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, None) for n in outputs if n], inits


def conv(activation="none", ndim=1):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                            ["batch", 8, "seq"]),
              helper.make_tensor_value_info("state", TensorProto.FLOAT,
                                            ["batch", 8, 2])]
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [8, 1, 3],
                                np.arange(24, dtype=np.float32))]
    node = helper.make_node("CausalConvWithState", ["x", "w", "", "state"],
                            ["y", "present_state"], domain="com.microsoft",
                            name="conv", activation=activation, ndim=ndim)
    return [node], inputs, [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, None) for n in ("y", "present_state")], inits


# Qwen3.5's gated delta layers in the tiny export: 2 query/key heads of 16
# shared by 4 value heads of 16.
QH, VH, DK, DV = 2, 4, 16, 16


def linear_attention(attrs=None, state=True):
    attributes = dict(q_num_heads=QH, kv_num_heads=VH,
                      update_rule="gated_delta", scale=1.0, state_window=0)
    attributes.update(attrs or {})
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, ["batch", "seq", QH * DK]),
              helper.make_tensor_value_info("k", f, ["batch", "seq", QH * DK]),
              helper.make_tensor_value_info("v", f, ["batch", "seq", VH * DV]),
              helper.make_tensor_value_info("g", f, ["batch", "seq", VH]),
              helper.make_tensor_value_info("beta", f, ["batch", "seq", VH])]
    if state:
        inputs.append(helper.make_tensor_value_info(
            "past_state", f, ["batch", VH, DK, DV]))
    node = helper.make_node(
        "LinearAttention",
        ["q", "k", "v", "past_state" if state else "", "g", "beta"],
        ["out", "present_state"], domain="com.microsoft", name="linear",
        **attributes)
    return [node], inputs, [helper.make_tensor_value_info(
        n, f, None) for n in ("out", "present_state")], []


def gates():
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f, ["batch", "seq", VH])
              for n in ("a", "b")]
    inits = [helper.make_tensor("dt_bias", f, [VH], np.ones(VH)),
             helper.make_tensor("neg_exp_A", f, [VH], -np.ones(VH))]
    node = helper.make_node("LinearAttentionGate",
                            ["a", "dt_bias", "neg_exp_A", "b"], ["g", "beta"],
                            domain="com.microsoft", name="gate")
    return [node], inputs, [helper.make_tensor_value_info(
        n, f, None) for n in ("g", "beta")], inits


def gated_norm(activation=None):
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n, f, ["batch", "seq", VH * DV])
              for n in ("x", "z")]
    inits = [helper.make_tensor("w", f, [DV], np.ones(DV))]
    attributes = {"epsilon": 1e-6}
    if activation:
        attributes["activation"] = activation
    node = helper.make_node("GatedRMSNorm", ["x", "w", "z"], ["y"],
                            domain="com.microsoft", name="norm", **attributes)
    return [node], inputs, [helper.make_tensor_value_info("y", f, None)], inits


def gated_add():
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, ["tokens", HIDDEN]),
              helper.make_tensor_value_info("y", f, ["tokens", HIDDEN]),
              helper.make_tensor_value_info("gate", f, ["tokens", 1])]
    node = helper.make_node("GatedAdd", ["x", "y", "gate"], ["out"],
                            domain="com.microsoft", name="add")
    return [node], inputs, [helper.make_tensor_value_info("out", f, None)], []


VARIANTS = {
    "gqa": lambda: gqa(),
    "gqa-window-cache": lambda: gqa({"sliding_window_cache": 1}),
    "gqa-qk-output": lambda: gqa({"qk_output": 1}),
    "gqa-quantized-cache": lambda: gqa({"kv_cache_bit_width": 8}),
    "gqa-bad-heads": lambda: gqa({"num_heads": 3}),
    "gqa-window-zero": lambda: gqa({"local_window_size": 0}),
    "gqa-no-cos": lambda: gqa({"do_rotary": 1}, packed=True,
                              extra_inputs=()),
    # Small mask_filter_values, so that a masked key keeps some weight and the
    # padding and causal penalties are seen to add up.
    "mha": lambda: mha({"mask_filter_value": -3.0}),
    "mha-cross": lambda: mha({"scale": 0.3}, form="cross", outputs=1),
    "mha-plain": lambda: mha({"mask_filter_value": -2.0}, form="plain",
                             value_width=H * 8, outputs=1),
    "mha-qk": lambda: mha(outputs=4),
    "mha-key-lengths": lambda: mha(form="plain", outputs=1, extra_inputs={
        "lengths": (4, TensorProto.INT32, ["batch"])}),
    "mha-shared-buffer": lambda: mha(extra_inputs={
        "past_length": (8, TensorProto.INT32, [1])}),
    "rotary": lambda: rotary(),
    # Gemma-4's partial rotary: 2 heads of 32, the first 16 features rotated.
    "rotary-partial": lambda: rotary({"num_heads": 2, "rotary_embedding_dim": 16,
                                      "interleaved": 1}, width=64, half=8),
    "rotary-4d-offset": lambda: rotary(width=D, four_d=True, offset=True),
    "rotary-scale": lambda: rotary({"scale": 0.5}),
    "rotary-packed": lambda: rotary({"is_packed_batching": 1}),
    "rotary-bad-dim": lambda: rotary({"num_heads": 4, "rotary_embedding_dim": 12}),
    # M-RoPE as Qwen3.5 exports it: interleaved sections over a partial
    # rotary dimension (4 heads of 16, the first 8 features rotated).
    "mrotary": lambda: rotary({"num_heads": H, "rotary_embedding_dim": 8,
                               "mrope_section": [2, 1, 1],
                               "mrope_layout": 1}, half=4,
                              op="MRotaryEmbedding"),
    # Qwen2.5-VL's contiguous sections, whole heads, interleaved pairs, 4-D.
    "mrotary-sectioned": lambda: rotary({"mrope_section": [3, 3, 2],
                                         "interleaved": 1}, width=D,
                                        four_d=True, op="MRotaryEmbedding"),
    "mrotary-blocked": lambda: rotary({"mrope_section": [4, 2, 2],
                                       "mrope_layout": 2},
                                      op="MRotaryEmbedding"),
    "mrotary-bad-section": lambda: rotary({"mrope_section": [4, 2, 1]},
                                          op="MRotaryEmbedding"),
    "mrotary-no-section": lambda: rotary(op="MRotaryEmbedding"),
    "skip-norm": lambda: skip_norm(),
    "skip-norm-mean": lambda: skip_norm(("y", "mean", "", "")),
    "conv": lambda: conv(),
    "conv-silu": lambda: conv("silu"),
    "conv-2d": lambda: conv(ndim=2),
    "linear": lambda: linear_attention(),
    "linear-no-state": lambda: linear_attention({"scale": 0.0}, state=False),
    "linear-delta": lambda: linear_attention({"update_rule": "delta"}),
    "linear-window": lambda: linear_attention({"state_window": 4}),
    "gates": lambda: gates(),
    "gated-norm": lambda: gated_norm(),
    "gated-norm-sigmoid": lambda: gated_norm("sigmoid"),
    "gated-add": lambda: gated_add(),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("output")
    args = parser.parse_args()
    nodes, inputs, outputs, inits = VARIANTS[args.variant]()
    if args.variant == "gqa-no-cos":
        nodes[0].input[7] = ""
    graph = helper.make_graph(nodes, args.variant, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    onnx.save(model, args.output)


if __name__ == "__main__":
    main()
