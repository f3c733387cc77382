#!/usr/bin/env python3
"""Writes a tiny generation pair with legacy cache names, for moec's tests.

The "model": logits after tokens t_0..t_k are (sum of E[t_i]) @ W, with the
embeddings, split into 2 heads of 4, as the KV cache. The decode graph takes
`input_ids [1, 1]`, `position_ids [1, 1]` and `past_key_values.0.key
[1, 2, past, 4]`, concatenates the new token's entry along `past` into
`present.0.key` and returns `logits [1, 1, V]`; the prefill graph takes the
prompt's ids and positions and returns `logits [1, n, V]` and
`present.0.key [1, 2, n, 4]`. Random weights, fixed seed.

  gen_generation_pair.py OUT_DIR [--mismatch] [--single [--attention]]

writes OUT_DIR/decode.onnx and OUT_DIR/prefill.onnx; --mismatch makes the
prefill's cache [1, 4, n, 2] (other heads and head size than the decode's);
--single writes OUT_DIR/single.onnx instead, the decode graph taking
`input_ids [1, seq]` (it runs the prompt too, with an empty past; its
logits are the last position's, [1, 1, V]). --attention makes that graph's
logits come from attention instead of the sum: the new tokens' entries are
the queries, the present both keys and values (softmax(0.5 Q K^T) V, no
mask), the last position's output projected to the vocabulary, so that moec
fuses the attention and moe-run appends to the cache in place.
"""

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB = 16
HIDDEN = 8


def const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def embed_nodes(heads, head_dim, out):
    """input_ids -> [1, heads, n, head_dim] cache entries named `out`."""
    return [
        helper.make_node("Gather", ["embed", "input_ids"], ["rows"], axis=0),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Concat", ["ids_shape", "split_shape"], ["shape4"],
                         axis=0),
        helper.make_node("Reshape", ["rows", "shape4"], ["rows4"]),
        helper.make_node("Transpose", ["rows4"], [out], perm=[0, 2, 1, 3]),
    ], [const("split_shape", np.array([heads, head_dim], dtype=np.int64))]


def model(graph):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--mismatch", action="store_true")
    parser.add_argument("--single", action="store_true")
    parser.add_argument("--attention", action="store_true")
    args = parser.parse_args()
    if args.attention and not args.single:
        parser.error("--attention goes with --single")
    rng = np.random.default_rng(5)
    embed = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    proj = rng.standard_normal((HIDDEN, VOCAB)).astype(np.float32)
    weights = [const("embed", embed), const("proj", proj)]
    ids_info = lambda n: helper.make_tensor_value_info(  # noqa: E731
        "input_ids", TensorProto.INT64, [1, n])
    pos_info = lambda n: helper.make_tensor_value_info(  # noqa: E731
        "position_ids", TensorProto.INT64, [1, n])

    # Decode: concat the new entry to the past, logits from the sum.
    nodes, extra = embed_nodes(2, 4, "new")
    nodes.append(helper.make_node("Concat", ["past_key_values.0.key", "new"],
                                  ["present.0.key"], axis=2))
    if args.attention:
        # softmax(0.5 new present^T) present, the last query's row.
        nodes += [
            helper.make_node("Transpose", ["present.0.key"], ["keys_t"],
                             perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["new", "keys_t"], ["scores"]),
            helper.make_node("Mul", ["scores", "half"], ["scaled"]),
            helper.make_node("Softmax", ["scaled"], ["probs"], axis=-1),
            helper.make_node("MatMul", ["probs", "present.0.key"],
                             ["attended"]),
            helper.make_node("Gather", ["attended", "last"], ["sum"], axis=2),
        ]
        extra += [const("half", np.array(0.5, dtype=np.float32)),
                  const("last", np.array(-1, dtype=np.int64))]
    else:
        nodes.append(helper.make_node("ReduceSum", ["present.0.key", "axis2"],
                                      ["sum"], keepdims=0))
        extra.append(const("axis2", np.array([2], dtype=np.int64)))
    nodes += [
        helper.make_node("Reshape", ["sum", "hidden_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "proj"], ["logits"]),
    ]
    extra.append(const("hidden_shape", np.array([1, 1, HIDDEN],
                                                dtype=np.int64)))
    decode = helper.make_graph(
        nodes, "decode",
        [ids_info("seq" if args.single else 1),
         pos_info("seq" if args.single else 1),
         helper.make_tensor_value_info("past_key_values.0.key",
                                       TensorProto.FLOAT, [1, 2, "past", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [1, 1, VOCAB]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT,
                                       [1, 2, "past + 1", 4])],
        weights + extra)
    os.makedirs(args.out_dir, exist_ok=True)
    if args.single:
        onnx.save(model(decode), os.path.join(args.out_dir, "single.onnx"))
        return

    # Prefill: the prompt's entries are the cache; logits from running sums.
    heads, head_dim = (4, 2) if args.mismatch else (2, 4)
    nodes, extra = embed_nodes(heads, head_dim, "present.0.key")
    nodes += [
        helper.make_node("CumSum", ["rows", "axis1"], ["running"]),
        helper.make_node("MatMul", ["running", "proj"], ["logits"]),
    ]
    extra += [const("axis1", np.array(1, dtype=np.int64))]
    prefill = helper.make_graph(
        nodes, "prefill", [ids_info("seq"), pos_info("seq")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [1, "seq", VOCAB]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT,
                                       [1, heads, "seq", head_dim])],
        weights + extra)

    onnx.save(model(decode), os.path.join(args.out_dir, "decode.onnx"))
    onnx.save(model(prefill), os.path.join(args.out_dir, "prefill.onnx"))


if __name__ == "__main__":
    main()
