#!/usr/bin/env python3
"""Writes a stack of MoE layers with residuals, for tests and benches of
tiered experts' prefetch (a layer ahead needs a next layer).

    gen_stacked_moe.py OUT.onnx --layers L --experts E --hidden H --ffn F
                       [--top-k K] [--skew S] [--seed N]

Each layer is x = x + moe(rms_norm(x)), moe being bench/cpu_models.py's
TorchScript-form loop MoE (router MatMul -> Softmax -> TopK -> per-expert
SwiGLU); input `hidden_states` [tokens, H], output `output` [tokens, H],
weights in OUT.onnx.data. With --skew S every router column e is scaled by
1 + 3 exp(-S e / 4), so that the low experts win most tokens' top-k, as in
trained models (0: no skew).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cpu_models  # noqa: E402


def build(path, layers, experts, hidden, ffn, top_k=2, skew=0.0, seed=0):
    cfg = dict(experts=experts, top_k=top_k, hidden=hidden, ffn=ffn)
    g = cpu_models.Graph(path + ".data")
    x = "hidden_states"
    for layer in range(layers):
        normed = cpu_models.rms_norm(g, x, f"layer{layer}.norm", hidden)
        x = g.op("Add", [x, cpu_models.loop_moe(g, normed, cfg, seed, layer)])
    g.nodes.append(helper.make_node("Identity", [x], ["output"],
                                    name="output"))
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT,
                                           ["tokens", hidden])
             for n in ("hidden_states", "output")]
    g.save(path, "stacked_moe", value[:1], value[1:])
    if skew:
        # In place in the external data: the routers stay MatMuls of the
        # tokens by a weight, the form moec's detector proves.
        model = onnx.load(path, load_external_data=False)
        scale = (1 + 3 * np.exp(-skew * np.arange(experts) / 4)).astype(
            np.float32)
        with open(path + ".data", "r+b") as f:
            for t in model.graph.initializer:
                if not t.name.endswith(".router"):
                    continue
                info = {e.key: e.value for e in t.external_data}
                offset, length = int(info["offset"]), int(info["length"])
                f.seek(offset)
                w = np.frombuffer(f.read(length), np.float32).reshape(
                    hidden, experts)
                f.seek(offset)
                f.write((w * scale).astype(np.float32).tobytes())
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--experts", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--skew", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    build(a.out, a.layers, a.experts, a.hidden, a.ffn, a.top_k, a.skew, a.seed)


if __name__ == "__main__":
    main()
