#!/usr/bin/env python3
"""Builds com.microsoft.MoE test models and checks them against onnxruntime.

    gen_contrib_moe.py VARIANT OUT.onnx

Writes a one-node model (opset 17 + com.microsoft 1, random weights as
initializers) for VARIANT, then, for variants onnxruntime's CPU kernel can run,
runs it in onnxruntime and compares the result with `reference`, a NumPy model
of what moec imports the node as (moe.router -> moe.dispatch -> moe.experts ->
moe.combine). A fixture therefore only exists if onnxruntime agrees with the
semantics the importer encodes; the script exits non-zero otherwise.

Variants of kind `structure` are valid models the CPU kernel cannot check:
fc3, swiglu_fusion 0 and 2 and activation_type geglu (Gemma-4's experts,
test/E2E/genai-gemma4.test checks them against torch) run only on
onnxruntime's CUDA kernel, and the
1.23.2 CPU kernel returns zeros for float16 on CPUs without fp16 GEMMs. They are
checked with onnx's structural checker only. Variants of kind `invalid` are
malformed on purpose, for the import error tests.
"""

import argparse
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
TOKENS, HIDDEN, INTER, EXPERTS = 5, 8, 6, 4

# name -> (kind, settings). kind: "cpu" (checked by onnxruntime), "structure"
# (structure only), "invalid" (malformed). Settings override DEFAULTS.
DEFAULTS = dict(activation="relu", k=2, normalize=0, fusion=None, fc3=False,
                bias=True, rank=2, dtype=np.float32, alpha=None, beta=None,
                limit=None, extra_attrs={}, legacy=False, fc1_rows_delta=0,
                router_dtype=None)
VARIANTS = {
    "relu": ("cpu", dict()),
    "gelu": ("cpu", dict(activation="gelu", normalize=1)),
    "silu": ("cpu", dict(activation="silu", bias=False)),
    "identity": ("cpu", dict(activation="identity", k=1)),
    "swiglu": ("cpu", dict(activation="swiglu", fusion=1, normalize=1)),
    "swiglu-clamped": ("cpu", dict(activation="swiglu", fusion=1, alpha=1.702,
                                   beta=1.0, limit=7.0, k=4)),
    "input-3d": ("cpu", dict(rank=3, normalize=1)),
    "float16": ("structure", dict(activation="silu", dtype=np.float16)),
    "swiglu-concatenated": ("structure", dict(activation="swiglu", fusion=2)),
    "swiglu-fc3": ("structure", dict(activation="swiglu", fusion=0, fc3=True,
                                limit=7.0)),
    "silu-fc3": ("structure", dict(activation="silu", fc3=True, normalize=1)),
    "gelu-fc3": ("structure", dict(activation="gelu", fc3=True)),
    "geglu": ("structure", dict(activation="geglu", fusion=1, normalize=1,
                                alpha=1.702, beta=1.0, limit=7.0)),
    "geglu-concatenated": ("structure", dict(activation="geglu", fusion=2)),
    "geglu-unfused": ("invalid", dict(activation="geglu", fusion=0)),
    "geglu-fc3": ("invalid", dict(activation="geglu", fusion=1, fc3=True)),
    "legacy-layout": ("invalid", dict(legacy=True)),
    "sparse-mixer": ("invalid", dict(extra_attrs=dict(use_sparse_mixer=1))),
    "bad-activation": ("invalid", dict(activation="tanh")),
    "k-too-large": ("invalid", dict(k=EXPERTS + 1)),
    "missing-fc3": ("invalid", dict(activation="swiglu", fusion=0)),
    "relu-fc3": ("invalid", dict(fc3=True)),
    "bad-fc1-shape": ("invalid", dict(fc1_rows_delta=1)),
    "unknown-attribute": ("invalid", dict(extra_attrs=dict(capacity=4))),
    "router-float16": ("invalid", dict(router_dtype=np.float16)),
}

ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def make_weights(cfg, rng):
    """Random weights in onnxruntime 1.23's [E, out, in] layout."""
    fused = (cfg["activation"] in ("swiglu", "geglu") and
             cfg["fusion"] in (1, 2))
    fc1_rows = (2 if fused else 1) * INTER + cfg["fc1_rows_delta"]
    w = {
        "fc1_experts_weights": rng.standard_normal((EXPERTS, fc1_rows, HIDDEN)),
        "fc2_experts_weights": rng.standard_normal((EXPERTS, HIDDEN, INTER)),
    }
    if cfg["bias"]:
        w["fc1_experts_bias"] = rng.standard_normal((EXPERTS, fc1_rows))
        w["fc2_experts_bias"] = rng.standard_normal((EXPERTS, HIDDEN))
    if cfg["fc3"]:
        w["fc3_experts_weights"] = rng.standard_normal((EXPERTS, INTER, HIDDEN))
        if cfg["bias"]:
            w["fc3_experts_bias"] = rng.standard_normal((EXPERTS, INTER))
    scale = 0.5
    return {name: (value * scale).astype(cfg["dtype"])
            for name, value in w.items()}


def make_model(cfg, weights):
    elem = ONNX_TYPES[cfg["dtype"]]
    if cfg["rank"] == 3:
        input_shape = ["batch", "sequence", HIDDEN]
    else:
        input_shape = ["tokens", HIDDEN]
    order = ["fc1_experts_weights", "fc1_experts_bias", "fc2_experts_weights",
             "fc2_experts_bias", "fc3_experts_weights", "fc3_experts_bias"]
    inputs = ["input", "router_probs"] + [n if n in weights else ""
                                          for n in order]
    while inputs[-1] == "":
        inputs.pop()
    attrs = dict(activation_type=cfg["activation"], k=cfg["k"],
                 normalize_routing_weights=cfg["normalize"])
    if cfg["fusion"] is not None:
        attrs["swiglu_fusion"] = cfg["fusion"]
    for onnx_name, key in (("activation_alpha", "alpha"),
                           ("activation_beta", "beta"),
                           ("swiglu_limit", "limit")):
        if cfg[key] is not None:
            attrs[onnx_name] = cfg[key]
    attrs.update(cfg["extra_attrs"])
    node = helper.make_node("MoE", inputs, ["output"], name="moe",
                            domain="com.microsoft", **attrs)
    initializers = []
    for name, value in weights.items():
        if cfg["legacy"] and name.endswith("_weights"):
            # The [E, in, out] layout of onnxruntime before 1.23.
            value = np.ascontiguousarray(value.transpose(0, 2, 1))
        initializers.append(numpy_helper.from_array(value, name))
    graph = helper.make_graph(
        [node], "contrib_moe",
        [helper.make_tensor_value_info("input", elem, input_shape),
         helper.make_tensor_value_info(
             "router_probs", ONNX_TYPES[cfg["router_dtype"] or cfg["dtype"]],
             ["tokens", EXPERTS])],
        [helper.make_tensor_value_info("output", elem, input_shape)],
        initializers)
    return helper.make_model(
        graph, ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET),
                       helper.make_opsetid("com.microsoft", 1)])


def activation(cfg, h):
    """The expert activation moec maps activation_type to, on fc1's output
    (and fc3's for gated forms)."""
    act = cfg["activation"]
    if act in ("swiglu", "geglu") or cfg["fc3"]:
        if cfg["fc3"]:
            gate, up = h
        elif cfg["fusion"] == 1:  # interleaved: gate at even outputs
            gate, up = h[0::2], h[1::2]
        else:  # concatenated: gate first
            gate, up = h[:INTER], h[INTER:]
        if act == "swiglu":
            alpha = 1.0 if cfg["alpha"] is None else cfg["alpha"]
            beta = 0.0 if cfg["beta"] is None else cfg["beta"]
            limit = np.inf if cfg["limit"] is None else cfg["limit"]
            gate = np.minimum(gate, limit)
            up = np.clip(up, -limit, limit)
            return gate / (1.0 + np.exp(-alpha * gate)) * (up + beta)
        # geglu: gelu (tanh) of the gate; alpha, beta and limit unused.
        return plain_activation("gelu" if act == "geglu" else act, gate) * up
    return plain_activation(act, h)


def plain_activation(act, x):
    if act == "relu":
        return np.maximum(x, 0.0)
    if act == "gelu":  # onnxruntime's gelu: the tanh approximation
        return 0.5 * x * (1.0 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    if act == "silu":
        return x / (1.0 + np.exp(-x))
    return x


def reference(cfg, weights, x, logits):
    """moe.router (softmax, top-k, optional renormalisation) -> dispatch ->
    experts (weights [E, out, in]) -> combine, in float64."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    rows = x.reshape(-1, HIDDEN).astype(np.float64)
    logits = logits.astype(np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    chosen = np.argsort(-probs, axis=1, kind="stable")[:, :cfg["k"]]
    route = np.take_along_axis(probs, chosen, axis=1)
    if cfg["normalize"]:
        route /= route.sum(axis=1, keepdims=True) + 1e-20
    out = np.zeros_like(rows)
    for t, row in enumerate(rows):
        for j, e in enumerate(chosen[t]):
            h = w["fc1_experts_weights"][e] @ row
            h = h + w.get("fc1_experts_bias", np.zeros((EXPERTS, h.size)))[e]
            if cfg["fc3"]:
                u = w["fc3_experts_weights"][e] @ row
                u = u + w.get("fc3_experts_bias",
                              np.zeros((EXPERTS, INTER)))[e]
                h = (h, u)
            y = w["fc2_experts_weights"][e] @ activation(cfg, h)
            y = y + w.get("fc2_experts_bias", np.zeros((EXPERTS, HIDDEN)))[e]
            out[t] += route[t, j] * y
    return out.reshape(x.shape)


def check_with_onnxruntime(cfg, model, weights, rng):
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    shape = (TOKENS, HIDDEN) if cfg["rank"] == 2 else (1, TOKENS, HIDDEN)
    x = rng.standard_normal(shape).astype(cfg["dtype"])
    logits = (2.0 * rng.standard_normal((TOKENS, EXPERTS))).astype(cfg["dtype"])
    (actual,) = session.run(None, {"input": x, "router_probs": logits})
    expected = reference(cfg, weights, x, logits)
    tolerance = 2e-2 if cfg["dtype"] == np.float16 else 1e-4
    if not np.allclose(actual.astype(np.float64), expected, rtol=tolerance,
                       atol=tolerance):
        error = np.abs(actual.astype(np.float64) - expected).max()
        sys.exit(f"gen_contrib_moe.py: onnxruntime {ort.__version__} "
                 f"disagrees with the reference semantics (max error "
                 f"{error:.3g})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("output")
    args = parser.parse_args()

    kind, settings = VARIANTS[args.variant]
    cfg = dict(DEFAULTS, **settings)
    rng = np.random.default_rng(sum(map(ord, args.variant)))
    weights = make_weights(cfg, rng)
    model = make_model(cfg, weights)
    if kind == "cpu":
        check_with_onnxruntime(cfg, model, weights, rng)
    elif kind == "structure":
        onnx.checker.check_model(model)
    onnx.save(model, args.output)


if __name__ == "__main__":
    main()
