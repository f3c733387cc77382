#!/usr/bin/env python3
"""Writes an MoE block in the form transformers' ONNX exporter gives the
default `grouped_mm` experts: per-expert row segments Range(ends[e-1],
ends[e]) over the CumSum of a histogram of the sorted top-k ids.

    gen_grouped_segments.py OUT.onnx [--histogram onehot|scatter] [--seed N]

The graph: router MatMul -> Softmax -> TopK(k) -> ids [T*k] sorted (TopK of
the negated ids over all T*k of them) -> histogram of the ids (`onehot`:
ReduceSum of OneHot, as torch.bincount's translation; `scatter`: the ids in
floats, Clip to [0, E-1], ScatterElements-add of float ones into float zeros,
Cast to int32, as torch.histc's) -> CumSum -> per expert e: Range(ends[e-1],
ends[e]) -> Gather of the sorted rows -> MatMul(W_e) -> Concat -> Mul by the
sorted weights -> ScatterElements-add into the token rows. Every size past
the router is data-dependent; the only bound is the histogram's total, T*k.
Hidden 16, 4 experts, top-2, a ReLU expert of width 32.
"""

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, F, E, K = 16, 32, 4, 2


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--histogram", choices=["onehot", "scatter"], default="scatter")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)

    inits = [
        numpy_helper.from_array(rng.standard_normal((H, E)).astype(np.float32), "router"),
    ]
    for e in range(E):
        inits.append(numpy_helper.from_array((rng.standard_normal((H, F)) * 0.3).astype(np.float32), f"w1_{e}"))
        inits.append(numpy_helper.from_array((rng.standard_normal((F, H)) * 0.3).astype(np.float32), f"w2_{e}"))

    n = [
        const("k", np.array([K], np.int64)),
        const("flat", np.array([-1], np.int64)),
        const("axis0", np.array([0], np.int64)),
        const("zero", np.array(0, np.int64)),
        const("one", np.array(1, np.int64)),
        const("kk", np.array(K, np.int64)),
        helper.make_node("MatMul", ["x", "router"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("TopK", ["probs", "k"], ["topw", "topi"], axis=-1),
        helper.make_node("Reshape", ["topi", "flat"], ["ids"]),
        helper.make_node("Reshape", ["topw", "flat"], ["weights"]),
        # Sort the T*k ids: the largest of -id first.
        helper.make_node("Cast", ["ids"], ["fids"], to=TensorProto.FLOAT),
        helper.make_node("Neg", ["fids"], ["negids"]),
        helper.make_node("Shape", ["ids"], ["count"]),
        helper.make_node("TopK", ["negids", "count"], ["negsorted", "perm"], axis=0),
        helper.make_node("Gather", ["ids", "perm"], ["ids_sorted"], axis=0),
        helper.make_node("Gather", ["weights", "perm"], ["w_sorted"], axis=0),
        helper.make_node("Div", ["perm", "kk"], ["token_sorted"]),
        helper.make_node("Gather", ["x", "token_sorted"], ["rows"], axis=0),
    ]
    if args.histogram == "onehot":
        n += [
            const("depth", np.array(E, np.int64)),
            const("onoff", np.array([0, 1], np.int64)),
            helper.make_node("OneHot", ["ids_sorted", "depth", "onoff"], ["hot"], axis=-1),
            helper.make_node("ReduceSum", ["hot", "axis0"], ["counts"], keepdims=0),
        ]
    else:
        n += [
            helper.make_node("Cast", ["ids_sorted"], ["fsorted"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["fsorted"], ["bins_raw"], to=TensorProto.INT64),
            const("lo", np.array(0, np.int64)),
            const("hi", np.array(E - 1, np.int64)),
            helper.make_node("Clip", ["bins_raw", "lo", "hi"], ["bins"]),
            helper.make_node("Shape", ["bins"], ["bins_shape"]),
            const("fone", np.array(1.0, np.float32)),
            helper.make_node("Expand", ["fone", "bins_shape"], ["ones"]),
            const("fzeros", np.zeros(E, np.float32)),
            helper.make_node("ScatterElements", ["fzeros", "bins", "ones"], ["fcounts"], axis=0, reduction="add"),
            helper.make_node("Cast", ["fcounts"], ["counts32"], to=TensorProto.INT32),
            helper.make_node("Cast", ["counts32"], ["counts"], to=TensorProto.INT64),
        ]
    n += [
        helper.make_node("CumSum", ["counts", "zero"], ["ends"]),
        helper.make_node("Split", ["ends"], [f"end{e}_1" for e in range(E)], axis=0, num_outputs=E),
    ]
    outs = []
    prev = "zero"
    for e in range(E):
        n += [
            helper.make_node("Squeeze", [f"end{e}_1", "axis0"], [f"end{e}"]),
            helper.make_node("Range", [prev, f"end{e}", "one"], [f"seg{e}"]),
            helper.make_node("Gather", ["rows", f"seg{e}"], [f"in{e}"], axis=0),
            helper.make_node("MatMul", [f"in{e}", f"w1_{e}"], [f"h{e}"]),
            helper.make_node("Relu", [f"h{e}"], [f"a{e}"]),
            helper.make_node("MatMul", [f"a{e}", f"w2_{e}"], [f"out{e}"]),
        ]
        outs.append(f"out{e}")
        prev = f"end{e}"
    n += [
        helper.make_node("Concat", outs, ["expert_out"], axis=0),
        helper.make_node("Unsqueeze", ["w_sorted", "one_axis"], ["w_col"]),
        const("one_axis", np.array([1], np.int64)),
        helper.make_node("Mul", ["expert_out", "w_col"], ["weighted"]),
        helper.make_node("Unsqueeze", ["token_sorted", "one_axis"], ["token_col"]),
        helper.make_node("Shape", ["weighted"], ["weighted_shape"]),
        helper.make_node("Expand", ["token_col", "weighted_shape"], ["scatter_index"]),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("ConstantOfShape", ["x_shape"], ["out_zeros"],
                         value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("ScatterElements", ["out_zeros", "scatter_index", "weighted"], ["y"], axis=0,
                         reduction="add"),
    ]
    # Constants before their first use.
    n.sort(key=lambda node: node.op_type != "Constant")
    graph = helper.make_graph(
        n, "grouped_segments",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", H])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, args.out)


if __name__ == "__main__":
    main()
