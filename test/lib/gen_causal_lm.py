#!/usr/bin/env python3
"""Writes a small causal language model with MoE layers, for the tests of
expert parallelism's row-independence analysis.

    gen_causal_lm.py OUT.onnx [--layout tokens|batch] [--layers L] [--seed N]
                     [--output-routing]

--layout tokens (default): the input is a 1-D sequence of token ids
`input_ids [T]`, and causal self-attention mixes all T tokens, so the token
axis is NOT batch-like: no device may run a share of it through the dense
part. --layout batch: `input_ids [batch, seq]`, attention within each
sequence, so the batch axis is batch-like and the dense part may be split
over it.

Each of the L layers (default 2) is

    a   = softmax(mask(q k^T / sqrt(H))) v Wo + x        (one head, causal)
    x'  = MoE(a) + a

with q, k, v = x Wq, x Wk, x Wv and the mask built from Range over the
sequence length (Less(col, row) -> Where(-1e9)). The MoE layer is
examples/zoo/mixtral_block.onnx's TorchScript export (router MatMul ->
Softmax -> TopK -> renormalise -> OneHot, per expert NonZero -> Gather ->
SwiGLU -> Mul -> index_add; 8 experts, top-2, hidden 16, FFN 32), which
moe-detect-experts recognises, spliced in with fresh random weights; in the
tokens layout its [batch, seq, H] input is the residual sum made [1, T, H]
(and its output squeezed back to [T, H]). The logits are x Wlm after the last layer: [T, V] or
[batch, seq, V]. --output-routing also returns each layer's renormalised
routing weights and expert ids, [T, 2] with dimension 0 named 'T' in the
tokens layout, unnamed [batch * seq, 2] in the batch one (extra graph
outputs that expose a detected layer's intermediate values).
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                        "examples", "zoo", "mixtral_block.onnx")
HIDDEN, VOCAB = 16, 64


def splice_block(prefix, x, out, rng):
    """The nodes and initializers of the MoE block template reading `x` and
    writing `out`, with every other name prefixed and random weights."""
    block = onnx.load(TEMPLATE).graph
    outer = {block.input[0].name: x, block.output[0].name: out}

    def rename(name):
        if not name:
            return name
        return outer.get(name, prefix + name)

    nodes = []
    for n in block.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.name = prefix + n.name
        copy.input[:] = [rename(i) for i in n.input]
        copy.output[:] = [rename(o) for o in n.output]
        nodes.append(copy)
    inits = []
    for init in block.initializer:
        shape = list(init.dims)
        w = rng.standard_normal(shape, dtype=np.float32)
        w /= np.float32(np.sqrt(shape[0]))
        inits.append(numpy_helper.from_array(w, rename(init.name)))
    return nodes, inits


def build(layout, layers, seed, output_routing=False):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def weight(name, shape, scale=None):
        w = rng.standard_normal(shape, dtype=np.float32)
        w *= np.float32(scale if scale is not None else 1 / np.sqrt(shape[0]))
        inits.append(numpy_helper.from_array(w, name))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(kind, inputs, name, **attrs):
        nodes.append(helper.make_node(kind, inputs, [name], name=name,
                                      **attrs))
        return name

    batched = layout == "batch"
    # The sequence axis of the activations ([T, H] or [B, S, H]).
    seq_axis = 1 if batched else 0
    x = op("Gather", [weight("embed", [VOCAB, HIDDEN], 1.0), "input_ids"],
           "embedding", axis=0)

    # Causal mask from the sequence length: key j > query i is masked.
    shape = op("Shape", ["input_ids"], "ids_shape")
    seq_len = op("Gather", [shape, const("seq_axis", np.int64(seq_axis))],
                 "seq_len", axis=0)
    positions = op("Range", [const("zero", np.int64(0)), seq_len,
                             const("one", np.int64(1))], "positions")
    rows = op("Unsqueeze", [positions, const("axis1", np.array([1]))],
              "query_pos")
    cols = op("Unsqueeze", [positions, const("axis0", np.array([0]))],
              "key_pos")
    future = op("Greater", [cols, rows], "future")
    const("neg_big", np.float32(-1e9))
    const("minus_one", np.array([-1]))
    const("hidden", np.array([HIDDEN]))
    const("scale", np.float32(1 / np.sqrt(HIDDEN)))

    for layer in range(layers):
        p = f"layer{layer}/"
        q = op("MatMul", [x, weight(p + "wq", [HIDDEN, HIDDEN])], p + "q")
        k = op("MatMul", [x, weight(p + "wk", [HIDDEN, HIDDEN])], p + "k")
        v = op("MatMul", [x, weight(p + "wv", [HIDDEN, HIDDEN])], p + "v")
        kt = op("Transpose", [k], p + "k_t",
                perm=[0, 2, 1] if batched else [1, 0])
        scores = op("MatMul", [q, kt], p + "scores")
        scores = op("Mul", [scores, "scale"], p + "scaled")
        scores = op("Where", [future, "neg_big", scores], p + "masked")
        probs = op("Softmax", [scores], p + "probs", axis=-1)
        attn = op("MatMul", [probs, v], p + "attn")
        attn = op("MatMul", [attn, weight(p + "wo", [HIDDEN, HIDDEN])],
                  p + "attn_out")
        if batched:
            a = op("Add", [attn, x], p + "resid")
        else:
            # The block takes [batch, seq, H]: the residual sum is made
            # [1, T, H] by reshapes with -1 (a static 1, as an Unsqueeze
            # gives, changes the block's shape arithmetic into a form the
            # loop detector does not match).
            shape3 = op("Concat", ["minus_one", op("Shape", [x], p + "rows",
                                                   end=1), "hidden"],
                        p + "shape_3d", axis=0)
            a = op("Add", [op("Reshape", [attn, shape3], p + "attn_3d"),
                           op("Reshape", [x, shape3], p + "x_3d")],
                   p + "resid")
        block_out = p + "moe_out"
        block_nodes, block_inits = splice_block(p + "moe", a, block_out, rng)
        nodes += block_nodes
        inits += block_inits
        x = op("Add", [block_out, a], p + "out")
        if not batched:
            x = op("Reshape", [x, op("Shape", [attn], p + "shape_2d")],
                   p + "out_rows")

    logits = op("MatMul", [x, weight("lm_head", [HIDDEN, VOCAB])], "logits")
    ids_shape = ["batch", "seq"] if batched else ["T"]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT,
                                             ids_shape + [VOCAB])]
    if output_routing:
        rows = None if batched else ["T", 2]
        for layer in range(layers):
            p = f"layer{layer}/moe"
            outputs.append(helper.make_tensor_value_info(
                p + "/block/Div_output_0", TensorProto.FLOAT, rows))
            outputs.append(helper.make_tensor_value_info(
                p + "/block/TopK_output_1", TensorProto.INT64, rows))
    graph = helper.make_graph(
        nodes, "causal_lm",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64,
                                       ids_shape)],
        outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)], producer_name="gen_causal_lm.py")
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.value_info[:]
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--layout", choices=["tokens", "batch"],
                        default="tokens")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-routing", action="store_true")
    args = parser.parse_args()
    onnx.save(build(args.layout, args.layers, args.seed, args.output_routing),
              args.out)


if __name__ == "__main__":
    main()
