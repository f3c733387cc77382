"""Writes an ONNX model whose elementwise ops all fuse into one region that
uses every instruction of a fused program: a chain of every unary op, every
binary op with y [4] (broadcast) and a constant, so that the generated CUDA
kernel covers the whole instruction set (usage: gen_fused_chain.py OUT)."""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

UNARY = ["Neg", "Abs", "Exp", "Log", "Sqrt", "Reciprocal", "Tanh", "Erf",
         "Sin", "Cos", "Floor", "Ceil", "Sigmoid", "Relu", "Softplus"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"]

# One chain: each op consumes the previous value, so that moe-fuse-elementwise
# makes the whole chain one region.
nodes, value = [], "x"


def chain(op, *inputs, **attrs):
    global value
    out = f"v{len(nodes)}" if op != "last" else "out"
    nodes.append(helper.make_node(op, [value, *inputs], [out], **attrs))
    value = out


for op in UNARY:
    chain(op)
for op in BINARY:
    chain(op, "y")
chain("Gelu", approximate="none")
chain("Gelu", approximate="tanh")
chain("Mul", "half")
nodes[-1].output[0] = "out"
graph = helper.make_graph(
    nodes, "fused_chain",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", 4]),
     helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["tokens", 4])],
    [helper.make_tensor("half", TensorProto.FLOAT, [],
                        np.array([0.5], np.float32))])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
model.ir_version = 9
onnx.checker.check_model(model, full_check=True)
onnx.save(model, sys.argv[1])
